/*
 * stats.c: what the loader tells about its work.  The statistics per stage
 * (counted by the workers and the consumer as they go), the last sample
 * replaced under on_error = skip, and the trace: its start, stop, the
 * caller's own spans and the Chrome trace file (trace/trace.c writes it).
 * The names of the NVTX ranges the stages open live here too.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <string.h>

const char *const stk__ld_nvtx_names[STK__EV_KINDS] = {
    "stoker batch", "stoker plan", "stoker verify", "stoker read", "stoker assemble",
    "stoker group load", "", "stoker next", ""};

/* ---- tracing ---- */

uint64_t stk_now_ns(void) { return stk__now_ns(); }

int stk_loader_trace_start(stk_loader *ld, uint32_t max_spans, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_trace_start: NULL loader");
    return stk__trace_start(&ld->trace, max_spans, err);
}

void stk_loader_trace_stop(stk_loader *ld) {
    if (ld) stk__trace_stop(&ld->trace);
}

int stk_loader_trace_span(stk_loader *ld, const char *name, uint64_t t0_ns, uint64_t t1_ns) {
    if (!ld || !name || t1_ns < t0_ns) return -EINVAL;
    if (stk__tracing(&ld->trace))
        stk__trace_add(&ld->trace, ld->trace.nbufs - 1, STK__EV_USER, t0_ns, t1_ns, STK__EV_NONE,
                       STK__EV_NONE, name);
    return 0;
}

int stk_loader_trace_write(stk_loader *ld, const char *path, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_trace_write: NULL loader");
    return stk__trace_write(&ld->trace, path, err);
}

/* ---- the series ---- */

#define SERIES_EVERY_US 250u
#define SERIES_POINTS 1024u

static void series_restart(stk_loader *ld) {
    ld->series_n = 0;
    ld->series_every = ld->series_every0;
    memset(&ld->series_now, 0, sizeof ld->series_now);
    ld->series_t0 = stk__now_ns();
}

int stk_loader_series_start(stk_loader *ld, uint32_t every_us, uint32_t max_points,
                            stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_series_start: NULL loader");
    uint32_t cap = max_points ? STK__MAX(max_points, 2u) : SERIES_POINTS;
    if (cap != ld->series_cap) {
        stk_series_point *p = stk__malloc((size_t)cap * sizeof *p);
        if (!p)
            return stk__err(err, -ENOMEM, "out of memory for a series of %u points",
                            (unsigned)cap);
        stk__free(ld->series);
        ld->series = p;
        ld->series_cap = cap;
    }
    ld->series_every0 = (uint64_t)(every_us ? every_us : SERIES_EVERY_US) * 1000u;
    series_restart(ld);
    return 0;
}

bool stk__loader_series_on(const stk_loader *ld) { return ld->series != NULL; }

void stk_loader_series_stop(stk_loader *ld) {
    if (!ld) return;
    stk__free(ld->series);
    ld->series = NULL;
    ld->series_cap = 0;
    ld->series_n = 0;
}

/* Adds the point of the counters now.  A full series keeps every other
 * point, counted back from the newest so that it stays (the odd indexes of
 * an even count, the even ones of an odd count), and doubles the spacing. */
static void series_add(stk_loader *ld, uint64_t t) {
    if (ld->series_n == ld->series_cap) {
        uint32_t k = 0;
        for (uint32_t i = 1 - (ld->series_n & 1u); i < ld->series_n; i += 2)
            ld->series[k++] = ld->series[i];
        ld->series_n = k;
        ld->series_every *= 2;
    }
    stk_loader_stats st;
    stk_loader_stats_get(ld, &st);
    stk_series_point *p = &ld->series[ld->series_n++];
    *p = ld->series_now;
    p->t_ns = t - ld->series_t0;
    p->calls = st.wait.count;
    p->ready_sum = st.ready_sum;
}

void stk__loader_series_count(stk_loader *ld, const stk_batch *b, uint64_t t0, uint64_t t1) {
    stk_series_point *now = &ld->series_now;
    now->wait_ns += t1 - t0;
    if (!b) return;
    now->batches++;
    now->samples += stk_batch_size(b);
    for (size_t i = 0; i < stk_batch_num_fields(b); i++) {
        stk_batch_field bf;
        if (stk_batch_field_get(b, i, &bf) == 0) now->bytes += bf.bytes;
    }
    uint64_t last = ld->series_n ? ld->series[ld->series_n - 1].t_ns + ld->series_t0
                                 : ld->series_t0;
    if (t1 - last >= ld->series_every) series_add(ld, t1);
}

size_t stk_loader_series(stk_loader *ld, const stk_series_point **points) {
    if (points) *points = NULL;
    if (!ld || !ld->series) return 0;
    uint64_t last = ld->series_n ? ld->series[ld->series_n - 1].batches : 0;
    if (ld->series_now.batches > last) series_add(ld, stk__now_ns());
    if (points) *points = ld->series;
    return ld->series_n;
}

/* ---- statistics ---- */

static void stage_add(stk_stage_stats *a, const stk_stage_stats *b) {
    a->count += b->count;
    a->bytes += b->bytes;
    a->busy_ns += b->busy_ns;
}

/* A hooked loader's parts (a mixture's sources) did its reading: their
 * stages count as its own, and their batches and waits too where the
 * consumer takes their batches (homogeneous ones handed out). */
static void add_parts(const stk_loader *ld, stk_loader_stats *o) {
    for (size_t i = 0; i < ld->nparts; i++) {
        stk_loader_stats p;
        stk_loader_stats_get(ld->parts[i], &p);
        stage_add(&o->plan, &p.plan);
        stage_add(&o->io, &p.io);
        stage_add(&o->assemble, &p.assemble);
        stage_add(&o->verify, &p.verify);
        stage_add(&o->decode, &p.decode);
        stage_add(&o->warm_up, &p.warm_up);
        o->warm_up_bytes += p.warm_up_bytes;
        o->warm_up_done = o->warm_up_done && p.warm_up_done;
        o->groups_loaded += p.groups_loaded;
        o->skipped += p.skipped;
        o->max_inflight = STK__MAX(o->max_inflight, p.max_inflight);
        if (!ld->parts[i]->drawn) o->threads += p.threads;
        if (ld->parts_consumed) {
            stage_add(&o->wait, &p.wait);
            o->batches += p.batches;
            o->samples += p.samples;
            o->ready_sum += p.ready_sum;
        }
    }
}

void stk_loader_stats_get(const stk_loader *ld, stk_loader_stats *o) {
    memset(o, 0, sizeof *o);
    if (!ld) return;
    o->plan = (stk_stage_stats){ld->st_plan_n, 0, ld->st_plan_ns};
    o->io = (stk_stage_stats){ld->st_io_n, ld->st_io_bytes, ld->st_io_ns};
    o->assemble = (stk_stage_stats){ld->st_asm_n, ld->st_asm_bytes, ld->st_asm_ns};
    o->wait = (stk_stage_stats){ld->st_wait_n, 0, ld->st_wait_ns};
    o->verify = (stk_stage_stats){ld->st_ver_n, ld->st_ver_bytes, ld->st_ver_ns};
    o->decode = (stk_stage_stats){ld->st_dec_n, ld->st_dec_bytes, ld->st_dec_ns};
    o->skipped = ld->st_skipped;
    o->batches = ld->st_batches;
    o->samples = ld->st_samples;
    o->elapsed_ns = stk__now_ns() - ld->st_t0;
    o->ready_sum = ld->st_ready_sum;
    o->ring_slots = ld->R;
    o->threads = (uint32_t)ld->nw;
    o->groups_loaded = ld->st_groups;
    uint64_t m = 0;
    for (int i = 0; i < ld->nw; i++)
        if (ld->w[i].io) m = STK__MAX(m, ld->w[i].io->max_inflight);
    o->max_inflight = m;
    bool done;
    stk__warm_stats(ld->warm, &o->warm_up.count, &o->warm_up.bytes, &o->warm_up.busy_ns, &done);
    o->warm_up_bytes = ld->warm_total;
    o->warm_up_done = done;
    add_parts(ld, o);
}

uint64_t stk_loader_last_skip(stk_loader *ld, stk_error *out) {
    if (!ld) return 0;
    pthread_mutex_lock(&ld->mu);
    if (out) *out = ld->last_skip;
    uint64_t n = ld->st_skipped;
    pthread_mutex_unlock(&ld->mu);
    return n;
}

void stk_loader_stats_reset(stk_loader *ld) {
    if (!ld) return;
    ld->st_plan_n = ld->st_plan_ns = ld->st_io_n = ld->st_io_bytes = ld->st_io_ns = 0;
    ld->st_asm_n = ld->st_asm_bytes = ld->st_asm_ns = ld->st_wait_n = ld->st_wait_ns = 0;
    ld->st_dec_n = ld->st_dec_bytes = ld->st_dec_ns = 0;
    ld->st_batches = ld->st_samples = ld->st_ready_sum = ld->st_groups = 0;
    ld->st_ver_n = ld->st_ver_bytes = ld->st_ver_ns = 0;
    ld->st_skipped = 0;
    ld->st_t0 = stk__now_ns();
    if (ld->series) series_restart(ld);
    for (size_t i = 0; i < ld->nparts; i++) stk_loader_stats_reset(ld->parts[i]);
}

void stk__loader_set_parts(stk_loader *ld, stk_loader *const *parts, size_t n, bool consumed) {
    ld->parts = parts;
    ld->nparts = n;
    ld->parts_consumed = consumed;
}
