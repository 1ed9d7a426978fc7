/*
 * test_loader_resume: the loader's state, epochs and restarts.
 *
 *  - save after a random number of batches, restore into a fresh loader
 *    (another thread count and backend, another seed option): the rest of
 *    the epoch is batch for batch identical (ids and bytes) to the
 *    uninterrupted run, for every order and sample space, with 1 and 2
 *    ranks, with and without pad; restoring in the same loader too;
 *  - save with 2 ranks after k batches each (both report the same
 *    position), restore into 3 ranks: together they take exactly positions
 *    [P, P + 3*floor((N-P)/3)) of the global order, once each;
 *  - a state saved at the end of the epoch restores to STK_END;
 *  - restoring a state whose fingerprint differs (another window, order,
 *    field list, block size, validity field) or whose position is past the
 *    epoch fails with -EINVAL and a message;
 *  - set_epoch in the middle of an epoch starts the new epoch cleanly (the
 *    stream equals a fresh loader's), and back again;
 *  - a batch held across set_epoch and restore keeps its bytes.
 */
#include "test_loader_common.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void base_options(stk_loader_options *o, const tds *d, stk_order order) {
    stk_loader_options_init(o);
    o->batch_size = 6;
    o->block_samples = 4;
    o->block_group = 3;
    o->seed = 11;
    o->order = order;
    o->threads = 2;
    o->backend = STK_BACKEND_POOL;
    o->memory_budget = 64 << 20;
    if (d->kind == TDS_WINDOWS) {
        o->window = d->L;
        o->stride = d->S;
    }
}

static stk_loader *open_ld(stk_dataset *ds, const stk_loader_options *o) {
    stk_error err = {0};
    stk_loader *ld = NULL;
    CHECK_OK(stk_loader_open(ds, o, &ld, &err));
    return ld;
}

/* Hashes of the next `max` batches (ALL: all that are left). */
#define ALL UINT64_MAX
static uint64_t *take(const tds *d, stk_loader *ld, const stk_loader_options *o, uint64_t max,
                      uint64_t *count) {
    stk_error err = {0};
    uint64_t cap = stk_loader_rank_batches(ld) + 1, n = 0;
    uint64_t *h = malloc(cap * 8);
    CHECK(h != NULL);
    stk_batch *b;
    int rc = 0;
    while (n < max && (rc = stk_loader_next(ld, &b, &err)) == 0) {
        CHECK(n < cap);
        h[n++] = tds_check_batch(d, ld, b, o->fields, o->nfields, o->window, FNV0);
        stk_loader_release(ld, b);
    }
    if (rc != 0 && rc != STK_END) {
        fprintf(stderr, "next: %d: %s\n", rc, err.message);
        exit(1);
    }
    *count = n;
    return h;
}

static void check_tail(const uint64_t *full, uint64_t nfull, uint64_t k, const uint64_t *tail,
                       uint64_t ntail, const char *what) {
    if (nfull - k != ntail) {
        fprintf(stderr, "%s: %llu batches after restoring at batch %llu, want %llu\n", what,
                (unsigned long long)ntail, (unsigned long long)k, (unsigned long long)(nfull - k));
        exit(1);
    }
    for (uint64_t i = 0; i < ntail; i++)
        if (tail[i] != full[k + i]) {
            fprintf(stderr, "%s: batch %llu after restoring at %llu differs\n", what,
                    (unsigned long long)i, (unsigned long long)k);
            exit(1);
        }
}

/* Save at a random batch, restore into a fresh loader, compare. */
static void resume_same_world(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    const uint64_t N = tds_samples(d);
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t W = 1; W <= 2; W++)
            for (int pad = 0; pad < 2; pad++)
                for (int trial = 0; trial < 3; trial++) {
                    stk_loader_options o;
                    base_options(&o, d, (stk_order)oi);
                    o.world_size = W;
                    o.pad = pad;
                    for (uint32_t r = 0; r < W; r++) {
                        o.rank = r;
                        o.threads = 2;
                        o.backend = STK_BACKEND_POOL;
                        o.seed = 11;
                        stk_loader *ld = open_ld(ds, &o);
                        uint64_t nfull, nk;
                        uint64_t *full = take(d, ld, &o, ALL, &nfull);
                        stk_loader_close(ld);
                        CHECK(nfull > 2);
                        uint64_t k = trial == 0 ? 0 : trial == 1 ? nfull - 1 : 1 + rnd() % (nfull - 1);
                        ld = open_ld(ds, &o);
                        uint64_t *head = take(d, ld, &o, k, &nk);
                        CHECK(nk == k);
                        for (uint64_t i = 0; i < k; i++) CHECK(head[i] == full[i]);
                        stk_loader_state st;
                        stk_loader_save(ld, &st);
                        uint64_t want = k * o.batch_size * W;
                        CHECK(st.position == (want < N ? want : N));
                        CHECK(st.seed == 11 && st.epoch == 0);
                        /* The same loader, restored to where it is. */
                        if (trial == 2) {
                            CHECK_OK(stk_loader_restore(ld, &st, &err));
                            uint64_t nt;
                            uint64_t *tail = take(d, ld, &o, ALL, &nt);
                            check_tail(full, nfull, k, tail, nt, "restore in place");
                            free(tail);
                        }
                        stk_loader_close(ld);
                        /* A fresh loader, other threads, backend and seed. */
                        o.threads = 4;
                        o.backend = trial == 1 ? STK_BACKEND_MMAP : STK_BACKEND_URING;
                        o.seed = 999;
                        ld = NULL;
                        int rc = stk_loader_open(ds, &o, &ld, &err);
                        if (rc == -ENOSYS) {
                            o.backend = STK_BACKEND_MMAP;
                            ld = open_ld(ds, &o);
                        } else {
                            CHECK_OK(rc);
                        }
                        CHECK_OK(stk_loader_restore(ld, &st, &err));
                        stk_loader_state st2;
                        stk_loader_save(ld, &st2);
                        CHECK(st2.position == st.position && st2.seed == 11 && st2.epoch == 0);
                        uint64_t nt;
                        uint64_t *tail = take(d, ld, &o, ALL, &nt);
                        char what[128];
                        snprintf(what, sizeof what, "%s order %d W %u rank %u pad %d",
                                 tds_kind_name(d->kind), oi, W, r, pad);
                        check_tail(full, nfull, k, tail, nt, what);
                        stk_batch *b;
                        CHECK(stk_loader_next(ld, &b, &err) == STK_END);
                        stk_loader_close(ld);
                        free(full);
                        free(head);
                        free(tail);
                    }
                }
}

/* Save with 2 ranks, restore into 3: the remainder, once. */
static void resume_other_world(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    const uint64_t N = tds_samples(d);
    uint64_t *pos_of = malloc(N * 8);
    uint8_t *seen = malloc(N);
    CHECK(pos_of && seen);
    for (int oi = 0; oi < 3; oi++)
        for (int trial = 0; trial < 4; trial++) {
            stk_loader_options o;
            base_options(&o, d, (stk_order)oi);
            o.world_size = 2;
            uint64_t per2 = N / 2, nb2 = (per2 + o.batch_size - 1) / o.batch_size;
            uint64_t k = trial == 0 ? 0 : trial == 1 ? nb2 - 1 : rnd() % nb2;
            stk_loader_state st[2];
            for (uint32_t r = 0; r < 2; r++) {
                o.rank = r;
                stk_loader *ld = open_ld(ds, &o);
                uint64_t nk;
                free(take(d, ld, &o, k, &nk));
                CHECK(nk == k);
                stk_loader_save(ld, &st[r]);
                stk_loader_close(ld);
            }
            CHECK(memcmp(&st[0], &st[1], sizeof st[0]) == 0);
            uint64_t P = st[0].position;
            CHECK(P == k * o.batch_size * 2);
            CHECK(st[0].streams == 2); /* a stream per rank; kept by the restore */
            stk__order ord;
            stk__order_init_streams(&ord, o.order, N, o.seed, 0, o.block_samples, o.block_group,
                                    2);
            for (uint64_t p = 0; p < N; p++)
                pos_of[stk__order_at(&ord, stk__stream_place(N, 2, p))] = p;
            memset(seen, 0, N);
            uint64_t total = 0;
            o.world_size = 3;
            uint64_t want = 3 * ((N - P) / 3);
            for (uint32_t r = 0; r < 3; r++) {
                o.rank = r;
                o.threads = 1 + r;
                o.backend = r == 1 ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
                stk_loader *ld = open_ld(ds, &o);
                CHECK_OK(stk_loader_restore(ld, &st[r % 2], &err));
                CHECK(stk_loader_rank_samples(ld) == (N - P) / 3);
                stk_batch *b;
                int rc;
                while ((rc = stk_loader_next(ld, &b, &err)) == 0) {
                    tds_check_batch(d, ld, b, NULL, 0, o.window, FNV0);
                    for (uint32_t j = 0; j < stk_batch_size(b); j++) {
                        uint64_t id = stk_batch_samples(b)[j];
                        CHECK(id < N && !seen[id]);
                        seen[id] = 1;
                        uint64_t p = pos_of[id];
                        if (p < P || p >= P + want) {
                            fprintf(stderr,
                                    "%s order %d: after restoring at %llu into 3 ranks, rank %u "
                                    "got position %llu\n",
                                    tds_kind_name(d->kind), oi, (unsigned long long)P, r,
                                    (unsigned long long)p);
                            exit(1);
                        }
                        CHECK((p - P) % 3 == r);
                        total++;
                    }
                    stk_loader_release(ld, b);
                }
                CHECK(rc == STK_END);
                stk_loader_state s3;
                stk_loader_save(ld, &s3);
                CHECK(s3.position == P + want);
                stk_loader_close(ld);
            }
            CHECK(total == want);
        }
    free(pos_of);
    free(seen);
}

/* A state from the end of the epoch; states that do not fit. */
static void resume_edges(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    stk_loader_options o;
    base_options(&o, d, STK_ORDER_RANDOM);
    stk_loader *ld = open_ld(ds, &o);
    uint64_t n;
    free(take(d, ld, &o, ALL, &n));
    stk_loader_state end;
    stk_loader_save(ld, &end);
    CHECK(end.position == tds_samples(d));
    stk_loader_close(ld);
    ld = open_ld(ds, &o);
    CHECK_OK(stk_loader_restore(ld, &end, &err));
    stk_batch *b;
    CHECK(stk_loader_next(ld, &b, &err) == STK_END);
    CHECK(stk_loader_rank_batches(ld) == 0);
    /* Past the end. */
    stk_loader_state bad = end;
    bad.position = tds_samples(d) + 1;
    CHECK_ERR(stk_loader_restore(ld, &bad, &err), -EINVAL, "position");
    /* A fingerprint from other options: window, order, fields, blocks. */
    uint64_t fps[5] = {end.fingerprint, 0, 0, 0, 0};
    for (int v = 0; v < 4; v++) {
        stk_loader_options o2 = o;
        const char *one[1] = {d->f[0].name};
        if (v == 0) {
            if (d->kind != TDS_WINDOWS) continue;
            o2.window = d->L + 1;
        } else if (v == 1) {
            o2.order = STK_ORDER_BLOCK;
        } else if (v == 2) {
            o2.fields = one;
            o2.nfields = 1;
        } else {
            o2.order = STK_ORDER_BLOCK;
            o2.block_samples = 5;
        }
        stk_loader *l2 = open_ld(ds, &o2);
        stk_loader_state s2;
        stk_loader_save(l2, &s2);
        for (int u = 0; u <= v; u++) CHECK(s2.fingerprint != fps[u]);
        fps[v + 1] = s2.fingerprint;
        CHECK_ERR(stk_loader_restore(l2, &end, &err), -EINVAL, "fingerprint");
        CHECK_ERR(stk_loader_restore(ld, &s2, &err), -EINVAL, "fingerprint");
        stk_loader_close(l2);
    }
    /* The failed restores changed nothing. */
    CHECK(stk_loader_next(ld, &b, &err) == STK_END);
    stk_loader_close(ld);
}

/* set_epoch in the middle, and batches held across it. */
static void epochs(const tds *d, stk_dataset *ds) {
    stk_error err = {0};
    for (int oi = 0; oi < 3; oi++) {
        stk_loader_options o;
        base_options(&o, d, (stk_order)oi);
        o.prefetch = 3;
        uint64_t n0, n1;
        stk_loader *ld = open_ld(ds, &o);
        uint64_t *e0 = take(d, ld, &o, ALL, &n0);
        stk_loader_close(ld);
        o.epoch = 1;
        ld = open_ld(ds, &o);
        uint64_t *e1 = take(d, ld, &o, ALL, &n1);
        stk_loader_close(ld);
        CHECK(n0 == n1);
        if (oi != STK_ORDER_SEQUENTIAL) CHECK(memcmp(e0, e1, n0 * 8) != 0);
        o.epoch = 0;
        for (int trial = 0; trial < 4; trial++) {
            ld = open_ld(ds, &o);
            uint64_t k = rnd() % n0, n;
            free(take(d, ld, &o, k, &n));
            /* Hold one batch across the change of epoch. */
            stk_batch *held = NULL;
            uint64_t held_hash = 0, held_bytes = 0;
            uint8_t *copy = NULL;
            if (trial & 1) {
                CHECK_OK(stk_loader_next(ld, &held, &err));
                held_hash = tds_check_batch(d, ld, held, NULL, 0, o.window, FNV0);
                CHECK(held_hash == e0[k]);
                stk_batch_field bf;
                CHECK(stk_batch_field_get(held, 0, &bf) == 0);
                held_bytes = bf.bytes;
                copy = malloc(held_bytes + 1);
                CHECK(copy != NULL);
                memcpy(copy, bf.data, held_bytes);
            }
            CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
            stk_loader_state st;
            stk_loader_save(ld, &st);
            CHECK(st.epoch == 1 && st.position == 0 && st.seed == o.seed);
            uint64_t *t1 = take(d, ld, &o, ALL, &n);
            CHECK(n == n1 && memcmp(t1, e1, n1 * 8) == 0);
            free(t1);
            if (held) {
                stk_batch_field bf;
                CHECK(stk_batch_field_get(held, 0, &bf) == 0);
                CHECK(bf.bytes == held_bytes && memcmp(copy, bf.data, held_bytes) == 0);
                CHECK(tds_check_batch(d, ld, held, NULL, 0, o.window, FNV0) == held_hash);
            }
            /* And back to epoch 0 half way through epoch 1, still holding. */
            CHECK_OK(stk_loader_set_epoch(ld, 1, &err));
            free(take(d, ld, &o, n1 / 2, &n));
            CHECK_OK(stk_loader_set_epoch(ld, 0, &err));
            uint64_t *t0 = take(d, ld, &o, ALL, &n);
            CHECK(n == n0 && memcmp(t0, e0, n0 * 8) == 0);
            free(t0);
            /* Restore while holding. */
            stk_loader_state mid = {o.seed, 1, 0, st.fingerprint, st.streams};
            mid.position = (n1 / 2) * o.batch_size;
            CHECK_OK(stk_loader_restore(ld, &mid, &err));
            t1 = take(d, ld, &o, ALL, &n);
            check_tail(e1, n1, n1 / 2, t1, n, "restore while holding");
            free(t1);
            if (held) {
                CHECK(tds_check_batch(d, ld, held, NULL, 0, o.window, FNV0) == held_hash);
                stk_loader_release(ld, held);
            }
            free(copy);
            stk_loader_close(ld);
        }
        free(e0);
        free(e1);
    }
}

/* Two validity fields with the same number of valid windows in every
 * record but at other rows: the orders differ, so must the fingerprints. */
static void valid_field_fingerprint(void) {
    stk_error err = {0};
    stk_field f[3] = {
        {.name = "x", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "y1", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}},
        {.name = "y2", .dtype = STK_F32, .ndim = 1, .shape = {STK_RAGGED}},
    };
    const char *dir = test_dir("loader-resume-valid");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, f, 3, NULL, &w, &err));
    float x[10], y1[10], y2[10];
    for (int t = 0; t < 10; t++) x[t] = y1[t] = y2[t] = (float)t;
    y1[5] = NAN;
    y2[6] = NAN;
    for (int r = 0; r < 20; r++) {
        stk_value v[3] = {{x, 10}, {y1, 10}, {y2, 10}};
        CHECK_OK(stk_writer_append(w, v, &err));
    }
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    stk_loader_options o;
    stk_loader_options_init(&o);
    o.window = 1;
    o.valid = STK_VALID_NOT_NAN;
    o.valid_field = "y1";
    o.order = STK_ORDER_SEQUENTIAL;
    o.batch_size = 4;
    o.threads = 1;
    stk_loader *a = open_ld(ds, &o);
    o.valid_field = "y2";
    stk_loader *b = open_ld(ds, &o);
    CHECK(stk_loader_epoch_samples(a) == 180 && stk_loader_epoch_samples(b) == 180);
    stk_loader_state sa, sb;
    stk_loader_save(a, &sa);
    stk_loader_save(b, &sb);
    CHECK(sa.fingerprint != sb.fingerprint);
    CHECK_ERR(stk_loader_restore(b, &sa, &err), -EINVAL, "fingerprint");
    stk_loader_close(a);
    stk_loader_close(b);
    stk_dataset_close(ds);
    test_rmrf(dir);
}

int main(void) {
    test_watchdog(280);
    const tds_kind kinds[3] = {TDS_RECORDS, TDS_WINDOWS, TDS_RAGGED};
    const uint64_t nrec[3] = {200, 150, 180};
    for (int k = 0; k < 3; k++) {
        stk_error err = {0};
        tds d;
        tds_init(&d, kinds[k], nrec[k]);
        char name[64];
        snprintf(name, sizeof name, "loader-resume-%s", tds_kind_name(kinds[k]));
        tds_write(&d, name);
        if (d.kind == TDS_WINDOWS) tds_windows(&d, 5, 3, NULL);
        stk_dataset *ds = NULL;
        CHECK_OK(stk_dataset_open(d.dir, &ds, &err));
        resume_same_world(&d, ds);
        resume_other_world(&d, ds);
        resume_edges(&d, ds);
        epochs(&d, ds);
        stk_dataset_close(ds);
        test_rmrf(d.dir);
        tds_free(&d);
    }
    valid_field_fingerprint();
    return 0;
}
