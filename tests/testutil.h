/* Helpers shared by the Criterion tests: a seeded PRNG whose seed is printed
 * and can be given back (SLUICE_TEST_SEED), the timeout multiplier,
 * scratch directories and files, and a counting and failing allocator. */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"

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

/* The sluice program under test: SLUICE_BINARY, which ctest sets. Aborts
 * the test, saying so, when it is not set. */
const char *tu_binary(void);

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

/* A self-signed certificate (ECDSA P-256, valid from an hour ago for two
 * hours, a CA: it is its own authority) for 127.0.0.1 with common name cn,
 * and its key, written as PEM to cert_path and key_path (either may be
 * NULL). Aborts the test when GnuTLS fails. */
void tu_make_cert(const char *cert_path, const char *key_path, const char *cn);

/* Run argv (argv[0] a path) in dir with stdin /dev/null, within
 * tu_timeout(timeout_s) (then it is killed and the test aborts). *out and
 * *err get everything it wrote to stdout and stderr (caller frees).
 * @return its exit code. */
int tu_run(const char *dir, char *const argv[], double timeout_s, char **out, char **err);

/* ---- a counting and failing allocator ----------------------------------------------
 *
 * Over the default allocator: counts live blocks and bytes, checks every
 * free (a block it handed out, freed once, with the size it was asked
 * for: sl_allocator_t's contract, which the default allocator does not
 * check), and fails allocations on demand, so a test can walk every
 * failure path of an operation:
 *
 *   tu_alloc_t ta;
 *   tu_alloc_init(&ta);
 *   for (uint64_t k = 1;; k++) {
 *       tu_alloc_fail_at(&ta, k, false);      // the k-th allocation fails
 *       sl_err_t rc = op(&ta.base, ...);
 *       if (tu_alloc_failures(&ta) == 0) break; // op made fewer than k
 *       ... rc is SL_ERR_NOMEM with a message, state unchanged ...
 *       tu_alloc_assert_clean(&ta);           // nothing leaked
 *   }
 *
 * Thread-safe (the master's threads allocate too). */
typedef struct tu_alloc {
    sl_allocator_t base; /* pass &ta.base wherever an allocator goes */
    pthread_mutex_t mu;
    uint64_t calls;    /* allocations asked for since the last tu_alloc_fail_at */
    uint64_t fail_at;  /* fail allocation number fail_at (1: the first); 0: none */
    bool fail_after;   /* and every one after it */
    uint64_t failures; /* allocations failed since the last tu_alloc_fail_at */
    uint64_t live, live_bytes, peak_bytes, total;
    uint64_t bad_frees; /* frees of foreign blocks or with a wrong size */
    char first_bad[160];
} tu_alloc_t;

void tu_alloc_init(tu_alloc_t *ta);

/* From now on the k-th allocation fails (k >= 1; 0: none), and with
 * and_after every later one too; the counts of calls and failures restart. */
void tu_alloc_fail_at(tu_alloc_t *ta, uint64_t k, bool and_after);

/* Allocations asked for, and failed, since the last tu_alloc_fail_at. */
uint64_t tu_alloc_calls(tu_alloc_t *ta);
uint64_t tu_alloc_failures(tu_alloc_t *ta);

/* @return whether no block is live and every free was right; otherwise
 * why goes to why (cap bytes). */
bool tu_alloc_clean(tu_alloc_t *ta, char *why, size_t cap);

/* Fail the test unless tu_alloc_clean (in test code, with Criterion). */
#define tu_alloc_assert_clean(ta)                                                                  \
    do {                                                                                           \
        char tu_why_[256];                                                                         \
        cr_assert(tu_alloc_clean((ta), tu_why_, sizeof tu_why_), "%s", tu_why_);                   \
    } while (0)

#endif
