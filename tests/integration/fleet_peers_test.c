/* Peers that are not what they claim, end to end with real processes (a
 * `sluice master`, workers through the local executor, trainer clients in
 * master mode):
 *
 *  - a rogue COMMIT without the secret is refused: a master with a cluster
 *    secret and a 20,000-row job of two epochs; peers without the secret
 *    (a raw socket that ATTACHes and COMMITs every split's rows, one with a
 *    wrong secret, a trainer client with none) are refused and commit
 *    nothing; then the real workers and trainer (with the secret) deliver
 *    every sample exactly once in each epoch;
 *  - a worker without the secret, or with a wrong one, cannot register;
 *    the master and a worker refuse to bind an address other than loopback
 *    without a secret;
 *  - silent sockets on the control port, more than its cap, do not lock
 *    out a new worker and trainer: the job finishes, each sample once per
 *    epoch. */
#include "fleet_util.h"

#include "common/clock.h"
#include "rpc/auth.h"
#include "rpc/frame.h"

TestSuite(fleet_peers, .init = fu_setup, .fini = fu_teardown);

#define ROWS 20000u
#define STRIPE 2000u /* 10 splits */
#define EPOCHS 2u
#define SECRET "the fleet's cluster secret, 32 bytes"

static char *write_secret(const char *name, const char *text)
{
    char *p = malloc(300);
    snprintf(p, 300, "%s/%s", fu_dir, name);
    fu_write(p, text);
    return p;
}

static char *job_up(fu_master_t *m)
{
    char table[300], spec[1024];
    fu_gen(ROWS, STRIPE, 2, table, sizeof table);
    fu_master_start(m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"peers\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":500,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             table, EPOCHS);
    return fu_submit(m, spec, 1, "dynamic", 2, 2, NULL);
}

static json_int_t job_int(const fu_master_t *m, const char *job, const char *key)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    json_int_t v = json_integer_value(json_object_get(j, key));
    json_decref(j);
    return v;
}

/* Run the job's workers and one trainer (with secret_file) to the end:
 * every sample exactly once in each epoch. */
static void deliver_all(fu_master_t *m, const char *job, const char *secret_file)
{
    sl_master_executor_t *ex = fu_executor(m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc((size_t)ROWS * EPOCHS, sizeof *seen);
    fu_client_t c = {.master = m->ctl,
                     .job = job,
                     .rows = ROWS,
                     .seen = seen,
                     .epochs = EPOCHS,
                     .secret_file = secret_file};
    pthread_t th;
    pthread_create(&th, NULL, fu_client_run, &c);
    double deadline = fu_now() + tu_timeout(60);
    while (!atomic_load(&c.finished)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep(50 * 1000);
    }
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "the trainer ended with %s: %s", sl_err_str(c.end), c.msg);
    cr_assert_eq(c.samples, (uint64_t)ROWS * EPOCHS);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(m, job));
    fu_executor_drain(ex, job);
    fu_executor_destroy(ex);
    free(seen);
}

/* The next frame on fd (type asserted); returns its message for ERROR. */
static void expect_frame(int fd, sl_rpc_type_t type, const char *needle)
{
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, type, "got %s", sl_rpc_type_name(f.type));
    if (type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
        cr_assert(strstr(e->message, needle), "%s", e->message);
    }
    sl_rpc_frame_free(&f);
}

Test(fleet_peers, a_rogue_commit_without_the_secret_is_refused)
{
    char *secret = write_secret("cluster.secret", SECRET "\n");
    char *wrong = write_secret("wrong.secret", "a secret of some other cluster\n");
    fu_master_t m = {.secret_file = secret};
    char *job = job_up(&m);

    /* The rogue: ATTACH, then COMMIT every split's whole row range. */
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(m.ctl, 2000, &fd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, (int)(tu_timeout(5) * 1000), &err), SL_OK);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_RPC_VERSION;
    a.job_id = job;
    a.client_id = "rogue";
    sl_rpc_send(fd, SL_RPC_ATTACH, &a.base, NULL, 0, NULL);
    for (uint32_t s = 0; s < ROWS / STRIPE; s++) {
        Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
        Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
        Sluice__Control__Commit cm = SLUICE__CONTROL__COMMIT__INIT;
        ref.job_id = job;
        ref.split = s;
        rows.to_row = STRIPE;
        cm.client_id = "rogue";
        cm.nonce = s + 1;
        cm.ref = &ref;
        cm.rows = &rows;
        cm.num_samples = STRIPE;
        /* the master may have hung up already: the sends may fail */
        sl_rpc_send(fd, SL_RPC_COMMIT, &cm.base, NULL, 0, NULL);
    }
    expect_frame(fd, SL_RPC_AUTH_CHALLENGE, NULL);
    expect_frame(fd, SL_RPC_ERROR,
                 "authentication failed: expected an auth-response frame, got "
                 "attach");
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_ERR_CLOSED, "%s", err.msg);
    close(fd);

    /* A wrong secret, and a trainer client without one. */
    cr_assert_eq(sl_rpc_connect(m.ctl, 2000, &fd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_auth_client(fd, "a secret of some other cluster",
                                    sl_clock_ms() + (uint64_t)(tu_timeout(5) * 1000), &err),
                 SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "refused: authentication failed: wrong proof"), "%s", err.msg);
    close(fd);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m.ctl;
    o.job_id = job;
    sl_trainer_t *t = NULL;
    unsetenv(SL_RPC_SECRET_ENV);
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "the server requires the cluster secret"), "%s", err.msg);
    o.cluster_secret_file = wrong;
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "authentication failed"), "%s", err.msg);

    /* Nothing was committed; the job goes on. */
    cr_assert_eq(job_int(&m, job, "committed_rows"), 0);
    cr_assert_eq(job_int(&m, job, "epoch"), 0);
    cr_assert(!fu_job_finished(&m, job));
    char *b;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &b), 200);
    cr_assert(strstr(b, "sluice_master_auth_failures_total{reason=\"refused\"} 4\n"), "%s", b);
    free(b);

    /* The real fleet, with the secret: every sample in each epoch. */
    deliver_all(&m, job, secret);
    fu_master_stop(&m, SIGTERM);
    free(job);
    free(secret);
    free(wrong);
}

/* Run sluice without a cluster secret in its environment. */
static int run_sluice(const char *const *args, char **out)
{
    return fu_run(args, SL_RPC_SECRET_ENV, NULL, out);
}

Test(fleet_peers, a_worker_without_the_secret_cannot_register)
{
    char *secret = write_secret("cluster.secret", SECRET "\n");
    char *wrong = write_secret("wrong.secret", "a secret of some other cluster\n");
    fu_master_t m = {.secret_file = secret};
    char *job = job_up(&m);
    char *out;
    const char *none[] = {"worker", "--master", m.ctl, "--job-id", job, NULL};
    cr_assert_eq(run_sluice(none, &out), 1, "%s", out);
    cr_assert(strstr(out, "got auth-challenge (the server requires the cluster secret"), "%s", out);
    free(out);
    const char *bad[] = {"worker", "--master", m.ctl, "--job-id", job, "--cluster-secret-file",
                         wrong,    NULL};
    cr_assert_eq(run_sluice(bad, &out), 1, "%s", out);
    cr_assert(strstr(out, "refused: authentication failed: wrong proof"), "%s", out);
    free(out);
    json_t *ws = fu_get_json(m.admin, "/workers");
    cr_assert_eq(json_array_size(json_object_get(ws, "workers")), 0, "a worker registered");
    json_decref(ws);
    /* an address other than loopback needs the secret */
    char state[300];
    snprintf(state, sizeof state, "%s/state2", fu_dir);
    const char *master[] = {"master",      "--listen", "0.0.0.0:0", "--admin",
                            "127.0.0.1:0", "--state",  state,       NULL};
    cr_assert_eq(run_sluice(master, &out), 1, "%s", out);
    cr_assert(strstr(out, "master --listen 0.0.0.0:0: an address other than loopback needs a "
                          "cluster secret"),
              "%s", out);
    free(out);
    const char *worker[] = {"worker", "--master", m.ctl,       "--job-id",
                            job,      "--listen", "0.0.0.0:0", NULL};
    cr_assert_eq(run_sluice(worker, &out), 1, "%s", out);
    cr_assert(strstr(out, "worker --listen 0.0.0.0:0: an address other than loopback needs a "
                          "cluster secret"),
              "%s", out);
    free(out);
    fu_master_stop(&m, SIGTERM);
    free(job);
    free(secret);
    free(wrong);
}

Test(fleet_peers, silent_sockets_do_not_lock_out_workers_and_trainers)
{
    /* a cap of 64 control connections, 150 silent sockets */
    fu_master_t m = {.extra = {"--max-connections", "64"}};
    char *job = job_up(&m);
    int silent[150];
    for (int i = 0; i < 150; i++) {
        sl_error_t err = {0};
        cr_assert_eq(sl_rpc_connect(m.ctl, 2000, &silent[i], &err), SL_OK, "%d: %s", i, err.msg);
    }
    deliver_all(&m, job, NULL);
    char *b;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &b), 200);
    /* 86 silent ones made room for the others at once (more made room for
     * the workers and the trainer, unless their handshake time ran out
     * first) */
    const char *key = "sluice_master_connections_closed_total{reason=\"evicted\"} ";
    const char *ev = strstr(b, key);
    cr_assert_not_null(ev, "%s", b);
    long evicted = strtol(ev + strlen(key), NULL, 10);
    cr_assert_geq(evicted, 86, "%s", b);
    cr_assert(strstr(b, "sluice_master_connections_closed_total{reason=\"refused\"} 0\n"), "%s", b);
    free(b);
    for (int i = 0; i < 150; i++)
        close(silent[i]);
    fu_master_stop(&m, SIGTERM);
    free(job);
}
