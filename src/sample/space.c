/*
 * space.c: the sample space.  For records, sample i is record i.  For
 * windows, record r contributes the valid starts t = 0, S, 2S, ... with
 * t + L <= rows(r); prefix sums over records number them, so finding the
 * record of a sample is a binary search over records.  A validity rule
 * removes starts; the valid ones are kept as runs of consecutive starts,
 * so memory grows with records and runs, never with samples.
 *
 * Validity rules are counted, not tested window by window: one pass over a
 * record's rows of each rule's field fills running counts of its bad rows,
 * and a window passes a rule when the counts at its ends (of the rows the
 * rule tests) differ as the rule asks: O(rows) a rule and O(1) a window,
 * whatever the window's length.
 */
#include "sample.h"

#include <errno.h>
#include <math.h>
#include <string.h>

void stk__space_free(stk__space *sp) {
    stk__free(sp->prefix);
    stk__free(sp->run_first);
    stk__free(sp->run_t0);
    stk__free(sp->run_n);
    stk__free(sp->run_cum);
    memset(sp, 0, sizeof *sp);
}

static uint64_t rows_of(const stk_dataset *ds, uint64_t rec, size_t field) {
    stk_extent x;
    stk_dataset_get(ds, rec, field, &x, NULL);
    return x.rows;
}

/* ---- what a row of a rule's field is ---- */

static bool elem_nan(const uint8_t *p, stk_dtype t) {
    if (t == STK_F32) {
        float v;
        memcpy(&v, p, 4);
        return isnan(v);
    }
    if (t == STK_F64) {
        double v;
        memcpy(&v, p, 8);
        return isnan(v);
    }
    uint16_t v;
    memcpy(&v, p, 2);
    if (t == STK_F16) return (v & 0x7c00) == 0x7c00 && (v & 0x03ff);
    if (t == STK_BF16) return (v & 0x7f80) == 0x7f80 && (v & 0x007f);
    return false;
}

/* NaN or an infinity: every exponent bit set. */
static bool elem_nonfinite(const uint8_t *p, stk_dtype t) {
    if (t == STK_F32) {
        float v;
        memcpy(&v, p, 4);
        return !isfinite(v);
    }
    if (t == STK_F64) {
        double v;
        memcpy(&v, p, 8);
        return !isfinite(v);
    }
    uint16_t v;
    memcpy(&v, p, 2);
    if (t == STK_F16) return (v & 0x7c00) == 0x7c00;
    if (t == STK_BF16) return (v & 0x7f80) == 0x7f80;
    return false;
}

/* Zero, -0.0 included for floats. */
static bool elem_zero(const uint8_t *p, stk_dtype t, size_t isz) {
    uint8_t q[8];
    memcpy(q, p, isz);
    if (t == STK_F32 || t == STK_F64 || t == STK_F16 || t == STK_BF16) q[isz - 1] &= 0x7f;
    for (size_t b = 0; b < isz; b++)
        if (q[b]) return false;
    return true;
}

/* An integer element as int64 (uint64 values above INT64_MAX wrap, which
 * keeps differences between neighbours right). */
static int64_t elem_int(const uint8_t *p, stk_dtype t) {
    switch (t) {
    case STK_I8: return (int8_t)p[0];
    case STK_U8: return p[0];
    case STK_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case STK_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case STK_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case STK_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    }
}

/* Whether a row (elems elements) counts as bad for a test: for SOME, a row
 * of NaNs only; for the others, a row with one failing element.  (STEP is
 * a property of neighbouring rows: see count_bad.) */
static STK__ALWAYS_INLINE bool row_bad(const uint8_t *p, stk_dtype t, size_t isz, uint64_t elems,
                                        const stk__rule *r) {
    switch (r->test) {
    case STK_VALID_SOME:
        for (uint64_t k = 0; k < elems; k++, p += isz)
            if (!elem_nan(p, t)) return false;
        return true;
    case STK_VALID_RANGE: {
        int64_t v = elem_int(p, t);
        return v < r->lo || v > r->hi;
    }
    case STK_VALID_OUTSIDE: {
        int64_t v = elem_int(p, t);
        return v >= r->lo && v <= r->hi;
    }
    default:
        for (uint64_t k = 0; k < elems; k++, p += isz) {
            bool bad = r->test == STK_VALID_MASK       ? elem_zero(p, t, isz)
                       : r->test == STK_VALID_FINITE ? elem_nonfinite(p, t)
                                                     : elem_nan(p, t);
            if (bad) return true;
        }
        return false;
    }
}

/* The commonest rule, a float32 target's last row (NOT_NAN, or SOME), in
 * a loop of its own: ok[k] &= the row at p + k * step passes. */
static void last_row_f32(const uint8_t *p, uint64_t step, uint64_t elems, bool some,
                         uint8_t *ok, uint64_t n) {
    for (uint64_t k = 0; k < n; k++, p += step) {
        uint64_t nan = 0;
        for (uint64_t e = 0; e < elems; e++) {
            float v;
            memcpy(&v, p + 4 * e, 4);
            nan += v != v;
        }
        ok[k] &= some ? nan < elems : nan == 0;
    }
}

/* cnt[i] = bad rows among the first i of a record's `rows` (cnt has
 * rows + 1 entries): one pass over the field, so that any window's count
 * is a difference of two entries.  For STEP, row i > 0 is bad when it does
 * not follow row i - 1 by the step (differences taken modulo 2^64, so an
 * overflow cannot pass for the step). */
static void count_bad(const stk__rule *r, const uint8_t *base, stk_dtype t, size_t isz,
                      uint64_t row_bytes, uint64_t rows, uint64_t *cnt) {
    uint64_t elems = row_bytes / isz;
    cnt[0] = 0;
    if (r->test == STK_VALID_STEP) {
        int64_t prev = 0;
        for (uint64_t i = 0; i < rows; i++) {
            int64_t v = elem_int(base + i * row_bytes, t);
            bool bad = i > 0 && (uint64_t)v - (uint64_t)prev != (uint64_t)r->lo;
            cnt[i + 1] = cnt[i] + bad;
            prev = v;
        }
        return;
    }
    if (t == STK_F32 && (r->test == STK_VALID_NOT_NAN || r->test == STK_VALID_SOME)) {
        bool some = r->test == STK_VALID_SOME;
        for (uint64_t i = 0; i < rows; i++) {
            const uint8_t *p = base + i * row_bytes;
            uint64_t nan = 0;
            for (uint64_t e = 0; e < elems; e++) {
                float v;
                memcpy(&v, p + 4 * e, 4);
                nan += v != v;
            }
            cnt[i + 1] = cnt[i] + (some ? nan == elems : nan != 0);
        }
        return;
    }
    for (uint64_t i = 0; i < rows; i++)
        cnt[i + 1] = cnt[i] + row_bad(base + i * row_bytes, t, isz, elems, r);
}

/* Whether the window ending before row `end` passes the rule, from its
 * counts: m rows tested; STEP looks at the m - 1 steps into rows
 * end - m + 1 .. end - 1, SOME needs one row that is not all NaN, the
 * others no bad row. */
static bool window_ok(const stk__rule *r, const uint64_t *cnt, uint64_t end, uint64_t m) {
    if (r->test == STK_VALID_STEP) return cnt[end] == cnt[end - m + 1];
    uint64_t bad = cnt[end] - cnt[end - m];
    return r->test == STK_VALID_SOME ? bad < m : bad == 0;
}

static int push_run(stk__space *sp, uint64_t *cap, uint64_t t0, uint64_t n, uint64_t cum) {
    if (sp->nruns == *cap) {
        uint64_t c = *cap ? *cap * 2 : 1024;
        uint64_t *a = stk__realloc(sp->run_t0, c * 8), *b = a ? stk__realloc(sp->run_n, c * 8) : NULL;
        if (a) sp->run_t0 = a;
        if (b) sp->run_n = b;
        uint64_t *d = b ? stk__realloc(sp->run_cum, c * 8) : NULL;
        if (!d) return -ENOMEM;
        sp->run_cum = d;
        *cap = c;
    }
    sp->run_t0[sp->nruns] = t0;
    sp->run_n[sp->nruns] = n;
    sp->run_cum[sp->nruns] = cum;
    sp->nruns++;
    return 0;
}

/* The bytes of a rule's field in record r: its rows must be the time
 * axis's.  A remote dataset's bytes are all there by now (the loader asked
 * for them), though its extents do not point at them. */
static int rule_rows(const stk_dataset *ds, const stk__rule *r, uint64_t rec, uint64_t rows,
                     const uint8_t **base, stk_error *err) {
    stk_extent x;
    stk_dataset_get(ds, rec, r->field, &x, NULL);
    const stk_field *f = &ds->fields[r->field];
    size_t s = stk__dataset_shard_of(ds, rec);
    if (x.rows != rows)
        return stk__err(err, STK_ESCHEMA,
                        "%s: record %llu: %s '%s' has %llu rows but the time axis has %llu",
                        ds->shards[s].path, (unsigned long long)rec, r->opt, f->name,
                        (unsigned long long)x.rows, (unsigned long long)rows);
    *base = x.data        ? (const uint8_t *)x.data
            : ds->caps.lazy ? ds->shards[x.shard].map + x.offset
                            : NULL;
    if (!*base && rows)
        return stk__err(err, -EINVAL,
                        "%s: %s '%s' is converted as it is read, so its values cannot be "
                        "scanned in place",
                        ds->shards[s].path, r->opt, f->name);
    return 0;
}

/* STEP with step 0: the smallest positive difference between consecutive
 * rows anywhere in the dataset (0 if there is none). */
static int infer_step(const stk_dataset *ds, const stk__space_params *p, stk__rule *r,
                      stk_error *err) {
    const stk__fieldinfo *fi = &ds->info[r->field];
    stk_dtype t = ds->fields[r->field].dtype;
    uint64_t best = 0;
    for (uint64_t rec = 0; rec < ds->nrec; rec++) {
        uint64_t rows = rows_of(ds, rec, p->time_fields[0]);
        const uint8_t *base;
        int rc = rule_rows(ds, r, rec, rows, &base, err);
        if (rc) return rc;
        for (uint64_t i = 1; i < rows; i++) {
            int64_t a = elem_int(base + (i - 1) * fi->row_bytes, t);
            int64_t b = elem_int(base + i * fi->row_bytes, t);
            if (b > a && (!best || (uint64_t)b - (uint64_t)a < best)) best = (uint64_t)b - (uint64_t)a;
        }
    }
    r->lo = (int64_t)best;
    return 0;
}

int stk__space_build(stk__space *sp, const stk_dataset *ds, const stk__space_params *p,
                     stk_error *err) {
    memset(sp, 0, sizeof *sp);
    sp->nrec = ds->nrec;
    if (!p->window) {
        sp->n = ds->nrec;
        return 0;
    }
    sp->windows = true;
    sp->L = p->window;
    sp->S = p->stride ? p->stride : 1;
    sp->prefix = stk__malloc((ds->nrec + 1) * 8);
    if (!sp->prefix) return stk__err(err, -ENOMEM, "out of memory");
    stk__rule rules[STK__MAX_RULES];
    size_t nrules = 0;
    for (size_t i = 0; i < p->nrules && nrules < STK__MAX_RULES; i++)
        if (p->rules[i].test != STK_VALID_ALL) rules[nrules++] = p->rules[i];
    bool rule = nrules > 0;
    uint64_t run_cap = 0, cnt_cap = 0, ok_cap = 0;
    uint64_t *cnt = NULL;
    uint8_t *ok = NULL;
    int rc = 0;
    if (rule && !(sp->run_first = stk__malloc((ds->nrec + 1) * 8))) goto oom;
    for (size_t i = 0; i < nrules; i++)
        if (rules[i].test == STK_VALID_STEP && rules[i].lo == 0 &&
            (rc = infer_step(ds, p, &rules[i], err)))
            goto fail;
    uint64_t total = 0;
    uint64_t longest = 0;
    for (uint64_t r = 0; r < ds->nrec; r++) {
        sp->prefix[r] = total;
        uint64_t rows = rows_of(ds, r, p->time_fields[0]);
        for (size_t k = 1; k < p->ntime; k++) {
            uint64_t other = rows_of(ds, r, p->time_fields[k]);
            if (other != rows) {
                size_t s = stk__dataset_shard_of(ds, r);
                rc = stk__err(err, STK_ESCHEMA,
                              "%s: record %llu: time fields '%s' and '%s' have %llu and "
                              "%llu rows; windows need them equal",
                              ds->shards[s].path, (unsigned long long)r,
                              ds->fields[p->time_fields[0]].name,
                              ds->fields[p->time_fields[k]].name, (unsigned long long)rows,
                              (unsigned long long)other);
                goto fail;
            }
        }
        longest = STK__MAX(longest, rows);
        uint64_t nstarts = rows >= sp->L ? (rows - sp->L) / sp->S + 1 : 0;
        if (!rule) {
            total += nstarts;
            continue;
        }
        sp->run_first[r] = sp->nruns;
        if (!nstarts) continue;
        if (rows + 1 > cnt_cap) {
            uint64_t c = STK__MAX(rows + 1, cnt_cap * 2);
            uint64_t *a = stk__realloc(cnt, c * 8);
            if (!a) goto oom;
            cnt = a;
            cnt_cap = c;
        }
        if (nstarts > ok_cap) {
            uint64_t c = STK__MAX(nstarts, ok_cap * 2);
            uint8_t *a = stk__realloc(ok, c);
            if (!a) goto oom;
            ok = a;
            ok_cap = c;
        }
        memset(ok, 1, nstarts);
        /* Per rule: one pass over the record's rows for the counts, then
         * O(1) a window; or, where the windows test fewer rows in all than
         * the record has (the last row, stride 1), those rows directly. */
        for (size_t i = 0; i < nrules; i++) {
            const stk__rule *ru = &rules[i];
            const uint8_t *base;
            if ((rc = rule_rows(ds, ru, r, rows, &base, err))) goto fail;
            const stk__fieldinfo *vi = &ds->info[ru->field];
            stk_dtype dt = ds->fields[ru->field].dtype;
            uint64_t m = ru->last && ru->last < sp->L ? ru->last : sp->L;
            uint64_t elems = vi->row_bytes / vi->itemsize;
            if (m == 1 && dt == STK_F32 &&
                (ru->test == STK_VALID_NOT_NAN || ru->test == STK_VALID_SOME)) {
                last_row_f32(base + (sp->L - 1) * vi->row_bytes, sp->S * vi->row_bytes, elems,
                             ru->test == STK_VALID_SOME, ok, nstarts);
                continue;
            }
            if (ru->test != STK_VALID_STEP && m * nstarts <= rows) {
                for (uint64_t k = 0; k < nstarts; k++) {
                    if (!ok[k]) continue;
                    uint64_t end = k * sp->S + sp->L, bad = 0;
                    for (uint64_t j = end - m; j < end; j++)
                        bad += row_bad(base + j * vi->row_bytes, dt, vi->itemsize, elems, ru);
                    ok[k] = ru->test == STK_VALID_SOME ? bad < m : bad == 0;
                }
                continue;
            }
            count_bad(ru, base, dt, vi->itemsize, vi->row_bytes, rows, cnt);
            for (uint64_t k = 0; k < nstarts; k++)
                ok[k] &= window_ok(ru, cnt, k * sp->S + sp->L, m);
        }
        uint64_t cum = 0, run_t0 = 0, run_n = 0;
        for (uint64_t k = 0; k < nstarts; k++) {
            if (ok[k]) {
                if (!run_n) run_t0 = k * sp->S;
                run_n++;
            } else if (run_n) {
                if (push_run(sp, &run_cap, run_t0, run_n, cum)) goto oom;
                cum += run_n;
                run_n = 0;
            }
        }
        if (run_n) {
            if (push_run(sp, &run_cap, run_t0, run_n, cum)) goto oom;
            cum += run_n;
        }
        total += cum;
    }
    stk__free(cnt);
    stk__free(ok);
    cnt = NULL;
    ok = NULL;
    sp->prefix[ds->nrec] = total;
    if (rule) sp->run_first[ds->nrec] = sp->nruns;
    sp->n = total;
    if (ds->nrec && longest < sp->L) {
        rc = stk__err(err, -EINVAL,
                      "window: %llu rows is longer than every record (the longest has %llu)",
                      (unsigned long long)sp->L, (unsigned long long)longest);
        goto fail;
    }
    return 0;
oom:
    rc = stk__err(err, -ENOMEM, "out of memory");
fail:
    stk__free(cnt);
    stk__free(ok);
    stk__space_free(sp);
    return rc;
}

/* The last index in a[lo, hi) whose value is <= x (a is non-decreasing,
 * a[lo] <= x). */
static uint64_t floor_search(const uint64_t *a, uint64_t lo, uint64_t hi, uint64_t x) {
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}

void stk__space_locate(const stk__space *sp, uint64_t id, uint64_t *rec, uint64_t *t) {
    if (!sp->windows) {
        *rec = id;
        *t = 0;
        return;
    }
    /* Records with no windows share a prefix value with the next record:
     * take the last record whose prefix is <= id, which has windows. */
    uint64_t r = floor_search(sp->prefix, 0, sp->nrec, id);
    uint64_t k = id - sp->prefix[r];
    *rec = r;
    if (!sp->run_first) {
        *t = k * sp->S;
        return;
    }
    uint64_t a = sp->run_first[r], b = sp->run_first[r + 1];
    uint64_t j = floor_search(sp->run_cum, a, b, k);
    *t = sp->run_t0[j] + (k - sp->run_cum[j]) * sp->S;
}
