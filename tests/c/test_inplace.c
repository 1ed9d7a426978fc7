/* In-place sources: the PCM conversions (in place over their own input),
 * the WAV header parser's edge cases, an index of raw files read through a
 * descriptor cache much smaller than the file count, and staleness. */
#include "util.h"
#include "format/format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static stk_error err;

/* Every conversion, run over its input placed at the end of the output
 * buffer, equals the same conversion from a separate buffer. */
static void conversions(void) {
    const int convs[] = {STK__CONV_I16_F32, STK__CONV_I24_F32, STK__CONV_I24_I32,
                         STK__CONV_U8_F32, STK__CONV_I32_F32};
    for (size_t c = 0; c < sizeof convs / sizeof convs[0]; c++) {
        size_t in = stk__conv_in_size(convs[c]);
        CHECK(in >= 1 && in <= 4);
        for (uint64_t n = 0; n < 700; n += 1 + n / 3) {
            uint8_t *src = malloc(n * in + 1), *ref = malloc(n * 4 + 1), *buf = malloc(n * 4 + 1);
            test_fill(src, n * in, n * 31 + c);
            stk__conv_run(convs[c], ref, src, n);
            memcpy(buf + n * 4 - n * in, src, n * in);
            stk__conv_run(convs[c], buf, buf + n * 4 - n * in, n);
            CHECK(memcmp(buf, ref, n * 4) == 0);
            free(src);
            free(ref);
            free(buf);
        }
    }
    /* Values at the ends of each range. */
    float f;
    int32_t i;
    uint8_t s16[2] = {0x00, 0x80}; /* -32768 */
    stk__conv_run(STK__CONV_I16_F32, (uint8_t *)&f, s16, 1);
    CHECK(f == -1.0f);
    uint8_t s24[3] = {0xff, 0xff, 0x7f}; /* 8388607 */
    stk__conv_run(STK__CONV_I24_F32, (uint8_t *)&f, s24, 1);
    CHECK(f == 8388607.0f / 8388608.0f);
    stk__conv_run(STK__CONV_I24_I32, (uint8_t *)&i, s24, 1);
    CHECK(i == 8388607 * 256);
    uint8_t n24[3] = {0x00, 0x00, 0x80}; /* -8388608 */
    stk__conv_run(STK__CONV_I24_I32, (uint8_t *)&i, n24, 1);
    CHECK(i == INT32_MIN);
    uint8_t u8 = 0;
    stk__conv_run(STK__CONV_U8_F32, (uint8_t *)&f, &u8, 1);
    CHECK(f == -1.0f);
    CHECK(stk__conv_parse("pcm24-f32") == STK__CONV_I24_F32 && stk__conv_parse("x") < 0);
}

static size_t put32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
    return 4;
}

/* A WAV file image: fmt (plain or extensible), optional extra chunk of
 * odd size before the data, `frames` of PCM16 mono. */
static size_t wav(uint8_t *b, bool extensible, bool extra, uint32_t frames) {
    size_t p = 12;
    memcpy(b, "RIFF\0\0\0\0WAVE", 12);
    memcpy(b + p, "fmt ", 4);
    p += 4;
    p += put32(b + p, extensible ? 40 : 16);
    uint16_t fmt[8] = {extensible ? 0xFFFE : 1, 1, 0, 0, 0, 0, 2, 16};
    memcpy(b + p, fmt, 4);
    put32(b + p + 4, 8000);
    put32(b + p + 8, 16000);
    memcpy(b + p + 12, &fmt[6], 4);
    p += 16;
    if (extensible) {
        memset(b + p, 0, 24);
        b[p] = 22;
        b[p + 8] = 1; /* GUID: PCM */
        p += 24;
    }
    if (extra) {
        memcpy(b + p, "LIST", 4);
        put32(b + p + 4, 5);
        memcpy(b + p + 8, "abcde\0", 6);
        p += 14;
    }
    memcpy(b + p, "data", 4);
    put32(b + p + 4, frames * 2);
    p += 8;
    test_fill(b + p, frames * 2, 7);
    p += frames * 2;
    put32(b + 4, (uint32_t)p - 8);
    return p;
}

static void wav_headers(void) {
    uint8_t b[4096];
    stk_wav_header h;
    for (int x = 0; x < 4; x++) {
        size_t n = wav(b, x & 1, x & 2, 100);
        CHECK_OK(stk_wav_parse(b, n, n, "t.wav", &h, &err));
        CHECK(h.encoding == STK_WAV_PCM16 && h.channels == 1 && h.frames == 100 &&
              h.sample_rate == 8000 && h.data_offset == n - 200);
    }
    size_t n = wav(b, false, false, 100);
    CHECK_ERR(stk_wav_parse(b, n, n - 1, "t.wav", &h, &err), STK_ETRUNCATED, "t.wav");
    CHECK_ERR(stk_wav_parse(b, 20, n, "t.wav", &h, &err), STK_ETRUNCATED, "cut off");
    b[22] = 0; /* channels */
    CHECK_ERR(stk_wav_parse(b, n, n, "t.wav", &h, &err), STK_ECORRUPT, "0 channels");
    n = wav(b, false, false, 100);
    memcpy(b + 12, "data", 4); /* data before fmt */
    CHECK_ERR(stk_wav_parse(b, n, n, "t.wav", &h, &err), STK_ECORRUPT, "before");
}

static void raw_index_through_small_cache(void) {
    const char *dir = test_dir("inplace_raw");
    CHECK(mkdir(dir, 0755) == 0);
    char path[512], idx[512];
    enum { NF = 40 };
    uint8_t *want[NF];
    size_t len[NF];
    for (int i = 0; i < NF; i++) {
        len[i] = 1 + (size_t)(i * 37) % 300;
        want[i] = malloc(len[i]);
        test_fill(want[i], len[i], (uint64_t)i);
        snprintf(path, sizeof path, "%s/f%02d.bin", dir, i);
        test_write_file(path, want[i], len[i]);
    }
    snprintf(idx, sizeof idx, "%s/raw.idx", dir);
    stk_index_options io;
    stk_index_options_init(&io);
    io.source = STK_SOURCE_RAW;
    const char *paths[] = {dir};
    uint64_t recs = 0;
    CHECK_OK(stk_index_build(paths, 1, idx, &io, &recs, &err));
    CHECK(recs == NF);
    stk_dataset *ds;
    CHECK_OK(stk_dataset_open(idx, &ds, &err));
    CHECK(stk_dataset_num_shards(ds) == NF);
    for (int backend = STK_BACKEND_URING; backend <= STK_BACKEND_POOL; backend++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 7;
        o.order = STK_ORDER_RANDOM;
        o.threads = 3;
        o.max_open_files = 3;
        o.backend = (stk_backend)backend;
        stk_loader *ld;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        int seen[NF] = {0};
        for (int epoch = 0; epoch < 3; epoch++) {
            CHECK_OK(stk_loader_set_epoch(ld, (uint64_t)epoch, &err));
            stk_batch *b;
            int rc;
            while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
                stk_batch_field f;
                CHECK(stk_batch_field_get(b, 0, &f) == 0);
                const uint64_t *ids = stk_batch_samples(b);
                for (uint32_t j = 0; j < stk_batch_size(b); j++) {
                    uint64_t r = ids[j];
                    size_t a = (size_t)f.offsets[j], z = (size_t)f.offsets[j + 1];
                    CHECK(r < NF && z - a == len[r]);
                    CHECK(memcmp((const uint8_t *)f.data + a, want[r], len[r]) == 0);
                    seen[r]++;
                }
                stk_loader_release(ld, b);
            }
            CHECK(rc == STK_END);
        }
        for (int i = 0; i < NF; i++) CHECK(seen[i] == 3);
        stk_loader_close(ld);
    }
    stk_dataset_close(ds);
    /* A file changed since indexing is refused. */
    snprintf(path, sizeof path, "%s/f07.bin", dir);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
    CHECK_ERR(stk_dataset_open(idx, &ds, &err), STK_ESTALE, "f07.bin");
    for (int i = 0; i < NF; i++) free(want[i]);
}

int main(void) {
    conversions();
    wav_headers();
    raw_index_through_small_cache();
    return 0;
}
