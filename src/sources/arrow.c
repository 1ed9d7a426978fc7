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
#include "arrow.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The logical type (stk_field.type) of a primitive Arrow format into out
 * ("" for plain numbers): dates, times, timestamps and durations keep their
 * unit, and a timestamp its time zone, which the stored integers lose. */
static void logical_type(const char *fmt, char *out, size_t cap) {
    out[0] = 0;
    if (fmt[0] != 't' || !fmt[1] || !fmt[2]) return;
    const char *u = fmt[2] == 's' ? "s" : fmt[2] == 'm' ? "ms" : fmt[2] == 'u' ? "us"
                  : fmt[2] == 'n' ? "ns" : NULL;
    if (!strcmp(fmt, "tdD")) snprintf(out, cap, "date32");
    else if (!strcmp(fmt, "tdm")) snprintf(out, cap, "date64");
    else if (fmt[1] == 't' && u && !fmt[3])
        snprintf(out, cap, "%s[%s]", fmt[2] == 's' || fmt[2] == 'm' ? "time32" : "time64", u);
    else if (fmt[1] == 'D' && u && !fmt[3]) snprintf(out, cap, "duration[%s]", u);
    else if (fmt[1] == 's' && u && fmt[3] == ':') {
        const char *tz = fmt + 4;
        bool ok = *tz != 0;
        for (const char *q = tz; *q; q++) ok = ok && *q >= 0x20 && *q <= 0x7e;
        if (ok && strlen(tz) < cap - 32) snprintf(out, cap, "timestamp[%s, tz=%s]", u, tz);
        else snprintf(out, cap, "timestamp[%s]", u);
    }
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
    return "numbers, booleans, dates, times, timestamps, durations, strings, binaries and "
           "lists of numbers (or of fixed-size lists of numbers) can be packed";
}

static int describe_values(const struct ArrowSchema *s, col *c, stk_error *err) {
    c->width = 1;
    const char *f = s->format ? s->format : "";
    c->format = f;
    c->inner_n = 1;
    int k = parse_prim(f, &c->dtype, &c->is_float);
    if (k >= 0) {
        c->kind = k;
        c->isz = stk_dtype_size(c->dtype);
        logical_type(f, c->type, sizeof c->type);
        return 0;
    }
    /* Strings and binaries: a ragged bytes field, one string a row. */
    const char *bin = NULL;
    if (!strcmp(f, "u") || !strcmp(f, "z")) c->kind = K_STR, bin = f;
    else if (!strcmp(f, "U") || !strcmp(f, "Z")) c->kind = K_LSTR, bin = f;
    else if (!strcmp(f, "vu") || !strcmp(f, "vz")) c->kind = K_VSTR, bin = f + 1;
    else if (!strncmp(f, "w:", 2)) {
        c->kind = K_FBIN;
        bin = "z";
        c->width = strtoll(f + 2, NULL, 10);
        if (c->width < 1)
            return stk__err(err, -EINVAL, "column '%s': bad fixed-size binary '%s'", c->name, f);
    }
    if (bin) {
        c->dtype = STK_BYTES;
        c->isz = 1;
        snprintf(c->type, sizeof c->type, "%s", bin[0] == 'u' || bin[0] == 'U' ? "string"
                                                                               : "binary");
        return 0;
    }
    bool fixed = strncmp(f, "+w:", 3) == 0;
    int lk = !strcmp(f, "+l") ? K_LIST : !strcmp(f, "+L") ? K_LLIST
           : !strcmp(f, "+vl") ? K_LVIEW : !strcmp(f, "+vL") ? K_LLVIEW : -1;
    if ((fixed || lk >= 0) && s->n_children == 1) {
        const struct ArrowSchema *ch = s->children[0];
        /* Fixed-size lists inside (an image's rows, HF's ArrayND once cast
         * to fixed-size lists) are the field's inner dimensions. */
        while (ch && !ch->dictionary && ch->format && !strncmp(ch->format, "+w:", 3) &&
               ch->n_children == 1 && c->ninner < STK_MAX_DIMS - 1) {
            int64_t w = strtoll(ch->format + 3, NULL, 10);
            if (w < 1)
                return stk__err(err, -EINVAL, "column '%s': bad fixed-size list '%s'", c->name,
                                ch->format);
            c->inner[c->ninner++] = w;
            c->inner_n *= w;
            ch = ch->children[0];
        }
        int ck = ch->dictionary ? -1
                                : parse_prim(ch->format ? ch->format : "", &c->dtype, &c->is_float);
        if (ck != K_PRIM)
            return stk__err(err, -EINVAL,
                            "column '%s': a list of Arrow type '%s'%s cannot be packed (lists of "
                            "numbers, dates and timestamps can, and lists of fixed-size lists "
                            "of those%s)",
                            c->name, ch->format ? ch->format : "?",
                            ch->dictionary ? " (dictionary-encoded)" : "",
                            ch->format && (!strcmp(ch->format, "+l") || !strcmp(ch->format, "+L"))
                                ? ": lists of lists whose inner lists have one length can be "
                                  "cast to lists of fixed-size lists first (stoker.write does "
                                  "so for a pyarrow Table)"
                                : "");
        logical_type(ch->format, c->type, sizeof c->type);
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

int stk__arrow_grow_bytes(uint8_t **p, uint64_t *cap, uint64_t need) {
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
        f->type = c0->type[0] ? c0->type : NULL;
        if (is_str(f->kind) && ncols > 1)
            return stk__err(err, -EINVAL,
                            "column '%s' holds %ss (Arrow type '%s'%s): a %s column is a field "
                            "of its own, one string a row (with group_by, one a group), not "
                            "stacked with other columns in fields=",
                            c0->name, c0->type, c0->format, c0->dict ? ", dictionary-encoded" : "",
                            c0->type);
        if (c0->ninner && (ncols > 1 || grouped))
            return stk__err(err, -EINVAL,
                            "column '%s' (Arrow type '%s') holds fixed-size lists inside its "
                            "rows: it is a field of its own%s",
                            c0->name, c0->format,
                            grouped ? ", and cannot be grouped" : ", not stacked with others");
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
            if (strcmp(ck->type, c0->type) != 0)
                return stk__err(err, -EINVAL,
                                "field '%s': columns '%s' (%s) and '%s' (%s) differ in type (the "
                                "columns of one field must have one type: cast them first)",
                                f->name, c0->name, c0->type[0] ? c0->type : stk_dtype_name(c0->dtype),
                                ck->name, ck->type[0] ? ck->type : stk_dtype_name(ck->dtype));
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
        /* (Grouped, a string row is the id of its interned bytes.) */
        f->row_bytes = is_str(f->kind) ? (grouped ? 8 : 0)
                       : stk_dtype_size(f->dtype) * (uint64_t)c0->inner_n *
                             (ncols > 1 ? (uint64_t)ncols : (uint64_t)c0->width);
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
        s->type = f->type;
        const col *c0 = &c->cols[f->cols[0]];
        int64_t inner = f->ncols > 1 ? (int64_t)f->ncols
                        : f->kind == K_FIXED ? c0->width : 0;
        if (is_str(f->kind)) {
            s->ndim = 1;
            s->shape[0] = STK_RAGGED;
        } else if (c0->ninner) {
            /* [*, inner...] for a list, [width, inner...] for a fixed one. */
            s->ndim = 1 + c0->ninner;
            s->shape[0] = f->kind == K_FIXED ? c0->width : STK_RAGGED;
            memcpy(&s->shape[1], c0->inner, (size_t)c0->ninner * sizeof c0->inner[0]);
        } else if (grouped && !f->is_static) {
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

int stk_write_arrow(const char *path, struct ArrowArrayStream *stream,
                    const stk_arrow_options *opts, uint64_t *records, stk_error *err) {
    return stk_write_arrow_report(path, stream, opts, records, NULL, err);
}

int stk_write_arrow_report(const char *path, struct ArrowArrayStream *stream,
                           const stk_arrow_options *opts, uint64_t *records,
                           stk_arrow_report *report, stk_error *err) {
    if (report) memset(report, 0, sizeof *report);
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
    /* Resuming (opts->writer.resume), the records the interrupted pack
     * kept are read again from the stream and skipped: the stream gives
     * the same records in the same order (rows in turn; groups in key
     * order), and the writer's `inputs` check that it is the same. */
    uint64_t kept = 0;
    if (!opts->group_by) {
        schema_of(&c, opts, schema, &nschema);
        if ((rc = stk_writer_create(path, schema, nschema, &opts->writer, &w, err))) goto out;
        kept = stk_writer_num_records(w);
    }
    stk_value v[4097];
    uint64_t base = 0, nbatch = 0;
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
        if ((rc = stk__arrow_check_batch(&c, &batch, nbatch++, base, path, err))) {
            /* (Nothing of it read; the records before it stay written, and
             * the dataset incomplete.) */
        } else if (opts->group_by) {
            rc = stk__arrow_accumulate(&c, &batch, base, err);
        } else {
            for (size_t i = 0; i < c.nf && rc == 0; i++)
                if (stk__arrow_grow_bytes(&c.f[i].data, &c.f[i].cap, c.f[i].row_bytes + 1))
                    rc = stk__err(err, -ENOMEM, "out of memory");
            for (int64_t r0 = 0; r0 < batch.length && rc == 0; r0++) {
                if (base + (uint64_t)r0 < kept) {
                    count++; /* kept by the interrupted pack */
                    continue;
                }
                for (size_t i = 0; i < c.nf && rc == 0; i++) {
                    uint8_t *dst = c.f[i].data;
                    uint64_t rows;
                    rc = stk__arrow_field_row(&c, &c.f[i], &batch, r0, base + (uint64_t)r0, &dst, &rows, err);
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
        uint64_t *idx = stk__arrow_sort_rows(&c);
        rc = idx ? stk__arrow_find_statics(&c, opts, idx, err) : stk__err(err, -ENOMEM, "out of memory");
        if (rc == 0 && report) stk__arrow_order_report(&c, idx, report);
        if (rc == 0) {
            schema_of(&c, opts, schema, &nschema);
            rc = stk_writer_create(path, schema, nschema, &opts->writer, &w, err);
        }
        if (rc == 0) rc = stk__arrow_write_groups(&c, w, idx, stk_writer_num_records(w), &count,
                                                  err);
        stk__free(idx);
    }
    if (rc == 0) rc = stk_writer_finish(w, err);
out:
    stk_writer_free(w);
    ctx_free(&c);
    if (rc == 0 && records) *records = count;
    return rc;
}
