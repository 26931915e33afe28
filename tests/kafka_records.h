/* Test helper: records of sluice's record layout, version 1 (docs/KAFKA.md),
 * encoded here with protobuf-c and produced with librdkafka directly, until
 * the encoder (src/kafka/record_encode.c) is folded in. The sample shape is
 * fixed and derived from the sample id, so a reader can check every value:
 *
 *   schema  features age (dense), hist (sparse), geo (weighted); label click
 *   sample  id, session = id % sessions, timestamp = 1000 + id,
 *           click = id % 2, age = id / 2 (absent when id % 5 == 0),
 *           hist = [id, id + 1, ... id + id % 3] (id % 3 + 1 ids),
 *           geo = [7] with weight id % 4
 *
 * Everything is static: include once per test file. */
#ifndef SLUICE_TESTS_KAFKA_RECORDS_H
#define SLUICE_TESTS_KAFKA_RECORDS_H

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kafka/chunk.h"
#include "kafka/record_decode.h"
#include "sluice.pb-c.h"

#define KR_FN static __attribute__((unused))

#define KR_SCHEMA_JSON                                                                             \
    "{\"features\": [{\"name\": \"age\", \"kind\": \"dense\"}, {\"name\": \"hist\", \"kind\": "    \
    "\"sparse\"}, {\"name\": \"geo\", \"kind\": \"weighted\"}], \"labels\": [\"click\"]}"

/* A schema from its JSON text (caller frees). */
KR_FN sl_wh_schema_t *kr_schema_of(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j);
    sl_wh_schema_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_from_json(j, NULL, &s, &err), SL_OK, "%s", err.msg);
    json_decref(j);
    return s;
}

/* KR_SCHEMA_JSON as a schema (caller frees). */
KR_FN sl_wh_schema_t *kr_schema(void)
{
    return kr_schema_of(KR_SCHEMA_JSON);
}

/* A decoder of every feature of kr_schema's; *schema gets the schema
 * (free both). */
KR_FN sl_kafka_rows_t *kr_rows(sl_wh_schema_t **schema)
{
    *schema = kr_schema();
    sl_kafka_rows_t *rows = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(*schema, NULL, 0, NULL, &rows, &err), SL_OK, "%s", err.msg);
    return rows;
}

/* The value of sample id (of session) into buf; @return its length. */
KR_FN size_t kr_encode(uint64_t id, uint64_t session, uint8_t *buf, size_t cap)
{
    Sluice__Sample s = SLUICE__SAMPLE__INIT;
    s.sample_id = id;
    s.session_id = session;
    s.timestamp = 1000 + (int64_t)id;
    Sluice__NamedValue click = SLUICE__NAMED_VALUE__INIT, age = SLUICE__NAMED_VALUE__INIT;
    click.name = "click";
    click.value = (float)(id % 2);
    age.name = "age";
    age.value = (float)(id / 2);
    Sluice__NamedValue *labels[] = {&click}, *dense[] = {&age};
    s.n_labels = 1;
    s.labels = labels;
    if (id % 5 != 0) {
        s.n_dense = 1;
        s.dense = dense;
    }
    int64_t ids[3];
    for (uint64_t k = 0; k <= id % 3; k++)
        ids[k] = (int64_t)(id + k);
    int64_t geo_id = 7;
    float geo_w = (float)(id % 4);
    Sluice__IdList hist = SLUICE__ID_LIST__INIT, geo = SLUICE__ID_LIST__INIT;
    hist.name = "hist";
    hist.n_ids = id % 3 + 1;
    hist.ids = ids;
    geo.name = "geo";
    geo.n_ids = 1;
    geo.ids = &geo_id;
    geo.n_weights = 1;
    geo.weights = &geo_w;
    Sluice__IdList *sparse[] = {&hist, &geo};
    s.n_sparse = 2;
    s.sparse = sparse;
    size_t n = sluice__sample__get_packed_size(&s);
    cr_assert_leq(n, cap);
    return sluice__sample__pack(&s, buf);
}

/* Produce one record of sample id to topic/partition (partition < 0: by
 * key) with CreateTime ts_ms (0: now). format: the sluice-format header's
 * value, NULL for none. value NULL: the encoded sample; else those bytes. */
KR_FN void kr_produce_at(rd_kafka_t *p, const char *topic, int32_t partition, uint64_t id,
                         uint64_t session, const char *format, const void *value, size_t len,
                         int64_t ts_ms)
{
    uint8_t buf[512];
    if (value == NULL) {
        len = kr_encode(id, session, buf, sizeof buf);
        value = buf;
    }
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(session >> (56 - 8 * i));
    rd_kafka_headers_t *h = rd_kafka_headers_new(1);
    if (format) rd_kafka_header_add(h, "sluice-format", -1, format, (ssize_t)strlen(format));
    rd_kafka_resp_err_t e;
    for (int tries = 0;; tries++) {
        e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(topic),
            RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
            RD_KAFKA_V_KEY(key, sizeof key), RD_KAFKA_V_VALUE((void *)value, len),
            RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_TIMESTAMP(ts_ms), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries > 1000) break;
        rd_kafka_poll(p, 10);
    }
    if (e) rd_kafka_headers_destroy(h); /* on success the record owns them */
    cr_assert_eq(e, 0, "produce: %s", rd_kafka_err2str(e));
}

KR_FN void kr_produce_raw(rd_kafka_t *p, const char *topic, int32_t partition, uint64_t id,
                          uint64_t session, const char *format, const void *value, size_t len)
{
    kr_produce_at(p, topic, partition, id, session, format, value, len, 0);
}

KR_FN void kr_produce(rd_kafka_t *p, const char *topic, int32_t partition, uint64_t id,
                      uint64_t session)
{
    kr_produce_raw(p, topic, partition, id, session, "1", NULL, 0);
}

/* Delivery reports of the producers made with kr_producer(): how many
 * records failed, and the first failure. rd_kafka_flush only waits for the
 * queue to empty, delivered or not: a record produced to a partition the
 * producer's metadata does not list yet (one just added to the topic) fails
 * with "Local: Unknown partition" and is gone, which a test must not take
 * for a record that sluice lost. */
static _Atomic unsigned long long kr_failed_deliveries;
static char kr_failed_first[300];

KR_FN void kr_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (!m->err) return;
    if (atomic_fetch_add(&kr_failed_deliveries, 1) == 0)
        snprintf(kr_failed_first, sizeof kr_failed_first, "%s partition %d: %s",
                 m->rkt ? rd_kafka_topic_name(m->rkt) : "?", (int)m->partition,
                 rd_kafka_err2str(m->err));
}

/* A producer of conf (taken over) whose failed deliveries kr_flush reports. */
KR_FN rd_kafka_t *kr_producer(rd_kafka_conf_t *conf)
{
    char err[256];
    rd_kafka_conf_set_dr_msg_cb(conf, kr_on_delivery);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    cr_assert_not_null(p, "rd_kafka_new: %s", err);
    return p;
}

/* Wait (bounded) until every record produced so far is acknowledged; with
 * kr_producer's, that none failed (any failure so far fails the test). */
KR_FN void kr_flush(rd_kafka_t *p, int timeout_ms)
{
    cr_assert_eq(rd_kafka_flush(p, timeout_ms), 0, "flush timed out");
    cr_assert_eq(rd_kafka_outq_len(p), 0);
    unsigned long long failed = atomic_load(&kr_failed_deliveries);
    cr_assert_eq(failed, 0, "%llu records were not delivered (the first: %s)", failed,
                 kr_failed_first);
}

/* What sl_kafka_read_range's stripe callback kr_on_stripe saw: stripes
 * tile the range from next on, each sample id's deliveries, rows stably
 * sorted by session within a stripe; kr_on_bad counts bad records. */
typedef struct kr_seen {
    int64_t next;        /* the offset the next stripe must start at */
    uint32_t seen[4096]; /* times each sample id was delivered */
    uint32_t max_rows;
    uint32_t stripes, empty;
    uint32_t bad_reasons;
    char last_bad[256];
    bool unsorted;
    int64_t first_rows_at; /* offset of the first stripe with rows */
} kr_seen_t;

KR_FN sl_err_t kr_on_stripe(void *ctx, const sl_kafka_stripe_t *s, int64_t first, int64_t end,
                            sl_error_t *err)
{
    (void)err;
    kr_seen_t *v = ctx;
    cr_assert_eq(first, v->next, "stripe starts at %ld, want %ld", (long)first, (long)v->next);
    cr_assert_gt(end, first);
    v->next = end;
    uint32_t n = s->rows.batch.batch_size;
    if (n == 0)
        v->empty++;
    else
        v->stripes++;
    if (n > v->max_rows) v->max_rows = n;
    for (uint32_t j = 0; j < n; j++) {
        int64_t id = s->rows.batch.sample_ids[j];
        cr_assert(id >= 0 && id < 4096);
        v->seen[id]++;
        cr_assert(s->offsets[j] >= first && s->offsets[j] < end, "offset %ld outside [%ld, %ld)",
                  (long)s->offsets[j], (long)first, (long)end);
        if (j && s->rows.session_ids[j] < s->rows.session_ids[j - 1]) v->unsorted = true;
        if (j && s->rows.session_ids[j] == s->rows.session_ids[j - 1] &&
            s->offsets[j] < s->offsets[j - 1])
            v->unsorted = true;
    }
    return SL_OK;
}

KR_FN void kr_on_bad(void *ctx, const char *why)
{
    kr_seen_t *v = ctx;
    v->bad_reasons++;
    snprintf(v->last_bad, sizeof v->last_bad, "%s", why);
}

#endif
