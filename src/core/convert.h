/*
 * convert.h: pure conversions of users' file encodings (convert.c): PCM and
 * float narrowing to a field's dtype, and undoing HDF5's chunk filters.
 * Shared by format (stk_dataset_read), sources (indexing) and the pipeline
 * (the workers), so it sits in the bottom layer.
 */
#ifndef STK_CONVERT_H
#define STK_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Filters of HDF5 chunks that the loader undoes itself, as bits. */
enum {
    STK__CHUNKS_NONE = 0,
    STK__CHUNK_DEFLATE = 1,  /* gzip (zlib) */
    STK__CHUNK_SHUFFLE = 2,  /* bytes grouped by their place in the element */
    STK__CHUNK_FLETCHER = 4  /* a Fletcher-32 checksum appended */
};
#define STK__CHUNKS_DEFLATE STK__CHUNK_DEFLATE
/* Inflates a zlib stream of `len` bytes into exactly `raw` bytes at dst;
 * false when it is damaged or of another size. */
bool stk__inflate(uint8_t *dst, uint64_t raw, const uint8_t *src, uint64_t len);
/* Undoes the filters `applied` (STK__CHUNK_* bits) of a chunk: checks and
 * strips its Fletcher-32 checksum, inflates it, puts the bytes of its
 * `elem`-byte elements back in order, giving exactly `raw` bytes.  `a` and
 * `b` are scratch buffers of `raw` bytes.  Returns the raw bytes (src
 * itself, a or b), or NULL with *why saying what failed. */
const uint8_t *stk__chunk_decode(unsigned applied, size_t elem, const uint8_t *src,
                                 uint64_t len, uint64_t raw, uint8_t *a, uint8_t *b,
                                 const char **why);
/* The "a+b+c" name of a set of chunk filters, in the order HDF5 applied
 * them, and back (-1: a name not known). */
const char *stk__chunks_name(int chunks);
int stk__chunks_parse(const char *name);

/* Element conversions from a source file's encoding to a field's dtype,
 * done by the worker threads (core/convert.c). */
enum {
    STK__CONV_NONE = 0,
    STK__CONV_I16_F32, /* 16-bit PCM -> float32 in [-1, 1) */
    STK__CONV_I24_F32, /* 24-bit PCM -> float32 in [-1, 1) */
    STK__CONV_I24_I32, /* 24-bit PCM -> int32, scaled to the full range */
    STK__CONV_U8_F32,  /* 8-bit unsigned PCM -> float32 in [-1, 1) */
    STK__CONV_I32_F32, /* 32-bit PCM -> float32 in [-1, 1) */
    STK__CONV_F64_F32  /* 64-bit float -> float32 (narrows: never in place) */
};
/* Bytes per element a conversion reads; 0 for an unknown one. */
size_t stk__conv_in_size(int conv);
const char *stk__conv_name(int conv);
int stk__conv_parse(const char *name);
/* Converts n elements from src to dst.  dst may overlap src when the
 * source bytes sit at the end of dst's region (dst + n*out - n*in == src):
 * the conversion runs forward and never overwrites bytes it has yet to read. */
void stk__conv_run(int conv, uint8_t *dst, const uint8_t *src, uint64_t n);

#endif
