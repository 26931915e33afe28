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
 *   - shared passes release a stalled member; the deterministic order.
 * The connection (a lost master, refused registration, bad leases) and
 * `sluice worker --master`: lease_client_conn_test.c. */
#include "lease_client_util.h"

Test(lease_client, batches_and_empty_ranges_tile_the_todo)
{
    run_tiling(false, false);
}

Test(lease_client, filtered_rows_belong_to_ranges_and_drop_last_is_empty)
{
    run_tiling(true, false);
    run_tiling(true, true);
}

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
