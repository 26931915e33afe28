/* The deterministic order's reorder buffer (reorder.h): a ring of cap
 * slots, slot (g - next) / ranks from the head. */
#include "trainer/reorder.h"

#include <inttypes.h>

#include "common/assert.h"

struct tr_reorder {
    const sl_allocator_t *a;
    uint32_t rank, ranks, cap;
    uint32_t head; /* slot of next */
    uint32_t held;
    uint64_t next;
    void **slot; /* [cap]; NULL: empty */
};

sl_err_t tr_reorder_new(uint32_t rank, uint32_t ranks, uint32_t cap, const sl_allocator_t *a,
                        tr_reorder_t **out, sl_error_t *err)
{
    *out = NULL;
    if (ranks == 0 || rank >= ranks || cap == 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "reorder buffer: rank %u of %u ranks, %u batches (rank < ranks, "
                            "batches > 0)",
                            rank, ranks, cap);
    tr_reorder_t *q = sl_calloc(a, 1, sizeof *q);
    void **slot = q != NULL ? sl_calloc(a, cap, sizeof *slot) : NULL;
    if (slot == NULL) {
        sl_free(a, q, sizeof *q);
        return sl_error_set(err, SL_ERR_NOMEM, "reorder buffer of %u batches", cap);
    }
    *q = (tr_reorder_t){
        .a = a, .rank = rank, .ranks = ranks, .cap = cap, .next = rank, .slot = slot};
    *out = q;
    return SL_OK;
}

void tr_reorder_destroy(tr_reorder_t *q)
{
    if (q == NULL) return;
    sl_free(q->a, q->slot, (size_t)q->cap * sizeof *q->slot);
    sl_free(q->a, q, sizeof *q);
}

sl_err_t tr_reorder_start(tr_reorder_t *q, uint64_t first, sl_error_t *err)
{
    if (q->held > 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "reorder buffer: a new sequence from g %" PRIu64
                            " while %u batches are held",
                            first, q->held);
    if (first % q->ranks != q->rank)
        return sl_error_set(err, SL_ERR_INVALID,
                            "reorder buffer: g %" PRIu64 " is rank %" PRIu64 "'s of %u, not %u's",
                            first, first % q->ranks, q->ranks, q->rank);
    q->next = first;
    q->head = 0;
    return SL_OK;
}

sl_err_t tr_reorder_put(tr_reorder_t *q, uint64_t g, void *item, sl_error_t *err)
{
    if (item == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "reorder buffer: batch g %" PRIu64 " is NULL", g);
    if (g % q->ranks != q->rank)
        return sl_error_set(err, SL_ERR_INVALID,
                            "reorder buffer: batch g %" PRIu64 " is rank %" PRIu64
                            "'s of %u, not %u's",
                            g, g % q->ranks, q->ranks, q->rank);
    if (g < q->next)
        return sl_error_set(err, SL_ERR_INVALID,
                            "reorder buffer: batch g %" PRIu64
                            " was handed out already (next is %" PRIu64 ")",
                            g, q->next);
    uint64_t ahead = (g - q->next) / q->ranks;
    if (ahead >= q->cap)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "reorder buffer: batch g %" PRIu64 " is %" PRIu64
                            " batches past next %" PRIu64 ", the buffer holds %u",
                            g, ahead, q->next, q->cap);
    uint32_t at = (uint32_t)((q->head + ahead) % q->cap);
    if (q->slot[at] != NULL)
        return sl_error_set(err, SL_ERR_INVALID, "reorder buffer: batch g %" PRIu64 " twice", g);
    q->slot[at] = item;
    q->held++;
    return SL_OK;
}

void *tr_reorder_take(tr_reorder_t *q)
{
    void *item = q->slot[q->head];
    if (item == NULL) return NULL;
    q->slot[q->head] = NULL;
    q->head = (q->head + 1) % q->cap;
    q->next += q->ranks;
    q->held--;
    SL_ASSERT(q->held < q->cap, "%u held of %u", q->held, q->cap);
    return item;
}

void *tr_reorder_pop_any(tr_reorder_t *q)
{
    for (uint32_t i = 0; q->held > 0 && i < q->cap; i++)
        if (q->slot[i] != NULL) {
            void *item = q->slot[i];
            q->slot[i] = NULL;
            q->held--;
            return item;
        }
    return NULL;
}

uint64_t tr_reorder_next(const tr_reorder_t *q)
{
    return q->next;
}

uint32_t tr_reorder_held(const tr_reorder_t *q)
{
    return q->held;
}

void *tr_reorder_slot(const tr_reorder_t *q, uint32_t i)
{
    return i < q->cap ? q->slot[i] : NULL;
}

uint32_t tr_reorder_cap(const tr_reorder_t *q)
{
    return q->cap;
}
