/*
 * test_loader_common.h: what the loader tests share (header only; each
 * test_loader_*.c program includes it once).
 *
 * A test dataset ("tds") is written from deterministic bytes that the test
 * keeps in memory, so that every batch is checked against what was written
 * rather than against the library's own reader.  The kinds:
 *
 *   TDS_RECORDS  fixed shapes: x f32[4,3], id i64 scalar (= the record id),
 *                z u8[40] zstd-compressed;
 *   TDS_WINDOWS  time series of 0..40 rows: ts f32[*,3] and aux i16[*]
 *                (same rows), plus per-record static i32[2] and meta
 *                u8[2,8] zstd; windows of L rows at stride S;
 *   TDS_RAGGED   records with ragged fields: seq u16[*,2] (0..20 rows),
 *                lab i32 scalar, zr u8[*] zstd (0..30 rows);
 *   TDS_PLAIN    every field stored plain, so whole records are gathered
 *                from the mapping: x u8[16004], seq u16[*,2] (0..20 rows),
 *                id i64 scalar (= the record id); large enough that a
 *                dataset's shard data is more than opening it reads;
 *   TDS_FIXED    small records of fixed, plain fields (what a mixture
 *                draws jointly): x u8[300] (over 240 bytes: hashed with
 *                the vector code), y f32[3], id i64 scalar (= the record id);
 *   TDS_ONE      one field a record, x f32[128]: 512 bytes, whole records
 *                of one field (checked from their copies in the batch).
 *
 * Shards are small (16 KiB of data) so that every dataset has several.
 */
#ifndef STK_TEST_LOADER_COMMON_H
#define STK_TEST_LOADER_COMMON_H

#include "util.h"

#include "sample/sample.h"

#include <math.h>
#include <signal.h>
#include <unistd.h>

#define TDS_MAXF 6

typedef enum { TDS_RECORDS, TDS_WINDOWS, TDS_RAGGED, TDS_PLAIN, TDS_FIXED, TDS_ONE } tds_kind;

typedef struct tds {
    tds_kind kind;
    char dir[4096];
    uint64_t nrec;
    stk_field f[TDS_MAXF];
    size_t nf;
    uint64_t rowb[TDS_MAXF]; /* bytes per row of each field */
    uint64_t *rows[TDS_MAXF]; /* rows[f][r] */
    uint8_t **data[TDS_MAXF]; /* data[f][r]: the raw (decoded) bytes */
    /* Window mode: the sample space, brute force. */
    uint64_t L, S;
    uint64_t n;               /* samples */
    uint64_t *srec, *st;      /* sample -> (record, first row) */
} tds;

static inline const char *tds_kind_name(tds_kind k) {
    return k == TDS_RECORDS   ? "records"
           : k == TDS_WINDOWS ? "windows"
           : k == TDS_RAGGED  ? "ragged"
           : k == TDS_PLAIN   ? "plain"
           : k == TDS_FIXED   ? "fixed"
                              : "one";
}

static inline uint64_t tds_row_bytes(const stk_field *f) {
    uint64_t n = stk_dtype_size(f->dtype);
    for (int k = 1; k < f->ndim; k++) n *= (uint64_t)f->shape[k];
    return n;
}

static inline int tds_field(const tds *d, const char *name) {
    for (size_t i = 0; i < d->nf; i++)
        if (strcmp(d->f[i].name, name) == 0) return (int)i;
    return -1;
}

/* Rows of ragged field `fi` of record r, per dataset kind. */
static inline uint64_t tds_ragged_rows(tds_kind kind, size_t fi, uint64_t r) {
    if (kind == TDS_WINDOWS) return r % 13 == 0 ? 0 : (r * 7 + 3) % 41; /* ts and aux alike */
    if (fi == 0 || kind == TDS_PLAIN) return (r * 5 + 1) % 21;
    return (r * 3) % 31;
}

/* Fills the in-memory contents of a dataset of `kind` with `nrec` records. */
static inline void tds_init(tds *d, tds_kind kind, uint64_t nrec) {
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->nrec = nrec;
    if (kind == TDS_RECORDS) {
        d->f[0] = (stk_field){.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {4, 3}};
        d->f[1] = (stk_field){.name = "id", .dtype = STK_I64, .ndim = 0};
        d->f[2] = (stk_field){.name = "z", .dtype = STK_U8, .ndim = 1, .shape = {40},
                              .codec = STK_CODEC_ZSTD};
        d->nf = 3;
    } else if (kind == TDS_WINDOWS) {
        d->f[0] = (stk_field){.name = "ts", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 3}};
        d->f[1] = (stk_field){.name = "aux", .dtype = STK_I16, .ndim = 1, .shape = {STK_RAGGED}};
        d->f[2] = (stk_field){.name = "static", .dtype = STK_I32, .ndim = 1, .shape = {2}};
        d->f[3] = (stk_field){.name = "meta", .dtype = STK_U8, .ndim = 2, .shape = {2, 8},
                              .codec = STK_CODEC_ZSTD};
        d->nf = 4;
    } else if (kind == TDS_PLAIN) {
        d->f[0] = (stk_field){.name = "x", .dtype = STK_U8, .ndim = 1, .shape = {16004}};
        d->f[1] = (stk_field){.name = "seq", .dtype = STK_U16, .ndim = 2, .shape = {STK_RAGGED, 2}};
        d->f[2] = (stk_field){.name = "id", .dtype = STK_I64, .ndim = 0};
        d->nf = 3;
    } else if (kind == TDS_FIXED) {
        d->f[0] = (stk_field){.name = "x", .dtype = STK_U8, .ndim = 1, .shape = {300}};
        d->f[1] = (stk_field){.name = "y", .dtype = STK_F32, .ndim = 1, .shape = {3}};
        d->f[2] = (stk_field){.name = "id", .dtype = STK_I64, .ndim = 0};
        d->nf = 3;
    } else if (kind == TDS_ONE) {
        d->f[0] = (stk_field){.name = "x", .dtype = STK_F32, .ndim = 1, .shape = {128}};
        d->nf = 1;
    } else {
        d->f[0] = (stk_field){.name = "seq", .dtype = STK_U16, .ndim = 2, .shape = {STK_RAGGED, 2}};
        d->f[1] = (stk_field){.name = "lab", .dtype = STK_I32, .ndim = 0};
        d->f[2] = (stk_field){.name = "zr", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED},
                              .codec = STK_CODEC_ZSTD};
        d->nf = 3;
    }
    for (size_t i = 0; i < d->nf; i++) {
        const stk_field *f = &d->f[i];
        d->rowb[i] = tds_row_bytes(f);
        d->rows[i] = calloc(nrec ? nrec : 1, sizeof(uint64_t));
        d->data[i] = calloc(nrec ? nrec : 1, sizeof(uint8_t *));
        CHECK(d->rows[i] && d->data[i]);
        for (uint64_t r = 0; r < nrec; r++) {
            uint64_t rows = f->ndim == 0 ? 1
                            : f->shape[0] == STK_RAGGED ? tds_ragged_rows(kind, i, r)
                                                        : (uint64_t)f->shape[0];
            size_t n = (size_t)(rows * d->rowb[i]);
            uint8_t *p = malloc(n ? n : 1);
            CHECK(p != NULL);
            if (f->codec == STK_CODEC_ZSTD) {
                for (size_t k = 0; k < n; k++) p[k] = (uint8_t)(k / 4 + r * 3 + i);
                if (n) p[n / 2] ^= 0x5a;
            } else if ((kind == TDS_RECORDS && i == 1) ||
                       ((kind == TDS_PLAIN || kind == TDS_FIXED) && i == 2)) {
                int64_t v = (int64_t)r;
                memcpy(p, &v, 8);
            } else {
                test_fill(p, n, r * 131 + i * 7 + 1);
            }
            d->rows[i][r] = rows;
            d->data[i][r] = p;
        }
    }
}

/* Writes the dataset to a fresh test directory called `name`. */
static inline void tds_write_opts(tds *d, const char *name, uint64_t shard_bytes) {
    stk_error err = {0};
    snprintf(d->dir, sizeof d->dir, "%s", test_dir(name));
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.shard_bytes = shard_bytes;
    wo.block_size = 4096;
    wo.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(d->dir, d->f, d->nf, &wo, &w, &err));
    stk_value v[TDS_MAXF];
    for (uint64_t r = 0; r < d->nrec; r++) {
        for (size_t i = 0; i < d->nf; i++) v[i] = (stk_value){d->data[i][r], d->rows[i][r]};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

static inline void tds_write(tds *d, const char *name) { tds_write_opts(d, name, 16 << 10); }

/* Window mode: numbers the windows record by record (brute force).  `ok`
 * may reject starts (a validity rule); NULL accepts all. */
typedef int (*tds_valid_fn)(const tds *d, uint64_t rec, uint64_t last_row);

static inline void tds_windows(tds *d, uint64_t L, uint64_t S, tds_valid_fn ok) {
    free(d->srec);
    free(d->st);
    d->L = L;
    d->S = S;
    uint64_t cap = 0;
    for (uint64_t r = 0; r < d->nrec; r++) cap += d->rows[0][r] / S + 1;
    d->srec = malloc((cap + 1) * 8);
    d->st = malloc((cap + 1) * 8);
    CHECK(d->srec && d->st);
    d->n = 0;
    for (uint64_t r = 0; r < d->nrec; r++)
        for (uint64_t t = 0; t + L <= d->rows[0][r]; t += S)
            if (!ok || ok(d, r, t + L - 1)) {
                d->srec[d->n] = r;
                d->st[d->n] = t;
                d->n++;
            }
}

static inline uint64_t tds_samples(const tds *d) { return d->kind == TDS_WINDOWS ? d->n : d->nrec; }

static inline void tds_free(tds *d) {
    for (size_t i = 0; i < d->nf; i++) {
        for (uint64_t r = 0; r < d->nrec; r++) free(d->data[i][r]);
        free(d->data[i]);
        free(d->rows[i]);
    }
    free(d->srec);
    free(d->st);
    d->srec = d->st = NULL;
}

/* ---- checking batches ---- */

/* A hash of bytes, 8 at a time (fast enough for megabytes under TSan). */
static inline uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* Checks every field of batch `b` against the written bytes; the loader
 * yields the dataset fields listed in `names` (NULL: all, in order), with
 * window `L` (0: records).  Returns a hash of ids and bytes folded into h. */
static inline uint64_t tds_check_batch(const tds *d, stk_loader *ld, stk_batch *b,
                                       const char *const *names, size_t nnames, uint64_t L,
                                       uint64_t h) {
    uint32_t n = stk_batch_size(b);
    const uint64_t *ids = stk_batch_samples(b);
    CHECK(ids != NULL || n == 0);
    h = fnv(h, ids, n * sizeof *ids);
    size_t nf = names ? nnames : d->nf;
    CHECK(stk_loader_num_fields(ld) == nf);
    for (size_t i = 0; i < nf; i++) {
        int fi = names ? tds_field(d, names[i]) : (int)i;
        CHECK(fi >= 0);
        const stk_field *f = &d->f[fi];
        uint64_t rb = d->rowb[fi];
        stk_batch_field bf;
        CHECK(stk_batch_field_get(b, i, &bf) == 0);
        CHECK(strcmp(bf.name, f->name) == 0);
        CHECK(stk_loader_find_field(ld, f->name) == (int)i);
        CHECK(bf.dtype == f->dtype);
        CHECK(((uintptr_t)bf.data & 63) == 0);
        bool ragged = f->ndim > 0 && f->shape[0] == STK_RAGGED;
        bool time = L && f->ndim > 0 && (ragged || (uint64_t)f->shape[0] >= L);
        const uint8_t *data = bf.data;
        if (time) {
            CHECK(bf.ndim == f->ndim + 1 && bf.shape[0] == n && bf.shape[1] == (int64_t)L);
            for (int k = 1; k < f->ndim; k++) CHECK(bf.shape[k + 1] == f->shape[k]);
            CHECK(bf.offsets == NULL && bf.bytes == n * L * rb);
            for (uint32_t j = 0; j < n; j++) {
                CHECK(ids[j] < d->n);
                uint64_t r = d->srec[ids[j]], t = d->st[ids[j]];
                if (memcmp(data + j * L * rb, d->data[fi][r] + t * rb, (size_t)(L * rb)) != 0) {
                    fprintf(stderr, "field %s sample %llu (record %llu rows %llu..): wrong bytes\n",
                            f->name, (unsigned long long)ids[j], (unsigned long long)r,
                            (unsigned long long)t);
                    exit(1);
                }
            }
        } else if (ragged) {
            CHECK(!L);
            CHECK(bf.offsets != NULL && bf.offsets[0] == 0);
            CHECK(bf.ndim == f->ndim);
            for (int k = 1; k < f->ndim; k++) CHECK(bf.shape[k] == f->shape[k]);
            for (uint32_t j = 0; j < n; j++) {
                CHECK(ids[j] < d->nrec);
                uint64_t rows = d->rows[fi][ids[j]];
                CHECK(bf.offsets[j + 1] - bf.offsets[j] == (int64_t)rows);
                if (memcmp(data + bf.offsets[j] * rb, d->data[fi][ids[j]], (size_t)(rows * rb))) {
                    fprintf(stderr, "field %s record %llu: wrong bytes\n", f->name,
                            (unsigned long long)ids[j]);
                    exit(1);
                }
            }
            CHECK(bf.shape[0] == bf.offsets[n]);
            CHECK(bf.bytes == (uint64_t)bf.offsets[n] * rb);
            h = fnv(h, bf.offsets, (n + 1) * 8);
        } else {
            uint64_t sb = (f->ndim ? (uint64_t)f->shape[0] : 1) * rb;
            CHECK(bf.ndim == f->ndim + 1 && bf.shape[0] == n);
            for (int k = 0; k < f->ndim; k++) CHECK(bf.shape[k + 1] == f->shape[k]);
            CHECK(bf.offsets == NULL && bf.bytes == n * sb);
            for (uint32_t j = 0; j < n; j++) {
                uint64_t r = L ? d->srec[ids[j]] : ids[j];
                CHECK(r < d->nrec);
                if (memcmp(data + j * sb, d->data[fi][r], (size_t)sb) != 0) {
                    fprintf(stderr, "field %s sample %llu (record %llu): wrong bytes\n", f->name,
                            (unsigned long long)ids[j], (unsigned long long)r);
                    exit(1);
                }
            }
        }
        h = fnv(h, bf.data, (size_t)bf.bytes);
    }
    return h;
}

/* The global position that rank `rank` of `W` takes as its i-th sample
 * starting at `start`, and the sample there (the loader's documented
 * arithmetic, recomputed by the test). */
static inline uint64_t expect_sample(const stk__order *o, const stk__deal *dl, uint64_t i) {
    return stk__order_at(o, stk__deal_at(dl, i));
}

/* Fails the program (instead of hanging ctest) after `s` seconds. */
static inline void test_watchdog(unsigned s) {
    signal(SIGALRM, SIG_DFL);
    alarm(s);
}

#endif
