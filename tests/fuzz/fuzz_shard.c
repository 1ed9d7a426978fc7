/* Fuzz target: a shard file (header, index, block table, records) behind a
 * manifest that agrees with it.  The harness re-seals the input: it writes
 * the index and block-table checksums and the header checksum that the
 * input's own bytes imply, and the manifest's header checksum and size, so
 * that the fuzzer reaches the checks behind them (layout, bounds, schema)
 * rather than stopping at a checksum.  Then it opens, verifies and reads
 * every record, and runs a loader epoch (the pool's reads, then the
 * mapping's gather).  A header that says version 2 gets a schema of fixed,
 * uncompressed fields (which that version holds) and a manifest of version
 * 2; any other, a ragged and a compressed field. */
#include "format/format.h"
#include "core/hash.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static void write_file(const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void reseal(uint8_t *b, size_t n) {
    if (n < STK__HEADER_USED) return;
    uint64_t io = stk__ld64(b + STK__H_INDEX_OFF), is = stk__ld64(b + STK__H_INDEX_SIZE);
    uint64_t bo = stk__ld64(b + STK__H_BLOCKS_OFF), nb = stk__ld64(b + STK__H_NBLOCKS);
    if (io <= n && is <= n - io) stk__st64(b + STK__H_INDEX_HASH, stk__hash(b + io, is));
    if (nb < n / 8 && bo <= n && nb * 8 <= n - bo)
        stk__st64(b + STK__H_BLOCKS_HASH, stk__hash(b + bo, nb * 8));
    stk__st64(b + STK__H_HEADER_HASH, stk__hash(b, STK__H_HEADER_HASH));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-shard-%ld", (long)getpid());
        mkdir(dir, 0755);
    }
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    reseal(b, size);
    write_file("shard-000000.stk", b, size);
    uint64_t nrec = size >= 32 ? stk__ld64(b + STK__H_NRECORDS) % 1000000 : 0;
    uint64_t hh = size >= STK__H_HEADER_HASH + 8 ? stk__ld64(b + STK__H_HEADER_HASH) : 0;
    /* The manifest takes the header's alignment and block size when they
     * are valid, so that those checks pass and deeper ones run. */
    uint32_t bs = size >= 88 ? stk__ld32(b + STK__H_BLOCK_SIZE) : 4096;
    uint32_t al = size >= 88 ? stk__ld32(b + STK__H_ALIGN) : 64;
    if (!stk__is_pow2(bs) || bs < 4096 || bs > (16u << 20)) bs = 4096;
    if (!stk__is_pow2(al) || al > 4096) al = 64;
    bool v2 = size >= 12 && stk__ld32(b + STK__H_VERSION) == 2;
    free(b);
    const char *fields =
        v2 ? "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4], \"codec\": \"none\"}, "
             "{\"name\": \"z\", \"dtype\": \"u8\", \"shape\": [3, 2], \"codec\": \"none\"}"
           : "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [-1, 4], \"codec\": \"none\"}, "
             "{\"name\": \"z\", \"dtype\": \"u8\", \"shape\": [-1], \"codec\": \"zstd\"}";
    char m[1024];
    int len = snprintf(m, sizeof m,
                       "{\"format\": \"stoker\", \"kind\": \"dataset\", \"version\": %d, "
                       "\"records\": %llu, \"align\": %u, \"block_size\": %u, \"fields\": ["
                       "%s], \"shards\": [{\"file\": \"shard-000000.stk\", "
                       "\"records\": %llu, \"bytes\": %zu, \"header_xxh3\": \"%016llx\"}]}",
                       v2 ? 2 : 1, (unsigned long long)nrec, al, bs, fields,
                       (unsigned long long)nrec, size, (unsigned long long)hh);
    write_file("manifest.json", m, (size_t)len);
    stk_dataset *ds = NULL;
    stk_error err;
    if (stk_dataset_open(dir, &ds, &err) == 0) {
        stk_dataset_verify(ds, NULL, NULL, &err);
        uint8_t buf[1 << 16];
        for (uint64_t r = 0; r < stk_dataset_num_records(ds) && r < 64; r++)
            for (size_t f = 0; f < 2; f++) {
                size_t got;
                stk_dataset_read(ds, r, f, buf, sizeof buf, &got, STK_READ_VERIFY, &err);
            }
        stk_loader_options o;
        stk_loader_options_init(&o);
        o.batch_size = 4;
        o.threads = 1;
        o.backend = STK_BACKEND_POOL;
        o.memory_budget = 64 << 20;
        stk_loader *ld = NULL;
        for (int pass = 0; pass < 2; pass++) {
            o.backend = pass ? STK_BACKEND_MMAP : STK_BACKEND_POOL;
            o.order = pass ? STK_ORDER_RANDOM : STK_ORDER_SEQUENTIAL;
            if (stk_loader_open(ds, &o, &ld, &err) == 0) {
                stk_batch *bt;
                for (int k = 0; k < 16 && stk_loader_next(ld, &bt, &err) == 0; k++)
                    stk_loader_release(ld, bt);
                stk_loader_close(ld);
            }
        }
        stk_dataset_close(ds);
    }
    return 0;
}
