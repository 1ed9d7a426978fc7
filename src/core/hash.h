/*
 * hash.h: XXH3-64, the one checksum of the format.
 *
 * On x86-64 a whole input is hashed by XXH3 compiled for AVX2
 * (hash_avx2.c) where the CPU has AVX2, else by the library's dispatching
 * entry points, which pick the widest vector unit at run time; streamed
 * updates always go to the library.  A build for generic x86-64 so hashes
 * with vectors either way.  The library's dispatch took twice the time of
 * the AVX2 build on 256-byte inputs (25 against 12 ns); in a loader,
 * 256-byte records, one worker, 7 alternating runs, a worker's time a
 * sample fell from 133.1 to 130.7 ns (one dataset) and from 140.1 to 136.4
 * (a mixture of 3).
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

/* Where the library hashes: its dispatching entry points hash an input of
 * over 240 bytes (XXH3's "long" inputs; shorter ones take scalar code) with
 * AVX2 or AVX-512, and return with the upper halves of the vector registers
 * still in use.  Until a VZEROUPPER clears them, legacy SSE instructions pay for
 * it, and generic x86-64 code is full of them (GCC zeroes and copies
 * structs with them).  On the Xeon of docs/BENCHMARKS.md a gather loop
 * with two SSE instructions a record ran 2.7 times slower, and the loops
 * as they are spend 1 to 2% more of a worker's time a 256-byte record
 * without it; so every long hash (and every streamed update) is followed
 * by one.  (The clobbers keep the compiler from holding values in the
 * registers across it.) */
#define STK__HASH_VECTOR_MIN 241

static inline void stk__hash_clean(void) {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx"))
        __asm__ __volatile__("vzeroupper"
                             :
                             :
                             : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                               "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
                               "xmm15");
#endif
}

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
/* XXH3 built for AVX2 (hash_avx2.c), where the CPU has it. */
uint64_t stk__xxh3_avx2(const void *p, size_t n);
#define STK__HASH_AVX2 1
#endif

static inline uint64_t stk__hash(const void *p, size_t n) {
#ifdef STK__HASH_AVX2
    if (__builtin_cpu_supports("avx2")) return stk__xxh3_avx2(p, n);
#endif
    uint64_t h = (uint64_t)XXH3_64bits(p, n);
    if (n >= STK__HASH_VECTOR_MIN) stk__hash_clean();
    return h;
}

/* XXH3_64bits_update, then the same. */
static inline void stk__hash_update(XXH3_state_t *st, const void *p, size_t n) {
    XXH3_64bits_update(st, p, n);
    stk__hash_clean();
}

#endif
