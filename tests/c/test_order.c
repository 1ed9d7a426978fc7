/*
 * test_order: the arithmetic under the loader (src/sample/order.c).
 *
 *  - stk__perm is a bijection of [0, n) for n = 0, 1, 2, 3, 5, 1000, 4097
 *    and random sizes, under several keys, and stk__perm_invert inverts it;
 *  - the sequential, random and block orders are permutations of [0, n) for
 *    many n, block sizes and group sizes (short last block, partial last
 *    group, blocks larger than n, groups larger than the block count); the
 *    block order's groups tile [0, n) and each group holds exactly the
 *    samples of its blocks;
 *  - the same (order, seed, epoch) gives the same order, another epoch or
 *    seed another one;
 *  - dealing: ranks are disjoint, get floor(N/W) each and together cover
 *    [start, start + W*floor((N-start)/W)); with pad, ceil((N-start)/W) each
 *    and everything covered, the missing ones wrapped from the start.
 */
#include "util.h"

#include "sample/sample.h"

static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint8_t *seen_buf;
static size_t seen_cap;
static uint8_t *seen_reset(uint64_t n) {
    if (n + 1 > seen_cap) {
        seen_cap = (size_t)n + 1;
        seen_buf = realloc(seen_buf, seen_cap);
        CHECK(seen_buf != NULL);
    }
    memset(seen_buf, 0, (size_t)n + 1);
    return seen_buf;
}

static void check_perm(uint64_t n, uint64_t key) {
    stk__perm p;
    stk__perm_init(&p, n, key);
    uint8_t *seen = seen_reset(n);
    for (uint64_t x = 0; x < n; x++) {
        uint64_t y = stk__perm_apply(&p, x);
        if (y >= n || seen[y]) {
            fprintf(stderr, "perm n=%llu key=%llu: x=%llu -> %llu (%s)\n",
                    (unsigned long long)n, (unsigned long long)key, (unsigned long long)x,
                    (unsigned long long)y, y >= n ? "out of range" : "twice");
            exit(1);
        }
        seen[y] = 1;
        CHECK(stk__perm_invert(&p, y) == x);
    }
}

/* Whether the perm moves anything: for n >= 8 a keyed bijection that is the
 * identity would be a broken network. */
static int perm_is_identity(uint64_t n, uint64_t key) {
    stk__perm p;
    stk__perm_init(&p, n, key);
    for (uint64_t x = 0; x < n; x++)
        if (stk__perm_apply(&p, x) != x) return 0;
    return 1;
}

static void test_perm(void) {
    const uint64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 1023, 1024, 4097};
    const uint64_t keys[] = {0, 1, 2, 0xdeadbeef, UINT64_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) check_perm(sizes[i], keys[k]);
    for (int i = 0; i < 60; i++) check_perm(rnd() % 20000, rnd());
    check_perm(70001, 99);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i] >= 16) CHECK(!perm_is_identity(sizes[i], 7));
    /* Different keys give different permutations. */
    stk__perm a, b;
    stk__perm_init(&a, 1000, 1);
    stk__perm_init(&b, 1000, 2);
    int differ = 0;
    for (uint64_t x = 0; x < 1000; x++) differ += stk__perm_apply(&a, x) != stk__perm_apply(&b, x);
    CHECK(differ > 900);
    /* Apply/invert of huge domains stays in range (spot checks). */
    stk__perm h;
    stk__perm_init(&h, (UINT64_C(1) << 40) + 3, 5);
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rnd() % h.n;
        uint64_t y = stk__perm_apply(&h, x);
        CHECK(y < h.n && stk__perm_invert(&h, y) == x);
    }
}

/* Over many keys, the permutation of a fixed input looks uniformly drawn:
 * where x goes (16 buckets) and where x and x + 1 go together (4 x 4
 * buckets) pass a chi-square test, for odd and even bit widths (the halves
 * of an odd width differ by a bit).  The keys are fixed, so the statistics
 * are too; the bound is the 1e-5 tail of chi-square with 15 degrees of
 * freedom. */
static double chi2(const uint32_t *count, const double *want, unsigned cells) {
    double c = 0;
    for (unsigned i = 0; i < cells; i++) c += (count[i] - want[i]) * (count[i] - want[i]) / want[i];
    return c;
}

static void check_perm_uniform(uint64_t n) {
    enum { KEYS = 8192 };
    /* Bucket sizes: n need not divide evenly. */
    double in16[16] = {0}, in4[4] = {0}, want1[16], want2[16];
    for (uint64_t y = 0; y < n; y++) in16[y * 16 / n]++, in4[y * 4 / n]++;
    for (unsigned c = 0; c < 16; c++) {
        want1[c] = KEYS * in16[c] / (double)n;
        double a = in4[c / 4], b = in4[c % 4] - (c / 4 == c % 4); /* x and x + 1 differ */
        want2[c] = KEYS * a * b / ((double)n * (double)(n - 1));
    }
    const uint64_t xs[] = {0, n / 3, n - 2};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
        uint32_t one[16] = {0}, two[16] = {0};
        unsigned below = 0;
        for (uint64_t k = 0; k < KEYS; k++) {
            stk__perm p;
            stk__perm_init(&p, n, stk__mix2(k, n));
            uint64_t a = stk__perm_apply(&p, xs[i]), b = stk__perm_apply(&p, xs[i] + 1);
            one[a * 16 / n]++;
            two[a * 4 / n * 4 + b * 4 / n]++;
            below += a < b;
        }
        double c1 = chi2(one, want1, 16), c2 = chi2(two, want2, 16);
        if (c1 > 47.0 || c2 > 47.0 || below < KEYS / 2 - 300 || below > KEYS / 2 + 300) {
            fprintf(stderr, "perm n=%llu x=%llu: chi2 %.1f (one), %.1f (pairs), %u of %d below\n",
                    (unsigned long long)n, (unsigned long long)xs[i], c1, c2, below, KEYS);
            exit(1);
        }
    }
}

static void test_perm_uniform(void) {
    /* Widths 9, 10, 13, 17 and 20 (n just over a power of 2, and just under). */
    const uint64_t sizes[] = {300, 1000, 4097, 100000, 700000, 1000000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) check_perm_uniform(sizes[i]);
}

/* The order as an array; checks it is a permutation of [0, n). */
static uint64_t *order_array(stk_order mode, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t B,
                             uint64_t K) {
    stk__order o;
    stk__order_init(&o, mode, n, seed, epoch, B, K);
    uint64_t *a = malloc((n ? n : 1) * sizeof *a);
    CHECK(a != NULL);
    uint8_t *seen = seen_reset(n);
    for (uint64_t p = 0; p < n; p++) {
        a[p] = stk__order_at(&o, p);
        if (a[p] >= n || seen[a[p]]) {
            fprintf(stderr,
                    "order %d n=%llu B=%llu K=%llu seed=%llu epoch=%llu: position %llu -> %llu "
                    "(%s)\n",
                    (int)mode, (unsigned long long)n, (unsigned long long)B, (unsigned long long)K,
                    (unsigned long long)seed, (unsigned long long)epoch, (unsigned long long)p,
                    (unsigned long long)a[p], a[p] >= n ? "out of range" : "twice");
            exit(1);
        }
        seen[a[p]] = 1;
    }
    if (mode == STK_ORDER_SEQUENTIAL)
        for (uint64_t p = 0; p < n; p++) CHECK(a[p] == p);
    if (mode == STK_ORDER_BLOCK && n) {
        /* Groups tile [0, n) in order; group_of agrees with the ranges;
         * every position of group g holds a sample of one of g's blocks. */
        CHECK(o.nb == (n + B - 1) / B);
        CHECK(o.ngroups == (o.nb + K - 1) / K);
        uint64_t next = 0, blocks = 0;
        for (uint64_t g = 0; g < o.ngroups; g++) {
            uint64_t s, z;
            stk__order_group_range(&o, g, &s, &z);
            CHECK(s == next && z > 0);
            next = s + z;
            uint64_t nblk = stk__order_group_blocks(&o, g);
            CHECK(nblk >= 1 && nblk <= K);
            blocks += nblk;
            uint64_t want = 0;
            for (uint64_t m = 0; m < nblk; m++) {
                uint64_t blk = stk__order_group_block(&o, g, m);
                CHECK(blk < o.nb);
                want += blk == o.nb - 1 ? n - blk * B : B;
            }
            CHECK(want == z);
            for (uint64_t p = s; p < s + z; p++) {
                CHECK(stk__order_group_of(&o, p) == g);
                uint64_t blk = a[p] / B, m;
                for (m = 0; m < nblk; m++)
                    if (stk__order_group_block(&o, g, m) == blk) break;
                CHECK(m < nblk);
            }
        }
        CHECK(next == n);
        CHECK(blocks == o.nb);
    }
    return a;
}

static void test_orders(void) {
    /* Exhaustive over small shapes: short last blocks, partial last groups,
     * a block larger than n, a group larger than the block count. */
    for (uint64_t n = 0; n <= 100; n++) {
        free(order_array(STK_ORDER_SEQUENTIAL, n, 1, 0, 0, 0));
        free(order_array(STK_ORDER_RANDOM, n, 1, 0, 0, 0));
        for (uint64_t B = 1; B <= 9; B++)
            for (uint64_t K = 1; K <= 5; K++) free(order_array(STK_ORDER_BLOCK, n, n + B, K, B, K));
    }
    for (int i = 0; i < 25; i++) {
        uint64_t n = 1 + rnd() % 30000, B = 1 + rnd() % 300, K = 1 + rnd() % 20;
        free(order_array(STK_ORDER_RANDOM, n, rnd(), rnd() % 5, 0, 0));
        free(order_array(STK_ORDER_BLOCK, n, rnd(), rnd() % 5, B, K));
    }
    free(order_array(STK_ORDER_BLOCK, 4097, 3, 1, 4096, 16));
    free(order_array(STK_ORDER_BLOCK, 4097, 3, 1, 1, 4097));
    free(order_array(STK_ORDER_BLOCK, 100000, 3, 1, 64, 16));

    /* Same inputs, same order; another epoch or seed, another order. */
    const stk_order modes[2] = {STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int m = 0; m < 2; m++) {
        uint64_t n = 5000;
        uint64_t *a = order_array(modes[m], n, 7, 0, 10, 4);
        uint64_t *b = order_array(modes[m], n, 7, 0, 10, 4);
        uint64_t *c = order_array(modes[m], n, 7, 1, 10, 4);
        uint64_t *d = order_array(modes[m], n, 8, 0, 10, 4);
        CHECK(memcmp(a, b, n * sizeof *a) == 0);
        uint64_t dc = 0, dd = 0;
        for (uint64_t p = 0; p < n; p++) {
            dc += a[p] != c[p];
            dd += a[p] != d[p];
        }
        CHECK(dc > n / 2 && dd > n / 2);
        free(a);
        free(b);
        free(c);
        free(d);
    }
    /* The block order keeps blocks together: with K = 1 a group is one
     * block, so consecutive runs of B positions hold one block each. */
    {
        uint64_t n = 1000, B = 10;
        uint64_t *a = order_array(STK_ORDER_BLOCK, n, 5, 2, B, 1);
        for (uint64_t p = 0; p < n; p++) CHECK(a[p] / B == a[p - p % B] / B);
        free(a);
    }
}

static void check_deal(uint64_t n, uint64_t start, uint64_t W, int pad) {
    uint64_t left = start < n ? n - start : 0;
    uint64_t want = pad ? (left + W - 1) / W : left / W;
    uint8_t *seen = seen_reset(n);
    uint64_t covered = 0;
    for (uint64_t r = 0; r < W; r++) {
        stk__deal d;
        stk__deal_init(&d, n, start, W, r, pad != 0);
        CHECK(d.per_rank == want);
        for (uint64_t i = 0; i < d.per_rank; i++) {
            uint64_t p = stk__deal_at(&d, i);
            CHECK(p < n);
            uint64_t unwrapped = start + i * W + r;
            if (unwrapped < n) {
                CHECK(p == unwrapped);
                CHECK(!seen[p]);
                seen[p] = 1;
                covered++;
            } else {
                CHECK(pad);
                CHECK(p == unwrapped % n);
            }
        }
    }
    if (pad) {
        CHECK(covered == left);
    } else {
        CHECK(covered == W * (left / W));
        for (uint64_t p = start; p < start + covered; p++) CHECK(seen[p]);
    }
    for (uint64_t p = 0; p < start && p < n; p++) CHECK(!seen[p]);
}

/* A rank's batches split among `parts` dealings: taking one batch from
 * each part in turn gives the unsplit rank's samples in order; the parts'
 * counts add up; stk__deal_batch_upto names the right batch. */
static void check_split(uint64_t n, uint64_t start, uint64_t W, uint64_t r, int pad, uint64_t B,
                        uint64_t parts) {
    stk__deal whole;
    stk__deal_init(&whole, n, start, W, r, pad != 0);
    stk__deal d[16];
    uint64_t at[16] = {0}, total = 0, batches = 0;
    for (uint64_t k = 0; k < parts; k++) {
        stk__deal_init(&d[k], n, start, W, r, pad != 0);
        stk__deal_split(&d[k], B, parts, k);
        total += d[k].per_rank;
        batches += (d[k].per_rank + B - 1) / B;
        for (uint64_t i = 0; i < d[k].per_rank; i++) {
            uint64_t ri = stk__deal_rank_index(&d[k], i);
            CHECK(ri < whole.per_rank);
            CHECK(ri / B % parts == k);
            CHECK(stk__deal_batch_upto(&d[k], ri) == i / B);
        }
    }
    CHECK(total == whole.per_rank);
    CHECK(batches == (whole.per_rank + B - 1) / B);
    for (uint64_t i = 0; i < whole.per_rank; i++) {
        uint64_t k = (i / B) % parts;
        CHECK(at[k] < d[k].per_rank);
        CHECK(stk__deal_at(&d[k], at[k]) == stk__deal_at(&whole, i));
        at[k]++;
    }
}

static void test_deal(void) {
    for (uint64_t n = 0; n <= 60; n += 3)
        for (uint64_t W = 1; W <= 3; W++)
            for (uint64_t B = 1; B <= 7; B += 2)
                for (uint64_t parts = 1; parts <= 5; parts++)
                    check_split(n, n % 4, W, W - 1, (int)(n & 1), B, parts);
    for (int i = 0; i < 40; i++)
        check_split(rnd() % 20000, rnd() % 50, 1 + rnd() % 8, 0, (int)(rnd() & 1),
                    1 + rnd() % 300, 1 + rnd() % 16);
    for (uint64_t n = 0; n <= 40; n++)
        for (uint64_t W = 1; W <= 9; W++)
            for (uint64_t start = 0; start <= n + 1; start++)
                for (int pad = 0; pad < 2; pad++) check_deal(n, start, W, pad);
    for (int i = 0; i < 50; i++) check_deal(1 + rnd() % 5000, rnd() % 100, 1 + rnd() % 64, (int)(rnd() & 1));
}

/* stk__order_fill, which computes a batch's samples at once (lanes of
 * Feistel evaluations, one inner permutation per group), gives exactly
 * what stk__order_at gives position by position. */
static void check_fill_s(stk_order mode, uint64_t n, uint64_t seed, uint64_t B, uint64_t K,
                         uint64_t start, uint64_t W, uint64_t r, int pad, uint64_t S) {
    stk__order o;
    stk__order_init_streams(&o, mode, n, seed, 3, B, K, S);
    stk__deal d;
    stk__deal_init(&d, n, start, W, r, pad != 0);
    stk__deal_streams(&d, S);
    uint64_t *ids = malloc((d.per_rank + 1) * sizeof *ids);
    uint64_t *groups = malloc((d.per_rank + 1) * sizeof *groups);
    uint32_t *slots = malloc((d.per_rank + 1) * sizeof *slots);
    CHECK(ids && groups && slots);
    /* Batches of odd sizes, so lanes end part-full and groups change
     * inside a batch. */
    for (uint64_t first = 0, len = 1; first < d.per_rank; first += len, len = len * 3 % 37 + 1) {
        uint32_t m = (uint32_t)(first + len <= d.per_rank ? len : d.per_rank - first);
        stk__order_fill(&o, &d, first, m, ids + first, groups + first, slots + first);
    }
    for (uint64_t i = 0; i < d.per_rank; i++) {
        uint64_t p = stk__deal_at(&d, i);
        CHECK(ids[i] == stk__order_at(&o, p));
        if (o.blocky) {
            CHECK(groups[i] == stk__order_group_of(&o, p));
            CHECK(slots[i] < stk__order_group_blocks(&o, groups[i]));
            CHECK(stk__order_group_block(&o, groups[i], slots[i]) == ids[i] / o.B);
        }
    }
    free(ids);
    free(groups);
    free(slots);
}

static void check_fill(stk_order mode, uint64_t n, uint64_t seed, uint64_t B, uint64_t K,
                       uint64_t start, uint64_t W, uint64_t r, int pad) {
    check_fill_s(mode, n, seed, B, K, start, W, r, pad, 1);
}

/* Streams.  For S streams dealt to W ranks: the order is a bijection of
 * places; pieces partition the places, their numbers grow with the places
 * and each lies in one stream and in its blocks; the ranks together take
 * each sample once; stk__deal_last_in agrees with a search; and where W
 * divides S, the blocks a rank reads are its own but for the one at each
 * edge of a stream. */
static void check_streams(stk_order mode, uint64_t n, uint64_t seed, uint64_t B, uint64_t K,
                          uint64_t W, uint64_t S, uint64_t start) {
    stk__order o;
    stk__order_init_streams(&o, mode, n, seed, 5, B, K, S);
    uint8_t *seen = seen_reset(n);
    uint64_t prev_piece = 0;
    for (uint64_t x = 0; x < n; x++) {
        uint64_t id = stk__order_at(&o, x);
        CHECK(id < n && !seen[id]);
        seen[id] = 1;
        if (!o.blocky) continue;
        uint64_t g = stk__order_group_of(&o, x);
        CHECK(g < o.ngroups && g >= prev_piece);
        prev_piece = g;
        stk__piece pc;
        stk__order_piece(&o, g, &pc);
        CHECK(pc.size > 0 && x >= pc.start && x < pc.start + pc.size);
        CHECK(stk__stream_of(n, S, pc.start) == stk__stream_of(n, S, pc.start + pc.size - 1));
        uint64_t slot = stk__order_group_slot(&o, g, id / B);
        CHECK(slot < pc.nblk && stk__order_group_block(&o, g, slot) == id / B);
        CHECK(pc.nblk <= o.K);
    }
    /* Every piece number is either unused (size 0) or covers its places. */
    uint64_t covered = 0;
    for (uint64_t g = 0; o.blocky && g < o.ngroups; g++) {
        stk__piece pc;
        stk__order_piece(&o, g, &pc);
        covered += pc.size;
    }
    CHECK(!o.blocky || covered == n);
    /* Dealt: each sample once over the ranks (no padding). */
    seen = seen_reset(n);
    uint64_t *blocks_of = calloc(o.nb + (n / B) + 2, sizeof *blocks_of); /* rank + 1 per block */
    uint8_t *shared = calloc(o.nb + (n / B) + 2, 1);
    CHECK(blocks_of && shared);
    for (uint64_t r = 0; r < W; r++) {
        stk__deal d;
        stk__deal_init(&d, n, start, W, r, false);
        stk__deal_streams(&d, S);
        for (uint64_t i = 0; i < d.per_rank; i++) {
            uint64_t id = stk__order_at(&o, stk__deal_at(&d, i));
            CHECK(!seen[id]);
            seen[id] = 1;
            uint64_t blk = id / B;
            if (blocks_of[blk] && blocks_of[blk] != r + 1) shared[blk] = 1;
            blocks_of[blk] = r + 1;
        }
        /* stk__deal_last_in against a search, over random ranges. */
        for (int t = 0; t < 20 && n; t++) {
            uint64_t a = rnd() % n, b = a + 1 + rnd() % (n - a);
            int64_t want = -1;
            for (uint64_t i = 0; i < d.per_rank; i++) {
                uint64_t x = stk__deal_at(&d, i);
                if (x >= a && x < b) want = (int64_t)i;
            }
            CHECK(stk__deal_last_in(&d, a, b) == want);
        }
    }
    if (start == 0 && S % W == 0 && mode != STK_ORDER_SEQUENTIAL) {
        uint64_t nshared = 0;
        for (uint64_t b = 0; b < (n + B - 1) / B; b++) nshared += shared[b];
        CHECK(nshared <= S - 1); /* the block at each edge of a stream */
    }
    free(blocks_of);
    free(shared);
}

static void test_streams(void) {
    const stk_order modes[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    /* The place of each position: a bijection, streams one sample apart. */
    for (uint64_t n = 0; n <= 40; n++)
        for (uint64_t S = 1; S <= 9; S++) {
            uint8_t *seen = seen_reset(n);
            for (uint64_t p = 0; p < n; p++) {
                uint64_t x = stk__stream_place(n, S, p);
                CHECK(x < n && !seen[x]);
                seen[x] = 1;
                uint64_t s = stk__stream_of(n, S, x);
                CHECK(s == p % S && x - stk__stream_start(n, S, s) == p / S);
                CHECK(x - stk__stream_start(n, S, s) < stk__stream_len(n, S, s));
            }
        }
    for (int m = 0; m < 3; m++)
        for (uint64_t n = 1; n <= 90; n += 7)
            for (uint64_t S = 1; S <= 6; S++)
                for (uint64_t W = 1; W <= 4; W++) {
                    check_streams(modes[m], n, n * 13 + S, 1 + n % 6, 1 + n % 4, W, S, (n % 3) * W);
                    check_fill_s(modes[m], n, n + W, 1 + n % 6, 1 + n % 4, n % 5, W, W - 1,
                                 (int)(n & 1), S);
                }
    for (int i = 0; i < 40; i++) {
        uint64_t n = 1 + rnd() % 100000, W = 1 + rnd() % 8, S = W * (1 + rnd() % 3);
        uint64_t B = 1 + rnd() % 300, K = 1 + rnd() % 20;
        check_streams(modes[i % 3], n, rnd(), B, K, W, i % 4 ? S : 1 + rnd() % 9, 0);
        check_fill_s(modes[i % 3], n, rnd(), B, K, rnd() % 1000, W, rnd() % W, (int)(rnd() & 1), S);
    }
}

static void test_order_fill(void) {
    const stk_order modes[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int m = 0; m < 3; m++)
        for (uint64_t n = 0; n <= 70; n++)
            for (uint64_t W = 1; W <= 3; W++) check_fill(modes[m], n, n * 7 + 1, 1 + n % 5, 1 + n % 3, n % 4, W, W - 1, (int)(n & 1));
    for (int i = 0; i < 30; i++) {
        uint64_t n = 1 + rnd() % 200000, W = 1 + rnd() % 8;
        check_fill(modes[i % 3], n, rnd(), 1 + rnd() % 500, 1 + rnd() % 20, rnd() % 1000, W, rnd() % W, (int)(rnd() & 1));
    }
}

int main(void) {
    test_perm();
    test_perm_uniform();
    test_orders();
    test_deal();
    test_order_fill();
    test_streams();
    free(seen_buf);
    return 0;
}
