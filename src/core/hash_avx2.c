/*
 * hash_avx2.c: XXH3-64 compiled for AVX2, for hash.h to call where the CPU
 * has it.  This file alone is built with -mavx2 (CMakeLists.txt).
 *
 * libxxhash's dispatching entry points hash 256 bytes in 25 ns and 1 KiB
 * in 75 ns on the Xeon of docs/BENCHMARKS.md; the same XXH3 compiled here
 * takes 12 and 29 ns (timed alone, from L1).  The values are the same:
 * XXH3 is defined independently of the vector unit that computes it.
 */
#if defined(__x86_64__) && defined(__AVX2__)
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <stddef.h>
#include <stdint.h>

uint64_t stk__xxh3_avx2(const void *p, size_t n);

uint64_t stk__xxh3_avx2(const void *p, size_t n) { return (uint64_t)XXH3_64bits(p, n); }
#else
typedef int stk__hash_avx2_empty; /* (ISO C: a translation unit is not empty) */
#endif
