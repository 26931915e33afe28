/* The deterministic order resumed at another world size, end to end
 * (docs/DESIGN.md "A deterministic order", *Resume*): a real master,
 * `sluice worker` processes and trainer clients over 8 splits of 500 rows,
 * batches of 100, two epochs of seeded split order. The reference is an
 * uninterrupted run (2 workers, 2 ranks): each epoch's batches merged by g.
 * A run of R ranks stops (each rank after its own number of batches, 0 or
 * 1 apart, with batches prefetched: committed, not handed out), every rank
 * takes its token, the job is deleted and submitted again with the tokens
 * and R' ranks and another number of workers, and read on: each rank's
 * handed-out batch j is the reference's batch g = r + j R (of what was
 * left), and the last run, merged by g', is the reference less every
 * batch handed out before, in order, then the whole next epoch; every
 * sample exactly once an epoch. 2 -> 3, 3 -> 2 (a resume of that resume),
 * 2 -> 1 with a worker killed (SIGKILL) in the resumed run, 1 -> 4 with
 * the master killed (SIGKILL) and restarted on its journal in the resumed
 * run. */
#include "fleet_util.h"

TestSuite(fleet_order_resume, .init = fu_setup, .fini = fu_teardown);

#define ROWS 4000u
#define EPOCHS 2u
#define BATCH 100u
#define NB (ROWS / BATCH) /* batches an epoch: 500-row splits cut whole */
#define MAXR 4
#define MAXW 3

static const char *spec_of(const char *table, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"id\":\"det\",\"source\":{\"table\":\"%s\"},\"order\":\"deterministic\","
             "\"batch\":{\"size\":%u,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             table, BATCH, EPOCHS);
    return buf;
}

/* Submit spec with ranks, workers and the tokens (base64) as
 * "resume_tokens" (none: a plain submit). @return the HTTP status; *body
 * the answer (caller frees). */
static int submit(const fu_master_t *m, const char *spec_json, uint32_t ranks, uint32_t workers,
                  char *const *b64, uint32_t n, char **body)
{
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    cr_assert_not_null(spec, "bad test spec: %s", je.text);
    json_t *req = json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", spec, "ranks", (json_int_t)ranks,
                            "sharding", "dynamic", "min_workers", (json_int_t)workers,
                            "max_workers", (json_int_t)workers);
    if (n > 0) {
        json_t *toks = json_array();
        for (uint32_t i = 0; i < n; i++)
            json_array_append_new(toks, json_string(b64[i]));
        json_object_set_new(req, "resume_tokens", toks);
    }
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    int st = fu_http(m->admin, "POST", "/jobs", FU_TOKEN, text, body);
    free(text);
    return st;
}

/* What each rank of a run delivered: sample ids in order, batch sizes,
 * batches per epoch. */
typedef struct run_out {
    uint32_t ranks;
    int64_t *order[MAXR];
    uint64_t *sizes[MAXR];
    uint64_t per_epoch[MAXR][EPOCHS];
    uint64_t batches[MAXR];
    uint64_t committed; /* batches the master committed in the run */
} run_out_t;

/* How a run goes. stops NULL: to the end; else rank r stops after
 * stops[r] batches and takes its token (into b64[r], base64). */
typedef struct stage {
    uint32_t ranks, workers;
    const uint64_t *stops;
    bool kill_worker, kill_master;
} stage_t;

/* Kill (SIGKILL) the first of n workers (ids <p>0, <p>1, ...) seen
 * holding a lease (bounded): which one leases first is timing's. @return
 * its index. */
static uint32_t kill_a_holder(const fu_master_t *m, char p, const pid_t *w, uint32_t n)
{
    for (int i = 0; i < 1000; i++) {
        json_t *j = fu_get_json(m->admin, "/workers");
        size_t k;
        json_t *x;
        int64_t victim = -1;
        json_array_foreach(json_object_get(j, "workers"), k, x)
        {
            const char *id = json_string_value(json_object_get(x, "id"));
            if (victim < 0 && id != NULL && id[0] == p && id[1] >= '0' &&
                (uint32_t)(id[1] - '0') < n && id[2] == '\0' &&
                json_integer_value(json_object_get(x, "leases")) > 0)
                victim = id[1] - '0';
        }
        json_decref(j);
        if (victim >= 0) {
            fu_kill9(w[victim]);
            return (uint32_t)victim;
        }
        usleep(10 * 1000);
    }
    cr_assert_fail("no worker held a lease in 10 s");
    return 0;
}

/* One run of the job on m: submitted with in (n_in tokens; 0: a plain
 * submit), read by s->ranks clients from s->workers fresh workers. */
static void run_stage(fu_master_t *m, const char *spec, const stage_t *s, char *const *in,
                      uint32_t n_in, atomic_uint *seen, run_out_t *out, char **b64_out)
{
    char *b = NULL;
    int st = submit(m, spec, s->ranks, s->workers, in, n_in, &b);
    cr_assert(st == 200 || st == 201, "POST /jobs with %u tokens: %d %s", n_in, st, b);
    free(b);
    pid_t w[MAXW];
    char log[MAXW][400];
    /* ids of their own each run: a killed worker's id may not be free yet */
    static unsigned runs;
    char p = (char)('a' + runs++ % 26);
    for (uint32_t i = 0; i < s->workers; i++) {
        char id[16];
        snprintf(id, sizeof id, "%c%u", p, i);
        snprintf(log[i], sizeof log[i], "%s/worker-%s.log", fu_dir, id);
        w[i] = fu_worker_spawn(m->ctl, "det", id, log[i]);
    }
    fu_client_t c[MAXR];
    pthread_t th[MAXR];
    out->ranks = s->ranks;
    /* slow trainers: the kills fall in the run, and a stopping rank's
     * prefetch window is full (committed batches not handed out) */
    bool slow = s->kill_worker || s->kill_master || s->stops;
    for (uint32_t r = 0; r < s->ranks; r++) {
        out->order[r] = calloc(EPOCHS * ROWS, sizeof *out->order[r]);
        out->sizes[r] = calloc(EPOCHS * ROWS, sizeof *out->sizes[r]);
        memset(out->per_epoch[r], 0, sizeof out->per_epoch[r]);
        c[r] = (fu_client_t){.master = m->ctl,
                             .job = "det",
                             .rank = r,
                             .world_size = s->ranks,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen,
                             .order = out->order[r],
                             .batch_sizes = out->sizes[r],
                             .epoch_batches = out->per_epoch[r],
                             .stop_after = s->stops ? s->stops[r] : 0,
                             .refresh_ms = 100};
        atomic_init(&c[r].delay_us, slow ? 20000 : 0);
        atomic_init(&c[r].stop, false);
        atomic_init(&c[r].finished, false);
        pthread_create(&th[r], NULL, fu_client_run, &c[r]);
    }
    int64_t victim = -1;
    if (s->kill_worker) {
        victim = kill_a_holder(m, p, w, s->workers);
        cr_assert_not(fu_job_finished(m, "det"), "the job ended before the kill");
    }
    if (s->kill_master) {
        /* some batches out first (bounded), then the master dies and
         * comes back on its journal; clients and workers reconnect */
        uint64_t before = fu_seen_total(seen, ROWS);
        for (int i = 0; i < 1000 && fu_seen_total(seen, ROWS) < before + 5 * BATCH; i++)
            usleep(10 * 1000);
        fu_master_stop(m, SIGKILL);
        fu_master_start(m);
        cr_assert_not(fu_job_finished(m, "det"), "the job ended before the master's kill");
    }
    for (uint32_t r = 0; r < s->ranks; r++) {
        pthread_join(th[r], NULL);
        if (c[r].end != SL_ERR_CLOSED) { /* what the processes saw, before the directory goes */
            for (uint32_t i = 0; i < s->workers; i++)
                fu_print_tail(log[i], 40);
            fu_print_tail(m->log, 60);
        }
        cr_assert_eq(c[r].end, SL_ERR_CLOSED, "rank %u of %u: %s: %s", r, s->ranks,
                     sl_err_str(c[r].end), c[r].msg);
        out->batches[r] = c[r].batches;
        if (s->stops) {
            cr_assert_eq(c[r].batches, s->stops[r]);
            cr_assert_not_null(c[r].token, "rank %u took no token", r);
            b64_out[r] = fu_base64(c[r].token, c[r].token_len);
            free(c[r].token);
        }
    }
    if (!s->stops) cr_assert(fu_job_finished(m, "det"));
    json_t *j = fu_get_json(m->admin, "/jobs/det");
    out->committed = (uint64_t)json_integer_value(json_object_get(j, "batches"));
    json_decref(j);
    if (s->kill_worker) cr_assert_geq(fu_status_int(m, "lease_expiries"), 1);
    cr_assert_eq(fu_http(m->admin, "DELETE", "/jobs/det", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    for (uint32_t i = 0; i < s->workers; i++)
        if ((int64_t)i != victim) fu_kill9(w[i]);
}

static void run_out_free(run_out_t *o)
{
    for (uint32_t r = 0; r < o->ranks; r++) {
        free(o->order[r]);
        free(o->sizes[r]);
    }
}

/* The batches of epoch e of a run, merged by g (batch g is rank g mod R's
 * (g / R)-th of the epoch), into seq ([NB * BATCH] samples). @return the
 * batches merged. Every batch must be whole (BATCH samples). */
static uint64_t merge_epoch(const run_out_t *o, uint32_t e, int64_t *seq)
{
    uint64_t bstart[MAXR] = {0}, sstart[MAXR] = {0}, nb = 0;
    for (uint32_t r = 0; r < o->ranks; r++) {
        for (uint32_t f = 0; f < e; f++) {
            for (uint64_t j = 0; j < o->per_epoch[r][f]; j++)
                sstart[r] += o->sizes[r][bstart[r] + j];
            bstart[r] += o->per_epoch[r][f];
        }
        nb += o->per_epoch[r][e];
    }
    cr_assert_leq(nb, NB);
    for (uint64_t g = 0; g < nb; g++) {
        uint32_t r = (uint32_t)(g % o->ranks);
        cr_assert_lt(g / o->ranks, o->per_epoch[r][e], "epoch %u: rank %u has no batch g %llu", e,
                     r, (unsigned long long)g);
        uint64_t n = o->sizes[r][bstart[r]++];
        cr_assert_eq(n, BATCH, "epoch %u g %llu: %llu samples", e, (unsigned long long)g,
                     (unsigned long long)n);
        memcpy(seq + g * BATCH, o->order[r] + sstart[r], n * sizeof *seq);
        sstart[r] += n;
    }
    return nb;
}

/* A chain of runs of the job, each resumed from the tokens of the one
 * before; the last reads to the end. left: the reference's batches of
 * epoch 0 not handed out yet, in order. */
static void chain(const char *table, const int64_t *ref, const stage_t *stages, uint32_t n,
                  const char *what)
{
    char spec[1024];
    spec_of(table, spec, sizeof spec);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    uint32_t left[NB], nleft = NB;
    for (uint32_t i = 0; i < NB; i++)
        left[i] = i;
    char *tok[MAXR] = {0}, *next[MAXR] = {0};
    uint32_t ntok = 0;
    int64_t *seq = calloc(NB * BATCH, sizeof *seq);
    uint64_t prefetched = 0;
    for (uint32_t k = 0; k < n; k++) {
        const stage_t *s = &stages[k];
        run_out_t o = {0};
        run_stage(&m, spec, s, tok, ntok, seen, &o, next);
        /* epoch 0 of this run: rank r's j-th batch is g' = r + j R of the
         * reference's batches left, in order (ranks that stopped apart
         * leave holes: not a prefix) */
        bool handed[NB] = {false};
        uint64_t nb0 = 0;
        for (uint32_t r = 0; r < s->ranks; r++) {
            uint64_t at = 0;
            for (uint64_t j = 0; j < o.per_epoch[r][0]; j++, nb0++) {
                uint64_t g = r + j * s->ranks;
                cr_assert_lt(g, nleft, "%s, run %u: rank %u's batch g' %llu, %u were left", what, k,
                             r, (unsigned long long)g, nleft);
                cr_assert_eq(o.sizes[r][j], BATCH);
                cr_assert_arr_eq(o.order[r] + at, ref + (uint64_t)left[g] * BATCH,
                                 BATCH * sizeof *seq,
                                 "%s, run %u (%u ranks): rank %u's batch g' %llu is not the "
                                 "reference's batch %u",
                                 what, k, s->ranks, r, (unsigned long long)g, left[g]);
                at += BATCH;
                handed[g] = true;
            }
        }
        if (s->stops) {
            /* the handed-out batches leave the sequence; the rest, in
             * order, is the next run's */
            uint32_t kept = 0;
            for (uint32_t g = 0; g < nleft; g++)
                if (!handed[g]) left[kept++] = left[g];
            cr_assert_lt(kept, nleft, "%s, run %u handed out nothing", what, k);
            nleft = kept;
            /* committed but not handed out: in no token, read again */
            cr_assert_geq(o.committed, nb0);
            prefetched += o.committed - nb0;
            cr_log_info("%s, run %u (%u ranks): %llu batches committed, %llu handed out, %u of "
                        "epoch 0 left",
                        what, k, s->ranks, (unsigned long long)o.committed, (unsigned long long)nb0,
                        nleft);
        } else {
            cr_assert_eq(nb0, nleft, "%s: the last run handed out %llu batches of epoch 0, %u left",
                         what, (unsigned long long)nb0, nleft);
            /* the next epoch is the reference's whole */
            cr_assert_eq(merge_epoch(&o, 1, seq), NB);
            cr_assert_arr_eq(seq, ref + ROWS, ROWS * sizeof *seq,
                             "%s: epoch 1 differs from the reference", what);
        }
        for (uint32_t r = 0; r < ntok; r++)
            free(tok[r]);
        ntok = s->stops ? s->ranks : 0;
        for (uint32_t r = 0; r < ntok; r++) {
            tok[r] = next[r];
            next[r] = NULL;
        }
        run_out_free(&o);
    }
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    cr_assert_gt(prefetched, 0, "%s: no batch was committed and not handed out at a checkpoint",
                 what);
    free(seq);
    free(seen);
    fu_master_stop(&m, SIGTERM);
}

/* The reference: 2 workers, 2 ranks, uninterrupted. */
static int64_t *reference(const char *table)
{
    int64_t *ref = calloc(EPOCHS * ROWS, sizeof *ref);
    stage_t s = {.ranks = 2, .workers = 2};
    char spec[1024];
    spec_of(table, spec, sizeof spec);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    run_out_t o = {0};
    run_stage(&m, spec, &s, NULL, 0, seen, &o, NULL);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    for (uint32_t e = 0; e < EPOCHS; e++)
        cr_assert_eq(merge_epoch(&o, e, ref + (uint64_t)e * ROWS), NB);
    cr_assert_neq(memcmp(ref, ref + ROWS, ROWS * sizeof *ref), 0, "the epochs differ");
    run_out_free(&o);
    free(seen);
    fu_master_stop(&m, SIGTERM);
    return ref;
}

Test(fleet_order_resume, two_to_three_then_three_to_two, .timeout = 300)
{
    char table[300];
    fu_gen(ROWS, 500, 1, table, sizeof table);
    int64_t *ref = reference(table);
    /* 2 -> 3 (0 apart), workers 2 -> 3; then that run stopped 1 apart
     * resumed with 2 ranks and 1 worker: a resume of a resume */
    const uint64_t s0[] = {7, 7}, s1[] = {3, 4, 3};
    const stage_t st[] = {{.ranks = 2, .workers = 2, .stops = s0},
                          {.ranks = 3, .workers = 3, .stops = s1},
                          {.ranks = 2, .workers = 1}};
    chain(table, ref, st, 3, "2 -> 3 -> 2");
    free(ref);
}

Test(fleet_order_resume, two_to_one_with_a_worker_killed, .timeout = 300)
{
    char table[300];
    fu_gen(ROWS, 500, 1, table, sizeof table);
    int64_t *ref = reference(table);
    const uint64_t s0[] = {6, 7};
    const stage_t st[] = {{.ranks = 2, .workers = 2, .stops = s0},
                          {.ranks = 1, .workers = 2, .kill_worker = true}};
    chain(table, ref, st, 2, "2 -> 1, a worker killed");
    free(ref);
}

Test(fleet_order_resume, one_to_four_with_the_master_killed, .timeout = 300)
{
    char table[300];
    fu_gen(ROWS, 500, 1, table, sizeof table);
    int64_t *ref = reference(table);
    const uint64_t s0[] = {9};
    const stage_t st[] = {{.ranks = 1, .workers = 2, .stops = s0},
                          {.ranks = 4, .workers = 2, .kill_master = true}};
    chain(table, ref, st, 2, "1 -> 4, the master killed");
    free(ref);
}
