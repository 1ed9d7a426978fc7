/*
 * arrow.h: what the two halves of packing an Arrow stream share: the
 * columns and fields planned from its schema (arrow.c) and the rows copied
 * and grouped from its batches (arrow_rows.c).
 */
#ifndef STK_ARROW_H
#define STK_ARROW_H

#include "../format/format.h"

/* Column kinds.  Strings and binaries (K_STR: 32-bit offsets, K_LSTR:
 * 64-bit, K_VSTR: views, K_FBIN: fixed-size binaries) are a group key, or a
 * ragged bytes field of one string a row; list views (K_LVIEW, K_LLVIEW)
 * are lists whose rows are (offset, size) pairs. */
enum { K_PRIM, K_BOOL, K_FIXED, K_LIST, K_LLIST, K_LVIEW, K_LLVIEW, K_STR, K_LSTR, K_VSTR,
       K_FBIN };

typedef struct col {
    const char *name; /* points into the schema, valid while it lives */
    const char *format;
    int kind;        /* of the values (a dictionary's values, for dict) */
    stk_dtype dtype; /* element type (of the child for lists) */
    size_t isz;
    int64_t width;   /* fixed-size list length (fixed-size binary: bytes); 1 otherwise */
    /* A list (or fixed-size list) of fixed-size lists: the inner lengths,
     * outermost first (ninner of them), and their product (1 without). */
    int ninner;
    int64_t inner[STK_MAX_DIMS];
    int64_t inner_n;
    char type[STK_TYPE_MAX]; /* the values' logical type (stk_field.type), or "" */
    bool is_float;
    /* Dictionary-encoded: the rows are indices (ixsz bytes, signed unless
     * ixunsigned) into the batch's dictionary array, which holds the
     * values. */
    bool dict, ixunsigned;
    size_t ixsz;
} col;

static inline bool is_list(int k) { return k == K_LIST || k == K_LLIST || k == K_LVIEW || k == K_LLVIEW; }
static inline bool is_str(int k) { return k == K_STR || k == K_LSTR || k == K_VSTR || k == K_FBIN; }

typedef struct afield {
    const char *name;
    int *cols;
    size_t ncols;
    stk_codec codec;
    int level;
    int kind;         /* of its columns */
    stk_dtype dtype;
    const char *type;   /* logical type (its first column's), or NULL */
    uint64_t row_bytes; /* per row of the stream (strings: 0, each its own) */
    bool is_static;     /* group mode: one value per record */
    bool named_static;  /* listed in the options' statics */
    /* group mode: the field's rows, in stream order */
    uint8_t *data;
    uint64_t len, cap;
} afield;

typedef struct ctx {
    struct ArrowSchema schema;
    col *cols;
    int ncols;
    afield *f;
    size_t nf;
    int group_col, order_col;
    /* group mode accumulators */
    uint64_t nrows;
    int64_t *key;     /* integer keys, or string ids */
    int64_t *ord_i;
    double *ord_d;
    uint64_t rows_cap;
    /* string keys: an arena and an open-addressing table of (offset, len) */
    char *arena;
    uint64_t arena_len, arena_cap;
    uint64_t *str_off, *str_len;
    int64_t nstr, str_cap;
    int64_t *table;
    uint64_t table_cap;
} ctx;

/* Checks batch number `index` (counting from 0; its rows start at stream
 * row `base`) against the planned columns before any row of it is read:
 * -EINVAL naming `path`, the batch and the column where it does not fit
 * (arrow_check.c). */
int stk__arrow_check_batch(const ctx *c, const struct ArrowArray *batch, uint64_t index,
                           uint64_t base, const char *path, stk_error *err);
/* Grows *p (capacity *cap) to hold `need` bytes. */
int stk__arrow_grow_bytes(uint8_t **p, uint64_t *cap, uint64_t need);
/* Row r of field f from a batch into *dst (grown by `grow`), counting *rows. */
int stk__arrow_field_row(ctx *c, afield *f, struct ArrowArray *batch, int64_t r, uint64_t grow,
                         uint8_t **dst, uint64_t *rows, stk_error *err);
/* Group mode: a batch's rows (starting at stream row `base`) gathered. */
int stk__arrow_accumulate(ctx *c, struct ArrowArray *batch, uint64_t base, stk_error *err);
/* Group mode: the rows' order by (key, order column); NULL without memory. */
uint64_t *stk__arrow_sort_rows(ctx *c);
/* Group mode: which fields are static (constant within every group). */
int stk__arrow_find_statics(ctx *c, const stk_arrow_options *o, const uint64_t *idx,
                            stk_error *err);
/* Group mode: the order column's step, gaps and repeats (stoker.h). */
void stk__arrow_order_report(const ctx *c, const uint64_t *idx, stk_arrow_report *r);
/* Group mode: one record per group, in key order. */
int stk__arrow_write_groups(ctx *c, stk_writer *w, const uint64_t *idx, uint64_t skip,
                            uint64_t *records, stk_error *err);

#endif
