/*
 * _stoker.c: the CPython extension around libstoker.
 *
 * Objects:
 *   Loader  wraps stk_loader (and the stk_dataset it reads).
 *   Batch   one batch handed out by the loader; while it lives its buffer
 *           is never reused.  It is released when the last object that
 *           points into it (an Array, a NumPy array, a torch tensor made
 *           through DLPack) is gone.
 *   Array   one field of a batch: exports DLPack (versioned and legacy
 *           capsules) and the buffer protocol, without copying.
 *   Writer  wraps stk_writer for stoker.write().
 *
 * The GIL is released while the loader waits; the wait is cut into short
 * slices so that Ctrl-C interrupts it.  A loader used in a process other
 * than the one that opened it (after fork) raises instead of touching
 * threads that do not exist there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stoker.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ---- DLPack: the C ABI of dlpack.h, versions 0.8 (legacy) and 1.x ---- */

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

enum { kDLCPU = 1, kDLCUDA = 2 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

static PyObject *StokerError;

/* Raises the right exception for a libstoker error. */
/* The hierarchy of stoker/_errors.py: StokerError, and its kinds that are
 * also ValueError, FileNotFoundError and MemoryError. */
static PyObject *InvalidArgument, *NotFound, *OutOfMemory;

static PyObject *raise_stk(int rc, const stk_error *e) {
    const char *msg = e && e->message[0] ? e->message : stk_strerror(rc);
    PyObject *type = rc == -EINVAL   ? InvalidArgument
                     : rc == -ENOMEM ? OutOfMemory
                     : rc == -ENOENT ? NotFound
                                     : StokerError;
    PyObject *args = Py_BuildValue("(is)", rc, msg);
    if (args) {
        PyErr_SetObject(type, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    stk_dataset *ds;
    stk_loader *ld;    /* the stage's own when gpu is set */
    stk_gpu *gpu;      /* device="cuda": the GPU stage, which owns ld */
    pid_t pid;
    Py_ssize_t live;   /* Batch objects alive */
    int closing;       /* close() called while batches were alive */
    struct BatchObject_ *last; /* the last host batch given (borrowed; cleared
                                * when it goes), for unget_last() */
    PyObject *names;   /* tuple of field names */
} LoaderObject;

typedef struct BatchObject_ {
    PyObject_HEAD
    LoaderObject *loader;
    stk_batch *b;          /* a host batch, or */
    stk_gpu_batch *gb;     /* a device batch */
    uintptr_t stream;      /* the last CUDA stream a consumer used it on */
    int streamed;
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *batch;
    void *data;
    int ndim;
    int64_t shape[STK_MAX_DIMS + 2];
    int64_t strides[STK_MAX_DIMS + 2]; /* in bytes, for the buffer protocol */
    Py_ssize_t bshape[STK_MAX_DIMS + 2], bstrides[STK_MAX_DIMS + 2];
    stk_dtype dtype;
    size_t itemsize;
    int dev_type, dev_id;  /* DLPack device: kDLCPU, or kDLCUDA and its ordinal */
} ArrayObject;

static PyTypeObject LoaderType, BatchType, ArrayType;

static void loader_teardown(LoaderObject *self) {
    if (self->gpu && self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        stk_gpu_close(self->gpu); /* closes its loader */
        Py_END_ALLOW_THREADS
    } else if (self->ld && self->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        stk_loader_close(self->ld);
        Py_END_ALLOW_THREADS
    }
    self->gpu = NULL;
    if (self->ds && self->pid == getpid()) stk_dataset_close(self->ds);
    self->ld = NULL;
    self->ds = NULL;
}

/* ---- Batch ---- */

static void batch_dealloc(BatchObject *self) {
    LoaderObject *l = self->loader;
    if (l) {
        if (l->last == self) l->last = NULL;
        if (l->gpu && self->gb && l->pid == getpid())
            /* Refilled only after the work queued on the consumer's stream
             * so far is done (or at once when no stream was given). */
            stk_gpu_release(l->gpu, self->gb, self->streamed ? self->stream : UINTPTR_MAX);
        else if (l->ld && self->b && l->pid == getpid())
            stk_loader_release(l->ld, self->b);
        l->live--;
        if (l->closing && l->live == 0) loader_teardown(l);
        Py_DECREF(l);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *batch_index(BatchObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->gb ? stk_gpu_batch_index(self->gb)
                                              : stk_batch_index(self->b));
}

static PyGetSetDef batch_getset[] = {
    {"index", (getter)batch_index, NULL, "the batch's number within this rank's epoch", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Owner of one batch buffer; released when no array points into it.",
    .tp_getset = batch_getset,
};

/* ---- Array ---- */

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

static const char *buffer_format(stk_dtype t) {
    switch (t) {
    case STK_U8: case STK_BYTES: return "B";
    case STK_U16: return "H";
    case STK_U32: return "I";
    case STK_U64: return "Q";
    case STK_I8: return "b";
    case STK_I16: return "h";
    case STK_I32: return "i";
    case STK_I64: return "q";
    case STK_F16: return "e";
    case STK_BF16: return "H"; /* no buffer-protocol code: raw 16-bit words */
    case STK_F32: return "f";
    case STK_F64: return "d";
    }
    return "B";
}

static ArrayObject *array_new(BatchObject *batch, void *data, stk_dtype dtype, int ndim,
                              const int64_t *shape) {
    ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
    if (!a) return NULL;
    Py_INCREF(batch);
    a->batch = batch;
    a->data = data;
    a->dtype = dtype;
    a->itemsize = stk_dtype_size(dtype);
    a->dev_type = kDLCPU;
    a->dev_id = 0;
    a->ndim = ndim;
    int64_t stride = (int64_t)a->itemsize;
    for (int d = ndim - 1; d >= 0; d--) {
        a->shape[d] = shape[d];
        a->strides[d] = stride;
        a->bshape[d] = (Py_ssize_t)shape[d];
        a->bstrides[d] = (Py_ssize_t)stride;
        stride *= shape[d] ? shape[d] : 1;
    }
    return a;
}

static void array_dealloc(ArrayObject *self) {
    Py_XDECREF(self->batch);
    PyObject_Free(self);
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
    /* Consumers may call the deleter from any thread, without the GIL. */
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF(c->owner);
    PyGILState_Release(st);
    PyMem_RawFree(c);
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

static PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (stream != Py_None && !PyLong_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__: stream must be an int or None");
        return NULL;
    }
    if (self->dev_type == kDLCUDA) {
        /* The consumer will use the data on `stream` (None: the legacy
         * default stream, 1; -1: the consumer synchronises itself): that
         * stream waits for the batch's copy, and the batch's buffer is
         * refilled only after the work queued there is done. */
        long long sv = stream == Py_None ? 1 : PyLong_AsLongLong(stream);
        if (sv == -1 && PyErr_Occurred()) return NULL;
        if (sv == 0) {
            PyErr_SetString(InvalidArgument, "__dlpack__: stream 0 is ambiguous for CUDA; "
                                              "use 1 for the legacy default stream");
            return NULL;
        }
        BatchObject *b = self->batch;
        if (sv != -1) {
            stk_error err = {0};
            int rc = stk_gpu_batch_wait(b->gb, (uintptr_t)sv, &err);
            if (rc) return raise_stk(rc, &err);
            b->stream = (uintptr_t)sv;
            b->streamed = 1;
        }
    }
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "__dlpack__: stoker exports views; copy=True is not supported");
        return NULL;
    }
    if (dl_device != Py_None) {
        int dt = 0, di = 0;
        if (!PyArg_ParseTuple(dl_device, "ii", &dt, &di)) return NULL;
        if (dt != self->dev_type || di != self->dev_id) {
            PyErr_SetString(PyExc_BufferError, self->dev_type == kDLCPU
                                                   ? "__dlpack__: the data is on the CPU"
                                                   : "__dlpack__: the data is on another device");
            return NULL;
        }
    }
    int versioned = 0;
    if (max_version != Py_None) {
        long major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "ll", &major, &minor)) return NULL;
        versioned = major >= 1;
    }
    dl_ctx *c = PyMem_RawCalloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    Py_INCREF(self);
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

static PyObject *array_dlpack_device(ArrayObject *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(ii)", self->dev_type, self->dev_id);
}

static int array_getbuffer(ArrayObject *self, Py_buffer *view, int flags) {
    if (self->dev_type != kDLCPU) {
        PyErr_SetString(PyExc_BufferError, "the array is in GPU memory; use DLPack "
                                            "(torch.from_dlpack) rather than the buffer protocol");
        view->obj = NULL;
        return -1;
    }
    if (flags & PyBUF_WRITABLE) {
        /* Writable: the consumer owns the batch while it lives. */
    }
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->buf = self->data;
    view->itemsize = (Py_ssize_t)self->itemsize;
    Py_ssize_t n = (Py_ssize_t)self->itemsize;
    for (int d = 0; d < self->ndim; d++) n *= self->bshape[d];
    view->len = n;
    view->readonly = 0;
    view->format = (flags & PyBUF_FORMAT) ? (char *)buffer_format(self->dtype) : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) ? self->bshape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? self->bstrides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs array_as_buffer = {(getbufferproc)array_getbuffer, NULL};

static PyObject *array_shape(ArrayObject *self, void *c) {
    (void)c;
    PyObject *t = PyTuple_New(self->ndim);
    for (int d = 0; t && d < self->ndim; d++)
        PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(self->shape[d]));
    return t;
}
static PyObject *array_dtype(ArrayObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(stk_dtype_name(self->dtype));
}
static PyObject *array_ptr(ArrayObject *self, void *c) {
    (void)c;
    return PyLong_FromVoidPtr(self->data);
}

static PyGetSetDef array_getset[] = {
    {"shape", (getter)array_shape, NULL, "shape", NULL},
    {"dtype", (getter)array_dtype, NULL, "stoker dtype name", NULL},
    {"data_ptr", (getter)array_ptr, NULL, "address of the first element", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "Exports the array as a DLPack capsule (versioned when max_version >= (1, 0))."},
    {"__dlpack_device__", (PyCFunction)array_dlpack_device, METH_NOARGS,
     "(device type, device id) of the data: (1, 0) the CPU, (2, N) CUDA device N."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy view of one field of a batch (DLPack and buffer protocol).",
    .tp_as_buffer = &array_as_buffer,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
};

/* ---- Loader ---- */

static int check_process(LoaderObject *self) {
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this stoker Loader was opened in another process (before a fork); its "
                        "threads do not exist here. Open the loader in the process that uses it "
                        "(stoker.torch.Dataset does this in each DataLoader worker).");
        return -1;
    }
    /* closing: close() was called while batches were alive; the C loader
     * lives on only to back their memory and must hand out nothing more. */
    if (!self->ld || self->closing) {
        PyErr_SetString(InvalidArgument, "the loader is closed");
        return -1;
    }
    return 0;
}

static const char *str_or_null(PyObject *o) {
    return o && o != Py_None ? PyUnicode_AsUTF8(o) : NULL;
}

static int loader_init(LoaderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "batch_size", "fields", "window", "stride", "valid_field",
                             "valid", "order", "seed", "epoch", "block_bytes", "block_samples",
                             "block_group", "rank", "world_size", "pad", "drop_last", "backend",
                             "direct", "threads", "prefetch", "queue_depth", "memory_budget",
                             "verify", "on_error", "max_skips", "max_open_files", "device",
                             "gpu_slots", "resident_budget", "warm_up", "split_index",
                             "split_count", "root", NULL};
    const char *path;
    stk_loader_options o;
    stk_loader_options_init(&o);
    PyObject *fields = Py_None, *valid_field = Py_None;
    int valid = 0, order = 2, backend = 0, pad = 0, drop_last = 0, direct = 0, threads = 0;
    unsigned int batch = 32, block_group = 16, rank = 0, world = 1, prefetch = 0, qd = 64;
    unsigned long long window = 0, stride = 1, seed = 0, epoch = 0, bb = 4u << 20, bs = 0,
                       budget = 1ull << 30;
    int verify = 1, on_error = 0;
    unsigned long long max_skips = 100;
    unsigned int max_open = 0;
    int device = -1;
    unsigned int gpu_slots = 3;
    unsigned long long resident_budget = 0;
    int warm_up = 0;
    unsigned int split_index = 0, split_count = 1;
    const char *root = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "s|IOKKOiiKKKKIIIppipiIIKpiKIiIKiIIz", kwlist, &path, &batch, &fields,
            &window, &stride, &valid_field, &valid, &order, &seed, &epoch, &bb, &bs,
            &block_group, &rank, &world, &pad, &drop_last, &backend, &direct, &threads,
            &prefetch, &qd, &budget, &verify, &on_error, &max_skips, &max_open, &device,
            &gpu_slots, &resident_budget, &warm_up, &split_index, &split_count, &root))
        return -1;
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.root = root;
    o.split_index = split_index;
    o.split_count = split_count;
    o.max_open_files = max_open;
    o.warm_up = (stk_warm_up)warm_up;
    o.batch_size = batch;
    o.window = window;
    o.stride = stride;
    o.valid = (stk_valid)valid;
    o.order = (stk_order)order;
    o.seed = seed;
    o.epoch = epoch;
    o.block_bytes = bb;
    o.block_samples = bs;
    o.block_group = block_group;
    o.rank = rank;
    o.world_size = world;
    o.pad = pad;
    o.drop_last = drop_last;
    o.backend = (stk_backend)backend;
    o.direct = direct;
    o.threads = threads;
    o.prefetch = prefetch;
    o.queue_depth = qd;
    o.memory_budget = budget;
    o.verify = verify;
    o.on_error = (stk_on_error)on_error;
    o.max_skips = max_skips;
    o.valid_field = str_or_null(valid_field);
    const char *names[256];
    if (fields != Py_None) {
        PyObject *seq = PySequence_Fast(fields, "fields must be a sequence of names");
        if (!seq) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > 256) {
            Py_DECREF(seq);
            PyErr_SetString(InvalidArgument, "fields: at most 256");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyUnicode_Check(it)) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_TypeError, "fields: every entry must be a str");
                return -1;
            }
            names[i] = PyUnicode_AsUTF8(it);
        }
        o.fields = names;
        o.nfields = (size_t)n;
        Py_DECREF(seq); /* the strings stay alive: `fields` holds them */
    }
    stk_error err = {0};
    int rc;
    stk_dataset *ds = NULL;
    stk_loader *ld = NULL;
    stk_gpu *gpu = NULL;
    stk_gpu_options go;
    stk_gpu_options_init(&go);
    go.device = device;
    go.slots = gpu_slots;
    go.resident_budget = resident_budget;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_open_with(path, &oo, &ds, &err);
    if (rc == 0) {
        if (device >= 0) {
            rc = stk_gpu_open(ds, &o, &go, &gpu, &err);
            if (rc == 0) ld = stk_gpu_loader(gpu);
        } else {
            rc = stk_loader_open(ds, &o, &ld, &err);
        }
        if (rc) {
            stk_dataset_close(ds);
            ds = NULL;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_stk(rc, &err);
        return -1;
    }
    self->ds = ds;
    self->ld = ld;
    self->gpu = gpu;
    self->pid = getpid();
    size_t nf = stk_loader_num_fields(ld);
    self->names = PyTuple_New((Py_ssize_t)nf);
    if (!self->names) return -1;
    for (size_t i = 0; i < nf; i++)
        PyTuple_SET_ITEM(self->names, (Py_ssize_t)i,
                         PyUnicode_FromString(stk_loader_field(ld, i)->name));
    return 0;
}

static void loader_dealloc(LoaderObject *self) {
    loader_teardown(self);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Waits for the next batch with the GIL released, in slices, so that
 * signals (Ctrl-C) are seen.  Returns the batch, NULL with StopIteration
 * semantics (no exception) at the end of the epoch, or NULL with an
 * exception. */
static PyObject *gpu_next_batch(LoaderObject *self);

/* A Batch of `self`, owning nothing yet. */
static BatchObject *batch_new(LoaderObject *self) {
    BatchObject *bo = PyObject_New(BatchObject, &BatchType);
    if (!bo) return NULL;
    Py_INCREF(self);
    bo->loader = self;
    bo->b = NULL;
    bo->gb = NULL;
    bo->stream = 0;
    bo->streamed = 0;
    self->live++;
    return bo;
}

/* (dict of Array per field, plus NAME_offsets for ragged ones; the sample
 * ids as an Array), every Array holding `bo`.  The fields' memory is on
 * device (dev_type, dev_id); the ids are always in host memory.  Consumes
 * the caller's reference to bo. */
static PyObject *batch_result(BatchObject *bo, const stk_batch_field *f, size_t nf, uint32_t n,
                              const uint64_t *samples, int dev_type, int dev_id) {
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < nf; i++) {
        ArrayObject *a = array_new(bo, f[i].data, f[i].dtype, f[i].ndim, f[i].shape);
        if (a) {
            a->dev_type = dev_type;
            a->dev_id = dev_id;
        }
        if (!a || PyDict_SetItemString(d, f[i].name, (PyObject *)a)) {
            Py_XDECREF(a);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(a);
        if (f[i].offsets) {
            int64_t n1 = (int64_t)n + 1;
            ArrayObject *o = array_new(bo, (void *)f[i].offsets, STK_I64, 1, &n1);
            char key[STK_NAME_MAX + 16];
            snprintf(key, sizeof key, "%s_offsets", f[i].name);
            if (o) {
                o->dev_type = dev_type;
                o->dev_id = dev_id;
            }
            if (!o || PyDict_SetItemString(d, key, (PyObject *)o)) {
                Py_XDECREF(o);
                Py_CLEAR(d);
                break;
            }
            Py_DECREF(o);
        }
    }
    PyObject *t = NULL;
    if (d) {
        int64_t nn = n;
        ArrayObject *ids = array_new(bo, (void *)samples, STK_U64, 1, &nn);
        t = ids ? Py_BuildValue("(NN)", d, ids) : NULL;
        if (!ids) Py_DECREF(d);
    }
    Py_DECREF(bo);
    return t;
}

static PyObject *loader_next_batch(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    if (self->gpu) return gpu_next_batch(self);
    stk_batch *b = NULL;
    stk_error err = {0};
    int rc;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_next_timeout(self->ld, &b, 100, &err);
        Py_END_ALLOW_THREADS
        if (rc == -EBUSY) {
            /* The caller keeps every batch it was given; that is allowed
             * (arrays are views that must stay valid), so the ring grows. */
            int r2;
            Py_BEGIN_ALLOW_THREADS
            r2 = stk_loader_add_buffer(self->ld, &err);
            Py_END_ALLOW_THREADS
            if (r2) return raise_stk(r2, &err);
            continue;
        }
        if (rc != -ETIMEDOUT) break;
        if (PyErr_CheckSignals()) return NULL;
    }
    if (rc == STK_END) Py_RETURN_NONE;
    if (rc) return raise_stk(rc, &err);
    BatchObject *bo = batch_new(self);
    if (!bo) {
        stk_loader_release(self->ld, b);
        return NULL;
    }
    bo->b = b;
    self->last = bo;
    size_t nf = stk_loader_num_fields(self->ld);
    stk_batch_field *f = PyMem_Calloc(nf ? nf : 1, sizeof *f);
    if (!f) {
        Py_DECREF(bo);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < nf; i++) stk_batch_field_get(b, i, &f[i]);
    PyObject *r = batch_result(bo, f, nf, stk_batch_size(b), stk_batch_samples(b), kDLCPU, 0);
    PyMem_Free(f);
    return r;
}

/* The device path: batches from the GPU stage, fields in device memory, the
 * sample ids in host memory. */
static PyObject *gpu_next_batch(LoaderObject *self) {
    stk_gpu_batch *b = NULL;
    stk_error err = {0};
    int rc;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        rc = stk_gpu_next_timeout(self->gpu, &b, 100, &err);
        Py_END_ALLOW_THREADS
        if (rc != -ETIMEDOUT) break;
        if (PyErr_CheckSignals()) return NULL;
    }
    if (rc == STK_END) Py_RETURN_NONE;
    if (rc) return raise_stk(rc, &err); /* -EBUSY too: device buffers cannot grow */
    BatchObject *bo = batch_new(self);
    if (!bo) {
        stk_gpu_release(self->gpu, b, UINTPTR_MAX);
        return NULL;
    }
    bo->gb = b;
    size_t nf = stk_loader_num_fields(self->ld);
    stk_batch_field *f = PyMem_Calloc(nf ? nf : 1, sizeof *f);
    if (!f) {
        Py_DECREF(bo);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < nf; i++) stk_gpu_batch_field(b, i, &f[i]);
    PyObject *r = batch_result(bo, f, nf, stk_gpu_batch_size(b), stk_gpu_batch_samples(b),
                               kDLCUDA, stk_gpu_device(self->gpu));
    PyMem_Free(f);
    return r;
}

static PyObject *loader_set_epoch(LoaderObject *self, PyObject *arg) {
    if (check_process(self)) return NULL;
    unsigned long long e = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = self->gpu ? stk_gpu_set_epoch(self->gpu, e, &err) : stk_loader_set_epoch(self->ld, e, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *loader_save(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_state st;
    if (self->gpu) stk_gpu_save(self->gpu, &st);
    else stk_loader_save(self->ld, &st);
    return Py_BuildValue("{sKsKsKsK}", "seed", st.seed, "epoch", st.epoch, "position",
                         st.position, "fingerprint", st.fingerprint);
}

static PyObject *loader_restore(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    stk_loader_state st;
    unsigned long long a, b, c, d;
    if (!PyArg_ParseTuple(args, "KKKK", &a, &b, &c, &d)) return NULL;
    st.seed = a;
    st.epoch = b;
    st.position = c;
    st.fingerprint = d;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = self->gpu ? stk_gpu_restore(self->gpu, &st, &err) : stk_loader_restore(self->ld, &st, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *stage(const stk_stage_stats *s) {
    return Py_BuildValue("{sKsKsd}", "count", s->count, "bytes", s->bytes, "seconds",
                         (double)s->busy_ns / 1e9);
}

static PyObject *loader_stats(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_stats s;
    stk_loader_stats_get(self->ld, &s);
    return Py_BuildValue(
        "{sNsNsNsNsNsKsKsdsdsIsIsKsKsssKsNsKsO}", "plan", stage(&s.plan), "io", stage(&s.io), "assemble",
        stage(&s.assemble), "wait", stage(&s.wait), "verify", stage(&s.verify), "batches", s.batches, "samples", s.samples,
        "elapsed", (double)s.elapsed_ns / 1e9, "ready_mean",
        s.wait.count ? (double)s.ready_sum / (double)s.wait.count : 0.0, "ring_slots",
        s.ring_slots, "threads", s.threads, "groups_loaded", s.groups_loaded, "max_inflight",
        s.max_inflight, "backend", stk_backend_name(stk_loader_backend(self->ld)), "skipped",
        s.skipped, "warm_up", stage(&s.warm_up), "warm_up_bytes", s.warm_up_bytes, "warm_up_done",
        s.warm_up_done ? Py_True : Py_False);
}

static PyObject *loader_last_skip(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_error e = {0};
    uint64_t n = stk_loader_last_skip(self->ld, &e);
    return Py_BuildValue("(Ks)", (unsigned long long)n, n ? e.message : "");
}

static PyObject *loader_stats_reset(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_stats_reset(self->ld);
    Py_RETURN_NONE;
}

/* unget_last(): puts back the last batch given (an interrupt came before
 * the caller could have it); its old arrays are detached from the buffer's
 * ownership, which the batch's next delivery takes.  True when put back. */
static PyObject *loader_unget_last(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    BatchObject *bo = self->last;
    if (!bo || !bo->b || self->gpu) Py_RETURN_FALSE;
    if (stk_loader_unget(self->ld, bo->b) != 0) Py_RETURN_FALSE;
    bo->b = NULL;
    self->last = NULL;
    Py_RETURN_TRUE;
}

static PyObject *loader_close(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (self->pid != getpid()) {
        /* A forked child owns none of the parent's threads: forget them. */
        self->ld = NULL;
        self->gpu = NULL;
        self->ds = NULL;
        Py_RETURN_NONE;
    }
    if (self->live) {
        /* Batches still alive: the threads stop and every buffer not held
         * goes back now; the rest when the last batch goes. */
        self->closing = 1;
        if (self->ld && !self->gpu) {
            Py_BEGIN_ALLOW_THREADS
            stk_loader_stop(self->ld);
            Py_END_ALLOW_THREADS
        }
    } else {
        loader_teardown(self);
    }
    Py_RETURN_NONE;
}

static PyObject *loader_counts(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    return Py_BuildValue("{sKsKsKsssisisK}", "epoch_samples", stk_loader_epoch_samples(self->ld),
                         "rank_samples", stk_loader_rank_samples(self->ld), "rank_batches",
                         stk_loader_rank_batches(self->ld), "backend",
                         stk_backend_name(stk_loader_backend(self->ld)), "device",
                         self->gpu ? stk_gpu_device(self->gpu) : -1, "resident",
                         self->gpu ? stk_gpu_resident(self->gpu) : 0, "resident_bytes",
                         (unsigned long long)(self->gpu ? stk_gpu_resident_bytes(self->gpu) : 0));
}

static PyObject *loader_closed(LoaderObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->ld == NULL || self->closing);
}
static PyObject *loader_names(LoaderObject *self, void *c) {
    (void)c;
    Py_INCREF(self->names);
    return self->names;
}

/* ---- tracing and diagnosis ---- */

static PyObject *loader_trace_start(LoaderObject *self, PyObject *arg) {
    if (check_process(self)) return NULL;
    unsigned long n = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) return NULL;
    if (n > UINT32_MAX) {
        PyErr_SetString(InvalidArgument, "max_spans must be below 2**32");
        return NULL;
    }
    stk_error err = {0};
    int rc = stk_loader_trace_start(self->ld, (uint32_t)n, &err);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *loader_trace_stop(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_trace_stop(self->ld);
    Py_RETURN_NONE;
}

static PyObject *loader_trace_span(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    const char *name;
    unsigned long long t0, t1;
    if (!PyArg_ParseTuple(args, "sKK", &name, &t0, &t1)) return NULL;
    if (stk_loader_trace_span(self->ld, name, t0, t1)) {
        PyErr_SetString(InvalidArgument, "trace_span: the span ends before it begins");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *loader_trace_write(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_trace_write(self->ld, path, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

/* measure_limit() -> (bytes/s, what it is, share of the data in the page
 * cache or -1): memcpy when the data is in memory, else the device's
 * sequential reads when slower than that. */
static PyObject *loader_measure_limit(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    double limit, rd = 0, resident;
    const char *name = "memcpy, one thread";
    int rc = 0;
    stk_error err = {0};
    Py_BEGIN_ALLOW_THREADS
    limit = stk_measure_memcpy();
    resident = stk_dataset_resident(self->ds);
    if (resident < 0.9) rc = stk_measure_read(self->ds, 1.0, &rd, &err);
    Py_END_ALLOW_THREADS
    if (rc == 0 && rd > 0 && rd < limit) {
        limit = rd;
        name = "device, O_DIRECT sequential reads";
    }
    return Py_BuildValue("(dsd)", limit, name, resident);
}

/* diagnose(bytes, seconds, limit, with_step) -> dict, from the loader's
 * stats now (stk_diagnose). */
static PyObject *loader_diagnose(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    unsigned long long bytes;
    double seconds, limit;
    int with_step;
    if (!PyArg_ParseTuple(args, "Kddp", &bytes, &seconds, &limit, &with_step)) return NULL;
    stk_loader_stats st;
    stk_loader_stats_get(self->ld, &st);
    stk_diagnosis d;
    stk_diagnose(&st, stk_loader_backend(self->ld), bytes, seconds, limit, with_step, &d);
    return Py_BuildValue(
        "{sdsdsdsdsdsdsdsdsdsdsdsdsssssIss}", "seconds", d.seconds, "batches_per_s",
        d.batches_per_s, "samples_per_s", d.samples_per_s, "bytes_per_s", d.bytes_per_s,
        "plan", d.share_plan, "io", d.share_io, "assemble", d.share_assemble, "verify",
        d.share_verify, "idle", d.share_idle, "stall", d.stall, "limit_bytes_per_s",
        d.limit_bytes_per_s, "of_limit", d.of_limit, "verdict", d.verdict_name, "next", d.next,
        "threads", st.threads, "backend", stk_backend_name(stk_loader_backend(self->ld)));
}

static PyMethodDef loader_methods[] = {
    {"trace_start", (PyCFunction)loader_trace_start, METH_O,
     "trace_start(max_spans): records spans per thread (0: 65536 each)."},
    {"trace_stop", (PyCFunction)loader_trace_stop, METH_NOARGS, "Stops recording spans."},
    {"trace_span", (PyCFunction)loader_trace_span, METH_VARARGS,
     "trace_span(name, t0_ns, t1_ns): a span on the consumer's thread (time.monotonic_ns)."},
    {"trace_write", (PyCFunction)loader_trace_write, METH_VARARGS,
     "trace_write(path): writes the spans as a Chrome trace (JSON)."},
    {"measure_limit", (PyCFunction)loader_measure_limit, METH_NOARGS,
     "(bytes/s, what it is, share in the page cache): the limit for this data."},
    {"diagnose", (PyCFunction)loader_diagnose, METH_VARARGS,
     "diagnose(bytes, seconds, limit, with_step) -> dict (stk_diagnose)."},
    {"next_batch", (PyCFunction)loader_next_batch, METH_NOARGS,
     "Waits for the next batch: (dict of Array, sample ids), or None at the end of the epoch."},
    {"set_epoch", (PyCFunction)loader_set_epoch, METH_O, "Starts an epoch from its beginning."},
    {"save", (PyCFunction)loader_save, METH_NOARGS, "The resume state as a dict."},
    {"restore", (PyCFunction)loader_restore, METH_VARARGS,
     "restore(seed, epoch, position, fingerprint)"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "Per-stage counters."},
    {"stats_reset", (PyCFunction)loader_stats_reset, METH_NOARGS, "Zeroes the counters."},
    {"last_skip", (PyCFunction)loader_last_skip, METH_NOARGS,
     "(samples replaced so far, reason for the last one) under on_error='skip'."},
    {"counts", (PyCFunction)loader_counts, METH_NOARGS, "Sample and batch counts."},
    {"unget_last", (PyCFunction)loader_unget_last, METH_NOARGS,
     "unget_last(): puts back the last batch given, undelivered"},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "Stops the threads; memory still referenced by batches is freed with them."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef loader_getset[] = {
    {"closed", (getter)loader_closed, NULL, "whether close() was called", NULL},
    {"field_names", (getter)loader_names, NULL, "the fields each batch holds", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C loader; use stoker.Loader.",
    .tp_init = (initproc)loader_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
};

/* ---- Writer ---- */

typedef struct {
    PyObject_HEAD
    stk_writer *w;
    size_t nfields;
    uint64_t records;           /* appended so far, for messages */
    uint64_t row_bytes[256];    /* bytes of one row of each field */
    char names[256][STK_NAME_MAX];
} WriterObject;

static int writer_init(WriterObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "fields", "shard_bytes", "align", "overwrite", "sync",
                             "attrs", "part_index", "part_count", NULL};
    const char *path, *attrs = NULL;
    PyObject *fields;
    unsigned long long shard_bytes = 256ull << 20;
    unsigned int align = 64, part_index = 0, part_count = 1;
    int overwrite = 0, sync = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|KIppzII", kwlist, &path, &fields,
                                     &shard_bytes, &align, &overwrite, &sync, &attrs,
                                     &part_index, &part_count))
        return -1;
    /* fields: sequence of (name, dtype name, shape tuple with -1 for ragged,
     * codec name, level). */
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    stk_field f[256];
    if (n < 1 || n > 256) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "a dataset has 1 to 256 fields");
        return -1;
    }
    memset(f, 0, sizeof f);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name, *dtype, *codec;
        PyObject *shape;
        int level;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ssOsi", &name, &dtype, &shape,
                              &codec, &level)) {
            Py_DECREF(seq);
            return -1;
        }
        int d = stk_dtype_parse(dtype);
        if (d < 0) {
            Py_DECREF(seq);
            PyErr_Format(InvalidArgument, "field '%s': unknown dtype '%s'", name, dtype);
            return -1;
        }
        f[i].name = name;
        f[i].dtype = (stk_dtype)d;
        f[i].codec = strcmp(codec, "zstd") == 0 ? STK_CODEC_ZSTD : STK_CODEC_NONE;
        f[i].codec_level = level;
        PyObject *ss = PySequence_Fast(shape, "shape must be a sequence");
        if (!ss) {
            Py_DECREF(seq);
            return -1;
        }
        f[i].ndim = (int)PySequence_Fast_GET_SIZE(ss);
        for (int k = 0; k < f[i].ndim && k < STK_MAX_DIMS; k++)
            f[i].shape[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ss, k));
        Py_DECREF(ss);
    }
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = shard_bytes;
    o.align = align;
    o.overwrite = overwrite;
    o.sync = sync;
    o.attrs_json = attrs;
    o.part_index = part_index;
    o.part_count = part_count;
    stk_error err = {0};
    int rc = stk_writer_create(path, f, (size_t)n, &o, &self->w, &err);
    Py_DECREF(seq);
    if (rc) {
        raise_stk(rc, &err);
        return -1;
    }
    self->nfields = (size_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t rb = stk_dtype_size(f[i].dtype);
        for (int k = 1; k < f[i].ndim; k++) rb *= (uint64_t)f[i].shape[k];
        self->row_bytes[i] = rb;
        snprintf(self->names[i], sizeof self->names[i], "%s", f[i].name);
    }
    return 0;
}

/* append(values): values is a sequence of (buffer, rows), one per field. */
static PyObject *writer_append(WriterObject *self, PyObject *values) {
    if (!self->w) {
        PyErr_SetString(InvalidArgument, "the writer is closed");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(values, "values must be a sequence");
    if (!seq) return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->nfields) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "append: one value per field is needed");
        return NULL;
    }
    Py_buffer views[256];
    stk_value v[256];
    size_t got = 0;
    PyObject *ret = NULL;
    for (; got < self->nfields; got++) {
        PyObject *buf;
        unsigned long long rows;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)got), "OK", &buf, &rows))
            goto out;
        if (PyObject_GetBuffer(buf, &views[got], PyBUF_C_CONTIGUOUS) != 0) goto out;
        v[got].data = views[got].buf;
        v[got].rows = rows;
        /* The writer reads rows * row_bytes bytes: the value must hold
         * exactly that many, or the record would read past it or drop some. */
        uint64_t need = 0;
        if (__builtin_mul_overflow((uint64_t)rows, self->row_bytes[got], &need) ||
            (uint64_t)views[got].len != need) {
            PyErr_Format(InvalidArgument,
                         "record %llu: field '%s': %llu rows of %llu bytes are %llu bytes, but "
                         "the value holds %lld",
                         (unsigned long long)self->records, self->names[got], rows,
                         (unsigned long long)self->row_bytes[got], (unsigned long long)need,
                         (long long)views[got].len);
            got++;
            goto out;
        }
    }
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_append(self->w, v, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_stk(rc, &err);
    } else {
        ret = Py_NewRef(Py_None);
        self->records++;
    }
out:
    for (size_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    Py_DECREF(seq);
    return ret;
}

static PyObject *writer_finish(WriterObject *self, PyObject *unused) {
    (void)unused;
    if (!self->w) {
        PyErr_SetString(InvalidArgument, "the writer is closed");
        return NULL;
    }
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_finish(self->w, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    unsigned long long n = stk_writer_num_records(self->w);
    stk_writer_free(self->w);
    self->w = NULL;
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *writer_abort(WriterObject *self, PyObject *unused) {
    (void)unused;
    stk_writer_free(self->w);
    self->w = NULL;
    Py_RETURN_NONE;
}

static void writer_dealloc(WriterObject *self) {
    stk_writer_free(self->w);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)writer_append, METH_O, "append([(buffer, rows), ...])"},
    {"finish", (PyCFunction)writer_finish, METH_NOARGS, "Publishes the dataset."},
    {"abort", (PyCFunction)writer_abort, METH_NOARGS, "Gives up; the dataset stays incomplete."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Writer",
    .tp_basicsize = sizeof(WriterObject),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C writer; use stoker.write.",
    .tp_init = (initproc)writer_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = writer_methods,
};

/* ---- Arrow ---- */

/* write_arrow(path, stream_capsule, group_by, order_by, fields, shard_bytes,
 * align, overwrite, sync, attrs, statics): fields is None or a list of
 * (name, [columns], codec, level); statics None (found from the data) or a
 * list of field names (empty: none). */
static PyObject *py_write_arrow(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path, *group_by = NULL, *order_by = NULL, *attrs = NULL;
    PyObject *cap, *fields, *statics = Py_None;
    unsigned long long shard_bytes;
    unsigned int align;
    int overwrite, sync;
    if (!PyArg_ParseTuple(args, "sOzzOKIppz|O", &path, &cap, &group_by, &order_by, &fields,
                          &shard_bytes, &align, &overwrite, &sync, &attrs, &statics))
        return NULL;
    const char *static_names[256];
    size_t nstatics = 0;
    if (statics != Py_None) {
        Py_ssize_t n = PySequence_Size(statics);
        if (n < 0) return NULL;
        if (n > 256) {
            PyErr_SetString(InvalidArgument, "at most 256 statics");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *it = PySequence_GetItem(statics, k);
            static_names[k] = it ? PyUnicode_AsUTF8(it) : NULL;
            Py_XDECREF(it); /* the list keeps the string alive */
            if (!static_names[k]) return NULL;
        }
        nstatics = (size_t)n;
    }
    struct ArrowArrayStream *stream = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!stream) return NULL;
    stk_arrow_options o;
    stk_arrow_options_init(&o);
    o.group_by = group_by;
    o.order_by = order_by;
    o.writer.shard_bytes = shard_bytes;
    o.writer.align = align;
    o.writer.overwrite = overwrite;
    o.writer.sync = sync;
    o.writer.attrs_json = attrs;
    if (statics != Py_None) {
        o.statics = static_names;
        o.nstatics = nstatics;
        o.no_statics = nstatics == 0;
    }
    stk_arrow_field af[256];
    const char *colnames[256][64];
    PyObject *seq = NULL;
    if (fields != Py_None) {
        seq = PySequence_Fast(fields, "fields must be a list");
        if (!seq) return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > 256) {
            Py_DECREF(seq);
            PyErr_SetString(InvalidArgument, "at most 256 fields");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *name, *codec;
            PyObject *cols;
            int level;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sOsi", &name, &cols, &codec,
                                  &level)) {
                Py_DECREF(seq);
                return NULL;
            }
            Py_ssize_t nc = PySequence_Size(cols);
            if (nc < 1 || nc > 64) {
                Py_DECREF(seq);
                PyErr_Format(InvalidArgument, "field '%s': 1 to 64 columns", name);
                return NULL;
            }
            for (Py_ssize_t k = 0; k < nc; k++) {
                PyObject *it = PySequence_GetItem(cols, k);
                colnames[i][k] = it ? PyUnicode_AsUTF8(it) : NULL;
                Py_XDECREF(it); /* the list keeps the string alive */
                if (!colnames[i][k]) {
                    Py_DECREF(seq);
                    return NULL;
                }
            }
            af[i] = (stk_arrow_field){name, colnames[i], (size_t)nc,
                                      strcmp(codec, "zstd") == 0 ? STK_CODEC_ZSTD : STK_CODEC_NONE,
                                      level};
        }
        o.fields = af;
        o.nfields = (size_t)n;
    }
    stk_error err = {0};
    uint64_t records = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_write_arrow(path, stream, &o, &records, &err);
    Py_END_ALLOW_THREADS
    Py_XDECREF(seq);
    if (rc) return raise_stk(rc, &err);
    return PyLong_FromUnsignedLongLong(records);
}

static PyObject *py_index(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"paths", "output", "source", "split_axis0", "dataset",
                             "float32", "field", "extension", NULL};
    PyObject *paths;
    const char *out, *dataset = NULL, *field = NULL, *ext = NULL;
    int source = 0, split = 0, f32 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|ipzpzz", kwlist, &paths, &out, &source,
                                     &split, &dataset, &f32, &field, &ext))
        return NULL;
    PyObject *seq = PySequence_Fast(paths, "paths must be a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **v = PyMem_Calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!v[i]) {
            PyMem_Free(v);
            Py_DECREF(seq);
            return NULL;
        }
    }
    stk_index_options o;
    stk_index_options_init(&o);
    o.source = (stk_source)source;
    o.split_axis0 = split;
    o.hdf5_dataset = dataset;
    o.wav_float32 = f32;
    o.field = field;
    o.extension = ext;
    stk_error err = {0};
    uint64_t records = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_index_build(v, (size_t)n, out, &o, &records, &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    Py_DECREF(seq);
    if (rc) return raise_stk(rc, &err);
    return PyLong_FromUnsignedLongLong(records);
}

/* gpu_count() -> (devices, reason): reason is "" when there are devices,
 * else why none can be used. */
static PyObject *py_gpu_count(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    stk_error err = {0};
    int n = 0;
    int rc = stk_gpu_count(&n, &err);
    return Py_BuildValue("(is)", rc ? 0 : n, rc ? err.message : "");
}

static PyMethodDef module_methods[] = {
    {"gpu_count", py_gpu_count, METH_NOARGS,
     "gpu_count() -> (CUDA devices, why none when 0)."},
    {"index", (PyCFunction)(void (*)(void))py_index, METH_VARARGS | METH_KEYWORDS,
     "Indexes files in place (see stoker.index); returns the record count."},
    {"write_arrow", py_write_arrow, METH_VARARGS,
     "Packs an Arrow C stream (capsule) into a dataset; returns the record count."},
    {NULL, NULL, 0, NULL}};

/* ---- module ---- */

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stoker", "The C core of stoker.",
                                    -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__stoker(void) {
    if (PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 ||
        PyType_Ready(&ArrayType) < 0 || PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *errors = PyImport_ImportModule("stoker._errors");
    if (!errors) {
        Py_DECREF(m);
        return NULL;
    }
    StokerError = PyObject_GetAttrString(errors, "StokerError");
    InvalidArgument = PyObject_GetAttrString(errors, "InvalidArgument");
    NotFound = PyObject_GetAttrString(errors, "NotFound");
    OutOfMemory = PyObject_GetAttrString(errors, "OutOfMemory");
    Py_DECREF(errors);
    if (!StokerError || !InvalidArgument || !NotFound || !OutOfMemory) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(StokerError);
    PyModule_AddObject(m, "StokerError", StokerError);
    Py_INCREF(&LoaderType);
    PyModule_AddObject(m, "Loader", (PyObject *)&LoaderType);
    Py_INCREF(&WriterType);
    PyModule_AddObject(m, "Writer", (PyObject *)&WriterType);
    Py_INCREF(&ArrayType);
    PyModule_AddObject(m, "Array", (PyObject *)&ArrayType);
    PyModule_AddStringConstant(m, "version", stk_version());
    return m;
}
