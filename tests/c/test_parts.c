/*
 * test_parts: split packing and stk_merge.
 *
 * Three parts (one of them empty, written out of order) merge into one
 * dataset whose record i is the i-th record overall, in part order, and which
 * verifies.  Before the merge the directory opens as STK_EINCOMPLETE; a merge
 * with a part missing fails with STK_EINCOMPLETE naming that part; parts with
 * different schemas fail with STK_ESCHEMA; a second merge gives -EEXIST.
 * Parts made from different inputs (stk_writer_options.inputs) fail with
 * STK_EMISMATCH; a resume whose inputs differ from the journal's is refused.
 * Parts written at once by threads into one directory (as Dask's and Ray's
 * workers do) never take one another's files for a user's.
 */
#include "util.h"

#include <pthread.h>
#include <sys/stat.h>

static const stk_field schema[2] = {
    {.name = "id", .dtype = STK_U64, .ndim = 0},
    {.name = "tokens", .dtype = STK_U16, .ndim = 1, .shape = {STK_RAGGED},
     .codec = STK_CODEC_ZSTD},
};

/* Record `id` overall: its tokens. */
static uint64_t ntokens(uint64_t id) { return (id * 11) % 300; }

static void tokens(uint64_t id, uint16_t *t) {
    for (uint64_t k = 0; k < ntokens(id); k++) t[k] = (uint16_t)(id * 31 + k % 17);
}

/* The inputs the next write_part records (NULL: none), one by one too. */
static const char *part_inputs, *part_list;

/* Writes part `index` of `count` holding records [first, first + n). */
static void write_part(const char *dir, uint32_t index, uint32_t count, uint64_t first,
                       uint64_t n, const stk_field *fields, size_t nfields) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.part_index = index;
    o.part_count = count;
    o.shard_bytes = 8192;
    o.sync = 0;
    o.inputs = part_inputs;
    o.inputs_list = part_list;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, fields, nfields, &o, &w, &err));
    uint16_t t[600] = {0}; /* room for the u32 variant of the schema too */
    for (uint64_t id = first; id < first + n; id++) {
        tokens(id, t);
        stk_value v[2] = {{&id, 1}, {t, ntokens(id)}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

static const char *in_dir(const char *dir, const char *name) {
    static char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void merged(void) {
    stk_error err = {0};
    const char *dir = test_dir("parts-merge");
    /* Part 0: 150 records, part 1: none, part 2: 90; written 2, 1, 0. */
    write_part(dir, 2, 3, 150, 90, schema, 2);
    write_part(dir, 1, 3, 150, 0, schema, 2);

    stk_dataset *ds = NULL;
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, "merge");
    CHECK(ds == NULL);
    /* A part's manifest is not a dataset either. */
    CHECK_ERR(stk_dataset_open(in_dir(dir, "part-00002.json"), &ds, &err), STK_EINCOMPLETE,
              "part 2 of 3");
    /* Part 0 is missing. */
    CHECK_ERR(stk_merge(dir, &err), STK_EINCOMPLETE, "part-00000.json");

    write_part(dir, 0, 3, 0, 150, schema, 2);
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, "merge");
    /* A finished part cannot be written again. */
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.part_index = 1;
    o.part_count = 3;
    stk_writer *w = NULL;
    CHECK_ERR(stk_writer_create(dir, schema, 2, &o, &w, &err), -EEXIST, dir);

    CHECK_OK(stk_merge(dir, &err));
    for (int p = 0; p < 3; p++) {
        char name[32];
        snprintf(name, sizeof name, "part-%05d.json", p);
        CHECK(!test_exists(in_dir(dir, name))); /* part manifests are gone */
    }

    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 240);
    uint16_t want[300], got[300];
    for (uint64_t r = 0; r < 240; r++) {
        uint64_t id = ~r;
        size_t len;
        CHECK_OK(stk_dataset_read(ds, r, 0, &id, sizeof id, &len, STK_READ_VERIFY, &err));
        CHECK(id == r);
        tokens(r, want);
        CHECK_OK(stk_dataset_read(ds, r, 1, got, sizeof got, &len, STK_READ_VERIFY, &err));
        CHECK(len == ntokens(r) * 2 && memcmp(got, want, len) == 0);
    }
    /* Shards in part order, record ids continuous. */
    uint64_t next = 0;
    int seen_part2 = 0;
    for (size_t s = 0; s < stk_dataset_num_shards(ds); s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        CHECK(si.first_record == next);
        next += si.records;
        int is2 = strstr(si.file, "part-00002-") != NULL;
        CHECK(is2 || strstr(si.file, "part-00000-") != NULL);
        CHECK(!seen_part2 || is2);
        seen_part2 |= is2;
    }
    CHECK(seen_part2 && next == 240);
    stk_verify_report rep;
    CHECK_OK(stk_dataset_verify(ds, NULL, &rep, &err));
    CHECK(rep.records_checked == 240);
    stk_dataset_close(ds);

    /* Merging again: already merged. */
    CHECK_ERR(stk_merge(dir, &err), -EEXIST, dir);
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 240);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

static void missing_part(void) {
    stk_error err = {0};
    const char *dir = test_dir("parts-missing");
    write_part(dir, 0, 4, 0, 10, schema, 2);
    write_part(dir, 1, 4, 10, 10, schema, 2);
    write_part(dir, 3, 4, 30, 10, schema, 2);
    CHECK_ERR(stk_merge(dir, &err), STK_EINCOMPLETE, "part-00002.json");
    CHECK(strstr(err.message, "part 2") != NULL);

    /* Part 2 was started but did not finish: still missing. */
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.part_index = 2;
    o.part_count = 4;
    o.shard_bytes = 4096;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 2, &o, &w, &err));
    uint16_t t[300];
    for (uint64_t id = 20; id < 30; id++) {
        tokens(id, t);
        stk_value v[2] = {{&id, 1}, {t, ntokens(id)}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    stk_writer_free(w);
    CHECK_ERR(stk_merge(dir, &err), STK_EINCOMPLETE, "part-00002.json");
    stk_dataset *ds = NULL;
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, dir);

    /* The last part missing. */
    const char *dir2 = test_dir("parts-missing-last");
    write_part(dir2, 0, 2, 0, 10, schema, 2);
    CHECK_ERR(stk_merge(dir2, &err), STK_EINCOMPLETE, "part-00001.json");

    /* Nothing to merge at all. */
    const char *dir3 = test_dir("parts-none");
    CHECK(mkdir(dir3, 0755) == 0);
    CHECK_ERR(stk_merge(dir3, &err), -ENOENT, dir3);
    CHECK(!test_exists(in_dir(dir3, "manifest.json")));
    test_rmrf(dir);
    test_rmrf(dir2);
    test_rmrf(dir3);
}

static void different_schemas(void) {
    stk_error err = {0};
    const char *dir = test_dir("parts-schema");
    write_part(dir, 0, 2, 0, 10, schema, 2);
    stk_field other[2] = {schema[0], schema[1]};
    other[1].dtype = STK_U32; /* tokens widened in one part */
    write_part(dir, 1, 2, 10, 10, other, 2);
    CHECK_ERR(stk_merge(dir, &err), STK_ESCHEMA, "part 1");
    CHECK(!test_exists(in_dir(dir, "manifest.json")));
    stk_dataset *ds = NULL;
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, dir);

    /* Parts that disagree on how many parts there are. */
    const char *dir2 = test_dir("parts-count");
    write_part(dir2, 0, 2, 0, 10, schema, 2);
    write_part(dir2, 1, 3, 10, 10, schema, 2);
    CHECK(stk_merge(dir2, &err) == STK_ESCHEMA);
    CHECK(!test_exists(in_dir(dir2, "manifest.json")));
    test_rmrf(dir);
    test_rmrf(dir2);
}

/* Parts packed from different input sets do not merge. */
static void different_inputs(void) {
    stk_error err = {0};
    const char *dir = test_dir("parts-inputs");
    part_inputs = "npy:2:00000000000000aa";
    write_part(dir, 0, 2, 0, 10, schema, 2);
    part_inputs = "npy:3:00000000000000bb";
    write_part(dir, 1, 2, 10, 10, schema, 2);
    CHECK_ERR(stk_merge(dir, &err), STK_EMISMATCH, "part 1 was packed from other inputs");
    CHECK(!test_exists(in_dir(dir, "manifest.json")));
    /* One part recorded its inputs, the other did not. */
    test_rmrf(dir);
    dir = test_dir("parts-inputs-one");
    part_inputs = "npy:2:00000000000000aa";
    write_part(dir, 0, 2, 0, 10, schema, 2);
    part_inputs = NULL;
    write_part(dir, 1, 2, 10, 10, schema, 2);
    CHECK_ERR(stk_merge(dir, &err), STK_EMISMATCH, "only one recorded them");
    test_rmrf(dir);
    /* The same inputs merge, and the dataset keeps them. */
    dir = test_dir("parts-inputs-same");
    part_inputs = "npy:2:00000000000000aa";
    write_part(dir, 0, 2, 0, 10, schema, 2);
    write_part(dir, 1, 2, 10, 10, schema, 2);
    part_inputs = NULL;
    CHECK_OK(stk_merge(dir, &err));
    size_t len;
    char *text = test_read_file(in_dir(dir, "manifest.json"), &len);
    CHECK(strstr(text, "\"inputs\": \"npy:2:00000000000000aa\"") != NULL);
    free(text);
    test_rmrf(dir);
    /* Only a short plain string is taken. */
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.inputs = "two\nlines";
    stk_writer *w = NULL;
    CHECK_ERR(stk_writer_create(dir, schema, 2, &o, &w, &err), -EINVAL, "inputs");
}

/* Starts a pack of 200 records recording `inputs` and leaves it
 * interrupted after some shards. */
static const char *journal_list; /* inputs_list of the next interrupted/resume_with */

static void interrupted(const char *dir, const char *inputs) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 8192;
    o.sync = 0;
    o.inputs = inputs;
    o.inputs_list = journal_list;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 2, &o, &w, &err));
    uint16_t t[600] = {0};
    for (uint64_t id = 0; id < 200; id++) {
        tokens(id, t);
        stk_value v[2] = {{&id, 1}, {t, ntokens(id)}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    stk_writer_free(w); /* never finished: as if killed */
}

static uint64_t resume_with(const char *dir, const char *inputs, stk_error *err) {
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 8192;
    o.sync = 0;
    o.resume = 1;
    o.inputs = inputs;
    o.inputs_list = journal_list;
    stk_writer *w = NULL;
    int rc = stk_writer_create(dir, schema, 2, &o, &w, err);
    if (rc) return UINT64_MAX;
    uint64_t done = stk_writer_num_records(w);
    stk_writer_free(w);
    return done;
}

/* A resume checks that the inputs are the journal's. */
static void resume_checks_inputs(void) {
    stk_error err = {0};
    const char *dir = test_dir("parts-resume");
    interrupted(dir, "npy:5:0000000000000001");
    CHECK(resume_with(dir, "npy:6:0000000000000002", &err) == UINT64_MAX);
    CHECK(err.code == -EINVAL && strstr(err.message, "they differ") != NULL);
    /* Refused, the interrupted pack is still there to resume. */
    uint64_t done = resume_with(dir, "npy:5:0000000000000001", &err);
    CHECK(done > 0 && done < 200);
    /* A journal that recorded no inputs cannot vouch for them. */
    test_rmrf(dir);
    dir = test_dir("parts-resume-none");
    interrupted(dir, NULL);
    CHECK(resume_with(dir, "npy:5:0000000000000001", &err) == UINT64_MAX);
    CHECK(err.code == -EINVAL && strstr(err.message, "did not record them") != NULL);
    /* A caller that gives none checks nothing (the C API's own use). */
    CHECK(resume_with(dir, NULL, &err) > 0);
    test_rmrf(dir);
}

/* A refusal names the input that changed, from the lists of inputs one by
 * one (stk_writer_options.inputs_list): on resume against the journal's,
 * at a merge between the parts'. */
static void names_the_changed_input(void) {
    static const char *was = "data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
                             "data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
                             "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n";
    static const struct {
        const char *now, *says;
    } cases[] = {
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/b.npy\t240\t1700000000000000009\t00000000000000b2\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "data/b.npy changed (its size, 200 then 240 bytes)"},
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/b.npy\t200\t1700000000000000005\t00000000000000b1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "data/b.npy changed (its modification time)"},
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
         "data/c.npy\t300\t1700000000000000000\t0000000000000c11\n",
         "data/c.npy changed (its first or last bytes"},
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "data/b.npy removed"},
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/a2.npy\t7\t1700000000000000000\t00000000000000a2\n"
         "data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "data/a2.npy added"},
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n"
         "data/d.npy\t400\t1700000000000000000\t00000000000000d1\n",
         "data/d.npy added"},
        {"data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
         "data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "data/a.npy moved in the order"},
        /* The same files alike: the options differ. */
        {"data/a.npy\t100\t1700000000000000000\t00000000000000a1\n"
         "data/b.npy\t200\t1700000000000000000\t00000000000000b1\n"
         "data/c.npy\t300\t1700000000000000000\t00000000000000c1\n",
         "the same files, unchanged, but other options"},
    };
    stk_error err = {0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *dir = test_dir("parts-resume-named");
        journal_list = was;
        interrupted(dir, "npy:3:0000000000000001");
        journal_list = cases[k].now;
        CHECK(resume_with(dir, "npy:3:0000000000000002", &err) == UINT64_MAX);
        if (err.code != -EINVAL || !strstr(err.message, cases[k].says)) {
            fprintf(stderr, "case %zu: %s\n", k, err.message);
            CHECK(0);
        }
        /* Refused, the interrupted pack is still there to resume. */
        journal_list = was;
        CHECK(resume_with(dir, "npy:3:0000000000000001", &err) > 0);
        test_rmrf(dir);
        /* Two parts of other inputs: the merge names the same input. */
        if (k == 7) continue; /* alike lists: merge says only that they differ */
        dir = test_dir("parts-merge-named");
        part_inputs = "npy:3:0000000000000001";
        part_list = was;
        write_part(dir, 0, 2, 0, 10, schema, 2);
        part_inputs = "npy:3:0000000000000002";
        part_list = cases[k].now;
        write_part(dir, 1, 2, 10, 10, schema, 2);
        CHECK_ERR(stk_merge(dir, &err), STK_EMISMATCH, cases[k].says);
        CHECK(strstr(err.message, "part 1 was packed from other inputs than part 0") != NULL);
        test_rmrf(dir);
    }
    journal_list = part_list = part_inputs = NULL;
    /* A malformed list is refused. */
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.inputs = "npy:1:01";
    o.inputs_list = "a.npy 100 1 2\n";
    stk_writer *w = NULL;
    CHECK_ERR(stk_writer_create(test_dir("parts-bad-list"), schema, 2, &o, &w, &err), -EINVAL,
              "inputs_list");
}

/* Parts written at once: each checks the directory for files it did not
 * write while the others create, fill and remove their markers, so a file
 * listed and gone before it is read must count as nothing of anyone's. */
enum { NCONC = 8 };
static const char *conc_dir;

static void *conc_part(void *arg) {
    uint32_t i = (uint32_t)(uintptr_t)arg;
    write_part(conc_dir, i, NCONC, (uint64_t)i * 40, 40, schema, 2);
    return NULL;
}

static void concurrent_parts(void) {
    stk_error err = {0};
    for (int round = 0; round < 25; round++) {
        conc_dir = test_dir("parts-concurrent");
        pthread_t t[NCONC];
        for (uintptr_t i = 0; i < NCONC; i++)
            CHECK(pthread_create(&t[i], NULL, conc_part, (void *)i) == 0);
        for (int i = 0; i < NCONC; i++) pthread_join(t[i], NULL);
        CHECK_OK(stk_merge(conc_dir, &err));
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(conc_dir, &ds, &err));
        CHECK(stk_dataset_num_records(ds) == NCONC * 40);
        stk_dataset_close(ds);
        test_rmrf(conc_dir);
    }
}

int main(void) {
    concurrent_parts();
    merged();
    missing_part();
    different_schemas();
    different_inputs();
    resume_checks_inputs();
    names_the_changed_input();
    return 0;
}
