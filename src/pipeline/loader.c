/*
 * loader.c: the pipeline.  Worker threads turn this rank's batches, in any
 * order among themselves, into filled buffers of a ring; the consumer takes
 * them in batch order.
 *
 *   order -> plan (per batch) -> reads (io_uring | pread | mmap) -> ring -> next()
 *
 * A worker claims the lowest batch number not yet claimed, when a ring slot
 * is free and the batch is at most `ring size` ahead of the consumer.  It
 * computes the batch's samples (positions dealt to this rank, their sample
 * ids in the epoch's order, their records and rows), plans one read per
 * sample and field straight into the sample's place in the slot (merging
 * reads that are contiguous both in the file and in the slot), and executes
 * them through its own I/O engine.  With O_DIRECT, reads are widened to 4 KiB
 * boundaries and land in a staging area first; compressed fields are read
 * to staging and decompressed into place.  Because a batch's contents depend
 * only on its number, the stream is the same whatever the thread count or
 * backend.
 *
 * Block order reads differently: the K blocks of a group are read whole, in
 * large sequential reads, into a group buffer, and the group's batches are
 * cut from memory.  Group buffers are shared by the workers and counted by
 * users; one is evicted only when no batch still to be filled needs it.  A
 * worker that finishes a batch loads the next group ahead of need.
 *
 * Epoch changes and restores bump a generation number: work of an older
 * generation is discarded when it completes, and batches the consumer still
 * holds stay valid until released.
 */
#define _GNU_SOURCE
#include "../format/format.h"
#include "../core/hash.h"
#include "../io/io.h"
#include "../sample/sample.h"
#include "../trace/trace.h"
#include "../cuda/cuda.h"
#include "pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define MAX_WORKERS 8
#define MAX_GROUP_SLOTS (MAX_WORKERS + 2)
#define MAX_EXTRA_SLOTS 1024
#define DIRECT_ALIGN 4096u
#define SPAN_CHUNK (4u << 20) /* group reads are cut into pieces this big */
/* Random copies prefetch their sources this many samples (or copies)
 * ahead, the first PREFETCH_LINES cache lines of each; see gather_records. */
#define AHEAD 8
#define AHEAD_E 16 /* index entries: twice as far, the record's address needs them */
#define PREFETCH_LINES 16 /* 1 KiB; the hardware follows the rest of a longer record */

enum { F_TIME, F_DENSE, F_RAGGED };
enum { S_FREE, S_FILLING, S_READY, S_HELD };
enum { G_EMPTY, G_LOADING, G_READY, G_FAILED };
enum { POST_NONE, POST_COPY, POST_ZSTD, POST_CONV, POST_CHUNK };

typedef struct lfield {
    size_t dsf;
    const stk_field *f;
    const stk__fieldinfo *fi;
    int kind;
    uint64_t sample_bytes; /* F_TIME / F_DENSE: output bytes per sample */
    uint64_t cap;          /* bytes reserved in a slot */
    uint64_t data_off;     /* in slot memory */
    uint64_t offs_off;     /* F_RAGGED: offsets array in slot memory */
    uint64_t max_stored;   /* compressed: largest stored size */
} lfield;

struct stk_batch {
    stk_loader *ld;
    int state;
    uint64_t b;
    uint64_t gen;
    uint32_t n;
    uint8_t *mem;
    uint64_t *samples;
    uint64_t *ragged_rows; /* per loader field */
    uint8_t *own_mem;      /* buffers added after open own their memory */
    stk__plan *plan;       /* planned loader: the batch's pieces */
    size_t nplan;
    int err;
    stk_error e;
};

typedef struct span {
    uint32_t shard;
    uint64_t lo, hi; /* bytes [lo, hi) of the shard that the block needs */
    uint64_t base;   /* file offset that buf + buf_off holds (lo, or lo
                      * rounded down for O_DIRECT) */
    uint64_t buf_off;
    uint64_t end;    /* bytes are read up to here: hi, or the end of hi's
                      * checksum block when blocks are checked on load */
    uint64_t rec;    /* its first record, for messages */
} span;

typedef struct group {
    int state;
    uint64_t g, gen;
    int users;
    uint64_t last_batch; /* the last batch (of this rank) that needs it */
    uint8_t *buf;
    span *spans;
    size_t nspans, spans_cap;
    uint64_t block_first[1]; /* flexible: K + 1 span indexes, allocated */
} group;

typedef struct post {
    int kind;
    const uint8_t *src; /* in staging (or the mapping) */
    uint8_t *dst;
    uint64_t len;     /* bytes to copy, or stored bytes for zstd */
    uint64_t raw;     /* zstd: decoded size */
    uint64_t rec;
    size_t field;
    const uint8_t **srcp; /* where src will be known after the read */
    uint64_t skip;    /* POST_CHUNK: bytes of the record before the sample's */
    int conv;         /* POST_CONV: the conversion (the shard's) */
} post;

typedef struct worker {
    stk_loader *ld;
    pthread_t tid;
    int started;
    stk__io *io;
    stk__ioreq *reqs;
    size_t reqs_cap;
    post *posts;
    size_t posts_cap;
    uint8_t *stage;
    uint64_t stage_cap;
    ZSTD_DCtx *dctx;
    /* Filtered chunks: the last one decoded, kept for the next record of
     * the same chunk (sequential and block orders read them in turn).
     * `chunk` holds two scratch areas of chunk_cap bytes; chunk_data points
     * at the decoded bytes in one of them. */
    uint8_t *chunk;
    const uint8_t *chunk_data;
    uint64_t chunk_cap;
    size_t chunk_shard;
    uint64_t chunk_off;
    bool chunk_valid;
    uint64_t *ids; /* 3 * batch_size: records, rows and groups of a batch */
    const uint64_t **ents; /* batch_size: the records' index entries (gather) */
    uint32_t *shs;         /* batch_size: their shards */
    uint32_t *slots;       /* batch_size: block order, each sample's block
                            * within its group */
    uint8_t *blockbuf; /* one checksum block, for verifying through reads */
    /* The epoch's order and dealing as of the work in hand, copied under
     * mu: the consumer may move the loader's own to another epoch (set_epoch,
     * restore) while this worker computes or reads without the lock. */
    stk__order order;
    stk__deal deal;
} worker;

struct stk_loader {
    stk_dataset *ds;
    stk_loader_options opt;
    lfield *f;
    size_t nf;
    stk__space space;
    uint64_t fingerprint;
    int valid_dsf; /* the validity rule's field (dataset index), or -1 */
    uint64_t block_samples;
    uint64_t max_group_bytes;

    /* Epoch state: changes only under mu, with gen. */
    stk__order order;
    stk__deal deal;
    uint64_t seed, epoch;
    uint64_t nbatches;
    uint64_t gen;

    stk_batch *slots;
    uint32_t R;
    uint64_t slot_bytes;
    uint8_t *slot_mem;
    uint32_t slots_cap; /* room for buffers added while the consumer holds many */
    uint64_t next_fill, next_take;

    bool use_groups;
    /* Whole records of every field, stored plain, checks raising: each
     * record is checked against its own checksum right after it lands in
     * the slot, while its bytes are still in the cache, instead of hashing
     * the shard's blocks beforehand (a second pass over memory). */
    bool rec_check;
    size_t *lf_of; /* rec_check: the loader field of each dataset field */
    /* Whole records of plain fields through the mapping: gathered with
     * prefetching (gather_records), not planned as reads. */
    bool gather;
    bool plan_only; /* batches carry plans, not data (pipeline.h) */
    group *groups[MAX_GROUP_SLOTS];
    int ngroups;
    uint8_t *group_mem;
    uint64_t group_cap;

    worker w[MAX_WORKERS];
    worker reader;   /* block order with real reads: reads groups ahead */
    bool has_reader;
    int nw;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    int failed;
    stk_error ferr;

    stk__files files;
    stk_backend backend;
    /* The warm-up (io/warm.c): its thread, and the bytes it set out for. */
    bool warm_up;
    bool fits; /* the shard data fits in the page cache (in memory already,
                * or room for the rest) */
    bool auto_direct; /* O_DIRECT chosen by the loader (block order, data
                       * that does not fit), not asked for */
    stk__warm *warm;
    uint64_t warm_total;
    /* Checks of blocks as the warm-up brings them in (check_arrived_block):
     * its ranges, where the checks got to (under chk_mu), and the
     * generation they count for (a copy of gen read without mu). */
    stk__range *warm_ranges;
    size_t nwarm_ranges, chk_range;
    uint64_t chk_block;
    pthread_mutex_t chk_mu;
    _Atomic uint64_t warm_gen;

    /* Statistics. */
    /* Read-time verification: one bit per checksum block of every shard,
     * set once the block has been checked in the current epoch. */
    _Atomic uint64_t *verified;
    uint64_t *verified_off; /* first word of each shard's bitmap */
    uint64_t verified_words;
    /* Whether any bit may be set this epoch: while none is, a record's
     * check need not look its blocks up (two divisions a record). */
    atomic_bool any_verified;
    _Atomic uint64_t st_ver_n, st_ver_bytes, st_ver_ns;
    /* on_error = skip: blocks found damaged, samples replaced, the last
     * replacement's reason (under mu). */
    _Atomic uint64_t *bad;
    _Atomic uint64_t st_skipped;
    stk_error last_skip;
    stk__trace trace; /* spans per thread, when asked for (stats/trace.c) */
    bool nvtx;        /* NVTX ranges for the stages (under Nsight; cuda/cuda.h) */
    _Atomic uint64_t st_plan_n, st_plan_ns, st_io_n, st_io_bytes, st_io_ns, st_asm_n,
        st_asm_bytes, st_asm_ns, st_wait_n, st_wait_ns, st_batches, st_samples, st_ready_sum,
        st_groups, st_inflight;
    uint64_t st_t0;
};

/* ------------------------------------------------------------------------ */

void stk_loader_options_init(stk_loader_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_size = 32;
    o->stride = 1;
    o->valid = STK_VALID_ALL;
    o->order = STK_ORDER_BLOCK;
    o->block_bytes = 4u << 20;
    o->block_group = 16;
    o->world_size = 1;
    o->split_count = 1;
    o->backend = STK_BACKEND_AUTO;
    o->queue_depth = 64;
    o->memory_budget = 1ull << 30;
    o->verify = 1;
    o->on_error = STK_ON_ERROR_RAISE;
    o->max_skips = 100;
}

const char *stk_backend_name(stk_backend b) {
    switch (b) {
    case STK_BACKEND_AUTO: return "auto";
    case STK_BACKEND_URING: return "io_uring";
    case STK_BACKEND_POOL: return "pool";
    case STK_BACKEND_MMAP: return "mmap";
    }
    return "unknown";
}

static inline uint64_t now_ns(void) { return stk__now_ns(); }

/* Spans.  span_open marks a stage's start: it returns the time and, under
 * an NVTX tool, opens a range of the same name.  span_add records the
 * finished span when tracing is on (stats/trace.c) and closes its range.
 * Every span_add of an opened kind follows its span_open; a stage that
 * returns early on an error leaves its range open, and the batch's end
 * closes every range its thread opened since (worker_main). */
static const char *const nvtx_names[STK__EV_KINDS] = {
    "stoker batch", "stoker plan", "stoker verify", "stoker read", "stoker assemble",
    "stoker group load", "", "stoker next", ""};

static inline uint64_t span_open(const stk_loader *ld, stk__ev_kind kind) {
    if (STK__UNLIKELY(ld->nvtx)) stk__nvtx_push(nvtx_names[kind]);
    return now_ns();
}

static inline void span_add(stk_loader *ld, const struct worker *w, stk__ev_kind kind,
                            uint64_t t0, uint64_t t1, uint64_t a0, uint64_t a1) {
    if (STK__UNLIKELY(stk__tracing(&ld->trace)))
        stk__trace_add(&ld->trace,
                       !w ? ld->trace.nbufs - 1 : w == &ld->reader ? ld->nw : (int)(w - ld->w),
                       kind, t0, t1, a0, a1, NULL);
    if (STK__UNLIKELY(ld->nvtx) && nvtx_names[kind][0] && kind != STK__EV_BATCH)
        stk__nvtx_pop();
}

/* ---- batches and samples ---- */

static uint32_t batch_len(const stk_loader *ld, uint64_t b) {
    uint64_t first = b * ld->opt.batch_size;
    return (uint32_t)STK__MIN((uint64_t)ld->opt.batch_size, ld->deal.per_rank - first);
}

/* Batches of a dealing: its samples in batches, a last partial one kept
 * unless drop_last. */
static uint64_t deal_batches(const stk__deal *d, const stk_loader_options *o) {
    uint64_t B = o->batch_size;
    return o->drop_last ? d->per_rank / B : (d->per_rank + B - 1) / B;
}

static void set_epoch_locked(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start) {
    ld->seed = seed;
    ld->epoch = epoch;
    stk__order_init(&ld->order, ld->opt.order, ld->space.n, seed, epoch, ld->block_samples,
                    ld->opt.block_group);
    stk__deal_init(&ld->deal, ld->space.n, start, ld->opt.world_size, ld->opt.rank,
                   ld->opt.pad != 0);
    stk__deal_split(&ld->deal, ld->opt.batch_size, ld->opt.split_count, ld->opt.split_index);
    ld->nbatches = deal_batches(&ld->deal, &ld->opt);
    ld->gen++;
    atomic_store_explicit(&ld->warm_gen, ld->gen, memory_order_release);
    ld->next_fill = ld->next_take = 0;
}

/* Bytes [lo, hi) of the shard that sample (rec, t) needs across the
 * loader's fields. */
static void sample_span(const stk_loader *ld, uint64_t rec, uint64_t t0, uint64_t t1,
                        size_t *shard, uint64_t *lo, uint64_t *hi) {
    const stk_dataset *ds = ld->ds;
    size_t s = stk__dataset_shard_of(ds, rec);
    const stk__shard *sh = &ds->shards[s];
    const uint64_t *e = stk__entry(ds, sh, rec - sh->first);
    uint64_t a = UINT64_MAX, z = 0;
    for (size_t i = 0; i < ld->nf; i++) {
        const lfield *lf = &ld->f[i];
        uint64_t off = e[1 + 3 * lf->dsf], len = e[2 + 3 * lf->dsf];
        if (lf->kind == F_TIME && !lf->fi->chunks) {
            uint64_t rb = stk__shard_srb(lf->fi, sh);
            a = STK__MIN(a, off + t0 * rb);
            z = STK__MAX(z, off + STK__MIN(t1 * rb, len));
        } else {
            a = STK__MIN(a, off);
            z = STK__MAX(z, off + len);
        }
    }
    *shard = s;
    *lo = a;
    *hi = z;
}

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
static int block_spans(const stk_loader *ld, uint64_t blk, group *g) {
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
        sample_span(ld, ra, a, ra == rb ? z : time_rows(ld, ra), &s_a, &lo, &hi);
        sample_span(ld, rb, rb == ra ? a : 0, z, &s_b, &lo_b, &hi_b);
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

/* ---- groups (block order) ---- */

static uint64_t group_last_batch(const stk_loader *ld, uint64_t g) {
    uint64_t start, size;
    stk__order_group_range(&ld->order, g, &start, &size);
    const stk__deal *d = &ld->deal;
    uint64_t end = start + size; /* exclusive, global positions */
    if (end <= d->start + d->rank) return 0;
    uint64_t i = (end - 1 - d->start - d->rank) / d->world; /* last rank-level index */
    if (i >= d->rank_count) i = d->rank_count ? d->rank_count - 1 : 0;
    return stk__deal_batch_upto(d, i);
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

/* ---- read-time checksums ---- */

static bool block_checked(const stk_loader *ld, size_t si, uint64_t b) {
    _Atomic uint64_t *word = &ld->verified[ld->verified_off[si] + b / 64];
    return atomic_load_explicit(word, memory_order_relaxed) & (UINT64_C(1) << (b % 64));
}

/* Whether every checksum block under shard bytes [x, z) was checked this
 * epoch (by the warm-up as they arrived, say). */
static bool blocks_checked(const stk_loader *ld, size_t si, uint64_t x, uint64_t z) {
    const stk__shard *sh = &ld->ds->shards[si];
    if (!ld->verified || z <= x || !sh->block_size ||
        !atomic_load_explicit(&ld->any_verified, memory_order_relaxed))
        return false;
    uint64_t b0 = (x - sh->data_off) / sh->block_size, b1 = (z - 1 - sh->data_off) / sh->block_size;
    for (uint64_t b = b0; b <= b1; b++)
        if (!block_checked(ld, si, b)) return false;
    return true;
}

static bool block_bad(const stk_loader *ld, size_t si, uint64_t b) {
    if (!ld->bad) return false;
    _Atomic uint64_t *word = &ld->bad[ld->verified_off[si] + b / 64];
    return atomic_load_explicit(word, memory_order_relaxed) & (UINT64_C(1) << (b % 64));
}

static void mark_bad(stk_loader *ld, size_t si, uint64_t b) {
    if (ld->bad)
        atomic_fetch_or(&ld->bad[ld->verified_off[si] + b / 64], UINT64_C(1) << (b % 64));
}

/* Hashes block b of shard si, whose bytes are at `bytes`, and records it as
 * checked for this epoch; a mismatch names the damaged record. */
static int check_block(stk_loader *ld, size_t si, uint64_t b, const uint8_t *bytes, uint64_t rec,
                       stk_error *err) {
    const stk__shard *sh = &ld->ds->shards[si];
    uint64_t t0 = now_ns();
    uint64_t a = sh->data_off + b * sh->block_size;
    uint64_t n = STK__MIN((uint64_t)sh->block_size, sh->data_end - a);
    if (stk__hash(bytes, (size_t)n) != sh->blocks[b]) {
        /* Name the damaged record: the first one around this block whose
         * own checksum fails (the file is intact in length here). */
        uint64_t bad = UINT64_MAX;
        for (uint64_t r = stk__dataset_record_at(ld->ds, sh, a) - sh->first; r < sh->nrec; r++) {
            const uint64_t *e = stk__entry(ld->ds, sh, r);
            uint64_t x, z;
            stk__record_span(ld->ds, e, &x, &z);
            if (x >= a + n) break;
            if (stk__hash(sh->map + x, (size_t)(z - x)) != e[0]) {
                bad = sh->first + r;
                break;
            }
        }
        if (bad == UINT64_MAX)
            return stk__err(err, STK_ECHECKSUM,
                            "%s: checksum mismatch in block %llu (bytes %llu..%llu), read for "
                            "record %llu; the damage is outside every record's bytes",
                            sh->path, (unsigned long long)b, (unsigned long long)a,
                            (unsigned long long)(a + n), (unsigned long long)rec);
        return stk__err(err, STK_ECHECKSUM,
                        "%s: record %llu: checksum mismatch (block %llu, bytes %llu..%llu): "
                        "the shard is damaged; `stoker verify` lists every damaged record",
                        sh->path, (unsigned long long)bad, (unsigned long long)b,
                        (unsigned long long)a, (unsigned long long)(a + n));
    }
    _Atomic uint64_t *word = &ld->verified[ld->verified_off[si] + b / 64];
    uint64_t bit = UINT64_C(1) << (b % 64);
    atomic_store_explicit(&ld->any_verified, true, memory_order_relaxed);
    /* Two workers may check one block at once; count it once. */
    if (!(atomic_fetch_or_explicit(word, bit, memory_order_relaxed) & bit)) {
        ld->st_ver_n++;
        ld->st_ver_bytes += n;
    }
    ld->st_ver_ns += now_ns() - t0;
    return 0;
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
    size_t k = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < gr->nspans; i++) {
        const span *sp = &gr->spans[i];
        uint64_t end = ld->files.direct ? stk__align_up(sp->end, DIRECT_ALIGN) : sp->end;
        uint64_t rec = sp->rec;
        for (uint64_t off = sp->base; off < end; off += SPAN_CHUNK) {
            uint64_t len = STK__MIN((uint64_t)SPAN_CHUNK, end - off);
            uint64_t need = off + len <= sp->end ? len : sp->end > off ? sp->end - off : 0;
            w->reqs[k++] = (stk__ioreq){sp->shard, off, len, need,
                                        gr->buf + sp->buf_off + (off - sp->base), rec, -1};
        }
        bytes += end - sp->base;
    }
    uint64_t t = span_open(ld, STK__EV_READ);
    int rc = stk__io_exec(w->io, w->reqs, k, err);
    uint64_t t_ver = now_ns();
    ld->st_io_ns += t_ver - t;
    ld->st_io_n += k;
    ld->st_io_bytes += bytes;
    span_add(ld, w, STK__EV_READ, t, t_ver, k, bytes);
    if (ld->opt.verify) t_ver = span_open(ld, STK__EV_VERIFY);
    /* Spans were widened to whole checksum blocks: check them from memory,
     * so batches cut from this group need no further reads to verify. */
    for (size_t i = 0; rc == 0 && ld->opt.verify && i < gr->nspans; i++) {
        const span *sp = &gr->spans[i];
        const stk__shard *sh = &ds->shards[sp->shard];
        uint64_t bs = sh->block_size;
        for (uint64_t a = sp->base; rc == 0 && a < sp->end; a += bs) {
            uint64_t b = (a - sh->data_off) / bs;
            if (!block_checked(ld, sp->shard, b) && !block_bad(ld, sp->shard, b)) {
                rc = check_block(ld, sp->shard, b, gr->buf + sp->buf_off + (a - sp->base),
                                 sp->rec, err);
                /* Under on_error = skip the samples that use it are replaced. */
                if (rc == STK_ECHECKSUM && ld->bad) {
                    mark_bad(ld, sp->shard, b);
                    rc = 0;
                }
            }
        }
    }
    if (ld->opt.verify) span_add(ld, w, STK__EV_VERIFY, t_ver, now_ns(), STK__EV_NONE, STK__EV_NONE);
    return rc;
}

/* Lays out group g's spans in `gr` and reads them. */
static int group_load(stk_loader *ld, worker *w, group *gr, uint64_t g, stk_error *err) {
    gr->nspans = 0;
    uint64_t nblk = stk__order_group_blocks(&w->order, g);
    for (uint64_t m = 0; m < nblk; m++) {
        gr->block_first[m] = gr->nspans;
        if (block_spans(ld, stk__order_group_block(&w->order, g, m), gr))
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
    return group_read(ld, w, gr, err);
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
            if (t_wait) span_add(ld, w, STK__EV_GROUP_WAIT, t_wait, now_ns(), g, STK__EV_NONE);
            return found;
        }
        if (found && found->state == G_LOADING) {
            if (!t_wait) t_wait = now_ns();
            pthread_cond_wait(&ld->cv, &ld->mu);
            continue;
        }
        if (found) { /* failed earlier: try again, in the same buffer */
            found->state = G_EMPTY;
            victim = found;
        }
        /* A group loaded ahead for later batches may give way to one needed
         * now; it will be read again when its turn comes. */
        if (!victim) victim = spare;
        if (!victim) {
            /* Every buffer holds a group that a batch not yet filled needs
             * (a batch may span more groups than there are buffers).  While
             * a worker uses or loads one, its release will wake us; when
             * none does, no buffer would ever free up: take the unused
             * group with the lowest number, which is read again if needed. */
            bool busy = false;
            for (int i = 0; i < ld->ngroups; i++) {
                group *gr = ld->groups[i];
                if (gr->users || gr->state == G_LOADING) busy = true;
                else if (!victim || gr->g < victim->g) victim = gr;
            }
            if (busy || !victim) {
                pthread_cond_wait(&ld->cv, &ld->mu);
                continue;
            }
        }
        victim->state = G_LOADING;
        victim->g = g;
        victim->gen = gen;
        victim->users = 1;
        victim->last_batch = group_last_batch(ld, g);
        pthread_mutex_unlock(&ld->mu);
        uint64_t t_load = span_open(ld, STK__EV_GROUP_LOAD);
        int r = group_load(ld, w, victim, g, err);
        span_add(ld, w, STK__EV_GROUP_LOAD, t_load, now_ns(), g, STK__EV_NONE);
        pthread_mutex_lock(&ld->mu);
        ld->st_groups++;
        victim->state = r ? G_FAILED : G_READY;
        pthread_cond_broadcast(&ld->cv);
        if (r) {
            victim->users = 0;
            *rc = r;
            return NULL;
        }
        return victim;
    }
}

static void group_release(stk_loader *ld, group *gr) {
    gr->users--;
    pthread_cond_broadcast(&ld->cv);
}

/* Loads the first group missing among the `ahead` groups after the one the
 * next batch starts in (that one too, with `first`), if a buffer is free,
 * so that batches never wait for it; returns whether it loaded one.  A
 * buffer is kept for the group the batches in flight may still need: only
 * the group needed next may take the last free one.  Called with mu held
 * (released while reading). */
static bool group_prefetch(stk_loader *ld, worker *w, uint64_t ahead, bool first) {
    if (!ld->use_groups || ld->next_fill >= ld->nbatches) return false;
    uint64_t gen = ld->gen;
    uint64_t p = stk__deal_at(&ld->deal, ld->next_fill * ld->opt.batch_size);
    uint64_t g0 = stk__order_group_of(&ld->order, p);
    for (uint64_t g = first ? g0 : g0 + 1; g <= g0 + ahead && g < ld->order.ngroups; g++) {
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
        if (!victim || free_slots < (g == g0 ? 1 : 2)) return false;
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
 * cut batches: 0.4 of the device's sequential rate beyond memory). */
static void *reader_main(void *arg) {
    worker *w = arg;
    stk_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop)
        if (!group_prefetch(ld, w, (uint64_t)ld->ngroups, true)) pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* ---- filling one batch ---- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
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
    uint64_t off = stk__entry(ds, sh, local)[1];
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

static inline void prefetch_bytes(const uint8_t *p, uint64_t n) {
    n = STK__MIN(n, (uint64_t)PREFETCH_LINES * 64);
    for (uint64_t k = 0; k < n; k += 64) {
        __builtin_prefetch(p + k);
        /* GCC 12 deletes a loop of prefetches whose bound comes from memory
         * as if it did nothing; an empty asm that uses k keeps it. */
        __asm__ __volatile__("" : : "r"(k));
    }
}

/* Runs the copies, decodes and conversions planned for a batch, their
 * sources prefetched AHEAD posts before they are needed (copies out of a
 * group buffer or the mapping land in random order). */
static int do_posts(stk_loader *ld, worker *w, size_t np, stk_error *err) {
    for (size_t i = 0; i < STK__MIN(np, (size_t)AHEAD); i++)
        if (w->posts[i].src) prefetch_bytes(w->posts[i].src, w->posts[i].len);
    for (size_t i = 0; i < np; i++) {
        post *p = &w->posts[i];
        if (i + AHEAD < np && p[AHEAD].src) prefetch_bytes(p[AHEAD].src, p[AHEAD].len);
        if (p->kind == POST_COPY) {
            memcpy(p->dst, p->src, (size_t)p->len);
        } else if (p->kind == POST_CHUNK) {
            int rc = post_chunk(ld, w, p, err);
            if (rc) return rc;
        } else if (p->kind == POST_CONV) {
            const stk__fieldinfo *fi = &ld->ds->info[p->field];
            stk__conv_run(p->conv, p->dst, p->src, p->raw / fi->itemsize);
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

/* Where field lf of sample j (index entry e, first row t) comes from and
 * where it goes: its stored bytes are *len bytes at file offset *off, they
 * decode to *raw bytes at the returned place in the slot.  A ragged field
 * appends after *rows_done rows and records the sample's offset. */
static STK__ALWAYS_INLINE uint8_t *place(const stk_loader *ld, const lfield *lf, stk_batch *s, uint32_t j,
                      const stk__shard *sh, const uint64_t *e, uint64_t t, uint64_t *rows_done,
                      uint64_t *off, uint64_t *len, uint64_t *raw) {
    *off = e[1 + 3 * lf->dsf];
    *len = e[2 + 3 * lf->dsf];
    uint64_t rows = e[3 + 3 * lf->dsf];
    if (lf->kind == F_TIME && lf->fi->chunks) {
        /* The whole chunk is read; the window is cut after inflating. */
        *raw = ld->space.L * lf->fi->row_bytes;
        return s->mem + lf->data_off + j * lf->sample_bytes;
    }
    if (lf->kind == F_TIME) {
        uint64_t srb = stk__shard_srb(lf->fi, sh);
        *off += t * srb;
        *len = ld->space.L * srb;
        *raw = ld->space.L * lf->fi->row_bytes;
        return s->mem + lf->data_off + j * lf->sample_bytes;
    }
    if (lf->kind == F_DENSE) {
        *raw = lf->sample_bytes;
        return s->mem + lf->data_off + j * lf->sample_bytes;
    }
    int64_t *offs = (int64_t *)(s->mem + lf->offs_off);
    uint8_t *dst = s->mem + lf->data_off + *rows_done * lf->fi->row_bytes;
    *raw = rows * lf->fi->row_bytes;
    offs[j] = (int64_t)*rows_done;
    *rows_done += rows;
    return dst;
}

/* Whole records of plain fields out of the mapping (the mmap backend).  A
 * sample drawn at random is a cache miss twice over, and on a machine with
 * nested paging an expensive TLB miss too: first its entry in the index,
 * then its bytes.  So the entries are located and prefetched AHEAD_E
 * samples before their record is needed and the records' first bytes AHEAD
 * samples before (the hardware prefetcher follows the rest of a long one),
 * which keeps a dozen misses in flight instead of one.
 *
 * With `check`, the records are taken in runs of about RUN bytes: a run is
 * hashed straight from the mapping, each record against its own checksum,
 * then copied while its bytes are still in the cache, so memory is read
 * once; the two passes are timed apart for the statistics. */
#define RUN (64u << 10) /* hashed, then copied while still in L2 */
#define HASH_SAMPLE 16

static inline void prefetch_record(const stk_dataset *ds, const stk__shard *sh, const uint64_t *e) {
    uint64_t x, z;
    stk__record_span(ds, e, &x, &z);
    prefetch_bytes(sh->map + x, z - x);
}

/* What one gather keeps: the batch's records located, and its counts. */
typedef struct gather {
    const uint64_t *const *ent;
    const uint32_t *shs;
    const uint64_t *recs;
    uint32_t n;
    uint64_t io_bytes, hashed, nhashed;
} gather;

static int gather_mismatch(const stk__shard *sh, uint64_t rec, stk_error *err) {
    return stk__err(err, STK_ECHECKSUM,
                    "%s: record %llu: checksum mismatch (its bytes do not match the record's "
                    "checksum): the shard is damaged; `stoker verify` lists every damaged record",
                    sh->path, (unsigned long long)rec);
}

static STK__ALWAYS_INLINE void gather_ahead(const stk_dataset *ds, const gather *g, uint32_t j) {
    if (j + AHEAD_E < g->n) __builtin_prefetch(g->ent[j + AHEAD_E]);
    if (j + AHEAD < g->n) prefetch_record(ds, &ds->shards[g->shs[j + AHEAD]], g->ent[j + AHEAD]);
}

/* Hashes record j (the copy at `bytes`, or else its bytes in the mapping)
 * unless the blocks under it were checked this epoch, and compares it with
 * its checksum.  With `ns`, one
 * hash in HASH_SAMPLE is timed: its time added to *ns, counted in *timed. */
static STK__ALWAYS_INLINE int gather_check(stk_loader *ld, gather *g, uint32_t j,
                                           const uint8_t *bytes, uint64_t *ns, uint64_t *timed,
                                           stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const stk__shard *sh = &ds->shards[g->shs[j]];
    uint64_t x, z;
    stk__record_span(ds, g->ent[j], &x, &z);
    if (blocks_checked(ld, g->shs[j], x, z)) return 0;
    bool sample = ns && g->nhashed % HASH_SAMPLE == 0;
    uint64_t t = sample ? now_ns() : 0;
    uint64_t h = stk__hash(bytes ? bytes : sh->map + x, (size_t)(z - x));
    if (sample) {
        *ns += now_ns() - t;
        (*timed)++;
    }
    if (h != g->ent[j][0]) return gather_mismatch(sh, g->recs[j], err);
    g->hashed += z - x;
    g->nhashed++;
    return 0;
}

/* Copies record j's fields into the batch; returns where the record went
 * when the batch holds it whole as one piece (a dataset of one field, a
 * plain one on this path), else NULL. */
static STK__ALWAYS_INLINE const uint8_t *gather_copy(stk_loader *ld, stk_batch *s, gather *g,
                                                     uint32_t j) {
    const stk__shard *sh = &ld->ds->shards[g->shs[j]];
    const uint8_t *whole = NULL;
    for (size_t fi = 0; fi < ld->nf; fi++) {
        uint64_t off, len, raw;
        uint8_t *dst = place(ld, &ld->f[fi], s, j, sh, g->ent[j], 0, &s->ragged_rows[fi], &off, &len,
                             &raw);
        memcpy(dst, sh->map + off, (size_t)len);
        g->io_bytes += len;
        whole = dst;
    }
    return ld->nf == 1 && ld->ds->nfields == 1 ? whole : NULL;
}

static int gather_records(stk_loader *ld, worker *w, stk_batch *s, const uint64_t *recs,
                          bool check, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const uint32_t n = s->n;
    for (size_t fi = 0; fi < ld->nf; fi++) s->ragged_rows[fi] = 0;
    uint64_t t_plan = span_open(ld, STK__EV_PLAN);
    for (uint32_t j = 0; j < n; j++) {
        size_t si = stk__dataset_shard_of(ds, recs[j]);
        const stk__shard *sh = &ds->shards[si];
        w->shs[j] = (uint32_t)si;
        w->ents[j] = stk__entry(ds, sh, recs[j] - sh->first);
    }
    uint64_t t = now_ns();
    ld->st_plan_ns += t - t_plan;
    span_add(ld, w, STK__EV_PLAN, t_plan, t, STK__EV_NONE, n);
    gather g = {w->ents, w->shs, recs, n, 0, 0, 0};
    for (uint32_t j = 0; j < STK__MIN(n, AHEAD_E); j++) __builtin_prefetch(g.ent[j]);
    for (uint32_t j = 0; j < STK__MIN(n, (uint32_t)AHEAD); j++)
        prefetch_record(ds, &ds->shards[g.shs[j]], g.ent[j]);
    int rc = 0;
    if (!check || !stk__tracing(&ld->trace)) {
        /* One pass.  A record the batch holds whole is copied, then its
         * copy is hashed from L1, so what is checked is exactly what is
         * delivered (a page of the mapping that changed between a hash and
         * a copy could not slip through); it costs the same as hashing the
         * mapping first (measured with the hash 0 to 16 records behind
         * the copy: no difference beyond noise).  Other records (several
         * fields, copied to several places) are hashed straight from the
         * mapping, then copied from the cache.  The hashing time is
         * sampled (one record in HASH_SAMPLE timed alone) for the
         * statistics: timing every one would cost two clock reads a
         * record.  One pass beat hashing runs of records and then copying
         * them (below) by about 10% on 512-byte and 1 KiB records. */
        uint64_t t0 = span_open(ld, STK__EV_READ), ver_ns = 0, timed = 0;
        for (uint32_t j = 0; j < n && rc == 0; j++) {
            gather_ahead(ds, &g, j);
            if (!check) {
                gather_copy(ld, s, &g, j);
            } else if (ld->nf == 1 && ds->nfields == 1) {
                const uint8_t *dst = gather_copy(ld, s, &g, j);
                rc = gather_check(ld, &g, j, dst, &ver_ns, &timed, err);
            } else {
                rc = gather_check(ld, &g, j, NULL, &ver_ns, &timed, err);
                if (rc == 0) gather_copy(ld, s, &g, j);
            }
        }
        uint64_t t1 = now_ns(), total = t1 - t0;
        uint64_t est = timed ? STK__MIN(total, ver_ns * g.nhashed / timed) : 0;
        ld->st_ver_ns += est;
        ld->st_io_ns += total - est;
        span_add(ld, w, STK__EV_READ, t0, t1, n, STK__EV_NONE);
    } else {
        /* With a trace running, the two steps are taken apart so that each
         * shows as a span of its own: runs of about RUN bytes are hashed,
         * then copied while still in L2. */
        for (uint32_t j0 = 0, j1 = 0; j0 < n && rc == 0; j0 = j1) {
            uint64_t t0 = span_open(ld, STK__EV_VERIFY), run = 0;
            for (j1 = j0; j1 < n && rc == 0 && (j1 == j0 || run < RUN); j1++) {
                gather_ahead(ds, &g, j1);
                uint64_t x, z;
                stk__record_span(ds, g.ent[j1], &x, &z);
                run += z - x;
                rc = gather_check(ld, &g, j1, NULL, NULL, NULL, err);
            }
            uint64_t t1 = now_ns();
            ld->st_ver_ns += t1 - t0;
            span_add(ld, w, STK__EV_VERIFY, t0, t1, STK__EV_NONE, j1 - j0);
            if (rc) break;
            t1 = span_open(ld, STK__EV_READ);
            for (uint32_t j = j0; j < j1; j++) gather_copy(ld, s, &g, j);
            uint64_t t2 = now_ns();
            ld->st_io_ns += t2 - t1;
            span_add(ld, w, STK__EV_READ, t1, t2, j1 - j0, STK__EV_NONE);
        }
    }
    if (rc) return rc;
    for (size_t fi = 0; fi < ld->nf; fi++)
        if (ld->f[fi].kind == F_RAGGED)
            ((int64_t *)(s->mem + ld->f[fi].offs_off))[n] = (int64_t)s->ragged_rows[fi];
    ld->st_io_n += (uint64_t)n * ld->nf;
    ld->st_io_bytes += g.io_bytes;
    ld->st_ver_n += g.nhashed;
    ld->st_ver_bytes += g.hashed;
    return 0;
}

/* Plans and executes the reads of samples that come straight from files. */
static int fill_direct(stk_loader *ld, worker *w, stk_batch *s, const uint64_t *recs,
                       const uint64_t *ts, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    bool direct = ld->files.direct;
    bool mm = ld->backend == STK_BACKEND_MMAP;
    size_t nr = 0, np = 0;
    uint64_t stage_pos = 0;
    uint64_t t_plan = span_open(ld, STK__EV_PLAN);
    if (grow((void **)&w->reqs, &w->reqs_cap, (size_t)s->n * ld->nf, sizeof *w->reqs) ||
        grow((void **)&w->posts, &w->posts_cap, (size_t)s->n * ld->nf, sizeof *w->posts))
        return stk__err(err, -ENOMEM, "out of memory");
    if (ld->plan_only) {
        /* Where each piece lies and where it goes; nothing is read. */
        s->nplan = 0;
        for (size_t fi = 0; fi < ld->nf; fi++) {
            const lfield *lf = &ld->f[fi];
            uint64_t rows_done = 0;
            for (uint32_t j = 0; j < s->n; j++) {
                size_t si = stk__dataset_shard_of(ds, recs[j]);
                const stk__shard *sh = &ds->shards[si];
                const uint64_t *e = stk__entry(ds, sh, recs[j] - sh->first);
                uint64_t off, len, raw;
                uint8_t *dst = place(ld, lf, s, j, sh, e, ts[j], &rows_done, &off, &len, &raw);
                s->plan[s->nplan++] =
                    (stk__plan){(uint32_t)si, (uint32_t)lf->dsf, recs[j], off, len, dst};
            }
            if (lf->kind == F_RAGGED) {
                ((int64_t *)(s->mem + lf->offs_off))[s->n] = (int64_t)rows_done;
                s->ragged_rows[fi] = rows_done;
            }
        }
        ld->st_plan_ns += now_ns() - t_plan;
        span_add(ld, w, STK__EV_PLAN, t_plan, now_ns(), STK__EV_NONE, s->n);
        return 0;
    }
    for (size_t fi = 0; fi < ld->nf; fi++) {
        const lfield *lf = &ld->f[fi];
        int64_t *offs = lf->kind == F_RAGGED ? (int64_t *)(s->mem + lf->offs_off) : NULL;
        uint64_t rows_done = 0; /* ragged: rows placed so far */
        for (uint32_t j = 0; j < s->n; j++) {
            uint64_t rec = recs[j];
            size_t si = stk__dataset_shard_of(ds, rec);
            const stk__shard *sh = &ds->shards[si];
            const uint64_t *e = stk__entry(ds, sh, rec - sh->first);
            uint64_t off, len, raw;
            uint8_t *dst = place(ld, lf, s, j, sh, e, ts[j], &rows_done, &off, &len, &raw);
            int cv = stk__shard_conv(lf->fi, sh);
            bool narrow = cv && len > raw;
            if (cv && !narrow) {
                /* The stored bytes land at the end of the sample's place and
                 * are widened forward over themselves (core/convert.c). */
                uint8_t *tail = dst + (raw - len);
                w->posts[np++] = (post){POST_CONV, tail, dst, len, raw, rec, lf->dsf, NULL, 0, cv};
                dst = tail;
            }
            if (narrow) {
                /* More stored bytes than the place holds (f64 to f32): they
                 * are converted from the mapping or from staging. */
                post *p = &w->posts[np++];
                *p = (post){POST_CONV, NULL, dst, len, raw, rec, lf->dsf, NULL, 0, cv};
                if (mm) {
                    p->src = sh->map + off;
                    continue;
                }
                dst = NULL; /* read into staging below */
            } else if (lf->f->codec == STK_CODEC_ZSTD || lf->fi->chunks) {
                post *p = &w->posts[np++];
                *p = (post){lf->fi->chunks ? POST_CHUNK : POST_ZSTD, NULL, dst, len, raw, rec,
                            lf->dsf, NULL, 0, 0};
                if (lf->kind == F_TIME) p->skip = ts[j] * lf->fi->row_bytes;
                if (mm) {
                    p->src = sh->map + off;
                    continue;
                }
                dst = NULL; /* read into staging below */
            }
            if (dst && (mm || !direct)) {
                /* Straight into place; merged with the previous read when
                 * contiguous both in the file and in the slot. */
                stk__ioreq *q = nr ? &w->reqs[nr - 1] : NULL;
                if (q && q->shard == si && q->off + q->len == off && q->dst + q->len == dst) {
                    q->len += len;
                    q->need += len;
                } else {
                    w->reqs[nr++] = (stk__ioreq){(uint32_t)si, off, len, len, dst, rec, -1};
                }
                continue;
            }
            /* Through staging: O_DIRECT (aligned) or compressed bytes. */
            uint64_t lo = direct ? off & ~(uint64_t)(DIRECT_ALIGN - 1) : off;
            uint64_t hi = direct ? stk__align_up(off + len, DIRECT_ALIGN) : off + len;
            stk__ioreq *q = nr ? &w->reqs[nr - 1] : NULL;
            const uint8_t *src;
            if (direct && q && q->shard == si && lo >= q->off && lo <= q->off + q->len &&
                q->dst >= w->stage && q->dst + q->len == w->stage + stage_pos) {
                /* Overlaps or abuts the previous aligned read: extend it. */
                uint64_t end = STK__MAX(q->off + q->len, hi);
                uint64_t grow_by = end - (q->off + q->len);
                if (stage_pos + grow_by > w->stage_cap)
                    return stk__err(err, -ENOMEM, "staging area too small");
                src = q->dst + (off - q->off);
                q->len += grow_by;
                stage_pos += grow_by;
                q->need = STK__MIN(q->len, STK__MAX(q->need, off + len - q->off));
            } else {
                if (stage_pos + (hi - lo) > w->stage_cap)
                    return stk__err(err, -ENOMEM, "staging area too small");
                w->reqs[nr++] = (stk__ioreq){(uint32_t)si, lo, hi - lo, off + len - lo,
                                             w->stage + stage_pos, rec, -1};
                src = w->stage + stage_pos + (off - lo);
                stage_pos = stk__align_up(stage_pos + (hi - lo), direct ? DIRECT_ALIGN : 64);
            }
            if (lf->f->codec == STK_CODEC_ZSTD || lf->fi->chunks || narrow) {
                w->posts[np - 1].src = src;
            } else {
                w->posts[np++] = (post){POST_COPY, src, dst, len, len, rec, lf->dsf, NULL, 0, 0};
            }
        }
        if (offs) {
            offs[s->n] = (int64_t)rows_done;
            s->ragged_rows[fi] = rows_done;
        }
    }
    uint64_t t_io = now_ns();
    ld->st_plan_ns += t_io - t_plan;
    span_add(ld, w, STK__EV_PLAN, t_plan, t_io, STK__EV_NONE, s->n);
    t_io = span_open(ld, STK__EV_READ);
    int rc = stk__io_exec(w->io, w->reqs, nr, err);
    uint64_t t_asm = now_ns();
    ld->st_io_ns += t_asm - t_io;
    ld->st_io_n += nr;
    uint64_t bytes = 0;
    for (size_t i = 0; i < nr; i++) bytes += w->reqs[i].len;
    ld->st_io_bytes += bytes;
    span_add(ld, w, STK__EV_READ, t_io, t_asm, nr, bytes);
    t_asm = span_open(ld, STK__EV_ASSEMBLE);
    if (rc == 0) rc = do_posts(ld, w, np, err);
    uint64_t t_end = now_ns();
    ld->st_asm_ns += t_end - t_asm;
    span_add(ld, w, STK__EV_ASSEMBLE, t_asm, t_end, STK__EV_NONE, STK__EV_NONE);
    return rc;
}

/* Checks the blocks of shard bytes [lo, hi) not yet checked this epoch.
 * The mmap backend hashes the mapping; the others read each block (from
 * the page cache, usually: the batch's own reads just brought it in), so a
 * file that shrank gives an error, never a fault. */
static int verify_range(stk_loader *ld, worker *w, size_t si, uint64_t lo, uint64_t hi,
                        uint64_t rec, stk_error *err) {
    const stk__shard *sh = &ld->ds->shards[si];
    if (hi <= lo) return 0;
    uint64_t bs = sh->block_size;
    uint64_t b0 = (lo - sh->data_off) / bs, b1 = (hi - 1 - sh->data_off) / bs;
    for (uint64_t b = b0; b <= b1; b++) {
        if (block_bad(ld, si, b)) {
            /* A damaged block may hold intact records: under on_error =
             * skip only the damaged record itself is refused. */
            const uint64_t *e = stk__entry(ld->ds, sh, rec - sh->first);
            uint64_t x, z;
            stk__record_span(ld->ds, e, &x, &z);
            if (stk__hash(sh->map + x, (size_t)(z - x)) == e[0]) continue;
            return stk__err(err, STK_ECHECKSUM, "%s: record %llu: checksum mismatch", sh->path,
                            (unsigned long long)rec);
        }
        if (block_checked(ld, si, b)) continue;
        uint64_t a = sh->data_off + b * bs, n = STK__MIN(bs, sh->data_end - a);
        const uint8_t *bytes;
        if (ld->backend == STK_BACKEND_MMAP) {
            bytes = sh->map + a;
        } else {
            uint64_t len = ld->files.direct ? stk__align_up(n, DIRECT_ALIGN) : n;
            stk__ioreq pin = {(uint32_t)si, a, len, n, w->blockbuf, rec, -1};
            int prc = stk__files_pin(&ld->files, &pin, 1, err);
            if (prc) return prc;
            ssize_t got = stk__pread_full(pin.fd, w->blockbuf, (size_t)len, a);
            stk__files_unpin(&ld->files, &pin, 1);
            if (got < 0 || (uint64_t)got < n) {
                /* Name the record where the file now ends, not the one
                 * that happened to share its block. */
                if (got >= 0) rec = stk__dataset_record_at(ld->ds, sh, a + (uint64_t)got);
                stk__ioreq r = {(uint32_t)si, a, len, n, w->blockbuf, rec, -1};
                return stk__io_fail(&ld->files, &r, got < 0 ? (int)got : 0,
                                    got < 0 ? 0 : (uint64_t)got, err);
            }
            bytes = w->blockbuf;
        }
        int rc = check_block(ld, si, b, bytes, rec, err);
        if (rc == STK_ECHECKSUM && ld->bad) {
            mark_bad(ld, si, b);
            b--; /* again, now as a damaged block: the record decides */
            continue;
        }
        if (rc) return rc;
    }
    return 0;
}

static int verify_samples(stk_loader *ld, worker *w, uint32_t n, const uint64_t *recs,
                          const uint64_t *ts, stk_error *err) {
    for (uint32_t j = 0; j < n; j++) {
        size_t si;
        uint64_t lo, hi;
        uint64_t t1 = ld->space.windows ? ts[j] + ld->space.L : 0;
        sample_span(ld, recs[j], ts[j], t1, &si, &lo, &hi);
        int rc = verify_range(ld, w, si, lo, hi, recs[j], err);
        if (rc) return rc;
    }
    return 0;
}

/* Checks (once per epoch) the blocks sample (rec, t) uses. */
static int sample_ok(stk_loader *ld, worker *w, uint64_t rec, uint64_t t, stk_error *err) {
    size_t si;
    uint64_t lo, hi;
    sample_span(ld, rec, t, ld->space.windows ? t + ld->space.L : 0, &si, &lo, &hi);
    return verify_range(ld, w, si, lo, hi, rec, err);
}

/* on_error = skip: the sample at position p failed its checks (why: *err).
 * Takes the next position whose sample passes: p+1, p+2, ... within the
 * epoch, or within the group [gstart, gstart + gsize) in block order, so
 * that every rank still yields the same batches.  Fails after max_skips. */
static int substitute(stk_loader *ld, worker *w, uint64_t p, uint64_t gstart, uint64_t gsize,
                      uint64_t *id, uint64_t *rec, uint64_t *t, stk_error *err) {
    stk_error first = *err;
    uint64_t n = gsize ? gsize : ld->space.n;
    uint64_t base = gsize ? gstart : 0;
    for (uint64_t k = 1; k <= ld->opt.max_skips && k < n; k++) {
        uint64_t p2 = base + (p - base + k) % n;
        uint64_t id2 = stk__order_at(&w->order, p2), r2, t2;
        stk__space_locate(&ld->space, id2, &r2, &t2);
        stk_error e2 = {0};
        int rc = sample_ok(ld, w, r2, t2, &e2);
        if (rc == 0) {
            *id = id2;
            *rec = r2;
            *t = t2;
            ld->st_skipped++;
            pthread_mutex_lock(&ld->mu);
            ld->last_skip = first;
            pthread_mutex_unlock(&ld->mu);
            return 0;
        }
        if (rc != STK_ECHECKSUM) {
            *err = e2;
            return rc;
        }
    }
    int code = first.code;
    stk__err(err, code, "on_error=skip: %llu samples in a row failed their checks; the first: %s",
             (unsigned long long)STK__MIN(ld->opt.max_skips, n), first.message);
    return code;
}

/* Copies samples out of group buffers (block order).  The batch's
 * positions are consecutive in the order, so its samples fall in a run of
 * one group, then perhaps the next: each run holds its group while the
 * copies of the run are planned (source in the group buffer or the mapping,
 * destination in the slot) and then done, the sources prefetched ahead as
 * in gather_records. */
static int fill_groups(stk_loader *ld, worker *w, stk_batch *s, uint64_t *recs, uint64_t *ts,
                       const uint64_t *groups_of, const uint32_t *slots, uint64_t gen,
                       stk_error *err) {
    const stk_dataset *ds = ld->ds;
    bool mm = ld->backend == STK_BACKEND_MMAP;
    int rc = 0;
    uint64_t *rows_done = s->ragged_rows;
    for (size_t fi = 0; fi < ld->nf; fi++) rows_done[fi] = 0;
    for (uint32_t j0 = 0, j1; j0 < s->n && rc == 0; j0 = j1) {
        uint64_t g = groups_of[j0];
        for (j1 = j0 + 1; j1 < s->n && groups_of[j1] == g; j1++) {
        }
        if (grow((void **)&w->posts, &w->posts_cap, (size_t)(j1 - j0) * ld->nf, sizeof *w->posts))
            return stk__err(err, -ENOMEM, "out of memory");
        pthread_mutex_lock(&ld->mu);
        group *gr = group_acquire(ld, w, g, gen, err, &rc);
        pthread_mutex_unlock(&ld->mu);
        if (!gr) break;
        uint64_t t_run = span_open(ld, STK__EV_ASSEMBLE);
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
            if (ld->bad) {
                /* A sample on a block the group load found damaged is
                 * replaced by the next good one of the same group. */
                rc = sample_ok(ld, w, recs[j], ts[j], err);
                if (rc == STK_ECHECKSUM) {
                    uint64_t gstart, gsize;
                    stk__order_group_range(&w->order, g, &gstart, &gsize);
                    rc = substitute(ld, w, stk__deal_at(&w->deal, s->b * ld->opt.batch_size + j),
                                    gstart, gsize, &s->samples[j], &recs[j], &ts[j], err);
                    uint64_t blk = s->samples[j] / ld->block_samples;
                    m = stk__perm_invert(&w->order.perm, blk) - g * w->order.K;
                }
                if (rc) break;
            }
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
                uint8_t *dst = place(ld, lf, s, j, sh, e, ts[j], &rows_done[fi], &off, &len, &raw);
                const uint8_t *src = mm ? sh->map + off : gr->buf + sp->buf_off + (off - sp->base);
                int cv = stk__shard_conv(lf->fi, sh);
                int kind = lf->f->codec == STK_CODEC_ZSTD ? POST_ZSTD
                           : lf->fi->chunks               ? POST_CHUNK
                           : cv                           ? POST_CONV
                                                          : POST_COPY;
                uint64_t skip = lf->kind == F_TIME && lf->fi->chunks ? ts[j] * lf->fi->row_bytes : 0;
                w->posts[np++] = (post){kind, src, dst, len, raw, rec, lf->dsf, NULL, skip, cv};
            }
        }
        if (rc == 0) rc = do_posts(ld, w, np, err);
        uint64_t t_end = now_ns();
        ld->st_asm_ns += t_end - t_run;
        span_add(ld, w, STK__EV_ASSEMBLE, t_run, t_end, STK__EV_NONE, STK__EV_NONE);
        pthread_mutex_lock(&ld->mu);
        group_release(ld, gr);
        pthread_mutex_unlock(&ld->mu);
    }
    for (size_t fi = 0; fi < ld->nf && rc == 0; fi++)
        if (ld->f[fi].kind == F_RAGGED)
            ((int64_t *)(s->mem + ld->f[fi].offs_off))[s->n] = (int64_t)rows_done[fi];
    return rc;
}

/* rec_check: hashes each sample's fields as they lie in the slot, with the
 * zero padding between them, and compares with the record's checksum. */
static int check_records(stk_loader *ld, stk_batch *s, const uint64_t *recs, stk_error *err) {
    static const uint8_t zeros[256];
    const stk_dataset *ds = ld->ds;
    uint64_t t0 = now_ns(), bytes = 0;
    XXH3_state_t st;
    for (uint32_t j = 0; j < s->n; j++) {
        size_t si = stk__dataset_shard_of(ds, recs[j]);
        const stk__shard *sh = &ds->shards[si];
        const uint64_t *e = stk__entry(ds, sh, recs[j] - sh->first);
        uint64_t h;
        if (ds->nfields == 1) {
            const lfield *lf = &ld->f[0];
            const uint8_t *p = lf->kind == F_RAGGED
                                   ? s->mem + lf->data_off +
                                         (uint64_t)((const int64_t *)(s->mem + lf->offs_off))[j] *
                                             lf->fi->row_bytes
                                   : s->mem + lf->data_off + j * lf->sample_bytes;
            h = stk__hash(p, (size_t)e[2]);
            bytes += e[2];
        } else {
            XXH3_64bits_reset(&st);
            for (size_t f = 0; f < ds->nfields; f++) {
                const lfield *lf = &ld->f[ld->lf_of[f]];
                const uint8_t *p = lf->kind == F_RAGGED
                                       ? s->mem + lf->data_off +
                                             (uint64_t)((const int64_t *)(s->mem + lf->offs_off))[j] *
                                                 lf->fi->row_bytes
                                       : s->mem + lf->data_off + j * lf->sample_bytes;
                XXH3_64bits_update(&st, p, (size_t)e[2 + 3 * f]);
                bytes += e[2 + 3 * f];
                if (f + 1 < ds->nfields) {
                    uint64_t pad = e[1 + 3 * (f + 1)] - (e[1 + 3 * f] + e[2 + 3 * f]);
                    for (; pad; pad -= STK__MIN(pad, (uint64_t)sizeof zeros))
                        XXH3_64bits_update(&st, zeros, (size_t)STK__MIN(pad, (uint64_t)sizeof zeros));
                }
            }
            h = XXH3_64bits_digest(&st);
        }
        if (h != e[0]) {
            ld->st_ver_ns += now_ns() - t0;
            return stk__err(err, STK_ECHECKSUM,
                            "%s: record %llu: checksum mismatch (its bytes as read do not match "
                            "the record's checksum): the shard is damaged; `stoker verify` lists "
                            "every damaged record",
                            sh->path, (unsigned long long)recs[j]);
        }
    }
    ld->st_ver_n += s->n;
    ld->st_ver_bytes += bytes;
    ld->st_ver_ns += now_ns() - t0;
    return 0;
}

/* Checks one checksum block that the warm-up has brought in and nobody
 * has checked yet, taking them in the order they arrive, and marks it
 * checked for the epoch; returns false when none is waiting.  Workers call
 * it while they wait for the warm-up, so the checks of the first epoch are
 * done with CPU time they would otherwise spend asleep.  A block that fails
 * is left unmarked: the worker that needs a record on it checks the record
 * itself and names it. */
static bool check_arrived_block(stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    pthread_mutex_lock(&ld->chk_mu);
    for (; ld->chk_range < ld->nwarm_ranges; ld->chk_range++, ld->chk_block = UINT64_MAX) {
        const stk__range *r = &ld->warm_ranges[ld->chk_range];
        const stk__shard *sh = &ds->shards[r->shard];
        uint64_t bs = sh->block_size;
        if (!bs) continue;
        if (ld->chk_block == UINT64_MAX) {
            uint64_t lo = STK__MAX(r->lo, sh->data_off);
            ld->chk_block = (lo - sh->data_off + bs - 1) / bs; /* the first whole block */
        }
        for (; ld->chk_block < sh->nblocks; ld->chk_block++) {
            uint64_t blk = ld->chk_block;
            uint64_t a = sh->data_off + blk * bs, z = STK__MIN(a + bs, sh->data_end);
            if (z > r->hi) break;
            if (block_checked(ld, r->shard, blk)) continue;
            if (!stk__warm_arrived(ld->warm, r->shard, a, z)) {
                pthread_mutex_unlock(&ld->chk_mu);
                return false;
            }
            ld->chk_block++;
            uint64_t gen = atomic_load_explicit(&ld->warm_gen, memory_order_acquire);
            pthread_mutex_unlock(&ld->chk_mu);
            uint64_t t0 = now_ns();
            bool ok = stk__hash(sh->map + a, (size_t)(z - a)) == sh->blocks[blk];
            pthread_mutex_lock(&ld->mu);
            if (ok && ld->gen == gen) {
                _Atomic uint64_t *word = &ld->verified[ld->verified_off[r->shard] + blk / 64];
                uint64_t bit = UINT64_C(1) << (blk % 64);
                atomic_store_explicit(&ld->any_verified, true, memory_order_relaxed);
                if (!(atomic_fetch_or_explicit(word, bit, memory_order_relaxed) & bit)) {
                    ld->st_ver_n++;
                    ld->st_ver_bytes += z - a;
                }
            }
            pthread_mutex_unlock(&ld->mu);
            ld->st_ver_ns += now_ns() - t0;
            return true;
        }
    }
    pthread_mutex_unlock(&ld->chk_mu);
    return false;
}

/* While the warm-up runs, waits until the bytes of a batch's samples are
 * in (with the checksum blocks around them, which the checks read) rather
 * than faulting them in one 2 MiB read at a time (see io/warm.c), and
 * checks arrived blocks meanwhile. */
static void warm_wait(stk_loader *ld, uint32_t n, const uint64_t *recs, const uint64_t *ts) {
    uint64_t seen = 0;
    for (uint32_t j = 0; j < n && !stk__warm_done(ld->warm); j++) {
        size_t si;
        uint64_t lo, hi;
        sample_span(ld, recs[j], ts[j], ld->space.windows ? ts[j] + ld->space.L : 0, &si, &lo,
                    &hi);
        const stk__shard *sh = &ld->ds->shards[si];
        if (ld->opt.verify && sh->block_size) {
            uint64_t bs = sh->block_size;
            lo = sh->data_off + (lo - sh->data_off) / bs * bs;
            hi = STK__MIN(sh->data_off + stk__align_up(hi - sh->data_off, bs), sh->data_end);
        }
        while (!stk__warm_arrived(ld->warm, (uint32_t)si, lo, hi)) {
            if (ld->warm_ranges && check_arrived_block(ld)) continue;
            stk__warm_wait_piece(ld->warm, &seen);
        }
    }
}

static int fill(stk_loader *ld, worker *w, stk_batch *s, uint64_t gen, stk_error *err) {
    uint64_t t0 = span_open(ld, STK__EV_PLAN);
    uint32_t n = s->n;
    uint64_t *recs = w->ids, *ts = recs + n, *gs = ts + n;
    uint64_t first = s->b * ld->opt.batch_size;
    stk__order_fill(&w->order, &w->deal, first, n, s->samples, ld->use_groups ? gs : NULL,
                    ld->use_groups ? w->slots : NULL);
    for (uint32_t j = 0; j < n; j++) stk__space_locate(&ld->space, s->samples[j], &recs[j], &ts[j]);
    if (ld->warm && !stk__warm_done(ld->warm)) warm_wait(ld, n, recs, ts);
    ld->st_plan_n += n;
    uint64_t t1 = now_ns();
    ld->st_plan_ns += t1 - t0;
    span_add(ld, w, STK__EV_PLAN, t0, t1, STK__EV_NONE, n);
    int rc = 0;
    /* Check before reading: the check brings the blocks into the page
     * cache, and under on_error = skip a damaged sample is replaced before
     * anything is read for it. */
    bool pre = ld->opt.verify && !ld->use_groups && !ld->rec_check;
    if (pre) t1 = span_open(ld, STK__EV_VERIFY);
    for (uint32_t j = 0; pre && j < n && rc == 0; j++) {
        rc = sample_ok(ld, w, recs[j], ts[j], err);
        if (rc == STK_ECHECKSUM && ld->bad)
            rc = substitute(ld, w, stk__deal_at(&w->deal, first + j), 0, 0, &s->samples[j],
                            &recs[j], &ts[j], err);
    }
    if (pre) span_add(ld, w, STK__EV_VERIFY, t1, now_ns(), STK__EV_NONE, STK__EV_NONE);
    if (rc == 0)
        rc = ld->use_groups ? fill_groups(ld, w, s, recs, ts, gs, w->slots, gen, err)
             : ld->gather   ? gather_records(ld, w, s, recs, ld->rec_check, err)
                            : fill_direct(ld, w, s, recs, ts, err);
    if (rc == 0 && ld->rec_check && !ld->gather) {
        uint64_t tv = span_open(ld, STK__EV_VERIFY);
        rc = check_records(ld, s, recs, err);
        span_add(ld, w, STK__EV_VERIFY, tv, now_ns(), STK__EV_NONE, n);
    }
    /* Block order reads each group's blocks whole and checks them as the
     * group lands; through the mapping nothing was read, and the blocks a
     * batch uses are checked here, once each per epoch. */
    if (rc == 0 && ld->opt.verify && ld->use_groups && ld->backend == STK_BACKEND_MMAP) {
        uint64_t tv = span_open(ld, STK__EV_VERIFY);
        rc = verify_samples(ld, w, n, recs, ts, err);
        span_add(ld, w, STK__EV_VERIFY, tv, now_ns(), STK__EV_NONE, STK__EV_NONE);
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

static stk_batch *claim(stk_loader *ld) {
    if (ld->failed || ld->next_fill >= ld->nbatches || ld->next_fill >= ld->next_take + ld->R)
        return NULL;
    for (uint32_t i = 0; i < ld->R; i++) {
        stk_batch *s = &ld->slots[i];
        if (s->state != S_FREE) continue;
        s->state = S_FILLING;
        s->b = ld->next_fill++;
        s->gen = ld->gen;
        s->n = batch_len(ld, s->b);
        s->err = 0;
        return s;
    }
    return NULL;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    stk_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop) {
        stk_batch *s = claim(ld);
        if (!s) {
            if (!ld->has_reader) group_prefetch(ld, w, 1, false);
            if (ld->stop) break; /* closed while the group was read */
            if (!(s = claim(ld))) {
                pthread_cond_wait(&ld->cv, &ld->mu);
                continue;
            }
        }
        uint64_t gen = s->gen;
        w->order = ld->order;
        w->deal = ld->deal;
        pthread_mutex_unlock(&ld->mu);
        stk_error err = {0};
        int depth = ld->nvtx ? stk__nvtx_depth() : 0;
        uint64_t t_batch = span_open(ld, STK__EV_BATCH);
        int rc = fill(ld, w, s, gen, &err);
        span_add(ld, w, STK__EV_BATCH, t_batch, now_ns(), s->b, s->n);
        if (ld->nvtx) stk__nvtx_pop_to(depth); /* the batch, and any a failure left */
        pthread_mutex_lock(&ld->mu);
        /* (A group wait gives up with -ECANCELED only for these two; an
         * -ECANCELED from a read is an error like any other.) */
        if (s->gen != ld->gen || ld->stop) {
            s->state = S_FREE; /* an old epoch's batch, or closing: discard */
        } else {
            s->state = S_READY;
            s->err = rc;
            if (rc) s->e = err;
        }
        pthread_cond_broadcast(&ld->cv);
        if (ld->use_groups && !ld->stop && !ld->has_reader) group_prefetch(ld, w, 1, false);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* ---- open ---- */

static int pick_fields(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    size_t n = o->fields ? o->nfields : ds->nfields;
    if (n == 0) return stk__err(err, -EINVAL, "fields: the list is empty");
    ld->f = stk__calloc(n, sizeof *ld->f);
    if (!ld->f) return stk__err(err, -ENOMEM, "out of memory");
    ld->nf = n;
    for (size_t i = 0; i < n; i++) {
        int k = o->fields ? stk_dataset_find_field(ds, o->fields[i]) : (int)i;
        if (k < 0) {
            char names[256] = "";
            size_t used = 0;
            for (size_t j = 0; j < ds->nfields && used < sizeof names; j++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", j ? ", " : "",
                                         ds->fields[j].name);
            return stk__err(err, -EINVAL, "fields: '%s' is not a field of %s (it has: %s)",
                            o->fields[i] ? o->fields[i] : "(null)", ds->dir, names);
        }
        for (size_t j = 0; j < i; j++)
            if (ld->f[j].dsf == (size_t)k)
                return stk__err(err, -EINVAL, "fields: '%s' is listed twice", o->fields[i]);
        /* A ragged field's offsets come out as "<name>_offsets": a field
         * of that name beside it would be shadowed (datasets written before
         * the writer refused such names). */
        for (size_t j = 0; j < i; j++) {
            const char *a = ds->fields[k].name, *b = ld->f[j].f->name;
            size_t la = strlen(a), lb = strlen(b);
            if ((la == lb + 8 && !strncmp(a, b, lb) && !strcmp(a + lb, "_offsets")) ||
                (lb == la + 8 && !strncmp(b, a, la) && !strcmp(b + la, "_offsets")))
                return stk__err(err, -EINVAL,
                                "fields: '%s' and '%s' cannot be loaded together: a ragged "
                                "field's offsets are delivered as '<name>_offsets'; select one "
                                "of them (fields=)",
                                a, b);
        }
        lfield *lf = &ld->f[i];
        lf->dsf = (size_t)k;
        lf->f = &ds->fields[k];
        lf->fi = &ds->info[k];
        bool ragged = lf->f->ndim > 0 && lf->f->shape[0] == STK_RAGGED;
        if (o->window && lf->f->dtype == STK_BYTES) {
            /* Bytes (a string id) are never rows of a series: delivered
             * whole, once per sample. */
            lf->kind = ragged ? F_RAGGED : F_DENSE;
        } else if (o->window) {
            bool timeable = lf->f->ndim > 0 &&
                            (ragged || (uint64_t)lf->f->shape[0] >= o->window);
            lf->kind = timeable ? F_TIME : F_DENSE;
            if (lf->kind == F_TIME && lf->f->codec != STK_CODEC_NONE)
                return stk__err(err, -EINVAL,
                                "window: field '%s' is compressed; windows read row ranges and "
                                "need uncompressed time fields (repack without --compress)",
                                lf->f->name);
        } else {
            lf->kind = ragged ? F_RAGGED : F_DENSE;
        }
        if (lf->kind == F_TIME) lf->sample_bytes = o->window * lf->fi->row_bytes;
        else if (lf->kind == F_DENSE) {
            if (ragged)
                return stk__err(err, -EINVAL,
                                "window: field '%s' is ragged but is not a time field",
                                lf->f->name);
            lf->sample_bytes = (uint64_t)lf->fi->fixed_rows * lf->fi->row_bytes;
        }
    }
    return 0;
}

/* Largest stored size and rows per field, over the whole dataset. */
static void field_maxima(stk_loader *ld, uint64_t *max_rows) {
    const stk_dataset *ds = ld->ds;
    for (size_t i = 0; i < ld->nf; i++) max_rows[i] = 0;
    for (size_t s = 0; s < ds->nshards; s++) {
        const stk__shard *sh = &ds->shards[s];
        for (uint64_t r = 0; r < sh->nrec; r++) {
            const uint64_t *e = stk__entry(ds, sh, r);
            for (size_t i = 0; i < ld->nf; i++) {
                lfield *lf = &ld->f[i];
                lf->max_stored = STK__MAX(lf->max_stored, e[2 + 3 * lf->dsf]);
                max_rows[i] = STK__MAX(max_rows[i], e[3 + 3 * lf->dsf]);
            }
        }
    }
}

static uint64_t fingerprint(const stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    uint64_t h = stk__mix2(stk__schema_hash(ds->fields, ds->nfields), ds->nrec);
    for (size_t s = 0; s < ds->nshards; s++) h = stk__mix2(h, ds->shards[s].size);
    for (size_t i = 0; i < ld->nf; i++) h = stk__mix2(h, ld->f[i].dsf);
    h = stk__mix2(h, ld->opt.window);
    h = stk__mix2(h, ld->opt.stride);
    h = stk__mix2(h, (uint64_t)ld->opt.valid);
    if (ld->opt.valid != STK_VALID_ALL) h = stk__mix2(h, (uint64_t)ld->valid_dsf);
    h = stk__mix2(h, (uint64_t)ld->opt.order);
    h = stk__mix2(h, ld->space.n);
    if (ld->opt.order == STK_ORDER_BLOCK) {
        h = stk__mix2(h, ld->block_samples);
        h = stk__mix2(h, ld->opt.block_group);
    }
    return h;
}

/* Bytes of shard data, the records' region of every shard. */
static uint64_t data_bytes(const stk_dataset *ds) {
    uint64_t total = 0;
    for (size_t s = 0; s < ds->nshards; s++) total += ds->shards[s].data_end - ds->shards[s].data_off;
    return total;
}

/* Whether the bytes of shard data still outside the page cache (a share
 * 1 - `resident` of it) fit in 3/4 of what the page cache may still take. */
static bool fits_in_memory(const stk_dataset *ds, double resident) {
    uint64_t missing = (uint64_t)((double)data_bytes(ds) * (1.0 - STK__MAX(resident, 0.0)));
    return missing <= stk__mem_room() / 4 * 3;
}

/* Whether to warm up (see stk_warm_up): the data mostly outside the page
 * cache (`resident`, the share of the files in it), every shard mapped,
 * reads through the page cache, and, under AUTO, the mmap backend and room
 * for it. */
static bool want_warm_up(const stk_dataset *ds, const stk_loader_options *o, stk_backend backend,
                         double resident, bool fits) {
    if (o->warm_up == STK_WARM_UP_OFF || o->direct || resident >= 0.9) return false;
    for (size_t s = 0; s < ds->nshards; s++)
        if (!ds->shards[s].map) return false;
    if (o->warm_up == STK_WARM_UP_ON) return true;
    return (backend == STK_BACKEND_AUTO || backend == STK_BACKEND_MMAP) && fits;
}

/* The ranges the warm-up brings in, in the order the first epoch first
 * needs them: block order's blocks group by group; for the others the
 * shards in turn (a sequential epoch reads them so, and a random one needs
 * almost every byte within its first few batches anyway). */
static int warm_up_start(stk_loader *ld, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    stk__range *r = NULL;
    size_t n = 0;
    if (ld->use_groups) {
        group *tmp = stk__calloc(1, sizeof *tmp);
        if (!tmp) return stk__err(err, -ENOMEM, "out of memory");
        for (uint64_t g = 0; g < ld->order.ngroups; g++)
            for (uint64_t m = 0; m < stk__order_group_blocks(&ld->order, g); m++)
                if (block_spans(ld, stk__order_group_block(&ld->order, g, m), tmp)) {
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

/* Bytes a sample reads, on average: a window of every time field (plus the
 * per-record fields), or a whole record. */
static uint64_t mean_sample_bytes(const stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    if (ld->space.windows) {
        uint64_t b = 0;
        for (size_t i = 0; i < ld->nf; i++)
            b += ld->f[i].kind == F_TIME ? ld->space.L * ld->f[i].fi->stored_row_bytes
                                         : ld->f[i].sample_bytes;
        return b;
    }
    uint64_t total = 0;
    for (size_t s = 0; s < ds->nshards; s++) total += ds->shards[s].data_end - ds->shards[s].data_off;
    return ds->nrec ? total / ds->nrec : 0;
}

static int open_files(stk_loader *ld, stk_error *err) {
    /* Read-ahead in random order.  When the data fits in memory, a small
     * sample's read becomes a larger request whose extra bytes later
     * samples of the epoch use (a windowed epoch read 0.65 of the
     * sequential rate with it, 0.48 without); a large one (above half the
     * kernel's 128 KiB default window) only gains the head of the next
     * record, read again later as a fragment (100 KiB clips: 1.07 GB/s with
     * it, 1.25 without).  When the data does not fit, the extra bytes are
     * gone before a later sample could use them: each sample is one read of
     * its own bytes. */
    bool no_readahead = ld->opt.order == STK_ORDER_RANDOM &&
                        (!ld->fits || mean_sample_bytes(ld) >= (64u << 10));
    return stk__files_open(&ld->files, ld->ds, ld->opt.direct != 0, no_readahead,
                           ld->backend == STK_BACKEND_MMAP, ld->opt.max_open_files, err);
}

/* The sample space over the fields pick_fields chose: records, or windows
 * over the time fields (with the validity rule applied). */
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
        stk__space_params sp = {
            opts->window, opts->stride, time_fields, ntime,
            opts->valid_field ? stk_dataset_find_field(ld->ds, opts->valid_field) : -1,
            opts->valid};
        ld->valid_dsf = sp.valid_field;
        rc = stk__space_build(&ld->space, ld->ds, &sp, err);
    }
    stk__free(time_fields);
    return rc;
}

static int check_options(const stk_dataset *ds, const stk_loader_options *o, stk_error *err) {
    if (o->batch_size == 0) return stk__err(err, -EINVAL, "batch_size: must be at least 1");
    if (o->world_size == 0) return stk__err(err, -EINVAL, "world_size: must be at least 1");
    if (o->queue_depth > 32768)
        return stk__err(err, -EINVAL, "queue_depth: %u is more than io_uring takes (32768)",
                        o->queue_depth);
    if (o->split_count == 0) return stk__err(err, -EINVAL, "split_count: must be at least 1");
    if (o->split_index >= o->split_count)
        return stk__err(err, -EINVAL, "split_index: %u is not below split_count %u",
                        o->split_index, o->split_count);
    if (o->rank >= o->world_size)
        return stk__err(err, -EINVAL, "rank: %u is not below world_size %u", o->rank,
                        o->world_size);
    if (o->order != STK_ORDER_SEQUENTIAL && o->order != STK_ORDER_RANDOM &&
        o->order != STK_ORDER_BLOCK)
        return stk__err(err, -EINVAL, "order: unknown value %d", (int)o->order);
    if (o->backend < STK_BACKEND_AUTO || o->backend > STK_BACKEND_MMAP)
        return stk__err(err, -EINVAL, "backend: unknown value %d", (int)o->backend);
    if (o->direct && o->backend == STK_BACKEND_MMAP)
        return stk__err(err, -EINVAL, "direct: O_DIRECT reads cannot use the mmap backend");
    if (o->window && o->stride == 0) return stk__err(err, -EINVAL, "stride: must be at least 1");
    if (!o->window && (o->valid != STK_VALID_ALL || o->valid_field))
        return stk__err(err, -EINVAL, "valid: a validity rule needs windows (window > 0)");
    if (o->valid != STK_VALID_ALL && !o->valid_field)
        return stk__err(err, -EINVAL, "valid_field: the validity rule needs a field");
    if (o->valid_field) {
        int k = stk_dataset_find_field(ds, o->valid_field);
        if (k < 0)
            return stk__err(err, -EINVAL, "valid_field: '%s' is not a field of %s",
                            o->valid_field, ds->dir);
        stk_dtype t = ds->fields[k].dtype;
        if (o->valid == STK_VALID_NOT_NAN && t != STK_F16 && t != STK_BF16 && t != STK_F32 &&
            t != STK_F64)
            return stk__err(err, -EINVAL,
                            "valid_field: '%s' is %s; the not-NaN rule needs a float field",
                            o->valid_field, stk_dtype_name(t));
        if (ds->fields[k].codec != STK_CODEC_NONE || ds->fields[k].ndim == 0)
            return stk__err(err, -EINVAL,
                            "valid_field: '%s' must be an uncompressed field with rows",
                            o->valid_field);
    }
    if (o->order == STK_ORDER_BLOCK && o->block_group == 0)
        return stk__err(err, -EINVAL, "block_group: must be at least 1");
    if (o->on_error != STK_ON_ERROR_RAISE && o->on_error != STK_ON_ERROR_SKIP)
        return stk__err(err, -EINVAL, "on_error: unknown value %d", (int)o->on_error);
    if (ds->in_place) {
        if (o->direct)
            return stk__err(err, -EINVAL,
                            "direct: %s is an in-place index; its files are read through the "
                            "page cache (their records are not aligned for O_DIRECT)",
                            ds->dir);
        if (o->on_error == STK_ON_ERROR_SKIP)
            return stk__err(err, -EINVAL,
                            "on_error: skipping damaged samples needs checksums, and the files "
                            "of an in-place index have none");
        if (o->backend == STK_BACKEND_MMAP && !ds->mapped)
            return stk__err(err, -EINVAL,
                            "backend: an index of more than %d files is not mapped; use "
                            "uring or pool",
                            STK_INDEX_MAP_MAX);
        if (o->valid_field && !ds->mapped)
            return stk__err(err, -EINVAL,
                            "valid_field: needs the files mapped, and an index of more than "
                            "%d files is not",
                            STK_INDEX_MAP_MAX);
    }
    if (o->on_error == STK_ON_ERROR_SKIP && !o->verify)
        return stk__err(err, -EINVAL,
                        "on_error: skipping damaged samples needs verify (checksums) on");
    if (o->on_error == STK_ON_ERROR_SKIP && o->max_skips == 0)
        return stk__err(err, -EINVAL, "max_skips: must be at least 1");
    if (o->threads < 0 || o->threads > MAX_WORKERS)
        return stk__err(err, -EINVAL, "threads: %d is not in 0..%d", o->threads, MAX_WORKERS);
    return 0;
}

static int loader_open(stk_dataset *ds, const stk_loader_options *opts, bool plan_only,
                       stk_loader **out, stk_error *err);

int stk_loader_open(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                    stk_error *err) {
    return loader_open(ds, opts, false, out, err);
}

int stk__loader_open_planned(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                             stk_error *err) {
    return loader_open(ds, opts, true, out, err);
}

static int loader_open(stk_dataset *ds, const stk_loader_options *opts, bool plan_only,
                       stk_loader **out, stk_error *err) {
    stk_loader_options defaults;
    if (!opts) {
        stk_loader_options_init(&defaults);
        opts = &defaults;
    }
    if (!ds || !out) return stk__err(err, -EINVAL, "stk_loader_open: NULL argument");
    *out = NULL;
    int rc = check_options(ds, opts, err);
    if (rc) return rc;
    stk_loader_options in_place;
    if ((ds->in_place || plan_only) && opts->verify) {
        /* Users' own files carry no checksums to verify; a planned loader
         * reads nothing (its caller checks what it reads). */
        in_place = *opts;
        in_place.verify = 0;
        opts = &in_place;
    }
    stk_loader *ld = stk__calloc(1, sizeof *ld);
    if (!ld) return stk__err(err, -ENOMEM, "out of memory");
    ld->ds = ds;
    ld->plan_only = plan_only;
    ld->nvtx = stk__nvtx_on();
    ld->opt = *opts;
    ld->opt.fields = NULL;
    ld->opt.valid_field = NULL;
    ld->opt.queue_depth = opts->queue_depth ? opts->queue_depth : 64;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_mutex_init(&ld->chk_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ld->cv, &ca);
    pthread_condattr_destroy(&ca);
    ld->st_t0 = now_ns();
    uint64_t *max_rows = NULL;
    if ((rc = pick_fields(ld, opts, err))) goto fail;

    /* The sample space. */
    if ((rc = build_space(ld, opts, err))) goto fail;
    max_rows = stk__calloc(ld->nf, sizeof *max_rows);
    if (!max_rows) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    field_maxima(ld, max_rows);

    /* Slot layout: per field, data then offsets, each 64-byte aligned. */
    uint64_t B = opts->batch_size, pos = 0;
    for (size_t i = 0; i < ld->nf; i++) {
        lfield *lf = &ld->f[i];
        lf->cap = lf->kind == F_RAGGED ? B * max_rows[i] * lf->fi->row_bytes : B * lf->sample_bytes;
        lf->data_off = pos;
        pos = stk__align_up(pos + lf->cap, 64);
        if (lf->kind == F_RAGGED) {
            lf->offs_off = pos;
            pos = stk__align_up(pos + (B + 1) * 8, 64);
        }
    }
    ld->slot_bytes = STK__MAX(pos, (uint64_t)64);

    /* Backend.  A planned loader reads nothing: no descriptors, no rings. */
    ld->backend = plan_only ? STK_BACKEND_MMAP : opts->backend;
    double resident = plan_only ? 1.0 : stk_dataset_resident(ds);
    ld->fits = resident >= 0.9 || fits_in_memory(ds, resident);
    ld->warm_up = !plan_only && want_warm_up(ds, opts, ld->backend, resident, ld->fits);
    if (ld->backend == STK_BACKEND_AUTO) {
        if (!opts->direct && (resident >= 0.9 || ld->warm_up)) ld->backend = STK_BACKEND_MMAP;
        else ld->backend = stk__io_uring_available() ? STK_BACKEND_URING : STK_BACKEND_POOL;
    } else if (ld->backend == STK_BACKEND_URING && !stk__io_uring_available()) {
        rc = stk__err(err, -ENOSYS, "backend: io_uring is not available on this system");
        goto fail;
    }
    /* Block order over data that does not fit in memory reads its groups
     * with O_DIRECT: nothing it reads stays in the page cache long enough
     * to be read again, and under a memory limit (a cgroup) the page cache
     * competes with the group buffers for the same bytes. */
    if (opts->order == STK_ORDER_BLOCK && !plan_only && !ld->fits && !opts->direct &&
        ld->backend != STK_BACKEND_MMAP && !ds->in_place) {
        ld->opt.direct = 1;
        ld->auto_direct = true;
    }
    rc = open_files(ld, err);
    if (rc == -EINVAL && ld->auto_direct) { /* a file system without O_DIRECT */
        stk__files_close(&ld->files);
        ld->opt.direct = 0;
        ld->auto_direct = false;
        rc = open_files(ld, err);
    }
    if (rc) goto fail;
    if (opts->verify) {
        ld->verified_off = stk__calloc(ds->nshards + 1, sizeof *ld->verified_off);
        if (!ld->verified_off) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < ds->nshards; i++)
            ld->verified_off[i + 1] = ld->verified_off[i] + (ds->shards[i].nblocks + 63) / 64;
        ld->verified_words = ld->verified_off[ds->nshards];
        ld->verified = stk__calloc(ld->verified_words + 1, sizeof *ld->verified);
        if (opts->on_error == STK_ON_ERROR_SKIP)
            ld->bad = stk__calloc(ld->verified_words + 1, sizeof *ld->bad);
        if (!ld->verified || (opts->on_error == STK_ON_ERROR_SKIP && !ld->bad)) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
    }

    /* Threads. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    ld->nw = opts->threads ? opts->threads : (int)STK__MIN(STK__MAX(ncpu, 1L), (long)MAX_WORKERS);
    /* Block order with real reads gets a thread that reads groups ahead. */
    bool reader = opts->order == STK_ORDER_BLOCK && !plan_only && ld->backend != STK_BACKEND_MMAP;
    stk__files_share(&ld->files, (unsigned)ld->nw + reader);
    stk__trace_init(&ld->trace, ld->nw + 1 + reader, reader ? ld->nw : -1);

    /* Block order: block size in samples, and group buffers. */
    /* The budget never takes more than half of what memory (and the
     * process's cgroup) has room for: a loader that fills its cgroup with
     * its own buffers leaves the page cache nothing to read into. */
    uint64_t budget = opts->memory_budget, groups_bytes = 0;
    uint64_t room = plan_only ? 0 : stk__mem_room();
    if (room && budget > room / 2) budget = room / 2;
    if (opts->order == STK_ORDER_BLOCK) {
        /* A planned loader takes the samples of each batch one by one:
         * groups are a way of reading, and it reads nothing. */
        ld->use_groups = !plan_only;
        if (ld->space.windows) {
            uint64_t per_sample = 0;
            for (size_t i = 0; i < ld->nf; i++)
                if (ld->f[i].kind == F_TIME) per_sample += opts->stride * ld->f[i].fi->row_bytes;
            /* Consecutive windows advance by `stride` rows; a block of B
             * windows spans about B * stride rows plus one window. */
            uint64_t win = 0;
            for (size_t i = 0; i < ld->nf; i++)
                if (ld->f[i].kind == F_TIME) win += ld->space.L * ld->f[i].fi->row_bytes;
            per_sample = STK__MAX(per_sample, (uint64_t)1);
            ld->block_samples = opts->block_bytes > win ? (opts->block_bytes - win) / per_sample + 1 : 1;
        } else {
            uint64_t avg = 0;
            for (size_t s = 0; s < ds->nshards; s++)
                avg += ds->shards[s].data_end - ds->shards[s].data_off;
            avg = ds->nrec ? avg / ds->nrec : 1;
            ld->block_samples = STK__MAX(opts->block_bytes / STK__MAX(avg, (uint64_t)1), (uint64_t)1);
        }
        if (opts->block_samples) ld->block_samples = opts->block_samples;
        /* A block larger than the epoch is the epoch, and a group of more
         * blocks than there are is all of them: clamped, so that the
         * order's arithmetic (group * K * B) cannot overflow and a group's
         * tables are sized by what exists, whatever the options say. */
        uint64_t n_all = STK__MAX(ld->space.n, (uint64_t)1);
        ld->block_samples = STK__MIN(ld->block_samples, n_all);
        uint64_t nb_all = (n_all + ld->block_samples - 1) / ld->block_samples;
        if ((uint64_t)ld->opt.block_group > nb_all) ld->opt.block_group = (uint32_t)nb_all;
        ld->ngroups = STK__MIN(MAX_GROUP_SLOTS, ld->nw + 2);
        /* The largest group: K blocks, each as large as the largest block. */
        set_epoch_locked(ld, opts->seed, opts->epoch, 0);
        uint64_t nblocks = ld->order.nb, max_block = 0;
        group *tmp = stk__calloc(1, sizeof *tmp);
        if (!tmp) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        for (uint64_t b = 0; b < nblocks; b++) {
            tmp->nspans = 0;
            if (block_spans(ld, b, tmp)) {
                stk__free(tmp->spans);
                stk__free(tmp);
                rc = stk__err(err, -ENOMEM, "out of memory");
                goto fail;
            }
            uint64_t bytes = 0;
            for (size_t k = 0; k < tmp->nspans; k++)
                bytes += tmp->spans[k].hi - tmp->spans[k].lo + 2 * DIRECT_ALIGN + 64 +
                         (opts->verify ? 2 * (uint64_t)ds->block_size : 0);
            max_block = STK__MAX(max_block, bytes);
        }
        stk__free(tmp->spans);
        stk__free(tmp);
        ld->group_cap = stk__align_up(max_block * STK__MIN((uint64_t)opts->block_group,
                                                           STK__MAX(nblocks, (uint64_t)1)),
                                      DIRECT_ALIGN);
        if (ld->backend != STK_BACKEND_MMAP) {
            /* Fewer group buffers (two at least: the group in use and the
             * next) where the budget cannot hold one per worker and two. */
            while (ld->ngroups > 2 && ld->group_cap * (uint64_t)ld->ngroups > budget / 2)
                ld->ngroups--;
            groups_bytes = ld->group_cap * (uint64_t)ld->ngroups;
        }
    }

    ld->rec_check = opts->verify && !ld->use_groups && !ld->space.windows &&
                    opts->on_error == STK_ON_ERROR_RAISE && ld->nf == ds->nfields;
    for (size_t i = 0; i < ld->nf && ld->rec_check; i++)
        if (ld->f[i].f->codec != STK_CODEC_NONE || ld->f[i].fi->chunks || ld->f[i].fi->conv ||
            ld->f[i].fi->conv_varies)
            ld->rec_check = false;
    ld->gather = ld->backend == STK_BACKEND_MMAP && !plan_only && !ld->use_groups &&
                 !ld->space.windows;
    for (size_t i = 0; i < ld->nf && ld->gather; i++)
        if (ld->f[i].f->codec != STK_CODEC_NONE || ld->f[i].fi->chunks || ld->f[i].fi->conv ||
            ld->f[i].fi->conv_varies)
            ld->gather = false;
    if (ld->rec_check) {
        ld->lf_of = stk__calloc(ds->nfields, sizeof *ld->lf_of);
        if (!ld->lf_of) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < ld->nf; i++) ld->lf_of[ld->f[i].dsf] = i;
    }

    /* Ring size from what the budget leaves. */
    uint64_t stage_cap = 0;
    for (size_t i = 0; i < ld->nf; i++)
        if (ld->f[i].f->codec == STK_CODEC_ZSTD || ld->f[i].fi->chunks) {
            stage_cap += B * stk__align_up(ld->f[i].max_stored + 2 * DIRECT_ALIGN, 64);
        } else if (ld->f[i].fi->conv_varies || stk__conv_in_size(ld->f[i].fi->conv) > ld->f[i].fi->itemsize) {
            /* Narrowing conversions (f64 audio as f32) stage their stored
             * bytes: a window's rows at 8 bytes a sample, or the record. */
            uint64_t per = ld->f[i].kind == F_TIME
                               ? ld->space.L * (ld->f[i].fi->row_bytes / 4 * 8)
                               : ld->f[i].max_stored;
            stage_cap += B * stk__align_up(per + 2 * DIRECT_ALIGN, 64);
        }
    if (opts->direct && !ld->use_groups) stage_cap += ld->slot_bytes + B * ld->nf * 2 * DIRECT_ALIGN;
    stage_cap = stk__align_up(stage_cap, DIRECT_ALIGN);
    uint64_t fixed = groups_bytes + stage_cap * (uint64_t)ld->nw;
    uint64_t R = opts->prefetch;
    if (!R) {
        R = budget > fixed ? (budget - fixed) / ld->slot_bytes : 0;
        R = STK__MIN(R, (uint64_t)STK__MAX(8, 2 * ld->nw));
        if (R < 2) {
            rc = stk__err(err, -EINVAL,
                          "memory_budget: %llu bytes%s cannot hold two batch buffers of %llu "
                          "bytes%s%s (need at least %llu)%s",
                          (unsigned long long)budget,
                          budget < opts->memory_budget
                              ? " (half the memory this process has room for)"
                              : "",
                          (unsigned long long)ld->slot_bytes,
                          groups_bytes ? " besides the block groups' buffers" : "",
                          stage_cap ? " and staging" : "",
                          (unsigned long long)(fixed + 2 * ld->slot_bytes),
                          groups_bytes ? "; lower block_bytes or block_group (a group buffer "
                                         "holds block_group blocks of block_bytes)"
                                       : "");
            goto fail;
        }
    } else if (fixed + R * ld->slot_bytes > budget) {
        rc = stk__err(err, -EINVAL,
                      "memory_budget: %llu bytes cannot hold %llu batch buffers of %llu bytes "
                      "(prefetch) plus %llu for groups and staging",
                      (unsigned long long)budget, (unsigned long long)R,
                      (unsigned long long)ld->slot_bytes, (unsigned long long)fixed);
        goto fail;
    }
    ld->R = (uint32_t)R;
    ld->slots_cap = (uint32_t)R + MAX_EXTRA_SLOTS;
    ld->slots = stk__calloc(ld->slots_cap, sizeof *ld->slots);
    ld->slot_mem = stk__aligned_alloc(4096, (size_t)(R * stk__align_up(ld->slot_bytes, 4096)));
    if (!ld->slots || !ld->slot_mem) {
        rc = stk__err(err, -ENOMEM, "out of memory for %llu batch buffers of %llu bytes",
                      (unsigned long long)R, (unsigned long long)ld->slot_bytes);
        goto fail;
    }
    for (uint32_t i = 0; i < R; i++) {
        stk_batch *s = &ld->slots[i];
        s->ld = ld;
        s->mem = ld->slot_mem + i * stk__align_up(ld->slot_bytes, 4096);
        s->samples = stk__calloc(B, sizeof *s->samples);
        s->ragged_rows = stk__calloc(ld->nf, sizeof *s->ragged_rows);
        if (plan_only) s->plan = stk__calloc(B * ld->nf, sizeof *s->plan);
        if (!s->samples || !s->ragged_rows || (plan_only && !s->plan)) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (groups_bytes) {
        ld->group_mem = stk__aligned_alloc(DIRECT_ALIGN, (size_t)groups_bytes);
        if (!ld->group_mem) {
            rc = stk__err(err, -ENOMEM, "out of memory for block groups (%llu bytes)",
                          (unsigned long long)groups_bytes);
            goto fail;
        }
    }
    for (int i = 0; ld->use_groups && i < ld->ngroups; i++) {
        group *gr = stk__calloc(1, sizeof *gr + (ld->opt.block_group + 1) * sizeof(uint64_t));
        if (!gr) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        gr->buf = ld->group_mem ? ld->group_mem + (uint64_t)i * ld->group_cap : NULL;
        ld->groups[i] = gr;
    }

    set_epoch_locked(ld, opts->seed, opts->epoch, 0);
    ld->fingerprint = fingerprint(ld);
    if (ld->warm_up && (rc = warm_up_start(ld, err))) goto fail;

    for (int i = 0; i < ld->nw; i++) {
        worker *w = &ld->w[i];
        w->ld = ld;
        w->stage_cap = stage_cap;
        if (stage_cap && !(w->stage = stk__aligned_alloc(DIRECT_ALIGN, (size_t)stage_cap))) {
            rc = stk__err(err, -ENOMEM, "out of memory for staging");
            goto fail;
        }
        w->ids = stk__malloc(3 * B * sizeof *w->ids);
        w->ents = stk__malloc(B * sizeof *w->ents);
        w->shs = stk__malloc(B * sizeof *w->shs);
        w->slots = stk__malloc(B * sizeof *w->slots);
        if (!w->ents || !w->shs || !w->slots) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        if (opts->verify && ds->block_size &&
            !(w->blockbuf = stk__aligned_alloc(DIRECT_ALIGN, ds->block_size))) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        if (!w->ids || !(w->dctx = ZSTD_createDCtx())) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        if (ld->backend == STK_BACKEND_URING) rc = stk__io_uring_open(&ld->files, ld->opt.queue_depth, &w->io, err);
        else if (ld->backend == STK_BACKEND_POOL) rc = stk__io_pool_open(&ld->files, &w->io, err);
        else rc = stk__io_mmap_open(&ld->files, &w->io, err);
        if (rc) goto fail;
    }
    ld->has_reader = reader; /* (read by the workers from their start) */
    for (int i = 0; i < ld->nw; i++) {
        if ((rc = -pthread_create(&ld->w[i].tid, NULL, worker_main, &ld->w[i]))) {
            stk__err(err, rc, "cannot start a worker thread: %s", stk_strerror(rc));
            goto fail;
        }
        ld->w[i].started = 1;
    }
    if (reader) {
        worker *w = &ld->reader;
        w->ld = ld;
        rc = ld->backend == STK_BACKEND_URING
                 ? stk__io_uring_open(&ld->files, ld->opt.queue_depth, &w->io, err)
                 : stk__io_pool_open(&ld->files, &w->io, err);
        if (rc) goto fail;
        if ((rc = -pthread_create(&w->tid, NULL, reader_main, w))) {
            stk__err(err, rc, "cannot start the group reader thread: %s", stk_strerror(rc));
            goto fail;
        }
        w->started = 1;
    }
    stk__free(max_rows);
    *out = ld;
    return 0;
fail:
    stk__free(max_rows);
    stk_loader_close(ld);
    return rc;
}

/* ---- consumer side ---- */

int stk_loader_next(stk_loader *ld, stk_batch **out, stk_error *err) {
    return stk_loader_next_timeout(ld, out, -1, err);
}

int stk_loader_next_timeout(stk_loader *ld, stk_batch **out, int64_t timeout_ms,
                            stk_error *err) {
    if (!ld || !out) return stk__err(err, -EINVAL, "stk_loader_next: NULL argument");
    struct timespec deadline;
    if (timeout_ms >= 0) stk__deadline(timeout_ms, &deadline);
    *out = NULL;
    uint64_t t0 = span_open(ld, STK__EV_NEXT);
    int rc = 0;
    pthread_mutex_lock(&ld->mu);
    ld->st_wait_n++;
    uint64_t ready = 0;
    for (uint32_t i = 0; i < ld->R; i++)
        ready += ld->slots[i].state == S_READY && ld->slots[i].gen == ld->gen;
    ld->st_ready_sum += ready;
    for (;;) {
        if (ld->failed) {
            rc = ld->failed;
            if (err) *err = ld->ferr;
            break;
        }
        if (ld->next_take >= ld->nbatches) {
            rc = STK_END;
            break;
        }
        stk_batch *found = NULL;
        uint32_t held = 0;
        for (uint32_t i = 0; i < ld->R; i++) {
            stk_batch *s = &ld->slots[i];
            held += s->state == S_HELD;
            if (s->state == S_READY && s->gen == ld->gen && s->b == ld->next_take) found = s;
        }
        if (found) {
            if (found->err) {
                ld->failed = found->err;
                ld->ferr = found->e;
                found->state = S_FREE;
                pthread_cond_broadcast(&ld->cv);
                continue;
            }
            found->state = S_HELD;
            ld->next_take++;
            ld->st_batches++;
            ld->st_samples += found->n;
            *out = found;
            pthread_cond_broadcast(&ld->cv);
            break;
        }
        if (held == ld->R) {
            rc = stk__err(err, -EBUSY,
                          "every one of the %u batch buffers is held by the consumer; release "
                          "one before asking for the next batch",
                          ld->R);
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&ld->cv, &ld->mu);
        } else if (pthread_cond_timedwait(&ld->cv, &ld->mu, &deadline) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&ld->mu);
    uint64_t t1 = now_ns();
    ld->st_wait_ns += t1 - t0;
    span_add(ld, NULL, STK__EV_NEXT, t0, t1, *out ? (*out)->b : STK__EV_NONE, STK__EV_NONE);
    return rc;
}

int stk_loader_add_buffer(stk_loader *ld, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    pthread_mutex_lock(&ld->mu);
    int rc = 0;
    if (ld->R >= ld->slots_cap) {
        rc = stk__err(err, -ENOSPC,
                      "the consumer holds %u batches; at most %u more buffers can be added",
                      ld->R, (unsigned)MAX_EXTRA_SLOTS);
    } else {
        stk_batch *s = &ld->slots[ld->R];
        memset(s, 0, sizeof *s);
        s->ld = ld;
        s->own_mem = stk__aligned_alloc(4096, (size_t)stk__align_up(ld->slot_bytes, 4096));
        s->samples = stk__calloc(ld->opt.batch_size, sizeof *s->samples);
        s->ragged_rows = stk__calloc(ld->nf, sizeof *s->ragged_rows);
        if (ld->plan_only) s->plan = stk__calloc((size_t)ld->opt.batch_size * ld->nf, sizeof *s->plan);
        if (!s->own_mem || !s->samples || !s->ragged_rows || (ld->plan_only && !s->plan)) {
            stk__free(s->own_mem);
            stk__free(s->samples);
            stk__free(s->ragged_rows);
            stk__free(s->plan);
            rc = stk__err(err, -ENOMEM, "out of memory for one more batch buffer (%llu bytes)",
                          (unsigned long long)ld->slot_bytes);
        } else {
            s->mem = s->own_mem;
            s->state = S_FREE;
            ld->R++;
            pthread_cond_broadcast(&ld->cv);
        }
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

int stk_loader_unget(stk_loader *ld, stk_batch *b) {
    if (!ld || !b) return -EINVAL;
    pthread_mutex_lock(&ld->mu);
    int rc = -EINVAL;
    if (b->state == S_HELD && b->gen == ld->gen && b->b + 1 == ld->next_take) {
        b->state = S_READY;
        ld->next_take--;
        rc = 0;
    }
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

void stk_loader_release(stk_loader *ld, stk_batch *b) {
    if (!ld || !b) return;
    pthread_mutex_lock(&ld->mu);
    if (b->state == S_HELD) b->state = S_FREE;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

uint32_t stk_batch_size(const stk_batch *b) { return b ? b->n : 0; }
uint64_t stk_batch_index(const stk_batch *b) { return b ? b->b : 0; }
const uint64_t *stk_batch_samples(const stk_batch *b) { return b ? b->samples : NULL; }

int stk_batch_field_get(const stk_batch *b, size_t i, stk_batch_field *out) {
    if (!b || !out || i >= b->ld->nf) return -EINVAL;
    const stk_loader *ld = b->ld;
    const lfield *lf = &ld->f[i];
    const stk_field *f = lf->f;
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    out->data = b->mem + lf->data_off;
    if (lf->kind == F_RAGGED) {
        out->ndim = f->ndim;
        out->shape[0] = (int64_t)b->ragged_rows[i];
        for (int d = 1; d < f->ndim; d++) out->shape[d] = f->shape[d];
        out->bytes = b->ragged_rows[i] * lf->fi->row_bytes;
        out->offsets = (const int64_t *)(b->mem + lf->offs_off);
        return 0;
    }
    out->shape[0] = b->n;
    if (lf->kind == F_TIME) {
        out->ndim = f->ndim + 1;
        out->shape[1] = (int64_t)ld->space.L;
        for (int d = 1; d < f->ndim; d++) out->shape[d + 1] = f->shape[d];
    } else {
        out->ndim = f->ndim + 1;
        for (int d = 0; d < f->ndim; d++) out->shape[d + 1] = f->shape[d];
    }
    out->bytes = (uint64_t)b->n * lf->sample_bytes;
    return 0;
}

size_t stk_loader_num_fields(const stk_loader *ld) { return ld ? ld->nf : 0; }

int stk_loader_find_field(const stk_loader *ld, const char *name) {
    if (!ld || !name) return -EINVAL;
    for (size_t i = 0; i < ld->nf; i++)
        if (strcmp(ld->f[i].f->name, name) == 0) return (int)i;
    return -ENOENT;
}

const stk_field *stk_loader_field(const stk_loader *ld, size_t i) {
    return ld && i < ld->nf ? ld->f[i].f : NULL;
}

uint64_t stk_loader_epoch_samples(const stk_loader *ld) { return ld ? ld->space.n : 0; }
uint64_t stk_loader_rank_samples(const stk_loader *ld) { return ld ? ld->deal.per_rank : 0; }
uint64_t stk_loader_rank_batches(const stk_loader *ld) { return ld ? ld->nbatches : 0; }

int stk_loader_count(stk_dataset *ds, const stk_loader_options *opts, uint64_t *epoch_samples,
                     uint64_t *rank_samples, uint64_t *rank_batches, stk_error *err) {
    stk_loader_options defaults;
    if (!opts) {
        stk_loader_options_init(&defaults);
        opts = &defaults;
    }
    if (!ds) return stk__err(err, -EINVAL, "stk_loader_count: NULL argument");
    int rc = check_options(ds, opts, err);
    if (rc) return rc;
    /* Only what the sample space and the dealing need: no files, buffers
     * or threads. */
    stk_loader *ld = stk__calloc(1, sizeof *ld);
    if (!ld) return stk__err(err, -ENOMEM, "out of memory");
    ld->ds = ds;
    if (!(rc = pick_fields(ld, opts, err)) && !(rc = build_space(ld, opts, err))) {
        stk__deal d;
        stk__deal_init(&d, ld->space.n, 0, opts->world_size, opts->rank, opts->pad != 0);
        stk__deal_split(&d, opts->batch_size, opts->split_count, opts->split_index);
        if (epoch_samples) *epoch_samples = ld->space.n;
        if (rank_samples) *rank_samples = d.per_rank;
        if (rank_batches) *rank_batches = deal_batches(&d, opts);
    }
    stk__space_free(&ld->space);
    stk__free(ld->f);
    stk__free(ld);
    return rc;
}
stk_backend stk_loader_backend(const stk_loader *ld) { return ld ? ld->backend : STK_BACKEND_AUTO; }
stk_order stk_loader_order(const stk_loader *ld) { return ld ? ld->opt.order : STK_ORDER_SEQUENTIAL; }
uint64_t stk_loader_sample_bytes(const stk_loader *ld) { return ld ? mean_sample_bytes(ld) : 0; }

/* Moves to a new (seed, epoch, start); waits for no worker. */
static int reposition(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start,
                      stk_error *err) {
    pthread_mutex_lock(&ld->mu);
    int rc = ld->failed;
    if (rc) {
        if (err) *err = ld->ferr;
        pthread_mutex_unlock(&ld->mu);
        return rc;
    }
    for (uint32_t i = 0; i < ld->R; i++)
        if (ld->slots[i].state == S_READY) ld->slots[i].state = S_FREE;
    /* Every block is checked again in the new epoch. */
    atomic_store(&ld->any_verified, false);
    for (uint64_t i = 0; i < ld->verified_words; i++) atomic_store(&ld->verified[i], 0);
    set_epoch_locked(ld, seed, epoch, start);
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

int stk_loader_set_epoch(stk_loader *ld, uint64_t epoch, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    return reposition(ld, ld->seed, epoch, 0, err);
}

void stk_loader_save(const stk_loader *ld, stk_loader_state *st) {
    stk_loader *l = (stk_loader *)ld;
    pthread_mutex_lock(&l->mu);
    uint64_t taken = ld->next_take;
    pthread_mutex_unlock(&l->mu);
    stk__loader_save_at(ld, taken, st);
}

void stk__loader_save_at(const stk_loader *ld, uint64_t taken, stk_loader_state *st) {
    stk_loader *l = (stk_loader *)ld;
    pthread_mutex_lock(&l->mu);
    /* Rank-level samples consumed: with a split of the batches, the
     * batches of the other parts before this one's next are counted too,
     * so that restoring (with the same split) resumes at this part's next
     * batch. */
    uint64_t consumed = ld->deal.parts > 1
                            ? taken * ld->deal.parts * ld->opt.batch_size
                            : STK__MIN(taken * ld->opt.batch_size, ld->deal.per_rank);
    st->seed = ld->seed;
    st->epoch = ld->epoch;
    st->position = STK__MIN(ld->deal.start + STK__MIN(consumed, ld->deal.rank_count) * ld->deal.world,
                            ld->space.n);
    st->fingerprint = ld->fingerprint;
    pthread_mutex_unlock(&l->mu);
}

int stk_loader_restore(stk_loader *ld, const stk_loader_state *st, stk_error *err) {
    if (!ld || !st) return stk__err(err, -EINVAL, "NULL argument");
    if (st->fingerprint != ld->fingerprint)
        return stk__err(err, -EINVAL,
                        "state: it was saved by a loader over other data or with another "
                        "sample space or order (fingerprint %016llx, this loader %016llx)",
                        (unsigned long long)st->fingerprint, (unsigned long long)ld->fingerprint);
    if (st->position > ld->space.n)
        return stk__err(err, -EINVAL, "state: position %llu is past the epoch's %llu samples",
                        (unsigned long long)st->position, (unsigned long long)ld->space.n);
    return reposition(ld, st->seed, st->epoch, st->position, err);
}

/* ---- for the GPU stage (pipeline.h) ---- */

const stk__plan *stk__batch_plan(const stk_batch *b, size_t *n) {
    *n = b ? b->nplan : 0;
    return b ? b->plan : NULL;
}

uint8_t *stk__batch_mem(const stk_batch *b) { return b ? b->mem : NULL; }

void stk__loader_ring(const stk_loader *ld, void **mem, size_t *bytes) {
    /* The buffers made at open; those added later (add_buffer) own theirs. */
    uint32_t made = ld->slots_cap - MAX_EXTRA_SLOTS;
    *mem = ld->slot_mem;
    *bytes = (size_t)made * (size_t)stk__align_up(ld->slot_bytes, 4096);
}

uint64_t stk__loader_slot_bytes(const stk_loader *ld) { return ld->slot_bytes; }

size_t stk__loader_field_dsf(const stk_loader *ld, size_t i) { return ld->f[i].dsf; }

/* ---- tracing ---- */

uint64_t stk_now_ns(void) { return stk__now_ns(); }

int stk_loader_trace_start(stk_loader *ld, uint32_t max_spans, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_trace_start: NULL loader");
    return stk__trace_start(&ld->trace, max_spans, err);
}

void stk_loader_trace_stop(stk_loader *ld) {
    if (ld) stk__trace_stop(&ld->trace);
}

int stk_loader_trace_span(stk_loader *ld, const char *name, uint64_t t0_ns, uint64_t t1_ns) {
    if (!ld || !name || t1_ns < t0_ns) return -EINVAL;
    if (stk__tracing(&ld->trace))
        stk__trace_add(&ld->trace, ld->trace.nbufs - 1, STK__EV_USER, t0_ns, t1_ns, STK__EV_NONE,
                       STK__EV_NONE, name);
    return 0;
}

int stk_loader_trace_write(stk_loader *ld, const char *path, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_trace_write: NULL loader");
    return stk__trace_write(&ld->trace, path, err);
}

void stk_loader_stats_get(const stk_loader *ld, stk_loader_stats *o) {
    memset(o, 0, sizeof *o);
    if (!ld) return;
    o->plan = (stk_stage_stats){ld->st_plan_n, 0, ld->st_plan_ns};
    o->io = (stk_stage_stats){ld->st_io_n, ld->st_io_bytes, ld->st_io_ns};
    o->assemble = (stk_stage_stats){ld->st_asm_n, ld->st_asm_bytes, ld->st_asm_ns};
    o->wait = (stk_stage_stats){ld->st_wait_n, 0, ld->st_wait_ns};
    o->verify = (stk_stage_stats){ld->st_ver_n, ld->st_ver_bytes, ld->st_ver_ns};
    o->skipped = ld->st_skipped;
    o->batches = ld->st_batches;
    o->samples = ld->st_samples;
    o->elapsed_ns = now_ns() - ld->st_t0;
    o->ready_sum = ld->st_ready_sum;
    o->ring_slots = ld->R;
    o->threads = (uint32_t)ld->nw;
    o->groups_loaded = ld->st_groups;
    uint64_t m = 0;
    for (int i = 0; i < ld->nw; i++)
        if (ld->w[i].io) m = STK__MAX(m, ld->w[i].io->max_inflight);
    o->max_inflight = m;
    bool done;
    stk__warm_stats(ld->warm, &o->warm_up.count, &o->warm_up.bytes, &o->warm_up.busy_ns, &done);
    o->warm_up_bytes = ld->warm_total;
    o->warm_up_done = done;
}

uint64_t stk_loader_last_skip(stk_loader *ld, stk_error *out) {
    if (!ld) return 0;
    pthread_mutex_lock(&ld->mu);
    if (out) *out = ld->last_skip;
    uint64_t n = ld->st_skipped;
    pthread_mutex_unlock(&ld->mu);
    return n;
}

void stk_loader_stats_reset(stk_loader *ld) {
    if (!ld) return;
    ld->st_plan_n = ld->st_plan_ns = ld->st_io_n = ld->st_io_bytes = ld->st_io_ns = 0;
    ld->st_asm_n = ld->st_asm_bytes = ld->st_asm_ns = ld->st_wait_n = ld->st_wait_ns = 0;
    ld->st_batches = ld->st_samples = ld->st_ready_sum = ld->st_groups = 0;
    ld->st_ver_n = ld->st_ver_bytes = ld->st_ver_ns = 0;
    ld->st_skipped = 0;
    ld->st_t0 = now_ns();
}

/* Joins the threads once (stk_loader_stop, then stk_loader_close). */
static void join_threads(stk_loader *ld) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    ld->gen++;
    pthread_cond_broadcast(&ld->cv);
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

void stk_loader_stop(stk_loader *ld) {
    if (!ld) return;
    join_threads(ld);
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

void stk_loader_close(stk_loader *ld) {
    if (!ld) return;
    /* Workers waiting for the warm-up are let go when it stops; it is freed
     * once they are gone, and before what its callback uses is. */
    join_threads(ld);
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
        ZSTD_freeDCtx(w->dctx);
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
        }
    stk__free(ld->slots);
    stk__free(ld->slot_mem);
    stk__files_close(&ld->files);
    stk__space_free(&ld->space);
    stk__free((void *)ld->verified);
    stk__free((void *)ld->bad);
    stk__free(ld->verified_off);
    stk__free(ld->f);
    stk__free(ld->lf_of);
    stk__trace_free(&ld->trace);
    stk__free(ld->warm_ranges);
    pthread_mutex_destroy(&ld->mu);
    pthread_mutex_destroy(&ld->chk_mu);
    pthread_cond_destroy(&ld->cv);
    stk__free(ld);
}
