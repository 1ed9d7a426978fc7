/*
 * dir.c: a dataset's directory as writers see it: which of its files are
 * stoker's (by name, then by content), the locks that keep one writer at
 * a time, clearing an old or interrupted pack's files, and publishing a
 * manifest (atomically, last).
 */
#define _GNU_SOURCE
#include "format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

bool stk__is_stoker_file(const char *name) {
    size_t n = strlen(name);
    if (strcmp(name, STK__MANIFEST) == 0) return true;
    if (strncmp(name, ".packing", 8) == 0) return true;
    if (n > 4 && strcmp(name + n - 4, STK__SHARD_EXT) == 0) return true;
    if (strncmp(name, "part-", 5) == 0 && n > 5 && strcmp(name + n - 5, ".json") == 0)
        return true;
    return false;
}

int stk__mkdir_p(const char *path) {
    char *p = stk__strdup(path);
    if (!p) return -ENOMEM;
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                rc = -errno;
                break;
            }
            *s = c;
            if (!c) break;
        }
    }
    stk__free(p);
    if (rc == 0) {
        struct stat st;
        if (stat(path, &st) != 0) return -errno;
        if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    }
    return rc;
}

bool stk__exists_in(const char *dir, const char *name) {
    char *p = stk__path_join(dir, name);
    struct stat st;
    bool e = p && stat(p, &st) == 0;
    stk__free(p);
    return e;
}

/* ---- what in a directory is ours ---- */


static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Whether entry `name` of directory fd `dfd` is a file stoker wrote: a
 * regular file (never a link, a directory or a pipe) whose contents say so
 * (a shard's magic, a manifest that parses, our journal), or one of our
 * lock files and temporary files.  A user's own manifest.json, notes.stk
 * or part-7.json is not. */
int stk__is_ours(int dfd, const char *name) {
    struct stat st;
    /* Gone since the directory was listed (another part's writer finished
     * and removed its marker, parts running at once in one directory):
     * nothing there to keep. */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
    if (!S_ISREG(st.st_mode)) return 0;
    if (!strcmp(name, STK__LOCK_NAME) || (starts_with(name, ".stoker-part-") && strstr(name, ".lock")))
        return 1;
    if (name[0] == '.' && strstr(name, ".tmp.")) return 1; /* our atomic writes' */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT;
    int ours = 0;
    size_t n = strlen(name);
    char head[32] = {0};
    ssize_t got = pread(fd, head, sizeof head - 1, 0);
    if (n > 4 && !strcmp(name + n - 4, STK__SHARD_EXT)) {
        /* A shard cut short right after its creation may hold only part
         * of the magic, or nothing: nothing of anyone's is lost with it. */
        ours = got >= 0 && memcmp(head, STK__MAGIC, (size_t)(got < 8 ? got : 8)) == 0;
    } else if (starts_with(name, ".packing")) {
        ours = got > 0 && starts_with(head, "stoker pack in progress");
    } else if (!strcmp(name, STK__MANIFEST) || (starts_with(name, "part-") && n > 5 &&
                                                !strcmp(name + n - 5, ".json"))) {
        if (st.st_size > 0 && st.st_size < (64 << 20)) {
            char *text = stk__malloc((size_t)st.st_size + 1);
            stk__manifest m;
            memset(&m, 0, sizeof m);
            int prc = -ENOMEM;
            if (text && pread(fd, text, (size_t)st.st_size, 0) == st.st_size)
                prc = stk__manifest_parse(text, (size_t)st.st_size, name, &m, NULL);
            if (prc == 0) {
                ours = 1;
                stk__manifest_clear(&m);
            } else if (prc == -ENOMEM) {
                ours = -ENOMEM; /* cannot tell */
            }
            stk__free(text);
        }
    }
    close(fd);
    return ours;
}

/* Refuses to replace anything in `dir` that stoker did not write: with
 * `prefix` "" every entry of the directory must be ours (replacing a
 * dataset takes the whole directory); with a part's prefix, only the
 * files that part would remove. */
int stk__check_replaceable(const char *dir, const char *prefix, const char *part_manifest,
                             stk_error *err) {
    DIR *d = opendir(dir);
    if (!d) return stk__err(err, -errno, "%s: %s", dir, stk_strerror(-errno));
    char list[512] = "";
    size_t used = 0, nforeign = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (*prefix && !starts_with(e->d_name, prefix) &&
            !(part_manifest && !strcmp(e->d_name, part_manifest)))
            continue;
        int ours = stk__is_ours(dirfd(d), e->d_name);
        if (ours < 0) {
            closedir(d);
            return stk__err(err, ours, "%s: %s", dir, stk_strerror(ours));
        }
        if (ours) continue;
        if (nforeign++ < 6 && used < sizeof list - 80)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                                     e->d_name);
    }
    closedir(d);
    if (!nforeign) return 0;
    return stk__err(err, -EEXIST,
                    "%s: holds %zu file%s stoker did not write (%s%s); replacing a dataset "
                    "removes only a dataset's own files, so move them away or write the "
                    "dataset elsewhere",
                    dir, nforeign, nforeign == 1 ? "" : "s", list, nforeign > 6 ? ", ..." : "");
}

/* What a foreign entry of a directory is, for a refusal: a user's file at
 * one of stoker's names is told apart from stoker's own. */
static const char *foreign_kind(int dfd, const char *name) {
    struct stat st;
    size_t n = strlen(name);
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
    if (S_ISDIR(st.st_mode)) return "/";
    if (!S_ISREG(st.st_mode)) return " (not a regular file)";
    if (!strcmp(name, STK__MANIFEST) || (starts_with(name, "part-") && n > 5 &&
                                         !strcmp(name + n - 5, ".json")))
        return " (not a stoker manifest)";
    if (n > 4 && !strcmp(name + n - 4, STK__SHARD_EXT)) return " (not a stoker shard)";
    return "";
}

int stk__check_writable_dir(const char *dir, stk_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        /* None yet, or not a directory: creating it says which. */
        if (e == ENOENT || e == ENOTDIR) return 0;
        return stk__err(err, -e, "%s: %s", dir, stk_strerror(-e));
    }
    char list[400] = "";
    size_t used = 0, nforeign = 0, nours = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int ours = stk__is_ours(dirfd(d), e->d_name);
        if (ours < 0) {
            closedir(d);
            return stk__err(err, ours, "%s: %s", dir, stk_strerror(ours));
        }
        if (ours) {
            nours++;
            continue;
        }
        if (nforeign++ < 6 && used < sizeof list - 100)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s%s", used ? ", " : "",
                                     e->d_name, foreign_kind(dirfd(d), e->d_name));
    }
    closedir(d);
    if (!nforeign) return 0;
    const char *more = nforeign > 6 ? ", ..." : "", *s = nforeign == 1 ? "" : "s";
    if (nours)
        return stk__err(err, -EEXIST,
                        "%s: holds %zu file%s stoker did not write (%s%s) beside a dataset's "
                        "own; stoker replaces only a directory of its own files and will not "
                        "touch these: move them away or write the dataset elsewhere",
                        dir, nforeign, s, list, more);
    return stk__err(err, -EEXIST,
                    "%s: not a stoker dataset: it holds %zu file%s stoker did not write (%s%s); "
                    "stoker writes a dataset only into a new or empty directory or over a "
                    "stoker dataset, and will not touch these: write the dataset elsewhere",
                    dir, nforeign, s, list, more);
}

/* Takes `name` in dir for this writer: exclusive (LOCK_EX) or shared; a
 * writer already holding it makes this fail at once.  The lock file stays
 * (empty): removing it would let two writers lock two different files. */
int stk__take_lock(const char *dir, const char *name, bool exclusive, int *out,
                     stk_error *err) {
    char *p = stk__path_join(dir, name);
    if (!p) return stk__err(err, -ENOMEM, "out of memory");
    int fd = stk__open(p, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
    stk__free(p);
    if (fd < 0)
        return stk__err(err, fd, "%s: cannot open its lock %s: %s", dir, name, stk_strerror(fd));
    if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e != EWOULDBLOCK)
            return stk__err(err, -e, "%s: cannot lock %s: %s", dir, name, stk_strerror(-e));
        return stk__err(err, -EBUSY,
                        "%s: another writer is writing this dataset (it holds %s); wait for "
                        "it to finish (two writers at once would leave a damaged dataset)",
                        dir, name);
    }
    *out = fd;
    return 0;
}

/* Removes the stoker files of `dir` whose names start with `prefix` (all of
 * them when prefix is ""), except `keep`.  Returns how many remain that
 * would have matched, or a negated errno. */
int stk__remove_files(const char *dir, const char *prefix, bool only_count) {
    DIR *d = opendir(dir);
    if (!d) return -errno;
    int count = 0, rc = 0;
    struct dirent *e;
    size_t plen = strlen(prefix);
    while ((e = readdir(d)) != NULL) {
        if (!stk__is_stoker_file(e->d_name)) continue;
        if (plen && strncmp(e->d_name, prefix, plen) != 0) continue;
        if (only_count) {
            count++;
            continue;
        }
        if (stk__is_ours(dirfd(d), e->d_name) != 1) continue; /* refused before, by check_replaceable */
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT) {
            rc = -errno;
            break;
        }
    }
    closedir(d);
    return rc ? rc : count;
}

int stk__publish(const char *dir, const char *name, const stk__manifest *m,
                   bool sync, stk_error *err) {
    char *text = NULL;
    size_t len = 0;
    int rc = stk__manifest_dump(m, &text, &len, err);
    if (rc) return rc;
    rc = stk__write_file_atomic(dir, name, text, len, sync);
    stk__free(text);
    if (rc)
        return stk__err(err, rc, "%s: cannot write %s: %s", dir, name, stk_strerror(rc));
    return 0;
}

