/*
 * loader.c: the public loader calls whose work differs between batches in
 * host memory (src/pipeline) and batches on a GPU (src/gpu).  One loader
 * type and one batch type: a loader opened with a device carries its GPU
 * stage, and every call here sends the work to the stage when it has one.
 * The calls that read the same either way (fields, counts, stats, tracing,
 * a batch's size and fields) are the pipeline's own.  A mixture's loader
 * (src/mix) is a pipeline loader whose batches its mixture fills: the
 * calls that move its epoch or state, and its stop and close, go to the
 * mixture.  A mixture with a device has a GPU stage on that loader: the
 * calls go to the stage, which sends those to the mixture.
 */
#include "../gpu/gpu.h"
#include "../mix/mix.h"
#include "../pipeline/pipeline.h"

#include <errno.h>

int stk_loader_open(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                    stk_error *err) {
    stk_loader_options defaults;
    if (!opts) {
        stk_loader_options_init(&defaults);
        opts = &defaults;
    }
    if (!ds || !out) return stk__err(err, -EINVAL, "stk_loader_open: NULL argument");
    *out = NULL;
    if (opts->device < 0) return stk__loader_open(ds, opts, out, err);
    /* Bad options are said as such, before any question of a GPU. */
    int rc = stk__loader_check(ds, opts, err);
    return rc ? rc : stk__gpu_open(ds, opts, out, err);
}

/* A mixture as its GPU stage reaches it. */
static int mix_set_epoch(void *m, uint64_t epoch, stk_error *err) {
    return stk__mixture_set_epoch(m, epoch, err);
}
static int mix_restore(void *m, const stk_loader_state *st, stk_error *err) {
    return stk__mixture_restore(m, st, err);
}
static void mix_stop(void *m) { stk__mixture_stop(m); }
static void mix_close(void *m) { stk__mixture_close(m); }

int stk_loader_open_mixture(const stk_mixture_source *sources, size_t n,
                            const stk_loader_options *common, const stk_mixture_options *mo,
                            stk_loader **out, stk_error *err) {
    stk_loader_options defaults;
    stk_mixture_options mdefaults = {STK_MIX_STOP, 0, 0};
    if (!common) {
        stk_loader_options_init(&defaults);
        common = &defaults;
    }
    if (!mo) mo = &mdefaults;
    if (!out) return stk__err(err, -EINVAL, "stk_loader_open_mixture: NULL argument");
    *out = NULL;
    int rc = stk__loader_check_device(common, err);
    if (rc) return rc;
    if (common->device < 0) return stk__mixture_open(sources, n, common, mo, out, err);
    /* On a device: the mixture fills host batches, and a stage copies them.
     * Without a GPU that is said before the sources are opened. */
    int count = 0;
    if ((rc = stk_gpu_count(&count, err))) return rc;
    stk_loader_options host = *common;
    host.device = -1;
    stk_loader *ld = NULL;
    if ((rc = stk__mixture_open(sources, n, &host, mo, &ld, err))) return rc;
    struct stk__mixer *m = stk__loader_mix(ld);
    if (stk__mixture_hands_out(m)) {
        stk__mixture_close(m);
        return stk__err(err, -EINVAL,
                        "mixture: homogeneous batches of sources whose fields differ are the "
                        "sources' own and stay in host memory (device); select and name the "
                        "sources' fields alike to have batches on a device");
    }
    stk__gpu_host h = {m, mix_set_epoch, mix_restore, mix_stop, mix_close};
    if ((rc = stk__gpu_attach(ld, &h, common, err))) return rc;
    *out = ld;
    return 0;
}

int stk_loader_next(stk_loader *ld, stk_batch **out, stk_error *err) {
    return stk_loader_next_timeout(ld, out, -1, err);
}

/* The call itself, whatever delivers the loader's batches. */
static int next_any(stk_loader *ld, stk_batch **out, int64_t timeout_ms, stk_error *err) {
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) return stk__gpu_next(g, out, timeout_ms, err);
    if (stk__loader_mix(ld)) return stk__mixture_next(stk__loader_mix(ld), out, timeout_ms, err);
    return stk__loader_next(ld, out, timeout_ms, err);
}

int stk_loader_next_timeout(stk_loader *ld, stk_batch **out, int64_t timeout_ms,
                            stk_error *err) {
    if (!ld || !out) return stk__err(err, -EINVAL, "stk_loader_next: NULL argument");
    if (!stk__loader_series_on(ld)) return next_any(ld, out, timeout_ms, err);
    /* The series counts here, above the GPU stage and the mixture, so that
     * it sees what the consumer sees whatever delivers the batches. */
    uint64_t t0 = stk_now_ns();
    int rc = next_any(ld, out, timeout_ms, err);
    stk__loader_series_count(ld, rc == 0 ? *out : NULL, t0, stk_now_ns());
    return rc;
}

void stk_loader_release(stk_loader *ld, stk_batch *b) {
    stk_loader_release_after(ld, b, UINTPTR_MAX);
}

void stk_loader_release_after(stk_loader *ld, stk_batch *b, uintptr_t stream) {
    if (!ld || !b) return;
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) stk__gpu_release(g, b, stream);
    else if (stk__loader_mix(ld)) stk__mixture_release(stk__loader_mix(ld), b);
    else stk__loader_release(ld, b);
}

int stk_batch_wait(const stk_batch *b, uintptr_t stream, stk_error *err) {
    if (!b) return stk__err(err, -EINVAL, "stk_batch_wait: NULL batch");
    if (stk_batch_device(b) < 0) return 0;
    return stk__gpu_wait(stk__loader_gpu(stk__batch_loader(b)), b, stream, err);
}

int stk_loader_unget(stk_loader *ld, stk_batch *b) {
    if (!ld || !b || stk__loader_gpu(ld)) return -EINVAL;
    if (stk__loader_mix(ld)) return stk__mixture_unget(stk__loader_mix(ld), b);
    return stk__loader_unget(ld, b);
}

int stk_loader_add_buffer(stk_loader *ld, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    if (stk__loader_gpu(ld))
        return stk__err(err, -ENOTSUP,
                        "device buffers are fixed when the loader opens (device_buffers); "
                        "release a batch before asking for the next");
    if (stk__loader_mix(ld)) return stk__mixture_add_buffer(stk__loader_mix(ld), err);
    return stk__loader_add_buffer(ld, err);
}

int stk_loader_set_epoch(stk_loader *ld, uint64_t epoch, stk_error *err) {
    if (!ld) return stk__err(err, -EINVAL, "NULL loader");
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) return stk__gpu_set_epoch(g, epoch, err);
    if (stk__loader_mix(ld)) return stk__mixture_set_epoch(stk__loader_mix(ld), epoch, err);
    return stk__loader_set_epoch(ld, epoch, err);
}

void stk_loader_save(const stk_loader *ld, stk_loader_state *out) {
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) stk__gpu_save(g, out);
    else if (stk__loader_mix(ld)) stk__mixture_save(stk__loader_mix(ld), out);
    else stk__loader_save(ld, out);
}

int stk_loader_restore(stk_loader *ld, const stk_loader_state *st, stk_error *err) {
    if (!ld || !st) return stk__err(err, -EINVAL, "stk_loader_restore: NULL argument");
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) return stk__gpu_restore(g, st, err);
    if (stk__loader_mix(ld)) return stk__mixture_restore(stk__loader_mix(ld), st, err);
    return stk__loader_restore(ld, st, err);
}

int stk_loader_fetch_epoch(stk_loader *ld, uint64_t *bytes, stk_error *err) {
    uint64_t ignored;
    if (!ld) return stk__err(err, -EINVAL, "stk_loader_fetch_epoch: NULL loader");
    if (stk__loader_mix(ld))
        return stk__mixture_fetch_epoch(stk__loader_mix(ld), bytes ? bytes : &ignored, err);
    return stk__loader_fetch_epoch(ld, bytes ? bytes : &ignored, err);
}

int stk_loader_device(const stk_loader *ld) {
    stk__gpu *g = ld ? stk__loader_gpu(ld) : NULL;
    return g ? stk__gpu_device(g) : -1;
}

uint64_t stk_loader_resident_bytes(const stk_loader *ld) {
    stk__gpu *g = ld ? stk__loader_gpu(ld) : NULL;
    return g ? stk__gpu_resident_bytes(g) : 0;
}

void stk_loader_stop(stk_loader *ld) {
    if (!ld) return;
    stk__gpu *g = stk__loader_gpu(ld);
    if (g) stk__gpu_stop(g);
    else if (stk__loader_mix(ld)) stk__mixture_stop(stk__loader_mix(ld));
    else stk__loader_stop(ld);
}

void stk_loader_close(stk_loader *ld) {
    if (!ld) return;
    if (stk__loader_gpu(ld)) stk__gpu_close(ld);
    else if (stk__loader_mix(ld)) stk__mixture_close(stk__loader_mix(ld));
    else stk__loader_close(ld);
}
