/*
 * index_build.c: in-place sources, and writing their index.  `stoker
 * index` maps the records of users' own files (.npy, .wav, HDF5, any file
 * taken whole) to byte ranges once, and stk_dataset_open turns such an
 * index into an ordinary dataset whose "shards" are those files, so the
 * loader reads them with everything it has: orders, windows, ranks,
 * resume, io_uring.
 *
 * The index is a JSON file (docs/FORMAT.md, "In-place index"):
 *
 *   {"format": "stoker-index", "version": 1, "source": "wav",
 *    "records": N, "field": {name, dtype, shape, codec, ..., "stored": conv},
 *    "attrs": {...},
 *    "files": [{"path": p, "size": bytes, "mtime_ns": t,
 *               "runs": [[offset, count, stride, rows], ...]}, ...]}
 *
 * Audio delivered as float32 from files of several encodings (PCM 8 to 32
 * bits, float 32 and 64) is one field: a file whose encoding differs from
 * the field's "stored" names its own ("stored": conv in its entry), and its
 * stored row size follows from it.
 *
 * A run is `count` records of `rows` rows each, the k-th at byte
 * offset + k * stride; a record's stored bytes are rows times the field's
 * stored row size.  A filtered HDF5 chunk is a run of seven:
 * [offset, count, stride, rows, stored, raw, applied]: the chunk's `stored`
 * bytes at `offset` decode (undoing the filters `applied`, STK__CHUNK_*
 * bits) to `raw` bytes, in which the k-th record starts at k * stride; the
 * field's "chunks" names the dataset's filters ("shuffle+deflate"...).
 * With gzip alone ("chunks": "deflate") runs have six entries and
 * `applied` is gzip wherever `stored` is not 0.  A chunk stored plain has
 * stored = raw = 0.  A clip or a file per record is a run of one; an array
 * cut along axis 0 is one run (or one per HDF5 chunk), however many rows.
 */
#define _GNU_SOURCE
#include "sources.h"
#include "../remote/remote.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEAD_BYTES 65536

typedef struct irun {
    uint64_t off, count, stride, rows;
    uint64_t stored, raw; /* a filtered chunk; 0 for plain bytes */
    unsigned applied;     /* a filtered chunk: its filters (STK__CHUNK_*) */
} irun;

typedef struct ifile {
    char *path; /* as the user named it (for messages and reading) */
    uint64_t size;
    int64_t mtime_ns;
    int conv;   /* audio as float32: this file's own conversion */
    bool own_conv;
    irun *runs;
    size_t nruns, cap;
} ifile;

typedef struct builder {
    const stk_index_options *o;
    stk_source src;
    char fname[STK_NAME_MAX];
    stk_field f;       /* the field delivered */
    stk_field stored;  /* its stored form: dtype and shape in the file */
    int conv;
    bool have;
    const char *first; /* the file that set the schema, for messages */
    ifile *files;
    size_t n, cap;
    uint64_t records;
    unsigned rate;
    int filters;       /* HDF5: the chunks' filter pipeline (STK__CHUNK_*) */
    const char *skip;  /* the index file itself, never indexed */
    /* With the source taken from the files' names: files of another kind
     * than the first's, which one index cannot hold (for the refusal). */
    char *other[4];
    size_t nother;
    stk_source other_src;
    stk__h5child *h5;  /* HDF5: the process libhdf5 runs in, for every file */
} builder;

void stk_index_options_init(stk_index_options *o) {
    memset(o, 0, sizeof *o);
    o->source = STK_SOURCE_AUTO;
}

static const char *source_name(stk_source s) {
    switch (s) {
    case STK_SOURCE_NPY: return "npy";
    case STK_SOURCE_WAV: return "wav";
    case STK_SOURCE_HDF5: return "hdf5";
    case STK_SOURCE_RAW: return "raw";
    case STK_SOURCE_IMAGE: return "image";
    case STK_SOURCE_AUDIO: return "audio";
    default: return "auto";
    }
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

static stk_source source_of(const char *path) {
    if (ends_with(path, ".npy")) return STK_SOURCE_NPY;
    if (ends_with(path, ".wav")) return STK_SOURCE_WAV;
    if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return STK_SOURCE_HDF5;
    if (ends_with(path, ".jpg") || ends_with(path, ".jpeg") || ends_with(path, ".png") ||
        ends_with(path, ".webp"))
        return STK_SOURCE_IMAGE;
    if (ends_with(path, ".flac") || ends_with(path, ".mp3") || ends_with(path, ".ogg") ||
        ends_with(path, ".opus"))
        return STK_SOURCE_AUDIO;
    return STK_SOURCE_AUTO;
}

static bool wanted(const builder *b, const char *name) {
    if (b->o->extension) return ends_with(name, b->o->extension);
    if (b->src == STK_SOURCE_RAW) return true;
    stk_source s = source_of(name);
    return s != STK_SOURCE_AUTO && (b->src == STK_SOURCE_AUTO || s == b->src);
}

/* ---- building ---- */

static ifile *new_file(builder *b, const char *path, const struct stat *st, stk_error *err) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        ifile *nf = stk__realloc(b->files, cap * sizeof *nf);
        if (!nf) return stk__err(err, -ENOMEM, "out of memory"), NULL;
        b->files = nf;
        b->cap = cap;
    }
    ifile *f = &b->files[b->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = stk__strdup(path))) return stk__err(err, -ENOMEM, "out of memory"), NULL;
    f->size = (uint64_t)st->st_size;
    f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    b->n++;
    return f;
}

static int add_run(ifile *f, uint64_t off, uint64_t count, uint64_t stride, uint64_t rows,
                   stk_error *err) {
    if (f->nruns == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 1;
        irun *r = stk__realloc(f->runs, cap * sizeof *r);
        if (!r) return stk__err(err, -ENOMEM, "out of memory");
        f->runs = r;
        f->cap = cap;
    }
    f->runs[f->nruns++] = (irun){off, count, stride, rows, 0, 0, 0};
    return 0;
}

/* Sets the schema from the first file, or checks a later file against it.
 * `stored` is the record's form in the file; `ragged_ok` lets the first
 * dimension differ between files (the field becomes ragged). */
static int settle(builder *b, const char *path, const stk_field *stored, stk_dtype out_dtype,
                  int conv, bool ragged_ok, stk_error *err) {
    if (!b->have) {
        b->stored = *stored;
        b->f = *stored;
        b->f.dtype = out_dtype;
        b->f.name = b->fname;
        b->conv = conv;
        b->first = b->files[b->n - 1].path;
        b->have = true;
        return 0;
    }
    bool same = b->stored.dtype == stored->dtype && b->stored.ndim == stored->ndim &&
                b->conv == conv;
    for (int d = 1; same && d < stored->ndim; d++) same = b->stored.shape[d] == stored->shape[d];
    if (same && stored->ndim > 0 && b->stored.shape[0] != stored->shape[0]) {
        if (!ragged_ok) same = false;
        else b->f.shape[0] = b->stored.shape[0] = STK_RAGGED;
    }
    if (!same) {
        char a[160], z[160];
        size_t la = (size_t)snprintf(a, sizeof a, "%s (", stk_dtype_name(b->stored.dtype));
        size_t lz = (size_t)snprintf(z, sizeof z, "%s (", stk_dtype_name(stored->dtype));
        for (int d = 0; d < b->stored.ndim && la < 120; d++)
            la += (size_t)snprintf(a + la, sizeof a - la, "%s%lld", d ? ", " : "",
                                   (long long)b->stored.shape[d]);
        for (int d = 0; d < stored->ndim && lz < 120; d++)
            lz += (size_t)snprintf(z + lz, sizeof z - lz, "%s%lld", d ? ", " : "",
                                   (long long)stored->shape[d]);
        return stk__err(err, STK_ESCHEMA,
                        "%s: holds %s); %s, indexed first, holds %s): every file of an "
                        "index must agree on the dtype and all but the first dimension",
                        path, z, b->first, a);
    }
    return 0;
}

static int read_head(int fd, const char *path, uint8_t *buf, size_t cap, size_t *got,
                     stk_error *err) {
    ssize_t n = stk__pread_full(fd, buf, cap, 0);
    if (n < 0) return stk__err(err, (int)n, "%s: %s", path, stk_strerror((int)n));
    *got = (size_t)n;
    return 0;
}

static int add_npy(builder *b, ifile *f, const uint8_t *head, size_t n, stk_error *err) {
    stk_npy_header h;
    int rc = stk_npy_parse(head, n, f->path, &h, err);
    if (rc) return rc;
    if (h.data_offset > f->size || h.data_bytes > f->size - h.data_offset)
        return stk__err(err, STK_ETRUNCATED,
                        "%s: the header promises %llu bytes of data at byte %llu but the "
                        "file has %llu bytes",
                        f->path, (unsigned long long)h.data_bytes,
                        (unsigned long long)h.data_offset, (unsigned long long)f->size);
    stk_field s = {NULL, h.dtype, 0, {0}, STK_CODEC_NONE, 0, NULL};
    if (b->o->split_axis0) {
        if (h.ndim < 1)
            return stk__err(err, STK_ESCHEMA,
                            "%s: a 0-dimensional array has no axis 0 to split", f->path);
        s.ndim = h.ndim - 1;
        for (int d = 1; d < h.ndim; d++) s.shape[d - 1] = h.shape[d];
        uint64_t count = (uint64_t)h.shape[0];
        uint64_t stride = count ? h.data_bytes / count : 0;
        uint64_t rows = s.ndim ? (uint64_t)s.shape[0] : 1;
        if ((rc = settle(b, f->path, &s, h.dtype, STK__CONV_NONE, false, err))) return rc;
        if (count && (rc = add_run(f, h.data_offset, count, stride, rows, err))) return rc;
        b->records += count;
        return 0;
    }
    s.ndim = h.ndim;
    memcpy(s.shape, h.shape, sizeof s.shape);
    uint64_t rows = h.ndim ? (uint64_t)h.shape[0] : 1;
    if ((rc = settle(b, f->path, &s, h.dtype, STK__CONV_NONE, h.ndim > 0, err))) return rc;
    if ((rc = add_run(f, h.data_offset, 1, 0, rows, err))) return rc;
    b->records++;
    return 0;
}

static int add_wav(builder *b, ifile *f, const uint8_t *head, size_t n, stk_error *err) {
    stk_wav_header h;
    int rc = stk_wav_parse(head, n, f->size, f->path, &h, err);
    if (rc) return rc;
    static const struct {
        stk_dtype stored, plain, f32;
        int conv_plain, conv_f32;
    } enc[] = {
        [STK_WAV_PCM8] = {STK_U8, STK_U8, STK_F32, STK__CONV_NONE, STK__CONV_U8_F32},
        [STK_WAV_PCM16] = {STK_I16, STK_I16, STK_F32, STK__CONV_NONE, STK__CONV_I16_F32},
        [STK_WAV_PCM24] = {STK_BYTES, STK_I32, STK_F32, STK__CONV_I24_I32, STK__CONV_I24_F32},
        [STK_WAV_PCM32] = {STK_I32, STK_I32, STK_F32, STK__CONV_NONE, STK__CONV_I32_F32},
        [STK_WAV_FLOAT32] = {STK_F32, STK_F32, STK_F32, STK__CONV_NONE, STK__CONV_NONE},
        [STK_WAV_FLOAT64] = {STK_F64, STK_F64, STK_F32, STK__CONV_NONE, STK__CONV_F64_F32},
    };
    bool f32 = b->o->wav_float32 != 0;
    int conv = f32 ? enc[h.encoding].conv_f32 : enc[h.encoding].conv_plain;
    stk_dtype out = f32 ? enc[h.encoding].f32 : enc[h.encoding].plain;
    /* The stored form, for comparing files: 24-bit samples as 3 bytes. */
    stk_field s = {NULL, enc[h.encoding].stored, 2, {STK_RAGGED, h.channels}, STK_CODEC_NONE, 0, NULL};
    if (h.encoding == STK_WAV_PCM24) s.shape[1] = 3 * (int64_t)h.channels;
    if (b->have && b->rate != h.sample_rate)
        return stk__err(err, STK_ESCHEMA,
                        "%s: sample rate %u Hz; %s, indexed first, has %u Hz: an index holds "
                        "one sample rate",
                        f->path, h.sample_rate, b->first, b->rate);
    if (!b->have) b->rate = h.sample_rate;
    if (f32 && b->have && b->conv != conv) {
        /* float32 whatever the encoding: a file of another encoding keeps
         * its own conversion; the delivered field (f32, channels) must
         * still agree. */
        if (b->f.shape[1] != (int64_t)h.channels)
            return stk__err(err, STK_ESCHEMA,
                            "%s: %u channels; %s, indexed first, has %lld: an index holds one "
                            "channel count",
                            f->path, h.channels, b->first, (long long)b->f.shape[1]);
        f->conv = conv;
        f->own_conv = true;
    } else if ((rc = settle(b, f->path, &s, out, conv, true, err))) {
        if (!f32 && rc == STK_ESCHEMA && err)
            snprintf(err->message + strlen(err->message),
                     sizeof err->message - strlen(err->message),
                     " (audio of several encodings can be one index with float32=True, "
                     "--float32 on the command line)");
        return rc;
    }
    b->f.shape[1] = h.channels;
    if ((rc = add_run(f, h.data_offset, 1, 0, h.frames, err))) return rc;
    b->records++;
    return 0;
}

static int add_hdf5(builder *b, ifile *f, stk_error *err) {
    stk__h5info h;
    int rc = stk__hdf5_index(&b->h5, f->path, b->o->hdf5_dataset, &h, err);
    if (rc) return rc;
    stk_field s = {NULL, h.dtype, h.ndim - 1, {0}, STK_CODEC_NONE, 0, NULL};
    for (int d = 1; d < h.ndim; d++) s.shape[d - 1] = h.dims[d];
    uint64_t row = stk_dtype_size(h.dtype);
    for (int d = 1; d < h.ndim; d++) row *= (uint64_t)h.dims[d];
    uint64_t rows = s.ndim ? (uint64_t)s.shape[0] : 1;
    rc = settle(b, f->path, &s, h.dtype, STK__CONV_NONE, false, err);
    if (rc == 0 && b->n > 1 && b->filters != h.filters)
        rc = stk__err(err, STK_ESCHEMA,
                      "%s: dataset '%s' has the filters %s but %s's has %s: an index holds "
                      "one kind",
                      f->path, h.dataset, stk__chunks_name(h.filters), b->first,
                      stk__chunks_name(b->filters));
    b->filters = h.filters;
    for (size_t i = 0; rc == 0 && i < h.nruns; i++) {
        const stk__h5run *r = &h.runs[i];
        uint64_t span = r->stored ? r->stored : r->count * row;
        if (r->off > f->size || span > f->size - r->off) {
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: dataset '%s': rows %llu.. lie past the end of the file",
                          f->path, h.dataset, (unsigned long long)r->first);
        } else if ((rc = add_run(f, r->off, r->count, row, rows, err)) == 0 && h.filters) {
            /* A chunk HDF5 kept plain (every filter skipped) is read as is:
             * it is marked with stored = raw = 0. */
            f->runs[f->nruns - 1].stored = r->stored;
            f->runs[f->nruns - 1].raw = r->raw;
            f->runs[f->nruns - 1].applied = r->applied;
        }
    }
    if (rc == 0) b->records += (uint64_t)h.dims[0];
    stk__h5info_free(&h);
    return rc;
}


/* An image or an audio clip: the whole file is the record, whose header
 * is read now (the file's first HEAD_BYTES, or all of it where those do
 * not hold the header), so that a file that is not such media is refused
 * here, named, rather than at its first batch. */
static int add_media(builder *b, ifile *f, stk_source s, stk_error *err) {
    int fd = stk__open(f->path, O_RDONLY, 0);
    if (fd < 0) return stk__err(err, fd, "%s: cannot open: %s", f->path, stk_strerror(fd));
    size_t cap = (size_t)STK__MIN(f->size, (uint64_t)HEAD_BYTES), n = 0;
    uint8_t *buf = stk__malloc(cap ? cap : 1);
    int rc = buf ? read_head(fd, f->path, buf, cap, &n, err) : stk__err(err, -ENOMEM, "out of memory");
    stk_media_info info;
    stk_error perr = {0};
    if (rc == 0 && stk_media_probe(buf, n, &info, &perr) != 0 && f->size > n) {
        /* (A header beyond the first bytes: large metadata first.) */
        uint8_t *all = stk__realloc(buf, (size_t)f->size);
        if (!all) rc = stk__err(err, -ENOMEM, "out of memory");
        else {
            buf = all;
            rc = read_head(fd, f->path, buf, (size_t)f->size, &n, err);
        }
    }
    close(fd);
    stk_media want = s == STK_SOURCE_IMAGE ? STK_MEDIA_IMAGE : STK_MEDIA_AUDIO;
    if (rc == 0 && (rc = stk_media_probe(buf, n, &info, &perr)) != 0)
        rc = stk__err(err, perr.code ? perr.code : rc, "%s: %s", f->path, perr.message);
    else if (rc == 0 && info.media != want)
        rc = stk__err(err, STK_ESCHEMA, "%s: %s %s among %s files", f->path, info.format,
                      info.media == STK_MEDIA_IMAGE ? "image" : "audio",
                      want == STK_MEDIA_IMAGE ? "image" : "audio");
    stk__free(buf);
    if (rc) return rc;
    stk_field fs = {NULL, STK_BYTES, 1, {STK_RAGGED}, STK_CODEC_NONE, 0,
                    want == STK_MEDIA_IMAGE ? "image" : "audio"};
    if ((rc = settle(b, f->path, &fs, STK_BYTES, STK__CONV_NONE, true, err))) return rc;
    if ((rc = add_run(f, 0, 1, 0, f->size, err))) return rc;
    b->records++;
    return 0;
}

static int add_file(builder *b, const char *path, const struct stat *st, stk_error *err) {
    stk_source s = b->src;
    if (s == STK_SOURCE_AUTO) {
        s = source_of(path);
        if (s == STK_SOURCE_AUTO)
            return stk__err(err, -EINVAL,
                            "%s: cannot tell the format from the name; say which source "
                            "(npy, wav, hdf5 or raw)",
                            path);
        b->src = s;
    }
    ifile *f = new_file(b, path, st, err);
    if (!f) return err ? err->code : -ENOMEM;
    if (s == STK_SOURCE_IMAGE || s == STK_SOURCE_AUDIO) return add_media(b, f, s, err);
    if (s == STK_SOURCE_RAW) {
        stk_field fs = {NULL, STK_BYTES, 1, {(int64_t)f->size}, STK_CODEC_NONE, 0, NULL};
        int rc = settle(b, path, &fs, STK_BYTES, STK__CONV_NONE, true, err);
        if (rc == 0 && f->size) rc = add_run(f, 0, 1, 0, f->size, err);
        if (rc == 0 && !f->size) rc = add_run(f, 0, 1, 0, 0, err);
        if (rc == 0) b->records++;
        return rc;
    }
    if (s == STK_SOURCE_HDF5) return add_hdf5(b, f, err);
    int fd = stk__open(path, O_RDONLY, 0);
    if (fd < 0) return stk__err(err, fd, "%s: cannot open: %s", path, stk_strerror(fd));
    uint8_t *head = stk__malloc(HEAD_BYTES);
    size_t n = 0;
    int rc = head ? read_head(fd, path, head, HEAD_BYTES, &n, err)
                  : stk__err(err, -ENOMEM, "out of memory");
    close(fd);
    if (rc == 0) rc = s == STK_SOURCE_NPY ? add_npy(b, f, head, n, err) : add_wav(b, f, head, n, err);
    stk__free(head);
    return rc;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A list of paths, grown by doubling. */
typedef struct pathlist {
    char **v;
    size_t n, cap;
} pathlist;

static int pl_push(pathlist *l, char *p) {
    if (!p) return -ENOMEM;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **nv = stk__realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            stk__free(p);
            return -ENOMEM;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

/* The directories on the way down (device, inode), to stop at a link
 * back to one of them. */
typedef struct dirstack {
    dev_t dev[64];
    ino_t ino[64];
    int n;
} dirstack;

/* The regular files under directory `path`, recursively (hidden entries
 * left out), in no order.  A link back to a directory on the way down (a
 * loop) is refused, naming it; pipes, sockets and devices are skipped: a
 * walk never blocks on a read that cannot end. */
static int list_dir_in(const char *path, pathlist *out, dirstack *up, stk_error *err);

static int list_dir(const char *path, pathlist *out, stk_error *err) {
    dirstack up = {.n = 0};
    return list_dir_in(path, out, &up, err);
}

static int list_dir_in(const char *path, pathlist *out, dirstack *up, stk_error *err) {
    struct stat self;
    if (stat(path, &self) != 0) {
        int rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    for (int i = 0; i < up->n; i++)
        if (up->dev[i] == self.st_dev && up->ino[i] == self.st_ino)
            return stk__err(err, -ELOOP,
                            "%s: leads back to a directory above it (a link loop); remove "
                            "the link or name the files to index",
                            path);
    if (up->n == 64)
        return stk__err(err, -ELOOP, "%s: directories nested more than 64 deep", path);
    up->dev[up->n] = self.st_dev;
    up->ino[up->n] = self.st_ino;
    up->n++;
    DIR *d = opendir(path);
    if (!d) {
        int rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* hidden files, . and .. */
        char *p = stk__path_join(path, e->d_name);
        struct stat st;
        if (!p) {
            rc = stk__err(err, -ENOMEM, "out of memory");
        } else if (stat(p, &st) != 0) {
            stk__free(p); /* vanished, or a dangling link: not a file of ours */
        } else if (S_ISDIR(st.st_mode)) {
            rc = list_dir_in(p, out, up, err);
            stk__free(p);
        } else if (S_ISREG(st.st_mode)) {
            if (pl_push(out, p)) rc = stk__err(err, -ENOMEM, "out of memory");
        } else {
            stk__free(p);
        }
    }
    closedir(d);
    up->n--;
    return rc;
}

/* A file named by the user is indexed whatever its name; a directory's
 * files are taken in the byte order of their full paths (what Python's
 * sorted() or `LC_ALL=C sort` gives: "site0.npy" before "site0/a.npy"),
 * whatever the depth. */
static int walk(builder *b, const char *path, bool named, stk_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    if (S_ISREG(st.st_mode)) {
        if (b->skip && strcmp(path, b->skip) == 0) return 0;
        stk_source k = source_of(path);
        if (b->o->source == STK_SOURCE_AUTO && !b->o->extension && b->src != STK_SOURCE_AUTO &&
            k != STK_SOURCE_AUTO && k != b->src) {
            /* Noted, to refuse the whole mix once every file is seen. */
            if (b->nother < sizeof b->other / sizeof *b->other &&
                !(b->other[b->nother] = stk__strdup(path)))
                return stk__err(err, -ENOMEM, "out of memory");
            if (b->nother == 0) b->other_src = k;
            b->nother++;
            return 0;
        }
        if (!named && !wanted(b, path)) return 0;
        int rc = add_file(b, path, &st, err);
        if (rc == 0 && b->o->on_progress &&
            b->o->on_progress(b->o->progress_ctx, b->n, b->records) != 0)
            rc = stk__err(err, -ECANCELED, "%s: indexing stopped after %zu files", path, b->n);
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) return named ? stk__err(err, -EINVAL, "%s: not a file or directory", path) : 0;
    pathlist files = {0};
    int rc = list_dir(path, &files, err);
    if (rc == 0 && files.n) qsort(files.v, files.n, sizeof *files.v, cmp_name);
    for (size_t i = 0; i < files.n && rc == 0; i++) rc = walk(b, files.v[i], false, err);
    for (size_t i = 0; i < files.n; i++) stk__free(files.v[i]);
    stk__free(files.v);
    return rc;
}

/* The path to store for `path`: relative to the index's directory when the
 * file lies under it, absolute otherwise. */
static char *stored_path(const char *index_dir_real, const char *path) {
    char *real = realpath(path, NULL);
    if (!real) return NULL;
    size_t l = strlen(index_dir_real);
    char *out;
    if (strncmp(real, index_dir_real, l) == 0 && real[l] == '/') out = stk__strdup(real + l + 1);
    else if (strcmp(index_dir_real, "/") == 0) out = stk__strdup(real + 1);
    else out = stk__strdup(real);
    free(real);
    return out;
}

/* Narrows *dir to the directory holding both it and absolute path p (the
 * first call takes p's directory). */
static void common_dir(char **dir, const char *p) {
    if (!*dir) {
        const char *slash = strrchr(p, '/');
        *dir = slash == p ? stk__strdup("/") : strndup(p, (size_t)(slash - p));
        return;
    }
    char *d = *dir;
    size_t n = 0;
    while (d[n] && d[n] == p[n]) n++;
    if (d[n] == 0 && (p[n] == '/' || p[n] == 0)) return; /* p lies under d */
    while (n > 0 && d[n] != '/') n--; /* back to the last whole component */
    d[n ? n : 1] = 0;
}

/* Refuses files of two kinds found where the source was left to their
 * names: an index holds one kind (one field, read one way), and taking
 * the first kind alone would leave the others out with no word said. */
static int refuse_mix(const builder *b, const char *const *paths, size_t npaths,
                      stk_error *err) {
    char list[STK_ERROR_MAX / 2];
    size_t n = 0, shown = b->nother < sizeof b->other / sizeof *b->other
                             ? b->nother
                             : sizeof b->other / sizeof *b->other;
    list[0] = '\0';
    for (size_t i = 0; i < shown && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", b->other[i]);
    if (b->nother > shown && n < sizeof list)
        snprintf(list + n, sizeof list - n, " and %zu more", b->nother - shown);
    const char *kept = source_name(b->src), *left = source_name(b->other_src);
    return stk__err(err, -EINVAL,
                    "%s%s: files of two kinds, and one index holds one kind: %zu %s file%s "
                    "(the first %s) and %zu %s file%s (%s); index each kind into an index of "
                    "its own (one PATH per kind, or --ext .%s), or take only the %s files with "
                    "--from %s (source=\"%s\" in Python), leaving the others out",
                    paths[0], npaths > 1 ? " (and the other paths)" : "", b->n, kept,
                    b->n == 1 ? "" : "s", b->first ? b->first : "?", b->nother, left,
                    b->nother == 1 ? "" : "s", list, left, kept, kept, kept);
}

static void builder_free(builder *b) {
    for (size_t i = 0; i < b->nother && i < sizeof b->other / sizeof *b->other; i++)
        stk__free(b->other[i]);
    for (size_t i = 0; i < b->n; i++) {
        stk__free(b->files[i].path);
        stk__free(b->files[i].runs);
    }
    stk__free(b->files);
    stk__h5child_close(b->h5);
}

int stk_index_build(const char *const *paths, size_t npaths, const char *index_path,
                    const stk_index_options *opts, uint64_t *records, stk_error *err) {
    stk_index_options defaults;
    if (!opts) {
        stk_index_options_init(&defaults);
        opts = &defaults;
    }
    if (!paths || !npaths || !index_path)
        return stk__err(err, -EINVAL, "stk_index_build: paths and an index path are needed");
    if (opts->source < STK_SOURCE_AUTO || opts->source > STK_SOURCE_AUDIO)
        return stk__err(err, -EINVAL, "source: unknown value %d", (int)opts->source);
    builder b;
    memset(&b, 0, sizeof b);
    b.o = opts;
    b.src = opts->source;
    b.skip = index_path;
    int rc = 0;
    json_t *root = NULL;
    char *idir = stk__path_dir(index_path), *idir_real = NULL, *text = NULL, *outside = NULL;
    for (size_t i = 0; i < npaths && rc == 0; i++) {
        rc = stk__url_scheme_check(paths[i], err);
        if (rc == 0) rc = walk(&b, paths[i], true, err);
    }
    if (rc == 0 && b.nother) rc = refuse_mix(&b, paths, npaths, err);
    if (rc) goto out;
    if (b.n == 0) {
        rc = stk__err(err, -ENOENT, "%s%s: no %s files found", paths[0],
                      npaths > 1 ? " (and the other paths)" : "",
                      b.src == STK_SOURCE_AUTO ? ".npy, .wav or HDF5" : source_name(b.src));
        goto out;
    }
    const char *def = b.src == STK_SOURCE_WAV || b.src == STK_SOURCE_AUDIO ? "audio"
                      : b.src == STK_SOURCE_IMAGE                     ? "image"
                      : b.src == STK_SOURCE_RAW                       ? "bytes"
                                                                      : "data";
    snprintf(b.fname, sizeof b.fname, "%s", opts->field ? opts->field : def);
    b.f.name = b.fname;
    if ((rc = stk__schema_check(&b.f, 1, NULL, err))) goto out;
    if (!idir || !(idir_real = realpath(idir, NULL))) {
        rc = stk__err(err, idir ? -errno : -ENOMEM, "%s: the index's directory: %s", index_path,
                      stk_strerror(idir ? -errno : -ENOMEM));
        goto out;
    }
    root = json_object();
    json_object_set_new(root, "format", json_string(STK__INDEX_FORMAT));
    bool own_conv = false;
    for (size_t i = 0; i < b.n; i++) own_conv |= b.files[i].own_conv;
    json_object_set_new(root, "version",
                        json_integer(own_conv ? STK__INDEX_VERSION_OWN_CONV : STK__INDEX_VERSION));
    json_object_set_new(root, "source", json_string(source_name(b.src)));
    json_object_set_new(root, "records", json_integer((json_int_t)b.records));
    json_t *field = stk__field_json(&b.f);
    json_object_set_new(field, "stored", json_string(stk__conv_name(b.conv)));
    if (b.filters) json_object_set_new(field, "chunks", json_string(stk__chunks_name(b.filters)));
    json_object_set_new(root, "field", field);
    json_t *attrs = json_object();
    if (b.src == STK_SOURCE_WAV) json_object_set_new(attrs, "sample_rate", json_integer(b.rate));
    json_object_set_new(root, "attrs", attrs);
    json_t *files = json_array();
    json_object_set_new(root, "files", files);
    for (size_t i = 0; i < b.n; i++) {
        const ifile *f = &b.files[i];
        char *p = stored_path(idir_real, f->path);
        if (!p) {
            rc = stk__err(err, -errno ? -errno : -ENOMEM, "%s: %s", f->path, stk_strerror(-errno));
            goto out;
        }
        if (p[0] == '/') common_dir(&outside, p);
        json_t *o = json_object(), *runs = json_array();
        json_object_set_new(o, "path", json_string(p));
        stk__free(p);
        json_object_set_new(o, "size", json_integer((json_int_t)f->size));
        json_object_set_new(o, "mtime_ns", json_integer((json_int_t)f->mtime_ns));
        if (f->own_conv) json_object_set_new(o, "stored", json_string(stk__conv_name(f->conv)));
        for (size_t k = 0; k < f->nruns; k++) {
            const irun *r = &f->runs[k];
            json_t *run = json_pack("[IIII]", (json_int_t)r->off, (json_int_t)r->count,
                                    (json_int_t)r->stride, (json_int_t)r->rows);
            if (b.filters) {
                json_array_append_new(run, json_integer((json_int_t)r->stored));
                json_array_append_new(run, json_integer((json_int_t)r->raw));
            }
            /* Gzip alone keeps the six-entry runs of the first indexes. */
            if (b.filters && b.filters != STK__CHUNK_DEFLATE)
                json_array_append_new(run, json_integer((json_int_t)r->applied));
            json_array_append_new(runs, run);
        }
        json_object_set_new(o, "runs", runs);
        json_array_append_new(files, o);
    }
    /* Files outside the index's directory: where they are, so that a
     * reader's error can say which root to allow (the reader decides). */
    if (outside) json_object_set_new(root, "root", json_string(outside));
    text = json_dumps(root, JSON_COMPACT);
    if (!text) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    const char *slash = strrchr(index_path, '/');
    rc = stk__write_file_atomic(idir, slash ? slash + 1 : index_path, text, strlen(text), err);
    if (rc == 0 && records) *records = b.records;
out:
    free(text);
    json_decref(root);
    free(idir_real);
    stk__free(idir);
    stk__free(outside);
    builder_free(&b);
    return rc;
}

