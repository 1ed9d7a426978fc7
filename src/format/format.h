/*
 * format.h: the on-disk layout of format versions 1 and 2, and the in-memory form
 * of an open dataset.  docs/FORMAT.md specifies the same layout for people;
 * the two must agree.
 *
 * Shard header (the first STK__HEADER_SIZE bytes of every shard file):
 *
 *   OFFSET SIZE  DESCRIPTION
 *        0    8  magic "STKSHARD"
 *        8    4  format version (1 or 2)
 *       12    4  byte-order mark 0x01020304, stored little-endian
 *       16    4  header size in bytes (4096); record data starts here
 *       20    4  number of fields F
 *       24    8  number of records R
 *       32    8  data offset (= header size)
 *       40    8  data end: one past the last byte of record data
 *       48    8  index offset (data end rounded up to 64)
 *       56    8  index size in bytes: R * (8 + 24 F) (version 1), R * 8 (2)
 *       64    8  block table offset (index offset + index size)
 *       72    8  number of checksum blocks
 *       80    4  block size in bytes
 *       84    4  field alignment in bytes
 *       88    8  schema hash: XXH3-64 of the canonical schema text
 *       96    8  XXH3-64 of the index
 *      104    8  XXH3-64 of the block table
 *      112    8  the shard's place: bit 63 set, the writer's part index in
 *                bits 32..62 (0 unless split) and the shard's number in
 *                bits 0..31; 0 in shards of writers before it existed
 *      120    8  XXH3-64 of bytes 0..120 of this header
 *      128 3968  zero (checked at open)
 *
 * Index entry of record r (at index offset + r * (8 + 24 F)):
 *
 *        0    8  XXH3-64 of the record's span: from field 0's offset to the
 *                end of field F-1's stored bytes, padding included
 *   8+24f     8  field f: byte offset of its stored bytes in the file
 *  16+24f     8  field f: stored size in bytes
 *  24+24f     8  field f: rows (first-dimension length)
 *
 * Version 2 (a schema of fixed-shape, uncompressed fields only): no
 * entries; the index holds the R record checksums alone, densely, and
 * record r's field f lies at data offset + r * stride + offset f, with
 * the stride and the fields' offsets derived from the schema and the
 * alignment (stk__dataset_layout).  Its loader locates a record without
 * reading anything, and its checksum is one word of a dense array.
 *
 * Block table: one XXH3-64 per block of `block size` bytes of the data region
 * [data offset, data end); the last block may be short.
 */
#ifndef STK_FORMAT_H
#define STK_FORMAT_H

#include "../core/convert.h"
#include "../core/internal.h"

#define STK__MAGIC "STKSHARD"
#define STK__BOM 0x01020304u
#define STK__HEADER_SIZE 4096u
#define STK__HEADER_USED 128u
#define STK__INDEX_ALIGN 64u
/* The most bytes one field of one record may decode to (256 TiB): an
 * index entry of a compressed field that claims more rows is damage, not a
 * record (its rows would overflow the batch's arithmetic). */
#define STK__MAX_FIELD_RAW (UINT64_C(1) << 48)
#define STK__MANIFEST "manifest.json"
#define STK__SHARD_EXT ".stk"

/* Header field offsets. */
enum {
    STK__H_MAGIC = 0,
    STK__H_VERSION = 8,
    STK__H_BOM = 12,
    STK__H_HSIZE = 16,
    STK__H_NFIELDS = 20,
    STK__H_NRECORDS = 24,
    STK__H_DATA_OFF = 32,
    STK__H_DATA_END = 40,
    STK__H_INDEX_OFF = 48,
    STK__H_INDEX_SIZE = 56,
    STK__H_BLOCKS_OFF = 64,
    STK__H_NBLOCKS = 72,
    STK__H_BLOCK_SIZE = 80,
    STK__H_ALIGN = 84,
    STK__H_SCHEMA_HASH = 88,
    STK__H_INDEX_HASH = 96,
    STK__H_BLOCKS_HASH = 104,
    STK__H_PLACE = 112,
    STK__H_HEADER_HASH = 120
};

#define STK__PLACE_SET (UINT64_C(1) << 63)

/* u64 words per index entry (version 1). */
static inline size_t stk__entry_words(size_t nfields) { return 1 + 3 * nfields; }

/* The record layout of version 2, fixed by the schema and alignment:
 * record r's field f at data offset + r * stride + off[f], len[f] bytes of
 * rows[f] rows.  `ok`: the schema has only fixed-shape, uncompressed
 * fields (and at least one), so version 2 can hold it. */
typedef struct stk__layout {
    bool ok;
    uint64_t stride;
    uint64_t *off, *len, *rows; /* nfields each */
} stk__layout;

static inline uint64_t stk__ld64(const uint8_t *p) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
}
static inline uint32_t stk__ld32(const uint8_t *p) {
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return v;
}
static inline void stk__st64(uint8_t *p, uint64_t v) { __builtin_memcpy(p, &v, 8); }
static inline void stk__st32(uint8_t *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }

/* ---- schema (format/schema.c) ---- */

/* What the reader and the engine need of each field, derived once. */
typedef struct stk__fieldinfo {
    size_t itemsize;
    uint64_t row_bytes; /* bytes of one row (one element for scalars) */
    int64_t fixed_rows; /* shape[0] for a fixed first dimension, 1 for a
                         * scalar, STK_RAGGED otherwise */
    /* In-place sources only: the bytes of one row as the source file stores
     * them, and how they become row_bytes (STK__CONV_NONE: they are equal). */
    uint64_t stored_row_bytes;
    int conv;
    /* In place: the files of the field differ in their encodings (audio
     * of several PCM widths delivered as float32); each shard then says
     * its own (stk__shard_conv, stk__shard_srb). */
    bool conv_varies;
    /* In place: the HDF5 filters (STK__CHUNK_* bits) the chunks of the
     * dataset went through when records are slices of filtered chunks; the
     * index entry then names the chunk.  0: plain bytes. */
    int chunks;
} stk__fieldinfo;

/* Version 2's record layout of a checked schema (info from
 * stk__schema_check) at alignment `align`: L->ok when the schema allows
 * it.  0, or -ENOMEM.  stk__layout_free releases it (and may be called on
 * a zeroed one). */
int stk__layout_init(stk__layout *L, const stk_field *fields, const stk__fieldinfo *info,
                     size_t nfields, uint32_t align);
void stk__layout_free(stk__layout *L);
/* Checks a schema; fills `info` (nfields entries) when not NULL. */
int stk__schema_check(const stk_field *fields, size_t nfields,
                      stk__fieldinfo *info, stk_error *err);
/* A field's logical type is 1..STK_TYPE_MAX-1 printable ASCII characters. */
bool stk__type_ok(const char *type);
/* Deep copy: the names and types are duplicated. Free with stk__schema_free. */
int stk__schema_copy(const stk_field *fields, size_t nfields, stk_field **out);
void stk__schema_free(stk_field *fields, size_t nfields);
/* XXH3-64 of the canonical text of the schema. */
uint64_t stk__schema_hash(const stk_field *fields, size_t nfields);
const char *stk__codec_name(stk_codec c);
int stk__codec_parse(const char *name);

/* ---- pack-time statistics (format/stats.c) ---- */

/* Per-column statistics of a dataset's numeric fields (stk_column_stats
 * each): field i has columns first[i] .. first[i+1]-1 of col, one per
 * element of its row, and has[i] says whether they were gathered.  A
 * writer's also has `lane`, the scratch of its pass (lanes_max wide). */
typedef struct stk__stats {
    size_t nfields;
    size_t *first; /* nfields + 1 */
    bool *has;
    stk_column_stats *col;
    double *lane;
    size_t lanes_max;
} stk__stats;

/* Columns of field f's statistics: the elements of one of its rows; 0 for
 * bytes, and for rows wider than STK_STATS_MAX_COLUMNS. */
size_t stk__stats_columns(const stk_field *f);
/* Empty statistics over a schema (count 0, mean/min/max NaN), with the
 * writer's scratch when `scratch`.  0 or -ENOMEM. */
int stk__stats_new(const stk_field *fields, size_t nfields, bool scratch, stk__stats **out);
void stk__stats_free(stk__stats *s);
void stk__stats_reset(stk__stats *s);
/* Copies (to, from over one schema): 0, or -EINVAL for another schema. */
int stk__stats_copy(stk__stats *to, const stk__stats *from);
/* Joins `from` into `into` (Chan's pairwise update): the statistics of
 * both sets of values, as if seen in one pass; a field lacking in either
 * lacks in the result.  0, or -EINVAL for another schema. */
int stk__stats_merge(stk__stats *into, const stk__stats *from);
/* Whether field f's records are rows (a ragged first dimension): its
 * columns are then the elements of a row; else a record is one row. */
static inline bool stk__stats_rowed(const stk_field *f) {
    return f->ndim > 0 && f->shape[0] == STK_RAGGED;
}
/* Adds `rows` rows of field `field` (schema entry f), raw (not compressed)
 * bytes at data: rows of the field's row when stk__stats_rowed, else whole
 * records.  Needs the scratch.  Cannot fail. */
void stk__stats_add(stk__stats *s, size_t field, const stk_field *f, const void *data,
                    uint64_t rows);
/* The "stats" object of a manifest (jansson's json_t), and back; `what`
 * names the file in messages (STK_ECORRUPT). */
struct json_t;
struct json_t *stk__stats_json(const stk__stats *s, const stk_field *fields);
int stk__stats_parse(struct json_t *o, const stk_field *fields, size_t nfields,
                     const char *what, stk__stats **out, stk_error *err);

/* ---- manifest (format/manifest.c) ---- */

typedef struct stk__shard_entry {
    char *file; /* name inside the dataset directory */
    uint64_t records;
    uint64_t bytes;
    uint64_t header_hash;
} stk__shard_entry;

typedef struct stk__manifest {
    uint32_t version; /* 1, or 2 where a shard may be of version 2 (0: 1) */
    int is_part;
    uint32_t part_index, part_count;
    uint64_t records;
    uint32_t align, block_size;
    stk_field *fields;
    size_t nfields;
    stk__shard_entry *shards;
    size_t nshards;
    char *attrs; /* compact JSON object */
    char *inputs; /* stk_writer_options.inputs, or NULL */
    char *inputs_list; /* stk_writer_options.inputs_list (a part's), or NULL */
    stk__stats *stats; /* the pack-time statistics, or NULL (none recorded) */
} stk__manifest;

/* Names the first input that differs between two lists of inputs (the
 * form of stk_writer_options.inputs_list; `was` from the journal or the
 * first part, `now` from this run or another part) into out[cap]: "data/b
 * .npy changed (its size, 100 then 120 bytes)", "... added", "...
 * removed".  False when both list the same inputs alike (then the options
 * differ) or when either is NULL. */
bool stk__inputs_diff(const char *was, const char *now, char *out, size_t cap);
/* Whether `list` has the form of an inputs_list. */
bool stk__inputs_list_valid(const char *list);

/* Serialises to JSON text from stk__malloc. */
int stk__manifest_dump(const stk__manifest *m, char **out, size_t *len,
                       stk_error *err);
/* Parses and validates; `what` names the file in messages. */
int stk__manifest_parse(const char *text, size_t len, const char *what,
                        stk__manifest *out, stk_error *err);
void stk__manifest_clear(stk__manifest *m);
/* One field as a manifest (or an index) writes it, and back; `what` and
 * field number i name it in messages.  (json_t is jansson's.) */
struct json_t;
struct json_t *stk__field_json(const stk_field *f);
int stk__field_parse(struct json_t *o, size_t i, const char *what, stk_field *f,
                     stk_error *err);
/* Checks that `attrs` is a JSON object and returns its compact form. */
int stk__attrs_normalise(const char *attrs, char **out, stk_error *err);

/* ---- an open dataset (format/dataset.c) ---- */

typedef struct stk__shard {
    char *path;
    uint64_t first; /* global id of record 0 */
    uint64_t nrec;
    uint64_t size;
    uint64_t data_off, data_end;
    uint32_t block_size;
    uint64_t nblocks;
    uint64_t *blocks; /* nblocks block checksums */
    uint64_t *index;  /* version 1: nrec entries of stk__entry_words(F)
                       * words; version 2 (dense): nrec record checksums */
    bool dense;       /* version 2: records located by arithmetic */
    const uint8_t *map; /* the whole file, read-only; NULL for an in-place
                         * index of more files than are mapped */
    int64_t mtime_ns;   /* in-place sources: modification time when indexed */
    /* In place, a field whose files differ in encoding: this file's
     * conversion and stored bytes per row (conv_set), else the field's. */
    bool conv_set;
    int conv;
    uint64_t stored_row_bytes;
    uint64_t *chunk;    /* in place, filtered chunks: per record {offset of
                         * its bytes in the decoded chunk, decoded size
                         * (0: a chunk stored plain), filters applied} */
} stk__shard;

/* The conversion and stored bytes per row of field `fi` in shard `sh`. */
static inline int stk__shard_conv(const stk__fieldinfo *fi, const stk__shard *sh) {
    return sh->conv_set ? sh->conv : fi->conv;
}
static inline uint64_t stk__shard_srb(const stk__fieldinfo *fi, const stk__shard *sh) {
    return sh->conv_set ? sh->stored_row_bytes : fi->stored_row_bytes;
}

/* What a dataset's files can do.  The readers above ask these, never where
 * the dataset came from.  Shards written by stoker can do everything; an
 * in-place index (sources/index_open.c) names the users' own files: no
 * checksums, records not aligned for O_DIRECT, and past STK_INDEX_MAP_MAX
 * files no mappings. */
typedef struct stk__caps {
    char *source;   /* NULL: stoker's shards; else the users' own files, read
                     * in place: "npy", "wav", "hdf5" or "raw" */
    bool checksums; /* blocks and records carry checksums (verify, skip) */
    bool aligned;   /* records may be read with O_DIRECT */
    bool mapped;    /* every file is mapped (the mmap backend, valid_field) */
    bool lazy;      /* bytes arrive when asked for (stk__dataset_ensure): a
                     * remote dataset; no warm-up reads ahead of them */
} stk__caps;

/* Bytes [lo, hi) of shard `shard`. */
typedef struct stk__range {
    uint32_t shard;
    uint64_t lo, hi;
} stk__range;

struct stk_dataset {
    char *dir;
    stk_field *fields;
    stk__fieldinfo *info;
    size_t nfields;
    uint64_t nrec;
    stk__shard *shards;
    size_t nshards;
    char *attrs;
    uint32_t align;
    uint32_t block_size; /* 0 without checksums */
    stk__caps caps;
    stk__layout layout; /* version 2's record layout (layout.ok), for
                         * any schema that allows it */
    bool all_dense;     /* every shard is of version 2: locating a record
                         * reads nothing */
    stk__stats *stats; /* the manifest's statistics, or NULL */
    /* A remote dataset (src/remote) read from its local cache: the URL it
     * came from and what fetching it cost.  NULL for a local one. */
    char *origin;
    stk_remote_stats *remote;
    /* A lazy dataset's bytes (caps.lazy): ensure() makes the n byte ranges
     * present and checked, fetching what is missing all at once, waiting for
     * it, and fails naming the object; ensure_stats() fills the remote
     * statistics so far; ensure_free() releases ctx at close. */
    int (*ensure)(void *ctx, const struct stk__range *r, size_t n, stk_error *err);
    void (*ensure_stats)(void *ctx, stk_remote_stats *out);
    void (*ensure_free)(void *ctx);
    void *ensure_ctx;
    /* Once what ensure() brought has been read, the same ranges are let
     * go: under a cache budget, bytes between the two are never evicted. */
    void (*ensure_release)(void *ctx, const struct stk__range *r, size_t n);
    /* Read-ahead: the n ranges will be read soon, in this order after what
     * was announced before; their fetch starts in the background, and
     * nothing waits for it (a later ensure() waits for what is still in
     * flight).  `whole`: the reader reads every byte of the dataset this
     * epoch, so what lies between the announced blocks of a shard may come
     * with them, in fewer, larger ranges.  NULL for a dataset whose bytes
     * are all there. */
    void (*ensure_ahead)(void *ctx, const struct stk__range *r, size_t n, bool whole);
    /* A cache budget smaller than the dataset (cache_limited; a budget of
     * 0 streams).  The reader says what it will read: ensure_plan with
     * sign +1 adds each range as one future use of its bytes, -1 takes one
     * away as it is read, 0 forgets every use it added (a new epoch); the
     * cache evicts first what has the fewest uses left.  NULL without a
     * budget. */
    bool cache_limited;
    uint64_t cache_budget;
    /* Of the budget, the bytes the cache takes for what is never evicted
     * (the shards' headers, indexes and presence files, shards held whole,
     * the file system's reserve): what readers hold must fit in the rest. */
    uint64_t cache_fixed;
    void (*ensure_plan)(void *ctx, const struct stk__range *r, size_t n, int sign);
};

/* Lets go of what stk__dataset_ensure-like calls brought (see
 * ensure_release). */
static inline void stk__dataset_release(const stk_dataset *ds, const struct stk__range *r,
                                        size_t n) {
    if (ds->ensure_release) ds->ensure_release(ds->ensure_ctx, r, n);
}

/* Makes bytes [lo, hi) of shard s readable: at once for a dataset whose
 * bytes are all there, else through ds->ensure.  0 or an error. */
static inline int stk__dataset_ensure(const stk_dataset *ds, size_t s, uint64_t lo, uint64_t hi,
                                      stk_error *err) {
    stk__range r = {(uint32_t)s, lo, hi};
    return ds->ensure ? ds->ensure(ds->ensure_ctx, &r, 1, err) : 0;
}
/* The same for every byte of the dataset. */
int stk__dataset_ensure_all(const stk_dataset *ds, stk_error *err);

/* A dataset of `nshards` zeroed shards (the caller fills them, then nrec)
 * over a checked schema; takes dir, fields and attrs (freed on failure). */
int stk__dataset_new(char *dir, stk_field *fields, size_t nfields, char *attrs,
                     size_t nshards, stk_dataset **out, stk_error *err);
/* Checks shard file `path` against entry i of manifest `m` before it joins
 * a dataset directory: what opening checks (header, index, block table;
 * not its place among the others) and every block's checksum.  Returns 0
 * or the first problem, naming `path` and the record. */
int stk__shard_check(const char *path, const stk__manifest *m, size_t i, stk_error *err);
/* Opens a dataset of shards: its directory, or its manifest file. */
int stk__dataset_open_dir(const char *path, bool is_dir, stk_dataset **out, stk_error *err);
/* As stk__dataset_open_dir(dir), shard i read from path_of(ctx, i, file)
 * (from stk__malloc) instead of dir/file. */
int stk__dataset_open_paths(const char *dir, char *(*path_of)(void *ctx, size_t i, const char *file),
                            void *ctx, stk_dataset **out, stk_error *err);

/* The shard holding global record `rec` (rec < nrec).  Inline: the loader
 * asks it for every sample. */
static inline size_t stk__dataset_shard_of(const stk_dataset *ds, uint64_t rec) {
    size_t lo = 0, hi = ds->nshards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->shards[mid].first <= rec) lo = mid;
        else hi = mid;
    }
    /* Skip empty shards that share a first id with the next one. */
    while (lo + 1 < ds->nshards && ds->shards[lo].nrec == 0) lo++;
    return lo;
}

/* Record `local`'s entry in shard sh: in version 1 its index entry (the
 * checksum, then offset, size and rows of each field), in version 2 its
 * checksum alone.  Either way e[0] is the record's checksum; the rest is
 * read through stk__e_off, stk__e_len and stk__e_rows, which in version 2
 * compute it without a load. */
static inline const uint64_t *stk__entry(const stk_dataset *ds,
                                         const stk__shard *sh, uint64_t local) {
    return sh->index + local * (sh->dense ? 1 : stk__entry_words(ds->nfields));
}
static inline uint64_t stk__e_off(const stk_dataset *ds, const stk__shard *sh,
                                  const uint64_t *e, size_t f) {
    return sh->dense ? sh->data_off + (uint64_t)(e - sh->index) * ds->layout.stride +
                           ds->layout.off[f]
                     : e[1 + 3 * f];
}
static inline uint64_t stk__e_len(const stk_dataset *ds, const stk__shard *sh,
                                  const uint64_t *e, size_t f) {
    return sh->dense ? ds->layout.len[f] : e[2 + 3 * f];
}
static inline uint64_t stk__e_rows(const stk_dataset *ds, const stk__shard *sh,
                                   const uint64_t *e, size_t f) {
    return sh->dense ? ds->layout.rows[f] : e[3 + 3 * f];
}

/* The global id of the record whose bytes hold (or next follow) offset
 * `off` of shard `sh`; for messages about a file cut short there. */
uint64_t stk__dataset_record_at(const stk_dataset *ds, const struct stk__shard *sh, uint64_t off);

/* Span [*start, *end) of a record's stored bytes in its shard sh. */
static inline void stk__record_span(const stk_dataset *ds, const stk__shard *sh,
                                    const uint64_t *e, uint64_t *start, uint64_t *end) {
    size_t F = ds->nfields;
    if (sh->dense) {
        const stk__layout *L = &ds->layout;
        uint64_t at = sh->data_off + (uint64_t)(e - sh->index) * L->stride;
        *start = at + L->off[0];
        *end = at + L->off[F - 1] + L->len[F - 1];
        return;
    }
    *start = e[1];
    *end = e[1 + 3 * (F - 1)] + e[2 + 3 * (F - 1)];
}

/* Files a dataset directory may hold. */
bool stk__is_stoker_file(const char *name);

/* ---- a dataset's directory (dir.c) ---- */

/* The lock file every writer of a directory takes (a part's own is
 * .stoker-part-NNNNN.lock). */
#define STK__LOCK_NAME ".stoker.lock"
int stk__mkdir_p(const char *path);
bool stk__exists_in(const char *dir, const char *name);
/* 1 when entry `name` of directory fd `dfd` is a file stoker wrote (by its
 * contents), 0 when not, a negated errno when it cannot be told. */
int stk__is_ours(int dfd, const char *name);
/* 0 when `dir` holds only stoker's files (those of `prefix`, and
 * part_manifest), else an error naming what else is there. */
int stk__check_replaceable(const char *dir, const char *prefix, const char *part_manifest,
                           stk_error *err);
/* 0 when a writer may use `dir`: it does not exist, or it holds nothing
 * but stoker's files (a dataset, whole, interrupted or in parts); else
 * -EEXIST with an error that names what else is there.  Writes nothing. */
int stk__check_writable_dir(const char *dir, stk_error *err);
/* Locks `name` in dir, exclusive or shared, failing at once (-EBUSY) when
 * another writer holds it; *out is the lock's descriptor. */
int stk__take_lock(const char *dir, const char *name, bool exclusive, int *out,
                   stk_error *err);
/* Removes stoker's files of `dir` whose names start with `prefix` (or
 * counts them, only_count); returns how many matched, or a negated errno. */
int stk__remove_files(const char *dir, const char *prefix, bool only_count);
/* Writes manifest m as `name` in dir, atomically. */
int stk__publish(const char *dir, const char *name, const stk__manifest *m, bool sync,
                 stk_error *err);

#endif
