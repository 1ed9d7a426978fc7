/*
 * groups.c: block order.  The K blocks of a group are read whole, in large
 * sequential reads, into one of a few group buffers, and the group's
 * batches are cut from memory.  Here: the spans of shard bytes a block
 * needs, the group buffers' sizes (at open), loading a group (with its
 * checks), sharing and evicting buffers, loading ahead (a worker with
 * nothing to claim, or the reader thread), and filling a batch from them.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define SPAN_CHUNK (4u << 20) /* group reads are cut into pieces this big */

/* ---- spans ---- */

static uint64_t time_rows(const stk_loader *ld, uint64_t rec) {
    for (size_t i = 0; i < ld->nf; i++)
        if (ld->f[i].kind == F_TIME) {
            stk_extent x;
            stk_dataset_get(ld->ds, rec, ld->f[i].dsf, &x, NULL);
            return x.rows;
        }
    return 0;
}

/* Appends the spans block `blk` needs to `g`: one per shard it touches.
 * Records lie in a shard in order, so the bytes a run of its records needs
 * are one range, from the first one's start to the last one's end: two
 * index entries per shard, however many records the block holds. */
int stk__ld_block_spans(const stk_loader *ld, uint64_t blk, group *g) {
    const stk_dataset *ds = ld->ds;
    uint64_t B = ld->block_samples, n = ld->space.n;
    uint64_t s0 = blk * B, s1 = STK__MIN(s0 + B, n) - 1;
    uint64_t r0, t0, r1, t1;
    stk__space_locate(&ld->space, s0, &r0, &t0);
    stk__space_locate(&ld->space, s1, &r1, &t1);
    for (uint64_t ra = r0; ra <= r1;) {
        size_t shard = stk__dataset_shard_of(ds, ra);
        const stk__shard *sh = &ds->shards[shard];
        uint64_t rb = STK__MIN(r1, sh->first + sh->nrec - 1);
        uint64_t a = ra == r0 ? t0 : 0;
        uint64_t z = rb == r1 ? t1 + ld->space.L : time_rows(ld, rb);
        if (!ld->space.windows) a = z = 0;
        size_t s_a, s_b;
        uint64_t lo, hi, lo_b, hi_b;
        stk__ld_sample_span(ld, ra, a, ra == rb ? z : time_rows(ld, ra), &s_a, &lo, &hi);
        stk__ld_sample_span(ld, rb, rb == ra ? a : 0, z, &s_b, &lo_b, &hi_b);
        hi = STK__MAX(hi, hi_b);
        if (g->nspans == g->spans_cap) {
            size_t cap = g->spans_cap ? g->spans_cap * 2 : 64;
            span *ns = stk__realloc(g->spans, cap * sizeof *ns);
            if (!ns) return -ENOMEM;
            g->spans = ns;
            g->spans_cap = cap;
        }
        g->spans[g->nspans++] = (span){(uint32_t)shard, lo, hi, lo, 0, hi, ra};
        ra = rb + 1;
    }
    return 0;
}

/* ---- sizes, at open ---- */

/* Samples per block: about block_bytes of reads, unless given. */
static uint64_t block_samples_for(const stk_loader *ld, const stk_loader_options *o) {
    if (ld->space.n == 0) return 1;
    const stk_dataset *ds = ld->ds;
    uint64_t block_samples;
    if (ld->space.windows) {
        uint64_t per_sample = 0;
        for (size_t i = 0; i < ld->nf; i++)
            if (ld->f[i].kind == F_TIME) per_sample += o->stride * ld->f[i].fi->row_bytes;
        /* Consecutive windows advance by `stride` rows; a block of B
         * windows spans about B * stride rows plus one window. */
        uint64_t win = 0;
        for (size_t i = 0; i < ld->nf; i++)
            if (ld->f[i].kind == F_TIME) win += ld->space.L * ld->f[i].fi->row_bytes;
        per_sample = STK__MAX(per_sample, (uint64_t)1);
        block_samples = o->block_bytes > win ? (o->block_bytes - win) / per_sample + 1 : 1;
    } else {
        uint64_t avg = 0;
        for (size_t s = 0; s < ds->nshards; s++)
            avg += ds->shards[s].data_end - ds->shards[s].data_off;
        avg = ds->nrec ? avg / ds->nrec : 1;
        block_samples = STK__MAX(o->block_bytes / STK__MAX(avg, (uint64_t)1), (uint64_t)1);
    }
    if (o->block_samples) block_samples = o->block_samples;
    return block_samples;
}

uint64_t stk__ld_block_samples(const stk_loader *ld, const stk_loader_options *o) {
    return STK__MIN(block_samples_for(ld, o), STK__MAX(ld->space.n, (uint64_t)1));
}

static int cmp_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The bytes the k largest blocks read together, each with room for
 * alignment and, when checked, the checksum blocks around its ends: what
 * a group of k blocks may need, whichever k an epoch puts together.  (Not
 * k times the largest: one block of a 30 MB image among 4 MB ones would
 * ask for 16 x 30 MB.) */
static int largest_blocks(const stk_loader *ld, const stk_loader_options *o, uint64_t k,
                          uint64_t *out) {
    uint64_t nblocks = ld->order.nb;
    group *tmp = stk__calloc(1, sizeof *tmp);
    uint64_t *sizes = stk__malloc(sizeof *sizes * (size_t)STK__MAX(nblocks, (uint64_t)1));
    if (!tmp || !sizes) {
        stk__free(tmp);
        stk__free(sizes);
        return -ENOMEM;
    }
    for (uint64_t b = 0; b < nblocks; b++) {
        tmp->nspans = 0;
        if (stk__ld_block_spans(ld, b, tmp)) {
            stk__free(tmp->spans);
            stk__free(tmp);
            stk__free(sizes);
            return -ENOMEM;
        }
        uint64_t bytes = 0;
        for (size_t i = 0; i < tmp->nspans; i++)
            bytes += tmp->spans[i].hi - tmp->spans[i].lo + 2 * DIRECT_ALIGN + 64 +
                     (o->verify ? 2 * (uint64_t)ld->ds->block_size : 0);
        sizes[b] = bytes;
    }
    stk__free(tmp->spans);
    stk__free(tmp);
    qsort(sizes, (size_t)nblocks, sizeof *sizes, cmp_desc);
    uint64_t sum = 0;
    for (uint64_t b = 0; b < STK__MIN(k, nblocks); b++) sum += sizes[b];
    stk__free(sizes);
    *out = sum;
    return 0;
}

/* Block order: the block size in samples, the group buffers' count and
 * size, and the bytes they take from the budget (*groups_bytes; none
 * through the mapping).  Sets the first epoch, whose order the sizes need. */
void stk__ld_block_shape(stk_loader *ld, const stk_loader_options *o) {
    ld->block_samples = block_samples_for(ld, o);
    /* A block larger than the epoch is the epoch, and a group of more
     * blocks than there are is all of them: clamped, so that the
     * order's arithmetic (group * K * B) cannot overflow and a group's
     * tables are sized by what exists, whatever the options say. */
    uint64_t n_all = STK__MAX(ld->space.n, (uint64_t)1);
    ld->block_samples = STK__MIN(ld->block_samples, n_all);
    uint64_t nb_all = (n_all + ld->block_samples - 1) / ld->block_samples;
    if ((uint64_t)ld->opt.block_group > nb_all) ld->opt.block_group = (uint32_t)nb_all;
}

int stk__ld_size_groups(stk_loader *ld, const stk_loader_options *o, uint64_t budget,
                        uint64_t *groups_bytes, stk_error *err) {
    /* A planned loader takes the samples of each batch one by one:
     * groups are a way of reading, and it reads nothing. */
    ld->use_groups = !ld->plan_only;
    stk__ld_block_shape(ld, o);
    ld->ngroups = STK__MIN(MAX_GROUP_SLOTS, ld->nw + 2);
    /* The largest group: its K blocks the K largest. */
    stk__ld_set_epoch_locked(ld, o->seed, o->epoch, 0);
    uint64_t nblocks = ld->order.nb, most;
    if (largest_blocks(ld, o, STK__MIN((uint64_t)o->block_group, STK__MAX(nblocks, (uint64_t)1)),
                       &most))
        return stk__err(err, -ENOMEM, "out of memory");
    ld->group_cap = stk__align_up(most, DIRECT_ALIGN);
    if (ld->backend != STK_BACKEND_MMAP) {
        /* Fewer group buffers (two at least: the group in use and the
         * next) where the budget cannot hold one per worker and two. */
        while (ld->ngroups > 2 && ld->group_cap * (uint64_t)ld->ngroups > budget / 2)
            ld->ngroups--;
        *groups_bytes = ld->group_cap * (uint64_t)ld->ngroups;
    }
    return 0;
}

/* The group buffers (groups_bytes of them; none through the mapping) and
 * the groups' tables. */
int stk__ld_alloc_groups(stk_loader *ld, uint64_t groups_bytes, stk_error *err) {
    if (groups_bytes) {
        ld->group_mem = stk__aligned_alloc(DIRECT_ALIGN, (size_t)groups_bytes);
        if (!ld->group_mem)
            return stk__err(err, -ENOMEM, "out of memory for block groups (%llu bytes)",
                            (unsigned long long)groups_bytes);
    }
    for (int i = 0; ld->use_groups && i < ld->ngroups; i++) {
        group *gr = stk__calloc(1, sizeof *gr + (ld->opt.block_group + 1) * sizeof(uint64_t));
        if (!gr) return stk__err(err, -ENOMEM, "out of memory");
        gr->buf = ld->group_mem ? ld->group_mem + (uint64_t)i * ld->group_cap : NULL;
        ld->groups[i] = gr;
    }
    return 0;
}

/* ---- which buffer ---- */

static uint64_t group_last_batch(const stk_loader *ld, uint64_t g) {
    uint64_t start, size;
    stk__order_group_range(&ld->order, g, &start, &size);
    int64_t i = stk__deal_last_in(&ld->deal, start, start + size);
    return i < 0 ? 0 : stk__deal_batch_upto(&ld->deal, (uint64_t)i);
}

/* The piece this rank reads after piece g: that of its first sample past
 * its last one in g; UINT64_MAX when none.  With one stream, g + 1 (every
 * rank reads every group); with a stream per rank, the next piece of the
 * rank's stream. */
static uint64_t next_piece(const stk_loader *ld, uint64_t g) {
    const stk__deal *d = &ld->deal;
    if (ld->order.S <= 1) return g + 1 < ld->order.ngroups ? g + 1 : UINT64_MAX;
    uint64_t start, size;
    stk__order_group_range(&ld->order, g, &start, &size);
    int64_t i = stk__deal_last_in(d, start, start + size);
    if (i < 0 || (uint64_t)i + 1 >= d->rank_count) return UINT64_MAX;
    uint64_t p = d->start + ((uint64_t)i + 1) * d->world + d->rank;
    if (p >= d->n) return UINT64_MAX; /* (padding: the epoch's start again) */
    return stk__order_group_of(&ld->order, stk__stream_place(d->n, d->streams, p));
}

/* The lowest batch number that some worker may still fill. */
static uint64_t lowest_unfilled(const stk_loader *ld) {
    uint64_t low = ld->next_fill;
    for (uint32_t i = 0; i < ld->R; i++)
        if (ld->slots[i].state == S_FILLING && ld->slots[i].gen == ld->gen)
            low = STK__MIN(low, ld->slots[i].b);
    return low;
}

static bool group_evictable(const stk_loader *ld, const group *gr) {
    if (gr->state == G_EMPTY) return true;
    if (gr->users || gr->state == G_LOADING) return false;
    if (gr->gen != ld->gen || gr->state == G_FAILED) return true;
    return gr->last_batch < lowest_unfilled(ld);
}

/* ---- loading a group ---- */

/* The requests that read the laid-out spans of group `gr` into its
 * buffer, in pieces of SPAN_CHUNK (all in flight at once): *k of them, for
 * *bytes in all. */
static int span_reqs(const stk_loader *ld, worker *w, group *gr, size_t *k, uint64_t *bytes,
                     stk_error *err) {
    size_t nreq = 0;
    for (size_t i = 0; i < gr->nspans; i++) {
        const span *sp = &gr->spans[i];
        uint64_t end = ld->files.direct ? stk__align_up(sp->end, DIRECT_ALIGN) : sp->end;
        nreq += (size_t)((end - sp->base + SPAN_CHUNK - 1) / SPAN_CHUNK);
    }
    if (nreq > w->reqs_cap) {
        stk__ioreq *r = stk__realloc(w->reqs, nreq * sizeof *r);
        if (!r) return stk__err(err, -ENOMEM, "out of memory");
        w->reqs = r;
        w->reqs_cap = nreq;
    }
    size_t n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < gr->nspans; i++) {
        const span *sp = &gr->spans[i];
        uint64_t end = ld->files.direct ? stk__align_up(sp->end, DIRECT_ALIGN) : sp->end;
        uint64_t rec = sp->rec;
        for (uint64_t off = sp->base; off < end; off += SPAN_CHUNK) {
            uint64_t len = STK__MIN((uint64_t)SPAN_CHUNK, end - off);
            uint64_t need = off + len <= sp->end ? len : sp->end > off ? sp->end - off : 0;
            w->reqs[n++] = (stk__ioreq){sp->shard, off, len, need,
                                        gr->buf + sp->buf_off + (off - sp->base), rec, -1};
        }
        total += end - sp->base;
    }
    *k = n;
    *bytes = total;
    return 0;
}

/* Spans were widened to whole checksum blocks: check them from memory,
 * so batches cut from this group need no further reads to verify. */
static int check_spans(stk_loader *ld, group *gr, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < gr->nspans; i++) {
        const span *sp = &gr->spans[i];
        const stk__shard *sh = &ds->shards[sp->shard];
        uint64_t bs = sh->block_size;
        for (uint64_t a = sp->base; rc == 0 && a < sp->end; a += bs) {
            uint64_t b = (a - sh->data_off) / bs;
            if (!stk__ld_block_checked(ld, sp->shard, b) && !stk__ld_block_bad(ld, sp->shard, b)) {
                rc = stk__ld_check_block(ld, sp->shard, b, gr->buf + sp->buf_off + (a - sp->base),
                                         sp->rec, err);
                /* Under on_error = skip the samples that use it are replaced. */
                if (rc == STK_ECHECKSUM && ld->bad) {
                    stk__ld_mark_bad(ld, sp->shard, b);
                    rc = 0;
                }
            }
        }
    }
    return rc;
}

/* Reads the spans of group `gr` (already laid out) into its buffer. */
static int group_read(stk_loader *ld, worker *w, group *gr, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    if (ld->backend == STK_BACKEND_MMAP) {
        /* (The warm-up, when one runs, reads the groups in this order.) */
        for (size_t i = 0; i < gr->nspans && stk__warm_done(ld->warm); i++) {
            const span *sp = &gr->spans[i];
            uint64_t a = sp->lo & ~(uint64_t)4095;
            madvise((void *)(ds->shards[sp->shard].map + a), (size_t)(sp->hi - a), MADV_WILLNEED);
        }
        return 0;
    }
    size_t k = 0;
    uint64_t bytes = 0;
    int rc = span_reqs(ld, w, gr, &k, &bytes, err);
    if (rc) return rc;
    uint64_t t = stk__ld_span_open(ld, STK__EV_READ);
    rc = stk__io_exec(w->io, w->reqs, k, err);
    uint64_t t_ver = stk__now_ns();
    ld->st_io_ns += t_ver - t;
    ld->st_io_n += k;
    ld->st_io_bytes += bytes;
    stk__ld_span_add(ld, w, STK__EV_READ, t, t_ver, k, bytes);
    if (ld->opt.verify) t_ver = stk__ld_span_open(ld, STK__EV_VERIFY);
    if (rc == 0 && ld->opt.verify) rc = check_spans(ld, gr, err);
    if (ld->opt.verify)
        stk__ld_span_add(ld, w, STK__EV_VERIFY, t_ver, stk__now_ns(), STK__EV_NONE, STK__EV_NONE);
    return rc;
}

/* A lazy dataset (a remote one): the group's spans are fetched, all at
 * once, before they are read. */
static int ensure_spans(const stk_loader *ld, const group *gr, stk__range **held,
                        stk_error *err) {
    *held = NULL;
    stk__range *r = stk__malloc((gr->nspans ? gr->nspans : 1) * sizeof *r);
    if (!r) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < gr->nspans; i++)
        r[i] = (stk__range){gr->spans[i].shard, gr->spans[i].lo, gr->spans[i].hi};
    int rc = ld->ds->ensure(ld->ds->ensure_ctx, r, gr->nspans, err);
    if (rc) stk__free(r);
    else *held = r;
    return rc;
}

void stk__ld_announce_groups(stk_loader *ld, worker *w, uint64_t g, uint64_t gen) {
    const stk_dataset *ds = ld->ds;
    uint64_t from, to;
    if (!ds->ensure_ahead || !stk__ld_ahead_claim(ld, g, w->order.ngroups, gen, &from, &to))
        return;
    group *tmp = stk__calloc(1, sizeof *tmp);
    for (uint64_t x = from; tmp && x < to; x++) {
        tmp->nspans = 0;
        bool ok = true;
        uint64_t xs, xz;
        /* Over several streams, the numbers past the rank's own pieces are
         * other streams' pieces: not announced. */
        stk__order_group_range(&w->order, x, &xs, &xz);
        if (w->order.S > 1 && stk__deal_last_in(&w->deal, xs, xs + xz) < 0) continue;
        for (uint64_t m = 0; ok && m < stk__order_group_blocks(&w->order, x); m++)
            ok = stk__ld_block_spans(ld, stk__order_group_block(&w->order, x, m), tmp) == 0;
        stk__range *r = ok ? stk__malloc((tmp->nspans ? tmp->nspans : 1) * sizeof *r) : NULL;
        if (!r) break;
        for (size_t i = 0; i < tmp->nspans; i++)
            r[i] = (stk__range){tmp->spans[i].shard, tmp->spans[i].lo, tmp->spans[i].hi};
        ds->ensure_ahead(ds->ensure_ctx, r, tmp->nspans, stk__ld_reads_whole(ld));
        stk__free(r);
    }
    if (tmp) stk__free(tmp->spans);
    stk__free(tmp);
}

/* Lays out group g's spans in `gr` and reads them. */
static int group_load(stk_loader *ld, worker *w, group *gr, uint64_t g, stk_error *err) {
    gr->nspans = 0;
    uint64_t nblk = stk__order_group_blocks(&w->order, g);
    for (uint64_t m = 0; m < nblk; m++) {
        gr->block_first[m] = gr->nspans;
        if (stk__ld_block_spans(ld, stk__order_group_block(&w->order, g, m), gr))
            return stk__err(err, -ENOMEM, "out of memory");
    }
    gr->block_first[nblk] = gr->nspans;
    uint64_t pos = 0;
    for (size_t i = 0; i < gr->nspans; i++) {
        span *sp = &gr->spans[i];
        if (ld->opt.verify && ld->backend != STK_BACKEND_MMAP) {
            /* Whole checksum blocks, so that they can be checked on load. */
            const stk__shard *sh = &ld->ds->shards[sp->shard];
            uint64_t bs = sh->block_size;
            sp->base = sh->data_off + (sp->lo - sh->data_off) / bs * bs;
            sp->end = STK__MIN(sh->data_off + stk__align_up(sp->hi - sh->data_off, bs),
                               sh->data_end);
        } else {
            sp->base = ld->files.direct ? sp->lo & ~(uint64_t)(DIRECT_ALIGN - 1) : sp->lo;
            sp->end = sp->hi;
        }
        sp->buf_off = pos;
        pos = ld->files.direct ? pos + stk__align_up(sp->end, DIRECT_ALIGN) - sp->base
                               : stk__align_up(pos + (sp->end - sp->base), 64);
    }
    if (ld->backend != STK_BACKEND_MMAP && pos > ld->group_cap)
        return stk__err(err, -ENOMEM,
                        "%s: group %llu needs %llu bytes, more than the %llu reserved "
                        "(lower block_bytes or block_group)",
                        ld->ds->dir, (unsigned long long)g, (unsigned long long)pos,
                        (unsigned long long)ld->group_cap);
    stk__range *held = NULL;
    if (ld->ds->ensure) {
        stk__ld_announce_groups(ld, w, g, gr->gen);
        int rc = ensure_spans(ld, gr, &held, err);
        if (rc) return rc;
    }
    /* Read into the group's buffer (never through the mapping under a cache
     * budget: open refuses it), the spans are let go. */
    int rc = group_read(ld, w, gr, err);
    if (held) {
        stk__dataset_release(ld->ds, held, gr->nspans);
        stk__free(held);
    }
    return rc;
}

/* ---- sharing the buffers ---- */

/* Every buffer holds a group that a batch not yet filled needs (a batch
 * may span more groups than there are buffers).  While a worker uses or
 * loads one, its release will wake us: NULL.  When none does, no buffer
 * would ever free up: the unused group with the lowest number, which is
 * read again if needed. */
static group *last_resort(const stk_loader *ld) {
    group *victim = NULL;
    for (int i = 0; i < ld->ngroups; i++) {
        group *gr = ld->groups[i];
        if (gr->users || gr->state == G_LOADING) return NULL;
        if (!victim || gr->g < victim->g) victim = gr;
    }
    return victim;
}

/* Loads group g into the buffer of `victim`, for the caller (its one
 * user).  Called and returns with mu held; reads without it. */
static group *load_into(stk_loader *ld, worker *w, group *victim, uint64_t g, uint64_t gen,
                        stk_error *err, int *rc) {
    victim->state = G_LOADING;
    victim->g = g;
    victim->gen = gen;
    victim->users = 1;
    victim->last_batch = group_last_batch(ld, g);
    pthread_mutex_unlock(&ld->mu);
    uint64_t t_load = stk__ld_span_open(ld, STK__EV_GROUP_LOAD);
    int r = group_load(ld, w, victim, g, err);
    stk__ld_span_add(ld, w, STK__EV_GROUP_LOAD, t_load, stk__now_ns(), g, STK__EV_NONE);
    pthread_mutex_lock(&ld->mu);
    ld->st_groups++;
    victim->state = r ? G_FAILED : G_READY;
    pthread_cond_broadcast(&ld->cv);
    if (r) {
        victim->users = 0;
        victim->rc = r;
        if (err) victim->err = *err;
        *rc = r;
        return NULL;
    }
    return victim;
}

/* Returns group g ready for reading, with a user counted; loads it when no
 * one has.  Called and returns with mu held. */
static group *group_acquire(stk_loader *ld, worker *w, uint64_t g, uint64_t gen,
                            stk_error *err, int *rc) {
    *rc = 0;
    uint64_t t_wait = 0; /* when this call began to wait for another's load */
    for (;;) {
        if (ld->stop || ld->gen != gen) {
            *rc = -ECANCELED;
            return NULL;
        }
        group *found = NULL, *victim = NULL, *spare = NULL;
        for (int i = 0; i < ld->ngroups; i++) {
            group *gr = ld->groups[i];
            if (gr->state != G_EMPTY && gr->g == g && gr->gen == gen) found = gr;
            else if (!victim && group_evictable(ld, gr)) victim = gr;
            else if (!spare && gr->state == G_READY && !gr->users && gr->g > g) spare = gr;
        }
        if (found && found->state == G_READY) {
            found->users++;
            if (t_wait)
                stk__ld_span_add(ld, w, STK__EV_GROUP_WAIT, t_wait, stk__now_ns(), g,
                                 STK__EV_NONE);
            return found;
        }
        if (found && found->state == G_LOADING) {
            if (!t_wait) t_wait = stk__now_ns();
            pthread_cond_wait(&ld->cv, &ld->mu);
            continue;
        }
        if (found) {
            /* A load ahead failed: the batch that needs the group gets its
             * error (a second try would wait as long again, on a remote
             * dataset for minutes); the next asker tries again. */
            found->state = G_EMPTY;
            if (found->rc != -ECANCELED) {
                *rc = found->rc;
                if (err) *err = found->err;
                return NULL;
            }
            victim = found;
        }
        /* A group loaded ahead for later batches may give way to one needed
         * now; it will be read again when its turn comes. */
        if (!victim) victim = spare;
        if (!victim && !(victim = last_resort(ld))) {
            pthread_cond_wait(&ld->cv, &ld->mu);
            continue;
        }
        return load_into(ld, w, victim, g, gen, err, rc);
    }
}

static void group_release(stk_loader *ld, group *gr) {
    gr->users--;
    pthread_cond_broadcast(&ld->cv);
}

/* ---- loading ahead ---- */

/* Loads the first group missing among the `ahead` groups after the one the
 * next batch starts in (that one too, with `first`), if a buffer is free,
 * so that batches never wait for it; returns whether it loaded one.  With
 * more than two buffers, one is kept for the group the batches in flight
 * may still need: only the group needed next may take the last free one.
 * With two (a budget that holds no more, as under a memory limit), the
 * next group may take the other buffer while the current one is cut:
 * keeping it free made every group wait for the one before it to be cut
 * before its read began, the reads and the cutting never overlapping
 * (a trace of 1 GB in 16 groups: a read of 40-57 ms, then 10 ms of
 * cutting with the device idle, group after group).  A worker that needs
 * a group nobody loaded still takes a read-ahead one's buffer
 * (group_acquire's spare). Called with mu held (released while
 * reading). */
bool stk__ld_group_prefetch(stk_loader *ld, worker *w, uint64_t ahead, bool first) {
    if (!ld->use_groups || ld->next_fill >= ld->nbatches) return false;
    uint64_t gen = ld->gen;
    uint64_t p = stk__deal_at(&ld->deal, ld->next_fill * ld->opt.batch_size);
    uint64_t g0 = stk__order_group_of(&ld->order, p);
    uint64_t g = first ? g0 : next_piece(ld, g0);
    for (uint64_t k = first ? 0 : 1; k <= ahead && g < ld->order.ngroups;
         k++, g = next_piece(ld, g)) {
        group *victim = NULL;
        int free_slots = 0;
        bool present = false;
        for (int i = 0; i < ld->ngroups; i++) {
            group *gr = ld->groups[i];
            if (gr->state != G_EMPTY && gr->g == g && gr->gen == gen) present = true;
            else if (group_evictable(ld, gr)) {
                free_slots++;
                if (!victim) victim = gr;
            }
        }
        if (present) continue;
        if (!victim || free_slots < (g == g0 || ld->ngroups <= 2 ? 1 : 2)) return false;
        w->order = ld->order;
        w->deal = ld->deal;
        stk_error err;
        int rc;
        group *gr = group_acquire(ld, w, g, gen, &err, &rc);
        if (gr) group_release(ld, gr);
        return true;
    }
    return false;
}

/* Block order with real reads (not the mapping): a thread of its own reads
 * groups ahead into free buffers, so that the workers only cut batches and
 * never stop to read (a worker that read the next group left one worker to
 * cut batches, and the run far below the device's sequential rate). */
void *stk__ld_reader_main(void *arg) {
    worker *w = arg;
    stk_loader *ld = w->ld;
    stk__thread_name("stk-reader");
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop)
        if (!stk__ld_group_prefetch(ld, w, (uint64_t)ld->ngroups, true))
            pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* ---- batches cut from groups ---- */

/* on_error = skip: sample j, on a block the group load found damaged, is
 * replaced by the next good one of the same group; *m becomes the block
 * (within the group) of the replacement. */
static int replace_damaged(stk_loader *ld, worker *w, stk_batch *s, uint64_t g, uint32_t j,
                           uint64_t *recs, uint64_t *ts, uint64_t *m, stk_error *err) {
    int rc = stk__ld_sample_ok(ld, w, recs[j], ts[j], err);
    if (rc == STK_ECHECKSUM) {
        uint64_t gstart, gsize;
        stk__order_group_range(&w->order, g, &gstart, &gsize);
        rc = stk__ld_substitute(ld, w, stk__deal_at(&w->deal, s->b * ld->opt.batch_size + j),
                                gstart, gsize, &s->samples[j], &recs[j], &ts[j], err);
        *m = stk__order_group_slot(&w->order, g, s->samples[j] / ld->block_samples);
    }
    return rc;
}

/* Samples [j0, j1) of a batch, all of group g (in `gr`): their copies are
 * planned (source in the group buffer or the mapping, destination in the
 * slot) and then done. */
static int fill_run(stk_loader *ld, worker *w, stk_batch *s, const group *gr, uint64_t g,
                    uint32_t j0, uint32_t j1, uint64_t *recs, uint64_t *ts,
                    const uint32_t *slots, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    bool mm = ld->backend == STK_BACKEND_MMAP;
    uint64_t *rows_done = s->ragged_rows;
    int rc = 0;
    size_t np = 0;
    /* The run's index entries are located first and read a few samples
     * ahead: they lie at random in a few megabytes of index. */
    for (uint32_t j = j0; j < j1; j++) {
        size_t si = stk__dataset_shard_of(ds, recs[j]);
        w->shs[j] = (uint32_t)si;
        w->ents[j] = stk__entry(ds, &ds->shards[si], recs[j] - ds->shards[si].first);
    }
    for (uint32_t j = j0; j < STK__MIN(j1, j0 + AHEAD_E); j++) __builtin_prefetch(w->ents[j]);
    for (uint32_t j = j0; j < j1 && rc == 0; j++) {
        if (j + AHEAD_E < j1) __builtin_prefetch(w->ents[j + AHEAD_E]);
        uint64_t m = slots[j];
        if (ld->bad && (rc = replace_damaged(ld, w, s, g, j, recs, ts, &m, err))) break;
        uint64_t rec = recs[j];
        size_t si = stk__dataset_shard_of(ds, rec);
        const stk__shard *sh = &ds->shards[si];
        const uint64_t *e = stk__entry(ds, sh, rec - sh->first); /* (a replacement's) */
        const span *sp = NULL;
        for (uint64_t k = gr->block_first[m]; k < gr->block_first[m + 1]; k++)
            if (gr->spans[k].shard == si) sp = &gr->spans[k];
        if (!sp) {
            rc = stk__err(err, -EFAULT, "%s: record %llu is missing from its block's spans",
                          sh->path, (unsigned long long)rec);
            break;
        }
        for (size_t fi = 0; fi < ld->nf; fi++) {
            const lfield *lf = &ld->f[fi];
            uint64_t off, len, raw;
            uint8_t *dst =
                stk__ld_place(ld, lf, s, j, sh, e, ts[j], &rows_done[fi], &off, &len, &raw);
            const uint8_t *src = mm ? sh->map + off : gr->buf + sp->buf_off + (off - sp->base);
            int cv = stk__shard_conv(lf->fi, sh);
            int kind = lf->dec                         ? POST_MEDIA
                       : lf->f->codec == STK_CODEC_ZSTD ? POST_ZSTD
                       : lf->fi->chunks                 ? POST_CHUNK
                       : cv                             ? POST_CONV
                                                        : POST_COPY;
            uint64_t skip = lf->kind == F_TIME && lf->fi->chunks ? ts[j] * lf->fi->row_bytes : 0;
            if (lf->dec) cv = (int)fi; /* (POST_MEDIA: the loader field) */
            w->posts[np++] = (post){kind, src, dst, len, raw, rec, lf->dsf, NULL, skip, cv};
        }
    }
    if (rc == 0) rc = stk__ld_do_posts(ld, w, np, err);
    return rc;
}

/* Copies samples out of group buffers (block order).  The batch's
 * positions are consecutive in the order, so its samples fall in a run of
 * one group, then perhaps the next: each run holds its group while the
 * copies of the run are planned and done, the sources prefetched ahead as
 * in gather.c. */
int stk__ld_fill_groups(stk_loader *ld, worker *w, stk_batch *s, uint64_t *recs, uint64_t *ts,
                        const uint64_t *groups_of, const uint32_t *slots, uint64_t gen,
                        stk_error *err) {
    int rc = 0;
    uint64_t *rows_done = s->ragged_rows;
    for (size_t fi = 0; fi < ld->nf; fi++) rows_done[fi] = 0;
    for (uint32_t j0 = 0, j1; j0 < s->n && rc == 0; j0 = j1) {
        uint64_t g = groups_of[j0];
        for (j1 = j0 + 1; j1 < s->n && groups_of[j1] == g; j1++) {
        }
        if (stk__ld_grow((void **)&w->posts, &w->posts_cap, (size_t)(j1 - j0) * ld->nf,
                         sizeof *w->posts))
            return stk__err(err, -ENOMEM, "out of memory");
        pthread_mutex_lock(&ld->mu);
        group *gr = group_acquire(ld, w, g, gen, err, &rc);
        pthread_mutex_unlock(&ld->mu);
        if (!gr) break;
        uint64_t t_run = stk__ld_span_open(ld, STK__EV_ASSEMBLE);
        rc = fill_run(ld, w, s, gr, g, j0, j1, recs, ts, slots, err);
        uint64_t t_end = stk__now_ns();
        ld->st_asm_ns += t_end - t_run;
        stk__ld_span_add(ld, w, STK__EV_ASSEMBLE, t_run, t_end, STK__EV_NONE, STK__EV_NONE);
        pthread_mutex_lock(&ld->mu);
        group_release(ld, gr);
        pthread_mutex_unlock(&ld->mu);
    }
    for (size_t fi = 0; fi < ld->nf && rc == 0; fi++)
        if (ld->f[fi].kind == F_RAGGED)
            ((int64_t *)(s->mem + ld->f[fi].offs_off))[s->n] = (int64_t)rows_done[fi];
    return rc;
}
