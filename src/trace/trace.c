/*
 * trace.c: recording spans per thread (see trace.h) and writing them as a
 * Chrome trace: the JSON "Trace Event Format" that Perfetto and
 * chrome://tracing open.
 *
 * The file holds one complete event ("ph": "X") per span on the thread that
 * ran it, named after the stage, and a thread_name record per thread.
 * Timestamps are microseconds with three decimals (so nanoseconds survive),
 * counted from the first span recorded: small numbers convert to the
 * viewers' integer nanoseconds exactly, which keeps children inside their
 * parents.  Within a thread the spans are written parents first: by start,
 * then longest first, then by nesting rank for spans of equal extent.
 */
#define _GNU_SOURCE
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const kind_names[STK__EV_KINDS] = {
    "batch", "plan", "verify", "read", "assemble", "group load", "group wait", "next", "",
};

/* Spans of equal extent nest in this order: a batch holds a group load,
 * which holds reads and checks. */
static const int kind_rank[STK__EV_KINDS] = {0, 2, 2, 2, 2, 1, 1, 0, 0};

int stk__gettid(void) {
    static _Thread_local int tid;
    if (!tid) tid = (int)syscall(SYS_gettid);
    return tid;
}

void stk__trace_init(stk__trace *t, int nbufs, int reader) {
    memset(t, 0, sizeof *t);
    t->nbufs = nbufs;
    t->reader = reader;
}

int stk__trace_start(stk__trace *t, uint32_t cap, stk_error *err) {
    if (!t->bufs) {
        if (cap == 0) cap = 1u << 16;
        stk__tbuf *b = stk__calloc((size_t)t->nbufs, sizeof *b);
        if (!b) return stk__err(err, -ENOMEM, "out of memory for the trace");
        for (int i = 0; i < t->nbufs; i++) {
            b[i].ev = stk__malloc((size_t)cap * sizeof *b[i].ev);
            if (!b[i].ev) {
                for (int j = 0; j < i; j++) stk__free(b[j].ev);
                stk__free(b);
                return stk__err(err, -ENOMEM,
                                "out of memory for the trace (%u spans per thread)", cap);
            }
            /* A generation no start has: every buffer is emptied by its
             * owner before its first span. */
            atomic_init(&b[i].gen, UINT64_MAX);
        }
        t->bufs = b;
        t->cap = cap;
    }
    atomic_fetch_add(&t->gen, 1);
    atomic_store_explicit(&t->on, 1, memory_order_release);
    return 0;
}

void stk__trace_stop(stk__trace *t) { atomic_store(&t->on, 0); }

void stk__trace_free(stk__trace *t) {
    if (t->bufs)
        for (int i = 0; i < t->nbufs; i++) stk__free(t->bufs[i].ev);
    stk__free(t->bufs);
    memset(t, 0, sizeof *t);
}

void stk__trace_add(stk__trace *t, int buf, stk__ev_kind kind, uint64_t t0, uint64_t t1,
                    uint64_t a0, uint64_t a1, const char *name) {
    if (!atomic_load_explicit(&t->on, memory_order_acquire) || buf < 0 || buf >= t->nbufs)
        return;
    stk__tbuf *b = &t->bufs[buf];
    uint64_t gen = atomic_load_explicit(&t->gen, memory_order_acquire);
    if (atomic_load_explicit(&b->gen, memory_order_relaxed) != gen) {
        /* A new start: the owner (this thread) empties its buffer. */
        atomic_store_explicit(&b->n, 0, memory_order_relaxed);
        atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
        atomic_store_explicit(&b->gen, gen, memory_order_release);
    }
    atomic_store_explicit(&b->tid, stk__gettid(), memory_order_relaxed);
    uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    if (n >= t->cap) {
        atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
        return;
    }
    stk__event *e = &b->ev[n];
    e->t0 = t0;
    e->t1 = t1 < t0 ? t0 : t1;
    e->a0 = a0;
    e->a1 = a1;
    e->kind = (uint32_t)kind;
    e->name[0] = 0;
    if (name) snprintf(e->name, sizeof e->name, "%s", name);
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

static int ev_cmp(const void *pa, const void *pb) {
    const stk__event *a = pa, *b = pb;
    if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
    if (a->t1 != b->t1) return a->t1 > b->t1 ? -1 : 1;
    return kind_rank[a->kind] - kind_rank[b->kind];
}

/* Drops the stages whose batch (or group load) is not in the trace: the
 * ones of a batch still being filled when the file is written, since a
 * batch's span is recorded only when it ends.  `ev` is sorted parents
 * first; returns the count kept. */
static uint32_t drop_orphans(stk__event *ev, uint32_t n) {
    uint64_t open_end[8]; /* ends of the enclosing spans, innermost last */
    uint32_t open_kind[8];
    int depth = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        stk__event e = ev[i];
        while (depth && open_end[depth - 1] <= e.t0 &&
               !(open_end[depth - 1] == e.t0 && e.t1 == e.t0))
            depth--;
        bool in_batch = false, in_load = false;
        for (int k = 0; k < depth; k++) {
            in_batch |= open_kind[k] == STK__EV_BATCH;
            in_load |= open_kind[k] == STK__EV_GROUP_LOAD;
        }
        bool keep = true;
        if (e.kind == STK__EV_PLAN || e.kind == STK__EV_ASSEMBLE) keep = in_batch;
        else if (e.kind == STK__EV_READ || e.kind == STK__EV_VERIFY) keep = in_batch || in_load;
        if (!keep) continue;
        ev[kept++] = e;
        if (depth < 8) {
            open_end[depth] = e.t1;
            open_kind[depth] = e.kind;
            depth++;
        }
    }
    return kept;
}

/* JSON string contents: quotes, backslashes and control characters escaped. */
static void put_json_str(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

static void put_us(FILE *f, uint64_t ns) {
    fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

static void put_args(FILE *f, const stk__event *e) {
    const char *k0 = NULL, *k1 = NULL;
    switch ((stk__ev_kind)e->kind) {
    case STK__EV_BATCH: k0 = "batch"; k1 = "samples"; break;
    case STK__EV_PLAN: k1 = "samples"; break;
    case STK__EV_READ: k0 = "reads"; k1 = "bytes"; break;
    case STK__EV_ASSEMBLE: k1 = "bytes"; break;
    case STK__EV_GROUP_LOAD: k0 = "group"; k1 = "bytes"; break;
    case STK__EV_GROUP_WAIT: k0 = "group"; break;
    case STK__EV_NEXT: k0 = "batch"; break;
    case STK__EV_VERIFY: k1 = "blocks"; break;
    default: break;
    }
    bool any = false;
    fputs(",\"args\":{", f);
    if (k0 && e->a0 != STK__EV_NONE) {
        fprintf(f, "\"%s\":%llu", k0, (unsigned long long)e->a0);
        any = true;
    }
    if (k1 && e->a1 != STK__EV_NONE)
        fprintf(f, "%s\"%s\":%llu", any ? "," : "", k1, (unsigned long long)e->a1);
    fputc('}', f);
}

int stk__trace_write(stk__trace *t, const char *path, stk_error *err) {
    if (!path) return stk__err(err, -EINVAL, "trace: a file name is required");
    if (!t->bufs)
        return stk__err(err, -EINVAL, "trace: nothing was recorded (start tracing first)");
    uint64_t gen = atomic_load_explicit(&t->gen, memory_order_acquire);
    /* Snapshot each buffer of this generation: what its count published. */
    stk__event **copy = stk__calloc((size_t)t->nbufs, sizeof *copy);
    uint32_t *count = stk__calloc((size_t)t->nbufs, sizeof *count);
    int rc = 0;
    if (!copy || !count) {
        rc = stk__err(err, -ENOMEM, "out of memory writing the trace");
        goto out;
    }
    uint64_t origin = UINT64_MAX, dropped = 0;
    for (int i = 0; i < t->nbufs; i++) {
        stk__tbuf *b = &t->bufs[i];
        if (atomic_load_explicit(&b->gen, memory_order_acquire) != gen) continue;
        uint32_t n = atomic_load_explicit(&b->n, memory_order_acquire);
        dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
        if (!n) continue;
        copy[i] = stk__malloc((size_t)n * sizeof **copy);
        if (!copy[i]) {
            rc = stk__err(err, -ENOMEM, "out of memory writing the trace");
            goto out;
        }
        memcpy(copy[i], b->ev, (size_t)n * sizeof **copy);
        count[i] = n;
        qsort(copy[i], n, sizeof **copy, ev_cmp);
        if (i < t->nbufs - 1) count[i] = n = drop_orphans(copy[i], n);
        if (n && copy[i][0].t0 < origin) origin = copy[i][0].t0;
    }
    if (origin == UINT64_MAX) origin = 0;
    origin -= origin % 1000;

    size_t plen = strlen(path);
    char *tmp = stk__malloc(plen + 16);
    if (!tmp) {
        rc = stk__err(err, -ENOMEM, "out of memory writing the trace");
        goto out;
    }
    snprintf(tmp, plen + 16, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = stk__err(err, -errno, "%s: cannot write the trace: %s", path, stk_strerror(-errno));
        stk__free(tmp);
        goto out;
    }
    int pid = (int)getpid();
    fputs("{\"traceEvents\":[\n", f);
    bool first = true;
    for (int i = 0; i < t->nbufs; i++) {
        stk__tbuf *b = &t->bufs[i];
        if (!count[i]) continue;
        int tid = atomic_load_explicit(&b->tid, memory_order_relaxed);
        char name[32];
        if (i == t->nbufs - 1) snprintf(name, sizeof name, "stoker consumer");
        else if (i == t->reader) snprintf(name, sizeof name, "stoker reader");
        else snprintf(name, sizeof name, "stoker worker %d", i);
        fprintf(f, "%s{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
                   "\"args\":{\"name\":\"%s\"}}",
                first ? "" : ",\n", pid, tid, name);
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
                   "\"args\":{\"sort_index\":%d}}",
                pid, tid, i == t->nbufs - 1 ? -1 : i);
        first = false;
        for (uint32_t k = 0; k < count[i]; k++) {
            const stk__event *e = &copy[i][k];
            fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"stoker\",\"pid\":%d,\"tid\":%d,\"name\":\"", pid,
                    tid);
            put_json_str(f, e->kind == STK__EV_USER ? e->name : kind_names[e->kind]);
            fputs("\",\"ts\":", f);
            put_us(f, e->t0 - origin);
            fputs(",\"dur\":", f);
            put_us(f, e->t1 - e->t0);
            put_args(f, e);
            fputc('}', f);
        }
    }
    fprintf(f, "\n],\"otherData\":{\"producer\":\"stoker %s\",\"origin_monotonic_ns\":%llu,"
               "\"dropped_spans\":%llu}}\n",
            stk_version(), (unsigned long long)origin, (unsigned long long)dropped);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (bad || rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        rc = stk__err(err, -e, "%s: cannot write the trace: %s", path, stk_strerror(-e));
    }
    stk__free(tmp);
out:
    if (copy)
        for (int i = 0; i < t->nbufs; i++) stk__free(copy[i]);
    stk__free(copy);
    stk__free(count);
    return rc;
}
