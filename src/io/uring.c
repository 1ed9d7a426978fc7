/*
 * uring.c: reads through io_uring, one ring per worker thread.
 *
 * A worker hands over all the reads of a batch (or of a group of blocks) at
 * once; they are kept queue_depth deep in the kernel, with one system call
 * per submission round rather than one per read.  Reads served from the page
 * cache complete inline; the others run in parallel on the device.  A short
 * read is continued from where it stopped.
 */
#include "io.h"
#include "../core/fault.h"

#include <errno.h>
#include <liburing.h>
#include <string.h>

typedef struct uring_io {
    stk__io base;
    struct io_uring ring;
    unsigned depth;
    uint64_t *done; /* bytes landed per request of the current exec */
    size_t done_cap;
} uring_io;

#define MAX_READ (1u << 30)

static void queue_read(uring_io *u, const stk__ioreq *r, size_t idx) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    uint64_t from = u->done[idx];
    unsigned len = (unsigned)STK__MIN(r->len - from, (uint64_t)MAX_READ);
    io_uring_prep_read(sqe, r->fd, r->dst + from, len, r->off + from);
    io_uring_sqe_set_data64(sqe, idx);
}

static int uring_exec(stk__io *io, stk__ioreq *reqs, size_t n, stk_error *err) {
    uring_io *u = (uring_io *)io;
    if (n > u->done_cap) {
        uint64_t *d = stk__realloc(u->done, n * sizeof *d);
        if (!d) return stk__err(err, -ENOMEM, "out of memory");
        u->done = d;
        u->done_cap = n;
    }
    memset(u->done, 0, n * sizeof *u->done);
    size_t next = 0, finished = 0, inflight = 0;
    int rc = 0;
    /* Requests to continue after a short read, as a stack of indexes. */
    size_t retry_top = 0;
    size_t *retry = NULL;
    while (finished < n) {
        while (inflight < u->depth && (retry_top || (next < n && rc == 0))) {
            size_t idx = retry_top ? retry[--retry_top] : next++;
            queue_read(u, &reqs[idx], idx);
            inflight++;
            io->reads++;
        }
        if (inflight > io->max_inflight) io->max_inflight = inflight;
        if (inflight == 0) break; /* an error stopped new submissions */
        int s = io_uring_submit_and_wait(&u->ring, 1);
        if (s < 0 && s != -EINTR && s != -EAGAIN && s != -EBUSY) {
            /* The ring is unusable; nothing more can be reaped safely. */
            rc = rc ? rc : stk__err(err, s, "io_uring submit failed: %s", stk_strerror(s));
            break;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&u->ring, head, cqe) {
            seen++;
            inflight--;
            size_t idx = (size_t)io_uring_cqe_get_data64(cqe);
            const stk__ioreq *r = &reqs[idx];
            int res = cqe->res, fe;
            if (stk__fault_hit(STK__FAULT_URING, &fe)) res = fe ? fe : res / 2;
            if (res < 0) {
                if (rc == 0) rc = stk__io_fail(io->files, r, res, 0, err);
                finished++;
                continue;
            }
            u->done[idx] += (uint64_t)res;
            if (u->done[idx] >= r->len || (res == 0 && u->done[idx] >= r->need)) {
                finished++;
            } else if (res == 0) {
                if (rc == 0) rc = stk__io_fail(io->files, r, 0, u->done[idx], err);
                finished++;
            } else if (rc == 0) {
                if (!retry) retry = stk__malloc(n * sizeof *retry);
                if (!retry) {
                    rc = stk__err(err, -ENOMEM, "out of memory");
                    finished++;
                } else {
                    retry[retry_top++] = idx;
                }
            } else {
                finished++;
            }
        }
        io_uring_cq_advance(&u->ring, seen);
        if (rc && next < n) {
            /* Count the never-submitted requests as finished. */
            finished += n - next;
            next = n;
        }
    }
    stk__free(retry);
    return rc;
}

static void uring_close(stk__io *io) {
    uring_io *u = (uring_io *)io;
    io_uring_queue_exit(&u->ring);
    stk__free(u->done);
    stk__free(u);
}

static const stk__io_ops uring_ops = {uring_exec, uring_close};

bool stk__io_uring_available(void) {
    struct io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
}

int stk__io_uring_open(const stk__files *f, unsigned depth, stk__io **out, stk_error *err) {
    uring_io *u = stk__calloc(1, sizeof *u);
    if (!u) return stk__err(err, -ENOMEM, "out of memory");
    u->depth = depth ? depth : 64;
    int rc = io_uring_queue_init(u->depth, &u->ring, 0);
    if (rc < 0) {
        stk__free(u);
        return stk__err(err, rc, "io_uring_queue_init(%u) failed: %s", depth, stk_strerror(rc));
    }
    u->base.ops = &uring_ops;
    u->base.files = f;
    *out = &u->base;
    return 0;
}
