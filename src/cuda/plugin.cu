/*
 * plugin.cu: libstoker_cuda.so, stoker's CUDA side (see plugin.h): thin
 * wrappers over the CUDA runtime, the gather kernel that assembles batches
 * of a device-resident dataset, and NVTX ranges.
 */
#include "plugin.h"

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

namespace {

int err(cudaError_t e) { return (int)e; }

const char *error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

int device_count(int *n) {
    *n = 0;
    return err(cudaGetDeviceCount(n));
}

int device_name(int dev, char *buf, size_t len) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e == cudaSuccess && len) {
        size_t i = 0;
        for (; i + 1 < len && p.name[i]; i++) buf[i] = p.name[i];
        buf[i] = 0;
    }
    return err(e);
}

int set_device(int dev) { return err(cudaSetDevice(dev)); }
int get_device(int *dev) { return err(cudaGetDevice(dev)); }
int mem_info(size_t *f, size_t *t) { return err(cudaMemGetInfo(f, t)); }

int stream_create(void **s) {
    cudaStream_t st = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = st;
    return err(e);
}
int stream_destroy(void *s) { return err(cudaStreamDestroy((cudaStream_t)s)); }
int stream_sync(void *s) { return err(cudaStreamSynchronize((cudaStream_t)s)); }

int event_create(void **ev) {
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *ev = e;
    return err(r);
}
int event_destroy(void *ev) { return err(cudaEventDestroy((cudaEvent_t)ev)); }
int event_record(void *ev, void *s) { return err(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s)); }
int event_query(void *ev) { return err(cudaEventQuery((cudaEvent_t)ev)); }
int event_sync(void *ev) { return err(cudaEventSynchronize((cudaEvent_t)ev)); }
int stream_wait_event(void *s, void *ev) {
    return err(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)ev, 0));
}

int host_register(void *p, size_t n) { return err(cudaHostRegister(p, n, cudaHostRegisterDefault)); }
int host_unregister(void *p) { return err(cudaHostUnregister(p)); }
int device_alloc(void **p, size_t n) { return err(cudaMalloc(p, n)); }
int device_free(void *p) { return err(cudaFree(p)); }

int copy_to_device_async(void *dst, const void *src, size_t n, void *s) {
    return err(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s));
}
int copy_to_device(void *dst, const void *src, size_t n) {
    return err(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}
int copy_to_host(void *dst, const void *src, size_t n) {
    return err(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

/* One block per copy; its threads move 16-byte words where source,
 * destination and length allow, else 8, 4 or single bytes.  Windows start
 * at any row, so alignment is checked per copy rather than assumed. */
__global__ void gather_kernel(const stk_cuda_copy *copies, uint32_t n) {
    for (uint32_t c = blockIdx.x; c < n; c += gridDim.x) {
        stk_cuda_copy k = copies[c];
        uint64_t a = k.src | k.dst | k.len;
        if ((a & 15) == 0) {
            const uint4 *s = reinterpret_cast<const uint4 *>(k.src);
            uint4 *d = reinterpret_cast<uint4 *>(k.dst);
            for (uint64_t i = threadIdx.x; i < k.len / 16; i += blockDim.x) d[i] = s[i];
        } else if ((a & 7) == 0) {
            const uint64_t *s = reinterpret_cast<const uint64_t *>(k.src);
            uint64_t *d = reinterpret_cast<uint64_t *>(k.dst);
            for (uint64_t i = threadIdx.x; i < k.len / 8; i += blockDim.x) d[i] = s[i];
        } else if ((a & 3) == 0) {
            const uint32_t *s = reinterpret_cast<const uint32_t *>(k.src);
            uint32_t *d = reinterpret_cast<uint32_t *>(k.dst);
            for (uint64_t i = threadIdx.x; i < k.len / 4; i += blockDim.x) d[i] = s[i];
        } else {
            const uint8_t *s = reinterpret_cast<const uint8_t *>(k.src);
            uint8_t *d = reinterpret_cast<uint8_t *>(k.dst);
            for (uint64_t i = threadIdx.x; i < k.len; i += blockDim.x) d[i] = s[i];
        }
    }
}

int gather(const stk_cuda_copy *copies, uint32_t n, void *s) {
    if (n == 0) return 0;
    uint32_t blocks = n < 65535 ? n : 65535;
    gather_kernel<<<blocks, 256, 0, (cudaStream_t)s>>>(copies, n);
    return err(cudaGetLastError());
}

void range_push(const char *name) { nvtxRangePushA(name); }
void range_pop() { nvtxRangePop(); }

const stk_cuda_api api = {
    STK_CUDA_ABI,    error_string,   device_count,  device_name,  set_device,
    get_device,      mem_info,        stream_create,  stream_destroy, stream_sync, event_create,
    event_destroy,   event_record,   event_query,   event_sync,   stream_wait_event,
    host_register,   host_unregister, device_alloc, device_free,  copy_to_device_async,
    copy_to_device,  copy_to_host,   gather,       range_push,
    range_pop,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const stk_cuda_api *stk_cuda_plugin_v1(void) {
    return &api;
}
