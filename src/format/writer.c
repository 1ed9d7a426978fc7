/*
 * writer.c: packing records into shards, and publishing the manifest.
 *
 * A writer streams records into the current shard: each field's bytes are
 * padded to the alignment and appended; their checksums (per record, and per
 * block of the data region) are computed on the way, so every byte is written
 * once and never read back.  Small pieces gather in a staging buffer; large
 * ones go straight from the caller's memory to the file.  When a shard is full
 * its index, block table and header are written, its write-back is started,
 * and a new shard begins.  Nothing becomes visible as a dataset until finish()
 * publishes the manifest.
 */
#define _GNU_SOURCE
#include "format.h"
#include "../core/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

/* The data region is written in pieces that end on the file's 2 MiB
 * boundaries (STAGE_BYTES), staged up to the next one.  The page cache
 * then holds what was written in 2 MiB folios, which the loader's mapping
 * covers with 2 MiB pages: a dataset read right after it was written
 * gathers as fast as one the loader's warm-up read in.  Written in 1 MiB
 * pieces at any offset, as before, it stayed in 4 KiB folios: 1 GB of
 * 512-byte records in four shards had 6 MiB of 991 mapped in 2 MiB pages
 * (FilePmdMapped), against 974 now (all but each shard's first 2 MiB and
 * its index), and one worker gathered them at 6.3 M records/s unchecked
 * and 2.8 checked, against 8.7 and 4.7.  docs/ARCHITECTURE.md, "Small
 * records: gathering from the mapping". */
#define STAGE_BYTES (2u << 20)
#define MAX_PENDING_SYNC 4       /* finished shards whose write-back runs */
#define STATS_SLICE (1u << 20)   /* a field's bytes gathered and written at once */

static const uint8_t zeros[4096];

struct stk_writer {
    /* First: XXH3 states want 64-byte alignment, and the struct is allocated
     * with that alignment. */
    XXH3_state_t rec_state;
    XXH3_state_t blk_state;

    char *dir;
    stk_field *fields;
    stk__fieldinfo *info;
    size_t nfields;
    stk_writer_options opt;
    char *attrs;
    char *inputs; /* opts->inputs, copied */
    char *inputs_list; /* opts->inputs_list, copied */
    uint64_t schema_hash;
    /* Version 2 (dense): records at data offset + r * layout.stride, the
     * index the records' checksums alone.  version: the manifest's, the
     * newest of every shard's (those a resumed pack keeps included). */
    stk__layout layout;
    bool dense;
    uint32_t version;
    char prefix[32];  /* "", "part-00003-", or "r<tag>-" when replacing */
    char marker[48];  /* ".packing" or ".packing-part-00003" */
    /* Locks held while writing (flock: they die with the process): the
     * dataset's (exclusive, shared by the writers of parts) and a part's. */
    int lock_fd, part_lock_fd;
    /* Replacing a complete dataset: it stays readable until the new
     * manifest is in place; its files go after. */
    bool replacing;

    /* The shard being written. */
    int fd;
    char *shard_path;
    uint64_t pos;
    uint64_t *index;
    size_t index_cap; /* in records */
    uint64_t nrec_shard;
    uint64_t blk_filled;
    uint64_t *blocks;
    size_t nblocks, blocks_cap;
    uint8_t *buf;
    size_t buf_len;
    uint64_t buf_off;

    /* Compression scratch: every compressed field of one record. */
    ZSTD_CCtx *cctx;
    uint8_t *zbuf;
    size_t zcap;
    const void **stored_ptr; /* per field, for the record being appended */
    uint64_t *stored_len;

    stk__shard_entry *shards;
    size_t nshards, shards_cap;
    int pending[MAX_PENDING_SYNC];
    size_t pending_idx[MAX_PENDING_SYNC]; /* their entries in shards[] */
    size_t npending;

    /* Statistics of the numeric fields (format/stats.c): the shard being
     * written's, and every finished shard's joined in shard order; a
     * finished shard's total is kept beside its descriptor until the shard
     * is durable and journalled with it.  Joined per shard, in order, so
     * that a resumed pack, which takes up the total of the shards it keeps,
     * ends with the very numbers of an uninterrupted one.  stats_off: a
     * resumed pack that could not take them up publishes none. */
    stk__stats *cur, *total;
    stk__stats *pending_stats[MAX_PENDING_SYNC];
    bool stats_off;

    uint64_t records;
    uint64_t bytes_written;
    bool failed, finished;
};

void stk_writer_options_init(stk_writer_options *o) {
    memset(o, 0, sizeof *o);
    o->shard_bytes = 256ull << 20;
    o->align = 64;
    o->block_size = 64u << 10;
    o->part_index = 0;
    o->part_count = 1;
    o->overwrite = 0;
    o->sync = 1;
    o->attrs_json = NULL;
    o->inputs = NULL;
    o->inputs_list = NULL;
}

static int werr(stk_writer *w, stk_error *err, int code, const char *fmt, ...)
    STK__PRINTF(4, 5);
static int werr(stk_writer *w, stk_error *err, int code, const char *fmt, ...) {
    w->failed = true;
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int check_options(const stk_writer_options *o, stk_error *err) {
    if (o->shard_bytes < 4096)
        return stk__err(err, -EINVAL, "shard_bytes must be at least 4096, not %llu",
                        (unsigned long long)o->shard_bytes);
    if (!stk__is_pow2(o->align) || o->align > 4096)
        return stk__err(err, -EINVAL,
                        "align must be a power of two from 1 to 4096, not %u",
                        o->align);
    if (!stk__is_pow2(o->block_size) || o->block_size < 4096 ||
        o->block_size > (16u << 20))
        return stk__err(err, -EINVAL,
                        "block_size must be a power of two from 4096 to 16 MiB, "
                        "not %u",
                        o->block_size);
    if (o->format_version > STK_FORMAT_VERSION)
        return stk__err(err, -EINVAL, "format_version must be 0 (chosen from the schema), 1 or %d, "
                        "not %u", STK_FORMAT_VERSION, o->format_version);
    bool open = o->part_count == STK_PARTS_OPEN;
    if (o->part_count == 0 || o->part_index >= o->part_count ||
        (o->part_count > 99999 && !open) || (open && o->part_index >= 99999))
        return stk__err(err, -EINVAL,
                        "part %u of %u: parts are numbered 0..count-1, with "
                        "count from 1 to 99999 (or STK_PARTS_OPEN, index below 99999)",
                        o->part_index, o->part_count);
    return 0;
}

static int journal_shard(stk_writer *w, size_t idx, const stk__stats *through);
static int resume_stats(stk_writer *w);

/* The inputs_list a journal recorded (its "input " lines, without the
 * word), from stk__malloc; NULL when none. */
static char *journal_inputs_list(const char *text) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, "\ninput ")); p++) n += strcspn(p + 7, "\n") + 1;
    if (!n) return NULL;
    char *out = stk__malloc(n + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = text; (p = strstr(p, "\ninput ")); p++) {
        size_t k = strcspn(p + 7, "\n");
        memcpy(o, p + 7, k);
        o += k;
        *o++ = '\n';
    }
    *o = '\0';
    return out;
}

/* The journal's head: what it is, the schema, the inputs (and each input
 * on an "input " line); from stk__malloc. */
static char *journal_head(const stk_writer *w, bool resumed, size_t *len) {
    size_t list = w->inputs_list ? strlen(w->inputs_list) : 0, lines = 0;
    for (size_t i = 0; i < list; i++) lines += w->inputs_list[i] == '\n';
    size_t cap = 400 + list + 6 * lines;
    char *h = stk__malloc(cap);
    if (!h) return NULL;
    int n = resumed ? snprintf(h, cap, "stoker pack in progress (resumed), pid %ld\n",
                               (long)getpid())
                    : snprintf(h, cap, "stoker pack in progress, pid %ld, started %lld\n",
                               (long)getpid(), (long long)time(NULL));
    n += snprintf(h + n, cap - (size_t)n, "schema %016llx\n%s%s%s",
                  (unsigned long long)w->schema_hash, w->inputs ? "inputs " : "",
                  w->inputs ? w->inputs : "", w->inputs ? "\n" : "");
    size_t at = (size_t)n;
    for (const char *p = w->inputs_list; p && *p;) {
        size_t k = strcspn(p, "\n");
        memcpy(h + at, "input ", 6);
        memcpy(h + at + 6, p, k);
        at += 6 + k;
        h[at++] = '\n';
        p += k + (p[k] == '\n');
    }
    h[at] = '\0';
    *len = at;
    return h;
}

/* Takes up an interrupted pack from its journal: keeps the shards the
 * journal lists that are still intact, removes every other shard file of
 * this writer, and continues after the kept ones. */
static int resume_journal(stk_writer *w, stk_error *err) {
    char *mpath = stk__path_join(w->dir, w->marker), *text = NULL;
    size_t len = 0;
    int rc = mpath ? stk__read_file(mpath, &text, &len) : -ENOMEM;
    stk__free(mpath);
    if (rc) return stk__err(err, rc, "%s: cannot read the pack journal %s: %s", w->dir,
                            w->marker, stk_strerror(rc));
    char want[32];
    snprintf(want, sizeof want, "schema %016llx\n", (unsigned long long)w->schema_hash);
    if (!strstr(text, want)) {
        stk__free(text);
        return stk__err(err, -EINVAL,
                        "%s: cannot resume: the interrupted pack used another schema (start "
                        "again with overwrite / --force)",
                        w->dir);
    }
    if (w->inputs) {
        /* The journal's "inputs" line, whole. */
        const char *at = strstr(text, "\ninputs ");
        size_t n = at ? strcspn(at + 8, "\n") : 0;
        if (!at || n != strlen(w->inputs) || memcmp(at + 8, w->inputs, n) != 0) {
            char *was = journal_inputs_list(text), what[512];
            bool named = at && stk__inputs_diff(was, w->inputs_list, what, sizeof what);
            bool alike = at && !named && was && w->inputs_list;
            stk__free(was);
            stk__free(text);
            if (named)
                return stk__err(err, -EINVAL,
                                "%s: cannot resume: an input changed since the interrupted "
                                "pack began: %s; start again with overwrite / --force",
                                w->dir, what);
            return stk__err(err, -EINVAL,
                            "%s: cannot resume: the inputs are not those of the interrupted "
                            "pack (%s); start again with overwrite / --force",
                            w->dir,
                            !at ? "it did not record them"
                            : alike ? "the same files, unchanged, but other options"
                                    : "they differ: files added, removed, rewritten or moved, "
                                      "or other options");
        }
    }
    for (char *line = strtok(text, "\n"); line && rc == 0; line = strtok(NULL, "\n")) {
        char file[128];
        unsigned long long recs, bytes, hh;
        if (sscanf(line, "shard %127s %llu %llu %llx", file, &recs, &bytes, &hh) != 4) continue;
        char expect[64];
        snprintf(expect, sizeof expect, "%sshard-%06zu%s", w->prefix, w->nshards, STK__SHARD_EXT);
        if (strcmp(expect, file) != 0) break;
        /* Keep it only if it is whole: its size and header checksum. */
        char *sp = stk__path_join(w->dir, file);
        int fd = sp ? stk__open(sp, O_RDONLY, 0) : -ENOMEM;
        stk__free(sp);
        if (fd < 0) break;
        struct stat st;
        uint8_t h[8];
        bool ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == bytes &&
                  stk__pread_full(fd, h, 8, STK__H_HEADER_HASH) == 8 && stk__ld64(h) == hh &&
                  stk__pread_full(fd, h, 4, STK__H_VERSION) == 4;
        close(fd);
        if (!ok) break;
        w->version = STK__MAX(w->version, stk__ld32(h)); /* the header's checksum held */
        if (w->nshards == w->shards_cap) {
            size_t cap = w->shards_cap ? w->shards_cap * 2 : 16;
            stk__shard_entry *se = stk__realloc(w->shards, cap * sizeof *se);
            if (!se) {
                rc = -ENOMEM;
                break;
            }
            w->shards = se;
            w->shards_cap = cap;
        }
        stk__shard_entry *e = &w->shards[w->nshards];
        e->file = stk__strdup(file);
        if (!e->file) {
            rc = -ENOMEM;
            break;
        }
        e->records = recs;
        e->bytes = bytes;
        e->header_hash = hh;
        w->nshards++;
        w->records += recs;
    }
    stk__free(text);
    if (rc) return stk__err(err, rc, "out of memory");
    if ((rc = resume_stats(w))) return stk__err(err, rc, "out of memory");
    /* Shards after the kept ones are partial: remove them, and rewrite the
     * journal to list exactly what is kept. */
    DIR *d = opendir(w->dir);
    if (!d) return stk__err(err, -errno, "%s: %s", w->dir, stk_strerror(-errno));
    struct dirent *de;
    size_t plen = strlen(w->prefix);
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 4 || strcmp(de->d_name + n - 4, STK__SHARD_EXT) != 0) continue;
        if (strncmp(de->d_name, w->prefix, plen) != 0) continue;
        if (!plen && strncmp(de->d_name, "part-", 5) == 0) continue;
        bool kept = false;
        for (size_t i = 0; i < w->nshards && !kept; i++) kept = !strcmp(w->shards[i].file, de->d_name);
        if (!kept) unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    size_t hn = 0;
    char *head = journal_head(w, true, &hn);
    rc = head ? stk__write_file_atomic(w->dir, w->marker, head, hn, w->opt.sync) : -ENOMEM;
    stk__free(head);
    if (rc)
        return stk__err(err, rc, "%s: cannot rewrite the pack journal: %s", w->dir,
                        stk_strerror(rc));
    for (size_t i = 0; i < w->nshards; i++)
        if ((rc = journal_shard(w, i, NULL)))
            return stk__err(err, rc, "%s: cannot rewrite the pack journal: %s", w->dir,
                            stk_strerror(rc));
    return 0;
}

int stk_writer_create(const char *path, const stk_field *fields, size_t nfields,
                      const stk_writer_options *opts, stk_writer **out,
                      stk_error *err) {
    stk_writer_options defaults;
    if (!opts) {
        stk_writer_options_init(&defaults);
        opts = &defaults;
    }
    if (!path || !*path || !out)
        return stk__err(err, -EINVAL, "stk_writer_create: path and out are required");
    *out = NULL;
    int rc = check_options(opts, err);
    if (rc) return rc;
    if ((rc = stk__schema_check(fields, nfields, NULL, err))) return rc;
    /* The loader delivers a ragged field's offsets as "<name>_offsets":
     * that name is taken wherever <name> is a field. */
    for (size_t i = 0; i < nfields; i++) {
        size_t n = strlen(fields[i].name);
        if (n <= 8 || strcmp(fields[i].name + n - 8, "_offsets") != 0) continue;
        for (size_t j = 0; j < nfields; j++)
            if (strlen(fields[j].name) == n - 8 && !strncmp(fields[j].name, fields[i].name, n - 8))
                return stk__err(err, -EINVAL,
                                "field '%s': the loader delivers the offsets of field '%s' "
                                "under that name; rename one of them",
                                fields[i].name, fields[j].name);
    }

    if (opts->inputs) {
        size_t n = strlen(opts->inputs), ok = strspn(opts->inputs,
                                                    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR"
                                                    "STUVWXYZ0123456789._:-");
        if (n == 0 || n > 128 || ok != n)
            return stk__err(err, -EINVAL,
                            "inputs: 1 to 128 letters, digits and . _ : - (got %zu characters%s)",
                            n, ok != n ? ", some of them others" : "");
    }
    if (opts->inputs_list && !stk__inputs_list_valid(opts->inputs_list))
        return stk__err(err, -EINVAL,
                        "inputs_list: lines of NAME, SIZE, MTIME_NS and HASH parted by tabs, "
                        "each ending in a newline, at most 64 MiB");
    stk_writer *w = stk__aligned_alloc(64, sizeof *w);
    if (!w) return stk__err(err, -ENOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->lock_fd = w->part_lock_fd = -1;
    w->opt = *opts;
    w->opt.attrs_json = NULL;
    w->opt.inputs = NULL;
    w->opt.inputs_list = NULL;
    w->nfields = nfields;
    bool part = opts->part_count > 1;
    if (part) {
        snprintf(w->prefix, sizeof w->prefix, "part-%05u-", opts->part_index);
        snprintf(w->marker, sizeof w->marker, ".packing-part-%05u", opts->part_index);
    } else {
        snprintf(w->marker, sizeof w->marker, ".packing");
    }
    w->dir = stk__strdup(path);
    w->info = stk__calloc(nfields, sizeof *w->info);
    w->stored_ptr = stk__calloc(nfields, sizeof *w->stored_ptr);
    w->stored_len = stk__calloc(nfields, sizeof *w->stored_len);
    w->buf = stk__aligned_alloc(4096, STAGE_BYTES);
    if (!w->dir || !w->info || !w->stored_ptr || !w->stored_len || !w->buf ||
        stk__schema_copy(fields, nfields, &w->fields) != 0) {
        stk_writer_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    stk__schema_check(w->fields, nfields, w->info, NULL);
    w->schema_hash = stk__schema_hash(w->fields, nfields);
    if (stk__layout_init(&w->layout, w->fields, w->info, nfields, opts->align)) {
        stk_writer_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    if (opts->format_version == 2 && !w->layout.ok) {
        stk_writer_free(w);
        return stk__err(err, -EINVAL,
                        "format_version 2 holds only fixed-shape, uncompressed fields; this "
                        "schema has a ragged or compressed one (use 0 or 1)");
    }
    w->dense = w->layout.ok && opts->format_version != 1;
    w->version = w->dense ? 2 : 1;
    bool stats_ok = stk__stats_new(w->fields, nfields, true, &w->cur) == 0 &&
                    stk__stats_new(w->fields, nfields, false, &w->total) == 0;
    for (size_t i = 0; i < MAX_PENDING_SYNC && stats_ok; i++)
        stats_ok = stk__stats_new(w->fields, nfields, false, &w->pending_stats[i]) == 0;
    if (!stats_ok) {
        stk_writer_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    if ((rc = stk__attrs_normalise(opts->attrs_json, &w->attrs, err))) {
        stk_writer_free(w);
        return rc;
    }
    if ((opts->inputs && !(w->inputs = stk__strdup(opts->inputs))) ||
        (opts->inputs_list && !(w->inputs_list = stk__strdup(opts->inputs_list)))) {
        stk_writer_free(w);
        return stk__err(err, -ENOMEM, "out of memory");
    }

    /* A directory that holds anything stoker did not write is refused
     * before anything is created in it (the lock file included), with or
     * without overwrite: it is not a dataset, and its files are not ours. */
    if ((rc = stk__check_writable_dir(path, err))) {
        stk_writer_free(w);
        return rc;
    }
    if ((rc = stk__mkdir_p(path)) != 0) {
        stk_writer_free(w);
        return stk__err(err, rc, "%s: cannot create the dataset directory: %s", path,
                        stk_strerror(rc));
    }
    /* One writer at a time: a dataset's writer holds its lock exclusively;
     * the writers of its parts share it and hold their part's. */
    if ((rc = stk__take_lock(path, STK__LOCK_NAME, !part, &w->lock_fd, err))) {
        stk_writer_free(w);
        return rc;
    }
    if (part) {
        char ln[48];
        snprintf(ln, sizeof ln, ".stoker-part-%05u.lock", opts->part_index);
        if ((rc = stk__take_lock(path, ln, true, &w->part_lock_fd, err))) {
            stk_writer_free(w);
            return rc;
        }
    }
    char partman[32];
    snprintf(partman, sizeof partman, "part-%05u.json", opts->part_index);
    const char *own_manifest = part ? partman : STK__MANIFEST;
    bool merged = stk__exists_in(path, STK__MANIFEST);
    int leftovers = stk__remove_files(path, part ? w->prefix : "", true);
    if (opts->resume && !merged && !stk__exists_in(path, own_manifest) && stk__exists_in(path, w->marker)) {
        if ((rc = resume_journal(w, err))) {
            stk_writer_free(w);
            return rc;
        }
        *out = w;
        return 0;
    }
    if (!opts->overwrite) {
        const char *why = NULL;
        if (merged)
            why = part ? "a merged dataset already exists there"
                       : "a dataset already exists there";
        else if (stk__exists_in(path, own_manifest))
            why = "this part was already written";
        else if (leftovers > 0 || stk__exists_in(path, w->marker))
            why = "it holds files of an interrupted pack";
        if (why) {
            stk_writer_free(w);
            return stk__err(err, -EEXIST, "%s: %s (pass overwrite / --force to replace it)",
                            path, why);
        }
    } else if ((rc = stk__check_replaceable(path, part && !merged ? w->prefix : "",
                                       part && !merged ? partman : NULL, err))) {
        stk_writer_free(w);
        return rc;
    } else if (merged && !part) {
        /* Replacing a complete dataset: it stays readable (and whole)
         * until the new one is: the new shards take names of their own,
         * the new manifest replaces the old in one rename, and only then
         * do the old files go (stk_writer_finish).  A full disk or a crash
         * on the way leaves the old dataset as it was. */
        uint32_t tag = 0;
        if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != (ssize_t)sizeof tag)
            tag = (uint32_t)(stk__now_ns() ^ (uint64_t)getpid());
        snprintf(w->prefix, sizeof w->prefix, "r%08x-", tag);
        w->replacing = true;
    } else {
        /* Unpublish first, so that a crash from here on leaves a dataset that
         * reads as incomplete rather than a manifest over missing shards. */
        char *m = stk__path_join(path, part && !merged ? partman : STK__MANIFEST);
        if (m && unlink(m) != 0 && errno != ENOENT) rc = -errno;
        stk__free(m);
        if (!rc && opts->sync) rc = stk__fsync_dir(path);
        if (!rc) {
            int r = stk__remove_files(path, part && !merged ? w->prefix : "", false);
            rc = r < 0 ? r : 0;
        }
        if (rc) {
            stk_writer_free(w);
            return stk__err(err, rc, "%s: cannot remove the old dataset: %s", path,
                            stk_strerror(rc));
        }
    }
    /* Statistics an earlier pack left are not this one's. */
    char stats_name[64];
    snprintf(stats_name, sizeof stats_name, "%s.stats", w->marker);
    char *sp = stk__path_join(path, stats_name);
    if (sp) unlink(sp);
    stk__free(sp);
    size_t n = 0;
    char *note = journal_head(w, false, &n);
    rc = note ? stk__write_file_atomic(path, w->marker, note, n, opts->sync) : -ENOMEM;
    stk__free(note);
    if (rc) {
        stk__err(err, rc, "%s: cannot write %s: %s", path, w->marker, stk_strerror(rc));
        stk_writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* ---- the shard being written ---- */

/* Writes what is staged, at the end of a shard's data. */
static int flush_stage(stk_writer *w) {
    if (!w->buf_len) return 0;
    int rc = stk__pwrite_full(w->fd, w->buf, w->buf_len, w->buf_off);
    if (rc) return rc;
    w->bytes_written += w->buf_len;
    w->buf_off += w->buf_len;
    w->buf_len = 0;
    return 0;
}

static int push_block(stk_writer *w) {
    if (w->nblocks == w->blocks_cap) {
        size_t cap = w->blocks_cap ? w->blocks_cap * 2 : 256;
        uint64_t *b = stk__realloc(w->blocks, cap * sizeof *b);
        if (!b) return -ENOMEM;
        w->blocks = b;
        w->blocks_cap = cap;
    }
    w->blocks[w->nblocks++] = XXH3_64bits_digest(&w->blk_state);
    XXH3_64bits_reset(&w->blk_state);
    w->blk_filled = 0;
    return 0;
}

/* Queues n bytes for the data region (STAGE_BYTES).  Bytes that reach
 * one of the file's 2 MiB boundaries are written at once, up to the last
 * one they reach, together with what was staged (one pwritev: the staged
 * bytes are not copied again, nor the piece's); the rest, short of the
 * next boundary, is staged.  So the staged bytes never reach a boundary,
 * and only the tail of a piece is copied. */
static int stage(stk_writer *w, const uint8_t *q, size_t left) {
    uint64_t at = w->buf_off + w->buf_len;
    uint64_t cut = (at + left) / STAGE_BYTES * STAGE_BYTES; /* the last boundary reached */
    if (cut > at) {
        size_t n = (size_t)(cut - at);
        int rc = stk__pwrite2_full(w->fd, w->buf, w->buf_len, q, n, w->buf_off);
        if (rc) return rc;
        w->bytes_written += w->buf_len + n;
        w->buf_off = cut;
        w->buf_len = 0;
        q += n;
        left -= n;
    }
    memcpy(w->buf + w->buf_len, q, left);
    w->buf_len += left;
    return 0;
}

/* Appends n bytes to the data region, hashing them into the current block
 * and, when in_record, into the record's checksum. */
static int emit(stk_writer *w, const void *p, size_t n, bool in_record) {
    if (!n) return 0;
    if (in_record) stk__hash_update(&w->rec_state, p, n);
    const uint8_t *q = p;
    size_t left = n;
    while (left) {
        size_t take = (size_t)STK__MIN((uint64_t)left, w->opt.block_size - w->blk_filled);
        stk__hash_update(&w->blk_state, q, take);
        w->blk_filled += take;
        q += take;
        left -= take;
        if (w->blk_filled == w->opt.block_size) {
            int rc = push_block(w);
            if (rc) return rc;
        }
    }
    int rc = stage(w, p, n);
    if (rc == 0) w->pos += n;
    return rc;
}

static int pad_to(stk_writer *w, uint64_t align, bool in_record) {
    uint64_t target = stk__align_up(w->pos, align);
    while (w->pos < target) {
        int rc = emit(w, zeros, (size_t)STK__MIN(target - w->pos, sizeof zeros), in_record);
        if (rc) return rc;
    }
    return 0;
}

static int open_shard(stk_writer *w, stk_error *err) {
    char name[64];
    snprintf(name, sizeof name, "%sshard-%06zu%s", w->prefix, w->nshards,
             STK__SHARD_EXT);
    stk__free(w->shard_path);
    w->shard_path = stk__path_join(w->dir, name);
    if (!w->shard_path) return werr(w, err, -ENOMEM, "out of memory");
    /* A new file of ours, never through a link planted at its name: a
     * leftover of an earlier pack is removed (the link itself), then the
     * name is taken exclusively. */
    int fd = stk__open(w->shard_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd == -EEXIST && unlink(w->shard_path) == 0)
        fd = stk__open(w->shard_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd < 0)
        return werr(w, err, fd, "%s: cannot create shard: %s", w->shard_path,
                    stk_strerror(fd));
    /* The magic goes first, so that even a shard cut short by a crash is
     * known as ours (the header is completed when the shard is). */
    int mrc = stk__pwrite_full(fd, STK__MAGIC, 8, 0);
    if (mrc) {
        close(fd);
        return werr(w, err, mrc, "%s: cannot write: %s", w->shard_path, stk_strerror(mrc));
    }
    w->fd = fd;
    w->pos = STK__HEADER_SIZE;
    w->buf_off = STK__HEADER_SIZE;
    w->buf_len = 0;
    w->nrec_shard = 0;
    w->nblocks = 0;
    w->blk_filled = 0;
    XXH3_INITSTATE(&w->blk_state);
    XXH3_64bits_reset(&w->blk_state);
    return 0;
}

/* The file beside the journal that holds the statistics of the shards it
 * lists: "<marker>.stats". */
static char *stats_path(const stk_writer *w) {
    char name[64];
    snprintf(name, sizeof name, "%s.stats", w->marker);
    return stk__path_join(w->dir, name);
}

#define STATS_HEAD "stoker pack in progress, statistics of the first "

/* Replaces the journal's statistics with `through`, those of the first
 * `nshards` shards, atomically.  Written after the journal's line of the
 * last of them: a crash between the two leaves statistics one shard
 * behind, and resume then redoes that shard (resume_stats). */
static int save_stats(stk_writer *w, size_t nshards, const stk__stats *through) {
    json_t *o = stk__stats_json(through, w->fields);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!js) return -ENOMEM;
    size_t cap = strlen(js) + 128;
    char *text = stk__malloc(cap);
    int rc = -ENOMEM;
    if (text) {
        int n = snprintf(text, cap, STATS_HEAD "%zu shards\n%s\n", nshards, js);
        char name[64];
        snprintf(name, sizeof name, "%s.stats", w->marker);
        rc = stk__write_file_atomic(w->dir, name, text, (size_t)n, w->opt.sync);
    }
    free(js);
    stk__free(text);
    return rc;
}

/* On resume, after the kept shards are known: takes up the statistics of
 * the journal's first K shards.  K below the shards kept (a crash between
 * a shard's journal line and its statistics): only K shards are kept, the
 * rest redone.  K above them (a kept shard found damaged) or no statistics
 * where shards are kept (a journal of a stoker without them): the pack
 * goes on, and publishes no statistics. */
static int resume_stats(stk_writer *w) {
    char *p = stats_path(w), *text = NULL;
    size_t len = 0, k = 0;
    if (!p) return -ENOMEM;
    int rc = stk__read_file(p, &text, &len);
    stk__free(p);
    if (rc == -ENOMEM) return rc;
    const char *nl = rc == 0 ? memchr(text, '\n', len) : NULL;
    stk__stats *got = NULL;
    if (nl && sscanf(text, STATS_HEAD "%zu shards", &k) == 1) {
        json_error_t je;
        json_t *o = json_loadb(nl + 1, len - (size_t)(nl + 1 - text), 0, &je);
        if (o && stk__stats_parse(o, w->fields, w->nfields, w->marker, &got, NULL) != 0) got = NULL;
        json_decref(o);
    }
    stk__free(text);
    if (!got || k > w->nshards) {
        stk__stats_free(got);
        w->stats_off = got || w->nshards > 0;
        /* Statistics of shards this pack no longer lists must not be
         * taken up by a later resume. */
        if (w->stats_off && (p = stats_path(w))) {
            unlink(p);
            stk__free(p);
        }
        return 0;
    }
    while (w->nshards > k) {
        w->nshards--;
        w->records -= w->shards[w->nshards].records;
        stk__free(w->shards[w->nshards].file);
    }
    rc = stk__stats_copy(w->total, got);
    stk__stats_free(got);
    return rc == -EINVAL ? 0 : rc;
}

/* Appends a durable shard to the journal kept in the marker file, so that
 * an interrupted pack can resume after it (stk_writer_options.resume);
 * then, with `through` (the statistics of shards 0..idx), the journal's
 * statistics. */
static int journal_shard(stk_writer *w, size_t idx, const stk__stats *through) {
    const stk__shard_entry *e = &w->shards[idx];
    char line[256];
    int n = snprintf(line, sizeof line, "shard %s %llu %llu %016llx\n", e->file,
                     (unsigned long long)e->records, (unsigned long long)e->bytes,
                     (unsigned long long)e->header_hash);
    char *p = stk__path_join(w->dir, w->marker);
    if (!p) return -ENOMEM;
    int fd = stk__open(p, O_WRONLY | O_APPEND | O_NOFOLLOW, 0);
    stk__free(p);
    if (fd < 0) return fd;
    ssize_t r = write(fd, line, (size_t)n);
    int rc = r == n ? 0 : -EIO;
    if (rc == 0 && w->opt.sync) rc = stk__fsync(fd);
    close(fd);
    if (rc == 0 && through && !w->stats_off) rc = save_stats(w, idx + 1, through);
    return rc;
}

static int finish_shard(stk_writer *w, stk_error *err) {
    int rc = flush_stage(w);
    uint64_t data_end = w->pos;
    if (!rc && w->blk_filled) rc = push_block(w);
    if (rc) goto fail;
    size_t words = w->dense ? 1 : stk__entry_words(w->nfields);
    uint64_t index_off = stk__align_up(data_end, STK__INDEX_ALIGN);
    uint64_t index_size = w->nrec_shard * words * 8;
    uint64_t blocks_off = index_off + index_size;
    uint64_t blocks_size = w->nblocks * 8;
    if (index_off > data_end &&
        (rc = stk__pwrite_full(w->fd, zeros, (size_t)(index_off - data_end), data_end)))
        goto fail;
    if ((rc = stk__pwrite_full(w->fd, w->index, (size_t)index_size, index_off)) ||
        (rc = stk__pwrite_full(w->fd, w->blocks, (size_t)blocks_size, blocks_off)))
        goto fail;

    uint8_t h[STK__HEADER_USED] = {0};
    memcpy(h + STK__H_MAGIC, STK__MAGIC, 8);
    stk__st32(h + STK__H_VERSION, w->dense ? 2 : 1);
    stk__st32(h + STK__H_BOM, STK__BOM);
    stk__st32(h + STK__H_HSIZE, STK__HEADER_SIZE);
    stk__st32(h + STK__H_NFIELDS, (uint32_t)w->nfields);
    stk__st64(h + STK__H_NRECORDS, w->nrec_shard);
    stk__st64(h + STK__H_DATA_OFF, STK__HEADER_SIZE);
    stk__st64(h + STK__H_DATA_END, data_end);
    stk__st64(h + STK__H_INDEX_OFF, index_off);
    stk__st64(h + STK__H_INDEX_SIZE, index_size);
    stk__st64(h + STK__H_BLOCKS_OFF, blocks_off);
    stk__st64(h + STK__H_NBLOCKS, w->nblocks);
    stk__st32(h + STK__H_BLOCK_SIZE, w->opt.block_size);
    stk__st32(h + STK__H_ALIGN, w->opt.align);
    stk__st64(h + STK__H_SCHEMA_HASH, w->schema_hash);
    stk__st64(h + STK__H_INDEX_HASH, stk__hash(w->index, (size_t)index_size));
    stk__st64(h + STK__H_BLOCKS_HASH, stk__hash(w->blocks, (size_t)blocks_size));
    /* Its place, so that a reader finds shards listed out of order. */
    stk__st64(h + STK__H_PLACE, STK__PLACE_SET | (uint64_t)w->opt.part_index << 32 |
                                    (uint64_t)(uint32_t)w->nshards);
    uint64_t hh = stk__hash(h, STK__H_HEADER_HASH);
    stk__st64(h + STK__H_HEADER_HASH, hh);
    if ((rc = stk__pwrite_full(w->fd, h, sizeof h, 0))) goto fail;
    w->bytes_written += (index_off - data_end) + index_size + blocks_size + STK__HEADER_SIZE;

    if (w->nshards == w->shards_cap) {
        size_t cap = w->shards_cap ? w->shards_cap * 2 : 16;
        stk__shard_entry *s = stk__realloc(w->shards, cap * sizeof *s);
        if (!s) {
            rc = -ENOMEM;
            goto fail;
        }
        w->shards = s;
        w->shards_cap = cap;
    }
    const char *base = strrchr(w->shard_path, '/');
    stk__shard_entry *e = &w->shards[w->nshards];
    e->file = stk__strdup(base ? base + 1 : w->shard_path);
    if (!e->file) {
        rc = -ENOMEM;
        goto fail;
    }
    e->records = w->nrec_shard;
    e->bytes = blocks_off + blocks_size;
    e->header_hash = hh;
    w->nshards++;
    stk__stats_merge(w->total, w->cur);
    stk__stats_reset(w->cur);

    if (w->opt.sync) {
        /* Start write-back now so that the final fsync finds little to do,
         * and keep a few shards open to fsync them before publishing. */
        sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        if (w->npending == MAX_PENDING_SYNC) {
            int old = w->pending[0];
            size_t old_idx = w->pending_idx[0];
            stk__stats *old_stats = w->pending_stats[0];
            memmove(w->pending, w->pending + 1, (MAX_PENDING_SYNC - 1) * sizeof(int));
            memmove(w->pending_idx, w->pending_idx + 1, (MAX_PENDING_SYNC - 1) * sizeof(size_t));
            memmove(w->pending_stats, w->pending_stats + 1,
                    (MAX_PENDING_SYNC - 1) * sizeof(stk__stats *));
            w->pending_stats[MAX_PENDING_SYNC - 1] = old_stats; /* its slot, reused */
            w->npending--;
            rc = stk__fsync(old);
            close(old);
            if (rc == 0) rc = journal_shard(w, old_idx, old_stats); /* durable now */
            if (rc) {
                close(w->fd);
                w->fd = -1;
                return werr(w, err, rc, "%s: fsync of an earlier shard failed: %s",
                            w->dir, stk_strerror(rc));
            }
        }
        stk__stats_copy(w->pending_stats[w->npending], w->total);
        w->pending_idx[w->npending] = w->nshards - 1;
        w->pending[w->npending++] = w->fd;
    } else {
        close(w->fd);
        if ((rc = journal_shard(w, w->nshards - 1, w->total))) {
            w->fd = -1;
            return werr(w, err, rc, "%s: cannot update the pack journal: %s", w->dir,
                        stk_strerror(rc));
        }
    }
    w->fd = -1;
    return 0;
fail:
    return werr(w, err, rc, "%s: writing shard failed: %s", w->shard_path,
                stk_strerror(rc));
}

int stk_writer_append(stk_writer *w, const stk_value *values, stk_error *err) {
    if (!w || !values) return stk__err(err, -EINVAL, "stk_writer_append: NULL argument");
    if (w->failed || w->finished)
        return stk__err(err, -EINVAL, "%s: the writer is %s and takes no more records",
                        w->dir, w->finished ? "finished" : "failed");
    uint64_t rec = w->records;
    size_t zneed = 0;
    uint64_t bound = w->opt.align; /* padding before the record */
    for (size_t i = 0; i < w->nfields; i++) {
        const stk_field *f = &w->fields[i];
        const stk__fieldinfo *fi = &w->info[i];
        uint64_t rows = values[i].rows;
        if (fi->fixed_rows != STK_RAGGED && rows != (uint64_t)fi->fixed_rows)
            return werr(w, err, STK_ESCHEMA,
                        "%s: record %llu: field '%s' has %llu rows; its schema "
                        "fixes %lld",
                        w->dir, (unsigned long long)rec, f->name,
                        (unsigned long long)rows, (long long)fi->fixed_rows);
        uint64_t raw;
        if (!stk__mul_ok(rows, fi->row_bytes, &raw) || raw > (UINT64_C(1) << 48))
            return werr(w, err, -EINVAL, "%s: record %llu: field '%s' is too large",
                        w->dir, (unsigned long long)rec, f->name);
        if (raw && !values[i].data)
            return werr(w, err, -EINVAL, "%s: record %llu: field '%s' has no data",
                        w->dir, (unsigned long long)rec, f->name);
        w->stored_ptr[i] = values[i].data;
        w->stored_len[i] = raw;
        if (f->codec == STK_CODEC_ZSTD) zneed += ZSTD_compressBound((size_t)raw);
    }
    if (zneed) {
        if (zneed > w->zcap) {
            uint8_t *z = stk__realloc(w->zbuf, zneed);
            if (!z) return werr(w, err, -ENOMEM, "out of memory");
            w->zbuf = z;
            w->zcap = zneed;
        }
        if (!w->cctx && !(w->cctx = ZSTD_createCCtx()))
            return werr(w, err, -ENOMEM, "out of memory");
        size_t zpos = 0;
        for (size_t i = 0; i < w->nfields; i++) {
            const stk_field *f = &w->fields[i];
            if (f->codec != STK_CODEC_ZSTD) continue;
            size_t r = ZSTD_compressCCtx(w->cctx, w->zbuf + zpos, w->zcap - zpos,
                                         values[i].data, (size_t)w->stored_len[i],
                                         f->codec_level ? f->codec_level : 3);
            if (ZSTD_isError(r))
                return werr(w, err, STK_ECODEC, "%s: record %llu: field '%s': zstd: %s",
                            w->dir, (unsigned long long)rec, f->name,
                            ZSTD_getErrorName(r));
            w->stored_ptr[i] = w->zbuf + zpos;
            w->stored_len[i] = r;
            zpos += r;
        }
    }
    for (size_t i = 0; i < w->nfields; i++)
        bound += stk__align_up(w->stored_len[i], w->opt.align);

    int rc;
    if (w->fd >= 0 && w->nrec_shard > 0 &&
        (w->pos - STK__HEADER_SIZE) + bound > w->opt.shard_bytes &&
        (rc = finish_shard(w, err)))
        return rc;
    if (w->fd < 0 && (rc = open_shard(w, err))) return rc;

    /* Version 1 keeps each field's offset, size and rows; version 2 the
     * checksum alone (its layout puts every record where the arithmetic
     * says, which `dense_at` below holds it to). */
    size_t words = w->dense ? 1 : stk__entry_words(w->nfields);
    if (w->nrec_shard == w->index_cap) {
        size_t cap = w->index_cap ? w->index_cap * 2 : 1024;
        uint64_t *ix = stk__realloc(w->index, cap * words * 8);
        if (!ix) return werr(w, err, -ENOMEM, "out of memory");
        w->index = ix;
        w->index_cap = cap;
    }
    uint64_t *e = w->index + w->nrec_shard * words;
    if ((rc = pad_to(w, w->opt.align, false))) goto fail;
    XXH3_INITSTATE(&w->rec_state);
    XXH3_64bits_reset(&w->rec_state);
    for (size_t i = 0; i < w->nfields; i++) {
        if (i && (rc = pad_to(w, w->opt.align, true))) goto fail;
        if (w->dense) {
            uint64_t at = STK__HEADER_SIZE + w->nrec_shard * w->layout.stride + w->layout.off[i];
            if (w->pos != at || w->stored_len[i] != w->layout.len[i] ||
                values[i].rows != w->layout.rows[i]) {
                rc = -EINVAL; /* a writer's bug: the record is not where the layout says */
                goto fail;
            }
        } else {
            e[1 + 3 * i] = w->pos;
            e[2 + 3 * i] = w->stored_len[i];
            e[3 + 3 * i] = values[i].rows;
        }
        /* A field of a fixed shape is one row of statistics a record. */
        bool rowed = stk__stats_rowed(&w->fields[i]);
        if (w->fields[i].codec != STK_CODEC_NONE) {
            if ((rc = emit(w, w->stored_ptr[i], (size_t)w->stored_len[i], true))) goto fail;
            stk__stats_add(w->cur, i, &w->fields[i], values[i].data, rowed ? values[i].rows : 1);
            continue;
        }
        if (!rowed) stk__stats_add(w->cur, i, &w->fields[i], values[i].data, 1);
        /* The statistics and the write of each slice together, so that
         * the bytes the statistics bring into the cache are hashed and
         * copied from there: a large field is read from memory once. */
        uint64_t row = w->info[i].row_bytes, step = STK__MAX(STATS_SLICE / (row ? row : 1), 1);
        for (uint64_t r = 0; r < values[i].rows; r += step) {
            uint64_t k = STK__MIN(step, values[i].rows - r);
            const uint8_t *at = (const uint8_t *)values[i].data + r * row;
            if (rowed) stk__stats_add(w->cur, i, &w->fields[i], at, k);
            if ((rc = emit(w, at, (size_t)(k * row), true))) goto fail;
        }
    }
    e[0] = XXH3_64bits_digest(&w->rec_state);
    w->nrec_shard++;
    w->records++;
    return 0;
fail:
    return werr(w, err, rc, "%s: record %llu: writing failed: %s", w->shard_path,
                (unsigned long long)rec, stk_strerror(rc));
}

uint64_t stk_writer_num_records(const stk_writer *w) { return w ? w->records : 0; }

uint64_t stk_writer_bytes_written(const stk_writer *w) {
    return w ? w->bytes_written + w->buf_len : 0;
}

/* After a replacement is published: removes the replaced dataset's files
 * (ours, not named by the new manifest).  Failing to remove one leaves a
 * file no manifest names, which readers ignore. */
static void drop_replaced(stk_writer *w) {
    DIR *d = opendir(w->dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        bool shard = n > 4 && !strcmp(e->d_name + n - 4, STK__SHARD_EXT);
        bool part = strncmp(e->d_name, "part-", 5) == 0 && n > 5 && !strcmp(e->d_name + n - 5, ".json");
        if (!shard && !part) continue;
        bool named = false;
        for (size_t i = 0; i < w->nshards && !named; i++) named = !strcmp(w->shards[i].file, e->d_name);
        if (!named && stk__is_ours(dirfd(d), e->d_name) == 1) unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

int stk_writer_finish(stk_writer *w, stk_error *err) {
    if (!w) return stk__err(err, -EINVAL, "stk_writer_finish: NULL writer");
    if (w->failed || w->finished)
        return stk__err(err, -EINVAL, "%s: the writer is %s", w->dir,
                        w->finished ? "already finished" : "failed");
    int rc;
    if (w->fd >= 0 && (rc = finish_shard(w, err))) return rc;
    while (w->npending) {
        int fd = w->pending[--w->npending];
        rc = stk__fsync(fd);
        close(fd);
        if (rc) return werr(w, err, rc, "%s: fsync of a shard failed: %s", w->dir,
                            stk_strerror(rc));
    }
    stk__manifest m = {
        .version = w->version,
        .is_part = w->opt.part_count > 1,
        .part_index = w->opt.part_index,
        .part_count = w->opt.part_count,
        .records = w->records,
        .align = w->opt.align,
        .block_size = w->opt.block_size,
        .fields = w->fields,
        .nfields = w->nfields,
        .shards = w->shards,
        .nshards = w->nshards,
        .attrs = w->attrs,
        .inputs = w->inputs,
        .inputs_list = w->opt.part_count > 1 ? w->inputs_list : NULL,
        .stats = w->stats_off ? NULL : w->total,
    };
    char name[32];
    if (m.is_part) snprintf(name, sizeof name, "part-%05u.json", w->opt.part_index);
    else snprintf(name, sizeof name, "%s", STK__MANIFEST);
    if ((rc = stk__publish(w->dir, name, &m, w->opt.sync, err))) {
        w->failed = true;
        return rc;
    }
    if (w->replacing) drop_replaced(w);
    char *sp = stats_path(w);
    if (sp) unlink(sp);
    stk__free(sp);
    char *marker = stk__path_join(w->dir, w->marker);
    if (marker) unlink(marker);
    stk__free(marker);
    if (w->opt.sync) stk__fsync_dir(w->dir);
    w->finished = true;
    return 0;
}

void stk_writer_free(stk_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->part_lock_fd >= 0) close(w->part_lock_fd);
    if (w->lock_fd >= 0) close(w->lock_fd);
    for (size_t i = 0; i < w->npending; i++) close(w->pending[i]);
    for (size_t i = 0; i < w->nshards; i++) stk__free(w->shards[i].file);
    stk__free(w->shards);
    stk__schema_free(w->fields, w->nfields);
    stk__free(w->info);
    stk__free(w->stored_ptr);
    stk__free(w->stored_len);
    stk__layout_free(&w->layout);
    stk__free(w->attrs);
    stk__free(w->inputs);
    stk__free(w->inputs_list);
    stk__free(w->dir);
    stk__free(w->shard_path);
    stk__free(w->index);
    stk__free(w->blocks);
    stk__free(w->buf);
    stk__free(w->zbuf);
    stk__stats_free(w->cur);
    stk__stats_free(w->total);
    for (size_t i = 0; i < MAX_PENDING_SYNC; i++) stk__stats_free(w->pending_stats[i]);
    ZSTD_freeCCtx(w->cctx);
    stk__free(w);
}
