/*
 * test_mix_loader: stk_loader_open_mixture over three datasets with ragged
 * and compressed fields.
 *
 *  - every sample's fields equal what was written for its source and id;
 *  - an epoch holds the schedule's counts (STOP, CYCLE, ALL), batches mix
 *    the sources, and each source's samples, taken in order, are its
 *    epochs one after the other (each a permutation of its records);
 *  - homogeneous batches come from one source each;
 *  - a state saved mid-epoch and restored into a new mixture continues the
 *    same sequence (also with another batch size), into the next epochs;
 *  - two ranks take equal batches and together the positions of one run;
 *  - fields that differ, a source smaller than a round, and a state of
 *    other streams are refused, naming why;
 *  - the statistics count the sources' reading and the batches taken;
 *  - drawn batches split among processes take the batches of one in turn;
 *  - drawn batches (the mixture's workers read the sources' samples
 *    straight into its batches) equal fed ones (copied from the sources'
 *    own batches), sample for sample, over epochs, ranks and streams;
 *  - sources of fixed, plain fields read through the mapping are drawn
 *    jointly (every piece located first, the whole batch gathered in one
 *    pass): their batches hold what was written and equal fed ones, and so
 *    do they where a source read from files makes the mixture draw piece
 *    by piece; the statistics count each sample once; a damaged record
 *    stops the epoch naming its shard and record.
 *
 * The tests above run twice: with source 1 in block order read from
 * files, which is fed (its group buffers follow its own batches), and with
 * it read through the mapping, which is drawn (stk__loader_open_drawn).
 * Mode 2 feeds the sources of mode 1 by asking for on_error = skip, which
 * is never drawn (stk__loader_drawable).
 */
#include "test_loader_common.h"

#include "core/fault.h"

static stk_error err;

#define K 3
static const uint64_t NREC[K] = {300, 120, 40};
static tds D[K];
static stk_dataset *DS[K];

typedef struct pick {
    uint32_t src;
    uint64_t id;
} pick;

/* 0: source 1 in block order read from files (fed); 1: random, block
 * order through the mapping, sequential (drawn); 2: the same under
 * on_error = skip (fed). */
static int g_mode;

/* A split among processes for the next open_mix: this one takes batches
 * g_part, g_part + g_parts, ... */
static uint32_t g_part, g_parts = 1;

/* A mixture's own options: batches of B for rank of world, two workers. */
static stk_loader_options common_opts(uint32_t B, uint32_t rank, uint32_t world) {
    stk_loader_options c;
    stk_loader_options_init(&c);
    c.batch_size = B;
    c.rank = rank;
    c.world_size = world;
    c.threads = 2;
    return c;
}

static stk_loader *open_mix(stk_mix_exhaust ex, int homogeneous, uint32_t B, uint32_t rank,
                            uint32_t world, uint32_t streams, uint64_t epoch) {
    static stk_loader_options so[K];
    stk_mixture_source s[K];
    const double w[K] = {1, 1, 0.5};
    for (size_t i = 0; i < K; i++) {
        stk_loader_options_init(&so[i]);
        so[i].order = i == 1 ? STK_ORDER_BLOCK
                      : i == 0 || g_mode == 0 ? STK_ORDER_RANDOM
                                              : STK_ORDER_SEQUENTIAL;
        if (i == 1) so[i].backend = g_mode == 0 ? STK_BACKEND_POOL : STK_BACKEND_MMAP;
        if (g_mode == 2) so[i].on_error = STK_ON_ERROR_SKIP;
        so[i].block_bytes = 2048;
        so[i].seed = 100 + i;
        so[i].threads = 2;
        s[i] = (stk_mixture_source){DS[i], &so[i], w[i], 0, NULL};
    }
    stk_loader_options c = common_opts(B, rank, world);
    c.streams = streams;
    c.epoch = epoch;
    c.split_index = g_part;
    c.split_count = g_parts;
    stk_mixture_options mo = {ex, homogeneous, 9};
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open_mixture(s, K, &c, &mo, &ld, &err));
    return ld;
}

/* Takes the rest of the epoch, checking every sample's contents; appends
 * (source, id) to out.  Returns the batches taken. */
static uint64_t drain(stk_loader *ld, pick *out, size_t *n, int homogeneous, uint64_t max) {
    uint64_t nb = 0;
    stk_batch *b;
    while (nb < max) {
        int rc = stk_loader_next(ld, &b, &err);
        if (rc == STK_END) break;
        CHECK_OK(rc);
        uint32_t m = stk_batch_size(b);
        const uint32_t *src = stk_batch_sources(b);
        const uint64_t *ids = stk_batch_samples(b);
        CHECK(src != NULL);
        stk_batch_field seq, lab, zr;
        CHECK(stk_batch_field_get(b, 0, &seq) == 0 && stk_batch_field_get(b, 1, &lab) == 0 &&
              stk_batch_field_get(b, 2, &zr) == 0);
        CHECK(strcmp(seq.name, "seq") == 0 && seq.offsets && zr.offsets && !lab.offsets);
        for (uint32_t t = 0; t < m; t++) {
            const tds *d = &D[src[t]];
            uint64_t r = ids[t];
            CHECK(src[t] < K && r < d->nrec);
            if (homogeneous) CHECK(src[t] == src[0]);
            CHECK((uint64_t)(seq.offsets[t + 1] - seq.offsets[t]) == d->rows[0][r]);
            CHECK(memcmp((const uint8_t *)seq.data + seq.offsets[t] * 4, d->data[0][r],
                         d->rows[0][r] * 4) == 0);
            CHECK(memcmp((const uint8_t *)lab.data + t * 4, d->data[1][r], 4) == 0);
            CHECK((uint64_t)(zr.offsets[t + 1] - zr.offsets[t]) == d->rows[2][r]);
            CHECK(memcmp((const uint8_t *)zr.data + zr.offsets[t], d->data[2][r],
                         d->rows[2][r]) == 0);
            out[(*n)++] = (pick){src[t], r};
        }
        stk_loader_release(ld, b);
        nb++;
    }
    return nb;
}

/* Each source's samples in order are its epochs one after the other. */
static void check_source_epochs(const pick *p, size_t n, const uint64_t *counts_per_epoch) {
    for (uint32_t s = 0; s < K; s++) {
        uint8_t *seen = calloc(NREC[s], 1);
        CHECK(seen);
        uint64_t k = 0;
        for (size_t j = 0; j < n; j++) {
            if (p[j].src != s) continue;
            if (k % NREC[s] == 0) memset(seen, 0, NREC[s]);
            CHECK(!seen[p[j].id]);
            seen[p[j].id] = 1;
            k++;
        }
        if (counts_per_epoch) CHECK(k % counts_per_epoch[s] == 0);
        free(seen);
    }
}

static pick *buf(void) {
    pick *p = calloc(20000, sizeof *p);
    CHECK(p);
    return p;
}

static void test_epochs(void) {
    /* STOP: source 2 (40 at weight 0.5) runs out first: 80, 80, 40. */
    stk_loader *ld = open_mix(STK_MIX_STOP, 0, 16, 0, 1, 0, 0);
    CHECK(stk_loader_epoch_samples(ld) == 200 && stk_loader_rank_batches(ld) == 13);
    pick *p = buf();
    size_t n = 0;
    for (uint64_t e = 0; e < 5; e++) {
        size_t n0 = n;
        if (e) CHECK_OK(stk_loader_set_epoch(ld, e, &err));
        CHECK(drain(ld, p, &n, 0, UINT64_MAX) == 13);
        uint64_t c[K] = {0};
        for (size_t j = n0; j < n; j++) c[p[j].src]++;
        CHECK(c[0] == 80 && c[1] == 80 && c[2] == 40);
        /* Mixed: the first batch holds all three. */
        CHECK(p[n0].src != p[n0 + 1].src || p[n0].src != p[n0 + 2].src ||
              p[n0 + 3].src != p[n0].src);
    }
    check_source_epochs(p, n, NULL);
    stk_loader_close(ld);
    /* CYCLE: 300, 300, 150; ALL: 300, 120, 40. */
    ld = open_mix(STK_MIX_CYCLE, 0, 32, 0, 1, 0, 0);
    n = 0;
    drain(ld, p, &n, 0, UINT64_MAX);
    CHECK(n == 750);
    check_source_epochs(p, n, NULL);
    stk_loader_close(ld);
    ld = open_mix(STK_MIX_ALL, 0, 32, 0, 1, 0, 0);
    n = 0;
    drain(ld, p, &n, 0, UINT64_MAX);
    uint64_t c[K] = {0};
    for (size_t j = 0; j < n; j++) c[p[j].src]++;
    CHECK(c[0] == 300 && c[1] == 120 && c[2] == 40);
    check_source_epochs(p, n, NREC);
    stk_loader_close(ld);
    /* Homogeneous: rounds of a batch; 300/8 = 37, 120/8 = 15, 40/8 = 5. */
    ld = open_mix(STK_MIX_ALL, 1, 8, 0, 1, 0, 0);
    n = 0;
    CHECK(drain(ld, p, &n, 1, UINT64_MAX) == 37 + 15 + 5);
    stk_loader_close(ld);
    free(p);
}

static void test_resume(void) {
    pick *want = buf(), *got = buf();
    size_t nw = 0, ng = 0;
    stk_loader *ld = open_mix(STK_MIX_STOP, 0, 16, 0, 1, 0, 0);
    drain(ld, want, &nw, 0, UINT64_MAX);
    CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
    drain(ld, want, &nw, 0, UINT64_MAX);
    CHECK_OK(stk_loader_set_epoch(ld, 0, &err));
    drain(ld, got, &ng, 0, 5);
    stk_loader_state st;
    stk_loader_save(ld, &st);
    CHECK(st.position == 80 && st.epoch == 0);
    stk_loader_close(ld);
    /* A new mixture with batches of 7 goes on from there. */
    ld = open_mix(STK_MIX_STOP, 0, 7, 0, 1, 0, 0);
    CHECK_OK(stk_loader_restore(ld, &st, &err));
    drain(ld, got, &ng, 0, UINT64_MAX);
    CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
    drain(ld, got, &ng, 0, UINT64_MAX);
    CHECK(ng == nw);
    for (size_t j = 0; j < nw; j++) CHECK(got[j].src == want[j].src && got[j].id == want[j].id);
    /* A state of other streams is refused, naming what to do. */
    st.streams = 2;
    CHECK_ERR(stk_loader_restore(ld, &st, &err), -EINVAL, "streams=2");
    st.streams = 1;
    st.fingerprint ^= 1;
    CHECK_ERR(stk_loader_restore(ld, &st, &err), -EINVAL, "another mixture");
    stk_loader_close(ld);
    free(want);
    free(got);
}

static void test_ranks(void) {
    /* One run of two ranks' positions against each rank's own. */
    pick *r0 = buf(), *r1 = buf();
    size_t n0 = 0, n1 = 0;
    stk_loader *a = open_mix(STK_MIX_ALL, 0, 10, 0, 2, 0, 0);
    stk_loader *b = open_mix(STK_MIX_ALL, 0, 10, 1, 2, 0, 0);
    CHECK(stk_loader_rank_batches(a) == stk_loader_rank_batches(b));
    CHECK(drain(a, r0, &n0, 0, UINT64_MAX) == drain(b, r1, &n1, 0, UINT64_MAX));
    CHECK(n0 == n1);
    pick *all = buf();
    for (size_t j = 0; j < n0; j++) {
        all[2 * j] = r0[j];
        all[2 * j + 1] = r1[j];
    }
    /* Together: each source's epoch once (less a round's remainder). */
    check_source_epochs(all, 2 * n0, NULL);
    uint64_t c[K] = {0};
    for (size_t j = 0; j < 2 * n0; j++) c[all[j].src]++;
    CHECK(c[0] == 300 && c[1] == 120 && c[2] == 40);
    stk_loader_close(a);
    stk_loader_close(b);
    free(r0);
    free(r1);
    free(all);
}

static void test_refusals(void) {
    tds other;
    tds_init(&other, TDS_RECORDS, 50);
    tds_write(&other, "mix_other");
    stk_dataset *ods = NULL;
    CHECK_OK(stk_dataset_open(other.dir, &ods, &err));
    stk_mixture_source s[2] = {{DS[0], NULL, 1, 0, NULL}, {ods, NULL, 1, 0, NULL}};
    stk_loader *ld = NULL;
    CHECK_ERR(stk_loader_open_mixture(s, 2, NULL, NULL, &ld, &err), STK_ESCHEMA, "mix_other");
    CHECK(ld == NULL);
    /* A round bigger than a source. */
    stk_loader_options c;
    stk_loader_options_init(&c);
    c.batch_size = 64;
    stk_mixture_options mo = {STK_MIX_STOP, 1, 0};
    s[1].ds = DS[2];
    CHECK_ERR(stk_loader_open_mixture(s, 2, &c, &mo, &ld, &err), -EINVAL, "fewer than one round");
    stk_dataset_close(ods);
    tds_free(&other);
}

/* A mixture's statistics count its sources' reading, and the batches and
 * samples its consumer took (drawn, fed, and handed out). */
static void test_stats(void) {
    pick *p = buf();
    for (int mode = 0; mode <= 1; mode++)
        for (int h = 0; h < 2; h++) {
            g_mode = mode;
            stk_loader *ld = open_mix(STK_MIX_ALL, h, 8, 0, 1, 0, 0);
            size_t n = 0;
            uint64_t nb = drain(ld, p, &n, h, UINT64_MAX);
            stk_loader_stats st;
            stk_loader_stats_get(ld, &st);
            CHECK(st.batches == nb && st.samples == n);
            CHECK(st.io.count > 0 && st.io.bytes > 0 && st.plan.count >= n);
            CHECK(st.assemble.bytes > 0 && st.wait.count >= nb);
            CHECK(st.threads >= 1);
            stk_loader_stats_reset(ld);
            stk_loader_stats_get(ld, &st);
            CHECK(st.batches == 0 && st.io.count == 0 && st.plan.count == 0);
            stk_loader_close(ld);
        }
    g_mode = 0;
    free(p);
}

/* A split of drawn batches among 3 processes: together, in turn, they
 * take the batches of one process; a fed mixture refuses a split. */
static void test_split(void) {
    g_mode = 1;
    for (int h = 0; h < 2; h++) {
        uint32_t B = h ? 4 : 10;
        pick *all = buf(), *part[3];
        size_t n = 0, np[3] = {0};
        g_part = 0;
        g_parts = 1;
        stk_loader *ld = open_mix(STK_MIX_CYCLE, h, B, 1, 2, 4, 0);
        uint64_t nb = drain(ld, all, &n, h, UINT64_MAX);
        stk_loader_close(ld);
        uint64_t got = 0;
        for (uint32_t p = 0; p < 3; p++) {
            part[p] = buf();
            g_part = p;
            g_parts = 3;
            ld = open_mix(STK_MIX_CYCLE, h, B, 1, 2, 4, 0);
            got += drain(ld, part[p], &np[p], h, UINT64_MAX);
            stk_loader_close(ld);
        }
        CHECK(got == nb && np[0] + np[1] + np[2] == n);
        /* Batch x of the whole is batch x / 3 of part x % 3. */
        size_t at[3] = {0};
        for (uint64_t x = 0, j = 0; x < nb; x++) {
            uint32_t p = (uint32_t)(x % 3);
            for (uint32_t t = 0; t < B && j < n; t++, j++, at[p]++)
                CHECK(all[j].src == part[p][at[p]].src && all[j].id == part[p][at[p]].id);
        }
        free(all);
        for (int p = 0; p < 3; p++) free(part[p]);
    }
    g_mode = 0;
    g_part = 0;
    g_parts = 1;
    /* Fed (on_error = skip): refused. */
    stk_mixture_source s[2] = {{DS[0], NULL, 1, 0, NULL}, {DS[1], NULL, 1, 0, NULL}};
    stk_loader_options so;
    stk_loader_options_init(&so);
    so.on_error = STK_ON_ERROR_SKIP;
    s[1].opts = &so;
    stk_loader_options c;
    stk_loader_options_init(&c);
    c.split_index = 1;
    c.split_count = 2;
    stk_mixture_options mo = {STK_MIX_STOP, 0, 0};
    stk_loader *ld = NULL;
    CHECK_ERR(stk_loader_open_mixture(s, 2, &c, &mo, &ld, &err), -EINVAL, "split among worker");
    CHECK(ld == NULL);
}

static void test_drawn_equals_fed(void) {
    static const struct {
        stk_mix_exhaust ex;
        int homogeneous;
        uint32_t B, world, streams;
    } cases[] = {{STK_MIX_STOP, 0, 16, 1, 0}, {STK_MIX_ALL, 0, 7, 1, 3},
                 {STK_MIX_CYCLE, 0, 10, 2, 4}, {STK_MIX_ALL, 0, 32, 2, 2},
                 {STK_MIX_ALL, 1, 8, 1, 0},   {STK_MIX_CYCLE, 1, 4, 2, 4}};
    pick *a = buf(), *b = buf();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint32_t rank = 0; rank < cases[c].world; rank++) {
            size_t na = 0, nb = 0;
            for (int mode = 1; mode <= 2; mode++) {
                g_mode = mode;
                int h = cases[c].homogeneous;
                stk_loader *ld = open_mix(cases[c].ex, h, cases[c].B, rank, cases[c].world,
                                          cases[c].streams, 0);
                for (uint64_t e = 0; e < 3; e++) {
                    if (e) CHECK_OK(stk_loader_set_epoch(ld, e, &err));
                    drain(ld, mode == 1 ? a : b, mode == 1 ? &na : &nb, h, UINT64_MAX);
                }
                stk_loader_close(ld);
            }
            CHECK(na == nb && na > 0);
            for (size_t j = 0; j < na; j++) CHECK(a[j].src == b[j].src && a[j].id == b[j].id);
        }
    g_mode = 0;
    free(a);
    free(b);
}

/* ---- joint draws: sources of fixed, plain fields (TDS_FIXED) ---- */

static tds F[K];
static stk_dataset *FS[K];

/* Source 0 in random order, 1 in block order, 2 sequential, all through
 * the mapping: drawn jointly.  fed: the sources under on_error = skip
 * (never drawn); pool: source 1 in random order read from files (drawn,
 * but not jointly: every batch piece by piece). */
static stk_loader *open_fixed(int fed, int pool, stk_mix_exhaust ex, uint32_t B, uint32_t rank,
                              uint32_t world) {
    static stk_loader_options so[K];
    stk_mixture_source s[K];
    const double w[K] = {1, 1, 0.5};
    for (size_t i = 0; i < K; i++) {
        stk_loader_options_init(&so[i]);
        so[i].order = i == 0              ? STK_ORDER_RANDOM
                      : i == 1 && !pool ? STK_ORDER_BLOCK
                      : i == 1          ? STK_ORDER_RANDOM
                                        : STK_ORDER_SEQUENTIAL;
        so[i].backend = i == 1 && pool ? STK_BACKEND_POOL : STK_BACKEND_MMAP;
        so[i].block_bytes = 2048;
        so[i].seed = 200 + i;
        if (fed) so[i].on_error = STK_ON_ERROR_SKIP;
        s[i] = (stk_mixture_source){FS[i], &so[i], w[i], 0, NULL};
    }
    stk_loader_options c = common_opts(B, rank, world);
    stk_mixture_options mo = {ex, 0, 5};
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open_mixture(s, K, &c, &mo, &ld, &err));
    return ld;
}

/* Takes the rest of the epoch, checking every sample against what was
 * written for its source and record.  Returns STK_END or the error. */
static int drain_fixed(stk_loader *ld, pick *out, size_t *n) {
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        uint32_t m = stk_batch_size(b);
        const uint32_t *src = stk_batch_sources(b);
        const uint64_t *ids = stk_batch_samples(b);
        stk_batch_field x, y, id;
        CHECK(stk_batch_field_get(b, 0, &x) == 0 && stk_batch_field_get(b, 1, &y) == 0 &&
              stk_batch_field_get(b, 2, &id) == 0);
        for (uint32_t t = 0; t < m; t++) {
            const tds *d = &F[src[t]];
            uint64_t r = ids[t];
            CHECK(src[t] < K && r < d->nrec);
            CHECK(memcmp((const uint8_t *)x.data + t * 300, d->data[0][r], 300) == 0);
            CHECK(memcmp((const uint8_t *)y.data + t * 12, d->data[1][r], 12) == 0);
            CHECK(((const int64_t *)id.data)[t] == (int64_t)r);
            out[(*n)++] = (pick){src[t], r};
        }
        stk_loader_release(ld, b);
    }
    return rc;
}

static void test_joint(void) {
    pick *a = buf(), *b = buf();
    static const struct {
        stk_mix_exhaust ex;
        uint32_t B, world;
    } cases[] = {{STK_MIX_ALL, 16, 1}, {STK_MIX_CYCLE, 7, 2}, {STK_MIX_STOP, 64, 1}};
    for (int pool = 0; pool <= 1; pool++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (uint32_t rank = 0; rank < cases[c].world; rank++) {
                size_t na = 0, nb = 0;
                for (int fed = 0; fed <= 1; fed++) {
                    stk__fault_arm(STK__FAULT_JOINT, 0, 0); /* (counts joint draws) */
                    stk_loader *ld =
                        open_fixed(fed, pool, cases[c].ex, cases[c].B, rank, cases[c].world);
                    size_t *n = fed ? &nb : &na, n0 = *n;
                    uint64_t batches = 0;
                    for (uint64_t e = 0; e < 3; e++) {
                        if (e) CHECK_OK(stk_loader_set_epoch(ld, e, &err));
                        CHECK(drain_fixed(ld, fed ? b : a, n) == STK_END);
                        /* So far, each sample planned, read (3 fields:
                         * 300 + 12 + 8 bytes) and checked once.  (At an
                         * epoch's end nothing is being read ahead.) */
                        stk_loader_stats st;
                        stk_loader_stats_get(ld, &st);
                        uint64_t m = *n - n0;
                        CHECK(m > 0 && st.samples == m);
                        batches = st.batches;
                        if (!fed && !pool) {
                            CHECK(st.plan.count == m && st.io.count == 3 * m);
                            CHECK(st.io.bytes == 320 * m && st.verify.count == m);
                            CHECK(st.verify.bytes >= 320 * m && st.assemble.bytes == 320 * m);
                        }
                    }
                    /* Every batch of the mixture through the mapping was
                     * one joint draw; none with a source read from files,
                     * nor fed. */
                    CHECK(stk__fault_seen(STK__FAULT_JOINT) ==
                          (long)(fed || pool ? 0 : batches));
                    stk_loader_close(ld);
                }
                CHECK(na == nb && na > 0);
                for (size_t j = 0; j < na; j++)
                    CHECK(a[j].src == b[j].src && a[j].id == b[j].id);
            }
    /* A damaged byte in record 17 of source 2: the epoch stops, naming the
     * record and source 2's shard file. */
    stk_extent x;
    CHECK_OK(stk_dataset_get(FS[2], 17, 0, &x, &err));
    stk_shard_info si;
    CHECK_OK(stk_dataset_shard(FS[2], x.shard, &si));
    char file[4096];
    snprintf(file, sizeof file, "%s", si.file);
    uint8_t byte;
    test_peek(file, x.offset + 250, &byte, 1);
    byte ^= 0x20;
    test_poke(file, x.offset + 250, &byte, 1);
    stk_dataset_close(FS[2]);
    CHECK_OK(stk_dataset_open(F[2].dir, &FS[2], &err));
    stk_loader *ld = open_fixed(0, 0, STK_MIX_ALL, 16, 0, 1);
    size_t n = 0;
    memset(&err, 0, sizeof err);
    CHECK(drain_fixed(ld, a, &n) == STK_ECHECKSUM);
    CHECK(test_names_record(err.message, 17) && strstr(err.message, file) != NULL);
    stk_loader_close(ld);
    byte ^= 0x20;
    test_poke(file, x.offset + 250, &byte, 1);
    /* A joint draw that fails (the third batch's): the epoch stops with
     * its error, and the loader gives it again. */
    stk__fault_arm(STK__FAULT_JOINT, 3, EIO);
    ld = open_fixed(0, 0, STK_MIX_ALL, 16, 0, 1);
    n = 0;
    CHECK(drain_fixed(ld, a, &n) == -EIO && strstr(err.message, "joint draw") != NULL);
    CHECK(n <= 3 * 16); /* (two workers: the third draw is of batch 1, 2 or 3) */
    stk_batch *bt;
    CHECK(stk_loader_next(ld, &bt, &err) == -EIO);
    stk__fault_reset();
    stk_loader_close(ld);
    free(a);
    free(b);
}

int main(void) {
    for (size_t i = 0; i < K; i++) {
        char name[32];
        snprintf(name, sizeof name, "mix_src%zu", i);
        tds_init(&D[i], TDS_RAGGED, NREC[i]);
        tds_write(&D[i], name);
        CHECK_OK(stk_dataset_open(D[i].dir, &DS[i], &err));
    }
    for (g_mode = 0; g_mode <= 1; g_mode++) {
        test_epochs();
        test_resume();
        test_ranks();
    }
    g_mode = 0;
    test_stats();
    test_split();
    test_drawn_equals_fed();
    test_refusals();
    for (size_t i = 0; i < K; i++) {
        char name[32];
        snprintf(name, sizeof name, "mix_fixed%zu", i);
        tds_init(&F[i], TDS_FIXED, NREC[i]);
        /* (Each source's bytes its own: a sample from the wrong one shows.) */
        for (uint64_t r = 0; r < NREC[i]; r++) F[i].data[0][r][r % 300] ^= (uint8_t)(0x11 * (i + 1));
        tds_write(&F[i], name);
        CHECK_OK(stk_dataset_open(F[i].dir, &FS[i], &err));
    }
    test_joint();
    for (size_t i = 0; i < K; i++) {
        stk_dataset_close(DS[i]);
        tds_free(&D[i]);
        stk_dataset_close(FS[i]);
        tds_free(&F[i]);
    }
    return 0;
}
