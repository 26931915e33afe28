/* What master_state_kafka_test.c and master_state_kafka_token_test.c share:
 * the counting allocator, a Kafka job's spec over two partitions, a master
 * on a state directory, lease, commit and position helpers. */
#ifndef SLUICE_TESTS_MASTER_STATE_KAFKA_UTIL_H
#define SLUICE_TESTS_MASTER_STATE_KAFKA_UTIL_H

/* Every helper here: a test file uses only some. */
#define MK_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "master_life.h"
#include "testutil.h"

MK_FN tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

MK_FN void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state_kafka, .init = init_alloc);

/* t/0 from offset 100 and t/1 from 0, streams, chunks of 10 offsets. */
MK_FN const sl_master_kafka_partition_t g_parts[2] = {{"t", 0, 100, -1}, {"t", 1, 0, -1}};

MK_FN sl_master_state_job_spec_t kspec(const char *id, const sl_master_kafka_partition_t *parts,
                                       uint32_t n)
{
    return (sl_master_state_job_spec_t){.job_id = id,
                                        .epochs = 1,
                                        .spec_json = "{}",
                                        .kafka_partitions = parts,
                                        .num_kafka_partitions = n,
                                        .kafka_chunk = 10};
}

MK_FN sl_master_state_opts_t opts(void)
{
    return (sl_master_state_opts_t){
        .lease_timeout_ms = 1000, .kafka_chunks_ahead = 2, .allocator = ALLOC};
}

MK_FN sl_master_state_t *open_master(const char *dir)
{
    sl_master_state_opts_t o = opts();
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

MK_FN char *dump_of(const sl_master_state_t *m)
{
    return ml_dump(m, ALLOC);
}

/* Lease the next chunk of job "j" to w: checks its path and offsets. */
MK_FN sl_master_lease_t lease(sl_master_state_t *m, const char *path, uint64_t first, uint64_t rows)
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
MK_FN void backlog(sl_master_state_t *m, const char *job)
{
    const char *topics[] = {"t", "u", "b"};
    for (int t = 0; t < 3; t++)
        for (int32_t p = 0; p < 5; p++)
            sl_master_state_kafka_high(m, job, topics[t], p, 1000000, (uint32_t)p);
}

MK_FN void no_lease(sl_master_state_t *m)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_ERR_AGAIN,
                 "a lease of split %u", l.split);
}

MK_FN void commit(sl_master_state_t *m, const sl_master_lease_t *l, uint64_t from, uint64_t to,
                  uint64_t nonce)
{
    sl_error_t err = {0};
    cr_assert_eq(
        sl_master_state_commit(m, "j", 0, l->split, l->generation, from, to, "c", nonce, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
}

/* "topic/partition:committed/chunks " for every partition of job j. */
MK_FN void assert_positions(sl_master_state_t *m, const char *want)
{
    sl_master_kafka_position_t pos[8];
    uint32_t n = sl_master_state_kafka_positions(m, "j", pos, 8);
    char got[512] = "";
    for (uint32_t i = 0; i < n && i < 8; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s/%d:%lld/%u ", pos[i].topic,
                 pos[i].partition, (long long)pos[i].committed, pos[i].chunks);
    cr_assert_str_eq(got, want);
}

MK_FN void token(sl_master_state_t *m, const sl_master_token_exclude_t *und, uint32_t n, void **buf,
                 size_t *len)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_encode(m, "j", und, n, buf, len, &err), SL_OK, "%s",
                 err.msg);
}

#endif
