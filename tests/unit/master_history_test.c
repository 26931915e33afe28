/* A job's history on the master (src/dpp/master/process/history.h): rates between
 * looks, a point per interval with the interval's rates, the ring's bound
 * (oldest dropped), decisions, and the time left. */
#include <criterion/criterion.h>
#include <string.h>

#include "dpp/master/process/history.h"

static sl_master_history_input_t at(uint64_t ms, uint64_t samples, uint64_t rows)
{
    return (sl_master_history_input_t){.mono_ms = ms,
                                       .wall_ms = 1700000000000 + (int64_t)ms,
                                       .samples = samples,
                                       .rows = rows,
                                       .trainer_wait = 0.25f,
                                       .worker_busy = 0.5f,
                                       .dedup_factor = 4.0f,
                                       .workers = 2,
                                       .desired = 3};
}

Test(master_history, rates_points_and_the_ring_bound)
{
    static sl_master_history_t h;
    sl_master_history_init(&h, 10000);
    sl_master_history_input_t in = at(1000, 0, 0);
    sl_master_history_tick(&h, &in); /* the first look only starts the clocks */
    cr_assert_eq(h.count, 0);
    cr_assert_float_eq(h.samples_per_s, 0.0, 1e-9);
    in = at(2000, 5000, 6000);
    sl_master_history_tick(&h, &in);
    cr_assert_float_eq(h.samples_per_s, 5000.0, 1e-6);
    cr_assert_float_eq(h.rows_per_s, 6000.0, 1e-6);
    cr_assert_eq(h.count, 0, "no point before the interval passed");
    in = at(11000, 20000, 30000); /* 10 s after the first look: a point */
    sl_master_history_tick(&h, &in);
    cr_assert_eq(h.count, 1);
    const sl_master_history_point_t *p = sl_master_history_point(&h, 0);
    cr_assert_float_eq(p->samples_per_s, 2000.0f, 1e-3); /* 20000 over the 10 s */
    cr_assert_float_eq(p->rows_per_s, 3000.0f, 1e-3);
    cr_assert_eq(p->wall_ms, 1700000011000);
    cr_assert_eq(p->workers, 2);
    cr_assert_eq(p->desired, 3);
    cr_assert_float_eq(p->dedup_factor, 4.0f, 1e-6);
    cr_assert_float_eq(h.samples_per_s, 15000.0 / 9.0, 1e-6); /* since the last look */

    /* past the bound, the oldest go: MAX points stay, the newest last */
    uint64_t ms = 11000, samples = 20000;
    for (uint32_t i = 0; i < SL_MASTER_HISTORY_MAX_POINTS + 5; i++) {
        ms += 10000;
        samples += 1000 * (i + 1);
        in = at(ms, samples, samples);
        sl_master_history_tick(&h, &in);
    }
    cr_assert_eq(h.count, SL_MASTER_HISTORY_MAX_POINTS);
    const sl_master_history_point_t *last =
        sl_master_history_point(&h, SL_MASTER_HISTORY_MAX_POINTS - 1);
    cr_assert_eq(last->wall_ms, 1700000000000 + (int64_t)ms);
    cr_assert_float_eq(last->samples_per_s, 100.0f * (SL_MASTER_HISTORY_MAX_POINTS + 5), 1e-2);
    const sl_master_history_point_t *first = sl_master_history_point(&h, 0);
    cr_assert_eq(first->wall_ms, last->wall_ms - 10000 * (SL_MASTER_HISTORY_MAX_POINTS - 1));
}

Test(master_history, decisions_are_bounded_and_cut_to_fit)
{
    static sl_master_history_t h;
    sl_master_history_init(&h, 0);
    cr_assert_eq(h.interval_ms, 10000);
    char reason[300];
    memset(reason, 'r', sizeof reason - 1);
    reason[sizeof reason - 1] = '\0';
    for (uint32_t i = 0; i < SL_MASTER_HISTORY_MAX_DECISIONS + 3; i++)
        sl_master_history_decide(&h, 1000 * i, i, i + 1, "autoscaler", i == 10 ? reason : "wait");
    cr_assert_eq(h.dcount, SL_MASTER_HISTORY_MAX_DECISIONS);
    const sl_master_history_decision_t *d = sl_master_history_decision(&h, 0);
    cr_assert_eq(d->from, 3); /* the three oldest went */
    cr_assert_eq(d->to, 4);
    cr_assert_str_eq(d->by, "autoscaler");
    d = sl_master_history_decision(&h, SL_MASTER_HISTORY_MAX_DECISIONS - 1);
    cr_assert_eq(d->from, SL_MASTER_HISTORY_MAX_DECISIONS + 2);
    cr_assert_eq(strlen(d->reason), 0 + strlen("wait"));
    d = sl_master_history_decision(&h, 10 - 3);
    cr_assert_eq(strlen(d->reason), sizeof d->reason - 1);
}

Test(master_history, time_left)
{
    static sl_master_history_t h;
    sl_master_history_init(&h, 1000);
    cr_assert_lt(sl_master_history_eta_s(&h, 0, 1000), 0, "no rate yet");
    sl_master_history_input_t in = at(0, 0, 0);
    sl_master_history_tick(&h, &in);
    in = at(500, 0, 500); /* 1000 rows/s, no point yet: the last look's rate */
    sl_master_history_tick(&h, &in);
    cr_assert_float_eq(sl_master_history_eta_s(&h, 500, 10500), 10.0, 1e-9);
    in = at(1000, 0, 3000); /* a point: 3000 rows/s over its second */
    sl_master_history_tick(&h, &in);
    cr_assert_float_eq(sl_master_history_eta_s(&h, 3000, 9000), 2.0, 1e-6);
    cr_assert_lt(sl_master_history_eta_s(&h, 9000, 9000), 0, "nothing left");
    cr_assert_lt(sl_master_history_eta_s(&h, 0, 0), 0, "no end (a stream)");
}
