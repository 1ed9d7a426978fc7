/*
 * stoker-gather-limit: the limit of the small-record gather's access
 * pattern, measured without the loader around it.
 *
 *   stoker-gather-limit FILE RECORDS SIZE [REPS]
 *
 * Records of SIZE bytes lie one after another in FILE from byte 4096 on
 * (a version 2 shard of one field whose size is a multiple of the
 * alignment: its data region).  The file is mapped as the loader maps
 * shards (read-only, MADV_HUGEPAGE) and read once first, so that it is in
 * the page cache.  Then, on one thread, batches of 1024 records in a random
 * permutation are copied into a batch buffer, with the loader's prefetching
 * (each record's lines 8 records ahead, its index entry 16 ahead), five
 * ways:
 *
 *   v1          each record located through a version 1 index entry
 *               (checksum, offset, size, rows: 32 bytes) held in memory
 *   v1+check    and its copy hashed (XXH3, the loader's stk__hash) and
 *               compared with the entry's checksum
 *   v2          located by arithmetic, no entry read
 *   v2+check    and checked against a dense array of checksums
 *   v2+after    the batch copied whole first, then each copy hashed
 *
 * and, as the cost of the hash alone, XXH3 of one SIZE-byte record from
 * L1.  Prints ns per record for each, the median of REPS passes (default
 * 5) in alternating order.  The loader's own rate per worker thread
 * (stoker read --threads 1) against these says what the rest of the loader
 * costs.
 */
#define _GNU_SOURCE
#include "core/hash.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"

#define BATCH 1024
#define AHEAD 8
#define AHEAD_E 16

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct run {
    const uint8_t *map; /* the file */
    uint64_t n, size;
    const uint64_t *index; /* v1: 4 words a record */
    const uint64_t *sums;  /* v2: one word a record */
    const uint32_t *perm;
    uint8_t *dst;
} run;

static inline void prefetch_lines(const uint8_t *p, uint64_t n) {
    for (uint64_t k = 0; k < n && k < 1024; k += 64) __builtin_prefetch(p + k);
}

/* One pass over every record; returns the number of mismatches (0).
 * check 2: the batch is copied whole first, then each copy hashed. */
static uint64_t pass(const run *r, int v2, int check) {
    uint64_t bad = 0;
    const uint64_t *ent[BATCH];
    for (uint64_t b0 = 0; b0 + BATCH <= r->n; b0 += BATCH) {
        const uint32_t *ids = r->perm + b0;
        if (!v2) {
            for (uint32_t j = 0; j < BATCH; j++) ent[j] = r->index + 4 * (uint64_t)ids[j];
            for (uint32_t j = 0; j < AHEAD_E; j++) __builtin_prefetch(ent[j]);
        }
        for (uint32_t j = 0; j < BATCH; j++) {
            uint8_t *to = r->dst + (uint64_t)j * r->size;
            if (!v2) {
                if (j + AHEAD_E < BATCH) __builtin_prefetch(ent[j + AHEAD_E]);
                if (j + AHEAD < BATCH) prefetch_lines(r->map + ent[j + AHEAD][1], ent[j + AHEAD][2]);
                const uint64_t *e = ent[j];
                memcpy(to, r->map + e[1], (size_t)e[2]);
                if (check && stk__hash(to, (size_t)e[2]) != e[0]) bad++;
            } else {
                if (check && j + AHEAD_E < BATCH) __builtin_prefetch(r->sums + ids[j + AHEAD_E]);
                if (j + AHEAD < BATCH)
                    prefetch_lines(r->map + 4096 + (uint64_t)ids[j + AHEAD] * r->size, r->size);
                memcpy(to, r->map + 4096 + (uint64_t)ids[j] * r->size, (size_t)r->size);
                if (check == 1 && stk__hash(to, (size_t)r->size) != r->sums[ids[j]]) bad++;
            }
        }
        for (uint32_t j = 0; check == 2 && j < BATCH; j++)
            if (stk__hash(r->dst + (uint64_t)j * r->size, (size_t)r->size) != r->sums[ids[j]])
                bad++;
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: stoker-gather-limit FILE RECORDS SIZE [REPS]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10), size = strtoull(argv[3], NULL, 10);
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    n -= n % BATCH;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || n == 0 || size == 0 || reps < 1 ||
        (uint64_t)st.st_size < 4096 + n * size) {
        fprintf(stderr, "stoker-gather-limit: %s: cannot map %llu records of %llu bytes\n",
                argv[1], (unsigned long long)n, (unsigned long long)size);
        return 2;
    }
    size_t len = (size_t)(4096 + n * size);
    const uint8_t *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 2;
    madvise((void *)map, len, MADV_HUGEPAGE);
    uint64_t *index = malloc(n * 32), *sums = malloc(n * 8);
    uint32_t *perm = malloc(n * 4);
    uint8_t *dst = aligned_alloc(4096, (size_t)(BATCH * size + 4095) / 4096 * 4096);
    if (!index || !sums || !perm || !dst) return 2;
    for (uint64_t r = 0; r < n; r++) { /* reads the file once: in the page cache */
        uint64_t h = stk__hash(map + 4096 + r * size, (size_t)size);
        index[4 * r] = sums[r] = h;
        index[4 * r + 1] = 4096 + r * size;
        index[4 * r + 2] = size;
        index[4 * r + 3] = 1;
    }
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = next_rand() % (i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    run r = {map, n, size, index, sums, perm, dst};
    const char *names[5] = {"v1", "v1+check", "v2", "v2+check", "v2+after"};
    double *t = calloc((size_t)(5 * reps), sizeof *t);
    uint64_t bad = 0;
    for (int k = 0; k < reps; k++)
        for (int m0 = 0; m0 < 5; m0++) {
            int m = (m0 + k) % 5; /* rotating order */
            double t0 = now();
            bad += pass(&r, m >= 2, m == 4 ? 2 : m & 1);
            t[m * reps + k] = (now() - t0) / (double)n * 1e9;
        }
    for (int m = 0; m < 5; m++) {
        qsort(t + m * reps, (size_t)reps, sizeof *t, cmp_d);
        printf("%-9s %7.1f ns/record\n", names[m], t[m * reps + reps / 2]);
    }
    /* The hash alone, from L1. */
    uint64_t acc = 0;
    double t0 = now();
    for (int i = 0; i < 1000000; i++) acc += stk__hash(dst + (uint64_t)(i & 7) * 64, (size_t)size);
    printf("%-9s %7.1f ns/record (XXH3 of %llu bytes from L1)\n", "hash", (now() - t0) * 1e3,
           (unsigned long long)size);
    if (bad || acc == 42) fprintf(stderr, "stoker-gather-limit: %llu mismatches\n",
                                  (unsigned long long)bad);
    return bad ? 1 : 0;
}
