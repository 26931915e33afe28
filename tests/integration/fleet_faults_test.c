/* Exactly once per epoch through failures, end to end with real processes:
 * a `sluice master`, `sluice worker --master` processes started by the
 * local executor, and two trainer clients in master mode (threads here).
 *
 *  - kill -9 a random worker every second or so during the epoch (the
 *    executor starts a replacement): the multiset of delivered sample ids
 *    equals the table's, each id exactly once;
 *  - stall a random worker (SIGSTOP) past its lease timeout and let it
 *    come back (SIGCONT), twice: its leases were given to others, so the
 *    batches it still sends lose their commits; the same check holds;
 *  - kill -9 the master mid-epoch and restart it on the same state
 *    directory and addresses: the same check holds.
 *
 * Randomised by the test seed (which worker, when); SLUICE_TEST_SEED
 * replays a run. */
#include "fleet_util.h"

TestSuite(fleet_faults, .init = fu_setup, .fini = fu_teardown);

/* 40 splits of 1000 rows, batches of 250: the epoch has 160 batches. */
#define ROWS 40000u
#define STRIPE 1000u

static void spec_for(const char *table, const char *id, char *out, size_t cap)
{
    snprintf(out, cap,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"shuffle\":{\"splits\":true,\"seed\":11}}}",
             id, table);
}

/* A master (1 s leases) with a job over a fresh table and an executor
 * running its workers: the fleet every test here breaks. */
static char *fleet_up(const char *id, uint32_t workers, fu_master_t *m, sl_dpp_executor_t **ex)
{
    char table[300], spec[1024];
    fu_gen(ROWS, STRIPE, 2, table, sizeof table);
    *m = (fu_master_t){.lease_timeout_ms = 1000};
    fu_master_start(m);
    spec_for(table, id, spec, sizeof spec);
    char *job = fu_submit(m, spec, 2, "dynamic", workers, workers, NULL);
    *ex = fu_executor(m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_executor_scale(*ex, job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    return job;
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
                             .seen = seen,
                             .delay_us = delay_us};
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* Join both clients: each ended cleanly, and together they received every
 * sample of the epoch exactly once. */
static void join_clients(fu_client_t *c, pthread_t *th, const atomic_uint *seen)
{
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(c[i].end), c[i].msg);
    }
    cr_assert_eq(c[0].samples + c[1].samples, ROWS, "delivered %llu + %llu samples",
                 (unsigned long long)c[0].samples, (unsigned long long)c[1].samples);
    fu_assert_each_seen(seen, ROWS, 1);
}

static bool clients_done(const fu_client_t *c)
{
    return atomic_load(&c[0].finished) || atomic_load(&c[1].finished);
}

Test(fleet_faults, kill_9_random_workers_during_an_epoch)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_random_workers_during_an_epoch");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("kill-workers", 3, &m, &ex);

    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    /* 160 batches at 40 ms each over two clients: an epoch of >= 3.2 s
     * without failures, so the kills land mid-epoch. */
    start_clients(&m, job, seen, c, th, 40000);
    uint32_t kills = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(&m, job)) {
        cr_assert(fu_now() < deadline, "the epoch did not finish in time; see %s", fu_dir);
        usleep((useconds_t)(500000 + tu_below(&rng, 700000)));
        if (kills < 4 && !fu_job_finished(&m, job)) {
            sl_dpp_executor_worker_t w[8];
            uint32_t n = sl_dpp_executor_list(ex, job, w, 8);
            if (n > 0) {
                uint32_t victim = (uint32_t)tu_below(&rng, n < 8 ? n : 8);
                cr_assert_eq(kill(w[victim].pid, SIGKILL), 0);
                kills++;
                usleep(50 * 1000);
            }
        }
        /* the executor replaces the dead (as the master's autoscaler would) */
        sl_error_t err = {0};
        cr_assert_eq(sl_dpp_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
        if (clients_done(c)) break;
    }
    join_clients(c, th, seen);
    cr_assert_geq(kills, 2, "only %u workers were killed mid-epoch: the epoch was too short",
                  kills);
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

    atomic_uint *seen = calloc(ROWS, sizeof *seen);
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
    cr_assert_eq(stalls, 2, "the epoch ended before two stalls");
    while (!clients_done(c)) {
        cr_assert(fu_now() < deadline, "the epoch did not finish in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
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

Test(fleet_faults, kill_9_the_master_mid_epoch_and_restart_it)
{
    uint64_t rng = tu_seed("fleet_faults.kill_9_the_master_mid_epoch_and_restart_it");
    fu_master_t m;
    sl_dpp_executor_t *ex;
    char *job = fleet_up("kill-master", 2, &m, &ex);

    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 20000);
    /* Wait until some samples were delivered, then kill the master at a
     * random moment of the first half of the epoch. */
    double deadline = fu_now() + tu_timeout(30);
    uint64_t want = ROWS / 8 + tu_below(&rng, ROWS / 4);
    while (fu_seen_total(seen, ROWS) < want) {
        cr_assert(fu_now() < deadline, "no progress before the kill");
        cr_assert(!clients_done(c), "a client ended before the master was killed");
        usleep(10 * 1000);
    }
    fu_master_stop(&m, SIGKILL);
    uint64_t before = fu_seen_total(seen, ROWS);
    cr_assert_lt(before, ROWS, "the epoch ended before the master was killed");
    usleep((useconds_t)(200000 + tu_below(&rng, 600000)));
    fu_master_start(&m);
    deadline = fu_now() + tu_timeout(60);
    while (!fu_job_finished(&m, job) && !clients_done(c)) {
        cr_assert(fu_now() < deadline, "the epoch did not finish after the restart; see %s",
                  fu_dir);
        usleep(100 * 1000);
    }
    join_clients(c, th, seen);
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("master killed after %llu samples", (unsigned long long)before);
    fleet_down(&m, ex, job, seen);
}
