/*
 * alloc.c: every allocation of the library passes through here, so that it
 * can be counted, budgeted and made to fail on purpose in tests.
 */
#include "internal.h"
#include "fault.h"

#include <stdlib.h>
#include <string.h>

static inline bool fail_alloc(void) {
    int e;
    return stk__fault_hit(STK__FAULT_ALLOC, &e);
}

void *stk__malloc(size_t n) { return fail_alloc() ? NULL : malloc(n ? n : 1); }

void *stk__calloc(size_t count, size_t size) {
    return fail_alloc() ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *stk__realloc(void *p, size_t n) { return fail_alloc() ? NULL : realloc(p, n ? n : 1); }

void stk__free(void *p) { free(p); }

char *stk__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = stk__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *stk__aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    if (fail_alloc()) return NULL;
    if (posix_memalign(&p, align, n ? n : align) != 0) return NULL;
    return p;
}
