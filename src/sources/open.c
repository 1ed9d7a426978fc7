/*
 * open.c: opening a path, whichever it holds: a dataset of stoker shards
 * (format/dataset.c), an in-place index of users' files (index_open.c), or
 * a URL of a dataset in an object store (remote/open.c).  The
 * dispatch lives here, above both, so that the format layer knows nothing
 * of in-place sources.  A path that holds none of these but files stoker
 * can pack or index (Parquet, .npy, WAV, HDF5, Arrow) is refused with what
 * to run, rather than with what the manifest reader made of their bytes.
 */
#define _GNU_SOURCE
#include "sources.h"
#include "../remote/remote.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void stk_open_options_init(stk_open_options *opts) {
    memset(opts, 0, sizeof *opts);
    opts->cache_budget = STK_CACHE_BUDGET_AUTO;
}

int stk_dataset_open(const char *path, stk_dataset **out, stk_error *err) {
    return stk_dataset_open_with(path, NULL, out, err);
}

/* ---- files that are data, not a dataset ---- */

enum { F_NONE, F_PARQUET, F_NPY, F_WAV, F_HDF5, F_ARROW, F_KINDS };

static const char *const kind_name[F_KINDS] = {"", "Parquet", ".npy", "WAV", "HDF5", "Arrow"};

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

static int kind_of_name(const char *name) {
    if (ends_with(name, ".parquet") || ends_with(name, ".pq")) return F_PARQUET;
    if (ends_with(name, ".npy")) return F_NPY;
    if (ends_with(name, ".wav")) return F_WAV;
    if (ends_with(name, ".h5") || ends_with(name, ".hdf5")) return F_HDF5;
    if (ends_with(name, ".arrow") || ends_with(name, ".feather")) return F_ARROW;
    return F_NONE;
}

/* A regular file's kind by its first bytes (each format's magic). */
static int kind_of_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return F_NONE;
    unsigned char b[12] = {0};
    ssize_t n = stk__pread_full(fd, b, sizeof b, 0);
    close(fd);
    if (n < 4) return F_NONE;
    if (memcmp(b, "PAR1", 4) == 0) return F_PARQUET;
    if (n >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) return F_NPY;
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WAVE", 4) == 0) return F_WAV;
    if (n >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) return F_HDF5;
    if (n >= 6 && memcmp(b, "ARROW1", 6) == 0) return F_ARROW;
    return F_NONE;
}

/* Counts the files of each kind (by name) in directory `dir` and the
 * directories right below it (a Parquet folder is often partitioned one
 * level deep: year=2020/...), at most `budget` entries in all. */
static void count_kinds(const char *dir, int depth, size_t *counts, size_t *budget) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while (*budget && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        (*budget)--;
        int k = kind_of_name(e->d_name);
        if (k != F_NONE) {
            counts[k]++;
            continue;
        }
        if (depth == 0 && (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN)) {
            char *sub = stk__path_join(dir, e->d_name);
            struct stat st;
            if (sub && stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                count_kinds(sub, 1, counts, budget);
            stk__free(sub);
        }
    }
    closedir(d);
}

/* Refuses `path`, a file (n == 0) or a directory holding n files of kind k,
 * saying what turns it into something stoker opens. */
static int foreign(const char *path, int k, size_t n, const char *also, stk_error *err) {
    char what[160];
    if (n == 0)
        snprintf(what, sizeof what, "this is %s %s file, not a stoker dataset",
                 k == F_HDF5 || k == F_ARROW ? "an" : "a", kind_name[k]);
    else
        snprintf(what, sizeof what, "this is a folder of %s files (%zu%s), not a stoker dataset",
                 kind_name[k], n, also);
    const char *it = n ? "them" : "it";
    switch (k) {
    case F_PARQUET:
        return stk__err(err, -EINVAL,
                        "%s: %s: pack %s (stoker pack --from parquet %s -o DATASET; in Python "
                        "stoker.write(\"DATASET\", stoker.parquet(\"%s\"))) and open DATASET",
                        path, what, it, path, path);
    case F_ARROW:
        return stk__err(err, -EINVAL,
                        "%s: %s: pack %s (stoker pack --from arrow %s -o DATASET) and open "
                        "DATASET",
                        path, what, it, path);
    case F_NPY:
        return stk__err(err, -EINVAL,
                        "%s: %s: index %s where %s lie%s (stoker index %s -o data.idx; in "
                        "Python stoker.index(\"%s\", \"data.idx\")) and open data.idx, or "
                        "pack %s (stoker pack --from npy %s -o DATASET)",
                        path, what, it, n ? "they" : "it", n ? "" : "s", path, path, it, path);
    case F_WAV:
        return stk__err(err, -EINVAL,
                        "%s: %s: index %s where %s lie%s (stoker index %s -o clips.idx; in "
                        "Python stoker.index(\"%s\", \"clips.idx\")) and open clips.idx",
                        path, what, it, n ? "they" : "it", n ? "" : "s", path, path);
    default:
        return stk__err(err, -EINVAL,
                        "%s: %s: index %s where %s lie%s (stoker index %s -o data.idx; in "
                        "Python stoker.index(\"%s\", \"data.idx\")) and open data.idx, or "
                        "pack %s (stoker pack --from hdf5 %s --dataset NAME -o DATASET)",
                        path, what, it, n ? "they" : "it", n ? "" : "s", path, path, it, path);
    }
}

/* After directory `path` failed to open as a dataset (rc): when it has no
 * manifest, the files it holds instead, if stoker knows them. */
static int foreign_dir(const char *path, int rc, stk_error *err) {
    char *m = stk__path_join(path, STK__MANIFEST);
    struct stat st;
    bool has_manifest = !m || stat(m, &st) == 0;
    stk__free(m);
    if (has_manifest) return rc;
    size_t counts[F_KINDS] = {0}, budget = 10000;
    count_kinds(path, 0, counts, &budget);
    int best = F_NONE;
    size_t total = 0;
    for (int k = 1; k < F_KINDS; k++) {
        total += counts[k];
        if (counts[k] > counts[best]) best = k;
    }
    if (best == F_NONE) return rc;
    char also[64] = "";
    if (total > counts[best])
        snprintf(also, sizeof also, ", and %zu of other kinds", total - counts[best]);
    return foreign(path, best, counts[best], also, err);
}

int stk_dataset_open_with(const char *path, const stk_open_options *opts, stk_dataset **out,
                          stk_error *err) {
    if (!path || !out) return stk__err(err, -EINVAL, "stk_dataset_open: NULL argument");
    *out = NULL;
    if (stk__is_remote(path)) return stk__remote_open(path, opts, out, err);
    int rc = stk__url_scheme_check(path, err);
    if (rc) return rc;
    struct stat st;
    if (stat(path, &st) != 0) {
        rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    if (S_ISREG(st.st_mode) && stk__is_index_file(path))
        return stk__index_open(path, opts ? opts->root : NULL, out, err);
    int k = S_ISREG(st.st_mode) ? kind_of_file(path) : F_NONE;
    if (k != F_NONE) return foreign(path, k, 0, "", err);
    rc = stk__dataset_open_dir(path, S_ISDIR(st.st_mode), out, err);
    if (rc == -ENOENT && S_ISDIR(st.st_mode)) rc = foreign_dir(path, rc, err);
    return rc;
}
