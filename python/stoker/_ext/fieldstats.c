/*
 * fieldstats.c: field_stats(), the statistics a dataset's writer gathered
 * as it packed (stk_dataset_field_stats), for stoker.stats to return
 * without reading a record.
 */
#include "ext.h"

/* A list of the n values of one member of the column statistics. */
static PyObject *column_list(const stk_column_stats *c, size_t n, int member) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *v;
        switch (member) {
        case 0: v = PyLong_FromUnsignedLongLong(c[i].count); break;
        case 1: v = PyLong_FromUnsignedLongLong(c[i].nan_count); break;
        case 2: v = PyFloat_FromDouble(c[i].mean); break;
        case 3: v = PyFloat_FromDouble(c[i].m2); break;
        case 4: v = PyFloat_FromDouble(c[i].min); break;
        default: v = PyFloat_FromDouble(c[i].max); break;
        }
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, (Py_ssize_t)i, v);
    }
    return l;
}

/* field_stats(path, root=None, cache_dir=None) -> ([(name, dtype, row
 * shape, logical type or None), ...], {name: {"count", "nan_count", "mean",
 * "m2", "min", "max"}}) with lists of one value per column, for every
 * field that has them. */
PyObject *py_field_stats(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path, *root = NULL, *cache_dir = NULL;
    if (!PyArg_ParseTuple(args, "s|zz", &path, &root, &cache_dir)) return NULL;
    stk_open_options o;
    stk_open_options_init(&o);
    o.root = root;
    o.cache_dir = cache_dir;
    stk_error err = {0};
    stk_dataset *ds = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_open_with(path, &o, &ds, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    static const char *const names[6] = {"count", "nan_count", "mean", "m2", "min", "max"};
    size_t nf = stk_dataset_num_fields(ds);
    PyObject *fields = PyList_New(0), *stats = PyDict_New(), *out = NULL;
    for (size_t i = 0; fields && stats && i < nf; i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        /* The shape of a row of statistics: a row's for a field of rows,
         * else the record's (stk_column_stats). */
        int d0 = f->ndim > 0 && f->shape[0] == STK_RAGGED ? 1 : 0;
        PyObject *shape = PyTuple_New(f->ndim > d0 ? f->ndim - d0 : 0);
        for (int d = d0; shape && d < f->ndim; d++)
            PyTuple_SetItem(shape, d - d0, PyLong_FromLongLong(f->shape[d]));
        PyObject *entry = shape ? Py_BuildValue("(ssNz)", f->name, stk_dtype_name(f->dtype),
                                                shape, f->type)
                                : NULL;
        if (!entry || PyList_Append(fields, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
        const stk_column_stats *c = NULL;
        size_t n = 0;
        if (stk_dataset_field_stats(ds, i, &c, &n) != 0) continue;
        PyObject *d = PyDict_New();
        if (!d || PyDict_SetItemString(stats, f->name, d) < 0) {
            Py_XDECREF(d);
            goto fail;
        }
        Py_DECREF(d);
        for (int m = 0; m < 6; m++) {
            PyObject *l = column_list(c, n, m);
            if (!l || PyDict_SetItemString(d, names[m], l) < 0) {
                Py_XDECREF(l);
                goto fail;
            }
            Py_DECREF(l);
        }
    }
    if (fields && stats) out = Py_BuildValue("(OO)", fields, stats);
fail:
    Py_XDECREF(fields);
    Py_XDECREF(stats);
    stk_dataset_close(ds);
    return out;
}
