/*
 * array.c: the Array type, a zero-copy view of one field of a batch (or of
 * its ragged offsets, or a mixture's sources).  It holds its Batch, so the
 * buffer stays untouched while the Array, or anything made from it through
 * the buffer protocol (NumPy) or DLPack (dlpack.c), lives.
 */
#include "ext.h"

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

ArrayObject *array_new(BatchObject *batch, void *data, stk_dtype dtype, int ndim,
                       const int64_t *shape) {
    ArrayObject *a = PyObject_New(ArrayObject, ArrayType);
    if (!a) return NULL;
    Py_INCREF((PyObject *)batch);
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
    Py_XDECREF((PyObject *)self->batch);
    free_instance((PyObject *)self);
}

static int array_getbuffer(ArrayObject *self, Py_buffer *view, int flags) {
    if (self->dev_type != kDLCPU) {
        PyErr_SetString(PyExc_BufferError, "the array is in GPU memory; use DLPack "
                                            "(torch.from_dlpack) rather than the buffer protocol");
        view->obj = NULL;
        return -1;
    }
    /* Writable whatever `flags` asks: the consumer owns the batch while it
     * lives. */
    view->obj = (PyObject *)self;
    Py_INCREF((PyObject *)self);
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

static PyObject *array_shape(ArrayObject *self, void *c) {
    (void)c;
    PyObject *t = PyTuple_New(self->ndim);
    for (int d = 0; t && d < self->ndim; d++) {
        PyObject *v = PyLong_FromLongLong(self->shape[d]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, d, v); /* steals v; t is a new tuple of ndim items */
    }
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

/* <stoker.Array f32 (256, 365, 16) cpu>, or cuda:N for device memory. */
static PyObject *array_repr(ArrayObject *self) {
    PyObject *shape = array_shape(self, NULL);
    if (!shape) return NULL;
    PyObject *r = self->dev_type == kDLCPU
                      ? PyUnicode_FromFormat("<stoker.Array %s %R cpu>",
                                             stk_dtype_name(self->dtype), shape)
                      : PyUnicode_FromFormat("<stoker.Array %s %R cuda:%d>",
                                             stk_dtype_name(self->dtype), shape, self->dev_id);
    Py_DECREF(shape);
    return r;
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

PyTypeObject *ArrayType;

/* Only the extension makes Arrays (Array() raises TypeError), and the
 * type's attributes cannot be set, nor the type subclassed.  The buffer
 * protocol needs no release function: the view holds the Array, which holds
 * the batch. */
static PyType_Slot array_slots[] = {
    {Py_tp_dealloc, (void *)array_dealloc},
    {Py_tp_repr, (void *)array_repr},
    {Py_tp_doc, (void *)"A zero-copy view of one field of a batch (DLPack and buffer protocol)."},
    {Py_bf_getbuffer, (void *)array_getbuffer},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {0, NULL}};

PyType_Spec ArraySpec = {
    .name = "stoker._stoker.Array",
    .basicsize = sizeof(ArrayObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = array_slots,
};
