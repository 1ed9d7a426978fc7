/*
 * stoker-limits: the hardware's limits, measured the way the benchmarks
 * compare against them.
 *
 *   stoker-limits memcpy [MiB] [reps]      single-thread memcpy bandwidth
 *   stoker-limits memcpy-all [MiB]         memcpy on every CPU at once, together
 *   stoker-limits pageread FILE...         read(2) of cached files, 1 MiB reads
 *   stoker-limits seqread FILE...          O_DIRECT sequential reads: the best of several
 *                                          request sizes and depths (4 MiB x 4 ... 256 KiB
 *                                          x 64), each over the files' first 256 MiB
 *   stoker-limits randread SIZE N FILE...  O_DIRECT random reads of SIZE bytes (aligned
 *                                          4 KiB spans): the best of 32, 64 and 128 in
 *                                          flight, N reads each
 *
 * Each prints one line: "<what> <GB/s> <ops/s>", then, for the two read
 * measurements, the depth and request size that gave it: the limit a
 * loader is held to is the strongest the device gives, not one setting's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"

static int do_memcpy(size_t mib, int reps) {
    size_t n = mib << 20;
    char *a = aligned_alloc(4096, n), *b = aligned_alloc(4096, n);
    if (!a || !b) return 2;
    memset(a, 1, n);
    memset(b, 2, n);
    double *t = calloc((size_t)reps, sizeof *t);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        memcpy(b, a, n);
        t[r] = now() - t0;
        a[r % n] = b[(r * 7) % n]; /* keep the copies observable */
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double med = t[reps / 2];
    printf("memcpy %.3f %.0f\n", (double)n / med / 1e9, 1 / med);
    return 0;
}

/* Every CPU copying its own buffers at once, for 2 s: what the memory
 * system gives a loader whose threads all copy (on a small machine one
 * thread can take most of it). */
typedef struct copier {
    size_t n;
    volatile const int *stop;
    uint64_t bytes;
} copier;

static void *copy_loop(void *arg) {
    copier *c = arg;
    char *a = aligned_alloc(4096, c->n), *b = aligned_alloc(4096, c->n);
    if (!a || !b) return NULL;
    memset(a, 1, c->n);
    memset(b, 2, c->n);
    while (!*c->stop) {
        memcpy(b, a, c->n);
        a[c->bytes % c->n] = b[(c->bytes / 7) % c->n];
        c->bytes += c->n;
    }
    free(a);
    free(b);
    return NULL;
}

static int do_memcpy_all(size_t mib) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    if (ncpu > 256) ncpu = 256;
    copier c[256];
    pthread_t t[256];
    volatile int stop = 0;
    for (long i = 0; i < ncpu; i++) {
        c[i] = (copier){mib << 20, &stop, 0};
        pthread_create(&t[i], NULL, copy_loop, &c[i]);
    }
    /* Let every thread fill its buffers, then count 2 s of copies. */
    struct timespec warm = {0, 300000000}, run = {2, 0};
    nanosleep(&warm, NULL);
    uint64_t b0 = 0, b1 = 0;
    for (long i = 0; i < ncpu; i++) b0 += c[i].bytes;
    double t0 = now();
    nanosleep(&run, NULL);
    for (long i = 0; i < ncpu; i++) b1 += c[i].bytes;
    double el = now() - t0;
    stop = 1;
    for (long i = 0; i < ncpu; i++) pthread_join(t[i], NULL);
    printf("memcpy-all %.3f %ld\n", (double)(b1 - b0) / el / 1e9, ncpu);
    return 0;
}

static int do_pageread(int nf, char **files) {
    size_t bs = 1 << 20;
    char *buf = malloc(bs);
    uint64_t total = 0;
    double t0 = now();
    for (int i = 0; i < nf; i++) {
        int fd = open(files[i], O_RDONLY);
        if (fd < 0) return perror(files[i]), 2;
        ssize_t r;
        while ((r = read(fd, buf, bs)) > 0) total += (uint64_t)r;
        close(fd);
    }
    double el = now() - t0;
    printf("pageread %.3f %.0f\n", (double)total / el / 1e9, (double)total / (double)bs / el);
    return 0;
}

/* Waits for at least one completion and takes all that are there: adds
 * their bytes to *total and returns how many, or -1 on a failed read. */
static int reap(struct io_uring *ring, uint64_t *total) {
    io_uring_submit_and_wait(ring, 1);
    struct io_uring_cqe *cqe;
    int n = 0;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
        if (cqe->res < 0) {
            fprintf(stderr, "read: %s\n", strerror(-cqe->res));
            return -1;
        }
        *total += (uint64_t)cqe->res;
        n++;
        io_uring_cqe_seen(ring, cqe);
    }
    return n;
}

/* One sequential pass: `qd` reads of `bs` bytes in flight, through the files
 * in order, stopping after `cap` bytes; returns GB/s (ops/s in *ops). */
static double seq_pass(int nf, char **files, unsigned qd, size_t bs, uint64_t cap, double *ops_s) {
    struct io_uring ring;
    if (io_uring_queue_init(qd, &ring, 0)) return -1;
    char *buf = aligned_alloc(4096, bs * qd);
    uint64_t total = 0, ops = 0;
    double t0 = now();
    for (int i = 0; i < nf && total < cap; i++) {
        int fd = open(files[i], O_RDONLY | O_DIRECT);
        if (fd < 0) return perror(files[i]), -1;
        struct stat st;
        fstat(fd, &st);
        uint64_t size = (uint64_t)st.st_size, off = 0;
        unsigned inflight = 0;
        while ((off < size && total + (uint64_t)inflight * bs < cap) || inflight) {
            while (inflight < qd && off < size && total + (uint64_t)inflight * bs < cap) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                io_uring_prep_read(sqe, fd, buf + (off / bs % qd) * bs, (unsigned)bs, off);
                off += bs;
                inflight++;
            }
            int got = reap(&ring, &total);
            if (got < 0) return -1;
            ops += (uint64_t)got;
            inflight -= (unsigned)got;
        }
        close(fd);
    }
    double el = now() - t0;
    io_uring_queue_exit(&ring);
    free(buf);
    *ops_s = (double)ops / el;
    return (double)total / el / 1e9;
}

static int do_seqread(int nf, char **files) {
    static const struct { unsigned qd; size_t bs; } cfg[] = {
        {4, 4 << 20}, {8, 4 << 20}, {16, 1 << 20}, {32, 1 << 20}, {64, 256 << 10}};
    double best = 0, best_ops = 0;
    unsigned bq = 0;
    size_t bb = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        double ops, gb = seq_pass(nf, files, cfg[c].qd, cfg[c].bs, 256ull << 20, &ops);
        if (gb < 0) return 2;
        if (gb > best) best = gb, best_ops = ops, bq = cfg[c].qd, bb = cfg[c].bs;
    }
    printf("seqread %.3f %.0f %u %zu\n", best, best_ops, bq, bb);
    return 0;
}

static double rand_pass(size_t size, long count, unsigned qd, int nf, int *fds,
                        uint64_t *sizes, double *ops_s) {
    size_t span = (size + 4095) & ~(size_t)4095;
    struct io_uring ring;
    if (io_uring_queue_init(qd, &ring, 0)) return -1;
    char *buf = aligned_alloc(4096, span * qd);
    uint64_t x = 88172645463325252ull, total = 0;
    long issued = 0, done = 0;
    unsigned inflight = 0;
    double t0 = now();
    while (done < count) {
        while (inflight < qd && issued < count) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int f = (int)(x % (uint64_t)nf);
            uint64_t slots = sizes[f] > span ? (sizes[f] - span) / 4096 : 0;
            uint64_t off = slots ? (x >> 20) % slots * 4096 : 0;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            io_uring_prep_read(sqe, fds[f], buf + (issued % qd) * span, (unsigned)span, off);
            issued++;
            inflight++;
        }
        int got = reap(&ring, &total);
        if (got < 0) return -1;
        done += got;
        inflight -= (unsigned)got;
    }
    double el = now() - t0;
    io_uring_queue_exit(&ring);
    free(buf);
    *ops_s = (double)done / el;
    return (double)total / el / 1e9;
}

static int do_randread(size_t size, long count, int nf, char **files) {
    int *fds = calloc((size_t)nf, sizeof *fds);
    uint64_t *sizes = calloc((size_t)nf, sizeof *sizes);
    for (int i = 0; i < nf; i++) {
        fds[i] = open(files[i], O_RDONLY | O_DIRECT);
        if (fds[i] < 0) return perror(files[i]), 2;
        struct stat st;
        fstat(fds[i], &st);
        sizes[i] = (uint64_t)st.st_size;
    }
    static const unsigned depths[] = {32, 64, 128};
    double best = 0, best_ops = 0;
    unsigned bq = 0;
    for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
        double ops, gb = rand_pass(size, count, depths[d], nf, fds, sizes, &ops);
        if (gb < 0) return 2;
        if (ops > best_ops) best = gb, best_ops = ops, bq = depths[d];
    }
    printf("randread %.3f %.0f %u %zu\n", best, best_ops, bq, (size + 4095) & ~(size_t)4095);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: stoker-limits memcpy|memcpy-all|pageread|seqread|randread ...\n");
        return 2;
    }
    if (!strcmp(argv[1], "memcpy"))
        return do_memcpy(argc > 2 ? (size_t)atol(argv[2]) : 256, argc > 3 ? atoi(argv[3]) : 9);
    if (!strcmp(argv[1], "memcpy-all"))
        return do_memcpy_all(argc > 2 ? (size_t)atol(argv[2]) : 256);
    if (!strcmp(argv[1], "pageread")) return do_pageread(argc - 2, argv + 2);
    if (!strcmp(argv[1], "seqread")) return do_seqread(argc - 2, argv + 2);
    if (!strcmp(argv[1], "randread") && argc > 4)
        return do_randread((size_t)atol(argv[2]), atol(argv[3]), argc - 4, argv + 4);
    fprintf(stderr, "stoker-limits: bad arguments\n");
    return 2;
}
