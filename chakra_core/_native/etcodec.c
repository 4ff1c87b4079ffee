/*
 * etcodec: Chakra ET stream <-> columnar buffers.
 *
 * Why C: decoding one protobuf Node per Python call costs microseconds of interpreter
 * overhead per node, and a fleet trace has millions of nodes. This module walks the
 * protobuf wire format once and appends every field straight into Arrow-layout buffers
 * (offsets, values, validity bitmaps); the Python side (chakra_core/codec.py) wraps them
 * as pyarrow arrays without copying. `encode` does the reverse from numpy views of a table.
 *
 * The column layout and the list of well-known attributes are defined in Python
 * (chakra_core/columns.py) and handed to this module by `configure`; this file knows only
 * the wire format and the value classes.
 *
 * Wire facts (docs/format.md): a stream is varint-length-prefixed messages; Node
 * fields 1..10; AttributeProto name=1, doc_string=2, oneof value members 3..32 (odd =
 * scalar, even = list message whose repeated field number is 1).
 *
 * Speed (docs/benchmarks.md, 'ET I/O'): a node's fields are taken in the order writers
 * emit them, attributes by the shape the attribute after the same one had before (one
 * compare for name and kind), tensor text straight into its columns; columns with an
 * entry per row are sized for the batch up front and written with plain stores; buffers
 * come from a pool of pages (see block_get) rather than fresh memory each batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------ memory */

/*
 * Buffers of POOL_MIN bytes or more are whole pages of their own (mmap) in size classes
 * (four a doubling), and when freed (a batch or table dropped by Python, a decode that
 * failed) they are kept for the next buffers of their class, up to pool_keep bytes in all.
 * Fresh pages cost a page fault each (the kernel maps and zeroes them: ~0.4 ms per MB
 * here), as much as decoding what goes in them; a reader that decodes batch after batch,
 * or file after file, then writes into pages it already has, and decoding threads do not
 * depend on their malloc arenas giving memory back and faulting it in again. Beyond the
 * first POOL_HOT bytes, kept blocks are marked MADV_FREE: the kernel may take their pages
 * back under memory pressure (a later use then faults them in again), so a process that
 * dropped a large table does not hold its memory from the rest of the machine. Smaller
 * buffers are malloc's.
 */
#define POOL_MIN ((size_t)64 << 10)
#define POOL_CLASSES 128
#define POOL_DEPTH 256
#define POOL_HOT ((size_t)128 << 20)
#define PAGE_BYTES ((size_t)4096)

typedef struct { uint8_t *p; int cold; } block_t;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t pool[POOL_CLASSES][POOL_DEPTH];
static int pool_count[POOL_CLASSES];
static size_t pool_bytes, pool_hot, pool_keep = (size_t)1 << 30;

static inline size_t class_bytes(int c) { return (POOL_MIN << (c >> 2)) / 4 * (size_t)(4 + (c & 3)); }

/* The smallest class that holds `need` bytes, or -1 past the largest. */
static int class_of(size_t need) {
    int c = 0;
    if (need > POOL_MIN) c = 4 * (63 - __builtin_clzll((unsigned long long)((need - 1) / POOL_MIN)));
    while (c < POOL_CLASSES && class_bytes(c) < need) c++;
    return c < POOL_CLASSES ? c : -1;
}

/* A block of at least `need` bytes (its class's size, a multiple of the page size), reused if one is kept. */
static uint8_t *block_get(size_t need, size_t *cap) {
    int c = class_of(need);
    size_t bytes = c >= 0 ? class_bytes(c) : (need + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
    if (c >= 0) {
        pthread_mutex_lock(&pool_lock);
        if (pool_count[c]) {
            block_t b = pool[c][--pool_count[c]];
            pool_bytes -= bytes;
            if (!b.cold) pool_hot -= bytes;
            pthread_mutex_unlock(&pool_lock);
            *cap = bytes;
            return b.p;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *cap = bytes;
    return p;
}

static void block_put(uint8_t *p, size_t cap) {
    int c = class_of(cap);
    int keep = 0, cold = 0;
    if (c >= 0 && class_bytes(c) == cap) {
        pthread_mutex_lock(&pool_lock);
        if (pool_count[c] < POOL_DEPTH && pool_bytes + cap <= pool_keep) {
            keep = 1;
            cold = pool_hot + cap > POOL_HOT;
            pool[c][pool_count[c]].p = p;
            pool[c][pool_count[c]++].cold = cold;
            pool_bytes += cap;
            if (!cold) pool_hot += cap;
        }
        pthread_mutex_unlock(&pool_lock);
    }
#ifdef MADV_FREE
    if (keep && cold) madvise(p, cap, MADV_FREE);
#endif
    if (!keep) munmap(p, cap);
}

/* Whether the pool keeps a block of class c. */
static int pool_holds(int c) {
    if (c < 0) return 0;
    pthread_mutex_lock(&pool_lock);
    int held = pool_count[c] > 0;
    pthread_mutex_unlock(&pool_lock);
    return held;
}

/* In a forked child, the pool's lock may have been held by a thread that is gone. */
static void pool_after_fork(void) { pthread_mutex_init(&pool_lock, NULL); }

/* Frees memory of capacity cap: a block goes back to the pool, the rest to malloc. */
static void mem_release(uint8_t *p, size_t cap) {
    if (!p) return;
    if (cap >= POOL_MIN) block_put(p, cap);
    else free(p);
}

/* ------------------------------------------------------------------ growable buffers */

/* A growable buffer; its memory is a pool block when cap >= POOL_MIN, else malloc's. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

/*
 * Decoding runs without the GIL, so allocation failures cannot raise at once: they set
 * these flags and make every caller return -1; the entry point raises afterwards.
 */
static _Thread_local int alloc_failed, batch_overflow;

#define LIKELY(x) __builtin_expect(!!(x), 1)

/* Makes room for at least `need` bytes in all. */
static __attribute__((noinline)) int buf_grow_to(buf_t *b, size_t need) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    if (cap < POOL_MIN) {
        uint8_t *p = realloc(b->p, cap);
        if (!p) { alloc_failed = 1; return -1; }
        b->p = p;
        b->cap = cap;
        return 0;
    }
#ifdef MREMAP_MAYMOVE
    /* A block already: the kernel moves its pages, no copy and nothing left behind; unless the
     * pool keeps a block of the size wanted, which is then reused (a copy of what was written so
     * far), or buffers grown by mremap call after call (encode's output) would fill the pool with
     * blocks of their final size that no growth ever takes back. */
    if (b->cap >= POOL_MIN && !pool_holds(class_of(cap))) {
        int c = class_of(cap);
        size_t bytes = c >= 0 ? class_bytes(c) : (cap + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
        void *moved = mremap(b->p, b->cap, bytes, MREMAP_MAYMOVE);
        if (moved == MAP_FAILED) { alloc_failed = 1; return -1; }
        b->p = moved;
        b->cap = bytes;
        return 0;
    }
#endif
    size_t got;
    uint8_t *p = block_get(cap, &got);
    if (!p) { alloc_failed = 1; return -1; }
    if (b->len) memcpy(p, b->p, b->len);
    mem_release(b->p, b->cap);
    b->p = p;
    b->cap = got;
    return 0;
}

static __attribute__((noinline)) int buf_grow(buf_t *b, size_t extra) { return buf_grow_to(b, b->len + extra); }

static inline int buf_reserve(buf_t *b, size_t extra) {
    if (LIKELY(b->len + extra <= b->cap)) return 0;
    return buf_grow(b, extra);
}

static inline int buf_put(buf_t *b, const void *src, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

#define DEFINE_BUF_PUT(fn, T) \
    static inline int fn(buf_t *b, T v) { \
        if (buf_reserve(b, sizeof v) < 0) return -1; \
        memcpy(b->p + b->len, &v, sizeof v); \
        b->len += sizeof v; \
        return 0; \
    }
DEFINE_BUF_PUT(buf_u8, uint8_t)
DEFINE_BUF_PUT(buf_u16, uint16_t)
DEFINE_BUF_PUT(buf_i32, int32_t)
DEFINE_BUF_PUT(buf_u64, uint64_t)

static void buf_free(buf_t *b) { mem_release(b->p, b->cap); b->p = NULL; b->len = b->cap = 0; }

static inline uint64_t load64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t load32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/*
 * Appends n bytes from s, which lies in an input buffer ending at `limit`. The bytes are
 * copied in whole 64-byte moves, reading and writing past their end (into the buffer's
 * slack, never past `limit`): most strings of a trace are one such move, not a memcpy call.
 */
#define COPY_SLACK 64
static inline int buf_put_input(buf_t *b, const uint8_t *s, size_t n, const uint8_t *limit) {
    if (!LIKELY(b->len + n + COPY_SLACK <= b->cap) && buf_grow(b, n + COPY_SLACK) < 0) return -1;
    uint8_t *d = b->p + b->len;
    if (LIKELY((size_t)(limit - s) >= n + COPY_SLACK)) { /* whole 64-byte moves: no call, no branch on the size */
        for (size_t i = 0; i < n; i += 64) memcpy(d + i, s + i, 64);
    } else if (n) {
        memcpy(d, s, n);
    }
    b->len += n;
    return 0;
}

/* Arrow validity (or boolean value) bitmap, least significant bit first. */
typedef struct {
    buf_t bytes;
    int64_t n, unset;
} bits_t;

static inline int bits_push(bits_t *b, int v) {
    if ((b->n & 7) == 0 && buf_u8(&b->bytes, 0) < 0) return -1;
    if (v) b->bytes.p[b->n >> 3] |= (uint8_t)(1u << (b->n & 7));
    else b->unset++;
    b->n++;
    return 0;
}

/* A string/binary column: int32 offsets, data bytes, validity. */
typedef struct {
    buf_t off, data;
    bits_t valid;
} strcol_t;

static int strcol_init(strcol_t *c) { return buf_i32(&c->off, 0); }

static inline int strcol_push(strcol_t *c, const uint8_t *s, size_t n, int valid) {
    if (c->data.len + n > INT32_MAX) { batch_overflow = 1; return -1; }
    if (buf_put(&c->data, s, n) < 0) return -1;
    if (buf_i32(&c->off, (int32_t)c->data.len) < 0) return -1;
    return bits_push(&c->valid, valid);
}

static void strcol_free(strcol_t *c) { buf_free(&c->off); buf_free(&c->data); buf_free(&c->valid.bytes); }

/* A fixed-width column (values + validity). */
typedef struct {
    buf_t vals;
    bits_t valid;
} fixcol_t;

static void fixcol_free(fixcol_t *c) { buf_free(&c->vals); buf_free(&c->valid.bytes); }

/* A list column's offsets: one int32 per row boundary. */
static inline int list_close_row(buf_t *off, int64_t child_len) {
    if (child_len > INT32_MAX) { batch_overflow = 1; return -1; }
    return buf_i32(off, (int32_t)child_len);
}

/* ------------------------------------------------------------------ wire reading */

typedef struct {
    const uint8_t *p;
    size_t n;
} span_t;

/* Decoding context: where we are, and the first format error met (raised later, with the GIL). */
typedef struct {
    const uint8_t *base;    /* start of the buffer handed to decode() */
    const uint8_t *limit;   /* end of that buffer: loads may run past a field, never past this */
    int64_t base_offset;    /* file offset of base[0] */
    int64_t msg_offset;     /* file offset of the current message's length prefix */
    int64_t node_index;     /* index of the current node within the file (after metadata) */
    int have_id;
    uint64_t node_id;
    int failed;
    int64_t err_offset, err_msg_offset, err_node_index;
    int err_have_id;
    uint64_t err_node_id;
    char err[256];
} ctx_t;

static PyObject *FormatError;

static int fail(ctx_t *cx, const uint8_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cx->err, sizeof cx->err, fmt, ap);
    va_end(ap);
    cx->failed = 1;
    cx->err_offset = at ? cx->base_offset + (int64_t)(at - cx->base) : cx->msg_offset;
    cx->err_msg_offset = cx->msg_offset;
    cx->err_node_index = cx->node_index;
    cx->err_have_id = cx->have_id;
    cx->err_node_id = cx->node_id;
    return -1;
}

/* Raises the error a failed decode left behind (call with the GIL held). */
static void raise_decode_error(const ctx_t *cx) {
    if (!cx->failed) {
        if (batch_overflow) PyErr_SetString(PyExc_OverflowError, "a column exceeds 2 GiB in one batch");
        else PyErr_NoMemory();
        return;
    }
    PyObject *id = cx->err_have_id ? PyLong_FromUnsignedLongLong(cx->err_node_id) : Py_NewRef(Py_None);
    PyObject *args = Py_BuildValue("(sLLLN)", cx->err, (long long)cx->err_offset, (long long)cx->err_msg_offset,
                                   (long long)cx->err_node_index, id);
    if (args) {
        PyErr_SetObject(FormatError, args);
        Py_DECREF(args);
    }
}

/* Reads a varint at *pp (< end). Returns 0 ok, 1 if the bytes run out, 2 if over-long. */
static inline __attribute__((always_inline)) int read_varint_in(const uint8_t **pp, const uint8_t *end,
                                                               const uint8_t *loadable, uint64_t *out) {
    const uint8_t *p = *pp;
    (void)loadable;
    if (LIKELY(p < end && *p < 0x80)) { /* most tags and lengths are one byte */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    if (p + 1 < end && p[1] < 0x80) { /* two bytes: ids and sizes up to 16383 */
        *out = (uint64_t)(p[0] & 0x7f) | ((uint64_t)p[1] << 7);
        *pp = p + 2;
        return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return 1;
        uint8_t byte = *p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return 2;
}

static inline __attribute__((always_inline)) int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    return read_varint_in(pp, end, end, out);
}

static inline __attribute__((always_inline)) int get_varint(ctx_t *cx, const uint8_t **pp, const uint8_t *end, uint64_t *out, const char *what) {
    const uint8_t *start = *pp;
    *out = 0; /* defined on the error path too */
    int r = read_varint_in(pp, end, cx->limit, out);
    if (r == 1) return fail(cx, start, "truncated varint in %s", what);
    if (r == 2) return fail(cx, start, "malformed varint (over 10 bytes) in %s", what);
    return 0;
}

static inline __attribute__((always_inline)) int get_span(ctx_t *cx, const uint8_t **pp, const uint8_t *end, span_t *out, const char *what) {
    uint64_t n;
    out->p = NULL;
    out->n = 0;
    const uint8_t *start = *pp;
    if (get_varint(cx, pp, end, &n, what) < 0) return -1;
    if (n > (uint64_t)(end - *pp))
        return fail(cx, start, "length %llu of %s overruns its enclosing message", (unsigned long long)n, what);
    out->p = *pp;
    out->n = (size_t)n;
    *pp += n;
    return 0;
}

static inline int get_fixed(ctx_t *cx, const uint8_t **pp, const uint8_t *end, int width, uint64_t *out, const char *what) {
    if ((size_t)(end - *pp) < (size_t)width) return fail(cx, *pp, "truncated fixed%d value in %s", width * 8, what);
    uint64_t v = 0;
    memcpy(&v, *pp, width); /* little-endian host, as Arrow */
    *pp += width;
    *out = v;
    return 0;
}

/* Skips one field of wire type wt. Groups (3, 4) and types 6, 7 are not valid in this schema. */
static int skip_field(ctx_t *cx, const uint8_t **pp, const uint8_t *end, int wt, const char *what) {
    uint64_t v;
    span_t s;
    switch (wt) {
    case 0: return get_varint(cx, pp, end, &v, what);
    case 1: return get_fixed(cx, pp, end, 8, &v, what);
    case 2: return get_span(cx, pp, end, &s, what);
    case 5: return get_fixed(cx, pp, end, 4, &v, what);
    default: return fail(cx, *pp, "invalid wire type %d in %s", wt, what);
    }
}

static int utf8_valid_slow(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* Trace strings are almost all ASCII: OR the bytes together without branching, validate fully only if needed. */
static inline int utf8_valid(const uint8_t *s, size_t n) {
    uint64_t acc = 0;
    size_t i = 0;
    if (n >= 8) {
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            acc |= w;
        }
        uint64_t tail; /* the last 8 bytes, overlapping what was read */
        memcpy(&tail, s + n - 8, 8);
        acc |= tail;
    } else {
        for (; i < n; i++) acc |= s[i];
    }
    return (acc & 0x8080808080808080ULL) == 0 || utf8_valid_slow(s, n);
}

#ifdef __SSE2__
/* The top bits of the 64 bytes at s, one per byte. */
static inline uint64_t high_bits64(const uint8_t *s) {
    const __m128i *v = (const __m128i *)s;
    return (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_loadu_si128(v)) |
           (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_loadu_si128(v + 1)) << 16 |
           (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_loadu_si128(v + 2)) << 32 |
           (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_loadu_si128(v + 3)) << 48;
}

/* The 64 bytes at s ORed into 16. */
static inline __m128i or64(const uint8_t *s) {
    const __m128i *v = (const __m128i *)s;
    return _mm_or_si128(_mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                        _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)));
}
#endif

/*
 * 1 when the n bytes at s, in a buffer that ends at `limit`, are all ASCII (then any
 * string among them is valid UTF-8). In 64-byte blocks, the last one overlapping the one
 * before (a string shorter than that: one block, the bytes past it masked off), so that
 * most strings of a trace take the same number of steps whatever their length.
 */
static inline int ascii_in(const uint8_t *s, size_t n, const uint8_t *limit) {
#ifdef __SSE2__
    if (n >= 64) {
        __m128i acc = or64(s + n - 64);
        for (size_t i = 0; i + 64 < n; i += 64) acc = _mm_or_si128(acc, or64(s + i));
        return !_mm_movemask_epi8(acc);
    }
    if ((size_t)(limit - s) >= 64) return !(high_bits64(s) & (((uint64_t)1 << n) - 1));
#endif
    (void)limit;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) acc |= s[i];
    return acc < 0x80;
}

/* utf8_valid for a string in a buffer that ends at `limit` (see ascii_in). */
static inline int utf8_valid_in(const uint8_t *s, size_t n, const uint8_t *limit) {
    return ascii_in(s, n, limit) || utf8_valid_slow(s, n);
}

static inline int check_utf8(ctx_t *cx, span_t s, const char *what) {
    if (!utf8_valid_in(s.p, s.n, cx->limit)) return fail(cx, s.p, "%s is not valid UTF-8", what);
    return 0;
}

/* ------------------------------------------------------------------ attribute kinds */

/* oneof member numbers (= AttributeProto field numbers) */
enum {
    K_DOUBLE = 3, K_FLOAT = 5, K_INT32 = 7, K_INT64 = 9, K_UINT32 = 11, K_UINT64 = 13,
    K_SINT32 = 15, K_SINT64 = 17, K_FIXED32 = 19, K_FIXED64 = 21, K_SFIXED32 = 23,
    K_SFIXED64 = 25, K_BOOL = 27, K_STRING = 29, K_BYTES = 31, K_MAX = 32
};

static inline int kind_is_list(int k) { return (k & 1) == 0; }
static inline int scalar_of(int k) { return kind_is_list(k) ? k - 1 : k; }

/* Wire type of one element of scalar kind k. */
static inline int kind_wire_type(int k) {
    switch (scalar_of(k)) {
    case K_DOUBLE: case K_FIXED64: case K_SFIXED64: return 1;
    case K_FLOAT: case K_FIXED32: case K_SFIXED32: return 5;
    case K_STRING: case K_BYTES: return 2;
    default: return 0;
    }
}

static inline int kind_is_integer(int k) {
    int s = scalar_of(k);
    return s >= K_INT32 && s <= K_SFIXED64;
}

static inline int kind_is_unsigned(int k) {
    int s = scalar_of(k);
    return s == K_UINT32 || s == K_UINT64 || s == K_FIXED32 || s == K_FIXED64;
}

/* Integer element of kind k from its raw wire bits, widened to 128 bits. */
static inline __int128 int_from_wire(int k, uint64_t raw) {
    switch (scalar_of(k)) {
    case K_INT32: case K_SFIXED32: return (int32_t)(uint32_t)raw;
    case K_INT64: case K_SFIXED64: return (int64_t)raw;
    case K_UINT32: case K_FIXED32: return (uint32_t)raw;
    case K_UINT64: case K_FIXED64: return raw;
    case K_SINT32: { uint32_t u = (uint32_t)raw; return (int32_t)((u >> 1) ^ (~(u & 1) + 1)); }
    case K_SINT64: return (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    default: return 0;
    }
}

static inline int int_fits_kind(int k, __int128 v) {
    switch (scalar_of(k)) {
    case K_INT32: case K_SINT32: case K_SFIXED32: return v >= INT32_MIN && v <= INT32_MAX;
    case K_INT64: case K_SINT64: case K_SFIXED64: return v >= INT64_MIN && v <= INT64_MAX;
    case K_UINT32: case K_FIXED32: return v >= 0 && v <= UINT32_MAX;
    case K_UINT64: case K_FIXED64: return v >= 0 && v <= (__int128)UINT64_MAX;
    default: return 0;
    }
}

/* Raw wire bits of integer v as kind k (caller checked int_fits_kind). */
static uint64_t int_to_wire(int k, __int128 v) {
    switch (scalar_of(k)) {
    case K_SINT32: { int32_t s = (int32_t)v; return (uint32_t)(((uint32_t)s << 1) ^ (uint32_t)(s >> 31)); }
    case K_SINT64: { int64_t s = (int64_t)v; return ((uint64_t)s << 1) ^ (uint64_t)(s >> 63); }
    case K_FIXED32: case K_SFIXED32: return (uint32_t)(int64_t)v;
    default: return (uint64_t)(int64_t)v; /* int32 negatives sign-extend to 10 bytes, as protobuf */
    }
}

/* ------------------------------------------------------------------ configuration */

/* Value classes of well-known attribute columns (mirrors chakra_core/columns.py). */
enum { C_BOOL = 0, C_INT = 1, C_UINT = 2, C_STRING = 3, C_BOOL_LIST = 4 };

#define MAX_KNOWN 60
static int n_known = 0;
static char *known_name[MAX_KNOWN];
static size_t known_len[MAX_KNOWN];
static int known_class[MAX_KNOWN];
static int known_default_kind[MAX_KNOWN];

static inline int class_accepts(int cls, int kind, __int128 v) {
    switch (cls) {
    case C_BOOL: return kind == K_BOOL;
    case C_INT: return kind_is_integer(kind) && !kind_is_list(kind) && v >= INT64_MIN && v <= INT64_MAX;
    case C_UINT: return kind_is_integer(kind) && !kind_is_list(kind) && v >= 0;
    case C_STRING: return kind == K_STRING;
    case C_BOOL_LIST: return kind == K_BOOL + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ decoder state */

/* One decoded attribute, pointing into the input buffer. */
typedef struct {
    span_t name, doc;
    int has_doc;
    int kind;       /* 0 = no value member set */
    uint64_t raw;   /* scalar bits for varint/fixed kinds */
    span_t body;    /* payload for string/bytes/list kinds */
    const uint8_t *value; /* parse_attr_fast: first byte after the value member's tag */
} attr_t;

/* Column builders of the "other_attrs" list<struct>. */
typedef struct {
    buf_t off;              /* per node: entry offsets */
    strcol_t name, doc;
    buf_t kind;             /* uint8 dictionary index (kind - 3), with validity */
    bits_t kind_valid;
    fixcol_t i64, u64, f64, f32;
    bits_t bool_vals, bool_valid;
    strcol_t str, bytes;
    /* lists: offsets + validity per entry, then the child values */
    buf_t l_off[7];
    bits_t l_valid[7];
    buf_t li64, lu64, lf64, lf32;
    bits_t lbool;
    strcol_t lstr, lbytes;
} extras_t;

/* list child slots in extras_t.l_off */
enum { L_INT = 0, L_UINT, L_DOUBLE, L_FLOAT, L_BOOL, L_STRING, L_BYTES };

/*
 * Row-indexed buffers. Every buffer with an entry per row (values, offsets, validity
 * bitmaps) is kept ready for `rows_ready` rows, grown for all of them at once when a node
 * needs more (grow_rows), so that a node writes its row with plain stores; a buffer's len
 * is its ready size until finish_columns() sets the batch's. Validity bitmaps and the
 * values of lazily written columns are zero over their ready size, so rows that get no
 * value are null / zero without being written.
 */
enum { RB_FIXED, RB_OFFSETS, RB_BITS };

static inline size_t row_bytes(int kind, int width, int64_t rows) {
    switch (kind) {
    case RB_OFFSETS: return (size_t)(rows + 1) * 4;
    case RB_BITS: return (size_t)(rows + 7) / 8;
    default: return (size_t)rows * (size_t)width;
    }
}

/* Makes b ready for `rows` rows (zeroing what is added when `zero`). */
static int row_ready(buf_t *b, int kind, int width, int64_t rows, int zero) {
    size_t want = row_bytes(kind, width, rows);
    if (want <= b->len) return 0;
    if (want > b->cap && buf_grow_to(b, want + (want >> 3)) < 0) return -1;
    if (zero) memset(b->p + b->len, 0, want - b->len);
    b->len = want;
    return 0;
}

static inline void bit_set(buf_t *bm, int64_t row) { bm->p[row >> 3] |= (uint8_t)(1u << (row & 7)); }

static __attribute__((noinline)) void zero_rows(uint64_t *p, int64_t from, int64_t to) {
    memset(p + from, 0, (size_t)(to - from) * 8);
}

/* Writes v at `row` of an 8-byte column whose rows up to *rows are written (those between become 0). */
static inline __attribute__((always_inline)) void put_u64_at(buf_t *vals, int64_t *rows, int64_t row, uint64_t v) {
    uint64_t *p = (uint64_t *)vals->p;
    if (__builtin_expect(*rows < row, 0)) zero_rows(p, *rows, row);
    p[row] = v;
    *rows = row + 1;
}

static int64_t count_bits(const buf_t *bm, int64_t n) {
    int64_t set = 0, i = 0;
    for (; i + 64 <= n; i += 64) set += __builtin_popcountll(load64(bm->p + i / 8));
    for (; i < n; i++) set += (bm->p[i >> 3] >> (i & 7)) & 1;
    return set;
}

/*
 * A well-known attribute column, filled lazily: a node writes only the attributes it has,
 * at its row. `live` once a value came in this batch (its buffers then exist and are
 * ready); rows in between stay zero / null, string offsets catch up when a value comes.
 */
typedef struct {
    int cls;
    int live;
    buf_t vals;     /* C_INT / C_UINT: 8-byte values; C_BOOL: value bitmap (zero-filled rows) */
    buf_t valid;    /* validity bitmap */
    int64_t rows;   /* C_INT / C_UINT: rows whose values are written; C_STRING / C_BOOL_LIST: whose offsets are */
    strcol_t str;   /* C_STRING (its own validity replaced when handed over) */
    buf_t l_off;    /* C_BOOL_LIST offsets */
    bits_t l_vals;  /* C_BOOL_LIST values */
    bits_t final_valid;
} knowncol_t;

/*
 * String columns that most nodes lack (inputs, outputs, unknown fields), filled lazily like
 * the well-known columns: up to three child columns share one validity (IOInfo's values,
 * shapes, types); offsets of the rows in between catch up when a value comes.
 */
typedef struct {
    strcol_t col[3];
    int ncols;
    int live;
    buf_t valid;
    int64_t rows;
    bits_t final_valid;
} sparse_str_t;

typedef struct {
    int64_t n;
    int64_t rows_ready;     /* rows every row-indexed buffer is ready for */
    buf_t id, type, start, dur;
    strcol_t name;          /* never null: its validity stays empty */
    buf_t ctrl_off, ctrl, data_off, data;
    /* written lazily, so that a column that stays all zero is never touched (nor kept):
     * rows of start / dur written, entries of the offsets of ctrl_deps, data_deps,
     * attr_layout and other_attrs written (0 = all zero so far) */
    int64_t start_rows, dur_rows, ctrl_off_n, data_off_n, layout_off_n, ex_off_n;
    sparse_str_t io[2];
    knowncol_t known[MAX_KNOWN];
    buf_t layout_off, layout;
    buf_t layout_valid;     /* null = canonical order and kinds */
    bits_t layout_final;
    extras_t ex;
    sparse_str_t unknown;
} batch_t;

/*
 * What the attribute that followed a given one (in an earlier node) was, when it took the
 * common shape (name, then one value member, nothing else) and went into a well-known
 * column: its first keylen bytes (name tag, name length, name, value tag) as two masked
 * words, so that one compare tells the next such attribute has the same name and value
 * kind. Writers emit a node's attributes in a fixed order, so what follows an attribute
 * seldom changes, even where nodes of different kinds have different sets of attributes
 * (a position-by-position memory would miss after every attribute one kind adds).
 * Indexed by what came before: 0 = nothing (the node's first attribute), 1 + s = the
 * well-known attribute of slot s, AFTER_EXTRA = an other_attrs entry.
 */
#define GUESS_POSITIONS 32
#define AFTER_EXTRA (MAX_KNOWN + 1)
enum { OP_NONE = 0, OP_BOOL, OP_I64, OP_INT, OP_STRING };
typedef struct {
    uint64_t k0, k1, m0, m1;
    uint8_t keylen;           /* 0: nothing remembered */
    uint8_t op;               /* how the value is read and written (OP_*) */
    uint8_t kind;             /* its oneof member */
    uint8_t canon_kind;       /* the kind is the one a null layout gives, whatever the value */
    uint8_t canon;            /* canon_kind, and it comes in canonical order after what it follows */
    int8_t slot;              /* its well-known column */
    uint16_t code;            /* its attr_layout entry */
} apos_t;

/* Per-node scratch for fields that are singular (last occurrence wins). */
typedef struct {
    int has_io[2];
    span_t io[2][3];
    uint64_t seen_known;      /* bit s: slot s already taken in this node (written at once, at the node's row) */
    int n_attrs;              /* attributes of this node so far */
    int8_t guess[GUESS_POSITIONS]; /* well-known slot of the k-th attribute in an earlier node */
    apos_t shape[MAX_KNOWN + 2];    /* the attribute that followed each one last time, see AFTER_EXTRA */
    int after;                /* what the next attribute follows (index into shape) */
    /* attr_layout is left null for a node whose attributes are in the canonical order with the
     * kinds the encoder picks for a null layout (most nodes): */
    int canon;                /* so far, this node's attributes are canonical */
    int last_known;           /* slot of its last well-known attribute, -1 = none yet */
    int had_extra;            /* an other_attrs entry came already */
    buf_t unknown;
} scratch_t;

static scratch_t *scratch_new(void) {
    scratch_t *sc = calloc(1, sizeof *sc);
    if (sc)
        for (int i = 0; i < MAX_KNOWN + 2; i++) sc->shape[i].m0 = 0xff; /* matches nothing: an attribute starts 0x0a */
    return sc;
}

static void sparse_free(sparse_str_t *s) {
    for (int c = 0; c < 3; c++) strcol_free(&s->col[c]);
    buf_free(&s->valid);
    buf_free(&s->final_valid.bytes);
}

static int grow_rows(batch_t *b, int64_t rows);

/*
 * Buffers that grow by appending (string bytes, dependencies, other_attrs entries...),
 * sized at the start of a batch from what they took a row in the last batch, so that
 * they seldom grow (each growth copies, and may take fresh pages) while decoding.
 */
#define MAX_HINTED 96
static float data_hint[MAX_HINTED]; /* bytes a row of each, in the last batch decoded */

static int data_buffers(batch_t *b, buf_t **out) {
    int k = 0;
    out[k++] = &b->name.data;
    out[k++] = &b->ctrl;
    out[k++] = &b->data;
    out[k++] = &b->layout;
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++) out[k++] = &b->io[d].col[c].data;
    out[k++] = &b->unknown.col[0].data;
    extras_t *e = &b->ex;
    strcol_t *strs[8] = {&e->name, &e->doc, &e->str, &e->bytes, &e->lstr, &e->lbytes};
    for (int i = 0; i < 6; i++) {
        out[k++] = &strs[i]->off;
        out[k++] = &strs[i]->data;
        out[k++] = &strs[i]->valid.bytes;
    }
    buf_t *more[] = {&e->kind, &e->kind_valid.bytes, &e->i64.vals, &e->i64.valid.bytes, &e->u64.vals,
                     &e->u64.valid.bytes, &e->f64.vals, &e->f64.valid.bytes, &e->f32.vals, &e->f32.valid.bytes,
                     &e->bool_vals.bytes, &e->bool_valid.bytes, &e->li64, &e->lu64, &e->lf64, &e->lf32,
                     &e->lbool.bytes};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) out[k++] = more[i];
    for (int i = 0; i < 7; i++) {
        out[k++] = &e->l_off[i];
        out[k++] = &e->l_valid[i].bytes;
    }
    for (int s = 0; s < n_known && k < MAX_HINTED; s++)
        if (known_class[s] == C_STRING) out[k++] = &b->known[s].str.data;
    return k;
}

/* Remembers what each appended buffer of a finished batch took a row. */
static void learn_sizes(batch_t *b) {
    buf_t *bufs[MAX_HINTED];
    if (b->n < 256) return; /* too few rows to tell */
    int k = data_buffers(b, bufs);
    for (int i = 0; i < k; i++) data_hint[i] = (float)bufs[i]->len / (float)b->n;
}

/* An empty batch, ready for about `expect` rows. */
static int batch_init(batch_t *b, int64_t expect) {
    memset(b, 0, sizeof *b);
    {
        buf_t *bufs[MAX_HINTED];
        int k = data_buffers(b, bufs);
        for (int i = 0; i < k; i++) {
            size_t want = (size_t)(data_hint[i] * 1.0625f * (float)expect);
            if (want >= 4096 && buf_grow_to(bufs[i], want + COPY_SLACK) < 0) return -1;
        }
    }
    b->io[0].ncols = b->io[1].ncols = 3;
    b->unknown.ncols = 1;
    if (strcol_init(&b->ex.name) < 0 || strcol_init(&b->ex.doc) < 0 ||
        strcol_init(&b->ex.str) < 0 || strcol_init(&b->ex.bytes) < 0 || strcol_init(&b->ex.lstr) < 0 ||
        strcol_init(&b->ex.lbytes) < 0)
        return -1;
    for (int k = 0; k < 7; k++)
        if (buf_i32(&b->ex.l_off[k], 0) < 0) return -1;
    for (int s = 0; s < n_known; s++) b->known[s].cls = known_class[s];
    if (grow_rows(b, expect < 16 ? 16 : expect) < 0) return -1;
    /* the first offset of each always-written offsets buffer */
    ((int32_t *)b->name.off.p)[0] = 0;
    return 0;
}

/* Readies the row-indexed buffers of a sparse group that got its first value. */
static int sparse_live(sparse_str_t *s, int64_t rows) {
    if (row_ready(&s->valid, RB_BITS, 0, rows, 1) < 0) return -1;
    for (int c = 0; c < s->ncols; c++) {
        if (row_ready(&s->col[c].off, RB_OFFSETS, 0, rows, 0) < 0) return -1;
        ((int32_t *)s->col[c].off.p)[0] = 0;
    }
    s->live = 1;
    return 0;
}

static int known_live(knowncol_t *col, int64_t rows) {
    if (row_ready(&col->valid, RB_BITS, 0, rows, 1) < 0) return -1;
    switch (col->cls) {
    case C_BOOL: if (row_ready(&col->vals, RB_BITS, 0, rows, 1) < 0) return -1; break;
    case C_INT:
    case C_UINT: if (row_ready(&col->vals, RB_FIXED, 8, rows, 0) < 0) return -1; break; /* zeros as rows pass */
    case C_STRING:
        if (row_ready(&col->str.off, RB_OFFSETS, 0, rows, 0) < 0) return -1;
        ((int32_t *)col->str.off.p)[0] = 0;
        break;
    case C_BOOL_LIST:
        if (row_ready(&col->l_off, RB_OFFSETS, 0, rows, 0) < 0) return -1;
        ((int32_t *)col->l_off.p)[0] = 0;
        break;
    }
    col->live = 1;
    return 0;
}

/* Makes every row-indexed buffer ready for `rows` rows. */
static __attribute__((noinline)) int grow_rows(batch_t *b, int64_t rows) {
    if (rows <= b->rows_ready) return 0;
    if (row_ready(&b->id, RB_FIXED, 8, rows, 0) < 0 || row_ready(&b->type, RB_FIXED, 4, rows, 0) < 0 ||
        row_ready(&b->start, RB_FIXED, 8, rows, 0) < 0 || row_ready(&b->dur, RB_FIXED, 8, rows, 0) < 0 ||
        row_ready(&b->name.off, RB_OFFSETS, 0, rows, 0) < 0 || row_ready(&b->ctrl_off, RB_OFFSETS, 0, rows, 0) < 0 ||
        row_ready(&b->data_off, RB_OFFSETS, 0, rows, 0) < 0 || row_ready(&b->layout_off, RB_OFFSETS, 0, rows, 0) < 0 ||
        row_ready(&b->ex.off, RB_OFFSETS, 0, rows, 0) < 0 || row_ready(&b->layout_valid, RB_BITS, 0, rows, 1) < 0)
        return -1;
    sparse_str_t *groups[3] = {&b->io[0], &b->io[1], &b->unknown};
    for (int g = 0; g < 3; g++)
        if (groups[g]->live && sparse_live(groups[g], rows) < 0) return -1;
    for (int s = 0; s < n_known; s++)
        if (b->known[s].live && known_live(&b->known[s], rows) < 0) return -1;
    b->rows_ready = rows;
    return 0;
}

static void batch_free(batch_t *b) {
    buf_free(&b->id); buf_free(&b->type); buf_free(&b->start); buf_free(&b->dur);
    strcol_free(&b->name);
    buf_free(&b->ctrl_off); buf_free(&b->ctrl); buf_free(&b->data_off); buf_free(&b->data);
    for (int d = 0; d < 2; d++) {
        sparse_free(&b->io[d]);
    }
    for (int s = 0; s < MAX_KNOWN; s++) {
        knowncol_t *k = &b->known[s];
        buf_free(&k->vals); buf_free(&k->valid); buf_free(&k->final_valid.bytes); strcol_free(&k->str);
        buf_free(&k->l_off); buf_free(&k->l_vals.bytes);
    }
    buf_free(&b->layout_off); buf_free(&b->layout); buf_free(&b->layout_valid); buf_free(&b->layout_final.bytes);
    extras_t *e = &b->ex;
    buf_free(&e->off); strcol_free(&e->name); strcol_free(&e->doc);
    buf_free(&e->kind); buf_free(&e->kind_valid.bytes);
    fixcol_free(&e->i64); fixcol_free(&e->u64); fixcol_free(&e->f64); fixcol_free(&e->f32);
    buf_free(&e->bool_vals.bytes); buf_free(&e->bool_valid.bytes);
    strcol_free(&e->str); strcol_free(&e->bytes);
    for (int k = 0; k < 7; k++) { buf_free(&e->l_off[k]); buf_free(&e->l_valid[k].bytes); }
    buf_free(&e->li64); buf_free(&e->lu64); buf_free(&e->lf64); buf_free(&e->lf32);
    buf_free(&e->lbool.bytes); strcol_free(&e->lstr); strcol_free(&e->lbytes);
    sparse_free(&b->unknown);
}

/* ------------------------------------------------------------------ decoding */

static int parse_attr(ctx_t *cx, span_t msg, attr_t *a) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    a->name.p = a->doc.p = a->body.p = NULL;
    a->name.n = a->doc.n = a->body.n = 0;
    a->has_doc = a->kind = 0;
    a->raw = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint64_t tag;
        if (get_varint(cx, &p, end, &tag, "attribute tag") < 0) return -1;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field == 1 || field == 2) {
            if (wt != 2) return fail(cx, at, "attribute field %d has wire type %d, expected 2", field, wt);
            span_t s;
            if (get_span(cx, &p, end, &s, field == 1 ? "attribute name" : "attribute doc_string") < 0) return -1;
            if (check_utf8(cx, s, field == 1 ? "attribute name" : "attribute doc_string") < 0) return -1;
            if (field == 1) a->name = s;
            else { a->doc = s; a->has_doc = s.n > 0; }
        } else if (field >= K_DOUBLE && field <= K_MAX) {
            int expected = kind_is_list(field) ? 2 : kind_wire_type(field);
            if (wt != expected)
                return fail(cx, at, "attribute value member %d has wire type %d, expected %d", field, wt, expected);
            a->kind = field;
            if (wt == 0) { if (get_varint(cx, &p, end, &a->raw, "attribute value") < 0) return -1; }
            else if (wt == 1) { if (get_fixed(cx, &p, end, 8, &a->raw, "attribute value") < 0) return -1; }
            else if (wt == 5) { if (get_fixed(cx, &p, end, 4, &a->raw, "attribute value") < 0) return -1; }
            else {
                if (get_span(cx, &p, end, &a->body, "attribute value") < 0) return -1;
                if (field == K_STRING && check_utf8(cx, a->body, "attribute string_val") < 0) return -1;
            }
        } else {
            return fail(cx, at, "attribute has field %d, which the Chakra schema does not define", field);
        }
    }
    return 0;
}

/*
 * Calls visit(elem) for each element of a list-kind attribute body (a XxxList message).
 * Accepts packed and unpacked encodings. For string/bytes elements, `elem_span` is set.
 */
typedef int (*elem_fn)(void *st, uint64_t raw, span_t s);

static int walk_list(ctx_t *cx, int kind, span_t body, elem_fn visit, void *st) {
    const uint8_t *p = body.p, *end = body.p + body.n;
    int ewt = kind_wire_type(kind);
    span_t none = {0, 0};
    while (p < end) {
        const uint8_t *at = p;
        uint64_t tag;
        if (get_varint(cx, &p, end, &tag, "list tag") < 0) return -1;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field != 1) return fail(cx, at, "list attribute has field %d; only field 1 is defined", field);
        if (wt == 2 && ewt != 2) { /* packed run */
            span_t run;
            if (get_span(cx, &p, end, &run, "packed list") < 0) return -1;
            const uint8_t *q = run.p, *qe = run.p + run.n;
            while (q < qe) {
                uint64_t raw = 0;
                if (ewt == 0 && get_varint(cx, &q, qe, &raw, "packed list element") < 0) return -1;
                if (ewt == 1 && get_fixed(cx, &q, qe, 8, &raw, "packed list element") < 0) return -1;
                if (ewt == 5 && get_fixed(cx, &q, qe, 4, &raw, "packed list element") < 0) return -1;
                if (visit(st, raw, none) < 0) return -1;
            }
        } else if (wt == ewt) {
            uint64_t raw = 0;
            span_t s = none;
            if (ewt == 0 && get_varint(cx, &p, end, &raw, "list element") < 0) return -1;
            if (ewt == 1 && get_fixed(cx, &p, end, 8, &raw, "list element") < 0) return -1;
            if (ewt == 5 && get_fixed(cx, &p, end, 4, &raw, "list element") < 0) return -1;
            if (ewt == 2) {
                if (get_span(cx, &p, end, &s, "list element") < 0) return -1;
                if (kind == K_STRING + 1 && check_utf8(cx, s, "string_list element") < 0) return -1;
            }
            if (visit(st, raw, s) < 0) return -1;
        } else {
            return fail(cx, at, "list element has wire type %d, expected %d", wt, ewt);
        }
    }
    return 0;
}

typedef struct { extras_t *e; int kind; } list_sink_t;

static int visit_extra_elem(void *stp, uint64_t raw, span_t s) {
    list_sink_t *st = stp;
    extras_t *e = st->e;
    int k = scalar_of(st->kind);
    if (kind_is_integer(k)) {
        __int128 v = int_from_wire(k, raw);
        if (kind_is_unsigned(k)) return buf_u64(&e->lu64, (uint64_t)v);
        int64_t sv = (int64_t)v;
        return buf_put(&e->li64, &sv, 8);
    }
    switch (k) {
    case K_DOUBLE: return buf_u64(&e->lf64, raw);
    case K_FLOAT: { uint32_t f = (uint32_t)raw; return buf_put(&e->lf32, &f, 4); }
    case K_BOOL: return bits_push(&e->lbool, raw != 0);
    case K_STRING: return strcol_push(&e->lstr, s.p, s.n, 1);
    case K_BYTES: return strcol_push(&e->lbytes, s.p, s.n, 1);
    }
    return 0;
}

static int list_slot(int kind) {
    int k = scalar_of(kind);
    if (kind_is_integer(k)) return kind_is_unsigned(k) ? L_UINT : L_INT;
    switch (k) {
    case K_DOUBLE: return L_DOUBLE;
    case K_FLOAT: return L_FLOAT;
    case K_BOOL: return L_BOOL;
    case K_STRING: return L_STRING;
    default: return L_BYTES;
    }
}

static int64_t list_child_len(extras_t *e, int slot) {
    switch (slot) {
    case L_INT: return (int64_t)(e->li64.len / 8);
    case L_UINT: return (int64_t)(e->lu64.len / 8);
    case L_DOUBLE: return (int64_t)(e->lf64.len / 8);
    case L_FLOAT: return (int64_t)(e->lf32.len / 4);
    case L_BOOL: return e->lbool.n;
    case L_STRING: return e->lstr.valid.n;
    default: return e->lbytes.valid.n;
    }
}

/* Appends one attribute to the other_attrs columns. Every value child gets a row (null unless it holds the value). */
static int push_extra(ctx_t *cx, extras_t *e, const attr_t *a) {
    int k = a->kind;
    if (strcol_push(&e->name, a->name.p, a->name.n, 1) < 0) return -1;
    if (strcol_push(&e->doc, a->doc.p, a->doc.n, a->has_doc) < 0) return -1;
    if (buf_u8(&e->kind, (uint8_t)(k ? k - K_DOUBLE : 0)) < 0 || bits_push(&e->kind_valid, k != 0) < 0) return -1;

    int scalar_int = k && !kind_is_list(k) && kind_is_integer(k);
    __int128 v = scalar_int ? int_from_wire(k, a->raw) : 0;
    int64_t sv = (int64_t)v;
    uint64_t uv = (uint64_t)v;
    int is_i = scalar_int && !kind_is_unsigned(k), is_u = scalar_int && kind_is_unsigned(k);
    if (buf_put(&e->i64.vals, &sv, 8) < 0 || bits_push(&e->i64.valid, is_i) < 0) return -1;
    if (buf_u64(&e->u64.vals, uv) < 0 || bits_push(&e->u64.valid, is_u) < 0) return -1;
    if (buf_u64(&e->f64.vals, k == K_DOUBLE ? a->raw : 0) < 0 || bits_push(&e->f64.valid, k == K_DOUBLE) < 0) return -1;
    uint32_t f = k == K_FLOAT ? (uint32_t)a->raw : 0;
    if (buf_put(&e->f32.vals, &f, 4) < 0 || bits_push(&e->f32.valid, k == K_FLOAT) < 0) return -1;
    if (bits_push(&e->bool_vals, k == K_BOOL && a->raw) < 0 || bits_push(&e->bool_valid, k == K_BOOL) < 0) return -1;
    if (strcol_push(&e->str, a->body.p, k == K_STRING ? a->body.n : 0, k == K_STRING) < 0) return -1;
    if (strcol_push(&e->bytes, a->body.p, k == K_BYTES ? a->body.n : 0, k == K_BYTES) < 0) return -1;

    int mine = (k && kind_is_list(k)) ? list_slot(k) : -1;
    if (mine >= 0) {
        list_sink_t st = {e, k};
        if (walk_list(cx, k, a->body, visit_extra_elem, &st) < 0) return -1;
    }
    for (int slot = 0; slot < 7; slot++) {
        if (list_close_row(&e->l_off[slot], list_child_len(e, slot)) < 0) return -1;
        if (bits_push(&e->l_valid[slot], slot == mine) < 0) return -1;
    }
    return 0;
}

/* Open-addressing table of well-known names, keyed by length and end bytes (built by configure). */
#define NAME_TABLE_SIZE 256
static int8_t name_table[NAME_TABLE_SIZE];

static inline unsigned name_hash(const uint8_t *p, size_t n) {
    return (unsigned)(n * 131u + (n ? p[0] * 31u + p[n - 1] * 7u + p[n / 2] : 0u)) & (NAME_TABLE_SIZE - 1);
}

static void build_name_table(void) {
    memset(name_table, -1, sizeof name_table);
    for (int s = 0; s < n_known; s++) {
        unsigned h = name_hash((const uint8_t *)known_name[s], known_len[s]);
        while (name_table[h] >= 0) h = (h + 1) & (NAME_TABLE_SIZE - 1);
        name_table[h] = (int8_t)s;
    }
}


/* a[0:n] == b[0:n], for the short names of attributes: two overlapping word compares, no call. */
static inline int short_eq(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n >= 8 && n <= 16) return load64(a) == load64(b) && load64(a + n - 8) == load64(b + n - 8);
    if (n >= 4 && n < 8) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
    return memcmp(a, b, n) == 0;
}

/* Slot of a well-known attribute name, or -1. Runs for every attribute, so: a hash probe, then one compare. */
static inline int match_known_hashed(span_t name) {
    for (unsigned h = name_hash(name.p, name.n);; h = (h + 1) & (NAME_TABLE_SIZE - 1)) {
        int s = name_table[h];
        if (s < 0) return -1;
        if (known_len[s] == name.n && short_eq((const uint8_t *)known_name[s], name.p, name.n)) return s;
    }
}

/*
 * Slot of a well-known name, trying first the slot that the attribute at the same position
 * had in the previous node: writers emit a node's attributes in a fixed order, so this one
 * compare usually replaces the hash probe. `guess` is that per-position memory (NULL past
 * GUESS_POSITIONS); a wrong or stale guess only costs the compare.
 */
static inline int match_known(span_t name, int8_t *guess) {
    int g = guess ? *guess : -1;
    if (g >= 0 && g < n_known && known_len[g] == name.n && short_eq((const uint8_t *)known_name[g], name.p, name.n)) return g;
    int s = match_known_hashed(name);
    if (guess && s >= 0) *guess = (int8_t)s;
    return s;
}

static int visit_bool(void *stp, uint64_t raw, span_t s) {
    (void)s;
    return bits_push((bits_t *)stp, raw != 0);
}

/* Grows b to n bytes, zero-filling what is added. */
static inline int buf_zero_extend(buf_t *b, size_t n) {
    if (n <= b->len) return 0;
    if (buf_reserve(b, n - b->len) < 0) return -1;
    memset(b->p + b->len, 0, n - b->len);
    b->len = n;
    return 0;
}

/* Writes the offsets of rows [*rows, row) of a lazily filled column (empty: its data length). */
static inline int catch_up(buf_t *off, int64_t *rows, int64_t row, size_t child_len) {
    if (*rows >= row) return 0;
    if (child_len > INT32_MAX) { batch_overflow = 1; return -1; }
    int32_t *o = (int32_t *)off->p;
    for (int64_t r = *rows; r < row; r++) o[r + 1] = (int32_t)child_len;
    *rows = row;
    return 0;
}

static __attribute__((noinline)) void zero_entries(int32_t *o, int64_t from, int64_t to) {
    memset(o + from, 0, (size_t)(to - from) * 4);
}

/* Ends row `row` of a lazily written offsets buffer (*written entries so far) at child_len. */
static inline int close_lazy(buf_t *off, int64_t *written, int64_t row, size_t child_len) {
    if (!child_len) return 0; /* every offset so far is 0: nothing written yet */
    if (child_len > INT32_MAX) { batch_overflow = 1; return -1; }
    int32_t *o = (int32_t *)off->p;
    if (*written <= row) zero_entries(o, *written, row + 1);
    o[row + 1] = (int32_t)child_len;
    *written = row + 2;
    return 0;
}

/* Ends row `row` of an offsets buffer at child_len (the buffer is ready for the row). */
static inline int close_row_at(buf_t *off, int64_t row, size_t child_len) {
    if (child_len > INT32_MAX) { batch_overflow = 1; return -1; }
    ((int32_t *)off->p)[row + 1] = (int32_t)child_len;
    return 0;
}

/* Writes one row's values into a sparse string group (the rows before it become null). */
static int sparse_set(batch_t *b, sparse_str_t *s, int64_t row, const span_t *values, const uint8_t *limit) {
    if (!LIKELY(s->live) && sparse_live(s, b->rows_ready) < 0) return -1;
    for (int c = 0; c < s->ncols; c++) {
        strcol_t *col = &s->col[c];
        int64_t rows = s->rows;
        if (catch_up(&col->off, &rows, row, col->data.len) < 0) return -1;
        if (buf_put_input(&col->data, values[c].p, values[c].n, limit) < 0) return -1;
        if (close_row_at(&col->off, row, col->data.len) < 0) return -1;
    }
    s->rows = row + 1;
    bit_set(&s->valid, row);
    return 0;
}

/* Pads a sparse group to n rows; an all-null group keeps no offsets (Python pads with zeros). */
static int sparse_finish(sparse_str_t *s, int64_t n) {
    if (!s->live && buf_zero_extend(&s->valid, (size_t)(n + 7) / 8) < 0) return -1;
    s->valid.len = (size_t)(n + 7) / 8;
    s->final_valid.bytes = s->valid;
    s->final_valid.n = n;
    s->final_valid.unset = n - (s->live ? count_bits(&s->valid, n) : 0);
    memset(&s->valid, 0, sizeof s->valid);
    if (!s->live) return 0;
    for (int c = 0; c < s->ncols; c++) {
        int64_t rows = s->rows;
        if (catch_up(&s->col[c].off, &rows, n, s->col[c].data.len) < 0) return -1;
        s->col[c].off.len = row_bytes(RB_OFFSETS, 0, n);
    }
    return 0;
}

/* Writes a well-known attribute of the node being decoded into its column, at the node's row. */
static inline int write_known(ctx_t *cx, batch_t *b, int s, const attr_t *a) {
    int64_t row = b->n;
    knowncol_t *col = &b->known[s];
    if (!LIKELY(col->live) && known_live(col, b->rows_ready) < 0) return -1;
    bit_set(&col->valid, row);
    switch (col->cls) {
    case C_BOOL:
        if (a->raw) bit_set(&col->vals, row);
        break;
    case C_INT:
    case C_UINT:
        put_u64_at(&col->vals, &col->rows, row, (uint64_t)int_from_wire(a->kind, a->raw));
        break;
    case C_STRING:
        if (catch_up(&col->str.off, &col->rows, row, col->str.data.len) < 0) return -1;
        if (buf_put_input(&col->str.data, a->body.p, a->body.n, cx->limit) < 0) return -1;
        if (close_row_at(&col->str.off, row, col->str.data.len) < 0) return -1;
        col->rows = row + 1;
        break;
    case C_BOOL_LIST:
        if (catch_up(&col->l_off, &col->rows, row, (size_t)col->l_vals.n) < 0) return -1;
        if (walk_list(cx, a->kind, a->body, visit_bool, &col->l_vals) < 0) return -1;
        if (close_row_at(&col->l_off, row, (size_t)col->l_vals.n) < 0) return -1;
        col->rows = row + 1;
        break;
    }
    return 0;
}

/* Sets every row-indexed buffer to the batch's n rows, pads lazily filled columns, fixes validity. */
static int finish_columns(batch_t *b) {
    int64_t n = b->n;
    b->id.len = row_bytes(RB_FIXED, 8, n);
    b->type.len = row_bytes(RB_FIXED, 4, n);
    buf_t *lazy_fixed[2] = {&b->start, &b->dur};
    int64_t *fixed_rows[2] = {&b->start_rows, &b->dur_rows};
    for (int k = 0; k < 2; k++) { /* never written: all zero, left empty (Python pads with shared zeros) */
        if (*fixed_rows[k] && *fixed_rows[k] < n) zero_rows((uint64_t *)lazy_fixed[k]->p, *fixed_rows[k], n);
        lazy_fixed[k]->len = *fixed_rows[k] ? row_bytes(RB_FIXED, 8, n) : 0;
    }
    buf_t *lazy_off[4] = {&b->ctrl_off, &b->data_off, &b->layout_off, &b->ex.off};
    int64_t *off_n[4] = {&b->ctrl_off_n, &b->data_off_n, &b->layout_off_n, &b->ex_off_n};
    for (int k = 0; k < 4; k++) lazy_off[k]->len = *off_n[k] ? row_bytes(RB_OFFSETS, 0, n) : 0;
    b->name.off.len = row_bytes(RB_OFFSETS, 0, n);
    b->layout_valid.len = row_bytes(RB_BITS, 0, n);
    b->layout_final.bytes = b->layout_valid;
    b->layout_final.n = n;
    b->layout_final.unset = n - count_bits(&b->layout_valid, n);
    memset(&b->layout_valid, 0, sizeof b->layout_valid);
    if (sparse_finish(&b->io[0], n) < 0 || sparse_finish(&b->io[1], n) < 0 || sparse_finish(&b->unknown, n) < 0)
        return -1;
    for (int s = 0; s < n_known; s++) {
        knowncol_t *col = &b->known[s];
        if (!col->live && buf_zero_extend(&col->valid, (size_t)(n + 7) / 8) < 0) return -1;
        col->valid.len = row_bytes(RB_BITS, 0, n);
        col->final_valid.bytes = col->valid;
        col->final_valid.n = n;
        col->final_valid.unset = n - (col->live ? count_bits(&col->valid, n) : 0);
        memset(&col->valid, 0, sizeof col->valid);
        if (!col->live) continue; /* all null: left short, the Python side substitutes shared zeros */
        switch (col->cls) {
        case C_BOOL: col->vals.len = row_bytes(RB_BITS, 0, n); break;
        case C_INT:
        case C_UINT:
            if (col->rows < n) memset(col->vals.p + col->rows * 8, 0, (size_t)(n - col->rows) * 8);
            col->vals.len = row_bytes(RB_FIXED, 8, n);
            break;
        case C_STRING:
            if (catch_up(&col->str.off, &col->rows, n, col->str.data.len) < 0) return -1;
            col->str.off.len = row_bytes(RB_OFFSETS, 0, n);
            break;
        case C_BOOL_LIST:
            if (catch_up(&col->l_off, &col->rows, n, (size_t)col->l_vals.n) < 0) return -1;
            col->l_off.len = row_bytes(RB_OFFSETS, 0, n);
            break;
        }
    }
    return 0;
}

/*
 * The common shape of an attribute, as every known writer emits it: name (field 1, short),
 * then one value member, nothing else. Returns 1 with `a` filled (name not yet UTF-8
 * checked), 0 when the message has another shape and needs parse_attr.
 */
static inline int parse_attr_fast(span_t msg, attr_t *a) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    if (msg.n < 3 || p[0] != 0x0a || p[1] >= 0x80 || (size_t)p[1] + 2 >= msg.n) return 0;
    a->name.p = p + 2;
    a->name.n = p[1];
    p += 2 + p[1];
    uint64_t tag;
    if (read_varint(&p, end, &tag) != 0) return 0;
    int kind = (int)(tag >> 3), wt = (int)(tag & 7);
    if (kind < K_DOUBLE || kind > K_MAX || wt != (kind_is_list(kind) ? 2 : kind_wire_type(kind))) return 0;
    a->value = p;
    a->raw = 0;
    a->body.p = NULL;
    a->body.n = 0;
    if (wt == 0) {
        if (read_varint(&p, end, &a->raw) != 0) return 0;
    } else if (wt == 1 || wt == 5) {
        size_t w = wt == 1 ? 8 : 4;
        if ((size_t)(end - p) < w) return 0;
        memcpy(&a->raw, p, w);
        p += w;
    } else {
        uint64_t n;
        if (read_varint(&p, end, &n) != 0 || n > (uint64_t)(end - p)) return 0;
        a->body.p = p;
        a->body.n = (size_t)n;
        p += n;
    }
    if (p != end) return 0;
    a->kind = kind;
    a->has_doc = 0;
    a->doc.p = NULL;
    a->doc.n = 0;
    return 1;
}

/* Is `kind` the kind the encoder writes for well-known column `slot` holding v, with a null layout? */
static inline int canonical_kind(int slot, int kind, __int128 v) {
    int chosen = known_default_kind[slot];
    if (known_class[slot] == C_INT || known_class[slot] == C_UINT) {
        if (!int_fits_kind(chosen, v)) chosen = known_class[slot] == C_INT ? K_INT64 : K_UINT64;
        return kind == chosen;
    }
    return 1; /* bool, string and bool-list columns have one kind */
}

/* Notes a well-known attribute for the node's layout: is the node still canonical? */
static inline void note_known(scratch_t *sc, int slot, int canon_kind) {
    if (sc->had_extra | (slot <= sc->last_known) | !canon_kind) sc->canon = 0;
    sc->last_known = slot;
}

static inline uint16_t layout_code(int slot, int kind) { return (uint16_t)(((slot + 1) << 5) | (kind - K_DOUBLE)); }

/* Remembers an attribute of the common shape that went into well-known column `slot`. */
static void remember_shape(scratch_t *sc, int after, span_t msg, const attr_t *a, int slot) {
    apos_t *e = &sc->shape[after];
    size_t keylen = (size_t)(a->value - msg.p);
    int wt = kind_wire_type(a->kind), cls = known_class[slot];
    e->keylen = 0;
    e->m0 = 0xff; /* matches nothing (an attribute starts 0x0a) until set below */
    e->k0 = e->k1 = e->m1 = 0;
    if (keylen > 16 || kind_is_list(a->kind)) return;
    uint8_t key[16] = {0};
    memcpy(key, msg.p, keylen);
    e->m0 = keylen >= 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * keylen)) - 1;
    e->m1 = keylen >= 16 ? ~(uint64_t)0 : keylen > 8 ? ((uint64_t)1 << (8 * (keylen - 8))) - 1 : 0;
    e->k0 = load64(key) & e->m0;
    e->k1 = load64(key + 8) & e->m1;
    if (cls == C_BOOL) e->op = OP_BOOL;
    else if (cls == C_INT && a->kind == K_INT64) e->op = OP_I64; /* any int64 fits: no check */
    else if ((cls == C_INT || cls == C_UINT) && wt == 0) e->op = OP_INT;
    else if (cls == C_STRING) e->op = OP_STRING;
    else {
        e->m0 = 0xff;
        e->k0 = e->k1 = e->m1 = 0;
        return;
    }
    e->kind = (uint8_t)a->kind;
    e->slot = (int8_t)slot;
    /* a value fits the kind it came as, so the default kind is canonical whatever the value */
    e->canon_kind = cls == C_INT || cls == C_UINT ? a->kind == known_default_kind[slot] : 1;
    /* following nothing, or a well-known attribute of a lower slot; never an other_attrs entry */
    int in_order = after == 0 || (after != AFTER_EXTRA && slot > after - 1);
    e->canon = e->canon_kind && in_order;
    e->code = layout_code(slot, a->kind);
    e->keylen = (uint8_t)keylen;
}

/*
 * The run of attributes at p (consecutive field-10 members of the node ending at `end`),
 * as long as each has the shape remembered for its position: reads each value and writes
 * it into its column. Returns where it stopped: at the first attribute that needs the
 * general path (which then also reports any error), or past the run; NULL when memory ran
 * out. Whatever it takes, handle_attr would have put in the same place.
 */
static __attribute__((noinline)) int canonical_int64(int slot, uint64_t raw) {
    return canonical_kind(slot, K_INT64, (int64_t)raw);
}

static __attribute__((noinline)) const uint8_t *attrs_by_shape(ctx_t *cx, batch_t *b, scratch_t *sc, const uint8_t *p,
                                                               const uint8_t *end) {
    const int64_t row = b->n;
    const size_t row_byte = (size_t)(row >> 3);
    const uint8_t row_bit = (uint8_t)(1u << (row & 7));
    const uint8_t *limit = cx->limit;
    /* the key compare loads 16 bytes after the length prefix: stop 32 bytes before the buffer's end */
    const uint8_t *stop = (size_t)(limit - p) > 32 ? (limit - 32 < end ? limit - 32 : end) : p;
    uint64_t seen = sc->seen_known;
    /* the node stays canonical while each attribute's remembered shape says it is (the shape
     * is remembered for what came before it: see apos_t.canon), as note_known would find */
    int pos = sc->n_attrs, canon = sc->canon, after = sc->after;
    uint16_t *codes = (uint16_t *)(b->layout.p + b->layout.len); /* room made by decode_node */
    while (p < stop && p[0] == 0x52) {
        const apos_t *e = &sc->shape[after]; /* an empty one never matches: its key needs a 0x00 first byte */
        const uint8_t *q = p + 1;
        uint64_t n;
        if (LIKELY(q[0] < 0x80)) {
            n = q[0];
            q++;
        } else if (read_varint(&q, end, &n) != 0) {
            break;
        }
        if (n > (uint64_t)(end - q)) break;
        if ((((load64(q) ^ e->k0) & e->m0) | ((load64(q + 8) ^ e->k1) & e->m1)) != 0) break;
        int slot = e->slot;
        if ((seen >> slot) & 1) break;
        /* the key matched, so the value starts at keylen (if the message is shorter, reading it fails below) */
        const uint8_t *v = q + e->keylen, *vend = q + n;
        knowncol_t *col = &b->known[slot];
        int ok = e->canon;
        uint64_t raw;
        switch (e->op) {
        case OP_BOOL:
            if (read_varint_in(&v, vend, limit, &raw) != 0 || v != vend) goto out;
            if (!LIKELY(col->live) && known_live(col, b->rows_ready) < 0) return NULL;
            if (raw) col->vals.p[row_byte] |= row_bit;
            break;
        case OP_I64:
            if (read_varint_in(&v, vend, limit, &raw) != 0 || v != vend) goto out;
            if (!LIKELY(col->live) && known_live(col, b->rows_ready) < 0) return NULL;
            put_u64_at(&col->vals, &col->rows, row, raw);
            if (!LIKELY(e->canon_kind)) ok = e->canon | (canonical_int64(slot, raw) & (after != AFTER_EXTRA) &
                                                          (after == 0 || slot > after - 1));
            break;
        case OP_INT: {
            if (read_varint_in(&v, vend, limit, &raw) != 0 || v != vend) goto out;
            __int128 iv = int_from_wire(e->kind, raw);
            if (!class_accepts(col->cls, e->kind, iv)) goto out;
            if (!LIKELY(col->live) && known_live(col, b->rows_ready) < 0) return NULL;
            put_u64_at(&col->vals, &col->rows, row, (uint64_t)iv);
            if (!e->canon_kind) ok = canonical_kind(slot, e->kind, iv) & (after != AFTER_EXTRA) &
                                     (after == 0 || slot > after - 1);
            break;
        }
        case OP_STRING: {
            uint64_t len;
            if (read_varint(&v, vend, &len) != 0 || len != (uint64_t)(vend - v) || !utf8_valid_in(v, (size_t)len, limit))
                goto out;
            if (!LIKELY(col->live) && known_live(col, b->rows_ready) < 0) return NULL;
            if (catch_up(&col->str.off, &col->rows, row, col->str.data.len) < 0) return NULL;
            if (buf_put_input(&col->str.data, v, (size_t)len, limit) < 0) return NULL;
            if (close_row_at(&col->str.off, row, col->str.data.len) < 0) return NULL;
            col->rows = row + 1;
            break;
        }
        default:
            goto out;
        }
        col->valid.p[row_byte] |= row_bit;
        seen |= (uint64_t)1 << slot;
        canon &= ok;
        *codes++ = e->code;
        pos++;
        after = slot + 1;
        p = vend;
    }
out:
    b->layout.len = (size_t)((uint8_t *)codes - b->layout.p);
    sc->after = after;
    sc->seen_known = seen;
    if (pos != sc->n_attrs) sc->last_known = after - 1;
    sc->n_attrs = pos;
    sc->canon = canon;
    return p;
}

/* Any attribute: the well-known column it belongs in, or an other_attrs entry. */
static __attribute__((noinline)) int handle_attr(ctx_t *cx, batch_t *b, scratch_t *sc, span_t msg, int position) {
    attr_t a;
    int slot, fast;
    int8_t *guess = position < GUESS_POSITIONS ? &sc->guess[position] : NULL;
    if ((fast = parse_attr_fast(msg, &a))) {
        slot = match_known(a.name, guess); /* a known name is valid UTF-8; any other is checked here */
        if (slot < 0 && check_utf8(cx, a.name, "attribute name") < 0) return -1;
        if (a.kind == K_STRING && check_utf8(cx, a.body, "attribute string_val") < 0) return -1;
    } else {
        if (parse_attr(cx, msg, &a) < 0) return -1;
        slot = match_known(a.name, guess);
    }
    if (slot >= 0 && !((sc->seen_known >> slot) & 1) && !a.has_doc && a.kind) {
        __int128 v = kind_is_integer(a.kind) && !kind_is_list(a.kind) ? int_from_wire(a.kind, a.raw) : 0;
        if (class_accepts(known_class[slot], a.kind, v)) {
            sc->seen_known |= (uint64_t)1 << slot;
            note_known(sc, slot, canonical_kind(slot, a.kind, v));
            if (fast) remember_shape(sc, sc->after, msg, &a, slot);
            sc->after = slot + 1;
            if (write_known(cx, b, slot, &a) < 0) return -1;
            return buf_u16(&b->layout, layout_code(slot, a.kind));
        }
    }
    sc->had_extra = 1;
    sc->after = AFTER_EXTRA;
    if (push_extra(cx, &b->ex, &a) < 0) return -1;
    return buf_u16(&b->layout, 0);
}

static inline int parse_io(ctx_t *cx, span_t msg, span_t out[3], const char *what) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    int ascii = ascii_in(msg.p, msg.n, cx->limit); /* one test for the three strings, most often */
    while (p < end) {
        const uint8_t *at = p;
        if (*p == 0x0a || *p == 0x12 || *p == 0x1a) { /* values, shapes, types */
            int f = *p++ >> 3;
            if (get_span(cx, &p, end, &out[f - 1], what) < 0) return -1;
            if (!ascii && check_utf8(cx, out[f - 1], what) < 0) return -1;
            continue;
        }
        uint64_t tag;
        if (get_varint(cx, &p, end, &tag, what) < 0) return -1;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field < 1 || field > 3 || wt != 2)
            return fail(cx, at, "%s has field %d (wire type %d), which the Chakra schema does not define", what, field, wt);
        if (get_span(cx, &p, end, &out[field - 1], what) < 0) return -1;
        if (check_utf8(cx, out[field - 1], what) < 0) return -1;
    }
    return 0;
}

/*
 * An IOInfo of the common form (values, shapes, types: each once, in that order) written
 * straight into its three columns at the node's row. Returns 1 when done (its spans also
 * in out[]), 0 when the message needs parse_io (which then reports any error), -1 when
 * memory ran out.
 */
static inline int io_direct(ctx_t *cx, batch_t *b, sparse_str_t *s, span_t msg, span_t out[3]) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    span_t v[3];
    for (int f = 0; f < 3; f++) {
        uint64_t n;
        if (p >= end || *p != (uint8_t)(((f + 1) << 3) | 2)) return 0;
        p++;
        if (read_varint(&p, end, &n) != 0 || n > (uint64_t)(end - p)) return 0;
        v[f].p = p;
        v[f].n = (size_t)n;
        p += n;
    }
    if (p != end) return 0;
    if (!ascii_in(msg.p, msg.n, cx->limit))
        for (int f = 0; f < 3; f++)
            if (!utf8_valid_in(v[f].p, v[f].n, cx->limit)) return 0;
    int64_t row = b->n;
    out[0] = v[0];
    out[1] = v[1];
    out[2] = v[2];
    if (!LIKELY(s->live && s->rows == row && (size_t)(cx->limit - end) >= COPY_SLACK))
        return sparse_set(b, s, row, v, cx->limit) < 0 ? -1 : 1;
    /* the common case, unrolled: the three strings end before `end`, 64 bytes or more from limit */
    for (int c = 0; c < 3; c++) {
        buf_t *data = &s->col[c].data;
        size_t n = v[c].n;
        if (!LIKELY(data->len + n + COPY_SLACK <= data->cap) && buf_grow(data, n + COPY_SLACK) < 0) return -1;
        uint8_t *d = data->p + data->len;
        for (size_t i = 0; i < n; i += 64) memcpy(d + i, v[c].p + i, 64);
        data->len += n;
        if (data->len > INT32_MAX) { batch_overflow = 1; return -1; }
        ((int32_t *)s->col[c].off.p)[row + 1] = (int32_t)data->len;
    }
    s->rows = row + 1;
    bit_set(&s->valid, row);
    return 1;
}

/* Takes back what io_direct wrote at `row` (a second inputs or outputs field merges into the first). */
static void io_undo(sparse_str_t *s, int64_t row) {
    for (int c = 0; c < s->ncols; c++) s->col[c].data.len = (size_t)((int32_t *)s->col[c].off.p)[row];
    s->rows = row;
    s->valid.p[row >> 3] &= (uint8_t)~(1u << (row & 7));
}

static int push_deps(ctx_t *cx, buf_t *dst, const uint8_t **pp, const uint8_t *end, int wt, const char *what) {
    uint64_t v;
    if (wt == 0) {
        if (get_varint(cx, pp, end, &v, what) < 0) return -1;
        return buf_u64(dst, v);
    }
    span_t run;
    if (get_span(cx, pp, end, &run, what) < 0) return -1;
    if (buf_reserve(dst, run.n * 8) < 0) return -1; /* a varint is one byte at least */
    const uint8_t *q = run.p, *qe = run.p + run.n;
    while (q < qe) {
        if (get_varint(cx, &q, qe, &v, what) < 0) return -1;
        memcpy(dst->p + dst->len, &v, 8);
        dst->len += 8;
    }
    return 0;
}

/* An inputs (d = 0) or outputs (d = 1) field, its tag at *pp. */
static inline int io_field(ctx_t *cx, batch_t *b, scratch_t *sc, int d, const uint8_t **pp, const uint8_t *end) {
    span_t io;
    const char *what = d ? "outputs" : "inputs";
    (*pp)++;
    if (get_span(cx, pp, end, &io, what) < 0) return -1;
    if (!sc->has_io[d]) { /* the first: most often straight into the columns */
        int r = io_direct(cx, b, &b->io[d], io, sc->io[d]);
        if (r < 0) return -1;
        if (r) {
            sc->has_io[d] = 2;
            return 0;
        }
        memset(sc->io[d], 0, sizeof sc->io[d]);
    } else if (sc->has_io[d] == 2) { /* a repeat merges into the first: written at the end instead */
        io_undo(&b->io[d], b->n);
    }
    if (parse_io(cx, io, sc->io[d], what) < 0) return -1;
    sc->has_io[d] = 1;
    return 0;
}

static int decode_node(ctx_t *cx, batch_t *b, scratch_t *sc, span_t msg) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    int64_t row = b->n;
    if (!LIKELY(row < b->rows_ready) && grow_rows(b, b->rows_ready + (b->rows_ready >> 1) + 1024) < 0) return -1;
    uint64_t id = 0, start = 0, dur = 0, v;
    int32_t type = 0;
    span_t name = {NULL, 0};
    sc->has_io[0] = sc->has_io[1] = 0;
    sc->seen_known = 0;
    sc->n_attrs = 0;
    sc->canon = 1;
    sc->last_known = -1;
    sc->had_extra = 0;
    sc->after = 0;
    sc->unknown.len = 0;
    size_t layout_start = b->layout.len;
    /* room for a layout entry per attribute: each takes 2 bytes of the message at least */
    if (!LIKELY(b->layout.len + msg.n + 2 <= b->layout.cap) && buf_grow(&b->layout, msg.n + 2) < 0) return -1;
    cx->have_id = 0;
    /* the fields in the order writers emit them, each optional, straight through (no branch
     * on the tag to predict); what is left (another order, repeats, other fields or
     * encodings) is taken by the loop below */
    if (p < end && *p == 0x08) {
        p++;
        if (get_varint(cx, &p, end, &id, "node id") < 0) return -1;
        cx->have_id = 1;
        cx->node_id = id;
    }
    if (p < end && *p == 0x12) {
        p++;
        if (get_span(cx, &p, end, &name, "node name") < 0 || check_utf8(cx, name, "node name") < 0) return -1;
    }
    if (p < end && *p == 0x18) {
        p++;
        if (get_varint(cx, &p, end, &v, "node type") < 0) return -1;
        type = (int32_t)(uint32_t)v;
    }
    if (p < end && *p == 0x22) {
        p++;
        if (push_deps(cx, &b->ctrl, &p, end, 2, "ctrl_deps") < 0) return -1;
    }
    if (p < end && *p == 0x2a) {
        p++;
        if (push_deps(cx, &b->data, &p, end, 2, "data_deps") < 0) return -1;
    }
    if (p < end && *p == 0x30) {
        p++;
        if (get_varint(cx, &p, end, &start, "start_time_micros") < 0) return -1;
    }
    if (p < end && *p == 0x38) {
        p++;
        if (get_varint(cx, &p, end, &dur, "duration_micros") < 0) return -1;
    }
    if (p < end && *p == 0x42 && io_field(cx, b, sc, 0, &p, end) < 0) return -1;
    if (p < end && *p == 0x4a && io_field(cx, b, sc, 1, &p, end) < 0) return -1;
    if (p < end && *p == 0x52 && !(p = attrs_by_shape(cx, b, sc, p, end))) return -1;
    while (p < end) {
        const uint8_t *at = p;
        /* the tags every writer uses, one byte each; any other encoding takes the general path below */
        switch (*p) {
        case 0x08: /* 1 id */
            p++;
            if (get_varint(cx, &p, end, &id, "node id") < 0) return -1;
            cx->have_id = 1;
            cx->node_id = id;
            continue;
        case 0x12: /* 2 name */
            p++;
            if (get_span(cx, &p, end, &name, "node name") < 0 || check_utf8(cx, name, "node name") < 0) return -1;
            continue;
        case 0x18: /* 3 type */
            p++;
            if (get_varint(cx, &p, end, &v, "node type") < 0) return -1;
            type = (int32_t)(uint32_t)v;
            continue;
        case 0x22: /* 4 ctrl_deps, packed */
            p++;
            if (push_deps(cx, &b->ctrl, &p, end, 2, "ctrl_deps") < 0) return -1;
            continue;
        case 0x2a: /* 5 data_deps, packed */
            p++;
            if (push_deps(cx, &b->data, &p, end, 2, "data_deps") < 0) return -1;
            continue;
        case 0x30: /* 6 start_time_micros */
            p++;
            if (get_varint(cx, &p, end, &start, "start_time_micros") < 0) return -1;
            continue;
        case 0x38: /* 7 duration_micros */
            p++;
            if (get_varint(cx, &p, end, &dur, "duration_micros") < 0) return -1;
            continue;
        case 0x42: /* 8 inputs */
        case 0x4a: /* 9 outputs */
            if (io_field(cx, b, sc, *p == 0x4a, &p, end) < 0) return -1;
            continue;
        case 0x52: { /* 10 attr: the run of them by their remembered shapes, then one by the general path */
            const uint8_t *q = attrs_by_shape(cx, b, sc, p, end);
            if (!q) return -1;
            if (q != p) {
                p = q;
                continue;
            }
            span_t am;
            p++;
            if (get_span(cx, &p, end, &am, "attribute") < 0) return -1;
            if (handle_attr(cx, b, sc, am, sc->n_attrs++) < 0) return -1;
            continue;
        }
        }
        uint64_t tag;
        if (get_varint(cx, &p, end, &tag, "node field tag") < 0) return -1;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        int want = (field == 2 || field >= 8) ? 2 : 0;
        if (field == 0) return fail(cx, at, "node has field number 0 (not protobuf)");
        if (field <= 10 && wt != want && !((field == 4 || field == 5) && wt == 2))
            return fail(cx, at, "node field %d has wire type %d, expected %d", field, wt, want);
        switch (field) {
        case 1:
            if (get_varint(cx, &p, end, &id, "node id") < 0) return -1;
            cx->have_id = 1;
            cx->node_id = id;
            break;
        case 2:
            if (get_span(cx, &p, end, &name, "node name") < 0 || check_utf8(cx, name, "node name") < 0) return -1;
            break;
        case 3:
            if (get_varint(cx, &p, end, &v, "node type") < 0) return -1;
            type = (int32_t)(uint32_t)v;
            break;
        case 4: if (push_deps(cx, &b->ctrl, &p, end, wt, "ctrl_deps") < 0) return -1; break;
        case 5: if (push_deps(cx, &b->data, &p, end, wt, "data_deps") < 0) return -1; break;
        case 6: if (get_varint(cx, &p, end, &start, "start_time_micros") < 0) return -1; break;
        case 7: if (get_varint(cx, &p, end, &dur, "duration_micros") < 0) return -1; break;
        case 8:
        case 9: {
            span_t io;
            int d = field - 8;
            if (get_span(cx, &p, end, &io, d ? "outputs" : "inputs") < 0) return -1;
            if (!sc->has_io[d]) memset(sc->io[d], 0, sizeof sc->io[d]); /* a repeat merges into the first */
            else if (sc->has_io[d] == 2) io_undo(&b->io[d], row);
            if (parse_io(cx, io, sc->io[d], d ? "outputs" : "inputs") < 0) return -1;
            sc->has_io[d] = 1;
            break;
        }
        case 10: {
            span_t am;
            if (get_span(cx, &p, end, &am, "attribute") < 0) return -1;
            if (handle_attr(cx, b, sc, am, sc->n_attrs++) < 0) return -1;
            break;
        }
        default: /* a field from a newer schema: keep its bytes, re-emitted after the known fields */
            if (skip_field(cx, &p, end, wt, "unknown node field") < 0) return -1;
            if (buf_put(&sc->unknown, at, (size_t)(p - at)) < 0) return -1;
        }
    }
    /* commit the node's row */
    ((uint64_t *)b->id.p)[row] = id;
    ((int32_t *)b->type.p)[row] = type;
    if (start) put_u64_at(&b->start, &b->start_rows, row, start);
    if (dur) put_u64_at(&b->dur, &b->dur_rows, row, dur);
    if (buf_put_input(&b->name.data, name.p, name.n, cx->limit) < 0) return -1;
    if (sc->canon) b->layout.len = layout_start; /* null: the encoder gets these bytes back from the columns alone */
    else bit_set(&b->layout_valid, row);
    if (close_row_at(&b->name.off, row, b->name.data.len) < 0 ||
        close_lazy(&b->ctrl_off, &b->ctrl_off_n, row, b->ctrl.len / 8) < 0 ||
        close_lazy(&b->data_off, &b->data_off_n, row, b->data.len / 8) < 0 ||
        close_lazy(&b->layout_off, &b->layout_off_n, row, b->layout.len / 2) < 0 ||
        close_lazy(&b->ex.off, &b->ex_off_n, row, (size_t)b->ex.name.valid.n) < 0)
        return -1;
    for (int d = 0; d < 2; d++)
        if (sc->has_io[d] == 1 && sparse_set(b, &b->io[d], row, sc->io[d], cx->limit) < 0) return -1;
    if (sc->unknown.len) {
        span_t raw = {sc->unknown.p, sc->unknown.len};
        if (sparse_set(b, &b->unknown, row, &raw, sc->unknown.p + sc->unknown.len) < 0) return -1;
    }
    b->n++;
    return 0;
}

/* ------------------------------------------------------------------ buffers -> Python */

/* A bytes-like object that owns a malloc'd buffer: hands decoded columns to pyarrow without a copy. */
typedef struct {
    PyObject_HEAD
    uint8_t *p;
    Py_ssize_t len;
    size_t cap;
} OwnedBuffer;

static void owned_dealloc(OwnedBuffer *self) {
    mem_release(self->p, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags) {
    static uint8_t empty;
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : &empty, self->len, 1, flags);
}

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_core._native._etcodec.OwnedBuffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_doc = "Memory of one decoded column buffer.",
};

/* Moves b's memory into a new OwnedBuffer stored under key (b is left empty). */
static int put_bytes(PyObject *d, const char *key, buf_t *b) {
    OwnedBuffer *v = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!v) return -1;
    if (!b->len) { /* nothing to hand over: the memory goes back at once */
        buf_free(b);
    } else if (b->cap < POOL_MIN && b->len < b->cap) { /* give back the doubling slack */
        uint8_t *shrunk = realloc(b->p, b->len);
        if (shrunk) { b->p = shrunk; b->cap = b->len; }
    }
    v->p = b->p;
    v->len = (Py_ssize_t)b->len;
    v->cap = b->cap;
    b->p = NULL;
    b->len = b->cap = 0;
    int r = PyDict_SetItemString(d, key, (PyObject *)v);
    Py_DECREF(v);
    return r;
}

/* Validity bitmaps become None when every row is valid (Arrow's convention). */
static int put_bits(PyObject *d, const char *key, bits_t *b) {
    if (b->unset == 0) return PyDict_SetItemString(d, key, Py_None);
    return put_bytes(d, key, &b->bytes);
}

static int put_str(PyObject *d, const char *prefix, strcol_t *c) {
    char k[96];
    snprintf(k, sizeof k, "%s.off", prefix);
    if (put_bytes(d, k, &c->off) < 0) return -1;
    snprintf(k, sizeof k, "%s.data", prefix);
    if (put_bytes(d, k, &c->data) < 0) return -1;
    snprintf(k, sizeof k, "%s.valid", prefix);
    return put_bits(d, k, &c->valid);
}

static int put_fix(PyObject *d, const char *prefix, buf_t *vals, bits_t *valid) {
    char k[96];
    snprintf(k, sizeof k, "%s.vals", prefix);
    if (put_bytes(d, k, vals) < 0) return -1;
    snprintf(k, sizeof k, "%s.valid", prefix);
    return put_bits(d, k, valid);
}

static const char *LIST_NAMES[7] = {"int_list", "uint_list", "double_list", "float_list",
                                    "bool_list", "string_list", "bytes_list"};

static PyObject *batch_to_dict(batch_t *b) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    char k[96];
    PyObject *n = PyLong_FromLongLong(b->n);
    if (!n || PyDict_SetItemString(d, "n", n) < 0) { Py_XDECREF(n); goto err; }
    Py_DECREF(n);
    if (put_bytes(d, "id", &b->id) < 0 || put_bytes(d, "type", &b->type) < 0 || put_bytes(d, "start", &b->start) < 0 ||
        put_bytes(d, "dur", &b->dur) < 0 || put_str(d, "name", &b->name) < 0 ||
        put_bytes(d, "ctrl.off", &b->ctrl_off) < 0 || put_bytes(d, "ctrl.vals", &b->ctrl) < 0 ||
        put_bytes(d, "data.off", &b->data_off) < 0 || put_bytes(d, "data.vals", &b->data) < 0 ||
        put_bytes(d, "layout.off", &b->layout_off) < 0 || put_bytes(d, "layout.vals", &b->layout) < 0 ||
        put_bits(d, "layout.valid", &b->layout_final) < 0 ||
        put_bytes(d, "unknown.off", &b->unknown.col[0].off) < 0 ||
        put_bytes(d, "unknown.data", &b->unknown.col[0].data) < 0 ||
        put_bits(d, "unknown.valid", &b->unknown.final_valid) < 0)
        goto err;
    static const char *IO[2] = {"inputs", "outputs"}, *IOF[3] = {"values", "shapes", "types"};
    for (int io = 0; io < 2; io++) {
        for (int f = 0; f < 3; f++) {
            snprintf(k, sizeof k, "%s.%s", IO[io], IOF[f]);
            if (put_str(d, k, &b->io[io].col[f]) < 0) goto err; /* children are never null themselves */
        }
        snprintf(k, sizeof k, "%s.valid", IO[io]);
        if (put_bits(d, k, &b->io[io].final_valid) < 0) goto err;
    }
    for (int s = 0; s < n_known; s++) {
        knowncol_t *c = &b->known[s];
        const char *nm = known_name[s];
        int r = 0;
        switch (c->cls) {
        case C_BOOL:
        case C_INT:
        case C_UINT: r = put_fix(d, nm, &c->vals, &c->final_valid); break;
        case C_STRING:
            c->str.valid = c->final_valid; /* the lazily built validity replaces strcol's unused one */
            memset(&c->final_valid, 0, sizeof c->final_valid);
            r = put_str(d, nm, &c->str);
            break;
        case C_BOOL_LIST:
            snprintf(k, sizeof k, "%s.off", nm);
            r = put_bytes(d, k, &c->l_off);
            snprintf(k, sizeof k, "%s.vals", nm);
            if (r == 0) r = put_bytes(d, k, &c->l_vals.bytes);
            snprintf(k, sizeof k, "%s.valid", nm);
            if (r == 0) r = put_bits(d, k, &c->final_valid);
            break;
        }
        if (r < 0) goto err;
    }
    extras_t *e = &b->ex;
    if (put_bytes(d, "x.off", &e->off) < 0 || put_str(d, "x.name", &e->name) < 0 || put_str(d, "x.doc", &e->doc) < 0 ||
        put_fix(d, "x.kind", &e->kind, &e->kind_valid) < 0 || put_fix(d, "x.int", &e->i64.vals, &e->i64.valid) < 0 ||
        put_fix(d, "x.uint", &e->u64.vals, &e->u64.valid) < 0 || put_fix(d, "x.double", &e->f64.vals, &e->f64.valid) < 0 ||
        put_fix(d, "x.float", &e->f32.vals, &e->f32.valid) < 0 || put_fix(d, "x.bool", &e->bool_vals.bytes, &e->bool_valid) < 0 ||
        put_str(d, "x.string", &e->str) < 0 || put_str(d, "x.bytes", &e->bytes) < 0)
        goto err;
    for (int slot = 0; slot < 7; slot++) {
        snprintf(k, sizeof k, "x.%s.off", LIST_NAMES[slot]);
        if (put_bytes(d, k, &e->l_off[slot]) < 0) goto err;
        snprintf(k, sizeof k, "x.%s.valid", LIST_NAMES[slot]);
        if (put_bits(d, k, &e->l_valid[slot]) < 0) goto err;
    }
    if (put_bytes(d, "x.int_list.vals", &e->li64) < 0 || put_bytes(d, "x.uint_list.vals", &e->lu64) < 0 ||
        put_bytes(d, "x.double_list.vals", &e->lf64) < 0 || put_bytes(d, "x.float_list.vals", &e->lf32) < 0 ||
        put_bytes(d, "x.bool_list.vals", &e->lbool.bytes) < 0 || put_str(d, "x.string_list.item", &e->lstr) < 0 ||
        put_str(d, "x.bytes_list.item", &e->lbytes) < 0)
        goto err;
    return d;
err:
    Py_DECREF(d);
    return NULL;
}

#define MAX_MESSAGE_BYTES ((uint64_t)1 << 30)
#define PREFETCH_AHEAD 2048 /* bytes of the input fetched ahead of the message being read */

/* Decodes up to max_nodes messages from *pp; stops early at a cut-off message unless final. No Python calls. */
/*
 * Decodes up to max_nodes messages from *pp; stops early at a cut-off message unless final.
 * `stops` (nstops positions after *pp, increasing) are where other threads started: the
 * run ends at the first it lands on exactly (*landed = its index, else -1), so that runs
 * chain. No Python calls.
 */
static int decode_range(ctx_t *cx, batch_t *b, scratch_t *sc, const uint8_t **pp, const uint8_t *end,
                        Py_ssize_t max_nodes, int final, const uint8_t *const *stops, int nstops, int *landed) {
    const uint8_t *p = *pp;
    int rc = 0, next = 0;
    const uint8_t *stop = nstops ? stops[0] : end + 1;
    *landed = -1;
    while (b->n < max_nodes && p < end) {
        if (p >= stop) { /* at or past where the next thread started */
            if (p == stop) { *landed = next; break; }
            while (++next < nstops && stops[next] < p) {}
            stop = next < nstops ? stops[next] : end + 1;
            if (p == stop) { *landed = next; break; }
        }
        const uint8_t *q = p;
        uint64_t len;
        cx->msg_offset = cx->base_offset + (int64_t)(p - cx->base);
        cx->have_id = 0;
        int r = read_varint(&q, end, &len);
        if (r == 1 && !final) break;
        if (r == 1) { rc = fail(cx, p, "truncated file: the length prefix of node %lld is cut off", (long long)cx->node_index); break; }
        if (r == 2 || len > MAX_MESSAGE_BYTES) {
            rc = fail(cx, p, "corrupt length prefix for node %lld (not a Chakra ET, or damaged)", (long long)cx->node_index);
            break;
        }
        if (len > (uint64_t)(end - q)) {
            if (!final) break;
            rc = fail(cx, p, "truncated file: node %lld declares %llu bytes but only %lld remain",
                      (long long)cx->node_index, (unsigned long long)len, (long long)(end - q));
            break;
        }
        span_t msg = {q, (size_t)len};
        if (decode_node(cx, b, sc, msg) < 0) { rc = -1; break; }
        p = q + len;
        cx->node_index++;
    }
    *pp = p;
    return rc;
}

/* One contiguous run of whole messages, decoded by one thread. */
typedef struct {
    ctx_t cx;
    batch_t *b;
    scratch_t *sc;
    const uint8_t *start, *p, *end;
    Py_ssize_t max_nodes;
    const uint8_t *const *stops; /* where the runs after this one start */
    int nstops, landed;
    int final, rc, alloc_failed, overflow;
} part_t;

static void run_part(part_t *pt) {
    alloc_failed = batch_overflow = 0;
    pt->rc = decode_range(&pt->cx, pt->b, pt->sc, &pt->p, pt->end, pt->max_nodes, pt->final, pt->stops, pt->nstops,
                          &pt->landed);
    if (pt->rc == 0) pt->rc = finish_columns(pt->b);
    pt->alloc_failed = alloc_failed;
    pt->overflow = batch_overflow;
}

static void *part_thread(void *arg) {
    run_part(arg);
    return NULL;
}

#define MAX_PARTS 16

/* Bytes a message in the last decoded data, to size the next batch's buffers. */
static size_t msg_bytes_hint = 256;
#define MIN_PART_NODES 1024

/*
 * Splits the whole messages at the front of [p, end) (at most max_nodes) into up to
 * `parts` runs of about equal bytes. Returns the number of runs, 0 when there are too few
 * messages to be worth splitting. A cut-off or corrupt length prefix ends the scan: what
 * follows is left to the sequential path, which reports it.
 */
static int split_messages(const uint8_t *p, const uint8_t *end, Py_ssize_t max_nodes, int parts,
                          const uint8_t **starts, const uint8_t **ends, Py_ssize_t *counts) {
    const uint8_t *q = p;
    Py_ssize_t total = 0;
    uint64_t len;
    if (parts < 2) return 0;
    /* Each step needs the previous length, so without help the walk waits on memory once a
     * message; fetching the lines ahead of it in order turns that into a sequential read
     * (which the decoding threads then find in cache). */
    const uint8_t *fetched = p;
    while (total < max_nodes && q < end) {
        const uint8_t *r = q;
        for (; fetched < q + PREFETCH_AHEAD && fetched < end; fetched += 64) __builtin_prefetch(fetched);
        if (read_varint(&r, end, &len) != 0 || len > MAX_MESSAGE_BYTES || len > (uint64_t)(end - r)) break;
        q = r + len;
        total++;
    }
    if (total < (Py_ssize_t)parts * MIN_PART_NODES) return 0;
    size_t target = (size_t)(q - p) / (size_t)parts;
    const uint8_t *stop = q;
    int k = 0;
    starts[0] = p;
    counts[0] = 0;
    q = p;
    while (q < stop) {
        const uint8_t *r = q;
        read_varint(&r, end, &len);
        q = r + len;
        counts[k]++;
        if (k < parts - 1 && (size_t)(q - starts[k]) >= target) {
            ends[k] = q;
            starts[++k] = q;
            counts[k] = 0;
        }
    }
    ends[k] = stop;
    return counts[k] ? k + 1 : k;
}

/*
 * Splitting without a walk. Following the length prefixes from the start to cut the data
 * into equal runs costs one dependent load a message (half as long as decoding the data,
 * on one thread, before the others can start), so instead each later run starts where the
 * data *looks like* a message boundary, past its share of the bytes: a length prefix whose
 * message, and the SPLIT_HOPS messages after it, fit the data and begin with a byte one of
 * the first SPLIT_SAMPLE messages begins with (a node's id tag, for every writer we know).
 * A guess is only used once the run before it, decoding message by message, lands on it
 * exactly; a wrong guess costs that run's work, never a result: the run before it goes on
 * past it.
 */
#define SPLIT_HOPS 4
#define SPLIT_SCAN ((size_t)1 << 16)     /* bytes searched for a boundary */
#define MIN_PART_BYTES ((size_t)1 << 20) /* a run shorter than this is not worth a thread */

#define SPLIT_SAMPLE 16                 /* messages whose first bytes make the signature */

/* sig: bitmap of the bytes the sampled messages begin with. */
static const uint8_t *find_boundary(const uint8_t *from, const uint8_t *end, const uint64_t sig[4]) {
    const uint8_t *last = (size_t)(end - from) > SPLIT_SCAN ? from + SPLIT_SCAN : end;
    for (const uint8_t *c = from; c < last; c++) {
        const uint8_t *q = c;
        int hop = 0;
        for (; hop <= SPLIT_HOPS; hop++) {
            uint64_t len;
            if (read_varint(&q, end, &len) != 0 || len == 0 || len > (uint64_t)(end - q) ||
                !((sig[*q >> 6] >> (*q & 63)) & 1))
                break;
            q += len;
        }
        if (hop > SPLIT_HOPS) return c;
    }
    return NULL;
}

/* Up to parts - 1 guessed boundaries in (p, end), increasing; returns how many. */
static int guess_starts(const uint8_t *p, const uint8_t *end, int parts, const uint8_t **guesses) {
    const uint8_t *q = p;
    uint64_t sig[4] = {0, 0, 0, 0};
    int n = 0;
    for (int m = 0; m < SPLIT_SAMPLE && q < end; m++) { /* the first bytes of the first messages */
        uint64_t len;
        if (read_varint(&q, end, &len) != 0 || len == 0 || len > (uint64_t)(end - q)) return 0;
        sig[*q >> 6] |= (uint64_t)1 << (*q & 63);
        q += len;
    }
    for (int k = 1; k < parts; k++) {
        const uint8_t *from = p + (size_t)(end - p) / (size_t)parts * (size_t)k;
        if (n && from <= guesses[n - 1]) from = guesses[n - 1] + 1;
        const uint8_t *c = find_boundary(from, end, sig);
        if (c && (size_t)(end - c) >= MIN_PART_BYTES / 2) guesses[n++] = c;
    }
    return n;
}

/*
 * decode(data, start, base_offset, first_index, max_nodes, final, threads)
 *     -> ([batch dict, ...], end position)
 *
 * Decodes length-prefixed Node messages from data[start:], up to max_nodes a batch;
 * base_offset is the file offset of data[0]. With threads > 1 and enough bytes, runs of
 * whole messages are decoded in parallel, one batch each, in file order: from guessed
 * starts (see find_boundary; up to max_nodes each), else from starts found by walking the
 * length prefixes (up to max_nodes in all). A message cut off by the end of `data` is left
 * for the next call unless `final` is true, when it is a truncation error. Errors raise
 * FormatError(message, offset, message_offset, node_index, node_id), the first in file order.
 */
static PyObject *py_decode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    long long base_offset, first_index;
    Py_ssize_t start, max_nodes;
    int final, threads;
    if (!PyArg_ParseTuple(args, "y*nLLnpi", &view, &start, &base_offset, &first_index, &max_nodes, &final, &threads))
        return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start outside the buffer");
        return NULL;
    }
    const uint8_t *base = view.buf, *p = base + start, *end = base + view.len;
    const uint8_t *starts[MAX_PARTS], *ends[MAX_PARTS];
    Py_ssize_t counts[MAX_PARTS];
    if (threads > MAX_PARTS) threads = MAX_PARTS;
    /* runs: guessed starts (chained by landing), else equal runs from a walk, else one run */
    int nparts = 0, guessed = 0;
    if (threads > 1 && max_nodes >= MIN_PART_NODES && (size_t)(end - p) >= (size_t)threads * MIN_PART_BYTES) {
        guessed = guess_starts(p, end, threads, starts + 1);
        if (guessed) {
            nparts = guessed + 1;
            starts[0] = p;
            for (int k = 0; k < nparts; k++) {
                ends[k] = end;
                counts[k] = max_nodes;
            }
        }
    }
    if (!nparts) nparts = split_messages(p, end, max_nodes, threads, starts, ends, counts);
    int split = nparts > 0;
    if (!split) { /* one sequential run, honouring max_nodes and final as given */
        nparts = 1;
        starts[0] = p;
        ends[0] = end;
        counts[0] = max_nodes;
    }
    part_t parts[MAX_PARTS];
    memset(parts, 0, sizeof parts);
    PyObject *result = NULL, *list = NULL;
    int ready = 0;
    long long index = first_index;
    for (; ready < nparts; ready++) {
        part_t *pt = &parts[ready];
        pt->b = malloc(sizeof *pt->b);
        pt->sc = scratch_new();
        const uint8_t *run_end = guessed && ready < guessed ? starts[ready + 1] : ends[ready];
        int64_t expect = (int64_t)((size_t)(run_end - starts[ready]) / msg_bytes_hint); /* + 1/8: sizes vary */
        expect += expect / 8 + 16;
        if (split && !guessed) expect = counts[ready];
        if (expect > counts[ready]) expect = counts[ready];
        if (!pt->b || !pt->sc || batch_init(pt->b, expect) < 0) { PyErr_NoMemory(); ready++; goto done; }
        pt->cx = (ctx_t){.base = base, .limit = end, .base_offset = base_offset, .node_index = index};
        pt->start = pt->p = starts[ready];
        pt->end = ends[ready];
        pt->max_nodes = counts[ready];
        pt->final = split && !guessed ? 1 : final;
        if (guessed) {
            pt->stops = starts + ready + 1;
            pt->nstops = nparts - ready - 1;
        }
        index += split && !guessed ? counts[ready] : 0; /* guessed runs: node indices are fixed below */
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_t tids[MAX_PARTS];
    int started[MAX_PARTS] = {0};
    for (int k = 1; k < nparts; k++) started[k] = pthread_create(&tids[k], NULL, part_thread, &parts[k]) == 0;
    run_part(&parts[0]);
    for (int k = 1; k < nparts; k++) {
        if (started[k]) pthread_join(tids[k], NULL);
        else run_part(&parts[k]); /* no thread to be had: decode it here */
    }
    Py_END_ALLOW_THREADS
    /* the runs that count: from the first, each one the previous landed on */
    int chain[MAX_PARTS], nchain = 0;
    for (int k = 0; k >= 0 && k < nparts;) {
        chain[nchain++] = k;
        if (parts[k].rc < 0 || !guessed || parts[k].landed < 0) {
            if (!guessed) for (k++; k < nparts; k++) chain[nchain++] = k;
            break;
        }
        k = k + 1 + parts[k].landed;
    }
    long long first = first_index;
    for (int c = 0; c < nchain; c++) {
        part_t *pt = &parts[chain[c]];
        if (pt->rc < 0) { /* the earliest failing run has the first error in file order */
            if (guessed && c > 0 && pt->cx.failed) {
                /* its node indices were counted from 0: decode it again, knowing where it begins,
                 * for the same error with the right node index in its message */
                batch_t *again = malloc(sizeof *again);
                scratch_t *sc = scratch_new();
                if (!again || !sc || batch_init(again, 16) < 0) {
                    if (again) batch_free(again);
                    free(again);
                    free(sc);
                    PyErr_NoMemory();
                    goto done;
                }
                part_t redo = {.b = again, .sc = sc, .start = pt->start, .p = pt->start, .end = pt->end,
                               .max_nodes = pt->max_nodes, .final = pt->final};
                redo.cx = (ctx_t){.base = base, .limit = end, .base_offset = base_offset, .node_index = first};
                Py_BEGIN_ALLOW_THREADS
                run_part(&redo);
                Py_END_ALLOW_THREADS
                batch_overflow = redo.overflow;
                if (redo.rc < 0) raise_decode_error(&redo.cx);
                else PyErr_SetString(PyExc_RuntimeError, "a decoding error did not repeat");
                batch_free(again);
                buf_free(&sc->unknown);
                free(again);
                free(sc);
                goto done;
            }
            batch_overflow = pt->overflow;
            raise_decode_error(&pt->cx);
            goto done;
        }
        first += pt->b->n;
    }
    {   /* sizes for the next call's buffers */
        int64_t rows = 0;
        for (int c = 0; c < nchain; c++) rows += parts[chain[c]].b->n;
        if (rows >= 64) msg_bytes_hint = (size_t)(parts[chain[nchain - 1]].p - p) / (size_t)rows + 1;
        for (int c = 0; c < nchain; c++) learn_sizes(parts[chain[c]].b);
    }
    list = PyList_New(nchain);
    if (!list) goto done;
    for (int c = 0; c < nchain; c++) {
        PyObject *d = batch_to_dict(parts[chain[c]].b);
        if (!d) goto done;
        PyList_SET_ITEM(list, c, d);
    }
    result = Py_BuildValue("(On)", list, (Py_ssize_t)(parts[chain[nchain - 1]].p - base));
done:
    Py_XDECREF(list);
    for (int k = 0; k < ready; k++) {
        if (parts[k].b) batch_free(parts[k].b);
        if (parts[k].sc) buf_free(&parts[k].sc->unknown);
        free(parts[k].b);
        free(parts[k].sc);
    }

    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ encoding */

static int put_varint(buf_t *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        tmp[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    return buf_put(b, tmp, n);
}

static int put_tag(buf_t *b, int field, int wt) { return put_varint(b, ((uint64_t)field << 3) | (uint64_t)wt); }

static int put_ld(buf_t *b, int field, const void *p, size_t n) {
    if (put_tag(b, field, 2) < 0 || put_varint(b, n) < 0) return -1;
    return buf_put(b, p, n);
}

/* Borrowed input arrays of one encode() call, looked up by key in the input dict. */
#define MAX_VIEWS 512
typedef struct {
    PyObject *dict;
    Py_buffer views[MAX_VIEWS];
    int nviews;
    int64_t row;        /* node being encoded, for errors */
    uint64_t row_id;
} enc_in_t;

typedef struct { const uint8_t *p; Py_ssize_t len; } raw_t;

static int in_raw(enc_in_t *in, const char *key, raw_t *out, int optional) {
    PyObject *v = PyDict_GetItemString(in->dict, key);
    out->p = NULL;
    out->len = 0;
    if (!v || v == Py_None) {
        if (optional) return 0;
        PyErr_Format(PyExc_KeyError, "encode input lacks '%s'", key);
        return -1;
    }
    if (in->nviews == MAX_VIEWS) { PyErr_SetString(PyExc_RuntimeError, "too many encode inputs"); return -1; }
    Py_buffer *view = &in->views[in->nviews];
    if (PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    in->nviews++;
    out->p = view->buf;
    out->len = view->len;
    return 0;
}

static int need_len(const char *key, raw_t r, Py_ssize_t want) {
    if (r.len < want) {
        PyErr_Format(PyExc_ValueError, "encode input '%s' has %zd bytes, expected at least %zd", key, r.len, want);
        return -1;
    }
    return 0;
}

/* A string-like column: int64 offsets into data. */
typedef struct { raw_t off, data, valid; Py_ssize_t n; } str_in_t;

static int in_str(enc_in_t *in, const char *prefix, Py_ssize_t n, str_in_t *c, int with_valid) {
    char k[96];
    snprintf(k, sizeof k, "%s.off", prefix);
    if (in_raw(in, k, &c->off, 0) < 0 || need_len(k, c->off, (n + 1) * 8) < 0) return -1;
    snprintf(k, sizeof k, "%s.data", prefix);
    if (in_raw(in, k, &c->data, 0) < 0) return -1;
    snprintf(k, sizeof k, "%s.valid", prefix);
    if (with_valid && (in_raw(in, k, &c->valid, 0) < 0 || need_len(k, c->valid, n) < 0)) return -1;
    c->n = n;
    return 0;
}

static int str_at(const str_in_t *c, Py_ssize_t i, span_t *s) {
    const int64_t *off = (const int64_t *)c->off.p;
    if (i < 0 || i >= c->n || off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > c->data.len) {
        PyErr_Format(PyExc_ValueError, "string offsets out of range at row %zd", i);
        return -1;
    }
    s->p = c->data.p + off[i];
    s->n = (size_t)(off[i + 1] - off[i]);
    return 0;
}

/* Bounds [lo, hi) of row i of a list column with int64 offsets into a child of child_len items. */
static int list_at(raw_t off, Py_ssize_t n, Py_ssize_t i, Py_ssize_t child_len, int64_t *lo, int64_t *hi) {
    const int64_t *o = (const int64_t *)off.p;
    if (i < 0 || i >= n || o[i] < 0 || o[i] > o[i + 1] || o[i + 1] > child_len) {
        PyErr_Format(PyExc_ValueError, "list offsets out of range at row %zd", i);
        return -1;
    }
    *lo = o[i];
    *hi = o[i + 1];
    return 0;
}

static int enc_error(enc_in_t *in, const char *attr, const char *msg) {
    PyErr_Format(PyExc_ValueError, "node %llu (row %lld), attribute '%s': %s", (unsigned long long)in->row_id,
                 (long long)in->row, attr, msg);
    return -1;
}

/* Scratch buffers for nested messages (attribute body, list body, packed run). */
typedef struct { buf_t node, attr, list, run; } enc_scratch_t;

static int put_int_elem(buf_t *b, int k, __int128 v) {
    uint64_t w = int_to_wire(k, v);
    int wt = kind_wire_type(k);
    if (wt == 0) return put_varint(b, w);
    return buf_put(b, &w, wt == 1 ? 8 : 4);
}

/* Writes one scalar value member (field k) of an attribute into b. */
static int put_scalar_member(buf_t *b, int k, __int128 iv, uint64_t raw, span_t s) {
    int wt = kind_wire_type(k);
    if (k == K_STRING || k == K_BYTES) return put_ld(b, k, s.p, s.n);
    if (put_tag(b, k, wt) < 0) return -1;
    if (kind_is_integer(k)) return put_int_elem(b, k, iv);
    if (k == K_BOOL) return put_varint(b, raw ? 1 : 0);
    return buf_put(b, &raw, wt == 1 ? 8 : 4); /* double / float bits */
}

/* Wraps sc->attr (already holding the value member) with name/doc and appends it to the node. */
static int finish_attr(enc_scratch_t *sc, span_t name, const span_t *doc) {
    buf_t *nb = &sc->node;
    size_t head = 0;
    buf_t h = {0};
    if (name.n && put_ld(&h, 1, name.p, name.n) < 0) goto err;
    if (doc && doc->n && put_ld(&h, 2, doc->p, doc->n) < 0) goto err;
    head = h.len;
    if (put_tag(nb, 10, 2) < 0 || put_varint(nb, head + sc->attr.len) < 0 || buf_put(nb, h.p, h.len) < 0 ||
        buf_put(nb, sc->attr.p, sc->attr.len) < 0)
        goto err;
    buf_free(&h);
    return 0;
err:
    buf_free(&h);
    return -1;
}

/* Column views of the well-known attributes. */
typedef struct { raw_t vals, valid, off; str_in_t str; } known_in_t;

static int emit_known(enc_in_t *in, enc_scratch_t *sc, known_in_t *kc, int s, int kind_hint) {
    Py_ssize_t i = in->row;
    span_t name = {(const uint8_t *)known_name[s], known_len[s]};
    sc->attr.len = 0;
    span_t none = {0, 0};
    switch (known_class[s]) {
    case C_BOOL:
        if (put_scalar_member(&sc->attr, K_BOOL, 0, kc->vals.p[i], none) < 0) return -1;
        break;
    case C_INT:
    case C_UINT: {
        __int128 v = known_class[s] == C_INT ? (__int128)((const int64_t *)kc->vals.p)[i]
                                             : (__int128)((const uint64_t *)kc->vals.p)[i];
        int k = kind_hint;
        if (!(k && class_accepts(known_class[s], k, v) && int_fits_kind(k, v))) k = known_default_kind[s];
        if (!int_fits_kind(k, v)) k = known_class[s] == C_INT ? K_INT64 : K_UINT64;
        if (put_scalar_member(&sc->attr, k, v, 0, none) < 0) return -1;
        break;
    }
    case C_STRING: {
        span_t v;
        if (str_at(&kc->str, i, &v) < 0) return -1;
        if (put_scalar_member(&sc->attr, K_STRING, 0, 0, v) < 0) return -1;
        break;
    }
    case C_BOOL_LIST: {
        int64_t lo, hi;
        if (list_at(kc->off, kc->str.n, i, kc->vals.len, &lo, &hi) < 0) return -1;
        sc->list.len = 0;
        if (hi > lo) {
            if (put_tag(&sc->list, 1, 2) < 0 || put_varint(&sc->list, (uint64_t)(hi - lo)) < 0) return -1;
            for (int64_t j = lo; j < hi; j++)
                if (buf_u8(&sc->list, kc->vals.p[j] ? 1 : 0) < 0) return -1;
        }
        if (put_ld(&sc->attr, K_BOOL + 1, sc->list.p, sc->list.len) < 0) return -1;
        break;
    }
    }
    return finish_attr(sc, name, NULL);
}

/* Column views of other_attrs. */
typedef struct {
    raw_t off, kind, i64, u64, f64, f32, boolv;
    str_in_t name, doc, str, bytes;
    raw_t l_off[7], l_vals[5]; /* numeric/bool list children: int, uint, double, float, bool */
    str_in_t lstr, lbytes;
    Py_ssize_t m;              /* number of entries */
} extras_in_t;

static int emit_list_value(enc_in_t *in, enc_scratch_t *sc, extras_in_t *x, Py_ssize_t j, int k, span_t name) {
    int slot = list_slot(k), sk = scalar_of(k);
    Py_ssize_t child_len;
    switch (slot) {
    case L_INT: case L_UINT: case L_DOUBLE: child_len = x->l_vals[slot].len / 8; break;
    case L_FLOAT: child_len = x->l_vals[slot].len / 4; break;
    case L_BOOL: child_len = x->l_vals[slot].len; break;
    case L_STRING: child_len = x->lstr.n; break;
    default: child_len = x->lbytes.n;
    }
    int64_t lo, hi;
    if (list_at(x->l_off[slot], x->m, j, child_len, &lo, &hi) < 0) return -1;
    sc->list.len = 0;
    sc->run.len = 0;
    for (int64_t e = lo; e < hi; e++) {
        if (slot == L_STRING || slot == L_BYTES) {
            span_t s;
            if (str_at(slot == L_STRING ? &x->lstr : &x->lbytes, e, &s) < 0) return -1;
            if (put_ld(&sc->list, 1, s.p, s.n) < 0) return -1;
        } else if (slot == L_INT || slot == L_UINT) {
            __int128 v = slot == L_INT ? (__int128)((const int64_t *)x->l_vals[slot].p)[e]
                                       : (__int128)((const uint64_t *)x->l_vals[slot].p)[e];
            if (!int_fits_kind(sk, v)) {
                char nm[128];
                snprintf(nm, sizeof nm, "%.*s", (int)name.n, (const char *)name.p);
                return enc_error(in, nm, "a list element does not fit the attribute's kind");
            }
            if (put_int_elem(&sc->run, sk, v) < 0) return -1;
        } else if (slot == L_BOOL) {
            if (buf_u8(&sc->run, x->l_vals[slot].p[e] ? 1 : 0) < 0) return -1;
        } else {
            int w = slot == L_FLOAT ? 4 : 8;
            if (buf_put(&sc->run, x->l_vals[slot].p + e * w, w) < 0) return -1;
        }
    }
    if (sc->run.len && put_ld(&sc->list, 1, sc->run.p, sc->run.len) < 0) return -1;
    return put_ld(&sc->attr, k, sc->list.p, sc->list.len);
}

static int emit_extra(enc_in_t *in, enc_scratch_t *sc, extras_in_t *x, Py_ssize_t j) {
    span_t name, doc, s = {0, 0};
    if (str_at(&x->name, j, &name) < 0 || str_at(&x->doc, j, &doc) < 0) return -1;
    if (!x->doc.valid.p[j]) doc.n = 0;
    int k = x->kind.p[j];
    sc->attr.len = 0;
    if (k && (k < K_DOUBLE || k > K_MAX)) {
        char nm[128];
        snprintf(nm, sizeof nm, "%.*s", (int)name.n, (const char *)name.p);
        return enc_error(in, nm, "unknown value kind");
    }
    if (k && kind_is_list(k)) {
        if (emit_list_value(in, sc, x, j, k, name) < 0) return -1;
    } else if (k) {
        __int128 iv = 0;
        uint64_t raw = 0;
        if (kind_is_integer(k)) {
            iv = kind_is_unsigned(k) ? (__int128)((const uint64_t *)x->u64.p)[j] : (__int128)((const int64_t *)x->i64.p)[j];
            if (!int_fits_kind(k, iv)) {
                char nm[128];
                snprintf(nm, sizeof nm, "%.*s", (int)name.n, (const char *)name.p);
                return enc_error(in, nm, "value does not fit the attribute's kind");
            }
        } else if (k == K_DOUBLE) memcpy(&raw, x->f64.p + j * 8, 8);
        else if (k == K_FLOAT) memcpy(&raw, x->f32.p + j * 4, 4);
        else if (k == K_BOOL) raw = x->boolv.p[j];
        else if (str_at(k == K_STRING ? &x->str : &x->bytes, j, &s) < 0) return -1;
        if (put_scalar_member(&sc->attr, k, iv, raw, s) < 0) return -1;
    }
    return finish_attr(sc, name, &doc);
}

static int load_extras(enc_in_t *in, extras_in_t *x, Py_ssize_t n) {
    memset(x, 0, sizeof *x);
    if (in_raw(in, "x.off", &x->off, 0) < 0 || need_len("x.off", x->off, (n + 1) * 8) < 0) return -1;
    raw_t kind;
    if (in_raw(in, "x.kind", &kind, 0) < 0) return -1;
    Py_ssize_t m = x->m = kind.len;
    x->kind = kind;
    if (in_str(in, "x.name", m, &x->name, 0) < 0 || in_str(in, "x.doc", m, &x->doc, 1) < 0 ||
        in_str(in, "x.string", m, &x->str, 0) < 0 || in_str(in, "x.bytes", m, &x->bytes, 0) < 0)
        return -1;
    if (in_raw(in, "x.int", &x->i64, 0) < 0 || need_len("x.int", x->i64, m * 8) < 0 ||
        in_raw(in, "x.uint", &x->u64, 0) < 0 || need_len("x.uint", x->u64, m * 8) < 0 ||
        in_raw(in, "x.double", &x->f64, 0) < 0 || need_len("x.double", x->f64, m * 8) < 0 ||
        in_raw(in, "x.float", &x->f32, 0) < 0 || need_len("x.float", x->f32, m * 4) < 0 ||
        in_raw(in, "x.bool", &x->boolv, 0) < 0 || need_len("x.bool", x->boolv, m) < 0)
        return -1;
    char k[96];
    for (int slot = 0; slot < 7; slot++) {
        snprintf(k, sizeof k, "x.%s.off", LIST_NAMES[slot]);
        if (in_raw(in, k, &x->l_off[slot], 0) < 0 || need_len(k, x->l_off[slot], (m + 1) * 8) < 0) return -1;
        if (slot < 5) {
            snprintf(k, sizeof k, "x.%s.vals", LIST_NAMES[slot]);
            if (in_raw(in, k, &x->l_vals[slot], 0) < 0) return -1;
        }
    }
    raw_t probe;
    if (in_raw(in, "x.string_list.item.off", &probe, 0) < 0) return -1;
    if (in_str(in, "x.string_list.item", probe.len / 8 - 1, &x->lstr, 0) < 0) return -1;
    if (in_raw(in, "x.bytes_list.item.off", &probe, 0) < 0) return -1;
    return in_str(in, "x.bytes_list.item", probe.len / 8 - 1, &x->lbytes, 0);
}

/*
 * encode(columns: dict) -> bytes
 *
 * Encodes every row of one batch as a length-prefixed Node message. `columns` holds
 * contiguous arrays (see chakra_core/codec.py:_encode_inputs for the keys). Attributes are
 * written in the order recorded in layout (when given), then any well-known attribute the
 * layout does not mention, then any remaining other_attrs entries.
 */
static PyObject *py_encode(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *dict;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &dict)) return NULL;
    enc_in_t *in = calloc(1, sizeof *in);
    known_in_t *kc = calloc(MAX_KNOWN, sizeof *kc);
    extras_in_t *x = calloc(1, sizeof *x);
    enc_scratch_t sc = {0};
    buf_t out = {0};
    PyObject *result = NULL;
    if (!in || !kc || !x) { PyErr_NoMemory(); goto done; }
    in->dict = dict;
    PyObject *nobj = PyDict_GetItemString(dict, "n");
    Py_ssize_t n = nobj ? PyLong_AsSsize_t(nobj) : -1;
    if (n < 0) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "encode input lacks 'n'"); goto done; }

    raw_t id, type, start, dur, ctrl_off, ctrl, data_off, data, lay_off, lay, lay_valid, io_valid[2];
    str_in_t name, io[2][3], unknown;
    if (in_raw(in, "id", &id, 0) < 0 || need_len("id", id, n * 8) < 0 || in_raw(in, "type", &type, 0) < 0 ||
        need_len("type", type, n * 4) < 0 || in_raw(in, "start", &start, 0) < 0 || need_len("start", start, n * 8) < 0 ||
        in_raw(in, "dur", &dur, 0) < 0 || need_len("dur", dur, n * 8) < 0 || in_str(in, "name", n, &name, 0) < 0 ||
        in_raw(in, "ctrl.off", &ctrl_off, 0) < 0 || need_len("ctrl.off", ctrl_off, (n + 1) * 8) < 0 ||
        in_raw(in, "ctrl.vals", &ctrl, 0) < 0 || in_raw(in, "data.off", &data_off, 0) < 0 ||
        need_len("data.off", data_off, (n + 1) * 8) < 0 || in_raw(in, "data.vals", &data, 0) < 0 ||
        in_raw(in, "layout.off", &lay_off, 1) < 0 || in_raw(in, "layout.vals", &lay, 1) < 0 ||
        in_raw(in, "layout.valid", &lay_valid, 1) < 0 ||
        in_str(in, "unknown", n, &unknown, 0) < 0)
        goto done;
    if (lay_off.p && (need_len("layout.off", lay_off, (n + 1) * 8) < 0 ||
                      (lay_valid.p && need_len("layout.valid", lay_valid, n) < 0)))
        goto done;
    static const char *IO[2] = {"inputs", "outputs"}, *IOF[3] = {"values", "shapes", "types"};
    char key[96];
    for (int d = 0; d < 2; d++) {
        for (int f = 0; f < 3; f++) {
            snprintf(key, sizeof key, "%s.%s", IO[d], IOF[f]);
            if (in_str(in, key, n, &io[d][f], 0) < 0) goto done;
        }
        snprintf(key, sizeof key, "%s.valid", IO[d]);
        if (in_raw(in, key, &io_valid[d], 0) < 0 || need_len(key, io_valid[d], n) < 0) goto done;
    }
    for (int s = 0; s < n_known; s++) {
        const char *nm = known_name[s];
        snprintf(key, sizeof key, "%s.valid", nm);
        if (in_raw(in, key, &kc[s].valid, 0) < 0 || need_len(key, kc[s].valid, n) < 0) goto done;
        kc[s].str.n = n;
        switch (known_class[s]) {
        case C_STRING: if (in_str(in, nm, n, &kc[s].str, 0) < 0) goto done; break;
        case C_BOOL_LIST:
            snprintf(key, sizeof key, "%s.off", nm);
            if (in_raw(in, key, &kc[s].off, 0) < 0 || need_len(key, kc[s].off, (n + 1) * 8) < 0) goto done;
            /* fall through: values */
            __attribute__((fallthrough));
        default:
            snprintf(key, sizeof key, "%s.vals", nm);
            if (in_raw(in, key, &kc[s].vals, 0) < 0) goto done;
            if (known_class[s] != C_BOOL_LIST &&
                need_len(key, kc[s].vals, n * (known_class[s] == C_BOOL ? 1 : 8)) < 0) goto done;
        }
    }
    if (load_extras(in, x, n) < 0) goto done;

    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t nid = ((const uint64_t *)id.p)[i];
        in->row = i;
        in->row_id = nid;
        buf_t *nb = &sc.node;
        nb->len = 0;
        int64_t lo, hi;
        span_t s;
        if (nid && (put_tag(nb, 1, 0) < 0 || put_varint(nb, nid) < 0)) goto done;
        if (str_at(&name, i, &s) < 0 || (s.n && put_ld(nb, 2, s.p, s.n) < 0)) goto done;
        int32_t t = ((const int32_t *)type.p)[i];
        if (t && (put_tag(nb, 3, 0) < 0 || put_varint(nb, (uint64_t)(int64_t)t) < 0)) goto done;
        raw_t deps_off[2] = {ctrl_off, data_off}, deps[2] = {ctrl, data};
        for (int d = 0; d < 2; d++) {
            if (list_at(deps_off[d], n, i, deps[d].len / 8, &lo, &hi) < 0) goto done;
            if (hi > lo) {
                sc.run.len = 0;
                for (int64_t j = lo; j < hi; j++)
                    if (put_varint(&sc.run, ((const uint64_t *)deps[d].p)[j]) < 0) goto done;
                if (put_ld(nb, 4 + d, sc.run.p, sc.run.len) < 0) goto done;
            }
        }
        uint64_t st = ((const uint64_t *)start.p)[i], du = ((const uint64_t *)dur.p)[i];
        if (st && (put_tag(nb, 6, 0) < 0 || put_varint(nb, st) < 0)) goto done;
        if (du && (put_tag(nb, 7, 0) < 0 || put_varint(nb, du) < 0)) goto done;
        for (int d = 0; d < 2; d++) {
            if (!io_valid[d].p[i]) continue;
            sc.list.len = 0;
            for (int f = 0; f < 3; f++) {
                if (str_at(&io[d][f], i, &s) < 0) goto done;
                if (s.n && put_ld(&sc.list, f + 1, s.p, s.n) < 0) goto done;
            }
            if (put_ld(nb, 8 + d, sc.list.p, sc.list.len) < 0) goto done;
        }
        /* attributes */
        uint64_t emitted = 0;
        int64_t xlo, xhi;
        if (list_at(x->off, n, i, x->m, &xlo, &xhi) < 0) goto done;
        if (lay_off.p && (!lay_valid.p || lay_valid.p[i])) {
            int64_t llo, lhi;
            if (list_at(lay_off, n, i, lay.len / 2, &llo, &lhi) < 0) goto done;
            for (int64_t e = llo; e < lhi; e++) {
                uint16_t code = ((const uint16_t *)lay.p)[e];
                int slot = code >> 5, kind = (code & 31) + K_DOUBLE;
                if (slot == 0) {
                    if (xlo < xhi && emit_extra(in, &sc, x, xlo++) < 0) goto done;
                    continue;
                }
                int s_ = slot - 1;
                if (s_ >= n_known || ((emitted >> s_) & 1) || !kc[s_].valid.p[i]) continue;
                if (emit_known(in, &sc, &kc[s_], s_, kind) < 0) goto done;
                emitted |= (uint64_t)1 << s_;
            }
        }
        for (int s_ = 0; s_ < n_known; s_++) {
            if (((emitted >> s_) & 1) || !kc[s_].valid.p[i]) continue;
            if (emit_known(in, &sc, &kc[s_], s_, 0) < 0) goto done;
        }
        while (xlo < xhi)
            if (emit_extra(in, &sc, x, xlo++) < 0) goto done;
        if (str_at(&unknown, i, &s) < 0 || buf_put(nb, s.p, s.n) < 0) goto done;
        if (put_varint(&out, nb->len) < 0 || buf_put(&out, nb->p, nb->len) < 0) goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)out.p, (Py_ssize_t)out.len);
done:
    if (!result && !PyErr_Occurred()) PyErr_NoMemory(); /* a buffer could not grow */
    if (in)
        for (int v = 0; v < in->nviews; v++) PyBuffer_Release(&in->views[v]);
    free(in);
    free(kc);
    free(x);
    buf_free(&sc.node); buf_free(&sc.attr); buf_free(&sc.list); buf_free(&sc.run);
    buf_free(&out);
    return result;
}

/* ------------------------------------------------------------------ scan (benchmark floor) */

/* Walks the tags of one message and of its length-delimited members nested `depth` deep; no output. */
static uint64_t scan_message(const uint8_t *p, const uint8_t *end, int depth) {
    uint64_t fields = 0;
    while (p < end) {
        uint64_t tag, v;
        if (read_varint(&p, end, &tag) != 0) return fields;
        fields++;
        switch (tag & 7) {
        case 0: if (read_varint(&p, end, &v) != 0) return fields; break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2:
            if (read_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p)) return fields;
            if (depth && (tag >> 3) >= 8 && (tag >> 3) <= 10) fields += scan_message(p, p + v, depth - 1);
            p += v;
            break;
        default: return fields;
        }
    }
    return fields;
}

/*
 * scan(data, start, depth) -> (messages, fields, end): walks the length-prefixed messages of
 * data[start:] and every tag of each (depth 1: also inside inputs, outputs and attributes),
 * building nothing; end is where the last whole message ends (len(data) for whole messages
 * only). The floor under any decoder of the same bytes (tests/benchmarks/bench_et_io.py), and
 * how format/manyfiles.py counts a file's nodes.
 */
static PyObject *py_scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    int depth;
    if (!PyArg_ParseTuple(args, "y*ni", &view, &start, &depth)) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf + (start < 0 ? 0 : start), *end = (const uint8_t *)view.buf + view.len;
    const uint8_t *whole = p;  /* the end of the last whole message */
    uint64_t messages = 0, fields = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        uint64_t len;
        if (read_varint(&p, end, &len) != 0 || len > (uint64_t)(end - p)) break;
        if (depth >= 0) fields += scan_message(p, p + len, depth);
        p += len;
        whole = p;
        messages++;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t at = (Py_ssize_t)(whole - (const uint8_t *)view.buf);
    PyBuffer_Release(&view);
    return Py_BuildValue("(KKn)", (unsigned long long)messages, (unsigned long long)fields, at);
}

/*
 * pool([keep]) -> (blocks, bytes, keep): the memory pool's free blocks and their bytes, and
 * how many bytes it keeps at most; with `keep`, sets that limit first (0 empties it).
 */
static PyObject *py_pool(PyObject *Py_UNUSED(self), PyObject *args) {
    long long keep = -1;
    if (!PyArg_ParseTuple(args, "|L", &keep)) return NULL;
    block_t *drop = NULL;
    size_t *drop_cap = NULL;
    int ndrop = 0, blocks = 0;
    if (keep >= 0) {
        drop = malloc(sizeof *drop * POOL_CLASSES * POOL_DEPTH);
        drop_cap = malloc(sizeof *drop_cap * POOL_CLASSES * POOL_DEPTH);
        if (!drop || !drop_cap) { free(drop); free(drop_cap); return PyErr_NoMemory(); }
    }
    pthread_mutex_lock(&pool_lock);
    if (keep >= 0) {
        pool_keep = (size_t)keep;
        for (int c = POOL_CLASSES - 1; c >= 0 && pool_bytes > pool_keep; c--) /* the largest go first */
            while (pool_count[c] && pool_bytes > pool_keep) {
                block_t b = pool[c][--pool_count[c]];
                pool_bytes -= class_bytes(c);
                if (!b.cold) pool_hot -= class_bytes(c);
                drop_cap[ndrop] = class_bytes(c);
                drop[ndrop++] = b;
            }
    }
    for (int c = 0; c < POOL_CLASSES; c++) blocks += pool_count[c];
    size_t bytes = pool_bytes, limit = pool_keep;
    pthread_mutex_unlock(&pool_lock);
    for (int i = 0; i < ndrop; i++) munmap(drop[i].p, drop_cap[i]);
    free(drop);
    free(drop_cap);
    return Py_BuildValue("(iKK)", blocks, (unsigned long long)bytes, (unsigned long long)limit);
}

/*
 * configure(attributes) with attributes = [(name, value_class, default_kind), ...]:
 * the well-known attribute columns, in column order (chakra_core/columns.py).
 */
static PyObject *py_configure(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "configure expects a sequence");
    if (!fast) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
    if (m > MAX_KNOWN) { Py_DECREF(fast); PyErr_SetString(PyExc_ValueError, "too many well-known attributes"); return NULL; }
    for (int s = 0; s < n_known; s++) free(known_name[s]);
    n_known = 0;
    for (Py_ssize_t s = 0; s < m; s++) {
        const char *nm;
        Py_ssize_t len;
        int cls, kind;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, s), "s#ii", &nm, &len, &cls, &kind)) {
            Py_DECREF(fast);
            return NULL;
        }
        known_name[s] = strndup(nm, (size_t)len);
        known_len[s] = (size_t)len;
        known_class[s] = cls;
        known_default_kind[s] = kind;
        n_known = (int)s + 1;
    }
    Py_DECREF(fast);
    build_name_table();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS, "Set the well-known attribute columns."},
    {"decode", py_decode, METH_VARARGS, "Decode length-prefixed Node messages into column buffers."},
    {"encode", py_encode, METH_VARARGS, "Encode column arrays as length-prefixed Node messages."},
    {"scan", py_scan, METH_VARARGS, "Walk length-prefixed messages without decoding (a benchmark floor)."},
    {"pool", py_pool, METH_VARARGS, "Free blocks of the buffer pool; optionally set how many bytes it keeps."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_etcodec", "Chakra ET columnar codec.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__etcodec(void) {
    if (PyType_Ready(&OwnedBufferType) < 0) return NULL;
    static int fork_handler;
    if (!fork_handler++) pthread_atfork(NULL, NULL, pool_after_fork);
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    FormatError = PyErr_NewException("chakra_core._native._etcodec.FormatError", PyExc_ValueError, NULL);
    if (!FormatError || PyModule_AddObjectRef(m, "FormatError", FormatError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
