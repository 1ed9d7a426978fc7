/*
 * flac_limit: libFLAC's own decode rate on a set of FLAC files, the limit an
 * audio loader is held to (bench/media_audio.py).
 *
 *   flac_limit THREADS PASSES LISTFILE [WINDOW]
 *
 * LISTFILE names one file a line.  Every file is read into memory first;
 * then THREADS threads decode the files, each taking the next undecoded one
 * with a stream decoder of its own (kept from file to file) reading from
 * memory.  Without WINDOW (or 0) every file is decoded whole, to the
 * decoder's integer samples, which are not looked at further: the full
 * decode.  With WINDOW > 0 each file is sought (FLAC__stream_decoder_seek_
 * absolute) to a start drawn from the file's number and the pass, uniform
 * among those where WINDOW frames fit, and WINDOW frames are decoded from
 * there: the least a loader of random windows can decode.  One pass over
 * the files warms the caches and is not counted; then PASSES timed passes.
 * It prints one line:
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

#include <FLAC/stream_decoder.h>

/* The memory the decoder reads, and what it has decoded of the file. */
typedef struct {
    const unsigned char *data;
    size_t len, pos;
    uint64_t total, decoded, want;
    unsigned rate;
    int error;
} source;

static FLAC__StreamDecoderReadStatus on_read(const FLAC__StreamDecoder *d, FLAC__byte buf[],
                                             size_t *bytes, void *ud) {
    (void)d;
    source *s = ud;
    size_t k = s->len - s->pos < *bytes ? s->len - s->pos : *bytes;
    memcpy(buf, s->data + s->pos, k);
    s->pos += k;
    *bytes = k;
    return k ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE
             : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
}

static FLAC__StreamDecoderSeekStatus on_seek(const FLAC__StreamDecoder *d, FLAC__uint64 off,
                                             void *ud) {
    (void)d;
    source *s = ud;
    if (off > s->len)
        return FLAC__STREAM_DECODER_SEEK_STATUS_ERROR;
    s->pos = (size_t)off;
    return FLAC__STREAM_DECODER_SEEK_STATUS_OK;
}

static FLAC__StreamDecoderTellStatus on_tell(const FLAC__StreamDecoder *d, FLAC__uint64 *off,
                                             void *ud) {
    (void)d;
    *off = ((source *)ud)->pos;
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
}

static FLAC__StreamDecoderLengthStatus on_length(const FLAC__StreamDecoder *d,
                                                 FLAC__uint64 *len, void *ud) {
    (void)d;
    *len = ((source *)ud)->len;
    return FLAC__STREAM_DECODER_LENGTH_STATUS_OK;
}

static FLAC__bool on_eof(const FLAC__StreamDecoder *d, void *ud) {
    (void)d;
    source *s = ud;
    return s->pos >= s->len;
}

static FLAC__StreamDecoderWriteStatus on_write(const FLAC__StreamDecoder *d,
                                               const FLAC__Frame *frame,
                                               const FLAC__int32 *const buf[], void *ud) {
    (void)d;
    (void)buf;
    source *s = ud;
    s->decoded += frame->header.blocksize;
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
}

static void on_metadata(const FLAC__StreamDecoder *d, const FLAC__StreamMetadata *m, void *ud) {
    (void)d;
    source *s = ud;
    if (m->type == FLAC__METADATA_TYPE_STREAMINFO) {
        s->total = m->data.stream_info.total_samples;
        s->rate = m->data.stream_info.sample_rate;
    }
}

static void on_error(const FLAC__StreamDecoder *d, FLAC__StreamDecoderErrorStatus st, void *ud) {
    (void)d;
    (void)st;
    ((source *)ud)->error = 1;
}

/* Decodes clip c (whole, or a window of it); 0, or -1 where it fails. */
static int decode(FLAC__StreamDecoder *dec, const clip *c, uint64_t window, uint64_t key,
                  source *s) {
    memset(s, 0, sizeof *s);
    s->data = c->data;
    s->len = c->len;
    if (FLAC__stream_decoder_init_stream(dec, on_read, on_seek, on_tell, on_length, on_eof,
                                         on_write, on_metadata, on_error,
                                         s) != FLAC__STREAM_DECODER_INIT_STATUS_OK)
        return -1;
    int ok;
    if (!window) {
        ok = FLAC__stream_decoder_process_until_end_of_stream(dec);
    } else {
        ok = FLAC__stream_decoder_process_until_end_of_metadata(dec);
        uint64_t start = s->total > window ? mix64(key) % (s->total - window + 1) : 0;
        uint64_t want = s->total > window ? window : s->total;
        if (ok && start)
            ok = FLAC__stream_decoder_seek_absolute(dec, start);
        while (ok && s->decoded < want &&
               FLAC__stream_decoder_get_state(dec) != FLAC__STREAM_DECODER_END_OF_STREAM)
            ok = FLAC__stream_decoder_process_single(dec);
        if (s->decoded > want)
            s->decoded = want;
    }
    FLAC__stream_decoder_finish(dec);
    return ok && !s->error ? 0 : -1;
}

static void *worker(void *arg) {
    work *w = arg;
    FLAC__StreamDecoder *dec = FLAC__stream_decoder_new();
    if (!dec) {
        atomic_store(&w->failed, 1);
        return NULL;
    }
    source s;
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n)
            break;
        if (decode(dec, &w->clips[i], w->window, ((uint64_t)w->pass << 32) ^ i, &s) != 0) {
            fprintf(stderr, "flac_limit: %s does not decode\n", w->clips[i].path);
            atomic_store(&w->failed, 1);
            break;
        }
        atomic_fetch_add(&w->frames, s.decoded);
        atomic_fetch_add(&w->rate_fs,
                         (unsigned long long)((double)s.decoded / (s.rate ? s.rate : 1) * 1e6));
    }
    FLAC__stream_decoder_delete(dec);
    return NULL;
}

int main(int argc, char **argv) {
    return limit_main(argc, argv, "flac_limit", worker);
}
