/* Fuzz target: opening an in-place index (sources/index.c).  The input is
 * the index file; beside it lies a 4096-byte file "a.bin" with a fixed
 * modification time (1 s after the epoch), so that inputs naming it get
 * past the staleness check and exercise the run checks and the reads. */
#include "format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/stk-fuzz-index-%d", (int)getpid());
    mkdir(dir, 0700);
    char p[128];
    snprintf(p, sizeof p, "%s/a.bin", dir);
    int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    uint8_t buf[4096];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)i;
    if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) abort();
    struct timespec ts[2] = {{1, 0}, {1, 0}};
    futimens(fd, ts);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    char p[128];
    snprintf(p, sizeof p, "%s/x.idx", dir);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    stk_dataset *ds = NULL;
    stk_error err;
    if (stk_dataset_open(p, &ds, &err) == 0) {
        /* Every record an open index names can be read (a deflated chunk
         * of garbage is refused as such). */
        uint8_t *buf = malloc(1 << 16);
        for (uint64_t r = 0; r < stk_dataset_num_records(ds) && r < 64; r++) {
            size_t len = 0;
            int rc = stk_dataset_read(ds, r, 0, buf, 1 << 16, &len, 0, &err);
            if (rc && rc != -ENOSPC && rc != STK_ECODEC) __builtin_trap();
        }
        free(buf);
        stk_dataset_close(ds);
    }
    return 0;
}
