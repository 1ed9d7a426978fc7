/*
 * budget.c: a remote dataset's cache kept within a byte budget smaller than
 * the dataset, shared by every process of the node that reads it.
 *
 * - Disk use is what the file system says the dataset's directory takes
 *   (st_blocks), measured, never estimated.  Before blocks are fetched,
 *   one process at a time (flock on <dir>/budget.lock) measures it, evicts
 *   until the blocks fit, and allocates their bytes (fallocate), so that
 *   the next process to measure counts them before they arrive.
 * - A block is evicted by punching its bytes out of the .part file
 *   (FALLOC_FL_PUNCH_HOLE) and clearing its presence byte.
 * - Readers hold what they read: from ensure to release, each block carries
 *   an open-file-description read lock (F_OFD_SETLKW) on its bytes of the
 *   .part; an evictor takes a write lock on them through its own open of the
 *   file, without waiting, and passes over a block it cannot have.  Within
 *   the process a count per block does the same.  Once a reader has its
 *   lock it reads the block's presence byte again: a block evicted before
 *   is fetched again, never read as the zeros of a hole.
 * - What to evict: the reader plans (stk_dataset.ensure_plan) every read
 *   of its epoch ahead, and the node's counts of planned uses per block
 *   live in <dir>/uses, mapped by every process.  The block with the fewest
 *   uses left goes first (none left: not needed again this epoch by any
 *   reader of the node; under a random order, u uses spread over the R
 *   reads left fall on average R/(u+1) reads ahead, so fewer uses is a later
 *   next use), the least recently read among equals.
 * - A budget of 0 streams: everything not held is evicted before each fetch.
 */
#define _GNU_SOURCE
#include "lazy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int lock_range(int fd, short type, int cmd, uint64_t a, uint64_t z) {
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)a,
                      .l_len = (off_t)(z - a)};
    for (;;) {
        if (fcntl(fd, cmd, &l) == 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

static int open_part(fshard *s, int *fd) {
    if (*fd >= 0) return 0;
    int r = stk__open(s->part, O_RDWR | O_NOFOLLOW, 0);
    if (r < 0) return r;
    *fd = r;
    return 0;
}

/* Whole pages (of f->page bytes) covering [a, z). */
static uint64_t pages(const stk__fetcher *f, uint64_t a, uint64_t z) {
    return z > a ? ((z + f->page - 1) / f->page - a / f->page) * f->page : 0;
}

/* The disk the cache takes that no eviction gives back: each shard's
 * header and its tail (index, block table), or the whole of a shard held
 * whole, the presence files, the uses file (uses_len bytes), and the
 * reserve for the file system's own blocks. */
static uint64_t fixed_bytes(const stk__fetcher *f, uint64_t uses_len) {
    const stk_dataset *ds = f->ds;
    uint64_t fixed = f->margin + pages(f, 0, uses_len);
    for (size_t i = 0; i < f->n; i++) {
        const stk__shard *sh = &ds->shards[i];
        if (f->sh[i].complete) {
            fixed += pages(f, 0, sh->size);
            continue;
        }
        fixed += pages(f, 0, sh->data_off) + pages(f, sh->data_end, sh->size) +
                 pages(f, 0, f->sh[i].nblocks);
    }
    return fixed;
}

int stk__budget_init(stk__fetcher *f, const char *dir, uint64_t budget, stk_error *err) {
    stk_dataset *ds = (stk_dataset *)f->ds;
    f->budget = budget;
    if (!(f->dir = stk__strdup(dir))) return stk__err(err, -ENOMEM, "out of memory");
    uint64_t total = 0;
    for (size_t i = 0; i < f->n; i++) {
        fshard *s = &f->sh[i];
        s->first = total;
        total += ds->shards[i].nblocks;
        if (s->complete) continue;
        size_t k = s->nblocks ? s->nblocks : 1;
        s->holds = stk__calloc(k, sizeof *s->holds);
        s->tick = stk__calloc(k, sizeof *s->tick);
        s->mine = stk__calloc(k, sizeof *s->mine);
        if (!s->holds || !s->tick || !s->mine) return stk__err(err, -ENOMEM, "out of memory");
        int rc = open_part(s, &s->fd);
        if (rc) return stk__err(err, rc, "%s: %s", s->part, stk_strerror(rc));
        /* Allocated now, so that marking a block present later takes no
         * disk the budget did not count. */
        if (s->nblocks && fallocate(s->present_fd, 0, 0, (off_t)s->nblocks) != 0)
            return stk__err(err, -errno, "%s: %s", s->present_path, stk_strerror(-errno));
    }
    f->nuses = total;

    char *bl = stk__path_join(dir, "budget.lock"), *up = stk__path_join(dir, "uses");
    int rc = bl && up ? 0 : stk__err(err, -ENOMEM, "out of memory");
    if (rc == 0 && (f->budget_fd = stk__open(bl, O_RDWR | O_CREAT | O_NOFOLLOW, 0644)) < 0)
        rc = stk__err(err, f->budget_fd, "%s: %s", bl, stk_strerror(f->budget_fd));
    if (rc == 0 && (f->uses_fd = stk__open(up, O_RDWR | O_CREAT | O_NOFOLLOW, 0644)) < 0)
        rc = stk__err(err, f->uses_fd, "%s: %s", up, stk_strerror(f->uses_fd));
    size_t len = (size_t)(total ? total : 1) * sizeof(uint32_t);
    bool alone = false;
    if (rc == 0) {
        /* Every process reading the dataset under a budget holds the uses
         * file shared; one that finds itself alone starts the counts (and
         * the disk) afresh: what a stopped process planned or reserved is
         * forgotten. */
        alone = flock(f->uses_fd, LOCK_EX | LOCK_NB) == 0;
        struct stat st;
        if (fstat(f->uses_fd, &st) != 0) rc = -errno;
        else if (alone && ftruncate(f->uses_fd, 0) != 0) rc = -errno;
        else if ((alone || (uint64_t)st.st_size < len) && ftruncate(f->uses_fd, (off_t)len) != 0)
            rc = -errno;
        if (rc == 0 && fallocate(f->uses_fd, 0, 0, (off_t)len) != 0) rc = -errno;
        /* Alone: bytes allocated for blocks that never arrived (a process
         * stopped between its reservation and its fetch) are given back,
         * before any other process may start fetching (it waits for the
         * shared lock below). */
        for (size_t i = 0; rc == 0 && alone && i < f->n; i++) {
            fshard *s = &f->sh[i];
            if (s->complete) continue;
            const stk__shard *sh = &ds->shards[i];
            for (uint64_t b = 0; b < s->nblocks; b++) {
                if (stk__present_on_disk(s, b)) continue;
                uint64_t a, z;
                stk__block_bytes(sh, b, &a, &z);
                fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
                          (off_t)(z - a));
            }
        }
        if (rc == 0 && flock(f->uses_fd, LOCK_SH) != 0) rc = -errno;
        if (rc) stk__err(err, rc, "%s: %s", up, stk_strerror(rc));
    }
    struct stat pst;
    f->page = rc == 0 && fstat(f->budget_fd, &pst) == 0 && pst.st_blksize > 0
                  ? (uint64_t)pst.st_blksize : 4096;
    /* Writing into allocated blocks, and punching holes, split a file's
     * extents, and the file system may take blocks of its own to map them
     * while a fetch writes, outside the budget lock (ext4: one block per
     * 340 extents beyond the inode's 4; a shard of n blocks has at most
     * n / 2 + 1 extents).  Kept in reserve. */
    f->margin = 0;
    for (size_t i = 0; i < f->n; i++)
        if (!f->sh[i].complete && f->sh[i].nblocks > 6)
            f->margin += f->page * ((f->sh[i].nblocks / 2 + 1 + 339) / 340);
    if (rc == 0) {
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f->uses_fd, 0);
        if (m == MAP_FAILED) rc = stk__err(err, -errno, "%s: %s", up, stk_strerror(-errno));
        else f->uses = m;
    }
    stk__free(bl);
    stk__free(up);
    if (rc) return rc;
    f->limited = true;
    ds->cache_limited = true;
    ds->cache_budget = budget;
    ds->cache_fixed = fixed_bytes(f, len);
    ds->ensure_plan = stk__budget_plan;
    return 0;
}

int stk__budget_start(stk_dataset *ds, const char *dir, uint64_t budget, stk_error *err) {
    if (!ds->ensure_ctx) return 0;
    return stk__budget_init(ds->ensure_ctx, dir, budget, err);
}

void stk__budget_free(stk__fetcher *f) {
    if (f->limited) {
        /* What this process planned and did not read is no longer planned. */
        stk__budget_plan(f, NULL, 0, 0);
    }
    if (f->uses) munmap((void *)f->uses, (size_t)(f->nuses ? f->nuses : 1) * sizeof(uint32_t));
    if (f->uses_fd >= 0) close(f->uses_fd);
    if (f->budget_fd >= 0) close(f->budget_fd);
    for (size_t i = 0; i < f->n; i++) {
        fshard *s = &f->sh[i];
        stk__free(s->holds);
        stk__free(s->tick);
        stk__free(s->mine);
        if (s->evict_fd >= 0) close(s->evict_fd);
    }
    stk__free(f->dir);
}

/* ---- plans ---- */

void stk__budget_plan(void *ctx, const stk__range *r, size_t n, int sign) {
    stk__fetcher *f = ctx;
    if (!f->limited || !f->uses) return;
    pthread_mutex_lock(&f->mu);
    if (sign == 0) {
        for (size_t i = 0; i < f->n; i++) {
            fshard *s = &f->sh[i];
            if (!s->mine) continue;
            for (uint64_t b = 0; b < s->nblocks; b++) {
                if (!s->mine[b]) continue;
                atomic_fetch_sub_explicit(&f->uses[s->first + b], s->mine[b],
                                          memory_order_relaxed);
                s->mine[b] = 0;
            }
        }
    }
    for (size_t i = 0; sign && i < n; i++) {
        fshard *s = &f->sh[r[i].shard];
        uint64_t b0, b1;
        if (!s->mine || !stk__range_blocks(&f->ds->shards[r[i].shard], r[i].lo, r[i].hi, &b0, &b1))
            continue;
        for (uint64_t b = b0; b <= b1; b++) {
            if (sign > 0) {
                if (s->mine[b] == UINT32_MAX) continue;
                s->mine[b]++;
                atomic_fetch_add_explicit(&f->uses[s->first + b], 1, memory_order_relaxed);
            } else if (s->mine[b]) {
                s->mine[b]--;
                atomic_fetch_sub_explicit(&f->uses[s->first + b], 1, memory_order_relaxed);
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
}

/* ---- holds ---- */

/* Takes (or lets go of) one hold on every block under r[0..n).  A block's
 * first hold takes its read lock and reads its presence again; its last
 * release lets the lock go. */
static void holds_change(stk__fetcher *f, const stk__range *r, size_t n, bool take) {
    for (size_t i = 0; i < n; i++) {
        fshard *s = &f->sh[r[i].shard];
        const stk__shard *sh = &f->ds->shards[r[i].shard];
        uint64_t b0, b1;
        if (!s->holds || !stk__range_blocks(sh, r[i].lo, r[i].hi, &b0, &b1)) continue;
        for (uint64_t b = b0; b <= b1; b++) {
            if (take ? s->holds[b]++ != 0 : !s->holds[b] || --s->holds[b] != 0) continue;
            uint64_t a, z;
            stk__block_bytes(sh, b, &a, &z);
            if (!take) {
                s->tick[b] = ++f->tick_now;
                lock_range(s->fd, F_UNLCK, F_OFD_SETLK, a, z);
                continue;
            }
            /* An evictor holds it only while it punches: a short wait.  Were
             * the lock refused, the block is read unprotected: it is checked
             * against its checksum as it is read. */
            lock_range(s->fd, F_RDLCK, F_OFD_SETLKW, a, z);
            /* What the disk says now: evicted, or fetched, by another
             * process since this one looked. */
            bool here = stk__present_on_disk(s, b);
            if (s->state[b] == B_PRESENT && !here) s->state[b] = B_ABSENT;
            else if (s->state[b] == B_ABSENT && here) s->state[b] = B_PRESENT;
        }
    }
}

void stk__budget_hold(stk__fetcher *f, const stk__range *r, size_t n) {
    holds_change(f, r, n, true);
}

void stk__budget_release_locked(stk__fetcher *f, const stk__range *r, size_t n) {
    holds_change(f, r, n, false);
}

/* The same for blocks w[0..n), a range per block. */
static void hold_wants(stk__fetcher *f, const want *w, size_t n, bool take) {
    for (size_t i = 0; i < n; i++) {
        stk__range r = {w[i].s, 0, 0};
        stk__block_bytes(&f->ds->shards[w[i].s], w[i].b, &r.lo, &r.hi);
        holds_change(f, &r, 1, take);
    }
}

void stk__budget_hold_wants(stk__fetcher *f, const want *w, size_t n) { hold_wants(f, w, n, true); }
void stk__budget_release_wants(stk__fetcher *f, const want *w, size_t n) {
    hold_wants(f, w, n, false);
}

/* ---- eviction ---- */

typedef struct cand {
    uint32_t uses, tick;
    uint32_t s;
    uint64_t b;
} cand;

static int by_need(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->uses != b->uses) return a->uses < b->uses ? -1 : 1;
    if (a->tick != b->tick) return a->tick < b->tick ? -1 : 1;
    return 0;
}

/* Evicts blocks no reader holds, the least needed first, until `goal`
 * bytes are freed (UINT64_MAX: all it can).  Under mu and the budget
 * lock.  Returns the bytes punched out. */
static uint64_t evict(stk__fetcher *f, uint64_t goal) {
    cand *c = NULL;
    size_t nc = 0, cap = 0;
    uint8_t *pres = NULL;
    size_t pcap = 0;
    for (size_t i = 0; i < f->n; i++) {
        fshard *s = &f->sh[i];
        if (!s->holds || !s->nblocks) continue;
        if (pcap < s->nblocks) {
            uint8_t *p = stk__realloc(pres, (size_t)s->nblocks);
            if (!p) break;
            pres = p;
            pcap = (size_t)s->nblocks;
        }
        /* On disk: other processes' blocks too. */
        ssize_t got = stk__pread_full(s->present_fd, pres, (size_t)s->nblocks, 0);
        if (got < 0) continue;
        for (uint64_t b = 0; b < s->nblocks; b++) {
            bool here = (int64_t)b < got && pres[b] == 1;
            if (!here || s->holds[b] || s->state[b] == B_FLIGHT) continue;
            if (!stk__grow(&c, &cap, nc, sizeof *c, 1024)) break;
            c[nc++] = (cand){atomic_load_explicit(&f->uses[s->first + b], memory_order_relaxed),
                             s->tick[b], (uint32_t)i, b};
        }
    }
    stk__free(pres);
    if (nc) qsort(c, nc, sizeof *c, by_need);
    uint64_t freed = 0;
    const uint8_t zero = 0;
    for (size_t k = 0; k < nc && freed < goal; k++) {
        fshard *s = &f->sh[c[k].s];
        const stk__shard *sh = &f->ds->shards[c[k].s];
        uint64_t a, z;
        stk__block_bytes(sh, c[k].b, &a, &z);
        if (open_part(s, &s->evict_fd) != 0) continue;
        /* Another process reading it holds a read lock: passed over. */
        if (lock_range(s->evict_fd, F_WRLCK, F_OFD_SETLK, a, z) != 0) continue;
        if (stk__present_on_disk(s, c[k].b) &&
            fallocate(s->evict_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
                      (off_t)(z - a)) == 0) {
            stk__pwrite_full(s->present_fd, &zero, 1, c[k].b);
            s->state[c[k].b] = B_ABSENT;
            freed += z - a;
        }
        lock_range(s->evict_fd, F_UNLCK, F_OFD_SETLK, a, z);
    }
    stk__free(c);
    f->evicted += freed;
    return freed;
}

/* The disk blocks w may take: each block's bytes widened to whole pages of
 * the file system (a block need not start on one; a page two blocks share
 * is counted twice, w being in no particular order). */
static uint64_t want_bytes(const stk__fetcher *f, const want *w, size_t n) {
    uint64_t need = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a, z, pg = f->page;
        stk__block_bytes(&f->ds->shards[w[i].s], w[i].b, &a, &z);
        need += (z + pg - 1) / pg * pg - a / pg * pg;
    }
    return need;
}

/* Allocates the bytes of blocks w (they are held: no evictor touches them). */
static void allocate(stk__fetcher *f, const want *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t a, z;
        stk__block_bytes(&f->ds->shards[w[i].s], w[i].b, &a, &z);
        fallocate(f->sh[w[i].s].fd, 0, (off_t)a, (off_t)(z - a));
    }
}

int stk__budget_reserve(stk__fetcher *f, const want *w, size_t n, bool wait, stk_error *err) {
    uint64_t need = want_bytes(f, w, n);
    const uint64_t B = f->budget;
    if (B && need + f->margin > B)
        return stk__err(err, -ENOSPC,
                        "%s: one read needs %" PRIu64 " KiB of the cache at once, more than its "
                        "budget of %" PRIu64 " KiB; raise the cache budget",
                        f->url.text, need >> 10, B >> 10);
    const int64_t limit = (int64_t)((f->timeout_s + 5) * 1e9);
    int64_t t0 = stk__now_ns();
    uint64_t used = 0;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        /* A shard whose object changed will never be fetched: its error,
         * not a wait for room. */
        for (size_t i = 0; i < n; i++) {
            const stk_error *c = f->sh[w[i].s].changed;
            if (!c) continue;
            if (err) *err = *c;
            pthread_mutex_unlock(&f->mu);
            return c->code;
        }
        while (flock(f->budget_fd, LOCK_EX) != 0 && errno == EINTR) {}
        bool ok;
        if (B == 0) {
            evict(f, UINT64_MAX);
            ok = true;
        } else {
            used = stk__cache_du(f->dir);
            uint64_t room = B > f->margin ? B - f->margin : 0;
            if (used + need > room) {
                /* A sixteenth of the budget more than needed: the disk is
                 * measured again less often. */
                uint64_t target = room > need ? room - need : 0;
                uint64_t slack = STK__MIN(B / 16, target);
                evict(f, used - (target - slack));
                used = stk__cache_du(f->dir);
            }
            ok = used + need <= room;
        }
        if (ok) {
            allocate(f, w, n);
            if (B) {
                /* The file system's own blocks (an extent tree that grew
                 * with the holes) are seen only now: more goes if need be. */
                used = stk__cache_du(f->dir);
                if (used > B) {
                    evict(f, used - B + STK__MIN(B / 16, B - STK__MIN(need, B)));
                    used = stk__cache_du(f->dir);
                }
            }
            if (used > f->peak) f->peak = used;
        }
        flock(f->budget_fd, LOCK_UN);
        pthread_mutex_unlock(&f->mu);
        if (ok) return 0;
        if (!wait) return -EAGAIN;
        /* Everything left is held by readers: they let go once they have
         * read it.  When fetches failed meanwhile, the room lacked because
         * of them (readers that cannot read hold on): the first failure is
         * the cause, and what the user is told. */
        pthread_mutex_lock(&f->mu);
        stk_error cause = f->cause;
        pthread_mutex_unlock(&f->mu);
        if ((int64_t)(stk__now_ns() - t0) > limit && cause.code)
            return stk__err(err, cause.code,
                            "%s (and since, the cache budget of %" PRIu64 " KiB has had no "
                            "room for %" PRIu64 " KiB for %g s)",
                            cause.message, B >> 10, need >> 10, f->timeout_s + 5);
        if ((int64_t)(stk__now_ns() - t0) > limit)
            return stk__err(err, -ENOSPC,
                            "%s: the cache budget of %" PRIu64 " KiB has had no room for %" PRIu64
                            " KiB for %g s: the readers sharing it (%s) hold %" PRIu64
                            " KiB between fetching and reading; raise the budget, or read "
                            "with fewer threads or processes",
                            f->url.text, B >> 10, need >> 10, f->timeout_s + 5, f->dir,
                            used >> 10);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void stk__budget_unreserve(stk__fetcher *f, const want *w, size_t n) {
    if (!f->limited || !n) return;
    while (flock(f->budget_fd, LOCK_EX) != 0 && errno == EINTR) {}
    for (size_t i = 0; i < n; i++) {
        fshard *s = &f->sh[w[i].s];
        uint64_t b = w[i].b;
        if (w[i].got || !s->holds || s->holds[b] || s->state[b] != B_ABSENT) continue;
        uint64_t a, z;
        stk__block_bytes(&f->ds->shards[w[i].s], b, &a, &z);
        if (open_part(s, &s->evict_fd) != 0) continue;
        /* A reader of another process holds it (and will fetch it into what
         * was allocated): passed over, as eviction does. */
        if (lock_range(s->evict_fd, F_WRLCK, F_OFD_SETLK, a, z) != 0) continue;
        if (!stk__present_on_disk(s, b))
            fallocate(s->evict_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
                      (off_t)(z - a));
        lock_range(s->evict_fd, F_UNLCK, F_OFD_SETLK, a, z);
    }
    flock(f->budget_fd, LOCK_UN);
}
