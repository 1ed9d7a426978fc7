/*
 * stoker.h: the public interface of libstoker, and its manual.
 *
 * stoker packs training data into indexed shard files and reads them back as
 * fast as the hardware allows.  This header is the reference for everything a
 * program can do with the library; the command line tool `stoker` uses
 * nothing but what is declared here.
 *
 * Conventions that hold for every function below unless it says otherwise:
 *
 *  - Errors.  A function returns 0 on success or a negative code: a negated
 *    errno value (-ENOENT, -EINVAL, -ENOMEM, -EIO, ...) or one of stoker's own
 *    codes (STK_E*, all below -1000).  The global errno is never relied upon.
 *    Functions that take an `stk_error *err` fill it with the same code and a
 *    message naming the file, shard and record concerned; `err` may be NULL.
 *    Nothing in the library aborts the process on bad input.
 *    The exceptions: stk_loader_next and stk_loader_next_timeout return
 *    STK_END (1, positive) at the end of an epoch; functions named for what
 *    they give (stk_dataset_num_records, stk_loader_backend, the *_name functions)
 *    return it directly and say what a NULL or out-of-range argument gives;
 *    the *_parse functions return the value or -EINVAL; void functions
 *    cannot fail.
 *  - Borrowed inputs.  Every pointer passed in (paths, field lists and
 *    their names, schemas, option strings such as attrs_json, inputs,
 *    hdf5_dataset, extension and root, record values) is read during the
 *    call only: the library copies what it keeps, and the caller may free
 *    or reuse it as soon as the call returns.
 *  - Ownership.  Objects are opaque and come from a `_create` or `_open`
 *    function; the matching `_free` or `_close` releases them and accepts
 *    NULL.  Every pointer the library hands out states how long it lives.
 *  - Options.  Option structs are filled with defaults by their `_init`
 *    function; set the fields you care about afterwards, so that fields added
 *    in later versions keep their defaults.
 *  - Threads.  Functions on distinct objects may run concurrently.  Whether
 *    one object may be used from several threads at once is stated per type.
 *  - Names.  stk_<object>_<verb>, where the object may be a part of
 *    another (stk_loader_stats_get, stk_batch_field_get, stk_loader_trace_start)
 *    and the verb may take its complement (stk_loader_set_epoch,
 *    stk_dataset_find_field); a getter is named for what it gives
 *    (stk_loader_rank_batches); actions on no object are stk_<verb>
 *    (stk_merge, stk_diagnose, stk_measure_read).  Options structs are
 *    stk_<object>_options, filled by stk_<object>_options_init, and passed
 *    as `opts`.  Counts, sizes, ids and flag sets are fixed-width unsigned
 *    (uint32_t, uint64_t), sizes in memory size_t; booleans and small
 *    values that may be negative or are bounded by the machine (ndim,
 *    codec levels, thread counts, a device ordinal or -1) are int.
 *    Declarations sit by their partners (open beside close).
 *  - Byte order.  Files are little-endian; the library builds only on
 *    little-endian hosts (a build on another host fails at compile time).
 */
#ifndef STOKER_H
#define STOKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Linux is the only target (io_uring, O_DIRECT, mmap semantics). */
#define STK_API __attribute__((visibility("default")))

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 1
#define STK_VERSION_PATCH 0
#define STK_VERSION_STRING "0.1.0"

/* The newest version of the on-disk format this library writes and reads
 * (it reads every older one).  Version 2 locates the records of a schema
 * of fixed-shape, uncompressed fields by arithmetic (docs/FORMAT.md); a
 * writer picks it for such schemas and version 1 for any other
 * (stk_writer_options.format_version). */
#define STK_FORMAT_VERSION 2

/* Returns STK_VERSION_STRING of the library actually linked. */
STK_API const char *stk_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * stoker's own error codes.  Each kind of damage has its own code so that a
 * caller (or a test) can tell them apart without parsing messages.
 */
enum {
    STK_EBADMAGIC = -1001,   /* not a stoker file: foreign or overwritten  */
    STK_EVERSION = -1002,    /* a format version this library cannot read  */
    STK_ETRUNCATED = -1003,  /* a file is shorter than its header promises  */
    STK_ECORRUPT = -1004,    /* a structure is malformed (header, manifest) */
    STK_EBOUNDS = -1005,     /* an index entry points outside its region    */
    STK_ECHECKSUM = -1006,   /* stored and computed checksums differ        */
    STK_EINCOMPLETE = -1007, /* a pack was interrupted or not yet merged    */
    STK_ESCHEMA = -1008,     /* data does not fit the schema                */
    STK_ECODEC = -1009,      /* compression or decompression failed         */
    STK_EMISMATCH = -1010,   /* a shard does not match its manifest entry   */
    STK_EUNSUPPORTED = -1011, /* valid input that this build cannot handle   */
    STK_ESTALE = -1012,       /* a source file changed since it was indexed  */
    STK_ENOGPU = -1013,       /* no usable GPU (no CUDA build, driver, device) */
    STK_ECUDA = -1014,        /* a CUDA call failed (the message says which)  */
    STK_EOUTSIDE = -1015,     /* an index names a file outside the directory
                               * its files may be read from                 */
    STK_ETIMEOUT = -1016,     /* a wait passed its deadline: a remote transfer
                               * given up after its retries, or another
                               * process that stopped while holding a lock.
                               * Not -ETIMEDOUT, which stk_loader_next_timeout
                               * returns when no batch is ready yet          */
    /* What a remote store answered that no retry cures, failed at once: */
    STK_EREDIRECT = -1017,    /* a redirect loop                              */
    STK_EHOST = -1018,        /* a host name that does not resolve            */
    STK_ETLS = -1019,         /* TLS failed (a certificate, the handshake)    */
    STK_EHTTP = -1020,        /* an HTTP 4xx other than 401/403/404/408/429   */
    STK_ERANGE = -1021,       /* a range other than the one asked for         */
    STK_EMEDIA = -1022        /* encoded media (an image, an audio clip) that
                               * does not decode: damaged, or not a format
                               * the field's type allows                      */
};

#define STK_ERROR_MAX 512

/*
 * Filled by any function that takes one.  `code` equals the function's return
 * value; `message` is a NUL-terminated sentence that names the file, and where
 * known the shard and record.  Callers own the struct (usually on the stack);
 * the library never keeps a pointer to it.
 */
typedef struct stk_error {
    int code;
    char message[STK_ERROR_MAX];
} stk_error;

/*
 * A short, static description of a code ("checksum mismatch", or strerror's
 * text for errno values).  Never NULL; the string lives forever.
 * Thread-safe.
 */
STK_API const char *stk_strerror(int code);

/* ------------------------------------------------------------------------ */
/* Schema                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum stk_dtype {
    STK_U8 = 1,
    STK_U16,
    STK_U32,
    STK_U64,
    STK_I8,
    STK_I16,
    STK_I32,
    STK_I64,
    STK_F16,
    STK_BF16,
    STK_F32,
    STK_F64,
    STK_BYTES /* opaque bytes: element size 1, no arithmetic meaning */
} stk_dtype;

typedef enum stk_codec {
    STK_CODEC_NONE = 0,
    STK_CODEC_ZSTD = 1
} stk_codec;

#define STK_MAX_DIMS 8
#define STK_NAME_MAX 64
/* A first dimension that varies from record to record. */
#define STK_RAGGED (-1)

/*
 * One field of a record.
 *
 * `shape` has `ndim` entries, 0 <= ndim <= STK_MAX_DIMS.  ndim == 0 is a
 * scalar (one element per record).  shape[0] may be STK_RAGGED: each record
 * then says how many rows it has, 0 included.  Every fixed entry is >= 1.
 * A STK_BYTES field has ndim 1: a ragged byte string, or a fixed size.
 *
 * A "row" is one step along the first dimension: its size in bytes is the
 * element size times the product of shape[1..ndim).  A field's bytes in a
 * record are its rows, row-major, without padding.
 *
 * `codec` compresses the field's bytes per record.  A compressed field is
 * read whole only: a loader delivers it as a per-record field, and refuses
 * it as the time field of windows (a window reads a range of rows; repack
 * the field uncompressed).  `codec_level` is passed to the codec (zstd:
 * 1..19, 0 means its default, 3).
 *
 * `name` is 1..STK_NAME_MAX-1 bytes of [A-Za-z0-9_.-].
 *
 * `type` is the field's logical type, or NULL (the default: the dtype says
 * all).  It is recorded in the manifest ("type") and tells readers how to
 * present the stored elements; the library itself only carries it.  It is
 * 1..STK_TYPE_MAX-1 printable ASCII characters.  Those stoker writes:
 * "string" (a ragged bytes field of UTF-8 text, one string a record) and
 * "binary" (a ragged bytes field, one byte string a record);
 * "timestamp[U]" or "timestamp[U, tz=ZONE]" (i64 counts of unit U, one of
 * s ms us ns, since 1970-01-01 UTC), "date32" (i32 days), "date64" (i64
 * milliseconds), "duration[U]" (i64), "time32[U]" (i32, U s or ms) and
 * "time64[U]" (i64, U us or ns; times of day since midnight).  A reader
 * that does not know a type presents the dtype's values.  Copied with the
 * schema wherever `name` is.
 */
#define STK_TYPE_MAX 128
typedef struct stk_field {
    const char *name;
    stk_dtype dtype;
    int ndim;
    int64_t shape[STK_MAX_DIMS];
    stk_codec codec;
    int codec_level;
    const char *type;
} stk_field;

/* Element size in bytes of a dtype (1 for STK_BYTES), 0 for an unknown one. */
STK_API size_t stk_dtype_size(stk_dtype dtype);

/* The dtype's name as written in manifests: "u8" ... "f64", "bf16",
 * "bytes"; NULL for an unknown dtype.  Static storage. */
STK_API const char *stk_dtype_name(stk_dtype dtype);

/* Parses a dtype name as above.  Returns the dtype, or -EINVAL. */
STK_API int stk_dtype_parse(const char *name);

/* ------------------------------------------------------------------------ */
/* Writing a dataset                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A dataset is a directory holding `manifest.json` and shard files.  The
 * manifest is written last, atomically (write, fsync, rename, fsync of the
 * directory), so a dataset either opens complete or is reported incomplete.
 */
typedef struct stk_writer stk_writer;

typedef struct stk_writer_options {
    /* A shard is closed and a new one begun when the next record would take
     * the shard's data past this many bytes.  A record never straddles two
     * shards; a record larger than the target gets a shard to itself.
     * Default 256 MiB. */
    uint64_t shard_bytes;
    /* Every field's bytes start at a multiple of this (a power of two between
     * 1 and 4096).  Default 64: a cache line, and enough for every dtype. */
    uint32_t align;
    /* The shard's data region is also checksummed in blocks of this size (a
     * power of two between 4096 and 16 MiB), so that a reader that reads part
     * of a record can still verify what it read.  Default 64 KiB. */
    uint32_t block_size;
    /* Split packing: this writer produces part `part_index` of `part_count`
     * (0 <= part_index < part_count).  Parts write distinct files into the
     * same directory and a part manifest each; stk_merge() joins them.
     * part_count STK_PARTS_OPEN: the count is not known yet (a task of an
     * engine that learns it only once every task has run);
     * stk_merge_parts() is then told it.  Rewriting a finished part (with
     * overwrite) replaces it whole: a task run again leaves one copy.
     * Default 0 of 1: an ordinary, whole dataset. */
    uint32_t part_index;
    uint32_t part_count;
    /* Replace a complete dataset already at the path.  Default 0: such a
     * path is refused with -EEXIST. */
    int overwrite;
    /* Make shards and manifest durable with fsync before the manifest is
     * published.  Default 1.  With 0 a power loss may leave a complete
     * manifest over shards that never reached the disk. */
    int sync;
    /* A JSON object copied verbatim into the manifest under "attrs", or NULL.
     * It must parse as a JSON object. */
    const char *attrs_json;
    /* Continue an interrupted pack at the path (same schema and options):
     * the shards it had finished and made durable are kept (with sync, up
     * to the last few shards may be redone), stk_writer_num_records() says
     * how many records they hold, and the caller appends from that record
     * on.  Where no interrupted pack is found, an ordinary one starts.
     * Default 0. */
    int resume;
    /* What the records are made from, as a short string of letters,
     * digits and . _ : - (at most 128; e.g. a digest of the input files'
     * names, sizes and modification times and of the options that shape
     * the records), or NULL.  Recorded in the pack's journal and in its
     * manifest ("inputs"): resume refuses a journal that recorded other
     * inputs (or none), so that a changed input set is never packed half
     * old, half new, and stk_merge refuses parts made from different
     * inputs.  NULL: nothing is recorded or checked.  `stoker pack` sets
     * it. */
    const char *inputs;
    /* The inputs one by one, so that a refusal can name the one that
     * changed: a line per input, "NAME\tSIZE\tMTIME_NS\tHASH\n" (HASH: of
     * its first and last bytes, as hex), in the order they are packed, or
     * NULL.  Recorded beside `inputs` in the journal and in a part's
     * manifest ("input_files"); when `inputs` differs on resume (or
     * between parts at stk_merge) the error names the first input added,
     * removed or changed (its size, its time or its bytes), or says that
     * only the options differ.  At most 64 MiB. */
    const char *inputs_list;
    /* The shard format: 0 (the default) picks version 2 where the schema
     * has only fixed-shape, uncompressed fields (records are then located
     * by arithmetic: no index entry is read to find one) and version 1
     * otherwise; 1 always writes version 1, which stoker 0.1 before
     * version 2 also reads; 2 asks for version 2 and is refused (-EINVAL)
     * for a schema it cannot hold.  The manifest's version is the newest
     * of its shards'. */
    uint32_t format_version;
} stk_writer_options;

/* Fills `opts` with the defaults above. */
STK_API void stk_writer_options_init(stk_writer_options *opts);

/*
 * Starts a dataset (or one part of it) at `path`, creating the directory if
 * needed.  `fields` describes each record; it is copied, so the caller may
 * free it on return.  `opts` may be NULL for the defaults.
 *
 * Until stk_writer_finish() succeeds the dataset is incomplete: opening it
 * fails with STK_EINCOMPLETE.
 *
 * Returns 0 and sets *out, or:
 *   -EINVAL   a bad schema (empty, duplicate or invalid name, bad dtype, bad
 *             shape, bytes with ndim != 1) or bad options;
 *   -EEXIST   a complete dataset (or this part) exists and !opts->overwrite;
 *   -ENOMEM, or a negated errno from creating the directory or files.
 * Thread-safety: a writer is used by one thread at a time.
 */
STK_API int stk_writer_create(const char *path, const stk_field *fields,
                              size_t nfields, const stk_writer_options *opts,
                              stk_writer **out, stk_error *err);

/*
 * The values of one field of one record.  `data` points at `rows` rows of the
 * field (see stk_field), row-major.  For a fixed first dimension `rows` must
 * equal shape[0]; for a scalar field it must be 1.  The writer copies the
 * bytes before returning; `data` may be NULL when rows == 0.
 */
typedef struct stk_value {
    const void *data;
    uint64_t rows;
} stk_value;

/*
 * Appends one record: values[i] holds field i, in schema order.
 * Returns 0, or:
 *   -EINVAL / STK_ESCHEMA  a row count that does not fit the schema (the
 *             message names the field and the record number);
 *   STK_ECODEC  compression failed;
 *   -ENOSPC, -EIO and other negated errnos from writing, naming the shard.
 * After an error the writer accepts no more records; free it, and the
 * dataset stays incomplete.
 */
STK_API int stk_writer_append(stk_writer *w, const stk_value *values,
                              stk_error *err);

/* Records appended so far. */
STK_API uint64_t stk_writer_num_records(const stk_writer *w);

/* Bytes written to shard files so far (data, padding, index and headers). */
STK_API uint64_t stk_writer_bytes_written(const stk_writer *w);

/*
 * Closes the last shard and publishes the manifest (for a part: the part
 * manifest).  After this the dataset opens as complete.  The writer must
 * still be freed.  Returns 0 or a negated errno / STK_E* code; on failure the
 * dataset remains incomplete and nothing previously complete is lost.
 */
STK_API int stk_writer_finish(stk_writer *w, stk_error *err);

/* Releases the writer.  Unfinished work is abandoned: the files written so
 * far stay, and the dataset opens as STK_EINCOMPLETE.  Accepts NULL. */
STK_API void stk_writer_free(stk_writer *w);

/*
 * Joins the parts written with part_count = N into one dataset at `path`.
 * Every part 0..N-1 must be finished and share one schema.  Records keep the
 * order of the parts: all of part 0, then all of part 1, and so on.  The
 * manifest is published atomically; the part manifests are then removed.
 * Returns 0, or STK_EINCOMPLETE (a part is missing or unfinished, named in the
 * message), STK_ESCHEMA (parts disagree), -EEXIST (already merged), or a
 * negated errno.
 */
STK_API int stk_merge(const char *path, stk_error *err);

/* part_count of a part whose count is given at the merge. */
#define STK_PARTS_OPEN UINT32_MAX

/*
 * stk_merge for parts written with part_count = `count` or STK_PARTS_OPEN:
 * exactly parts 0..count-1 must be there (a part numbered count or more is
 * STK_EMISMATCH: a stale part of another write, named, never merged in).
 * count 0: as stk_merge (the count the parts record).
 */
STK_API int stk_merge_parts(const char *path, uint32_t count, stk_error *err);

/* ------------------------------------------------------------------------ */
/* Reading a dataset                                                         */
/* ------------------------------------------------------------------------ */

typedef struct stk_dataset stk_dataset;

/*
 * Opens the dataset at `path` (the directory, or its manifest.json) and
 * validates it: the manifest; every shard's header, size, and index against
 * the manifest's checksums; every index entry against the shard's bounds and
 * the schema.  Record bytes are not read (see stk_dataset_verify).
 *
 * Returns 0 and sets *out, or:
 *   -ENOENT          no dataset there (or a shard file is missing);
 *   -EINVAL          a URL of a scheme not read (gs://, az://, hdfs://...,
 *                    named with those that are), or a file or directory of
 *                    data that is no dataset (Parquet, Arrow, .npy, WAV,
 *                    HDF5: named, with the command that makes it one);
 *   STK_EINCOMPLETE  a pack that did not finish, or parts not yet merged;
 *   STK_EBADMAGIC    a shard or manifest that is not stoker's;
 *   STK_EVERSION     a newer or unknown format version;
 *   STK_ETRUNCATED   a shard shorter than recorded;
 *   STK_ECORRUPT     a malformed manifest or header;
 *   STK_EMISMATCH    a shard that differs from its manifest entry;
 *   STK_ECHECKSUM    an index whose checksum fails;
 *   STK_EBOUNDS      an index entry outside the shard's data region;
 *   STK_ESCHEMA      an index entry that contradicts the schema;
 *   -ENOMEM, -EIO, -EMFILE ...
 * Thread-safety: an open dataset is immutable; every stk_dataset_* reader
 * below may be called from any number of threads at once.  The shard files
 * must not be modified while the dataset is open.
 */
STK_API int stk_dataset_open(const char *path, stk_dataset **out,
                             stk_error *err);

/* How a path is opened. */
typedef struct stk_open_options {
    /* The directory an in-place index's files may lie under.  NULL: the
     * index file's own directory.  An index is a file anyone may hand over
     * and it names files by path: without this rule a crafted index would
     * deliver any file the process can read (../../home/..., /etc/...) into
     * batches.  An index written beside its data needs nothing; one
     * written elsewhere (`stoker index /data -o ~/data.idx`) is opened
     * with root "/data", which the caller names because it trusts that
     * index.  "/" allows every file.  Each file's path is resolved
     * (symbolic links, "..") before it is compared.  A file outside is
     * STK_EOUTSIDE, naming the file and the root.  Not used by datasets of
     * shards, whose manifest can only name files in its own directory. */
    const char *root;
    /* Remote datasets (see "Datasets in object stores"): the cache
     * directory.  NULL (default): $STOKER_CACHE_DIR, else
     * $XDG_CACHE_HOME/stoker, else ~/.cache/stoker. */
    const char *cache_dir;
    /* Remote datasets: bytes of disk this dataset's cache may take.
     * STK_CACHE_BUDGET_AUTO (default): the file system's free space less a
     * reserve of 5% of its size. */
    uint64_t cache_budget;
    /* Remote datasets: the deadline of every request, in seconds (see
     * "Datasets in object stores").  0 (default): $STOKER_REMOTE_TIMEOUT,
     * else 30. */
    double remote_timeout;
} stk_open_options;

#define STK_CACHE_BUDGET_AUTO UINT64_MAX

STK_API void stk_open_options_init(stk_open_options *opts);

/* stk_dataset_open with options (NULL: the defaults). */
STK_API int stk_dataset_open_with(const char *path, const stk_open_options *opts,
                                  stk_dataset **out, stk_error *err);

/* ------------------------------------------------------------------------ */
/* Datasets in object stores                                                */
/* ------------------------------------------------------------------------ */

/*
 * Wherever a dataset path is taken, `s3://bucket/prefix/dataset` and
 * `https://host/path/dataset` (or http://) name a dataset of shards kept in
 * an object store or behind a web server.  Opening one fetches its manifest
 * and, for each shard the local cache does not hold, its header, index and
 * block table, pinning the object's identity (its ETag) on the way.  The
 * rest arrives as it is read: a loader asks for each batch's records (each
 * block-order group's spans) before reading them, so fetches follow the
 * planned order, run ahead with the loader's read-ahead, and a rank fetches
 * only what it reads.  Every 64 KiB block is checked against its XXH3 as it
 * arrives; one that fails is fetched again (three times at most), then
 * STK_ECHECKSUM names the object and the records.  An object that changed
 * since it was pinned is STK_ESTALE, never a mix of two versions.
 * stk_dataset_fetch_all (`stoker cache warm`) brings everything at once.
 *
 * S3 requests are signed (AWS SigV4) with the credentials, region and
 * endpoint the AWS tools would use: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN, AWS_PROFILE and the shared credentials and config
 * files, AWS_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (S3-compatible
 * servers, addressed path-style); anonymous when none are found or
 * AWS_NO_SIGN_REQUEST=true.  Credentials that expire are read again from
 * their source.
 *
 * The cache holds one directory per dataset version (keyed by the
 * manifest's checksum); a restarted run reuses what it holds, block by
 * block.  Several processes share it: the processes of a node that open one
 * URL together fetch its manifest and its shards' headers and indexes once
 * (one opens, the others wait and reuse; a manifest fetched less than
 * $STOKER_MANIFEST_TTL seconds ago, default 10, is not asked for again, an
 * older one is confirmed with If-None-Match), and blocks being fetched by
 * one are waited for by the others, never fetched twice.
 *
 * Failures end within a deadline, T = stk_open_options.remote_timeout, else
 * $STOKER_REMOTE_TIMEOUT, else 30 seconds: every request ends within T of
 * being sent or of the last byte of its object that came, whichever is
 * later (a stall counts from the last byte; a slow transfer that keeps
 * receiving is not cut).  5xx, 408, 429, SlowDown, resets, timeouts and
 * stalled transfers are retried with exponential backoff and jitter
 * (Retry-After honoured) while the deadline allows, at most
 * $STOKER_REMOTE_RETRIES times (default 8), and for at most
 * $STOKER_REMOTE_RETRY_SECONDS (default: T) after the first failure; a
 * transfer with no byte for T/2 is abandoned and sent again.  A request
 * whose deadline or retry budget passed is STK_ETIMEOUT, naming the last
 * cause; one whose tries ran out first gives the last try's error.  A range
 * taking $STOKER_REMOTE_LATE times (default 4; 0: never) longer than the
 * rate the others get predicts, and over 2 s, is sent again at once.
 * What no retry can cure fails at once, naming the URL: 403 and 401 are
 * -EACCES, 404 -ENOENT, a wrong region -EINVAL, other 4xx STK_EHTTP, a
 * redirect loop STK_EREDIRECT, a TLS failure STK_ETLS, a host that does not
 * resolve STK_EHOST, a 206 whose Content-Range is not the range asked for
 * STK_ERANGE, an object whose ETag or size changed STK_ESTALE (after which
 * every read of that shard fails at once with the same error).  A
 * connection refused before any server has answered (a wrong port, a
 * server not started) fails after 4 quick tries, about a second, with the
 * socket's errno (-ECONNREFUSED; -EHOSTUNREACH, -ENETUNREACH); once one has
 * answered, a refusal is retried as above (a server restarting).  A process
 * waiting for another's lock waits while that one shows life (it beats the
 * lock file while it fetches) and gives up with STK_ETIMEOUT once it has
 * shown none for T and 5 s.
 * $STOKER_REMOTE_CONNECTIONS (default 16) requests are in flight at once,
 * each a range of $STOKER_REMOTE_PART_MB MiB (default 8).  A loader
 * announces the $STOKER_REMOTE_AHEAD_MB MiB (default 64; 0: none) of
 * batches, or block groups, after the one it fills, and a thread of the
 * dataset fetches them in the background, in that order; a loader that
 * reads every record (one rank, no cache budget) lets it fetch the blocks
 * between those announced too, in ranges of up to the part size.
 *
 * The cache's budget (stk_open_options.cache_budget, else
 * $STOKER_CACHE_BUDGET, else the disk's free space less 5%) may be smaller
 * than the dataset: blocks are then evicted as others arrive, the disk use
 * of the dataset's cache directory (measured in disk blocks, with every
 * process of the node sharing it counted) never exceeding the budget.
 * What goes first is what the node's readers will use least soon (a
 * loader tells the cache every read of its epoch ahead); a block a reader
 * is between fetching and reading is never evicted, by any process.  A
 * loader whose threads may hold more at once than the budget is refused at
 * open; a budget of 0 streams (nothing is kept but what is being read).
 * Reading everything at once (stk_dataset_fetch_all, a validity rule, the
 * GPU's resident copy) is refused under such a budget.
 */

/* What reading a remote dataset has fetched so far (opening it, and every
 * reader since). */
typedef struct stk_remote_stats {
    uint64_t requests;      /* HTTP requests sent, retries included */
    uint64_t retries;       /* of which retries */
    uint64_t bytes_fetched; /* body bytes received */
    uint64_t bytes_cached;  /* bytes of whole shards the cache held at open */
    double network_seconds; /* time spent waiting on the network, summed over
                             * the threads that waited */
    /* Under a cache budget smaller than the dataset (else all 0): */
    uint64_t cache_budget;  /* the budget (0: streaming) */
    uint64_t cache_peak;    /* the largest disk use this process measured */
    uint64_t bytes_evicted; /* bytes this process evicted */
    int cache_limited;      /* 1 when the budget applies */
} stk_remote_stats;

/* The remote statistics of `ds`.  Returns 0, or -EINVAL for a local
 * dataset. */
STK_API int stk_dataset_remote_stats(const stk_dataset *ds, stk_remote_stats *out);

/* Brings every byte of a remote dataset into the cache now (opening one
 * fetches only each shard's header and index; the rest comes as readers
 * ask).  Returns 0 (at once for a local dataset) or a fetch error. */
STK_API int stk_dataset_fetch_all(const stk_dataset *ds, stk_error *err);

/* Uploads the local dataset in directory `dir` to `url` (s3://bucket/prefix,
 * credentials and endpoint as for reading).  The dataset is checked whole
 * first (every shard against the manifest, every block against its
 * checksum); then every shard is sent, many at once (one PUT each, or a
 * multipart upload in parts of $STOKER_REMOTE_PART_MB MiB, at least 5, when
 * larger; a failed multipart upload is aborted), and the manifest last, so
 * that a reader never finds a manifest whose shards are not all there.  A
 * dataset already at `url` (its manifest answers) is -EEXIST unless
 * `replace`; replacing one in place makes its open readers fail with
 * STK_ESTALE, so a new prefix is the better way to publish a new version.
 * `progress`, when given, is called with the bytes sent so far and in all.
 * `dir` and `url` are read during the call only. */
STK_API int stk_dataset_push(const char *dir, const char *url, int replace,
                             void (*progress)(void *ctx, uint64_t done, uint64_t total),
                             void *ctx, stk_error *err);

/* Uploads files names[0..n) of local directory `dir` to `url`
 * (s3://bucket/prefix: object prefix/name each, credentials and endpoint
 * as for reading), all at once (one PUT each, or a multipart upload above
 * the part size, aborted on failure).  Nothing is checked: what must come
 * last (a manifest) is a later call.  Returns 0 or the first error, naming
 * the object. */
STK_API int stk_push_files(const char *dir, const char *const *names, size_t n, const char *url,
                           stk_error *err);

/* Deletes objects `url`/names[i] (s3://bucket/prefix), one request each;
 * an object already gone is no error.  Returns 0 or the first error. */
STK_API int stk_delete_objects(const char *url, const char *const *names, size_t n,
                               stk_error *err);

/* What the link to a remote dataset delivers: its shard objects fetched
 * again (not into the cache) the way opening fetches them, ranges of
 * $STOKER_REMOTE_PART_MB MiB (default 8) with every connection busy, for
 * about `max_seconds` or 1 GiB.  Sets *bytes_per_s.  Returns 0, -EINVAL for
 * a local dataset, or a fetch error. */
STK_API int stk_measure_link(const stk_dataset *ds, double max_seconds, double *bytes_per_s,
                             stk_error *err);

/* One dataset version in a cache directory. */
typedef struct stk_cache_entry {
    const char *key;      /* the manifest checksum naming its directory */
    const char *origin;   /* the URL it was fetched from */
    const char *path;     /* its directory */
    uint64_t bytes;       /* disk space it takes */
    uint32_t shards;      /* shards of the dataset */
    uint32_t shards_held; /* of which complete and checked in the cache */
} stk_cache_entry;

/* Calls fn for every dataset in cache directory `cache_dir` (NULL: the
 * default of stk_open_options), in no particular order; the entry is valid
 * during the call.  A nonzero return from fn stops the walk and is
 * returned.  Returns 0, or an error reading the directory (an absent one
 * holds nothing). */
STK_API int stk_cache_list(const char *cache_dir,
                           int (*fn)(void *ctx, const stk_cache_entry *e), void *ctx,
                           stk_error *err);
/* Removes from cache directory `cache_dir` (NULL: the default) every
 * dataset fetched from URL `origin` (NULL: every dataset), except one that
 * a process is fetching now, and sets *bytes to the space given back.
 * Returns 0 or an error. */
STK_API int stk_cache_clear(const char *cache_dir, const char *origin, uint64_t *bytes,
                            stk_error *err);

/* Releases the dataset and every pointer obtained from it.  Accepts NULL.
 * A remote dataset first stops its read-ahead, and waits for a round of
 * fetches in flight (up to 64 MiB, or the remote timeout) to land. */
STK_API void stk_dataset_close(stk_dataset *ds);

STK_API uint64_t stk_dataset_num_records(const stk_dataset *ds);
STK_API size_t stk_dataset_num_fields(const stk_dataset *ds);
STK_API size_t stk_dataset_num_shards(const stk_dataset *ds);

/* The directory of the dataset (of the index file, for an in-place
 * index; the URL, for a remote dataset).  Valid until stk_dataset_close. */
STK_API const char *stk_dataset_path(const stk_dataset *ds);
/* NULL for a dataset of stoker shards; for an in-place index (stk_index_build)
 * the kind of the files it reads where they lie: "npy", "wav", "hdf5" or
 * "raw".  An index has no checksums: stk_dataset_verify checks that its
 * files are unchanged and readable. */
STK_API const char *stk_dataset_source(const stk_dataset *ds);
/* The format version of the dataset's shards: 2 when any shard is of
 * version 2 (records located by arithmetic), else 1; 0 for NULL or an
 * in-place index (whose files are the user's own). */
STK_API uint32_t stk_dataset_format_version(const stk_dataset *ds);

/* Field `i` of the schema, or NULL if i is out of range.  The struct and its
 * name are valid until stk_dataset_close. */
STK_API const stk_field *stk_dataset_field(const stk_dataset *ds, size_t i);

/* The index of the field called `name`, or -ENOENT. */
STK_API int stk_dataset_find_field(const stk_dataset *ds, const char *name);

/* The manifest's "attrs" object as compact JSON text ("{}" when none).
 * Valid until stk_dataset_close. */
STK_API const char *stk_dataset_attrs(const stk_dataset *ds);
/* The share of the dataset's file bytes in the page cache now (0..1), or -1
 * when it cannot be told (an in-place index of more files than are
 * mapped).  The loader's auto backend maps data that is at least 0.9 in. */
STK_API double stk_dataset_resident(const stk_dataset *ds);

typedef struct stk_shard_info {
    const char *file;      /* full path; valid until stk_dataset_close */
    uint64_t first_record; /* global id of the shard's first record */
    uint64_t records;
    uint64_t bytes; /* size of the shard file */
    uint64_t data_bytes; /* bytes of record data, padding included */
} stk_shard_info;

/* Describes shard `i`.  Returns 0 or -EINVAL for an index out of range. */
STK_API int stk_dataset_shard(const stk_dataset *ds, size_t i,
                              stk_shard_info *out);

/*
 * Statistics of one column of a numeric field, gathered by the writer as it
 * packed (no record is read to give them).  A column is one element of the
 * field's row: a field of rows (shape [STK_RAGGED, 4]) has 4; a field of a
 * fixed shape is one row a record, each element a column ([5] has 5, [2, 3]
 * has 6, a scalar 1).  Values are taken as double, integers included.  NaN
 * values are counted in nan_count and left out of everything else.
 *
 * The standard deviation is sqrt(m2 / (count - ddof)): ddof 0 for the
 * population's (NumPy's default), 1 for the sample's.
 */
typedef struct stk_column_stats {
    uint64_t count;     /* values that are not NaN */
    uint64_t nan_count; /* NaN values (0 for an integer field) */
    double mean;        /* NaN when count is 0 */
    double m2;          /* sum of squared deviations from the mean */
    double min, max;    /* NaN when count is 0 */
} stk_column_stats;

/* Rows wider than this many elements have no statistics (the manifest
 * would grow by some 130 bytes a column). */
#define STK_STATS_MAX_COLUMNS 1024

/*
 * The pack-time statistics of field `field`: sets *out to an array of
 * *ncolumns entries, one per column, in row-major order of the row's
 * shape.  The array is valid until stk_dataset_close; do not free it.
 * Returns 0, or:
 *   -EINVAL  field out of range, or a NULL argument;
 *   -ENOENT  none recorded for it: a bytes field, rows wider than
 *            STK_STATS_MAX_COLUMNS, a dataset packed by a version of stoker
 *            before statistics, an in-place index (stk_index_build), or a
 *            resumed pack whose journal did not hold the statistics of the
 *            shards it kept (see docs/FORMAT.md).
 * Thread-safe, like every reader of an open dataset.
 */
STK_API int stk_dataset_field_stats(const stk_dataset *ds, size_t field,
                                    const stk_column_stats **out, size_t *ncolumns);

/*
 * Where one field of one record lies, and how big it is.  `data` points into
 * a read-only mapping of the shard and stays valid until stk_dataset_close;
 * reading it may fault in pages from disk.  For a compressed field it points
 * at the compressed frame (`stored_bytes` long); `raw_bytes` is the size once
 * decoded, always rows times the row size.  NULL for a remote dataset whose
 * bytes may not have arrived (stk_dataset_read fetches them).
 */
typedef struct stk_extent {
    const void *data;
    uint64_t rows;
    uint64_t raw_bytes;
    uint64_t stored_bytes;
    stk_codec codec;
    uint32_t shard;  /* index of the shard holding the record */
    uint64_t offset; /* byte offset of the stored bytes in the shard file */
} stk_extent;

/*
 * Locates field `field` of record `record` without reading or verifying it.
 * Returns 0, or -EINVAL for a record or field out of range (the message
 * names both and the valid ranges), or -ENOMEM/-errno if the shard could not
 * be mapped.
 */
STK_API int stk_dataset_get(const stk_dataset *ds, uint64_t record,
                            size_t field, stk_extent *out, stk_error *err);

/* Flags for stk_dataset_read. */
#define STK_READ_VERIFY 1u /* check the record's checksum first */

/*
 * Copies field `field` of `record`, decoded, into `buf` (capacity `cap`
 * bytes) and sets *len to its size.  With STK_READ_VERIFY the whole record's
 * checksum is checked first.
 * Returns 0, or:
 *   -EINVAL        record or field out of range;
 *   -ENOSPC        cap is too small (*len says how much is needed);
 *   STK_ECHECKSUM  verification failed (names shard file and record);
 *   STK_ECODEC     the compressed bytes do not decode to raw_bytes;
 *   -EIO           the shard could not be read.
 */
STK_API int stk_dataset_read(const stk_dataset *ds, uint64_t record,
                             size_t field, void *buf, size_t cap, size_t *len,
                             uint32_t flags, stk_error *err);

/* Called by stk_dataset_verify for every problem found, from any of its
 * threads but never two at once. */
typedef void (*stk_problem_fn)(void *ctx, const stk_error *problem);
/* Called now and then with the bytes checked so far out of `total`, from
 * any of verify's threads but never two at once. */
typedef void (*stk_progress_fn)(void *ctx, uint64_t done, uint64_t total);

typedef struct stk_verify_options {
    int threads;              /* 0 (default): one per online CPU */
    size_t max_problems;      /* stop after this many; default 100 */
    stk_problem_fn on_problem; /* default NULL */
    stk_progress_fn on_progress; /* default NULL */
    void *ctx;
} stk_verify_options;

STK_API void stk_verify_options_init(stk_verify_options *opts);

typedef struct stk_verify_report {
    uint64_t records_checked;
    uint64_t bytes_checked;
    uint64_t problems;
} stk_verify_report;

/*
 * Reads every shard in full and checks every block checksum and every
 * record checksum.  Returns 0 when all are intact; otherwise the code of the
 * first problem found in dataset order (usually STK_ECHECKSUM) with `err`
 * naming the shard file and the record, after reporting every problem (up to
 * max_problems) through on_problem.  `report` may be NULL.
 */
STK_API int stk_dataset_verify(const stk_dataset *ds,
                               const stk_verify_options *opts,
                               stk_verify_report *report, stk_error *err);

/* ------------------------------------------------------------------------ */
/* The loader: shuffled batches at the speed of the hardware                 */
/* ------------------------------------------------------------------------ */

/*
 * A loader turns a dataset into a stream of batches for one rank of a
 * (possibly distributed) training job.
 *
 * Samples.  A sample is a whole record, or (with `window` > 0) a window of
 * `window` consecutive rows of a record whose first dimension is time, at
 * starts 0, stride, 2*stride, ... that fit in the record.  The time fields
 * are the selected fields with a ragged first dimension (or a fixed first
 * dimension of at least `window` rows); every time field of a record must
 * have the same number of rows.  Other selected fields are per-record values
 * (fixed shape) and are repeated for each window of their record.  Windows
 * are counted per record with prefix sums: memory grows with records, not
 * with samples.  Validity rules (see stk_valid) drop windows; they are
 * counted at open, one pass over each rule's field, and the windows kept
 * are numbered in the same way.
 *
 * Orders.  The epoch's order of samples is a pure function of (order, seed,
 * epoch, streams), and any position in it is computed directly, without
 * replaying those before:
 *   STK_ORDER_SEQUENTIAL  sample ids in order;
 *   STK_ORDER_RANDOM      a uniform permutation (a keyed Feistel network
 *                         with cycle walking): O(1) memory;
 *   STK_ORDER_BLOCK       blocks of consecutive samples in a permuted order,
 *                         taken `block_group` blocks at a time, the samples
 *                         of each group permuted among themselves.  The
 *                         group's bytes are read with large sequential reads
 *                         and the batches are cut from memory: `block_group`
 *                         trades I/O locality against mixing.
 *
 * Streams.  The order is made of S streams (`streams`, by default the world
 * size), interleaved one sample at a time: position p is sample p / S of
 * stream p mod S.  Stream s is the s-th of S equal, consecutive slices of
 * the one-stream order: in sequential order a slice of the dataset; in
 * block order a slice of the permuted blocks, a group cut at a stream's
 * edge being permuted on each side of it; in random order (S > 1) a slice
 * of the dataset's blocks (block_bytes each) in a permuted order, the
 * slice's samples permuted among themselves.  Every stream's samples thus
 * lie in its own blocks, so that a rank reading one stream reads (or, for a
 * remote dataset, fetches) only its share of the data, and the epoch's
 * blocks are dealt afresh to the streams every epoch.  S = 1 is the order
 * that does not depend on the world size.
 *
 * Ranks.  The order is dealt to `world_size` ranks by interleaving: rank r
 * takes positions r, r + W, r + 2W, ...; where W divides S, rank r thus
 * reads streams r, r + W, ... only.  Every rank gets the same
 * number of samples: floor(N / W), the remainder dropped; or with `pad`,
 * ceil(N / W), the missing ones taken again from the start of the order.
 * Every rank therefore yields the same number of batches.  A rank's
 * batches can be split further among several consumers (split_count):
 * consumer k takes the rank's batches k, k + n, ..., whole, so that taking
 * one batch from each consumer in turn gives the rank's stream itself.
 *
 * Resume.  The state is (seed, epoch, position, streams), position counting
 * global samples consumed by all ranks together.  Restoring it, with the
 * same or a different world size, continues the same order (the state's
 * streams) exactly; the epochs after it use the loader's own streams.
 *
 * Batches.  Field i of a batch of n samples is a dense array [n, ...], or
 * [n, window, ...] for a time field, or, for a ragged field in record mode,
 * its rows concatenated with int64 offsets [n + 1] (in rows).  Batches come
 * out in the same order, with the same bytes, whatever the thread count or
 * I/O backend.
 */
typedef struct stk_loader stk_loader;
typedef struct stk_batch stk_batch;

typedef enum stk_order {
    STK_ORDER_SEQUENTIAL = 0,
    STK_ORDER_RANDOM = 1,
    STK_ORDER_BLOCK = 2
} stk_order;

typedef enum stk_backend {
    STK_BACKEND_AUTO = 0, /* mmap when the shards are in the page cache at
                           * open or the warm-up (below) will bring them
                           * there; io_uring otherwise, the thread pool
                           * where io_uring is unavailable */
    STK_BACKEND_URING = 1, /* io_uring, one ring per worker thread */
    STK_BACKEND_POOL = 2,  /* pread(2) from the worker threads */
    STK_BACKEND_MMAP = 3   /* copies from a read-only mapping */
} stk_backend;

/*
 * Validity.  A window is a sample only if every rule holds for it.  A rule
 * tests one field over the last `last` rows of the window (all of it when
 * `last` is 0); valid_field/valid is the rule {valid_field, valid, last 1}.
 * The tests:
 */
typedef enum stk_valid {
    STK_VALID_ALL = 0,     /* every window start is valid */
    STK_VALID_MASK = 1,    /* every element of the rows tested is nonzero */
    STK_VALID_NOT_NAN = 2, /* no element of the rows tested is NaN (f16,
                            * bf16, f32, f64 fields) */
    STK_VALID_FINITE = 3,  /* no element is NaN or infinite (float fields) */
    STK_VALID_SOME = 4,    /* at least one element of the rows tested is not
                            * NaN (float fields): NeuralHydrology's rule for
                            * targets, which drops a sample only when every
                            * target of its last predict_last_n steps is NaN */
    STK_VALID_RANGE = 5,   /* each row tested (one integer element: a time
                            * field such as write's order_by column) lies in
                            * [lo, hi]: with last = 1, a period that the
                            * window's end must lie in, the rows before it
                            * read as warm-up */
    STK_VALID_STEP = 6,    /* each row tested (one integer element) but the
                            * first exceeds the row before it by exactly
                            * `lo` (0: the smallest positive difference
                            * between consecutive rows in the dataset): with
                            * last = 0, windows without gaps in time */
    STK_VALID_OUTSIDE = 7  /* each row tested (one integer element) lies
                            * outside [lo, hi]: with a RANGE over the first
                            * period's start to the last one's end, a
                            * period of several pieces (one OUTSIDE rule a
                            * gap between them) */
} stk_valid;

/* One rule of stk_loader_options.valid_rules. */
typedef struct stk_valid_rule {
    const char *field;  /* the field tested: any field whose records have as
                         * many rows as the time axis, stored uncompressed;
                         * it need not be one the loader yields */
    stk_valid test;     /* not STK_VALID_ALL */
    uint64_t last;      /* rows tested, ending at the window's last row;
                         * 0: every row of the window; more than the window:
                         * the window */
    int64_t lo, hi;     /* RANGE, OUTSIDE: the bounds, both included; STEP:
                         * lo is the step; otherwise unused */
} stk_valid_rule;

/* Returned by stk_loader_next when the epoch has no more batches. */
#define STK_END 1

typedef enum stk_on_error {
    STK_ON_ERROR_RAISE = 0, /* a damaged sample fails next() (the default) */
    STK_ON_ERROR_SKIP = 1   /* it is replaced; see stk_loader_options */
} stk_on_error;

typedef enum stk_warm_up {
    STK_WARM_UP_AUTO = 0, /* when the shards are mostly not in the page cache,
                           * the loader reads through the mapping (the mmap
                           * backend, which auto then picks) and the data
                           * fits in the memory this process may use */
    STK_WARM_UP_ON = 1,   /* whenever the data is not in the page cache */
    STK_WARM_UP_OFF = 2
} stk_warm_up;

typedef struct stk_loader_options {
    uint32_t batch_size;       /* samples per batch; default 32; >= 1 */
    const char *const *fields; /* names of the fields to load; NULL: all */
    size_t nfields;            /* entries in `fields` */
    uint64_t window;           /* rows per window; 0 (default): whole records */
    uint64_t stride;           /* rows between window starts; default 1 */
    const char *valid_field;   /* field tested by `valid`; NULL: none */
    stk_valid valid;           /* default STK_VALID_ALL */
    stk_order order;           /* default STK_ORDER_BLOCK */
    uint64_t seed;             /* default 0 */
    uint64_t epoch;            /* the first epoch; default 0 */
    uint64_t block_bytes;      /* block order: bytes read per block; default 4 MiB */
    uint64_t block_samples;    /* block order: samples per block; 0 (default):
                                * derived from block_bytes */
    uint32_t block_group;      /* block order: blocks per group (K); default 16 */
    uint32_t rank;             /* default 0 */
    uint32_t world_size;       /* default 1 */
    int pad;                   /* 1: pad ranks by wrapping around; default 0:
                                * drop the remainder */
    uint32_t split_index;      /* a split of the rank's batches among */
    uint32_t split_count;      /* split_count consumers (worker processes):
                                * this loader yields batches split_index,
                                * split_index + split_count, ... of the
                                * rank's stream; default 0 of 1 (all) */
    int drop_last;             /* 1: drop a last, partial batch; default 0 */
    stk_backend backend;       /* default STK_BACKEND_AUTO */
    int direct;                /* 1: O_DIRECT reads (cold streaming); default 0.
                                * Block order over data that does not fit in
                                * memory reads with O_DIRECT anyway, where the
                                * file system allows it */
    int threads;               /* worker threads, at most 64; 0 (default): one per
                                * CPU, at most 8 (at most 64 where media fields
                                * are decoded: decoding wants every core).
                                * Fewer than the CPUs leave one to the consumer,
                                * which then spins briefly for a batch being
                                * filled, where batches fill in under 200 us
                                * (STOKER_SPIN=0 in the environment: never) */
    uint32_t prefetch;         /* batch buffers in the ring; 0 (default): from
                                * the memory budget, 2..8 */
    uint32_t queue_depth;      /* io_uring entries per worker; default 64 */
    uint64_t memory_budget;    /* bytes for batch buffers, group caches and
                                * staging; default 1 GiB.  Never more than
                                * half of the memory the machine and the
                                * process's cgroup have room for */
    int verify;                /* 1 (default): check what a batch reads.
                                * Whole records of every field, stored plain,
                                * with on_error RAISE: each record against
                                * its own checksum, right after it lands in
                                * the batch (while still in the cache), every
                                * time it is delivered.  Otherwise every
                                * checksum block of shard data a batch uses,
                                * the first time it is used in each epoch.
                                * A mismatch is STK_ECHECKSUM naming shard
                                * and record.  0: no checks */
    stk_on_error on_error;     /* what a sample that fails its checksum gets.
                                * SKIP (needs verify): it is replaced by the
                                * next sample of the epoch's order that passes
                                * (in block order, the next of its group), so
                                * every rank still yields the same batches; a
                                * replaced sample may then appear twice in the
                                * epoch.  Counted in stats.skipped; I/O errors
                                * are never skipped.  Default RAISE. */
    uint64_t max_skips;        /* SKIP: this many failures in a row raise;
                                * default 100 */
    uint32_t max_open_files;   /* descriptors the loader keeps open: with more
                                * files than this (an in-place index of many
                                * small files) they are opened on demand and
                                * cached; 0 (default): from the process's
                                * limit, which is raised where allowed */
    stk_warm_up warm_up;       /* bring the dataset into the page cache with
                                * large sequential reads (a thread of its
                                * own, in the order the first epoch first
                                * needs the bytes) while that epoch is served
                                * from it, instead of one small read per
                                * sample.  Memory that fits means: at most
                                * 3/4 of what the page cache can still take
                                * (MemAvailable, and any cgroup v2
                                * memory.max above the process).  Never with
                                * `direct`, nor for an in-place index whose
                                * files are not mapped.  Default AUTO */
    int device;                /* where batches are delivered: -1 (default)
                                * host memory; N >= 0 CUDA device N (see "Batches on
                                * a GPU" below) */
    uint32_t device_buffers;   /* device >= 0: batch buffers on the device;
                                * default 3, >= 2 */
    uint64_t device_resident_budget; /* device >= 0: bytes of GPU memory a
                                * device-resident copy of the selected fields
                                * may take; 0 (default): never resident */
    uint32_t streams;          /* the streams an epoch's order is made of (see
                                * "Ranks" above); 0 (default): world_size,
                                * so that each rank reads a part of the data
                                * of its own; 1: one stream, an order that
                                * does not depend on the world size */
    const char *const *names;  /* a name for each field the loader yields,
                                * in its order, that its batches use instead
                                * of the field's own (a NULL entry keeps it);
                                * NULL (default): their own names */
    const stk_valid_rule *valid_rules; /* further validity rules, all of which
                                * a window must pass (see stk_valid), with
                                * valid_field's if set; read at open, not
                                * kept.  Default NULL */
    size_t nvalid_rules;       /* entries in valid_rules; at most 64 */
    const struct stk_decode *decode; /* media fields the workers decode into
                                * the batch (see "Media" below): at most one
                                * entry a field, each a selected field of the
                                * media type it names; read at open, not
                                * kept.  Default NULL */
    size_t ndecode;            /* entries in decode */
} stk_loader_options;

/* Fills `opts` with the defaults above. */
STK_API void stk_loader_options_init(stk_loader_options *opts);

/*
 * Opens a loader over `ds`, which must stay open until the loader is closed.
 * The loader starts at (opts->seed, opts->epoch, position 0) and begins
 * reading at once, in the background.
 * Returns 0 and sets *out, or:
 *   -EINVAL   an option that makes no sense (batch of 0, window longer than
 *             every record, rank >= world_size, an unknown field, a
 *             compressed time field, a budget below what one batch needs...);
 *             the message names the option and says why;
 *   STK_ESCHEMA  time fields whose row counts differ in some record (named);
 *   -ENOMEM, -EMFILE, or errors from opening the shard files;
 *   with a device: STK_ENOGPU (no plugin, driver or device: the message
 *             says which), -EINVAL (no such device), STK_ECUDA.
 * Thread-safety: a loader is driven by one consumer thread at a time; its
 * own threads are internal.  Only stk_loader_release(_after) may be called
 * from another thread at the same time as the consumer's calls (a batch
 * handed to another thread and released there).  stk_loader_close and
 * stk_loader_stop race with every other call: a caller that closes from
 * another thread (a watchdog, a signal handler) must first have the
 * consumer out of its call.  Waiting in stk_loader_next_timeout slices of,
 * say, 100 ms and checking a flag of its own between them is how the
 * Python package does it (python/stoker/_ext/loader.c, enter_c).
 */
STK_API int stk_loader_open(stk_dataset *ds, const stk_loader_options *opts,
                            stk_loader **out, stk_error *err);

/* Stops the threads (waiting for reads in flight to land), frees every
 * buffer and descriptor.  Safe at any moment.  Accepts NULL. */
STK_API void stk_loader_close(stk_loader *ld);

/* For a caller that must close while it still holds batches: stops the
 * threads and gives the memory of every batch buffer it does not hold back
 * to the system; the batches held stay valid (release them, then call
 * stk_loader_close).  No batch can be taken after it.  With a device, the
 * copies in flight finish and device batches held stay valid.  Accepts
 * NULL; a second call does nothing. */
STK_API void stk_loader_stop(stk_loader *ld);

/*
 * Waits for the next batch of this rank and sets *out.  Returns 0, STK_END
 * when the epoch has no more batches (and again on every call until
 * stk_loader_set_epoch or stk_loader_restore), or a negative code for an
 * error met by any of the loader's threads: the message names the shard file
 * and the record.  After an error every call returns it again; close the
 * loader.  Returns -EBUSY if the consumer holds every batch buffer.
 * The batch stays valid, and its memory untouched, until
 * stk_loader_release(); hold several at once if needed.  With a device,
 * the batch's fields are in device memory (see "Batches on a GPU").
 */
STK_API int stk_loader_next(stk_loader *ld, stk_batch **out, stk_error *err);

/* As stk_loader_next, but gives up after `timeout_ms` milliseconds (a
 * negative value waits forever) with -ETIMEDOUT, changing nothing; call it
 * again to keep waiting.  Lets a caller check for signals while it waits. */
STK_API int stk_loader_next_timeout(stk_loader *ld, stk_batch **out, int64_t timeout_ms,
                                    stk_error *err);

/* Adds one batch buffer to the ring, beyond the memory budget: for a
 * consumer that keeps batches (next returned -EBUSY) and wants to go on.
 * At most 1024 buffers can be added.  Returns 0, -ENOSPC or -ENOMEM;
 * -ENOTSUP with a device (device buffers are fixed at open). */
STK_API int stk_loader_add_buffer(stk_loader *ld, stk_error *err);

/* Gives a batch's buffer back for reuse.  Accepts NULL.  The batch and every
 * pointer into it are invalid afterwards.  A device batch must no longer be
 * read by any GPU work (use stk_loader_release_after otherwise). */
STK_API void stk_loader_release(stk_loader *ld, stk_batch *b);
/* As stk_loader_release, for a batch that GPU work queued on CUDA stream
 * `stream` (a cudaStream_t) may still read: its device buffer is refilled
 * only after that work is done; the host does not wait.  A host batch is
 * simply released. */
STK_API void stk_loader_release_after(stk_loader *ld, stk_batch *b, uintptr_t stream);

/* Puts back the batch the last stk_loader_next gave, undelivered: the next
 * call gives it again and the saved state counts it as not taken (a caller
 * interrupted before it could use the batch loses nothing).  -EINVAL when
 * `b` is not that batch (another was taken since, or the epoch moved), or
 * with a device. */
STK_API int stk_loader_unget(stk_loader *ld, stk_batch *b);

/* Samples in the batch (batch_size, or fewer for a last partial batch). */
STK_API uint32_t stk_batch_size(const stk_batch *b);
/* Where the batch's fields are: -1 host memory, else the CUDA device. */
STK_API int stk_batch_device(const stk_batch *b);
/* Makes CUDA stream `stream` (a cudaStream_t; 1 and 2 are the legacy and
 * per-thread default streams) wait until a device batch is on the device;
 * the host does not wait.  Call it before queueing work that reads the
 * batch.  Returns 0 (at once for a host batch) or STK_ECUDA. */
STK_API int stk_batch_wait(const stk_batch *b, uintptr_t stream, stk_error *err);
/* The batch's number within this rank's stream since the epoch began or the
 * state was last restored, from 0. */
STK_API uint64_t stk_batch_index(const stk_batch *b);
/* The global sample ids of the batch's samples, in batch order: record ids,
 * or window ids (numbered record by record).  Valid until release. */
STK_API const uint64_t *stk_batch_samples(const stk_batch *b);

typedef struct stk_batch_field {
    const char *name;  /* valid while the loader is open */
    stk_dtype dtype;
    int ndim;
    int64_t shape[STK_MAX_DIMS + 2]; /* of the batch array (values, if ragged) */
    void *data;        /* valid until release; 64-byte aligned */
    uint64_t bytes;    /* size of data */
    const int64_t *offsets; /* ragged: [n + 1] offsets in rows; else NULL */
} stk_batch_field;
/* `data` and `offsets` are in the memory stk_batch_device names; the shape,
 * sizes and the batch's sample ids are always on the host. */

/* The fields a batch holds (its loader's; a mixture of homogeneous batches
 * hands out each source's batches, with that source's fields). */
STK_API size_t stk_batch_num_fields(const stk_batch *b);
/* Describes field `i` (in the loader's field order).  Returns 0 or -EINVAL. */
STK_API int stk_batch_field_get(const stk_batch *b, size_t i, stk_batch_field *out);

/* Fields the loader yields, and the index of one by name (or -ENOENT). */
STK_API size_t stk_loader_num_fields(const stk_loader *ld);
STK_API int stk_loader_find_field(const stk_loader *ld, const char *name);
/* The schema entry of the loader's field `i`, or NULL.  Valid until the
 * dataset is closed. */
STK_API const stk_field *stk_loader_field(const stk_loader *ld, size_t i);

/* Samples in the whole epoch (all ranks), samples and batches of this rank. */
STK_API uint64_t stk_loader_epoch_samples(const stk_loader *ld);
STK_API uint64_t stk_loader_rank_samples(const stk_loader *ld);
STK_API uint64_t stk_loader_rank_batches(const stk_loader *ld);

/*
 * The three counts above for a loader that stk_loader_open(ds, opts) would
 * open, without opening one: no thread starts, no buffer is allocated and
 * no shard file is opened (a validity rule reads its field, as open does).
 * Each out-pointer may be NULL.  The counts do not depend on the epoch.
 * Returns 0, or what stk_loader_open returns for options that it refuses
 * before reading (-EINVAL, STK_ESCHEMA, -ENOMEM); what only the reading
 * decides (the memory budget, io_uring being there) is not checked.
 * Thread-safety: any number of calls at once on one dataset.
 */
STK_API int stk_loader_count(stk_dataset *ds, const stk_loader_options *opts,
                             uint64_t *epoch_samples, uint64_t *rank_samples,
                             uint64_t *rank_batches, stk_error *err);
/* The backend actually in use (never STK_BACKEND_AUTO). */
STK_API stk_backend stk_loader_backend(const stk_loader *ld);
/* The loader's order, and the bytes one of its samples reads on average
 * (a window of every time field plus the per-record fields, or a record). */
STK_API stk_order stk_loader_order(const stk_loader *ld);
STK_API uint64_t stk_loader_sample_bytes(const stk_loader *ld);
STK_API const char *stk_backend_name(stk_backend b);

/* The names of option values, as the command line and the Python package
 * take them ("sequential", "random", "block"; "auto", "uring", "pool",
 * "mmap"; "all", "mask", "notnan", "finite", "some", "range", "step",
 * "outside";
 * "auto", "on", "off"; "raise", "skip"),
 * and back.  A parse returns the value, or -EINVAL for a name it does not
 * know (NULL included); a name function returns "unknown" for a value out
 * of range.  One table per option, here, so that every front end agrees. */
STK_API int stk_backend_parse(const char *name);
STK_API const char *stk_order_name(stk_order o);
STK_API int stk_order_parse(const char *name);
STK_API const char *stk_valid_name(stk_valid v);
STK_API int stk_valid_parse(const char *name);
STK_API const char *stk_warm_up_name(stk_warm_up w);
STK_API int stk_warm_up_parse(const char *name);
STK_API const char *stk_on_error_name(stk_on_error e);
STK_API int stk_on_error_parse(const char *name);

/*
 * Starts epoch `epoch` from its beginning.  Batches the consumer still holds
 * stay valid; batches read ahead for the old epoch are discarded.
 * Returns 0, or the loader's error if it has failed.
 */
STK_API int stk_loader_set_epoch(stk_loader *ld, uint64_t epoch, stk_error *err);

/*
 * The resume state.  `position` counts global samples consumed by all ranks
 * (those of the batches returned by next so far, times the world size).
 * `fingerprint` pins what the order depends on (dataset, fields, window,
 * validity rule, order and block parameters); restoring into a loader whose
 * fingerprint differs fails with -EINVAL.  The batch size is not part of it:
 * positions count samples, so a run may resume with another batch size.
 * `streams` is the epoch's (see "Streams"): the rest of the epoch keeps it
 * whatever the new world size, and the next epoch takes the loader's own.
 */
typedef struct stk_loader_state {
    uint64_t seed;
    uint64_t epoch;
    uint64_t position;
    uint64_t fingerprint;
    uint64_t streams; /* the streams of the epoch's order; 0 reads as 1 */
} stk_loader_state;

STK_API void stk_loader_save(const stk_loader *ld, stk_loader_state *out);

/* Continues from `st`: the next batch starts at st->position of epoch
 * st->epoch (an order of st->streams streams), dealt over this loader's
 * world size.  The loader's seed becomes
 * st->seed.  Returns 0, -EINVAL (fingerprint or position mismatch), or the
 * loader's error. */
STK_API int stk_loader_restore(stk_loader *ld, const stk_loader_state *st,
                               stk_error *err);

/*
 * A remote dataset: fetches into the cache, now, every byte this loader's
 * batches will read from its position to the end of the epoch (after
 * stk_loader_restore, the rest of the restored epoch), many ranges in
 * flight, so that the run's first batches wait for nothing: what a resumed
 * or restarted rank does before its first batch, and what `stoker cache
 * warm --epoch` does for a node's ranks.  *bytes (may be NULL) gets the
 * bytes asked for (what was already cached is not fetched again).  A local
 * dataset: 0 at once.  -EINVAL under a cache budget smaller than the
 * dataset (the read-ahead works within it instead); else 0 or a fetch
 * error.
 */
STK_API int stk_loader_fetch_epoch(stk_loader *ld, uint64_t *bytes, stk_error *err);

/* Counters of one pipeline stage. */
typedef struct stk_stage_stats {
    uint64_t count;   /* operations: samples planned, reads, batches */
    uint64_t bytes;   /* bytes moved by the stage */
    uint64_t busy_ns; /* time spent in the stage, summed over threads */
} stk_stage_stats;

typedef struct stk_loader_stats {
    stk_stage_stats plan;     /* turning samples into reads */
    stk_stage_stats io;       /* reads (or copies from the mapping) */
    stk_stage_stats assemble; /* batches completed: decode, copy, offsets */
    stk_stage_stats wait;     /* consumer: calls to next and time blocked */
    stk_stage_stats verify;   /* checksums checked (blocks, or whole records
                               * checked as they land), their bytes, time */
    uint64_t batches;         /* batches handed to the consumer */
    uint64_t samples;
    uint64_t elapsed_ns;      /* since open (or the last reset) */
    uint64_t ready_sum;       /* sum over next() calls of batches ready */
    uint32_t ring_slots;      /* batch buffers in the ring */
    uint32_t threads;
    uint64_t groups_loaded;   /* block order: groups read */
    uint64_t max_inflight;    /* most reads in flight at once */
    uint64_t skipped;         /* on_error = skip: samples replaced */
    stk_stage_stats warm_up;  /* pieces the warm-up brought into the page
                               * cache, their bytes, its time (its thread's
                               * own, beside the workers') */
    uint64_t warm_up_bytes;   /* bytes the warm-up set out to bring in
                               * (0: no warm-up) */
    int warm_up_done;         /* 1: the warm-up has finished (or none ran) */
    stk_stage_stats decode;   /* media fields (stk_decode): samples decoded,
                               * their encoded bytes, the time (a part of
                               * assemble's) */
} stk_loader_stats;

/* Copies the counters.  Safe at any time from the consumer thread. */
STK_API void stk_loader_stats_get(const stk_loader *ld, stk_loader_stats *out);
/* Samples replaced so far under on_error = skip, and in *out (if not NULL)
 * the reason for the last replacement (file, shard and record). */
STK_API uint64_t stk_loader_last_skip(stk_loader *ld, stk_error *out);

/* Zeroes the counters and restarts elapsed time. */
STK_API void stk_loader_stats_reset(stk_loader *ld);

/*
 * Tracing: a timeline of what each of the loader's threads does, written as
 * a Chrome trace (the JSON Trace Event Format) that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open.  Each worker thread shows its
 * batches ("batch", with the batch number and sample count) and, nested
 * inside, "plan" (order to records to reads), "verify" (checksums of blocks
 * first used this epoch), "read" (through the I/O engine, with the read
 * count and bytes) and "assemble" (copies, decompression, conversions); in
 * block order also "group load" and "group wait".  The consumer thread
 * shows each call of next() ("next": the time it waited) and the spans the
 * caller adds with stk_loader_trace_span (a training step, say).
 *
 * stk_loader_trace_start starts recording (again: what was recorded is
 * discarded), keeping at most `max_spans` spans per thread, the rest
 * counted as dropped (0: 65536, about 4 MiB per thread).  The first call
 * allocates the buffers and fixes their size for the loader's life.
 * Returns 0 or -ENOMEM.  Recording costs a clock read per span; while it is
 * off, nothing but a flag test.
 * stk_loader_trace_stop stops recording; what was recorded is kept.
 * stk_loader_trace_span adds a span [t0_ns, t1_ns) named `name` (at most 27
 * bytes kept) to the consumer's thread, times from stk_now_ns(); returns 0
 * (also when not recording) or -EINVAL.
 * stk_loader_trace_write writes what was recorded since the last start to
 * `path` (through a temporary file and rename); recording goes on.  Times
 * in the file count from the first span; the file's "otherData" gives that
 * origin on stk_now_ns()'s clock and the number of dropped spans.  A
 * batch's span is recorded when the batch is done, so the stages of one
 * still being filled at the time of writing are left out.  Returns
 * 0, -EINVAL (nothing recorded yet) or the errno of the failed write.
 * Thread-safety: call these from the consumer thread.
 */
STK_API int stk_loader_trace_start(stk_loader *ld, uint32_t max_spans, stk_error *err);
STK_API void stk_loader_trace_stop(stk_loader *ld);
STK_API int stk_loader_trace_span(stk_loader *ld, const char *name, uint64_t t0_ns,
                                  uint64_t t1_ns);
STK_API int stk_loader_trace_write(stk_loader *ld, const char *path, stk_error *err);
/* The clock of stats and traces: CLOCK_MONOTONIC in nanoseconds (the clock
 * of Python's time.monotonic_ns on Linux). */
STK_API uint64_t stk_now_ns(void);

/*
 * The series: the consumer's counters sampled over a run, for pictures of
 * it (stk_report_write_html draws throughput, the ring's fill and the
 * consumer's waits over time from it).  Every field counts from the start
 * of the series, so the rate over any stretch is the difference of two
 * points over the difference of their times, and points can be dropped
 * without losing any of the total.
 */
typedef struct stk_series_point {
    uint64_t t_ns;      /* since the series began */
    uint64_t batches;   /* batches handed to the consumer */
    uint64_t samples;
    uint64_t bytes;     /* their batch data (the fields' bytes, ragged
                         * offsets not counted, as stk_batch_field's) */
    uint64_t wait_ns;   /* time the consumer spent in next() */
    uint64_t calls;     /* calls of next() that looked at the ring */
    uint64_t ready_sum; /* sum over those calls of the batches ready then
                         * (over calls and ring slots: the ring's fill) */
} stk_series_point;

/*
 * stk_loader_series_start begins a series (again: the points so far are
 * discarded), allocating room for `max_points` points (0: 1024; at least 2).
 * From then on, stk_loader_next (and its _timeout form) adds a point when a
 * batch is taken at least `every_us` microseconds (0: 250) after the last
 * point.  When the room is full, every other point is dropped and the
 * spacing doubles, so a run of any length is covered by at most
 * `max_points` points, evenly.  stk_loader_stats_reset begins the series
 * again at the reset (start-up left out as the stats leave it out).
 * Returns 0, -EINVAL (NULL loader) or -ENOMEM.  Recording costs two clock
 * reads a batch; without a series, nothing but a pointer test.
 * stk_loader_series adds a last point for the counters now (when a batch
 * was taken since the last point) and sets *points to the series: valid
 * until the next call of these functions, a stats reset or the loader's
 * close; do not free.  Returns the number of points (0 without a series).
 * stk_loader_series_stop ends the series and frees its points: batches are
 * no longer timed for it, and stk_loader_series gives 0.  NULL is a no-op.
 * Thread-safety: call these from the consumer thread.
 */
STK_API int stk_loader_series_start(stk_loader *ld, uint32_t every_us, uint32_t max_points,
                                    stk_error *err);
STK_API size_t stk_loader_series(stk_loader *ld, const stk_series_point **points);
STK_API void stk_loader_series_stop(stk_loader *ld);

/*
 * Diagnosis: what `stoker doctor` and stoker.profile report.  From a run's
 * stats (reset after the first batch, so that start-up is left out), the
 * batch bytes the consumer received and the run's length:
 *   - each stage's busy time as a share of the workers' time (threads x
 *     seconds), and the idle rest;
 *   - the stall: the share of the run the consumer spent waiting in next();
 *   - the bytes delivered per second against a measured limit;
 *   - with a training step in the run (with_step), a verdict: input-bound
 *     when the stall exceeds 10% (the accelerator would wait that long),
 *     compute-bound under 2%, balanced between; without one, the verdict is
 *     STK_VERDICT_UNKNOWN ("loader alone");
 *   - the next thing to try, from the verdict and the stage that dominates.
 */
typedef enum stk_verdict {
    STK_VERDICT_UNKNOWN = 0,
    STK_VERDICT_INPUT_BOUND = 1,
    STK_VERDICT_BALANCED = 2,
    STK_VERDICT_COMPUTE_BOUND = 3
} stk_verdict;

typedef struct stk_diagnosis {
    double seconds;
    double batches_per_s, samples_per_s, bytes_per_s;
    double share_plan, share_io, share_assemble, share_verify, share_idle;
    double stall;             /* 0..1 */
    double limit_bytes_per_s; /* as given */
    double of_limit;          /* bytes_per_s / limit_bytes_per_s (0: no limit) */
    stk_verdict verdict;
    const char *verdict_name; /* "input-bound", "balanced", "compute-bound" or
                               * "loader alone"; static */
    char next[256];           /* the next thing to try, a sentence */
} stk_diagnosis;

STK_API void stk_diagnose(const stk_loader_stats *st, stk_backend backend, uint64_t bytes,
                          double seconds, double limit_bytes_per_s, int with_step,
                          stk_diagnosis *out);
STK_API const char *stk_verdict_name(stk_verdict v);

/* The limit a loader's delivery is measured against, chosen one way for
 * every front end (`stoker doctor`, stoker.profile): memcpy from one
 * thread when at least 90% of the dataset is in the page cache, else the
 * device's sequential O_DIRECT rate under the dataset when that is lower
 * (a measurement that fails, on a file system without O_DIRECT say, leaves
 * memcpy).  `what` is a static string saying which it is; `resident` the
 * share of the dataset in the page cache (-1 when it cannot be told). */
typedef struct stk_limit {
    double bytes_per_s;
    const char *what;
    double resident;
} stk_limit;

STK_API void stk_measure_limit(const stk_dataset *ds, stk_limit *out);

/* Single-thread memcpy bandwidth in bytes/s (best of 5 copies of 64 MiB):
 * the limit for data already in memory. */
STK_API double stk_measure_memcpy(void);
/* The device's sequential read bandwidth under the dataset's files, in
 * bytes/s: O_DIRECT reads of 4 MiB, 8 in flight (io_uring; one at a time
 * where it is unavailable), through the files in order for at most
 * `max_seconds`; the limit for data not in memory.  Returns 0, or the error
 * of opening a file (a file system without O_DIRECT gives -EINVAL). */
STK_API int stk_measure_read(const stk_dataset *ds, double max_seconds, double *bytes_per_s,
                             stk_error *err);
/* The device's random reads of `size` bytes (each widened to 4 KiB
 * boundaries, as O_DIRECT needs) at uniformly random places of the shard
 * data, 32 in flight, for at most `max_seconds`: *reads_per_s, and
 * *bytes_per_s counting `size` bytes per read (the useful bytes).  Returns
 * as stk_measure_read, or -ENOSYS without io_uring. */
STK_API int stk_measure_random_read(const stk_dataset *ds, uint64_t size, double max_seconds,
                                    double *reads_per_s, double *bytes_per_s, stk_error *err);

/*
 * Whether another order would read this dataset several times faster than
 * the loader's own, measured on the device (a second or two).  It applies
 * to a random order over data the loader reads from the device one sample
 * at a time: mostly outside the page cache and without a warm-up (a dataset
 * larger than memory).  Block order reads the same bytes in large
 * sequential requests; *speedup is the sequential rate over the random
 * rate at the sample size (0 when the advice does not apply).  `text`
 * says so in a sentence when the speedup is at least 2, and is empty
 * otherwise.  Returns 0, or the error of a measurement.
 */
typedef struct stk_order_advice {
    double speedup;
    double sequential_bytes_per_s; /* large O_DIRECT reads */
    double random_bytes_per_s;     /* reads of one sample's bytes */
    uint64_t sample_bytes;
    char text[320];
} stk_order_advice;

STK_API int stk_advise_order(const stk_dataset *ds, const stk_loader *ld,
                             stk_order_advice *out, stk_error *err);

/*
 * The report as a page: stk_report_write_html writes one self-contained
 * HTML file (inline CSS and SVG, no script, nothing fetched from anywhere)
 * that shows the verdict and the next thing to try, the throughput over
 * each run against the measured limit, each stage's time per batch, the
 * ring's fill over time and, for a run with a training step, the
 * consumer's waits over time.  `stoker doctor --html` and stoker.profile's
 * Report.to_html both write it, so the two pages are the same.  The
 * verdict shown is that of the last run (the run with the step, when
 * there is one).  Every pointer is borrowed for the call.  The file is
 * written through a temporary file and renamed.  Returns 0, -EINVAL (no
 * run, or a NULL argument) or the errno of the failed write, with a
 * message naming the file.
 */
typedef struct stk_report_run {
    const char *name;          /* a heading: "loader alone", "with the step" */
    stk_diagnosis diagnosis;   /* of the run (stk_diagnose) */
    uint32_t threads;          /* the loader's worker threads */
    uint32_t ring_slots;       /* its batch buffers */
    double step_seconds;       /* the step's mean time (0: no step) */
    const stk_series_point *series; /* the run's series (may be NULL) */
    size_t npoints;
} stk_report_run;

typedef struct stk_report {
    const char *title;        /* what was profiled, a path say (may be NULL) */
    const char *backend;      /* stk_backend_name */
    const char *limit_what;   /* what the limit is (stk_limit.what) */
    double resident;          /* share of the data in the page cache (-1:
                               * unknown) */
    const stk_report_run *runs; /* the loader alone, and/or with a step */
    size_t nruns;
    const char *hint;         /* further advice, a sentence (NULL: none) */
} stk_report;

STK_API int stk_report_write_html(const stk_report *r, const char *path, stk_error *err);

/* ------------------------------------------------------------------------ */
/* Media: images and audio decoded by the loader                            */
/* ------------------------------------------------------------------------ */

/*
 * A media field holds encoded files as they came, one a record, never
 * re-encoded: a ragged bytes field whose stk_field.type is "image" (JPEG,
 * PNG or WebP) or "audio" (FLAC, MP3, Ogg Vorbis or Ogg Opus; WAV is read
 * as numbers, see stk_index).  Each record's format is told by its first
 * bytes, so one field may mix formats.  Loaded without a stk_decode for it,
 * such a field is delivered as its bytes, as any bytes field.
 *
 * With a stk_decode naming it (stk_loader_options.decode), the loader's
 * worker threads decode each sample into its place in the batch, which then
 * holds a fixed shape:
 *   image: u8 [height, width, 3] (RGB), or [3, height, width] with `chw`;
 *   audio: f32 [samples, channels].
 * Every random choice (an image's crop box and flip, an audio window's
 * start) is a function of (seed, epoch, record) alone (stk_decode_key), so
 * batches are the same with any number of threads and a restored loader
 * delivers the same pixels and samples.  The rule each choice follows is in
 * docs/MEDIA.md, so that it can be computed elsewhere.
 *
 * Images.  The crop box is chosen in the image's own pixels:
 *   STK_CROP_NONE: the whole image;
 *   STK_CROP_CENTER: the largest box with the output's aspect ratio that
 *     fits, scaled by `center_fraction` (default 0.875: 224 of 256) about
 *     the centre;
 *   STK_CROP_RANDOM_RESIZED: a box of a random share of the area (`scale`)
 *     and aspect ratio (`ratio`, drawn uniformly in log), up to 10 tries,
 *     else the whole image with its ratio clamped to `ratio` (as
 *     torchvision's RandomResizedCrop).
 * The box is then resized to height x width with a triangle (bilinear)
 * filter widened when shrinking, so that it averages rather than skips
 * pixels (antialiased, like Pillow's BILINEAR).  A JPEG is decoded only as
 * far as the box needs: at the smallest DCT scale (1/8, 2/8, 4/8, 8/8) whose
 * image of the box still covers the output, only the rows of the box, and only the
 * columns of its iMCUs.  A box of exactly the output's size is copied
 * without filtering: STK_CROP_NONE on an image of the output's size gives
 * the decoder's own pixels.  Grayscale becomes RGB; CMYK is converted as
 * Pillow converts it; an alpha channel is dropped.
 *
 * Audio.  A clip is decoded to float32 in [-1, 1] (integer samples divided
 * by 2^(bits - 1)), its channels averaged when `channels` is 1, resampled
 * to `sample_rate` when it has another one (libsoxr, high quality).  The
 * sample is a window of `samples` frames: at frame 0, or with
 * `random_offset` at a frame drawn uniformly among those where a whole
 * window fits, decoded from the decoder's nearest seek point, not from the
 * start of the clip.  A clip shorter than the window is padded with zeros.
 *
 * A record that does not decode (truncated, a bad CRC, a format the type
 * does not allow) fails its batch with STK_EMEDIA, naming the shard file,
 * the record and the field; the source file where the dataset is an
 * in-place index.  Decoders only ever read the record's bytes.
 */
typedef enum stk_media {
    STK_MEDIA_IMAGE = 1,
    STK_MEDIA_AUDIO = 2
} stk_media;

typedef enum stk_crop {
    STK_CROP_NONE = 0,
    STK_CROP_CENTER = 1,
    STK_CROP_RANDOM_RESIZED = 2
} stk_crop;

typedef struct stk_decode {
    const char *field;      /* the field it decodes (by its dataset name) */
    stk_media media;        /* what the field holds; must match its type */
    /* Images. */
    uint32_t height, width; /* output size; both >= 1 */
    stk_crop crop;          /* default STK_CROP_RANDOM_RESIZED */
    double scale[2];        /* random-resized: share of the area; default
                             * 0.08 .. 1 */
    double ratio[2];        /* random-resized: width / height; default
                             * 3/4 .. 4/3 */
    double center_fraction; /* center: default 0.875 */
    int flip;               /* 1: flip left-right with probability 1/2 */
    int chw;                /* 1: [3, H, W]; 0 (default): [H, W, 3] */
    /* Audio. */
    uint64_t samples;       /* frames a sample holds; >= 1 */
    uint32_t sample_rate;   /* 0 (default): as stored */
    uint32_t channels;      /* 1 (default): mono (the channels' mean); N:
                             * clips must have exactly N channels */
    int random_offset;      /* 1: a random window of each clip; 0: its start */
} stk_decode;

/* Fills `d` with the defaults above for `media` (field NULL, sizes 0). */
STK_API void stk_decode_init(stk_decode *d, stk_media media);

/* What a stk_decode's samples are: dtype, ndim and shape (without the batch
 * dimension).  Returns 0, or -EINVAL naming what is wrong with `d` (a size
 * of 0, a range out of order, an unknown crop...). */
STK_API int stk_decode_shape(const stk_decode *d, stk_dtype *dtype, int *ndim,
                             int64_t shape[STK_MAX_DIMS], stk_error *err);

/* The key of a sample's random choices: a mix of seed, epoch and record. */
STK_API uint64_t stk_decode_key(uint64_t seed, uint64_t epoch, uint64_t record);

/* What one encoded file is, from its header: format ("jpeg", "png", "webp",
 * "flac", "mp3", "vorbis", "opus"), image size, or audio rate, channels and
 * frames (0 where the header does not say). */
typedef struct stk_media_info {
    stk_media media;
    char format[8];
    uint32_t width, height;         /* images */
    uint32_t sample_rate, channels; /* audio */
    uint64_t frames;
} stk_media_info;

/* Reads `data`'s header.  Returns 0, STK_EMEDIA (not a format stoker
 * decodes, or a damaged header: the message says which) or
 * STK_EUNSUPPORTED (a format this build was made without). */
STK_API int stk_media_probe(const void *data, size_t len, stk_media_info *out, stk_error *err);

/* Decodes one encoded file as a loader would for the sample of `key`
 * (stk_decode_key) into `out`, `cap` bytes (at least the shape's).  For an
 * image, `box` (may be NULL) gets the crop box chosen, x, y, width, height
 * in the image's pixels, and `flipped` whether it was flipped.  Returns 0,
 * -EINVAL (bad `d`, `cap` too small), STK_EMEDIA, STK_EUNSUPPORTED or
 * -ENOMEM.  Thread-safe. */
STK_API int stk_decode_one(const stk_decode *d, const void *data, size_t len, uint64_t key,
                           void *out, size_t cap, uint32_t box[4], int *flipped,
                           stk_error *err);

/* The crop box and flip a sample of an image of width x height gets
 * (what stk_decode_one chooses, without decoding).  Returns 0 or -EINVAL. */
STK_API int stk_decode_box(const stk_decode *d, uint32_t width, uint32_t height, uint64_t key,
                           uint32_t box[4], int *flipped, stk_error *err);

/* Which decoders this build has: a comma-separated list of the formats
 * above.  Static storage. */
STK_API const char *stk_media_formats(void);

/* ------------------------------------------------------------------------ */
/* Batches on a GPU                                                         */
/* ------------------------------------------------------------------------ */

/*
 * Batches on an NVIDIA GPU.  A loader opened with `device` >= 0 delivers
 * batches whose fields are in that device's memory; everything else about
 * it (next, release, epochs, save and restore, stats, tracing) is the same
 * calls.  stoker's CUDA code lives in a plugin, libstoker_cuda.so, built
 * when the CUDA toolkit is found at build time and loaded when a GPU
 * feature is first used; it needs the NVIDIA driver (libcuda.so.1) at run
 * time and nothing else.  Without plugin, driver or device, opening such a
 * loader fails with STK_ENOGPU and a message saying which is missing; the
 * rest of the library is unaffected.  The plugin is looked for at
 * $STOKER_CUDA_PLUGIN, then beside the library or program that holds
 * libstoker, then on the loader's search path.
 *
 * The host batch buffers are page-locked.  A thread of the loader takes
 * each finished batch and copies it, on stoker's own CUDA stream, into the
 * next free buffer of a ring of `device_buffers` device buffers, recording
 * an event per batch; the host buffer is reused as soon as the copy is
 * done.  The consumer takes device batches in order; before its stream
 * touches one it calls stk_batch_wait (its stream waits for the event: the
 * host never blocks), and it gives the batch back with
 * stk_loader_release_after and the stream its work ran on: the buffer is
 * refilled only after that work is done (the next copy into it waits on an
 * event recorded on that stream).  stk_loader_save counts the batches the
 * consumer has taken, not those read ahead.
 *
 * Device-resident datasets: when `device_resident_budget` allows and every
 * selected field is stored plain, the selected fields of every record are
 * uploaded once at open (checked against their record checksums on the
 * way unless verify is off), and each batch is then assembled on the GPU
 * by a gather kernel from a plan the loader's workers compute (records,
 * windows, ragged offsets): no host I/O and no host copy per batch.
 */

/* The number of CUDA devices in *count; 0, or STK_ENOGPU saying why none
 * can be used. */
STK_API int stk_gpu_count(int *count, stk_error *err);

/* The device a loader delivers batches to, or -1 (host memory). */
STK_API int stk_loader_device(const stk_loader *ld);
/* Device memory the loader's device-resident copy of the dataset takes; 0
 * when batches are copied from the host (or it has no device). */
STK_API uint64_t stk_loader_resident_bytes(const stk_loader *ld);

/* ------------------------------------------------------------------------ */
/* Writing from Arrow (the Arrow C stream interface)                         */
/* ------------------------------------------------------------------------ */

/* The Arrow C data and stream interfaces, as the Arrow project specifies
 * them (an ABI, so the definitions are guarded to coexist with others). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif
#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};
#endif

/* One field of the dataset made from one or more columns of the stream.
 * With several scalar columns (all of one numeric type) each row becomes a
 * vector: the field's rows have `ncolumns` elements.  Several list columns
 * (of one type, lists of one length within a row) stack into a ragged
 * [*, ncolumns] field, row mode only. */
typedef struct stk_arrow_field {
    const char *name;
    const char *const *columns;
    size_t ncolumns;
    stk_codec codec;
    int codec_level;
} stk_arrow_field;

typedef struct stk_arrow_options {
    /* One record per distinct value of this column (integer or string),
     * holding that value's rows; NULL: one record per row. */
    const char *group_by;
    /* Within a group, rows sorted by this column (integer, float, date or
     * timestamp), stable; NULL: stream order. */
    const char *order_by;
    /* How columns become fields; NULL: one field per column. */
    const stk_arrow_field *fields;
    size_t nfields;
    /* With group_by, which fields hold one value per record (a basin's
     * area) rather than one per row: by default (statics NULL, no_statics
     * 0) every field whose rows are equal within every group; with statics,
     * exactly the fields named (each must be constant within every group,
     * else -EINVAL naming the group); with no_statics, none. */
    const char *const *statics;
    size_t nstatics;
    int no_statics;
    stk_writer_options writer;
} stk_arrow_options;

STK_API void stk_arrow_options_init(stk_arrow_options *opts);

/*
 * Packs the rows of an Arrow stream into a dataset at `path`.
 *
 * Columns may be integers, floats (f16, f32, f64), booleans (as u8), dates,
 * times, timestamps (any unit, with or without a time zone) and durations
 * (their integer values: days, or counts of their unit), fixed-size lists
 * of those (a vector per row), and lists, large lists and list views of
 * those (a ragged field per row; not with group_by).  Dictionary-encoded
 * columns (a pandas Categorical) are decoded: their values are packed,
 * never their indices, whatever each batch's dictionary.  Strings and
 * binaries (plain, large, views, fixed-size) are ragged bytes fields typed
 * "string" or "binary" (stk_field.type); with group_by, one value a group.  Nulls in
 * float columns become NaN; nulls elsewhere are an error.
 * Without group_by every row is a record: columns are scalar fields, vectors
 * [n] or ragged [*].  With group_by a record holds a group's rows: every
 * field is [*, k] (k = its columns, or [*] for one column), except static
 * fields (see statics above), which hold the group's one value: [k] or a
 * scalar; plus the group key itself as a scalar field (i64; u64 for an
 * unsigned 64-bit key) or bytes field (strings) named after the column, and
 * records come in increasing key order (unsigned for u64 keys, bytewise
 * for strings).  With group_by the dataset is written once the stream has
 * been read whole (the groups are gathered in memory).
 *
 * The schema is checked before anything is written: decimals, nested and
 * other types, unknown or repeated columns, mixed types in one field are
 * -EINVAL with a message naming the column and saying what to do.  Each
 * batch is checked against the schema before a row of it is read: its
 * columns, and for each the buffers and children its format has, lengths
 * that cover the batch, offsets that never decrease and stay within the
 * child (lists) or the data buffer (string views), and a validity bitmap
 * where nulls are counted; a batch that does not fit is -EINVAL naming the
 * batch (counting from 0), its first row and the column.  (The interface
 * gives no types with a batch: an array of another type but the same
 * layout, int32 values where int64 was announced, cannot be told.)  A
 * failure later (a stream error, a batch that does not fit, a null where
 * none may be) leaves the dataset incomplete, never complete and partial;
 * without group_by the records before it stay written, for
 * opts->writer.resume.
 * The stream is consumed but not released; *records gets the record count.
 */
STK_API int stk_write_arrow(const char *path, struct ArrowArrayStream *stream,
                            const stk_arrow_options *opts, uint64_t *records,
                            stk_error *err);

/* What a pack with group_by and an integer order_by (dates, timestamps,
 * integers) found of each group's rows in order: the step (the smallest
 * positive difference between consecutive rows of a group, over all
 * groups; a daily series of dates: 1), the gaps (consecutive rows further
 * apart than the step) and repeats (consecutive rows with the same value),
 * and the groups that hold any.  All 0 without group_by or with a float
 * order column. */
typedef struct stk_arrow_report {
    uint64_t groups;
    int64_t step;
    uint64_t gaps, gap_groups;
    uint64_t repeats, repeat_groups;
} stk_arrow_report;

/* stk_write_arrow, and what it found of the order (report may be NULL). */
STK_API int stk_write_arrow_report(const char *path, struct ArrowArrayStream *stream,
                                   const stk_arrow_options *opts, uint64_t *records,
                                   stk_arrow_report *report, stk_error *err);

/* ------------------------------------------------------------------------ */
/* NumPy .npy files                                                          */
/* ------------------------------------------------------------------------ */

/* What an .npy header says. */
typedef struct stk_npy_header {
    stk_dtype dtype;
    int ndim;
    int64_t shape[STK_MAX_DIMS];
    uint64_t data_offset; /* where the array's bytes begin in the file */
    uint64_t data_bytes;  /* element size times the product of shape */
} stk_npy_header;

/*
 * Parses the header at the start of an .npy file held in `buf` (`len` bytes:
 * the whole file, or at least its header).  Accepts format versions 1.0, 2.0
 * and 3.0, C order, little-endian or byte-order-free dtypes: b1 (as u8), u1
 * to u8, i1 to i8, f2, f4, f8.
 * Returns 0, or STK_EBADMAGIC (not an .npy file), STK_EVERSION,
 * STK_ECORRUPT (malformed header), STK_EUNSUPPORTED (Fortran order,
 * big-endian, object or other dtypes, more than STK_MAX_DIMS dimensions),
 * STK_ETRUNCATED (len shorter than the header).  `name` is used in messages
 * only and may be NULL.
 */
STK_API int stk_npy_parse(const void *buf, size_t len, const char *name,
                          stk_npy_header *out, stk_error *err);

/* ------------------------------------------------------------------------ */
/* In-place sources: an index over files as they are                        */
/* ------------------------------------------------------------------------ */

/*
 * An index maps records to byte ranges of users' own files (.npy, .wav,
 * HDF5, or any file taken whole) and records each file's size and
 * modification time.  stk_dataset_open opens an index file exactly as it
 * opens a dataset directory, and the loader reads it with the same options,
 * orders, windows, ranks and resume.  What differs: there are no checksums
 * (verify is off; the files are the user's, not stoker's), a file that
 * changed since indexing is refused (STK_ESTALE: re-index), and with more
 * than STK_INDEX_MAP_MAX files the records are read with the I/O engine
 * only (no mmap backend, stk_extent.data is NULL, valid_field unavailable).
 */
#define STK_INDEX_MAP_MAX 4096

typedef enum stk_source {
    STK_SOURCE_AUTO = 0, /* from the first file's extension */
    STK_SOURCE_NPY,      /* .npy: a file per record, or rows along axis 0 */
    STK_SOURCE_WAV,      /* .wav: a clip per record, windows over frames */
    STK_SOURCE_HDF5,     /* .h5/.hdf5: one dataset, a record per row of axis 0 */
    STK_SOURCE_RAW,      /* any file: its bytes are one record */
    STK_SOURCE_IMAGE,    /* .jpg/.jpeg/.png/.webp: a file per record, a
                          * ragged bytes field typed "image" (see "Media") */
    STK_SOURCE_AUDIO     /* .flac/.mp3/.ogg/.opus: a file per record, typed
                          * "audio"; every file's header is read and checked
                          * as it is indexed */
} stk_source;

typedef struct stk_index_options {
    stk_source source;
    /* npy: every row along axis 0 of every file is a record (default: each
     * file is one record). */
    int split_axis0;
    /* hdf5: the dataset's path inside the file; NULL: the file's only
     * dataset. */
    const char *hdf5_dataset;
    /* wav: deliver float32 in [-1, 1) whatever the encoding (default: PCM
     * 8/16 bits as u8/i16, 24/32 bits as i32 scaled to the full range,
     * float as stored). */
    int wav_float32;
    /* The field's name; NULL: "data" (npy, hdf5), "audio" (wav, audio),
     * "bytes" (raw), "image" (image). */
    const char *field;
    /* Directories are walked recursively for files whose name ends in this
     * (case-insensitive); NULL: ".npy", ".wav", ".h5" and ".hdf5", the
     * image or audio extensions above, or every file for raw. */
    const char *extension;
    /* Called from the calling thread after each file is indexed, with the
     * files indexed so far and the records they hold (how many files there
     * are is not known until the walk ends); default NULL.  A nonzero
     * return stops the walk: stk_index_build then returns -ECANCELED and
     * writes nothing. */
    int (*on_progress)(void *ctx, uint64_t files, uint64_t records);
    void *progress_ctx;
} stk_index_options;

STK_API void stk_index_options_init(stk_index_options *opts);

/*
 * Indexes `paths` (files, or directories walked in name order) into the
 * index file `index_path`, written atomically; a relative path in the index
 * is relative to the index file's directory.  Files outside that directory
 * are stored by absolute path, and the index records their common
 * directory as "root": opening such an index needs stk_open_options.root
 * (see there).  Sets *records when not NULL.
 * Returns 0, or an error naming the file and what is wrong with it:
 * STK_EBADMAGIC / STK_ECORRUPT / STK_ETRUNCATED / STK_EUNSUPPORTED from a
 * header, STK_ESCHEMA when files disagree (dtype, trailing shape, channels,
 * sample rate), -ENOENT when no file was found, -ECANCELED when
 * opts->on_progress stopped it.
 */
STK_API int stk_index_build(const char *const *paths, size_t npaths, const char *index_path,
                            const stk_index_options *opts, uint64_t *records,
                            stk_error *err);

/* ------------------------------------------------------------------------ */
/* WAV files                                                                 */
/* ------------------------------------------------------------------------ */

typedef enum stk_wav_encoding {
    STK_WAV_PCM8 = 1, /* unsigned */
    STK_WAV_PCM16,
    STK_WAV_PCM24,
    STK_WAV_PCM32,
    STK_WAV_FLOAT32,
    STK_WAV_FLOAT64
} stk_wav_encoding;

/* What a WAV header says. */
typedef struct stk_wav_header {
    stk_wav_encoding encoding;
    uint32_t channels;
    uint32_t sample_rate;
    uint32_t bytes_per_sample;
    uint64_t data_offset; /* where the frames begin in the file */
    uint64_t data_bytes;  /* the data chunk's size */
    uint64_t frames;      /* whole frames in the data chunk */
} stk_wav_header;

/*
 * Parses the header of a RIFF/WAVE file whose first `len` bytes are in
 * `buf` (64 KiB is plenty for any common file) and whose size is
 * `file_size`.  Accepts PCM 8/16/24/32-bit and IEEE float 32/64-bit, plain
 * or extensible format chunks, any channel count, any other chunks before
 * the data.  Returns 0, or STK_EBADMAGIC (not RIFF/WAVE), STK_ETRUNCATED
 * (the data or a chunk runs past the end of the file), STK_ECORRUPT
 * (malformed chunks), STK_EUNSUPPORTED (RF64, other encodings).  `name` is
 * used in messages only and may be NULL.
 */
STK_API int stk_wav_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                          stk_wav_header *out, stk_error *err);

/* ==== Mixtures: several datasets in one run ==== */

/*
 * A mixture reads several sources (datasets or in-place indexes, each
 * opened as a loader of its own) as one stream.  The epoch is a sequence
 * of *rounds*: every rank takes one sample (or, for batches of one source
 * at a time, one batch) from the same source in a round, and which source
 * round q of epoch e belongs to is a closed-form function of (seed, e, q),
 * computed here in O(log sources) with no generator to replay.  Source i
 * gives units[i] rounds in one of its own epochs; a mixture epoch takes
 * counts[i] of them, its rounds continuing from epoch to epoch (so that
 * every sample of a source's epoch is used once, whatever the mixture's
 * epochs, and a count above units[i] cycles into the source's next epoch).
 *
 * The counts come from the weights and the policy for a source that runs
 * out (or are given):
 *   STOP   the epoch ends when the first source, at its weight, runs out of
 *          its epoch: counts[i] = weight[i] * t, t the least units[i] /
 *          weight[i];
 *   CYCLE  the epoch ends when the last one does; the others cycle into
 *          their next epochs (t the largest units[i] / weight[i]);
 *   ALL    every source gives its whole epoch: the sources are drawn at
 *          their weights until one runs out, then the rest at theirs, and
 *          so on (the epoch is made of up to `sources` phases).
 * Within a phase the rounds are dealt by a balanced binary tree over the
 * sources: each node interleaves its two sides' counts evenly (the k-th
 * round of the node goes left when floor((k+1)a/t) > floor(ka/t), with an
 * offset keyed by seed, epoch and node).  The promise: over any run of n
 * consecutive rounds of a phase, source i's count differs from
 * n * counts_in_phase[i] / rounds_in_phase by less than its depth in the
 * tree, at most ceil(log2(sources)) (less than 2 rounds for 3 or 4 sources;
 * exact for one); over a whole epoch it is exact.
 */
typedef struct stk_mix stk_mix;

typedef enum stk_mix_exhaust {
    STK_MIX_STOP = 0,
    STK_MIX_CYCLE = 1,
    STK_MIX_ALL = 2
} stk_mix_exhaust;

typedef struct stk_mix_source {
    uint64_t units;  /* rounds one epoch of the source gives; >= 1 */
    double weight;   /* > 0; ignored where counts are given */
    uint64_t count;  /* rounds per mixture epoch; 0: from the weights (give
                      * all or none) */
} stk_mix_source;

/*
 * A loader over several sources (stoker.h's loader calls all work on it):
 * each source is a dataset read by a loader of its own, opened with
 * sources[i].opts (its fields, window, stride, validity rule, order, seed
 * and block options; give each source its own seed) but the mixture's
 * batch_size, rank, world_size, streams, epoch, split, threads and memory
 * budget (`common`; streams 0: world_size, which must divide them; threads
 * 0: a loader's default; memory_budget: divided among the sources).  A
 * split among worker processes needs every source read straight into the
 * mixture's batches (below).  A round is
 * `streams` samples (homogeneous: `streams` batches) of one source, the
 * same rank taking the same lanes of every round, so that each source is
 * read in its own order exactly as its own loader deals it to this rank.
 * The mixture's `threads` workers read every source's samples straight
 * into its batches; a source that cannot be read so (a remote one, block
 * order over data read from files rather than the mapping, on_error skip)
 * makes every source's loader read ahead in threads of its own (`threads`
 * shared out by the sources' shares of the rounds, at least one each) and
 * one worker copy from their batches; the batches are the same either way.
 * Batches hold the first source's fields, named names[i] where given; every
 * other source must give fields of the same names (after its own names),
 * types and shapes.  Homogeneous batches of sources whose fields differ
 * are the sources' own batches, handed out as they are (no copy), each
 * with its source's fields (stk_batch_num_fields, stk_batch_field_get say
 * what each holds).  stk_batch_sources gives each sample's source;
 * stk_batch_samples each sample's id within its source.  The state is a
 * loader's (seed, epoch, position, streams): restore takes one of this
 * mixture's seed and streams, from a run of any world size dividing them.
 * The datasets must stay open until the loader is closed.  With
 * common->device >= 0 the batches are copied to that GPU as a loader's
 * are (common->device_buffers; no device-resident mode), each with its
 * stk_batch_sources on the host; homogeneous batches of sources whose
 * fields differ (the sources' own) are refused there (-EINVAL).
 * Returns 0 and *out, or -EINVAL (the message names the source: a source
 * with fewer samples than a round, counts for some sources only...),
 * STK_ENOGPU or STK_ECUDA (a device),
 * STK_ESCHEMA (fields that differ between sources, named), or what
 * opening a source's loader returns.
 */
typedef struct stk_mixture_source {
    stk_dataset *ds;
    const stk_loader_options *opts; /* NULL: the defaults */
    double weight;                  /* see stk_mix_source */
    uint64_t count;                 /* samples per mixture epoch; 0: from weight */
    const char *const *names;       /* NULL, or a name per field it loads (NULL
                                     * entries: the field's own) */
} stk_mixture_source;

typedef struct stk_mixture_options {
    stk_mix_exhaust exhaust;
    int homogeneous; /* 1: every batch from one source */
    uint64_t seed;   /* the schedule's */
} stk_mixture_options;

STK_API int stk_loader_open_mixture(const stk_mixture_source *sources, size_t n,
                                    const stk_loader_options *common,
                                    const stk_mixture_options *mo, stk_loader **out,
                                    stk_error *err);
/* A mixture's batch: the source (index into `sources`) of each sample;
 * NULL for any other loader's batch.  Valid until release. */
STK_API const uint32_t *stk_batch_sources(const stk_batch *b);

/* Returns 0 and *out, -EINVAL (naming the source: a unit count of 0, a
 * weight not finite and positive, counts given for some sources only, more
 * than 65535 sources, an epoch of more than 2^62 rounds) or -ENOMEM. */
STK_API int stk_mix_open(const stk_mix_source *sources, size_t n, stk_mix_exhaust exhaust,
                         uint64_t seed, stk_mix **out, stk_error *err);
STK_API void stk_mix_close(stk_mix *m);
STK_API int stk_mix_exhaust_parse(const char *name, stk_mix_exhaust *out);
STK_API size_t stk_mix_num_sources(const stk_mix *m);
/* Rounds in a mixture epoch, and source i's count of them. */
STK_API uint64_t stk_mix_epoch_rounds(const stk_mix *m);
STK_API uint64_t stk_mix_source_rounds(const stk_mix *m, size_t i);
/* The source of round q (< stk_mix_epoch_rounds) of epoch e; *index, when
 * not NULL, gets how many rounds of that source come before it in the
 * epoch. */
STK_API uint32_t stk_mix_source_at(const stk_mix *m, uint64_t epoch, uint64_t q,
                                   uint64_t *index);
/* The sources of rounds first .. first + n - 1 of epoch e. */
STK_API void stk_mix_fill(const stk_mix *m, uint64_t epoch, uint64_t first, uint64_t n,
                          uint32_t *sources);
/* counts[i] = the rounds of source i among rounds [0, q) of epoch e
 * (q <= stk_mix_epoch_rounds): where each source stands when a run resumes
 * at round q. */
STK_API void stk_mix_counts(const stk_mix *m, uint64_t epoch, uint64_t q, uint64_t *counts);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_H */
