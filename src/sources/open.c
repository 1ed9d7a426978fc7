/*
 * open.c: opening a path, whichever it holds: a dataset of stoker shards
 * (format/dataset.c), an in-place index of users' files (index_open.c), or
 * a URL of a dataset in an object store (remote/open.c).  The
 * dispatch lives here, above both, so that the format layer knows nothing
 * of in-place sources.
 */
#include "sources.h"
#include "../remote/remote.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

void stk_open_options_init(stk_open_options *opts) {
    memset(opts, 0, sizeof *opts);
    opts->cache_budget = STK_CACHE_BUDGET_AUTO;
}

int stk_dataset_open(const char *path, stk_dataset **out, stk_error *err) {
    return stk_dataset_open_with(path, NULL, out, err);
}

int stk_dataset_open_with(const char *path, const stk_open_options *opts, stk_dataset **out,
                          stk_error *err) {
    if (!path || !out) return stk__err(err, -EINVAL, "stk_dataset_open: NULL argument");
    *out = NULL;
    if (stk__is_remote(path)) return stk__remote_open(path, opts, out, err);
    struct stat st;
    if (stat(path, &st) != 0) {
        int rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    if (S_ISREG(st.st_mode) && stk__is_index_file(path))
        return stk__index_open(path, opts ? opts->root : NULL, out, err);
    return stk__dataset_open_dir(path, S_ISDIR(st.st_mode), out, err);
}
