/* The monotonic clock and timed-wait helpers (clock.h). */
#include "common/clock.h"

#define NS_PER_S 1000000000ull

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts); /* cannot fail for these clocks on Linux */
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t sl_clock_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

uint64_t sl_clock_ms(void)
{
    return sl_clock_ns() / 1000000u;
}

double sl_clock_s(void)
{
    return (double)sl_clock_ns() * 1e-9;
}

uint64_t sl_clock_thread_cpu_ns(void)
{
    return read_ns(CLOCK_THREAD_CPUTIME_ID);
}

int sl_clock_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0) return rc;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

struct timespec sl_clock_deadline_ns(uint64_t timeout_ns)
{
    uint64_t now = sl_clock_ns();
    /* a deadline past what time_t holds is as good as never */
    uint64_t at = timeout_ns > UINT64_MAX / 2 - now ? UINT64_MAX / 2 : now + timeout_ns;
    return (struct timespec){.tv_sec = (time_t)(at / NS_PER_S), .tv_nsec = (long)(at % NS_PER_S)};
}

struct timespec sl_clock_deadline_ms(uint64_t timeout_ms)
{
    return sl_clock_deadline_ns(timeout_ms > UINT64_MAX / 1000000u ? UINT64_MAX
                                                                   : timeout_ms * 1000000u);
}

int sl_clock_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t timeout_ms)
{
    struct timespec ts = sl_clock_deadline_ms(timeout_ms);
    return pthread_cond_timedwait(cv, mu, &ts);
}
