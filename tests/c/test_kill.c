/* The packer killed with SIGKILL at random moments, 60 times (half of them
 * while replacing a complete dataset): every survivor either opens and
 * verifies with exactly the records of one complete pack, or reports itself
 * incomplete.  Never a dataset that opens as complete and differs. */
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NREC 3000

static uint64_t resumed_from; /* records the resumed writer found done */

static int pack_opts(const char *dir, int overwrite, int variant, int resume) {
    stk_error err = {0};
    stk_field f = {.name = "x", .dtype = STK_U32, .ndim = 1, .shape = {STK_RAGGED}};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 64 << 10;
    o.overwrite = overwrite;
    o.resume = resume;
    stk_writer *w = NULL;
    int rc = stk_writer_create(dir, &f, 1, &o, &w, &err);
    uint64_t first = rc == 0 ? stk_writer_num_records(w) : 0;
    resumed_from = first;
    uint32_t v[64];
    for (uint64_t r = first; rc == 0 && r < NREC; r++) {
        for (int k = 0; k < 64; k++) v[k] = (uint32_t)(r * 64 + (uint64_t)k) ^ (uint32_t)variant;
        stk_value val = {v, 1 + r % 64};
        rc = stk_writer_append(w, &val, &err);
    }
    if (rc == 0) rc = stk_writer_finish(w, &err);
    if (rc) fprintf(stderr, "pack: %s\n", err.message);
    stk_writer_free(w);
    return rc;
}

static int pack(const char *dir, int overwrite, int variant) {
    return pack_opts(dir, overwrite, variant, 0);
}

/* 0: incomplete; otherwise the variant (1 or 2) the complete dataset holds. */
static int survivor(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(dir, &ds, &err);
    if (rc) {
        if (rc != STK_EINCOMPLETE && rc != -ENOENT) {
            fprintf(stderr, "survivor: %d %s\n", rc, err.message);
            exit(1);
        }
        return 0;
    }
    CHECK(stk_dataset_num_records(ds) == NREC);
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    uint32_t out[64];
    size_t len;
    CHECK_OK(stk_dataset_read(ds, 0, 0, out, sizeof out, &len, 0, &err));
    int variant = (int)(out[0] ^ 0u);
    for (uint64_t r = 1; r < NREC; r += 97) {
        CHECK_OK(stk_dataset_read(ds, r, 0, out, sizeof out, &len, 0, &err));
        CHECK(len == (1 + r % 64) * 4);
        for (size_t k = 0; k < len / 4; k++)
            CHECK((out[k] ^ (uint32_t)variant) == (uint32_t)(r * 64 + k));
    }
    stk_dataset_close(ds);
    return variant;
}

int main(void) {
    srand((unsigned)time(NULL));
    int complete = 0, incomplete = 0;
    for (int i = 0; i < 60; i++) {
        char name[32];
        snprintf(name, sizeof name, "kill-%d", i);
        const char *dir = test_dir(name);
        int replace = i % 2;
        if (replace) CHECK(pack(dir, 0, 1) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(pack(dir, replace, 2) == 0 ? 0 : 3);
        usleep((useconds_t)(rand() % 8000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        int v = survivor(dir);
        if (v == 0) incomplete++;
        else {
            complete++;
            /* A replaced dataset holds the old data whole or the new whole. */
            CHECK(v == 2 || (replace && v == 1));
        }
        test_rmrf(dir);
    }
    printf("60 kills: %d survivors complete and verified, %d reported incomplete\n", complete,
           incomplete);

    /* Resume: kill a pack, then take it up again; the result equals one
     * uninterrupted pack, and durable shards were kept, not redone. */
    int kept_work = 0, resumed = 0;
    for (int i = 0; i < 20; i++) {
        const char *dir = test_dir("kill-resume");
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(pack(dir, 0, 2) == 0 ? 0 : 3);
        usleep((useconds_t)(rand() % 8000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (survivor(dir) == 0) { /* interrupted: take it up */
            CHECK(pack_opts(dir, 0, 2, 1) == 0);
            kept_work += resumed_from > 0;
            resumed++;
        }
        CHECK(survivor(dir) == 2);
        test_rmrf(dir);
    }
    printf("20 killed packs, %d resumed: all equal an uninterrupted pack; %d kept earlier "
           "shards\n", resumed, kept_work);
    return 0;
}
