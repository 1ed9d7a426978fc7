/*
 * sources.h: what the in-place index (index_build.c) needs of the readers of
 * other formats.
 */
#ifndef STK_SOURCES_H
#define STK_SOURCES_H

#include "../format/format.h"

/* Rows [first, first + count) of an HDF5 dataset's axis 0 stored
 * contiguously at byte `off` of the file. */
typedef struct stk__h5run {
    uint64_t off, first, count;
    uint64_t stored;  /* filtered chunk: its size in the file; 0: plain */
    uint64_t raw;     /* filtered chunk: its size decoded */
    unsigned applied; /* filtered chunk: the STK__CHUNK_* filters it went through */
} stk__h5run;

typedef struct stk__h5info {
    stk_dtype dtype;
    int ndim;
    int64_t dims[STK_MAX_DIMS];
    stk__h5run *runs; /* sorted by first, covering every row once */
    size_t nruns;
    char *dataset;    /* the dataset's path in the file */
    int filters;      /* STK__CHUNK_* bits of the dataset's filter pipeline */
} stk__h5info;

/* Finds where the rows of dataset `dset` (NULL: the file's only dataset)
 * lie in the HDF5 file `path`: plain byte ranges, or filtered chunks
 * (shuffle, gzip, Fletcher-32, in that order, any of them).
 * STK_EUNSUPPORTED where this build has no HDF5, or for layouts the loader
 * cannot read itself (other filters, chunks that split a row, big-endian or
 * compound types), with what to do instead. */
typedef struct stk__h5child stk__h5child;
int stk__hdf5_index(stk__h5child **child, const char *path, const char *dset,
                    stk__h5info *out, stk_error *err);
/* libhdf5 runs in a child process, started by the first stk__hdf5_index
 * given `child` (*child NULL) and kept for the next files, ended here: a
 * file that crashes libhdf5 is refused, and the caller lives.  Without
 * `child`, or with stk__hdf5_isolate false (the fuzzer's, to see
 * libhdf5's own code and crashes), libhdf5 runs in this process. */
void stk__h5child_close(stk__h5child *c);
extern bool stk__hdf5_isolate;
void stk__h5info_free(stk__h5info *h);

/* ---- in-place indexes (index_build.c, index_open.c) ---- */

#define STK__INDEX_FORMAT "stoker-index"
#define STK__INDEX_VERSION 1
/* Version 2: some file names its own encoding ("stored" in its entry),
 * which a reader of version 1 would misread; written only then. */
#define STK__INDEX_VERSION_OWN_CONV 2


/* Whether the file at `path` starts like an index (checks a few bytes). */
bool stk__is_index_file(const char *path);
/* Opens an in-place index as a dataset, checking every file it names; the
 * files must resolve to paths under `root` (NULL: the index's directory). */
int stk__index_open(const char *path, const char *root, stk_dataset **out, stk_error *err);

#endif
