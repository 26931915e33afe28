/* A DPP worker reading a Kafka job (source.kafka) from the real broker,
 * on its own (no master), to trainer clients: a bounded replay (stop
 * "end") of three partitions, with bad records among them, delivers every
 * good sample id exactly once in each of two epochs, through dedup, to two
 * clients; a stream (no stop) delivers what is produced while it runs,
 * each id once. Every wait is bounded. */
#include "kafka_util.h"

#include <pthread.h>
#include <stdatomic.h>

#include <jansson.h>

#include "../kafka_records.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/admin/admin.h"
#include "dpp/worker/runtime/worker.h"
#include "common/log.h"
#include "sluice/trainer.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_worker, .init = suite_setup);

#define MAX_IDS 4000

static sl_pipeline_job_t *job_of(const char *json)
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

static sl_worker_t *start(const sl_pipeline_job_t *job, char *addr, size_t cap)
{
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 2;
    o.memory_limit = 64u << 20;
    sl_worker_t *w = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, &o, &w, &p, &err), SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    snprintf(addr, cap, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    return w;
}

/* Every good record's age was counted once, each in one bucket, none
 * older than the test (a minute). */
static void check_ages(const sl_worker_stats_t *st, uint64_t good)
{
    cr_assert_eq(st->age_count, good);
    uint64_t sum = 0;
    for (int b = 0; b < 14; b++)
        sum += st->age_buckets[b];
    cr_assert_eq(sum, good);
    cr_assert_eq(st->age_buckets[13], 0, "%lu records older than 60 s",
                 (unsigned long)st->age_buckets[13]);
    cr_assert_leq(st->age_sum_ms, good * 60000);
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

static void *consume(void *arg)
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

/* ids [from, from + n) to topic, partition = session % parts, session = id % 60;
 * ids with id % 101 == 100 lack the format header (bad). @return the good. */
static uint32_t produce(rd_kafka_t *p, const char *topic, int parts, uint32_t from, uint32_t n)
{
    uint32_t good = 0;
    for (uint32_t id = from; id < from + n; id++) {
        uint64_t session = id % 60; /* 60 sessions: partition = id % parts for 2 and 3 */
        if (id % 101 == 100) {
            kr_produce_raw(p, topic, (int32_t)(session % (uint64_t)parts), id, session, NULL, NULL,
                           0);
        } else {
            kr_produce(p, topic, (int32_t)(session % (uint64_t)parts), id, session);
            good++;
        }
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    return good;
}

Test(kafka_worker, bounded_replay_two_epochs_two_clients)
{
    char topic[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-replay-%d", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 3, tu_timeout(30));
    const uint32_t n = 3000;
    uint32_t good = produce(p, topic, 3, 0, n);
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"replay\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"stop\": \"end\", \"chunk\": 250, "
             "\"linger_ms\": 20}}, \"batch\": {\"size\": 128, \"epochs\": 2, "
             "\"dedup_groups\": {\"h\": [\"hist\"]}}}",
             ku_broker.bootstrap, topic);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(2 * MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    client_t cs[2];
    pthread_t th[2];
    double t0 = ku_now();
    for (int i = 0; i < 2; i++) {
        cs[i] = (client_t){.addr = addr, .epochs = 2, .seen = seen, .total = &total};
        pthread_create(&th[i], NULL, consume, &cs[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(cs[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(cs[i].end), cs[i].msg);
    }
    cr_assert_lt(ku_now() - t0, tu_timeout(60));
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t id = 0; id < MAX_IDS; id++)
            cr_assert_eq(seen[e * MAX_IDS + id], id < n && id % 101 != 100 ? 1u : 0u,
                         "epoch %u sample %u arrived %u times", e, id, seen[e * MAX_IDS + id]);
    cr_assert_eq(atomic_load(&total), 2 * good);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert(st.finished);
    cr_assert_eq(st.rows_read, 2 * good);
    cr_assert_eq(st.records_read, 2 * n);
    cr_assert_eq(st.records_bad, 2 * (n - good));
    check_ages(&st, 2 * good);
    cr_assert_eq(st.samples, 2 * good);
    /* 1000 offsets per partition in chunks of 250: 4 chunks x 3 partitions x 2 epochs */
    cr_assert_eq(st.splits, 24);
    cr_assert_leq(st.memory_peak, st.memory_limit);
    /* all acknowledged: what stays held is librdkafka's prefetch, an eighth of the limit */
    cr_assert_eq(st.memory_used, 8u << 20);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

typedef struct producer_later {
    const char *topic;
    uint32_t from, n, good;
    int delay_ms;
} producer_later_t;

static void *produce_later(void *arg)
{
    producer_later_t *l = arg;
    usleep((useconds_t)l->delay_ms * 1000);
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    l->good = produce(p, l->topic, 2, l->from, l->n);
    rd_kafka_destroy(p);
    return NULL;
}

/* No stop: the worker reads what is there and then what is produced while
 * it runs (chunks above the partitions' end wait for their records). */
Test(kafka_worker, stream_delivers_records_produced_while_it_runs)
{
    char topic[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-stream-%d", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    uint32_t good = produce(p, topic, 2, 0, 600);
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"stream\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"chunk\": 100, \"linger_ms\": 10}},"
             " \"batch\": {\"size\": 64}}",
             ku_broker.bootstrap, topic);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    /* 600 more, half a second in: 1200 offsets, 600 per partition, 6 chunks each */
    producer_later_t l = {.topic = topic, .from = 600, .n = 600, .delay_ms = 500};
    pthread_t pt;
    pthread_create(&pt, NULL, produce_later, &l);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    /* ids 0..1199 less the bad ones: 1200 - 11 */
    client_t c = {.addr = addr, .epochs = 1, .seen = seen, .total = &total, .want = 1200 - 11};
    pthread_t ct;
    double t0 = ku_now();
    pthread_create(&ct, NULL, consume, &c);
    pthread_join(ct, NULL);
    pthread_join(pt, NULL);
    cr_assert_eq(good + l.good, 1200 - 11);
    cr_assert_eq(c.end, SL_OK, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    cr_assert_lt(ku_now() - t0, tu_timeout(60));
    for (uint32_t id = 0; id < MAX_IDS; id++)
        cr_assert_eq(seen[id], id < 1200 && id % 101 != 100 ? 1u : 0u, "sample %u arrived %u times",
                     id, seen[id]);
    /* a stream never finishes: stopping cancels the read waiting for chunk 6 */
    double t1 = ku_now();
    sl_worker_stop(w);
    cr_assert_lt(ku_now() - t1, tu_timeout(5), "stop took %.1f s", ku_now() - t1);
    sl_error_t err = {0};
    cr_assert_not(sl_worker_failed(w, &err), "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.rows_read, 1200 - 11);
    cr_assert_eq(st.records_read, 1200);
    cr_assert_eq(st.records_bad, 11);
    check_ages(&st, 1200 - 11);
    char *text = sl_worker_admin_metrics_text(w, NULL);
    cr_assert_not_null(text);
    /* every worker sample names its job (ops/prometheus/scrape.yml) */
    const char *want[] = {
        "sluice_worker_kafka_records_total{job=\"stream\"} 1200\n",
        "sluice_worker_kafka_bad_records_total{job=\"stream\"} 11\n",
        "# TYPE sluice_worker_kafka_record_age_seconds histogram\n",
        "sluice_worker_kafka_record_age_seconds_bucket{job=\"stream\",le=\"+Inf\"} 1189\n",
        "sluice_worker_kafka_record_age_seconds_count{job=\"stream\"} 1189\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(text, want[i]) != NULL, "no '%s' in\n%s", want[i], text);
    free(text);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* librdkafka stops fetching while its queue holds queued.min.messages
 * and fetches again at its broker thread's next timer; a read that drains
 * such a queue wakes it (kafka/chunk.c, wake_fetcher). 1500 records in
 * producer batches of 10, fetched a batch at a time into a queue of at most
 * 20 (the job's librdkafka properties): every record arrives once, the
 * worker's stats count the wakes, and /metrics and /status show that count. */
Test(kafka_worker, a_worker_that_drains_full_queues_counts_the_fetcher_wakes)
{
    char topic[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-wakes-%d", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 1, tu_timeout(30));
    for (uint64_t id = 0; id < 1500; id++) {
        kr_produce(p, topic, 0, id, id % 60);
        if (id % 10 == 9) kr_flush(p, (int)(tu_timeout(10) * 1000));
    }
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"wakes\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"stop\": \"end\", \"chunk\": 1500, "
             "\"linger_ms\": 20, \"properties\": {\"queued.min.messages\": \"20\", "
             "\"fetch.wait.max.ms\": \"20\", \"max.partition.fetch.bytes\": \"1\"}}}, "
             "\"batch\": {\"size\": 64}}",
             ku_broker.bootstrap, topic);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    client_t c = {.addr = addr, .epochs = 1, .seen = seen, .total = &total};
    pthread_t ct;
    pthread_create(&ct, NULL, consume, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    for (uint32_t id = 0; id < MAX_IDS; id++)
        cr_assert_eq(seen[id], id < 1500 ? 1u : 0u, "sample %u arrived %u times", id, seen[id]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.records_read, 1500);
    cr_log_info("1500 records, %llu fetcher wakes", (unsigned long long)st.kafka_wakes);
    cr_assert_gt(st.kafka_wakes, 0, "the read never woke the fetcher");
    char *text = sl_worker_admin_metrics_text(w, NULL);
    cr_assert_not_null(text);
    char want[128];
    snprintf(want, sizeof want, "sluice_worker_kafka_fetcher_wakes_total{job=\"wakes\"} %llu\n",
             (unsigned long long)st.kafka_wakes);
    cr_assert(strstr(text, want) != NULL, "no '%s' in\n%s", want, text);
    free(text);
    char *status = sl_worker_admin_status_json(w, NULL);
    cr_assert_not_null(status);
    json_t *j = json_loads(status, 0, NULL);
    cr_assert_not_null(j, "%s", status);
    json_t *k = json_object_get(j, "kafka");
    cr_assert(json_is_object(k), "no kafka object in %s", status);
    cr_assert_eq(json_integer_value(json_object_get(k, "records")), 1500);
    cr_assert_eq(json_integer_value(json_object_get(k, "wakes")), (json_int_t)st.kafka_wakes, "%s",
                 status);
    json_decref(j);
    free(status);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* start and stop by time: records of ids 0..299 with CreateTime base +
 * 10 ms * id over two partitions; a job from base + 1000 to base + 2000
 * delivers exactly ids 100..199 (the offsets are looked up by time per
 * partition). */
Test(kafka_worker, start_and_stop_by_time)
{
    char topic[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-time-%d", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    /* ten minutes ago: inside the broker's retention, which goes by CreateTime */
    const int64_t base = (int64_t)time(NULL) * 1000 - 600000;
    for (uint64_t id = 0; id < 300; id++)
        kr_produce_at(p, topic, (int32_t)(id % 2), id, id % 60, "1", NULL, 0,
                      base + 10 * (int64_t)id);
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"window\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"start\": {\"timestamp_ms\": %lld}, "
             "\"stop\": {\"timestamp_ms\": %lld}, \"chunk\": 30}}, \"batch\": {\"size\": 16}}",
             ku_broker.bootstrap, topic, (long long)(base + 1000), (long long)(base + 2000));
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    client_t c = {.addr = addr, .epochs = 1, .seen = seen, .total = &total};
    pthread_t ct;
    pthread_create(&ct, NULL, consume, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    for (uint32_t id = 0; id < MAX_IDS; id++)
        cr_assert_eq(seen[id], id >= 100 && id < 200 ? 1u : 0u, "sample %u arrived %u times", id,
                     seen[id]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.records_read, 100);
    cr_assert_eq(st.splits, 4); /* 50 offsets per partition in chunks of 30 */
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* librdkafka's prefetch (an eighth of the memory limit, at least 4 MiB)
 * is part of the limit: a limit too small for it is refused at start. */
Test(kafka_worker, memory_limit_holds_the_prefetch)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\": \"small\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"t\"], \"schema\": " KR_SCHEMA_JSON "}}}",
             ku_broker.bootstrap);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    o.memory_limit = 3u << 20;
    sl_worker_t *w = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, &o, &w, NULL, &err), SL_ERR_INVALID);
    cr_assert_null(w);
    cr_assert_str_eq(err.msg, "worker: memory limit 3145728 bytes leaves no room for the Kafka "
                              "consumer's prefetch of 4194304 bytes");
    sl_pipeline_job_destroy(job);
}

/* Each record's CreateTime reaches the trainer with its sample, through
 * the filter (bad records), a shuffle window, dedup and two epochs: the
 * batch handed out has every sample's exact time (sl_batch_t.record_ms),
 * and the client's freshness histogram counts each sample handed out once,
 * with the age it had then: between its CreateTime's distance to the
 * start of the test and to the client's end (records made 40 to 44 s
 * before the test: in the (30 s, 60 s] bucket, unless the run took over
 * 16 s). */
Test(kafka_worker, record_times_reach_the_trainer)
{
    char topic[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-times-%d", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, base = now - 40000 - 4000;
    uint32_t good = 0;
    for (uint64_t id = 0; id < 400; id++) { /* CreateTimes 44 s to 40 s ago */
        bool bad = id % 101 == 100;
        kr_produce_at(p, topic, (int32_t)(id % 2), id, id % 60, bad ? NULL : "1", NULL, 0,
                      base + 10 * (int64_t)id);
        good += !bad;
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"times\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"stop\": \"end\", \"chunk\": 70}}, "
             "\"batch\": {\"size\": 16, \"epochs\": 2, \"shuffle\": {\"window\": 48, \"seed\": 3}, "
             "\"dedup_groups\": {\"h\": [\"hist\"]}}}",
             ku_broker.bootstrap, topic);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(2 * MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    client_t c = {.addr = addr, .epochs = 2, .seen = seen, .total = &total, .time_base = base};
    pthread_t ct;
    double t0 = ku_now();
    pthread_create(&ct, NULL, consume, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    cr_assert_lt(ku_now() - t0, tu_timeout(60));
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t end = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t id = 0; id < MAX_IDS; id++)
            cr_assert_eq(seen[e * MAX_IDS + id], id < 400 && id % 101 != 100 ? 1u : 0u,
                         "epoch %u sample %u arrived %u times", e, id, seen[e * MAX_IDS + id]);
    cr_assert_eq(good, 397);
    cr_assert_eq(c.st.samples, 2 * good);
    cr_assert_eq(c.st.freshness_count, 2 * good);
    /* each sample's age lies in [now - CreateTime, end - CreateTime] */
    uint64_t lo = 0, surely12 = 0;
    for (uint64_t id = 0; id < 400; id++) {
        if (id % 101 == 100) continue;
        int64_t t = base + 10 * (int64_t)id;
        lo += 2 * (uint64_t)(now - t);
        surely12 += end - t <= 60000 ? 2 : 0;
    }
    uint64_t in12_13 = c.st.freshness_buckets[12] + c.st.freshness_buckets[13];
    cr_assert_eq(in12_13, 2 * good, "%lu samples younger than 30 s", 2 * good - in12_13);
    cr_assert_geq(c.st.freshness_buckets[12], surely12);
    cr_assert_geq(c.st.freshness_sum_ms, lo);
    cr_assert_leq(c.st.freshness_sum_ms, lo + 2 * good * (uint64_t)(end - now));
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* ---- the dead-letter topic (source.kafka.dead_letter_topic) ---- */

/* Bad record id (ids 0..199, partition id % 2, offset id / 2 in a fresh
 * topic) of kind id % 25: 3 no format header, 8 version "2", 13 a value
 * that is no Sample, 18 a feature the schema lacks; each with a header
 * x-trace: "t<id>" first. @return whether id is bad. */
static bool dead_kind(uint64_t id, const char **format, char *why, size_t cap)
{
    uint64_t off = id / 2;
    *format = "1";
    switch (id % 25) {
    case 3:
        *format = NULL;
        snprintf(why, cap, "offset %lu: no sluice-format header", (unsigned long)off);
        return true;
    case 8:
        *format = "2";
        snprintf(why, cap, "offset %lu: sluice-format '2', this reader knows version 1",
                 (unsigned long)off);
        return true;
    case 13:
        snprintf(why, cap, "offset %lu: the value (3 bytes) is not a sluice.Sample",
                 (unsigned long)off);
        return true;
    case 18:
        snprintf(why, cap, "offset %lu: feature 'nope' is not in the schema", (unsigned long)off);
        return true;
    default:
        return false;
    }
}

/* The value of bad record id (kinds 13 and 18; the others: a good value). */
static size_t dead_value(uint64_t id, uint8_t *buf, size_t cap)
{
    if (id % 25 == 13) {
        memcpy(buf, "\xff\xff\xff", 3);
        return 3;
    }
    if (id % 25 != 18) return kr_encode(id, id % 60, buf, cap);
    Sluice__Sample s = SLUICE__SAMPLE__INIT;
    s.sample_id = id;
    s.session_id = id % 60;
    int64_t one = 1;
    Sluice__IdList nope = SLUICE__ID_LIST__INIT;
    nope.name = "nope";
    nope.n_ids = 1;
    nope.ids = &one;
    Sluice__IdList *sparse[] = {&nope};
    s.n_sparse = 1;
    s.sparse = sparse;
    cr_assert_leq(sluice__sample__get_packed_size(&s), cap);
    return sluice__sample__pack(&s, buf);
}

/* ids [from, to) to topic: good ones as kr_produce, bad ones with their
 * trace header. @return the bad ones. */
static uint32_t produce_with_bad(rd_kafka_t *p, const char *topic, uint64_t from, uint64_t to)
{
    uint32_t bad = 0;
    for (uint64_t id = from; id < to; id++) {
        const char *format;
        char why[128];
        if (!dead_kind(id, &format, why, sizeof why)) {
            kr_produce(p, topic, (int32_t)(id % 2), id, id % 60);
            continue;
        }
        bad++;
        uint8_t buf[512], key[8];
        size_t len = dead_value(id, buf, sizeof buf);
        for (int i = 0; i < 8; i++)
            key[i] = (uint8_t)((id % 60) >> (56 - 8 * i));
        char trace[32];
        snprintf(trace, sizeof trace, "t%lu", (unsigned long)id);
        rd_kafka_headers_t *h = rd_kafka_headers_new(2);
        rd_kafka_header_add(h, "x-trace", -1, trace, -1);
        if (format) rd_kafka_header_add(h, "sluice-format", -1, format, -1);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION((int32_t)(id % 2)),
            RD_KAFKA_V_KEY(key, sizeof key), RD_KAFKA_V_VALUE(buf, len), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        cr_assert_eq(e, RD_KAFKA_RESP_ERR_NO_ERROR, "%s", rd_kafka_err2str(e));
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    return bad;
}

static void expect_header(rd_kafka_headers_t *h, size_t idx, const char *name, const char *value,
                          uint64_t id)
{
    const char *n;
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_all(h, idx, &n, &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR,
                 "bad record %lu: no header %zu", (unsigned long)id, idx);
    cr_assert_str_eq(n, name, "bad record %lu header %zu", (unsigned long)id, idx);
    cr_assert_eq(len, strlen(value), "bad record %lu header %s", (unsigned long)id, name);
    cr_assert(memcmp(v, value, len) == 0, "bad record %lu header %s: '%.*s', want '%s'",
              (unsigned long)id, name, (int)len, (const char *)v, value);
}

/* Every bad record is in the dead-letter topic, as it came (key, value,
 * headers) plus why and where from, once per epoch that read it; the good
 * ones reach the trainer each once per epoch. */
Test(kafka_worker, bad_records_go_to_the_dead_letter_topic)
{
    char topic[64], dead[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-dlq-%d", (int)getpid());
    snprintf(dead, sizeof dead, "worker-dlq-%d.dead", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    ku_create_topic(p, dead, 1, tu_timeout(30));
    uint32_t bad = produce_with_bad(p, topic, 0, 200);
    rd_kafka_destroy(p);
    cr_assert_eq(bad, 32);
    snprintf(spec, sizeof spec,
             "{\"id\": \"dlq\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"stop\": \"end\", \"chunk\": 40, "
             "\"dead_letter_topic\": \"%s\"}}, \"batch\": {\"size\": 16, \"epochs\": 2}}",
             ku_broker.bootstrap, topic, dead);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(2 * MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    client_t c = {.addr = addr, .epochs = 2, .seen = seen, .total = &total};
    pthread_t ct;
    pthread_create(&ct, NULL, consume, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    const char *fmt;
    char why[128];
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t id = 0; id < MAX_IDS; id++)
            cr_assert_eq(seen[e * MAX_IDS + id],
                         id < 200 && !dead_kind(id, &fmt, why, sizeof why) ? 1u : 0u,
                         "epoch %u sample %u arrived %u times", e, id, seen[e * MAX_IDS + id]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.records_bad, 2 * bad);
    cr_assert_eq(st.records_dead_letter, 2 * bad); /* flushed when the job ended */
    cr_assert_eq(st.records_dead_letter_failed, 0);
    char *text = sl_worker_admin_metrics_text(w, NULL);
    char want[128];
    snprintf(want, sizeof want, "sluice_worker_kafka_dead_letter_records_total{job=\"dlq\"} %u\n",
             2 * bad);
    cr_assert(strstr(text, want) != NULL, "no '%s' in\n%s", want, text);
    cr_assert(strstr(text, "sluice_worker_kafka_dead_letter_failures_total{job=\"dlq\"} 0\n"));
    free(text);
    sl_worker_destroy(w);
    /* read the dead letters back */
    rd_kafka_t *r = ku_reader(dead, 1);
    uint32_t got[200] = {0}, n = 0;
    double deadline = ku_now() + tu_timeout(30);
    for (bool end = false; !end;) {
        cr_assert_lt(ku_now(), deadline, "%u dead letters, no end in time", n);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r, 100);
        if (!m) continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            end = n >= 2 * bad; /* all there: no more comes */
            rd_kafka_message_destroy(m);
            continue;
        }
        cr_assert_eq(m->err, RD_KAFKA_RESP_ERR_NO_ERROR, "%s", rd_kafka_message_errstr(m));
        n++;
        rd_kafka_headers_t *h = NULL;
        cr_assert_eq(rd_kafka_message_headers(m, &h), RD_KAFKA_RESP_ERR_NO_ERROR);
        const void *v;
        size_t len;
        cr_assert_eq(rd_kafka_header_get_last(h, "sluice-source-offset", &v, &len),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
        char off[24] = {0}, part[16] = {0};
        memcpy(off, v, len < 23 ? len : 23);
        cr_assert_eq(rd_kafka_header_get_last(h, "sluice-source-partition", &v, &len),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
        memcpy(part, v, len < 15 ? len : 15);
        uint64_t id = 2 * strtoull(off, NULL, 10) + strtoull(part, NULL, 10);
        cr_assert_lt(id, 200);
        cr_assert(dead_kind(id, &fmt, why, sizeof why), "record %lu is not bad", (unsigned long)id);
        got[id]++;
        uint8_t buf[512], key[8];
        size_t vlen = dead_value(id, buf, sizeof buf);
        for (int i = 0; i < 8; i++)
            key[i] = (uint8_t)((id % 60) >> (56 - 8 * i));
        cr_assert_eq(m->key_len, 8);
        cr_assert(memcmp(m->key, key, 8) == 0, "bad record %lu: key", (unsigned long)id);
        cr_assert_eq(m->len, vlen);
        cr_assert(memcmp(m->payload, buf, vlen) == 0, "bad record %lu: value", (unsigned long)id);
        char trace[32];
        snprintf(trace, sizeof trace, "t%lu", (unsigned long)id);
        size_t at = 0;
        expect_header(h, at++, "x-trace", trace, id);
        if (fmt) expect_header(h, at++, "sluice-format", fmt, id);
        expect_header(h, at++, "sluice-error", why, id);
        expect_header(h, at++, "sluice-source-topic", topic, id);
        snprintf(why, sizeof why, "%lu", (unsigned long)(id % 2));
        expect_header(h, at++, "sluice-source-partition", why, id);
        snprintf(why, sizeof why, "%lu", (unsigned long)(id / 2));
        expect_header(h, at++, "sluice-source-offset", why, id);
        const char *nm;
        cr_assert_neq(rd_kafka_header_get_all(h, at, &nm, &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR,
                      "bad record %lu: a header too many", (unsigned long)id);
        rd_kafka_message_destroy(m);
    }
    cr_assert_eq(n, 2 * bad);
    for (uint64_t id = 0; id < 200; id++)
        cr_assert_eq(got[id], dead_kind(id, &fmt, why, sizeof why) ? 2u : 0u,
                     "bad record %lu: %u dead letters", (unsigned long)id, got[id]);
    rd_kafka_consumer_close(r);
    rd_kafka_destroy(r);
    free(seen);
    sl_pipeline_job_destroy(job);
}

/* A dead-letter topic that does not exist fails the job when it starts,
 * naming it (no record is read without somewhere to put the bad ones). */
Test(kafka_worker, a_missing_dead_letter_topic_fails_the_job)
{
    char topic[64], spec[1024], addr[64], want[512];
    snprintf(topic, sizeof topic, "worker-dlqmiss-%d", (int)getpid());
    rd_kafka_t *p = ku_client(RD_KAFKA_PRODUCER, ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 1, tu_timeout(30));
    rd_kafka_destroy(p);
    snprintf(spec, sizeof spec,
             "{\"id\": \"dlqmiss\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"dead_letter_topic\": \"%s.nope\"}}}",
             ku_broker.bootstrap, topic, topic);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, addr, sizeof addr);
    sl_error_t err = {0};
    double deadline = ku_now() + tu_timeout(60);
    while (!sl_worker_failed(w, &err)) {
        cr_assert_lt(ku_now(), deadline, "the worker did not fail");
        usleep(20000);
    }
    snprintf(want, sizeof want,
             "kafka dead-letter topic '%s.nope' does not exist on %s "
             "($.source.kafka.dead_letter_topic): create it first",
             topic, ku_broker.bootstrap);
    cr_assert(strstr(err.msg, want) != NULL, "%s", err.msg);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

static atomic_uint dead_logged; /* warnings of dead letters that failed */
static void dead_log(void *ctx, const sl_log_record_t *rec)
{
    (void)ctx;
    if (rec->level == SL_LOG_WARN && (strcmp(rec->event, "kafka_delivery_failed") == 0 ||
                                      strcmp(rec->event, "kafka_dead_letter_failed") == 0))
        atomic_fetch_add(&dead_logged, 1);
}

/* A dead-letter topic that stops taking records (deleted while the job
 * runs) costs counted, logged failures, never the stream: every good
 * record still reaches the trainer, in time. */
Test(kafka_worker, a_failing_dead_letter_topic_never_stalls_the_stream)
{
    char topic[64], dead[64], spec[1024], addr[64];
    snprintf(topic, sizeof topic, "worker-dlqfail-%d", (int)getpid());
    snprintf(dead, sizeof dead, "worker-dlqfail-%d.dead", (int)getpid());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    ku_create_topic(p, dead, 1, tu_timeout(30));
    for (uint64_t id = 0; id < 20; id++) /* these 20 all good */
        kr_produce(p, topic, (int32_t)(id % 2), id, id % 60);
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    /* the producer's properties: a record the brokers do not take fails
     * after 1.5 s instead of 300 */
    snprintf(spec, sizeof spec,
             "{\"id\": \"dlqfail\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"chunk\": 10, \"linger_ms\": 10, "
             "\"dead_letter_topic\": \"%s\", \"properties\": {\"message.timeout.ms\": "
             "\"1500\"}}}, \"batch\": {\"size\": 16}}",
             ku_broker.bootstrap, topic, dead);
    sl_pipeline_job_t *job = job_of(spec);
    sl_log_set_handler(dead_log, NULL);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    atomic_uint total = 0;
    const char *fmt;
    char why[128];
    uint32_t good = 20;
    for (uint64_t id = 20; id < 200; id++)
        good += !dead_kind(id, &fmt, why, sizeof why);
    client_t c = {.addr = addr, .epochs = 1, .seen = seen, .total = &total, .want = good};
    pthread_t ct;
    pthread_create(&ct, NULL, consume, &c);
    double deadline = ku_now() + tu_timeout(30);
    while (atomic_load(&total) < 20) { /* the job runs: its dead-letter producer is open */
        cr_assert_lt(ku_now(), deadline, "the first 20 samples did not arrive");
        usleep(20000);
    }
    rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(dead);
    rd_kafka_queue_t *q = rd_kafka_queue_new(p);
    rd_kafka_DeleteTopics(p, &dt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, (int)(tu_timeout(30) * 1000));
    cr_assert_not_null(ev);
    cr_assert_eq(rd_kafka_event_error(ev), RD_KAFKA_RESP_ERR_NO_ERROR, "%s",
                 rd_kafka_event_error_string(ev));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_DeleteTopic_destroy(dt);
    double t0 = ku_now();
    uint32_t bad = produce_with_bad(p, topic, 20, 200);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_OK, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    /* the good records did not wait for the failing dead letters (1.5 s each) */
    cr_assert_lt(ku_now() - t0, tu_timeout(10));
    for (uint32_t id = 0; id < MAX_IDS; id++)
        cr_assert_eq(seen[id],
                     id < 20 || (id < 200 && !dead_kind(id, &fmt, why, sizeof why)) ? 1u : 0u,
                     "sample %u arrived %u times", id, seen[id]);
    /* the failures are counted as delivery reports are served: with each
     * stripe, so a good record now and then until all are in */
    sl_worker_stats_t st;
    deadline = ku_now() + tu_timeout(30);
    for (uint64_t id = 200;; id += 25) {
        sl_worker_stats(w, &st);
        if (st.records_dead_letter_failed == bad) break;
        cr_assert_lt(ku_now(), deadline, "%lu of %u dead letters counted failed",
                     (unsigned long)st.records_dead_letter_failed, bad);
        kr_produce(p, topic, (int32_t)(id % 2), id, id % 60); /* id % 25 == 0: good */
        kr_flush(p, (int)(tu_timeout(30) * 1000));
        usleep(200000);
    }
    cr_assert_eq(st.records_bad, bad);
    cr_assert_eq(st.records_dead_letter, 0);
    /* logged, but not each: the 1st, 2nd, 4th ... failure (here 1, 2, 4, 8, 16) */
    sl_log_set_handler(NULL, NULL);
    cr_assert_geq(atomic_load(&dead_logged), 1);
    cr_assert_leq(atomic_load(&dead_logged), 2 * 6, "%u warnings for %u failures",
                  atomic_load(&dead_logged), bad);
    sl_error_t err = {0};
    cr_assert_not(sl_worker_failed(w, &err), "%s", err.msg);
    sl_worker_stop(w);
    rd_kafka_destroy(p);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

KU_TEST_MAIN
