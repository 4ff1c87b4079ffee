/* Digest a batch of Kineto (Chrome trace) events straight from their JSON bytes.
 *
 * Why: a long profiled window holds millions of events, and parsing each into a Python dict
 * (with its args dict) only to read seven fields cost more than the rest of the conversion.
 * This walks the batch once, validating it as JSON, and hands back the kept events as the
 * compact event objects of kinetoevents.c (no Python object per number):
 *
 *   digest(buf, start, end, names) -> dict, or None
 *     buf[start:end] is a JSON array of events (the batch jsonstream found). Per kept event
 *     (ph "X" and cat one of the nine categories kineto.py reads), in file order:
 *       "cpu": [CpuEvent], "runtime": [RuntimeEvent] (only those with a correlation),
 *       "device": [DeviceEvent];
 *     ids are int or None (None where absent or not an integer, as kineto._int_or_none);
 *     "cpu_spans": bytes, int64 (start, end) of each CPU event's bytes in buf (its args are
 *     parsed where wanted); "rf_ids": how many CPU events carry a record-function id;
 *     "steps": whether a CPU event's name starts with "ProfilerStep#";
 *     names: a dict shared across batches, so that each distinct name (and thread) is one object;
 *     "odd": (element index in the batch, start, end) of events this digest leaves to
 *     Python's reading, and
 *     "order": bytes, one kind code per kept or odd event in file order (0 cpu, 1 runtime,
 *     2 device, 3 odd), so that Python can interleave odd events where they belong.
 *   None when anything in the batch is not strictly valid JSON (grammar, string escapes,
 *   control characters, UTF-8): the caller then parses the batch as before, which accepts
 *   what JSON allows and refuses the rest with the file's byte offset.
 *
 * "Odd" is every event whose reading could differ from Python's or must end in an error
 * message kineto.py words: a member name or ph/cat/name value with escapes, ph/cat/name/tid/
 * ts/dur/args of an unexpected JSON type, a string tid, times outside [0, 2**62), integers
 * beyond int64, a device event whose stream is missing-with-a-string-tid, not an integer or
 * outside [0, 2**31). Numbers are converted as orjson does: integer tokens exactly, others by
 * PyOS_string_to_double (correctly rounded, as orjson's parser). Nesting is walked with an explicit stack
 * (jsonscan has bounded the batch's depth already), so no input can exhaust the C stack.
 *
 *   digest_elements(buf, pos, end, names, max_items, max_depth) -> (items, last_end, next_pos, closed, dict)
 *     The same digest of the elements jsonscan.scan_array(buf, pos, max_items, max_depth, end)
 *     would find, walked once (jsonscan.h, walk_elements), bounding the nesting itself; "odd"
 *     indices count from pos. It stops before the first event that is not strictly valid JSON,
 *     nests deeper than max_depth or is incomplete in buf[:end]: the caller reads that one as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "jsonscan.h"
#include "kinetoevents.h"

/* A member name or category to match, with its length: matched for every member of every event. */
typedef struct {
    const char *text;
    Py_ssize_t len;
} word_t;
#define KEY(text) {text, sizeof(text) - 1}

static const word_t CATEGORIES[] = {KEY("cpu_op"), KEY("user_annotation"), KEY("kernel"), KEY("gpu_memcpy"),
                                   KEY("gpu_memset"), KEY("cuda_runtime"), KEY("cuda_driver"), KEY("hip_runtime")};
enum { N_CATEGORIES = 8, FIRST_DEVICE = 2, FIRST_RUNTIME = 5 };
enum { K_CPU = 0, K_RUNTIME = 1, K_DEVICE = 2, K_ODD = 3 };
#define MAX_MICROS 4611686018427387904.0 /* 2**62 */

typedef struct {
    const unsigned char *s;
    Py_ssize_t n, pos;
    char *stack; /* open containers of the value being validated: '{' or '[' */
    Py_ssize_t stack_cap;
    /* the levels of nesting skip_value may open (PY_SSIZE_T_MAX where jsonscan has bounded the
     * batch), and whether an event must be followed by ',' or ']' in s[:n] (digest_elements) */
    Py_ssize_t depth_left;
    int walked;
} cur_t;

static inline void ws(cur_t *c) { c->pos = skip_space(c->s, c->pos, c->n); }

/* Length of the strictly valid UTF-8 sequence at p (lead byte >= 0x80), 0 if invalid. */
static int utf8_length(const unsigned char *p, Py_ssize_t left) {
    unsigned char b = p[0];
    int len;
    unsigned cp;
    if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; cp = b & 0x0F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; cp = b & 0x07; }
    else return 0;
    if (left < len) return 0;
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* How many of the 8 bytes at p a string's content holds as they are (8 when all): it stops at
 * '"', '\\', a control byte (< 0x20) or a UTF-8 lead (>= 0x80), which string_token checks one by
 * one. Kernel and operator names run to hundreds of plain bytes, read here a word at a time.
 * Each test sets a byte's high bit; a borrow can set more only above a byte that matched, so
 * the lowest set bit is the first such byte. */
static inline int plain_bytes(const unsigned char *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t x, quote, backslash;
    memcpy(&x, p, 8);
    quote = x ^ (ones * '"');
    backslash = x ^ (ones * '\\');
    uint64_t stops = (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | (x - ones * 0x20) | x) & highs;
    return stops ? __builtin_ctzll(stops) >> 3 : 8;
#else
    int k = 0;
    while (k < 8 && p[k] != '"' && p[k] != '\\' && p[k] >= 0x20 && p[k] < 0x80) k++;
    return k;
#endif
}

/* A string at c->pos: validated, its content span [*a, *b) and whether it has escapes. */
static int string_token(cur_t *c, Py_ssize_t *a, Py_ssize_t *b, int *escaped) {
    const unsigned char *s = c->s;
    Py_ssize_t p = c->pos, n = c->n;
    if (p >= n || s[p] != '"') return -1;
    *a = ++p;
    *escaped = 0;
    while (p < n) {
        for (int plain = 8; plain == 8 && p + 8 <= n; p += plain) plain = plain_bytes(s + p);
        if (p >= n) break;
        unsigned char ch = s[p];
        if (ch == '"') {
            *b = p;
            c->pos = p + 1;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch == '\\') {
            *escaped = 1;
            if (p + 1 >= n) return -1;
            unsigned char e = s[p + 1];
            if (e == 'u') {
                if (p + 5 >= n) return -1;
                for (int k = 2; k < 6; k++)
                    if (!((s[p + k] >= '0' && s[p + k] <= '9') || ((s[p + k] | 0x20) >= 'a' && (s[p + k] | 0x20) <= 'f')))
                        return -1;
                p += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                p += 2;
            } else {
                return -1;
            }
            continue;
        }
        if (ch >= 0x80) {
            int len = utf8_length(s + p, n - p);
            if (!len) return -1;
            p += len;
            continue;
        }
        p++;
    }
    return -1;
}

/* A number at c->pos by JSON's grammar; *is_int: an integer token that fits int64. */
static int number_token(cur_t *c, int64_t *value, int *is_int) {
    const unsigned char *s = c->s;
    Py_ssize_t p = c->pos, n = c->n;
    int neg = 0, overflow = 0, fraction = 0;
    uint64_t v = 0;
    if (p < n && s[p] == '-') { neg = 1; p++; }
    if (p >= n || s[p] < '0' || s[p] > '9') return -1;
    if (s[p] == '0') {
        p++;
    } else {
        while (p < n && s[p] >= '0' && s[p] <= '9') {
            unsigned d = s[p] - '0';
            if (v > (UINT64_MAX - d) / 10) overflow = 1; else v = v * 10 + d;
            p++;
        }
    }
    if (p < n && s[p] == '.') {
        fraction = 1;
        p++;
        if (p >= n || s[p] < '0' || s[p] > '9') return -1;
        while (p < n && s[p] >= '0' && s[p] <= '9') p++;
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        fraction = 1;
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-')) p++;
        if (p >= n || s[p] < '0' || s[p] > '9') return -1;
        while (p < n && s[p] >= '0' && s[p] <= '9') p++;
    }
    *is_int = !fraction && !overflow && v <= (uint64_t)INT64_MAX + (uint64_t)neg;
    *value = *is_int ? (neg ? (int64_t)(0 - v) : (int64_t)v) : 0;
    c->pos = p;
    return 0;
}

static int literal_token(cur_t *c) {
    static const char *words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(words[k]);
        if ((size_t)(c->n - c->pos) >= len && memcmp(c->s + c->pos, words[k], len) == 0) {
            c->pos += (Py_ssize_t)len;
            return 0;
        }
    }
    return -1;
}

static int push(cur_t *c, Py_ssize_t depth, char kind) {
    if (depth >= c->stack_cap) {
        Py_ssize_t cap = c->stack_cap ? c->stack_cap * 2 : 64;
        char *p = PyMem_Realloc(c->stack, (size_t)cap);
        if (!p) return -1;
        c->stack = p;
        c->stack_cap = cap;
    }
    c->stack[depth] = kind;
    return 0;
}

/* Validate and pass the value at c->pos (white space before it skipped). */
static int skip_value(cur_t *c) {
    Py_ssize_t depth = 0, a, b;
    int64_t v;
    int flag;
    for (;;) {
        ws(c);
        if (c->pos >= c->n) return -1;
        unsigned char ch = c->s[c->pos];
        if (ch == '{' || ch == '[') {
            if (depth >= c->depth_left || push(c, depth++, (char)ch) < 0) return -1;
            c->pos++;
            ws(c);
            if (c->pos < c->n && c->s[c->pos] == (ch == '{' ? '}' : ']')) {
                c->pos++;
                depth--;
            } else {
                if (ch == '{') {
                    if (string_token(c, &a, &b, &flag) < 0) return -1;
                    ws(c);
                    if (c->pos >= c->n || c->s[c->pos] != ':') return -1;
                    c->pos++;
                }
                continue;
            }
        } else if (ch == '"') {
            if (string_token(c, &a, &b, &flag) < 0) return -1;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            if (number_token(c, &v, &flag) < 0) return -1;
        } else if (literal_token(c) < 0) {
            return -1;
        }
        /* after a value: close containers, or go on to the next member / element */
        for (;;) {
            if (depth == 0) return 0;
            ws(c);
            if (c->pos >= c->n) return -1;
            char kind = c->stack[depth - 1];
            ch = c->s[c->pos];
            if (ch == ',') {
                c->pos++;
                if (kind == '{') {
                    ws(c);
                    if (string_token(c, &a, &b, &flag) < 0) return -1;
                    ws(c);
                    if (c->pos >= c->n || c->s[c->pos] != ':') return -1;
                    c->pos++;
                }
                break;
            }
            if (ch != (kind == '{' ? '}' : ']')) return -1;
            c->pos++;
            depth--;
        }
    }
}

/* A value's span: where it starts and ends in the buffer (-1: absent). */
typedef struct { Py_ssize_t a, b; } span_t;

enum { F_PH, F_CAT, F_NAME, F_TID, F_TS, F_DUR, F_ARGS, N_FIELDS };
static const word_t FIELDS[] = {KEY("ph"), KEY("cat"), KEY("name"), KEY("tid"), KEY("ts"), KEY("dur"), KEY("args")};
enum { A_EXTERNAL, A_RF, A_CORRELATION, A_STREAM, N_ARGS };
static const word_t ARGS[] = {KEY("External id"), KEY("Record function id"), KEY("correlation"), KEY("stream")};

static int key_index(const unsigned char *s, Py_ssize_t a, Py_ssize_t b, const word_t *keys, int n_keys) {
    for (int k = 0; k < n_keys; k++)
        if (b - a == keys[k].len && s[a] == (unsigned char)keys[k].text[0] && memcmp(s + a, keys[k].text, (size_t)(b - a)) == 0)
            return k;
    return -1;
}

/* Walk an object's members (c->pos at '{'), recording the last value span of each of `keys`.
 * Returns 0, 1 when a member name has escapes (the event is odd), -1 when malformed. The last
 * value of keys[nest] (nest >= 0: an event's args), where it is an object, is walked in the
 * same pass for ARGS: their spans in nested[] and *nested_odd as this returns it (all
 * absent and 0 when that value is not an object), so that its bytes are read once. */
static void clear_nested(span_t *nested, int *nested_odd) {
    *nested_odd = 0;
    for (int k = 0; k < N_ARGS; k++) nested[k].a = -1;
}

static int walk_members(cur_t *c, const word_t *keys, int n_keys, span_t *found, int nest, span_t *nested,
                        int *nested_odd) {
    Py_ssize_t a, b;
    int escaped, odd = 0;
    for (int k = 0; k < n_keys; k++) found[k].a = -1;
    if (nest >= 0) clear_nested(nested, nested_odd);
    c->pos++;
    ws(c);
    if (c->pos < c->n && c->s[c->pos] == '}') { c->pos++; return 0; }
    for (;;) {
        ws(c);
        if (string_token(c, &a, &b, &escaped) < 0) return -1;
        odd |= escaped;
        int k = escaped ? -1 : key_index(c->s, a, b, keys, n_keys);
        ws(c);
        if (c->pos >= c->n || c->s[c->pos] != ':') return -1;
        c->pos++;
        ws(c);
        Py_ssize_t at = c->pos;
        if (k >= 0 && k == nest) clear_nested(nested, nested_odd);
        if (k >= 0 && k == nest && at < c->n && c->s[at] == '{') {
            if (c->depth_left < 1) return -1; /* the object opens a level more than allowed */
            c->depth_left--; /* its members are a level deeper */
            *nested_odd = walk_members(c, ARGS, N_ARGS, nested, -1, NULL, NULL);
            c->depth_left++;
            if (*nested_odd < 0) return -1;
        } else if (skip_value(c) < 0) {
            return -1;
        }
        if (k >= 0) { found[k].a = at; found[k].b = c->pos; }
        ws(c);
        if (c->pos >= c->n) return -1;
        if (c->s[c->pos] == ',') { c->pos++; continue; }
        if (c->s[c->pos] == '}') { c->pos++; return odd; }
        return -1;
    }
}

/* An integer value of a span: 1 (in *v), 0 if the span is absent or not an integer token,
 * -1 if an integer token beyond int64 (odd: Python reads it as a big int). */
static int span_int(const unsigned char *s, span_t sp, int64_t *v) {
    if (sp.a < 0) return 0;
    unsigned char ch = s[sp.a];
    if (ch != '-' && (ch < '0' || ch > '9')) return 0;
    cur_t t = {s, sp.b, sp.a, NULL, 0, 0, 0}; /* for a number token only */
    int is_int;
    if (number_token(&t, v, &is_int) < 0) return 0;
    for (Py_ssize_t p = sp.a; p < sp.b; p++)
        if (s[p] == '.' || s[p] == 'e' || s[p] == 'E') return 0;
    return is_int ? 1 : -1;
}

/* The double of a plain decimal (digits, at most one '.'), where Clinger's fast path gives it:
 * its digits read as one integer below 2**53 and at most 22 of them after the point, so that
 * the integer and the power of ten are exact doubles and one division rounds correctly (as
 * PyOS_string_to_double does). Kineto's times ("4912994631706.273") are such decimals, and
 * the general conversion was a tenth of the digest's time. 0 when the fast path does not apply. */
static int exact_decimal(const unsigned char *p, Py_ssize_t len, double *v) {
    static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    uint64_t digits = 0;
    int after_point = -1;
    for (Py_ssize_t k = 0; k < len; k++) {
        if (p[k] == '.' && after_point < 0) {
            after_point = 0;
            continue;
        }
        if (p[k] < '0' || p[k] > '9') return 0;
        digits = digits * 10 + (p[k] - '0');
        if (digits >= ((uint64_t)1 << 53)) return 0;
        if (after_point >= 0) after_point++;
    }
    if (after_point > 22) return 0;
    *v = (double)digits / POW10[after_point > 0 ? after_point : 0];
    return 1;
}

/* A time (ts, dur): 1 with *v in [0, 2**62), 0 when absent (0.0), -1 otherwise (odd). */
static int span_time(const unsigned char *s, span_t sp, double *v) {
    if (sp.a < 0) { *v = 0.0; return 0; }
    unsigned char ch = s[sp.a];
    if (ch != '-' && (ch < '0' || ch > '9')) return -1;
    char text[64];
    Py_ssize_t len = sp.b - sp.a;
    if (len >= (Py_ssize_t)sizeof text) return -1;
    int64_t iv;
    int is_int = 0;
    cur_t t = {s, sp.b, sp.a, NULL, 0, 0, 0}; /* for a number token only */
    if (number_token(&t, &iv, &is_int) < 0) return -1;
    int integral = 1;
    for (Py_ssize_t p = sp.a; p < sp.b; p++)
        if (s[p] == '.' || s[p] == 'e' || s[p] == 'E') integral = 0;
    if (integral && !is_int) return -1; /* a big int: float(int) rounds as Python does, left to it */
    if (is_int) {
        *v = (double)iv;
    } else if (!exact_decimal(s + sp.a, len, v)) {
        /* PyOS_string_to_double: correctly rounded and independent of the C locale, unlike strtod */
        memcpy(text, s + sp.a, (size_t)len);
        text[len] = 0;
        *v = PyOS_string_to_double(text, NULL, NULL);
        if (*v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    }
    return (*v >= 0.0 && *v < MAX_MICROS) ? 1 : -1;
}

/* A plain (escape-free) string span's content, or -1 when not a string / escaped. */
static int span_plain_string(const unsigned char *s, span_t sp, Py_ssize_t *a, Py_ssize_t *b) {
    if (sp.a < 0 || s[sp.a] != '"') return -1;
    *a = sp.a + 1;
    *b = sp.b - 1;
    return memchr(s + *a, '\\', (size_t)(*b - *a)) ? -1 : 0;
}

typedef struct {
    PyObject *lists[3]; /* the kept events of each kind */
    PyObject *odd, *names, *categories[N_CATEGORIES];
    char *order;
    Py_ssize_t n_order, order_cap;
    int64_t *spans; /* (start, end) of each CPU event */
    Py_ssize_t n_spans, spans_cap, rf_ids;
    int steps;
} out_t;

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* Grow a buffer to hold at least `need` items of `size` bytes. */
static int reserve(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t size) {
    if (need <= *cap) return 0;
    Py_ssize_t n = *cap ? *cap * 2 : 4096;
    while (n < need) n *= 2;
    void *q = PyMem_Realloc(*p, (size_t)n * size);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q;
    *cap = n;
    return 0;
}

static int put_order(out_t *o, char kind) {
    if (reserve((void **)&o->order, &o->order_cap, o->n_order + 1, 1) < 0) return -1;
    o->order[o->n_order++] = kind;
    return 0;
}

/* An id slot: its value where the event carries it as an integer, else None. */
static void set_id(event_t *e, int k, int has, int64_t v) {
    if (has != 1) return; /* event_new left it None */
    e->slots[k].id = v;
    e->none_mask &= ~(1u << k);
}

/* One shared object per distinct value (names, threads repeat): `value` is released. */
static PyObject *shared(out_t *o, PyObject *value) {
    if (!value) return NULL;
    PyObject *one = PyDict_SetDefault(o->names, value, value);
    Py_XINCREF(one);
    Py_DECREF(value);
    return one;
}

/* A name as a str shared by every event of that name. */
static PyObject *shared_name(out_t *o, const unsigned char *s, Py_ssize_t a, Py_ssize_t b) {
    return shared(o, PyUnicode_DecodeUTF8((const char *)s + a, b - a, "strict"));
}

/* Digest one event (c->pos at '{'). 0: done (kept, skipped or odd), -1 malformed, -2 Python error. */
static int digest_event(cur_t *c, Py_ssize_t index, out_t *o) {
    span_t f[N_FIELDS], args[N_ARGS];
    const unsigned char *s = c->s;
    Py_ssize_t at = c->pos;
    int args_odd = 0;
    int odd = walk_members(c, FIELDS, N_FIELDS, f, F_ARGS, args, &args_odd);
    if (odd < 0 || (c->walked && !element_terminated(s, c->pos, c->n))) return -1;
    Py_ssize_t a, b, na = 0, nb = 0;
    int category = -1;
    if (!odd) {
        if (f[F_PH].a < 0 || s[f[F_PH].a] != '"') return 0; /* event.get("ph") != "X" */
        if (span_plain_string(s, f[F_PH], &a, &b) < 0) { odd = 1; goto decided; }
        if (b - a != 1 || s[a] != 'X') return 0;
        if (f[F_CAT].a < 0 || s[f[F_CAT].a] != '"') return 0;
        if (span_plain_string(s, f[F_CAT], &a, &b) < 0) { odd = 1; goto decided; }
        category = key_index(s, a, b, CATEGORIES, N_CATEGORIES);
        if (category < 0) return 0;
        if (f[F_NAME].a >= 0 && span_plain_string(s, f[F_NAME], &na, &nb) < 0) { odd = 1; goto decided; }
        if (f[F_TID].a >= 0 && s[f[F_TID].a] != '-' && (s[f[F_TID].a] < '0' || s[f[F_TID].a] > '9')) {
            odd = 1;
            goto decided;
        }
        if (f[F_ARGS].a >= 0 && (s[f[F_ARGS].a] != '{' || args_odd)) { odd = 1; goto decided; }
    }
decided:;
    int64_t tid = 0, ids[N_ARGS] = {0};
    int has[N_ARGS] = {0};
    double ts = 0, dur = 0;
    if (!odd) {
        int t = f[F_TID].a >= 0 ? span_int(s, f[F_TID], &tid) : 1;
        if (t != 1 || span_time(s, f[F_TS], &ts) < 0 || span_time(s, f[F_DUR], &dur) < 0) odd = 1;
        for (int k = 0; k < N_ARGS && !odd; k++)
            if ((has[k] = span_int(s, args[k], &ids[k])) < 0) odd = 1;
        if (!odd && category >= FIRST_DEVICE && category < FIRST_RUNTIME) {
            if (args[A_STREAM].a < 0) { has[A_STREAM] = 1; ids[A_STREAM] = tid; }
            if (has[A_STREAM] != 1 || ids[A_STREAM] < 0 || ids[A_STREAM] >= ((int64_t)1 << 31)) odd = 1;
        }
    }
    if (odd) {
        if (put_order(o, K_ODD) < 0) return -2;
        return append_new(o->odd, Py_BuildValue("(nnn)", index, at, c->pos)) < 0 ? -2 : 0;
    }
    int kind = category < FIRST_DEVICE ? K_CPU : category < FIRST_RUNTIME ? K_DEVICE : K_RUNTIME;
    if (kind == K_RUNTIME && has[A_CORRELATION] != 1) return 0; /* kineto.py keeps launches with a correlation */
    PyObject *name = f[F_NAME].a >= 0 ? shared_name(o, s, na, nb) : PyUnicode_FromString("");
    if (!name) return -2;
    event_t *e = event_new(kind == K_CPU ? &CpuEventType : kind == K_RUNTIME ? &RuntimeEventType : &DeviceEventType);
    if (!e) { Py_DECREF(name); return -2; }
    PyObject *thread = kind == K_DEVICE ? NULL : shared(o, PyLong_FromLongLong(tid));
    if (kind != K_DEVICE && !thread) { Py_DECREF(name); Py_DECREF(e); return -2; }
    if (kind == K_CPU) {
        Py_SETREF(e->slots[CPU_NAME].obj, name);
        Py_SETREF(e->slots[CPU_TID].obj, thread);
        e->slots[CPU_TS].num = ts;
        e->slots[CPU_DUR].num = dur;
        set_id(e, CPU_EXTERNAL, has[A_EXTERNAL], ids[A_EXTERNAL]);
        set_id(e, CPU_RF, has[A_RF], ids[A_RF]);
        o->rf_ids += has[A_RF] == 1;
        o->steps |= nb - na >= 13 && memcmp(s + na, "ProfilerStep#", 13) == 0;
        if (reserve((void **)&o->spans, &o->spans_cap, o->n_spans + 2, sizeof(int64_t)) < 0) { Py_DECREF(e); return -2; }
        o->spans[o->n_spans++] = at;
        o->spans[o->n_spans++] = c->pos;
    } else if (kind == K_RUNTIME) {
        Py_SETREF(e->slots[RT_NAME].obj, name);
        Py_SETREF(e->slots[RT_TID].obj, thread);
        e->slots[RT_TS].num = ts;
        e->slots[RT_DUR].num = dur;
        set_id(e, RT_CORRELATION, 1, ids[A_CORRELATION]);
        set_id(e, RT_EXTERNAL, has[A_EXTERNAL], ids[A_EXTERNAL]);
    } else {
        Py_SETREF(e->slots[DEV_NAME].obj, name);
        Py_INCREF(o->categories[category]);
        Py_SETREF(e->slots[DEV_CATEGORY].obj, o->categories[category]);
        e->slots[DEV_TS].num = ts;
        e->slots[DEV_DUR].num = dur;
        set_id(e, DEV_STREAM, 1, ids[A_STREAM]);
        set_id(e, DEV_EXTERNAL, has[A_EXTERNAL], ids[A_EXTERNAL]);
        set_id(e, DEV_CORRELATION, has[A_CORRELATION], ids[A_CORRELATION]);
    }
    if (append_new(o->lists[kind], (PyObject *)e) < 0) return -2;
    return put_order(o, (char)kind) < 0 ? -2 : 0;
}

/* The digest's empty lists; -1 with a Python error set. `names` is borrowed. */
static int out_init(out_t *o, PyObject *names) {
    o->names = names;
    Py_INCREF(names);
    if (!(o->odd = PyList_New(0))) return -1;
    for (int kind = 0; kind < 3; kind++)
        if (!(o->lists[kind] = PyList_New(0))) return -1;
    for (int k = 0; k < N_CATEGORIES; k++)
        if (!(o->categories[k] = shared(o, PyUnicode_FromStringAndSize(CATEGORIES[k].text, CATEGORIES[k].len)))) return -1;
    return 0;
}

/* The digest as digest returns it. */
static PyObject *out_result(out_t *o) {
    return Py_BuildValue("{s:O,s:O,s:O,s:y#,s:n,s:O,s:O,s:y#}", "cpu", o->lists[K_CPU], "runtime",
                         o->lists[K_RUNTIME], "device", o->lists[K_DEVICE], "cpu_spans",
                         o->spans ? (const char *)o->spans : "", o->n_spans * (Py_ssize_t)sizeof(int64_t), "rf_ids",
                         o->rf_ids, "steps", o->steps ? Py_True : Py_False, "odd", o->odd, "order",
                         o->order ? o->order : "", o->n_order);
}

static void out_free(out_t *o, cur_t *c) {
    for (int kind = 0; kind < 3; kind++) Py_XDECREF(o->lists[kind]);
    for (int k = 0; k < N_CATEGORIES; k++) Py_XDECREF(o->categories[k]);
    Py_XDECREF(o->odd);
    Py_XDECREF(o->names);
    PyMem_Free(o->order);
    PyMem_Free(o->spans);
    PyMem_Free(c->stack);
}

/* An element that is not an object (c->pos at its first byte): left to kineto.py, which refuses
 * it, as an odd event. 0: done, -1 malformed, -2 Python error. */
static int odd_element(cur_t *c, Py_ssize_t index, out_t *o) {
    Py_ssize_t at = c->pos;
    if (skip_value(c) < 0) return -1;
    if (put_order(o, K_ODD) < 0) return -2;
    return append_new(o->odd, Py_BuildValue("(nnn)", index, at, c->pos)) < 0 ? -2 : 0;
}

static PyObject *py_digest(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*nnO!", &view, &start, &end, &PyDict_Type, &names)) return NULL;
    PyObject *result = NULL;
    out_t o = {0};
    cur_t c = {(const unsigned char *)view.buf, end, start, NULL, 0, PY_SSIZE_T_MAX, 0};
    if (start < 0 || end > view.len || start >= end) {
        PyErr_SetString(PyExc_ValueError, "bad batch bounds");
        goto done;
    }
    if (out_init(&o, names) < 0) goto done;
    int malformed = 0;
    Py_ssize_t index = 0;
    ws(&c);
    if (c.pos >= c.n || c.s[c.pos] != '[') { malformed = 1; goto digested; }
    c.pos++;
    ws(&c);
    if (c.pos < c.n && c.s[c.pos] == ']') goto digested;
    for (;; index++) {
        ws(&c);
        int r = (c.pos < c.n && c.s[c.pos] == '{') ? digest_event(&c, index, &o) : odd_element(&c, index, &o);
        if (r == -2) goto done;
        if (r < 0) { malformed = 1; break; }
        ws(&c);
        if (c.pos < c.n && c.s[c.pos] == ',') { c.pos++; continue; }
        if (c.pos < c.n && c.s[c.pos] == ']') break;
        malformed = 1;
        break;
    }
digested:
    if (malformed) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    result = out_result(&o);
done:
    out_free(&o, &c);
    PyBuffer_Release(&view);
    return result;
}

typedef struct {
    cur_t c;
    out_t *o;
    Py_ssize_t max_depth;
} walk_ctx_t;

/* walk_elements' element: an event digested (kept, skipped or odd), or left (not strictly valid
 * JSON, too deep, incomplete: the caller parses it as before). */
static Py_ssize_t walked_event(void *ctx, Py_ssize_t pos, Py_ssize_t index) {
    walk_ctx_t *w = ctx;
    cur_t *c = &w->c;
    c->pos = pos;
    int is_event = c->s[pos] == '{';
    c->depth_left = is_event ? w->max_depth - 1 : w->max_depth; /* an event's members are inside it */
    int r = is_event ? digest_event(c, index, w->o) : odd_element(c, index, w->o);
    if (r == -2) return -2;
    if (r < 0 || (!is_event && !element_terminated(c->s, c->pos, c->n))) return -1;
    return c->pos;
}

static PyObject *py_digest_elements(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, max_items, max_depth;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*nnO!nn", &view, &pos, &end, &PyDict_Type, &names, &max_items, &max_depth))
        return NULL;
    PyObject *result = NULL;
    out_t o = {0};
    walk_ctx_t ctx = {{(const unsigned char *)view.buf, end, pos, NULL, 0, max_depth, 1}, &o, max_depth};
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "bad walk bounds");
        goto done;
    }
    if (out_init(&o, names) < 0) goto done;
    walk_t w;
    /* with fewer than one level allowed, every event is left to the scanner, which refuses it */
    if (walk_elements(ctx.c.s, end, pos, max_depth < 1 ? 0 : max_items, walked_event, &ctx, &w) < 0) goto done;
    result = walk_result(&w, out_result(&o));
done:
    out_free(&o, &ctx.c);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"digest", py_digest, METH_VARARGS, "Digest a JSON array of Kineto events into the events kineto.py keeps."},
    {"digest_elements", py_digest_elements, METH_VARARGS,
     "digest_elements(buf, pos, end, names, max_items, max_depth): walk and digest array elements in buf[:end]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kinetodigest", "Kineto trace event digest.", -1, NULL,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kinetodigest(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, methods) < 0 || PyModule_AddFunctions(m, EVENT_METHODS) < 0 || events_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
