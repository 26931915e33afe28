/* What worker_e2e_test.c and worker_transforms_test.c share: generated
 * tables, jobs and workers on them, the table read directly, trainer
 * clients counting sample ids per epoch (with a check of each batch). */
#ifndef SLUICE_TESTS_WORKER_E2E_UTIL_H
#define SLUICE_TESTS_WORKER_E2E_UTIL_H

/* Every helper here: a test file uses only some. */
#define WE_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

WE_FN char tmpdir[256];

WE_FN void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-worker-e2e-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

WE_FN void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(worker_e2e, .init = setup, .fini = teardown);

/* Generate preset's table of rows rows under tmpdir/name. */
WE_FN void gen(const char *name, const char *preset, uint64_t rows, uint64_t seed,
               uint32_t stripe_rows, uint32_t files, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", tmpdir, name);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset(preset, rows, seed, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = files;
    if (strcmp(preset, "sessions") == 0) spec.active_sessions = 64;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = stripe_rows;
    go.writer.no_sync = true;
    go.writer.cluster_sessions = true;
    go.threads = 2;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

WE_FN sl_pipeline_job_t *job_of(const char *json)
{
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    sl_err_t rc = sl_pipeline_job_parse(json, strlen(json), &job, &p, &err);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    return job;
}

/* Read every stripe of table (features feats) split by split, as the
 * expanded rows the reference values of a test come from. */
typedef void (*stripe_fn)(void *ctx, const sl_wh_rows_t *rows);

WE_FN void read_table(const char *table, const char *const *feats, uint32_t nf, stripe_fn fn,
                      void *ctx)
{
    sl_wh_table_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(table, NULL, &t, &err), SL_OK, "%s", err.msg);
    sl_wh_splits_t *sp;
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    sl_wh_read_opts_t ro = {.features = (const char **)feats, .num_features = nf};
    for (uint32_t s = 0; s < sp->count; s++) {
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open_split(t, &sp->items[s], &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *rows;
        sl_err_t rc;
        while ((rc = sl_wh_reader_next(r, &rows, &err)) == SL_OK && rows != NULL)
            fn(ctx, rows);
        cr_assert_eq(rc, SL_OK, "%s", err.msg);
        sl_wh_reader_close(r);
    }
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
}

WE_FN sl_worker_t *start(const sl_pipeline_job_t *job, uint32_t threads, char *addr, size_t cap)
{
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = threads;
    o.memory_limit = 64u << 20;
    sl_worker_t *w = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, &o, &w, &p, &err), SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    snprintf(addr, cap, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    return w;
}

/* ---- trainer clients counting sample ids per epoch ---- */

typedef void (*row_check_fn)(void *ctx, const sl_batch_t *b);

typedef struct consumer {
    const char *addr;
    uint64_t rows; /* sample ids in [0, rows) */
    uint32_t epochs;
    atomic_uint *seen; /* [epochs * rows] */
    row_check_fn check;
    void *check_ctx;
    uint64_t batches, samples;
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
} consumer_t;

WE_FN void *consume(void *arg)
{
    consumer_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = c->addr;
    o.prefetch = 4;
    sl_trainer_t *t;
    sl_error_t err = {0};
    c->end = sl_trainer_connect(&o, &t, &err);
    if (c->end != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        return NULL;
    }
    sl_batch_t *b;
    while ((c->end = sl_trainer_next(t, 20000, &b, &err)) == SL_OK) {
        c->batches++;
        c->samples += b->batch_size;
        cr_assert_not_null(b->sample_ids);
        cr_assert_lt(b->origin.epoch, c->epochs);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && (uint64_t)id < c->rows, "sample id %ld", (long)id);
            atomic_fetch_add(&c->seen[(uint64_t)b->origin.epoch * c->rows + (uint64_t)id], 1);
        }
        if (c->check) c->check(c->check_ctx, b);
        sl_trainer_release(t, b);
    }
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_close(t);
    return NULL;
}

/* Run n clients to the end of the job; @return the counts (caller frees). */
WE_FN atomic_uint *run_clients(const char *addr, uint32_t n, uint64_t rows, uint32_t epochs,
                               row_check_fn check, void *ctx, uint64_t *batches)
{
    atomic_uint *seen = calloc(rows * epochs, sizeof *seen);
    consumer_t cs[8];
    pthread_t th[8];
    for (uint32_t i = 0; i < n; i++) {
        cs[i] = (consumer_t){.addr = addr,
                             .rows = rows,
                             .epochs = epochs,
                             .seen = seen,
                             .check = check,
                             .check_ctx = ctx};
        pthread_create(&th[i], NULL, consume, &cs[i]);
    }
    *batches = 0;
    for (uint32_t i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(cs[i].end, SL_ERR_CLOSED, "client %u ended with %s: %s", i,
                     sl_err_str(cs[i].end), cs[i].msg);
        *batches += cs[i].batches;
    }
    return seen;
}

WE_FN void assert_once_per_epoch(const atomic_uint *seen, uint64_t rows, uint32_t epochs)
{
    for (uint32_t e = 0; e < epochs; e++)
        for (uint64_t i = 0; i < rows; i++)
            cr_assert_eq(seen[e * rows + i], 1, "epoch %u sample %lu arrived %u times", e,
                         (unsigned long)i, seen[e * rows + i]);
}

#endif
