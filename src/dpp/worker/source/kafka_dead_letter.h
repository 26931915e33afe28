/* The dead-letter topic of a Kafka job (source.kafka.dead_letter_topic,
 * docs/KAFKA.md "Bad records and the dead-letter topic"): every bad record
 * the Kafka source skips is produced to it as it came (key, value,
 * headers) plus headers saying why and where it came from, by an
 * idempotent producer whose failures are counted and logged and never
 * stop or slow the partition being read: a send never waits (a full local
 * queue is a failure), delivery reports are served between records.
 *
 * Memory: the producer's local queue is bounded by queue_bytes
 * (queue.buffering.max.kbytes), part of the Kafka source's prefetch share
 * of the worker's memory limit. One thread at a time (the reader), except
 * counts, which any thread may read. */
#ifndef SLUICE_DPP_WORKER_KAFKA_DEAD_LETTER_H
#define SLUICE_DPP_WORKER_KAFKA_DEAD_LETTER_H

#include <stdint.h>

#include "kafka/chunk.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

struct sl_pipeline_job;
typedef struct dpp_dead_letter dpp_dead_letter_t;

/* The headers added to each dead letter. */
#define DPP_DEAD_LETTER_ERROR "sluice-error"
#define DPP_DEAD_LETTER_TOPIC "sluice-source-topic"
#define DPP_DEAD_LETTER_PARTITION "sluice-source-partition"
#define DPP_DEAD_LETTER_OFFSET "sluice-source-offset"

/* A producer to job's dead-letter topic (which must exist), with the
 * job's librdkafka properties (its security settings; consumer-only ones
 * are ignored by librdkafka with a warning) and a local queue of at most
 * queue_bytes. Connects and looks the topic up (at most timeout_s).
 * @return SL_ERR_NOT_FOUND for a missing topic (naming it), the
 * producer's errors, SL_ERR_NOMEM. */
sl_err_t dpp_dead_letter_new(const struct sl_pipeline_job *job, uint64_t queue_bytes,
                             double timeout_s, const sl_allocator_t *a, dpp_dead_letter_t **out,
                             sl_error_t *err);

/* Produce bad record r to the topic; a failure is counted and logged. */
void dpp_dead_letter_send(dpp_dead_letter_t *d, const sl_kafka_bad_record_t *r);

/* Serve delivery reports (never waits). */
void dpp_dead_letter_poll(dpp_dead_letter_t *d);

/* Wait up to timeout_s for what is queued to be delivered (or fail); a
 * bounded job's end. */
void dpp_dead_letter_flush(dpp_dead_letter_t *d, double timeout_s);

/* Records the brokers acknowledged, and those that could not be produced
 * or were not delivered. Any thread; d may be NULL (zeros). */
void dpp_dead_letter_counts(const dpp_dead_letter_t *d, uint64_t *delivered, uint64_t *failed);

/* Wait up to timeout_s for what is queued, then free; d may be NULL. */
void dpp_dead_letter_destroy(dpp_dead_letter_t *d, double timeout_s);

#endif
