/* A job's recent past: rings of points and decisions (history.h). */
#include "dpp/master/process/history.h"

#include <stdio.h>
#include <string.h>

void sl_master_history_init(sl_master_history_t *h, uint64_t interval_ms)
{
    memset(h, 0, sizeof *h);
    h->interval_ms = interval_ms > 0 ? interval_ms : 10000;
}

static double rate(uint64_t now, uint64_t then, uint64_t after, uint64_t before)
{
    return now > then && after >= before ? (double)(after - before) * 1000.0 / (double)(now - then)
                                         : 0.0;
}

void sl_master_history_tick(sl_master_history_t *h, const sl_master_history_input_t *in)
{
    if (!h->started) { /* the first look: rates start from here */
        h->started = true;
        h->tick_ms = h->point_ms = in->mono_ms;
        h->tick_samples = h->point_samples = in->samples;
        h->tick_rows = h->point_rows = in->rows;
        return;
    }
    if (in->mono_ms > h->tick_ms) {
        h->samples_per_s = rate(in->mono_ms, h->tick_ms, in->samples, h->tick_samples);
        h->rows_per_s = rate(in->mono_ms, h->tick_ms, in->rows, h->tick_rows);
        h->tick_ms = in->mono_ms;
        h->tick_samples = in->samples;
        h->tick_rows = in->rows;
    }
    if (in->mono_ms - h->point_ms < h->interval_ms) return;
    uint32_t at = (h->head + h->count) % SL_MASTER_HISTORY_MAX_POINTS;
    if (h->count == SL_MASTER_HISTORY_MAX_POINTS)
        h->head = (h->head + 1) % SL_MASTER_HISTORY_MAX_POINTS;
    else
        h->count++;
    h->points[at] = (sl_master_history_point_t){
        .wall_ms = in->wall_ms,
        .samples_per_s = (float)rate(in->mono_ms, h->point_ms, in->samples, h->point_samples),
        .rows_per_s = (float)rate(in->mono_ms, h->point_ms, in->rows, h->point_rows),
        .trainer_wait = in->trainer_wait,
        .worker_busy = in->worker_busy,
        .dedup_factor = in->dedup_factor,
        .workers = in->workers,
        .desired = in->desired};
    h->point_ms = in->mono_ms;
    h->point_samples = in->samples;
    h->point_rows = in->rows;
}

void sl_master_history_decide(sl_master_history_t *h, int64_t wall_ms, uint32_t from, uint32_t to,
                              const char *by, const char *reason)
{
    uint32_t at = (h->dhead + h->dcount) % SL_MASTER_HISTORY_MAX_DECISIONS;
    if (h->dcount == SL_MASTER_HISTORY_MAX_DECISIONS)
        h->dhead = (h->dhead + 1) % SL_MASTER_HISTORY_MAX_DECISIONS;
    else
        h->dcount++;
    sl_master_history_decision_t *d = &h->decisions[at];
    d->wall_ms = wall_ms;
    d->from = from;
    d->to = to;
    snprintf(d->by, sizeof d->by, "%s", by != NULL ? by : "");
    snprintf(d->reason, sizeof d->reason, "%s", reason != NULL ? reason : "");
}

const sl_master_history_point_t *sl_master_history_point(const sl_master_history_t *h, uint32_t i)
{
    return &h->points[(h->head + i) % SL_MASTER_HISTORY_MAX_POINTS];
}

const sl_master_history_decision_t *sl_master_history_decision(const sl_master_history_t *h,
                                                               uint32_t i)
{
    return &h->decisions[(h->dhead + i) % SL_MASTER_HISTORY_MAX_DECISIONS];
}

double sl_master_history_eta_s(const sl_master_history_t *h, uint64_t rows_done,
                               uint64_t rows_total)
{
    /* the last minute's points when there are some: steadier than the
     * last second's rate */
    double r = 0;
    uint32_t n = 0;
    for (uint32_t i = h->count; i > 0 && n < 6; i--, n++)
        r += sl_master_history_point(h, i - 1)->rows_per_s;
    r = n > 0 ? r / n : h->rows_per_s;
    if (r <= 0 || rows_total == 0 || rows_done >= rows_total) return -1;
    return (double)(rows_total - rows_done) / r;
}
