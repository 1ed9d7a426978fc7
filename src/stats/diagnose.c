/*
 * diagnose.c: the verdict of `stoker doctor` and stoker.profile, in one
 * place: where the loader's time goes, whether the consumer waits for data,
 * and the measured limit the delivered bytes are compared with.
 *
 * The thresholds: a consumer that waits in next() more than 10% of the time
 * is input-bound (the accelerator would idle that long), less than 2% is
 * compute-bound (the model is the limit), in between balanced.  The next
 * thing to try follows the stage that takes most of the workers' time.
 */
#define _GNU_SOURCE
#include "../format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STALL_INPUT 0.10
#define STALL_COMPUTE 0.02

double stk_measure_memcpy(void) {
    size_t n = 64u << 20;
    char *a = stk__aligned_alloc(4096, n), *b = stk__aligned_alloc(4096, n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int r = 0; r < 5; r++) {
            uint64_t t = stk__now_ns();
            memcpy(b, a, n);
            t = stk__now_ns() - t;
            double bps = t ? (double)n / ((double)t / 1e9) : 0;
            if (bps > best) best = bps;
            a[r] = b[n - 1 - (size_t)r]; /* keep the copies observable */
        }
    }
    stk__free(a);
    stk__free(b);
    return best;
}

int stk_measure_read(const stk_dataset *ds, double max_seconds, double *bytes_per_s,
                     stk_error *err) {
    if (!ds || !bytes_per_s) return stk__err(err, -EINVAL, "stk_measure_read: NULL argument");
    *bytes_per_s = 0;
    const size_t chunk = 4u << 20;
    uint8_t *buf = stk__aligned_alloc(4096, chunk);
    if (!buf) return stk__err(err, -ENOMEM, "out of memory");
    uint64_t total = 0, t0 = stk__now_ns(), limit = (uint64_t)(max_seconds * 1e9);
    int rc = 0;
    /* The files in order, sequentially, until the time is up: O_DIRECT
     * reads come from the device whatever the page cache holds. */
    for (size_t s = 0; s < ds->nshards && stk__now_ns() - t0 < limit; s++) {
        int fd = stk__open(ds->shards[s].path, O_RDONLY | O_DIRECT, 0);
        if (fd < 0) {
            rc = stk__err(err, fd, "%s: cannot open for O_DIRECT reads: %s", ds->shards[s].path,
                          stk_strerror(fd));
            break;
        }
        for (uint64_t off = 0; stk__now_ns() - t0 < limit; off += chunk) {
            ssize_t r = pread(fd, buf, chunk, (off_t)off);
            if (r <= 0) break;
            total += (uint64_t)r;
        }
        close(fd);
    }
    uint64_t el = stk__now_ns() - t0;
    stk__free(buf);
    if (rc == 0 && el > 0) *bytes_per_s = (double)total / ((double)el / 1e9);
    return rc;
}

static const char *verdict_names[] = {"loader alone", "input-bound", "balanced",
                                      "compute-bound"};

const char *stk_verdict_name(stk_verdict v) {
    return (unsigned)v < sizeof verdict_names / sizeof *verdict_names ? verdict_names[v] : "?";
}

void stk_diagnose(const stk_loader_stats *st, stk_backend backend, uint64_t bytes,
                  double seconds, double limit_bytes_per_s, int with_step, stk_diagnosis *d) {
    memset(d, 0, sizeof *d);
    if (!st) return;
    d->seconds = seconds;
    double worker_s = seconds * (double)(st->threads ? st->threads : 1);
    if (seconds > 0) {
        d->batches_per_s = (double)st->batches / seconds;
        d->samples_per_s = (double)st->samples / seconds;
        d->bytes_per_s = (double)bytes / seconds;
        d->stall = (double)st->wait.busy_ns / 1e9 / seconds;
        if (d->stall > 1) d->stall = 1;
    }
    if (worker_s > 0) {
        d->share_plan = (double)st->plan.busy_ns / 1e9 / worker_s;
        d->share_io = (double)st->io.busy_ns / 1e9 / worker_s;
        d->share_assemble = (double)st->assemble.busy_ns / 1e9 / worker_s;
        d->share_verify = (double)st->verify.busy_ns / 1e9 / worker_s;
    }
    double busy = d->share_plan + d->share_io + d->share_assemble + d->share_verify;
    d->share_idle = busy < 1 ? 1 - busy : 0;
    d->limit_bytes_per_s = limit_bytes_per_s;
    d->of_limit = limit_bytes_per_s > 0 ? d->bytes_per_s / limit_bytes_per_s : 0;

    if (!with_step) d->verdict = STK_VERDICT_UNKNOWN;
    else if (d->stall > STALL_INPUT) d->verdict = STK_VERDICT_INPUT_BOUND;
    else if (d->stall < STALL_COMPUTE) d->verdict = STK_VERDICT_COMPUTE_BOUND;
    else d->verdict = STK_VERDICT_BALANCED;
    d->verdict_name = stk_verdict_name(d->verdict);

    const char *next;
    if (d->verdict == STK_VERDICT_COMPUTE_BOUND) {
        next = "the model is the limit and the loader keeps up: speed up the step (a larger "
               "batch, mixed precision), not the loader";
    } else if (d->verdict == STK_VERDICT_BALANCED) {
        next = "the loader nearly keeps up: more batch buffers (prefetch) or one more worker "
               "thread would absorb the rest";
    } else if (d->of_limit > 0.8) {
        next = "the loader delivers close to the measured limit: the data is the limit; read "
               "fewer bytes (select fields, store smaller dtypes) or keep it in memory";
    } else if (busy < 0.5) {
        next = "the workers are idle most of the time: more batch buffers (prefetch) let them "
               "run further ahead";
    } else {
        double top = d->share_io;
        next = backend == STK_BACKEND_MMAP
                   ? "copies out of the mapping dominate: the data may not be in memory; try "
                     "the io_uring backend"
                   : "reads dominate: more worker threads or a deeper queue (queue_depth), or "
                     "block order for large sequential reads";
        if (d->share_verify > top) {
            top = d->share_verify;
            next = "checksums dominate: verify=False trades that check for speed";
        }
        if (d->share_assemble > top) {
            top = d->share_assemble;
            next = "assembly dominates (decompression, conversions): more worker threads, or "
                   "store the fields uncompressed";
        }
        if (d->share_plan > top) next = "planning dominates: larger batches amortise it";
    }
    snprintf(d->next, sizeof d->next, "%s", next);
}
