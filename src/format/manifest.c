/*
 * manifest.c: the dataset manifest (and part manifests) as JSON.
 *
 * The manifest is small and read once per open, so clarity wins over speed
 * here.  64-bit checksums are written as 16 hex digits: JSON numbers lose
 * precision past 2^53 in many readers.
 */
#include "format.h"

#include "../core/hash.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void stk__manifest_clear(stk__manifest *m) {
    if (!m) return;
    stk__schema_free(m->fields, m->nfields);
    for (size_t i = 0; i < m->nshards; i++) stk__free(m->shards[i].file);
    stk__free(m->shards);
    stk__free(m->attrs);
    stk__free(m->inputs);
    stk__free(m->inputs_list);
    stk__stats_free(m->stats);
    memset(m, 0, sizeof *m);
}

int stk__attrs_normalise(const char *attrs, char **out, stk_error *err) {
    json_error_t je;
    json_t *o = json_loads(attrs ? attrs : "{}", 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return stk__err(err, -EINVAL, "attrs must be a JSON object (%s)",
                        o ? "not an object" : je.text);
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (!s) return stk__err(err, -ENOMEM, "out of memory");
    *out = stk__strdup(s);
    free(s);
    return *out ? 0 : stk__err(err, -ENOMEM, "out of memory");
}

json_t *stk__field_json(const stk_field *f) {
    json_t *shape = json_array();
    for (int d = 0; d < f->ndim; d++)
        json_array_append_new(shape, json_integer(f->shape[d]));
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(f->name));
    json_object_set_new(o, "dtype", json_string(stk_dtype_name(f->dtype)));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "codec", json_string(stk__codec_name(f->codec)));
    json_object_set_new(o, "codec_level", json_integer(f->codec_level));
    if (f->type) json_object_set_new(o, "type", json_string(f->type));
    return o;
}

/* The manifest's own checksum: XXH3-64 of its canonical text (compact,
 * keys sorted) without the "manifest_xxh3" key.  Canonical, so that any
 * reader re-derives it from the parsed value whatever the indentation. */
#define MANIFEST_HASH_KEY "manifest_xxh3"


/* A shard's name and place, ordered by name, then place. */
typedef struct named {
    const char *file;
    size_t i;
} named;

static int by_file(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int check_unique(const stk__manifest *m, const char *what, stk_error *err) {
    if (m->nshards < 2) return 0;
    named *v = stk__malloc(m->nshards * sizeof *v);
    if (!v) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < m->nshards; i++) v[i] = (named){m->shards[i].file, i};
    qsort(v, m->nshards, sizeof *v, by_file);
    int rc = 0;
    for (size_t k = 1; k < m->nshards && !rc; k++)
        if (strcmp(v[k - 1].file, v[k].file) == 0)
            rc = stk__err(err, STK_ECORRUPT,
                          "%s: shard %zu: \"%s\" is listed twice (as shard %zu too)", what,
                          v[k].i, v[k].file, v[k - 1].i);
    stk__free(v);
    return rc;
}

static int canonical_hash(json_t *root, uint64_t *out) {
    json_t *copy = json_copy(root); /* shallow: only the top key is removed */
    if (!copy) return -ENOMEM;
    json_object_del(copy, MANIFEST_HASH_KEY);
    char *s = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(copy);
    if (!s) return -ENOMEM;
    *out = stk__hash(s, strlen(s));
    free(s);
    return 0;
}

int stk__manifest_dump(const stk__manifest *m, char **out, size_t *len,
                       stk_error *err) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("stoker"));
    json_object_set_new(root, "kind", json_string(m->is_part ? "part" : "dataset"));
    json_object_set_new(root, "version", json_integer(m->version ? m->version : 1));
    json_object_set_new(root, "writer", json_string("stoker " STK_VERSION_STRING));
    if (m->is_part) {
        json_t *p = json_object();
        json_object_set_new(p, "index", json_integer(m->part_index));
        json_object_set_new(p, "count", json_integer(m->part_count));
        json_object_set_new(root, "part", p);
    }
    json_object_set_new(root, "records", json_integer((json_int_t)m->records));
    json_object_set_new(root, "align", json_integer(m->align));
    json_object_set_new(root, "block_size", json_integer(m->block_size));
    json_t *fields = json_array();
    for (size_t i = 0; i < m->nfields; i++)
        json_array_append_new(fields, stk__field_json(&m->fields[i]));
    json_object_set_new(root, "fields", fields);
    json_t *shards = json_array();
    for (size_t i = 0; i < m->nshards; i++) {
        const stk__shard_entry *s = &m->shards[i];
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, s->header_hash);
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(s->file));
        json_object_set_new(o, "records", json_integer((json_int_t)s->records));
        json_object_set_new(o, "bytes", json_integer((json_int_t)s->bytes));
        json_object_set_new(o, "header_xxh3", json_string(hex));
        json_array_append_new(shards, o);
    }
    json_object_set_new(root, "shards", shards);
    json_error_t je;
    json_t *attrs = json_loads(m->attrs ? m->attrs : "{}", 0, &je);
    json_object_set_new(root, "attrs", attrs ? attrs : json_object());
    if (m->inputs) json_object_set_new(root, "inputs", json_string(m->inputs));
    /* A part's inputs one by one, for a merge to name one that changed
     * (left out where a name is not UTF-8, which JSON cannot hold). */
    json_t *list = m->inputs_list ? json_string(m->inputs_list) : NULL;
    if (list) json_object_set_new(root, "input_files", list);
    if (m->stats) {
        json_t *st = stk__stats_json(m->stats, m->fields);
        if (!st) {
            json_decref(root);
            return stk__err(err, -ENOMEM, "out of memory writing the manifest");
        }
        json_object_set_new(root, "stats", st);
    }
    uint64_t mh;
    if (canonical_hash(root, &mh)) {
        json_decref(root);
        return stk__err(err, -ENOMEM, "out of memory writing the manifest");
    }
    char mhex[17];
    snprintf(mhex, sizeof mhex, "%016" PRIx64, mh);
    json_object_set_new(root, MANIFEST_HASH_KEY, json_string(mhex));
    char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) return stk__err(err, -ENOMEM, "out of memory writing the manifest");
    size_t n = strlen(s);
    char *c = stk__malloc(n + 2);
    if (!c) {
        free(s);
        return stk__err(err, -ENOMEM, "out of memory writing the manifest");
    }
    memcpy(c, s, n);
    c[n] = '\n';
    c[n + 1] = '\0';
    free(s);
    *out = c;
    *len = n + 1;
    return 0;
}

/* ---- parsing ---- */

#define BAD(...) stk__err(err, STK_ECORRUPT, __VA_ARGS__)

static int get_u64(json_t *o, const char *key, const char *what, const char *ctx,
                   uint64_t *out, stk_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return BAD("%s: %s: \"%s\" must be a non-negative integer", what, ctx, key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int stk__field_parse(json_t *o, size_t i, const char *what, stk_field *f,
                       stk_error *err) {
    char ctx[48];
    snprintf(ctx, sizeof ctx, "field %zu", i);
    if (!json_is_object(o)) return BAD("%s: %s is not an object", what, ctx);
    const char *name = json_string_value(json_object_get(o, "name"));
    const char *dtype = json_string_value(json_object_get(o, "dtype"));
    const char *codec = json_string_value(json_object_get(o, "codec"));
    json_t *shape = json_object_get(o, "shape");
    json_t *level = json_object_get(o, "codec_level");
    json_t *type = json_object_get(o, "type");
    if (type && (!json_is_string(type) || !stk__type_ok(json_string_value(type))))
        return BAD("%s: %s: \"type\" must be a string of 1 to %d printable ASCII characters",
                   what, ctx, STK_TYPE_MAX - 1);
    if (!name || !dtype || !codec || !json_is_array(shape))
        return BAD("%s: %s needs string \"name\", \"dtype\", \"codec\" and "
                   "array \"shape\"",
                   what, ctx);
    int d = stk_dtype_parse(dtype);
    if (d < 0) return BAD("%s: %s: unknown dtype \"%s\"", what, ctx, dtype);
    int c = stk__codec_parse(codec);
    if (c < 0) return BAD("%s: %s: unknown codec \"%s\"", what, ctx, codec);
    size_t nd = json_array_size(shape);
    if (nd > STK_MAX_DIMS)
        return BAD("%s: %s: more than %d dimensions", what, ctx, STK_MAX_DIMS);
    memset(f, 0, sizeof *f);
    f->name = stk__strdup(name);
    if (!f->name) return stk__err(err, -ENOMEM, "out of memory");
    f->dtype = (stk_dtype)d;
    f->codec = (stk_codec)c;
    f->codec_level = json_is_integer(level) ? (int)json_integer_value(level) : 0;
    if (type && !(f->type = stk__strdup(json_string_value(type))))
        return stk__err(err, -ENOMEM, "out of memory");
    f->ndim = (int)nd;
    for (size_t k = 0; k < nd; k++) {
        json_t *v = json_array_get(shape, k);
        if (!json_is_integer(v))
            return BAD("%s: %s: shape entries must be integers", what, ctx);
        f->shape[k] = (int64_t)json_integer_value(v);
    }
    return 0;
}

/* 16 lowercase hex digits, as written (strtoull would also take "0A.." or
 * " 0x..", and a flipped bit that changes a digit's case would go unseen). */
static bool parse_hex16(const char *hex, uint64_t *out) {
    if (!hex || strlen(hex) != 16) return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = hex[i];
        if (c >= '0' && c <= '9') v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v << 4 | (uint64_t)(c - 'a' + 10);
        else return false;
    }
    *out = v;
    return true;
}

/* A key of `o` outside `known` (NULL-terminated), or NULL. */
static const char *unknown_key(json_t *o, const char *const *known) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        (void)v;
        size_t i = 0;
        while (known[i] && strcmp(known[i], k)) i++;
        if (!known[i]) return k;
    }
    return NULL;
}

/* Damage to the manifest itself.  With "manifest_xxh3" (every manifest
 * written since it exists), the checksum must match: any changed byte of
 * a key or a value is found.  Without it (older manifests), only the keys
 * this version writes are accepted, so that a damaged key name (the
 * checksum's own included) is not silently ignored. */
static int check_integrity(json_t *root, const char *what, stk_error *err) {
    json_t *hv = json_object_get(root, MANIFEST_HASH_KEY);
    if (hv) {
        uint64_t want = 0, got = 0;
        if (!parse_hex16(json_string_value(hv), &want))
            return BAD("%s: \"%s\" must be 16 lowercase hex digits", what, MANIFEST_HASH_KEY);
        if (canonical_hash(root, &got)) return stk__err(err, -ENOMEM, "out of memory");
        if (got != want)
            return stk__err(err, STK_ECHECKSUM,
                            "%s: the manifest's checksum fails (%016" PRIx64 ", recorded %016" PRIx64
                            "): the manifest is damaged or was edited by hand",
                            what, got, want);
        return 0;
    }
    static const char *const top[] = {"format", "kind", "version", "writer", "part", "records",
                                      "align", "block_size", "fields", "shards", "attrs", "inputs",
                                      "input_files", "stats", NULL};
    static const char *const field[] = {"name", "dtype", "shape", "codec", "codec_level", "type", NULL};
    static const char *const shard[] = {"file", "records", "bytes", "header_xxh3", NULL};
    const char *k = unknown_key(root, top);
    json_t *a = json_object_get(root, "fields"), *b = json_object_get(root, "shards"), *v;
    size_t i;
    if (!k && json_is_array(a))
        json_array_foreach(a, i, v) if (!k && json_is_object(v)) k = unknown_key(v, field);
    if (!k && json_is_array(b))
        json_array_foreach(b, i, v) if (!k && json_is_object(v)) k = unknown_key(v, shard);
    if (k)
        return BAD("%s: unknown key \"%s\" in a manifest without a checksum (damage, or a "
                   "manifest edited by hand)",
                   what, k);
    return 0;
}

int stk__manifest_parse(const char *text, size_t len, const char *what,
                        stk__manifest *m, stk_error *err) {
    memset(m, 0, sizeof *m);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return BAD("%s: not valid JSON (line %d: %s)", what, je.line, je.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = BAD("%s: the manifest is not a JSON object", what);
        goto out;
    }
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, "stoker") != 0) {
        rc = stk__err(err, STK_EBADMAGIC,
                      "%s: not a stoker manifest (\"format\" is not \"stoker\")",
                      what);
        goto out;
    }
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver)) {
        rc = BAD("%s: \"version\" is missing", what);
        goto out;
    }
    if (json_integer_value(ver) < 1 || json_integer_value(ver) > STK_FORMAT_VERSION) {
        rc = stk__err(err, STK_EVERSION,
                      "%s: format version %lld; this stoker reads versions 1 to %d",
                      what, (long long)json_integer_value(ver), STK_FORMAT_VERSION);
        goto out;
    }
    m->version = (uint32_t)json_integer_value(ver);
    if ((rc = check_integrity(root, what, err))) goto out;
    const char *kind = json_string_value(json_object_get(root, "kind"));
    if (!kind || (strcmp(kind, "dataset") && strcmp(kind, "part"))) {
        rc = BAD("%s: \"kind\" must be \"dataset\" or \"part\"", what);
        goto out;
    }
    m->is_part = strcmp(kind, "part") == 0;
    if (m->is_part) {
        json_t *p = json_object_get(root, "part");
        uint64_t pi = 0, pc = 0; /* (set on success; 0 keeps -O3 from warning) */
        if (!json_is_object(p) || (rc = get_u64(p, "index", what, "part", &pi, err)) ||
            (rc = get_u64(p, "count", what, "part", &pc, err)) || pc == 0 ||
            pi >= pc || pc > UINT32_MAX) {
            if (!rc) rc = BAD("%s: \"part\" must hold index < count", what);
            goto out;
        }
        m->part_index = (uint32_t)pi;
        m->part_count = (uint32_t)pc;
    }
    uint64_t align = 0, bsize = 0;
    if ((rc = get_u64(root, "records", what, "manifest", &m->records, err)) ||
        (rc = get_u64(root, "align", what, "manifest", &align, err)) ||
        (rc = get_u64(root, "block_size", what, "manifest", &bsize, err)))
        goto out;
    if (!stk__is_pow2(align) || align > 4096 || !stk__is_pow2(bsize) ||
        bsize < 4096 || bsize > (16u << 20)) {
        rc = BAD("%s: \"align\" or \"block_size\" is out of range", what);
        goto out;
    }
    m->align = (uint32_t)align;
    m->block_size = (uint32_t)bsize;

    json_t *fields = json_object_get(root, "fields");
    if (!json_is_array(fields) || json_array_size(fields) == 0) {
        rc = BAD("%s: \"fields\" must be a non-empty array", what);
        goto out;
    }
    size_t nf = json_array_size(fields);
    m->fields = stk__calloc(nf, sizeof *m->fields);
    if (!m->fields) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nf; i++) {
        m->nfields = i + 1; /* so that clear frees what was parsed */
        if ((rc = stk__field_parse(json_array_get(fields, i), i, what, &m->fields[i], err)))
            goto out;
    }
    if ((rc = stk__schema_check(m->fields, m->nfields, NULL, err))) {
        stk__err_prefix(err, "%s: ", what);
        rc = err ? (err->code = STK_ECORRUPT) : STK_ECORRUPT;
        goto out;
    }

    json_t *shards = json_object_get(root, "shards");
    if (!json_is_array(shards)) {
        rc = BAD("%s: \"shards\" must be an array", what);
        goto out;
    }
    size_t ns = json_array_size(shards);
    m->shards = stk__calloc(ns ? ns : 1, sizeof *m->shards);
    if (!m->shards) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < ns; i++) {
        json_t *o = json_array_get(shards, i);
        char ctx[48];
        snprintf(ctx, sizeof ctx, "shard %zu", i);
        stk__shard_entry *s = &m->shards[i];
        m->nshards = i + 1;
        const char *file = json_string_value(json_object_get(o, "file"));
        const char *hex = json_string_value(json_object_get(o, "header_xxh3"));
        if (!file || !hex) {
            rc = BAD("%s: %s needs \"file\" and \"header_xxh3\"", what, ctx);
            goto out;
        }
        /* A shard lives inside the dataset directory: no path separators. */
        if (!*file || strchr(file, '/') || strcmp(file, ".") == 0 ||
            strcmp(file, "..") == 0) {
            rc = BAD("%s: %s: \"%s\" is not a file name", what, ctx, file);
            goto out;
        }
        if (!parse_hex16(hex, &s->header_hash)) {
            rc = BAD("%s: %s: \"header_xxh3\" must be 16 lowercase hex digits", what, ctx);
            goto out;
        }
        s->file = stk__strdup(file);
        if (!s->file) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = get_u64(o, "records", what, ctx, &s->records, err)) ||
            (rc = get_u64(o, "bytes", what, ctx, &s->bytes, err)))
            goto out;
        if (__builtin_add_overflow(total, s->records, &total)) {
            rc = BAD("%s: record counts overflow", what);
            goto out;
        }
    }
    /* A shard listed twice would deliver its records twice, and every
     * checksum would still match: the names sorted, neighbours compared
     * (linear after the sort; a manifest of 10 TB has some 40,000). */
    if ((rc = check_unique(m, what, err))) goto out;
    if (total != m->records) {
        rc = BAD("%s: the shards hold %llu records but \"records\" says %llu", what,
                 (unsigned long long)total, (unsigned long long)m->records);
        goto out;
    }
    json_t *attrs = json_object_get(root, "attrs");
    if (attrs && !json_is_object(attrs)) {
        rc = BAD("%s: \"attrs\" must be an object", what);
        goto out;
    }
    json_t *inputs = json_object_get(root, "inputs");
    if (inputs && !json_is_string(inputs)) {
        rc = BAD("%s: \"inputs\" must be a string", what);
        goto out;
    }
    char *s = attrs ? json_dumps(attrs, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    m->attrs = stk__strdup(s ? s : "{}");
    free(s);
    json_t *files = json_object_get(root, "input_files");
    if (files && (!json_is_string(files) || !stk__inputs_list_valid(json_string_value(files)))) {
        rc = BAD("%s: \"input_files\" must be a string of lines NAME, SIZE, MTIME_NS, HASH", what);
        goto out;
    }
    /* Statistics are optional: datasets packed before them have none. */
    json_t *stats = json_object_get(root, "stats");
    if (stats && (rc = stk__stats_parse(stats, m->fields, m->nfields, what, &m->stats, err)))
        goto out;
    if (inputs) m->inputs = stk__strdup(json_string_value(inputs));
    if (files) m->inputs_list = stk__strdup(json_string_value(files));
    if (!m->attrs || (inputs && !m->inputs) || (files && !m->inputs_list))
        rc = stk__err(err, -ENOMEM, "out of memory");
out:
    json_decref(root);
    if (rc) stk__manifest_clear(m);
    return rc;
}
