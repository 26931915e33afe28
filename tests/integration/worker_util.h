/* Helpers shared by the worker's integration tests
 * (tests/integration/worker_*_test.c): a generated criteo table, a worker
 * started on a free loopback port, and a trainer that reads every batch to
 * the end counting each (epoch, sample id). Everything is static: each
 * test file includes this once. */
#ifndef SLUICE_TESTS_WORKER_UTIL_H
#define SLUICE_TESTS_WORKER_UTIL_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

/* Start a worker for job with o; its trainer address into addr. */
static inline sl_worker_t *wu_start(const sl_pipeline_job_t *job, const sl_worker_opts_t *o,
                                    char *addr, size_t cap)
{
    sl_worker_t *w = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, o, &w, NULL, &err), SL_OK, "%s", err.msg);
    snprintf(addr, cap, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    return w;
}

/* A criteo table of rows rows in stripes of stripe_rows at dir. */
static inline void wu_gen_criteo(const char *dir, uint64_t rows, uint32_t stripe_rows,
                                 uint64_t seed)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", rows, seed, &spec, &err), SL_OK, "%s", err.msg);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = stripe_rows;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

/* Read every batch of t to the end of the job, sleeping delay_us after
 * each (a slow trainer); count each sample id per epoch in
 * seen[epoch * rows + id] (epochs at most). */
static inline void wu_read_all(sl_trainer_t *t, uint64_t rows, uint32_t epochs, uint32_t delay_us,
                               uint8_t *seen)
{
    sl_batch_t *b;
    sl_err_t rc;
    sl_error_t err = {0};
    int timeout = (int)(tu_timeout(30) * 1000);
    while ((rc = sl_trainer_next(t, timeout, &b, &err)) == SL_OK) {
        cr_assert_lt(b->origin.epoch, epochs);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && (uint64_t)id < rows, "sample id %lld", (long long)id);
            uint8_t *s = &seen[b->origin.epoch * rows + (uint64_t)id];
            cr_assert_lt(*s, 255);
            (*s)++;
        }
        sl_trainer_release(t, b);
        if (delay_us) usleep(delay_us);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s: %s", sl_err_str(rc), err.msg);
}

#endif
