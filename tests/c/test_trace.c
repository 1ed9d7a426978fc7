/*
 * test_trace.c: the loader's Chrome trace.  The file must parse as JSON, name
 * each thread, put every stage on the thread that ran it, nest the stages of
 * a batch inside the batch's span (and the reads of a group load inside the
 * load) with no span crossing another's end, cover every batch of the epoch,
 * carry the consumer's waits and the caller's spans, count what did not fit,
 * and start afresh when tracing starts again.
 */
#include "test_loader_common.h"

#include <jansson.h>
#include <math.h>

typedef struct ev {
    long long tid;
    const char *name;
    int64_t ts, end; /* ns */
    long long batch; /* -1: none */
} ev;

typedef struct trace {
    json_t *root;
    ev *ev;
    size_t n;
    long long consumer;
    long long reader; /* block order's group reader, or -1 */
    long long workers[16];
    int nworkers;
    long long dropped;
} trace;

static int64_t us_to_ns(json_t *v) { return (int64_t)llround(json_number_value(v) * 1000.0); }

static void trace_load(trace *t, const char *path) {
    memset(t, 0, sizeof *t);
    json_error_t je;
    t->root = json_load_file(path, 0, &je);
    if (!t->root) fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
    CHECK(t->root);
    json_t *arr = json_object_get(t->root, "traceEvents");
    CHECK(json_is_array(arr));
    t->ev = calloc(json_array_size(arr) + 1, sizeof *t->ev);
    t->consumer = -1;
    t->reader = -1;
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        CHECK(ph && name);
        CHECK(json_is_integer(json_object_get(e, "pid")));
        long long tid = json_integer_value(json_object_get(e, "tid"));
        if (!strcmp(ph, "M")) {
            if (strcmp(name, "thread_name")) continue;
            const char *tn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            CHECK(tn);
            if (!strcmp(tn, "stoker consumer")) t->consumer = tid;
            else if (!strcmp(tn, "stoker reader")) t->reader = tid;
            else {
                CHECK(strncmp(tn, "stoker worker ", 14) == 0 && t->nworkers < 16);
                t->workers[t->nworkers++] = tid;
            }
            continue;
        }
        CHECK(!strcmp(ph, "X"));
        ev *x = &t->ev[t->n++];
        x->tid = tid;
        x->name = name;
        x->ts = us_to_ns(json_object_get(e, "ts"));
        x->end = x->ts + us_to_ns(json_object_get(e, "dur"));
        CHECK(x->ts >= 0 && x->end >= x->ts);
        json_t *b = json_object_get(json_object_get(e, "args"), "batch");
        x->batch = b ? json_integer_value(b) : -1;
    }
    json_t *other = json_object_get(t->root, "otherData");
    CHECK(json_is_object(other));
    t->dropped = json_integer_value(json_object_get(other, "dropped_spans"));
}

static void trace_free(trace *t) {
    json_decref(t->root);
    free(t->ev);
}

static bool is_worker(const trace *t, long long tid) {
    for (int i = 0; i < t->nworkers; i++)
        if (t->workers[i] == tid) return true;
    return false;
}

static size_t count(const trace *t, long long tid, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += (tid < 0 || t->ev[i].tid == tid) && !strcmp(t->ev[i].name, name);
    return n;
}

/* Per thread, in file order: starts never go back, and each span lies
 * wholly inside the innermost span still open at its start.  Stages of a
 * batch must have a batch (or, for reads and checks, a group load) open
 * around them. */
static void check_nesting(const trace *t) {
    for (size_t i = 0; i < t->n; i++)
        CHECK(t->ev[i].tid == t->consumer || t->ev[i].tid == t->reader || is_worker(t, t->ev[i].tid));
    long long tids[18];
    int ntid = 0;
    tids[ntid++] = t->consumer;
    if (t->reader >= 0) tids[ntid++] = t->reader;
    for (int i = 0; i < t->nworkers; i++) tids[ntid++] = t->workers[i];
    for (int k = 0; k < ntid; k++) {
        const ev *stack[64];
        int depth = 0;
        int64_t last = INT64_MIN;
        for (size_t i = 0; i < t->n; i++) {
            const ev *e = &t->ev[i];
            if (e->tid != tids[k]) continue;
            CHECK(e->ts >= last);
            last = e->ts;
            while (depth && stack[depth - 1]->end <= e->ts && stack[depth - 1]->end > stack[depth - 1]->ts)
                depth--;
            while (depth && stack[depth - 1]->end < e->ts) depth--;
            if (depth) {
                if (e->end > stack[depth - 1]->end)
                    fprintf(stderr, "'%s' [%lld, %lld] crosses the end of '%s' [%lld, %lld]\n",
                            e->name, (long long)e->ts, (long long)e->end, stack[depth - 1]->name,
                            (long long)stack[depth - 1]->ts, (long long)stack[depth - 1]->end);
                CHECK(e->end <= stack[depth - 1]->end);
            }
            const char *n = e->name;
            if (!strcmp(n, "plan") || !strcmp(n, "assemble")) {
                CHECK(depth > 0 && !strcmp(stack[depth - 1]->name, "batch"));
            } else if (!strcmp(n, "read") || !strcmp(n, "verify")) {
                CHECK(depth > 0 && (!strcmp(stack[depth - 1]->name, "batch") ||
                                    !strcmp(stack[depth - 1]->name, "group load")));
            } else if (!strcmp(n, "batch") || !strcmp(n, "next") || !strcmp(n, "step")) {
                CHECK(depth == 0);
            }
            CHECK(depth < 64);
            stack[depth++] = e;
        }
    }
}

/* One epoch of `ld`, with a "step" span after each batch.  Returns the
 * batch count. */
static uint64_t run_epoch(stk_loader *ld) {
    stk_error err = {0};
    uint64_t n = 0;
    for (;;) {
        stk_batch *b;
        int rc = stk_loader_next(ld, &b, &err);
        if (rc == STK_END) break;
        CHECK_OK(rc);
        uint64_t t0 = stk_now_ns();
        stk_loader_release(ld, b);
        CHECK(stk_loader_trace_span(ld, "step", t0, stk_now_ns()) == 0);
        n++;
    }
    return n;
}

/* A loader over d's windows of 8 rows, batches of 16. */
static stk_loader *open_windows(tds *d, stk_order order, stk_backend backend, int threads,
                                stk_dataset **ds) {
    stk_error err = {0};
    CHECK_OK(stk_dataset_open(d->dir, ds, &err));
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 16;
    o.window = 8;
    o.order = order;
    o.block_samples = 40;
    o.block_group = 3;
    o.backend = backend;
    o.threads = threads;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(*ds, &o, &ld, &err));
    return ld;
}

static void check_run(tds *d, stk_order order, stk_backend backend, const char *path) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    stk_loader *ld = open_windows(d, order, backend, 3, &ds);
    /* Nothing recorded yet: no file. */
    unlink(path);
    CHECK_ERR(stk_loader_trace_write(ld, path, &err), -EINVAL, "start tracing");
    CHECK(!test_exists(path));
    /* The workers began epoch 0 at open; tracing from before epoch 1
     * starts sees every batch of epoch 1 from its beginning. */
    CHECK_OK(stk_loader_trace_start(ld, 0, &err));
    CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
    uint64_t nb = run_epoch(ld);
    CHECK(nb == stk_loader_rank_batches(ld) && nb > 10);
    CHECK(stk_loader_trace_span(ld, "backwards", 10, 5) == -EINVAL);
    CHECK_OK(stk_loader_trace_write(ld, path, &err));

    trace t;
    trace_load(&t, path);
    CHECK(t.consumer >= 0 && t.nworkers >= 1 && t.nworkers <= 3);
    CHECK(t.dropped == 0);
    check_nesting(&t);
    CHECK(count(&t, t.consumer, "next") >= nb);
    CHECK(count(&t, t.consumer, "step") == nb);
    CHECK(count(&t, t.consumer, "batch") == 0);
    /* Every batch of the epoch was filled by some worker, and recorded once
     * or more (a batch of the discarded epoch 0 may also be there). */
    uint8_t *seen = calloc(nb, 1);
    for (size_t i = 0; i < t.n; i++)
        if (!strcmp(t.ev[i].name, "batch")) {
            CHECK(is_worker(&t, t.ev[i].tid));
            CHECK(t.ev[i].batch >= 0 && (uint64_t)t.ev[i].batch < nb);
            seen[t.ev[i].batch] = 1;
        }
    for (uint64_t b = 0; b < nb; b++) CHECK(seen[b]);
    free(seen);
    CHECK(count(&t, -1, "plan") > 0 && count(&t, -1, "assemble") > 0);
    CHECK(count(&t, -1, "verify") > 0);
    if (order == STK_ORDER_BLOCK && backend != STK_BACKEND_MMAP) {
        CHECK(count(&t, -1, "group load") > 0 && count(&t, -1, "read") > 0);
        /* A thread of its own reads groups ahead, and does nothing else.
         * (A worker that needs a group before the reader got to it loads it
         * itself: on a loaded machine the reader may load none of the few
         * groups of this small epoch.) */
        CHECK(t.reader >= 0);
        CHECK(count(&t, t.reader, "batch") == 0 && count(&t, t.reader, "next") == 0);
    } else {
        CHECK(t.reader < 0);
    }
    if (order != STK_ORDER_BLOCK) CHECK(count(&t, -1, "read") > 0);
    /* next's batch numbers run 0..nb-1 in order. */
    long long want = 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.ev[i].tid == t.consumer && !strcmp(t.ev[i].name, "next") && t.ev[i].batch >= 0)
            CHECK(t.ev[i].batch == want++);
    CHECK(want == (long long)nb);
    trace_free(&t);

    /* Starting again discards: the epoch is over, nothing new happens. */
    CHECK_OK(stk_loader_trace_start(ld, 0, &err));
    CHECK_OK(stk_loader_trace_write(ld, path, &err));
    trace_load(&t, path);
    CHECK(count(&t, -1, "batch") == 0 && count(&t, -1, "step") == 0);
    trace_free(&t);

    /* Stopped: spans are not recorded, what was recorded stays. */
    CHECK_OK(stk_loader_set_epoch(ld, 2, &err));
    run_epoch(ld);
    stk_loader_trace_stop(ld);
    CHECK_OK(stk_loader_set_epoch(ld, 3, &err));
    run_epoch(ld);
    CHECK_OK(stk_loader_trace_write(ld, path, &err));
    trace_load(&t, path);
    CHECK(count(&t, t.consumer, "step") == nb);
    trace_free(&t);
    stk_loader_close(ld);
    stk_dataset_close(ds);
}

static void check_dropped(tds *d, const char *path) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    stk_loader *ld = open_windows(d, STK_ORDER_RANDOM, STK_BACKEND_AUTO, 2, &ds);
    CHECK_OK(stk_loader_trace_start(ld, 3, &err));
    CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
    run_epoch(ld);
    CHECK_OK(stk_loader_trace_write(ld, path, &err));
    trace t;
    trace_load(&t, path);
    CHECK(count(&t, t.consumer, "next") + count(&t, t.consumer, "step") <= 3);
    for (int i = 0; i < t.nworkers; i++) {
        size_t n = 0;
        for (size_t k = 0; k < t.n; k++) n += t.ev[k].tid == t.workers[i];
        CHECK(n <= 3);
    }
    CHECK(t.dropped > 0);
    trace_free(&t);
    stk_loader_close(ld);
    stk_dataset_close(ds);
}

int main(void) {
    test_watchdog(120);
    tds d;
    tds_init(&d, TDS_WINDOWS, 300);
    tds_write(&d, "trace");
    char path[4200];
    snprintf(path, sizeof path, "%s/../trace.json", d.dir);
    check_run(&d, STK_ORDER_RANDOM, STK_BACKEND_URING, path);
    check_run(&d, STK_ORDER_RANDOM, STK_BACKEND_MMAP, path);
    check_run(&d, STK_ORDER_BLOCK, STK_BACKEND_POOL, path);
    check_run(&d, STK_ORDER_BLOCK, STK_BACKEND_MMAP, path);
    check_dropped(&d, path);
    tds_free(&d);
    return 0;
}
