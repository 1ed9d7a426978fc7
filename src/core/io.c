/*
 * io.c: thin wrappers over file system calls.  They retry on EINTR and on
 * short transfers, and return negated errno values instead of touching the
 * caller's errno.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

int stk__open(const char *path, int flags, int mode) {
    int fd, e;
    if (stk__fault_hit(STK__FAULT_OPEN, &e)) return e ? e : -EIO;
    do {
        fd = open(path, flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

ssize_t stk__pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t done = 0;
    int e;
    if (stk__fault_hit(STK__FAULT_READ, &e)) {
        if (e) return e;
        n /= 2; /* a short read: half of what was asked */
    }
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* Writes the n buffers of v at off, all of them, in as few pwritev calls
 * as the system allows (one, but for short writes): a write's extent, not
 * its buffers, decides the size of the page cache folios it makes (the
 * writer's 2 MiB pieces).  v is advanced past what was written. */
static int pwritev_full(int fd, struct iovec *v, int n, uint64_t off) {
    int e;
    if (stk__fault_hit(STK__FAULT_WRITE, &e)) return e ? e : -ENOSPC;
    while (n > 0 && v->iov_len == 0) v++, n--;
    while (n > 0) {
        ssize_t r = pwritev(fd, v, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) return -EIO;
        off += (uint64_t)r;
        size_t done = (size_t)r;
        while (n > 0 && done >= v->iov_len) {
            done -= v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (char *)v->iov_base + done;
            v->iov_len -= done;
        }
    }
    return 0;
}

int stk__pwrite2_full(int fd, const void *a, size_t na, const void *b, size_t nb, uint64_t off) {
    struct iovec v[2] = {{(void *)a, na}, {(void *)b, nb}};
    return pwritev_full(fd, v, 2, off);
}

int stk__pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
    struct iovec v = {(void *)buf, n};
    return pwritev_full(fd, &v, 1, off);
}

int stk__fsync(int fd) {
    int e;
    if (stk__fault_hit(STK__FAULT_FSYNC, &e)) return e ? e : -EIO;
    while (fsync(fd) != 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

int stk__fsync_dir(const char *dir) {
    int fd = stk__open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) return fd;
    int rc = stk__fsync(fd);
    close(fd);
    return rc;
}

int stk__read_file(const char *path, char **out, size_t *len) {
    int fd = stk__open(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    size_t n = (size_t)st.st_size;
    char *buf = stk__malloc(n + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    ssize_t r = stk__pread_full(fd, buf, n, 0);
    close(fd);
    if (r < 0) {
        stk__free(buf);
        return (int)r;
    }
    buf[r] = '\0';
    *out = buf;
    *len = (size_t)r;
    return 0;
}

char *stk__path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = stk__malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

char *stk__path_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return stk__strdup(".");
    if (slash == path) return stk__strdup("/");
    char *d = stk__malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = 0;
    }
    return d;
}

int stk__write_file_atomic(const char *dir, const char *name, const void *data,
                           size_t len, bool sync) {
    /* The temporary file must be a new file of ours: created exclusively,
     * never through a link someone planted at its name (O_EXCL refuses
     * any existing name, a symbolic link included), under a name no one
     * can guess ahead; the rename then replaces whatever `name` is (a
     * link itself, not what it points to). */
    char *dst = stk__path_join(dir, name);
    char *tmp = NULL;
    int rc = 0, fd = -EEXIST;
    if (!dst) {
        rc = -ENOMEM;
        goto out;
    }
    for (int tries = 0; fd == -EEXIST && tries < 16; tries++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = stk__now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tries;
        char tmpname[STK_NAME_MAX * 2 + 48];
        snprintf(tmpname, sizeof tmpname, ".%s.tmp.%ld.%016llx", name, (long)getpid(),
                 (unsigned long long)r);
        stk__free(tmp);
        tmp = stk__path_join(dir, tmpname);
        if (!tmp) {
            rc = -ENOMEM;
            goto out;
        }
        fd = stk__open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    }
    if (fd < 0) {
        rc = fd;
        stk__free(tmp);
        tmp = NULL;
        goto out;
    }
    rc = stk__pwrite_full(fd, data, len, 0);
    if (rc == 0 && sync) rc = stk__fsync(fd);
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, dst) != 0) rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        goto out;
    }
    if (sync) rc = stk__fsync_dir(dir);
out:
    stk__free(tmp);
    stk__free(dst);
    return rc;
}

void stk__deadline(int64_t ms, struct timespec *at) {
    clock_gettime(CLOCK_MONOTONIC, at);
    at->tv_sec += ms / 1000;
    at->tv_nsec += (ms % 1000) * 1000000L;
    if (at->tv_nsec >= 1000000000L) {
        at->tv_sec++;
        at->tv_nsec -= 1000000000L;
    }
}

void stk__cond_init_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void stk__thread_name(const char *name) {
#ifdef __linux__
    pthread_setname_np(pthread_self(), name); /* (at most 15 characters) */
#else
    (void)name;
#endif
}

uint64_t stk__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
