/* Autoscaler decision with hysteresis, and the fleet's fair share over
 * jobs (autoscale.h). */
#include "dpp/master/autoscale/autoscale.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

sl_master_autoscale_opts_t sl_master_autoscale_opts_default(uint32_t min_workers,
                                                            uint32_t max_workers)
{
    if (min_workers < 1) min_workers = 1;
    if (max_workers < min_workers) max_workers = min_workers;
    return (sl_master_autoscale_opts_t){.min_workers = min_workers,
                                        .max_workers = max_workers,
                                        .stall_high = 0.05,
                                        .busy_high = 0.75,
                                        .busy_low = 0.30,
                                        .up_after = 2,
                                        .down_after = 5,
                                        .cooldown_ns = 10ull * 1000000000ull};
}

static uint32_t clamp_count(const sl_master_autoscale_opts_t *o, int64_t n)
{
    if (n < (int64_t)o->min_workers) return o->min_workers;
    if (n > (int64_t)o->max_workers) return o->max_workers;
    return (uint32_t)n;
}

void sl_master_autoscale_init(sl_master_autoscaler_t *as, const sl_master_autoscale_opts_t *opts,
                              uint32_t initial)
{
    memset(as, 0, sizeof *as);
    as->opts = *opts;
    if (as->opts.min_workers < 1) as->opts.min_workers = 1;
    if (as->opts.max_workers < as->opts.min_workers) as->opts.max_workers = as->opts.min_workers;
    as->desired = clamp_count(&as->opts, initial);
    snprintf(as->reason, sizeof as->reason, "initial count");
}

static double clamp01(double v)
{
    if (!(v >= 0)) return 0; /* NaN too */
    return v > 1 ? 1 : v;
}

uint32_t sl_master_autoscale_observe(sl_master_autoscaler_t *as,
                                     const sl_master_autoscale_observation_t *obs)
{
    const sl_master_autoscale_opts_t *o = &as->opts;
    double wait = clamp01(obs->trainer_wait), busy = clamp01(obs->worker_busy);
    bool short_of_workers = wait >= o->stall_high && busy >= o->busy_high;
    bool too_many = busy < o->busy_low && wait < o->stall_high;
    as->up_streak = short_of_workers ? as->up_streak + 1 : 0;
    as->down_streak = too_many ? as->down_streak + 1 : 0;
    bool cooled = !as->changed_once || obs->now_ns - as->last_change_ns >= o->cooldown_ns;
    /* Decisions start from the workers actually running, so a count the
     * executor could not reach is not compounded. */
    uint32_t base = obs->workers ? obs->workers : as->desired;
    if (short_of_workers && as->up_streak >= o->up_after && cooled) {
        /* Trainers waiting a fraction w of the time get data at (1 - w) of
         * their demand; with busy workers, throughput scales with workers,
         * so base / (1 - w) workers would feed them. At least one more. */
        double want = ceil((double)base / fmax(1.0 - wait, 0.05));
        uint32_t next = clamp_count(o, (int64_t)fmax(want, (double)base + 1));
        if (next != as->desired) {
            snprintf(as->reason, sizeof as->reason,
                     "scale up %u -> %u: trainers wait %.0f%%, workers busy %.0f%%", base, next,
                     wait * 100, busy * 100);
            as->desired = next;
            as->last_change_ns = obs->now_ns;
            as->changed_once = 1;
        }
        as->up_streak = 0;
    } else if (too_many && as->down_streak >= o->down_after && cooled) {
        uint32_t next = clamp_count(o, (int64_t)base - 1);
        if (next != as->desired) {
            snprintf(as->reason, sizeof as->reason,
                     "scale down %u -> %u: workers busy %.0f%%, trainers wait %.0f%%", base, next,
                     busy * 100, wait * 100);
            as->desired = next;
            as->last_change_ns = obs->now_ns;
            as->changed_once = 1;
        }
        as->down_streak = 0;
    } else if (wait >= o->stall_high && busy < o->busy_high) {
        snprintf(as->reason, sizeof as->reason,
                 "holding %u: trainers wait %.0f%% but workers are only %.0f%% busy "
                 "(the bottleneck is not the workers)",
                 as->desired, wait * 100, busy * 100);
    }
    return as->desired;
}

uint32_t sl_master_autoscale_override(sl_master_autoscaler_t *as, uint32_t workers, uint64_t now_ns)
{
    as->desired = clamp_count(&as->opts, workers);
    as->up_streak = as->down_streak = 0;
    as->last_change_ns = now_ns;
    as->changed_once = 1;
    snprintf(as->reason, sizeof as->reason, "set to %u by an operator", as->desired);
    return as->desired;
}

/* ---- fair share over jobs ---- */

/* Water-filling over one ratio r = rest / weight (exact, in integers):
 * rest is the fleet left after the jobs held at their minimum, weight the
 * desired counts of the others. A job whose proportional share
 * desired * r is below its minimum is held there, which lowers r for the
 * rest; repeat until no job changes (at most n rounds). */
void sl_master_autoscale_fair_share(sl_master_autoscale_share_t *jobs, uint32_t n,
                                    uint32_t max_fleet_workers)
{
    uint64_t want = 0, floor_sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        want += jobs[i].desired;
        jobs[i].granted = jobs[i].desired;
    }
    if (max_fleet_workers == 0 || want <= max_fleet_workers) return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = jobs[i].min_workers < jobs[i].desired ? jobs[i].min_workers : jobs[i].desired;
        floor_sum += lo;
        /* UINT32_MAX: shares the rest in proportion; else held at lo */
        jobs[i].granted = jobs[i].desired > lo ? UINT32_MAX : lo;
    }
    if (floor_sum >= max_fleet_workers) {
        for (uint32_t i = 0; i < n; i++)
            if (jobs[i].granted == UINT32_MAX) jobs[i].granted = jobs[i].min_workers;
        return;
    }
    uint64_t rest = 0, weight = 0;
    for (bool changed = true; changed;) {
        changed = false;
        rest = max_fleet_workers;
        weight = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (jobs[i].granted == UINT32_MAX)
                weight += jobs[i].desired;
            else
                rest -= jobs[i].granted;
        }
        for (uint32_t i = 0; i < n; i++)
            if (jobs[i].granted == UINT32_MAX &&
                (uint64_t)jobs[i].desired * rest < (uint64_t)jobs[i].min_workers * weight) {
                jobs[i].granted = jobs[i].min_workers;
                changed = true;
            }
    }
    if (weight == 0) return;
    uint64_t given = 0;
    for (uint32_t i = 0; i < n; i++)
        if (jobs[i].granted == UINT32_MAX) {
            jobs[i].granted = (uint32_t)((uint64_t)jobs[i].desired * rest / weight);
            given += jobs[i].granted;
        }
    /* rest - given < the number of sharing jobs; one more each to the
     * largest remainders (same denominator), ties to the lower job id. A
     * sharing job has granted >= its minimum, a held one not (see above),
     * which tells them apart again. */
    for (uint64_t left = rest - given; left > 0; left--) {
        int64_t best = -1;
        uint64_t best_rem = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t num = (uint64_t)jobs[i].desired * rest;
            bool sharing = jobs[i].desired > jobs[i].min_workers &&
                           num >= (uint64_t)jobs[i].min_workers * weight;
            if (!sharing || jobs[i].granted != num / weight || jobs[i].granted >= jobs[i].desired)
                continue;
            uint64_t rem = num % weight;
            if (best < 0 || rem > best_rem ||
                (rem == best_rem && strcmp(jobs[i].job_id, jobs[best].job_id) < 0)) {
                best = i;
                best_rem = rem;
            }
        }
        if (best < 0) break;
        jobs[best].granted++;
    }
}
