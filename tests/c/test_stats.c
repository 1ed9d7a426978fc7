/*
 * test_stats: the statistics a writer gathers as it packs.
 *
 * Every numeric field gets, per column, the count, NaN count, mean, M2, min
 * and max of the values written, equal to a two-pass reference over them in
 * long double (f32 with NaN and a mean far from zero, i32, f16, a zstd f64
 * field of fixed shape, u16 rows of 1000; over several shards); a bytes
 * field has none.
 * Parts merged give the statistics of the whole.  A pack interrupted and
 * resumed ends with the very numbers (bit for bit) of an uninterrupted one,
 * also when its statistics file is one shard behind its journal; one whose
 * statistics file is gone publishes none.  A manifest of an older stoker
 * (no "stats", no checksum) opens, with no statistics.
 */
#include "util.h"

#include <jansson.h>
#include <math.h>

#define NREC 120

#define NF 6
static const stk_field schema[NF] = {
    {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 3}},
    {.name = "n", .dtype = STK_I32, .ndim = 0},
    {.name = "raw", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED}},
    {.name = "h", .dtype = STK_F16, .ndim = 1, .shape = {STK_RAGGED}},
    {.name = "z", .dtype = STK_F64, .ndim = 2, .shape = {2, 2}, .codec = STK_CODEC_ZSTD},
    {.name = "w", .dtype = STK_U16, .ndim = 2, .shape = {STK_RAGGED, 1000}},
};

static uint64_t rng = 7;
static double uni(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1.0p-53;
}

/* Record r's values, the same every time they are asked for. */
typedef struct rec {
    float x[200 * 3];
    uint64_t xrows;
    int32_t n;
    uint8_t raw[16];
    uint16_t h[8];
    uint64_t hrows;
    double z[4];
    uint16_t w[3 * 1000];
    uint64_t wrows;
} rec;

/* f16 bit patterns and their values: 1, -2, 0.5, 65504, a subnormal, NaN. */
static const uint16_t h_bits[6] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x7e00};
static const double h_vals[6] = {1, -2, 0.5, 65504, 0x1p-24, NAN};

static void make(uint64_t r, rec *o) {
    rng = r * 977 + 13;
    o->xrows = r % 7 == 3 ? 0 : 1 + (uint64_t)(uni() * 199);
    for (uint64_t k = 0; k < o->xrows * 3; k++) {
        o->x[k] = (float)(1e6 + (uni() - 0.5) * 2e3 * (double)(1 + k % 3));
        if (uni() < 0.15) o->x[k] = NAN;
    }
    if (r == 40)
        for (uint64_t k = 0; k < o->xrows * 3; k += 3) o->x[k] = NAN; /* column 0 all NaN */
    o->n = (int32_t)(r * 37 % 101) - 50;
    memset(o->raw, (int)r, sizeof o->raw);
    o->hrows = r % 5;
    for (uint64_t k = 0; k < o->hrows; k++) o->h[k] = h_bits[(r + k) % 6];
    for (int k = 0; k < 4; k++) o->z[k] = uni() * 10 - k;
    o->wrows = r % 4;
    for (uint64_t k = 0; k < o->wrows * 1000; k++) o->w[k] = (uint16_t)(uni() * 60000 + (double)(k % 1000));
}

static void append(stk_writer *w, uint64_t r) {
    static rec o;
    make(r, &o);
    stk_value v[NF] = {{o.x, o.xrows}, {&o.n, 1},  {o.raw, r % 16},
                       {o.h, o.hrows}, {o.z, 2}, {o.w, o.wrows}};
    stk_error err = {0};
    CHECK_OK(stk_writer_append(w, v, &err));
}

/* Writes records [first, last) with small shards. */
static stk_writer *start(const char *dir, int resume, int sync, uint32_t part, uint32_t count) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 16384;
    o.sync = sync;
    o.resume = resume;
    o.overwrite = !resume;
    o.part_index = part;
    o.part_count = count;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, NF, &o, &w, &err));
    return w;
}

static void pack(const char *dir, uint64_t first, uint64_t last) {
    stk_error err = {0};
    stk_writer *w = start(dir, 0, 0, 0, 1);
    for (uint64_t r = first; r < last; r++) append(w, r);
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* Reference: per column of field f, in long double. */
typedef struct ref {
    uint64_t count, nan;
    long double sum, m2;
    double min, max;
} ref;

static double value(const rec *o, size_t f, uint64_t row, size_t c) {
    switch (f) {
    case 0: return o->x[row * 3 + c];
    case 1: return o->n;
    case 3:
        for (size_t j = 0; j < 6; j++)
            if (h_bits[j] == o->h[row]) return h_vals[j];
        return -1;
    case 4: return o->z[row * 4 + c]; /* a fixed [2, 2]: one row of 4 a record */
    default: return o->w[row * 1000 + c];
    }
}

static void reference(size_t f, size_t cols, ref *out) {
    static rec o;
    for (size_t c = 0; c < cols; c++) {
        out[c] = (ref){0, 0, 0, 0, INFINITY, -INFINITY};
        for (int pass = 0; pass < 2; pass++)
            for (uint64_t r = 0; r < NREC; r++) {
                make(r, &o);
                uint64_t rows = f == 0 ? o.xrows : f == 3 ? o.hrows : f == 5 ? o.wrows : 1;
                for (uint64_t row = 0; row < rows; row++) {
                    double v = value(&o, f, row, c);
                    if (isnan(v)) {
                        out[c].nan += pass == 0;
                        continue;
                    }
                    if (pass == 0) {
                        out[c].count++;
                        out[c].sum += v;
                        if (v < out[c].min) out[c].min = v;
                        if (v > out[c].max) out[c].max = v;
                    } else {
                        long double d = v - out[c].sum / out[c].count;
                        out[c].m2 += d * d;
                    }
                }
            }
    }
}

static int close_to(double got, long double want, double rtol) {
    if (isnan(got)) return 0;
    return fabsl((long double)got - want) <= rtol * fabsl(want) + 1e-300;
}

static void check_against_reference(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_shards(ds) > 3);
    const size_t cols[NF] = {3, 1, 0, 1, 4, 1000};
    for (size_t f = 0; f < NF; f++) {
        const stk_column_stats *s = NULL;
        size_t n = 99;
        int rc = stk_dataset_field_stats(ds, f, &s, &n);
        if (!cols[f]) {
            CHECK(rc == -ENOENT);
            continue;
        }
        CHECK(rc == 0 && n == cols[f]);
        static ref want[1000];
        reference(f, n, want);
        for (size_t c = 0; c < n; c++) {
            CHECK(s[c].count == want[c].count);
            CHECK(s[c].nan_count == want[c].nan);
            CHECK(s[c].min == want[c].min && s[c].max == want[c].max);
            CHECK(close_to(s[c].mean, want[c].sum / want[c].count, 1e-13));
            CHECK(close_to(s[c].m2, want[c].m2, 1e-9));
        }
    }
    const stk_column_stats *s = NULL;
    size_t n = 0;
    CHECK(stk_dataset_field_stats(ds, NF, &s, &n) == -EINVAL);
    stk_dataset_close(ds);
}

static void same_stats(const char *a, const char *b, int exact) {
    stk_error err = {0};
    stk_dataset *da = NULL, *db = NULL;
    CHECK_OK(stk_dataset_open(a, &da, &err));
    CHECK_OK(stk_dataset_open(b, &db, &err));
    for (size_t f = 0; f < NF; f++) {
        const stk_column_stats *sa, *sb;
        size_t na, nb;
        int ra = stk_dataset_field_stats(da, f, &sa, &na);
        int rb = stk_dataset_field_stats(db, f, &sb, &nb);
        CHECK(ra == rb);
        if (ra) continue;
        CHECK(na == nb);
        for (size_t c = 0; c < na; c++) {
            CHECK(sa[c].count == sb[c].count && sa[c].nan_count == sb[c].nan_count);
            CHECK(sa[c].min == sb[c].min && sa[c].max == sb[c].max);
            if (exact) {
                CHECK(memcmp(&sa[c].mean, &sb[c].mean, sizeof(double)) == 0);
                CHECK(memcmp(&sa[c].m2, &sb[c].m2, sizeof(double)) == 0);
            } else {
                CHECK(close_to(sa[c].mean, sb[c].mean, 1e-13));
                CHECK(close_to(sa[c].m2, sb[c].m2, 1e-11));
            }
        }
    }
    stk_dataset_close(da);
    stk_dataset_close(db);
}

static const char *in(const char *dir, const char *name) {
    static char p[2][4300];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* A pack of records [0, stop) left unfinished, as a crash leaves it. */
static void interrupted(const char *dir, int resume, uint64_t stop, int sync) {
    stk_writer *w = start(dir, resume, sync, 0, 1);
    for (uint64_t r = stk_writer_num_records(w); r < stop; r++) append(w, r);
    stk_writer_free(w);
}

static void resume_to_end(const char *dir, int sync) {
    stk_error err = {0};
    stk_writer *w = start(dir, 1, sync, 0, 1);
    for (uint64_t r = stk_writer_num_records(w); r < NREC; r++) append(w, r);
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

int main(void) {
    stk_error err = {0};
    const char *whole = test_dir("stats_whole");
    pack(whole, 0, NREC);
    check_against_reference(whole);

    /* Parts, merged: the statistics of the whole. */
    const char *parts = test_dir("stats_parts");
    const uint64_t cut[4] = {0, 50, 51, NREC};
    for (uint32_t p = 0; p < 3; p++) {
        stk_writer *w = start(parts, 0, 0, p, 3);
        for (uint64_t r = cut[p]; r < cut[p + 1]; r++) append(w, r);
        CHECK_OK(stk_writer_finish(w, &err));
        stk_writer_free(w);
    }
    CHECK_OK(stk_merge(parts, &err));
    same_stats(whole, parts, 0);

    /* Resumed, with and without fsync (which journals shards a few late). */
    for (int sync = 0; sync < 2; sync++) {
        const char *res = test_dir(sync ? "stats_resume_sync" : "stats_resume");
        interrupted(res, 0, 70, sync);
        CHECK(test_exists(in(res, ".packing.stats")));
        resume_to_end(res, sync);
        CHECK(!test_exists(in(res, ".packing.stats")));
        same_stats(whole, res, 1);
    }

    /* The statistics file a shard behind the journal (a crash between the
     * two): the shards past it are redone, and the numbers are the same. */
    const char *behind = test_dir("stats_behind");
    char saved[4300];
    interrupted(behind, 0, 40, 0);
    size_t len = 0;
    char *old = test_read_file(in(behind, ".packing.stats"), &len);
    interrupted(behind, 1, 90, 0);
    snprintf(saved, sizeof saved, "%s", in(behind, ".packing.stats"));
    test_write_file(saved, old, len);
    free(old);
    resume_to_end(behind, 0);
    same_stats(whole, behind, 1);

    /* The statistics file gone (a journal of a stoker without them): the
     * pack finishes, without statistics. */
    const char *gone = test_dir("stats_gone");
    interrupted(gone, 0, 70, 0);
    CHECK(remove(in(gone, ".packing.stats")) == 0);
    resume_to_end(gone, 0);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(gone, &ds, &err));
    const stk_column_stats *s;
    size_t n;
    CHECK(stk_dataset_field_stats(ds, 0, &s, &n) == -ENOENT);
    CHECK(stk_dataset_num_records(ds) == NREC);
    stk_dataset_close(ds);

    /* A manifest as stoker wrote it before statistics and its checksum. */
    json_error_t je;
    json_t *m = json_load_file(in(whole, "manifest.json"), 0, &je);
    CHECK(m && json_object_get(m, "stats"));
    json_object_del(m, "stats");
    json_object_del(m, "manifest_xxh3");
    CHECK(json_dump_file(m, in(whole, "manifest.json"), JSON_INDENT(1)) == 0);
    json_decref(m);
    CHECK_OK(stk_dataset_open(whole, &ds, &err));
    CHECK(stk_dataset_field_stats(ds, 0, &s, &n) == -ENOENT);
    float x[600];
    size_t got = 0;
    CHECK_OK(stk_dataset_read(ds, 1, 0, x, sizeof x, &got, STK_READ_VERIFY, &err));
    stk_dataset_close(ds);
    printf("test_stats: ok\n");
    return 0;
}
