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

typedef struct stk__ioreq {
    uint32_t shard;
    uint64_t off;
    uint64_t len;  /* bytes to read */
    uint64_t need; /* bytes that must arrive (< len only at the end of an
                    * O_DIRECT file, whose last read comes back short) */
    uint8_t *dst;
    uint64_t rec;  /* the record it serves, for messages */
} stk__ioreq;

/* What every backend of one loader shares. */
typedef struct stk__files {
    const stk_dataset *ds;
    int *fds; /* one per shard, -1 for the mmap backend */
    bool direct;
} stk__files;

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

static inline int stk__io_exec(stk__io *io, stk__ioreq *r, size_t n, stk_error *err) {
    return io->ops->exec(io, r, n, err);
}
static inline void stk__io_close(stk__io *io) {
    if (io) io->ops->close(io);
}

/* The message for a read that failed or came back short. */
int stk__io_fail(const stk__files *f, const stk__ioreq *r, int code, uint64_t got,
                 stk_error *err);

#endif
