/*
 * lazy.h: what lazy.c (fetching a remote dataset's blocks as they are read)
 * and budget.c (keeping its cache within a byte budget) share.  Private to
 * src/remote.
 */
#ifndef STK_REMOTE_LAZY_H
#define STK_REMOTE_LAZY_H

#include "remote.h"
#include "../format/format.h"

#include <pthread.h>
#include <stdatomic.h>

#define TRIES 3

/* B_BAD: failed its checksum on every try; asked for again, it is the same
 * error at once (fetching it again from another thread would only repeat
 * the tries).  Transfer errors leave a block absent: they may pass. */
enum { B_ABSENT, B_FLIGHT, B_PRESENT, B_BAD };

typedef struct fshard {
    char *url, *name, *part, *final, *present_path, *lock_path;
    char pin[128];
    bool complete;
    uint8_t *state; /* per block */
    uint64_t nblocks;
    int fd, present_fd, lock_fd;
    int lockers; /* this process's threads holding the shard's lock (under mu):
                  * flock is per open file, which they share */
    bool given_up; /* a wait for another process's lock timed out (under mu):
                    * the next waiters fail at once until the lock is had */
    uint64_t timed_out_ns; /* when a fetch of its blocks last timed out (under
                            * mu; 0: never): see ensure */
    stk_error *changed; /* the object changed since it was pinned (under mu;
                         * NULL: not seen): every later read of the shard
                         * fails at once with this error */
    /* Under a budget (budget.c), per block, under mu: */
    uint32_t *holds; /* this process's readers between ensure and release */
    uint32_t *tick;  /* when its last reader let it go */
    uint32_t *mine;  /* the planned uses this process added to the node's */
    uint64_t first;  /* the node's use counts: index of block 0 */
    int evict_fd;    /* a second open of the .part: an eviction's locks */
} fshard;

struct stk__fetcher {
    stk__url url;
    const stk_dataset *ds;
    fshard *sh;
    size_t n;
    uint64_t part;
    double timeout_s; /* the deadline of a request (stk__remote_timeout) */
    /* The first fetch failure since the last fetch that succeeded (under
     * mu; code 0: none): what a wait for the budget's room names when it
     * ends, the room having been lacking because of it. */
    stk_error cause;
    /* The fetches that failed with STK_ETIMEOUT, and the last one's error
     * (under mu): a reader whose wait saw one fails with it at once. */
    uint64_t timeouts;
    stk_error timeout;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stk__http **idle; /* clients not in use */
    size_t nidle, cap_idle;
    stk__aws **awss;  /* each client's own settings */
    size_t naws;
    stk_remote_stats done; /* of clients freed */
    stk__http **all;
    size_t nall;
    /* The cache budget (budget.c); limited false: none, every block kept. */
    bool limited;
    uint64_t budget; /* bytes of disk; 0: stream */
    char *dir;       /* the dataset's cache directory */
    int budget_fd;   /* <dir>/budget.lock: one process at a time reserves */
    int uses_fd;     /* <dir>/uses: the node's planned uses of each block */
    _Atomic uint32_t *uses;
    uint64_t nuses;  /* blocks counted there (every shard's) */
    uint64_t page;   /* the file system's block size */
    uint64_t margin; /* bytes kept for the file system's own blocks */
    uint32_t tick_now;
    uint64_t peak;   /* the largest disk use seen after a reservation */
    uint64_t evicted; /* bytes evicted by this process */
    /* Read-ahead (stk_dataset.ensure_ahead), under mu: ranges queued for a
     * thread of their own that fetches them in the order they came. */
    stk__range *aq;
    size_t naq, cap_aq;
    uint64_t aq_bytes;
    pthread_t ahead_tid;
    bool ahead_started, ahead_stop;
    bool ahead_whole; /* the reader reads every byte: gaps may be filled */
    pthread_cond_t ahead_cv;
};

/* ---- budget.c ---- */

/* Puts the fetcher's cache under a budget of `budget` bytes of disk (0:
 * stream) for dataset directory `dir`; after stk__fetcher_attach. */
int stk__budget_init(stk__fetcher *f, const char *dir, uint64_t budget, stk_error *err);
void stk__budget_free(stk__fetcher *f);
/* stk_dataset.ensure_plan (format.h). */
void stk__budget_plan(void *ctx, const stk__range *r, size_t n, int sign);
/* Holds the blocks under r[0..n) for a reader (under mu): no process can
 * evict them until stk__budget_release; a block another process evicted
 * since this one saw it is absent again. */
void stk__budget_hold(stk__fetcher *f, const stk__range *r, size_t n);
void stk__budget_release_locked(stk__fetcher *f, const stk__range *r, size_t n);
/* The same for blocks w[0..n) (the read-ahead holds what it fetches, so
 * that the room made for them stays theirs). */
struct want;
void stk__budget_hold_wants(stk__fetcher *f, const struct want *w, size_t n);
void stk__budget_release_wants(stk__fetcher *f, const struct want *w, size_t n);
/* Makes room for the blocks w (not under mu): evicts what is needed least
 * soon, waiting while other readers hold everything (unless !wait:
 * -EAGAIN at once), then allocates their bytes so that the disk use counts
 * them before they arrive. */
struct want;
int stk__budget_reserve(stk__fetcher *f, const struct want *w, size_t n, bool wait,
                        stk_error *err);
/* Gives back what stk__budget_reserve allocated for blocks w[0..n) that did
 * not arrive (a failed fetch), where no reader of any process holds them:
 * otherwise the budget would stay taken by bytes that never come.  Under
 * mu, after the holds on them were released. */
void stk__budget_unreserve(stk__fetcher *f, const struct want *w, size_t n);

typedef struct want {
    uint32_t s;
    uint64_t b;
    bool got; /* arrived and checked */
    bool bad; /* failed its checksum on every try */
    bool had; /* found present: another process fetched it (its presence
               * mark is that process's to write, and may since have been
               * cleared by an eviction: never written again here) */
} want;

/* Whether block b of shard s is marked present on disk (by whichever
 * process fetched it). */
static inline bool stk__present_on_disk(const fshard *s, uint64_t b) {
    uint8_t byte = 0;
    return s->present_fd >= 0 && stk__pread_full(s->present_fd, &byte, 1, b) == 1 && byte == 1;
}

/* Room for one more element in the array *p of *cap elements of `size`
 * bytes holding n: doubled (from `first`) when full.  false when out of
 * memory (the array is left as it was). */
static inline bool stk__grow(void *p, size_t *cap, size_t n, size_t size, size_t first) {
    if (n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : first;
    void *g = stk__realloc(*(void **)p, nc * size);
    if (!g) return false;
    *(void **)p = g;
    *cap = nc;
    return true;
}

/* Block b of shard sh: bytes [*a, *z). */
static inline void stk__block_bytes(const stk__shard *sh, uint64_t b, uint64_t *a, uint64_t *z) {
    *a = sh->data_off + b * sh->block_size;
    *z = STK__MIN(*a + sh->block_size, sh->data_end);
}

/* The blocks of shard sh under bytes [lo, hi): [*b0, *b1], false if none
 * (the range lies in the header or the index, fetched at open). */
static inline bool stk__range_blocks(const stk__shard *sh, uint64_t lo, uint64_t hi,
                                     uint64_t *b0, uint64_t *b1) {
    lo = STK__MAX(lo, sh->data_off);
    hi = STK__MIN(hi, sh->data_end);
    if (lo >= hi || !sh->block_size) return false;
    *b0 = (lo - sh->data_off) / sh->block_size;
    *b1 = (hi - 1 - sh->data_off) / sh->block_size;
    return true;
}

#endif
