/* Tests of Kafka jobs in the master's state machine (state.h, "Kafka
 * jobs"; src/dpp/master/state/state_kafka.c, state_kafka_token.c): chunks made on
 * demand as leases ask, a bounded job that finishes and a stream that does
 * not, partitions added, positions, replay and snapshots equal to memory,
 * resume tokens over partitions (one and two ranks, what they need), the
 * refusals, and every allocation failure of a Kafka job's life. Every test
 * runs on the counting allocator of testutil.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "master_life.h"
#include "testutil.h"

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state_kafka, .init = init_alloc);

/* t/0 from offset 100 and t/1 from 0, streams, chunks of 10 offsets. */
static const sl_master_kafka_partition_t g_parts[2] = {{"t", 0, 100, -1}, {"t", 1, 0, -1}};

static sl_master_state_job_spec_t kspec(const char *id, const sl_master_kafka_partition_t *parts,
                                        uint32_t n)
{
    return (sl_master_state_job_spec_t){.job_id = id,
                                        .epochs = 1,
                                        .spec_json = "{}",
                                        .kafka_partitions = parts,
                                        .num_kafka_partitions = n,
                                        .kafka_chunk = 10};
}

static sl_master_state_opts_t opts(void)
{
    return (sl_master_state_opts_t){
        .lease_timeout_ms = 1000, .kafka_chunks_ahead = 2, .allocator = ALLOC};
}

static sl_master_state_t *open_master(const char *dir)
{
    sl_master_state_opts_t o = opts();
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

static char *dump_of(const sl_master_state_t *m)
{
    return ml_dump(m, ALLOC);
}

/* Lease the next chunk of job "j" to w: checks its path and offsets. */
static sl_master_lease_t lease(sl_master_state_t *m, const char *path, uint64_t first,
                               uint64_t rows)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(l.path, path);
    cr_assert_eq(l.first_row, first, "%s: first %llu", path, (unsigned long long)l.first_row);
    cr_assert_eq(l.num_rows, rows);
    cr_assert_eq(l.stripe_begin, 0);
    cr_assert_eq(l.stripe_end, 0);
    return l;
}

/* The broker's high watermarks: far ahead (a backlog to read). */
static void backlog(sl_master_state_t *m, const char *job)
{
    const char *topics[] = {"t", "u", "b"};
    for (int t = 0; t < 3; t++)
        for (int32_t p = 0; p < 5; p++)
            sl_master_state_kafka_high(m, job, topics[t], p, 1000000, (uint32_t)p);
}

static void no_lease(sl_master_state_t *m)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_ERR_AGAIN,
                 "a lease of split %u", l.split);
}

static void commit(sl_master_state_t *m, const sl_master_lease_t *l, uint64_t from, uint64_t to,
                   uint64_t nonce)
{
    sl_error_t err = {0};
    cr_assert_eq(
        sl_master_state_commit(m, "j", 0, l->split, l->generation, from, to, "c", nonce, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
}

/* "topic/partition:committed/chunks " for every partition of job j. */
static void assert_positions(sl_master_state_t *m, const char *want)
{
    sl_master_kafka_position_t pos[8];
    uint32_t n = sl_master_state_kafka_positions(m, "j", pos, 8);
    char got[512] = "";
    for (uint32_t i = 0; i < n && i < 8; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s/%d:%lld/%u ", pos[i].topic,
                 pos[i].partition, (long long)pos[i].committed, pos[i].chunks);
    cr_assert_str_eq(got, want);
}

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

/* ---- resume tokens ------------------------------------------------------------------ */

static void token(sl_master_state_t *m, const sl_master_token_exclude_t *und, uint32_t n,
                  void **buf, size_t *len)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_encode(m, "j", und, n, buf, len, &err), SL_OK, "%s",
                 err.msg);
}

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
