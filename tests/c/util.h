/* util.h: a small harness for the C tests.  Each test is one program; a
 * failed CHECK prints where and why and the program exits 1. */
#ifndef STK_TEST_UTIL_H
#define STK_TEST_UTIL_H

#include "stoker.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int stk_test_failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Checks that an stoker call succeeded, printing its message if not. */
#define CHECK_OK(call)                                                         \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != 0) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, \
                    #call, rc_, stk_strerror(rc_), err.message);              \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Checks that a call failed with code `want_` and that its message mentions
 * `needle` (a file name, a record number). */
#define CHECK_ERR(call, want_, needle)                                        \
    do {                                                                       \
        memset(&err, 0, sizeof err);                                           \
        int rc_ = (call);                                                      \
        if (rc_ != (want_) || err.code != (want_) || !strstr(err.message, (needle))) { \
            fprintf(stderr, "%s:%d: %s: wanted %d (%s) naming '%s', got %d: %s\n", \
                    __FILE__, __LINE__, #call, (want_), stk_strerror(want_), (needle), \
                    rc_, err.message);                                         \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* A fresh, empty directory for one test; removed by the next run. */
const char *test_dir(const char *name);
/* Runs `rm -rf` on a path. */
void test_rmrf(const char *path);
/* Deterministic bytes. */
void test_fill(void *buf, size_t n, uint64_t seed);
/* Reads or overwrites bytes of a file in place. */
void test_poke(const char *path, uint64_t off, const void *bytes, size_t n);
void test_peek(const char *path, uint64_t off, void *bytes, size_t n);
/* Flips the bits `mask` of the byte at `off`, in place. */
void test_flip(const char *path, uint64_t off, uint8_t mask);
void test_truncate(const char *path, uint64_t size);
uint64_t test_file_size(const char *path);

/* Whole files: read (NUL-terminated, free() it) and write (replacing). */
char *test_read_file(const char *path, size_t *len);
void test_write_file(const char *path, const void *data, size_t len);
/* Copies a directory tree (cp -a); `to` must not exist. */
void test_copy_dir(const char *from, const char *to);
/* Whether a file exists. */
int test_exists(const char *path);
/* Whether `msg` says "record N" for exactly this N (not a longer number). */
int test_names_record(const char *msg, uint64_t rec);

#endif
