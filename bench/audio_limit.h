/*
 * audio_limit.h: what bench/flac_limit.c and bench/mp3_limit.c share: the
 * clips held in memory, the pass counters, the command line and the timed
 * passes (limit_main).  Each program brings its decoder and its worker.
 */
#ifndef STK_BENCH_AUDIO_LIMIT_H
#define STK_BENCH_AUDIO_LIMIT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_time.h"

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

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
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

/* The program's main: NAME THREADS PASSES LISTFILE [WINDOW], each pass the
 * threads running `worker` over the clips (see the programs). */
static int limit_main(int argc, char **argv, const char *name, void *(*worker)(void *)) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s THREADS PASSES LISTFILE [WINDOW]\n", name);
        return 1;
    }
    int threads = atoi(argv[1]), passes = atoi(argv[2]);
    long long window = argc == 5 ? atoll(argv[4]) : 0;
    FILE *list = fopen(argv[3], "r");
    if (threads < 1 || threads > 1024 || passes < 1 || passes > 1000 || window < 0 || !list) {
        fprintf(stderr, "%s: bad arguments (threads %d, passes %d, list %s)\n", name, threads,
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
            fprintf(stderr, "%s: %s: %s\n", name, line, strerror(-rc));
            return 2;
        }
        w.n++;
    }
    fclose(list);
    if (!w.n) {
        fprintf(stderr, "%s: no files in %s\n", name, argv[3]);
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
    qsort(rate, (size_t)passes, sizeof *rate, cmp_d);
    qsort(secs, (size_t)passes, sizeof *secs, cmp_d);
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

#endif
