/* The Kineto events kineto.py keeps (CpuEvent, DeviceEvent, RuntimeEvent), as small C objects.
 *
 * Why: a long trace keeps about a million of them, and each as a Python object with a float,
 * an int per field and a GC header took ~300 bytes; here an event is its fields as C values
 * (8 bytes a field, ~100 bytes an event, not tracked by the cyclic collector: what it refers to
 * is a str, an int, or a dict of parsed JSON, none of which can refer back to it).
 * They read, compare, repr and pickle as the dataclasses they replace did: positional and
 * keyword construction with the same defaults, every field settable, equal when of one type
 * with equal fields, unhashable. ids (external_id, rf_id, correlation, stream) are int or None.
 *
 * Columns for numpy, read and written in one C loop over a list of events:
 *   column(events, field, codes=None) -> bytes: float64 per event for ts/dur/exclusive/
 *     idle_before; for ids, int64 per event followed by one presence byte per event (0: None
 *     or an int beyond int64); for an object field (name, tid, category), the int64 code of
 *     each value by first appearance in `codes` (a dict, which may be shared between calls).
 *   set_column(events, field, float64 buffer): sets a float field of every event.
 */
#include "kinetoevents.h"

typedef enum { F_OBJ, F_NUM, F_ID } kind_t;
typedef enum { D_REQUIRED, D_ZERO, D_NONE, D_EMPTY } default_t;
typedef struct {
    const char *name;
    kind_t kind;
    default_t def;
} field_t;
typedef struct {
    PyTypeObject *type;
    int n;
    const field_t *fields;
} spec_t;

static const field_t CPU[CPU_FIELDS] = {
    {"name", F_OBJ, D_REQUIRED}, {"tid", F_OBJ, D_REQUIRED}, {"ts", F_NUM, D_REQUIRED}, {"dur", F_NUM, D_REQUIRED},
    {"external_id", F_ID, D_REQUIRED}, {"rf_id", F_ID, D_REQUIRED}, {"exclusive", F_NUM, D_ZERO},
    {"idle_before", F_NUM, D_ZERO}, {"args", F_OBJ, D_NONE}};
static const field_t DEVICE[DEV_FIELDS] = {
    {"name", F_OBJ, D_REQUIRED}, {"category", F_OBJ, D_REQUIRED}, {"ts", F_NUM, D_REQUIRED},
    {"dur", F_NUM, D_REQUIRED}, {"stream", F_ID, D_REQUIRED}, {"external_id", F_ID, D_REQUIRED},
    {"correlation", F_ID, D_NONE}};
static const field_t RUNTIME[RT_FIELDS] = {
    {"tid", F_OBJ, D_REQUIRED}, {"ts", F_NUM, D_REQUIRED}, {"correlation", F_ID, D_REQUIRED},
    {"external_id", F_ID, D_REQUIRED}, {"name", F_OBJ, D_EMPTY}, {"dur", F_NUM, D_ZERO}};

static spec_t SPECS[3] = {{&CpuEventType, CPU_FIELDS, CPU},
                          {&DeviceEventType, DEV_FIELDS, DEVICE},
                          {&RuntimeEventType, RT_FIELDS, RUNTIME}};

static const spec_t *spec_of(PyTypeObject *type) {
    for (int k = 0; k < 3; k++)
        if (SPECS[k].type == type) return &SPECS[k];
    return NULL;
}

event_t *event_new(PyTypeObject *type) {
    const spec_t *spec = spec_of(type);
    event_t *e = (event_t *)type->tp_alloc(type, 0);
    if (!e) return NULL;
    for (int k = 0; k < spec->n; k++) {
        if (spec->fields[k].kind == F_OBJ) {
            Py_INCREF(Py_None);
            e->slots[k].obj = Py_None;
        } else if (spec->fields[k].kind == F_ID) {
            e->none_mask |= 1u << k;
        }
    }
    return e;
}

static PyObject *field_get(event_t *e, const spec_t *spec, int k) {
    switch (spec->fields[k].kind) {
    case F_OBJ:
        Py_INCREF(e->slots[k].obj);
        return e->slots[k].obj;
    case F_NUM:
        return PyFloat_FromDouble(e->slots[k].num);
    default:
        if (e->none_mask & (1u << k)) Py_RETURN_NONE;
        if (e->big_mask & (1u << k)) {
            PyObject *v = PyTuple_GET_ITEM(e->big, k);
            Py_INCREF(v);
            return v;
        }
        return PyLong_FromLongLong(e->slots[k].id);
    }
}

static int field_set(event_t *e, const spec_t *spec, int k, PyObject *value) {
    if (!value) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", spec->fields[k].name);
        return -1;
    }
    if (spec->fields[k].kind == F_OBJ) {
        Py_INCREF(value);
        Py_SETREF(e->slots[k].obj, value);
        return 0;
    }
    if (spec->fields[k].kind == F_NUM) {
        double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred()) return -1;
        e->slots[k].num = v;
        return 0;
    }
    uint32_t bit = 1u << k;
    e->none_mask &= ~bit;
    e->big_mask &= ~bit;
    if (value == Py_None) {
        e->none_mask |= bit;
        return 0;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or None", spec->fields[k].name);
        e->none_mask |= bit;
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        e->slots[k].id = v;
        return 0;
    }
    if (!e->big) {
        if (!(e->big = PyTuple_New(spec->n))) return -1;
        for (int j = 0; j < spec->n; j++) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(e->big, j, Py_None);
        }
    }
    Py_INCREF(value);
    Py_SETREF(PyTuple_GET_ITEM(e->big, k), value);
    e->big_mask |= bit;
    return 0;
}

static PyObject *event_getattr(PyObject *self, void *closure) {
    return field_get((event_t *)self, spec_of(Py_TYPE(self)), (int)(intptr_t)closure);
}

static int event_setattr(PyObject *self, PyObject *value, void *closure) {
    return field_set((event_t *)self, spec_of(Py_TYPE(self)), (int)(intptr_t)closure, value);
}

static PyObject *event_init_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const spec_t *spec = spec_of(type);
    Py_ssize_t n_args = PyTuple_GET_SIZE(args);
    if (n_args > spec->n) return PyErr_Format(PyExc_TypeError, "%s takes at most %d arguments", type->tp_name, spec->n);
    event_t *e = event_new(type);
    if (!e) return NULL;
    Py_ssize_t used = 0;
    for (int k = 0; k < spec->n; k++) {
        PyObject *value = k < n_args ? PyTuple_GET_ITEM(args, k) : NULL;
        PyObject *named = kwargs ? PyDict_GetItemString(kwargs, spec->fields[k].name) : NULL;
        if (value && named) {
            PyErr_Format(PyExc_TypeError, "%s got multiple values for %s", type->tp_name, spec->fields[k].name);
            goto fail;
        }
        used += named != NULL;
        value = value ? value : named;
        if (!value) {
            default_t def = spec->fields[k].def;
            if (def == D_REQUIRED) {
                PyErr_Format(PyExc_TypeError, "%s missing required argument %s", type->tp_name, spec->fields[k].name);
                goto fail;
            }
            if (def == D_EMPTY) {
                PyObject *empty = PyUnicode_FromString("");
                int r = empty ? field_set(e, spec, k, empty) : -1;
                Py_XDECREF(empty);
                if (r < 0) goto fail;
            }
            continue;  /* D_ZERO, D_NONE: as event_new left it */
        }
        if (field_set(e, spec, k, value) < 0) goto fail;
    }
    if (kwargs && used < PyDict_GET_SIZE(kwargs)) {
        PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument", type->tp_name);
        goto fail;
    }
    return (PyObject *)e;
fail:
    Py_DECREF(e);
    return NULL;
}

static void event_dealloc(PyObject *self) {
    event_t *e = (event_t *)self;
    const spec_t *spec = spec_of(Py_TYPE(self));
    for (int k = 0; k < spec->n; k++)
        if (spec->fields[k].kind == F_OBJ) Py_XDECREF(e->slots[k].obj);
    Py_XDECREF(e->big);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *fields_tuple(PyObject *self) {
    const spec_t *spec = spec_of(Py_TYPE(self));
    PyObject *t = PyTuple_New(spec->n);
    if (!t) return NULL;
    for (int k = 0; k < spec->n; k++) {
        PyObject *v = field_get((event_t *)self, spec, k);
        if (!v) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

static PyObject *event_richcompare(PyObject *a, PyObject *b, int op) {
    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) Py_RETURN_NOTIMPLEMENTED;
    PyObject *ta = fields_tuple(a), *tb = ta ? fields_tuple(b) : NULL;
    PyObject *r = tb ? PyObject_RichCompare(ta, tb, op) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return r;
}

static PyObject *event_repr(PyObject *self) {
    const spec_t *spec = spec_of(Py_TYPE(self));
    PyObject *parts = PyList_New(0), *out = NULL;
    if (!parts) return NULL;
    for (int k = 0; k < spec->n; k++) {
        PyObject *v = field_get((event_t *)self, spec, k);
        PyObject *part = v ? PyUnicode_FromFormat("%s=%R", spec->fields[k].name, v) : NULL;
        Py_XDECREF(v);
        if (!part || PyList_Append(parts, part) < 0) { Py_XDECREF(part); goto done; }
        Py_DECREF(part);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *inner = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    if (inner) out = PyUnicode_FromFormat("%s(%U)", _PyType_Name(Py_TYPE(self)), inner);
    Py_XDECREF(inner);
done:
    Py_DECREF(parts);
    return out;
}

static PyObject *event_reduce(PyObject *self, PyObject *unused) {
    PyObject *t = fields_tuple(self);
    return t ? Py_BuildValue("(ON)", (PyObject *)Py_TYPE(self), t) : NULL;
}

static PyMethodDef event_methods[] = {{"__reduce__", event_reduce, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};

static PyGetSetDef cpu_getset[CPU_FIELDS + 1], device_getset[DEV_FIELDS + 1], runtime_getset[RT_FIELDS + 1];

#define EVENT_TYPE(c_name, py_name, n_fields, getset, doc)                                  \
    PyTypeObject c_name = {                                                                 \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chakra_core._native._kinetodigest." py_name, \
        .tp_basicsize = sizeof(event_t) + (n_fields) * sizeof(slot_t),                        \
        .tp_flags = Py_TPFLAGS_DEFAULT,                                                       \
        .tp_doc = doc,                                                                        \
        .tp_new = event_init_new,                                                             \
        .tp_dealloc = event_dealloc,                                                          \
        .tp_richcompare = event_richcompare,                                                  \
        .tp_hash = PyObject_HashNotImplemented,                                               \
        .tp_repr = event_repr,                                                                \
        .tp_methods = event_methods,                                                          \
        .tp_getset = getset,                                                                  \
    }

EVENT_TYPE(CpuEventType, "CpuEvent", CPU_FIELDS, cpu_getset,
           "CpuEvent(name, tid, ts, dur, external_id, rf_id, exclusive=0.0, idle_before=0.0, args=None)");
EVENT_TYPE(DeviceEventType, "DeviceEvent", DEV_FIELDS, device_getset,
           "DeviceEvent(name, category, ts, dur, stream, external_id, correlation=None)");
EVENT_TYPE(RuntimeEventType, "RuntimeEvent", RT_FIELDS, runtime_getset,
           "RuntimeEvent(tid, ts, correlation, external_id, name='', dur=0.0): a launch on the host");

/* The field of `type` named `name`, or -1 with an error set. */
static int field_index(PyTypeObject *type, const char *name, const spec_t **spec) {
    *spec = spec_of(type);
    if (!*spec) {
        PyErr_Format(PyExc_TypeError, "not a Kineto event: %s", type->tp_name);
        return -1;
    }
    for (int k = 0; k < (*spec)->n; k++)
        if (strcmp((*spec)->fields[k].name, name) == 0) return k;
    PyErr_Format(PyExc_AttributeError, "%s has no field %s", type->tp_name, name);
    return -1;
}

static PyObject *py_column(PyObject *self, PyObject *args) {
    PyObject *events, *codes = Py_None;
    const char *name;
    if (!PyArg_ParseTuple(args, "O!s|O", &PyList_Type, &events, &name, &codes)) return NULL;
    if (codes != Py_None && !PyDict_Check(codes)) return PyErr_Format(PyExc_TypeError, "codes must be a dict");
    Py_ssize_t n = PyList_GET_SIZE(events);
    PyTypeObject *type = NULL;
    const spec_t *spec = NULL;
    int k = -1;
    kind_t kind = F_NUM;
    PyObject *out = NULL, *own_codes = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(events, i);
        if (Py_TYPE(item) != type) { /* lists of one type, or events and calls mixed (innermost_open) */
            type = Py_TYPE(item);
            if ((k = field_index(type, name, &spec)) < 0) goto fail;
            kind_t this_kind = spec->fields[k].kind;
            if (out && this_kind != kind) { PyErr_SetString(PyExc_TypeError, "mixed field kinds"); goto fail; }
            kind = this_kind;
            if (!out && !(out = PyBytes_FromStringAndSize(NULL, n * (kind == F_ID ? 9 : 8)))) goto fail;
            if (kind == F_OBJ && codes == Py_None && !(codes = own_codes = PyDict_New())) goto fail;
        }
        event_t *e = (event_t *)item;
        char *buf = PyBytes_AS_STRING(out);
        if (kind == F_NUM) {
            ((double *)buf)[i] = e->slots[k].num;
        } else if (kind == F_ID) {
            int present = !((e->none_mask | e->big_mask) & (1u << k));
            ((int64_t *)buf)[i] = present ? e->slots[k].id : 0;
            buf[8 * n + i] = (char)present;
        } else {
            PyObject *next = PyLong_FromSsize_t(PyDict_GET_SIZE(codes));
            PyObject *code = next ? PyDict_SetDefault(codes, e->slots[k].obj, next) : NULL;
            Py_XDECREF(next);
            if (!code) goto fail;
            ((int64_t *)buf)[i] = PyLong_AsLongLong(code);
        }
    }
    Py_XDECREF(own_codes);
    return out ? out : PyBytes_FromStringAndSize("", 0);
fail:
    Py_XDECREF(own_codes);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *py_set_column(PyObject *self, PyObject *args) {
    PyObject *events;
    const char *name;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "O!sy*", &PyList_Type, &events, &name, &view)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(events);
    PyObject *result = NULL;
    if (view.len != n * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "one float64 per event expected");
        goto done;
    }
    PyTypeObject *type = NULL;
    const spec_t *spec;
    int k = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(events, i);
        if (Py_TYPE(item) != type) {
            type = Py_TYPE(item);
            if ((k = field_index(type, name, &spec)) < 0) goto done;
            if (spec->fields[k].kind != F_NUM) {
                PyErr_Format(PyExc_TypeError, "%s is not a float field", name);
                goto done;
            }
        }
        ((event_t *)item)->slots[k].num = ((const double *)view.buf)[i];
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    return result;
}

PyMethodDef EVENT_METHODS[] = {
    {"column", py_column, METH_VARARGS, "column(events, field, codes=None) -> bytes: one field of every event."},
    {"set_column", py_set_column, METH_VARARGS, "set_column(events, field, float64 buffer): set a float field."},
    {NULL, NULL, 0, NULL},
};

static void fill_getset(PyGetSetDef *getset, const spec_t *spec) {
    for (int k = 0; k < spec->n; k++)
        getset[k] = (PyGetSetDef){(char *)spec->fields[k].name, event_getattr, event_setattr, NULL, (void *)(intptr_t)k};
    getset[spec->n] = (PyGetSetDef){NULL};
}

int events_init(PyObject *module) {
    fill_getset(cpu_getset, &SPECS[0]);
    fill_getset(device_getset, &SPECS[1]);
    fill_getset(runtime_getset, &SPECS[2]);
    for (int k = 0; k < 3; k++) {
        PyTypeObject *type = SPECS[k].type;
        if (PyType_Ready(type) < 0) return -1;
        Py_INCREF(type);
        if (PyModule_AddObject(module, _PyType_Name(type), (PyObject *)type) < 0) {
            Py_DECREF(type);
            return -1;
        }
    }
    return 0;
}
