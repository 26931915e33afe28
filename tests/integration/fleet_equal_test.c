/* Equal batches per rank, end to end (batch.equal_batches_per_rank;
 * docs/DESIGN.md "Equal batches per rank"): two ranks with static sharding
 * over 9 splits of 1,000 rows read shares of 5 and 4 splits (20 and 16
 * batches of 250 an epoch); each rank gets exactly 16 batches in each of
 * two epochs, the 4 batches above the quota each epoch are never handed
 * out and the master reports them (8 batches, 2,000 samples), no sample
 * twice, the master killed with SIGKILL and restarted on the way. Then a
 * checkpoint of two ranks resumed with three (before any drop, and after
 * epoch 0 dropped some): every rank equal again in each epoch, and
 * delivered before + after + dropped by either run = both epochs. And
 * the same job with dynamic sharding: each rank the same count in each
 * epoch (whichever batches it read), delivered + dropped = both epochs. */
#include "fleet_util.h"

TestSuite(fleet_equal, .init = fu_setup, .fini = fu_teardown);

/* 9 splits of 1,000 rows (two ranks: 5 and 4); the resumed job's 10
 * (three ranks: 4, 3 and 3 in its second epoch) */
#define ROWS 9000u
#define ROWS_B 10000u
#define EPOCHS 2u
#define MAXR 3

static const char *spec_of(const char *table, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"id\":\"eq\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"equal_batches_per_rank\":true,"
             "\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             table, EPOCHS);
    return buf;
}

static void start(fu_client_t *c, pthread_t *th, uint32_t n, const fu_master_t *m, uint64_t rows,
                  atomic_uint *seen, uint64_t (*per_epoch)[EPOCHS], const uint64_t *stop_after)
{
    for (uint32_t i = 0; i < n; i++) {
        memset(per_epoch[i], 0, sizeof per_epoch[i]);
        c[i] = (fu_client_t){.master = m->ctl,
                             .job = "eq",
                             .rank = i,
                             .world_size = n,
                             .rows = rows,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .epoch_batches = per_epoch[i],
                             .stop_after = stop_after != NULL ? stop_after[i] : 0};
        /* a trainer of 30 ms a step: the master's kill falls in the run */
        atomic_init(&c[i].delay_us, 30000);
        atomic_init(&c[i].stop, false);
        atomic_init(&c[i].finished, false);
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* GET /jobs/eq "dropped_batches" and "dropped_samples". */
static void dropped(const fu_master_t *m, int64_t *batches, int64_t *samples)
{
    json_t *j = fu_get_json(m->admin, "/jobs/eq");
    cr_assert(json_is_true(json_object_get(j, "equal_batches_per_rank")));
    *batches = json_integer_value(json_object_get(j, "dropped_batches"));
    *samples = json_integer_value(json_object_get(j, "dropped_samples"));
    json_decref(j);
}

static void spawn_workers(const fu_master_t *m, pid_t *w, const char *prefix)
{
    for (int i = 0; i < 2; i++) {
        char id[16], log[400];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        snprintf(log, sizeof log, "%s/worker-%s.log", fu_dir, id);
        w[i] = fu_worker_spawn(m->ctl, "eq", id, log);
    }
}

Test(fleet_equal, every_rank_the_same_count_per_epoch_through_a_master_kill, .timeout = 240)
{
    char table[300], spec[1024];
    fu_gen(ROWS, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    spec_of(table, spec, sizeof spec);
    free(fu_submit(&m, spec, 2, "static", 2, 2, NULL));
    pid_t w[2];
    spawn_workers(&m, w, "w");
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    uint64_t per_epoch[MAXR][EPOCHS];
    fu_client_t c[MAXR];
    pthread_t th[MAXR];
    start(c, th, 2, &m, ROWS, seen, per_epoch, NULL);
    usleep(300 * 1000);
    fu_master_stop(&m, SIGKILL);
    fu_master_start(&m);
    cr_assert(!fu_job_finished(&m, "eq"), "the job ended before the master's kill");
    fu_clients_join(c, th, 2);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        for (int r = 0; r < 2; r++)
            cr_assert_eq(per_epoch[r][e], 16, "epoch %u rank %d: %llu batches, want 16", e, r,
                         (unsigned long long)per_epoch[r][e]);
        /* 4 batches of 1,000 samples, each of one split, were dropped */
        uint64_t got = 0, twice = 0;
        for (uint64_t id = 0; id < ROWS; id++) {
            unsigned s = atomic_load(&seen[(uint64_t)e * ROWS + id]);
            got += s > 0;
            twice += s > 1;
        }
        cr_assert_eq(twice, 0, "epoch %u: %llu samples twice", e, (unsigned long long)twice);
        cr_assert_eq(got, 8000, "epoch %u: %llu samples delivered", e, (unsigned long long)got);
    }
    cr_assert(fu_job_finished(&m, "eq"));
    int64_t db, ds;
    dropped(&m, &db, &ds);
    cr_assert_eq(db, 8, "dropped %lld batches", (long long)db);
    cr_assert_eq(ds, 2000, "dropped %lld samples", (long long)ds);
    char *mt;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", FU_TOKEN, NULL, &mt), 200);
    cr_assert(strstr(mt, "sluice_master_equal_dropped_batches_total{job=\"eq\"} 8\n") != NULL,
              "%.2000s", strstr(mt, "equal_dropped") ? strstr(mt, "equal_dropped") : mt);
    cr_assert(strstr(mt, "sluice_master_equal_dropped_samples_total{job=\"eq\"} 2000\n") != NULL);
    free(mt);
    fu_kill9(w[0]);
    fu_kill9(w[1]);
    free(seen);
    fu_master_stop(&m, SIGTERM);
}

/* Two ranks read `rows` (splits of 1,000 rows) to a checkpoint at step
 * `stop` of both (DDP: the same step), three ranks resume from their
 * tokens. want1 > 0: each rank's batches of epoch 1 in the resumed run. */
static void resume_case(uint64_t rows, uint64_t stop, uint64_t want1)
{
    char table[300], spec[1024];
    fu_gen(rows, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    spec_of(table, spec, sizeof spec);
    free(fu_submit(&m, spec, 2, "static", 2, 2, NULL));
    pid_t w[2];
    spawn_workers(&m, w, "w");
    atomic_uint *seen = calloc(EPOCHS * rows, sizeof *seen);
    uint64_t per_epoch[MAXR][EPOCHS];
    fu_client_t c[MAXR];
    pthread_t th[MAXR];
    const uint64_t stops[2] = {stop, stop};
    start(c, th, 2, &m, rows, seen, per_epoch, stops);
    char *b64[2];
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        cr_assert_eq(c[r].end, SL_ERR_CLOSED, "rank %d: %s: %s", r, sl_err_str(c[r].end), c[r].msg);
        cr_assert_eq(c[r].batches, stop);
        cr_assert_not_null(c[r].token);
        b64[r] = fu_base64(c[r].token, c[r].token_len);
        free(c[r].token);
    }
    uint64_t before = fu_seen_total(seen, rows) + fu_seen_total(seen + rows, rows);
    cr_assert_eq(before, 2 * stop * 250);
    /* what the first run dropped in the epochs it ended */
    int64_t db0, ds0;
    dropped(&m, &db0, &ds0);
    char *b;
    cr_assert_eq(fu_http(m.admin, "DELETE", "/jobs/eq", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    fu_kill9(w[0]);
    fu_kill9(w[1]);
    json_error_t je;
    json_t *toks = json_array();
    for (int r = 0; r < 2; r++)
        json_array_append_new(toks, json_string(b64[r]));
    json_t *req =
        json_pack("{s:o, s:i, s:s, s:i, s:i, s:o}", "spec", json_loads(spec, 0, &je), "ranks", 3,
                  "sharding", "static", "min_workers", 2, "max_workers", 2, "resume_tokens", toks);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    int st = fu_http(m.admin, "POST", "/jobs", FU_TOKEN, text, &b);
    cr_assert(st == 200 || st == 201, "POST /jobs with 2 tokens, 3 ranks: %d %s", st, b);
    free(b);
    free(text);
    spawn_workers(&m, w, "v");
    start(c, th, 3, &m, rows, seen, per_epoch, NULL);
    fu_clients_join(c, th, 3);
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (int r = 1; r < 3; r++)
            cr_assert_eq(per_epoch[r][e], per_epoch[0][e],
                         "epoch %u: rank %d got %llu batches, rank 0 %llu", e, r,
                         (unsigned long long)per_epoch[r][e], (unsigned long long)per_epoch[0][e]);
    /* the second epoch over whole splits */
    if (want1 > 0)
        cr_assert_eq(per_epoch[0][1], want1, "epoch 1: %llu batches a rank",
                     (unsigned long long)per_epoch[0][1]);
    cr_assert(fu_job_finished(&m, "eq"));
    int64_t db, ds;
    dropped(&m, &db, &ds);
    cr_assert_geq(db + db0, 4, "dropped %lld + %lld batches", (long long)db0, (long long)db);
    uint64_t total = 0;
    for (uint64_t k = 0; k < EPOCHS * rows; k++) {
        unsigned s = atomic_load(&seen[k]);
        cr_assert_leq(s, 1, "epoch %llu sample %llu delivered %u times",
                      (unsigned long long)(k / rows), (unsigned long long)(k % rows), s);
        total += s;
    }
    /* every sample of both epochs: delivered before, after, or dropped by
     * one of the runs (a token counts a dropped batch as handed out: the
     * resumed run does not offer it again) */
    cr_assert_eq(total + (uint64_t)(ds0 + ds), EPOCHS * rows,
                 "delivered %llu (%llu before the checkpoint) + dropped %lld + %lld samples",
                 (unsigned long long)total, (unsigned long long)before, (long long)ds0,
                 (long long)ds);
    cr_log_info("step %llu, resumed 2 -> 3 ranks: %llu + %llu batches per rank, %lld + %lld "
                "dropped",
                (unsigned long long)stop, (unsigned long long)per_epoch[0][0],
                (unsigned long long)per_epoch[0][1], (long long)db0, (long long)db);
    for (int r = 0; r < 2; r++)
        free(b64[r]);
    fu_kill9(w[0]);
    fu_kill9(w[1]);
    free(seen);
    fu_master_stop(&m, SIGTERM);
}

Test(fleet_equal, a_checkpoint_of_two_ranks_resumed_with_three, .timeout = 240)
{
    /* at step 6 of epoch 0 (no drop yet); 10 splits: 4, 3 and 3 in epoch 1 */
    resume_case(ROWS_B, 6, 12);
}

Test(fleet_equal, a_checkpoint_after_a_drop_resumed_with_three, .timeout = 240)
{
    /* at step 20 (epoch 1's 4th batch): epoch 0 ended, 4 batches dropped;
     * the resumed run does not offer them again */
    resume_case(ROWS, 20, 0);
}

Test(fleet_equal, dynamic_sharding_every_rank_the_same_count_through_a_master_kill, .timeout = 240)
{
    char table[300], spec[1024];
    fu_gen(ROWS, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    spec_of(table, spec, sizeof spec);
    free(fu_submit(&m, spec, 2, "dynamic", 2, 2, NULL));
    pid_t w[2];
    spawn_workers(&m, w, "w");
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    uint64_t per_epoch[MAXR][EPOCHS];
    fu_client_t c[MAXR];
    pthread_t th[MAXR];
    start(c, th, 2, &m, ROWS, seen, per_epoch, NULL);
    /* rank 1 is slower: under dynamic sharding it reads fewer batches */
    atomic_store(&c[1].delay_us, 45000);
    usleep(300 * 1000);
    fu_master_stop(&m, SIGKILL);
    fu_master_start(&m);
    cr_assert(!fu_job_finished(&m, "eq"), "the job ended before the master's kill");
    fu_clients_join(c, th, 2);
    cr_assert(fu_job_finished(&m, "eq"));
    int64_t db, ds;
    dropped(&m, &db, &ds);
    uint64_t total = 0;
    for (uint32_t e = 0; e < EPOCHS; e++) {
        cr_assert_eq(per_epoch[1][e], per_epoch[0][e], "epoch %u: rank 0 %llu batches, rank 1 %llu",
                     e, (unsigned long long)per_epoch[0][e], (unsigned long long)per_epoch[1][e]);
        for (uint64_t id = 0; id < ROWS; id++) {
            unsigned n = atomic_load(&seen[(uint64_t)e * ROWS + id]);
            cr_assert_leq(n, 1, "epoch %u sample %llu delivered %u times", e,
                          (unsigned long long)id, n);
            total += n;
        }
    }
    /* 36 batches of 250 an epoch: what the ranks did not hand out equally
     * was dropped, and only that */
    cr_assert_eq(total + (uint64_t)ds, EPOCHS * ROWS, "delivered %llu + dropped %lld samples",
                 (unsigned long long)total, (long long)ds);
    cr_assert_eq((uint64_t)db * 250, (uint64_t)ds);
    cr_assert_eq(2 * (per_epoch[0][0] + per_epoch[0][1]) + (uint64_t)db, 2 * 36u);
    cr_log_info("dynamic: %llu + %llu batches per rank, %lld dropped",
                (unsigned long long)per_epoch[0][0], (unsigned long long)per_epoch[0][1],
                (long long)db);
    fu_kill9(w[0]);
    fu_kill9(w[1]);
    free(seen);
    fu_master_stop(&m, SIGTERM);
}

/* Issue 27's spread with the option: 32 ranks, dynamic sharding, 2
 * workers, one epoch of 384 batches: every rank the same count, what was
 * not handed out equally dropped and reported, every other sample once. */
Test(fleet_equal, thirty_two_ranks_dynamic_the_same_count, .timeout = 240)
{
    enum { RANKS = 32 };
    const uint64_t rows = 96000;
    char table[300], spec[1024];
    fu_gen(rows, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 3000};
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"eq\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"equal_batches_per_rank\":true}}",
             table);
    free(fu_submit(&m, spec, RANKS, "dynamic", 2, 2, NULL));
    pid_t w[2];
    spawn_workers(&m, w, "w");
    atomic_uint *seen = calloc(rows, sizeof *seen);
    static fu_client_t c[RANKS];
    pthread_t th[RANKS];
    fu_client_t proto = {
        .master = m.ctl, .job = "eq", .world_size = RANKS, .rows = rows, .epochs = 1, .seen = seen};
    fu_clients_start(c, th, RANKS, &proto);
    fu_clients_join(c, th, RANKS);
    for (int i = 1; i < RANKS; i++)
        cr_assert_eq(c[i].batches, c[0].batches, "rank %d got %llu batches, rank 0 %llu", i,
                     (unsigned long long)c[i].batches, (unsigned long long)c[0].batches);
    int64_t db, ds;
    dropped(&m, &db, &ds);
    uint64_t total = 0;
    for (uint64_t id = 0; id < rows; id++) {
        unsigned n = atomic_load(&seen[id]);
        cr_assert_leq(n, 1, "sample %llu delivered %u times", (unsigned long long)id, n);
        total += n;
    }
    cr_assert_eq(total + (uint64_t)ds, rows, "delivered %llu + dropped %lld samples",
                 (unsigned long long)total, (long long)ds);
    cr_assert_eq(RANKS * c[0].batches + (uint64_t)db, rows / 250);
    cr_log_info("32 ranks: %llu batches each, %lld of 384 dropped",
                (unsigned long long)c[0].batches, (long long)db);
    fu_kill9(w[0]);
    fu_kill9(w[1]);
    free(seen);
    fu_master_stop(&m, SIGTERM);
}
