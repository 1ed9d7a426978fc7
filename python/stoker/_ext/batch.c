/*
 * batch.c: the Batch type, the owner of one batch buffer of a Loader (host
 * or device).  Every Array of the batch holds it; when the last goes, the
 * buffer goes back to the loader's ring, and a loader closed while batches
 * lived finishes its teardown with the last of them.  Also builds what
 * next_batch() returns: the batch's fields as Arrays.
 */
#include "ext.h"

#include <stdio.h>
#include <unistd.h>

BatchObject *batch_new(LoaderObject *loader) {
    BatchObject *bo = PyObject_New(BatchObject, BatchType);
    if (!bo) return NULL;
    Py_INCREF((PyObject *)loader);
    bo->loader = loader;
    bo->b = NULL;
    bo->stream = 0;
    bo->streamed = 0;
    loader->live++;
    return bo;
}

static void batch_dealloc(BatchObject *self) {
    LoaderObject *l = self->loader;
    if (l) {
        if (l->last == self) {
            /* Dropped before the Python Loader held it (an interrupt
             * between next_batch()'s return and the caller's store): put
             * back, so that the next call gives it and the state does not
             * count it as delivered. */
            if (l->pending && l->ld && !l->closing && self->b && l->device < 0 &&
                l->pid == getpid() && stk_loader_unget(l->ld, self->b) == 0)
                self->b = NULL;
            l->pending = 0;
            l->last = NULL;
        }
        if (l->ld && self->b && l->pid == getpid())
            /* A device batch is refilled only after the work queued on the
             * consumer's stream so far is done (or at once when no stream
             * was given). */
            stk_loader_release_after(l->ld, self->b,
                                     self->streamed ? self->stream : UINTPTR_MAX);
        l->live--;
        if (l->closing && l->live == 0) loader_teardown(l);
        Py_DECREF((PyObject *)l);
    }
    free_instance((PyObject *)self);
}

static PyObject *batch_index(BatchObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(stk_batch_index(self->b));
}

/* <stoker.Batch 3 of 256 samples cpu>; a batch put back (unget_last) owns
 * no buffer any more. */
static PyObject *batch_repr(BatchObject *self) {
    if (self->b)
        return PyUnicode_FromFormat("<stoker.Batch %llu of %u samples %s>",
                                    (unsigned long long)stk_batch_index(self->b),
                                    (unsigned)stk_batch_size(self->b),
                                    stk_batch_device(self->b) < 0 ? "cpu" : "cuda");
    return PyUnicode_FromString("<stoker.Batch put back>");
}

static PyGetSetDef batch_getset[] = {
    {"index", (getter)batch_index, NULL, "the batch's number within this rank's epoch", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject *BatchType;

/* Only the extension makes Batches (Batch() raises TypeError), and the
 * type's attributes cannot be set, nor the type subclassed. */
static PyType_Slot batch_slots[] = {
    {Py_tp_dealloc, (void *)batch_dealloc},
    {Py_tp_repr, (void *)batch_repr},
    {Py_tp_doc, (void *)"Owner of one batch buffer; released when no array points into it."},
    {Py_tp_getset, batch_getset},
    {0, NULL}};

PyType_Spec BatchSpec = {
    .name = "stoker._stoker.Batch",
    .basicsize = sizeof(BatchObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = batch_slots,
};

/* An Array of `bo` on device (dev_type, dev_id), stored in `d` under `key`.
 * Returns 0 or -1. */
static int put_array(PyObject *d, const char *key, BatchObject *bo, void *data, stk_dtype dtype,
                     int ndim, const int64_t *shape, int dev_type, int dev_id) {
    ArrayObject *a = array_new(bo, data, dtype, ndim, shape);
    if (!a) return -1;
    a->dev_type = dev_type;
    a->dev_id = dev_id;
    int rc = PyDict_SetItemString(d, key, (PyObject *)a);
    Py_DECREF((PyObject *)a);
    return rc;
}

PyObject *batch_result(BatchObject *bo, const stk_batch_field *f, size_t nf, uint32_t n,
                       const uint32_t *sources,
                       const uint64_t *samples, int dev_type, int dev_id) {
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < nf; i++) {
        if (put_array(d, f[i].name, bo, f[i].data, f[i].dtype, f[i].ndim, f[i].shape, dev_type,
                      dev_id)) {
            Py_CLEAR(d);
            break;
        }
        if (f[i].offsets) {
            int64_t n1 = (int64_t)n + 1;
            char key[STK_NAME_MAX + 16];
            snprintf(key, sizeof key, "%s_offsets", f[i].name);
            if (put_array(d, key, bo, (void *)f[i].offsets, STK_I64, 1, &n1, dev_type, dev_id)) {
                Py_CLEAR(d);
                break;
            }
        }
    }
    PyObject *t = NULL;
    if (d) {
        /* The sample ids as a copy (bytes): the loader keeps the last
         * batch's, and a view would hold the batch buffer after the caller
         * dropped the batch.  Copied here, 2 KiB for 256 samples, they
         * cost a memcpy rather than a NumPy array made every batch; the
         * Python side makes one only when they are asked for. */
        PyObject *ids = PyBytes_FromStringAndSize((const char *)samples,
                                                  (Py_ssize_t)n * (Py_ssize_t)sizeof *samples);
        /* A mixture's batch: each sample's source too, as int32 (which
         * torch handles everywhere; there are at most 65535), both as an
         * Array of the batch (its field) and as a copy (the loader's
         * record of the last batch). */
        int64_t nn = n;
        ArrayObject *src = ids && sources ? array_new(bo, (void *)sources, STK_I32, 1, &nn) : NULL;
        PyObject *srcs = src ? PyBytes_FromStringAndSize((const char *)sources,
                                                         (Py_ssize_t)n * (Py_ssize_t)sizeof *sources)
                             : NULL;
        if (!ids || (sources && (!src || !srcs))) {
            Py_XDECREF(ids);
            Py_XDECREF((PyObject *)src);
            Py_XDECREF(srcs);
            Py_DECREF(d);
        } else {
            t = src ? Py_BuildValue("(NNNN)", d, ids, src, srcs) : Py_BuildValue("(NN)", d, ids);
        }
    }
    Py_DECREF((PyObject *)bo);
    return t;
}
