/*
 * test_incomplete: a pack that did not finish never reads as a dataset.
 *
 * A writer freed without finish, and a process killed (SIGKILL) at several
 * moments while appending, both leave a directory that opens as
 * STK_EINCOMPLETE with a message saying so.  A process killed around finish
 * leaves either the complete dataset or an incomplete one, never anything
 * else.  An existing complete dataset is refused (-EEXIST) without
 * overwrite and survives intact; with overwrite it is replaced.  A directory
 * without stoker files is not a dataset (-ENOENT).
 */
#include "util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const stk_field schema[2] = {
    {.name = "n", .dtype = STK_I64, .ndim = 0},
    {.name = "payload", .dtype = STK_U8, .ndim = 1, .shape = {STK_RAGGED}},
};

static void append_n(stk_writer *w, int64_t first, int64_t count) {
    stk_error err = {0};
    uint8_t payload[700];
    for (int64_t r = first; r < first + count; r++) {
        test_fill(payload, sizeof payload, (uint64_t)r);
        stk_value v[2] = {{&r, 1}, {payload, (uint64_t)(r % 700)}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
}

static void write_dataset(const char *dir, int64_t count, int overwrite) {
    stk_error err = {0};
    stk_writer_options o;
    stk_writer_options_init(&o);
    o.shard_bytes = 16384;
    o.overwrite = overwrite;
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, schema, 2, &o, &w, &err));
    append_n(w, 0, count);
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
}

/* Opens, checks the record count and the first field of every record, and
 * verifies. */
static void check_complete(const char *dir, uint64_t count) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == count);
    for (uint64_t r = 0; r < count; r++) {
        int64_t n = -1;
        size_t len;
        CHECK_OK(stk_dataset_read(ds, r, 0, &n, sizeof n, &len, STK_READ_VERIFY, &err));
        CHECK(n == (int64_t)r);
    }
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_dataset_close(ds);
}

static void check_incomplete(const char *dir) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, "incomplete");
    CHECK(ds == NULL);
    CHECK(strstr(err.message, dir) != NULL);
}

/* Counts the shard files (*.stk) in a directory. */
static int count_shards(const char *dir) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | grep -c '\\.stk$'", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    int n = -1;
    CHECK(fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

static void freed_without_finish(void) {
    stk_error err = {0};
    /* With records written, and with none at all. */
    for (int64_t count = 0; count <= 300; count += 300) {
        const char *dir = test_dir("incomplete-freed");
        stk_writer_options o;
        stk_writer_options_init(&o);
        o.shard_bytes = 16384;
        stk_writer *w = NULL;
        CHECK_OK(stk_writer_create(dir, schema, 2, &o, &w, &err));
        append_n(w, 0, count);
        stk_writer_free(w);
        check_incomplete(dir);
        if (count) CHECK(count_shards(dir) > 1); /* finished shards were left */

        /* A new pack there is refused: it holds an interrupted one. */
        w = (stk_writer *)&err;
        CHECK_ERR(stk_writer_create(dir, schema, 2, NULL, &w, &err), -EEXIST, dir);
        CHECK(w == NULL);
        check_incomplete(dir);
        /* With overwrite it is replaced, leftovers and all. */
        write_dataset(dir, 5, 1);
        check_complete(dir, 5);
        CHECK(count_shards(dir) == 1);
        test_rmrf(dir);
    }
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/*
 * Runs a child that packs into `dir` and kills it `delay_ms` after it has
 * created its writer.  With `finish_after` > 0 the child finishes after that
 * many records (and then waits to be killed); otherwise it appends until it
 * is killed.
 */
static void pack_and_kill(const char *dir, long delay_ms, int64_t finish_after, int sync) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        stk_error err = {0};
        stk_writer_options o;
        stk_writer_options_init(&o);
        o.shard_bytes = 8192;
        o.sync = sync;
        stk_writer *w = NULL;
        if (stk_writer_create(dir, schema, 2, &o, &w, &err) != 0) _exit(3);
        if (write(fds[1], "x", 1) != 1) _exit(4);
        uint8_t payload[700];
        int64_t limit = finish_after > 0 ? finish_after : 200000;
        for (int64_t r = 0; r < limit; r++) {
            test_fill(payload, sizeof payload, (uint64_t)r);
            stk_value v[2] = {{&r, 1}, {payload, (uint64_t)(r % 700)}};
            if (stk_writer_append(w, v, &err) != 0) _exit(5);
        }
        if (finish_after > 0 && stk_writer_finish(w, &err) != 0) _exit(6);
        for (;;) pause();
    }
    close(fds[1]);
    char c;
    CHECK(read(fds[0], &c, 1) == 1); /* the writer exists */
    close(fds[0]);
    sleep_ms(delay_ms);
    CHECK(kill(pid, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL); /* killed, no error */
}

static void killed_while_appending(void) {
    const long delays[] = {0, 1, 3, 10, 25, 60};
    for (size_t k = 0; k < sizeof delays / sizeof delays[0]; k++) {
        const char *dir = test_dir("incomplete-killed");
        pack_and_kill(dir, delays[k], 0, (int)(k % 2));
        check_incomplete(dir);
        stk_error err = {0};
        stk_writer *w = NULL;
        CHECK_ERR(stk_writer_create(dir, schema, 2, NULL, &w, &err), -EEXIST, dir);
        write_dataset(dir, 50, 1);
        check_complete(dir, 50);
        test_rmrf(dir);
    }
}

/* Killed around finish: complete with every record, or incomplete. */
static void killed_around_finish(void) {
    const long delays[] = {0, 1, 2, 4, 8, 16, 30};
    int complete = 0;
    for (size_t k = 0; k < sizeof delays / sizeof delays[0]; k++) {
        const char *dir = test_dir("incomplete-finish");
        pack_and_kill(dir, delays[k], 400, 1);
        stk_error err = {0};
        stk_dataset *ds = NULL;
        int rc = stk_dataset_open(dir, &ds, &err);
        stk_dataset_close(ds);
        if (rc == 0) {
            check_complete(dir, 400);
            complete++;
        } else {
            CHECK_ERR(stk_dataset_open(dir, &ds, &err), STK_EINCOMPLETE, "incomplete");
        }
        test_rmrf(dir);
    }
    printf("killed around finish: %d of %zu complete\n", complete,
           sizeof delays / sizeof delays[0]);
}

static void existing_dataset(void) {
    stk_error err = {0};
    const char *dir = test_dir("incomplete-exists");
    write_dataset(dir, 100, 0);
    check_complete(dir, 100);
    int before = count_shards(dir);

    /* Without overwrite: refused, and the dataset is untouched. */
    stk_writer *w = (stk_writer *)&err;
    CHECK_ERR(stk_writer_create(dir, schema, 2, NULL, &w, &err), -EEXIST, dir);
    CHECK(w == NULL);
    check_complete(dir, 100);
    CHECK(count_shards(dir) == before);
    /* Even with a different schema. */
    stk_field other = {.name = "z", .dtype = STK_F64, .ndim = 0};
    CHECK_ERR(stk_writer_create(dir, &other, 1, NULL, &w, &err), -EEXIST, dir);
    check_complete(dir, 100);

    /* With overwrite: replaced by the new one. */
    write_dataset(dir, 7, 1);
    check_complete(dir, 7);
    CHECK(count_shards(dir) == 1);
    test_rmrf(dir);
}

static void not_a_dataset(void) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    const char *dir = test_dir("incomplete-none");
    /* Does not exist. */
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), -ENOENT, dir);
    /* Exists, empty. */
    CHECK(mkdir(dir, 0755) == 0);
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), -ENOENT, dir);
    /* Holds files, none of them stoker's. */
    char p[4200];
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    test_write_file(p, "hello\n", 6);
    snprintf(p, sizeof p, "%s/data.bin", dir);
    test_write_file(p, "\0\1\2", 3);
    CHECK_ERR(stk_dataset_open(dir, &ds, &err), -ENOENT, dir);
    CHECK(ds == NULL);
    test_rmrf(dir);
}

int main(void) {
    freed_without_finish();
    killed_while_appending();
    killed_around_finish();
    existing_dataset();
    not_a_dataset();
    return 0;
}
