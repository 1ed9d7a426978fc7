/*
 * cuda.c: the CUDA plugin (src/cuda/plugin.cu, built as libstoker_cuda.so)
 * loaded with dlopen on first use, and the NVTX ranges the pipeline's
 * stages open when a profiler is attached.  A leaf of the library: the
 * pipeline (NVTX) and the GPU stage (everything else) both use it, and it
 * uses neither, so the library itself needs no CUDA header or library.
 */
#define _GNU_SOURCE
#include "cuda.h"

#include "plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the plugin ---- */

static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;
static const stk_cuda_api *cu;
static char plugin_why[STK_ERROR_MAX - 64];

#ifdef STK_HAVE_CUDA_PLUGIN
static void *open_plugin(const char *path, char *why, size_t len) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, len, "%s", e ? e : path);
    }
    return h;
}
#endif

static void load_plugin(void) {
#ifndef STK_HAVE_CUDA_PLUGIN
    snprintf(plugin_why, sizeof plugin_why,
             "this stoker was built without CUDA support (no CUDA toolkit was found when it "
             "was built)");
#else
    char why[sizeof plugin_why] = "";
    void *h = NULL;
    const char *env = getenv("STOKER_CUDA_PLUGIN");
    if (env && *env) h = open_plugin(env, why, sizeof why);
    if (!h) {
        /* Beside the library or program this code is part of: libstoker.so,
         * the stoker command, or the Python extension. */
        Dl_info info;
        if (dladdr((void *)load_plugin, &info) && info.dli_fname) {
            char path[4096];
            snprintf(path, sizeof path, "%s", info.dli_fname);
            char *slash = strrchr(path, '/');
            if (slash) {
                snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s",
                         "libstoker_cuda.so");
                if (!access(path, R_OK)) h = open_plugin(path, why, sizeof why);
            }
        }
    }
    if (!h) h = open_plugin("libstoker_cuda.so", why, sizeof why);
    if (!h) {
        snprintf(plugin_why, sizeof plugin_why, "stoker's CUDA plugin cannot be loaded: %s",
                 why);
        return;
    }
    stk_cuda_plugin_fn fn;
    void *sym = dlsym(h, STK_CUDA_PLUGIN_SYMBOL);
    memcpy(&fn, &sym, sizeof fn);
    const stk_cuda_api *api = fn ? fn() : NULL;
    if (!api || api->abi != STK_CUDA_ABI) {
        snprintf(plugin_why, sizeof plugin_why,
                 "stoker's CUDA plugin is from another version of stoker (rebuild it)");
        return;
    }
    cu = api;
#endif
}

const stk_cuda_api *stk__cuda(stk_error *err) {
    pthread_once(&plugin_once, load_plugin);
    if (!cu) stk__err(err, STK_ENOGPU, "no GPU available: %s", plugin_why);
    return cu;
}

const stk_cuda_api *stk__cuda_api_loaded(void) { return cu; }

/* ---- NVTX ---- */

static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static bool nvtx_enabled;

static void nvtx_init(void) {
    const char *tool = getenv("NVTX_INJECTION64_PATH");
    nvtx_enabled = tool && *tool && stk__cuda(NULL) != NULL;
}

bool stk__nvtx_on(void) {
    pthread_once(&nvtx_once, nvtx_init);
    return nvtx_enabled;
}

static _Thread_local int nvtx_depth;

void stk__nvtx_push(const char *name) {
    if (!nvtx_enabled) return;
    cu->range_push(name);
    nvtx_depth++;
}

void stk__nvtx_pop(void) {
    if (!nvtx_enabled || nvtx_depth == 0) return;
    cu->range_pop();
    nvtx_depth--;
}

int stk__nvtx_depth(void) { return nvtx_depth; }

void stk__nvtx_pop_to(int depth) {
    while (nvtx_depth > depth) stk__nvtx_pop();
}
