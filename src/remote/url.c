/*
 * url.c: a remote dataset's location (s3://bucket/prefix, http(s)://host/path)
 * and the URL of each of its objects, path-style or virtual-hosted for S3.
 */
#define _GNU_SOURCE
#include "remote.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

bool stk__is_remote(const char *path) {
    return path && (strncmp(path, "s3://", 5) == 0 || strncmp(path, "http://", 7) == 0 ||
                    strncmp(path, "https://", 8) == 0);
}

/* What to do instead, for the schemes users are known to try. */
static const char *scheme_hint(const char *scheme, size_t n) {
    static const struct {
        const char *scheme, *hint;
    } hints[] = {
        {"gs",
         "A Google Cloud Storage bucket can be read today through its S3-compatible "
         "endpoint: make an HMAC key for a service account (Cloud Storage, Settings, "
         "Interoperability), then set AWS_ENDPOINT_URL=https://storage.googleapis.com, "
         "AWS_ACCESS_KEY_ID to the key's access ID and AWS_SECRET_ACCESS_KEY to its secret, "
         "and open s3://BUCKET/PATH"},
        {"az", "Copy the dataset to a local path first (azcopy copy URL DIR --recursive)"},
        {"abfs", "Copy the dataset to a local path first (azcopy copy URL DIR --recursive)"},
        {"abfss", "Copy the dataset to a local path first (azcopy copy URL DIR --recursive)"},
        {"wasb", "Copy the dataset to a local path first (azcopy copy URL DIR --recursive)"},
        {"wasbs", "Copy the dataset to a local path first (azcopy copy URL DIR --recursive)"},
        {"hdfs", "Copy the dataset to a local path first (hdfs dfs -get URL DIR)"},
        {"ftp", "Copy the dataset to a local path first, or serve it over http(s)"},
        {"sftp", "Copy the dataset to a local path first, or serve it over http(s)"},
        {"file", "Give the path without file://"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
        if (strlen(hints[i].scheme) == n && strncasecmp(hints[i].scheme, scheme, n) == 0)
            return hints[i].hint;
    return NULL;
}

int stk__url_scheme_check(const char *path, stk_error *err) {
    if (!path || stk__is_remote(path)) return 0;
    /* RFC 3986: a letter, then letters, digits, '+', '-', '.'; then "://". */
    size_t n = 0;
    if (!((path[0] >= 'a' && path[0] <= 'z') || (path[0] >= 'A' && path[0] <= 'Z'))) return 0;
    while (path[n] && (isalnum((unsigned char)path[n]) || path[n] == '+' || path[n] == '-' ||
                       path[n] == '.'))
        n++;
    if (strncmp(path + n, "://", 3) != 0) return 0;
    /* A file or directory that really has that name is opened as one. */
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    if (n == 2 && strncasecmp(path, "S3", 2) == 0)
        return stk__err(err, -EINVAL, "%s: write the scheme in lowercase: s3://", path);
    if ((n == 4 || n == 5) && strncasecmp(path, "https", n) == 0)
        return stk__err(err, -EINVAL, "%s: write the scheme in lowercase: %.*s://", path,
                        (int)n, n == 4 ? "http" : "https");
    const char *hint = scheme_hint(path, n);
    return stk__err(err, -EINVAL,
                    "%s: %.*s:// is not supported; these are: s3://, http://, https://, local "
                    "paths%s%s",
                    path, (int)n, path, hint ? ". " : "", hint ? hint : "");
}

void stk__url_free(stk__url *u) {
    if (!u) return;
    stk__free(u->text);
    stk__free(u->bucket);
    stk__free(u->key);
    stk__free(u->origin);
    memset(u, 0, sizeof *u);
}

static bool bucket_ok(const char *b, size_t n) {
    if (n < 3 || n > 63) return false;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
            return false;
    }
    return b[0] != '.' && b[0] != '-' && b[n - 1] != '.' && b[n - 1] != '-';
}

static int bad(stk_error *err, const char *text, const char *why) {
    return stk__err(err, -EINVAL, "%s: not a dataset URL: %s", text, why);
}

/* Checks "host[:port]" (or "[v6]:port") of an HTTP URL; NULL when good,
 * else what is wrong. */
static const char *authority_bad(const char *a, size_t n) {
    if (memchr(a, '@', n)) return "user information ('user@host') is not allowed";
    const char *port = NULL;
    size_t hl;
    if (a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close) return "an IPv6 address must end with ']'";
        hl = (size_t)(close - a) - 1;
        if (close + 1 < a + n) {
            if (close[1] != ':') return "only a port may follow an IPv6 address";
            port = close + 2;
        }
    } else {
        const char *colon = memchr(a, ':', n);
        hl = colon ? (size_t)(colon - a) : n;
        if (colon) port = colon + 1;
    }
    if (hl == 0) return "no host";
    if (port) {
        size_t pl = (size_t)(a + n - port);
        unsigned long v = 0;
        for (size_t i = 0; i < pl && v <= 65535; i++) {
            if (port[i] < '0' || port[i] > '9') return "the port is not a number";
            v = v * 10 + (unsigned long)(port[i] - '0');
        }
        if (pl == 0 || v == 0 || v > 65535) return "the port must be 1 to 65535";
    }
    return NULL;
}

int stk__url_parse(const char *text, stk__url *out, stk_error *err) {
    memset(out, 0, sizeof *out);
    if (!stk__is_remote(text))
        return bad(err, text ? text : "(null)", "it must begin with s3://, http:// or https://");
    if (strpbrk(text, "?#")) return bad(err, text, "a query or fragment ('?', '#') is not allowed");
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return bad(err, text, "spaces and control characters must be percent-encoded");
    bool s3 = text[0] == 's';
    size_t len = strlen(text), skip = s3 ? 5 : text[4] == 's' ? 8 : 7;
    /* Trailing slashes, not those of the scheme ("s3://" is no bucket). */
    while (len > skip && text[len - 1] == '/') len--;
    out->text = stk__strndup(text, len);
    if (!out->text) return stk__err(err, -ENOMEM, "out of memory");
    const char *rest = out->text + skip;
    const char *slash = strchr(rest, '/');
    size_t hl = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *path = slash ? slash + 1 : "";
    const char *why;
    int rc = 0;
    if (s3) {
        out->scheme = STK__URL_S3;
        if (hl == 0)
            rc = bad(err, text, "no bucket");
        else if (memchr(rest, '@', hl))
            rc = bad(err, text, "user information ('user@host') is not allowed");
        else if (!bucket_ok(rest, hl))
            rc = bad(err, text,
                     "a bucket name is 3 to 63 lowercase letters, digits, '.' and '-', "
                     "beginning and ending with a letter or digit");
        /* The key has no leading or trailing '/', and a "//" inside would
         * name a different object than the same path on disk would. */
        else if (path[0] == '/' || strstr(path, "//"))
            rc = bad(err, text, "an empty path segment ('//')");
        else if (!(out->bucket = stk__strndup(rest, hl)) || !(out->key = stk__strdup(path)))
            rc = stk__err(err, -ENOMEM, "out of memory");
    } else {
        out->scheme = STK__URL_HTTP;
        if (hl == 0)
            rc = bad(err, text, "no host");
        else if ((why = authority_bad(rest, hl)))
            rc = bad(err, text, why);
        else if (!(out->origin = stk__strndup(out->text, (size_t)(rest - out->text) + hl)) ||
                 !(out->key = stk__strdup(path)))
            rc = stk__err(err, -ENOMEM, "out of memory");
    }
    if (rc) stk__url_free(out);
    return rc;
}

/* Appends `s`, percent-encoding what RFC 3986 does not leave unreserved
 * (slashes kept). */
static void put_encoded(char *dst, size_t *n, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            dst[(*n)++] = (char)c;
        } else {
            dst[(*n)++] = '%';
            dst[(*n)++] = hex[c >> 4];
            dst[(*n)++] = hex[c & 15];
        }
    }
}

/* Whether `a` routes to AWS's own endpoint for its region, the one whose
 * buckets also have names of their own (BUCKET.s3.REGION.amazonaws.com). */
static bool aws_own(const stk__aws *a) {
    const char *ep = a->endpoint, *pre = "https://s3.";
    if (!ep || !a->region || strncmp(ep, pre, strlen(pre)) != 0) return false;
    size_t rl = strlen(a->region);
    ep += strlen(pre);
    return strncmp(ep, a->region, rl) == 0 && strcmp(ep + rl, ".amazonaws.com") == 0;
}

char *stk__url_object(const stk__url *u, const stk__aws *a, const char *name) {
    if (!name) name = "";
    if (u->scheme == STK__URL_HTTP) {
        size_t n = strlen(u->text) + 1 + strlen(name) + 1;
        char *s = stk__malloc(n);
        if (s) snprintf(s, n, "%s%s%s", u->text, *name ? "/" : "", name);
        return s;
    }
    /* key/name, without empty parts */
    size_t kl = strlen(u->key), nl = strlen(name);
    char *key = stk__malloc(kl + nl + 2);
    if (!key) return NULL;
    snprintf(key, kl + nl + 2, "%s%s%s", u->key, kl && nl ? "/" : "", name);
    const char *ep = a && a->endpoint ? a->endpoint : "https://s3.us-east-1.amazonaws.com";
    /* Dots in a bucket's name break the TLS name of the virtual-hosted form;
     * other endpoints than AWS's may have no per-bucket names at all. */
    bool virt = a && !a->path_style && aws_own(a) && !strchr(u->bucket, '.');
    size_t cap = strlen(ep) + strlen(u->bucket) + (a && a->region ? strlen(a->region) : 0) +
                 3 * strlen(key) + 64;
    char *s = stk__malloc(cap);
    if (!s) {
        stk__free(key);
        return NULL;
    }
    size_t n;
    if (virt)
        n = (size_t)snprintf(s, cap, "https://%s.s3.%s.amazonaws.com/", u->bucket, a->region);
    else
        n = (size_t)snprintf(s, cap, "%s/%s%s", ep, u->bucket, *key ? "/" : "");
    put_encoded(s, &n, key);
    s[n] = '\0';
    stk__free(key);
    return s;
}
