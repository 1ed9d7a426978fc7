/*
 * convert.c: element conversions from the encodings of users' files (PCM
 * audio above all) to the dtypes a field delivers.  The worker threads run
 * them as the last step of assembling a batch.
 *
 * Every conversion widens (the output element is at least as large as the
 * input one), so a worker can read a record's stored bytes into the end of
 * its place in the batch and convert forward over them: output element i
 * ends at (i + 1) * out bytes, input element i + 1 starts at
 * n * (out - in) + (i + 1) * in, which is never before it.
 */
#include "../format/format.h"

#include <string.h>

static const struct {
    const char *name;
    size_t in;
} convs[] = {
    [STK__CONV_NONE] = {"none", 0},
    [STK__CONV_I16_F32] = {"pcm16-f32", 2},
    [STK__CONV_I24_F32] = {"pcm24-f32", 3},
    [STK__CONV_I24_I32] = {"pcm24-i32", 3},
    [STK__CONV_U8_F32] = {"pcm8-f32", 1},
    [STK__CONV_I32_F32] = {"pcm32-f32", 4},
};
#define NCONV (sizeof convs / sizeof convs[0])

size_t stk__conv_in_size(int conv) {
    return conv > 0 && (size_t)conv < NCONV ? convs[conv].in : 0;
}

const char *stk__conv_name(int conv) {
    return conv >= 0 && (size_t)conv < NCONV ? convs[conv].name : "?";
}

int stk__conv_parse(const char *name) {
    for (size_t i = 0; i < NCONV; i++)
        if (strcmp(convs[i].name, name) == 0) return (int)i;
    return -1;
}

static inline int32_t ld24(const uint8_t *p) {
    /* Little-endian, sign-extended through the top byte. */
    uint32_t u = (uint32_t)p[0] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v; /* the sample times 256 */
}

void stk__conv_run(int conv, uint8_t *dst, const uint8_t *src, uint64_t n) {
    /* Each loop loads element i before it stores element i; see above. */
    switch (conv) {
    case STK__CONV_I16_F32:
        for (uint64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, src + 2 * i, 2);
            float f = (float)v * (1.0f / 32768.0f);
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    case STK__CONV_I24_F32:
        for (uint64_t i = 0; i < n; i++) {
            float f = (float)(ld24(src + 3 * i) / 256) * (1.0f / 8388608.0f);
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    case STK__CONV_I24_I32:
        for (uint64_t i = 0; i < n; i++) {
            int32_t v = ld24(src + 3 * i);
            memcpy(dst + 4 * i, &v, 4);
        }
        break;
    case STK__CONV_U8_F32:
        for (uint64_t i = 0; i < n; i++) {
            float f = ((float)src[i] - 128.0f) * (1.0f / 128.0f);
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    case STK__CONV_I32_F32:
        for (uint64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, src + 4 * i, 4);
            float f = (float)((double)v * (1.0 / 2147483648.0));
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    default:
        if (dst != src) memmove(dst, src, (size_t)n);
        break;
    }
}

/* ---- deflated chunks (compressed HDF5) ---- */

#include <zlib.h>

bool stk__inflate(uint8_t *dst, uint64_t raw, const uint8_t *src, uint64_t len) {
    if (raw > UINT32_MAX || len > UINT32_MAX) return false;
    uLongf out = (uLongf)raw;
    int rc = uncompress(dst, &out, src, (uLong)len);
    return rc == Z_OK && out == raw;
}
