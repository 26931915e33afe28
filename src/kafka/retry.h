/* When a Kafka request that failed is asked again: the answers that mean a
 * partition's leader is moving or not there yet (shared by the consumer's
 * chunk reads and the producer's topic creation). */
#ifndef SLUICE_KAFKA_RETRY_H
#define SLUICE_KAFKA_RETRY_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"

/* A partition whose leader is not known yet or is moving (a topic just
 * created, a broker restarting): the same request succeeds once the
 * metadata settles, so it is asked again until a deadline. */
static inline bool sl_kafka_leader_moving(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
           e == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
           e == RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH ||
           e == RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH;
}

/* Wait 50 ms before asking again, unless that passes the deadline. */
static inline bool sl_kafka_again_before(uint64_t deadline_ms)
{
    if (sl_clock_ms() + 50 >= deadline_ms) return false;
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    return true;
}

#endif
