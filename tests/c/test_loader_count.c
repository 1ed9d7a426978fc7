/*
 * test_loader_count: stk_loader_count gives, without opening a loader, the
 * counts an opened loader gives, and the batches an epoch yields, for
 * records and windows (with and without a validity rule), every order, 1 to
 * 4 ranks, pad, drop_last and splits among consumers; and it refuses what
 * stk_loader_open refuses, with the same code.
 */
#include "util.h"

/* 37 records: a ragged series of 0..12 rows, a mask beside it, an id. */
static void write_dataset(const char *dir) {
    stk_error err = {0};
    stk_field f[3] = {
        {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 2}},
        {.name = "m", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "id", .dtype = STK_U32, .ndim = 0},
    };
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
    float x[2 * 12];
    uint8_t m[12];
    for (uint32_t r = 0; r < 37; r++) {
        uint64_t rows = (r * 7) % 13;
        test_fill(x, sizeof x, r);
        for (uint64_t t = 0; t < rows; t++) m[t] = (uint8_t)((r + t) % 3 != 0);
        stk_value v[3] = {{x, rows}, {m, rows}, {&r, 1}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* Opens a loader with `o`, checks its counts against stk_loader_count's,
 * and runs one epoch to check the batch count. */
static void check_same(stk_dataset *ds, const stk_loader_options *o) {
    stk_error err = {0};
    uint64_t es = 0, rs = 0, rb = 0;
    CHECK_OK(stk_loader_count(ds, o, &es, &rs, &rb, &err));
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, o, &ld, &err));
    CHECK(es == stk_loader_epoch_samples(ld));
    CHECK(rs == stk_loader_rank_samples(ld));
    CHECK(rb == stk_loader_rank_batches(ld));
    uint64_t got = 0;
    stk_batch *b = NULL;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        got++;
        stk_loader_release(ld, b);
    }
    CHECK(rc == STK_END);
    CHECK(got == rb);
    stk_loader_close(ld);
}

int main(void) {
    stk_error err = {0};
    const char *dir = test_dir("loader_count");
    write_dataset(dir);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    const stk_order orders[] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    const uint64_t windows[] = {0, 4};
    for (size_t oi = 0; oi < 3; oi++)
        for (size_t wi = 0; wi < 2; wi++)
            for (int valid = 0; valid <= (windows[wi] != 0); valid++)
                for (uint32_t world = 1; world <= 4; world++)
                    for (int flags = 0; flags < 8; flags++) {
                        stk_loader_options o;
                        stk_loader_options_init(&o);
                        o.order = orders[oi];
                        o.block_samples = 5;
                        o.block_group = 2;
                        o.window = windows[wi];
                        o.stride = 2;
                        if (valid) {
                            o.valid = STK_VALID_MASK;
                            o.valid_field = "m";
                        }
                        o.batch_size = 3;
                        o.world_size = world;
                        o.rank = world - 1;
                        o.pad = flags & 1;
                        o.drop_last = (flags >> 1) & 1;
                        o.split_count = flags & 4 ? 3 : 1;
                        o.split_index = o.split_count - 1;
                        o.threads = 1;
                        o.prefetch = 2;
                        check_same(ds, &o);
                    }

    /* The defaults (NULL options), and NULL out-pointers. */
    uint64_t rb = 0;
    CHECK_OK(stk_loader_count(ds, NULL, NULL, NULL, &rb, &err));
    CHECK(rb == (37 + 31) / 32);
    CHECK_OK(stk_loader_count(ds, NULL, NULL, NULL, NULL, &err));

    /* Refused as stk_loader_open refuses it. */
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.rank = 2;
    o.world_size = 2;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, &rb, &err), -EINVAL, "rank");
    stk_loader_options_init(&o);
    const char *missing[] = {"nope"};
    o.fields = missing;
    o.nfields = 1;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, &rb, &err), -EINVAL, "nope");
    stk_loader_options_init(&o);
    o.window = 4;
    const char *fixed[] = {"id"};
    o.fields = fixed;
    o.nfields = 1;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, &rb, &err), -EINVAL, "time axis");
    CHECK_ERR(stk_loader_count(NULL, NULL, NULL, NULL, &rb, &err), -EINVAL, "NULL");

    stk_dataset_close(ds);
    return 0;
}
