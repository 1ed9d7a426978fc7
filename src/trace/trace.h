/*
 * trace.h: spans of what each of a loader's threads does, for a timeline.
 *
 * Each thread appends to a buffer of its own (the workers' and the
 * consumer's), so recording takes no lock: the owner writes an event, then
 * publishes it by a release store of the count; the writer of the trace
 * file reads the count with an acquire load and every event below it is
 * complete.  Starting again bumps a generation and each owner empties its
 * own buffer when it sees the new one, so no buffer is ever emptied under
 * its writer.  While tracing is off a span costs one relaxed load.
 *
 * Spans are recorded when they end, with the time they began; the file
 * writer sorts them so that parents come before their children.
 */
#ifndef STK_TRACE_H
#define STK_TRACE_H

#include "../core/internal.h"

#include <stdatomic.h>

typedef enum stk__ev_kind {
    STK__EV_BATCH = 0,  /* worker: one batch filled; a0 batch, a1 samples */
    STK__EV_PLAN,       /* order -> records and rows -> reads; a1 samples */
    STK__EV_VERIFY,     /* checksums of blocks first used this epoch */
    STK__EV_READ,       /* reads through the I/O engine; a0 reads, a1 bytes */
    STK__EV_ASSEMBLE,   /* copies, decoding, conversions into the slot */
    STK__EV_GROUP_LOAD, /* block order: a group read whole; a0 group, a1 bytes */
    STK__EV_GROUP_WAIT, /* block order: waiting for a group another loads */
    STK__EV_NEXT,       /* consumer: inside next(); a0 batch (or none) */
    STK__EV_USER,       /* consumer: a span the caller named */
    STK__EV_KINDS
} stk__ev_kind;

#define STK__EV_NONE UINT64_MAX /* an argument with nothing to say */

typedef struct stk__event {
    uint64_t t0, t1;
    uint64_t a0, a1;
    uint32_t kind;
    char name[28]; /* STK__EV_USER only */
} stk__event;

typedef struct stk__tbuf {
    stk__event *ev;
    _Atomic uint32_t n;
    _Atomic uint64_t dropped;
    _Atomic uint64_t gen; /* the generation this buffer was emptied for */
    _Atomic int tid;      /* the owner's thread id, for the file */
} stk__tbuf;

typedef struct stk__trace {
    _Atomic int on;
    _Atomic uint64_t gen;
    uint32_t cap; /* events per buffer, fixed by the first start */
    int nbufs;
    int reader; /* the buffer of the group reader thread, or -1 */
    stk__tbuf *bufs;
} stk__trace;

/* Sets up `nbufs` buffers, allocating nothing yet: buffer i < nbufs - 1
 * belongs to worker i (or, for i == reader, to the thread that reads block
 * order's groups ahead), the last to the consumer. */
void stk__trace_init(stk__trace *t, int nbufs, int reader);
/* Allocates (first call) and starts a new generation. */
int stk__trace_start(stk__trace *t, uint32_t cap, stk_error *err);
void stk__trace_stop(stk__trace *t);
void stk__trace_free(stk__trace *t);
/* Records a span in buffer `buf`; called only by that buffer's owner. */
void stk__trace_add(stk__trace *t, int buf, stk__ev_kind kind, uint64_t t0, uint64_t t1,
                    uint64_t a0, uint64_t a1, const char *name);
/* Writes the current generation's spans as Chrome trace JSON. */
int stk__trace_write(stk__trace *t, const char *path, stk_error *err);
/* The caller's kernel thread id. */
int stk__gettid(void);

static inline bool stk__tracing(const stk__trace *t) {
    return atomic_load_explicit(&t->on, memory_order_relaxed) != 0;
}

#endif
