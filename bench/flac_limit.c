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
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <FLAC/stream_decoder.h>

typedef struct {
    char *path;
    unsigned char *data;
    size_t len;
} clip;

typedef struct {
    clip *clips;
    size_t n;
    uint64_t window;
    unsigned pass;
    atomic_size_t next;
    atomic_ullong frames;  /* frames decoded in this pass, all threads */
    atomic_ullong rate_fs; /* sum over files of frames / sample rate, in microseconds */
    atomic_int failed;
} work;

/* The memory the decoder reads, and what it has decoded of the file. */
typedef struct {
    const unsigned char *data;
    size_t len, pos;
    uint64_t total, decoded, want;
    unsigned rate;
    int error;
} source;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

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

static int read_file(const char *path, clip *c) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -EIO;
    }
    long len = ftell(f);
    rewind(f);
    c->data = malloc(len > 0 ? (size_t)len : 1);
    c->len = len > 0 ? (size_t)len : 0;
    int rc = c->data && fread(c->data, 1, c->len, f) == c->len ? 0 : -EIO;
    fclose(f);
    return rc;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: flac_limit THREADS PASSES LISTFILE [WINDOW]\n");
        return 1;
    }
    int threads = atoi(argv[1]), passes = atoi(argv[2]);
    long long window = argc == 5 ? atoll(argv[4]) : 0;
    FILE *list = fopen(argv[3], "r");
    if (threads < 1 || threads > 1024 || passes < 1 || passes > 1000 || window < 0 || !list) {
        fprintf(stderr, "flac_limit: bad arguments (threads %d, passes %d, list %s)\n", threads,
                passes, argv[3]);
        return 1;
    }
    work w = {0};
    w.window = (uint64_t)window;
    size_t cap = 0;
    char line[4096];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0])
            continue;
        if (w.n == cap) {
            cap = cap ? 2 * cap : 1024;
            w.clips = realloc(w.clips, cap * sizeof *w.clips);
            if (!w.clips)
                return 2;
        }
        clip *c = &w.clips[w.n];
        c->path = strdup(line);
        int rc = read_file(line, c);
        if (rc != 0) {
            fprintf(stderr, "flac_limit: %s: %s\n", line, strerror(-rc));
            return 2;
        }
        w.n++;
    }
    fclose(list);
    if (!w.n) {
        fprintf(stderr, "flac_limit: no files in %s\n", argv[3]);
        return 2;
    }
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double *rate = calloc((size_t)passes, sizeof *rate);
    double *secs = calloc((size_t)passes, sizeof *secs);
    double audio = 0, cpu0 = 0;
    if (!tid || !rate || !secs)
        return 2;
    for (int p = -1; p < passes; p++) {
        atomic_store(&w.next, 0);
        atomic_store(&w.frames, 0);
        atomic_store(&w.rate_fs, 0);
        w.pass = (unsigned)(p + 1);
        if (p == 0)
            cpu0 = cpu_seconds();
        double t0 = now();
        for (int t = 0; t < threads; t++)
            if (pthread_create(&tid[t], NULL, worker, &w) != 0)
                return 2;
        for (int t = 0; t < threads; t++)
            pthread_join(tid[t], NULL);
        double dt = now() - t0;
        if (atomic_load(&w.failed))
            return 2;
        if (p >= 0) {
            audio = (double)atomic_load(&w.rate_fs) * 1e-6;
            rate[p] = (double)w.n / dt;
            secs[p] = audio / dt;
        }
    }
    double cpu_ms = (cpu_seconds() - cpu0) * 1e3 / ((double)passes * (double)w.n);
    qsort(rate, (size_t)passes, sizeof *rate, cmp_double);
    qsort(secs, (size_t)passes, sizeof *secs, cmp_double);
    printf("limit %.1f %.1f %zu %.1f %.4f\n", rate[passes / 2], secs[passes / 2], w.n, audio,
           cpu_ms);
    for (size_t i = 0; i < w.n; i++) {
        free(w.clips[i].path);
        free(w.clips[i].data);
    }
    free(w.clips);
    free(tid);
    free(rate);
    free(secs);
    return 0;
}
