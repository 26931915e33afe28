/* Liveness of leases, end to end (docs/DESIGN.md, "Master state and exactly
 * once per epoch"): the worker's own list of leases is what keeps a lease
 * alive, so that each of these ends the job, with every sample id
 * delivered exactly once in each of two epochs:
 *
 *  - a worker killed with SIGKILL and restarted under the same --worker-id
 *    within the lease timeout (a systemd unit, a StatefulSet pod): the new
 *    process registers holding nothing, and the master takes the old
 *    process's leases back at once (they used to be renewed forever by the
 *    new process's heartbeats);
 *  - a second live process under a worker id in use is refused, with a
 *    message naming the id, and exits non-zero; once the first process is
 *    gone a new one takes the id;
 *  - a LEASE frame lost with its connection (a relay here drops it and
 *    breaks the connection): the worker never names that lease, and its
 *    re-registration revokes it;
 *  - the master stopped (SIGSTOP) longer than the workers' control timeout
 *    (5 s), then continued: it answers requests that came on connections
 *    the workers have given up.
 *
 * Randomised by the test seed (when); SLUICE_TEST_SEED replays a run. */
#include "fleet_util.h"

TestSuite(fleet_leases, .init = fu_setup, .fini = fu_teardown);

/* 24 splits of 1000 rows, batches of 250: 96 batches an epoch. */
#define ROWS 24000u
#define EPOCHS 2u

/* A master (lease timeout lease_ms) with a job of `workers` workers over a
 * fresh table; the workers are the test's to start. */
static char *job_up(const char *id, uint64_t lease_ms, uint32_t workers, fu_master_t *m)
{
    *m = (fu_master_t){.lease_timeout_ms = lease_ms};
    return fu_job_up(m, id, ROWS, EPOCHS, 1, "dynamic", workers);
}

static void start_clients(const fu_master_t *m, const char *job, atomic_uint *seen, fu_client_t *c,
                          pthread_t *th, uint32_t delay_us)
{
    fu_client_t proto = {.master = m->ctl,
                         .job = job,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = seen,
                         .delay_us = delay_us};
    fu_clients_start(c, th, 2, &proto);
}

/* Both clients end cleanly within the time limit (a lease kept alive by
 * nobody would keep its epoch from ending: the clients would wait), and
 * every sample of each epoch arrived exactly once. */
static void finish(fu_master_t *m, const char *job, fu_client_t *c, pthread_t *th,
                   const atomic_uint *seen)
{
    double deadline = fu_now() + tu_timeout(60);
    while (!atomic_load(&c[0].finished) || !atomic_load(&c[1].finished)) {
        cr_assert(fu_now() < deadline,
                  "the job did not end (a lease nobody holds was kept alive?); see %s", fu_dir);
        usleep(50 * 1000);
    }
    fu_clients_join(c, th, 2);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(m, job));
}

/* Two workers of the executor reaching the master at addr, and two
 * clients. @return the executor. */
static sl_master_executor_t *run_via(const fu_master_t *m, const char *addr, const char *job,
                                     atomic_uint *seen, fu_client_t *c, pthread_t *th,
                                     uint32_t delay_us)
{
    sl_master_executor_t *ex = fu_executor_via(addr, NULL, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    start_clients(m, job, seen, c, th, delay_us);
    return ex;
}

static void wait_samples(const atomic_uint *seen, uint64_t want, const fu_client_t *c)
{
    double deadline = fu_now() + tu_timeout(30);
    while (fu_seen_total(seen, EPOCHS * ROWS) < want) {
        cr_assert(fu_now() < deadline, "no progress: %llu of %llu samples",
                  (unsigned long long)fu_seen_total(seen, EPOCHS * ROWS), (unsigned long long)want);
        cr_assert(!atomic_load(&c[0].finished) && !atomic_load(&c[1].finished),
                  "a client ended early: %s %s", c[0].msg, c[1].msg);
        usleep(10 * 1000);
    }
}

/* GET /workers: is worker id connected? */
static bool worker_connected(const fu_master_t *m, const char *id)
{
    json_t *j = fu_get_json(m->admin, "/workers");
    size_t i;
    json_t *w;
    bool on = false;
    json_array_foreach(json_object_get(j, "workers"), i, w)
    {
        if (strcmp(json_string_value(json_object_get(w, "id")), id) == 0)
            on = json_is_true(json_object_get(w, "connected"));
    }
    json_decref(j);
    return on;
}

static void wait_connected(const fu_master_t *m, const char *id, bool on)
{
    double deadline = fu_now() + tu_timeout(15);
    while (worker_connected(m, id) != on) {
        cr_assert(fu_now() < deadline, "worker %s never %s; see %s", id,
                  on ? "registered" : "disconnected", fu_dir);
        usleep(5 * 1000);
    }
}

/* kill -9 a worker process and start its replacement under the same id
 * as soon as the master has seen the old connection close (a killed
 * process's socket is closed by the kernel at once; the replacement would
 * otherwise be refused as a second live process). */
static pid_t replace(const fu_master_t *m, pid_t pid, const char *job, const char *id,
                     const char *log)
{
    fu_kill9(pid);
    wait_connected(m, id, false);
    return fu_worker_spawn(m->ctl, job, id, log);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

Test(fleet_leases, a_worker_restarted_under_its_id_gives_its_leases_back_at_once)
{
    uint64_t rng = tu_seed("fleet_leases.a_worker_restarted_under_its_id_gives_its_leases_back");
    fu_master_t m;
    /* leases of 2 s: the restart comes well within one */
    char *job = job_up("same-id", 2000, 2, &m);
    char log[300];
    snprintf(log, sizeof log, "%s/workers.log", fu_dir);
    fu_worker_spawn(m.ctl, job, "same-id-a", log);
    pid_t a = fu_worker_spawn(m.ctl, job, "same-id-b", log);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 15000);
    for (int k = 0; k < 2; k++) {
        /* twice: in epoch 0, and (about) in epoch 1 */
        wait_samples(seen, (uint64_t)(k * ROWS + ROWS / 6 + tu_below(&rng, ROWS / 3)), c);
        a = replace(&m, a, job, "same-id-b", log);
    }
    finish(&m, job, c, th, seen);
    long long revoked = fu_status_int(&m, "lease_revocations");
    cr_assert_geq(revoked, 1, "the new processes' registrations revoked no lease");
    cr_log_info("leases revoked at re-registration: %lld, expired: %lld", revoked,
                fu_status_int(&m, "lease_expiries"));
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_leases, a_second_live_process_under_an_id_in_use_is_refused)
{
    fu_master_t m;
    char *job = job_up("dup-id", 1000, 1, &m);
    char log[300], log2[300];
    snprintf(log, sizeof log, "%s/first.log", fu_dir);
    snprintf(log2, sizeof log2, "%s/second.log", fu_dir);
    pid_t first = fu_worker_spawn(m.ctl, job, "dup", log);
    wait_connected(&m, "dup", true);
    /* no tug of war: the second process is refused and exits, naming the id */
    pid_t second = fu_worker_spawn(m.ctl, job, "dup", log2);
    int ws = fu_wait_exit(second, 15);
    cr_assert_neq(ws, -1, "the second process under the same id kept running");
    const char *out = read_text(log2);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "status %d: %s", ws, out);
    cr_assert(strstr(out, "worker id 'dup' is in use by another live worker process") != NULL, "%s",
              out);
    cr_assert(strstr(out, "connected from 127.0.0.1:") != NULL, "%s", out);
    cr_assert(strstr(out, " ms ago") != NULL, "%s", out);
    cr_assert(worker_connected(&m, "dup"), "the first process lost its registration");
    char *metrics;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    cr_assert(strstr(metrics, "sluice_master_worker_ids_in_use_total 1") != NULL, "%s", metrics);
    free(metrics);
    /* the first process dies: a new one may take the id (its connection is
     * closed), and the job runs through both epochs with it */
    pid_t third = replace(&m, first, job, "dup", log2);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    start_clients(&m, job, seen, c, th, 0);
    finish(&m, job, c, th, seen);
    ws = fu_wait_exit(third, 15);
    cr_assert(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the worker: status %d: %s", ws,
              read_text(log2));
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_leases, a_lease_frame_lost_with_its_connection)
{
    uint64_t rng = tu_seed("fleet_leases.a_lease_frame_lost_with_its_connection");
    fu_master_t m;
    char *job = job_up("lost-lease", 1000, 2, &m);
    /* the workers reach the master through a relay that drops one LEASE
     * (the 3rd to 8th) and breaks the connection it was on */
    fu_proxy_t p;
    fu_proxy_start(&p, m.ctl, SL_RPC_LEASE, 3 + (uint32_t)tu_below(&rng, 6));
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    sl_master_executor_t *ex = run_via(&m, p.addr, job, seen, c, th, 5000);
    finish(&m, job, c, th, seen);
    cr_assert_eq(atomic_load(&p.dropped), 1, "the relay dropped %u LEASE frames",
                 atomic_load(&p.dropped));
    long long revoked = fu_status_int(&m, "lease_revocations");
    cr_assert_geq(revoked, 1, "the re-registration did not revoke the lease never received");
    cr_log_info("LEASE %u of %u dropped; %lld leases revoked, %lld expired", p.drop_nth,
                atomic_load(&p.seen_type), revoked, fu_status_int(&m, "lease_expiries"));
    fu_executor_destroy(ex);
    fu_proxy_stop(&p);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_leases, the_master_stopped_longer_than_the_control_timeout)
{
    uint64_t rng = tu_seed("fleet_leases.the_master_stopped_longer_than_the_control_timeout");
    fu_master_t m;
    char *job = job_up("paused-master", 1000, 2, &m);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    sl_master_executor_t *ex = run_via(&m, m.ctl, job, seen, c, th, 10000);
    wait_samples(seen, ROWS / 8 + tu_below(&rng, ROWS / 4), c);
    /* a VM pause: longer than the workers' 5 s per-call timeout, so they
     * give their connections up and reconnect while it cannot answer */
    cr_assert_eq(kill(m.pid, SIGSTOP), 0);
    usleep(6500 * 1000); /* not scaled: the workers' timeout is not */
    cr_assert_eq(kill(m.pid, SIGCONT), 0);
    finish(&m, job, c, th, seen);
    cr_log_info("after the pause: %lld leases expired, %lld revoked",
                fu_status_int(&m, "lease_expiries"), fu_status_int(&m, "lease_revocations"));
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

/* A master whose every journal sync takes 0.9 s (the hook delays every
 * fdatasync; leases last 0.8 s) with job id over a fresh table of rows
 * rows in splits of 1000, batches of 250, for `workers` workers. */
static void slow_sync_job(fu_master_t *m, const char *id, uint64_t rows, uint32_t workers)
{
    char table[300], spec[1024];
    fu_gen(rows, 1000, 1, table, sizeof table);
    *m = (fu_master_t){.lease_timeout_ms = 800};
    setenv("SLUICE_JOURNAL_SYNC_DELAY_US", "900000", 1); /* inherited by the master only */
    fu_master_start(m);
    unsetenv("SLUICE_JOURNAL_SYNC_DELAY_US");
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":250}}", id, table);
    free(fu_submit(m, spec, 1, "dynamic", workers, workers, NULL));
}

/* A journal sync longer than the lease timeout (a loaded disk; the hook
 * delays every fdatasync of the master's journal by 0.9 s, leases last
 * 0.8 s): the worker's heartbeats that came during a sync were sent in
 * time, and the worker's calls held for the sync (SPLIT_READ) kept it from
 * sending any, so no lease of the live worker may run out. */
Test(fleet_leases, a_sync_longer_than_a_lease_expires_no_live_workers_lease)
{
    const uint64_t rows = 2000;
    char log[300];
    fu_master_t m;
    slow_sync_job(&m, "slow-sync", rows, 1);
    snprintf(log, sizeof log, "%s/worker.log", fu_dir);
    fu_worker_spawn(m.ctl, "slow-sync", "w0", log);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    fu_client_t c[1];
    pthread_t th[1];
    fu_client_t proto = {
        .master = m.ctl, .job = "slow-sync", .rows = rows, .epochs = 1, .seen = seen};
    fu_clients_start(c, th, 1, &proto);
    fu_clients_join(c, th, 1);
    fu_assert_once_per_epoch(seen, rows, 1);
    cr_assert(fu_job_finished(&m, "slow-sync"));
    cr_assert_eq(fu_status_int(&m, "lease_expiries"), 0,
                 "a live worker's lease ran out while the journal synced; see %s", fu_dir);
    fu_master_stop(&m, SIGTERM);
    free(seen);
}

/* GET /workers: the leases worker id named in its last heartbeat. */
static long long worker_leases(const fu_master_t *m, const char *id)
{
    json_t *j = fu_get_json(m->admin, "/workers");
    size_t i;
    json_t *w;
    long long n = 0;
    json_array_foreach(json_object_get(j, "workers"), i, w)
    {
        if (strcmp(json_string_value(json_object_get(w, "id")), id) == 0)
            n = json_integer_value(json_object_get(w, "leases"));
    }
    json_decref(j);
    return n;
}

/* The same slow syncs with two workers, one killed (SIGKILL) while it
 * holds a lease: what keeps a waiting worker's leases (answers to its
 * calls) never reaches a dead one, so its lease still runs out and the
 * live worker reads the split; the live worker's own leases, while it
 * waits on the syncs too, never do. */
Test(fleet_leases, a_slow_sync_still_expires_a_killed_workers_lease)
{
    const uint64_t rows = 4000; /* 4 splits */
    char log0[300], log1[300];
    fu_master_t m;
    slow_sync_job(&m, "slow-kill", rows, 2);
    snprintf(log0, sizeof log0, "%s/worker0.log", fu_dir);
    snprintf(log1, sizeof log1, "%s/worker1.log", fu_dir);
    pid_t victim = fu_worker_spawn(m.ctl, "slow-kill", "w1", log1);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    fu_client_t c[1];
    pthread_t th[1];
    fu_client_t proto = {
        .master = m.ctl, .job = "slow-kill", .rows = rows, .epochs = 1, .seen = seen};
    fu_clients_start(c, th, 1, &proto);
    double deadline = fu_now() + tu_timeout(30);
    while (worker_leases(&m, "w1") == 0) {
        cr_assert(fu_now() < deadline, "worker w1 never named a lease; see %s", fu_dir);
        usleep(5 * 1000);
    }
    /* w1 first, so that it surely holds a lease when it is killed */
    fu_worker_spawn(m.ctl, "slow-kill", "w0", log0);
    fu_kill9(victim);
    fu_clients_join(c, th, 1);
    fu_assert_once_per_epoch(seen, rows, 1);
    cr_assert(fu_job_finished(&m, "slow-kill"));
    fu_master_stop(&m, SIGTERM);
    const char *text = read_text(m.log);
    cr_assert_not_null(strstr(text, "the lease of worker w1 expired"),
                       "the killed worker's lease never ran out; see %s", m.log);
    cr_assert_null(strstr(text, "the lease of worker w0 expired"),
                   "a live worker's lease ran out while the journal synced; see %s", m.log);
    free(seen);
}
