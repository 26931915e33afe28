/* A Kafka stream under a DPP master, against the real broker (ctest
 * fixture kafka): the master accepts a stream (source.kafka without stop)
 * as a job of partitions; its Kafka watcher adds a partition that joins the
 * topic while the job runs (from its earliest offset), reports the lag per
 * partition (sluice_master_kafka_lag_records and GET /jobs/{id}), and
 * mirrors each partition's committed prefix into the consumer group
 * sluice-<job>, read back here with librdkafka; a job resumed from a token
 * starts at its prefix, and a token whose offsets retention deleted
 * (DeleteRecords) is refused naming the partition and offsets. Every wait
 * is bounded (tu_timeout). */
#include "kafka_util.h"

#include <jansson.h>

#include "../kafka_records.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/process/master.h"
#include "dpp/master/state/state.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_stream, .init = suite_setup);

static void produce(const char *topic, int32_t partition, uint64_t first, uint64_t n)
{
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "1", NULL));
    for (uint64_t id = first; id < first + n; id++)
        kr_produce(p, topic, partition, id, id % 7);
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
}

/* A version-3 resume token of job `job` over topic/0 saying offsets below
 * prefix were delivered, made by a master state of its own (as a trainer's
 * checkpoint of an earlier run would hold). Caller frees with free(). */
static uint8_t *token_at(const char *job, const char *topic, int64_t prefix, size_t *len)
{
    sl_master_state_t *st = NULL;
    sl_error_t err = {0};
    sl_master_state_opts_t o = {0};
    cr_assert_eq(sl_master_state_new(&o, &st, &err), SL_OK, "%s", err.msg);
    sl_master_kafka_partition_t p = {topic, 0, 0, -1};
    sl_master_state_job_spec_t spec = {.job_id = job,
                                       .epochs = 1,
                                       .kafka_partitions = &p,
                                       .num_kafka_partitions = 1,
                                       .kafka_chunk = (uint32_t)prefix};
    cr_assert_eq(sl_master_state_job_add(st, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_state_kafka_high(st, job, topic, 0, prefix, 0); /* records up to the prefix */
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(st, job, "w", 0, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_commit(st, job, 0, l.split, l.generation, 0, (uint64_t)prefix, "c",
                                        1, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
    void *buf;
    cr_assert_eq(sl_master_state_token_encode(st, job, NULL, 0, &buf, len, &err), SL_OK, "%s",
                 err.msg);
    uint8_t *copy = malloc(*len);
    memcpy(copy, buf, *len);
    sl_free(NULL, buf, *len);
    sl_master_state_destroy(st);
    return copy;
}

static char *stream_spec(const char *job, const char *topic)
{
    char *s = malloc(2048);
    snprintf(s, 2048,
             "{\"id\": \"%s\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"chunk\": 10, \"schema\": " KR_SCHEMA_JSON "}}}",
             job, ku_broker.bootstrap, topic);
    return s;
}

static sl_master_t *master(void)
{
    sl_master_opts_t o = {.lease_timeout_ms = 5000, .kafka_watch_ms = 100};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&o, &m, &err), SL_OK, "%s", err.msg);
    return m;
}

static sl_err_t submit(sl_master_t *m, const char *spec, const uint8_t *token, size_t len,
                       sl_error_t *err)
{
    sl_master_submit_t req = {.spec_json = spec,
                              .ranks = 1,
                              .min_workers = 1,
                              .max_workers = 1,
                              .workers = 1,
                              .tokens = &token,
                              .token_lens = &len,
                              .num_tokens = token != NULL ? 1 : 0};
    char *id = NULL;
    sl_err_t rc = sl_master_job_submit(m, &req, &id, NULL, err);
    sl_free(sl_master_allocator(m), id, id ? strlen(id) + 1 : 0);
    return rc;
}

/* "partition:committed/high/lag " of the job's partitions, from GET /jobs/{id}. */
static void partitions_of(sl_master_t *m, const char *job, char *out, size_t cap)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_admin_job_json(m, job, &j, &err), SL_OK, "%s", err.msg);
    out[0] = '\0';
    json_t *k = json_object_get(j, "kafka"), *p;
    size_t i;
    json_array_foreach(k, i, p)
    {
        json_t *lag = json_object_get(p, "lag");
        snprintf(out + strlen(out), cap - strlen(out), "%lld:%lld/%lld/%lld ",
                 json_integer_value(json_object_get(p, "partition")),
                 json_integer_value(json_object_get(p, "committed")),
                 json_integer_value(json_object_get(p, "high_watermark")),
                 lag != NULL ? json_integer_value(lag) : -1LL);
    }
    json_decref(j);
}

/* Wait (bounded) until the job's partitions read want. */
static void await_partitions(sl_master_t *m, const char *job, const char *want)
{
    char got[512] = "";
    double end = ku_now() + tu_timeout(30);
    while (ku_now() < end) {
        partitions_of(m, job, got, sizeof got);
        if (strcmp(got, want) == 0) return;
        usleep(50 * 1000);
    }
    cr_assert_str_eq(got, want, "the job's partitions never read as wanted");
}

/* The offset the consumer group has committed for topic/partition (-1001:
 * none). */
static int64_t group_offset(const char *group, const char *topic, int32_t partition)
{
    rd_kafka_t *c = ku_client(RD_KAFKA_CONSUMER, ku_conf("group.id", group, NULL));
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition);
    rd_kafka_resp_err_t e = rd_kafka_committed(c, l, (int)(tu_timeout(10) * 1000));
    int64_t off = e == RD_KAFKA_RESP_ERR_NO_ERROR ? l->elems[0].offset : -2;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(c);
    return off;
}

Test(kafka_stream, lag_group_mirror_and_partitions_added)
{
    char topic[64], job[64], group[80];
    snprintf(topic, sizeof topic, "stream-lag-%d", ku_run());
    snprintf(job, sizeof job, "lag-%d", ku_run());
    snprintf(group, sizeof group, "sluice-%s", job);
    rd_kafka_t *admin = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    ku_create_topic(admin, topic, 1, tu_timeout(30));
    rd_kafka_destroy(admin);
    produce(topic, 0, 0, 30);
    /* resumed from a checkpoint that delivered offsets [0, 10) */
    size_t len;
    uint8_t *tok = token_at(job, topic, 10, &len);
    sl_master_t *m = master();
    char *spec = stream_spec(job, topic);
    sl_error_t err = {0};
    cr_assert_eq(submit(m, spec, tok, len, &err), SL_OK, "%s", err.msg);
    /* partition 0 committed up to 10, 30 records: a lag of 20 */
    await_partitions(m, job, "0:10/30/20 ");
    char *metrics = sl_master_metrics_text(m);
    char want[256];
    snprintf(want, sizeof want,
             "sluice_master_kafka_lag_records{job=\"%s\",topic=\"%s\",partition=\"0\"} 20\n", job,
             topic);
    cr_assert(strstr(metrics, want) != NULL, "no %s in\n%s", want, metrics);
    sl_free(sl_master_allocator(m), metrics, strlen(metrics) + 1);
    /* the group mirror holds the committed prefix */
    int64_t off = -1;
    double end = ku_now() + tu_timeout(30);
    while (ku_now() < end && (off = group_offset(group, topic, 0)) != 10)
        usleep(100 * 1000);
    cr_assert_eq(off, 10, "group %s: committed offset %lld", group, (long long)off);
    /* the topic grows a partition while the job runs: it joins from its
     * earliest offset, and its records count in its lag */
    ku_add_partitions(topic, 2, tu_timeout(30));
    produce(topic, 1, 1000, 5);
    await_partitions(m, job, "0:10/30/20 1:0/5/5 ");
    end = ku_now() + tu_timeout(30);
    while (ku_now() < end && (off = group_offset(group, topic, 1)) != 0)
        usleep(100 * 1000);
    cr_assert_eq(off, 0, "group %s partition 1: committed offset %lld", group, (long long)off);
    sl_master_stop(m);
    free(spec);
    free(tok);
}

Test(kafka_stream, a_token_whose_offsets_retention_deleted_is_refused)
{
    char topic[64], job[64];
    snprintf(topic, sizeof topic, "stream-retention-%d", ku_run());
    snprintf(job, sizeof job, "ret-%d", ku_run());
    rd_kafka_t *admin = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    ku_create_topic(admin, topic, 1, tu_timeout(30));
    rd_kafka_destroy(admin);
    produce(topic, 0, 0, 50);
    rd_kafka_t *rk = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    ku_delete_records(rk, topic, 0, 20, tu_timeout(30));
    rd_kafka_destroy(rk);
    sl_master_t *m = master();
    char *spec = stream_spec(job, topic);
    size_t len;
    uint8_t *tok = token_at(job, topic, 10, &len);
    sl_error_t err = {0};
    cr_assert_eq(submit(m, spec, tok, len, &err), SL_ERR_INVALID);
    char want[256];
    snprintf(want, sizeof want,
             "%s/0 must be read from offset 10 on, but retention deleted every offset below 20",
             topic);
    cr_assert(strstr(err.msg, want) != NULL, "%s", err.msg);
    free(tok);
    /* a token past the deleted offsets is taken: the job starts at it */
    tok = token_at(job, topic, 25, &len);
    cr_assert_eq(submit(m, spec, tok, len, &err), SL_OK, "%s", err.msg);
    await_partitions(m, job, "0:25/50/25 ");
    /* without a token the stream starts at the earliest offset kept */
    char job2[80];
    snprintf(job2, sizeof job2, "%s-b", job);
    char *spec2 = stream_spec(job2, topic);
    cr_assert_eq(submit(m, spec2, NULL, 0, &err), SL_OK, "%s", err.msg);
    await_partitions(m, job2, "0:20/50/30 ");
    sl_master_stop(m);
    free(spec);
    free(spec2);
    free(tok);
}

KU_TEST_MAIN
