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
#define STRIPE 1000u
#define EPOCHS 2u

static void spec_for(const char *table, const char *id, char *out, size_t cap)
{
    snprintf(out, cap,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":11}}}",
             id, table, EPOCHS);
}

/* A master (1 s leases, compact_bytes as given) with a job over a fresh
 * table and an executor running its workers: the fleet every test here
 * breaks. */
static char *fleet_up_compacting(const char *id, uint32_t workers, uint64_t compact_bytes,
                                 fu_master_t *m, sl_dpp_executor_t **ex)
{
    char table[300], spec[1024];
    fu_gen(ROWS, STRIPE, 2, table, sizeof table);
    *m = (fu_master_t){.lease_timeout_ms = 1000, .compact_bytes = compact_bytes};
    fu_master_start(m);
    spec_for(table, id, spec, sizeof spec);
    char *job = fu_submit(m, spec, 2, "dynamic", workers, workers, NULL);
    *ex = fu_executor(m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_executor_scale(*ex, job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    return job;
}

static char *fleet_up(const char *id, uint32_t workers, fu_master_t *m, sl_dpp_executor_t **ex)
{
    return fleet_up_compacting(id, workers, 0, m, ex);
}

static void fleet_down(fu_master_t *m, sl_dpp_executor_t *ex, char *job, atomic_uint *seen)
{
    fu_executor_destroy(ex);
    fu_master_stop(m, SIGTERM);
    free(seen);
    free(job);
}

static void start_clients(fu_master_t *m, const char *job, atomic_uint *seen, fu_client_t *c,
                          pthread_t *th, uint32_t delay_us)
{
    for (int i = 0; i < 2; i++) {
        c[i] = (fu_client_t){.master = m->ctl,
                             .job = job,
                             .rank = (uint32_t)i,
                             .world_size = 2,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .delay_us = delay_us};
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* Join both clients: each ended cleanly, and together they received every
 * sample of each epoch exactly once. */
static void join_clients(fu_client_t *c, pthread_t *th, const atomic_uint *seen)
{
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(c[i].end), c[i].msg);
    }
    cr_assert_eq(c[0].samples + c[1].samples, EPOCHS * ROWS, "delivered %llu + %llu samples",
                 (unsigned long long)c[0].samples, (unsigned long long)c[1].samples);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
}

static bool clients_done(const fu_client_t *c)
{
    return atomic_load(&c[0].finished) || atomic_load(&c[1].finished);
}

/* Wait until the clients delivered `want` samples of epoch 0. */
static void wait_delivered(const atomic_uint *seen, uint64_t want, const fu_client_t *c)
{
    double deadline = fu_now() + tu_timeout(30);
    while (fu_seen_total(seen, ROWS) < want) {
        cr_assert(fu_now() < deadline, "no progress: %llu of %llu samples of epoch 0",
                  (unsigned long long)fu_seen_total(seen, ROWS), (unsigned long long)want);
        cr_assert(!clients_done(c), "a client ended early: %s %s", c[0].msg, c[1].msg);
        usleep(10 * 1000);
    }
}

static void wait_finished(fu_master_t *m, const char *job, const fu_client_t *c)
{
    double deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(m, job) && !clients_done(c)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
}

/* kill -9 a random running worker of job; the executor replaces it at its
 * next scale. @return whether one was killed. */
static bool kill_a_worker(sl_dpp_executor_t *ex, const char *job, uint64_t *rng)
{
    sl_dpp_executor_worker_t w[8];
    uint32_t n = sl_dpp_executor_list(ex, job, w, 8);
    if (n == 0) return false;
    uint32_t victim = (uint32_t)tu_below(rng, n < 8 ? n : 8);
    cr_assert_eq(kill(w[victim].pid, SIGKILL), 0);
    usleep(50 * 1000);
    return true;
}

Test(fleet_faults, kill_9_random_workers_during_an_epoch)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_random_workers_during_an_epoch");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("kill-workers", 3, &m, &ex);

    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    /* 320 batches at 25 ms each over two clients: a job of >= 4 s without
     * failures, so the kills land mid-job. */
    start_clients(&m, job, seen, c, th, 25000);
    uint32_t kills = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(&m, job)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep((useconds_t)(500000 + tu_below(&rng, 700000)));
        if (kills < 4 && !fu_job_finished(&m, job) && kill_a_worker(ex, job, &rng)) kills++;
        /* the executor replaces the dead (as the master's autoscaler would) */
        sl_error_t err = {0};
        cr_assert_eq(sl_dpp_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
        if (clients_done(c)) break;
    }
    join_clients(c, th, seen);
    cr_assert_geq(kills, 2, "only %u workers were killed mid-job: the job was too short", kills);
    sl_dpp_executor_stats_t st;
    sl_dpp_executor_stats(ex, &st);
    cr_assert_geq(st.failed, kills);
    cr_log_info("killed %u workers; clients dropped %llu + %llu batches", kills,
                (unsigned long long)c[0].stats.dropped, (unsigned long long)c[1].stats.dropped);
    fleet_down(&m, ex, job, seen);
}

Test(fleet_faults, stalled_workers_come_back_after_their_leases_expired)
{
    uint64_t rng = tu_seed("fleet_faults.stalled_workers_come_back_after_their_leases_expired");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("stall-workers", 3, &m, &ex);

    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 40000);
    uint32_t stalls = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (stalls < 2 && !clients_done(c)) {
        cr_assert(fu_now() < deadline, "the stalls did not happen in time");
        usleep((useconds_t)(300000 + tu_below(&rng, 400000)));
        sl_dpp_executor_worker_t w[8];
        uint32_t n = sl_dpp_executor_list(ex, job, w, 8);
        cr_assert_eq(n, 3);
        pid_t victim = w[tu_below(&rng, 3)].pid;
        cr_assert_eq(kill(victim, SIGSTOP), 0);
        /* past the lease timeout: its leases expire and move */
        usleep((useconds_t)(m.lease_timeout_ms * 1000 + 700000));
        cr_assert_eq(kill(victim, SIGCONT), 0);
        stalls++;
    }
    cr_assert_eq(stalls, 2, "the job ended before two stalls");
    wait_finished(&m, job, c);
    join_clients(c, th, seen);
    cr_assert(fu_job_finished(&m, job));
    json_t *st = fu_get_json(m.admin, "/status");
    cr_assert_geq(json_integer_value(json_object_get(st, "lease_expiries")), 2);
    cr_log_info("lease expiries %lld, overlaps refused %lld; clients dropped %llu + %llu batches",
                (long long)json_integer_value(json_object_get(st, "lease_expiries")),
                (long long)json_integer_value(json_object_get(st, "overlaps")),
                (unsigned long long)c[0].stats.dropped, (unsigned long long)c[1].stats.dropped);
    json_decref(st);
    fleet_down(&m, ex, job, seen);
}

/* Kill the master with SIGKILL once epoch 0 has `want` samples delivered,
 * and restart it on the same state after a random pause. */
static void kill_master_at(fu_master_t *m, const atomic_uint *seen, uint64_t want,
                           const fu_client_t *c, uint64_t *rng)
{
    wait_delivered(seen, want, c);
    fu_master_stop(m, SIGKILL);
    cr_assert_lt(fu_seen_total(seen, ROWS), ROWS, "epoch 0 ended before the master was killed");
    usleep((useconds_t)(200000 + tu_below(rng, 600000)));
    fu_master_start(m);
}

Test(fleet_faults, kill_9_the_master_mid_epoch_and_restart_it)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_the_master_mid_epoch_and_restart_it");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("kill-master", 2, &m, &ex);

    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 20000);
    /* at a random moment of the first half of epoch 0 */
    uint64_t want = ROWS / 8 + tu_below(&rng, ROWS / 4);
    kill_master_at(&m, seen, want, c, &rng);
    wait_finished(&m, job, c);
    join_clients(c, th, seen);
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("master killed after %llu samples of epoch 0", (unsigned long long)want);
    fleet_down(&m, ex, job, seen);
}

/* Two master crashes within one epoch: the second restart replays a
 * journal that already holds a restart (an Opened record, leases of the
 * first run that the workers re-registered). */
Test(fleet_faults, kill_9_the_master_twice_in_one_epoch)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_the_master_twice_in_one_epoch");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("kill-master-twice", 2, &m, &ex);

    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 20000);
    uint64_t first = ROWS / 10 + tu_below(&rng, ROWS / 5);
    kill_master_at(&m, seen, first, c, &rng);
    uint64_t second = first + ROWS / 10 + tu_below(&rng, ROWS / 5);
    kill_master_at(&m, seen, second, c, &rng);
    wait_finished(&m, job, c);
    join_clients(c, th, seen);
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("master killed after %llu and %llu samples of epoch 0",
                (unsigned long long)first, (unsigned long long)second);
    fleet_down(&m, ex, job, seen);
}

/* The journal compacted every kilobyte while workers are killed, and the
 * master killed and restarted once: its state comes back from a snapshot
 * plus the journal written since. Several compactions happen in each run
 * of the master (the counter is per run). */
Test(fleet_faults, journal_compactions_under_worker_and_master_kills)
{
    uint64_t rng = tu_seed("fleet_faults.journal_compactions_under_worker_and_master_kills");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up_compacting("compact", 3, 1024, &m, &ex);

    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 20000);
    wait_delivered(seen, ROWS / 8, c);
    cr_assert(kill_a_worker(ex, job, &rng));
    wait_delivered(seen, ROWS / 4, c);
    long long before = fu_status_int(&m, "compactions");
    cr_assert_geq(before, 3, "only %lld compactions before the master was killed", before);
    kill_master_at(&m, seen, ROWS / 4, c, &rng);
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
    wait_delivered(seen, ROWS / 2, c);
    cr_assert(kill_a_worker(ex, job, &rng));
    cr_assert_eq(sl_dpp_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
    wait_finished(&m, job, c);
    join_clients(c, th, seen);
    cr_assert(fu_job_finished(&m, job));
    long long after = fu_status_int(&m, "compactions");
    cr_assert_geq(after, 3, "only %lld compactions after the restart", after);
    char *metrics;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    char want[96];
    snprintf(want, sizeof want, "sluice_master_journal_compactions_total %lld", after);
    cr_assert(strstr(metrics, want) != NULL, "%s", metrics);
    free(metrics);
    cr_log_info("%lld compactions before the master was killed, %lld after", before, after);
    fleet_down(&m, ex, job, seen);
}
