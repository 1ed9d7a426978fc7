/*
 * sample.h: the sample space (records or windows), the orders of an epoch,
 * and dealing the order to ranks.  All of it is arithmetic: nothing here
 * reads a file after the space is built, and every position of an epoch is
 * computed in O(1) (O(log records) for windows).
 */
#ifndef STK_SAMPLE_H
#define STK_SAMPLE_H

#include "../core/internal.h"
#include "../format/format.h"

/* ---- mixtures (sample/mix.c) ---- */

/* The samples of a rank's batch in a mixture: rounds first, first + 1, ...
 * of `epoch`, `per` samples of each (the first from its place `skip`), n
 * samples in all, every round inside the epoch.  Sample t's source goes to
 * srcs[t], and t to lanes[pos[s]++] for its source s (pos: where each
 * source's lanes go next). */
void stk__mix_place(const stk_mix *m, uint64_t epoch, uint64_t first, uint64_t per, uint64_t skip,
                    uint32_t n, uint32_t *srcs, uint32_t *lanes, uint32_t *pos);

/* ---- permutations (sample/order.c) ---- */

#define STK__FEISTEL_ROUNDS 4

/* Which random and block orders a seed gives: part of a loader's
 * fingerprint, so that a state saved under other orders is refused instead
 * of resumed into different samples.  Version 2: permutations of odd bit
 * widths, and 4 rounds (version 1 rounded every width up to an even one,
 * and took 6 rounds). */
#define STK__ORDER_VERSION 2

/* A keyed bijection of [0, n): a Feistel network on the smallest number of
 * bits that covers n (halves of a and b = a or a + 1 bits), with cycle
 * walking. */
typedef struct stk__perm {
    uint64_t n;
    unsigned shift;     /* b, the right half's width */
    uint64_t masks[2];  /* the left half's mask in even rounds (a bits), odd (b) */
    uint64_t keys[STK__FEISTEL_ROUNDS];
} stk__perm;

void stk__perm_init(stk__perm *p, uint64_t n, uint64_t key);
uint64_t stk__perm_apply(const stk__perm *p, uint64_t x);
uint64_t stk__perm_invert(const stk__perm *p, uint64_t y);
/* A well-mixed 64-bit hash of two words. */
uint64_t stk__mix2(uint64_t a, uint64_t b);

/* ---- streams ---- */

/* The epoch's positions can be cut into S streams: stream s holds places
 * [stk__stream_start(s), + stk__stream_len(s)) of the order (the first
 * n mod S streams one sample longer), and position p of the dealt order is
 * place stk__stream_start(p mod S) + p / S: the streams interleaved one
 * sample at a time.  Rank r of W reads positions r, r + W, ..., so where W
 * divides S it reads streams r, r + W, ... only: a part of the places of
 * its own, which the orders below keep a part of the data of its own.
 * S = 1 is one stream: place = position. */
static inline uint64_t stk__stream_start(uint64_t n, uint64_t S, uint64_t s) {
    uint64_t q = n / S, rem = n % S;
    return s * q + (s < rem ? s : rem);
}
static inline uint64_t stk__stream_len(uint64_t n, uint64_t S, uint64_t s) {
    return n / S + (s < n % S ? 1 : 0);
}
/* The stream holding place x (x < n). */
static inline uint64_t stk__stream_of(uint64_t n, uint64_t S, uint64_t x) {
    uint64_t q = n / S, rem = n % S, big = rem * (q + 1);
    return x < big ? x / (q + 1) : rem + (x - big) / q;
}
/* The place of position p (p < n). */
static inline uint64_t stk__stream_place(uint64_t n, uint64_t S, uint64_t p) {
    if (S <= 1) return p;
    return stk__stream_start(n, S, p % S) + p / S;
}

/* ---- the order of one epoch ---- */

/* An order maps places to sample ids.  With S streams, the block order's
 * groups are cut at stream edges into pieces (group g ∩ stream s), each
 * permuted within itself, so that a stream's samples lie in its own
 * blocks; a piece is numbered g + s (the numbers grow with the places; a
 * group edge that is also a stream edge leaves a number unused, an empty
 * piece).  With S = 1 a piece is a group.  The random order with S > 1 is
 * the block order with a single group: blocks permuted, each stream's
 * places a piece permuted within itself. */
typedef struct stk__order {
    stk_order mode;
    uint64_t n;   /* samples */
    uint64_t key; /* from seed and epoch */
    uint64_t S;   /* streams */
    bool blocky;  /* places go through blocks: block order, or random with S > 1 */
    stk__perm perm; /* random (S = 1): samples; otherwise blocks */
    /* blocks */
    uint64_t B;        /* samples per block */
    uint64_t nb;       /* blocks */
    uint64_t last_len; /* samples in block nb-1 */
    uint64_t K;        /* blocks per group */
    uint64_t nbase;     /* groups */
    uint64_t ngroups;   /* piece numbers: [0, ngroups) (nbase when S = 1) */
    uint64_t short_pos; /* position of block nb-1 in block order (if short) */
    bool has_short;
} stk__order;

/* A piece: places [start, start + size) of group g (whose first place is
 * gstart) and stream s, whose samples lie in the group's blocks m_first ..
 * m_first + nblk - 1. */
typedef struct stk__piece {
    uint64_t g, s, start, size, m_first, nblk, gstart;
} stk__piece;

void stk__order_init(stk__order *o, stk_order mode, uint64_t n, uint64_t seed,
                     uint64_t epoch, uint64_t block_samples, uint64_t block_group);
/* The same, over S streams (S >= 1). */
void stk__order_init_streams(stk__order *o, stk_order mode, uint64_t n, uint64_t seed,
                             uint64_t epoch, uint64_t block_samples, uint64_t block_group,
                             uint64_t S);
/* The sample at place x (x < n) of the epoch. */
uint64_t stk__order_at(const stk__order *o, uint64_t x);
/* Blocks: the piece holding place x, and a piece's places (size 0: an
 * unused number). */
uint64_t stk__order_group_of(const stk__order *o, uint64_t x);
void stk__order_group_range(const stk__order *o, uint64_t g, uint64_t *start, uint64_t *size);
void stk__order_piece(const stk__order *o, uint64_t id, stk__piece *pc);
/* Blocks: blocks in piece g, and the id of its m-th block. */
uint64_t stk__order_group_blocks(const stk__order *o, uint64_t g);
uint64_t stk__order_group_block(const stk__order *o, uint64_t g, uint64_t m);
/* Blocks: the m of block id `blk` within piece g. */
uint64_t stk__order_group_slot(const stk__order *o, uint64_t g, uint64_t blk);

/* ---- dealing to ranks ---- */

typedef struct stk__deal {
    uint64_t n;     /* samples in the epoch */
    uint64_t start; /* global position this dealing starts at (resume) */
    uint64_t world, rank;
    uint64_t rank_count; /* the rank's samples */
    /* A split of the rank's batches of B samples among `parts` consumers:
     * this one takes batches part, part + parts, ... (parts = 1: all). */
    uint64_t B, parts, part;
    uint64_t per_rank; /* the samples this dealing gives (its part's) */
    uint64_t streams;  /* S: positions are places of S streams (1: the same) */
} stk__deal;

void stk__deal_init(stk__deal *d, uint64_t n, uint64_t start, uint64_t world,
                    uint64_t rank, bool pad);
/* Splits the rank's batches of B samples: this dealing keeps batches
 * part, part + parts, ... of them; per_rank becomes their samples. */
void stk__deal_split(stk__deal *d, uint64_t B, uint64_t parts, uint64_t part);
/* Positions become places of S streams (stk__stream_place). */
void stk__deal_streams(stk__deal *d, uint64_t S);
/* The rank-level index of this dealing's i-th sample. */
static inline uint64_t stk__deal_rank_index(const stk__deal *d, uint64_t i) {
    if (d->parts <= 1) return i;
    return ((i / d->B) * d->parts + d->part) * d->B + i % d->B;
}
/* The global position of this dealing's i-th sample (i < per_rank). */
static inline uint64_t stk__deal_pos(const stk__deal *d, uint64_t i) {
    uint64_t p = d->start + stk__deal_rank_index(d, i) * d->world + d->rank;
    return p < d->n ? p : p % d->n; /* padding wraps to the order's start */
}
/* The place (see streams) of this dealing's i-th sample: what the order
 * maps to a sample. */
static inline uint64_t stk__deal_at(const stk__deal *d, uint64_t i) {
    return stk__stream_place(d->n, d->streams, stk__deal_pos(d, i));
}
/* The last rank-level index whose place lies in [a, b), or -1 if none. */
int64_t stk__deal_last_in(const stk__deal *d, uint64_t a, uint64_t b);
/* The last of this dealing's batches that holds a sample at rank-level
 * index at most ri (0 when none does). */
static inline uint64_t stk__deal_batch_upto(const stk__deal *d, uint64_t ri) {
    uint64_t rb = ri / (d->parts <= 1 ? (d->B ? d->B : 1) : d->B);
    if (d->parts <= 1) return rb;
    return rb < d->part ? 0 : (rb - d->part) / d->parts;
}

/* The samples of this rank's positions first .. first + n - 1 (its i-th
 * position being stk__deal_at(d, i)), in ids[0..n): what stk__order_at
 * gives for each, computed for a batch at once.  In block order, when not
 * NULL, groups[j] gets the piece of sample j (stk__order_group_of of its
 * place) and slots[j] the index within that piece of its block (the m
 * with stk__order_group_block(o, g, m) == ids[j] / B). */
void stk__order_fill(const stk__order *o, const stk__deal *d, uint64_t first, uint32_t n,
                     uint64_t *ids, uint64_t *groups, uint32_t *slots);

/* ---- the sample space (sample/space.c) ---- */

typedef struct stk__space {
    bool windows;
    uint64_t L, S;
    uint64_t nrec;
    uint64_t n;          /* samples */
    uint64_t *prefix;    /* windows: nrec + 1 cumulative sample counts */
    /* With a validity rule, the valid starts of record r are runs
     * run_t0[k], count run_n[k] (stride S), k in [run_first[r], run_first[r+1]);
     * run_cum[k] counts the record's samples before run k. */
    uint64_t *run_first;
    uint64_t *run_t0, *run_n, *run_cum;
    uint64_t nruns;
} stk__space;

/* Validity rules a loader takes (stk_loader_options.valid_rules, and
 * valid_field's). */
#define STK__MAX_RULES 65

/* A validity rule (stk_valid_rule) with its field resolved. */
typedef struct stk__rule {
    const char *opt; /* the option it came from, for messages (static) */
    size_t field;    /* dataset field index */
    stk_valid test;
    uint64_t last; /* 0: the whole window */
    int64_t lo, hi;
} stk__rule;

typedef struct stk__space_params {
    uint64_t window, stride;
    const size_t *time_fields; /* dataset field indexes, ntime of them */
    size_t ntime;
    const stk__rule *rules; /* all must hold; nrules of them */
    size_t nrules;
} stk__space_params;

int stk__space_build(stk__space *sp, const stk_dataset *ds, const stk__space_params *p,
                     stk_error *err);
void stk__space_free(stk__space *sp);
/* The record and first row of sample `id`. */
void stk__space_locate(const stk__space *sp, uint64_t id, uint64_t *rec, uint64_t *t);
/* Rows of the time axis of record r (the first time field's rows). */

#endif
