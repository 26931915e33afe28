/* Exactly once per epoch through failures, end to end with real processes:
 * a `sluice master`, `sluice worker --master` processes started by the
 * local executor, and two trainer clients in master mode (threads here).
 * Every job runs two epochs, and every sample id must be delivered exactly
 * once in each of them (not twice in one and never in the other).
 *
 *  - kill -9 a random worker every second or so during the job (the
 *    executor starts a replacement);
 *  - stall a random worker (SIGSTOP) past its lease timeout and let it
 *    come back (SIGCONT), twice: its leases were given to others, so the
 *    batches it still sends lose their commits;
 *  - kill -9 the master mid-epoch and restart it on the same state
 *    directory and addresses; and twice in one epoch;
 *  - a journal compacted every few kilobytes (`--compact-bytes`) while
 *    workers are killed and the master is killed and restarted (replay
 *    from a snapshot plus a journal).
 *
 * Randomised by the test seed (which worker, when); SLUICE_TEST_SEED
 * replays a run. */
#include "fleet_util.h"

TestSuite(fleet_faults, .init = fu_setup, .fini = fu_teardown);

/* 40 splits of 1000 rows, batches of 250: an epoch has 160 batches. */
#define ROWS 40000u
#define EPOCHS 2u

/* What every test here breaks: a master (1 s leases), a job of two ranks
 * over a fresh table, an executor running its workers, and two clients
 * (ranks 0 and 1) counting what they deliver in seen. */
typedef struct fleet {
    fu_master_t m;
    sl_master_executor_t *ex;
    char *job;
    atomic_uint *seen;
    fu_client_t c[2];
    pthread_t th[2];
} fleet_t;

static void fleet_up(fleet_t *f, const char *id, uint32_t workers, uint64_t compact_bytes,
                     uint32_t delay_us)
{
    f->m = (fu_master_t){.lease_timeout_ms = 1000, .compact_bytes = compact_bytes};
    f->job = fu_job_up(&f->m, id, ROWS, EPOCHS, 2, "dynamic", workers);
    f->ex = fu_executor(&f->m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(f->ex, f->job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    f->seen = calloc(EPOCHS * ROWS, sizeof *f->seen);
    fu_client_t proto = {.master = f->m.ctl,
                         .job = f->job,
                         .world_size = 2,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = f->seen,
                         .delay_us = delay_us};
    fu_clients_start(f->c, f->th, 2, &proto);
}

/* Join both clients: each ended cleanly, and together they received every
 * sample of each epoch exactly once; the job is finished. */
static void fleet_join(fleet_t *f)
{
    fu_clients_join(f->c, f->th, 2);
    cr_assert_eq(f->c[0].samples + f->c[1].samples, EPOCHS * ROWS, "delivered %llu + %llu samples",
                 (unsigned long long)f->c[0].samples, (unsigned long long)f->c[1].samples);
    fu_assert_once_per_epoch(f->seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(&f->m, f->job));
}

static void fleet_down(fleet_t *f)
{
    fu_executor_destroy(f->ex);
    fu_master_stop(&f->m, SIGTERM);
    free(f->seen);
    free(f->job);
}

static bool clients_done(const fleet_t *f)
{
    return atomic_load(&f->c[0].finished) || atomic_load(&f->c[1].finished);
}

/* Wait until the clients delivered `want` samples of epoch 0. */
static void wait_delivered(const fleet_t *f, uint64_t want)
{
    double deadline = fu_now() + tu_timeout(30);
    while (fu_seen_total(f->seen, ROWS) < want) {
        cr_assert(fu_now() < deadline, "no progress: %llu of %llu samples of epoch 0",
                  (unsigned long long)fu_seen_total(f->seen, ROWS), (unsigned long long)want);
        cr_assert(!clients_done(f), "a client ended early: %s %s", f->c[0].msg, f->c[1].msg);
        usleep(10 * 1000);
    }
}

static void wait_finished(fleet_t *f)
{
    double deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(&f->m, f->job) && !clients_done(f)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
}

/* The executor replaces the workers that died (as the master's
 * autoscaler would have it). */
static void rescale(fleet_t *f, uint32_t workers)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(f->ex, f->job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
}

/* kill -9 a random running worker, then rescale. @return whether one was
 * killed. */
static bool kill_a_worker(fleet_t *f, uint32_t workers, uint64_t *rng)
{
    sl_master_executor_worker_t w[8];
    uint32_t n = sl_master_executor_list(f->ex, f->job, w, 8);
    if (n > 0) {
        cr_assert_eq(kill(w[tu_below(rng, n < 8 ? n : 8)].pid, SIGKILL), 0);
        usleep(50 * 1000);
    }
    rescale(f, workers);
    return n > 0;
}

Test(fleet_faults, kill_9_random_workers_during_an_epoch)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_random_workers_during_an_epoch");
    fleet_t f;
    /* 320 batches at 25 ms each over two clients: a job of >= 4 s without
     * failures, so the kills land mid-job. */
    fleet_up(&f, "kill-workers", 3, 0, 25000);
    uint32_t kills = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(&f.m, f.job) && !clients_done(&f)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep((useconds_t)(500000 + tu_below(&rng, 700000)));
        if (kills < 4 && !fu_job_finished(&f.m, f.job) && kill_a_worker(&f, 3, &rng)) kills++;
        rescale(&f, 3);
    }
    fleet_join(&f);
    cr_assert_geq(kills, 2, "only %u workers were killed mid-job: the job was too short", kills);
    sl_master_executor_stats_t st;
    sl_master_executor_stats(f.ex, &st);
    cr_assert_geq(st.failed, kills);
    cr_log_info("killed %u workers; clients dropped %llu + %llu batches", kills,
                (unsigned long long)f.c[0].stats.dropped, (unsigned long long)f.c[1].stats.dropped);
    fleet_down(&f);
}

Test(fleet_faults, stalled_workers_come_back_after_their_leases_expired)
{
    uint64_t rng = tu_seed("fleet_faults.stalled_workers_come_back_after_their_leases_expired");
    fleet_t f;
    fleet_up(&f, "stall-workers", 3, 0, 40000);
    uint32_t stalls = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (stalls < 2 && !clients_done(&f)) {
        cr_assert(fu_now() < deadline, "the stalls did not happen in time");
        usleep((useconds_t)(300000 + tu_below(&rng, 400000)));
        sl_master_executor_worker_t w[8];
        uint32_t n = sl_master_executor_list(f.ex, f.job, w, 8);
        cr_assert_eq(n, 3);
        pid_t victim = w[tu_below(&rng, 3)].pid;
        cr_assert_eq(kill(victim, SIGSTOP), 0);
        /* past the lease timeout: its leases expire and move */
        usleep((useconds_t)(f.m.lease_timeout_ms * 1000 + 700000));
        cr_assert_eq(kill(victim, SIGCONT), 0);
        stalls++;
    }
    cr_assert_eq(stalls, 2, "the job ended before two stalls");
    wait_finished(&f);
    fleet_join(&f);
    cr_assert_geq(fu_status_int(&f.m, "lease_expiries"), 2);
    cr_log_info("lease expiries %lld, overlaps refused %lld; clients dropped %llu + %llu batches",
                fu_status_int(&f.m, "lease_expiries"), fu_status_int(&f.m, "overlaps"),
                (unsigned long long)f.c[0].stats.dropped, (unsigned long long)f.c[1].stats.dropped);
    fleet_down(&f);
}

/* Kill the master with SIGKILL once epoch 0 has `want` samples delivered,
 * and restart it on the same state after a random pause. */
static void kill_master_at(fleet_t *f, uint64_t want, uint64_t *rng)
{
    wait_delivered(f, want);
    fu_master_stop(&f->m, SIGKILL);
    cr_assert_lt(fu_seen_total(f->seen, ROWS), ROWS, "epoch 0 ended before the master was killed");
    usleep((useconds_t)(200000 + tu_below(rng, 600000)));
    fu_master_start(&f->m);
}

Test(fleet_faults, kill_9_the_master_mid_epoch_and_restart_it)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_the_master_mid_epoch_and_restart_it");
    fleet_t f;
    fleet_up(&f, "kill-master", 2, 0, 20000);
    /* at a random moment of the first half of epoch 0 */
    uint64_t want = ROWS / 8 + tu_below(&rng, ROWS / 4);
    kill_master_at(&f, want, &rng);
    wait_finished(&f);
    fleet_join(&f);
    cr_log_info("master killed after %llu samples of epoch 0", (unsigned long long)want);
    fleet_down(&f);
}

/* Two master crashes within one epoch: the second restart replays a
 * journal that already holds a restart (an Opened record, leases of the
 * first run that the workers re-registered). */
Test(fleet_faults, kill_9_the_master_twice_in_one_epoch)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_the_master_twice_in_one_epoch");
    fleet_t f;
    fleet_up(&f, "kill-master-twice", 2, 0, 20000);
    uint64_t first = ROWS / 10 + tu_below(&rng, ROWS / 5);
    kill_master_at(&f, first, &rng);
    uint64_t second = first + ROWS / 10 + tu_below(&rng, ROWS / 5);
    kill_master_at(&f, second, &rng);
    wait_finished(&f);
    fleet_join(&f);
    cr_log_info("master killed after %llu and %llu samples of epoch 0", (unsigned long long)first,
                (unsigned long long)second);
    fleet_down(&f);
}

/* The journal compacted every half kilobyte while workers are killed, and the
 * master killed and restarted once: its state comes back from a snapshot
 * plus the journal written since. Several compactions happen in each run
 * of the master (the counter is per run). */
Test(fleet_faults, journal_compactions_under_worker_and_master_kills)
{
    uint64_t rng = tu_seed("fleet_faults.journal_compactions_under_worker_and_master_kills");
    fleet_t f;
    fleet_up(&f, "compact", 3, 512, 20000);
    wait_delivered(&f, ROWS / 8);
    cr_assert(kill_a_worker(&f, 3, &rng));
    wait_delivered(&f, ROWS / 4);
    long long before = fu_status_int(&f.m, "compactions");
    cr_assert_geq(before, 3, "only %lld compactions before the master was killed", before);
    kill_master_at(&f, ROWS / 4, &rng);
    rescale(&f, 3);
    wait_delivered(&f, ROWS / 2);
    cr_assert(kill_a_worker(&f, 3, &rng));
    usleep(200 * 1000);
    rescale(&f, 3);
    wait_finished(&f);
    fleet_join(&f);
    long long after = fu_status_int(&f.m, "compactions");
    cr_assert_geq(after, 3, "only %lld compactions after the restart", after);
    char *metrics;
    cr_assert_eq(fu_http(f.m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    char want[96];
    snprintf(want, sizeof want, "sluice_master_journal_compactions_total %lld", after);
    cr_assert(strstr(metrics, want) != NULL, "%s", metrics);
    free(metrics);
    cr_log_info("%lld compactions before the master was killed, %lld after", before, after);
    fleet_down(&f);
}
