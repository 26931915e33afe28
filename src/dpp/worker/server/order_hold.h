/* The worker's hold of a deterministic order's batches (docs/DESIGN.md,
 * "A deterministic order"; docs/WORKER.md, Master mode, "The
 * deterministic order").
 *
 * A lease of a deterministic job (LEASE order_ranks > 0) reads its split
 * from the first row and numbers its batches itself, k = 0, 1, ... in
 * the order the batcher cuts them; batch k has the global index
 * g = base + k once the split's base is known (LEASE order_base_plus_one,
 * HEARTBEAT_REPLY bases), and goes to rank g mod R. The hold is what sits
 * between the cutting and the server's per-rank queues:
 *
 *  - cut: the batcher cut batch k with rows [from, to) of the split. A
 *    batch whose rows all lie outside the lease's todo ranges was
 *    committed under an earlier lease of the split: it is dropped (not
 *    encoded); one wholly inside is kept; one across a todo boundary means
 *    this cut disagrees with the one that committed, refused by name.
 *  - put: a kept batch, encoded (items arrive in any order from the
 *    transform threads), waits here until its base is known and every
 *    lower k of its lease is sent or dropped.
 *  - pop: the next batch to go, in g order: a rank's batches leave one
 *    worker in g order (the client's reorder buffer refuses a g too far
 *    past its next, docs/DESIGN.md point (1)), with rank_plus_one =
 *    g mod R + 1 and order_g_plus_one = g + 1 set in its lease origin.
 *  - end: the lease's split is read: its count (every batch cut, dropped
 *    ones too) for SPLIT_READ `batches`.
 *  - take: a lease revoked or failed: its held batches handed back to be
 *    freed and retired, the lease forgotten.
 *
 * Memory: held items keep their frames and their budget bytes
 * (item.accounted stays pinned), so the worker's --memory-limit bounds
 * what waits here and back-pressure stops the reader (bytes() says how
 * much). Per lease: 24 bytes a cut plus the held items, freed when the
 * lease ends and every batch has left.
 *
 * Not thread-safe: the owner calls it under one lock (the server's). */
#ifndef SLUICE_DPP_WORKER_ORDER_HOLD_H
#define SLUICE_DPP_WORKER_ORDER_HOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mem.h"
#include "dpp/split.h"
#include "dpp/worker/server/server.h"
#include "sluice/err.h"

typedef struct sl_worker_order_hold sl_worker_order_hold_t;

/* A hold for a job of ranks (> 0) trainer ranks. @return it (caller owns,
 * free with _destroy), or NULL when out of memory or ranks is 0. */
sl_worker_order_hold_t *sl_worker_order_hold_new(const sl_allocator_t *a, uint32_t ranks);

/* Free h (NULL: nothing). Items still held are not freed: take them first. */
void sl_worker_order_hold_destroy(sl_worker_order_hold_t *h);

/* A lease begins: its handle (the lease origin's), split id (for
 * messages), todo ranges (ascending, disjoint; copied) and
 * base_plus_one (LEASE order_base_plus_one: 0 not known yet). @return
 * SL_OK, SL_ERR_INVALID (a lease held already, todo out of order),
 * SL_ERR_NOMEM. */
sl_err_t sl_worker_order_hold_begin(sl_worker_order_hold_t *h, void *lease, uint32_t split,
                                    const sl_dpp_row_range_t *todo, uint32_t num_todo,
                                    uint64_t base_plus_one, sl_error_t *err);

/* A resumed job's lease (LEASE order_skip), after _begin and before its
 * first cut: the split's skip rows (ascending, disjoint; copied), handed
 * out before the resume. A batch cut wholly inside them is dropped and
 * neither numbered nor counted (the continued sequence leaves it out,
 * where a batch committed under an earlier lease of this run is dropped
 * but counted); one across their boundary is refused by name (the cuts
 * disagree with the original run's). @return SL_OK, SL_ERR_NOT_FOUND,
 * SL_ERR_INVALID (ranges out of order, a batch cut already, skip rows
 * given already), SL_ERR_NOMEM. */
sl_err_t sl_worker_order_hold_skip(sl_worker_order_hold_t *h, void *lease,
                                   const sl_dpp_row_range_t *skip, uint32_t num_skip,
                                   sl_error_t *err);

/* How many batches of lease were cut inside its skip rows (0: none, or
 * no such lease). */
uint64_t sl_worker_order_hold_skipped(const sl_worker_order_hold_t *h, const void *lease);

/* The batcher cut the lease's next batch, rows [from_row, to_row) of the
 * split (after the previous batch's rows). *keep: encode and put it; false:
 * its rows were committed, dropped. @return SL_OK, SL_ERR_NOT_FOUND (no such
 * lease), SL_ERR_INVALID (rows empty, before the previous batch's end,
 * across a todo boundary, or the lease ended), SL_ERR_NOMEM. */
sl_err_t sl_worker_order_hold_cut(sl_worker_order_hold_t *h, void *lease, uint64_t from_row,
                                  uint64_t to_row, bool *keep, sl_error_t *err);

/* A kept batch, encoded: item (taken by value; the hold owns its frame
 * until it is popped or taken) names its lease and rows in item->lease.
 * @return SL_OK, SL_ERR_NOT_FOUND (no such lease, or no kept cut with those
 * rows), SL_ERR_INVALID (that batch put already). */
sl_err_t sl_worker_order_hold_put(sl_worker_order_hold_t *h, const sl_worker_server_item_t *item,
                                  sl_error_t *err);

/* The lease's base is known (HEARTBEAT_REPLY bases). Known already with the
 * same value: a no-op. @return SL_OK, SL_ERR_NOT_FOUND (no such lease:
 * ended and sent, or never begun; harmless to the caller),
 * SL_ERR_INVALID (another base than the one known). */
sl_err_t sl_worker_order_hold_set_base(sl_worker_order_hold_t *h, void *lease, uint64_t base,
                                       sl_error_t *err);

/* The next batch to send: the batch of the lowest g still to come among
 * the leases whose base is known, when it is held (put, not yet popped);
 * into *out with its
 * lease.order_g_plus_one and lease.rank_plus_one set (the caller owns it
 * now). @return true when there was one. */
bool sl_worker_order_hold_pop(sl_worker_order_hold_t *h, sl_worker_server_item_t *out);

/* The lease's split is read: no more cuts. *batches: how many it cut
 * (dropped ones too), its SPLIT_READ count. The lease is forgotten once
 * its kept batches have all been popped. @return SL_OK, SL_ERR_NOT_FOUND. */
sl_err_t sl_worker_order_hold_end(sl_worker_order_hold_t *h, void *lease, uint64_t *batches,
                                  sl_error_t *err);

/* The lease is gone (revoked, failed): one of its held batches into *out
 * (the caller frees and retires it) per call; once none is left the lease
 * is forgotten and this returns false. */
bool sl_worker_order_hold_take(sl_worker_order_hold_t *h, void *lease,
                               sl_worker_server_item_t *out);

/* Any lease's held batch into *out (leases with none left forgotten):
 * emptying the hold at the end. @return false once the hold is empty. */
bool sl_worker_order_hold_take_any(sl_worker_order_hold_t *h, sl_worker_server_item_t *out);

/* Is lease held (begun, not yet forgotten)? */
bool sl_worker_order_hold_has(const sl_worker_order_hold_t *h, const void *lease);

/* The lowest g still to come (cut or not, held or being encoded) among
 * the leases whose base is known: the next pop's g, into *g. @return
 * false when no lease of known base has a batch to come. */
bool sl_worker_order_hold_next_g(const sl_worker_order_hold_t *h, uint64_t *g);
/* Leases held (begun, not yet forgotten). */
uint32_t sl_worker_order_hold_leases(const sl_worker_order_hold_t *h);

/* Bytes (item.len) and batches held, all leases. */
uint64_t sl_worker_order_hold_bytes(const sl_worker_order_hold_t *h);
uint64_t sl_worker_order_hold_count(const sl_worker_order_hold_t *h);

#endif
