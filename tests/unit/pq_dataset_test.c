/* The Parquet dataset of a job source (warehouse/pq_dataset.h) over the
 * fixture pyarrow-snappy-v1.parquet (40 rows in row groups of 16, 16, 8):
 * Hive folders and the partition filter, splits merged up to split_rows,
 * rows [from, to) of a split equal to the same rows of a whole read (a
 * todo range that starts mid-split skips the row groups before it),
 * statistics skipping counted, a first file that no longer reads passed
 * over for the columns, a mapping problem and a missing dataset. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "warehouse/pq_dataset.h"

static char *dir;
static char fixture[4096];

static void copy_to(const char *rel)
{
    char *data = tu_read_file(fixture);
    struct stat st;
    cr_assert_eq(stat(fixture, &st), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    cr_assert_eq(system(cmd), 0);
    *slash = '/';
    tu_write_file(path, data, (size_t)st.st_size);
    free(data);
}

static void setup(void)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    snprintf(fixture, sizeof fixture, "%s/tests/data/parquet/pyarrow-snappy-v1.parquet",
             root ? root : "..");
    dir = tu_mkdtemp("pq_dataset");
    copy_to("ds/ds=2026-11-01/part-0.parquet");
    copy_to("ds/ds=2026-11-02/part-0.parquet");
    copy_to("ds/ds=2026-11-02/_SUCCESS.parquet"); /* '_': not data */
}

static void teardown(void)
{
    tu_rm_tree(dir);
    free(dir);
}

TestSuite(pq_dataset, .init = setup, .fini = teardown);

typedef struct ids {
    int64_t id[256];
    uint64_t row[256];
    uint32_t n;
} ids_t;

static sl_err_t collect(void *ctx, uint64_t row, const sl_wh_row_t *r, sl_error_t *err)
{
    (void)err;
    ids_t *c = ctx;
    cr_assert_lt(c->n, 256);
    c->id[c->n] = r->sample_id;
    c->row[c->n++] = row;
    return SL_OK;
}

static sl_wh_pqds_t *open_ds(const char *rel, const char *partitions)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    sl_wh_pqds_t *ds = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_open(path, NULL, partitions, NULL, NULL, NULL, &ds, &err), SL_OK, "%s",
                 err.msg);
    return ds;
}

Test(pq_dataset, splits_partitions_and_ranges)
{
    sl_wh_pqds_t *ds = open_ds("ds", NULL);
    cr_assert_eq(sl_wh_pqds_num_files(ds), 2);
    sl_wh_splits_t *sp = NULL;
    sl_wh_pqds_plan_stats_t st;
    sl_error_t err = {0};
    /* 16 + 16 merge (32 <= 32), the 8 alone: 2 splits per file */
    cr_assert_eq(sl_wh_pqds_plan(ds, 32, NULL, 0, &sp, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.row_groups, 6);
    cr_assert_eq(st.row_groups_skipped, 0);
    cr_assert_eq(sp->count, 4);
    cr_assert_eq(sp->rows, 80);
    cr_assert_str_eq(sp->items[0].path, "ds=2026-11-01/part-0.parquet");
    cr_assert_str_eq(sp->items[0].partition, "ds=2026-11-01");
    cr_assert_eq(sp->items[0].stripe_begin, 0);
    cr_assert_eq(sp->items[0].stripe_end, 2);
    cr_assert_eq(sp->items[0].num_rows, 32);
    cr_assert_eq(sp->items[1].stripe_begin, 2);
    cr_assert_eq(sp->items[1].first_row, 32);
    cr_assert_eq(sp->items[1].num_rows, 8);
    cr_assert_str_eq(sp->items[2].path, "ds=2026-11-02/part-0.parquet");
    /* a whole split, then rows [20, 30) of it: the same rows; the second
     * file's ids are the fixture's (its id column) or file index 1 x 10^10 */
    sl_wh_pqds_reader_t *r = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    ids_t all = {0}, part = {0};
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[2], 0, 32, collect, &all, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(all.n, 32);
    for (uint32_t i = 0; i < 32; i++)
        cr_assert_eq(all.row[i], i);
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[2], 20, 30, collect, &part, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(part.n, 10);
    for (uint32_t i = 0; i < 10; i++) {
        cr_assert_eq(part.row[i], 20 + i);
        cr_assert_eq(part.id[i], all.id[20 + i]);
    }
    /* a split longer than its row groups (a file changed since the cut) */
    sl_wh_split_t longer = sp->items[1];
    longer.num_rows = 50;
    ids_t some = {0};
    cr_assert_eq(sl_wh_pqds_read(r, &longer, 0, 50, collect, &some, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "part-0.parquet row groups [2, 3): rows end at 8 of the split, "
                              "before its row 50") != NULL,
              "%s", err.msg);
    cr_assert_eq(some.n, 8);
    /* a split planned on another footer (its file replaced since the
     * plan: a lease's pin) is refused before any row, in both read paths;
     * the file's other splits still read */
    sl_wh_split_t moved = sp->items[3];
    moved.footer_checksum ^= 1;
    ids_t none = {0};
    cr_assert_eq(sl_wh_pqds_read(r, &moved, 0, moved.num_rows, collect, &none, &err),
                 SL_ERR_VERSION);
    char want[128];
    snprintf(want, sizeof want,
             "the object was replaced after the job planned its splits (its "
             "footer checksum is not the planned %016llx)",
             (unsigned long long)moved.footer_checksum);
    cr_assert(strstr(err.msg, "ds=2026-11-02/part-0.parquet: ") && strstr(err.msg, want), "%s",
              err.msg);
    cr_assert_eq(none.n, 0);
    cr_assert_eq(sl_wh_pqds_read_stripes(r, &moved, 0, moved.num_rows, 16, NULL, NULL, &err),
                 SL_ERR_VERSION);
    cr_assert(strstr(err.msg, want), "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[3], 0, 8, collect, &none, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(none.n, 8);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    /* the partition filter on the Hive keys; a row group per split */
    ds = open_ds("ds", "ds>=2026-11-02");
    cr_assert_eq(sl_wh_pqds_num_files(ds), 1);
    cr_assert_eq(sl_wh_pqds_plan(ds, 1, NULL, 0, &sp, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sp->count, 3);
    cr_assert_eq(sp->items[2].first_row, 32);
    cr_assert_str_eq(sp->items[2].partition, "ds=2026-11-02");
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
}

Test(pq_dataset, refusals)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/none", dir);
    sl_wh_pqds_t *ds = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_open(path, NULL, NULL, NULL, NULL, NULL, &ds, &err), SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "none") != NULL, "%s", err.msg);
    snprintf(path, sizeof path, "%s/ds", dir);
    cr_assert_eq(sl_wh_pqds_open(path, NULL, "ds>2027-01-01", NULL, NULL, NULL, &ds, &err),
                 SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "passes the partition filter") != NULL, "%s", err.msg);
    cr_assert_null(ds);
}

/* The first file's footer no longer reads (truncated): the columns come
 * from the next file, the plan and a read of the broken file's split name
 * it; when no file reads, the first file's error stands. */
Test(pq_dataset, an_unreadable_first_file_is_passed_over_for_the_columns)
{
    char path[4096], want[4200];
    snprintf(path, sizeof path, "%s/ds/ds=2026-11-01/part-0.parquet", dir);
    sl_wh_pqds_t *planned = open_ds("ds", NULL);
    sl_wh_splits_t *sp = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_plan(planned, 32, NULL, 0, &sp, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sp->count, 4);
    cr_assert_eq(truncate(path, 100), 0);
    sl_wh_pqds_t *ds = open_ds("ds", NULL);
    cr_assert_eq(sl_wh_pqds_num_files(ds), 2);
    cr_assert_eq(sl_wh_pqds_mapping(ds)->num_slots, sl_wh_pqds_mapping(planned)->num_slots);
    sl_wh_pqds_reader_t *r = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    ids_t got = {0};
    snprintf(want, sizeof want, "file %s: not Parquet (wrong magic", path);
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[0], 0, 32, collect, &got, &err), SL_ERR_CORRUPT);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    cr_assert_eq(got.n, 0);
    /* the other file's splits read as planned: its 40 rows */
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[2], 0, 32, collect, &got, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[3], 0, 8, collect, &got, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(got.n, 40);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_t *again = NULL;
    cr_assert_eq(sl_wh_pqds_plan(ds, 32, NULL, 0, &again, NULL, &err), SL_ERR_CORRUPT);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    cr_assert_null(again);
    sl_wh_pqds_destroy(ds);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(planned);
    /* no file reads */
    snprintf(want, sizeof want, "%s/ds/ds=2026-11-02/part-0.parquet", dir);
    cr_assert_eq(truncate(want, 0), 0);
    snprintf(want, sizeof want, "file %s: ", path);
    snprintf(path, sizeof path, "%s/ds", dir);
    cr_assert_eq(sl_wh_pqds_open(path, NULL, NULL, NULL, NULL, NULL, &ds, &err), SL_ERR_CORRUPT);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    cr_assert_null(ds);
}
