/*
 * order.c: keyed permutations, the three orders, and dealing to ranks.
 *
 * The random order is a Feistel network over the smallest bit width covering
 * n (unbalanced by one bit where the width is odd); positions that land
 * outside [0, n) walk the cycle again until they land inside, which keeps it
 * a bijection of [0, n).  The domain is under 2n, so a position takes fewer
 * than two walks on average.
 *
 * The block order permutes blocks with the same network, cuts the block
 * sequence into groups of K, and permutes the samples of each group with a
 * network keyed by the group.  Only block nb-1 may be short; its position in
 * the block order is found once per epoch by inverting the block network, so
 * that every group's first position is known in O(1).
 */
#include "sample.h"

#include <string.h>

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t stk__mix2(uint64_t a, uint64_t b) {
    return mix64(mix64(a + 0x9e3779b97f4a7c15ull) ^ (b * 0xd6e8feb86659fd93ull + 1));
}

void stk__perm_init(stk__perm *p, uint64_t n, uint64_t key) {
    p->n = n;
    unsigned bits = 2;
    while (bits < 64 && (UINT64_C(1) << bits) < n) bits++;
    /* The left half takes the smaller share of an odd width. */
    p->shift = bits - bits / 2;
    p->masks[0] = (UINT64_C(1) << (bits / 2)) - 1;
    p->masks[1] = (UINT64_C(1) << p->shift) - 1;
    for (int i = 0; i < STK__FEISTEL_ROUNDS; i++) p->keys[i] = stk__mix2(key, (uint64_t)i + 1);
}

/* Round i xors the left half, of width a (i even) or b (i odd), with a hash
 * of the right half, and swaps them: an even number of rounds leaves the
 * halves at their widths, a on the left and b on the right. */
static inline uint64_t feistel(const stk__perm *p, uint64_t x) {
    uint64_t l = x >> p->shift, r = x & p->masks[1];
    for (int i = 0; i < STK__FEISTEL_ROUNDS; i++) {
        uint64_t t = l ^ (mix64(r ^ p->keys[i]) & p->masks[i & 1]);
        l = r;
        r = t;
    }
    return (l << p->shift) | r;
}

static inline uint64_t feistel_inv(const stk__perm *p, uint64_t y) {
    uint64_t l = y >> p->shift, r = y & p->masks[1];
    for (int i = STK__FEISTEL_ROUNDS - 1; i >= 0; i--) {
        uint64_t t = r ^ (mix64(l ^ p->keys[i]) & p->masks[i & 1]);
        r = l;
        l = t;
    }
    return (l << p->shift) | r;
}

uint64_t stk__perm_apply(const stk__perm *p, uint64_t x) {
    if (p->n <= 1) return x;
    do x = feistel(p, x);
    while (x >= p->n);
    return x;
}

uint64_t stk__perm_invert(const stk__perm *p, uint64_t y) {
    if (p->n <= 1) return y;
    do y = feistel_inv(p, y);
    while (y >= p->n);
    return y;
}

void stk__order_init(stk__order *o, stk_order mode, uint64_t n, uint64_t seed, uint64_t epoch,
                     uint64_t block_samples, uint64_t block_group) {
    stk__order_init_streams(o, mode, n, seed, epoch, block_samples, block_group, 1);
}

void stk__order_init_streams(stk__order *o, stk_order mode, uint64_t n, uint64_t seed,
                             uint64_t epoch, uint64_t block_samples, uint64_t block_group,
                             uint64_t S) {
    memset(o, 0, sizeof *o);
    o->mode = mode;
    o->n = n;
    o->key = stk__mix2(seed, epoch);
    o->S = S ? S : 1;
    o->blocky = mode == STK_ORDER_BLOCK || (mode == STK_ORDER_RANDOM && o->S > 1);
    if (mode == STK_ORDER_RANDOM && !o->blocky) {
        stk__perm_init(&o->perm, n, o->key);
    } else if (o->blocky) {
        o->B = block_samples ? block_samples : 1;
        o->nb = n ? (n + o->B - 1) / o->B : 0;
        /* Random order over streams: one group of every block. */
        o->K = mode == STK_ORDER_RANDOM ? STK__MAX(o->nb, (uint64_t)1)
                                        : (block_group ? block_group : 1);
        o->last_len = n ? n - (o->nb - 1) * o->B : 0;
        o->nbase = (o->nb + o->K - 1) / o->K;
        stk__perm_init(&o->perm, o->nb, o->key);
        o->has_short = n && o->last_len < o->B;
        if (o->has_short) o->short_pos = stk__perm_invert(&o->perm, o->nb - 1);
        o->ngroups = o->nbase;
        if (o->S > 1 && n) o->ngroups = o->nbase - 1 + stk__stream_of(n, o->S, n - 1) + 1;
    }
}

/* ---- groups: K blocks of the block order ---- */

static void base_range(const stk__order *o, uint64_t g, uint64_t *start, uint64_t *size) {
    uint64_t deficit = o->B - o->last_len;
    uint64_t first_block = g * o->K;
    uint64_t nblk = STK__MIN(o->K, o->nb - first_block);
    *start = first_block * o->B - (o->has_short && o->short_pos < first_block ? deficit : 0);
    bool inside = o->has_short && o->short_pos >= first_block && o->short_pos < first_block + nblk;
    *size = nblk * o->B - (inside ? deficit : 0);
}

static uint64_t base_group_of(const stk__order *o, uint64_t x) {
    uint64_t g = x / (o->K * o->B);
    if (g >= o->nbase) g = o->nbase - 1;
    for (;;) {
        uint64_t s, z;
        base_range(o, g, &s, &z);
        if (x < s) {
            g--;
            continue;
        }
        if (x >= s + z && g + 1 < o->nbase) {
            g++;
            continue;
        }
        return g;
    }
}

/* Block order: where x, an index into the concatenation of group g's
 * blocks (in block order), falls: the block's index m within the group and
 * the offset in it. */
static void block_split(const stk__order *o, uint64_t g, uint64_t x, uint64_t *m, uint64_t *off) {
    uint64_t first = g * o->K;
    uint64_t ms = o->short_pos - first;
    if (o->has_short && o->short_pos >= first && ms < o->K && x >= ms * o->B) {
        if (x < ms * o->B + o->last_len) {
            *m = ms;
            *off = x - ms * o->B;
        } else {
            uint64_t y = x - ms * o->B - o->last_len;
            *m = ms + 1 + y / o->B;
            *off = y % o->B;
        }
    } else {
        *m = x / o->B;
        *off = x % o->B;
    }
}

/* ---- pieces: a group's places within one stream ---- */

/* The number of the first piece of group g: g plus the stream of its first
 * place; it grows with g. */
static uint64_t first_piece(const stk__order *o, uint64_t g) {
    uint64_t s, z;
    base_range(o, g, &s, &z);
    return g + stk__stream_of(o->n, o->S, s);
}

void stk__order_piece(const stk__order *o, uint64_t id, stk__piece *pc) {
    memset(pc, 0, sizeof *pc);
    if (!o->blocky || o->nbase == 0) return;
    uint64_t g = id, ga, gz;
    if (o->S > 1) {
        /* The group: the last whose first piece is at most id. */
        uint64_t lo = 0, hi = STK__MIN(id, o->nbase - 1);
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo + 1) / 2;
            if (first_piece(o, mid) <= id) lo = mid;
            else hi = mid - 1;
        }
        g = lo;
    }
    if (g >= o->nbase) return;
    base_range(o, g, &ga, &gz);
    pc->g = g;
    pc->s = id - g;
    pc->start = ga;
    uint64_t a = ga, b = ga + gz;
    if (o->S > 1) {
        if (pc->s >= o->S) return;
        uint64_t sa = stk__stream_start(o->n, o->S, pc->s);
        uint64_t sb = sa + stk__stream_len(o->n, o->S, pc->s);
        a = STK__MAX(a, sa);
        b = STK__MIN(b, sb);
        if (a >= b) return;
    }
    uint64_t m0, m1, off;
    block_split(o, g, a - ga, &m0, &off);
    block_split(o, g, b - 1 - ga, &m1, &off);
    pc->start = a;
    pc->size = b - a;
    pc->m_first = m0;
    pc->nblk = m1 - m0 + 1;
    pc->gstart = ga;
}

void stk__order_group_range(const stk__order *o, uint64_t g, uint64_t *start, uint64_t *size) {
    stk__piece pc;
    stk__order_piece(o, g, &pc);
    *start = pc.start;
    *size = pc.size;
}

uint64_t stk__order_group_of(const stk__order *o, uint64_t x) {
    uint64_t g = base_group_of(o, x);
    return o->S > 1 ? g + stk__stream_of(o->n, o->S, x) : g;
}

uint64_t stk__order_group_blocks(const stk__order *o, uint64_t g) {
    stk__piece pc;
    stk__order_piece(o, g, &pc);
    return pc.nblk;
}

uint64_t stk__order_group_block(const stk__order *o, uint64_t g, uint64_t m) {
    stk__piece pc;
    stk__order_piece(o, g, &pc);
    return stk__perm_apply(&o->perm, pc.g * o->K + pc.m_first + m);
}

uint64_t stk__order_group_slot(const stk__order *o, uint64_t g, uint64_t blk) {
    stk__piece pc;
    stk__order_piece(o, g, &pc);
    return stk__perm_invert(&o->perm, blk) - (pc.g * o->K + pc.m_first);
}

/* The permutation of piece `id`'s places among themselves. */
static void piece_perm(const stk__order *o, uint64_t id, const stk__piece *pc, stk__perm *inner) {
    stk__perm_init(inner, pc->size, stk__mix2(o->key, id + 0x51ed2701ull));
}

uint64_t stk__order_at(const stk__order *o, uint64_t x) {
    if (o->mode == STK_ORDER_SEQUENTIAL) return x;
    if (!o->blocky) return stk__perm_apply(&o->perm, x);
    uint64_t id = stk__order_group_of(o, x);
    stk__piece pc;
    stk__order_piece(o, id, &pc);
    stk__perm inner;
    piece_perm(o, id, &pc, &inner);
    uint64_t m, off;
    block_split(o, pc.g, pc.start - pc.gstart + stk__perm_apply(&inner, x - pc.start), &m, &off);
    return stk__perm_apply(&o->perm, pc.g * o->K + m) * o->B + off;
}

/* stk__perm_apply on every ids[0..n), in place.  One Feistel evaluation is
 * a chain of dependent multiplications; LANES independent chains keep the
 * multiplier busy where one leaves it waiting.  Cycle walking needs a
 * different number of evaluations per input, so each lane takes the next
 * input as soon as its own lands inside [0, n): every evaluation computed
 * is one stk__perm_apply would compute, and the results are exactly its. */
#define LANES 8

static void perm_apply_all(const stk__perm *p, uint64_t *ids, uint32_t n) {
    uint64_t v[LANES] = {0};
    uint32_t at[LANES] = {0};
    uint32_t next = 0;
    unsigned live = 0;
    for (unsigned k = 0; k < LANES && next < n; k++, next++) {
        v[k] = ids[next];
        at[k] = next;
        live |= 1u << k;
    }
    /* While every lane is sure to find a next input, without branches:
     * whether an evaluation lands inside is a coin toss (the domain is
     * under 2n), which the branch predictor cannot learn.  Each lane stores
     * its value whether or not it landed (the last store to a place is the
     * one that did) and takes ids[next] only if it landed; ids[next] is
     * still an input, every place written so far lying below it. */
    if (live == (1u << LANES) - 1) {
        while (next + LANES <= n) {
            for (unsigned k = 0; k < LANES; k++) v[k] = feistel(p, v[k]);
            for (unsigned k = 0; k < LANES; k++) {
                uint64_t in = v[k] < p->n;
                uint64_t m = (uint64_t)0 - in;
                ids[at[k]] = v[k];
                uint64_t fresh = ids[next];
                v[k] ^= (v[k] ^ fresh) & m;
                at[k] ^= (at[k] ^ next) & (uint32_t)m;
                next += (uint32_t)in;
            }
        }
    }
    while (live) {
        for (unsigned k = 0; k < LANES; k++) v[k] = feistel(p, v[k]);
        for (unsigned k = 0; k < LANES; k++) {
            if (!((live >> k) & 1) || v[k] >= p->n) continue;
            ids[at[k]] = v[k];
            if (next < n) {
                v[k] = ids[next];
                at[k] = next++;
            } else {
                live &= ~(1u << k);
            }
        }
    }
}

void stk__order_fill(const stk__order *o, const stk__deal *d, uint64_t first, uint32_t n,
                     uint64_t *ids, uint64_t *groups, uint32_t *slots) {
    for (uint32_t j = 0; j < n; j++) ids[j] = stk__deal_at(d, first + j);
    if (o->mode == STK_ORDER_SEQUENTIAL) return;
    if (!o->blocky) {
        if (o->perm.n > 1) perm_apply_all(&o->perm, ids, n);
        return;
    }
    /* Blocks: a rank's places are consecutive within a stream, so a batch
     * falls in a run of one piece and perhaps the next.  Per run: the
     * piece's inner permutation is made once, applied to the run in lanes,
     * and the ids of the piece's first blocks are kept as they are first
     * needed (a run touches few of them), so that a sample costs no block
     * permutation of its own. */
    enum { CACHED = 64 };
    uint64_t blocks[CACHED];
    for (uint32_t j0 = 0, j1; j0 < n; j0 = j1) {
        uint64_t id = stk__order_group_of(o, ids[j0]);
        stk__piece pc;
        stk__order_piece(o, id, &pc);
        for (j1 = j0 + 1; j1 < n && ids[j1] >= pc.start && ids[j1] < pc.start + pc.size; j1++) {
        }
        stk__perm inner;
        piece_perm(o, id, &pc, &inner);
        uint64_t first_blk = pc.g * o->K + pc.m_first;
        uint64_t have = 0; /* which of blocks[] are known */
        for (uint32_t j = j0; j < j1; j++) ids[j] -= pc.start;
        if (inner.n > 1) perm_apply_all(&inner, ids + j0, j1 - j0);
        for (uint32_t j = j0; j < j1; j++) {
            uint64_t m, off;
            block_split(o, pc.g, ids[j] + (pc.start - pc.gstart), &m, &off);
            uint64_t mm = m - pc.m_first, blk;
            if (mm >= CACHED) {
                blk = stk__perm_apply(&o->perm, first_blk + mm);
            } else {
                if (!(have >> mm & 1)) {
                    blocks[mm] = stk__perm_apply(&o->perm, first_blk + mm);
                    have |= UINT64_C(1) << mm;
                }
                blk = blocks[mm];
            }
            ids[j] = blk * o->B + off;
            if (slots) slots[j] = (uint32_t)mm;
            if (groups) groups[j] = id;
        }
    }
}

void stk__deal_init(stk__deal *d, uint64_t n, uint64_t start, uint64_t world, uint64_t rank,
                    bool pad) {
    d->n = n;
    d->start = start > n ? n : start;
    d->world = world ? world : 1;
    d->rank = rank;
    uint64_t left = n - d->start;
    d->per_rank = pad ? (left + d->world - 1) / d->world : left / d->world;
    if (pad && left == 0) d->per_rank = 0;
    d->rank_count = d->per_rank;
    d->B = 0;
    d->parts = 1;
    d->part = 0;
    d->streams = 1;
}

void stk__deal_streams(stk__deal *d, uint64_t S) { d->streams = S ? S : 1; }

int64_t stk__deal_last_in(const stk__deal *d, uint64_t a, uint64_t b) {
    uint64_t base = d->start + d->rank; /* the position of rank-level index 0 */
    if (d->rank_count == 0 || b <= a) return -1;
    uint64_t top = base + (d->rank_count - 1) * d->world; /* the rank's last position */
    if (d->streams <= 1) {
        /* (Padding past the epoch wraps; such a sample may find its group
         * gone and read it again.) */
        if (b <= base) return -1;
        uint64_t i = STK__MIN((b - 1 - base) / d->world, d->rank_count - 1);
        return base + i * d->world >= a ? (int64_t)i : -1;
    }
    uint64_t S = d->streams, n = d->n;
    int64_t best = -1;
    for (uint64_t s = stk__stream_of(n, S, a); s < S && s <= stk__stream_of(n, S, b - 1); s++) {
        uint64_t sa = stk__stream_start(n, S, s), sl = stk__stream_len(n, S, s);
        uint64_t ja = a > sa ? a - sa : 0, jb = STK__MIN(b - sa, sl); /* [ja, jb) */
        if (ja >= jb || s > top) continue;
        uint64_t j = STK__MIN(jb - 1, (top - s) / S);
        /* Positions s + jS that are the rank's: p = base (mod W); the
         * residues repeat within W steps. */
        for (uint64_t k = 0; k < d->world && j >= ja; k++, j--) {
            uint64_t p = s + j * S;
            if (p < base) break;
            if ((p - base) % d->world == 0) {
                best = STK__MAX(best, (int64_t)((p - base) / d->world));
                break;
            }
            if (j == 0) break;
        }
    }
    return best;
}

void stk__deal_split(stk__deal *d, uint64_t B, uint64_t parts, uint64_t part) {
    d->B = B ? B : 1;
    d->parts = parts ? parts : 1;
    d->part = part;
    if (d->parts == 1) return;
    uint64_t R = d->rank_count, nb = (R + d->B - 1) / d->B;
    uint64_t mine = nb > part ? (nb - 1 - part) / d->parts + 1 : 0;
    uint64_t n = mine * d->B;
    uint64_t last = R - (nb ? nb - 1 : 0) * d->B; /* samples in the rank's last batch */
    if (nb && (nb - 1) % d->parts == part) n -= d->B - last;
    d->per_rank = n;
}
