/*
 * image.c: the image decoders.  JPEG through libjpeg-turbo's libjpeg API,
 * which alone can decode at a reduced DCT scale, skip the rows above a
 * crop and decode only the iMCU columns it covers; PNG through libspng;
 * WebP through libwebp.  Each reads the record from memory and nothing
 * else, and hands media.c the RGB pixels around the crop box.
 */
#include "media.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#ifdef STK_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#endif
#ifdef STK_HAVE_SPNG
#include <spng.h>
#endif
#ifdef STK_HAVE_WEBP
#include <webp/decode.h>
#endif

/* Images larger than this many pixels are refused: a record whose header
 * claims 65535 x 65535 would otherwise ask for 12 GiB. */
#define MAX_PIXELS (1ull << 28)

static int unsupported(stk__fmt f, char *why) {
    snprintf(why, STK__WHY, "this build of stoker has no %s decoder", stk__fmt_name(f));
    return STK_EUNSUPPORTED;
}

static __attribute__((unused)) int too_large(uint32_t w, uint32_t h, char *why) {
    if ((uint64_t)w * h <= MAX_PIXELS && w && h) return 0;
    snprintf(why, STK__WHY, "an image of %ux%u pixels (stoker decodes up to %llu)", w, h,
             (unsigned long long)MAX_PIXELS);
    return STK_EMEDIA;
}

static __attribute__((unused)) int grow_pix(stk__media_ctx *c, size_t need, char *why) {
    if (c->pix_cap >= need) return 0;
    uint8_t *p = stk__realloc(c->pix, need);
    if (!p) {
        snprintf(why, STK__WHY, "out of memory for %zu bytes of pixels", need);
        return -ENOMEM;
    }
    c->pix = p;
    c->pix_cap = need;
    return 0;
}

/* The filter reaches up to its support (at least a pixel) past the box
 * edge: two pixels more than the widest support any scale can need. */
static __attribute__((unused)) uint32_t box_margin(const uint32_t box[4], const stk_decode *d) {
    return 2 + (uint32_t)ceil(STK__MAX((double)box[2] / d->width, (double)box[3] / d->height));
}

/* ---- JPEG ---- */

#ifdef STK_HAVE_JPEG
typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char *why;
} jerr;

static void jpeg_fail(j_common_ptr ci) {
    jerr *e = (jerr *)ci->err;
    char msg[JMSG_LENGTH_MAX];
    (*ci->err->format_message)(ci, msg);
    snprintf(e->why, STK__WHY, "JPEG: %s", msg);
    longjmp(e->jump, 1);
}

/* Warnings: data that ends early or is corrupt is an error (libjpeg would
 * go on with grey pixels); extraneous bytes between markers are not. */
static void jpeg_note(j_common_ptr ci, int level) {
    if (level < 0 && ci->err->msg_code != JWRN_EXTRANEOUS_DATA) jpeg_fail(ci);
}

static void jpeg_setup(struct jpeg_decompress_struct *ci, jerr *e, char *why) {
    ci->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = jpeg_fail;
    e->pub.emit_message = jpeg_note;
    e->why = why;
}

/* Pillow's conversion of (inverted) CMYK to RGB, for equal pixels. */
static uint8_t cmyk_channel(uint8_t stored, uint8_t k, bool adobe) {
    unsigned c = adobe ? 255u - stored : stored, nk = adobe ? k : 255u - k;
    unsigned t = c * nk + 128;
    unsigned m = ((t >> 8) + t) >> 8;
    return (uint8_t)(nk - m);
}

static int jpeg_probe(const uint8_t *src, size_t len, stk_media_info *out, char *why) {
    struct jpeg_decompress_struct ci;
    jerr e;
    jpeg_setup(&ci, &e, why);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&ci);
        return STK_EMEDIA;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, src, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    out->width = ci.image_width;
    out->height = ci.image_height;
    jpeg_destroy_decompress(&ci);
    return too_large(out->width, out->height, why);
}

/* A worker's JPEG decompressor, made once and reset after each image
 * (jpeg_abort_decompress keeps its memory pools). */
typedef struct jstate {
    struct jpeg_decompress_struct ci;
    jerr e;
    bool made;
} jstate;

static int jpeg_decode(stk__media_ctx *c, const uint8_t *src, size_t len, const stk_decode *d,
                       uint64_t key, uint32_t box[4], int *flipped, stk__pixels *out,
                       char *why) {
    uint32_t ow = d->width, oh = d->height;
    if (!c->image && !(c->image = stk__calloc(1, sizeof(jstate)))) {
        snprintf(why, STK__WHY, "out of memory");
        return -ENOMEM;
    }
    jstate *const js = c->image;
    struct jpeg_decompress_struct *ci = &js->ci;
    /* (volatile: read after a longjmp.) */
    volatile int rc = STK_EMEDIA;
    if (!js->made) {
        jpeg_setup(ci, &js->e, why);
        if (setjmp(js->e.jump)) return STK_EMEDIA; /* (cannot fail: no memory) */
        jpeg_create_decompress(ci);
        js->made = true;
    }
    js->e.why = why;
    if (setjmp(js->e.jump)) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    jpeg_mem_src(ci, src, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    uint32_t W = ci->image_width, H = ci->image_height;
    if (too_large(W, H, why)) longjmp(js->e.jump, 1);
    stk__media_box(d, W, H, key, box, flipped);
    uint32_t margin = box_margin(box, d);
    /* The smallest scale num/8 at which the box still covers the output,
     * among 1/8, 2/8, 4/8 and 8/8: libjpeg-turbo has SIMD IDCTs for those
     * only.  The others (3/8, 5/8, 6/8, 7/8; and 12x12 or 14x14 IDCTs for
     * subsampled chroma) are plain C, and decoding at 6/8 or 7/8 took
     * longer than at 8/8: with these four scales only, 17% more 224x224
     * random crops a second (one thread, 40 photos of 300-500 x 375-600
     * pixels, quality 75-95, medians of 8 alternating runs). */
    unsigned num = 8;
    for (unsigned n = 1; n < 8; n *= 2)
        if ((double)box[2] * n / 8 >= ow && (double)box[3] * n / 8 >= oh) {
            num = n;
            break;
        }
    ci->scale_num = num;
    ci->scale_denom = 8;
    bool cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    bool adobe = ci->saw_Adobe_marker;
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(ci);
    double s = num / 8.0;
    uint32_t SW = ci->output_width, SH = ci->output_height;
    int64_t x0 = (int64_t)floor(box[0] * s) - margin, x1 = (int64_t)ceil((box[0] + box[2]) * s) + margin;
    int64_t y0 = (int64_t)floor(box[1] * s) - margin, y1 = (int64_t)ceil((box[1] + box[3]) * s) + margin;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > SW) x1 = SW;
    if (y1 > SH) y1 = SH;
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if (xoff > 0 || cw < SW) jpeg_crop_scanline(ci, &xoff, &cw); /* to iMCU columns */
    size_t comps = (size_t)ci->output_components;
    size_t stride = (size_t)cw * comps;
    uint32_t rows = (uint32_t)(y1 - y0);
    if (grow_pix(c, stride * rows, why)) {
        rc = -ENOMEM;
        longjmp(js->e.jump, 1);
    }
    if (y0 > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(ci, (JDIMENSION)y0);
        if (skipped != (JDIMENSION)y0) {
            snprintf(why, STK__WHY, "JPEG: skipped %u rows of %lld", skipped, (long long)y0);
            longjmp(js->e.jump, 1);
        }
    }
    for (uint32_t r = 0; r < rows;) {
        JSAMPROW row[4];
        int want = (int)STK__MIN(4u, rows - r);
        for (int k = 0; k < want; k++) row[k] = c->pix + (size_t)(r + (uint32_t)k) * stride;
        JDIMENSION got = jpeg_read_scanlines(ci, row, (JDIMENSION)want);
        if (got == 0) {
            snprintf(why, STK__WHY, "JPEG: the data ends at row %u of %u",
                     (unsigned)(y0 + r), SH);
            longjmp(js->e.jump, 1);
        }
        r += got;
    }
    if (cmyk) { /* four components to three, in place (forward) */
        for (uint32_t r = 0; r < rows; r++) {
            uint8_t *p = c->pix + (size_t)r * stride, *q = c->pix + (size_t)r * cw * 3;
            for (JDIMENSION x = 0; x < cw; x++) {
                uint8_t k = p[4 * x + 3];
                uint8_t R = cmyk_channel(p[4 * x], k, adobe), G = cmyk_channel(p[4 * x + 1], k, adobe),
                        B = cmyk_channel(p[4 * x + 2], k, adobe);
                q[3 * x] = R, q[3 * x + 1] = G, q[3 * x + 2] = B;
            }
        }
        stride = (size_t)cw * 3;
    }
    jpeg_abort_decompress(ci);
    *out = (stk__pixels){c->pix, stride, cw, rows, xoff, (uint32_t)y0, s};
    return 0;
}
#endif

/* ---- PNG ---- */

#ifdef STK_HAVE_SPNG
static spng_ctx *png_open(const uint8_t *src, size_t len, struct spng_ihdr *ihdr, char *why) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) {
        snprintf(why, STK__WHY, "out of memory");
        return NULL;
    }
    /* Bounds on what a record's chunks may make the decoder allocate. */
    spng_set_chunk_limits(ctx, 1u << 24, 1u << 26);
    spng_set_image_limits(ctx, 65535, 65535);
    int e = spng_set_png_buffer(ctx, src, len);
    if (!e) e = spng_get_ihdr(ctx, ihdr);
    if (e) {
        snprintf(why, STK__WHY, "PNG: %s", spng_strerror(e));
        spng_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static int png_probe(const uint8_t *src, size_t len, stk_media_info *out, char *why) {
    struct spng_ihdr ihdr;
    spng_ctx *ctx = png_open(src, len, &ihdr, why);
    if (!ctx) return STK_EMEDIA;
    spng_ctx_free(ctx);
    out->width = ihdr.width;
    out->height = ihdr.height;
    return too_large(out->width, out->height, why);
}

static int png_fail(spng_ctx *ctx, int e, char *why) {
    snprintf(why, STK__WHY, "PNG: %s", spng_strerror(e));
    spng_ctx_free(ctx);
    return STK_EMEDIA;
}

/* Only the rows the box needs (and the resize's margin) are kept, decoded
 * row by row and stopping below them; an interlaced image, whose passes
 * revisit every row, is decoded whole. */
static int png_decode(stk__media_ctx *c, const uint8_t *src, size_t len, stk__pixels *out,
                      const stk_decode *d, uint64_t key, uint32_t box[4], int *flipped,
                      char *why) {
    struct spng_ihdr ihdr;
    spng_ctx *ctx = png_open(src, len, &ihdr, why);
    if (!ctx) return STK_EMEDIA;
    int rc = too_large(ihdr.width, ihdr.height, why);
    if (rc) {
        spng_ctx_free(ctx);
        return rc;
    }
    stk__media_box(d, ihdr.width, ihdr.height, key, box, flipped);
    size_t stride = (size_t)ihdr.width * 3, size = 0;
    int e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size);
    if (e) return png_fail(ctx, e, why);
    uint32_t y0 = 0, y1 = ihdr.height;
    if (!ihdr.interlace_method) {
        uint32_t m = box_margin(box, d);
        y0 = box[1] > m ? box[1] - m : 0;
        y1 = (uint32_t)STK__MIN((uint64_t)box[1] + box[3] + m, (uint64_t)ihdr.height);
    }
    /* (One row more: the rows above y0 are decoded into it and dropped.) */
    if ((rc = grow_pix(c, stride * (y1 - y0 + 1), why))) {
        spng_ctx_free(ctx);
        return rc;
    }
    if (ihdr.interlace_method) {
        e = spng_decode_image(ctx, c->pix, size, SPNG_FMT_RGB8, 0);
        if (e) return png_fail(ctx, e, why);
    } else {
        e = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);
        uint8_t *scratch = c->pix + stride * (y1 - y0);
        for (uint32_t y = 0; !e && y < y1; y++)
            e = spng_decode_row(ctx, y < y0 ? scratch : c->pix + stride * (y - y0), stride);
        /* (SPNG_EOI: the last row was decoded.) */
        if (e && e != SPNG_EOI) return png_fail(ctx, e, why);
    }
    spng_ctx_free(ctx);
    *out = (stk__pixels){c->pix, stride, ihdr.width, y1 - y0, 0, y0, 1.0};
    return 0;
}
#endif

/* ---- WebP ---- */

#ifdef STK_HAVE_WEBP
static int webp_probe(const uint8_t *src, size_t len, stk_media_info *out, char *why) {
    int w = 0, h = 0;
    if (!WebPGetInfo(src, len, &w, &h)) {
        snprintf(why, STK__WHY, "WebP: not a WebP image libwebp can read (bad header)");
        return STK_EMEDIA;
    }
    out->width = (uint32_t)w;
    out->height = (uint32_t)h;
    return too_large(out->width, out->height, why);
}

static int webp_decode(stk__media_ctx *c, const uint8_t *src, size_t len, stk__pixels *out,
                       const stk_decode *d, uint64_t key, uint32_t box[4], int *flipped,
                       char *why) {
    stk_media_info info;
    int rc = webp_probe(src, len, &info, why);
    if (rc) return rc;
    stk__media_box(d, info.width, info.height, key, box, flipped);
    size_t stride = (size_t)info.width * 3;
    if ((rc = grow_pix(c, stride * info.height, why))) return rc;
    if (!WebPDecodeRGBInto(src, len, c->pix, stride * info.height, (int)stride)) {
        snprintf(why, STK__WHY, "WebP: the image data does not decode (damaged or truncated)");
        return STK_EMEDIA;
    }
    *out = (stk__pixels){c->pix, stride, info.width, info.height, 0, 0, 1.0};
    return 0;
}
#endif

/* ---- dispatch ---- */

int stk__image_probe(stk__fmt f, const uint8_t *src, size_t len, stk_media_info *out, char *why) {
    memset(out, 0, sizeof *out);
    out->media = STK_MEDIA_IMAGE;
    switch (f) {
#ifdef STK_HAVE_JPEG
    case STK__FMT_JPEG: return jpeg_probe(src, len, out, why);
#endif
#ifdef STK_HAVE_SPNG
    case STK__FMT_PNG: return png_probe(src, len, out, why);
#endif
#ifdef STK_HAVE_WEBP
    case STK__FMT_WEBP: return webp_probe(src, len, out, why);
#endif
    default: (void)src, (void)len; return unsupported(f, why);
    }
}

int stk__image_decode(stk__media_ctx *c, stk__fmt f, const uint8_t *src, size_t len,
                      const stk_decode *d, uint64_t key, uint32_t box[4], int *flipped,
                      stk__pixels *out, char *why) {
    (void)c, (void)d, (void)key, (void)box, (void)flipped, (void)out;
    switch (f) {
#ifdef STK_HAVE_JPEG
    case STK__FMT_JPEG: return jpeg_decode(c, src, len, d, key, box, flipped, out, why);
#endif
#ifdef STK_HAVE_SPNG
    case STK__FMT_PNG: return png_decode(c, src, len, out, d, key, box, flipped, why);
#endif
#ifdef STK_HAVE_WEBP
    case STK__FMT_WEBP: return webp_decode(c, src, len, out, d, key, box, flipped, why);
#endif
    default: (void)src, (void)len; return unsupported(f, why);
    }
}

void stk__image_ctx_free(void *image) {
#ifdef STK_HAVE_JPEG
    jstate *js = image;
    if (js && js->made) jpeg_destroy_decompress(&js->ci);
#endif
    stk__free(image);
}

const char *stk__image_formats(void) {
    return ""
#ifdef STK_HAVE_JPEG
           "jpeg,"
#endif
#ifdef STK_HAVE_SPNG
           "png,"
#endif
#ifdef STK_HAVE_WEBP
           "webp,"
#endif
        ;
}
