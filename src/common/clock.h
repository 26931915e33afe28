/* The one clock of sluice, as Redis keeps monotonic.c: CLOCK_MONOTONIC for
 * every interval, timeout, deadline and rate (never the wall clock, which
 * steps), plus the helpers a timed condition-variable wait needs. The
 * wall clock is only for what a person reads (timestamps in names). */
#ifndef SLUICE_COMMON_CLOCK_H
#define SLUICE_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds, milliseconds and seconds since an
 * unspecified start (boot). Never goes backwards. */
uint64_t sl_clock_ns(void);
uint64_t sl_clock_ms(void);
double sl_clock_s(void);

/* CPU time of the calling thread in nanoseconds (busy fractions). */
uint64_t sl_clock_thread_cpu_ns(void);

/* Initialise cv to time its waits on the monotonic clock, so that
 * sl_clock_deadline's deadlines hold. @return pthread_cond_init's result. */
int sl_clock_cond_init(pthread_cond_t *cv);

/* The monotonic deadline timeout_ns from now, for pthread_cond_timedwait on
 * a condition variable made by sl_clock_cond_init. */
struct timespec sl_clock_deadline_ns(uint64_t timeout_ns);
struct timespec sl_clock_deadline_ms(uint64_t timeout_ms);

/* Wait on cv (made by sl_clock_cond_init, mu held) for at most timeout_ms.
 * @return pthread_cond_timedwait's result (ETIMEDOUT when the time ran
 * out; a wake-up may be spurious, as always). */
int sl_clock_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t timeout_ms);

#endif
