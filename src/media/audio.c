/*
 * audio.c: the audio decoders (libFLAC, mpg123, libvorbisfile, opusfile)
 * and the resampler (libsoxr).
 *
 * Every decoder reads the record through a reader over [src, src + len)
 * (callbacks, or opusfile's own memory reader): no byte outside it is ever
 * asked for.  Each format supplies three steps,
 *   open   header: rate, channels, frames (at the stored rate);
 *   read   seek to a frame with the library's exact seek, then decode up to
 *          n frames, float32 interleaved, the clip's own channels;
 *   close
 * and audio_window, common to all, picks the window, asks for the source
 * frames it needs (with a margin for the resampler's filter), mixes the
 * channels and resamples.  A window later in the clip is decoded from the
 * decoder's seek point, never from the start of the clip.
 *
 * The work is bounded by the record: each read loop stops when a call
 * neither delivers frames nor consumes input a few times running, and a
 * clip whose length the header does not give (a FLAC stream written
 * without it) is decoded whole, up to STK__AUDIO_MAX_FRAMES, to count its
 * frames (keeping none of them), then read as any other.
 */
#include "media.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef STK_HAVE_FLAC
#include <FLAC/stream_decoder.h>
#endif
#ifdef STK_HAVE_MPG123
#include <mpg123.h>
#endif
#ifdef STK_HAVE_VORBIS
#include <vorbis/vorbisfile.h>
#endif
#ifdef STK_HAVE_OPUS
#include <opusfile.h>
#endif
#ifdef STK_HAVE_SOXR
#include <soxr.h>
#endif

/* Frames decoded at most from a clip of unknown length (about 1.5 hours
 * at 48 kHz): a few bytes of a crafted FLAC stream can claim billions. */
#define STK__AUDIO_MAX_FRAMES ((uint64_t)1 << 28)
/* Reader calls in a row that deliver nothing before a decode is called
 * stuck. */
#define STK__AUDIO_STALLS 64
/* Output frames resampled before a window and after it, so that the
 * filter's start-up and flush stay outside the window, per unit of the
 * upsampling ratio (out / in rounded up): libsoxr's high quality filter
 * spans a fixed number of frames at the lower of the two rates.  With 256
 * a window equals the whole clip's resampled frames within 3e-7 (float
 * rounding), where 256 at 8 to 48 kHz left 6e-4. */
#define STK__AUDIO_MARGIN 256
/* Opus frames decoded and dropped before a window, beyond opusfile's own
 * 80 ms (see opus_read_frames). */
#define STK__OPUS_PREROLL 48000

/* The record, as every reader sees it. */
typedef struct memrd {
    const uint8_t *p;
    size_t len, pos;
} memrd;

/* A clip open for decoding. */
typedef struct clip {
    stk__fmt fmt;
    uint32_t rate, channels;
    uint64_t frames; /* at `rate`; UINT64_MAX: the header does not say */
} clip;

typedef struct audio_state {
    float *src; /* source frames, the clip's channels, then mixed in place */
    size_t src_cap;
    float *res; /* resampled frames */
    size_t res_cap;
    memrd mem;
#ifdef STK_HAVE_FLAC
    FLAC__StreamDecoder *flac;
    int flac_open;
    uint32_t flac_rate, flac_channels, flac_bps;
    uint64_t flac_total;
    int flac_info;                      /* STREAMINFO seen */
    int flac_err;                       /* first error status + 1, 0: none */
    float *flac_dst;                    /* where the write callback puts frames */
    uint64_t flac_want, flac_got;
    int flac_grow;                      /* 1: counting frames, keeping none */
    int flac_rewind;                    /* 1: the stream was read to its end
                                         * (counted): the next read seeks */
#endif
#ifdef STK_HAVE_MPG123
    mpg123_handle *mh;
    int mh_open;
#endif
#ifdef STK_HAVE_VORBIS
    OggVorbis_File vf;
    int vf_open;
#endif
#ifdef STK_HAVE_OPUS
    OggOpusFile *of;
#endif
#ifdef STK_HAVE_SOXR
    soxr_t soxr;
    uint32_t sx_in, sx_out, sx_ch;
#endif
} audio_state;

static int grow(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    size_t want = n < 4096 ? 4096 : n;
    if (want < *cap * 2) want = *cap * 2; /* (amortised: no copy per small growth) */
    float *q = stk__realloc(*p, want * sizeof(float));
    if (!q) return -ENOMEM;
    *p = q;
    *cap = want;
    return 0;
}

static int no_decoder(stk__fmt f, char *why) {
    snprintf(why, STK__WHY, "this build of stoker has no %s decoder", stk__fmt_name(f));
    return STK_EUNSUPPORTED;
}

/* ------------------------------------------------------------------------ */
/* FLAC                                                                     */
/* ------------------------------------------------------------------------ */

#ifdef STK_HAVE_FLAC
static FLAC__StreamDecoderReadStatus flac_read(const FLAC__StreamDecoder *dec, FLAC__byte buf[],
                                               size_t *bytes, void *ud) {
    (void)dec;
    memrd *m = &((audio_state *)ud)->mem;
    size_t n = m->len - m->pos;
    if (n == 0) {
        *bytes = 0;
        return FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
    }
    if (n > *bytes) n = *bytes;
    memcpy(buf, m->p + m->pos, n);
    m->pos += n;
    *bytes = n;
    return FLAC__STREAM_DECODER_READ_STATUS_CONTINUE;
}

static FLAC__StreamDecoderSeekStatus flac_seek(const FLAC__StreamDecoder *dec, FLAC__uint64 off,
                                               void *ud) {
    (void)dec;
    memrd *m = &((audio_state *)ud)->mem;
    if (off > m->len) return FLAC__STREAM_DECODER_SEEK_STATUS_ERROR;
    m->pos = (size_t)off;
    return FLAC__STREAM_DECODER_SEEK_STATUS_OK;
}

static FLAC__StreamDecoderTellStatus flac_tell(const FLAC__StreamDecoder *dec, FLAC__uint64 *off,
                                               void *ud) {
    (void)dec;
    *off = ((audio_state *)ud)->mem.pos;
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
}

static FLAC__StreamDecoderLengthStatus flac_length(const FLAC__StreamDecoder *dec,
                                                   FLAC__uint64 *len, void *ud) {
    (void)dec;
    *len = ((audio_state *)ud)->mem.len;
    return FLAC__STREAM_DECODER_LENGTH_STATUS_OK;
}

static FLAC__bool flac_eof(const FLAC__StreamDecoder *dec, void *ud) {
    (void)dec;
    memrd *m = &((audio_state *)ud)->mem;
    return m->pos >= m->len;
}

static FLAC__StreamDecoderWriteStatus flac_write(const FLAC__StreamDecoder *dec,
                                                 const FLAC__Frame *fr,
                                                 const FLAC__int32 *const buf[], void *ud) {
    (void)dec;
    audio_state *st = ud;
    uint32_t ch = fr->header.channels, bps = fr->header.bits_per_sample;
    if (ch != st->flac_channels || bps < 4 || bps > 32) {
        if (!st->flac_err) st->flac_err = 1000; /* a frame unlike the header */
        return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    uint64_t n = fr->header.blocksize;
    if (st->flac_grow) { /* (counting: nothing is kept) */
        if (st->flac_got + n > STK__AUDIO_MAX_FRAMES) {
            if (!st->flac_err) st->flac_err = 1001;
            return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
        }
        st->flac_got += n;
        return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
    }
    if (!st->flac_dst) return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
    if (n > st->flac_want - st->flac_got) n = st->flac_want - st->flac_got;
    /* Integers divided by 2^(bits - 1): exact in float32 up to 24 bits. */
    float scale = 1.0f / (float)((uint64_t)1 << (bps - 1));
    float *o = st->flac_dst + st->flac_got * ch;
    if (ch == 1) { /* (a loop the compiler vectorises) */
        const FLAC__int32 *b = buf[0];
        for (uint64_t i = 0; i < n; i++) o[i] = (float)b[i] * scale;
    } else {
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t c = 0; c < ch; c++) *o++ = (float)buf[c][i] * scale;
    }
    st->flac_got += n;
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
}

static void flac_metadata(const FLAC__StreamDecoder *dec, const FLAC__StreamMetadata *md,
                          void *ud) {
    (void)dec;
    audio_state *st = ud;
    if (md->type != FLAC__METADATA_TYPE_STREAMINFO) return;
    st->flac_rate = md->data.stream_info.sample_rate;
    st->flac_channels = md->data.stream_info.channels;
    st->flac_bps = md->data.stream_info.bits_per_sample;
    st->flac_total = md->data.stream_info.total_samples;
    st->flac_info = 1;
}

static void flac_error(const FLAC__StreamDecoder *dec, FLAC__StreamDecoderErrorStatus s,
                       void *ud) {
    (void)dec;
    audio_state *st = ud;
    if (!st->flac_err) st->flac_err = (int)s + 1;
}

static const char *flac_error_text(int e) {
    switch (e - 1) {
    case FLAC__STREAM_DECODER_ERROR_STATUS_LOST_SYNC:
        return "lost sync (bytes that are not FLAC frames, or a frame cut short)";
    case FLAC__STREAM_DECODER_ERROR_STATUS_BAD_HEADER: return "a bad frame header";
    case FLAC__STREAM_DECODER_ERROR_STATUS_FRAME_CRC_MISMATCH:
        return "a frame whose CRC does not match its data";
    case FLAC__STREAM_DECODER_ERROR_STATUS_UNPARSEABLE_STREAM: return "an unparseable stream";
    default: break;
    }
    if (e == 1000) return "a frame whose channels or bits differ from the header's";
    if (e == 1001) return "a clip of unknown length longer than 2^28 frames";
    if (e == 1002) return "out of memory";
    return "a damaged stream";
}

static int flac_fail(audio_state *st, const char *what, char *why) {
    FLAC__uint64 at = 0;
    if (st->flac_err) {
        FLAC__stream_decoder_get_decode_position(st->flac, &at);
        snprintf(why, STK__WHY, "FLAC: %s%s (the decoder says %s, near byte %llu)", what,
                 flac_error_text(st->flac_err),
                 FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(st->flac)],
                 (unsigned long long)(at ? at : st->mem.pos));
    } else {
        snprintf(why, STK__WHY, "FLAC: %s (the decoder says %s)", what,
                 FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(st->flac)]);
    }
    return STK_EMEDIA;
}

static void flac_close(audio_state *st) {
    if (st->flac_open) FLAC__stream_decoder_finish(st->flac);
    st->flac_open = 0;
}

static int flac_open(audio_state *st, clip *c, char *why) {
    if (!st->flac) {
        st->flac = FLAC__stream_decoder_new();
        if (!st->flac) return -ENOMEM;
    }
    FLAC__stream_decoder_set_md5_checking(st->flac, false);
    st->flac_info = 0;
    st->flac_err = 0;
    st->flac_dst = NULL;
    st->flac_rewind = 0;
    if (FLAC__stream_decoder_init_stream(st->flac, flac_read, flac_seek, flac_tell, flac_length,
                                         flac_eof, flac_write, flac_metadata, flac_error,
                                         st) != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
        snprintf(why, STK__WHY, "FLAC: the decoder could not start");
        return -ENOMEM;
    }
    st->flac_open = 1;
    if (!FLAC__stream_decoder_process_until_end_of_metadata(st->flac) || st->flac_err)
        return flac_fail(st, "bad metadata: ", why);
    if (!st->flac_info || st->flac_rate == 0 || st->flac_channels == 0) {
        snprintf(why, STK__WHY, "FLAC: no STREAMINFO block with a rate and channels");
        return STK_EMEDIA;
    }
    c->rate = st->flac_rate;
    c->channels = st->flac_channels;
    c->frames = st->flac_total ? st->flac_total : UINT64_MAX;
    return 0;
}

static int flac_read_frames(audio_state *st, const clip *c, uint64_t start, float *dst,
                            uint64_t n, uint64_t *got, char *why) {
    (void)c;
    st->flac_dst = dst;
    st->flac_want = n;
    st->flac_got = 0;
    if (start > 0 || st->flac_rewind) {
        st->flac_rewind = 0;
        if (!FLAC__stream_decoder_seek_absolute(st->flac, start)) {
            snprintf(why, STK__WHY, "FLAC: cannot seek to frame %llu (the decoder says %s)",
                     (unsigned long long)start,
                     FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(st->flac)]);
            return STK_EMEDIA;
        }
        /* The seek's search reads from arbitrary offsets, where libFLAC
         * reports lost sync on its way to a frame: only the frames decoded
         * from the seek point on count. */
        st->flac_err = 0;
    }
    int stalls = 0;
    while (st->flac_got < n) {
        uint64_t had = st->flac_got;
        size_t pos = st->mem.pos;
        if (!FLAC__stream_decoder_process_single(st->flac) || st->flac_err)
            return flac_fail(st, "", why);
        if (FLAC__stream_decoder_get_state(st->flac) == FLAC__STREAM_DECODER_END_OF_STREAM) break;
        if (st->flac_got == had && st->mem.pos == pos && ++stalls > STK__AUDIO_STALLS) {
            snprintf(why, STK__WHY, "FLAC: the decoder makes no progress at byte %zu", pos);
            return STK_EMEDIA;
        }
        if (st->flac_got != had) stalls = 0;
    }
    *got = st->flac_got;
    st->flac_dst = NULL;
    return 0;
}
#endif

/* ------------------------------------------------------------------------ */
/* MP3                                                                      */
/* ------------------------------------------------------------------------ */

#ifdef STK_HAVE_MPG123
static pthread_once_t mpg123_once = PTHREAD_ONCE_INIT;
static int mpg123_init_rc;
static void mpg123_init_once(void) { mpg123_init_rc = mpg123_init(); }

static mpg123_ssize_t mp3_read(void *h, void *buf, size_t n) {
    memrd *m = h;
    size_t left = m->len - m->pos;
    if (n > left) n = left;
    memcpy(buf, m->p + m->pos, n);
    m->pos += n;
    return (mpg123_ssize_t)n;
}

static off_t mp3_lseek(void *h, off_t off, int whence) {
    memrd *m = h;
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (int64_t)m->pos : (int64_t)m->len;
    int64_t to = base + (int64_t)off;
    if (to < 0 || to > (int64_t)m->len) return -1;
    m->pos = (size_t)to;
    return (off_t)to;
}

static int mp3_fail(audio_state *st, const char *what, int rc, char *why) {
    snprintf(why, STK__WHY, "MP3: %s (the decoder says: %s)", what,
             rc == MPG123_ERR ? mpg123_strerror(st->mh) : mpg123_plain_strerror(rc));
    return STK_EMEDIA;
}

static void mp3_close(audio_state *st) {
    if (st->mh_open) mpg123_close(st->mh);
    st->mh_open = 0;
}

static int mp3_open(audio_state *st, clip *c, char *why) {
    int rc;
    if (!st->mh) {
        pthread_once(&mpg123_once, mpg123_init_once);
        if (mpg123_init_rc != MPG123_OK) {
            snprintf(why, STK__WHY, "MP3: mpg123 did not initialise: %s",
                     mpg123_plain_strerror(mpg123_init_rc));
            return STK_EMEDIA;
        }
        st->mh = mpg123_new(NULL, &rc);
        if (!st->mh) return -ENOMEM;
        /* Float output; gapless (the encoder's delay and padding removed, as
         * libsndfile decodes); a stream that changes its rate or channels
         * half-way is cut there; quiet. */
        long flags = MPG123_GAPLESS | MPG123_FORCE_FLOAT | MPG123_QUIET | MPG123_NO_FRANKENSTEIN;
        if (mpg123_param(st->mh, MPG123_FLAGS, flags, 0) != MPG123_OK ||
            mpg123_replace_reader_handle(st->mh, mp3_read, mp3_lseek, NULL) != MPG123_OK) {
            snprintf(why, STK__WHY, "MP3: cannot set up the decoder: %s", mpg123_strerror(st->mh));
            mpg123_delete(st->mh);
            st->mh = NULL;
            return STK_EMEDIA;
        }
    }
    rc = mpg123_open_handle(st->mh, &st->mem);
    if (rc != MPG123_OK) return mp3_fail(st, "cannot open the stream", rc, why);
    st->mh_open = 1;
    long rate;
    int ch, enc;
    rc = mpg123_getformat(st->mh, &rate, &ch, &enc);
    if (rc != MPG123_OK) return mp3_fail(st, "no MPEG audio frame", rc, why);
    if (enc != MPG123_ENC_FLOAT_32 || rate <= 0 || ch <= 0) {
        snprintf(why, STK__WHY, "MP3: the decoder gives encoding %d, rate %ld, %d channels", enc,
                 rate, ch);
        return STK_EMEDIA;
    }
    mpg123_format_none(st->mh);
    mpg123_format(st->mh, rate, ch, MPG123_ENC_FLOAT_32);
    /* A LAME/Info tag (it carries the encoder's delay) gives the length
     * the encoder wrote; without one, mpg123_length is an estimate from
     * the bitrate until the scan. */
    off_t tagged = mpg123_length(st->mh);
    long delay = -1;
    mpg123_getstate(st->mh, MPG123_ENC_DELAY, &delay, NULL);
    /* A scan of every frame header (not a decode) gives the exact length
     * and the frame index that makes mpg123_seek exact. */
    rc = mpg123_scan(st->mh);
    if (rc != MPG123_OK) return mp3_fail(st, "cannot scan the frames", rc, why);
    off_t total = mpg123_length(st->mh);
    if (total < 0) return mp3_fail(st, "no length", MPG123_ERR, why);
    if (delay >= 0 && tagged >= 0 && tagged != total) {
        snprintf(why, STK__WHY,
                 "MP3: its frames hold %lld samples, its Info tag says %lld (truncated, or "
                 "frames missing)",
                 (long long)total, (long long)tagged);
        return STK_EMEDIA;
    }
    c->rate = (uint32_t)rate;
    c->channels = (uint32_t)ch;
    c->frames = (uint64_t)total;
    return 0;
}

static int mp3_read_frames(audio_state *st, const clip *c, uint64_t start, float *dst,
                           uint64_t n, uint64_t *got, char *why) {
    off_t at = mpg123_seek(st->mh, (off_t)start, SEEK_SET);
    if (at < 0) return mp3_fail(st, "cannot seek", MPG123_ERR, why);
    if ((uint64_t)at != start) {
        snprintf(why, STK__WHY, "MP3: a seek to frame %llu landed at %lld",
                 (unsigned long long)start, (long long)at);
        return STK_EMEDIA;
    }
    size_t fbytes = c->channels * sizeof(float);
    uint64_t have = 0;
    int stalls = 0;
    while (have < n) {
        size_t done = 0;
        size_t pos = st->mem.pos;
        int rc = mpg123_read(st->mh, (unsigned char *)(dst + have * c->channels),
                             (size_t)(n - have) * fbytes, &done);
        have += done / fbytes;
        if (rc == MPG123_DONE) break;
        if (rc == MPG123_NEW_FORMAT) {
            long rate;
            int ch, enc;
            mpg123_getformat(st->mh, &rate, &ch, &enc);
            if ((uint32_t)rate != c->rate || (uint32_t)ch != c->channels) {
                snprintf(why, STK__WHY, "MP3: the stream changes to %ld Hz, %d channels", rate,
                         ch);
                return STK_EMEDIA;
            }
        } else if (rc != MPG123_OK) {
            return mp3_fail(st, "bad data", rc, why);
        }
        if (done == 0 && st->mem.pos == pos && ++stalls > STK__AUDIO_STALLS) {
            snprintf(why, STK__WHY, "MP3: the decoder makes no progress at byte %zu", pos);
            return STK_EMEDIA;
        }
        if (done) stalls = 0;
    }
    *got = have;
    return 0;
}
#endif

/* ------------------------------------------------------------------------ */
/* Ogg Vorbis                                                               */
/* ------------------------------------------------------------------------ */

#if defined(STK_HAVE_VORBIS) || defined(STK_HAVE_OPUS)
/* What libvorbisfile's and opusfile's negative codes mean (they share
 * most of them, with different numbers). */
static const char *ogg_text(int rc, int opus) {
#ifdef STK_HAVE_OPUS
    if (opus) {
        switch (rc) {
        case OP_HOLE: return "a hole in the data (missing or damaged pages)";
        case OP_EREAD: return "a read failed";
        case OP_EFAULT: return "an internal error (damaged data)";
        case OP_EIMPL: return "a feature opusfile does not implement";
        case OP_EINVAL: return "an invalid call";
        case OP_ENOTFORMAT: return "not an Ogg Opus stream";
        case OP_EBADHEADER: return "a bad header";
        case OP_EVERSION: return "an unknown Opus header version";
        case OP_EBADPACKET: return "a packet that does not decode";
        case OP_EBADLINK: return "a link of the stream that cannot be found again";
        case OP_ENOSEEK: return "the stream cannot seek";
        case OP_EBADTIMESTAMP: return "bad granule positions (timestamps)";
        default: return "an unknown error";
        }
    }
#endif
#ifdef STK_HAVE_VORBIS
    switch (rc) {
    case OV_FALSE: return "no data where the pages say (damaged pages)";
    case OV_HOLE: return "a hole in the data (missing or damaged pages)";
    case OV_EREAD: return "a read failed";
    case OV_EFAULT: return "an internal error (damaged data)";
    case OV_EIMPL: return "a feature libvorbis does not implement";
    case OV_EINVAL: return "an invalid call";
    case OV_ENOTVORBIS: return "not an Ogg Vorbis stream";
    case OV_EBADHEADER: return "a bad header";
    case OV_EVERSION: return "an unknown Vorbis version";
    case OV_EBADLINK: return "a link of the stream that cannot be found again";
    case OV_ENOSEEK: return "the stream cannot seek";
    case OV_EBADPACKET: return "a packet that does not decode";
    default: return "an unknown error";
    }
#else
    (void)rc;
    return "an unknown error";
#endif
}

static int ogg_fail(const char *fmt, const char *what, int rc, int opus, char *why) {
    snprintf(why, STK__WHY, "%s: %s (%s)", fmt, what, ogg_text(rc, opus));
    return STK_EMEDIA;
}

/* The stream must end where the record does, with the page that closes
 * it: else the record was cut (in a page, or between pages), or has bytes
 * after the stream.  `last` is where the library found the last whole page
 * (its CRC checked); its length is read from its header (27 bytes, the
 * segment count, then the segments' lengths). */
static int ogg_check_end(const char *fmt, const uint8_t *p, size_t len, int64_t last,
                         char *why) {
    const char *what = NULL;
    size_t end = 0;
    if (last < 0 || (uint64_t)last + 27 > len || memcmp(p + last, "OggS", 4) != 0) {
        what = "no last page where the decoder found one";
    } else {
        size_t at = (size_t)last, nseg = p[at + 26];
        end = at + 27 + nseg;
        if (end > len) {
            what = "its last page is cut";
        } else {
            for (size_t k = 0; k < nseg; k++) end += p[at + 27 + k];
            if (end > len) what = "its last page is cut";
            else if (end < len)
                what = "bytes follow the last whole page found (damaged or cut pages, or junk)";
            else if (!(p[at + 5] & 4)) what = "its last page does not end the stream (truncated)";
        }
    }
    if (!what) return 0;
    snprintf(why, STK__WHY, "%s: %s (the last whole page starts at byte %lld of %zu)", fmt, what,
             (long long)last, len);
    return STK_EMEDIA;
}
#endif

#ifdef STK_HAVE_VORBIS
static size_t ov_cb_read(void *buf, size_t size, size_t nmemb, void *h) {
    memrd *m = h;
    if (size == 0) return 0;
    size_t items = (m->len - m->pos) / size;
    if (items > nmemb) items = nmemb;
    memcpy(buf, m->p + m->pos, items * size);
    m->pos += items * size;
    return items;
}

static int ov_cb_seek(void *h, ogg_int64_t off, int whence) {
    memrd *m = h;
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (int64_t)m->pos : (int64_t)m->len;
    int64_t to = base + off;
    if (to < 0 || to > (int64_t)m->len) return -1;
    m->pos = (size_t)to;
    return 0;
}

static long ov_cb_tell(void *h) { return (long)((memrd *)h)->pos; }

static void vorbis_close(audio_state *st) {
    if (st->vf_open) ov_clear(&st->vf);
    st->vf_open = 0;
}

static int vorbis_open(audio_state *st, clip *c, char *why) {
    ov_callbacks cb = {ov_cb_read, ov_cb_seek, NULL, ov_cb_tell};
    int rc = ov_open_callbacks(&st->mem, &st->vf, NULL, 0, cb);
    if (rc < 0) return ogg_fail("Vorbis", "cannot open the stream", rc, 0, why);
    st->vf_open = 1;
    vorbis_info *vi = ov_info(&st->vf, 0);
    if (!vi || vi->channels <= 0 || vi->rate <= 0)
        return ogg_fail("Vorbis", "no stream header", OV_EBADHEADER, 0, why);
    for (long l = 1; l < ov_streams(&st->vf); l++) {
        vorbis_info *li = ov_info(&st->vf, (int)l);
        if (!li || li->channels != vi->channels || li->rate != vi->rate) {
            snprintf(why, STK__WHY, "Vorbis: chained streams of different rates or channels");
            return STK_EMEDIA;
        }
    }
    ogg_int64_t total = ov_pcm_total(&st->vf, -1);
    if (total < 0) return ogg_fail("Vorbis", "no length", (int)total, 0, why);
    int e = ogg_check_end("Vorbis", st->mem.p, st->mem.len, st->vf.offsets[st->vf.links], why);
    if (e) return e;
    c->rate = (uint32_t)vi->rate;
    c->channels = (uint32_t)vi->channels;
    c->frames = (uint64_t)total;
    return 0;
}

static int vorbis_read_frames(audio_state *st, const clip *c, uint64_t start, float *dst,
                              uint64_t n, uint64_t *got, char *why) {
    /* Opened, the stream stands at its first frame. */
    int rc = start ? ov_pcm_seek(&st->vf, (ogg_int64_t)start) : 0;
    if (rc < 0) return ogg_fail("Vorbis", "cannot seek", rc, 0, why);
    uint64_t have = 0;
    while (have < n) {
        float **pcm;
        int link;
        uint64_t want = n - have;
        long r = ov_read_float(&st->vf, &pcm, want > 65536 ? 65536 : (int)want, &link);
        if (r == 0) break;
        if (r < 0) return ogg_fail("Vorbis", "bad data", (int)r, 0, why);
        vorbis_info *vi = ov_info(&st->vf, link);
        if (!vi || (uint32_t)vi->channels != c->channels) {
            snprintf(why, STK__WHY, "Vorbis: a link with other channels");
            return STK_EMEDIA;
        }
        if ((uint64_t)r > want) r = (long)want;
        float *o = dst + have * c->channels;
        for (long i = 0; i < r; i++)
            for (uint32_t ch = 0; ch < c->channels; ch++) *o++ = pcm[ch][i];
        have += (uint64_t)r;
    }
    *got = have;
    return 0;
}
#endif

/* ------------------------------------------------------------------------ */
/* Ogg Opus                                                                 */
/* ------------------------------------------------------------------------ */

#ifdef STK_HAVE_OPUS
static void opus_close(audio_state *st) {
    if (st->of) op_free(st->of);
    st->of = NULL;
}

static int opus_open(audio_state *st, clip *c, char *why) {
    int rc = 0;
    st->of = op_open_memory(st->mem.p, st->mem.len, &rc);
    if (!st->of) return ogg_fail("Opus", "cannot open the stream", rc, 1, why);
    int ch = op_channel_count(st->of, -1);
    for (int l = 0; l < op_link_count(st->of); l++) {
        if (op_channel_count(st->of, l) != ch) {
            snprintf(why, STK__WHY, "Opus: chained streams of different channels");
            return STK_EMEDIA;
        }
    }
    ogg_int64_t total = op_pcm_total(st->of, -1);
    if (total < 0) return ogg_fail("Opus", "no length", (int)total, 1, why);
    /* opusfile keeps the end of the last whole page it found. */
    opus_int64 end = op_raw_total(st->of, -1);
    if (end < 0 || (uint64_t)end != st->mem.len) {
        snprintf(why, STK__WHY,
                 "Opus: the stream's last whole page ends at byte %lld of %zu (truncated, or "
                 "bytes after it)",
                 (long long)end, st->mem.len);
        return STK_EMEDIA;
    }
    c->rate = 48000; /* opusfile always decodes at 48 kHz */
    c->channels = (uint32_t)ch;
    c->frames = (uint64_t)total;
    return 0;
}

static int opus_read_frames(audio_state *st, const clip *c, uint64_t start, float *dst,
                            uint64_t n, uint64_t *got, char *why) {
    /* opusfile seeks to a page 80 ms before the target and decodes from
     * there, which the format deems enough; but the decoder's state (SILK's
     * pitch and prediction, CELT's energy) has not quite converged then:
     * samples differ from the whole decode's by up to 0.1 at a few seeks
     * of speech.  Another second decoded and dropped brings that under
     * 1e-4 (docs/MEDIA.md). */
    uint64_t pre = start < STK__OPUS_PREROLL ? start : STK__OPUS_PREROLL;
    int rc = op_pcm_seek(st->of, (ogg_int64_t)(start - pre));
    if (rc < 0) return ogg_fail("Opus", "cannot seek", rc, 1, why);
    if (pre) {
        size_t room = (size_t)5760 * c->channels; /* 120 ms, Opus's longest frame */
        rc = grow(&st->res, &st->res_cap, room);
        if (rc) return rc;
        while (pre > 0) {
            int li;
            uint64_t want = pre * c->channels;
            int r = op_read_float(st->of, st->res, (int)(want < room ? want : room), &li);
            if (r == 0) break;
            if (r < 0) return ogg_fail("Opus", "bad data", r, 1, why);
            pre -= (uint64_t)r;
        }
    }
    uint64_t have = 0;
    while (have < n) {
        int li;
        uint64_t room = (n - have) * c->channels;
        if (room > ((uint64_t)1 << 20)) room = (uint64_t)1 << 20;
        int r = op_read_float(st->of, dst + have * c->channels, (int)room, &li);
        if (r == 0) break;
        if (r < 0) return ogg_fail("Opus", "bad data", r, 1, why);
        have += (uint64_t)r;
    }
    *got = have;
    return 0;
}
#endif

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static int built(stk__fmt f) {
    switch (f) {
#ifdef STK_HAVE_FLAC
    case STK__FMT_FLAC: return 1;
#endif
#ifdef STK_HAVE_MPG123
    case STK__FMT_MP3: return 1;
#endif
#ifdef STK_HAVE_VORBIS
    case STK__FMT_VORBIS: return 1;
#endif
#ifdef STK_HAVE_OPUS
    case STK__FMT_OPUS: return 1;
#endif
    default: return 0;
    }
}

static int is_audio(stk__fmt f) {
    return f == STK__FMT_FLAC || f == STK__FMT_MP3 || f == STK__FMT_VORBIS ||
           f == STK__FMT_OPUS;
}

static int clip_open(audio_state *st, stk__fmt f, const uint8_t *src, size_t len, clip *c,
                     char *why) {
    st->mem.p = src;
    st->mem.len = len;
    st->mem.pos = 0;
    c->fmt = f;
    if (!is_audio(f)) {
        snprintf(why, STK__WHY, "not an audio format stoker decodes (%s)", stk__fmt_name(f));
        return STK_EMEDIA;
    }
    if (!built(f)) return no_decoder(f, why);
    switch (f) {
#ifdef STK_HAVE_FLAC
    case STK__FMT_FLAC: return flac_open(st, c, why);
#endif
#ifdef STK_HAVE_MPG123
    case STK__FMT_MP3: return mp3_open(st, c, why);
#endif
#ifdef STK_HAVE_VORBIS
    case STK__FMT_VORBIS: return vorbis_open(st, c, why);
#endif
#ifdef STK_HAVE_OPUS
    case STK__FMT_OPUS: return opus_open(st, c, why);
#endif
    default: return no_decoder(f, why);
    }
}

static void clip_close(audio_state *st, const clip *c) {
    STK__UNUSED(st);
    switch (c->fmt) {
#ifdef STK_HAVE_FLAC
    case STK__FMT_FLAC: flac_close(st); break;
#endif
#ifdef STK_HAVE_MPG123
    case STK__FMT_MP3: mp3_close(st); break;
#endif
#ifdef STK_HAVE_VORBIS
    case STK__FMT_VORBIS: vorbis_close(st); break;
#endif
#ifdef STK_HAVE_OPUS
    case STK__FMT_OPUS: opus_close(st); break;
#endif
    default: break;
    }
}

/* Decodes frames [start, start + n) of the clip into dst (the clip's
 * channels, interleaved); *got is short only where the clip ends. */
static int clip_read(audio_state *st, const clip *c, uint64_t start, float *dst, uint64_t n,
                     uint64_t *got, char *why) {
    STK__UNUSED(st), STK__UNUSED(start), STK__UNUSED(dst);
    *got = 0;
    if (n == 0) return 0;
    switch (c->fmt) {
#ifdef STK_HAVE_FLAC
    case STK__FMT_FLAC: return flac_read_frames(st, c, start, dst, n, got, why);
#endif
#ifdef STK_HAVE_MPG123
    case STK__FMT_MP3: return mp3_read_frames(st, c, start, dst, n, got, why);
#endif
#ifdef STK_HAVE_VORBIS
    case STK__FMT_VORBIS: return vorbis_read_frames(st, c, start, dst, n, got, why);
#endif
#ifdef STK_HAVE_OPUS
    case STK__FMT_OPUS: return opus_read_frames(st, c, start, dst, n, got, why);
#endif
    default: return no_decoder(c->fmt, why);
    }
}

/* Reads frames [start, start + n) of a clip whose header gives its length
 * (n within it) into st->src; a clip that ends before is truncated. */
static int read_known_into(audio_state *st, const clip *c, uint64_t start, uint64_t n,
                           float *dst, char *why) {
    uint64_t got;
    int rc = clip_read(st, c, start, dst, n, &got, why);
    if (rc) return rc;
    if (got < n) {
        snprintf(why, STK__WHY,
                 "%s: the clip ends after frame %llu of the %llu its header gives (truncated or "
                 "damaged)",
                 stk__fmt_name(c->fmt), (unsigned long long)(start + got),
                 (unsigned long long)c->frames);
        return STK_EMEDIA;
    }
    return 0;
}

/* The same into st->src. */
static int read_known(audio_state *st, const clip *c, uint64_t start, uint64_t n, char *why) {
    if (n > SIZE_MAX / sizeof(float) / c->channels) return -ENOMEM;
    int rc = grow(&st->src, &st->src_cap, (size_t)n * c->channels);
    if (rc) return rc;
    return read_known_into(st, c, start, n, st->src, why);
}

/* Counts the frames of a clip of unknown length (only a FLAC stream's
 * header can leave it out) by decoding it whole, keeping nothing (memory
 * stays a frame's, whatever the clip's length), into c->frames; then
 * rewinds, for the window to be decoded as any other clip's. */
static int read_all(audio_state *st, clip *c, char *why) {
#ifdef STK_HAVE_FLAC
    uint64_t got = 0;
    st->flac_grow = 1;
    int rc = flac_read_frames(st, c, 0, NULL, UINT64_MAX, &got, why);
    st->flac_grow = 0;
    if (rc) return rc;
    c->frames = got;
    st->flac_rewind = 1; /* (the next read seeks, to frame 0 too) */
    return 0;
#else
    (void)st;
    return no_decoder(c->fmt, why);
#endif
}

/* Mixes n frames of c->channels in st->src to `out` channels in place: the
 * mean when out is 1, else unchanged. */
static void mix(float *p, uint64_t n, uint32_t channels, uint32_t out) {
    if (out != 1 || channels == 1) return;
    for (uint64_t i = 0; i < n; i++) {
        const float *f = p + i * channels;
        float s = f[0];
        for (uint32_t k = 1; k < channels; k++) s += f[k];
        p[i] = s / (float)channels;
    }
}

static __attribute__((unused)) uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Frames of a clip of n frames at rate `in` resampled to `out`: what
 * libsoxr gives for the whole clip, n * out / in rounded to nearest. */
static uint64_t resampled_frames(uint64_t n, uint32_t in, uint32_t out) {
    return (uint64_t)(((unsigned __int128)n * out + in / 2) / in);
}

/* ------------------------------------------------------------------------ */
/* The window                                                               */
/* ------------------------------------------------------------------------ */

static int audio_state_get(stk__media_ctx *ctx, audio_state **out) {
    if (!ctx->audio) {
        ctx->audio = stk__calloc(1, sizeof(audio_state));
        if (!ctx->audio) return -ENOMEM;
    }
    *out = ctx->audio;
    return 0;
}

#ifdef STK_HAVE_SOXR
/* Resamples source frames [i0, i1) (already mixed, `ch` channels, in
 * st->src) whose first output frame is o0, into st->res, until `need`
 * output frames are there or the resampler is drained; *made gets the
 * count. */
static int resample(audio_state *st, uint32_t in, uint32_t out, uint32_t ch, uint64_t nin,
                    uint64_t need, uint64_t *made, char *why) {
    soxr_error_t e = NULL;
    if (!st->soxr || st->sx_in != in || st->sx_out != out || st->sx_ch != ch) {
        if (st->soxr) soxr_delete(st->soxr);
        soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        st->soxr = soxr_create(in, out, ch, &e, &io, &q, NULL);
        if (!st->soxr) {
            snprintf(why, STK__WHY, "resampling %u Hz to %u Hz: %s", in, out,
                     e ? e : "libsoxr failed");
            return -ENOMEM;
        }
        st->sx_in = in;
        st->sx_out = out;
        st->sx_ch = ch;
    } else {
        soxr_clear(st->soxr);
    }
    int rc = grow(&st->res, &st->res_cap, (size_t)need * ch);
    if (rc) return rc;
    uint64_t fed = 0, have = 0;
    int idle = 0;
    while (have < need) {
        size_t idone = 0, odone = 0;
        const float *ip = fed < nin ? st->src + fed * ch : NULL;
        e = soxr_process(st->soxr, ip, ip ? (size_t)(nin - fed) : 0, &idone, st->res + have * ch,
                         (size_t)(need - have), &odone);
        if (e) {
            snprintf(why, STK__WHY, "resampling %u Hz to %u Hz: %s", in, out, e);
            return STK_EMEDIA;
        }
        fed += idone;
        have += odone;
        if (!ip && odone == 0 && ++idle > 4) break; /* drained */
    }
    *made = have;
    return 0;
}
#endif

int stk__audio_probe(stk__fmt f, const uint8_t *src, size_t len, stk_media_info *out, char *why) {
    stk__media_ctx ctx = {0};
    audio_state *st;
    int rc = audio_state_get(&ctx, &st);
    if (rc) return rc;
    clip c = {0};
    rc = clip_open(st, f, src, len, &c, why);
    if (rc == 0) {
        out->media = STK_MEDIA_AUDIO;
        snprintf(out->format, sizeof out->format, "%s", stk__fmt_name(f));
        out->sample_rate = c.rate;
        out->channels = c.channels;
        out->frames = c.frames == UINT64_MAX ? 0 : c.frames;
    }
    clip_close(st, &c);
    stk__media_ctx_free(&ctx);
    return rc;
}

static int window(audio_state *st, const stk_decode *d, clip *c, uint64_t key, float *dst,
                  char *why) {
    uint32_t D = d->channels ? d->channels : 1;
    if (D != 1 && c->channels != D) {
        snprintf(why, STK__WHY, "the clip has %u channel%s, the decode asks for %u", c->channels,
                 c->channels == 1 ? "" : "s", D);
        return STK_EMEDIA;
    }
    uint32_t R = c->rate, O = d->sample_rate ? d->sample_rate : c->rate;
#ifndef STK_HAVE_SOXR
    if (O != R) {
        snprintf(why, STK__WHY, "this build of stoker has no resampler (the clip is %u Hz)", R);
        return STK_EUNSUPPORTED;
    }
#endif
    int rc;
    if (c->frames == UINT64_MAX && (rc = read_all(st, c, why))) return rc;
    uint64_t N = c->frames, W = d->samples;
    uint64_t T = O == R ? N : resampled_frames(N, R, O);
    uint64_t s = 0;
    if (d->random_offset && T > W) {
        s = (uint64_t)(stk__media_uniform(key, 0) * (double)(T - W + 1));
        if (s > T - W) s = T - W;
    }
    uint64_t e = T - s < W ? T : s + W; /* output frames [s, e) */
    uint64_t n = e - s;
    memset(dst + n * D, 0, (size_t)(W - n) * D * sizeof(float));
    if (n == 0) return 0;
    if (O == R) {
        /* Channels as the clip has them: decoded straight into the sample. */
        if (D == c->channels) return read_known_into(st, c, s, n, dst, why);
        rc = read_known(st, c, s, n, why);
        if (rc) return rc;
        mix(st->src, n, c->channels, D);
        memcpy(dst, st->src, (size_t)n * D * sizeof(float));
        return 0;
    }
#ifdef STK_HAVE_SOXR
    /* The input starts at a multiple of the rates' period P (input frames,
     * at most a second's worth) so that its output frames fall where the
     * whole clip's do: source frame k P is output frame k Q. */
    uint64_t g = gcd64(R, O), P = R / g, Q = O / g;
    uint64_t margin = STK__AUDIO_MARGIN * ((O + R - 1) / R);
    uint64_t k = s > margin ? (s - margin) / Q : 0;
    uint64_t i0 = k * P, o0 = k * Q;
    uint64_t i1 = (uint64_t)(((unsigned __int128)(e + margin) * R + O - 1) / O) + 1;
    if (i1 > N) i1 = N;
    rc = read_known(st, c, i0, i1 - i0, why);
    if (rc) return rc;
    uint32_t ch = D == 1 ? 1 : c->channels;
    mix(st->src, i1 - i0, c->channels, D);
    uint64_t made;
    rc = resample(st, R, O, ch, i1 - i0, e - o0, &made, why);
    if (rc) return rc;
    /* The whole clip's resampled length is T; the resampler's own count
     * may differ from it by a frame at the end: zeros there. */
    uint64_t from = s - o0;
    uint64_t avail = made > from ? made - from : 0;
    if (avail > n) avail = n;
    memcpy(dst, st->res + from * ch, (size_t)avail * ch * sizeof(float));
    memset(dst + avail * ch, 0, (size_t)(n - avail) * ch * sizeof(float));
    return 0;
#else
    return STK_EUNSUPPORTED;
#endif
}

int stk__audio_decode(stk__media_ctx *ctx, const stk_decode *d, stk__fmt f, const uint8_t *src,
                      size_t len, uint64_t key, float *dst, char *why) {
    audio_state *st;
    int rc = audio_state_get(ctx, &st);
    if (rc) return rc;
    clip c = {0};
    rc = clip_open(st, f, src, len, &c, why);
    if (rc == 0) rc = window(st, d, &c, key, dst, why);
    clip_close(st, &c);
    return rc;
}

void stk__audio_ctx_free(void *audio) {
    audio_state *st = audio;
    if (!st) return;
#ifdef STK_HAVE_FLAC
    if (st->flac) {
        flac_close(st);
        FLAC__stream_decoder_delete(st->flac);
    }
#endif
#ifdef STK_HAVE_MPG123
    if (st->mh) {
        mp3_close(st);
        mpg123_delete(st->mh);
    }
#endif
#ifdef STK_HAVE_VORBIS
    vorbis_close(st);
#endif
#ifdef STK_HAVE_OPUS
    opus_close(st);
#endif
#ifdef STK_HAVE_SOXR
    if (st->soxr) soxr_delete(st->soxr);
#endif
    stk__free(st->src);
    stk__free(st->res);
    stk__free(st);
}

const char *stk__audio_formats(void) {
    /* Each name after a comma; the first comma skipped. */
    static const char list[] = ","
#ifdef STK_HAVE_FLAC
                               ",flac"
#endif
#ifdef STK_HAVE_MPG123
                               ",mp3"
#endif
#ifdef STK_HAVE_VORBIS
                               ",vorbis"
#endif
#ifdef STK_HAVE_OPUS
                               ",opus"
#endif
        ;
    return sizeof list > 2 ? list + 2 : "";
}
