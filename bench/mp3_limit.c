/*
 * mp3_limit: mpg123's own decode rate on a set of MP3 files, the limit an
 * audio loader is held to (bench/media_audio.py); flac_limit's twin.
 *
 *   mp3_limit THREADS PASSES LISTFILE [WINDOW]
 *
 * LISTFILE names one file a line.  Every file is read into memory first;
 * then THREADS threads decode the files, each taking the next undecoded one
 * with a decoder of its own (kept from file to file) reading from memory
 * (mpg123_replace_reader_handle), float output, gapless.  Without WINDOW
 * (or 0) every file is decoded whole with mpg123_decode_frame, into the
 * decoder's own buffer: the full decode.  With WINDOW > 0 each file's frame
 * headers are scanned (mpg123_scan: its exact length and a frame index),
 * it is sought (mpg123_seek) to a start drawn from the file's number and
 * the pass, uniform among those where WINDOW frames fit, and WINDOW frames
 * are read from there into a buffer: the least a loader of random windows
 * can do.  One pass over the files warms the caches and is not counted;
 * then PASSES timed passes.  It prints one line:
 *
 *   limit <files/s> <audio seconds/s> <files> <audio seconds a pass> <CPU ms a file>
 *
 * the median pass's rate, in files and in seconds of audio decoded (the
 * whole clips, or WINDOW frames of each), how many files a pass decodes,
 * the seconds of audio that makes, and the CPU time (user and system, all
 * threads) the timed passes took per file decoded: a figure that other
 * work on the machine leaves nearly as it is.  Exit status 2 on a file that cannot be
 * read or decoded (named on stderr).
 */
#define _GNU_SOURCE

#include "audio_limit.h"

#include <mpg123.h>

/* The memory the decoder reads. */
typedef struct {
    const unsigned char *data;
    size_t len, pos;
} source;

static mpg123_ssize_t on_read(void *h, void *buf, size_t n) {
    source *s = h;
    size_t k = s->len - s->pos < n ? s->len - s->pos : n;
    memcpy(buf, s->data + s->pos, k);
    s->pos += k;
    return (mpg123_ssize_t)k;
}

static off_t on_lseek(void *h, off_t off, int whence) {
    source *s = h;
    long long base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (long long)s->pos
                                                                   : (long long)s->len;
    long long to = base + (long long)off;
    if (to < 0 || to > (long long)s->len)
        return -1;
    s->pos = (size_t)to;
    return (off_t)to;
}

/* Decodes clip c (whole, or a window of it into buf, room for `cap`
 * floats); the frames decoded and the rate in *frames, *rate; 0, or -1
 * where it fails. */
static int decode(mpg123_handle *mh, const clip *c, uint64_t window, uint64_t key, float *buf,
                  size_t cap, uint64_t *frames, long *rate) {
    source s = {c->data, c->len, 0};
    *frames = 0;
    if (mpg123_open_handle(mh, &s) != MPG123_OK)
        return -1;
    int ch, enc, ok = 1;
    if (mpg123_getformat(mh, rate, &ch, &enc) != MPG123_OK || ch < 1) {
        mpg123_close(mh);
        return -1;
    }
    if (!window) {
        for (;;) {
            off_t num;
            unsigned char *audio;
            size_t bytes;
            int rc = mpg123_decode_frame(mh, &num, &audio, &bytes);
            *frames += bytes / ((size_t)ch * sizeof(float));
            if (rc == MPG123_DONE)
                break;
            if (rc != MPG123_OK && rc != MPG123_NEW_FORMAT) {
                ok = 0;
                break;
            }
        }
    } else {
        ok = mpg123_scan(mh) == MPG123_OK;
        off_t total = ok ? mpg123_length(mh) : -1;
        ok = total >= 0;
        uint64_t t = ok ? (uint64_t)total : 0;
        uint64_t start = t > window ? mix64(key) % (t - window + 1) : 0;
        uint64_t want = t > window ? window : t;
        if (ok && mpg123_seek(mh, (off_t)start, SEEK_SET) < 0)
            ok = 0;
        size_t fbytes = (size_t)ch * sizeof(float);
        while (ok && *frames < want) {
            size_t done = 0, room = (size_t)(want - *frames) * (size_t)ch;
            if (room > cap)
                room = cap - cap % (size_t)ch;
            int rc = mpg123_read(mh, (unsigned char *)buf, room * sizeof(float), &done);
            *frames += done / fbytes;
            if (rc == MPG123_DONE)
                break;
            if (rc != MPG123_OK && rc != MPG123_NEW_FORMAT)
                ok = 0;
        }
    }
    mpg123_close(mh);
    return ok ? 0 : -1;
}

static void *worker(void *arg) {
    work *w = arg;
    int rc;
    mpg123_handle *mh = mpg123_new(NULL, &rc);
    size_t cap = 1 << 20;
    float *buf = malloc(cap * sizeof *buf);
    if (!mh || !buf ||
        mpg123_param(mh, MPG123_FLAGS, MPG123_GAPLESS | MPG123_FORCE_FLOAT | MPG123_QUIET, 0) !=
            MPG123_OK ||
        mpg123_replace_reader_handle(mh, on_read, on_lseek, NULL) != MPG123_OK) {
        atomic_store(&w->failed, 1);
        free(buf);
        return NULL;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n)
            break;
        uint64_t frames;
        long rate;
        if (decode(mh, &w->clips[i], w->window, ((uint64_t)w->pass << 32) ^ i, buf, cap, &frames,
                   &rate) != 0) {
            fprintf(stderr, "mp3_limit: %s does not decode\n", w->clips[i].path);
            atomic_store(&w->failed, 1);
            break;
        }
        atomic_fetch_add(&w->frames, frames);
        atomic_fetch_add(&w->rate_fs,
                         (unsigned long long)((double)frames / (rate > 0 ? rate : 1) * 1e6));
    }
    mpg123_delete(mh);
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (mpg123_init() != MPG123_OK)
        return 2;
    return limit_main(argc, argv, "mp3_limit", worker);
}
