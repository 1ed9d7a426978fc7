/*
 * warm.c: brings a dataset's bytes into the page cache with large
 * sequential reads, so that a first epoch in any order runs at the
 * device's sequential rate instead of one small random read per sample.
 *
 * A thread walks the ranges it is given, in that order, in pieces of
 * PIECE bytes, and populates each piece of the shard's mapping
 * (MADV_POPULATE_READ): the kernel reads it with its read-ahead, large
 * requests kept in flight, and maps it into the process as it lands.  The
 * mappings are marked MADV_HUGEPAGE first, so the page cache takes the
 * bytes in 2 MiB folios and maps them with one page-table entry each:
 * gathering small samples from memory later misses the TLB far less
 * (random 512-byte records: about 2x the rate of 4 KiB mappings here).
 *
 * After each piece a callback may look at the bytes that just arrived (the
 * loader checks their checksum blocks there, while the thread would
 * otherwise only wait for the device).
 *
 * Nothing waits for the thread.  A worker that needs bytes it has not
 * reached yet faults them in itself (through the same hugepage mapping, a
 * 2 MiB read), and the thread later finds them resident and moves on.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define PIECE (16u << 20)
#define HUGE (2u << 20)

struct stk__warm {
    const stk_dataset *ds;
    stk__range *r;
    size_t n;
    stk__warm_landed landed;
    void *arg;
    pthread_t tid;
    bool started;
    atomic_bool stop;
    _Atomic uint64_t bytes, ns, pieces;
    atomic_bool done;
};

/* Brings [a, b) of a mapping in: populating where the kernel can (5.14 and
 * later), else asking for it ahead and touching a byte of every page. */
static int populate(const uint8_t *map, uint64_t a, uint64_t b) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t lo = a & ~(uint64_t)(page - 1);
    if (madvise((void *)(map + lo), (size_t)(b - lo), MADV_POPULATE_READ) == 0) return 0;
    if (errno != EINVAL) return -errno;
    madvise((void *)(map + lo), (size_t)(b - lo), MADV_WILLNEED);
    volatile uint8_t sink = 0;
    for (uint64_t o = lo; o < b; o += (uint64_t)page) sink ^= map[o];
    (void)sink;
    return 0;
}

static void *warm_main(void *arg) {
    stk__warm *w = arg;
    for (size_t i = 0; i < w->n && !atomic_load(&w->stop); i++) {
        const stk__range *r = &w->r[i];
        const stk__shard *sh = &w->ds->shards[r->shard];
        uint64_t hi = STK__MIN(r->hi, sh->size);
        for (uint64_t a = r->lo; a < hi && !atomic_load(&w->stop);) {
            /* Pieces end on 2 MiB boundaries of the file, so that the
             * folios the kernel makes for them can be whole huge pages. */
            uint64_t b = STK__MIN(hi, (a + PIECE) & ~(uint64_t)(HUGE - 1));
            if (b <= a) b = hi;
            uint64_t t0 = stk__now_ns();
            /* A failure (the file cut short since it was opened) stops the
             * warm-up; the reads that need those bytes report it. */
            if (populate(sh->map, a, b) != 0) goto out;
            if (w->landed) {
                /* Keep the device busy with the next piece meanwhile. */
                uint64_t c = STK__MIN(hi, b + PIECE);
                if (c > b)
                    madvise((void *)(sh->map + (b & ~(uint64_t)4095)),
                            (size_t)(c - (b & ~(uint64_t)4095)), MADV_WILLNEED);
                w->landed(w->arg, r, b);
            }
            w->ns += stk__now_ns() - t0;
            w->bytes += b - a;
            w->pieces++;
            a = b;
        }
    }
out:
    atomic_store(&w->done, true);
    return NULL;
}

int stk__warm_start(const stk_dataset *ds, const stk__range *r, size_t n,
                    stk__warm_landed landed, void *arg, stk__warm **out, stk_error *err) {
    *out = NULL;
    stk__warm *w = stk__calloc(1, sizeof *w);
    if (!w || !(w->r = stk__malloc((n ? n : 1) * sizeof *r))) {
        stk__free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    memcpy(w->r, r, n * sizeof *r);
    w->ds = ds;
    w->n = n;
    w->landed = landed;
    w->arg = arg;
    for (size_t s = 0; s < ds->nshards; s++)
        if (ds->shards[s].map)
            madvise((void *)ds->shards[s].map, (size_t)ds->shards[s].size, MADV_HUGEPAGE);
    int rc = -pthread_create(&w->tid, NULL, warm_main, w);
    if (rc) {
        stk__free(w->r);
        stk__free(w);
        return stk__err(err, rc, "cannot start the warm-up thread: %s", stk_strerror(rc));
    }
    w->started = true;
    *out = w;
    return 0;
}

void stk__warm_stats(const stk__warm *w, uint64_t *pieces, uint64_t *bytes, uint64_t *ns,
                     bool *done) {
    *pieces = w ? w->pieces : 0;
    *bytes = w ? w->bytes : 0;
    *ns = w ? w->ns : 0;
    *done = w ? atomic_load(&w->done) : true;
}

void stk__warm_stop(stk__warm *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    if (w->started) pthread_join(w->tid, NULL);
    stk__free(w->r);
    stk__free(w);
}
