/* Ages of records (now minus a record's Kafka CreateTime, in ms) in a
 * histogram of fixed buckets, shared by the worker (the age when it read a
 * record: sluice_worker_kafka_record_age_seconds) and the trainer client
 * (the freshness when sl_trainer_next hands a sample over, whose public
 * bounds in include/sluice/trainer.h are these). The wall clock, not the
 * monotonic one: a CreateTime is wall-clock time of another machine.
 *
 * Bucket i counts ages of at most SL_AGE_BOUNDS_MS[i] ms (and more than the
 * bound before it); the last bucket counts the rest. Buckets are not
 * cumulative. Adding is lock-free (atomics): any thread, any time. */
#ifndef SLUICE_COMMON_AGE_H
#define SLUICE_COMMON_AGE_H

#include <stdatomic.h>
#include <stdint.h>

#define SL_AGE_BUCKETS 14
/* The bounds as an initializer, for a public copy of them (trainer.h). */
#define SL_AGE_BOUNDS_MS_INIT                                                                      \
    {                                                                                              \
        5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000                        \
    }
extern const uint64_t SL_AGE_BOUNDS_MS[SL_AGE_BUCKETS - 1];

typedef struct sl_age_hist {
    _Atomic uint64_t buckets[SL_AGE_BUCKETS];
    _Atomic uint64_t count, sum_ms;
} sl_age_hist_t;

/* A snapshot of a histogram. */
typedef struct sl_age_counts {
    uint64_t buckets[SL_AGE_BUCKETS]; /* not cumulative */
    uint64_t count, sum_ms;
} sl_age_counts_t;

/* The wall clock in ms since the Unix epoch (CLOCK_REALTIME). */
int64_t sl_age_now_ms(void);

/* The bucket of an age of ms milliseconds. */
uint32_t sl_age_bucket(uint64_t ms);

/* Add the ages now_ms - times_ms[i] of n records (a time < 0: unknown,
 * skipped; a time after now counts as age 0). */
void sl_age_hist_add(sl_age_hist_t *h, const int64_t *times_ms, uint32_t n, int64_t now_ms);

void sl_age_hist_read(const sl_age_hist_t *h, sl_age_counts_t *out);

#endif
