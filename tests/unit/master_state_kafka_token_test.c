/* Resume tokens of Kafka jobs in the master's state machine
 * (src/dpp/master/state/state_kafka_token.c): each partition resumed at
 * its prefix, version 5's per-rank tokens combined by union, folded
 * chunks' owners kept for the tokens, what they cost a stream. */
#include "master_state_kafka_util.h"

/* ---- resume tokens ------------------------------------------------------------------ */

Test(master_state_kafka, tokens_resume_each_partition_at_its_prefix)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 2);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    sl_master_lease_t a0 = lease(m, "t/0", 100, 10), b0 = lease(m, "t/1", 0, 10);
    sl_master_lease_t a1 = lease(m, "t/0", 110, 10), b1 = lease(m, "t/1", 10, 10);
    (void)b1;
    commit(m, &a0, 0, 10, 1); /* t/0 [100, 110) */
    commit(m, &a1, 2, 6, 2);  /* t/0 [112, 116) */
    commit(m, &b0, 0, 3, 3);  /* t/1 [0, 3) */
    commit(m, &b0, 5, 8, 4);  /* t/1 [5, 8) */
    /* rank 0 handed out everything; rank 1 not t/0 [104, 106) nor t/1 [5, 8) */
    void *t0, *t1;
    size_t l0, l1;
    token(m, NULL, 0, &t0, &l0);
    sl_master_token_exclude_t und[2] = {{0, a0.split, 4, 6, 0}, {0, b0.split, 5, 8, 0}};
    token(m, und, 2, &t1, &l1);
    /* what the token needs: t/0 from 110 */
    const void *toks[2] = {t0, t1};
    size_t lens[2] = {l0, l1};
    int64_t need[2] = {-1, -1};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 1, need, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need[0], 110);
    cr_assert_eq(need[1], 3);
    /* resume from rank 0's token in place of the job */
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 1, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    assert_positions(m, "t/0:110/1 t/1:3/1 ");
    /* t/0 starts at 110 with [112, 116) delivered; t/1 at 3 with [5, 8) */
    sl_master_lease_t r0 = lease(m, "t/0", 110, 10);
    cr_assert_eq(r0.num_todo, 2);
    cr_assert_eq(r0.todo[0].from_row, 0);
    cr_assert_eq(r0.todo[0].to_row, 2);
    cr_assert_eq(r0.todo[1].from_row, 6);
    cr_assert_eq(r0.todo[1].to_row, 10);
    sl_master_lease_t r1 = lease(m, "t/1", 3, 10);
    cr_assert_eq(r1.num_todo, 2);
    cr_assert_eq(r1.todo[0].from_row, 0);
    cr_assert_eq(r1.todo[0].to_row, 2);
    cr_assert_eq(r1.todo[1].from_row, 5);
    cr_assert_eq(r1.todo[1].to_row, 10);
    /* two version-3 tokens (whole-job, intersected before version 5:
     * exact only when taken after every rank's last commit) are refused */
    char *before = dump_of(m);
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 2, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "2 version-3 tokens") != NULL, "%s", err.msg);
    char *after = dump_of(m);
    cr_assert_str_eq(after, before, "the refused resume changed the job");
    free(before);
    free(after);
    /* a token of this partition set with a new partition: it starts where
     * the spec says */
    sl_master_kafka_partition_t three[3] = {g_parts[0], g_parts[1], {"v", 0, 40, -1}};
    sl_master_state_job_spec_t spec3 = kspec("j", three, 3);
    int64_t need3[3];
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec3, toks, lens, 1, need3, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need3[0], 110);
    cr_assert_eq(need3[1], 3);
    cr_assert_eq(need3[2], 40);
    /* refusals: a partition the job does not read, another job, a table token */
    sl_master_state_job_spec_t spec1 = kspec("j", g_parts + 1, 1);
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec1, toks, lens, 1, need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "names t/0, which job 'j' does not read") != NULL, "%s", err.msg);
    sl_master_state_job_spec_t other = kspec("k", g_parts, 2);
    cr_assert_eq(sl_master_state_job_resume(m, &other, t0, l0, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume token of job 'j', not of job 'k'") != NULL, "%s", err.msg);
    sl_wh_split_t split = {.path = "f.slc", .stripe_end = 1, .num_rows = 10};
    sl_master_state_job_spec_t table = {
        .job_id = "j", .splits = &split, .num_splits = 1, .epochs = 1};
    cr_assert_eq(sl_master_state_job_replace(m, &table, toks, lens, 1, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume token of a Kafka job (version 3)") != NULL, "%s", err.msg);
    ((uint8_t *)t0)[l0 - 1] ^= 1;
    cr_assert_eq(sl_master_state_job_resume(m, &other, t0, l0, &err), SL_ERR_CORRUPT);
    sl_free(ALLOC, t0, l0);
    sl_free(ALLOC, t1, l1);
    /* a table job's token for a Kafka job */
    cr_assert_eq(sl_master_state_job_add(
                     m,
                     &(sl_master_state_job_spec_t){
                         .job_id = "tab", .splits = &split, .num_splits = 1, .epochs = 1},
                     &err),
                 SL_OK, "%s", err.msg);
    void *tt;
    size_t tl;
    cr_assert_eq(sl_master_state_token_encode(m, "tab", NULL, 0, &tt, &tl, &err), SL_OK, "%s",
                 err.msg);
    sl_master_state_job_spec_t ktab = kspec("tab", g_parts, 2);
    cr_assert_eq(sl_master_state_job_resume(m, &ktab, tt, tl, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume token of a table job (version 2)") != NULL, "%s", err.msg);
    sl_free(ALLOC, tt, tl);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* ---- version 5: one rank's token, combined by union ---------------------------------- */

static void commit_as(sl_master_state_t *m, const sl_master_lease_t *l, uint64_t from, uint64_t to,
                      const char *client, uint64_t nonce)
{
    sl_error_t err = {0};
    cr_assert_eq(
        sl_master_state_commit(m, "j", 0, l->split, l->generation, from, to, client, nonce, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
}

static sl_err_t rank_token(sl_master_state_t *m, const char *client, uint32_t rank, uint32_t world,
                           const sl_master_token_exclude_t *und, uint32_t n, void **buf,
                           size_t *len, sl_error_t *err)
{
    sl_master_token_req_t req = {.job_id = "j",
                                 .client_id = client,
                                 .rank = rank,
                                 .world_size = world,
                                 .undelivered = und,
                                 .num_undelivered = n};
    return sl_master_state_token_take(m, &req, buf, len, err);
}

/* Issue 28 for Kafka: rank 0 takes its token before rank 1's last batches
 * are committed (ranks never take them at the same instant). Version 3
 * intersected whole-job tokens, so rank 1's batches committed after rank
 * 0's token were missing from it and trained again after the resume;
 * version 5 says per rank what it handed out and the union is exact. */
Test(master_state_kafka, rank_tokens_union_what_each_rank_handed_out)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 2);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    sl_master_lease_t a0 = lease(m, "t/0", 100, 10), b0 = lease(m, "t/1", 0, 10);
    sl_master_lease_t a1 = lease(m, "t/0", 110, 10);
    commit_as(m, &a0, 0, 10, "c0", 1); /* rank 0: t/0 [100, 110) */
    commit_as(m, &b0, 0, 3, "c0", 2);  /* rank 0: t/1 [0, 3) */
    void *t0, *t1;
    size_t l0, l1;
    cr_assert_eq(rank_token(m, "c0", 0, 2, NULL, 0, &t0, &l0, &err), SL_OK, "%s", err.msg);
    commit_as(m, &a1, 2, 6, "c1", 3); /* rank 1, after rank 0's token: t/0 [112, 116) */
    commit_as(m, &b0, 5, 8, "c1", 4); /* rank 1: t/1 [5, 8), not handed out */
    sl_master_token_exclude_t und = {0, b0.split, 5, 8, b0.generation};
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t1, &l1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(((const uint8_t *)t0)[4], SL_MASTER_KAFKA_RANK_TOKEN_VERSION);
    const void *toks[2] = {t0, t1};
    size_t lens[2] = {l0, l1};
    /* one token of a world of two: refused, naming the missing rank */
    int64_t need[2] = {-1, -1};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 1, need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "1 token for a world of 2 ranks: rank 1 missing") != NULL, "%s",
              err.msg);
    const void *twice[2] = {t0, t0};
    size_t twlens[2] = {l0, l0};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, twice, twlens, 2, need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "rank 0 of 2 appears twice; rank 1 missing") != NULL, "%s", err.msg);
    /* a version-3 token with them: refused */
    void *t3;
    size_t l3;
    token(m, NULL, 0, &t3, &l3);
    const void *mixed[2] = {t0, t3};
    size_t mlens[2] = {l0, l3};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, mixed, mlens, 2, need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "1 of 2 tokens are of version 5") != NULL, "%s", err.msg);
    sl_free(ALLOC, t3, l3);
    /* for a table job: refused naming the kind */
    sl_wh_split_t split = {.path = "f.slc", .stripe_end = 1, .num_rows = 10};
    sl_master_state_job_spec_t table = {
        .job_id = "j", .splits = &split, .num_splits = 1, .epochs = 1};
    cr_assert_eq(sl_master_state_job_replace(m, &table, toks, lens, 2, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 1 of 2: resume token of a Kafka job (version 5)") != NULL,
              "%s", err.msg);
    cr_assert_eq(sl_master_state_job_replace(m, &table, toks, lens, 1, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume token of a Kafka job (version 5)") != NULL, "%s", err.msg);
    /* the union: t/0 from 110 with [112, 116) delivered (rank 1's, after
     * rank 0's token), t/1 from 3 ([5, 8) was not handed out) */
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 2, need, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need[0], 110);
    cr_assert_eq(need[1], 3);
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 2, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    assert_positions(m, "t/0:110/1 t/1:3/0 ");
    sl_master_lease_t r0 = lease(m, "t/0", 110, 10);
    cr_assert_eq(r0.num_todo, 2);
    cr_assert_eq(r0.todo[0].from_row, 0);
    cr_assert_eq(r0.todo[0].to_row, 2);
    cr_assert_eq(r0.todo[1].from_row, 6);
    cr_assert_eq(r0.todo[1].to_row, 10);
    sl_master_lease_t r1 = lease(m, "t/1", 3, 10);
    cr_assert_eq(r1.num_todo, 1);
    cr_assert_eq(r1.todo[0].from_row, 0);
    cr_assert_eq(r1.todo[0].to_row, 10);
    /* tokens of the old run for the new one: refused (another run) */
    void *n0;
    size_t nl0;
    commit_as(m, &r0, 0, 2, "c0", 5);
    cr_assert_eq(rank_token(m, "c0", 0, 2, NULL, 0, &n0, &nl0, &err), SL_OK, "%s", err.msg);
    const void *runs[2] = {n0, t1};
    size_t rlens[2] = {nl0, l1};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, runs, rlens, 2, need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 2 of 2: taken in another run") != NULL, "%s", err.msg);
    sl_free(ALLOC, n0, nl0);
    sl_free(ALLOC, t0, l0);
    sl_free(ALLOC, t1, l1);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* A stream's owners are kept for the last 2 x M_KAFKA_ATTR_CHUNKS (16)
 * folded chunks and a token counts all below the last 8 as delivered:
 * rank 1 holding a batch of a chunk folded 5 chunks ago still takes its
 * token and rank 0's does not count that batch; 20 chunks ago it is
 * refused until handed out. Replay and snapshots keep the owners. */
Test(master_state_kafka, a_folded_chunks_owners_stay_for_the_tokens)
{
    char *dir = tu_mkdtemp("master-kafka-owners");
    sl_master_state_t *m = open_master(dir);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 from 100 */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    uint64_t nonce = 0, off = 100;
    sl_master_lease_t x = lease(m, "t/0", off, 10);
    commit_as(m, &x, 0, 4, "c0", ++nonce);
    commit_as(m, &x, 4, 8, "c1", ++nonce); /* rank 1 holds [104, 108) */
    commit_as(m, &x, 8, 10, "c0", ++nonce);
    sl_master_token_exclude_t und = {0, x.split, 4, 8, x.generation};
    for (off += 10; off < 160; off += 10) {
        sl_master_lease_t l = lease(m, "t/0", off, 10);
        commit_as(m, &l, 0, 10, "c0", ++nonce);
    }
    assert_positions(m, "t/0:160/6 ");
    void *t0, *t1;
    size_t l0, l1;
    cr_assert_eq(rank_token(m, "c0", 0, 2, NULL, 0, &t0, &l0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t1, &l1, &err), SL_OK, "%s", err.msg);
    /* the same after a replay and from a snapshot */
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *mem = dump_of(m);
    cr_assert(strstr(mem, " attr cur c0:0[104,100)") == NULL, "%s", mem);
    cr_assert(strstr(mem, "c1:0[104,108)") != NULL, "%s", mem);
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
    void *t1b;
    size_t l1b;
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t1b, &l1b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(l1b, l1);
    cr_assert(memcmp(t1b, t1, l1) == 0, "the restored state's token differs");
    sl_free(ALLOC, t1b, l1b);
    /* the union resumes at 104: [104, 108) was not handed out */
    const void *toks[2] = {t0, t1};
    size_t lens[2] = {l0, l1};
    int64_t need = -1;
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 2, &need, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need, 104);
    /* 20 chunks on, [104, 108) is below the owners' floor: refused */
    for (; off < 360; off += 10) {
        sl_master_lease_t l = lease(m, "t/0", off, 10);
        commit_as(m, &l, 0, 10, "c0", ++nonce);
    }
    void *t2;
    size_t l2;
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t2, &l2, &err), SL_ERR_AGAIN);
    cr_assert(strstr(err.msg, "offsets [104, 108)) is of a chunk done more than 8 chunks ago") !=
                  NULL,
              "%s", err.msg);
    /* handed out: its token counts everything below the floor as delivered */
    cr_assert_eq(rank_token(m, "c1", 1, 2, NULL, 0, &t2, &l2, &err), SL_OK, "%s", err.msg);
    const void *one[1] = {t2};
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, one, &l2, 1, &need, &err),
                 SL_ERR_INVALID); /* rank 0's is missing */
    sl_free(ALLOC, t2, l2);
    sl_free(ALLOC, t0, l0);
    sl_free(ALLOC, t1, l1);
    free(mem);
    free(replayed);
    free(snap);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* Ranks take their tokens at different moments and the partition folds
 * between them: rank 1 holds [104, 108) when it takes its token; rank 0's,
 * 12 chunks later, counts everything below 150 as delivered, but lists
 * its own offsets from 100 on, so the union still leaves [104, 108) to
 * read (a prefix that swallowed it would lose it). 30 chunks later rank
 * 0's list starts above rank 1's prefix: the set is refused, naming both. */
Test(master_state_kafka, a_later_tokens_prefix_does_not_swallow_an_earlier_ranks_batch)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 from 100 */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    uint64_t nonce = 0, off = 100;
    sl_master_lease_t x = lease(m, "t/0", off, 10);
    commit_as(m, &x, 0, 4, "c0", ++nonce);
    commit_as(m, &x, 4, 8, "c1", ++nonce);
    commit_as(m, &x, 8, 10, "c0", ++nonce);
    sl_master_token_exclude_t und = {0, x.split, 4, 8, x.generation};
    void *t0, *t1;
    size_t l0, l1;
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t1, &l1, &err), SL_OK, "%s", err.msg);
    for (off += 10; off < 230; off += 10) {
        sl_master_lease_t l = lease(m, "t/0", off, 10);
        commit_as(m, &l, 0, 10, "c0", ++nonce);
    }
    assert_positions(m, "t/0:230/13 ");
    cr_assert_eq(rank_token(m, "c0", 0, 2, NULL, 0, &t0, &l0, &err), SL_OK, "%s", err.msg);
    const void *toks[2] = {t0, t1};
    size_t lens[2] = {l0, l1};
    int64_t need = -1;
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 2, &need, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(need, 104);
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 2, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    sl_master_lease_t r = lease(m, "t/0", 104, 10);
    cr_assert_eq(r.num_todo, 1);
    cr_assert_eq(r.todo[0].from_row, 0);
    cr_assert_eq(r.todo[0].to_row, 4);
    sl_free(ALLOC, t0, l0);
    sl_free(ALLOC, t1, l1);
    /* the same with rank 0's token 30 chunks on: refused */
    ms_destroy(m);
    m = open_master(NULL);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    off = 100;
    x = lease(m, "t/0", off, 10);
    commit_as(m, &x, 0, 4, "c0", ++nonce);
    commit_as(m, &x, 4, 8, "c1", ++nonce);
    commit_as(m, &x, 8, 10, "c0", ++nonce);
    und.split = x.split;
    und.generation = x.generation;
    cr_assert_eq(rank_token(m, "c1", 1, 2, &und, 1, &t1, &l1, &err), SL_OK, "%s", err.msg);
    for (off += 10; off < 400; off += 10) {
        sl_master_lease_t l = lease(m, "t/0", off, 10);
        commit_as(m, &l, 0, 10, "c0", ++nonce);
    }
    cr_assert_eq(rank_token(m, "c0", 0, 2, NULL, 0, &t0, &l0, &err), SL_OK, "%s", err.msg);
    toks[0] = t0;
    lens[0] = l0;
    toks[1] = t1;
    lens[1] = l1;
    cr_assert_eq(sl_master_state_kafka_token_needs(m, &spec, toks, lens, 2, &need, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 1 of 2 lists t/0 from offset 240, above token 2's prefix "
                              "100: the partition moved more than 8 chunks") != NULL,
              "%s", err.msg);
    sl_free(ALLOC, t0, l0);
    sl_free(ALLOC, t1, l1);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* A stream has one epoch, so its owners are forgotten as the folds leave
 * them no entry (at a new client's first commit), not at an epoch's end:
 * 100 more clients, one chunk each, evicted as they go, leave the master
 * no larger. */
Test(master_state_kafka, a_streams_forgotten_owners_cost_nothing)
{
    sl_master_state_t *m = open_master(NULL);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = kspec("j", g_parts, 1); /* t/0 from 100 */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    backlog(m, "j");
    uint64_t live_at_40 = 0, off = 100;
    for (uint32_t i = 0; i < 140; i++, off += 10) {
        char name[32];
        snprintf(name, sizeof name, "client-%u", i);
        sl_master_lease_t l = lease(m, "t/0", off, 10);
        commit_as(m, &l, 0, 10, name, 1);
        uint32_t evicted = 0;
        cr_assert_eq(
            sl_master_state_evict_clients(m, 1000 * (uint64_t)(i + 1), 500, &evicted, &err), SL_OK,
            "%s", err.msg);
        if (i == 39) live_at_40 = g_ta.live;
    }
    cr_assert_eq(g_ta.live, live_at_40, "%llu allocations live after 140 clients, %llu after 40",
                 (unsigned long long)g_ta.live, (unsigned long long)live_at_40);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}
