/*
 * stoker cat: prints one record's fields, read with its checksum checked;
 * every dtype as text (half floats and bfloat16 widened by hand).
 */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char cat_help[] =
    "Usage: stoker cat DATASET RECORD [--field NAME] [--limit N]\n"
    "\n"
    "Prints the fields of record RECORD (0-based), after checking its checksum.\n"
    "\n"
    "  --field NAME  print only this field\n"
    "  --limit N     print at most N values per field (default 64; 0: all)\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker cat basins.stk 17 --field x --limit 32\n";

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double value_at(const uint8_t *p, stk_dtype t) {
    union {
        uint8_t b[8];
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        float f;
        double d;
    } u;
    memcpy(u.b, p, stk_dtype_size(t));
    switch (t) {
    case STK_U8: case STK_BYTES: return p[0];
    case STK_I8: return (int8_t)p[0];
    case STK_U16: return u.u16;
    case STK_I16: return u.i16;
    case STK_U32: return u.u32;
    case STK_I32: return u.i32;
    case STK_U64: return (double)u.u64;
    case STK_I64: return (double)u.i64;
    case STK_F16: return half_to_double(u.u16);
    case STK_BF16: {
        uint32_t b = (uint32_t)u.u16 << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case STK_F32: return u.f;
    case STK_F64: return u.d;
    }
    return 0;
}

static void print_value(const uint8_t *p, stk_dtype t) {
    if (t == STK_U64) {
        uint64_t v;
        memcpy(&v, p, 8);
        printf("%" PRIu64, v);
    } else if (t == STK_I64) {
        int64_t v;
        memcpy(&v, p, 8);
        printf("%" PRId64, v);
    } else {
        printf("%.9g", value_at(p, t));
    }
}

/* A bytes field as a Python bytes literal. */
static void print_bytes(const uint8_t *buf, uint64_t show, uint64_t n) {
    printf("  b\"");
    for (uint64_t k = 0; k < show; k++) {
        uint8_t c = buf[k];
        if (c >= 32 && c < 127 && c != '"' && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
    printf("\"%s\n", show < n ? "..." : "");
}

/* The first `show` of `n` values, a row (everything past the first
 * dimension) per line. */
static void print_values(const stk_field *f, const uint8_t *buf, uint64_t show, uint64_t n) {
    size_t isz = stk_dtype_size(f->dtype);
    uint64_t per_row = 1;
    for (int d = 1; d < f->ndim; d++) per_row *= (uint64_t)f->shape[d];
    if (f->ndim < 2) per_row = n ? n : 1; /* a vector prints on one line */
    for (uint64_t k = 0; k < show; k++) {
        if (k % per_row == 0) printf(k ? "\n  " : "  ");
        else printf(" ");
        print_value(buf + k * isz, f->dtype);
    }
    printf("%s\n", show < n ? " ..." : "");
    if (show < n)
        printf("  (%" PRIu64 " of %" PRIu64 " values shown; --limit 0 shows all)\n", show, n);
}

/* Reads field `i` of record `rec`, checked, and prints at most `limit`
 * values of it (0: all).  Returns 0 or EXIT_ERROR. */
static int print_field(stk_dataset *ds, uint64_t rec, size_t i, uint64_t limit) {
    const stk_field *f = stk_dataset_field(ds, i);
    stk_error err = {0};
    stk_extent x;
    if (stk_dataset_get(ds, rec, i, &x, &err)) return fail(&err);
    uint8_t *buf = malloc(x.raw_bytes ? (size_t)x.raw_bytes : 1);
    size_t len;
    if (!buf) {
        perror("malloc");
        exit(EXIT_ERROR);
    }
    if (stk_dataset_read(ds, rec, i, buf, (size_t)x.raw_bytes, &len, STK_READ_VERIFY, &err)) {
        free(buf);
        return fail(&err);
    }
    char sh[128];
    int64_t real[STK_MAX_DIMS];
    memcpy(real, f->shape, sizeof real);
    if (f->ndim) real[0] = (int64_t)x.rows;
    shape_str(real, f->ndim, sh, sizeof sh);
    printf("%s: %s %s%s%s%s\n", f->name, stk_dtype_name(f->dtype), sh, f->type ? " (" : "",
           f->type ? f->type : "", f->type ? ")" : "");
    uint64_t n = len / stk_dtype_size(f->dtype), show = limit && limit < n ? limit : n;
    if (f->dtype == STK_BYTES) print_bytes(buf, show, n);
    else print_values(f, buf, show, n);
    free(buf);
    return 0;
}

int cmd_cat(int argc, char **argv) {
    const char *path = NULL, *rec_s = NULL, *only = NULL, *root = NULL;
    uint64_t limit = 64;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(cat_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--field")) only = opt_value("cat", argc, argv, &i);
        else if (!strcmp(a, "--root")) root = opt_value("cat", argc, argv, &i);
        else if (!strcmp(a, "--limit"))
            limit = opt_u64("cat", a, opt_value("cat", argc, argv, &i), 0, UINT64_MAX);
        else if (a[0] == '-') die_usage("cat", "unknown option '%s'", a);
        else if (!path) path = a;
        else if (!rec_s) rec_s = a;
        else die_usage("cat", "unexpected argument '%s'", a);
    }
    uint64_t rec;
    if (!path || !rec_s) die_usage("cat", "DATASET and RECORD are required");
    if (!parse_u64(rec_s, &rec)) die_usage("cat", "RECORD must be a number, not '%s'", rec_s);
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(path, root, &ds, &err)) return fail(&err);
    if (rec >= stk_dataset_num_records(ds)) {
        fprintf(stderr, "%s: error: record %" PRIu64 " is out of range: %s has %" PRIu64
                " records\n", prog, rec, path, stk_dataset_num_records(ds));
        stk_dataset_close(ds);
        return EXIT_ERROR;
    }
    int only_i = -1;
    if (only && (only_i = stk_dataset_find_field(ds, only)) < 0) {
        fprintf(stderr, "%s: error: %s has no field '%s'\n", prog, path, only);
        stk_dataset_close(ds);
        return EXIT_ERROR;
    }
    int rc = 0;
    printf("record %" PRIu64 "\n", rec);
    for (size_t i = 0; i < stk_dataset_num_fields(ds) && rc == 0; i++)
        if (only_i < 0 || (size_t)only_i == i) rc = print_field(ds, rec, i, limit);
    stk_dataset_close(ds);
    return rc;
}
