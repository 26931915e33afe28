/* A producer of version 1 sample records (record.h) to one Kafka topic,
 * over librdkafka: what `sluice produce`, the benchmarks and the tests
 * write with (docs/KAFKA.md, "Producing").
 *
 * Settings sluice chooses, before the caller's properties (which are
 * applied after them and so may change any of them):
 *   enable.idempotence=true      a retried batch is never written twice,
 *                                and a session's records stay in order
 *   compression.type=zstd
 *   compression.level=1          zstd's fastest level: 1.5 us less CPU a
 *                                record of the sessions stream than its
 *                                default 3, for 7.5% more bytes (a
 *                                producer at 100k records/s spends 0.15
 *                                of a core less on it)
 *   socket.nagle.disable=true    Nagle held a produce request's last
 *                                segment until the broker's delayed ACK
 *                                (up to 40 ms on Linux): `sluice demo
 *                                --online` at 100k/s had p99 60 ms with
 *                                it, 21-24 ms without
 *   partitioner=murmur2_random   a keyed record goes to partition
 *                                (murmur2(key) & 0x7fffffff) % partitions,
 *                                as Java's default partitioner places it,
 *                                so Java and sluice producers agree on
 *                                where a session lives
 *   allow.auto.create.topics=false  a misspelt topic is an error, not a
 *                                new one-partition topic
 *
 * Delivery reports are counted (delivered, failed); the first failure and
 * any fatal error of the idempotent producer are kept, with the topic and
 * partition, and every later send or flush reports them. Sends never
 * block longer than the timeout: a full local queue is drained by serving
 * delivery reports until it has room.
 *
 * Threads: one thread at a time per producer (librdkafka's own threads
 * call back into it only from inside sl_kafka_producer_poll, _send and
 * _flush, on the calling thread). */
#ifndef SLUICE_KAFKA_PRODUCER_H
#define SLUICE_KAFKA_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_kafka_producer_opts {
    const char *brokers; /* bootstrap.servers, "host:port,host:port" */
    const char *topic;
    /* librdkafka properties "name=value", applied after sluice's settings
     * (borrowed for the call) */
    const char *const *properties;
    uint32_t num_properties;
    /* > 0: create the topic with this many partitions when it does not
     * exist (Admin API); 0: a missing topic is SL_ERR_NOT_FOUND */
    uint32_t create_partitions;
    /* replication factor of a created topic; 0: the broker's default */
    uint32_t replication_factor;
    double timeout_s; /* bound of metadata, topic creation and a blocked send; 0: 30 */
    /* librdkafka's log lines (level as syslog: 0 emergency .. 7 debug) go
     * here; NULL: to common/log.h as records "kafka_log" (fields facility,
     * topic). Called on the thread of a producer call or on a librdkafka
     * thread. */
    void (*on_log)(void *ctx, int level, const char *facility, const char *message);
    void *log_ctx;
    /* Called for each record the broker acknowledged, with its timestamp
     * (ms since the epoch, as common/age.h): its CreateTime, or the
     * broker's LogAppendTime (append_time true) where the topic keeps
     * that; -1: none. On the thread of the producer call that served the
     * report (send, pace, poll, flush); NULL: none. What `sluice demo
     * --online` measures the producer-to-log stage by. */
    void (*on_delivered)(void *ctx, int64_t ts_ms, bool append_time);
    void *delivered_ctx;
    /* librdkafka's statistics (its STATISTICS.md JSON, borrowed for the
     * call) every statistics.interval.ms, a property the caller sets; on
     * the thread of a producer call, as on_delivered. NULL: none. */
    void (*on_stats)(void *ctx, const char *json);
    void *stats_ctx;
    const sl_allocator_t *allocator;
    /* A failed delivery is counted and logged (the 1st, 2nd, 4th, 8th ...
     * as a "kafka_delivery_failed" record), never kept: later sends go on
     * (a dead-letter topic, which must never stop the job). A fatal error
     * of the idempotent producer is still kept. */
    bool keep_going;
    /* Records without the sluice-format header (JSON records, whose
     * readers need none): sl_kafka_producer_send sends key and value only. */
    bool no_format_header;
} sl_kafka_producer_opts_t;

typedef struct sl_kafka_producer_stats {
    uint64_t sent;       /* records handed to librdkafka */
    uint64_t delivered;  /* acknowledged by the broker */
    uint64_t failed;     /* reported failed */
    uint64_t bytes;      /* key + value bytes of the records sent */
    uint32_t partitions; /* of the topic */
    bool created;        /* this producer created the topic */
} sl_kafka_producer_stats_t;

typedef struct sl_kafka_producer sl_kafka_producer_t;

/* Connect, and find the topic (or create it, see create_partitions).
 * Caller owns *out, free with sl_kafka_producer_destroy. @return
 * SL_ERR_INVALID for a property librdkafka refuses (naming it),
 * SL_ERR_NOT_FOUND for a missing topic, SL_ERR_TIMEOUT when the brokers
 * do not answer within the timeout, SL_ERR_IO when topic creation fails. */
sl_err_t sl_kafka_producer_new(const sl_kafka_producer_opts_t *opts, sl_kafka_producer_t **out,
                               sl_error_t *err);

/* Send one record: key = session_id (8 bytes big-endian), value (copied),
 * header sluice-format: 1, timestamp now (CreateTime). @return
 * SL_ERR_IO when a delivery already failed or the producer hit a fatal
 * error (the message says which record, topic and partition),
 * SL_ERR_TIMEOUT when the local queue stayed full for the timeout. */
sl_err_t sl_kafka_producer_send(sl_kafka_producer_t *p, uint64_t session_id, const void *value,
                                size_t len, sl_error_t *err);

/* Send a copy of another record (a dead-letter topic): key and value as
 * they are (copied; key NULL: none), partitioned by key, the record's
 * headers (a librdkafka rd_kafka_headers_t *, copied; NULL: none) plus
 * extra[2 * num_extra] (header name, text value), timestamp now. Never
 * waits: a full local queue is SL_ERR_TIMEOUT at once. @return SL_ERR_IO
 * as sl_kafka_producer_send, SL_ERR_NOMEM. */
sl_err_t sl_kafka_producer_send_copy(sl_kafka_producer_t *p, const void *key, size_t key_len,
                                     const void *value, size_t len, const void *headers,
                                     const char *const *extra, uint32_t num_extra, sl_error_t *err);

/* Serve delivery reports, waiting up to timeout_ms for one (0: do not
 * wait): the way to sleep while pacing. */
void sl_kafka_producer_poll(sl_kafka_producer_t *p, int timeout_ms);

/* Serve delivery reports until the monotonic time until_s (common/clock.h,
 * sl_clock_s) is less than a tick away: the wait between records sent at a
 * steady rate, kept at the grain of SL_KAFKA_PACE_TICK_S (the records due
 * within a tick go together). */
#define SL_KAFKA_PACE_TICK_S 0.001
void sl_kafka_producer_pace(sl_kafka_producer_t *p, double until_s);

/* Wait up to timeout_s for every record sent to be acknowledged. @return
 * SL_ERR_TIMEOUT naming how many are still out, SL_ERR_IO when any
 * delivery failed (the first failure). */
sl_err_t sl_kafka_producer_flush(sl_kafka_producer_t *p, double timeout_s, sl_error_t *err);

void sl_kafka_producer_stats(const sl_kafka_producer_t *p, sl_kafka_producer_stats_t *out);

/* Records sent and not yet acknowledged or failed. */
uint64_t sl_kafka_producer_outstanding(const sl_kafka_producer_t *p);

/* Drop what is still queued (without waiting for it) and free p; NULL is
 * fine. Flush first to keep it. */
void sl_kafka_producer_destroy(sl_kafka_producer_t *p);

#endif
