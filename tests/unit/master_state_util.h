/* What master_state_test.c and master_state_property_test.c share: the
 * counting allocator every test runs on, splits and job specs, a master in
 * memory, commit and lease helpers, a state directory of a test's own. */
#ifndef SLUICE_TESTS_MASTER_STATE_UTIL_H
#define SLUICE_TESTS_MASTER_STATE_UTIL_H

/* Every helper here: a test file uses only some. */
#define MS_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_life.h"
#include "master_store_tu.h"
#include "testutil.h"

#define MAX_SPLITS 64

/* Every master of these tests allocates here. */
MS_FN tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

MS_FN void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state, .init = init_alloc);

MS_FN sl_wh_split_t g_splits[MAX_SPLITS];
MS_FN char g_paths[4][32];

/* n splits over 4 files; split i has rows[i] rows (or 100 + 10 i). */
MS_FN void make_splits(uint32_t n, const uint64_t *rows)
{
    for (int f = 0; f < 4; f++)
        snprintf(g_paths[f], sizeof g_paths[f], "ds=2026-01-01/part-%d.slc", f);
    uint64_t first[4] = {0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = i % 4;
        uint64_t r = rows != NULL ? rows[i] : 100 + 10 * i;
        g_splits[i] = (sl_wh_split_t){.path = g_paths[f],
                                      .partition = "ds=2026-01-01",
                                      .stripe_begin = i / 4,
                                      .stripe_end = i / 4 + 1,
                                      .first_row = first[f],
                                      .num_rows = r};
        first[f] += r;
    }
}

MS_FN sl_master_state_job_spec_t spec_of(const char *id, uint32_t n, uint32_t epochs, bool shuffle,
                                         uint64_t seed)
{
    return (sl_master_state_job_spec_t){.job_id = id,
                                        .splits = g_splits,
                                        .num_splits = n,
                                        .epochs = epochs,
                                        .seed = seed,
                                        .shuffle = shuffle};
}

MS_FN sl_master_state_t *mem_master(uint64_t timeout)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = timeout, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    return m;
}

MS_FN void assert_ranges(sl_master_state_t *m, const char *job, uint32_t split, const char *want)
{
    const sl_dpp_row_range_t *r;
    uint32_t n;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_committed(m, job, split, &r, &n, &err), SL_OK, "%s", err.msg);
    char got[512] = "";
    for (uint32_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "[%llu,%llu)",
                 (unsigned long long)r[i].from_row, (unsigned long long)r[i].to_row);
    cr_assert_str_eq(got, want);
}

/* Commit rows of split read under the lease of generation gen; *why (may
 * be NULL) gets the refusal's message. */
MS_FN sl_master_commit_result_t commit_why(sl_master_state_t *m, uint32_t epoch, uint32_t split,
                                           uint64_t gen, uint64_t from, uint64_t to,
                                           const char *client, uint64_t nonce, char *why)
{
    sl_error_t err = {0};
    sl_master_commit_result_t res =
        sl_master_state_commit(m, "j", epoch, split, gen, from, to, client, nonce, &err);
    cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
    if (why != NULL) snprintf(why, SL_ERROR_MSG_MAX, "%s", err.msg);
    return res;
}

MS_FN sl_master_commit_result_t commit(sl_master_state_t *m, uint32_t epoch, uint32_t split,
                                       uint64_t gen, uint64_t from, uint64_t to, const char *client,
                                       uint64_t nonce)
{
    return commit_why(m, epoch, split, gen, from, to, client, nonce, NULL);
}

/* Lease every pending split of job "j" to worker "w": gen[split] gets the
 * generation its batches commit under. */
MS_FN void lease_all(sl_master_state_t *m, uint32_t n, uint64_t *gen)
{
    sl_error_t err = {0};
    for (uint32_t i = 0; i < n; i++) {
        sl_master_lease_t l;
        cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
        gen[l.split] = l.generation;
    }
}

MS_FN char *tmp_state_dir(void)
{
    char *d = strdup("/tmp/sluice-master-XXXXXX");
    cr_assert(mkdtemp(d) != NULL);
    return d;
}

MS_FN void rm_state_dir(char *d)
{
    const char *names[] = {"journal", "snapshot", "tmp"};
    char p[256];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        unlink(p);
    }
    rmdir(d);
    free(d);
}

/* A simulated worker: at most one lease; it cuts the lease's todo into
 * batches (some entirely filtered: no sample, reported as empty) and hands
 * them to the clients' queue; when all are handed out and answered (a
 * client acknowledges a batch to its worker after the master answered its
 * commit) it sends SPLIT_READ. Heartbeats and registrations name its
 * lease. */
MS_FN char *tmp_state_dir(void);
MS_FN void rm_state_dir(char *d);

MS_FN char *dump_of(const sl_master_state_t *m)
{
    return ml_dump(m, ALLOC);
}

/* The worker's list is authoritative: a heartbeat renews only the leases
 * it names (a grant it never received expires one timeout after the
 * grant); a registration also revokes at once every lease of that id it
 * does not name (journaled: a reopened master agrees); after a restart a
 * lease found expires at restart + timeout unless named. */

#endif
