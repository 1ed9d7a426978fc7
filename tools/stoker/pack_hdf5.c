/*
 * stoker pack --from hdf5: packs the rows of HDF5 datasets, read through
 * libhdf5 (so any layout, byte order and filter it can decode), as
 * records: row i of every dataset named is one record, a field per
 * dataset.  This is what `stoker index` advises for a dataset it cannot
 * read in place.  The files' rows follow one another, in the order given;
 * --part and --resume work as for npy.
 */
#include "pack.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#include "../../src/sources/h5.h"

static const char hdf5_help[] =
    "Usage: stoker pack --from hdf5 FILE... --dataset NAME [--dataset NAME...] -o DATASET\n"
    "       [options]\n"
    "\n"
    "Packs the rows of HDF5 datasets into a stoker dataset: row i of every\n"
    "dataset named is record i, with one field per dataset (named after the\n"
    "last part of its path, or FIELD=NAME).  The datasets named must have the\n"
    "same number of rows in each file; the files' rows follow one another, in\n"
    "the order given, and each file must hold every dataset named with the same\n"
    "type and the same dimensions after the first.  Rows are read through\n"
    "libhdf5, so any layout, byte order and filter it can decode is packed (what\n"
    "`stoker index` cannot read in place).\n"
    "\n"
    "  --dataset [FIELD=]NAME  an HDF5 dataset to pack, by its path in the file\n"
    "                     (repeatable; default: the file's only dataset)\n"
    "  -o, --output DIR   the dataset directory to create\n"
    "  --compress zstd[:LEVEL]  compress every field per record\n"
    "  --shard-size SIZE  roll over to a new shard at this size (default 256M)\n"
    "  --align N          align every field to N bytes (default 64)\n"
    "  --part I/N         write part I of N (0-based) of the rows; join the parts\n"
    "                     afterwards with `stoker merge DATASET`\n"
    "  --force            replace an existing dataset\n"
    "  --resume           continue an interrupted pack of the same files\n"
    "  --no-sync          skip fsync (faster; not durable across power loss)\n"
    "  --format-version N 1: the shard format every stoker reads; 2: records of\n"
    "                     fixed-shape fields found by arithmetic; 0 (default):\n"
    "                     2 where every field is fixed and uncompressed, else 1\n"
    "  -q, --quiet        no progress bar and no summary\n"
    "\n"
    "Examples:\n"
    "  stoker pack --from hdf5 train.h5 --dataset images --dataset labels -o train.stk\n"
    "  stoker pack --from hdf5 a.h5 b.h5 --dataset x=/group/features -o xy.stk\n";

/* One dataset named on the command line: its field, and what the first
 * file says of it (every other file must agree). */
typedef struct h5_field {
    const char *path;  /* in the file */
    char name[64];     /* the field's */
    hid_t mem;         /* the type rows are read as (little-endian) */
    size_t row_bytes;
    char *buf;         /* a slab of rows */
} h5_field;

typedef struct h5_job {
    const char *output, *compress;
    bool quiet;
    stk_writer_options wo;
    strvec files, names;
    h5_field *hf;
    size_t nf;
    stk_field *f;      /* the schema, one field per dataset */
    uint64_t *rows;    /* per file */
    uint64_t total_rows, lo, hi, done_bytes, total_bytes;
    char digest[48];
    char *inputs_list; /* each input, for wo.inputs_list (malloc) */
    progress pb;
} h5_job;

static bool h5_args(int argc, char **argv, h5_job *j) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() opt_value("pack", argc, argv, &i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(hdf5_help, stdout);
            return false;
        } else if (!strcmp(a, "--from")) (void)VALUE();
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) j->output = VALUE();
        else if (!strcmp(a, "--dataset")) sv_push(&j->names, VALUE());
        else if (pack_common_option(argc, argv, &i, &j->wo, &j->compress, &j->quiet)) continue;
        else if (a[0] == '-' && a[1]) die_usage("pack", "unknown option '%s' (with --from hdf5)", a);
        else sv_push(&j->files, a);
#undef VALUE
    }
    if (!j->output) die_usage("pack", "-o DATASET is required");
    if (!j->files.n) die_usage("pack", "no HDF5 files given");
    return true;
}

/* The little-endian type rows of file type `t` are read as, and its
 * stoker dtype; H5I_INVALID_HID for a type stoker does not store. */
static hid_t mem_type(hid_t t, stk_dtype *dt) {
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_ENUM) {
        /* h5py's booleans: an enum over an integer, stored as that integer. */
        hid_t base = H5Tget_super(t);
        hid_t m = base < 0 ? H5I_INVALID_HID : mem_type(base, dt);
        if (base >= 0) H5Tclose(base);
        return m;
    }
    if (c == H5T_INTEGER) {
        bool sign = H5Tget_sign(t) == H5T_SGN_2;
        switch (sz) {
        case 1: *dt = sign ? STK_I8 : STK_U8; return H5Tcopy(sign ? H5T_STD_I8LE : H5T_STD_U8LE);
        case 2: *dt = sign ? STK_I16 : STK_U16; return H5Tcopy(sign ? H5T_STD_I16LE : H5T_STD_U16LE);
        case 4: *dt = sign ? STK_I32 : STK_U32; return H5Tcopy(sign ? H5T_STD_I32LE : H5T_STD_U32LE);
        case 8: *dt = sign ? STK_I64 : STK_U64; return H5Tcopy(sign ? H5T_STD_I64LE : H5T_STD_U64LE);
        }
    } else if (c == H5T_FLOAT) {
        if (sz == 4) { *dt = STK_F32; return H5Tcopy(H5T_IEEE_F32LE); }
        if (sz == 8) { *dt = STK_F64; return H5Tcopy(H5T_IEEE_F64LE); }
        size_t spos, epos, esize, mpos, msize;
        if (sz == 2 && H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0 &&
            spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10) {
            /* IEEE half: the file's own layout, little-endian. */
            hid_t m = H5Tcopy(t);
            if (m >= 0) H5Tset_order(m, H5T_ORDER_LE);
            *dt = STK_F16;
            return m;
        }
    }
    return H5I_INVALID_HID;
}

/* Opens dataset `name` of file `f` (path `file`); on failure says why. */
static hid_t open_dataset(hid_t f, const char *file, const char *name) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d >= 0) return d;
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
        fprintf(stderr, "%s: error: %s: no dataset '%s'\n", prog, file, name);
    else
        fprintf(stderr, "%s: error: %s: dataset '%s' is there, but this stoker's HDF5 "
                "library cannot open it (a file written by a newer HDF5 with libver='latest'?)\n",
                prog, file, name);
    return H5I_INVALID_HID;
}

/* Every filter of dataset d must be one this libhdf5 can decode. */
static int check_filters(hid_t d, const char *file, const char *name) {
    hid_t pl = H5Dget_create_plist(d);
    int n = pl < 0 ? 0 : H5Pget_nfilters(pl), rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        unsigned flags;
        size_t nelem = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(pl, (unsigned)k, &flags, &nelem, NULL, sizeof fname,
                                         fname, NULL);
        if (H5Zfilter_avail(id) <= 0) {
            fprintf(stderr, "%s: error: %s: dataset '%s' has the %s filter (id %d), which "
                    "this stoker's HDF5 library cannot decode; install its plugin and point "
                    "HDF5_PLUGIN_PATH at it\n", prog, file, name, fname[0] ? fname : "unknown",
                    (int)id);
            rc = EXIT_ERROR;
        }
    }
    if (pl >= 0) H5Pclose(pl);
    return rc;
}

/* Reads what file i says of every dataset named: its rows, and (from the
 * first file) the schema; the other files must agree with it. */
static int survey_file(h5_job *j, size_t i) {
    const char *file = j->files.v[i];
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "%s: error: %s: not an HDF5 file libhdf5 can open\n", prog, file);
        return EXIT_ERROR;
    }
    int rc = 0;
    if (i == 0 && !j->names.n) {
        char *name = NULL;
        int count = 0;
        stk__h5_only_dataset(f, &name, &count);
        if (count != 1)
            fprintf(stderr, "%s: error: %s: holds %d datasets; name those to pack with "
                    "--dataset NAME\n", prog, file, count);
        else
            sv_push(&j->names, name);
        stk__free(name);
        if (count != 1) {
            H5Fclose(f);
            return EXIT_ERROR;
        }
    }
    if (i == 0) {
        j->nf = j->names.n;
        j->hf = calloc(j->nf, sizeof *j->hf);
        j->f = calloc(j->nf, sizeof *j->f);
        if (!j->hf || !j->f) {
            perror("calloc");
            exit(EXIT_ERROR);
        }
        for (size_t k = 0; k < j->nf; k++) {
            const char *spec = j->names.v[k], *eq = strchr(spec, '=');
            const char *path = eq ? eq + 1 : spec, *slash = strrchr(path, '/');
            const char *fname = eq ? spec : slash ? slash + 1 : path;
            size_t len = eq ? (size_t)(eq - spec) : strlen(fname);
            if (len >= sizeof j->hf[k].name) len = sizeof j->hf[k].name - 1;
            memcpy(j->hf[k].name, fname, len);
            j->hf[k].path = path;
            j->hf[k].mem = H5I_INVALID_HID;
            j->f[k].name = j->hf[k].name;
        }
    }
    uint64_t rows = 0;
    for (size_t k = 0; k < j->nf && rc == 0; k++) {
        h5_field *hf = &j->hf[k];
        hid_t d = open_dataset(f, file, hf->path);
        if (d < 0) {
            rc = EXIT_ERROR;
            break;
        }
        hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
        int nd = H5Sget_simple_extent_ndims(sp);
        hsize_t dims[32] = {0};
        stk_dtype dt = STK_U8;
        hid_t m = H5I_INVALID_HID;
        if (nd < 1 || nd > STK_MAX_DIMS + 1) {
            fprintf(stderr, "%s: error: %s: dataset '%s' has %d dimensions; 1 to %d can be "
                    "packed (records along the first)\n", prog, file, hf->path, nd,
                    STK_MAX_DIMS + 1);
            rc = EXIT_ERROR;
        } else if ((m = mem_type(t, &dt)) < 0) {
            fprintf(stderr, "%s: error: %s: dataset '%s' holds neither integers nor IEEE "
                    "floats; stoker packs numbers\n", prog, file, hf->path);
            rc = EXIT_ERROR;
        } else {
            rc = check_filters(d, file, hf->path);
        }
        if (rc == 0) {
            H5Sget_simple_extent_dims(sp, dims, NULL);
            stk_field *sf = &j->f[k];
            if (i == 0) {
                sf->dtype = dt;
                sf->ndim = nd - 1;
                for (int e = 1; e < nd; e++) sf->shape[e - 1] = (int64_t)dims[e];
                hf->mem = m;
                m = H5I_INVALID_HID;
                hf->row_bytes = stk_dtype_size(dt);
                for (int e = 1; e < nd; e++) hf->row_bytes *= dims[e];
            } else {
                bool same = sf->dtype == dt && sf->ndim == nd - 1;
                for (int e = 1; same && e < nd; e++) same = sf->shape[e - 1] == (int64_t)dims[e];
                if (!same) {
                    char want[128], got[128];
                    int64_t g[STK_MAX_DIMS];
                    for (int e = 1; e < nd; e++) g[e - 1] = (int64_t)dims[e];
                    shape_str(sf->shape, sf->ndim, want, sizeof want);
                    shape_str(g, nd - 1, got, sizeof got);
                    fprintf(stderr, "%s: error: %s: dataset '%s' has rows of %s %s, not %s %s "
                            "as in %s (every file's rows must be alike)\n", prog, file,
                            hf->path, stk_dtype_name(dt), got, stk_dtype_name(sf->dtype), want,
                            j->files.v[0]);
                    rc = EXIT_ERROR;
                }
            }
            if (rc == 0 && k > 0 && dims[0] != rows) {
                fprintf(stderr, "%s: error: %s: dataset '%s' has %llu rows and '%s' %llu; "
                        "the datasets packed together must have as many rows\n", prog, file,
                        hf->path, (unsigned long long)dims[0], j->hf[0].path,
                        (unsigned long long)rows);
                rc = EXIT_ERROR;
            }
            rows = dims[0];
        }
        if (m >= 0) H5Tclose(m);
        H5Tclose(t);
        H5Sclose(sp);
        H5Dclose(d);
    }
    H5Fclose(f);
    j->rows[i] = rows;
    return rc;
}

/* Packs the rows [a, b) of file i (whose first row is record `first`). */
static int pack_file(h5_job *j, size_t i, uint64_t first, stk_writer *w, stk_value *v) {
    const char *file = j->files.v[i];
    if (j->hi <= first || j->lo >= first + j->rows[i]) return 0;
    uint64_t a = (j->lo > first ? j->lo : first) - first;
    uint64_t b = (j->hi < first + j->rows[i] ? j->hi : first + j->rows[i]) - first;
    if (a >= b) return 0;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "%s: error: %s: not an HDF5 file libhdf5 can open\n", prog, file);
        return EXIT_ERROR;
    }
    hid_t *d = calloc(j->nf, sizeof *d);
    if (!d) {
        perror("calloc");
        exit(EXIT_ERROR);
    }
    int rc = 0;
    for (size_t k = 0; k < j->nf; k++) {
        d[k] = open_dataset(f, file, j->hf[k].path);
        if (d[k] < 0) rc = EXIT_ERROR;
    }
    /* Slabs of up to 64 MiB of rows, every field's together. */
    uint64_t all = 0;
    for (size_t k = 0; k < j->nf; k++) all += j->hf[k].row_bytes;
    uint64_t slab = all ? (64u << 20) / all : 4096;
    if (slab == 0) slab = 1;
    for (size_t k = 0; k < j->nf && rc == 0; k++) {
        free(j->hf[k].buf);
        j->hf[k].buf = malloc(j->hf[k].row_bytes * slab + 1);
        if (!j->hf[k].buf) {
            perror("malloc");
            exit(EXIT_ERROR);
        }
    }
    for (uint64_t r = a; r < b && rc == 0; r += slab) {
        uint64_t n = b - r < slab ? b - r : slab;
        for (size_t k = 0; k < j->nf && rc == 0; k++) {
            hid_t sp = H5Dget_space(d[k]);
            int nd = H5Sget_simple_extent_ndims(sp);
            hsize_t start[32] = {0}, count[32] = {0};
            H5Sget_simple_extent_dims(sp, count, NULL);
            start[0] = r;
            count[0] = n;
            H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
            hid_t ms = H5Screate_simple(nd, count, NULL);
            if (H5Dread(d[k], j->hf[k].mem, ms, sp, H5P_DEFAULT, j->hf[k].buf) < 0) {
                fprintf(stderr, "%s: error: %s: dataset '%s': rows %" PRIu64 " to %" PRIu64
                        " cannot be read (a damaged chunk, or a filter that failed)\n", prog,
                        file, j->hf[k].path, r, r + n - 1);
                rc = EXIT_ERROR;
            }
            H5Sclose(ms);
            H5Sclose(sp);
        }
        for (uint64_t q = 0; q < n && rc == 0; q++) {
            for (size_t k = 0; k < j->nf; k++)
                v[k] = (stk_value){j->hf[k].buf + q * j->hf[k].row_bytes,
                                   j->f[k].ndim ? (uint64_t)j->f[k].shape[0] : 1};
            stk_error err = {0};
            if (stk_writer_append(w, v, &err)) rc = fail(&err);
        }
        j->done_bytes += n * all;
        progress_show(&j->pb, j->done_bytes, j->total_bytes, "b");
    }
    for (size_t k = 0; k < j->nf; k++)
        if (d[k] >= 0) H5Dclose(d[k]);
    free(d);
    H5Fclose(f);
    return rc;
}

static int h5_pack(h5_job *j) {
    for (size_t i = 0; i < j->files.n; i++) {
        struct stat st;
        if (stat(j->files.v[i], &st) != 0) {
            fprintf(stderr, "%s: error: %s: %s\n", prog, j->files.v[i], strerror(errno));
            return EXIT_ERROR;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "%s: error: %s: not a regular file (name the HDF5 files "
                    "themselves)\n", prog, j->files.v[i]);
            return EXIT_ERROR;
        }
    }
    j->rows = calloc(j->files.n, sizeof *j->rows);
    if (!j->rows) {
        perror("calloc");
        exit(EXIT_ERROR);
    }
    for (size_t i = 0; i < j->files.n; i++) {
        int rc = survey_file(j, i);
        if (rc) return rc;
        j->total_rows += j->rows[i];
    }
    uint64_t all = 0;
    for (size_t k = 0; k < j->nf; k++) all += j->hf[k].row_bytes;
    if (j->compress)
        for (size_t k = 0; k < j->nf; k++) pack_parse_codec(j->compress, &j->f[k]);
    const stk_writer_options *wo = &j->wo;
    j->lo = j->total_rows * wo->part_index / wo->part_count;
    j->hi = j->total_rows * (wo->part_index + 1) / wo->part_count;
    /* The options that choose the records: the datasets, and the parts. */
    char opts[512];
    int n = snprintf(opts, sizeof opts, "hdf5 parts=%u", wo->part_count);
    for (size_t k = 0; k < j->names.n && n > 0 && (size_t)n < sizeof opts; k++)
        n += snprintf(opts + n, sizeof opts - (size_t)n, " %s", j->names.v[k]);
    if (pack_inputs_digest(&j->files, "hdf5", opts, j->digest, sizeof j->digest,
                           &j->inputs_list))
        return EXIT_ERROR;
    j->wo.inputs = j->digest;
    j->wo.inputs_list = j->inputs_list;
    stk_writer *w = NULL;
    stk_error err = {0};
    if (stk_writer_create(j->output, j->f, j->nf, &j->wo, &w, &err)) return fail(&err);
    uint64_t done = stk_writer_num_records(w);
    if (done && !j->quiet)
        fprintf(stderr, "%s: resuming after %" PRIu64 " records already packed\n", prog, done);
    j->lo += done;
    j->total_bytes = (j->hi - j->lo) * all;
    stk_value *v = calloc(j->nf, sizeof *v);
    if (!v) {
        perror("calloc");
        exit(EXIT_ERROR);
    }
    progress_init(&j->pb, "pack", j->quiet);
    double t0 = now_s();
    int rc = 0;
    uint64_t first = 0;
    for (size_t i = 0; i < j->files.n && rc == 0; i++) {
        rc = pack_file(j, i, first, w, v);
        first += j->rows[i];
    }
    if (rc == 0 && stk_writer_finish(w, &err)) rc = fail(&err);
    double el = now_s() - t0;
    progress_end(&j->pb);
    uint64_t nrec = stk_writer_num_records(w), written = stk_writer_bytes_written(w);
    stk_writer_free(w);
    free(v);
    if (rc) {
        fprintf(stderr, "%s: the dataset at %s is left incomplete\n", prog, j->output);
        return rc;
    }
    if (!j->quiet) {
        char hb[32];
        human_bytes((double)written, hb, sizeof hb);
        printf("packed %" PRIu64 " records (%s) from %zu HDF5 file%s into %s%s in %.2f s\n",
               nrec, hb, j->files.n, j->files.n == 1 ? "" : "s", j->output,
               wo->part_count > 1 ? " (one part)" : "", el);
    }
    return 0;
}

int cmd_pack_hdf5(int argc, char **argv) {
    h5_job j;
    memset(&j, 0, sizeof j);
    stk_writer_options_init(&j.wo);
    stk_error err = {0};
    if (stk__h5_load(NULL, &err)) {
        fprintf(stderr, "%s: error: --from hdf5: %s\n", prog, err.message);
        return EXIT_ERROR;
    }
    int rc = 0;
    if (h5_args(argc, argv, &j)) rc = h5_pack(&j);
    for (size_t k = 0; k < j.nf; k++) {
        if (j.hf[k].mem >= 0) H5Tclose(j.hf[k].mem);
        free(j.hf[k].buf);
    }
    free(j.hf);
    free(j.f);
    free(j.rows);
    sv_free(&j.files);
    sv_free(&j.names);
    free(j.inputs_list);
    return rc;
}
