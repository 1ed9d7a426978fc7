/*
 * dataset.c: opening a dataset, finding records, reading and verifying them.
 *
 * Opening checks everything that can be checked without reading record
 * bytes: the manifest, each shard's header against the manifest, each index
 * and block table against the checksums in the header, and every index entry
 * against the shard's bounds and the schema.  After that, every offset the
 * reader or the engine uses is known to lie inside its file, so no later
 * read can stray out of bounds, whatever the files contain.
 */
#define _GNU_SOURCE
#include "format.h"
#include "../core/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

/* Says why a directory without a manifest is not a dataset. */
static int no_manifest(const char *dir, stk_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        int rc = -errno;
        return stk__err(err, rc, "%s: not a stoker dataset: %s", dir, stk_strerror(rc));
    }
    struct dirent *e;
    const char *why = NULL;
    char seen[300] = "";
    while ((e = readdir(d)) != NULL) {
        if (!stk__is_stoker_file(e->d_name)) continue;
        snprintf(seen, sizeof seen, "%s", e->d_name);
        if (strncmp(e->d_name, "part-", 5) == 0) why = "parts that are not merged yet (run `stoker merge`)";
        else if (!why) why = "files of a pack that did not finish";
    }
    closedir(d);
    if (why)
        return stk__err(err, STK_EINCOMPLETE,
                        "%s: the dataset is incomplete: no %s, but %s (e.g. %s)", dir,
                        STK__MANIFEST, why, seen);
    return stk__err(err, -ENOENT, "%s: not a stoker dataset (no %s)", dir, STK__MANIFEST);
}

static void shard_release(stk__shard *sh) {
    if (sh->map) munmap((void *)sh->map, (size_t)sh->size);
    stk__free(sh->path);
    stk__free(sh->index);
    stk__free(sh->blocks);
    stk__free(sh->chunk);
}

void stk_dataset_close(stk_dataset *ds) {
    if (!ds) return;
    /* First: a lazy dataset's read-ahead thread may be fetching, and reads
     * the shards' block tables and indexes when its round lands; freeing
     * its context joins it. */
    if (ds->ensure_free) ds->ensure_free(ds->ensure_ctx);
    for (size_t i = 0; i < ds->nshards; i++) shard_release(&ds->shards[i]);
    stk__free(ds->shards);
    stk__schema_free(ds->fields, ds->nfields);
    stk__free(ds->info);
    stk__layout_free(&ds->layout);
    stk__free(ds->attrs);
    stk__stats_free(ds->stats);
    stk__free(ds->dir);
    stk__free(ds->caps.source);
    stk__free(ds->origin);
    stk__free(ds->remote);
    stk__free(ds);
}

#define SH_ERR(code, ...) \
    (stk__err(err, code, __VA_ARGS__), stk__err_prefix(err, "%s: ", sh->path), code)

/* Checks the index entries of one shard against its bounds and the schema. */
static int check_entries(const stk_dataset *ds, const stk__shard *sh, stk_error *err) {
    size_t F = ds->nfields;
    uint64_t prev_end = sh->data_off;
    for (uint64_t r = 0; r < sh->nrec; r++) {
        const uint64_t *e = stk__entry(ds, sh, r);
        unsigned long long grec = (unsigned long long)(sh->first + r);
        for (size_t f = 0; f < F; f++) {
            uint64_t off = e[1 + 3 * f], len = e[2 + 3 * f], rows = e[3 + 3 * f];
            const stk__fieldinfo *fi = &ds->info[f];
            const char *name = ds->fields[f].name;
            if (off < prev_end || off > sh->data_end || len > sh->data_end - off)
                return SH_ERR(STK_EBOUNDS,
                              "record %llu (shard record %llu): field '%s' at "
                              "[%llu, +%llu) lies outside the data region [%llu, "
                              "%llu) or overlaps the previous field",
                              grec, (unsigned long long)r, name,
                              (unsigned long long)off, (unsigned long long)len,
                              (unsigned long long)sh->data_off,
                              (unsigned long long)sh->data_end);
            if (off % ds->align)
                return SH_ERR(STK_ECORRUPT,
                              "record %llu: field '%s' at offset %llu is not "
                              "aligned to %u",
                              grec, name, (unsigned long long)off, ds->align);
            uint64_t raw;
            if (fi->fixed_rows != STK_RAGGED && rows != (uint64_t)fi->fixed_rows)
                return SH_ERR(STK_ESCHEMA,
                              "record %llu: field '%s' has %llu rows; the schema "
                              "fixes %lld",
                              grec, name, (unsigned long long)rows,
                              (long long)fi->fixed_rows);
            if (!stk__mul_ok(rows, fi->row_bytes, &raw) || raw > STK__MAX_FIELD_RAW ||
                rows > STK__MAX_FIELD_RAW)
                return SH_ERR(STK_ESCHEMA,
                              "record %llu: field '%s' claims %llu rows, more than a record "
                              "can hold (at most 2^48 bytes a field)",
                              grec, name, (unsigned long long)rows);
            if (ds->fields[f].codec == STK_CODEC_NONE && len != raw)
                return SH_ERR(STK_ESCHEMA,
                              "record %llu: field '%s' stores %llu bytes but %llu "
                              "rows take %llu",
                              grec, name, (unsigned long long)len,
                              (unsigned long long)rows, (unsigned long long)raw);
            prev_end = off + len;
        }
    }
    return 0;
}

/* Whether a shard whose header gives place `pl` may follow one whose
 * header gave `prev` in the manifest's list: the shards of one writer in
 * their order from 0, and parts in increasing order.  A place of 0 (a
 * writer from before places) is not checked, nor what follows it. */
static bool in_order(uint64_t prev, uint64_t pl, bool first) {
    if (!pl) return true;
    if (!(pl & STK__PLACE_SET)) return false;
    uint32_t part = (uint32_t)(pl >> 32) & 0x7fffffffu, n = (uint32_t)pl;
    if (first) return n == 0;
    if (!prev) return true;
    uint32_t pp = (uint32_t)(prev >> 32) & 0x7fffffffu;
    return part == pp ? n == (uint32_t)prev + 1 : part > pp && n == 0;
}

/* The data end of a version 2 shard of `nrec` records: where the last
 * record's last field ends; false when it overflows. */
static bool dense_end(const stk_dataset *ds, const stk__shard *sh, uint64_t *end) {
    const stk__layout *L = &ds->layout;
    size_t F = ds->nfields;
    uint64_t span;
    if (!sh->nrec) {
        *end = sh->data_off;
        return true;
    }
    return stk__mul_ok(sh->nrec - 1, L->stride, &span) &&
           !__builtin_add_overflow(span, sh->data_off + L->off[F - 1] + L->len[F - 1], end);
}

static int open_shard(stk_dataset *ds, stk__shard *sh, const stk__shard_entry *me,
                      uint32_t mversion, uint64_t schema_hash, uint64_t *place,
                      stk_error *err) {
    int fd = stk__open(sh->path, O_RDONLY, 0);
    if (fd < 0)
        return stk__err(err, fd, "%s: cannot open shard: %s", sh->path, stk_strerror(fd));
    int rc = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        stk__err(err, rc, "%s: %s", sh->path, stk_strerror(rc));
        goto out;
    }
    sh->size = (uint64_t)st.st_size;
    uint8_t h[STK__HEADER_SIZE];
    ssize_t got = stk__pread_full(fd, h, sizeof h, 0);
    if (got < 0) {
        rc = (int)got;
        stk__err(err, rc, "%s: reading the header: %s", sh->path, stk_strerror(rc));
        goto out;
    }
    /* A file that ends inside the magic (an empty one included) is a
     * truncated shard, not a foreign file. */
    if (memcmp(h, STK__MAGIC, (size_t)STK__MIN((size_t)got, (size_t)8)) != 0) {
        rc = SH_ERR(STK_EBADMAGIC, "not a stoker shard (bad magic)");
        goto out;
    }
    if ((size_t)got < sizeof h) {
        rc = SH_ERR(STK_ETRUNCATED, "the file ends inside its header (%zd bytes)", got);
        goto out;
    }
    /* The header's padding holds nothing, and must be nothing: then every
     * byte of the header is covered (the rest by its checksum). */
    for (size_t k = STK__HEADER_USED; k < sizeof h; k++)
        if (h[k]) {
            rc = SH_ERR(STK_ECORRUPT, "header byte %zu is 0x%02x; bytes %u..%u must be zero", k,
                        h[k], STK__HEADER_USED, STK__HEADER_SIZE - 1);
            goto out;
        }
    uint32_t version = stk__ld32(h + STK__H_VERSION);
    if (version < 1 || version > STK_FORMAT_VERSION) {
        rc = SH_ERR(STK_EVERSION, "format version %u; this stoker reads versions 1 to %d",
                    version, STK_FORMAT_VERSION);
        goto out;
    }
    if (stk__ld32(h + STK__H_BOM) != STK__BOM) {
        rc = SH_ERR(STK_ECORRUPT, "byte-order mark is wrong: not a little-endian shard");
        goto out;
    }
    uint64_t hh = stk__ld64(h + STK__H_HEADER_HASH);
    if (stk__hash(h, STK__H_HEADER_HASH) != hh) {
        rc = SH_ERR(STK_ECHECKSUM, "header checksum mismatch: the header is damaged");
        goto out;
    }
    if (hh != me->header_hash) {
        rc = SH_ERR(STK_EMISMATCH,
                    "header checksum %016" PRIx64 " differs from the manifest's %016" PRIx64
                    ": the shard was replaced after the manifest was written",
                    hh, me->header_hash);
        goto out;
    }
    if (sh->size < me->bytes) {
        rc = SH_ERR(STK_ETRUNCATED, "file has %llu bytes; the manifest says %llu",
                    (unsigned long long)sh->size, (unsigned long long)me->bytes);
        goto out;
    }
    if (sh->size != me->bytes) {
        rc = SH_ERR(STK_EMISMATCH, "file has %llu bytes; the manifest says %llu",
                    (unsigned long long)sh->size, (unsigned long long)me->bytes);
        goto out;
    }
    sh->nrec = stk__ld64(h + STK__H_NRECORDS);
    sh->data_off = stk__ld64(h + STK__H_DATA_OFF);
    sh->data_end = stk__ld64(h + STK__H_DATA_END);
    uint64_t index_off = stk__ld64(h + STK__H_INDEX_OFF);
    uint64_t index_size = stk__ld64(h + STK__H_INDEX_SIZE);
    uint64_t blocks_off = stk__ld64(h + STK__H_BLOCKS_OFF);
    sh->nblocks = stk__ld64(h + STK__H_NBLOCKS);
    sh->block_size = stk__ld32(h + STK__H_BLOCK_SIZE);
    uint32_t nf = stk__ld32(h + STK__H_NFIELDS);
    if (nf != ds->nfields || sh->nrec != me->records) {
        rc = SH_ERR(STK_EMISMATCH,
                    "holds %u fields and %llu records; the manifest says %zu and %llu",
                    nf, (unsigned long long)sh->nrec, ds->nfields,
                    (unsigned long long)me->records);
        goto out;
    }
    if (stk__ld64(h + STK__H_SCHEMA_HASH) != schema_hash) {
        rc = SH_ERR(STK_ESCHEMA, "was written with a different schema than the manifest's");
        goto out;
    }
    /* The shard's place: shards of one writer come in their order, numbered
     * from 0, and parts in increasing order (headers of older writers
     * carry no place and are not checked). */
    uint64_t pl = stk__ld64(h + STK__H_PLACE);
    if (place && !in_order(*place, pl, sh == ds->shards)) {
        rc = SH_ERR(STK_EMISMATCH,
                    "says it is shard %u of %s%u, out of place at position %zu of the manifest's "
                    "list (shards listed out of order, or one left out)",
                    (uint32_t)pl, "part ", (unsigned)(pl >> 32 & 0x7fffffff),
                    (size_t)(sh - ds->shards));
        goto out;
    }
    if (place) *place = pl;
    if (stk__ld32(h + STK__H_ALIGN) != ds->align || sh->block_size != ds->block_size) {
        rc = SH_ERR(STK_EMISMATCH, "alignment or block size differs from the manifest");
        goto out;
    }
    /* Version 2: the records' places follow from the schema, which must
     * allow it; the manifest says a version at least as new (so that no
     * reader of version 1 alone is handed a shard it would misread). */
    if (version > (mversion ? mversion : 1)) {
        rc = SH_ERR(STK_EMISMATCH, "is of format version %u; the manifest says %u", version,
                    mversion ? mversion : 1);
        goto out;
    }
    if (version == 2 && !ds->layout.off &&
        (rc = stk__layout_init(&ds->layout, ds->fields, ds->info, ds->nfields, ds->align))) {
        stk__err(err, rc, "%s: out of memory", sh->path);
        goto out;
    }
    if (version == 2 && !ds->layout.ok) {
        rc = SH_ERR(STK_ECORRUPT, "format version 2, which holds only fixed-shape, uncompressed "
                    "fields; the schema has a ragged or compressed one");
        goto out;
    }
    sh->dense = version == 2;
    uint64_t want_end = 0;
    if (sh->dense && (!dense_end(ds, sh, &want_end) || want_end != sh->data_end)) {
        rc = SH_ERR(STK_ECORRUPT, "the header's data end %llu is not where %llu records of "
                    "%llu bytes end", (unsigned long long)sh->data_end,
                    (unsigned long long)sh->nrec, (unsigned long long)ds->layout.stride);
        goto out;
    }
    /* The layout must chain exactly: header, data, index, blocks, end. */
    size_t words = sh->dense ? 1 : stk__entry_words(ds->nfields);
    uint64_t want_index, want_blocks;
    uint64_t data_len = sh->data_end - sh->data_off;
    if (stk__ld32(h + STK__H_HSIZE) != STK__HEADER_SIZE ||
        sh->data_off != STK__HEADER_SIZE || sh->data_end < sh->data_off ||
        sh->data_end > sh->size ||
        index_off != stk__align_up(sh->data_end, STK__INDEX_ALIGN) ||
        !stk__mul_ok(sh->nrec, words * 8, &want_index) || index_size != want_index ||
        blocks_off != index_off + index_size ||
        sh->nblocks != (data_len + sh->block_size - 1) / sh->block_size ||
        !stk__mul_ok(sh->nblocks, 8, &want_blocks) ||
        blocks_off + want_blocks != sh->size) {
        rc = SH_ERR(STK_ECORRUPT, "the header's layout is inconsistent (data [%llu, %llu), "
                    "index at %llu, %llu blocks, file of %llu bytes)",
                    (unsigned long long)sh->data_off, (unsigned long long)sh->data_end,
                    (unsigned long long)index_off, (unsigned long long)sh->nblocks,
                    (unsigned long long)sh->size);
        goto out;
    }
    sh->index = stk__alloc_table((size_t)index_size);
    sh->blocks = stk__malloc((size_t)want_blocks);
    if (!sh->index || !sh->blocks) {
        rc = stk__err(err, -ENOMEM, "%s: out of memory for the index", sh->path);
        goto out;
    }
    if ((got = stk__pread_full(fd, sh->index, (size_t)index_size, index_off)) !=
            (ssize_t)index_size ||
        (got = stk__pread_full(fd, sh->blocks, (size_t)want_blocks, blocks_off)) !=
            (ssize_t)want_blocks) {
        rc = got < 0 ? (int)got : STK_ETRUNCATED;
        stk__err(err, rc, "%s: reading the index: %s", sh->path, stk_strerror(rc));
        goto out;
    }
    if (stk__hash(sh->index, (size_t)index_size) != stk__ld64(h + STK__H_INDEX_HASH)) {
        rc = SH_ERR(STK_ECHECKSUM, "index checksum mismatch: the record index is damaged");
        goto out;
    }
    if (stk__hash(sh->blocks, (size_t)want_blocks) != stk__ld64(h + STK__H_BLOCKS_HASH)) {
        rc = SH_ERR(STK_ECHECKSUM, "block table checksum mismatch");
        goto out;
    }
    if (!sh->dense && (rc = check_entries(ds, sh, err))) goto out;
    void *map = mmap(NULL, (size_t)sh->size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        stk__err(err, rc, "%s: cannot map the shard: %s", sh->path, stk_strerror(rc));
        goto out;
    }
    sh->map = map;
out:
    close(fd);
    return rc;
}

int stk__dataset_new(char *dir, stk_field *fields, size_t nfields, char *attrs,
                     size_t nshards, stk_dataset **out, stk_error *err) {
    *out = NULL;
    stk_dataset *ds = stk__calloc(1, sizeof *ds);
    if (ds) {
        ds->dir = dir;
        ds->fields = fields;
        ds->nfields = nfields;
        ds->attrs = attrs;
        ds->caps = (stk__caps){.checksums = true, .aligned = true, .mapped = true};
        ds->info = stk__calloc(nfields ? nfields : 1, sizeof *ds->info);
        ds->shards = stk__calloc(nshards ? nshards : 1, sizeof *ds->shards);
    }
    if (!ds || !ds->info || !ds->shards || !dir || !fields || !attrs) {
        if (ds) stk_dataset_close(ds); /* frees what it was given */
        else {
            stk__free(dir);
            stk__schema_free(fields, nfields);
            stk__free(attrs);
        }
        return stk__err(err, -ENOMEM, "out of memory");
    }
    int rc = stk__schema_check(fields, nfields, ds->info, err);
    if (rc) {
        stk_dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

static int open_dir(const char *path, bool is_dir,
                    char *(*path_of)(void *ctx, size_t i, const char *file), void *ctx,
                    stk_dataset **out, stk_error *err);

int stk__dataset_open_dir(const char *path, bool is_dir, stk_dataset **out, stk_error *err) {
    return open_dir(path, is_dir, NULL, NULL, out, err);
}

int stk__dataset_open_paths(const char *dir, char *(*path_of)(void *ctx, size_t i, const char *file),
                            void *ctx, stk_dataset **out, stk_error *err) {
    return open_dir(dir, true, path_of, ctx, out, err);
}

static int open_dir(const char *path, bool is_dir,
                    char *(*path_of)(void *ctx, size_t i, const char *file), void *ctx,
                    stk_dataset **out, stk_error *err) {
    *out = NULL;
    char *dir = NULL, *mpath = NULL;
    if (is_dir) {
        dir = stk__strdup(path);
        mpath = dir ? stk__path_join(path, STK__MANIFEST) : NULL;
    } else {
        /* A manifest file was named: the dataset is its directory. */
        mpath = stk__strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : stk__strdup(".");
    }
    int rc = 0;
    char *text = NULL;
    size_t len = 0;
    stk_dataset *ds = NULL;
    stk__manifest m;
    memset(&m, 0, sizeof m);
    if (!dir || !mpath) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = stk__read_file(mpath, &text, &len))) {
        if (rc == -ENOENT && is_dir) rc = no_manifest(dir, err);
        else stk__err(err, rc, "%s: %s", mpath, stk_strerror(rc));
        goto fail;
    }
    if ((rc = stk__manifest_parse(text, len, mpath, &m, err))) goto fail;
    if (m.is_part) {
        rc = stk__err(err, STK_EINCOMPLETE,
                      "%s: is part %u of %u; merge the parts with `stoker merge`", mpath,
                      m.part_index, m.part_count);
        goto fail;
    }
    rc = stk__dataset_new(dir, m.fields, m.nfields, m.attrs, m.nshards, &ds, err);
    dir = NULL; /* taken, with the fields and attrs */
    m.fields = NULL;
    m.nfields = 0;
    m.attrs = NULL;
    if (rc) goto fail;
    ds->align = m.align;
    ds->block_size = m.block_size;
    ds->nrec = m.records;
    ds->stats = m.stats;
    m.stats = NULL;
    uint64_t schema_hash = stk__schema_hash(ds->fields, ds->nfields);
    uint64_t first = 0, place = 0;
    for (size_t i = 0; i < m.nshards; i++) {
        stk__shard *sh = &ds->shards[i];
        ds->nshards = i + 1;
        sh->first = first;
        sh->path = path_of ? path_of(ctx, i, m.shards[i].file)
                           : stk__path_join(ds->dir, m.shards[i].file);
        if (!sh->path) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = open_shard(ds, sh, &m.shards[i], m.version, schema_hash, &place, err)))
            goto fail;
        first += sh->nrec;
    }
    ds->all_dense = m.nshards > 0;
    for (size_t i = 0; i < m.nshards; i++) ds->all_dense &= ds->shards[i].dense;
    stk__manifest_clear(&m);
    stk__free(text);
    stk__free(mpath);
    *out = ds;
    return 0;
fail:
    stk__manifest_clear(&m);
    stk__free(text);
    stk__free(mpath);
    stk__free(dir);
    stk_dataset_close(ds);
    return rc;
}

int stk__shard_check(const char *path, const stk__manifest *m, size_t i, stk_error *err) {
    stk_field *fields = NULL;
    if (stk__schema_copy(m->fields, m->nfields, &fields))
        return stk__err(err, -ENOMEM, "out of memory");
    stk_dataset *ds = NULL;
    int rc = stk__dataset_new(stk__path_dir(path), fields, m->nfields, stk__strdup("{}"), 1, &ds,
                              err);
    if (rc) return rc;
    ds->align = m->align;
    ds->block_size = m->block_size;
    ds->nrec = m->shards[i].records;
    ds->nshards = 1;
    stk__shard *sh = &ds->shards[0];
    if (!(sh->path = stk__strdup(path))) rc = stk__err(err, -ENOMEM, "out of memory");
    if (!rc)
        rc = open_shard(ds, sh, &m->shards[i], m->version,
                        stk__schema_hash(ds->fields, ds->nfields), NULL, err);
    if (!rc) {
        stk_verify_options vo;
        stk_verify_options_init(&vo);
        vo.threads = 1;
        vo.max_problems = 1;
        rc = stk_dataset_verify(ds, &vo, NULL, err);
    }
    stk_dataset_close(ds);
    return rc;
}

int stk__dataset_ensure_all(const stk_dataset *ds, stk_error *err) {
    if (!ds->ensure) return 0;
    if (ds->cache_limited) {
        uint64_t total = 0;
        for (size_t s = 0; s < ds->nshards; s++) total += ds->shards[s].size;
        return stk__err(err, -ENOSPC,
                        "%s: this needs the whole dataset (%llu MiB) in the cache, and its "
                        "cache budget is %llu MiB",
                        ds->origin ? ds->origin : ds->dir,
                        (unsigned long long)((total + (1u << 20) - 1) >> 20),
                        (unsigned long long)(ds->cache_budget >> 20));
    }
    stk__range *r = stk__calloc(ds->nshards ? ds->nshards : 1, sizeof *r);
    if (!r) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t s = 0; s < ds->nshards; s++)
        r[s] = (stk__range){(uint32_t)s, 0, ds->shards[s].size};
    int rc = ds->ensure(ds->ensure_ctx, r, ds->nshards, err);
    stk__free(r);
    return rc;
}

int stk_dataset_fetch_all(const stk_dataset *ds, stk_error *err) {
    if (!ds) return stk__err(err, -EINVAL, "stk_dataset_fetch_all: NULL dataset");
    return stk__dataset_ensure_all(ds, err);
}

int stk_dataset_remote_stats(const stk_dataset *ds, stk_remote_stats *out) {
    if (!ds || !out || !ds->remote) return -EINVAL;
    *out = *ds->remote;
    if (ds->ensure_stats) {
        /* What was fetched since the open, by the readers. */
        stk_remote_stats more;
        ds->ensure_stats(ds->ensure_ctx, &more);
        out->requests += more.requests;
        out->retries += more.retries;
        out->bytes_fetched += more.bytes_fetched;
        out->network_seconds += more.network_seconds;
        out->cache_limited = more.cache_limited;
        out->cache_budget = more.cache_budget;
        out->cache_peak = more.cache_peak;
        out->bytes_evicted = more.bytes_evicted;
    }
    return 0;
}

uint64_t stk_dataset_num_records(const stk_dataset *ds) { return ds ? ds->nrec : 0; }
size_t stk_dataset_num_fields(const stk_dataset *ds) { return ds ? ds->nfields : 0; }
size_t stk_dataset_num_shards(const stk_dataset *ds) { return ds ? ds->nshards : 0; }
const char *stk_dataset_path(const stk_dataset *ds) {
    return ds ? (ds->origin ? ds->origin : ds->dir) : NULL;
}
const char *stk_dataset_source(const stk_dataset *ds) {
    return ds ? ds->caps.source : NULL;
}

uint32_t stk_dataset_format_version(const stk_dataset *ds) {
    if (!ds || ds->caps.source) return 0;
    for (size_t i = 0; i < ds->nshards; i++)
        if (ds->shards[i].dense) return 2;
    return 1;
}
const char *stk_dataset_attrs(const stk_dataset *ds) { return ds ? ds->attrs : NULL; }

const stk_field *stk_dataset_field(const stk_dataset *ds, size_t i) {
    return ds && i < ds->nfields ? &ds->fields[i] : NULL;
}

int stk_dataset_find_field(const stk_dataset *ds, const char *name) {
    if (!ds || !name) return -EINVAL;
    for (size_t i = 0; i < ds->nfields; i++)
        if (strcmp(ds->fields[i].name, name) == 0) return (int)i;
    return -ENOENT;
}

int stk_dataset_field_stats(const stk_dataset *ds, size_t field, const stk_column_stats **out,
                            size_t *ncolumns) {
    if (!ds || !out || !ncolumns || field >= ds->nfields) return -EINVAL;
    if (!ds->stats || !ds->stats->has[field]) return -ENOENT;
    *out = ds->stats->col + ds->stats->first[field];
    *ncolumns = ds->stats->first[field + 1] - ds->stats->first[field];
    return 0;
}

int stk_dataset_shard(const stk_dataset *ds, size_t i, stk_shard_info *out) {
    if (!ds || !out || i >= ds->nshards) return -EINVAL;
    const stk__shard *sh = &ds->shards[i];
    out->file = sh->path;
    out->first_record = sh->first;
    out->records = sh->nrec;
    out->bytes = sh->size;
    out->data_bytes = sh->data_end - sh->data_off;
    return 0;
}

uint64_t stk__dataset_record_at(const stk_dataset *ds, const stk__shard *sh, uint64_t off) {
    if (sh->nrec == 0) return sh->first;
    uint64_t lo = 0, hi = sh->nrec;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        uint64_t a, z;
        stk__record_span(ds, sh, stk__entry(ds, sh, mid), &a, &z);
        if (a <= off) lo = mid;
        else hi = mid;
    }
    uint64_t a, z;
    stk__record_span(ds, sh, stk__entry(ds, sh, lo), &a, &z);
    if (z <= off && lo + 1 < sh->nrec) lo++;
    return sh->first + lo;
}

static int check_args(const stk_dataset *ds, uint64_t record, size_t field,
                      stk_error *err) {
    if (!ds) return stk__err(err, -EINVAL, "NULL dataset");
    if (record >= ds->nrec || field >= ds->nfields)
        return stk__err(err, -EINVAL,
                        "%s: record %llu field %zu is out of range (%llu records, %zu "
                        "fields)",
                        ds->dir, (unsigned long long)record, field,
                        (unsigned long long)ds->nrec, ds->nfields);
    return 0;
}

int stk_dataset_get(const stk_dataset *ds, uint64_t record, size_t field,
                    stk_extent *out, stk_error *err) {
    int rc = check_args(ds, record, field, err);
    if (rc) return rc;
    size_t s = stk__dataset_shard_of(ds, record);
    const stk__shard *sh = &ds->shards[s];
    const uint64_t *e = stk__entry(ds, sh, record - sh->first);
    out->offset = stk__e_off(ds, sh, e, field);
    out->stored_bytes = stk__e_len(ds, sh, e, field);
    out->rows = stk__e_rows(ds, sh, e, field);
    out->raw_bytes = out->rows * ds->info[field].row_bytes;
    out->codec = ds->fields[field].codec;
    out->shard = (uint32_t)s;
    /* In place: the file's bytes are the stored form; NULL where the file is
     * not mapped or its bytes need converting. */
    out->data = sh->map && !stk__shard_conv(&ds->info[field], sh) && !ds->info[field].chunks &&
                        !ds->caps.lazy
                    ? sh->map + out->offset
                    : NULL;
    return 0;
}

/* In place: the bytes come from the file (through the mapping when there
 * is one) and are converted where the field says so. */
static int read_in_place(const stk_dataset *ds, const stk__shard *sh, const stk_extent *x,
                         uint64_t record, size_t field, void *buf, stk_error *err) {
    const stk__fieldinfo *fi = &ds->info[field];
    if (!x->raw_bytes) return 0;
    uint8_t *chunk = NULL, *plain = NULL;
    const uint64_t *c = fi->chunks ? sh->chunk + 3 * (record - sh->first) : NULL;
    int conv = stk__shard_conv(fi, sh);
    /* A widening conversion runs forward over bytes read into the end of
     * buf; a narrowing one (more stored bytes than raw) reads them apart. */
    bool apart = !(c && c[1]) && x->stored_bytes > x->raw_bytes;
    uint8_t *dst = c && c[1] ? NULL : (uint8_t *)buf + (x->raw_bytes - x->stored_bytes);
    if (apart) {
        chunk = stk__malloc((size_t)x->stored_bytes + 1);
        if (!chunk) return stk__err(err, -ENOMEM, "out of memory");
        dst = chunk;
    }
    if (c && c[1]) {
        /* Read the whole filtered chunk, decode it, keep the record's slice. */
        chunk = stk__malloc((size_t)x->stored_bytes + 1);
        plain = stk__malloc((size_t)(2 * c[1]) + 1);
        if (!chunk || !plain) {
            stk__free(chunk);
            stk__free(plain);
            return stk__err(err, -ENOMEM, "out of memory");
        }
        dst = chunk;
    }
    if (sh->map) {
        memcpy(dst, sh->map + x->offset, (size_t)x->stored_bytes);
    } else {
        int fd = stk__open(sh->path, O_RDONLY, 0);
        if (fd < 0) {
            stk__free(chunk);
            stk__free(plain);
            return stk__err(err, fd, "%s: cannot open: %s", sh->path, stk_strerror(fd));
        }
        ssize_t got = stk__pread_full(fd, dst, (size_t)x->stored_bytes, x->offset);
        close(fd);
        if (got < 0 || (uint64_t)got != x->stored_bytes) {
            stk__free(chunk);
            stk__free(plain);
            return stk__err(err, got < 0 ? (int)got : STK_ETRUNCATED,
                            "%s: record %llu: reading %llu bytes at byte %llu: %s", sh->path,
                            (unsigned long long)record, (unsigned long long)x->stored_bytes,
                            (unsigned long long)x->offset,
                            got < 0 ? stk_strerror((int)got) : "the file shrank");
        }
    }
    if (c && c[1]) {
        const char *why = "";
        const uint8_t *dec = stk__chunk_decode((unsigned)c[2], fi->itemsize, chunk,
                                               x->stored_bytes, c[1], plain, plain + c[1], &why);
        if (dec) memcpy(buf, dec + c[0], (size_t)x->raw_bytes);
        stk__free(chunk);
        stk__free(plain);
        if (!dec)
            return stk__err(err, STK_ECODEC,
                            "%s: record %llu: its chunk at byte %llu (%s) cannot be read: %s",
                            sh->path, (unsigned long long)record, (unsigned long long)x->offset,
                            stk__chunks_name((int)c[2]), why);
        return 0;
    }
    if (conv) stk__conv_run(conv, buf, dst, x->raw_bytes / fi->itemsize);
    stk__free(chunk);
    return 0;
}

static int read_stored(const stk_dataset *ds, const stk__shard *sh, const stk_extent *x,
                       uint64_t record, size_t field, void *buf, size_t cap, uint32_t flags,
                       stk_error *err);

int stk_dataset_read(const stk_dataset *ds, uint64_t record, size_t field, void *buf,
                     size_t cap, size_t *len, uint32_t flags, stk_error *err) {
    stk_extent x;
    int rc = stk_dataset_get(ds, record, field, &x, err);
    if (rc) return rc;
    if (len) *len = (size_t)x.raw_bytes;
    if (x.raw_bytes > cap)
        return stk__err(err, -ENOSPC,
                        "record %llu field '%s' needs %llu bytes; the buffer has %zu",
                        (unsigned long long)record, ds->fields[field].name,
                        (unsigned long long)x.raw_bytes, cap);
    const stk__shard *sh = &ds->shards[x.shard];
    if (ds->caps.source) return read_in_place(ds, sh, &x, record, field, buf, err);
    if (ds->caps.lazy) {
        /* The whole record: a verified read checks it whole. */
        stk__range r = {x.shard, 0, 0};
        stk__record_span(ds, sh, stk__entry(ds, sh, record - sh->first), &r.lo, &r.hi);
        if ((rc = stk__dataset_ensure(ds, x.shard, r.lo, r.hi, err))) return rc;
        x.data = sh->map + x.offset;
        rc = read_stored(ds, sh, &x, record, field, buf, cap, flags, err);
        stk__dataset_release(ds, &r, 1);
        return rc;
    }
    return read_stored(ds, sh, &x, record, field, buf, cap, flags, err);
}

/* Record `record`'s field `field` as stored (x), into buf. */
static int read_stored(const stk_dataset *ds, const stk__shard *sh, const stk_extent *x_,
                       uint64_t record, size_t field, void *buf, size_t cap, uint32_t flags,
                       stk_error *err) {
    stk_extent x = *x_;
    if (flags & STK_READ_VERIFY) {
        const uint64_t *e = stk__entry(ds, sh, record - sh->first);
        uint64_t a, b;
        stk__record_span(ds, sh, e, &a, &b);
        if (stk__hash(sh->map + a, (size_t)(b - a)) != e[0])
            return stk__err(err, STK_ECHECKSUM,
                            "%s: record %llu (shard record %llu): checksum mismatch",
                            sh->path, (unsigned long long)record,
                            (unsigned long long)(record - sh->first));
    }
    if (x.codec == STK_CODEC_NONE) {
        /* buf may be NULL for an empty field; memcpy must not see it. */
        if (x.raw_bytes) memcpy(buf, x.data, (size_t)x.raw_bytes);
        return 0;
    }
    size_t r = ZSTD_decompress(buf, cap, x.data, (size_t)x.stored_bytes);
    if (ZSTD_isError(r) || r != x.raw_bytes)
        return stk__err(err, STK_ECODEC,
                        "%s: record %llu field '%s': zstd frame does not decode to %llu "
                        "bytes (%s)",
                        sh->path, (unsigned long long)record, ds->fields[field].name,
                        (unsigned long long)x.raw_bytes,
                        ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
    return 0;
}

/* ---- verify ---- */

void stk_verify_options_init(stk_verify_options *o) {
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->max_problems = 100;
}

typedef struct verify_job {
    const stk_dataset *ds;
    const stk_verify_options *opt;
    atomic_size_t next_shard;
    atomic_uint_fast64_t bytes_done;
    uint64_t bytes_total;
    atomic_uint_fast64_t records;
    atomic_bool stop;
    pthread_mutex_t lock; /* callbacks, problems and `first` */
    uint64_t problems;
    uint64_t progress_mark;
    /* The first problem in dataset order. */
    size_t first_shard;
    uint64_t first_pos;
    stk_error first;
} verify_job;

static void report(verify_job *j, size_t shard, uint64_t pos, const stk_error *e) {
    pthread_mutex_lock(&j->lock);
    if (j->problems < j->opt->max_problems || j->opt->max_problems == 0) {
        j->problems++;
        if (j->opt->on_problem) j->opt->on_problem(j->opt->ctx, e);
        if (j->first.code == 0 || shard < j->first_shard ||
            (shard == j->first_shard && pos < j->first_pos)) {
            j->first = *e;
            j->first_shard = shard;
            j->first_pos = pos;
        }
    }
    if (j->opt->max_problems && j->problems >= j->opt->max_problems) j->stop = true;
    pthread_mutex_unlock(&j->lock);
}

static void progress(verify_job *j, uint64_t add) {
    uint64_t done = atomic_fetch_add(&j->bytes_done, add) + add;
    if (!j->opt->on_progress) return;
    pthread_mutex_lock(&j->lock);
    if (done >= j->progress_mark || done == j->bytes_total) {
        j->opt->on_progress(j->opt->ctx, done, j->bytes_total);
        j->progress_mark = done + (32u << 20);
    }
    pthread_mutex_unlock(&j->lock);
}

#define VERIFY_CHUNK (8u << 20)

/* Checks one shard chunk by chunk, so that the block and record checksums
 * of a chunk are computed while its bytes are still in cache. */
/* In place there are no checksums: checks that the file is still what was
 * indexed and that every byte the index names can be read. */
static void verify_in_place(verify_job *j, size_t s) {
    const stk__shard *sh = &j->ds->shards[s];
    stk_error e;
    struct stat st;
    int fd = stk__open(sh->path, O_RDONLY, 0);
    if (fd < 0) {
        stk__err(&e, STK_ESTALE, "%s: cannot open: %s (re-run `stoker index`)", sh->path,
                 stk_strerror(fd));
        report(j, s, 0, &e);
        return;
    }
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != sh->size ||
        (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != sh->mtime_ns) {
        stk__err(&e, STK_ESTALE, "%s: changed since it was indexed: re-run `stoker index`",
                 sh->path);
        report(j, s, 0, &e);
        close(fd);
        return;
    }
    uint8_t *buf = stk__malloc(VERIFY_CHUNK);
    for (uint64_t a = sh->data_off; buf && a < sh->data_end && !j->stop; a += VERIFY_CHUNK) {
        size_t n = (size_t)STK__MIN((uint64_t)VERIFY_CHUNK, sh->data_end - a);
        ssize_t got = stk__pread_full(fd, buf, n, a);
        if (got != (ssize_t)n) {
            stk__err(&e, got < 0 ? (int)got : STK_ETRUNCATED,
                     "%s: record %llu: reading at byte %llu: %s", sh->path,
                     (unsigned long long)stk__dataset_record_at(j->ds, sh, a),
                     (unsigned long long)a, got < 0 ? stk_strerror((int)got) : "the file shrank");
            report(j, s, a, &e);
            break;
        }
        progress(j, n);
    }
    if (!buf) {
        stk__err(&e, -ENOMEM, "%s: out of memory", sh->path);
        report(j, s, 0, &e);
    }
    atomic_fetch_add(&j->records, sh->nrec);
    stk__free(buf);
    close(fd);
}

static void verify_shard(verify_job *j, size_t s) {
    const stk_dataset *ds = j->ds;
    const stk__shard *sh = &ds->shards[s];
    if (!ds->caps.checksums) {
        verify_in_place(j, s);
        return;
    }
    stk_error ee;
    if (stk__dataset_ensure(ds, s, 0, sh->size, &ee)) {
        report(j, s, 0, &ee);
        return;
    }
    const uint8_t *map = sh->map;
    uint64_t chunk = STK__MAX((uint64_t)VERIFY_CHUNK, sh->block_size);
    uint64_t r = 0; /* next record to finish */
    XXH3_state_t *st = stk__aligned_alloc(64, sizeof *st);
    bool streaming = false;
    uint64_t span_a = 0, span_b = 0;
    if (!st) {
        stk_error e;
        stk__err(&e, -ENOMEM, "%s: out of memory", sh->path);
        report(j, s, 0, &e);
        return;
    }
    XXH3_INITSTATE(st);
    madvise((void *)map, (size_t)sh->size, MADV_SEQUENTIAL);
    for (uint64_t c0 = sh->data_off; c0 < sh->data_end && !j->stop; c0 += chunk) {
        uint64_t c1 = STK__MIN(c0 + chunk, sh->data_end);
        madvise((void *)(map + (c0 & ~(uint64_t)4095)),
                (size_t)STK__MIN(chunk * 2, sh->size - (c0 & ~(uint64_t)4095)),
                MADV_WILLNEED);
        for (uint64_t b = c0; b < c1; b += sh->block_size) {
            uint64_t bi = (b - sh->data_off) / sh->block_size;
            uint64_t n = STK__MIN((uint64_t)sh->block_size, sh->data_end - b);
            if (stk__hash(map + b, (size_t)n) != sh->blocks[bi]) {
                stk_error e;
                /* The records that overlap this block: [lo, hi).  A block
                 * may hold many small records; the block checksum cannot
                 * tell which of them is damaged (the record checksums do),
                 * so name them all rather than just the first. */
                uint64_t lo = r, hi;
                while (lo < sh->nrec) {
                    uint64_t a, z;
                    stk__record_span(ds, sh, stk__entry(ds, sh, lo), &a, &z);
                    if (z > b) break;
                    lo++;
                }
                for (hi = lo; hi < sh->nrec; hi++) {
                    uint64_t a, z;
                    stk__record_span(ds, sh, stk__entry(ds, sh, hi), &a, &z);
                    if (a >= b + n) break;
                }
                char which[64];
                if (hi == lo)
                    snprintf(which, sizeof which, "no record");
                else if (hi - lo == 1)
                    snprintf(which, sizeof which, "record %llu",
                             (unsigned long long)(sh->first + lo));
                else
                    snprintf(which, sizeof which, "records %llu..%llu",
                             (unsigned long long)(sh->first + lo),
                             (unsigned long long)(sh->first + hi - 1));
                stk__err(&e, STK_ECHECKSUM,
                         "%s: block %llu (bytes %llu..%llu, %s) checksum mismatch",
                         sh->path, (unsigned long long)bi, (unsigned long long)b,
                         (unsigned long long)(b + n), which);
                /* Ordered at the block's end: damage inside a record is
                 * also a record problem, which names the one record and
                 * so comes first. */
                report(j, s, b + n, &e);
            }
        }
        /* Records that end inside this chunk are finished; one that
         * continues past it is hashed piecewise. */
        while (r < sh->nrec) {
            const uint64_t *e = stk__entry(ds, sh, r);
            if (!streaming) stk__record_span(ds, sh, e, &span_a, &span_b);
            if (!streaming && span_b <= c1) {
                uint64_t h = stk__hash(map + span_a, (size_t)(span_b - span_a));
                if (h != e[0]) goto bad;
                r++;
                continue;
            }
            if (!streaming) {
                XXH3_64bits_reset(st);
                streaming = true;
            }
            uint64_t from = STK__MAX(span_a, c0), to = STK__MIN(span_b, c1);
            if (to > from) stk__hash_update(st, map + from, (size_t)(to - from));
            if (span_b > c1) break;
            streaming = false;
            if (XXH3_64bits_digest(st) != e[0]) goto bad;
            r++;
            continue;
        bad: {
            stk_error er;
            stk__err(&er, STK_ECHECKSUM,
                     "%s: record %llu (shard record %llu): checksum mismatch", sh->path,
                     (unsigned long long)(sh->first + r), (unsigned long long)r);
            report(j, s, span_a, &er);
            r++;
        }
        }
        progress(j, c1 - c0);
    }
    /* Records with no bytes at the very end of the data region. */
    while (r < sh->nrec && !j->stop) {
        uint64_t a, z;
        const uint64_t *e = stk__entry(ds, sh, r);
        stk__record_span(ds, sh, e, &a, &z);
        if (stk__hash(map + a, (size_t)(z - a)) != e[0]) {
            stk_error er;
            stk__err(&er, STK_ECHECKSUM, "%s: record %llu: checksum mismatch", sh->path,
                     (unsigned long long)(sh->first + r));
            report(j, s, a, &er);
        }
        r++;
    }
    /* The padding between the data and the index is zero, so that no byte
     * of the file goes unchecked. */
    for (uint64_t b = sh->data_end; b < stk__align_up(sh->data_end, STK__INDEX_ALIGN); b++)
        if (map[b]) {
            stk_error er;
            stk__err(&er, STK_ECORRUPT, "%s: byte %llu, padding before the index, is not zero",
                     sh->path, (unsigned long long)b);
            report(j, s, b, &er);
            break;
        }
    atomic_fetch_add(&j->records, sh->nrec);
    madvise((void *)map, (size_t)sh->size, MADV_NORMAL);
    stk__free(st);
}

static void *verify_thread(void *arg) {
    verify_job *j = arg;
    stk__thread_name("stk-verify");
    for (;;) {
        size_t s = atomic_fetch_add(&j->next_shard, 1);
        if (s >= j->ds->nshards || j->stop) break;
        verify_shard(j, s);
    }
    return NULL;
}

int stk_dataset_verify(const stk_dataset *ds, const stk_verify_options *opts,
                       stk_verify_report *rep, stk_error *err) {
    if (!ds) return stk__err(err, -EINVAL, "NULL dataset");
    stk_verify_options defaults;
    if (!opts) {
        stk_verify_options_init(&defaults);
        opts = &defaults;
    }
    verify_job j;
    memset(&j, 0, sizeof j);
    j.ds = ds;
    j.opt = opts;
    atomic_init(&j.next_shard, 0);
    atomic_init(&j.bytes_done, 0);
    atomic_init(&j.records, 0);
    atomic_init(&j.stop, false);
    pthread_mutex_init(&j.lock, NULL);
    for (size_t i = 0; i < ds->nshards; i++)
        j.bytes_total += ds->shards[i].data_end - ds->shards[i].data_off;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = opts->threads > 0 ? (size_t)opts->threads : (size_t)(ncpu > 0 ? ncpu : 1);
    if (nt > ds->nshards) nt = ds->nshards ? ds->nshards : 1;
    pthread_t tids[256];
    if (nt > 256) nt = 256;
    size_t started = 0;
    for (size_t i = 1; i < nt; i++) {
        if (pthread_create(&tids[i], NULL, verify_thread, &j) != 0) break;
        started++;
    }
    verify_thread(&j);
    for (size_t i = 0; i < started; i++) pthread_join(tids[i + 1], NULL);
    pthread_mutex_destroy(&j.lock);
    if (rep) {
        rep->records_checked = atomic_load(&j.records);
        rep->bytes_checked = atomic_load(&j.bytes_done);
        rep->problems = j.problems;
    }
    if (j.first.code) {
        if (err) *err = j.first;
        return j.first.code;
    }
    return 0;
}

double stk_dataset_resident(const stk_dataset *ds) {
    if (!ds) return -1;
    uint64_t resident = 0, total = 0;
    unsigned char vec[4096];
    long page = sysconf(_SC_PAGESIZE);
    for (size_t s = 0; s < ds->nshards; s++) {
        const stk__shard *sh = &ds->shards[s];
        if (!sh->map) return -1;
        for (uint64_t off = 0; off < sh->size; off += (uint64_t)page * sizeof vec) {
            size_t len = (size_t)STK__MIN((uint64_t)page * sizeof vec, sh->size - off);
            if (mincore((void *)(sh->map + off), len, vec) != 0) return -1;
            size_t pages = (len + (size_t)page - 1) / (size_t)page;
            for (size_t k = 0; k < pages; k++) resident += vec[k] & 1;
            total += pages;
        }
    }
    return total ? (double)resident / (double)total : 1.0;
}
