/*
 * arrow.c: packing an Arrow C stream (pyarrow tables and readers, polars
 * frames, anything with __arrow_c_stream__) into a dataset, in C, without a
 * Python object per row.
 *
 * The stream's schema is a struct whose children are the columns.  It is
 * checked whole before the writer is created, so that a stream that cannot
 * be packed leaves nothing behind.  Rows become records directly (row mode),
 * or are gathered per group key, sorted by the order column, and written one
 * record per group (group mode: time series arriving as rows).
 */
#define _GNU_SOURCE
#include "../format/format.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Column kinds.  Strings and binaries (K_STR: 32-bit offsets, K_LSTR:
 * 64-bit, K_VSTR: views) can only be a group key; list views (K_LVIEW,
 * K_LLVIEW) are lists whose rows are (offset, size) pairs. */
enum { K_PRIM, K_BOOL, K_FIXED, K_LIST, K_LLIST, K_LVIEW, K_LLVIEW, K_STR, K_LSTR, K_VSTR };

typedef struct col {
    const char *name; /* points into the schema, valid while it lives */
    const char *format;
    int kind;        /* of the values (a dictionary's values, for dict) */
    stk_dtype dtype; /* element type (of the child for lists) */
    size_t isz;
    int64_t width;   /* fixed-size list length; 1 otherwise */
    bool is_float;
    /* Dictionary-encoded: the rows are indices (ixsz bytes, signed unless
     * ixunsigned) into the batch's dictionary array, which holds the
     * values. */
    bool dict, ixunsigned;
    size_t ixsz;
} col;

static bool is_list(int k) { return k == K_LIST || k == K_LLIST || k == K_LVIEW || k == K_LLVIEW; }
static bool is_str(int k) { return k == K_STR || k == K_LSTR || k == K_VSTR; }

typedef struct afield {
    const char *name;
    int *cols;
    size_t ncols;
    stk_codec codec;
    int level;
    int kind;         /* of its columns */
    stk_dtype dtype;
    uint64_t row_bytes; /* per row of the stream */
    bool is_static;     /* group mode: one value per record */
    bool named_static;  /* listed in the options' statics */
    /* group mode: the field's rows, in stream order */
    uint8_t *data;
    uint64_t len, cap;
} afield;

typedef struct ctx {
    struct ArrowSchema schema;
    col *cols;
    int ncols;
    afield *f;
    size_t nf;
    int group_col, order_col;
    /* group mode accumulators */
    uint64_t nrows;
    int64_t *key;     /* integer keys, or string ids */
    int64_t *ord_i;
    double *ord_d;
    uint64_t rows_cap;
    /* string keys: an arena and an open-addressing table of (offset, len) */
    char *arena;
    uint64_t arena_len, arena_cap;
    uint64_t *str_off, *str_len;
    int64_t nstr, str_cap;
    int64_t *table;
    uint64_t table_cap;
} ctx;

void stk_arrow_options_init(stk_arrow_options *o) {
    memset(o, 0, sizeof *o);
    stk_writer_options_init(&o->writer);
}

static int parse_prim(const char *fmt, stk_dtype *dt, bool *is_float) {
    *is_float = false;
    static const struct {
        const char *f;
        stk_dtype d;
    } m[] = {{"c", STK_I8},  {"C", STK_U8},  {"s", STK_I16}, {"S", STK_U16}, {"i", STK_I32},
             {"I", STK_U32}, {"l", STK_I64}, {"L", STK_U64}, {"e", STK_F16}, {"f", STK_F32},
             {"g", STK_F64}, {"tdD", STK_I32}, {"tdm", STK_I64}, {"tts", STK_I32},
             {"ttm", STK_I32}, {"ttu", STK_I64}, {"ttn", STK_I64}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strcmp(fmt, m[i].f) == 0) {
            *dt = m[i].d;
            *is_float = m[i].d == STK_F16 || m[i].d == STK_F32 || m[i].d == STK_F64;
            return K_PRIM;
        }
    if (strncmp(fmt, "ts", 2) == 0 && strlen(fmt) >= 4 && fmt[3] == ':') {
        *dt = STK_I64; /* timestamps: int64 counts of their unit */
        return K_PRIM;
    }
    if (strncmp(fmt, "tD", 2) == 0) {
        *dt = STK_I64; /* durations */
        return K_PRIM;
    }
    if (strcmp(fmt, "b") == 0) {
        *dt = STK_U8;
        return K_BOOL;
    }
    return -1;
}

/* What to say about a column that cannot be packed, given its format. */
static const char *remedy(const char *f) {
    if (!strncmp(f, "d:", 2) || !strncmp(f, "d", 1))
        return "it is a decimal: cast it to float64, or to an integer count of its smallest "
               "unit, first";
    if (!strcmp(f, "n")) return "it holds only nulls: drop it, or cast it to a number type";
    if (!strncmp(f, "ti", 2)) return "it is an interval: cast it to a duration or to integers first";
    if (!strcmp(f, "+s") || !strcmp(f, "+m") || !strncmp(f, "+u", 2) || !strcmp(f, "+r"))
        return "nested types (structs, maps, unions) cannot be packed: flatten it into columns "
               "of numbers first";
    return "numbers, booleans, dates, times, timestamps, durations and lists of those can be "
           "packed; strings and binaries only as the group key";
}

static int describe_values(const struct ArrowSchema *s, col *c, stk_error *err) {
    c->width = 1;
    const char *f = s->format ? s->format : "";
    c->format = f;
    int k = parse_prim(f, &c->dtype, &c->is_float);
    if (k >= 0) {
        c->kind = k;
        c->isz = stk_dtype_size(c->dtype);
        return 0;
    }
    if (!strcmp(f, "u") || !strcmp(f, "z")) return c->kind = K_STR, 0;
    if (!strcmp(f, "U") || !strcmp(f, "Z")) return c->kind = K_LSTR, 0;
    if (!strcmp(f, "vu") || !strcmp(f, "vz")) return c->kind = K_VSTR, 0;
    bool fixed = strncmp(f, "+w:", 3) == 0;
    int lk = !strcmp(f, "+l") ? K_LIST : !strcmp(f, "+L") ? K_LLIST
           : !strcmp(f, "+vl") ? K_LVIEW : !strcmp(f, "+vL") ? K_LLVIEW : -1;
    if ((fixed || lk >= 0) && s->n_children == 1) {
        const struct ArrowSchema *ch = s->children[0];
        int ck = ch->dictionary ? -1
                                : parse_prim(ch->format ? ch->format : "", &c->dtype, &c->is_float);
        if (ck != K_PRIM)
            return stk__err(err, -EINVAL,
                            "column '%s': a list of Arrow type '%s'%s cannot be packed (lists of "
                            "numbers, dates and timestamps can)",
                            c->name, ch->format ? ch->format : "?",
                            ch->dictionary ? " (dictionary-encoded)" : "");
        c->isz = stk_dtype_size(c->dtype);
        if (fixed) {
            c->kind = K_FIXED;
            c->width = strtoll(f + 3, NULL, 10);
            if (c->width < 1)
                return stk__err(err, -EINVAL, "column '%s': bad fixed-size list '%s'", c->name, f);
        } else {
            c->kind = lk;
        }
        return 0;
    }
    return stk__err(err, -EINVAL, "column '%s': Arrow type '%s' cannot be packed: %s", c->name, f,
                    remedy(f));
}

static int describe(const struct ArrowSchema *s, col *c, stk_error *err) {
    c->name = s->name ? s->name : "";
    if (!s->dictionary) return describe_values(s, c, err);
    /* Dictionary-encoded (a pandas Categorical, pyarrow's dictionary
     * type): the column's own format is the index type; the values are
     * described by the dictionary's schema. */
    static const struct {
        const char *f;
        size_t sz;
        bool u;
    } ix[] = {{"c", 1, false}, {"C", 1, true}, {"s", 2, false}, {"S", 2, true},
              {"i", 4, false}, {"I", 4, true}, {"l", 8, false}, {"L", 8, true}};
    const char *f = s->format ? s->format : "";
    for (size_t i = 0; i < sizeof ix / sizeof ix[0]; i++)
        if (!strcmp(f, ix[i].f)) {
            c->ixsz = ix[i].sz;
            c->ixunsigned = ix[i].u;
        }
    if (!c->ixsz)
        return stk__err(err, -EINVAL, "column '%s': dictionary indices of Arrow type '%s'",
                        c->name, f);
    int rc = describe_values(s->dictionary, c, err);
    if (rc) return rc;
    c->dict = true;
    if (c->kind != K_PRIM && c->kind != K_BOOL && !is_str(c->kind))
        return stk__err(err, -EINVAL,
                        "column '%s': a dictionary of Arrow type '%s' cannot be packed (decode "
                        "it first: pyarrow.compute.dictionary_decode or .cast to its value type)",
                        c->name, c->format);
    return 0;
}

static int find_col(const ctx *c, const char *name) {
    for (int i = 0; i < c->ncols; i++)
        if (strcmp(c->cols[i].name, name) == 0) return i;
    return -1;
}

static void ctx_free(ctx *c) {
    if (c->f)
        for (size_t i = 0; i < c->nf; i++) {
            stk__free(c->f[i].cols);
            stk__free(c->f[i].data);
        }
    stk__free(c->f);
    stk__free(c->cols);
    stk__free(c->key);
    stk__free(c->ord_i);
    stk__free(c->ord_d);
    stk__free(c->arena);
    stk__free(c->str_off);
    stk__free(c->str_len);
    stk__free(c->table);
    if (c->schema.release) c->schema.release(&c->schema);
}

static int grow_bytes(uint8_t **p, uint64_t *cap, uint64_t need) {
    if (need <= *cap) return 0;
    uint64_t c = STK__MAX(need, *cap * 2 + 4096);
    uint8_t *q = stk__realloc(*p, (size_t)c);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Builds the field list and checks everything that can be checked on the
 * schema alone. */
static int plan(ctx *c, const stk_arrow_options *o, stk_error *err) {
    const struct ArrowSchema *s = &c->schema;
    if (!s->format || strcmp(s->format, "+s") != 0)
        return stk__err(err, -EINVAL, "the stream's rows are '%s', not a struct of columns",
                        s->format ? s->format : "?");
    c->ncols = (int)s->n_children;
    c->cols = stk__calloc((size_t)STK__MAX(c->ncols, 1), sizeof *c->cols);
    if (!c->cols) return stk__err(err, -ENOMEM, "out of memory");
    for (int i = 0; i < c->ncols; i++) {
        int rc = describe(s->children[i], &c->cols[i], err);
        if (rc) return rc;
    }
    bool grouped = o->group_by != NULL;
    c->group_col = c->order_col = -1;
    if (o->group_by) {
        if ((c->group_col = find_col(c, o->group_by)) < 0)
            return stk__err(err, -EINVAL, "group_by: no column '%s'", o->group_by);
        const col *g = &c->cols[c->group_col];
        if (!((g->kind == K_PRIM && !g->is_float) || is_str(g->kind)))
            return stk__err(err, -EINVAL,
                            "group_by: column '%s' (Arrow type '%s') must hold integers, strings "
                            "or binaries (or a dictionary of those)",
                            o->group_by, g->format);
    }
    if (o->order_by) {
        if (!grouped) return stk__err(err, -EINVAL, "order_by: needs group_by");
        if ((c->order_col = find_col(c, o->order_by)) < 0)
            return stk__err(err, -EINVAL, "order_by: no column '%s'", o->order_by);
        if (c->cols[c->order_col].kind != K_PRIM)
            return stk__err(err, -EINVAL,
                            "order_by: column '%s' must hold numbers, dates or timestamps",
                            o->order_by);
    }
    /* Fields: given, or one per column (the group key aside). */
    size_t nf = o->fields ? o->nfields : (size_t)c->ncols;
    c->f = stk__calloc(nf + 1, sizeof *c->f);
    if (!c->f) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < nf; i++) {
        const stk_arrow_field *in = o->fields ? &o->fields[i] : NULL;
        if (!in && (int)i == c->group_col) continue;
        afield *f = &c->f[c->nf++];
        size_t ncols = in ? in->ncolumns : 1;
        f->name = in ? in->name : c->cols[i].name;
        f->codec = in ? in->codec : STK_CODEC_NONE;
        f->level = in ? in->codec_level : 0;
        f->cols = stk__calloc(STK__MAX(ncols, (size_t)1), sizeof *f->cols);
        if (!f->cols) return stk__err(err, -ENOMEM, "out of memory");
        f->ncols = ncols;
        if (ncols == 0) return stk__err(err, -EINVAL, "field '%s': no columns", f->name);
        for (size_t k = 0; k < ncols; k++) {
            int ci = in ? find_col(c, in->columns[k]) : (int)i;
            if (ci < 0)
                return stk__err(err, -EINVAL, "field '%s': no column '%s'", f->name,
                                in->columns[k]);
            if (ci == c->group_col)
                return stk__err(err, -EINVAL, "field '%s': column '%s' is the group key",
                                f->name, c->cols[ci].name);
            f->cols[k] = ci;
        }
        const col *c0 = &c->cols[f->cols[0]];
        f->kind = c0->kind;
        f->dtype = c0->dtype;
        if (is_str(f->kind))
            return stk__err(err, -EINVAL,
                            "column '%s' holds %s (Arrow type '%s'%s): strings and binaries can "
                            "only be the group key (group_by); turn the column into integer "
                            "codes first (pandas: .cat.codes, polars: .to_physical() of a "
                            "Categorical, pyarrow: pyarrow.compute.dictionary_encode(...).indices)"
                            " or leave it out with fields=",
                            c0->name, c0->format[strlen(c0->format) - 1] == 'z' ? "binaries"
                                                                                : "strings",
                            c0->format, c0->dict ? ", dictionary-encoded" : "");
        for (size_t k = 0; k < ncols && ncols > 1; k++) {
            const col *ck = &c->cols[f->cols[k]];
            bool scalar0 = c0->kind == K_PRIM || c0->kind == K_BOOL;
            bool scalar = ck->kind == K_PRIM || ck->kind == K_BOOL;
            if (scalar != scalar0 || (!scalar && !is_list(ck->kind)))
                return stk__err(err, -EINVAL,
                                "field '%s': columns '%s' (Arrow type '%s') and '%s' ('%s') "
                                "cannot be stacked: a field of several columns stacks scalar "
                                "columns, or list columns (lists of one length per row), not "
                                "a mix; give each a field of its own",
                                f->name, c0->name, c0->format, ck->name, ck->format);
            if (ck->dtype != f->dtype)
                return stk__err(err, -EINVAL,
                                "field '%s': columns '%s' (%s) and '%s' (%s) differ in type (the "
                                "columns of one field must have one type: cast them first)",
                                f->name, c0->name, stk_dtype_name(f->dtype), ck->name,
                                stk_dtype_name(ck->dtype));
        }
        if (grouped && is_list(f->kind))
            return stk__err(err, -EINVAL,
                            "column '%s': a list column cannot be grouped (each group row "
                            "would be ragged)",
                            c0->name);
        f->row_bytes = stk_dtype_size(f->dtype) * (ncols > 1 ? (uint64_t)ncols : (uint64_t)c0->width);
        for (size_t j = 0; j + 1 < c->nf; j++)
            if (strcmp(c->f[j].name, f->name) == 0)
                return stk__err(err, -EINVAL, "field '%s' appears twice", f->name);
    }
    if (o->statics || o->nstatics) {
        if (!grouped) return stk__err(err, -EINVAL, "statics: need group_by");
        for (size_t k = 0; k < o->nstatics; k++) {
            size_t i = 0;
            while (i < c->nf && strcmp(c->f[i].name, o->statics[k]) != 0) i++;
            if (i == c->nf)
                return stk__err(err, -EINVAL, "statics: no field '%s'", o->statics[k]);
            c->f[i].named_static = true;
        }
    }
    return 0;
}

/* The writer's schema for the plan. */
static void schema_of(const ctx *c, const stk_arrow_options *o, stk_field *out, size_t *n) {
    bool grouped = o->group_by != NULL;
    size_t k = 0;
    for (size_t i = 0; i < c->nf; i++) {
        const afield *f = &c->f[i];
        stk_field *s = &out[k++];
        memset(s, 0, sizeof *s);
        s->name = f->name;
        s->dtype = f->dtype;
        s->codec = f->codec;
        s->codec_level = f->level;
        int64_t inner = f->ncols > 1 ? (int64_t)f->ncols
                        : f->kind == K_FIXED ? c->cols[f->cols[0]].width : 0;
        if (grouped && !f->is_static) {
            s->ndim = inner ? 2 : 1;
            s->shape[0] = STK_RAGGED;
            s->shape[1] = inner;
        } else if (is_list(f->kind)) {
            /* A list per row, or stacked lists: [*] or [*, columns]. */
            s->ndim = f->ncols > 1 ? 2 : 1;
            s->shape[0] = STK_RAGGED;
            s->shape[1] = f->ncols > 1 ? (int64_t)f->ncols : 0;
        } else {
            s->ndim = inner ? 1 : 0;
            s->shape[0] = inner;
        }
    }
    if (grouped) {
        const col *g = &c->cols[c->group_col];
        stk_field *s = &out[k++];
        memset(s, 0, sizeof *s);
        s->name = g->name;
        if (g->kind == K_PRIM) {
            /* Unsigned 64-bit keys keep their type: as i64, keys at or
             * above 2^63 would turn negative and sort first. */
            s->dtype = g->dtype == STK_U64 ? STK_U64 : STK_I64;
            s->ndim = 0;
        } else {
            s->dtype = STK_BYTES;
            s->ndim = 1;
            s->shape[0] = STK_RAGGED;
        }
    }
    *n = k;
}

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

/* The row's bytes of field f (one row of the stream) into dst; for lists
 * sets *rows.  dst must hold row_bytes (or the list's bytes). */
static int field_row(ctx *c, afield *f, struct ArrowArray *batch, int64_t r, uint64_t grow,
                     uint8_t **dst, uint64_t *rows, stk_error *err) {
    const col *c0 = &c->cols[f->cols[0]];
    const struct ArrowArray *a0 = batch->children[f->cols[0]];
    if (is_list(f->kind)) {
        int64_t b, e;
        int rc = list_at(a0, c0, r, grow, &b, &e, err);
        if (rc) return rc;
        *rows = (uint64_t)(e - b);
        /* Row mode only: the list lands in the field's own buffer. */
        if (grow_bytes(&f->data, &f->cap, (uint64_t)(e - b) * c0->isz * f->ncols + 1))
            return stk__err(err, -ENOMEM, "out of memory");
        *dst = f->data;
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
        return copy_elems(a0->children[0], c0, (a0->offset + r) * c0->width, c0->width, *dst,
                          err, grow);
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
        if (c->str_len[s] == n && memcmp(c->arena + c->str_off[s], p, (size_t)n) == 0) {
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
    if (grow_bytes((uint8_t **)&c->arena, &c->arena_cap, c->arena_len + n + 1)) return -ENOMEM;
    memcpy(c->arena + c->arena_len, p, (size_t)n);
    c->str_off[c->nstr] = c->arena_len;
    c->str_len[c->nstr] = n;
    c->arena_len += n;
    c->table[h] = c->nstr;
    *id = c->nstr++;
    return 0;
}

/* The bytes of row r of a string or binary array (offsets or views). */
static void str_at(const struct ArrowArray *a, int kind, int64_t r, const char **p, uint64_t *n) {
    int64_t i = a->offset + r;
    if (kind == K_STR) {
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
    str_at(a, g->kind, r, &p, &n);
    if (intern(c, p, n, out)) return stk__err(err, -ENOMEM, "out of memory");
    return 0;
}

static int accumulate(ctx *c, struct ArrowArray *batch, uint64_t base, stk_error *err) {
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
        if (grow_bytes(&f->data, &f->cap, f->len + n * f->row_bytes))
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
            if ((rc = field_row(c, f, batch, (int64_t)r, base + r, &dst, &rows, err))) return rc;
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
static uint64_t *sort_rows(ctx *c) {
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

/* Decides which fields are static: those whose rows are equal (bytewise)
 * within every group.  A field named static that is not is an error that
 * names the group. */
static int find_statics(ctx *c, const stk_arrow_options *o, const uint64_t *idx,
                        stk_error *err) {
    bool listed = o->statics || o->nstatics;
    for (size_t i = 0; i < c->nf; i++) {
        afield *f = &c->f[i];
        f->is_static = false;
        if (o->no_statics || (listed && !f->named_static) || is_list(f->kind)) continue;
        bool same = c->nrows > 0;
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
        if (!same && f->named_static) {
            int64_t key = c->key[idx[bad]];
            const col *g = &c->cols[c->group_col];
            if (g->kind == K_PRIM && g->dtype == STK_U64)
                return stk__err(err, -EINVAL,
                                "statics: field '%s' is not constant within group %llu of '%s'",
                                f->name, (unsigned long long)key, g->name);
            if (g->kind == K_PRIM)
                return stk__err(err, -EINVAL,
                                "statics: field '%s' is not constant within group %lld of '%s'",
                                f->name, (long long)key, g->name);
            return stk__err(err, -EINVAL,
                            "statics: field '%s' is not constant within group '%.*s' of '%s'",
                            f->name, (int)STK__MIN(c->str_len[key], (uint64_t)200),
                            c->arena + c->str_off[key], g->name);
        }
        f->is_static = same;
    }
    return 0;
}

static int write_groups(ctx *c, stk_writer *w, const uint64_t *idx, uint64_t *records,
                        stk_error *err) {
    stk_value v[4097];
    uint8_t **bufs = stk__calloc(c->nf, sizeof *bufs);
    uint64_t *caps = stk__calloc(c->nf, sizeof *caps);
    int rc = bufs && caps ? 0 : stk__err(err, -ENOMEM, "out of memory");
    const col *g = &c->cols[c->group_col];
    for (uint64_t a = 0; a < c->nrows && rc == 0;) {
        uint64_t b = a + 1;
        while (b < c->nrows && c->key[idx[b]] == c->key[idx[a]]) b++;
        uint64_t n = b - a;
        for (size_t i = 0; i < c->nf && rc == 0; i++) {
            afield *f = &c->f[i];
            if (f->is_static) {
                /* The group's one value: a vector of its columns, or a
                 * scalar. */
                uint64_t inner = f->ncols > 1 ? f->ncols
                                 : f->kind == K_FIXED ? (uint64_t)c->cols[f->cols[0]].width : 1;
                v[i] = (stk_value){f->data + idx[a] * f->row_bytes, inner};
                continue;
            }
            if (grow_bytes(&bufs[i], &caps[i], n * f->row_bytes + 1)) {
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

int stk_write_arrow(const char *path, struct ArrowArrayStream *stream,
                    const stk_arrow_options *opts, uint64_t *records, stk_error *err) {
    stk_arrow_options defaults;
    if (!opts) {
        stk_arrow_options_init(&defaults);
        opts = &defaults;
    }
    if (!path || !stream || !stream->get_schema)
        return stk__err(err, -EINVAL, "stk_write_arrow: NULL argument or released stream");
    if (records) *records = 0;
    ctx c;
    memset(&c, 0, sizeof c);
    int rc = stream->get_schema(stream, &c.schema);
    if (rc) {
        const char *m = stream->get_last_error ? stream->get_last_error(stream) : NULL;
        return stk__err(err, -rc > 0 ? -rc : -EIO, "the Arrow stream failed to give its schema%s%s",
                        m ? ": " : "", m ? m : "");
    }
    stk_writer *w = NULL;
    uint64_t count = 0;
    stk_field schema[4097];
    size_t nschema = 0;
    if ((rc = plan(&c, opts, err))) goto out;
    if (c.nf + 1 > 4096) {
        rc = stk__err(err, -EINVAL, "too many fields");
        goto out;
    }
    /* Rows become records as they come; groups are gathered first, and
     * the writer is made once the statics are known. */
    if (!opts->group_by) {
        schema_of(&c, opts, schema, &nschema);
        if ((rc = stk_writer_create(path, schema, nschema, &opts->writer, &w, err))) goto out;
    }
    stk_value v[4097];
    uint64_t base = 0;
    for (;;) {
        struct ArrowArray batch;
        memset(&batch, 0, sizeof batch);
        int r = stream->get_next(stream, &batch);
        if (r) {
            const char *m = stream->get_last_error ? stream->get_last_error(stream) : NULL;
            rc = stk__err(err, -EIO, "%s: the Arrow stream failed after %llu rows%s%s", path,
                          (unsigned long long)base, m ? ": " : "", m ? m : "");
            break;
        }
        if (!batch.release) break; /* end of stream */
        if (batch.n_children != c.ncols) {
            rc = stk__err(err, -EINVAL, "%s: a batch of the stream has %lld columns, not %d",
                          path, (long long)batch.n_children, c.ncols);
        } else if (opts->group_by) {
            rc = accumulate(&c, &batch, base, err);
        } else {
            for (size_t i = 0; i < c.nf && rc == 0; i++)
                if (grow_bytes(&c.f[i].data, &c.f[i].cap, c.f[i].row_bytes + 1))
                    rc = stk__err(err, -ENOMEM, "out of memory");
            for (int64_t r0 = 0; r0 < batch.length && rc == 0; r0++) {
                for (size_t i = 0; i < c.nf && rc == 0; i++) {
                    uint8_t *dst = c.f[i].data;
                    uint64_t rows;
                    rc = field_row(&c, &c.f[i], &batch, r0, base + (uint64_t)r0, &dst, &rows, err);
                    v[i] = (stk_value){dst, rows};
                }
                if (rc == 0) rc = stk_writer_append(w, v, err);
                if (rc == 0) count++;
            }
        }
        base += (uint64_t)batch.length;
        batch.release(&batch);
        if (rc) break;
    }
    if (rc == 0 && opts->group_by) {
        uint64_t *idx = sort_rows(&c);
        rc = idx ? find_statics(&c, opts, idx, err) : stk__err(err, -ENOMEM, "out of memory");
        if (rc == 0) {
            schema_of(&c, opts, schema, &nschema);
            rc = stk_writer_create(path, schema, nschema, &opts->writer, &w, err);
        }
        if (rc == 0) rc = write_groups(&c, w, idx, &count, err);
        stk__free(idx);
    }
    if (rc == 0) rc = stk_writer_finish(w, err);
out:
    stk_writer_free(w);
    ctx_free(&c);
    if (rc == 0 && records) *records = count;
    return rc;
}
