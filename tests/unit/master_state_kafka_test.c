/* Tests of Kafka jobs in the master's state machine (state.h, "Kafka
 * jobs"; src/dpp/master/state/state_kafka.c): chunks made on demand as
 * leases ask, a bounded job that finishes and a stream that does not,
 * partitions added, positions, replay and snapshots equal to memory, a
 * stream's done prefix folded, the refusals, and every allocation failure
 * of a Kafka job's life. Every test runs on the counting allocator of
 * testutil.h. Resume tokens: master_state_kafka_token_test.c. */
#include "master_state_kafka_util.h"

Test(master_state_kafka, chunks_are_made_as_leases_need_them)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 2);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    assert_positions(m, "t/0:100/0 t/1:0/0 ");
    /* the first lease makes one chunk per partition */
    sl_master_lease_t a = lease(m, "t/0", 100, 10);
    cr_assert_eq(a.split, 0);
    cr_assert_eq(a.num_todo, 1);
    cr_assert_eq(a.todo[0].from_row, 0);
    cr_assert_eq(a.todo[0].to_row, 10);
    sl_master_lease_t b = lease(m, "t/1", 0, 10);
    cr_assert_eq(b.split, 1);
    /* no PENDING chunk left, one open of 2 ahead: one more each */
    sl_master_lease_t c = lease(m, "t/0", 110, 10);
    sl_master_lease_t d = lease(m, "t/1", 10, 10);
    cr_assert_eq(c.split, 2);
    cr_assert_eq(d.split, 3);
    /* two chunks open per partition: nothing more */
    no_lease(m);
    assert_positions(m, "t/0:100/2 t/1:0/2 ");
    /* t/0's first chunk done: its prefix moves and a chunk is made again */
    commit(m, &a, 0, 4, 1);
    assert_positions(m, "t/0:104/2 t/1:0/2 ");
    sl_dpp_row_range_t empty = {4, 10};
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, a.split, a.generation, &empty, 1, &err),
                 SL_MASTER_READ_DONE, "%s", err.msg);
    assert_positions(m, "t/0:110/2 t/1:0/2 ");
    sl_master_lease_t e = lease(m, "t/0", 120, 10);
    cr_assert_eq(e.split, 0); /* t/0's first chunk was folded: its split is reused */
    no_lease(m);
    /* a chunk above the prefix done does not move it */
    commit(m, &c, 0, 10, 2);
    assert_positions(m, "t/0:120/3 t/1:0/2 ");
    /* an expired chunk is leased again before any new one (in split
     * order: split 0 holds t/0's third chunk since the first was folded) */
    uint32_t expired = 0;
    cr_assert_eq(sl_master_state_expire(m, 5000, &expired, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(expired, 3);
    sl_master_lease_t again = lease(m, "t/0", 120, 10);
    cr_assert_eq(again.split, 0);
    again = lease(m, "t/1", 0, 10);
    cr_assert_eq(again.split, 1);
    /* a stream never finishes, however much is done; t/0's done prefix
     * [100, 120) is folded, and its splits hold t/0's chunks [120, 130)
     * and (made by the last lease request) [130, 140): 4 splits, none DONE */
    sl_master_state_job_status_t js;
    cr_assert_eq(sl_master_state_job_status(m, "j", &js, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(js.finished, false);
    cr_assert_eq(js.num_splits, 4);
    cr_assert_eq(js.done, 0);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_kafka, a_stream_at_its_head_keeps_one_chunk_there)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 from 100 */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    /* no high watermark told yet, or no record at the start: no chunk (a
     * read never starts at the log's end) */
    no_lease(m);
    sl_master_state_kafka_high(m, "j", "t", 0, 100, 0);
    no_lease(m);
    sl_master_state_kafka_high(m, "j", "t", 0, 101, 0);
    sl_master_lease_t a = lease(m, "t/0", 100, 10);
    /* records up to 115: chunk [110, 120) has some */
    sl_master_state_kafka_high(m, "j", "t", 0, 115, 0);
    lease(m, "t/0", 110, 10);
    no_lease(m);
    commit(m, &a, 0, 10, 1); /* one open: room for another, but [120, 130) is empty */
    no_lease(m);
    sl_master_state_kafka_high(m, "j", "t", 0, 120, 7); /* a stale index: looked up by name */
    no_lease(m);
    sl_master_state_kafka_high(m, "j", "t", 0, 121, 0);
    lease(m, "t/0", 120, 10);
    /* unknown partitions and jobs are ignored */
    sl_master_state_kafka_high(m, "j", "t", 5, 1000, 0);
    sl_master_state_kafka_high(m, "nope", "t", 0, 1000, 0);
    assert_positions(m, "t/0:110/3 ");
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_kafka, a_bounded_job_finishes_at_its_stops)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_kafka_partition_t p[1] = {{"b", 3, 5, 30}};
    sl_master_state_job_spec_t spec = kspec("j", p, 1);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t l[3];
    l[0] = lease(m, "b/3", 5, 10);
    l[1] = lease(m, "b/3", 15, 10);
    no_lease(m);
    commit(m, &l[0], 0, 10, 1);
    commit(m, &l[1], 0, 10, 2);
    /* every chunk made so far is done, but one is still to come */
    sl_master_state_job_status_t js;
    cr_assert_eq(sl_master_state_job_status(m, "j", &js, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(js.finished, false);
    l[2] = lease(m, "b/3", 25, 5); /* cut at stop */
    no_lease(m);
    commit(m, &l[2], 0, 5, 3);
    cr_assert_eq(sl_master_state_job_status(m, "j", &js, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(js.finished, true);
    assert_positions(m, "b/3:30/3 ");
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_kafka, refusals_name_the_reason)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 2);
    spec.shuffle = true;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "shuffle is refused for a Kafka job") != NULL, "%s", err.msg);
    spec = kspec("j", g_parts, 2);
    spec.epochs = 2;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "one epoch (2 asked") != NULL, "%s", err.msg);
    spec = kspec("j", g_parts, 2);
    spec.ranks = 2;
    spec.static_sharding = true;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "static sharding is refused") != NULL, "%s", err.msg);
    spec = kspec("j", g_parts, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "without partitions") != NULL, "%s", err.msg);
    sl_master_kafka_partition_t bad[2] = {{"t t", 0, 0, -1}, {"t", 0, 0, -1}};
    spec = kspec("j", bad, 1);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "Kafka topic 't t'") != NULL, "%s", err.msg);
    sl_master_kafka_partition_t twice[2] = {{"t", 0, 0, -1}, {"t", 0, 5, -1}};
    spec = kspec("j", twice, 2);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "partition t/0 named twice") != NULL, "%s", err.msg);
    sl_master_kafka_partition_t back[1] = {{"t", 0, 10, 5}};
    spec = kspec("j", back, 1);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "start 10, stop 5") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_job_ids(m, NULL, 0), 0);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_kafka, partitions_added_get_chunks_and_survive_restarts)
{
    char *dir = tu_mkdtemp("master-kafka");
    sl_master_state_t *m = open_master(dir);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 only */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    sl_master_lease_t a = lease(m, "t/0", 100, 10);
    lease(m, "t/0", 110, 10);
    no_lease(m);
    sl_master_kafka_partition_t p2 = {"u", 2, 7, -1};
    cr_assert_eq(sl_master_state_kafka_partition_add(m, "j", &p2, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    cr_assert_eq(sl_master_state_kafka_partition_add(m, "j", &p2, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "reads u/2 already") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_kafka_partition_add(m, "nope", &p2, &err), SL_ERR_NOT_FOUND);
    assert_positions(m, "t/0:100/2 u/2:7/0 ");
    sl_master_lease_t c = lease(m, "u/2", 7, 10);
    commit(m, &c, 0, 3, 1);
    commit(m, &a, 0, 10, 2);
    assert_positions(m, "t/0:110/2 u/2:10/1 ");
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *mem = dump_of(m);
    cr_assert(strstr(mem, " kafka u/2 start 7 stop -1 chunks 1 folded 0\n") != NULL, "%s", mem);
    ms_destroy(m);
    /* replay of the journal */
    m = open_master(dir);
    backlog(m, "j"); /* not journaled: told again after a restart */
    char *replayed = dump_of(m);
    cr_assert_str_eq(replayed, mem);
    assert_positions(m, "t/0:110/2 u/2:10/1 ");
    /* a snapshot, then more records after it */
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t d = lease(m, "t/0", 120, 10);
    lease(m, "u/2", 17, 10);
    commit(m, &d, 0, 10, 3);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *mem2 = dump_of(m);
    ms_destroy(m);
    m = open_master(dir);
    backlog(m, "j"); /* not journaled: told again after a restart */
    char *replayed2 = dump_of(m);
    cr_assert_str_eq(replayed2, mem2);
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    m = open_master(dir);
    char *snap = dump_of(m);
    cr_assert_str_eq(snap, mem2);
    /* a table job has no partitions to add */
    ms_destroy(m);
    free(mem);
    free(replayed);
    free(mem2);
    free(replayed2);
    free(snap);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* ---- folding a stream's done prefix ---------------------------------------------- */

/* Lease t/0's next chunk, at first (rows 10), and commit all of it. */
static sl_master_lease_t read_chunk(sl_master_state_t *m, uint64_t first, uint64_t *nonce)
{
    sl_master_lease_t l = lease(m, "t/0", first, 10);
    commit(m, &l, 0, 10, ++*nonce);
    return l;
}

static uint32_t num_splits(sl_master_state_t *m)
{
    sl_master_state_job_status_t js;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(m, "j", &js, &err), SL_OK, "%s", err.msg);
    return js.num_splits;
}

/* A stream partition's contiguous DONE prefix is folded into one offset:
 * after 300 chunks done the job holds 2 splits (chunks_ahead), not 300;
 * replay and snapshots give the same state; a token whose undelivered
 * batch is of a chunk folded since (its split holding another chunk now)
 * still resumes exactly after what was handed out, and one whose chunk
 * is older than the ring is refused, never wrong. */
Test(master_state_kafka, a_streams_done_prefix_is_folded)
{
    char *dir = tu_mkdtemp("master-kafka-fold");
    sl_master_state_t *m = open_master(dir);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 from 100 */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    uint64_t nonce = 0, off = 100;
    for (int i = 0; i < 50; i++, off += 10)
        read_chunk(m, off, &nonce);
    cr_assert_leq(num_splits(m), 2, "%u splits for 50 chunks", num_splits(m));
    assert_positions(m, "t/0:600/50 ");
    /* a batch of chunk [600, 610) committed, not handed out by the trainer
     * yet: [603, 605) */
    sl_master_lease_t x = read_chunk(m, off, &nonce);
    off += 10;
    sl_master_token_exclude_t und = {0, x.split, 3, 5, x.generation};
    /* its split holds later chunks since */
    for (int i = 0; i < 20; i++, off += 10)
        read_chunk(m, off, &nonce);
    cr_assert_leq(num_splits(m), 2);
    sl_master_lease_t open = lease(m, "t/0", off, 10); /* [810, 820): 2 of it delivered */
    commit(m, &open, 0, 2, ++nonce);
    assert_positions(m, "t/0:812/72 ");
    void *tok;
    size_t len;
    token(m, &und, 1, &tok, &len);
    /* the token needs t/0 from 603: [603, 605) was not handed out */
    int64_t need = -1;
    const void *toks[1] = {tok};
    size_t lens[1] = {len};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 1, &need, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need, 603);
    /* the same state after a replay of the journal, and from a snapshot */
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *mem = dump_of(m);
    cr_assert(strstr(mem, " folded 71\n") != NULL, "%s", mem);
    ms_destroy(m);
    m = open_master(dir);
    backlog(m, "j");
    char *replayed = dump_of(m);
    cr_assert_str_eq(replayed, mem);
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    m = open_master(dir);
    backlog(m, "j");
    char *snap = dump_of(m);
    cr_assert_str_eq(snap, mem);
    /* the restored state goes on folding, and its token is the same */
    void *tok2;
    size_t len2;
    token(m, &und, 1, &tok2, &len2);
    cr_assert_eq(len2, len);
    cr_assert(memcmp(tok2, tok, len) == 0);
    sl_free(ALLOC, tok2, len2);
    commit(m, &open, 2, 10, ++nonce);
    for (int i = 0; i < 300; i++, off += 10)
        read_chunk(m, off + 10, &nonce);
    cr_assert_leq(num_splits(m), 2);
    assert_positions(m, "t/0:3820/372 ");
    /* the undelivered batch's chunk is now older than the ring: refused */
    cr_assert_eq(sl_master_state_token_encode(m, "j", &und, 1, &tok2, &len2, &err), SL_ERR_AGAIN);
    cr_assert(strstr(err.msg, "done and folded") != NULL, "%s", err.msg);
    /* resumed from the first token: t/0 from 603, [605, 812) delivered */
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 1, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    sl_master_lease_t r = lease(m, "t/0", 603, 10);
    cr_assert_eq(r.num_todo, 1);
    cr_assert_eq(r.todo[0].from_row, 0);
    cr_assert_eq(r.todo[0].to_row, 2);
    sl_free(ALLOC, tok, len);
    free(mem);
    free(replayed);
    free(snap);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* ---- every allocation failure ------------------------------------------------------ */

typedef struct life {
    ml_life_t b;
    sl_master_lease_t l[2];
} life_t;

enum { LIFE_STEPS = 12 };

static sl_err_t life_step(void *life, int step, sl_error_t *err)
{
    life_t *x = life;
    sl_master_commit_result_t res;
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 2);
    sl_err_t rc = SL_OK;
    switch (step) {
    case 0:
        return ms_open(x->b.dir, &x->b.o, 0, &x->b.m, NULL, err);
    case 1:
        rc = sl_master_state_job_add(x->b.m, &spec, err);
        if (rc == SL_OK) backlog(x->b.m, "j");
        return rc;
    case 2:
    case 3:
        return sl_master_state_lease_next(x->b.m, "j", "w", 0, &x->l[step - 2], err);
    case 4:
        res = sl_master_state_commit(x->b.m, "j", 0, x->l[0].split, x->l[0].generation, 0, 10, "c",
                                     1, err);
        return res == SL_MASTER_COMMIT_ERROR ? err->code
               : res != SL_MASTER_COMMITTED  ? SL_ERR_INVALID
                                             : SL_OK;
    case 5:
        res = sl_master_state_commit(x->b.m, "j", 0, x->l[1].split, x->l[1].generation, 2, 5, "c",
                                     2, err);
        return res == SL_MASTER_COMMIT_ERROR ? err->code
               : res != SL_MASTER_COMMITTED  ? SL_ERR_INVALID
                                             : SL_OK;
    case 6: {
        sl_master_kafka_partition_t p = {"u", 4, 9, -1};
        rc = sl_master_state_kafka_partition_add(x->b.m, "j", &p, err);
        if (rc == SL_OK) backlog(x->b.m, "j");
        return rc;
    }
    case 7: {
        sl_master_lease_t l;
        return sl_master_state_lease_next(x->b.m, "j", "w2", 0, &l, err);
    }
    case 8: {
        void *tok;
        size_t len;
        sl_master_token_exclude_t und = {0, x->l[1].split, 3, 4, 0};
        sl_master_token_req_t req = {.job_id = "j",
                                     .client_id = "c",
                                     .world_size = 1,
                                     .undelivered = &und,
                                     .num_undelivered = 1};
        rc = sl_master_state_token_take(x->b.m, &req, &tok, &len, err); /* version 5 */
        if (rc != SL_OK) return rc;
        sl_master_kafka_partition_t three[3] = {g_parts[0], g_parts[1], {"u", 4, 9, -1}};
        sl_master_state_job_spec_t s3 = kspec("j", three, 3);
        const void *toks[1] = {tok};
        int64_t need[3];
        rc = sl_master_state_kafka_token_needs(x->b.m, &s3, toks, &len, 1, need, err);
        if (rc == SL_OK) rc = sl_master_state_job_replace(x->b.m, &s3, toks, &len, 1, err);
        if (rc == SL_OK) backlog(x->b.m, "j");
        sl_free(ALLOC, tok, len);
        return rc;
    }
    case 9: {
        sl_master_lease_t l;
        return sl_master_state_lease_next(x->b.m, "j", "w3", 0, &l, err);
    }
    case 10:
        return ms_compact(x->b.m, err);
    case 11:
        return ms_sync(x->b.m, err);
    }
    return sl_error_set(err, SL_ERR_INVALID, "no step %d", step);
}

Test(master_state_kafka, every_allocation_failure_is_a_clean_error)
{
    sl_master_state_opts_t o = opts();
    o.allocator = NULL;
    ml_ops_t ops = {.steps = LIFE_STEPS, .size = sizeof(life_t), .opts = o, .step = life_step};
    char *want_end = NULL;
    uint64_t walked = ml_walk(&ops, &g_ta, &want_end);
    cr_assert(strstr(want_end, " kafka u/4 start 9 stop -1 chunks 1 folded 0\n") != NULL, "%s",
              want_end);
    cr_assert_gt(walked, LIFE_STEPS);
    free(want_end);
    tu_alloc_assert_clean(&g_ta);
}
