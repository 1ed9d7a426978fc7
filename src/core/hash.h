/*
 * hash.h: XXH3-64, the one checksum of the format.
 *
 * On x86-64 the library's dispatching entry points pick the widest vector
 * unit the CPU has (AVX2 where present) at run time, so a build for generic
 * x86-64 still hashes at memory speed.
 */
#ifndef STK_HASH_H
#define STK_HASH_H

/* The state struct is wanted inline (on the stack, inside other structs). */
#define XXH_STATIC_LINKING_ONLY
#if defined(__x86_64__) || defined(_M_X64)
#include <xxhash.h>
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include <stddef.h>
#include <stdint.h>

static inline uint64_t stk__hash(const void *p, size_t n) {
    return (uint64_t)XXH3_64bits(p, n);
}

#endif
