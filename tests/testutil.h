/* Helpers shared by the Criterion tests: a seeded PRNG whose seed is printed
 * and can be given back (SLUICE_TEST_SEED), the timeout multiplier, and
 * scratch directories and files. */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <stddef.h>
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

/* A new empty directory /tmp/sluice-<tag>-XXXXXX; caller frees the path.
 * Aborts the test when it cannot be made. */
char *tu_mkdtemp(const char *tag);
/* Remove dir and everything below it (symbolic links are not followed). */
void tu_rm_tree(const char *dir);
/* "dir/name", caller frees. */
char *tu_path(const char *dir, const char *name);
/* Write len bytes to path (created or truncated); aborts the test when it
 * cannot. */
void tu_write_file(const char *path, const void *data, size_t len);
/* The whole of a file, NUL-terminated (caller frees); aborts the test when
 * it cannot be read. */
char *tu_read_file(const char *path);

/* Run argv (argv[0] a path) in dir with stdin /dev/null, within
 * tu_timeout(timeout_s) (then it is killed and the test aborts). *out and
 * *err get everything it wrote to stdout and stderr (caller frees).
 * @return its exit code. */
int tu_run(const char *dir, char *const argv[], double timeout_s, char **out, char **err);

#endif
