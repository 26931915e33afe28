/* Resume at another world size, end to end (docs/DESIGN.md "Resume
 * tokens"): R trainer ranks read a job of two epochs from worker processes
 * and stop a few batches apart (each takes its version-4 token when it
 * stops, at its own moment, while the others go on; their prefetched,
 * committed batches are not in their tokens); the job is deleted and
 * submitted again with every rank's token and R2 ranks, and the new ranks
 * read it to the end, one worker killed with SIGKILL and the master killed
 * with SIGKILL and restarted on the way. In each epoch, delivered before +
 * after = the epoch, no sample twice. A set missing a rank is refused with
 * a message naming it. */
#include "fleet_util.h"

TestSuite(fleet_resume_ranks, .init = fu_setup, .fini = fu_teardown);

#define ROWS 20000u
#define EPOCHS 2u
#define MAXR 4

/* Submit spec with ranks and the tokens (base64) as "resume_tokens".
 * @return the HTTP status; *body the answer (caller frees). */
static int submit_tokens(const fu_master_t *m, const char *spec_json, uint32_t ranks,
                         const char *sharding, char *const *b64, uint32_t n, char **body)
{
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    cr_assert_not_null(spec, "bad test spec: %s", je.text);
    json_t *toks = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(toks, json_string(b64[i]));
    json_t *req =
        json_pack("{s:o, s:i, s:s, s:i, s:i, s:o}", "spec", spec, "ranks", (json_int_t)ranks,
                  "sharding", sharding, "min_workers", 2, "max_workers", 2, "resume_tokens", toks);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    int st = fu_http(m->admin, "POST", "/jobs", FU_TOKEN, text, body);
    free(text);
    return st;
}

static void start_clients(fu_client_t *c, pthread_t *th, uint32_t n, const fu_master_t *m,
                          const char *job, atomic_uint *seen, const uint64_t *stop_after,
                          uint32_t delay_us)
{
    for (uint32_t i = 0; i < n; i++) {
        c[i] = (fu_client_t){.master = m->ctl,
                             .job = job,
                             .rank = i,
                             .world_size = n,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .stop_after = stop_after ? stop_after[i] : 0};
        atomic_init(&c[i].delay_us, delay_us);
        atomic_init(&c[i].stop, false);
        atomic_init(&c[i].finished, false);
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* stops: each rank's batches before its token, NULL: drawn (the ranks
 * up to `apart` batches apart). */
static void resume_case_at(uint32_t R, uint32_t R2, const char *sharding, uint32_t apart,
                           const uint64_t *stops, uint64_t *rng)
{
    char table[300], spec[1024], log[400];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"rs\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":9}}}",
             table, EPOCHS);
    char *job = fu_submit(&m, spec, R, sharding, 2, 2, NULL);
    pid_t w[3];
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "w%d", i);
        snprintf(log, sizeof log, "%s/worker-%d.log", fu_dir, i);
        w[i] = fu_worker_spawn(m.ctl, job, id, log);
    }
    /* 80 batches an epoch, 160 in all: the checkpoint somewhere in the
     * first epoch or just after, the ranks up to `apart` batches apart */
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    uint64_t k = 5 + tu_below(rng, 60 / R), stop[MAXR];
    for (uint32_t r = 0; r < R; r++)
        stop[r] = stops != NULL ? stops[r] : k + (apart ? tu_below(rng, apart + 1) : 0);
    fu_client_t c[MAXR];
    pthread_t th[MAXR];
    start_clients(c, th, R, &m, job, seen, stop, 0);
    char *b64[MAXR];
    for (uint32_t r = 0; r < R; r++) {
        pthread_join(th[r], NULL);
        cr_assert_eq(c[r].end, SL_ERR_CLOSED, "rank %u: %s: %s", r, sl_err_str(c[r].end), c[r].msg);
        cr_assert_eq(c[r].batches, stop[r]);
        cr_assert_not_null(c[r].token);
        uint32_t version;
        memcpy(&version, c[r].token + 4, 4);
        cr_assert_eq(version, 4, "a table job's token is of version 4");
        b64[r] = fu_base64(c[r].token, c[r].token_len);
        free(c[r].token);
    }
    uint64_t before = fu_seen_total(seen, ROWS) + fu_seen_total(seen + ROWS, ROWS);
    char *b, path[64] = "/jobs/rs";
    cr_assert_eq(fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    for (int i = 0; i < 2; i++)
        fu_kill9(w[i]);

    /* a set missing a rank: refused, naming it, nothing started */
    if (R > 1) {
        cr_assert_eq(submit_tokens(&m, spec, R2, sharding, b64, R - 1, &b), 400, "%s", b);
        char want[96];
        snprintf(want, sizeof want, "rank %u missing", R - 1);
        cr_assert(strstr(b, want) != NULL, "%s", b);
        free(b);
    }
    int st = submit_tokens(&m, spec, R2, sharding, b64, R, &b);
    cr_assert(st == 200 || st == 201, "POST /jobs with %u tokens: %d %s", R, st, b);
    free(b);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "v%d", i);
        snprintf(log, sizeof log, "%s/worker-v%d.log", fu_dir, i);
        w[i] = fu_worker_spawn(m.ctl, job, id, log);
    }
    /* trainers of 50 ms a batch (80 batches or more left): the kills
     * below fall in the run */
    start_clients(c, th, R2, &m, job, seen, NULL, 50000);
    /* a worker dies (kill -9) and another takes its place; then the master
     * crashes and comes back on its journal */
    usleep(200 * 1000);
    fu_kill9(w[0]);
    snprintf(log, sizeof log, "%s/worker-v2.log", fu_dir);
    w[2] = fu_worker_spawn(m.ctl, job, "v2", log);
    usleep(200 * 1000);
    fu_master_stop(&m, SIGKILL);
    fu_master_start(&m);
    cr_assert(!fu_job_finished(&m, job), "the job ended before the kills");
    fu_clients_join(c, th, (int)R2);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("%u -> %u ranks (%s, apart %u): %llu samples before the checkpoint", R, R2,
                sharding, apart, (unsigned long long)before);
    for (uint32_t r = 0; r < R; r++)
        free(b64[r]);
    fu_kill9(w[1]);
    fu_kill9(w[2]);
    free(seen);
    free(job);
    fu_master_stop(&m, SIGTERM);
    fu_teardown();
    fu_setup();
}

static void resume_case(uint32_t R, uint32_t R2, const char *sharding, uint32_t apart,
                        uint64_t *rng)
{
    resume_case_at(R, R2, sharding, apart, NULL, rng);
}

Test(fleet_resume_ranks, two_ranks_to_three_dynamic, .timeout = 240)
{
    uint64_t rng = tu_seed("fleet_resume_ranks.two_ranks_to_three_dynamic");
    resume_case(2, 3, "dynamic", 4, &rng);
}

Test(fleet_resume_ranks, three_ranks_to_two_static, .timeout = 240)
{
    uint64_t rng = tu_seed("fleet_resume_ranks.three_ranks_to_two_static");
    resume_case(3, 2, "static", 1, &rng);
}

Test(fleet_resume_ranks, one_rank_to_four_and_two_to_one, .timeout = 240)
{
    uint64_t rng = tu_seed("fleet_resume_ranks.one_rank_to_four_and_two_to_one");
    resume_case(1, 4, "dynamic", 0, &rng);
    resume_case(2, 1, "static", 0, &rng);
}

/* Static sharding, two ranks an epoch apart: rank 0 stops after 5 batches
 * (its share of epoch 0 left unread: nobody takes its batches), rank 1
 * reads its whole share of epoch 0 (40 batches: 10 splits of 1,000 rows)
 * and 5 batches of epoch 1, which it begins on its own (state_rank.c);
 * the tokens are of epochs 0 and 1. Then 3 ranks read the rest. */
Test(fleet_resume_ranks, two_ranks_an_epoch_apart_to_three_static, .timeout = 240)
{
    uint64_t rng = tu_seed("fleet_resume_ranks.two_ranks_an_epoch_apart_to_three_static");
    const uint64_t stops[2] = {5, 45};
    resume_case_at(2, 3, "static", 0, stops, &rng);
}

Test(fleet_resume_ranks, four_ranks_to_three_and_one_to_four_static, .timeout = 240)
{
    uint64_t rng = tu_seed("fleet_resume_ranks.four_ranks_to_three_and_one_to_four_static");
    resume_case(4, 3, "static", 1, &rng);
    resume_case(1, 4, "static", 0, &rng);
}
