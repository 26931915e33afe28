/* The global sequence of one epoch of a job in the deterministic order
 * (docs/DESIGN.md, "A deterministic order"): the arithmetic the master
 * keeps for it, apart from the journal and the lease code that use it
 * (state_order.c, state_order_skip.c).
 *
 * The epoch's splits sit at positions 0..n-1 of its order (make_order);
 * split p's batches, cut from its first row, have global indices
 * base[p] .. base[p] + count[p] - 1, base[0] = 0 and base[p + 1] =
 * base[p] + count[p]. A count is known once a worker has read the split
 * (filters decide it), in any order; base[p] is known once every split
 * before p is counted: p <= P, the counted prefix. Leases stay below
 * P + window (back-pressure: no worker runs further ahead of the counted
 * prefix). Rank r of R takes the batches with g mod R == r, in g order.
 *
 * Memory: 17 bytes per split (count, base, flag), one allocation. Not
 * thread-safe: the master's state lock guards it like the rest. */
#ifndef SLUICE_DPP_MASTER_ORDER_H
#define SLUICE_DPP_MASTER_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpp/split.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_master_order sl_master_order_t;

/* One epoch of num_splits splits (> 0), leasing at most window (> 0)
 * positions past the counted prefix. Caller owns, free with
 * sl_master_order_destroy. @return SL_ERR_INVALID for a zero count or
 * window, SL_ERR_NOMEM. */
sl_err_t sl_master_order_new(uint32_t num_splits, uint32_t window, const sl_allocator_t *a,
                             sl_master_order_t **out, sl_error_t *err);
/* o may be NULL. */
void sl_master_order_destroy(sl_master_order_t *o);

/* A new epoch: nothing counted. */
void sl_master_order_reset(sl_master_order_t *o);

/* Split p has batches batches (0: its rows all filtered out). Counting the
 * same split again with the same number is a no-op (a SPLIT_READ repeated
 * after a lost reply, a record replayed). @return SL_ERR_INVALID when p is
 * past the splits, when p was counted with another number (its batches
 * were cut differently: the order would not be a function of the rows),
 * or when the epoch's batches would pass 2^63. */
sl_err_t sl_master_order_count(sl_master_order_t *o, uint32_t p, uint64_t batches, sl_error_t *err);

/* Whether sl_master_order_count(o, p, batches) would succeed, changing
 * nothing; *again (may be NULL) tells a count already held (a no-op).
 * @return as sl_master_order_count. */
sl_err_t sl_master_order_count_check(const sl_master_order_t *o, uint32_t p, uint64_t batches,
                                     bool *again, sl_error_t *err);

/* The count of split p when it is counted. @return false otherwise (or p
 * past the splits). */
bool sl_master_order_counted(const sl_master_order_t *o, uint32_t p, uint64_t *batches);

/* P: every split before it is counted (num_splits: the whole epoch). */
uint32_t sl_master_order_prefix(const sl_master_order_t *o);

/* base[p] when p <= P (p == num_splits: the epoch's batches, once all are
 * counted). @return false when not known yet. */
bool sl_master_order_base(const sl_master_order_t *o, uint32_t p, uint64_t *base);

/* Whether split p may be leased now: p < P + window. */
bool sl_master_order_may_lease(const sl_master_order_t *o, uint32_t p);

/* The split holding batch g and g's place in it (g - base[p]), when g lies
 * in the counted prefix (g < base[P]); splits of no batch hold none.
 * @return false otherwise. O(log P). */
bool sl_master_order_locate(const sl_master_order_t *o, uint64_t g, uint32_t *p, uint64_t *k);

/* The invariants (for sl_master_state_check once the order is wired, and
 * the tests): splits below the prefix counted, the prefix stopping at the
 * first uncounted one, base[p + 1] = base[p] + count[p] below it, the sum
 * of the counts kept. O(splits). @return false with why filled (a
 * message of at most cap bytes) when one is broken. */
bool sl_master_order_valid(const sl_master_order_t *o, char *why, size_t cap);

/* The rank that takes batch g of a job of ranks ranks (> 0). */
static inline uint32_t sl_master_order_rank(uint64_t g, uint32_t ranks)
{
    return (uint32_t)(g % ranks);
}

/* A batch of a split that a client committed: rows [from_row, to_row) and
 * its global index g. */
typedef struct sl_master_order_batch {
    uint64_t from_row, to_row, g;
} sl_master_order_batch_t;

/* The global index of the first batch of the split's rows from gap_from
 * on, when a lease ended early (its worker killed) and committed batches
 * of the split, not necessarily a prefix (committed[0..n), sorted by
 * from_row): the split's base when the gap starts at its first row
 * (split_from_row), else the g after the committed batch ending at
 * gap_from. Batching the gap from gap_from then cuts the original batches
 * again, numbered as before.
 *
 * skip[0..n_skip) (sorted, disjoint; NULL when n_skip is 0): rows of no
 * batch of this job, those a resumed job starts with as delivered. A gap
 * right after such rows is judged from where they start; when the row
 * before them lies in no committed batch (another gap of the lease, read
 * before this one), *base gets UINT64_MAX: this gap continues that gap's
 * numbering.
 *
 * *limit (may be NULL) gets the g of the first committed batch after the
 * gap, UINT64_MAX when none (the split's tail, whose end is the next
 * split's base): the gap, with the gaps that continue it, must yield
 * exactly *limit - *base batches, else its batches were cut differently
 * and must not be handed out. @return
 * SL_ERR_INVALID (naming the rows) when the committed batches overlap or
 * are out of order, when their g's do not rise from split_base with their
 * rows, when skip is not sorted and disjoint, or when gap_from is neither
 * the split's first row nor a committed batch's end, skipped rows aside:
 * the gap would cut new batches. */
sl_err_t sl_master_order_gap_base(uint64_t split_base, uint64_t split_from_row,
                                  const sl_master_order_batch_t *committed, size_t n,
                                  const sl_dpp_row_range_t *skip, size_t n_skip, uint64_t gap_from,
                                  uint64_t *base, uint64_t *limit, sl_error_t *err);

#endif
