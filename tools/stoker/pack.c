/*
 * stoker pack: packs .npy files into a dataset, whole files as records or
 * rows along axis 0 (--split-axis0), all of it or one part of a split pack
 * (--part), resuming an interrupted pack (--resume).  Whole files are read
 * ahead by a thread of their own while the writer packs; `--from parquet`
 * is handed to the Python package, which reads Parquet through pyarrow;
 * `--from hdf5` is pack_hdf5.c's.
 */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char pack_help[] =
    "Usage: stoker pack --from npy PATH... -o DATASET [options]\n"
    "       stoker pack --from parquet GLOB... -o DATASET [--group-by COL --order-by COL]\n"
    "       stoker pack --from arrow DIR|FILE... -o DATASET  (Arrow IPC: a Hugging Face\n"
    "       save_to_disk directory's .arrow files, or Arrow IPC / Feather files)\n"
    "       stoker pack --from hdf5 FILE... --dataset NAME... -o DATASET  (the rows of HDF5\n"
    "       datasets, read through libhdf5; see stoker pack --from hdf5 --help)\n"
    "       stoker pack --from images DIR -o DATASET [--labels TABLE]  (JPEG, PNG, WebP\n"
    "              files stored as they are, a label per class sub-folder; see --help there)\n"
    "       stoker pack --from audio DIR -o DATASET  (FLAC, MP3, Ogg Vorbis, Opus)\n"
    "       (Parquet, Arrow, images and audio go through the Python package; see\n"
    "       stoker pack --from parquet --help)\n"
    "\n"
    "Packs files into a stoker dataset: indexed shard files and a manifest.\n"
    "A PATH that is a directory contributes every .npy file below it, in the\n"
    "byte order of their full paths (as `LC_ALL=C sort`: a.npy before a/b.npy).\n"
    "\n"
    "  --from FORMAT      input format: npy, parquet, arrow, hdf5, images or audio\n"
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
    "  --format-version N 1: the shard format every stoker reads; 2: records of\n"
    "                     fixed-shape fields found by arithmetic; 0 (default):\n"
    "                     2 where every field is fixed and uncompressed, else 1\n"
    "  -q, --quiet        no progress bar and no summary\n"
    "\n"
    "Examples:\n"
    "  stoker pack --from npy clips/ -o clips.stk\n"
    "  stoker pack --from npy big.npy --split-axis0 --field rows -o rows.stk\n"
    "  for i in 0 1 2 3; do stoker pack --from npy data/ -o ds --part $i/4 & done; wait\n"
    "  stoker merge ds\n";


/* ---- --from parquet ---- */

/* Parquet and Arrow IPC files are read by pyarrow: hand the command to
 * the Python package. */
static int pack_via_python(int argc, char **argv, const char *what) {
    return run_python("pack", argc, argv, what);
}

/* Adds the first and the last 4 KiB of `path` (of `size` bytes) to `st`;
 * -1 with errno where it cannot be read. */
static int pack_hash_ends(XXH3_state_t *st, const char *path, uint64_t size) {
    enum { END = 4096 };
    unsigned char buf[2 * END];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t head = (size_t)(size < END ? size : END);
    size_t tail = size > END ? (size_t)(size - END < END ? size - END : END) : 0;
    ssize_t a = pread(fd, buf, head, 0);
    ssize_t b = tail ? pread(fd, buf + head, tail, (off_t)(size - tail)) : 0;
    int e = errno;
    close(fd);
    if (a != (ssize_t)head || b != (ssize_t)tail) {
        errno = a < 0 || b < 0 ? e : EIO;
        return -1;
    }
    XXH3_64bits_update(st, buf, head + tail);
    return 0;
}

bool pack_common_option(int argc, char **argv, int *i, stk_writer_options *wo,
                        const char **compress, bool *quiet) {
    const char *a = argv[*i];
    if (!strcmp(a, "--compress")) *compress = opt_value("pack", argc, argv, i);
    else if (!strcmp(a, "--shard-size"))
        wo->shard_bytes = opt_size("pack", a, opt_value("pack", argc, argv, i), 0, UINT64_MAX);
    else if (!strcmp(a, "--align"))
        wo->align = (uint32_t)opt_u64("pack", a, opt_value("pack", argc, argv, i), 0, 4096);
    else if (!strcmp(a, "--part")) pack_parse_part(opt_value("pack", argc, argv, i), wo);
    else if (!strcmp(a, "--force")) wo->overwrite = 1;
    else if (!strcmp(a, "--resume")) wo->resume = 1;
    else if (!strcmp(a, "--no-sync")) wo->sync = 0;
    else if (!strcmp(a, "--format-version"))
        wo->format_version =
            (uint32_t)opt_u64("pack", a, opt_value("pack", argc, argv, i), 0, STK_FORMAT_VERSION);
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) *quiet = true;
    else return false;
    return true;
}

int pack_inputs_digest(const strvec *files, const char *kind, const char *opts, char *out,
                       size_t cap, char **list) {
    XXH3_state_t *st = XXH3_createState(), *ends = XXH3_createState();
    size_t lcap = 256, llen = 0;
    *list = malloc(lcap);
    if (!st || !ends || !*list) {
        fprintf(stderr, "%s: error: out of memory\n", prog);
        XXH3_freeState(st);
        XXH3_freeState(ends);
        free(*list);
        *list = NULL;
        return -1;
    }
    (*list)[0] = '\0';
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, opts, strlen(opts));
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
        /* And the bytes of its first and last 4 KiB: a file rewritten in
         * place with its size and time put back (a copy tool, a restore)
         * still differs where its header or its tail changed. */
        XXH3_64bits_reset(ends);
        if (pack_hash_ends(ends, files->v[i], (uint64_t)sb.st_size) != 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, files->v[i], strerror(errno));
            XXH3_freeState(st);
            XXH3_freeState(ends);
            free(*list);
            *list = NULL;
            return -1;
        }
        uint64_t eh = XXH3_64bits_digest(ends);
        XXH3_64bits_update(st, &eh, sizeof eh);
        /* And its line of the list that names a changed input (a name
         * holding a tab or a newline cannot be listed: then no list). */
        size_t need = llen + strlen(files->v[i]) + 80;
        if (*list && need > lcap) {
            char *p = realloc(*list, lcap = need * 2);
            if (!p) free(*list);
            *list = p;
        }
        if (*list && strpbrk(files->v[i], "\t\n")) {
            free(*list);
            *list = NULL;
        }
        if (*list)
            llen += (size_t)snprintf(*list + llen, lcap - llen, "%s\t%llu\t%lld\t%016llx\n",
                                     files->v[i], (unsigned long long)sb.st_size,
                                     (long long)sb.st_mtim.tv_sec * 1000000000LL +
                                         sb.st_mtim.tv_nsec,
                                     (unsigned long long)eh);
    }
    XXH3_freeState(ends);
    if (*list && !llen) {
        free(*list);
        *list = NULL;
    }
    snprintf(out, cap, "%s:%zu:%016llx", kind, files->n,
             (unsigned long long)XXH3_64bits_digest(st));
    XXH3_freeState(st);
    return 0;
}

/* ---- the command line ---- */

/* One pack: its options, then its inputs as they are found and read. */
typedef struct pack_job {
    const char *from, *output, *field, *compress;
    bool split, ragged, quiet;
    stk_writer_options wo;
    strvec inputs;     /* the paths given */
    strvec files;      /* the .npy files they name, in packing order */
    npy_file *nf;      /* one per file */
    uint64_t total_rows, total_bytes;
    stk_field f;       /* the one field, as the headers make it */
    uint64_t lo, hi;   /* the records this run writes: [lo, hi) */
    char digest[48];   /* of the inputs, for wo.inputs */
    char *inputs_list; /* each input, for wo.inputs_list (malloc) */
    uint64_t in_bytes; /* bytes of input packed so far */
    progress pb;
} pack_job;

/* --part I/N: part I (0-based) of N. */
void pack_parse_part(const char *v, stk_writer_options *wo) {
    const char *slash = strchr(v, '/');
    if (!slash) die_usage("pack", "--part wants I/N with 0 <= I < N, not '%s'", v);
    char *index = strndup(v, (size_t)(slash - v));
    if (!index) {
        perror("strndup");
        exit(EXIT_ERROR);
    }
    uint64_t count = opt_u64("pack", "--part", slash + 1, 1, UINT32_MAX);
    wo->part_index = (uint32_t)opt_u64("pack", "--part", index, 0, count - 1);
    wo->part_count = (uint32_t)count;
    free(index);
}

/* --compress zstd[:LEVEL]. */
void pack_parse_codec(const char *c, stk_field *f) {
    const char *level = c[4] == ':' ? c + 5 : NULL;
    if (strncmp(c, "zstd", 4) != 0 || (c[4] && !level) ||
        (level && (!*level || strspn(level, "0123456789") != strlen(level))))
        die_usage("pack", "--compress wants zstd or zstd:LEVEL, not '%s'", c);
    f->codec = STK_CODEC_ZSTD;
    f->codec_level = level ? (int)opt_u64("pack", "--compress", level, 0, INT_MAX) : 0;
}

/* Fills `j` from the command line; returns false when it asked for --help. */
static bool pack_args(int argc, char **argv, pack_job *j) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() opt_value("pack", argc, argv, &i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(pack_help, stdout);
            return false;
        } else if (!strcmp(a, "--from")) j->from = VALUE();
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) j->output = VALUE();
        else if (!strcmp(a, "--field")) j->field = VALUE();
        else if (!strcmp(a, "--split-axis0")) j->split = true;
        else if (!strcmp(a, "--ragged")) j->ragged = true;
        else if (pack_common_option(argc, argv, &i, &j->wo, &j->compress, &j->quiet)) continue;
        else if (a[0] == '-' && a[1]) die_usage("pack", "unknown option '%s'", a);
        else sv_push(&j->inputs, a);
#undef VALUE
    }
    if (!j->from) die_usage("pack", "--from is required (npy)");
    if (strcmp(j->from, "npy") != 0)
        die_usage("pack", "--from %s is not supported (npy, parquet, arrow, hdf5, images and audio are)",
                  j->from);
    if (!j->output) die_usage("pack", "-o DATASET is required");
    if (!j->inputs.n) die_usage("pack", "no input paths given");
    return true;
}

/* ---- the steps of a pack ---- */

/* The .npy files the input paths name: files as given, directories walked. */
static int find_files(pack_job *j) {
    for (size_t i = 0; i < j->inputs.n; i++) {
        const char *in = j->inputs.v[i];
        struct stat st;
        if (stat(in, &st) != 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, in, strerror(errno));
            return EXIT_ERROR;
        }
        if (S_ISDIR(st.st_mode)) {
            int rc = collect_dir(in, ".npy", &j->files);
            if (rc) {
                fprintf(stderr, "%s: error: %s: %s\n", prog, in, strerror(-rc));
                return EXIT_ERROR;
            }
        } else if (!S_ISREG(st.st_mode)) {
            /* A pipe or a device would block the read of its header. */
            fprintf(stderr, "%s: error: %s: not a regular file (a pipe, socket or device)\n",
                    prog, in);
            return EXIT_ERROR;
        } else {
            sv_push(&j->files, in);
        }
    }
    if (!j->files.n) {
        fprintf(stderr, "%s: error: no .npy files found in the given paths\n", prog);
        return EXIT_ERROR;
    }
    return 0;
}

static bool same_tail(const stk_npy_header *a, const stk_npy_header *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 1; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Says why file i does not fit the first file's dtype and shape. */
static int unlike_first(const pack_job *j, size_t i) {
    const stk_npy_header *h = &j->nf[i].h, *h0 = &j->nf[0].h;
    char s0[128], s1[128];
    shape_str(h0->shape, h0->ndim, s0, sizeof s0);
    shape_str(h->shape, h->ndim, s1, sizeof s1);
    fprintf(stderr,
            "%s: error: %s: dtype %s shape %s does not fit %s's dtype %s shape %s "
            "(all files must share dtype and every dimension but the first)\n",
            prog, j->files.v[i], stk_dtype_name(h->dtype), s1, j->files.v[0],
            stk_dtype_name(h0->dtype), s0);
    return EXIT_ERROR;
}

/* Reads every header and makes the field they share.  Every part reads
 * every header, so that all parts infer one schema. */
static int read_headers(pack_job *j) {
    stk_error err = {0};
    j->nf = calloc(j->files.n, sizeof *j->nf);
    if (!j->nf) {
        perror("calloc");
        exit(EXIT_ERROR);
    }
    bool same_len = true;
    for (size_t i = 0; i < j->files.n; i++) {
        uint64_t fsize;
        if (read_npy_header(j->files.v[i], &j->nf[i].h, &fsize, &err)) return fail(&err);
        const stk_npy_header *h = &j->nf[i].h, *h0 = &j->nf[0].h;
        if (h->dtype != h0->dtype || !same_tail(h, h0)) return unlike_first(j, i);
        if (j->split && h->ndim == 0) {
            fprintf(stderr, "%s: error: %s: --split-axis0 needs arrays of at least one dimension\n",
                    prog, j->files.v[i]);
            return EXIT_ERROR;
        }
        if (h->ndim && h->shape[0] != h0->shape[0]) same_len = false;
        j->nf[i].first_row = j->total_rows;
        j->total_rows += j->split ? (uint64_t)h->shape[0] : 1;
        j->total_bytes += h->data_bytes;
    }
    const stk_npy_header *h0 = &j->nf[0].h;
    stk_field *f = &j->f;
    f->dtype = h0->dtype;
    if (j->split) {
        f->ndim = h0->ndim - 1;
        for (int d = 1; d < h0->ndim; d++) f->shape[d - 1] = h0->shape[d];
    } else {
        f->ndim = h0->ndim;
        for (int d = 0; d < h0->ndim; d++) f->shape[d] = h0->shape[d];
        if (h0->ndim && (j->ragged || !same_len || h0->shape[0] == 0)) f->shape[0] = STK_RAGGED;
    }
    return 0;
}

/* Creates (or resumes) the dataset, and sets the records this run writes. */
static int create_writer(pack_job *j, stk_writer **w) {
    stk_error err = {0};
    const stk_writer_options *wo = &j->wo;
    j->lo = j->total_rows * wo->part_index / wo->part_count;
    j->hi = j->total_rows * (wo->part_index + 1) / wo->part_count;
    char opt[64];
    snprintf(opt, sizeof opt, "npy split=%d parts=%u\n", j->split, wo->part_count);
    if (pack_inputs_digest(&j->files, "npy", opt, j->digest, sizeof j->digest, &j->inputs_list))
        return EXIT_ERROR;
    j->wo.inputs = j->digest;
    j->wo.inputs_list = j->inputs_list;
    if (stk_writer_create(j->output, &j->f, 1, &j->wo, w, &err)) {
        if (err.code == -EINVAL)
            fprintf(stderr, "%s: error: the arrays (e.g. %s) do not make a valid field: %s\n",
                    prog, j->files.v[0], err.message);
        else
            fail(&err);
        return EXIT_ERROR;
    }
    uint64_t done = stk_writer_num_records(*w);
    if (done) {
        if (!j->quiet)
            fprintf(stderr, "%s: resuming after %" PRIu64 " records already packed\n", prog, done);
        j->lo += done;
    }
    return 0;
}

/* The bytes of input this run packs, for the progress bar. */
static uint64_t part_bytes(const pack_job *j) {
    return j->total_bytes * (j->hi - j->lo) / (j->total_rows ? j->total_rows : 1);
}

/* Whole files, one record each, read ahead by the prefetcher. */
static int pack_whole(pack_job *j, stk_writer *w) {
    size_t *queue = malloc(j->files.n * sizeof *queue), n = 0;
    if (!queue) {
        perror("malloc");
        exit(EXIT_ERROR);
    }
    for (size_t i = 0; i < j->files.n; i++)
        if (j->nf[i].first_row >= j->lo && j->nf[i].first_row < j->hi) queue[n++] = i;
    prefetcher pf;
    int rc = 0;
    if (prefetch_start(&pf, j->nf, j->files.v, queue, n)) {
        fprintf(stderr, "%s: error: cannot start the reading thread\n", prog);
        rc = EXIT_ERROR;
    }
    for (size_t k = 0; k < n && rc == 0; k++) {
        const char *path = j->files.v[queue[k]];
        const stk_npy_header *h = &j->nf[queue[k]].h;
        const rd_slot *sl = prefetch_next(&pf);
        stk_error err = {0};
        if (sl->err > 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, path, strerror(sl->err));
            rc = EXIT_ERROR;
        } else if (sl->err) {
            fprintf(stderr, "%s: error: %s: could not read %" PRIu64 " bytes of data "
                    "(the file changed or is truncated)\n", prog, path, h->data_bytes);
            rc = EXIT_ERROR;
        } else {
            stk_value v = {sl->buf, h->ndim ? (uint64_t)h->shape[0] : 1};
            if (stk_writer_append(w, &v, &err)) rc = fail(&err);
        }
        j->in_bytes += h->data_bytes;
        prefetch_release(&pf);
        progress_show(&j->pb, j->in_bytes, part_bytes(j), "b");
    }
    prefetch_stop(&pf);
    free(queue);
    return rc;
}

/* The rows of file i that this run writes, each a record, from a mapping. */
static int pack_rows(pack_job *j, size_t i, stk_writer *w) {
    const char *path = j->files.v[i];
    const stk_npy_header *h = &j->nf[i].h;
    uint64_t nrows = (uint64_t)h->shape[0], a = j->nf[i].first_row, b = a + nrows;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: error: %s: %s\n", prog, path, strerror(errno));
        return EXIT_ERROR;
    }
    int rc = 0;
    size_t len = (size_t)(h->data_offset + h->data_bytes);
    uint8_t *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    if (len && map == MAP_FAILED) {
        fprintf(stderr, "%s: error: %s: mmap: %s\n", prog, path, strerror(errno));
        rc = EXIT_ERROR;
    } else {
        madvise(map, len, MADV_SEQUENTIAL);
        uint64_t row_bytes = nrows ? h->data_bytes / nrows : 0;
        uint64_t r0 = (j->lo > a ? j->lo : a) - a, r1 = (j->hi < b ? j->hi : b) - a;
        for (uint64_t r = r0; r < r1 && rc == 0; r++) {
            stk_value v = {map + h->data_offset + r * row_bytes,
                           j->f.ndim ? (uint64_t)j->f.shape[0] : 1};
            stk_error err = {0};
            if (stk_writer_append(w, &v, &err)) rc = fail(&err);
            j->in_bytes += row_bytes;
            if ((r & 1023) == 0) progress_show(&j->pb, j->in_bytes, j->total_bytes, "b");
        }
        if (len) munmap(map, len);
    }
    close(fd);
    return rc;
}

/* --split-axis0: the rows of every file that holds some of [lo, hi). */
static int pack_split(pack_job *j, stk_writer *w) {
    int rc = 0;
    for (size_t i = 0; i < j->files.n && rc == 0; i++) {
        uint64_t a = j->nf[i].first_row, b = a + (uint64_t)j->nf[i].h.shape[0];
        if (b <= j->lo || a >= j->hi) continue;
        rc = pack_rows(j, i, w);
        if (rc == 0) progress_show(&j->pb, j->in_bytes, part_bytes(j), "b");
    }
    return rc;
}

/* Writes the records, finishes the dataset and says what it packed. */
static int write_records(pack_job *j, stk_writer *w) {
    progress_init(&j->pb, "pack", j->quiet);
    double t0 = now_s();
    int rc = j->split ? pack_split(j, w) : pack_whole(j, w);
    stk_error err = {0};
    if (rc == 0 && stk_writer_finish(w, &err)) rc = fail(&err);
    double el = now_s() - t0;
    progress_end(&j->pb);
    uint64_t nrec = stk_writer_num_records(w), written = stk_writer_bytes_written(w);
    if (rc) {
        fprintf(stderr, "%s: the dataset at %s is left incomplete\n", prog, j->output);
        return rc;
    }
    if (!j->quiet) {
        char hb[32], hr[32];
        human_bytes((double)written, hb, sizeof hb);
        human_bytes(el > 0 ? (double)j->in_bytes / el : 0, hr, sizeof hr);
        printf("packed %" PRIu64 " records (%s) into %s%s in %.2f s: %s/s\n", nrec, hb,
               j->output, j->wo.part_count > 1 ? " (one part)" : "", el, hr);
    }
    return 0;
}

int cmd_pack(int argc, char **argv) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--from") && !strcmp(argv[i + 1], "hdf5"))
            return cmd_pack_hdf5(argc, argv);
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--from") &&
            (!strcmp(argv[i + 1], "parquet") || !strcmp(argv[i + 1], "arrow") ||
             !strcmp(argv[i + 1], "images") || !strcmp(argv[i + 1], "audio")))
            return pack_via_python(argc, argv,
                                   !strcmp(argv[i + 1], "parquet") ? "--from parquet"
                                   : !strcmp(argv[i + 1], "arrow") ? "--from arrow"
                                   : !strcmp(argv[i + 1], "images") ? "--from images"
                                                                     : "--from audio");
    pack_job j;
    memset(&j, 0, sizeof j);
    j.field = "x";
    stk_writer_options_init(&j.wo);
    int rc = 0;
    if (pack_args(argc, argv, &j)) {
        j.f.name = j.field;
        if (j.compress) pack_parse_codec(j.compress, &j.f);
        stk_writer *w = NULL;
        rc = find_files(&j);
        if (rc == 0) rc = read_headers(&j);
        if (rc == 0) rc = create_writer(&j, &w);
        if (rc == 0) rc = write_records(&j, w);
        stk_writer_free(w);
    }
    sv_free(&j.files);
    sv_free(&j.inputs);
    free(j.inputs_list);
    free(j.nf);
    return rc;
}
