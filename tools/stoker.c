/*
 * stoker: the command line.  It uses only the public API in stoker.h.
 *
 *   stoker pack    pack files into a dataset
 *   stoker merge   join the parts of a split pack
 *   stoker inspect show a dataset's schema, shards and counts
 *   stoker verify  check every checksum of a dataset
 *   stoker cat     print one record
 */
#include "stoker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* Exit codes: 0 success, 1 the data is bad (verify found damage), 2 usage or
 * operational error. */
enum { EXIT_DAMAGED = 1, EXIT_ERROR = 2 };

static const char *prog = "stoker";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", prog, cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s %s --help'.\n", prog, cmd);
    va_end(ap);
    exit(EXIT_ERROR);
}

static int fail(const stk_error *e) {
    fprintf(stderr, "%s: error: %s\n", prog, e->message);
    return EXIT_ERROR;
}

static void human_bytes(double b, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return false;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end) return false;
    *out = (uint64_t)(v * mul);
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return false;
    *out = v;
    return true;
}

/* ---- progress bar: only when stderr is a terminal ---- */

typedef struct progress {
    bool on;
    const char *what;
    double start, last;
} progress;

static void progress_init(progress *p, const char *what, bool quiet) {
    p->on = !quiet && isatty(2);
    p->what = what;
    p->start = p->last = now_s();
}

static void progress_show(progress *p, uint64_t done, uint64_t total, const char *unit_is_bytes) {
    if (!p->on) return;
    double t = now_s();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    double frac = total ? (double)done / (double)total : 1.0;
    int width = 30, fill = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double el = t - p->start;
    char rate[48] = "";
    if (el > 0 && unit_is_bytes) {
        char hb[32];
        human_bytes((double)done / el, hb, sizeof hb);
        snprintf(rate, sizeof rate, "%s/s", hb);
    } else if (el > 0) {
        snprintf(rate, sizeof rate, "%.0f/s", (double)done / el);
    }
    fprintf(stderr, "\r%-8s [%s] %5.1f%% %s   ", p->what, bar, frac * 100, rate);
    fflush(stderr);
}

static void progress_end(progress *p) {
    if (p->on) fprintf(stderr, "\r%*s\r", 72, "");
}

/* ---- collecting input files ---- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static void sv_push(strvec *s, const char *x) {
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

/* Adds the files ending in `ext` under `dir`, recursively, in the byte
 * order of their full paths (as Python's sorted() or `LC_ALL=C sort`:
 * "site0.npy" before "site0/a.npy"), the order `stoker index` takes. */
static int collect_dir(const char *dir, const char *ext, strvec *out) {
    size_t first = out->n;
    struct stat up[64];
    int rc = collect_tree(dir, ext, out, up, 0);
    if (rc == 0) qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
    return rc;
}

/* Opens a dataset or an in-place index, whose files may lie under `root`
 * (NULL: the index's own directory; see stk_open_options). */
static int open_path(const char *path, const char *root, stk_dataset **ds, stk_error *err) {
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.root = root;
    return stk_dataset_open_with(path, &oo, ds, err);
}

#define ROOT_HELP \
    "  --root DIR   an in-place index's files may lie under DIR (default: the\n" \
    "               index's own directory; only for an index you trust)\n"

/* ---- pack ---- */

static const char pack_help[] =
    "Usage: stoker pack --from npy PATH... -o DATASET [options]\n"
    "       stoker pack --from parquet GLOB... -o DATASET [--group-by COL --order-by COL]\n"
    "       (Parquet goes through the Python package; see stoker pack --from parquet --help)\n"
    "\n"
    "Packs files into a stoker dataset: indexed shard files and a manifest.\n"
    "A PATH that is a directory contributes every .npy file below it, in the\n"
    "byte order of their full paths (as `LC_ALL=C sort`: a.npy before a/b.npy).\n"
    "\n"
    "  --from FORMAT      input format: npy or parquet\n"
    "  -o, --output DIR   the dataset directory to create\n"
    "  --field NAME       name of the single field (default x)\n"
    "  --split-axis0      cut each array into records along axis 0, instead of\n"
    "                     one record per file\n"
    "  --ragged           make the first dimension ragged even if every file\n"
    "                     has the same length (default: ragged only if they differ)\n"
    "  --compress zstd[:LEVEL]  compress the field per record\n"
    "  --shard-size SIZE  roll over to a new shard at this size (default 256M)\n"
    "  --align N          align every field to N bytes (default 64)\n"
    "  --part I/N         write part I of N (0-based) of the inputs; join the\n"
    "                     parts afterwards with `stoker merge DATASET`\n"
    "  --force            replace an existing dataset\n"
    "  --resume           continue an interrupted pack of the same inputs (their\n"
    "                     paths, sizes and times are checked against the pack's\n"
    "                     journal; changed inputs are refused): keep\n"
    "                     the shards it finished, pack the rest\n"
    "  --no-sync          skip fsync (faster; not durable across power loss)\n"
    "  -q, --quiet        no progress bar and no summary\n"
    "\n"
    "Examples:\n"
    "  stoker pack --from npy clips/ -o clips.stk\n"
    "  stoker pack --from npy big.npy --split-axis0 --field rows -o rows.stk\n"
    "  for i in 0 1 2 3; do stoker pack --from npy data/ -o ds --part $i/4 & done; wait\n"
    "  stoker merge ds\n";

typedef struct npy_file {
    stk_npy_header h;
    uint64_t first_row; /* split mode: global index of its first record */
} npy_file;

static int read_npy_header(const char *path, stk_npy_header *h, uint64_t *fsize,
                           stk_error *err) {
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

/* Reads the next files while the writer packs the current one: a small
 * ring of buffers filled by one thread, in order. */
#define PREFETCH_SLOTS 4

typedef struct rd_slot {
    char *buf;
    size_t cap;
    int err; /* 0, or an errno; -1: short read */
    int ready;
} rd_slot;

typedef struct prefetcher {
    const npy_file *nf;
    char **paths;
    const size_t *queue; /* file indexes, in packing order */
    size_t n;
    rd_slot slot[PREFETCH_SLOTS];
    size_t consumed; /* slots handed back by the packer */
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} prefetcher;

static void *prefetch_main(void *arg) {
    prefetcher *p = arg;
    for (size_t k = 0; k < p->n; k++) {
        pthread_mutex_lock(&p->mu);
        while (k - p->consumed >= PREFETCH_SLOTS && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
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
        pthread_mutex_lock(&p->mu);
        sl->ready = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

static bool same_tail(const stk_npy_header *a, const stk_npy_header *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 1; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static void shape_str(const int64_t *shape, int ndim, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(out + k, cap - k, ")");
}

/* The Python that has the stoker package: $STOKER_PYTHON; else the
 * interpreter beside this program (a virtual environment's bin/, where pip
 * put it); else the one the package was built for (STK_PYTHON, set by the
 * pip build); else python3 on the PATH. */
static const char *find_python(char *buf, size_t cap) {
    const char *py = getenv("STOKER_PYTHON");
    if (py && *py) return py;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 16);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        static const char *const names[] = {"python3", "python"};
        for (size_t i = 0; slash && i < 2; i++) {
            snprintf(slash + 1, cap - (size_t)(slash + 1 - buf), "%s", names[i]);
            if (access(buf, X_OK) == 0) return buf;
        }
    }
#ifdef STK_PYTHON
    if (access(STK_PYTHON, X_OK) == 0) return STK_PYTHON;
#endif
    return "python3";
}

/* Parquet is read by pyarrow: hand the command to the Python package. */
static int pack_via_python(int argc, char **argv) {
    static char pybuf[4096];
    const char *py = find_python(pybuf, sizeof pybuf);
    char **args = calloc((size_t)argc + 5, sizeof *args);
    if (!args) return EXIT_ERROR;
    int k = 0;
    args[k++] = (char *)py;
    args[k++] = "-m";
    args[k++] = "stoker";
    args[k++] = "pack";
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    execvp(py, args);
    fprintf(stderr,
            "%s: error: --from parquet runs the stoker Python package, but '%s' could not be "
            "started (%s); install it (pip install stoker pyarrow) or set STOKER_PYTHON\n",
            prog, py, strerror(errno));
    free(args);
    return EXIT_ERROR;
}

/* What a pack is made from, for resume and merge to check: a digest of
 * every input file's path, device, inode, size and modification time, in
 * order, and of the options that decide which records come from them.
 * Every part of a split pack computes the same one. */
static int inputs_digest(const strvec *files, bool split, uint32_t parts, char *out, size_t cap) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        fprintf(stderr, "%s: error: out of memory\n", prog);
        return -1;
    }
    XXH3_64bits_reset(st);
    char opt[64];
    int n = snprintf(opt, sizeof opt, "npy split=%d parts=%u\n", split, parts);
    XXH3_64bits_update(st, opt, (size_t)n);
    for (size_t i = 0; i < files->n; i++) {
        struct stat sb;
        if (stat(files->v[i], &sb) != 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, files->v[i], strerror(errno));
            XXH3_freeState(st);
            return -1;
        }
        uint64_t id[5] = {(uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                          (uint64_t)sb.st_mtim.tv_sec, (uint64_t)sb.st_mtim.tv_nsec};
        XXH3_64bits_update(st, files->v[i], strlen(files->v[i]) + 1);
        XXH3_64bits_update(st, id, sizeof id);
    }
    snprintf(out, cap, "npy:%zu:%016llx", files->n, (unsigned long long)XXH3_64bits_digest(st));
    XXH3_freeState(st);
    return 0;
}

static int cmd_pack(int argc, char **argv) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--from") && !strcmp(argv[i + 1], "parquet"))
            return pack_via_python(argc, argv);
    const char *from = NULL, *output = NULL, *field = "x", *compress = NULL;
    bool split = false, ragged = false, quiet = false;
    stk_writer_options wo;
    stk_writer_options_init(&wo);
    strvec inputs = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (die_usage("pack", "%s needs a value", a), ""))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(pack_help, stdout);
            return 0;
        } else if (!strcmp(a, "--from")) from = NEXT();
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) output = NEXT();
        else if (!strcmp(a, "--field")) field = NEXT();
        else if (!strcmp(a, "--split-axis0")) split = true;
        else if (!strcmp(a, "--ragged")) ragged = true;
        else if (!strcmp(a, "--compress")) compress = NEXT();
        else if (!strcmp(a, "--shard-size")) {
            const char *v = NEXT();
            if (!parse_size(v, &wo.shard_bytes)) die_usage("pack", "bad --shard-size '%s'", v);
        } else if (!strcmp(a, "--align")) {
            uint64_t v;
            const char *s = NEXT();
            if (!parse_u64(s, &v) || v > 4096) die_usage("pack", "bad --align '%s'", s);
            wo.align = (uint32_t)v;
        } else if (!strcmp(a, "--part")) {
            const char *v = NEXT();
            unsigned pi, pc;
            char extra;
            if (sscanf(v, "%u/%u%c", &pi, &pc, &extra) != 2 || pc == 0 || pi >= pc)
                die_usage("pack", "--part wants I/N with 0 <= I < N, not '%s'", v);
            wo.part_index = pi;
            wo.part_count = pc;
        } else if (!strcmp(a, "--force")) wo.overwrite = 1;
        else if (!strcmp(a, "--resume")) wo.resume = 1;
        else if (!strcmp(a, "--no-sync")) wo.sync = 0;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else if (a[0] == '-' && a[1]) die_usage("pack", "unknown option '%s'", a);
        else sv_push(&inputs, a);
#undef NEXT
    }
    if (!from) die_usage("pack", "--from is required (npy)");
    if (strcmp(from, "npy") != 0)
        die_usage("pack", "--from %s is not supported (npy and parquet are)", from);
    if (!output) die_usage("pack", "-o DATASET is required");
    if (!inputs.n) die_usage("pack", "no input paths given");

    stk_field f;
    memset(&f, 0, sizeof f);
    f.name = field;
    if (compress) {
        int level = 0;
        if (strncmp(compress, "zstd", 4) != 0 ||
            (compress[4] && (compress[4] != ':' || sscanf(compress + 5, "%d", &level) != 1)))
            die_usage("pack", "--compress wants zstd or zstd:LEVEL, not '%s'", compress);
        f.codec = STK_CODEC_ZSTD;
        f.codec_level = level;
    }

    strvec files = {0};
    for (size_t i = 0; i < inputs.n; i++) {
        struct stat st;
        if (stat(inputs.v[i], &st) != 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, inputs.v[i], strerror(errno));
            return EXIT_ERROR;
        }
        if (S_ISDIR(st.st_mode)) {
            int rc = collect_dir(inputs.v[i], ".npy", &files);
            if (rc) {
                fprintf(stderr, "%s: error: %s: %s\n", prog, inputs.v[i], strerror(-rc));
                return EXIT_ERROR;
            }
        } else if (!S_ISREG(st.st_mode)) {
            /* A pipe or a device would block the read of its header. */
            fprintf(stderr, "%s: error: %s: not a regular file (a pipe, socket or device)\n",
                    prog, inputs.v[i]);
            return EXIT_ERROR;
        } else {
            sv_push(&files, inputs.v[i]);
        }
    }
    if (!files.n) {
        fprintf(stderr, "%s: error: no .npy files found in the given paths\n", prog);
        return EXIT_ERROR;
    }

    /* Every part reads every header, so that all parts infer one schema. */
    stk_error err = {0};
    npy_file *nf = calloc(files.n, sizeof *nf);
    uint64_t total_rows = 0, total_bytes = 0;
    bool same_len = true;
    for (size_t i = 0; i < files.n; i++) {
        uint64_t fsize;
        if (read_npy_header(files.v[i], &nf[i].h, &fsize, &err)) return fail(&err);
        const stk_npy_header *h = &nf[i].h, *h0 = &nf[0].h;
        if (h->dtype != h0->dtype || !same_tail(h, h0)) {
            char s0[128], s1[128];
            shape_str(h0->shape, h0->ndim, s0, sizeof s0);
            shape_str(h->shape, h->ndim, s1, sizeof s1);
            fprintf(stderr,
                    "%s: error: %s: dtype %s shape %s does not fit %s's dtype %s shape %s "
                    "(all files must share dtype and every dimension but the first)\n",
                    prog, files.v[i], stk_dtype_name(h->dtype), s1, files.v[0],
                    stk_dtype_name(h0->dtype), s0);
            return EXIT_ERROR;
        }
        if (split && h->ndim == 0) {
            fprintf(stderr, "%s: error: %s: --split-axis0 needs arrays of at least one dimension\n",
                    prog, files.v[i]);
            return EXIT_ERROR;
        }
        if (h->ndim && h->shape[0] != h0->shape[0]) same_len = false;
        nf[i].first_row = total_rows;
        total_rows += split ? (uint64_t)h->shape[0] : 1;
        total_bytes += h->data_bytes;
    }
    const stk_npy_header *h0 = &nf[0].h;
    f.dtype = h0->dtype;
    if (split) {
        f.ndim = h0->ndim - 1;
        for (int d = 1; d < h0->ndim; d++) f.shape[d - 1] = h0->shape[d];
    } else {
        f.ndim = h0->ndim;
        for (int d = 0; d < h0->ndim; d++) f.shape[d] = h0->shape[d];
        if (h0->ndim && (ragged || !same_len || h0->shape[0] == 0)) f.shape[0] = STK_RAGGED;
    }

    uint64_t lo = total_rows * wo.part_index / wo.part_count;
    uint64_t hi = total_rows * (wo.part_index + 1) / wo.part_count;
    char digest[48];
    if (inputs_digest(&files, split, wo.part_count, digest, sizeof digest)) return EXIT_ERROR;
    wo.inputs = digest;

    stk_writer *w = NULL;
    if (stk_writer_create(output, &f, 1, &wo, &w, &err)) {
        if (err.code == -EINVAL)
            fprintf(stderr, "%s: error: the arrays (e.g. %s) do not make a valid field: %s\n", prog,
                    files.v[0], err.message);
        else
            fail(&err);
        return EXIT_ERROR;
    }
    uint64_t done = stk_writer_num_records(w);
    if (done) {
        if (!quiet) fprintf(stderr, "%s: resuming after %" PRIu64 " records already packed\n", prog, done);
        lo += done;
    }
    progress pb;
    progress_init(&pb, "pack", quiet);
    double t0 = now_s();
    uint64_t in_bytes = 0;
    int rc = 0;
    prefetcher pf;
    memset(&pf, 0, sizeof pf);
    pthread_t pf_tid;
    bool pf_started = false;
    size_t *queue = NULL, k_next = 0;
    if (!split) {
        queue = malloc(files.n * sizeof *queue);
        if (!queue) {
            perror("malloc");
            exit(EXIT_ERROR);
        }
        for (size_t i = 0; i < files.n; i++)
            if (nf[i].first_row >= lo && nf[i].first_row < hi) queue[pf.n++] = i;
        pf.nf = nf;
        pf.paths = files.v;
        pf.queue = queue;
        pthread_mutex_init(&pf.mu, NULL);
        pthread_cond_init(&pf.cv, NULL);
        pf_started = pthread_create(&pf_tid, NULL, prefetch_main, &pf) == 0;
        if (!pf_started) {
            fprintf(stderr, "%s: error: cannot start the reading thread\n", prog);
            rc = EXIT_ERROR;
        }
    }
    for (size_t i = 0; i < files.n && rc == 0; i++) {
        const stk_npy_header *h = &nf[i].h;
        uint64_t nrows = split ? (uint64_t)h->shape[0] : 1;
        uint64_t a = nf[i].first_row, b = a + nrows;
        if (b <= lo || a >= hi) continue;
        if (!split) {
            rd_slot *sl = &pf.slot[k_next % PREFETCH_SLOTS];
            pthread_mutex_lock(&pf.mu);
            while (!sl->ready) pthread_cond_wait(&pf.cv, &pf.mu);
            pthread_mutex_unlock(&pf.mu);
            if (sl->err) {
                if (sl->err > 0)
                    fprintf(stderr, "%s: error: %s: %s\n", prog, files.v[i], strerror(sl->err));
                else
                    fprintf(stderr, "%s: error: %s: could not read %" PRIu64 " bytes of data "
                            "(the file changed or is truncated)\n", prog, files.v[i],
                            h->data_bytes);
                rc = EXIT_ERROR;
            } else {
                stk_value v = {sl->buf, h->ndim ? (uint64_t)h->shape[0] : 1};
                if (stk_writer_append(w, &v, &err)) rc = fail(&err);
            }
            in_bytes += h->data_bytes;
            pthread_mutex_lock(&pf.mu);
            sl->ready = 0;
            pf.consumed = ++k_next;
            pthread_cond_broadcast(&pf.cv);
            pthread_mutex_unlock(&pf.mu);
            progress_show(&pb, in_bytes, total_bytes * (hi - lo) / (total_rows ? total_rows : 1), "b");
            continue;
        }
        int fd = open(files.v[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, files.v[i], strerror(errno));
            rc = EXIT_ERROR;
            break;
        }
        {
            size_t len = (size_t)(h->data_offset + h->data_bytes);
            uint8_t *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
            if (len && map == MAP_FAILED) {
                fprintf(stderr, "%s: error: %s: mmap: %s\n", prog, files.v[i], strerror(errno));
                rc = EXIT_ERROR;
            } else {
                madvise(map, len, MADV_SEQUENTIAL);
                uint64_t row_bytes = nrows ? h->data_bytes / nrows : 0;
                uint64_t r0 = (lo > a ? lo : a) - a, r1 = (hi < b ? hi : b) - a;
                for (uint64_t r = r0; r < r1 && rc == 0; r++) {
                    stk_value v = {map + h->data_offset + r * row_bytes,
                                   f.ndim ? (uint64_t)f.shape[0] : 1};
                    if (stk_writer_append(w, &v, &err)) rc = fail(&err);
                    in_bytes += row_bytes;
                    if ((r & 1023) == 0) progress_show(&pb, in_bytes, total_bytes, "b");
                }
                if (len) munmap(map, len);
            }
        }
        close(fd);
        progress_show(&pb, in_bytes, total_bytes * (hi - lo) / (total_rows ? total_rows : 1), "b");
    }
    if (pf_started) {
        pthread_mutex_lock(&pf.mu);
        pf.stop = 1;
        pthread_cond_broadcast(&pf.cv);
        pthread_mutex_unlock(&pf.mu);
        pthread_join(pf_tid, NULL);
    }
    for (int k = 0; k < PREFETCH_SLOTS; k++) free(pf.slot[k].buf);
    free(queue);
    if (rc == 0 && stk_writer_finish(w, &err)) rc = fail(&err);
    double el = now_s() - t0;
    progress_end(&pb);
    uint64_t nrec = stk_writer_num_records(w), written = stk_writer_bytes_written(w);
    stk_writer_free(w);
    if (rc) {
        fprintf(stderr, "%s: the dataset at %s is left incomplete\n", prog, output);
        return rc;
    }
    if (!quiet) {
        char hb[32], hr[32];
        human_bytes((double)written, hb, sizeof hb);
        human_bytes(el > 0 ? (double)in_bytes / el : 0, hr, sizeof hr);
        printf("packed %" PRIu64 " records (%s) into %s%s in %.2f s: %s/s\n", nrec, hb, output,
               wo.part_count > 1 ? " (one part)" : "", el, hr);
    }
    for (size_t i = 0; i < files.n; i++) free(files.v[i]);
    for (size_t i = 0; i < inputs.n; i++) free(inputs.v[i]);
    free(files.v);
    free(inputs.v);
    free(nf);
    return 0;
}

/* ---- merge ---- */

static const char merge_help[] =
    "Usage: stoker merge DATASET\n"
    "\n"
    "Joins the parts written by `stoker pack --part I/N` into DATASET into one\n"
    "dataset.  Every part 0..N-1 must have finished.  Records keep the order\n"
    "of the parts.\n"
    "\n"
    "Example:\n"
    "  stoker pack --from npy data/ -o ds --part 0/2\n"
    "  stoker pack --from npy data/ -o ds --part 1/2\n"
    "  stoker merge ds\n";

static int cmd_merge(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(merge_help, stdout);
            return 0;
        }
        if (argv[i][0] == '-') die_usage("merge", "unknown option '%s'", argv[i]);
        if (path) die_usage("merge", "one DATASET only");
        path = argv[i];
    }
    if (!path) die_usage("merge", "DATASET is required");
    stk_error err = {0};
    if (stk_merge(path, &err)) return fail(&err);
    stk_dataset *ds = NULL;
    if (stk_dataset_open(path, &ds, &err)) return fail(&err);
    printf("merged %s: %" PRIu64 " records in %zu shards\n", path, stk_dataset_num_records(ds),
           stk_dataset_num_shards(ds));
    stk_dataset_close(ds);
    return 0;
}

/* ---- index ---- */

static const char index_help[] =
    "Usage: stoker index PATH... -o INDEX [options]\n"
    "\n"
    "Indexes files where they lie, without converting them: records map to\n"
    "byte ranges of the files, and INDEX then opens like a dataset in every\n"
    "command and in the loader (same orders, windows, ranks, resume).  Each\n"
    "file's size and modification time are recorded; a file that changes\n"
    "afterwards is refused until it is indexed again.  PATHs are files or\n"
    "directories; a directory's files, at any depth, come in the byte order\n"
    "of their full paths (as `LC_ALL=C sort`: site0.npy before site0/a.npy).\n"
    "\n"
    "  -o, --output INDEX   the index file to write (replaced atomically)\n"
    "  --from SOURCE        npy, wav, hdf5 or raw (default: from the first\n"
    "                       file's extension)\n"
    "  --split-axis0        npy: every row along axis 0 is a record (default:\n"
    "                       each file is one record)\n"
    "  --dataset NAME       hdf5: the dataset to read (default: the only one);\n"
    "                       records are its rows along axis 0\n"
    "  --float32            wav: deliver float32 in [-1, 1) (default: PCM 16 as\n"
    "                       i16, 24 and 32 as i32, float as stored)\n"
    "  --field NAME         the field's name (default data, audio or bytes)\n"
    "  --ext SUFFIX         in directories, only files ending in SUFFIX\n"
    "\n"
    "Sources: .npy (C order, little-endian); WAV PCM 8/16/24/32-bit and float,\n"
    "any channel count (a clip is a record; windows run over frames); HDF5\n"
    "contiguous or chunked datasets, plain or filtered by shuffle, gzip and\n"
    "Fletcher-32 (any of them), whose chunks hold whole rows; raw files (each\n"
    "file's bytes are one record).\n"
    "\n"
    "Examples:\n"
    "  stoker index clips/ -o clips.idx --float32\n"
    "  stoker read clips.idx --window 16000 --stride 8000 --shuffle random\n"
    "  stoker index spectra.h5 --dataset segments -o spectra.idx\n";

static int cmd_index(int argc, char **argv) {
    stk_index_options o;
    stk_index_options_init(&o);
    const char *out = NULL;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    size_t np = 0;
    if (!paths) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_ERROR;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(index_help, stdout);
            free(paths);
            return 0;
        }
        bool has = i + 1 < argc;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!has) die_usage("index", "%s needs a path", a);
            out = argv[++i];
        } else if (!strcmp(a, "--from")) {
            if (!has) die_usage("index", "--from needs npy, wav, hdf5 or raw");
            const char *v = argv[++i];
            if (!strcmp(v, "npy")) o.source = STK_SOURCE_NPY;
            else if (!strcmp(v, "wav")) o.source = STK_SOURCE_WAV;
            else if (!strcmp(v, "hdf5") || !strcmp(v, "h5")) o.source = STK_SOURCE_HDF5;
            else if (!strcmp(v, "raw")) o.source = STK_SOURCE_RAW;
            else die_usage("index", "--from: '%s' is not npy, wav, hdf5 or raw", v);
        } else if (!strcmp(a, "--split-axis0")) {
            o.split_axis0 = 1;
        } else if (!strcmp(a, "--dataset")) {
            if (!has) die_usage("index", "--dataset needs a name");
            o.hdf5_dataset = argv[++i];
        } else if (!strcmp(a, "--float32")) {
            o.wav_float32 = 1;
        } else if (!strcmp(a, "--field")) {
            if (!has) die_usage("index", "--field needs a name");
            o.field = argv[++i];
        } else if (!strcmp(a, "--ext")) {
            if (!has) die_usage("index", "--ext needs a suffix");
            o.extension = argv[++i];
        } else if (a[0] == '-') {
            die_usage("index", "unknown option '%s'", a);
        } else {
            paths[np++] = a;
        }
    }
    if (!np) die_usage("index", "at least one PATH is required");
    if (!out) die_usage("index", "-o INDEX is required");
    stk_error err = {0};
    uint64_t records = 0;
    double t0 = now_s();
    int rc = stk_index_build(paths, np, out, &o, &records, &err);
    free(paths);
    if (rc) return fail(&err);
    stk_dataset *ds = NULL;
    if (open_path(out, "/", &ds, &err)) return fail(&err);
    printf("indexed %" PRIu64 " records in %zu files into %s (%.2f s)\n", records,
           stk_dataset_num_shards(ds), out, now_s() - t0);
    stk_dataset_close(ds);
    ds = NULL;
    if (open_path(out, NULL, &ds, &err) == STK_EOUTSIDE) {
        const char *at = strstr(err.message, "allows root "), *end = NULL;
        if (at) at += strlen("allows root ");
        if (at) end = strstr(at, " (--root");
        printf("note: the files lie outside the index's directory, so reading it needs "
               "--root %.*s (root=\"%.*s\" in Python)\n",
               end ? (int)(end - at) : 3, end ? at : "DIR", end ? (int)(end - at) : 3,
               end ? at : "DIR");
    }
    stk_dataset_close(ds);
    return 0;
}

/* ---- inspect ---- */

static const char inspect_help[] =
    "Usage: stoker inspect DATASET [--all]\n"
    "\n"
    "Shows a dataset's schema, its shards, and its record and byte counts.\n"
    "Opening validates every shard header and index (not the record bytes;\n"
    "see `stoker verify`).\n"
    "\n"
    "  --all        list every shard (default: the first 10)\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker inspect basins.stk\n";

static void field_shape(const stk_field *f, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < f->ndim && k < cap; d++) {
        if (f->shape[d] == STK_RAGGED) k += (size_t)snprintf(out + k, cap - k, d ? ", *" : "*");
        else k += (size_t)snprintf(out + k, cap - k, d ? ", %lld" : "%lld", (long long)f->shape[d]);
    }
    if (k < cap) snprintf(out + k, cap - k, "]");
}

static int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *root = NULL;
    bool all = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--root") && i + 1 == argc) die_usage("inspect", "--root needs a value");
        if (!strcmp(argv[i], "--all")) all = true;
        else if (!strcmp(argv[i], "--root")) root = argv[++i];
        else if (argv[i][0] == '-') die_usage("inspect", "unknown option '%s'", argv[i]);
        else path = argv[i];
    }
    if (!path) die_usage("inspect", "DATASET is required");
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(path, root, &ds, &err)) return fail(&err);
    size_t ns = stk_dataset_num_shards(ds);
    uint64_t bytes = 0, data = 0;
    for (size_t i = 0; i < ns; i++) {
        stk_shard_info si;
        stk_dataset_shard(ds, i, &si);
        bytes += si.bytes;
        data += si.data_bytes;
    }
    char hb[32], hd[32];
    human_bytes((double)bytes, hb, sizeof hb);
    human_bytes((double)data, hd, sizeof hd);
    const char *src = stk_dataset_source(ds);
    if (src) {
        printf("index    %s (an in-place index of %s files, read where they lie; no "
               "checksums)\n", path, src);
    } else {
        printf("dataset  %s\n", stk_dataset_path(ds));
        printf("format   stoker version %d\n", STK_FORMAT_VERSION);
    }
    printf("records  %" PRIu64 "\n", stk_dataset_num_records(ds));
    printf(src ? "files    %zu, %s on disk (%s of record data)\n"
               : "shards   %zu, %s on disk (%s of record data)\n", ns, hb, hd);
    printf("fields   %zu\n", stk_dataset_num_fields(ds));
    printf("  %-20s %-6s %-20s %s\n", "name", "dtype", "shape", "codec");
    for (size_t i = 0; i < stk_dataset_num_fields(ds); i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        char sh[128];
        field_shape(f, sh, sizeof sh);
        printf("  %-20s %-6s %-20s %s\n", f->name, stk_dtype_name(f->dtype), sh,
               f->codec == STK_CODEC_ZSTD ? "zstd" : "none");
    }
    printf("attrs    %s\n", stk_dataset_attrs(ds));
    if (ns) {
        printf("  %-36s %12s %10s %12s\n", src ? "file" : "shard", "first", "records", "bytes");
        size_t show = all ? ns : (ns < 10 ? ns : 10);
        for (size_t i = 0; i < show; i++) {
            stk_shard_info si;
            stk_dataset_shard(ds, i, &si);
            const char *base = strrchr(si.file, '/');
            printf("  %-36s %12" PRIu64 " %10" PRIu64 " %12" PRIu64 "\n", base ? base + 1 : si.file,
                   si.first_record, si.records, si.bytes);
        }
        if (show < ns) printf("  ... %zu more (--all lists them)\n", ns - show);
    }
    stk_dataset_close(ds);
    return 0;
}

/* ---- verify ---- */

static const char verify_help[] =
    "Usage: stoker verify DATASET [--threads N] [-q]\n"
    "\n"
    "Reads every shard in full and checks every checksum: shard headers, record\n"
    "indexes, blocks of record data and every record.  Exits 0 when the dataset\n"
    "is intact; 1 when damage was found, in a record, a shard or the manifest\n"
    "(a manifest that does not parse is damage too; each is named); and 2 when\n"
    "there is nothing to check: no dataset at the path, a pack not finished or\n"
    "not merged, a shard missing, a file that cannot be read.\n"
    "\n"
    "  --threads N  shards checked at once (default: one per CPU)\n"
    "  -q, --quiet  print problems only\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker verify basins.stk\n";

static void on_problem(void *ctx, const stk_error *e) {
    (void)ctx;
    fprintf(stderr, "%s: damaged: %s\n", prog, e->message);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_show(ctx, done, total, "b");
}

static int cmd_verify(int argc, char **argv) {
    const char *path = NULL, *root = NULL;
    bool quiet = false;
    stk_verify_options vo;
    stk_verify_options_init(&vo);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(verify_help, stdout);
            return 0;
        }
        if ((!strcmp(argv[i], "--threads") || !strcmp(argv[i], "--root")) && i + 1 == argc)
            die_usage("verify", "%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--root")) {
            root = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--threads")) {
            uint64_t v;
            if (!parse_u64(argv[++i], &v) || v > 256) die_usage("verify", "bad --threads");
            vo.threads = (int)v;
        } else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) quiet = true;
        else if (argv[i][0] == '-') die_usage("verify", "unknown option '%s'", argv[i]);
        else path = argv[i];
    }
    if (!path) die_usage("verify", "DATASET is required");
    stk_error err = {0};
    stk_dataset *ds = NULL;
    double t0 = now_s();
    int rc = open_path(path, root, &ds, &err);
    if (rc) {
        fprintf(stderr, "%s: error: %s\n", prog, err.message);
        /* Damage found while opening is still damage; an unfinished or
         * unmerged pack is not damage, it just cannot be opened yet. */
        return rc == -ENOENT || rc == -EACCES || rc == -ENOMEM || rc == STK_EINCOMPLETE
                   ? EXIT_ERROR
                   : EXIT_DAMAGED;
    }
    bool in_place = stk_dataset_source(ds) != NULL;
    progress pb;
    progress_init(&pb, "verify", quiet);
    vo.on_problem = on_problem;
    vo.on_progress = on_progress;
    vo.ctx = &pb;
    stk_verify_report rep;
    rc = stk_dataset_verify(ds, &vo, &rep, &err);
    progress_end(&pb);
    double el = now_s() - t0;
    stk_dataset_close(ds);
    if (rc && rep.problems == 0) return fail(&err);
    if (rc) {
        fprintf(stderr, "%s: %s is damaged: %" PRIu64 " problem%s; the first: %s\n", prog, path,
                rep.problems, rep.problems == 1 ? "" : "s", err.message);
        return EXIT_DAMAGED;
    }
    if (!quiet) {
        char hb[32], hr[32];
        human_bytes((double)rep.bytes_checked, hb, sizeof hb);
        human_bytes(el > 0 ? (double)rep.bytes_checked / el : 0, hr, sizeof hr);
        if (in_place)
            printf("%s: every indexed file is unchanged and readable: %" PRIu64 " records, %s "
                   "read in %.2f s (%s/s); an in-place index has no checksums (`stoker pack` "
                   "the data to have them)\n",
                   path, rep.records_checked, hb, el, hr);
        else
            printf("%s is intact: %" PRIu64 " records, %s checked in %.2f s (%s/s)\n", path,
                   rep.records_checked, hb, el, hr);
    }
    return 0;
}

/* ---- cat ---- */

static const char cat_help[] =
    "Usage: stoker cat DATASET RECORD [--field NAME] [--limit N]\n"
    "\n"
    "Prints the fields of record RECORD (0-based), after checking its checksum.\n"
    "\n"
    "  --field NAME  print only this field\n"
    "  --limit N     print at most N values per field (default 64; 0: all)\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker cat basins.stk 17 --field x --limit 32\n";

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double value_at(const uint8_t *p, stk_dtype t) {
    union {
        uint8_t b[8];
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        float f;
        double d;
    } u;
    memcpy(u.b, p, stk_dtype_size(t));
    switch (t) {
    case STK_U8: case STK_BYTES: return p[0];
    case STK_I8: return (int8_t)p[0];
    case STK_U16: return u.u16;
    case STK_I16: return u.i16;
    case STK_U32: return u.u32;
    case STK_I32: return u.i32;
    case STK_U64: return (double)u.u64;
    case STK_I64: return (double)u.i64;
    case STK_F16: return half_to_double(u.u16);
    case STK_BF16: {
        uint32_t b = (uint32_t)u.u16 << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case STK_F32: return u.f;
    case STK_F64: return u.d;
    }
    return 0;
}

static void print_value(const uint8_t *p, stk_dtype t) {
    if (t == STK_U64) {
        uint64_t v;
        memcpy(&v, p, 8);
        printf("%" PRIu64, v);
    } else if (t == STK_I64) {
        int64_t v;
        memcpy(&v, p, 8);
        printf("%" PRId64, v);
    } else {
        printf("%.9g", value_at(p, t));
    }
}

static int cmd_cat(int argc, char **argv) {
    const char *path = NULL, *rec_s = NULL, *only = NULL, *root = NULL;
    uint64_t limit = 64;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(cat_help, stdout);
            return 0;
        }
        if ((!strcmp(argv[i], "--field") || !strcmp(argv[i], "--limit") ||
             !strcmp(argv[i], "--root")) && i + 1 == argc)
            die_usage("cat", "%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--field")) only = argv[++i];
        else if (!strcmp(argv[i], "--root")) root = argv[++i];
        else if (!strcmp(argv[i], "--limit")) {
            if (!parse_u64(argv[++i], &limit)) die_usage("cat", "bad --limit '%s'", argv[i]);
        } else if (argv[i][0] == '-') die_usage("cat", "unknown option '%s'", argv[i]);
        else if (!path) path = argv[i];
        else if (!rec_s) rec_s = argv[i];
        else die_usage("cat", "unexpected argument '%s'", argv[i]);
    }
    uint64_t rec;
    if (!path || !rec_s) die_usage("cat", "DATASET and RECORD are required");
    if (!parse_u64(rec_s, &rec)) die_usage("cat", "RECORD must be a number, not '%s'", rec_s);
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(path, root, &ds, &err)) return fail(&err);
    if (rec >= stk_dataset_num_records(ds)) {
        fprintf(stderr, "%s: error: record %" PRIu64 " is out of range: %s has %" PRIu64
                " records\n", prog, rec, path, stk_dataset_num_records(ds));
        stk_dataset_close(ds);
        return EXIT_ERROR;
    }
    int only_i = -1;
    if (only && (only_i = stk_dataset_find_field(ds, only)) < 0) {
        fprintf(stderr, "%s: error: %s has no field '%s'\n", prog, path, only);
        stk_dataset_close(ds);
        return EXIT_ERROR;
    }
    int rc = 0;
    printf("record %" PRIu64 "\n", rec);
    for (size_t i = 0; i < stk_dataset_num_fields(ds) && rc == 0; i++) {
        if (only_i >= 0 && (size_t)only_i != i) continue;
        const stk_field *f = stk_dataset_field(ds, i);
        stk_extent x;
        if (stk_dataset_get(ds, rec, i, &x, &err)) {
            rc = fail(&err);
            break;
        }
        uint8_t *buf = malloc(x.raw_bytes ? (size_t)x.raw_bytes : 1);
        size_t len;
        if (!buf) {
            perror("malloc");
            exit(EXIT_ERROR);
        }
        if (stk_dataset_read(ds, rec, i, buf, (size_t)x.raw_bytes, &len, STK_READ_VERIFY, &err)) {
            rc = fail(&err);
            free(buf);
            break;
        }
        char sh[128];
        int64_t real[STK_MAX_DIMS];
        memcpy(real, f->shape, sizeof real);
        if (f->ndim) real[0] = (int64_t)x.rows;
        shape_str(real, f->ndim, sh, sizeof sh);
        printf("%s: %s %s\n", f->name, stk_dtype_name(f->dtype), sh);
        size_t isz = stk_dtype_size(f->dtype);
        uint64_t n = len / isz, show = limit && limit < n ? limit : n;
        if (f->dtype == STK_BYTES) {
            printf("  b\"");
            for (uint64_t k = 0; k < show; k++) {
                uint8_t c = buf[k];
                if (c >= 32 && c < 127 && c != '"' && c != '\\') putchar(c);
                else printf("\\x%02x", c);
            }
            printf("\"%s\n", show < n ? "..." : "");
        } else {
            uint64_t per_row = 1;
            for (int d = 1; d < f->ndim; d++) per_row *= (uint64_t)f->shape[d];
            if (f->ndim < 2) per_row = n ? n : 1; /* a vector prints on one line */
            for (uint64_t k = 0; k < show; k++) {
                if (k % per_row == 0) printf(k ? "\n  " : "  ");
                else printf(" ");
                print_value(buf + k * isz, f->dtype);
            }
            printf("%s\n", show < n ? " ..." : "");
            if (show < n)
                printf("  (%" PRIu64 " of %" PRIu64 " values shown; --limit 0 shows all)\n", show, n);
        }
        free(buf);
    }
    stk_dataset_close(ds);
    return rc;
}


/* ---- read ---- */

static const char read_help[] =
    "Usage: stoker read DATASET [options]\n"
    "\n"
    "Iterates epochs of batches the way a training loop would (taking each\n"
    "batch and giving it back at once) and reports samples/s, GB/s of batch\n"
    "data delivered, and the stall: the share of time spent waiting in next().\n"
    "\n"
    "  --batch B            samples per batch (default 32)\n"
    "  --window L           windows of L rows over the time fields (default: whole records)\n"
    "  --stride S           rows between window starts (default 1)\n"
    "  --valid-field F      field tested to keep a window (with --valid)\n"
    "  --valid mask|notnan  keep windows whose last row of F is nonzero / not NaN\n"
    "  --shuffle MODE       sequential, random or block (default block)\n"
    "  --block-group K      blocks opened together in block mode (default 16)\n"
    "  --block-bytes SIZE   bytes per block in block mode (default 4M)\n"
    "  --seed N, --epoch N  the order's seed and first epoch (default 0)\n"
    "  --epochs N           epochs to run (default 1)\n"
    "  --fields a,b,...     fields to load (default: all)\n"
    "  --rank R --world-size W   read one rank's share\n"
    "  --backend auto|uring|pool|mmap   I/O backend (default auto)\n"
    "  --direct             O_DIRECT reads\n"
    "  --warm-up auto|on|off  bring a dataset that is not in the page cache into it\n"
    "                       with large sequential reads while the first epoch runs\n"
    "                       (default auto: when it fits in memory)\n"
    "  --no-verify          skip the read-time checksum checks (on by default)\n"
    "  --threads N          worker threads (default: one per CPU)\n"
    "  --budget SIZE        memory budget (default 1G)\n"
    "  --prefetch N         batch buffers in the ring (default: from the budget)\n"
    "  --stats              print per-stage statistics\n"
    "  --max-batches N      stop each epoch after N batches\n"
    "  --json               print the figures as one JSON object\n"
    "  --trace FILE         write a Chrome trace of the run (opens in ui.perfetto.dev)\n"
    "  --root DIR           an in-place index's files may lie under DIR (default:\n"
    "                       the index's own directory; only for an index you trust)\n"
    "\n"
    "Example:\n"
    "  stoker read basins.stk --window 365 --batch 256 --shuffle random\n";

static int split_list(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}


/* ---- doctor ---- */

static const char doctor_help[] =
    "Usage: stoker doctor DATASET [read options] [--step-ms M] [--max-batches N]\n"
    "                     [--trace FILE]\n"
    "\n"
    "Runs the loader (200 batches by default, after a first one left out as\n"
    "start-up) and says where the time goes: each stage's busy time as a share\n"
    "of the workers' time, the consumer's stall, and the bytes delivered against\n"
    "the limit measured on the spot (memcpy when the data is in memory, else the\n"
    "device's O_DIRECT sequential reads under the dataset). With --step-ms, each\n"
    "batch is followed by M ms of busy CPU work standing in for a training step,\n"
    "and the verdict says whether that run is input-bound (stall above 10%),\n"
    "compute-bound (below 2%) or balanced, with the next thing to try.\n"
    "--trace FILE writes a Chrome trace of the run (open it in ui.perfetto.dev):\n"
    "each worker thread's batches with plan, verify, read and assemble nested\n"
    "inside, and the consumer's waits. Takes every option of `stoker read`.\n"
    "\n"
    "Example:\n"
    "  stoker doctor basins.stk --window 365 --batch 256 --shuffle random --step-ms 50\n";

/* When another order would read the dataset several times faster (a
 * random order over data read from the device sample by sample), says so,
 * with the measured rates. */
static void order_hint(stk_dataset *ds, stk_loader *ld) {
    stk_order_advice adv;
    stk_error e = {0};
    if (stk_advise_order(ds, ld, &adv, &e) == 0 && adv.text[0]) printf("hint: %s\n", adv.text);
}

/* The process's resident memory from /proc/self/status, in kB: all of it,
 * and the part that is file pages mapped (the dataset's page cache). */
static void rss_kb(uint64_t *total, uint64_t *file) {
    *total = *file = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu", &v) == 1) *total = v;
        else if (sscanf(line, "RssFile: %llu", &v) == 1) *file = v;
    }
    fclose(f);
}

static void doctor_report(const stk_loader_stats *st, double el, uint64_t bytes, double step_ms,
                          stk_loader *ld, stk_dataset *ds) {
    stk_backend be = stk_loader_backend(ld);
    double limit = stk_measure_memcpy();
    const char *limit_name = "memcpy, one thread";
    double resident = stk_dataset_resident(ds);
    if (resident >= 0)
        printf("\n%.0f%% of the dataset's bytes are in the page cache\n", 100 * resident);
    if (resident < 0.9) {
        /* Data not in memory is read from the device, which may be the limit. */
        double rd = 0;
        stk_error e = {0};
        if (stk_measure_read(ds, 1.0, &rd, &e) == 0 && rd > 0 && rd < limit) {
            limit = rd;
            limit_name = "device, O_DIRECT sequential reads";
        }
    }
    stk_diagnosis d;
    stk_diagnose(st, be, bytes, el, limit, step_ms > 0, &d);
    printf("\nwhere the loader's time goes (%u worker threads, %s backend, %.2f s):\n",
           st->threads, stk_backend_name(be), el);
    printf("  plan      %6.1f%%  (order, records, rows)\n", 100 * d.share_plan);
    printf("  io        %6.1f%%  (%s)\n", 100 * d.share_io,
           be == STK_BACKEND_MMAP ? "copies out of the mapping" : "reads");
    printf("  assemble  %6.1f%%  (copies from group buffers, decompression, conversions)\n",
           100 * d.share_assemble);
    printf("  verify    %6.1f%%  (checksums)\n", 100 * d.share_verify);
    printf("  idle      %6.1f%%  (waiting for the consumer or for free buffers)\n",
           100 * d.share_idle);
    printf("delivered %.2f GB/s of batch data; limit (%s): %.2f GB/s; %.2f of it\n",
           d.bytes_per_s / 1e9, limit_name, limit / 1e9, d.of_limit);
    printf("consumer stall: %.1f%% of the time in next()\n", 100 * d.stall);
    if (step_ms > 0)
        printf("verdict: %s (with a %.1f ms step, the consumer waited %.1f%% of the time)\n",
               d.verdict_name, step_ms, 100 * d.stall);
    else
        printf("verdict: %s, %.0f batches/s; pass --step-ms with your training step's time to "
               "see whether a run would wait for data\n",
               d.verdict_name, d.batches_per_s);
    printf("next: %s\n", d.next);
    uint64_t rss, file;
    rss_kb(&rss, &file);
    if (rss)
        printf("memory: the process's RSS is %.2f GB, of which %.2f GB are pages of the "
               "dataset's files\n  mapped from the page cache (shared with every process "
               "reading them, and given back\n  by the kernel when memory runs short); the "
               "rest, %.2f GB, is the process's own\n",
               (double)rss / 1e6, (double)file / 1e6, (double)(rss - (file < rss ? file : rss)) / 1e6);
    if (st->warm_up_bytes)
        printf("warm-up: %.2f of %.2f GB brought into the page cache with large reads%s\n",
               (double)st->warm_up.bytes / 1e9, (double)st->warm_up_bytes / 1e9,
               st->warm_up_done ? "" : " (still running)");
    order_hint(ds, ld);
}

static int cmd_read(int argc, char **argv, bool doctor) {
    const char *path = NULL, *root = NULL;
    double step_ms = 0;
    stk_loader_options o;
    stk_loader_options_init(&o);
    uint64_t epochs = 1, max_batches = UINT64_MAX;
    bool stats = false, json = false;
    const char *trace = NULL;
    const char *fields[64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0;
#define VAL() (i + 1 < argc ? argv[++i] : (die_usage("read", "%s needs a value", a), ""))
#define NUM() (parse_u64(VAL(), &v) ? v : (die_usage("read", "%s wants a number", a), 0))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(doctor ? doctor_help : read_help, stdout);
            return 0;
        } else if (!strcmp(a, "--batch")) o.batch_size = (uint32_t)NUM();
        else if (!strcmp(a, "--window")) o.window = NUM();
        else if (!strcmp(a, "--stride")) o.stride = NUM();
        else if (!strcmp(a, "--valid-field")) o.valid_field = VAL();
        else if (!strcmp(a, "--valid")) {
            const char *m = VAL();
            if (!strcmp(m, "mask")) o.valid = STK_VALID_MASK;
            else if (!strcmp(m, "notnan")) o.valid = STK_VALID_NOT_NAN;
            else die_usage("read", "--valid wants mask or notnan, not '%s'", m);
        } else if (!strcmp(a, "--shuffle")) {
            const char *m = VAL();
            if (!strcmp(m, "sequential")) o.order = STK_ORDER_SEQUENTIAL;
            else if (!strcmp(m, "random")) o.order = STK_ORDER_RANDOM;
            else if (!strcmp(m, "block")) o.order = STK_ORDER_BLOCK;
            else die_usage("read", "--shuffle wants sequential, random or block, not '%s'", m);
        } else if (!strcmp(a, "--block-group")) o.block_group = (uint32_t)NUM();
        else if (!strcmp(a, "--block-bytes")) {
            const char *m = VAL();
            if (!parse_size(m, &o.block_bytes)) die_usage("read", "bad --block-bytes '%s'", m);
        } else if (!strcmp(a, "--seed")) o.seed = NUM();
        else if (!strcmp(a, "--epoch")) o.epoch = NUM();
        else if (!strcmp(a, "--epochs")) epochs = NUM();
        else if (!strcmp(a, "--fields")) {
            char *list = strdup(VAL());
            o.nfields = (size_t)split_list(list, fields, 64);
            o.fields = fields;
        } else if (!strcmp(a, "--rank")) o.rank = (uint32_t)NUM();
        else if (!strcmp(a, "--world-size")) o.world_size = (uint32_t)NUM();
        else if (!strcmp(a, "--backend")) {
            const char *m = VAL();
            if (!strcmp(m, "auto")) o.backend = STK_BACKEND_AUTO;
            else if (!strcmp(m, "uring") || !strcmp(m, "io_uring")) o.backend = STK_BACKEND_URING;
            else if (!strcmp(m, "pool")) o.backend = STK_BACKEND_POOL;
            else if (!strcmp(m, "mmap")) o.backend = STK_BACKEND_MMAP;
            else die_usage("read", "--backend wants auto, uring, pool or mmap, not '%s'", m);
        } else if (!strcmp(a, "--direct")) o.direct = 1;
        else if (!strcmp(a, "--root")) root = VAL();
        else if (!strcmp(a, "--warm-up")) {
            const char *m = VAL();
            if (!strcmp(m, "auto")) o.warm_up = STK_WARM_UP_AUTO;
            else if (!strcmp(m, "on")) o.warm_up = STK_WARM_UP_ON;
            else if (!strcmp(m, "off")) o.warm_up = STK_WARM_UP_OFF;
            else die_usage("read", "--warm-up wants auto, on or off, not '%s'", m);
        }
        else if (!strcmp(a, "--no-verify")) o.verify = 0;
        else if (!strcmp(a, "--threads")) o.threads = (int)NUM();
        else if (!strcmp(a, "--prefetch")) o.prefetch = (uint32_t)NUM();
        else if (!strcmp(a, "--budget")) {
            const char *m = VAL();
            if (!parse_size(m, &o.memory_budget)) die_usage("read", "bad --budget '%s'", m);
        } else if (!strcmp(a, "--stats")) stats = true;
        else if (doctor && !strcmp(a, "--step-ms")) {
            const char *m = VAL();
            char *end;
            step_ms = strtod(m, &end);
            if (*end || step_ms < 0) die_usage("doctor", "--step-ms wants milliseconds, not '%s'", m);
        }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--trace")) trace = VAL();
        else if (!strcmp(a, "--max-batches")) max_batches = NUM();
        else if (a[0] == '-') die_usage("read", "unknown option '%s'", a);
        else path = a;
#undef VAL
#undef NUM
    }
    if (!path) die_usage(doctor ? "doctor" : "read", "DATASET is required");
    if (doctor && max_batches == UINT64_MAX) max_batches = 200;
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(path, root, &ds, &err)) return fail(&err);
    stk_loader *ld = NULL;
    if (stk_loader_open(ds, &o, &ld, &err)) {
        stk_dataset_close(ds);
        return fail(&err);
    }
    if (trace && stk_loader_trace_start(ld, 0, &err)) {
        stk_loader_close(ld);
        stk_dataset_close(ds);
        return fail(&err);
    }
    double t0 = now_s();
    uint64_t samples = 0, bytes = 0, batches = 0;
    bool warmed = false;
    int rc = 0;
    for (uint64_t e = 0; e < epochs && rc == 0; e++) {
        if (e && stk_loader_set_epoch(ld, o.epoch + e, &err)) {
            rc = fail(&err);
            break;
        }
        for (uint64_t k = 0; k < max_batches; k++) {
            stk_batch *b;
            int r = stk_loader_next(ld, &b, &err);
            if (r == STK_END) break;
            if (r) {
                rc = fail(&err);
                break;
            }
            if (doctor && !warmed) {
                /* Start-up (opening, the first reads) is not the steady
                 * state the doctor reports on. */
                stk_loader_release(ld, b);
                stk_loader_stats_reset(ld);
                t0 = now_s();
                warmed = true;
                continue;
            }
            samples += stk_batch_size(b);
            batches++;
            for (size_t f = 0; f < stk_loader_num_fields(ld); f++) {
                stk_batch_field bf;
                stk_batch_field_get(b, f, &bf);
                bytes += bf.bytes;
            }
            stk_loader_release(ld, b);
            if (step_ms > 0) { /* stands in for a training step: the CPU is busy */
                uint64_t ts = stk_now_ns();
                double until = now_s() + step_ms / 1e3;
                while (now_s() < until) {
                }
                stk_loader_trace_span(ld, "step", ts, stk_now_ns());
            }
        }
    }
    double el = now_s() - t0;
    stk_loader_stats st;
    stk_loader_stats_get(ld, &st);
    if (rc == 0 && json) {
        printf("{\"samples\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"bytes\": %" PRIu64
               ", \"seconds\": %.6f, \"wait_seconds\": %.6f, \"io_bytes\": %" PRIu64
               ", \"io_reads\": %" PRIu64 ", \"backend\": \"%s\", \"threads\": %u"
               ", \"warm_up_bytes\": %" PRIu64 ", \"warm_up_read\": %" PRIu64 "}\n",
               samples, batches, bytes, el, (double)st.wait.busy_ns / 1e9, st.io.bytes, st.io.count,
               stk_backend_name(stk_loader_backend(ld)), st.threads, st.warm_up_bytes,
               st.warm_up.bytes);
    } else if (rc == 0) {
        printf("read %" PRIu64 " samples in %" PRIu64 " batches over %" PRIu64 " epoch%s in %.3f s\n",
               samples, batches, epochs, epochs == 1 ? "" : "s", el);
        printf("  %.0f samples/s, %.3f GB/s of batch data, stall %.1f%% (%s backend, %u threads, "
               "%u buffers)\n",
               el > 0 ? (double)samples / el : 0, el > 0 ? (double)bytes / el / 1e9 : 0,
               el > 0 ? 100.0 * (double)st.wait.busy_ns / 1e9 / el : 0,
               stk_backend_name(stk_loader_backend(ld)), st.threads, st.ring_slots);
        if (stats) {
            printf("  plan      %12" PRIu64 " samples  %9.3f s busy\n", st.plan.count,
                   (double)st.plan.busy_ns / 1e9);
            printf("  io        %12" PRIu64 " reads    %9.3f s busy  %.3f GB (max %" PRIu64
                   " in flight)\n",
                   st.io.count, (double)st.io.busy_ns / 1e9, (double)st.io.bytes / 1e9,
                   st.max_inflight);
            printf("  assemble  %12" PRIu64 " batches  %9.3f s busy  %.3f GB\n", st.assemble.count,
                   (double)st.assemble.busy_ns / 1e9, (double)st.assemble.bytes / 1e9);
            printf("  wait      %12" PRIu64 " calls    %9.3f s blocked, %.2f batches ready on "
                   "average\n",
                   st.wait.count, (double)st.wait.busy_ns / 1e9,
                   st.wait.count ? (double)st.ready_sum / (double)st.wait.count : 0);
            printf("  verify    %12" PRIu64 " blocks   %9.3f s busy  %.3f GB\n", st.verify.count,
                   (double)st.verify.busy_ns / 1e9, (double)st.verify.bytes / 1e9);
            if (st.groups_loaded) printf("  groups    %12" PRIu64 " loaded\n", st.groups_loaded);
            if (st.warm_up_bytes)
                printf("  warm-up   %12" PRIu64 " pieces   %9.3f s busy  %.3f of %.3f GB%s\n",
                       st.warm_up.count, (double)st.warm_up.busy_ns / 1e9,
                       (double)st.warm_up.bytes / 1e9, (double)st.warm_up_bytes / 1e9,
                       st.warm_up_done ? "" : " (still running)");
        }
        if (!doctor) order_hint(ds, ld);
    }
    if (rc == 0 && trace && stk_loader_trace_write(ld, trace, &err)) rc = fail(&err);
    if (rc == 0 && doctor) doctor_report(&st, el, bytes, step_ms, ld, ds);
    stk_loader_close(ld);
    stk_dataset_close(ds);
    return rc;
}

/* ---- main ---- */

static const char main_help[] =
    "Usage: stoker COMMAND [options]\n"
    "\n"
    "stoker packs training data into indexed shards and reads it back fast.\n"
    "\n"
    "Commands:\n"
    "  pack      pack .npy files into a dataset\n"
    "  merge     join the parts of a split pack\n"
    "  index     index .npy, WAV, HDF5 or raw files to read them in place\n"
    "  inspect   show a dataset's schema, shards and counts\n"
    "  verify    check every checksum of a dataset\n"
    "  cat       print one record\n"
    "  read      iterate batches and report the throughput and the stall\n"
    "  doctor    where the loader's time goes, and whether a run is input-bound\n"
    "  version   print the library and format versions\n"
    "\n"
    "Run 'stoker COMMAND --help' for a command's options and an example.\n"
    "\n"
    "Example:\n"
    "  stoker pack --from npy series/ -o series.stk && stoker verify series.stk\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_ERROR : 0;
    }
    const char *cmd = argv[1];
    int n = argc - 2;
    char **rest = argv + 2;
    if (!strcmp(cmd, "pack")) return cmd_pack(n, rest);
    if (!strcmp(cmd, "merge")) return cmd_merge(n, rest);
    if (!strcmp(cmd, "index")) return cmd_index(n, rest);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(n, rest);
    if (!strcmp(cmd, "verify")) return cmd_verify(n, rest);
    if (!strcmp(cmd, "cat")) return cmd_cat(n, rest);
    if (!strcmp(cmd, "read")) return cmd_read(n, rest, false);
    if (!strcmp(cmd, "doctor")) return cmd_read(n, rest, true);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("stoker %s (format version %d)\n", stk_version(), STK_FORMAT_VERSION);
        return 0;
    }
    fprintf(stderr, "%s: unknown command '%s'\n\n%s", prog, cmd, main_help);
    return EXIT_ERROR;
}
