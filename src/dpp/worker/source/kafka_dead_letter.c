/* The dead-letter topic of a Kafka job (kafka_dead_letter.h). */
#include "dpp/worker/source/kafka_dead_letter.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/pipeline/job.h"
#include "kafka/producer.h"

struct dpp_dead_letter {
    const sl_allocator_t *a;
    sl_kafka_producer_t *p;
    uint64_t send_failed; /* sends refused at once (reader thread) */
    _Atomic uint64_t delivered, failed;
};

/* The producer's counts into the atomics the admin thread reads. */
static void publish(dpp_dead_letter_t *d)
{
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(d->p, &st);
    atomic_store(&d->delivered, st.delivered);
    atomic_store(&d->failed, st.failed + d->send_failed);
}

sl_err_t dpp_dead_letter_new(const sl_pipeline_job_t *job, uint64_t queue_bytes, double timeout_s,
                             const sl_allocator_t *a, dpp_dead_letter_t **out, sl_error_t *err)
{
    *out = NULL;
    const sl_pipeline_kafka_t *k = &job->kafka;
    uint32_t n = k->num_props + 1;
    char **props = sl_calloc(a, n, sizeof *props);
    dpp_dead_letter_t *d = sl_calloc(a, 1, sizeof *d);
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; props && i < k->num_props; i++)
        if (!(props[i] = sl_strfmt(a, "%s=%s", k->props[2 * i], k->props[2 * i + 1])))
            rc = SL_ERR_NOMEM;
    char q[64];
    uint64_t kb = queue_bytes / 1024 ? queue_bytes / 1024 : 1;
    snprintf(q, sizeof q, "queue.buffering.max.kbytes=%" PRIu64, kb);
    if (props) props[n - 1] = q;
    if (!props || !d || rc) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "kafka dead-letter topic: out of memory");
    } else {
        d->a = a;
        sl_kafka_producer_opts_t o = {.brokers = k->brokers,
                                      .topic = k->dead_letter_topic,
                                      .properties = (const char *const *)props,
                                      .num_properties = n,
                                      .timeout_s = timeout_s,
                                      .allocator = a,
                                      .keep_going = true};
        rc = sl_kafka_producer_new(&o, &d->p, err);
        if (rc == SL_ERR_NOT_FOUND) /* the producer's hint (a partition count) does not apply */
            sl_error_set(err, rc,
                         "kafka dead-letter topic '%s' does not exist on %s ("
                         "$.source.kafka.dead_letter_topic): create it first",
                         k->dead_letter_topic, k->brokers);
        else if (rc)
            sl_error_prefix(err, "kafka dead-letter topic: ");
    }
    for (uint32_t i = 0; props && i + 1 < n; i++)
        sl_strfree(a, props[i]);
    if (props) sl_free(a, props, n * sizeof *props);
    if (rc) {
        if (d) sl_free(a, d, sizeof *d);
        return rc;
    }
    *out = d;
    return SL_OK;
}

void dpp_dead_letter_send(dpp_dead_letter_t *d, const sl_kafka_bad_record_t *r)
{
    char part[16], off[24];
    snprintf(part, sizeof part, "%d", (int)r->partition);
    snprintf(off, sizeof off, "%" PRId64, r->offset);
    const char *extra[] = {DPP_DEAD_LETTER_ERROR,     r->why, DPP_DEAD_LETTER_TOPIC,  r->topic,
                           DPP_DEAD_LETTER_PARTITION, part,   DPP_DEAD_LETTER_OFFSET, off};
    sl_error_t err = {0};
    if (sl_kafka_producer_send_copy(d->p, r->key, r->key_len, r->value, r->value_len, r->headers,
                                    extra, 4, &err) != SL_OK) {
        uint64_t n = ++d->send_failed;
        if ((n & (n - 1)) == 0) /* 1, 2, 4, 8 ...: a dead broker does not flood the log */
            sl_log_kv(SL_LOG_WARN, SL_EV(KAFKA_DEAD_LETTER_FAILED),
                      (SL_KV_STR("topic", r->topic), SL_KV_I64("partition", r->partition),
                       SL_KV_I64("offset", r->offset), SL_KV_U64("failed", n)),
                      "bad record %s/%d offset %" PRId64
                      " not written to the dead-letter topic (%" PRIu64 " so far): %s",
                      r->topic, (int)r->partition, r->offset, n, err.msg);
    }
    publish(d);
}

void dpp_dead_letter_poll(dpp_dead_letter_t *d)
{
    sl_kafka_producer_poll(d->p, 0);
    publish(d);
}

void dpp_dead_letter_counts(const dpp_dead_letter_t *d, uint64_t *delivered, uint64_t *failed)
{
    dpp_dead_letter_t *m = (dpp_dead_letter_t *)d; /* atomic loads only */
    *delivered = m ? atomic_load(&m->delivered) : 0;
    *failed = m ? atomic_load(&m->failed) : 0;
}

void dpp_dead_letter_flush(dpp_dead_letter_t *d, double timeout_s)
{
    sl_error_t err = {0};
    if (sl_kafka_producer_flush(d->p, timeout_s, &err) != SL_OK)
        sl_log_kv(SL_LOG_WARN, SL_EV(KAFKA_DEAD_LETTER_FAILED),
                  (SL_KV_U64("outstanding", sl_kafka_producer_outstanding(d->p))),
                  "dead-letter topic: %s", err.msg);
    publish(d);
}

void dpp_dead_letter_destroy(dpp_dead_letter_t *d, double timeout_s)
{
    if (!d) return;
    dpp_dead_letter_flush(d, timeout_s);
    sl_kafka_producer_destroy(d->p);
    sl_free(d->a, d, sizeof *d);
}
