/* Test helpers: seeds that are printed and replayable, scaled timeouts. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t tu_seed(const char *test_name)
{
    const char *env = getenv("SLUICE_TEST_SEED");
    uint64_t seed;
    if (env != NULL && *env != '\0') {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    fprintf(stderr, "%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", test_name,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

double tu_timeout(double seconds)
{
    const char *env = getenv("SLUICE_TIMEOUT_SCALE");
    double scale = env != NULL ? atof(env) : 1.0;
    if (scale <= 0) scale = 1.0;
    return seconds * scale;
}
