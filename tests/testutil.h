/* Helpers shared by the Criterion tests: a seeded PRNG whose seed is printed
 * and can be given back (SLUICE_TEST_SEED), and the timeout multiplier. */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <stdint.h>

/* The seed of this test run: SLUICE_TEST_SEED when set, otherwise drawn from
 * the clock. Printed to stderr with the test's name so a failure can be
 * replayed. */
uint64_t tu_seed(const char *test_name);

/* splitmix64: small, fast, good enough for test data. */
static inline uint64_t tu_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n); n > 0. */
static inline uint64_t tu_below(uint64_t *state, uint64_t n)
{
    return tu_next(state) % n;
}

/* SLUICE_TIMEOUT_SCALE (default 1) times seconds. */
double tu_timeout(double seconds);

#endif
