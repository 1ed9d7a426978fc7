/*
 * ring.c: the consumer's side of the batch ring.  next takes the batches
 * in order as the workers fill them, release and unget hand them back,
 * add_buffer grows the ring while the consumer holds many; a batch's
 * fields are read here.  Also the epoch state (set_epoch, save, restore:
 * each a new generation) and what the GPU stage reads of the ring
 * (pipeline.h).
 */
#define _GNU_SOURCE
#include "loader.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* ---- epochs ---- */

/* Batches of a dealing: its samples in batches, a last partial one kept
 * unless drop_last. */
uint64_t stk__ld_deal_batches(const stk__deal *d, const stk_loader_options *o) {
    uint64_t B = o->batch_size;
    return o->drop_last ? d->per_rank / B : (d->per_rank + B - 1) / B;
}

void stk__ld_epoch_order(const stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start,
                         uint64_t streams, stk__order *order, stk__deal *deal) {
    stk__order_init_streams(order, ld->opt.order, ld->space.n, seed, epoch, ld->block_samples,
                            ld->opt.block_group, streams);
    stk__deal_init(deal, ld->space.n, start, ld->opt.world_size, ld->opt.rank, ld->opt.pad != 0);
    stk__deal_streams(deal, streams);
    stk__deal_split(deal, ld->opt.batch_size, ld->opt.split_count, ld->opt.split_index);
}

void stk__ld_set_epoch_locked(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start) {
    ld->seed = seed;
    ld->epoch = epoch;
    if (!ld->streams) ld->streams = ld->opt.streams;
    stk__ld_epoch_order(ld, seed, epoch, start, ld->streams, &ld->order, &ld->deal);
    ld->nbatches = stk__ld_deal_batches(&ld->deal, &ld->opt);
    ld->gen++;
    atomic_store_explicit(&ld->warm_gen, ld->gen, memory_order_release);
    ld->next_fill = ld->next_take = 0;
    ld->ahead_next = 0;
    stk__ld_plan_reads(ld);
}

/* ---- the consumer ---- */

/* The mutex, taken by a consumer that has just seen a batch become ready:
 * the worker that readied it still holds the mutex for a moment (it claims
 * its next batch).  Blocking there would cost three system calls a batch
 * (the consumer's wait, the worker's wake, and the wake the consumer's
 * unlock then makes, the mutex being left marked as contended), and the
 * worker's wake is on the batches' critical path; so the consumer tries
 * again for up to LOCK_SPIN_NS before it blocks. */
#define LOCK_SPIN_NS 20000

static void lock_spinning(stk_loader *ld) {
    uint64_t until = 0;
    for (unsigned i = 1; pthread_mutex_trylock(&ld->mu) != 0; i++) {
        stk__cpu_relax();
        if (i % 64 == 0) {
            uint64_t t = stk__now_ns();
            if (!until) {
                until = t + LOCK_SPIN_NS;
            } else if (t > until) {
                pthread_mutex_lock(&ld->mu);
                return;
            }
        }
    }
}

int stk__loader_next(stk_loader *ld, stk_batch **out, int64_t timeout_ms, stk_error *err) {
    if (!ld || !out) return stk__err(err, -EINVAL, "stk_loader_next: NULL argument");
    struct timespec deadline;
    if (timeout_ms >= 0) stk__deadline(timeout_ms, &deadline);
    *out = NULL;
    uint64_t t0 = stk__ld_span_open(ld, STK__EV_NEXT);
    int rc = 0;
    bool spun = false;
    pthread_mutex_lock(&ld->mu);
    ld->st_wait_n++;
    uint64_t ready = 0;
    for (uint32_t i = 0; i < ld->R; i++)
        ready += ld->slots[i].state == S_READY && ld->slots[i].gen == ld->gen;
    ld->st_ready_sum += ready;
    for (;;) {
        if (ld->failed) {
            rc = ld->failed;
            if (err) *err = ld->ferr;
            break;
        }
        if (ld->next_take >= ld->nbatches) {
            rc = STK_END;
            break;
        }
        stk_batch *found = NULL;
        uint32_t held = 0;
        bool filling = false;
        for (uint32_t i = 0; i < ld->R; i++) {
            stk_batch *s = &ld->slots[i];
            held += s->state == S_HELD;
            if (s->gen == ld->gen && s->b == ld->next_take) {
                if (s->state == S_READY) found = s;
                filling |= s->state == S_FILLING;
            }
        }
        if (found) {
            if (found->err) {
                ld->failed = found->err;
                ld->ferr = found->e;
                found->state = S_FREE;
                pthread_cond_broadcast(&ld->cv);
                continue;
            }
            found->state = S_HELD;
            ld->next_take++;
            ld->st_batches++;
            ld->st_samples += found->n;
            *out = found;
            pthread_cond_broadcast(&ld->cv);
            break;
        }
        if (held == ld->R) {
            rc = stk__err(err, -EBUSY,
                          "every one of the %u batch buffers is held by the consumer; release "
                          "one before asking for the next batch",
                          ld->R);
            break;
        }
        if (filling && ld->spin && !spun && ld->fill_ns && ld->fill_ns <= SPIN_MAX_NS) {
            /* The batch is being filled, and batches are quick to fill:
             * wait for it on the CPU the workers leave free, once for up to
             * 1.5 fills, rather than sleep and be woken (on a virtual
             * machine, waking the consumer cost a worker 7 us a batch, a
             * seventh of a batch of 256-byte records). */
            uint64_t seen = atomic_load_explicit(&ld->readied, memory_order_acquire);
            uint64_t until = stk__now_ns() + ld->fill_ns + ld->fill_ns / 2;
            pthread_mutex_unlock(&ld->mu);
            for (unsigned i = 1; atomic_load_explicit(&ld->readied, memory_order_acquire) == seen;
                 i++) {
                stk__cpu_relax();
                if (i % 64 == 0 && stk__now_ns() > until) break;
            }
            lock_spinning(ld);
            spun = true;
            continue;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&ld->cv_ready, &ld->mu);
        } else if (pthread_cond_timedwait(&ld->cv_ready, &ld->mu, &deadline) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&ld->mu);
    uint64_t t1 = stk__now_ns();
    ld->st_wait_ns += t1 - t0;
    stk__ld_span_add(ld, NULL, STK__EV_NEXT, t0, t1, *out ? (*out)->b : STK__EV_NONE,
                     STK__EV_NONE);
    return rc;
}

int stk__loader_add_buffer(stk_loader *ld, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    pthread_mutex_lock(&ld->mu);
    int rc = 0;
    if (ld->R >= ld->slots_cap) {
        rc = stk__err(err, -ENOSPC,
                      "the consumer holds %u batches; at most %u more buffers can be added",
                      ld->R, (unsigned)MAX_EXTRA_SLOTS);
    } else {
        stk_batch *s = &ld->slots[ld->R];
        memset(s, 0, sizeof *s);
        s->ld = ld;
        s->device = -1;
        s->own_mem = stk__aligned_alloc(4096, (size_t)stk__align_up(ld->slot_bytes, 4096));
        s->samples = stk__calloc(ld->opt.batch_size, sizeof *s->samples);
        s->ragged_rows = stk__calloc(ld->nf, sizeof *s->ragged_rows);
        if (ld->plan_only)
            s->plan = stk__calloc((size_t)ld->opt.batch_size * ld->nf, sizeof *s->plan);
        if (ld->want_sources) s->sources = stk__calloc(ld->opt.batch_size, sizeof *s->sources);
        if (!s->own_mem || !s->samples || !s->ragged_rows || (ld->plan_only && !s->plan) ||
            (ld->want_sources && !s->sources)) {
            stk__free(s->own_mem);
            stk__free(s->samples);
            stk__free(s->ragged_rows);
            stk__free(s->plan);
            stk__free(s->sources);
            rc = stk__err(err, -ENOMEM, "out of memory for one more batch buffer (%llu bytes)",
                          (unsigned long long)ld->slot_bytes);
        } else {
            s->mem = s->own_mem;
            s->state = S_FREE;
            ld->R++;
            pthread_cond_broadcast(&ld->cv);
        }
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

int stk__loader_unget(stk_loader *ld, stk_batch *b) {
    if (!ld || !b) return -EINVAL;
    pthread_mutex_lock(&ld->mu);
    int rc = -EINVAL;
    if (b->state == S_HELD && b->gen == ld->gen && b->b + 1 == ld->next_take) {
        b->state = S_READY;
        ld->next_take--;
        rc = 0;
    }
    stk__ld_wake(ld);
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

void stk__loader_release(stk_loader *ld, stk_batch *b) {
    if (!ld || !b) return;
    pthread_mutex_lock(&ld->mu);
    if (b->state == S_HELD) b->state = S_FREE;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

/* ---- batches and fields ---- */

uint32_t stk_batch_size(const stk_batch *b) { return b ? b->n : 0; }
int stk_batch_device(const stk_batch *b) { return b ? b->device : -1; }
uint64_t stk_batch_index(const stk_batch *b) { return b ? b->b : 0; }
const uint64_t *stk_batch_samples(const stk_batch *b) { return b ? b->samples : NULL; }

int stk_batch_field_get(const stk_batch *b, size_t i, stk_batch_field *out) {
    if (!b || !out || i >= b->ld->nf) return -EINVAL;
    const stk_loader *ld = b->ld;
    const lfield *lf = &ld->f[i];
    const stk_field *f = lf->f;
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    out->data = b->mem + lf->data_off;
    if (lf->kind == F_RAGGED) {
        out->ndim = f->ndim;
        out->shape[0] = (int64_t)b->ragged_rows[i];
        for (int d = 1; d < f->ndim; d++) out->shape[d] = f->shape[d];
        out->bytes = b->ragged_rows[i] * lf->fi->row_bytes;
        out->offsets = (const int64_t *)(b->mem + lf->offs_off);
        return 0;
    }
    out->shape[0] = b->n;
    if (lf->kind == F_TIME) {
        out->ndim = f->ndim + 1;
        out->shape[1] = (int64_t)ld->space.L;
        for (int d = 1; d < f->ndim; d++) out->shape[d + 1] = f->shape[d];
    } else {
        out->ndim = f->ndim + 1;
        for (int d = 0; d < f->ndim; d++) out->shape[d + 1] = f->shape[d];
    }
    out->bytes = (uint64_t)b->n * lf->sample_bytes;
    return 0;
}

size_t stk_loader_num_fields(const stk_loader *ld) { return ld ? ld->nf : 0; }
size_t stk_batch_num_fields(const stk_batch *b) { return b ? b->ld->nf : 0; }

int stk_loader_find_field(const stk_loader *ld, const char *name) {
    if (!ld || !name) return -EINVAL;
    for (size_t i = 0; i < ld->nf; i++)
        if (strcmp(ld->f[i].f->name, name) == 0) return (int)i;
    return -ENOENT;
}

const stk_field *stk_loader_field(const stk_loader *ld, size_t i) {
    return ld && i < ld->nf ? ld->f[i].f : NULL;
}

uint64_t stk_loader_epoch_samples(const stk_loader *ld) { return ld ? ld->space.n : 0; }
uint64_t stk_loader_rank_samples(const stk_loader *ld) { return ld ? ld->deal.per_rank : 0; }
uint64_t stk_loader_rank_batches(const stk_loader *ld) { return ld ? ld->nbatches : 0; }
stk_backend stk_loader_backend(const stk_loader *ld) { return ld ? ld->backend : STK_BACKEND_AUTO; }

stk_order stk_loader_order(const stk_loader *ld) {
    return ld ? ld->opt.order : STK_ORDER_SEQUENTIAL;
}

uint64_t stk_loader_sample_bytes(const stk_loader *ld) {
    return ld ? stk__ld_mean_sample_bytes(ld) : 0;
}

/* ---- save, restore ---- */

/* Every block is checked again in a new epoch. */
void stk__ld_forget_checks(stk_loader *ld) {
    atomic_store(&ld->any_verified, false);
    for (uint64_t i = 0; i < ld->verified_words; i++) atomic_store(&ld->verified[i], 0);
}

/* Under mu: drops what was filled ahead and starts (seed, epoch) at
 * `start`. */
static void reposition_locked(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start,
                              uint64_t streams) {
    for (uint32_t i = 0; i < ld->R; i++)
        if (ld->slots[i].state == S_READY) ld->slots[i].state = S_FREE;
    stk__ld_forget_checks(ld);
    ld->streams = streams;
    stk__ld_set_epoch_locked(ld, seed, epoch, start);
    stk__ld_wake(ld);
}

static int reposition(stk_loader *ld, uint64_t seed, uint64_t epoch, uint64_t start,
                      uint64_t streams, stk_error *err) {
    pthread_mutex_lock(&ld->mu);
    int rc = ld->failed;
    if (rc) {
        if (err) *err = ld->ferr;
    } else {
        reposition_locked(ld, seed, epoch, start, streams);
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* A hooked loader's epoch is its mixture's: n samples, and a failed fill
 * of the old one is forgotten (the mixture repositions its sources, which
 * keep their own failures). */
void stk__loader_hooked_position(stk_loader *ld, uint64_t n, uint64_t seed, uint64_t epoch,
                                 uint64_t start, uint64_t S, uint64_t fingerprint) {
    pthread_mutex_lock(&ld->mu);
    ld->space.n = n;
    ld->failed = 0;
    reposition_locked(ld, seed, epoch, start, S);
    ld->fingerprint = fingerprint;
    pthread_mutex_unlock(&ld->mu);
}

int stk__loader_set_epoch(stk_loader *ld, uint64_t epoch, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    return reposition(ld, ld->seed, epoch, 0, ld->opt.streams, err);
}

void stk__loader_save(const stk_loader *ld, stk_loader_state *st) {
    stk_loader *l = (stk_loader *)ld;
    pthread_mutex_lock(&l->mu);
    uint64_t taken = ld->next_take;
    pthread_mutex_unlock(&l->mu);
    stk__loader_save_at(ld, taken, st);
}

void stk__loader_save_at(const stk_loader *ld, uint64_t taken, stk_loader_state *st) {
    stk_loader *l = (stk_loader *)ld;
    pthread_mutex_lock(&l->mu);
    /* Rank-level samples consumed: with a split of the batches, the
     * batches of the other parts before this one's next are counted too,
     * so that restoring (with the same split) resumes at this part's next
     * batch. */
    uint64_t consumed = ld->deal.parts > 1
                            ? taken * ld->deal.parts * ld->opt.batch_size
                            : STK__MIN(taken * ld->opt.batch_size, ld->deal.per_rank);
    st->seed = ld->seed;
    st->epoch = ld->epoch;
    st->position =
        STK__MIN(ld->deal.start + STK__MIN(consumed, ld->deal.rank_count) * ld->deal.world,
                 ld->space.n);
    st->fingerprint = ld->fingerprint;
    st->streams = ld->streams;
    pthread_mutex_unlock(&l->mu);
}

int stk__loader_restore(stk_loader *ld, const stk_loader_state *st, stk_error *err) {
    if (!ld || !st) return stk__err(err, -EINVAL, "NULL argument");
    if (st->fingerprint != ld->fingerprint)
        return stk__err(err, -EINVAL,
                        "state: it was saved by a loader over other data or with another "
                        "sample space or order (fingerprint %016llx, this loader %016llx)",
                        (unsigned long long)st->fingerprint, (unsigned long long)ld->fingerprint);
    if (st->position > ld->space.n)
        return stk__err(err, -EINVAL, "state: position %llu is past the epoch's %llu samples",
                        (unsigned long long)st->position, (unsigned long long)ld->space.n);
    return reposition(ld, st->seed, st->epoch, st->position, st->streams ? st->streams : 1,
                      err);
}

/* ---- for the GPU stage (pipeline.h) ---- */

const stk__plan *stk__batch_plan(const stk_batch *b, size_t *n) {
    *n = b ? b->nplan : 0;
    return b ? b->plan : NULL;
}

uint8_t *stk__batch_mem(const stk_batch *b) { return b ? b->mem : NULL; }

void stk__loader_ring(const stk_loader *ld, void **mem, size_t *bytes) {
    /* The buffers made at open; those added later (add_buffer) own theirs. */
    uint32_t made = ld->slots_cap - MAX_EXTRA_SLOTS;
    *mem = ld->slot_mem;
    *bytes = (size_t)made * (size_t)stk__align_up(ld->slot_bytes, 4096);
}

uint64_t stk__loader_slot_bytes(const stk_loader *ld) { return ld->slot_bytes; }
stk_loader *stk__batch_loader(const stk_batch *b) { return b->ld; }
struct stk__gpu *stk__loader_gpu(const stk_loader *ld) { return ld ? ld->gpu : NULL; }
void stk__loader_set_gpu(stk_loader *ld, struct stk__gpu *g) { ld->gpu = g; }

stk_batch *stk__batch_view_new(stk_loader *ld, int device, uint8_t *mem) {
    stk_batch *v = stk__calloc(1, sizeof *v);
    if (!v) return NULL;
    v->ld = ld;
    v->device = device;
    v->state = S_HELD;
    v->mem = mem;
    v->samples = stk__calloc(ld->opt.batch_size, sizeof *v->samples);
    v->ragged_rows = stk__calloc(ld->nf ? ld->nf : 1, sizeof *v->ragged_rows);
    if (ld->want_sources) v->sources = stk__calloc(ld->opt.batch_size, sizeof *v->sources);
    if (!v->samples || !v->ragged_rows || (ld->want_sources && !v->sources)) {
        stk__batch_view_free(v);
        return NULL;
    }
    return v;
}

void stk__batch_view_set(stk_batch *v, const stk_batch *host) {
    v->b = host->b;
    v->n = host->n;
    memcpy(v->samples, host->samples, (size_t)host->n * sizeof *v->samples);
    memcpy(v->ragged_rows, host->ragged_rows, v->ld->nf * sizeof *v->ragged_rows);
    if (v->sources && host->sources)
        memcpy(v->sources, host->sources, (size_t)host->n * sizeof *v->sources);
}

void stk__batch_view_free(stk_batch *v) {
    if (!v) return;
    stk__free(v->samples);
    stk__free(v->ragged_rows);
    stk__free(v->sources);
    stk__free(v);
}
size_t stk__loader_field_dsf(const stk_loader *ld, size_t i) { return ld->f[i].dsf; }

/* ---- loaders filled by someone else (pipeline.h) ---- */

bool stk__batch_current(const stk_batch *b) {
    stk_loader *ld = b->ld;
    pthread_mutex_lock(&ld->mu);
    bool cur = b->gen == ld->gen && !ld->stop;
    pthread_mutex_unlock(&ld->mu);
    return cur;
}

uint8_t *stk__batch_field_dst(stk_batch *b, size_t i, int64_t **offsets, uint64_t *cap) {
    const lfield *lf = &b->ld->f[i];
    if (offsets) *offsets = lf->kind == F_RAGGED ? (int64_t *)(b->mem + lf->offs_off) : NULL;
    if (cap) *cap = lf->cap;
    return b->mem + lf->data_off;
}

void stk__batch_set_rows(stk_batch *b, size_t i, uint64_t rows) { b->ragged_rows[i] = rows; }
uint64_t *stk__batch_ids(stk_batch *b) { return b->samples; }
uint32_t *stk__batch_srcs(stk_batch *b) { return b->sources; }
const uint32_t *stk_batch_sources(const stk_batch *b) { return b ? b->sources : NULL; }

uint64_t stk__loader_field_max_bytes(const stk_loader *ld, size_t i) {
    return ld->f[i].cap / ld->opt.batch_size;
}
bool stk__loader_field_ragged(const stk_loader *ld, size_t i) { return ld->f[i].kind == F_RAGGED; }
uint64_t stk__loader_window(const stk_loader *ld) { return ld->space.windows ? ld->space.L : 0; }
void *stk__loader_mix(const stk_loader *ld) { return ld ? ld->mix : NULL; }
void stk__loader_set_mix(stk_loader *ld, void *mix) { ld->mix = mix; }

int stk__loader_with_sources(stk_loader *ld, stk_error *err) {
    pthread_mutex_lock(&ld->mu);
    ld->want_sources = true;
    int rc = 0;
    for (uint32_t i = 0; i < ld->R && rc == 0; i++)
        if (!ld->slots[i].sources &&
            !(ld->slots[i].sources = stk__calloc(ld->opt.batch_size, sizeof(uint32_t))))
            rc = stk__err(err, -ENOMEM, "out of memory");
    pthread_mutex_unlock(&ld->mu);
    return rc;
}
