/* Fault injection: allocation failing at the Nth call, and open, read,
 * write, fsync and io_uring completions failing at the Nth operation (with
 * EIO, ENOSPC or a short transfer), over packing, opening and a loader
 * epoch.  At every N: the right error code, no crash, no leak (the ASan
 * pass checks), and never a dataset that opens as complete but differs. */
#include "util.h"
#include "core/fault.h"

#include <errno.h>

#define NREC 40

static float rows[NREC][64];

static int pack(const char *dir) {
    stk_error err = {0};
    stk_field f[2] = {{.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 4}},
                      {.name = "z", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED},
                       .codec = STK_CODEC_ZSTD}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 4096;
    o.block_size = 4096;
    o.overwrite = 1;
    stk_writer *w = NULL;
    int rc = stk_writer_create(dir, f, 2, &o, &w, &err);
    for (int r = 0; rc == 0 && r < NREC; r++) {
        stk_value v[2] = {{rows[r], 1 + (uint64_t)(r % 16)}, {rows[r], 4 * (uint64_t)(r % 9)}};
        rc = stk_writer_append(w, v, &err);
    }
    if (rc == 0) rc = stk_writer_finish(w, &err);
    stk_writer_free(w);
    return rc;
}

/* The dataset at dir is either complete and equal to what pack() writes,
 * or reported incomplete / absent. */
static void check_survivor(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(dir, &ds, &err);
    if (rc) {
        CHECK(rc == STK_EINCOMPLETE || rc == -ENOENT);
        return;
    }
    CHECK(stk_dataset_num_records(ds) == NREC);
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    float out[64];
    for (int r = 0; r < NREC; r++) {
        size_t len;
        CHECK_OK(stk_dataset_read(ds, (uint64_t)r, 0, out, sizeof out, &len, STK_READ_VERIFY, &err));
        CHECK(len == (size_t)(1 + r % 16) * 16 && memcmp(out, rows[r], len) == 0);
    }
    stk_dataset_close(ds);
}

static int epoch(stk_dataset *ds, stk_backend be) {
    stk_error err = {0};
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.batch_size = 7;
    o.backend = be;
    o.order = STK_ORDER_RANDOM;
    o.threads = 2;
    stk_loader *ld = NULL;
    int rc = stk_loader_open(ds, &o, &ld, &err);
    if (rc) return rc;
    stk_batch *b;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    stk_loader_close(ld);
    return rc == STK_END ? 0 : rc;
}

/* An epoch of a mixture of two sources (both over ds; random and block
 * order), batches mixed or homogeneous, drawn (block order through the
 * mapping) or fed (block order read from files). */
static int mixture_epoch(stk_dataset *ds, int homogeneous, int drawn) {
    stk_error err = {0};
    stk_loader_options so[2], c;
    for (int i = 0; i < 2; i++) {
        stk_loader_options_init(&so[i]);
        so[i].order = i ? STK_ORDER_BLOCK : STK_ORDER_RANDOM;
        so[i].backend = drawn ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
        so[i].seed = (uint64_t)i;
    }
    stk_loader_options_init(&c);
    c.batch_size = 5;
    c.threads = 2;
    stk_mixture_source src[2] = {{ds, &so[0], 2.0, 0, NULL}, {ds, &so[1], 1.0, 0, NULL}};
    stk_mixture_options mo = {STK_MIX_CYCLE, homogeneous, 3};
    stk_loader *ld = NULL;
    int rc = stk_loader_open_mixture(src, 2, &c, &mo, &ld, &err);
    if (rc) return rc;
    stk_batch *b;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    if (rc == STK_END) rc = stk_loader_set_epoch(ld, 1, &err);
    stk_loader_close(ld);
    return rc == STK_END ? 0 : rc;
}

/* Fails the n-th allocation, for n = 1, 2, ... until a run goes through:
 * of opening the dataset `good` (when open_too) and reading an epoch of a
 * loader (mix < 0) or of mixture_epoch(mix % 2, mix / 2).  Each failure
 * must be a clean -ENOMEM.  Returns the failure points. */
static long alloc_points(const char *good, bool open_too, int mix) {
    long points = 0;
    for (long n = 1;; n++) {
        stk_error err = {0};
        stk_dataset *ds = NULL;
        if (!open_too) CHECK_OK(stk_dataset_open(good, &ds, &err));
        stk__fault_arm(STK__FAULT_ALLOC, n, ENOMEM);
        int rc = open_too ? stk_dataset_open(good, &ds, &err) : 0;
        if (rc == 0) rc = mix < 0 ? epoch(ds, STK_BACKEND_POOL) : mixture_epoch(ds, mix % 2, mix / 2);
        long seen = stk__fault_seen(STK__FAULT_ALLOC);
        stk__fault_reset();
        stk_dataset_close(ds);
        if (rc == 0 && seen < n) return points; /* ran to the end without the fault */
        CHECK(rc == -ENOMEM || rc == 0);
        points++;
    }
}

int main(void) {
    stk_error err = {0};
    test_fill(rows, sizeof rows, 9);
    const char *good = test_dir("faults-good");
    const char *dir = test_dir("faults");
    CHECK_OK(pack(good));
    long points = 0;

    /* Allocation failures while packing. */
    for (long n = 1;; n++) {
        stk__fault_arm(STK__FAULT_ALLOC, n, ENOMEM);
        int rc = pack(dir);
        long seen = stk__fault_seen(STK__FAULT_ALLOC);
        stk__fault_reset();
        if (rc == 0 && seen < n) break; /* ran to the end without the fault */
        CHECK(rc == -ENOMEM || rc == 0);
        check_survivor(dir);
        points++;
    }
    /* ... while opening, and during a loader's open and epoch ... */
    points += alloc_points(good, true, -1);
    /* ... and a mixture's (its sources' loaders, its own, its fills). */
    for (int h = 0; h < 4; h++) points += alloc_points(good, false, h);
    printf("allocation: %ld failure points, each a clean -ENOMEM\n", points);

    /* I/O failures: open, read (EIO and short), write, fsync, io_uring. */
    struct {
        int kind, err;
        const char *name;
    } io[] = {{STK__FAULT_OPEN, EIO, "open"},   {STK__FAULT_READ, EIO, "read"},
              {STK__FAULT_READ, 0, "short read"}, {STK__FAULT_WRITE, ENOSPC, "write"},
              {STK__FAULT_FSYNC, EIO, "fsync"},  {STK__FAULT_URING, EIO, "io_uring"},
              {STK__FAULT_URING, 0, "short io_uring"}};
    for (size_t k = 0; k < sizeof io / sizeof io[0]; k++) {
        long kp = 0;
        for (long n = 1;; n++) {
            stk__fault_arm(io[k].kind, n, io[k].err);
            int rc = pack(dir);
            stk_dataset *ds = NULL;
            if (rc == 0) rc = stk_dataset_open(dir, &ds, &err);
            if (rc == 0) rc = stk_dataset_verify(ds, NULL, NULL, &err);
            if (rc == 0) rc = epoch(ds, STK_BACKEND_POOL);
            if (rc == 0) {
                rc = epoch(ds, STK_BACKEND_URING);
                if (rc == -ENOSYS) rc = 0;
            }
            long seen = stk__fault_seen(io[k].kind);
            stk__fault_reset();
            stk_dataset_close(ds);
            if (rc == 0 && seen < n) break;
            if (rc == 0) { /* the fault hit something that was retried or unused */
                kp++;
                continue;
            }
            if (io[k].err) {
                if (rc != -io[k].err) {
                    fprintf(stderr, "%s fault %ld: got %d (%s): %s\n", io[k].name, n, rc,
                            stk_strerror(rc), err.message);
                    return 1;
                }
            } else {
                CHECK(rc < 0); /* a short transfer: truncated or corrupt, named */
            }
            check_survivor(dir);
            kp++;
        }
        printf("%s: %ld failure points\n", io[k].name, kp);
        points += kp;
    }
    printf("%ld failure points in all\n", points);
    test_rmrf(dir);
    test_rmrf(good);
    return 0;
}
