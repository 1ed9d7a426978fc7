/*
 * test_roundtrip: what is written comes back byte for byte.
 *
 * One schema holds every dtype in every shape kind: scalar, fixed 1-D, fixed
 * multi-dimensional, ragged first dimension (records with 0 rows included),
 * and zstd-compressed fields next to raw ones.  It is packed with alignments
 * 1, 8, 64 and 4096 and read back through stk_dataset_read (with and without
 * STK_READ_VERIFY) and stk_dataset_get (pointer, rows, raw_bytes); the
 * schema, the field lookups and the attrs round trip are checked as well,
 * and records of up to 10 MiB written across the writer's 2 MiB pieces.
 */
#include "util.h"

#include <jansson.h>
#include <zstd.h>

#define MAX_FIELDS 128
#define DTYPES 13 /* STK_U8 .. STK_BYTES */

static stk_field fields[MAX_FIELDS];
static char names[MAX_FIELDS][STK_NAME_MAX];
static size_t nfields;

static void add(const char *prefix, stk_dtype d, int ndim, const int64_t *shape,
                stk_codec codec, int level) {
    CHECK(nfields < MAX_FIELDS);
    stk_field *f = &fields[nfields];
    snprintf(names[nfields], STK_NAME_MAX, "%s_%s", prefix, stk_dtype_name(d));
    f->name = names[nfields];
    f->dtype = d;
    f->ndim = ndim;
    for (int k = 0; k < ndim; k++) f->shape[k] = shape[k];
    f->codec = codec;
    f->codec_level = level;
    nfields++;
}

static void build_schema(void) {
    nfields = 0;
    for (int d = STK_U8; d <= STK_BYTES; d++) {
        stk_dtype t = (stk_dtype)d;
        if (t == STK_BYTES) {
            /* Bytes fields have exactly one dimension. */
            add("fixed", t, 1, (int64_t[]){7}, STK_CODEC_NONE, 0);
            add("ragged", t, 1, (int64_t[]){STK_RAGGED}, STK_CODEC_NONE, 0);
            add("zragged", t, 1, (int64_t[]){STK_RAGGED}, STK_CODEC_ZSTD, 0);
            add("zfixed", t, 1, (int64_t[]){300}, STK_CODEC_ZSTD, 19);
            continue;
        }
        add("scalar", t, 0, NULL, STK_CODEC_NONE, 0);
        add("vec", t, 1, (int64_t[]){3}, STK_CODEC_NONE, 0);
        add("mat", t, 3, (int64_t[]){2, 3, 4}, STK_CODEC_NONE, 0);
        add("ragged", t, 2, (int64_t[]){STK_RAGGED, 3}, STK_CODEC_NONE, 0);
        add("zragged", t, 3, (int64_t[]){STK_RAGGED, 2, 2}, STK_CODEC_ZSTD, 1);
        add("zscalar", t, 0, NULL, STK_CODEC_ZSTD, 0);
    }
}

static uint64_t row_bytes(const stk_field *f) {
    uint64_t n = stk_dtype_size(f->dtype);
    for (int k = 1; k < f->ndim; k++) n *= (uint64_t)f->shape[k];
    return n;
}

/* Rows of field i in record r: fixed, or 0..5 (a few records much longer). */
static uint64_t rows_of(size_t i, uint64_t r) {
    const stk_field *f = &fields[i];
    if (f->ndim == 0) return 1;
    if (f->shape[0] != STK_RAGGED) return (uint64_t)f->shape[0];
    if (r % 11 == 4) return 3000 + i; /* spans several checksum blocks */
    return (r * 7 + i) % 6;           /* 0 included */
}

/* The bytes of field i in record r.  Compressed fields get compressible
 * bytes, so that compression really does something. */
static void fill(size_t i, uint64_t r, uint8_t *buf, size_t n) {
    if (fields[i].codec == STK_CODEC_ZSTD) {
        for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)((k / 16) % 5 + r + i);
        if (n) buf[n / 2] ^= 0x5a;
    } else {
        test_fill(buf, n, r * 1000 + i + 1);
    }
}

static void pack(const char *dir, uint32_t align, uint64_t nrec, const char *attrs) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.align = align;
    o.attrs_json = attrs;
    if (align == 8) o.block_size = 4096; /* many small blocks */
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, fields, nfields, &o, &w, &err));
    stk_value vals[MAX_FIELDS];
    uint8_t *bufs[MAX_FIELDS];
    for (uint64_t r = 0; r < nrec; r++) {
        for (size_t i = 0; i < nfields; i++) {
            uint64_t rows = rows_of(i, r);
            size_t n = (size_t)(rows * row_bytes(&fields[i]));
            bufs[i] = n ? malloc(n) : NULL;
            CHECK(n == 0 || bufs[i] != NULL);
            fill(i, r, bufs[i], n);
            vals[i].data = bufs[i];
            vals[i].rows = rows;
        }
        CHECK_OK(stk_writer_append(w, vals, &err));
        for (size_t i = 0; i < nfields; i++) free(bufs[i]);
        CHECK(stk_writer_num_records(w) == r + 1);
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

static void check_schema(const stk_dataset *ds) {
    CHECK(stk_dataset_num_fields(ds) == nfields);
    for (size_t i = 0; i < nfields; i++) {
        const stk_field *got = stk_dataset_field(ds, i), *want = &fields[i];
        CHECK(got != NULL);
        CHECK(strcmp(got->name, want->name) == 0);
        CHECK(got->dtype == want->dtype);
        CHECK(got->ndim == want->ndim);
        for (int k = 0; k < want->ndim; k++) CHECK(got->shape[k] == want->shape[k]);
        CHECK(got->codec == want->codec);
        CHECK(got->codec_level == want->codec_level);
        CHECK(stk_dataset_find_field(ds, want->name) == (int)i);
    }
    CHECK(stk_dataset_field(ds, nfields) == NULL);
    CHECK(stk_dataset_find_field(ds, "no_such_field") == -ENOENT);
    CHECK(stk_dataset_find_field(ds, "") == -ENOENT);
}

/* Checks records 0..nrec-1 and that record `total` is out of range. */
static void check_records(const stk_dataset *ds, uint32_t align, uint64_t nrec,
                          uint64_t total) {
    stk_error err = {0};
    size_t cap = 1 << 20;
    uint8_t *want = malloc(cap), *got = malloc(cap), *dec = malloc(cap);
    CHECK(want && got && dec);
    uint64_t compressed_raw = 0, compressed_stored = 0;
    for (uint64_t r = 0; r < nrec; r++) {
        uint32_t shard = 0;
        for (size_t i = 0; i < nfields; i++) {
            const stk_field *f = &fields[i];
            uint64_t rows = rows_of(i, r);
            size_t n = (size_t)(rows * row_bytes(f));
            CHECK(n <= cap);
            fill(i, r, want, n);

            /* Where it lies. */
            stk_extent x;
            memset(&x, 0xee, sizeof x);
            CHECK_OK(stk_dataset_get(ds, r, i, &x, &err));
            CHECK(x.rows == rows);
            CHECK(x.raw_bytes == n);
            CHECK(x.codec == f->codec);
            CHECK(x.offset % align == 0);
            CHECK((uintptr_t)x.data % align == 0);
            stk_shard_info si;
            CHECK(stk_dataset_shard(ds, x.shard, &si) == 0);
            CHECK(x.offset >= 4096 && x.offset + x.stored_bytes <= 4096 + si.data_bytes);
            if (i == 0) shard = x.shard;
            CHECK(x.shard == shard); /* a record lies in one shard */
            if (f->codec == STK_CODEC_NONE) {
                CHECK(x.stored_bytes == n);
                CHECK(n == 0 || memcmp(x.data, want, n) == 0);
            } else {
                size_t d = ZSTD_decompress(dec, cap, x.data, (size_t)x.stored_bytes);
                CHECK(!ZSTD_isError(d) && d == n);
                CHECK(n == 0 || memcmp(dec, want, n) == 0);
                compressed_raw += n;
                compressed_stored += x.stored_bytes;
            }

            /* Copied out, with and without verification. */
            for (int verify = 0; verify < 2; verify++) {
                size_t len = 12345;
                memset(got, 0xa5, n + 1);
                CHECK_OK(stk_dataset_read(ds, r, i, got, n, &len,
                                          verify ? STK_READ_VERIFY : 0, &err));
                CHECK(len == n);
                CHECK(n == 0 || memcmp(got, want, n) == 0);
                CHECK(got[n] == 0xa5); /* nothing written past the field */
            }
            if (n == 0) {
                /* An empty field needs no buffer at all. */
                size_t len = 12345;
                CHECK_OK(stk_dataset_read(ds, r, i, NULL, 0, &len, STK_READ_VERIFY, &err));
                CHECK(len == 0);
            } else {
                size_t len = 0;
                CHECK_ERR(stk_dataset_read(ds, r, i, got, n - 1, &len, 0, &err), -ENOSPC,
                          f->name);
                CHECK(len == n);
            }
        }
    }
    /* Compression happened: the compressible fields shrank overall. */
    CHECK(compressed_raw > 0 && compressed_stored < compressed_raw / 2);

    /* Out of range. */
    stk_extent x;
    size_t len;
    CHECK_ERR(stk_dataset_get(ds, total, 0, &x, &err), -EINVAL, "record");
    CHECK_ERR(stk_dataset_get(ds, 0, nfields, &x, &err), -EINVAL, "field");
    CHECK_ERR(stk_dataset_read(ds, total, 0, got, cap, &len, 0, &err), -EINVAL, "record");
    CHECK_ERR(stk_dataset_read(ds, 0, nfields, got, cap, &len, STK_READ_VERIFY, &err),
              -EINVAL, "field");
    free(want);
    free(got);
    free(dec);
}

static void check_attrs(const stk_dataset *ds, const char *attrs) {
    const char *got = stk_dataset_attrs(ds);
    CHECK(got != NULL);
    if (!attrs) {
        CHECK(strcmp(got, "{}") == 0);
        return;
    }
    json_error_t je;
    json_t *a = json_loads(attrs, 0, &je), *b = json_loads(got, 0, &je);
    CHECK(a && b);
    CHECK(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    CHECK(strchr(got, '\n') == NULL); /* compact */
}

static void roundtrip(uint32_t align, uint64_t nrec, const char *attrs) {
    stk_error err = {0};
    char name[32];
    snprintf(name, sizeof name, "roundtrip-a%u", align);
    const char *dir = test_dir(name);
    pack(dir, align, nrec, attrs);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(strcmp(stk_dataset_path(ds), dir) == 0);
    check_schema(ds);
    check_attrs(ds, attrs);
    CHECK(stk_dataset_num_records(ds) == nrec);
    check_records(ds, align, nrec, nrec);
    stk_verify_report rep;
    CHECK_OK(stk_dataset_verify(ds, NULL, &rep, &err));
    CHECK(rep.records_checked == nrec);
    CHECK(rep.problems == 0);
    stk_dataset_close(ds);

    /* The manifest file can be named instead of the directory. */
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    CHECK_OK(stk_dataset_open(mpath, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == nrec);
    check_records(ds, align, 5, nrec);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* With align 1 nothing is padded: the data region is exactly the bytes. */
static void packed_tight(void) {
    stk_error err = {0};
    const char *dir = test_dir("roundtrip-tight");
    stk_field f[2] = {{.name = "a", .dtype = STK_U8, .ndim = 0},
                      {.name = "b", .dtype = STK_I16, .ndim = 1, .shape = {STK_RAGGED}}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.align = 1;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 2, &o, &w, &err));
    uint64_t total = 0;
    for (uint64_t r = 0; r < 100; r++) {
        uint8_t a = (uint8_t)r;
        int16_t b[7];
        for (int k = 0; k < 7; k++) b[k] = (int16_t)(r * 100 - k);
        stk_value v[2] = {{&a, 1}, {b, r % 8 == 7 ? 0 : r % 8}};
        CHECK_OK(stk_writer_append(w, v, &err));
        total += 1 + 2 * v[1].rows;
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    CHECK(stk_dataset_num_shards(ds) == 1);
    CHECK(si.data_bytes == total);
    for (uint64_t r = 0; r < 100; r++) {
        int16_t b[8];
        size_t len;
        CHECK_OK(stk_dataset_read(ds, r, 1, b, sizeof b, &len, STK_READ_VERIFY, &err));
        CHECK(len == 2 * (r % 8 == 7 ? 0 : r % 8));
        for (size_t k = 0; k < len / 2; k++) CHECK(b[k] == (int16_t)(r * 100 - k));
    }
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* The writer sends the data region to the file in pieces that end on the
 * file's 2 MiB boundaries: staged up to the next one, or straight from the
 * caller's buffer when nothing is staged (src/format/writer.c, `stage`).
 * Records that end on a boundary, fill the stage to one exactly, span
 * several from an empty or a part-filled stage, and close shards, all come
 * back byte for byte, through the reader and in the file itself. */
static void pieces_on_boundaries(void) {
    stk_error err = {0};
    const uint64_t M2 = 2u << 20, H = 4096; /* FORMAT.md: data from byte 4096 */
    uint64_t sizes[48];
    size_t n = 0;
    sizes[n++] = M2 - H;     /* straight, ending on the first boundary */
    sizes[n++] = M2;         /* straight, one whole piece */
    sizes[n++] = 10;         /* staged */
    sizes[n++] = M2 - 10;    /* fills the stage to the boundary exactly */
    sizes[n++] = 3 * M2 + 5; /* straight over three boundaries, 5 bytes staged */
    sizes[n++] = 100;
    sizes[n++] = 5 * M2;     /* from a part-filled stage: to the boundary, straight, tail */
    sizes[n++] = 0;
    uint64_t x = 77;
    while (n < sizeof sizes / sizeof *sizes) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t k = x >> 33;
        sizes[n++] = k % 2 == 0 ? k % (3 * M2) : k % 5000; /* half of them large */
    }
    const char *dir = test_dir("roundtrip-pieces");
    stk_field f = {.name = "b", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.align = 1;
    o.shard_bytes = 24u << 20;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &o, &w, &err));
    size_t cap = 11u << 20;
    uint8_t *buf = malloc(cap), *got = malloc(cap);
    CHECK(buf && got);
    for (size_t r = 0; r < n; r++) {
        test_fill(buf, (size_t)sizes[r], r + 1);
        stk_value v = {buf, sizes[r]};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == n);
    CHECK(stk_dataset_num_shards(ds) > 2);
    for (size_t r = 0; r < n; r++) {
        size_t len = 0;
        CHECK_OK(stk_dataset_read(ds, r, 0, got, cap, &len, STK_READ_VERIFY, &err));
        CHECK(len == sizes[r]);
        test_fill(buf, (size_t)sizes[r], r + 1);
        CHECK(memcmp(got, buf, len) == 0);
    }
    /* The first shard's file holds its records one after another from the
     * data region's start (align 1: no padding). */
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    FILE *fp = fopen(si.file, "rb");
    CHECK(fp != NULL);
    CHECK(fseek(fp, (long)H, SEEK_SET) == 0);
    uint64_t total = 0;
    for (size_t r = 0; r < si.records; r++) {
        CHECK(fread(got, 1, (size_t)sizes[r], fp) == sizes[r]);
        test_fill(buf, (size_t)sizes[r], r + 1);
        CHECK(memcmp(got, buf, (size_t)sizes[r]) == 0);
        total += sizes[r];
    }
    CHECK(si.data_bytes == total);
    fclose(fp);
    stk_verify_report rep;
    CHECK_OK(stk_dataset_verify(ds, NULL, &rep, &err));
    CHECK(rep.records_checked == n && rep.problems == 0);
    stk_dataset_close(ds);
    free(buf);
    free(got);
    test_rmrf(dir);
}

/* attrs_json must be a JSON object; nothing is created otherwise. */
static void bad_attrs(void) {
    stk_error err = {0};
    const char *bad[] = {"[1, 2]", "not json", "\"text\"", "{\"a\": }", "42", "", "null"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *dir = test_dir("roundtrip-badattrs");
        stk_field f = {.name = "x", .dtype = STK_U8, .ndim = 0};
        stk_writer_options o;
        stk_writer_options_init(&o);
        o.attrs_json = bad[k];
        stk_writer *w = (stk_writer *)&err; /* must be reset to NULL */
        CHECK_ERR(stk_writer_create(dir, &f, 1, &o, &w, &err), -EINVAL, "attrs");
        CHECK(w == NULL);
        CHECK(!test_exists(dir));
    }
}

int main(void) {
    build_schema();
    CHECK(nfields == 12 * 6 + 4);
    roundtrip(64, 30, "{\"tokenizer\": \"gpt2\", \"n\": 3, \"nested\": {\"a\": [1, 2.5, null]}}");
    roundtrip(1, 30, NULL);
    roundtrip(8, 30, "{}");
    roundtrip(4096, 6, "{\"unicode\": \"h\\u00e9\"}");
    packed_tight();
    pieces_on_boundaries();
    bad_attrs();
    return 0;
}
