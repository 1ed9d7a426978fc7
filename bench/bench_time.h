/*
 * bench_time.h: what every limit program of the benchmarks times with (a
 * monotonic clock in seconds) and sorts its repetitions with, for their
 * medians.  Included by bench/limits.c, gather_limit.c, jpeg_limit.c and
 * audio_limit.h.
 */
#ifndef STK_BENCH_TIME_H
#define STK_BENCH_TIME_H

#include <time.h>

static inline double clock_s(clockid_t which) {
    struct timespec ts;
    clock_gettime(which, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double now(void) { return clock_s(CLOCK_MONOTONIC); }

/* qsort's comparison for doubles, ascending. */
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
