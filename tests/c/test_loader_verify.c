/* Read-time checksums: with verify on (the default) a damaged byte in any
 * record a batch uses stops the epoch with STK_ECHECKSUM naming the shard
 * file and the damaged record, for every backend and order, records and
 * windows; with verify off the same epoch runs through; every block of an
 * intact dataset is checked once per epoch, again after set_epoch. */
#include "util.h"

#include <errno.h>

#define NREC 200

static void make(const char *dir) {
    stk_error err = {0};
    stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 4}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.block_size = 4096;
    o.shard_bytes = 64 << 10;
    o.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &o, &w, &err));
    float buf[100 * 4];
    for (int r = 0; r < NREC; r++) {
        uint64_t rows = 20 + (uint64_t)(r * 37 % 81);
        for (uint64_t k = 0; k < rows * 4; k++) buf[k] = (float)(r * 1000 + (int)k);
        stk_value v = {buf, rows};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

static int skip_policy;        /* on_error for the next epochs */
static uint64_t skip_limit = 100;
static int saw_record_57;       /* a sample of record 57 was delivered */
static uint64_t batches_seen;

/* Runs one epoch; returns 0, or the error code with its message in err. */
static int epoch(stk_dataset *ds, stk_backend be, stk_order order, uint64_t window, int verify,
                 stk_loader_stats *st, stk_error *err) {
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.on_error = skip_policy ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE;
    o.max_skips = skip_limit;
    saw_record_57 = 0;
    batches_seen = 0;
    o.batch_size = 16;
    o.backend = be;
    o.order = order;
    o.window = window;
    o.verify = verify;
    o.block_samples = 8;
    o.block_group = 3;
    o.threads = 2;
    stk_loader *ld = NULL;
    int rc = stk_loader_open(ds, &o, &ld, err);
    if (rc == -ENOSYS) return rc;
    CHECK(rc == 0);
    for (;;) {
        stk_batch *b;
        rc = stk_loader_next(ld, &b, err);
        if (rc) break;
        batches_seen++;
        const uint64_t *ids = stk_batch_samples(b);
        for (uint32_t j = 0; j < stk_batch_size(b); j++) {
            uint64_t rec = ids[j];
            if (window) { /* window ids -> records: rows of record r are 20 + r*37%81 */
                uint64_t acc = 0;
                for (rec = 0; rec < NREC; rec++) {
                    uint64_t rows = 20 + (rec * 37 % 81), nw = rows - window + 1;
                    if (ids[j] < acc + nw) break;
                    acc += nw;
                }
            }
            if (rec == 57) saw_record_57 = 1;
        }
        stk_loader_release(ld, b);
    }
    if (st) stk_loader_stats_get(ld, st);
    stk_loader_close(ld);
    return rc == STK_END ? 0 : rc;
}

/* Whole records of several plain fields are checked against the record's
 * checksum as they land, on every backend (the checksum runs over every
 * field and the zero padding between them): an intact epoch passes, and
 * damage to either field is caught and names the record. */
static void multi_field_records(void) {
    stk_error err = {0};
    const char *dir = test_dir("loader-verify-multi");
    stk_field f[2] = {{.name = "tag", .dtype = STK_U8, .ndim = 1, .shape = {3}},
                      {.name = "v", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 2}}};
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.sync = 0;
    wo.shard_bytes = 16 << 10;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 2, &wo, &w, &err));
    for (int r = 0; r < 120; r++) {
        uint8_t tag[3] = {(uint8_t)r, (uint8_t)(r >> 8), 7};
        float v[2 * 30];
        uint64_t rows = 1 + (uint64_t)(r % 30);
        for (uint64_t k = 0; k < 2 * rows; k++) v[k] = (float)r + (float)k / 100;
        stk_value vals[2] = {{tag, 3}, {v, rows}};
        CHECK_OK(stk_writer_append(w, vals, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_backend backends[] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    for (int bi = 0; bi < 3; bi++) {
        stk_loader_stats st;
        int rc = epoch(ds, backends[bi], STK_ORDER_RANDOM, 0, 1, &st, &err);
        if (rc == -ENOSYS) continue;
        CHECK(rc == 0 && st.verify.count == 120);
    }
    stk_dataset_close(ds);
    /* One byte of record 77's `tag`, then one of record 33's `v`. */
    uint64_t recs[2] = {77, 33};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(stk_dataset_open(dir, &ds, &err));
        stk_extent x;
        CHECK_OK(stk_dataset_get(ds, recs[k], (size_t)k == 0 ? 0 : 1, &x, &err));
        stk_shard_info si;
        CHECK_OK(stk_dataset_shard(ds, x.shard, &si));
        uint64_t off = k == 0 ? x.offset + 1 : x.offset + 5;
        test_flip(si.file, off, 0x01);
        stk_dataset_close(ds);
        CHECK_OK(stk_dataset_open(dir, &ds, &err));
        for (int bi = 0; bi < 3; bi++) {
            memset(&err, 0, sizeof err);
            int rc = epoch(ds, backends[bi], STK_ORDER_RANDOM, 0, 1, NULL, &err);
            if (rc == -ENOSYS) continue;
            /* Record 77 is damaged from the first round on. */
            CHECK(rc == STK_ECHECKSUM && (test_names_record(err.message, 77) ||
                                          (k == 1 && test_names_record(err.message, 33))));
        }
        stk_dataset_close(ds);
    }
    test_rmrf(dir);
}

int main(void) {
    stk_error err = {0};
    multi_field_records();
    const char *dir = test_dir("loader-verify");
    make(dir);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    /* Intact: every block with record data is checked once per epoch. */
    uint64_t blocks = 0;
    for (size_t i = 0; i < stk_dataset_num_shards(ds); i++) {
        stk_shard_info si;
        stk_dataset_shard(ds, i, &si);
        blocks += (si.data_bytes + 4095) / 4096;
    }
    stk_loader_stats st;
    /* Whole records are checked each against its own checksum, once per
     * delivery; windows (parts of records) through the blocks they use. */
    CHECK(epoch(ds, STK_BACKEND_POOL, STK_ORDER_RANDOM, 0, 1, &st, &err) == 0);
    CHECK(st.verify.count == NREC);
    CHECK(epoch(ds, STK_BACKEND_POOL, STK_ORDER_RANDOM, 20, 1, &st, &err) == 0);
    CHECK(st.verify.count == blocks);
    skip_policy = 1; /* under on_error = skip, records too go through the blocks */
    CHECK(epoch(ds, STK_BACKEND_MMAP, STK_ORDER_RANDOM, 0, 1, &st, &err) == 0);
    CHECK(st.verify.count == blocks);
    skip_policy = 0;
    CHECK(epoch(ds, STK_BACKEND_MMAP, STK_ORDER_SEQUENTIAL, 0, 0, &st, &err) == 0);
    CHECK(st.verify.count == 0);
    for (int bi = 0; bi < 2; bi++) {
        /* Two epochs on one loader: the second checks everything again.
         * Block order (the default) checks its groups' blocks as they
         * load; through the mapping it reads no groups, and checks each
         * record as it copies it. */
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 16;
        o.backend = bi ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        for (int e = 0; e < 2; e++) {
            if (e) CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
            stk_batch *b;
            while (stk_loader_next(ld, &b, &err) == 0) stk_loader_release(ld, b);
        }
        stk_loader_stats_get(ld, &st);
        CHECK(st.verify.count == 2 * (bi ? NREC : blocks));
        stk_loader_close(ld);
    }

    /* Damage one byte in the middle of record 57's data. */
    stk_extent x;
    CHECK_OK(stk_dataset_get(ds, 57, 0, &x, &err));
    stk_shard_info si;
    CHECK_OK(stk_dataset_shard(ds, x.shard, &si));
    uint64_t off = x.offset + x.stored_bytes / 2;
    test_flip(si.file, off, 0x40);
    char base[256];
    snprintf(base, sizeof base, "%s", strrchr(si.file, '/') + 1);
    stk_dataset_close(ds);
    CHECK_OK(stk_dataset_open(dir, &ds, &err)); /* open reads no record bytes */

    stk_backend backends[] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    stk_order orders[] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    uint64_t windows[] = {0, 10};
    for (int bi = 0; bi < 3; bi++)
        for (int oi = 0; oi < 3; oi++)
            for (int wi = 0; wi < 2; wi++) {
                memset(&err, 0, sizeof err);
                int rc = epoch(ds, backends[bi], orders[oi], windows[wi], 1, NULL, &err);
                if (rc == -ENOSYS) continue;
                if (rc != STK_ECHECKSUM || !strstr(err.message, base) ||
                    !test_names_record(err.message, 57)) {
                    fprintf(stderr, "backend %d order %d window %llu: got %d: %s\n", bi, oi,
                            (unsigned long long)windows[wi], rc, err.message);
                    return 1;
                }
                /* Without checks the epoch runs through. */
                CHECK(epoch(ds, backends[bi], orders[oi], windows[wi], 0, NULL, &err) == 0);
                uint64_t full = batches_seen;
                /* Skipping: the same number of batches, record 57 never
                 * delivered, the replacement counted and explained. */
                skip_policy = 1;
                skip_limit = 1000; /* a damaged block can hold hundreds of windows */
                stk_loader_stats st2;
                rc = epoch(ds, backends[bi], orders[oi], windows[wi], 1, &st2, &err);
                skip_policy = 0;
                skip_limit = 100;
                if (rc != 0) {
                    fprintf(stderr, "skip: backend %d order %d window %llu: %d %s\n", bi, oi,
                            (unsigned long long)windows[wi], rc, err.message);
                    return 1;
                }
                CHECK(batches_seen == full);
                CHECK(!saw_record_57);
                CHECK(st2.skipped > 0);
            }
    {
        /* The reason for the last replacement names the damage. */
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 16;
        o.on_error = STK_ON_ERROR_SKIP;
        o.order = STK_ORDER_SEQUENTIAL;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        stk_batch *b;
        while (stk_loader_next(ld, &b, &err) == 0) stk_loader_release(ld, b);
        stk_error why;
        CHECK(stk_loader_last_skip(ld, &why) > 0);
        CHECK(why.code == STK_ECHECKSUM && strstr(why.message, base));
        stk_loader_close(ld);
        /* Skipping needs checks on. */
        o.verify = 0;
        CHECK_ERR(stk_loader_open(ds, &o, &ld, &err), -EINVAL, "on_error");
    }
    stk_dataset_close(ds);

    /* Damage every record from 50 to 70: in sequential order more than
     * max_skips failures in a row raise, naming the first. */
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    for (uint64_t r = 50; r <= 70; r++) {
        CHECK_OK(stk_dataset_get(ds, r, 0, &x, &err));
        CHECK_OK(stk_dataset_shard(ds, x.shard, &si));
        uint64_t o2 = x.offset + 4;
        test_flip(si.file, o2, 0x10);
    }
    stk_dataset_close(ds);
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    skip_policy = 1;
    skip_limit = 5;
    memset(&err, 0, sizeof err);
    int rc = epoch(ds, STK_BACKEND_POOL, STK_ORDER_SEQUENTIAL, 0, 1, NULL, &err);
    CHECK(rc == STK_ECHECKSUM && strstr(err.message, "in a row"));
    skip_limit = 100;
    CHECK(epoch(ds, STK_BACKEND_POOL, STK_ORDER_SEQUENTIAL, 0, 1, NULL, &err) == 0);
    stk_dataset_close(ds);
    test_rmrf(dir);
    return 0;
}
