/*
 * test_gpu.c: loaders with a device.  Always: the device options are
 * checked before any question of a GPU, and host batches answer the device
 * calls as host batches.  Without a GPU (no CUDA build, driver or device)
 * opening a loader with a device says so with STK_ENOGPU and the reason,
 * and the rest of the test is skipped (exit 77).  With one: device batches
 * equal the host loader's byte for byte, copied or device-resident, windows
 * and records; epochs and resume give the same stream as the host loader;
 * the calls a device loader refuses say so; stop keeps held batches; many
 * epochs leave device memory where it was.  A mixture on the device gives
 * the host mixture's batches, samples and sources, mixed or homogeneous,
 * over epochs and a resume; one whose batches are its sources' own is
 * refused.
 */
#include "test_loader_common.h"

#include "cuda/plugin.h"
#include "gpu/gpu.h"

static const stk_cuda_api *cu;

/* Field i of device batch b against host batch c, byte for byte. */
static void same_field(stk_batch *b, stk_batch *c, size_t i) {
    stk_batch_field df, hf;
    CHECK(stk_batch_field_get(b, i, &df) == 0);
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

/* Moves g to epoch `epoch`, takes 3 batches, saves the state into *st and
 * returns the batch after them (held). */
static stk_batch *state_after_three(stk_loader *g, uint64_t epoch, stk_loader_state *st) {
    stk_error err = {0};
    CHECK_OK(stk_loader_set_epoch(g, epoch, &err));
    for (int k = 0; k < 3; k++) {
        stk_batch *b;
        CHECK_OK(stk_loader_next(g, &b, &err));
        stk_loader_release(g, b);
    }
    stk_loader_save(g, st);
    stk_batch *next;
    CHECK_OK(stk_loader_next(g, &next, &err));
    return next;
}

/* Runs `epochs` epochs of a loader on device 0 and a host loader side by
 * side. */
static void compare(stk_dataset *ds, const stk_loader_options *o, uint64_t budget, int epochs,
                    int want_resident) {
    stk_error err = {0};
    stk_loader_options go = *o;
    go.device = 0;
    go.device_resident_budget = budget;
    stk_loader *g = NULL;
    CHECK_OK(stk_loader_open(ds, &go, &g, &err));
    CHECK(stk_loader_device(g) == 0);
    CHECK((stk_loader_resident_bytes(g) > 0) == want_resident);
    stk_loader *host = NULL;
    CHECK_OK(stk_loader_open(ds, o, &host, &err));
    CHECK(stk_loader_num_fields(g) == stk_loader_num_fields(host));
    for (int e = 0; e < epochs; e++) {
        if (e) {
            CHECK_OK(stk_loader_set_epoch(g, (uint64_t)e, &err));
            CHECK_OK(stk_loader_set_epoch(host, (uint64_t)e, &err));
        }
        for (;;) {
            stk_batch *b;
            stk_batch *c;
            int r1 = stk_loader_next(g, &b, &err), r2 = stk_loader_next(host, &c, &err);
            CHECK(r1 == r2);
            if (r1 == STK_END) break;
            CHECK_OK(r1);
            CHECK(stk_batch_device(b) == 0 && stk_batch_device(c) == -1);
            CHECK(stk_batch_size(b) == stk_batch_size(c));
            CHECK(stk_batch_index(b) == stk_batch_index(c));
            CHECK(!memcmp(stk_batch_samples(b), stk_batch_samples(c),
                          stk_batch_size(c) * sizeof(uint64_t)));
            CHECK_OK(stk_batch_wait(b, 1, &err)); /* the legacy default stream */
            for (size_t i = 0; i < stk_loader_num_fields(host); i++) same_field(b, c, i);
            stk_loader_release_after(g, b, 1);
            stk_loader_release(host, c);
        }
    }
    /* Resume: the state after 3 batches, restored into a new loader. */
    stk_loader_state st;
    stk_batch *want = state_after_three(g, 7, &st);
    stk_loader *g2 = NULL;
    CHECK_OK(stk_loader_open(ds, &go, &g2, &err));
    CHECK_OK(stk_loader_restore(g2, &st, &err));
    stk_batch *got;
    CHECK_OK(stk_loader_next(g2, &got, &err));
    CHECK(stk_batch_size(got) == stk_batch_size(want));
    CHECK(!memcmp(stk_batch_samples(got), stk_batch_samples(want),
                  stk_batch_size(want) * sizeof(uint64_t)));
    /* What a device loader refuses. */
    CHECK(stk_loader_unget(g2, got) == -EINVAL);
    CHECK(stk_loader_add_buffer(g2, &err) == -ENOTSUP);
    stk_loader_release(g2, got);
    /* Stop with a batch held: it stays readable until close. */
    stk_loader_stop(g);
    stk_batch_field f;
    CHECK_OK(stk_batch_field_get(want, 0, &f));
    uint8_t *tmp = malloc(f.bytes + 1);
    CHECK(cu->copy_to_host(tmp, f.data, (size_t)f.bytes) == 0);
    free(tmp);
    stk_loader_release(g, want);
    stk_loader_close(g2);
    stk_loader_close(g);
    stk_loader_close(host);
}

/* A mixture of two sources over ds (random and block order) on device 0
 * against the same mixture in host memory. */
static void compare_mixture(stk_dataset *ds, int homogeneous) {
    stk_error err = {0};
    stk_loader_options so[2];
    for (int i = 0; i < 2; i++) {
        stk_loader_options_init(&so[i]);
        so[i].order = i ? STK_ORDER_BLOCK : STK_ORDER_RANDOM;
        so[i].block_samples = 10;
        so[i].seed = (uint64_t)i + 1;
    }
    stk_mixture_source src[2] = {{ds, &so[0], 2.0, 0, NULL}, {ds, &so[1], 1.0, 0, NULL}};
    stk_mixture_options mo = {STK_MIX_CYCLE, homogeneous, 3};
    stk_loader_options c;
    stk_loader_options_init(&c);
    c.batch_size = 8;
    stk_loader *host = NULL, *g = NULL;
    CHECK_OK(stk_loader_open_mixture(src, 2, &c, &mo, &host, &err));
    c.device = 0;
    CHECK_OK(stk_loader_open_mixture(src, 2, &c, &mo, &g, &err));
    CHECK(stk_loader_device(g) == 0 && stk_loader_device(host) == -1);
    CHECK(stk_loader_num_fields(g) == stk_loader_num_fields(host));
    uint64_t batches = 0;
    for (int e = 0; e < 2; e++) {
        if (e) {
            CHECK_OK(stk_loader_set_epoch(g, 5, &err));
            CHECK_OK(stk_loader_set_epoch(host, 5, &err));
        }
        for (;;) {
            stk_batch *b, *h;
            int r1 = stk_loader_next(g, &b, &err), r2 = stk_loader_next(host, &h, &err);
            CHECK(r1 == r2);
            if (r1 == STK_END) break;
            CHECK_OK(r1);
            uint32_t n = stk_batch_size(h);
            CHECK(stk_batch_device(b) == 0 && stk_batch_size(b) == n);
            CHECK(!memcmp(stk_batch_samples(b), stk_batch_samples(h), n * sizeof(uint64_t)));
            CHECK(stk_batch_sources(b) && stk_batch_sources(h));
            CHECK(!memcmp(stk_batch_sources(b), stk_batch_sources(h), n * sizeof(uint32_t)));
            CHECK_OK(stk_batch_wait(b, 1, &err));
            for (size_t i = 0; i < stk_loader_num_fields(host); i++) same_field(b, h, i);
            stk_loader_release_after(g, b, 1);
            stk_loader_release(host, h);
            batches++;
        }
    }
    CHECK(batches > 4);
    /* Resume: the state after 3 batches of epoch 2, in a new device mixture. */
    stk_loader_state st;
    stk_batch *want = state_after_three(g, 2, &st), *got;
    stk_loader *g2 = NULL;
    CHECK_OK(stk_loader_open_mixture(src, 2, &c, &mo, &g2, &err));
    CHECK_OK(stk_loader_restore(g2, &st, &err));
    CHECK_OK(stk_loader_next(g2, &got, &err));
    uint32_t n = stk_batch_size(want);
    CHECK(stk_batch_size(got) == n);
    CHECK(!memcmp(stk_batch_samples(got), stk_batch_samples(want), n * sizeof(uint64_t)));
    CHECK(!memcmp(stk_batch_sources(got), stk_batch_sources(want), n * sizeof(uint32_t)));
    CHECK(stk_loader_unget(g2, got) == -EINVAL);
    stk_loader_release(g2, got);
    stk_loader_release(g, want);
    stk_loader_stop(g);
    stk_loader_close(g2);
    stk_loader_close(g);
    stk_loader_close(host);
}

/* A homogeneous mixture of sources whose fields differ hands out the
 * sources' own batches: refused on a device, with the reason. */
static void mixture_handout_refused(stk_dataset *ds) {
    stk_error err = {0};
    const char *one[] = {"ts"}, *two[] = {"ts", "aux"};
    stk_loader_options so[2];
    for (int i = 0; i < 2; i++) {
        stk_loader_options_init(&so[i]);
        so[i].fields = i ? one : two; /* source 1 lacks source 0's aux */
        so[i].nfields = i ? 1 : 2;
    }
    stk_mixture_source src[2] = {{ds, &so[0], 1.0, 0, NULL}, {ds, &so[1], 1.0, 0, NULL}};
    stk_mixture_options mo = {STK_MIX_CYCLE, 1, 3};
    stk_loader_options c;
    stk_loader_options_init(&c);
    c.batch_size = 8;
    c.device = 0;
    stk_loader *g = (stk_loader *)1;
    CHECK(stk_loader_open_mixture(src, 2, &c, &mo, &g, &err) == -EINVAL && g == NULL);
    CHECK(strstr(err.message, "stay in host memory") != NULL);
}

/* What holds without a GPU: option checks come first, and host batches
 * answer the device calls. */
static void host_answers(stk_dataset *ds) {
    stk_error err = {0};
    stk_loader_options o;
    stk_loader_options_init(&o);
    CHECK(o.device == -1 && o.device_buffers == 3 && o.device_resident_budget == 0);
    stk_loader *ld = (stk_loader *)1;
    o.device = 0;
    o.batch_size = 0;
    CHECK(stk_loader_open(ds, &o, &ld, &err) == -EINVAL && ld == NULL);
    CHECK(strstr(err.message, "batch_size") != NULL);
    o.batch_size = 4;
    o.device_buffers = 1;
    CHECK(stk_loader_open(ds, &o, &ld, &err) == -EINVAL);
    CHECK(strstr(err.message, "device_buffers") != NULL);
    stk_mixture_source src[1] = {{ds, NULL, 1.0, 0, NULL}};
    CHECK(stk_loader_open_mixture(src, 1, &o, NULL, &ld, &err) == -EINVAL && ld == NULL);
    CHECK(strstr(err.message, "device_buffers") != NULL);
    o.device_buffers = 3;
    o.device = -2;
    CHECK(stk_loader_open(ds, &o, &ld, &err) == -EINVAL);
    CHECK(strstr(err.message, "device") != NULL);
    o.device = -1;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    CHECK(stk_loader_device(ld) == -1 && stk_loader_resident_bytes(ld) == 0);
    stk_batch *b;
    CHECK_OK(stk_loader_next(ld, &b, &err));
    CHECK(stk_batch_device(b) == -1);
    CHECK(stk_batch_wait(b, 1, &err) == 0);
    CHECK(stk_batch_wait(NULL, 1, &err) == -EINVAL);
    stk_loader_release_after(ld, b, 1); /* a host batch: released */
    uint64_t n = 1;
    while (stk_loader_next(ld, &b, &err) == 0) {
        stk_loader_release(ld, b);
        n++;
    }
    CHECK(n == stk_loader_rank_batches(ld));
    stk_loader_close(ld);
}

int main(void) {
    test_watchdog(280);
    stk_error err = {0};
    {
        tds d;
        tds_init(&d, TDS_RECORDS, 20);
        tds_write(&d, "gpu-host");
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        host_answers(ds);
        stk_dataset_close(ds);
        tds_free(&d);
    }
    int n = 0;
    int rc = stk_gpu_count(&n, &err);
    if (rc) {
        CHECK(rc == STK_ENOGPU && err.code == STK_ENOGPU);
        CHECK(strncmp(err.message, "no GPU available: ", 18) == 0 && strlen(err.message) > 24);
        /* Opening a loader with a device says the same, and leaks nothing. */
        tds d;
        tds_init(&d, TDS_RECORDS, 20);
        tds_write(&d, "gpu-none");
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        stk_loader *g = (stk_loader *)1;
        stk_error e2 = {0};
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.device = 0;
        CHECK(stk_loader_open(ds, &o, &g, &e2) == STK_ENOGPU && g == NULL);
        CHECK(strcmp(e2.message, err.message) == 0);
        /* So does a mixture. */
        stk_mixture_source src[2] = {{ds, NULL, 1.0, 0, NULL}, {ds, NULL, 2.0, 0, NULL}};
        g = (stk_loader *)1;
        memset(&e2, 0, sizeof e2);
        CHECK(stk_loader_open_mixture(src, 2, &o, NULL, &g, &e2) == STK_ENOGPU && g == NULL);
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
    compare_mixture(ds, 0);
    compare_mixture(ds, 1);
    mixture_handout_refused(ds);
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
