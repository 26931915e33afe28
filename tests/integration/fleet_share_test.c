/* Reuse across jobs (issue 14), on a master in this process: the plan
 * fingerprint of each job in GET /jobs and /jobs/{id} (equal for the same
 * plan written differently, different for another seed), which jobs share
 * it ("share": false opts out), the metrics, and the fingerprint kept
 * across a master restart; a worker retired before it starts prints its
 * summary. */
#include "fleet_util.h"

#include <inttypes.h>

#include "dpp/master/process/admin.h"

TestSuite(fleet_share, .init = fu_setup, .fini = fu_teardown);

typedef struct env {
    sl_master_t *m;
    sl_admin_t *a;
    char addr[64];
    char table[300];
    char state[300];
} env_t;

static void env_open(env_t *e)
{
    sl_master_opts_t o = {.lease_timeout_ms = 2000, .state_dir = e->state};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&o, &e->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_admin_start(e->m, "127.0.0.1:0", FU_TOKEN, &e->a, &err), SL_OK, "%s",
                 err.msg);
    snprintf(e->addr, sizeof e->addr, "127.0.0.1:%u", (unsigned)sl_admin_port(e->a));
}

static void env_close(env_t *e)
{
    sl_admin_stop(e->a);
    sl_master_stop(e->m);
}

static void submit(const env_t *e, const char *spec)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"spec\":%s,\"ranks\":1,\"sharding\":\"dynamic\",\"min_workers\":1,"
             "\"max_workers\":1}",
             spec);
    char *b;
    int st = fu_http(e->addr, "POST", "/jobs", FU_TOKEN, body, &b);
    cr_assert_eq(st, 201, "POST /jobs: %d %s", st, b);
    free(b);
}

/* GET /jobs/{id}: its fingerprint (16 hex digits), share, and the ids it
 * shares with, sorted, comma-separated. */
static void job_share(const env_t *e, const char *id, char *fp, bool *share, char *peers)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", id);
    json_t *j = fu_get_json(e->addr, path);
    const char *f = json_string_value(json_object_get(j, "fingerprint"));
    cr_assert_not_null(f, "%s: no fingerprint", id);
    cr_assert_eq(strlen(f), 16, "%s: fingerprint '%s'", id, f);
    strcpy(fp, f);
    json_t *s = json_object_get(j, "share");
    cr_assert(json_is_boolean(s), "%s: no share", id);
    *share = json_is_true(s);
    json_t *with = json_object_get(j, "shares_with");
    cr_assert(json_is_array(with), "%s: no shares_with", id);
    const char *ids[16];
    size_t n = json_array_size(with);
    cr_assert_leq(n, 16);
    for (size_t i = 0; i < n; i++)
        ids[i] = json_string_value(json_array_get(with, i));
    for (size_t i = 0; i < n; i++) /* sorted: the order of job slots is not the point */
        for (size_t k = i + 1; k < n; k++)
            if (strcmp(ids[k], ids[i]) < 0) {
                const char *t = ids[i];
                ids[i] = ids[k];
                ids[k] = t;
            }
    peers[0] = '\0';
    for (size_t i = 0; i < n; i++)
        sprintf(peers + strlen(peers), "%s%s", i ? "," : "", ids[i]);
    json_decref(j);
}

Test(fleet_share, fingerprints_and_who_shares)
{
    env_t e = {0};
    fu_gen(4000, 1000, 2, e.table, sizeof e.table);
    snprintf(e.state, sizeof e.state, "%s/state", fu_dir);
    env_open(&e);
    char spec[2048];
    /* a: terse */
    snprintf(spec, sizeof spec,
             "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":7}}}",
             e.table);
    submit(&e, spec);
    /* b: the same plan, keys reordered, defaults spelled out */
    snprintf(spec, sizeof spec,
             "{\"batch\":{\"shuffle\":{\"seed\":7,\"window\":0,\"splits\":true},\"epochs\":2,"
             "\"drop_last\":false,\"size\":250,\"sample_ids\":true},\"filters\":[],"
             "\"source\":{\"stripes_per_split\":1,\"table\":\"%s\"},\"id\":\"b\",\"share\":true}",
             e.table);
    submit(&e, spec);
    /* c: another seed, so other samples in another order: never shared */
    snprintf(spec, sizeof spec,
             "{\"id\":\"c\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":8}}}",
             e.table);
    submit(&e, spec);
    /* d: a's plan, opted out */
    snprintf(spec, sizeof spec,
             "{\"id\":\"d\",\"share\":false,\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":7}}}",
             e.table);
    submit(&e, spec);

    for (int round = 0; round < 2; round++) {
        char fa[20], fb[20], fc[20], fd[20], pa[64], pb[64], pc[64], pd[64];
        bool sa, sb, sc, sd;
        job_share(&e, "a", fa, &sa, pa);
        job_share(&e, "b", fb, &sb, pb);
        job_share(&e, "c", fc, &sc, pc);
        job_share(&e, "d", fd, &sd, pd);
        cr_assert_str_eq(fa, fb);
        cr_assert_str_neq(fa, fc);
        cr_assert_str_eq(fa, fd); /* the same plan: opting out does not change what it is */
        cr_assert(sa && sb && sc && !sd);
        cr_assert_str_eq(pa, "b");
        cr_assert_str_eq(pb, "a");
        cr_assert_str_eq(pc, "");
        cr_assert_str_eq(pd, "");

        /* the list says the same */
        json_t *all = fu_get_json(e.addr, "/jobs");
        json_t *jobs = json_object_get(all, "jobs");
        cr_assert_eq(json_array_size(jobs), 4);
        for (size_t i = 0; i < 4; i++) {
            json_t *j = json_array_get(jobs, i);
            const char *id = json_string_value(json_object_get(j, "id"));
            const char *f = json_string_value(json_object_get(j, "fingerprint"));
            cr_assert_str_eq(f, strcmp(id, "c") == 0 ? fc : fa, "%s", id);
            size_t want = strcmp(id, "a") == 0 || strcmp(id, "b") == 0 ? 1 : 0;
            cr_assert_eq(json_array_size(json_object_get(j, "shares_with")), want, "%s", id);
        }
        json_decref(all);

        char *m;
        cr_assert_eq(fu_http(e.addr, "GET", "/metrics", NULL, NULL, &m), 200);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"a\"} 1\n"), "%s", m);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"c\"} 0\n"), "%s", m);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"d\"} 0\n"), "%s", m);
        char line[200];
        snprintf(line, sizeof line,
                 "\nsluice_master_job_plan_info{job=\"d\",fingerprint=\"%s\",share=\"false\"} 1\n",
                 fa);
        cr_assert(strstr(m, line), "%s lacks %s", m, line);
        free(m);

        /* the fingerprints are journaled: a restarted master shows the same */
        env_close(&e);
        env_open(&e);
    }
    /* a job removed no longer shares */
    char *b;
    cr_assert_eq(fu_http(e.addr, "DELETE", "/jobs/b", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    char fa[20], pa[64];
    bool sa;
    job_share(&e, "a", fa, &sa, pa);
    cr_assert_str_eq(pa, "");
    env_close(&e);
}

/* ---- shared passes, end to end: a real master, one worker per job, a
 * trainer per job ---- */

#define ROWS 8000u
#define EPOCHS 2u

/* A job of the shared plan (8 splits of 1000 rows, batches of 250,
 * shuffled splits) under id; extra: more top-level keys (",\"share\":false")
 * or "" ; seed: the shuffle's. */
static char *share_job(fu_master_t *m, const char *table, const char *id, uint32_t seed,
                       const char *extra)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"}%s,"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":%u}}}",
             id, table, extra, EPOCHS, seed);
    return fu_submit(m, spec, 1, "dynamic", 1, 1, NULL);
}

/* A worker's summary (its log, once it exited): rows read, leases of
 * other jobs taken, batches served to them. */
typedef struct summary {
    uint64_t rows_read, shared_leases, shared_batches, detached;
} summary_t;

static summary_t worker_summary(const char *log)
{
    summary_t s = {0};
    char *text = tu_read_file(log);
    cr_assert_not_null(text, "%s", log);
    const char *r = strstr(text, "rows read ");
    cr_assert_not_null(r, "%s has no summary: %s", log, text);
    s.rows_read = strtoull(r + strlen("rows read "), NULL, 10);
    const char *p = strstr(text, "shared passes: ");
    cr_assert_not_null(p, "%s has no shared passes line: %s", log, text);
    cr_assert_eq(sscanf(p,
                        "shared passes: %" SCNu64 " leases of other jobs, %" SCNu64
                        " batches served to them (%*u bytes), %" SCNu64 " detached",
                        &s.shared_leases, &s.shared_batches, &s.detached),
                 3, "%s", p);
    free(text);
    return s;
}

static void wait_exit(pid_t pid, const char *log)
{
    cr_assert_neq(fu_wait_exit(pid, 30), -1, "worker did not exit; see %s", log);
}

Test(fleet_share, identical_jobs_share_passes_others_do_not, .timeout = 240)
{
    char table[300], logs[4][300];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    /* a and b: one plan; c: another seed; d: a's plan, opted out */
    const char *ids[4] = {"a", "b", "c", "d"};
    char *job[4] = {share_job(&m, table, "a", 7, ""), share_job(&m, table, "b", 7, ""),
                    share_job(&m, table, "c", 8, ""),
                    share_job(&m, table, "d", 7, ",\"share\":false")};
    pid_t w[4];
    for (int k = 0; k < 4; k++) {
        snprintf(logs[k], sizeof logs[k], "%s/worker-%s.log", fu_dir, ids[k]);
        char wid[32];
        snprintf(wid, sizeof wid, "w-%s", ids[k]);
        w[k] = fu_worker_spawn(m.ctl, job[k], wid, logs[k]);
    }
    atomic_uint *seen[4];
    fu_client_t c[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        seen[k] = calloc(EPOCHS * ROWS, sizeof *seen[k]);
        fu_client_t proto = {
            .master = m.ctl, .job = job[k], .rows = ROWS, .epochs = EPOCHS, .seen = seen[k]};
        fu_clients_start(&c[k], &th[k], 1, &proto);
    }
    for (int k = 0; k < 4; k++) {
        fu_clients_join(&c[k], &th[k], 1);
        fu_assert_once_per_epoch(seen[k], ROWS, EPOCHS);
        cr_assert(fu_job_finished(&m, job[k]), "%s", ids[k]);
    }
    summary_t s[4];
    for (int k = 0; k < 4; k++) {
        wait_exit(w[k], logs[k]);
        s[k] = worker_summary(logs[k]);
        cr_log_info("worker of %s: rows read %llu, shared leases %llu, shared batches %llu", ids[k],
                    (unsigned long long)s[k].rows_read, (unsigned long long)s[k].shared_leases,
                    (unsigned long long)s[k].shared_batches);
    }
    /* a and b read their splits together: between them one job's worth of
     * rows (a split of an epoch's start may be read twice when one job
     * ends the epoch more than a second after the other: allow 4 of 16) */
    uint64_t ab = s[0].rows_read + s[1].rows_read;
    cr_assert_leq(ab, (uint64_t)ROWS * EPOCHS * 5 / 4, "a and b read %llu rows: little was shared",
                  (unsigned long long)ab);
    cr_assert_geq(ab, (uint64_t)ROWS * EPOCHS);
    cr_assert_gt(s[0].shared_leases + s[1].shared_leases, 0);
    cr_assert_gt(s[0].shared_batches + s[1].shared_batches, 0);
    /* batches served to the other job: as many as the split reads shared */
    cr_assert_eq(s[0].detached + s[1].detached, 0);
    cr_assert_eq(s[0].shared_batches + s[1].shared_batches,
                 (s[0].shared_leases + s[1].shared_leases) * 4); /* 1000 rows: 4 batches */
    /* c (another seed) and d (opted out) read everything alone */
    for (int k = 2; k < 4; k++) {
        cr_assert_eq(s[k].rows_read, (uint64_t)ROWS * EPOCHS, "%s", ids[k]);
        cr_assert_eq(s[k].shared_leases, 0, "%s", ids[k]);
        cr_assert_eq(s[k].shared_batches, 0, "%s", ids[k]);
    }
    for (int k = 0; k < 4; k++) {
        free(seen[k]);
        free(job[k]);
    }
    fu_master_stop(&m, SIGTERM);
}

/* `sluice worker --master --job-id job` with --share-window window. */
/* `sluice worker --master --job-id job` with --share-window window and
 * --memory-limit memory. */
static pid_t worker_spawn(const fu_master_t *m, const char *job, const char *id, const char *window,
                          const char *memory, const char *log)
{
    const char *argv[] = {
        fu_binary(),      "worker", "--master",       m->ctl,        "--job-id",  job,
        "--worker-id",    id,       "--listen",       "127.0.0.1:0", "--threads", "1",
        "--share-window", window,   "--memory-limit", memory,        NULL};
    return fu_spawn(argv, -1, log);
}

/* a and b share their passes; b's trainer (its own process) is killed
 * with SIGKILL early (in epoch 0, or 1 when it ran ahead under load) and
 * started again a moment later: a's trainer goes on unaffected and gets
 * every sample exactly once in each epoch; b falls more than the share
 * window behind, stops sharing (detached), and its restarted trainer gets
 * the rest: no sample twice in an epoch, and missing exactly the samples
 * the killed trainer had committed and not printed (its prefetch). */
static void killed_mid_epoch(const char *window, const char *memory)
{
    char table[300], wlog[2][300], rlog[300];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    char *a = share_job(&m, table, "a", 7, ""), *b = share_job(&m, table, "b", 7, "");
    snprintf(wlog[0], sizeof wlog[0], "%s/worker-a.log", fu_dir);
    snprintf(wlog[1], sizeof wlog[1], "%s/worker-b.log", fu_dir);
    snprintf(rlog, sizeof rlog, "%s/readers.log", fu_dir);
    pid_t w[2] = {worker_spawn(&m, a, "w-a", window, memory, wlog[0]),
                  worker_spawn(&m, b, "w-b", window, memory, wlog[1])};

    atomic_uint *seen_a = calloc(EPOCHS * ROWS, sizeof *seen_a);
    atomic_uint *seen_b[2] = {calloc(EPOCHS * ROWS, sizeof(atomic_uint)),
                              calloc(EPOCHS * ROWS, sizeof(atomic_uint))};
    fu_reader_t r[2];
    fu_client_t ca;
    pthread_t ta;
    fu_client_t proto = {.master = m.ctl,
                         .job = a,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = seen_a,
                         .delay_us = 2000};
    fu_reader_start(&r[0], &m, b, ROWS, EPOCHS, seen_b[0], rlog);
    fu_clients_start(&ca, &ta, 1, &proto);
    /* both take batches; then b's trainer dies, early in epoch 0 */
    double deadline = fu_now() + tu_timeout(15);
    while (atomic_load(&r[0].samples) < ROWS / 10 || fu_seen_total(seen_a, ROWS) == 0) {
        cr_assert(fu_now() < deadline, "no batches; see %s", rlog);
        usleep(1000);
    }
    fu_reader_kill9(&r[0]);
    /* What the killed trainer took with it: the samples its client had
     * committed (the master counts only clients' commits in "samples")
     * but it never printed (its prefetch; a line in its stdio buffer).
     * Counted once its last commits in flight have landed: nothing else
     * commits b's rows while it has no trainer (no row of this table is
     * filtered out, so no SPLIT_READ has an empty range to commit), which
     * is the point: not even a's passes of b's splits. Under load b's
     * trainer may have run into epoch 1 before a took its first batch, so
     * the loss may be in either epoch; every sample is accounted for. */
    json_int_t kill_samples = -1, kill_epoch = -1;
    double stable_since = fu_now();
    deadline = fu_now() + tu_timeout(15);
    for (;;) {
        char path[64];
        snprintf(path, sizeof path, "/jobs/%s", b);
        json_t *j = fu_get_json(m.admin, path);
        json_int_t sa = json_integer_value(json_object_get(j, "samples"));
        json_int_t ep = json_integer_value(json_object_get(j, "epoch"));
        json_decref(j);
        if (sa != kill_samples || ep != kill_epoch) {
            kill_samples = sa;
            kill_epoch = ep;
            stable_since = fu_now();
        } else if (fu_now() - stable_since >= tu_timeout(0.5)) {
            break;
        }
        cr_assert(fu_now() < deadline, "b's committed samples keep changing with no trainer");
        usleep(20000);
    }
    uint64_t printed0 = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        printed0 += fu_seen_total(seen_b[0] + (uint64_t)e * ROWS, ROWS);
    cr_assert_geq((uint64_t)kill_samples, printed0, "b: %llu samples printed, %lld committed",
                  (unsigned long long)printed0, (long long)kill_samples);
    const uint64_t lost = (uint64_t)kill_samples - printed0;
    cr_log_info("b's trainer killed in epoch %lld: %llu samples committed, %llu printed",
                (long long)kill_epoch, (unsigned long long)kill_samples,
                (unsigned long long)printed0);
    /* b's trainer stays away while a goes on: a fifth of a's first epoch more */
    uint64_t at = fu_seen_total(seen_a, ROWS);
    deadline = fu_now() + tu_timeout(30);
    while (fu_seen_total(seen_a, ROWS) < at + ROWS / 5 && !atomic_load(&ca.finished)) {
        cr_assert(fu_now() < deadline, "a delivered too little with b's trainer gone");
        usleep(1000);
    }
    fu_reader_start(&r[1], &m, b, ROWS, EPOCHS, seen_b[1], rlog);
    fu_clients_join(&ca, &ta, 1);
    fu_assert_once_per_epoch(seen_a, ROWS, EPOCHS);
    int ws = fu_reader_join(&r[1], 60);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the second sluice read: status %d; see %s",
              ws, rlog);
    cr_assert(fu_job_finished(&m, a));
    cr_assert(fu_job_finished(&m, b));
    /* what the passes saved, as the workers' heartbeats told the master */
    uint64_t shared = 0, bytes = 0;
    double cpu = 0;
    for (int k = 0; k < 2; k++) {
        char path[64];
        snprintf(path, sizeof path, "/jobs/%s", k ? b : a);
        json_t *j = fu_get_json(m.admin, path);
        shared += (uint64_t)json_integer_value(json_object_get(j, "shared_batches"));
        bytes += (uint64_t)json_integer_value(json_object_get(j, "shared_bytes_saved"));
        cpu += json_real_value(json_object_get(j, "shared_cpu_seconds_saved"));
        cr_assert(json_is_real(json_object_get(j, "shared_cpu_seconds_saved")));
        json_decref(j);
    }
    cr_assert_gt(shared, 0, "GET /jobs shows no shared batches");
    cr_assert_gt(bytes, shared * 1000, "%llu bytes for %llu batches", (unsigned long long)bytes,
                 (unsigned long long)shared);
    cr_assert_gt(cpu, 0);
    /* the killed reader's prefetch on each of its two workers (its job's
     * and the one sharing with it), and a batch or two committed but not
     * printed: delivered at most once, as for any trainer killed */
    const uint64_t bound = (4 * 2 + 2) * 250;
    cr_assert_leq(lost, bound, "b: the killed trainer took %llu samples with it",
                  (unsigned long long)lost);
    uint64_t missing_all = 0;
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t missing = 0;
        for (uint64_t id = 0; id < ROWS; id++) {
            unsigned n = atomic_load(&seen_b[0][(uint64_t)e * ROWS + id]) +
                         atomic_load(&seen_b[1][(uint64_t)e * ROWS + id]);
            cr_assert_leq(n, 1, "b: epoch %u sample %llu delivered %u times", e,
                          (unsigned long long)id, n);
            missing += n == 0;
        }
        /* nothing of an epoch the killed trainer never reached */
        cr_assert(missing == 0 || (json_int_t)e <= kill_epoch,
                  "b: epoch %u: %llu samples missing, the trainer was killed in epoch %lld", e,
                  (unsigned long long)missing, (long long)kill_epoch);
        missing_all += missing;
    }
    /* exactly what the killed trainer took: no row of b counted as read
     * without b's trainer committing it */
    cr_assert_eq(missing_all, lost, "b: %llu samples missing, the killed trainer took %llu",
                 (unsigned long long)missing_all, (unsigned long long)lost);
    char bpath[64];
    snprintf(bpath, sizeof bpath, "/jobs/%s", b);
    json_t *bj = fu_get_json(m.admin, bpath);
    cr_assert_eq(json_integer_value(json_object_get(bj, "samples")), (json_int_t)(ROWS * EPOCHS),
                 "b's samples are not every row of every epoch, each committed once");
    json_decref(bj);
    summary_t s[2];
    for (int k = 0; k < 2; k++) {
        wait_exit(w[k], wlog[k]);
        s[k] = worker_summary(wlog[k]);
        cr_log_info("worker %d: rows read %llu, shared leases %llu, batches %llu, detached %llu", k,
                    (unsigned long long)s[k].rows_read, (unsigned long long)s[k].shared_leases,
                    (unsigned long long)s[k].shared_batches, (unsigned long long)s[k].detached);
    }
    cr_assert_gt(s[0].shared_leases + s[1].shared_leases, 0, "nothing was shared");
    /* b fell behind the passes it shared (the worker that read them
     * detached it; which worker read them is the master's choice) */
    cr_assert_gt(s[0].detached + s[1].detached, 0, "b never fell behind a's passes");
    free(seen_a);
    free(seen_b[0]);
    free(seen_b[1]);
    free(a);
    free(b);
    fu_master_stop(&m, SIGTERM);
}

/* b falls behind by batches: 4 not acknowledged */
Test(fleet_share, one_jobs_trainer_killed_the_other_unaffected, .timeout = 240)
{
    killed_mid_epoch("4", "256M");
}

/* b falls behind by bytes: its copies hold a quarter of a 2 MiB memory
 * limit (batches of ~90 KB) long before 1000 batches. Here b's own worker
 * stalls too (its memory full of b's batches, which nobody takes): the
 * leases of a's passes on it are released after --share-stall-ms and a
 * reads those rows on its own (docs/DESIGN.md, "Shared passes"). */
Test(fleet_share, a_job_whose_copies_fill_a_quarter_of_the_memory_stops_sharing, .timeout = 240)
{
    killed_mid_epoch("1000", "2M");
}

/* A worker the master retires before it starts (its job ended without it,
 * as a's does when b's worker read all of a's splits in shared passes)
 * still prints its summary, all zeros, and exits 0: every registered
 * worker's log has the same lines. */
Test(fleet_share, a_worker_retired_before_it_starts_prints_its_summary)
{
    char table[300], log[2][300];
    fu_gen(2000, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    char *job = share_job(&m, table, "z", 7, "");
    snprintf(log[0], sizeof log[0], "%s/worker-z1.log", fu_dir);
    snprintf(log[1], sizeof log[1], "%s/worker-z2.log", fu_dir);
    pid_t w = fu_worker_spawn(m.ctl, job, "w-z1", log[0]);
    atomic_uint *seen = calloc(EPOCHS * 2000, sizeof *seen);
    fu_client_t c;
    pthread_t th;
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = 2000, .epochs = EPOCHS, .seen = seen};
    fu_clients_start(&c, &th, 1, &proto);
    fu_clients_join(&c, &th, 1);
    fu_assert_once_per_epoch(seen, 2000, EPOCHS);
    cr_assert(fu_job_finished(&m, job));
    wait_exit(w, log[0]);
    cr_assert_eq(worker_summary(log[0]).rows_read, 2000 * EPOCHS);
    /* the job is over: the next worker of it is retired before it starts */
    w = fu_worker_spawn(m.ctl, job, "w-z2", log[1]);
    int ws = fu_wait_exit(w, 30);
    cr_assert(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "status %d; see %s", ws, log[1]);
    summary_t s = worker_summary(log[1]);
    cr_assert_eq(s.rows_read, 0);
    cr_assert_eq(s.shared_leases, 0);
    cr_assert_eq(s.shared_batches, 0);
    char *text = tu_read_file(log[1]);
    char want[300];
    snprintf(want, sizeof want,
             "the master has no work for this worker: master %s: no more work for this worker\n"
             "worker summary\n  splits 0, stripes 0, rows read 0,",
             m.ctl);
    cr_assert(strstr(text, want) != NULL, "'%s' lacks '%s'", text, want);
    snprintf(want, sizeof want,
             "  master %s, job z: leases 0, splits reported 0 (0 done), revoked 0, reconnects 0, "
             "retired by the master\n",
             m.ctl);
    cr_assert(strstr(text, want) != NULL, "'%s' lacks '%s'", text, want);
    free(text);
    free(seen);
    free(job);
    fu_master_stop(&m, SIGTERM);
}
