/* A Parquet job's plan figures in the master's state (docs/PARQUET.md, "As
 * a job source"): the row groups of its dataset and those, with their rows,
 * that its range filters ruled out by their statistics when it was cut.
 * They are in the job's status as submitted, come back the same after a
 * reopen from the journal and after one from a snapshot (compaction), and
 * a job submitted without them (a table's) has 0. On the counting
 * allocator: nothing leaks. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

#define N 3

static tu_alloc_t g_ta;
static sl_wh_split_t g_splits[N];

static void init(void)
{
    tu_alloc_init(&g_ta);
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "a.parquet",
                                      .partition = "",
                                      .stripe_begin = 2 + i, /* row groups 2, 3, 4 */
                                      .stripe_end = 3 + i,
                                      .first_row = 500 + 250 * (uint64_t)i,
                                      .num_rows = 250};
}

TestSuite(master_parquet, .init = init);

static sl_master_state_t *open_state(const char *dir)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 1000, .allocator = &g_ta.base};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

static void add(sl_master_state_t *m, const char *id, uint64_t groups, uint64_t skipped,
                uint64_t rows)
{
    sl_master_state_job_spec_t s = {.job_id = id,
                                    .splits = g_splits,
                                    .num_splits = N,
                                    .epochs = 1,
                                    .parquet_row_groups = groups,
                                    .parquet_row_groups_skipped = skipped,
                                    .parquet_rows_skipped = rows};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_add(m, &s, &err), SL_OK, "%s", err.msg);
}

static void expect(sl_master_state_t *m, const char *id, uint64_t groups, uint64_t skipped,
                   uint64_t rows, const char *when)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(m, id, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.parquet_row_groups, groups, "%s: job %s: %llu row groups", when, id,
                 (unsigned long long)st.parquet_row_groups);
    cr_assert_eq(st.parquet_row_groups_skipped, skipped, "%s: job %s: %llu skipped", when, id,
                 (unsigned long long)st.parquet_row_groups_skipped);
    cr_assert_eq(st.parquet_rows_skipped, rows, "%s: job %s: %llu rows skipped", when, id,
                 (unsigned long long)st.parquet_rows_skipped);
    cr_assert_eq(st.total_rows, 750);
}

Test(master_parquet, plan_figures_survive_journal_and_snapshot)
{
    char *dir = tu_mkdtemp("master-parquet");
    sl_master_state_t *m = open_state(dir);
    add(m, "pq", 8, 5, 1250);
    add(m, "table", 0, 0, 0);
    expect(m, "pq", 8, 5, 1250, "as submitted");
    sl_error_t err = {0};
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);

    m = open_state(dir); /* the journal's JobAdded replayed */
    expect(m, "pq", 8, 5, 1250, "from the journal");
    expect(m, "table", 0, 0, 0, "from the journal");
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);

    m = open_state(dir); /* the snapshot's job */
    expect(m, "pq", 8, 5, 1250, "from the snapshot");
    expect(m, "table", 0, 0, 0, "from the snapshot");
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
    tu_rm_tree(dir);
    free(dir);
}
