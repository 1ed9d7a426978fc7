/*
 * mmap.c: "reads" that copy out of the dataset's read-only mapping.  With
 * the data in the page cache this is the cheapest path there is: no system
 * call per read, one copy.  Cold data faults in page by page, which is why
 * the automatic choice takes it only for resident data.
 */
#include "io.h"

#include <errno.h>
#include <string.h>

static int mmap_exec(stk__io *io, stk__ioreq *reqs, size_t n, stk_error *err) {
    const stk_dataset *ds = io->files->ds;
    for (size_t i = 0; i < n; i++) {
        const stk__ioreq *r = &reqs[i];
        const stk__shard *sh = &ds->shards[r->shard];
        if (r->off > sh->size || r->need > sh->size - r->off)
            return stk__io_fail(io->files, r, 0, 0, err);
        memcpy(r->dst, sh->map + r->off, (size_t)STK__MIN(r->len, sh->size - r->off));
    }
    io->reads += n;
    return 0;
}

static void mmap_close(stk__io *io) { stk__free(io); }

static const stk__io_ops mmap_ops = {mmap_exec, mmap_close};

int stk__io_mmap_open(const stk__files *f, stk__io **out, stk_error *err) {
    stk__io *io = stk__calloc(1, sizeof *io);
    if (!io) return stk__err(err, -ENOMEM, "out of memory");
    io->ops = &mmap_ops;
    io->files = f;
    *out = io;
    return 0;
}
