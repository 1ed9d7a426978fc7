/*
 * alloc.c: every allocation of the library passes through here, so that it
 * can be counted, budgeted and made to fail on purpose in tests.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "fault.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

char *stk__strndup(const char *s, size_t n) {
    size_t l = strnlen(s, n);
    char *d = stk__malloc(l + 1);
    if (d) {
        memcpy(d, s, l);
        d[l] = '\0';
    }
    return d;
}

void *stk__aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    if (fail_alloc()) return NULL;
    if (posix_memalign(&p, align, n ? n : align) != 0) return NULL;
    return p;
}

void *stk__calloc_lines(size_t count, size_t size) {
    if (size && count > (SIZE_MAX - 63) / size) return NULL;
    size_t n = (count * size + 63) & ~(size_t)63;
    void *p = stk__aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}

/* Tables read at random (a dataset's record index: one entry per sample
 * drawn) are a TLB miss per access in 4 KiB pages, and much more expensive
 * ones under nested paging.  Large ones are put on 2 MiB boundaries and
 * marked for transparent huge pages. */
void *stk__alloc_table(size_t n) {
    const size_t huge = 2u << 20;
    if (n < huge) return stk__malloc(n);
    void *p = stk__aligned_alloc(huge, (n + huge - 1) & ~(huge - 1));
    if (p) madvise(p, (n + huge - 1) & ~(huge - 1), MADV_HUGEPAGE);
    return p;
}
