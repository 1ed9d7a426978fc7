/*
 * curl.h: libcurl, loaded when a remote dataset is first opened, not
 * linked.  A local dataset never needs it, and a wheel built for every
 * Linux does not carry a TLS stack of its own: the system's libcurl (and
 * through it the system's TLS library and CA certificates) is used.
 *
 * Files of src/remote include this instead of <curl/curl.h>: its types and
 * constants are curl's own (the headers are needed at build time only),
 * and each curl_* function used names a pointer of stk__curl, filled by
 * stk__curl_load.
 */
#ifndef STK_REMOTE_CURL_H
#define STK_REMOTE_CURL_H

/* Plain declarations, not the type-checking macros of some versions, so
 * that the names below can be redirected. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include "../core/internal.h"

typedef struct stk__curl_api {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *e, CURLoption opt, ...);
    CURLcode (*easy_getinfo)(CURL *e, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *e);
    const char *(*easy_strerror)(CURLcode);
    char *(*easy_escape)(CURL *e, const char *s, int len);
    void (*free)(void *p);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_setopt)(CURLM *m, CURLMoption opt, ...);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *e);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *e);
    CURLMcode (*multi_perform)(CURLM *m, int *running);
    CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *extra, unsigned n, int ms, int *ret);
    CURLMsg *(*multi_info_read)(CURLM *m, int *left);
    CURLMcode (*multi_cleanup)(CURLM *m);
    const char *(*multi_strerror)(CURLMcode);
} stk__curl_api;

extern stk__curl_api stk__curl;

/* Loads libcurl once (thread-safe) and runs curl_global_init: $STOKER_LIBCURL
 * when set, else libcurl.so.4, else libcurl-gnutls.so.4 (Debian's other
 * build).  0, or STK_EUNSUPPORTED saying what to install; `what` (a URL)
 * begins the message. */
int stk__curl_load(const char *what, stk_error *err);

/* Some versions define these three as macros of themselves. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init (stk__curl.global_init)
#define curl_easy_init (stk__curl.easy_init)
#define curl_easy_setopt (stk__curl.easy_setopt)
#define curl_easy_getinfo (stk__curl.easy_getinfo)
#define curl_easy_cleanup (stk__curl.easy_cleanup)
#define curl_easy_strerror (stk__curl.easy_strerror)
#define curl_easy_escape (stk__curl.easy_escape)
#define curl_free (stk__curl.free)
#define curl_slist_append (stk__curl.slist_append)
#define curl_slist_free_all (stk__curl.slist_free_all)
#define curl_multi_init (stk__curl.multi_init)
#define curl_multi_setopt (stk__curl.multi_setopt)
#define curl_multi_add_handle (stk__curl.multi_add_handle)
#define curl_multi_remove_handle (stk__curl.multi_remove_handle)
#define curl_multi_perform (stk__curl.multi_perform)
#define curl_multi_poll (stk__curl.multi_poll)
#define curl_multi_info_read (stk__curl.multi_info_read)
#define curl_multi_cleanup (stk__curl.multi_cleanup)
#define curl_multi_strerror (stk__curl.multi_strerror)

#endif
