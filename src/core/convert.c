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
#include "convert.h"

#include "internal.h"

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
    [STK__CONV_F64_F32] = {"f64-f32", 8},
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
    case STK__CONV_F64_F32:
        /* Narrows: dst never overlaps src (the bytes are staged). */
        for (uint64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, src + 8 * i, 8);
            float f = (float)v;
            memcpy(dst + 4 * i, &f, 4);
        }
        break;
    default:
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

/* Fletcher-32 over big-endian 16-bit words, both sums starting at 0 (the
 * variant HDF5's filter uses); a trailing odd byte counts as a word's high
 * byte.  Sums are folded every 360 words, before they can overflow. */
static uint32_t fletcher32(const uint8_t *d, size_t n) {
    uint32_t s1 = 0, s2 = 0;
    size_t words = n / 2;
    while (words) {
        size_t t = words > 360 ? 360 : words;
        words -= t;
        for (; t; t--, d += 2) {
            s1 += (uint32_t)d[0] << 8 | d[1];
            s2 += s1;
        }
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    if (n % 2) {
        s1 += (uint32_t)d[0] << 8;
        s2 += s1;
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    s1 = (s1 & 0xffff) + (s1 >> 16);
    s2 = (s2 & 0xffff) + (s2 >> 16);
    return s2 << 16 | s1;
}

const uint8_t *stk__chunk_decode(unsigned applied, size_t elem, const uint8_t *src,
                                 uint64_t len, uint64_t raw, uint8_t *a, uint8_t *b,
                                 const char **why) {
    const uint8_t *p = src;
    if (applied & STK__CHUNK_FLETCHER) {
        if (len < 4) {
            *why = "it is too short to hold its Fletcher-32 checksum";
            return NULL;
        }
        len -= 4;
        uint32_t want = (uint32_t)p[len] | (uint32_t)p[len + 1] << 8 |
                        (uint32_t)p[len + 2] << 16 | (uint32_t)p[len + 3] << 24;
        uint32_t got = fletcher32(p, (size_t)len);
        /* Files of HDF5 before 1.6.3 stored it with the bytes of each half
         * swapped; HDF5 accepts both, and so do we. */
        uint32_t old = (got & 0xff00ff00u) >> 8 | (got & 0x00ff00ffu) << 8;
        if (want != got && want != old) {
            *why = "its Fletcher-32 checksum does not match: the file is damaged";
            return NULL;
        }
    }
    if (applied & STK__CHUNK_DEFLATE) {
        if (!stk__inflate(a, raw, p, len)) {
            *why = "it does not inflate to its size";
            return NULL;
        }
        p = a;
    } else if (len != raw) {
        *why = "its size differs from its rows'";
        return NULL;
    }
    if ((applied & STK__CHUNK_SHUFFLE) && elem > 1) {
        /* Byte k of every element, then byte k+1...; a tail shorter than an
         * element was left as it was. */
        uint8_t *out = p == a ? b : a;
        size_t n = (size_t)(raw / elem);
        for (size_t k = 0; k < elem; k++) {
            const uint8_t *in = p + k * n;
            for (size_t i = 0; i < n; i++) out[i * elem + k] = in[i];
        }
        memcpy(out + n * elem, p + n * elem, (size_t)(raw - n * elem));
        p = out;
    }
    return p;
}

static const struct {
    int bits;
    const char *name;
} chunk_names[] = {
    {STK__CHUNK_DEFLATE, "deflate"},
    {STK__CHUNK_SHUFFLE, "shuffle"},
    {STK__CHUNK_FLETCHER, "fletcher32"},
    {STK__CHUNK_SHUFFLE | STK__CHUNK_DEFLATE, "shuffle+deflate"},
    {STK__CHUNK_DEFLATE | STK__CHUNK_FLETCHER, "deflate+fletcher32"},
    {STK__CHUNK_SHUFFLE | STK__CHUNK_FLETCHER, "shuffle+fletcher32"},
    {STK__CHUNK_SHUFFLE | STK__CHUNK_DEFLATE | STK__CHUNK_FLETCHER, "shuffle+deflate+fletcher32"},
};

const char *stk__chunks_name(int chunks) {
    for (size_t i = 0; i < sizeof chunk_names / sizeof *chunk_names; i++)
        if (chunk_names[i].bits == chunks) return chunk_names[i].name;
    return "none";
}

int stk__chunks_parse(const char *name) {
    for (size_t i = 0; i < sizeof chunk_names / sizeof *chunk_names; i++)
        if (!strcmp(chunk_names[i].name, name)) return chunk_names[i].bits;
    return -1;
}
