/*
 * module.c: the module stoker._stoker itself: its init (types, the
 * exception hierarchy taken from stoker/_errors.py), its functions, and the
 * mapping of libstoker's error codes onto those exceptions.
 */
#include "ext.h"

#include <errno.h>

PyObject *StokerError, *InvalidArgument, *NotFound, *OutOfMemory;

PyObject *raise_stk(int rc, const stk_error *e) {
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
    {"count", (PyCFunction)(void (*)(void))py_loader_count, METH_VARARGS | METH_KEYWORDS,
     "count(<the arguments of Loader>) -> dict of epoch_samples, rank_samples and "
     "rank_batches, without opening a loader (no threads start)."},
    {"index", (PyCFunction)(void (*)(void))py_index, METH_VARARGS | METH_KEYWORDS,
     "Indexes files in place (see stoker.index); returns the record count."},
    {"write_arrow", py_write_arrow, METH_VARARGS,
     "Packs an Arrow C stream (capsule) into a dataset; returns the record count."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stoker", "The C core of stoker.",
                                    -1, module_methods, NULL, NULL, NULL, NULL};

/* The exception classes of stoker/_errors.py, kept for the module's life. */
static int import_errors(void) {
    PyObject *errors = PyImport_ImportModule("stoker._errors");
    if (!errors) return -1;
    StokerError = PyObject_GetAttrString(errors, "StokerError");
    InvalidArgument = PyObject_GetAttrString(errors, "InvalidArgument");
    NotFound = PyObject_GetAttrString(errors, "NotFound");
    OutOfMemory = PyObject_GetAttrString(errors, "OutOfMemory");
    Py_DECREF(errors);
    return StokerError && InvalidArgument && NotFound && OutOfMemory ? 0 : -1;
}

PyMODINIT_FUNC PyInit__stoker(void) {
    if (PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 ||
        PyType_Ready(&ArrayType) < 0 || PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (import_errors()) {
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
