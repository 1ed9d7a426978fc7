/*
 * h5.c: loading libhdf5 at run time (see h5.h for why), and the one call
 * whose form differs between its versions.
 */
#define _GNU_SOURCE
#include "h5.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

stk__h5_api stk__h5;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_msg[STK_ERROR_MAX];
/* H5Ovisit3 (1.12 and newer) or H5Ovisit2 (1.10): the object's type sits
 * after a token of 16 bytes in the one, an address of 8 in the other. */
static herr_t (*visit3)(hid_t, H5_index_t, H5_iter_order_t, void *, void *, unsigned);
static herr_t (*visit2)(hid_t, H5_index_t, H5_iter_order_t, void *, void *, unsigned);

#define FN(field, name) {name, offsetof(stk__h5_api, field)}
static const stk__dl_sym fns[] = {
    FN(open, "H5open"),
    FN(get_libversion, "H5get_libversion"),
    FN(Fopen, "H5Fopen"),
    FN(Fclose, "H5Fclose"),
    FN(Dopen2, "H5Dopen2"),
    FN(Dclose, "H5Dclose"),
    FN(Dget_space, "H5Dget_space"),
    FN(Dget_type, "H5Dget_type"),
    FN(Dget_create_plist, "H5Dget_create_plist"),
    FN(Dget_offset, "H5Dget_offset"),
    FN(Dread, "H5Dread"),
    FN(Dget_num_chunks, "H5Dget_num_chunks"),
    FN(Dget_chunk_info, "H5Dget_chunk_info"),
    FN(Dget_chunk_storage_size, "H5Dget_chunk_storage_size"),
    FN(Eset_auto2, "H5Eset_auto2"),
    FN(Eclear2, "H5Eclear2"),
    FN(Ewalk2, "H5Ewalk2"),
    FN(Lexists, "H5Lexists"),
    FN(Pclose, "H5Pclose"),
    FN(Pget_nfilters, "H5Pget_nfilters"),
    FN(Pget_filter2, "H5Pget_filter2"),
    FN(Pget_layout, "H5Pget_layout"),
    FN(Pget_chunk, "H5Pget_chunk"),
    FN(Sclose, "H5Sclose"),
    FN(Scopy, "H5Scopy"),
    FN(Screate_simple, "H5Screate_simple"),
    FN(Sget_simple_extent_ndims, "H5Sget_simple_extent_ndims"),
    FN(Sget_simple_extent_dims, "H5Sget_simple_extent_dims"),
    FN(Sselect_hyperslab, "H5Sselect_hyperslab"),
    FN(Tclose, "H5Tclose"),
    FN(Tcopy, "H5Tcopy"),
    FN(Tequal, "H5Tequal"),
    FN(Tget_class, "H5Tget_class"),
    FN(Tget_order, "H5Tget_order"),
    FN(Tset_order, "H5Tset_order"),
    FN(Tget_sign, "H5Tget_sign"),
    FN(Tget_size, "H5Tget_size"),
    FN(Tget_super, "H5Tget_super"),
    FN(Tget_fields, "H5Tget_fields"),
    FN(Zfilter_avail, "H5Zfilter_avail"),
};
#undef FN

/* The global type ids, valid once H5open has run. */
#define TY(field, name) {name, offsetof(stk__h5_api, field)}
static const stk__dl_sym types[] = {
    TY(ieee_f32le, "H5T_IEEE_F32LE_g"), TY(ieee_f64le, "H5T_IEEE_F64LE_g"),
    TY(std_i8le, "H5T_STD_I8LE_g"),     TY(std_i16le, "H5T_STD_I16LE_g"),
    TY(std_i32le, "H5T_STD_I32LE_g"),   TY(std_i64le, "H5T_STD_I64LE_g"),
    TY(std_u8le, "H5T_STD_U8LE_g"),     TY(std_u16le, "H5T_STD_U16LE_g"),
    TY(std_u32le, "H5T_STD_U32LE_g"),   TY(std_u64le, "H5T_STD_U64LE_g"),
};
#undef TY

/* h5py's library in `dir` (h5py.libs of a wheel: libhdf5-HASH.so.N), or
 * NULL; from malloc. */
static char *in_h5py_libs(const char *pattern) {
    glob_t g;
    char *found = NULL;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !found; i++)
            if (!strstr(g.gl_pathv[i], "libhdf5_hl")) found = strdup(g.gl_pathv[i]);
        globfree(&g);
    }
    return found;
}

/* Where h5py may be beside this code: a module in site-packages/stoker
 * (../h5py.libs), or the stoker command of a virtual environment's bin
 * (../lib/python3.* /site-packages/h5py.libs). */
static char *beside_us(void) {
    Dl_info info;
    if (!dladdr((void *)&stk__h5_load, &info) || !info.dli_fname) return NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (!slash) return NULL;
    *slash = '\0';
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/../h5py.libs/libhdf5-*.so*", dir);
    char *p = in_h5py_libs(pattern);
    if (!p) {
        snprintf(pattern, sizeof pattern, "%s/../lib/python3*/site-packages/h5py.libs/libhdf5-*.so*",
                 dir);
        p = in_h5py_libs(pattern);
    }
    return p;
}

static void *try_open(const char *name, char *tried, size_t cap) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    size_t n = strlen(tried);
    if (!lib && n + 4 < cap) snprintf(tried + n, cap - n, "%s%s", n ? ", " : "", name);
    return lib;
}

static void load(void) {
    char tried[1024] = "";
    void *lib = NULL;
    const char *env = getenv("STOKER_LIBHDF5");
    if (env && *env) {
        lib = try_open(env, tried, sizeof tried);
    } else {
        char *h5py = beside_us();
        if (h5py) lib = try_open(h5py, tried, sizeof tried);
        free(h5py);
        static const char *const sys[] = {
            "libhdf5.so.320",        "libhdf5.so.310",        "libhdf5.so.300",
            "libhdf5.so.200",        "libhdf5.so.103",        "libhdf5_serial.so.320",
            "libhdf5_serial.so.310", "libhdf5_serial.so.200", "libhdf5_serial.so.103",
            "libhdf5.so",            "libhdf5_serial.so"};
        for (size_t i = 0; !lib && i < sizeof sys / sizeof sys[0]; i++) lib = dlopen(sys[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            size_t n = strlen(tried);
            snprintf(tried + n, sizeof tried - n, "%slibhdf5.so.*, libhdf5_serial.so.*",
                     n ? ", " : "");
        }
    }
    if (!lib) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg,
                 "reading HDF5 needs libhdf5, which cannot be loaded (tried %s): pip install "
                 "h5py (stoker then uses the libhdf5 it carries), or install the system's "
                 "(Debian, Ubuntu: apt-get install libhdf5-103-1 or libhdf5-310; RHEL, "
                 "Fedora: dnf install hdf5), or set STOKER_LIBHDF5 to its path",
                 tried);
        return;
    }
    const char *lacks = stk__dl_fill(lib, fns, sizeof fns / sizeof fns[0], &stk__h5, 0);
    if (lacks) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg,
                 "the libhdf5 found lacks %s: stoker needs HDF5 1.10.5 or newer", lacks);
        return;
    }
    *(void **)&visit3 = dlsym(lib, "H5Ovisit3");
    *(void **)&visit2 = dlsym(lib, "H5Ovisit2");
    if (stk__h5.open() < 0 || (!visit3 && !visit2)) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg, "the libhdf5 found cannot start (H5open failed)");
        return;
    }
    lacks = stk__dl_fill(lib, types, sizeof types / sizeof types[0], &stk__h5, sizeof(hid_t));
    if (lacks) {
        load_rc = STK_EUNSUPPORTED;
        snprintf(load_msg, sizeof load_msg, "the libhdf5 found lacks %s", lacks);
        return;
    }
    stk__h5.get_libversion(&stk__h5.major, &stk__h5.minor, &stk__h5.release);
    /* Errors are read from the stack where wanted, never printed. */
    stk__h5.Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

int stk__h5_load(const char *what, stk_error *err) {
    pthread_once(&once, load);
    if (load_rc) return stk__err(err, load_rc, "%s: %s", what ? what : "libhdf5", load_msg);
    return 0;
}

/* ---- the one dataset of a file ---- */

typedef struct finder {
    char *name;
    int count;
} finder;

/* The start of H5O_info1_t (1.10's H5O_info_t) and of H5O_info2_t. */
typedef struct info1 {
    unsigned long fileno;
    haddr_t addr;
    H5O_type_t type;
} info1;
typedef struct info2 {
    unsigned long fileno;
    uint8_t token[16];
    H5O_type_t type;
} info2;

static herr_t found(finder *f, const char *name, H5O_type_t type) {
    if (type == H5O_TYPE_DATASET && f->count++ == 0) f->name = stk__strdup(name);
    return 0;
}

static herr_t visit_1(hid_t obj, const char *name, const info1 *info, void *arg) {
    (void)obj;
    return found(arg, name, info->type);
}

static herr_t visit_2(hid_t obj, const char *name, const info2 *info, void *arg) {
    (void)obj;
    return found(arg, name, info->type);
}

int stk__h5_only_dataset(hid_t f, char **name, int *count) {
    finder fd = {NULL, 0};
    herr_t rc = visit3 ? visit3(f, H5_INDEX_NAME, H5_ITER_INC, (void *)visit_2, &fd, H5O_INFO_BASIC)
                       : visit2(f, H5_INDEX_NAME, H5_ITER_INC, (void *)visit_1, &fd, H5O_INFO_BASIC);
    *name = fd.name;
    *count = fd.count;
    return rc < 0 ? -1 : 0;
}
