/*
 * test_loader_matrix: one epoch through the loader, for every
 *
 *   order    sequential, random, block (5-sample blocks, groups of 3)
 *   space    records (fixed shapes), windows (ragged time series of 0..40
 *            rows, window 5, stride 3, per-record fields beside), ragged
 *            records (values + offsets)
 *   world    1, 2, 3, 4 ranks
 *   threads  1, 4
 *   backend  pool, io_uring, mmap   (io_uring skipped where unavailable)
 *
 * and checks that
 *   - every rank yields the same number of batches, of the documented sizes,
 *     numbered from 0, then STK_END and STK_END again;
 *   - each rank's sample ids are exactly positions r, r+W, ... of the
 *     epoch's order (recomputed with the internal order functions), so that
 *     across ranks no id repeats, all are < N and there are W*floor(N/W);
 *   - every field of every batch holds the bytes that were written (window
 *     rows, per-record values, ragged values and offsets, zstd fields);
 *   - the stream (ids and bytes) is the same for every thread count and
 *     backend as for 1 thread with pool, with O_DIRECT (pool, io_uring),
 *     and with a consumer that never spins (STOKER_SPIN=0);
 *   - another epoch or seed gives another order (random, block);
 *   - pad=1 gives every rank ceil(N/W) samples covering everything, and
 *     drop_last=1 drops the last partial batch.
 *
 * Beside the matrix: a subset of the fields in another order; block sizes
 * derived from block_bytes, blocks of 1 sample, and blocks and groups
 * larger than a batch of all ranks or the whole epoch (a batch spanning
 * more groups than there are group buffers); the automatic backend and
 * io_uring queue depths of 1 to 3; time fields with a fixed first
 * dimension (one of them 3-dimensional); worlds larger than the dataset,
 * with and without pad; records of 320 KiB, so that one block's read is
 * cut into several, with O_DIRECT too.  STK_TEST_VERBOSE=1 prints how long
 * each part took.
 */
#include "test_loader_common.h"

#include <time.h>

static double t_start;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
/* With STK_TEST_VERBOSE, how long each part took. */
static void lap(const char *what) {
    double t = now_s();
    if (getenv("STK_TEST_VERBOSE")) printf("%-28s %6.2f s\n", what, t - t_start);
    t_start = t;
}

static int uring_skipped, direct_skipped;

typedef struct world_result {
    uint64_t hash[8];
    uint64_t batches;
    int skipped;
} world_result;

/* Runs all W ranks of one configuration over one epoch and checks them. */
static void run_world(const tds *d, stk_dataset *ds, const stk_loader_options *base,
                      world_result *res) {
    stk_error err = {0};
    uint64_t N = tds_samples(d), W = base->world_size;
    uint64_t L = base->window;
    uint32_t B = base->batch_size;
    uint8_t *seen = calloc(N + 1, 1);
    CHECK(seen != NULL);
    uint64_t total = 0;
    memset(res, 0, sizeof *res);
    for (uint32_t r = 0; r < W; r++) {
        stk_loader_options o = *base;
        o.rank = r;
        stk_loader *ld = NULL;
        int rc = stk_loader_open(ds, &o, &ld, &err);
        if (rc == -ENOSYS && o.backend == STK_BACKEND_URING) {
            uring_skipped++;
            res->skipped = 1;
            free(seen);
            return;
        }
        if (rc == -EINVAL && o.direct && strstr(err.message, "O_DIRECT")) {
            direct_skipped++;
            res->skipped = 1;
            free(seen);
            return;
        }
        if (rc) {
            fprintf(stderr, "open (%s order %d W %llu rank %u threads %d backend %d direct %d): %s\n",
                    tds_kind_name(d->kind), (int)o.order, (unsigned long long)W, r, o.threads,
                    (int)o.backend, o.direct, err.message);
            exit(1);
        }
        CHECK(stk_loader_backend(ld) == o.backend);
        stk__order ord;
        /* The default: a stream per rank. */
        uint64_t S = o.streams ? o.streams : W;
        stk__order_init_streams(&ord, o.order, N, o.seed, o.epoch, o.block_samples,
                                o.block_group, S);
        stk__deal dl;
        stk__deal_init(&dl, N, 0, W, r, o.pad != 0);
        stk__deal_streams(&dl, S);
        uint64_t per_rank = o.pad ? (N + W - 1) / W : N / W;
        uint64_t nb = o.drop_last ? per_rank / B : (per_rank + B - 1) / B;
        CHECK(stk_loader_epoch_samples(ld) == N);
        CHECK(stk_loader_rank_samples(ld) == per_rank);
        CHECK(stk_loader_rank_batches(ld) == nb);
        if (r == 0) res->batches = nb;
        CHECK(res->batches == nb);
        uint64_t h = FNV0, i = 0, k = 0;
        stk_batch *b;
        while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
            CHECK(stk_batch_index(b) == k);
            uint32_t n = stk_batch_size(b);
            uint32_t want = (uint32_t)(per_rank - i < B ? per_rank - i : B);
            CHECK(n == want && n > 0);
            const uint64_t *ids = stk_batch_samples(b);
            for (uint32_t j = 0; j < n; j++, i++) {
                /* (Blocks derived from block_bytes: the size is the
                 * loader's to choose, so only coverage is checked.) */
                bool derived = (o.order == STK_ORDER_BLOCK || (o.order == STK_ORDER_RANDOM && S > 1)) &&
                               !o.block_samples;
                uint64_t e = derived ? ids[j] : expect_sample(&ord, &dl, i);
                if (ids[j] != e) {
                    fprintf(stderr,
                            "%s order %d W %llu rank %u threads %d backend %d: batch %llu "
                            "sample %u is %llu, want %llu\n",
                            tds_kind_name(d->kind), (int)o.order, (unsigned long long)W, r,
                            o.threads, (int)o.backend, (unsigned long long)k, j,
                            (unsigned long long)ids[j], (unsigned long long)e);
                    exit(1);
                }
                CHECK(ids[j] < N);
                if (!o.pad) CHECK(!seen[ids[j]]);
                if (!seen[ids[j]]) total++;
                seen[ids[j]] = 1;
            }
            h = tds_check_batch(d, ld, b, o.fields, o.nfields, L, h);
            if (k == 1) {
                stk_loader_stats st;
                stk_loader_stats_get(ld, &st);
                CHECK(st.batches == 2);
            }
            stk_loader_release(ld, b);
            k++;
        }
        if (rc != STK_END) {
            fprintf(stderr, "next: %d %s\n", rc, err.message);
            exit(1);
        }
        CHECK(k == nb);
        CHECK(i == (o.drop_last ? nb * B : per_rank));
        CHECK(stk_loader_next(ld, &b, &err) == STK_END && b == NULL);
        CHECK(stk_loader_next(ld, &b, &err) == STK_END);
        stk_loader_stats st;
        stk_loader_stats_get(ld, &st);
        CHECK(st.batches == nb && st.samples == i);
        CHECK(st.threads == (uint32_t)o.threads && st.ring_slots >= 2);
        /* (Through the mapping block order takes no groups: it copies
         * from the mapping in its order.) */
        if (o.order == STK_ORDER_BLOCK && nb)
            CHECK(o.backend == STK_BACKEND_MMAP ? st.groups_loaded == 0 : st.groups_loaded > 0);
        stk_loader_close(ld);
        res->hash[r] = h;
    }
    if (base->pad) {
        CHECK(total == N);
    } else if (!base->drop_last) {
        CHECK(total == W * (N / W));
    }
    free(seen);
}

static void base_options(stk_loader_options *o, const tds *d) {
    stk_loader_options_init(o);
    o->batch_size = 7;
    o->block_samples = 5;
    o->block_group = 3;
    o->seed = 42;
    o->memory_budget = 64 << 20;
    if (d->kind == TDS_WINDOWS) {
        o->window = d->L;
        o->stride = d->S;
    }
}

static void matrix(const tds *d, stk_dataset *ds) {
    const stk_order orders[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    const stk_backend backends[3] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    const int threads[2] = {1, 4};
    for (int oi = 0; oi < 3; oi++) {
        for (uint32_t W = 1; W <= 4; W++) {
            world_result ref, got;
            int have_ref = 0;
            for (int bi = 0; bi < 3; bi++)
                for (int ti = 0; ti < 2; ti++) {
                    stk_loader_options o;
                    base_options(&o, d);
                    o.order = orders[oi];
                    o.world_size = W;
                    o.backend = backends[bi];
                    o.threads = threads[ti];
                    run_world(d, ds, &o, have_ref ? &got : &ref);
                    if (!have_ref) {
                        CHECK(!ref.skipped);
                        have_ref = 1;
                        continue;
                    }
                    if (got.skipped) continue;
                    CHECK(got.batches == ref.batches);
                    for (uint32_t r = 0; r < W; r++) {
                        if (got.hash[r] != ref.hash[r]) {
                            fprintf(stderr,
                                    "%s order %d W %u rank %u: backend %d threads %d gives "
                                    "another stream than pool with 1 thread\n",
                                    tds_kind_name(d->kind), (int)orders[oi], W, r,
                                    (int)backends[bi], threads[ti]);
                            exit(1);
                        }
                    }
                }
            /* A consumer that never spins for a batch being filled
             * (STOKER_SPIN=0; one worker leaves a CPU free, so the runs
             * above spun where the machine has two): the same stream. */
            {
                stk_loader_options o;
                base_options(&o, d);
                o.order = orders[oi];
                o.world_size = W;
                o.backend = STK_BACKEND_MMAP;
                o.threads = 1;
                setenv("STOKER_SPIN", "0", 1);
                run_world(d, ds, &o, &got);
                unsetenv("STOKER_SPIN");
                CHECK(got.skipped || got.batches == ref.batches);
                for (uint32_t r = 0; !got.skipped && r < W; r++) CHECK(got.hash[r] == ref.hash[r]);
            }
            /* O_DIRECT: the same stream again. */
            if (W == 2 || W == 3) {
                for (int bi = 0; bi < 2; bi++) {
                    stk_loader_options o;
                    base_options(&o, d);
                    o.order = orders[oi];
                    o.world_size = W;
                    o.backend = backends[bi];
                    o.threads = 2;
                    o.direct = 1;
                    run_world(d, ds, &o, &got);
                    if (got.skipped) continue;
                    for (uint32_t r = 0; r < W; r++) CHECK(got.hash[r] == ref.hash[r]);
                }
            }
        }
    }
}

/* Sample ids of one rank's whole epoch. */
static uint64_t *epoch_ids(stk_dataset *ds, const stk_loader_options *o, uint64_t *count) {
    stk_error err = {0};
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, o, &ld, &err));
    uint64_t cap = stk_loader_rank_samples(ld), n = 0;
    uint64_t *ids = malloc((cap + 1) * 8);
    CHECK(ids != NULL);
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        for (uint32_t j = 0; j < stk_batch_size(b); j++) ids[n++] = stk_batch_samples(b)[j];
        stk_loader_release(ld, b);
    }
    CHECK(rc == STK_END);
    stk_loader_close(ld);
    *count = n;
    return ids;
}

static void epochs_differ(const tds *d, stk_dataset *ds) {
    const stk_order orders[2] = {STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int oi = 0; oi < 2; oi++) {
        stk_loader_options o;
        base_options(&o, d);
        o.order = orders[oi];
        o.threads = 2;
        o.backend = STK_BACKEND_POOL;
        uint64_t n0, n1, n2, n3;
        uint64_t *a = epoch_ids(ds, &o, &n0);
        uint64_t *a2 = epoch_ids(ds, &o, &n3);
        o.epoch = 1;
        uint64_t *b = epoch_ids(ds, &o, &n1);
        o.epoch = 0;
        o.seed = 43;
        uint64_t *c = epoch_ids(ds, &o, &n2);
        CHECK(n0 == n1 && n0 == n2 && n0 == n3 && n0 == tds_samples(d));
        CHECK(memcmp(a, a2, n0 * 8) == 0);
        uint64_t db = 0, dc = 0;
        for (uint64_t i = 0; i < n0; i++) {
            db += a[i] != b[i];
            dc += a[i] != c[i];
        }
        if (db < n0 / 2 || dc < n0 / 2) {
            fprintf(stderr, "%s order %d: epoch 1 differs at %llu and seed 43 at %llu of %llu\n",
                    tds_kind_name(d->kind), (int)orders[oi], (unsigned long long)db,
                    (unsigned long long)dc, (unsigned long long)n0);
            exit(1);
        }
        free(a);
        free(a2);
        free(b);
        free(c);
    }
}

static void pad_and_drop(const tds *d, stk_dataset *ds) {
    const stk_order orders[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    uint64_t N = tds_samples(d);
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t W = 2; W <= 4; W++) {
            world_result res;
            stk_loader_options o;
            base_options(&o, d);
            o.order = orders[oi];
            o.world_size = W;
            o.threads = 2;
            o.backend = oi == 1 ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
            o.pad = 1;
            run_world(d, ds, &o, &res);
            CHECK(res.batches == ((N + W - 1) / W + 6) / 7);
            o.pad = 0;
            o.drop_last = 1;
            run_world(d, ds, &o, &res);
            CHECK(res.batches == (N / W) / 7);
        }
    /* A batch larger than a rank's share: one partial batch, or none. */
    stk_loader_options o;
    base_options(&o, d);
    o.batch_size = (uint32_t)N;
    o.world_size = 2;
    o.threads = 2;
    o.backend = STK_BACKEND_POOL;
    world_result res;
    run_world(d, ds, &o, &res);
    CHECK(res.batches == 1);
    o.drop_last = 1;
    run_world(d, ds, &o, &res);
    CHECK(res.batches == 0);
}

/* Block order with blocks sized from block_bytes, and with blocks and
 * groups larger than a batch of all ranks or than the whole epoch. */
static void block_shapes(const tds *d, stk_dataset *ds) {
    const uint64_t bytes[3] = {300, 2000, 1 << 20};
    const uint64_t samples[3] = {1, 40, 100000};
    const uint32_t groups[3] = {1, 2, 50};
    for (int i = 0; i < 3; i++)
        for (uint32_t W = 1; W <= 3; W += 2) {
            world_result ref, got;
            stk_loader_options o;
            base_options(&o, d);
            o.order = STK_ORDER_BLOCK;
            o.world_size = W;
            o.threads = 1;
            o.backend = STK_BACKEND_POOL;
            o.block_samples = 0;
            o.block_bytes = bytes[i];
            o.block_group = groups[i];
            run_world(d, ds, &o, &ref);
            o.threads = 4;
            o.backend = STK_BACKEND_MMAP;
            run_world(d, ds, &o, &got);
            for (uint32_t r = 0; r < W; r++) CHECK(got.hash[r] == ref.hash[r]);
            o.block_samples = samples[i];
            o.threads = 3;
            o.backend = STK_BACKEND_POOL;
            run_world(d, ds, &o, &got);
        }
}

/* A subset of the fields, in another order. */
static void field_subset(const tds *d, stk_dataset *ds) {
    const char *names[2];
    if (d->kind == TDS_RECORDS) {
        names[0] = "z";
        names[1] = "x";
    } else if (d->kind == TDS_WINDOWS) {
        names[0] = "static";
        names[1] = "ts";
    } else {
        names[0] = "zr";
        names[1] = "lab";
    }
    for (int oi = 0; oi < 3; oi++) {
        stk_loader_options o;
        base_options(&o, d);
        o.fields = names;
        o.nfields = 2;
        o.order = (stk_order)oi;
        o.world_size = 2;
        o.threads = 3;
        o.backend = STK_BACKEND_POOL;
        world_result res;
        run_world(d, ds, &o, &res);
    }
}

/* A dataset of the caller's fields, laid out as tds_init does; rows_fn
 * gives the rows of field i in record r.  (The kind only tells the checks
 * whether windows are read.) */
static void custom_init(tds *d, tds_kind kind, uint64_t nrec, const stk_field *f, size_t nf,
                        uint64_t (*rows_fn)(size_t, uint64_t)) {
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->nrec = nrec;
    d->nf = nf;
    for (size_t i = 0; i < nf; i++) {
        d->f[i] = f[i];
        d->rowb[i] = tds_row_bytes(&f[i]);
        d->rows[i] = calloc(nrec, 8);
        d->data[i] = calloc(nrec, sizeof(uint8_t *));
        CHECK(d->rows[i] && d->data[i]);
        for (uint64_t r = 0; r < nrec; r++) {
            uint64_t rows = rows_fn(i, r);
            d->rows[i][r] = rows;
            d->data[i][r] = malloc(rows * d->rowb[i] + 1);
            CHECK(d->data[i][r] != NULL);
            test_fill(d->data[i][r], (size_t)(rows * d->rowb[i]), r * 977 + i + 3);
        }
    }
}

static uint64_t fixed_rows(size_t i, uint64_t r) {
    (void)r;
    return i == 0 || i == 1 ? 24 : i == 3 ? 3 : 1;
}

/* Time fields with a fixed first dimension (every record 24 rows), one of
 * them 3-dimensional, beside a scalar and a short fixed field. */
static void fixed_time(void) {
    stk_error err = {0};
    stk_field f[4] = {
        {.name = "a", .dtype = STK_F32, .ndim = 2, .shape = {24, 2}},
        {.name = "b", .dtype = STK_U8, .ndim = 3, .shape = {24, 2, 3}},
        {.name = "lab", .dtype = STK_I32, .ndim = 0},
        {.name = "v", .dtype = STK_F64, .ndim = 1, .shape = {3}},
    };
    tds d;
    custom_init(&d, TDS_WINDOWS, 90, f, 4, fixed_rows);
    tds_write(&d, "loader-matrix-fixed-time");
    tds_windows(&d, 6, 4, NULL);
    CHECK(d.n == 90 * 5);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
    const stk_backend backends[3] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t W = 1; W <= 3; W += 2) {
            world_result ref, got;
            for (int bi = 0; bi < 3; bi++) {
                stk_loader_options o;
                base_options(&o, &d);
                o.window = 6;
                o.stride = 4;
                o.order = (stk_order)oi;
                o.world_size = W;
                o.backend = backends[bi];
                o.threads = 1 + bi;
                run_world(&d, ds, &o, bi ? &got : &ref);
                if (bi && !got.skipped)
                    for (uint32_t r = 0; r < W; r++) CHECK(got.hash[r] == ref.hash[r]);
            }
        }
    stk_dataset_close(ds);
    test_rmrf(d.dir);
    tds_free(&d);
}

/* Worlds larger than the dataset: ranks with nothing, or (pad) with the
 * order's start again. */
static void tiny_worlds(void) {
    stk_error err = {0};
    tds d;
    tds_init(&d, TDS_RECORDS, 5);
    tds_write(&d, "loader-matrix-tiny");
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t W = 1; W <= 8; W++)
            for (int pad = 0; pad < 2; pad++) {
                stk_loader_options o;
                base_options(&o, &d);
                o.batch_size = 2;
                o.block_samples = 2;
                o.block_group = 2;
                o.order = (stk_order)oi;
                o.world_size = W;
                o.pad = pad;
                o.threads = 2;
                o.backend = STK_BACKEND_POOL;
                world_result res;
                run_world(&d, ds, &o, &res);
                uint64_t per = pad ? (5 + W - 1) / W : 5 / W;
                CHECK(res.batches == (per + 1) / 2);
            }
    stk_dataset_close(ds);
    test_rmrf(d.dir);
    tds_free(&d);
}

static uint64_t big_rows(size_t i, uint64_t r) {
    return i == 0 ? (r % 5 == 0 ? 1 : 320 << 10) : 1;
}

/* Records of 320 KiB (every fifth of one byte), so that a block of 20
 * records spans more than one 4 MiB read, through every backend and with
 * O_DIRECT. */
static void big_records(void) {
    stk_error err = {0};
    stk_field f[2] = {
        {.name = "blob", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "id", .dtype = STK_U32, .ndim = 0},
    };
    tds d;
    custom_init(&d, TDS_RAGGED, 24, f, 2, big_rows);
    tds_write_opts(&d, "loader-matrix-big", 64 << 20);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
    const stk_backend backends[3] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    for (int oi = 0; oi < 3; oi++) {
        world_result ref, got;
        for (int bi = 0; bi < 5; bi++) {
            stk_loader_options o;
            base_options(&o, &d);
            o.batch_size = 5;
            o.block_samples = 20;
            o.block_group = 2;
            o.order = (stk_order)oi;
            o.world_size = 2;
            o.backend = backends[bi % 3];
            o.direct = bi >= 3;
            o.threads = 2;
            o.memory_budget = 256 << 20;
            run_world(&d, ds, &o, bi ? &got : &ref);
            if (bi && !got.skipped)
                for (uint32_t r = 0; r < 2; r++) CHECK(got.hash[r] == ref.hash[r]);
        }
    }
    stk_dataset_close(ds);
    test_rmrf(d.dir);
    tds_free(&d);
}

/* The automatic backend and odd io_uring queue depths give the same
 * stream. */
static void other_settings(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    for (int oi = 0; oi < 3; oi++) {
        world_result ref, got;
        stk_loader_options o;
        base_options(&o, d);
        o.order = (stk_order)oi;
        o.world_size = 2;
        o.threads = 1;
        o.backend = STK_BACKEND_POOL;
        run_world(d, ds, &o, &ref);
        for (int v = 0; v < 4; v++) {
            o.threads = 2;
            if (v == 0) {
                o.backend = STK_BACKEND_AUTO;
                stk_loader *ld = NULL;
                CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
                o.backend = stk_loader_backend(ld); /* run_world checks it */
                CHECK(o.backend != STK_BACKEND_AUTO);
                CHECK(strcmp(stk_backend_name(o.backend), "auto") != 0);
                stk_loader_close(ld);
            } else {
                o.backend = STK_BACKEND_URING;
                o.queue_depth = v == 1 ? 1 : v == 2 ? 2 : 3;
                o.threads = v;
            }
            run_world(d, ds, &o, &got);
            if (!got.skipped)
                for (uint32_t r = 0; r < 2; r++) CHECK(got.hash[r] == ref.hash[r]);
        }
    }
}

int main(void) {
    test_watchdog(280);
    t_start = now_s();
    const tds_kind kinds[3] = {TDS_RECORDS, TDS_WINDOWS, TDS_RAGGED};
    const uint64_t nrec[3] = {300, 200, 250};
    for (int k = 0; k < 3; k++) {
        stk_error err = {0};
        tds d;
        tds_init(&d, kinds[k], nrec[k]);
        char name[64];
        snprintf(name, sizeof name, "loader-matrix-%s", tds_kind_name(kinds[k]));
        tds_write(&d, name);
        if (d.kind == TDS_WINDOWS) tds_windows(&d, 5, 3, NULL);
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        CHECK(stk_dataset_num_shards(ds) >= 3);
        lap("write");
        matrix(&d, ds);
        lap(tds_kind_name(d.kind));
        epochs_differ(&d, ds);
        pad_and_drop(&d, ds);
        field_subset(&d, ds);
        block_shapes(&d, ds);
        other_settings(&d, ds);
        lap("other options");
        stk_dataset_close(ds);
        test_rmrf(d.dir);
        tds_free(&d);
    }
    fixed_time();
    lap("fixed time fields");
    tiny_worlds();
    lap("tiny worlds");
    big_records();
    lap("big records");
    if (uring_skipped) printf("io_uring unavailable: %d configurations skipped\n", uring_skipped);
    if (direct_skipped) printf("O_DIRECT unsupported here: %d configurations skipped\n", direct_skipped);
    return 0;
}
