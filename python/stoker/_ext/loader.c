/*
 * loader.c: the Loader type, around stk_loader (batches in host memory or
 * on a device, through the same calls) and the stk_dataset it reads:
 * opening it, handing out batches (waiting with the GIL released, in
 * slices so that Ctrl-C is seen), epochs, the resume state, and closing it
 * while batches may still be alive.  Its counters and tracing are in
 * stats.c.
 */
#include "ext.h"

#include <errno.h>
#include <unistd.h>

void loader_teardown(LoaderObject *self) {
    stk_loader *ld = self->ld;
    stk_dataset *ds = self->ds, **mix = self->mix_ds;
    size_t nmix = self->nmix;
    self->ld = NULL;
    self->ds = NULL;
    self->mix_ds = NULL;
    self->nmix = 0;
    if (self->pid == getpid()) {
        /* Without the GIL: closing joins the loader's threads, and a
         * remote dataset's read-ahead, which may be waiting out a round in
         * flight (up to 64 MiB, or a slow link's timeouts and retries). */
        Py_BEGIN_ALLOW_THREADS
        if (ld) stk_loader_close(ld);
        if (ds) stk_dataset_close(ds);
        for (size_t i = 0; i < nmix; i++)
            if (mix[i]) stk_dataset_close(mix[i]);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(mix);
}

int check_process(LoaderObject *self) {
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

/* ---- one call at a time without the GIL ---- */

static PyObject *loader_close(LoaderObject *self, PyObject *unused);

/* Before a call that uses self->ld with the GIL released: waits (the GIL
 * released, in naps of a millisecond) while another thread is in one, then
 * marks this thread as in it.  0, or -1 with an exception (the loader was
 * closed meanwhile, or this thread is already in one: a signal handler
 * that called the loader during next()'s wait). */
int enter_c(LoaderObject *self) {
    unsigned long me = PyThread_get_thread_ident();
    for (;;) {
        if (check_process(self)) return -1;
        if (self->stop_req) {
            PyErr_SetString(InvalidArgument, "the loader is closed");
            return -1;
        }
        if (!self->busy) break;
        if (self->busy_thread == me) {
            PyErr_SetString(InvalidArgument,
                            "the loader is already in a call on this thread (a signal handler "
                            "called it while next() waited); only close() may be called there");
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
    self->busy = 1;
    self->busy_thread = me;
    return 0;
}

/* After it: a close() asked for from this very thread meanwhile is done
 * now. */
void leave_c(LoaderObject *self) {
    self->busy = 0;
    self->busy_thread = 0;
    if (self->close_deferred) {
        self->close_deferred = 0;
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *r = loader_close(self, NULL);
        Py_XDECREF(r);
        if (!r) PyErr_Clear();
        PyErr_Restore(t, v, tb);
    }
}

/* ---- open ---- */

/* Opens the dataset and the loader of `c` with the GIL released.  Returns
 * 0, or -1 with an exception set. */
static int loader_open(LoaderObject *self, const loader_config *c) {
    stk_error err = {0};
    int rc;
    stk_dataset *ds = NULL;
    stk_loader *ld = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_open_with(c->path, &c->open, &ds, &err);
    if (rc == 0) {
        rc = stk_loader_open(ds, &c->lo, &ld, &err);
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
    self->device = stk_loader_device(ld);
    self->pid = getpid();
    return 0;
}

/* The tuple of the field names each batch holds. */
static PyObject *field_names(stk_loader *ld) {
    size_t nf = stk_loader_num_fields(ld);
    PyObject *names = PyTuple_New((Py_ssize_t)nf);
    for (size_t i = 0; names && i < nf; i++) {
        PyObject *s = PyUnicode_FromString(stk_loader_field(ld, i)->name);
        if (!s) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SetItem(names, (Py_ssize_t)i, s); /* steals s; names is a new tuple */
    }
    return names;
}

/* Loader(path, batch_size, fields, window, ...): the arguments of
 * options.c. */
static int loader_init(LoaderObject *self, PyObject *args, PyObject *kw) {
    loader_config c;
    if (loader_config_parse(args, kw, &c)) return -1;
    if (loader_open(self, &c)) return -1;
    PyObject *old = self->names; /* __init__ called again */
    self->names = field_names(self->ld);
    Py_XDECREF(old);
    return self->names ? 0 : -1;
}

static void loader_dealloc(LoaderObject *self) {
    loader_teardown(self);
    Py_XDECREF(self->names);
    free_instance((PyObject *)self);
}

/* ---- batches ---- */

/* The next batch, waiting with the GIL released, in slices, so that
 * signals (Ctrl-C) are seen.  Returns 0 with *out set, STK_END, or -1 with
 * an exception. */
static int next_c_batch(LoaderObject *self, stk_batch **out) {
    stk_error err = {0};
    int rc;
    if (enter_c(self)) return -1;
    for (;;) {
        if (self->stop_req) {
            /* close() was called from another thread, or from a signal
             * handler on this one, while this call waited. */
            leave_c(self);
            PyErr_SetString(InvalidArgument, "the loader was closed while next() waited");
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_next_timeout(self->ld, out, 100, &err);
        Py_END_ALLOW_THREADS
        if (rc == -EBUSY && self->device < 0) {
            /* The caller keeps every batch it was given; that is allowed
             * (arrays are views that must stay valid), so the ring grows.
             * Device buffers cannot: their -EBUSY is raised. */
            int r2;
            Py_BEGIN_ALLOW_THREADS
            r2 = stk_loader_add_buffer(self->ld, &err);
            Py_END_ALLOW_THREADS
            if (r2) {
                leave_c(self);
                raise_stk(r2, &err);
                return -1;
            }
            continue;
        }
        if (rc == 0 && self->stop_req) {
            /* Closed as the batch arrived: it goes back, undelivered. */
            stk_loader_unget(self->ld, *out);
            *out = NULL;
            continue;
        }
        if (rc != -ETIMEDOUT) break;
        if (PyErr_CheckSignals()) {
            leave_c(self);
            return -1;
        }
    }
    leave_c(self);
    if (rc == 0 || rc == STK_END) return rc;
    raise_stk(rc, &err);
    return -1;
}

/* next_batch(): (dict of Array, sample ids as bytes), and for a mixture
 * (..., sources as an Array, sources as bytes); None at the end of the
 * epoch, or NULL with an exception.  The arrays of a device batch are in
 * device memory; the sample ids and sources are always on the host. */
static PyObject *loader_next_batch(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    self->pending = 0;
    stk_batch *b = NULL;
    int rc = next_c_batch(self, &b);
    if (rc == STK_END) Py_RETURN_NONE;
    if (rc) return NULL;
    BatchObject *bo = batch_new(self);
    if (!bo) {
        stk_loader_release(self->ld, b);
        return NULL;
    }
    bo->b = b;
    self->last = bo;
    self->pending = 1;
    /* (A mixture of homogeneous batches hands out its sources' batches,
     * each with its own fields.) */
    size_t nf = stk_batch_num_fields(b);
    stk_batch_field *f = PyMem_Calloc(nf ? nf : 1, sizeof *f);
    if (!f) {
        Py_DECREF((PyObject *)bo);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < nf; i++) stk_batch_field_get(b, i, &f[i]);
    int dev = stk_batch_device(b);
    PyObject *r = batch_result(bo, f, nf, stk_batch_size(b), stk_batch_sources(b),
                               stk_batch_samples(b),
                               dev < 0 ? kDLCPU : kDLCUDA, dev < 0 ? 0 : dev);
    PyMem_Free(f);
    return r;
}

/* unget_last(): puts back the last batch given while it is pending (an
 * exception came before the Python Loader held it); its old arrays are
 * detached from the buffer's ownership, which the batch's next delivery
 * takes.  True when put back. */
static PyObject *loader_unget_last(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    BatchObject *bo = self->last;
    int pending = self->pending;
    self->pending = 0;
    if (!pending || !bo || !bo->b || self->device >= 0) Py_RETURN_FALSE;
    if (stk_loader_unget(self->ld, bo->b) != 0) Py_RETURN_FALSE;
    bo->b = NULL;
    self->last = NULL;
    Py_RETURN_TRUE;
}

/* ---- epochs and state ---- */

static PyObject *loader_set_epoch(LoaderObject *self, PyObject *arg) {
    if (check_process(self)) return NULL;
    unsigned long long e = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    stk_error err = {0};
    int rc;
    if (enter_c(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_set_epoch(self->ld, e, &err);
    Py_END_ALLOW_THREADS
    leave_c(self);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

static PyObject *loader_fetch_epoch(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_error err = {0};
    uint64_t bytes = 0;
    int rc;
    if (enter_c(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_fetch_epoch(self->ld, &bytes, &err);
    Py_END_ALLOW_THREADS
    leave_c(self);
    if (rc) return raise_stk(rc, &err);
    return PyLong_FromUnsignedLongLong(bytes);
}

static PyObject *loader_save(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_state st;
    stk_loader_save(self->ld, &st);
    return Py_BuildValue("{sKsKsKsKsK}", "seed", st.seed, "epoch", st.epoch, "position",
                         st.position, "fingerprint", st.fingerprint, "streams", st.streams);
}

static PyObject *loader_restore(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    stk_loader_state st;
    unsigned long long a, b, c, d, e = 1;
    if (!PyArg_ParseTuple(args, "KKKK|K", &a, &b, &c, &d, &e)) return NULL;
    st.seed = a;
    st.epoch = b;
    st.position = c;
    st.fingerprint = d;
    st.streams = e;
    stk_error err = {0};
    int rc;
    if (enter_c(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_restore(self->ld, &st, &err);
    Py_END_ALLOW_THREADS
    leave_c(self);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

/* remote_stats(): a dict, or None for a local dataset. */
static PyObject *loader_remote_stats(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_remote_stats rs;
    if (stk_dataset_remote_stats(self->ds, &rs) != 0) Py_RETURN_NONE;
    PyObject *budget = rs.cache_limited ? PyLong_FromUnsignedLongLong(rs.cache_budget)
                                        : Py_NewRef(Py_None);
    if (!budget) return NULL;
    return Py_BuildValue("{sKsKsKsKsdsNsKsK}", "requests", (unsigned long long)rs.requests,
                         "retries", (unsigned long long)rs.retries, "bytes_fetched",
                         (unsigned long long)rs.bytes_fetched, "bytes_cached",
                         (unsigned long long)rs.bytes_cached, "network_seconds",
                         rs.network_seconds, "cache_budget", budget, "cache_peak",
                         (unsigned long long)rs.cache_peak, "bytes_evicted",
                         (unsigned long long)rs.bytes_evicted);
}

static PyObject *loader_counts(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    return Py_BuildValue("{sKsKsKsssisisK}", "epoch_samples", stk_loader_epoch_samples(self->ld),
                         "rank_samples", stk_loader_rank_samples(self->ld), "rank_batches",
                         stk_loader_rank_batches(self->ld), "backend",
                         stk_backend_name(stk_loader_backend(self->ld)), "device",
                         stk_loader_device(self->ld), "resident",
                         stk_loader_resident_bytes(self->ld) > 0, "resident_bytes",
                         (unsigned long long)stk_loader_resident_bytes(self->ld));
}

/* ---- close ---- */

static PyObject *loader_close(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (self->pid != getpid()) {
        /* A forked child owns none of the parent's threads: forget them. */
        self->ld = NULL;
        self->ds = NULL;
        Py_RETURN_NONE;
    }
    if (self->busy) {
        /* A call is using the C loader without the GIL: it is asked to
         * stop (next() gives up its wait within 100 ms), and the loader
         * closes once it is out, never under it. */
        self->stop_req = 1;
        if (self->busy_thread == PyThread_get_thread_ident()) {
            self->close_deferred = 1; /* a signal handler on the busy thread */
            Py_RETURN_NONE;
        }
        while (self->busy) {
            Py_BEGIN_ALLOW_THREADS
            usleep(1000);
            Py_END_ALLOW_THREADS
        }
    }
    self->stop_req = 1;
    if (self->live) {
        /* Batches still alive: the threads stop and every buffer not held
         * goes back now; the rest when the last batch goes. */
        self->closing = 1;
        if (self->ld) {
            /* Counted as one more live batch while the threads stop: the
             * GIL is released here, and the last batch dropped on another
             * thread meanwhile would otherwise tear the loader down under
             * stk_loader_stop (two joins of one thread, a hang, then a
             * loader freed in use).  Whichever comes last tears it down. */
            stk_loader *ld = self->ld;
            self->live++;
            Py_BEGIN_ALLOW_THREADS
            stk_loader_stop(ld);
            Py_END_ALLOW_THREADS
            if (--self->live == 0) loader_teardown(self);
        }
    } else {
        loader_teardown(self);
    }
    Py_RETURN_NONE;
}

static PyObject *loader_closed(LoaderObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->ld == NULL || self->closing);
}
static PyObject *loader_names(LoaderObject *self, void *c) {
    (void)c;
    if (!self->names) return PyTuple_New(0);
    Py_INCREF(self->names);
    return self->names;
}

/* {name: logical type} of the fields that have one (stk_field.type), by
 * the names batches use; empty once closed. */
static PyObject *loader_types(LoaderObject *self, void *c) {
    (void)c;
    PyObject *d = PyDict_New();
    if (!d || !self->ld || self->pid != getpid()) return d;
    size_t nf = stk_loader_num_fields(self->ld);
    for (size_t i = 0; i < nf; i++) {
        const stk_field *f = stk_loader_field(self->ld, i);
        if (!f || !f->type) continue;
        PyObject *t = PyUnicode_FromString(f->type);
        if (!t || PyDict_SetItemString(d, f->name, t)) {
            Py_XDECREF(t);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(t);
    }
    return d;
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
    {"series_start", (PyCFunction)loader_series_start, METH_VARARGS,
     "series_start(every_us=0, max_points=0): samples the consumer's counters over the run "
     "(stk_loader_series_start)."},
    {"series", (PyCFunction)loader_series, METH_NOARGS,
     "series() -> [(t_ns, batches, samples, bytes, wait_ns, calls, ready_sum)]."},
    {"series_stop", (PyCFunction)loader_series_stop, METH_NOARGS,
     "series_stop(): ends the series and frees it (stk_loader_series_stop)."},
    {"next_batch", (PyCFunction)loader_next_batch, METH_NOARGS,
     "Waits for the next batch: (dict of Array, sample ids as bytes[, sources as Array, "
     "as bytes]), or None at the end of the epoch."},
    {"set_epoch", (PyCFunction)loader_set_epoch, METH_O, "Starts an epoch from its beginning."},
    {"save", (PyCFunction)loader_save, METH_NOARGS, "The resume state as a dict."},
    {"fetch_epoch", (PyCFunction)loader_fetch_epoch, METH_NOARGS,
     "Fetches what the rest of the epoch reads into the cache; returns the bytes asked for."},
    {"restore", (PyCFunction)loader_restore, METH_VARARGS,
     "restore(seed, epoch, position, fingerprint, streams=1)"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "Per-stage counters."},
    {"stats_reset", (PyCFunction)loader_stats_reset, METH_NOARGS, "Zeroes the counters."},
    {"last_skip", (PyCFunction)loader_last_skip, METH_NOARGS,
     "(samples replaced so far, reason for the last one) under on_error='skip'."},
    {"counts", (PyCFunction)loader_counts, METH_NOARGS, "Sample and batch counts."},
    {"remote_stats", (PyCFunction)loader_remote_stats, METH_NOARGS,
     "What opening a remote dataset cost (a dict), or None for a local one."},
    {"unget_last", (PyCFunction)loader_unget_last, METH_NOARGS,
     "unget_last(): puts back the last batch given, undelivered"},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "Stops the threads; memory still referenced by batches is freed with them."},
    {NULL, NULL, 0, NULL}};

/* pending: whether the last batch given is not yet held by the Python
 * Loader.  Set to False by an attribute store, which (unlike a call) is no
 * point where the interpreter runs a signal handler: the hand-over is
 * atomic against Ctrl-C. */
static PyObject *loader_pending_get(LoaderObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->pending);
}
static int loader_pending_set(LoaderObject *self, PyObject *v, void *c) {
    (void)c;
    if (v == NULL || v != Py_False) {
        PyErr_SetString(PyExc_ValueError, "pending can only be set to False");
        return -1;
    }
    self->pending = 0;
    return 0;
}

static PyGetSetDef loader_getset[] = {
    {"pending", (getter)loader_pending_get, (setter)loader_pending_set,
     "whether the last batch given is not yet held by the caller", NULL},
    {"closed", (getter)loader_closed, NULL, "whether close() was called", NULL},
    {"field_names", (getter)loader_names, NULL, "the fields each batch holds", NULL},
    {"field_types", (getter)loader_types, NULL, "{name: logical type} of typed fields", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject *LoaderType;

/* The type's attributes cannot be set; it may be subclassed. */
static PyType_Slot loader_slots[] = {
    {Py_tp_dealloc, (void *)loader_dealloc},
    {Py_tp_doc, (void *)"The C loader; use stoker.Loader."},
    {Py_tp_init, (void *)loader_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_methods, loader_methods},
    {Py_tp_getset, loader_getset},
    {0, NULL}};

PyType_Spec LoaderSpec = {
    .name = "stoker._stoker.Loader",
    .basicsize = sizeof(LoaderObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = loader_slots,
};

/* ---- mixtures ---- */

/* open_mixture([(loader args, weight, count, names or None), ...], exhaust,
 * homogeneous, seed) -> Loader over the sources (stk_loader_open_mixture);
 * the first source's arguments give the mixture's batch size, rank, world
 * size, streams, epoch, threads and memory. */
PyObject *py_open_mixture(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *list;
    const char *exhaust;
    int homogeneous;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OspK", &list, &exhaust, &homogeneous, &seed)) return NULL;
    stk_mixture_options mo = {STK_MIX_STOP, homogeneous, seed};
    if (stk_mix_exhaust_parse(exhaust, &mo.exhaust)) {
        PyErr_Format(InvalidArgument, "exhaust must be 'stop', 'cycle' or 'all', not '%s'",
                     exhaust);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(list, "sources must be a list");
    if (!seq) return NULL;
    size_t n = (size_t)fast_size(seq);
    loader_config *cfg = PyMem_Calloc(n ? n : 1, sizeof *cfg);
    stk_mixture_source *src = PyMem_Calloc(n ? n : 1, sizeof *src);
    stk_dataset **ds = PyMem_Calloc(n ? n : 1, sizeof *ds);
    const char ***names = PyMem_Calloc(n ? n : 1, sizeof *names);
    LoaderObject *self = NULL;
    PyObject *out = NULL;
    if (!cfg || !src || !ds || !names) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *largs, *pnames;
        double weight;
        unsigned long long count;
        if (!PyArg_ParseTuple(fast_item(seq, (Py_ssize_t)i), "O!dKO", &PyTuple_Type,
                              &largs, &weight, &count, &pnames) ||
            loader_config_parse(largs, NULL, &cfg[i]))
            goto done;
        if (pnames != Py_None && !PyDict_Check(pnames)) {
            PyErr_SetString(PyExc_TypeError, "names must be a dict {field: name}");
            goto done;
        }
        src[i] = (stk_mixture_source){NULL, &cfg[i].lo, weight, count,
                                      pnames == Py_None ? NULL : (const char *const *)pnames};
    }
    stk_error err = {0};
    int rc = 0;
    stk_loader *ld = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = stk_dataset_open_with(cfg[i].path, &cfg[i].open, &ds[i], &err);
        src[i].ds = ds[i];
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_stk(rc, &err);
        goto done;
    }
    /* names: {field: name} becomes a name per field the source loads, in
     * its loader's order (its `fields`, else the dataset's). */
    for (size_t i = 0; i < n; i++) {
        PyObject *d = (PyObject *)src[i].names;
        src[i].names = NULL;
        if (!d) continue;
        size_t k = cfg[i].lo.fields ? cfg[i].lo.nfields : stk_dataset_num_fields(ds[i]);
        if (!(names[i] = PyMem_Calloc(k + 1, sizeof *names[i]))) {
            PyErr_NoMemory();
            goto done;
        }
        for (size_t j = 0; j < k; j++) {
            const char *f = cfg[i].lo.fields ? cfg[i].lo.fields[j] : stk_dataset_field(ds[i], j)->name;
            PyObject *v = PyDict_GetItemString(d, f); /* borrowed, lives in the caller's dict */
            if (v && !(names[i][j] = PyUnicode_AsUTF8AndSize(v, NULL))) goto done;
        }
        src[i].names = names[i];
    }
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_open_mixture(src, n, n ? &cfg[0].lo : NULL, &mo, &ld, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_stk(rc, &err);
        goto done;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(LoaderType, Py_tp_alloc);
    self = (LoaderObject *)alloc(LoaderType, 0);
    if (!self) {
        Py_BEGIN_ALLOW_THREADS
        stk_loader_close(ld);
        Py_END_ALLOW_THREADS
        goto done;
    }
    self->ld = ld;
    self->mix_ds = ds;
    self->nmix = n;
    ds = NULL;
    self->device = stk_loader_device(ld);
    self->pid = getpid();
    self->names = field_names(ld);
    if (self->names) out = (PyObject *)self;
    else Py_DECREF((PyObject *)self);
done:
    if (ds)
        for (size_t i = 0; i < n; i++) stk_dataset_close(ds[i]);
    for (size_t i = 0; names && i < n; i++) PyMem_Free(names[i]);
    PyMem_Free(names);
    PyMem_Free(ds);
    PyMem_Free(src);
    PyMem_Free(cfg);
    Py_DECREF(seq);
    return out;
}
