/*
 * pipeline.h: what the loader shows the rest of libstoker and no user: the
 * GPU stage (src/gpu) needs the batch ring's memory to page-lock it, each
 * batch's buffer to copy it, and, for a device-resident dataset, a loader
 * that plans batches without reading them.
 */
#ifndef STK_PIPELINE_H
#define STK_PIPELINE_H

#include "../core/internal.h"

/* One piece of a planned batch: `len` bytes of dataset field `field` of
 * record `rec`, at byte `off` of shard `shard`, belong at `dst` in the
 * batch's buffer. */
typedef struct stk__plan {
    uint32_t shard, field;
    uint64_t rec, off, len;
    uint8_t *dst;
} stk__plan;

/* Opens a loader that plans every batch (order, records, windows, ragged
 * offsets into the buffer) but reads nothing: each batch carries its plan
 * instead of its data.  Every selected field must be stored plain (no
 * compression, conversion or filtered chunks); checksums are not checked
 * (the caller checks what it reads). */
int stk__loader_open_planned(stk_dataset *ds, const stk_loader_options *opts, stk_loader **out,
                             stk_error *err);
/* The plan of a batch of a planned loader (n pieces); valid until release. */
const stk__plan *stk__batch_plan(const stk_batch *b, size_t *n);
/* The start of a batch's buffer: field pointers are offsets from it. */
uint8_t *stk__batch_mem(const stk_batch *b);
/* The ring's memory (every buffer made at open), for page-locking. */
void stk__loader_ring(const stk_loader *ld, void **mem, size_t *bytes);
/* Bytes of one batch buffer. */
uint64_t stk__loader_slot_bytes(const stk_loader *ld);
/* The resume state after `taken` batches of the current epoch (or since
 * the last restore), as stk_loader_save gives it after that many. */
void stk__loader_save_at(const stk_loader *ld, uint64_t taken, stk_loader_state *st);
/* The dataset field that loader field i is. */
size_t stk__loader_field_dsf(const stk_loader *ld, size_t i);

#endif
