/*
 * space.c: the sample space.  For records, sample i is record i.  For
 * windows, record r contributes the valid starts t = 0, S, 2S, ... with
 * t + L <= rows(r); prefix sums over records number them, so finding the
 * record of a sample is a binary search over records.  A validity rule
 * removes starts; the valid ones are kept as runs of consecutive starts,
 * so memory grows with records and runs, never with samples.
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

/* Is row `row` of the valid field acceptable under the rule? */
static bool row_ok(const uint8_t *p, stk_dtype t, uint64_t elems, stk_valid rule) {
    size_t isz = stk_dtype_size(t);
    for (uint64_t k = 0; k < elems; k++, p += isz) {
        if (rule == STK_VALID_MASK) {
            bool zero = true;
            for (size_t b = 0; b < isz; b++) zero &= p[b] == 0;
            /* -0.0 counts as zero for float masks. */
            if (!zero && (t == STK_F32 || t == STK_F64 || t == STK_F16 || t == STK_BF16)) {
                uint8_t q[8];
                memcpy(q, p, isz);
                q[isz - 1] &= 0x7f;
                zero = true;
                for (size_t b = 0; b < isz; b++) zero &= q[b] == 0;
            }
            if (zero) return false;
        } else {
            bool nan = false;
            if (t == STK_F32) {
                float v;
                memcpy(&v, p, 4);
                nan = isnan(v);
            } else if (t == STK_F64) {
                double v;
                memcpy(&v, p, 8);
                nan = isnan(v);
            } else if (t == STK_F16) {
                uint16_t v;
                memcpy(&v, p, 2);
                nan = (v & 0x7c00) == 0x7c00 && (v & 0x03ff);
            } else if (t == STK_BF16) {
                uint16_t v;
                memcpy(&v, p, 2);
                nan = (v & 0x7f80) == 0x7f80 && (v & 0x007f);
            }
            if (nan) return false;
        }
    }
    return true;
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
    bool rule = p->valid != STK_VALID_ALL && p->valid_field >= 0;
    uint64_t run_cap = 0;
    if (rule && !(sp->run_first = stk__malloc((ds->nrec + 1) * 8))) {
        stk__space_free(sp);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    uint64_t total = 0;
    uint64_t longest = 0;
    for (uint64_t r = 0; r < ds->nrec; r++) {
        sp->prefix[r] = total;
        uint64_t rows = rows_of(ds, r, p->time_fields[0]);
        for (size_t k = 1; k < p->ntime; k++) {
            uint64_t other = rows_of(ds, r, p->time_fields[k]);
            if (other != rows) {
                size_t s = stk__dataset_shard_of(ds, r);
                int rc = stk__err(err, STK_ESCHEMA,
                                  "%s: record %llu: time fields '%s' and '%s' have %llu and "
                                  "%llu rows; windows need them equal",
                                  ds->shards[s].path, (unsigned long long)r,
                                  ds->fields[p->time_fields[0]].name,
                                  ds->fields[p->time_fields[k]].name, (unsigned long long)rows,
                                  (unsigned long long)other);
                stk__space_free(sp);
                return rc;
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
        stk_extent x;
        stk_dataset_get(ds, r, (size_t)p->valid_field, &x, NULL);
        const stk_field *vf = &ds->fields[p->valid_field];
        const stk__fieldinfo *vi = &ds->info[p->valid_field];
        if (x.rows != rows) {
            size_t s = stk__dataset_shard_of(ds, r);
            int rc = stk__err(err, STK_ESCHEMA,
                              "%s: record %llu: valid_field '%s' has %llu rows but the time "
                              "axis has %llu",
                              ds->shards[s].path, (unsigned long long)r, vf->name,
                              (unsigned long long)x.rows, (unsigned long long)rows);
            stk__space_free(sp);
            return rc;
        }
        /* A remote dataset's bytes are all there by now (the loader asked
         * for them), though its extents do not point at them. */
        const uint8_t *base = x.data   ? (const uint8_t *)x.data
                              : ds->caps.lazy ? ds->shards[x.shard].map + x.offset
                                              : NULL;
        if (!base) {
            size_t s = stk__dataset_shard_of(ds, r);
            stk__space_free(sp);
            return stk__err(err, -EINVAL,
                            "%s: valid_field '%s' is converted as it is read, so its values "
                            "cannot be scanned in place",
                            ds->shards[s].path, vf->name);
        }
        uint64_t elems = vi->row_bytes / vi->itemsize;
        uint64_t cum = 0, run_t0 = 0, run_n = 0;
        for (uint64_t k = 0; k < nstarts; k++) {
            uint64_t t = k * sp->S;
            bool ok = row_ok(base + (t + sp->L - 1) * vi->row_bytes, vf->dtype, elems, p->valid);
            if (ok) {
                if (!run_n) run_t0 = t;
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
    sp->prefix[ds->nrec] = total;
    if (rule) sp->run_first[ds->nrec] = sp->nruns;
    sp->n = total;
    if (ds->nrec && longest < sp->L) {
        int rc = stk__err(err, -EINVAL,
                          "window: %llu rows is longer than every record (the longest has %llu)",
                          (unsigned long long)sp->L, (unsigned long long)longest);
        stk__space_free(sp);
        return rc;
    }
    return 0;
oom:
    stk__space_free(sp);
    return stk__err(err, -ENOMEM, "out of memory");
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
