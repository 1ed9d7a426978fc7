/*
 * test_gpu.c: the GPU stage.  Without a GPU (no CUDA build, driver or
 * device) every entry point says so with STK_ENOGPU and the reason, and the
 * rest of the test is skipped (exit 77).  With one: device batches equal
 * the host loader's byte for byte, copied or device-resident, windows and
 * records; epochs and resume give the same stream as the host loader; many
 * epochs leave device memory where it was.
 */
#include "test_loader_common.h"

#include "cuda/plugin.h"
#include "gpu/gpu.h"

static const stk_cuda_api *cu;

/* Field i of device batch b against host batch c, byte for byte. */
static void same_field(stk_gpu_batch *b, stk_batch *c, size_t i) {
    stk_batch_field df, hf;
    CHECK(stk_gpu_batch_field(b, i, &df) == 0);
    CHECK(stk_batch_field_get(c, i, &hf) == 0);
    CHECK(df.dtype == hf.dtype && df.ndim == hf.ndim && df.bytes == hf.bytes);
    for (int k = 0; k < df.ndim; k++) CHECK(df.shape[k] == hf.shape[k]);
    uint8_t *buf = malloc(df.bytes + 1);
    CHECK(cu->copy_to_host(buf, df.data, (size_t)df.bytes) == 0);
    CHECK(memcmp(buf, hf.data, (size_t)df.bytes) == 0);
    free(buf);
    if (hf.offsets) {
        size_t n = (stk_batch_size(c) + 1) * sizeof(int64_t);
        int64_t *o = malloc(n);
        CHECK(cu->copy_to_host(o, df.offsets, n) == 0);
        CHECK(memcmp(o, hf.offsets, n) == 0);
        free(o);
    }
}

/* Runs `epochs` epochs of a stage and a host loader side by side. */
static void compare(stk_dataset *ds, const stk_loader_options *o, uint64_t budget, int epochs,
                    int want_resident) {
    stk_error err = {0};
    stk_gpu_options go;
    stk_gpu_options_init(&go);
    go.resident_budget = budget;
    stk_gpu *g = NULL;
    CHECK_OK(stk_gpu_open(ds, o, &go, &g, &err));
    CHECK(stk_gpu_resident(g) == want_resident);
    stk_loader *host = NULL;
    CHECK_OK(stk_loader_open(ds, o, &host, &err));
    for (int e = 0; e < epochs; e++) {
        if (e) {
            CHECK_OK(stk_gpu_set_epoch(g, (uint64_t)e, &err));
            CHECK_OK(stk_loader_set_epoch(host, (uint64_t)e, &err));
        }
        for (;;) {
            stk_gpu_batch *b;
            stk_batch *c;
            int r1 = stk_gpu_next(g, &b, &err), r2 = stk_loader_next(host, &c, &err);
            CHECK(r1 == r2);
            if (r1 == STK_END) break;
            CHECK_OK(r1);
            CHECK(stk_gpu_batch_size(b) == stk_batch_size(c));
            CHECK(stk_gpu_batch_index(b) == stk_batch_index(c));
            CHECK(!memcmp(stk_gpu_batch_samples(b), stk_batch_samples(c),
                          stk_batch_size(c) * sizeof(uint64_t)));
            CHECK_OK(stk_gpu_batch_wait(b, 1, &err)); /* the legacy default stream */
            for (size_t i = 0; i < stk_loader_num_fields(host); i++) same_field(b, c, i);
            stk_gpu_release(g, b, 1);
            stk_loader_release(host, c);
        }
    }
    /* Resume: the state after 3 batches, restored into a new stage. */
    CHECK_OK(stk_gpu_set_epoch(g, 7, &err));
    for (int k = 0; k < 3; k++) {
        stk_gpu_batch *b;
        CHECK_OK(stk_gpu_next(g, &b, &err));
        stk_gpu_release(g, b, UINTPTR_MAX);
    }
    stk_loader_state st;
    stk_gpu_save(g, &st);
    stk_gpu_batch *want;
    CHECK_OK(stk_gpu_next(g, &want, &err));
    stk_gpu *g2 = NULL;
    CHECK_OK(stk_gpu_open(ds, o, &go, &g2, &err));
    CHECK_OK(stk_gpu_restore(g2, &st, &err));
    stk_gpu_batch *got;
    CHECK_OK(stk_gpu_next(g2, &got, &err));
    CHECK(stk_gpu_batch_size(got) == stk_gpu_batch_size(want));
    CHECK(!memcmp(stk_gpu_batch_samples(got), stk_gpu_batch_samples(want),
                  stk_gpu_batch_size(want) * sizeof(uint64_t)));
    stk_gpu_release(g2, got, UINTPTR_MAX);
    stk_gpu_release(g, want, UINTPTR_MAX);
    stk_gpu_close(g2);
    stk_gpu_close(g);
    stk_loader_close(host);
}

int main(void) {
    test_watchdog(280);
    stk_error err = {0};
    int n = 0;
    int rc = stk_gpu_count(&n, &err);
    if (rc) {
        CHECK(rc == STK_ENOGPU && err.code == STK_ENOGPU);
        CHECK(strncmp(err.message, "no GPU available: ", 18) == 0 && strlen(err.message) > 24);
        /* Opening a stage says the same, and leaks nothing. */
        tds d;
        tds_init(&d, TDS_RECORDS, 20);
        tds_write(&d, "gpu-none");
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        stk_gpu *g = (stk_gpu *)1;
        stk_error e2 = {0};
        CHECK(stk_gpu_open(ds, NULL, NULL, &g, &e2) == STK_ENOGPU && g == NULL);
        CHECK(strcmp(e2.message, err.message) == 0);
        stk_dataset_close(ds);
        tds_free(&d);
        printf("skipped: %s\n", err.message);
        return 77;
    }
    cu = stk__cuda(&err);
    CHECK(cu != NULL && n > 0);

    tds w;
    tds_init(&w, TDS_WINDOWS, 200);
    tds_write(&w, "gpu-w");
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(w.dir, &ds, &err));
    const char *names[] = {"ts", "aux", "static"};
    stk_order orders[] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int oi = 0; oi < 3; oi++)
        for (int win = 0; win < 2; win++) {
            stk_loader_options o;
            stk_loader_options_init(&o);
            o.batch_size = 9;
            o.order = orders[oi];
            o.window = win ? 6 : 0;
            o.fields = names;
            o.nfields = 3;
            o.block_samples = 10;
            compare(ds, &o, 0, 2, 0);          /* copied */
            compare(ds, &o, 1ull << 30, 2, 1); /* device-resident */
            o.fields = NULL;                   /* a compressed field: copied anyway */
            o.nfields = 0;
            compare(ds, &o, 1ull << 30, 1, 0);
        }
    /* Many epochs: device memory is where it was. */
    size_t free0 = 0, free1 = 0, total = 0;
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 16;
    o.order = STK_ORDER_RANDOM;
    CHECK(cu->mem_info(&free0, &total) == 0);
    for (int k = 0; k < 3; k++) compare(ds, &o, 0, 10, 0);
    CHECK(cu->mem_info(&free1, &total) == 0);
    CHECK(free1 + (8u << 20) >= free0);
    stk_dataset_close(ds);
    tds_free(&w);
    return 0;
}
