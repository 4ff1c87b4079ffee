/* Finds the boundaries of JSON values in a byte buffer without parsing them.
 *
 * PyTorch execution traces and Kineto traces are single JSON documents whose bulk is
 * one long array ("nodes" / "traceEvents"). Parsing the whole document at once costs
 * about ten times its size in Python objects; this scanner lets the reader hand the
 * array to a real JSON parser in bounded batches instead. It only tracks nesting depth
 * and string/escape state, so it runs at memory speed; syntax errors inside a value are
 * left to the parser that later reads the batch.
 *
 *   value_end(buf, pos) -> end | -1
 *       `pos` is the first byte of a value (leading whitespace is skipped). Returns the
 *       offset just past the value, or -1 if the buffer ends first.
 *   scan_array(buf, pos, max_items) -> (items, last_end, next_pos, closed)
 *       `pos` is inside an array, just after '[' or after the ',' that follows an
 *       element. Scans up to `max_items` complete elements, each followed by ',' or ']'.
 *       last_end: offset just past the last complete element; next_pos: where the next
 *       call resumes (after that element's ',' or after the closing ']'); closed: the
 *       array's ']' was reached. An element cut off by the buffer end is not counted.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "jsonscan.h"

static PyObject *ScanError;

static int get_buffer(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static PyObject *py_value_end(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "On", &obj, &pos)) return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view) < 0) return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len, end;
    Py_BEGIN_ALLOW_THREADS
    end = find_value_end(s, skip_space(s, pos < 0 ? 0 : pos, n), n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (end == -2) {
        PyErr_Format(ScanError, "expected a JSON value at byte %zd", pos);
        return NULL;
    }
    return PyLong_FromSsize_t(end);
}

static PyObject *py_scan_array(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, max_items;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &max_items)) return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view) < 0) return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len, items = 0, last_end = -1, next_pos = pos, error_at = -1;
    int closed = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t p = skip_space(s, pos, n);
    if (p < n && s[p] == ']') { /* an empty array */
        closed = 1;
        next_pos = p + 1;
    }
    while (!closed && items < max_items) {
        p = skip_space(s, p, n);
        Py_ssize_t end = find_value_end(s, p, n);
        if (end == -1) break;
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
    if (error_at >= 0) {
        PyErr_Format(ScanError, "malformed JSON array at byte %zd", error_at);
        return NULL;
    }
    return Py_BuildValue("nnnO", items, last_end, next_pos, closed ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"value_end", py_value_end, METH_VARARGS, "Offset just past the JSON value at pos, or -1 if incomplete."},
    {"scan_array", py_scan_array, METH_VARARGS, "Scan complete elements of a JSON array."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan", "JSON value boundary scanner.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonscan(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    ScanError = PyErr_NewException("chakra_core._native._jsonscan.ScanError", PyExc_ValueError, NULL);
    if (!ScanError || PyModule_AddObject(m, "ScanError", ScanError) < 0) {
        Py_XDECREF(ScanError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
