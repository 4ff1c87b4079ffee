/* The compact Kineto event objects (kinetoevents.c), shared with the digest (kinetodigest.c). */
#ifndef KINETOEVENTS_H
#define KINETOEVENTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* One 8-byte slot per field: an object reference, a double or an int64 id. */
typedef union {
    PyObject *obj;
    double num;
    int64_t id;
} slot_t;

/* An event: its fields as C values, without a __dict__ or a Python object per number.
 * none_mask bit k: id slot k is None; big_mask bit k: id slot k is an int beyond int64,
 * held in `big` (a tuple, one item per slot), as a trace parsed by Python may carry. */
typedef struct {
    PyObject_HEAD
    uint32_t none_mask, big_mask;
    PyObject *big;
    slot_t slots[];
} event_t;

enum { CPU_NAME, CPU_TID, CPU_TS, CPU_DUR, CPU_EXTERNAL, CPU_RF, CPU_EXCLUSIVE, CPU_IDLE, CPU_ARGS, CPU_FIELDS };
enum { DEV_NAME, DEV_CATEGORY, DEV_TS, DEV_DUR, DEV_STREAM, DEV_EXTERNAL, DEV_CORRELATION, DEV_FIELDS };
enum { RT_TID, RT_TS, RT_CORRELATION, RT_EXTERNAL, RT_NAME, RT_DUR, RT_FIELDS };

extern PyTypeObject CpuEventType, DeviceEventType, RuntimeEventType;

/* A new event of `type` with every slot zero / None; the caller fills the slots (new references
 * for object slots) and clears none_mask bits of the ids it sets. */
event_t *event_new(PyTypeObject *type);

/* Add the event types and the column functions to the module. */
int events_init(PyObject *module);

extern PyMethodDef EVENT_METHODS[];

#endif
