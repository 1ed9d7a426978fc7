/*
 * gpu.h: the GPU stage, as src/api reaches it for a loader opened with a
 * device, and the host arithmetic of device-resident datasets (tested
 * without a GPU).
 */
#ifndef STK_GPU_H
#define STK_GPU_H

#include "../core/internal.h"
#include "../cuda/cuda.h"

struct stk_cuda_api;
struct stk_cuda_copy;
struct stk__plan;

typedef struct stk__gpu stk__gpu;

/* Opens a host loader over `ds` with `lo` (lo->device >= 0, options already
 * checked) and the stage on it; *out is the loader, which knows its stage
 * (stk__loader_gpu).  Returns 0, STK_ENOGPU, STK_ECUDA, -EINVAL (no such
 * device) or an error of the loader's open. */
int stk__gpu_open(stk_dataset *ds, const stk_loader_options *lo, stk_loader **out,
                  stk_error *err);
/* A stage on a loader that another part of the library fills and moves: a
 * mixture's (src/mix, which src/api knows and this layer does not).  Its
 * batches are taken, given back and counted as the loader's own (the
 * pipeline's next, release and save_at); moving the epoch or the state,
 * stopping and closing go to `ctx` through these. */
typedef struct stk__gpu_host {
    void *ctx; /* not NULL */
    int (*set_epoch)(void *ctx, uint64_t epoch, stk_error *err);
    int (*restore)(void *ctx, const stk_loader_state *st, stk_error *err);
    void (*stop)(void *ctx);  /* stops the threads that fill the loader */
    void (*close)(void *ctx); /* closes the loader and whatever fills it */
} stk__gpu_host;
/* Puts a copying stage for device lo->device (lo->device_buffers device
 * buffers) on `ld`, whose calls then go through `host`; the stage owns
 * both from then on: a failure closes them.  Returns 0, STK_ENOGPU,
 * STK_ECUDA, -EINVAL (no such device) or -ENOMEM. */
int stk__gpu_attach(stk_loader *ld, const stk__gpu_host *host, const stk_loader_options *lo,
                    stk_error *err);
/* The calls of stoker.h for such a loader: next (timeout_ms < 0: no
 * limit), stk_batch_wait, release (stream UINTPTR_MAX: no GPU work reads
 * the batch any more), set_epoch, save, restore, stop. */
int stk__gpu_next(stk__gpu *g, stk_batch **out, int64_t timeout_ms, stk_error *err);
int stk__gpu_wait(stk__gpu *g, const stk_batch *b, uintptr_t stream, stk_error *err);
void stk__gpu_release(stk__gpu *g, stk_batch *b, uintptr_t stream);
int stk__gpu_set_epoch(stk__gpu *g, uint64_t epoch, stk_error *err);
void stk__gpu_save(const stk__gpu *g, stk_loader_state *out);
int stk__gpu_restore(stk__gpu *g, const stk_loader_state *st, stk_error *err);
void stk__gpu_stop(stk__gpu *g);
/* Closes the stage and then its loader. */
void stk__gpu_close(stk_loader *ld);
int stk__gpu_device(const stk__gpu *g);
uint64_t stk__gpu_resident_bytes(const stk__gpu *g);

/* Device-resident datasets, the host arithmetic (gpu.c): each selected
 * field of each shard becomes one image holding the field's bytes of every
 * record in order.  stk__resident_layout fills, per [shard * F + field],
 * the start of each record's bytes in the image (fstart, from stk__malloc;
 * NULL for fields not selected) and the image's size.  Returns 0 or
 * -ENOMEM (what was made is in fstart, for the caller to free). */
int stk__resident_layout(const stk_dataset *ds, const bool *sel, uint64_t **fstart,
                         uint64_t *sizes);
/* The copies that assemble a planned batch: plan piece k goes from its
 * place in its image (img[shard * F + field]) to dst + (piece's place in
 * the host buffer hmem).  Addresses are whatever img and dst are: device
 * memory for the gather kernel, host memory in tests. */
void stk__resident_copies(const stk_dataset *ds, uint8_t *const *img, uint64_t *const *fstart,
                          const struct stk__plan *pl, size_t np, const uint8_t *hmem,
                          uint8_t *dst, struct stk_cuda_copy *out);

#endif
