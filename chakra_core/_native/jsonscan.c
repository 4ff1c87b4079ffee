/* Finds the boundaries of JSON values in a byte buffer without parsing them.
 *
 * PyTorch execution traces and Kineto traces are single JSON documents whose bulk is
 * one long array ("nodes" / "traceEvents"). Parsing the whole document at once costs
 * about ten times its size in Python objects; this scanner lets the reader hand the
 * array to a real JSON parser in bounded batches instead. It only tracks nesting depth
 * and string/escape state, so it runs at memory speed; syntax errors inside a value are
 * left to the parser that later reads the batch. Nesting deeper than `max_depth` is
 * refused here, before any parser (orjson stops at 1024 levels, the json module at
 * Python's recursion limit) sees it.
 *
 *   value_end(buf, pos, max_depth[, end]) -> end | -1
 *       `pos` is the first byte of a value (leading whitespace is skipped). Returns the
 *       offset just past the value, or -1 if the buffer ends first.
 *   scan_array(buf, pos, max_items, max_depth[, end]) -> (items, last_end, next_pos, closed)
 *       `pos` is inside an array, just after '[' or after the ',' that follows an
 *       element. Scans up to `max_items` complete elements, each followed by ',' or ']'.
 *       last_end: offset just past the last complete element; next_pos: where the next
 *       call resumes (after that element's ',' or after the closing ']'); closed: the
 *       array's ']' was reached. An element cut off by the buffer end is not counted.
 *   Given `end`, only buf[:end] is looked at (the rest of a reader's buffer is not filled yet).
 *   Errors: ScanError(message, position, items) on a structural error, its subclass
 *   TooDeep when a value opens more than `max_depth` nested arrays/objects (position: the
 *   bracket that goes too deep); `items`: the complete elements before the bad one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "jsonscan.h"

static PyObject *ScanError, *TooDeep;

static PyObject *scan_error(PyObject *type, const char *what, Py_ssize_t position, Py_ssize_t items) {
    PyObject *args = Py_BuildValue("(snn)", what, position, items);
    if (args) {
        PyErr_SetObject(type, args);
        Py_DECREF(args);
    }
    return NULL;
}

static int get_buffer(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* The bytes of the buffer to scan: its first `limit` (a reader's buffer is larger than what it
 * holds, so that it is filled in place), or all of it when limit < 0. */
static Py_ssize_t filled(const Py_buffer *view, Py_ssize_t limit) {
    return limit >= 0 && limit < view->len ? limit : view->len;
}

static PyObject *py_value_end(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, max_depth, deep_at = -1, limit = -1;
    if (!PyArg_ParseTuple(args, "Onn|n", &obj, &pos, &max_depth, &limit)) return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view) < 0) return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = filled(&view, limit), end, start;
    Py_BEGIN_ALLOW_THREADS
    start = skip_space(s, pos < 0 ? 0 : pos, n);
    end = find_bounded_value_end(s, start, n, max_depth, &deep_at);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (end == -2) return scan_error(ScanError, "expected a JSON value", start, 0);
    if (end == -3) return scan_error(TooDeep, "nested too deeply", deep_at, 0);
    return PyLong_FromSsize_t(end);
}

static PyObject *py_scan_array(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, max_items, max_depth, deep_at = -1, limit = -1;
    if (!PyArg_ParseTuple(args, "Onnn|n", &obj, &pos, &max_items, &max_depth, &limit)) return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view) < 0) return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = filled(&view, limit), items = 0, last_end = -1, next_pos = pos, error_at = -1;
    int closed = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t p = skip_space(s, pos, n);
    if (p < n && s[p] == ']') { /* an empty array */
        closed = 1;
        next_pos = p + 1;
    }
    while (!closed && items < max_items) {
        p = skip_space(s, p, n);
        Py_ssize_t end = find_bounded_value_end(s, p, n, max_depth, &deep_at);
        if (end == -1 || end == -3) break;
        if (end == -2) { error_at = p; break; }
        Py_ssize_t after = skip_space(s, end, n);
        if (after >= n) break; /* the terminator is not in the buffer yet */
        if (s[after] == ',') {
            items++; last_end = end; next_pos = p = after + 1;
        } else if (s[after] == ']') {
            items++; last_end = end; next_pos = after + 1; closed = 1;
        } else {
            error_at = after;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (deep_at >= 0) return scan_error(TooDeep, "nested too deeply", deep_at, items);
    if (error_at >= 0) return scan_error(ScanError, "malformed JSON array", error_at, items);
    return Py_BuildValue("nnnO", items, last_end, next_pos, closed ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"value_end", py_value_end, METH_VARARGS,
     "value_end(buf, pos, max_depth[, end]): offset just past the JSON value at pos, or -1 if incomplete\n"
     "(in buf[:end] when end is given)."},
    {"scan_array", py_scan_array, METH_VARARGS,
     "scan_array(buf, pos, max_items, max_depth[, end]): scan complete elements of a JSON array\n"
     "(in buf[:end] when end is given)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan", "JSON value boundary scanner.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonscan(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    ScanError = PyErr_NewException("chakra_core._native._jsonscan.ScanError", PyExc_ValueError, NULL);
    if (!ScanError || PyModule_AddObjectRef(m, "ScanError", ScanError) < 0) goto fail;
    TooDeep = PyErr_NewException("chakra_core._native._jsonscan.TooDeep", ScanError, NULL);
    if (!TooDeep || PyModule_AddObjectRef(m, "TooDeep", TooDeep) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
