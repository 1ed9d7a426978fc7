/*
 * mix.h: a mixture of sources as src/api reaches it.  A mixture's loader
 * is a hooked loader (pipeline.h) whose worker fills each batch from the
 * sources' own loaders, following the schedule of src/sample/mix.c; src/api
 * sends it the calls that move the epoch or the state, and its close.
 */
#ifndef STK_MIX_H
#define STK_MIX_H

#include "../core/internal.h"

struct stk__mixer;

int stk__mixture_open(const stk_mixture_source *sources, size_t n,
                      const stk_loader_options *common, const stk_mixture_options *mo,
                      stk_loader **out, stk_error *err);
/* next, release, add_buffer, unget and save of stoker.h: the mixture's own loader's,
 * or, for homogeneous batches, the sources' batches handed out. */
int stk__mixture_next(struct stk__mixer *m, stk_batch **out, int64_t timeout_ms,
                      stk_error *err);
void stk__mixture_release(struct stk__mixer *m, stk_batch *b);
int stk__mixture_add_buffer(struct stk__mixer *m, stk_error *err);
int stk__mixture_unget(struct stk__mixer *m, stk_batch *b);
void stk__mixture_save(struct stk__mixer *m, stk_loader_state *st);
int stk__mixture_set_epoch(struct stk__mixer *m, uint64_t epoch, stk_error *err);
int stk__mixture_restore(struct stk__mixer *m, const stk_loader_state *st, stk_error *err);
int stk__mixture_fetch_epoch(struct stk__mixer *m, uint64_t *bytes, stk_error *err);
void stk__mixture_stop(struct stk__mixer *m);
/* Whether its batches are the sources' own, handed out (homogeneous
 * batches of sources whose fields differ), rather than its loader's. */
bool stk__mixture_hands_out(const struct stk__mixer *m);
/* Closes the mixture's loader, then the sources' loaders. */
void stk__mixture_close(struct stk__mixer *m);

#endif
