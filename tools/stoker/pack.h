/*
 * Between pack.c, the command, and pack_input.c, its inputs: finding the
 * .npy files, reading their headers, and a thread that reads whole files
 * ahead of the writer; pack_hdf5.c is `--from hdf5`.
 */
#ifndef STOKER_PACK_H
#define STOKER_PACK_H

#include "cli.h"

#include <pthread.h>

/* A growing list of strings, each its own copy. */
typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

/* Appends a copy of `x`; out of memory exits. */
void sv_push(strvec *s, const char *x);
void sv_free(strvec *s);

/* Adds the files ending in `ext` under `dir`, recursively, in the byte
 * order of their full paths (as Python's sorted() or `LC_ALL=C sort`:
 * "site0.npy" before "site0/a.npy"), the order `stoker index` takes.
 * Returns 0 or a negative errno (-ELOOP for a link loop, said on stderr). */
int collect_dir(const char *dir, const char *ext, strvec *out);

/* --part I/N and --compress zstd[:LEVEL], into the options and a field;
 * a bad value dies with a usage error. */
void pack_parse_part(const char *v, stk_writer_options *wo);
/* The writer's options every pack takes (--compress, --shard-size, --align,
 * --part, --force, --resume, --no-sync, -q): true when argv[*i] was one,
 * *i past its value. */
bool pack_common_option(int argc, char **argv, int *i, stk_writer_options *wo,
                        const char **compress, bool *quiet);
void pack_parse_codec(const char *c, stk_field *f);

/* What a pack is made from, for resume and merge to check: a digest of
 * every input file's path, device, inode, size and modification time, in
 * order, and of `opts`, the options that decide which records come from
 * them, written to out as "KIND:N:HEX".  Every part of a split pack
 * computes the same one.  *list gets each input on a line of
 * stk_writer_options.inputs_list (malloc; NULL where a name cannot be
 * listed), so a refusal names the input that changed.  Returns 0, or -1
 * after saying why. */
int pack_inputs_digest(const strvec *files, const char *kind, const char *opts, char *out,
                       size_t cap, char **list);

/* stoker pack --from hdf5 (pack_hdf5.c): the arguments after "pack". */
int cmd_pack_hdf5(int argc, char **argv);

typedef struct npy_file {
    stk_npy_header h;
    uint64_t first_row; /* split mode: global index of its first record */
} npy_file;

/* Reads and parses the header of the .npy file at `path`, and checks that
 * the file holds the data it promises; sets *fsize to the file's size.
 * Returns 0 or a code with `err` naming the file. */
int read_npy_header(const char *path, stk_npy_header *h, uint64_t *fsize, stk_error *err);

/* Reads the next files while the writer packs the current one: a small
 * ring of buffers filled by one thread, in order. */
#define PREFETCH_SLOTS 4

typedef struct rd_slot {
    char *buf; /* the file's data bytes; owned by the prefetcher */
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
    bool started;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} prefetcher;

/* Starts the thread that reads files queue[0..n) of `paths` (whose headers
 * are in `nf`); all three must outlive prefetch_stop().  Returns 0, or an
 * errno when the thread cannot start (prefetch_stop is still needed). */
int prefetch_start(prefetcher *p, const npy_file *nf, char **paths, const size_t *queue,
                   size_t n);
/* Waits for the next file in the queue; the slot is valid until
 * prefetch_release(). */
const rd_slot *prefetch_next(prefetcher *p);
void prefetch_release(prefetcher *p);
/* Stops and joins the thread, and frees the buffers. */
void prefetch_stop(prefetcher *p);

#endif
