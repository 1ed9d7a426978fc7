/*
 * test_loader_two_groups: block order with two group buffers, as a small
 * memory budget (or a cgroup) leaves it.  The next group is then read into
 * the second buffer while the first is cut; every epoch must still
 * deliver each record exactly once and equal to what was written, with
 * checks on and off, through the pool and io_uring, with and without
 * O_DIRECT, with one worker and with four, and with batches that straddle
 * groups (a batch size that does not divide a group).
 */
#include "util.h"

#define NREC 6000
#define REC 1024 /* bytes: uint32 id + 1020 filler */

static void record(uint64_t r, uint8_t *out) {
    uint32_t id = (uint32_t)r;
    memcpy(out, &id, 4);
    test_fill(out + 4, REC - 4, r + 1);
}

static void write_ds(const char *dir) {
    stk_error err = {0};
    stk_field f = {.name = "x", .dtype = STK_U8, .ndim = 1, .shape = {REC}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.sync = 0;
    o.shard_bytes = 1 << 20;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &o, &w, &err));
    uint8_t buf[REC];
    for (uint64_t r = 0; r < NREC; r++) {
        record(r, buf);
        stk_value v = {buf, REC};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

static void epochs(const char *dir, stk_backend be, int direct, int verify, int threads,
                   uint32_t batch) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.order = STK_ORDER_BLOCK;
    o.backend = be;
    o.direct = direct;
    o.verify = verify;
    o.threads = threads;
    o.batch_size = batch;
    o.block_bytes = 64 << 10; /* 64 records a block */
    o.block_group = 4;        /* 256 records a group: 24 groups */
    /* Room for two group buffers, not three: a group takes about 330 KiB,
     * 1.3 MiB with checks (whole checksum blocks around each block). */
    o.memory_budget = verify ? 4 << 20 : 3 << 19;
    o.seed = 5;
    stk_loader *ld = NULL;
    int rc = stk_loader_open(ds, &o, &ld, &err);
    if (rc == -ENOSYS || rc == -EINVAL) { /* no io_uring, or no O_DIRECT here */
        stk_dataset_close(ds);
        return;
    }
    CHECK_OK(rc);
    for (int ep = 0; ep < 3; ep++) {
        uint8_t seen[NREC] = {0}, want[REC];
        uint64_t n = 0;
        stk_batch *b;
        while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
            const uint64_t *ids = stk_batch_samples(b);
            stk_batch_field bf;
            CHECK(stk_batch_field_get(b, 0, &bf) == 0);
            for (uint32_t j = 0; j < stk_batch_size(b); j++, n++) {
                CHECK(ids[j] < NREC && !seen[ids[j]]);
                seen[ids[j]] = 1;
                record(ids[j], want);
                CHECK(memcmp((uint8_t *)bf.data + (size_t)j * REC, want, REC) == 0);
            }
            stk_loader_release(ld, b);
        }
        if (rc != STK_END) {
            fprintf(stderr, "epoch %d: %s\n", ep, err.message);
            exit(1);
        }
        CHECK(n == NREC);
        CHECK_OK(stk_loader_set_epoch(ld, (uint64_t)ep + 1, &err));
    }
    stk_loader_close(ld);
    stk_dataset_close(ds);
}

int main(void) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ds", test_dir("loader_two_groups"));
    write_ds(dir);
    const stk_backend bes[2] = {STK_BACKEND_POOL, STK_BACKEND_URING};
    const uint32_t batches[2] = {100, 256};
    for (int b = 0; b < 2; b++)
        for (int direct = 0; direct <= 1; direct++)
            for (int verify = 0; verify <= 1; verify++)
                for (int t = 1; t <= 4; t *= 4)
                    for (int k = 0; k < 2; k++) epochs(dir, bes[b], direct, verify, t, batches[k]);
    printf("test_loader_two_groups: ok\n");
    return 0;
}
