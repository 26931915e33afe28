/* JSON records on Kafka (source.kafka.format "json", the column mapping as
 * source.kafka.columns) against the real broker: a bounded replay of two
 * partitions with bad records among the good - values that are not JSON,
 * not an object, a wrong type, a string id without a hash - delivers
 * every good sample exactly once with its mapped values (a hashed string
 * column included), counts the bad ones and puts each in the dead-letter
 * topic with why; and `sluice produce --format json --print-columns`
 * writes records that a job with the printed columns reads back, every
 * sample once. Every wait is bounded. */
#include "kafka_worker_util.h"

#include <math.h>
#include <pthread.h>

#include "../kafka_records.h"
#include "warehouse/column_map.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_json, .init = suite_setup);

#define IDS 200

/* Record id's value; *why: the reason a bad one is refused ("" for a good
 * one). Kinds by id % 25: 3 not JSON, 8 an array, 13 a string price, 18 a
 * string item id (no hash declared on items). */
static void value_of(uint32_t id, char *buf, size_t cap, char *why, size_t wcap)
{
    uint32_t off = id / 2;
    why[0] = '\0';
    switch (id % 25) {
    case 3:
        snprintf(buf, cap, "{\"id\": %u,", id);
        snprintf(why, wcap, "offset %u: the value is not JSON (at byte %zu: ", off, strlen(buf));
        return;
    case 8:
        snprintf(buf, cap, "[%u]", id);
        snprintf(why, wcap, "offset %u: expected a JSON object, got an array", off);
        return;
    case 13:
        snprintf(buf, cap, "{\"id\": %u, \"price\": \"cheap\"}", id);
        snprintf(why, wcap, "offset %u: column 'price': expected a number, got a string", off);
        return;
    case 18:
        snprintf(buf, cap, "{\"id\": %u, \"items\": [\"x\"]}", id);
        snprintf(why, wcap,
                 "offset %u: column 'items' id 0: a string; strings become ids only by a "
                 "declared hash",
                 off);
        return;
    default:
        snprintf(buf, cap,
                 "{\"id\": %u, \"sid\": %u, \"click\": %s, \"price\": %u.5, \"items\": [%u, %u],"
                 " \"country\": \"%s\", \"ignored\": {\"x\": 1}}",
                 id, id % 60, id % 2 ? "true" : "false", id, id, id + 1, id % 3 ? "DE" : "FR");
        return;
    }
}

typedef struct json_client {
    const char *addr;
    atomic_uint *seen;   /* [MAX_IDS] */
    uint32_t bad_values; /* samples whose values were not the mapped ones */
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
    bool check_values;
} json_client_t;

static int col(const char **names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (int)i;
    return -1;
}

static void *consume_json(void *arg)
{
    json_client_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = c->addr;
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        return NULL;
    }
    sl_batch_t *b;
    int wait_ms = (int)(tu_timeout(20) * 1000);
    int64_t de = sl_wh_colmap_hash("DE", 2, 7), fr = sl_wh_colmap_hash("FR", 2, 7);
    while ((c->end = sl_trainer_next(t, wait_ms, &b, &err)) == SL_OK) {
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            if (id < 0 || id >= MAX_IDS) {
                c->bad_values++;
                continue;
            }
            atomic_fetch_add(&c->seen[id], 1);
            if (!c->check_values) continue;
            int p = col(b->dense.names, b->dense.cols, "price");
            int l = col(b->labels.names, b->labels.cols, "click");
            bool ok = p >= 0 && l >= 0 &&
                      b->dense.data[(size_t)i * b->dense.cols + (uint32_t)p] == (float)id + 0.5f &&
                      b->labels.data[(size_t)i * b->labels.cols + (uint32_t)l] == (float)(id % 2);
            /* sparse: keys items, country; values of row i of each key */
            const sl_kjt_t *k = &b->sparse;
            uint64_t at = 0;
            for (uint32_t key = 0; key < k->num_keys && ok; key++) {
                for (uint32_t r = 0; r < i; r++)
                    at += (uint64_t)k->lengths[key * k->stride + r];
                int32_t len = k->lengths[key * k->stride + i];
                if (strcmp(k->keys[key], "items") == 0)
                    ok = len == 2 && k->values[at] == id && k->values[at + 1] == id + 1;
                else if (strcmp(k->keys[key], "country") == 0)
                    ok = len == 1 && k->values[at] == (id % 3 ? de : fr);
                for (uint32_t r = i; r < k->stride; r++)
                    at += (uint64_t)k->lengths[key * k->stride + r];
            }
            if (!ok) c->bad_values++;
        }
        sl_trainer_release(t, b);
    }
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_close(t);
    return NULL;
}

#define COLUMNS                                                                                    \
    "{\"sample_id\": \"id\", \"session_id\": \"sid\", \"labels\": [\"click\"],"                    \
    " \"dense\": [\"price\"], \"sparse\": [\"items\", {\"column\": \"country\", \"hash\": "        \
    "{\"seed\": 7}}]}"

Test(kafka_json, json_records_with_bad_ones_and_a_dead_letter_topic)
{
    char topic[64], dead[64], spec[2048], addr[64];
    snprintf(topic, sizeof topic, "json-%d", ku_run());
    snprintf(dead, sizeof dead, "json-%d.dead", ku_run());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", NULL));
    ku_create_topic(p, topic, 2, tu_timeout(30));
    ku_create_topic(p, dead, 1, tu_timeout(30));
    uint32_t bad = 0;
    for (uint32_t id = 0; id < IDS; id++) {
        char v[512], why[256];
        value_of(id, v, sizeof v, why, sizeof why);
        bad += why[0] != '\0';
        /* no key, no header: JSON records need neither */
        rd_kafka_resp_err_t e =
            rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION((int32_t)(id % 2)),
                              RD_KAFKA_V_VALUE(v, strlen(v)),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        cr_assert_eq(e, RD_KAFKA_RESP_ERR_NO_ERROR, "%s", rd_kafka_err2str(e));
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
    cr_assert_eq(bad, 32);
    snprintf(spec, sizeof spec,
             "{\"id\": \"js\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"format\": \"json\", \"columns\": " COLUMNS ", \"stop\": \"end\", "
             "\"chunk\": 40, \"dead_letter_topic\": \"%s\"}}, \"batch\": {\"size\": 16}}",
             ku_broker.bootstrap, topic, dead);
    sl_pipeline_job_t *job = job_of(spec);
    cr_assert_eq(sl_wh_schema_num_features(job->kafka.schema), 3);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    json_client_t c = {.addr = addr, .seen = seen, .check_values = true};
    pthread_t ct;
    pthread_create(&ct, NULL, consume_json, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    cr_assert_eq(c.bad_values, 0, "%u samples with values other than mapped", c.bad_values);
    for (uint32_t id = 0; id < MAX_IDS; id++) {
        char v[512], why[256];
        value_of(id % IDS, v, sizeof v, why, sizeof why);
        cr_assert_eq(seen[id], id < IDS && why[0] == '\0' ? 1u : 0u, "sample %u arrived %u times",
                     id, seen[id]);
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.records_bad, bad);
    cr_assert_eq(st.records_dead_letter, bad);
    cr_assert_eq(st.records_dead_letter_failed, 0);
    sl_worker_destroy(w);

    /* The dead letters: each bad record once, as it came, with why. */
    rd_kafka_t *r = ku_reader(dead, 1);
    uint32_t got[IDS] = {0}, n = 0;
    double deadline = ku_now() + tu_timeout(30);
    for (bool end = false; !end;) {
        cr_assert_lt(ku_now(), deadline, "%u dead letters, no end in time", n);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r, 100);
        if (!m) continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            end = n >= bad;
            rd_kafka_message_destroy(m);
            continue;
        }
        cr_assert_eq(m->err, RD_KAFKA_RESP_ERR_NO_ERROR, "%s", rd_kafka_message_errstr(m));
        n++;
        char off[24], part[16], why[512];
        ku_header(m, "sluice-source-offset", off, sizeof off);
        ku_header(m, "sluice-source-partition", part, sizeof part);
        ku_header(m, "sluice-error", why, sizeof why);
        uint32_t id = (uint32_t)(2 * strtoul(off, NULL, 10) + strtoul(part, NULL, 10));
        cr_assert_lt(id, IDS);
        char want_v[512], want_why[256];
        value_of(id, want_v, sizeof want_v, want_why, sizeof want_why);
        cr_assert_neq(want_why[0], '\0', "record %u is good but was dead-lettered", id);
        cr_assert(strncmp(why, want_why, strlen(want_why)) == 0, "record %u: '%s', want '%s'", id,
                  why, want_why);
        cr_assert_eq(m->len, strlen(want_v));
        cr_assert(memcmp(m->payload, want_v, m->len) == 0, "record %u: value", id);
        got[id]++;
        rd_kafka_message_destroy(m);
    }
    cr_assert_eq(n, bad);
    rd_kafka_consumer_close(r);
    rd_kafka_destroy(r);
    free(seen);
    sl_pipeline_job_destroy(job);
}

Test(kafka_json, sluice_produce_format_json_reads_back_through_the_printed_columns)
{
    char topic[64], spec[4096], addr[64];
    snprintf(topic, sizeof topic, "json-produce-%d", ku_run());
    const char *bin = tu_binary();
    char *dir = tu_mkdtemp("kafka_json");
    char *argv[] = {(char *)bin, "produce", "--brokers",       ku_broker.bootstrap,
                    "--topic",   topic,     "--partitions",    "3",
                    "--format",  "json",    "--print-columns", "--sessions",
                    "--rows",    "500",     "--seed",          "5",
                    "--quiet",   NULL};
    char *out = NULL, *errs = NULL;
    int rc = tu_run(dir, argv, tu_timeout(120), &out, &errs);
    cr_assert_eq(rc, 0, "sluice produce: exit %d\n%s%s", rc, out, errs);
    /* The first line is the mapping. */
    char *nl = strchr(out, '\n');
    cr_assert_not_null(nl);
    *nl = '\0';
    cr_assert(strstr(nl + 1, "produced: 500 records") != NULL, "%s", nl + 1);
    snprintf(spec, sizeof spec,
             "{\"id\": \"jp\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"format\": \"json\", \"columns\": %s, \"stop\": \"end\"}}, "
             "\"batch\": {\"size\": 64}}",
             ku_broker.bootstrap, topic, out);
    sl_pipeline_job_t *job = job_of(spec);
    /* the sessions preset: 6 sparse features, 4 dense, label click */
    cr_assert_eq(sl_wh_schema_num_features(job->kafka.schema), 10);
    cr_assert_eq(sl_wh_schema_num_labels(job->kafka.schema), 1);
    sl_worker_t *w = start(job, addr, sizeof addr);
    atomic_uint *seen = calloc(MAX_IDS, sizeof *seen);
    json_client_t c = {.addr = addr, .seen = seen};
    pthread_t ct;
    pthread_create(&ct, NULL, consume_json, &c);
    pthread_join(ct, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "client ended with %s: %s", sl_err_str(c.end), c.msg);
    sl_worker_stats_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats(w, &st);
    cr_assert_eq(st.records_bad, 0);
    uint32_t total = 0;
    for (uint32_t id = 0; id < MAX_IDS; id++) {
        cr_assert_leq(seen[id], 1, "sample %u arrived %u times", id, seen[id]);
        total += seen[id];
    }
    cr_assert_eq(total, 500,
                 "%u of 500 samples (%u outside [0, %d)); the worker read %" PRIu64
                 " records, encoded %" PRIu64 " samples",
                 total, c.bad_values, MAX_IDS, st.records_read, st.samples);
    cr_assert_eq(c.bad_values, 0, "sample ids outside [0, %d)", MAX_IDS);
    sl_worker_destroy(w);
    free(seen);
    free(out);
    free(errs);
    sl_pipeline_job_destroy(job);
    tu_rm_tree(dir);
    free(dir);
}

KU_TEST_MAIN
