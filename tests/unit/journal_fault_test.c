/* Storage faults under the master's journal (libfiu points of journal.c:
 * sluice/journal/write, sluice/journal/fdatasync, sluice/journal/rename):
 * a sync that fails says so naming the file and the errno, breaks the
 * journal (every later sync fails: nothing more may be promised), and a
 * master reopened once the disk is well replays exactly what reached the
 * file. A commit whose sync failed was never answered, so its client
 * retries it: a record that reached the file answers the retry COMMITTED
 * (its nonce is remembered), one that did not is committed by the retry,
 * once either way (checked by the rows over two epochs). A torn write at
 * every byte of the last record keeps every earlier record. */
/* libfiu's real calls, not fiu.h's no-op stand-ins */
#define FIU_ENABLE 1
#include <criterion/criterion.h>
#include <errno.h>
#include <fiu-control.h>
#include <fiu.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

#define N 4
#define ROWS 100

static sl_wh_split_t g_splits[N];

static void setup(void)
{
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "ds=1/part-0.slc",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = ROWS * i,
                                      .num_rows = ROWS};
}

TestSuite(journal_fault, .init = setup);

/* libfiu's tables, before any fiu_enable (in the test's own process). */
static void fiu_ready(void)
{
    cr_assert_eq(fiu_init(0), 0);
}

static sl_master_state_t *open_dir(const char *dir)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 60000};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

static char *dump(const sl_master_state_t *m)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(NULL, d, len + 1);
    return copy;
}

/* Rows committed of (epoch, split), as the trainers saw them answered. */
static int g_delivered[2][N][ROWS];

/* Commit rows [from, to) of split under its live lease (leased to w when
 * not leased), for client c with nonce; count the rows when answered
 * COMMITTED and the answer was allowed to leave (answered). */
static sl_master_commit_result_t commit(sl_master_state_t *m, uint32_t epoch, uint32_t split,
                                        uint64_t from, uint64_t to, uint64_t nonce, bool answered)
{
    sl_error_t err = {0};
    sl_master_lease_t l;
    if (!sl_master_state_lease_live(m, "j", epoch, split, 0, NULL)) {
        sl_err_t rc = sl_master_state_lease_split(m, "j", split, "w", 1, &l, &err);
        cr_assert(rc == SL_OK || rc == SL_ERR_AGAIN, "%s", err.msg);
    }
    /* the generation of the split's live lease, from the dump */
    char *d = dump(m);
    char key[32];
    snprintf(key, sizeof key, "\n %u ", split);
    const char *p = strstr(d, key);
    cr_assert(p != NULL);
    unsigned long long gen;
    char st;
    cr_assert_eq(sscanf(p + strlen(key), "%c gen %llu", &st, &gen), 2);
    free(d);
    sl_master_commit_result_t res =
        sl_master_state_commit(m, "j", epoch, split, gen, from, to, "c", nonce, &err);
    cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
    if (answered && res == SL_MASTER_COMMITTED)
        for (uint64_t r = from; r < to; r++)
            g_delivered[epoch][split][r]++;
    return res;
}

static sl_master_state_t *with_job(char **dir)
{
    *dir = tu_mkdtemp("journalfault");
    sl_master_state_t *m = open_dir(*dir);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 2};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    memset(g_delivered, 0, sizeof g_delivered);
    return m;
}

/* Every row of both epochs delivered exactly once. */
static void assert_exactly_once(void)
{
    for (int e = 0; e < 2; e++)
        for (int s = 0; s < N; s++)
            for (int r = 0; r < ROWS; r++)
                cr_assert_eq(g_delivered[e][s][r], 1, "epoch %d split %d row %d delivered %d times",
                             e, s, r, g_delivered[e][s][r]);
}

/* The rest of the job, commit by commit, each synced before it counts. */
static void finish(sl_master_state_t *m, uint64_t *nonce)
{
    sl_error_t err = {0};
    for (uint32_t e = 0; e < 2; e++) {
        sl_master_state_job_status_t st;
        cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
        if (st.epoch > e) continue;
        for (uint32_t s = 0; s < N; s++)
            for (uint64_t from = 0; from < ROWS; from += 25) {
                sl_master_commit_result_t res = commit(m, e, s, from, from + 25, ++*nonce, false);
                cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
                if (res == SL_MASTER_COMMITTED)
                    for (uint64_t r = from; r < from + 25; r++)
                        g_delivered[e][s][r]++;
            }
    }
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert(st.finished, "epoch %u", st.epoch);
}

/* A sync whose fdatasync (or write, with ENOSPC) fails: the error names
 * the file and the errno, later syncs fail too, the answer never leaves;
 * reopened, the master has what reached the file, and the client's retry
 * of the unanswered commit lands once. */
static void fault_then_recover(const char *point, int code, const char *says, bool reached)
{
    fiu_ready();
    char *dir;
    sl_master_state_t *m = with_job(&dir);
    sl_error_t err = {0};
    uint64_t nonce = 100;
    cr_assert_eq(commit(m, 0, 0, 0, 25, ++nonce, false), SL_MASTER_COMMITTED);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    for (int r = 0; r < 25; r++)
        g_delivered[0][0][r]++;
    /* the faulty sync */
    uint64_t lost = ++nonce;
    cr_assert_eq(commit(m, 0, 0, 25, 50, lost, false), SL_MASTER_COMMITTED);
    cr_assert_eq(fiu_enable(point, 1, (void *)(intptr_t)code, 0), 0);
    cr_assert_eq(ms_sync(m, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "/journal") != NULL && strstr(err.msg, says) != NULL, "%s", err.msg);
    cr_assert_eq(fiu_disable(point), 0);
    /* nothing more is promised, even with the disk well again */
    commit(m, 0, 1, 0, 25, ++nonce, false);
    cr_assert_eq(ms_sync(m, &err), SL_ERR_IO);
    ms_destroy(m);
    /* a new run replays the file */
    m = open_dir(dir);
    char *back = dump(m);
    if (reached) {
        /* the write reached the file before its fdatasync failed */
        cr_assert(strstr(back, "[0,50)") != NULL, "%s", back);
    } else {
        cr_assert(strstr(back, "[0,25)") != NULL && strstr(back, "[0,50)") == NULL, "%s", back);
    }
    free(back);
    /* the client retries its unanswered commit (same nonce): committed
     * once, whether the record reached the file or not */
    sl_master_commit_result_t res = commit(m, 0, 0, 25, 50, lost, true);
    cr_assert_eq(res, SL_MASTER_COMMITTED);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    finish(m, &nonce);
    assert_exactly_once();
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

Test(journal_fault, fdatasync_eio_breaks_the_journal_and_replay_has_the_written_record)
{
    fault_then_recover("sluice/journal/fdatasync", EIO, "Input/output error", true);
}

Test(journal_fault, write_enospc_breaks_the_journal_and_replay_lacks_the_record)
{
    fault_then_recover("sluice/journal/write", ENOSPC, "No space left on device", false);
}

Test(journal_fault, a_failed_compaction_rename_leaves_the_journal_whole)
{
    fiu_ready();
    char *dir = tu_mkdtemp("journalfault");
    sl_master_state_opts_t o = {.lease_timeout_ms = 60000};
    sl_master_store_opts_t so = {.compact_bytes = 1};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open_with(dir, &so, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 2};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    memset(g_delivered, 0, sizeof g_delivered);
    cr_assert_eq(commit(m, 0, 2, 0, 30, 7, false), SL_MASTER_COMMITTED);
    char *want = dump(m);
    /* the journal is past compact_bytes: the sync compacts, and the
     * snapshot cannot be put in place */
    cr_assert_eq(fiu_enable("sluice/journal/rename", 1, (void *)(intptr_t)EIO, 0), 0);
    cr_assert_eq(ms_sync(m, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "rename") != NULL, "%s", err.msg);
    cr_assert_eq(fiu_disable("sluice/journal/rename"), 0);
    ms_destroy(m);
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    char *got = dump(m);
    /* the journal alone holds every record written before the snapshot */
    cr_assert(strstr(got, "[0,30)") != NULL, "%s", got);
    free(want);
    free(got);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

/* A torn write of the last record, at each of its bytes: the tail is cut
 * with a warning, every earlier record is kept. */
typedef struct offsets {
    uint64_t last; /* offset of the last record */
} offsets;

static sl_err_t note(void *ctx, const uint8_t *payload, size_t len, uint64_t off, sl_error_t *err)
{
    (void)payload, (void)len, (void)err;
    ((offsets *)ctx)->last = off;
    return SL_OK;
}

Test(journal_fault, a_torn_last_record_at_every_byte_keeps_every_earlier_record)
{
    char *dir;
    sl_master_state_t *m = with_job(&dir);
    sl_error_t err = {0};
    cr_assert_eq(commit(m, 0, 1, 0, 40, 1, false), SL_MASTER_COMMITTED);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *before = dump(m);
    cr_assert_eq(commit(m, 0, 1, 40, 60, 2, false), SL_MASTER_COMMITTED);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    char jp[600];
    snprintf(jp, sizeof jp, "%s/journal", dir);
    FILE *f = fopen(jp, "rb");
    cr_assert(f != NULL);
    uint8_t *buf = malloc(1 << 20);
    size_t len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    offsets o = {0};
    sl_master_journal_scan_t scan;
    cr_assert_eq(sl_master_journal_scan(buf, len, "journal", 0, note, &o, &scan, &err), SL_OK);
    cr_assert_eq(scan.valid_bytes, len);
    cr_assert_gt(len, o.last);
    for (uint64_t k = o.last; k < len; k++) {
        f = fopen(jp, "wb");
        cr_assert_eq(fwrite(buf, 1, k, f), k);
        fclose(f);
        sl_master_state_opts_t so = {.lease_timeout_ms = 60000};
        sl_master_journal_open_info_t info;
        cr_assert_eq(ms_open(dir, &so, 0, &m, &info, &err), SL_OK, "byte %llu: %s",
                     (unsigned long long)k, err.msg);
        cr_assert_eq(info.truncated, k > o.last, "byte %llu", (unsigned long long)k);
        char *got = dump(m);
        /* the reopened run's own Opened record moves generations on; the
         * ranges and counts are the state's before the last record */
        cr_assert(strstr(got, "[0,40)") != NULL && strstr(got, "[0,60)") == NULL, "byte %llu: %s",
                  (unsigned long long)k, got);
        cr_assert(strstr(before, "committed 40") != NULL);
        cr_assert(strstr(got, "committed 40") != NULL, "byte %llu: %s", (unsigned long long)k, got);
        free(got);
        ms_destroy(m);
    }
    free(before);
    free(buf);
    tu_rm_tree(dir);
    free(dir);
}

/* ---- compaction in the background -------------------------------------------------- */

/* A master whose syncs compact in the background (as the master process
 * runs it), with a small compact_bytes: commits go on while the snapshot
 * is written. */
static sl_master_state_t *open_bg(const char *dir)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 60000};
    sl_master_store_opts_t so = {.compact_bytes = 512, .compact_in_background = true};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open_with(dir, &so, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

/* Commit every row of both epochs in 10-row batches, syncing each: the
 * journal passes compact_bytes many times. After each split's commits the
 * compaction running (if any) is waited for, so that the next one starts
 * on a machine too loaded to finish one during a whole run's commits. */
static void run_bg(sl_master_state_t *m, uint64_t *nonce)
{
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 2};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    memset(g_delivered, 0, sizeof g_delivered);
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t s = 0; s < N; s++)
            for (uint64_t from = 0; from < ROWS; from += 10) {
                sl_master_commit_result_t res = commit(m, e, s, from, from + 10, ++*nonce, false);
                cr_assert_eq(res, SL_MASTER_COMMITTED);
                cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
                for (uint64_t r = from; r < from + 10; r++)
                    g_delivered[e][s][r]++;
                if (from + 10 == ROWS) sl_master_store_compact_wait(ms_store(m));
            }
}

Test(journal_fault, background_compaction_replays_the_same_state)
{
    char *dir = tu_mkdtemp("journalfault");
    sl_master_state_t *m = open_bg(dir);
    uint64_t nonce = 0;
    run_bg(m, &nonce);
    assert_exactly_once();
    sl_master_store_counters_t c;
    sl_master_store_counters(ms_store(m), &c);
    cr_assert_gt(c.compactions, 2, "%llu compactions", (unsigned long long)c.compactions);
    char *live = dump(m);
    ms_destroy(m); /* waits for a compaction still running */
    m = open_dir(dir);
    char *back = dump(m);
    cr_assert_str_eq(back, live);
    /* every client's nonce came back: a retry of the last commit */
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_commit(m, "j", 1, N - 1, 0, ROWS - 10, ROWS, "c", nonce, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
    free(live);
    free(back);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

/* The snapshot cannot be put in place: that compaction fails and changes
 * nothing; the journal keeps every record and a later one succeeds. */
Test(journal_fault, a_background_compaction_that_fails_changes_nothing)
{
    fiu_ready();
    char *dir = tu_mkdtemp("journalfault");
    sl_master_state_t *m = open_bg(dir);
    cr_assert_eq(fiu_enable("sluice/journal/rename", 1, (void *)(intptr_t)EIO, FIU_ONETIME), 0);
    uint64_t nonce = 0;
    run_bg(m, &nonce);
    assert_exactly_once();
    fiu_disable("sluice/journal/rename");
    char *live = dump(m);
    ms_destroy(m);
    m = open_dir(dir);
    char *back = dump(m);
    cr_assert_str_eq(back, live);
    free(live);
    free(back);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

/* The process that encodes the snapshot (a fork, state_store_fork.c)
 * fails every time: each compaction fails and changes nothing (no
 * snapshot in place), commits go on, and a new run replays them all. */
Test(journal_fault, a_snapshot_process_that_fails_changes_nothing)
{
    fiu_ready();
    char *dir = tu_mkdtemp("journalfault");
    sl_master_state_t *m = open_bg(dir);
    cr_assert_eq(fiu_enable("sluice/journal/snapshot_process", 1, NULL, 0), 0);
    uint64_t nonce = 0;
    run_bg(m, &nonce);
    assert_exactly_once();
    sl_master_store_counters_t c;
    sl_master_store_counters(ms_store(m), &c);
    cr_assert_gt(c.compactions, 2, "%llu compactions", (unsigned long long)c.compactions);
    char *live = dump(m);
    ms_destroy(m);
    fiu_disable("sluice/journal/snapshot_process");
    char path[512];
    snprintf(path, sizeof path, "%s/snapshot", dir);
    cr_assert_eq(access(path, F_OK), -1, "a failed snapshot process put a snapshot in place");
    m = open_dir(dir);
    char *back = dump(m);
    cr_assert_str_eq(back, live);
    free(live);
    free(back);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

/* A crash between the snapshot's rename and the new journal's (here a
 * failed rename, which breaks the journal): a new run finds the snapshot
 * beside journal.next and replays both; nothing durable is lost. */
Test(journal_fault, between_the_two_renames_the_next_journal_is_adopted)
{
    fiu_ready();
    char *dir = tu_mkdtemp("journalfault");
    sl_master_state_t *m = open_bg(dir);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 2};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    memset(g_delivered, 0, sizeof g_delivered);
    cr_assert_eq(fiu_enable("sluice/journal/rename_next", 1, (void *)(intptr_t)EIO, 0), 0);
    uint64_t nonce = 0;
    /* commit and sync until a sync fails: the compaction broke the
     * journal; every commit synced before is durable. The epoch's last
     * batch is never committed: a loaded machine can run every other
     * commit before the compaction breaks, and a whole epoch committed
     * would move the job to epoch 1, whose committed ranges (asked for
     * below) are empty. */
    bool broke = false;
    for (uint32_t s = 0; s < N && !broke; s++)
        for (uint64_t from = 0; from < ROWS && !broke && !(s == N - 1 && from + 10 == ROWS);
             from += 10) {
            cr_assert_eq(commit(m, 0, s, from, from + 10, ++nonce, false), SL_MASTER_COMMITTED);
            if (ms_sync(m, &err) != SL_OK) {
                broke = true;
                cr_assert(strstr(err.msg, "journal.next") != NULL, "%s", err.msg);
            } else {
                for (uint64_t r = from; r < from + 10; r++)
                    g_delivered[0][s][r]++;
            }
        }
    /* the compaction thread may still be on its way (a loaded machine):
     * wait for its failure, at most 10 s */
    for (int k = 0; k < 1000 && !broke; k++) {
        if (ms_sync(m, &err) != SL_OK) {
            broke = true;
            cr_assert(strstr(err.msg, "journal.next") != NULL, "%s", err.msg);
        }
        usleep(10000);
    }
    cr_assert(broke, "no compaction reached its second rename in 10 s");
    /* syncs after the break fail, and start no compaction that could take
     * journal.next away (it is the journal now) */
    for (int k = 0; k < 5; k++) {
        cr_assert_neq(ms_sync(m, &err), SL_OK);
        sl_master_store_compact_wait(ms_store(m));
    }
    fiu_disable("sluice/journal/rename_next");
    ms_destroy(m);
    char next[600];
    snprintf(next, sizeof next, "%s/journal.next", dir);
    cr_assert_eq(access(next, F_OK), 0, "journal.next is not there");
    sl_master_journal_open_info_t info;
    sl_master_state_opts_t o = {.lease_timeout_ms = 60000};
    cr_assert_eq(ms_open(dir, &o, 0, &m, &info, &err), SL_OK, "%s", err.msg);
    cr_assert(info.had_snapshot);
    cr_assert_neq(access(next, F_OK), 0, "journal.next was not put in place");
    /* every row answered before the failure is committed */
    for (uint32_t s = 0; s < N; s++) {
        const sl_dpp_row_range_t *r;
        uint32_t n;
        cr_assert_eq(sl_master_state_committed(m, "j", s, &r, &n, &err), SL_OK);
        uint64_t rows = 0;
        for (uint32_t q = 0; q < n; q++)
            rows += r[q].to_row - r[q].from_row;
        uint64_t answered = 0;
        for (int x = 0; x < ROWS; x++)
            answered += g_delivered[0][s][x];
        cr_assert_geq(rows, answered, "split %u: %llu rows committed, %llu answered", s,
                      (unsigned long long)rows, (unsigned long long)answered);
    }
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}
