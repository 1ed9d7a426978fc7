/*
 * files.c: the descriptors a loader reads through.
 *
 * A dataset of a few hundred shards keeps every file open for the loader's
 * life.  An in-place index may name tens of thousands of files, more than a
 * process may hold open; those go through a cache of `budget` descriptors.
 * Workers pin the files of a batch's reads before handing them to the
 * backend and unpin them after, so a descriptor is never closed under a
 * read in flight.  Eviction is a clock sweep over the open files that skips
 * pinned ones; when every open file is pinned the cache opens one more
 * rather than wait, so it can exceed its budget by the reads in flight.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct stk__fdcache {
    pthread_mutex_t mu;
    uint32_t *pins;  /* per shard */
    uint8_t *ref;    /* per shard: used since the hand last passed */
    size_t *ring;    /* open shards, swept by the clock hand */
    size_t nopen, budget, hand;
    int flags;
};

static int open_one(const stk__files *f, size_t i, int flags, stk_error *err) {
    const char *path = f->ds->shards[i].path;
    int fd = stk__open(path, flags, 0);
    if (fd < 0)
        return stk__err(err, fd, "%s: cannot open %s%s: %s", path,
                        f->ds->caps.source ? "a file of the index" : "shard",
                        flags & O_DIRECT ? " with O_DIRECT" : "", stk_strerror(fd));
    /* Random order reads records scattered over a shard: the kernel's
     * read-ahead would fetch the bytes after each one, which the order
     * then throws away, halving what the device delivers.  (A file that is
     * one record is read whole either way.) */
    if (f->random && !(flags & O_DIRECT)) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    return fd;
}

int stk__files_open(stk__files *f, const stk_dataset *ds, bool direct, bool random, bool none,
                    unsigned budget, stk_error *err) {
    memset(f, 0, sizeof *f);
    f->ds = ds;
    f->direct = direct;
    f->random = random;
    size_t n = ds->nshards;
    f->fds = stk__malloc((n ? n : 1) * sizeof *f->fds);
    if (!f->fds) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) f->fds[i] = -1;
    if (none) return 0;
    int flags = O_RDONLY | (direct ? O_DIRECT : 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max &&
        rl.rlim_cur < n + 256) {
        rl.rlim_cur = STK__MIN(rl.rlim_max, (rlim_t)n + 256);
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (budget == 0) {
        uint64_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
        budget = (unsigned)STK__MIN((uint64_t)65536, lim > 256 ? lim - 128 : lim / 2);
        if (budget < 16) budget = 16;
    }
    if (n <= budget) {
        for (size_t i = 0; i < n; i++) {
            int fd = open_one(f, i, flags, err);
            if (fd < 0) return fd;
            f->fds[i] = fd;
        }
        return 0;
    }
    stk__fdcache *c = stk__calloc(1, sizeof *c);
    if (!c) return stk__err(err, -ENOMEM, "out of memory");
    f->cache = c;
    pthread_mutex_init(&c->mu, NULL);
    c->pins = stk__calloc(n, sizeof *c->pins);
    c->ref = stk__calloc(n, 1);
    c->ring = stk__calloc(budget, sizeof *c->ring);
    c->budget = budget;
    c->flags = flags;
    if (!c->pins || !c->ref || !c->ring) return stk__err(err, -ENOMEM, "out of memory");
    return 0;
}

void stk__files_close(stk__files *f) {
    if (f->fds)
        for (size_t i = 0; i < f->ds->nshards; i++)
            if (f->fds[i] >= 0) close(f->fds[i]);
    stk__free(f->fds);
    f->fds = NULL;
    stk__fdcache *c = f->cache;
    if (c) {
        pthread_mutex_destroy(&c->mu);
        stk__free(c->pins);
        stk__free(c->ref);
        stk__free(c->ring);
        stk__free(c);
        f->cache = NULL;
    }
}

/* Closes one unpinned file not used since the hand last passed; false when
 * every open file is pinned.  Called with the lock held. */
static bool evict(const stk__files *f, stk__fdcache *c) {
    for (size_t seen = 0; seen < 2 * c->nopen; seen++) {
        if (c->hand >= c->nopen) c->hand = 0;
        size_t s = c->ring[c->hand];
        if (c->pins[s] == 0 && !c->ref[s]) {
            close(f->fds[s]);
            f->fds[s] = -1;
            c->ring[c->hand] = c->ring[--c->nopen];
            return true;
        }
        c->ref[s] = 0;
        c->hand++;
    }
    return false;
}

int stk__files_pin(const stk__files *f, stk__ioreq *r, size_t n, stk_error *err) {
    stk__fdcache *c = f->cache;
    if (!c) {
        for (size_t i = 0; i < n; i++) r[i].fd = f->fds[r[i].shard];
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    size_t i;
    for (i = 0; i < n; i++) {
        size_t s = r[i].shard;
        if (f->fds[s] < 0) {
            if (c->nopen >= c->budget && !evict(f, c) && c->nopen >= c->budget) {
                /* Every open file is in use: grow the ring by one. */
                size_t *g = stk__realloc(c->ring, (c->budget + 1) * sizeof *g);
                if (!g) {
                    rc = stk__err(err, -ENOMEM, "out of memory");
                    break;
                }
                c->ring = g;
                c->budget++;
            }
            int fd = open_one(f, s, c->flags, err);
            if (fd < 0) {
                rc = fd;
                break;
            }
            f->fds[s] = fd;
            c->ring[c->nopen++] = s;
        }
        c->pins[s]++;
        c->ref[s] = 1;
        r[i].fd = f->fds[s];
    }
    if (rc)
        for (size_t k = 0; k < i; k++) c->pins[r[k].shard]--;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void stk__files_unpin(const stk__files *f, const stk__ioreq *r, size_t n) {
    stk__fdcache *c = f->cache;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++) c->pins[r[i].shard]--;
    pthread_mutex_unlock(&c->mu);
}

void stk__files_share(stk__files *f, unsigned users) {
    if (!f->cache) return;
    size_t share = f->cache->budget / (2 * (size_t)(users ? users : 1));
    f->max_pins = share ? share : 1;
}

size_t stk__files_open_count(const stk__files *f) {
    stk__fdcache *c = f->cache;
    if (!c) {
        size_t k = 0;
        for (size_t i = 0; f->fds && i < f->ds->nshards; i++) k += f->fds[i] >= 0;
        return k;
    }
    pthread_mutex_lock(&c->mu);
    size_t k = c->nopen;
    pthread_mutex_unlock(&c->mu);
    return k;
}
