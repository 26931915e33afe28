/* Benchmark helpers: clock, memcpy baseline, sink. */
#include "bench_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile unsigned char sink;

void bench_consume(const void *p, size_t n)
{
    if (n > 0) sink ^= ((const unsigned char *)p)[n / 2];
}

double bench_memcpy_seconds(size_t n, int reps)
{
    unsigned char *src = aligned_alloc(64, (n + 63) & ~(size_t)63);
    unsigned char *dst = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 0x5a, n);
    memset(dst, 0, n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        memcpy(dst, src, n);
        double t = bench_now() - t0;
        bench_consume(dst, n);
        if (t < best) best = t;
    }
    free(src);
    free(dst);
    return best;
}
