/*
 * h5.h: libhdf5, loaded when an HDF5 file is first indexed or packed, not
 * linked.  A wheel cannot carry the system's libhdf5, and should not carry
 * its own beside h5py's: the library of h5py, when it is installed, is
 * found and used (whatever its version, 1.10 to 2.x), else the system's.
 *
 * Files that use libhdf5 include this instead of <hdf5.h> (no HDF5 headers
 * are needed to build): each H5* function and global type used names a
 * member of stk__h5, filled by stk__h5_load.  Only calls whose form is the same from
 * 1.10 to 2.x are used; the one that differs (visiting objects) is
 * stk__h5_only_dataset.
 */
#ifndef STK_SOURCES_H5_H
#define STK_SOURCES_H5_H

#include <stdint.h>

#include "../core/internal.h"

/* What of HDF5's C interface stoker uses, declared here rather than taken
 * from <hdf5.h>, so that stoker builds with HDF5 support wherever it
 * builds: the sizes, values and layouts below are those of every release
 * from 1.10 to 2.x (hid_t has been 64 bits since 1.10). */
typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef unsigned long long hsize_t;
typedef uint64_t haddr_t;
typedef int H5Z_filter_t;
typedef enum { H5D_COMPACT = 0, H5D_CONTIGUOUS = 1, H5D_CHUNKED = 2 } H5D_layout_t;
typedef enum { H5T_INTEGER = 0, H5T_FLOAT = 1, H5T_ENUM = 8 } H5T_class_t;
typedef enum { H5T_ORDER_LE = 0, H5T_ORDER_BE = 1 } H5T_order_t;
typedef enum { H5T_SGN_NONE = 0, H5T_SGN_2 = 1 } H5T_sign_t;
typedef enum { H5S_SELECT_SET = 0 } H5S_seloper_t;
typedef enum { H5E_WALK_UPWARD = 0, H5E_WALK_DOWNWARD = 1 } H5E_direction_t;
typedef enum { H5O_TYPE_GROUP = 0, H5O_TYPE_DATASET = 1 } H5O_type_t;
typedef enum { H5_INDEX_NAME = 0 } H5_index_t;
typedef enum { H5_ITER_INC = 0 } H5_iter_order_t;
typedef struct H5E_error2_t {
    hid_t cls_id, maj_num, min_num;
    unsigned line;
    const char *func_name, *file_name, *desc;
} H5E_error2_t;
typedef herr_t (*H5E_walk2_t)(unsigned n, const H5E_error2_t *err, void *data);
typedef herr_t (*H5E_auto2_t)(hid_t stack, void *data);
#define H5I_INVALID_HID ((hid_t)-1)
#define H5P_DEFAULT ((hid_t)0)
#define H5E_DEFAULT ((hid_t)0)
#define H5F_ACC_RDONLY 0x0000u
#define H5O_INFO_BASIC 0x0001u
#define H5Z_FILTER_DEFLATE 1
#define H5Z_FILTER_SHUFFLE 2
#define H5Z_FILTER_FLETCHER32 3
#define HADDR_UNDEF ((haddr_t)(int64_t)(-1))

typedef struct stk__h5_api {
    herr_t (*open)(void);
    herr_t (*get_libversion)(unsigned *maj, unsigned *min, unsigned *rel);
    hid_t (*Fopen)(const char *name, unsigned flags, hid_t fapl);
    herr_t (*Fclose)(hid_t);
    hid_t (*Dopen2)(hid_t loc, const char *name, hid_t dapl);
    herr_t (*Dclose)(hid_t);
    hid_t (*Dget_space)(hid_t);
    hid_t (*Dget_type)(hid_t);
    hid_t (*Dget_create_plist)(hid_t);
    haddr_t (*Dget_offset)(hid_t);
    herr_t (*Dread)(hid_t d, hid_t mt, hid_t ms, hid_t fs, hid_t xfer, void *buf);
    herr_t (*Dget_num_chunks)(hid_t d, hid_t fs, hsize_t *n);
    herr_t (*Dget_chunk_info)(hid_t d, hid_t fs, hsize_t i, hsize_t *off, unsigned *mask,
                              haddr_t *addr, hsize_t *size);
    herr_t (*Dget_chunk_storage_size)(hid_t d, const hsize_t *off, hsize_t *size);
    herr_t (*Eset_auto2)(hid_t stack, H5E_auto2_t func, void *data);
    herr_t (*Eclear2)(hid_t stack);
    herr_t (*Ewalk2)(hid_t stack, H5E_direction_t dir, H5E_walk2_t func, void *data);
    htri_t (*Lexists)(hid_t loc, const char *name, hid_t lapl);
    herr_t (*Pclose)(hid_t);
    int (*Pget_nfilters)(hid_t);
    H5Z_filter_t (*Pget_filter2)(hid_t pl, unsigned idx, unsigned *flags, size_t *nelem,
                                 unsigned values[], size_t namelen, char name[],
                                 unsigned *config);
    H5D_layout_t (*Pget_layout)(hid_t);
    int (*Pget_chunk)(hid_t pl, int max, hsize_t dims[]);
    herr_t (*Sclose)(hid_t);
    hid_t (*Scopy)(hid_t);
    hid_t (*Screate_simple)(int rank, const hsize_t dims[], const hsize_t max[]);
    int (*Sget_simple_extent_ndims)(hid_t);
    int (*Sget_simple_extent_dims)(hid_t s, hsize_t dims[], hsize_t max[]);
    herr_t (*Sselect_hyperslab)(hid_t s, H5S_seloper_t op, const hsize_t start[],
                                const hsize_t stride[], const hsize_t count[],
                                const hsize_t block[]);
    herr_t (*Tclose)(hid_t);
    hid_t (*Tcopy)(hid_t);
    htri_t (*Tequal)(hid_t, hid_t);
    H5T_class_t (*Tget_class)(hid_t);
    H5T_order_t (*Tget_order)(hid_t);
    herr_t (*Tset_order)(hid_t, H5T_order_t);
    H5T_sign_t (*Tget_sign)(hid_t);
    size_t (*Tget_size)(hid_t);
    hid_t (*Tget_super)(hid_t);
    herr_t (*Tget_fields)(hid_t t, size_t *spos, size_t *epos, size_t *esize, size_t *mpos,
                          size_t *msize);
    htri_t (*Zfilter_avail)(H5Z_filter_t);
    /* The predefined types (after H5open). */
    hid_t ieee_f32le, ieee_f64le, std_i8le, std_i16le, std_i32le, std_i64le, std_u8le,
        std_u16le, std_u32le, std_u64le;
    unsigned major, minor, release; /* the version loaded */
} stk__h5_api;

extern stk__h5_api stk__h5;

/* Loads libhdf5 once (thread-safe): $STOKER_LIBHDF5 when set, else the
 * library of h5py's wheel found beside this code (site-packages/h5py.libs,
 * seen from site-packages/stoker or from a virtual environment's bin),
 * else the system's (libhdf5.so.* and Debian's libhdf5_serial.so.*).  0, or STK_EUNSUPPORTED saying what to install;
 * `what` (a file) begins the message. */
int stk__h5_load(const char *what, stk_error *err);

/* The path of file f's only dataset (in *name, from stk__malloc) and how
 * many it holds (*count; *name is set only when there is one at least:
 * the first by name).  0, or -1 where libhdf5 cannot walk the file. */
int stk__h5_only_dataset(hid_t f, char **name, int *count);

#define H5T_IEEE_F32LE (stk__h5.ieee_f32le)
#define H5T_IEEE_F64LE (stk__h5.ieee_f64le)
#define H5T_STD_I8LE (stk__h5.std_i8le)
#define H5T_STD_I16LE (stk__h5.std_i16le)
#define H5T_STD_I32LE (stk__h5.std_i32le)
#define H5T_STD_I64LE (stk__h5.std_i64le)
#define H5T_STD_U8LE (stk__h5.std_u8le)
#define H5T_STD_U16LE (stk__h5.std_u16le)
#define H5T_STD_U32LE (stk__h5.std_u32le)
#define H5T_STD_U64LE (stk__h5.std_u64le)

#define H5get_libversion (stk__h5.get_libversion)
#define H5Fopen (stk__h5.Fopen)
#define H5Fclose (stk__h5.Fclose)
#define H5Dopen2 (stk__h5.Dopen2)
#define H5Dclose (stk__h5.Dclose)
#define H5Dget_space (stk__h5.Dget_space)
#define H5Dget_type (stk__h5.Dget_type)
#define H5Dget_create_plist (stk__h5.Dget_create_plist)
#define H5Dget_offset (stk__h5.Dget_offset)
#define H5Dread (stk__h5.Dread)
#define H5Dget_num_chunks (stk__h5.Dget_num_chunks)
#define H5Dget_chunk_info (stk__h5.Dget_chunk_info)
#define H5Dget_chunk_storage_size (stk__h5.Dget_chunk_storage_size)
#define H5Eset_auto2 (stk__h5.Eset_auto2)
#define H5Eclear2 (stk__h5.Eclear2)
#define H5Ewalk2 (stk__h5.Ewalk2)
#define H5Lexists (stk__h5.Lexists)
#define H5Pclose (stk__h5.Pclose)
#define H5Pget_nfilters (stk__h5.Pget_nfilters)
#define H5Pget_filter2 (stk__h5.Pget_filter2)
#define H5Pget_layout (stk__h5.Pget_layout)
#define H5Pget_chunk (stk__h5.Pget_chunk)
#define H5Sclose (stk__h5.Sclose)
#define H5Scopy (stk__h5.Scopy)
#define H5Screate_simple (stk__h5.Screate_simple)
#define H5Sget_simple_extent_ndims (stk__h5.Sget_simple_extent_ndims)
#define H5Sget_simple_extent_dims (stk__h5.Sget_simple_extent_dims)
#define H5Sselect_hyperslab (stk__h5.Sselect_hyperslab)
#define H5Tclose (stk__h5.Tclose)
#define H5Tcopy (stk__h5.Tcopy)
#define H5Tequal (stk__h5.Tequal)
#define H5Tget_class (stk__h5.Tget_class)
#define H5Tget_order (stk__h5.Tget_order)
#define H5Tset_order (stk__h5.Tset_order)
#define H5Tget_sign (stk__h5.Tget_sign)
#define H5Tget_size (stk__h5.Tget_size)
#define H5Tget_super (stk__h5.Tget_super)
#define H5Tget_fields (stk__h5.Tget_fields)
#define H5Zfilter_avail (stk__h5.Zfilter_avail)

#endif
