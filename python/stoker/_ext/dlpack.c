/*
 * dlpack.c: an Array exported through DLPack (__dlpack__ and
 * __dlpack_device__), as versioned (1.x) or legacy (0.8) capsules, without
 * a copy.  The C ABI of dlpack.h is restated here: the structs below are
 * that ABI, not stoker's own.
 */
#include "ext.h"

#include <string.h>

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;
typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

static DLDataType dl_dtype(stk_dtype t) {
    DLDataType d = {kDLUInt, 8, 1};
    switch (t) {
    case STK_U8: case STK_BYTES: d = (DLDataType){kDLUInt, 8, 1}; break;
    case STK_U16: d = (DLDataType){kDLUInt, 16, 1}; break;
    case STK_U32: d = (DLDataType){kDLUInt, 32, 1}; break;
    case STK_U64: d = (DLDataType){kDLUInt, 64, 1}; break;
    case STK_I8: d = (DLDataType){kDLInt, 8, 1}; break;
    case STK_I16: d = (DLDataType){kDLInt, 16, 1}; break;
    case STK_I32: d = (DLDataType){kDLInt, 32, 1}; break;
    case STK_I64: d = (DLDataType){kDLInt, 64, 1}; break;
    case STK_F16: d = (DLDataType){kDLFloat, 16, 1}; break;
    case STK_BF16: d = (DLDataType){kDLBfloat, 16, 1}; break;
    case STK_F32: d = (DLDataType){kDLFloat, 32, 1}; break;
    case STK_F64: d = (DLDataType){kDLFloat, 64, 1}; break;
    }
    return d;
}

/* The DLPack producer's context: the Array stays alive while a consumer
 * holds the tensor. */
typedef struct {
    DLManagedTensorVersioned v;
    DLManagedTensor legacy;
    int64_t shape[STK_MAX_DIMS + 2];
    ArrayObject *owner;
} dl_ctx;

static void dl_release(dl_ctx *c) {
    /* Consumers may call the deleter from any thread, without the GIL; the
     * context is freed while it is held (the stable ABI has no
     * PyMem_Raw* before 3.13). */
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF((PyObject *)c->owner);
    PyMem_Free(c);
    PyGILState_Release(st);
}
static void dl_delete_versioned(DLManagedTensorVersioned *m) { dl_release(m->manager_ctx); }
static void dl_delete_legacy(DLManagedTensor *m) { dl_release(m->manager_ctx); }

static void capsule_versioned_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter) m->deleter(m);
    }
}
static void capsule_legacy_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
}

/* A device array: the consumer will use the data on `stream` (None: the
 * legacy default stream, 1; -1: the consumer synchronises itself).  That
 * stream waits for the batch's copy, and the batch's buffer is refilled
 * only after the work queued there is done.  Returns 0 or -1. */
static int dlpack_stream(ArrayObject *self, PyObject *stream) {
    long long sv = stream == Py_None ? 1 : PyLong_AsLongLong(stream);
    if (sv == -1 && PyErr_Occurred()) return -1;
    if (sv == 0) {
        PyErr_SetString(InvalidArgument, "__dlpack__: stream 0 is ambiguous for CUDA; "
                                          "use 1 for the legacy default stream");
        return -1;
    }
    if (sv == -1) return 0;
    BatchObject *b = self->batch;
    stk_error err = {0};
    int rc = stk_batch_wait(b->b, (uintptr_t)sv, &err);
    if (rc) {
        raise_stk(rc, &err);
        return -1;
    }
    b->stream = (uintptr_t)sv;
    b->streamed = 1;
    return 0;
}

/* Refuses what a view cannot give: a copy, or the data on another device.
 * Returns 0 or -1. */
static int dlpack_check_request(ArrayObject *self, PyObject *dl_device, PyObject *copy) {
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError,
                        "__dlpack__: stoker exports views; copy=True is not supported");
        return -1;
    }
    if (dl_device == Py_None) return 0;
    int dt = 0, di = 0;
    if (!PyArg_ParseTuple(dl_device, "ii", &dt, &di)) return -1;
    if (dt != self->dev_type || di != self->dev_id) {
        PyErr_SetString(PyExc_BufferError, self->dev_type == kDLCPU
                                               ? "__dlpack__: the data is on the CPU"
                                               : "__dlpack__: the data is on another device");
        return -1;
    }
    return 0;
}

/* The capsule of `self`: "dltensor_versioned" when the consumer takes 1.x,
 * else the legacy "dltensor". */
static PyObject *dlpack_capsule(ArrayObject *self, int versioned) {
    dl_ctx *c = PyMem_Calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    Py_INCREF((PyObject *)self);
    c->owner = self;
    memcpy(c->shape, self->shape, sizeof c->shape);
    DLTensor t = {self->data, {self->dev_type, self->dev_id}, self->ndim, dl_dtype(self->dtype),
                  c->shape, NULL, 0};
    PyObject *cap;
    if (versioned) {
        c->v.version = (DLPackVersion){1, 0};
        c->v.manager_ctx = c;
        c->v.deleter = dl_delete_versioned;
        c->v.flags = 0;
        c->v.dl_tensor = t;
        cap = PyCapsule_New(&c->v, "dltensor_versioned", capsule_versioned_destructor);
    } else {
        c->legacy.dl_tensor = t;
        c->legacy.manager_ctx = c;
        c->legacy.deleter = dl_delete_legacy;
        cap = PyCapsule_New(&c->legacy, "dltensor", capsule_legacy_destructor);
    }
    if (!cap) dl_release(c);
    return cap;
}

PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (stream != Py_None && !PyLong_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__: stream must be an int or None");
        return NULL;
    }
    if (self->dev_type == kDLCUDA && dlpack_stream(self, stream)) return NULL;
    if (dlpack_check_request(self, dl_device, copy)) return NULL;
    int versioned = 0;
    if (max_version != Py_None) {
        long major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "ll", &major, &minor)) return NULL;
        versioned = major >= 1;
    }
    return dlpack_capsule(self, versioned);
}

PyObject *array_dlpack_device(ArrayObject *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(ii)", self->dev_type, self->dev_id);
}
