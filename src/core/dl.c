/*
 * dl.c: filling a table of a library loaded at run time (libcurl, libhdf5)
 * from its symbols.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <string.h>

const char *stk__dl_fill(void *lib, const stk__dl_sym *syms, size_t n, void *table,
                         size_t value_size) {
    for (size_t i = 0; i < n; i++) {
        void *s = dlsym(lib, syms[i].name);
        if (!s) return syms[i].name;
        if (value_size) memcpy((char *)table + syms[i].at, s, value_size);
        else memcpy((char *)table + syms[i].at, &s, sizeof s);
    }
    return NULL;
}
