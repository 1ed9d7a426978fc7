/*
 * open.c: opening a remote dataset.  The manifest is fetched; the shards the
 * cache does not hold are locked (so that other processes wait instead of
 * fetching them too), pinned (a HEAD gives each object's ETag and size),
 * fetched in ranges of 8 MiB with every response checked against the pin,
 * checked whole (header, index, every block) and only then given their
 * names; a shard that fails its checks is fetched again, three times at
 * most.  The dataset is then opened from the cache directory like a local
 * one.
 */
#define _GNU_SOURCE
#include "remote.h"
#include "../core/hash.h"
#include "../format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHARD_TRIES 3

typedef struct shard_job {
    size_t i;       /* manifest entry */
    char *url;      /* the object */
    char *name;     /* the object as the dataset URL names it, for messages */
    char *final;    /* its path in the cache */
    char *part;     /* while it is fetched */
    int lock_fd;    /* held while this process fetches it */
    char pin[128];  /* ETag, or size and Last-Modified */
    bool done;
} shard_job;

typedef struct remote {
    stk__url url;
    stk__aws aws;
    bool have_aws;
    stk__http *http;
    char *dir; /* the dataset's cache directory */
    stk__manifest m;
    uint64_t cached;
    int64_t timeout_s;
    uint64_t part; /* bytes per range request */
} remote;

static bool size_is(const char *path, uint64_t bytes) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == bytes;
}

/* When the machine booted (seconds since the epoch), or 0. */
static int64_t boot_time(void) {
    FILE *f = fopen("/proc/stat", "re");
    if (!f) return 0;
    char line[256];
    long long bt = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &bt) == 1) break;
    fclose(f);
    return bt;
}

/* Whether the cache holds shard i whole and checked.  Shards are named once
 * checked, but not synced to disk (syncing cost a third of the fetch rate):
 * one written before the machine last booted may have lost pages in a crash,
 * so it is checked again, once (its time is then set to now); one that
 * fails is removed, to be fetched again. */
static bool held(const char *path, const stk__manifest *m, size_t i) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != m->shards[i].bytes)
        return false;
    static int64_t boot = -1;
    if (boot < 0) boot = boot_time();
    if ((int64_t)st.st_mtim.tv_sec >= boot) return true;
    stk_error e;
    if (stk__shard_check(path, m, i, &e) != 0) {
        unlink(path);
        return false;
    }
    utimensat(AT_FDCWD, path, NULL, 0);
    return true;
}

/* Fetches the manifest; *text from stk__malloc. */
static int fetch_manifest(remote *r, char **text, size_t *len, char **murl, stk_error *err) {
    *murl = stk__url_object(&r->url, r->have_aws ? &r->aws : NULL, STK__MANIFEST);
    if (!*murl) return stk__err(err, -ENOMEM, "out of memory");
    stk__fetch f;
    memset(&f, 0, sizeof f);
    char *name = NULL;
    if (asprintf(&name, "%s/%s", r->url.text, STK__MANIFEST) < 0) name = NULL;
    f.url = *murl;
    f.what = name;
    f.fd = -1;
    int rc = stk__http_run(r->http, &f, 1, err);
    free(name);
    if (rc == -ENOENT && err)
        stk__err(err, -ENOENT, "%s: no dataset there (its manifest, %s, is not found)",
                 r->url.text, *murl);
    if (rc) {
        stk__free(f.mem);
        return rc;
    }
    if (!f.mem) {
        f.mem = stk__malloc(1);
        if (!f.mem) return stk__err(err, -ENOMEM, "out of memory");
        f.mem[0] = '\0';
    }
    *text = (char *)f.mem;
    *len = f.mem_len;
    return 0;
}

/* Pins each job's object: its size must be the manifest's. */
static int pin(remote *r, shard_job *js, size_t n, stk_error *err) {
    stk__fetch *f = stk__calloc(n ? n : 1, sizeof *f);
    if (!f) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        f[k].url = js[k].url;
        f[k].what = js[k].name;
        f[k].head = true;
        f[k].fd = -1;
    }
    int rc = stk__http_run(r->http, f, n, err);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        uint64_t want = r->m.shards[js[k].i].bytes;
        if (f[k].object_size != UINT64_MAX && f[k].object_size != want)
            rc = stk__err(err, STK_EMISMATCH,
                          "%s: the object has %" PRIu64 " bytes; the dataset's manifest says "
                          "%" PRIu64 ": it was replaced after the manifest was written",
                          js[k].name, f[k].object_size, want);
        snprintf(js[k].pin, sizeof js[k].pin, "%s", f[k].etag);
    }
    stk__free(f);
    return rc;
}

/* Fetches the jobs not done into their .part files and checks them; those
 * that pass get their names.  Returns 0 when all passed, else the last
 * check's error (the jobs that failed stay not done) or a fetch error. */
static int fetch_round(remote *r, shard_job *js, size_t n, stk_error *err) {
    size_t nparts = 0;
    for (size_t k = 0; k < n; k++)
        if (!js[k].done) nparts += (r->m.shards[js[k].i].bytes + r->part - 1) / r->part;
    stk__fetch *f = stk__calloc(nparts ? nparts : 1, sizeof *f);
    int *fds = stk__calloc(n ? n : 1, sizeof *fds);
    if (!f || !fds) {
        stk__free(f);
        stk__free(fds);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    int rc = 0;
    size_t p = 0;
    for (size_t k = 0; k < n; k++) fds[k] = -1;
    for (size_t k = 0; k < n; k++) {
        if (js[k].done) continue;
        uint64_t bytes = r->m.shards[js[k].i].bytes;
        fds[k] = stk__open(js[k].part, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
        if (fds[k] < 0) {
            rc = fds[k];
            fds[k] = -1;
            stk__err(err, rc, "%s: %s", js[k].part, stk_strerror(rc));
            goto out;
        }
        for (uint64_t lo = 0; lo < bytes; lo += r->part, p++) {
            f[p].url = js[k].url;
            f[p].what = js[k].name;
            f[p].lo = lo;
            f[p].hi = lo + r->part < bytes ? lo + r->part : bytes;
            f[p].fd = fds[k];
            f[p].fd_off = lo;
            f[p].want_etag = js[k].pin;
        }
    }
    if ((rc = stk__http_run(r->http, f, p, err))) goto out;
    for (size_t k = 0; k < n; k++) {
        if (js[k].done) continue;
        /* Not synced: see held() for what a crash may leave. */
        close(fds[k]);
        fds[k] = -1;
        stk_error e;
        int c = stk__shard_check(js[k].part, &r->m, js[k].i, &e);
        if (c) {
            rc = c;
            if (err) {
                *err = e;
                stk__err_prefix(err, "%s: ", js[k].name);
            }
            continue;
        }
        if (rename(js[k].part, js[k].final) != 0) {
            rc = -errno;
            stk__err(err, rc, "%s: %s", js[k].final, stk_strerror(rc));
            goto out;
        }
        js[k].done = true;
    }
out:
    for (size_t k = 0; k < n; k++)
        if (fds[k] >= 0) close(fds[k]);
    stk__free(fds);
    stk__free(f);
    return rc;
}

static bool damage(int rc) {
    return rc == STK_ECHECKSUM || rc == STK_ECORRUPT || rc == STK_ETRUNCATED ||
           rc == STK_EBADMAGIC || rc == STK_EMISMATCH || rc == STK_EBOUNDS;
}

/* Fetches the jobs this process holds the locks of. */
static int fetch_mine(remote *r, shard_job *js, size_t n, stk_error *err) {
    if (n == 0) return 0;
    int rc = pin(r, js, n, err);
    for (int t = 0; rc == 0 && t < SHARD_TRIES; t++) {
        rc = fetch_round(r, js, n, err);
        if (rc == 0 || !damage(rc)) break;
        if (t + 1 < SHARD_TRIES) rc = 0;
    }
    if (rc && damage(rc) && err)
        stk__err_prefix(err, "after %d fetches: ", SHARD_TRIES);
    return rc;
}

/* Takes the lock of job j: 1 taken, 0 held by another process, or an error. */
static int try_lock(shard_job *j, bool wait, stk_error *err) {
    if (j->lock_fd < 0) {
        char *lp = NULL;
        if (asprintf(&lp, "%s.lock", j->final) < 0) return stk__err(err, -ENOMEM, "out of memory");
        int fd = stk__open(lp, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
        free(lp);
        if (fd < 0) return stk__err(err, fd, "%s.lock: %s", j->final, stk_strerror(fd));
        j->lock_fd = fd;
    }
    if (flock(j->lock_fd, LOCK_EX | (wait ? 0 : LOCK_NB)) == 0) return 1;
    if (errno == EWOULDBLOCK) return 0;
    return stk__err(err, -errno, "%s.lock: %s", j->final, stk_strerror(-errno));
}

static void unlock(shard_job *j) {
    if (j->lock_fd >= 0) close(j->lock_fd); /* closing releases the lock */
    j->lock_fd = -1;
}

/* Waits for the shards other processes are fetching; takes over those
 * whose fetcher went away without finishing.  Each wait ends when the
 * other's .part file has not grown for the timeout. */
static int wait_theirs(remote *r, shard_job *js, size_t n, stk_error *err) {
    for (size_t k = 0; k < n; k++) {
        shard_job *j = &js[k];
        uint64_t want = r->m.shards[j->i].bytes;
        int64_t last_size = -1;
        uint64_t last_change = stk__now_ns();
        for (;;) {
            int got = try_lock(j, false, err);
            if (got < 0) return got;
            if (got == 1) break;
            struct stat st;
            int64_t sz = stat(j->part, &st) == 0 ? (int64_t)st.st_blocks : -1;
            if (sz != last_size) {
                last_size = sz;
                last_change = stk__now_ns();
            } else if (stk__now_ns() - last_change > (uint64_t)r->timeout_s * 1000000000u) {
                return stk__err(err, -ETIMEDOUT,
                                "%s: another process has been fetching it for %" PRId64
                                " s without progress (it holds %s.lock)",
                                j->name, r->timeout_s, j->final);
            }
            usleep(50000);
        }
        if (held(j->final, &r->m, j->i)) {
            r->cached += want;
            j->done = true;
            unlock(j);
            continue;
        }
        int rc = fetch_mine(r, j, 1, err);
        unlock(j);
        if (rc) return rc;
    }
    return 0;
}

/* Makes sure every shard is in the cache. */
static int fill(remote *r, stk_error *err) {
    size_t n = r->m.nshards;
    shard_job *js = stk__calloc(n ? n : 1, sizeof *js);
    if (!js) return stk__err(err, -ENOMEM, "out of memory");
    int rc = 0;
    size_t nj = 0;
    uint64_t missing = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const stk__shard_entry *e = &r->m.shards[i];
        char *final = stk__path_join(r->dir, e->file);
        if (!final) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
        if (held(final, &r->m, i)) {
            r->cached += e->bytes;
            stk__free(final);
            continue;
        }
        shard_job *j = &js[nj++];
        j->i = i;
        j->final = final;
        j->lock_fd = -1;
        j->url = stk__url_object(&r->url, r->have_aws ? &r->aws : NULL, e->file);
        if (asprintf(&j->name, "%s/%s", r->url.text, e->file) < 0) j->name = NULL;
        if (!j->url || !j->name || asprintf(&j->part, "%s.part", final) < 0) {
            j->part = NULL;
            rc = stk__err(err, -ENOMEM, "out of memory");
        }
        missing += e->bytes;
    }
    if (rc == 0 && missing > 0) {
        uint64_t room = stk__cache_room(r->dir);
        if (missing > room)
            rc = stk__err(err, -ENOSPC,
                          "%s: the cache at %s has room for %" PRIu64 " MiB (free space less "
                          "5%% in reserve), and this dataset needs %" PRIu64
                          " MiB more; free space or choose another cache directory "
                          "(STOKER_CACHE_DIR)",
                          r->url.text, r->dir, room >> 20, (missing + (1u << 20) - 1) >> 20);
    }
    /* Mine first (those no one else is fetching), then the others'. */
    shard_job *mine = NULL, *theirs = NULL;
    size_t nm = 0, nt = 0;
    if (rc == 0 && nj) {
        mine = stk__calloc(nj, sizeof *mine);
        theirs = stk__calloc(nj, sizeof *theirs);
        if (!mine || !theirs) rc = stk__err(err, -ENOMEM, "out of memory");
    }
    for (size_t k = 0; rc == 0 && k < nj; k++) {
        int got = try_lock(&js[k], false, err);
        if (got < 0) {
            rc = got;
        } else if (got == 0) {
            theirs[nt++] = js[k];
        } else if (held(js[k].final, &r->m, js[k].i)) {
            /* Finished by another process since it was looked at. */
            r->cached += r->m.shards[js[k].i].bytes;
            unlock(&js[k]);
        } else {
            mine[nm++] = js[k];
        }
        js[k].lock_fd = -1; /* moved */
    }
    if (rc == 0) rc = fetch_mine(r, mine, nm, err);
    for (size_t k = 0; k < nm; k++) {
        if (!mine[k].done && mine[k].part) unlink(mine[k].part);
        unlock(&mine[k]);
    }
    if (rc == 0) rc = wait_theirs(r, theirs, nt, err);
    for (size_t k = 0; k < nt; k++) unlock(&theirs[k]);
    for (size_t k = 0; k < nj; k++) {
        stk__free(js[k].url);
        free(js[k].name);
        stk__free(js[k].final);
        free(js[k].part);
    }
    stk__free(mine);
    stk__free(theirs);
    stk__free(js);
    return rc;
}

/* The cache directory of this dataset version, its manifest and origin
 * written there once. */
static int prepare_dir(remote *r, const stk_open_options *opts, const char *text, size_t len,
                       stk_error *err) {
    char *root = NULL;
    int rc = stk__cache_root(opts ? opts->cache_dir : NULL, &root, err);
    if (rc) return rc;
    char key[17];
    snprintf(key, sizeof key, "%016" PRIx64, stk__hash(text, len));
    r->dir = stk__path_join(root, key);
    stk__free(root);
    if (!r->dir) return stk__err(err, -ENOMEM, "out of memory");
    if (mkdir(r->dir, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
        return stk__err(err, rc, "%s: %s", r->dir, stk_strerror(rc));
    }
    char *mp = stk__path_join(r->dir, STK__MANIFEST);
    char *op = stk__path_join(r->dir, "origin");
    if (!mp || !op) rc = stk__err(err, -ENOMEM, "out of memory");
    if (rc == 0 && !size_is(op, strlen(r->url.text)) &&
        (rc = stk__write_file_atomic(r->dir, "origin", r->url.text, strlen(r->url.text), false)))
        stk__err(err, rc, "%s: %s", op, stk_strerror(rc));
    if (rc == 0 && !size_is(mp, len) &&
        (rc = stk__write_file_atomic(r->dir, STK__MANIFEST, text, len, true)))
        stk__err(err, rc, "%s: %s", mp, stk_strerror(rc));
    stk__free(mp);
    stk__free(op);
    return rc;
}

int stk__remote_open(const char *path, const stk_open_options *opts, stk_dataset **out,
                     stk_error *err) {
    *out = NULL;
    remote r;
    memset(&r, 0, sizeof r);
    char *text = NULL, *murl = NULL;
    size_t len = 0;
    const char *t = getenv("STOKER_REMOTE_TIMEOUT");
    r.timeout_s = t && atoi(t) > 0 ? atoi(t) : 30;
    r.part = stk__http_part_bytes();
    int rc = stk__url_parse(path, &r.url, err);
    if (rc) return rc;
    if (r.url.scheme == STK__URL_S3) {
        if ((rc = stk__aws_load(&r.aws, err))) goto out;
        r.have_aws = true;
    }
    if ((rc = stk__http_new(&r.url, r.have_aws ? &r.aws : NULL, &r.http, err))) goto out;
    if ((rc = fetch_manifest(&r, &text, &len, &murl, err))) goto out;
    if ((rc = stk__manifest_parse(text, len, murl, &r.m, err))) goto out;
    if (r.m.is_part) {
        rc = stk__err(err, STK_EINCOMPLETE, "%s: is part %u of %u, not a whole dataset", murl,
                      r.m.part_index, r.m.part_count);
        goto out;
    }
    if (opts && opts->cache_budget != STK_CACHE_BUDGET_AUTO) {
        uint64_t need = 0;
        for (size_t i = 0; i < r.m.nshards; i++) need += r.m.shards[i].bytes;
        if (need > opts->cache_budget) {
            rc = stk__err(err, -ENOSPC,
                          "%s: the dataset takes %" PRIu64 " MiB and the cache budget is %" PRIu64
                          " MiB; reading a dataset larger than its cache (streaming) is not "
                          "supported yet",
                          path, (need + (1u << 20) - 1) >> 20, opts->cache_budget >> 20);
            goto out;
        }
    }
    if ((rc = prepare_dir(&r, opts, text, len, err))) goto out;
    if ((rc = fill(&r, err))) goto out;
    stk_dataset *ds = NULL;
    if ((rc = stk__dataset_open_dir(r.dir, true, &ds, err))) goto out;
    ds->origin = stk__strdup(r.url.text);
    ds->remote = stk__calloc(1, sizeof *ds->remote);
    if (!ds->origin || !ds->remote) {
        stk_dataset_close(ds);
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    stk__http_stats(r.http, ds->remote);
    ds->remote->bytes_cached = r.cached;
    *out = ds;
out:
    stk__free(text);
    stk__free(murl);
    stk__manifest_clear(&r.m);
    stk__free(r.dir);
    stk__http_free(r.http);
    if (r.have_aws) stk__aws_free(&r.aws);
    stk__url_free(&r.url);
    return rc;
}

/* ---- measuring the link ---- */

int stk_measure_link(const stk_dataset *ds, double max_seconds, double *bytes_per_s,
                     stk_error *err) {
    if (!ds || !bytes_per_s) return stk__err(err, -EINVAL, "stk_measure_link: NULL argument");
    *bytes_per_s = 0;
    if (!ds->origin) return stk__err(err, -EINVAL, "%s: not a remote dataset", ds->dir);
    remote r;
    memset(&r, 0, sizeof r);
    int rc = stk__url_parse(ds->origin, &r.url, err);
    if (rc) return rc;
    if (r.url.scheme == STK__URL_S3 && (rc = stk__aws_load(&r.aws, err)) == 0) r.have_aws = true;
    if (rc == 0) rc = stk__http_new(&r.url, r.have_aws ? &r.aws : NULL, &r.http, err);
    int null_fd = rc == 0 ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
    if (rc == 0 && null_fd < 0) rc = stk__err(err, -errno, "/dev/null: %s", stk_strerror(-errno));
    uint64_t part = stk__http_part_bytes(), total = 0;
    uint64_t t0 = stk__now_ns();
    /* Rounds of one part per connection, until the time or 1 GiB is spent. */
    size_t s = 0;
    uint64_t off = 0;
    stk__fetch f[64];
    char *urls[64];
    while (rc == 0 && total < (1ull << 30) && ds->nshards > 0 &&
           (double)(stk__now_ns() - t0) / 1e9 < max_seconds) {
        size_t n = 0;
        for (; n < 16; n++) {
            const stk__shard *sh = &ds->shards[s];
            const char *base = strrchr(sh->path, '/');
            memset(&f[n], 0, sizeof f[n]);
            urls[n] = stk__url_object(&r.url, r.have_aws ? &r.aws : NULL, base ? base + 1 : sh->path);
            if (!urls[n]) {
                rc = stk__err(err, -ENOMEM, "out of memory");
                break;
            }
            f[n].url = urls[n];
            f[n].fd = null_fd;
            f[n].lo = off;
            f[n].hi = off + part < sh->size ? off + part : sh->size;
            total += f[n].hi - f[n].lo;
            off = f[n].hi;
            if (off >= sh->size) {
                off = 0;
                s = (s + 1) % ds->nshards;
            }
        }
        if (rc == 0) rc = stk__http_run(r.http, f, n, err);
        for (size_t k = 0; k < n; k++) stk__free(urls[k]);
    }
    double el = (double)(stk__now_ns() - t0) / 1e9;
    if (rc == 0 && el > 0) *bytes_per_s = (double)total / el;
    if (null_fd >= 0) close(null_fd);
    stk__http_free(r.http);
    if (r.have_aws) stk__aws_free(&r.aws);
    stk__url_free(&r.url);
    return rc;
}
