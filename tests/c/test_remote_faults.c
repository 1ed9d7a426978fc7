/*
 * test_remote_faults.c: opening a remote dataset (http:// from a Python
 * http.server started here, which ignores Range requests: the whole-object
 * answers are cut to the range asked) while allocation, open, read and write
 * fail at the Nth call.  At every N: a clean error with the right code or
 * success, the same records as the local dataset when it succeeds, no
 * descriptor left open (a leaked lock would also make the next open wait on
 * itself), and nothing unchecked under a shard's name in the cache.  Then
 * the dataset closed while its read-ahead fetches, and its statistics read
 * from another thread while it fetches, a read waiting on a read-ahead
 * round that stalls, and the objects changed under a loader reading
 * through a cache budget.  Skips (77) without python3.
 */
#include "util.h"
#include "core/fault.h"
#include "remote/lazy.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NREC 400
#define NROWS 60

static float rows[NROWS][4096];

static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(getsockname(s, (struct sockaddr *)&a, &n) == 0);
    close(s);
    return ntohs(a.sin_port);
}

static bool answers(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d)) n++;
    if (d) closedir(d);
    return n;
}

/* Removes the cached shards (and anything half-fetched), keeping the
 * directory, so that the next open fetches again. */
static void empty_cache(const char *cache) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", cache);
    CHECK(system(cmd) == 0);
}

/* No file of the cache carries a shard's name without being whole. */
static void check_cache(const char *cache) {
    char cmd[700];
    snprintf(cmd, sizeof cmd,
             "for f in '%s'/*/shard-*.stk; do [ -e \"$f\" ] || continue; "
             "[ \"$(stat -c %%s \"$f\")\" -gt 4096 ] || exit 1; done",
             cache);
    CHECK(system(cmd) == 0);
}

static stk_error read_err;

static int read_all(stk_dataset *ds) {
    float out[4096];
    for (int r = 0; r < NREC; r++) {
        size_t len;
        int rc = stk_dataset_read(ds, (uint64_t)r, 0, out, sizeof out, &len, STK_READ_VERIFY,
                                  &read_err);
        if (rc) return rc;
        CHECK(len == (size_t)(1 + r % 64) * 64 * 4 && memcmp(out, rows[r % NROWS], len) == 0);
    }
    return 0;
}

/* Disk the dataset directories under `cache` take (their files' blocks),
 * each walked under a shared lock on its budget.lock, which a process
 * holds exclusively while it evicts and allocates. */
static uint64_t cache_use(const char *cache) {
    uint64_t most = 0;
    DIR *d = opendir(cache);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || e->d_name[0] == 'm') continue; /* m-*: manifest copies */
        char sub[1024], lk[1100];
        snprintf(sub, sizeof sub, "%s/%s", cache, e->d_name);
        snprintf(lk, sizeof lk, "%s/budget.lock", sub);
        int fd = open(lk, O_RDONLY);
        if (fd >= 0) flock(fd, LOCK_SH);
        DIR *dd = opendir(sub);
        uint64_t total = 0;
        struct dirent *f;
        while (dd && (f = readdir(dd))) {
            struct stat st;
            if (f->d_name[0] != '.' && fstatat(dirfd(dd), f->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                total += (uint64_t)st.st_blocks * 512;
        }
        if (dd) closedir(dd);
        if (fd >= 0) close(fd);
        if (total > most) most = total;
    }
    closedir(d);
    return most;
}

/* A loader of 2 threads reads every record through a cache of `budget`
 * bytes (smaller than the dataset) in `order`: each record as written,
 * and the cache's disk use, taken after every batch, within the budget. */
static void read_budgeted(const char *url, const char *cache, uint64_t budget, stk_order order) {
    stk_error err = {0};
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.cache_dir = cache;
    oo.cache_budget = budget;
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, &oo, &ds, &err));
    stk_loader_options lo;
    stk_loader_options_init(&lo);
    lo.batch_size = 4;
    lo.threads = 2;
    lo.order = order;
    lo.seed = 3;
    lo.block_bytes = 128 << 10;
    lo.block_group = 1;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &lo, &ld, &err));
    int seen[NREC] = {0};
    uint64_t peak = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        CHECK_OK(stk_loader_set_epoch(ld, (uint64_t)epoch, &err));
        stk_batch *b;
        int rc;
        while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
            stk_batch_field bf;
            CHECK_OK(stk_batch_field_get(b, 0, &bf));
            const uint64_t *ids = stk_batch_samples(b);
            for (uint32_t j = 0; j < stk_batch_size(b); j++) {
                uint64_t r = ids[j];
                int64_t n = bf.offsets[j + 1] - bf.offsets[j];
                CHECK(r < NREC && n == 1 + (int64_t)(r % 64));
                CHECK(memcmp((const float *)bf.data + bf.offsets[j] * 64, rows[r % NROWS],
                             (size_t)n * 64 * 4) == 0);
                seen[r]++;
            }
            stk_loader_release(ld, b);
            uint64_t use = cache_use(cache);
            if (use > peak) peak = use;
        }
        CHECK(rc == STK_END);
    }
    for (int r = 0; r < NREC; r++) CHECK(seen[r] == 2);
    stk_remote_stats rs;
    CHECK_OK(stk_dataset_remote_stats(ds, &rs));
    CHECK(rs.cache_limited && rs.cache_budget == budget && rs.cache_peak <= budget);
    CHECK(rs.bytes_evicted > 0 && peak <= budget);
    printf("budget %llu KiB, %s order: peak %llu KiB, %llu KiB evicted\n",
           (unsigned long long)(budget >> 10), order == STK_ORDER_BLOCK ? "block" : "random",
           (unsigned long long)(peak >> 10), (unsigned long long)(rs.bytes_evicted >> 10));
    stk_loader_close(ld);
    stk_dataset_close(ds);
}

typedef struct resume {
    pid_t srv;
    stk__fetcher *f;
} resume;

/* Lets the server go on once the close has begun (it has told the
 * read-ahead to stop): the round in flight then lands during the close.
 * The fetcher outlives this: the close joins the read-ahead, which cannot
 * finish its round while the server is stopped. */
static void *resume_server(void *arg) {
    const resume *rs = arg;
    bool stopping = false;
    for (int i = 0; i < 10000 && !stopping; i++) {
        pthread_mutex_lock(&rs->f->mu);
        stopping = rs->f->ahead_stop;
        pthread_mutex_unlock(&rs->f->mu);
        if (!stopping) usleep(1000);
    }
    kill(rs->srv, SIGCONT);
    return NULL;
}

/* A dataset closed while its read-ahead fetches (as a loader closed
 * mid-epoch leaves it): the round lands after the close began and still
 * finds the shards' block tables, and the close waits for it.  The server
 * is stopped until the close has begun, so that the round is surely in
 * flight.  (The close once freed the tables before it stopped the
 * read-ahead: a use after free, seen under ASan.) */
static void close_while_reading_ahead(const char *url, const stk_open_options *oo, pid_t srv) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, oo, &ds, &err));
    stk__range r[16];
    size_t n = ds->nshards;
    CHECK(n <= 16 && ds->ensure_ahead);
    for (size_t i = 0; i < n; i++)
        r[i] = (stk__range){(uint32_t)i, ds->shards[i].data_off, ds->shards[i].data_end};
    CHECK(kill(srv, SIGSTOP) == 0);
    ds->ensure_ahead(ds->ensure_ctx, r, n, false);
    /* Until the read-ahead has claimed its first block: it then fetches,
     * and nothing comes back before the server goes on. */
    stk__fetcher *f = ds->ensure_ctx;
    bool flight = false;
    for (int i = 0; i < 10000 && !flight; i++) {
        pthread_mutex_lock(&f->mu);
        flight = f->sh[0].state && f->sh[0].state[0] == B_FLIGHT;
        pthread_mutex_unlock(&f->mu);
        if (!flight) usleep(1000);
    }
    if (!flight) kill(srv, SIGCONT);
    CHECK(flight);
    pthread_t t;
    resume rs = {srv, f};
    CHECK(pthread_create(&t, NULL, resume_server, &rs) == 0);
    stk_dataset_close(ds);
    pthread_join(t, NULL);
}

/* A reader that needs a block the read-ahead claimed, while every request
 * stalls (the server stopped): the read-ahead's round has a range for
 * every shard, and one connection (STOKER_REMOTE_CONNECTIONS=1) makes its
 * requests go one after another.  The read fails with STK_ETIMEOUT within
 * the deadline T plus one retry interval: the round stops at its first
 * timeout, and the reader that waited on it names that timeout instead of
 * fetching again for another T.  (The reader once waited for the round's
 * every range to time out in turn, then for its own fetch: k T + T.) */
static void stalled_round_waited_on(const char *url, const stk_open_options *oo, pid_t srv) {
    const double T = 2;
    stk_error err = {0};
    stk_open_options ot = *oo;
    ot.remote_timeout = T;
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, &ot, &ds, &err));
    size_t n = ds->nshards;
    CHECK(n >= 2 && n <= 16 && ds->ensure_ahead);
    stk__range r[16];
    for (size_t i = 0; i < n; i++)
        r[i] = (stk__range){(uint32_t)i, ds->shards[i].data_off, ds->shards[i].data_end};
    setenv("STOKER_REMOTE_CONNECTIONS", "1", 1); /* read when the round's client is made */
    CHECK(kill(srv, SIGSTOP) == 0);
    ds->ensure_ahead(ds->ensure_ctx, r, n, false);
    /* Until the read-ahead has claimed the last shard's last block: the
     * round then fetches every shard's range, the last one's last. */
    stk__fetcher *f = ds->ensure_ctx;
    const stk__shard *sh = &ds->shards[n - 1];
    uint64_t b0, b1;
    CHECK(stk__range_blocks(sh, sh->data_off, sh->data_end, &b0, &b1));
    bool flight = false;
    for (int i = 0; i < 10000 && !flight; i++) {
        pthread_mutex_lock(&f->mu);
        flight = f->sh[n - 1].state && f->sh[n - 1].state[b1] == B_FLIGHT;
        pthread_mutex_unlock(&f->mu);
        if (!flight) usleep(1000);
    }
    if (!flight) kill(srv, SIGCONT);
    CHECK(flight);
    uint64_t a, z;
    stk__block_bytes(sh, b1, &a, &z);
    stk__range need = {(uint32_t)(n - 1), a, z};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = ds->ensure(ds->ensure_ctx, &need, 1, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    kill(srv, SIGCONT);
    unsetenv("STOKER_REMOTE_CONNECTIONS");
    printf("stalled round waited on (%zu shards): %d in %.2f s: %s\n", n, rc, took, err.message);
    CHECK(rc == STK_ETIMEOUT);
    CHECK(took < T + 2); /* one retry interval (at most 1.6 s at this deadline) */
    stk_dataset_close(ds);
}

typedef struct poller {
    stk_dataset *ds;
    atomic_bool stop;
    long polls;
    bool monotonic;
} poller;

static void *poll_remote_stats(void *arg) {
    poller *p = arg;
    stk_remote_stats last = {0};
    while (!atomic_load(&p->stop)) {
        stk_remote_stats rs;
        CHECK(stk_dataset_remote_stats(p->ds, &rs) == 0);
        if (rs.requests < last.requests || rs.retries < last.retries ||
            rs.bytes_fetched < last.bytes_fetched || rs.network_seconds < last.network_seconds)
            p->monotonic = false;
        last = rs;
        p->polls++;
    }
    return NULL;
}

/* A dataset's remote statistics read by another thread while it fetches
 * (a monitoring thread calling remote_stats() during training): the
 * counts never go back.  (The clients' counters were plain fields that
 * fetches added to without a lock: a data race that ThreadSanitizer
 * reports.) */
static void stats_while_fetching(const char *url, const stk_open_options *oo) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, oo, &ds, &err));
    poller p = {ds, false, 0, true};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, poll_remote_stats, &p) == 0);
    CHECK_OK(read_all(ds));
    atomic_store(&p.stop, true);
    pthread_join(t, NULL);
    stk_remote_stats rs;
    CHECK_OK(stk_dataset_remote_stats(ds, &rs));
    CHECK(p.polls > 0 && p.monotonic);
    CHECK(rs.bytes_fetched > (3u << 20) && rs.requests > 1 + 2 * stk_dataset_num_shards(ds));
    stk_dataset_close(ds);
}

/* The served objects change (other bytes, and more) while a loader of 2 threads reads them
 * in block order through a cache budget smaller than the dataset: the
 * read fails at once with STK_ESTALE naming the change (the server sends
 * whole objects, so their new size gives it away), not with checksum
 * errors after three fetches, nor after a wait for room that the failed
 * fetches left reserved; every batch before it is right.  The objects are
 * then put back. */
static void changed_under_budget(const char *url, const char *ds_dir, const char *cache) {
    stk_error err = {0};
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.cache_dir = cache;
    oo.cache_budget = 1600 << 10; /* (as read_budgeted's) */
    oo.remote_timeout = 2;
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, &oo, &ds, &err));
    stk_loader_options lo;
    stk_loader_options_init(&lo);
    lo.batch_size = 4;
    lo.threads = 2;
    lo.order = STK_ORDER_BLOCK;
    lo.seed = 3;
    lo.block_bytes = 128 << 10;
    lo.block_group = 1;
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, &lo, &ld, &err));
    size_t n = stk_dataset_num_shards(ds);
    CHECK(n <= 16);
    char was[16][7];
    off_t mid[16];
    stk_batch *b;
    int rc, batches = 0;
    uint64_t t0 = 0;
    while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
        stk_batch_field bf;
        CHECK_OK(stk_batch_field_get(b, 0, &bf));
        const uint64_t *ids = stk_batch_samples(b);
        for (uint32_t j = 0; j < stk_batch_size(b); j++) {
            uint64_t r = ids[j];
            int64_t k = bf.offsets[j + 1] - bf.offsets[j];
            CHECK(r < NREC && k == 1 + (int64_t)(r % 64));
            CHECK(memcmp((const float *)bf.data + bf.offsets[j] * 64, rows[r % NROWS],
                         (size_t)k * 64 * 4) == 0);
        }
        stk_loader_release(ld, b);
        if (++batches == 1) {
            /* Rewritten: 7 bytes in the middle (the records), 7 more at the
             * end. */
            for (size_t i = 0; i < n && i < 16; i++) {
                char p[700];
                snprintf(p, sizeof p, "%s/shard-%06zu.stk", ds_dir, i);
                int fd = open(p, O_RDWR);
                struct stat st;
                CHECK(fd >= 0 && fstat(fd, &st) == 0);
                mid[i] = st.st_size / 2;
                CHECK(pread(fd, was[i], 7, mid[i]) == 7 && pwrite(fd, "changed", 7, mid[i]) == 7);
                CHECK(pwrite(fd, "changed", 7, st.st_size) == 7);
                close(fd);
            }
            t0 = stk__now_ns();
        }
    }
    double took = (double)(stk__now_ns() - t0) / 1e9;
    if (rc != STK_ESTALE || !strstr(err.message, "changed") || strstr(err.message, "budget"))
        fprintf(stderr, "changed under a budget: %d: %s\n", rc, err.message);
    CHECK(rc == STK_ESTALE && strstr(err.message, "changed") && !strstr(err.message, "budget"));
    CHECK(took < 4.0);
    printf("objects changed under a budget: STK_ESTALE after %d batches, %.2f s\n", batches,
           took);
    stk_loader_close(ld);
    stk_dataset_close(ds);
    for (size_t i = 0; i < n; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/shard-%06zu.stk", ds_dir, i);
        int fd = open(p, O_RDWR);
        struct stat st;
        CHECK(fd >= 0 && fstat(fd, &st) == 0 && ftruncate(fd, st.st_size - 7) == 0);
        CHECK(pwrite(fd, was[i], 7, mid[i]) == 7);
        close(fd);
    }
}

/* Which failure points the loops below try: every one under
 * STOKER_TEST_FULL=1 (make test-full, the sanitizer runs), else every
 * FAULT_STRIDE-th from an offset drawn from STOKER_TEST_SEED (or the clock),
 * printed so that a failing run can be replayed. */
#define FAULT_STRIDE 6
static long fault_stride, fault_start;

static void choose_fault_points(void) {
    const char *full = getenv("STOKER_TEST_FULL");
    if (full && *full && strcmp(full, "0") != 0) {
        fault_stride = fault_start = 1;
        printf("every failure point (STOKER_TEST_FULL)\n");
        return;
    }
    const char *s = getenv("STOKER_TEST_SEED");
    unsigned long seed = s && *s ? strtoul(s, NULL, 10) : (unsigned long)time(NULL);
    fault_stride = FAULT_STRIDE;
    fault_start = 1 + (long)(seed % FAULT_STRIDE);
    printf("every %ld-th failure point from %ld (STOKER_TEST_SEED=%lu; STOKER_TEST_FULL=1 for "
           "all)\n", fault_stride, fault_start, seed);
}

int main(void) {
    if (system("python3 -c 'import http.server' 2>/dev/null") != 0) {
        printf("skipped: no python3\n");
        return 77;
    }
    stk_error err = {0};
    test_fill(rows, sizeof rows, 5);
    const char *root = test_dir("remote-faults");
    char ds_dir[512], cache[512];
    snprintf(ds_dir, sizeof ds_dir, "%s/ds", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    mkdir(cache, 0755);
    stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 64}};
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    wo.shard_bytes = 1536 << 10; /* shards over one range: ranges cut from whole answers */
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(ds_dir, &f, 1, &wo, &w, &err));
    for (int r = 0; r < NREC; r++) {
        stk_value v = {rows[r % NROWS], 1 + (uint64_t)(r % 64)};
        CHECK_OK(stk_writer_append(w, &v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);

    int port = free_port();
    pid_t srv = fork();
    if (srv == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a failed CHECK leaves no server behind */
        char p[16];
        snprintf(p, sizeof p, "%d", port);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory",
               root, p, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && !answers(port); i++) usleep(50000);
    CHECK(answers(port));
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ds", port);
    setenv("STOKER_REMOTE_PART_MB", "1", 1);
    setenv("STOKER_REMOTE_RETRIES", "1", 1);
    setenv("STOKER_REMOTE_TIMEOUT", "10", 1);
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.cache_dir = cache;

    /* Without faults: the same records, fetched; then held. */
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open_with(url, &oo, &ds, &err));
    CHECK(stk_dataset_num_shards(ds) > 1);
    stk_remote_stats rs;
    /* Opening asked for each shard's header, then its index and block
     * table (this server answers with whole objects, cut to the ranges). */
    CHECK_OK(stk_dataset_remote_stats(ds, &rs));
    CHECK(rs.requests == 1 + 2 * stk_dataset_num_shards(ds));
    CHECK_OK(read_all(ds));
    CHECK_OK(stk_dataset_remote_stats(ds, &rs));
    CHECK(rs.bytes_fetched > (3u << 20) && rs.bytes_cached == 0);
    stk_dataset_close(ds);
    empty_cache(cache);
    stats_while_fetching(url, &oo);
    int fds0 = count_fds();

    struct {
        int kind, err;
        const char *name;
    } kinds[] = {{STK__FAULT_ALLOC, ENOMEM, "allocation"},
                 {STK__FAULT_OPEN, EIO, "open"},
                 {STK__FAULT_READ, EIO, "read"},
                 {STK__FAULT_WRITE, ENOSPC, "write"}};
    choose_fault_points();
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        long points = 0;
        for (long n = fault_start;; n += fault_stride) {
            empty_cache(cache);
            ds = NULL;
            memset(&err, 0, sizeof err);
            stk__fault_arm(kinds[k].kind, n, kinds[k].err);
            int rc = stk_dataset_open_with(url, &oo, &ds, &err);
            if (rc == 0) rc = read_all(ds); /* the blocks arrive as they are read */
            long seen = stk__fault_seen(kinds[k].kind);
            stk__fault_reset();
            if (ds) {
                /* After a failed read the blocks fetched stay good; the rest
                 * come now. */
                CHECK_OK(read_all(ds));
                stk_dataset_close(ds);
            }
            if (rc == 0) {
                if (seen < n) break;
            } else if (rc != -kinds[k].err) {
                fprintf(stderr, "%s fault %ld: got %d (%s): %s / %s\n", kinds[k].name, n, rc,
                        stk_strerror(rc), err.message, read_err.message);
                return 1;
            }
            if (count_fds() != fds0) {
                fprintf(stderr, "%s fault %ld: rc %d: %s (descriptors: %d, were %d)\n",
                        kinds[k].name, n, rc, err.message, count_fds(), fds0);
            }
            CHECK(count_fds() == fds0);
            check_cache(cache);
            points++;
        }
        printf("%s: %ld failure points tried\n", kinds[k].name, points);
    }
    /* Opening under a budget smaller than the dataset (the budget's files,
     * counts and locks): every failure point gives its error and leaves no
     * descriptor behind, and a record then reads right. */
    stk_open_options ob = oo;
    ob.cache_budget = 1536 << 10;
    for (size_t k = 0; k < 2; k++) {
        long points = 0;
        for (long n = fault_start;; n += fault_stride) {
            empty_cache(cache);
            ds = NULL;
            stk__fault_arm(kinds[k].kind, n, kinds[k].err);
            int rc = stk_dataset_open_with(url, &ob, &ds, &err);
            long seen = stk__fault_seen(kinds[k].kind);
            stk__fault_reset();
            if (rc == 0) {
                float out[4096];
                size_t len;
                CHECK_OK(stk_dataset_read(ds, 7, 0, out, sizeof out, &len, STK_READ_VERIFY, &err));
                CHECK(memcmp(out, rows[7], len) == 0);
                stk_dataset_close(ds);
                if (seen < n) break;
            } else {
                CHECK(rc == -kinds[k].err && !ds);
            }
            CHECK(count_fds() == fds0);
            points++;
        }
        printf("%s, under a budget: %ld failure points tried\n", kinds[k].name, points);
    }
    /* A cache smaller than the dataset. */
    empty_cache(cache);
    /* (2 threads and the group reader each hold a group of up to 500 KiB,
     * besides the shards' headers and indexes the cache keeps: 1556 KiB at
     * least, which the loader's open checks.) */
    read_budgeted(url, cache, 1600 << 10, STK_ORDER_RANDOM);
    read_budgeted(url, cache, 1600 << 10, STK_ORDER_BLOCK);
    empty_cache(cache);
    /* After all that, an open from a cache left as the faults left it. */
    CHECK_OK(stk_dataset_open_with(url, &oo, &ds, &err));
    CHECK_OK(read_all(ds));
    stk_dataset_close(ds);
    empty_cache(cache);
    close_while_reading_ahead(url, &oo, srv);
    CHECK(count_fds() == fds0);
    empty_cache(cache);
    stalled_round_waited_on(url, &oo, srv);
    CHECK(count_fds() == fds0);
    empty_cache(cache);
    changed_under_budget(url, ds_dir, cache);
    CHECK(count_fds() == fds0);
    kill(srv, SIGTERM);
    waitpid(srv, NULL, 0);
    return 0;
}
