/*
 * test_schema: what a schema, the writer options and the records appended
 * may be, and the small lookup functions.
 *
 * Invalid schemas and options are refused with -EINVAL before anything is
 * created on disk.  A record whose rows contradict a fixed shape is refused
 * with STK_ESCHEMA naming the field and the record, after which the writer
 * takes no more records and the dataset stays incomplete.  stk_dtype_size,
 * stk_dtype_name and stk_dtype_parse agree for every dtype, and
 * stk_strerror gives every STK_E* code its own non-empty text.  A field's
 * logical type must be short printable ASCII and survives the manifest.
 */
#include "util.h"

/* Creating a writer with this schema and these options fails with -EINVAL,
 * mentioning `needle`, and leaves no directory behind. */
static void refused(const stk_field *f, size_t n, const stk_writer_options *o,
                    const char *needle) {
    stk_error err = {0};
    const char *dir = test_dir("schema-refused");
    stk_writer *w = (stk_writer *)&err;
    CHECK_ERR(stk_writer_create(dir, f, n, o, &w, &err), -EINVAL, needle);
    CHECK(w == NULL);
    CHECK(!test_exists(dir));
}

static void accepted(const stk_field *f, size_t n, const stk_writer_options *o) {
    stk_error err = {0};
    const char *dir = test_dir("schema-accepted");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, n, o, &w, &err));
    CHECK(w != NULL);
    stk_writer_free(w);
    test_rmrf(dir);
}

static void bad_schemas(void) {
    stk_field ok = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 3}};
    accepted(&ok, 1, NULL);

    refused(&ok, 0, NULL, "field");  /* no fields */
    refused(NULL, 1, NULL, "field"); /* no array */

    stk_field dup[2] = {ok, ok};
    refused(dup, 2, NULL, "'x'");
    dup[1].dtype = STK_U8; /* same name, other type: still a duplicate */
    refused(dup, 2, NULL, "'x'");

    const char *bad_names[] = {"", "a b", "a/b", "a:b", "caf\xc3\xa9", "tab\t", "x\"y",
                               "semi;colon"};
    for (size_t k = 0; k < sizeof bad_names / sizeof bad_names[0]; k++) {
        stk_field f = ok;
        f.name = bad_names[k];
        refused(&f, 1, NULL, "name");
    }
    stk_field f = ok;
    f.name = NULL;
    refused(&f, 1, NULL, "name");
    char longest[STK_NAME_MAX + 1];
    memset(longest, 'n', sizeof longest);
    longest[STK_NAME_MAX] = '\0'; /* 64 characters: one too many */
    f.name = longest;
    refused(&f, 1, NULL, "name");
    longest[STK_NAME_MAX - 1] = '\0'; /* 63: the longest allowed */
    accepted(&f, 1, NULL);
    f.name = "Az09_.-";
    accepted(&f, 1, NULL);

    f = ok;
    f.dtype = (stk_dtype)0;
    refused(&f, 1, NULL, "dtype");
    f.dtype = (stk_dtype)(STK_BYTES + 1);
    refused(&f, 1, NULL, "dtype");
    f.dtype = (stk_dtype)-1;
    refused(&f, 1, NULL, "dtype");

    f = ok;
    f.shape[0] = 2;
    f.shape[1] = STK_RAGGED; /* only the first dimension may be ragged */
    refused(&f, 1, NULL, "dimension 1");
    f.shape[0] = 0; /* fixed dimensions are >= 1 */
    f.shape[1] = 3;
    refused(&f, 1, NULL, "dimension 0");
    f.shape[0] = 4;
    f.shape[1] = 0;
    refused(&f, 1, NULL, "dimension 1");
    f.shape[1] = -7;
    refused(&f, 1, NULL, "dimension 1");
    f.shape[0] = -2;
    f.shape[1] = 3;
    refused(&f, 1, NULL, "dimension 0");

    f = ok;
    f.ndim = STK_MAX_DIMS + 1;
    refused(&f, 1, NULL, "ndim");
    f.ndim = -1;
    refused(&f, 1, NULL, "ndim");
    f.ndim = STK_MAX_DIMS;
    for (int d = 0; d < STK_MAX_DIMS; d++) f.shape[d] = 2;
    accepted(&f, 1, NULL);

    /* A row over 1 TiB, and one whose size overflows. */
    f = ok;
    f.ndim = 3;
    f.shape[1] = 1 << 20;
    f.shape[2] = 1 << 20;
    refused(&f, 1, NULL, "'x'");
    f.shape[1] = INT64_MAX;
    f.shape[2] = INT64_MAX;
    refused(&f, 1, NULL, "overflow");

    /* bytes: exactly one dimension. */
    stk_field b = {.name = "b", .dtype = STK_BYTES, .ndim = 2, .shape = {STK_RAGGED, 4}};
    refused(&b, 1, NULL, "bytes");
    b.ndim = 0;
    refused(&b, 1, NULL, "bytes");
    b.ndim = 1;
    accepted(&b, 1, NULL);

    /* Codecs. */
    f = ok;
    f.codec = (stk_codec)2;
    refused(&f, 1, NULL, "codec");
    f.codec = STK_CODEC_ZSTD;
    f.codec_level = 23;
    refused(&f, 1, NULL, "level");
    f.codec_level = -1;
    refused(&f, 1, NULL, "level");
    f.codec_level = 19;
    accepted(&f, 1, NULL);

    /* One bad field among good ones. */
    stk_field many[3] = {ok, ok, ok};
    many[1].name = "y";
    many[2].name = "z";
    many[2].ndim = 1;
    many[2].shape[0] = 0;
    refused(many, 3, NULL, "'z'");
}

static void bad_options(void) {
    stk_field ok = {.name = "x", .dtype = STK_U8, .ndim = 0};
    stk_writer_options o;
#define OPT(field, value, needle)            \
    do {                                     \
        stk_writer_options_init(&o);         \
        o.field = value;                     \
        refused(&ok, 1, &o, needle);         \
    } while (0)
    OPT(align, 3, "align");
    OPT(align, 0, "align");
    OPT(align, 8192, "align");
    OPT(align, 48, "align");
    OPT(block_size, 1000, "block_size");
    OPT(block_size, 2048, "block_size");
    OPT(block_size, 5000, "block_size");
    OPT(block_size, 32u << 20, "block_size");
    OPT(shard_bytes, 4095, "shard_bytes");
    OPT(shard_bytes, 0, "shard_bytes");
    OPT(part_count, 0, "part");
    OPT(attrs_json, "[]", "attrs");
#undef OPT
    stk_writer_options_init(&o);
    o.part_index = 3;
    o.part_count = 3;
    refused(&ok, 1, &o, "part 3 of 3");
    o.part_index = 7;
    refused(&ok, 1, &o, "part 7 of 3");

    /* The limits themselves are accepted. */
    const uint32_t aligns[] = {1, 2, 4096};
    for (size_t k = 0; k < 3; k++) {
        stk_writer_options_init(&o);
        o.align = aligns[k];
        accepted(&ok, 1, &o);
    }
    stk_writer_options_init(&o);
    o.block_size = 4096;
    o.shard_bytes = 4096;
    accepted(&ok, 1, &o);
    o.block_size = 16u << 20;
    accepted(&ok, 1, &o);
    o.part_index = 2;
    o.part_count = 3;
    accepted(&ok, 1, &o);

    /* Missing arguments. */
    stk_error err = {0};
    stk_writer *w = NULL;
    CHECK_ERR(stk_writer_create(NULL, &ok, 1, NULL, &w, &err), -EINVAL, "path");
    CHECK_ERR(stk_writer_create("", &ok, 1, NULL, &w, &err), -EINVAL, "path");
    CHECK_ERR(stk_writer_create(test_dir("schema-noout"), &ok, 1, NULL, NULL, &err), -EINVAL,
              "out");
}

/* The defaults are the documented ones. */
static void defaults(void) {
    stk_writer_options o;
    memset(&o, 0x5a, sizeof o);
    stk_writer_options_init(&o);
    CHECK(o.shard_bytes == 256ull << 20);
    CHECK(o.align == 64);
    CHECK(o.block_size == 64u << 10);
    CHECK(o.part_index == 0 && o.part_count == 1);
    CHECK(o.overwrite == 0 && o.sync == 1 && o.attrs_json == NULL);
    stk_verify_options v;
    memset(&v, 0x5a, sizeof v);
    stk_verify_options_init(&v);
    CHECK(v.threads == 0 && v.max_problems == 100);
    CHECK(v.on_problem == NULL && v.on_progress == NULL && v.ctx == NULL);
}

/* Rows that contradict the schema: the record is refused and the writer is
 * finished with. */
static void wrong_rows(void) {
    stk_field f[3] = {
        {.name = "label", .dtype = STK_I32, .ndim = 0},
        {.name = "image", .dtype = STK_U8, .ndim = 3, .shape = {4, 4, 3}},
        {.name = "text", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED}},
    };
    int32_t label = 1;
    uint8_t image[4 * 4 * 3 * 2] = {0};
    const char *text = "hello";
    struct {
        uint64_t label_rows, image_rows;
        const char *field;
    } cases[] = {{1, 3, "'image'"}, {1, 5, "'image'"}, {1, 0, "'image'"},
                 {2, 4, "'label'"}, {0, 4, "'label'"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        stk_error err = {0};
        const char *dir = test_dir("schema-rows");
        stk_writer *w = NULL;
        CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
        /* Three good records first: the bad one is record 3. */
        for (int r = 0; r < 3; r++) {
            stk_value v[3] = {{&label, 1}, {image, 4}, {text, 5}};
            CHECK_OK(stk_writer_append(w, v, &err));
        }
        stk_value v[3] = {{&label, cases[k].label_rows}, {image, cases[k].image_rows}, {text, 5}};
        CHECK_ERR(stk_writer_append(w, v, &err), STK_ESCHEMA, cases[k].field);
        CHECK(test_names_record(err.message, 3));
        CHECK(stk_writer_num_records(w) == 3);

        /* No more records, and no finishing. */
        stk_value good[3] = {{&label, 1}, {image, 4}, {text, 5}};
        memset(&err, 0, sizeof err);
        CHECK(stk_writer_append(w, good, &err) < 0);
        CHECK(err.code < 0 && err.message[0]);
        CHECK(stk_writer_num_records(w) == 3);
        memset(&err, 0, sizeof err);
        CHECK(stk_writer_finish(w, &err) < 0);
        stk_writer_free(w);
        stk_dataset *ds = NULL;
        CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, "incomplete");
        test_rmrf(dir);
    }

    /* Data missing for rows that need bytes. */
    stk_error err = {0};
    const char *dir = test_dir("schema-nodata");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
    stk_value v[3] = {{&label, 1}, {image, 4}, {NULL, 5}};
    memset(&err, 0, sizeof err);
    int rc = stk_writer_append(w, v, &err);
    CHECK(rc < 0 && err.code == rc && strstr(err.message, "'text'"));
    CHECK(test_names_record(err.message, 0));
    stk_writer_free(w);
    test_rmrf(dir);
    /* NULL data is fine for zero rows. */
    dir = test_dir("schema-nulldata");
    CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
    stk_value z[3] = {{&label, 1}, {image, 4}, {NULL, 0}};
    CHECK_OK(stk_writer_append(w, z, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    /* A finished writer takes no more records. */
    memset(&err, 0, sizeof err);
    CHECK(stk_writer_append(w, z, &err) < 0 && err.message[0]);
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 1);
    stk_extent x;
    CHECK_OK(stk_dataset_get(ds, 0, 2, &x, &err));
    CHECK(x.rows == 0 && x.raw_bytes == 0);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

static void dtypes(void) {
    const struct {
        stk_dtype d;
        const char *name;
        size_t size;
    } all[] = {{STK_U8, "u8", 1},     {STK_U16, "u16", 2}, {STK_U32, "u32", 4},
               {STK_U64, "u64", 8},   {STK_I8, "i8", 1},   {STK_I16, "i16", 2},
               {STK_I32, "i32", 4},   {STK_I64, "i64", 8}, {STK_F16, "f16", 2},
               {STK_BF16, "bf16", 2}, {STK_F32, "f32", 4}, {STK_F64, "f64", 8},
               {STK_BYTES, "bytes", 1}};
    CHECK(sizeof all / sizeof all[0] == 13);
    for (size_t k = 0; k < 13; k++) {
        CHECK(stk_dtype_size(all[k].d) == all[k].size);
        CHECK(stk_dtype_name(all[k].d) != NULL);
        CHECK(strcmp(stk_dtype_name(all[k].d), all[k].name) == 0);
        CHECK(stk_dtype_parse(all[k].name) == (int)all[k].d);
        CHECK(stk_dtype_parse(stk_dtype_name(all[k].d)) == (int)all[k].d);
    }
    const int unknown[] = {0, -1, STK_BYTES + 1, 1000};
    for (size_t k = 0; k < 4; k++) {
        CHECK(stk_dtype_size((stk_dtype)unknown[k]) == 0);
        CHECK(stk_dtype_name((stk_dtype)unknown[k]) == NULL);
    }
    const char *bad[] = {"", "U8", "f128", "float32", "u8 ", "byte", "bool"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        CHECK(stk_dtype_parse(bad[k]) == -EINVAL);
    CHECK(stk_dtype_parse(NULL) == -EINVAL);
}

static void strerrors(void) {
    const int codes[] = {STK_EBADMAGIC, STK_EVERSION,    STK_ETRUNCATED, STK_ECORRUPT,
                         STK_EBOUNDS,   STK_ECHECKSUM,   STK_EINCOMPLETE, STK_ESCHEMA,
                         STK_ECODEC,    STK_EMISMATCH,   STK_EUNSUPPORTED};
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown = stk_strerror(-999999);
    CHECK(unknown != NULL);
    for (size_t i = 0; i < n; i++) {
        CHECK(codes[i] < -1000);
        const char *s = stk_strerror(codes[i]);
        CHECK(s != NULL && s[0] != '\0');
        CHECK(strcmp(s, unknown) != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(codes[j] != codes[i]);
            CHECK(strcmp(s, stk_strerror(codes[j])) != 0);
        }
        /* Distinct from the errno texts too. */
        CHECK(strcmp(s, stk_strerror(-EIO)) != 0 && strcmp(s, stk_strerror(-EINVAL)) != 0);
    }
    CHECK(strcmp(stk_strerror(-ENOENT), strerror(ENOENT)) == 0);
    CHECK(stk_strerror(0) != NULL && stk_strerror(0)[0] != '\0');
    CHECK(stk_strerror(12345) != NULL);
    CHECK(strcmp(stk_version(), STK_VERSION_STRING) == 0);
}

/* A field's logical type: printable ASCII of 1..STK_TYPE_MAX-1 characters,
 * kept through the manifest, and NULL where none was given. */
static void types(void) {
    stk_field f[2] = {{.name = "text", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED},
                       .type = "string"},
                      {.name = "n", .dtype = STK_I64, .ndim = 0}};
    char longest[STK_TYPE_MAX + 1];
    memset(longest, 't', sizeof longest);
    longest[STK_TYPE_MAX - 1] = '\0'; /* 127 characters: the most */
    f[0].type = longest;
    accepted(f, 2, NULL);
    longest[STK_TYPE_MAX - 1] = 't';
    longest[STK_TYPE_MAX] = '\0';
    refused(f, 2, NULL, "type");
    const char *bad[] = {"", "tab\t", "caf\xc3\xa9", "new\nline"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        f[0].type = bad[k];
        refused(f, 2, NULL, "type");
    }
    f[0].type = "timestamp[us, tz=America/New_York]";
    stk_error err = {0};
    const char *dir = test_dir("schema-types");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 2, NULL, &w, &err));
    int64_t v = 7;
    stk_value vals[2] = {{"abc", 3}, {&v, 1}};
    CHECK_OK(stk_writer_append(w, vals, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(strcmp(stk_dataset_field(ds, 0)->type, "timestamp[us, tz=America/New_York]") == 0);
    CHECK(stk_dataset_field(ds, 1)->type == NULL);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

int main(void) {
    types();
    bad_schemas();
    bad_options();
    defaults();
    wrong_rows();
    dtypes();
    strerrors();
    return 0;
}
