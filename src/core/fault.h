/*
 * fault.h: failures on purpose, for tests.
 *
 * In builds with STK_FAULTS defined (the test library only), each kind of
 * operation below can be told to fail at its Nth occurrence from now:
 * allocation returns NULL, and an I/O operation returns the given error
 * (or, for reads, comes back short).  In other builds every hook compiles
 * to nothing.
 */
#ifndef STK_FAULT_H
#define STK_FAULT_H

#include <stdbool.h>

enum {
    STK__FAULT_ALLOC,
    STK__FAULT_OPEN,
    STK__FAULT_READ,
    STK__FAULT_WRITE,
    STK__FAULT_FSYNC,
    STK__FAULT_URING, /* an io_uring completion */
    STK__FAULT_JOINT, /* a mixture's joint draw (pipeline.h): fails before it reads */
    STK__FAULT_KINDS
};

#ifdef STK_FAULTS
/* Fails the nth operation of `kind` counted from this call (n >= 1) with
 * -err, or with a short transfer when err == 0; n == 0 disarms. */
void stk__fault_arm(int kind, long n, int err);
/* Operations of `kind` seen since it was last armed. */
long stk__fault_seen(int kind);
/* Disarms everything. */
void stk__fault_reset(void);
/* Called by the hooked operations: true when this one must fail; *err
 * then holds the negated errno (0: short transfer). */
bool stk__fault_hit(int kind, int *err);
#else
static inline bool stk__fault_hit(int kind, int *err) {
    (void)kind;
    (void)err;
    return false;
}
#endif

#endif
