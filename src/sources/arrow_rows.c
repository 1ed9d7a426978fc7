/*
 * arrow_rows.c: the rows of an Arrow stream's batches: values copied into
 * records (nulls as NaN where the dtype has one), and in group mode the
 * rows gathered per key (integers, or strings interned), sorted by the
 * order column, checked for static fields and written one record per
 * group.
 */
#define _GNU_SOURCE
#include "arrow.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool valid_at(const struct ArrowArray *a, int64_t i) {
    if (a->null_count == 0 || !a->buffers[0]) return true;
    int64_t j = a->offset + i;
    return (((const uint8_t *)a->buffers[0])[j >> 3] >> (j & 7)) & 1;
}

static void store_nan(uint8_t *p, stk_dtype t) {
    if (t == STK_F32) {
        float v = NAN;
        memcpy(p, &v, 4);
    } else if (t == STK_F64) {
        double v = NAN;
        memcpy(p, &v, 8);
    } else {
        uint16_t v = 0x7e00;
        memcpy(p, &v, 2);
    }
}

/* Copies `count` elements starting at element `first` of a primitive (or
 * bool) array into dst, turning nulls into NaN (floats) or failing. */
static int copy_elems(const struct ArrowArray *a, const col *c, int64_t first, int64_t count,
                      uint8_t *dst, stk_error *err, uint64_t row) {
    if (c->kind == K_BOOL) {
        const uint8_t *bits = a->buffers[1];
        for (int64_t i = 0; i < count; i++) {
            int64_t j = a->offset + first + i;
            if (!valid_at(a, first + i))
                return stk__err(err, -EINVAL, "column '%s': row %llu is null; a boolean cannot be",
                                c->name, (unsigned long long)row);
            dst[i] = (bits[j >> 3] >> (j & 7)) & 1;
        }
        return 0;
    }
    /* (An array of no values, a table whose lists are all empty, may have
     * no data buffer at all: nothing to copy, and no pointer to add to.) */
    if (count <= 0) return 0;
    const uint8_t *src = (const uint8_t *)a->buffers[1] + (uint64_t)(a->offset + first) * c->isz;
    memcpy(dst, src, (size_t)count * c->isz);
    if (a->null_count) {
        for (int64_t i = 0; i < count; i++) {
            if (valid_at(a, first + i)) continue;
            if (!c->is_float)
                return stk__err(err, -EINVAL,
                                "column '%s': row %llu is null; nulls are allowed only in "
                                "float columns (they become NaN)",
                                c->name, (unsigned long long)row);
            store_nan(dst + (uint64_t)i * c->isz, c->dtype);
        }
    }
    return 0;
}

/* Where row r of column c's array a has its value: the array itself, or
 * for a dictionary-encoded column the dictionary and the row's index into
 * it.  *a is NULL for a null index. */
static int resolve(const struct ArrowArray **a, const col *c, int64_t *r, uint64_t row,
                   stk_error *err) {
    if (!c->dict) return 0;
    const struct ArrowArray *ia = *a;
    if (!valid_at(ia, *r)) {
        *a = NULL;
        return 0;
    }
    const uint8_t *p = (const uint8_t *)ia->buffers[1] + (uint64_t)(ia->offset + *r) * c->ixsz;
    int64_t ix;
    switch (c->ixsz) {
    case 1: ix = c->ixunsigned ? (int64_t)*p : (int64_t)(int8_t)*p; break;
    case 2: { uint16_t v; memcpy(&v, p, 2); ix = c->ixunsigned ? (int64_t)v : (int64_t)(int16_t)v; break; }
    case 4: { uint32_t v; memcpy(&v, p, 4); ix = c->ixunsigned ? (int64_t)v : (int64_t)(int32_t)v; break; }
    default: memcpy(&ix, p, 8); break;
    }
    const struct ArrowArray *d = ia->dictionary;
    if (!d || ix < 0 || ix >= d->length)
        return stk__err(err, -EINVAL,
                        "column '%s': row %llu: dictionary index %lld is outside its dictionary "
                        "(%lld values)",
                        c->name, (unsigned long long)row, (long long)ix,
                        (long long)(d ? d->length : 0));
    *a = d;
    *r = ix;
    return 0;
}

/* One element of a scalar column (row r of a) into dst, dictionaries
 * decoded. */
static int copy_one(const struct ArrowArray *a, const col *c, int64_t r, uint8_t *dst,
                    stk_error *err, uint64_t row) {
    int rc = resolve(&a, c, &r, row, err);
    if (rc) return rc;
    if (!a) {
        if (!c->is_float)
            return stk__err(err, -EINVAL,
                            "column '%s': row %llu is null; nulls are allowed only in float "
                            "columns (they become NaN)",
                            c->name, (unsigned long long)row);
        store_nan(dst, c->dtype);
        return 0;
    }
    return copy_elems(a, c, r, 1, dst, err, row);
}

/* Where row r's list lies in the child array of list column c: [*b, *e). */
static int list_at(const struct ArrowArray *a, const col *c, int64_t r, uint64_t grow,
                   int64_t *b, int64_t *e, stk_error *err) {
    if (!valid_at(a, r))
        return stk__err(err, -EINVAL, "column '%s': row %llu is a null list", c->name,
                        (unsigned long long)grow);
    int64_t i = a->offset + r;
    if (c->kind == K_LIST) {
        const int32_t *off = a->buffers[1];
        *b = off[i];
        *e = off[i + 1];
    } else if (c->kind == K_LLIST) {
        const int64_t *off = a->buffers[1];
        *b = off[i];
        *e = off[i + 1];
    } else if (c->kind == K_LVIEW) { /* offsets, then sizes */
        const int32_t *off = a->buffers[1], *size = a->buffers[2];
        *b = off[i];
        *e = *b + size[i];
    } else {
        const int64_t *off = a->buffers[1], *size = a->buffers[2];
        *b = off[i];
        *e = *b + size[i];
    }
    return 0;
}

/* The bytes of row r of a string or binary array (offsets, views, or a
 * fixed size of `width` bytes). */
static void str_at(const struct ArrowArray *a, int kind, int64_t width, int64_t r, const char **p,
                   uint64_t *n) {
    int64_t i = a->offset + r;
    if (kind == K_FBIN) {
        *n = (uint64_t)width;
        *p = (const char *)a->buffers[1] + (uint64_t)i * (uint64_t)width;
    } else if (kind == K_STR) {
        const int32_t *off = a->buffers[1];
        *p = (const char *)a->buffers[2] + off[i];
        *n = (uint64_t)(off[i + 1] - off[i]);
    } else if (kind == K_LSTR) {
        const int64_t *off = a->buffers[1];
        *p = (const char *)a->buffers[2] + off[i];
        *n = (uint64_t)(off[i + 1] - off[i]);
    } else {
        /* A view: 16 bytes, the length, then the bytes themselves when
         * they fit in 12, else a 4-byte prefix, the data buffer's number
         * and the offset in it. */
        const uint8_t *v = (const uint8_t *)a->buffers[1] + (uint64_t)i * 16;
        int32_t len, buf, off;
        memcpy(&len, v, 4);
        *n = (uint64_t)len;
        if (len <= 12) {
            *p = (const char *)v + 4;
        } else {
            memcpy(&buf, v + 8, 4);
            memcpy(&off, v + 12, 4);
            *p = (const char *)a->buffers[2 + buf] + off;
        }
    }
}

/* A list's child elements [b, e) as the leaf's elements: fixed-size lists
 * inside the list (col.inner) step down to the numbers, *leaf being the
 * array that holds them.  Fails on a null inner list. */
static int leaf_range(const struct ArrowArray *child, const col *c, int64_t *b, int64_t *e,
                      const struct ArrowArray **leaf, uint64_t grow, stk_error *err) {
    for (int d = 0; d < c->ninner; d++) {
        if (child->null_count)
            for (int64_t i = *b; i < *e; i++)
                if (!valid_at(child, i))
                    return stk__err(err, -EINVAL, "column '%s': row %llu holds a null list",
                                    c->name, (unsigned long long)grow);
        *b = (child->offset + *b) * c->inner[d];
        *e = (child->offset + *e) * c->inner[d];
        child = child->children[0];
    }
    *leaf = child;
    return 0;
}

/* The row's bytes of field f (one row of the stream) into dst; for lists
 * sets *rows.  dst must hold row_bytes (or the list's bytes). */
int stk__arrow_field_row(ctx *c, afield *f, struct ArrowArray *batch, int64_t r, uint64_t grow,
                     uint8_t **dst, uint64_t *rows, stk_error *err) {
    const col *c0 = &c->cols[f->cols[0]];
    const struct ArrowArray *a0 = batch->children[f->cols[0]];
    if (is_str(f->kind)) {
        /* Row mode only: the string lands in the field's own buffer. */
        int rc = resolve(&a0, c0, &r, grow, err);
        if (rc) return rc;
        if (!a0 || !valid_at(a0, r))
            return stk__err(err, -EINVAL,
                            "column '%s': row %llu is null; a %s cannot be (fill the nulls "
                            "first, e.g. pyarrow.compute.fill_null(column, \"\"))",
                            c0->name, (unsigned long long)grow, c0->type);
        const char *p;
        uint64_t n;
        str_at(a0, c0->kind, c0->width, r, &p, &n);
        if (stk__arrow_grow_bytes(&f->data, &f->cap, n + 1))
            return stk__err(err, -ENOMEM, "out of memory");
        if (n) memcpy(f->data, p, (size_t)n);
        *dst = f->data;
        *rows = n;
        return 0;
    }
    if (is_list(f->kind)) {
        int64_t b, e;
        int rc = list_at(a0, c0, r, grow, &b, &e, err);
        if (rc) return rc;
        *rows = (uint64_t)(e - b);
        /* Row mode only: the list lands in the field's own buffer. */
        if (stk__arrow_grow_bytes(&f->data, &f->cap,
                                  (uint64_t)(e - b) * c0->isz * (uint64_t)c0->inner_n * f->ncols + 1))
            return stk__err(err, -ENOMEM, "out of memory");
        *dst = f->data;
        if (c0->ninner) {
            const struct ArrowArray *leaf;
            if ((rc = leaf_range(a0->children[0], c0, &b, &e, &leaf, grow, err))) return rc;
            return copy_elems(leaf, c0, b, e - b, f->data, err, grow);
        }
        if (f->ncols == 1) return copy_elems(a0->children[0], c0, b, e - b, f->data, err, grow);
        /* Several list columns stacked: row k of the record holds element
         * k of each column's list; the lists must have one length. */
        for (size_t k = 0; k < f->ncols; k++) {
            const col *ck = &c->cols[f->cols[k]];
            const struct ArrowArray *ak = batch->children[f->cols[k]];
            int64_t bk, ek;
            if ((rc = list_at(ak, ck, r, grow, &bk, &ek, err))) return rc;
            if (ek - bk != e - b)
                return stk__err(err, -EINVAL,
                                "field '%s': row %llu: column '%s' holds %lld elements but '%s' "
                                "holds %lld; stacked list columns need lists of one length",
                                f->name, (unsigned long long)grow, ck->name, (long long)(ek - bk),
                                c0->name, (long long)(e - b));
            for (int64_t t = 0; t < ek - bk; t++) {
                rc = copy_elems(ak->children[0], ck, bk + t, 1,
                                f->data + ((uint64_t)t * f->ncols + k) * c0->isz, err, grow);
                if (rc) return rc;
            }
        }
        return 0;
    }
    /* Scalars stacked from several columns are a vector of ncols. */
    *rows = f->kind == K_FIXED ? (uint64_t)c0->width : f->ncols > 1 ? f->ncols : 1;
    if (f->kind == K_FIXED) {
        if (!valid_at(a0, r))
            return stk__err(err, -EINVAL, "column '%s': row %llu is null", c0->name,
                            (unsigned long long)grow);
        int64_t b = (a0->offset + r) * c0->width, e = b + c0->width;
        const struct ArrowArray *leaf = a0->children[0];
        if (c0->ninner) {
            int rc = leaf_range(a0->children[0], c0, &b, &e, &leaf, grow, err);
            if (rc) return rc;
        }
        return copy_elems(leaf, c0, b, e - b, *dst, err, grow);
    }
    for (size_t k = 0; k < f->ncols; k++) {
        int rc = copy_one(batch->children[f->cols[k]], &c->cols[f->cols[k]], r,
                          *dst + k * c0->isz, err, grow);
        if (rc) return rc;
    }
    return 0;
}

/* ---- group keys ---- */

static uint64_t str_hash(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static int intern(ctx *c, const char *p, uint64_t n, int64_t *id) {
    if ((uint64_t)c->nstr * 2 >= c->table_cap) {
        uint64_t cap = c->table_cap ? c->table_cap * 2 : 1024;
        int64_t *t = stk__malloc(cap * sizeof *t);
        if (!t) return -ENOMEM;
        for (uint64_t i = 0; i < cap; i++) t[i] = -1;
        for (int64_t s = 0; s < c->nstr; s++) {
            uint64_t h = str_hash(c->arena + c->str_off[s], c->str_len[s]) & (cap - 1);
            while (t[h] >= 0) h = (h + 1) & (cap - 1);
            t[h] = s;
        }
        stk__free(c->table);
        c->table = t;
        c->table_cap = cap;
    }
    uint64_t h = str_hash(p, n) & (c->table_cap - 1);
    while (c->table[h] >= 0) {
        int64_t s = c->table[h];
        if (c->str_len[s] == n && (n == 0 || memcmp(c->arena + c->str_off[s], p, (size_t)n) == 0)) {
            *id = s;
            return 0;
        }
        h = (h + 1) & (c->table_cap - 1);
    }
    if (c->nstr == c->str_cap) {
        int64_t cap = c->str_cap ? c->str_cap * 2 : 1024;
        uint64_t *a = stk__realloc(c->str_off, (size_t)cap * 8);
        if (a) c->str_off = a;
        uint64_t *b = a ? stk__realloc(c->str_len, (size_t)cap * 8) : NULL;
        if (!b) return -ENOMEM;
        c->str_len = b;
        c->str_cap = cap;
    }
    if (stk__arrow_grow_bytes((uint8_t **)&c->arena, &c->arena_cap, c->arena_len + n + 1)) return -ENOMEM;
    if (n) memcpy(c->arena + c->arena_len, p, (size_t)n);
    c->str_off[c->nstr] = c->arena_len;
    c->str_len[c->nstr] = n;
    c->arena_len += n;
    c->table[h] = c->nstr;
    *id = c->nstr++;
    return 0;
}

static int key_of(ctx *c, const struct ArrowArray *a, int64_t r, int64_t *out, uint64_t grow,
                  stk_error *err) {
    const col *g = &c->cols[c->group_col];
    int rc = resolve(&a, g, &r, grow, err);
    if (rc) return rc;
    if (!a || !valid_at(a, r))
        return stk__err(err, -EINVAL, "group_by: column '%s' row %llu is null", g->name,
                        (unsigned long long)grow);
    if (g->kind == K_PRIM) {
        const uint8_t *p = (const uint8_t *)a->buffers[1] + (uint64_t)(a->offset + r) * g->isz;
        int64_t v = 0;
        switch (g->dtype) {
        case STK_I8: v = *(const int8_t *)p; break;
        case STK_U8: v = *p; break;
        case STK_I16: { int16_t x; memcpy(&x, p, 2); v = x; break; }
        case STK_U16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
        case STK_I32: { int32_t x; memcpy(&x, p, 4); v = x; break; }
        case STK_U32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
        default: memcpy(&v, p, 8); break; /* i64, or u64's bits (compared unsigned) */
        }
        *out = v;
        return 0;
    }
    const char *p;
    uint64_t n;
    str_at(a, g->kind, g->width, r, &p, &n);
    if (intern(c, p, n, out)) return stk__err(err, -ENOMEM, "out of memory");
    return 0;
}

/* Group mode: row r of string field f as the id of its interned bytes (8
 * bytes at dst), so that equal strings have equal rows and a group's rows
 * compare bytewise as any field's do; the statics keep one a group. */
static int str_id(ctx *c, const afield *f, const struct ArrowArray *batch, int64_t r,
                  uint64_t grow, uint8_t *dst, stk_error *err) {
    const col *c0 = &c->cols[f->cols[0]];
    const struct ArrowArray *a = batch->children[f->cols[0]];
    int rc = resolve(&a, c0, &r, grow, err);
    if (rc) return rc;
    if (!a || !valid_at(a, r))
        return stk__err(err, -EINVAL,
                        "column '%s': row %llu is null; a %s cannot be (fill the nulls first, "
                        "e.g. pyarrow.compute.fill_null(column, \"\"))",
                        c0->name, (unsigned long long)grow, c0->type);
    const char *p;
    uint64_t n;
    str_at(a, c0->kind, c0->width, r, &p, &n);
    int64_t id;
    if (intern(c, p, n, &id)) return stk__err(err, -ENOMEM, "out of memory");
    memcpy(dst, &id, 8);
    return 0;
}

int stk__arrow_accumulate(ctx *c, struct ArrowArray *batch, uint64_t base, stk_error *err) {
    uint64_t n = (uint64_t)batch->length, need = c->nrows + n;
    if (need > c->rows_cap) {
        uint64_t cap = STK__MAX(need, c->rows_cap * 2 + 1024);
        int64_t *k = stk__realloc(c->key, cap * 8);
        if (k) c->key = k;
        int64_t *oi = k ? stk__realloc(c->ord_i, cap * 8) : NULL;
        if (oi) c->ord_i = oi;
        double *od = oi ? stk__realloc(c->ord_d, cap * 8) : NULL;
        if (!od) return stk__err(err, -ENOMEM, "out of memory");
        c->ord_d = od;
        c->rows_cap = cap;
    }
    for (size_t i = 0; i < c->nf; i++) {
        afield *f = &c->f[i];
        if (stk__arrow_grow_bytes(&f->data, &f->cap, f->len + n * f->row_bytes))
            return stk__err(err, -ENOMEM, "out of memory");
    }
    const struct ArrowArray *ga = batch->children[c->group_col];
    const struct ArrowArray *oa = c->order_col >= 0 ? batch->children[c->order_col] : NULL;
    const col *oc = c->order_col >= 0 ? &c->cols[c->order_col] : NULL;
    for (uint64_t r = 0; r < n; r++) {
        int rc = key_of(c, ga, (int64_t)r, &c->key[c->nrows], base + r, err);
        if (rc) return rc;
        if (oa) {
            if (!valid_at(oa, (int64_t)r))
                return stk__err(err, -EINVAL, "order_by: column '%s' row %llu is null", oc->name,
                                (unsigned long long)(base + r));
            uint8_t v[8] = {0};
            int rc2 = copy_one(oa, oc, (int64_t)r, v, err, base + r);
            if (rc2) return rc2;
            if (oc->is_float) {
                double d = 0;
                if (oc->dtype == STK_F64) memcpy(&d, v, 8);
                else if (oc->dtype == STK_F32) {
                    float x;
                    memcpy(&x, v, 4);
                    d = x;
                }
                c->ord_d[c->nrows] = d;
            } else {
                int64_t x = 0;
                size_t isz = oc->isz;
                memcpy(&x, v, isz);
                if (isz < 8 && (oc->dtype == STK_I8 || oc->dtype == STK_I16 || oc->dtype == STK_I32)) {
                    int shift = (int)(64 - 8 * isz);
                    x = (int64_t)((uint64_t)x << shift) >> shift; /* sign-extend */
                }
                c->ord_i[c->nrows] = x;
            }
        } else {
            c->ord_i[c->nrows] = (int64_t)c->nrows;
        }
        for (size_t i = 0; i < c->nf; i++) {
            afield *f = &c->f[i];
            uint8_t *dst = f->data + f->len;
            uint64_t rows;
            if (is_str(f->kind))
                rc = str_id(c, f, batch, (int64_t)r, base + r, dst, err);
            else
                rc = stk__arrow_field_row(c, f, batch, (int64_t)r, base + r, &dst, &rows, err);
            if (rc) return rc;
            f->len += f->row_bytes;
        }
        c->nrows++;
    }
    return 0;
}

static ctx *sort_ctx; /* qsort has no context argument in C11 */

static int cmp_rows(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    const ctx *c = sort_ctx;
    int64_t ka = c->key[a], kb = c->key[b];
    if (ka != kb) {
        if (c->cols[c->group_col].kind == K_PRIM) {
            if (c->cols[c->group_col].dtype == STK_U64)
                return (uint64_t)ka < (uint64_t)kb ? -1 : 1;
            return ka < kb ? -1 : 1;
        }
        uint64_t la = c->str_len[ka], lb = c->str_len[kb];
        int r = memcmp(c->arena + c->str_off[ka], c->arena + c->str_off[kb], (size_t)STK__MIN(la, lb));
        if (r) return r;
        return la < lb ? -1 : 1;
    }
    if (c->order_col >= 0 && c->cols[c->order_col].is_float) {
        if (c->ord_d[a] != c->ord_d[b]) return c->ord_d[a] < c->ord_d[b] ? -1 : 1;
    } else if (c->ord_i[a] != c->ord_i[b]) {
        return c->ord_i[a] < c->ord_i[b] ? -1 : 1;
    }
    return a < b ? -1 : a > b; /* stable */
}

/* The rows in record order: by key, then by the order column. */
uint64_t *stk__arrow_sort_rows(ctx *c) {
    uint64_t *idx = stk__malloc((size_t)STK__MAX(c->nrows, (uint64_t)1) * 8);
    if (!idx) return NULL;
    for (uint64_t i = 0; i < c->nrows; i++) idx[i] = i;
    static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_lock);
    sort_ctx = c;
    qsort(idx, (size_t)c->nrows, 8, cmp_rows);
    pthread_mutex_unlock(&sort_lock);
    return idx;
}

void stk__arrow_order_report(const ctx *c, const uint64_t *idx, stk_arrow_report *r) {
    memset(r, 0, sizeof *r);
    for (uint64_t i = 0; i < c->nrows; i++)
        r->groups += i == 0 || c->key[idx[i]] != c->key[idx[i - 1]];
    if (c->order_col < 0 || c->cols[c->order_col].is_float) return;
    /* Two passes over the sorted rows: the step, then what is off it.
     * Differences are taken in unsigned arithmetic (the rows are sorted,
     * so each is the true distance even across the int64 range). */
    uint64_t step = 0;
    for (uint64_t i = 1; i < c->nrows; i++) {
        uint64_t a = idx[i - 1], b = idx[i];
        if (c->key[a] != c->key[b]) continue;
        uint64_t d = (uint64_t)c->ord_i[b] - (uint64_t)c->ord_i[a];
        if (d && (!step || d < step)) step = d;
    }
    r->step = (int64_t)STK__MIN(step, (uint64_t)INT64_MAX);
    bool gap = false, rep = false;
    for (uint64_t i = 1; i <= c->nrows; i++) {
        if (i == c->nrows || c->key[idx[i]] != c->key[idx[i - 1]]) {
            r->gap_groups += gap;
            r->repeat_groups += rep;
            gap = rep = false;
            continue;
        }
        uint64_t d = (uint64_t)c->ord_i[idx[i]] - (uint64_t)c->ord_i[idx[i - 1]];
        if (d == 0) {
            r->repeats++;
            rep = true;
        } else if (d > step) {
            r->gaps++;
            gap = true;
        }
    }
}

/* Decides which fields are static: those whose rows are equal (bytewise)
 * within every group.  A field named static that is not is an error that
 * names the group; so is a string field, which can only be static (a
 * group's rows of strings would be a ragged field of ragged values). */
int stk__arrow_find_statics(ctx *c, const stk_arrow_options *o, const uint64_t *idx,
                        stk_error *err) {
    bool listed = o->statics || o->nstatics;
    for (size_t i = 0; i < c->nf; i++) {
        afield *f = &c->f[i];
        f->is_static = false;
        bool must = f->named_static || is_str(f->kind);
        if (is_str(f->kind) && (o->no_statics || (listed && !f->named_static)))
            return stk__err(err, -EINVAL,
                            "statics: field '%s' holds %ss, which with group_by are one a group "
                            "(static): list it among the statics, or leave it out with fields=",
                            f->name, c->cols[f->cols[0]].type);
        if (o->no_statics || (listed && !f->named_static) || is_list(f->kind)) continue;
        /* No rows: a field named static is (every group of none agrees),
         * so that an empty part has the schema of the others; one found
         * static from the data is not. */
        bool same = c->nrows > 0 || must;
        uint64_t a = 0, bad = 0;
        for (uint64_t r = 1; r < c->nrows && same; r++) {
            if (c->key[idx[r]] != c->key[idx[r - 1]]) {
                a = r; /* a new group starts */
                continue;
            }
            if (memcmp(f->data + idx[r] * f->row_bytes, f->data + idx[a] * f->row_bytes,
                       (size_t)f->row_bytes) != 0) {
                same = false;
                bad = r;
            }
        }
        if (!same && must) {
            int64_t key = c->key[idx[bad]];
            const char *why = is_str(f->kind) ? " (with group_by a field of strings holds one a "
                                                "group)"
                                              : "";
            const col *g = &c->cols[c->group_col];
            if (g->kind == K_PRIM && g->dtype == STK_U64)
                return stk__err(err, -EINVAL,
                                "statics: field '%s' is not constant within group %llu of '%s'%s",
                                f->name, (unsigned long long)key, g->name, why);
            if (g->kind == K_PRIM)
                return stk__err(err, -EINVAL,
                                "statics: field '%s' is not constant within group %lld of '%s'%s",
                                f->name, (long long)key, g->name, why);
            return stk__err(err, -EINVAL,
                            "statics: field '%s' is not constant within group '%.*s' of '%s'%s",
                            f->name, (int)STK__MIN(c->str_len[key], (uint64_t)200),
                            c->arena + c->str_off[key], g->name, why);
        }
        f->is_static = same;
    }
    return 0;
}

int stk__arrow_write_groups(ctx *c, stk_writer *w, const uint64_t *idx, uint64_t skip,
                            uint64_t *records, stk_error *err) {
    stk_value v[4097];
    uint8_t **bufs = stk__calloc(c->nf, sizeof *bufs);
    uint64_t *caps = stk__calloc(c->nf, sizeof *caps);
    int rc = bufs && caps ? 0 : stk__err(err, -ENOMEM, "out of memory");
    const col *g = &c->cols[c->group_col];
    for (uint64_t a = 0; a < c->nrows && rc == 0;) {
        uint64_t b = a + 1;
        while (b < c->nrows && c->key[idx[b]] == c->key[idx[a]]) b++;
        uint64_t n = b - a;
        if (*records < skip) { /* kept by an interrupted pack (resume) */
            (*records)++;
            a = b;
            continue;
        }
        for (size_t i = 0; i < c->nf && rc == 0; i++) {
            afield *f = &c->f[i];
            if (f->is_static && is_str(f->kind)) {
                /* The group's string, from the interned bytes. */
                int64_t id;
                memcpy(&id, f->data + idx[a] * 8, 8);
                v[i] = (stk_value){c->arena + c->str_off[id], c->str_len[id]};
                continue;
            }
            if (f->is_static) {
                /* The group's one value: a vector of its columns, or a
                 * scalar. */
                uint64_t inner = f->ncols > 1 ? f->ncols
                                 : f->kind == K_FIXED ? (uint64_t)c->cols[f->cols[0]].width : 1;
                v[i] = (stk_value){f->data + idx[a] * f->row_bytes, inner};
                continue;
            }
            if (stk__arrow_grow_bytes(&bufs[i], &caps[i], n * f->row_bytes + 1)) {
                rc = stk__err(err, -ENOMEM, "out of memory");
                break;
            }
            for (uint64_t k = 0; k < n; k++)
                memcpy(bufs[i] + k * f->row_bytes, f->data + idx[a + k] * f->row_bytes,
                       (size_t)f->row_bytes);
            v[i] = (stk_value){bufs[i], n};
        }
        int64_t key = c->key[idx[a]];
        if (g->kind == K_PRIM) v[c->nf] = (stk_value){&key, 1};
        else v[c->nf] = (stk_value){c->arena + c->str_off[key], c->str_len[key]};
        if (rc == 0) rc = stk_writer_append(w, v, err);
        a = b;
        (*records)++;
    }
    for (size_t i = 0; bufs && i < c->nf; i++) stk__free(bufs[i]);
    stk__free(bufs);
    stk__free(caps);
    return rc;
}
