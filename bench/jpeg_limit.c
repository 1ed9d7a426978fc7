/*
 * jpeg_limit: the decoders' own rate on a set of image files, the limit an
 * image loader is held to (bench/media_images.py).
 *
 *   jpeg_limit THREADS PASSES LISTFILE
 *
 * LISTFILE names one file a line.  Every file is read into memory first;
 * then THREADS threads decode the files, each taking the next undecoded one,
 * whole and at full size: JPEGs with libjpeg(-turbo)'s defaults (the slow
 * integer IDCT, fancy upsampling) to RGB (CMYK and YCCK to CMYK, as
 * stored), PNGs with libspng to RGB8.  One pass over the files warms the
 * caches and is not counted; then PASSES timed passes.  It prints one line:
 *
 *   limit <images/s> <JPEG images/s> <megapixels/s> <jpegs> <pngs> <skipped> <images/CPU-s>
 *
 * the median pass's rate over all the files decoded, then over the JPEGs
 * alone (their share of that pass's time being unknown, JPEGs are timed in a
 * pass of their own), the median pass's decoded megapixels per second, how
 * many files were JPEG, PNG, or neither (skipped), and the files decoded per
 * second of CPU time (the process's, over the passes over all the files):
 * the rate's share of the machine that does not depend on what else runs.  Exit status 2 on a
 * file that cannot be read or decoded (named on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>
#include <spng.h>

#include "bench_time.h"

typedef struct {
    char *path;
    unsigned char *data;
    size_t len;
    int kind; /* 1 JPEG, 2 PNG */
} image;

typedef struct {
    image *img;
    size_t n;
    atomic_size_t next;
    atomic_ullong pixels;
    atomic_int failed;
} work;

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} jerr;

static void jpeg_fail(j_common_ptr ci) {
    longjmp(((jerr *)ci->err)->jump, 1);
}

/* Decodes one JPEG whole into *buf (grown as needed); returns its pixels, or
 * 0 where it does not decode. */
static uint64_t decode_jpeg(const image *im, unsigned char **buf, size_t *cap) {
    struct jpeg_decompress_struct ci;
    jerr e;
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = jpeg_fail;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&ci);
        return 0;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
    jpeg_read_header(&ci, TRUE);
    if (ci.jpeg_color_space != JCS_CMYK && ci.jpeg_color_space != JCS_YCCK)
        ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    size_t stride = (size_t)ci.output_width * (size_t)ci.output_components;
    size_t need = stride * ci.output_height;
    if (need > *cap) {
        unsigned char *p = realloc(*buf, need);
        if (!p) longjmp(e.jump, 1);
        *buf = p, *cap = need;
    }
    JSAMPROW rows[16];
    while (ci.output_scanline < ci.output_height) {
        JDIMENSION k = 0;
        for (; k < 16 && ci.output_scanline + k < ci.output_height; k++)
            rows[k] = *buf + (size_t)(ci.output_scanline + k) * stride;
        if (jpeg_read_scanlines(&ci, rows, k) == 0) longjmp(e.jump, 1);
    }
    jpeg_finish_decompress(&ci);
    uint64_t px = (uint64_t)ci.output_width * ci.output_height;
    jpeg_destroy_decompress(&ci);
    return px;
}

static uint64_t decode_png(const image *im, unsigned char **buf, size_t *cap) {
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ihdr;
    size_t need = 0;
    uint64_t px = 0;
    if (!ctx) return 0;
    if (spng_set_png_buffer(ctx, im->data, im->len) || spng_get_ihdr(ctx, &ihdr) ||
        spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need))
        goto out;
    if (need > *cap) {
        unsigned char *p = realloc(*buf, need);
        if (!p) goto out;
        *buf = p, *cap = need;
    }
    if (!spng_decode_image(ctx, *buf, need, SPNG_FMT_RGB8, 0))
        px = (uint64_t)ihdr.width * ihdr.height;
out:
    spng_ctx_free(ctx);
    return px;
}

static void *worker(void *arg) {
    work *w = arg;
    unsigned char *buf = NULL;
    size_t cap = 0;
    uint64_t px = 0;
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n) break;
        const image *im = &w->img[i];
        uint64_t p = im->kind == 1 ? decode_jpeg(im, &buf, &cap) : decode_png(im, &buf, &cap);
        if (!p) {
            fprintf(stderr, "jpeg_limit: %s does not decode\n", im->path);
            atomic_store(&w->failed, 1);
            break;
        }
        px += p;
    }
    free(buf);
    atomic_fetch_add(&w->pixels, px);
    return NULL;
}

/* One pass of `threads` threads over img[0..n): seconds, pixels in *px. */
static double pass(image *img, size_t n, int threads, uint64_t *px) {
    work w = {.img = img, .n = n};
    atomic_init(&w.next, 0);
    atomic_init(&w.pixels, 0);
    atomic_init(&w.failed, 0);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    if (!t) return -1;
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, &w);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double dt = now() - t0;
    free(t);
    *px = atomic_load(&w.pixels);
    return atomic_load(&w.failed) ? -1 : dt;
}

static int load(const char *path, image *im) {
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    im->data = malloc(len > 0 ? (size_t)len : 1);
    im->len = len > 0 ? (size_t)len : 0;
    int ok = im->data && fread(im->data, 1, im->len, f) == im->len;
    fclose(f);
    if (!ok) return -EIO;
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (im->len >= 3 && im->data[0] == 0xFF && im->data[1] == 0xD8 && im->data[2] == 0xFF)
        im->kind = 1;
    else if (im->len >= 8 && !memcmp(im->data, png_sig, 8))
        im->kind = 2;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: jpeg_limit THREADS PASSES LISTFILE\n");
        return 2;
    }
    int threads = atoi(argv[1]), passes = atoi(argv[2]);
    FILE *lf = fopen(argv[3], "r");
    if (threads < 1 || passes < 1 || !lf) {
        fprintf(stderr, "jpeg_limit: bad arguments (threads %d, passes %d, list %s)\n", threads,
                passes, argv[3]);
        return 2;
    }
    size_t n = 0, cap = 1024, skipped = 0, jpegs = 0;
    image *img = calloc(cap, sizeof *img);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while (img && (got = getline(&line, &lcap, lf)) > 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (n == cap) {
            image *p = realloc(img, 2 * cap * sizeof *img);
            if (!p) break;
            memset(p + cap, 0, cap * sizeof *img);
            img = p, cap *= 2;
        }
        image *im = &img[n];
        im->path = strdup(line);
        int rc = load(line, im);
        if (rc) {
            fprintf(stderr, "jpeg_limit: %s: %s\n", line, strerror(-rc));
            return 2;
        }
        if (!im->kind) {
            free(im->data), free(im->path);
            memset(im, 0, sizeof *im);
            skipped++;
            continue;
        }
        n++;
    }
    free(line);
    fclose(lf);
    if (!img || !n) {
        fprintf(stderr, "jpeg_limit: no JPEG or PNG files in %s\n", argv[3]);
        return 2;
    }
    /* JPEGs first, so that a pass over img[0..jpegs) times them alone. */
    for (size_t i = 0; i < n; i++)
        if (img[i].kind == 1) {
            image t = img[jpegs];
            img[jpegs++] = img[i];
            img[i] = t;
        }
    uint64_t px;
    if (pass(img, n, threads, &px) < 0) return 2; /* warm-up */
    double *all = calloc((size_t)passes, sizeof *all), *jp = calloc((size_t)passes, sizeof *jp);
    double *mp = calloc((size_t)passes, sizeof *mp);
    double cpu = 0;
    for (int p = 0; p < passes; p++) {
        double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        double dt = pass(img, n, threads, &px);
        if (dt < 0) return 2;
        cpu += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        all[p] = (double)n / dt;
        mp[p] = (double)px / dt / 1e6;
        if (jpegs) {
            dt = pass(img, jpegs, threads, &px);
            if (dt < 0) return 2;
            jp[p] = (double)jpegs / dt;
        }
    }
    qsort(all, (size_t)passes, sizeof *all, cmp_d);
    qsort(jp, (size_t)passes, sizeof *jp, cmp_d);
    qsort(mp, (size_t)passes, sizeof *mp, cmp_d);
    printf("limit %.1f %.1f %.2f %zu %zu %zu %.1f\n", all[passes / 2], jp[passes / 2],
           mp[passes / 2], jpegs, n - jpegs, skipped, (double)n * passes / cpu);
    return 0;
}
