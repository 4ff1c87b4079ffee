/* JSON scanning helpers shared by jsonscan.c and the digests (ptdigest.c, kinetodigest.c):
 * whitespace, the end of a value (tracking only nesting depth and string/escape state), and
 * the walk over an array's elements that a digest does itself (walk_elements). */
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

/* The first byte b in s[0:len], or NULL: most JSON strings (keys, type names) are a few bytes
 * long, where a plain loop beats memchr's call and set-up; longer ones go on with memchr. */
static inline const unsigned char *find_byte(const unsigned char *s, Py_ssize_t len, unsigned char b) {
    Py_ssize_t head = len < 16 ? len : 16;
    for (Py_ssize_t i = 0; i < head; i++)
        if (s[i] == b) return s + i;
    return len > head ? memchr(s + head, b, (size_t)(len - head)) : NULL;
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
                const unsigned char *hit = find_byte(s + pos, n - pos, '"');
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

/* Whether the element ending at `end` is followed by its ',' or ']' inside s[:n]: a digest walking
 * the array itself keeps an element only then, as scan_array counts only such elements. */
static inline int element_terminated(const unsigned char *s, Py_ssize_t end, Py_ssize_t n) {
    Py_ssize_t p = skip_space(s, end, n);
    return p < n && (s[p] == ',' || s[p] == ']');
}

/* Where a walk over an array's elements stopped: as scan_array's (items, last_end, next_pos, closed). */
typedef struct {
    Py_ssize_t items, last_end, next_pos;
    int closed;
} walk_t;

/* Digests the element at pos (index: its place in this walk) and returns its end; -1 when it
 * leaves the element to the caller's slower path (incomplete in the buffer, malformed, nested
 * deeper than allowed, not followed by ',' or ']', or a content error to word), keeping nothing
 * of it; -2 with a Python error set. */
typedef Py_ssize_t (*element_fn)(void *ctx, Py_ssize_t pos, Py_ssize_t index);

/* scan_array's walk (pos: just after '[' or after an element's ','), each element digested as it
 * is found instead of scanned and digested later: every byte of an element is read once. It
 * stops after max_items elements, at the closing ']', or before the first element `element`
 * leaves (so a caller that gets no element reads that one the slower way, which words its
 * errors). Returns -1 with a Python error set, else 0. */
static inline int walk_elements(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t max_items,
                                element_fn element, void *ctx, walk_t *w) {
    w->items = 0;
    w->last_end = -1;
    w->next_pos = pos;
    w->closed = 0;
    Py_ssize_t p = skip_space(s, pos, n);
    if (p < n && s[p] == ']') { /* an empty array */
        w->closed = 1;
        w->next_pos = p + 1;
        return 0;
    }
    while (w->items < max_items) {
        p = skip_space(s, p, n);
        if (p >= n) break;
        Py_ssize_t end = element(ctx, p, w->items);
        if (end == -2) return -1;
        if (end < 0) break;
        Py_ssize_t after = skip_space(s, end, n);
        w->items++;
        w->last_end = end;
        w->next_pos = p = after + 1;
        if (s[after] == ']') { /* `element` has checked that ',' or ']' follows */
            w->closed = 1;
            break;
        }
    }
    return 0;
}

/* The walk as digest_elements returns it: (items, last_end, next_pos, closed, digest); `digest`
 * is stolen. */
static inline PyObject *walk_result(const walk_t *w, PyObject *digest) {
    if (!digest) return NULL;
    return Py_BuildValue("nnnON", w->items, w->last_end, w->next_pos, w->closed ? Py_True : Py_False, digest);
}

#endif
