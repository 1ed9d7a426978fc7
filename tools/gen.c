/*
 * stoker-gen: deterministic synthetic data for the demo and the benchmarks.
 * Nothing is downloaded; the same arguments always give the same bytes.
 *
 *   stoker-gen series DIR [--entities N] [--min-rows R] [--max-rows R]
 *                         [--features F] [--seed S]
 *       one .npy file per entity: float32 [rows, features], a daily series
 *       with a yearly cycle and noise, like a basin's forcings and discharge.
 *   stoker-gen blobs DIR [--count N] [--bytes B] [--seed S]
 *       N .npy files of B bytes of float32 data each.
 *   stoker-gen events DATASET [--count N] [--min-rows R] [--max-rows R]
 *                             [--features F] [--seed S]
 *       a stoker dataset, written directly, of N variable-length events:
 *       float32 [rows, F] with rows uniform in [min, max].
 */
#include "stoker.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t rng_state;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }

/* Writes an .npy v1.0 header for a C-order float32 array. */
static int write_header(FILE *f, const uint64_t *shape, int ndim) {
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int d = 0; d < ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu,%s", (unsigned long long)shape[d],
                      d + 1 < ndim ? " " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    uint8_t hl[2] = {(uint8_t)(hlen & 0xff), (uint8_t)(hlen >> 8)};
    fwrite(hl, 1, 2, f);
    fwrite(dict, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

static uint64_t arg_u64(int argc, char **argv, const char *name, uint64_t def) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return strtoull(argv[i + 1], NULL, 10);
    return def;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: stoker-gen series|blobs DIR [options]\n");
        return 2;
    }
    const char *kind = argv[1], *dir = argv[2];
    rng_state = arg_u64(argc, argv, "--seed", 1);
    if (strcmp(kind, "events") && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return 2;
    }
    char path[4096];
    uint64_t total = 0, files = 0;
    if (!strcmp(kind, "series")) {
        uint64_t n = arg_u64(argc, argv, "--entities", 3000);
        uint64_t lo = arg_u64(argc, argv, "--min-rows", 3650);
        uint64_t hi = arg_u64(argc, argv, "--max-rows", 10950);
        uint64_t nf = arg_u64(argc, argv, "--features", 16);
        if (hi < lo) hi = lo;
        float *row = malloc(nf * sizeof *row);
        for (uint64_t e = 0; e < n; e++) {
            uint64_t rows = lo + next_u64() % (hi - lo + 1);
            double phase = uniform() * 6.283, level = 1 + uniform() * 4;
            snprintf(path, sizeof path, "%s/basin_%06llu.npy", dir, (unsigned long long)e);
            FILE *f = fopen(path, "wb");
            if (!f) {
                perror(path);
                return 2;
            }
            uint64_t shape[2] = {rows, nf};
            write_header(f, shape, 2);
            for (uint64_t t = 0; t < rows; t++) {
                double season = sin(6.283 * (double)t / 365.25 + phase);
                for (uint64_t k = 0; k < nf; k++)
                    row[k] = (float)(level * (1 + 0.5 * season * (double)(k + 1) / (double)nf) +
                                     0.2 * (uniform() - 0.5));
                fwrite(row, sizeof *row, nf, f);
            }
            if (fclose(f) != 0) {
                perror(path);
                return 2;
            }
            total += rows * nf * 4;
            files++;
        }
        free(row);
    } else if (!strcmp(kind, "blobs")) {
        uint64_t n = arg_u64(argc, argv, "--count", 10000);
        uint64_t bytes = arg_u64(argc, argv, "--bytes", 262144);
        uint64_t count = bytes / 4;
        float *data = malloc(count * sizeof *data);
        for (uint64_t e = 0; e < n; e++) {
            for (uint64_t k = 0; k < count; k++) data[k] = (float)uniform();
            snprintf(path, sizeof path, "%s/blob_%06llu.npy", dir, (unsigned long long)e);
            FILE *f = fopen(path, "wb");
            if (!f) {
                perror(path);
                return 2;
            }
            uint64_t shape[1] = {count};
            write_header(f, shape, 1);
            fwrite(data, sizeof *data, count, f);
            if (fclose(f) != 0) {
                perror(path);
                return 2;
            }
            total += count * 4;
            files++;
        }
        free(data);
    } else if (!strcmp(kind, "events")) {
        uint64_t n = arg_u64(argc, argv, "--count", 300000);
        uint64_t lo = arg_u64(argc, argv, "--min-rows", 10);
        uint64_t hi = arg_u64(argc, argv, "--max-rows", 190);
        uint64_t nf = arg_u64(argc, argv, "--features", 6);
        stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, (int64_t)nf}};
        stk_writer_options wo;
        stk_writer_options_init(&wo);
        wo.overwrite = 1;
        wo.sync = 0;
        stk_writer *w = NULL;
        stk_error err;
        if (stk_writer_create(dir, &f, 1, &wo, &w, &err)) {
            fprintf(stderr, "stoker-gen: %s\n", err.message);
            return 2;
        }
        float *rows = malloc(hi * nf * sizeof *rows);
        for (uint64_t e = 0; e < n; e++) {
            uint64_t r = lo + next_u64() % (hi - lo + 1);
            for (uint64_t k = 0; k < r * nf; k++) rows[k] = (float)uniform();
            stk_value v = {rows, r};
            if (stk_writer_append(w, &v, &err)) {
                fprintf(stderr, "stoker-gen: %s\n", err.message);
                return 2;
            }
            total += r * nf * 4;
            files++;
        }
        if (stk_writer_finish(w, &err)) {
            fprintf(stderr, "stoker-gen: %s\n", err.message);
            return 2;
        }
        stk_writer_free(w);
        free(rows);
    } else {
        fprintf(stderr, "stoker-gen: unknown kind '%s'\n", kind);
        return 2;
    }
    printf("wrote %llu files, %.1f MiB of data, into %s\n", (unsigned long long)files,
           (double)total / 1048576.0, dir);
    return 0;
}
