/*
 * stats.c: the Loader's methods that look at it rather than drive it: its
 * per-stage counters and skipped samples, tracing (a Chrome trace of its
 * threads), and what stoker.profile needs: the limit the data allows and
 * the diagnosis of a run (stk_diagnose), the series of a run over time
 * and the report as a page (stk_report_write_html).
 */
#include "ext.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
        "{sNsNsNsNsNsKsKsdsdsIsIsKsKsssKsNsKsOsN}", "plan", stage(&s.plan), "io", stage(&s.io),
        "assemble", stage(&s.assemble), "wait", stage(&s.wait), "verify", stage(&s.verify),
        "batches", s.batches, "samples", s.samples, "elapsed", (double)s.elapsed_ns / 1e9,
        "ready_mean", s.wait.count ? (double)s.ready_sum / (double)s.wait.count : 0.0,
        "ring_slots", s.ring_slots, "threads", s.threads, "groups_loaded", s.groups_loaded,
        "max_inflight", s.max_inflight, "backend",
        stk_backend_name(stk_loader_backend(self->ld)), "skipped", s.skipped, "warm_up",
        stage(&s.warm_up), "warm_up_bytes", s.warm_up_bytes, "warm_up_done",
        s.warm_up_done ? Py_True : Py_False, "decode", stage(&s.decode));
}

PyObject *loader_stats_reset(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (enter_c(self)) return NULL;  /* (consumer-side: not during another thread's next) */
    stk_loader_stats_reset(self->ld);
    leave_c(self);
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
        "{sdsdsdsdsdsdsdsdsdsdsdsdsssssIsIss}", "seconds", d.seconds, "batches_per_s",
        d.batches_per_s, "samples_per_s", d.samples_per_s, "bytes_per_s", d.bytes_per_s,
        "plan", d.share_plan, "io", d.share_io, "assemble", d.share_assemble, "verify",
        d.share_verify, "idle", d.share_idle, "stall", d.stall, "limit_bytes_per_s",
        d.limit_bytes_per_s, "of_limit", d.of_limit, "verdict", d.verdict_name, "next", d.next,
        "threads", st.threads, "ring_slots", st.ring_slots, "backend",
        stk_backend_name(stk_loader_backend(self->ld)));
}

/* ---- the series and the page ---- */

/* series_start(every_us, max_points): stk_loader_series_start. */
PyObject *loader_series_start(LoaderObject *self, PyObject *args) {
    if (check_process(self)) return NULL;
    unsigned int every_us = 0, max_points = 0;
    if (!PyArg_ParseTuple(args, "|II", &every_us, &max_points)) return NULL;
    stk_error err = {0};
    if (enter_c(self)) return NULL;
    int rc = stk_loader_series_start(self->ld, every_us, max_points, &err);
    leave_c(self);
    if (rc) return raise_stk(rc, &err);
    Py_RETURN_NONE;
}

/* series() -> [(t_ns, batches, samples, bytes, wait_ns, calls, ready_sum)]. */
PyObject *loader_series(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (enter_c(self)) return NULL;  /* (the points are not moved meanwhile) */
    const stk_series_point *p;
    size_t n = stk_loader_series(self->ld, &p);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(KKKKKKK)", p[i].t_ns, p[i].batches, p[i].samples,
                                    p[i].bytes, p[i].wait_ns, p[i].calls, p[i].ready_sum);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, t);
    }
    leave_c(self);
    return list;
}

PyObject *loader_series_stop(LoaderObject *self, PyObject *unused) {
    (void)unused;
    if (enter_c(self)) return NULL;
    stk_loader_series_stop(self->ld);
    leave_c(self);
    Py_RETURN_NONE;
}

/* d[key] as a double; -1 with an exception naming the key when it is
 * missing or not a number. */
static int get_double(PyObject *d, const char *key, double *out) {
    PyObject *v = PyMapping_GetItemString(d, key);
    if (!v) return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "report: %s must be a number", key);
        return -1;
    }
    return 0;
}

/* d[key] as UTF-8, borrowed from a str that `keep` holds a reference to;
 * None gives NULL. */
static int get_str(PyObject *d, const char *key, const char **out, PyObject *keep) {
    PyObject *v = PyMapping_GetItemString(d, key);
    if (!v) return -1;
    int rc = PyList_Append(keep, v);
    Py_DECREF(v);
    if (rc) return -1;
    *out = NULL;
    if (v == Py_None) return 0;
    return (*out = PyUnicode_AsUTF8AndSize(v, NULL)) ? 0 : -1;
}

/* A run of the report from its dict: name, diagnosis (the dict diagnose
 * gives), threads, ring_slots, step_seconds and series (as series()
 * gives). */
static int get_run(PyObject *d, stk_report_run *run, stk_series_point **pts, PyObject *keep) {
    PyObject *diag = PyMapping_GetItemString(d, "diagnosis");
    if (!diag) return -1;
    int rc = PyList_Append(keep, diag);
    Py_DECREF(diag);
    if (rc) return -1;
    stk_diagnosis *g = &run->diagnosis;
    double threads, slots;
    const char *verdict, *next;
    if (get_str(d, "name", &run->name, keep) || get_double(d, "threads", &threads) ||
        get_double(d, "ring_slots", &slots) || get_double(d, "step_seconds", &run->step_seconds) ||
        get_double(diag, "seconds", &g->seconds) ||
        get_double(diag, "batches_per_s", &g->batches_per_s) ||
        get_double(diag, "samples_per_s", &g->samples_per_s) ||
        get_double(diag, "bytes_per_s", &g->bytes_per_s) ||
        get_double(diag, "plan", &g->share_plan) || get_double(diag, "io", &g->share_io) ||
        get_double(diag, "assemble", &g->share_assemble) ||
        get_double(diag, "verify", &g->share_verify) ||
        get_double(diag, "idle", &g->share_idle) || get_double(diag, "stall", &g->stall) ||
        get_double(diag, "limit_bytes_per_s", &g->limit_bytes_per_s) ||
        get_double(diag, "of_limit", &g->of_limit) ||
        get_str(diag, "verdict", &verdict, keep) || get_str(diag, "next", &next, keep))
        return -1;
    run->threads = (uint32_t)threads;
    run->ring_slots = (uint32_t)slots;
    g->verdict = STK_VERDICT_UNKNOWN;
    for (int v = 0; v <= STK_VERDICT_COMPUTE_BOUND; v++)
        if (verdict && !strcmp(verdict, stk_verdict_name((stk_verdict)v))) g->verdict = v;
    g->verdict_name = stk_verdict_name(g->verdict);
    snprintf(g->next, sizeof g->next, "%s", next ? next : "");
    PyObject *series = PyMapping_GetItemString(d, "series");
    if (!series) return -1;
    PyObject *seq = PySequence_Fast(series, "report: a run's series must be a sequence");
    Py_DECREF(series);
    if (!seq) return -1;
    Py_ssize_t n = fast_size(seq);
    *pts = n ? PyMem_Calloc((size_t)n, sizeof **pts) : NULL;
    if (n && !*pts) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        stk_series_point *p = &(*pts)[i];
        if (!PyArg_ParseTuple(fast_item(seq, i), "KKKKKKK", &p->t_ns, &p->batches,
                              &p->samples, &p->bytes, &p->wait_ns, &p->calls, &p->ready_sum)) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    run->series = *pts;
    run->npoints = (size_t)n;
    return 0;
}

/* report_html(path, report): stk_report_write_html, from a dict with
 * title, backend, limit_name, resident, hint and runs (a list of one or
 * two run dicts, as get_run reads them). */
PyObject *py_report_html(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    PyObject *d;
    if (!PyArg_ParseTuple(args, "sO", &path, &d)) return NULL;
    PyObject *keep = PyList_New(0), *runs = NULL, *seq = NULL, *result = NULL;
    stk_report_run run[2];
    stk_series_point *pts[2] = {NULL, NULL};
    stk_report r;
    memset(&r, 0, sizeof r);
    memset(run, 0, sizeof run);
    if (!keep || get_str(d, "title", &r.title, keep) || get_str(d, "backend", &r.backend, keep) ||
        get_str(d, "limit_name", &r.limit_what, keep) || get_str(d, "hint", &r.hint, keep) ||
        get_double(d, "resident", &r.resident) || !(runs = PyMapping_GetItemString(d, "runs")) ||
        !(seq = PySequence_Fast(runs, "report: runs must be a sequence")))
        goto done;
    Py_ssize_t n = fast_size(seq);
    if (n < 1 || n > 2) {
        PyErr_SetString(InvalidArgument, "report: one or two runs");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (get_run(fast_item(seq, i), &run[i], &pts[i], keep)) goto done;
    r.runs = run;
    r.nruns = (size_t)n;
    stk_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_report_write_html(&r, path, &err);
    Py_END_ALLOW_THREADS
    if (rc) raise_stk(rc, &err);
    else result = Py_NewRef(Py_None);
done:
    PyMem_Free(pts[0]);
    PyMem_Free(pts[1]);
    Py_XDECREF(seq);
    Py_XDECREF(runs);
    Py_XDECREF(keep);
    return result;
}
