/* The chunk arithmetic of a Kafka partition (docs/DESIGN.md, "Kafka:
 * offsets are rows"), alone: no librdkafka, no consumer. The master's
 * state machine cuts partitions into chunks with it and must not see the
 * consumer (ops/check-layering keeps kafka/chunk.h out of the state's
 * files); the worker and the consumer (kafka/chunk.h includes this) use
 * the same function, so both sides find the same chunks. */
#ifndef SLUICE_KAFKA_CHUNK_BOUNDS_H
#define SLUICE_KAFKA_CHUNK_BOUNDS_H

#include <stdbool.h>
#include <stdint.h>

/* Chunk index of a partition read from start in chunks of size offsets:
 * [start + index * size, start + (index + 1) * size), cut at stop (< 0:
 * none). A function of (start, size) alone, so that a restarted master or
 * a resumed job finds the same chunks. @return false when the chunk lies
 * wholly at or past stop (no such chunk), for size 0, a negative start or
 * an index whose offsets overflow int64_t. */
static inline bool sl_kafka_chunk_bounds(int64_t start, uint32_t size, uint64_t index, int64_t stop,
                                         int64_t *from, int64_t *to)
{
    if (size == 0 || start < 0 || index > (uint64_t)(INT64_MAX - start) / size - 1) return false;
    int64_t f = start + (int64_t)(index * size), t = f + (int64_t)size;
    if (stop >= 0 && t > stop) t = stop;
    if (t <= f) return false;
    *from = f;
    *to = t;
    return true;
}

#endif
