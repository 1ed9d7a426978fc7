/*
 * writer.c: making datasets.  The Writer type (stk_writer, behind
 * stoker.write for dicts and iterables of arrays), write_arrow() (an Arrow
 * C stream packed by stk_write_arrow) and index() (files indexed in place
 * by stk_index_build).
 */
#include "ext.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static stk_codec codec_of(const char *name) {
    return strcmp(name, "zstd") == 0 ? STK_CODEC_ZSTD : STK_CODEC_NONE;
}

/* ---- Writer ---- */

typedef struct {
    PyObject_HEAD
    stk_writer *w;
    size_t nfields;
    uint64_t records;           /* appended so far, for messages */
    uint64_t row_bytes[256];    /* bytes of one row of each field */
    char names[256][STK_NAME_MAX];
} WriterObject;

/* One field of the schema from (name, dtype name, shape tuple with -1 for
 * ragged, codec name, level[, logical type or None]).  The name and type
 * stay valid while `spec` lives.  Returns 0 or -1. */
static int field_spec(PyObject *spec, stk_field *f) {
    const char *name, *dtype, *codec, *type = NULL;
    PyObject *shape;
    int level;
    if (!PyArg_ParseTuple(spec, "ssOsi|z", &name, &dtype, &shape, &codec, &level, &type))
        return -1;
    f->type = type;
    int d = stk_dtype_parse(dtype);
    if (d < 0) {
        PyErr_Format(InvalidArgument, "field '%s': unknown dtype '%s'", name, dtype);
        return -1;
    }
    f->name = name;
    f->dtype = (stk_dtype)d;
    f->codec = codec_of(codec);
    f->codec_level = level;
    PyObject *ss = PySequence_Fast(shape, "shape must be a sequence");
    if (!ss) return -1;
    f->ndim = (int)fast_size(ss);
    for (int k = 0; k < f->ndim && k < STK_MAX_DIMS; k++)
        f->shape[k] = PyLong_AsLongLong(fast_item(ss, k));
    Py_DECREF(ss);
    return 0;
}

/* What append() checks values against: each field's name and row size. */
static void writer_remember(WriterObject *self, const stk_field *f, size_t n) {
    self->nfields = n;
    for (size_t i = 0; i < n; i++) {
        uint64_t rb = stk_dtype_size(f[i].dtype);
        for (int k = 1; k < f[i].ndim; k++) rb *= (uint64_t)f[i].shape[k];
        self->row_bytes[i] = rb;
        snprintf(self->names[i], sizeof self->names[i], "%s", f[i].name);
    }
}

/* Writer(path, fields, shard_bytes, align, overwrite, sync, attrs,
 * part_index, part_count, format_version): fields is a sequence of
 * field_spec tuples. */
static int writer_init(WriterObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "fields", "shard_bytes", "align", "overwrite", "sync",
                             "attrs", "part_index", "part_count", "format_version", NULL};
    const char *path, *attrs = NULL;
    PyObject *fields;
    stk_writer_options o;
    stk_writer_options_init(&o);
    unsigned long long shard_bytes = 256ull << 20;
    unsigned int align = 64, part_index = 0, part_count = 1, format_version = 0;
    int overwrite = 0, sync = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|KIppzIII", kwlist, &path, &fields,
                                     &shard_bytes, &align, &overwrite, &sync, &attrs,
                                     &part_index, &part_count, &format_version))
        return -1;
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    stk_field f[256];
    if (n < 1 || n > 256) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "a dataset has 1 to 256 fields");
        return -1;
    }
    memset(f, 0, sizeof f);
    for (Py_ssize_t i = 0; i < n; i++)
        if (field_spec(fast_item(seq, i), &f[i])) {
            Py_DECREF(seq);
            return -1;
        }
    o.shard_bytes = shard_bytes;
    o.align = align;
    o.overwrite = overwrite;
    o.sync = sync;
    o.attrs_json = attrs;
    o.part_index = part_index;
    o.part_count = part_count;
    o.format_version = format_version;
    stk_error err = {0};
    int rc = stk_writer_create(path, f, (size_t)n, &o, &self->w, &err);
    if (rc == 0) writer_remember(self, f, (size_t)n);
    Py_DECREF(seq);
    if (rc) {
        raise_stk(rc, &err);
        return -1;
    }
    return 0;
}

/* Field `i`'s value from (buffer, rows), into view and v; the writer reads
 * rows * row_bytes bytes, so the value must hold exactly that many, or the
 * record would read past it or drop some.  Returns 0; -1 with the view
 * taken (release it) or -2 without. */
static int append_value(WriterObject *self, size_t i, PyObject *item, Py_buffer *view,
                        stk_value *v) {
    PyObject *buf;
    unsigned long long rows;
    if (!PyArg_ParseTuple(item, "OK", &buf, &rows)) return -2;
    if (PyObject_GetBuffer(buf, view, PyBUF_C_CONTIGUOUS) != 0) return -2;
    v->data = view->buf;
    v->rows = rows;
    uint64_t need = 0;
    if (__builtin_mul_overflow((uint64_t)rows, self->row_bytes[i], &need) ||
        (uint64_t)view->len != need) {
        PyErr_Format(InvalidArgument,
                     "record %llu: field '%s': %llu rows of %llu bytes are %llu bytes, but "
                     "the value holds %lld",
                     (unsigned long long)self->records, self->names[i], rows,
                     (unsigned long long)self->row_bytes[i], (unsigned long long)need,
                     (long long)view->len);
        return -1;
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
    if ((size_t)fast_size(seq) != self->nfields) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "append: one value per field is needed");
        return NULL;
    }
    Py_buffer views[256];
    stk_value v[256];
    size_t got = 0;
    PyObject *ret = NULL;
    for (; got < self->nfields; got++) {
        int rc = append_value(self, got, fast_item(seq, (Py_ssize_t)got),
                              &views[got], &v[got]);
        if (rc == -1) got++;
        if (rc) goto out;
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
    free_instance((PyObject *)self);
}

static PyObject *writer_repr(WriterObject *self) {
    return PyUnicode_FromFormat("<stoker.Writer %llu records appended%s>",
                                (unsigned long long)self->records, self->w ? "" : ", closed");
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)writer_append, METH_O, "append([(buffer, rows), ...])"},
    {"finish", (PyCFunction)writer_finish, METH_NOARGS, "Publishes the dataset."},
    {"abort", (PyCFunction)writer_abort, METH_NOARGS, "Gives up; the dataset stays incomplete."},
    {NULL, NULL, 0, NULL}};

PyTypeObject *WriterType;

/* The type's attributes cannot be set, nor the type subclassed. */
static PyType_Slot writer_slots[] = {
    {Py_tp_dealloc, (void *)writer_dealloc},
    {Py_tp_repr, (void *)writer_repr},
    {Py_tp_doc, (void *)"The C writer; use stoker.write."},
    {Py_tp_init, (void *)writer_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_methods, writer_methods},
    {0, NULL}};

PyType_Spec WriterSpec = {
    .name = "stoker._stoker.Writer",
    .basicsize = sizeof(WriterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = writer_slots,
};

/* ---- Arrow ---- */

/* A sequence of str as names[0..n), at most `max`; the strings stay alive
 * while `seq` does.  `what` names it in messages.  Returns n, or -1. */
static Py_ssize_t str_list(PyObject *seq, const char **names, Py_ssize_t max, const char *what) {
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0) return -1;
    if (n > max) {
        PyErr_Format(InvalidArgument, "at most %zd %s", max, what);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *it = PySequence_GetItem(seq, k);
        names[k] = it ? PyUnicode_AsUTF8AndSize(it, NULL) : NULL;
        Py_XDECREF(it); /* the list keeps the string alive */
        if (!names[k]) return -1;
    }
    return n;
}

/* The storage of write_arrow's field list. */
typedef struct {
    stk_arrow_field af[256];
    const char *colnames[256][64];
} arrow_fields;

/* fields: a sequence of (name, [columns], codec, level), which `seq`
 * (returned, to be released by the caller) keeps alive.  Sets o->fields.
 * Returns 0 or -1. */
static int arrow_field_specs(PyObject *fields, arrow_fields *s, stk_arrow_options *o,
                             PyObject **seq) {
    *seq = PySequence_Fast(fields, "fields must be a list");
    if (!*seq) return -1;
    Py_ssize_t n = fast_size(*seq);
    if (n > 256) {
        PyErr_SetString(InvalidArgument, "at most 256 fields");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name, *codec;
        PyObject *cols;
        int level;
        if (!PyArg_ParseTuple(fast_item(*seq, i), "sOsi", &name, &cols, &codec,
                              &level))
            return -1;
        Py_ssize_t nc = PySequence_Size(cols);
        if (nc < 1 || nc > 64) {
            PyErr_Format(InvalidArgument, "field '%s': 1 to 64 columns", name);
            return -1;
        }
        if (str_list(cols, s->colnames[i], 64, "columns") < 0) return -1;
        s->af[i] = (stk_arrow_field){name, s->colnames[i], (size_t)nc, codec_of(codec), level};
    }
    o->fields = s->af;
    o->nfields = (size_t)n;
    return 0;
}

/* write_arrow(path, stream_capsule, group_by, order_by, fields, shard_bytes,
 * align, overwrite, sync, attrs, statics, part_index, part_count, resume,
 * inputs, inputs_list, format_version): fields is
 * None or a list of
 * (name, [columns], codec, level); statics None (found from the data) or a
 * list of field names (empty: none). */
/* push_files(dir, [names], url): stk_push_files; with dir None,
 * stk_delete_objects of the names. */
PyObject *py_push_files(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *dir, *url;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "zOs", &dir, &names, &url)) return NULL;
    PyObject *seq = PySequence_Fast(names, "names must be a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = fast_size(seq);
    const char **v = PyMem_Calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(v[i] = PyUnicode_AsUTF8AndSize(fast_item(seq, i), NULL))) {
            PyMem_Free(v);
            Py_DECREF(seq);
            return NULL;
        }
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dir ? stk_push_files(dir, v, (size_t)n, url, &err)
             : stk_delete_objects(url, v, (size_t)n, &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    Py_DECREF(seq);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

/* merge(path, count): stk_merge_parts; count 0: as the parts record it. */
PyObject *py_merge(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    unsigned int count = 0;
    if (!PyArg_ParseTuple(args, "s|I", &path, &count)) return NULL;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_merge_parts(path, count, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

PyObject *py_write_arrow(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path, *group_by = NULL, *order_by = NULL, *attrs = NULL;
    PyObject *cap, *fields, *statics = Py_None;
    unsigned long long shard_bytes;
    unsigned int align, part_index = 0, part_count = 1, format_version = 0;
    int overwrite, sync, resume = 0;
    const char *inputs = NULL, *inputs_list = NULL;
    if (!PyArg_ParseTuple(args, "sOzzOKIppz|OIIpzzI", &path, &cap, &group_by, &order_by, &fields,
                          &shard_bytes, &align, &overwrite, &sync, &attrs, &statics,
                          &part_index, &part_count, &resume, &inputs, &inputs_list,
                          &format_version))
        return NULL;
    stk_arrow_options o;
    stk_arrow_options_init(&o);
    const char *static_names[256];
    if (statics != Py_None) {
        Py_ssize_t n = str_list(statics, static_names, 256, "statics");
        if (n < 0) return NULL;
        o.statics = static_names;
        o.nstatics = (size_t)n;
        o.no_statics = n == 0;
    }
    struct ArrowArrayStream *stream = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!stream) return NULL;
    o.group_by = group_by;
    o.order_by = order_by;
    o.writer.shard_bytes = shard_bytes;
    o.writer.align = align;
    o.writer.overwrite = overwrite;
    o.writer.sync = sync;
    o.writer.attrs_json = attrs;
    o.writer.format_version = format_version;
    o.writer.part_index = part_index;
    o.writer.part_count = part_count;
    o.writer.resume = resume;
    o.writer.inputs = inputs;
    o.writer.inputs_list = inputs_list;
    arrow_fields *specs = NULL; /* large: not on the stack */
    PyObject *seq = NULL;
    if (fields != Py_None) {
        if (!(specs = PyMem_Malloc(sizeof *specs))) return PyErr_NoMemory();
        if (arrow_field_specs(fields, specs, &o, &seq)) {
            Py_XDECREF(seq);
            PyMem_Free(specs);
            return NULL;
        }
    }
    stk_error err = {0};
    uint64_t records = 0;
    stk_arrow_report rep;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_write_arrow_report(path, stream, &o, &records, &rep, &err);
    Py_END_ALLOW_THREADS
    Py_XDECREF(seq);
    PyMem_Free(specs);
    if (rc) return raise_stk(rc, &err);
    return Py_BuildValue("K{sKsLsKsKsKsK}", (unsigned long long)records, "groups",
                         (unsigned long long)rep.groups, "step", (long long)rep.step, "gaps",
                         (unsigned long long)rep.gaps, "gap_groups",
                         (unsigned long long)rep.gap_groups, "repeats",
                         (unsigned long long)rep.repeats, "repeat_groups",
                         (unsigned long long)rep.repeat_groups);
}

/* ---- in place ---- */

/* index()'s progress: stk_index_build calls on_index_file after every
 * file, with the GIL released; the Python callable is called (the GIL
 * taken) at most every 0.1 s, so that a walk of many small files is not
 * slowed, and once more with the totals when the walk is done.  An
 * exception it raises (KeyboardInterrupt at a Ctrl-C) stops the walk and
 * is raised by index(). */
typedef struct index_progress {
    PyObject *fn;
    double last;
    uint64_t files, records;
    PyObject *exc[3]; /* the exception that stopped the walk (type, value,
                       * traceback: PyErr_Fetch, the limited API's), owned */
} index_progress;

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Calls p->fn(files, records); the GIL must be held.  Returns 0, or -1
 * with the exception kept in p->exc. */
static int index_progress_call(index_progress *p) {
    PyObject *r = PyObject_CallFunction(p->fn, "KK", (unsigned long long)p->files,
                                        (unsigned long long)p->records);
    if (r) {
        Py_DECREF(r);
        return 0;
    }
    PyErr_Fetch(&p->exc[0], &p->exc[1], &p->exc[2]);
    return -1;
}

static int on_index_file(void *ctx, uint64_t files, uint64_t records) {
    index_progress *p = ctx;
    p->files = files;
    p->records = records;
    double t = monotonic_s();
    if (t - p->last < 0.1) return 0;
    p->last = t;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = index_progress_call(p);
    PyGILState_Release(g);
    return rc;
}

/* index(paths, output, source, split_axis0, dataset, float32, field,
 * extension, progress) -> records: stk_index_build over `paths` (a
 * sequence of str); progress: None, or a callable (files, records) called
 * as files are indexed. */
PyObject *py_index(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"paths", "output", "source", "split_axis0", "dataset",
                             "float32", "field", "extension", "progress", NULL};
    PyObject *paths, *progress = Py_None;
    const char *out, *dataset = NULL, *field = NULL, *ext = NULL;
    int source = 0, split = 0, f32 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|ipzpzzO", kwlist, &paths, &out, &source,
                                     &split, &dataset, &f32, &field, &ext, &progress))
        return NULL;
    if (progress != Py_None && !PyCallable_Check(progress)) {
        PyErr_SetString(PyExc_TypeError, "progress must be None or a callable (files, records)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(paths, "paths must be a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = fast_size(seq);
    const char **v = PyMem_Calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyUnicode_AsUTF8AndSize(fast_item(seq, i), NULL);
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
    index_progress ip = {progress, 0.0, 0, 0, {NULL, NULL, NULL}}; /* (the first file shows) */
    if (progress != Py_None) {
        o.on_progress = on_index_file;
        o.progress_ctx = &ip;
    }
    stk_error err = {0};
    uint64_t records = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_index_build(v, (size_t)n, out, &o, &records, &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    Py_DECREF(seq);
    if (ip.exc[0] || (rc == 0 && progress != Py_None && index_progress_call(&ip))) {
        PyErr_Restore(ip.exc[0], ip.exc[1], ip.exc[2]);
        return NULL;
    }
    if (rc) return raise_stk(rc, &err);
    return PyLong_FromUnsignedLongLong(records);
}
