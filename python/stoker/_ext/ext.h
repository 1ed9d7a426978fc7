/*
 * ext.h: what the files of the CPython extension (stoker._stoker) share:
 * the objects' layouts, the type objects, the exceptions and the helpers
 * that map a libstoker error onto them, and each file's entry points.
 * The extension uses only the public C API (stoker.h), and of CPython only
 * the limited API of 3.11, so that one build (_stoker.abi3.so) serves every
 * CPython from 3.11 on (CMakeLists.txt defines Py_LIMITED_API).
 *
 *   module.c   module init, the exception hierarchy, gpu_count()
 *   loader.c   the Loader type: open, batches, epochs, state, close
 *   options.c  the Loader's arguments as stk_loader_options; count()
 *   stats.c    the Loader's counters, tracing and diagnosis
 *   batch.c    the Batch type: owner of one batch buffer
 *   array.c    the Array type: one field of a batch, buffer protocol
 *   dlpack.c   DLPack export of an Array
 *   writer.c   the Writer type, write_arrow() and index()
 *   fieldstats.c  field_stats(): the statistics gathered at pack time
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
#ifndef STOKER_EXT_H
#define STOKER_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stoker.h"

#include <stdint.h>
#include <sys/types.h>

/* Nothing shared between the files is exported from the module's shared
 * object; only PyInit__stoker is (PyMODINIT_FUNC says so itself). */
#pragma GCC visibility push(hidden)

/* DLPack device types (dlpack.h's DLDeviceType) an Array's data lives on. */
enum { kDLCPU = 1, kDLCUDA = 2 };

/* ---- exceptions (module.c) ---- */

/* The hierarchy of stoker/_errors.py: StokerError, and its kinds that are
 * also ValueError, FileNotFoundError, PermissionError and MemoryError.  Set
 * at module init. */
extern PyObject *StokerError, *InvalidArgument, *NotFound, *AccessDenied, *OutOfMemory;

/* Raises the exception for libstoker error `rc` with the message of `e`
 * (stk_strerror(rc) when it has none): InvalidArgument for -EINVAL,
 * OutOfMemory for -ENOMEM, NotFound for -ENOENT, AccessDenied for -EACCES,
 * else StokerError; args are (rc, message).  Returns NULL, for `return raise_stk(rc, &err);`. */
PyObject *raise_stk(int rc, const stk_error *e);

/* ---- objects ---- */

typedef struct BatchObject_ BatchObject;

typedef struct {
    PyObject_HEAD
    stk_dataset *ds;
    stk_loader *ld;
    int device;        /* -1: batches in host memory; else the CUDA ordinal */
    pid_t pid;
    Py_ssize_t live;   /* Batch objects alive */
    int closing;       /* close() called while batches were alive */
    BatchObject *last; /* the last batch given (borrowed; cleared when it
                        * goes), for unget_last() */
    int pending;       /* last was returned by next_batch() but Python's
                        * Loader does not hold it yet (it sets pending =
                        * False once it does): put back, not released,
                        * when it goes (an interrupt dropped it) */
    /* One call at a time uses ld without the GIL (next's wait, set_epoch,
     * restore, fetch_epoch); others wait for it (enter_c/leave_c in
     * loader.c).  close() from another thread asks it to stop (stop_req:
     * next() gives up its wait within a slice) and closes once it is out;
     * close() from the busy thread itself (a signal handler run during
     * next()'s wait) is left to it (close_deferred). */
    int busy;
    unsigned long busy_thread;
    int stop_req;
    int close_deferred;
    PyObject *names;   /* tuple of field names */
    stk_dataset **mix_ds; /* a mixture's sources (ds is NULL then) */
    size_t nmix;
} LoaderObject;

struct BatchObject_ {
    PyObject_HEAD
    LoaderObject *loader;
    stk_batch *b;          /* NULL once put back */
    uintptr_t stream;      /* a device batch: the last CUDA stream a consumer
                            * used it on */
    int streamed;
};

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

/* The types are heap types, made at module init (module.c) from the specs
 * of their files: the stable ABI has no static type objects.  Each instance
 * holds a reference to its type, which its tp_dealloc drops. */
extern PyTypeObject *LoaderType, *BatchType, *ArrayType, *WriterType, *MixType;
extern PyType_Spec LoaderSpec, BatchSpec, ArraySpec, WriterSpec, MixSpec;

/* Frees `self` through its type's tp_free and drops the reference the
 * instance held to its (heap) type: the end of every tp_dealloc here. */
static inline void free_instance(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF((PyObject *)tp);
}

/* The length and item `i` (borrowed) of what PySequence_Fast returned, a
 * list or a tuple: the stable ABI has no PySequence_Fast_GET_* macros. */
static inline Py_ssize_t fast_size(PyObject *seq) {
    return PyList_Check(seq) ? PyList_Size(seq) : PyTuple_Size(seq);
}
static inline PyObject *fast_item(PyObject *seq, Py_ssize_t i) {
    return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
}

/* ---- loader.c ---- */

/* open_mixture(...): a Loader over several sources (see loader.c). */
PyObject *py_open_mixture(PyObject *mod, PyObject *args);

/* Closes the C loader and the dataset, in the process that opened them (a
 * forked child only forgets them). */
void loader_teardown(LoaderObject *self);
/* 0 when the loader may be used here and now, else -1 with an exception:
 * RuntimeError in a process other than the one that opened it,
 * InvalidArgument once closed. */
int check_process(LoaderObject *self);
/* A call into the loader's consumer-side C functions from any Python
 * thread: enter_c waits while another thread is in one (next's wait with
 * the GIL released), 0 or -1 with an exception; leave_c after it. */
int enter_c(LoaderObject *self);
void leave_c(LoaderObject *self);

/* ---- options.c ---- */

/* A Loader's arguments, turned into libstoker's options.  Borrowed strings
 * stay valid while the argument tuple that gave them lives. */
typedef struct {
    const char *path;
    stk_open_options open;
    stk_loader_options lo;
    const char *field_names[256];  /* lo.fields points here */
    stk_valid_rule rules[64];      /* lo.valid_rules points here */
    stk_decode decodes[64];        /* lo.decode points here */
} loader_config;

/* ---- media.c ---- */

/* A decode spec tuple (see media.c) as `d`; its field name is borrowed
 * from the tuple.  Returns 0, or -1 with an exception set. */
int decode_spec_parse(PyObject *t, stk_decode *d);
PyObject *py_decode_one(PyObject *mod, PyObject *args);
PyObject *py_decode_box(PyObject *mod, PyObject *args);
PyObject *py_decode_key(PyObject *mod, PyObject *args);
PyObject *py_media_probe(PyObject *mod, PyObject *args);
PyObject *py_media_formats(PyObject *mod, PyObject *unused);

/* Parses Loader(path, batch_size, fields, window, ...) (see options.c for
 * the order) into `c`.  Returns 0, or -1 with an exception set. */
int loader_config_parse(PyObject *args, PyObject *kw, loader_config *c);
/* count(): the arguments of Loader(); see options.c. */
PyObject *py_loader_count(PyObject *mod, PyObject *args, PyObject *kw);

/* ---- stats.c: methods of Loader ---- */

PyObject *loader_stats(LoaderObject *self, PyObject *unused);
PyObject *loader_stats_reset(LoaderObject *self, PyObject *unused);
PyObject *loader_last_skip(LoaderObject *self, PyObject *unused);
PyObject *loader_trace_start(LoaderObject *self, PyObject *arg);
PyObject *loader_trace_stop(LoaderObject *self, PyObject *unused);
PyObject *loader_trace_span(LoaderObject *self, PyObject *args);
PyObject *loader_trace_write(LoaderObject *self, PyObject *args);
PyObject *loader_measure_limit(LoaderObject *self, PyObject *unused);
PyObject *loader_diagnose(LoaderObject *self, PyObject *args);
PyObject *loader_series_start(LoaderObject *self, PyObject *args);
PyObject *loader_series(LoaderObject *self, PyObject *unused);
PyObject *loader_series_stop(LoaderObject *self, PyObject *unused);
/* report_html(path, report dict): the page of stk_report_write_html. */
PyObject *py_report_html(PyObject *mod, PyObject *args);

/* ---- batch.c ---- */

/* A Batch of `loader`, owning no buffer yet (set b or gb).  NULL with an
 * exception when out of memory. */
BatchObject *batch_new(LoaderObject *loader);
/* (dict of Array per field, plus NAME_offsets for ragged ones; the sample
 * ids as an Array), every Array holding `bo`.  The fields' memory is on
 * device (dev_type, dev_id); the ids are always in host memory.  Consumes
 * the caller's reference to bo. */
PyObject *batch_result(BatchObject *bo, const stk_batch_field *f, size_t nf, uint32_t n,
                       const uint32_t *sources,
                       const uint64_t *samples, int dev_type, int dev_id);

/* ---- array.c and dlpack.c ---- */

/* A C-contiguous Array over `data` in host memory, holding `batch`. */
ArrayObject *array_new(BatchObject *batch, void *data, stk_dtype dtype, int ndim,
                       const int64_t *shape);
/* __dlpack__(*, stream, max_version, dl_device, copy) and
 * __dlpack_device__() of an Array. */
PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw);
PyObject *array_dlpack_device(ArrayObject *self, PyObject *unused);

/* ---- writer.c: module functions ---- */

PyObject *py_write_arrow(PyObject *mod, PyObject *args);
PyObject *py_merge(PyObject *mod, PyObject *args);
PyObject *py_push_files(PyObject *mod, PyObject *args);
PyObject *py_index(PyObject *mod, PyObject *args, PyObject *kw);

/* ---- fieldstats.c ---- */

PyObject *py_field_stats(PyObject *mod, PyObject *args);

#pragma GCC visibility pop

#endif
