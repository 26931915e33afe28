/* The table split source (source.h): a table's splits, each read whole,
 * epoch after epoch, in table order or in a permutation drawn from (seed,
 * epoch). No leases: the rows are this worker's alone (sluice worker
 * --job, sluice read). */
#include "dpp/worker/source/source.h"

typedef struct local_source {
    const sl_wh_splits_t *splits;
    const sl_allocator_t *a;
    uint32_t epochs, epoch, next;
    bool shuffle;
    uint64_t seed;
    uint32_t *order;          /* [splits->count] order of this epoch */
    sl_dpp_row_range_t whole; /* the todo of the split handed out last: all its rows */
} local_source_t;

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void local_order(local_source_t *s)
{
    uint32_t n = s->splits->count;
    for (uint32_t i = 0; i < n; i++)
        s->order[i] = i;
    if (!s->shuffle) return;
    uint64_t st = mix64(s->seed ^ mix64(0x5eed0000ull + s->epoch));
    for (uint32_t i = n; i > 1; i--) {
        st = mix64(st);
        uint32_t j = (uint32_t)(st % i);
        uint32_t t = s->order[i - 1];
        s->order[i - 1] = s->order[j];
        s->order[j] = t;
    }
}

static sl_err_t local_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    (void)err;
    local_source_t *s = ctx;
    uint32_t n = s->splits->count;
    if (n == 0) return SL_ERR_CLOSED;
    if (s->next == n) {
        s->epoch++;
        s->next = 0;
        if (s->epoch < s->epochs) local_order(s);
    }
    if (s->epoch >= s->epochs) return SL_ERR_CLOSED;
    uint32_t i = s->order[s->next++];
    s->whole = (sl_dpp_row_range_t){0, s->splits->items[i].num_rows};
    *out = (sl_worker_work_t){.split = &s->splits->items[i],
                              .epoch = s->epoch,
                              .split_id = i,
                              .todo = &s->whole,
                              .num_todo = s->whole.to_row > 0}; /* no rows: nothing to read */
    return SL_OK;
}

/* Within the epoch only: the next epoch's order is drawn when it begins. */
static const sl_wh_split_t *local_peek(void *ctx, uint32_t i)
{
    local_source_t *s = ctx;
    uint32_t n = s->splits->count;
    if (s->epoch >= s->epochs || s->next >= n || i >= n - s->next) return NULL;
    return &s->splits->items[s->order[s->next + i]];
}

static void local_destroy(void *ctx)
{
    local_source_t *s = ctx;
    if (!s) return;
    sl_free(s->a, s->order, (size_t)(s->splits->count ? s->splits->count : 1) * sizeof *s->order);
    sl_free(s->a, s, sizeof *s);
}

sl_err_t sl_worker_source_table_new(const sl_wh_splits_t *splits, uint32_t epochs, bool shuffle,
                                    uint64_t seed, const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err)
{
    local_source_t *s = sl_calloc(a, 1, sizeof *s);
    if (!s) return sl_error_set(err, SL_ERR_NOMEM, "split source: out of memory");
    s->splits = splits;
    s->a = a;
    s->epochs = epochs;
    s->shuffle = shuffle;
    s->seed = seed;
    s->order = sl_calloc(a, splits->count ? splits->count : 1, sizeof *s->order);
    if (!s->order) {
        sl_free(a, s, sizeof *s);
        return sl_error_set(err, SL_ERR_NOMEM, "split source: out of memory");
    }
    local_order(s);
    *out = (sl_worker_source_t){
        .next = local_next, .done = NULL, .peek = local_peek, .destroy = local_destroy, .ctx = s};
    return SL_OK;
}
