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

/* ---- permutations (sample/order.c) ---- */

#define STK__FEISTEL_ROUNDS 6

/* A keyed bijection of [0, n): a balanced Feistel network on the smallest
 * even number of bits that covers n, with cycle walking. */
typedef struct stk__perm {
    uint64_t n;
    unsigned half;
    uint64_t mask;
    uint64_t keys[STK__FEISTEL_ROUNDS];
} stk__perm;

void stk__perm_init(stk__perm *p, uint64_t n, uint64_t key);
uint64_t stk__perm_apply(const stk__perm *p, uint64_t x);
uint64_t stk__perm_invert(const stk__perm *p, uint64_t y);
/* A well-mixed 64-bit hash of two words. */
uint64_t stk__mix2(uint64_t a, uint64_t b);

/* ---- the order of one epoch ---- */

typedef struct stk__order {
    stk_order mode;
    uint64_t n;   /* samples */
    uint64_t key; /* from seed and epoch */
    stk__perm perm; /* random: samples; block: blocks */
    /* block order */
    uint64_t B;        /* samples per block */
    uint64_t nb;       /* blocks */
    uint64_t last_len; /* samples in block nb-1 */
    uint64_t K;        /* blocks per group */
    uint64_t ngroups;
    uint64_t short_pos; /* position of block nb-1 in block order (if short) */
    bool has_short;
} stk__order;

void stk__order_init(stk__order *o, stk_order mode, uint64_t n, uint64_t seed,
                     uint64_t epoch, uint64_t block_samples, uint64_t block_group);
/* The sample at position p (p < n) of the epoch. */
uint64_t stk__order_at(const stk__order *o, uint64_t p);
/* Block order: the group holding position p, and a group's first position
 * and size in positions. */
uint64_t stk__order_group_of(const stk__order *o, uint64_t p);
void stk__order_group_range(const stk__order *o, uint64_t g, uint64_t *start, uint64_t *size);
/* Block order: blocks in group g, and the id of its m-th block. */
uint64_t stk__order_group_blocks(const stk__order *o, uint64_t g);
uint64_t stk__order_group_block(const stk__order *o, uint64_t g, uint64_t m);

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
} stk__deal;

void stk__deal_init(stk__deal *d, uint64_t n, uint64_t start, uint64_t world,
                    uint64_t rank, bool pad);
/* Splits the rank's batches of B samples: this dealing keeps batches
 * part, part + parts, ... of them; per_rank becomes their samples. */
void stk__deal_split(stk__deal *d, uint64_t B, uint64_t parts, uint64_t part);
/* The rank-level index of this dealing's i-th sample. */
static inline uint64_t stk__deal_rank_index(const stk__deal *d, uint64_t i) {
    if (d->parts <= 1) return i;
    return ((i / d->B) * d->parts + d->part) * d->B + i % d->B;
}
/* The global position of this dealing's i-th sample (i < per_rank). */
static inline uint64_t stk__deal_at(const stk__deal *d, uint64_t i) {
    uint64_t p = d->start + stk__deal_rank_index(d, i) * d->world + d->rank;
    return p < d->n ? p : p % d->n; /* padding wraps to the order's start */
}
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
 * NULL, groups[j] gets the group of sample j (stk__order_group_of of its
 * position) and slots[j] the index within that group of its block (the m
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

typedef struct stk__space_params {
    uint64_t window, stride;
    const size_t *time_fields; /* dataset field indexes, ntime of them */
    size_t ntime;
    int valid_field; /* dataset field index, or -1 */
    stk_valid valid;
} stk__space_params;

int stk__space_build(stk__space *sp, const stk_dataset *ds, const stk__space_params *p,
                     stk_error *err);
void stk__space_free(stk__space *sp);
/* The record and first row of sample `id`. */
void stk__space_locate(const stk__space *sp, uint64_t id, uint64_t *rec, uint64_t *t);
/* Rows of the time axis of record r (the first time field's rows). */

#endif
