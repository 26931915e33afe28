/* The worker's memory limit holds with large stripes and a slow trainer:
 * 65,536-row stripes of the criteo preset (tens of MiB decoded each), a
 * 64 MiB --memory-limit, and a trainer that sleeps between batches so that
 * encoded batches pile up waiting for acknowledgements. The budget's
 * high-water mark (what `memory_peak` and sluice_worker_memory_peak_bytes
 * report) must never pass the limit, and every sample must still arrive
 * exactly once in each epoch. A limit that cannot hold one stripe fails the
 * worker with a message saying so, instead of passing the limit. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/job.h"
#include "dpp/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

static char *tmpdir;

static void setup(void)
{
    tmpdir = tu_mkdtemp("worker-memory");
    signal(SIGPIPE, SIG_IGN);
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
    free(tmpdir);
}

TestSuite(worker_memory, .init = setup, .fini = teardown, .timeout = 120);

static void gen_criteo(uint64_t rows, uint32_t stripe_rows, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/criteo", tmpdir);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", rows, 17, &spec, &err), SL_OK, "%s", err.msg);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = stripe_rows;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

/* Read every batch, sleeping delay_us after each (a slow trainer); count
 * each sample id per epoch (seen[epoch * rows + id]). */
static void read_slowly(const char *addr, uint64_t rows, uint32_t delay_us, uint32_t prefetch,
                        uint8_t *seen)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    o.prefetch = prefetch;
    sl_trainer_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    sl_batch_t *b;
    sl_err_t rc;
    int timeout = (int)(tu_timeout(30) * 1000);
    while ((rc = sl_trainer_next(t, timeout, &b, &err)) == SL_OK) {
        cr_assert_lt(b->origin.epoch, 2);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && (uint64_t)id < rows, "sample id %lld", (long long)id);
            uint8_t *s = &seen[b->origin.epoch * rows + (uint64_t)id];
            cr_assert_lt(*s, 255);
            (*s)++;
        }
        sl_trainer_release(t, b);
        usleep(delay_us);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s: %s", sl_err_str(rc), err.msg);
    sl_trainer_close(t);
}

Test(worker_memory, limit_holds_with_large_stripes_and_a_slow_trainer)
{
    char table[300], addr[64], spec[600];
    const uint64_t rows = 4 * 65536;
    const uint64_t limit = 64u << 20;
    gen_criteo(rows, 65536, table, sizeof table);
    snprintf(spec, sizeof spec,
             "{\"id\":\"memory\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":4096,"
             "\"epochs\":2}}",
             table);
    sl_dpp_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_dpp_worker_opts_t o = sl_dpp_worker_opts_default();
    o.threads = 2;
    o.memory_limit = limit;
    o.max_credits = 16;
    sl_dpp_worker_t *w = NULL;
    cr_assert_eq(sl_dpp_worker_start(job, &o, &w, NULL, &err), SL_OK, "%s", err.msg);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_dpp_worker_port(w));
    uint8_t *seen = calloc(2 * rows, 1);
    cr_assert_not_null(seen);
    read_slowly(addr, rows, 2000, 16, seen);
    for (uint64_t e = 0; e < 2; e++)
        for (uint64_t i = 0; i < rows; i++)
            cr_assert_eq(seen[e * rows + i], 1, "epoch %llu sample %llu seen %u times",
                         (unsigned long long)e, (unsigned long long)i, seen[e * rows + i]);
    cr_assert_eq(sl_dpp_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_dpp_worker_stats_t st;
    sl_dpp_worker_stats(w, &st);
    fprintf(stderr, "memory limit %llu, peak accounted %llu (%.1f%%), back-pressure %.2f s\n",
            (unsigned long long)limit, (unsigned long long)st.memory_peak,
            100.0 * (double)st.memory_peak / (double)limit, st.backpressure_ns / 1e9);
    cr_assert_leq(st.memory_peak, limit, "peak %llu > limit %llu",
                  (unsigned long long)st.memory_peak, (unsigned long long)limit);
    cr_assert_gt(st.memory_peak, limit / 2, "the limit was reached (peak %llu)",
                 (unsigned long long)st.memory_peak);
    cr_assert_gt(st.backpressure_ns, 0, "producers waited");
    free(seen);
    sl_dpp_worker_destroy(w);
    sl_dpp_job_destroy(job);
}

Test(worker_memory, a_limit_too_small_for_a_stripe_fails_loudly)
{
    char table[300], spec[600];
    const uint64_t rows = 65536;
    const uint64_t limit = 8u << 20; /* a stripe decodes to ~23 MB */
    gen_criteo(rows, 65536, table, sizeof table);
    snprintf(spec, sizeof spec, "{\"id\":\"memory\",\"source\":{\"table\":\"%s\"}}", table);
    sl_dpp_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_dpp_worker_opts_t o = sl_dpp_worker_opts_default();
    o.threads = 2;
    o.memory_limit = limit;
    sl_dpp_worker_t *w = NULL;
    cr_assert_eq(sl_dpp_worker_start(job, &o, &w, NULL, &err), SL_OK, "%s", err.msg);
    sl_err_t rc = sl_dpp_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    /* the worker's memory, not the data: SL_ERR_NOMEM (a split error would go to a master) */
    cr_assert_eq(rc, SL_ERR_NOMEM, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "worker: --memory-limit of 8388608 bytes cannot hold ") != NULL &&
                  strstr(err.msg, "stripe 0 decoded") != NULL &&
                  strstr(err.msg, "raise the limit") != NULL,
              "%s", err.msg);
    sl_dpp_worker_stats_t st;
    sl_dpp_worker_stats(w, &st);
    cr_assert_leq(st.memory_peak, limit);
    sl_dpp_worker_destroy(w);
    sl_dpp_job_destroy(job);
}
