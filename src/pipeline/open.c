/*
 * open.c: a loader's life from open to close.  Open checks the options,
 * then takes its steps in order (fields, the sample space, the slots' layout,
 * the backend and the files, the checksum bitmaps, the threads' count, the
 * block groups' sizes, the read paths, the ring, the workers' memory and
 * engines) and starts the threads last; any failure closes what was made.
 * Stop joins the threads and gives back memory; close frees everything.
 * Counting (stk_loader_count) takes only the first steps, up to the
 * sample space and its dealing.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- open, step by step ---- */

/* A zeroed loader, at the alignment its counters' cache lines ask for. */
_Static_assert(_Alignof(stk_loader) <= 64, "stk__calloc_lines aligns to 64 bytes");
static stk_loader *loader_alloc(void) { return stk__calloc_lines(1, sizeof(stk_loader)); }

/* A loader with the options copied (less the caller's names, which the
 * loader does not keep) and its locks made. */
static stk_loader *loader_new(stk_dataset *ds, const stk_loader_options *opts, bool plan_only) {
    stk_loader *ld = loader_alloc();
    if (!ld) return NULL;
    ld->ds = ds;
    ld->plan_only = plan_only;
    ld->nvtx = stk__nvtx_on();
    ld->opt = *opts;
    ld->opt.fields = NULL;
    ld->opt.valid_field = NULL;
    ld->opt.valid_rules = NULL;
    ld->opt.nvalid_rules = 0;
    ld->opt.names = NULL;
    ld->opt.queue_depth = opts->queue_depth ? opts->queue_depth : 64;
    ld->opt.streams = opts->streams ? opts->streams : opts->world_size;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_mutex_init(&ld->chk_mu, NULL);
    stk__cond_init_monotonic(&ld->cv);
    stk__cond_init_monotonic(&ld->cv_ready);
    ld->st_t0 = stk__now_ns();
    return ld;
}

/* The sample space over the fields stk__ld_pick_fields chose: records, or
 * windows over the time fields (with the validity rule applied). */
static int build_space(stk_loader *ld, const stk_loader_options *opts, stk_error *err) {
    size_t *time_fields = stk__calloc(ld->nf, sizeof *time_fields);
    if (!time_fields) return stk__err(err, -ENOMEM, "out of memory");
    size_t ntime = 0;
    for (size_t i = 0; i < ld->nf; i++)
        if (ld->f[i].kind == F_TIME) time_fields[ntime++] = ld->f[i].dsf;
    int rc;
    if (opts->window && ntime == 0) {
        rc = stk__err(err, -EINVAL,
                      "window: none of the selected fields has a time axis (a ragged first "
                      "dimension, or a fixed one of at least %llu rows)",
                      (unsigned long long)opts->window);
    } else {
        ld->nrules = stk__ld_rules(ld->ds, opts, ld->rules);
        stk__space_params sp = {opts->window, opts->stride, time_fields, ntime, ld->rules,
                                ld->nrules};
        ld->valid_dsf = opts->valid_field ? stk_dataset_find_field(ld->ds, opts->valid_field) : -1;
        /* The validity rules read their fields in every record. */
        rc = ld->nrules ? stk__dataset_ensure_all(ld->ds, err) : 0;
        if (rc == 0) rc = stk__space_build(&ld->space, ld->ds, &sp, err);
    }
    stk__free(time_fields);
    return rc;
}

/* Places the fields in a slot, their room (cap) given: per field, data
 * then a ragged field's offsets, each 64-byte aligned. */
static void place_fields(stk_loader *ld) {
    uint64_t B = ld->opt.batch_size, pos = 0;
    for (size_t i = 0; i < ld->nf; i++) {
        lfield *lf = &ld->f[i];
        lf->data_off = pos;
        pos = stk__align_up(pos + lf->cap, 64);
        if (lf->kind == F_RAGGED) {
            lf->offs_off = pos;
            pos = stk__align_up(pos + (B + 1) * 8, 64);
        }
    }
    ld->slot_bytes = STK__MAX(pos, (uint64_t)64);
}

/* Slot layout: a ragged field takes the batch size times its longest
 * record. */
static int lay_out_slots(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    uint64_t *max_rows = stk__calloc(ld->nf, sizeof *max_rows);
    if (!max_rows) return stk__err(err, -ENOMEM, "out of memory");
    stk__ld_field_maxima(ld, max_rows);
    uint64_t B = o->batch_size;
    for (size_t i = 0; i < ld->nf; i++) {
        lfield *lf = &ld->f[i];
        lf->cap = lf->kind == F_RAGGED ? B * max_rows[i] * lf->fi->row_bytes : B * lf->sample_bytes;
    }
    place_fields(ld);
    stk__free(max_rows);
    return 0;
}

/* Opens the shards' files.  O_DIRECT the loader chose itself (block order
 * over data that does not fit) falls back to the page cache on a file
 * system that refuses it. */
static int open_files(stk_loader *ld, stk_error *err) {
    /* Read-ahead in random order.  When the data fits in memory, a small
     * sample's read becomes a larger request whose extra bytes later
     * samples of the epoch use; a large one (above half the kernel's
     * 128 KiB default window) only gains the head of the next record, read
     * again later as a fragment (docs/BENCHMARKS.md, "Figures behind design
     * choices", has both measurements).  When the data does not fit, the
     * extra bytes are gone before a later sample could use them: each
     * sample is one read of its own bytes. */
    bool no_readahead = ld->opt.order == STK_ORDER_RANDOM &&
                        (!ld->fits || stk__ld_mean_sample_bytes(ld) >= (64u << 10));
    int rc = stk__files_open(&ld->files, ld->ds, ld->opt.direct != 0, no_readahead,
                             ld->backend == STK_BACKEND_MMAP, ld->opt.max_open_files, err);
    if (rc == -EINVAL && ld->auto_direct) { /* a file system without O_DIRECT */
        stk__files_close(&ld->files);
        ld->opt.direct = 0;
        ld->auto_direct = false;
        rc = stk__files_open(&ld->files, ld->ds, ld->opt.direct != 0, no_readahead,
                             ld->backend == STK_BACKEND_MMAP, ld->opt.max_open_files, err);
    }
    return rc;
}

/* Whether a loader's consumer may spin for a batch being filled, where
 * `threads` threads work for it (0: never): when they leave a CPU free,
 * unless STOKER_SPIN=0 (a node whose CPUs other processes keep busy). */
static bool may_spin(int threads) {
    const char *v = getenv("STOKER_SPIN");
    if (threads <= 0 || (v && strcmp(v, "0") == 0)) return false;
    return threads < sysconf(_SC_NPROCESSORS_ONLN);
}

/* The workers (one per CPU by default, at most DEFAULT_WORKERS, or
 * MAX_WORKERS when media fields are decoded) and whether a reader thread
 * joins them; the descriptors and trace buffers are shared out among
 * them. */
static bool plan_threads(stk_loader *ld, const stk_loader_options *o) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long cap = ld->decs ? MAX_WORKERS : DEFAULT_WORKERS;
    ld->nw = o->threads ? o->threads : (int)STK__MIN(STK__MAX(ncpu, 1L), cap);
    /* Block order with real reads gets a thread that reads groups ahead. */
    bool reader = o->order == STK_ORDER_BLOCK && !ld->plan_only && ld->backend != STK_BACKEND_MMAP;
    ld->spin = may_spin(ld->nw + reader);
    stk__files_share(&ld->files, (unsigned)ld->nw + reader);
    stk__trace_init(&ld->trace, ld->nw + 1 + reader, reader ? ld->nw : -1);
    return reader;
}

/* The ring: R batch buffers in one block of memory (pipeline.h hands it
 * out whole), each slot with room for its sample ids, ragged row counts
 * and, for a planned loader, its plan. */
static int alloc_ring(stk_loader *ld, uint64_t R, stk_error *err) {
    uint64_t B = ld->opt.batch_size;
    ld->R = (uint32_t)R;
    ld->slots_cap = (uint32_t)R + MAX_EXTRA_SLOTS;
    ld->slots = stk__calloc(ld->slots_cap, sizeof *ld->slots);
    ld->slot_mem = stk__aligned_alloc(4096, (size_t)(R * stk__align_up(ld->slot_bytes, 4096)));
    if (!ld->slots || !ld->slot_mem)
        return stk__err(err, -ENOMEM, "out of memory for %llu batch buffers of %llu bytes",
                        (unsigned long long)R, (unsigned long long)ld->slot_bytes);
    for (uint32_t i = 0; i < R; i++) {
        stk_batch *s = &ld->slots[i];
        s->ld = ld;
        s->device = -1;
        s->mem = ld->slot_mem + i * stk__align_up(ld->slot_bytes, 4096);
        s->samples = stk__calloc(B, sizeof *s->samples);
        s->ragged_rows = stk__calloc(ld->nf, sizeof *s->ragged_rows);
        if (ld->plan_only) s->plan = stk__calloc(B * ld->nf, sizeof *s->plan);
        if (ld->want_sources) s->sources = stk__calloc(B, sizeof *s->sources);
        if (!s->samples || !s->ragged_rows || (ld->plan_only && !s->plan) ||
            (ld->want_sources && !s->sources))
            return stk__err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

/* The ranges the warm-up brings in, in the order the first epoch first
 * needs them: block order's blocks group by group; for the others the
 * shards in turn (a sequential epoch reads them so, and a random one needs
 * almost every byte within its first few batches anyway). */
static int warm_up_start(stk_loader *ld, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    stk__range *r = NULL;
    size_t n = 0;
    /* Block order (with its groups or, through the mapping, without):
     * its blocks in the order's sequence, so that the first batches' data
     * comes first.  (Only block order has groups.) */
    if (ld->opt.order == STK_ORDER_BLOCK) {
        group *tmp = stk__calloc(1, sizeof *tmp);
        if (!tmp) return stk__err(err, -ENOMEM, "out of memory");
        for (uint64_t g = 0; g < ld->order.ngroups; g++)
            for (uint64_t m = 0; m < stk__order_group_blocks(&ld->order, g); m++)
                if (stk__ld_block_spans(ld, stk__order_group_block(&ld->order, g, m), tmp)) {
                    stk__free(tmp->spans);
                    stk__free(tmp);
                    return stk__err(err, -ENOMEM, "out of memory");
                }
        r = stk__malloc((tmp->nspans ? tmp->nspans : 1) * sizeof *r);
        for (size_t i = 0; r && i < tmp->nspans; i++)
            r[n++] = (stk__range){tmp->spans[i].shard, tmp->spans[i].lo, tmp->spans[i].hi};
        stk__free(tmp->spans);
        stk__free(tmp);
    } else {
        r = stk__malloc((ds->nshards ? ds->nshards : 1) * sizeof *r);
        for (size_t s = 0; r && s < ds->nshards; s++)
            if (ds->shards[s].data_end > ds->shards[s].data_off)
                r[n++] = (stk__range){(uint32_t)s, ds->shards[s].data_off, ds->shards[s].data_end};
    }
    if (!r) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) ld->warm_total += r[i].hi - r[i].lo;
    int rc = stk__warm_start(ds, r, n, &ld->warm, err);
    if (rc == 0 && ld->verified) {
        ld->warm_ranges = r; /* kept: the workers check blocks in this order */
        ld->nwarm_ranges = n;
        ld->chk_block = UINT64_MAX;
    } else {
        stk__free(r);
    }
    return rc;
}

/* A worker's own memory (staging, the batch's ids, entries and shards, a
 * checksum block) and its I/O engine. */
static int open_worker(stk_loader *ld, worker *w, const stk_loader_options *o, uint64_t stage_cap,
                       stk_error *err) {
    const stk_dataset *ds = ld->ds;
    uint64_t B = o->batch_size;
    w->ld = ld;
    w->stage_cap = stage_cap;
    if (stage_cap && !(w->stage = stk__aligned_alloc(DIRECT_ALIGN, (size_t)stage_cap)))
        return stk__err(err, -ENOMEM, "out of memory for staging");
    w->ids = stk__malloc(3 * B * sizeof *w->ids);
    w->ents = stk__malloc(B * sizeof *w->ents);
    w->shs = stk__malloc(B * sizeof *w->shs);
    w->slots = stk__malloc(B * sizeof *w->slots);
    if (!w->ents || !w->shs || !w->slots) return stk__err(err, -ENOMEM, "out of memory");
    if (o->verify && ds->block_size &&
        !(w->blockbuf = stk__aligned_alloc(DIRECT_ALIGN, ds->block_size)))
        return stk__err(err, -ENOMEM, "out of memory");
    if (!w->ids || !(w->dctx = ZSTD_createDCtx())) return stk__err(err, -ENOMEM, "out of memory");
    if (ld->drawn && !(w->draw_rows = stk__calloc(ld->nf + 1, sizeof *w->draw_rows)))
        return stk__err(err, -ENOMEM, "out of memory");
    if (ld->backend == STK_BACKEND_URING)
        return stk__io_uring_open(&ld->files, ld->opt.queue_depth, &w->io, err);
    if (ld->backend == STK_BACKEND_POOL) return stk__io_pool_open(&ld->files, &w->io, err);
    return stk__io_mmap_open(&ld->files, &w->io, err);
}

/* The threads, last: the workers, then the group reader. */
static int start_threads(stk_loader *ld, bool reader, stk_error *err) {
    int rc;
    ld->has_reader = reader; /* (read by the workers from their start) */
    for (int i = 0; i < ld->nw; i++) {
        if ((rc = -pthread_create(&ld->w[i].tid, NULL, stk__ld_worker_main, &ld->w[i])))
            return stk__err(err, rc, "cannot start a worker thread: %s", stk_strerror(rc));
        ld->w[i].started = 1;
    }
    if (!reader) return 0;
    worker *w = &ld->reader;
    w->ld = ld;
    rc = ld->backend == STK_BACKEND_URING
             ? stk__io_uring_open(&ld->files, ld->opt.queue_depth, &w->io, err)
             : stk__io_pool_open(&ld->files, &w->io, err);
    if (rc) return rc;
    if ((rc = -pthread_create(&w->tid, NULL, stk__ld_reader_main, w)))
        return stk__err(err, rc, "cannot start the group reader thread: %s", stk_strerror(rc));
    w->started = 1;
    return 0;
}

/* A lazy (remote) dataset's read-ahead: $STOKER_REMOTE_AHEAD_MB MiB
 * (default 64; 0: none) of batches, or block groups, past the one being
 * filled are announced to it (stk_dataset.ensure_ahead), which fetches
 * them in the background, many ranges in flight. */
static void size_ahead(stk_loader *ld, const stk_loader_options *o) {
    ld->ahead_n = 0;
    if (!ld->ds->ensure_ahead || ld->plan_only) return;
    uint64_t mb = 64;
    const char *v = getenv("STOKER_REMOTE_AHEAD_MB");
    if (v && *v) {
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        if (!*end && x < (1ull << 40)) mb = x;
    }
    uint64_t unit = ld->use_groups ? ld->group_cap
                                   : (uint64_t)o->batch_size * stk__ld_mean_sample_bytes(ld);
    ld->ahead_n = unit ? ((mb << 20) + unit - 1) / unit : 0;
}

/* Writes "OPTION=NOW or less[ with these threads][, or OPTION=MIN1 or less
 * with threads=1]" into fit, each part only where it is some help (NOW 0
 * fits nothing); returns its length. */
static size_t fit_advice(char *fit, size_t cap, const char *option, uint64_t now, uint64_t min1,
                         bool several) {
    size_t n = 0;
    if (now)
        n += (size_t)snprintf(fit, cap, "%s=%llu or less%s", option, (unsigned long long)now,
                              several ? " with these threads" : "");
    if (several && min1 > now && n < cap)
        n += (size_t)snprintf(fit + n, cap - n, "%s%s=%llu or less with threads=1",
                              n ? ", or " : "", option, (unsigned long long)min1);
    return STK__MIN(n, cap - 1);
}

/* Says why the cache budget cannot hold `window` bytes (`holders` each
 * holding `per`; `all`: the window is the whole of the data), with the
 * budget these options need, the budget threads=1 would need, and the
 * batch size (or block group) that fits the budget as it is: advice that
 * is true for the options given, threads=1 included. */
static int cache_window_error(const stk_loader *ld, const stk_loader_options *o, uint64_t per,
                              int holders, uint64_t window, bool all, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    /* What the readers may hold: the budget less what is never evicted. */
    uint64_t K = 1024, fixed = ds->cache_fixed;
    uint64_t B = ds->cache_budget > fixed ? ds->cache_budget - fixed : 0;
    int others = ld->use_groups ? holders - 1 : holders; /* the loader's threads */
    uint64_t one = STK__MIN(per * (uint64_t)(holders - others + 1), window);
    char held[200], need[160], fit[300];
    if (ld->use_groups)
        snprintf(held, sizeof held,
                 "%d thread%s and the group reader each hold a block group of up to %llu KiB "
                 "(block_group=%u blocks)",
                 others, others == 1 ? "" : "s", (unsigned long long)(per / K),
                 (unsigned)ld->opt.block_group);
    else
        snprintf(held, sizeof held,
                 "%d thread%s a batch of %u records of up to %llu KiB each (whole "
                 "%u KiB blocks)",
                 others, others == 1 ? " holds" : "s each hold", (unsigned)o->batch_size,
                 (unsigned long long)(per / o->batch_size / K), ds->block_size >> 10);
    if (others > 1)
        snprintf(need, sizeof need, "at least %llu KiB (%llu KiB with threads=1)",
                 (unsigned long long)((window + fixed + K - 1) / K),
                 (unsigned long long)((one + fixed + K - 1) / K));
    else
        snprintf(need, sizeof need, "at least %llu KiB",
                 (unsigned long long)((window + fixed + K - 1) / K));
    size_t n = 0;
    if (ld->use_groups) {
        /* A group is block_group blocks, each taking up to `blk` (blocks are
         * cut at whole records, so their size follows block_bytes only
         * roughly): the block_group that fits, else how small a block must
         * get. */
        unsigned kg = ld->opt.block_group ? ld->opt.block_group : 1;
        uint64_t blk = per / kg, now = B / (uint64_t)holders / blk, min1 = B / 2 / blk;
        n = fit_advice(fit, sizeof fit, "block_group", now, min1, others > 1);
        if (!min1)
            snprintf(fit + n, sizeof fit - n,
                     "smaller blocks: one block takes up to %llu KiB of cache here, and may "
                     "take at most %llu KiB (%llu with threads=1): lower block_bytes",
                     (unsigned long long)(blk / K), (unsigned long long)(B / holders / K),
                     (unsigned long long)(B / 2 / K));
    } else {
        uint64_t rec = per / o->batch_size;
        uint64_t now = B / (rec * (uint64_t)holders), min1 = B / rec;
        n = fit_advice(fit, sizeof fit, "batch_size", now, min1, others > 1);
        if (!min1)
            snprintf(fit + n, sizeof fit - n,
                     "no batch_size: one record may take %llu KiB of cache",
                     (unsigned long long)(rec / K));
    }
    return stk__err(err, -ENOSPC,
                    "%s: the cache budget (%llu KiB) cannot hold what the loader may read at "
                    "once: %s, %llu KiB%s, besides the %llu KiB the cache keeps for the "
                    "shards' headers and indexes.  These options need a budget of %s; to fit "
                    "this one: %s; or a budget of 0, which streams",
                    ds->origin ? ds->origin : ds->dir,
                    (unsigned long long)(ds->cache_budget / K), held,
                    (unsigned long long)(window / K), all ? " (the whole dataset)" : " in all",
                    (unsigned long long)((fixed + K - 1) / K), need, fit);
}

/* A remote dataset whose cache budget is smaller than it: the bytes the
 * loader's threads may hold in the cache at once (each a batch's records
 * in whole 64 KiB blocks, or a block-order group) must fit the budget, or
 * the loader would only thrash: said now.  A budget of 0 streams: the
 * cache is then whatever the threads hold. */
static int check_cache_window(stk_loader *ld, const stk_loader_options *o,
                              stk_error *err) {
    const stk_dataset *ds = ld->ds;
    if (!ds->cache_limited || ld->plan_only) return 0;
    if (!ds->cache_budget) {
        ld->ahead_n = 0; /* streaming keeps nothing ahead */
        return 0;
    }
    uint64_t data = 0, per = 0;
    for (size_t s = 0; s < ds->nshards; s++) data += ds->shards[s].data_end - ds->shards[s].data_off;
    int holders = ld->nw;
    if (ld->use_groups) {
        per = ld->group_cap;
        holders += 1; /* the group reader */
    } else {
        uint64_t longest = 0, bs = ds->block_size ? ds->block_size : 1;
        for (size_t s = 0; s < ds->nshards; s++) {
            const stk__shard *sh = &ds->shards[s];
            for (uint64_t i = 0; i < sh->nrec; i++) {
                uint64_t a, z;
                stk__record_span(ds, sh, stk__entry(ds, sh, i), &a, &z);
                longest = STK__MAX(longest, z - a);
            }
        }
        per = (uint64_t)o->batch_size * ((longest + bs - 1) / bs + 1) * bs;
    }
    uint64_t window = STK__MIN(per * (uint64_t)holders, data);
    if (window + ds->cache_fixed <= ds->cache_budget) {
        /* Read-ahead takes at most half of what the window leaves. */
        uint64_t room = (ds->cache_budget - ds->cache_fixed - window) / 2;
        if (ld->ahead_n)
            ld->ahead_n = STK__MIN(ld->ahead_n,
                                   room / STK__MAX(ld->use_groups ? ld->group_cap : per, 1));
        return 0;
    }
    return cache_window_error(ld, o, per, holders, window, window == data, err);
}

/* Open's steps after the options are checked, in order (each may use
 * what the ones before it decided); on failure the caller closes `ld`,
 * which frees whatever was made. */
static int set_up(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    int rc;
    if ((rc = stk__ld_pick_fields(ld, o, err)) || (rc = build_space(ld, o, err)) ||
        (rc = lay_out_slots(ld, o, err)) || (rc = stk__ld_choose_backend(ld, o, err)) ||
        (rc = open_files(ld, err)))
        return rc;
    if (o->verify && (rc = stk__ld_checks_init(ld, o, err))) return rc;
    bool reader = plan_threads(ld, o);
    uint64_t budget = stk__ld_budget(ld, o), groups_bytes = 0;
    if (o->order == STK_ORDER_BLOCK && ld->drawn && ld->backend != STK_BACKEND_MMAP) {
        /* Read from files, a drawn loader's groups would follow batches of
         * its own. */
        return stk__err(err, -EAGAIN,
                        "%s: block order over data read from files cannot be drawn from",
                        stk_dataset_path(ld->ds));
    } else if (o->order == STK_ORDER_BLOCK && ld->backend == STK_BACKEND_MMAP &&
               !ld->ds->ensure) {
        /* Through the mapping of local data, block order copies each
         * batch's samples from the mapping in its order, as the random
         * order does (for whole records, gathered and checked record by
         * record): group buffers would read nothing, and checking their
         * blocks whole was a second pass over the batch's memory.  (A
         * remote dataset's groups say which of its blocks to fetch.) */
        stk__ld_block_shape(ld, o);
    } else if (o->order == STK_ORDER_BLOCK &&
               (rc = stk__ld_size_groups(ld, o, budget, &groups_bytes, err))) {
        return rc;
    }
    /* The random order over several streams deals blocks to them. */
    if (o->order == STK_ORDER_RANDOM) ld->block_samples = stk__ld_block_samples(ld, o);
    if ((rc = stk__ld_choose_paths(ld, o, err))) return rc;
    uint64_t stage_cap = stk__ld_stage_bytes(ld, o), R = 0;
    /* (A loader drawn from has no ring: its batches are someone else's.) */
    if ((!ld->drawn && (rc = stk__ld_ring_size(ld, o, budget, groups_bytes, stage_cap, &R, err))) ||
        (size_ahead(ld, o), rc = check_cache_window(ld, o, err)) ||
        (!ld->drawn && (rc = alloc_ring(ld, R, err))) ||
        (rc = stk__ld_alloc_groups(ld, groups_bytes, err)))
        return rc;
    stk__ld_set_epoch_locked(ld, o->seed, o->epoch, 0);
    ld->fingerprint = stk__ld_fingerprint(ld);
    if (ld->warm_up && (rc = warm_up_start(ld, err))) return rc;
    for (int i = 0; i < ld->nw; i++)
        if ((rc = open_worker(ld, &ld->w[i], o, stage_cap, err))) return rc;
    return ld->drawn ? 0 : start_threads(ld, reader, err);
}

static int loader_open(stk_dataset *ds, const stk_loader_options *opts, bool plan_only,
                       bool drawn, stk_loader **out, stk_error *err) {
    stk_loader_options defaults;
    if (!opts) {
        stk_loader_options_init(&defaults);
        opts = &defaults;
    }
    if (!ds || !out) return stk__err(err, -EINVAL, "stk_loader_open: NULL argument");
    *out = NULL;
    int rc = stk__loader_check(ds, opts, err);
    if (rc) return rc;
    stk_loader_options unverified;
    if ((!ds->caps.checksums || plan_only) && opts->verify) {
        /* Users' own files carry no checksums to verify; a planned loader
         * reads nothing (its caller checks what it reads). */
        unverified = *opts;
        unverified.verify = 0;
        opts = &unverified;
    }
    stk_loader *ld = loader_new(ds, opts, plan_only);
    if (!ld) return stk__err(err, -ENOMEM, "out of memory");
    ld->drawn = drawn;
    if ((rc = set_up(ld, opts, err))) {
        stk__loader_close(ld);
        return rc;
    }
    *out = ld;
    return 0;
}

/* ---- a loader filled by someone else (pipeline.h) ---- */

static int hooked_set_up(stk_loader *ld, const stk_loader *like, const uint64_t *max_bytes,
                         stk__fill_fn fill, int workers, uint64_t budget, stk_error *err) {
    size_t nf = like->nf;
    uint64_t B = ld->opt.batch_size;
    ld->f = stk__calloc(nf, sizeof *ld->f);
    if (!ld->f) return stk__err(err, -ENOMEM, "out of memory");
    ld->nf = nf;
    for (size_t i = 0; i < nf; i++) {
        lfield *lf = &ld->f[i]; /* (its field is like's, named as like names it) */
        *lf = like->f[i];
        uint64_t per = lf->kind == F_RAGGED && max_bytes ? max_bytes[i] : lf->cap / like->opt.batch_size;
        lf->cap = B * per;
    }
    place_fields(ld);
    ld->space.L = like->space.L;
    ld->space.windows = like->space.windows;
    ld->backend = like->backend;
    ld->valid_dsf = -1;
    ld->nw = fill ? workers : 0;
    ld->spin = may_spin(ld->nw);
    ld->want_sources = true;
    stk__trace_init(&ld->trace, ld->nw + 1, -1);
    /* Buffers: as a loader's (twice the workers, at least 8, within the
     * budget), or 4 for one worker. */
    uint64_t R = ld->opt.prefetch;
    if (!R && ld->nw <= 1) R = 4;
    if (!R) R = STK__MIN((uint64_t)STK__MAX(8, 2 * ld->nw), budget / ld->slot_bytes);
    int rc = alloc_ring(ld, STK__MAX(R, (uint64_t)2), err);
    for (int i = 0; rc == 0 && i < ld->nw; i++) {
        ld->w[i].ld = ld;
        if ((rc = -pthread_create(&ld->w[i].tid, NULL, stk__ld_worker_main, &ld->w[i])))
            return stk__err(err, rc, "cannot start a worker thread: %s", stk_strerror(rc));
        ld->w[i].started = 1;
    }
    return rc;
}

int stk__loader_open_hooked(const stk_loader *like, const uint64_t *max_bytes,
                            const stk_loader_options *o,
                            stk__fill_fn fill, void *ctx, int workers, stk_loader **out,
                            stk_error *err) {
    if (fill && (workers < 1 || workers > MAX_WORKERS))
        return stk__err(err, -EINVAL, "a hooked loader takes 1 to %d workers", MAX_WORKERS);
    stk_loader_options ho;
    stk_loader_options_init(&ho);
    ho.batch_size = o->batch_size;
    ho.world_size = o->world_size;
    ho.rank = o->rank;
    ho.drop_last = o->drop_last;
    ho.split_index = o->split_index;
    ho.split_count = o->split_count;
    ho.prefetch = o->prefetch;
    ho.order = STK_ORDER_SEQUENTIAL;
    ho.verify = 0;
    ho.threads = 1;
    ho.streams = 1;
    *out = NULL;
    stk_loader *ld = loader_new(like->ds, &ho, false);
    if (!ld) return stk__err(err, -ENOMEM, "out of memory");
    ld->hook = fill;
    ld->hook_ctx = ctx;
    int rc = hooked_set_up(ld, like, max_bytes, fill, workers, stk__ld_budget(like, o), err);
    if (rc) {
        stk__loader_close(ld);
        return rc;
    }
    *out = ld;
    return 0;
}

int stk__loader_open(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                    stk_error *err) {
    return loader_open(ds, opts, false, false, out, err);
}

int stk__loader_open_planned(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                             stk_error *err) {
    return loader_open(ds, opts, true, false, out, err);
}

int stk__loader_workers(const stk_loader *ld) { return ld->nw; }

void stk__loader_set_spin(stk_loader *ld, int threads) {
    pthread_mutex_lock(&ld->mu);
    ld->spin = may_spin(threads);
    pthread_mutex_unlock(&ld->mu);
}

/* ---- a loader drawn from (pipeline.h) ---- */

bool stk__loader_drawable(const stk_dataset *ds, const stk_loader_options *o) {
    return !ds->ensure && o->on_error != STK_ON_ERROR_SKIP && o->device < 0 &&
           o->split_count <= 1;
}

int stk__loader_open_drawn(stk_dataset *ds, const stk_loader_options *opts, int workers,
                           stk_loader **out, stk_error *err) {
    *out = NULL;
    if (!ds || !opts) return stk__err(err, -EINVAL, "stk__loader_open_drawn: NULL argument");
    if (!stk__loader_drawable(ds, opts) || workers < 1 || workers > MAX_WORKERS)
        return stk__err(err, -EINVAL, "%s: this loader cannot be drawn from",
                        stk_dataset_path(ds));
    stk_loader_options o = *opts;
    o.threads = workers;
    return loader_open(ds, &o, false, true, out, err);
}

void stk__loader_adopt_layout(stk_loader *ld, const stk_loader *like, const size_t *fmap) {
    for (size_t i = 0; i < like->nf; i++) {
        lfield *lf = &ld->f[fmap[i]];
        lf->data_off = like->f[i].data_off;
        lf->offs_off = like->f[i].offs_off;
        lf->cap = like->f[i].cap;
    }
}

/* ---- counting without opening ---- */

int stk_loader_count(stk_dataset *ds, const stk_loader_options *opts, uint64_t *epoch_samples,
                     uint64_t *rank_samples, uint64_t *rank_batches, stk_error *err) {
    stk_loader_options defaults;
    if (!opts) {
        stk_loader_options_init(&defaults);
        opts = &defaults;
    }
    if (!ds) return stk__err(err, -EINVAL, "stk_loader_count: NULL argument");
    int rc = stk__loader_check(ds, opts, err);
    if (rc) return rc;
    /* Only what the sample space and the dealing need: no files, buffers
     * or threads. */
    stk_loader *ld = loader_alloc();
    if (!ld) return stk__err(err, -ENOMEM, "out of memory");
    ld->ds = ds;
    if (!(rc = stk__ld_pick_fields(ld, opts, err)) && !(rc = build_space(ld, opts, err))) {
        stk__deal d;
        stk__deal_init(&d, ld->space.n, 0, opts->world_size, opts->rank, opts->pad != 0);
        stk__deal_split(&d, opts->batch_size, opts->split_count, opts->split_index);
        if (epoch_samples) *epoch_samples = ld->space.n;
        if (rank_samples) *rank_samples = d.per_rank;
        if (rank_batches) *rank_batches = stk__ld_deal_batches(&d, opts);
    }
    stk__space_free(&ld->space);
    stk__free(ld->f);
    if (ld->own_fields)
        for (size_t i = 0; i < ld->nf; i++) stk__free((void *)ld->own_fields[i].name);
    stk__free(ld->own_fields);
    stk__free(ld->decs);
    stk__free(ld);
    return rc;
}

/* ---- stop, close ---- */

/* Joins the threads once (stk_loader_stop, then stk_loader_close). */
void stk__loader_join(stk_loader *ld) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    ld->gen++;
    stk__ld_wake(ld);
    pthread_mutex_unlock(&ld->mu);
    stk__warm_cancel(ld->warm);
    for (int i = 0; i < ld->nw; i++)
        if (ld->w[i].started) {
            pthread_join(ld->w[i].tid, NULL);
            ld->w[i].started = false;
        }
    if (ld->reader.started) {
        pthread_join(ld->reader.tid, NULL);
        ld->reader.started = false;
    }
}

void stk__loader_stop(stk_loader *ld) {
    if (!ld) return;
    stk__loader_join(ld);
    /* Every buffer the caller does not hold: its pages go back (the
     * mapping itself stays until close, which frees it). */
    size_t stride = (size_t)stk__align_up(ld->slot_bytes, 4096);
    for (uint32_t i = 0; ld->slots && ld->slot_mem && i < ld->R; i++) {
        stk_batch *b = &ld->slots[i];
        if (b->state == S_HELD || b->mem != ld->slot_mem + (size_t)i * stride) continue;
        madvise(b->mem, stride, MADV_DONTNEED);
        b->state = S_FREE;
    }
    /* And what the threads worked with. */
    stk__free(ld->group_mem);
    ld->group_mem = NULL;
}

void stk__loader_close(stk_loader *ld) {
    if (!ld) return;
    /* Workers waiting for the warm-up are let go when it stops; it is freed
     * once they are gone, and before what its callback uses is. */
    stk__loader_join(ld);
    stk__io_close(ld->reader.io);
    stk__free(ld->reader.reqs);
    stk__warm_stop(ld->warm);
    for (int i = 0; i < ld->nw; i++) {
        worker *w = &ld->w[i];
        stk__io_close(w->io);
        stk__free(w->reqs);
        stk__free(w->posts);
        stk__free(w->stage);
        stk__free(w->chunk);
        stk__free(w->ids);
        stk__free((void *)w->ents);
        stk__free(w->shs);
        stk__free(w->slots);
        stk__free(w->blockbuf);
        stk__free(w->draw_rows);
        ZSTD_freeDCtx(w->dctx);
        stk__media_ctx_free(&w->media);
    }
    for (int i = 0; i < ld->ngroups; i++) {
        if (!ld->groups[i]) continue;
        stk__free(ld->groups[i]->spans);
        stk__free(ld->groups[i]);
    }
    stk__free(ld->group_mem);
    if (ld->slots)
        for (uint32_t i = 0; i < ld->R; i++) {
            stk__free(ld->slots[i].samples);
            stk__free(ld->slots[i].ragged_rows);
            stk__free(ld->slots[i].own_mem);
            stk__free(ld->slots[i].plan);
            stk__free(ld->slots[i].sources);
        }
    stk__free(ld->slots);
    stk__free(ld->slot_mem);
    stk__files_close(&ld->files);
    stk__space_free(&ld->space);
    stk__free((void *)ld->verified);
    stk__free((void *)ld->bad);
    stk__free((void *)ld->media_bad);
    stk__free(ld->verified_off);
    stk__free(ld->f);
    if (ld->own_fields)
        for (size_t i = 0; i < ld->nf; i++) stk__free((void *)ld->own_fields[i].name);
    stk__free(ld->own_fields);
    stk__free(ld->decs);
    stk__free(ld->lf_of);
    stk__trace_free(&ld->trace);
    stk__free(ld->series);
    stk__free(ld->warm_ranges);
    pthread_mutex_destroy(&ld->mu);
    pthread_mutex_destroy(&ld->chk_mu);
    pthread_cond_destroy(&ld->cv);
    pthread_cond_destroy(&ld->cv_ready);
    stk__free(ld);
}
