/*
 * http.c: fetching objects with libcurl's multi interface: many requests in
 * flight on a few reused connections, S3 requests signed with SigV4, and
 * every failure that can pass (5xx, 408, 429, SlowDown, resets, timeouts,
 * stalls) retried with exponential backoff and jitter, Retry-After
 * honoured.  Each request has a deadline, counted from when it was sent or
 * from the last byte of its object that came: a transfer with no byte for
 * half of it is abandoned and sent again, no try starts past it (nor past
 * the retry budget, or the number of tries), so a run never hangs on the
 * network and a failure ends when the user said.  What no retry can cure (a
 * redirect loop, TLS, a name that does not resolve, most 4xx, a wrong
 * Content-Range, a changed object) fails at once.  A connection refused by
 * a server that has not yet answered this client (a wrong port, a server
 * not started) is tried OPEN_CONNECT_TRIES times, quickly, not for the
 * whole deadline: at open the user is waiting, and a server that never
 * answered is more likely misnamed than restarting.
 */
#define _GNU_SOURCE
#include "remote.h"

#include "curl.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

struct stk__http {
    const stk__url *url;
    stk__aws *aws;
    CURLM *multi;
    int retries;       /* attempts after the first, per request */
    double timeout_s;  /* the deadline: no byte of the object for this long */
    double retry_s;    /* the retry budget, from a request's first failure */
    bool retry_set;    /* retry_s from $STOKER_REMOTE_RETRY_SECONDS */
    int connections;
    unsigned rng;
    /* Counters a fetching thread adds to while another may read them
     * (stk__http_stats, from remote_stats()): atomic, relaxed. */
    _Atomic uint64_t st_requests, st_retries, st_bytes, st_network_ns;
    double rate;     /* bytes/s a transfer typically gets (moving average) */
    int late;        /* a transfer taking this many times longer than that
                      * rate predicts is sent again (0: never) */
    /* Whether a server ever answered one of this client's requests (any
     * status): until then a refused connection is not given the full
     * retries.  Written and read by whichever thread runs requests. */
    _Atomic bool answered;
    const int *beat; /* files whose mtime says "alive" (stk__http_beat) */
    size_t nbeat;
    uint64_t beat_ns; /* last beat */
};


static long env_long(const char *name, long dflt, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < lo || x > hi ? dflt : x;
}

/* Seconds in (0, 3600], else dflt. */
static double env_seconds(const char *name, double dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    double x = strtod(v, &end);
    return *end || !(x > 0 && x <= 3600) ? dflt : x;
}

double stk__remote_timeout(double opt) {
    return opt > 0 ? opt : env_seconds("STOKER_REMOTE_TIMEOUT", 30);
}

void stk__http_deadline(stk__http *h, double timeout_s) {
    if (!(timeout_s > 0)) return;
    h->timeout_s = timeout_s;
    if (!h->retry_set) h->retry_s = timeout_s;
}

int stk__http_new(const stk__url *u, stk__aws *aws, stk__http **out, stk_error *err) {
    *out = NULL;
    int lrc = stk__curl_load(u->text, err);
    if (lrc) return lrc;
    stk__http *h = stk__calloc(1, sizeof *h);
    if (!h) return stk__err(err, -ENOMEM, "out of memory");
    h->url = u;
    h->aws = u->scheme == STK__URL_S3 ? aws : NULL;
    h->retries = (int)env_long("STOKER_REMOTE_RETRIES", 8, 0, 100);
    h->timeout_s = stk__remote_timeout(0);
    h->retry_s = env_seconds("STOKER_REMOTE_RETRY_SECONDS", 0);
    h->retry_set = h->retry_s > 0;
    if (!h->retry_set) h->retry_s = h->timeout_s;
    h->connections = (int)env_long("STOKER_REMOTE_CONNECTIONS", 16, 1, 1024);
    h->late = (int)env_long("STOKER_REMOTE_LATE", 4, 0, 1000);
    h->rng = (unsigned)stk__now_ns() ^ (unsigned)getpid();
    h->multi = curl_multi_init();
    if (!h->multi) {
        stk__free(h);
        return stk__err(err, -ENOMEM, "libcurl: cannot make a multi handle");
    }
    curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->connections);
    curl_multi_setopt(h->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)h->connections);
    *out = h;
    return 0;
}

void stk__http_free(stk__http *h) {
    if (!h) return;
    curl_multi_cleanup(h->multi);
    stk__free(h);
}

void stk__http_stats(const stk__http *h, stk_remote_stats *out) {
    memset(out, 0, sizeof *out);
    out->requests = atomic_load_explicit(&h->st_requests, memory_order_relaxed);
    out->retries = atomic_load_explicit(&h->st_retries, memory_order_relaxed);
    out->bytes_fetched = atomic_load_explicit(&h->st_bytes, memory_order_relaxed);
    out->network_seconds =
        (double)atomic_load_explicit(&h->st_network_ns, memory_order_relaxed) / 1e9;
}

static void count(_Atomic uint64_t *c, uint64_t v) {
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

uint64_t stk__http_part_bytes(void) {
    return (uint64_t)env_long("STOKER_REMOTE_PART_MB", 8, 1, 1024) << 20;
}

void stk__http_beat(stk__http *h, const int *fds, size_t n) {
    h->beat = fds;
    h->nbeat = fds ? n : 0;
    h->beat_ns = 0;
}

static void beat(stk__http *h) {
    if (!h->nbeat) return;
    uint64_t now = stk__now_ns();
    if (h->beat_ns && now - h->beat_ns < 500000000u) return;
    h->beat_ns = now;
    for (size_t i = 0; i < h->nbeat; i++) futimens(h->beat[i], NULL);
}

/* ---- one transfer ---- */

#define MAX_REDIRECTS 5
/* Tries of a request whose connection is refused before any server
 * answered this client: with the backoff's 0.1-0.2, 0.2-0.4 and 0.4-0.8 s
 * between them, the open fails within about 1.5 s. */
#define OPEN_CONNECT_TRIES 4

typedef struct xfer {
    stk__http *h;
    stk__fetch *f;
    CURL *e;
    struct curl_slist *headers;
    long status;      /* of the response being received */
    bool stale;       /* its ETag is not the pinned one */
    bool stalled;     /* abandoned: no byte for half the deadline */
    bool expired;     /* abandoned: the request's deadline passed */
    bool late;        /* abandoned: far slower than its siblings */
    bool badrange;    /* a 206 for another range than the one asked */
    uint64_t start_ns;
    uint64_t last_ns; /* when the last byte (or the request) went */
    char errbuf[CURL_ERROR_SIZE]; /* curl's own words on a failure */
} xfer;

static uint64_t secs_ns(double s) { return (uint64_t)(s * 1e9); }

/* The request's deadline: the timeout after it was first sent, or after
 * the last byte of its object came, whichever is later. */
static uint64_t deadline_ns(const stk__http *h, const stk__fetch *f) {
    uint64_t since = f->progress_ns > f->first_ns ? f->progress_ns : f->first_ns;
    return since + secs_ns(h->timeout_s);
}

static const char *what(const stk__fetch *f) { return f->what ? f->what : f->url; }

static size_t on_header(char *buf, size_t size, size_t n, void *arg) {
    xfer *x = arg;
    x->last_ns = stk__now_ns();
    stk__fetch_header(x->f, buf, size * n);
    return size * n;
}

/* Called once the headers of a final response are in: decides whether the
 * body is data and where it starts. */
static void response_started(xfer *x) {
    stk__fetch *f = x->f;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->status);
    f->status = x->status;
    if (x->status / 100 != 2) return;
    /* A server that ignored the range sends the whole object: its size, and
     * from byte 0. */
    bool ranged = f->lo || f->hi;
    if (ranged && x->status == 200 && f->object_size == UINT64_MAX) {
        f->skip = f->lo;
        curl_off_t cl = -1;
        if (curl_easy_getinfo(x->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
            cl >= 0)
            f->object_size = (uint64_t)cl;
    }
    if (f->want_etag && *f->want_etag && f->etag[0] && strcmp(f->etag, f->want_etag) != 0)
        x->stale = true;
    if (f->want_size && f->object_size != UINT64_MAX && f->object_size != f->want_size)
        x->stale = true;
    /* A 206 must be the range asked for: bytes of another range written
     * where these belong would be checked against the wrong checksums, and
     * a server that answers so answers so again. */
    if (ranged && x->status == 206 && !f->head) {
        uint64_t last = f->hi ? f->hi - 1
                              : f->object_size != UINT64_MAX ? f->object_size - 1 : f->range_last;
        if (f->range_first != f->lo || f->range_last != last) x->badrange = true;
    }
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg) {
    xfer *x = arg;
    stk__fetch *f = x->f;
    size_t len = size * n;
    x->last_ns = stk__now_ns();
    if (x->status == 0) response_started(x);
    if (x->status / 100 != 2) {
        size_t room = sizeof f->errbody - 1 - f->errlen;
        size_t k = len < room ? len : room;
        memcpy(f->errbody + f->errlen, buf, k);
        f->errlen += k;
        f->errbody[f->errlen] = '\0';
        return len;
    }
    if (x->stale || x->badrange) return 0; /* aborts the transfer */
    f->progress_ns = x->last_ns;
    count(&x->h->st_bytes, len);
    const char *p = buf;
    size_t k = len;
    if (f->skip) {
        size_t d = f->skip < k ? (size_t)f->skip : k;
        f->skip -= d;
        p += d;
        k -= d;
    }
    if (f->hi && f->lo + f->got + k > f->hi) k = (size_t)(f->hi - f->lo - f->got);
    if (!k) return len;
    if (f->fd >= 0) {
        int w = stk__pwrite_full(f->fd, p, k, f->fd_off + f->got);
        if (w != 0) {
            f->store_err = w < 0 ? w : -EIO;
            return 0;
        }
    } else {
        if (f->mem_len + k + 1 > f->mem_cap) {
            size_t cap = (f->mem_len + k + 1) * 2;
            uint8_t *m = stk__realloc(f->mem, cap);
            if (!m) {
                f->store_err = -ENOMEM;
                return 0;
            }
            f->mem = m;
            f->mem_cap = cap;
        }
        memcpy(f->mem + f->mem_len, p, k);
        f->mem_len += k;
        f->mem[f->mem_len] = '\0';
    }
    f->got += k;
    return len;
}

/* An upload's body, read from its file as curl sends it. */
static size_t on_read(char *buf, size_t size, size_t n, void *arg) {
    xfer *x = arg;
    stk__fetch *f = x->f;
    x->last_ns = f->progress_ns = stk__now_ns(); /* sending is progress too */
    size_t want = size * n;
    uint64_t left = f->up_len - f->up_sent;
    if (want > left) want = (size_t)left;
    if (!want) return 0;
    ssize_t got = stk__pread_full(f->up_fd, buf, want, f->up_off + f->up_sent);
    if (got != (ssize_t)want) {
        f->store_err = got < 0 ? (int)got : -EIO;
        return CURL_READFUNC_ABORT;
    }
    f->up_sent += want;
    return want;
}

/* Whether transfer x is to be abandoned now: its request's deadline
 * passed, or no byte came for half of it (a stall, counted from the last
 * byte: curl's own low-speed limit averages over its window, and let a
 * transfer that stopped dead run on for seconds more), which leaves the
 * other half to a try sent again.  Checked by curl's progress callback and
 * by stk__http_run's loop, whichever comes first. */
static bool overdue(xfer *x, uint64_t now) {
    if (x->stalled || x->expired) return true;
    if (now > deadline_ns(x->h, x->f)) x->expired = true;
    else if (now - x->last_ns > secs_ns(x->h->timeout_s) / 2) x->stalled = true;
    return x->stalled || x->expired;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal, (void)ultotal, (void)ulnow;
    xfer *x = arg;
    const stk__http *h = x->h;
    const stk__fetch *f = x->f;
    uint64_t now = stk__now_ns();
    if (overdue(x, now)) return 1;
    /* Late: a range taking `late` times longer than the rate the others
     * get predicts (and over 2 s), though bytes still come: a slow server
     * or path, which a new request usually avoids. */
    if (h->late && h->rate > 0 && !f->head && f->hi > f->lo && dlnow >= 0 &&
        (uint64_t)dlnow < f->hi - f->lo) {
        double el = (double)(now - x->start_ns) / 1e9;
        double expect = (double)(f->hi - f->lo) / h->rate;
        if (el > 2.0 && el > h->late * expect) {
            x->late = true;
            return 1;
        }
    }
    return 0;
}

static int start(stk__http *h, xfer *x, stk_error *err) {
    stk__fetch *f = x->f;
    x->e = curl_easy_init();
    if (!x->e) return stk__err(err, -ENOMEM, "libcurl: cannot make a handle");
    x->status = 0;
    x->stale = false;
    x->stalled = false;
    x->expired = false;
    x->late = false;
    x->badrange = false;
    x->errbuf[0] = '\0';
    x->start_ns = x->last_ns = stk__now_ns();
    if (!f->first_ns) f->first_ns = x->start_ns;
    f->got = 0;
    f->mem_len = 0;
    f->errlen = 0;
    f->errbody[0] = '\0';
    f->status = 0;
    f->object_size = UINT64_MAX;
    f->range_first = f->range_last = UINT64_MAX;
    f->skip = 0;
    f->store_err = 0;
    CURL *e = x->e;
    curl_easy_setopt(e, CURLOPT_URL, f->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    /* Connecting is a stall's part of the deadline too (at most 10 s). */
    long cto = (long)(h->timeout_s * 500);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cto < 1 ? 1L : cto > 10000 ? 10000L : cto);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, h->aws ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, (long)MAX_REDIRECTS);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "stoker/" STK_VERSION_STRING);
    if (f->head) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    struct curl_slist *hd = NULL;
    if (f->method) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, f->method);
    if (f->put) {
        f->up_sent = 0;
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, x);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)f->up_len);
    } else if (f->post) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, f->post);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(f->post));
    }
    char range[64];
    if (!f->head && (f->lo || f->hi)) {
        if (f->hi) snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)f->lo,
                            (unsigned long long)(f->hi - 1));
        else snprintf(range, sizeof range, "%llu-", (unsigned long long)f->lo);
        curl_easy_setopt(e, CURLOPT_RANGE, range);
    }
    if (f->if_none_match && *f->if_none_match) {
        char inm[160];
        snprintf(inm, sizeof inm, "If-None-Match: %s", f->if_none_match);
        if (!(hd = curl_slist_append(hd, inm))) {
            curl_easy_cleanup(e);
            x->e = NULL;
            return stk__err(err, -ENOMEM, "out of memory");
        }
    }
    if (h->aws && h->aws->access_key) {
        char sig[128], tok[4096];
        snprintf(sig, sizeof sig, "aws:amz:%s:s3", h->aws->region);
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig);
        curl_easy_setopt(e, CURLOPT_USERNAME, h->aws->access_key);
        curl_easy_setopt(e, CURLOPT_PASSWORD, h->aws->secret_key);
        /* Signed with the headers: curl before 8.0 adds neither. */
        hd = curl_slist_append(hd, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (h->aws->session_token) {
            snprintf(tok, sizeof tok, "x-amz-security-token: %s", h->aws->session_token);
            hd = curl_slist_append(hd, tok);
        }
        if (!hd) {
            curl_easy_cleanup(e);
            x->e = NULL;
            return stk__err(err, -ENOMEM, "out of memory");
        }
    }
    if (hd) curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    x->headers = hd;
    count(&h->st_requests, 1);
    CURLMcode mc = curl_multi_add_handle(h->multi, e);
    if (mc != CURLM_OK) {
        curl_slist_free_all(hd);
        curl_easy_cleanup(e);
        x->e = NULL;
        return stk__err(err, -EIO, "libcurl: %s", curl_multi_strerror(mc));
    }
    return 0;
}

static void finish(stk__http *h, xfer *x) {
    curl_multi_remove_handle(h->multi, x->e);
    curl_easy_cleanup(x->e);
    curl_slist_free_all(x->headers);
    x->e = NULL;
    x->headers = NULL;
}

/* Delay before attempt `a` (1, 2, ...): 200 ms doubling up to 20 s, with
 * jitter (a random part of half), or the server's Retry-After. */
static int64_t backoff_ns(stk__http *h, const stk__fetch *f, int a) {
    int64_t ra = stk__retry_after_s(f->retry_after, time(NULL));
    if (ra >= 0) return (ra > 60 ? 60 : ra) * 1000000000;
    int64_t base = 200000000LL << (a - 1 > 7 ? 7 : a - 1);
    if (base > 20000000000LL) base = 20000000000LL;
    int64_t jitter = (int64_t)(rand_r(&h->rng) % 1000) * (base / 2) / 1000;
    return base / 2 + jitter;
}

/* What a finished attempt means: 0 done, 1 retry, or a final error in
 * f->rc / f->err. */
static int judge(stk__http *h, xfer *x, CURLcode cc) {
    stk__fetch *f = x->f;
    if (x->status == 0 && cc == CURLE_OK) response_started(x);
    long st = x->status;
    f->refused = false;
    if (st) atomic_store_explicit(&h->answered, true, memory_order_relaxed);
    char code[64];
    stk__xml_element(f->errbody, "Code", code, sizeof code);
    if (!f->region[0]) stk__xml_element(f->errbody, "Region", f->region, sizeof f->region);
    if (x->stale) {
        if (f->want_size && f->object_size != UINT64_MAX && f->object_size != f->want_size)
            f->rc = stk__err(&f->err, STK_ESTALE,
                             "%s: the object changed since the dataset was opened (it has %llu "
                             "bytes, the dataset %llu); a dataset must not be rewritten while "
                             "it is read",
                             what(f), (unsigned long long)f->object_size,
                             (unsigned long long)f->want_size);
        else
            f->rc = stk__err(&f->err, STK_ESTALE,
                             "%s: the object changed since the dataset was opened (ETag %s, "
                             "pinned %s); a dataset must not be rewritten while it is read",
                             what(f), f->etag, f->want_etag);
        return -1;
    }
    if (x->badrange) {
        char got[64] = "none";
        if (f->range_first != UINT64_MAX)
            snprintf(got, sizeof got, "bytes %llu-%llu", (unsigned long long)f->range_first,
                     (unsigned long long)f->range_last);
        f->rc = stk__err(&f->err, STK_ERANGE,
                         "%s: the server answered bytes %llu-%llu with another range (Content-"
                         "Range: %s); not retried: the server does not serve ranges as asked",
                         what(f), (unsigned long long)f->lo,
                         (unsigned long long)(f->hi ? f->hi - 1 : f->object_size - 1), got);
        return -1;
    }
    if (cc != CURLE_OK && f->put && f->store_err) {
        f->rc = stk__err(&f->err, f->store_err, "%s: cannot read what is to be sent: %s", what(f),
                         stk_strerror(f->store_err));
        return -1;
    }
    if (cc != CURLE_OK && x->late) {
        snprintf(f->err.message, sizeof f->err.message,
                 "late: %.1f s for %llu bytes where others get %.1f MB/s",
                 (double)(stk__now_ns() - x->start_ns) / 1e9,
                 (unsigned long long)(f->hi - f->lo), h->rate / 1e6);
        f->err.code = -EIO;
        return 1;
    }
    if (cc != CURLE_OK && x->expired) {
        snprintf(f->err.message, sizeof f->err.message, "stalled: no byte for %.1f s",
                 (double)(stk__now_ns() - x->last_ns) / 1e9);
        f->err.code = STK_ETIMEOUT;
        return 1;
    }
    if (cc != CURLE_OK && x->stalled) {
        snprintf(f->err.message, sizeof f->err.message,
                 "stalled: no byte for %g s (half the deadline)", h->timeout_s / 2);
        f->err.code = STK_ETIMEOUT;
        return 1;
    }
    if (cc != CURLE_OK) {
        switch (cc) {
        case CURLE_WRITE_ERROR:
            f->rc = stk__err(&f->err, f->store_err ? f->store_err : -EIO,
                             "%s: cannot store what arrived: %s", what(f),
                             stk_strerror(f->store_err ? f->store_err : -EIO));
            return -1;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_OUT_OF_MEMORY:
            f->rc = stk__err(&f->err, cc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL, "%s: %s",
                             what(f), curl_easy_strerror(cc));
            return -1;
        /* What no retry cures: answered at once. */
        case CURLE_TOO_MANY_REDIRECTS: {
            char *to = NULL;
            curl_easy_getinfo(x->e, CURLINFO_EFFECTIVE_URL, &to);
            f->rc = stk__err(&f->err, STK_EREDIRECT,
                             "%s: a redirect loop (more than %d redirects, the last to %s); not "
                             "retried",
                             what(f), MAX_REDIRECTS, to ? to : "?");
            return -1;
        }
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
            f->rc = stk__err(&f->err, STK_EHOST, "%s: the host's name does not resolve (%s); "
                             "not retried",
                             what(f), x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
            return -1;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ENGINE_SETFAILED:
        case CURLE_SSL_ENGINE_INITFAILED:
        case CURLE_USE_SSL_FAILED:
            f->rc = stk__err(&f->err, STK_ETLS, "%s: TLS failed (%s); not retried", what(f),
                             x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
            return -1;
        case CURLE_COULDNT_CONNECT: {
            /* Refused (or no route): a server restarting may take it
             * again, so it is retried; settle() cuts that short while no
             * server ever answered. */
            long os = 0;
            curl_easy_getinfo(x->e, CURLINFO_OS_ERRNO, &os);
            snprintf(f->err.message, sizeof f->err.message, "%s",
                     x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
            f->err.code = os > 0 ? -(int)os : -ECONNREFUSED;
            f->refused = true;
            return 1;
        }
        default:
            /* Connection reset, timeouts, stalls, partial bodies: all may
             * pass. */
            snprintf(f->err.message, sizeof f->err.message, "%s",
                     x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
            f->err.code = cc == CURLE_OPERATION_TIMEDOUT ? STK_ETIMEOUT : -EIO;
            return 1;
        }
    }
    if (st == 304 && f->if_none_match && *f->if_none_match) return 0;
    if (st / 100 == 2) {
        if (!f->head && f->hi && f->got != f->hi - f->lo) {
            snprintf(f->err.message, sizeof f->err.message, "short body: %llu of %llu bytes",
                     (unsigned long long)f->got, (unsigned long long)(f->hi - f->lo));
            f->err.code = -EIO;
            return 1;
        }
        return 0;
    }
    if (st >= 500 || st == 429 || st == 408 || strcmp(code, "SlowDown") == 0 ||
        strcmp(code, "RequestTimeout") == 0 || strcmp(code, "InternalError") == 0) {
        snprintf(f->err.message, sizeof f->err.message, "HTTP %ld%s%s", st, code[0] ? " " : "",
                 code);
        f->err.code = -EIO;
        return 1;
    }
    /* Credentials that expired are read again from their source; a HEAD's
     * error has no body to say so, so any 400 or 403 of one counts. */
    bool expired = strcmp(code, "ExpiredToken") == 0 ||
                   strcmp(code, "TokenRefreshRequired") == 0 ||
                   strcmp(code, "InvalidToken") == 0 || (f->head && !code[0]);
    if ((st == 400 || st == 403) && expired && h->aws) {
        bool changed = false;
        stk_error e2;
        if (stk__aws_reload(h->aws, &changed, &e2) == 0 && changed) {
            snprintf(f->err.message, sizeof f->err.message, "HTTP %ld %s", st, code);
            f->err.code = -EACCES;
            return 1;
        }
    }
    if (st == 404) {
        f->rc = stk__err(&f->err, -ENOENT, "%s: not found (HTTP 404%s%s)", what(f),
                         code[0] ? " " : "", code);
    } else if (st == 403 || st == 401) {
        f->rc = stk__err(&f->err, -EACCES,
                         "%s: access denied (HTTP %ld%s%s); check the credentials "
                         "(AWS_ACCESS_KEY_ID, AWS_PROFILE) and the object's permissions",
                         what(f), st, code[0] ? " " : "", code);
    } else if (st == 301 || (st == 400 && (strcmp(code, "AuthorizationHeaderMalformed") == 0 ||
                                           strcmp(code, "PermanentRedirect") == 0))) {
        f->rc = stk__err(&f->err, -EINVAL,
                         "%s: the bucket is in another region%s%s (HTTP %ld%s%s); set "
                         "AWS_REGION",
                         what(f), f->region[0] ? ": " : "", f->region, st, code[0] ? " " : "",
                         code);
    } else if (st == 416) {
        f->rc = stk__err(&f->err, STK_ESTALE,
                         "%s: the object is shorter than the dataset says (HTTP 416): it "
                         "changed since the dataset was written",
                         what(f));
    } else {
        f->rc = stk__err(&f->err, st / 100 == 4 ? STK_EHTTP : -EIO, "%s: HTTP %ld%s%s%s",
                         what(f), st, code[0] ? " " : "", code,
                         st / 100 == 4 ? "; not retried" : "");
    }
    return -1;
}

/* A finished (or abandoned) attempt x, curl's result cc: done, sent again
 * after its backoff, or given up (out of tries, past its deadline or its
 * retry budget).  Returns whether the request is over. */
static bool settle(stk__http *h, xfer *x, CURLcode cc) {
    int v = judge(h, x, cc);
    finish(h, x);
    stk__fetch *fx = x->f;
    uint64_t now = stk__now_ns();
    uint64_t took = now - x->start_ns;
    if (v == 0 && !fx->head && fx->got >= (16u << 10) && took > 0) {
        /* What a transfer typically gets (small ones say more about
         * latency than rate, and are left out). */
        double r = (double)fx->got * 1e9 / (double)took;
        h->rate = h->rate > 0 ? 0.8 * h->rate + 0.2 * r : r;
    }
    if (v != 1) return true;
    if (!fx->failed_ns) fx->failed_ns = now;
    /* A late one goes again at once: the server was not busy. */
    uint64_t at = now + (uint64_t)(x->late ? 0 : backoff_ns(h, fx, fx->attempts));
    uint64_t dl = deadline_ns(h, fx), budget = fx->failed_ns + secs_ns(h->retry_s);
    char last[STK_ERROR_MAX];
    snprintf(last, sizeof last, "%s", fx->err.message);
    double spent = (double)(now - fx->first_ns) / 1e9;
    if (fx->refused && fx->attempts >= OPEN_CONNECT_TRIES &&
        !atomic_load_explicit(&h->answered, memory_order_relaxed)) {
        fx->rc = stk__err(&fx->err, fx->err.code,
                          "%s: cannot connect (%s) after %d attempts in %.1f s; check the "
                          "URL's host and port, and that the server is running",
                          what(fx), last, fx->attempts, spent);
        return true;
    }
    if (fx->attempts > h->retries) {
        fx->rc = stk__err(&fx->err, fx->err.code ? fx->err.code : -EIO,
                          "%s: gave up after %d attempts; the last: %s", what(fx), fx->attempts,
                          last);
        return true;
    }
    if (at > dl || at > budget) {
        /* The next try would start too late: given up now rather than
         * after a wait that cannot end well. */
        if (at > dl)
            fx->rc = stk__err(&fx->err, STK_ETIMEOUT,
                              "%s: gave up after %d attempts in %.1f s: no byte of it came "
                              "within the deadline of %g s (remote_timeout); the last: %s",
                              what(fx), fx->attempts, spent, h->timeout_s, last);
        else
            fx->rc = stk__err(&fx->err, STK_ETIMEOUT,
                              "%s: gave up after %d attempts in %.1f s: the next would start "
                              "past the retry budget of %g s (STOKER_REMOTE_RETRY_SECONDS); the "
                              "last: %s",
                              what(fx), fx->attempts, spent, h->retry_s, last);
        return true;
    }
    count(&h->st_retries, 1);
    fx->not_before_ns = (int64_t)at;
    return false;
}

/* stk__http_run and stk__http_run_or_stop: with `stop`, the first request
 * that fails for good ends the run, the others abandoned. */
static int run(stk__http *h, stk__fetch *f, size_t n, bool stop, stk_error *err) {
    if (n == 0) return 0;
    xfer *xs = stk__calloc(n, sizeof *xs);
    if (!xs) return stk__err(err, -ENOMEM, "out of memory");
    uint64_t t0 = stk__now_ns();
    size_t left = n;
    int active = 0;
    int rc = 0;
    size_t failed = n; /* with stop: the request that ended the run */
    for (size_t i = 0; i < n; i++) {
        xs[i].h = h;
        xs[i].f = &f[i];
        f[i].attempts = 0;
        f[i].not_before_ns = 0;
        f[i].first_ns = f[i].progress_ns = f[i].failed_ns = 0;
        f[i].done = false;
        f[i].rc = 0;
        memset(&f[i].err, 0, sizeof f[i].err);
    }
    /* Requests start in order; one waiting for its backoff lets later ones
     * go first. */
    while (left > 0) {
        beat(h);
        int64_t now = (int64_t)stk__now_ns();
        int64_t wake = now + 100000000;
        for (size_t i = 0; i < n && active < h->connections; i++) {
            stk__fetch *fi = &f[i];
            if (fi->done || xs[i].e) continue;
            if (fi->not_before_ns > now) {
                if (fi->not_before_ns < wake) wake = fi->not_before_ns;
                continue;
            }
            stk_error e;
            fi->attempts++;
            if (start(h, &xs[i], &e)) {
                fi->rc = e.code;
                fi->err = e;
                fi->done = true;
                left--;
                if (failed == n) failed = i;
                continue;
            }
            active++;
        }
        int running = 0;
        curl_multi_perform(h->multi, &running);
        CURLMsg *m;
        int q;
        while ((m = curl_multi_info_read(h->multi, &q))) {
            if (m->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            active--;
            if (settle(h, x, m->data.result)) {
                x->f->done = true;
                left--;
                if (x->f->rc && failed == n) failed = (size_t)(x - xs);
            }
        }
        /* Transfers past their deadline or stalled that curl has not called
         * back about (it calls the progress callback about once a second
         * when nothing comes). */
        uint64_t tnow = stk__now_ns();
        for (size_t i = 0; i < n; i++) {
            if (!xs[i].e || !overdue(&xs[i], tnow)) continue;
            active--;
            if (settle(h, &xs[i], CURLE_ABORTED_BY_CALLBACK)) {
                f[i].done = true;
                left--;
                if (f[i].rc && failed == n) failed = i;
            }
        }
        if (stop && failed < n) {
            for (size_t i = 0; i < n; i++) {
                if (f[i].done) continue;
                if (xs[i].e) finish(h, &xs[i]);
                f[i].rc = stk__err(&f[i].err, -ECANCELED, "%s: abandoned: %s failed", what(&f[i]),
                                   what(&f[failed]));
                f[i].done = true;
            }
            break;
        }
        if (left == 0) break;
        int64_t now2 = (int64_t)stk__now_ns();
        int ms = wake > now2 ? (int)((wake - now2) / 1000000) : 0;
        if (ms > 100) ms = 100;
        if (active > 0) curl_multi_poll(h->multi, NULL, 0, ms, NULL);
        else if (ms > 0) usleep((useconds_t)ms * 1000);
    }
    count(&h->st_network_ns, stk__now_ns() - t0);
    if (failed < n && stop) {
        rc = f[failed].rc;
        if (err) *err = f[failed].err;
    }
    for (size_t i = 0; i < n; i++)
        if (f[i].rc && rc == 0) {
            rc = f[i].rc;
            if (err) *err = f[i].err;
        }
    stk__free(xs);
    return rc;
}

int stk__http_run(stk__http *h, stk__fetch *f, size_t n, stk_error *err) {
    return run(h, f, n, false, err);
}

int stk__http_run_or_stop(stk__http *h, stk__fetch *f, size_t n, stk_error *err) {
    return run(h, f, n, true, err);
}
