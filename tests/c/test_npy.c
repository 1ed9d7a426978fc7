/*
 * test_npy: stk_npy_parse on hand-built .npy headers.
 *
 * Versions 1.0, 2.0 and 3.0; the dtypes stoker takes and the ones it
 * refuses (big-endian, complex, object, structured); Fortran order; bad
 * magic; unknown versions; truncation; malformed dicts; scalar, 1-D with a
 * trailing comma, 8 and 9 dimensions.  data_offset and data_bytes must be
 * exact.  Then every prefix of a valid file and a few thousand deterministic
 * random mutations: the parser never reads outside the buffer (each input
 * is a heap block of exactly its length, for ASan) and always returns 0 or a
 * negative code with a message.
 */
#include "util.h"

/* Builds an .npy header of version major.minor around `dict`, padded with
 * spaces and a newline to a multiple of 64 as NumPy does, followed by
 * `data_len` bytes of data.  Returns the total length; *hdr_len gets the
 * header's. */
static size_t make_npy(uint8_t *buf, size_t cap, unsigned major, unsigned minor,
                       const char *dict, size_t data_len, size_t *hdr_len) {
    size_t pre = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total = pre + dl + 1;
    total = (total + 63) / 64 * 64;
    size_t hlen = total - pre;
    CHECK(total + data_len <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = (uint8_t)minor;
    if (pre == 10) {
        buf[8] = (uint8_t)hlen;
        buf[9] = (uint8_t)(hlen >> 8);
    } else {
        for (int k = 0; k < 4; k++) buf[8 + k] = (uint8_t)(hlen >> (8 * k));
    }
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    test_fill(buf + total, data_len, 3);
    if (hdr_len) *hdr_len = total;
    return total + data_len;
}

/* Parses a copy of exactly `len` bytes, so that ASan sees any overread. */
static int parse(const uint8_t *buf, size_t len, stk_npy_header *h, stk_error *err) {
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    memcpy(copy, buf, len);
    int rc = stk_npy_parse(copy, len, "x.npy", h, err);
    free(copy);
    return rc;
}

static uint8_t buf[1 << 16];

/* A header that parses: checks dtype, shape and where the data lies. */
static void ok(unsigned major, const char *dict, stk_dtype dtype, int ndim,
               const int64_t *shape) {
    stk_error err = {0};
    size_t esize = stk_dtype_size(dtype), elems = 1;
    for (int d = 0; d < ndim; d++) elems *= (size_t)shape[d];
    size_t hdr;
    size_t len = make_npy(buf, sizeof buf, major, 0, dict, esize * elems, &hdr);
    stk_npy_header h;
    memset(&h, 0xcc, sizeof h);
    CHECK_OK(parse(buf, len, &h, &err));
    CHECK(h.dtype == dtype);
    CHECK(h.ndim == ndim);
    for (int d = 0; d < ndim; d++) CHECK(h.shape[d] == shape[d]);
    CHECK(h.data_offset == hdr);
    CHECK(h.data_bytes == esize * elems);
    CHECK(h.data_offset + h.data_bytes == len);
    /* The header alone is enough. */
    memset(&h, 0xcc, sizeof h);
    CHECK_OK(parse(buf, hdr, &h, &err));
    CHECK(h.data_offset == hdr && h.dtype == dtype);
}

/* A header that is refused with `code`; the message names the file. */
static void bad(unsigned major, unsigned minor, const char *dict, int code) {
    stk_error err = {0};
    size_t len = make_npy(buf, sizeof buf, major, minor, dict, 16, NULL);
    stk_npy_header h;
    CHECK_ERR(parse(buf, len, &h, &err), code, "x.npy");
}

#define D(descr, shape) "{'descr': '" descr "', 'fortran_order': False, 'shape': " shape ", }"

static void versions_and_dtypes(void) {
    const int64_t s34[] = {3, 4};
    for (unsigned v = 1; v <= 3; v++) {
        ok(v, D("<f4", "(3, 4)"), STK_F32, 2, s34);
        ok(v, D("|u1", "(3, 4)"), STK_U8, 2, s34);
        ok(v, D("|b1", "(3, 4)"), STK_U8, 2, s34);
        ok(v, D("<i8", "(3, 4)"), STK_I64, 2, s34);
        ok(v, D("<f2", "(3, 4)"), STK_F16, 2, s34);
    }
    const struct {
        const char *descr;
        stk_dtype dtype;
    } more[] = {{"<u2", STK_U16}, {"<u4", STK_U32}, {"<u8", STK_U64}, {"|i1", STK_I8},
                {"<i2", STK_I16}, {"<i4", STK_I32}, {"<f8", STK_F64}, {"=f4", STK_F32}};
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) {
        char dict[128];
        snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (7,), }", more[k].descr);
        ok(1, dict, more[k].dtype, 1, (int64_t[]){7});
    }
    /* Key order, quotes and spacing as other writers produce them. */
    ok(1, "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}", STK_F32, 2,
       (int64_t[]){2, 3});
    ok(2, "{ 'descr' : '<i4' ,\n 'fortran_order' : False ,\t'shape' : ( 5 , 6 ) }", STK_I32, 2,
       (int64_t[]){5, 6});

    bad(1, 0, D(">f4", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, D(">i8", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, D("<c8", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, D("|O", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, D("<U5", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, D("<M8[ns]", "(3,)"), STK_EUNSUPPORTED);
    bad(1, 0, "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (3,), }",
        STK_EUNSUPPORTED);
    bad(1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", STK_EUNSUPPORTED);
}

static void shapes(void) {
    ok(1, D("<f8", "()"), STK_F64, 0, NULL); /* a scalar: one element */
    ok(1, D("<i2", "(5,)"), STK_I16, 1, (int64_t[]){5});
    ok(1, D("|u1", "(0, 3)"), STK_U8, 2, (int64_t[]){0, 3});
    ok(1, D("|u1", "(2, 1, 2, 1, 2, 1, 2, 1)"), STK_U8, 8,
       (int64_t[]){2, 1, 2, 1, 2, 1, 2, 1});
    ok(1, D("<f4", "(3L, 4L)"), STK_F32, 2, (int64_t[]){3, 4}); /* Python 2 */
    bad(1, 0, D("|u1", "(2, 1, 2, 1, 2, 1, 2, 1, 2)"), STK_EUNSUPPORTED);
    bad(1, 0, D("|u1", "(2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 1, 1)"), STK_EUNSUPPORTED);
    bad(1, 0, D("<f8", "(4294967296, 4294967296)"), STK_ECORRUPT); /* overflows */
    bad(1, 0, D("<f8", "(99999999999999999999999,)"), STK_ECORRUPT);
    bad(1, 0, D("<f8", "(3, -4)"), STK_ECORRUPT);
    bad(1, 0, D("<f8", "(3,,)"), STK_ECORRUPT);
    bad(1, 0, D("<f8", "[3, 4]"), STK_ECORRUPT);
    bad(1, 0, D("<f8", "(3, 4"), STK_ECORRUPT);
}

static void malformed(void) {
    stk_error err = {0};
    stk_npy_header h;
    /* Not an .npy file. */
    size_t len = make_npy(buf, sizeof buf, 1, 0, D("<f4", "(3,)"), 12, NULL);
    buf[5] = 'Z';
    CHECK_ERR(parse(buf, len, &h, &err), STK_EBADMAGIC, "x.npy");
    const uint8_t png[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
    CHECK_ERR(parse(png, sizeof png, &h, &err), STK_EBADMAGIC, "x.npy");

    /* Versions. */
    bad(4, 0, D("<f4", "(3,)"), STK_EVERSION);
    bad(0, 0, D("<f4", "(3,)"), STK_EVERSION);
    bad(1, 1, D("<f4", "(3,)"), STK_EVERSION);
    bad(255, 0, D("<f4", "(3,)"), STK_EVERSION);

    /* Truncated: the header says it is longer than the buffer. */
    size_t hdr;
    len = make_npy(buf, sizeof buf, 1, 0, D("<f4", "(3,)"), 0, &hdr);
    CHECK_ERR(parse(buf, hdr - 1, &h, &err), STK_ETRUNCATED, "x.npy");
    len = make_npy(buf, sizeof buf, 2, 0, D("<f4", "(3,)"), 0, &hdr);
    CHECK_ERR(parse(buf, 11, &h, &err), STK_ETRUNCATED, "x.npy");
    CHECK_ERR(parse(buf, hdr - 1, &h, &err), STK_ETRUNCATED, "x.npy");

    /* Garbage where the dict should be. */
    bad(1, 0, "garbage", STK_ECORRUPT);
    bad(1, 0, "", STK_ECORRUPT);
    bad(1, 0, "{", STK_ECORRUPT);
    bad(1, 0, "{}", STK_ECORRUPT);
    bad(1, 0, "{'descr': '<f4', 'fortran_order': False}", STK_ECORRUPT); /* no shape */
    bad(1, 0, "{'descr': '<f4', 'shape': (3,)}", STK_ECORRUPT);          /* no order */
    bad(1, 0, "{'fortran_order': False, 'shape': (3,)}", STK_ECORRUPT);  /* no descr */
    bad(1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", STK_ECORRUPT);
    bad(1, 0, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", STK_ECORRUPT);
    bad(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", STK_ECORRUPT);
    bad(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ", STK_ECORRUPT);
    bad(1, 0, "{'descr: '<f4', 'fortran_order': False, 'shape': (3,)}", STK_ECORRUPT);
    bad(1, 0, "{descr: '<f4', fortran_order: False, shape: (3,)}", STK_ECORRUPT);
    bad(1, 0, "{'d\\escr': '<f4', 'fortran_order': False, 'shape': (3,)}", STK_ECORRUPT);

    /* The header length itself points past the end. */
    len = make_npy(buf, sizeof buf, 1, 0, D("<f4", "(3,)"), 0, &hdr);
    buf[8] = 0xff;
    buf[9] = 0xff;
    CHECK_ERR(parse(buf, len, &h, &err), STK_ETRUNCATED, "x.npy");
    len = make_npy(buf, sizeof buf, 3, 0, D("<f4", "(3,)"), 0, &hdr);
    buf[11] = 0xff;
    CHECK_ERR(parse(buf, len, &h, &err), STK_ETRUNCATED, "x.npy");

    /* NULL name is allowed. */
    len = make_npy(buf, sizeof buf, 1, 0, D("<f4", "(3,)"), 12, NULL);
    CHECK(stk_npy_parse(buf, len, NULL, &h, NULL) == 0);
    CHECK(stk_npy_parse(buf, len - 12 - 1, NULL, &h, &err) == STK_ETRUNCATED);
}

static void prefixes(void) {
    stk_error err = {0};
    for (unsigned v = 1; v <= 3; v++) {
        size_t hdr;
        size_t len = make_npy(buf, sizeof buf, v, 0, D("<f4", "(3, 4, 5)"), 240, &hdr);
        for (size_t n = 0; n <= len; n++) {
            stk_npy_header h;
            memset(&err, 0, sizeof err);
            int rc = parse(buf, n, &h, &err);
            if (n < hdr) {
                if (rc != STK_ETRUNCATED) {
                    fprintf(stderr, "v%u prefix %zu: got %d: %s\n", v, n, rc, err.message);
                    exit(1);
                }
            } else {
                CHECK(rc == 0 && h.data_offset == hdr && h.data_bytes == 240);
            }
        }
    }
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void mutations(void) {
    static const char interesting[] = "(){}[],:'\" \n0123456789-LTFalseTrue<>|=fiubc\\\x00\xff";
    const char *dicts[] = {D("<f4", "(3, 4, 5)"), D("|u1", "()"), D("<i8", "(7,)"),
                           "{'shape':(2,1,2,1,2,1,2,1),'fortran_order':False,'descr':'<f2'}"};
    int accepted = 0, refused = 0;
    for (int it = 0; it < 6000; it++) {
        unsigned v = 1 + (unsigned)(it % 3);
        size_t hdr;
        size_t len = make_npy(buf, sizeof buf, v, 0, dicts[it % 4], 64, &hdr);
        int nmut = 1 + (int)(next() % 4);
        for (int m = 0; m < nmut; m++) {
            size_t pos = (size_t)(next() % hdr);
            uint64_t r = next();
            buf[pos] = (r & 1) ? (uint8_t)(r >> 8)
                               : (uint8_t)interesting[(r >> 8) % (sizeof interesting - 1)];
        }
        if (next() % 4 == 0) len = (size_t)(next() % (len + 1));
        stk_npy_header h;
        stk_error err;
        memset(&err, 0, sizeof err);
        int rc = parse(buf, len, &h, &err);
        if (rc == 0) {
            accepted++;
            CHECK(h.data_offset >= 10 && h.data_offset <= len);
            CHECK(h.ndim >= 0 && h.ndim <= STK_MAX_DIMS);
            CHECK(stk_dtype_size(h.dtype) > 0 && h.dtype != STK_BYTES);
            uint64_t n = stk_dtype_size(h.dtype);
            for (int d = 0; d < h.ndim; d++) {
                CHECK(h.shape[d] >= 0);
                n *= (uint64_t)h.shape[d];
            }
            CHECK(h.data_bytes == n);
        } else {
            refused++;
            CHECK(rc < 0);
            CHECK(err.code == rc);
            CHECK(strstr(err.message, "x.npy") != NULL);
        }
    }
    /* The mutations exercised both outcomes. */
    CHECK(accepted > 100 && refused > 1000);
}

int main(void) {
    versions_and_dtypes();
    shapes();
    malformed();
    prefixes();
    mutations();
    return 0;
}
