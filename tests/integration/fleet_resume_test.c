/* Resume from a trainer checkpoint, end to end: a client takes a resume
 * token after a random number of batches mid-epoch (of two) and stops (its
 * prefetched, committed but undelivered batches are not in the token); the
 * job is removed and submitted again with the token; a new client then
 * receives exactly the rest: in each epoch, delivered before + after == the
 * epoch, no sample twice. With static sharding (one rank, one worker) the
 * resumed run also gives the same batches in the same order as an
 * uninterrupted run of both epochs. Workers of a removed job are waited for until they have exited
 * before the job comes back under the same id: with a SIGTERMed worker of
 * the old job still around, the order differed in some runs (exactly once
 * held). */
#include "fleet_util.h"

TestSuite(fleet_resume, .init = fu_setup, .fini = fu_teardown);

#define ROWS 20000u
#define EPOCHS 2u

Test(fleet_resume, token_mid_epoch_gives_exactly_the_rest)
{
    uint64_t rng = tu_seed("fleet_resume.token_mid_epoch_gives_exactly_the_rest");
    char table[300], spec[1024];
    fu_gen(ROWS, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"resume\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             table, EPOCHS);
    char *job = fu_submit(&m, spec, 1, "dynamic", 2, 2, NULL);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);

    /* 80 batches in an epoch: stop after 10..60 of them (in epoch 0). */
    atomic_uint *before = calloc(EPOCHS * ROWS, sizeof *before);
    atomic_uint *after = calloc(EPOCHS * ROWS, sizeof *after);
    fu_client_t a = {.master = m.ctl,
                     .job = job,
                     .rows = ROWS,
                     .epochs = EPOCHS,
                     .seen = before,
                     .stop_after = 10 + tu_below(&rng, 51)};
    fu_client_run(&a);
    cr_assert_eq(a.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(a.end), a.msg);
    cr_assert_eq(a.batches, a.stop_after);
    cr_assert_not_null(a.token);
    cr_assert_gt(a.token_len, 4);
    cr_assert_eq(memcmp(a.token, "SLRT", 4), 0, "a resume token starts with its magic");
    cr_assert_eq(fu_seen_total(before, ROWS), a.samples, "all in epoch 0");

    /* The trainer restarts from its checkpoint: the job goes, and comes back
     * with the token. */
    fu_executor_drain(ex, job);
    char *b, path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    int st = fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b);
    cr_assert(st == 200 || st == 204, "DELETE %s: %d %s", path, st, b);
    free(b);
    char *b64 = fu_base64(a.token, a.token_len);
    char *job2 = fu_submit(&m, spec, 1, "dynamic", 2, 2, b64);
    cr_assert_str_eq(job2, job);
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);

    fu_client_t c = {.master = m.ctl, .job = job, .rows = ROWS, .epochs = EPOCHS, .seen = after};
    fu_client_run(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t overlap = 0, missing = 0;
        for (uint32_t i = 0; i < ROWS; i++) {
            unsigned x = atomic_load(&before[e * ROWS + i]), y = atomic_load(&after[e * ROWS + i]);
            cr_assert_leq(x, 1, "epoch %u id %u delivered %u times before", e, i, x);
            cr_assert_leq(y, 1, "epoch %u id %u delivered %u times after", e, i, y);
            if (x && y) overlap++;
            if (!x && !y) missing++;
        }
        cr_assert_eq(overlap, 0, "epoch %u: %llu samples delivered before and after the resume", e,
                     (unsigned long long)overlap);
        cr_assert_eq(missing, 0, "epoch %u: %llu samples never delivered", e,
                     (unsigned long long)missing);
    }
    cr_assert_eq(a.samples + c.samples, EPOCHS * ROWS);
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("token after %llu batches (%llu samples), %zu bytes", (unsigned long long)a.batches,
                (unsigned long long)a.samples, a.token_len);
    free(b64);
    free(a.token);
    free(job2);
    free(job);
    free(before);
    free(after);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
}

/* The batches of a client as (size, ids...) in delivery order, and what
 * may have moved a batch in its run: the master's lease expiries during
 * it, the client's dropped batches (a commit refused) and reconnects. */
typedef struct seq {
    uint64_t batches, samples;
    uint64_t *sizes;
    int64_t *ids;
    long long expiries;
    uint64_t dropped, reconnects;
} seq_t;

/* After run s (expiries_before: the master's count when it began). */
static void seq_disturbances(seq_t *s, const fu_master_t *m, long long expiries_before,
                             const fu_client_t *c)
{
    s->expiries = fu_status_int(m, "lease_expiries") - expiries_before;
    s->dropped = c->stats.dropped;
    s->reconnects = c->stats.reconnects;
}

static fu_client_t seq_client(const fu_master_t *m, const char *job, atomic_uint *seen, seq_t *s,
                              uint64_t stop_after)
{
    s->sizes = calloc(EPOCHS * ROWS, sizeof *s->sizes);
    s->ids = calloc(EPOCHS * ROWS, sizeof *s->ids);
    return (fu_client_t){.master = m->ctl,
                         .job = job,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = seen,
                         .order = s->ids,
                         .batch_sizes = s->sizes,
                         .stop_after = stop_after};
}

/* Static sharding, one rank, one worker: a full run (two epochs) gives the
 * reference batch sequence; a run stopped at a random batch of epoch 0
 * with a token, then resumed with it, gives exactly that sequence again:
 * the same batches in the same order. */
Test(fleet_resume, static_sharding_resumes_with_the_same_batches_in_order)
{
    uint64_t rng = tu_seed("fleet_resume.static_sharding_resumes_with_the_same_batches_in_order");
    char table[300], spec[1024];
    fu_gen(ROWS, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"ordered\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":21}}}",
             table, EPOCHS);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_error_t err = {0};
    char path[64] = "/jobs/ordered", *b;

    /* the reference: both epochs whole */
    char *job = fu_submit(&m, spec, 1, "static", 1, 1, NULL);
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen_ref = calloc(EPOCHS * ROWS, sizeof *seen_ref);
    seq_t ref = {0};
    long long exp0 = fu_status_int(&m, "lease_expiries");
    fu_client_t c = seq_client(&m, job, seen_ref, &ref, 0);
    fu_client_run(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    ref.batches = c.batches;
    ref.samples = c.samples;
    seq_disturbances(&ref, &m, exp0, &c);
    fu_assert_once_per_epoch(seen_ref, ROWS, EPOCHS);
    fu_executor_drain(ex, job);
    cr_assert_eq(fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    free(job);

    /* the same job again, stopped after k batches with a token */
    job = fu_submit(&m, spec, 1, "static", 1, 1, NULL);
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    seq_t first = {0}, rest = {0};
    exp0 = fu_status_int(&m, "lease_expiries");
    c = seq_client(&m, job, seen, &first, 5 + tu_below(&rng, 60));
    fu_client_run(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    cr_assert_not_null(c.token);
    first.batches = c.batches;
    first.samples = c.samples;
    seq_disturbances(&first, &m, exp0, &c);
    uint8_t *token = c.token;
    size_t token_len = c.token_len;
    fu_executor_drain(ex, job);
    cr_assert_eq(fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    free(job);

    /* resumed with the token: the rest */
    char *b64 = fu_base64(token, token_len);
    job = fu_submit(&m, spec, 1, "static", 1, 1, b64);
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    exp0 = fu_status_int(&m, "lease_expiries");
    c = seq_client(&m, job, seen, &rest, 0);
    fu_client_run(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    rest.batches = c.batches;
    rest.samples = c.samples;
    seq_disturbances(&rest, &m, exp0, &c);
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);

    /* first + rest == ref, batch by batch */
    cr_assert_eq(first.batches + rest.batches, ref.batches, "%llu + %llu batches, want %llu",
                 (unsigned long long)first.batches, (unsigned long long)rest.batches,
                 (unsigned long long)ref.batches);
    uint64_t off_ref = 0, off = 0;
    for (uint64_t i = 0; i < ref.batches; i++) {
        const seq_t *s = i < first.batches ? &first : &rest;
        uint64_t j = i < first.batches ? i : i - first.batches;
        if (i == first.batches) off = 0;
        cr_assert_eq(s->sizes[j], ref.sizes[i], "batch %llu: %llu samples, want %llu",
                     (unsigned long long)i, (unsigned long long)s->sizes[j],
                     (unsigned long long)ref.sizes[i]);
        /* a failure says what moved the batch, if anything did: static
         * sharding fixes a split's rank, not the order of batches a lease
         * expiry or a refused commit sends to be read again (docs/DESIGN.md,
         * "A deterministic order": "not the order within or across ranks") */
        cr_assert_eq(
            memcmp(s->ids + off, ref.ids + off_ref, ref.sizes[i] * sizeof(int64_t)), 0,
            "batch %llu (%s run, its batch %llu) differs from the reference: its first "
            "sample %lld, the reference's %lld; lease expiries, dropped batches and "
            "reconnects: reference run %lld, %llu, %llu; first run %lld, %llu, %llu; "
            "resumed run %lld, %llu, %llu (logs: SLUICE_TEST_KEEP=1)",
            (unsigned long long)i, s == &first ? "first" : "resumed", (unsigned long long)j,
            (long long)s->ids[off], (long long)ref.ids[off_ref], ref.expiries,
            (unsigned long long)ref.dropped, (unsigned long long)ref.reconnects, first.expiries,
            (unsigned long long)first.dropped, (unsigned long long)first.reconnects, rest.expiries,
            (unsigned long long)rest.dropped, (unsigned long long)rest.reconnects);
        off += ref.sizes[i];
        off_ref += ref.sizes[i];
    }
    cr_log_info("stopped after %llu of %llu batches", (unsigned long long)first.batches,
                (unsigned long long)ref.batches);
    free(b64);
    free(token);
    free(job);
    free(seen);
    free(seen_ref);
    free(ref.sizes), free(ref.ids), free(first.sizes), free(first.ids), free(rest.sizes),
        free(rest.ids);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
}
