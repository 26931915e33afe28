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
 * scaling down one worker at a time. Pure logic: no clock, no threads.
 *
 * Over jobs, sl_master_autoscale_fair_share splits a bounded fleet between
 * the jobs' desired counts. */
#ifndef SLUICE_DPP_MASTER_AUTOSCALE_H
#define SLUICE_DPP_MASTER_AUTOSCALE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_master_autoscale_opts {
    uint32_t min_workers, max_workers; /* bounds, min >= 1 */
    double stall_high;                 /* trainer wait fraction that means "short of data" (0.05) */
    double busy_high;                  /* worker busy fraction that means "saturated" (0.75) */
    double busy_low;                   /* worker busy fraction that means "idle" (0.30) */
    uint32_t up_after;                 /* consecutive observations before scaling up (2) */
    uint32_t down_after;               /* consecutive observations before scaling down (5) */
    uint64_t cooldown_ns;              /* at least this long between changes (10 s) */
} sl_master_autoscale_opts_t;

/* Defaults above, with the given bounds. */
sl_master_autoscale_opts_t sl_master_autoscale_opts_default(uint32_t min_workers,
                                                            uint32_t max_workers);

typedef struct sl_master_autoscale_observation {
    uint64_t now_ns;
    double trainer_wait; /* fraction of the last interval trainers waited, 0..1 */
    double worker_busy;  /* mean fraction of the interval workers were busy, 0..1 */
    uint32_t workers;    /* workers running now */
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

/* Fair share of the fleet: what each job may run when max_fleet_workers
 * bounds the workers of all jobs together. Each job has desired workers
 * (0: finished) and a min_workers. When max_fleet_workers is 0 or the
 * desired counts sum to at most it, every job is granted its desired
 * count. Otherwise the counts are scaled down in proportion to the
 * desired ones (granted = desired * r for one ratio r < 1), never below a
 * job's min_workers (nor above its desired count), so that they sum to
 * max_fleet_workers; the workers left by rounding down go one each to the
 * largest fractions, ties to the lower job id (strcmp). When the
 * min_workers alone exceed max_fleet_workers, each job gets its minimum
 * (the bound then is the sum of the minimums). Pure: sets jobs[i].granted. */
typedef struct sl_master_autoscale_share {
    const char *job_id; /* borrowed; breaks ties */
    uint32_t desired, min_workers;
    uint32_t granted; /* out */
} sl_master_autoscale_share_t;
void sl_master_autoscale_fair_share(sl_master_autoscale_share_t *jobs, uint32_t n,
                                    uint32_t max_fleet_workers);

#endif
