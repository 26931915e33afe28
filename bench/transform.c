/* Transform throughput on the benchmark's criteo job: log1p on the 13
 * dense features and sigrid_hash on the 26 sparse ones (one id each, as in
 * Criteo), batch 4096. Prints ns per sample for the transforms and, as the
 * baselines from the same run, for a memcpy of the batch's bytes (dense
 * floats, lengths and ids) and for the straightforward kernels the plan's
 * replace: libm log1pf per value, and XXH3_64bits_withSeed + `%` per id.
 * Transforms work in place, so every repetition first restores the input
 * (that copy is not timed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_util.h"
#include "dpp/pipeline/plan.h"

#define BATCH 4096
#define REPS 200

int main(void)
{
    char spec[8192];
    int n = snprintf(spec, sizeof spec, "{\"source\": {\"table\": \"t\"}, \"transforms\": [");
    for (int i = 1; i <= 13; i++)
        n += snprintf(spec + n, sizeof spec - (size_t)n,
                      "{\"op\": \"log1p\", \"feature\": \"I%d\"},", i);
    for (int i = 1; i <= 26; i++)
        n += snprintf(spec + n, sizeof spec - (size_t)n,
                      "{\"op\": \"sigrid_hash\", \"feature\": \"C%d\", \"table_size\": 1000000}%s",
                      i, i < 26 ? "," : "]}");
    sl_error_t err = {0};
    sl_pipeline_job_t *job = NULL;
    if (sl_pipeline_job_parse(spec, (size_t)n, &job, NULL, &err) != SL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sl_wh_schema_t *schema = sl_wh_schema_new(NULL);
    char name[8];
    const char *dnames[13], *snames[26];
    for (int i = 1; i <= 13; i++) {
        snprintf(name, sizeof name, "I%d", i);
        sl_wh_schema_add_feature(schema, name, SL_WH_DENSE, &err);
        dnames[i - 1] = sl_wh_schema_dense(schema, (uint32_t)i - 1)->name;
    }
    for (int i = 1; i <= 26; i++) {
        snprintf(name, sizeof name, "C%d", i);
        sl_wh_schema_add_feature(schema, name, SL_WH_SPARSE, &err);
        snames[i - 1] = sl_wh_schema_sparse(schema, (uint32_t)i - 1)->name;
    }
    sl_pipeline_plan_t *plan = NULL;
    if (sl_pipeline_plan_new(job, schema, &plan, NULL, &err) != SL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sl_batch_t *batch = sl_batch_new(NULL);
    batch->batch_size = BATCH;
    uint64_t ids = 26ull * BATCH;
    if (sl_kjt_init(&batch->sparse, batch->arena, 26, snames, BATCH, ids, false) != SL_OK ||
        sl_dense_init(&batch->dense, batch->arena, BATCH, 13, dnames) != SL_OK)
        return 1;
    float *dense0 = malloc(13 * BATCH * sizeof(float));
    int64_t *ids0 = malloc(ids * sizeof(int64_t));
    uint64_t x = 12345;
    for (size_t i = 0; i < 13 * BATCH; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        dense0[i] = (x >> 60) == 0 ? NAN : (float)(x >> 40) / 1000.0f;
    }
    for (size_t i = 0; i < ids; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids0[i] = (int64_t)(x >> 1);
        batch->sparse.lengths[i] = 1;
    }
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        memcpy(batch->dense.data, dense0, 13 * BATCH * sizeof(float));
        memcpy(batch->sparse.values, ids0, ids * sizeof(int64_t));
        double t0 = bench_now();
        if (sl_pipeline_plan_transform(plan, batch, &err) != SL_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double t = bench_now() - t0;
        if (t < best) best = t;
        bench_consume(batch->sparse.values, 8);
    }
    /* the straightforward kernels, same data and shape */
    double best_log = 1e30, best_hash = 1e30;
    for (int r = 0; r < REPS; r++) {
        memcpy(batch->dense.data, dense0, 13 * BATCH * sizeof(float));
        memcpy(batch->sparse.values, ids0, ids * sizeof(int64_t));
        double t0 = bench_now();
        for (int c = 0; c < 13; c++)
            for (int i = 0; i < BATCH; i++) {
                float *p = batch->dense.data + (size_t)i * 13 + c, x = *p;
                *p = log1pf(x < 0.0f ? 0.0f : x);
            }
        double t1 = bench_now();
        for (uint64_t i = 0; i < ids; i++) {
            int64_t id = batch->sparse.values[i];
            batch->sparse.values[i] =
                (int64_t)(XXH3_64bits_withSeed(&id, sizeof id, (uint64_t)(i / BATCH) + 1) %
                          1000000);
        }
        double t2 = bench_now();
        if (t1 - t0 < best_log) best_log = t1 - t0;
        if (t2 - t1 < best_hash) best_hash = t2 - t1;
        bench_consume(batch->dense.data, 4);
        bench_consume(batch->sparse.values, 8);
    }
    size_t bytes = 13 * BATCH * sizeof(float) + ids * (sizeof(int64_t) + sizeof(int32_t));
    double mc = bench_memcpy_seconds(bytes, REPS);
    printf("criteo transforms (13 x log1p, 26 x sigrid_hash), batch %d, best of %d\n", BATCH, REPS);
    printf("  transform: %8.1f ns/sample  (%.2f M samples/s per core)\n", best * 1e9 / BATCH,
           BATCH / best / 1e6);
    printf("  baseline, libm log1pf x13 + XXH3_64bits_withSeed %% x26: %8.1f ns/sample "
           "(log1pf %.1f, hash %.1f)\n",
           (best_log + best_hash) * 1e9 / BATCH, best_log * 1e9 / BATCH, best_hash * 1e9 / BATCH);
    printf("  memcpy of the batch's %zu bytes: %8.1f ns/sample\n", bytes, mc * 1e9 / BATCH);
    printf("  (end-to-end target 2 M samples/s per core = 500 ns/sample for everything)\n");
    free(dense0);
    free(ids0);
    sl_batch_destroy(batch);
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
    return 0;
}
