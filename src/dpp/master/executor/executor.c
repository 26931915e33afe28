/* The executor interface (executor.h): every call goes to the ops of the
 * executor's kind, but for the stats: a copy of the figures every kind
 * keeps in its header, taken here under the header's lock. */
#include "dpp/master/executor/executor.h"

#include "common/clock.h"

void sl_master_executor_destroy(sl_master_executor_t *ex)
{
    if (ex != NULL) ex->ops->destroy(ex);
}

sl_err_t sl_master_executor_scale(sl_master_executor_t *ex, const char *job_id, uint32_t workers,
                                  uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    return ex->ops->scale(ex, job_id, workers, started, stopped, err);
}

sl_err_t sl_master_executor_apply(sl_master_executor_t *ex,
                                  const sl_master_executor_target_t *targets, uint32_t n,
                                  uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    return ex->ops->apply(ex, targets, n, started, stopped, err);
}

uint32_t sl_master_executor_reap(sl_master_executor_t *ex)
{
    return ex->ops->reap(ex);
}

uint32_t sl_master_executor_count(sl_master_executor_t *ex, const char *job_id)
{
    return ex->ops->count(ex, job_id);
}

uint32_t sl_master_executor_list(sl_master_executor_t *ex, const char *job_id,
                                 sl_master_executor_worker_t *out, uint32_t cap)
{
    return ex->ops->list(ex, job_id, out, cap);
}

void sl_master_executor_stats(sl_master_executor_t *ex, sl_master_executor_stats_t *out)
{
    sl_mutex_lock(&ex->mu);
    if (ex->ops->refresh != NULL) ex->ops->refresh(ex, sl_clock_ms());
    *out = ex->stats;
    sl_mutex_unlock(&ex->mu);
    out->kind = ex->ops->kind;
}
