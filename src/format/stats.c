/*
 * stats.c: the statistics of each numeric field that a writer gathers as it
 * packs (count, NaN count, mean, sum of squared deviations, min and max per
 * column), their combination across shards and parts, and their JSON form
 * in the manifest.
 *
 * A column is one element of a field's row: a field of shape [*, 3] (rows
 * of 3) has 3; a field of a fixed shape is one row a record, every element
 * a column ([5] has 5, a scalar 1), as stoker.stats reads it.  Values are taken as double;
 * NaN is counted apart and left out of the rest.
 *
 * Moments are kept as count, mean and M2 (the sum of squared deviations
 * from the mean) and joined with Chan, Golub and LeVeque's pairwise update,
 * not as sums of x and x^2: the variance then never comes from the
 * difference of two large sums, which loses every digit when the mean is
 * far from zero compared with the spread (timestamps, 1e6 +- 1e3), and two
 * parts joined give what one pass gives to rounding.
 *
 * The values handed to the writer are taken in chunks that stay in the
 * cache, each in one pass (sums of the values less a shift, and of their
 * squares: stk__stats_add), and joined to the running moments; the pack's
 * files are never read.  The loop keeps W independent partial results
 * ("lanes", W a multiple of the column count, so lane l is column l % C)
 * in vector registers; a loop without NaN checks serves the chunks that
 * hold none, and a chunk found to hold one is taken again with them.
 */
#include "format.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Elements per chunk (16 KiB of f32), and the most lanes a field's
 * columns are repeated over to make their count a multiple of 16. */
#define CHUNK_ELEMS 4096u
#define MAX_LANES 1024u

size_t stk__stats_columns(const stk_field *f) {
    if (f->dtype == STK_BYTES || stk_dtype_size(f->dtype) == 0) return 0;
    uint64_t c = 1;
    for (int d = stk__stats_rowed(f) ? 1 : 0; d < f->ndim; d++) {
        c *= (uint64_t)f->shape[d];
        if (c > STK_STATS_MAX_COLUMNS) return 0;
    }
    return (size_t)c;
}

/* The lanes of a field of `cols` columns: a multiple of cols, and of the
 * 16 lanes the loops take at once where that is not too many. */
static size_t lanes_for(size_t cols) {
    size_t a = cols, b = 16;
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    size_t lcm = cols / a * 16;
    return lcm <= MAX_LANES ? lcm : cols;
}

static void column_reset(stk_column_stats *c) {
    c->count = c->nan_count = 0;
    c->mean = c->min = c->max = NAN;
    c->m2 = 0;
}

void stk__stats_free(stk__stats *s) {
    if (!s) return;
    stk__free(s->first);
    stk__free(s->has);
    stk__free(s->col);
    stk__free(s->lane);
    stk__free(s);
}

int stk__stats_new(const stk_field *fields, size_t nfields, bool scratch, stk__stats **out) {
    *out = NULL;
    stk__stats *s = stk__calloc(1, sizeof *s);
    if (!s || !(s->first = stk__calloc(nfields + 1, sizeof *s->first)) ||
        !(s->has = stk__calloc(nfields ? nfields : 1, sizeof *s->has))) {
        stk__stats_free(s);
        return -ENOMEM;
    }
    s->nfields = nfields;
    size_t wmax = 0;
    for (size_t i = 0; i < nfields; i++) {
        size_t c = stk__stats_columns(&fields[i]);
        s->first[i + 1] = s->first[i] + c;
        s->has[i] = c > 0;
        if (c && lanes_for(c) > wmax) wmax = lanes_for(c);
    }
    size_t n = s->first[nfields];
    s->col = stk__calloc(n ? n : 1, sizeof *s->col);
    /* Scratch of the writer's: six lane arrays of wmax, and seven per
     * column (a field has no more columns than lanes). */
    if (scratch && wmax) s->lane = stk__calloc(13 * wmax, sizeof *s->lane);
    if (!s->col || (scratch && wmax && !s->lane)) {
        stk__stats_free(s);
        return -ENOMEM;
    }
    s->lanes_max = wmax;
    stk__stats_reset(s);
    *out = s;
    return 0;
}

void stk__stats_reset(stk__stats *s) {
    for (size_t i = 0; i < s->first[s->nfields]; i++) column_reset(&s->col[i]);
}

int stk__stats_copy(stk__stats *to, const stk__stats *from) {
    if (to->nfields != from->nfields ||
        memcmp(to->first, from->first, (to->nfields + 1) * sizeof *to->first) != 0)
        return -EINVAL;
    memcpy(to->col, from->col, to->first[to->nfields] * sizeof *to->col);
    memcpy(to->has, from->has, to->nfields * sizeof *to->has);
    return 0;
}

/* Joins the moments of b (count nb, mean mb, m2b, NaN count nanb, min
 * and max) into a. */
static void join(stk_column_stats *a, uint64_t nb, uint64_t nanb, double mb, double m2b,
                 double minb, double maxb) {
    a->nan_count += nanb;
    if (!nb) return;
    if (!a->count) {
        a->count = nb;
        a->mean = mb;
        a->m2 = m2b;
        a->min = minb;
        a->max = maxb;
        return;
    }
    uint64_t n = a->count + nb;
    double delta = mb - a->mean;
    a->mean += delta * ((double)nb / (double)n);
    a->m2 += m2b + delta * delta * ((double)a->count * (double)nb / (double)n);
    if (minb < a->min) a->min = minb;
    if (maxb > a->max) a->max = maxb;
    a->count = n;
}

int stk__stats_merge(stk__stats *into, const stk__stats *from) {
    if (into->nfields != from->nfields ||
        memcmp(into->first, from->first, (into->nfields + 1) * sizeof *into->first) != 0)
        return -EINVAL;
    for (size_t i = 0; i < into->nfields; i++) into->has[i] = into->has[i] && from->has[i];
    for (size_t i = 0; i < into->first[into->nfields]; i++) {
        const stk_column_stats *b = &from->col[i];
        join(&into->col[i], b->count, b->nan_count, b->mean, b->m2, b->min, b->max);
    }
    return 0;
}

/* ---- the writer's pass over a record's values ---- */

static inline float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp) bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if (!man) bits = sign;
    else {
        /* A subnormal: normalised by hand. */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#define LOAD_PLAIN(x, i) ((double)(x)[i])
#define LOAD_F16(x, i) ((double)f16_to_float((x)[i]))
#define LOAD_BF16(x, i) ((double)bf16_to_float((x)[i]))

/* Where the CPU has AVX2 a second copy of the loop built for it runs
 * (stats_kernels).  Both do the same operations on each lane in the same
 * order, never reassociated or contracted, so they give the same bits. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STATS_AVX2 1
#define FOR_AVX2 __attribute__((target("avx2")))
#endif

/* The loop of one element type, over a chunk of n elements in rows of W
 * lanes (lane l takes elements l, l + W, l + 2W, ...): per lane the sum of
 * d = x - K[l] and of d*d, the minimum and the maximum, and with `nan` NaN
 * left out and the values counted (without, for chunks that hold none).
 * The lanes go eight at a time down the rows of the chunk (in the cache),
 * their results in two vectors of four doubles each (GCC's vector
 * extensions, which clang shares: AVX registers where built for them,
 * pairs of SSE2 or NEON ones elsewhere), eight elements a step; few enough
 * to stay in registers, and enough: the adds, not their latency, bound
 * the loop.  NaN fails every comparison, so a minimum or maximum never
 * takes it.  How the lanes are grouped changes nothing in what each lane
 * computes, nor in the result. */
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));
/* Four floats or doubles anywhere in memory, read as one vector. */
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));
typedef double v4d_u __attribute__((vector_size(32), aligned(8), may_alias));
#define LANE_BLOCK 8

#define LOAD4_ANY(T, LOAD, y, k) ((v4d){LOAD(y, k), LOAD(y, k + 1), LOAD(y, k + 2), LOAD(y, k + 3)})
#define LOAD4_F32(T, LOAD, y, k) __builtin_convertvector(*(const v4f_u *)((y) + (k)), v4d)
#define LOAD4_F64(T, LOAD, y, k) ((v4d) * (const v4d_u *)((y) + (k)))
/* a < b ? a : b, and a > b ? a : b (b where a is NaN): one instruction
 * each with AVX. */
#define MIN_ANY(a, b) PICK((a) < (b), a, b)
#define MAX_ANY(a, b) PICK((a) > (b), a, b)
#define PICK(m, a, b) ((v4d)(((v4i)(a) & (m)) | ((v4i)(b) & ~(m))))
#ifdef STATS_AVX2
/* (GCC splits the generic conversion in two there; clang has no such
 * builtin, and needs none.) */
#if defined(__clang__)
#define LOAD4_F32_AVX LOAD4_F32
#else
#define LOAD4_F32_AVX(T, LOAD, y, k) __builtin_ia32_cvtps2pd256(*(const v4f_u *)((y) + (k)))
#endif
#define MIN_AVX(a, b) __builtin_ia32_minpd256(a, b)
#define MAX_AVX(a, b) __builtin_ia32_maxpd256(a, b)
#endif

/* One step of vector k (lanes l0 + 4k .. l0 + 4k + 3) down one row. */
#define STEP(k, NAN_, T, LOAD, LOAD4, VMIN, VMAX)                                              \
    {                                                                                          \
        v4d v = LOAD4(T, LOAD, y, 4 * k);                                                      \
        v4d d = v - sh##k;                                                                     \
        if (NAN_) {                                                                            \
            v4i ok = d == d;                                                                   \
            d = (v4d)((v4i)d & ok);                                                            \
            c##k += (v4d)((v4i)one & ok);                                                      \
        }                                                                                      \
        s##k += d;                                                                             \
        q##k += d * d;                                                                         \
        lo##k = VMIN(v, lo##k);                                                                \
        hi##k = VMAX(v, hi##k);                                                                \
    }
#define IN(v, a, k) memcpy(&v##k, (a) + l0 + 4 * k, 32)
#define OUT(v, a, k) memcpy((a) + l0 + 4 * k, &v##k, 32)

/* pass_NAME (no NaN in the chunk) and passn_NAME (NaN left out, counted). */
#define KERNEL1(FN, NAN_, T, LOAD, LOAD4, VMIN, VMAX, ATTR)                                    \
    ATTR static void FN(const void *p, size_t n, size_t W, const double *restrict K,           \
                        double *restrict acc) {                                                \
        const T *x = p;                                                                        \
        double *sum = acc, *sq = acc + W, *mn = sq + W, *mx = mn + W, *cnt = mx + W;           \
        size_t rows = n / W, l0 = 0;                                                           \
        const v4d one = {1, 1, 1, 1};                                                          \
        (void)one;                                                                             \
        for (; l0 + LANE_BLOCK <= W; l0 += LANE_BLOCK) {                                       \
            v4d sh0, sh1, s0, s1, q0, q1, lo0, lo1, hi0, hi1, c0 = {0}, c1 = {0};              \
            IN(sh, K, 0), IN(sh, K, 1), IN(s, sum, 0), IN(s, sum, 1), IN(q, sq, 0);            \
            IN(q, sq, 1), IN(lo, mn, 0), IN(lo, mn, 1), IN(hi, mx, 0), IN(hi, mx, 1);          \
            if (NAN_) IN(c, cnt, 0), IN(c, cnt, 1);                                            \
            const T *y = x + l0;                                                               \
            for (size_t r = 0; r < rows; r++, y += W) {                                        \
                STEP(0, NAN_, T, LOAD, LOAD4, VMIN, VMAX)                                      \
                STEP(1, NAN_, T, LOAD, LOAD4, VMIN, VMAX)                                      \
            }                                                                                  \
            OUT(s, sum, 0), OUT(s, sum, 1), OUT(q, sq, 0), OUT(q, sq, 1), OUT(lo, mn, 0);      \
            OUT(lo, mn, 1), OUT(hi, mx, 0), OUT(hi, mx, 1);                                    \
            if (NAN_) OUT(c, cnt, 0), OUT(c, cnt, 1);                                          \
        }                                                                                      \
        /* Lanes past the last eight, and the chunk's short last row. */                       \
        for (size_t r = l0 < W ? 0 : rows; r <= rows; r++)                                     \
            for (size_t l = r < rows ? l0 : 0; l < W && r * W + l < n; l++) {                  \
                double v = LOAD(x, r * W + l), d = v - K[l];                                   \
                if (d != d && NAN_) continue;                                                  \
                sum[l] += d;                                                                   \
                sq[l] += d * d;                                                                \
                cnt[l] += 1;                                                                   \
                mn[l] = v < mn[l] ? v : mn[l];                                                 \
                mx[l] = v > mx[l] ? v : mx[l];                                                 \
            }                                                                                  \
    }
#define KERNEL(NAME, T, LOAD, LOAD4, VMIN, VMAX, ATTR)                                         \
    KERNEL1(pass_##NAME, 0, T, LOAD, LOAD4, VMIN, VMAX, ATTR)                                  \
    KERNEL1(passn_##NAME, 1, T, LOAD, LOAD4, VMIN, VMAX, ATTR)                                 \
    static double at_##NAME(const void *p, size_t i) {                                         \
        const T *x = p;                                                                        \
        return LOAD(x, i);                                                                     \
    }

typedef struct kernels {
    void (*pass)(const void *, size_t, size_t, const double *, double *);
    void (*passn)(const void *, size_t, size_t, const double *, double *);
    double (*at)(const void *, size_t); /* element i, as double */
    bool nan;                           /* the type has NaN */
} kernels;

#define K(NAME, NAN_) {pass_##NAME, passn_##NAME, at_##NAME, NAN_}
#define TABLE(S, VMIN, VMAX, F32LOAD, ATTR)                                                             \
    KERNEL(u8##S, uint8_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                            \
    KERNEL(u16##S, uint16_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                          \
    KERNEL(u32##S, uint32_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                          \
    KERNEL(u64##S, uint64_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                          \
    KERNEL(i8##S, int8_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                             \
    KERNEL(i16##S, int16_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                           \
    KERNEL(i32##S, int32_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                           \
    KERNEL(i64##S, int64_t, LOAD_PLAIN, LOAD4_ANY, VMIN, VMAX, ATTR)                           \
    KERNEL(f16##S, uint16_t, LOAD_F16, LOAD4_ANY, VMIN, VMAX, ATTR)                            \
    KERNEL(bf16##S, uint16_t, LOAD_BF16, LOAD4_ANY, VMIN, VMAX, ATTR)                          \
    KERNEL(f32##S, float, LOAD_PLAIN, F32LOAD, VMIN, VMAX, ATTR)                             \
    KERNEL(f64##S, double, LOAD_PLAIN, LOAD4_F64, VMIN, VMAX, ATTR)                            \
    static const kernels by_dtype##S[STK_BYTES] = {                                            \
        [STK_U8] = K(u8##S, false),    [STK_U16] = K(u16##S, false),                           \
        [STK_U32] = K(u32##S, false),  [STK_U64] = K(u64##S, false),                           \
        [STK_I8] = K(i8##S, false),    [STK_I16] = K(i16##S, false),                           \
        [STK_I32] = K(i32##S, false),  [STK_I64] = K(i64##S, false),                           \
        [STK_F16] = K(f16##S, true),   [STK_BF16] = K(bf16##S, true),                          \
        [STK_F32] = K(f32##S, true),   [STK_F64] = K(f64##S, true),                            \
    };

TABLE(, MIN_ANY, MAX_ANY, LOAD4_F32, )
#ifdef STATS_AVX2
TABLE(_avx2, MIN_AVX, MAX_AVX, LOAD4_F32_AVX, FOR_AVX2)
#endif

static const kernels *stats_kernels(stk_dtype t) {
#ifdef STATS_AVX2
    if (__builtin_cpu_supports("avx2")) return &by_dtype_avx2[t];
#endif
    return &by_dtype[t];
}

/* Adds `rows` rows of field `field` in chunks.  Each chunk's moments come
 * from one pass over it as sums of d = x - K and of d*d per column, K a
 * shift close to the column's values (its mean so far in this shard, else
 * its first finite value in the chunk): the chunk's M2 is then
 * sum(d*d) - sum(d)^2 / n, whose rounding is that of the sums times
 * 1 + n (mean - K)^2 / M2, small for any K within a few deviations of the
 * mean.  The chunk's moments are joined to the column's with Chan's
 * update. */
void stk__stats_add(stk__stats *s, size_t field, const stk_field *f, const void *data,
                    uint64_t rows) {
    size_t C = s->first[field + 1] - s->first[field];
    if (!C || !rows) return;
    assert(f->dtype > 0 && f->dtype < STK_BYTES && s->lane);
    const kernels *k = stats_kernels(f->dtype);
    size_t W = lanes_for(C), size = stk_dtype_size(f->dtype);
    assert(W <= s->lanes_max);
    /* Scratch: five accumulators and the shift per lane; per column the
     * shift, count, sums, minimum, maximum and values in the chunk. */
    double *acc = s->lane, *K = acc + 5 * W;
    double *c_k = s->lane + 6 * s->lanes_max, *c_n = c_k + C, *c_s = c_n + C, *c_q = c_s + C,
           *c_mn = c_q + C, *c_mx = c_mn + C, *c_all = c_mx + C;
    double *sum = acc, *sq = acc + W, *mn = sq + W, *mx = mn + W, *cnt = mx + W;
    stk_column_stats *col = s->col + s->first[field];
    uint64_t n = rows * C;
    /* At least 32 rows a chunk, so that a block's vectors are loaded and
     * stored once for many steps. */
    size_t chunk = W * STK__MAX(CHUNK_ELEMS / W, (size_t)32);
    const uint8_t *x = data;
    for (uint64_t at = 0; at < n; at += chunk) {
        size_t len = (size_t)STK__MIN((uint64_t)chunk, n - at);
        const void *p = x + at * size;
        for (size_t c = 0; c < C; c++) {
            double kc = col[c].count && isfinite(col[c].mean) ? col[c].mean : NAN;
            for (size_t i = c; kc != kc && i < len; i += C) {
                double v = k->at(p, i);
                if (isfinite(v)) kc = v;
            }
            c_k[c] = kc == kc ? kc : 0;
        }
        for (size_t l = 0; l < W; l++) K[l] = c_k[l % C];
        bool nan = false;
        for (int tries = 0; tries < 2; tries++) {
            for (size_t l = 0; l < W; l++) {
                sum[l] = sq[l] = cnt[l] = 0;
                mn[l] = INFINITY;
                mx[l] = -INFINITY;
            }
            (nan ? k->passn : k->pass)(p, len, W, K, acc);
            if (!k->nan || nan) break;
            /* A NaN in the chunk (or infinities of both signs): again,
             * leaving NaN out. */
            for (size_t l = 0; l < W && !nan; l++) nan = sum[l] != sum[l] || sq[l] != sq[l];
            if (!nan) break;
        }
        for (size_t c = 0; c < C; c++) {
            c_n[c] = c_s[c] = c_q[c] = c_all[c] = 0;
            c_mn[c] = INFINITY;
            c_mx[c] = -INFINITY;
        }
        for (size_t l = 0; l < W; l++) {
            size_t c = l % C;
            double in_lane = (double)(len / W + (l < len % W));
            c_all[c] += in_lane;
            c_n[c] += nan ? cnt[l] : in_lane;
            c_s[c] += sum[l];
            c_q[c] += sq[l];
            if (mn[l] < c_mn[c]) c_mn[c] = mn[l];
            if (mx[l] > c_mx[c]) c_mx[c] = mx[l];
        }
        for (size_t c = 0; c < C; c++) {
            uint64_t nb = (uint64_t)c_n[c];
            double mean = nb ? c_k[c] + c_s[c] / c_n[c] : NAN;
            double m2 = nb ? c_q[c] - c_s[c] * (c_s[c] / c_n[c]) : 0;
            join(&col[c], nb, (uint64_t)c_all[c] - nb, mean, m2 > 0 || m2 != m2 ? m2 : 0, c_mn[c],
                 c_mx[c]);
        }
    }
}

/* ---- JSON ---- */

/* A double as JSON: a number, or "nan", "inf", "-inf" (JSON has none of
 * them).  Jansson writes 17 significant digits, which read back to the
 * same double. */
static json_t *real_json(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

static bool real_parse(json_t *j, double *out) {
    if (json_is_number(j)) {
        *out = json_number_value(j);
        return true;
    }
    const char *s = json_string_value(j);
    if (!s) return false;
    if (!strcmp(s, "nan")) *out = NAN;
    else if (!strcmp(s, "inf")) *out = INFINITY;
    else if (!strcmp(s, "-inf")) *out = -INFINITY;
    else return false;
    return true;
}

static const char *const keys[] = {"count", "nan_count", "mean", "m2", "min", "max"};

json_t *stk__stats_json(const stk__stats *s, const stk_field *fields) {
    json_t *o = json_object();
    if (!o) return NULL;
    for (size_t i = 0; i < s->nfields; i++) {
        size_t C = s->first[i + 1] - s->first[i];
        if (!s->has[i]) continue;
        const stk_column_stats *col = s->col + s->first[i];
        json_t *f = json_object(), *a[6];
        for (int k = 0; k < 6; k++) a[k] = json_array();
        for (size_t c = 0; c < C; c++) {
            json_array_append_new(a[0], json_integer((json_int_t)col[c].count));
            json_array_append_new(a[1], json_integer((json_int_t)col[c].nan_count));
            json_array_append_new(a[2], real_json(col[c].mean));
            json_array_append_new(a[3], real_json(col[c].m2));
            json_array_append_new(a[4], real_json(col[c].min));
            json_array_append_new(a[5], real_json(col[c].max));
        }
        for (int k = 0; k < 6; k++) json_object_set_new(f, keys[k], a[k]);
        json_object_set_new(o, fields[i].name, f);
    }
    return o;
}

#define BAD(...) stk__err(err, STK_ECORRUPT, __VA_ARGS__)

int stk__stats_parse(json_t *o, const stk_field *fields, size_t nfields, const char *what,
                     stk__stats **out, stk_error *err) {
    *out = NULL;
    if (!json_is_object(o)) return BAD("%s: \"stats\" must be an object", what);
    stk__stats *s;
    if (stk__stats_new(fields, nfields, false, &s)) return stk__err(err, -ENOMEM, "out of memory");
    memset(s->has, 0, nfields * sizeof *s->has);
    int rc = 0;
    const char *name;
    json_t *f;
    json_object_foreach(o, name, f) {
        size_t i = 0;
        while (i < nfields && strcmp(fields[i].name, name)) i++;
        if (i == nfields || fields[i].dtype == STK_BYTES) {
            rc = BAD("%s: \"stats\": \"%s\" is not a numeric field", what, name);
            break;
        }
        /* Rows wider than this version keeps statistics of (a writer
         * that allows more): left out, as if absent. */
        size_t C = s->first[i + 1] - s->first[i];
        if (!C) continue;
        json_t *a[6];
        for (int k = 0; k < 6 && !rc; k++) {
            a[k] = json_object_get(f, keys[k]);
            if (!json_is_array(a[k]) || json_array_size(a[k]) != C)
                rc = BAD("%s: \"stats\": field '%s': \"%s\" must be an array of %zu", what, name,
                         keys[k], C);
        }
        stk_column_stats *col = s->col + s->first[i];
        for (size_t c = 0; c < C && !rc; c++) {
            json_t *n0 = json_array_get(a[0], c), *n1 = json_array_get(a[1], c);
            if (!json_is_integer(n0) || json_integer_value(n0) < 0 || !json_is_integer(n1) ||
                json_integer_value(n1) < 0 || !real_parse(json_array_get(a[2], c), &col[c].mean) ||
                !real_parse(json_array_get(a[3], c), &col[c].m2) ||
                !real_parse(json_array_get(a[4], c), &col[c].min) ||
                !real_parse(json_array_get(a[5], c), &col[c].max)) {
                rc = BAD("%s: \"stats\": field '%s', column %zu: counts must be non-negative "
                         "integers, the rest numbers or \"nan\", \"inf\", \"-inf\"",
                         what, name, c);
                break;
            }
            col[c].count = (uint64_t)json_integer_value(n0);
            col[c].nan_count = (uint64_t)json_integer_value(n1);
        }
        if (rc) break;
        s->has[i] = true;
    }
    if (rc) {
        stk__stats_free(s);
        return rc;
    }
    *out = s;
    return 0;
}
