/* The reorder buffer of a rank under the deterministic order (docs/DESIGN.md,
 * "A deterministic order", The client): batches arrive tagged with their
 * global index g, in whatever order the workers send them, and are handed
 * out in g order, rank r of R taking g = first, first + R, first + 2R, ...
 * (first = r at an epoch's start). At most cap batches are held: g up to
 * next + (cap - 1) R, where next is the g handed out next; the credit
 * logic must send no other (a g past that is refused, not grown into).
 * Items are opaque pointers; the buffer owns none of them.
 *
 * The client (order.c) keeps it filled through its g-window, so a put
 * past the cap is a worker's fault. Not thread-safe: the client's lock guards it as the ready
 * queue. */
#ifndef SLUICE_TRAINER_REORDER_H
#define SLUICE_TRAINER_REORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct tr_reorder tr_reorder_t;

/* For rank rank of ranks (rank < ranks), cap > 0 batches held. Caller owns,
 * free with tr_reorder_destroy. @return SL_ERR_INVALID for a rank out of
 * range or cap 0, SL_ERR_NOMEM. */
sl_err_t tr_reorder_new(uint32_t rank, uint32_t ranks, uint32_t cap, const sl_allocator_t *a,
                        tr_reorder_t **out, sl_error_t *err);
/* q may be NULL; items still held are not freed (take them first). */
void tr_reorder_destroy(tr_reorder_t *q);

/* Start a sequence (an epoch, or the rest of one after a resume) whose next
 * g is first (first mod ranks must be the rank). Nothing may be held.
 * @return SL_ERR_INVALID otherwise. */
sl_err_t tr_reorder_start(tr_reorder_t *q, uint64_t first, sl_error_t *err);

/* Hold item as batch g. @return SL_ERR_INVALID (naming g) when g is another
 * rank's, was handed out already, or is held already; SL_ERR_TOO_LARGE when
 * g lies past the cap batches from next. Nothing is held then. */
sl_err_t tr_reorder_put(tr_reorder_t *q, uint64_t g, void *item, sl_error_t *err);

/* The item of batch next, which then moves on by ranks; NULL when that
 * batch has not arrived (others may be held). */
void *tr_reorder_take(tr_reorder_t *q);

/* The g handed out next: the batch the client's credits must go to when
 * the buffer is full. */
uint64_t tr_reorder_next(const tr_reorder_t *q);

/* Take out any held item (NULL when none): a client failing or closing
 * frees what it holds. */
void *tr_reorder_pop_any(tr_reorder_t *q);

/* Batches held. */
uint32_t tr_reorder_held(const tr_reorder_t *q);

/* The item in slot i (< tr_reorder_cap), NULL when empty: a resume token
 * names every held batch as not handed out. */
void *tr_reorder_slot(const tr_reorder_t *q, uint32_t i);
uint32_t tr_reorder_cap(const tr_reorder_t *q);

#endif
