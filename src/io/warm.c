/*
 * warm.c: brings a dataset's bytes into the page cache with large
 * sequential reads, so that a first epoch in any order runs at the
 * device's sequential rate instead of one small random read per sample.
 *
 * A thread walks the ranges it is given, in that order, in pieces of
 * PIECE bytes, and populates each piece of the shard's mapping
 * (MADV_POPULATE_READ): the kernel reads it with its read-ahead, large
 * requests kept in flight, and maps it as it lands.  The mappings are
 * marked MADV_HUGEPAGE first, so the page cache takes the bytes in 2 MiB
 * folios and maps them with one page-table entry each: gathering small
 * samples from memory later misses the TLB far less (docs/BENCHMARKS.md,
 * "Figures behind design choices", has the rates).
 *
 * The workers wait for the bytes they need (stk__warm_wait) rather than
 * fault them in themselves.  A fault on a hugepage mapping is a 2 MiB read
 * of its own, and a random epoch's first batch touches nearly every 2 MiB
 * of the data: workers faulting made the device serve hundreds of random
 * 2 MiB reads beside the sequential stream, and the warm-up took 2-3 times
 * as long.  Arrival is tracked per UNIT of each
 * shard: the bytes of the ranges that fall in the unit, and how many of
 * them have landed.
 *
 * The thread does nothing but read: anything it did with the bytes would
 * take a CPU from the workers once they run (checking the checksum blocks
 * here made the first epoch far slower on two cores).  The workers use
 * their own waits for that instead (pipeline/loader.c).
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
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
#define UNIT_SHIFT 21 /* 2 MiB */

struct stk__warm {
    const stk_dataset *ds;
    stk__range *r;
    size_t n;
    pthread_t tid;
    bool started;
    atomic_bool stop;
    _Atomic uint64_t bytes, ns, pieces;
    atomic_bool done;
    /* Arrival, per unit of every shard (unit_first[s] is shard s's first):
     * the bytes of the ranges in the unit, and how many have landed. */
    uint64_t *unit_first;
    bool *headed; /* per shard: its head dropped (drop_head), before the
                   * first range that reads it */
    uint64_t *want;
    _Atomic uint64_t *got;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Adds the bytes of [a, b) of shard s to each unit they fall in. */
static void count_units(stk__warm *w, uint32_t s, uint64_t a, uint64_t b, bool landed) {
    for (uint64_t u = a >> UNIT_SHIFT; a < b; u++) {
        uint64_t end = STK__MIN(b, (u + 1) << UNIT_SHIFT);
        if (landed) atomic_fetch_add_explicit(&w->got[w->unit_first[s] + u], end - a,
                                              memory_order_release);
        else w->want[w->unit_first[s] + u] += end - a;
        a = end;
    }
}

/* Touches a byte of every page of [lo, b) of a mapping.  A page past the
 * end of a file cut short faults with SIGBUS (where MADV_POPULATE_READ
 * says EFAULT): the guard (io.h) makes that -EFAULT. */
static __attribute__((noinline)) void touch(const uint8_t *map, uint64_t lo, uint64_t b,
                                            uint64_t page) {
    volatile uint8_t sink = 0;
    for (uint64_t o = lo; o < b; o += page) sink ^= map[o];
    (void)sink;
}

static int touch_pages(const uint8_t *map, uint64_t lo, uint64_t b, uint64_t page) {
    stk__bus_guard bus;
    if (sigsetjmp(bus.jb, 0)) return -EFAULT;
    stk__bus_guard_cur = &bus;
    touch(map, lo, b, page);
    stk__bus_guard_cur = NULL;
    return 0;
}

/* Brings [a, b) of a mapping in: populating where the kernel can (5.14 and
 * later), else asking for it ahead and touching a byte of every page. */
static int populate(const uint8_t *map, uint64_t a, uint64_t b) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t lo = a & ~(uint64_t)(page - 1);
    if (madvise((void *)(map + lo), (size_t)(b - lo), MADV_POPULATE_READ) == 0) return 0;
    if (errno != EINVAL) return -errno;
    madvise((void *)(map + lo), (size_t)(b - lo), MADV_WILLNEED);
    return touch_pages(map, lo, b, (uint64_t)page);
}

/* Drops from the page cache what the open read of a shard's head (its
 * header, by pread, and the kernel's read-ahead around it): small folios
 * there keep the page cache from taking the data that follows in 2 MiB
 * folios.  The warm-up's first fault then lands on an empty 2 MiB range
 * and reads it as one huge folio, and the read-ahead goes on in huge
 * folios from there; with the head's pages left in, it grew its folios
 * from the smallest up, and about the first 30 MiB of every shard stayed
 * in small pages (a dataset of 36 MB shards: none of it in huge pages).
 * A page of the range that is mapped stays, and costs nothing but that. */
static void drop_head(const stk__shard *sh) {
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    posix_fadvise(fd, 0, HUGE, POSIX_FADV_DONTNEED);
    close(fd);
}

static void *warm_main(void *arg) {
    stk__warm *w = arg;
    stk__thread_name("stk-warm");
    for (size_t i = 0; i < w->n && !atomic_load(&w->stop); i++) {
        const stk__range *r = &w->r[i];
        const stk__shard *sh = &w->ds->shards[r->shard];
        if (r->lo < HUGE && !w->headed[r->shard]) {
            w->headed[r->shard] = true;
            drop_head(sh);
        }
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
            /* The next piece is asked for now, so that the device is never
             * idle while this thread wakes the waiting workers. */
            uint64_t c = STK__MIN(hi, b + PIECE);
            if (c > b)
                madvise((void *)(sh->map + (b & ~(uint64_t)4095)), (size_t)(c - (b & ~(uint64_t)4095)),
                        MADV_WILLNEED);
            count_units(w, r->shard, a, b, true);
            w->ns += stk__now_ns() - t0;
            w->bytes += b - a;
            pthread_mutex_lock(&w->mu);
            w->pieces++;
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
            a = b;
        }
    }
out:
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->done, true);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void warm_free(stk__warm *w) {
    stk__free(w->r);
    stk__free(w->unit_first);
    stk__free(w->headed);
    stk__free(w->want);
    stk__free((void *)w->got);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    stk__free(w);
}

int stk__warm_start(const stk_dataset *ds, const stk__range *r, size_t n, stk__warm **out,
                    stk_error *err) {
    *out = NULL;
    (void)stk__bus_install(); /* for populate()'s guard */
    stk__warm *w = stk__calloc(1, sizeof *w);
    if (!w) return stk__err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->r = stk__malloc((n ? n : 1) * sizeof *r);
    w->unit_first = stk__malloc((ds->nshards + 1) * sizeof *w->unit_first);
    w->headed = stk__calloc(ds->nshards, sizeof *w->headed);
    if (!w->r || !w->unit_first || !w->headed) {
        warm_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    w->unit_first[0] = 0;
    for (size_t s = 0; s < ds->nshards; s++)
        w->unit_first[s + 1] = w->unit_first[s] + (ds->shards[s].size >> UNIT_SHIFT) + 1;
    uint64_t units = w->unit_first[ds->nshards];
    w->want = stk__calloc(units + 1, sizeof *w->want);
    w->got = stk__calloc(units + 1, sizeof *w->got);
    if (!w->want || !w->got) {
        warm_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    memcpy(w->r, r, n * sizeof *r);
    w->ds = ds;
    w->n = n;
    for (size_t i = 0; i < n; i++)
        count_units(w, r[i].shard, r[i].lo, STK__MIN(r[i].hi, ds->shards[r[i].shard].size), false);
    for (size_t s = 0; s < ds->nshards; s++)
        if (ds->shards[s].map)
            madvise((void *)ds->shards[s].map, (size_t)ds->shards[s].size, MADV_HUGEPAGE);
    int rc = -pthread_create(&w->tid, NULL, warm_main, w);
    if (rc) {
        warm_free(w);
        return stk__err(err, rc, "cannot start the warm-up thread: %s", stk_strerror(rc));
    }
    w->started = true;
    *out = w;
    return 0;
}

/* Whether every unit under [lo, hi) of shard s has all its bytes in. */
static bool arrived(const stk__warm *w, uint32_t s, uint64_t lo, uint64_t hi) {
    for (uint64_t u = lo >> UNIT_SHIFT; u <= (hi - 1) >> UNIT_SHIFT; u++) {
        uint64_t k = w->unit_first[s] + u;
        if (atomic_load_explicit(&w->got[k], memory_order_acquire) < w->want[k]) return false;
    }
    return true;
}

bool stk__warm_wait(stk__warm *w, uint32_t s, uint64_t lo, uint64_t hi) {
    if (!w || hi <= lo || atomic_load_explicit(&w->done, memory_order_acquire)) return false;
    hi = STK__MIN(hi, w->ds->shards[s].size);
    if (hi <= lo || arrived(w, s, lo, hi)) return false;
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->done) && !arrived(w, s, lo, hi)) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return true;
}

bool stk__warm_arrived(const stk__warm *w, uint32_t s, uint64_t lo, uint64_t hi) {
    if (!w || hi <= lo || atomic_load_explicit(&w->done, memory_order_acquire)) return true;
    hi = STK__MIN(hi, w->ds->shards[s].size);
    return hi <= lo || arrived(w, s, lo, hi);
}

void stk__warm_wait_piece(stk__warm *w, uint64_t *seen) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->done) && w->pieces <= *seen) pthread_cond_wait(&w->cv, &w->mu);
    *seen = w->pieces;
    pthread_mutex_unlock(&w->mu);
}

bool stk__warm_done(const stk__warm *w) {
    return !w || atomic_load_explicit(&w->done, memory_order_acquire);
}

void stk__warm_stats(const stk__warm *w, uint64_t *pieces, uint64_t *bytes, uint64_t *ns,
                     bool *done) {
    *pieces = w ? w->pieces : 0;
    *bytes = w ? w->bytes : 0;
    *ns = w ? w->ns : 0;
    *done = w ? atomic_load(&w->done) : true;
}

void stk__warm_cancel(stk__warm *w) {
    if (w) atomic_store(&w->stop, true);
}

void stk__warm_stop(stk__warm *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    if (w->started) pthread_join(w->tid, NULL);
    warm_free(w);
}
