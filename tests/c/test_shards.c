/*
 * test_shards: how records are spread over shard files.
 *
 * With small shard targets (4 KiB to 64 KiB) a pack makes many shards; the
 * shard table must account for every record exactly once, in order, with
 * continuous record ids, no shard's data past the target (unless it holds a
 * single record), and no record straddling two shards.  A record larger than
 * the target gets a shard of its own and still round-trips.  A dataset with
 * no records at all is valid: 0 records, 0 shards, and it verifies.
 */
#include "util.h"

#include <sys/stat.h>

static const stk_field schema[3] = {
    {.name = "id", .dtype = STK_U64, .ndim = 0},
    {.name = "text", .dtype = STK_BYTES, .ndim = 1, .shape = {STK_RAGGED}},
    {.name = "vec", .dtype = STK_F32, .ndim = 1, .shape = {4}},
};

/* Record r: its id, a text of `len` bytes, and a vector. */
static uint64_t text_len(uint64_t r) { return (r * 37) % 500; }

static void make_record(uint64_t r, uint64_t len, uint8_t *text, float vec[4]) {
    test_fill(text, (size_t)len, r + 7);
    for (int k = 0; k < 4; k++) vec[k] = (float)r + 0.25f * (float)k;
}

static void append(stk_writer *w, uint64_t r, uint64_t len) {
    stk_error err = {0};
    uint8_t *text = malloc(len ? len : 1);
    CHECK(text != NULL);
    float vec[4];
    make_record(r, len, text, vec);
    stk_value v[3] = {{&r, 1}, {text, len}, {vec, 4}};
    CHECK_OK(stk_writer_append(w, v, &err));
    free(text);
}

static void check_record(const stk_dataset *ds, uint64_t r, uint64_t len) {
    stk_error err = {0};
    uint8_t *want = malloc(len + 1), *got = malloc(len + 1);
    CHECK(want && got);
    float vec[4], gvec[4];
    make_record(r, len, want, vec);
    uint64_t id = ~r;
    size_t n;
    CHECK_OK(stk_dataset_read(ds, r, 0, &id, sizeof id, &n, STK_READ_VERIFY, &err));
    CHECK(n == 8 && id == r);
    CHECK_OK(stk_dataset_read(ds, r, 1, got, len, &n, STK_READ_VERIFY, &err));
    CHECK(n == len && memcmp(got, want, len) == 0);
    CHECK_OK(stk_dataset_read(ds, r, 2, gvec, sizeof gvec, &n, 0, &err));
    CHECK(n == sizeof gvec && memcmp(gvec, vec, sizeof vec) == 0);
    free(want);
    free(got);
}

/* Checks the shard table against the records and returns the shard count. */
static size_t check_shards(const stk_dataset *ds, const char *dir, uint64_t nrec,
                           uint64_t shard_bytes, uint64_t bytes_written) {
    stk_error err = {0};
    size_t ns = stk_dataset_num_shards(ds);
    uint64_t next = 0, file_bytes = 0, data_bytes = 0;
    for (size_t s = 0; s < ns; s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        CHECK(si.first_record == next); /* continuous ids, in order */
        CHECK(si.records >= 1);
        CHECK(strncmp(si.file, dir, strlen(dir)) == 0);
        CHECK(si.bytes == test_file_size(si.file));
        CHECK(si.data_bytes < si.bytes);
        if (si.records > 1) CHECK(si.data_bytes <= shard_bytes);
        for (size_t t = 0; t < s; t++) {
            stk_shard_info o;
            CHECK(stk_dataset_shard(ds, t, &o) == 0);
            CHECK(strcmp(o.file, si.file) != 0);
        }
        /* Every field of every record of this shard lies inside its data. */
        for (uint64_t r = si.first_record; r < si.first_record + si.records; r++) {
            for (size_t f = 0; f < 3; f++) {
                stk_extent x;
                CHECK_OK(stk_dataset_get(ds, r, f, &x, &err));
                CHECK(x.shard == s);
                CHECK(x.offset >= 4096);
                CHECK(x.offset + x.stored_bytes <= 4096 + si.data_bytes);
            }
        }
        next += si.records;
        file_bytes += si.bytes;
        data_bytes += si.data_bytes;
    }
    CHECK(next == nrec);
    CHECK(file_bytes == bytes_written);
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, ns, &si) == -EINVAL);

    for (int threads = 1; threads <= 3; threads += 2) {
        stk_verify_options vo;
        stk_verify_options_init(&vo);
        vo.threads = threads;
        stk_verify_report rep;
        CHECK_OK(stk_dataset_verify(ds, &vo, &rep, &err));
        CHECK(rep.records_checked == nrec);
        CHECK(rep.bytes_checked == data_bytes);
        CHECK(rep.problems == 0);
    }
    return ns;
}

static void rollover(uint64_t shard_bytes, uint32_t align, uint32_t block_size) {
    stk_error err = {0};
    const char *dir = test_dir("shards-rollover");
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = shard_bytes;
    o.align = align;
    o.block_size = block_size;
    o.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 3, &o, &w, &err));
    const uint64_t nrec = 600;
    uint64_t payload = 0;
    for (uint64_t r = 0; r < nrec; r++) {
        append(w, r, text_len(r));
        payload += 8 + text_len(r) + 16;
    }
    CHECK(stk_writer_num_records(w) == nrec);
    CHECK_OK(stk_writer_finish(w, &err));
    uint64_t written = stk_writer_bytes_written(w);
    stk_writer_free(w);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == nrec);
    size_t ns = check_shards(ds, dir, nrec, shard_bytes, written);
    CHECK(ns >= payload / shard_bytes); /* many shards, not one */
    CHECK(ns >= 2);
    for (uint64_t r = 0; r < nrec; r++) check_record(ds, r, text_len(r));
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* A record bigger than the target gets a shard to itself. */
static void oversized(void) {
    stk_error err = {0};
    const char *dir = test_dir("shards-big");
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 16384;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 3, &o, &w, &err));
    /* 10 small, a 200 KB one, a 20 MB one (several verify chunks), 10 small */
    uint64_t lens[22];
    for (int r = 0; r < 22; r++) lens[r] = 100 + (uint64_t)r;
    lens[10] = 200000;
    lens[11] = 20u << 20;
    for (uint64_t r = 0; r < 22; r++) append(w, r, lens[r]);
    CHECK_OK(stk_writer_finish(w, &err));
    uint64_t written = stk_writer_bytes_written(w);
    stk_writer_free(w);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 22);
    check_shards(ds, dir, 22, o.shard_bytes, written);
    for (uint64_t big = 10; big <= 11; big++) {
        stk_extent x;
        CHECK_OK(stk_dataset_get(ds, big, 1, &x, &err));
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, x.shard, &si) == 0);
        CHECK(si.records == 1);
        CHECK(si.first_record == big);
        CHECK(si.data_bytes >= lens[big]);
    }
    for (uint64_t r = 0; r < 22; r++) check_record(ds, r, lens[r]);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

/* create + finish without a record: a valid, empty dataset. */
static void empty(void) {
    stk_error err = {0};
    const char *dir = test_dir("shards-empty");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 3, NULL, &w, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    CHECK(stk_writer_num_records(w) == 0);
    stk_writer_free(w);

    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 0);
    CHECK(stk_dataset_num_shards(ds) == 0);
    CHECK(stk_dataset_num_fields(ds) == 3);
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == -EINVAL);
    stk_verify_report rep;
    memset(&rep, 0xff, sizeof rep);
    CHECK_OK(stk_dataset_verify(ds, NULL, &rep, &err));
    CHECK(rep.records_checked == 0 && rep.problems == 0 && rep.bytes_checked == 0);
    stk_extent x;
    uint8_t buf[8];
    size_t n;
    CHECK_ERR(stk_dataset_get(ds, 0, 0, &x, &err), -EINVAL, "record 0");
    CHECK_ERR(stk_dataset_read(ds, 0, 0, buf, sizeof buf, &n, 0, &err), -EINVAL,
              "record 0");
    stk_dataset_close(ds);
    test_rmrf(dir);
}

int main(void) {
    rollover(4096, 64, 4096);
    rollover(5000, 8, 4096);
    rollover(12288, 1, 65536);
    rollover(65536, 64, 65536);
    rollover(65536, 4096, 4096);
    oversized();
    empty();
    return 0;
}
