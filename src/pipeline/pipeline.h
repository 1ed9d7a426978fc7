/*
 * pipeline.h: what the loader shows the rest of libstoker and no user.  The
 * public calls that differ between host and device batches (open, next,
 * release, epochs, state, stop, close) are src/api's, which calls the host
 * versions below or the GPU stage's (src/gpu).  The GPU stage needs the
 * batch ring's memory to page-lock it, each batch's buffer to copy it,
 * batch views to hand device memory out as stk_batch, and, for a
 * device-resident dataset, a loader that plans batches without reading
 * them.
 */
#ifndef STK_PIPELINE_H
#define STK_PIPELINE_H

#include "../core/internal.h"

/* One piece of a planned batch: `len` bytes of dataset field `field` of
 * record `rec`, at byte `off` of shard `shard`, belong at `dst` in the
 * batch's buffer. */
typedef struct stk__plan {
    uint32_t shard, field;
    uint64_t rec, off, len;
    uint8_t *dst;
} stk__plan;

/* The host loader: stk_loader_* of stoker.h, for batches in host memory. */
int stk__loader_open(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                     stk_error *err);
int stk__loader_next(stk_loader *ld, stk_batch **out, int64_t timeout_ms, stk_error *err);
/* Whether a series is being kept (stk_loader_series_start), and the
 * counting of one call of next that took batch `b` (may be NULL), waiting
 * from t0 to t1 (stats.c). */
bool stk__loader_series_on(const stk_loader *ld);
void stk__loader_series_count(stk_loader *ld, const stk_batch *b, uint64_t t0, uint64_t t1);
void stk__loader_release(stk_loader *ld, stk_batch *b);
int stk__loader_unget(stk_loader *ld, stk_batch *b);
int stk__loader_add_buffer(stk_loader *ld, stk_error *err);
int stk__loader_set_epoch(stk_loader *ld, uint64_t epoch, stk_error *err);
void stk__loader_save(const stk_loader *ld, stk_loader_state *out);
int stk__loader_restore(stk_loader *ld, const stk_loader_state *st, stk_error *err);
int stk__loader_fetch_epoch(stk_loader *ld, uint64_t *bytes, stk_error *err);
void stk__loader_stop(stk_loader *ld);
void stk__loader_close(stk_loader *ld);
/* The checks stk__loader_open makes of `opts` before anything else. */
int stk__loader_check(const stk_dataset *ds, const stk_loader_options *opts, stk_error *err);
/* Its part that concerns a device (device, device_buffers), which a
 * mixture's open makes of its common options. */
int stk__loader_check_device(const stk_loader_options *opts, stk_error *err);
/* Stops and joins the threads, keeping every buffer (stk__loader_stop
 * also gives back the pages of those not held). */
void stk__loader_join(stk_loader *ld);
/* The batch's loader. */
stk_loader *stk__batch_loader(const stk_batch *b);

/* The GPU stage a loader's batches go through, or NULL (host batches). */
struct stk__gpu *stk__loader_gpu(const stk_loader *ld);
void stk__loader_set_gpu(stk_loader *ld, struct stk__gpu *g);

/* A batch that is a view of a host batch's buffer at another address
 * (device memory): stk_batch_field_get gives the same fields at `mem`.
 * stk__batch_view_set copies the host batch's size, number, sample ids
 * and ragged rows into it.  NULL when out of memory. */
stk_batch *stk__batch_view_new(stk_loader *ld, int device, uint8_t *mem);
void stk__batch_view_set(stk_batch *view, const stk_batch *host);
void stk__batch_view_free(stk_batch *view);

/* Opens a loader that plans every batch (order, records, windows, ragged
 * offsets into the buffer) but reads nothing: each batch carries its plan
 * instead of its data.  Every selected field must be stored plain (no
 * compression, conversion or filtered chunks); checksums are not checked
 * (the caller checks what it reads). */
int stk__loader_open_planned(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                             stk_error *err);
/* The plan of a batch of a planned loader (n pieces); valid until release. */
const stk__plan *stk__batch_plan(const stk_batch *b, size_t *n);
/* The start of a batch's buffer: field pointers are offsets from it. */
uint8_t *stk__batch_mem(const stk_batch *b);
/* The ring's memory (every buffer made at open), for page-locking. */
void stk__loader_ring(const stk_loader *ld, void **mem, size_t *bytes);
/* Bytes of one batch buffer. */
uint64_t stk__loader_slot_bytes(const stk_loader *ld);
/* The resume state after `taken` batches of the current epoch (or since
 * the last restore), as stk_loader_save gives it after that many. */
void stk__loader_save_at(const stk_loader *ld, uint64_t taken, stk_loader_state *st);
/* The dataset field that loader field i is. */
size_t stk__loader_field_dsf(const stk_loader *ld, size_t i);

/* ---- loaders filled by someone else (a mixture, src/mix) ---- */

/* Fills batch b (its size and number set, stk_batch_size/stk_batch_index)
 * through the stk__batch_* calls below; returns 0 or an error (err set),
 * which the consumer then gets from next(). */
typedef int (*stk__fill_fn)(void *ctx, stk_batch *b, int worker, stk_error *err);
/* Opens a loader whose `workers` workers call fill(ctx, b, worker) for its
 * batches, instead of reading (with one worker, in order).  Its fields are
 * `like`'s (which must stay open as long as it), a ragged one given room
 * for max_bytes[i] bytes a sample;
 * batch_size, world_size, rank, drop_last, the split, prefetch (buffers; 0: 4 for one
 * worker, else as a loader's) and memory_budget are `o`'s.  It has no epoch
 * until stk__loader_hooked_position gives it one. */
/* fill NULL: a loader with no worker, whose ring is never filled (a mixture
 * of homogeneous batches hands out its sources' batches instead; its
 * counts and state are still this loader's). */
int stk__loader_open_hooked(const stk_loader *like, const uint64_t *max_bytes,
                            const stk_loader_options *o,
                            stk__fill_fn fill, void *ctx, int workers, stk_loader **out,
                            stk_error *err);
/* Discards what was filled ahead and starts epoch `epoch` of a hooked
 * loader at global position `start` of its n samples (streams S; the
 * state's seed and fingerprint as given).  The caller makes sure fill is
 * not running, or that it sees the batch is no longer current. */
void stk__loader_hooked_position(stk_loader *ld, uint64_t n, uint64_t seed, uint64_t epoch,
                                 uint64_t start, uint64_t S, uint64_t fingerprint);
/* Gives every batch of ld (the ring's, and any added later) an array of
 * sources, for a mixture to fill (stk__batch_srcs) before handing it out. */
int stk__loader_with_sources(stk_loader *ld, stk_error *err);
/* The loader's worker threads; and how many threads work for its consumer
 * in all (0: its consumer is another loader's worker), for a loader that
 * shares the CPUs with others: its consumer spins for a batch being filled
 * (stk__loader_next) only where they leave a CPU free. */
int stk__loader_workers(const stk_loader *ld);
void stk__loader_set_spin(stk_loader *ld, int threads);
/* The epoch and first position (stk__loader_hooked_position's) of the
 * batch worker wi of a hooked loader is filling, as of its claim: a batch
 * of an epoch that moved on since is discarded when filled. */
void stk__loader_worker_epoch(const stk_loader *ld, int wi, uint64_t *epoch, uint64_t *start);
/* Whether batch b being filled still belongs to its loader's epoch. */
bool stk__batch_current(const stk_batch *b);
/* For fill: where field i of b goes (data; a ragged field's offsets, n + 1
 * of them, and its room in bytes), setting a ragged field's rows, and the
 * batch's sample ids and sources. */
uint8_t *stk__batch_field_dst(stk_batch *b, size_t i, int64_t **offsets, uint64_t *cap);
void stk__batch_set_rows(stk_batch *b, size_t i, uint64_t rows);
uint64_t *stk__batch_ids(stk_batch *b);
uint32_t *stk__batch_srcs(stk_batch *b);
/* Field i's bytes per sample (a ragged field: its longest record's). */
uint64_t stk__loader_field_max_bytes(const stk_loader *ld, size_t i);
/* Whether loader field i is ragged (rows vary per sample). */
bool stk__loader_field_ragged(const stk_loader *ld, size_t i);
/* The window length of the time fields (0: whole records). */
uint64_t stk__loader_window(const stk_loader *ld);
/* ---- loaders drawn from (a mixture's sources, src/mix) ---- */

/* A loader drawn from has no threads and no batches of its own: the
 * workers of another loader (a mixture's hooked one) read its samples, by
 * their places in its order, straight into their own batches, each
 * through its own set of this loader's worker memory and I/O engine.
 * Whether a loader with options o over ds can be: its dataset is local (a
 * remote one's read-ahead follows the loader's own batches) and no
 * damaged sample is substituted (a substitute's rows could differ from
 * those set beforehand). */
bool stk__loader_drawable(const stk_dataset *ds, const stk_loader_options *o);
/* Opens a loader to draw from, as stk__loader_open, with the memory and
 * engines of `workers` workers (worker indexes 0 .. workers - 1).
 * -EAGAIN: block order over data it would read from files rather than
 * the mapping (its group buffers follow its own batches): open it as a
 * loader of its own. */
int stk__loader_open_drawn(stk_dataset *ds, const stk_loader_options *o, int workers,
                           stk_loader **out, stk_error *err);
/* Lays field fmap[i] of a drawn loader out as field i of `like`, the loader
 * whose batches it is drawn into (the fields agree in kind and size). */
void stk__loader_adopt_layout(stk_loader *ld, const stk_loader *like, const size_t *fmap);
/* Worker wi reads the samples at the rank's places first .. first + n - 1
 * of the loader's epoch `epoch` (its seed and streams) into lanes lanes[j]
 * of the batch whose memory is `mem` (stk__batch_mem; laid out by
 * stk__loader_adopt_layout), their sample ids into ids[j].  The offsets of
 * the batch's ragged fields must be set for every lane
 * (stk__loader_draw_rows gives the rows). */
int stk__loader_draw(stk_loader *ld, int wi, uint64_t epoch, uint64_t first, uint32_t n,
                     uint8_t *mem, const uint32_t *lanes, uint64_t *ids, stk_error *err);
/* The rows of loader field i of the same samples, in rows[lanes[j]]. */
void stk__loader_draw_rows(stk_loader *ld, int wi, uint64_t epoch, uint64_t first, uint32_t n,
                           size_t i, const uint32_t *lanes, uint64_t *rows);
/* A new epoch of the loader drawn into: every block is checked again. */
void stk__loader_draw_epoch(stk_loader *ld);

/* Joint draws.  A batch drawn from several loaders piece by piece (one
 * stk__loader_draw each) pays each piece's start: its clocks and counts,
 * and a pipeline of prefetches that starts empty.  A joint draw locates
 * every piece's records first, then gathers the whole batch in one pass
 * in lane order, as one loader gathers its own batch.  A piece: samples
 * first .. first + len - 1 of source src's epoch into lanes[0 .. len). */
typedef struct stk__draw_piece {
    uint32_t src, len;
    uint64_t epoch, first;
    const uint32_t *lanes;
} stk__draw_piece;
typedef struct stk__joint stk__joint;
/* Scratch for joint draws of up to batch_size samples of nf fields from
 * k loaders. */
stk__joint *stk__joint_new(uint32_t batch_size, size_t k, size_t nf);
void stk__joint_free(stk__joint *J);
/* Whether a loader drawn from can take part in a joint draw now: its
 * records are gathered whole out of the mapping (each checked against its
 * own checksum, or none), no field is ragged, and no trace or NVTX tool
 * wants a read's spans of its own. */
bool stk__loader_joinable(const stk_loader *ld);
/* Worker wi draws pieces pc[0 .. np) of lds' samples, n in all, into the
 * batch whose memory is mem, their sample ids into ids[lane], as the
 * stk__loader_draw calls of its pieces would; the batch's statistics go
 * to `mix` (the mixture's own loader, which sums its sources'). */
int stk__loader_draw_joint(stk__joint *J, stk_loader *mix, stk_loader *const *lds, int wi,
                           const stk__draw_piece *pc, size_t np, uint8_t *mem, uint32_t n,
                           uint64_t *ids, stk_error *err);

/* The loaders that read for a hooked one (parts[0 .. n), which stay valid
 * while it is open): their statistics count as its own
 * (stk_loader_stats_get); consumed: the consumer takes their batches, and
 * their waits and batches count too. */
void stk__loader_set_parts(stk_loader *ld, stk_loader *const *parts, size_t n, bool consumed);
/* The mixture a loader belongs to (src/mix), or NULL. */
void *stk__loader_mix(const stk_loader *ld);
void stk__loader_set_mix(stk_loader *ld, void *mix);

#endif
