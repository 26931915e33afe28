/* Helpers for the benchmarks: a monotonic clock, the memcpy baseline, and
 * best-of-N timing. Benchmarks print figures; they never pass or fail. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

double bench_now(void); /* seconds, CLOCK_MONOTONIC */

/* Best (smallest) seconds of one memcpy of n bytes between two buffers that
 * were touched beforehand, over reps repetitions. */
double bench_memcpy_seconds(size_t n, int reps);

/* Keeps the optimiser from discarding a result. */
void bench_consume(const void *p, size_t n);

/* Process CPU seconds (user + system), for per-core figures. */
double bench_cpu_seconds(void);

#endif
