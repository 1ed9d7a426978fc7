/*
 * gather.c: whole small records gathered out of the mapping.  When a batch
 * is whole records whose fields are all stored plain and the backend is
 * mmap, a worker plans no reads: it locates every record first, then copies
 * them (checking each against its own checksum when checks are on) with
 * the index entries and the records' first bytes prefetched ahead.  A
 * version 2 dataset's records take a shorter pass (gather_dense), located
 * and placed by arithmetic alone.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <string.h>

/* Whole records of plain fields out of the mapping (the mmap backend).  A
 * sample drawn at random is a cache miss twice over, and on a machine with
 * nested paging an expensive TLB miss too: first its entry in the index,
 * then its bytes.  So the entries are located and prefetched AHEAD_E
 * samples before their record is needed and the records' first bytes AHEAD
 * samples before (the hardware prefetcher follows the rest of a long one),
 * which keeps a dozen misses in flight instead of one.
 *
 * With `check`, each record is hashed against its own checksum as it is
 * copied, or, from 1 KiB up, after the rest of its run of records has
 * been copied (gather_loop).  With a trace running, runs of about RUN
 * bytes are hashed straight from the mapping, then copied while their
 * bytes are still in the cache, the two passes timed apart so that each
 * shows as a span (gather_in_runs). */
#define RUN (64u << 10) /* hashed, then copied while still in L2 */
#define HASH_SAMPLE 64

static inline void prefetch_record(const stk_dataset *ds, const stk__shard *sh, const uint64_t *e) {
    uint64_t x, z;
    stk__record_span(ds, sh, e, &x, &z);
    stk__ld_prefetch(sh->map + x, z - x);
}

/* What one gather keeps: the batch's records located (in a joint draw,
 * by place, and the runs of places of each loader), and its counts.  seq:
 * hashes its worker made before it (one in HASH_SAMPLE is timed, counted
 * across batches, so that the timed ones are not always a batch's first
 * record, whose bytes were the least prefetched). */
typedef struct gather {
    const stk__joint_run *run; /* joint: its runs of places; else NULL */
    const uint64_t *const *ent;
    const uint32_t *shs;
    const uint64_t *recs;
    uint32_t n;
    uint64_t seq;
    uint64_t io_bytes, hashed, nhashed;
} gather;

static int gather_mismatch(const stk__shard *sh, uint64_t rec, stk_error *err) {
    return stk__err(err, STK_ECHECKSUM,
                    "%s: record %llu: checksum mismatch (its bytes do not match the record's "
                    "checksum): the shard is damaged; `stoker verify` lists every damaged record",
                    sh->path, (unsigned long long)rec);
}

/* The dataset of place j of a joint draw: its run's loader's. */
static const stk_dataset *joint_ds(const gather *g, uint32_t j) {
    const stk__joint_run *r = g->run;
    while (r->end <= j) r++;
    return r->ld->ds;
}

/* Prefetches what is needed AHEAD_E and AHEAD places after place j, which
 * belongs to dataset ds as the places before `end` do (in a joint draw,
 * those from `end` on to the next runs' datasets).  A record of a version
 * 2 shard is located without its entry, which is its checksum alone: it
 * is fetched only to be checked. */
static STK__ALWAYS_INLINE void gather_ahead(const stk_dataset *ds, uint32_t end, const gather *g,
                                            uint32_t j, bool check) {
    if (j + AHEAD_E < g->n && (check || !ds->all_dense)) __builtin_prefetch(g->ent[j + AHEAD_E]);
    if (j + AHEAD < g->n) {
        const stk_dataset *d = STK__LIKELY(j + AHEAD < end) ? ds : joint_ds(g, j + AHEAD);
        prefetch_record(d, &d->shards[g->shs[j + AHEAD]], g->ent[j + AHEAD]);
    }
}

/* The first records' entries and bytes, before the pass (which then
 * keeps them coming AHEAD_E and AHEAD records ahead): of dataset ds, or
 * in a joint draw (ds NULL) of their runs' datasets. */
static void gather_prime(const stk_dataset *ds, const gather *g) {
    for (uint32_t j = 0; j < STK__MIN(g->n, AHEAD_E); j++) __builtin_prefetch(g->ent[j]);
    for (uint32_t j = 0; j < STK__MIN(g->n, (uint32_t)AHEAD); j++) {
        const stk_dataset *d = ds ? ds : joint_ds(g, j);
        prefetch_record(d, &d->shards[g->shs[j]], g->ent[j]);
    }
}

/* Hashes record j (the copy at `bytes`, or else its bytes in the mapping)
 * unless the blocks under it were checked this epoch, and compares it with
 * its checksum.  With `ns`, one
 * hash in HASH_SAMPLE is timed: its time added to *ns, counted in *timed. */
static STK__ALWAYS_INLINE int gather_check(stk_loader *ld, gather *g, uint32_t j,
                                           const uint8_t *bytes, uint64_t *ns, uint64_t *timed,
                                           stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const stk__shard *sh = &ds->shards[g->shs[j]];
    uint64_t x, z;
    stk__record_span(ds, sh, g->ent[j], &x, &z);
    if (stk__ld_blocks_checked(ld, g->shs[j], x, z)) return 0;
    bool sample = ns && (g->seq + g->nhashed) % HASH_SAMPLE == 0;
    uint64_t t = sample ? stk__now_ns() : 0;
    uint64_t h = stk__hash(bytes ? bytes : sh->map + x, (size_t)(z - x));
    if (sample) {
        *ns += stk__now_ns() - t;
        (*timed)++;
    }
    if (h != g->ent[j][0]) return gather_mismatch(sh, g->recs[j], err);
    g->hashed += z - x;
    g->nhashed++;
    return 0;
}

/* Copies record j's fields into the batch; returns where the record went
 * when the batch holds it whole as one piece (a dataset of one field, a
 * plain one on this path), else NULL. */
static STK__ALWAYS_INLINE const uint8_t *gather_copy(stk_loader *ld, stk_batch *s, gather *g,
                                                     uint32_t j) {
    const stk__shard *sh = &ld->ds->shards[g->shs[j]];
    const uint8_t *whole = NULL;
    for (size_t fi = 0; fi < ld->nf; fi++) {
        uint64_t off, len, raw;
        uint8_t *dst = stk__ld_place(ld, &ld->f[fi], s, j, sh, g->ent[j], 0, &s->ragged_rows[fi],
                                     &off, &len, &raw);
        memcpy(dst, sh->map + off, (size_t)len);
        g->io_bytes += len;
        whole = dst;
    }
    return ld->nf == 1 && ld->ds->nfields == 1 ? whole : NULL;
}

/* Locates the batch's records: their shards and index entries. */
static void gather_locate(stk_loader *ld, worker *w, uint32_t n, const uint64_t *recs) {
    const stk_dataset *ds = ld->ds;
    uint64_t t_plan = stk__ld_span_open(ld, STK__EV_PLAN);
    for (uint32_t j = 0; j < n; j++) w->ents[j] = stk__ld_record_entry(ds, recs[j], &w->shs[j]);
    uint64_t t = stk__now_ns();
    ld->st_plan_ns += t - t_plan;
    stk__ld_span_add(ld, w, STK__EV_PLAN, t_plan, t, STK__EV_NONE, n);
}

/* A record under 1 KiB, checked as it is copied.  A record the batch
 * holds whole is copied, then its copy is hashed from L1, so what is
 * checked is exactly what is delivered (a page of the mapping that changed
 * between a hash and a copy could not slip through); it costs the same as
 * hashing the mapping first (measured with the hash 0 to 16 records
 * behind the copy: no difference beyond noise).  Other records (several
 * fields, copied to several places) are hashed straight from the mapping,
 * then copied from the cache.  The hashing time is sampled (one record in
 * HASH_SAMPLE timed alone) for the statistics: timing every one would cost
 * two clock reads a record.  Hashing runs of records from the mapping
 * first and copying them after (gather_in_runs) was about 10% slower than
 * this one pass on 512-byte and 1 KiB records (1 KiB records have since
 * gone to runs the other way round: copies first, below). */
static STK__ALWAYS_INLINE int gather_record(stk_loader *ld, const stk_dataset *ds, stk_batch *s,
                                            gather *g, uint32_t j, bool check, uint64_t *ver_ns,
                                            uint64_t *timed, stk_error *err) {
    if (!check) {
        gather_copy(ld, s, g, j);
        return 0;
    }
    if (ld->nf == 1 && ds->nfields == 1) {
        const uint8_t *dst = gather_copy(ld, s, g, j);
        return gather_check(ld, g, j, dst, ver_ns, timed, err);
    }
    int rc = gather_check(ld, g, j, NULL, ver_ns, timed, err);
    if (rc == 0) gather_copy(ld, s, g, j);
    return rc;
}

/* A pass's hashing time, for the statistics: of the hashes taken one at
 * a time, those sampled (their time, how many); of runs, all (timed whole,
 * two clock reads a run). */
typedef struct hash_time {
    uint64_t sampled_ns, timed;
    uint64_t run_ns, run_hashed;
} hash_time;

/* The time a pass took, `total`, split into hashing (the runs' time, and
 * the single hashes' estimated from those timed) and the rest. */
static uint64_t hash_share(uint64_t total, const hash_time *ht, uint64_t nhashed) {
    uint64_t single = nhashed - ht->run_hashed;
    uint64_t est = ht->run_ns + (ht->timed ? ht->sampled_ns * single / ht->timed : 0);
    return STK__MIN(total, est);
}

/* Records of 1 KiB or more (HASH_RUN_MIN) are copied in runs (HASH_RUN
 * records, or HASH_RUN_BYTES of them, whichever comes first), then the
 * run's records are hashed: from the copy where the batch holds a record
 * whole (so what is checked is what is delivered), else from the mapping,
 * whose lines the copy has just brought in.  A damaged record is found
 * once the rest of its run is copied; the batch fails all the same.
 *
 * Hashed as each was copied, such records stalled the copies: the hash
 * right after a copy waits for the copy's bytes, and the copies of the
 * records after it no longer overlap their misses.  A worker's time a
 * sample, one worker, warm, random order, C loop, medians of 5 alternating
 * runs: 1 KiB records (one field) 333.1 ns one by one, 258.5 in runs (169
 * unchecked, in another set of runs); 16 KiB (two fields) 2,698 and 2,634.
 * Smaller records lost in runs (512 B: 128.6 against 135.1; 256 B, two
 * fields: 119.2 against 129.5), so they keep the one-by-one check.  In a
 * microbenchmark (random records from 2 GiB, XXH3 for AVX2), hashing each
 * copy 1 to 32 records behind it did not help at 1 KiB: what helps is the
 * copies of a run following one another. */
#define HASH_RUN_MIN 1024u
#define HASH_RUN 32
#define HASH_RUN_BYTES (32u << 10)

/* Hashes the run's records (positions j[0 .. n), copies copy[]), timed. */
static int hash_run(stk_loader *ld, gather *g, const uint32_t *j, const uint8_t *const *copy,
                    uint32_t n, hash_time *ht, stk_error *err) {
    uint64_t t = stk__now_ns(), h0 = g->nhashed;
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++)
        rc = gather_check(ld, g, j[i], copy[i], NULL, NULL, err);
    ht->run_ns += stk__now_ns() - t;
    ht->run_hashed += g->nhashed - h0;
    return rc;
}

/* The pass over records a .. end - 1, of loader ld, checked when `check`
 * (in a joint draw, the places from `end` on are of the next runs). */
static STK__ALWAYS_INLINE int gather_loop(stk_loader *ld, stk_batch *s, gather *g, uint32_t a,
                                          uint32_t end, bool check, hash_time *ht,
                                          stk_error *err) {
    const stk_dataset *ds = ld->ds;
    int rc = 0;
    uint32_t run[HASH_RUN], nrun = 0; /* records copied, their hashes to come */
    const uint8_t *copy[HASH_RUN];
    uint64_t run_bytes = 0;
    for (uint32_t j = a; j < end && rc == 0; j++) {
        gather_ahead(ds, end, g, j, check);
        uint64_t x = 0, z = 0;
        if (check) stk__record_span(ds, &ds->shards[g->shs[j]], g->ent[j], &x, &z);
        if (z - x < HASH_RUN_MIN) {
            rc = gather_record(ld, ds, s, g, j, check, &ht->sampled_ns, &ht->timed, err);
            continue;
        }
        run[nrun] = j;
        copy[nrun++] = gather_copy(ld, s, g, j);
        run_bytes += z - x;
        if (nrun == HASH_RUN || run_bytes >= HASH_RUN_BYTES) {
            rc = hash_run(ld, g, run, copy, nrun, ht, err);
            nrun = 0;
            run_bytes = 0;
        }
    }
    if (rc == 0 && nrun) rc = hash_run(ld, g, run, copy, nrun, ht, err);
    return rc;
}

/* Whether a batch's records can take gather_dense: a version 2 dataset
 * (every field fixed and plain), every loaded field whole in its own
 * place of the batch (no lanes, no decoding), and, when checked, records
 * under HASH_RUN_MIN (larger ones are hashed in runs, above). */
static bool gather_dense_applies(const stk_loader *ld, const stk_batch *s, bool check) {
    const stk_dataset *ds = ld->ds;
    if (!ds->all_dense || s->lanes) return false;
    for (size_t fi = 0; fi < ld->nf; fi++)
        if (ld->f[fi].kind != F_DENSE || ld->f[fi].dec) return false;
    const stk__layout *L = &ds->layout;
    return !check || L->off[ds->nfields - 1] + L->len[ds->nfields - 1] - L->off[0] < HASH_RUN_MIN;
}

/* gather_loop for version 2 records (gather_dense_applies): a field's
 * bytes lie at the same offset of every record and go to the same offset
 * of every sample's place, so a record is located, prefetched and copied
 * by arithmetic alone, without the general path's per-field decisions
 * (stk__ld_place: lanes, windows, ragged offsets, entries).  Checked as
 * gather_record checks.  One worker, 512-byte records, 1 GB warm, random
 * order, medians of 5 interleaved runs: 88 ns a record unchecked against
 * 114 through gather_loop; two fields (480 + 8 bytes) 110 against 135;
 * 1 KiB 172 against 190; checked, the same within noise (the hash and
 * the misses it delays dominate).  docs/BENCHMARKS.md, "Format version 2
 * against version 1". */
static STK__ALWAYS_INLINE int gather_dense(stk_loader *ld, stk_batch *s, gather *g, bool check,
                                           hash_time *ht, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const stk__layout *L = &ds->layout;
    const uint32_t n = g->n;
    const uint64_t lo = L->off[0], bytes = L->off[ds->nfields - 1] + L->len[ds->nfields - 1] - lo;
    const bool whole = ld->nf == 1 && ds->nfields == 1;
    uint64_t rec_bytes = 0;
    for (size_t fi = 0; fi < ld->nf; fi++) rec_bytes += L->len[ld->f[fi].dsf];
    for (uint32_t j = 0; j < n; j++) {
        if (check && j + AHEAD_E < n) __builtin_prefetch(g->ent[j + AHEAD_E]);
        if (j + AHEAD < n) {
            const stk__shard *a = &ds->shards[g->shs[j + AHEAD]];
            stk__ld_prefetch(a->map + a->data_off +
                                 (uint64_t)(g->ent[j + AHEAD] - a->index) * L->stride + lo,
                             bytes);
        }
        const stk__shard *sh = &ds->shards[g->shs[j]];
        const uint8_t *rec = sh->map + sh->data_off + (uint64_t)(g->ent[j] - sh->index) * L->stride;
        if (check && !whole) {
            int rc = gather_check(ld, g, j, NULL, &ht->sampled_ns, &ht->timed, err);
            if (rc) return rc;
        }
        const uint8_t *dst = NULL;
        for (size_t fi = 0; fi < ld->nf; fi++) {
            const lfield *lf = &ld->f[fi];
            uint8_t *to = s->mem + lf->data_off + (uint64_t)j * lf->sample_bytes;
            memcpy(to, rec + L->off[lf->dsf], (size_t)L->len[lf->dsf]);
            dst = to;
        }
        if (check && whole) {
            int rc = gather_check(ld, g, j, dst, &ht->sampled_ns, &ht->timed, err);
            if (rc) return rc;
        }
    }
    g->io_bytes += (uint64_t)n * rec_bytes;
    return 0;
}

static int gather_one_pass(stk_loader *ld, worker *w, stk_batch *s, gather *g, bool check,
                           stk_error *err) {
    const uint32_t n = g->n;
    uint64_t t0 = stk__ld_span_open(ld, STK__EV_READ);
    hash_time ht = {0};
    int rc = gather_dense_applies(ld, s, check) ? gather_dense(ld, s, g, check, &ht, err)
                                                : gather_loop(ld, s, g, 0, n, check, &ht, err);
    uint64_t t1 = stk__now_ns(), total = t1 - t0;
    uint64_t est = hash_share(total, &ht, g->nhashed);
    ld->st_ver_ns += est;
    ld->st_io_ns += total - est;
    stk__ld_span_add(ld, w, STK__EV_READ, t0, t1, n, STK__EV_NONE);
    return rc;
}

/* With a trace running, the two steps are taken apart so that each
 * shows as a span of its own: runs of about RUN bytes are hashed,
 * then copied while still in L2. */
static int gather_in_runs(stk_loader *ld, worker *w, stk_batch *s, gather *g, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const uint32_t n = g->n;
    int rc = 0;
    for (uint32_t j0 = 0, j1 = 0; j0 < n && rc == 0; j0 = j1) {
        uint64_t t0 = stk__ld_span_open(ld, STK__EV_VERIFY), run = 0;
        for (j1 = j0; j1 < n && rc == 0 && (j1 == j0 || run < RUN); j1++) {
            gather_ahead(ds, n, g, j1, true);
            uint64_t x, z;
            stk__record_span(ds, &ds->shards[g->shs[j1]], g->ent[j1], &x, &z);
            run += z - x;
            rc = gather_check(ld, g, j1, NULL, NULL, NULL, err);
        }
        uint64_t t1 = stk__now_ns();
        ld->st_ver_ns += t1 - t0;
        stk__ld_span_add(ld, w, STK__EV_VERIFY, t0, t1, STK__EV_NONE, j1 - j0);
        if (rc) break;
        t1 = stk__ld_span_open(ld, STK__EV_READ);
        for (uint32_t j = j0; j < j1; j++) gather_copy(ld, s, g, j);
        uint64_t t2 = stk__now_ns();
        ld->st_io_ns += t2 - t1;
        stk__ld_span_add(ld, w, STK__EV_READ, t1, t2, j1 - j0, STK__EV_NONE);
    }
    return rc;
}

int stk__ld_gather_records(stk_loader *ld, worker *w, stk_batch *s, const uint64_t *recs,
                           bool check, stk_error *err) {
    const stk_dataset *ds = ld->ds;
    const uint32_t n = s->n;
    for (size_t fi = 0; fi < ld->nf; fi++) s->ragged_rows[fi] = 0;
    gather_locate(ld, w, n, recs);
    gather g = {NULL, w->ents, w->shs, recs, n, w->hashes, 0, 0, 0};
    gather_prime(ds, &g);
    int rc = !check || !stk__tracing(&ld->trace) ? gather_one_pass(ld, w, s, &g, check, err)
                                                  : gather_in_runs(ld, w, s, &g, err);
    w->hashes += g.nhashed;
    if (rc) return rc;
    for (size_t fi = 0; fi < ld->nf && !s->lanes; fi++)
        if (ld->f[fi].kind == F_RAGGED)
            ((int64_t *)(s->mem + ld->f[fi].offs_off))[n] = (int64_t)s->ragged_rows[fi];
    ld->st_io_n += (uint64_t)n * ld->nf;
    ld->st_io_bytes += g.io_bytes;
    ld->st_ver_n += g.nhashed;
    ld->st_ver_bytes += g.hashed;
    return 0;
}

/* Run by run, each of one loader (its loader, dataset and checks stay put
 * through the run, as in one loader's gather), the prefetches running on
 * across the runs' edges. */
int stk__ld_gather_joint(stk__joint *J, stk_batch *s, uint32_t n, stk_error *err) {
    gather g = {J->run, J->ent, J->shs, J->recs, n, J->hashes, 0, 0, 0};
    gather_prime(NULL, &g);
    uint64_t t0 = stk__now_ns();
    hash_time ht = {0};
    int rc = 0;
    for (size_t r = 0; r < J->nrun && rc == 0; r++) {
        stk_loader *ld = J->run[r].ld;
        rc = gather_loop(ld, s, &g, r ? J->run[r - 1].end : 0, J->run[r].end, ld->rec_check,
                         &ht, err);
    }
    J->hashes += g.nhashed;
    J->read_ns = stk__now_ns() - t0;
    J->ver_ns = hash_share(J->read_ns, &ht, g.nhashed);
    J->hashed = g.hashed;
    J->nhashed = g.nhashed;
    return rc;
}
