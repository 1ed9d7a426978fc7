/*
 * options.c: a Loader's arguments, as stoker/__init__.py passes them
 * (checked there, in this order, positionally), turned into libstoker's
 * options: stk_open_options and stk_loader_options.  The
 * same arguments give count(): a loader's counts without opening it.
 */
#include "ext.h"

/* The arguments as PyArg_ParseTupleAndKeywords fills them; the defaults
 * are libstoker's. */
typedef struct {
    const char *path, *root, *cache_dir;
    PyObject *fields, *valid_field, *valid_rules, *decode;
    unsigned int batch, block_group, rank, world, prefetch, qd, max_open, gpu_slots;
    unsigned int split_index, split_count, streams;
    unsigned long long window, stride, seed, epoch, bb, bs, budget, max_skips, resident;
    unsigned long long cache_budget;
    double remote_timeout;
    int valid, order, backend, pad, drop_last, direct, threads, verify, on_error, device;
    int warm_up;
} loader_args;

static int loader_args_parse(PyObject *args, PyObject *kw, loader_args *a) {
    static char *kwlist[] = {"path", "batch_size", "fields", "window", "stride", "valid_field",
                             "valid", "order", "seed", "epoch", "block_bytes", "block_samples",
                             "block_group", "rank", "world_size", "pad", "drop_last", "backend",
                             "direct", "threads", "prefetch", "queue_depth", "memory_budget",
                             "verify", "on_error", "max_skips", "max_open_files", "device",
                             "gpu_slots", "resident_budget", "warm_up", "split_index",
                             "split_count", "root", "cache_dir", "cache_budget", "streams",
                             "valid_rules", "remote_timeout", "decode", NULL};
    *a = (loader_args){.batch = 32, .fields = Py_None, .stride = 1, .valid_field = Py_None,
                       .order = 2, .bb = 4u << 20, .block_group = 16, .world = 1, .qd = 64,
                       .budget = 1ull << 30, .verify = 1, .max_skips = 100, .device = -1,
                       .gpu_slots = 3, .split_count = 1, .cache_budget = STK_CACHE_BUDGET_AUTO,
                       .valid_rules = Py_None, .decode = Py_None};
    return PyArg_ParseTupleAndKeywords(
               args, kw, "s|IOKKOiiKKKKIIIppipiIIKpiKIiIKiIIzzKIOdO", kwlist, &a->path, &a->batch,
               &a->fields, &a->window, &a->stride, &a->valid_field, &a->valid, &a->order,
               &a->seed, &a->epoch, &a->bb, &a->bs, &a->block_group, &a->rank, &a->world,
               &a->pad, &a->drop_last, &a->backend, &a->direct, &a->threads, &a->prefetch,
               &a->qd, &a->budget, &a->verify, &a->on_error, &a->max_skips, &a->max_open,
               &a->device, &a->gpu_slots, &a->resident, &a->warm_up, &a->split_index,
               &a->split_count, &a->root, &a->cache_dir, &a->cache_budget, &a->streams,
               &a->valid_rules, &a->remote_timeout, &a->decode)
               ? 0
               : -1;
}

/* `fields` (None, or a sequence of str) as c->lo.fields.  The strings stay
 * alive while `fields` does.  Returns 0 or -1. */
static int config_fields(loader_config *c, PyObject *fields) {
    if (fields == Py_None) return 0;
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence of names");
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    if (n > 256) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "fields: at most 256");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = fast_item(seq, i);
        if (!PyUnicode_Check(it)) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "fields: every entry must be a str");
            return -1;
        }
        if (!(c->field_names[i] = PyUnicode_AsUTF8AndSize(it, NULL))) {
            Py_DECREF(seq);
            return -1;
        }
    }
    c->lo.fields = c->field_names;
    c->lo.nfields = (size_t)n;
    Py_DECREF(seq); /* the strings stay alive: `fields` holds them */
    return 0;
}

/* `rules` (None, or a sequence of (field, test, last, lo, hi) tuples, as
 * stoker/_loader.py builds them) as c->lo.valid_rules.  The field names
 * stay alive while `rules` does.  Returns 0 or -1. */
static int config_rules(loader_config *c, PyObject *rules) {
    if (rules == Py_None) return 0;
    PyObject *seq = PySequence_Fast(rules, "valid_rules must be a sequence of tuples");
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    if (n > (Py_ssize_t)(sizeof c->rules / sizeof *c->rules)) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "valid: at most 64 rules");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        stk_valid_rule *r = &c->rules[i];
        int test;
        unsigned long long last;
        long long lo, hi;
        if (!PyArg_ParseTuple(fast_item(seq, i), "siKLL", &r->field, &test, &last,
                              &lo, &hi)) {
            Py_DECREF(seq);
            return -1;
        }
        r->test = (stk_valid)test;
        r->last = last;
        r->lo = lo;
        r->hi = hi;
    }
    c->lo.valid_rules = c->rules;
    c->lo.nvalid_rules = (size_t)n;
    Py_DECREF(seq); /* the names stay alive: `rules` holds them */
    return 0;
}

/* `decode` (None, or a sequence of decode spec tuples, as stoker/_media.py
 * builds them) as c->lo.decode.  The field names stay alive while `decode`
 * does.  Returns 0 or -1. */
static int config_decode(loader_config *c, PyObject *decode) {
    if (decode == Py_None) return 0;
    PyObject *seq = PySequence_Fast(decode, "decode must be a sequence of specs");
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    if (n > (Py_ssize_t)(sizeof c->decodes / sizeof *c->decodes)) {
        Py_DECREF(seq);
        PyErr_SetString(InvalidArgument, "decode: at most 64 fields");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (decode_spec_parse(fast_item(seq, i), &c->decodes[i])) {
            Py_DECREF(seq);
            return -1;
        }
    c->lo.decode = c->decodes;
    c->lo.ndecode = (size_t)n;
    Py_DECREF(seq); /* the names stay alive: `decode` holds them */
    return 0;
}

static void config_loader_options(stk_loader_options *o, const loader_args *a) {
    stk_loader_options_init(o);
    o->split_index = a->split_index;
    o->split_count = a->split_count;
    o->max_open_files = a->max_open;
    o->warm_up = (stk_warm_up)a->warm_up;
    o->batch_size = a->batch;
    o->window = a->window;
    o->stride = a->stride;
    o->valid = (stk_valid)a->valid;
    o->order = (stk_order)a->order;
    o->seed = a->seed;
    o->epoch = a->epoch;
    o->block_bytes = a->bb;
    o->block_samples = a->bs;
    o->block_group = a->block_group;
    o->rank = a->rank;
    o->world_size = a->world;
    o->streams = a->streams;
    o->pad = a->pad;
    o->drop_last = a->drop_last;
    o->backend = (stk_backend)a->backend;
    o->direct = a->direct;
    o->threads = a->threads;
    o->prefetch = a->prefetch;
    o->queue_depth = a->qd;
    o->memory_budget = a->budget;
    o->verify = a->verify;
    o->on_error = (stk_on_error)a->on_error;
    o->max_skips = a->max_skips;
}

int loader_config_parse(PyObject *args, PyObject *kw, loader_config *c) {
    loader_args a;
    if (loader_args_parse(args, kw, &a)) return -1;
    c->path = a.path;
    stk_open_options_init(&c->open);
    c->open.root = a.root;
    c->open.cache_dir = a.cache_dir;
    c->open.cache_budget = a.cache_budget;
    c->open.remote_timeout = a.remote_timeout;
    config_loader_options(&c->lo, &a);
    if (a.valid_field != Py_None &&
        !(c->lo.valid_field = PyUnicode_AsUTF8AndSize(a.valid_field, NULL)))
        return -1;
    if (config_fields(c, a.fields)) return -1;
    if (config_rules(c, a.valid_rules)) return -1;
    if (config_decode(c, a.decode)) return -1;
    c->lo.device = a.device;
    c->lo.device_buffers = a.gpu_slots;
    c->lo.device_resident_budget = a.resident;
    return 0;
}

/* count(<the arguments of Loader>) -> {"epoch_samples", "rank_samples",
 * "rank_batches"}: what a Loader opened with them would count, from the
 * dataset alone (stk_loader_count): no thread starts, no buffer is
 * allocated.  The device options are not used (the counts are the same). */
PyObject *py_loader_count(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    loader_config c;
    if (loader_config_parse(args, kw, &c)) return NULL;
    stk_error err = {0};
    uint64_t es = 0, rs = 0, rb = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    stk_dataset *ds = NULL;
    rc = stk_dataset_open_with(c.path, &c.open, &ds, &err);
    if (rc == 0) rc = stk_loader_count(ds, &c.lo, &es, &rs, &rb, &err);
    stk_dataset_close(ds);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    return Py_BuildValue("{sKsKsK}", "epoch_samples", (unsigned long long)es, "rank_samples",
                         (unsigned long long)rs, "rank_batches", (unsigned long long)rb);
}
