/* Benchmark of a Kafka stream job's resume tokens in the DPP master's state
 * machine (src/dpp/master/state/state_attr.c, state_kafka_token.c): a stream of
 * 8 partitions, chunks of 4096 offsets read in batches of 256 by K trainer
 * clients that take the batches round robin (K = 1: one client's batches
 * of a partition follow each other and grow one owner entry; K = 4: every
 * batch is a new entry, the worst case), each chunk leased and committed
 * batch by batch (the last commit makes it DONE), the done prefix folded as
 * it grows. Journal off (in memory). Figures: commits per second, the
 * state's bytes at the peak and at the end (an allocator that tallies
 * every byte the master asks for), the owner entries kept, and the time
 * and size of a token of one rank (version 5) against the whole-job token
 * of version 3 in the same run (sl_master_state_token_encode: no owners).
 * Usage: bench_kafka_tokens [chunks per partition]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dpp/master/state/state.h"

#define PARTS 8
#define CHUNK 4096
#define BATCH 256

static int run(uint32_t chunks, uint32_t clients)
{
    bench_counting_t cnt = {0};
    sl_allocator_t a = bench_counting_allocator(&cnt);
    sl_master_state_opts_t o = {
        .allocator = &a, .lease_timeout_ms = 10000, .kafka_chunks_ahead = 2};
    sl_master_state_t *m;
    sl_error_t err = {0};
    if (sl_master_state_new(&o, &m, &err) != SL_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    size_t base = cnt.now;
    sl_master_kafka_partition_t parts[PARTS];
    for (int32_t p = 0; p < PARTS; p++)
        parts[p] = (sl_master_kafka_partition_t){"t", p, 0, -1};
    sl_master_state_job_spec_t spec = {.job_id = "bench",
                                       .epochs = 1,
                                       .spec_json = "{}",
                                       .kafka_partitions = parts,
                                       .num_kafka_partitions = PARTS,
                                       .kafka_chunk = CHUNK};
    if (sl_master_state_job_add(m, &spec, &err) != SL_OK) {
        fprintf(stderr, "add: %s\n", err.msg);
        return 1;
    }
    for (int32_t p = 0; p < PARTS; p++)
        sl_master_state_kafka_high(m, "bench", "t", p, (int64_t)(chunks + 2) * CHUNK, (uint32_t)p);
    char names[4][16];
    for (uint32_t k = 0; k < 4; k++)
        snprintf(names[k], sizeof names[k], "client-%u", k);
    uint64_t commits = 0, nonce = 0;
    double t0 = bench_now();
    for (uint64_t c = 0; c < (uint64_t)chunks * PARTS; c++) {
        sl_master_lease_t l;
        if (sl_master_state_lease_next(m, "bench", "worker", 0, &l, &err) != SL_OK) {
            fprintf(stderr, "lease %llu: %s\n", (unsigned long long)c, err.msg);
            return 1;
        }
        for (uint64_t r = 0; r < l.num_rows; r += BATCH) {
            uint64_t end = r + BATCH < l.num_rows ? r + BATCH : l.num_rows;
            if (sl_master_state_commit(m, "bench", l.epoch, l.split, l.generation, r, end,
                                       names[(r / BATCH) % clients], ++nonce,
                                       &err) != SL_MASTER_COMMITTED) {
                fprintf(stderr, "commit: %s\n", err.msg);
                return 1;
            }
            commits++;
        }
        /* its last commit made the chunk DONE (no split read needed) */
    }
    double t = bench_now() - t0;
    size_t end_bytes = cnt.now - base, peak = cnt.peak - base;
    /* one rank's token (version 5) against the whole job's (version 3) */
    enum { REPS = 200 };
    sl_master_token_req_t req = {.job_id = "bench", .client_id = names[0], .world_size = 1};
    size_t len5 = 0, len3 = 0;
    double t5 = bench_now();
    for (int i = 0; i < REPS; i++) {
        void *buf;
        if (sl_master_state_token_take(m, &req, &buf, &len5, &err) != SL_OK) {
            fprintf(stderr, "token: %s\n", err.msg);
            return 1;
        }
        sl_free(&a, buf, len5);
    }
    t5 = (bench_now() - t5) / REPS;
    double t3 = bench_now();
    for (int i = 0; i < REPS; i++) {
        void *buf;
        if (sl_master_state_token_encode(m, "bench", NULL, 0, &buf, &len3, &err) != SL_OK) {
            fprintf(stderr, "token v3: %s\n", err.msg);
            return 1;
        }
        sl_free(&a, buf, len3);
    }
    t3 = (bench_now() - t3) / REPS;
    printf("%u client%s  %u chunks x %d partitions  %9.0f commits/s  state peak %.1f KB, end "
           "%.1f KB (%.0f bytes/partition)\n",
           clients, clients == 1 ? " " : "s", chunks, PARTS, (double)commits / t, peak / 1e3,
           end_bytes / 1e3, (double)end_bytes / PARTS);
    printf("            token v5 (one rank): %.1f us, %zu bytes; v3 (whole job, baseline): %.1f "
           "us, %zu bytes\n",
           t5 * 1e6, len5, t3 * 1e6, len3);
    sl_master_state_destroy(m);
    fflush(stdout);
    return bench_counting_leaked(&cnt);
}

int main(int argc, char **argv)
{
    uint32_t chunks = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 2000;
    if (chunks == 0 || argc > 2) {
        fprintf(stderr, "usage: %s [chunks per partition]\n", argv[0]);
        return 2;
    }
    printf("kafka stream tokens: %d partitions, chunks of %d offsets, batches of %d, owners kept "
           "for the last 16 folded chunks of a partition\n",
           PARTS, CHUNK, BATCH);
    if (run(chunks, 1) != 0 || run(chunks, 4) != 0) return 1;
    return 0;
}
