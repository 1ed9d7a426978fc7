/*
 * gpu.h: the CUDA plugin as the rest of libstoker reaches it.
 */
#ifndef STK_GPU_H
#define STK_GPU_H

#include "../core/internal.h"
#include "../cuda/cuda.h"

struct stk_cuda_api;
struct stk_cuda_copy;
struct stk__plan;

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
