/* Kafka rows on the worker's fused path (docs/WORKER.md "The fused path"),
 * against the real broker: a Kafka job without dedup groups at
 * --threads 1 makes its full stripes' frames on the reader thread, and
 * each sample reaches the trainer once with its exact CreateTime
 * (BatchInfo.record_time_ms) and its age counted once in the client's
 * freshness histogram; the stripes cut short at a chunk's end go the
 * general way. With dedup groups, two transform threads or a weighted
 * feature no batch is fused, and the times are the same. Every wait is
 * bounded. */
#include "kafka_worker_util.h"

#include <pthread.h>

#include "../kafka_records.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_fused, .init = suite_setup);

#define NUM_IDS 400

/* Replay topic once, projecting features (a JSON array's members), with
 * batch options extra (JSON members after "size") on threads transform
 * threads; every good id exactly once with its time. *st gets the
 * worker's statistics. */
static void replay(const char *topic, const char *features, const char *extra, uint32_t threads,
                   int64_t base, uint32_t good, sl_worker_stats_t *st)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\": \"fused\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"stop\": \"end\", \"chunk\": 70}, "
             "\"features\": [%s]}, \"batch\": {\"size\": 16%s}}",
             ku_broker.bootstrap, topic, features, extra);
    sl_pipeline_job_t *job = job_of(spec);
    sl_error_t err = {0};
    char addr[64];
    sl_worker_t *w = start_on(job, threads, addr, sizeof addr);
    atomic_uint total = 0;
    client_t *c = calloc(1, sizeof *c);
    c->addr = addr;
    c->epochs = 1;
    c->seen = calloc(MAX_IDS, sizeof *c->seen);
    c->total = &total;
    c->time_base = base;
    pthread_t ct;
    pthread_create(&ct, NULL, consume, c);
    pthread_join(ct, NULL);
    cr_assert_eq(c->end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c->end), c->msg);
    for (uint32_t id = 0; id < NUM_IDS; id++)
        cr_assert_eq(atomic_load(&c->seen[id]), id % 101 != 100 ? 1u : 0u,
                     "sample %u arrived %u times", id, atomic_load(&c->seen[id]));
    cr_assert_eq(c->st.samples, good);
    cr_assert_eq(c->st.freshness_count, good);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stop(w);
    sl_worker_stats(w, st);
    cr_assert_eq(st->samples, good);
    free(c->seen);
    free(c);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(kafka_fused, record_times_reach_the_trainer_from_the_fused_path)
{
    char topic[64];
    snprintf(topic, sizeof topic, "fused-times-%d", ku_run());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t base = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - 20000;
    uint32_t good = 0;
    for (uint64_t id = 0; id < NUM_IDS; id++) { /* CreateTimes 20 s to 16 s ago */
        bool bad = id % 101 == 100;
        kr_produce_at(p, topic, (int32_t)(id % 2), id, id % 60, bad ? NULL : "1", NULL, 0,
                      base + 10 * (int64_t)id);
        good += !bad;
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
    cr_assert_eq(good, 397);

    /* one transform thread, no dedup: the full stripes fused; the chunks
     * of 70 offsets end in short stripes, built the general way */
    sl_worker_stats_t st;
    const char *plain = "\"age\", \"hist\"";
    replay(topic, plain, "", 1, base, good, &st);
    cr_assert_gt(st.batches_fused, 0, "no batch fused");
    cr_assert_lt(st.batches_fused, st.batches, "%lu of %lu fused", (unsigned long)st.batches_fused,
                 (unsigned long)st.batches);
    /* with dedup groups, more transform threads, or a weighted feature
     * (rows with weights: sl_pipeline_fused_new declines them): none */
    replay(topic, plain, ", \"dedup_groups\": {\"h\": [\"hist\"]}", 1, base, good, &st);
    cr_assert_eq(st.batches_fused, 0);
    replay(topic, plain, "", 2, base, good, &st);
    cr_assert_eq(st.batches_fused, 0);
    replay(topic, "\"age\", \"hist\", \"geo\"", "", 1, base, good, &st);
    cr_assert_eq(st.batches_fused, 0);
}

KU_TEST_MAIN
