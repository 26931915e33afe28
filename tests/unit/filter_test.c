/* DPP row filters on stripes: equality, range, presence (dense, sparse and
 * group features), timestamps; sampling close to its rate, deterministic
 * and independent of the stripe a row comes in; negative downsampling keeps
 * every positive and weighs kept negatives by 1/rate. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dpp/pipeline/plan.h"
#include "testutil.h"

#define N 20000

static sl_wh_schema_t *make_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    sl_wh_schema_add_feature(s, "d0", SL_WH_DENSE, &err);
    sl_wh_schema_add_feature(s, "s0", SL_WH_SPARSE, &err);
    sl_wh_schema_add_label(s, "click", &err);
    sl_wh_schema_add_label(s, "dwell", &err);
    return s;
}

static sl_pipeline_plan_t *plan_for(const char *filters)
{
    char spec[2048];
    snprintf(spec, sizeof spec, "{\"source\": {\"table\": \"t\"}, \"filters\": [%s]}", filters);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_t *s = make_schema();
    sl_pipeline_plan_t *plan = NULL;
    cr_assert_eq(sl_pipeline_plan_new(job, s, &plan, NULL, &err), SL_OK, "%s", err.msg);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(s);
    return plan;
}

/* n rows: click = row % 3 == 0, dwell = row / 10, d0 missing on odd rows,
 * s0 empty on rows % 4 == 0, ts = 1000 + row, sample id = row * 7919 + 1. */
typedef struct rows_fixture {
    sl_wh_rows_t rows;
    sl_arena_t *arena;
} rows_fixture_t;

static void make_rows(rows_fixture_t *fx, uint32_t n, uint32_t first)
{
    memset(fx, 0, sizeof *fx);
    fx->arena = sl_arena_new(NULL, 0);
    sl_batch_t *b = &fx->rows.batch;
    b->batch_size = n;
    const char *dn[] = {"d0"}, *ln[] = {"click", "dwell"}, *keys[] = {"s0"};
    cr_assert_eq(sl_dense_init(&b->dense, fx->arena, n, 1, dn), SL_OK);
    cr_assert_eq(sl_dense_init(&b->labels, fx->arena, n, 2, ln), SL_OK);
    uint64_t values = 0;
    for (uint32_t i = 0; i < n; i++)
        values += (first + i) % 4 != 0;
    cr_assert_eq(sl_kjt_init(&b->sparse, fx->arena, 1, keys, n, values, false), SL_OK);
    b->sample_ids = sl_arena_alloc(fx->arena, (size_t)n * 8 + 8);
    fx->rows.timestamps = sl_arena_alloc(fx->arena, (size_t)n * 8 + 8);
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = first + i;
        b->labels.data[i * 2] = r % 3 == 0 ? 1.0f : 0.0f;
        b->labels.data[i * 2 + 1] = (float)(r / 10);
        b->dense.data[i] = r % 2 ? NAN : (float)r;
        b->sparse.lengths[i] = r % 4 != 0;
        if (r % 4 != 0) b->sparse.values[v++] = r;
        b->sample_ids[i] = (int64_t)r * 7919 + 1;
        fx->rows.timestamps[i] = 1000 + r;
    }
}

static uint32_t run(const sl_pipeline_plan_t *plan, const sl_wh_rows_t *rows, uint32_t *sel,
                    float *w)
{
    uint32_t count = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_plan_filter(plan, rows, sel, w, &count, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 1; i < count; i++)
        cr_assert_lt(sel[i - 1], sel[i]);
    return count;
}

static uint32_t sel[N];
static float wts[N];

Test(filter, equality_range_presence_timestamp)
{
    rows_fixture_t fx;
    make_rows(&fx, 1000, 0);
    struct {
        const char *filters;
        bool (*keep)(uint32_t r);
    } cases[] = {
        {"{\"op\": \"label_equals\", \"label\": \"click\", \"value\": 1}", NULL},
        {"{\"op\": \"label_range\", \"label\": \"dwell\", \"min\": 5, \"max\": 7}", NULL},
        {"{\"op\": \"has_feature\", \"feature\": \"d0\"}", NULL},
        {"{\"op\": \"has_feature\", \"feature\": \"s0\"}", NULL},
        {"{\"op\": \"timestamp_range\", \"min\": 1100, \"max\": 1199}", NULL},
        {"{\"op\": \"label_equals\", \"label\": \"click\", \"value\": 1},"
         "{\"op\": \"has_feature\", \"feature\": \"d0\"}, {\"op\": \"timestamp_range\", \"max\": "
         "1500}",
         NULL},
    };
    for (int c = 0; c < 6; c++) {
        sl_pipeline_plan_t *plan = plan_for(cases[c].filters);
        cr_assert_null(sl_pipeline_plan_weight_label(plan));
        uint32_t count = run(plan, &fx.rows, sel, NULL);
        uint32_t k = 0;
        for (uint32_t r = 0; r < 1000; r++) {
            bool keep = c == 0   ? r % 3 == 0
                        : c == 1 ? r / 10 >= 5 && r / 10 <= 7
                        : c == 2 ? r % 2 == 0
                        : c == 3 ? r % 4 != 0
                        : c == 4 ? r >= 100 && r <= 199
                                 : r % 3 == 0 && r % 2 == 0 && r <= 500;
            if (keep) {
                cr_assert_lt(k, count, "case %d", c);
                cr_assert_eq(sel[k++], r, "case %d", c);
            }
        }
        cr_assert_eq(k, count, "case %d", c);
        sl_pipeline_plan_destroy(plan);
    }
    sl_arena_destroy(fx.arena);
}

Test(filter, sample_rate_and_determinism)
{
    rows_fixture_t fx;
    make_rows(&fx, N, 0);
    sl_pipeline_plan_t *plan = plan_for("{\"op\": \"sample\", \"rate\": 0.3, \"seed\": 11}");
    uint32_t count = run(plan, &fx.rows, sel, NULL);
    /* Binomial(20000, 0.3): sd ~65; 6 sd bound. */
    cr_assert(fabs((double)count - 0.3 * N) < 400, "kept %u of %u", count, N);
    for (uint32_t i = 0; i < count; i++) {
        int64_t id = fx.rows.batch.sample_ids[sel[i]];
        cr_assert_lt(XXH3_64bits_withSeed(&id, 8, 11), (uint64_t)ldexp(0.3, 64));
    }
    /* The same rows in other stripes (shifted) get the same decisions. */
    rows_fixture_t part;
    make_rows(&part, N / 2, N / 2);
    static uint32_t sel2[N];
    uint32_t count2 = run(plan, &part.rows, sel2, NULL);
    uint32_t k = 0;
    while (k < count && sel[k] < N / 2)
        k++;
    cr_assert_eq(count - k, count2);
    for (uint32_t i = 0; i < count2; i++)
        cr_assert_eq(sel2[i] + N / 2, sel[k + i]);
    sl_pipeline_plan_destroy(plan);
    plan = plan_for("{\"op\": \"sample\", \"rate\": 1}");
    cr_assert_eq(run(plan, &fx.rows, sel, NULL), N);
    sl_pipeline_plan_destroy(plan);
    sl_arena_destroy(part.arena);
    sl_arena_destroy(fx.arena);
}

Test(filter, negative_downsample_weights)
{
    rows_fixture_t fx;
    make_rows(&fx, N, 0);
    sl_pipeline_plan_t *plan = plan_for("{\"op\": \"negative_downsample\", \"label\": \"click\", "
                                        "\"rate\": 0.25, \"seed\": 3, \"weight_label\": \"w\"}");
    cr_assert_str_eq(sl_pipeline_plan_weight_label(plan), "w");
    uint32_t count = run(plan, &fx.rows, sel, wts);
    uint32_t pos = 0, neg = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (sel[i] % 3 == 0) {
            pos++;
            cr_assert_eq(wts[i], 1.0f);
        } else {
            neg++;
            cr_assert_eq(wts[i], 4.0f);
        }
    }
    uint32_t negatives = N - (N + 2) / 3;
    cr_assert_eq(pos, (N + 2) / 3); /* every positive */
    /* Binomial(13333, 0.25): sd ~50. */
    cr_assert(fabs((double)neg - 0.25 * negatives) < 300, "kept %u of %u negatives", neg,
              negatives);
    sl_pipeline_plan_destroy(plan);
    sl_arena_destroy(fx.arena);
}

Test(filter, missing_columns_are_errors)
{
    rows_fixture_t fx;
    make_rows(&fx, 10, 0);
    fx.rows.timestamps = NULL;
    fx.rows.file = "part-0.slc";
    fx.rows.stripe = 3;
    sl_pipeline_plan_t *plan = plan_for("{\"op\": \"timestamp_range\", \"min\": 0}");
    uint32_t count;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_plan_filter(plan, &fx.rows, sel, NULL, &count, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg,
                     "part-0.slc stripe 3: filter 0: timestamp_range needs the timestamps");
    sl_pipeline_plan_destroy(plan);
    sl_arena_destroy(fx.arena);
}
