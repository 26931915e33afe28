/* Fair shares between ranks under dynamic sharding (issue 27): 32 trainer
 * ranks read one job from 2 workers that are the bottleneck (the trainers
 * take every batch at once), so that batches are scarce and the ranks'
 * clients compete for each one. Each worker hands its batches for any
 * rank to the client it has served least among those asking
 * (docs/WORKER.md "Fair shares"): every rank gets a share near the mean,
 * none starves while others are fed, and every sample arrives once. */
#include "fleet_util.h"

TestSuite(fleet_spread, .init = fu_setup, .fini = fu_teardown);

#define RANKS 32
#define ROWS 96000u

Test(fleet_spread, thirty_two_ranks_get_even_shares, .timeout = 240)
{
    fu_master_t m = {.lease_timeout_ms = 3000};
    /* stripes of 1000 rows, one split each, batches of 250: 384 batches,
     * 12 a rank on average */
    char *job = fu_job_up(&m, "spread", ROWS, 1, RANKS, "dynamic", 2);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    static fu_client_t c[RANKS];
    pthread_t th[RANKS];
    fu_client_t proto = {
        .master = m.ctl, .job = job, .world_size = RANKS, .rows = ROWS, .epochs = 1, .seen = seen};
    fu_clients_start(c, th, RANKS, &proto);
    fu_clients_join(c, th, RANKS);
    fu_assert_once_per_epoch(seen, ROWS, 1);
    uint64_t total = 0, lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < RANKS; i++) {
        total += c[i].batches;
        if (c[i].batches < lo) lo = c[i].batches;
        if (c[i].batches > hi) hi = c[i].batches;
    }
    cr_assert_eq(total, ROWS / 250);
    double mean = (double)total / RANKS;
    char spread[RANKS * 8] = "";
    size_t len = 0;
    for (int i = 0; i < RANKS; i++)
        len += (size_t)snprintf(spread + len, sizeof spread - len, " %llu",
                                (unsigned long long)c[i].batches);
    /* no rank below half the mean or above twice it */
    cr_assert(lo * 2 >= mean && hi <= 2 * mean,
              "batches per rank (mean %.1f, least %llu, most %llu):%s", mean,
              (unsigned long long)lo, (unsigned long long)hi, spread);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}
