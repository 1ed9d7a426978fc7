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

typedef struct remote {
    stk__url url;
    stk__aws aws;
    bool have_aws;
    stk__http *http;
    char *dir; /* the dataset's cache directory */
    stk__manifest m;
    uint64_t cached;
    double timeout_s; /* the deadline of a request (stk__remote_timeout) */
    uint64_t part; /* bytes per range request */
    bool fresh_ends; /* fetch every partial shard's ends, reusing none */
    bool limited;    /* a cache budget smaller than the dataset */
    uint64_t budget;
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
        /* It and its other names (the .part it grew in, with its presence
         * file) go; it is fetched again. */
        char *part = stk__concat(path, "", ".part"), *present = stk__concat(path, "", ".present");
        char *pin = stk__concat(path, "", ".pin");
        if (part) unlink(part);
        if (present) unlink(present);
        if (pin) unlink(pin);
        stk__free(part);
        stk__free(present);
        stk__free(pin);
        unlink(path);
        return false;
    }
    utimensat(AT_FDCWD, path, NULL, 0);
    return true;
}

/* The manifest, as this node last had it: `<cache root>/m-<hash of its
 * URL>` holds its ETag on a first line, then its bytes. */
typedef struct known {
    char *path, *lock;
    char *text; /* the file */
    size_t len;
    const char *etag, *body;
    size_t body_len;
    bool fresh; /* fetched or confirmed less than STOKER_MANIFEST_TTL ago */
} known;

static void known_read(known *k, int64_t ttl) {
    struct stat st;
    if (stat(k->path, &st) != 0 || stk__read_file(k->path, &k->text, &k->len) != 0) return;
    char *nl = memchr(k->text, '\n', k->len);
    if (!nl) {
        stk__free(k->text);
        k->text = NULL;
        return;
    }
    *nl = '\0';
    k->etag = k->text;
    k->body = nl + 1;
    k->body_len = k->len - (size_t)(nl + 1 - k->text);
    k->fresh = (int64_t)time(NULL) - (int64_t)st.st_mtim.tv_sec < ttl;
}

/* The lock that lets one process of the node open the dataset (fetch its
 * manifest, and its shards' headers and indexes) while the others wait and
 * then reuse what it fetched.  A holder that shows no sign of life is not
 * waited for: going on without the lock costs only requests of one's own. */
static int known_lock(const known *k, double timeout_s) {
    int fd = k->lock ? open(k->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
    int64_t silent;
    if (fd >= 0 &&
        stk__flock_alive(fd, (int64_t)((timeout_s + 5) * 1e9), NULL, NULL, &silent) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Fetches the manifest, once per node: a copy fetched or confirmed less than
 * $STOKER_MANIFEST_TTL seconds ago (default 10: the ranks and DataLoader
 * workers of one launch) is taken as it is; an older one is asked for again
 * with If-None-Match, so that an unchanged manifest costs an empty answer.
 * *text from stk__malloc. */
static int fetch_manifest(remote *r, const char *root, bool ask, char **text, size_t *len,
                          char **murl, bool *copy, int *lock_fd, stk_error *err) {
    *copy = false;
    *murl = stk__url_object(&r->url, r->have_aws ? &r->aws : NULL, STK__MANIFEST);
    if (!*murl) return stk__err(err, -ENOMEM, "out of memory");
    const char *t = getenv("STOKER_MANIFEST_TTL");
    int64_t ttl = t && *t ? atoll(t) : 10;
    known k;
    memset(&k, 0, sizeof k);
    char key[24];
    snprintf(key, sizeof key, "m-%016" PRIx64, stk__hash(*murl, strlen(*murl)));
    k.path = stk__path_join(root, key);
    k.lock = k.path ? stk__concat(k.path, "", ".lock") : NULL;
    int lfd = *lock_fd >= 0 ? *lock_fd : known_lock(&k, r->timeout_s);
    *lock_fd = lfd;
    if (k.path && ask) unlink(k.path); /* the copy did not parse */
    else if (k.path) known_read(&k, ttl);
    int rc = 0;
    stk__fetch f;
    memset(&f, 0, sizeof f);
    if (!k.fresh) {
        char *name = NULL;
        if (asprintf(&name, "%s/%s", r->url.text, STK__MANIFEST) < 0) name = NULL;
        f.url = *murl;
        f.what = name;
        f.fd = -1;
        f.if_none_match = k.text ? k.etag : NULL;
        rc = stk__http_run(r->http, &f, 1, err);
        free(name);
        if (rc == -ENOENT && err)
            stk__err(err, -ENOENT, "%s: no dataset there (its manifest, %s, is not found)",
                     r->url.text, *murl);
    }
    if (rc == 0 && (k.fresh || f.status == 304)) {
        /* The copy this node has. */
        if (f.status == 304) utimensat(AT_FDCWD, k.path, NULL, 0);
        *copy = true;
        stk__free(f.mem);
        f.mem = stk__malloc(k.body_len + 1);
        if (f.mem) memcpy(f.mem, k.body, k.body_len), f.mem[k.body_len] = '\0';
        f.mem_len = k.body_len;
        if (!f.mem) rc = stk__err(err, -ENOMEM, "out of memory");
    } else if (rc == 0 && k.path) {
        /* Kept for the node's next opens; a copy that cannot be written
         * costs them a request, nothing more. */
        size_t el = strlen(f.etag), n = el + 1 + f.mem_len;
        char *rec = memchr(f.etag, '\n', el) ? NULL : stk__malloc(n ? n : 1);
        if (rec) {
            memcpy(rec, f.etag, el);
            rec[el] = '\n';
            if (f.mem_len) memcpy(rec + el + 1, f.mem, f.mem_len);
            stk__write_file_atomic(root, key, rec, n, false);
            stk__free(rec);
        }
    }
    stk__free(k.text);
    stk__free(k.path);
    stk__free(k.lock);
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

/* One shard the cache does not hold whole. */
typedef struct partial {
    size_t i;
    char *url, *name, *final, *part;
    char *pin_path; /* <final>.pin: the pin, once the ends are in the .part */
    int fd;
    bool reused; /* its ends were in the .part already */
    char pin[128];
    uint8_t header[STK__HEADER_SIZE];
} partial;

/* A partial shard whose ends another open of this node fetched: its pin is
 * read back, and nothing is fetched (the dataset's open checks the ends
 * against the manifest; remote_open opens again with fresh ends if they
 * fail). */
static bool ends_known(partial *p) {
    char *text = NULL;
    size_t len = 0;
    if (stk__read_file(p->pin_path, &text, &len) != 0) return false;
    bool ok = len < sizeof p->pin && !memchr(text, '\n', len);
    if (ok) snprintf(p->pin, sizeof p->pin, "%s", text);
    stk__free(text);
    return ok;
}

/* Records that p's ends are in its .part, pinned: for later opens. */
static void ends_keep(const remote *r, const partial *p) {
    const char *base = strrchr(p->pin_path, '/');
    stk__write_file_atomic(r->dir, base ? base + 1 : p->pin_path, p->pin, strlen(p->pin), false);
}


/* Fetches each partial shard's header (pinning the object: its ETag, and
 * its size against the manifest's) and then its tail (index and block
 * table) into its .part file, sized to the whole shard. */
static int fetch_ends(remote *r, partial *ps, size_t n, stk_error *err) {
    stk__fetch *f = stk__calloc(n ? n : 1, sizeof *f);
    if (!f) return stk__err(err, -ENOMEM, "out of memory");
    int rc = 0;
    /* f[j] for the shards whose ends are fetched: at[j] is its partial. */
    size_t *at = stk__calloc(n ? n : 1, sizeof *at);
    if (!at) {
        stk__free(f);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    size_t nf = 0;
    for (size_t k = 0; k < n; k++) {
        if (ps[k].reused) continue;
        uint64_t bytes = r->m.shards[ps[k].i].bytes;
        at[nf] = k;
        f[nf++] = (stk__fetch){.url = ps[k].url, .what = ps[k].name, .lo = 0,
                               .hi = STK__MIN((uint64_t)STK__HEADER_SIZE, bytes), .fd = ps[k].fd};
    }
    rc = stk__http_run(r->http, f, nf, err);
    for (size_t j = 0; rc == 0 && j < nf; j++) {
        size_t k = at[j];
        uint64_t want = r->m.shards[ps[k].i].bytes;
        if (f[j].object_size != UINT64_MAX && f[j].object_size != want) {
            rc = stk__err(err, STK_EMISMATCH,
                          "%s: the object has %" PRIu64 " bytes; the dataset's manifest says "
                          "%" PRIu64 ": it was replaced after the manifest was written",
                          ps[k].name, f[j].object_size, want);
            break;
        }
        snprintf(ps[k].pin, sizeof ps[k].pin, "%s", f[j].etag);
        ssize_t got = stk__pread_full(ps[k].fd, ps[k].header, sizeof ps[k].header, 0);
        if (got != (ssize_t)sizeof ps[k].header) {
            rc = got < 0 ? stk__err(err, (int)got, "%s: %s", ps[k].part, stk_strerror((int)got))
                         : stk__err(err, STK_ETRUNCATED, "%s: shorter than a shard header",
                                    ps[k].name);
            break;
        }
        /* The tail from where the header says the index begins; what the
         * header says is checked when the dataset opens. */
        uint64_t index_off = stk__ld64(ps[k].header + STK__H_INDEX_OFF);
        if (index_off < STK__HEADER_SIZE || index_off > want) index_off = STK__HEADER_SIZE;
        f[j] = (stk__fetch){.url = ps[k].url, .what = ps[k].name, .lo = index_off, .hi = want,
                            .fd = ps[k].fd, .fd_off = index_off, .want_etag = ps[k].pin,
                            .want_size = want};
    }
    if (rc == 0) rc = stk__http_run(r->http, f, nf, err);
    for (size_t j = 0; rc == 0 && j < nf; j++) ends_keep(r, &ps[at[j]]);
    stk__free(at);
    stk__free(f);
    return rc;
}

typedef struct paths {
    remote *r;
    partial *ps;
    size_t nps;
} paths;

/* The file shard i is read from: its final name, or its .part file. */
static char *path_of(void *ctx, size_t i, const char *file) {
    paths *p = ctx;
    for (size_t k = 0; k < p->nps; k++)
        if (p->ps[k].i == i) return stk__strdup(p->ps[k].part);
    return stk__path_join(p->r->dir, file);
}

/* $STOKER_CACHE_BUDGET: bytes, or with a K, M, G or T suffix (powers of
 * 1024); unset or empty: *out unchanged. */
static int env_budget(uint64_t *out, stk_error *err) {
    const char *v = getenv("STOKER_CACHE_BUDGET");
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = 0;
    if (end && *end) {
        const char *units = "KMGT";
        const char *u = strchr(units, *end & ~0x20);
        if (u && *end != '\0' && (end[1] == '\0' || ((end[1] & ~0x20) == 'B' && !end[2]) ||
                                  ((end[1] & ~0x20) == 'I' && (end[2] & ~0x20) == 'B' && !end[3])))
            shift = 10 * (int)(u - units + 1);
        else shift = -1;
    }
    if (errno || end == v || v[0] == '-' || shift < 0 || (shift && x > (UINT64_MAX >> shift)))
        return stk__err(err, -EINVAL,
                        "STOKER_CACHE_BUDGET=%s: not a size in bytes (such as 500M or 20G)", v);
    *out = (uint64_t)x << shift;
    return 0;
}

/* Opens the dataset from the cache: shards held whole are read as they
 * are; the others get a .part file with their header and tail, and a
 * fetcher that brings their blocks when the reader asks. */
static int open_cached(remote *r, stk_dataset **out, stk_error *err) {
    size_t n = r->m.nshards;
    partial *ps = stk__calloc(n ? n : 1, sizeof *ps);
    bool *complete = stk__calloc(n ? n : 1, sizeof *complete);
    if (!ps || !complete) {
        stk__free(ps);
        stk__free(complete);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    int rc = 0;
    size_t np = 0;
    uint64_t missing = 0;
    r->cached = 0;
    bool trust = true; /* the presence files, unless a .part is older than the boot */
    int64_t boot = boot_time();
    for (size_t i = 0; i < n && rc == 0; i++) {
        const stk__shard_entry *e = &r->m.shards[i];
        char *final = stk__path_join(r->dir, e->file);
        if (!final) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
        if (held(final, &r->m, i)) {
            r->cached += e->bytes;
            complete[i] = true;
            stk__free(final);
            continue;
        }
        partial *p = &ps[np++];
        p->i = i;
        p->fd = -1;
        p->final = final;
        p->part = stk__concat(final, "", ".part");
        p->name = stk__concat(r->url.text, "/", e->file);
        p->url = stk__url_object(&r->url, r->have_aws ? &r->aws : NULL, e->file);
        p->pin_path = stk__concat(final, "", ".pin");
        if (!p->part || !p->name || !p->url || !p->pin_path) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
        struct stat st, pst;
        bool was = stat(p->part, &st) == 0;
        if (was && (int64_t)st.st_mtim.tv_sec < boot) trust = false;
        was = was && (uint64_t)st.st_size == e->bytes;
        p->reused = was && !r->fresh_ends && (int64_t)st.st_mtim.tv_sec >= boot &&
                    stat(p->pin_path, &pst) == 0 && (int64_t)pst.st_mtim.tv_sec >= boot &&
                    ends_known(p);
        p->fd = stk__open(p->part, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
        if (p->fd < 0) {
            rc = stk__err(err, p->fd, "%s: %s", p->part, stk_strerror(p->fd));
            p->fd = -1;
            break;
        }
        if (fstat(p->fd, &st) != 0) st.st_blocks = 0;
        else if ((uint64_t)st.st_size != e->bytes && ftruncate(p->fd, (off_t)e->bytes) != 0) {
            rc = stk__err(err, -errno, "%s: %s", p->part, stk_strerror(-errno));
            break;
        }
        /* What the disk must still take for it (the file is sparse). */
        uint64_t on_disk = (uint64_t)st.st_blocks * 512;
        missing += e->bytes > on_disk ? e->bytes - on_disk : 0;
    }
    if (r->limited && missing > r->budget) missing = r->budget;
    if (rc == 0 && missing > stk__cache_room(r->dir))
        rc = stk__err(err, -ENOSPC,
                      "%s: the cache at %s has room for %" PRIu64 " MiB (free space less "
                      "5%% in reserve), and this dataset may need %" PRIu64
                      " MiB more; free space or choose another cache directory "
                      "(STOKER_CACHE_DIR)",
                      r->url.text, r->dir, stk__cache_room(r->dir) >> 20,
                      (missing + (1u << 20) - 1) >> 20);
    if (rc == 0 && np) rc = fetch_ends(r, ps, np, err);
    stk__fetcher *fe = NULL;
    if (rc == 0 && np) rc = stk__fetcher_new(r->url.text, n, r->timeout_s, &fe, err);
    for (size_t k = 0; rc == 0 && fe && k < np; k++)
        rc = stk__fetcher_shard(fe, ps[k].i, ps[k].url, ps[k].name, ps[k].final, ps[k].pin,
                                false, err);
    for (size_t i = 0; rc == 0 && fe && i < n; i++)
        if (complete[i]) {
            char *fin = stk__path_join(r->dir, r->m.shards[i].file);
            rc = fin ? stk__fetcher_shard(fe, i, "", "", fin, "", true, err)
                     : stk__err(err, -ENOMEM, "out of memory");
            stk__free(fin);
        }
    stk_dataset *ds = NULL;
    paths pc = {r, ps, np};
    if (rc == 0) rc = stk__dataset_open_paths(r->dir, path_of, &pc, &ds, err);
    if (rc == 0 && fe) {
        rc = stk__fetcher_attach(fe, ds, trust, err);
        if (rc == 0) fe = NULL; /* the dataset's now */
        if (rc == 0 && r->limited) rc = stk__budget_start(ds, r->dir, r->budget, err);
    }
    if (rc == 0 && r->limited && r->budget) {
        uint64_t used = stk__cache_du(r->dir);
        if (used > r->budget)
            rc = stk__err(err, -ENOSPC,
                          "%s: its cache (%s) already takes %" PRIu64 " KiB (shards held whole, "
                          "and every shard's header and index), more than the cache budget of "
                          "%" PRIu64 " KiB; raise the budget or clear the cache (stoker cache "
                          "clear)",
                          r->url.text, r->dir, used >> 10, r->budget >> 10);
    }
    if (rc) {
        stk_dataset_close(ds);
        ds = NULL;
    }
    stk__fetcher_free(fe);
    for (size_t k = 0; k < np; k++) {
        if (rc && ps[k].reused) {
            /* Perhaps those ends are what failed: the caller tries again
             * with fresh ones. */
            unlink(ps[k].pin_path);
            r->fresh_ends = true;
        }
        stk__free(ps[k].pin_path);
        if (ps[k].fd >= 0) close(ps[k].fd);
        stk__free(ps[k].url);
        stk__free(ps[k].name);
        stk__free(ps[k].final);
        stk__free(ps[k].part);
    }
    stk__free(ps);
    stk__free(complete);
    *out = ds;
    return rc;
}

/* The cache directory of this dataset version, its manifest and origin
 * written there once. */
static int prepare_dir(remote *r, const char *root, const char *text, size_t len,
                       stk_error *err) {
    int rc = 0;
    char key[17];
    snprintf(key, sizeof key, "%016" PRIx64, stk__hash(text, len));
    r->dir = stk__path_join(root, key);
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
    char *text = NULL, *murl = NULL, *root = NULL;
    size_t len = 0;
    int lock_fd = -1; /* the node's open of this URL: held until the dataset is
                       * open, beating while it fetches */
    r.timeout_s = stk__remote_timeout(opts ? opts->remote_timeout : 0);
    r.part = stk__http_part_bytes();
    int rc = stk__url_parse(path, &r.url, err);
    if (rc) return rc;
    if (r.url.scheme == STK__URL_S3) {
        if ((rc = stk__aws_load(&r.aws, err))) goto out;
        r.have_aws = true;
    }
    if ((rc = stk__http_new(&r.url, r.have_aws ? &r.aws : NULL, &r.http, err))) goto out;
    stk__http_deadline(r.http, r.timeout_s);
    if ((rc = stk__cache_root(opts ? opts->cache_dir : NULL, &root, err))) goto out;
    bool copy = false;
    rc = fetch_manifest(&r, root, false, &text, &len, &murl, &copy, &lock_fd, err);
    if (lock_fd >= 0) stk__http_beat(r.http, &lock_fd, 1);
    if (rc) goto out;
    rc = stk__manifest_parse(text, len, murl, &r.m, err);
    if (rc && copy) {
        /* The node's copy is damaged: the store's is fetched. */
        stk__free(text);
        stk__free(murl);
        text = murl = NULL;
        rc = fetch_manifest(&r, root, true, &text, &len, &murl, &copy, &lock_fd, err);
        if (rc == 0) rc = stk__manifest_parse(text, len, murl, &r.m, err);
    }
    if (rc) goto out;
    if (r.m.is_part) {
        rc = stk__err(err, STK_EINCOMPLETE, "%s: is part %u of %u, not a whole dataset", murl,
                      r.m.part_index, r.m.part_count);
        goto out;
    }
    r.budget = opts ? opts->cache_budget : STK_CACHE_BUDGET_AUTO;
    if (r.budget == STK_CACHE_BUDGET_AUTO && (rc = env_budget(&r.budget, err))) goto out;
    if (r.budget != STK_CACHE_BUDGET_AUTO) {
        uint64_t need = 0;
        for (size_t i = 0; i < r.m.nshards; i++) need += r.m.shards[i].bytes;
        r.limited = need > r.budget;
    }
    if ((rc = prepare_dir(&r, root, text, len, err))) goto out;
    stk_dataset *ds = NULL;
    rc = open_cached(&r, &ds, err);
    if (rc && r.fresh_ends) rc = open_cached(&r, &ds, err);
    if (rc) goto out;
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
    if (lock_fd >= 0) close(lock_fd);
    stk__free(text);
    stk__free(murl);
    stk__free(root);
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
            /* The object's name: the file's, without the .part of a shard
             * still arriving. */
            const char *base = strrchr(sh->path, '/');
            base = base ? base + 1 : sh->path;
            char name[256];
            size_t bl = strlen(base);
            if (bl > 5 && strcmp(base + bl - 5, ".part") == 0) bl -= 5;
            snprintf(name, sizeof name, "%.*s", (int)bl, base);
            memset(&f[n], 0, sizeof f[n]);
            urls[n] = stk__url_object(&r.url, r.have_aws ? &r.aws : NULL, name);
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
