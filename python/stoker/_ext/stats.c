/*
 * stats.c: the Loader's methods that look at it rather than drive it: its
 * per-stage counters and skipped samples, tracing (a Chrome trace of its
 * threads), and what stoker.profile needs: the limit the data allows and
 * the diagnosis of a run (stk_diagnose).
 */
#include "ext.h"

#include <stdint.h>

/* ---- counters ---- */

static PyObject *stage(const stk_stage_stats *s) {
    return Py_BuildValue("{sKsKsd}", "count", s->count, "bytes", s->bytes, "seconds",
                         (double)s->busy_ns / 1e9);
}

PyObject *loader_stats(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_stats s;
    stk_loader_stats_get(self->ld, &s);
    return Py_BuildValue(
        "{sNsNsNsNsNsKsKsdsdsIsIsKsKsssKsNsKsO}", "plan", stage(&s.plan), "io", stage(&s.io),
        "assemble", stage(&s.assemble), "wait", stage(&s.wait), "verify", stage(&s.verify),
        "batches", s.batches, "samples", s.samples, "elapsed", (double)s.elapsed_ns / 1e9,
        "ready_mean", s.wait.count ? (double)s.ready_sum / (double)s.wait.count : 0.0,
        "ring_slots", s.ring_slots, "threads", s.threads, "groups_loaded", s.groups_loaded,
        "max_inflight", s.max_inflight, "backend",
        stk_backend_name(stk_loader_backend(self->ld)), "skipped", s.skipped, "warm_up",
        stage(&s.warm_up), "warm_up_bytes", s.warm_up_bytes, "warm_up_done",
        s.warm_up_done ? Py_True : Py_False);
}

PyObject *loader_stats_reset(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_stats_reset(self->ld);
    Py_RETURN_NONE;
}

PyObject *loader_last_skip(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_error e = {0};
    uint64_t n = stk_loader_last_skip(self->ld, &e);
    return Py_BuildValue("(Ks)", (unsigned long long)n, n ? e.message : "");
}

/* ---- tracing ---- */

PyObject *loader_trace_start(LoaderObject *self, PyObject *arg) {
    if (check_process(self)) return NULL;
    unsigned long n = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) return NULL;
    if (n > UINT32_MAX) {
        PyErr_SetString(InvalidArgument, "max_spans must be below 2**32");
        return NULL;
    }
    stk_error err = {0};
    int rc = stk_loader_trace_start(self->ld, (uint32_t)n, &err);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

PyObject *loader_trace_stop(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_loader_trace_stop(self->ld);
    Py_RETURN_NONE;
}

PyObject *loader_trace_span(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    const char *name;
    unsigned long long t0, t1;
    if (!PyArg_ParseTuple(args, "sKK", &name, &t0, &t1)) return NULL;
    if (stk_loader_trace_span(self->ld, name, t0, t1)) {
        PyErr_SetString(InvalidArgument, "trace_span: the span ends before it begins");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *loader_trace_write(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_trace_write(self->ld, path, &err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

/* ---- profile ---- */

/* measure_limit() -> (bytes/s, what it is, share of the data in the page
 * cache or -1): libstoker's one policy (stk_measure_limit). */
PyObject *loader_measure_limit(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (check_process(self)) return NULL;
    stk_limit l;
    Py_BEGIN_ALLOW_THREADS
    stk_measure_limit(self->ds, &l);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(dsd)", l.bytes_per_s, l.what, l.resident);
}

/* diagnose(bytes, seconds, limit, with_step) -> dict, from the loader's
 * stats now (stk_diagnose). */
PyObject *loader_diagnose(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    unsigned long long bytes;
    double seconds, limit;
    int with_step;
    if (!PyArg_ParseTuple(args, "Kddp", &bytes, &seconds, &limit, &with_step)) return NULL;
    stk_loader_stats st;
    stk_loader_stats_get(self->ld, &st);
    stk_diagnosis d;
    stk_diagnose(&st, stk_loader_backend(self->ld), bytes, seconds, limit, with_step, &d);
    return Py_BuildValue(
        "{sdsdsdsdsdsdsdsdsdsdsdsdsssssIss}", "seconds", d.seconds, "batches_per_s",
        d.batches_per_s, "samples_per_s", d.samples_per_s, "bytes_per_s", d.bytes_per_s,
        "plan", d.share_plan, "io", d.share_io, "assemble", d.share_assemble, "verify",
        d.share_verify, "idle", d.share_idle, "stall", d.stall, "limit_bytes_per_s",
        d.limit_bytes_per_s, "of_limit", d.of_limit, "verdict", d.verdict_name, "next", d.next,
        "threads", st.threads, "backend", stk_backend_name(stk_loader_backend(self->ld)));
}
