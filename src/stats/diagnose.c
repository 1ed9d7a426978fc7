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
#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
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

void stk_measure_limit(const stk_dataset *ds, stk_limit *out) {
    out->bytes_per_s = stk_measure_memcpy();
    out->what = "memcpy, one thread";
    out->resident = ds ? stk_dataset_resident(ds) : -1;
    /* A remote dataset's cache files are not all there: the network is
     * measured apart (stk_measure_link). */
    if (!ds || out->resident >= 0.9 || ds->caps.lazy) return;
    /* Data not in memory is read from the device, which may be the limit. */
    double rd = 0;
    stk_error e = {0};
    if (stk_measure_read(ds, 1.0, &rd, &e) == 0 && rd > 0 && rd < out->bytes_per_s) {
        out->bytes_per_s = rd;
        out->what = "device, O_DIRECT sequential reads";
    }
}

/* Opens shard s for O_DIRECT reads. */
static int open_direct(const stk_dataset *ds, size_t s, stk_error *err) {
    int fd = stk__open(ds->shards[s].path, O_RDONLY | O_DIRECT, 0);
    if (fd < 0)
        return stk__err(err, fd, "%s: cannot open for O_DIRECT reads: %s", ds->shards[s].path,
                        stk_strerror(fd));
    return fd;
}

/* How many files a measurement may hold open at once: a quarter of the
 * process's descriptor limit (the loader being measured holds others). */
static size_t files_cap(void) {
    struct rlimit rl;
    uint64_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
    return (size_t)STK__MAX((uint64_t)4, STK__MIN(lim / 4, (uint64_t)4096));
}

static void close_all(int *fds, size_t n) {
    for (size_t s = 0; s < n; s++)
        if (fds[s] >= 0) close(fds[s]);
}

/* Waits for at least one completion and takes all there are; returns how
 * many, adding their bytes to *total, or a negative errno. */
static int reap(struct io_uring *ring, uint64_t *total) {
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0) return rc;
    int n = 0;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
        int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        if (res < 0) return res;
        *total += (uint64_t)res;
        n++;
    }
    return n;
}

#define SEQ_CHUNK (4u << 20)
#define SEQ_DEPTH 8u

int stk_measure_read(const stk_dataset *ds, double max_seconds, double *bytes_per_s,
                     stk_error *err) {
    if (!ds || !bytes_per_s) return stk__err(err, -EINVAL, "stk_measure_read: NULL argument");
    *bytes_per_s = 0;
    uint8_t *buf = stk__aligned_alloc(4096, (size_t)SEQ_CHUNK * SEQ_DEPTH);
    if (!buf) return stk__err(err, -ENOMEM, "out of memory");
    int rc = 0, fd = -1;
    struct io_uring ring;
    bool uring = rc == 0 && io_uring_queue_init(SEQ_DEPTH, &ring, 0) == 0;
    uint64_t total = 0, t0 = stk__now_ns(), limit = (uint64_t)(max_seconds * 1e9);
    /* The files in order, sequentially, until the time is up: O_DIRECT
     * reads come from the device whatever the page cache holds. */
    for (size_t s = 0; rc == 0 && s < ds->nshards && stk__now_ns() - t0 < limit; s++) {
        uint64_t size = ds->shards[s].size, off = 0;
        if (fd >= 0) close(fd);
        if ((fd = open_direct(ds, s, err)) < 0) {
            rc = fd;
            break;
        }
        if (!uring) {
            for (; off < size && stk__now_ns() - t0 < limit; off += SEQ_CHUNK) {
                ssize_t r = pread(fd, buf, SEQ_CHUNK, (off_t)off);
                if (r <= 0) break;
                total += (uint64_t)r;
            }
            continue;
        }
        unsigned inflight = 0, slot = 0;
        while ((off < size && stk__now_ns() - t0 < limit) || inflight) {
            while (inflight < SEQ_DEPTH && off < size && stk__now_ns() - t0 < limit) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                io_uring_prep_read(sqe, fd, buf + (size_t)(slot++ % SEQ_DEPTH) * SEQ_CHUNK,
                                   SEQ_CHUNK, off);
                off += SEQ_CHUNK;
                inflight++;
            }
            int got = reap(&ring, &total);
            if (got < 0) {
                rc = stk__err(err, got, "%s: reading for the measurement: %s",
                              ds->shards[s].path, stk_strerror(got));
                break;
            }
            inflight -= (unsigned)got;
        }
    }
    uint64_t el = stk__now_ns() - t0;
    if (uring) io_uring_queue_exit(&ring);
    if (fd >= 0) close(fd);
    stk__free(buf);
    if (rc == 0 && el > 0) *bytes_per_s = (double)total / ((double)el / 1e9);
    return rc;
}

#define RAND_DEPTH 32u

int stk_measure_random_read(const stk_dataset *ds, uint64_t size, double max_seconds,
                            double *reads_per_s, double *bytes_per_s, stk_error *err) {
    if (!ds || !reads_per_s || !bytes_per_s || size == 0)
        return stk__err(err, -EINVAL, "stk_measure_random_read: bad argument");
    *reads_per_s = *bytes_per_s = 0;
    uint64_t span = stk__align_up(size, 4096) + 4096; /* an unaligned sample spans one more */
    /* The reads go to a uniform place in the data of `n` shards: all of
     * them, or as many as may be open at once, evenly spaced. */
    size_t n = STK__MIN(ds->nshards, files_cap());
    uint64_t total_data = 0;
    for (size_t k = 0; k < n; k++) {
        const stk__shard *sh = &ds->shards[k * ds->nshards / n];
        total_data += sh->data_end - sh->data_off;
    }
    if (total_data == 0) return 0;
    struct io_uring ring;
    if (io_uring_queue_init(RAND_DEPTH, &ring, 0) != 0)
        return stk__err(err, -ENOSYS, "io_uring is not available for the measurement");
    int *fds = stk__malloc(n * sizeof *fds);
    uint8_t *buf = stk__aligned_alloc(4096, (size_t)(span * RAND_DEPTH));
    int rc = !fds || !buf ? stk__err(err, -ENOMEM, "out of memory") : 0;
    for (size_t k = 0; fds && k < n; k++) fds[k] = -1;
    for (size_t k = 0; rc == 0 && k < n; k++)
        if ((fds[k] = open_direct(ds, k * ds->nshards / n, err)) < 0) rc = fds[k];
    uint64_t x = 0x9e3779b97f4a7c15ull, done = 0, got_bytes = 0;
    uint64_t t0 = stk__now_ns(), limit = (uint64_t)(max_seconds * 1e9);
    unsigned inflight = 0, slot = 0;
    while (rc == 0 && (stk__now_ns() - t0 < limit || inflight)) {
        while (inflight < RAND_DEPTH && stk__now_ns() - t0 < limit) {
            /* A uniform place in the concatenated shard data. */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t at = x % total_data;
            size_t k = 0;
            const stk__shard *sh = &ds->shards[0];
            for (;; k++) {
                sh = &ds->shards[k * ds->nshards / n];
                if (at < sh->data_end - sh->data_off) break;
                at -= sh->data_end - sh->data_off;
            }
            uint64_t off = (sh->data_off + at) & ~(uint64_t)4095;
            uint64_t len = STK__MIN(span, stk__align_up(sh->size, 4096) - off);
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            io_uring_prep_read(sqe, fds[k], buf + (size_t)(slot++ % RAND_DEPTH) * span,
                               (unsigned)len, off);
            inflight++;
        }
        int got = reap(&ring, &got_bytes);
        if (got < 0) {
            rc = stk__err(err, got, "%s: reading for the measurement: %s", ds->dir,
                          stk_strerror(got));
            break;
        }
        inflight -= (unsigned)got;
        done += (uint64_t)got;
    }
    uint64_t el = stk__now_ns() - t0;
    io_uring_queue_exit(&ring);
    if (fds) close_all(fds, n);
    stk__free(fds);
    stk__free(buf);
    if (rc == 0 && el > 0) {
        *reads_per_s = (double)done / ((double)el / 1e9);
        *bytes_per_s = *reads_per_s * (double)size;
    }
    return rc;
}

int stk_advise_order(const stk_dataset *ds, const stk_loader *ld, stk_order_advice *out,
                     stk_error *err) {
    if (!ds || !ld || !out) return stk__err(err, -EINVAL, "stk_advise_order: NULL argument");
    memset(out, 0, sizeof *out);
    stk_loader_stats st;
    stk_loader_stats_get(ld, &st);
    out->sample_bytes = stk_loader_sample_bytes(ld);
    if (stk_loader_order(ld) != STK_ORDER_RANDOM || st.warm_up_bytes || ds->caps.source ||
        out->sample_bytes == 0 || out->sample_bytes >= (8u << 20) || stk_dataset_resident(ds) >= 0.9)
        return 0;
    double reads;
    int rc = stk_measure_read(ds, 0.5, &out->sequential_bytes_per_s, err);
    if (rc == 0)
        rc = stk_measure_random_read(ds, out->sample_bytes, 0.5, &reads, &out->random_bytes_per_s,
                                     err);
    if (rc) return rc;
    if (out->random_bytes_per_s > 0)
        out->speedup = out->sequential_bytes_per_s / out->random_bytes_per_s;
    if (out->speedup >= 2)
        snprintf(out->text, sizeof out->text,
                 "block order would read this dataset about %.0fx faster: the device gives "
                 "%.2f GB/s in large sequential reads but %.2f GB/s in random reads of %llu "
                 "bytes, one per sample (block order shuffles blocks and the samples within "
                 "groups of them; block_group sets how many mix)",
                 out->speedup, out->sequential_bytes_per_s / 1e9, out->random_bytes_per_s / 1e9,
                 (unsigned long long)out->sample_bytes);
    return 0;
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
            next = st->decode.busy_ns * 2 > st->assemble.busy_ns
                       ? "decoding images or audio dominates: more worker threads (one per "
                         "core), or smaller outputs"
                       : "assembly dominates (decompression, conversions): more worker "
                         "threads, or store the fields uncompressed";
        }
        if (d->share_plan > top) next = "planning dominates: larger batches amortise it";
    }
    snprintf(d->next, sizeof d->next, "%s", next);
}
