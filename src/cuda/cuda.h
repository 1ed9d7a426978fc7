/*
 * cuda.h: the CUDA plugin and NVTX ranges as the rest of libstoker reaches
 * them (cuda.c).  Includes nothing above core.
 */
#ifndef STK_CUDA_H
#define STK_CUDA_H

#include "../core/internal.h"

struct stk_cuda_api;

/* The plugin's functions, loaded on first use; NULL (and STK_ENOGPU in
 * *err) when there is no plugin.  Thread-safe. */
const struct stk_cuda_api *stk__cuda(stk_error *err);

/* NVTX ranges for the pipeline's stages: on when a tool that reads them is
 * attached (Nsight Systems sets NVTX_INJECTION64_PATH) and the plugin
 * loads; checked once.  Push and pop are no-ops otherwise. */
bool stk__nvtx_on(void);
void stk__nvtx_push(const char *name);
void stk__nvtx_pop(void);
/* Ranges this thread has open, and closing them down to `depth`. */
int stk__nvtx_depth(void);
void stk__nvtx_pop_to(int depth);

/* The plugin's functions once stk__cuda has loaded them, else NULL. */
const struct stk_cuda_api *stk__cuda_api_loaded(void);

#endif
