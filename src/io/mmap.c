/*
 * mmap.c: "reads" that copy out of the dataset's read-only mapping.  With
 * the data in the page cache this is the cheapest path there is: no system
 * call per read, one copy.  Cold data faults in page by page, which is why
 * the automatic choice takes it only for resident data.  A shard cut short
 * by another program under the mapping faults with SIGBUS; the workers
 * turn that into an error naming the shard (the guard below).
 */
#include "io.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

static int mmap_exec(stk__io *io, stk__ioreq *reqs, size_t n, stk_error *err) {
    const stk_dataset *ds = io->files->ds;
    for (size_t i = 0; i < n; i++) {
        const stk__ioreq *r = &reqs[i];
        const stk__shard *sh = &ds->shards[r->shard];
        if (r->off > sh->size || r->need > sh->size - r->off)
            return stk__io_fail(io->files, r, 0, 0, err);
        memcpy(r->dst, sh->map + r->off, (size_t)STK__MIN(r->len, sh->size - r->off));
    }
    io->reads += n;
    return 0;
}

static void mmap_close(stk__io *io) { stk__free(io); }

static const stk__io_ops mmap_ops = {mmap_exec, mmap_close};

int stk__io_mmap_open(const stk__files *f, stk__io **out, stk_error *err) {
    (void)stk__bus_install(); /* without it a cut shard ends the process, as before */
    stk__io *io = stk__calloc(1, sizeof *io);
    if (!io) return stk__err(err, -ENOMEM, "out of memory");
    io->ops = &mmap_ops;
    io->files = f;
    *out = io;
    return 0;
}

/* ---- SIGBUS under the mapping ---- */

_Thread_local stk__bus_guard *volatile stk__bus_guard_cur __attribute__((tls_model("initial-exec")));

static struct sigaction bus_old;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static int bus_rc;

static void on_bus(int sig, siginfo_t *si, void *uc) {
    stk__bus_guard *g = stk__bus_guard_cur;
    if (g && si->si_code > 0) {
        stk__bus_guard_cur = NULL;
        g->addr = si->si_addr;
        siglongjmp(g->jb, 1);
    }
    /* Not ours: as if stoker's handler were not there. */
    if (bus_old.sa_flags & SA_SIGINFO) {
        bus_old.sa_sigaction(sig, si, uc);
        return;
    }
    if (bus_old.sa_handler != SIG_DFL && bus_old.sa_handler != SIG_IGN) {
        bus_old.sa_handler(sig);
        return;
    }
    /* The default: put it back and let the fault happen again (a SIGBUS
     * sent by kill is raised again). */
    signal(SIGBUS, SIG_DFL);
    if (si->si_code <= 0) raise(SIGBUS);
}

static void bus_install_once(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    /* SA_NODEFER: the handler leaves by siglongjmp, and the guards do not
     * save the signal mask (a system call each), so SIGBUS must not be
     * blocked while it runs: left blocked, the thread's next fault would
     * end the process. */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    bus_rc = sigaction(SIGBUS, &sa, &bus_old) == 0 ? 0 : -errno;
}

int stk__bus_install(void) {
    pthread_once(&bus_once, bus_install_once);
    return bus_rc;
}

int stk__bus_error(const stk_dataset *ds, const void *addr, stk_error *err) {
    const uint8_t *a = addr;
    for (size_t i = 0; i < ds->nshards; i++) {
        const stk__shard *sh = &ds->shards[i];
        if (!sh->map || a < sh->map || a >= sh->map + sh->size) continue;
        struct stat st;
        if (stat(sh->path, &st) != 0) st.st_size = -1;
        return stk__err(err, STK_ETRUNCATED,
                        "%s: cut short under the reader (%lld bytes now, %llu when opened): "
                        "byte %llu of its mapping is gone (SIGBUS), so another program "
                        "changed the shard in place; open the dataset again once it is whole",
                        sh->path, (long long)st.st_size, (unsigned long long)sh->size,
                        (unsigned long long)(a - sh->map));
    }
    return stk__err(err, -EFAULT,
                    "%s: a bus error (SIGBUS) while reading through the mapping, at an address "
                    "outside the dataset's shards",
                    ds->dir ? ds->dir : "the dataset");
}
