/*
 * pack's inputs: the .npy files under the given paths, their headers, and
 * the thread that reads whole files ahead of the writer (see pack.h).
 */
#include "pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- collecting input files ---- */

void sv_push(strvec *s, const char *x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            perror("realloc");
            exit(EXIT_ERROR);
        }
    }
    s->v[s->n] = strdup(x);
    if (!s->v[s->n]) {
        perror("strdup");
        exit(EXIT_ERROR);
    }
    s->n++;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Adds the regular files ending in `ext` under `dir`, recursively,
 * unordered; pipes and devices are skipped.  `up` holds the directories on
 * the way down: a link back to one of them is a loop, -ELOOP. */
static int collect_tree(const char *dir, const char *ext, strvec *out, struct stat *up, int nup) {
    struct stat self;
    if (stat(dir, &self) != 0) return -errno;
    for (int i = 0; i < nup; i++)
        if (up[i].st_dev == self.st_dev && up[i].st_ino == self.st_ino) {
            fprintf(stderr, "%s: error: %s: leads back to a directory above it (a link loop)\n",
                    prog, dir);
            return -ELOOP;
        }
    if (nup == 64) return -ELOOP;
    up[nup] = self;
    DIR *d = opendir(dir);
    if (!d) return -errno;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) rc = collect_tree(path, ext, out, up, nup + 1);
        else if (S_ISREG(st.st_mode) && has_suffix(path, ext)) sv_push(out, path);
    }
    closedir(d);
    return rc;
}

void sv_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

int collect_dir(const char *dir, const char *ext, strvec *out) {
    size_t first = out->n;
    struct stat up[64];
    int rc = collect_tree(dir, ext, out, up, 0);
    /* An empty list has no array yet, and qsort wants one even for none. */
    if (rc == 0 && out->n > first) qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
    return rc;
}

/* ---- reading .npy files ---- */

int read_npy_header(const char *path, stk_npy_header *h, uint64_t *fsize, stk_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err->code = -errno;
        snprintf(err->message, sizeof err->message, "%s: %s", path, strerror(errno));
        return err->code;
    }
    struct stat st;
    fstat(fd, &st);
    *fsize = (uint64_t)st.st_size;
    size_t cap = 4096;
    char *buf = malloc(cap);
    ssize_t n = buf ? pread(fd, buf, cap, 0) : -1;
    int rc = n < 0 ? -EIO : stk_npy_parse(buf, (size_t)n, path, h, err);
    if (rc == STK_ETRUNCATED && (uint64_t)n == cap && st.st_size > (off_t)cap) {
        /* A long header (many dimensions or padding): read up to 1 MiB. */
        cap = (size_t)(st.st_size < (1 << 20) ? st.st_size : (1 << 20));
        char *b2 = realloc(buf, cap);
        if (b2) {
            buf = b2;
            n = pread(fd, buf, cap, 0);
            rc = n < 0 ? -EIO : stk_npy_parse(buf, (size_t)n, path, h, err);
        }
    }
    if (n < 0) snprintf(err->message, sizeof err->message, "%s: read failed", path);
    free(buf);
    close(fd);
    if (rc == 0 && h->data_offset + h->data_bytes > *fsize) {
        err->code = rc = STK_ETRUNCATED;
        snprintf(err->message, sizeof err->message,
                 "%s: the header promises %" PRIu64 " bytes of data but the file ends "
                 "%" PRIu64 " bytes early",
                 path, h->data_bytes, h->data_offset + h->data_bytes - *fsize);
    }
    return rc;
}

/* ---- reading ahead ---- */

/* Reads file k of the queue into its slot. */
static void prefetch_one(prefetcher *p, size_t k) {
    rd_slot *sl = &p->slot[k % PREFETCH_SLOTS];
    const stk_npy_header *h = &p->nf[p->queue[k]].h;
    sl->err = 0;
    if (h->data_bytes > sl->cap) {
        free(sl->buf);
        sl->cap = (size_t)h->data_bytes;
        sl->buf = malloc(sl->cap);
        if (!sl->buf) sl->err = ENOMEM, sl->cap = 0;
    }
    int fd = sl->err ? -1 : open(p->paths[p->queue[k]], O_RDONLY | O_CLOEXEC);
    if (fd < 0 && !sl->err) sl->err = errno;
    size_t got = 0;
    while (fd >= 0 && got < h->data_bytes) {
        ssize_t r = pread(fd, sl->buf + got, (size_t)h->data_bytes - got,
                          (off_t)(h->data_offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (fd >= 0) {
        if (got != h->data_bytes) sl->err = -1;
        close(fd);
    }
}

static void *prefetch_main(void *arg) {
    prefetcher *p = arg;
    for (size_t k = 0; k < p->n; k++) {
        pthread_mutex_lock(&p->mu);
        while (k - p->consumed >= PREFETCH_SLOTS && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        prefetch_one(p, k);
        pthread_mutex_lock(&p->mu);
        p->slot[k % PREFETCH_SLOTS].ready = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int prefetch_start(prefetcher *p, const npy_file *nf, char **paths, const size_t *queue,
                   size_t n) {
    memset(p, 0, sizeof *p);
    p->nf = nf;
    p->paths = paths;
    p->queue = queue;
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = pthread_create(&p->tid, NULL, prefetch_main, p);
    p->started = rc == 0;
    return rc;
}

const rd_slot *prefetch_next(prefetcher *p) {
    rd_slot *sl = &p->slot[p->consumed % PREFETCH_SLOTS];
    pthread_mutex_lock(&p->mu);
    while (!sl->ready) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return sl;
}

void prefetch_release(prefetcher *p) {
    pthread_mutex_lock(&p->mu);
    p->slot[p->consumed % PREFETCH_SLOTS].ready = 0;
    p->consumed++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void prefetch_stop(prefetcher *p) {
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->tid, NULL);
        p->started = false;
    }
    for (int k = 0; k < PREFETCH_SLOTS; k++) free(p->slot[k].buf);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}
