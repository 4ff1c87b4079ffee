/* JSON scanning helpers shared by jsonscan.c and ptdigest.c: whitespace and the end of a
 * value, tracking only nesting depth and string/escape state. */
#ifndef CHAKRA_JSONSCAN_H
#define CHAKRA_JSONSCAN_H

#include <Python.h>
#include <string.h>

static inline int is_space(unsigned char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline Py_ssize_t skip_space(const unsigned char *s, Py_ssize_t pos, Py_ssize_t n) {
    while (pos < n && is_space(s[pos])) pos++;
    return pos;
}

/* End of the value starting at s[pos] (no leading whitespace), -1 if incomplete,
 * -2 on a structural error (a closing bracket where a value must start), -3 when it opens
 * more than max_depth nested arrays/objects: *deep_at is then the bracket that goes too deep.
 * Checked while scanning, so a hostile `[[[[...` is refused after max_depth bytes, however
 * long it is. */
static inline Py_ssize_t find_bounded_value_end(const unsigned char *s, Py_ssize_t pos, Py_ssize_t n,
                                                Py_ssize_t max_depth, Py_ssize_t *deep_at) {
    if (pos >= n) return -1;
    unsigned char c = s[pos];
    if (c == ']' || c == '}' || c == ',' || c == ':') return -2;
    if (c != '{' && c != '[' && c != '"') {
        /* number, true/false/null or a bare token such as NaN: runs to a delimiter */
        while (pos < n) {
            c = s[pos];
            if (c == ',' || c == ']' || c == '}' || c == ':' || is_space(c)) return pos;
            pos++;
        }
        return -1;
    }
    Py_ssize_t depth = 0;
    while (pos < n) {
        c = s[pos];
        if (c == '"') {
            pos++;
            for (;;) {
                const unsigned char *hit = memchr(s + pos, '"', (size_t)(n - pos));
                if (!hit) return -1;
                Py_ssize_t quote = hit - s;
                Py_ssize_t backslashes = 0;
                while (quote - 1 - backslashes >= pos && s[quote - 1 - backslashes] == '\\') backslashes++;
                pos = quote + 1;
                if ((backslashes & 1) == 0) break; /* an unescaped quote closes the string */
            }
            if (depth == 0) return pos;
            continue;
        }
        if (c == '{' || c == '[') {
            if (++depth > max_depth) {
                *deep_at = pos;
                return -3;
            }
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return pos + 1;
        }
        pos++;
    }
    return -1;
}

/* The same without a depth bound: for ptdigest, which walks values without recursing (and
 * whose input jsonscan has bounded already). */
static inline Py_ssize_t find_value_end(const unsigned char *s, Py_ssize_t pos, Py_ssize_t n) {
    return find_bounded_value_end(s, pos, n, PY_SSIZE_T_MAX, NULL);
}

#endif
