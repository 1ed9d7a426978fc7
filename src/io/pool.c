/*
 * pool.c: reads with pread(2), issued by the worker threads themselves (the
 * workers are the pool).  The fallback where io_uring is missing.
 */
#include "io.h"

#include <errno.h>

int stk__io_fail(const stk__files *f, const stk__ioreq *r, int code, uint64_t got,
                 stk_error *err) {
    const stk__shard *sh = &f->ds->shards[r->shard];
    const char *path = sh->path;
    if (code == 0)
        /* Name the record where the file now ends. */
        return stk__err(err, STK_ETRUNCATED,
                        "%s: record %llu: read of %llu bytes at offset %llu returned only "
                        "%llu (the file shrank?)",
                        path,
                        (unsigned long long)stk__dataset_record_at(f->ds, sh, r->off + got),
                        (unsigned long long)r->need,
                        (unsigned long long)r->off, (unsigned long long)got);
    return stk__err(err, code, "%s: record %llu: read of %llu bytes at offset %llu failed: %s",
                    path, (unsigned long long)r->rec, (unsigned long long)r->len,
                    (unsigned long long)r->off, stk_strerror(code));
}

static int pool_exec(stk__io *io, stk__ioreq *reqs, size_t n, stk_error *err) {
    for (size_t i = 0; i < n; i++) {
        stk__ioreq *r = &reqs[i];
        ssize_t got = stk__pread_full(r->fd, r->dst, (size_t)r->len, r->off);
        if (got < 0) return stk__io_fail(io->files, r, (int)got, 0, err);
        if ((uint64_t)got < r->need) return stk__io_fail(io->files, r, 0, (uint64_t)got, err);
    }
    io->reads += n;
    if (n && io->max_inflight < 1) io->max_inflight = 1;
    return 0;
}

static void pool_close(stk__io *io) { stk__free(io); }

static const stk__io_ops pool_ops = {pool_exec, pool_close};

int stk__io_pool_open(const stk__files *f, stk__io **out, stk_error *err) {
    stk__io *io = stk__calloc(1, sizeof *io);
    if (!io) return stk__err(err, -ENOMEM, "out of memory");
    io->ops = &pool_ops;
    io->files = f;
    *out = io;
    return 0;
}
