/*
 * io.h: the I/O engine.  One `stk__io` belongs to one worker thread and
 * executes a list of reads, each into its final destination, returning when
 * all have landed.  The backends are one file each: uring.c (io_uring, with
 * up to queue_depth reads in flight), pool.c (pread from the worker itself)
 * and mmap.c (copies out of the dataset's mapping).
 */
#ifndef STK_IO_H
#define STK_IO_H

#include "../core/internal.h"
#include "../format/format.h"

#include <setjmp.h>

typedef struct stk__ioreq {
    uint32_t shard;
    uint64_t off;
    uint64_t len;  /* bytes to read */
    uint64_t need; /* bytes that must arrive (< len only at the end of an
                    * O_DIRECT file, whose last read comes back short) */
    uint8_t *dst;
    uint64_t rec;  /* the record it serves, for messages */
    int fd;        /* set by stk__files_pin for the backend */
} stk__ioreq;

typedef struct stk__fdcache stk__fdcache;

/* What every backend of one loader shares: the files, each opened once up
 * front or, past a budget of descriptors, through a cache (files.c). */
typedef struct stk__files {
    const stk_dataset *ds;
    int *fds; /* one per shard, -1 for the mmap backend or when closed */
    bool direct;
    bool random; /* reads come in random order: no read-ahead */
    stk__fdcache *cache; /* NULL: every file is open for the loader's life */
    size_t max_pins;     /* distinct files one stk__io_exec pins at a time */
} stk__files;

/* Opens the dataset's files for reading: all of them when at most `budget`
 * (0: a default from the process's descriptor limit), else on demand
 * through a cache of `budget` descriptors.  `random`: the reads will come
 * in random order, so the kernel's read-ahead is turned off for them. */
int stk__files_open(stk__files *f, const stk_dataset *ds, bool direct, bool random, bool none,
                    unsigned budget, stk_error *err);
void stk__files_close(stk__files *f);
/* Sets r[i].fd for n requests, opening files as needed; each stays open
 * until unpinned. */
int stk__files_pin(const stk__files *f, stk__ioreq *r, size_t n, stk_error *err);
void stk__files_unpin(const stk__files *f, const stk__ioreq *r, size_t n);
/* Divides the cache among `users` threads that read at once: each
 * stk__io_exec then pins at most its share of the budget at a time, so
 * that reads spanning many files (a block-order group over small shards)
 * stay within the process's descriptor limit. */
void stk__files_share(stk__files *f, unsigned users);
/* Descriptors open now (for tests and stats). */
size_t stk__files_open_count(const stk__files *f);

typedef struct stk__io stk__io;

typedef struct stk__io_ops {
    int (*exec)(stk__io *io, stk__ioreq *reqs, size_t n, stk_error *err);
    void (*close)(stk__io *io);
} stk__io_ops;

struct stk__io {
    const stk__io_ops *ops;
    const stk__files *files;
    uint64_t reads;        /* reads issued */
    /* Written by the owning worker, read by stk_loader_stats_get. */
    _Atomic uint64_t max_inflight;
};

int stk__io_uring_open(const stk__files *f, unsigned queue_depth, stk__io **out, stk_error *err);
int stk__io_pool_open(const stk__files *f, stk__io **out, stk_error *err);
int stk__io_mmap_open(const stk__files *f, stk__io **out, stk_error *err);
/* Whether io_uring works here (kernel support, not forbidden by policy). */
bool stk__io_uring_available(void);

/* A SIGBUS in a guarded stretch of a thread (a shard cut short under the
 * mapping the mmap backend reads) becomes an error instead of the end of
 * the process.  The thread arms a guard with sigsetjmp(g.jb, 0), sets
 * stk__bus_guard_cur to it, runs the stretch and clears it; a SIGBUS in
 * between returns from sigsetjmp a second time with g.addr the faulting
 * address.  The stretch must hold no lock and allocate nothing it would
 * leak by being abandoned.  A SIGBUS outside a guard goes to the handler
 * that was there before stoker's (by default, the end of the process).
 * stk__bus_install installs the handler, once per process; returns 0 or a
 * negative errno.  Thread-safe. */
typedef struct stk__bus_guard {
    sigjmp_buf jb;
    void *volatile addr;
} stk__bus_guard;
extern _Thread_local stk__bus_guard *volatile stk__bus_guard_cur
    __attribute__((tls_model("initial-exec")));
int stk__bus_install(void);
/* The message for a SIGBUS at `addr` while reading ds through its mapping:
 * names the shard whose mapping holds addr and its size now. */
int stk__bus_error(const stk_dataset *ds, const void *addr, stk_error *err);

static inline int stk__io_exec_pinned(stk__io *io, stk__ioreq *r, size_t n, stk_error *err) {
    int rc = stk__files_pin(io->files, r, n, err);
    if (rc) return rc;
    rc = io->ops->exec(io, r, n, err);
    stk__files_unpin(io->files, r, n);
    return rc;
}
/* Executes n reads, in slices of at most files->max_pins distinct files
 * (counted as changes of file along the list) when files are cached. */
static inline int stk__io_exec(stk__io *io, stk__ioreq *r, size_t n, stk_error *err) {
    size_t cap = io->files->max_pins;
    if (!io->files->cache || !cap) return stk__io_exec_pinned(io, r, n, err);
    size_t start = 0, files = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > start && r[i].shard == r[i - 1].shard) continue;
        if (files == cap) {
            int rc = stk__io_exec_pinned(io, r + start, i - start, err);
            if (rc) return rc;
            start = i;
            files = 0;
        }
        files++;
    }
    return n > start ? stk__io_exec_pinned(io, r + start, n - start, err) : 0;
}
static inline void stk__io_close(stk__io *io) {
    if (io) io->ops->close(io);
}

/* ---- warm-up (warm.c) ---- */

typedef struct stk__warm stk__warm;

/* Starts a thread that brings ranges r[0..n) of the dataset's mapped
 * shards into the page cache in that order, with large reads, and marks
 * the shards' mappings MADV_HUGEPAGE.  r is copied.  Every shard a range
 * names must be mapped. */
int stk__warm_start(const stk_dataset *ds, const stk__range *r, size_t n, stk__warm **out,
                    stk_error *err);
/* Pieces and bytes brought in so far, the time spent in them, and whether
 * the thread has finished (NULL: nothing, finished). */
void stk__warm_stats(const stk__warm *w, uint64_t *pieces, uint64_t *bytes, uint64_t *ns,
                     bool *done);
/* Waits until bytes [lo, hi) of shard s are in (the part of them in the
 * ranges given), or the thread has finished for any reason; returns whether
 * it waited.  Safe from any thread while the warm-up is not stopped. */
bool stk__warm_wait(stk__warm *w, uint32_t s, uint64_t lo, uint64_t hi);
/* Whether bytes [lo, hi) of shard s are in (or the thread has finished),
 * without waiting. */
bool stk__warm_arrived(const stk__warm *w, uint32_t s, uint64_t lo, uint64_t hi);
/* Waits until a piece lands after the *seen-th (or the thread finishes),
 * and sets *seen to the pieces landed so far. */
void stk__warm_wait_piece(stk__warm *w, uint64_t *seen);
/* Whether the thread has finished (NULL: yes). */
bool stk__warm_done(const stk__warm *w);
/* Tells the thread to stop at its next piece, without waiting: threads in
 * stk__warm_wait are released when it does. */
void stk__warm_cancel(stk__warm *w);
/* Stops the thread, waits for it, and frees; nothing may still be in
 * stk__warm_wait.  NULL is fine. */
void stk__warm_stop(stk__warm *w);

/* The message for a read that failed or came back short. */
int stk__io_fail(const stk__files *f, const stk__ioreq *r, int code, uint64_t got,
                 stk_error *err);

#endif
