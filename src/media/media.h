/*
 * media.h: decoding a media field's record (an encoded image or audio
 * clip) into one fixed-size sample of a batch.  media.c holds what is
 * common (checks, shapes, the random choices, the crop box, the resize and
 * the public calls); image.c the image decoders (libjpeg-turbo, libspng,
 * libwebp); audio.c the audio decoders (libFLAC, mpg123, libvorbisfile,
 * opusfile) and the resampler (libsoxr).  Each library is optional at
 * build time (STK_HAVE_JPEG ...): a format built without is STK_EUNSUPPORTED.
 */
#ifndef STK_MEDIA_H
#define STK_MEDIA_H

#include "../core/internal.h"

#include <errno.h>

/* A worker's decoding state: scratch buffers and decoder handles, kept
 * from sample to sample.  Zeroed to start; freed by stk__media_ctx_free. */
typedef struct stk__media_ctx {
    uint8_t *pix;      /* image: decoded pixels */
    size_t pix_cap;
    float *row;        /* image: the resize's intermediate rows */
    size_t row_cap;
    void *image;       /* image.c's state (a JPEG decompressor kept) */
    void *audio;       /* audio.c's state (its decoders, buffers) */
} stk__media_ctx;

void stk__media_ctx_free(stk__media_ctx *c);

/* Why a decode failed: up to STK__WHY bytes, filled by the decoders, to
 * which the loader adds the file, record and field. */
#define STK__WHY 200

/* The format of an encoded file, from its first bytes. */
typedef enum {
    STK__FMT_UNKNOWN = 0,
    STK__FMT_JPEG,
    STK__FMT_PNG,
    STK__FMT_WEBP,
    STK__FMT_FLAC,
    STK__FMT_MP3,
    STK__FMT_VORBIS,
    STK__FMT_OPUS
} stk__fmt;

stk__fmt stk__media_sniff(const uint8_t *p, size_t n);
const char *stk__fmt_name(stk__fmt f);

/* The random choices: the k-th uniform double in [0, 1) of a sample's key
 * (splitmix64 of key + (k + 1) * 0x9E3779B97F4A7C15, its top 53 bits). */
double stk__media_uniform(uint64_t key, unsigned k);

/* Checks a decode spec against the field it names; 0 or -EINVAL. */
int stk__media_check(const stk_decode *d, const stk_field *f, stk_error *err);
/* Bytes of one decoded sample. */
uint64_t stk__media_sample_bytes(const stk_decode *d);

/* Decodes `src` (len bytes, one record) into `dst` (stk__media_sample_bytes
 * of d).  Returns 0, or STK_EMEDIA / STK_EUNSUPPORTED / -ENOMEM with
 * `why` saying what (without naming the record). */
int stk__media_decode(stk__media_ctx *c, const stk_decode *d, const uint8_t *src, size_t len,
                      uint64_t key, void *dst, uint32_t box[4], int *flipped, char *why);

/* ---- images (image.c) ---- */

/* An image's size and components, from its header. */
int stk__image_probe(stk__fmt f, const uint8_t *src, size_t len, stk_media_info *out, char *why);

/* A region of a decoded image, as image.c hands it to the resize: RGB
 * pixels, `stride` bytes a row, of an image decoded at `scale` (its pixel
 * (x, y) covers the original's [x / scale, (x + 1) / scale)), whose
 * top-left pixel is the scaled image's (x0, y0). */
typedef struct stk__pixels {
    const uint8_t *rgb;
    size_t stride;
    uint32_t w, h;   /* pixels held */
    uint32_t x0, y0; /* where they start in the scaled image */
    double scale;
} stk__pixels;

/* The crop box (x, y, w, h) and flip that d gives the sample of `key` in
 * an image of W x H (media.c). */
void stk__media_box(const stk_decode *d, uint32_t W, uint32_t H, uint64_t key, uint32_t box[4],
                    int *flipped);

/* Decodes the part of an image that the sample of `key` needs: having
 * read the header, chooses the box (stk__media_box, into box and
 * *flipped), then decodes the box plus a margin for the resize filter, at
 * the smallest scale (JPEG: 1/8, 2/8, 4/8, 8/8) at which the box is at
 * least d's output size, or at scale 1.  The pixels live in c->pix. */
int stk__image_decode(stk__media_ctx *c, stk__fmt f, const uint8_t *src, size_t len,
                      const stk_decode *d, uint64_t key, uint32_t box[4], int *flipped,
                      stk__pixels *out, char *why);
void stk__image_ctx_free(void *image);

/* ---- audio (audio.c) ---- */

int stk__audio_probe(stk__fmt f, const uint8_t *src, size_t len, stk_media_info *out, char *why);

/* Decodes the sample of `key` (see stk_decode's audio options) into `dst`:
 * d->samples x d->channels float32, frames interleaved. */
int stk__audio_decode(stk__media_ctx *c, const stk_decode *d, stk__fmt f, const uint8_t *src,
                      size_t len, uint64_t key, float *dst, char *why);
void stk__audio_ctx_free(void *audio);

/* The formats built in, by kind, as "jpeg,png" (static storage). */
const char *stk__image_formats(void);
const char *stk__audio_formats(void);

#endif
