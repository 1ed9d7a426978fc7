/* Every build of XXH3 that stk__hash may pick gives the library's value:
 * the AVX2 build (where this CPU has it) and the dispatch, for every
 * length from 0 to 4 KiB and some longer ones, at every offset within a
 * cache line, so that each of XXH3's length classes (0-16, 17-128,
 * 129-240, the vector path above 240, its 1 KiB blocks and the last
 * partial stripe) is met at every alignment.  A wrong vector build
 * would fail every record check of a dataset (or, worse, pass a damaged
 * record), so this is checked directly rather than through a loader. */
#include "util.h"

#include "core/hash.h"

static uint8_t buf[(64 << 10) + 128];

static void check_len(size_t off, size_t n) {
    const uint8_t *p = buf + off;
    uint64_t want = (uint64_t)XXH3_64bits(p, n);
    CHECK(stk__hash(p, n) == want);
#ifdef STK__HASH_AVX2
    if (__builtin_cpu_supports("avx2")) CHECK(stk__xxh3_avx2(p, n) == want);
#endif
}

int main(void) {
    test_fill(buf, sizeof buf, 7);
    for (size_t off = 0; off < 64; off++)
        for (size_t n = 0; n <= 4096; n++) check_len(off, n);
    static const size_t longer[] = {8191, 8192, 8193, 65535, 65536};
    for (size_t i = 0; i < sizeof longer / sizeof *longer; i++)
        for (size_t off = 0; off < 64; off += 7) check_len(off, longer[i]);
    /* One bit changed anywhere in a 512-byte input changes every build's
     * value (the checks rest on it). */
    for (size_t bit = 0; bit < 512 * 8; bit++) {
        uint64_t before = stk__hash(buf, 512);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK(stk__hash(buf, 512) != before);
        check_len(0, 512);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
#ifdef STK__HASH_AVX2
    printf("test_hash: AVX2 build %s\n",
           __builtin_cpu_supports("avx2") ? "checked" : "not on this CPU");
#endif
    return 0;
}
