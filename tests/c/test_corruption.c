/*
 * test_corruption: every kind of damage is reported with its own code and a
 * message naming the file (and, where there is one, the record).
 *
 * Shards: missing, truncated, replaced by a foreign file, an unknown
 * version, a damaged header, an index entry pointing outside the file (the
 * shard is re-sealed after the edit so that the checksums pass and the bounds
 * check is what fires), a damaged index or block table, and damaged record
 * bytes (found by verify and by STK_READ_VERIFY, for that record only).
 * Manifests: not JSON, not stoker's, a newer version, inconsistent counts, a
 * shard name with a '/', a header checksum or size that does not match.
 * Finally every byte of a shard is damaged in turn: no damage may crash or go
 * unnoticed, except in padding that nothing reads.
 */
#include "util.h"
#include "format/format.h"

#include <jansson.h>
#include <sys/stat.h>
#include <xxhash.h>

#define NREC 120

static const stk_field schema[3] = {
    {.name = "id", .dtype = STK_U32, .ndim = 0},
    {.name = "text", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED}},
    {.name = "img", .dtype = STK_F32, .ndim = 2, .shape = {2, 8}, .codec = STK_CODEC_ZSTD},
};

static uint64_t text_len(uint64_t r) { return 20 + (r * 13) % 90; }

static void record(uint64_t r, uint32_t *id, uint8_t *text, float img[16]) {
    *id = (uint32_t)(r * 3 + 1);
    test_fill(text, (size_t)text_len(r), r);
    for (int k = 0; k < 16; k++) img[k] = (float)(k % 4) + (float)r;
}

/* Every case works on a fresh copy of one pristine dataset (several
 * shards), all under one directory. */
static char root[4096];
static char pristine[4200];
static char shard_name[16][64];
static size_t nshards;
static uint64_t shard_first[16];

static void make_pristine(void) {
    stk_error err = {0};
    snprintf(root, sizeof root, "%s", test_dir("corruption"));
    CHECK(mkdir(root, 0755) == 0);
    snprintf(pristine, sizeof pristine, "%s/pristine", root);
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 8192;
    o.block_size = 4096;
    o.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(pristine, schema, 3, &o, &w, &err));
    for (uint64_t r = 0; r < NREC; r++) {
        uint32_t id;
        uint8_t text[128];
        float img[16];
        record(r, &id, text, img);
        stk_value v[3] = {{&id, 1}, {text, text_len(r)}, {img, 2}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(pristine, &ds, &err));
    nshards = stk_dataset_num_shards(ds);
    CHECK(nshards >= 4 && nshards <= 16);
    for (size_t s = 0; s < nshards; s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        const char *base = strrchr(si.file, '/');
        CHECK(base != NULL);
        snprintf(shard_name[s], sizeof shard_name[s], "%s", base + 1);
        shard_first[s] = si.first_record;
    }
    CHECK(strcmp(shard_name[0], "shard-000000.stk") == 0);
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_dataset_close(ds);
}

/* A fresh copy of the pristine dataset, and paths inside it. */
static char work[4400];
static char path_buf[4][4600];
static int path_k;

static const char *fresh(const char *what) {
    snprintf(work, sizeof work, "%s/%s", root, what);
    test_rmrf(work);
    test_copy_dir(pristine, work);
    return work;
}

static const char *in_work(const char *name) {
    char *p = path_buf[path_k++ % 4];
    snprintf(p, sizeof path_buf[0], "%s/%s", work, name);
    return p;
}

static const char *shard_path(size_t s) { return in_work(shard_name[s]); }

/* Opening fails with `code`, naming `needle` (and `needle2` unless NULL). */
static void open_fails(int code, const char *needle, const char *needle2) {
    stk_error err = {0};
    stk_dataset *ds = (stk_dataset *)&err;
    CHECK_ERR(stk_dataset_open(work, &ds, &err), code, needle);
    CHECK(ds == NULL);
    if (needle2 && !strstr(err.message, needle2)) {
        fprintf(stderr, "message does not name '%s': %s\n", needle2, err.message);
        exit(1);
    }
}

static void open_ok(void) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(work, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == NREC);
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_dataset_close(ds);
}

/* ---- manifest editing ---- */

static json_t *manifest_load(void) {
    json_error_t je;
    json_t *m = json_load_file(in_work("manifest.json"), 0, &je);
    CHECK(m != NULL);
    return m;
}

/* Saves an edited manifest as a hand edit would, without the manifest's
 * own checksum (which the edit would fail), so that the checks behind it
 * are reached. */
static void manifest_save(json_t *m) {
    json_object_del(m, "manifest_xxh3");
    CHECK(json_dump_file(m, in_work("manifest.json"), JSON_INDENT(1) | JSON_PRESERVE_ORDER) ==
          0);
    json_decref(m);
}

static json_t *manifest_shard(json_t *m, size_t s) {
    json_t *sh = json_array_get(json_object_get(m, "shards"), s);
    CHECK(sh != NULL);
    return sh;
}

/* ---- re-sealing a shard after an edit ---- */

/* Recomputes the shard's index and block table checksums and its header
 * checksum, and records the new header checksum in the manifest, as the
 * writer would have done. */
static void reseal(size_t s) {
    const char *path = shard_path(s);
    uint8_t h[STK__HEADER_USED];
    test_peek(path, 0, h, sizeof h);
    uint64_t index_off = stk__ld64(h + STK__H_INDEX_OFF);
    uint64_t index_size = stk__ld64(h + STK__H_INDEX_SIZE);
    uint64_t blocks_off = stk__ld64(h + STK__H_BLOCKS_OFF);
    uint64_t blocks_size = stk__ld64(h + STK__H_NBLOCKS) * 8;
    uint8_t *buf = malloc(index_size + blocks_size + 1);
    CHECK(buf != NULL);
    test_peek(path, index_off, buf, index_size);
    stk__st64(h + STK__H_INDEX_HASH, XXH3_64bits(buf, index_size));
    test_peek(path, blocks_off, buf, blocks_size);
    stk__st64(h + STK__H_BLOCKS_HASH, XXH3_64bits(buf, blocks_size));
    free(buf);
    uint64_t hh = XXH3_64bits(h, STK__H_HEADER_HASH);
    stk__st64(h + STK__H_HEADER_HASH, hh);
    test_poke(path, 0, h, sizeof h);

    json_t *m = manifest_load();
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hh);
    CHECK(json_object_set_new(manifest_shard(m, s), "header_xxh3", json_string(hex)) == 0);
    manifest_save(m);
}

/* Offset in the shard file of word `word` of the index entry of local
 * record `local`. */
static uint64_t index_word(size_t s, uint64_t local, size_t word) {
    uint8_t h[STK__HEADER_USED];
    test_peek(shard_path(s), 0, h, sizeof h);
    CHECK(local < stk__ld64(h + STK__H_NRECORDS));
    return stk__ld64(h + STK__H_INDEX_OFF) + (local * stk__entry_words(3) + word) * 8;
}

static uint64_t peek64(const char *path, uint64_t off) {
    uint8_t b[8];
    test_peek(path, off, b, 8);
    return stk__ld64(b);
}

static void poke64(const char *path, uint64_t off, uint64_t v) {
    uint8_t b[8];
    stk__st64(b, v);
    test_poke(path, off, b, 8);
}

/* ---- shard damage ---- */

static void missing_shard(void) {
    fresh("missing");
    CHECK(remove(shard_path(1)) == 0);
    open_fails(-ENOENT, shard_name[1], NULL);
}

static void truncated_shard(void) {
    fresh("trunc");
    uint64_t size = test_file_size(shard_path(2));
    /* Inside the magic, inside the header, at the data, inside the index. */
    const uint64_t at[] = {0, 5, 8, 100, 127, 128, 4095, 4096, 5000, size - 100, size - 1};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        fresh("trunc");
        test_truncate(shard_path(2), at[k]);
        open_fails(STK_ETRUNCATED, shard_name[2], NULL);
    }
    /* A longer file does not match the manifest either. */
    fresh("long");
    test_truncate(shard_path(2), size + 1);
    open_fails(STK_EMISMATCH, shard_name[2], NULL);
}

static void foreign_shard(void) {
    fresh("foreign");
    uint64_t size = test_file_size(shard_path(0));
    uint8_t *junk = malloc(size);
    CHECK(junk != NULL);
    test_fill(junk, size, 99);
    test_write_file(shard_path(0), junk, size);
    free(junk);
    open_fails(STK_EBADMAGIC, shard_name[0], NULL);

    fresh("foreign-text");
    const char *text = "#!/bin/sh\necho this is not a shard\n";
    test_write_file(shard_path(1), text, strlen(text));
    open_fails(STK_EBADMAGIC, shard_name[1], NULL);

    /* One wrong letter of the magic is enough. */
    fresh("magic");
    test_flip(shard_path(3), 3, 0x10);
    open_fails(STK_EBADMAGIC, shard_name[3], NULL);
}

static void unknown_version(void) {
    const uint32_t versions[] = {0, 3, 0x01000000};
    for (size_t k = 0; k < 3; k++) {
        /* Just the version changed: the version is checked before the
         * header checksum, so it is the version that is reported. */
        fresh("version");
        uint8_t v[4];
        stk__st32(v, versions[k]);
        test_poke(shard_path(1), STK__H_VERSION, v, 4);
        open_fails(STK_EVERSION, shard_name[1], "version");

        /* A well-formed shard of another version, checksums and manifest
         * entry included. */
        fresh("version-sealed");
        test_poke(shard_path(1), STK__H_VERSION, v, 4);
        reseal(1);
        open_fails(STK_EVERSION, shard_name[1], "version");
    }
    /* A shard that says version 2 (sealed) in a dataset whose manifest
     * says 1: a reader of version 1 alone would refuse the manifest, not
     * misread the shard, only if the manifest says so. */
    fresh("version-2-under-1");
    uint8_t v[4];
    stk__st32(v, 2);
    test_poke(shard_path(1), STK__H_VERSION, v, 4);
    reseal(1);
    open_fails(STK_EMISMATCH, shard_name[1], "manifest says 1");
    /* ... and under a manifest of version 2: this schema has ragged and
     * compressed fields, which version 2 cannot hold. */
    json_t *m = manifest_load();
    json_object_set_new(m, "version", json_integer(2));
    manifest_save(m);
    open_fails(STK_ECORRUPT, shard_name[1], "fixed-shape");
}

static void damaged_header(void) {
    /* The byte-order mark is checked on its own. */
    for (uint64_t off = STK__H_BOM; off < STK__H_BOM + 4; off++) {
        fresh("bom");
        test_flip(shard_path(2), off, 0x10);
        open_fails(STK_ECORRUPT, shard_name[2], NULL);
    }
    /* Every other byte the header checksum covers, and the checksum. */
    for (uint64_t off = STK__H_HSIZE; off < STK__HEADER_USED; off++) {
        fresh("header");
        test_flip(shard_path(2), off, 0x10);
        open_fails(STK_ECHECKSUM, shard_name[2], "header");
    }
}

static void index_out_of_bounds(void) {
    size_t s = 2;
    uint64_t local = 3, grec = shard_first[s] + local;
    char rec[32];
    snprintf(rec, sizeof rec, "record %llu", (unsigned long long)grec);

    /* The re-sealing itself is sound: an unedited, re-sealed shard opens. */
    fresh("reseal");
    reseal(s);
    open_ok();

    /* Field 1 of the record points past the end of the file. */
    fresh("bounds");
    poke64(shard_path(s), index_word(s, local, 1 + 3 * 1), test_file_size(shard_path(s)) + 4096);
    reseal(s);
    open_fails(STK_EBOUNDS, shard_name[s], rec);

    /* Its length runs past the data region. */
    fresh("bounds-len");
    poke64(shard_path(s), index_word(s, local, 2 + 3 * 1), 1u << 20);
    reseal(s);
    open_fails(STK_EBOUNDS, shard_name[s], rec);

    /* A huge length that would wrap around. */
    fresh("bounds-wrap");
    poke64(shard_path(s), index_word(s, local, 2 + 3 * 2), UINT64_MAX - 100);
    reseal(s);
    open_fails(STK_EBOUNDS, shard_name[s], rec);

    /* It points back into the previous record. */
    fresh("bounds-overlap");
    uint64_t w0 = index_word(s, local, 1);
    poke64(shard_path(s), w0, peek64(shard_path(s), w0) - 64);
    reseal(s);
    open_fails(STK_EBOUNDS, shard_name[s], rec);

    /* It points into the header. */
    fresh("bounds-header");
    poke64(shard_path(s), index_word(s, 0, 1), 64);
    reseal(s);
    char rec0[32];
    snprintf(rec0, sizeof rec0, "record %llu", (unsigned long long)shard_first[s]);
    open_fails(STK_EBOUNDS, shard_name[s], rec0);

    /* A row count the schema does not allow (img is fixed at 2 rows). */
    fresh("rows");
    poke64(shard_path(s), index_word(s, local, 3 + 3 * 2), 3);
    reseal(s);
    open_fails(STK_ESCHEMA, shard_name[s], rec);
}

static void damaged_index(void) {
    fresh("index");
    test_flip(shard_path(1), index_word(1, 2, 2) + 1, 0x10);
    open_fails(STK_ECHECKSUM, shard_name[1], "index");

    /* The record checksum in the index is covered too. */
    fresh("index-hash");
    test_flip(shard_path(1), index_word(1, 0, 0), 0x10);
    open_fails(STK_ECHECKSUM, shard_name[1], "index");

    /* The block table (the last bytes of the file). */
    fresh("blocks");
    test_flip(shard_path(1), test_file_size(shard_path(1)) - 3, 0x10);
    open_fails(STK_ECHECKSUM, shard_name[1], shard_name[1]);
}

typedef struct problems {
    int count;
    int named_record;
    uint64_t record;
} problems;

static void on_problem(void *ctx, const stk_error *e) {
    problems *p = ctx;
    p->count++;
    CHECK(e->code == STK_ECHECKSUM);
    if (test_names_record(e->message, p->record)) p->named_record = 1;
}

/* Damage in record `grec` (of shard s) field `field`, byte `at` of it. */
static void damaged_record(size_t s, uint64_t grec, size_t field, uint64_t at) {
    stk_error err = {0};
    fresh("record");
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(work, &ds, &err));
    stk_extent x;
    CHECK_OK(stk_dataset_get(ds, grec, field, &x, &err));
    CHECK(x.shard == s && at < x.stored_bytes);
    uint64_t off = x.offset + at;
    stk_dataset_close(ds);
    test_flip(shard_path(s), off, 0x10);

    /* Opening does not read record bytes: it succeeds. */
    CHECK_OK(stk_dataset_open(work, &ds, &err));
    for (int threads = 1; threads <= 4; threads += 3) {
        problems p = {0, 0, grec};
        stk_verify_options vo;
        stk_verify_options_init(&vo);
        vo.threads = threads;
        vo.on_problem = on_problem;
        vo.ctx = &p;
        stk_verify_report rep;
        CHECK_ERR(stk_dataset_verify(ds, &vo, &rep, &err), STK_ECHECKSUM, shard_name[s]);
        if (!test_names_record(err.message, grec)) {
            fprintf(stderr, "verify does not name record %llu: %s\n",
                    (unsigned long long)grec, err.message);
            exit(1);
        }
        CHECK(p.count >= 1 && p.named_record);
        CHECK(rep.problems == (uint64_t)p.count);
    }

    /* Reading with verification fails for that record only. */
    uint8_t buf[256];
    size_t len;
    for (uint64_t r = 0; r < NREC; r++) {
        for (size_t f = 0; f < 3; f++) {
            memset(&err, 0, sizeof err);
            int rc = stk_dataset_read(ds, r, f, buf, sizeof buf, &len, STK_READ_VERIFY, &err);
            if (r != grec) {
                CHECK_OK(rc);
                continue;
            }
            CHECK(rc == STK_ECHECKSUM && err.code == STK_ECHECKSUM);
            CHECK(strstr(err.message, shard_name[s]) != NULL);
            CHECK(test_names_record(err.message, grec));
        }
    }
    /* Without verification the damaged bytes are simply returned. */
    if (field == 1) {
        uint32_t id;
        uint8_t text[128];
        float img[16];
        record(grec, &id, text, img);
        CHECK_OK(stk_dataset_read(ds, grec, 1, buf, sizeof buf, &len, 0, &err));
        CHECK(len == text_len(grec));
        CHECK(memcmp(buf, text, len) != 0);
    }
    stk_dataset_close(ds);
}

static void damaged_records(void) {
    size_t s = 2;
    /* The middle of a record well inside the shard, its first byte, a
     * compressed field, and the last record of the shard. */
    damaged_record(s, shard_first[s] + 5, 1, 7);
    damaged_record(s, shard_first[s] + 6, 0, 0);
    damaged_record(s, shard_first[s] + 4, 2, 3);
    damaged_record(s, shard_first[s + 1] - 1, 1, 0);
    damaged_record(0, 0, 0, 1);
}

/* A big record that spans several verify chunks, damaged in its middle. */
static void damaged_big_record(void) {
    stk_error err = {0};
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/big", root);
    stk_field f = {.name = "blob", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &o, &w, &err));
    size_t big = 24u << 20;
    uint8_t *blob = malloc(big);
    CHECK(blob != NULL);
    test_fill(blob, big, 5);
    for (uint64_t r = 0; r < 4; r++) {
        stk_value v = {blob, r == 2 ? big : 1000 + r};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_extent x;
    CHECK_OK(stk_dataset_get(ds, 2, 0, &x, &err));
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    char file[4200];
    snprintf(file, sizeof file, "%s", si.file);
    stk_dataset_close(ds);
    test_flip(file, x.offset + big / 2 + 12345, 0x10);

    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK_ERR(stk_dataset_verify(ds, NULL, NULL, &err), STK_ECHECKSUM, "shard-000000.stk");
    CHECK(test_names_record(err.message, 2));
    size_t len;
    CHECK_ERR(stk_dataset_read(ds, 2, 0, blob, big, &len, STK_READ_VERIFY, &err),
              STK_ECHECKSUM, "shard-000000.stk");
    CHECK(test_names_record(err.message, 2));
    CHECK_OK(stk_dataset_read(ds, 3, 0, blob, big, &len, STK_READ_VERIFY, &err));
    stk_dataset_close(ds);
    free(blob);
}

/* ---- manifest damage ---- */

static void manifest_text(const char *text) {
    test_write_file(in_work("manifest.json"), text, strlen(text));
}

static void damaged_manifest(void) {
    fresh("manifest");
    manifest_text("this is not JSON\n");
    open_fails(STK_ECORRUPT, "manifest.json", NULL);
    manifest_text("");
    open_fails(STK_ECORRUPT, "manifest.json", NULL);
    manifest_text("[1, 2, 3]");
    open_fails(STK_ECORRUPT, "manifest.json", NULL);
    manifest_text("{\"format\": \"stoker\", \"version\": 1, \"kind\": \"dataset\"}");
    open_fails(STK_ECORRUPT, "manifest.json", NULL);

    /* Cut in the middle: still never crashes, always malformed. */
    fresh("manifest-cut");
    size_t len;
    char *text = test_read_file(in_work("manifest.json"), &len);
    for (size_t cut = 0; cut + 2 < len; cut += 7) {
        char saved = text[cut];
        text[cut] = '\0';
        manifest_text(text);
        open_fails(STK_ECORRUPT, "manifest.json", NULL);
        text[cut] = saved;
    }
    free(text);

    json_t *m;
    fresh("manifest-format");
    m = manifest_load();
    json_object_set_new(m, "format", json_string("parquet"));
    manifest_save(m);
    open_fails(STK_EBADMAGIC, "manifest.json", NULL);

    fresh("manifest-version");
    m = manifest_load();
    json_object_set_new(m, "version", json_integer(3));
    manifest_save(m);
    open_fails(STK_EVERSION, "manifest.json", "version 3");

    fresh("manifest-records");
    m = manifest_load();
    json_object_set_new(m, "records", json_integer(NREC + 1));
    manifest_save(m);
    open_fails(STK_ECORRUPT, "manifest.json", NULL);

    fresh("manifest-shard-records");
    m = manifest_load();
    json_t *sh = manifest_shard(m, 1);
    json_object_set_new(sh, "records",
                        json_integer(json_integer_value(json_object_get(sh, "records")) - 1));
    manifest_save(m);
    open_fails(STK_ECORRUPT, "manifest.json", NULL);

    /* The counts agree with each other, but not with the shard. */
    fresh("manifest-both-records");
    m = manifest_load();
    sh = manifest_shard(m, 1);
    json_object_set_new(sh, "records",
                        json_integer(json_integer_value(json_object_get(sh, "records")) - 1));
    json_object_set_new(m, "records", json_integer(NREC - 1));
    manifest_save(m);
    open_fails(STK_EMISMATCH, shard_name[1], NULL);

    const char *bad_names[] = {"../shard-000000.stk", "sub/shard-000000.stk",
                               "/etc/passwd", "", ".", ".."};
    for (size_t k = 0; k < sizeof bad_names / sizeof bad_names[0]; k++) {
        fresh("manifest-name");
        m = manifest_load();
        json_object_set_new(manifest_shard(m, 0), "file", json_string(bad_names[k]));
        manifest_save(m);
        open_fails(STK_ECORRUPT, "manifest.json", NULL);
    }

    fresh("manifest-hash");
    m = manifest_load();
    json_object_set_new(manifest_shard(m, 2), "header_xxh3", json_string("0123456789abcdef"));
    manifest_save(m);
    open_fails(STK_EMISMATCH, shard_name[2], NULL);

    const char *bad_hex[] = {"xyz", "0123456789abcdeg", "0123456789abcdef0", ""};
    for (size_t k = 0; k < sizeof bad_hex / sizeof bad_hex[0]; k++) {
        fresh("manifest-hex");
        m = manifest_load();
        json_object_set_new(manifest_shard(m, 2), "header_xxh3", json_string(bad_hex[k]));
        manifest_save(m);
        open_fails(STK_ECORRUPT, "manifest.json", NULL);
    }

    /* The manifest promises more bytes than the file has, or fewer. */
    fresh("manifest-bytes");
    m = manifest_load();
    sh = manifest_shard(m, 3);
    uint64_t bytes = (uint64_t)json_integer_value(json_object_get(sh, "bytes"));
    json_object_set_new(sh, "bytes", json_integer((json_int_t)bytes + 1));
    manifest_save(m);
    open_fails(STK_ETRUNCATED, shard_name[3], NULL);

    fresh("manifest-bytes-less");
    m = manifest_load();
    json_object_set_new(manifest_shard(m, 3), "bytes", json_integer((json_int_t)bytes - 1));
    manifest_save(m);
    open_fails(STK_EMISMATCH, shard_name[3], NULL);

    /* Another dataset's shard in place of this one. */
    fresh("swapped");
    char from[4200];
    snprintf(from, sizeof from, "%s", shard_path(1));
    size_t n;
    char *other = test_read_file(from, &n);
    test_write_file(shard_path(2), other, n);
    free(other);
    open_fails(STK_EMISMATCH, shard_name[2], NULL);
}

/* ---- every byte ---- */

/* Damaging any byte of a shard is caught by opening or by verify; only the
 * padding nothing reads (bytes 128..4095 of the header, and before the
 * index) may go unnoticed.  Damage to record data never fails the open,
 * which does not read record bytes.  Nothing crashes, whatever is read. */
static void every_byte(void) {
    stk_error err = {0};
    fresh("every-byte");
    size_t s = nshards - 1; /* the last shard is the smallest */
    const char *path = shard_path(s);
    uint64_t size = test_file_size(path);
    uint8_t h[STK__HEADER_USED];
    test_peek(path, 0, h, sizeof h);
    uint64_t data_end = stk__ld64(h + STK__H_DATA_END);
    uint64_t index_off = stk__ld64(h + STK__H_INDEX_OFF);
    int caught_open = 0, caught_verify = 0;
    for (uint64_t off = 0; off < size; off += off < 4096 ? (off < 128 ? 1 : 97) : 3) {
        /* Every byte is covered: the padding before the index by verify
         * (it must be zero), the header's padding at open (the same). */
        int padding = off >= data_end && off < index_off;
        int in_data = off >= STK__HEADER_SIZE && off < data_end;
        test_flip(path, off, 0x10);
        stk_dataset *ds = NULL;
        memset(&err, 0, sizeof err);
        int rc = stk_dataset_open(work, &ds, &err);
        CHECK(rc <= 0);
        CHECK(rc == err.code);
        if (rc == 0) {
            int v = stk_dataset_verify(ds, NULL, NULL, &err);
            if (v != (padding ? STK_ECORRUPT : STK_ECHECKSUM)) {
                fprintf(stderr, "damage at byte %llu of %s not found\n", (unsigned long long)off,
                        path);
                exit(1);
            }
            CHECK(strstr(err.message, shard_name[s]) != NULL);
            caught_verify++;
            /* Reading every record never crashes, whatever verify said. */
            uint8_t buf[256];
            size_t len;
            for (uint64_t r = 0; r < NREC; r++)
                for (size_t f = 0; f < 3; f++)
                    (void)stk_dataset_read(ds, r, f, buf, sizeof buf, &len, 0, &err);
            stk_dataset_close(ds);
        } else {
            CHECK(!in_data);
            CHECK(strstr(err.message, shard_name[s]) != NULL);
            caught_open++;
        }
        test_flip(path, off, 0x10);
    }
    CHECK(caught_open > 100 && caught_verify > 100);
    open_ok();
}

/* Every byte of the manifest is covered: a flipped bit anywhere (a key's
 * name, a value, the checksum itself) fails to parse or fails the
 * manifest's checksum, or is caught by the checks behind it. */
static void every_manifest_byte(void) {
    fresh("manifest-every-byte");
    size_t len;
    char *text = test_read_file(in_work("manifest.json"), &len);
    for (size_t off = 0; off < len; off++) {
        text[off] ^= 0x20; /* a letter's case, a space to NUL... */
        manifest_text(text);
        stk_dataset *ds = NULL;
        stk_error err = {0};
        int rc = stk_dataset_open(work, &ds, &err);
        if (rc == 0) {
            /* Only insignificant whitespace may change and still open. */
            if (!strchr(" \n\t\r", text[off] ^ 0x20))
                fprintf(stderr, "manifest byte %zu (%c) changed and opened\n", off, text[off] ^ 0x20);
            CHECK(strchr(" \n\t\r", text[off] ^ 0x20) != NULL);
            stk_dataset_close(ds);
        } else {
            CHECK(strstr(err.message, "manifest.json") != NULL ||
                  strstr(err.message, ".stk") != NULL);
        }
        text[off] ^= 0x20;
    }
    manifest_text(text);
    free(text);
    open_ok();

    /* Without a checksum (an older manifest, or one edited by hand), an
     * unknown key is refused rather than ignored: "codec_level" with one
     * bit flipped would otherwise vanish unnoticed. */
    fresh("manifest-unknown-key");
    json_t *m = manifest_load();
    json_t *f0 = json_array_get(json_object_get(m, "fields"), 0);
    json_t *lv = json_object_get(f0, "codec_level");
    json_incref(lv);
    json_object_del(f0, "codec_level");
    json_object_set_new(f0, "codec_levem", lv);
    manifest_save(m);
    open_fails(STK_ECORRUPT, "manifest.json", "codec_levem");
    /* ... and without one, a manifest of known keys still opens. */
    fresh("manifest-no-checksum");
    manifest_save(manifest_load());
    open_ok();
}

/* A shard's header says its place: entries listed out of order, or one
 * left out with the counts made to agree, are found at open. */
static void shards_out_of_place(void) {
    fresh("place-swapped");
    json_t *m = manifest_load();
    json_t *shards = json_object_get(m, "shards");
    json_t *a = json_deep_copy(json_array_get(shards, 1));
    json_t *b = json_deep_copy(json_array_get(shards, 2));
    json_array_set_new(shards, 1, b);
    json_array_set_new(shards, 2, a);
    manifest_save(m);
    open_fails(STK_EMISMATCH, shard_name[2], "out of place");

    fresh("place-left-out");
    m = manifest_load();
    shards = json_object_get(m, "shards");
    json_int_t gone = json_integer_value(json_object_get(json_array_get(shards, 1), "records"));
    json_array_remove(shards, 1);
    json_object_set_new(m, "records", json_integer(NREC - gone));
    manifest_save(m);
    open_fails(STK_EMISMATCH, shard_name[2], "out of place");
}

/* A compressed ragged field's entry claims 2^64 - 24 rows (re-sealed, as a
 * crafted shard would be): its length cannot be checked against them, so
 * open bounds them, where a batch's sum of rows once wrapped around and
 * the slot's address with it (found by fuzz_shard). */
static void compressed_rows_out_of_range(void) {
    fresh("rows-huge");
    test_rmrf(work);
    stk_error err = {0};
    stk_field z = {.name = "z", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED},
                   .codec = STK_CODEC_ZSTD};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(work, &z, 1, &o, &w, &err));
    uint8_t buf[64];
    for (uint64_t r = 0; r < 8; r++) {
        test_fill(buf, sizeof buf, r);
        stk_value v = {buf, 10 + r};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    const char *sh = in_work("shard-000000.stk");
    uint8_t h[STK__HEADER_USED], v[8];
    test_peek(sh, 0, h, sizeof h);
    stk__st64(v, UINT64_MAX - 23);
    test_poke(sh, stk__ld64(h + STK__H_INDEX_OFF) + (5 * stk__entry_words(1) + 3) * 8, v, 8);
    CHECK(strcmp(shard_name[0], "shard-000000.stk") == 0); /* (reseal's names) */
    reseal(0);
    open_fails(STK_ESCHEMA, "record 5", "claims");
}

int main(void) {
    make_pristine();
    compressed_rows_out_of_range();
    missing_shard();
    truncated_shard();
    foreign_shard();
    unknown_version();
    damaged_header();
    index_out_of_bounds();
    damaged_index();
    damaged_records();
    damaged_big_record();
    damaged_manifest();
    every_byte();
    every_manifest_byte();
    shards_out_of_place();
    test_rmrf(root);
    return 0;
}
