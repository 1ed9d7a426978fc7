/*
 * checks.c: read-time checksums.  Each checksum block a batch uses is
 * checked once per epoch (a bitmap per shard says which were), from the
 * mapping or read again through the page cache; whole records of plain
 * fields are instead checked against their own checksums as they land in
 * the slot (rec_check), and blocks the warm-up brings in are checked by
 * workers waiting for it.  Under on_error = skip a damaged block is marked,
 * and a sample on it is replaced by the next good one (substitution).
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <pthread.h>

/* The bitmaps of checked (and, under on_error = skip, damaged) blocks:
 * one bit per checksum block of every shard. */
int stk__ld_checks_init(stk_loader *ld, const stk_loader_options *o, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    ld->verified_off = stk__calloc(ds->nshards + 1, sizeof *ld->verified_off);
    if (!ld->verified_off) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < ds->nshards; i++)
        ld->verified_off[i + 1] = ld->verified_off[i] + (ds->shards[i].nblocks + 63) / 64;
    ld->verified_words = ld->verified_off[ds->nshards];
    ld->verified = stk__calloc(ld->verified_words + 1, sizeof *ld->verified);
    if (o->on_error == STK_ON_ERROR_SKIP)
        ld->bad = stk__calloc(ld->verified_words + 1, sizeof *ld->bad);
    if (!ld->verified || (o->on_error == STK_ON_ERROR_SKIP && !ld->bad))
        return stk__err(err, -ENOMEM, "out of memory");
    bool media = false;
    for (size_t i = 0; i < ld->nf; i++) media |= ld->f[i].dec != NULL;
    if (media && o->on_error == STK_ON_ERROR_SKIP &&
        !(ld->media_bad = stk__calloc(ds->nrec / 64 + 1, sizeof *ld->media_bad)))
        return stk__err(err, -ENOMEM, "out of memory");
    return 0;
}

/* ---- checksum blocks ---- */

/* Bytes [lo, hi) of the shard that sample (rec, t) needs across the
 * loader's fields. */
void stk__ld_sample_span(const stk_loader *ld, uint64_t rec, uint64_t t0, uint64_t t1,
                         size_t *shard, uint64_t *lo, uint64_t *hi) {
    const stk_dataset *ds = ld->ds;
    size_t s = stk__dataset_shard_of(ds, rec);
    const stk__shard *sh = &ds->shards[s];
    const uint64_t *e = stk__entry(ds, sh, rec - sh->first);
    uint64_t a = UINT64_MAX, z = 0;
    for (size_t i = 0; i < ld->nf; i++) {
        const lfield *lf = &ld->f[i];
        uint64_t off = stk__e_off(ds, sh, e, lf->dsf), len = stk__e_len(ds, sh, e, lf->dsf);
        if (lf->kind == F_TIME && !lf->fi->chunks) {
            uint64_t rb = stk__shard_srb(lf->fi, sh);
            a = STK__MIN(a, off + t0 * rb);
            z = STK__MAX(z, off + STK__MIN(t1 * rb, len));
        } else {
            a = STK__MIN(a, off);
            z = STK__MAX(z, off + len);
        }
    }
    *shard = s;
    *lo = a;
    *hi = z;
}

/* Whether every checksum block under shard bytes [x, z) was checked this
 * epoch (by the warm-up as they arrived, say). */
bool stk__ld_blocks_checked(const stk_loader *ld, size_t si, uint64_t x, uint64_t z) {
    const stk__shard *sh = &ld->ds->shards[si];
    if (!ld->verified || z <= x || !sh->block_size ||
        !atomic_load_explicit(&ld->any_verified, memory_order_relaxed))
        return false;
    uint64_t b0 = (x - sh->data_off) / sh->block_size, b1 = (z - 1 - sh->data_off) / sh->block_size;
    for (uint64_t b = b0; b <= b1; b++)
        if (!stk__ld_block_checked(ld, si, b)) return false;
    return true;
}

/* Hashes block b of shard si, whose bytes are at `bytes`, and records it as
 * checked for this epoch; a mismatch names the damaged record. */
int stk__ld_check_block(stk_loader *ld, size_t si, uint64_t b, const uint8_t *bytes,
                        uint64_t rec, stk_error *err) {
    const stk__shard *sh = &ld->ds->shards[si];
    uint64_t t0 = stk__now_ns();
    uint64_t a = sh->data_off + b * sh->block_size;
    uint64_t n = STK__MIN((uint64_t)sh->block_size, sh->data_end - a);
    if (stk__hash(bytes, (size_t)n) != sh->blocks[b]) {
        /* Name the damaged record: the first one around this block whose
         * own checksum fails (the file is intact in length here). */
        uint64_t bad = UINT64_MAX;
        for (uint64_t r = stk__dataset_record_at(ld->ds, sh, a) - sh->first; r < sh->nrec; r++) {
            const uint64_t *e = stk__entry(ld->ds, sh, r);
            uint64_t x, z;
            stk__record_span(ld->ds, sh, e, &x, &z);
            if (x >= a + n) break;
            if (stk__hash(sh->map + x, (size_t)(z - x)) != e[0]) {
                bad = sh->first + r;
                break;
            }
        }
        if (bad == UINT64_MAX)
            return stk__err(err, STK_ECHECKSUM,
                            "%s: checksum mismatch in block %llu (bytes %llu..%llu), read for "
                            "record %llu; the damage is outside every record's bytes",
                            sh->path, (unsigned long long)b, (unsigned long long)a,
                            (unsigned long long)(a + n), (unsigned long long)rec);
        return stk__err(err, STK_ECHECKSUM,
                        "%s: record %llu: checksum mismatch (block %llu, bytes %llu..%llu): "
                        "the shard is damaged; `stoker verify` lists every damaged record",
                        sh->path, (unsigned long long)bad, (unsigned long long)b,
                        (unsigned long long)a, (unsigned long long)(a + n));
    }
    _Atomic uint64_t *word = &ld->verified[ld->verified_off[si] + b / 64];
    uint64_t bit = UINT64_C(1) << (b % 64);
    atomic_store_explicit(&ld->any_verified, true, memory_order_relaxed);
    /* Two workers may check one block at once; count it once. */
    if (!(atomic_fetch_or_explicit(word, bit, memory_order_relaxed) & bit)) {
        ld->st_ver_n++;
        ld->st_ver_bytes += n;
    }
    ld->st_ver_ns += stk__now_ns() - t0;
    return 0;
}

/* Checks the blocks of shard bytes [lo, hi) not yet checked this epoch.
 * The mmap backend hashes the mapping; the others read each block (from
 * the page cache, usually: the batch's own reads just brought it in), so a
 * file that shrank gives an error, never a fault. */
static int verify_range(stk_loader *ld, worker *w, size_t si, uint64_t lo, uint64_t hi,
                        uint64_t rec, stk_error *err) {
    const stk__shard *sh = &ld->ds->shards[si];
    if (hi <= lo) return 0;
    uint64_t bs = sh->block_size;
    uint64_t b0 = (lo - sh->data_off) / bs, b1 = (hi - 1 - sh->data_off) / bs;
    for (uint64_t b = b0; b <= b1; b++) {
        if (stk__ld_block_bad(ld, si, b)) {
            /* A damaged block may hold intact records: under on_error =
             * skip only the damaged record itself is refused. */
            const uint64_t *e = stk__entry(ld->ds, sh, rec - sh->first);
            uint64_t x, z;
            stk__record_span(ld->ds, sh, e, &x, &z);
            if (stk__hash(sh->map + x, (size_t)(z - x)) == e[0]) continue;
            return stk__err(err, STK_ECHECKSUM, "%s: record %llu: checksum mismatch", sh->path,
                            (unsigned long long)rec);
        }
        if (stk__ld_block_checked(ld, si, b)) continue;
        uint64_t a = sh->data_off + b * bs, n = STK__MIN(bs, sh->data_end - a);
        const uint8_t *bytes;
        if (ld->backend == STK_BACKEND_MMAP) {
            bytes = sh->map + a;
        } else {
            uint64_t len = ld->files.direct ? stk__align_up(n, DIRECT_ALIGN) : n;
            stk__ioreq pin = {(uint32_t)si, a, len, n, w->blockbuf, rec, -1};
            int prc = stk__files_pin(&ld->files, &pin, 1, err);
            if (prc) return prc;
            ssize_t got = stk__pread_full(pin.fd, w->blockbuf, (size_t)len, a);
            stk__files_unpin(&ld->files, &pin, 1);
            if (got < 0 || (uint64_t)got < n) {
                /* Name the record where the file now ends, not the one
                 * that happened to share its block. */
                if (got >= 0) rec = stk__dataset_record_at(ld->ds, sh, a + (uint64_t)got);
                stk__ioreq r = {(uint32_t)si, a, len, n, w->blockbuf, rec, -1};
                return stk__io_fail(&ld->files, &r, got < 0 ? (int)got : 0,
                                    got < 0 ? 0 : (uint64_t)got, err);
            }
            bytes = w->blockbuf;
        }
        int rc = stk__ld_check_block(ld, si, b, bytes, rec, err);
        if (rc == STK_ECHECKSUM && ld->bad) {
            stk__ld_mark_bad(ld, si, b);
            b--; /* again, now as a damaged block: the record decides */
            continue;
        }
        if (rc) return rc;
    }
    return 0;
}

/* Checks (once per epoch) the blocks the batch's samples use: block order
 * through the mapping, where no group load checked them. */
int stk__ld_verify_samples(stk_loader *ld, worker *w, uint32_t n, const uint64_t *recs,
                           const uint64_t *ts, stk_error *err) {
    for (uint32_t j = 0; j < n; j++) {
        size_t si;
        uint64_t lo, hi;
        uint64_t t1 = ld->space.windows ? ts[j] + ld->space.L : 0;
        stk__ld_sample_span(ld, recs[j], ts[j], t1, &si, &lo, &hi);
        int rc = verify_range(ld, w, si, lo, hi, recs[j], err);
        if (rc) return rc;
    }
    return 0;
}

/* Checks (once per epoch) the blocks sample (rec, t) uses. */
int stk__ld_sample_ok(stk_loader *ld, worker *w, uint64_t rec, uint64_t t, stk_error *err) {
    if (ld->media_bad && (atomic_load(&ld->media_bad[rec / 64]) >> (rec % 64) & 1)) {
        pthread_mutex_lock(&ld->mu);
        if (ld->media_err_rec == rec)
            *err = ld->media_err;
        else
            stk__err(err, STK_EMEDIA, "%s: record %llu: media that does not decode",
                     ld->ds->shards[stk__dataset_shard_of(ld->ds, rec)].path,
                     (unsigned long long)rec);
        pthread_mutex_unlock(&ld->mu);
        return STK_ECHECKSUM; /* (replaced as a damaged sample is) */
    }
    size_t si;
    uint64_t lo, hi;
    stk__ld_sample_span(ld, rec, t, ld->space.windows ? t + ld->space.L : 0, &si, &lo, &hi);
    return verify_range(ld, w, si, lo, hi, rec, err);
}

/* on_error = skip: the sample at position p failed its checks (why: *err).
 * Takes the next position whose sample passes: p+1, p+2, ... within the
 * epoch, or within the group [gstart, gstart + gsize) in block order, so
 * that every rank still yields the same batches.  Fails after max_skips. */
int stk__ld_substitute(stk_loader *ld, worker *w, uint64_t p, uint64_t gstart, uint64_t gsize,
                       uint64_t *id, uint64_t *rec, uint64_t *t, stk_error *err) {
    stk_error first = *err;
    uint64_t n = gsize ? gsize : ld->space.n;
    uint64_t base = gsize ? gstart : 0;
    for (uint64_t k = 1; k <= ld->opt.max_skips && k < n; k++) {
        uint64_t p2 = base + (p - base + k) % n;
        uint64_t id2 = stk__order_at(&w->order, p2), r2, t2;
        stk__space_locate(&ld->space, id2, &r2, &t2);
        stk_error e2 = {0};
        int rc = stk__ld_sample_ok(ld, w, r2, t2, &e2);
        if (rc == 0) {
            *id = id2;
            *rec = r2;
            *t = t2;
            /* The reason first, then the count, both under the lock that
             * stk_loader_last_skip reads them under: a consumer that saw the
             * count go up before the reason was stored warned of a skip
             * with no reason (once under the sanitized build). */
            pthread_mutex_lock(&ld->mu);
            ld->last_skip = first;
            ld->st_skipped++;
            w->skips++;
            pthread_mutex_unlock(&ld->mu);
            return 0;
        }
        if (rc != STK_ECHECKSUM) {
            *err = e2;
            return rc;
        }
    }
    int code = first.code;
    stk__err(err, code, "on_error=skip: %llu samples in a row failed their checks; the first: %s",
             (unsigned long long)STK__MIN(ld->opt.max_skips, n), first.message);
    return code;
}

/* Checks the blocks of a batch's samples before they are read (outside
 * block order and rec_check; fill.c says why), replacing a damaged sample
 * under on_error = skip. */
int stk__ld_check_before(stk_loader *ld, worker *w, stk_batch *s, uint64_t *recs, uint64_t *ts,
                         stk_error *err) {
    int rc = 0;
    for (uint32_t j = 0; j < s->n && rc == 0; j++) {
        rc = stk__ld_sample_ok(ld, w, recs[j], ts[j], err);
        if (rc == STK_ECHECKSUM && ld->bad)
            rc = stk__ld_substitute(ld, w, stk__deal_at(&w->deal, s->first + j), 0, 0,
                                    &s->samples[j], &recs[j], &ts[j], err);
    }
    return rc;
}

/* ---- whole records ---- */

/* rec_check: hashes each sample's fields as they lie in the slot, with the
 * zero padding between them, and compares with the record's checksum. */
int stk__ld_check_records(stk_loader *ld, stk_batch *s, const uint64_t *recs, stk_error *err) {
    static const uint8_t zeros[256];
    const stk_dataset *ds = ld->ds;
    uint64_t t0 = stk__now_ns(), bytes = 0;
    XXH3_state_t st;
    for (uint32_t j = 0; j < s->n; j++) {
        size_t si = stk__dataset_shard_of(ds, recs[j]);
        const stk__shard *sh = &ds->shards[si];
        const uint64_t *e = stk__entry(ds, sh, recs[j] - sh->first);
        uint64_t k = stk__ld_lane(s, j), h;
        if (ds->nfields == 1) {
            const lfield *lf = &ld->f[0];
            const uint8_t *p = lf->kind == F_RAGGED
                                   ? s->mem + lf->data_off +
                                         (uint64_t)((const int64_t *)(s->mem + lf->offs_off))[k] *
                                             lf->fi->row_bytes
                                   : s->mem + lf->data_off + k * lf->sample_bytes;
            uint64_t len = stk__e_len(ds, sh, e, 0);
            h = stk__hash(p, (size_t)len);
            bytes += len;
        } else {
            XXH3_64bits_reset(&st);
            for (size_t f = 0; f < ds->nfields; f++) {
                const lfield *lf = &ld->f[ld->lf_of[f]];
                const int64_t *offs = (const int64_t *)(s->mem + lf->offs_off);
                const uint8_t *p = lf->kind == F_RAGGED
                                       ? s->mem + lf->data_off +
                                             (uint64_t)offs[k] * lf->fi->row_bytes
                                       : s->mem + lf->data_off + k * lf->sample_bytes;
                uint64_t len = stk__e_len(ds, sh, e, f);
                stk__hash_update(&st, p, (size_t)len);
                bytes += len;
                if (f + 1 < ds->nfields) {
                    uint64_t pad =
                        stk__e_off(ds, sh, e, f + 1) - (stk__e_off(ds, sh, e, f) + len);
                    for (; pad; pad -= STK__MIN(pad, (uint64_t)sizeof zeros))
                        stk__hash_update(&st, zeros, (size_t)STK__MIN(pad, (uint64_t)sizeof zeros));
                }
            }
            h = XXH3_64bits_digest(&st);
        }
        if (h != e[0]) {
            ld->st_ver_ns += stk__now_ns() - t0;
            return stk__err(err, STK_ECHECKSUM,
                            "%s: record %llu: checksum mismatch (its bytes as read do not match "
                            "the record's checksum): the shard is damaged; `stoker verify` lists "
                            "every damaged record",
                            sh->path, (unsigned long long)recs[j]);
        }
    }
    ld->st_ver_n += s->n;
    ld->st_ver_bytes += bytes;
    ld->st_ver_ns += stk__now_ns() - t0;
    return 0;
}

/* ---- during the warm-up ---- */

/* Checks one checksum block that the warm-up has brought in and nobody
 * has checked yet, taking them in the order they arrive, and marks it
 * checked for the epoch; returns false when none is waiting.  Workers call
 * it while they wait for the warm-up, so the checks of the first epoch are
 * done with CPU time they would otherwise spend asleep.  A block that fails
 * is left unmarked: the worker that needs a record on it checks the record
 * itself and names it. */
bool stk__ld_check_arrived_block(stk_loader *ld) {
    const stk_dataset *ds = ld->ds;
    pthread_mutex_lock(&ld->chk_mu);
    for (; ld->chk_range < ld->nwarm_ranges; ld->chk_range++, ld->chk_block = UINT64_MAX) {
        const stk__range *r = &ld->warm_ranges[ld->chk_range];
        const stk__shard *sh = &ds->shards[r->shard];
        uint64_t bs = sh->block_size;
        if (!bs) continue;
        if (ld->chk_block == UINT64_MAX) {
            uint64_t lo = STK__MAX(r->lo, sh->data_off);
            ld->chk_block = (lo - sh->data_off + bs - 1) / bs; /* the first whole block */
        }
        for (; ld->chk_block < sh->nblocks; ld->chk_block++) {
            uint64_t blk = ld->chk_block;
            uint64_t a = sh->data_off + blk * bs, z = STK__MIN(a + bs, sh->data_end);
            if (z > r->hi) break;
            if (stk__ld_block_checked(ld, r->shard, blk)) continue;
            if (!stk__warm_arrived(ld->warm, r->shard, a, z)) {
                pthread_mutex_unlock(&ld->chk_mu);
                return false;
            }
            ld->chk_block++;
            uint64_t gen = atomic_load_explicit(&ld->warm_gen, memory_order_acquire);
            pthread_mutex_unlock(&ld->chk_mu);
            uint64_t t0 = stk__now_ns();
            bool ok = stk__hash(sh->map + a, (size_t)(z - a)) == sh->blocks[blk];
            pthread_mutex_lock(&ld->mu);
            if (ok && ld->gen == gen) {
                _Atomic uint64_t *word = &ld->verified[ld->verified_off[r->shard] + blk / 64];
                uint64_t bit = UINT64_C(1) << (blk % 64);
                atomic_store_explicit(&ld->any_verified, true, memory_order_relaxed);
                if (!(atomic_fetch_or_explicit(word, bit, memory_order_relaxed) & bit)) {
                    ld->st_ver_n++;
                    ld->st_ver_bytes += z - a;
                }
            }
            pthread_mutex_unlock(&ld->mu);
            ld->st_ver_ns += stk__now_ns() - t0;
            return true;
        }
    }
    pthread_mutex_unlock(&ld->chk_mu);
    return false;
}
