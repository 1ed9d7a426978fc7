/* Fuzz target: indexing an HDF5 file in place (sources/hdf5.c through
 * stk_index_build) and reading the rows of the index.  The input is the
 * HDF5 file.  libhdf5 parses the superblock, the object headers and the
 * chunk B-tree; what is fuzzed here is stoker's use of what it returns (the
 * layout, the filters, each chunk's address, size and coordinates) and the
 * bounds checks behind it.  Each row stoker reads is compared with the row
 * libhdf5 reads: an index that delivers other bytes than libhdf5 for a row
 * (a chunk libhdf5 would not find, read as the fill value) is a finding. */
#include "format/format.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef STK_HAVE_HDF5
#include <hdf5.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* stoker runs libhdf5 in a child process (sources/hdf5.c), out of the
 * fuzzer's sight: under libFuzzer (scripts/fuzz.sh) it runs in process,
 * so that libhdf5's own paths count as coverage and its crashes are seen;
 * the replay by ctest keeps the child, as users have it, and so replays
 * the files that crash libhdf5 as refusals. */
extern bool stk__hdf5_isolate;

#define ROW_MAX (1u << 16)

static char dir[64];

#ifdef STK_HAVE_HDF5
/* Row r of the file's only dataset as libhdf5 reads it, in the file's own
 * type (no conversion); 0 when read, -1 when libhdf5 refuses. */
static int h5_row(const char *path, uint64_t r, uint8_t *out, size_t len) {
    int rc = -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    hid_t d = H5I_INVALID_HID, sp = H5I_INVALID_HID, ms = H5I_INVALID_HID,
          t = H5I_INVALID_HID;
    char name[256] = "";
    /* The index names the dataset; the file's only one here, found again
     * by the same walk (H5Literate over the root group suffices for the
     * seeds; deeper datasets are skipped). */
    hsize_t idx = 0;
    ssize_t nl = H5Lget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, idx, name,
                                    sizeof name, H5P_DEFAULT);
    if (nl <= 0 || (size_t)nl >= sizeof name) goto out;
    d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) goto out;
    sp = H5Dget_space(d);
    t = H5Dget_type(d);
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd < 1 || nd > STK_MAX_DIMS) goto out;
    hsize_t dims[STK_MAX_DIMS], start[STK_MAX_DIMS] = {0}, count[STK_MAX_DIMS];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    uint64_t want = H5Tget_size(t);
    for (int k = 0; k < nd; k++) count[k] = dims[k];
    for (int k = 1; k < nd; k++) want *= dims[k];
    if (want != len || r >= dims[0]) goto out;
    start[0] = r;
    count[0] = 1;
    if (H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL) < 0) goto out;
    ms = H5Screate_simple(nd, count, NULL);
    if (ms < 0) goto out;
    if (H5Dread(d, t, ms, sp, H5P_DEFAULT, out) >= 0) rc = 0;
out:
    if (ms >= 0) H5Sclose(ms);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    return rc;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/stk-fuzz-hdf5-%d", (int)getpid());
        mkdir(dir, 0700);
#ifdef STK_FUZZ_IN_PROCESS
        stk__hdf5_isolate = false;
#endif
#ifdef STK_HAVE_HDF5
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
#endif
    }
    char h5[128], idx[128];
    snprintf(h5, sizeof h5, "%s/x.h5", dir);
    snprintf(idx, sizeof idx, "%s/x.idx", dir);
    FILE *f = fopen(h5, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    stk_index_options o;
    stk_index_options_init(&o);
    o.source = STK_SOURCE_HDF5;
    const char *paths[] = {h5};
    stk_error err;
    if (stk_index_build(paths, 1, idx, &o, NULL, &err) != 0) return 0;
    stk_dataset *ds = NULL;
    if (stk_dataset_open(idx, &ds, &err) != 0) return 0;
    uint8_t *buf = malloc(ROW_MAX), *ref = malloc(ROW_MAX);
    if (!buf || !ref) abort();
    for (uint64_t r = 0; r < stk_dataset_num_records(ds) && r < 16; r++) {
        size_t len = 0;
        int rc = stk_dataset_read(ds, r, 0, buf, ROW_MAX, &len, 0, &err);
        /* A chunk whose bytes do not decode is refused as such. */
        if (rc && rc != -ENOSPC && rc != STK_ECODEC && rc != STK_ECHECKSUM &&
            rc != STK_ECORRUPT)
            __builtin_trap();
#ifdef STK_HAVE_HDF5
        if (rc == 0 && h5_row(h5, r, ref, len) == 0 && memcmp(buf, ref, len) != 0)
            __builtin_trap();
#endif
    }
    free(buf);
    free(ref);
    stk_dataset_close(ds);
    return 0;
}
