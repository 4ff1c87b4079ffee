/* Digest a batch of PyTorch execution-trace nodes straight from their JSON bytes.
 *
 * Why: parsing a node into Python objects (about 120 of them per node: attrs dicts, tensor
 * lists, shape lists) costs more than everything conversion does with it. Conversion needs
 * only a few fields of most nodes, so this walks the JSON once and fills columns:
 *
 *   digest(buf, start, end, flat) -> dict
 *     buf[start:end] is a JSON array of node objects; flat selects the "1.0.1" layout
 *     (rf_id, parent, ... as members; inputs / input_shapes / input_types lists) instead of
 *     the attrs layout (ctrl_deps; inputs = {values, shapes, types}; attrs = [{name, value}]).
 *   Result (n nodes, int64 columns as bytes):
 *     "ids", "parents" (-1: none), "rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid",
 *     "node_starts", "node_ends" (byte offsets of each node object in buf),
 *     "tensor_bytes" (bytes of tensors read + written), "reads", "read_ends", "writes",
 *     "write_ends" (storage keys, CSR by node), "names", "op_schemas" (lists of str),
 *     "io": for inputs values/shapes/types then outputs values/shapes/types, each
 *     (int32 offsets bytes, data bytes) of the text with whitespace outside strings removed,
 *     and "inputs_present", "outputs_present" (bytes of 0/1).
 *   A tensor value is [tensor_id, storage_id, offset, numel, itemsize, device]; its storage
 *   key is storage_id, or -1 - tensor_id when storage_id is 0. Nodes named c10d::* also
 *   write their input tensors (collectives fill them in place). Raises ValueError
 *   "node K at byte B: what" (K: the node's index in the batch) on a malformed or incomplete
 *   node, and "node K at byte B: node id I: what" on a well-formed node with wrong content:
 *   a negative id, a parent (ctrl_deps) that is neither an integer nor null, attrs that are
 *   not a list of named entries, inputs/outputs that are not objects (attrs layout) or
 *   whose values, shapes and types are not lists. The walk is iterative except for tensor
 *   lists (at most 64 levels), so no nesting can exhaust the C stack.
 *
 *   digest_elements(buf, pos, end, flat, max_items, max_depth) -> (items, last_end, next_pos, closed, dict)
 *     The same digest of the elements jsonscan.scan_array(buf, pos, max_items, max_depth, end)
 *     would find, walked once (jsonscan.h, walk_elements): the dict is digest's, of `items`
 *     nodes. It stops before the first node it cannot digest (incomplete in buf[:end], nested
 *     deeper than max_depth, malformed or wrong in content) and raises nothing about it: the
 *     caller scans and digests that one as before, which words the error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "jsonscan.h"

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->data, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(buf_t *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int put_i64(buf_t *b, int64_t v) { return buf_put(b, &v, 8); }

static PyObject *buf_bytes(buf_t *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }

/* ---------------------------------------------------------------- parsing primitives */
typedef struct {
    const unsigned char *s;
    Py_ssize_t n, pos;
    /* of a node walked by digest_elements (else PY_SSIZE_T_MAX and 0): the levels of nesting
     * its elements may open, and whether its node must be followed by ',' or ']' in s[:n] */
    Py_ssize_t max_depth;
    int walked;
} cur_t;

static inline void ws(cur_t *c) { c->pos = skip_space(c->s, c->pos, c->n); }

/* An integer token; *is_int = 0 for other numbers (fraction, exponent, overflow). */
static int parse_number(cur_t *c, int64_t *out, int *is_int) {
    Py_ssize_t p = c->pos, n = c->n;
    int neg = 0, digits = 0, overflow = 0;
    uint64_t v = 0;
    if (p < n && c->s[p] == '-') { neg = 1; p++; }
    while (p < n && c->s[p] >= '0' && c->s[p] <= '9') {
        unsigned d = c->s[p] - '0';
        if (v > (UINT64_MAX - d) / 10) overflow = 1; else v = v * 10 + d;
        p++; digits++;
    }
    *is_int = digits > 0 && !overflow && (p >= n || (c->s[p] != '.' && c->s[p] != 'e' && c->s[p] != 'E'));
    if (*is_int && !neg && v > (uint64_t)INT64_MAX) *is_int = 0;
    *out = *is_int ? (neg ? -(int64_t)v : (int64_t)v) : 0;
    /* the common case, a number already read to its delimiter: where find_value_end would stop */
    if (p > c->pos && p < n) {
        unsigned char d = c->s[p];
        if (d == ',' || d == ']' || d == '}' || d == ':' || is_space(d)) {
            c->pos = p;
            return 0;
        }
    }
    Py_ssize_t end = find_value_end(c->s, c->pos, n);
    if (end < 0) return -1;
    c->pos = end;
    return 0;
}

static int skip(cur_t *c) {
    Py_ssize_t end = find_value_end(c->s, c->pos, c->n);
    if (end < 0) return -1;
    c->pos = end;
    return 0;
}

/* Pass a member's value with `open` levels of nesting open around it (the node object, ...):
 * -1 also when it opens more than the cursor's max_depth allows in all. */
static int skip_nested(cur_t *c, Py_ssize_t open) {
    Py_ssize_t deep_at, end = find_bounded_value_end(c->s, c->pos, c->n, c->max_depth - open, &deep_at);
    if (end < 0) return -1;
    c->pos = end;
    return 0;
}

/* A string token: its content span (without quotes) and whether it has escapes. */
static int string_span(cur_t *c, Py_ssize_t *a, Py_ssize_t *b, int *escaped) {
    if (c->pos >= c->n || c->s[c->pos] != '"') return -1;
    Py_ssize_t end = find_value_end(c->s, c->pos, c->n);
    if (end < 0) return -1;
    *a = c->pos + 1;
    *b = end - 1;
    *escaped = find_byte(c->s + *a, *b - *a, '\\') != NULL;
    c->pos = end;
    return 0;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= h - '0';
        else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

static int put_utf8(buf_t *b, unsigned cp) {
    unsigned char u[4];
    int n;
    if (cp < 0x80) { u[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = 0xC0 | (cp >> 6); u[1] = 0x80 | (cp & 0x3F); n = 2; }
    else if (cp < 0x10000) { u[0] = 0xE0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 0x3F); u[2] = 0x80 | (cp & 0x3F); n = 3; }
    else { u[0] = 0xF0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 0x3F); u[2] = 0x80 | ((cp >> 6) & 0x3F); u[3] = 0x80 | (cp & 0x3F); n = 4; }
    return buf_put(b, u, n);
}

/* A Python str from a JSON string's content span. */
static PyObject *decode_string(const unsigned char *s, Py_ssize_t a, Py_ssize_t b, int escaped, buf_t *tmp) {
    if (!escaped) return PyUnicode_DecodeUTF8((const char *)s + a, b - a, "replace");
    tmp->len = 0;
    for (Py_ssize_t p = a; p < b; p++) {
        unsigned char ch = s[p];
        if (ch != '\\' || p + 1 >= b) { if (buf_put(tmp, &ch, 1) < 0) return NULL; continue; }
        unsigned char e = s[++p];
        unsigned cp;
        switch (e) {
        case 'n': ch = '\n'; break;
        case 't': ch = '\t'; break;
        case 'r': ch = '\r'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'u':
            if (p + 4 >= b || hex4(s + p + 1, &cp) < 0) { ch = 'u'; break; }
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 < b && s[p + 1] == '\\' && s[p + 2] == 'u') {
                unsigned lo;
                if (hex4(s + p + 3, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            if (put_utf8(tmp, cp) < 0) return NULL;
            continue;
        default: ch = e; /* \" \\ \/ */
        }
        if (buf_put(tmp, &ch, 1) < 0) return NULL;
    }
    return PyUnicode_DecodeUTF8(tmp->data ? tmp->data : "", tmp->len, "replace");
}

static int key_is(const unsigned char *s, Py_ssize_t a, Py_ssize_t b, const char *key) {
    size_t k = strlen(key);
    return (size_t)(b - a) == k && memcmp(s + a, key, k) == 0;
}

/* Copy a value's text without whitespace outside strings (the same text orjson.dumps gives
 * for integer and string content). */
static int put_compact(buf_t *out, const unsigned char *s, Py_ssize_t a, Py_ssize_t b) {
    if (buf_reserve(out, b - a) < 0) return -1;
    int in_string = 0;
    for (Py_ssize_t p = a; p < b; p++) {
        unsigned char ch = s[p];
        if (in_string) {
            out->data[out->len++] = (char)ch;
            if (ch == '\\' && p + 1 < b) out->data[out->len++] = (char)s[++p];
            else if (ch == '"') in_string = 0;
        } else if (!is_space(ch)) {
            out->data[out->len++] = (char)ch;
            if (ch == '"') in_string = 1;
        }
    }
    return 0;
}

/* Object members: `"key": ` up to the value, and what follows a value. */
static int member_key(cur_t *c, Py_ssize_t *ka, Py_ssize_t *kb) {
    int esc;
    ws(c);
    if (string_span(c, ka, kb, &esc) < 0) return -1;
    ws(c);
    if (c->pos >= c->n || c->s[c->pos] != ':') return -1;
    c->pos++;
    ws(c);
    return 0;
}

/* After a member's value: 1 if another member follows (','), 0 at the closing '}', -1 otherwise. */
static int member_next(cur_t *c) {
    ws(c);
    if (c->pos < c->n && c->s[c->pos] == ',') { c->pos++; return 1; }
    if (c->pos < c->n && c->s[c->pos] == '}') { c->pos++; return 0; }
    return -1;
}

/* At an object's '{': 1 if it has members, 0 if it is empty ('{}' consumed). */
static int object_open(cur_t *c) {
    c->pos++;
    ws(c);
    if (c->pos < c->n && c->s[c->pos] == '}') { c->pos++; return 0; }
    return 1;
}

/* ---------------------------------------------------------------- tensors in a values list */
typedef struct {
    buf_t keys;  /* int64 storage keys */
    int64_t bytes;
} tensors_t;

static int walk_values(cur_t *c, tensors_t *t, int depth) {
    ws(c);
    if (c->pos >= c->n) return -1;
    if (c->s[c->pos] != '[' || depth > 64) return skip(c);
    c->pos++;
    int64_t v[5] = {0, 0, 0, 0, 0};
    int count = 0, pattern = 1;
    ws(c);
    if (c->pos < c->n && c->s[c->pos] == ']') { c->pos++; return 0; }
    for (;;) {
        ws(c);
        if (c->pos >= c->n) return -1;
        unsigned char ch = c->s[c->pos];
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            int64_t x;
            int is_int;
            if (parse_number(c, &x, &is_int) < 0) return -1;
            if (count < 5 && is_int) v[count] = x; else pattern = 0;
        } else if (ch == '"') {
            if (skip(c) < 0) return -1;
            if (count != 5) pattern = 0;
        } else if (ch == '[') {
            pattern = 0;
            if (walk_values(c, t, depth + 1) < 0) return -1;
        } else {
            pattern = 0;
            if (skip(c) < 0) return -1;
        }
        count++;
        ws(c);
        if (c->pos >= c->n) return -1;
        if (c->s[c->pos] == ',') { c->pos++; continue; }
        if (c->s[c->pos] == ']') { c->pos++; break; }
        return -1;
    }
    if (pattern && count == 6) {
        int64_t key = v[1] ? v[1] : -1 - v[0];
        if (put_i64(&t->keys, key) < 0) return -2;
        t->bytes += v[3] * v[4];
    }
    return 0;
}

/* ---------------------------------------------------------------- one node */
enum { A_RF_ID, A_FW_PARENT, A_SEQ_ID, A_SCOPE, A_TID, A_FW_TID, N_ID_ATTRS };
static const char *ID_ATTR_NAMES[N_ID_ATTRS] = {"rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid"};
enum { IO_IN_VALUES, IO_IN_SHAPES, IO_IN_TYPES, IO_OUT_VALUES, IO_OUT_SHAPES, IO_OUT_TYPES, N_IO };
/* [flat][slot]: an input/output member that must be a list (or null), named as in its layout */
static const char *IO_NOT_A_LIST[2][N_IO] = {
    {"inputs.values is not a list", "inputs.shapes is not a list", "inputs.types is not a list",
     "outputs.values is not a list", "outputs.shapes is not a list", "outputs.types is not a list"},
    {"inputs is not a list", "input_shapes is not a list", "input_types is not a list",
     "outputs is not a list", "output_shapes is not a list", "output_types is not a list"}};

typedef struct {
    buf_t ids, parents, attrs[N_ID_ATTRS], starts, ends, tensor_bytes, reads, read_ends, writes, write_ends;
    buf_t io_offsets[N_IO], io_data[N_IO], in_present, out_present, tmp;
    PyObject *names, *op_schemas, *empty;
    const char *problem;  /* what is wrong with the node being digested, NULL: nothing */
} out_t;

/* The first thing found wrong in a node's content; the node is still read to its end, so the
 * error can name its id wherever that member is. */
static void note_problem(out_t *o, const char *what) {
    if (!o->problem) o->problem = what;
}

/* At a value that must be null or start with `open` ('[' or '{'): 1 if it starts with `open`
 * (not consumed); 0 if it is null or anything else, skipped, anything else noted as `what`;
 * -1 if it is incomplete. */
static int null_or(cur_t *c, unsigned char open, out_t *o, const char *what) {
    if (c->pos < c->n && c->s[c->pos] == open) return 1;
    Py_ssize_t a = c->pos;
    if (skip_nested(c, 1) < 0) return -1;
    if (!key_is(c->s, a, c->pos, "null")) note_problem(o, what);
    return 0;
}

typedef struct {
    Py_ssize_t span[N_IO][2];  /* value spans, -1 when absent */
    int in_present, out_present;
} io_t;

static int digest_attrs(cur_t *c, int64_t *attrs, PyObject **op_schema, out_t *o) {
    /* [{"name": ..., "type": ..., "value": ...}, ...] */
    ws(c);
    int is_list = null_or(c, '[', o, "attrs is not a list of {name, type, value}");
    if (is_list <= 0) return is_list;
    c->pos++;
    ws(c);
    if (c->pos < c->n && c->s[c->pos] == ']') { c->pos++; return 0; }
    for (;;) {
        ws(c);
        if (c->pos >= c->n || c->s[c->pos] != '{') return -1;
        Py_ssize_t na = -1, nb = -1, va = -1;
        for (int more = object_open(c); more; ) {
            Py_ssize_t ka, kb;
            int esc;
            if (member_key(c, &ka, &kb) < 0) return -1;
            if (key_is(c->s, ka, kb, "name")) {
                if (string_span(c, &na, &nb, &esc) < 0) return -1;
            } else {
                if (key_is(c->s, ka, kb, "value")) va = c->pos;
                if (skip_nested(c, 3) < 0) return -1; /* in the node, attrs and the entry */
            }
            if ((more = member_next(c)) < 0) return -1;
        }
        if (na < 0) note_problem(o, "an attrs entry has no name");
        if (na >= 0 && va >= 0) {
            cur_t vc = {c->s, c->n, va};
            for (int k = 0; k < N_ID_ATTRS; k++) {
                if (key_is(c->s, na, nb, ID_ATTR_NAMES[k])) {
                    int is_int;
                    int64_t x;
                    unsigned char ch = c->s[va];
                    if ((ch == '-' || (ch >= '0' && ch <= '9')) && parse_number(&vc, &x, &is_int) == 0 && is_int)
                        attrs[k] = x;
                }
            }
            if (key_is(c->s, na, nb, "op_schema") && c->s[va] == '"') {
                Py_ssize_t a, b;
                int esc;
                if (string_span(&vc, &a, &b, &esc) == 0 && b > a) {
                    PyObject *str = decode_string(c->s, a, b, esc, &o->tmp);
                    if (!str) return -2;
                    Py_XSETREF(*op_schema, str);
                }
            }
        }
        ws(c);
        if (c->pos < c->n && c->s[c->pos] == ',') { c->pos++; continue; }
        if (c->pos < c->n && c->s[c->pos] == ']') { c->pos++; return 0; }
        return -1;
    }
}

static int digest_io_object(cur_t *c, io_t *io, int base, out_t *o) {
    /* {"values": [...], "shapes": [...], "types": [...], "strides": [...]} */
    ws(c);
    int is_object = null_or(c, '{', o, base == IO_IN_VALUES ? "inputs is not an object {values, shapes, types}"
                                                             : "outputs is not an object {values, shapes, types}");
    if (is_object <= 0) return is_object;
    for (int more = object_open(c); more; ) {
        Py_ssize_t ka, kb;
        if (member_key(c, &ka, &kb) < 0) return -1;
        int slot = key_is(c->s, ka, kb, "values") ? 0 : key_is(c->s, ka, kb, "shapes") ? 1
                 : key_is(c->s, ka, kb, "types") ? 2 : -1;
        Py_ssize_t a = c->pos;
        if (skip_nested(c, 2) < 0) return -1; /* in the node and inputs/outputs */
        if (slot >= 0) { io->span[base + slot][0] = a; io->span[base + slot][1] = c->pos; }
        if ((more = member_next(c)) < 0) return -1;
    }
    return 0;
}

static int name_starts(PyObject *name, const char *prefix) {
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(name, &len);
    size_t k = strlen(prefix);
    return u && (size_t)len >= k && memcmp(u, prefix, k) == 0;
}

static int collect_tensors(const unsigned char *s, Py_ssize_t n, Py_ssize_t a, tensors_t *t) {
    if (a < 0) return 0;
    cur_t vc = {s, n, a};
    return walk_values(&vc, t, 0);
}

static int append_keys(buf_t *dst, buf_t *keys) { return buf_put(dst, keys->data ? keys->data : "", keys->len); }

/* 0: digested; -1: malformed; -2: a Python error is set; -3: no id or name; -4: o->problem in
 * node *bad_id. */
static int digest_node(cur_t *c, int flat, out_t *o, tensors_t *tin, tensors_t *tout, int64_t *bad_id) {
    Py_ssize_t start = c->pos;
    if (c->pos >= c->n || c->s[c->pos] != '{') return -1;
    int more = object_open(c);
    int64_t id = 0, parent = -1, attrs[N_ID_ATTRS] = {0, 0, 0, 0, 0, 0};
    int have_id = 0;
    PyObject *name = NULL, *op_schema = NULL;
    io_t io;
    for (int k = 0; k < N_IO; k++) io.span[k][0] = io.span[k][1] = -1;
    io.in_present = io.out_present = 0;
    int status = -1;
    while (more) {
        Py_ssize_t ka, kb;
        int esc;
        if (member_key(c, &ka, &kb) < 0) goto done;
        const unsigned char *s = c->s;
        unsigned char ch = c->pos < c->n ? s[c->pos] : 0;
        int is_number = ch == '-' || (ch >= '0' && ch <= '9');
        if (key_is(s, ka, kb, "id") && is_number) {
            int is_int;
            if (parse_number(c, &id, &is_int) < 0) goto done;
            have_id = is_int;
        } else if (key_is(s, ka, kb, "name") && ch == '"') {
            Py_ssize_t a, b;
            if (string_span(c, &a, &b, &esc) < 0) goto done;
            Py_XSETREF(name, decode_string(s, a, b, esc, &o->tmp));
            if (!name) { status = -2; goto done; }
        } else if (key_is(s, ka, kb, flat ? "parent" : "ctrl_deps")) {
            /* an integer node id, or null for none; NaN, 1.5, "7" would silently cut the node loose */
            Py_ssize_t a = c->pos;
            int is_int = 0;
            if (is_number ? parse_number(c, &parent, &is_int) < 0 : skip_nested(c, 1) < 0) goto done;
            if (!is_int) {
                parent = -1;
                if (!key_is(s, a, c->pos, "null"))
                    note_problem(o, flat ? "parent is not an integer node id" : "ctrl_deps is not an integer node id");
            }
        } else if (!flat && key_is(s, ka, kb, "attrs")) {
            int r = digest_attrs(c, attrs, &op_schema, o);
            if (r < 0) { status = r; goto done; }
        } else if (!flat && (key_is(s, ka, kb, "inputs") || key_is(s, ka, kb, "outputs"))) {
            int is_in = key_is(s, ka, kb, "inputs");
            if (is_in) io.in_present = 1; else io.out_present = 1;
            if (digest_io_object(c, &io, is_in ? IO_IN_VALUES : IO_OUT_VALUES, o) < 0) goto done;
        } else {
            int slot = -1, attr = -1;
            if (flat) {
                static const char *flat_io[N_IO] = {"inputs", "input_shapes", "input_types", "outputs",
                                                    "output_shapes", "output_types"};
                for (int k = 0; k < N_IO; k++) if (key_is(s, ka, kb, flat_io[k])) slot = k;
                for (int k = 0; k < N_ID_ATTRS; k++) if (key_is(s, ka, kb, ID_ATTR_NAMES[k])) attr = k;
            }
            if (attr >= 0 && is_number) {
                int is_int;
                int64_t x;
                if (parse_number(c, &x, &is_int) < 0) goto done;
                if (is_int) attrs[attr] = x;
            } else if (flat && key_is(s, ka, kb, "op_schema") && ch == '"') {
                Py_ssize_t a, b;
                if (string_span(c, &a, &b, &esc) < 0) goto done;
                if (b > a) {
                    Py_XSETREF(op_schema, decode_string(s, a, b, esc, &o->tmp));
                    if (!op_schema) { status = -2; goto done; }
                }
            } else {
                Py_ssize_t a = c->pos;
                if (skip_nested(c, 1) < 0) goto done;
                if (slot >= 0) {
                    io.span[slot][0] = a;
                    io.span[slot][1] = c->pos;
                    if (slot < IO_OUT_VALUES) io.in_present = 1; else io.out_present = 1;
                }
            }
        }
        if ((more = member_next(c)) < 0) goto done;
    }
    if (c->walked && !element_terminated(c->s, c->pos, c->n)) goto done;
    if (!have_id || !name) { status = -3; goto done; }
    if (id < 0) note_problem(o, "a node id must not be negative");
    for (int k = 0; k < N_IO; k++) {
        Py_ssize_t a = io.span[k][0];
        if (a >= 0 && c->s[a] != '[' && !key_is(c->s, a, io.span[k][1], "null"))
            note_problem(o, IO_NOT_A_LIST[flat][k]);
    }
    if (o->problem) { *bad_id = id; status = -4; goto done; }
    tin->keys.len = tout->keys.len = 0;
    tin->bytes = tout->bytes = 0;
    if (collect_tensors(c->s, c->n, io.span[IO_IN_VALUES][0], tin) < 0 ||
        collect_tensors(c->s, c->n, io.span[IO_OUT_VALUES][0], tout) < 0) goto done;
    int writes_inputs = name_starts(name, "c10d::");
    if (put_i64(&o->ids, id) < 0 || put_i64(&o->parents, parent) < 0 || put_i64(&o->starts, start) < 0 ||
        put_i64(&o->ends, c->pos) < 0 || put_i64(&o->tensor_bytes, tin->bytes + tout->bytes) < 0 ||
        append_keys(&o->reads, &tin->keys) < 0 || put_i64(&o->read_ends, o->reads.len / 8) < 0 ||
        append_keys(&o->writes, &tout->keys) < 0 ||
        (writes_inputs && append_keys(&o->writes, &tin->keys) < 0) ||
        put_i64(&o->write_ends, o->writes.len / 8) < 0) { status = -2; goto done; }
    for (int k = 0; k < N_ID_ATTRS; k++) if (put_i64(&o->attrs[k], attrs[k]) < 0) { status = -2; goto done; }
    for (int k = 0; k < N_IO; k++) {
        int present = k < IO_OUT_VALUES ? io.in_present : io.out_present;
        if (present) {
            if (io.span[k][0] >= 0) { if (put_compact(&o->io_data[k], c->s, io.span[k][0], io.span[k][1]) < 0) { status = -2; goto done; } }
            else if (buf_put(&o->io_data[k], "[]", 2) < 0) { status = -2; goto done; }
        }
        int32_t off = (int32_t)o->io_data[k].len;
        if (buf_put(&o->io_offsets[k], &off, 4) < 0) { status = -2; goto done; }
    }
    char pin = (char)io.in_present, pout = (char)io.out_present;
    if (buf_put(&o->in_present, &pin, 1) < 0 || buf_put(&o->out_present, &pout, 1) < 0) { status = -2; goto done; }
    /* names and schemas repeat on most nodes: keep one object per distinct text */
    PyUnicode_InternInPlace(&name);
    if (op_schema) PyUnicode_InternInPlace(&op_schema);
    if (PyList_Append(o->names, name) < 0 || PyList_Append(o->op_schemas, op_schema ? op_schema : o->empty) < 0) {
        status = -2;
        goto done;
    }
    status = 0;
done:
    Py_XDECREF(name);
    Py_XDECREF(op_schema);
    return status;
}

/* ---------------------------------------------------------------- entry point */
static void out_free(out_t *o) {
    buf_t *all[] = {&o->ids, &o->parents, &o->starts, &o->ends, &o->tensor_bytes, &o->reads, &o->read_ends,
                    &o->writes, &o->write_ends, &o->in_present, &o->out_present, &o->tmp};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) PyMem_Free(all[k]->data);
    for (int k = 0; k < N_ID_ATTRS; k++) PyMem_Free(o->attrs[k].data);
    for (int k = 0; k < N_IO; k++) { PyMem_Free(o->io_offsets[k].data); PyMem_Free(o->io_data[k].data); }
    Py_XDECREF(o->names);
    Py_XDECREF(o->op_schemas);
    Py_XDECREF(o->empty);
}

/* The digest's empty columns; -1 with a Python error set. */
static int out_init(out_t *o) {
    memset(o, 0, sizeof *o);
    o->names = PyList_New(0);
    o->op_schemas = PyList_New(0);
    o->empty = PyUnicode_FromString("");
    if (!o->names || !o->op_schemas || !o->empty) return -1;
    int32_t zero = 0;
    for (int k = 0; k < N_IO; k++) if (buf_put(&o->io_offsets[k], &zero, 4) < 0) return -1;
    return 0;
}

/* The columns as digest returns them. */
static PyObject *out_result(out_t *o) {
    PyObject *io = PyTuple_New(N_IO);
    if (!io) return NULL;
    for (int k = 0; k < N_IO; k++) {
        PyObject *pair = Py_BuildValue("(NN)", buf_bytes(&o->io_offsets[k]), buf_bytes(&o->io_data[k]));
        if (!pair) { Py_DECREF(io); return NULL; }
        PyTuple_SET_ITEM(io, k, pair);
    }
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:O,s:O,s:N,s:N,s:N}",
        "ids", buf_bytes(&o->ids), "parents", buf_bytes(&o->parents),
        "rf_id", buf_bytes(&o->attrs[A_RF_ID]), "fw_parent", buf_bytes(&o->attrs[A_FW_PARENT]),
        "seq_id", buf_bytes(&o->attrs[A_SEQ_ID]), "scope", buf_bytes(&o->attrs[A_SCOPE]),
        "tid", buf_bytes(&o->attrs[A_TID]), "fw_tid", buf_bytes(&o->attrs[A_FW_TID]),
        "node_starts", buf_bytes(&o->starts), "node_ends", buf_bytes(&o->ends),
        "tensor_bytes", buf_bytes(&o->tensor_bytes), "reads", buf_bytes(&o->reads), "read_ends", buf_bytes(&o->read_ends),
        "writes", buf_bytes(&o->writes), "write_ends", buf_bytes(&o->write_ends),
        "names", o->names, "op_schemas", o->op_schemas, "io", io,
        "inputs_present", buf_bytes(&o->in_present), "outputs_present", buf_bytes(&o->out_present));
}

/* What one call holds: the buffer, the columns and the tensor scratch. */
typedef struct {
    Py_buffer view;
    out_t o;
    tensors_t tin, tout;
} call_t;

static void call_close(call_t *k) {
    PyMem_Free(k->tin.keys.data);
    PyMem_Free(k->tout.keys.data);
    out_free(&k->o);
    PyBuffer_Release(&k->view);
}

/* The buffer of `obj` with `[from, end)` inside it, and empty columns; -1 with a Python error set
 * (nothing then to close). */
static int call_open(call_t *k, PyObject *obj, Py_ssize_t from, Py_ssize_t end) {
    memset(k, 0, sizeof *k);
    if (PyObject_GetBuffer(obj, &k->view, PyBUF_SIMPLE) < 0) return -1;
    if (out_init(&k->o) < 0) { call_close(k); return -1; }
    if (end > k->view.len || from < 0 || from > end) {
        PyErr_SetString(PyExc_ValueError, "digest: span outside the buffer");
        call_close(k);
        return -1;
    }
    return 0;
}

static PyObject *py_digest(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, end;
    int flat;
    if (!PyArg_ParseTuple(args, "Onnp", &obj, &start, &end, &flat)) return NULL;
    call_t k;
    if (call_open(&k, obj, start, end) < 0) return NULL;
    out_t *o = &k.o;
    PyObject *result = NULL;
    cur_t c = {(const unsigned char *)k.view.buf, end, start, PY_SSIZE_T_MAX, 0};
    ws(&c);
    if (c.pos >= c.n || c.s[c.pos] != '[') { PyErr_SetString(PyExc_ValueError, "digest: expected '['"); goto fail; }
    c.pos++;
    ws(&c);
    Py_ssize_t index = 0;
    if (c.pos < c.n && c.s[c.pos] == ']') c.pos++;
    else for (;;) {
        ws(&c);
        Py_ssize_t at = c.pos;
        int64_t bad_id = 0;
        o->problem = NULL;
        int r = digest_node(&c, flat, o, &k.tin, &k.tout, &bad_id);
        if (r == -2) goto fail;
        if (r == -4) {
            PyErr_Format(PyExc_ValueError, "node %zd at byte %zd: node id %lld: %s", index, at, (long long)bad_id,
                         o->problem);
            goto fail;
        }
        if (r == -3) { PyErr_Format(PyExc_ValueError, "node %zd at byte %zd: no integer id or no name", index, at); goto fail; }
        if (r < 0) { PyErr_Format(PyExc_ValueError, "node %zd at byte %zd: not a well-formed node object", index, at); goto fail; }
        index++;
        ws(&c);
        if (c.pos < c.n && c.s[c.pos] == ',') { c.pos++; continue; }
        if (c.pos < c.n && c.s[c.pos] == ']') break;
        PyErr_Format(PyExc_ValueError, "node %zd at byte %zd: expected ',' or ']' after it", index - 1, c.pos);
        goto fail;
    }
    result = out_result(o);
fail:
    call_close(&k);
    return result;
}

typedef struct {
    cur_t c;
    call_t *k;
    int flat;
} walk_ctx_t;

/* walk_elements' element: a node digested, or left (any error: the caller's digest words it). */
static Py_ssize_t walked_node(void *ctx, Py_ssize_t pos, Py_ssize_t Py_UNUSED(index)) {
    walk_ctx_t *w = ctx;
    int64_t bad_id;
    w->c.pos = pos;
    w->k->o.problem = NULL;
    int r = digest_node(&w->c, w->flat, &w->k->o, &w->k->tin, &w->k->tout, &bad_id);
    return r == 0 ? w->c.pos : r == -2 ? -2 : -1;
}

static PyObject *py_digest_elements(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, max_items, max_depth;
    int flat;
    if (!PyArg_ParseTuple(args, "Onnpnn", &obj, &pos, &end, &flat, &max_items, &max_depth)) return NULL;
    call_t k;
    if (call_open(&k, obj, pos, end) < 0) return NULL;
    PyObject *result = NULL;
    walk_ctx_t ctx = {{(const unsigned char *)k.view.buf, end, pos, max_depth, 1}, &k, flat};
    walk_t w;
    /* a node nests attrs entries 3 levels deep: with less allowed, every node is left to the scanner */
    if (walk_elements(ctx.c.s, end, pos, max_depth < 3 ? 0 : max_items, walked_node, &ctx, &w) == 0)
        result = walk_result(&w, out_result(&k.o));
    call_close(&k);
    return result;
}

static PyMethodDef methods[] = {
    {"digest", py_digest, METH_VARARGS, "Digest a JSON array of PyTorch ET nodes into columns."},
    {"digest_elements", py_digest_elements, METH_VARARGS,
     "digest_elements(buf, pos, end, flat, max_items, max_depth): walk and digest array elements in buf[:end]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ptdigest", "PyTorch ET node digest.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ptdigest(void) { return PyModule_Create(&module); }
