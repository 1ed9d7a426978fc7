/*
 * test_loader_block_quality: what the block order and the validity rules
 * promise, measured.
 *
 * Mixing.  N records in blocks of B samples, groups of K blocks, batches of
 * b = B samples (so that batches never straddle groups).  Within a group
 * the samples are permuted uniformly, so a batch is b draws without
 * replacement from K blocks of B, and the number of distinct blocks in it
 * has mean K * (1 - C(KB-B, b) / C(KB, b)).  Over 3 epochs (960 batches)
 * the observed mean must be within 3% of that; every batch's samples come
 * from the blocks of one group; the random order's mean must be close to
 * its own expectation (far higher) and the sequential order's exactly 1.
 *
 * Validity.  Time series with a f32 target holding NaNs, f16 and bf16
 * fields with NaNs and infinities (infinities are valid), a u8 mask and a
 * f32 mask with +0.0 and -0.0: for each rule and field, window and stride,
 * the loader's samples are exactly the valid starts counted by brute force,
 * numbered record by record, with the right bytes, in every order; the
 * valid field need not be loaded; a rule that rejects everything gives an
 * empty epoch.
 */
#include "test_loader_common.h"

/* ---- mixing ---- */

static double expected_distinct(double K, double B, double b) {
    /* C(KB-B, b) / C(KB, b) as a product. */
    double ratio = 1.0;
    for (double i = 0; i < b; i++) ratio *= (K * B - B - i) / (K * B - i);
    return K * (1.0 - ratio);
}

static double mean_distinct(stk_dataset *ds, stk_order order, uint64_t B, uint64_t K, uint32_t b,
                            uint64_t epochs, uint64_t N) {
    stk_error err = {0};
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.order = order;
    o.block_samples = B;
    o.block_group = (uint32_t)K;
    o.batch_size = b;
    o.threads = 2;
    o.seed = 5;
    o.backend = STK_BACKEND_MMAP;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    uint64_t batches = 0, distinct = 0;
    uint8_t *mark = calloc(N / B + 1, 1);
    CHECK(mark != NULL);
    for (uint64_t e = 0; e < epochs; e++) {
        CHECK_OK(stk_loader_set_epoch(ld, e, &err));
        stk__order ord;
        stk__order_init(&ord, order, N, o.seed, e, B, K);
        stk_batch *bt;
        int rc;
        while ((rc = stk_loader_next(ld, &bt, &err)) == 0) {
            const uint64_t *ids = stk_batch_samples(bt);
            uint32_t n = stk_batch_size(bt);
            CHECK(n == b);
            uint64_t group = UINT64_MAX;
            for (uint32_t j = 0; j < n; j++) {
                uint64_t blk = ids[j] / B;
                if (!mark[blk]) distinct++;
                mark[blk] = 1;
                if (order == STK_ORDER_BLOCK) {
                    /* The block's group in this epoch. */
                    uint64_t g = stk__perm_invert(&ord.perm, blk) / K;
                    if (group == UINT64_MAX) group = g;
                    CHECK(g == group);
                }
            }
            for (uint32_t j = 0; j < n; j++) mark[ids[j] / B] = 0;
            batches++;
            stk_loader_release(ld, bt);
        }
        CHECK(rc == STK_END);
    }
    stk_loader_close(ld);
    free(mark);
    CHECK(batches == epochs * (N / b));
    return (double)distinct / (double)batches;
}

static void mixing(void) {
    stk_error err = {0};
    const uint64_t B = 16, K = 8, G = 40, N = B * K * G;
    const uint32_t b = 16;
    stk_field f = {.name = "v", .dtype = STK_U32, .ndim = 0};
    const char *dir = test_dir("loader-block-quality");
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.sync = 0;
    wo.shard_bytes = 64 << 10;
    wo.align = 4;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &wo, &w, &err));
    for (uint32_t r = 0; r < N; r++) {
        stk_value v = {&r, 1};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    double want = expected_distinct(K, B, b);
    double got = mean_distinct(ds, STK_ORDER_BLOCK, B, K, b, 3, N);
    double want_rand = expected_distinct((double)(N / B), B, b);
    double got_rand = mean_distinct(ds, STK_ORDER_RANDOM, B, K, b, 1, N);
    double got_seq = mean_distinct(ds, STK_ORDER_SEQUENTIAL, B, K, b, 1, N);
    printf("distinct blocks per batch: block %.3f (expected %.3f), random %.3f (expected %.3f), "
           "sequential %.3f\n",
           got, want, got_rand, want_rand, got_seq);
    CHECK(fabs(got - want) <= 0.03 * want);
    CHECK(fabs(got_rand - want_rand) <= 0.03 * want_rand);
    CHECK(got_seq == 1.0);
    CHECK(got < want_rand - 5.0 && got > got_seq + 4.0);
    /* K = 1: a batch of B aligned samples is one block, shuffled inside. */
    CHECK(mean_distinct(ds, STK_ORDER_BLOCK, B, 1, b, 1, N) == 1.0);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* ---- validity rules ---- */

enum { VX, VY, VH, VBF, VM, VMF, NVF };

/* nan[f][r][t], zero[f][r][t]: row t of field f in record r has a NaN, a
 * zero (set where the data are made, not derived from them). */
static uint8_t **nan_at[NVF], **zero_at[NVF];
static int rule_field;
static stk_valid rule_now;

static int bad(int f, uint64_t r, uint64_t t) {
    if (rule_now == STK_VALID_NOT_NAN) return nan_at[f][r][t];
    if (rule_now == STK_VALID_MASK) return zero_at[f][r][t];
    return 0;
}

static int row_valid(const tds *d, uint64_t rec, uint64_t last_row) {
    (void)d;
    return !bad(rule_field, rec, last_row);
}

static uint16_t h16(int nan, int inf, uint64_t k) {
    if (nan) return k & 1 ? 0xfe00 : 0x7e01;
    if (inf) return k & 1 ? 0xfc00 : 0x7c00;
    return (uint16_t)(0x3c00 + (k % 512));
}
static uint16_t bf16(int nan, int inf, uint64_t k) {
    if (nan) return k & 1 ? 0xff81 : 0x7fc0;
    if (inf) return k & 1 ? 0xff80 : 0x7f80;
    return (uint16_t)(0x3f80 + (k % 64));
}

static void make_valid_dataset(tds *d) {
    memset(d, 0, sizeof *d);
    d->kind = TDS_WINDOWS;
    d->nrec = 80;
    d->f[VX] = (stk_field){.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 2}};
    d->f[VY] = (stk_field){.name = "y", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 2}};
    d->f[VH] = (stk_field){.name = "h", .dtype = STK_F16, .ndim = 1, .shape = {STK_RAGGED}};
    d->f[VBF] = (stk_field){.name = "bf", .dtype = STK_BF16, .ndim = 1, .shape = {STK_RAGGED}};
    d->f[VM] = (stk_field){.name = "m", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}};
    d->f[VMF] = (stk_field){.name = "mf", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}};
    d->nf = NVF;
    for (size_t i = 0; i < d->nf; i++) {
        d->rowb[i] = tds_row_bytes(&d->f[i]);
        d->rows[i] = calloc(d->nrec, 8);
        d->data[i] = calloc(d->nrec, sizeof(uint8_t *));
        nan_at[i] = calloc(d->nrec, sizeof(uint8_t *));
        zero_at[i] = calloc(d->nrec, sizeof(uint8_t *));
        CHECK(d->rows[i] && d->data[i] && nan_at[i] && zero_at[i]);
    }
    for (uint64_t r = 0; r < d->nrec; r++) {
        uint64_t rows = r % 17 == 0 ? 2 : 3 + (r * 7) % 37;
        for (size_t i = 0; i < d->nf; i++) {
            d->rows[i][r] = rows;
            d->data[i][r] = calloc(rows * d->rowb[i] + 1, 1);
            nan_at[i][r] = calloc(rows + 1, 1);
            zero_at[i][r] = calloc(rows + 1, 1);
            CHECK(d->data[i][r] && nan_at[i][r] && zero_at[i][r]);
        }
        for (uint64_t t = 0; t < rows; t++) {
            uint64_t k = stk__mix2(r, t);
            float *x = (float *)d->data[VX][r] + 2 * t;
            x[0] = (float)(r * 1000 + t);
            x[1] = -x[0];
            float *y = (float *)d->data[VY][r] + 2 * t;
            y[0] = 0.5f + (float)t;
            y[1] = 1.5f + (float)r;
            if (k % 4 == 0) {
                y[(k >> 8) & 1] = NAN;
                nan_at[VY][r][t] = 1;
            }
            int hn = (k >> 16) % 5 == 0, hi = !hn && (k >> 16) % 5 == 1;
            uint16_t hv = h16(hn, hi, k), bv = bf16((k >> 24) % 3 == 0, (k >> 24) % 3 == 1, k);
            memcpy(d->data[VH][r] + 2 * t, &hv, 2);
            memcpy(d->data[VBF][r] + 2 * t, &bv, 2);
            nan_at[VH][r][t] = (uint8_t)hn;
            nan_at[VBF][r][t] = (k >> 24) % 3 == 0;
            d->data[VM][r][t] = (k >> 32) % 3 == 0 ? 0 : (uint8_t)(1 + (k >> 40) % 255);
            zero_at[VM][r][t] = d->data[VM][r][t] == 0;
            float mf = (k >> 48) % 4 == 0 ? 0.0f : (k >> 48) % 4 == 1 ? -0.0f : 2.0f;
            memcpy(d->data[VMF][r] + 4 * t, &mf, 4);
            zero_at[VMF][r][t] = (k >> 48) % 4 < 2;
        }
    }
    tds_write_opts(d, "loader-valid", 8 << 10);
}

static void check_rule(tds *d, stk_dataset *ds, stk_valid rule, int field, uint64_t L, uint64_t S,
                       int load_all) {
    stk_error err = {0};
    rule_field = field;
    rule_now = rule;
    tds_windows(d, L, S, row_valid);
    if (getenv("STK_TEST_VERBOSE")) {
        uint64_t all = 0;
        for (uint64_t r = 0; r < d->nrec; r++)
            if (d->rows[0][r] >= L) all += (d->rows[0][r] - L) / S + 1;
        printf("rule %d on '%s', window %llu stride %llu: %llu of %llu starts valid\n", (int)rule,
               d->f[field].name, (unsigned long long)L, (unsigned long long)S,
               (unsigned long long)d->n, (unsigned long long)all);
    }
    const char *only_x[1] = {"x"};
    for (int oi = 0; oi < 3; oi++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.window = L;
        o.stride = S;
        o.valid = rule;
        o.valid_field = d->f[field].name;
        o.order = (stk_order)oi;
        o.block_samples = 6;
        o.block_group = 2;
        o.batch_size = 5;
        o.threads = 2;
        o.backend = oi == 1 ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
        if (!load_all) {
            o.fields = only_x;
            o.nfields = 1;
        }
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        if (stk_loader_epoch_samples(ld) != d->n) {
            fprintf(stderr, "rule %d on '%s' L %llu S %llu: %llu samples, brute force says %llu\n",
                    (int)rule, d->f[field].name, (unsigned long long)L, (unsigned long long)S,
                    (unsigned long long)stk_loader_epoch_samples(ld), (unsigned long long)d->n);
            exit(1);
        }
        uint8_t *seen = calloc(d->n + 1, 1);
        CHECK(seen != NULL);
        uint64_t count = 0;
        stk_batch *b;
        int rc;
        while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
            tds_check_batch(d, ld, b, o.fields, o.nfields, L, FNV0);
            const uint64_t *ids = stk_batch_samples(b);
            for (uint32_t j = 0; j < stk_batch_size(b); j++) {
                CHECK(ids[j] < d->n && !seen[ids[j]]);
                if (oi == STK_ORDER_SEQUENTIAL) CHECK(ids[j] == count);
                seen[ids[j]] = 1;
                count++;
                /* The rule's row, read back from the batch when loaded. */
                uint64_t r = d->srec[ids[j]], last = d->st[ids[j]] + L - 1;
                CHECK(!bad(field, r, last));
                if (load_all) {
                    stk_batch_field bf;
                    CHECK(stk_batch_field_get(b, (size_t)field, &bf) == 0);
                    const uint8_t *row = (const uint8_t *)bf.data +
                                         ((uint64_t)j * L + L - 1) * d->rowb[field];
                    if (field == VY && rule == STK_VALID_NOT_NAN) {
                        float v[2];
                        memcpy(v, row, 8);
                        CHECK(!isnan(v[0]) && !isnan(v[1]));
                    } else if (field == VM && rule == STK_VALID_MASK) {
                        CHECK(row[0] != 0);
                    } else if (field == VMF && rule == STK_VALID_MASK) {
                        float v;
                        memcpy(&v, row, 4);
                        CHECK(v != 0.0f);
                    }
                }
            }
            stk_loader_release(ld, b);
        }
        CHECK(rc == STK_END && count == d->n);
        free(seen);
        stk_loader_close(ld);
    }
}

static void validity(void) {
    stk_error err = {0};
    tds d;
    make_valid_dataset(&d);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
    check_rule(&d, ds, STK_VALID_NOT_NAN, VY, 4, 1, 1);
    check_rule(&d, ds, STK_VALID_NOT_NAN, VY, 3, 2, 0);
    check_rule(&d, ds, STK_VALID_NOT_NAN, VH, 5, 3, 1);
    check_rule(&d, ds, STK_VALID_NOT_NAN, VBF, 2, 1, 1);
    check_rule(&d, ds, STK_VALID_NOT_NAN, VMF, 1, 1, 1); /* no NaN at all */
    check_rule(&d, ds, STK_VALID_MASK, VM, 4, 2, 1);
    check_rule(&d, ds, STK_VALID_MASK, VM, 1, 1, 0);
    check_rule(&d, ds, STK_VALID_MASK, VMF, 3, 1, 1);
    check_rule(&d, ds, STK_VALID_MASK, VY, 6, 4, 1); /* NaN is not zero */
    check_rule(&d, ds, STK_VALID_ALL, VY, 4, 3, 1);  /* a field but no rule */

    /* A rule that rejects everything: an empty epoch, for every order. */
    stk_field zf = {.name = "z", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}};
    const char *zdir = test_dir("loader-valid-none");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(zdir, &zf, 1, NULL, &w, &err));
    uint8_t zeros[20] = {0};
    for (int r = 0; r < 10; r++) {
        stk_value v = {zeros, 20};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *zds = NULL;
    CHECK_OK(stk_dataset_open(zdir, &zds, &err));
    for (int oi = 0; oi < 3; oi++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.window = 3;
        o.valid = STK_VALID_MASK;
        o.valid_field = "z";
        o.order = (stk_order)oi;
        o.threads = 2;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(zds, &o, &ld, &err));
        CHECK(stk_loader_epoch_samples(ld) == 0);
        stk_batch *b;
        CHECK(stk_loader_next(ld, &b, &err) == STK_END);
        stk_loader_close(ld);
    }
    stk_dataset_close(zds);
    test_rmrf(zdir);

    stk_dataset_close(ds);
    test_rmrf(d.dir);
    for (int i = 0; i < NVF; i++) {
        for (uint64_t r = 0; r < d.nrec; r++) {
            free(nan_at[i][r]);
            free(zero_at[i][r]);
        }
        free(nan_at[i]);
        free(zero_at[i]);
    }
    tds_free(&d);
}

int main(void) {
    test_watchdog(280);
    mixing();
    validity();
    return 0;
}
