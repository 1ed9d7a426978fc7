/*
 * cache.c: the local cache of remote datasets.  One directory per dataset
 * version, named by the checksum of its manifest, holding the manifest, an
 * `origin` file (the URL), each shard once it is complete and checked, and
 * `<shard>.lock` files that the process fetching a shard holds (flock), so
 * that others wait for it instead of fetching it again, and `stoker cache
 * clear` leaves it alone.  A shard being fetched is `<shard>.part` until it
 * has passed its checks.
 */
#define _GNU_SOURCE
#include "remote.h"
#include "../format/format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* mkdir -p */
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return -errno;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -errno;
    return 0;
}

int stk__cache_root(const char *opt, char **out, stk_error *err) {
    *out = NULL;
    const char *env = getenv("STOKER_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char *dir = NULL;
    if (opt && *opt) dir = stk__strdup(opt);
    else if (env && *env) dir = stk__strdup(env);
    else if (xdg && *xdg) dir = stk__path_join(xdg, "stoker");
    else if (home && *home) dir = stk__path_join(home, ".cache/stoker");
    else
        return stk__err(err, -EINVAL,
                        "no cache directory: set STOKER_CACHE_DIR (or HOME), or pass one");
    if (!dir) return stk__err(err, -ENOMEM, "out of memory");
    int rc = make_dirs(dir);
    if (rc) {
        stk__err(err, rc, "%s: cannot make the cache directory: %s", dir, stk_strerror(rc));
        stk__free(dir);
        return rc;
    }
    *out = dir;
    return 0;
}

uint64_t stk__cache_room(const char *dir) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return 0;
    uint64_t free_b = (uint64_t)v.f_bavail * v.f_frsize;
    uint64_t reserve = (uint64_t)v.f_blocks * v.f_frsize / 20;
    return free_b > reserve ? free_b - reserve : 0;
}

uint64_t stk__cache_du(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        /* A whole shard is a second name of its .part file: counted once. */
        size_t n = strlen(e->d_name);
        if (st.st_nlink > 1 && n > 5 && strcmp(e->d_name + n - 5, ".part") == 0) continue;
        total += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return total;
}

/* Whether some process holds a lock file of dataset directory `dir`. */
static bool busy(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool held = false;
    struct dirent *e;
    while (!held && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) held = true;
        close(fd);
    }
    closedir(d);
    return held;
}

static int64_t wall_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int stk__flock_alive(int fd, int64_t limit_ns, bool (*give_up)(void *ctx), void *ctx,
                     int64_t *silent_ns) {
    int64_t alive = wall_ns(); /* waiting began */
    useconds_t nap = 2000;
    *silent_ns = 0;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) return -errno;
        if (give_up && give_up(ctx)) return 1;
        struct stat st;
        if (fstat(fd, &st) == 0) {
            int64_t m = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
            if (m > alive) alive = m;
        }
        *silent_ns = wall_ns() - alive;
        if (*silent_ns > limit_ns) return 1;
        usleep(nap);
        if (nap < 50000) nap *= 2;
    }
    return 0;
}

typedef int (*entry_fn)(void *ctx, const stk_cache_entry *e);

/* Describes dataset directory `path` named `key` into *e (strings
 * borrowed from the buffers given).  Returns 0, or 1 when it is not one. */
static int describe(const char *path, const char *key, char **origin, stk_cache_entry *e) {
    char *op = stk__path_join(path, "origin");
    char *mp = stk__path_join(path, STK__MANIFEST);
    char *mtext = NULL;
    size_t olen = 0, mlen = 0;
    int rc = 1;
    stk__manifest m;
    memset(&m, 0, sizeof m);
    if (op && mp && stk__read_file(op, origin, &olen) == 0 &&
        stk__read_file(mp, &mtext, &mlen) == 0 &&
        stk__manifest_parse(mtext, mlen, mp, &m, NULL) == 0) {
        memset(e, 0, sizeof *e);
        e->key = key;
        e->origin = *origin;
        e->path = path;
        e->bytes = stk__cache_du(path);
        e->shards = (uint32_t)m.nshards;
        for (size_t i = 0; i < m.nshards; i++) {
            char *sp = stk__path_join(path, m.shards[i].file);
            struct stat st;
            if (sp && stat(sp, &st) == 0 && (uint64_t)st.st_size == m.shards[i].bytes)
                e->shards_held++;
            stk__free(sp);
        }
        rc = 0;
    }
    stk__manifest_clear(&m);
    stk__free(mtext);
    stk__free(op);
    stk__free(mp);
    return rc;
}

/* Calls fn(ctx, entry) for each dataset directory of the cache. */
static int walk(const char *cache_dir, entry_fn fn, void *ctx, stk_error *err) {
    char *root = NULL;
    int rc = stk__cache_root(cache_dir, &root, err);
    if (rc) return rc;
    DIR *d = opendir(root);
    if (!d) {
        rc = -errno;
        stk__err(err, rc, "%s: %s", root, stk_strerror(rc));
        stk__free(root);
        return rc;
    }
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *path = stk__path_join(root, de->d_name);
        char *origin = NULL;
        stk_cache_entry e;
        if (!path) rc = stk__err(err, -ENOMEM, "out of memory");
        else if (describe(path, de->d_name, &origin, &e) == 0) rc = fn(ctx, &e);
        stk__free(origin);
        stk__free(path);
    }
    closedir(d);
    stk__free(root);
    return rc;
}

int stk_cache_list(const char *cache_dir, int (*fn)(void *ctx, const stk_cache_entry *e),
                   void *ctx, stk_error *err) {
    if (!fn) return stk__err(err, -EINVAL, "stk_cache_list: NULL callback");
    return walk(cache_dir, fn, ctx, err);
}

typedef struct clear_job {
    const char *origin;
    uint64_t bytes;
} clear_job;

static int remove_entry(void *ctx, const stk_cache_entry *e) {
    clear_job *j = ctx;
    if (j->origin && strcmp(j->origin, e->origin) != 0) return 0;
    if (busy(e->path)) return 0; /* being fetched: left alone */
    DIR *d = opendir(e->path);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' || (de->d_name[1] && strcmp(de->d_name, "..") != 0))
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    if (rmdir(e->path) == 0) j->bytes += e->bytes;
    return 0;
}

/* The node's copies of manifests (open.c), by URL: cleared with everything
 * (their lock files stay, as a dataset directory's do while busy). */
static void forget_manifests(const char *cache_dir) {
    char *root = NULL;
    if (stk__cache_root(cache_dir, &root, NULL)) return;
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n == 18 && strncmp(de->d_name, "m-", 2) == 0) unlinkat(dirfd(d), de->d_name, 0);
    }
    if (d) closedir(d);
    stk__free(root);
}

int stk_cache_clear(const char *cache_dir, const char *origin, uint64_t *bytes, stk_error *err) {
    clear_job j = {origin, 0};
    if (bytes) *bytes = 0;
    int rc = walk(cache_dir, remove_entry, &j, err);
    if (rc == 0 && !origin) forget_manifests(cache_dir);
    if (bytes) *bytes = j.bytes;
    return rc;
}
