/*
 * media.c: what every media format shares: the checks of a decode spec,
 * its sample's shape, the random draws, the crop box, the resize and the
 * public calls.  The decoders themselves are image.c's and audio.c's.
 */
#include "media.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

void stk__media_ctx_free(stk__media_ctx *c) {
    if (!c) return;
    stk__free(c->pix);
    stk__free(c->row);
    stk__image_ctx_free(c->image);
    stk__audio_ctx_free(c->audio);
    memset(c, 0, sizeof *c);
}

stk__fmt stk__media_sniff(const uint8_t *p, size_t n) {
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return STK__FMT_JPEG;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return STK__FMT_PNG;
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return STK__FMT_WEBP;
    if (n >= 4 && !memcmp(p, "fLaC", 4)) return STK__FMT_FLAC;
    if (n >= 36 && !memcmp(p, "OggS", 4)) {
        /* The first page's first packet says the codec. */
        size_t segs = p[26], body = 27 + segs;
        if (body + 8 <= n && !memcmp(p + body, "OpusHead", 8)) return STK__FMT_OPUS;
        if (body + 7 <= n && !memcmp(p + body, "\x01vorbis", 7)) return STK__FMT_VORBIS;
        return STK__FMT_UNKNOWN;
    }
    if (n >= 3 && !memcmp(p, "ID3", 3)) return STK__FMT_MP3;
    /* An MPEG audio frame header: 11 sync bits, layer III. */
    if (n >= 4 && p[0] == 0xFF && (p[1] & 0xE0) == 0xE0 && (p[1] & 0x06) == 0x02 &&
        (p[2] & 0xF0) != 0xF0 && (p[1] & 0x18) != 0x08)
        return STK__FMT_MP3;
    return STK__FMT_UNKNOWN;
}

const char *stk__fmt_name(stk__fmt f) {
    static const char *const names[] = {"unknown", "jpeg", "png", "webp",
                                        "flac",    "mp3",  "vorbis", "opus"};
    return (unsigned)f < sizeof names / sizeof *names ? names[f] : "unknown";
}

static stk_media fmt_media(stk__fmt f) {
    return f >= STK__FMT_FLAC ? STK_MEDIA_AUDIO : STK_MEDIA_IMAGE;
}

/* ---- random draws ---- */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t stk_decode_key(uint64_t seed, uint64_t epoch, uint64_t record) {
    return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ record);
}

double stk__media_uniform(uint64_t key, unsigned k) {
    return (double)(splitmix64(key + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull) >> 11) *
           0x1.0p-53;
}

/* ---- specs ---- */

void stk_decode_init(stk_decode *d, stk_media media) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->media = media;
    d->crop = STK_CROP_RANDOM_RESIZED;
    d->scale[0] = 0.08;
    d->scale[1] = 1.0;
    d->ratio[0] = 3.0 / 4.0;
    d->ratio[1] = 4.0 / 3.0;
    d->center_fraction = 0.875;
    d->channels = 1;
}

static int check_spec(const stk_decode *d, stk_error *err) {
    const char *f = d->field ? d->field : "(no field)";
    if (d->media == STK_MEDIA_IMAGE) {
        if (d->height < 1 || d->width < 1 || d->height > 65535 || d->width > 65535)
            return stk__err(err, -EINVAL, "decode: '%s': an image size of %ux%u (1 to 65535 each)",
                            f, d->width, d->height);
        if (d->crop != STK_CROP_NONE && d->crop != STK_CROP_CENTER &&
            d->crop != STK_CROP_RANDOM_RESIZED)
            return stk__err(err, -EINVAL, "decode: '%s': unknown crop %d", f, (int)d->crop);
        if (d->crop == STK_CROP_RANDOM_RESIZED &&
            !(d->scale[0] > 0 && d->scale[0] <= d->scale[1] && d->scale[1] <= 1))
            return stk__err(err, -EINVAL,
                            "decode: '%s': scale (%g, %g) must satisfy 0 < low <= high <= 1", f,
                            d->scale[0], d->scale[1]);
        if (d->crop == STK_CROP_RANDOM_RESIZED &&
            !(d->ratio[0] > 0 && d->ratio[0] <= d->ratio[1] && isfinite(d->ratio[1])))
            return stk__err(err, -EINVAL,
                            "decode: '%s': ratio (%g, %g) must satisfy 0 < low <= high", f,
                            d->ratio[0], d->ratio[1]);
        if (d->crop == STK_CROP_CENTER && !(d->center_fraction > 0 && d->center_fraction <= 1))
            return stk__err(err, -EINVAL, "decode: '%s': center_fraction %g must be in (0, 1]",
                            f, d->center_fraction);
        return 0;
    }
    if (d->media == STK_MEDIA_AUDIO) {
        if (d->samples < 1 || d->samples > (1ull << 32))
            return stk__err(err, -EINVAL,
                            "decode: '%s': samples %llu: a window of 1 to 2^32 frames", f,
                            (unsigned long long)d->samples);
        if (d->channels < 1 || d->channels > 64)
            return stk__err(err, -EINVAL, "decode: '%s': channels %u (1 to 64)", f, d->channels);
        if (d->sample_rate > 768000)
            return stk__err(err, -EINVAL, "decode: '%s': sample_rate %u is above 768000", f,
                            d->sample_rate);
        return 0;
    }
    return stk__err(err, -EINVAL, "decode: '%s': media %d is neither image (1) nor audio (2)", f,
                    (int)d->media);
}

int stk_decode_shape(const stk_decode *d, stk_dtype *dtype, int *ndim,
                     int64_t shape[STK_MAX_DIMS], stk_error *err) {
    if (!d || !dtype || !ndim || !shape) return stk__err(err, -EINVAL, "a NULL argument");
    int rc = check_spec(d, err);
    if (rc) return rc;
    memset(shape, 0, sizeof(int64_t) * STK_MAX_DIMS);
    if (d->media == STK_MEDIA_IMAGE) {
        *dtype = STK_U8;
        *ndim = 3;
        int64_t h = d->height, w = d->width;
        if (d->chw) shape[0] = 3, shape[1] = h, shape[2] = w;
        else shape[0] = h, shape[1] = w, shape[2] = 3;
    } else {
        *dtype = STK_F32;
        *ndim = 2;
        shape[0] = (int64_t)d->samples;
        shape[1] = d->channels;
    }
    return 0;
}

uint64_t stk__media_sample_bytes(const stk_decode *d) {
    if (d->media == STK_MEDIA_IMAGE) return (uint64_t)d->height * d->width * 3;
    return d->samples * d->channels * sizeof(float);
}

int stk__media_check(const stk_decode *d, const stk_field *f, stk_error *err) {
    int rc = check_spec(d, err);
    if (rc) return rc;
    const char *want = d->media == STK_MEDIA_IMAGE ? "image" : "audio";
    if (f->dtype != STK_BYTES || f->ndim != 1 || f->shape[0] != STK_RAGGED || !f->type ||
        strcmp(f->type, want))
        return stk__err(err, -EINVAL,
                        "decode: field '%s' is %s%s%s, not %s: a media field is ragged bytes "
                        "of type \"%s\" (stoker.Image() / stoker.Audio() when writing)",
                        f->name, stk_dtype_name(f->dtype), f->type ? " of type " : "",
                        f->type ? f->type : "", want, want);
    return 0;
}

/* ---- crop boxes ---- */

/* Python's round(): halves to even, as the reference computations use. */
static double round_even(double x) {
    double r = floor(x), diff = x - r;
    if (diff > 0.5 || (diff == 0.5 && fmod(r, 2.0) != 0)) r += 1;
    return r;
}

static void box_random_resized(const stk_decode *d, uint32_t W, uint32_t H, uint64_t key,
                               uint32_t box[4]) {
    double area = (double)W * H;
    double lr0 = log(d->ratio[0]), lr1 = log(d->ratio[1]);
    for (unsigned t = 0; t < 10; t++) {
        double target = area * (d->scale[0] + stk__media_uniform(key, 4 * t) *
                                                  (d->scale[1] - d->scale[0]));
        double ar = exp(lr0 + stk__media_uniform(key, 4 * t + 1) * (lr1 - lr0));
        double w = round_even(sqrt(target * ar)), h = round_even(sqrt(target / ar));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            uint32_t bw = (uint32_t)w, bh = (uint32_t)h;
            uint32_t y = (uint32_t)(stk__media_uniform(key, 4 * t + 2) * (double)(H - bh + 1));
            uint32_t x = (uint32_t)(stk__media_uniform(key, 4 * t + 3) * (double)(W - bw + 1));
            box[0] = x, box[1] = y, box[2] = bw, box[3] = bh;
            return;
        }
    }
    /* The whole image, its ratio clamped to the range, centred. */
    double in_ratio = (double)W / H;
    uint32_t bw = W, bh = H;
    if (in_ratio < d->ratio[0]) bh = (uint32_t)round_even(W / d->ratio[0]);
    else if (in_ratio > d->ratio[1]) bw = (uint32_t)round_even(H * d->ratio[1]);
    bw = STK__MAX(1u, STK__MIN(bw, W));
    bh = STK__MAX(1u, STK__MIN(bh, H));
    box[0] = (W - bw) / 2, box[1] = (H - bh) / 2, box[2] = bw, box[3] = bh;
}

static void box_center(const stk_decode *d, uint32_t W, uint32_t H, uint32_t box[4]) {
    double ar = (double)d->width / d->height;
    double bw = STK__MIN((double)W, H * ar), bh = STK__MIN((double)H, W / ar);
    uint32_t w = (uint32_t)round_even(bw * d->center_fraction);
    uint32_t h = (uint32_t)round_even(bh * d->center_fraction);
    w = STK__MAX(1u, STK__MIN(w, W));
    h = STK__MAX(1u, STK__MIN(h, H));
    box[0] = (W - w) / 2, box[1] = (H - h) / 2, box[2] = w, box[3] = h;
}

/* The draw that decides the flip: after the crop's 40. */
#define FLIP_DRAW 40

void stk__media_box(const stk_decode *d, uint32_t W, uint32_t H, uint64_t key, uint32_t box[4],
                    int *flipped) {
    if (d->crop == STK_CROP_RANDOM_RESIZED) box_random_resized(d, W, H, key, box);
    else if (d->crop == STK_CROP_CENTER) box_center(d, W, H, box);
    else box[0] = 0, box[1] = 0, box[2] = W, box[3] = H;
    *flipped = d->flip && stk__media_uniform(key, FLIP_DRAW) < 0.5;
}

int stk_decode_box(const stk_decode *d, uint32_t width, uint32_t height, uint64_t key,
                   uint32_t box[4], int *flipped, stk_error *err) {
    if (!d || !box || !flipped) return stk__err(err, -EINVAL, "a NULL argument");
    int rc = check_spec(d, err);
    if (rc) return rc;
    if (d->media != STK_MEDIA_IMAGE)
        return stk__err(err, -EINVAL, "decode: crop boxes are for images");
    if (width < 1 || height < 1)
        return stk__err(err, -EINVAL, "an image of %ux%u", width, height);
    stk__media_box(d, width, height, key, box, flipped);
    return 0;
}

/* ---- the resize ---- */

/* Weights of a triangle filter mapping source pixels onto `out` pixels:
 * output pixel i's centre lies at source coordinate x0 + (i + 0.5) * span /
 * out - 0.5 (x0, span: the box's edge and width, reals, in the pixels
 * held).  Every output pixel has `maxc` weights at w + i * maxc, for source
 * pixels first[i] .. first[i] + maxc - 1, those past its own taps zero;
 * first[i] + maxc <= in, so that every tap reads inside the row. */
typedef struct taps {
    int32_t *first;
    float *w;
    int maxc;
} taps;

static double tri(double k, double c, double support) {
    double f = 1.0 - fabs((k - c) / support);
    return f > 0 ? f : 0;
}

static int make_taps(taps *t, double x0, double span, uint32_t in, uint32_t out) {
    double scale = span / out;
    double support = scale > 1 ? scale : 1.0; /* the filter's half-width */
    /* Each output pixel's taps with a weight above 0, and the most any
     * has: every pixel gets that many (a narrower filter than the bound
     * 2 ceil(support) + 1 where the support is not a whole number). */
    t->first = stk__malloc(sizeof(int32_t) * out * 2);
    if (!t->first) return -ENOMEM;
    int32_t *lo_of = t->first, *hi_of = t->first + out;
    int maxc = 1;
    for (uint32_t i = 0; i < out; i++) {
        double c = x0 + (i + 0.5) * scale - 0.5; /* the centre, in source pixels */
        int lo = (int)ceil(c - support), hi = (int)floor(c + support);
        if (lo < 0) lo = 0;
        if (hi > (int)in - 1) hi = (int)in - 1;
        while (lo < hi && tri(lo, c, support) == 0) lo++;
        while (hi > lo && tri(hi, c, support) == 0) hi--;
        if (hi < lo) hi = lo = c < 0 ? 0 : (int)in - 1;
        lo_of[i] = lo, hi_of[i] = hi;
        maxc = STK__MAX(maxc, hi - lo + 1);
    }
    if ((uint32_t)maxc > in) maxc = (int)in;
    t->maxc = maxc;
    t->w = stk__calloc((size_t)out * (size_t)maxc, sizeof(float));
    if (!t->w) {
        stk__free(t->first);
        t->first = NULL;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < out; i++) {
        double c = x0 + (i + 0.5) * scale - 0.5;
        int lo = lo_of[i], hi = hi_of[i];
        double sum = 0;
        for (int k = lo; k <= hi; k++) sum += tri(k, c, support);
        /* The window moves left where it would run past the row's end. */
        int first = lo + maxc > (int)in ? (int)in - maxc : lo;
        float *w = t->w + (size_t)i * maxc;
        if (sum <= 0) { /* a centre exactly between pixels at an edge */
            w[lo - first] = 1;
        } else {
            for (int k = lo; k <= hi; k++) w[k - first] = (float)(tri(k, c, support) / sum);
        }
        t->first[i] = first;
    }
    return 0;
}

static void free_taps(taps *t) {
    stk__free(t->first);
    stk__free(t->w);
}

/* Four floats: GCC's vector extension, SSE on x86-64 and NEON on aarch64
 * (loads and stores of it go through memcpy: no alignment assumed). */
typedef float v4 __attribute__((vector_size(16)));

/* Rounded (halves up) and clamped to 0..255; the clamps on integers
 * compile to conditional moves, where those on floats were branches. */
static STK__ALWAYS_INLINE uint8_t clamp8(float v) {
    int i = (int)(v + 0.5f);
    i = i < 0 ? 0 : i;
    return (uint8_t)(i > 255 ? 255 : i);
}

/* The vertical pass of one output row: the weighted sum of source rows
 * rows[0..n) over columns [0, len), into `acc`.  Written so that the
 * compiler vectorises it (media.c is built with -O3). */
static void vertical(float *restrict acc, const uint8_t *const *rows, const float *w, int n,
                     size_t len) {
    const uint8_t *restrict r0 = rows[0];
    float w0 = w[0];
    for (size_t x = 0; x < len; x++) acc[x] = w0 * (float)r0[x];
    for (int k = 1; k < n; k++) {
        const uint8_t *restrict r = rows[k];
        float wk = w[k];
        if (wk == 0) continue;
        for (size_t x = 0; x < len; x++) acc[x] += wk * (float)r[x];
    }
}

/* Resizes box `fb` (x, y, w, h in the scaled image's pixels, reals) of
 * `px` to d's size, flipped or not, into `dst` (HWC or CHW). */
static int resize(stk__media_ctx *c, const stk__pixels *px, const double fb[4],
                  const stk_decode *d, int flipped, uint8_t *dst) {
    uint32_t ow = d->width, oh = d->height;
    double bx = fb[0] - px->x0, by = fb[1] - px->y0;
    size_t plane = (size_t)ow * oh;
    /* A box of exactly the output's size on whole pixels: a copy. */
    bool copy = fb[2] == ow && fb[3] == oh && bx == floor(bx) && by == floor(by) && bx >= 0 &&
                by >= 0 && bx + ow <= px->w && by + oh <= px->h;
    if (copy) {
        for (uint32_t y = 0; y < oh; y++) {
            const uint8_t *s = px->rgb + (size_t)(by + y) * px->stride + (size_t)bx * 3;
            for (uint32_t x = 0; x < ow; x++) {
                uint32_t ox = flipped ? ow - 1 - x : x;
                if (d->chw) {
                    size_t at = (size_t)y * ow + ox;
                    dst[at] = s[3 * x], dst[plane + at] = s[3 * x + 1];
                    dst[2 * plane + at] = s[3 * x + 2];
                } else {
                    memcpy(dst + ((size_t)y * ow + ox) * 3, s + 3 * x, 3);
                }
            }
        }
        return 0;
    }
    taps tx = {0}, ty = {0};
    if (make_taps(&tx, bx, fb[2], px->w, ow) || make_taps(&ty, by, fb[3], px->h, oh)) {
        free_taps(&tx);
        free_taps(&ty);
        return -ENOMEM;
    }
    /* Only the columns the horizontal taps reach (and its row, floats). */
    int c0 = tx.first[0], c1 = tx.first[0] + tx.maxc;
    for (uint32_t x = 1; x < ow; x++) {
        c0 = STK__MIN(c0, tx.first[x]);
        c1 = STK__MAX(c1, tx.first[x] + tx.maxc);
    }
    size_t len = (size_t)(c1 - c0) * 3;
    /* c->row: the vertical pass's row (len floats, + 4: the last pixel's
     * vector reads one past), then the horizontal pass's pixels (4 floats
     * each), then their bytes (4 each). */
    size_t need = len + 4 + (size_t)ow * 4 + (size_t)ow;
    if (c->row_cap < need) {
        float *r = stk__realloc(c->row, need * sizeof(float));
        if (!r) {
            free_taps(&tx);
            free_taps(&ty);
            return -ENOMEM;
        }
        c->row = r;
        c->row_cap = need;
    }
    float *hrow = c->row + len + 4;
    uint8_t *bytes = (uint8_t *)(hrow + (size_t)ow * 4);
    memset(c->row + len, 0, 4 * sizeof(float)); /* (read, never used) */
    const uint8_t *few[32], **rows = few;
    if (ty.maxc > 32 && !(rows = stk__malloc(sizeof *rows * (size_t)ty.maxc))) {
        free_taps(&tx);
        free_taps(&ty);
        return -ENOMEM;
    }
    int K = tx.maxc;
    for (uint32_t y = 0; y < oh; y++) {
        int fy = ty.first[y];
        for (int k = 0; k < ty.maxc; k++)
            rows[k] = px->rgb + (size_t)(fy + k) * px->stride + (size_t)c0 * 3;
        vertical(c->row, rows, ty.w + (size_t)y * ty.maxc, ty.maxc, len);
        const float *row = c->row;
        /* A pixel's three channels as one vector of four lanes (the fourth,
         * the next pixel's red, is weighted and left unused): one
         * multiply-add a tap instead of three; two pixels at a time, whose
         * sums do not wait on each other. */
        uint32_t x = 0;
        for (; x + 1 < ow; x += 2) {
            const float *wa = tx.w + (size_t)x * K, *wb = wa + K;
            const float *ra = row + (size_t)(tx.first[x] - c0) * 3;
            const float *rb = row + (size_t)(tx.first[x + 1] - c0) * 3;
            v4 a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
            for (int k = 0; k < K; k++) {
                v4 pa, pb;
                memcpy(&pa, ra + 3 * k, sizeof pa);
                memcpy(&pb, rb + 3 * k, sizeof pb);
                a += wa[k] * pa;
                b += wb[k] * pb;
            }
            memcpy(hrow + 4 * (size_t)x, &a, sizeof a);
            memcpy(hrow + 4 * (size_t)x + 4, &b, sizeof b);
        }
        for (; x < ow; x++) {
            const float *wx = tx.w + (size_t)x * K;
            const float *r = row + (size_t)(tx.first[x] - c0) * 3;
            v4 acc = {0, 0, 0, 0};
            for (int k = 0; k < K; k++) {
                v4 px4;
                memcpy(&px4, r + 3 * k, sizeof px4);
                acc += wx[k] * px4;
            }
            memcpy(hrow + 4 * (size_t)x, &acc, sizeof acc);
        }
        /* To bytes a whole row at a time (the vectoriser's loop), then
         * out in the layout asked for. */
        for (size_t i = 0; i < (size_t)ow * 4; i++) bytes[i] = clamp8(hrow[i]);
        if (d->chw) {
            uint8_t *R = dst + (size_t)y * ow, *G = R + plane, *B = G + plane;
            for (uint32_t i = 0; i < ow; i++) {
                uint32_t ox = flipped ? ow - 1 - i : i;
                R[ox] = bytes[4 * i], G[ox] = bytes[4 * i + 1], B[ox] = bytes[4 * i + 2];
            }
        } else {
            uint8_t *o = dst + (size_t)y * ow * 3;
            for (uint32_t i = 0; i < ow; i++) {
                uint32_t ox = flipped ? ow - 1 - i : i;
                o[3 * ox] = bytes[4 * i], o[3 * ox + 1] = bytes[4 * i + 1];
                o[3 * ox + 2] = bytes[4 * i + 2];
            }
        }
    }
    if (rows != few) stk__free(rows);
    free_taps(&tx);
    free_taps(&ty);
    return 0;
}

/* ---- decoding ---- */

static int decode_image(stk__media_ctx *c, const stk_decode *d, stk__fmt f, const uint8_t *src,
                        size_t len, uint64_t key, uint8_t *dst, uint32_t box[4], int *flipped,
                        char *why) {
    uint32_t b[4];
    int fl;
    stk__pixels px;
    int rc = stk__image_decode(c, f, src, len, d, key, b, &fl, &px, why);
    if (rc) return rc;
    double fb[4] = {b[0] * px.scale, b[1] * px.scale, b[2] * px.scale, b[3] * px.scale};
    rc = resize(c, &px, fb, d, fl, dst);
    if (rc) {
        snprintf(why, STK__WHY, "out of memory resizing");
        return rc;
    }
    if (box) memcpy(box, b, sizeof b);
    if (flipped) *flipped = fl;
    return 0;
}

int stk__media_decode(stk__media_ctx *c, const stk_decode *d, const uint8_t *src, size_t len,
                      uint64_t key, void *dst, uint32_t box[4], int *flipped, char *why) {
    stk__fmt f = stk__media_sniff(src, len);
    if (f == STK__FMT_UNKNOWN || fmt_media(f) != d->media) {
        if (len == 0) snprintf(why, STK__WHY, "an empty record");
        else if (f == STK__FMT_UNKNOWN)
            snprintf(why, STK__WHY, "not %s: its first bytes are no format stoker decodes (%s)",
                     d->media == STK_MEDIA_IMAGE ? "an image" : "audio",
                     d->media == STK_MEDIA_IMAGE ? "JPEG, PNG, WebP" : "FLAC, MP3, Vorbis, Opus");
        else
            snprintf(why, STK__WHY, "%s data in an %s field", stk__fmt_name(f),
                     d->media == STK_MEDIA_IMAGE ? "image" : "audio");
        return STK_EMEDIA;
    }
    if (d->media == STK_MEDIA_IMAGE)
        return decode_image(c, d, f, src, len, key, dst, box, flipped, why);
    if (box) memset(box, 0, 4 * sizeof *box);
    if (flipped) *flipped = 0;
    return stk__audio_decode(c, d, f, src, len, key, dst, why);
}

/* ---- public calls ---- */

int stk_media_probe(const void *data, size_t len, stk_media_info *out, stk_error *err) {
    if (!data && len) return stk__err(err, -EINVAL, "a NULL buffer");
    if (!out) return stk__err(err, -EINVAL, "a NULL argument");
    memset(out, 0, sizeof *out);
    stk__fmt f = stk__media_sniff(data, len);
    char why[STK__WHY] = "";
    if (f == STK__FMT_UNKNOWN)
        return stk__err(err, STK_EMEDIA,
                        "not a format stoker decodes (JPEG, PNG, WebP, FLAC, MP3, Vorbis, Opus)");
    int rc = fmt_media(f) == STK_MEDIA_IMAGE ? stk__image_probe(f, data, len, out, why)
                                             : stk__audio_probe(f, data, len, out, why);
    if (rc) return stk__err(err, rc, "%s", why);
    out->media = fmt_media(f);
    snprintf(out->format, sizeof out->format, "%s", stk__fmt_name(f));
    return 0;
}

int stk_decode_one(const stk_decode *d, const void *data, size_t len, uint64_t key, void *out,
                   size_t cap, uint32_t box[4], int *flipped, stk_error *err) {
    if (!d || !out || (!data && len)) return stk__err(err, -EINVAL, "a NULL argument");
    int rc = check_spec(d, err);
    if (rc) return rc;
    uint64_t need = stk__media_sample_bytes(d);
    if (cap < need)
        return stk__err(err, -EINVAL, "decode: %zu bytes of room for a sample of %llu", cap,
                        (unsigned long long)need);
    stk__media_ctx c = {0};
    char why[STK__WHY] = "";
    rc = stk__media_decode(&c, d, data, len, key, out, box, flipped, why);
    stk__media_ctx_free(&c);
    if (rc) return stk__err(err, rc, "%s", why[0] ? why : stk_strerror(rc));
    return 0;
}

static char formats[64];

static void list_formats(void) {
    const char *a = stk__image_formats(), *b = stk__audio_formats();
    snprintf(formats, sizeof formats, "%s%s", a, b);
    size_t n = strlen(formats);
    if (n && formats[n - 1] == ',') formats[n - 1] = 0;
}

const char *stk_media_formats(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_formats);
    return formats;
}
