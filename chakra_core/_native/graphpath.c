/* Longest (critical) path and depth levels of a dependency DAG, in one Kahn pass.
 *
 *   critical_path(off, tgt, weight) -> (path, length, depth) or None on a cycle
 *     off (int64, n + 1) / tgt (int64): the edges parent -> child in CSR by parent;
 *     weight (int64, n): each node's duration. The path is the node indices of a heaviest
 *     path (sum of weights), from its first node to its last; depth (int64, n) is each node's
 *     level: 0 for nodes without parents, else 1 + the deepest parent.
 *
 * Why C: a topological pass is inherently one node after another, and a Python loop costs
 * about a microsecond per node; traces have millions (the target is >= 1M nodes/s).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int view_i64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 8 || (view->format && strcmp(view->format, "q") && strcmp(view->format, "l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be an int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *py_critical_path(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *o_off, *o_tgt, *o_weight;
    if (!PyArg_ParseTuple(args, "OOO", &o_off, &o_tgt, &o_weight)) return NULL;
    Py_buffer v_off, v_tgt, v_w;
    if (view_i64(o_off, &v_off, "off") < 0) return NULL;
    if (view_i64(o_tgt, &v_tgt, "tgt") < 0) { PyBuffer_Release(&v_off); return NULL; }
    if (view_i64(o_weight, &v_w, "weight") < 0) { PyBuffer_Release(&v_off); PyBuffer_Release(&v_tgt); return NULL; }
    const int64_t *off = v_off.buf, *tgt = v_tgt.buf, *w = v_w.buf;
    Py_ssize_t n = v_w.len / 8, e = v_tgt.len / 8;
    PyObject *result = NULL;
    int64_t *indeg = NULL, *queue = NULL, *dist = NULL, *pred = NULL, *depth = NULL, *path = NULL;
    if (v_off.len / 8 != n + 1) {
        PyErr_SetString(PyExc_ValueError, "off must have len(weight) + 1 entries");
        goto done;
    }
    indeg = PyMem_Calloc((size_t)n + 1, 8);
    queue = PyMem_Malloc(((size_t)n + 1) * 8);
    dist = PyMem_Malloc(((size_t)n + 1) * 8);
    pred = PyMem_Malloc(((size_t)n + 1) * 8);
    depth = PyMem_Calloc((size_t)n + 1, 8);
    if (!indeg || !queue || !dist || !pred || !depth) { PyErr_NoMemory(); goto done; }
    int bad = 0;
    Py_ssize_t head = 0, tail = 0, best = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < e; k++) {
        if (tgt[k] < 0 || tgt[k] >= n) { bad = 1; break; }
        indeg[tgt[k]]++;
    }
    if (!bad) {
        for (Py_ssize_t v = 0; v < n; v++) {
            dist[v] = w[v];
            pred[v] = -1;
            if (indeg[v] == 0) queue[tail++] = v;
        }
        while (head < tail) {
            int64_t u = queue[head++];
            if (best < 0 || dist[u] > dist[best]) best = u;
            for (int64_t k = off[u]; k < off[u + 1]; k++) {
                int64_t v = tgt[k];
                int64_t through_u = dist[u] + w[v];
                if (pred[v] < 0 || through_u > dist[v]) { dist[v] = through_u; pred[v] = u; }
                if (depth[u] + 1 > depth[v]) depth[v] = depth[u] + 1;
                if (--indeg[v] == 0) queue[tail++] = v;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) { PyErr_SetString(PyExc_ValueError, "an edge target is outside 0..n-1"); goto done; }
    if (tail < n) { result = Py_NewRef(Py_None); goto done; }  /* a cycle: not every node was ordered */
    Py_ssize_t length = 0;
    for (int64_t v = best; v >= 0; v = pred[v]) length++;
    path = PyMem_Malloc(((size_t)length + 1) * 8);
    if (!path) { PyErr_NoMemory(); goto done; }
    Py_ssize_t i = length;
    for (int64_t v = best; v >= 0; v = pred[v]) path[--i] = v;
    result = Py_BuildValue("(y#Ly#)", (const char *)path, length * 8, n ? (long long)dist[best] : 0LL,
                           (const char *)depth, n * 8);
done:
    PyMem_Free(indeg); PyMem_Free(queue); PyMem_Free(dist); PyMem_Free(pred); PyMem_Free(depth); PyMem_Free(path);
    PyBuffer_Release(&v_off); PyBuffer_Release(&v_tgt); PyBuffer_Release(&v_w);
    return result;
}

static PyMethodDef methods[] = {
    {"critical_path", py_critical_path, METH_VARARGS, "Heaviest path and depth levels of a DAG (None on a cycle)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_graphpath", "DAG longest path.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__graphpath(void) { return PyModule_Create(&module); }
