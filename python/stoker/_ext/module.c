/*
 * module.c: the module stoker._stoker itself: its init (types, the
 * exception hierarchy taken from stoker/_errors.py), its functions, and the
 * mapping of libstoker's error codes onto those exceptions.
 */
#include "ext.h"

#include <errno.h>
#include <string.h>

PyObject *StokerError, *InvalidArgument, *NotFound, *AccessDenied, *OutOfMemory, *Timeout;
static PyObject *DataChanged, *RedirectLoop, *HostNotFound, *TLSError, *HTTPError, *BadRange;
static PyObject *RemoteError, *ConnectionRefused, *MediaError;

PyObject *raise_stk(int rc, const stk_error *e) {
    const char *msg = e && e->message[0] ? e->message : stk_strerror(rc);
    PyObject *type = rc == -EINVAL   ? InvalidArgument
                     : rc == -ENOMEM ? OutOfMemory
                     : rc == -ENOENT ? NotFound
                     : rc == -EACCES ? AccessDenied
                     : rc == STK_ETIMEOUT ? Timeout
                     : rc == STK_ESTALE ? DataChanged
                     : rc == STK_EREDIRECT ? RedirectLoop
                     : rc == STK_EHOST ? HostNotFound
                     : rc == STK_ETLS ? TLSError
                     : rc == STK_EHTTP ? HTTPError
                     : rc == STK_ERANGE ? BadRange
                     : rc == STK_EMEDIA ? MediaError
                     : rc == -ECONNREFUSED ? ConnectionRefused
                     : rc == -EHOSTUNREACH || rc == -ENETUNREACH ? RemoteError
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

/* The libstoker tables of an option's value names (names.c): parse and
 * name functions by option. */
typedef struct {
    const char *option;
    int (*parse)(const char *);
    const char *(*name)(int);
} option_table;

static const char *order_name(int v) { return stk_order_name((stk_order)v); }
static const char *backend_name(int v) { return stk_backend_name((stk_backend)v); }
static const char *valid_name(int v) { return stk_valid_name((stk_valid)v); }
static const char *warm_up_name(int v) { return stk_warm_up_name((stk_warm_up)v); }
static const char *on_error_name(int v) { return stk_on_error_name((stk_on_error)v); }

static const option_table tables[] = {{"shuffle", stk_order_parse, order_name},
                                      {"backend", stk_backend_parse, backend_name},
                                      {"valid", stk_valid_parse, valid_name},
                                      {"warm_up", stk_warm_up_parse, warm_up_name},
                                      {"on_error", stk_on_error_parse, on_error_name}};

static const option_table *find_table(const char *option) {
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (strcmp(tables[i].option, option) == 0) return &tables[i];
    PyErr_Format(PyExc_KeyError, "no value names for option %s", option);
    return NULL;
}

/* option_names(option) -> {name: value} of every value, as libstoker names
 * them (its parse takes some aliases besides, e.g. "uring"). */
static PyObject *py_option_names(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *option;
    if (!PyArg_ParseTuple(args, "s", &option)) return NULL;
    const option_table *t = find_table(option);
    if (!t) return NULL;
    PyObject *d = PyDict_New();
    for (int v = 0; d && v < 64; v++) {
        const char *name = t->name(v);
        if (strcmp(name, "unknown") == 0) break;
        PyObject *val = PyLong_FromLong(v);
        if (!val || PyDict_SetItemString(d, name, val) < 0) Py_CLEAR(d);
        Py_XDECREF(val);
    }
    return d;
}

/* option_value(option, name) -> the value libstoker gives the name, or -1. */
static PyObject *py_option_value(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *option, *name;
    if (!PyArg_ParseTuple(args, "ss", &option, &name)) return NULL;
    const option_table *t = find_table(option);
    if (!t) return NULL;
    int v = t->parse(name);
    return PyLong_FromLong(v < 0 ? -1 : v);
}

/* loader_defaults() -> {option: default} from stk_loader_options_init: the
 * one place the defaults live. */
static PyObject *py_loader_defaults(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    stk_loader_options o;
    stk_loader_options_init(&o);
    return Py_BuildValue(
        "{s:I,s:K,s:K,s:s,s:K,s:K,s:K,s:K,s:I,s:O,s:O,s:s,s:O,s:i,s:I,s:I,s:K,s:O,s:s,s:I,"
        "s:s}",
        "batch_size", o.batch_size, "stride", (unsigned long long)o.stride, "seed",
        (unsigned long long)o.seed, "shuffle", stk_order_name(o.order), "epoch",
        (unsigned long long)o.epoch, "block_bytes", (unsigned long long)o.block_bytes,
        "block_samples", (unsigned long long)o.block_samples, "max_skips",
        (unsigned long long)o.max_skips, "block_group", o.block_group, "pad",
        o.pad ? Py_True : Py_False, "drop_last", o.drop_last ? Py_True : Py_False, "backend",
        o.backend == STK_BACKEND_URING ? "uring" : stk_backend_name(o.backend), "direct",
        o.direct ? Py_True : Py_False, "threads", o.threads, "prefetch", o.prefetch,
        "queue_depth", o.queue_depth, "memory_budget", (unsigned long long)o.memory_budget,
        "verify", o.verify ? Py_True : Py_False, "on_error", stk_on_error_name(o.on_error),
        "max_open_files", o.max_open_files, "warm_up",
        stk_warm_up_name(o.warm_up));
}

static PyMethodDef module_methods[] = {
    {"option_names", py_option_names, METH_VARARGS,
     "option_names(option) -> {name: value} of the option's values (libstoker's table)."},
    {"option_value", py_option_value, METH_VARARGS,
     "option_value(option, name) -> the value libstoker parses the name to, or -1."},
    {"loader_defaults", py_loader_defaults, METH_NOARGS,
     "loader_defaults() -> {option: default} of the C loader (stk_loader_options_init)."},
    {"gpu_count", py_gpu_count, METH_NOARGS,
     "gpu_count() -> (CUDA devices, why none when 0)."},
    {"count", (PyCFunction)(void (*)(void))py_loader_count, METH_VARARGS | METH_KEYWORDS,
     "count(<the arguments of Loader>) -> dict of epoch_samples, rank_samples and "
     "rank_batches, without opening a loader (no threads start)."},
    {"index", (PyCFunction)(void (*)(void))py_index, METH_VARARGS | METH_KEYWORDS,
     "Indexes files in place (see stoker.index); returns the record count."},
    {"push_files", py_push_files, METH_VARARGS,
     "push_files(dir, names, url): uploads files of dir to an s3:// prefix (stk_push_files); "
     "dir None: deletes those objects (stk_delete_objects)."},
    {"open_mixture", py_open_mixture, METH_VARARGS,
     "open_mixture([(loader args, weight, count, names), ...], exhaust, homogeneous, seed) "
     "-> Loader over the sources (stk_loader_open_mixture)."},
    {"field_stats", py_field_stats, METH_VARARGS,
     "field_stats(path, root=None, cache_dir=None) -> ([(name, dtype, row shape, type)], {name: "
     "{count, nan_count, mean, m2, min, max}}): the statistics gathered at pack time "
     "(stk_dataset_field_stats), a list of one value per column each."},
    {"merge", py_merge, METH_VARARGS,
     "merge(path, count=0): joins a dataset's parts (stk_merge_parts)."},
    {"report_html", py_report_html, METH_VARARGS,
     "report_html(path, report): writes stoker.profile's report as a page "
     "(stk_report_write_html)."},
    {"decode_one", py_decode_one, METH_VARARGS,
     "decode_one(spec, data, key) -> (sample bytes, (x, y, w, h), flipped) (stk_decode_one)."},
    {"decode_box", py_decode_box, METH_VARARGS,
     "decode_box(spec, width, height, key) -> ((x, y, w, h), flipped) (stk_decode_box)."},
    {"decode_key", py_decode_key, METH_VARARGS,
     "decode_key(seed, epoch, record) -> the key of a sample's random choices."},
    {"media_probe", py_media_probe, METH_VARARGS,
     "media_probe(data) -> what an encoded image or clip is (stk_media_probe)."},
    {"media_formats", py_media_formats, METH_NOARGS,
     "media_formats() -> the formats this build decodes, comma-separated."},
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
    AccessDenied = PyObject_GetAttrString(errors, "AccessDenied");
    OutOfMemory = PyObject_GetAttrString(errors, "OutOfMemory");
    Timeout = PyObject_GetAttrString(errors, "Timeout");
    DataChanged = PyObject_GetAttrString(errors, "DataChanged");
    RedirectLoop = PyObject_GetAttrString(errors, "RedirectLoop");
    HostNotFound = PyObject_GetAttrString(errors, "HostNotFound");
    TLSError = PyObject_GetAttrString(errors, "TLSError");
    HTTPError = PyObject_GetAttrString(errors, "HTTPError");
    BadRange = PyObject_GetAttrString(errors, "BadRange");
    RemoteError = PyObject_GetAttrString(errors, "RemoteError");
    ConnectionRefused = PyObject_GetAttrString(errors, "ConnectionRefused");
    MediaError = PyObject_GetAttrString(errors, "MediaError");
    Py_DECREF(errors);
    return StokerError && InvalidArgument && NotFound && AccessDenied && OutOfMemory && Timeout &&
                   DataChanged && RedirectLoop && HostNotFound && TLSError && HTTPError &&
                   BadRange && RemoteError && ConnectionRefused && MediaError
               ? 0
               : -1;
}

/* Makes the type of `spec` into *type, once: a retried import (one that
 * failed after this point) keeps the types made the first time.  The
 * reference is the extension's own, held for the process's life. */
static int make_type(PyTypeObject **type, PyType_Spec *spec) {
    if (!*type) *type = (PyTypeObject *)PyType_FromSpec(spec);
    return *type ? 0 : -1;
}

PyMODINIT_FUNC PyInit__stoker(void) {
    if (make_type(&LoaderType, &LoaderSpec) < 0 || make_type(&BatchType, &BatchSpec) < 0 ||
        make_type(&ArrayType, &ArraySpec) < 0 || make_type(&WriterType, &WriterSpec) < 0 ||
        make_type(&MixType, &MixSpec) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (import_errors()) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(StokerError);
    PyModule_AddObject(m, "StokerError", StokerError);
    Py_INCREF((PyObject *)LoaderType);
    PyModule_AddObject(m, "Loader", (PyObject *)LoaderType);
    Py_INCREF((PyObject *)WriterType);
    PyModule_AddObject(m, "Writer", (PyObject *)WriterType);
    Py_INCREF((PyObject *)MixType);
    PyModule_AddObject(m, "Mix", (PyObject *)MixType);
    Py_INCREF((PyObject *)ArrayType);
    PyModule_AddObject(m, "Array", (PyObject *)ArrayType);
    PyModule_AddStringConstant(m, "version", stk_version());
    return m;
}
