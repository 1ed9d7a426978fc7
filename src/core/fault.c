/*
 * fault.c: the counters behind fault.h.  Atomic, since the loader's worker
 * threads allocate and read too.
 */
#include "fault.h"

#ifdef STK_FAULTS
#include <stdatomic.h>

static _Atomic long target[STK__FAULT_KINDS];
static _Atomic long seen[STK__FAULT_KINDS];
static _Atomic int code[STK__FAULT_KINDS];

void stk__fault_arm(int kind, long n, int err) {
    atomic_store(&seen[kind], 0);
    atomic_store(&code[kind], err);
    atomic_store(&target[kind], n);
}

long stk__fault_seen(int kind) { return atomic_load(&seen[kind]); }

void stk__fault_reset(void) {
    for (int k = 0; k < STK__FAULT_KINDS; k++) stk__fault_arm(k, 0, 0);
}

bool stk__fault_hit(int kind, int *err) {
    long n = atomic_fetch_add(&seen[kind], 1) + 1;
    long t = atomic_load(&target[kind]);
    if (t <= 0 || n != t) return false;
    *err = -atomic_load(&code[kind]);
    return true;
}
#else
/* Keeps this translation unit non-empty in ordinary builds. */
typedef int stk__fault_unused;
#endif
