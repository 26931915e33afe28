/* The worker's read-ahead in batches (sl_worker_opts_t.max_queued,
 * `sluice worker --max-queued`): with a trainer that holds its window of
 * batches and asks for no more, the worker makes exactly window +
 * max_queued batches and then waits (the memory budget, far larger, is
 * not what stops it); once the trainer reads on, every sample arrives once
 * in each of two epochs. A worker stopped while its transform threads
 * wait for room stops within a bounded time. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "worker_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-worker-readahead-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(worker_readahead, .init = setup, .fini = teardown);

enum { ROWS = 8192, STRIPE_ROWS = 1024, BATCH = 256, EPOCHS = 2 };

static sl_pipeline_job_t *gen_job(void)
{
    char dir[300], spec[1024];
    snprintf(dir, sizeof dir, "%s/criteo", tmpdir);
    wu_gen_criteo(dir, ROWS, STRIPE_ROWS, 5);
    sl_error_t err = {0};
    snprintf(spec, sizeof spec,
             "{\"id\":\"readahead\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":%d,"
             "\"epochs\":%d}}",
             dir, BATCH, EPOCHS);
    sl_pipeline_job_t *job = NULL;
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    return job;
}

static sl_worker_t *start(const sl_pipeline_job_t *job, uint32_t threads, uint32_t max_queued,
                          char *addr, size_t cap)
{
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = threads;
    o.max_queued = max_queued;
    o.max_credits = 8;
    return wu_start(job, &o, addr, cap);
}

static sl_trainer_t *connect_trainer(const char *addr, uint32_t prefetch)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    o.prefetch = prefetch;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

/* Poll the worker until it has encoded want batches (bounded), then give
 * it time to make more if it would; @return the batches encoded. */
static uint64_t settle(sl_worker_t *w, uint64_t want)
{
    sl_worker_stats_t st;
    double until = tu_timeout(10);
    for (double t = 0; t < until; t += 0.01) {
        sl_worker_stats(w, &st);
        if (st.batches >= want) break;
        usleep(10 * 1000);
    }
    usleep((useconds_t)(tu_timeout(0.3) * 1e6));
    sl_worker_stats(w, &st);
    return st.batches;
}

Test(worker_readahead, the_worker_stops_max_queued_batches_ahead_then_delivers_all_once)
{
    char addr[64];
    sl_pipeline_job_t *job = gen_job();
    const uint32_t max_queued = 3, prefetch = 2;
    sl_worker_t *w = start(job, 1, max_queued, addr, sizeof addr);
    sl_trainer_t *t = connect_trainer(addr, prefetch);
    /* The trainer holds prefetch batches and asks for none more: the
     * worker makes max_queued more, then waits. 64 batches in all, far
     * fewer than the 256 MiB budget holds. */
    uint64_t made = settle(w, prefetch + max_queued);
    cr_assert_eq(made, prefetch + max_queued, "batches encoded ahead: %llu",
                 (unsigned long long)made);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.ready, max_queued);
    cr_assert_eq(st.server.batches_sent, prefetch);
    cr_assert_lt(st.memory_peak, st.memory_limit / 8, "peak %llu",
                 (unsigned long long)st.memory_peak);
    uint8_t *seen = calloc((size_t)EPOCHS * ROWS, 1);
    cr_assert_not_null(seen);
    wu_read_all(t, ROWS, EPOCHS, 0, seen);
    for (uint64_t i = 0; i < (uint64_t)EPOCHS * ROWS; i++)
        cr_assert_eq(seen[i], 1, "epoch %llu sample %llu seen %u times",
                     (unsigned long long)(i / ROWS), (unsigned long long)(i % ROWS), seen[i]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats(w, &st);
    cr_assert_eq(st.batches, (uint64_t)EPOCHS * ROWS / BATCH);
    cr_assert_eq(st.server.samples_acked, (uint64_t)EPOCHS * ROWS);
    cr_assert_gt(st.backpressure_ns, 0, "the transform thread waited for room");
    free(seen);
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_readahead, a_stop_while_transform_threads_wait_for_room_ends_in_bounded_time,
     .timeout = 120)
{
    char addr[64];
    sl_pipeline_job_t *job = gen_job();
    sl_worker_t *w = start(job, 2, 1, addr, sizeof addr);
    /* nobody reads: one batch queued, both transform threads then wait */
    uint64_t made = settle(w, 1);
    cr_assert_leq(made, 2, "batches encoded with nobody reading: %llu", (unsigned long long)made);
    cr_assert_geq(made, 1);
    /* a stop that hangs fails by the test's timeout; a slow one here */
    uint64_t t0 = sl_clock_ns();
    sl_worker_stop(w);
    double took = (double)(sl_clock_ns() - t0) / 1e9;
    cr_assert_lt(took, tu_timeout(2), "the stop took %.2f s", took);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}
