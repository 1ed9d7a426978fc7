/*
 * internal.h: what every part of libstoker shares and no user sees.
 *
 * Names with the stk__ prefix are internal; they are not exported from the
 * shared library and may change at any time.  src/core depends on nothing
 * but libc and the hashing library; everything else may include this file.
 */
#ifndef STK_INTERNAL_H
#define STK_INTERNAL_H

#include "stoker.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stoker's file format is little-endian and it builds only on little-endian hosts"
#endif

#define STK__UNUSED(x) ((void)(x))
#define STK__MIN(a, b) ((a) < (b) ? (a) : (b))
#define STK__MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__GNUC__)
#define STK__PRINTF(f, a) __attribute__((format(printf, f, a)))
/* For the few helpers of a per-sample loop that must not stay calls. */
#define STK__ALWAYS_INLINE inline __attribute__((always_inline))
#define STK__LIKELY(x) __builtin_expect(!!(x), 1)
#define STK__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define STK__PRINTF(f, a)
#define STK__ALWAYS_INLINE inline
#define STK__LIKELY(x) (x)
#define STK__UNLIKELY(x) (x)
#endif

/* ---- errors (core/error.c) ---- */

/* Fills `err` (if not NULL) with `code` and the formatted message and
 * returns `code`, so that `return stk__err(err, -EIO, "...")` reads well. */
int stk__err(stk_error *err, int code, const char *fmt, ...) STK__PRINTF(3, 4);

/* Prefixes an already filled message with more context ("shard X: "). */
void stk__err_prefix(stk_error *err, const char *fmt, ...) STK__PRINTF(2, 3);

/* ---- allocation (core/alloc.c): the one place memory comes from ---- */

void *stk__malloc(size_t n);
void *stk__calloc(size_t count, size_t size);
void *stk__realloc(void *p, size_t n);

/* A symbol of a library loaded at run time, and where in a table of
 * pointers (or values) it goes. */
typedef struct stk__dl_sym {
    const char *name;
    size_t at; /* offsetof in the table */
} stk__dl_sym;
/* Fills `table` from library `lib`: each symbol's address, or with
 * `value_size` the bytes it points at (a library's global).  NULL, or the
 * name of the first symbol the library lacks. */
const char *stk__dl_fill(void *lib, const stk__dl_sym *syms, size_t n, void *table,
                         size_t value_size);
void stk__free(void *p);
char *stk__strdup(const char *s);
/* At most n bytes of s, NUL-terminated. */
char *stk__strndup(const char *s, size_t n);
/* Allocation aligned to `align` (a power of two >= sizeof(void *)). */
void *stk__aligned_alloc(size_t align, size_t n);
/* count * size zeroed bytes on cache lines of their own (64-byte aligned,
 * rounded up to whole lines): memory that one thread writes while others
 * write theirs, which must not share a line with it. */
void *stk__calloc_lines(size_t count, size_t size);
/* A table that will be read at random: large ones in huge pages where the
 * kernel gives them.  Freed with stk__free. */
void *stk__alloc_table(size_t n);

/* ---- files (core/io.c): loops over short transfers and EINTR ---- */

/* open(2) returning the descriptor or a negated errno. */
int stk__open(const char *path, int flags, int mode);
/* Reads up to n bytes at off; returns the count read (short only at end of
 * file) or a negated errno. */
ssize_t stk__pread_full(int fd, void *buf, size_t n, uint64_t off);
/* Writes all n bytes at off, or returns a negated errno. */
int stk__pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
/* Writes a, then b, at off: one write where the system takes it whole. */
int stk__pwrite2_full(int fd, const void *a, size_t na, const void *b, size_t nb, uint64_t off);
int stk__fsync(int fd);
int stk__fsync_dir(const char *dir);
/* Reads a whole (small) file into a NUL-terminated buffer from stk__malloc. */
int stk__read_file(const char *path, char **out, size_t *len);
/* Writes `data` to dir/name through a temporary file and rename(2), with
 * fsync of the file and the directory when `sync` is set. */
int stk__write_file_atomic(const char *dir, const char *name, const void *data,
                           size_t len, bool sync);
/* Joins dir and name with one '/' into a buffer from stk__malloc. */
char *stk__path_join(const char *dir, const char *name);
/* The directory part of `path` ("." when it has none), from stk__malloc. */
char *stk__path_dir(const char *path);

/* ---- memory (core/mem.c) ---- */

/* Bytes the page cache can still give this process: the smaller of the
 * machine's MemAvailable and the room under the tightest memory limit of
 * its control group and their ancestors (cgroup v2 or v1: the limit less
 * the group's anonymous memory).  0 when nothing can be read. */
uint64_t stk__mem_room(void);
/* The cgroup part of it, from a /proc/self/cgroup-like file and the
 * mount points of the v2 hierarchy and of v1's memory controller (for
 * tests); UINT64_MAX when no limit applies. */
uint64_t stk__cgroup_room(const char *self_cgroup, const char *v2_root, const char *v1_root);

/* ---- time ---- */
uint64_t stk__now_ns(void);
/* Names the calling thread (as top, perf and /proc/self/task show it):
 * stoker's threads are "stk-" and their part. */
void stk__thread_name(const char *name);
struct timespec;
/* *at = CLOCK_MONOTONIC now + ms, for pthread_cond_timedwait on a condition
 * variable set to that clock. */
void stk__deadline(int64_t ms, struct timespec *at);
/* A condition variable whose timed waits take stk__deadline's times
 * (CLOCK_MONOTONIC). */
void stk__cond_init_monotonic(pthread_cond_t *cv);

/* ---- little helpers ---- */
static inline uint64_t stk__align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) & ~(a - 1);
}
/* A pause in a spin-wait loop (it frees the core's shared resources for
 * its sibling thread, and costs little). */
static inline void stk__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline bool stk__is_pow2(uint64_t x) { return x && !(x & (x - 1)); }
/* a * b, false on overflow. */
static inline bool stk__mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

#endif
