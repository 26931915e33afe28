/* Benchmark of sl_dedup_group against a memcpy of the same input bytes
 * (lengths + values of the group), measured in the same run, over batch
 * size, ids per list, duplication factor and layout (sessions adjacent or
 * shuffled). Data from sl_dedup_synth: 10 features in the group, fixed list
 * lengths. Times are the best of N repetitions, in rounds that alternate
 * dedup and memcpy; dedup reuses one deduplicator and one arena (reset
 * between repetitions, sized so its kept chunk holds the output and no
 * repetition page-faults).
 *
 * Targets (one core): dedup/memcpy <= 2.0 everywhere, <= 1.2 for adjacent
 * (session-clustered) input. The last column says whether a row meets its
 * target. Usage: bench_dedup [max_batch_size]. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "dedup/dedup.h"

#define GROUP_FEATURES 10

/* Repetitions per round: about 100 MB moved, between 1 and 100. */
static int reps_for(uint64_t bytes)
{
    double r = 1e8 / (double)(bytes ? bytes : 1);
    return r < 1 ? 1 : r > 100 ? 100 : (int)r;
}

/* Rounds alternate dedup and memcpy so that both see the same machine (the
 * cores and caches are shared): the best of each over all rounds. */
#define ROUNDS 12

static int run(uint32_t B, uint32_t ids, uint32_t factor, bool adjacent, sl_dedup_t *d)
{
    sl_arena_t *src = sl_arena_new(NULL, 0);
    if (src == NULL) return 1;
    sl_dedup_synth_spec_t spec = {
        .batch_size = B,
        .group_features = GROUP_FEATURES,
        .plain_features = 0,
        .ids_per_list = ids,
        .vary_lengths = false,
        .dup_factor = factor,
        .adjacent = adjacent,
        .weighted = false,
        .seed = 0x5eed0000u + B * 131u + ids * 17u + factor * 3u + adjacent,
    };
    sl_kjt_t kjt;
    sl_dedup_group_spec_t group;
    if (sl_dedup_synth(&spec, src, &kjt, &group) != SL_OK) {
        fprintf(stderr, "synth failed for B=%u ids=%u\n", B, ids);
        sl_arena_destroy(src);
        return 1;
    }
    uint64_t bytes = sl_kjt_bytes(&kjt);
    uint32_t idx[GROUP_FEATURES];
    for (uint32_t k = 0; k < GROUP_FEATURES; k++)
        idx[k] = k;

    /* Everything one repetition allocates stays in the arena's first chunk,
     * which sl_arena_reset keeps: no allocation, no page fault after rep 1. */
    size_t chunk = 2 * ((size_t)bytes + (size_t)B * 4) + (1u << 20);
    sl_arena_t *arena = sl_arena_new(NULL, chunk);
    if (arena == NULL) return 1;
    int reps = reps_for(bytes);
    double best = 1e30, mem = 1e30;
    sl_dedup_stats_t st = {0};
    for (int round = 0; round < ROUNDS; round++) {
        for (int r = 0; r < reps; r++) {
            sl_arena_reset(arena);
            sl_ikjt_t out;
            sl_error_t err = {0};
            double t0 = bench_now();
            sl_err_t rc =
                sl_dedup_group(d, &kjt, idx, GROUP_FEATURES, "user", arena, &out, &st, &err);
            double t = bench_now() - t0;
            if (rc != SL_OK) {
                fprintf(stderr, "dedup failed: %s\n", err.msg);
                return 1;
            }
            bench_consume(out.inverse, (size_t)B * 4);
            if (t < best) best = t;
        }
        double m = bench_memcpy_seconds((size_t)bytes, reps);
        if (m < mem) mem = m;
    }
    double ratio = best / mem;
    double target = adjacent ? 1.2 : 2.0;
    printf("%6u %4u %6u  %-8s %9.2f %9.1f %7.2f %8.2f %9.3f %9.3f %6.2f  %s\n", B, ids, factor,
           adjacent ? "adjacent" : "shuffled", (double)bytes / 1e6, best * 1e9 / (B ? B : 1),
           (double)bytes / best / 1e9, st.factor, mem * 1e3, best * 1e3, ratio,
           ratio <= target ? "ok" : "MISS");
    fflush(stdout);
    sl_arena_destroy(arena);
    sl_arena_destroy(src);
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t max_b = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 65536;
    static const uint32_t sizes[] = {512, 4096, 65536};
    static const uint32_t ids[] = {1, 50};
    static const uint32_t factors[] = {1, 4, 16};
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    if (d == NULL) return 1;
    printf("sl_dedup_group, %d features in the group, best of N; ratio = dedup / memcpy of the "
           "input bytes\n",
           GROUP_FEATURES);
    printf("target: ratio <= 2.0 (shuffled), <= 1.2 (adjacent)\n\n");
    printf("%6s %4s %6s  %-8s %9s %9s %7s %8s %9s %9s %6s  %s\n", "B", "ids", "factor", "layout",
           "input MB", "ns/sample", "GB/s", "B/U", "memcpy ms", "dedup ms", "ratio", "target");
    for (size_t s = 0; s < 3; s++) {
        if (sizes[s] > max_b) continue;
        for (size_t i = 0; i < 2; i++)
            for (size_t f = 0; f < 3; f++)
                for (int adj = 1; adj >= 0; adj--)
                    if (run(sizes[s], ids[i], factors[f], adj, d) != 0) {
                        sl_dedup_destroy(d);
                        return 1;
                    }
    }
    sl_dedup_destroy(d);
    return 0;
}
