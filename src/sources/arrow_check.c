/*
 * arrow_check.c: every batch an Arrow stream gives is checked against the
 * columns planned from the stream's schema before any of its rows is read.
 *
 * The C data interface hands over arrays without their types: a batch is
 * read by the schema the stream gave first.  A producer that gives a batch
 * of another schema (pyarrow's RecordBatchReader.from_batches does not
 * check its batches) or a malformed one would otherwise be read as garbage,
 * or read out of bounds.  What the interface carries is checked here: the
 * number of columns, each array's buffers and children for its format, the
 * lengths of children against their parents, offsets (monotonic, within
 * the child for lists, within the data buffer for string views, whose
 * buffer sizes are given), and a validity bitmap wherever nulls are
 * counted.  Two arrays of one layout but another type (int32 where int64
 * was announced) look alike here; stoker.write checks a pyarrow reader's
 * batch types before they reach the stream.
 */
#define _GNU_SOURCE
#include "arrow.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What is wrong, written by the checks and put into the message by
 * stk__arrow_check_batch. */
typedef struct why {
    char text[320];
} why;

static int fail(why *w, const char *fmt, ...) STK__PRINTF(2, 3);
static int fail(why *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->text, sizeof w->text, fmt, ap);
    va_end(ap);
    return -1;
}

/* The parts every array has: sane length and offset, `nbuf` buffers (at
 * least `nbuf` where `at_least`), `nchild` children, and a validity bitmap
 * where nulls are counted.  `what` names the array in messages. */
static int check_shape(const struct ArrowArray *a, int64_t nbuf, bool at_least, int64_t nchild,
                       const char *what, why *w) {
    if (a->length < 0 || a->offset < 0 || a->null_count < -1)
        return fail(w, "%s has length %" PRId64 ", offset %" PRId64 " and null count %" PRId64,
                    what, a->length, a->offset, a->null_count);
    if (a->length > INT64_MAX / 2 - a->offset)
        return fail(w, "%s has length %" PRId64 " at offset %" PRId64, what, a->length, a->offset);
    if (at_least ? a->n_buffers < nbuf : a->n_buffers != nbuf)
        return fail(w, "%s has %" PRId64 " buffers where its type has %s%" PRId64
                       " (is the batch of another type than the stream's schema says?)",
                    what, a->n_buffers, at_least ? "at least " : "", nbuf);
    if (a->n_buffers && !a->buffers) return fail(w, "%s has no buffer list", what);
    if (a->n_children != nchild)
        return fail(w, "%s has %" PRId64 " children where its type has %" PRId64
                       " (is the batch of another type than the stream's schema says?)",
                    what, a->n_children, nchild);
    for (int64_t k = 0; k < nchild; k++)
        if (!a->children || !a->children[k]) return fail(w, "%s has no child %" PRId64, what, k);
    if (a->null_count > 0 && !a->buffers[0])
        return fail(w, "%s counts %" PRId64 " nulls but has no validity bitmap", what,
                    a->null_count);
    return 0;
}

/* Buffer k must be there when the array has elements. */
static int need_buffer(const struct ArrowArray *a, int64_t k, const char *what, why *w) {
    if (a->length > 0 && !a->buffers[k])
        return fail(w, "%s has %" PRId64 " elements but no %s buffer", what, a->length,
                    k == 1 ? "data or offsets" : "data");
    return 0;
}

static int64_t offset_at(const void *buf, bool wide, int64_t i) {
    if (wide) return ((const int64_t *)buf)[i];
    return ((const int32_t *)buf)[i];
}

/* Offsets [offset, offset + length] of a list or string array: from 0 up,
 * never decreasing, and (limit >= 0) at most `limit`, the child's length.
 * Sets *last to the last one. */
static int check_offsets(const struct ArrowArray *a, bool wide, int64_t limit, const char *what,
                         int64_t *last, why *w) {
    *last = 0;
    if (a->length == 0) return 0;
    const void *off = a->buffers[1];
    int64_t prev = offset_at(off, wide, a->offset);
    if (prev < 0) return fail(w, "%s: its first offset is %" PRId64, what, prev);
    for (int64_t i = 1; i <= a->length; i++) {
        int64_t o = offset_at(off, wide, a->offset + i);
        if (o < prev)
            return fail(w, "%s: offset %" PRId64 " (%" PRId64 ") is below the one before it (%" PRId64
                           "): offsets must not decrease",
                        what, i, o, prev);
        prev = o;
    }
    if (limit >= 0 && prev > limit)
        return fail(w, "%s: its offsets reach %" PRId64 ", past its child's %" PRId64 " elements",
                    what, prev, limit);
    *last = prev;
    return 0;
}

static bool valid(const struct ArrowArray *a, int64_t i) {
    if (a->null_count == 0 || !a->buffers[0]) return true;
    int64_t j = a->offset + i;
    return (((const uint8_t *)a->buffers[0])[j >> 3] >> (j & 7)) & 1;
}

/* A list view's (offset, size) pairs: each valid row's elements lie within
 * its child's `limit` elements. */
static int check_list_views(const struct ArrowArray *a, bool wide, int64_t limit,
                            const char *what, why *w) {
    for (int64_t i = 0; i < a->length; i++) {
        if (!valid(a, i)) continue;
        int64_t o = offset_at(a->buffers[1], wide, a->offset + i);
        int64_t n = offset_at(a->buffers[2], wide, a->offset + i);
        if (o < 0 || n < 0 || o > limit || n > limit - o)
            return fail(w, "%s: row %" PRId64 " lies at elements [%" PRId64 ", %" PRId64
                           ") of a child of %" PRId64,
                        what, i, o, o + n, limit);
    }
    return 0;
}

/* A string or binary view array: each valid row that is not inline names a
 * data buffer there is, and lies within that buffer's given size. */
static int check_string_views(const struct ArrowArray *a, const char *what, why *w) {
    int64_t nvar = a->n_buffers - 3;
    const int64_t *sizes = a->buffers[a->n_buffers - 1];
    if (nvar > 0 && !sizes)
        return fail(w, "%s has %" PRId64 " data buffers but no list of their sizes", what, nvar);
    for (int64_t i = 0; i < a->length; i++) {
        if (!valid(a, i)) continue;
        const uint8_t *v = (const uint8_t *)a->buffers[1] + (uint64_t)(a->offset + i) * 16;
        int32_t len, buf, off;
        memcpy(&len, v, 4);
        if (len < 0) return fail(w, "%s: row %" PRId64 " has length %d", what, i, (int)len);
        if (len <= 12) continue;
        memcpy(&buf, v + 8, 4);
        memcpy(&off, v + 12, 4);
        if (buf < 0 || buf >= nvar || !a->buffers[2 + buf])
            return fail(w, "%s: row %" PRId64 " names data buffer %d of %" PRId64, what, i,
                        (int)buf, nvar);
        if (off < 0 || (int64_t)off + len > sizes[buf])
            return fail(w, "%s: row %" PRId64 " lies at bytes [%d, %" PRId64
                           ") of a data buffer of %" PRId64,
                        what, i, (int)off, (int64_t)off + len, sizes[buf]);
    }
    return 0;
}

/* A child of `parent` that holds `width` elements per parent element. */
static int check_child_length(const struct ArrowArray *parent, const struct ArrowArray *child,
                              int64_t width, const char *what, why *w) {
    int64_t need;
    if (__builtin_mul_overflow(parent->offset + parent->length, width, &need) ||
        child->length < need)
        return fail(w, "%s: its child holds %" PRId64 " elements, fewer than %" PRId64 " rows of %" PRId64
                       " need (is the batch of another size than the stream's schema says?)",
                    what, child->length, parent->offset + parent->length, width);
    return 0;
}

/* A leaf of numbers or booleans (c->kind K_PRIM or K_BOOL, or a list's
 * element type). */
static int check_numbers(const struct ArrowArray *a, const char *what, why *w) {
    int rc = check_shape(a, 2, false, 0, what, w);
    return rc ? rc : need_buffer(a, 1, what, w);
}

/* Fixed-size lists inside a list or fixed-size list column (c->inner),
 * down to the numbers. */
static int check_inner(const struct ArrowArray *a, const col *c, why *w) {
    for (int d = 0; d < c->ninner; d++) {
        int rc = check_shape(a, 1, false, 1, "its inner fixed-size list", w);
        if (!rc) rc = check_child_length(a, a->children[0], c->inner[d], "its inner fixed-size list", w);
        if (rc) return rc;
        a = a->children[0];
    }
    return check_numbers(a, "its values", w);
}

/* An array holding column c's values (kind c->kind): the column itself, or
 * a dictionary-encoded column's dictionary. */
static int check_values(const struct ArrowArray *a, const col *c, const char *what, why *w) {
    int rc;
    int64_t last;
    switch (c->kind) {
    case K_PRIM:
    case K_BOOL:
    case K_FBIN:
        return check_numbers(a, what, w);
    case K_STR:
    case K_LSTR:
        if ((rc = check_shape(a, 3, false, 0, what, w)) || (rc = need_buffer(a, 1, what, w)))
            return rc;
        if ((rc = check_offsets(a, c->kind == K_LSTR, -1, what, &last, w))) return rc;
        if (last > offset_at(a->buffers[1], c->kind == K_LSTR, a->offset) && !a->buffers[2])
            return fail(w, "%s holds %" PRId64 " bytes of strings but no data buffer", what, last);
        return 0;
    case K_VSTR:
        if ((rc = check_shape(a, 3, true, 0, what, w)) || (rc = need_buffer(a, 1, what, w)))
            return rc;
        return check_string_views(a, what, w);
    case K_FIXED:
        if ((rc = check_shape(a, 1, false, 1, what, w)) ||
            (rc = check_child_length(a, a->children[0], c->width, what, w)))
            return rc;
        return check_inner(a->children[0], c, w);
    case K_LIST:
    case K_LLIST:
        if ((rc = check_shape(a, 2, false, 1, what, w)) || (rc = need_buffer(a, 1, what, w)) ||
            (rc = check_offsets(a, c->kind == K_LLIST, a->children[0]->length, what, &last, w)))
            return rc;
        return check_inner(a->children[0], c, w);
    case K_LVIEW:
    case K_LLVIEW:
        if ((rc = check_shape(a, 3, false, 1, what, w)) || (rc = need_buffer(a, 1, what, w)))
            return rc;
        if (a->length > 0 && !a->buffers[2]) return fail(w, "%s has no sizes buffer", what);
        if ((rc = check_list_views(a, c->kind == K_LLVIEW, a->children[0]->length, what, w)))
            return rc;
        return check_inner(a->children[0], c, w);
    }
    return fail(w, "%s: a column kind this check does not know", what);
}

static int check_column(const struct ArrowArray *a, const col *c, why *w) {
    if (!c->dict) return check_values(a, c, "its array", w);
    int rc = check_numbers(a, "its dictionary indices", w);
    if (rc) return rc;
    if (!a->dictionary)
        return fail(w, "it is dictionary-encoded in the stream's schema but the batch gives no "
                       "dictionary");
    return check_values(a->dictionary, c, "its dictionary", w);
}

int stk__arrow_check_batch(const ctx *c, const struct ArrowArray *batch, uint64_t index,
                           uint64_t base, const char *path, stk_error *err) {
    why w = {{0}};
    int rc = 0;
    if (batch->n_children != c->ncols) {
        return stk__err(err, -EINVAL,
                        "%s: batch %llu of the Arrow stream (its rows from %llu) has %lld "
                        "columns, but the stream's schema has %d: every batch must have the "
                        "schema's columns",
                        path, (unsigned long long)index, (unsigned long long)base,
                        (long long)batch->n_children, c->ncols);
    }
    if (check_shape(batch, 1, false, c->ncols, "the batch", &w) ||
        (batch->offset != 0 && fail(&w, "the batch starts at offset %" PRId64 " of its columns "
                                        "(a sliced struct array), which cannot be read",
                                    batch->offset)) ||
        (batch->null_count > 0 && fail(&w, "the batch has %" PRId64 " rows that are null as a "
                                           "whole (a struct array's nulls)",
                                       batch->null_count)))
        return stk__err(err, -EINVAL, "%s: batch %llu of the Arrow stream (its rows from %llu): %s",
                        path, (unsigned long long)index, (unsigned long long)base, w.text);
    for (int i = 0; i < c->ncols && rc == 0; i++) {
        const struct ArrowArray *a = batch->children[i];
        if (a->length < batch->length)
            rc = fail(&w, "it has %" PRId64 " rows where the batch has %" PRId64
                          " (every column of a batch has the batch's rows)",
                      a->length, batch->length);
        else
            rc = check_column(a, &c->cols[i], &w);
        if (rc)
            return stk__err(err, -EINVAL,
                            "%s: batch %llu of the Arrow stream (its rows from %llu): column "
                            "'%s' (Arrow type '%s'%s in the stream's schema): %s",
                            path, (unsigned long long)index, (unsigned long long)base,
                            c->cols[i].name, c->cols[i].format,
                            c->cols[i].dict ? ", dictionary-encoded" : "", w.text);
    }
    return 0;
}
