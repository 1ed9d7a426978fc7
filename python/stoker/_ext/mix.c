/*
 * mix.c: _stoker.Mix, the schedule of a mixture (stk_mix): which source
 * each round of an epoch belongs to, and where each source stands at any
 * round.  The mixture itself (a loader per source, batches assembled from
 * them) is stoker/_mix.py.
 */
#include "ext.h"

typedef struct {
    PyObject_HEAD
    stk_mix *m;
} MixObject;

static int mix_init(MixObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"sources", "exhaust", "seed", NULL};
    PyObject *list;
    const char *exhaust;
    unsigned long long seed;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsK", names, &list, &exhaust, &seed)) return -1;
    stk_mix_exhaust ex;
    if (stk_mix_exhaust_parse(exhaust, &ex)) {
        /* The str back from its UTF-8 ("s" took nothing else), so that %R
         * shows what was passed, also when it came by keyword. */
        PyObject *given = PyUnicode_FromString(exhaust);
        if (given) {
            PyErr_Format(InvalidArgument, "exhaust must be 'stop', 'cycle' or 'all', not %R",
                         given);
            Py_DECREF(given);
        }
        return -1;
    }
    PyObject *seq = PySequence_Fast(list, "sources must be a sequence of (units, weight, count)");
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    stk_mix_source *s = PyMem_Calloc(n ? (size_t)n : 1, sizeof *s);
    if (!s) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long units, count;
        double weight;
        if (!PyArg_ParseTuple(fast_item(seq, i), "KdK", &units, &weight, &count)) {
            PyMem_Free(s);
            Py_DECREF(seq);
            return -1;
        }
        s[i].units = units;
        s[i].weight = weight;
        s[i].count = count;
    }
    Py_DECREF(seq);
    stk_error err = {0};
    stk_mix *m = NULL;
    int rc = stk_mix_open(s, (size_t)n, ex, seed, &m, &err);
    PyMem_Free(s);
    if (rc) {
        raise_stk(rc, &err);
        return -1;
    }
    stk_mix_close(self->m);
    self->m = m;
    return 0;
}

static void mix_dealloc(MixObject *self) {
    stk_mix_close(self->m);
    free_instance((PyObject *)self);
}

static PyObject *mix_rounds(MixObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromUnsignedLongLong(stk_mix_epoch_rounds(self->m));
}

static PyObject *mix_source_rounds(MixObject *self, PyObject *unused) {
    (void)unused;
    size_t n = stk_mix_num_sources(self->m);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(stk_mix_source_rounds(self->m, i));
        if (!v) Py_CLEAR(out);
        else PyList_SetItem(out, (Py_ssize_t)i, v); /* steals v */
    }
    return out;
}

/* fill(epoch, first, n) -> bytes of n uint32 source ids. */
static PyObject *mix_fill(MixObject *self, PyObject *args) {
    unsigned long long epoch, first, n;
    if (!PyArg_ParseTuple(args, "KKK", &epoch, &first, &n)) return NULL;
    uint64_t R = stk_mix_epoch_rounds(self->m);
    if (first > R || n > R - first) {
        PyErr_SetString(PyExc_ValueError, "rounds past the epoch's end");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(uint32_t)));
    if (!out) return NULL;
    uint32_t *dst = (uint32_t *)PyBytes_AsString(out); /* out is bytes: never NULL */
    Py_BEGIN_ALLOW_THREADS
    stk_mix_fill(self->m, epoch, first, n, dst);
    Py_END_ALLOW_THREADS
    return out;
}

/* counts(epoch, q) -> [rounds of each source among rounds [0, q)]. */
static PyObject *mix_counts(MixObject *self, PyObject *args) {
    unsigned long long epoch, q;
    if (!PyArg_ParseTuple(args, "KK", &epoch, &q)) return NULL;
    size_t n = stk_mix_num_sources(self->m);
    uint64_t *c = PyMem_Calloc(n, sizeof *c);
    if (!c) return PyErr_NoMemory();
    stk_mix_counts(self->m, epoch, q, c);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(c[i]);
        if (!v) Py_CLEAR(out);
        else PyList_SetItem(out, (Py_ssize_t)i, v); /* steals v */
    }
    PyMem_Free(c);
    return out;
}

static PyMethodDef mix_methods[] = {
    {"rounds", (PyCFunction)mix_rounds, METH_NOARGS, "rounds() -> rounds in an epoch."},
    {"source_rounds", (PyCFunction)mix_source_rounds, METH_NOARGS,
     "source_rounds() -> [each source's rounds in an epoch]."},
    {"fill", (PyCFunction)mix_fill, METH_VARARGS,
     "fill(epoch, first, n) -> bytes: the uint32 sources of rounds first .. first + n - 1."},
    {"counts", (PyCFunction)mix_counts, METH_VARARGS,
     "counts(epoch, q) -> [each source's rounds among rounds [0, q)]."},
    {NULL, NULL, 0, NULL}};

PyTypeObject *MixType;

/* The type's attributes cannot be set, nor the type subclassed. */
static PyType_Slot mix_slots[] = {
    {Py_tp_doc, (void *)"Mix(sources, exhaust, seed): a mixture's schedule (stk_mix); sources "
                        "are (units, weight, count) tuples."},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)mix_init},
    {Py_tp_dealloc, (void *)mix_dealloc},
    {Py_tp_methods, mix_methods},
    {0, NULL}};

PyType_Spec MixSpec = {
    .name = "stoker._stoker.Mix",
    .basicsize = sizeof(MixObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = mix_slots,
};
