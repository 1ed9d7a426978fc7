/*
 * gpu.c: the GPU stage of a loader opened with a device (stoker.h,
 * "Batches on a GPU"); src/api sends such a loader's calls here.
 *
 *   loader ring (page-locked) --copy on stoker's stream--> device ring --> consumer
 *   or, device-resident:  plan (host) --gather kernel--> device ring --> consumer
 *
 * The CUDA code is in a plugin (src/cuda) loaded here with dlopen, so this
 * file needs no CUDA header and the library no CUDA library.
 *
 * A feeder thread takes the loader's batches in order.  For each it picks a
 * free device buffer, makes stoker's stream wait for the event the
 * consumer's stream recorded when it gave that buffer back, queues the copy
 * (or the plan's upload and the gather) and records the buffer's "copied"
 * event.  The host batch goes back to the loader once that event has
 * passed: the feeder looks before each batch it takes, and every
 * millisecond while it waits for one.  (A host callback on the stream did
 * this before; the stream stalls while a callback runs, and on an H200
 * batches arrived at 0.7 of the bus's speed with it, against 1.0 now:
 * docs/ARCHITECTURE.md, "Copied batches".)  The consumer takes
 * device batches in order; stk_batch_wait makes its stream wait on
 * "copied", so neither side ever blocks the host on the GPU.
 *
 * Epoch changes and restores park the feeder outside the loader (a pause
 * handshake under the stage's mutex), drop the device batches read ahead,
 * move the loader, and let the feeder go on.
 */
#define _GNU_SOURCE
#include "../cuda/plugin.h"
#include "../format/format.h"
#include "../core/hash.h"
#include "../pipeline/pipeline.h"
#include "gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The plugin's functions, loaded (cuda/cuda.c); set once stk__cuda succeeded. */
#define cu stk__cuda_api_loaded()

static int cuda_fail(stk_error *err, int code, const char *what) {
    return stk__err(err, STK_ECUDA, "CUDA: %s: %s", what, cu->error_string(code));
}

int stk_gpu_count(int *count, stk_error *err) {
    if (count) *count = 0;
    if (!stk__cuda(err)) return STK_ENOGPU;
    int n = 0;
    int rc = cu->device_count(&n);
    if (rc) {
        /* The runtime has tried to load the driver by now; if it is not
         * loaded, say so rather than the runtime's "insufficient driver". */
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (!drv)
            return stk__err(err, STK_ENOGPU,
                            "no GPU available: the NVIDIA driver (libcuda.so.1) is not installed");
        dlclose(drv);
        return stk__err(err, STK_ENOGPU, "no GPU available: %s", cu->error_string(rc));
    }
    if (n == 0) return stk__err(err, STK_ENOGPU, "no GPU available: no CUDA device");
    if (count) *count = n;
    return 0;
}

/* ---- the stage ---- */

enum { D_FREE, D_FILLING, D_READY, D_HELD };

typedef struct dslot {
    int state;
    uint8_t *dev;
    void *copied, *released;
    bool release_pending; /* `released` was recorded on the consumer's stream */
    bool plan_in_use;     /* plan_host was handed to a copy not known done */
    stk_batch *host;      /* the host batch copied here, given back once
                           * `copied` has passed (the feeder's alone) */
    stk_batch *view; /* the batch the consumer gets: the host batch's
                      * layout at `dev` (its samples on the host) */
    stk_cuda_copy *plan_host; /* resident: the gather's copies (page-locked) */
    stk_cuda_copy *plan_dev;
} dslot;

struct stk__gpu {
    stk_dataset *ds;
    stk_loader *ld;
    int device;
    void *stream;
    dslot *slots;
    uint32_t nslots;
    size_t nf;
    uint32_t batch_size;
    uint64_t slot_bytes;
    void *pinned;
    stk_cuda_copy *plans; /* resident: every slot's plan_host, one block */
    size_t plans_bytes;
    stk__gpu_host host; /* ctx NULL: ld is the pipeline's own loader */
    pthread_t feeder;
    bool feeder_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic bool stop, pause;
    bool paused, ended;
    int failed;
    stk_error ferr;
    uint64_t next_index; /* the consumer's next batch */
    uint64_t taken;      /* batches taken since the epoch began or the restore */
    /* device-resident */
    bool resident;
    uint64_t resident_bytes;
    uint8_t **img;       /* [shard * F + field]: the field's bytes of every record */
    uint64_t **fstart;   /* [shard * F + field]: where each record's bytes start */
};

uint64_t stk__gpu_resident_bytes(const stk__gpu *g) { return g->resident ? g->resident_bytes : 0; }
int stk__gpu_device(const stk__gpu *g) { return g->device; }

/* Gives the loader back the host batch copied into buffer sl, once the
 * copy is done (at once when it is known to be). */
static void give_back(stk__gpu *g, dslot *sl) {
    cu->event_sync(sl->copied);
    stk__loader_release(g->ld, sl->host);
    sl->host = NULL;
}

/* Gives the loader back the host batches whose copies are done; with
 * `all`, waits for every copy queued first.  Returns whether copies are
 * still pending.  The feeder's (or, once it has stopped, the closer's). */
static bool give_back_done(stk__gpu *g, bool all) {
    if (all) cu->stream_sync(g->stream);
    bool pending = false;
    for (uint32_t i = 0; i < g->nslots; i++) {
        dslot *sl = &g->slots[i];
        if (!sl->host) continue;
        if (!all && cu->event_query(sl->copied) == STK_CUDA_NOT_READY) pending = true;
        else give_back(g, sl); /* (an error too: nothing may still read it) */
    }
    return pending;
}

/* Queues batch hb's way onto device buffer d.  On failure the host batch
 * has been given back. */
static int submit(stk__gpu *g, uint32_t d, stk_batch *hb, stk_error *err) {
    dslot *sl = &g->slots[d];
    const stk_dataset *ds = g->ds;
    uint8_t *hmem = stk__batch_mem(hb);
    uint32_t n = stk_batch_size(hb);
    if (sl->host) give_back(g, sl); /* an earlier copy here, long done if the
                                     * consumer has had the buffer */
    stk__batch_view_set(sl->view, hb);
    int rc = 0;
    const char *what = "";
    if (sl->release_pending) {
        /* The consumer's work on this buffer comes first. */
        what = "waiting for the consumer's stream";
        rc = cu->stream_wait_event(g->stream, sl->released);
        sl->release_pending = false;
    }
    if (rc == 0 && g->resident) {
        size_t np;
        const stk__plan *pl = stk__batch_plan(hb, &np);
        /* plan_host feeds an earlier copy that may still be queued. */
        if (sl->plan_in_use && (rc = cu->event_sync(sl->copied))) what = "waiting for a copy";
        if (rc == 0)
            stk__resident_copies(ds, g->img, g->fstart, pl, np, hmem, sl->dev, sl->plan_host);
        if (rc == 0 && np) {
            what = "uploading a batch's plan";
            rc = cu->copy_to_device_async(sl->plan_dev, sl->plan_host, np * sizeof *sl->plan_host,
                                          g->stream);
            sl->plan_in_use = true;
            if (rc == 0) {
                what = "the gather kernel";
                rc = cu->gather(sl->plan_dev, (uint32_t)np, g->stream);
            }
        }
        /* Ragged offsets were computed on the host. */
        for (size_t i = 0; rc == 0 && i < g->nf; i++) {
            stk_batch_field bf, df;
            stk_batch_field_get(hb, i, &bf);
            stk_batch_field_get(sl->view, i, &df);
            if (!bf.offsets) continue;
            what = "copying offsets";
            rc = cu->copy_to_device_async((void *)df.offsets, bf.offsets,
                                          ((size_t)n + 1) * sizeof(int64_t), g->stream);
        }
    } else if (rc == 0) {
        for (size_t i = 0; rc == 0 && i < g->nf; i++) {
            stk_batch_field bf, df;
            stk_batch_field_get(hb, i, &bf);
            stk_batch_field_get(sl->view, i, &df);
            what = "copying a batch to the device";
            if (bf.bytes)
                rc = cu->copy_to_device_async(df.data, bf.data, (size_t)bf.bytes, g->stream);
            if (rc == 0 && bf.offsets)
                rc = cu->copy_to_device_async((void *)df.offsets, bf.offsets,
                                              ((size_t)n + 1) * sizeof(int64_t), g->stream);
        }
    }
    if (rc == 0) {
        what = "recording an event";
        rc = cu->event_record(sl->copied, g->stream);
    }
    if (rc == 0) {
        sl->host = hb;
        return 0;
    }
    cu->stream_sync(g->stream); /* nothing may still read the host batch */
    stk__loader_release(g->ld, hb);
    return cuda_fail(err, rc, what);
}

static int free_slot(const stk__gpu *g) {
    for (uint32_t i = 0; i < g->nslots; i++)
        if (g->slots[i].state == D_FREE) return (int)i;
    return -1;
}

static void *feeder_main(void *arg) {
    stk__gpu *g = arg;
    stk__thread_name("stk-gpu");
    int rc0 = cu->set_device(g->device);
    pthread_mutex_lock(&g->mu);
    if (rc0) {
        g->failed = cuda_fail(&g->ferr, rc0, "selecting the device");
        pthread_cond_broadcast(&g->cv);
    }
    while (!atomic_load(&g->stop)) {
        if (atomic_load(&g->pause)) {
            /* The loader moves with none of its batches held here. */
            pthread_mutex_unlock(&g->mu);
            give_back_done(g, true);
            pthread_mutex_lock(&g->mu);
            g->paused = true;
            pthread_cond_broadcast(&g->cv);
            while (atomic_load(&g->pause) && !atomic_load(&g->stop))
                pthread_cond_wait(&g->cv, &g->mu);
            g->paused = false;
            continue;
        }
        int d = g->ended || g->failed ? -1 : free_slot(g);
        if (d < 0) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        g->slots[d].state = D_FILLING;
        pthread_mutex_unlock(&g->mu);
        stk_batch *hb = NULL;
        stk_error e = {0};
        int rc;
        for (;;) {
            bool pending = give_back_done(g, false);
            rc = stk__loader_next(g->ld, &hb, pending ? 1 : 50, &e);
            if (rc != -ETIMEDOUT || atomic_load(&g->stop) || atomic_load(&g->pause)) break;
        }
        if (rc == -EBUSY) {
            /* The host ring is full of batches whose copies are queued:
             * wait for the copies and give them back. */
            give_back_done(g, true);
            rc = -ETIMEDOUT;
        }
        if (rc == 0) rc = submit(g, (uint32_t)d, hb, &e);
        pthread_mutex_lock(&g->mu);
        dslot *sl = &g->slots[d];
        if (rc == 0 && !atomic_load(&g->pause) && !atomic_load(&g->stop)) {
            sl->state = D_READY;
        } else {
            /* Interrupted, ended, failed, or a batch of an epoch being left
             * (its copy may still run: the next use of this buffer queues
             * behind it on the same stream). */
            sl->state = D_FREE;
            if (rc == STK_END) g->ended = true;
            else if (rc < 0 && rc != -ETIMEDOUT && !g->failed) {
                g->failed = rc;
                g->ferr = e;
            }
        }
        pthread_cond_broadcast(&g->cv);
    }
    g->paused = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int stk__gpu_next(stk__gpu *g, stk_batch **out, int64_t timeout_ms, stk_error *err) {
    *out = NULL;
    struct timespec deadline;
    if (timeout_ms >= 0) stk__deadline(timeout_ms, &deadline);
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        dslot *found = NULL;
        uint32_t held = 0;
        for (uint32_t i = 0; i < g->nslots; i++) {
            dslot *sl = &g->slots[i];
            held += sl->state == D_HELD;
            if (sl->state == D_READY && stk_batch_index(sl->view) == g->next_index) found = sl;
        }
        if (found) {
            found->state = D_HELD;
            g->next_index++;
            g->taken++;
            *out = found->view;
            pthread_cond_broadcast(&g->cv);
            break;
        }
        if (g->failed) {
            rc = g->failed;
            if (err) *err = g->ferr;
            break;
        }
        if (g->ended) {
            rc = STK_END;
            break;
        }
        if (held == g->nslots) {
            rc = stk__err(err, -EBUSY,
                          "every one of the %u device buffers is held by the consumer; "
                          "release one before asking for the next batch",
                          g->nslots);
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&g->cv, &g->mu);
        } else if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The consumer's thread calls these with its own device current; a stream
 * may wait on another device's event and an event is recorded on its own
 * stream's device, so the current device is left alone. */
/* The slot whose view is b, or NULL. */
static dslot *slot_of(const stk__gpu *g, const stk_batch *b) {
    for (uint32_t i = 0; i < g->nslots; i++)
        if (g->slots[i].view == b) return &g->slots[i];
    return NULL;
}

int stk__gpu_wait(stk__gpu *g, const stk_batch *b, uintptr_t stream, stk_error *err) {
    dslot *sl = slot_of(g, b);
    if (!sl) return stk__err(err, -EINVAL, "stk_batch_wait: not a batch of this loader");
    int rc = cu->stream_wait_event((void *)stream, sl->copied);
    return rc ? cuda_fail(err, rc, "making the consumer's stream wait for a batch") : 0;
}

void stk__gpu_release(stk__gpu *g, stk_batch *b, uintptr_t stream) {
    pthread_mutex_lock(&g->mu);
    dslot *sl = slot_of(g, b);
    if (sl && sl->state == D_HELD) {
        sl->release_pending = false;
        if (stream != UINTPTR_MAX && cu->event_record(sl->released, (void *)stream) == 0)
            sl->release_pending = true;
        else if (stream != UINTPTR_MAX)
            cu->stream_sync((void *)stream); /* could not defer: wait here */
        sl->state = D_FREE;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Parks the feeder outside the loader; called and returns with mu held. */
static void park(stk__gpu *g) {
    atomic_store(&g->pause, true);
    pthread_cond_broadcast(&g->cv);
    while (g->feeder_started && !g->paused) pthread_cond_wait(&g->cv, &g->mu);
}

static void unpark(stk__gpu *g) {
    atomic_store(&g->pause, false);
    pthread_cond_broadcast(&g->cv);
}

/* Drops the device batches read ahead; the consumer's stay valid. */
static void drop_ahead(stk__gpu *g) {
    for (uint32_t i = 0; i < g->nslots; i++)
        if (g->slots[i].state == D_READY) g->slots[i].state = D_FREE;
    g->ended = false;
    g->next_index = 0;
    g->taken = 0;
}

/* Parks the feeder, drops what it read ahead, and moves the loader to
 * epoch `epoch` from its start (st NULL) or to state *st. */
static int reposition(stk__gpu *g, uint64_t epoch, const stk_loader_state *st, stk_error *err) {
    pthread_mutex_lock(&g->mu);
    park(g);
    drop_ahead(g);
    int rc = g->failed;
    if (rc) {
        if (err) *err = g->ferr;
    } else {
        const stk__gpu_host *h = &g->host;
        if (st) rc = h->ctx ? h->restore(h->ctx, st, err) : stk__loader_restore(g->ld, st, err);
        else rc = h->ctx ? h->set_epoch(h->ctx, epoch, err) : stk__loader_set_epoch(g->ld, epoch, err);
    }
    unpark(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int stk__gpu_set_epoch(stk__gpu *g, uint64_t epoch, stk_error *err) {
    return reposition(g, epoch, NULL, err);
}

void stk__gpu_save(const stk__gpu *g, stk_loader_state *out) {
    stk__gpu *m = (stk__gpu *)g;
    pthread_mutex_lock(&m->mu);
    uint64_t taken = g->taken;
    pthread_mutex_unlock(&m->mu);
    stk__loader_save_at(g->ld, taken, out);
}

int stk__gpu_restore(stk__gpu *g, const stk_loader_state *st, stk_error *err) {
    return reposition(g, 0, st, err);
}

/* ---- device-resident datasets ---- */

/* The selected fields can live on the device: all plain. */
static bool can_reside(const stk_dataset *ds, const bool *sel) {
    for (size_t f = 0; f < ds->nfields; f++)
        if (sel[f] && (ds->fields[f].codec != STK_CODEC_NONE || ds->info[f].conv ||
                       ds->info[f].conv_varies || ds->info[f].chunks))
            return false;
    return true;
}

int stk__resident_layout(const stk_dataset *ds, const bool *sel, uint64_t **fstart,
                         uint64_t *sizes) {
    size_t F = ds->nfields;
    for (size_t s = 0; s < ds->nshards; s++) {
        const stk__shard *sh = &ds->shards[s];
        for (size_t f = 0; f < F; f++) {
            size_t at = s * F + f;
            fstart[at] = NULL;
            sizes[at] = 0;
            if (!sel[f]) continue;
            uint64_t *starts = stk__malloc((size_t)(sh->nrec ? sh->nrec : 1) * sizeof *starts);
            if (!starts) return -ENOMEM;
            uint64_t total = 0;
            for (uint64_t r = 0; r < sh->nrec; r++) {
                starts[r] = total;
                total += stk__e_len(ds, sh, stk__entry(ds, sh, r), f);
            }
            fstart[at] = starts;
            sizes[at] = total;
        }
    }
    return 0;
}

void stk__resident_copies(const stk_dataset *ds, uint8_t *const *img, uint64_t *const *fstart,
                          const stk__plan *pl, size_t np, const uint8_t *hmem, uint8_t *dst,
                          stk_cuda_copy *out) {
    size_t F = ds->nfields;
    for (size_t k = 0; k < np; k++) {
        const stk__plan *p = &pl[k];
        const stk__shard *sh = &ds->shards[p->shard];
        uint64_t local = p->rec - sh->first;
        const uint64_t *e = stk__entry(ds, sh, local);
        size_t at = (size_t)p->shard * F + p->field;
        /* A window starts some rows into its record's bytes. */
        out[k] = (stk_cuda_copy){
            (uint64_t)(uintptr_t)(img[at] + fstart[at][local] + (p->off - stk__e_off(ds, sh, e, p->field))),
            (uint64_t)(uintptr_t)(dst + (p->dst - hmem)), p->len};
    }
}

/* Reads record bytes [off, off+len) of shard sh into dst. */
static int read_bytes(const stk__shard *sh, int *fd, uint64_t off, uint64_t len, uint8_t *dst,
                      uint64_t rec, stk_error *err) {
    if (sh->map) {
        memcpy(dst, sh->map + off, (size_t)len);
        return 0;
    }
    if (*fd < 0 && (*fd = stk__open(sh->path, O_RDONLY, 0)) < 0)
        return stk__err(err, *fd, "%s: cannot open: %s", sh->path, stk_strerror(*fd));
    ssize_t got = stk__pread_full(*fd, dst, (size_t)len, off);
    if (got < 0 || (uint64_t)got != len)
        return stk__err(err, got < 0 ? (int)got : STK_ETRUNCATED,
                        "%s: record %llu: the file ends before its bytes", sh->path,
                        (unsigned long long)rec);
    return 0;
}

/* Uploads the selected fields of every record, each field of a shard as one
 * image, through a host staging buffer; checks each record's checksum on
 * the way when `verify` (shards only: an index has none). */
static int upload(stk__gpu *g, const bool *sel, const uint64_t *sizes, bool verify,
                  stk_error *err) {
    const stk_dataset *ds = g->ds;
    size_t F = ds->nfields, n = ds->nshards * F;
    int rc0 = stk__dataset_ensure_all(ds, err); /* a remote dataset: all of it */
    if (rc0) return rc0;
    g->img = stk__calloc(n ? n : 1, sizeof *g->img);
    const size_t stage_cap = 64u << 20;
    uint8_t *stage = stk__malloc(stage_cap);
    if (!g->img || !stage) {
        stk__free(stage);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    int rc = 0;
    for (size_t s = 0; rc == 0 && s < ds->nshards; s++) {
        const stk__shard *sh = &ds->shards[s];
        int fd = -1;
        if (verify && ds->caps.checksums) {
            for (uint64_t r = 0; rc == 0 && r < sh->nrec; r++) {
                const uint64_t *e = stk__entry(ds, sh, r);
                uint64_t x, z;
                stk__record_span(ds, sh, e, &x, &z);
                if (sh->map && stk__hash(sh->map + x, (size_t)(z - x)) != e[0])
                    rc = stk__err(err, STK_ECHECKSUM,
                                  "%s: record %llu: checksum mismatch: the shard is damaged; "
                                  "`stoker verify` lists every damaged record",
                                  sh->path, (unsigned long long)(sh->first + r));
            }
        }
        for (size_t f = 0; rc == 0 && f < F; f++) {
            if (!sel[f]) continue;
            size_t at = s * F + f;
            uint64_t total = sizes[at];
            void *dev = NULL;
            int c = cu->device_alloc(&dev, total ? (size_t)total : 1);
            if (c) {
                rc = cuda_fail(err, c, "allocating the device-resident dataset");
                break;
            }
            g->img[at] = dev;
            uint64_t filled = 0, sent = 0;
            for (uint64_t r = 0; rc == 0 && r <= sh->nrec; r++) {
                uint64_t len = r < sh->nrec ? stk__e_len(ds, sh, stk__entry(ds, sh, r), f) : 0;
                if (filled && (r == sh->nrec || filled + len > stage_cap)) {
                    if ((c = cu->copy_to_device((uint8_t *)dev + sent, stage, (size_t)filled)))
                        rc = cuda_fail(err, c, "uploading the dataset");
                    sent += filled;
                    filled = 0;
                }
                if (r == sh->nrec || rc) break;
                const uint64_t *e = stk__entry(ds, sh, r);
                if (len > stage_cap) { /* a record larger than the staging area */
                    uint8_t *big = stk__malloc((size_t)len);
                    if (!big) rc = stk__err(err, -ENOMEM, "out of memory");
                    if (rc == 0) rc = read_bytes(sh, &fd, stk__e_off(ds, sh, e, f), len, big, sh->first + r, err);
                    if (rc == 0 && (c = cu->copy_to_device((uint8_t *)dev + sent, big, (size_t)len)))
                        rc = cuda_fail(err, c, "uploading the dataset");
                    stk__free(big);
                    sent += len;
                    continue;
                }
                rc = read_bytes(sh, &fd, stk__e_off(ds, sh, e, f), len, stage + filled, sh->first + r, err);
                filled += len;
            }
            g->resident_bytes += total;
        }
        if (fd >= 0) close(fd);
    }
    stk__free(stage);
    return rc;
}

/* ---- open, stop and close ---- */

static int gpu_open(stk_dataset *ds, const stk_loader_options *lo, stk__gpu **out,
                    stk_error *err);
static int gpu_start(stk__gpu *g, stk_error *err);
static void gpu_free(stk__gpu *g);

/* Checks that device lo->device exists and makes it current; *prev gets
 * the caller's, to be put back. */
static int select_device(const stk_loader_options *lo, int *prev, stk_error *err) {
    int count = 0, rc = stk_gpu_count(&count, err);
    if (rc) return rc;
    if (lo->device >= count)
        return stk__err(err, -EINVAL, "device: cuda:%d does not exist (%d device%s)", lo->device,
                        count, count == 1 ? "" : "s");
    if ((rc = cu->get_device(prev))) return cuda_fail(err, rc, "reading the current device");
    if ((rc = cu->set_device(lo->device))) return cuda_fail(err, rc, "selecting the device");
    return 0;
}

static stk__gpu *gpu_new(stk_dataset *ds, const stk_loader_options *lo) {
    stk__gpu *g = stk__calloc(1, sizeof *g);
    if (!g) return NULL;
    g->ds = ds;
    g->device = lo->device;
    g->nslots = lo->device_buffers;
    g->batch_size = lo->batch_size ? lo->batch_size : 32;
    pthread_mutex_init(&g->mu, NULL);
    stk__cond_init_monotonic(&g->cv);
    atomic_init(&g->stop, false);
    atomic_init(&g->pause, false);
    return g;
}

int stk__gpu_open(stk_dataset *ds, const stk_loader_options *lo, stk_loader **out,
                  stk_error *err) {
    /* The caller's current device is put back before returning. */
    int prev = 0, rc = select_device(lo, &prev, err);
    if (rc) return rc;
    stk__gpu *g = NULL;
    rc = gpu_open(ds, lo, &g, err);
    cu->set_device(prev);
    if (rc) return rc;
    stk__loader_set_gpu(g->ld, g);
    *out = g->ld;
    return 0;
}

static void close_loader(stk_loader *ld, const stk__gpu_host *host) {
    if (host->ctx) host->close(host->ctx);
    else stk__loader_close(ld);
}

int stk__gpu_attach(stk_loader *ld, const stk__gpu_host *host, const stk_loader_options *lo,
                    stk_error *err) {
    int prev = -1, rc = select_device(lo, &prev, err);
    stk__gpu *g = rc ? NULL : gpu_new(NULL, lo);
    if (!rc && !g) rc = stk__err(err, -ENOMEM, "out of memory");
    if (g) {
        g->ld = ld;
        g->host = *host;
        g->nf = stk_loader_num_fields(ld);
        g->slot_bytes = stk__loader_slot_bytes(ld);
        rc = gpu_start(g, err);
    }
    if (prev >= 0) cu->set_device(prev);
    if (rc) {
        gpu_free(g);
        close_loader(ld, host);
        return rc;
    }
    stk__loader_set_gpu(ld, g);
    return 0;
}

static int gpu_open(stk_dataset *ds, const stk_loader_options *lo, stk__gpu **out,
                    stk_error *err) {
    int rc;

    /* Which dataset fields the loader will deliver. */
    bool *sel = stk__calloc(ds->nfields ? ds->nfields : 1, sizeof *sel);
    if (!sel) return stk__err(err, -ENOMEM, "out of memory");
    for (size_t f = 0; f < ds->nfields; f++) sel[f] = lo->fields == NULL;
    for (size_t i = 0; lo->fields && i < lo->nfields; i++) {
        int f = stk_dataset_find_field(ds, lo->fields[i]);
        if (f >= 0) sel[f] = true; /* an unknown name fails in the loader's open */
    }
    stk__gpu *g = gpu_new(ds, lo);
    uint64_t *sizes = NULL;
    if (!g) {
        stk__free(sel);
        return stk__err(err, -ENOMEM, "out of memory");
    }
    /* Resident when the selected fields' images fit the budget and the
     * device; their layout, made here to know their size, is kept. */
    size_t nimg = ds->nshards * ds->nfields;
    bool resident = false;
    if (lo->device_resident_budget && can_reside(ds, sel)) {
        g->fstart = stk__calloc(nimg ? nimg : 1, sizeof *g->fstart);
        sizes = stk__calloc(nimg ? nimg : 1, sizeof *sizes);
        if (!g->fstart || !sizes || stk__resident_layout(ds, sel, g->fstart, sizes)) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            goto fail;
        }
        uint64_t need = 0;
        for (size_t i = 0; i < nimg; i++) need += sizes[i];
        size_t free_b = 0, total_b = 0;
        resident = need <= lo->device_resident_budget && cu->mem_info(&free_b, &total_b) == 0 &&
                   need + (64u << 20) < free_b;
        if (!resident) {
            for (size_t i = 0; i < nimg; i++) stk__free(g->fstart[i]);
            stk__free(g->fstart);
            g->fstart = NULL;
        }
    }
    g->resident = resident;
    rc = resident ? stk__loader_open_planned(ds, lo, &g->ld, err)
                  : stk__loader_open(ds, lo, &g->ld, err);
    if (rc) goto fail;
    g->nf = stk_loader_num_fields(g->ld);
    g->slot_bytes = stk__loader_slot_bytes(g->ld);
    if (resident && (rc = upload(g, sel, sizes, lo->verify != 0, err))) goto fail;
    if ((rc = gpu_start(g, err))) goto fail;
    stk__free(sel);
    stk__free(sizes);
    *out = g;
    return 0;
fail:
    stk__free(sel);
    stk__free(sizes);
    stk_loader *ld = g->ld;
    gpu_free(g);
    stk__loader_close(ld);
    return rc;
}

/* The stream, the page-locked host ring, the device buffers and their
 * events, and the feeder, for a stage whose loader is open. */
static int gpu_start(stk__gpu *g, stk_error *err) {
    int rc;
    const char *what = "creating a stream";
    int c = cu->stream_create(&g->stream);
    /* Page-locked host buffers: copies out of them run at the bus's speed
     * and asynchronously. */
    if (c == 0) {
        void *mem;
        size_t bytes;
        stk__loader_ring(g->ld, &mem, &bytes);
        what = "page-locking the batch buffers";
        if ((c = cu->host_register(mem, bytes)) == 0) g->pinned = mem;
    }
    g->slots = stk__calloc(g->nslots, sizeof *g->slots);
    if (!g->slots) {
        return stk__err(err, -ENOMEM, "out of memory");
    }
    if (c == 0 && g->resident) {
        g->plans_bytes = (size_t)g->nslots * g->batch_size * g->nf * sizeof(stk_cuda_copy);
        g->plans = stk__aligned_alloc(4096, stk__align_up(g->plans_bytes, 4096));
        what = "page-locking the plans";
        if (!g->plans) {
            return stk__err(err, -ENOMEM, "out of memory");
        }
        c = cu->host_register(g->plans, stk__align_up(g->plans_bytes, 4096));
        if (c) {
            stk__free(g->plans);
            g->plans = NULL;
        }
    }
    for (uint32_t i = 0; c == 0 && i < g->nslots; i++) {
        dslot *sl = &g->slots[i];
        what = "allocating device batch buffers";
        c = cu->device_alloc((void **)&sl->dev, (size_t)g->slot_bytes);
        if (c == 0 && !(sl->view = stk__batch_view_new(g->ld, g->device, sl->dev))) {
            return stk__err(err, -ENOMEM, "out of memory");
        }
        if (c == 0) {
            what = "creating events";
            c = cu->event_create(&sl->copied);
        }
        if (c == 0) c = cu->event_create(&sl->released);
        if (c == 0 && g->resident) {
            sl->plan_host = g->plans + (size_t)i * g->batch_size * g->nf;
            what = "allocating device plans";
            c = cu->device_alloc((void **)&sl->plan_dev,
                                 (size_t)g->batch_size * g->nf * sizeof(stk_cuda_copy));
        }
    }
    if (c) return cuda_fail(err, c, what);
    if ((rc = -pthread_create(&g->feeder, NULL, feeder_main, g)))
        return stk__err(err, rc, "cannot start the GPU stage's thread: %s", stk_strerror(rc));
    g->feeder_started = true;
    return 0;
}

/* Stops and joins the feeder, then waits for the copies it queued and
 * gives their host batches back.  Safe to call twice. */
static void stop_feeder(stk__gpu *g) {
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->stop, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->feeder_started) {
        pthread_join(g->feeder, NULL);
        g->feeder_started = false;
    }
    if (g->stream) {
        int prev = -1;
        if (cu->get_device(&prev) == 0) cu->set_device(g->device);
        if (g->slots) give_back_done(g, true);
        else cu->stream_sync(g->stream);
        if (prev >= 0) cu->set_device(prev);
    }
}

void stk__gpu_stop(stk__gpu *g) {
    stop_feeder(g);
    /* The host buffers stay: they are registered with the driver until
     * close, and no batch of theirs is held. */
    if (g->host.ctx) g->host.stop(g->host.ctx);
    else stk__loader_join(g->ld);
}

/* Everything of the stage but its loader. */
static void gpu_free(stk__gpu *g) {
    if (!g) return;
    stop_feeder(g);
    int prev = -1;
    if (cu && cu->get_device(&prev) == 0) cu->set_device(g->device);
    for (uint32_t i = 0; g->slots && i < g->nslots; i++) {
        dslot *sl = &g->slots[i];
        if (sl->dev) cu->device_free(sl->dev);
        if (sl->plan_dev) cu->device_free(sl->plan_dev);
        if (sl->copied) cu->event_destroy(sl->copied);
        if (sl->released) cu->event_destroy(sl->released);
        stk__batch_view_free(sl->view);
    }
    stk__free(g->slots);
    if (g->plans) {
        cu->host_unregister(g->plans);
        stk__free(g->plans);
    }
    if (g->pinned) cu->host_unregister(g->pinned);
    if (g->stream) cu->stream_destroy(g->stream);
    size_t n = g->ds ? g->ds->nshards * g->ds->nfields : 0;
    for (size_t i = 0; i < n; i++) {
        if (g->img && g->img[i]) cu->device_free(g->img[i]);
        if (g->fstart) stk__free(g->fstart[i]);
    }
    stk__free(g->img);
    stk__free(g->fstart);
    if (prev >= 0) cu->set_device(prev);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    stk__free(g);
}

void stk__gpu_close(stk_loader *ld) {
    stk__gpu *g = stk__loader_gpu(ld);
    stk__loader_set_gpu(ld, NULL);
    stk__gpu_host host = g ? g->host : (stk__gpu_host){0};
    gpu_free(g);
    close_loader(ld, &host);
}
