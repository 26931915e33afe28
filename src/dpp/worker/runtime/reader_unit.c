/* Checks on a unit of work the reader thread takes (worker.h, source.h),
 * on one thread or the lanes': may its rows still be read, and are its
 * todo ranges well formed. */
#include <inttypes.h>

#include "common/err.h"
#include "dpp/worker/runtime/reader_internal.h"

/* May the rows of wk still be read (a lease not revoked, or no lease)? */
bool dpp_reader_work_live(const sl_worker_t *w, const sl_worker_work_t *wk)
{
    return !wk->lease || !w->source.lease_live || w->source.lease_live(w->source.ctx, wk->lease);
}

/* Are wk's todo ranges ascending, disjoint, non-empty and inside its
 * split (source.h)? */
sl_err_t dpp_reader_check_todo(const sl_worker_work_t *wk, sl_error_t *err)
{
    const sl_wh_split_t *sp = wk->split;
    const sl_dpp_row_range_t *todo = wk->todo;
    for (uint32_t i = 0; i < wk->num_todo; i++)
        if (todo[i].from_row >= todo[i].to_row || todo[i].to_row > sp->num_rows ||
            (i && todo[i].from_row < todo[i - 1].to_row))
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "%s %" PRIu64 ": todo range %u [%" PRIu64 ", %" PRIu64
                                ") is empty, out of order or past the split's %" PRIu64 " rows",
                                wk->lease ? "lease of split" : "split", wk->split_id, i,
                                todo[i].from_row, todo[i].to_row, sp->num_rows);
    return SL_OK;
}
