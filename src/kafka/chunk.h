/* Reading partition chunks (docs/DESIGN.md, "Kafka: offsets are rows"): a
 * consumer that never joins its group, the metadata a master needs to cut
 * partitions into chunks (partitions, watermarks, offsets by time), the
 * chunk plan, and reading one offset range of one partition to its end
 * through gaps and bad records, in stripes of contiguous offsets cut at a
 * row count or after a linger time.
 *
 * The consumer is configured for exactly once and these are not
 * overridable: enable.auto.commit=false and enable.auto.offset.store=false
 * (the master's commits are the truth; a group's offsets are for lag tools
 * only), auto.offset.reset=error (an offset that retention deleted is an
 * error, never a silent jump), isolation.level=read_committed (aborted
 * transactional records are gaps), enable.partition.eof=true (the end of a
 * range at the log's end is seen through the EOF position). group.id is
 * set because librdkafka's assign() needs one; subscribe() is never
 * called, so no rebalance can move a partition.
 *
 * One thread at a time per consumer. */
#ifndef SLUICE_KAFKA_CHUNK_H
#define SLUICE_KAFKA_CHUNK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kafka/chunk_bounds.h"
#include "kafka/record_decode.h"
#include "kafka/record_json.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_kafka_consumer_opts {
    const char *brokers;      /* bootstrap servers; required */
    const char *group_id;     /* required by assign(), never joined; NULL: "sluice" */
    const char *const *props; /* [2 * num_props] librdkafka name, value: passed through */
    uint32_t num_props;
    const sl_allocator_t *allocator; /* NULL: default */
} sl_kafka_consumer_opts_t;

typedef struct sl_kafka_consumer sl_kafka_consumer_t;

/* @return SL_ERR_INVALID naming a property librdkafka refuses (or one
 * sluice sets itself), SL_ERR_NOMEM. Caller owns *out. */
sl_err_t sl_kafka_consumer_new(const sl_kafka_consumer_opts_t *opts, sl_kafka_consumer_t **out,
                               sl_error_t *err);

/* Closes without committing anything; c may be NULL. */
void sl_kafka_consumer_destroy(sl_kafka_consumer_t *c);

/* ---- metadata ---- */

/* The partition count of topic. @return SL_ERR_NOT_FOUND (no such topic),
 * SL_ERR_TIMEOUT, SL_ERR_IO. */
sl_err_t sl_kafka_partitions(sl_kafka_consumer_t *c, const char *topic, int timeout_ms,
                             int32_t *count, sl_error_t *err);

/* The partition's low (first offset retention kept) and high (next offset
 * to be written) watermarks, asked of the broker. */
sl_err_t sl_kafka_watermarks(sl_kafka_consumer_t *c, const char *topic, int32_t partition,
                             int timeout_ms, int64_t *low, int64_t *high, sl_error_t *err);

/* The first offset whose CreateTime is at or after ms (the high watermark
 * when there is none, read before the lookup: a record appended meanwhile
 * is never skipped). */
sl_err_t sl_kafka_offset_for_time(sl_kafka_consumer_t *c, const char *topic, int32_t partition,
                                  int64_t ms, int timeout_ms, int64_t *offset, sl_error_t *err);

/* An offset of a partition (a consumer-group commit). */
typedef struct sl_kafka_offset {
    const char *topic;
    int32_t partition;
    int64_t offset;
} sl_kafka_offset_t;

/* Commit offsets[0..count) to the consumer's group (group.id) without
 * joining it: for lag tools only (sluice never reads them back). Waits at
 * most timeout_ms. @return SL_ERR_TIMEOUT, SL_ERR_IO (e.g. NOT_COORDINATOR
 * right after a broker start: try again later). */
sl_err_t sl_kafka_commit_offsets(sl_kafka_consumer_t *c, const sl_kafka_offset_t *offsets,
                                 uint32_t count, int timeout_ms, sl_error_t *err);

/* ---- the chunk plan ---- */

/* Where a plan starts or stops reading a partition (values as the job
 * spec's sl_pipeline_kafka_at_t). */
typedef enum sl_kafka_at {
    SL_KAFKA_AT_NONE = 0,     /* stop only: never (a stream) */
    SL_KAFKA_AT_EARLIEST = 1, /* the low watermark */
    SL_KAFKA_AT_LATEST = 2,   /* the high watermark */
    SL_KAFKA_AT_TIMESTAMP = 3 /* sl_kafka_offset_for_time */
} sl_kafka_at_t;

/* One partition of a plan: read offsets [start, stop) (stop < 0: none). */
typedef struct sl_kafka_partition_plan {
    const char *topic; /* borrowed from the caller's topics */
    int32_t partition;
    int64_t start, stop;
} sl_kafka_partition_plan_t;

/* Every partition of topics[0..num_topics) (topics in order, partitions
 * ascending) with its start and stop offsets, each metadata request
 * bounded by timeout_ms. *failed_topic (may be NULL) gets the index of the
 * topic a failure is about (SL_ERR_NOT_FOUND: no such topic;
 * SL_ERR_TIMEOUT, SL_ERR_IO: the brokers). SL_ERR_INVALID past 65536
 * partitions. Caller owns *out ([*count]), free with sl_free(a, *out,
 * *count * sizeof **out). */
sl_err_t sl_kafka_plan_partitions(sl_kafka_consumer_t *c, const char *const *topics,
                                  uint32_t num_topics, uint8_t start_at, int64_t start_ms,
                                  uint8_t stop_at, int64_t stop_ms, int timeout_ms,
                                  const sl_allocator_t *a, sl_kafka_partition_plan_t **out,
                                  uint32_t *count, uint32_t *failed_topic, sl_error_t *err);

/* sl_kafka_chunk_bounds: kafka/chunk_bounds.h (a pure header the master's
 * state includes without the consumer). */

/* ---- reading a range ---- */

typedef struct sl_kafka_read_stats {
    uint64_t records; /* consumed inside the range */
    uint64_t bad;     /* of those, bad (counted, skipped; their offsets read) */
    uint64_t stripes; /* handed to the callback with rows */
    uint64_t empty;   /* ... without rows (gaps, bad records only) */
    uint64_t pauses;  /* times the partition was paused (hold) */
    /* times the fetcher was woken after the read drained a queue that had
     * reached librdkafka's thresholds (chunk.c, wake_fetcher) */
    uint64_t wakes;
    /* The offset the read covered up to: the stripes tile [from, end).
     * o->to, or less when yield ended the read at the partition's end. */
    int64_t end;
} sl_kafka_read_stats_t;

/* What sl_kafka_read_range hands on: the stripe of rows (possibly none)
 * covering offsets [first, end) of the partition, the gaps and bad
 * records among them included. Consecutive calls tile [from, to). A
 * non-OK return stops the read with that error. */
typedef sl_err_t (*sl_kafka_stripe_fn)(void *ctx, const sl_kafka_stripe_t *stripe, int64_t first,
                                       int64_t end, sl_error_t *err);

/* A bad record as it came (sl_kafka_read_opts_t.bad_record; everything
 * borrowed for the call): what a dead-letter topic gets. */
typedef struct sl_kafka_bad_record {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const void *key; /* NULL: none */
    size_t key_len;
    const void *value; /* NULL: none */
    size_t value_len;
    const void *headers; /* the record's rd_kafka_headers_t; NULL: none */
    const char *why;     /* why it is bad (the decoder's message) */
} sl_kafka_bad_record_t;

typedef struct sl_kafka_read_opts {
    const char *topic;
    int32_t partition;
    int64_t from, to;      /* the offsets [from, to) to read, from < to */
    uint32_t batch_rows;   /* a stripe holds at most this many rows (> 0) */
    uint32_t linger_ms;    /* ... and is cut this long after its first record */
    sl_kafka_rows_t *rows; /* the decoder (its schema is the job's) */
    /* JSON records: each value is decoded by it (record_json.h) into rows;
     * NULL: the values are Samples (record_decode.h). */
    sl_kafka_json_t *json;
    sl_kafka_stripe_fn stripe;
    void *ctx;
    /* Checked between polls: set, the read returns SL_ERR_CLOSED (may be NULL). */
    const atomic_bool *cancel;
    /* Called with each bad record's reason (may be NULL). */
    void (*bad)(void *ctx, const char *why);
    /* Back-pressure (may be NULL): asked between polls and before each
     * stripe is handed on (a callback that may block), with whether the
     * partition is paused now; true: pause it (rd_kafka_pause_partitions:
     * librdkafka stops fetching it, nothing more is queued), false:
     * resume it. The read resumes the partition before it returns. */
    bool (*hold)(void *ctx, bool paused);
    /* Called with each bad record as it came, after bad (may be NULL). */
    void (*bad_record)(void *ctx, const sl_kafka_bad_record_t *rec);
    /* A range above the partition's end (a stream's head) waits for
     * records; yield (may be NULL) is asked between polls while the
     * consumer is at the partition's end (the broker reported the end at
     * the position, no record came since) and no row is held: true ends
     * the read there, SL_OK with stats->end the position (every offset
     * below it consumed or a gap, the stripes tiling [from, end)). */
    bool (*yield)(void *ctx);
} sl_kafka_read_opts_t;

/* Assign the partition at from, consume until the consumer's position
 * reaches to (a record at or past to, or the partition's end reported at
 * or past to: the offsets between were gaps), handing stripes on. A read
 * that ends well leaves the partition assigned, with what it took from
 * librdkafka past its end kept aside: the next read, if it is of the same
 * partition from that end (a stream's next chunk), goes on without a new
 * fetch; any other read assigns its own partition (a failed read
 * unassigns, and one that yield ended is assigned anew: librdkafka
 * reports the partition's end once per fetch). The range may lie above the partition's end: the
 * read waits for records (a stream), until cancelled or yield ends it at the partition's end.
 * @return SL_OK once [from, to) is covered, or [from, stats->end) when yield ended it;
 * SL_ERR_NOT_FOUND when from is below what retention kept (auto.offset.reset=error), naming topic,
 * partition and offset; SL_ERR_CLOSED when cancelled; the callback's error. */
sl_err_t sl_kafka_read_range(sl_kafka_consumer_t *c, const sl_kafka_read_opts_t *o,
                             sl_kafka_read_stats_t *stats, sl_error_t *err);

#endif
