/* The autoscaler's decision: how many workers a job needs, from what the
 * trainers report (the fraction of time they wait for data) and what the
 * workers report (the fraction of time their stages are busy).
 *
 *  - trainers wait and workers are busy   -> the job is short of workers: up
 *  - workers idle (busy < busy_low) and trainers do not wait -> too many: down
 *  - trainers wait but workers are idle   -> the bottleneck is elsewhere
 *    (network, the trainers' own reading): no change
 *
 * Hysteresis: a change needs the condition on `up_after` (`down_after`)
 * consecutive observations and at least `cooldown_ns` since the last change,
 * so the count does not flap while a new worker warms up. Scaling up is
 * proportional to the stall (more workers at once when trainers mostly wait),
 * scaling down one worker at a time. Pure logic: no clock, no threads. */
#ifndef SLUICE_DPP_MASTER_AUTOSCALE_H
#define SLUICE_DPP_MASTER_AUTOSCALE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_master_autoscale_opts {
    uint32_t min_workers, max_workers; /* bounds, min >= 1 */
    double stall_high;    /* trainer wait fraction that means "short of data" (0.05) */
    double busy_high;     /* worker busy fraction that means "saturated" (0.75) */
    double busy_low;      /* worker busy fraction that means "idle" (0.30) */
    uint32_t up_after;    /* consecutive observations before scaling up (2) */
    uint32_t down_after;  /* consecutive observations before scaling down (5) */
    uint64_t cooldown_ns; /* at least this long between changes (10 s) */
} sl_master_autoscale_opts_t;

/* Defaults above, with the given bounds. */
sl_master_autoscale_opts_t sl_master_autoscale_opts_default(uint32_t min_workers,
                                                            uint32_t max_workers);

typedef struct sl_master_autoscale_observation {
    uint64_t now_ns;
    double trainer_wait;  /* fraction of the last interval trainers waited, 0..1 */
    double worker_busy;   /* mean fraction of the interval workers were busy, 0..1 */
    uint32_t workers;     /* workers running now */
} sl_master_autoscale_observation_t;

typedef struct sl_master_autoscaler {
    sl_master_autoscale_opts_t opts;
    uint32_t desired;
    uint32_t up_streak, down_streak;
    uint64_t last_change_ns;
    int changed_once;
    char reason[160]; /* why desired is what it is, for /status and logs */
} sl_master_autoscaler_t;

void sl_master_autoscale_init(sl_master_autoscaler_t *as, const sl_master_autoscale_opts_t *opts,
                              uint32_t initial);

/* Feed one observation. @return the desired worker count (within bounds). */
uint32_t sl_master_autoscale_observe(sl_master_autoscaler_t *as,
                                     const sl_master_autoscale_observation_t *obs);

/* Set the desired count by hand (POST /jobs/{id}/scale), clamped to the
 * bounds; resets the streaks and starts a cooldown. @return the count set. */
uint32_t sl_master_autoscale_override(sl_master_autoscaler_t *as, uint32_t workers,
                                      uint64_t now_ns);

#endif
