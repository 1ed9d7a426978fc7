/*
 * options.c: the loader's options and what open decides from them.  The
 * defaults and their checks, the fields a loader delivers and how each
 * comes out (a window of rows, a value per sample, ragged), and the choices
 * open makes before it allocates anything: the backend and the warm-up,
 * the memory budget, the read paths (gathering, per-record checks), the
 * staging area and the number of batch buffers.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void stk_loader_options_init(stk_loader_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_size = 32;
    o->stride = 1;
    o->valid = STK_VALID_ALL;
    o->order = STK_ORDER_BLOCK;
    o->block_bytes = 4u << 20;
    o->block_group = 16;
    o->world_size = 1;
    o->split_count = 1;
    o->backend = STK_BACKEND_AUTO;
    o->queue_depth = 64;
    o->memory_budget = 1ull << 30;
    o->verify = 1;
    o->on_error = STK_ON_ERROR_RAISE;
    o->max_skips = 100;
    o->device = -1;
    o->device_buffers = 3;
}

const char *stk_backend_name(stk_backend b) {
    switch (b) {
    case STK_BACKEND_AUTO: return "auto";
    case STK_BACKEND_URING: return "io_uring";
    case STK_BACKEND_POOL: return "pool";
    case STK_BACKEND_MMAP: return "mmap";
    }
    return "unknown";
}

/* ---- checks ---- */

/* A validity rule's field and test, `opt` naming the option in messages. */
static int check_rule(const stk_dataset *ds, const char *opt, const char *field, stk_valid test,
                      int64_t lo, int64_t hi, stk_error *err) {
    if (!field) return stk__err(err, -EINVAL, "%s: a validity rule needs a field", opt);
    if (test < STK_VALID_ALL || test > STK_VALID_OUTSIDE ||
        (test == STK_VALID_ALL && strcmp(opt, "valid_field")))
        return stk__err(err, -EINVAL, "%s: '%s': unknown test %d", opt, field, (int)test);
    int k = stk_dataset_find_field(ds, field);
    if (k < 0) return stk__err(err, -EINVAL, "%s: '%s' is not a field of %s", opt, field, ds->dir);
    const stk_field *f = &ds->fields[k];
    stk_dtype t = f->dtype;
    bool flt = t == STK_F16 || t == STK_BF16 || t == STK_F32 || t == STK_F64;
    bool integer = t == STK_I8 || t == STK_U8 || t == STK_I16 || t == STK_U16 || t == STK_I32 ||
                   t == STK_U32 || t == STK_I64 || t == STK_U64;
    if ((test == STK_VALID_NOT_NAN || test == STK_VALID_FINITE || test == STK_VALID_SOME) && !flt)
        return stk__err(err, -EINVAL, "%s: '%s' is %s; the %s rule needs a float field", opt,
                        field, stk_dtype_name(t), stk_valid_name(test));
    if (f->codec != STK_CODEC_NONE || f->ndim == 0)
        return stk__err(err, -EINVAL, "%s: '%s' must be an uncompressed field with rows", opt,
                        field);
    if (test == STK_VALID_MASK && t == STK_BYTES)
        return stk__err(err, -EINVAL, "%s: '%s' is bytes; the mask rule needs numbers", opt,
                        field);
    if (test == STK_VALID_RANGE || test == STK_VALID_STEP || test == STK_VALID_OUTSIDE) {
        uint64_t elems = 1;
        for (int d = 1; d < f->ndim; d++) elems *= (uint64_t)f->shape[d];
        if (!integer || elems != 1)
            return stk__err(err, -EINVAL,
                            "%s: '%s' is %s with %llu elements a row; the %s rule needs one "
                            "integer a row (a time field)",
                            opt, field, stk_dtype_name(t), (unsigned long long)elems,
                            stk_valid_name(test));
        if ((test == STK_VALID_RANGE || test == STK_VALID_OUTSIDE) && lo > hi)
            return stk__err(err, -EINVAL, "%s: '%s': an empty range [%lld, %lld]", opt, field,
                            (long long)lo, (long long)hi);
        if (test == STK_VALID_STEP && lo < 0)
            return stk__err(err, -EINVAL, "%s: '%s': a negative step %lld", opt, field,
                            (long long)lo);
    }
    return 0;
}

static int check_rules(const stk_dataset *ds, const stk_loader_options *o, stk_error *err) {
    int rc;
    if (o->valid_field && (rc = check_rule(ds, "valid_field", o->valid_field, o->valid, 0, 0, err)))
        return rc;
    if (o->valid == STK_VALID_RANGE || o->valid == STK_VALID_STEP ||
        o->valid == STK_VALID_OUTSIDE)
        return stk__err(err, -EINVAL,
                        "valid: the %s rule takes bounds or a step: give it in valid_rules",
                        stk_valid_name(o->valid));
    if (o->nvalid_rules && !o->valid_rules)
        return stk__err(err, -EINVAL, "valid_rules: NULL with nvalid_rules %zu", o->nvalid_rules);
    if (o->nvalid_rules > STK__MAX_RULES - 1)
        return stk__err(err, -EINVAL, "valid_rules: at most %d rules, not %zu",
                        STK__MAX_RULES - 1, o->nvalid_rules);
    for (size_t i = 0; i < o->nvalid_rules; i++) {
        const stk_valid_rule *r = &o->valid_rules[i];
        if ((rc = check_rule(ds, "valid_rules", r->field, r->test, r->lo, r->hi, err))) return rc;
    }
    return 0;
}

/* The loader's validity rules, resolved: valid_field's first, then
 * valid_rules.  Returns how many (the options were checked). */
size_t stk__ld_rules(const stk_dataset *ds, const stk_loader_options *o, stk__rule *out) {
    size_t n = 0;
    if (o->valid_field && o->valid != STK_VALID_ALL)
        out[n++] = (stk__rule){"valid_field", (size_t)stk_dataset_find_field(ds, o->valid_field),
                               o->valid, 1, 0, 0};
    for (size_t i = 0; i < o->nvalid_rules && n < STK__MAX_RULES; i++) {
        const stk_valid_rule *r = &o->valid_rules[i];
        out[n++] = (stk__rule){"valid_rules", (size_t)stk_dataset_find_field(ds, r->field),
                               r->test, r->last, r->lo, r->hi};
    }
    return n;
}

/* What the dataset's files cannot do (an in-place index of users' own
 * files: stk__caps). */
static int check_caps(const stk_dataset *ds, const stk_loader_options *o, stk_error *err) {
    if (o->direct && !ds->caps.aligned)
        return stk__err(err, -EINVAL,
                        "direct: %s is an in-place index; its files are read through the "
                        "page cache (their records are not aligned for O_DIRECT)",
                        ds->dir);
    if (o->on_error == STK_ON_ERROR_SKIP && !ds->caps.checksums)
        return stk__err(err, -EINVAL,
                        "on_error: skipping damaged samples needs checksums, and the files "
                        "of an in-place index have none");
    if (o->backend == STK_BACKEND_MMAP && !ds->caps.mapped)
        return stk__err(err, -EINVAL,
                        "backend: an index of more than %d files is not mapped; use "
                        "uring or pool",
                        STK_INDEX_MAP_MAX);
    if ((o->valid_field || o->nvalid_rules) && !ds->caps.mapped)
        return stk__err(err, -EINVAL,
                        "valid_field: needs the files mapped, and an index of more than "
                        "%d files is not",
                        STK_INDEX_MAP_MAX);
    return 0;
}

int stk__loader_check_device(const stk_loader_options *o, stk_error *err) {
    if (o->device < -1)
        return stk__err(err, -EINVAL, "device: %d is neither -1 (host) nor a CUDA ordinal",
                        o->device);
    if (o->device >= 0 && o->device_buffers < 2)
        return stk__err(err, -EINVAL, "device_buffers: at least 2 device buffers, not %u",
                        o->device_buffers);
    return 0;
}

int stk__loader_check(const stk_dataset *ds, const stk_loader_options *o, stk_error *err) {
    if (o->batch_size == 0) return stk__err(err, -EINVAL, "batch_size: must be at least 1");
    if (o->world_size == 0) return stk__err(err, -EINVAL, "world_size: must be at least 1");
    int rc = stk__loader_check_device(o, err);
    if (rc) return rc;
    if (o->queue_depth > 32768)
        return stk__err(err, -EINVAL, "queue_depth: %u is more than io_uring takes (32768)",
                        o->queue_depth);
    if (o->split_count == 0) return stk__err(err, -EINVAL, "split_count: must be at least 1");
    if (o->split_index >= o->split_count)
        return stk__err(err, -EINVAL, "split_index: %u is not below split_count %u",
                        o->split_index, o->split_count);
    if (o->rank >= o->world_size)
        return stk__err(err, -EINVAL, "rank: %u is not below world_size %u", o->rank,
                        o->world_size);
    if (o->order != STK_ORDER_SEQUENTIAL && o->order != STK_ORDER_RANDOM &&
        o->order != STK_ORDER_BLOCK)
        return stk__err(err, -EINVAL, "order: unknown value %d", (int)o->order);
    if (o->backend < STK_BACKEND_AUTO || o->backend > STK_BACKEND_MMAP)
        return stk__err(err, -EINVAL, "backend: unknown value %d", (int)o->backend);
    if (o->direct && o->backend == STK_BACKEND_MMAP)
        return stk__err(err, -EINVAL, "direct: O_DIRECT reads cannot use the mmap backend");
    if (o->window && o->stride == 0) return stk__err(err, -EINVAL, "stride: must be at least 1");
    if (!o->window && (o->valid != STK_VALID_ALL || o->valid_field))
        return stk__err(err, -EINVAL, "valid: a validity rule needs windows (window > 0)");
    if (!o->window && o->nvalid_rules)
        return stk__err(err, -EINVAL, "valid_rules: validity rules need windows (window > 0)");
    if (o->valid != STK_VALID_ALL && !o->valid_field)
        return stk__err(err, -EINVAL, "valid_field: the validity rule needs a field");
    if ((rc = check_rules(ds, o, err))) return rc;
    if (o->order == STK_ORDER_BLOCK && o->block_group == 0)
        return stk__err(err, -EINVAL, "block_group: must be at least 1");
    if (o->on_error != STK_ON_ERROR_RAISE && o->on_error != STK_ON_ERROR_SKIP)
        return stk__err(err, -EINVAL, "on_error: unknown value %d", (int)o->on_error);
    if ((rc = check_caps(ds, o, err))) return rc;
    if (o->on_error == STK_ON_ERROR_SKIP && !o->verify)
        return stk__err(err, -EINVAL,
                        "on_error: skipping damaged samples needs verify (checksums) on");
    if (o->on_error == STK_ON_ERROR_SKIP && o->max_skips == 0)
        return stk__err(err, -EINVAL, "max_skips: must be at least 1");
    if (o->threads < 0 || o->threads > MAX_WORKERS)
        return stk__err(err, -EINVAL, "threads: %d is not in 0..%d", o->threads, MAX_WORKERS);
    return 0;
}

/* ---- fields ---- */

/* Whether dataset field k may join the i fields picked so far: each at
 * most once, and never beside a field named like its offsets. */
static int field_may_join(const stk_loader *ld, const stk_loader_options *o, size_t i, int k,
                          stk_error *err) {
    const stk_dataset *ds = ld->ds;
    for (size_t j = 0; j < i; j++)
        if (ld->f[j].dsf == (size_t)k)
            return stk__err(err, -EINVAL, "fields: '%s' is listed twice", o->fields[i]);
    /* A ragged field's offsets come out as "<name>_offsets": a field
     * of that name beside it would be shadowed (datasets written before
     * the writer refused such names). */
    for (size_t j = 0; j < i; j++) {
        const char *a = ds->fields[k].name, *b = ld->f[j].f->name;
        size_t la = strlen(a), lb = strlen(b);
        if ((la == lb + 8 && !strncmp(a, b, lb) && !strcmp(a + lb, "_offsets")) ||
            (lb == la + 8 && !strncmp(b, a, la) && !strcmp(b + la, "_offsets")))
            return stk__err(err, -EINVAL,
                            "fields: '%s' and '%s' cannot be loaded together: a ragged "
                            "field's offsets are delivered as '<name>_offsets'; select one "
                            "of them (fields=)",
                            a, b);
    }
    return 0;
}

/* How field lf comes out of a sample, and its bytes per sample. */
static int field_kind(lfield *lf, const stk_loader_options *o, stk_error *err) {
    bool ragged = lf->f->ndim > 0 && lf->f->shape[0] == STK_RAGGED;
    if (o->window && lf->f->dtype == STK_BYTES) {
        /* Bytes (a string id) are never rows of a series: delivered
         * whole, once per sample. */
        lf->kind = ragged ? F_RAGGED : F_DENSE;
    } else if (o->window) {
        bool timeable = lf->f->ndim > 0 &&
                        (ragged || (uint64_t)lf->f->shape[0] >= o->window);
        lf->kind = timeable ? F_TIME : F_DENSE;
        if (lf->kind == F_TIME && lf->f->codec != STK_CODEC_NONE)
            return stk__err(err, -EINVAL,
                            "window: field '%s' is compressed; windows read row ranges and "
                            "need uncompressed time fields (repack without --compress)",
                            lf->f->name);
    } else {
        lf->kind = ragged ? F_RAGGED : F_DENSE;
    }
    if (lf->kind == F_TIME) lf->sample_bytes = o->window * lf->fi->row_bytes;
    else if (lf->kind == F_DENSE) {
        if (ragged)
            return stk__err(err, -EINVAL,
                            "window: field '%s' is ragged but is not a time field",
                            lf->f->name);
        lf->sample_bytes = (uint64_t)lf->fi->fixed_rows * lf->fi->row_bytes;
    }
    return 0;
}

/* opts.names: the fields take these names in batches (copies the loader
 * owns); two fields may not end up with one name. */
static int rename_fields(stk_loader *ld, const char *const *names, stk_error *err) {
    ld->own_fields = stk__calloc(ld->nf, sizeof *ld->own_fields);
    if (!ld->own_fields) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < ld->nf; i++) {
        ld->own_fields[i] = *ld->f[i].f;
        const char *nm = names[i] ? names[i] : ld->f[i].f->name;
        if (!*nm) return stk__err(err, -EINVAL, "names: an empty name for field '%s'",
                                  ld->f[i].f->name);
        if (!(ld->own_fields[i].name = stk__strdup(nm)))
            return stk__err(err, -ENOMEM, "out of memory");
        ld->f[i].f = &ld->own_fields[i];
    }
    for (size_t i = 0; i < ld->nf; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(ld->own_fields[i].name, ld->own_fields[j].name) == 0)
                return stk__err(err, -EINVAL, "names: two fields would be named '%s'",
                                ld->own_fields[i].name);
    return 0;
}

/* opts.decode: each names a selected media field, which the workers
 * decode into a fixed shape; the loader's schema entry for it says that
 * shape (an entry of own_fields, made here when no rename made them). */
static int media_fields(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    if (!o->ndecode) return 0;
    if (!o->decode) return stk__err(err, -EINVAL, "decode: NULL with ndecode %zu", o->ndecode);
    if (!ld->own_fields) {
        ld->own_fields = stk__calloc(ld->nf, sizeof *ld->own_fields);
        if (!ld->own_fields) return stk__err(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < ld->nf; i++) {
            ld->own_fields[i] = *ld->f[i].f;
            if (!(ld->own_fields[i].name = stk__strdup(ld->f[i].f->name)))
                return stk__err(err, -ENOMEM, "out of memory");
            ld->f[i].f = &ld->own_fields[i];
        }
    }
    ld->decs = stk__calloc(ld->nf, sizeof *ld->decs);
    if (!ld->decs) return stk__err(err, -ENOMEM, "out of memory");
    const stk_dataset *ds = ld->ds;
    for (size_t k = 0; k < o->ndecode; k++) {
        const stk_decode *d = &o->decode[k];
        size_t i = 0;
        int dsf = d->field ? stk_dataset_find_field(ds, d->field) : -1;
        while (i < ld->nf && (dsf < 0 || ld->f[i].dsf != (size_t)dsf)) i++;
        if (i == ld->nf)
            return stk__err(err, -EINVAL, "decode: '%s' is not a selected field of %s",
                            d->field ? d->field : "(null)", ds->origin ? ds->origin : ds->dir);
        lfield *lf = &ld->f[i];
        if (lf->dec)
            return stk__err(err, -EINVAL, "decode: field '%s' is named twice", d->field);
        int rc = stk__media_check(d, &ds->fields[dsf], err);
        if (rc) return rc;
        if (ds->fields[dsf].codec != STK_CODEC_NONE)
            return stk__err(err, -EINVAL,
                            "decode: field '%s' is compressed (zstd); encoded media is stored "
                            "plain (repack it without --compress)",
                            d->field);
        ld->decs[i] = *d;
        ld->decs[i].field = NULL; /* (the caller's string is not kept) */
        lf->dec = &ld->decs[i];
        lf->kind = F_DENSE;
        lf->sample_bytes = stk__media_sample_bytes(d);
        stk_field *f = &ld->own_fields[i];
        if ((rc = stk_decode_shape(d, &f->dtype, &f->ndim, f->shape, err))) return rc;
        f->type = NULL; /* (numbers now: the media type is the stored bytes') */
    }
    return 0;
}

int stk__ld_pick_fields(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    size_t n = o->fields ? o->nfields : ds->nfields;
    if (n == 0) return stk__err(err, -EINVAL, "fields: the list is empty");
    ld->f = stk__calloc(n, sizeof *ld->f);
    if (!ld->f) return stk__err(err, -ENOMEM, "out of memory");
    ld->nf = n;
    for (size_t i = 0; i < n; i++) {
        int k = o->fields ? stk_dataset_find_field(ds, o->fields[i]) : (int)i;
        if (k < 0) {
            char names[256] = "";
            size_t used = 0;
            for (size_t j = 0; j < ds->nfields && used < sizeof names; j++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", j ? ", " : "",
                                         ds->fields[j].name);
            return stk__err(err, -EINVAL, "fields: '%s' is not a field of %s (it has: %s)",
                            o->fields[i] ? o->fields[i] : "(null)", ds->dir, names);
        }
        int rc = field_may_join(ld, o, i, k, err);
        if (rc) return rc;
        lfield *lf = &ld->f[i];
        lf->dsf = (size_t)k;
        lf->f = &ds->fields[k];
        lf->fi = &ds->info[k];
        if ((rc = field_kind(lf, o, err))) return rc;
    }
    int rc = o->names ? rename_fields(ld, o->names, err) : 0;
    return rc ? rc : media_fields(ld, o, err);
}

/* Largest stored size and rows per field, over the whole dataset. */
void stk__ld_field_maxima(stk_loader *ld, uint64_t *max_rows) {
    const stk_dataset *ds = ld->ds;
    for (size_t i = 0; i < ld->nf; i++) max_rows[i] = 0;
    for (size_t s = 0; s < ds->nshards; s++) {
        const stk__shard *sh = &ds->shards[s];
        for (uint64_t r = 0; r < sh->nrec; r++) {
            const uint64_t *e = stk__entry(ds, sh, r);
            for (size_t i = 0; i < ld->nf; i++) {
                lfield *lf = &ld->f[i];
                uint64_t len = stk__e_len(ds, sh, e, lf->dsf);
                lf->max_stored = STK__MAX(lf->max_stored, len);
                lf->sum_stored += len;
                max_rows[i] = STK__MAX(max_rows[i], stk__e_rows(ds, sh, e, lf->dsf));
            }
        }
    }
}

uint64_t stk__ld_fingerprint(const stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    uint64_t h = stk__mix2(stk__schema_hash(ds->fields, ds->nfields), ds->nrec);
    for (size_t s = 0; s < ds->nshards; s++) h = stk__mix2(h, ds->shards[s].size);
    for (size_t i = 0; i < ld->nf; i++) h = stk__mix2(h, ld->f[i].dsf);
    h = stk__mix2(h, ld->opt.window);
    h = stk__mix2(h, ld->opt.stride);
    h = stk__mix2(h, (uint64_t)ld->opt.valid);
    if (ld->opt.valid != STK_VALID_ALL) h = stk__mix2(h, (uint64_t)ld->valid_dsf);
    /* Further rules only change it when there are some, so that a state
     * saved before they existed still resumes. */
    for (size_t i = 0; i < ld->nrules; i++) {
        const stk__rule *r = &ld->rules[i];
        if (!strcmp(r->opt, "valid_field")) continue;
        h = stk__mix2(h, stk__mix2(r->field, (uint64_t)r->test));
        h = stk__mix2(h, stk__mix2(r->last, stk__mix2((uint64_t)r->lo, (uint64_t)r->hi)));
    }
    h = stk__mix2(h, (uint64_t)ld->opt.order);
    if (ld->opt.order != STK_ORDER_SEQUENTIAL) h = stk__mix2(h, STK__ORDER_VERSION);
    h = stk__mix2(h, ld->space.n);
    if (ld->opt.order == STK_ORDER_BLOCK) {
        h = stk__mix2(h, ld->block_samples);
        h = stk__mix2(h, ld->opt.block_group);
    }
    /* (Random order: the blocks dealt to streams, when there are several.) */
    if (ld->opt.order == STK_ORDER_RANDOM) h = stk__mix2(h, ld->block_samples);
    return h;
}

/* ---- backend and warm-up ---- */

/* Bytes of shard data, the records' region of every shard. */
static uint64_t data_bytes(const stk_dataset *ds) {
    uint64_t total = 0;
    for (size_t s = 0; s < ds->nshards; s++)
        total += ds->shards[s].data_end - ds->shards[s].data_off;
    return total;
}

/* Whether the bytes of shard data still outside the page cache (a share
 * 1 - `resident` of it) fit in 3/4 of what the page cache may still take. */
static bool fits_in_memory(const stk_dataset *ds, double resident) {
    uint64_t missing = (uint64_t)((double)data_bytes(ds) * (1.0 - STK__MAX(resident, 0.0)));
    return missing <= stk__mem_room() / 4 * 3;
}

/* Whether to warm up (see stk_warm_up): the data mostly outside the page
 * cache (`resident`, the share of the files in it), every shard mapped,
 * reads through the page cache, and, under AUTO, the mmap backend and room
 * for it. */
static bool want_warm_up(const stk_dataset *ds, const stk_loader_options *o, stk_backend backend,
                         double resident, bool fits) {
    /* A lazy dataset's bytes arrive as batches ask for them: nothing to
     * read ahead of them. */
    if (o->warm_up == STK_WARM_UP_OFF || o->direct || resident >= 0.9 || ds->caps.lazy)
        return false;
    for (size_t s = 0; s < ds->nshards; s++)
        if (!ds->shards[s].map) return false;
    if (o->warm_up == STK_WARM_UP_ON) return true;
    return (backend == STK_BACKEND_AUTO || backend == STK_BACKEND_MMAP) && fits;
}

/* Bytes a sample reads, on average: a window of every time field (plus the
 * per-record fields), or a whole record. */
uint64_t stk__ld_mean_sample_bytes(const stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    if (ld->space.windows) {
        uint64_t b = 0;
        for (size_t i = 0; i < ld->nf; i++)
            b += ld->f[i].kind == F_TIME ? ld->space.L * ld->f[i].fi->stored_row_bytes
                                         : ld->f[i].sample_bytes;
        return b;
    }
    uint64_t total = 0;
    for (size_t s = 0; s < ds->nshards; s++)
        total += ds->shards[s].data_end - ds->shards[s].data_off;
    return ds->nrec ? total / ds->nrec : 0;
}

/* The backend, whether the data fits and whether to warm up, and O_DIRECT
 * where the loader chooses it.  A planned loader reads nothing: no
 * descriptors, no rings. */
int stk__ld_choose_backend(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    bool plan_only = ld->plan_only;
    ld->backend = plan_only ? STK_BACKEND_MMAP : o->backend;
    double resident = plan_only ? 1.0 : stk_dataset_resident(ds);
    ld->fits = resident >= 0.9 || fits_in_memory(ds, resident);
    ld->warm_up = !plan_only && want_warm_up(ds, o, ld->backend, resident, ld->fits);
    /* Under a cache budget, block order reads each group into its buffer
     * while the cache holds it; through the mapping it would read the
     * group's bytes later, when they may have been evicted. */
    bool no_map = ds->cache_limited && o->order == STK_ORDER_BLOCK && !plan_only;
    if (no_map && ld->backend == STK_BACKEND_MMAP)
        return stk__err(err, -EINVAL,
                        "backend: mmap cannot read %s in block order under a cache budget "
                        "smaller than the dataset; use pool or uring (or the default)",
                        ds->origin ? ds->origin : ds->dir);
    if (ld->backend == STK_BACKEND_AUTO) {
        if (!o->direct && !no_map && (resident >= 0.9 || ld->warm_up))
            ld->backend = STK_BACKEND_MMAP;
        else ld->backend = stk__io_uring_available() ? STK_BACKEND_URING : STK_BACKEND_POOL;
    } else if (ld->backend == STK_BACKEND_URING && !stk__io_uring_available()) {
        return stk__err(err, -ENOSYS, "backend: io_uring is not available on this system");
    }
    /* Block order over data that does not fit in memory reads its groups
     * with O_DIRECT: nothing it reads stays in the page cache long enough
     * to be read again, and under a memory limit (a cgroup) the page cache
     * competes with the group buffers for the same bytes. */
    if (o->order == STK_ORDER_BLOCK && !plan_only && !ld->fits && !o->direct &&
        ld->backend != STK_BACKEND_MMAP && ds->caps.aligned) {
        ld->opt.direct = 1;
        ld->auto_direct = true;
    }
    return 0;
}

/* ---- memory ---- */

/* The budget never takes more than half of what memory (and the
 * process's cgroup) has room for: a loader that fills its cgroup with
 * its own buffers leaves the page cache nothing to read into. */
uint64_t stk__ld_budget(const stk_loader *ld, const stk_loader_options *o) {
    uint64_t budget = o->memory_budget;
    uint64_t room = ld->plan_only ? 0 : stk__mem_room();
    if (room && budget > room / 2) budget = room / 2;
    return budget;
}

/* Whether field i is stored plain: no codec, chunk filters or conversion. */
static bool stored_plain(const stk_loader *ld, size_t i) {
    return !(ld->f[i].dec || ld->f[i].f->codec != STK_CODEC_NONE || ld->f[i].fi->chunks || ld->f[i].fi->conv ||
             ld->f[i].fi->conv_varies);
}

/* Whole records of plain fields: checked record by record (rec_check) when
 * every field is loaded and checks raise, and gathered from the mapping
 * (gather.c) under the mmap backend. */
int stk__ld_choose_paths(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    ld->rec_check = o->verify && !ld->use_groups && !ld->space.windows &&
                    o->on_error == STK_ON_ERROR_RAISE && ld->nf == ds->nfields;
    for (size_t i = 0; i < ld->nf && ld->rec_check; i++)
        if (!stored_plain(ld, i)) ld->rec_check = false;
    ld->gather = ld->backend == STK_BACKEND_MMAP && !ld->plan_only && !ld->use_groups &&
                 !ld->space.windows;
    for (size_t i = 0; i < ld->nf && ld->gather; i++)
        if (!stored_plain(ld, i)) ld->gather = false;
    if (ld->rec_check) {
        ld->lf_of = stk__calloc(ds->nfields, sizeof *ld->lf_of);
        if (!ld->lf_of) return stk__err(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < ld->nf; i++) ld->lf_of[ld->f[i].dsf] = i;
    }
    return 0;
}

/* Bytes of a worker's staging area: compressed and narrowed fields, and
 * O_DIRECT reads outside block order. */
uint64_t stk__ld_stage_bytes(stk_loader *ld, const stk_loader_options *o) {
    uint64_t B = o->batch_size, stage_cap = 0, media = 0;
    for (size_t i = 0; i < ld->nf; i++)
        if (ld->f[i].dec) {
            /* Encoded media: sizes run from a few KiB to tens of MiB, so
             * a batch of the largest would be far beyond what batches
             * need.  The mean to start with; a batch that needs more grows
             * its worker's area first (fill.c, media_stage).  Read from the
             * mapping or out of block order's group buffers, they need
             * none. */
            if (ld->backend == STK_BACKEND_MMAP || ld->use_groups) continue;
            uint64_t mean = ld->ds->nrec ? ld->f[i].sum_stored / ld->ds->nrec : 0;
            media += B * stk__align_up(mean + 2 * DIRECT_ALIGN, 64);
        } else if (ld->f[i].f->codec == STK_CODEC_ZSTD || ld->f[i].fi->chunks) {
            stage_cap += B * stk__align_up(ld->f[i].max_stored + 2 * DIRECT_ALIGN, 64);
        } else if (ld->f[i].fi->conv_varies ||
                   stk__conv_in_size(ld->f[i].fi->conv) > ld->f[i].fi->itemsize) {
            /* Narrowing conversions (f64 audio as f32) stage their stored
             * bytes: a window's rows at 8 bytes a sample, or the record. */
            uint64_t per = ld->f[i].kind == F_TIME
                               ? ld->space.L * (ld->f[i].fi->row_bytes / 4 * 8)
                               : ld->f[i].max_stored;
            stage_cap += B * stk__align_up(per + 2 * DIRECT_ALIGN, 64);
        }
    if (o->direct && !ld->use_groups) stage_cap += ld->slot_bytes + B * ld->nf * 2 * DIRECT_ALIGN;
    ld->stage_fixed = stage_cap;
    return stk__align_up(stage_cap + media, DIRECT_ALIGN);
}

/* Ring size from what the budget leaves after the group buffers and the
 * workers' staging: as asked (prefetch), or as many batch buffers as fit,
 * from 2 to 8 (or twice the workers). */
int stk__ld_ring_size(const stk_loader *ld, const stk_loader_options *o, uint64_t budget,
                      uint64_t groups_bytes, uint64_t stage_cap, uint64_t *out, stk_error *err) {
    uint64_t fixed = groups_bytes + stage_cap * (uint64_t)ld->nw;
    uint64_t R = o->prefetch;
    if (!R) {
        R = budget > fixed ? (budget - fixed) / ld->slot_bytes : 0;
        R = STK__MIN(R, (uint64_t)STK__MAX(8, 2 * ld->nw));
        if (R < 2)
            return stk__err(err, -EINVAL,
                            "memory_budget: %llu bytes%s cannot hold two batch buffers of %llu "
                            "bytes%s%s (need at least %llu)%s",
                            (unsigned long long)budget,
                            budget < o->memory_budget
                                ? " (half the memory this process has room for)"
                                : "",
                            (unsigned long long)ld->slot_bytes,
                            groups_bytes ? " besides the block groups' buffers" : "",
                            stage_cap ? " and staging" : "",
                            (unsigned long long)(fixed + 2 * ld->slot_bytes),
                            groups_bytes ? "; lower block_bytes or block_group (a group buffer "
                                           "holds block_group blocks of block_bytes)"
                                         : "");
    } else if (fixed + R * ld->slot_bytes > budget) {
        return stk__err(err, -EINVAL,
                        "memory_budget: %llu bytes cannot hold %llu batch buffers of %llu bytes "
                        "(prefetch) plus %llu for groups and staging",
                        (unsigned long long)budget, (unsigned long long)R,
                        (unsigned long long)ld->slot_bytes, (unsigned long long)fixed);
    }
    *out = R;
    return 0;
}
