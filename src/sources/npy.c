/*
 * npy.c: the header of NumPy's .npy files.
 *
 * Layout (NumPy's format, versions 1.0 to 3.0):
 *
 *   OFFSET SIZE  DESCRIPTION
 *        0    6  magic "\x93NUMPY"
 *        6    1  major version (1, 2 or 3)
 *        7    1  minor version (0)
 *        8  2|4  header length H, little-endian: 2 bytes in version 1,
 *                4 bytes in versions 2 and 3
 *   10|12     H  a Python dict literal, e.g.
 *                {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 *                padded with spaces and a newline (UTF-8 in version 3)
 *
 * The array's bytes follow the header.  The parser accepts exactly the
 * literal forms NumPy writes, with any spacing, and rejects everything else
 * with a message; it never reads outside `buf`.
 */
#include "../core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes, copied into out (NUL-ended). */
static bool parse_str(cursor *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return false;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    out[n] = '\0';
    return true;
}

static bool parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
    c->p += n;
    return true;
}

static int parse_shape(cursor *c, stk_npy_header *h) {
    if (!eat(c, '(')) return -1;
    h->ndim = 0;
    for (;;) {
        if (eat(c, ')')) return 0;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
        uint64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10) return -1;
            v = v * 10 + (uint64_t)(*c->p++ - '0');
        }
        skip_ws(c);
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 longs */
        if (h->ndim == STK_MAX_DIMS) return -2;
        if (v > (uint64_t)INT64_MAX) return -1;
        h->shape[h->ndim++] = (int64_t)v;
        if (eat(c, ',')) continue;
        if (eat(c, ')')) return 0;
        return -1;
    }
}

static int descr_dtype(const char *d) {
    char order = d[0];
    const char *t = d + 1;
    if (order != '<' && order != '|' && order != '=' && order != '>') return -EINVAL;
    /* Single-byte types carry '|'; '=' is native, which is little here. */
    static const struct {
        const char *code;
        int dtype;
    } map[] = {{"b1", STK_U8},  {"u1", STK_U8},   {"i1", STK_I8},   {"u2", STK_U16},
               {"i2", STK_I16}, {"u4", STK_U32},  {"i4", STK_I32},  {"u8", STK_U64},
               {"i8", STK_I64}, {"f2", STK_F16},  {"f4", STK_F32},  {"f8", STK_F64}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(t, map[i].code) != 0) continue;
        if (order == '>' && stk_dtype_size((stk_dtype)map[i].dtype) > 1) return -ERANGE;
        return map[i].dtype;
    }
    return -ENOTSUP;
}

int stk_npy_parse(const void *buf, size_t len, const char *name, stk_npy_header *out,
                  stk_error *err) {
    const uint8_t *b = buf;
    if (!name) name = "(npy)";
    if (!buf || !out) return stk__err(err, -EINVAL, "stk_npy_parse: NULL argument");
    memset(out, 0, sizeof *out);
    if (len < 6 || memcmp(b, "\x93NUMPY", 6) != 0)
        return stk__err(err, len < 6 ? STK_ETRUNCATED : STK_EBADMAGIC,
                        "%s: not an .npy file (no \\x93NUMPY magic)", name);
    if (len < 10) return stk__err(err, STK_ETRUNCATED, "%s: .npy header is truncated", name);
    unsigned major = b[6], minor = b[7];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return stk__err(err, STK_ETRUNCATED, "%s: .npy header is truncated", name);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hoff = 12;
    } else {
        return stk__err(err, STK_EVERSION, "%s: .npy format version %u.%u is not supported",
                        name, major, minor);
    }
    if (minor != 0)
        return stk__err(err, STK_EVERSION, "%s: .npy format version %u.%u is not supported",
                        name, major, minor);
    if (hlen > len - hoff)
        return stk__err(err, STK_ETRUNCATED,
                        "%s: .npy header of %zu bytes runs past the %zu bytes given", name,
                        hlen, len);
    cursor c = {(const char *)b + hoff, (const char *)b + hoff + hlen};
    char descr[32] = "";
    int fortran = -1;
    bool have_shape = false;
    if (!eat(&c, '{')) goto bad;
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_str(&c, key, sizeof key) || !eat(&c, ':')) goto bad;
        if (strcmp(key, "descr") == 0) {
            if (!parse_str(&c, descr, sizeof descr)) {
                return stk__err(err, STK_EUNSUPPORTED,
                                "%s: the dtype is structured or unusual; only plain "
                                "numeric dtypes are supported",
                                name);
            }
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "False")) fortran = 0;
            else if (parse_word(&c, "True")) fortran = 1;
            else goto bad;
        } else if (strcmp(key, "shape") == 0) {
            int r = parse_shape(&c, out);
            if (r == -2)
                return stk__err(err, STK_EUNSUPPORTED, "%s: more than %d dimensions", name,
                                STK_MAX_DIMS);
            if (r) goto bad;
            have_shape = true;
        } else {
            goto bad;
        }
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        goto bad;
    }
    if (!descr[0] || fortran < 0 || !have_shape) goto bad;
    if (fortran)
        return stk__err(err, STK_EUNSUPPORTED,
                        "%s: the array is in Fortran order; save it C-contiguous "
                        "(np.ascontiguousarray)",
                        name);
    int dt = descr_dtype(descr);
    if (dt == -ERANGE)
        return stk__err(err, STK_EUNSUPPORTED,
                        "%s: dtype '%s' is big-endian; convert it with "
                        "arr.astype(arr.dtype.newbyteorder('<'))",
                        name, descr);
    if (dt < 0)
        return stk__err(err, STK_EUNSUPPORTED,
                        "%s: dtype '%s' is not supported (b1, u1-u8, i1-i8, f2, f4, f8 are)",
                        name, descr);
    out->dtype = (stk_dtype)dt;
    out->data_offset = hoff + hlen;
    uint64_t n = stk_dtype_size(out->dtype);
    for (int d = 0; d < out->ndim; d++)
        if (!stk__mul_ok(n, (uint64_t)out->shape[d], &n))
            return stk__err(err, STK_ECORRUPT, "%s: the shape overflows", name);
    out->data_bytes = n;
    return 0;
bad:
    return stk__err(err, STK_ECORRUPT, "%s: malformed .npy header near byte %zu", name,
                    (size_t)(c.p - (const char *)b));
}
