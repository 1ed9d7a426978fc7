/*
 * hdf5.c: where the rows of an HDF5 dataset lie in its file, found once
 * through libhdf5 when an index is built.  The loader then reads those
 * bytes itself, so the hot path never takes libhdf5's global lock.
 *
 * Layouts: contiguous (one run), and chunked where each chunk spans every
 * dimension after the first (a run per chunk), plain or filtered by any of
 * shuffle, gzip (deflate) and Fletcher-32, in the order h5py and h5repack
 * put them; the worker threads undo the filters.  Other filters (szip,
 * n-bit, scale-offset, plugins), and chunks that cut rows apart, are
 * refused with what to do instead.
 */
#define _GNU_SOURCE
#include "sources.h"

#include "../core/convert.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

bool stk__hdf5_isolate = true;

void stk__h5info_free(stk__h5info *h) {
    if (!h) return;
    stk__free(h->runs);
    stk__free(h->dataset);
    memset(h, 0, sizeof *h);
}


#include "h5.h"


/* Appends `s` to out[*n..cap) as one shell word: as it is when it holds
 * only characters the shell leaves alone, else in single quotes. */
static void shell_word(char *out, size_t cap, size_t *n, const char *s) {
    bool plain = *s != '\0';
    for (const char *c = s; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+:@,=",
                    *c))
            plain = false;
    if (plain) {
        *n += (size_t)snprintf(out + *n, *n < cap ? cap - *n : 0, "%s", s);
        return;
    }
    if (*n < cap) out[(*n)++] = '\'';
    for (const char *c = s; *c && *n + 5 < cap; c++) {
        if (*c == '\'') {
            memcpy(out + *n, "'\\''", 4);
            *n += 4;
        } else {
            out[(*n)++] = *c;
        }
    }
    if (*n < cap) out[(*n)++] = '\'';
    if (*n < cap) out[*n] = '\0';
}

/* What to do with a dataset that cannot be read in place: the command
 * that packs its rows instead, through libhdf5 (any layout, byte order
 * and filter it decodes), ready to run but for the output's name. */
static const char *pack_hint(const char *path, const char *dset, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "stoker pack --from hdf5 ");
    shell_word(out, cap, &n, path);
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, " --dataset ");
    shell_word(out, cap, &n, dset);
    snprintf(out + n, n < cap ? cap - n : 0, " -o OUT.stk");
    return out;
}

/* The same through h5py and its own HDF5, for a file this libhdf5 cannot
 * open or decode: a Python one-liner, ready to run but for the output. */
/* stk__err for a refusal whose message ends with `hint`, a command to run
 * instead: where the whole would be cut at STK_ERROR_MAX (a long path), the
 * explanation is shortened rather than the command, which must stay whole
 * to be run as given. */
static int hint_err(stk_error *err, const char *hint, int code, const char *fmt, ...)
    STK__PRINTF(4, 5);
static int hint_err(stk_error *err, const char *hint, int code, const char *fmt, ...) {
    char full[4 * STK_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    size_t h = strlen(hint);
    if (n < 0 || (size_t)n < STK_ERROR_MAX || (size_t)n >= sizeof full || (size_t)n < h ||
        strcmp(full + n - h, hint) != 0 || h + 64 >= STK_ERROR_MAX)
        return stk__err(err, code, "%s", full);
    int keep = (int)(STK_ERROR_MAX - 1 - h - sizeof " ...: " + 1);
    return stk__err(err, code, "%.*s ...: %s", keep, full, hint);
}

static const char *h5py_hint(const char *path, const char *dset, char *out, size_t cap) {
    char code[1024];
    size_t n = (size_t)snprintf(code, sizeof code,
                                "import h5py, stoker; stoker.write(\"OUT.stk\", {\"x\": "
                                "h5py.File(\"");
    for (int pass = 0; pass < 2; pass++) {
        for (const char *c = pass ? dset : path; *c && n + 4 < sizeof code; c++) {
            if (*c == '"' || *c == '\\') code[n++] = '\\';
            code[n++] = *c;
        }
        n += (size_t)snprintf(code + n, n < sizeof code ? sizeof code - n : 0, "%s",
                              pass ? "\"][:]})" : "\")[\"");
    }
    size_t m = (size_t)snprintf(out, cap, "python3 -c ");
    shell_word(out, cap, &m, code);
    return out;
}

static int map_type(hid_t t, stk_dtype *out) {
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER || c == H5T_FLOAT) {
        if (sz > 1 && H5Tget_order(t) != H5T_ORDER_LE) return -ERANGE;
    }
    if (c == H5T_INTEGER) {
        bool sign = H5Tget_sign(t) == H5T_SGN_2;
        switch (sz) {
        case 1: *out = sign ? STK_I8 : STK_U8; return 0;
        case 2: *out = sign ? STK_I16 : STK_U16; return 0;
        case 4: *out = sign ? STK_I32 : STK_U32; return 0;
        case 8: *out = sign ? STK_I64 : STK_U64; return 0;
        }
    } else if (c == H5T_FLOAT) {
        /* Only IEEE layouts: native little-endian float types. */
        if (sz == 4 && H5Tequal(t, H5T_IEEE_F32LE) > 0) { *out = STK_F32; return 0; }
        if (sz == 8 && H5Tequal(t, H5T_IEEE_F64LE) > 0) { *out = STK_F64; return 0; }
        if (sz == 2) { *out = STK_F16; return 0; }
    }
    return -EINVAL;
}

static int cmp_run(const void *a, const void *b) {
    const stk__h5run *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* H5Ewalk2 callback: keeps the description of the innermost error. */
static herr_t h5_last_error(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    if (e && e->desc && e->desc[0]) snprintf((char *)data, 256, "%s", e->desc);
    return 0;
}

/* Bytes of filtered chunks decoded by check_rows before it samples: every
 * chunk of a dataset up to this size in chunks, else the first, the last
 * and chunks spread evenly between them up to it. */
#define CHECK_DECODE_BUDGET ((uint64_t)64 << 20)

/* Row `r` as stoker will read it, from run `u` of file descriptor `fd`:
 * `row` bytes into `out`.  1: read; 0: the run does not decode (the
 * reader will refuse it then, naming the record); < 0: an error. */
static int stoker_row(int fd, const stk__h5run *u, uint64_t r, uint64_t row, size_t elem,
                      uint8_t *out, uint8_t **scratch, uint64_t *cap) {
    if (!u->applied) {
        uint64_t at = u->off + (r - u->first) * row;
        ssize_t got = pread(fd, out, (size_t)row, (off_t)at);
        if (got < 0) return -errno;
        return (uint64_t)got == row;
    }
    uint64_t need = u->stored + 2 * u->raw;
    if (*cap < need) {
        uint8_t *p = stk__realloc(*scratch, (size_t)need);
        if (!p) return -ENOMEM;
        *scratch = p;
        *cap = need;
    }
    uint8_t *src = *scratch, *a = src + u->stored, *b = a + u->raw;
    ssize_t got = pread(fd, src, (size_t)u->stored, (off_t)u->off);
    if (got < 0) return -errno;
    if ((uint64_t)got != u->stored) return 0;
    const char *why = NULL;
    const uint8_t *p = stk__chunk_decode(u->applied, elem, src, u->stored, u->raw, a, b, &why);
    if (!p) return 0;
    memcpy(out, p + (r - u->first) * row, (size_t)row);
    return 1;
}

/* Reads the first and the last row of each run (of a sample of the
 * filtered ones past CHECK_DECODE_BUDGET) both ways, through libhdf5 and
 * as stoker will, and refuses the file where they differ: a layout that
 * claims fewer bytes than its rows take, or a chunk index libhdf5 reads
 * otherwise, would have stoker deliver bytes libhdf5 reads as fill. */
static int check_rows(const char *path, hid_t d, hid_t sp, hid_t t, const stk__h5info *h,
                      uint64_t row, stk_error *err) {
    int nd = h->ndim, rc = 0;
    size_t elem = H5Tget_size(t);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return stk__err(err, -errno, "%s: %s", path, stk_strerror(-errno));
    uint8_t *mine = stk__malloc((size_t)row), *theirs = stk__malloc((size_t)row), *scratch = NULL;
    uint64_t cap = 0, filtered = 0, nfilt = 0;
    hid_t fs = H5Scopy(sp), ms = H5I_INVALID_HID;
    hsize_t start[STK_MAX_DIMS] = {0}, count[STK_MAX_DIMS];
    for (int k = 0; k < nd; k++) count[k] = (hsize_t)h->dims[k];
    count[0] = 1;
    if (!mine || !theirs) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    ms = H5Screate_simple(nd, count, NULL);
    if (fs < 0 || ms < 0) {
        rc = stk__err(err, -ENOMEM, "%s: libhdf5 cannot make a selection", path);
        goto out;
    }
    for (size_t i = 0; i < h->nruns; i++)
        if (h->runs[i].applied) filtered += h->runs[i].raw, nfilt++;
    /* Past the budget, every `stride`-th filtered run, the last one too. */
    uint64_t stride = 1;
    if (filtered > CHECK_DECODE_BUDGET && nfilt > 2) {
        uint64_t can = STK__MAX(CHECK_DECODE_BUDGET / (filtered / nfilt), 2);
        stride = (nfilt + can - 1) / can;
    }
    uint64_t seen = 0;
    for (size_t i = 0; i < h->nruns && !rc; i++) {
        const stk__h5run *u = &h->runs[i];
        if (u->applied && (seen++ % stride) != 0 && seen != nfilt) continue;
        uint64_t rows[2] = {u->first, u->first + u->count - 1};
        for (int j = 0; j < 2 && !rc; j++) {
            if (j == 1 && rows[1] == rows[0]) break;
            start[0] = rows[j];
            int got = stoker_row(fd, u, rows[j], row, elem, mine, &scratch, &cap);
            if (got < 0) {
                rc = stk__err(err, got, "%s: %s", path, stk_strerror(got));
                break;
            }
            if (got == 0) break; /* refused where read, naming the record */
            herr_t hr = -1;
            /* (libhdf5 prints no errors: stk__h5_load turned that off.) */
            if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
                hr = H5Dread(d, t, ms, fs, H5P_DEFAULT, theirs);
            if (hr < 0) {
                char why[256] = "";
                H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_last_error, why);
                why[80] = '\0';
                rc = stk__err(err, STK_ECORRUPT,
                              "%s: dataset '%s': libhdf5 cannot read row %llu%s%s%s, so stoker "
                              "will not read it in place either (a damaged file)",
                              path, h->dataset, (unsigned long long)rows[j], why[0] ? " (" : "",
                              why, why[0] ? ")" : "");
                break;
            }
            if (memcmp(mine, theirs, (size_t)row) != 0) {
                uint64_t at = 0;
                while (at < row && mine[at] == theirs[at]) at++;
                rc = stk__err(err, STK_ECORRUPT,
                              "%s: dataset '%s': row %llu as libhdf5 reads it differs, from "
                              "byte %llu of the row on, from the bytes of the %s at file "
                              "offset %llu its layout names (a damaged or crafted file); "
                              "stoker will not read it in place",
                              path, h->dataset, (unsigned long long)rows[j],
                              (unsigned long long)at, u->applied ? "chunk" : "data",
                              (unsigned long long)u->off);
            }
        }
    }
out:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    stk__free(scratch);
    stk__free(theirs);
    stk__free(mine);
    close(fd);
    return rc;
}

static int index_here(const char *path, const char *dset, stk__h5info *out, stk_error *err) {
    memset(out, 0, sizeof *out);
    int lrc = stk__h5_load(path, err); /* (which turns libhdf5's printing off) */
    if (lrc) return lrc;
    hid_t f = H5I_INVALID_HID, d = H5I_INVALID_HID, sp = H5I_INVALID_HID,
          t = H5I_INVALID_HID, pl = H5I_INVALID_HID;
    int rc = 0;
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        rc = stk__err(err, STK_EBADMAGIC, "%s: not an HDF5 file libhdf5 can open", path);
        goto out;
    }
    if (dset) {
        out->dataset = stk__strdup(dset);
    } else {
        char *name = NULL;
        int count = 0;
        stk__h5_only_dataset(f, &name, &count);
        if (count != 1) {
            stk__free(name);
            rc = stk__err(err, count ? -EINVAL : -ENOENT,
                          "%s: holds %d datasets; name the one to read (--dataset, or dataset= in Python)", path,
                          count);
            goto out;
        }
        out->dataset = name;
    }
    if (!out->dataset) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    H5Eclear2(H5E_DEFAULT);
    d = H5Dopen2(f, out->dataset, H5P_DEFAULT);
    if (d < 0) {
        htri_t there = H5Lexists(f, out->dataset, H5P_DEFAULT);
        if (there <= 0) {
            rc = stk__err(err, -ENOENT, "%s: no dataset '%s'", path, out->dataset);
            goto out;
        }
        /* The name is there but this libhdf5 cannot open the object: most
         * often a file written by a newer HDF5 with libver='latest' (h5py
         * 3.16 bundles HDF5 2.0), whose messages older libraries do not
         * know.  Say so, with the library's own innermost words. */
        char why[256] = "", hint[STK_ERROR_MAX];
        H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_last_error, why);
        why[64] = '\0';
        unsigned maj = 0, min = 0, rel = 0;
        H5get_libversion(&maj, &min, &rel);
        if (maj < 2 && (maj < 1 || min < 14))
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s' is there, but stoker's HDF5 library (%u.%u.%u) "
                          "cannot open it%s%s%s, probably written by a newer HDF5 with "
                          "libver='latest'; pack its rows through h5py's HDF5 with "
                          "stoker.write, or pip install h5py (stoker then reads HDF5 through "
                          "its library): %s",
                          path, out->dataset, maj, min, rel, why[0] ? " (" : "", why,
                          why[0] ? ")" : "", h5py_hint(path, out->dataset, hint, sizeof hint));
        else /* a recent library: the file, not the version */
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: dataset '%s' is there, but libhdf5 %u.%u.%u cannot open it%s%s%s: "
                          "a damaged file",
                          path, out->dataset, maj, min, rel, why[0] ? " (" : "", why,
                          why[0] ? ")" : "");
        goto out;
    }
    sp = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd < 1 || nd > STK_MAX_DIMS) {
        rc = stk__err(err, STK_EUNSUPPORTED,
                      "%s: dataset '%s' has %d dimensions; 1 to %d are supported (records "
                      "run along the first)",
                      path, out->dataset, nd, STK_MAX_DIMS);
        goto out;
    }
    hsize_t dims[STK_MAX_DIMS], cdims[STK_MAX_DIMS];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    out->ndim = nd;
    for (int k = 0; k < nd; k++) out->dims[k] = (int64_t)dims[k];
    t = H5Dget_type(d);
    int m = map_type(t, &out->dtype);
    if (m) {
        char hint[STK_ERROR_MAX];
        if (m == -ERANGE)
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s': the type is big-endian; stoker reads "
                          "little-endian numbers in place: pack its rows (converted) with %s",
                          path, out->dataset, pack_hint(path, out->dataset, hint, sizeof hint));
        else
            rc = stk__err(err, STK_EUNSUPPORTED,
                          "%s: dataset '%s': the element type is not numeric; little-endian "
                          "integers and IEEE floats are supported",
                          path, out->dataset);
        goto out;
    }
    uint64_t row = H5Tget_size(t);
    for (int k = 1; k < nd; k++) row *= dims[k];
    pl = H5Dget_create_plist(d);
    H5D_layout_t lay = H5Pget_layout(pl);
    if (dims[0] == 0) goto out;
    if (lay == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(d);
        if (a == HADDR_UNDEF) {
            rc = stk__err(err, STK_EUNSUPPORTED,
                          "%s: dataset '%s' was never written (no storage allocated)", path,
                          out->dataset);
            goto out;
        }
        out->runs = stk__malloc(sizeof *out->runs);
        if (!out->runs) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto out;
        }
        out->runs[0] = (stk__h5run){(uint64_t)a, 0, dims[0], 0, 0, 0};
        out->nruns = 1;
        rc = check_rows(path, d, sp, t, out, row, err);
        goto out;
    }
    if (lay != H5D_CHUNKED) {
        char hint[STK_ERROR_MAX];
        rc = hint_err(err, hint, STK_EUNSUPPORTED,
                      "%s: dataset '%s' uses the compact layout (tiny data held in the "
                      "header): pack its rows into a dataset instead, with %s",
                      path, out->dataset, pack_hint(path, out->dataset, hint, sizeof hint));
        goto out;
    }
    int nfilt = H5Pget_nfilters(pl);
    unsigned bit_of[32] = {0}; /* pipeline position -> STK__CHUNK_* bit */
    if (nfilt > 32) {
        char hint[STK_ERROR_MAX];
        rc = hint_err(err, hint, STK_EUNSUPPORTED,
                      "%s: dataset '%s' has %d filters: pack its rows into a dataset "
                      "instead, with %s",
                      path, out->dataset, nfilt, pack_hint(path, out->dataset, hint, sizeof hint));
        goto out;
    }
    for (int k = 0; k < nfilt && k < 32; k++) {
        unsigned flags;
        size_t nelem = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(pl, (unsigned)k, &flags, &nelem, NULL, sizeof fname,
                                         fname, NULL);
        unsigned bit = id == H5Z_FILTER_SHUFFLE     ? STK__CHUNK_SHUFFLE
                       : id == H5Z_FILTER_DEFLATE   ? STK__CHUNK_DEFLATE
                       : id == H5Z_FILTER_FLETCHER32 ? STK__CHUNK_FLETCHER
                                                     : 0;
        /* Decoding runs the pipeline backwards; we undo these three in one
         * order, so they must have been applied in the other (shuffle,
         * then gzip, then the checksum: what h5py and h5repack do). */
        static const unsigned rank[8] = {0, 2, 1, 0, 3};
        if (bit && !(out->filters & (int)bit)) {
            bool in_order = true;
            for (unsigned b = 1; b <= 4; b <<= 1)
                if ((out->filters & (int)b) && rank[b] > rank[bit]) in_order = false;
            if (in_order) {
                out->filters |= (int)bit;
                bit_of[k] = bit;
                continue;
            }
        }
        char hint[STK_ERROR_MAX];
        if (bit)
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s' applies its filters in another order than shuffle, "
                          "gzip (deflate), Fletcher-32, the one stoker undoes in place: pack "
                          "its rows with %s",
                          path, out->dataset, pack_hint(path, out->dataset, hint, sizeof hint));
        else if (H5Zfilter_avail(id) > 0)
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s' has the %s filter; stoker undoes shuffle, gzip "
                          "(deflate) and Fletcher-32 in place: pack its rows (libhdf5 decodes "
                          "the %s filter) with %s",
                          path, out->dataset, fname[0] ? fname : "unknown",
                          fname[0] ? fname : "unknown",
                          pack_hint(path, out->dataset, hint, sizeof hint));
        else
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s' has the %s filter; stoker undoes shuffle, gzip "
                          "(deflate) and Fletcher-32 in place, and its HDF5 library lacks "
                          "this filter: pack its rows through h5py (which has its own) with "
                          "stoker.write: %s",
                          path, out->dataset, fname[0] ? fname : "unknown",
                          h5py_hint(path, out->dataset, hint, sizeof hint));
        goto out;
    }
    H5Pget_chunk(pl, nd, cdims);
    for (int k = 1; k < nd; k++)
        if (cdims[k] != dims[k]) {
            char hint[STK_ERROR_MAX];
            rc = hint_err(err, hint, STK_EUNSUPPORTED,
                          "%s: dataset '%s': chunks of dimension %d hold %llu of %llu "
                          "entries, so a row is split between chunks, which stoker does not "
                          "read in place: pack its rows with %s",
                          path, out->dataset, k, (unsigned long long)cdims[k],
                          (unsigned long long)dims[k],
                          pack_hint(path, out->dataset, hint, sizeof hint));
            goto out;
        }
    hsize_t nch = 0;
    H5Dget_num_chunks(d, sp, &nch);
    out->runs = stk__calloc(nch ? nch : 1, sizeof *out->runs);
    if (!out->runs) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (hsize_t i = 0; i < nch; i++) {
        hsize_t coord[STK_MAX_DIMS];
        unsigned mask = 0;
        haddr_t a;
        hsize_t size;
        if (H5Dget_chunk_info(d, sp, i, coord, &mask, &a, &size) < 0 || a == HADDR_UNDEF) {
            rc = stk__err(err, STK_ECORRUPT, "%s: dataset '%s': chunk %llu cannot be located",
                          path, out->dataset, (unsigned long long)i);
            goto out;
        }
        /* Chunks hold whole rows: every chunk starts at column 0 of each
         * other dimension, on a chunk boundary, within the rows.  A key
         * that says otherwise (a damaged or crafted B-tree) names bytes
         * libhdf5 would not deliver for these rows: refused. */
        bool placed = coord[0] < dims[0] && coord[0] % cdims[0] == 0;
        for (int k = 1; k < nd; k++) placed = placed && coord[k] == 0;
        if (!placed) {
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: dataset '%s': chunk %llu says it starts at (%llu, %llu%s): not "
                          "a chunk of whole rows within the dataset's %llu rows (a damaged "
                          "chunk index)",
                          path, out->dataset, (unsigned long long)i,
                          (unsigned long long)coord[0],
                          (unsigned long long)(nd > 1 ? coord[1] : 0), nd > 2 ? ", ..." : "",
                          (unsigned long long)dims[0]);
            goto out;
        }
        /* And libhdf5's own look-up of those rows, the one its reads make,
         * must find this very chunk.  A key can list a chunk it would
         * never find: a v1 B-tree key carries one more coordinate than the
         * dataset has dimensions (the offset within an element, always 0),
         * which chunk_info does not return but the look-up compares. */
        hsize_t fsize = 0;
        herr_t got;
        got = H5Dget_chunk_storage_size(d, coord, &fsize);
        if (got < 0 || fsize != size) {
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: dataset '%s': chunk %llu (rows from row %llu) is listed by the "
                          "chunk index but not found there by libhdf5, which reads those rows "
                          "as the fill value (a damaged chunk index)",
                          path, out->dataset, (unsigned long long)i,
                          (unsigned long long)coord[0]);
            goto out;
        }
        uint64_t n = STK__MIN((uint64_t)cdims[0], (uint64_t)(dims[0] - coord[0]));
        uint64_t craw = (uint64_t)cdims[0] * row;
        /* Bit k of the mask: pipeline filter k was skipped for this chunk
         * (an optional filter that did not help). */
        unsigned applied = 0;
        for (int k = 0; k < nfilt && k < 32; k++)
            if (!(mask & (1u << k))) applied |= bit_of[k];
        uint64_t plain = applied & STK__CHUNK_DEFLATE
                             ? 0
                             : craw + (applied & STK__CHUNK_FLETCHER ? 4 : 0);
        if (applied ? (plain && size != plain) : size < n * row) {
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: dataset '%s': chunk at row %llu stores %llu bytes, %s its %llu "
                          "rows take",
                          path, out->dataset, (unsigned long long)coord[0],
                          (unsigned long long)size, applied ? "not what" : "less than",
                          (unsigned long long)n);
            goto out;
        }
        out->runs[out->nruns++] =
            (stk__h5run){(uint64_t)a, (uint64_t)coord[0], n, applied ? size : 0,
                         applied ? craw : 0, applied};
    }
    qsort(out->runs, out->nruns, sizeof *out->runs, cmp_run);
    uint64_t next = 0;
    for (size_t i = 0; i < out->nruns; i++) {
        if (out->runs[i].first != next) break;
        next += out->runs[i].count;
    }
    if (next != dims[0]) {
        char hint[STK_ERROR_MAX];
        rc = hint_err(err, hint, STK_EUNSUPPORTED,
                      "%s: dataset '%s': rows from %llu on are in chunks never written "
                      "(libhdf5 reads them as the fill value); write them, or pack the rows "
                      "as libhdf5 reads them with %s",
                      path, out->dataset, (unsigned long long)next,
                      pack_hint(path, out->dataset, hint, sizeof hint));
        goto out;
    }
    rc = check_rows(path, d, sp, t, out, row, err);
out:
    if (pl >= 0) H5Pclose(pl);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (rc) stk__h5info_free(out);
    return rc;
}

/* ---- libhdf5 in a child process ----
 *
 * libhdf5 parses the file's superblock, object headers and B-trees, and a
 * damaged or crafted file can kill the process inside it (1.10.8 divides
 * by a chunk dimension of 0, and reads through a NULL heap: the files in
 * tests/fuzz/crashers/hdf5).  The look-ups run in a child made for them,
 * one per index build (forked once: a fork per file would cost the page
 * tables of a large training process each time), so such a file is
 * refused, naming it, and the training process lives.  It also keeps
 * libhdf5 (not thread-safe as Debian builds it) out of the caller's
 * threads: two indexes built at once never share its state. */

struct stk__h5child {
    pid_t pid;
    int fd; /* our end of a stream socket pair: requests out, answers in */
};

typedef struct wire {
    int32_t rc, code, dtype, ndim, filters;
    uint32_t dset_len, msg_len;
    int64_t dims[STK_MAX_DIMS];
    uint64_t nruns;
} wire;

static bool put(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        /* MSG_NOSIGNAL: a child that died answers EPIPE, not SIGPIPE. */
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool get(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

/* A request: the path, then the dataset's name (length UINT32_MAX: none). */
static char *get_string(int fd, uint32_t n) {
    char *s = malloc((size_t)n + 1);
    if (!s || !get(fd, s, n)) {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

static void serve(int fd) {
    for (;;) {
        uint32_t len[2];
        if (!get(fd, len, sizeof len)) _exit(0); /* the parent closed */
        char *path = get_string(fd, len[0]);
        char *dset = len[1] == UINT32_MAX ? NULL : get_string(fd, len[1]);
        if (!path || (len[1] != UINT32_MAX && !dset)) _exit(3);
        stk__h5info h;
        stk_error e = {0};
        int rc = index_here(path, dset, &h, &e);
        wire w = {.rc = rc, .code = e.code};
        if (rc == 0) {
            w.dtype = (int32_t)h.dtype;
            w.ndim = h.ndim;
            w.filters = h.filters;
            memcpy(w.dims, h.dims, sizeof w.dims);
            w.nruns = h.nruns;
            w.dset_len = h.dataset ? (uint32_t)strlen(h.dataset) : 0;
        } else {
            w.msg_len = (uint32_t)strnlen(e.message, sizeof e.message - 1);
        }
        bool ok = put(fd, &w, sizeof w);
        if (ok && rc == 0)
            ok = put(fd, h.runs, h.nruns * sizeof *h.runs) && put(fd, h.dataset, w.dset_len);
        else if (ok)
            ok = put(fd, e.message, w.msg_len);
        if (rc == 0) stk__h5info_free(&h);
        free(path);
        free(dset);
        if (!ok) _exit(3);
    }
}

/* Closes every descriptor but `keep` in the child: another thread's
 * child, or the parent's own sockets, must not stay open here (a copy of
 * another build's socket would keep its child from seeing the end). */
static void close_others(int keep) {
#ifdef SYS_close_range
    if (keep > 3) syscall(SYS_close_range, 3, keep - 1, 0);
    if (syscall(SYS_close_range, keep + 1, ~0u, 0) == 0) return;
#endif
    struct rlimit rl;
    long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (long)rl.rlim_cur
                   : 65536;
    for (long fd = 3; fd < STK__MIN(max, 1L << 20); fd++)
        if (fd != keep) close((int)fd);
}

static int start(stk__h5child **out, const char *path, stk_error *err) {
    stk__h5child *c = stk__calloc(1, sizeof *c);
    if (!c) return stk__err(err, -ENOMEM, "out of memory");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        int e = -errno;
        stk__free(c);
        return stk__err(err, e, "%s: cannot index it: %s", path, stk_strerror(e));
    }
    c->pid = fork();
    if (c->pid < 0) {
        int e = -errno;
        close(sv[0]);
        close(sv[1]);
        stk__free(c);
        return stk__err(err, e, "%s: cannot index it: fork: %s", path, stk_strerror(e));
    }
    if (c->pid == 0) {
        close_others(sv[1]);
        serve(sv[1]);
    }
    close(sv[1]);
    c->fd = sv[0];
    *out = c;
    return 0;
}

/* The child's answer: 0, an error of index_here, or 1 when it sent none
 * (it died). */
static int answer(int fd, stk__h5info *out, stk_error *err) {
    wire w;
    if (!get(fd, &w, sizeof w)) return 1;
    if (w.rc) {
        char msg[STK_ERROR_MAX] = "";
        if (w.msg_len >= sizeof msg || !get(fd, msg, w.msg_len)) return 1;
        return stk__err(err, w.rc, "%s", msg);
    }
    if (w.ndim < 0 || w.ndim > STK_MAX_DIMS || w.nruns > ((uint64_t)1 << 40) / sizeof *out->runs)
        return 1;
    out->dtype = (stk_dtype)w.dtype;
    out->ndim = w.ndim;
    out->filters = w.filters;
    memcpy(out->dims, w.dims, sizeof w.dims);
    out->runs = stk__calloc(w.nruns ? w.nruns : 1, sizeof *out->runs);
    out->dataset = stk__calloc(1, (size_t)w.dset_len + 1);
    if (!out->runs || !out->dataset) return stk__err(err, -ENOMEM, "out of memory");
    out->nruns = (size_t)w.nruns;
    if (!get(fd, out->runs, out->nruns * sizeof *out->runs) ||
        !get(fd, out->dataset, w.dset_len))
        return 1;
    return 0;
}

/* Waits for the child to end; its status, or -1 when another reaped it. */
static int reap(pid_t pid) {
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    return got == pid ? status : -1;
}

void stk__h5child_close(stk__h5child *c) {
    if (!c) return;
    close(c->fd); /* the child sees the end and exits */
    reap(c->pid);
    stk__free(c);
}

int stk__hdf5_index(stk__h5child **child, const char *path, const char *dset,
                    stk__h5info *out, stk_error *err) {
    memset(out, 0, sizeof *out);
    if (!stk__hdf5_isolate || !child) return index_here(path, dset, out, err);
    /* Loaded here, not in the child: the child inherits it, and a library
     * that cannot be loaded is said once, not as a child's failure. */
    int rc = stk__h5_load(path, err);
    if (rc) return rc;
    if (!*child && (rc = start(child, path, err))) return rc;
    stk__h5child *c = *child;
    size_t pl = strlen(path), dl = dset ? strlen(dset) : 0;
    uint32_t len[2] = {(uint32_t)pl, dset ? (uint32_t)dl : UINT32_MAX};
    if (pl >= UINT32_MAX || dl >= UINT32_MAX)
        return stk__err(err, -ENAMETOOLONG, "%s: %s", path, stk_strerror(-ENAMETOOLONG));
    bool sent = put(c->fd, len, sizeof len) && put(c->fd, path, pl) && (!dset || put(c->fd, dset, dl));
    rc = sent ? answer(c->fd, out, err) : 1;
    if (rc == 1) {
        stk__h5info_free(out);
        close(c->fd);
        int status = reap(c->pid);
        stk__free(c);
        *child = NULL;
        if (status != -1 && WIFSIGNALED(status))
            return stk__err(err, STK_ECORRUPT,
                            "%s: libhdf5 crashed (%s) reading the file's structure: a damaged "
                            "or crafted HDF5 file, refused",
                            path, strsignal(WTERMSIG(status)));
        return stk__err(err, -EIO, "%s: the process indexing it ended without a result", path);
    }
    if (rc) stk__h5info_free(out);
    return rc;
}
