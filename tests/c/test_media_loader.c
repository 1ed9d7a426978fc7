/* Media fields decoded by the loader's workers (and so under the sanitizer
 * and thread-sanitizer builds): every sample equals stk_decode_one of its
 * record with its (seed, epoch, record) key, in random and block order with
 * three threads; a record that does not decode fails its batch naming it,
 * or is replaced under on_error = skip and counted once an epoch. */
#include "media_samples.h"
#include "util.h"

#define N 48
#define DAMAGED 17

static const unsigned char *image_of(int i, size_t *len) {
    switch (i % 4) {
    case 0: *len = sizeof sample_jpeg; return sample_jpeg;
    case 1: *len = sizeof sample_jpeg_progressive; return sample_jpeg_progressive;
    case 2: *len = sizeof sample_png_rgba; return sample_png_rgba;
    default: *len = sizeof sample_webp; return sample_webp;
    }
}

static void write_dataset(const char *dir) {
    stk_error err = {0};
    stk_field f[2] = {{.name = "image", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED},
                       .type = "image"},
                      {.name = "label", .dtype = STK_I64, .ndim = 0}};
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 2, NULL, &w, &err));
    for (int i = 0; i < N; i++) {
        size_t len;
        const unsigned char *img = image_of(i, &len);
        if (i == DAMAGED) len /= 2; /* a JPEG cut in half */
        int64_t label = i;
        stk_value v[2] = {{img, len}, {&label, 1}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* One epoch under on_error = skip: every sample its record's decode. */
static void check_epoch(stk_dataset *ds, const stk_decode *d, stk_order order, uint64_t epoch) {
    stk_error err = {0};
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 5;
    o.order = order;
    o.seed = 11;
    o.epoch = epoch;
    o.threads = 3;
    o.block_samples = 8;
    o.on_error = STK_ON_ERROR_SKIP;
    o.decode = d;
    o.ndecode = 1;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    size_t bytes = (size_t)d->height * d->width * 3;
    unsigned char *want = malloc(bytes);
    CHECK(want);
    int seen[N] = {0}, total = 0;
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        stk_batch_field img, lab;
        CHECK_OK(stk_batch_field_get(b, 0, &img));
        CHECK_OK(stk_batch_field_get(b, 1, &lab));
        CHECK(img.dtype == STK_U8 && img.ndim == 4 && img.shape[1] == 3 &&
              img.shape[2] == d->height && img.shape[3] == d->width);
        const uint64_t *ids = stk_batch_samples(b);
        for (uint32_t j = 0; j < (uint32_t)img.shape[0]; j++) {
            int64_t rec = ((const int64_t *)lab.data)[j];
            CHECK(rec >= 0 && rec < N && rec != DAMAGED && (uint64_t)rec == ids[j]);
            size_t len;
            const unsigned char *src = image_of((int)rec, &len);
            CHECK_OK(stk_decode_one(d, src, len, stk_decode_key(11, epoch, (uint64_t)rec), want,
                                    bytes, NULL, NULL, &err));
            CHECK(memcmp((const unsigned char *)img.data + j * bytes, want, bytes) == 0);
            seen[rec]++;
            total++;
        }
        stk_loader_release(ld, b);
    }
    CHECK(rc == STK_END);
    CHECK(total == N);
    int missing = 0;
    for (int i = 0; i < N; i++) missing += seen[i] == 0;
    CHECK(missing == 1 && seen[DAMAGED] == 0); /* one sample stands in for it */
    stk_loader_stats st;
    stk_loader_stats_get(ld, &st);
    CHECK(st.skipped == 1);
    CHECK(st.decode.count >= N - 1);
    stk_error why = {0};
    CHECK(stk_loader_last_skip(ld, &why) == 1);
    CHECK(strstr(why.message, "record 17") && strstr(why.message, "field 'image'"));
    stk_loader_close(ld);
    free(want);
}

int main(void) {
    const char *fmts = stk_media_formats();
    if (!strstr(fmts, "jpeg") || !strstr(fmts, "png") || !strstr(fmts, "webp")) {
        printf("skipped: this build decodes '%s'\n", fmts);
        return 77;
    }
    stk_error err = {0};
    const char *dir = test_dir("media_loader");
    write_dataset(dir);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    stk_decode d;
    stk_decode_init(&d, STK_MEDIA_IMAGE);
    d.field = "image";
    d.height = 12, d.width = 16;
    d.flip = 1;
    d.chw = 1;
    check_epoch(ds, &d, STK_ORDER_RANDOM, 0);
    check_epoch(ds, &d, STK_ORDER_BLOCK, 1);
    check_epoch(ds, &d, STK_ORDER_SEQUENTIAL, 2);

    /* on_error = raise: the batch that holds it fails, naming it. */
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 4;
    o.order = STK_ORDER_SEQUENTIAL;
    o.decode = &d;
    o.ndecode = 1;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    CHECK(rc == STK_EMEDIA);
    CHECK(strstr(err.message, "record 17 field 'image'") && strstr(err.message, "JPEG"));
    stk_loader_close(ld);

    /* A decode of a field that is not media is refused at open. */
    stk_decode bad = d;
    bad.field = "label";
    o.decode = &bad;
    CHECK_ERR(stk_loader_open(ds, &o, &ld, &err), -EINVAL, "'label' is i64");
    stk_dataset_close(ds);
    return 0;
}
