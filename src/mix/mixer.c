/*
 * mixer.c: a loader over several sources (stk_loader_open_mixture).
 *
 * Each source is read by a host loader of its own, opened with the
 * mixture's rank, world size and streams S.  The epoch is a sequence of
 * rounds (src/sample/mix.c says which source each holds); a round is S of
 * a source's samples (S batches when batches are homogeneous), consecutive
 * in its own order, so rank r, taking lanes r, r + W, ... of every round,
 * takes each source's samples in exactly the order that source's loader
 * deals them to rank r.  The mixture's own loader is a hooked one
 * (pipeline.h): its worker fills each batch by taking the next samples
 * from the sources' loaders, which read ahead in their threads.  A
 * source's rounds continue from one mixture epoch to the next through its
 * own epochs, so every sample of a source's epoch comes once.
 */
#include "mix.h"

#include "../core/hash.h"
#include "../pipeline/pipeline.h"
#include "../sample/sample.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

typedef struct feed {
    stk_loader *ld;
    const stk_dataset *ds;
    uint64_t units;      /* rounds one epoch of the source gives */
    uint64_t seed, fp;
    uint64_t epoch;      /* the source's epoch being read */
    uint64_t left;       /* this rank's samples left in it */
    stk_batch *b;        /* the batch being taken from, or NULL */
    uint32_t at, n;
    const uint64_t *ids;
    size_t *fmap;            /* mixture field i -> this loader's field */
    stk_batch_field *view;   /* per mixture field: b's */
} feed;

/* A worker's scratch for drawn batches: the lanes grouped by source (each
 * source's from cnt[i]), where each source stands at the batch's first
 * round and after its last, its epoch and place, a draw's sample ids, the
 * rows of a ragged field; and for joint draws (none where a field is
 * ragged) the batch's pieces and the draw's own scratch. */
/* (On cache lines of its own: each worker writes its own every batch.) */
typedef struct drawer {
    _Alignas(64) uint32_t *lanes; /* (aligns the structure, not only lanes) */
    uint32_t *cnt;
    uint64_t *counts, *ends, *sep, *k0, *ids, *rows;
    stk__joint *joint;
    stk__draw_piece *pc;
    size_t np;
} drawer;

typedef struct stk__mixer {
    stk_loader *shell;
    feed *f;
    size_t k;
    stk_mix *mix;
    bool homogeneous;
    /* Drawn: the shell's workers read every source's samples straight
     * into its batches (stk__loader_draw), in parallel; otherwise (fed)
     * its one worker copies them from the sources' own batches. */
    bool drawn;
    bool handout; /* homogeneous batches of sources whose fields differ: the
                   * sources' own batches, handed out (fed, never copied) */
    int workers;
    drawer *dw;
    stk_loader **parts; /* the sources' loaders, for the shell's statistics */
    uint64_t B, W, r, S, unit, rounds;
    uint64_t part, nparts; /* a split: this process takes batches part, part + nparts, ... */
    uint64_t *src_rounds, *counts;
    uint64_t seed, fp;
    uint64_t epoch, start;
    size_t nf;
    bool *ragged;
    uint64_t *sample_bytes, *row_bytes;
    /* fill's scratch, per field (under mu) */
    uint8_t **dst;
    int64_t **offs;
    uint64_t *cap, *rows;
    uint32_t *sched; /* the sources of a batch's rounds (batch_size + 2) */
    /* Homogeneous: the batches handed out since `start`, the last one and
     * its source (for unget). */
    uint64_t taken;
    stk_batch *last;
    uint32_t last_src;
    pthread_mutex_t mu;
} stk__mixer;

static const char *src_name(const feed *f) { return stk_dataset_path(f->ds); }

static void feed_drop(feed *f) {
    if (f->b) stk__loader_release(f->ld, f->b);
    f->b = NULL;
    f->at = f->n = 0;
}

/* Makes sure f->b has a sample to take: the next batch of the source's
 * loader, into its next epoch when this rank's share of the current one
 * is taken. */
static int feed_fill(stk__mixer *m, feed *f, stk_error *err) {
    if (f->b && f->at < f->n) return 0;
    feed_drop(f);
    int rc;
    if (f->left == 0) {
        if ((rc = stk__loader_set_epoch(f->ld, ++f->epoch, err))) return rc;
        f->left = f->units * m->unit / m->W;
    }
    rc = stk__loader_next(f->ld, &f->b, -1, err);
    if (rc == STK_END)
        return stk__err(err, -EIO, "mixture: source %s ended its epoch %llu before the mixture's "
                        "share of it", src_name(f), (unsigned long long)f->epoch);
    if (rc) {
        f->b = NULL;
        return rc;
    }
    f->at = 0;
    f->n = stk_batch_size(f->b);
    f->ids = stk_batch_samples(f->b);
    for (size_t i = 0; i < m->nf; i++) stk_batch_field_get(f->b, f->fmap[i], &f->view[i]);
    return 0;
}

static int room_error(stk__mixer *m, size_t i, stk_error *err) {
    return stk__err(err, -EOVERFLOW, "mixture: field %s of a batch needs more room than planned",
                    stk_loader_field(m->shell, i)->name);
}

/* Mixed batches: each sample from the source of its round. */
static int fill_mixed(stk__mixer *m, stk_batch *s, stk_error *err) {
    uint32_t n = stk_batch_size(s);
    uint64_t first = m->start + stk_batch_index(s) * m->B * m->W + m->r;
    uint64_t *ids = stk__batch_ids(s);
    uint32_t *srcs = stk__batch_srcs(s);
    uint8_t **dst = m->dst;
    int64_t **offs = m->offs;
    uint64_t *cap = m->cap, *rows = m->rows;
    for (size_t i = 0; i < m->nf; i++) {
        dst[i] = stk__batch_field_dst(s, i, &offs[i], &cap[i]);
        rows[i] = 0;
        if (offs[i]) offs[i][0] = 0;
    }
    /* The rounds of rank r's positions first, first + W, ...: consecutive
     * (a round holds S / W of them). */
    uint64_t q0 = first / m->unit, q1 = (first + (uint64_t)(n - 1) * m->W) / m->unit;
    stk_mix_fill(m->mix, m->epoch, q0, q1 - q0 + 1, m->sched);
    for (uint32_t t = 0; t < n;) {
        uint32_t src = m->sched[(first + (uint64_t)t * m->W) / m->unit - q0];
        feed *f = &m->f[src];
        int rc = feed_fill(m, f, err);
        if (rc) return rc;
        /* A run: the next samples of the same source, from this batch of
         * its, copied at once. */
        uint32_t len = 1, most = (uint32_t)STK__MIN((uint64_t)(f->n - f->at), f->left);
        while (t + len < n && len < most &&
               m->sched[(first + (uint64_t)(t + len) * m->W) / m->unit - q0] == src)
            len++;
        uint32_t k = f->at;
        memcpy(ids + t, f->ids + k, len * sizeof *ids);
        for (uint32_t x = 0; x < len; x++) srcs[t + x] = src;
        for (size_t i = 0; i < m->nf; i++) {
            const stk_batch_field *v = &f->view[i];
            if (!m->ragged[i]) {
                uint64_t sb = m->sample_bytes[i];
                memcpy(dst[i] + (uint64_t)t * sb, (const uint8_t *)v->data + (uint64_t)k * sb,
                       (uint64_t)len * sb);
                continue;
            }
            uint64_t a = (uint64_t)v->offsets[k], z = (uint64_t)v->offsets[k + len];
            uint64_t rb = m->row_bytes[i];
            if ((rows[i] + (z - a)) * rb > cap[i]) return room_error(m, i, err);
            memcpy(dst[i] + rows[i] * rb, (const uint8_t *)v->data + a * rb, (z - a) * rb);
            for (uint32_t x = 0; x < len; x++)
                offs[i][t + x + 1] = (int64_t)(rows[i] + (uint64_t)v->offsets[k + x + 1] - a);
            rows[i] += z - a;
        }
        f->at += len;
        f->left -= len;
        if (f->left == 0) feed_drop(f); /* the rest of its epoch is not ours */
        t += len;
    }
    for (size_t i = 0; i < m->nf; i++)
        if (m->ragged[i]) stk__batch_set_rows(s, i, rows[i]);
    return 0;
}

/* ---- drawn batches ---- */

/* Where the batch's samples come from.  Each sample's source goes to
 * srcs[t], and the lanes are grouped by source (d->lanes, source i's from
 * d->cnt[i]).  A source's samples in the batch are consecutive places of
 * its order, running on into its next epoch where one ends: its rounds
 * follow one another in its own order, and within a round the rank's
 * places are consecutive.  So where each source's first sample lies (its
 * epoch d->sep[i] and place d->k0[i]) says where all of them lie. */
static void draw_walk(const stk__mixer *m, drawer *d, uint64_t E, uint64_t first, uint32_t n,
                      uint32_t *srcs) {
    uint64_t q0 = first / m->unit, q1 = (first + (uint64_t)(n - 1) * m->W) / m->unit;
    uint64_t nq = q1 - q0 + 1;
    stk_mix_counts(m->mix, E, q0, d->counts);
    stk_mix_counts(m->mix, E, q1 + 1, d->ends);
    uint64_t per = m->unit / m->W, idx = (first - m->r) % m->unit / m->W;
    uint64_t last = idx + n - (nq - 1) * per; /* places of round q1 taken */
    /* (The sources of the first and last rounds matter only where the
     * batch takes part of them.) */
    uint32_t s0 = idx ? stk_mix_source_at(m->mix, E, q0, NULL) : UINT32_MAX;
    uint32_t s1 = last < per ? stk_mix_source_at(m->mix, E, q1, NULL) : UINT32_MAX;
    for (size_t i = 0; i < m->k; i++) {
        uint64_t R = E * m->src_rounds[i] + d->counts[i];
        d->sep[i] = R / m->f[i].units;
        d->k0[i] = R % m->f[i].units * per + (i == s0 ? idx : 0);
    }
    /* Each source's samples: its rounds q0 .. q1 (the counts at both
     * ends), less the places of the first round before idx and those of
     * the last after the batch; their lanes start at d->cnt[i]. */
    d->cnt[0] = 0;
    for (size_t i = 0; i < m->k; i++) {
        uint64_t c = (d->ends[i] - d->counts[i]) * per;
        c -= (i == s0 ? idx : 0) + (i == s1 ? per - last : 0);
        d->cnt[i + 1] = d->cnt[i] + (uint32_t)c;
    }
    /* Every sample's source, and its lane in its source's run. */
    stk__mix_place(m->mix, E, q0, per, idx, n, srcs, d->lanes, d->cnt);
    /* (cnt[i] now ends source i's lanes: shifted back) */
    for (size_t i = m->k; i > 0; i--) d->cnt[i] = d->cnt[i - 1];
    d->cnt[0] = 0;
}

/* Source src's lanes a .. z of the batch, cut at the ends of its epochs:
 * fn(lanes at, count, epoch, first place) for each piece. */
typedef int (*piece_fn)(stk__mixer *m, drawer *d, stk_batch *s, int wi, uint32_t src,
                        uint32_t at, uint32_t len, uint64_t epoch, uint64_t k, void *arg,
                        stk_error *err);

static int draw_pieces(stk__mixer *m, drawer *d, stk_batch *s, int wi, piece_fn fn, void *arg,
                       stk_error *err) {
    for (uint32_t src = 0; src < m->k; src++) {
        uint32_t a = d->cnt[src], z = d->cnt[src + 1];
        uint64_t ep = d->sep[src], k = d->k0[src];
        uint64_t len_ep = m->f[src].units * (m->unit / m->W); /* the rank's places */
        while (a < z) {
            uint32_t len = (uint32_t)STK__MIN((uint64_t)(z - a), len_ep - k);
            int rc = fn(m, d, s, wi, src, a, len, ep, k, arg, err);
            if (rc) return rc;
            a += len;
            ep++;
            k = 0;
        }
    }
    return 0;
}

static int piece_rows(stk__mixer *m, drawer *d, stk_batch *s, int wi, uint32_t src, uint32_t at,
                      uint32_t len, uint64_t ep, uint64_t k, void *arg, stk_error *err) {
    (void)s;
    (void)err;
    size_t i = *(const size_t *)arg;
    stk__loader_draw_rows(m->f[src].ld, wi, ep, k, len, m->f[src].fmap[i], d->lanes + at,
                          d->rows);
    return 0;
}

static int piece_read(stk__mixer *m, drawer *d, stk_batch *s, int wi, uint32_t src, uint32_t at,
                      uint32_t len, uint64_t ep, uint64_t k, void *arg, stk_error *err) {
    uint64_t *ids = arg;
    int rc = stk__loader_draw(m->f[src].ld, wi, ep, k, len, stk__batch_mem(s), d->lanes + at,
                              d->ids, err);
    for (uint32_t j = 0; rc == 0 && j < len; j++) ids[d->lanes[at + j]] = d->ids[j];
    return rc;
}

static int piece_note(stk__mixer *m, drawer *d, stk_batch *s, int wi, uint32_t src, uint32_t at,
                      uint32_t len, uint64_t ep, uint64_t k, void *arg, stk_error *err) {
    (void)s;
    (void)wi;
    (void)arg;
    if (d->np == m->k + m->B) /* (cannot happen: at most a piece a sample) */
        return stk__err(err, -EOVERFLOW, "mixture: more pieces in a batch than samples");
    d->pc[d->np++] = (stk__draw_piece){src, len, ep, k, d->lanes + at};
    return 0;
}

/* Whether the batch can be drawn in one joint pass (every source's
 * loader joinable now: a trace may start or stop between batches). */
static bool joinable(const stk__mixer *m, const drawer *d) {
    if (!d->joint) return false;
    for (size_t i = 0; i < m->k; i++)
        if (!stk__loader_joinable(m->f[i].ld)) return false;
    return true;
}

static int fill_drawn(stk__mixer *m, stk_batch *s, int wi, stk_error *err) {
    drawer *d = &m->dw[wi];
    /* The epoch the batch was claimed in; no lock: a batch of an epoch
     * that moved on is discarded when filled. */
    uint64_t E, start;
    stk__loader_worker_epoch(m->shell, wi, &E, &start);
    uint32_t n = stk_batch_size(s);
    /* (With a split, this process's batch b is the rank's part + b * nparts.) */
    uint64_t b = m->part + stk_batch_index(s) * m->nparts;
    draw_walk(m, d, E, start + b * m->B * m->W + m->r, n, stk__batch_srcs(s));
    if (joinable(m, d)) {
        d->np = 0;
        int rc = draw_pieces(m, d, s, wi, piece_note, NULL, err);
        if (rc) return rc;
        return stk__loader_draw_joint(d->joint, m->shell, m->parts, wi, d->pc, d->np,
                                      stk__batch_mem(s), n, stk__batch_ids(s), err);
    }
    /* Ragged fields: every sample's rows first, for the offsets. */
    for (size_t i = 0; i < m->nf; i++) {
        if (!m->ragged[i]) continue;
        int rc = draw_pieces(m, d, s, wi, piece_rows, &i, err);
        if (rc) return rc;
        int64_t *offs;
        uint64_t cap, rows = 0;
        stk__batch_field_dst(s, i, &offs, &cap);
        offs[0] = 0;
        for (uint32_t t = 0; t < n; t++) offs[t + 1] = (int64_t)(rows += d->rows[t]);
        if (rows * m->row_bytes[i] > cap) return room_error(m, i, err);
        stk__batch_set_rows(s, i, rows);
    }
    return draw_pieces(m, d, s, wi, piece_read, stk__batch_ids(s), err);
}

static int fill(void *ctx, stk_batch *s, int wi, stk_error *err) {
    stk__mixer *m = ctx;
    if (m->drawn) return fill_drawn(m, s, wi, err);
    pthread_mutex_lock(&m->mu);
    int rc = -ECANCELED; /* an epoch that moved on: the batch is discarded */
    if (stk__batch_current(s)) rc = fill_mixed(m, s, err);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Puts every source where (epoch, position P) of the mixture has it, and
 * the mixture's loader at P.  Under m->mu. */
static int position(stk__mixer *m, uint64_t epoch, uint64_t P, stk_error *err) {
    uint64_t T = m->rounds * m->unit;
    if (P % m->W || (m->homogeneous && P % (m->B * m->W)))
        return stk__err(err, -EINVAL,
                        "mixture: position %llu is not at a batch edge of %llu ranks (a mixture "
                        "resumes a state saved by a run whose world size this one divides)",
                        (unsigned long long)P, (unsigned long long)m->W);
    if (P > T)
        return stk__err(err, -EINVAL, "mixture: position %llu is past the epoch's %llu samples",
                        (unsigned long long)P, (unsigned long long)T);
    uint64_t q = P / m->unit, off = P % m->unit;
    stk_mix_counts(m->mix, epoch, q, m->counts);
    uint32_t here = off ? stk_mix_source_at(m->mix, epoch, q, NULL) : UINT32_MAX;
    for (size_t i = 0; i < m->k; i++) {
        feed *f = &m->f[i];
        if (m->drawn) { /* drawn batches find their places themselves */
            stk__loader_draw_epoch(f->ld);
            continue;
        }
        feed_drop(f);
        uint64_t r = epoch * m->src_rounds[i] + m->counts[i];
        uint64_t pos = (r % f->units) * m->unit + (i == here ? off : 0);
        stk_loader_state st = {f->seed, r / f->units, pos, f->fp, m->S};
        int rc = stk__loader_restore(f->ld, &st, err);
        if (rc) return rc;
        f->epoch = r / f->units;
        f->left = (f->units * m->unit - pos) / m->W;
    }
    m->epoch = epoch;
    m->start = P;
    m->taken = 0;
    m->last = NULL;
    stk__loader_hooked_position(m->shell, T, m->seed, epoch, P, m->S, m->fp);
    return 0;
}

/* ---- handed out: homogeneous batches that are the sources' own ---- */

int stk__mixture_next(stk__mixer *m, stk_batch **out, int64_t timeout_ms, stk_error *err) {
    if (!m->handout) return stk__loader_next(m->shell, out, timeout_ms, err);
    *out = NULL;
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    if (m->taken >= stk_loader_rank_batches(m->shell)) {
        rc = STK_END;
    } else {
        uint64_t p = m->start + m->taken * m->B * m->W + m->r;
        uint32_t src = stk_mix_source_at(m->mix, m->epoch, p / m->unit, NULL);
        feed *f = &m->f[src];
        if (f->left == 0) {
            rc = stk__loader_set_epoch(f->ld, f->epoch + 1, err);
            if (rc == 0) {
                f->epoch++;
                f->left = f->units * m->unit / m->W;
            }
        }
        stk_batch *b = NULL;
        if (rc == 0) rc = stk__loader_next(f->ld, &b, timeout_ms, err);
        if (rc == STK_END)
            rc = stk__err(err, -EIO, "mixture: source %s ended its epoch %llu before the "
                          "mixture's share of it", src_name(f), (unsigned long long)f->epoch);
        if (rc == 0) {
            uint32_t n = stk_batch_size(b), *srcs = stk__batch_srcs(b);
            for (uint32_t t = 0; t < n; t++) srcs[t] = src;
            f->left -= n;
            m->taken++;
            m->last = b;
            m->last_src = src;
            *out = b;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int stk__mixture_add_buffer(stk__mixer *m, stk_error *err) {
    if (!m->handout) return stk__loader_add_buffer(m->shell, err);
    int rc = 0;
    for (size_t i = 0; i < m->k && rc == 0; i++) rc = stk__loader_add_buffer(m->f[i].ld, err);
    return rc;
}

void stk__mixture_release(stk__mixer *m, stk_batch *b) {
    stk__loader_release(stk__batch_loader(b), b);
    (void)m;
}

int stk__mixture_unget(stk__mixer *m, stk_batch *b) {
    if (!m->handout) return stk__loader_unget(m->shell, b);
    pthread_mutex_lock(&m->mu);
    int rc = -EINVAL;
    if (b == m->last) {
        feed *f = &m->f[m->last_src];
        rc = stk__loader_unget(f->ld, b);
        if (rc == 0) {
            f->left += stk_batch_size(b);
            m->taken--;
            m->last = NULL;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void stk__mixture_save(stk__mixer *m, stk_loader_state *st) {
    if (!m->handout) {
        stk__loader_save(m->shell, st);
        return;
    }
    pthread_mutex_lock(&m->mu);
    uint64_t T = m->rounds * m->unit;
    *st = (stk_loader_state){m->seed, m->epoch,
                             STK__MIN(m->start + m->taken * m->B * m->W, T), m->fp, m->S};
    pthread_mutex_unlock(&m->mu);
}

int stk__mixture_set_epoch(stk__mixer *m, uint64_t epoch, stk_error *err) {
    pthread_mutex_lock(&m->mu);
    int rc = position(m, epoch, 0, err);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int stk__mixture_restore(stk__mixer *m, const stk_loader_state *st, stk_error *err) {
    if (st->fingerprint != m->fp)
        return stk__err(err, -EINVAL,
                        "state: it was saved by another mixture (its sources, weights, counts, "
                        "policy or names differ)");
    if (st->seed != m->seed)
        return stk__err(err, -EINVAL, "state: its seed %llu is not this mixture's %llu",
                        (unsigned long long)st->seed, (unsigned long long)m->seed);
    if ((st->streams ? st->streams : 1) != m->S)
        return stk__err(err, -EINVAL,
                        "state: its streams (%llu) are not this mixture's (%llu); open the "
                        "mixture with streams=%llu to resume it",
                        (unsigned long long)st->streams, (unsigned long long)m->S,
                        (unsigned long long)st->streams);
    pthread_mutex_lock(&m->mu);
    int rc = position(m, st->epoch, st->position, err);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int stk__mixture_fetch_epoch(stk__mixer *m, uint64_t *bytes, stk_error *err) {
    *bytes = 0;
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    for (size_t i = 0; i < m->k && !rc; i++) {
        uint64_t b = 0;
        rc = stk__loader_fetch_epoch(m->f[i].ld, &b, err);
        *bytes += b;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

bool stk__mixture_hands_out(const stk__mixer *m) { return m->handout; }

void stk__mixture_stop(stk__mixer *m) {
    stk__loader_stop(m->shell);
    for (size_t i = 0; i < m->k; i++) stk__loader_stop(m->f[i].ld);
}

static void drawers_free(stk__mixer *m) {
    for (int w = 0; m->dw && w < m->workers; w++) {
        drawer *d = &m->dw[w];
        stk__free(d->lanes);
        stk__free(d->cnt);
        stk__free(d->counts);
        stk__free(d->ends);
        stk__free(d->sep);
        stk__free(d->k0);
        stk__free(d->ids);
        stk__free(d->rows);
        stk__joint_free(d->joint);
        stk__free(d->pc);
    }
    stk__free(m->dw);
}

/* Each worker's drawer and scratch on cache lines of their own: the
 * workers write theirs every batch. */
static int drawers_alloc(stk__mixer *m, stk_error *err) {
    if (!(m->dw = stk__calloc_lines((size_t)m->workers, sizeof *m->dw)))
        return stk__err(err, -ENOMEM, "out of memory");
    size_t B = m->B, k = m->k;
    bool ragged = false;
    for (size_t i = 0; i < m->nf; i++) ragged |= m->ragged[i];
    for (int w = 0; w < m->workers; w++) {
        drawer *d = &m->dw[w];
        d->lanes = stk__calloc_lines(B, sizeof *d->lanes);
        d->cnt = stk__calloc_lines(k + 1, sizeof *d->cnt);
        d->counts = stk__calloc_lines(k, sizeof *d->counts);
        d->ends = stk__calloc_lines(k, sizeof *d->ends);
        d->sep = stk__calloc_lines(k, sizeof *d->sep);
        d->k0 = stk__calloc_lines(k, sizeof *d->k0);
        d->ids = stk__calloc_lines(B, sizeof *d->ids);
        d->rows = stk__calloc_lines(B, sizeof *d->rows);
        if (!d->lanes || !d->cnt || !d->counts || !d->ends || !d->sep || !d->k0 || !d->ids ||
            !d->rows)
            return stk__err(err, -ENOMEM, "out of memory");
        if (ragged) continue;
        /* (A piece per source, and one more each time a source's epoch
         * ends within the batch: at most one a sample.) */
        d->joint = stk__joint_new((uint32_t)B, k, m->nf);
        d->pc = stk__calloc_lines(k + B, sizeof *d->pc);
        if (!d->joint || !d->pc) return stk__err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

static void close_sources(stk__mixer *m) {
    for (size_t i = 0; m->f && i < m->k; i++) {
        feed *f = &m->f[i];
        feed_drop(f);
        stk__loader_close(f->ld);
        stk__free(f->fmap);
        stk__free(f->view);
        f->ld = NULL;
        f->fmap = NULL;
        f->view = NULL;
    }
}

static void mixer_free(stk__mixer *m) {
    if (!m) return;
    stk__loader_close(m->shell); /* joins its workers: no fill runs after */
    drawers_free(m);
    close_sources(m);
    stk__free(m->parts);
    stk__free(m->f);
    stk_mix_close(m->mix);
    stk__free(m->src_rounds);
    stk__free(m->counts);
    stk__free(m->ragged);
    stk__free(m->sample_bytes);
    stk__free(m->row_bytes);
    stk__free(m->dst);
    stk__free(m->offs);
    stk__free(m->cap);
    stk__free(m->rows);
    stk__free(m->sched);
    pthread_mutex_destroy(&m->mu);
    stk__free(m);
}

void stk__mixture_close(stk__mixer *m) { mixer_free(m); }

/* (The sources' loaders were opened with their names.) */
static const char *field_name(const stk_loader *ld, size_t j) {
    return stk_loader_field(ld, j)->name;
}

/* Source i's fields against the mixture's (source 0's): the same names,
 * types and shapes; fmap says where each is. */
static int match_fields(stk__mixer *m, size_t i, stk_error *err) {
    feed *f0 = &m->f[0], *f = &m->f[i];
    size_t nf = stk_loader_num_fields(f->ld);
    if (nf != m->nf)
        return stk__err(err, STK_ESCHEMA,
                        "mixture: source %zu (%s) gives %zu fields, source 0 (%s) %zu: select "
                        "and name them to match, or use homogeneous batches of sources whose "
                        "fields differ (the Python package's)",
                        i, src_name(f), nf, src_name(f0), m->nf);
    for (size_t a = 0; a < m->nf; a++) {
        const char *want = field_name(f0->ld, a);
        size_t b = nf;
        for (size_t j = 0; j < nf; j++)
            if (strcmp(field_name(f->ld, j), want) == 0) b = j;
        if (b == nf)
            return stk__err(err, STK_ESCHEMA,
                            "mixture: source %zu (%s) has no field named '%s' (source 0 has it); "
                            "give it names that match", i, src_name(f), want);
        const stk_field *x = stk_loader_field(f0->ld, a), *y = stk_loader_field(f->ld, b);
        bool same = x->dtype == y->dtype && x->ndim == y->ndim &&
                    stk__loader_field_ragged(f0->ld, a) == stk__loader_field_ragged(f->ld, b) &&
                    stk__loader_window(f0->ld) == stk__loader_window(f->ld);
        for (int d = 1; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        if (same && !m->ragged[a])
            same = stk__loader_field_max_bytes(f0->ld, a) == stk__loader_field_max_bytes(f->ld, b);
        if (!same)
            return stk__err(err, STK_ESCHEMA,
                            "mixture: field '%s' of source %zu (%s) differs from source 0's (%s) "
                            "in type, shape or window", want, i, src_name(f), src_name(f0));
        f->fmap[a] = b;
    }
    return 0;
}

static uint64_t fingerprint(const stk__mixer *m, const stk_mixture_source *src,
                            const stk_mixture_options *mo) {
    uint64_t h = stk__mix2(m->k, (uint64_t)mo->exhaust * 2 + (mo->homogeneous != 0));
    if (mo->homogeneous) h = stk__mix2(h, m->B);
    for (size_t i = 0; i < m->k; i++) {
        uint64_t w;
        memcpy(&w, &src[i].weight, sizeof w);
        h = stk__mix2(stk__mix2(stk__mix2(h, m->f[i].fp), src[i].count ? src[i].count : w),
                      m->f[i].seed);
        for (size_t j = 0; j < stk_loader_num_fields(m->f[i].ld); j++) {
            const char *nm = field_name(m->f[i].ld, j);
            h = stk__mix2(h, stk__hash(nm, strlen(nm)));
        }
    }
    return h;
}

/* Source i's loader options: its own, with the mixture's share of work. */
static void source_options(const stk__mixer *m, const stk_mixture_source *src, size_t i,
                           const stk_loader_options *common, stk_loader_options *o) {
    if (src[i].opts) *o = *src[i].opts;
    else stk_loader_options_init(o);
    o->batch_size = common->batch_size;
    o->rank = common->rank;
    o->world_size = common->world_size;
    o->streams = (uint32_t)m->S;
    o->pad = 0;
    o->drop_last = 0;
    o->split_index = 0;
    o->split_count = 1;
    o->epoch = 0;
    o->device = -1;
    o->threads = common->threads;
    o->prefetch = common->prefetch;
    o->memory_budget = STK__MAX(common->memory_budget / m->k, (uint64_t)1 << 20);
    o->names = src[i].names;
}

/* The sources' sizes (counted without opening their loaders) and the
 * schedule. */
static int plan_sources(stk__mixer *m, const stk_mixture_source *src,
                        const stk_loader_options *common, const stk_mixture_options *mo,
                        stk_error *err) {
    stk_mix_source *spec = stk__calloc(m->k, sizeof *spec);
    if (!spec) return stk__err(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < m->k && rc == 0; i++) {
        feed *f = &m->f[i];
        f->ds = src[i].ds;
        if (!f->ds) {
            rc = stk__err(err, -EINVAL, "mixture: source %zu has no dataset", i);
            break;
        }
        stk_loader_options o;
        source_options(m, src, i, common, &o);
        uint64_t n = 0;
        if ((rc = stk_loader_count(src[i].ds, &o, &n, NULL, NULL, err))) break;
        f->units = n / m->unit;
        if (f->units == 0)
            rc = stk__err(err, -EINVAL,
                          "mixture: source %zu (%s) has %llu samples, fewer than one round takes "
                          "(%llu: streams%s)", i, src_name(f), (unsigned long long)n,
                          (unsigned long long)m->unit, m->homogeneous ? " x batch_size" : "");
        else if (src[i].count % m->unit)
            rc = stk__err(err, -EINVAL,
                          "mixture: source %zu (%s): count %llu is not a multiple of a round's "
                          "%llu samples (streams%s)", i, src_name(f),
                          (unsigned long long)src[i].count, (unsigned long long)m->unit,
                          m->homogeneous ? " x batch_size" : "");
        spec[i] = (stk_mix_source){f->units, src[i].weight, src[i].count / m->unit};
    }
    if (rc == 0) rc = stk_mix_open(spec, m->k, mo->exhaust, mo->seed, &m->mix, err);
    stk__free(spec);
    if (rc) return rc;
    m->rounds = stk_mix_epoch_rounds(m->mix);
    for (size_t i = 0; i < m->k; i++) m->src_rounds[i] = stk_mix_source_rounds(m->mix, i);
    return 0;
}

/* Opens the sources' loaders, drawn from where `draw` and every source
 * allow.  Fed, unless told, the threads a loader would have (one per CPU,
 * at most 8) are shared out by the sources' shares of the rounds, at least
 * one each: a loader each with all of them puts several times as many
 * threads as CPUs to work (BENCHMARKS.md, "Figures behind design
 * choices"). */
static int open_sources(stk__mixer *m, const stk_mixture_source *src,
                        const stk_loader_options *common, bool draw, stk_error *err) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t T = (uint64_t)STK__MIN(STK__MAX(ncpu, 1L), 8L);
    /* Drawn when every source can be: the mixture's workers are then the
     * threads a loader would have, and the sources have none. */
    m->drawn = draw;
    for (size_t i = 0; i < m->k && m->drawn; i++) {
        stk_loader_options o;
        source_options(m, src, i, common, &o);
        m->drawn = stk__loader_drawable(src[i].ds, &o);
    }
    m->workers = m->drawn ? (int)(common->threads ? (uint64_t)common->threads : T) : 1;
    for (size_t i = 0; i < m->k; i++) {
        feed *f = &m->f[i];
        stk_loader_options o;
        source_options(m, src, i, common, &o);
        if (!common->threads && !m->drawn) /* (drawn: the mixture's workers) */
            o.threads = (int)STK__MAX((T * m->src_rounds[i] + m->rounds / 2) / m->rounds,
                                      (uint64_t)1);
        int rc = m->drawn ? stk__loader_open_drawn(src[i].ds, &o, m->workers, &f->ld, err)
                          : stk__loader_open(src[i].ds, &o, &f->ld, err);
        if (rc == 0 && !m->drawn && m->homogeneous) rc = stk__loader_with_sources(f->ld, err);
        if (rc) return rc;
        stk_loader_state st;
        stk__loader_save(f->ld, &st);
        f->seed = o.seed;
        f->fp = st.fingerprint;
        f->fmap = stk__calloc(stk_loader_num_fields(f->ld) + 1, sizeof *f->fmap);
        f->view = stk__calloc(stk_loader_num_fields(f->ld) + 1, sizeof *f->view);
        if (!f->fmap || !f->view) return stk__err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

static int set_up(stk__mixer *m, const stk_mixture_source *src, const stk_loader_options *common,
                  const stk_mixture_options *mo, stk_error *err) {
    m->src_rounds = stk__calloc(m->k, sizeof *m->src_rounds);
    m->counts = stk__calloc(m->k, sizeof *m->counts);
    if (!m->src_rounds || !m->counts) return stk__err(err, -ENOMEM, "out of memory");
    int rc = plan_sources(m, src, common, mo, err);
    if (rc == 0) rc = open_sources(m, src, common, true, err);
    if (rc == -EAGAIN) { /* a source that cannot be drawn from after all */
        close_sources(m);
        rc = open_sources(m, src, common, false, err);
    }
    if (rc) return rc;
    m->nf = stk_loader_num_fields(m->f[0].ld);
    m->dst = stk__calloc(m->nf + 1, sizeof *m->dst);
    m->offs = stk__calloc(m->nf + 1, sizeof *m->offs);
    m->cap = stk__calloc(m->nf + 1, sizeof *m->cap);
    m->rows = stk__calloc(m->nf + 1, sizeof *m->rows);
    m->sched = stk__calloc(m->B + 2, sizeof *m->sched);
    if (!m->dst || !m->offs || !m->cap || !m->rows || !m->sched)
        return stk__err(err, -ENOMEM, "out of memory");
    m->ragged = stk__calloc(m->nf + 1, sizeof *m->ragged);
    m->sample_bytes = stk__calloc(m->nf + 1, sizeof *m->sample_bytes);
    m->row_bytes = stk__calloc(m->nf + 1, sizeof *m->row_bytes);
    uint64_t *max_bytes = stk__calloc(m->nf + 1, sizeof *max_bytes);
    if (!m->ragged || !m->sample_bytes || !m->row_bytes || !max_bytes) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t a = 0; a < m->nf; a++) {
        const stk_field *x = stk_loader_field(m->f[0].ld, a);
        m->ragged[a] = stk__loader_field_ragged(m->f[0].ld, a);
        m->sample_bytes[a] = stk__loader_field_max_bytes(m->f[0].ld, a);
        m->row_bytes[a] = stk_dtype_size(x->dtype);
        for (int d = 1; d < x->ndim; d++) m->row_bytes[a] *= (uint64_t)x->shape[d];
        m->f[0].fmap[a] = a;
    }
    /* Homogeneous batches of sources whose fields match are drawn as mixed
     * ones are; of sources whose fields differ they are the sources' own,
     * handed out, and the sources open again as loaders of their own. */
    bool same = true;
    for (size_t i = 1; i < m->k && m->homogeneous && m->drawn && same; i++)
        same = match_fields(m, i, NULL) == 0;
    if (!same) {
        close_sources(m);
        if ((rc = open_sources(m, src, common, false, err))) goto out;
        for (size_t a = 0; a < m->nf; a++) m->f[0].fmap[a] = a;
    }
    m->handout = m->homogeneous && !m->drawn;
    /* Handed out batches are the sources' own: their fields may differ. */
    for (size_t i = 1; i < m->k && !m->handout; i++)
        if ((rc = match_fields(m, i, err))) goto out;
    for (size_t a = 0; a < m->nf && !m->handout; a++)
        for (size_t i = 0; i < m->k; i++)
            max_bytes[a] = STK__MAX(max_bytes[a],
                                    stk__loader_field_max_bytes(m->f[i].ld, m->f[i].fmap[a]));
    m->fp = fingerprint(m, src, mo);
    /* (Before the shell opens: its workers draw from them.) */
    if (!(m->parts = stk__calloc(m->k, sizeof *m->parts))) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->k; i++) m->parts[i] = m->f[i].ld;
    rc = stk__loader_open_hooked(m->f[0].ld, m->handout ? NULL : max_bytes, common,
                                 m->handout ? NULL : fill, m, m->workers, &m->shell, err);
    if (rc == 0 && m->drawn) {
        for (size_t i = 0; i < m->k; i++) stk__loader_adopt_layout(m->f[i].ld, m->shell, m->f[i].fmap);
        rc = drawers_alloc(m, err);
    }
    if (rc == 0 && !m->drawn) {
        /* Fed, the sources' threads and the mixture's share the CPUs: the
         * consumer spins only where they all leave one free, and a
         * source's consumer (the mixture's worker) never does. */
        int threads = m->workers;
        for (size_t i = 0; i < m->k; i++) threads += stk__loader_workers(m->f[i].ld);
        stk__loader_set_spin(m->shell, threads);
        for (size_t i = 0; i < m->k; i++) stk__loader_set_spin(m->f[i].ld, m->handout ? threads : 0);
    }
    if (rc == 0) stk__loader_set_parts(m->shell, m->parts, m->k, m->handout);
out:
    stk__free(max_bytes);
    return rc;
}

int stk__mixture_open(const stk_mixture_source *src, size_t n, const stk_loader_options *common,
                      const stk_mixture_options *mo, stk_loader **out, stk_error *err) {
    *out = NULL;
    if (!src || n == 0) return stk__err(err, -EINVAL, "mixture: no sources");
    if (common->batch_size == 0 || common->world_size == 0 || common->rank >= common->world_size)
        return stk__err(err, -EINVAL, "mixture: batch_size, rank or world_size out of range");
    uint64_t S = common->streams ? common->streams : common->world_size;
    if (S % common->world_size)
        return stk__err(err, -EINVAL,
                        "mixture: streams (%llu) must be a multiple of world_size (%u)",
                        (unsigned long long)S, common->world_size);
    stk__mixer *m = stk__calloc(1, sizeof *m);
    if (!m) return stk__err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&m->mu, NULL);
    m->k = n;
    m->homogeneous = mo->homogeneous != 0;
    m->B = common->batch_size;
    m->W = common->world_size;
    m->r = common->rank;
    m->S = S;
    m->part = common->split_count > 1 ? common->split_index : 0;
    m->nparts = common->split_count > 1 ? common->split_count : 1;
    m->unit = S * (m->homogeneous ? m->B : 1);
    m->seed = mo->seed;
    m->f = stk__calloc(n, sizeof *m->f);
    int rc = m->f ? set_up(m, src, common, mo, err) : stk__err(err, -ENOMEM, "out of memory");
    if (rc == 0 && common->split_count > 1 && !m->drawn)
        rc = stk__err(err, -EINVAL,
                      "mixture: a split among worker processes needs every source read straight "
                      "into the mixture's batches, and one is not (a remote source, block order "
                      "over data read from files, on_error=skip, or homogeneous batches of "
                      "fields that differ): read it in one process");
    if (rc == 0) {
        stk__loader_set_mix(m->shell, m);
        pthread_mutex_lock(&m->mu);
        rc = position(m, common->epoch, 0, err);
        pthread_mutex_unlock(&m->mu);
    }
    if (rc) {
        mixer_free(m);
        return rc;
    }
    *out = m->shell;
    return 0;
}
