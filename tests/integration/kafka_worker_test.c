/* A DPP worker reading a Kafka job (source.kafka) from the real broker,
 * on its own (no master), to trainer clients: a bounded replay (stop
 * "end") of three partitions, with bad records among them, delivers every
 * good sample id exactly once in each of two epochs, through dedup, to two
 * clients; a stream (no stop) delivers what is produced while it runs,
 * each id once. Every wait is bounded. The dead-letter topic:
 * kafka_dead_letter_test.c. */
#include "kafka_worker_util.h"

#include <pthread.h>

#include <jansson.h>

#include "../kafka_records.h"
#include "dpp/worker/admin/admin.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_worker, .init = suite_setup);

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
    snprintf(topic, sizeof topic, "worker-replay-%d", ku_run());
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
    snprintf(topic, sizeof topic, "worker-stream-%d", ku_run());
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
    snprintf(topic, sizeof topic, "worker-wakes-%d", ku_run());
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
    snprintf(topic, sizeof topic, "worker-time-%d", ku_run());
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
    snprintf(topic, sizeof topic, "worker-times-%d", ku_run());
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

KU_TEST_MAIN
