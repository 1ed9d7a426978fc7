/*
 * lazy.c: a remote dataset's bytes fetched when the reader asks for them
 * (stk_dataset.ensure): the loader asks for each batch's records, or each
 * group's spans, before it reads them, so fetches follow the planned order
 * and each rank fetches only what it reads.
 *
 * A shard not yet whole is `<shard>.part` in the cache, sized and sparse,
 * with its header, index and block table fetched at open; `<shard>.present`
 * holds one byte per 64 KiB block, set once the block arrived and matched
 * its checksum.  Within the process a block is absent, in flight (one
 * thread fetches it, the others wait) or present; between processes the
 * shard's lock file (flock) is held while its blocks are fetched, and the
 * presence file is read again once it is taken, so no block is fetched
 * twice.  A shard whose blocks are all present gets its final name (a hard
 * link), which later opens trust.
 */
#define _GNU_SOURCE
#include "lazy.h"
#include "../core/hash.h"
#include "../format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int stk__fetcher_new(const char *url_text, size_t n, double timeout_s, stk__fetcher **out,
                     stk_error *err) {
    *out = NULL;
    stk__fetcher *f = stk__calloc(1, sizeof *f);
    if (!f) return stk__err(err, -ENOMEM, "out of memory");
    f->sh = stk__calloc(n ? n : 1, sizeof *f->sh);
    int rc = f->sh ? stk__url_parse(url_text, &f->url, err) : stk__err(err, -ENOMEM, "out of memory");
    if (rc) {
        stk__free(f->sh);
        stk__free(f);
        return rc;
    }
    f->n = n;
    f->part = stk__http_part_bytes();
    f->timeout_s = stk__remote_timeout(timeout_s);
    for (size_t i = 0; i < n; i++)
        f->sh[i].fd = f->sh[i].present_fd = f->sh[i].lock_fd = f->sh[i].evict_fd = -1;
    f->budget_fd = f->uses_fd = -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_cond_init(&f->ahead_cv, NULL);
    *out = f;
    return 0;
}

void stk__fetcher_free(stk__fetcher *f) {
    if (!f) return;
    if (f->ahead_started) {
        pthread_mutex_lock(&f->mu);
        f->ahead_stop = true;
        pthread_cond_broadcast(&f->ahead_cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->ahead_tid, NULL);
    }
    stk__free(f->aq);
    stk__budget_free(f);
    for (size_t i = 0; i < f->n; i++) {
        fshard *s = &f->sh[i];
        stk__free(s->url);
        stk__free(s->name);
        stk__free(s->part);
        stk__free(s->final);
        stk__free(s->present_path);
        stk__free(s->lock_path);
        stk__free(s->state);
        stk__free(s->changed);
        if (s->fd >= 0) close(s->fd);
        if (s->present_fd >= 0) close(s->present_fd);
        if (s->lock_fd >= 0) close(s->lock_fd);
    }
    for (size_t i = 0; i < f->nall; i++) stk__http_free(f->all[i]);
    for (size_t i = 0; i < f->naws; i++) {
        stk__aws_free(f->awss[i]);
        stk__free(f->awss[i]);
    }
    stk__free(f->all);
    stk__free(f->awss);
    stk__free(f->idle);
    stk__free(f->sh);
    stk__url_free(&f->url);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    pthread_cond_destroy(&f->ahead_cv);
    stk__free(f);
}

char *stk__concat(const char *a, const char *sep, const char *b) {
    size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
    char *s = stk__malloc(n);
    if (s) snprintf(s, n, "%s%s%s", a, sep, b);
    return s;
}

int stk__fetcher_shard(stk__fetcher *f, size_t i, const char *url, const char *name,
                       const char *final, const char *pin, bool complete, stk_error *err) {
    fshard *s = &f->sh[i];
    s->complete = complete;
    snprintf(s->pin, sizeof s->pin, "%s", pin ? pin : "");
    if (!(s->url = stk__strdup(url)) || !(s->name = stk__strdup(name)) ||
        !(s->final = stk__strdup(final)) || !(s->part = stk__concat(final, "", ".part")) ||
        !(s->present_path = stk__concat(final, "", ".present")) ||
        !(s->lock_path = stk__concat(final, "", ".lock")))
        return stk__err(err, -ENOMEM, "out of memory");
    return 0;
}

/* Reads shard s's presence file into its block states (a present byte
 * turns an absent block present). */
static void read_presence(fshard *s) {
    if (s->present_fd < 0 || !s->state) return;
    uint8_t buf[4096];
    for (uint64_t b = 0; b < s->nblocks; b += sizeof buf) {
        size_t k = (size_t)STK__MIN((uint64_t)sizeof buf, s->nblocks - b);
        if (stk__pread_full(s->present_fd, buf, k, b) != (ssize_t)k) return;
        for (size_t j = 0; j < k; j++)
            if (buf[j] == 1 && s->state[b + j] == B_ABSENT) s->state[b + j] = B_PRESENT;
    }
}

static int ensure(void *ctx, const stk__range *r, size_t n, stk_error *err);
static void release(void *ctx, const stk__range *r, size_t n);
static void ahead(void *ctx, const stk__range *r, size_t n, bool whole);
static void stats(void *ctx, stk_remote_stats *out) {
    stk__fetcher *f = ctx;
    pthread_mutex_lock(&f->mu);
    *out = f->done;
    for (size_t i = 0; i < f->nall; i++) {
        stk_remote_stats st;
        stk__http_stats(f->all[i], &st);
        out->requests += st.requests;
        out->retries += st.retries;
        out->bytes_fetched += st.bytes_fetched;
        out->network_seconds += st.network_seconds;
    }
    if (f->limited) {
        out->cache_limited = 1;
        out->cache_budget = f->budget;
        out->cache_peak = f->peak;
        out->bytes_evicted = f->evicted;
    }
    pthread_mutex_unlock(&f->mu);
}
static void free_ctx(void *ctx) { stk__fetcher_free(ctx); }

int stk__fetcher_attach(stk__fetcher *f, stk_dataset *ds, bool trust_presence, stk_error *err) {
    f->ds = ds;
    for (size_t i = 0; i < f->n; i++) {
        fshard *s = &f->sh[i];
        if (s->complete) continue;
        const stk__shard *sh = &ds->shards[i];
        s->nblocks = sh->nblocks;
        s->state = stk__calloc(s->nblocks ? s->nblocks : 1, 1);
        if (!s->state) return stk__err(err, -ENOMEM, "out of memory");
        int fd = stk__open(s->present_path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
        if (fd < 0) return stk__err(err, fd, "%s: %s", s->present_path, stk_strerror(fd));
        s->present_fd = fd;
        if (trust_presence) read_presence(s);
        else if (ftruncate(fd, 0) != 0) return stk__err(err, -errno, "%s: %s", s->present_path,
                                                         stk_strerror(-errno));
    }
    ds->caps.lazy = true;
    ds->ensure = ensure;
    ds->ensure_release = release;
    ds->ensure_ahead = ahead;
    ds->ensure_stats = stats;
    ds->ensure_free = free_ctx;
    ds->ensure_ctx = f;
    return 0;
}

/* ---- clients ---- */

static stk__http *client_get(stk__fetcher *f, stk_error *err) {
    pthread_mutex_lock(&f->mu);
    stk__http *h = f->nidle ? f->idle[--f->nidle] : NULL;
    pthread_mutex_unlock(&f->mu);
    if (h) return h;
    stk__aws *a = NULL;
    int rc = 0;
    if (f->url.scheme == STK__URL_S3) {
        a = stk__calloc(1, sizeof *a);
        rc = a ? stk__aws_load(a, err) : stk__err(err, -ENOMEM, "out of memory");
        if (rc) {
            stk__free(a);
            return NULL;
        }
    }
    if ((rc = stk__http_new(&f->url, a, &h, err))) {
        if (a) stk__aws_free(a);
        stk__free(a);
        return NULL;
    }
    stk__http_deadline(h, f->timeout_s);
    pthread_mutex_lock(&f->mu);
    stk__http **all = stk__realloc(f->all, (f->nall + 1) * sizeof *all);
    stk__aws **awss = a ? stk__realloc(f->awss, (f->naws + 1) * sizeof *awss) : f->awss;
    stk__http **idle = stk__realloc(f->idle, (f->nall + 1) * sizeof *idle);
    if (all) f->all = all;
    if (awss) f->awss = awss;
    if (idle) f->idle = idle;
    bool ok = all && idle && (!a || awss);
    if (ok) {
        f->all[f->nall++] = h;
        if (a) f->awss[f->naws++] = a;
    }
    pthread_mutex_unlock(&f->mu);
    if (!ok) {
        stk__http_free(h);
        if (a) stk__aws_free(a);
        stk__free(a);
        stk__err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    return h;
}

static void client_put(stk__fetcher *f, stk__http *h) {
    pthread_mutex_lock(&f->mu);
    f->idle[f->nidle++] = h;
    pthread_mutex_unlock(&f->mu);
}

/* ---- fetching blocks ---- */

static int open_fds(fshard *s, stk_error *err) {
    if (s->fd < 0) {
        int fd = stk__open(s->part, O_RDWR | O_NOFOLLOW, 0);
        if (fd < 0) return stk__err(err, fd, "%s: %s", s->part, stk_strerror(fd));
        s->fd = fd;
    }
    if (s->lock_fd < 0) {
        int fd = stk__open(s->lock_path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
        if (fd < 0) return stk__err(err, fd, "%s: %s", s->lock_path, stk_strerror(fd));
        s->lock_fd = fd;
    }
    return 0;
}

/* Fetches the blocks w[0..n) (sorted by shard and block, their shards'
 * locks held) in ranges of up to f->part bytes, all at once, and checks
 * each; sets got on those that passed. */
static int fetch_once(stk__fetcher *f, stk__http *h, want *w, size_t n, stk_error *err) {
    stk__fetch *q = stk__calloc(n ? n : 1, sizeof *q);
    uint32_t *qs = stk__calloc(n ? n : 1, sizeof *qs); /* each request's shard */
    if (!q || !qs) {
        stk__free(q);
        stk__free(qs);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    size_t nq = 0;
    for (size_t i = 0; i < n;) {
        if (w[i].got) {
            i++;
            continue;
        }
        const stk__shard *sh = &f->ds->shards[w[i].s];
        fshard *s = &f->sh[w[i].s];
        uint64_t a, z;
        stk__block_bytes(sh, w[i].b, &a, &z);
        size_t j = i + 1;
        for (; j < n && !w[j].got && w[j].s == w[i].s && w[j].b == w[j - 1].b + 1; j++) {
            uint64_t a2, z2;
            stk__block_bytes(sh, w[j].b, &a2, &z2);
            if (z2 - a > f->part) break;
            z = z2;
        }
        qs[nq] = w[i].s;
        q[nq++] = (stk__fetch){.url = s->url, .what = s->name, .lo = a, .hi = z, .fd = s->fd,
                               .fd_off = a, .want_etag = s->pin, .want_size = sh->size};
        i = j;
    }
    /* One request failed, the whole fetch fails (nothing is checked):
     * the others are not waited for. */
    int rc = stk__http_run_or_stop(h, q, nq, err);
    /* An object that changed stays changed: its shard's later reads fail
     * at once, with this error (its first cause). */
    for (size_t i = 0; rc && i < nq; i++) {
        fshard *s = &f->sh[qs[i]];
        if (q[i].rc != STK_ESTALE) continue;
        stk_error *e = stk__malloc(sizeof *e);
        pthread_mutex_lock(&f->mu);
        if (!s->changed && e) s->changed = e, e = NULL, *s->changed = q[i].err;
        pthread_mutex_unlock(&f->mu);
        stk__free(e);
    }
    stk__free(q);
    stk__free(qs);
    if (rc) return rc;
    /* Each block against its checksum, as it now is in the file. */
    uint8_t *buf = NULL;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (w[i].got) continue;
        const stk__shard *sh = &f->ds->shards[w[i].s];
        uint64_t a, z;
        stk__block_bytes(sh, w[i].b, &a, &z);
        if (!buf && !(buf = stk__malloc(sh->block_size ? sh->block_size : 1))) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
        ssize_t got = stk__pread_full(f->sh[w[i].s].fd, buf, (size_t)(z - a), a);
        if (got != (ssize_t)(z - a)) {
            rc = got < 0 ? (int)got : -EIO;
            stk__err(err, rc, "%s: reading block %" PRIu64 " back: %s", f->sh[w[i].s].part,
                     w[i].b, stk_strerror(rc));
            break;
        }
        w[i].got = stk__hash(buf, (size_t)(z - a)) == sh->blocks[w[i].b];
    }
    stk__free(buf);
    return rc;
}

/* Marks the blocks that arrived present on disk, and names a shard whose
 * blocks are all there. */
static void record(stk__fetcher *f, const want *w, size_t n) {
    const uint8_t one = 1;
    for (size_t i = 0; i < n; i++) {
        if (!w[i].got || w[i].had) continue;
        fshard *s = &f->sh[w[i].s];
        stk__pwrite_full(s->present_fd, &one, 1, w[i].b);
    }
}

/* The error for block b of shard i, which failed its checksum TRIES times. */
static int bad_block(const stk__fetcher *f, uint32_t i, uint64_t b, stk_error *err) {
    const stk__shard *sh = &f->ds->shards[i];
    uint64_t a, z;
    stk__block_bytes(sh, b, &a, &z);
    return stk__err(err, STK_ECHECKSUM,
                    "%s: after %d fetches, block %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64
                    ", records %" PRIu64 "..%" PRIu64 ") checksum mismatch",
                    f->sh[i].name, TRIES, b, a, z, stk__dataset_record_at(f->ds, sh, a),
                    stk__dataset_record_at(f->ds, sh, z - 1));
}

/* Fetches blocks w[0..n) of shards whose locks this thread holds. */
static int fetch_locked(stk__fetcher *f, want *w, size_t n, stk_error *err) {
    /* Another process may have fetched some since this one looked. */
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n; i++) {
        if (stk__present_on_disk(&f->sh[w[i].s], w[i].b)) w[i].got = w[i].had = true;
    }
    pthread_mutex_unlock(&f->mu);
    stk__http *h = client_get(f, err);
    if (!h) return err ? err->code : -ENOMEM;
    /* The locks' files beat while this thread fetches (see lock_wait). */
    int *beats = stk__malloc((n ? n : 1) * sizeof *beats);
    size_t nb = 0;
    for (size_t i = 0; beats && i < n; i++)
        if (i == 0 || w[i].s != w[i - 1].s) beats[nb++] = f->sh[w[i].s].lock_fd;
    stk__http_beat(h, beats, nb);
    int rc = 0;
    for (int t = 0; t < TRIES && rc == 0; t++) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++) left += !w[i].got;
        if (!left) break;
        rc = fetch_once(f, h, w, n, err);
    }
    stk__http_beat(h, NULL, 0);
    stk__free(beats);
    client_put(f, h);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            if (w[i].got) continue;
            w[i].bad = true;
            if (rc == 0) rc = bad_block(f, w[i].s, w[i].b, err);
        }
    }
    record(f, w, n);
    return rc;
}

/* Gives each shard of w[0..n) whose blocks are now all present its final
 * name. */
static void name_complete(stk__fetcher *f, const want *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (i && w[i].s == w[i - 1].s) continue;
        fshard *s = &f->sh[w[i].s];
        if (s->complete) continue;
        bool all = true;
        for (uint64_t b = 0; b < s->nblocks && all; b++) all = s->state[b] == B_PRESENT;
        if (!all) continue;
        /* Under a budget blocks come and go: a shard is never named whole. */
        if (f->limited) continue;
        s->complete = true;
        if (link(s->part, s->final) != 0 && errno != EEXIST) s->complete = false;
    }
}

static int by_shard_block(const void *x, const void *y) {
    const want *a = x, *b = y;
    if (a->s != b->s) return a->s < b->s ? -1 : 1;
    return a->b < b->b ? -1 : a->b > b->b;
}

/* The shard's lock between processes, taken by this thread: at once when
 * another thread of this process holds it or no process does (under mu). */
static bool lock_try(fshard *s) {
    if (s->lockers > 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0) {
        s->lockers++;
        s->given_up = false;
        return true;
    }
    return false;
}

/* ... waiting for another process to let it go (not under mu).  Its holder
 * beats the lock's file while it fetches (stk__http_beat); a holder whose
 * heart stopped for longer than a transfer may go without a byte (it was
 * stopped, or hangs) is given up on, so that no wait is unbounded. */
typedef struct waiter {
    stk__fetcher *f;
    fshard *s;
} waiter;

static bool given_up(void *ctx) {
    waiter *w = ctx;
    pthread_mutex_lock(&w->f->mu);
    bool g = w->s->given_up;
    pthread_mutex_unlock(&w->f->mu);
    return g;
}

static int lock_wait(stk__fetcher *f, fshard *s, stk_error *err) {
    const int64_t limit = (int64_t)((f->timeout_s + 5) * 1e9);
    waiter w = {f, s};
    int64_t silent;
    int rc = stk__flock_alive(s->lock_fd, limit, given_up, &w, &silent);
    if (rc < 0) return stk__err(err, rc, "%s: %s", s->lock_path, stk_strerror(rc));
    pthread_mutex_lock(&f->mu);
    if (rc == 1) s->given_up = true;
    else s->lockers++, s->given_up = false;
    pthread_mutex_unlock(&f->mu);
    if (rc == 1)
        return stk__err(err, STK_ETIMEOUT,
                        "%s: another process holds this shard's cache lock (%s) and has shown "
                        "no sign of life for over %g s; is it stopped?",
                        s->name, s->lock_path, f->timeout_s + 5);
    return 0;
}

static void lock_drop(stk__fetcher *f, fshard *s) {
    pthread_mutex_lock(&f->mu);
    if (--s->lockers == 0) flock(s->lock_fd, LOCK_UN);
    pthread_mutex_unlock(&f->mu);
}

/* Fetches the blocks this thread claimed: the shards whose locks it can
 * take at once first, all together; then, one by one, those another
 * process is fetching (their blocks may be there once its lock is let go). */
static int fetch_claimed(stk__fetcher *f, want *w, size_t n, stk_error *err) {
    qsort(w, n, sizeof *w, by_shard_block);
    int rc = 0;
    bool *later = stk__calloc(n ? n : 1, sizeof *later);
    if (!later) return stk__err(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i && w[i].s == w[i - 1].s) {
            later[i] = later[i - 1];
            continue;
        }
        fshard *s = &f->sh[w[i].s];
        if ((rc = open_fds(s, err))) {
            /* The shards locked so far are let go below. */
            for (size_t j = i; j < n; j++) later[j] = true;
            break;
        }
        later[i] = !lock_try(s);
    }
    pthread_mutex_unlock(&f->mu);
    want *now = rc == 0 ? stk__calloc(n ? n : 1, sizeof *now) : NULL;
    if (rc == 0 && !now) rc = stk__err(err, -ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!later[i]) now[k++] = w[i];
    if (rc == 0 && k) rc = fetch_locked(f, now, k, err);
    for (size_t i = 0, j = 0; now && i < n; i++)
        if (!later[i]) w[i] = now[j++];
    for (size_t i = 0; i < n; i++)
        if (!later[i] && (i == 0 || w[i].s != w[i - 1].s)) lock_drop(f, &f->sh[w[i].s]);
    /* The shards another process holds, holding nothing else meanwhile. */
    for (size_t i = 0; rc == 0 && i < n;) {
        size_t j = i + 1;
        while (j < n && w[j].s == w[i].s) j++;
        if (later[i]) {
            fshard *s = &f->sh[w[i].s];
            if ((rc = lock_wait(f, s, err))) break;
            rc = fetch_locked(f, w + i, j - i, err);
            lock_drop(f, s);
        }
        i = j;
    }
    stk__free(now);
    stk__free(later);
    return rc;
}

/* Notes how a fetch of this process ended (under mu): the first failure
 * since the last success is kept as the cause a later wait names; a
 * timeout is counted, and kept, for the readers that waited on the fetch
 * (see ensure). */
static void note_fetch(stk__fetcher *f, int rc, const stk_error *e) {
    if (rc == STK_ETIMEOUT) {
        f->timeouts++;
        f->timeout.code = rc;
        snprintf(f->timeout.message, sizeof f->timeout.message, "%s", e ? e->message : "");
    }
    if (rc == 0) f->cause.code = 0;
    else if (f->cause.code == 0) {
        f->cause.code = rc;
        snprintf(f->cause.message, sizeof f->cause.message, "%s", e ? e->message : "");
    }
}

/* Stamps the shards of the blocks a fetch that timed out left absent
 * (under mu). */
static void stamp_timeout(stk__fetcher *f, const want *w, size_t n, int rc) {
    if (rc != STK_ETIMEOUT) return;
    uint64_t now = stk__now_ns();
    for (size_t i = 0; i < n; i++)
        if (!w[i].got) f->sh[w[i].s].timed_out_ns = now;
}

static int ensure(void *ctx, const stk__range *r, size_t n, stk_error *err) {
    stk__fetcher *f = ctx;
    const stk_dataset *ds = f->ds;
    int rc = 0;
    want *w = NULL;
    size_t cap = 0, failed = 0; /* w[0..failed): claimed by a fetch that failed */
    uint64_t seen = UINT64_MAX;  /* f->timeouts when this reader began to wait */
    pthread_mutex_lock(&f->mu);
    if (f->limited) stk__budget_hold(f, r, n);
    for (;;) {
        size_t nw = 0;
        bool waiting = false;
        for (size_t i = 0; i < n; i++) {
            fshard *s = &f->sh[r[i].shard];
            if (s->complete) continue;
            if (s->changed) {
                rc = s->changed->code;
                if (err) *err = *s->changed;
                break;
            }
            const stk__shard *sh = &ds->shards[r[i].shard];
            uint64_t b0, b1;
            /* Header, index, blocks: fetched at open. */
            if (!stk__range_blocks(sh, r[i].lo, r[i].hi, &b0, &b1)) continue;
            for (uint64_t b = b0; b <= b1; b++) {
                if (s->state[b] == B_PRESENT) continue;
                if (s->state[b] == B_BAD) {
                    rc = bad_block(f, r[i].shard, b, err);
                    break;
                }
                if (s->state[b] == B_FLIGHT) {
                    waiting = true;
                    continue;
                }
                /* A fetch of this shard's blocks timed out within the last
                 * deadline (the read-ahead's, often, just before this
                 * reader came for the same blocks): the server has given
                 * nothing for a whole deadline, and fetching them again
                 * would wait out a second one. */
                if (s->timed_out_ns && f->timeout.code &&
                    stk__now_ns() - s->timed_out_ns < (uint64_t)(f->timeout_s * 1e9)) {
                    rc = f->timeout.code;
                    if (err) *err = f->timeout;
                    break;
                }
                if (!stk__grow(&w, &cap, nw, sizeof *w, 64)) {
                    rc = stk__err(err, -ENOMEM, "out of memory");
                    break;
                }
                s->state[b] = B_FLIGHT;
                w[nw++] = (want){.s = (uint32_t)r[i].shard, .b = b};
            }
            if (rc) break;
        }
        if (rc == 0 && (nw || waiting) && seen != UINT64_MAX && f->timeouts != seen) {
            /* A fetch timed out while this reader waited, and blocks it
             * needs are still not here: the server gave nothing within the
             * deadline, which has passed for this read too.  Fetching them
             * again, or waiting on the next round that claimed them (the
             * read-ahead goes on at once), would wait out another. */
            rc = f->timeout.code;
            if (err) *err = f->timeout;
        }
        if (rc) {
            for (size_t i = 0; i < nw; i++) f->sh[w[i].s].state[w[i].b] = B_ABSENT;
            break;
        }
        if (nw == 0 && !waiting) break;
        if (nw == 0) {
            /* Another thread fetches them: wait, then look again. */
            if (seen == UINT64_MAX) seen = f->timeouts;
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        pthread_mutex_unlock(&f->mu);
        /* Under a budget, room is made and allocated first.  What was
         * allocated for blocks whose fetch failed is given back where no
         * reader of any process holds them (stk__budget_unreserve); what
         * another process holds stays allocated, and counted: it is about
         * to fetch into it, or the next open that finds itself alone gives
         * it back. */
        rc = f->limited ? stk__budget_reserve(f, w, nw, true, err) : 0;
        bool fetched = rc == 0;
        if (fetched) rc = fetch_claimed(f, w, nw, err);
        pthread_mutex_lock(&f->mu);
        if (fetched) note_fetch(f, rc, err);
        if (fetched) stamp_timeout(f, w, nw, rc);
        for (size_t i = 0; i < nw; i++)
            f->sh[w[i].s].state[w[i].b] = w[i].got ? B_PRESENT : w[i].bad ? B_BAD : B_ABSENT;
        if (rc == 0) name_complete(f, w, nw);
        pthread_cond_broadcast(&f->cv);
        if (rc) {
            failed = fetched ? nw : 0;
            break;
        }
        seen = UINT64_MAX; /* its own fetch went through: a wait begins anew */
    }
    if (rc && f->limited) {
        stk__budget_release_locked(f, r, n);
        stk__budget_unreserve(f, w, failed);
    }
    pthread_mutex_unlock(&f->mu);
    stk__free(w);
    return rc;
}

/* ---- read-ahead ---- */

/* Fetches what is queued, in the order it came, a round of at most this
 * many bytes at a time (so that closing waits for one round at most). */
#define AHEAD_ROUND (64ull << 20)

/* Between two claimed blocks of a shard at most this many absent ones are
 * claimed too (1 MiB of 64 KiB blocks). */
#define GAP_BLOCKS 16

/* For a reader that reads every byte this epoch (f->ahead_whole): the
 * absent blocks between claimed ones of a shard, up to GAP_BLOCKS apart,
 * are claimed too, so that a round's scattered blocks (a random order's)
 * go as a few large ranges instead of many small ones; they are read later
 * in the epoch anyway.  Under mu; returns the new count. */
static size_t fill_gaps(stk__fetcher *f, want **wp, size_t *cap, size_t nw) {
    want *w = *wp;
    qsort(w, nw, sizeof *w, by_shard_block);
    size_t n = nw;
    for (size_t i = 0; i + 1 < nw; i++) {
        if (w[i].s != w[i + 1].s || w[i + 1].b - w[i].b <= 1 ||
            w[i + 1].b - w[i].b > GAP_BLOCKS + 1)
            continue;
        fshard *s = &f->sh[w[i].s];
        for (uint64_t b = w[i].b + 1; b < w[i + 1].b; b++) {
            if (s->state[b] != B_ABSENT) continue;
            if (!stk__grow(wp, cap, n, sizeof *w, 256)) return n;
            w = *wp;
            s->state[b] = B_FLIGHT;
            w[n++] = (want){.s = w[i].s, .b = b};
        }
    }
    return n;
}

/* Drops the queued ranges (hints all of them: a reader fetches what it
 * needs).  Under f->mu. */
static void ahead_drop(stk__fetcher *f) {
    f->naq = 0;
    f->aq_bytes = 0;
}

static void *ahead_main(void *arg) {
    stk__fetcher *f = arg;
    stk__thread_name("stk-ahead");
    const stk_dataset *ds = f->ds;
    want *w = NULL;
    size_t cap = 0;
    stk__range *r = NULL;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->ahead_stop && f->naq == 0) pthread_cond_wait(&f->ahead_cv, &f->mu);
        if (f->ahead_stop) break;
        /* The oldest queued ranges, up to a round's bytes. */
        size_t k = 0;
        uint64_t bytes = 0;
        while (k < f->naq && (k == 0 || bytes < AHEAD_ROUND)) bytes += f->aq[k].hi - f->aq[k].lo, k++;
        stk__range *taken = stk__malloc(k * sizeof *taken);
        if (!taken) {
            /* Out of memory: the queued ranges are dropped and the thread
             * goes on (had it ended, ahead() would queue ranges that
             * nothing takes, without bound). */
            ahead_drop(f);
            continue;
        }
        memcpy(taken, f->aq, k * sizeof *taken);
        memmove(f->aq, f->aq + k, (f->naq - k) * sizeof *f->aq);
        f->naq -= k;
        f->aq_bytes -= STK__MIN(f->aq_bytes, bytes);
        stk__free(r);
        r = taken;
        /* Claim what nobody has or fetches (no hold: what arrives may be
         * evicted before it is read, under a budget; it is then fetched
         * again when read). */
        size_t nw = 0;
        for (size_t i = 0; i < k; i++) {
            fshard *s = &f->sh[r[i].shard];
            uint64_t b0, b1;
            if (s->complete || !stk__range_blocks(&ds->shards[r[i].shard], r[i].lo, r[i].hi, &b0, &b1))
                continue;
            for (uint64_t b = b0; b <= b1; b++) {
                if (s->state[b] != B_ABSENT) continue;
                /* Under a budget, the disk may say more than this process
                 * knows. */
                if (s->holds && stk__present_on_disk(s, b)) {
                    s->state[b] = B_PRESENT;
                    continue;
                }
                if (!stk__grow(&w, &cap, nw, sizeof *w, 256)) break;
                s->state[b] = B_FLIGHT;
                w[nw++] = (want){.s = r[i].shard, .b = b};
            }
        }
        if (nw && f->ahead_whole) nw = fill_gaps(f, &w, &cap, nw);
        if (nw == 0) continue;
        /* Held like a reader's: no process evicts them, or the room made
         * for them, until they are fetched. */
        if (f->limited) stk__budget_hold_wants(f, w, nw);
        pthread_mutex_unlock(&f->mu);
        stk_error err = {0};
        int rc = f->limited ? stk__budget_reserve(f, w, nw, false, &err) : 0;
        bool fetched = rc == 0;
        if (fetched) rc = fetch_claimed(f, w, nw, &err);
        pthread_mutex_lock(&f->mu);
        if (fetched) note_fetch(f, rc, &err);
        if (fetched) stamp_timeout(f, w, nw, rc);
        for (size_t i = 0; i < nw; i++) {
            fshard *s = &f->sh[w[i].s];
            uint8_t st = w[i].got ? B_PRESENT : w[i].bad ? B_BAD : B_ABSENT;
            if (st == B_PRESENT && s->holds && s->holds[w[i].b]) {
                /* A reader of this process holds it, and read its presence
                 * when it took its lock, while the block was in flight:
                 * what the disk says now stands until that reader lets go
                 * (this thread held nothing, and another process may have
                 * evicted what it found present). */
                if (!stk__present_on_disk(s, w[i].b)) st = B_ABSENT;
            }
            s->state[w[i].b] = st;
        }
        if (f->limited) stk__budget_release_wants(f, w, nw);
        if (f->limited && fetched && rc) stk__budget_unreserve(f, w, nw);
        if (rc == 0) name_complete(f, w, nw);
        /* A failure is left to the reader, which fetches the blocks again
         * and reports what it gets. */
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    stk__free(r);
    stk__free(w);
    return NULL;
}

static void ahead(void *ctx, const stk__range *r, size_t n, bool whole) {
    stk__fetcher *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->ahead_whole = whole && !f->limited;
    if (f->ahead_stop) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    if (f->naq + n > f->cap_aq) {
        size_t nc = STK__MAX(f->cap_aq * 2, f->naq + n + 64);
        stk__range *g = stk__realloc(f->aq, nc * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&f->mu);
            return; /* read-ahead is a hint */
        }
        f->aq = g;
        f->cap_aq = nc;
    }
    for (size_t i = 0; i < n; i++) {
        f->aq[f->naq++] = r[i];
        f->aq_bytes += r[i].hi - r[i].lo;
    }
    if (!f->ahead_started) {
        f->ahead_started = pthread_create(&f->ahead_tid, NULL, ahead_main, f) == 0;
        if (!f->ahead_started) ahead_drop(f); /* (no thread to take them) */
    }
    pthread_cond_signal(&f->ahead_cv);
    pthread_mutex_unlock(&f->mu);
}

static void release(void *ctx, const stk__range *r, size_t n) {
    stk__fetcher *f = ctx;
    if (!f->limited) return;
    pthread_mutex_lock(&f->mu);
    stk__budget_release_locked(f, r, n);
    pthread_mutex_unlock(&f->mu);
}
