/*
 * schema.c: dtypes, codecs, and checking, copying and hashing a schema.
 */
#include "format.h"
#include "../core/hash.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [STK_U8] = {"u8", 1},     [STK_U16] = {"u16", 2},   [STK_U32] = {"u32", 4},
    [STK_U64] = {"u64", 8},   [STK_I8] = {"i8", 1},     [STK_I16] = {"i16", 2},
    [STK_I32] = {"i32", 4},   [STK_I64] = {"i64", 8},   [STK_F16] = {"f16", 2},
    [STK_BF16] = {"bf16", 2}, [STK_F32] = {"f32", 4},   [STK_F64] = {"f64", 8},
    [STK_BYTES] = {"bytes", 1},
};

size_t stk_dtype_size(stk_dtype d) {
    if ((int)d < STK_U8 || (int)d > STK_BYTES) return 0;
    return dtypes[d].size;
}

const char *stk_dtype_name(stk_dtype d) {
    if ((int)d < STK_U8 || (int)d > STK_BYTES) return NULL;
    return dtypes[d].name;
}

int stk_dtype_parse(const char *name) {
    if (!name) return -EINVAL;
    for (int d = STK_U8; d <= STK_BYTES; d++)
        if (strcmp(dtypes[d].name, name) == 0) return d;
    return -EINVAL;
}

const char *stk__codec_name(stk_codec c) {
    switch (c) {
    case STK_CODEC_NONE: return "none";
    case STK_CODEC_ZSTD: return "zstd";
    }
    return NULL;
}

int stk__codec_parse(const char *name) {
    if (strcmp(name, "none") == 0) return STK_CODEC_NONE;
    if (strcmp(name, "zstd") == 0) return STK_CODEC_ZSTD;
    return -EINVAL;
}

bool stk__type_ok(const char *s) {
    size_t n = strnlen(s, STK_TYPE_MAX);
    if (n == 0 || n >= STK_TYPE_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) return false;
    return true;
}

static bool valid_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= STK_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

int stk__schema_check(const stk_field *fields, size_t nfields,
                      stk__fieldinfo *info, stk_error *err) {
    if (!fields || nfields == 0)
        return stk__err(err, -EINVAL, "a schema needs at least one field");
    if (nfields > 4096)
        return stk__err(err, -EINVAL, "a schema has at most 4096 fields, not %zu",
                        nfields);
    for (size_t i = 0; i < nfields; i++) {
        const stk_field *f = &fields[i];
        if (!valid_name(f->name))
            return stk__err(err, -EINVAL,
                            "field %zu: name '%s' must be 1 to %d characters of "
                            "A-Z a-z 0-9 _ . -",
                            i, f->name ? f->name : "(null)", STK_NAME_MAX - 1);
        for (size_t j = 0; j < i; j++)
            if (strcmp(fields[j].name, f->name) == 0)
                return stk__err(err, -EINVAL, "field name '%s' appears twice",
                                f->name);
        size_t isz = stk_dtype_size(f->dtype);
        if (!isz)
            return stk__err(err, -EINVAL, "field '%s': unknown dtype %d", f->name,
                            (int)f->dtype);
        if (f->ndim < 0 || f->ndim > STK_MAX_DIMS)
            return stk__err(err, -EINVAL, "field '%s': ndim %d is not in 0..%d",
                            f->name, f->ndim, STK_MAX_DIMS);
        if (f->dtype == STK_BYTES && f->ndim != 1)
            return stk__err(err, -EINVAL,
                            "field '%s': a bytes field has exactly one dimension",
                            f->name);
        uint64_t row = isz;
        for (int d = 0; d < f->ndim; d++) {
            int64_t s = f->shape[d];
            if (d == 0 && s == STK_RAGGED) continue;
            if (s < 1)
                return stk__err(err, -EINVAL,
                                "field '%s': dimension %d is %lld; fixed "
                                "dimensions are >= 1 and only the first may be "
                                "ragged (-1)",
                                f->name, d, (long long)s);
            if (d > 0 && !stk__mul_ok(row, (uint64_t)s, &row))
                return stk__err(err, -EINVAL, "field '%s': row size overflows",
                                f->name);
        }
        if (row > (UINT64_C(1) << 40))
            return stk__err(err, -EINVAL, "field '%s': one row is over 1 TiB",
                            f->name);
        if (f->codec != STK_CODEC_NONE && f->codec != STK_CODEC_ZSTD)
            return stk__err(err, -EINVAL, "field '%s': unknown codec %d",
                            f->name, (int)f->codec);
        if (f->type && !stk__type_ok(f->type))
            return stk__err(err, -EINVAL,
                            "field '%s': type '%.*s' must be 1 to %d printable ASCII "
                            "characters",
                            f->name, STK_TYPE_MAX, f->type, STK_TYPE_MAX - 1);
        if (f->codec_level < 0 || f->codec_level > 22)
            return stk__err(err, -EINVAL,
                            "field '%s': codec level %d is not in 0..22",
                            f->name, f->codec_level);
        if (info) {
            info[i].itemsize = isz;
            info[i].row_bytes = row;
            info[i].fixed_rows = f->ndim == 0 ? 1 : f->shape[0];
            info[i].stored_row_bytes = row;
            info[i].conv = STK__CONV_NONE;
        }
    }
    return 0;
}

void stk__schema_free(stk_field *fields, size_t nfields) {
    if (!fields) return;
    for (size_t i = 0; i < nfields; i++) {
        stk__free((char *)fields[i].name);
        stk__free((char *)fields[i].type);
    }
    stk__free(fields);
}

int stk__schema_copy(const stk_field *fields, size_t nfields, stk_field **out) {
    stk_field *c = stk__calloc(nfields, sizeof *c);
    if (!c) return -ENOMEM;
    for (size_t i = 0; i < nfields; i++) {
        c[i] = fields[i];
        c[i].name = stk__strdup(fields[i].name);
        c[i].type = fields[i].type ? stk__strdup(fields[i].type) : NULL;
        if (!c[i].name || (fields[i].type && !c[i].type)) {
            stk__free((char *)c[i].name);
            stk__free((char *)c[i].type);
            stk__schema_free(c, i);
            return -ENOMEM;
        }
        for (int d = c[i].ndim; d < STK_MAX_DIMS; d++) c[i].shape[d] = 0;
    }
    *out = c;
    return 0;
}

uint64_t stk__schema_hash(const stk_field *fields, size_t nfields) {
    XXH3_state_t state, *st = &state;
    XXH3_INITSTATE(st);
    XXH3_64bits_reset(st);
    char buf[STK_NAME_MAX + 64 + 24 * STK_MAX_DIMS];
    for (size_t i = 0; i < nfields; i++) {
        const stk_field *f = &fields[i];
        int n = snprintf(buf, sizeof buf, "%s|%s|%d|", f->name,
                         stk_dtype_name(f->dtype), f->ndim);
        for (int d = 0; d < f->ndim && n > 0 && (size_t)n < sizeof buf; d++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%lld,",
                          (long long)f->shape[d]);
        if (n > 0 && (size_t)n < sizeof buf)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "|%s;",
                          stk__codec_name(f->codec));
        stk__hash_update(st, buf, STK__MIN((size_t)n, sizeof buf - 1));
        /* A logical type joins the hash only where there is one, so that
         * the hash of a schema without types (every dataset written before
         * they existed) is unchanged. */
        if (f->type) {
            stk__hash_update(st, "type=", 5);
            stk__hash_update(st, f->type, strlen(f->type));
            stk__hash_update(st, ";", 1);
        }
    }
    return XXH3_64bits_digest(st);
}

int stk__layout_init(stk__layout *L, const stk_field *fields, const stk__fieldinfo *info,
                     size_t nfields, uint32_t align) {
    stk__layout_free(L);
    if (nfields == 0 || align == 0) return 0;
    for (size_t f = 0; f < nfields; f++)
        if (fields[f].codec != STK_CODEC_NONE || info[f].fixed_rows == STK_RAGGED ||
            info[f].chunks || info[f].conv != STK__CONV_NONE || info[f].conv_varies)
            return 0;
    uint64_t *w = stk__calloc(3 * nfields, sizeof *w);
    if (!w) return -ENOMEM;
    L->off = w;
    L->len = w + nfields;
    L->rows = w + 2 * nfields;
    uint64_t at = 0;
    for (size_t f = 0; f < nfields; f++) {
        uint64_t rows = (uint64_t)info[f].fixed_rows, len;
        if (!stk__mul_ok(rows, info[f].row_bytes, &len) || len > (UINT64_C(1) << 60) ||
            at > (UINT64_C(1) << 61)) {
            stk__layout_free(L); /* no real record is this large: version 1 names it */
            return 0;
        }
        at = stk__align_up(at, align);
        L->off[f] = at;
        L->len[f] = len;
        L->rows[f] = rows;
        at += len;
    }
    L->stride = stk__align_up(at, align);
    L->ok = true;
    return 0;
}

void stk__layout_free(stk__layout *L) {
    stk__free(L->off);
    memset(L, 0, sizeof *L);
}
