/* The global sequence of one epoch in the deterministic order: counted
 * splits, the counted prefix and its bases (order.h). */
#include "dpp/master/state/order.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "dpp/split.h"

struct sl_master_order {
    const sl_allocator_t *a;
    uint32_t n, window;
    uint32_t prefix; /* P: splits 0..P-1 counted */
    uint64_t sum;    /* batches of every split counted, wherever it lies */
    uint64_t *count; /* [n] batches of the split at each position */
    uint64_t *base;  /* [n + 1]: base[p] valid for p <= prefix */
    bool *counted;   /* [n] */
};

/* Bounds every sum of counts: far above any real epoch, and keeps g a
 * non-negative int64 for the wire and JSON. */
#define ORDER_MAX_BATCHES ((uint64_t)INT64_MAX)

static size_t bytes_of(uint32_t n)
{
    return sizeof(sl_master_order_t) + (size_t)n * sizeof(uint64_t) +
           ((size_t)n + 1) * sizeof(uint64_t) + (size_t)n * sizeof(bool);
}

sl_err_t sl_master_order_new(uint32_t num_splits, uint32_t window, const sl_allocator_t *a,
                             sl_master_order_t **out, sl_error_t *err)
{
    *out = NULL;
    if (num_splits == 0 || window == 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: %u splits, window of %u (both must be > 0)",
                            num_splits, window);
    sl_master_order_t *o = sl_calloc(a, 1, bytes_of(num_splits));
    if (o == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "deterministic order of %u splits", num_splits);
    o->a = a;
    o->n = num_splits;
    o->window = window;
    /* the arrays follow the struct, the 8-byte ones first */
    o->count = (uint64_t *)(o + 1);
    o->base = o->count + num_splits;
    o->counted = (bool *)(o->base + num_splits + 1);
    *out = o;
    return SL_OK;
}

void sl_master_order_destroy(sl_master_order_t *o)
{
    if (o != NULL) sl_free(o->a, o, bytes_of(o->n));
}

void sl_master_order_reset(sl_master_order_t *o)
{
    o->prefix = 0;
    o->sum = 0;
    memset(o->count, 0, (size_t)o->n * sizeof *o->count);
    memset(o->base, 0, ((size_t)o->n + 1) * sizeof *o->base);
    memset(o->counted, 0, (size_t)o->n * sizeof *o->counted);
}

sl_err_t sl_master_order_count_check(const sl_master_order_t *o, uint32_t p, uint64_t batches,
                                     bool *again, sl_error_t *err)
{
    if (again != NULL) *again = false;
    if (p >= o->n)
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: split at position %u of %u splits", p, o->n);
    if (o->counted[p]) {
        if (o->count[p] == batches) {
            if (again != NULL) *again = true;
            return SL_OK;
        }
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: split at position %u counted %" PRIu64
                            " batches, now %" PRIu64 ": its batches were cut differently",
                            p, o->count[p], batches);
    }
    if (batches > ORDER_MAX_BATCHES)
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: split at position %u: %" PRIu64 " batches", p,
                            batches);
    if (batches > ORDER_MAX_BATCHES - o->sum)
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: split at position %u: %" PRIu64
                            " batches pass 2^63 in the epoch",
                            p, batches);
    return SL_OK;
}

sl_err_t sl_master_order_count(sl_master_order_t *o, uint32_t p, uint64_t batches, sl_error_t *err)
{
    bool again;
    sl_err_t rc = sl_master_order_count_check(o, p, batches, &again, err);
    if (rc != SL_OK || again) return rc;
    o->counted[p] = true;
    o->count[p] = batches;
    o->sum += batches;
    while (o->prefix < o->n && o->counted[o->prefix]) {
        o->base[o->prefix + 1] = o->base[o->prefix] + o->count[o->prefix];
        o->prefix++;
    }
    SL_ASSERT(o->prefix <= o->n, "prefix %u of %u splits", o->prefix, o->n);
    return SL_OK;
}

bool sl_master_order_counted(const sl_master_order_t *o, uint32_t p, uint64_t *batches)
{
    if (p >= o->n || !o->counted[p]) return false;
    *batches = o->count[p];
    return true;
}

uint32_t sl_master_order_prefix(const sl_master_order_t *o)
{
    return o->prefix;
}

bool sl_master_order_base(const sl_master_order_t *o, uint32_t p, uint64_t *base)
{
    if (p > o->prefix) return false;
    *base = o->base[p];
    return true;
}

bool sl_master_order_may_lease(const sl_master_order_t *o, uint32_t p)
{
    return p < o->n && (uint64_t)p < (uint64_t)o->prefix + o->window;
}

bool sl_master_order_locate(const sl_master_order_t *o, uint64_t g, uint32_t *p, uint64_t *k)
{
    if (g >= o->base[o->prefix]) return false;
    /* the last position lo < prefix with base[lo] <= g: it holds g, since
     * base[lo + 1] > g (bases never fall) */
    uint32_t lo = 0, hi = o->prefix; /* base[lo] <= g < base[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (o->base[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    SL_ASSERT(o->base[lo] <= g && g < o->base[lo] + o->count[lo],
              "g %" PRIu64 " at position %u of base %" PRIu64 ", %" PRIu64 " batches", g, lo,
              o->base[lo], o->count[lo]);
    *p = lo;
    *k = g - o->base[lo];
    return true;
}

sl_err_t sl_master_order_gap_base(uint64_t split_base, uint64_t split_from_row,
                                  const sl_master_order_batch_t *committed, size_t n,
                                  const sl_dpp_row_range_t *skip, size_t n_skip, uint64_t gap_from,
                                  uint64_t *base, uint64_t *limit, sl_error_t *err)
{
    /* where the gap starts once the rows of no batch before it are passed */
    uint64_t eff = gap_from;
    bool skipped = false;
    for (size_t i = 0; i < n_skip; i++)
        if (skip[i].to_row <= skip[i].from_row || (i > 0 && skip[i].from_row < skip[i - 1].to_row))
            return sl_error_set(err, SL_ERR_INVALID,
                                "deterministic order: rows of no batch %zu, [%" PRIu64 ", %" PRIu64
                                "), empty, out of order or overlapping",
                                i, skip[i].from_row, skip[i].to_row);
    for (size_t i = n_skip; i-- > 0;)
        if (skip[i].to_row == eff) {
            eff = skip[i].from_row;
            skipped = true;
        }
    uint64_t lim = UINT64_MAX;
    uint64_t row = split_from_row, next_g = split_base;
    bool found = eff == split_from_row;
    *base = split_base;
    for (size_t i = 0; i < n; i++) {
        const sl_master_order_batch_t *c = &committed[i];
        if (c->from_row < row || c->to_row <= c->from_row)
            return sl_error_set(err, SL_ERR_INVALID,
                                "deterministic order: committed batch %zu of rows [%" PRIu64
                                ", %" PRIu64 ") overlaps the one before or lies before the "
                                "split's row %" PRIu64,
                                i, c->from_row, c->to_row, row);
        if (c->g < next_g)
            return sl_error_set(err, SL_ERR_INVALID,
                                "deterministic order: committed batch %zu of rows [%" PRIu64
                                ", %" PRIu64 ") has g %" PRIu64 ", below %" PRIu64,
                                i, c->from_row, c->to_row, c->g, next_g);
        if (eff > c->from_row && eff < c->to_row)
            return sl_error_set(err, SL_ERR_INVALID,
                                "deterministic order: row %" PRIu64
                                " lies inside the committed batch of rows [%" PRIu64 ", %" PRIu64
                                ")",
                                eff, c->from_row, c->to_row);
        if (eff == c->from_row)
            return sl_error_set(
                err, SL_ERR_INVALID,
                "deterministic order: row %" PRIu64 " starts a committed batch, not a gap", eff);
        if (c->to_row == eff) {
            found = true;
            *base = c->g + 1;
        }
        if (lim == UINT64_MAX && c->from_row > gap_from) lim = c->g;
        row = c->to_row;
        next_g = c->g + 1;
    }
    if (!found && skipped) {
        /* the row before the rows of no batch lies in another gap of the
         * same lease, whose numbering this one continues */
        *base = UINT64_MAX;
        found = true;
    }
    if (!found)
        return sl_error_set(err, SL_ERR_INVALID,
                            "deterministic order: row %" PRIu64
                            " is neither the split's first row (%" PRIu64
                            ") nor a committed batch's end: batching from it would cut new "
                            "batches",
                            gap_from, split_from_row);
    if (limit != NULL) *limit = lim;
    return SL_OK;
}

bool sl_master_order_valid(const sl_master_order_t *o, char *why, size_t cap)
{
    uint64_t sum = 0;
    if (o->prefix > o->n) {
        snprintf(why, cap, "prefix %u past %u splits", o->prefix, o->n);
        return false;
    }
    if (o->base[0] != 0) {
        snprintf(why, cap, "base[0] is %" PRIu64, o->base[0]);
        return false;
    }
    for (uint32_t p = 0; p < o->n; p++) {
        if (p < o->prefix && !o->counted[p]) {
            snprintf(why, cap, "split at position %u below the prefix %u is not counted", p,
                     o->prefix);
            return false;
        }
        if (p < o->prefix && o->base[p + 1] != o->base[p] + o->count[p]) {
            snprintf(why, cap,
                     "base[%u] %" PRIu64 " is not base[%u] %" PRIu64 " + %" PRIu64 " batches",
                     p + 1, o->base[p + 1], p, o->base[p], o->count[p]);
            return false;
        }
        if (o->counted[p]) sum += o->count[p];
    }
    if (o->prefix < o->n && o->counted[o->prefix]) {
        snprintf(why, cap, "split at position %u is counted but the prefix stops there", o->prefix);
        return false;
    }
    if (sum != o->sum) {
        snprintf(why, cap, "%" PRIu64 " batches counted, the sum says %" PRIu64, sum, o->sum);
        return false;
    }
    return true;
}
