/*
 * test_gpu_plan.c: device-resident batches without a GPU.  A planned loader
 * (what the GPU stage runs for a resident dataset) plans each batch without
 * reading; the GPU stage turns the plan into copies out of per-field images
 * of the dataset and a kernel runs them.  Here the images are built in host
 * memory from stk_dataset_read, the same copies are run with memcpy into the
 * batch's own buffer, and the batch must then hold exactly what was written,
 * in the same order as an ordinary loader gives: windows, records and
 * ragged fields, every order, two ranks, one and three threads.
 */
#include "test_loader_common.h"

#include "cuda/plugin.h"
#include "gpu/gpu.h"
#include "pipeline/pipeline.h"

static void run(tds *d, const char *const *names, size_t nn, uint64_t L, stk_order order,
                uint32_t world, int threads) {
    stk_error err = {0};
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(d->dir, &ds, &err));
    size_t F = stk_dataset_num_fields(ds), S = stk_dataset_num_shards(ds);
    bool sel[TDS_MAXF] = {0};
    for (size_t i = 0; i < nn; i++) {
        int f = stk_dataset_find_field(ds, names[i]);
        CHECK(f >= 0);
        sel[f] = true;
    }
    uint64_t **fstart = calloc(S * F, sizeof *fstart);
    uint64_t *sizes = calloc(S * F, sizeof *sizes);
    uint8_t **img = calloc(S * F, sizeof *img);
    CHECK(stk__resident_layout(ds, sel, fstart, sizes) == 0);
    for (size_t s = 0; s < S; s++) {
        stk_shard_info si;
        CHECK_OK(stk_dataset_shard(ds, s, &si));
        for (size_t f = 0; f < F; f++) {
            size_t at = s * F + f;
            if (!sel[f]) {
                CHECK(fstart[at] == NULL);
                continue;
            }
            img[at] = malloc(sizes[at] ? sizes[at] : 1);
            for (uint64_t r = 0; r < si.records; r++) {
                size_t len = 0;
                CHECK_OK(stk_dataset_read(ds, si.first_record + r, f, img[at] + fstart[at][r],
                                          (size_t)(sizes[at] - fstart[at][r]), &len, 0, &err));
                CHECK(r + 1 == si.records ? fstart[at][r] + len == sizes[at]
                                          : fstart[at][r] + len == fstart[at][r + 1]);
            }
        }
    }
    for (uint32_t rank = 0; rank < world; rank++) {
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 7;
        o.fields = names;
        o.nfields = nn;
        o.window = L;
        o.stride = 2;
        o.order = order;
        o.seed = 11;
        o.block_samples = 9;
        o.block_group = 3;
        o.rank = rank;
        o.world_size = world;
        o.threads = threads;
        stk_loader *planned = NULL, *plain = NULL;
        CHECK_OK(stk__loader_open_planned(ds, &o, &planned, &err));
        CHECK_OK(stk_loader_open(ds, &o, &plain, &err));
        uint64_t batches = 0;
        for (;;) {
            stk_batch *b = NULL, *c = NULL;
            int r1 = stk_loader_next(planned, &b, &err);
            int r2 = stk_loader_next(plain, &c, &err);
            CHECK(r1 == r2);
            if (r1 == STK_END) break;
            CHECK_OK(r1);
            size_t np = 0;
            const stk__plan *pl = stk__batch_plan(b, &np);
            CHECK(pl != NULL && np == (size_t)stk_batch_size(b) * nn);
            stk_cuda_copy *cp = calloc(np ? np : 1, sizeof *cp);
            uint8_t *mem = stk__batch_mem(b);
            stk__resident_copies(ds, img, fstart, pl, np, mem, mem, cp);
            for (size_t k = 0; k < np; k++)
                memcpy((void *)(uintptr_t)cp[k].dst, (const void *)(uintptr_t)cp[k].src,
                       (size_t)cp[k].len);
            free(cp);
            /* The truth, and the same samples as an ordinary loader. */
            tds_check_batch(d, planned, b, names, nn, L, FNV0);
            CHECK(stk_batch_size(b) == stk_batch_size(c));
            CHECK(!memcmp(stk_batch_samples(b), stk_batch_samples(c),
                          stk_batch_size(b) * sizeof(uint64_t)));
            stk_loader_release(planned, b);
            stk_loader_release(plain, c);
            batches++;
        }
        CHECK(batches == stk_loader_rank_batches(planned) && batches > 2);
        stk_loader_stats st;
        stk_loader_stats_get(planned, &st);
        CHECK(st.io.count == 0 && st.verify.count == 0); /* it read nothing */
        stk_loader_close(planned);
        stk_loader_close(plain);
    }
    for (size_t i = 0; i < S * F; i++) {
        free(img[i]);
        free(fstart[i]); /* from stk__malloc, which is malloc outside fault tests */
    }
    free(img);
    free(fstart);
    free(sizes);
    stk_dataset_close(ds);
}

int main(void) {
    test_watchdog(240);
    stk_order orders[] = {STK_ORDER_SEQUENTIAL, STK_ORDER_RANDOM, STK_ORDER_BLOCK};
    tds w;
    tds_init(&w, TDS_WINDOWS, 120);
    tds_write(&w, "gpu-plan-w");
    tds_windows(&w, 5, 2, NULL);
    const char *wn[] = {"ts", "aux", "static"};
    tds r;
    tds_init(&r, TDS_RECORDS, 150);
    tds_write(&r, "gpu-plan-r");
    const char *rn[] = {"x", "id"};
    tds g;
    tds_init(&g, TDS_RAGGED, 150);
    tds_write(&g, "gpu-plan-g");
    const char *gn[] = {"lab", "seq"};
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t world = 1; world <= 2; world++)
            for (int threads = 1; threads <= 3; threads += 2) {
                run(&w, wn, 3, 5, orders[oi], world, threads);
                run(&r, rn, 2, 0, orders[oi], world, threads);
                run(&g, gn, 2, 0, orders[oi], world, threads);
            }
    tds_free(&w);
    tds_free(&r);
    tds_free(&g);
    return 0;
}
