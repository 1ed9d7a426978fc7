/*
 * remote.h: datasets in object stores (s3://bucket/prefix, https://host/path)
 * as the rest of libstoker reaches them.  url.c turns a dataset URL and the
 * AWS settings into object URLs; creds.c finds credentials, region and
 * endpoint the way AWS tools do; http.c fetches (libcurl, many requests in
 * flight, retries); cache.c keeps the local cache; open.c opens a remote
 * dataset through the cache.
 */
#ifndef STK_REMOTE_H
#define STK_REMOTE_H

#include "../core/internal.h"

#include <stdbool.h>

/* ---- url.c ---- */

enum { STK__URL_S3 = 1, STK__URL_HTTP = 2 };

/* A dataset's location. */
typedef struct stk__url {
    int scheme;   /* STK__URL_S3 or STK__URL_HTTP (http:// and https://) */
    char *text;   /* as given, without trailing '/' */
    char *bucket; /* s3: the bucket; NULL for HTTP */
    char *key;    /* s3: the dataset's key prefix, without leading or trailing
                   * '/' ("" for the bucket's root); HTTP: the URL's path
                   * without trailing '/' */
    char *origin; /* HTTP: "http(s)://host[:port]"; NULL for s3 */
} stk__url;

/* Whether `path` names a remote dataset (s3://, http://, https://). */
bool stk__is_remote(const char *path);
/* Refuses a path that is a URL of a scheme stoker cannot read (gs://,
 * az://, hdfs://, file://...), unless a local file or directory has that
 * very name: -EINVAL, the message naming the schemes that are read and,
 * for the usual ones, what to do instead (a GCS bucket through its
 * S3-compatible endpoint).  0 for anything else: a local path, s3://,
 * http(s)://. */
int stk__url_scheme_check(const char *path, stk_error *err);
/* Parses a dataset URL.  -EINVAL (the message names the URL and says what
 * is wrong: no bucket, an empty host, a query or fragment...) */
int stk__url_parse(const char *text, stk__url *out, stk_error *err);
void stk__url_free(stk__url *u);

/* ---- creds.c ---- */

/* What signs and routes S3 requests, found as the AWS CLI finds them:
 *  credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *    else the profile AWS_PROFILE (default "default") of the shared
 *    credentials file (AWS_SHARED_CREDENTIALS_FILE, default
 *    ~/.aws/credentials) then of the config file (AWS_CONFIG_FILE, default
 *    ~/.aws/config, section "[profile NAME]", or "[default]"); none found,
 *    or AWS_NO_SIGN_REQUEST=true: anonymous (unsigned requests);
 *  region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else
 *    "us-east-1";
 *  endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *    `endpoint_url`, else AWS's own (https://s3.REGION.amazonaws.com).  A
 *    custom endpoint is addressed path-style (ENDPOINT/BUCKET/KEY), AWS's
 *    virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com/KEY) unless the
 *    bucket name has dots, or AWS_S3_ADDRESSING_STYLE=path. */
typedef struct stk__aws {
    char *access_key;    /* NULL: anonymous */
    char *secret_key;
    char *session_token; /* NULL: none */
    char *region;        /* never NULL once loaded */
    char *endpoint;      /* "scheme://host[:port]" without trailing '/'; never NULL */
    bool path_style;
    /* Where the credentials came from, to read them again when they expire. */
    bool from_env;
    char *profile;
    char *creds_file;    /* the file they were read from, or NULL */
} stk__aws;

/* Loads the settings above.  0, or -EINVAL for a malformed setting (an
 * endpoint that is not a URL, a file that cannot be parsed: named). */
int stk__aws_load(stk__aws *out, stk_error *err);
/* Reads the credentials again from their source (for a session token that
 * expired: the environment or the file may hold a fresh one).  *changed
 * says whether they differ.  0 or as stk__aws_load. */
int stk__aws_reload(stk__aws *a, bool *changed, stk_error *err);
void stk__aws_free(stk__aws *a);

/* The URL of object `name` ("" for the dataset's prefix itself; else a
 * relative name such as "manifest.json") of dataset `u`: for s3 by the
 * endpoint and addressing style of `a`, for HTTP the dataset URL + "/" +
 * name.  Characters outside RFC 3986's unreserved set and '/' are
 * percent-encoded in the key.  NULL when out of memory. */
char *stk__url_object(const stk__url *u, const stk__aws *a, const char *name);

/* ---- http.c ---- */

/* One request: GET of bytes [lo, hi) of an object (hi 0: to its end), or a
 * HEAD.  The body goes to fd at fd_off + (its offset in the range), or, with
 * fd < 0, into `mem` (grown as needed, from stk__malloc; the caller frees
 * it).  With `want_etag` set, a response carrying another ETag is
 * STK_ESTALE: the object changed since it was pinned; with `want_size`
 * set, so is a response that gives the object another size.  A 206's
 * Content-Range must be the range asked for (STK_ERANGE otherwise, not
 * retried). */
typedef struct stk__fetch {
    const char *url;
    const char *what;      /* names the object in messages (the URL if NULL) */
    uint64_t lo, hi;
    bool head;
    int fd;
    uint64_t fd_off;
    const char *want_etag; /* NULL or "": not checked */
    uint64_t want_size;    /* the object's size; 0: not checked */
    const char *if_none_match; /* an ETag: "not modified" (304) is then a
                                * success, with status 304 and no body */
    /* A request with a body (uploads): PUT of bytes [up_off, up_off +
     * up_len) of file up_fd, or POST of text `post` (NULL: none).  The
     * response body goes where a GET's would (fd -1: mem). */
    bool put;
    const char *method; /* another method than GET/PUT/POST (DELETE), or NULL */
    int up_fd;
    uint64_t up_off, up_len, up_sent;
    const char *post;
    /* results */
    uint8_t *mem;
    size_t mem_len, mem_cap;
    long status;
    char etag[128];         /* as sent, quotes included; "" if none */
    char last_modified[64];
    uint64_t object_size;   /* Content-Range's total, else Content-Length of a
                             * whole-object response; UINT64_MAX if unknown */
    uint64_t got;           /* body bytes kept */
    uint64_t range_first, range_last; /* a 206's Content-Range ("bytes
                                       * first-last/size"); UINT64_MAX if
                                       * none or not understood */
    /* private to http.c */
    int attempts;
    int64_t not_before_ns;
    uint64_t first_ns;    /* when its first attempt was sent */
    uint64_t progress_ns; /* when a byte of the object last came (or went) */
    uint64_t failed_ns;   /* when its first attempt failed; 0: none yet */
    uint64_t skip;          /* a server that ignored the range: bytes to drop */
    char errbody[512];
    size_t errlen;
    char retry_after[32];
    char region[64];
    int store_err; /* why the body could not be kept (-ENOSPC, -ENOMEM...) */
    bool refused;  /* the last attempt could not connect */
    bool done;
    int rc;
    stk_error err;
} stk__fetch;

/* ---- parse.c: what servers send ---- */

/* Takes one response header line (as received, line end included) into f:
 * ETag, Last-Modified, Retry-After, x-amz-bucket-region, the object's size
 * from Content-Range (or Content-Length of an unranged request); a status
 * line starts a new response and forgets the last one's. */
void stk__fetch_header(stk__fetch *f, const char *buf, size_t len);
/* The text of the first element `tag` of an XML body (NUL-terminated) into
 * out (cap > 0), trimmed and cut to fit; "" when there is none. */
void stk__xml_element(const char *body, const char *tag, char *out, size_t cap);
/* Retry-After's delay in seconds from `now` (seconds or an HTTP date; a
 * date past is 0), or -1 when v is absent or not understood. */
int64_t stk__retry_after_s(const char *v, int64_t now);

typedef struct stk__http stk__http;

/* A client for the dataset URL `u` (signing S3 requests with `aws`, which
 * must outlive it; NULL for HTTP).  Limits from the environment:
 * STOKER_REMOTE_RETRIES, STOKER_REMOTE_TIMEOUT, STOKER_REMOTE_RETRY_SECONDS,
 * STOKER_REMOTE_CONNECTIONS. */
int stk__http_new(const stk__url *u, stk__aws *aws, stk__http **out, stk_error *err);
void stk__http_free(stk__http *h);
/* Sets h's deadline (seconds > 0; see stk__remote_timeout); the retry
 * budget follows it unless $STOKER_REMOTE_RETRY_SECONDS sets its own. */
void stk__http_deadline(stk__http *h, double timeout_s);
/* Runs the n requests, many at once, each retried as stoker.h says.  Returns
 * 0 when every one succeeded, else the first failure (in request order)
 * with its message; the others ran to their end.
 *
 * Each request ends within its deadline: T seconds (stk__http_deadline)
 * after it was first sent or after the last byte of its object came,
 * whichever is later.  A transfer with no byte for T/2 is abandoned and
 * sent again (the other half of the deadline is the retry's); no try
 * starts past the deadline, nor past the retry budget (counted from the
 * first failure); either passing is STK_ETIMEOUT, naming the last cause.
 * What no retry can cure fails at once, each with a code of its own: a
 * redirect loop (STK_EREDIRECT), a TLS failure (STK_ETLS), a host that
 * does not resolve (STK_EHOST), 4xx other than 408 and 429 (404 -ENOENT,
 * 401 and 403 -EACCES, a wrong region -EINVAL, 416 STK_ESTALE, others
 * STK_EHTTP), a Content-Range other than the range asked for
 * (STK_ERANGE), an object whose ETag or size changed (STK_ESTALE).  A
 * connection refused before any server answered h fails after a few quick
 * tries (about 1.5 s) with the socket's errno (-ECONNREFUSED, or
 * -EHOSTUNREACH, -ENETUNREACH); once one has answered, it is retried like
 * any failure that can pass. */
int stk__http_run(stk__http *h, stk__fetch *f, size_t n, stk_error *err);
/* stk__http_run for a caller whose requests are worth nothing unless all
 * succeed: the first to fail for good ends the run, and is the failure
 * returned; the others are abandoned (-ECANCELED, their bytes so far
 * written), so that the run ends within one deadline of that failure
 * instead of waiting out the deadlines of requests still queued behind
 * the connections, one after another. */
int stk__http_run_or_stop(stk__http *h, stk__fetch *f, size_t n, stk_error *err);
/* Counters since the client was made. */
void stk__http_stats(const stk__http *h, stk_remote_stats *out);
/* The bytes of one range request: $STOKER_REMOTE_PART_MB MiB, default 8. */
uint64_t stk__http_part_bytes(void);
/* The deadline of a request, in seconds: `opt` when > 0 (an open's
 * stk_open_options.remote_timeout), else $STOKER_REMOTE_TIMEOUT, else 30. */
double stk__remote_timeout(double opt);
/* While h runs requests, the modification times of files fds[0..n) are set
 * to now every half second or so: a heartbeat that tells processes waiting
 * for the locks on those files that their holder is alive.  NULL, 0 stops.
 * fds must stay open until then. */
void stk__http_beat(stk__http *h, const int *fds, size_t n);

/* ---- cache.c ---- */

/* Takes the exclusive flock on fd, waiting while its holder shows life: a
 * holder beats the file (stk__http_beat) while it works, so a file whose
 * time stood still for limit_ns means a holder that was stopped or hangs.
 * Returns 0 once taken, 1 when the holder showed no life for limit_ns (or
 * give_up(ctx), when given, says to stop waiting), else -errno.  *silent_ns
 * is then how long it showed none. */
int stk__flock_alive(int fd, int64_t limit_ns, bool (*give_up)(void *ctx), void *ctx,
                     int64_t *silent_ns);

/* The cache directory: `opt`, else $STOKER_CACHE_DIR, else
 * $XDG_CACHE_HOME/stoker, else $HOME/.cache/stoker; created if absent.
 * *out from stk__malloc. */
int stk__cache_root(const char *opt, char **out, stk_error *err);
/* Bytes the cache may still take on the file system of `dir`: its free
 * space less a reserve of 5% of its size. */
uint64_t stk__cache_room(const char *dir);
/* Disk space the files of directory `dir` take (their blocks). */
uint64_t stk__cache_du(const char *dir);

/* ---- lazy.c ---- */

/* a + sep + b, from stk__malloc (NULL when out of memory): a shard's other
 * files' names, an object's name for messages. */
char *stk__concat(const char *a, const char *sep, const char *b);

typedef struct stk__fetcher stk__fetcher;

/* A fetcher for the n shards of dataset `url_text`, its requests under a
 * deadline of timeout_s seconds (stk__remote_timeout). */
int stk__fetcher_new(const char *url_text, size_t n, double timeout_s, stk__fetcher **out,
                     stk_error *err);
/* Shard i: its object's URL, its name for messages, its final path in the
 * cache (the .part, .present and .lock files are named after it), the pin
 * its responses must carry, and whether the cache holds it whole. */
int stk__fetcher_shard(stk__fetcher *f, size_t i, const char *url, const char *name,
                       const char *final, const char *pin, bool complete, stk_error *err);
/* Makes `ds` (opened from the cache) lazy, its bytes fetched by f, which it
 * then owns; the presence files are read unless `trust_presence` is false
 * (a .part written before the machine last booted), then emptied. */
int stk__fetcher_attach(stk__fetcher *f, stk_dataset *ds, bool trust_presence, stk_error *err);
void stk__fetcher_free(stk__fetcher *f);

/* ---- budget.c ---- */

/* Puts lazy dataset ds's cache (directory `dir`) under a budget of
 * `budget` bytes of disk, smaller than the dataset (0: stream): see
 * budget.c. */
int stk__budget_start(stk_dataset *ds, const char *dir, uint64_t budget, stk_error *err);

/* ---- open.c ---- */

/* Opens remote dataset `url` through the cache (stoker.h, "Datasets in
 * object stores"). */
int stk__remote_open(const char *url, const stk_open_options *opts, stk_dataset **out,
                     stk_error *err);

#endif
