/*
 * loader.h: the loader's insides, shared by the files of src/pipeline/ and
 * by no one else (the GPU stage sees pipeline.h, users see stoker.h).
 *
 * Worker threads turn this rank's batches, in any order among themselves,
 * into filled buffers of a ring; the consumer takes them in batch order.
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
 *
 * The files:
 *   options.c  defaults, option checks, the fields, and what open decides
 *              from them (backend, warm-up, budget, read paths, ring size)
 *   open.c     open, step by step; stop and close; counting without opening
 *   ring.c     the consumer's side: next, release, unget, add_buffer, batch
 *              fields; epochs, save and restore; the GPU stage's hooks
 *   fill.c     a worker: claiming a batch and filling it (planned reads,
 *              posts, warm-up waits)
 *   gather.c   whole small records gathered from the mapping
 *   groups.c   block order: spans, group buffers, the reader thread, and
 *              batches cut from groups
 *   checks.c   read-time checksums of blocks and records, damaged blocks,
 *              substitution under on_error = skip
 *   stats.c    statistics, the last skip, tracing
 *
 * Functions shared between the files are named stk__ld_*; the types and
 * constants below keep short names, as this header reaches no other file.
 */
#ifndef STK_PIPELINE_LOADER_H
#define STK_PIPELINE_LOADER_H

#include "../format/format.h"
#include "../core/hash.h"
#include "../io/io.h"
#include "../sample/sample.h"
#include "../trace/trace.h"
#include "../cuda/cuda.h"
#include "../media/media.h"
#include "pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <zstd.h>

/* Worker threads: at most MAX_WORKERS; by default one per CPU up to
 * DEFAULT_WORKERS, which keep a device busy with reads and copies, or up
 * to MAX_WORKERS where media fields are decoded (a JPEG a millisecond a
 * core: decoding needs every core a machine has). */
#define MAX_WORKERS 64
#define DEFAULT_WORKERS 8
#define MAX_GROUP_SLOTS (MAX_WORKERS + 2)
#define MAX_EXTRA_SLOTS 1024
#define DIRECT_ALIGN 4096u
/* Random copies prefetch their sources this many samples (or copies)
 * ahead, the first PREFETCH_LINES cache lines of each; see gather.c. */
#define AHEAD 8
#define AHEAD_E 16 /* index entries: twice as far, the record's address needs them */
#define PREFETCH_LINES 16 /* 1 KiB; the hardware follows the rest of a longer record */
/* A consumer spins for a batch being filled (stk__loader_next) where
 * batches take at most SPIN_MAX_NS to fill, for up to 1.5 times that. */
#define SPIN_MAX_NS (200 * 1000)

enum { F_TIME, F_DENSE, F_RAGGED };
enum { S_FREE, S_FILLING, S_READY, S_HELD };
enum { G_EMPTY, G_LOADING, G_READY, G_FAILED };
enum { POST_NONE, POST_COPY, POST_ZSTD, POST_CONV, POST_CHUNK, POST_MEDIA };
/* A batch met a record whose media does not decode, under on_error = skip:
 * it is filled again (the record is now known to be damaged). */
#define REFILL_MEDIA (-100000)

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
    uint64_t sum_stored;   /* stored bytes of every record (media: their mean
                            * sizes the staging area) */
    const stk_decode *dec; /* a media field decoded into the batch (F_DENSE
                            * of the decoded shape), or NULL */
} lfield;

struct stk_batch {
    stk_loader *ld;
    int device;  /* -1: a buffer of the ring; else a device batch's view
                  * (stk__batch_view_new), whose mem is device memory */
    int state;
    uint64_t b;
    uint64_t first; /* the rank's index of its first sample (b * batch_size) */
    uint64_t gen;
    uint32_t n;
    uint8_t *mem;
    uint64_t *samples;
    uint64_t *ragged_rows; /* per loader field */
    uint32_t *sources;     /* a mixture's batch: each sample's source */
    uint8_t *own_mem;      /* buffers added after open own their memory */
    stk__plan *plan;       /* planned loader: the batch's pieces */
    size_t nplan;
    /* A draw (stk__loader_draw): sample j goes to lane lanes[j] of a batch
     * laid out as this loader's fields are (a mixture's), whose ragged
     * fields' offsets are already set; NULL: sample j to lane j. */
    const uint32_t *lanes;
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
    int rc;              /* G_FAILED: why, for the batch that needs it */
    stk_error err;
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
    int conv;         /* POST_CONV: the conversion (the shard's);
                       * POST_MEDIA: the loader field (its decode) */
} post;

/* (On cache lines of its own: each worker writes its own every batch.) */
typedef struct worker {
    _Alignas(64) stk_loader *ld; /* (aligns the structure, not only ld) */
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
    uint64_t hashes;     /* records it hashed (gather.c: which ones are timed) */
    uint64_t *draw_rows; /* per field: a draw's ragged rows (see stk_batch.lanes) */
    bool drew;           /* order and deal hold epoch drew_epoch's (a draw's) */
    uint64_t drew_epoch;
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
    uint64_t epoch;
    uint64_t seed;
    stk__media_ctx media; /* media fields: the decoders' state */
    uint64_t skips;       /* samples this fill of a batch replaced (undone
                           * when the batch is filled again: REFILL_MEDIA) */
} worker;

struct stk_loader {
    stk_dataset *ds;
    /* A mixture's loader (pipeline.h, stk__loader_open_hooked): its
     * workers call hook for each batch instead of reading; its fields are
     * those of another loader; mix is the mixture that src/api sends epochs
     * and state to.  own_fields: the fields renamed (opts.names). */
    stk__fill_fn hook;
    void *hook_ctx;
    bool want_sources; /* its batches carry sources (a mixture's) */
    stk_field *own_fields;
    stk_decode *decs; /* media fields' decodes (opts.decode), one per lfield
                       * with one (lfield.dec points here) */
    /* on_error = skip with media fields: a bit per record whose media did
     * not decode (found as batches decode them), and the last such error;
     * a batch that meets a new one is filled again, the record now failing
     * its checks (stk__ld_sample_ok) and replaced as a damaged one is. */
    _Atomic uint64_t *media_bad;
    stk_error media_err;      /* under mu, with the record it names */
    uint64_t media_err_rec;
    void *mix;
    /* The loaders that read for a hooked one (its mixture's sources): their
     * statistics count as its own (stats.c); consumed: the consumer takes
     * their batches (a mixture's handed out homogeneous ones). */
    stk_loader *const *parts;
    size_t nparts;
    bool parts_consumed;
    struct stk__gpu *gpu; /* device >= 0: the GPU stage batches go through;
                           * set by src/gpu, used by src/api, never here */
    stk_loader_options opt;
    lfield *f;
    size_t nf;
    stk__space space;
    uint64_t fingerprint;
    int valid_dsf; /* the validity rule's field (dataset index), or -1 */
    stk__rule rules[STK__MAX_RULES]; /* every validity rule, resolved */
    size_t nrules;
    uint64_t block_samples;
    uint64_t max_group_bytes;

    /* Epoch state: changes only under mu, with gen. */
    stk__order order;
    stk__deal deal;
    uint64_t seed, epoch;
    uint64_t streams; /* this epoch's (opt.streams, or a restored state's) */
    uint64_t nbatches;
    uint64_t gen;
    /* A lazy (remote) dataset's read-ahead: batches (block order: groups)
     * announced to it ahead of their fill, up to ahead_n past the one being
     * filled; ahead_next is the next to announce (under mu, reset with
     * each epoch). */
    uint64_t ahead_n, ahead_next;

    stk_batch *slots;
    uint32_t R;
    uint64_t slot_bytes;
    uint64_t stage_fixed; /* a worker's staging for all but media fields (a
                           * media field's is its batch's records' sizes:
                           * the area grows to them, fill.c) */
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
     * prefetching (gather.c), not planned as reads. */
    bool gather;
    bool plan_only; /* batches carry plans, not data (pipeline.h) */
    bool drawn;     /* no ring or threads: drawn from (stk__loader_draw) */
    group *groups[MAX_GROUP_SLOTS];
    int ngroups;
    uint8_t *group_mem;
    uint64_t group_cap;

    worker w[MAX_WORKERS];
    worker reader;   /* block order with real reads: reads groups ahead */
    bool has_reader;
    int nw;
    pthread_mutex_t mu;
    /* cv: the threads' waits (a free buffer, a group, the loader's state);
     * cv_ready: the consumer's, woken when the batch it takes next is
     * ready and when the state moves (epoch, stop), not by every batch
     * a worker finishes (stk__ld_wake). */
    pthread_cond_t cv, cv_ready;
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
    /* Checks of blocks as the warm-up brings them in
     * (stk__ld_check_arrived_block): its ranges, where the checks got to
     * (under chk_mu), and the generation they count for (a copy of gen read
     * without mu). */
    stk__range *warm_ranges;
    size_t nwarm_ranges, chk_range;
    uint64_t chk_block;
    pthread_mutex_t chk_mu;
    _Atomic uint64_t warm_gen;
    /* Batches made ready so far: a consumer may spin on it for a while
     * (`spin`: when the workers leave a CPU free) rather than sleep and be
     * woken; fill_ns: how long a batch takes to fill (under mu). */
    _Atomic uint64_t readied;
    bool spin;
    uint64_t fill_ns;

    /* Statistics. */
    /* Read-time verification: one bit per checksum block of every shard,
     * set once the block has been checked in the current epoch. */
    _Atomic uint64_t *verified;
    uint64_t *verified_off; /* first word of each shard's bitmap */
    uint64_t verified_words;
    /* Whether any bit may be set this epoch: while none is, a record's
     * check need not look its blocks up (two divisions a record). */
    atomic_bool any_verified;
    /* on_error = skip: blocks found damaged, samples replaced, the last
     * replacement's reason (under mu). */
    _Atomic uint64_t *bad;
    _Atomic uint64_t st_skipped;
    stk_error last_skip;
    stk__trace trace; /* spans per thread, when asked for (trace/trace.c) */
    /* The series (stk_loader_series_start), kept by the consumer thread in
     * stk_loader_next: NULL while none is asked for.  series_now counts
     * from the series' start at series_t0; a point is added when a batch
     * is taken series_every ns after the last one (the spacing asked for,
     * series_every0, doubled at each thinning). */
    stk_series_point *series;
    uint32_t series_n, series_cap;
    uint64_t series_t0, series_every0, series_every;
    stk_series_point series_now;
    bool nvtx;        /* NVTX ranges for the stages (under Nsight; cuda/cuda.h) */
    /* The workers' counters and the consumer's, each group on lines of its
     * own (the alignment is on each group's first member: on a declaration
     * it would align every name it declares): a worker's atomic addition
     * to a line the consumer has just written waits for the line to come
     * back from the consumer's CPU. */
    _Alignas(64) _Atomic uint64_t st_plan_n;
    _Atomic uint64_t st_plan_ns, st_io_n, st_io_bytes, st_io_ns, st_asm_n, st_asm_bytes,
        st_asm_ns, st_ver_n, st_ver_bytes, st_ver_ns, st_groups, st_dec_n, st_dec_bytes,
        st_dec_ns;
    _Alignas(64) _Atomic uint64_t st_wait_n;
    _Atomic uint64_t st_wait_ns, st_batches, st_samples, st_ready_sum, st_inflight;
    uint64_t st_t0;
};

/* ---- spans ---- */

/* Spans.  stk__ld_span_open marks a stage's start: it returns the time and,
 * under an NVTX tool, opens a range of the same name.  stk__ld_span_add
 * records the finished span when tracing is on (trace/trace.c) and closes
 * its range.  Every span_add of an opened kind follows its span_open; a
 * stage that returns early on an error leaves its range open, and the
 * batch's end closes every range its thread opened since (fill.c,
 * worker_main).  The ranges' names are in stats.c. */
extern const char *const stk__ld_nvtx_names[STK__EV_KINDS];

static inline uint64_t stk__ld_span_open(const stk_loader *ld, stk__ev_kind kind) {
    if (STK__UNLIKELY(ld->nvtx)) stk__nvtx_push(stk__ld_nvtx_names[kind]);
    return stk__now_ns();
}

static inline void stk__ld_span_add(stk_loader *ld, const struct worker *w, stk__ev_kind kind,
                                    uint64_t t0, uint64_t t1, uint64_t a0, uint64_t a1) {
    if (STK__UNLIKELY(stk__tracing(&ld->trace)))
        stk__trace_add(&ld->trace,
                       !w ? ld->trace.nbufs - 1 : w == &ld->reader ? ld->nw : (int)(w - ld->w),
                       kind, t0, t1, a0, a1, NULL);
    if (STK__UNLIKELY(ld->nvtx) && stk__ld_nvtx_names[kind][0] && kind != STK__EV_BATCH)
        stk__nvtx_pop();
}

/* ---- checksum block marks (checks.c, groups.c) ---- */

static inline bool stk__ld_block_checked(const stk_loader *ld, size_t si, uint64_t b) {
    _Atomic uint64_t *word = &ld->verified[ld->verified_off[si] + b / 64];
    return atomic_load_explicit(word, memory_order_relaxed) & (UINT64_C(1) << (b % 64));
}

static inline bool stk__ld_block_bad(const stk_loader *ld, size_t si, uint64_t b) {
    if (!ld->bad) return false;
    _Atomic uint64_t *word = &ld->bad[ld->verified_off[si] + b / 64];
    return atomic_load_explicit(word, memory_order_relaxed) & (UINT64_C(1) << (b % 64));
}

static inline void stk__ld_mark_bad(stk_loader *ld, size_t si, uint64_t b) {
    if (ld->bad)
        atomic_fetch_or(&ld->bad[ld->verified_off[si] + b / 64], UINT64_C(1) << (b % 64));
}

/* ---- the hot helpers of every fill path (fill.c, gather.c, groups.c) ---- */

static inline void stk__ld_prefetch(const uint8_t *p, uint64_t n) {
    n = STK__MIN(n, (uint64_t)PREFETCH_LINES * 64);
    for (uint64_t k = 0; k < n; k += 64) {
        __builtin_prefetch(p + k);
        /* GCC 12 deletes a loop of prefetches whose bound comes from memory
         * as if it did nothing; an empty asm that uses k keeps it. */
        __asm__ __volatile__("" : : "r"(k));
    }
}

/* The lane of a batch that sample j of a fill goes to. */
static inline uint32_t stk__ld_lane(const stk_batch *s, uint32_t j) {
    return STK__UNLIKELY(s->lanes != NULL) ? s->lanes[j] : j;
}

/* Where field lf of sample j (index entry e, first row t) comes from and
 * where it goes: its stored bytes are *len bytes at file offset *off, they
 * decode to *raw bytes at the returned place in the slot.  A ragged field
 * appends after *rows_done rows and records the sample's offset (in a
 * draw, goes where its lane's offset, set beforehand, says). */

static STK__ALWAYS_INLINE uint8_t *stk__ld_place(const stk_loader *ld, const lfield *lf,
                                                 stk_batch *s, uint32_t j, const stk__shard *sh,
                                                 const uint64_t *e, uint64_t t,
                                                 uint64_t *rows_done, uint64_t *off,
                                                 uint64_t *len, uint64_t *raw) {
    j = stk__ld_lane(s, j);
    *off = stk__e_off(ld->ds, sh, e, lf->dsf);
    *len = stk__e_len(ld->ds, sh, e, lf->dsf);
    uint64_t rows = stk__e_rows(ld->ds, sh, e, lf->dsf);
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
        /* (A media field's stored bytes are its record's, whole.) */
        *raw = lf->sample_bytes;
        return s->mem + lf->data_off + j * lf->sample_bytes;
    }
    int64_t *offs = (int64_t *)(s->mem + lf->offs_off);
    if (s->lanes) { /* (j is the lane: the offsets are set) */
        *raw = rows * lf->fi->row_bytes;
        *rows_done += rows;
        return s->mem + lf->data_off + (uint64_t)offs[j] * lf->fi->row_bytes;
    }
    uint8_t *dst = s->mem + lf->data_off + *rows_done * lf->fi->row_bytes;
    *raw = rows * lf->fi->row_bytes;
    offs[j] = (int64_t)*rows_done;
    *rows_done += rows;
    return dst;
}

/* ---- options.c ---- */

int stk__ld_pick_fields(stk_loader *ld, const stk_loader_options *o, stk_error *err);
void stk__ld_field_maxima(stk_loader *ld, uint64_t *max_rows);
uint64_t stk__ld_fingerprint(const stk_loader *ld);
/* The validity rules of checked options, resolved into out (room for
 * STK__MAX_RULES): valid_field's first, then valid_rules.  Returns how
 * many. */
size_t stk__ld_rules(const stk_dataset *ds, const stk_loader_options *o, stk__rule *out);
uint64_t stk__ld_mean_sample_bytes(const stk_loader *ld);
int stk__ld_choose_backend(stk_loader *ld, const stk_loader_options *o, stk_error *err);
uint64_t stk__ld_budget(const stk_loader *ld, const stk_loader_options *o);
int stk__ld_choose_paths(stk_loader *ld, const stk_loader_options *o, stk_error *err);
uint64_t stk__ld_stage_bytes(stk_loader *ld, const stk_loader_options *o);
int stk__ld_ring_size(const stk_loader *ld, const stk_loader_options *o, uint64_t budget,
                      uint64_t groups_bytes, uint64_t stage_cap, uint64_t *R, stk_error *err);

/* ---- ring.c ---- */

/* Moves the loader to (seed, epoch) from global position `start`: a new
 * order and dealing, a new generation.  Called with mu held, or before the
 * threads start. */
void stk__ld_set_epoch_locked(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start);
/* The order and dealing of (seed, epoch) from `start` over `streams`. */
void stk__ld_epoch_order(const stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start,
                         uint64_t streams, stk__order *order, stk__deal *deal);
/* Forgets which blocks were checked: each is checked again. */
void stk__ld_forget_checks(stk_loader *ld);
uint64_t stk__ld_deal_batches(const stk__deal *d, const stk_loader_options *o);

/* Wakes every wait on the loader: its threads' and the consumer's (the
 * loader's state moved).  Under mu. */
static inline void stk__ld_wake(stk_loader *ld) {
    pthread_cond_broadcast(&ld->cv);
    pthread_cond_broadcast(&ld->cv_ready);
}

/* ---- fill.c ---- */

int stk__ld_grow(void **p, size_t *cap, size_t need, size_t elem);
int stk__ld_do_posts(stk_loader *ld, worker *w, size_t np, stk_error *err);
void *stk__ld_worker_main(void *arg);

/* ---- gather.c ---- */

/* Record rec's index entry, and its shard in *si. */
static inline const uint64_t *stk__ld_record_entry(const stk_dataset *ds, uint64_t rec,
                                                   uint32_t *si) {
    size_t i = stk__dataset_shard_of(ds, rec);
    *si = (uint32_t)i;
    return stk__entry(ds, &ds->shards[i], rec - ds->shards[i].first);
}

int stk__ld_gather_records(stk_loader *ld, worker *w, stk_batch *s, const uint64_t *recs,
                           bool check, stk_error *err);

/* A joint draw's scratch (pipeline.h).  The batch's samples are taken in
 * runs, one per source (a source's lanes in increasing order, as the
 * mixture groups them), and indexed by place in that sequence: per place,
 * its lane, record, shard and index entry; per run, its loader and where
 * it ends (so also how many samples each source gave); the last gather's
 * counts and times. */
typedef struct stk__joint_run {
    stk_loader *ld;
    uint32_t end; /* places a .. end - 1, a the last run's end */
} stk__joint_run;
struct stk__joint {
    uint32_t cap; /* places: the batch size */
    size_t k;     /* sources */
    uint32_t *lane;
    uint64_t *recs;
    uint32_t *shs;
    const uint64_t **ent;
    stk__joint_run *run; /* k */
    size_t nrun;
    uint64_t *tmp;  /* a piece's records (its sample ids) and first rows (2 x cap) */
    uint64_t *rows; /* per field, the batch view's ragged rows (none is ragged) */
    uint64_t hashed, nhashed; /* bytes and records the last gather hashed */
    uint64_t read_ns, ver_ns; /* its time, and the hashes' share */
    uint64_t hashes;          /* records hashed by every gather (which ones are timed) */
};

/* Gathers places 0 .. n - 1 of a joint draw (located in J) into s, whose
 * lanes are J's, in one pass, run by run: each record checked (when its
 * loader checks records) and copied. */
int stk__ld_gather_joint(stk__joint *J, stk_batch *s, uint32_t n, stk_error *err);

/* ---- groups.c ---- */

int stk__ld_block_spans(const stk_loader *ld, uint64_t blk, group *g);
/* Block order's shape: samples per block, and blocks per group clamped to
 * the blocks there are (the order depends on both). */
void stk__ld_block_shape(stk_loader *ld, const stk_loader_options *o);
/* Samples per block (block_bytes of reads, or as given), at most the epoch's. */
uint64_t stk__ld_block_samples(const stk_loader *ld, const stk_loader_options *o);
int stk__ld_size_groups(stk_loader *ld, const stk_loader_options *o, uint64_t budget,
                        uint64_t *groups_bytes, stk_error *err);
int stk__ld_alloc_groups(stk_loader *ld, uint64_t groups_bytes, stk_error *err);
bool stk__ld_group_prefetch(stk_loader *ld, worker *w, uint64_t ahead, bool first);
void *stk__ld_reader_main(void *arg);
int stk__ld_fill_groups(stk_loader *ld, worker *w, stk_batch *s, uint64_t *recs, uint64_t *ts,
                        const uint64_t *groups_of, const uint32_t *slots, uint64_t gen,
                        stk_error *err);

/* ---- checks.c ---- */

int stk__ld_checks_init(stk_loader *ld, const stk_loader_options *o, stk_error *err);
/* A lazy dataset under a cache budget: tells it every read of the epoch
 * from the loader's position on (stk_dataset.ensure_plan), so that it
 * evicts what is needed least soon.  Under mu. */
void stk__ld_plan_reads(stk_loader *ld);
/* A lazy dataset: announces the batches after b (block order: the groups
 * after g) up to ld->ahead_n ahead, those not announced yet this epoch,
 * so that their bytes are fetched in the background (not under mu). */
void stk__ld_announce_batches(stk_loader *ld, worker *w, uint64_t b, uint64_t gen);
/* Whether an epoch of this loader reads every record of the dataset: one
 * rank, one part, no validity rule, and no cache budget to spend on what
 * is fetched early. */
bool stk__ld_reads_whole(const stk_loader *ld);
void stk__ld_announce_groups(stk_loader *ld, worker *w, uint64_t g, uint64_t gen);
/* Up to which unit the batches (groups) after `at` are announced: [*from,
 * *to) to announce now, of `end` (UINT64_MAX: the epoch's batches), claimed
 * under mu.  false: nothing. */
bool stk__ld_ahead_claim(stk_loader *ld, uint64_t at, uint64_t end, uint64_t gen,
                         uint64_t *from, uint64_t *to);
void stk__ld_sample_span(const stk_loader *ld, uint64_t rec, uint64_t t0, uint64_t t1,
                         size_t *shard, uint64_t *lo, uint64_t *hi);
bool stk__ld_blocks_checked(const stk_loader *ld, size_t si, uint64_t x, uint64_t z);
int stk__ld_check_block(stk_loader *ld, size_t si, uint64_t b, const uint8_t *bytes,
                        uint64_t rec, stk_error *err);
int stk__ld_sample_ok(stk_loader *ld, worker *w, uint64_t rec, uint64_t t, stk_error *err);
int stk__ld_substitute(stk_loader *ld, worker *w, uint64_t p, uint64_t gstart, uint64_t gsize,
                       uint64_t *id, uint64_t *rec, uint64_t *t, stk_error *err);
int stk__ld_check_before(stk_loader *ld, worker *w, stk_batch *s, uint64_t *recs, uint64_t *ts,
                         stk_error *err);
int stk__ld_verify_samples(stk_loader *ld, worker *w, uint32_t n, const uint64_t *recs,
                           const uint64_t *ts, stk_error *err);
int stk__ld_check_records(stk_loader *ld, stk_batch *s, const uint64_t *recs, stk_error *err);
bool stk__ld_check_arrived_block(stk_loader *ld);

#endif
