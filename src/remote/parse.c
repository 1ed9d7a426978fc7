/*
 * parse.c: what servers send that stoker reads: response header lines, the
 * elements of an S3 XML error body, Retry-After.  Pure functions of their
 * input, kept apart from the transfers so that they can be fuzzed
 * (tests/fuzz/fuzz_response.c): a server's bytes are untrusted input.
 */
#define _GNU_SOURCE
#include "remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <locale.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>

/* Copies v[0..n) trimmed of blanks and line ends into dst (cap > 0),
 * cut to fit. */
static void value(const char *v, size_t n, char *dst, size_t cap) {
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* A size of decimal digits only (no sign, no blank, no overflow), else
 * UINT64_MAX: the size is then unknown, which is never trusted. */
static uint64_t size_of(const char *s) {
    if (!*s) return UINT64_MAX;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10) return UINT64_MAX;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    return x;
}

void stk__fetch_header(stk__fetch *f, const char *buf, size_t len) {
    if (len > 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue, say): forget the last. */
        f->etag[0] = f->last_modified[0] = f->retry_after[0] = f->region[0] = '\0';
        f->object_size = UINT64_MAX;
        f->range_first = f->range_last = UINT64_MAX;
        f->skip = 0;
        return;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon) return;
    size_t kl = (size_t)(colon - buf);
    const char *v = colon + 1;
    size_t vl = len - kl - 1;
    char tmp[128];
    if (kl == 4 && strncasecmp(buf, "etag", 4) == 0) {
        value(v, vl, f->etag, sizeof f->etag);
    } else if (kl == 13 && strncasecmp(buf, "last-modified", 13) == 0) {
        value(v, vl, f->last_modified, sizeof f->last_modified);
    } else if (kl == 11 && strncasecmp(buf, "retry-after", 11) == 0) {
        value(v, vl, f->retry_after, sizeof f->retry_after);
    } else if (kl == 19 && strncasecmp(buf, "x-amz-bucket-region", 19) == 0) {
        value(v, vl, f->region, sizeof f->region);
    } else if (kl == 13 && strncasecmp(buf, "content-range", 13) == 0) {
        /* "bytes a-b/total"; an asterisk for the total, or anything else:
         * unknown.  The range is kept only when both ends parse, a <= b. */
        value(v, vl, tmp, sizeof tmp);
        char *slash = strchr(tmp, '/');
        if (slash) f->object_size = size_of(slash + 1);
        f->range_first = f->range_last = UINT64_MAX;
        if (slash && strncasecmp(tmp, "bytes ", 6) == 0) {
            *slash = '\0';
            char *dash = strchr(tmp + 6, '-');
            if (dash) {
                *dash = '\0';
                uint64_t a = size_of(tmp + 6), b = size_of(dash + 1);
                if (a != UINT64_MAX && b != UINT64_MAX && a <= b) {
                    f->range_first = a;
                    f->range_last = b;
                }
            }
        }
    } else if (kl == 14 && strncasecmp(buf, "content-length", 14) == 0) {
        value(v, vl, tmp, sizeof tmp);
        /* The whole object's size only when no range was asked or none was
         * honoured; Content-Range, when present, wins. */
        if (f->object_size == UINT64_MAX && f->lo == 0 && f->hi == 0)
            f->object_size = size_of(tmp);
    }
}

void stk__xml_element(const char *body, const char *tag, char *out, size_t cap) {
    char open[40], close[40];
    out[0] = '\0';
    if (snprintf(open, sizeof open, "<%s>", tag) >= (int)sizeof open) return;
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = strstr(body, open);
    if (!a) return;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (b) value(a, (size_t)(b - a), out, cap);
}

/* An HTTP date (RFC 9110 5.6.7) as seconds since the epoch, or -1: the
 * IMF-fixdate servers send ("Sun, 06 Nov 1994 08:49:37 GMT") and the two
 * obsolete forms recipients must accept (RFC 850's "Sunday, 06-Nov-94
 * 08:49:37 GMT" and asctime's "Sun Nov  6 08:49:37 1994"), always GMT. */
static time_t http_date(const char *v) {
    static const char *const forms[] = {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT",
                                        "%a %b %e %H:%M:%S %Y"};
    /* English day and month names whatever the process's locale. */
    static _Atomic(locale_t) c_locale;
    locale_t c = atomic_load(&c_locale);
    if (!c) {
        locale_t made = newlocale(LC_ALL_MASK, "C", (locale_t)0), none = (locale_t)0;
        if (!made) return (time_t)-1;
        if (atomic_compare_exchange_strong(&c_locale, &none, made)) c = made;
        else c = none, freelocale(made);
    }
    while (*v == ' ' || *v == '\t') v++;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *end = strptime_l(v, forms[i], &tm, c);
        if (!end) continue;
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (*end) continue;
        return timegm(&tm);
    }
    return (time_t)-1;
}

int64_t stk__retry_after_s(const char *v, int64_t now) {
    if (!v || !*v) return -1;
    if (*v >= '0' && *v <= '9') {
        uint64_t s = size_of(v);
        return s == UINT64_MAX ? -1 : s > INT32_MAX ? INT32_MAX : (int64_t)s;
    }
    /* An HTTP date: the seconds until then (0 if past). */
    time_t t = http_date(v);
    if (t == (time_t)-1) return -1;
    return (int64_t)t > now ? (int64_t)t - now : 0;
}
