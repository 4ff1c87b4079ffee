/* Walks over the spans of a thread's profiled events, for chakra_core/convert/pytorch/kineto.py and
 * chakra_core/convert/kineto/host.py.
 *
 * Why: both walks visit every CPU event of a trace with a stack of open events; in Python they
 * cost more than reading the trace with the C digests. kineto.py sorts (numpy) and keeps the
 * events; these loops do the same arithmetic as the Python they replace, in the same order, so
 * the sums (and so the converted files) are the same to the bit.
 *
 *   exclusive(order, thread, ts, dur) -> (exclusive, idle_before, seg_event, seg_start, seg_end)
 *     order: int64 indices of the events sorted by (thread, ts, -dur), threads in order of first
 *     appearance; thread: int64 codes; ts, dur: float64. Each stretch of a thread's time goes to
 *     the innermost event open then (the latest started); an event's exclusive time is the sum of
 *     its stretches; idle_before is the gap since the thread's latest end before it started. The
 *     stretches that start after the event's own start (after a child) are returned in the order
 *     walked. All results are bytes (float64 / int64).
 *
 *   innermost(order, thread, ts, end, is_call) -> bytes of int64
 *     items (events and calls) sorted by (thread, ts, is_call, -dur or call number); per item that
 *     is a call, the index of the innermost event open on its thread (the top of the stack once
 *     the events that ended before the call are popped from the top), -1 where none is.
 *
 *   enclosing(order, thread, ts, end) -> bytes of int64
 *     events sorted by (thread, start order); per event, the index of the innermost event of its
 *     thread still open when it starts (an event ending at or before that start is closed), -1
 *     where none is: the parent of each Kineto CPU event in a Kineto-only conversion.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

typedef struct {
    Py_buffer b;
    Py_ssize_t n;
} column_t;

static int column(PyObject *obj, column_t *c, Py_ssize_t itemsize, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, &c->b, PyBUF_SIMPLE) < 0) return -1;
    c->n = c->b.len / itemsize;
    if (c->b.len % itemsize || (n >= 0 && c->n != n)) {
        PyBuffer_Release(&c->b);
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        return -1;
    }
    return 0;
}

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} grow_t;

static int grow_put(grow_t *g, const void *src, Py_ssize_t size) {
    if (g->len + size > g->cap) {
        Py_ssize_t cap = g->cap ? g->cap * 2 : 4096;
        while (cap < g->len + size) cap *= 2;
        char *p = PyMem_Realloc(g->data, (size_t)cap);
        if (!p) { PyErr_NoMemory(); return -1; }
        g->data = p;
        g->cap = cap;
    }
    memcpy(g->data + g->len, src, (size_t)size);
    g->len += size;
    return 0;
}

static PyObject *grow_bytes(grow_t *g) { return PyBytes_FromStringAndSize(g->data ? g->data : "", g->len); }

static PyObject *py_exclusive(PyObject *self, PyObject *args) {
    PyObject *o_order, *o_thread, *o_ts, *o_dur;
    if (!PyArg_ParseTuple(args, "OOOO", &o_order, &o_thread, &o_ts, &o_dur)) return NULL;
    column_t order, thread, tsc, durc;
    if (column(o_order, &order, 8, -1) < 0) return NULL;
    Py_ssize_t n = order.n;
    if (column(o_thread, &thread, 8, n) < 0) { PyBuffer_Release(&order.b); return NULL; }
    if (column(o_ts, &tsc, 8, n) < 0) { PyBuffer_Release(&order.b); PyBuffer_Release(&thread.b); return NULL; }
    if (column(o_dur, &durc, 8, n) < 0) {
        PyBuffer_Release(&order.b); PyBuffer_Release(&thread.b); PyBuffer_Release(&tsc.b);
        return NULL;
    }
    const int64_t *ord = order.b.buf, *thr = thread.b.buf;
    const double *ts = tsc.b.buf, *dur = durc.b.buf;
    PyObject *result = NULL;
    double *exclusive = PyMem_Calloc((size_t)n + 1, sizeof(double)), *idle = PyMem_Calloc((size_t)n + 1, sizeof(double));
    double *stack_end = PyMem_Malloc(((size_t)n + 1) * sizeof(double));
    int64_t *stack_event = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    grow_t seg_event = {0}, seg_a = {0}, seg_b = {0};
    if (!exclusive || !idle || !stack_end || !stack_event) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < n; k++)
        if (ord[k] < 0 || ord[k] >= n) { PyErr_SetString(PyExc_ValueError, "order out of range"); goto done; }
    Py_ssize_t k = 0;
    while (k < n) { /* one thread: order[k .. group_end) */
        Py_ssize_t group_end = k;
        while (group_end < n && thr[ord[group_end]] == thr[ord[k]]) group_end++;
        Py_ssize_t depth = 0;
        double at = 0.0, covered = 0.0;
        int has_covered = 0;
        for (Py_ssize_t j = k; j <= group_end; j++) {
            int64_t e = j < group_end ? ord[j] : -1;
            double to = e >= 0 ? ts[e] : INFINITY;
            while (depth > 0 && at < to) { /* give [at, to) to the innermost open event */
                double end = stack_end[depth - 1];
                int64_t top = stack_event[depth - 1];
                if (end <= at) { depth--; continue; }
                double upto = to <= end ? to : end; /* Python's min(to, end) */
                exclusive[top] += upto - at;
                if (at > ts[top]) {
                    if (grow_put(&seg_event, &top, 8) < 0 || grow_put(&seg_a, &at, 8) < 0 || grow_put(&seg_b, &upto, 8) < 0)
                        goto done;
                }
                at = upto;
            }
            if (e >= 0) {
                double end = ts[e] + dur[e];
                stack_end[depth] = end;
                stack_event[depth++] = e;
                at = ts[e];
                if (has_covered && ts[e] > covered) idle[e] = ts[e] - covered;
                if (!has_covered || end > covered) covered = end;
                has_covered = 1;
            }
        }
        k = group_end;
    }
    result = Py_BuildValue("(y#y#NNN)", (const char *)exclusive, n * 8, (const char *)idle, n * 8,
                           grow_bytes(&seg_event), grow_bytes(&seg_a), grow_bytes(&seg_b));
done:
    PyMem_Free(exclusive);
    PyMem_Free(idle);
    PyMem_Free(stack_end);
    PyMem_Free(stack_event);
    PyMem_Free(seg_event.data);
    PyMem_Free(seg_a.data);
    PyMem_Free(seg_b.data);
    PyBuffer_Release(&order.b);
    PyBuffer_Release(&thread.b);
    PyBuffer_Release(&tsc.b);
    PyBuffer_Release(&durc.b);
    return result;
}

/* innermost (is_call given, an event ending before an item's start is closed) and enclosing
 * (every item is both asked about and then opened, an event ending at its start is closed):
 * one walk with a stack of open events per thread. */
static PyObject *stack_walk(PyObject *args, int n_columns, int closed_at_start) {
    PyObject *objs[5] = {NULL};
    if (!PyArg_UnpackTuple(args, closed_at_start ? "enclosing" : "innermost", n_columns, n_columns, &objs[0], &objs[1],
                           &objs[2], &objs[3], &objs[4]))
        return NULL;
    column_t c[5];
    Py_ssize_t sizes[5] = {8, 8, 8, 8, 1};
    int got = 0;
    PyObject *result = NULL;
    int64_t *stack = NULL, *found = NULL;
    for (; got < n_columns; got++)
        if (column(objs[got], &c[got], sizes[got], got ? c[0].n : -1) < 0) goto done;
    Py_ssize_t n = c[0].n;
    const int64_t *ord = c[0].b.buf, *thr = c[1].b.buf;
    const double *ts = c[2].b.buf, *end = c[3].b.buf;
    const unsigned char *is_call = n_columns == 5 ? c[4].b.buf : NULL;
    stack = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    found = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!stack || !found) { PyErr_NoMemory(); goto done; }
    Py_ssize_t depth = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = ord[k];
        if (i < 0 || i >= n) { PyErr_SetString(PyExc_ValueError, "order out of range"); goto done; }
        if (k > 0 && thr[i] != thr[ord[k - 1]]) depth = 0; /* the next thread */
        while (depth > 0 && (closed_at_start ? end[stack[depth - 1]] <= ts[i] : end[stack[depth - 1]] < ts[i])) depth--;
        int asks = is_call ? is_call[i] : 1, opens = is_call ? !is_call[i] : 1;
        found[i] = asks && depth > 0 ? stack[depth - 1] : -1;
        if (opens) stack[depth++] = i;
    }
    result = PyBytes_FromStringAndSize((const char *)found, n * 8);
done:
    PyMem_Free(stack);
    PyMem_Free(found);
    for (int k = 0; k < got; k++) PyBuffer_Release(&c[k].b);
    return result;
}

static PyObject *py_innermost(PyObject *self, PyObject *args) { return stack_walk(args, 5, 0); }

static PyObject *py_enclosing(PyObject *self, PyObject *args) { return stack_walk(args, 4, 1); }

static PyMethodDef methods[] = {
    {"enclosing", py_enclosing, METH_VARARGS, "The innermost event of its thread open at each event's start."},
    {"exclusive", py_exclusive, METH_VARARGS, "Exclusive time, idle gaps and stretches after children per event."},
    {"innermost", py_innermost, METH_VARARGS, "The innermost event open at each call on its thread."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_threadspans", "Walks over a thread's event spans.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__threadspans(void) { return PyModule_Create(&module); }
