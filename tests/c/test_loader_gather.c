/*
 * test_loader_gather.c: whole records gathered from the mapping (every
 * field stored plain, the mmap backend), and the warm-up that brings a cold
 * dataset into the page cache before the first epoch.
 *
 *  1. Every batch equals the written bytes, for the three orders, 1 and 3
 *     threads, checks on and off, warm-up on (files evicted first) and off,
 *     and every sample of the epoch comes exactly once.
 *  2. The warm-up: with the files evicted it brings every byte of shard
 *     data in (its statistics say so, and the files are resident after),
 *     AUTO takes it (and the mmap backend) for a small cold dataset, never
 *     for the pool backend, never with O_DIRECT, never when resident.
 *  3. A loader closed while its warm-up still runs closes at once.
 *  4. A flipped byte inside a record, or in the padding between its fields,
 *     fails next() with STK_ECHECKSUM naming that record (checks on), with
 *     and without the warm-up.  Records of one field of 1 KiB or more
 *     (checked in runs, after their copies): intact, every batch equals
 *     the written records and each is checked once an epoch; a flipped
 *     byte in a record amid a run names that record.
 *  5. Format version 2 (fixed, plain fields of three and of one): as 1,
 *     and a flipped byte in a record names it.
 *  6. After the warm-up, a shard's data is in the page cache as 2 MiB
 *     folios (a mapping of it has them mapped whole), from its first
 *     megabytes on; skipped where the kernel and file system make none
 *     for a plain hugepage mapping either.
 */
#include "test_loader_common.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* Drops the dataset's files from the page cache (nothing may map them;
 * written pages are made clean first, or they would stay). */
static void evict(const char *dir) {
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/*.stk", dir);
    glob_t g;
    CHECK(glob(pat, 0, NULL, &g) == 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        int fd = open(g.gl_pathv[i], O_RDONLY);
        CHECK(fd >= 0);
        syncfs(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    globfree(&g);
}

static uint64_t shard_data_bytes(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    uint64_t total = 0;
    for (size_t s = 0; s < stk_dataset_num_shards(ds); s++) {
        stk_shard_info si;
        CHECK(stk_dataset_shard(ds, s, &si) == 0);
        total += si.data_bytes;
    }
    stk_dataset_close(ds);
    return total;
}

/* One epoch of a fresh loader over a freshly opened dataset, every batch
 * checked; returns a hash of the stream and the loader's stats. */
static uint64_t epoch(const tds *d, const stk_loader_options *o, bool cold, stk_loader_stats *st) {
    stk_error err = {0};
    if (cold) evict(d->dir);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d->dir, &ds, &err));
    stk_loader *ld = NULL;
    if (cold) CHECK(stk_dataset_resident(ds) < 0.5);
    CHECK_OK(stk_loader_open(ds, o, &ld, &err));
    CHECK(stk_loader_backend(ld) == STK_BACKEND_MMAP);
    uint8_t *seen = calloc(d->nrec + 1, 1);
    CHECK(seen != NULL);
    uint64_t h = FNV0, n = 0;
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        const uint64_t *ids = stk_batch_samples(b);
        for (uint32_t j = 0; j < stk_batch_size(b); j++, n++) {
            CHECK(ids[j] < d->nrec && !seen[ids[j]]);
            seen[ids[j]] = 1;
        }
        h = tds_check_batch(d, ld, b, NULL, 0, 0, h);
        stk_loader_release(ld, b);
    }
    if (rc != STK_END) {
        fprintf(stderr, "next: %s\n", err.message);
        exit(1);
    }
    CHECK(n == d->nrec);
    stk_loader_stats_get(ld, st);
    stk_loader_close(ld);
    stk_dataset_close(ds);
    free(seen);
    return h;
}

static void base(stk_loader_options *o) {
    stk_loader_options_init(o);
    o->batch_size = 11;
    o->memory_budget = 256 << 20;
    o->backend = STK_BACKEND_MMAP;
    o->block_samples = 7;
    o->block_group = 3;
    o->seed = 5;
}

static void test_batches(const tds *d) {
    const stk_order orders[3] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    for (int oi = 0; oi < 3; oi++) {
        uint64_t ref = 0;
        int first = 1;
        for (int threads = 1; threads <= 3; threads += 2)
            for (int verify = 0; verify <= 1; verify++)
                for (int warm = 0; warm <= 1; warm++) {
                    stk_loader_options o;
                    base(&o);
                    o.order = orders[oi];
                    o.threads = threads;
                    o.verify = verify;
                    o.warm_up = warm ? STK_WARM_UP_ON : STK_WARM_UP_OFF;
                    stk_loader_stats st;
                    uint64_t h = epoch(d, &o, warm, &st);
                    if (first) ref = h;
                    first = 0;
                    /* The same stream whatever the threads, checks or warm-up. */
                    CHECK(h == ref);
                    if (warm) CHECK(st.warm_up_bytes > 0);
                    else CHECK(st.warm_up_bytes == 0);
                    /* Every record checked once: by its own checksum, or (in
                     * a warm-up's first epoch) by the blocks the warm-up
                     * checked as they arrived. */
                    if (verify && !warm && orders[oi] != STK_ORDER_BLOCK)
                        CHECK(st.verify.count == d->nrec);
                    if (verify) CHECK(st.verify.count > 0);
                }
    }
}

/* Waits (at most 20 s) for the warm-up of `ld` to finish. */
static void wait_warm(stk_loader *ld, stk_loader_stats *st) {
    for (int i = 0; i < 2000; i++) {
        stk_loader_stats_get(ld, st);
        if (st->warm_up_done) return;
        usleep(10000);
    }
    CHECK(!"the warm-up did not finish in 20 s");
}

/* A loader in random order with the backend and warm-up left to it, over
 * the dataset at `dir` evicted and opened afresh (*ds, to close). */
static stk_loader *open_cold(const char *dir, stk_dataset **ds, stk_loader_options *o) {
    stk_error err = {0};
    evict(dir);
    CHECK_OK(stk_dataset_open(dir, ds, &err));
    CHECK(stk_dataset_resident(*ds) < 0.5);
    base(o);
    o->backend = STK_BACKEND_AUTO;
    o->order = STK_ORDER_RANDOM;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(*ds, o, &ld, &err));
    return ld;
}

static void test_warm_up(const tds *d) {
    stk_error err = {0};
    uint64_t want = shard_data_bytes(d->dir);
    CHECK(want > 0);
    /* AUTO takes it for a small cold dataset, with the auto backend. */
    stk_dataset *ds = NULL;
    stk_loader_options o;
    stk_loader *ld = open_cold(d->dir, &ds, &o);
    CHECK(stk_loader_backend(ld) == STK_BACKEND_MMAP);
    stk_loader_stats st;
    wait_warm(ld, &st);
    CHECK(st.warm_up_bytes == want);
    CHECK(st.warm_up.bytes == want);
    CHECK(st.warm_up.count > 0);
    CHECK(stk_dataset_resident(ds) >= 0.9);
    /* In the first epoch the workers check blocks that the warm-up brought
     * in while they wait for their own (how many depends on timing), and
     * check the other records one by one; the next epoch, with no warm-up,
     * checks every record once. */
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    CHECK(rc == STK_END);
    stk_loader_stats_get(ld, &st);
    CHECK(st.verify.count > 0 && st.verify.bytes > 0);
    uint64_t after_first = st.verify.count;
    CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    CHECK(rc == STK_END);
    stk_loader_stats_get(ld, &st);
    CHECK(st.verify.count == after_first + d->nrec);
    stk_loader_close(ld);
    /* Resident now: no warm-up. */
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    stk_loader_stats_get(ld, &st);
    CHECK(st.warm_up_bytes == 0 && st.warm_up_done);
    stk_loader_close(ld);
    stk_dataset_close(ds);

    /* Not for the pool backend under AUTO, nor with O_DIRECT even when
     * asked for; ON takes it with the pool backend too. */
    struct {
        stk_backend backend;
        int direct;
        stk_warm_up warm;
        int expect;
    } cases[] = {{STK_BACKEND_POOL, 0, STK_WARM_UP_AUTO, 0},
                 {STK_BACKEND_POOL, 1, STK_WARM_UP_ON, 0},
                 {STK_BACKEND_POOL, 0, STK_WARM_UP_ON, 1},
                 {STK_BACKEND_MMAP, 0, STK_WARM_UP_OFF, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        evict(d->dir);
        CHECK_OK(stk_dataset_open(d->dir, &ds, &err));
        base(&o);
        o.backend = cases[i].backend;
        o.direct = cases[i].direct;
        o.warm_up = cases[i].warm;
        o.order = STK_ORDER_RANDOM; /* (block order brings in its blocks' spans) */
        rc = stk_loader_open(ds, &o, &ld, &err);
        if (rc == -EINVAL && o.direct) { /* a file system without O_DIRECT */
            stk_dataset_close(ds);
            continue;
        }
        CHECK_OK(rc);
        stk_loader_stats_get(ld, &st);
        CHECK((st.warm_up_bytes == want) == (cases[i].expect != 0));
        CHECK(cases[i].expect || st.warm_up_bytes == 0);
        stk_loader_close(ld);
        stk_dataset_close(ds);
    }
}

/* Closing while the warm-up runs: a larger dataset, closed at once. */
static void test_close_early(void) {
    tds big;
    tds_init(&big, TDS_PLAIN, 6000);
    tds_write_opts(&big, "gather-big", 16 << 20);
    stk_error err = {0};
    for (int i = 0; i < 5; i++) {
        evict(big.dir);
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(big.dir, &ds, &err));
        stk_loader_options o;
        base(&o);
        o.warm_up = STK_WARM_UP_ON;
        stk_loader *ld = NULL;
        CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
        if (i % 2) {
            stk_batch *b;
            CHECK_OK(stk_loader_next(ld, &b, &err));
            stk_loader_release(ld, b);
        }
        stk_loader_close(ld);
        stk_dataset_close(ds);
    }
    test_rmrf(big.dir);
    tds_free(&big);
}

/* The byte at `off` of shard file `shard` of a copy of the dataset is
 * flipped; every epoch over it fails naming record `rec`. */
static void check_damage(const tds *d, const char *what, size_t shard, uint64_t off, uint64_t rec) {
    stk_error err = {0};
    char dir[4200], path[4400];
    snprintf(dir, sizeof dir, "%s", test_dir("gather-damaged"));
    test_copy_dir(d->dir, dir);
    snprintf(path, sizeof path, "%s/shard-%06zu.stk", dir, shard);
    test_flip(path, off, 0x10);
    for (int warm = 0; warm <= 1; warm++)
        for (int oi = 0; oi < 2; oi++) {
            if (warm) evict(dir);
            stk_dataset *ds = NULL;
            CHECK_OK(stk_dataset_open(dir, &ds, &err));
            stk_loader_options o;
            base(&o);
            o.order = oi ? STK_ORDER_RANDOM : STK_ORDER_SEQUENTIAL;
            o.warm_up = warm ? STK_WARM_UP_ON : STK_WARM_UP_OFF;
            stk_loader *ld = NULL;
            CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
            stk_batch *b;
            int rc;
            while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
            if (rc != STK_ECHECKSUM || !test_names_record(err.message, rec) ||
                !strstr(err.message, "shard-")) {
                fprintf(stderr, "%s (warm %d order %d): wanted a checksum error naming record "
                        "%llu, got %d: %s\n", what, warm, oi, (unsigned long long)rec, rc,
                        err.message);
                exit(1);
            }
            stk_loader_close(ld);
            stk_dataset_close(ds);
        }
    test_rmrf(dir);
}

static void test_damage(const tds *d) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d->dir, &ds, &err));
    /* Record 40: a byte of x, a byte of seq (it has rows), and a byte of the
     * padding between x's 16004 bytes and seq's start (fields are aligned
     * to 64 bytes). */
    uint64_t rec = 40;
    stk_extent x, q;
    CHECK_OK(stk_dataset_get(ds, rec, 0, &x, &err));
    CHECK_OK(stk_dataset_get(ds, rec, 1, &q, &err));
    CHECK(q.rows > 0 && q.offset > x.offset + x.stored_bytes);
    size_t shard = x.shard;
    stk_dataset_close(ds);
    check_damage(d, "a byte of x", shard, x.offset + 5, rec);
    check_damage(d, "a byte of seq", shard, q.offset + q.stored_bytes - 1, rec);
    check_damage(d, "padding", shard, x.offset + x.stored_bytes + 3, rec);
}

/* Format version 2 datasets (every field fixed and plain: gather.c's
 * gather_dense), of three fields and of one: every batch as written, in
 * every order, with and without checks and warm-up, and a flipped byte of
 * record 57 named. */
static void test_version2(void) {
    const tds_kind kinds[2] = {TDS_FIXED, TDS_ONE};
    for (int k = 0; k < 2; k++) {
        tds d;
        tds_init(&d, kinds[k], 600);
        char name[64];
        snprintf(name, sizeof name, "gather-v2-%s", tds_kind_name(kinds[k]));
        tds_write_opts(&d, name, 64 << 10);
        stk_error err = {0};
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        CHECK(stk_dataset_format_version(ds) == 2 && stk_dataset_num_shards(ds) > 1);
        stk_extent x;
        CHECK_OK(stk_dataset_get(ds, 57, 0, &x, &err));
        stk_dataset_close(ds);
        test_batches(&d);
        check_damage(&d, tds_kind_name(kinds[k]), x.shard, x.offset + 100, 57);
        test_rmrf(d.dir);
        tds_free(&d);
    }
}

/* Records of one field, 1.5 KiB each: the gather copies them in runs and
 * hashes each run's copies after (gather.c, HASH_RUN_MIN). */
#define BIGREC_N 200
#define BIGREC_F 384

static float bigrec_value(uint64_t r, size_t k) { return (float)(r * 1000 + k) * 0.5f; }

/* Checks batch b against the written records, counting each sample in
 * seen[its source][its record] (source 0 for a loader's own batch). */
static void bigrec_check_batch(const stk_batch *b, int seen[][BIGREC_N]) {
    stk_batch_field bf;
    CHECK(stk_batch_field_get(b, 0, &bf) == 0);
    const uint64_t *ids = stk_batch_samples(b);
    const uint32_t *src = stk_batch_sources(b);
    for (uint32_t j = 0; j < stk_batch_size(b); j++) {
        const float *v = (const float *)bf.data + (size_t)j * BIGREC_F;
        for (size_t k = 0; k < BIGREC_F; k++) CHECK(v[k] == bigrec_value(ids[j], k));
        seen[src ? src[j] : 0][ids[j]]++;
    }
}

/* Takes the epoch of loader ld over `nsrc` sources of the records (1: a
 * loader of its own), checking every batch; at its end, every record came
 * once from each source, and checked[] holds the records checked and
 * their bytes.  Returns STK_END or the error (in *err), and closes ld. */
static int bigrec_drain(stk_loader *ld, int nsrc, uint64_t checked[2], stk_error *err) {
    static int seen[2][BIGREC_N];
    memset(seen, 0, sizeof seen);
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, err)) == 0) {
        bigrec_check_batch(b, seen);
        stk_loader_release(ld, b);
    }
    if (rc == STK_END) {
        for (int i = 0; i < nsrc; i++)
            for (int r = 0; r < BIGREC_N; r++) CHECK(seen[i][r] == 1);
        stk_loader_stats st;
        stk_loader_stats_get(ld, &st);
        checked[0] = st.verify.count;
        checked[1] = st.verify.bytes;
    }
    stk_loader_close(ld);
    return rc;
}

static int bigrec_epoch(const char *dir, stk_order order, uint64_t checked[2], stk_error *out) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_loader_options o;
    base(&o);
    o.batch_size = 64;
    o.order = order;
    o.warm_up = STK_WARM_UP_OFF;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &o, &ld, &err));
    int rc = bigrec_drain(ld, 1, checked, out);
    stk_dataset_close(ds);
    return rc;
}

/* The same records as a mixture of two sources (two openings of the
 * dataset), drawn jointly: runs of each source's places, each run copied
 * and then hashed.  Every sample equals its record; intact, each record
 * is checked once for each source, every time (no warm-up). */
static int bigrec_mix_epoch(const char *dir, int warm, uint64_t checked[2], stk_error *out) {
    stk_error err = {0};
    stk_dataset *ds[2] = {NULL, NULL};
    stk_loader_options so[2];
    stk_mixture_source s[2];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(stk_dataset_open(dir, &ds[i], &err));
        base(&so[i]);
        so[i].order = i ? STK_ORDER_SEQUENTIAL : STK_ORDER_RANDOM;
        so[i].warm_up = warm ? STK_WARM_UP_ON : STK_WARM_UP_OFF;
        s[i] = (stk_mixture_source){ds[i], &so[i], 1, 0, NULL};
    }
    stk_loader_options c;
    base(&c);
    c.batch_size = 64;
    stk_mixture_options mo = {STK_MIX_ALL, 0, 9};
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open_mixture(s, 2, &c, &mo, &ld, &err));
    int rc = bigrec_drain(ld, 2, checked, out);
    for (int i = 0; i < 2; i++) stk_dataset_close(ds[i]);
    return rc;
}

static void test_big_records(void) {
    stk_error err = {0};
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", test_dir("gather-big"));
    stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 1, .shape = {BIGREC_F}};
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.sync = 0;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &wo, &w, &err));
    float v[BIGREC_F];
    for (uint64_t r = 0; r < BIGREC_N; r++) {
        for (size_t k = 0; k < BIGREC_F; k++) v[k] = bigrec_value(r, k);
        stk_value val = {v, BIGREC_F};
        CHECK_OK(stk_writer_append(w, &val, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    const stk_order orders[2] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM};
    for (int oi = 0; oi < 2; oi++) {
        uint64_t checked[2] = {0, 0};
        CHECK(bigrec_epoch(dir, orders[oi], checked, &err) == STK_END);
        CHECK(checked[0] == BIGREC_N && checked[1] == (uint64_t)BIGREC_N * BIGREC_F * 4);
    }
    for (int warm = 0; warm <= 1; warm++) {
        uint64_t checked[2] = {0, 0};
        CHECK(bigrec_mix_epoch(dir, warm, checked, &err) == STK_END);
        CHECK(warm || (checked[0] == 2 * BIGREC_N &&
                       checked[1] == 2 * (uint64_t)BIGREC_N * BIGREC_F * 4));
    }
    /* Record 70: in sequential order the 7th of the second batch, amid a
     * run (a run ends at its 22nd record of 1.5 KiB, past 32 KiB). */
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_extent x;
    CHECK_OK(stk_dataset_get(ds, 70, 0, &x, &err));
    stk_shard_info si;
    CHECK_OK(stk_dataset_shard(ds, x.shard, &si));
    char path[4400];
    snprintf(path, sizeof path, "%s", si.file);
    stk_dataset_close(ds);
    test_flip(path, x.offset + 700, 0x04);
    for (int oi = 0; oi < 2; oi++) {
        uint64_t checked[2];
        memset(&err, 0, sizeof err);
        int rc = bigrec_epoch(dir, orders[oi], checked, &err);
        CHECK(rc == STK_ECHECKSUM && test_names_record(err.message, 70));
    }
    for (int warm = 0; warm <= 1; warm++) {
        uint64_t checked[2];
        memset(&err, 0, sizeof err);
        int rc = bigrec_mix_epoch(dir, warm, checked, &err);
        CHECK(rc == STK_ECHECKSUM && test_names_record(err.message, 70));
    }
    test_rmrf(dir);
}

/* ---- 5. 2 MiB folios ---- */

#define HUGE_SZ (2ul << 20)

/* KiB of the mapping at `addr` mapped by 2 MiB entries (FilePmdMapped in
 * /proc/self/smaps), or -1 where smaps does not say. */
static long pmd_mapped_kib(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512], head[32];
    snprintf(head, sizeof head, "%lx-", (unsigned long)addr);
    long kib = -1;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, head, strlen(head)) == 0) {
            in = true;
        } else if (in && sscanf(line, "FilePmdMapped: %ld", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib;
}

/* Maps `path` at a 2 MiB boundary, marked for huge pages, brings it in
 * (populating: reading it through the mapping; else only mapping what the
 * page cache holds) and returns the KiB of it mapped by 2 MiB entries. */
static long huge_kib(const char *path, bool populate) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0);
    size_t n = (size_t)sb.st_size;
    uint8_t *r = mmap(NULL, n + HUGE_SZ, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(r != MAP_FAILED);
    uint8_t *p = (uint8_t *)(((uintptr_t)r + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1));
    CHECK(mmap(p, n, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == p);
    close(fd);
    madvise(p, n, MADV_HUGEPAGE);
    if (!populate || madvise(p, n, MADV_POPULATE_READ) != 0) {
        volatile uint8_t sink = 0;
        for (size_t o = 0; o < n; o += 4096) sink ^= p[o];
        (void)sink;
    }
    long kib = pmd_mapped_kib(p);
    munmap(r, n + HUGE_SZ);
    return kib;
}

static void test_huge_folios(void) {
    /* One shard of about 26 MB: before the warm-up dropped the pages the
     * open had read at a shard's head, the page cache grew its folios from
     * the smallest over the first 30 MiB or so, and such a shard had none
     * in 2 MiB folios. */
    tds d;
    tds_init(&d, TDS_PLAIN, 1600);
    tds_write_opts(&d, "folios", 64 << 20);
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
    CHECK(stk_dataset_num_shards(ds) == 1);
    stk_shard_info si;
    CHECK(stk_dataset_shard(ds, 0, &si) == 0);
    char path[4200];
    snprintf(path, sizeof path, "%s", si.file);
    uint64_t data = si.data_bytes;
    stk_dataset_close(ds);

    evict(d.dir);
    long ref = huge_kib(path, true);
    if (ref < 0 || (uint64_t)ref * 1024 < data / 2) {
        printf("2 MiB folios: skipped (a hugepage mapping of a cold file gets %ld KiB of "
               "%llu in 2 MiB folios here)\n", ref, (unsigned long long)(data >> 10));
    } else {
        stk_loader_options o;
        stk_loader *ld = open_cold(d.dir, &ds, &o);
        stk_loader_stats st;
        wait_warm(ld, &st);
        CHECK(st.warm_up_bytes == data);
        long got = huge_kib(path, false);
        printf("2 MiB folios: %ld KiB of %llu after the warm-up (a hugepage mapping: %ld)\n", got,
               (unsigned long long)(data >> 10), ref);
        /* All but the 2 MiB pieces at the data's two ends. */
        CHECK(got >= 0 && (uint64_t)got * 1024 + 2 * HUGE_SZ >= data);
        stk_loader_close(ld);
        stk_dataset_close(ds);
    }
    test_rmrf(d.dir);
    tds_free(&d);
}

int main(void) {
    test_watchdog(600);
    tds d;
    tds_init(&d, TDS_PLAIN, 1200);
    tds_write_opts(&d, "gather", 4 << 20);
    test_batches(&d);
    test_warm_up(&d);
    test_close_early();
    test_damage(&d);
    test_version2();
    test_big_records();
    test_rmrf(d.dir);
    tds_free(&d);
    test_huge_folios();
    return 0;
}
