/* The worker under a master (src/dpp/worker/lease/lease_client.h, worker.h master
 * mode) against a fake master written here: REGISTER, LEASE / NO_WORK,
 * HEARTBEAT with revocations and stop, SPLIT_READ. Fake trainer clients
 * read the batches and check, against the table read directly:
 *   - each batch covers one contiguous row range of one split, its samples
 *     are exactly the kept rows of that range, in order;
 *   - a lease's batches and the empty ranges of its SPLIT_READ tile its
 *     todo ranges exactly (gaps in todo are never read);
 *   - SPLIT_READ comes only after every batch of the lease was acknowledged;
 *   - drop_last short batches are reported as empty, not sent;
 *   - batches of a revoked lease are never sent and it is not reported;
 *   - static sharding: a client gets only its rank's batches;
 *   - a lost master connection is re-established (REGISTER again);
 *   - bad leases and an unreachable master give clear errors. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dpp/worker/lease/lease_client.h"
#include "fake_master.h"
#include "rpc/frame.h"
#include "sluice/wire.h"
#include "testutil.h"
#include "warehouse/import.h"

#define STRIPE_ROWS 200
#define ROWS 2400 /* 12 stripes, 2 files, 2 stripes per split: 6 splits of 400 rows */

static char tmpdir[256], table[300];

/* ---- the table, read directly: per split, each row's sample id and label ---- */

typedef struct ref_split {
    uint64_t rows;
    int64_t *ids;
    float *label;
} ref_split_t;

static sl_wh_splits_t *splits;
static sl_wh_table_t *tab;
static ref_split_t ref[16];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-msrc-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(table, sizeof table, "%s/t", tmpdir);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", ROWS, 7, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = STRIPE_ROWS;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(table, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_open(table, NULL, &tab, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_splits(tab, NULL, 2, &splits, &err), SL_OK, "%s", err.msg);
    cr_assert_leq(splits->count, 16);
    cr_assert_geq(splits->count, 4);
    const char *feats[] = {"I1"};
    sl_wh_read_opts_t ro = {.features = feats, .num_features = 1};
    for (uint32_t s = 0; s < splits->count; s++) {
        ref_split_t *rs = &ref[s];
        rs->rows = splits->items[s].num_rows;
        rs->ids = calloc(rs->rows, sizeof *rs->ids);
        rs->label = calloc(rs->rows, sizeof *rs->label);
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open_split(tab, &splits->items[s], &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *rows;
        uint64_t at = 0;
        while (sl_wh_reader_next(r, &rows, &err) == SL_OK && rows) {
            for (uint32_t i = 0; i < rows->batch.batch_size; i++, at++) {
                rs->ids[at] = rows->batch.sample_ids[i];
                rs->label[at] = rows->batch.labels.data[(size_t)i * rows->batch.labels.cols];
            }
        }
        cr_assert_eq(at, rs->rows);
        sl_wh_reader_close(r);
    }
}

static void teardown(void)
{
    for (uint32_t s = 0; splits && s < splits->count; s++) {
        free(ref[s].ids);
        free(ref[s].label);
    }
    sl_wh_splits_destroy(splits);
    sl_wh_table_close(tab);
    splits = NULL;
    tab = NULL;
    tu_rm_tree(tmpdir);
}

TestSuite(lease_client, .init = setup, .fini = teardown);

/* ---- the worker under the fake master ---- */

static char spec_buf[1024];

static const char *spec_shuffled(bool drop_last, bool filter, bool shuffle)
{
    snprintf(spec_buf, sizeof spec_buf,
             "{\"id\": \"spec-id\", \"source\": {\"table\": \"%s\", \"stripes_per_split\": 2,"
             " \"features\": [\"I1\", \"C1\"]},"
             " %s \"batch\": {\"size\": 128, \"drop_last\": %s%s}}",
             table,
             filter ? "\"filters\": [{\"op\": \"label_equals\", \"label\": \"label\", "
                      "\"value\": 0}],"
                    : "",
             drop_last ? "true" : "false",
             shuffle ? ", \"shuffle\": {\"window\": 1000, \"seed\": 5}" : "");
    return spec_buf;
}

static const char *spec_of(bool drop_last, bool filter)
{
    return spec_shuffled(drop_last, filter, false);
}

static bool in_order = true; /* check_leases: samples in row order (no shuffle window) */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t share_stall_ms; /* the lease client's (0: its default) */
/* the lease client's --cache-dir and --cache-size (NULL: none) */
static const char *cache_dir;
static uint64_t cache_max_bytes;

static sl_worker_t *start_worker(fake_t *f, sl_pipeline_job_t **job, sl_worker_lease_client_t **ms)
{
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f->port);
    sl_worker_lease_client_opts_t mo = {.master = master,
                                        .worker_id = "w1",
                                        .threads = 2,
                                        .share_stall_ms = share_stall_ms,
                                        .cache_dir = cache_dir,
                                        .cache_max_bytes = cache_max_bytes};
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.threads = 2;
    wo.memory_limit = 64u << 20;
    sl_worker_t *w = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start_leased(&mo, &wo, 5000, job, &w, ms, &p, &err), SL_OK, "%s",
                 err.msg);
    sl_pipeline_problems_free(&p);
    return w;
}

static bool kept(bool filter, uint32_t split, uint64_t row)
{
    return !filter || ref[split].label[row] == 0.0f;
}

/* Every lease that was read: its batches and empty ranges tile its todo;
 * each batch holds exactly the kept rows of its range. */
static void check_leases(fake_t *f, bool filter, bool drop_last, uint64_t skip_gen)
{
    for (uint32_t li = 0; li < f->nq; li++) {
        const fm_lease_t *l = &f->q[li];
        if (l->generation == skip_gen) continue;
        const fm_read_t *rd = NULL;
        for (uint32_t i = 0; i < f->nreads; i++)
            if (f->reads[i].generation == l->generation) {
                cr_assert_null(rd, "two split reads of generation %lu",
                               (unsigned long)l->generation);
                rd = &f->reads[i];
            }
        cr_assert_not_null(rd, "no split read for generation %lu", (unsigned long)l->generation);
        cr_assert(rd->all_acked, "split read of generation %lu before all its batches were acked",
                  (unsigned long)l->generation);
        uint64_t rows = splits->items[l->split].num_rows;
        uint8_t *cover = calloc(rows, 1); /* 1 batch, 2 empty */
        for (uint32_t i = 0; i < f->ngot; i++) {
            const got_batch_t *g = &f->got[i];
            if (g->generation != l->generation) continue;
            cr_assert_eq(g->split, l->split);
            cr_assert_str_eq(g->job, "jobx");
            cr_assert_eq(g->rank_plus_one, l->rank_plus_one);
            cr_assert(g->from < g->to && g->to <= rows);
            int64_t sorted[128];
            memcpy(sorted, g->ids, g->n * sizeof *sorted);
            if (!in_order) qsort(sorted, g->n, sizeof *sorted, cmp_i64);
            uint32_t k = 0;
            for (uint64_t r = g->from; r < g->to; r++) {
                cr_assert_eq(cover[r], 0, "row %lu of split %u in two places", (unsigned long)r,
                             l->split);
                cover[r] = 1;
                if (!kept(filter, l->split, r)) continue;
                cr_assert_lt(k, g->n, "batch [%lu, %lu) misses kept rows", (unsigned long)g->from,
                             (unsigned long)g->to);
                cr_assert_eq(sorted[k], ref[l->split].ids[r], "batch [%lu, %lu) sample %u",
                             (unsigned long)g->from, (unsigned long)g->to, k);
                k++;
            }
            cr_assert_eq(k, g->n, "batch [%lu, %lu) has %u samples, %u kept rows",
                         (unsigned long)g->from, (unsigned long)g->to, g->n, k);
            if (g->n == 128) /* a full batch ends at its last kept row */
                cr_assert(kept(filter, l->split, g->to - 1), "full batch [%lu, %lu)",
                          (unsigned long)g->from, (unsigned long)g->to);
            if (drop_last) cr_assert_eq(g->n, 128, "drop_last: only full batches");
        }
        for (uint32_t i = 0; i < rd->nempty; i++)
            for (uint64_t r = rd->empty[i].from_row; r < rd->empty[i].to_row; r++) {
                cr_assert_eq(cover[r], 0, "empty row %lu also in a batch", (unsigned long)r);
                cover[r] = 2;
                if (!drop_last)
                    cr_assert(!kept(filter, l->split, r), "empty range with a kept row");
            }
        for (uint64_t r = 0; r < rows; r++) {
            bool in_todo = false;
            for (uint32_t t = 0; t < l->ntodo; t++)
                in_todo |= r >= l->todo[t].from_row && r < l->todo[t].to_row;
            cr_assert_eq(cover[r] != 0, in_todo, "row %lu of split %u: covered %d, todo %d",
                         (unsigned long)r, l->split, cover[r], in_todo);
        }
        free(cover);
    }
}

static void wait_until(fake_t *f, bool (*cond)(fake_t *), double seconds)
{
    for (int i = 0; i < (int)(tu_timeout(seconds) * 100); i++) {
        pthread_mutex_lock(&f->mu);
        bool ok = cond(f);
        pthread_mutex_unlock(&f->mu);
        if (ok) return;
        usleep(10000);
    }
    cr_assert_fail("timed out waiting");
}

static bool heartbeat_seen(fake_t *f)
{
    return f->heartbeats >= 1;
}

static void run_tiling(bool filter, bool drop_last)
{
    uint64_t seed = tu_seed(filter ? "tiling_filtered" : "tiling");
    fake_t f;
    fm_start(&f, splits, spec_of(drop_last, filter));
    f.finish = true;
    /* every split whole, and one as a re-lease with random todo ranges */
    uint64_t gen = 100;
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(&f, s, gen++, 0, NULL, 0);
    uint64_t rows = splits->items[1].num_rows;
    uint64_t cut[6];
    for (int i = 0; i < 6; i++)
        cut[i] = 1 + tu_below(&seed, rows - 1);
    for (int i = 0; i < 6; i++) /* sort */
        for (int j = i + 1; j < 6; j++)
            if (cut[j] < cut[i]) {
                uint64_t t = cut[i];
                cut[i] = cut[j];
                cut[j] = t;
            }
    sl_dpp_row_range_t todo[3];
    uint32_t nt = 0;
    for (int i = 0; i < 6; i += 2)
        if (cut[i] < cut[i + 1] && (nt == 0 || cut[i] >= todo[nt - 1].to_row))
            todo[nt++] = (sl_dpp_row_range_t){cut[i], cut[i + 1]};
    if (nt == 0) todo[nt++] = (sl_dpp_row_range_t){rows / 3, rows / 2};
    fm_add(&f, 1, gen++, 0, todo, nt);

    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c[2];
    client_start(&c[0], &f, sl_worker_port(w), 0);
    client_start(&c[1], &f, sl_worker_port(w), 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c[0].th, NULL);
    pthread_join(c[1].th, NULL);
    cr_assert(c[0].ended && c[1].ended, "clients get END once the job is finished");
    sl_worker_lease_client_stats_t ms_st;
    sl_worker_lease_client_stats(ms, &ms_st);
    wait_until(&f, heartbeat_seen, 5); /* a job this small may end before the first one */
    sl_worker_stop(w);                 /* the last SPLIT_READs go out */
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, f.nq, "a split read per lease: %u of %u", f.nreads, f.nq);
    check_leases(&f, filter, drop_last, 0);
    cr_assert_eq(f.registers, 1);
    cr_assert_geq(f.heartbeats, 1);
    pthread_mutex_unlock(&f.mu);
    cr_assert(ms_st.finished);
    cr_assert_str_eq(ms_st.job_id, "jobx");
    cr_assert_eq(ms_st.leases, f.nq);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

Test(lease_client, batches_and_empty_ranges_tile_the_todo)
{
    run_tiling(false, false);
}

Test(lease_client, filtered_rows_belong_to_ranges_and_drop_last_is_empty)
{
    run_tiling(true, false);
    run_tiling(true, true);
}

static bool revoke_sent(fake_t *f)
{
    return f->revoked_sent && f->heartbeats >= 2;
}

static bool all_read(fake_t *f)
{
    return f->nreads >= f->nq;
}

/* A lease revoked while its batches wait for a client: none is sent, it is
 * not reported; later leases are served normally. */
Test(lease_client, revoked_lease_batches_are_dropped)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 7, 0, NULL, 0);
    fm_add(&f, 2, 8, 0, NULL, 0);
    fm_add(&f, 3, 9, 0, NULL, 0);
    f.finish = true;
    f.hold = false;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    /* no client yet: the first leases' batches wait in the ready queue */
    for (int i = 0; i < 500; i++) {
        sl_worker_stats_t st;
        sl_worker_stats(w, &st);
        if (st.batches >= 4) break;
        usleep(10000);
    }
    pthread_mutex_lock(&f.mu);
    f.revoke_gen = 7;
    pthread_mutex_unlock(&f.mu);
    wait_until(&f, revoke_sent, 10);
    usleep(50000);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    sl_worker_lease_client_stats_t mst;
    sl_worker_lease_client_stats(ms, &mst);
    pthread_mutex_lock(&f.mu);
    for (uint32_t i = 0; i < f.ngot; i++)
        cr_assert_neq(f.got[i].generation, 7, "a batch of the revoked lease was sent");
    for (uint32_t i = 0; i < f.nreads; i++)
        cr_assert_neq(f.reads[i].generation, 7, "the revoked lease was reported");
    cr_assert_eq(f.nreads, 2);
    check_leases(&f, false, false, 7);
    cr_assert_geq(f.hb_leases_max, 1, "heartbeats list the leases held");
    pthread_mutex_unlock(&f.mu);
    cr_assert_geq(st.server.dropped, 1, "batches of the revoked lease were dropped");
    cr_assert_eq(mst.revoked, 1);
    cr_assert_eq(mst.leases_held, 0, "every lease forgotten");
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* The cache file of a WRITE lease (Lease.cache_local) revoked after its
 * batches were made, before its SPLIT_READ: whole on the worker's disk,
 * and the master still counts the split as held there (from the grant),
 * so the file is kept and counted against --cache-size at once (the next
 * heartbeat), not only left on disk until the worker exits; under a limit
 * it alone passes, it is removed and the master told (cache_evicted).
 * Runs the lease under the fake master with limit max_bytes; @return the
 * lease client's figures after the worker stopped, *written the bytes
 * the worker wrote, *on_disk whether the file is there then. */
static sl_worker_lease_client_stats_t revoked_write(fake_t *f, uint64_t max_bytes,
                                                    uint64_t *written, bool *on_disk)
{
    char root[400];
    snprintf(root, sizeof root, "%s/cache", tmpdir);
    cache_dir = root;
    cache_max_bytes = max_bytes;
    fm_start(f, splits, spec_of(false, false));
    fm_add(f, 0, 7, 0, NULL, 0);
    f->q[0].cache_name = "00000000000000ab/split-0.slc";
    fm_add(f, 2, 8, 0, NULL, 0);
    f->finish = true;
    /* the other lease only once the file is written: without a client its
     * batches (made by the lanes, the fused path) could take the ready
     * queue's room (4 batches, split 0's own count) before the transform
     * threads made split 0's last one, which then waits for a trainer, and
     * the file with it (seen under load; serving split 2 first fails every
     * time) */
    f->lease_limit = 1;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(f, &job, &ms);
    cache_dir = NULL;
    cache_max_bytes = 0;
    /* no client yet: the cache file is written before the lease's batches
     * go out, and they wait in the ready queue */
    sl_worker_stats_t st = {0};
    for (int i = 0; i < (int)(tu_timeout(10) * 100); i++) {
        sl_worker_stats(w, &st);
        if (st.cache_files_written >= 1) break;
        usleep(10000);
    }
    cr_assert_eq(st.cache_files_written, 1, "the WRITE lease's file was not written");
    *written = st.cache_bytes_written;
    pthread_mutex_lock(&f->mu);
    f->lease_limit = 0;
    f->revoke_gen = 7;
    pthread_mutex_unlock(&f->mu);
    wait_until(f, revoke_sent, 10);
    client_t c;
    client_start(&c, f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w); /* the last heartbeat goes out */
    sl_worker_lease_client_stats_t mst;
    sl_worker_lease_client_stats(ms, &mst);
    /* the file under the process's own folder, DIR/w-<pid>-<random>/ */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s/w-*/00000000000000ab/split-0.slc >/dev/null 2>&1", root);
    *on_disk = system(cmd) == 0;
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    return mst;
}

Test(lease_client, a_revoked_write_lease_leaves_its_cache_file_counted)
{
    fake_t f;
    uint64_t written = 0;
    bool on_disk = false;
    sl_worker_lease_client_stats_t mst = revoked_write(&f, 8ull << 30, &written, &on_disk);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 1, "only the other lease is reported");
    cr_assert_eq(f.reads[0].generation, 8);
    cr_assert_eq(f.nevicted, 0, "the file is held: nothing said");
    pthread_mutex_unlock(&f.mu);
    fm_stop(&f);
    cr_assert_eq(mst.revoked, 1);
    cr_assert_eq(mst.leases_held, 0);
    cr_assert_gt(written, 0);
    cr_assert(on_disk);
    cr_assert_eq(mst.cache_files, 1, "the revoked lease's file is not counted");
    cr_assert_eq(mst.cache_bytes, written, "counted %llu bytes, the file has %llu",
                 (unsigned long long)mst.cache_bytes, (unsigned long long)written);
    cr_assert_eq(mst.cache_evicted, 0);
    no_thread_fails();
}

Test(lease_client, a_revoked_write_lease_over_the_limit_is_removed_and_told)
{
    fake_t f;
    uint64_t written = 0;
    bool on_disk = true;
    sl_worker_lease_client_stats_t mst = revoked_write(&f, 1000, &written, &on_disk);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 1);
    cr_assert_eq(f.nevicted, 1, "the master is told the split is not held");
    cr_assert_eq(f.evicted_fp[0], 0xab);
    cr_assert_eq(f.evicted_split[0], 0);
    pthread_mutex_unlock(&f.mu);
    fm_stop(&f);
    cr_assert_eq(mst.revoked, 1);
    cr_assert_gt(written, 1000, "the file (%llu bytes) alone passes the limit",
                 (unsigned long long)written);
    cr_assert(!on_disk, "a file over the limit was left on disk");
    cr_assert_eq(mst.cache_files, 0);
    cr_assert_eq(mst.cache_bytes, 0);
    cr_assert_eq(mst.cache_evicted, 1);
    no_thread_fails();
}

/* Static sharding: leases for rank 0 and rank 1; each client sees only its own. */
Test(lease_client, static_sharding_routes_batches_by_rank)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    for (uint32_t s = 0; s < 4; s++)
        fm_add(&f, s, 20 + s, 1 + s % 2, NULL, 0);
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c[2];
    client_start(&c[0], &f, sl_worker_port(w), 0);
    client_start(&c[1], &f, sl_worker_port(w), 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c[0].th, NULL);
    pthread_join(c[1].th, NULL);
    sl_worker_stop(w);
    cr_assert_eq(c[0].wrong_rank + c[1].wrong_rank, 0);
    cr_assert_gt(c[0].batches, 0);
    cr_assert_gt(c[1].batches, 0);
    pthread_mutex_lock(&f.mu);
    check_leases(&f, false, false, 0);
    pthread_mutex_unlock(&f.mu);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* A lease of every split queued at f (finish: then "finished"), f's
 * connection dropped after drop_after_reads SPLIT_READs and REGISTERs
 * refused after refuse_after (0: never); the worker and a client started. */
static sl_worker_t *start_dropping(fake_t *f, bool finish, int drop_after_reads,
                                   uint32_t refuse_after, sl_pipeline_job_t **job,
                                   sl_worker_lease_client_t **ms, client_t *c)
{
    fm_start(f, splits, spec_of(false, false));
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(f, s, 40 + s, 0, NULL, 0);
    f->finish = finish;
    f->drop_after_reads = drop_after_reads;
    f->refuse_after = refuse_after;
    sl_worker_t *w = start_worker(f, job, ms);
    client_start(c, f, sl_worker_port(w), 0);
    return w;
}

/* The master drops the connection: the worker registers again, and the
 * rest of the work is read and reported. */
Test(lease_client, reconnects_after_the_master_connection_drops)
{
    fake_t f;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    client_t c;
    sl_worker_t *w = start_dropping(&f, true, 2, 0, &job, &ms, &c);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    wait_until(&f, all_read, 10); /* reported without waiting for the stop */
    sl_worker_stop(w);
    sl_worker_lease_client_stats_t mst;
    sl_worker_lease_client_stats(ms, &mst);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.registers, 2);
    cr_assert_eq(f.nreads, f.nq);
    /* the second REGISTER, same incarnation, named every lease held */
    cr_assert(!f.unnamed_lease, "a REGISTER left out a lease the worker held");
    cr_assert(!f.named_unknown);
    check_leases(&f, false, false, 0);
    pthread_mutex_unlock(&f.mu);
    cr_assert_eq(mst.reconnects, 1);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* The master refuses a re-registration for good (another live process
 * took the worker id while the connection was down): the worker fails
 * with the master's message at once, and does not keep trying. */
Test(lease_client, refused_registration_fails_the_worker)
{
    fake_t f;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    client_t c;
    sl_worker_t *w = start_dropping(&f, false, 1, 1, &job, &ms, &c);
    sl_error_t err = {0};
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    cr_assert_eq(rc, SL_ERR_INVALID, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "worker id 'w1' is in use by another live worker process") != NULL,
              "%s", err.msg);
    usleep(300 * 1000);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.registers, 2, "no retry loop after a refusal for good");
    pthread_mutex_unlock(&f.mu);
    sl_worker_stop(w);
    pthread_join(c.th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* A todo range past the split's rows fails the worker with a message that
 * names it; a master that cannot be reached fails start, naming it. */
Test(lease_client, bad_lease_and_unreachable_master)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 60, 0, NULL, 0);
    sl_dpp_row_range_t bad = {10, splits->items[1].num_rows + 5};
    fm_add(&f, 1, 61, 0, &bad, 1);
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    cr_assert_eq(rc, SL_ERR_PROTOCOL, "%s", err.msg);
    cr_assert(strstr(err.msg, "todo range 0") && strstr(err.msg, "split 1"), "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);

    /* nobody listens there any more */
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f.port);
    sl_worker_lease_client_opts_t mo = {.master = master,
                                        .worker_id = "w1",
                                        .serve_address = "127.0.0.1:1",
                                        .connect_timeout_ms = 500};
    sl_worker_lease_client_t *m2 = NULL;
    rc = sl_worker_lease_client_new(&mo, &m2, &err);
    cr_assert_neq(rc, SL_OK);
    cr_assert_null(m2);
    cr_assert(strstr(err.msg, master), "%s", err.msg);
}

/* ---- `sluice worker --master ... --admin ...` ---- */

/* GET path from 127.0.0.1:port; the status code, the body in buf. */
static int http_get(uint16_t port, const char *path, char *buf, size_t cap)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(addr, 2000, &fd, &err), SL_OK, "%s", err.msg);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd);
    int code = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.%*d %d", &code), 1, "%s", buf);
    return code;
}

/* Read lines from the child's stdout until one starts with prefix; the
 * port after its last ':'. */
static uint16_t port_line(FILE *out, const char *prefix)
{
    char line[512];
    while (fgets(line, sizeof line, out)) {
        if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
        char *colon = strrchr(line, ':');
        cr_assert_not_null(colon, "%s", line);
        return (uint16_t)atoi(colon + 1);
    }
    cr_assert_fail("no '%s' line from sluice worker", prefix);
    return 0;
}

static bool no_leases_left(fake_t *f)
{
    return f->next == f->nq && f->nreads == f->nq;
}

Test(lease_client, cli_worker_under_a_master_with_admin)
{
    const char *bin = getenv("SLUICE_BINARY");
    cr_assert_not_null(bin, "SLUICE_BINARY");
    fake_t f;
    fm_start(&f, splits, spec_of(false, true));
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(&f, s, 80 + s, 0, NULL, 0);
    f.hold = true;
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f.port);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl(bin, bin, "worker", "--master", master, "--listen", "127.0.0.1:0", "--admin",
              "127.0.0.1:0", "--worker-id", "w1", "--threads", "2", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    uint16_t admin = port_line(out, "admin on ");
    uint16_t serve = port_line(out, "listening on ");
    char body[16384];
    cr_assert_eq(http_get(admin, "/healthz", body, sizeof body), 200, "%s", body);
    cr_assert_eq(http_get(admin, "/readyz", body, sizeof body), 503, "%s", body);
    cr_assert(strstr(body, "waiting"), "%s", body);

    pthread_mutex_lock(&f.mu);
    f.hold = false;
    pthread_mutex_unlock(&f.mu);
    client_t c;
    client_start(&c, &f, serve, 0);
    wait_until(&f, no_leases_left, 20);
    cr_assert_eq(http_get(admin, "/readyz", body, sizeof body), 200, "%s", body);
    cr_assert_eq(http_get(admin, "/metrics", body, sizeof body), 200, "%s", body);
    char want[128];
    snprintf(want, sizeof want, "sluice_worker_leases_total{job=\"jobx\"} %u\n", f.nq);
    cr_assert(strstr(body, want), "%s", body);
    cr_assert(strstr(body, "sluice_worker_split_reads_total"), "%s", body);
    /* every sample names the job; the start time comes first (docs/WORKER.md) */
    cr_assert(strstr(body, "sluice_worker_split_reads_total{job=\"jobx\"} "), "%s", body);
    cr_assert(strstr(body, "\nsluice_worker_start_time_seconds{job=\"jobx\"} "), "%s", body);
    cr_assert_eq(http_get(admin, "/status", body, sizeof body), 200, "%s", body);
    cr_assert(strstr(body, "\"job_id\":\"jobx\"") && strstr(body, "\"master\""), "%s", body);
    cr_assert_eq(http_get(admin, "/nope", body, sizeof body), 404, "%s", body);

    pthread_mutex_lock(&f.mu);
    f.finish = true; /* the next lease request hears "finished": the worker exits */
    pthread_mutex_unlock(&f.mu);
    int status = -1;
    for (int i = 0; i < (int)(tu_timeout(20) * 100); i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        usleep(10000);
    }
    if (!WIFEXITED(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("sluice worker did not exit");
    }
    cr_assert_eq(WEXITSTATUS(status), 0);
    char line[512];
    bool said = false;
    while (fgets(line, sizeof line, out))
        said |= strstr(line, "no more work from the master") != NULL;
    fclose(out);
    cr_assert(said, "the worker says why it exits");
    pthread_join(c.th, NULL);
    cr_assert(c.ended);
    pthread_mutex_lock(&f.mu);
    check_leases(&f, true, false, 0);
    pthread_mutex_unlock(&f.mu);
    fm_stop(&f);
    no_thread_fails();
}

/* A shuffle window under a master shuffles within a batch only (a batch
 * stays one row range), and a batch's order depends only on where it
 * starts: the same split leased again after other leases gives the same
 * batches in the same order. */
Test(lease_client, shuffle_window_stays_within_a_batch)
{
    fake_t f;
    fm_start(&f, splits, spec_shuffled(false, false, true));
    fm_add(&f, 0, 1, 0, NULL, 0);
    fm_add(&f, 1, 2, 0, NULL, 0);
    fm_add(&f, 0, 3, 0, NULL, 0);
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    in_order = false;
    check_leases(&f, false, false, 0);
    in_order = true;
    uint32_t pairs = 0, moved = 0;
    for (uint32_t i = 0; i < f.ngot; i++) {
        const got_batch_t *a = &f.got[i];
        if (a->generation != 1) continue;
        for (uint32_t j = 0; j < f.ngot; j++) {
            const got_batch_t *b = &f.got[j];
            if (b->generation != 3 || b->from != a->from) continue;
            cr_assert_eq(b->to, a->to);
            cr_assert_eq(memcmp(a->ids, b->ids, a->n * sizeof *a->ids), 0,
                         "batch at row %lu: a different order the second time",
                         (unsigned long)a->from);
            pairs++;
        }
        for (uint32_t k = 0; k < a->n; k++)
            moved += a->ids[k] != ref[0].ids[a->from + k];
    }
    pthread_mutex_unlock(&f.mu);
    cr_assert_geq(pairs, 3);
    cr_assert_gt(moved, 0, "rows were shuffled");
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* ---- shared passes ---- */

static uint32_t reads_of(const fake_t *f, const char *job)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < f->nreads; i++)
        n += strcmp(f->reads[i].job, job) == 0;
    return n;
}

static bool member_reads_2(fake_t *f)
{
    return reads_of(f, "joby") == 2;
}

static const fm_read_t *read_of_gen(const fake_t *f, uint64_t gen)
{
    for (uint32_t i = 0; i < f->nreads; i++)
        if (f->reads[i].generation == gen) return &f->reads[i];
    cr_assert_fail("no split read of generation %lu", (unsigned long)gen);
    return NULL;
}

static bool first_pass_copied(fake_t *f)
{
    return acked_rows(f, 0, 200) == splits->items[0].num_rows;
}

/* Two passes of jobx shared with job "joby", whose client reads its
 * copies; jobx has no client: its batches fill the queue, and the second
 * pass stops before it is read. joby's lease of it must not wait for
 * jobx's trainers: once the pass has not moved for share_stall_ms it is
 * released -- reported read with no empty ranges, not detached (joby did
 * not fall behind), the rows it did not get left to do -- while the
 * first pass, copied whole, reports read in full. Then jobx's client
 * comes and jobx's leases end as usual.
 *
 * The second lease is granted once joby has every row of the first pass.
 * Each split makes 4 batches (two from a stripe, one straddling the two
 * stripes, a short last one) on the reader, the stripe lanes or the
 * transform threads, in no set order between splits: with both leases
 * at once, the second split's batches could take the read-ahead before
 * the first split's last, and the first pass stalled too (the test was
 * wrong, not the pass: 1 run in 15 with a reader and transform threads,
 * 1 in 2 with lanes that take the next lease ahead). */
Test(lease_client, a_member_of_a_stalled_pass_is_released)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    f.finish = true;
    fm_add(&f, 0, 100, 0, NULL, 0);
    f.q[0].member_gen = 200;
    fm_add(&f, 1, 101, 0, NULL, 0);
    f.q[1].member_gen = 201;
    f.lease_limit = 1;
    share_stall_ms = (uint32_t)(tu_timeout(1) * 1000);
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t y, x;
    client_start_job(&y, &f, sl_worker_port(w), "joby");
    wait_until(&f, first_pass_copied, 20);
    pthread_mutex_lock(&f.mu);
    f.lease_limit = 0;
    pthread_mutex_unlock(&f.mu);
    wait_until(&f, member_reads_2, 20);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(reads_of(&f, "jobx"), 0, "jobx's batches were never taken");
    const fm_read_t *whole = read_of_gen(&f, 200), *cut = read_of_gen(&f, 201);
    cr_assert(!whole->detached && whole->all_acked && whole->nempty == 0);
    cr_assert(!cut->detached, "joby kept up: released, not detached");
    cr_assert_eq(cut->nempty, 0, "no row of the pass it left counts as read for joby");
    const uint64_t got_cut = acked_rows(&f, 1, 201);
    cr_assert_lt(got_cut, splits->items[1].num_rows);
    pthread_mutex_unlock(&f.mu);
    sl_worker_lease_client_stats_t st;
    sl_worker_lease_client_stats(ms, &st);
    cr_assert_eq(st.shares_released, 1);
    cr_assert_eq(st.shares_detached, 0);
    cr_assert_eq(st.shared_leases, 2);

    client_start(&x, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(x.th, NULL);
    pthread_join(y.th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 4);
    check_leases(&f, false, false, 0); /* jobx's two leases, read whole */
    /* joby got no copy of the second pass after its release */
    cr_assert_eq(acked_rows(&f, 1, 201), got_cut);
    pthread_mutex_unlock(&f.mu);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* ---- the deterministic order ---- */

/* Leases in the deterministic order (docs/DESIGN.md) for 2 ranks: split
 * 0's base comes with its LEASE, the others' only in heartbeats; split 2
 * is a re-lease whose first batch was committed (its todo starts at row
 * 128). Each split is read from its first row and counted whole
 * (its count in a heartbeat before its SPLIT_READ, which repeats it:
 * batches = ceil(rows / 128)); each rank gets exactly
 * the batches g = base + k with g mod 2 its rank, in g order, the rows of
 * batch k of its split, and split 2's first batch never. A base without
 * ranks is a broken lease. */
Test(lease_client, leases_in_the_deterministic_order_go_to_ranks_in_g_order)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    uint64_t base[4], count[4], total = 0;
    for (uint32_t s = 0; s < 4; s++) {
        count[s] = (splits->items[s].num_rows + 127) / 128;
        base[s] = total;
        total += count[s];
    }
    cr_assert_geq(count[2], 2);
    for (uint32_t s = 0; s < 4; s++) {
        sl_dpp_row_range_t todo = {s == 2 ? 128 : 0, splits->items[s].num_rows};
        fm_add(&f, s, 110 + s, 0, &todo, 1);
        f.q[s].order_ranks = 2;
        f.q[s].hb_base_plus_one = base[s] + 1;
    }
    f.q[0].order_base_plus_one = 1;
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c[2];
    client_start(&c[0], &f, sl_worker_port(w), 0);
    client_start(&c[1], &f, sl_worker_port(w), 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c[0].th, NULL);
    pthread_join(c[1].th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 4);
    for (uint32_t i = 0; i < f.nreads; i++) {
        uint32_t s = f.reads[i].split;
        cr_assert(f.reads[i].counted, "split %u", s);
        cr_assert_eq(f.reads[i].batches, count[s], "split %u", s);
        cr_assert_eq(f.reads[i].nempty, 0, "split %u", s);
        cr_assert(f.reads[i].all_acked, "split %u", s);
    }
    /* each count went first in a heartbeat, at the cut (det28h) */
    for (uint32_t s = 0; s < 4; s++) {
        cr_assert_eq(f.q[s].hb_count_plus_one, count[s] + 1, "split %u", s);
        cr_assert(f.q[s].hb_count_before_read, "split %u", s);
    }
    cr_assert_eq(f.ngot, total - 1);
    uint64_t last[2] = {0, 0}; /* 1 + the last g each rank got */
    for (uint32_t i = 0; i < f.ngot; i++) {
        const got_batch_t *g = &f.got[i];
        cr_assert_neq(g->g_plus_one, 0, "batch %u", i);
        uint64_t gi = g->g_plus_one - 1;
        uint32_t r = g->rank_plus_one - 1;
        cr_assert_eq(gi % 2, r, "g %" PRIu64 " to rank %u", gi, r);
        cr_assert_gt(g->g_plus_one, last[r], "rank %u: g %" PRIu64 " after %" PRIu64, r, gi,
                     last[r] - 1);
        last[r] = g->g_plus_one;
        cr_assert(g->split < 4);
        uint64_t k = gi - base[g->split];
        cr_assert_lt(k, count[g->split]);
        cr_assert(!(g->split == 2 && k == 0), "split 2's committed batch sent");
        cr_assert_eq(g->from, k * 128);
        uint64_t to = (k + 1) * 128 < ref[g->split].rows ? (k + 1) * 128 : ref[g->split].rows;
        cr_assert_eq(g->to, to);
        cr_assert_eq(g->n, to - k * 128);
        for (uint32_t j = 0; j < g->n; j++)
            cr_assert_eq(g->ids[j], ref[g->split].ids[k * 128 + j], "g %" PRIu64 " row %u", gi, j);
    }
    pthread_mutex_unlock(&f.mu);
    cr_assert_eq(c[0].wrong_rank + c[1].wrong_rank, 0);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);

    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 92, 0, NULL, 0);
    fm_add(&f, 2, 93, 0, NULL, 0);
    f.q[1].order_base_plus_one = 5;
    w = start_worker(&f, &job, &ms);
    client_start(&c[0], &f, sl_worker_port(w), 0);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_ERR_PROTOCOL, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "lease of split 2: order_ranks 0 with order_base_plus_one 5"), "%s",
              err.msg);
    pthread_join(c[0].th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* A resumed deterministic job (LEASE order_skip): split 2's first batch
 * was handed out before the resume, so it is neither sent, numbered nor
 * counted; the splits after it take one g less. Skip rows without
 * order_ranks are a protocol error. */
Test(lease_client, a_resumed_deterministic_lease_skips_the_rows_handed_out_before)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    uint64_t base[4], count[4], total = 0;
    for (uint32_t s = 0; s < 4; s++) {
        count[s] = (splits->items[s].num_rows + 127) / 128 - (s == 2);
        base[s] = total;
        total += count[s];
    }
    for (uint32_t s = 0; s < 4; s++) {
        sl_dpp_row_range_t todo = {s == 2 ? 128 : 0, splits->items[s].num_rows};
        fm_add(&f, s, 120 + s, 0, &todo, 1);
        f.q[s].order_ranks = 1;
        f.q[s].hb_base_plus_one = base[s] + 1;
    }
    f.q[2].nskip = 1;
    f.q[2].skip[0] = (sl_dpp_row_range_t){0, 128};
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 4);
    for (uint32_t i = 0; i < f.nreads; i++) {
        uint32_t s = f.reads[i].split;
        cr_assert(f.reads[i].counted, "split %u", s);
        cr_assert_eq(f.reads[i].batches, count[s], "split %u: the skipped batch is not counted", s);
    }
    cr_assert_eq(f.ngot, total);
    for (uint32_t i = 0; i < f.ngot; i++) {
        const got_batch_t *g = &f.got[i];
        uint64_t gi = g->g_plus_one - 1, k = gi - base[g->split];
        cr_assert_eq(gi, i, "one rank: in g order");
        /* split 2's batch k is its (k + 1)-th cut */
        cr_assert_eq(g->from, (k + (g->split == 2)) * 128, "g %" PRIu64, gi);
    }
    pthread_mutex_unlock(&f.mu);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);

    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 94, 0, NULL, 0);
    fm_add(&f, 2, 95, 0, NULL, 0);
    f.q[1].nskip = 1;
    f.q[1].skip[0] = (sl_dpp_row_range_t){0, 128};
    w = start_worker(&f, &job, &ms);
    client_start(&c, &f, sl_worker_port(w), 0);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_ERR_PROTOCOL, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "lease of split 2: 1 skip ranges outside the deterministic order"),
              "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

static bool first_read_second_granted(fake_t *f)
{
    return f->nreads >= 1 && f->next == 2;
}

/* A split of a deterministic job whose rows are all committed but not yet
 * counted (its worker killed before SPLIT_READ) is leased again with no
 * todo range: the worker reads it only to count it (fleet_order_test found
 * it refused as a protocol error, the worker then dying). */
Test(lease_client, a_deterministic_lease_with_no_todo_is_read_only_to_count)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    sl_dpp_row_range_t none = {0, 0};
    fm_add(&f, 1, 120, 0, &none, 0);
    f.q[0].order_ranks = 2;
    f.q[0].order_base_plus_one = 1;
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c[2];
    client_start(&c[0], &f, sl_worker_port(w), 0);
    client_start(&c[1], &f, sl_worker_port(w), 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c[0].th, NULL);
    pthread_join(c[1].th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, 1);
    cr_assert(f.reads[0].counted);
    cr_assert_eq(f.reads[0].batches, (splits->items[1].num_rows + 127) / 128);
    cr_assert_eq(f.ngot, 0, "a batch of a split whose rows are all committed");
    pthread_mutex_unlock(&f.mu);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
}

/* A lease of the deterministic order whose base never comes and which the
 * master revokes: its held batches are freed (the server would never
 * finish otherwise), none sent; the other lease's batches all go. */
Test(lease_client, a_revoked_lease_of_the_deterministic_order_frees_its_held_batches)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 120, 0, NULL, 0);
    fm_add(&f, 1, 121, 0, NULL, 0);
    f.q[0].order_ranks = f.q[1].order_ranks = 1;
    f.q[0].hb_base_plus_one = 1;
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    /* split 1 is read by now, or nearly: its batches wait for a base */
    wait_until(&f, first_read_second_granted, 20);
    pthread_mutex_lock(&f.mu);
    f.revoke_gen = 121;
    pthread_mutex_unlock(&f.mu);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    cr_assert(f.revoked_sent);
    cr_assert_eq(f.nreads, 1);
    cr_assert_eq(f.reads[0].generation, 120);
    cr_assert(f.reads[0].counted);
    cr_assert_eq(f.reads[0].batches, (splits->items[0].num_rows + 127) / 128);
    cr_assert_eq(f.ngot, f.reads[0].batches);
    for (uint32_t i = 0; i < f.ngot; i++) {
        cr_assert_eq(f.got[i].split, 0);
        cr_assert_eq(f.got[i].g_plus_one, i + 1);
    }
    pthread_mutex_unlock(&f.mu);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}
