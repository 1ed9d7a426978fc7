/*
 * plugin.h: the interface between libstoker and libstoker_cuda.so, the part
 * of stoker built with the CUDA toolkit.
 *
 * libstoker never links against CUDA: it loads the plugin with dlopen when
 * a GPU feature is first used (src/gpu/gpu.c), so one build runs on
 * machines with and without a GPU, and says why when there is none.  The
 * plugin links the CUDA runtime statically and needs only the driver
 * (libcuda.so.1) at run time.
 *
 * Every call returns 0 or a CUDA error code (cudaError_t as an int);
 * error_string turns one into text.  Streams and events are opaque
 * pointers (cudaStream_t, cudaEvent_t).  The table is plain C so that the
 * C side needs no CUDA header.
 */
#ifndef STK_CUDA_PLUGIN_H
#define STK_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define STK_CUDA_ABI 2 /* 2: host_callback removed */
#define STK_CUDA_NOT_READY 600 /* cudaErrorNotReady: event_query on pending work */

/* One copy of the device gather: len bytes from src to dst, both device
 * addresses.  The gather of a batch is an array of these in device memory. */
typedef struct stk_cuda_copy {
    uint64_t src, dst, len;
} stk_cuda_copy;

typedef struct stk_cuda_api {
    int abi;
    const char *(*error_string)(int code);
    int (*device_count)(int *n);
    int (*device_name)(int dev, char *buf, size_t len);
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    int (*stream_create)(void **stream); /* non-blocking: no implicit sync with stream 0 */
    int (*stream_destroy)(void *stream);
    int (*stream_sync)(void *stream);
    int (*event_create)(void **ev); /* without timing */
    int (*event_destroy)(void *ev);
    int (*event_record)(void *ev, void *stream);
    int (*event_query)(void *ev); /* 0: done; STK_CUDA_NOT_READY: pending */
    int (*event_sync)(void *ev);
    int (*stream_wait_event)(void *stream, void *ev);
    int (*host_register)(void *p, size_t n);
    int (*host_unregister)(void *p);
    int (*device_alloc)(void **p, size_t n);
    int (*device_free)(void *p);
    int (*copy_to_device_async)(void *dst, const void *src, size_t n, void *stream);
    int (*copy_to_device)(void *dst, const void *src, size_t n);
    int (*copy_to_host)(void *dst, const void *src, size_t n);
    /* Runs the `n` copies whose descriptions are at `copies` (device memory)
     * on `stream`. */
    int (*gather)(const stk_cuda_copy *copies, uint32_t n, void *stream);
    /* NVTX ranges (no-ops unless a tool such as Nsight Systems is
     * attached). */
    void (*range_push)(const char *name);
    void (*range_pop)(void);
} stk_cuda_api;

/* The one symbol the plugin exports. */
typedef const stk_cuda_api *(*stk_cuda_plugin_fn)(void);
#define STK_CUDA_PLUGIN_SYMBOL "stk_cuda_plugin_v1"

#endif
