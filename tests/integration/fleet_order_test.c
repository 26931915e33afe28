/* The deterministic order end to end (docs/DESIGN.md "A deterministic
 * order"; "order": "deterministic"): a real master, `sluice worker`
 * processes and trainer clients over 8 splits of 500 rows, batches of 100,
 * two epochs with a seeded split order. The global sequence of each epoch
 * (batch g from rank g mod R, in g order) is the same with 1 or 2 workers,
 * 1 or 2 ranks, and with a worker killed with SIGKILL mid-epoch; every
 * sample exactly once an epoch. Its resume: fleet_order_resume_test. */
#include "fleet_util.h"

TestSuite(fleet_order, .init = fu_setup, .fini = fu_teardown);

#define ROWS 4000u
#define EPOCHS 2u
#define BATCH 100u
#define NB (ROWS / BATCH) /* batches an epoch: 500-row splits cut whole */

static const char *spec_of(const char *table, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"id\":\"det\",\"source\":{\"table\":\"%s\"},\"order\":\"deterministic\","
             "\"batch\":{\"size\":%u,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             table, BATCH, EPOCHS);
    return buf;
}

/* One run: `workers` workers, `ranks` ranks; kill: SIGKILL the first
 * worker seen holding a lease. seq gets [EPOCHS * ROWS] sample ids: each epoch's batches merged
 * by g. */
static void run(const char *table, uint32_t workers, uint32_t ranks, bool kill, int64_t *seq)
{
    char spec[1024];
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    spec_of(table, spec, sizeof spec);
    free(fu_submit(&m, spec, ranks, "dynamic", workers, workers, NULL));
    pid_t w[2];
    for (uint32_t i = 0; i < workers; i++) {
        char id[16], log[400];
        snprintf(id, sizeof id, "w%u", i);
        snprintf(log, sizeof log, "%s/worker-%s-%u-%u-%d.log", fu_dir, id, workers, ranks, kill);
        w[i] = fu_worker_spawn(m.ctl, "det", id, log);
    }
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    int64_t *order[2];
    uint64_t *sizes[2], per_epoch[2][EPOCHS];
    for (uint32_t r = 0; r < ranks; r++) {
        order[r] = calloc(EPOCHS * ROWS, sizeof *order[r]);
        sizes[r] = calloc(EPOCHS * ROWS, sizeof *sizes[r]);
        memset(per_epoch[r], 0, sizeof per_epoch[r]);
        c[r] = (fu_client_t){.master = m.ctl,
                             .job = "det",
                             .rank = r,
                             .world_size = ranks,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .order = order[r],
                             .batch_sizes = sizes[r],
                             .epoch_batches = per_epoch[r],
                             .refresh_ms = 100};
        atomic_init(&c[r].delay_us, kill ? 20000 : 0); /* a kill mid-epoch */
        atomic_init(&c[r].stop, false);
        atomic_init(&c[r].finished, false);
        pthread_create(&th[r], NULL, fu_client_run, &c[r]);
    }
    uint32_t victim = 0;
    if (kill) {
        /* when a worker holds a lease (bounded), that one: its split is left
         * mid-way (which worker leases first is timing's, not the test's) */
        bool holds = false;
        for (int i = 0; i < 1000 && !holds; i++) {
            json_t *j = fu_get_json(m.admin, "/workers");
            size_t k;
            json_t *x;
            json_array_foreach(json_object_get(j, "workers"), k, x)
            {
                const char *id = json_string_value(json_object_get(x, "id"));
                if (!holds && id != NULL && id[0] == 'w' && (id[1] == '0' || id[1] == '1') &&
                    id[2] == '\0' && (uint32_t)(id[1] - '0') < workers &&
                    json_integer_value(json_object_get(x, "leases")) > 0) {
                    holds = true;
                    victim = (uint32_t)(id[1] - '0');
                }
            }
            json_decref(j);
            if (!holds) usleep(10 * 1000);
        }
        cr_assert(holds, "no worker held a lease in 10 s");
        cr_assert_not(fu_job_finished(&m, "det"), "the job ended before the kill");
        fu_kill9(w[victim]);
    }
    fu_clients_join(c, th, (int)ranks);
    for (uint64_t k = 0; k < EPOCHS * ROWS; k++)
        cr_assert_eq(atomic_load(&seen[k]), 1, "epoch %llu sample %llu delivered %u times",
                     (unsigned long long)(k / ROWS), (unsigned long long)(k % ROWS),
                     atomic_load(&seen[k]));
    /* merge by g: batch g of an epoch is rank g mod R's (g / R)-th of it */
    uint64_t at = 0, bstart[2] = {0, 0}, sstart[2] = {0, 0};
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t nb = 0;
        for (uint32_t r = 0; r < ranks; r++)
            nb += per_epoch[r][e];
        cr_assert_eq(nb, NB, "epoch %u: %llu batches", e, (unsigned long long)nb);
        for (uint64_t g = 0; g < nb; g++) {
            uint32_t r = (uint32_t)(g % ranks);
            uint64_t n = sizes[r][bstart[r]++];
            cr_assert_eq(n, BATCH, "epoch %u g %llu: %llu samples", e, (unsigned long long)g,
                         (unsigned long long)n);
            memcpy(seq + at, order[r] + sstart[r], n * sizeof *seq);
            sstart[r] += n;
            at += n;
        }
    }
    cr_assert_eq(at, EPOCHS * ROWS);
    cr_assert(fu_job_finished(&m, "det"));
    /* the killed worker's leases ran out and were leased again */
    if (kill) cr_assert_geq(fu_status_int(&m, "lease_expiries"), 1);
    char *b;
    cr_assert_eq(fu_http(m.admin, "DELETE", "/jobs/det", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    for (uint32_t i = 0; i < workers; i++)
        if (!kill || i != victim) fu_kill9(w[i]);
    for (uint32_t r = 0; r < ranks; r++) {
        free(order[r]);
        free(sizes[r]);
    }
    free(seen);
    fu_master_stop(&m, SIGTERM);
}

Test(fleet_order, the_same_global_sequence_whatever_the_workers_ranks_and_kills, .timeout = 300)
{
    char table[300];
    fu_gen(ROWS, 500, 1, table, sizeof table);
    int64_t *ref = calloc(EPOCHS * ROWS, sizeof *ref), *seq = calloc(EPOCHS * ROWS, sizeof *seq);
    run(table, 1, 1, false, ref);
    /* the epochs differ (a seeded split order each) */
    cr_assert_neq(memcmp(ref, ref + ROWS, ROWS * sizeof *ref), 0);
    const struct {
        uint32_t workers, ranks;
        bool kill;
    } cases[] = {{2, 1, false}, {1, 2, false}, {2, 2, false}, {2, 2, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run(table, cases[i].workers, cases[i].ranks, cases[i].kill, seq);
        for (uint64_t k = 0; k < EPOCHS * ROWS; k++)
            cr_assert_eq(seq[k], ref[k],
                         "%u workers, %u ranks%s: epoch %llu position %llu: sample %lld, the "
                         "reference %lld",
                         cases[i].workers, cases[i].ranks, cases[i].kill ? ", a kill" : "",
                         (unsigned long long)(k / ROWS), (unsigned long long)(k % ROWS),
                         (long long)seq[k], (long long)ref[k]);
    }
    free(ref);
    free(seq);
}

/* The value of the worker's sample `name{job="det",rank="R"}` on its
 * /metrics, -1 when absent (no deterministic lease yet) or unreachable. */
static double rank_queued(const char *admin, uint32_t rank)
{
    char *b = NULL;
    double v = -1;
    if (fu_http(admin, "GET", "/metrics", NULL, NULL, &b) == 200) {
        char want[128];
        snprintf(want, sizeof want,
                 "sluice_worker_order_rank_queued_batches{job=\"det\",rank=\"%u\"} ", rank);
        const char *p = strstr(b, want);
        if (p != NULL) v = strtod(p + strlen(want), NULL);
    }
    free(b);
    return v;
}

/* A stalled rank on the worker's /metrics (det28h): rank 1's trainer not
 * reading, its batches wait on the worker, named by rank, while rank 0's
 * leave; once it reads, the job ends with every sample once. */
Test(fleet_order, a_stalled_rank_shows_on_the_workers_metrics, .timeout = 120)
{
    char table[300], spec[1024], log[400], admin[64];
    fu_gen(ROWS, 500, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    free(fu_submit(&m, spec_of(table, spec, sizeof spec), 2, "dynamic", 1, 1, NULL));
    snprintf(admin, sizeof admin, "127.0.0.1:%u", fu_free_port());
    snprintf(log, sizeof log, "%s/worker-stall.log", fu_dir);
    const char *argv[] = {fu_binary(), "worker",      "--master", m.ctl,      "--job-id",
                          "det",       "--worker-id", "w0",       "--listen", "127.0.0.1:0",
                          "--threads", "1",           "--admin",  admin,      NULL};
    pid_t w = fu_spawn(argv, -1, log);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    for (uint32_t r = 0; r < 2; r++) {
        c[r] = (fu_client_t){.master = m.ctl,
                             .job = "det",
                             .rank = r,
                             .world_size = 2,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .refresh_ms = 100};
        atomic_init(&c[r].delay_us, 0);
        atomic_init(&c[r].stop, false);
        atomic_init(&c[r].finished, false);
    }
    pthread_create(&th[0], NULL, fu_client_run, &c[0]);
    /* rank 1 does not read: its batches wait here (bounded, 20 s) */
    double q1 = -1;
    for (int i = 0; i < 2000 && q1 < 1; i++) {
        q1 = rank_queued(admin, 1);
        if (q1 < 1) usleep(10 * 1000);
    }
    cr_assert_geq(q1, 1, "rank 1's queued batches never showed on the worker's /metrics");
    cr_assert_geq(rank_queued(admin, 0), 0);
    cr_assert_not(fu_job_finished(&m, "det"));
    pthread_create(&th[1], NULL, fu_client_run, &c[1]);
    fu_clients_join(c, th, 2);
    for (uint64_t k = 0; k < EPOCHS * ROWS; k++)
        cr_assert_eq(atomic_load(&seen[k]), 1, "epoch %llu sample %llu delivered %u times",
                     (unsigned long long)(k / ROWS), (unsigned long long)(k % ROWS),
                     atomic_load(&seen[k]));
    cr_assert(fu_job_finished(&m, "det"));
    char *b;
    cr_assert_eq(fu_http(m.admin, "DELETE", "/jobs/det", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    if (fu_wait_exit(w, 10) == -1) fu_kill9(w); /* retired with its job, else killed */
    free(seen);
    fu_master_stop(&m, SIGTERM);
}
