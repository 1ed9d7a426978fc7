/* Soak: 200 epochs on one loader (each backend, windows and records), and
 * 100 loaders opened and closed: resident memory, open descriptors and
 * threads stay flat after the first epoch (measured from /proc). */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1 /* the sanitizers' own allocators make RSS meaningless */
#else
#define SANITIZED 0
#endif

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    CHECK(f && fscanf(f, "%ld %ld", &size, &res) == 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static int count_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    CHECK(n > 0);
    return n;
}

static void run_epoch(stk_loader *ld) {
    stk_error err = {0};
    stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) stk_loader_release(ld, b);
    CHECK(rc == STK_END);
}

int main(void) {
    stk_error err = {0};
    const char *dir = test_dir("soak");
    stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 8}};
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.sync = 0;
    wo.shard_bytes = 32 << 10;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, &wo, &w, &err));
    float buf[200 * 8];
    test_fill(buf, sizeof buf, 3);
    for (int r = 0; r < 120; r++) {
        stk_value v = {buf, 40 + (uint64_t)(r % 7) * 20};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));

    stk_backend backends[] = {STK_BACKEND_POOL, STK_BACKEND_URING, STK_BACKEND_MMAP};
    for (int bi = 0; bi < 3; bi++)
        for (int win = 0; win < 2; win++) {
            stk_loader_options o;
            stk_loader_options_init(&o);
            o.batch_size = 16;
            o.backend = backends[bi];
            o.order = win ? STK_ORDER_BLOCK : STK_ORDER_RANDOM;
            o.window = win ? 30 : 0;
            o.block_samples = 50;
            o.block_group = 2;
            stk_loader *ld = NULL;
            int rc = stk_loader_open(ds, &o, &ld, &err);
            if (rc == -ENOSYS) continue;
            CHECK_OK(rc);
            run_epoch(ld);
            long rss0 = rss_kib();
            int fds0 = count_fds(), th0 = count_threads();
            /* Under the sanitizers (CI's second and third passes) fewer
             * epochs keep the run short; the release run does 200. */
            for (uint64_t e = 1; e <= (SANITIZED ? 40u : 200u); e++) {
                CHECK_OK(stk_loader_set_epoch(ld, e, &err));
                run_epoch(ld);
            }
            long rss1 = rss_kib();
            int fds1 = count_fds(), th1 = count_threads();
            printf("backend %s %s: rss %ld -> %ld KiB, fds %d -> %d, threads %d -> %d\n",
                   stk_backend_name(backends[bi]), win ? "windows/block" : "records/random",
                   rss0, rss1, fds0, fds1, th0, th1);
            CHECK(fds1 == fds0 && th1 == th0);
            if (!SANITIZED) CHECK(rss1 - rss0 < 1024); /* under 1 MiB over 200 epochs */
            stk_loader_close(ld);
        }

    /* Opening and closing loaders leaves nothing behind. */
    int fds0 = count_fds(), th0 = count_threads();
    long rss0 = rss_kib();
    for (int i = 0; i < 100; i++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 8;
        o.backend = (stk_backend)(1 + i % 3);
        stk_loader *ld = NULL;
        int rc = stk_loader_open(ds, &o, &ld, &err);
        if (rc == -ENOSYS) continue;
        CHECK_OK(rc);
        stk_batch *b;
        if (i % 2 && stk_loader_next(ld, &b, &err) == 0) stk_loader_release(ld, b);
        stk_loader_close(ld);
    }
    printf("100 loaders: rss %ld -> %ld KiB, fds %d -> %d, threads %d -> %d\n", rss0, rss_kib(),
           fds0, count_fds(), th0, count_threads());
    CHECK(count_fds() == fds0 && count_threads() == th0);
    if (!SANITIZED) CHECK(rss_kib() - rss0 < 4096);
    stk_dataset_close(ds);
    test_rmrf(dir);
    return 0;
}
