/* Autoscaler decisions (src/dpp/master/autoscale/autoscale.c): up while trainers wait and
 * workers are busy, down when workers idle, hold when the bottleneck is
 * elsewhere, hysteresis (streaks and cooldown), bounds, operator override. */
#include <criterion/criterion.h>

#include <string.h>

#include "dpp/master/autoscale/autoscale.h"

#define SEC 1000000000ull

static uint32_t feed(sl_master_autoscaler_t *as, uint64_t *now, int times, double wait, double busy)
{
    uint32_t d = as->desired;
    for (int i = 0; i < times; i++) {
        *now += SEC;
        sl_master_autoscale_observation_t o = {
            .now_ns = *now, .trainer_wait = wait, .worker_busy = busy, .workers = as->desired};
        d = sl_master_autoscale_observe(as, &o);
    }
    return d;
}

Test(autoscale, rises_to_the_bound_while_trainers_wait_on_busy_workers)
{
    sl_master_autoscale_opts_t o = sl_master_autoscale_opts_default(1, 6);
    o.cooldown_ns = 3 * SEC;
    sl_master_autoscaler_t as;
    sl_master_autoscale_init(&as, &o, 1);
    uint64_t now = 0;
    cr_assert_eq(feed(&as, &now, 1, 0.6, 0.95), 1, "one observation is not enough");
    cr_assert_gt(feed(&as, &now, 1, 0.6, 0.95), 1);
    cr_assert(strstr(as.reason, "scale up"), "%s", as.reason);
    uint32_t after_first = as.desired;
    cr_assert_eq(feed(&as, &now, 2, 0.6, 0.95), after_first, "cooldown holds the count");
    cr_assert_eq(feed(&as, &now, 20, 0.6, 0.95), 6);
}

Test(autoscale, proportional_step)
{
    sl_master_autoscale_opts_t o = sl_master_autoscale_opts_default(1, 64);
    sl_master_autoscaler_t as;
    sl_master_autoscale_init(&as, &o, 4);
    uint64_t now = 0;
    /* Trainers waiting 50 % of the time: 4 workers give half the demand. */
    cr_assert_eq(feed(&as, &now, 2, 0.5, 0.9), 8);
    sl_master_autoscale_init(&as, &o, 4);
    cr_assert_eq(feed(&as, &now, 2, 0.06, 0.9), 5, "a small stall adds one worker");
}

Test(autoscale, falls_when_workers_idle_one_at_a_time)
{
    sl_master_autoscale_opts_t o = sl_master_autoscale_opts_default(2, 8);
    o.cooldown_ns = 0;
    sl_master_autoscaler_t as;
    sl_master_autoscale_init(&as, &o, 8);
    uint64_t now = 0;
    cr_assert_eq(feed(&as, &now, 4, 0.0, 0.1), 8, "down needs 5 observations");
    cr_assert_eq(feed(&as, &now, 1, 0.0, 0.1), 7);
    cr_assert(strstr(as.reason, "scale down"), "%s", as.reason);
    cr_assert_eq(feed(&as, &now, 100, 0.0, 0.1), 2, "never below the lower bound");
}

Test(autoscale, holds_when_the_bottleneck_is_elsewhere_or_signals_flap)
{
    sl_master_autoscale_opts_t o = sl_master_autoscale_opts_default(1, 8);
    o.cooldown_ns = 0;
    sl_master_autoscaler_t as;
    sl_master_autoscale_init(&as, &o, 3);
    uint64_t now = 0;
    cr_assert_eq(feed(&as, &now, 10, 0.8, 0.2), 3);
    cr_assert(strstr(as.reason, "bottleneck"), "%s", as.reason);
    for (int i = 0; i < 20; i++) {
        feed(&as, &now, 1, 0.6, 0.9); /* up condition once */
        feed(&as, &now, 1, 0.0, 0.5); /* then neither */
    }
    cr_assert_eq(as.desired, 3, "alternating signals never complete a streak");
}

Test(autoscale, override_and_bad_inputs)
{
    sl_master_autoscale_opts_t o = sl_master_autoscale_opts_default(2, 5);
    sl_master_autoscaler_t as;
    sl_master_autoscale_init(&as, &o, 0);
    cr_assert_eq(as.desired, 2, "initial count clamped to the bounds");
    cr_assert_eq(sl_master_autoscale_override(&as, 100, 0), 5);
    cr_assert(strstr(as.reason, "operator"), "%s", as.reason);
    uint64_t now = 0;
    cr_assert_eq(feed(&as, &now, 3, 0.0 / 0.0, 2.0), 5, "NaN and >1 are clamped, no change");
}
