/*
 * curl.c: loading libcurl at run time (see curl.h for why).
 */
#define _GNU_SOURCE
#include "curl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

stk__curl_api stk__curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_msg[STK_ERROR_MAX];

/* curl's curl_easy_setopt and friends are macros in some versions of its
 * header (type-checking wrappers); the #defines of curl.h replace the
 * names, so the symbols are looked up by their strings here. */
static const stk__dl_sym syms[] = {
#define SYM(field, name) {name, offsetof(stk__curl_api, field)}
    SYM(global_init, "curl_global_init"),
    SYM(easy_init, "curl_easy_init"),
    SYM(easy_setopt, "curl_easy_setopt"),
    SYM(easy_getinfo, "curl_easy_getinfo"),
    SYM(easy_cleanup, "curl_easy_cleanup"),
    SYM(easy_strerror, "curl_easy_strerror"),
    SYM(easy_escape, "curl_easy_escape"),
    SYM(free, "curl_free"),
    SYM(slist_append, "curl_slist_append"),
    SYM(slist_free_all, "curl_slist_free_all"),
    SYM(multi_init, "curl_multi_init"),
    SYM(multi_setopt, "curl_multi_setopt"),
    SYM(multi_add_handle, "curl_multi_add_handle"),
    SYM(multi_remove_handle, "curl_multi_remove_handle"),
    SYM(multi_perform, "curl_multi_perform"),
    SYM(multi_poll, "curl_multi_poll"),
    SYM(multi_info_read, "curl_multi_info_read"),
    SYM(multi_cleanup, "curl_multi_cleanup"),
    SYM(multi_strerror, "curl_multi_strerror"),
#undef SYM
};

static void load(void) {
    const char *env = getenv("STOKER_LIBCURL");
    const char *names[3] = {NULL, NULL, NULL};
    if (env && *env) names[0] = env;
    else names[0] = "libcurl.so.4", names[1] = "libcurl-gnutls.so.4";
    void *lib = NULL;
    const char *tried = names[0];
    char why[256] = "";
    const char *opened = NULL;
    for (int i = 0; i < 3 && names[i] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) opened = names[i];
        else if (i == 0) snprintf(why, sizeof why, "%s", dlerror());
    }
    if (!lib) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg,
                 "reading a remote dataset needs libcurl, which cannot be loaded (%s%s%s): "
                 "install it (Debian, Ubuntu: apt-get install libcurl4; RHEL, Fedora: dnf "
                 "install libcurl; conda: conda install libcurl) or set STOKER_LIBCURL to the "
                 "path of a libcurl.so.4; local datasets do not need it",
                 tried, why[0] ? ": " : "", why);
        return;
    }
    /* curl_multi_poll came with libcurl 7.66 (2019). */
    const char *lacks = stk__dl_fill(lib, syms, sizeof syms / sizeof syms[0], &stk__curl, 0);
    if (lacks) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg,
                 "the libcurl found (%s) lacks %s: stoker needs libcurl 7.66 or newer", opened,
                 lacks);
        dlclose(lib);
        return;
    }
    CURLcode cc = stk__curl.global_init(CURL_GLOBAL_DEFAULT);
    if (cc != CURLE_OK) {
        load_rc = -EIO;
        snprintf(load_msg, sizeof load_msg, "libcurl: %s", stk__curl.easy_strerror(cc));
    }
}

int stk__curl_load(const char *what, stk_error *err) {
    pthread_once(&once, load);
    if (load_rc) return stk__err(err, load_rc, "%s: %s", what ? what : "libcurl", load_msg);
    return 0;
}
