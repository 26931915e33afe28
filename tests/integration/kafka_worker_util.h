/* What the tests of a worker reading a Kafka job on its own share: a job
 * from its JSON and a worker started on it without a master (with
 * kafka_json_test.c); a trainer client that counts each sample id it
 * receives per epoch (kafka_worker_test.c, kafka_dead_letter_test.c). */
#ifndef SLUICE_TESTS_KAFKA_WORKER_UTIL_H
#define SLUICE_TESTS_KAFKA_WORKER_UTIL_H

#include "kafka_util.h"

#include <stdatomic.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"

/* Every helper here: a test file uses only some. */
#define KW_FN static __attribute__((unused))

#define MAX_IDS 4000

KW_FN sl_pipeline_job_t *job_of(const char *json)
{
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    sl_err_t rc = sl_pipeline_job_parse(json, strlen(json), &job, &p, &err);
    for (uint32_t i = 0; i < p.count; i++)
        fprintf(stderr, "problem: %s\n", p.items[i]);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    return job;
}

/* A worker of job on `threads` transform threads; addr gets its address. */
KW_FN sl_worker_t *start_on(const sl_pipeline_job_t *job, uint32_t threads, char *addr, size_t cap)
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

KW_FN sl_worker_t *start(const sl_pipeline_job_t *job, char *addr, size_t cap)
{
    return start_on(job, 2, addr, cap);
}

typedef struct client {
    const char *addr;
    uint32_t epochs;
    atomic_uint *seen;     /* [epochs * MAX_IDS] */
    atomic_uint *total;    /* samples received by every client */
    uint32_t want;         /* stop once *total reaches it (0: read to END) */
    int64_t time_base;     /* non-zero: sample id's CreateTime is time_base + 10 * id */
    sl_trainer_stats_t st; /* the client's, when it ended */
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
} client_t;

KW_FN void *consume(void *arg)
{
    client_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = c->addr;
    o.prefetch = 4;
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        return NULL;
    }
    sl_batch_t *b;
    int wait_ms = (int)(tu_timeout(20) * 1000);
    while ((!c->want || atomic_load(c->total) < c->want) &&
           (c->end = sl_trainer_next(t, wait_ms, &b, &err)) == SL_OK) {
        cr_assert_not_null(b->sample_ids);
        cr_assert_lt(b->origin.epoch, c->epochs);
        if (c->time_base) cr_assert_not_null(b->record_ms);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && id < MAX_IDS, "sample id %ld", (long)id);
            atomic_fetch_add(&c->seen[(uint64_t)b->origin.epoch * MAX_IDS + (uint64_t)id], 1);
            if (c->time_base)
                cr_assert_eq(b->record_ms[i], c->time_base + 10 * id, "sample %ld's time",
                             (long)id);
        }
        atomic_fetch_add(c->total, b->batch_size);
        sl_trainer_release(t, b);
    }
    if (c->want && atomic_load(c->total) >= c->want) c->end = SL_OK;
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_stats(t, &c->st);
    sl_trainer_close(t);
    return NULL;
}

#endif
