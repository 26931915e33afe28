/* The dead-letter topic (source.kafka.dead_letter_topic) of a DPP worker
 * reading a Kafka job from the real broker on its own (no master): each
 * bad record written to it once per epoch with its key, value and headers,
 * counted in the stats and metrics; a missing topic fails the job; a
 * topic that fails while a stream runs never stalls it. Every wait is
 * bounded. The worker's Kafka source: kafka_worker_test.c. */
#include "kafka_worker_util.h"

#include <pthread.h>

#include "../kafka_records.h"
#include "common/log.h"
#include "dpp/worker/admin/admin.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_worker, .init = suite_setup);

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
    snprintf(topic, sizeof topic, "worker-dlq-%d", ku_run());
    snprintf(dead, sizeof dead, "worker-dlq-%d.dead", ku_run());
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
        char off[24], part[16];
        ku_header(m, "sluice-source-offset", off, sizeof off);
        ku_header(m, "sluice-source-partition", part, sizeof part);
        rd_kafka_headers_t *h = NULL;
        cr_assert_eq(rd_kafka_message_headers(m, &h), RD_KAFKA_RESP_ERR_NO_ERROR);
        const void *v;
        size_t len;
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
    snprintf(topic, sizeof topic, "worker-dlqmiss-%d", ku_run());
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
    snprintf(topic, sizeof topic, "worker-dlqfail-%d", ku_run());
    snprintf(dead, sizeof dead, "worker-dlqfail-%d.dead", ku_run());
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
