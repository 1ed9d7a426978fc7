/*
 * test_loader_errors: what the loader refuses, and how it fails.
 *
 *  - options that make no sense fail at open with -EINVAL and a message
 *    naming the option (batch_size, world_size, rank, order, backend,
 *    direct, threads, stride, block_group, fields, window, valid,
 *    valid_field, memory_budget), a compressed time field included, and
 *    leave *out NULL; time fields of unequal rows and a valid_field of
 *    other rows are STK_ESCHEMA naming the shard file and the record;
 *  - a shard truncated under an open loader (pool, io_uring; sequential,
 *    random, block) makes next() fail with a message naming the shard file
 *    and a record whose bytes were cut, again on every call, and in
 *    set_epoch and restore; the loader then closes cleanly;
 *  - holding every batch buffer makes next() return -EBUSY; releasing one
 *    lets it go on;
 *  - closing at random moments, with reads in flight and batches held,
 *    never hangs or leaks (50 rounds), nor does closing while a worker
 *    reads a block group ahead;
 *  - after STK_END, next keeps returning STK_END; next with a timeout gives
 *    the same stream, -ETIMEDOUT changing nothing; an empty dataset and
 *    NULL arguments are handled.
 */
#include "test_loader_common.h"

static uint64_t rng_state = 0x51ed2701abcdef12ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int uring_ok = -1;

static void bad_options(stk_dataset *wds, stk_dataset *rds) {
    stk_loader_options o;
    stk_loader_options_init(&o);

#define WITH(stmt, ds, code, needle)     \
    do {                                 \
        stk_loader_options_init(&o);     \
        o.threads = 1;                   \
        stmt;                            \
        stk_error err;                   \
        stk_loader *ld_ = (stk_loader *)(uintptr_t)1; \
        CHECK_ERR(stk_loader_open(ds, &o, &ld_, &err), code, needle); \
        CHECK(ld_ == NULL);              \
    } while (0)

    WITH(o.batch_size = 0, rds, -EINVAL, "batch_size");
    WITH(o.world_size = 0, rds, -EINVAL, "world_size");
    WITH((o.world_size = 4, o.rank = 4), rds, -EINVAL, "rank");
    WITH((o.world_size = 1, o.rank = 1), rds, -EINVAL, "rank");
    WITH(o.order = (stk_order)7, rds, -EINVAL, "order");
    WITH(o.backend = (stk_backend)9, rds, -EINVAL, "backend");
    WITH((o.backend = STK_BACKEND_MMAP, o.direct = 1), rds, -EINVAL, "direct");
    WITH(o.threads = 65, rds, -EINVAL, "threads");
    WITH(o.threads = -1, rds, -EINVAL, "threads");
    WITH((o.window = 5, o.stride = 0), wds, -EINVAL, "stride");
    WITH((o.order = STK_ORDER_BLOCK, o.block_group = 0), rds, -EINVAL, "block_group");
    const char *unknown[2] = {"x", "nope"};
    WITH((o.fields = unknown, o.nfields = 2), rds, -EINVAL, "fields");
    WITH((o.fields = unknown, o.nfields = 2), rds, -EINVAL, "nope");
    const char *null_name[1] = {NULL};
    WITH((o.fields = null_name, o.nfields = 1), rds, -EINVAL, "fields");
    const char *twice[2] = {"x", "x"};
    WITH((o.fields = twice, o.nfields = 2), rds, -EINVAL, "fields");
    WITH((o.fields = twice, o.nfields = 0), rds, -EINVAL, "fields");
    /* Windows. */
    WITH(o.window = 41, wds, -EINVAL, "window");
    WITH(o.window = 1000, wds, -EINVAL, "longer than every record");
    const char *statics[1] = {"static"};
    WITH((o.window = 5, o.fields = statics, o.nfields = 1), wds, -EINVAL, "window");
    /* z u8[40] has a fixed first dimension of at least 5 rows: a time field,
     * and a compressed one. */
    WITH(o.window = 5, rds, -EINVAL, "window");
    /* Validity rules. */
    WITH((o.valid = STK_VALID_NOT_NAN, o.valid_field = "ts"), wds, -EINVAL, "valid");
    WITH(o.valid_field = "ts", wds, -EINVAL, "valid");
    WITH((o.window = 5, o.valid = STK_VALID_NOT_NAN), wds, -EINVAL, "valid_field");
    WITH((o.window = 5, o.valid = STK_VALID_NOT_NAN, o.valid_field = "aux"), wds, -EINVAL,
         "valid_field");
    WITH((o.window = 5, o.valid = STK_VALID_NOT_NAN, o.valid_field = "aux"), wds, -EINVAL, "float");
    WITH((o.window = 5, o.valid = STK_VALID_MASK, o.valid_field = "nope"), wds, -EINVAL,
         "valid_field");
    WITH((o.window = 5, o.valid = STK_VALID_MASK, o.valid_field = "meta"), wds, -EINVAL,
         "valid_field"); /* compressed */
    /* A per-record field cannot be the rule's field: its rows are not the
     * time axis. */
    WITH((o.window = 5, o.valid = STK_VALID_MASK, o.valid_field = "static"), wds, STK_ESCHEMA,
         "valid_field");
    /* Memory. */
    WITH(o.memory_budget = 1000, rds, -EINVAL, "memory_budget");
    WITH((o.memory_budget = 1 << 20, o.batch_size = 100000), rds, -EINVAL, "memory_budget");
    WITH((o.memory_budget = 1 << 20, o.prefetch = 10000), rds, -EINVAL, "memory_budget");
    WITH((o.order = STK_ORDER_BLOCK, o.block_samples = 100, o.block_group = 50,
          o.memory_budget = 64 << 10, o.batch_size = 4, o.backend = STK_BACKEND_POOL),
         rds, -EINVAL, "memory_budget");
#undef WITH
}

/* Time fields of different rows; a compressed time field; a valid_field
 * whose rows differ from the time axis. */
static void bad_schemas(void) {
    stk_error err = {0};
    stk_field f[3] = {
        {.name = "a", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "b", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "c", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}, .codec = STK_CODEC_ZSTD},
    };
    const char *dir = test_dir("loader-errors-schema");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
    float v[64] = {0};
    for (uint64_t r = 0; r < 20; r++) {
        uint64_t na = 10 + r % 3, nb = r == 13 ? na + 1 : na;
        stk_value vals[3] = {{v, na}, {v, nb}, {v, na}};
        CHECK_OK(stk_writer_append(w, vals, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_shard_info si;
    CHECK_OK(stk_dataset_shard(ds, 0, &si));
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.window = 4;
    const char *ab[2] = {"a", "b"};
    o.fields = ab;
    o.nfields = 2;
    stk_loader *ld = NULL;
    CHECK_ERR(stk_loader_open(ds, &o, &ld, &err), STK_ESCHEMA, si.file);
    CHECK(test_names_record(err.message, 13));
    CHECK(ld == NULL);
    const char *ac[2] = {"a", "c"};
    o.fields = ac;
    CHECK_ERR(stk_loader_open(ds, &o, &ld, &err), -EINVAL, "window");
    CHECK(strstr(err.message, "'c'") && strstr(err.message, "compressed"));
    /* 'c' in records mode is fine, and so is 'b' as a valid field of 'a'
     * except in record 13. */
    o.window = 0;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    stk_loader_close(ld);
    const char *a[1] = {"a"};
    o.fields = a;
    o.nfields = 1;
    o.window = 4;
    o.valid = STK_VALID_NOT_NAN;
    o.valid_field = "b";
    CHECK_ERR(stk_loader_open(ds, &o, &ld, &err), STK_ESCHEMA, "valid_field");
    CHECK(test_names_record(err.message, 13) && strstr(err.message, si.file));
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* A shard cut short under an open loader. */
static void truncated_shard(const tds *d) {
    const stk_order orders[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int bi = 0; bi < 2; bi++)
        for (int oi = 0; oi < 3; oi++)
            for (int threads = 1; threads <= 3; threads += 2) {
                stk_error err = {0};
                stk_backend be = bi == 0 ? STK_BACKEND_POOL : STK_BACKEND_URING;
                if (be == STK_BACKEND_URING && !uring_ok) continue;
                char dir[4200];
                snprintf(dir, sizeof dir, "%s", test_dir("loader-errors-trunc"));
                test_copy_dir(d->dir, dir);
                stk_dataset *ds = NULL;
                CHECK_OK(stk_dataset_open(dir, &ds, &err));
                size_t ns = stk_dataset_num_shards(ds);
                CHECK(ns >= 2);
                stk_shard_info last;
                CHECK_OK(stk_dataset_shard(ds, ns - 1, &last));
                stk_loader_options o;
                stk_loader_options_init(&o);
                o.batch_size = 4;
                o.prefetch = 2;
                o.threads = threads;
                o.backend = be;
                o.order = orders[oi];
                o.block_samples = 3;
                o.block_group = 2;
                stk_loader *ld = NULL;
                int rc = stk_loader_open(ds, &o, &ld, &err);
                if (rc == -ENOSYS) {
                    uring_ok = 0;
                    stk_dataset_close(ds);
                    test_rmrf(dir);
                    continue;
                }
                CHECK_OK(rc);
                if (be == STK_BACKEND_URING) uring_ok = 1;
                /* Cut the last shard in the middle of its data. */
                uint64_t cut = 4096 + last.data_bytes / 2;
                test_truncate(last.file, cut);
                stk_batch *b;
                uint64_t good = 0;
                while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
                    /* Batches that do come out are still right. */
                    tds_check_batch(d, ld, b, NULL, 0, 0, FNV0);
                    stk_loader_release(ld, b);
                    good++;
                }
                if (rc >= 0 || !strstr(err.message, last.file) || !strstr(err.message, "record ")) {
                    fprintf(stderr,
                            "backend %d order %d: after %llu batches next returned %d: %s\n",
                            (int)be, (int)o.order, (unsigned long long)good, rc, err.message);
                    exit(1);
                }
                CHECK(err.code == rc && b == NULL);
                if (getenv("STK_TEST_VERBOSE"))
                    printf("backend %d order %d threads %d: %s\n", (int)be, (int)o.order, threads,
                           err.message);
                char msg[STK_ERROR_MAX];
                memcpy(msg, err.message, sizeof msg);
                /* The record named is one of the cut shard's, and one that
                 * was cut: its bytes end past the new end of the file. */
                int named = 0;
                for (uint64_t r = last.first_record; r < last.first_record + last.records; r++) {
                    if (!test_names_record(msg, r)) continue;
                    uint64_t end = 0;
                    for (size_t f = 0; f < d->nf; f++) {
                        stk_extent x;
                        CHECK_OK(stk_dataset_get(ds, r, f, &x, &err));
                        if (x.offset + x.stored_bytes > end) end = x.offset + x.stored_bytes;
                    }
                    named = end > cut;
                }
                if (!named) {
                    fprintf(stderr, "the record named was not cut (file cut at %llu): %s\n",
                            (unsigned long long)cut, msg);
                    exit(1);
                }
                stk_error again;
                CHECK(stk_loader_next(ld, &b, &again) == rc && again.code == rc);
                CHECK(strcmp(again.message, msg) == 0);
                CHECK(stk_loader_set_epoch(ld, 1, &again) == rc);
                stk_loader_state st;
                stk_loader_save(ld, &st);
                CHECK(stk_loader_restore(ld, &st, &again) == rc);
                CHECK(stk_loader_next(ld, &b, &again) == rc);
                stk_loader_close(ld);
                stk_dataset_close(ds);
                test_rmrf(dir);
            }
}

static void busy(stk_dataset *ds) {
    stk_error err = {0};
    for (int oi = 0; oi < 3; oi++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 5;
        o.prefetch = 2;
        o.threads = 2;
        o.order = (stk_order)oi;
        o.block_samples = 4;
        o.block_group = 2;
        o.backend = STK_BACKEND_POOL;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        stk_batch *a, *b, *c;
        CHECK_OK(stk_loader_next(ld, &a, &err));
        CHECK_OK(stk_loader_next(ld, &b, &err));
        CHECK(a != b && stk_batch_index(a) == 0 && stk_batch_index(b) == 1);
        CHECK_ERR(stk_loader_next(ld, &c, &err), -EBUSY, "release");
        CHECK(c == NULL);
        CHECK_ERR(stk_loader_next(ld, &c, &err), -EBUSY, "batch buffers");
        stk_loader_release(ld, a);
        CHECK_OK(stk_loader_next(ld, &c, &err));
        CHECK(stk_batch_index(c) == 2);
        CHECK_ERR(stk_loader_next(ld, &a, &err), -EBUSY, "release");
        stk_loader_release(ld, b);
        stk_loader_release(ld, c);
        stk_loader_release(ld, NULL);
        uint64_t n = 3;
        int rc;
        while ((rc = stk_loader_next(ld, &a, &err)) == 0) {
            CHECK(stk_batch_index(a) == n++);
            stk_loader_release(ld, a);
        }
        CHECK(rc == STK_END && n == stk_loader_rank_batches(ld));
        for (int i = 0; i < 5; i++) CHECK(stk_loader_next(ld, &a, &err) == STK_END && a == NULL);
        stk_loader_close(ld);
    }
}

/* Close at random moments: right after open, with reads in flight, with
 * batches held, after an epoch change. */
static void random_close(stk_dataset **dss, const tds *ds_desc) {
    stk_error err = {0};
    for (int round = 0; round < 50; round++) {
        int k = (int)(rnd() % 3);
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 1 + (uint32_t)(rnd() % 9);
        o.order = (stk_order)(rnd() % 3);
        o.threads = 1 + (int)(rnd() % 4);
        o.backend = (stk_backend)(1 + rnd() % 3);
        if (o.backend == STK_BACKEND_URING && !uring_ok) o.backend = STK_BACKEND_POOL;
        o.direct = o.backend != STK_BACKEND_MMAP && rnd() % 4 == 0;
        o.block_samples = 1 + rnd() % 6;
        o.block_group = 1 + (uint32_t)(rnd() % 4);
        o.world_size = 1 + (uint32_t)(rnd() % 3);
        o.rank = (uint32_t)(rnd() % o.world_size);
        if (ds_desc[k].kind == TDS_WINDOWS) {
            o.window = 5;
            o.stride = 1 + rnd() % 3;
        }
        stk_loader *ld = NULL;
        int rc = stk_loader_open(dss[k], &o, &ld, &err);
        if (rc == -EINVAL && o.direct) continue; /* no O_DIRECT here */
        CHECK_OK(rc);
        int take = (int)(rnd() % 4);
        stk_batch *held[4];
        int nheld = 0;
        for (int i = 0; i < take; i++) {
            stk_batch *b;
            rc = stk_loader_next(ld, &b, &err);
            if (rc == -EBUSY) break;
            CHECK(rc == 0 || rc == STK_END);
            if (rc) break;
            if (rnd() & 1) held[nheld++] = b;
            else stk_loader_release(ld, b);
        }
        if (rnd() % 4 == 0) CHECK_OK(stk_loader_set_epoch(ld, 1 + rnd() % 3, &err));
        if (nheld && rnd() & 1) stk_loader_release(ld, held[0]);
        if (rnd() % 3 == 0) usleep((useconds_t)(rnd() % 2000));
        stk_loader_close(ld);
    }
}

/* Close while workers read a group ahead (block order, 2 MiB groups, a
 * full ring): the worker that was prefetching must notice the close. */
static void close_during_prefetch(void) {
    stk_error err = {0};
    stk_field f = {.name = "blob", .dtype = STK_U8, .ndim = 1, .shape = {65536}};
    const char *dir = test_dir("loader-errors-prefetch");
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.sync = 0;
    wo.shard_bytes = 4 << 20;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &wo, &w, &err));
    uint8_t *blob = malloc(65536);
    CHECK(blob != NULL);
    for (int r = 0; r < 160; r++) {
        test_fill(blob, 65536, (uint64_t)r);
        stk_value v = {blob, 65536};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    free(blob);
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    for (int round = 0; round < 40; round++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.order = STK_ORDER_BLOCK;
        o.block_samples = 8;
        o.block_group = 4;
        o.batch_size = 1;
        o.prefetch = 2;
        o.threads = 1 + round % 3;
        o.backend = round % 4 == 3 && uring_ok ? STK_BACKEND_URING : STK_BACKEND_POOL;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        if (round % 2) {
            stk_batch *b;
            CHECK_OK(stk_loader_next(ld, &b, &err));
            stk_loader_release(ld, b);
        }
        usleep((useconds_t)(rnd() % 4000));
        stk_loader_close(ld);
    }
    stk_dataset_close(ds);
    test_rmrf(dir);
}

static void empty_dataset(void) {
    stk_error err = {0};
    stk_field f = {.name = "a", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}};
    const char *dir = test_dir("loader-errors-empty");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, NULL, &w, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    for (int oi = 0; oi < 3; oi++)
        for (int win = 0; win < 2; win++) {
            stk_loader_options o;
            stk_loader_options_init(&o);
            o.order = (stk_order)oi;
            o.window = win ? 3 : 0;
            o.threads = 2;
            stk_loader *ld = NULL;
            CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
            CHECK(stk_loader_epoch_samples(ld) == 0 && stk_loader_rank_batches(ld) == 0);
            stk_batch *b;
            CHECK(stk_loader_next(ld, &b, &err) == STK_END);
            CHECK_OK(stk_loader_set_epoch(ld, 3, &err));
            CHECK(stk_loader_next(ld, &b, &err) == STK_END);
            stk_loader_close(ld);
        }
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* next with a timeout: -ETIMEDOUT changes nothing; the stream is the one
 * next() gives; -EBUSY and STK_END win over waiting. */
static void timeouts(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 7;
    o.order = STK_ORDER_RANDOM;
    o.threads = 2;
    o.prefetch = 2;
    o.backend = STK_BACKEND_POOL;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    uint64_t ref = FNV0, n = 0;
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        ref = tds_check_batch(d, ld, b, NULL, 0, 0, ref);
        stk_loader_release(ld, b);
        n++;
    }
    CHECK(rc == STK_END);
    CHECK(stk_loader_next_timeout(ld, &b, 0, &err) == STK_END);
    CHECK(stk_loader_next_timeout(ld, &b, 1000, &err) == STK_END);
    CHECK_OK(stk_loader_set_epoch(ld, 0, &err));
    uint64_t h = FNV0, m = 0, timeouts = 0;
    for (;;) {
        b = (stk_batch *)(uintptr_t)1;
        rc = stk_loader_next_timeout(ld, &b, (int64_t)(m % 3), &err);
        if (rc == -ETIMEDOUT) {
            CHECK(b == NULL);
            timeouts++;
            continue;
        }
        if (rc) break;
        CHECK(stk_batch_index(b) == m);
        h = tds_check_batch(d, ld, b, NULL, 0, 0, h);
        if (m == 2) {
            /* Hold both buffers: busy, not a timeout. */
            stk_batch *c;
            CHECK_OK(stk_loader_next(ld, &c, &err));
            h = tds_check_batch(d, ld, c, NULL, 0, 0, h);
            stk_batch *e;
            CHECK_ERR(stk_loader_next_timeout(ld, &e, 50, &err), -EBUSY, "release");
            stk_loader_release(ld, c);
            m++;
        }
        stk_loader_release(ld, b);
        m++;
    }
    CHECK(rc == STK_END && m == n && h == ref);
    stk_loader_close(ld);
}

static void null_args(stk_dataset *ds) {
    stk_error err = {0};
    stk_loader *ld = NULL;
    stk_batch *b = NULL;
    CHECK(stk_loader_open(NULL, NULL, &ld, &err) == -EINVAL);
    CHECK(stk_loader_open(ds, NULL, NULL, &err) == -EINVAL);
    CHECK(stk_loader_next(NULL, &b, &err) == -EINVAL);
    stk_loader_close(NULL);
    stk_loader_release(NULL, NULL);
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.threads = 1;
    o.batch_size = 3;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    CHECK(stk_loader_next(ld, NULL, &err) == -EINVAL);
    CHECK_OK(stk_loader_next(ld, &b, &err));
    stk_batch_field bf;
    CHECK(stk_batch_field_get(b, stk_loader_num_fields(ld), &bf) == -EINVAL);
    CHECK(stk_batch_field_get(NULL, 0, &bf) == -EINVAL);
    CHECK(stk_loader_find_field(ld, "nope") == -ENOENT);
    CHECK(stk_loader_restore(ld, NULL, &err) == -EINVAL);
    stk_loader_release(ld, b);
    stk_loader_close(ld);
}

/* stk_loader_stop with batches held (every order and backend): the threads
 * are gone, the held batches keep their samples, then they are released
 * and the loader closed (ASan and TSan check the rest). */
static void stop_while_held(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    for (int oi = 0; oi < 3; oi++)
        for (int be = 1; be <= 3; be++) {
            stk_loader_options o;
            stk_loader_options_init(&o);
            o.batch_size = 7;
            o.prefetch = 4;
            o.threads = 2;
            o.order = (stk_order)oi;
            o.block_samples = 5;
            o.block_group = 2;
            o.backend = (stk_backend)be;
            stk_loader *ld = NULL;
            if (stk_loader_open(ds, &o, &ld, &err) != 0) continue; /* io_uring absent */
            stk_batch *a, *b;
            CHECK_OK(stk_loader_next(ld, &a, &err));
            CHECK_OK(stk_loader_next(ld, &b, &err));
            stk_loader_stop(ld);
            stk_loader_stop(ld); /* a second call does nothing */
            tds_check_batch(d, ld, a, NULL, 0, 0, FNV0);
            tds_check_batch(d, ld, b, NULL, 0, 0, FNV0);
            stk_loader_release(ld, a);
            stk_loader_release(ld, b);
            stk_loader_close(ld);
        }
}

int main(void) {
    test_watchdog(280);
    stk_error err = {0};
    tds d[3];
    tds_init(&d[0], TDS_RECORDS, 300);
    tds_init(&d[1], TDS_WINDOWS, 120);
    tds_init(&d[2], TDS_RAGGED, 150);
    tds_write(&d[0], "loader-errors-records");
    tds_write(&d[1], "loader-errors-windows");
    tds_write(&d[2], "loader-errors-ragged");
    stk_dataset *ds[3];
    for (int k = 0; k < 3; k++) CHECK_OK(stk_dataset_open(d[k].dir, &ds[k], &err));
    bad_options(ds[1], ds[0]);
    bad_schemas();
    truncated_shard(&d[0]);
    truncated_shard(&d[2]);
    busy(ds[0]);
    random_close(ds, d);
    close_during_prefetch();
    empty_dataset();
    timeouts(&d[0], ds[0]);
    null_args(ds[2]);
    stop_while_held(&d[0], ds[0]);
    for (int k = 0; k < 3; k++) {
        stk_dataset_close(ds[k]);
        test_rmrf(d[k].dir);
        tds_free(&d[k]);
    }
    if (uring_ok == 0) printf("io_uring unavailable: its truncation cases skipped\n");
    return 0;
}
