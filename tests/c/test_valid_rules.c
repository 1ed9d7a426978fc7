/*
 * test_valid_rules: validity rules (stk_loader_options.valid_rules and
 * valid_field) keep exactly the windows that a window-by-window check
 * keeps.  Records of 0 to 60 rows with random NaNs, infinities and zeros
 * (whole records of NaN, NaN in first and last rows included), a time
 * field with gaps; every test, over the window's last row, its last few
 * rows or all of it, one rule or several together; windows of 1 row to as
 * long as the longest record, strides 1 to 3; the inferred step equal to
 * the given one; the counts equal an opened loader's; and the rules'
 * mistakes refused with messages that name them.
 */
#include "util.h"

#include <math.h>
#include <stdbool.h>

#define NREC 41
#define MAXROWS 60
#define DAY 86400

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The dataset, kept for the brute-force check. */
static uint64_t rows_of[NREC];
static float ys[NREC][MAXROWS][2];
static float xs[NREC][MAXROWS][3];
static uint8_t ms[NREC][MAXROWS];
static int64_t ts[NREC][MAXROWS];

/* Record r's values: NaN density varies by record; record 3 has only NaN
 * in y, record 5 NaN in the first and last rows of every field, record 7
 * one row. */
static void make_data(void) {
    for (uint32_t r = 0; r < NREC; r++) {
        uint64_t rows = r == 7 ? 1 : next_rand() % (MAXROWS + 1);
        rows_of[r] = rows;
        unsigned dens = (unsigned)(next_rand() % 40); /* percent */
        int64_t t = (int64_t)(next_rand() % 1000) * DAY;
        for (uint64_t i = 0; i < rows; i++) {
            for (int k = 0; k < 2; k++)
                ys[r][i][k] = next_rand() % 100 < dens ? NAN : (float)(i + k);
            for (int k = 0; k < 3; k++) {
                uint64_t u = next_rand() % 200;
                xs[r][i][k] = u < dens ? NAN : u < dens + 3 ? INFINITY : (float)u;
            }
            ms[r][i] = next_rand() % 100 < dens ? 0 : 1;
            ts[r][i] = t;
            uint64_t g = next_rand() % 100;
            t += g < 8 ? 2 * DAY : g < 10 ? 5 * DAY : DAY; /* gaps */
        }
        if (r == 3)
            for (uint64_t i = 0; i < rows; i++) ys[r][i][0] = ys[r][i][1] = NAN;
        if (r == 5 && rows) {
            ys[r][0][0] = xs[r][0][1] = NAN;
            ys[r][rows - 1][1] = xs[r][rows - 1][2] = NAN;
            ys[r][rows - 1][0] = NAN;
        }
    }
}

static void write_dataset(const char *dir) {
    stk_error err = {0};
    stk_field f[5] = {
        {.name = "y", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 2}},
        {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 3}},
        {.name = "m", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "t", .dtype = STK_I64, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "pos", .dtype = STK_I64, .ndim = 1, .shape = {STK_RAGGED}},
    };
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 5, NULL, &w, &err));
    int64_t pos[MAXROWS];
    for (uint32_t r = 0; r < NREC; r++) {
        uint64_t rows = rows_of[r];
        for (uint64_t i = 0; i < rows; i++) pos[i] = (int64_t)(r * 1000 + i);
        stk_value v[5] = {{ys[r], rows}, {xs[r], rows}, {ms[r], rows}, {ts[r], rows}, {pos, rows}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* The rule, window by window: the rows [t0 + L - m, t0 + L) tested. */
static bool brute_rule(const stk_valid_rule *ru, uint32_t r, uint64_t t0, uint64_t L) {
    uint64_t m = ru->last && ru->last < L ? ru->last : L, a = t0 + L - m, b = t0 + L;
    bool some = false;
    for (uint64_t i = a; i < b; i++) {
        const float *v = !strcmp(ru->field, "y") ? ys[r][i] : xs[r][i];
        int n = !strcmp(ru->field, "y") ? 2 : 3;
        switch (ru->test) {
        case STK_VALID_MASK:
            if (!ms[r][i]) return false;
            break;
        case STK_VALID_RANGE:
            if (ts[r][i] < ru->lo || ts[r][i] > ru->hi) return false;
            break;
        case STK_VALID_OUTSIDE:
            if (ts[r][i] >= ru->lo && ts[r][i] <= ru->hi) return false;
            break;
        case STK_VALID_STEP:
            if (i > a && ts[r][i] - ts[r][i - 1] != (ru->lo ? ru->lo : DAY)) return false;
            break;
        default:
            for (int k = 0; k < n; k++) {
                if (ru->test == STK_VALID_NOT_NAN && isnan(v[k])) return false;
                if (ru->test == STK_VALID_FINITE && !isfinite(v[k])) return false;
                if (!isnan(v[k])) some = true;
            }
        }
    }
    return ru->test == STK_VALID_SOME ? some : true;
}

/* Sequential order: the loader's windows, as rec * 1000 + first row, must
 * be the brute force's, in order; its counts stk_loader_count's. */
static void check_rules(stk_dataset *ds, const stk_valid_rule *rules, size_t n, uint64_t L,
                        uint64_t S) {
    stk_error err = {0};
    int64_t *want = malloc(NREC * MAXROWS * sizeof *want);
    uint64_t nwant = 0;
    for (uint32_t r = 0; r < NREC; r++)
        for (uint64_t t0 = 0; t0 + L <= rows_of[r]; t0 += S) {
            bool ok = true;
            for (size_t k = 0; k < n && ok; k++) ok = brute_rule(&rules[k], r, t0, L);
            if (ok) want[nwant++] = (int64_t)(r * 1000 + t0);
        }
    stk_loader_options o;
    stk_loader_options_init(&o);
    const char *fields[] = {"pos"};
    o.fields = fields;
    o.nfields = 1;
    o.window = L;
    o.stride = S;
    o.order = STK_ORDER_SEQUENTIAL;
    o.batch_size = 7;
    o.threads = 1;
    o.valid_rules = rules;
    o.nvalid_rules = n;
    uint64_t es = 0;
    CHECK_OK(stk_loader_count(ds, &o, &es, NULL, NULL, &err));
    if (es != nwant) {
        fprintf(stderr, "window %llu stride %llu, %zu rules (first %s on %s, last %llu): "
                "%llu samples, brute force %llu\n",
                (unsigned long long)L, (unsigned long long)S, n, stk_valid_name(rules[0].test),
                rules[0].field, (unsigned long long)rules[0].last, (unsigned long long)es,
                (unsigned long long)nwant);
        exit(1);
    }
    if (nwant) {
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        uint64_t got = 0;
        stk_batch *b = NULL;
        int rc;
        while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
            stk_batch_field f;
            CHECK_OK(stk_batch_field_get(b, 0, &f));
            const int64_t *p = f.data;
            for (uint32_t i = 0; i < stk_batch_size(b); i++, got++) {
                CHECK(got < nwant);
                CHECK(p[i * L] == want[got]);
                for (uint64_t k = 1; k < L; k++) CHECK(p[i * L + k] == want[got] + (int64_t)k);
            }
            stk_loader_release(ld, b);
        }
        CHECK(rc == STK_END);
        CHECK(got == nwant);
        stk_loader_close(ld);
    }
    free(want);
}

int main(void) {
    stk_error err = {0};
    const char *dir = test_dir("valid_rules");
    make_data();
    write_dataset(dir);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    const uint64_t windows[] = {1, 2, 3, 7, 30, MAXROWS};
    const uint64_t lasts[] = {0, 1, 2, 5, 1000};
    const stk_valid tests[] = {STK_VALID_MASK,  STK_VALID_NOT_NAN, STK_VALID_FINITE,
                               STK_VALID_SOME,  STK_VALID_RANGE,   STK_VALID_STEP,
                               STK_VALID_OUTSIDE};
    uint64_t longest = 0;
    for (uint32_t r = 0; r < NREC; r++) longest = rows_of[r] > longest ? rows_of[r] : longest;
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++) {
        uint64_t L = windows[wi];
        if (L > longest) continue;
        for (uint64_t S = 1; S <= 3; S++) {
            /* One rule at a time, on each field it applies to. */
            for (size_t ti = 0; ti < 7; ti++)
                for (size_t li = 0; li < 5; li++)
                    for (int fx = 0; fx < 2; fx++) {
                        stk_valid te = tests[ti];
                        bool flt = te == STK_VALID_NOT_NAN || te == STK_VALID_FINITE ||
                                   te == STK_VALID_SOME;
                        if (!flt && fx) continue;
                        const char *field = flt ? (fx ? "x" : "y")
                                            : te == STK_VALID_MASK ? "m"
                                                                   : "t";
                        stk_valid_rule ru = {field, te, lasts[li], 0, 0};
                        if (te == STK_VALID_RANGE || te == STK_VALID_OUTSIDE) {
                            ru.lo = 200 * DAY;
                            ru.hi = 900 * DAY;
                        }
                        check_rules(ds, &ru, 1, L, S);
                        if (te == STK_VALID_STEP) { /* the step given, not inferred */
                            ru.lo = DAY;
                            check_rules(ds, &ru, 1, L, S);
                        }
                    }
            /* Several at once: NeuralHydrology's inputs and targets, a
             * period and no gaps; and random sets of three. */
            stk_valid_rule nh[4] = {{"x", STK_VALID_NOT_NAN, 0, 0, 0},
                                    {"y", STK_VALID_SOME, 1, 0, 0},
                                    {"t", STK_VALID_RANGE, 1, 300 * DAY, 800 * DAY},
                                    {"t", STK_VALID_STEP, 0, 0, 0}};
            check_rules(ds, nh, 4, L, S);
            stk_valid_rule two[3] = {{"t", STK_VALID_RANGE, 1, 300 * DAY, 800 * DAY},
                                     {"t", STK_VALID_OUTSIDE, 1, 401 * DAY, 599 * DAY},
                                     {"x", STK_VALID_NOT_NAN, 0, 0, 0}};
            check_rules(ds, two, 3, L, S);
            for (int k = 0; k < 6; k++) {
                stk_valid_rule rs[3];
                for (int j = 0; j < 3; j++) {
                    stk_valid te = tests[next_rand() % 7];
                    bool flt = te == STK_VALID_NOT_NAN || te == STK_VALID_FINITE ||
                               te == STK_VALID_SOME;
                    rs[j] = (stk_valid_rule){flt ? (next_rand() % 2 ? "x" : "y")
                                             : te == STK_VALID_MASK ? "m"
                                                                    : "t",
                                             te, lasts[next_rand() % 5], 0, 0};
                    if (te == STK_VALID_RANGE || te == STK_VALID_OUTSIDE) {
                        rs[j].lo = (int64_t)(next_rand() % 500) * DAY;
                        rs[j].hi = rs[j].lo + (int64_t)(next_rand() % 800) * DAY;
                    }
                }
                check_rules(ds, rs, 3, L, S);
            }
        }
    }

    /* valid_field/valid is the rule over the last row, beside any others. */
    {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.window = 5;
        o.valid_field = "y";
        o.valid = STK_VALID_NOT_NAN;
        uint64_t a = 0, b = 0;
        CHECK_OK(stk_loader_count(ds, &o, &a, NULL, NULL, &err));
        stk_valid_rule ru = {"y", STK_VALID_NOT_NAN, 1, 0, 0};
        o.valid_field = NULL;
        o.valid = STK_VALID_ALL;
        o.valid_rules = &ru;
        o.nvalid_rules = 1;
        CHECK_OK(stk_loader_count(ds, &o, &b, NULL, NULL, &err));
        CHECK(a == b && a > 0);
    }

    /* Mistakes, named. */
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.window = 5;
    stk_valid_rule bad = {"nope", STK_VALID_NOT_NAN, 1, 0, 0};
    o.valid_rules = &bad;
    o.nvalid_rules = 1;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "nope");
    bad = (stk_valid_rule){"m", STK_VALID_NOT_NAN, 1, 0, 0};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "float");
    bad = (stk_valid_rule){"y", STK_VALID_RANGE, 1, 0, 10};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "integer");
    bad = (stk_valid_rule){"t", STK_VALID_RANGE, 1, 10, 0};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "empty range");
    bad = (stk_valid_rule){"t", STK_VALID_ALL, 1, 0, 0};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "unknown test");
    bad = (stk_valid_rule){NULL, STK_VALID_MASK, 1, 0, 0};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "valid_rules");
    o.window = 0;
    bad = (stk_valid_rule){"t", STK_VALID_STEP, 0, 0, 0};
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "window");
    o.window = 5;
    o.valid_rules = NULL;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "valid_rules");
    o.nvalid_rules = 0;
    o.valid_field = "t";
    o.valid = STK_VALID_RANGE;
    CHECK_ERR(stk_loader_count(ds, &o, NULL, NULL, NULL, &err), -EINVAL, "valid_rules");

    stk_dataset_close(ds);
    return 0;
}
