/*
 * fill.c: a worker.  It claims the lowest batch not yet claimed, computes
 * the batch's samples and their records and rows, waits for the warm-up to
 * bring their bytes in, checks their blocks first where that is the way,
 * and fills the batch by one of three paths: groups (block order,
 * groups.c), gathering from the mapping (gather.c), or reads planned per
 * sample and field straight into place or through staging (here), with the
 * copies, decodes and conversions that follow them (posts).
 */
#define _GNU_SOURCE
#include "loader.h"

#include "../core/fault.h"

#include <errno.h>
#include <string.h>

/* ---- posts ---- */

/* Makes room for `need` elements of `elem` bytes in *p (of *cap), at least
 * doubling it; on -ENOMEM *p is as it was. */
int stk__ld_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = STK__MAX(need, *cap * 2);
    void *q = stk__realloc(*p, c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* A record (or window) out of a filtered chunk whose stored bytes are at
 * p->src: decodes the chunk (unless this worker just did) and copies the
 * sample's bytes. */
static int post_chunk(stk_loader *ld, worker *w, const post *p, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    size_t si = stk__dataset_shard_of(ds, p->rec);
    const stk__shard *sh = &ds->shards[si];
    uint64_t local = p->rec - sh->first;
    const uint64_t *c = sh->chunk + 3 * local;
    if (c[1] == 0) { /* a chunk the filters left plain */
        memcpy(p->dst, p->src + p->skip, (size_t)p->raw);
        return 0;
    }
    uint64_t off = stk__e_off(ds, sh, stk__entry(ds, sh, local), 0);
    if (!(w->chunk_valid && w->chunk_shard == si && w->chunk_off == off)) {
        if (c[1] > w->chunk_cap) {
            uint8_t *b = stk__realloc(w->chunk, (size_t)(2 * c[1]));
            if (!b) return stk__err(err, -ENOMEM, "out of memory");
            w->chunk = b;
            w->chunk_cap = c[1];
        }
        w->chunk_valid = false;
        const char *why = "";
        w->chunk_data = stk__chunk_decode((unsigned)c[2], ds->info[0].itemsize, p->src, p->len,
                                          c[1], w->chunk, w->chunk + c[1], &why);
        if (!w->chunk_data)
            return stk__err(err, STK_ECODEC,
                            "%s: record %llu: its chunk at byte %llu (%s) cannot be read: %s",
                            sh->path, (unsigned long long)p->rec, (unsigned long long)off,
                            stk__chunks_name((int)c[2]), why);
        if (w->chunk_data == p->src) {
            /* Only checked, not transformed: the bytes are still where they
             * were read (staging, reused by the next batch), and the cache
             * must own what it keeps. */
            memcpy(w->chunk, p->src, (size_t)c[1]);
            w->chunk_data = w->chunk;
        }
        w->chunk_valid = true;
        w->chunk_shard = si;
        w->chunk_off = off;
    }
    memcpy(p->dst, w->chunk_data + c[0] + p->skip, (size_t)p->raw);
    return 0;
}

/* Runs the copies, decodes and conversions planned for a batch, their
 * sources prefetched AHEAD posts before they are needed (copies out of a
 * group buffer or the mapping land in random order). */
/* Decodes a media field's record into the sample's place. */
static int post_media(stk_loader *ld, worker *w, const post *p, stk_error *err) {
    const lfield *lf = &ld->f[p->conv];
    char why[STK__WHY] = "";
    uint64_t key = stk_decode_key(w->seed, w->epoch, p->rec);
    uint64_t t0 = stk__now_ns();
    int rc = stk__media_decode(&w->media, lf->dec, p->src, (size_t)p->len, key, p->dst, NULL,
                               NULL, why);
    ld->st_dec_ns += stk__now_ns() - t0;
    ld->st_dec_n++;
    ld->st_dec_bytes += p->len;
    if (rc == 0) return 0;
    size_t s = stk__dataset_shard_of(ld->ds, p->rec);
    rc = stk__err(err, rc, "%s: record %llu field '%s': %s", ld->ds->shards[s].path,
                  (unsigned long long)p->rec, ld->ds->fields[p->field].name,
                  why[0] ? why : stk_strerror(rc));
    if (rc == STK_EMEDIA && ld->media_bad) {
        pthread_mutex_lock(&ld->mu);
        ld->media_err = *err;
        ld->media_err_rec = p->rec;
        pthread_mutex_unlock(&ld->mu);
        atomic_fetch_or(&ld->media_bad[p->rec / 64], 1ull << (p->rec % 64));
        return REFILL_MEDIA;
    }
    return rc;
}

int stk__ld_do_posts(stk_loader *ld, worker *w, size_t np, stk_error *err) {
    for (size_t i = 0; i < STK__MIN(np, (size_t)AHEAD); i++)
        if (w->posts[i].src) stk__ld_prefetch(w->posts[i].src, w->posts[i].len);
    for (size_t i = 0; i < np; i++) {
        post *p = &w->posts[i];
        if (i + AHEAD < np && p[AHEAD].src) stk__ld_prefetch(p[AHEAD].src, p[AHEAD].len);
        if (p->kind == POST_COPY) {
            memcpy(p->dst, p->src, (size_t)p->len);
        } else if (p->kind == POST_CHUNK) {
            int rc = post_chunk(ld, w, p, err);
            if (rc) return rc;
        } else if (p->kind == POST_CONV) {
            const stk__fieldinfo *fi = &ld->ds->info[p->field];
            stk__conv_run(p->conv, p->dst, p->src, p->raw / fi->itemsize);
        } else if (p->kind == POST_MEDIA) {
            int rc = post_media(ld, w, p, err);
            if (rc) return rc;
        } else if (p->kind == POST_ZSTD) {
            size_t r = ZSTD_decompressDCtx(w->dctx, p->dst, (size_t)p->raw, p->src, (size_t)p->len);
            if (ZSTD_isError(r) || r != p->raw) {
                size_t s = stk__dataset_shard_of(ld->ds, p->rec);
                return stk__err(err, STK_ECODEC,
                                "%s: record %llu field '%s': the zstd frame does not decode "
                                "to %llu bytes (%s)",
                                ld->ds->shards[s].path, (unsigned long long)p->rec,
                                ld->ds->fields[p->field].name, (unsigned long long)p->raw,
                                ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
            }
        }
    }
    return 0;
}

/* ---- reads planned per sample ---- */

/* Where each piece of a planned loader's batch lies and where it goes;
 * nothing is read. */
static void plan_pieces(stk_loader *ld, stk_batch *s, const uint64_t *recs, const uint64_t *ts) {
    const stk_dataset *ds = ld->ds;
    s->nplan = 0;
    for (size_t fi = 0; fi < ld->nf; fi++) {
        const lfield *lf = &ld->f[fi];
        uint64_t rows_done = 0;
        for (uint32_t j = 0; j < s->n; j++) {
            size_t si = stk__dataset_shard_of(ds, recs[j]);
            const stk__shard *sh = &ds->shards[si];
            const uint64_t *e = stk__entry(ds, sh, recs[j] - sh->first);
            uint64_t off, len, raw;
            uint8_t *dst = stk__ld_place(ld, lf, s, j, sh, e, ts[j], &rows_done, &off, &len, &raw);
            s->plan[s->nplan++] =
                (stk__plan){(uint32_t)si, (uint32_t)lf->dsf, recs[j], off, len, dst};
        }
        if (lf->kind == F_RAGGED) {
            ((int64_t *)(s->mem + lf->offs_off))[s->n] = (int64_t)rows_done;
            s->ragged_rows[fi] = rows_done;
        }
    }
}

/* A batch's reads and posts as they are planned: nr reads (w->reqs) and np
 * posts (w->posts) so far, staging used up to stage_pos; O_DIRECT, and
 * whether the backend is the mapping. */
typedef struct reads {
    size_t nr, np;
    uint64_t stage_pos;
    bool direct, mm;
} reads;

/* Straight into place; merged with the previous read when contiguous both
 * in the file and in the slot. */
static STK__ALWAYS_INLINE void read_in_place(worker *w, reads *r, size_t si, uint64_t off,
                                             uint64_t len, uint8_t *dst, uint64_t rec) {
    stk__ioreq *q = r->nr ? &w->reqs[r->nr - 1] : NULL;
    if (q && q->shard == si && q->off + q->len == off && q->dst + q->len == dst) {
        q->len += len;
        q->need += len;
    } else {
        w->reqs[r->nr++] = (stk__ioreq){(uint32_t)si, off, len, len, dst, rec, -1};
    }
}

/* Through staging: O_DIRECT (aligned) or compressed bytes.  Returns where
 * the bytes will be once read, or NULL when the staging area is full. */
static STK__ALWAYS_INLINE const uint8_t *read_to_stage(worker *w, reads *r, size_t si,
                                                       uint64_t off, uint64_t len, uint64_t rec) {
    bool direct = r->direct;
    uint64_t lo = direct ? off & ~(uint64_t)(DIRECT_ALIGN - 1) : off;
    uint64_t hi = direct ? stk__align_up(off + len, DIRECT_ALIGN) : off + len;
    stk__ioreq *q = r->nr ? &w->reqs[r->nr - 1] : NULL;
    const uint8_t *src;
    if (direct && q && q->shard == si && lo >= q->off && lo <= q->off + q->len &&
        q->dst >= w->stage && q->dst + q->len == w->stage + r->stage_pos) {
        /* Overlaps or abuts the previous aligned read: extend it. */
        uint64_t end = STK__MAX(q->off + q->len, hi);
        uint64_t grow_by = end - (q->off + q->len);
        if (r->stage_pos + grow_by > w->stage_cap) return NULL;
        src = q->dst + (off - q->off);
        q->len += grow_by;
        r->stage_pos += grow_by;
        q->need = STK__MIN(q->len, STK__MAX(q->need, off + len - q->off));
    } else {
        if (r->stage_pos + (hi - lo) > w->stage_cap) return NULL;
        w->reqs[r->nr++] = (stk__ioreq){(uint32_t)si, lo, hi - lo, off + len - lo,
                                        w->stage + r->stage_pos, rec, -1};
        src = w->stage + r->stage_pos + (off - lo);
        r->stage_pos = stk__align_up(r->stage_pos + (hi - lo), direct ? DIRECT_ALIGN : 64);
    }
    return src;
}

/* Plans field lf of sample j (record rec, first row t): one read, into its
 * place or into staging, and the post that finishes it there (a copy, a
 * decode, a conversion). */
static STK__ALWAYS_INLINE int plan_read(stk_loader *ld, worker *w, reads *r, const lfield *lf,
                                        stk_batch *s, uint32_t j, uint64_t rec, uint64_t t,
                                        uint64_t *rows_done, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    size_t si = stk__dataset_shard_of(ds, rec);
    const stk__shard *sh = &ds->shards[si];
    const uint64_t *e = stk__entry(ds, sh, rec - sh->first);
    uint64_t off, len, raw;
    uint8_t *dst = stk__ld_place(ld, lf, s, j, sh, e, t, rows_done, &off, &len, &raw);
    int cv = stk__shard_conv(lf->fi, sh);
    bool narrow = cv && len > raw;
    if (cv && !narrow) {
        /* The stored bytes land at the end of the sample's place and
         * are widened forward over themselves (core/convert.c). */
        uint8_t *tail = dst + (raw - len);
        w->posts[r->np++] = (post){POST_CONV, tail, dst, len, raw, rec, lf->dsf, NULL, 0, cv};
        dst = tail;
    }
    if (narrow) {
        /* More stored bytes than the place holds (f64 to f32): they
         * are converted from the mapping or from staging. */
        post *p = &w->posts[r->np++];
        *p = (post){POST_CONV, NULL, dst, len, raw, rec, lf->dsf, NULL, 0, cv};
        if (r->mm) {
            p->src = sh->map + off;
            return 0;
        }
        dst = NULL; /* read into staging below */
    } else if (lf->dec) {
        post *p = &w->posts[r->np++];
        *p = (post){POST_MEDIA, NULL, dst, len, raw, rec, lf->dsf, NULL, 0, (int)(lf - ld->f)};
        if (r->mm) {
            p->src = sh->map + off;
            return 0;
        }
        dst = NULL; /* read into staging below */
    } else if (lf->f->codec == STK_CODEC_ZSTD || lf->fi->chunks) {
        post *p = &w->posts[r->np++];
        *p = (post){lf->fi->chunks ? POST_CHUNK : POST_ZSTD, NULL, dst, len, raw, rec,
                    lf->dsf, NULL, 0, 0};
        if (lf->kind == F_TIME) p->skip = t * lf->fi->row_bytes;
        if (r->mm) {
            p->src = sh->map + off;
            return 0;
        }
        dst = NULL; /* read into staging below */
    }
    if (dst && (r->mm || !r->direct)) {
        read_in_place(w, r, si, off, len, dst, rec);
        return 0;
    }
    const uint8_t *src = read_to_stage(w, r, si, off, len, rec);
    if (!src) return stk__err(err, -ENOMEM, "staging area too small");
    if (lf->f->codec == STK_CODEC_ZSTD || lf->fi->chunks || narrow || lf->dec)
        w->posts[r->np - 1].src = src;
    else
        w->posts[r->np++] = (post){POST_COPY, src, dst, len, len, rec, lf->dsf, NULL, 0, 0};
    return 0;
}

/* Executes the planned reads, then the posts. */
static int run_reads(stk_loader *ld, worker *w, const reads *r, stk_error *err) {
    uint64_t t_io = stk__ld_span_open(ld, STK__EV_READ);
    int rc = stk__io_exec(w->io, w->reqs, r->nr, err);
    uint64_t t_asm = stk__now_ns();
    ld->st_io_ns += t_asm - t_io;
    ld->st_io_n += r->nr;
    uint64_t bytes = 0;
    for (size_t i = 0; i < r->nr; i++) bytes += w->reqs[i].len;
    ld->st_io_bytes += bytes;
    stk__ld_span_add(ld, w, STK__EV_READ, t_io, t_asm, r->nr, bytes);
    t_asm = stk__ld_span_open(ld, STK__EV_ASSEMBLE);
    if (rc == 0) rc = stk__ld_do_posts(ld, w, r->np, err);
    uint64_t t_end = stk__now_ns();
    ld->st_asm_ns += t_end - t_asm;
    stk__ld_span_add(ld, w, STK__EV_ASSEMBLE, t_asm, t_end, STK__EV_NONE, STK__EV_NONE);
    return rc;
}

/* Media fields read through staging: the worker's area holds what the
 * other fields need (stage_fixed) and this batch's encoded records, grown
 * (before anything is planned into it) when they are larger than it. */
static int media_stage(stk_loader *ld, worker *w, const stk_batch *s, const uint64_t *recs,
                       stk_error *err) {
    const stk_dataset *ds = ld->ds;
    uint64_t need = ld->stage_fixed;
    for (size_t fi = 0; fi < ld->nf; fi++) {
        if (!ld->f[fi].dec) continue;
        for (uint32_t j = 0; j < s->n; j++) {
            size_t si = stk__dataset_shard_of(ds, recs[j]);
            const stk__shard *sh = &ds->shards[si];
            const uint64_t *e = stk__entry(ds, sh, recs[j] - sh->first);
            need += stk__align_up(stk__e_len(ds, sh, e, ld->f[fi].dsf) + 2 * DIRECT_ALIGN, 64);
        }
    }
    need = stk__align_up(need, DIRECT_ALIGN);
    if (need <= w->stage_cap) return 0;
    uint8_t *p = stk__aligned_alloc(DIRECT_ALIGN, (size_t)need);
    if (!p)
        return stk__err(err, -ENOMEM, "out of memory for %llu bytes of encoded media a batch",
                        (unsigned long long)need);
    stk__free(w->stage);
    w->stage = p;
    w->stage_cap = need;
    return 0;
}

/* Plans and executes the reads of samples that come straight from files. */
static int fill_direct(stk_loader *ld, worker *w, stk_batch *s, const uint64_t *recs,
                       const uint64_t *ts, stk_error *err) {
    uint64_t t_plan = stk__ld_span_open(ld, STK__EV_PLAN);
    if (stk__ld_grow((void **)&w->reqs, &w->reqs_cap, (size_t)s->n * ld->nf, sizeof *w->reqs) ||
        stk__ld_grow((void **)&w->posts, &w->posts_cap, (size_t)s->n * ld->nf, sizeof *w->posts))
        return stk__err(err, -ENOMEM, "out of memory");
    if (ld->plan_only) {
        plan_pieces(ld, s, recs, ts);
        ld->st_plan_ns += stk__now_ns() - t_plan;
        stk__ld_span_add(ld, w, STK__EV_PLAN, t_plan, stk__now_ns(), STK__EV_NONE, s->n);
        return 0;
    }
    reads r = {0, 0, 0, ld->files.direct, ld->backend == STK_BACKEND_MMAP};
    if (!r.mm && ld->decs) {
        int rc = media_stage(ld, w, s, recs, err);
        if (rc) return rc;
    }
    for (size_t fi = 0; fi < ld->nf; fi++) {
        const lfield *lf = &ld->f[fi];
        int64_t *offs = lf->kind == F_RAGGED ? (int64_t *)(s->mem + lf->offs_off) : NULL;
        uint64_t rows_done = 0; /* ragged: rows placed so far */
        for (uint32_t j = 0; j < s->n; j++) {
            int rc = plan_read(ld, w, &r, lf, s, j, recs[j], ts[j], &rows_done, err);
            if (rc) return rc;
        }
        if (offs) {
            if (!s->lanes) offs[s->n] = (int64_t)rows_done;
            s->ragged_rows[fi] = rows_done;
        }
    }
    uint64_t t_io = stk__now_ns();
    ld->st_plan_ns += t_io - t_plan;
    stk__ld_span_add(ld, w, STK__EV_PLAN, t_plan, t_io, STK__EV_NONE, s->n);
    return run_reads(ld, w, &r, err);
}

/* ---- a batch ---- */

/* While the warm-up runs, waits until the bytes of a batch's samples are
 * in (with the checksum blocks around them, which the checks read) rather
 * than faulting them in one 2 MiB read at a time (see io/warm.c), and
 * checks arrived blocks meanwhile. */
static void warm_wait(stk_loader *ld, uint32_t n, const uint64_t *recs, const uint64_t *ts) {
    uint64_t seen = 0;
    for (uint32_t j = 0; j < n && !stk__warm_done(ld->warm); j++) {
        size_t si;
        uint64_t lo, hi;
        stk__ld_sample_span(ld, recs[j], ts[j], ld->space.windows ? ts[j] + ld->space.L : 0, &si,
                            &lo, &hi);
        const stk__shard *sh = &ld->ds->shards[si];
        if (ld->opt.verify && sh->block_size) {
            uint64_t bs = sh->block_size;
            lo = sh->data_off + (lo - sh->data_off) / bs * bs;
            hi = STK__MIN(sh->data_off + stk__align_up(hi - sh->data_off, bs), sh->data_end);
        }
        while (!stk__warm_arrived(ld->warm, (uint32_t)si, lo, hi)) {
            if (ld->warm_ranges && stk__ld_check_arrived_block(ld)) continue;
            stk__warm_wait_piece(ld->warm, &seen);
        }
    }
}

/* The byte ranges of records recs[0..n) (whole records: a window's rows
 * are a part of its record, and checks read whole records or blocks), in
 * r[0..n). */
static void record_ranges(const stk_dataset *ds, uint32_t n, const uint64_t *recs,
                          stk__range *r) {
    for (uint32_t j = 0; j < n; j++) {
        size_t si = stk__dataset_shard_of(ds, recs[j]);
        const stk__shard *sh = &ds->shards[si];
        stk__record_span(ds, sh, stk__entry(ds, sh, recs[j] - sh->first), &r[j].lo, &r[j].hi);
        r[j].shard = (uint32_t)si;
    }
}

/* The records' ranges of batch x of a dealing (`order`, `deal`) in r (its
 * count returned; 0 past the dealing's end); ids: room for 2 * batch_size. */
static uint32_t batch_ranges(const stk_loader *ld, const stk__order *order,
                             const stk__deal *deal, uint64_t x, uint64_t *ids, stk__range *r) {
    uint32_t B = ld->opt.batch_size;
    uint64_t first = x * B;
    if (first >= deal->per_rank) return 0;
    uint32_t n = (uint32_t)STK__MIN((uint64_t)B, deal->per_rank - first);
    stk__order_fill(order, deal, first, n, ids, NULL, NULL);
    for (uint32_t j = 0; j < n; j++) {
        uint64_t t;
        stk__space_locate(&ld->space, ids[j], &ids[B + j], &t);
    }
    record_ranges(ld->ds, n, ids + B, r);
    return n;
}

/* Appends to *r (n of cap) the spans of piece g's blocks. */
static int piece_ranges(const stk_loader *ld, const stk__order *order, uint64_t g, group *tmp,
                        stk__range **r, size_t *n, size_t *cap) {
    tmp->nspans = 0;
    for (uint64_t m = 0; m < stk__order_group_blocks(order, g); m++)
        if (stk__ld_block_spans(ld, stk__order_group_block(order, g, m), tmp)) return -ENOMEM;
    if (stk__ld_grow((void **)r, cap, *n + tmp->nspans, sizeof **r)) return -ENOMEM;
    for (size_t i = 0; i < tmp->nspans; i++)
        (*r)[(*n)++] = (stk__range){tmp->spans[i].shard, tmp->spans[i].lo, tmp->spans[i].hi};
    return 0;
}

/* Fetches (and lets go of) ranges r[0..n). */
static int fetch_ranges(const stk_loader *ld, stk__range *r, size_t n, uint64_t *bytes,
                        stk_error *err) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) *bytes += r[i].hi - r[i].lo;
    int rc = ld->ds->ensure(ld->ds->ensure_ctx, r, n, err);
    if (rc == 0) stk__dataset_release(ld->ds, r, n);
    return rc;
}

int stk__loader_fetch_epoch(stk_loader *ld, uint64_t *bytes, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    *bytes = 0;
    if (!ds->ensure) return 0;
    if (ds->cache_limited)
        return stk__err(err, -EINVAL,
                        "%s: fetching the rest of the epoch ahead needs a cache that can hold "
                        "it; this one has a budget smaller than the dataset (the loader's "
                        "read-ahead fetches within it)",
                        stk_dataset_path(ds));
    pthread_mutex_lock(&ld->mu);
    stk__order order = ld->order;
    stk__deal deal = ld->deal;
    uint64_t from = ld->next_take, nb = ld->nbatches;
    pthread_mutex_unlock(&ld->mu);
    uint32_t B = ld->opt.batch_size;
    uint64_t *ids = stk__malloc(2 * (size_t)B * sizeof *ids);
    uint64_t *gs = stk__malloc((size_t)B * sizeof *gs);
    group *tmp = stk__calloc(1, sizeof *tmp);
    stk__range *r = NULL;
    size_t n = 0, cap = 0;
    int rc = ids && gs && tmp ? 0 : -ENOMEM;
    uint64_t last_piece = UINT64_MAX;
    /* In rounds of about 4096 ranges, every one of a round in flight. */
    for (uint64_t b = from; rc == 0 && b < nb; b++) {
        uint64_t first = b * B;
        if (first >= deal.per_rank) break;
        uint32_t k = (uint32_t)STK__MIN((uint64_t)B, deal.per_rank - first);
        if (ld->use_groups) {
            /* Block order reads its pieces' blocks whole. */
            stk__order_fill(&order, &deal, first, k, ids, gs, NULL);
            for (uint32_t j = 0; rc == 0 && j < k; j++)
                if (gs[j] != last_piece)
                    rc = piece_ranges(ld, &order, last_piece = gs[j], tmp, &r, &n, &cap);
        } else {
            if (stk__ld_grow((void **)&r, &cap, n + k, sizeof *r)) rc = -ENOMEM;
            else n += batch_ranges(ld, &order, &deal, b, ids, r + n);
        }
        if (rc == 0 && (n >= 4096 || b + 1 == nb)) {
            rc = fetch_ranges(ld, r, n, bytes, err);
            n = 0;
        }
    }
    if (rc == 0) rc = fetch_ranges(ld, r, n, bytes, err);
    if (rc == -ENOMEM) stk__err(err, rc, "out of memory");
    stk__free(ids);
    stk__free(gs);
    if (tmp) stk__free(tmp->spans);
    stk__free(tmp);
    stk__free(r);
    return rc;
}

void stk__ld_plan_reads(stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    /* (Not before the ring exists: the open sets the epoch twice.) */
    if (ld->hook || !ds->ensure_plan || ld->plan_only || !ld->slots) return;
    ds->ensure_plan(ds->ensure_ctx, NULL, 0, 0);
    uint32_t B = ld->opt.batch_size;
    uint64_t *ids = stk__malloc(2 * (size_t)B * sizeof *ids);
    stk__range *r = stk__malloc((size_t)B * sizeof *r);
    for (uint64_t b = 0; ids && r && b < ld->nbatches; b++) {
        uint32_t n = batch_ranges(ld, &ld->order, &ld->deal, b, ids, r);
        ds->ensure_plan(ds->ensure_ctx, r, n, +1);
    }
    stk__free(ids);
    stk__free(r);
}

bool stk__ld_reads_whole(const stk_loader *ld) {
    return ld->opt.world_size <= 1 && ld->opt.split_count <= 1 && !ld->ds->cache_limited &&
           !ld->space.run_first;
}

bool stk__ld_ahead_claim(stk_loader *ld, uint64_t at, uint64_t end, uint64_t gen,
                         uint64_t *from, uint64_t *to) {
    if (!ld->ahead_n) return false;
    pthread_mutex_lock(&ld->mu);
    bool ok = gen == ld->gen;
    if (end == UINT64_MAX) end = ld->nbatches; /* (set with the epoch, under mu) */
    if (ok) {
        *from = STK__MAX(ld->ahead_next, at + 1);
        *to = STK__MIN(at + 1 + ld->ahead_n, end);
        ok = *to > *from;
        if (ok) ld->ahead_next = *to;
    }
    pthread_mutex_unlock(&ld->mu);
    return ok;
}

void stk__ld_announce_batches(stk_loader *ld, worker *w, uint64_t b, uint64_t gen) {
    const stk_dataset *ds = ld->ds;
    uint64_t from, to;
    if (!ds->ensure_ahead || !stk__ld_ahead_claim(ld, b, UINT64_MAX, gen, &from, &to)) return;
    uint32_t B = ld->opt.batch_size;
    uint64_t *ids = stk__malloc(2 * (size_t)B * sizeof *ids);
    stk__range *r = stk__malloc((size_t)B * sizeof *r);
    bool whole = stk__ld_reads_whole(ld);
    for (uint64_t x = from; ids && r && x < to; x++) {
        uint32_t n = batch_ranges(ld, &w->order, &w->deal, x, ids, r);
        if (!n) break;
        ds->ensure_ahead(ds->ensure_ctx, r, n, whole);
    }
    stk__free(ids);
    stk__free(r);
}

/* A lazy dataset (a remote one): the records of the batch are fetched
 * before anything reads them, all at once; they are let go of once read
 * (*held, to pass to stk__dataset_release). */
static int ensure_records(stk_loader *ld, uint32_t n, const uint64_t *recs, stk__range **held,
                          stk_error *err) {
    const stk_dataset *ds = ld->ds;
    *held = NULL;
    stk__range *r = stk__malloc((n ? n : 1) * sizeof *r);
    if (!r) return stk__err(err, -ENOMEM, "out of memory");
    record_ranges(ds, n, recs, r);
    if (ds->ensure_plan) ds->ensure_plan(ds->ensure_ctx, r, n, -1);
    int rc = ld->use_groups ? 0 : ds->ensure(ds->ensure_ctx, r, n, err);
    if (rc || ld->use_groups) stk__free(r);
    else *held = r;
    return rc;
}

static int fill(stk_loader *ld, worker *w, stk_batch *s, uint64_t gen, stk_error *err) {
    uint64_t t0 = stk__ld_span_open(ld, STK__EV_PLAN);
    uint32_t n = s->n;
    uint64_t *recs = w->ids, *ts = recs + n, *gs = ts + n;
    stk__order_fill(&w->order, &w->deal, s->first, n, s->samples, ld->use_groups ? gs : NULL,
                    ld->use_groups ? w->slots : NULL);
    for (uint32_t j = 0; j < n; j++) stk__space_locate(&ld->space, s->samples[j], &recs[j], &ts[j]);
    if (ld->warm && !stk__warm_done(ld->warm)) warm_wait(ld, n, recs, ts);
    /* Block order fetches each group's spans as the group loads (it only
     * counts the batch's reads as done here). */
    stk__range *held = NULL;
    if (ld->ds->ensure && !ld->use_groups) stk__ld_announce_batches(ld, w, s->b, gen);
    if (ld->ds->ensure && (!ld->use_groups || ld->ds->ensure_plan)) {
        int re = ensure_records(ld, n, recs, &held, err);
        if (re) return re;
    }
    ld->st_plan_n += n;
    uint64_t t1 = stk__now_ns();
    ld->st_plan_ns += t1 - t0;
    stk__ld_span_add(ld, w, STK__EV_PLAN, t0, t1, STK__EV_NONE, n);
    int rc = 0;
    /* Check before reading: the check brings the blocks into the page
     * cache, and under on_error = skip a damaged sample is replaced before
     * anything is read for it. */
    if (ld->opt.verify && !ld->use_groups && !ld->rec_check) {
        t1 = stk__ld_span_open(ld, STK__EV_VERIFY);
        rc = stk__ld_check_before(ld, w, s, recs, ts, err);
        stk__ld_span_add(ld, w, STK__EV_VERIFY, t1, stk__now_ns(), STK__EV_NONE, STK__EV_NONE);
    }
    if (rc == 0)
        rc = ld->use_groups ? stk__ld_fill_groups(ld, w, s, recs, ts, gs, w->slots, gen, err)
             : ld->gather   ? stk__ld_gather_records(ld, w, s, recs, ld->rec_check, err)
                            : fill_direct(ld, w, s, recs, ts, err);
    if (rc == 0 && ld->rec_check && !ld->gather) {
        uint64_t tv = stk__ld_span_open(ld, STK__EV_VERIFY);
        rc = stk__ld_check_records(ld, s, recs, err);
        stk__ld_span_add(ld, w, STK__EV_VERIFY, tv, stk__now_ns(), STK__EV_NONE, n);
    }
    /* Block order reads each group's blocks whole and checks them as the
     * group lands; through the mapping nothing was read, and the blocks a
     * batch uses are checked here, once each per epoch. */
    if (rc == 0 && ld->opt.verify && ld->use_groups && ld->backend == STK_BACKEND_MMAP) {
        uint64_t tv = stk__ld_span_open(ld, STK__EV_VERIFY);
        rc = stk__ld_verify_samples(ld, w, n, recs, ts, err);
        stk__ld_span_add(ld, w, STK__EV_VERIFY, tv, stk__now_ns(), STK__EV_NONE, STK__EV_NONE);
    }
    if (held) {
        stk__dataset_release(ld->ds, held, n);
        stk__free(held);
    }
    if (rc == 0) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < ld->nf; i++)
            bytes += ld->f[i].kind == F_RAGGED ? s->ragged_rows[i] * ld->f[i].fi->row_bytes
                                               : n * ld->f[i].sample_bytes;
        ld->st_asm_n++;
        ld->st_asm_bytes += bytes;
    }
    return rc;
}

/* fill() through the mapping, where a shard another program cut short
 * faults with SIGBUS: the guard makes that this batch's error, naming the
 * shard (io.h).  The stretch holds no lock and allocates nothing; block
 * order's groups take references and locks, and stay unguarded. */
static int fill_guarded(stk_loader *ld, worker *w, stk_batch *s, uint64_t gen,
                        stk_error *err) {
    stk__bus_guard bus;
    if (sigsetjmp(bus.jb, 0)) return stk__bus_error(ld->ds, bus.addr, err);
    stk__bus_guard_cur = &bus;
    int rc = fill(ld, w, s, gen, err);
    stk__bus_guard_cur = NULL;
    return rc;
}

/* ---- drawing (pipeline.h) ---- */

/* Worker wi, with the order and dealing of `epoch` (kept from its last
 * draw of the same epoch: a batch draws from each source in turn). */
static worker *draw_worker(stk_loader *ld, int wi, uint64_t epoch) {
    worker *w = &ld->w[wi];
    if (!w->drew || w->drew_epoch != epoch) {
        stk__ld_epoch_order(ld, ld->seed, epoch, 0, ld->streams, &w->order, &w->deal);
        w->drew = true;
        w->drew_epoch = epoch;
    }
    return w;
}

static int draw_past(const stk_loader *ld, const worker *w, uint64_t epoch, uint64_t first,
                     uint32_t n, stk_error *err) {
    if (first + n <= w->deal.per_rank) return 0;
    return stk__err(err, -EINVAL, "%s: samples %llu to %llu of epoch %llu are past the rank's %llu",
                    stk_dataset_path(ld->ds), (unsigned long long)first,
                    (unsigned long long)(first + n), (unsigned long long)epoch,
                    (unsigned long long)w->deal.per_rank);
}

int stk__loader_draw(stk_loader *ld, int wi, uint64_t epoch, uint64_t first, uint32_t n,
                     uint8_t *mem, const uint32_t *lanes, uint64_t *ids, stk_error *err) {
    worker *w = draw_worker(ld, wi, epoch);
    int rc = draw_past(ld, w, epoch, first, n, err);
    if (rc) return rc;
    stk_batch v = {0};
    v.ld = ld;
    v.device = -1;
    v.first = first;
    v.n = n;
    v.mem = mem;
    v.samples = ids;
    v.ragged_rows = w->draw_rows;
    v.lanes = lanes;
    return fill(ld, w, &v, 0, err);
}

/* ---- joint draws (pipeline.h) ---- */

/* (On cache lines of its own: each worker has one, written every batch.) */
stk__joint *stk__joint_new(uint32_t batch_size, size_t k, size_t nf) {
    stk__joint *J = stk__calloc_lines(1, sizeof *J);
    if (!J) return NULL;
    J->cap = batch_size;
    J->k = k;
    J->lane = stk__calloc_lines(batch_size, sizeof *J->lane);
    J->run = stk__calloc_lines(k ? k : 1, sizeof *J->run);
    J->recs = stk__calloc_lines(batch_size, sizeof *J->recs);
    J->shs = stk__calloc_lines(batch_size, sizeof *J->shs);
    J->ent = stk__calloc_lines(batch_size, sizeof *J->ent);
    J->tmp = stk__calloc_lines(2 * (size_t)batch_size, sizeof *J->tmp);
    J->rows = stk__calloc_lines(nf ? nf : 1, sizeof *J->rows);
    if (!J->lane || !J->run || !J->recs || !J->shs || !J->ent || !J->tmp || !J->rows) {
        stk__joint_free(J);
        return NULL;
    }
    return J;
}

void stk__joint_free(stk__joint *J) {
    if (!J) return;
    stk__free(J->lane);
    stk__free(J->run);
    stk__free(J->recs);
    stk__free(J->shs);
    stk__free(J->ent);
    stk__free(J->tmp);
    stk__free(J->rows);
    stk__free(J);
}

bool stk__loader_joinable(const stk_loader *ld) {
    /* (gather: whole records through the mapping, no windows.  A drawn
     * loader's dataset is local, and it substitutes no damaged sample
     * (stk__loader_drawable): a joint draw fetches nothing and replaces
     * nothing; said again here, since it skips both.) */
    if (!ld->gather || ld->ds->ensure || ld->opt.on_error == STK_ON_ERROR_SKIP ||
        (ld->opt.verify && !ld->rec_check) || ld->nvtx || stk__tracing(&ld->trace))
        return false;
    for (size_t i = 0; i < ld->nf; i++)
        if (ld->f[i].kind == F_RAGGED) return false;
    return true;
}

/* Locates piece p's records into J's places at .. at + p->len - 1 (what
 * fill does before it gathers, for one piece), and its sample ids into
 * their lanes. */
static int joint_locate(stk__joint *J, stk_loader *ld, int wi, const stk__draw_piece *p,
                        uint32_t at, uint64_t *ids, stk_error *err) {
    worker *w = draw_worker(ld, wi, p->epoch);
    int rc = draw_past(ld, w, p->epoch, p->first, p->len, err);
    if (rc) return rc;
    uint32_t n = p->len;
    /* (Whole records, no windows: a sample is its record, at row 0.) */
    uint64_t *recs = J->tmp, *ts = recs + J->cap;
    stk__order_fill(&w->order, &w->deal, p->first, n, recs, NULL, NULL);
    if (ld->warm && !stk__warm_done(ld->warm)) {
        memset(ts, 0, n * sizeof *ts);
        warm_wait(ld, n, recs, ts);
    }
    const stk_dataset *ds = ld->ds;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t lane = p->lanes[j];
        ids[lane] = recs[j];
        J->lane[at + j] = lane;
        J->recs[at + j] = recs[j];
        J->ent[at + j] = stk__ld_record_entry(ds, recs[j], &J->shs[at + j]);
    }
    return 0;
}

int stk__loader_draw_joint(stk__joint *J, stk_loader *mix, stk_loader *const *lds, int wi,
                           const stk__draw_piece *pc, size_t np, uint8_t *mem, uint32_t n,
                           uint64_t *ids, stk_error *err) {
    if (n > J->cap) return stk__err(err, -EINVAL, "a joint draw of %u samples: room for %u", n, J->cap);
    int fe;
    if (stk__fault_hit(STK__FAULT_JOINT, &fe))
        return stk__err(err, fe ? fe : -EIO, "a mixture's batch: a joint draw failed (on purpose)");
    uint64_t t0 = stk__now_ns();
    J->nrun = 0;
    uint32_t placed = 0;
    for (size_t i = 0; i < np; i++) {
        if (pc[i].len > n - placed)
            return stk__err(err, -EINVAL, "a joint draw of %u samples was given more", n);
        if (pc[i].src >= J->k)
            return stk__err(err, -EINVAL, "a joint draw of %zu sources was given source %u",
                            J->k, pc[i].src);
        /* A source's pieces follow one another (the mixture groups a
         * batch's lanes by source): one run of places each. */
        stk_loader *ld = lds[pc[i].src];
        if (i == 0 || pc[i].src != pc[i - 1].src) {
            if (J->nrun == J->k)
                return stk__err(err, -EINVAL, "a joint draw's pieces are not grouped by source");
            J->run[J->nrun++].ld = ld;
        }
        int rc = joint_locate(J, ld, wi, &pc[i], placed, ids, err);
        if (rc) return rc;
        placed += pc[i].len;
        J->run[J->nrun - 1].end = placed;
    }
    if (placed != n)
        return stk__err(err, -EINVAL, "a joint draw of %u samples was given %u", n, placed);
    uint64_t t1 = stk__now_ns();
    stk_batch v = {0};
    v.ld = lds[0];
    v.device = -1;
    v.n = n;
    v.mem = mem;
    v.samples = ids;
    v.ragged_rows = J->rows;
    v.lanes = J->lane;
    int rc = stk__ld_gather_joint(J, &v, n, err);
    if (rc) return rc;
    /* The batch's statistics, once, to the mixture's own loader (whose
     * statistics are its own and its sources' summed, and which makes no
     * draws of its own): its samples planned, read and assembled (whole
     * records of fixed, plain fields: the same bytes each), its hashes,
     * one batch assembled.  Shared out among the sources, as they once
     * were, they cost 11 atomic additions a source and 10 divisions of
     * 128 bits a batch of 3 sources (about 330 cycles more a batch than
     * one source), for shares that nothing reports apart. */
    uint64_t io_n = 0, bytes = 0;
    for (size_t r = 0; r < J->nrun; r++) {
        const stk_loader *ld = J->run[r].ld;
        uint64_t c = J->run[r].end - (r ? J->run[r - 1].end : 0);
        io_n += c * ld->nf;
        for (size_t f = 0; f < ld->nf; f++) bytes += c * ld->f[f].sample_bytes;
    }
    mix->st_plan_n += n;
    mix->st_plan_ns += t1 - t0;
    mix->st_io_n += io_n;
    mix->st_io_bytes += bytes;
    mix->st_io_ns += J->read_ns - J->ver_ns;
    /* (A run of records whose blocks were all checked already hashes none
     * and still takes its time.) */
    mix->st_ver_ns += J->ver_ns;
    if (J->nhashed) {
        mix->st_ver_bytes += J->hashed;
        mix->st_ver_n += J->nhashed;
    }
    mix->st_asm_n++;
    mix->st_asm_bytes += bytes;
    return 0;
}

void stk__loader_draw_rows(stk_loader *ld, int wi, uint64_t epoch, uint64_t first, uint32_t n,
                           size_t i, const uint32_t *lanes, uint64_t *rows) {
    worker *w = draw_worker(ld, wi, epoch);
    const stk_dataset *ds = ld->ds;
    size_t dsf = ld->f[i].dsf;
    uint64_t *ids = w->ids;
    stk__order_fill(&w->order, &w->deal, first, n, ids, NULL, NULL);
    for (uint32_t j = 0; j < n; j++) {
        uint64_t rec, t;
        stk__space_locate(&ld->space, ids[j], &rec, &t);
        const stk__shard *sh = &ds->shards[stk__dataset_shard_of(ds, rec)];
        rows[lanes[j]] = stk__e_rows(ds, sh, stk__entry(ds, sh, rec - sh->first), dsf);
    }
}

void stk__loader_draw_epoch(stk_loader *ld) { stk__ld_forget_checks(ld); }

void stk__loader_worker_epoch(const stk_loader *ld, int wi, uint64_t *epoch, uint64_t *start) {
    *epoch = ld->w[wi].epoch;
    *start = ld->w[wi].deal.start;
}

static uint32_t batch_len(const stk_loader *ld, uint64_t b) {
    uint64_t first = b * ld->opt.batch_size;
    return (uint32_t)STK__MIN((uint64_t)ld->opt.batch_size, ld->deal.per_rank - first);
}

static stk_batch *claim(stk_loader *ld) {
    if (ld->failed || ld->next_fill >= ld->nbatches || ld->next_fill >= ld->next_take + ld->R)
        return NULL;
    for (uint32_t i = 0; i < ld->R; i++) {
        stk_batch *s = &ld->slots[i];
        if (s->state != S_FREE) continue;
        s->state = S_FILLING;
        s->b = ld->next_fill++;
        s->first = s->b * ld->opt.batch_size;
        s->gen = ld->gen;
        s->n = batch_len(ld, s->b);
        s->err = 0;
        return s;
    }
    return NULL;
}

void *stk__ld_worker_main(void *arg) {
    worker *w = arg;
    stk_loader *ld = w->ld;
    stk__thread_name("stk-worker");
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop) {
        stk_batch *s = claim(ld);
        if (!s) {
            if (!ld->has_reader) stk__ld_group_prefetch(ld, w, 1, false);
            if (ld->stop) break; /* closed while the group was read */
            if (!(s = claim(ld))) {
                pthread_cond_wait(&ld->cv, &ld->mu);
                continue;
            }
        }
        uint64_t gen = s->gen;
        w->order = ld->order;
        w->deal = ld->deal;
        w->epoch = ld->epoch;
        w->seed = ld->seed;
        pthread_mutex_unlock(&ld->mu);
        stk_error err = {0};
        int depth = ld->nvtx ? stk__nvtx_depth() : 0;
        uint64_t t_batch = stk__ld_span_open(ld, STK__EV_BATCH);
        int rc;
        uint64_t refills = 0;
        do {
            if (refills) { /* (the replacements of the attempt that met it) */
                pthread_mutex_lock(&ld->mu);
                ld->st_skipped -= w->skips;
                pthread_mutex_unlock(&ld->mu);
            }
            w->skips = 0;
            rc = ld->hook ? ld->hook(ld->hook_ctx, s, (int)(w - ld->w), &err)
                 : ld->backend == STK_BACKEND_MMAP && !ld->use_groups && !ld->plan_only
                     ? fill_guarded(ld, w, s, gen, &err)
                     : fill(ld, w, s, gen, &err);
        } while (rc == REFILL_MEDIA && ++refills <= ld->opt.max_skips * (uint64_t)s->n);
        if (rc == REFILL_MEDIA) rc = err.code;
        uint64_t t_done = stk__now_ns();
        stk__ld_span_add(ld, w, STK__EV_BATCH, t_batch, t_done, s->b, s->n);
        if (ld->nvtx) stk__nvtx_pop_to(depth); /* the batch, and any a failure left */
        pthread_mutex_lock(&ld->mu);
        /* (A moving mean of the last 8 or so, for the consumer's spin.) */
        ld->fill_ns = ld->fill_ns - ld->fill_ns / 8 + (t_done - t_batch) / 8;
        /* (A group wait gives up with -ECANCELED only for these two; an
         * -ECANCELED from a read is an error like any other.) */
        if (s->gen != ld->gen || ld->stop) {
            s->state = S_FREE; /* an old epoch's batch, or closing: discard */
        } else {
            s->state = S_READY;
            atomic_fetch_add_explicit(&ld->readied, 1, memory_order_release);
            s->err = rc;
            if (rc) s->e = err;
            /* The consumer waits for its next batch only: a later one
             * readied first would wake it for nothing (on a virtual
             * machine a wake is a system call and an interrupt to another
             * CPU). */
            if (s->b == ld->next_take) pthread_cond_broadcast(&ld->cv_ready);
        }
        /* (Other workers: a discarded buffer is free again, and a group
         * may be evictable now that this batch no longer needs it.) */
        pthread_cond_broadcast(&ld->cv);
        if (ld->use_groups && !ld->stop && !ld->has_reader)
            stk__ld_group_prefetch(ld, w, 1, false);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}
