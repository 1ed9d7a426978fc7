/*
 * test_mix: the schedule of a mixture (src/sample/mix.c).
 *
 *  - over an epoch, each source gets exactly its count of rounds, and the
 *    counts follow the policy: STOP ends when the first source (at its
 *    weight) runs out, CYCLE when the last one does, ALL gives every source
 *    its whole epoch; given counts are kept;
 *  - stk_mix_source_at's index numbers each source's rounds 0, 1, 2, ... in
 *    order (a source's rounds are consumed in sequence);
 *  - the promised bound: over every run of n consecutive rounds of a phase
 *    (n = 1 .. 200, every start), each source's count is within its depth
 *    (< ceil(log2 k), and exact for one source) of n * its share;
 *  - stk_mix_counts at every round equals counting the rounds before it,
 *    and stk_mix_fill from any round agrees with stk_mix_source_at;
 *  - stk__mix_place (a drawn batch's sources and lanes) from any round,
 *    with 1 to 4 samples a round and any first place, gives every sample
 *    its round's source and each source's samples in order; so too for
 *    trees of 2, 3, 4 and 5 sources at a sample a round, across phases;
 *  - the same (seed, epoch) gives the same schedule, another epoch another
 *    one (for more than one source);
 *  - bad input: no sources, a zero unit count, a weight <= 0 or NaN, counts
 *    for some sources only, all refused naming the source.
 */
#include "util.h"

#include "sample/sample.h"

#include <math.h>

static stk_error err;

static unsigned ceil_log2(size_t k) {
    unsigned d = 0;
    while (((size_t)1 << d) < k) d++;
    return d;
}

/* Checks one schedule over epoch e; returns the sources of its rounds
 * (caller frees). */
static uint32_t *check_epoch(const stk_mix *m, uint64_t e, const stk_mix_source *s, size_t k) {
    uint64_t R = stk_mix_epoch_rounds(m);
    CHECK(R > 0);
    uint32_t *src = malloc(R * sizeof *src);
    uint64_t *seen = calloc(k, sizeof *seen), *cnt = calloc(k, sizeof *cnt);
    CHECK(src && seen && cnt);
    stk_mix_fill(m, e, 0, R, src);
    for (uint64_t q = 0; q < R; q++) {
        if (q % 7 == 0 || q + 1 == R) {
            stk_mix_counts(m, e, q, cnt);
            for (size_t i = 0; i < k; i++) CHECK(cnt[i] == seen[i]);
        }
        uint64_t idx;
        uint32_t i = stk_mix_source_at(m, e, q, &idx);
        CHECK(i == src[q]);
        CHECK(i < k);
        CHECK(idx == seen[i]);
        seen[i]++;
    }
    stk_mix_counts(m, e, R, cnt);
    uint64_t total = 0;
    for (size_t i = 0; i < k; i++) {
        CHECK(seen[i] == stk_mix_source_rounds(m, i));
        CHECK(cnt[i] == seen[i]);
        total += seen[i];
    }
    CHECK(total == R);
    (void)s;
    free(seen);
    free(cnt);
    return src;
}

/* The window bound over rounds [a, b) (one phase) with per-source counts
 * c (within that phase). */
static void check_windows(const uint32_t *src, uint64_t a, uint64_t b, const uint64_t *c,
                          size_t k) {
    uint64_t len = b - a;
    unsigned depth = ceil_log2(k);
    uint64_t *run = calloc(k, sizeof *run);
    CHECK(run);
    for (uint64_t n = 1; n <= 200 && n <= len; n++) {
        memset(run, 0, k * sizeof *run);
        for (uint64_t q = a; q < a + n; q++) run[src[q]]++;
        for (uint64_t st = a;; st++) {
            for (size_t i = 0; i < k; i++) {
                double want = (double)n * (double)c[i] / (double)len;
                double dev = fabs((double)run[i] - want);
                if (!(dev < (double)depth + 1e-9 || (depth == 0 && dev < 1e-9))) {
                    fprintf(stderr, "window [%llu, +%llu) source %zu: %llu, want %.3f (depth %u)\n",
                            (unsigned long long)st, (unsigned long long)n, i,
                            (unsigned long long)run[i], want, depth);
                    CHECK(0);
                }
            }
            if (st + n >= b) break;
            run[src[st]]--;
            run[src[st + n]]++;
        }
    }
    free(run);
}

static stk_mix *open_ok(const stk_mix_source *s, size_t k, stk_mix_exhaust ex, uint64_t seed) {
    stk_mix *m = NULL;
    CHECK_OK(stk_mix_open(s, k, ex, seed, &m, &err));
    CHECK(stk_mix_num_sources(m) == k);
    return m;
}

static void test_policies(void) {
    stk_mix_source s[3] = {{1000, 1.0, 0}, {300, 1.0, 0}, {50, 0.5, 0}};
    /* STOP: t = min(1000, 300, 100) = 100: 100, 100, 50. */
    stk_mix *m = open_ok(s, 3, STK_MIX_STOP, 7);
    CHECK(stk_mix_source_rounds(m, 0) == 100 && stk_mix_source_rounds(m, 1) == 100 &&
          stk_mix_source_rounds(m, 2) == 50 && stk_mix_epoch_rounds(m) == 250);
    uint64_t c[3] = {100, 100, 50};
    free(check_epoch(m, 0, s, 3));
    uint32_t *src = check_epoch(m, 3, s, 3);
    check_windows(src, 0, 250, c, 3);
    free(src);
    stk_mix_close(m);
    /* CYCLE: t = 1000: 1000, 1000, 500. */
    m = open_ok(s, 3, STK_MIX_CYCLE, 7);
    CHECK(stk_mix_source_rounds(m, 0) == 1000 && stk_mix_source_rounds(m, 1) == 1000 &&
          stk_mix_source_rounds(m, 2) == 500);
    uint64_t c2[3] = {1000, 1000, 500};
    src = check_epoch(m, 1, s, 3);
    check_windows(src, 0, 2500, c2, 3);
    free(src);
    stk_mix_close(m);
    /* ALL: every source's whole epoch, in phases: until t=100 (100, 100,
     * 50), then sources 0 and 1 at 1:1 until t=300 (200, 200), then source
     * 0 alone (700). */
    m = open_ok(s, 3, STK_MIX_ALL, 7);
    CHECK(stk_mix_source_rounds(m, 0) == 1000 && stk_mix_source_rounds(m, 1) == 300 &&
          stk_mix_source_rounds(m, 2) == 50 && stk_mix_epoch_rounds(m) == 1350);
    src = check_epoch(m, 2, s, 3);
    check_windows(src, 0, 250, c, 3);
    uint64_t c3[3] = {200, 200, 0};
    check_windows(src, 250, 650, c3, 3);
    for (uint64_t q = 650; q < 1350; q++) CHECK(src[q] == 0);
    free(src);
    stk_mix_close(m);
    /* Counts given: kept whatever the units (a count above them cycles). */
    stk_mix_source g[3] = {{10, 0, 7}, {5, 0, 12}, {1, 0, 1}};
    m = open_ok(g, 3, STK_MIX_STOP, 1);
    CHECK(stk_mix_source_rounds(m, 0) == 7 && stk_mix_source_rounds(m, 1) == 12 &&
          stk_mix_source_rounds(m, 2) == 1);
    free(check_epoch(m, 0, g, 3));
    stk_mix_close(m);
    /* One source: every round is its own, in order. */
    stk_mix_source one = {17, 2.0, 0};
    m = open_ok(&one, 1, STK_MIX_STOP, 3);
    CHECK(stk_mix_epoch_rounds(m) == 17);
    free(check_epoch(m, 0, &one, 1));
    stk_mix_close(m);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* stk__mix_place against the epoch's sources src (R rounds): batches of
 * random length from random rounds and places (with `one`, a sample a
 * round from a round's start: the way of a mixture of mixed batches at
 * one rank). */
static void check_place_at(const stk_mix *m, uint64_t e, const uint32_t *src, size_t k, bool one,
                           int tries) {
    uint64_t R = stk_mix_epoch_rounds(m);
    enum { MAXN = 300 };
    uint32_t srcs[MAXN], lanes[MAXN], want[MAXN];
    uint32_t *pos = calloc(k, sizeof *pos), *start = calloc(k + 1, sizeof *start);
    CHECK(pos && start);
    for (int it = 0; it < tries; it++) {
        uint64_t per = one ? 1 : 1 + rnd() % 4, skip = rnd() % per, a = rnd() % R;
        uint64_t room = (R - a) * per - skip; /* places left in the epoch */
        uint32_t n = (uint32_t)(1 + rnd() % (room < MAXN ? room : MAXN));
        memset(start, 0, (k + 1) * sizeof *start);
        for (uint32_t t = 0; t < n; t++) {
            want[t] = src[a + (skip + t) / per];
            start[want[t] + 1]++;
        }
        for (size_t i = 0; i < k; i++) start[i + 1] += start[i];
        memcpy(pos, start, k * sizeof *pos);
        stk__mix_place(m, e, a, per, skip, n, srcs, lanes, pos);
        for (uint32_t t = 0; t < n; t++) CHECK(srcs[t] == want[t]);
        for (size_t i = 0; i < k; i++) {
            CHECK(pos[i] == start[i + 1]);
            uint32_t prev = 0;
            for (uint32_t x = start[i]; x < start[i + 1]; x++) {
                CHECK(lanes[x] < n && want[lanes[x]] == i);
                CHECK(x == start[i] || lanes[x] > prev);
                prev = lanes[x];
            }
        }
    }
    free(pos);
    free(start);
}

static void check_place(const stk_mix *m, uint64_t e, const uint32_t *src, size_t k) {
    check_place_at(m, e, src, k, false, 40);
}

/* Trees of one and two levels, which stk__mix_place walks with every
 * remainder in registers (2 to 4 sources: 2 a root over two leaves, 3 a
 * leaf on the left and a node on the right, 4 two nodes), and the first
 * deeper one (5).  Exhausting all, the phases of an epoch have 5, 4, 3, 2
 * and 1 sources, and the batches cross from one to the next. */
static void test_shallow(void) {
    for (size_t k = 2; k <= 5; k++) {
        stk_mix_source s[5];
        for (size_t i = 0; i < k; i++)
            s[i] = (stk_mix_source){40 + 70 * (uint64_t)i, 0.3 + 1.7 * (double)(k - i), 0};
        for (int ex = 0; ex < 3; ex++) {
            stk_mix *m = open_ok(s, k, (stk_mix_exhaust)ex, 11 + k);
            uint32_t *src = check_epoch(m, 3, s, k);
            check_place_at(m, 3, src, k, true, 200);
            free(src);
            stk_mix_close(m);
        }
    }
}

static void test_random(void) {
    for (int it = 0; it < 60; it++) {
        size_t k = 1 + rnd() % 9;
        stk_mix_source s[9];
        for (size_t i = 0; i < k; i++) {
            s[i].units = 1 + rnd() % 400;
            s[i].weight = 0.05 + (double)(rnd() % 1000) / 100.0;
            s[i].count = 0;
        }
        stk_mix_exhaust ex = (stk_mix_exhaust)(it % 3);
        stk_mix *m = open_ok(s, k, ex, rnd());
        for (size_t i = 0; i < k; i++) {
            uint64_t r = stk_mix_source_rounds(m, i);
            if (ex == STK_MIX_STOP) CHECK(r <= s[i].units);
            if (ex == STK_MIX_CYCLE) CHECK(r + 1 >= s[i].units);
            if (ex == STK_MIX_ALL) CHECK(r == s[i].units);
        }
        uint64_t e = rnd() % 100;
        uint32_t *src = check_epoch(m, e, s, k);
        if (ex != STK_MIX_ALL) {
            uint64_t c[9];
            for (size_t i = 0; i < k; i++) c[i] = stk_mix_source_rounds(m, i);
            check_windows(src, 0, stk_mix_epoch_rounds(m), c, k);
        }
        /* Another epoch: the same counts, and (for two or more sources
         * with enough rounds) another arrangement. */
        /* stk_mix_fill from any round (inside a phase, across phases)
         * agrees with stk_mix_source_at. */
        for (int t = 0; t < 20; t++) {
            uint64_t R0 = stk_mix_epoch_rounds(m), a = rnd() % R0, len = 1 + rnd() % (R0 - a);
            uint32_t *part = malloc(len * sizeof *part);
            CHECK(part);
            stk_mix_fill(m, e, a, len, part);
            for (uint64_t q = 0; q < len; q++) CHECK(part[q] == src[a + q]);
            free(part);
        }
        check_place(m, e, src, k);
        uint32_t *src2 = check_epoch(m, e + 1, s, k);
        uint64_t R = stk_mix_epoch_rounds(m);
        uint32_t *again = malloc(R * sizeof *again);
        CHECK(again);
        stk_mix_fill(m, e, 0, R, again);
        CHECK(memcmp(again, src, R * sizeof *src) == 0);
        size_t busy = 0;
        for (size_t i = 0; i < k; i++) busy += stk_mix_source_rounds(m, i) >= 20;
        if (busy >= 2 && R >= 100) CHECK(memcmp(src, src2, R * sizeof *src) != 0);
        free(again);
        free(src);
        free(src2);
        stk_mix_close(m);
    }
}

/* Many sources (a tree too large for stk_mix_fill's stack): the same
 * checks, fill walking each round from the root. */
static void test_many(void) {
    stk_mix_source s[40];
    for (size_t i = 0; i < 40; i++) s[i] = (stk_mix_source){1 + rnd() % 50, 1.0 + (double)(i % 7), 0};
    for (int ex = 0; ex < 3; ex++) {
        stk_mix *m = open_ok(s, 40, (stk_mix_exhaust)ex, 5);
        uint32_t *src = check_epoch(m, 4, s, 40);
        uint64_t R = stk_mix_epoch_rounds(m), a = R / 3;
        uint32_t *part = malloc((R - a) * sizeof *part);
        CHECK(part);
        stk_mix_fill(m, 4, a, R - a, part);
        CHECK(memcmp(part, src + a, (R - a) * sizeof *part) == 0);
        check_place(m, 4, src, 40);
        free(part);
        free(src);
        stk_mix_close(m);
    }
}

static void test_errors(void) {
    stk_mix *m = NULL;
    stk_mix_source s[2] = {{10, 1, 0}, {0, 1, 0}};
    CHECK_ERR(stk_mix_open(s, 0, STK_MIX_STOP, 0, &m, &err), -EINVAL, "no sources");
    CHECK_ERR(stk_mix_open(s, 2, STK_MIX_STOP, 0, &m, &err), -EINVAL, "source 1");
    s[1].units = 5;
    s[1].weight = 0;
    CHECK_ERR(stk_mix_open(s, 2, STK_MIX_STOP, 0, &m, &err), -EINVAL, "source 1's weight");
    s[1].weight = NAN;
    CHECK_ERR(stk_mix_open(s, 2, STK_MIX_STOP, 0, &m, &err), -EINVAL, "source 1's weight");
    s[1].weight = 1;
    s[0].count = 3;
    CHECK_ERR(stk_mix_open(s, 2, STK_MIX_STOP, 0, &m, &err), -EINVAL, "source 1");
    CHECK(m == NULL);
    stk_mix_exhaust ex;
    CHECK(stk_mix_exhaust_parse("cycle", &ex) == 0 && ex == STK_MIX_CYCLE);
    CHECK(stk_mix_exhaust_parse("stop", &ex) == 0 && ex == STK_MIX_STOP);
    CHECK(stk_mix_exhaust_parse("all", &ex) == 0 && ex == STK_MIX_ALL);
    CHECK(stk_mix_exhaust_parse("never", &ex) == -EINVAL);
}

int main(void) {
    test_policies();
    test_shallow();
    test_random();
    test_many();
    test_errors();
    return 0;
}
