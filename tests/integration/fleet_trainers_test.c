/* Trainers killed and replaced, end to end: a job of two epochs read by a
 * trainer client in this process and by a `sluice read --master --json`
 * process, which is killed with SIGKILL mid-epoch (once in each epoch) and
 * replaced by a new one. What each trainer handed out is what it printed
 * (the process) or recorded (the thread).
 *
 * Exactly what holds: in each epoch every sample id is delivered at most
 * once over all the trainers, and the only ids missing from an epoch are
 * those of batches the killed trainer had committed but not handed out
 * when it died. A trainer holds at most its prefetch window P of batches
 * per worker connection (awaiting their commit answer, or committed and
 * ready), so with W workers at most P * W batches; and it may have been
 * handed batches it had not printed whole: the one just handed out, and
 * the one before, whose JSON line's tail can still sit in its stdout buffer
 * until the next line is written. So at most (P * W + 2) batches of 250
 * samples are missing per kill. Both kills come while their epoch has more
 * than that left to deliver, so every batch the victim held is of that
 * epoch. */
#include "fleet_util.h"

TestSuite(fleet_trainers, .init = fu_setup, .fini = fu_teardown);

/* 24 splits of 1000 rows, batches of 250: 96 batches an epoch. */
#define ROWS 24000u
#define EPOCHS 2u
#define BATCH 250u /* fu_job_up's */
#define WORKERS 2u
#define PREFETCH 4u /* fu_reader_start's --prefetch */

/* Samples of epoch e delivered by the trainers (seen arrays) so far. */
static uint64_t delivered(atomic_uint *const *seen, int n, uint32_t e)
{
    uint64_t s = 0;
    for (int k = 0; k < n; k++)
        s += fu_seen_total(seen[k] + (uint64_t)e * ROWS, ROWS);
    return s;
}

/* Wait until the trainers delivered `want` samples of epoch e and the
 * victim (counting in victim) some of them: a kill must take something
 * from it. Fails when three quarters of the epoch went by without it. */
static void wait_delivered(atomic_uint *const *seen, int n, uint32_t e, uint64_t want,
                           const atomic_uint *victim, const fu_client_t *c)
{
    double deadline = fu_now() + tu_timeout(30);
    for (;;) {
        uint64_t all = delivered(seen, n, e);
        bool took = fu_seen_total(victim + (uint64_t)e * ROWS, ROWS) > 0;
        if (all >= want && took) return;
        cr_assert(took || all < ROWS / 4 * 3,
                  "epoch %u: %llu samples delivered, none by the trainer to kill", e,
                  (unsigned long long)all);
        cr_assert(fu_now() < deadline, "epoch %u: %llu of %llu samples in time", e,
                  (unsigned long long)all, (unsigned long long)want);
        cr_assert(!atomic_load(&c->finished), "the trainer thread ended early: %s", c->msg);
        usleep(5 * 1000);
    }
}

Test(fleet_trainers, trainers_killed_mid_epoch_and_replaced)
{
    uint64_t rng = tu_seed("fleet_trainers.trainers_killed_mid_epoch_and_replaced");
    char log[300];
    fu_master_t m = {.lease_timeout_ms = 1000};
    char *job = fu_job_up(&m, "trainers", ROWS, EPOCHS, 1, "dynamic", WORKERS);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, WORKERS, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    snprintf(log, sizeof log, "%s/readers.log", fu_dir);

    /* seen[0]: the thread; [1], [2]: the killed processes; [3]: the last one */
    atomic_uint *seen[4];
    for (int k = 0; k < 4; k++)
        seen[k] = calloc(EPOCHS * ROWS, sizeof *seen[k]);
    fu_client_t c = {.master = m.ctl,
                     .job = job,
                     .rows = ROWS,
                     .epochs = EPOCHS,
                     .seen = seen[0],
                     .delay_us = 15000};
    pthread_t th;
    /* the process first (it takes longer to start), then the thread */
    fu_reader_t r[3];
    fu_reader_start(&r[0], &m, job, ROWS, EPOCHS, seen[1], log);
    double deadline = fu_now() + tu_timeout(15);
    while (atomic_load(&r[0].batches) == 0) {
        cr_assert(fu_now() < deadline, "sluice read printed no batch; see %s", log);
        usleep(5 * 1000);
    }
    pthread_create(&th, NULL, fu_client_run, &c);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        /* a quarter to a half into epoch e: well before its end */
        wait_delivered(seen, 4, e, ROWS / 4 + tu_below(&rng, ROWS / 4), seen[e + 1], &c);
        fu_reader_kill9(&r[e]);
        fu_reader_start(&r[e + 1], &m, job, ROWS, EPOCHS, seen[e + 2], log);
    }
    int ws = fu_reader_join(&r[EPOCHS], 60);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the last sluice read: status %d; see %s", ws,
              log);
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    cr_assert(fu_job_finished(&m, job));

    const uint64_t bound = (PREFETCH * WORKERS + 2) * BATCH;
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t missing = 0;
        for (uint64_t id = 0; id < ROWS; id++) {
            unsigned n = 0;
            for (int k = 0; k < 4; k++)
                n += atomic_load(&seen[k][(uint64_t)e * ROWS + id]);
            cr_assert_leq(n, 1, "epoch %u sample %llu delivered %u times", e,
                          (unsigned long long)id, n);
            missing += n == 0;
        }
        cr_assert_leq(missing, bound,
                      "epoch %u: %llu samples missing, more than the killed trainer's window "
                      "(%llu)",
                      e, (unsigned long long)missing, (unsigned long long)bound);
        cr_assert_gt(atomic_load(&r[e].samples), 0, "the trainer killed in epoch %u took nothing",
                     e);
        cr_log_info("epoch %u: %llu samples missing (at most %llu); the killed trainer had "
                    "printed %llu",
                    e, (unsigned long long)missing, (unsigned long long)bound,
                    (unsigned long long)atomic_load(&r[e].samples));
    }
    for (int k = 0; k < 4; k++)
        free(seen[k]);
    free(job);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
}
