/*
 * test_format_v2: format version 2, records located by arithmetic.
 *
 *  - A schema of fixed-shape, uncompressed fields is written as version 2
 *    (headers, index of R checksums, the manifest's version), at several
 *    alignments; format_version 1 writes version 1 of the same records, and
 *    2 is refused for a schema it cannot hold.
 *  - Every record reads back equal (with and without verification), and
 *    every epoch of the loader (three orders, three backends) delivers each
 *    record once, equal to what was written.
 *  - A dataset whose shards are of both versions (a part of each, merged)
 *    reads the same.
 *  - Every byte of a small version 2 shard flipped once: opening fails or
 *    verify fails, naming the shard file; a flip inside a record's bytes
 *    names that record, in verify and in a loader's epoch (mmap and pool).
 */
#include "../../src/format/format.h"
#include "util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define NREC 120

static const stk_field schema[3] = {
    {.name = "id", .dtype = STK_U32, .ndim = 0},
    {.name = "vec", .dtype = STK_F32, .ndim = 1, .shape = {5}},
    {.name = "pair", .dtype = STK_U16, .ndim = 2, .shape = {2, 3}},
};
static const size_t field_bytes[3] = {4, 20, 12};

static void record(uint64_t r, uint8_t out[3][20]) {
    uint32_t id = (uint32_t)(r * 7 + 3);
    memcpy(out[0], &id, 4);
    test_fill(out[1], 20, r * 3 + 1);
    test_fill(out[2], 12, r * 3 + 2);
}

static void write_ds(const char *dir, uint32_t fv, uint32_t align, uint64_t shard_bytes,
                     uint32_t part, uint32_t parts, uint64_t first, uint64_t n) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.format_version = fv;
    o.align = align;
    o.shard_bytes = shard_bytes;
    o.sync = 0;
    o.part_index = part;
    o.part_count = parts;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 3, &o, &w, &err));
    for (uint64_t r = first; r < first + n; r++) {
        uint8_t v[3][20];
        record(r, v);
        stk_value vals[3];
        for (int f = 0; f < 3; f++) vals[f] = (stk_value){v[f], 1};
        vals[1].rows = 5;
        vals[2].rows = 2;
        CHECK_OK(stk_writer_append(w, vals, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* Every shard's header says `version`, its index holds entries of the
 * version's size, and the manifest says `mversion`. */
static void check_versions(const char *dir, uint32_t version, uint32_t mversion) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_format_version(ds) == version);
    for (size_t s = 0; s < stk_dataset_num_shards(ds); s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        uint8_t h[STK__HEADER_USED];
        test_peek(si.file, 0, h, sizeof h);
        CHECK(stk__ld32(h + STK__H_VERSION) == version);
        CHECK(stk__ld64(h + STK__H_INDEX_SIZE) ==
              si.records * (version == 2 ? 8 : 8 * stk__entry_words(3)));
    }
    stk_dataset_close(ds);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = test_read_file(path, NULL), want[32];
    snprintf(want, sizeof want, "\"version\": %u", mversion);
    CHECK(strstr(text, want) != NULL);
    free(text);
}

/* Every record of every field, read whole, with and without verification. */
static void check_reads(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == NREC);
    for (uint64_t r = 0; r < NREC; r++) {
        uint8_t v[3][20], got[64];
        record(r, v);
        for (size_t f = 0; f < 3; f++)
            for (uint32_t flags = 0; flags <= STK_READ_VERIFY; flags += STK_READ_VERIFY) {
                size_t len = 0;
                CHECK_OK(stk_dataset_read(ds, r, f, got, sizeof got, &len, flags, &err));
                CHECK(len == field_bytes[f] && memcmp(got, v[f], len) == 0);
            }
    }
    stk_verify_options vo;
    stk_verify_options_init(&vo);
    stk_verify_report rep;
    CHECK_OK(stk_dataset_verify(ds, &vo, &rep, &err));
    CHECK(rep.records_checked == NREC && rep.problems == 0);
    stk_dataset_close(ds);
}

/* One epoch: each record once, every field equal to what was written; or
 * the error's code (err filled) when the epoch fails.  `verify` 0 reads
 * unchecked; `subset` loads fields 2 and 0 only, in that order (a subset
 * is never checked record by record, and its places differ from the
 * dataset's field numbers). */
static int epoch(const char *dir, stk_order order, stk_backend backend, int verify, int subset,
                 stk_error *err) {
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(dir, &ds, err);
    if (rc) return rc;
    static const char *const names[2] = {"pair", "id"};
    const size_t want[3] = {2, 0, 0}, nwant = subset ? 2 : 3;
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 16;
    o.order = order;
    o.backend = backend;
    o.seed = 11;
    o.threads = 2;
    o.verify = verify;
    if (subset) {
        o.fields = names;
        o.nfields = 2;
    }
    stk_loader *ld = NULL;
    if ((rc = stk_loader_open(ds, &o, &ld, err))) {
        stk_dataset_close(ds);
        return rc;
    }
    uint8_t seen[NREC] = {0};
    uint64_t n = 0;
    stk_batch *b;
    while ((rc = stk_loader_next(ld, &b, err)) == 0) {
        const uint64_t *ids = stk_batch_samples(b);
        stk_batch_field bf[3];
        for (size_t f = 0; f < nwant; f++) CHECK(stk_batch_field_get(b, f, &bf[f]) == 0);
        for (uint32_t j = 0; j < stk_batch_size(b); j++, n++) {
            CHECK(ids[j] < NREC && !seen[ids[j]]);
            seen[ids[j]] = 1;
            uint8_t v[3][20];
            record(ids[j], v);
            for (size_t f = 0; f < nwant; f++) {
                size_t d = subset ? want[f] : f;
                CHECK(memcmp((uint8_t *)bf[f].data + j * field_bytes[d], v[d], field_bytes[d]) ==
                      0);
            }
        }
        stk_loader_release(ld, b);
    }
    stk_loader_close(ld);
    stk_dataset_close(ds);
    if (rc != STK_END) return rc;
    CHECK(n == NREC);
    return 0;
}

static void check_epochs(const char *dir) {
    const stk_order orders[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    const stk_backend backends[3] = {STK_BACKEND_MMAP, STK_BACKEND_POOL, STK_BACKEND_URING};
    stk_error err = {0};
    for (int oi = 0; oi < 3; oi++)
        for (int bi = 0; bi < 3; bi++)
            for (int mode = 0; mode < 3; mode++) { /* checked, unchecked, a subset */
                int rc = epoch(dir, orders[oi], backends[bi], mode != 1, mode == 2, &err);
                if (rc == -ENOSYS || rc == -EPERM) continue; /* no io_uring here */
                if (rc)
                    fprintf(stderr, "order %d backend %d mode %d: %s\n", oi, bi, mode,
                            err.message);
                CHECK(rc == 0);
            }
}

static void versions_and_values(void) {
    const uint32_t aligns[3] = {1, 16, 64};
    char dir[4200];
    for (int a = 0; a < 3; a++) {
        for (uint32_t fv = 0; fv <= 2; fv++) {
            snprintf(dir, sizeof dir, "%s/fv%u-align%u", test_dir("format_v2_values"), fv,
                     aligns[a]);
            write_ds(dir, fv, aligns[a], 4096, 0, 1, 0, NREC);
            check_versions(dir, fv == 1 ? 1 : 2, fv == 1 ? 1 : 2);
            check_reads(dir);
            check_epochs(dir);
        }
    }
    /* Version 2 is refused for a ragged or a compressed field, and an
     * unknown version for any schema. */
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    stk_writer *w = NULL;
    stk_field ragged = {.name = "t", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}};
    stk_field zstd = {.name = "z", .dtype = STK_F32, .ndim = 1, .shape = {4},
                      .codec = STK_CODEC_ZSTD};
    o.format_version = 2;
    snprintf(dir, sizeof dir, "%s/refused", test_dir("format_v2_refused"));
    CHECK_ERR(stk_writer_create(dir, &ragged, 1, &o, &w, &err), -EINVAL, "fixed-shape");
    CHECK_ERR(stk_writer_create(dir, &zstd, 1, &o, &w, &err), -EINVAL, "fixed-shape");
    o.format_version = 3;
    CHECK_ERR(stk_writer_create(dir, schema, 3, &o, &w, &err), -EINVAL, "format_version");
    /* Either way the writer picks version 1 for them. */
    o.format_version = 0;
    CHECK_OK(stk_writer_create(dir, &ragged, 1, &o, &w, &err));
    float x[3] = {1, 2, 3};
    stk_value v = {x, 3};
    CHECK_OK(stk_writer_append(w, &v, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    uint8_t h[16];
    test_peek(si.file, 0, h, sizeof h);
    CHECK(stk__ld32(h + STK__H_VERSION) == 1);
    stk_dataset_close(ds);
}

/* Part 0 in version 1, part 1 in version 2, merged: one dataset of both. */
static void mixed_shards(void) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ds", test_dir("format_v2_mixed"));
    write_ds(dir, 1, 64, 4096, 0, 2, 0, NREC / 2);
    write_ds(dir, 0, 64, 4096, 1, 2, NREC / 2, NREC - NREC / 2);
    stk_error err = {0};
    CHECK_OK(stk_merge(dir, &err));
    char path[4300];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = test_read_file(path, NULL);
    CHECK(strstr(text, "\"version\": 2") != NULL);
    free(text);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    bool v1 = false, v2 = false;
    for (size_t s = 0; s < stk_dataset_num_shards(ds); s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        uint8_t h[16];
        test_peek(si.file, 0, h, sizeof h);
        v1 |= stk__ld32(h + STK__H_VERSION) == 1;
        v2 |= stk__ld32(h + STK__H_VERSION) == 2;
    }
    CHECK(stk_dataset_format_version(ds) == 2);
    stk_dataset_close(ds);
    CHECK(v1 && v2);
    check_reads(dir);
    check_epochs(dir);
}

/* Every problem verify reports, kept. */
typedef struct problems {
    char text[16384];
    size_t n;
} problems;
static void on_problem(void *ctx, const stk_error *e) {
    problems *p = ctx;
    size_t at = strlen(p->text);
    snprintf(p->text + at, sizeof p->text - at, "%s\n", e->message);
    p->n++;
}

static void every_byte_flipped(void) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ds", test_dir("format_v2_flips"));
    write_ds(dir, 0, 16, 1 << 20, 0, 1, 0, NREC);
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_shards(ds) == 1);
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    char shard[4300], name[64];
    snprintf(shard, sizeof shard, "%s", si.file);
    snprintf(name, sizeof name, "%s", strrchr(shard, '/') + 1);
    /* Each record's span [a, z), from its fields' extents, and the
     * fields' own bytes (the span less the padding between them). */
    uint64_t span_a[NREC], span_z[NREC], fld[NREC][3];
    for (uint64_t r = 0; r < NREC; r++) {
        stk_extent x[3];
        for (size_t f = 0; f < 3; f++) {
            CHECK_OK(stk_dataset_get(ds, r, f, &x[f], &err));
            fld[r][f] = x[f].offset;
        }
        span_a[r] = x[0].offset;
        span_z[r] = x[2].offset + x[2].stored_bytes;
    }
    stk_dataset_close(ds);
    uint64_t size = test_file_size(shard);
    uint64_t in_records = 0, by_loader = 0;
    for (uint64_t off = 0; off < size; off++) {
        test_flip(shard, off, 0x10);
        int64_t rec = -1;
        for (uint64_t r = 0; r < NREC && rec < 0; r++)
            if (off >= span_a[r] && off < span_z[r]) rec = (int64_t)r;
        memset(&err, 0, sizeof err);
        int rc = stk_dataset_open(dir, &ds, &err);
        if (rc) {
            /* The header, the index (the records' checksums) or the block
             * table: refused at open, naming the shard. */
            if (rec >= 0 || !strstr(err.message, name)) {
                fprintf(stderr, "byte %llu: %s\n", (unsigned long long)off, err.message);
                CHECK(0);
            }
        } else {
            problems p = {{0}, 0};
            stk_verify_options vo;
            stk_verify_options_init(&vo);
            vo.threads = 1;
            vo.on_problem = on_problem;
            vo.ctx = &p;
            rc = stk_dataset_verify(ds, &vo, NULL, &err);
            stk_dataset_close(ds);
            if (rc == 0 || !strstr(p.text, name) ||
                (rec >= 0 && !test_names_record(p.text, (uint64_t)rec))) {
                fprintf(stderr, "byte %llu (record %lld): verify %d: %s\n",
                        (unsigned long long)off, (long long)rec, rc, p.text);
                CHECK(0);
            }
            /* Inside a field of a record: a loader's checked epoch stops
             * naming it (the mapping's gather and the pool's reads, on
             * turns).  The padding between fields is not delivered: the
             * pool reads the fields alone and hashes zeros in its place,
             * so only verify and the mapping's gather see it changed. */
            bool in_field = false;
            for (size_t f = 0; rec >= 0 && f < 3; f++)
                in_field |= off >= fld[rec][f] && off < fld[rec][f] + field_bytes[f];
            if (rec >= 0) {
                in_records++;
                if (in_field && off % 3 == 0) {
                    stk_backend be = off % 2 ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
                    rc = epoch(dir, STK_ORDER_RANDOM, be, 1, 0, &err);
                    if (rc != STK_ECHECKSUM || !strstr(err.message, name) ||
                        !test_names_record(err.message, (uint64_t)rec)) {
                        fprintf(stderr, "byte %llu (record %lld): epoch %d: %s\n",
                                (unsigned long long)off, (long long)rec, rc, err.message);
                        CHECK(0);
                    }
                    by_loader++;
                }
            }
        }
        test_flip(shard, off, 0x10);
    }
    /* At align 16: 4 + 12 padding + 20 + 12 padding + 12 bytes a record,
     * 36 of them the fields'. */
    CHECK(in_records == NREC * 60 && by_loader >= NREC * 36 / 3);
    check_reads(dir); /* each byte was put back */
}

int main(void) {
    versions_and_values();
    mixed_shards();
    every_byte_flipped();
    printf("test_format_v2: ok\n");
    return 0;
}
