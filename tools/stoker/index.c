/*
 * stoker index: indexes files where they lie (stk_index_build) and says
 * whether reading the index will need --root.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "  --from SOURCE        npy, wav, hdf5, raw, image or audio (default: from\n"
    "                       the first file's extension)\n"
    "  --split-axis0        npy: every row along axis 0 is a record (default:\n"
    "                       each file is one record)\n"
    "  --dataset NAME       hdf5: the dataset to read (default: the only one);\n"
    "                       records are its rows along axis 0\n"
    "  --float32            wav: deliver float32 in [-1, 1) (default: PCM 16 as\n"
    "                       i16, 24 and 32 as i32, float as stored)\n"
    "  --field NAME         the field's name (default data, audio, bytes or image)\n"
    "  --ext SUFFIX         in directories, only files ending in SUFFIX\n"
    "\n"
    "Sources: .npy (C order, little-endian); WAV PCM 8/16/24/32-bit and float,\n"
    "any channel count (a clip is a record; windows run over frames); HDF5\n"
    "contiguous or chunked datasets, plain or filtered by shuffle, gzip and\n"
    "Fletcher-32 (any of them), whose chunks hold whole rows; raw files (each\n"
    "file's bytes are one record); images (.jpg .jpeg .png .webp) and compressed\n"
    "audio (.flac .mp3 .ogg .opus), a file per record stored as it is, which\n"
    "Loader(decode=...) decodes (each file's header is checked here).  An HDF5 dataset that cannot be read in place\n"
    "(another filter, layout or byte order) is packed with `stoker pack --from hdf5`.\n"
    "\n"
    "Examples:\n"
    "  stoker index clips/ -o clips.idx --float32\n"
    "  stoker read clips.idx --window 16000 --stride 8000 --shuffle random\n"
    "  stoker index spectra.h5 --dataset segments -o spectra.idx\n";

/* The value of the option at argv[*i]; without one, the usage error says
 * the option needs `what`. */
static const char *index_value(int argc, char **argv, int *i, const char *what) {
    if (*i + 1 >= argc) die_usage("index", "%s needs %s", argv[*i], what);
    return argv[++*i];
}

static stk_source index_source(const char *v) {
    if (!strcmp(v, "npy")) return STK_SOURCE_NPY;
    if (!strcmp(v, "wav")) return STK_SOURCE_WAV;
    if (!strcmp(v, "hdf5") || !strcmp(v, "h5")) return STK_SOURCE_HDF5;
    if (!strcmp(v, "raw")) return STK_SOURCE_RAW;
    if (!strcmp(v, "image")) return STK_SOURCE_IMAGE;
    if (!strcmp(v, "audio")) return STK_SOURCE_AUDIO;
    die_usage("index", "--from: '%s' is not npy, wav, hdf5, raw, image or audio", v);
}

/* Fills `o`, *out and paths[] (*np of them) from the command line; returns
 * false when it asked for --help. */
static bool index_args(int argc, char **argv, stk_index_options *o, const char **out,
                       const char **paths, size_t *np) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(index_help, stdout);
            return false;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            *out = index_value(argc, argv, &i, "a path");
        else if (!strcmp(a, "--from"))
            o->source = index_source(index_value(argc, argv, &i, "npy, wav, hdf5, raw, image or audio"));
        else if (!strcmp(a, "--split-axis0")) o->split_axis0 = 1;
        else if (!strcmp(a, "--dataset")) o->hdf5_dataset = index_value(argc, argv, &i, "a name");
        else if (!strcmp(a, "--float32")) o->wav_float32 = 1;
        else if (!strcmp(a, "--field")) o->field = index_value(argc, argv, &i, "a name");
        else if (!strcmp(a, "--ext")) o->extension = index_value(argc, argv, &i, "a suffix");
        else if (a[0] == '-') die_usage("index", "unknown option '%s'", a);
        else paths[(*np)++] = a;
    }
    return true;
}

/* An index of files outside its directory is read only with --root: the
 * library's message names the root to give. */
static void root_note(const char *out) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
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
}

int cmd_index(int argc, char **argv) {
    stk_index_options o;
    stk_index_options_init(&o);
    const char *out = NULL;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    size_t np = 0;
    if (!paths) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_ERROR;
    }
    if (!index_args(argc, argv, &o, &out, paths, &np)) {
        free(paths);
        return 0;
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
    root_note(out);
    return 0;
}
