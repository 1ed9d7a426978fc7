/*
 * index_open.c: opening an in-place index (written by index_build.c) as a
 * dataset: its JSON checked field by field, every run bounded by the file
 * it names before anything is allocated, every file resolved under the
 * allowed root and checked unchanged (size, modification time).
 */
#define _GNU_SOURCE
#include "sources.h"

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


/* ---- opening ---- */

bool stk__is_index_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[64];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    return strstr(buf, "\"" STK__INDEX_FORMAT "\"") != NULL;
}

#define BAD(...) stk__err(err, STK_ECORRUPT, __VA_ARGS__)

static int json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Fills shard `sh` from file entry `o`; checks it against the file. */
static int open_file(stk_dataset *ds, stk__shard *sh, json_t *o, size_t i, const char *what,
                     uint64_t srb, stk_error *err) {
    const char *p = json_string_value(json_object_get(o, "path"));
    json_t *runs = json_object_get(o, "runs");
    uint64_t size, mt;
    json_t *mtv = json_object_get(o, "mtime_ns");
    if (!p || !*p || json_u64(json_object_get(o, "size"), &size) || !json_is_integer(mtv) ||
        !json_is_array(runs))
        return BAD("%s: file %zu needs \"path\", \"size\", \"mtime_ns\" and \"runs\"", what, i);
    mt = (uint64_t)json_integer_value(mtv);
    sh->path = p[0] == '/' ? stk__strdup(p) : stk__path_join(ds->dir, p);
    if (!sh->path) return stk__err(err, -ENOMEM, "out of memory");
    sh->size = size;
    sh->mtime_ns = (int64_t)mt;
    size_t nr = json_array_size(runs);
    uint64_t nrec = 0;
    for (size_t k = 0; k < nr; k++) {
        json_t *r = json_array_get(runs, k);
        uint64_t c;
        int chunks = ds->info[0].chunks;
        size_t want = !chunks ? 4 : chunks == STK__CHUNK_DEFLATE ? 6 : 7;
        if (!json_is_array(r) || json_array_size(r) != want || json_u64(json_array_get(r, 1), &c))
            return BAD("%s: %s: run %zu must be [offset, count, stride, rows%s]", what, p, k,
                       want == 6 ? ", stored, raw" : want == 7 ? ", stored, raw, applied" : "");
        if (__builtin_add_overflow(nrec, c, &nrec) || nrec > (UINT64_C(1) << 40))
            return BAD("%s: %s: record counts overflow", what, p);
        /* Before anything is allocated for them: the run's records must lie
         * in the file the index says it has (several records of a run at
         * distinct offsets), so that a crafted count cannot make the
         * reader allocate what no file holds. */
        uint64_t off = 0, stride = 0, stored = 0, raw = 0;
        if (json_u64(json_array_get(r, 0), &off) || json_u64(json_array_get(r, 2), &stride))
            return BAD("%s: %s: run %zu must be [offset, count, stride, rows]", what, p, k);
        if (chunks) {
            json_u64(json_array_get(r, 4), &stored);
            json_u64(json_array_get(r, 5), &raw);
        }
        /* A filtered chunk's records lie in its decoded bytes, which its
         * stored bytes (in the file) bound: zlib inflates at most about
         * 1,032 to 1. */
        uint64_t room = size > off ? size - off : 0;
        if (stored) {
            if (off > size || stored > size - off || raw / 1100 > stored + 64)
                return BAD("%s: %s: run %zu: a chunk of %llu bytes (%llu decoded) at byte %llu "
                           "does not fit in the file's %llu bytes",
                           what, p, k, (unsigned long long)stored, (unsigned long long)raw,
                           (unsigned long long)off, (unsigned long long)size);
            room = raw;
            off = 0;
        }
        uint64_t last = 0;
        if (c > 1 && (stride == 0 || __builtin_mul_overflow(c - 1, stride, &last) ||
                      (!stored && off > size) || last > room))
            return BAD("%s: %s: run %zu: %llu records %llu bytes apart from byte %llu do not "
                       "fit in the file's %llu bytes",
                       what, p, k, (unsigned long long)c, (unsigned long long)stride,
                       (unsigned long long)off, (unsigned long long)size);
    }
    sh->nrec = nrec;
    sh->index = stk__alloc_table((size_t)(nrec ? nrec : 1) * 4 * sizeof(uint64_t));
    if (!sh->index) return stk__err(err, -ENOMEM, "out of memory");
    if (ds->info[0].chunks &&
        !(sh->chunk = stk__malloc((size_t)(nrec ? nrec : 1) * 3 * sizeof(uint64_t))))
        return stk__err(err, -ENOMEM, "out of memory");
    const stk__fieldinfo *fi = &ds->info[0];
    uint64_t lo = UINT64_MAX, hi = 0, at = 0;
    for (size_t k = 0; k < nr; k++) {
        json_t *r = json_array_get(runs, k);
        uint64_t off, count = 0, stride, rows, len;
        json_u64(json_array_get(r, 1), &count);
        if (json_u64(json_array_get(r, 0), &off) || json_u64(json_array_get(r, 2), &stride) ||
            json_u64(json_array_get(r, 3), &rows))
            return BAD("%s: %s: run %zu must be [offset, count, stride, rows]", what, p, k);
        if (fi->fixed_rows != STK_RAGGED && rows != (uint64_t)fi->fixed_rows)
            return stk__err(err, STK_ESCHEMA, "%s: %s: run %zu has records of %llu rows; the "
                            "field fixes %lld", what, p, k, (unsigned long long)rows,
                            (long long)fi->fixed_rows);
        uint64_t span, last, stored = 0, raw = 0, applied = 0;
        if (fi->chunks && (json_u64(json_array_get(r, 4), &stored) ||
                           json_u64(json_array_get(r, 5), &raw) ||
                           (fi->chunks != STK__CHUNK_DEFLATE &&
                            json_u64(json_array_get(r, 6), &applied))))
            return BAD("%s: %s: run %zu: stored and raw sizes (and the filters applied) must "
                       "be integers", what, p, k);
        if (fi->chunks == STK__CHUNK_DEFLATE) applied = stored ? STK__CHUNK_DEFLATE : 0;
        if (applied & ~(uint64_t)fi->chunks)
            return BAD("%s: %s: run %zu: filters %llu beyond the field's %s", what, p, k,
                       (unsigned long long)applied, stk__chunks_name(fi->chunks));
        if (stored && !applied)
            return BAD("%s: %s: run %zu: a chunk of %llu stored bytes with no filter applied",
                       what, p, k, (unsigned long long)stored);
        if (stored) {
            /* A filtered chunk: the records are slices of its decoded bytes,
             * the file holds `stored` bytes at `off`. */
            if (!stk__mul_ok(rows, srb, &len) || !stk__mul_ok(count ? count - 1 : 0, stride, &span) ||
                span > raw || len > raw - span || raw > (UINT64_C(1) << 32) || off > size ||
                stored > size - off)
                return stk__err(err, STK_EBOUNDS,
                                "%s: %s: run %zu (a chunk of %llu bytes at byte %llu, %llu "
                                "decoded) points outside the file or the chunk",
                                what, p, k, (unsigned long long)stored, (unsigned long long)off,
                                (unsigned long long)raw);
            for (uint64_t q = 0; q < count; q++) {
                uint64_t *e = sh->index + 4 * at;
                e[0] = 0;
                e[1] = off;
                e[2] = stored;
                e[3] = rows;
                sh->chunk[3 * at] = q * stride;
                sh->chunk[3 * at + 1] = raw;
                sh->chunk[3 * at + 2] = applied;
                at++;
            }
            if (count) {
                lo = STK__MIN(lo, off);
                hi = STK__MAX(hi, off + stored);
            }
            continue;
        }
        if (fi->chunks) {
            /* A chunk the filter skipped: plain bytes, "inflated" as is. */
            raw = 0;
        }
        if (!stk__mul_ok(rows, srb, &len) || !stk__mul_ok(count ? count - 1 : 0, stride, &span) ||
            __builtin_add_overflow(off, span, &last) || (count && (last > size || len > size - last)))
            return stk__err(err, STK_EBOUNDS,
                            "%s: %s: run %zu (%llu records at byte %llu) points outside the "
                            "file's %llu bytes",
                            what, p, k, (unsigned long long)count, (unsigned long long)off,
                            (unsigned long long)size);
        for (uint64_t c = 0; c < count; c++) {
            if (sh->chunk) {
                /* Plain bytes in a filtered field: a "chunk" of exactly the
                 * record, marked by a decoded size of 0. */
                sh->chunk[3 * at] = 0;
                sh->chunk[3 * at + 1] = 0;
                sh->chunk[3 * at + 2] = 0;
            }
            uint64_t *e = sh->index + 4 * at++;
            e[0] = 0;
            e[1] = off + c * stride;
            e[2] = len;
            e[3] = rows;
        }
        if (count) {
            lo = STK__MIN(lo, off);
            hi = STK__MAX(hi, last + len);
        }
    }
    sh->data_off = lo == UINT64_MAX ? 0 : lo;
    sh->data_end = hi;
    return 0;
}

/* Checks that file `sh` is still what was indexed; maps it when asked. */
static int check_file(stk__shard *sh, bool map, stk_error *err) {
    /* O_NONBLOCK: a path that has become a pipe must not block the open
     * (it is refused below: only regular files are read). */
    int fd = stk__open(sh->path, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0)
        return stk__err(err, fd == -ENOENT ? STK_ESTALE : fd,
                        "%s: cannot open a file of the index: %s%s", sh->path,
                        stk_strerror(fd), fd == -ENOENT ? " (re-run `stoker index`)" : "");
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        stk__err(err, rc, "%s: %s", sh->path, stk_strerror(rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = stk__err(err, STK_ESTALE,
                      "%s: is no longer a regular file (a pipe, a device or a directory now): "
                      "re-run `stoker index`",
                      sh->path);
    } else {
        int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        if ((uint64_t)st.st_size != sh->size || mt != sh->mtime_ns)
            rc = stk__err(err, STK_ESTALE,
                          "%s: changed since it was indexed (size %llu, was %llu; modified "
                          "%s): re-run `stoker index`",
                          sh->path, (unsigned long long)st.st_size,
                          (unsigned long long)sh->size,
                          mt != sh->mtime_ns ? "since" : "no later");
    }
    if (rc == 0 && map && sh->size) {
        void *m = mmap(NULL, (size_t)sh->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            rc = -errno;
            stk__err(err, rc, "%s: cannot map: %s", sh->path, stk_strerror(rc));
        } else {
            sh->map = m;
        }
    }
    close(fd);
    return rc;
}

/* The directory of the file checked last and whether it resolved under
 * the root: files of one directory come together, so each directory is
 * resolved once (a file's own name is then only checked not to be a link,
 * "." or ".."). */
typedef struct inside_cache {
    char *dir;
    bool inside;
} inside_cache;

/* Whether real path `real` lies under `allowed` (a real path). */
static bool under(const char *real, const char *allowed) {
    size_t l = strlen(allowed);
    return strcmp(allowed, "/") == 0 || (strncmp(real, allowed, l) == 0 && real[l] == '/');
}

/* Whether file `sh` resolves to a path under `allowed`; 0 or STK_EOUTSIDE
 * naming the file, the root and how to allow it.  A file that does not
 * resolve (gone) is left to check_file to report. */
static int check_inside(const stk__shard *sh, size_t i, const char *index, const char *allowed,
                        const char *hint, inside_cache *c, stk_error *err) {
    if (strcmp(allowed, "/") == 0) return 0;
    const char *slash = strrchr(sh->path, '/'), *base = slash ? slash + 1 : sh->path;
    size_t dl = slash ? (size_t)(slash - sh->path) : 0;
    struct stat st;
    bool plain = strcmp(base, ".") != 0 && strcmp(base, "..") != 0 &&
                 lstat(sh->path, &st) == 0 && !S_ISLNK(st.st_mode);
    if (plain && slash && c->dir && strlen(c->dir) == dl && memcmp(c->dir, sh->path, dl) == 0) {
        if (c->inside) return 0;
    } else if (plain && slash) {
        char *d = strndup(sh->path, dl ? dl : 1), *rd = d ? realpath(d, NULL) : NULL;
        stk__free(c->dir);
        c->dir = d;
        c->inside = rd && under(rd, allowed);
        free(rd);
        if (c->inside) return 0;
    }
    char *real = realpath(sh->path, NULL);
    if (!real) return errno == ENOMEM ? stk__err(err, -ENOMEM, "out of memory") : 0;
    int rc = 0;
    if (!under(real, allowed)) {
        char dir[STK_ERROR_MAX / 4];
        const char *rs = strrchr(real, '/');
        snprintf(dir, sizeof dir, "%.*s", (int)(rs && rs != real ? rs - real : 1), real);
        rc = stk__err(err, STK_EOUTSIDE,
                      "%s: file %zu, %s, lies outside %s, the only directory an index may read "
                      "from unless its reader trusts it and allows root %s (--root on the "
                      "command line, root= in Python)",
                      index, i, real, allowed, hint ? hint : dir);
    }
    free(real);
    return rc;
}

int stk__index_open(const char *path, const char *files_root, stk_dataset **out,
                    stk_error *err) {
    *out = NULL;
    char *allowed = NULL;
    inside_cache inside = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = stk__read_file(path, &text, &len);
    if (rc) return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    stk__free(text);
    if (!root) return BAD("%s: not valid JSON (line %d: %s)", path, je.line, je.text);
    stk_dataset *ds = NULL;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *src = json_string_value(json_object_get(root, "source"));
    json_t *ver = json_object_get(root, "version"), *field = json_object_get(root, "field");
    json_t *files = json_object_get(root, "files"), *attrs = json_object_get(root, "attrs");
    uint64_t records;
    if (!fmt || strcmp(fmt, STK__INDEX_FORMAT) != 0) {
        rc = stk__err(err, STK_EBADMAGIC, "%s: not a stoker index", path);
        goto fail;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) < STK__INDEX_VERSION ||
        json_integer_value(ver) > STK__INDEX_VERSION_OWN_CONV) {
        rc = stk__err(err, STK_EVERSION,
                      "%s: index version %lld; this stoker reads versions %d and %d", path,
                      json_is_integer(ver) ? (long long)json_integer_value(ver) : -1LL,
                      STK__INDEX_VERSION, STK__INDEX_VERSION_OWN_CONV);
        goto fail;
    }
    bool v1 = json_integer_value(ver) == STK__INDEX_VERSION;
    if (!src || !json_is_object(field) || !json_is_array(files) ||
        json_u64(json_object_get(root, "records"), &records) ||
        (attrs && !json_is_object(attrs))) {
        rc = BAD("%s: needs \"source\", \"records\", an object \"field\" and an array \"files\"",
                 path);
        goto fail;
    }
    /* The one field, then the dataset over it. */
    stk_field *fields = stk__calloc(1, sizeof *fields);
    if (!fields) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = stk__field_parse(field, 0, path, &fields[0], err))) {
        stk__schema_free(fields, 1);
        goto fail;
    }
    char *a = attrs ? json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *attrs_text = stk__strdup(a ? a : "{}");
    free(a);
    size_t nf = json_array_size(files);
    if ((rc = stk__dataset_new(stk__path_dir(path), fields, 1, attrs_text, nf, &ds, err))) {
        if (rc != -ENOMEM) {
            stk__err_prefix(err, "%s: ", path);
            rc = err ? (err->code = STK_ECORRUPT) : STK_ECORRUPT;
        }
        goto fail;
    }
    ds->align = 1;
    ds->caps = (stk__caps){.source = stk__strdup(src), .mapped = nf <= STK_INDEX_MAP_MAX};
    if (!ds->caps.source) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if (ds->fields[0].codec != STK_CODEC_NONE) {
        rc = BAD("%s: an index's field is stored uncompressed", path);
        goto fail;
    }
    const char *conv = json_string_value(json_object_get(field, "stored"));
    int cv = conv ? stk__conv_parse(conv) : 0;
    if (cv < 0) {
        rc = BAD("%s: unknown stored encoding \"%s\"", path, conv);
        goto fail;
    }
    stk__fieldinfo *fi = &ds->info[0];
    fi->conv = cv;
    const char *chunks = json_string_value(json_object_get(field, "chunks"));
    int cb = chunks ? stk__chunks_parse(chunks) : STK__CHUNKS_NONE;
    if (cb < 0) {
        rc = BAD("%s: unknown chunk filters \"%s\"", path, chunks);
        goto fail;
    }
    fi->chunks = cb;
    if (fi->chunks && cv) {
        rc = BAD("%s: a field is either converted or in filtered chunks, not both", path);
        goto fail;
    }
    if (cv) {
        size_t out_sz = fi->itemsize, in_sz = stk__conv_in_size(cv);
        if ((out_sz < in_sz && cv != STK__CONV_F64_F32) || out_sz != 4) {
            rc = BAD("%s: encoding \"%s\" cannot deliver %s", path, conv,
                     stk_dtype_name(ds->fields[0].dtype));
            goto fail;
        }
        fi->stored_row_bytes = fi->row_bytes / out_sz * in_sz;
    }
    allowed = realpath(files_root ? files_root : ds->dir, NULL);
    if (!allowed) {
        rc = -errno;
        rc = stk__err(err, rc, "%s: %s%s: %s", path,
                      files_root ? "root " : "the index's directory ",
                      files_root ? files_root : ds->dir, stk_strerror(rc));
        goto fail;
    }
    const char *hint = json_string_value(json_object_get(root, "root"));
    uint64_t first = 0;
    for (size_t i = 0; i < nf; i++) {
        stk__shard *sh = &ds->shards[i];
        ds->nshards = i + 1;
        sh->first = first;
        json_t *fo = json_array_get(files, i);
        uint64_t srb = fi->stored_row_bytes;
        const char *own = json_string_value(json_object_get(fo, "stored"));
        if (own && v1) {
            rc = BAD("%s: file %zu names its own encoding in a version 1 index", path, i);
            goto fail;
        }
        if (own) {
            /* This file's own encoding (audio as float32 from files of
             * several encodings). */
            int ocv = stk__conv_parse(own);
            if (ocv < 0 || fi->chunks || ds->fields[0].dtype != STK_F32) {
                rc = BAD("%s: file %zu: encoding \"%s\" cannot deliver %s", path, i, own,
                         stk_dtype_name(ds->fields[0].dtype));
                goto fail;
            }
            sh->conv_set = true;
            sh->conv = ocv;
            srb = ocv ? fi->row_bytes / 4 * stk__conv_in_size(ocv) : fi->row_bytes;
            sh->stored_row_bytes = srb;
            fi->conv_varies = true;
        }
        if ((rc = open_file(ds, sh, fo, i, path, srb, err)) ||
            (rc = check_inside(sh, i, path, allowed, hint, &inside, err)) ||
            (rc = check_file(sh, ds->caps.mapped, err)))
            goto fail;
        first += sh->nrec;
    }
    if (first != records) {
        rc = BAD("%s: the files hold %llu records but \"records\" says %llu", path,
                 (unsigned long long)first, (unsigned long long)records);
        goto fail;
    }
    ds->nrec = records;
    json_decref(root);
    free(allowed);
    stk__free(inside.dir);
    *out = ds;
    return 0;
fail:
    json_decref(root);
    free(allowed);
    stk__free(inside.dir);
    stk_dataset_close(ds);
    return rc;
}
