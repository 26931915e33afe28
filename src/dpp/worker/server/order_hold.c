/* The worker's hold of a deterministic order's batches: cut, put, pop in
 * g order (order_hold.h). */
#include "dpp/worker/server/order_hold.h"

#include <inttypes.h>
#include <string.h>

enum { CUT_DROPPED, CUT_WAITING, CUT_HELD, CUT_SENT };

typedef struct cut {
    uint64_t from, to;
    uint8_t state;
} cut_t;

typedef struct olease {
    void *handle;
    uint32_t split;
    sl_dpp_row_range_t *todo;
    uint32_t num_todo;
    bool has_base, ended;
    uint64_t base;
    cut_t *cuts; /* cut k at cuts[k] */
    uint32_t num_cuts, cap_cuts;
    sl_worker_server_item_t *items; /* items[k] valid while cuts[k].state == CUT_HELD */
    uint32_t cap_items;
    uint32_t next; /* every k below it is sent or dropped */
    uint32_t held;
    /* A resumed job's skip rows (sl_worker_order_hold_skip): batches
     * wholly inside are not cuts (not numbered, not counted); skip_end is
     * the end of the last such batch. */
    sl_dpp_row_range_t *skip;
    uint32_t num_skip;
    bool has_skip;
    uint64_t skip_end, skipped;
} olease_t;

struct sl_worker_order_hold {
    const sl_allocator_t *a;
    uint32_t ranks;
    olease_t *leases;
    uint32_t num_leases, cap_leases;
    uint64_t bytes, count;
};

sl_worker_order_hold_t *sl_worker_order_hold_new(const sl_allocator_t *a, uint32_t ranks)
{
    if (ranks == 0) return NULL;
    sl_worker_order_hold_t *h = sl_calloc(a, 1, sizeof *h);
    if (!h) return NULL;
    h->a = a;
    h->ranks = ranks;
    return h;
}

static void free_lease(const sl_allocator_t *a, olease_t *l)
{
    sl_free(a, l->todo, (size_t)l->num_todo * sizeof *l->todo);
    sl_free(a, l->cuts, (size_t)l->cap_cuts * sizeof *l->cuts);
    sl_free(a, l->items, (size_t)l->cap_items * sizeof *l->items);
    sl_free(a, l->skip, (size_t)l->num_skip * sizeof *l->skip);
}

void sl_worker_order_hold_destroy(sl_worker_order_hold_t *h)
{
    if (!h) return;
    for (uint32_t i = 0; i < h->num_leases; i++)
        free_lease(h->a, &h->leases[i]);
    sl_free(h->a, h->leases, (size_t)h->cap_leases * sizeof *h->leases);
    sl_free(h->a, h, sizeof *h);
}

static olease_t *find(sl_worker_order_hold_t *h, void *lease)
{
    for (uint32_t i = 0; i < h->num_leases; i++)
        if (h->leases[i].handle == lease) return &h->leases[i];
    return NULL;
}

/* Forget l (its items popped or taken already). */
static void forget(sl_worker_order_hold_t *h, olease_t *l)
{
    free_lease(h->a, l);
    *l = h->leases[--h->num_leases];
}

/* Past dropped and sent cuts; an ended lease whose every batch has left
 * is forgotten. @return whether l is still there. */
static bool advance(sl_worker_order_hold_t *h, olease_t *l)
{
    while (l->next < l->num_cuts &&
           (l->cuts[l->next].state == CUT_DROPPED || l->cuts[l->next].state == CUT_SENT))
        l->next++;
    if (l->ended && l->next == l->num_cuts) {
        forget(h, l);
        return false;
    }
    return true;
}

sl_err_t sl_worker_order_hold_begin(sl_worker_order_hold_t *h, void *lease, uint32_t split,
                                    const sl_dpp_row_range_t *todo, uint32_t num_todo,
                                    uint64_t base_plus_one, sl_error_t *err)
{
    if (find(h, lease))
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: the lease of split %" PRIu32 " is held already", split);
    for (uint32_t i = 0; i < num_todo; i++)
        if (todo[i].from_row >= todo[i].to_row || (i && todo[i].from_row < todo[i - 1].to_row))
            return sl_error_set(err, SL_ERR_INVALID,
                                "order hold: lease of split %" PRIu32 ": todo range %" PRIu32
                                " [%" PRIu64 ", %" PRIu64 ") is empty or out of order",
                                split, i, todo[i].from_row, todo[i].to_row);
    if (h->num_leases == h->cap_leases &&
        !SL_GROW(h->a, h->leases, h->cap_leases, h->num_leases + 1, 4))
        return sl_error_set(err, SL_ERR_NOMEM, "order hold: out of memory for a lease");
    olease_t l = {.handle = lease,
                  .split = split,
                  .num_todo = num_todo,
                  .has_base = base_plus_one != 0,
                  .base = base_plus_one ? base_plus_one - 1 : 0};
    if (num_todo) {
        l.todo = sl_alloc(h->a, (size_t)num_todo * sizeof *todo);
        if (!l.todo) return sl_error_set(err, SL_ERR_NOMEM, "order hold: out of memory for todo");
        memcpy(l.todo, todo, (size_t)num_todo * sizeof *todo);
    }
    h->leases[h->num_leases++] = l;
    return SL_OK;
}

/* Are rows [from, to) inside one of ranges [n] (1), outside every one
 * (0), or across a boundary (-1)? */
static int in_ranges(const sl_dpp_row_range_t *ranges, uint32_t n, uint64_t from, uint64_t to)
{
    for (uint32_t i = 0; i < n; i++) {
        const sl_dpp_row_range_t *r = &ranges[i];
        if (to <= r->from_row || from >= r->to_row) continue;
        return from >= r->from_row && to <= r->to_row ? 1 : -1;
    }
    return 0;
}

static int in_todo(const olease_t *l, uint64_t from, uint64_t to)
{
    return in_ranges(l->todo, l->num_todo, from, to);
}

sl_err_t sl_worker_order_hold_skip(sl_worker_order_hold_t *h, void *lease,
                                   const sl_dpp_row_range_t *skip, uint32_t num_skip,
                                   sl_error_t *err)
{
    olease_t *l = find(h, lease);
    if (!l) return sl_error_set(err, SL_ERR_NOT_FOUND, "order hold: skip rows of no held lease");
    if (l->has_skip || l->num_cuts || l->ended)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: skip rows of split %" PRIu32 " after %s", l->split,
                            l->has_skip ? "skip rows" : "its first batch");
    for (uint32_t i = 0; i < num_skip; i++)
        if (skip[i].from_row >= skip[i].to_row || (i && skip[i].from_row < skip[i - 1].to_row))
            return sl_error_set(err, SL_ERR_INVALID,
                                "order hold: lease of split %" PRIu32 ": skip range %" PRIu32
                                " [%" PRIu64 ", %" PRIu64 ") is empty or out of order",
                                l->split, i, skip[i].from_row, skip[i].to_row);
    if (num_skip) {
        l->skip = sl_alloc(h->a, (size_t)num_skip * sizeof *skip);
        if (!l->skip) return sl_error_set(err, SL_ERR_NOMEM, "order hold: out of memory for skip");
        memcpy(l->skip, skip, (size_t)num_skip * sizeof *skip);
        l->num_skip = num_skip;
    }
    l->has_skip = true;
    return SL_OK;
}

uint64_t sl_worker_order_hold_skipped(const sl_worker_order_hold_t *h, const void *lease)
{
    for (uint32_t i = 0; i < h->num_leases; i++)
        if (h->leases[i].handle == lease) return h->leases[i].skipped;
    return 0;
}

sl_err_t sl_worker_order_hold_cut(sl_worker_order_hold_t *h, void *lease, uint64_t from_row,
                                  uint64_t to_row, bool *keep, sl_error_t *err)
{
    olease_t *l = find(h, lease);
    if (!l) return sl_error_set(err, SL_ERR_NOT_FOUND, "order hold: a batch of no held lease");
    uint64_t prev_end = l->num_cuts ? l->cuts[l->num_cuts - 1].to : 0;
    if (l->skip_end > prev_end) prev_end = l->skip_end;
    if (l->ended || from_row >= to_row || from_row < prev_end)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: split %" PRIu32 " batch %" PRIu32 " rows [%" PRIu64
                            ", %" PRIu64 ") %s",
                            l->split, l->num_cuts, from_row, to_row,
                            l->ended             ? "after the split was read"
                            : from_row >= to_row ? "are empty"
                                                 : "start before the previous batch's end");
    /* handed out before the resume: not in this run's sequence at all */
    int sk = in_ranges(l->skip, l->num_skip, from_row, to_row);
    if (sk < 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: split %" PRIu32 " rows [%" PRIu64 ", %" PRIu64
                            ") cross a skip range's boundary (rows handed out before the "
                            "resume): cut otherwise than the original run's batches",
                            l->split, from_row, to_row);
    if (sk > 0) {
        l->skip_end = to_row;
        l->skipped++;
        *keep = false;
        return SL_OK;
    }
    int in = in_todo(l, from_row, to_row);
    if (in < 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: split %" PRIu32 " batch %" PRIu32 " rows [%" PRIu64
                            ", %" PRIu64 ") cross a todo range's boundary: cut otherwise than "
                            "the batches committed under an earlier lease",
                            l->split, l->num_cuts, from_row, to_row);
    if (l->num_cuts == UINT32_MAX ||
        (l->num_cuts == l->cap_cuts && !SL_GROW(h->a, l->cuts, l->cap_cuts, l->num_cuts + 1, 16)))
        return sl_error_set(err, SL_ERR_NOMEM, "order hold: out of memory for a batch");
    l->cuts[l->num_cuts++] =
        (cut_t){.from = from_row, .to = to_row, .state = in ? CUT_WAITING : CUT_DROPPED};
    *keep = in != 0;
    advance(h, l); /* past a dropped batch at once: it holds nothing back (l is not ended) */
    return SL_OK;
}

sl_err_t sl_worker_order_hold_put(sl_worker_order_hold_t *h, const sl_worker_server_item_t *item,
                                  sl_error_t *err)
{
    olease_t *l = find(h, item->lease.handle);
    if (!l) return sl_error_set(err, SL_ERR_NOT_FOUND, "order hold: a batch of no held lease");
    /* cuts ascend by rows: a binary search for the one starting at from_row */
    uint32_t lo = 0, hi = l->num_cuts;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->cuts[mid].from < item->lease.from_row)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == l->num_cuts || l->cuts[lo].from != item->lease.from_row ||
        l->cuts[lo].to != item->lease.to_row || l->cuts[lo].state == CUT_DROPPED)
        return sl_error_set(err, SL_ERR_NOT_FOUND,
                            "order hold: split %" PRIu32 " has no kept batch of rows [%" PRIu64
                            ", %" PRIu64 ")",
                            l->split, item->lease.from_row, item->lease.to_row);
    if (l->cuts[lo].state != CUT_WAITING)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: split %" PRIu32 " batch %" PRIu32 " put twice", l->split,
                            lo);
    if (lo >= l->cap_items && !SL_GROW(h->a, l->items, l->cap_items, (size_t)lo + 1, 16))
        return sl_error_set(err, SL_ERR_NOMEM, "order hold: out of memory for a batch");
    l->items[lo] = *item;
    l->cuts[lo].state = CUT_HELD;
    l->held++;
    h->bytes += item->len;
    h->count++;
    return SL_OK;
}

sl_err_t sl_worker_order_hold_set_base(sl_worker_order_hold_t *h, void *lease, uint64_t base,
                                       sl_error_t *err)
{
    olease_t *l = find(h, lease);
    if (!l) return sl_error_set(err, SL_ERR_NOT_FOUND, "order hold: a base for no held lease");
    if (l->has_base && l->base != base)
        return sl_error_set(err, SL_ERR_INVALID,
                            "order hold: split %" PRIu32 " given base %" PRIu64
                            " after base %" PRIu64,
                            l->split, base, l->base);
    l->has_base = true;
    l->base = base;
    return SL_OK;
}

bool sl_worker_order_hold_pop(sl_worker_order_hold_t *h, sl_worker_server_item_t *out)
{
    /* The lowest g still to come among leases whose base is known goes
     * first, or nothing does: a batch still being encoded (or not cut yet)
     * holds back every higher g of this worker, so each rank's batches
     * leave in g order. (A split's base is known only once every split
     * before it is counted, whole, so no batch of a lease of unknown base
     * has a lower g than one sent. A split counted at its cut (det28h) and
     * leased again after a kill has its base at the grant: its lower g's
     * go first from here on, and take their place in the rank queues,
     * which are kept in g order: server.c dpp_server_g_later.) */
    olease_t *best = NULL;
    for (uint32_t i = 0; i < h->num_leases; i++) {
        olease_t *l = &h->leases[i];
        if (l->has_base && (!best || l->base + l->next < best->base + best->next)) best = l;
    }
    if (!best || best->next >= best->num_cuts || best->cuts[best->next].state != CUT_HELD)
        return false;
    uint64_t g = best->base + best->next;
    *out = best->items[best->next];
    out->lease.order_g_plus_one = g + 1;
    out->lease.rank_plus_one = (uint32_t)(g % h->ranks) + 1;
    best->cuts[best->next].state = CUT_SENT;
    best->held--;
    h->bytes -= out->len;
    h->count--;
    advance(h, best);
    return true;
}

bool sl_worker_order_hold_next_g(const sl_worker_order_hold_t *h, uint64_t *g)
{
    bool any = false;
    for (uint32_t i = 0; i < h->num_leases; i++) {
        const olease_t *l = &h->leases[i];
        /* an ended lease with every cut gone has no batch to come */
        if (!l->has_base || (l->ended && l->next >= l->num_cuts)) continue;
        if (!any || l->base + l->next < *g) *g = l->base + l->next;
        any = true;
    }
    return any;
}

sl_err_t sl_worker_order_hold_end(sl_worker_order_hold_t *h, void *lease, uint64_t *batches,
                                  sl_error_t *err)
{
    olease_t *l = find(h, lease);
    if (!l) return sl_error_set(err, SL_ERR_NOT_FOUND, "order hold: the end of no held lease");
    *batches = l->num_cuts;
    l->ended = true;
    advance(h, l);
    return SL_OK;
}

bool sl_worker_order_hold_take(sl_worker_order_hold_t *h, void *lease, sl_worker_server_item_t *out)
{
    olease_t *l = find(h, lease);
    if (!l) return false;
    for (uint32_t k = l->next; l->held && k < l->num_cuts; k++)
        if (l->cuts[k].state == CUT_HELD) {
            *out = l->items[k];
            l->cuts[k].state = CUT_SENT;
            l->held--;
            h->bytes -= out->len;
            h->count--;
            return true;
        }
    forget(h, l);
    return false;
}

bool sl_worker_order_hold_take_any(sl_worker_order_hold_t *h, sl_worker_server_item_t *out)
{
    while (h->num_leases)
        if (sl_worker_order_hold_take(h, h->leases[0].handle, out)) return true;
    return false;
}

bool sl_worker_order_hold_has(const sl_worker_order_hold_t *h, const void *lease)
{
    for (uint32_t i = 0; i < h->num_leases; i++)
        if (h->leases[i].handle == lease) return true;
    return false;
}

uint32_t sl_worker_order_hold_leases(const sl_worker_order_hold_t *h)
{
    return h->num_leases;
}

uint64_t sl_worker_order_hold_bytes(const sl_worker_order_hold_t *h)
{
    return h->bytes;
}

uint64_t sl_worker_order_hold_count(const sl_worker_order_hold_t *h)
{
    return h->count;
}
