/* A job's recent past on the master, for operators who arrive at an
 * incident: a bounded ring of points (samples/s, rows/s, trainer wait,
 * worker busy, dedup factor, workers) taken every interval, and a ring of
 * the autoscaler's decisions. Fixed size (no allocation): MAX_POINTS
 * points (an hour at the default 10 s) and MAX_DECISIONS decisions per
 * job, whatever the load. Pure bookkeeping: the master process feeds it
 * under its lock, the admin endpoint reads it (admin.c makes the JSON). */
#ifndef SLUICE_DPP_MASTER_HISTORY_H
#define SLUICE_DPP_MASTER_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#define SL_MASTER_HISTORY_MAX_POINTS 360
#define SL_MASTER_HISTORY_MAX_DECISIONS 32

typedef struct sl_master_history_point {
    int64_t wall_ms;                 /* when (Unix ms), for a person's clock */
    float samples_per_s, rows_per_s; /* over the interval that ends here */
    float trainer_wait, worker_busy; /* the last autoscaler observation, 0..1 */
    float dedup_factor;              /* bytes without dedup per byte sent so far */
    uint16_t workers, desired;       /* connected now; the autoscaler's count */
} sl_master_history_point_t;

typedef struct sl_master_history_decision {
    int64_t wall_ms;
    uint32_t from, to;
    char by[16];      /* "autoscaler", "scale" (an operator), ... */
    char reason[112]; /* cut to fit */
} sl_master_history_decision_t;

/* What the job looks like at one tick (sl_master_history_tick). */
typedef struct sl_master_history_input {
    uint64_t mono_ms; /* the one clock (common/clock.h), for rates */
    int64_t wall_ms;
    uint64_t samples; /* delivered so far, every epoch */
    uint64_t rows;    /* rows done so far, every epoch (epoch x rows + committed) */
    float trainer_wait, worker_busy, dedup_factor;
    uint16_t workers, desired;
} sl_master_history_input_t;

typedef struct sl_master_history {
    sl_master_history_point_t points[SL_MASTER_HISTORY_MAX_POINTS];
    uint32_t head, count; /* points[(head + i) % MAX]: oldest first */
    sl_master_history_decision_t decisions[SL_MASTER_HISTORY_MAX_DECISIONS];
    uint32_t dhead, dcount;
    /* rates: since the previous tick (the figures of GET /jobs) */
    bool started; /* looked at once: the rates below have a start */
    uint64_t tick_ms, tick_samples, tick_rows;
    double samples_per_s, rows_per_s;
    /* the point being made: where its interval began */
    uint64_t point_ms, point_samples, point_rows;
    uint64_t interval_ms;
} sl_master_history_t;

/* Start an empty history taking a point every interval_ms (0: 10000). */
void sl_master_history_init(sl_master_history_t *h, uint64_t interval_ms);

/* One look at the job (the master's autoscaler period, about a second):
 * updates the current rates, and appends a point when interval_ms has
 * passed since the last one (the oldest is dropped when full). */
void sl_master_history_tick(sl_master_history_t *h, const sl_master_history_input_t *in);

/* An autoscaler decision (or an operator's scale): from -> to, by whom
 * and why (reason may be NULL). The oldest is dropped when full. */
void sl_master_history_decide(sl_master_history_t *h, int64_t wall_ms, uint32_t from, uint32_t to,
                              const char *by, const char *reason);

/* The i-th point, oldest first (i < h->count); the i-th decision (i <
 * h->dcount). */
const sl_master_history_point_t *sl_master_history_point(const sl_master_history_t *h, uint32_t i);
const sl_master_history_decision_t *sl_master_history_decision(const sl_master_history_t *h,
                                                               uint32_t i);

/* Seconds until rows_total rows are done at the current rate; < 0 when it
 * cannot be told (no rate yet, nothing left, no end: a stream). */
double sl_master_history_eta_s(const sl_master_history_t *h, uint64_t rows_done,
                               uint64_t rows_total);

#endif
