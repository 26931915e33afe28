/* DPP transforms against reference implementations written here, on random
 * batches (empty lists, negative and repeated ids, missing dense values, a
 * weighted feature): once with every feature in the plain KJT and once with
 * a dedup group, where the expanded result must equal the reference over
 * the expanded rows (so per-unique-row transforms are exact). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dedup/dedup.h"
#include "dpp/pipeline/plan.h"
#include "testutil.h"

#define B 300
#define MAXL 64 /* longest reference list (crosses of lists <= 6) */
#define NF 16

typedef struct ref {
    char name[32];
    int32_t len[B];
    int64_t ids[B][MAXL];
    float w[B][MAXL];
} ref_t;

static ref_t *refs;
static int nrefs;

static ref_t *ref(const char *name)
{
    for (int i = 0; i < nrefs; i++)
        if (strcmp(refs[i].name, name) == 0) return &refs[i];
    ref_t *r = &refs[nrefs++];
    cr_assert_leq(nrefs, NF);
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static uint64_t h8(int64_t v, uint64_t seed)
{
    return XXH3_64bits_withSeed(&v, 8, seed);
}

static const char *input_names[] = {"s0", "s1", "w0", "g0", "g1"};

static sl_wh_schema_t *make_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    const char *dense[] = {"d0", "d1", "d2", "d3"};
    for (int i = 0; i < 4; i++)
        sl_wh_schema_add_feature(s, dense[i], SL_WH_DENSE, &err);
    sl_wh_schema_add_feature(s, "s0", SL_WH_SPARSE, &err);
    sl_wh_schema_add_feature(s, "s1", SL_WH_SPARSE, &err);
    sl_wh_schema_add_feature(s, "w0", SL_WH_WEIGHTED, &err);
    sl_wh_schema_add_feature(s, "g0", SL_WH_SPARSE, &err);
    sl_wh_schema_add_feature(s, "g1", SL_WH_SPARSE, &err);
    cr_assert_eq(sl_wh_schema_add_label(s, "click", &err), SL_OK);
    return s;
}

static const char *spec_fmt =
    "{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"w0\", \"g0\", \"d0\", "
    "\"d1\", \"d3\"]},"
    " \"transforms\": ["
    "  {\"op\": \"sigrid_hash\", \"feature\": \"s0\", \"table_size\": 1000, \"salt\": 3},"
    "  {\"op\": \"modulo\", \"feature\": \"s1\", \"divisor\": 7},"
    "  {\"op\": \"first_x\", \"feature\": \"g1\", \"x\": 3},"
    "  {\"op\": \"dedup_ids\", \"feature\": \"w0\"},"
    "  {\"op\": \"dedup_ids\", \"feature\": \"g1\"},"
    "  {\"op\": \"cross\", \"features\": [\"s0\", \"s1\"], \"table_size\": 500, \"output\": "
    "\"c_plain\"},"
    "  {\"op\": \"cross\", \"features\": [\"g0\", \"g1\"], \"table_size\": 400, \"salt\": 5,"
    "   \"output\": \"c_group\"},"
    "  {\"op\": \"cross\", \"features\": [\"g0\", \"s1\"], \"table_size\": 300, \"output\": "
    "\"c_mixed\"},"
    "  {\"op\": \"ngram\", \"feature\": \"g1\", \"n\": 2, \"table_size\": 200},"
    "  {\"op\": \"ngram\", \"feature\": \"s1\", \"n\": 2, \"table_size\": 100, \"salt\": 1},"
    "  {\"op\": \"clamp_weights\", \"feature\": \"w0\", \"min\": 0.2, \"max\": 0.7},"
    "  {\"op\": \"map_vocab\", \"feature\": \"s1\", \"file\": \"%s\", \"default\": 99},"
    "  {\"op\": \"fill_missing\", \"feature\": \"d0\", \"value\": -1},"
    "  {\"op\": \"clamp\", \"feature\": \"d0\", \"min\": 0, \"max\": 5},"
    "  {\"op\": \"log1p\", \"feature\": \"d1\"},"
    "  {\"op\": \"normalize\", \"feature\": \"d2\", \"mean\": 0.5, \"std\": 2},"
    "  {\"op\": \"boxcox\", \"feature\": \"d3\", \"lambda\": 0.5},"
    "  {\"op\": \"bucketize\", \"feature\": \"d1\", \"borders\": [0.1, 0.5, 1], \"output\": "
    "\"d1_b\"}]"
    " %s}";

/* The reference, on expanded rows, in the spec's order. */
static void reference(float *dense /* [B*4] */)
{
    ref_t *s0 = ref("s0"), *s1 = ref("s1"), *w0 = ref("w0"), *g1 = ref("g1");
    for (int r = 0; r < B; r++) {
        for (int i = 0; i < s0->len[r]; i++)
            s0->ids[r][i] = (int64_t)(h8(s0->ids[r][i], 3) % 1000);
        for (int i = 0; i < s1->len[r]; i++) {
            int64_t m = s1->ids[r][i] % 7;
            s1->ids[r][i] = m < 0 ? m + 7 : m;
        }
        if (g1->len[r] > 3) g1->len[r] = 3;
        ref_t *dd[2] = {w0, g1};
        for (int k = 0; k < 2; k++) {
            ref_t *f = dd[k];
            int n = 0;
            for (int i = 0; i < f->len[r]; i++) {
                bool seen = false;
                for (int j = 0; j < n; j++)
                    seen |= f->ids[r][j] == f->ids[r][i];
                if (seen) continue;
                f->w[r][n] = f->w[r][i];
                f->ids[r][n++] = f->ids[r][i];
            }
            f->len[r] = n;
        }
    }
    struct {
        const char *out, *a, *b;
        uint64_t ts, salt;
    } crosses[] = {{"c_plain", "s0", "s1", 500, 0},
                   {"c_group", "g0", "g1", 400, 5},
                   {"c_mixed", "g0", "s1", 300, 0}};
    for (int c = 0; c < 3; c++) {
        ref_t *o = ref(crosses[c].out), *a = ref(crosses[c].a), *b = ref(crosses[c].b);
        for (int r = 0; r < B; r++) {
            int n = 0;
            for (int i = 0; i < a->len[r]; i++)
                for (int j = 0; j < b->len[r]; j++) {
                    int64_t pair[2] = {a->ids[r][i], b->ids[r][j]};
                    o->ids[r][n] =
                        (int64_t)(XXH3_64bits_withSeed(pair, 16, crosses[c].salt) % crosses[c].ts);
                    o->w[r][n++] = 1.0f;
                }
            o->len[r] = n;
        }
    }
    struct {
        const char *out, *in;
        uint64_t ts, salt;
    } ngrams[] = {{"g1_2gram", "g1", 200, 0}, {"s1_2gram", "s1", 100, 1}};
    for (int g = 0; g < 2; g++) {
        ref_t *o = ref(ngrams[g].out), *a = ref(ngrams[g].in);
        for (int r = 0; r < B; r++) {
            int n = 0;
            for (int i = 0; i + 1 < a->len[r]; i++) {
                o->ids[r][n] = (int64_t)(XXH3_64bits_withSeed(&a->ids[r][i], 16, ngrams[g].salt) %
                                         ngrams[g].ts);
                o->w[r][n++] = 1.0f;
            }
            o->len[r] = n;
        }
    }
    for (int r = 0; r < B; r++) {
        for (int i = 0; i < w0->len[r]; i++)
            w0->w[r][i] = w0->w[r][i] < 0.2f ? 0.2f : w0->w[r][i] > 0.7f ? 0.7f : w0->w[r][i];
        /* vocab: 3 -> 0, 5 -> 1, 0 -> 2 */
        for (int i = 0; i < s1->len[r]; i++) {
            int64_t v = s1->ids[r][i];
            s1->ids[r][i] = v == 3 ? 0 : v == 5 ? 1 : v == 0 ? 2 : 99;
        }
        float *row = dense + r * 4;
        if (isnan(row[0])) row[0] = -1;
        row[0] = row[0] < 0 ? 0 : row[0] > 5 ? 5 : row[0];
        if (!isnan(row[1])) row[1] = (float)log1p(row[1] < 0 ? 0.0 : (double)row[1]);
        row[2] = (row[2] - 0.5f) / 2.0f;
        row[3] = row[3] > 0 ? (powf(row[3], 0.5f) - 1.0f) / 0.5f : NAN;
        ref_t *bk = ref("d1_b");
        double x = row[1];
        bk->len[r] = !isnan(x);
        bk->ids[r][0] = (x >= 0.1) + (x >= 0.5) + (x >= 1.0);
        bk->w[r][0] = 1.0f;
    }
}

static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* log1p is promised within 1 ulp of (float)log1p((double)x) (docs/JOBS.md):
 * a and b equal, or adjacent floats of the same sign. */
static bool within_ulp(float a, float b)
{
    if (same_float(a, b)) return true;
    if (isnan(a) || isnan(b) || signbit(a) != signbit(b)) return false;
    uint32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return (ia > ib ? ia - ib : ib - ia) <= 1;
}

static void run_case(bool grouped)
{
    uint64_t seed = tu_seed(grouped ? "transform_grouped" : "transform_plain"), st = seed;
    refs = calloc(NF, sizeof(ref_t));
    nrefs = 0;
    char vocab[] = "/tmp/sluice_vocab_XXXXXX";
    int fd = mkstemp(vocab);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "3\n5\n0\n", 6), 6);
    close(fd);
    char spec[8192];
    snprintf(spec, sizeof spec, spec_fmt, vocab,
             grouped ? ", \"batch\": {\"dedup_groups\": {\"user\": [\"g0\", \"g1\"]}}" : "");
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_t *schema = make_schema();
    sl_pipeline_plan_t *plan = NULL;
    sl_pipeline_problems_t pr = {0};
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &plan, &pr, &err), SL_OK, "%s", err.msg);

    /* Random rows: group rows come from a few distinct ones, so they repeat. */
    int64_t gpool[20][2][6];
    int32_t gplen[20][2];
    for (int u = 0; u < 20; u++)
        for (int k = 0; k < 2; k++) {
            gplen[u][k] = (int32_t)tu_below(&st, 7);
            for (int i = 0; i < gplen[u][k]; i++)
                gpool[u][k][i] = (int64_t)tu_below(&st, 9) - 4;
        }
    for (int f = 0; f < 5; f++)
        ref(input_names[f]);
    for (int r = 0; r < B; r++) {
        int u = (int)tu_below(&st, 20);
        for (int f = 0; f < 5; f++) {
            ref_t *x = ref(input_names[f]);
            if (f >= 3) {
                x->len[r] = gplen[u][f - 3];
                memcpy(x->ids[r], gpool[u][f - 3], sizeof gpool[u][f - 3]);
            } else {
                x->len[r] = (int32_t)tu_below(&st, 7);
                for (int i = 0; i < x->len[r]; i++)
                    x->ids[r][i] = (int64_t)(f == 0 ? tu_next(&st) : tu_below(&st, 21) - 10);
            }
            for (int i = 0; i < x->len[r]; i++)
                x->w[r][i] = f == 2 ? (float)tu_below(&st, 1000) / 1000.0f : 1.0f;
        }
    }
    float dense[B * 4];
    for (int i = 0; i < B * 4; i++)
        dense[i] =
            tu_below(&st, 5) == 0 ? NAN : (float)((double)tu_below(&st, 4000) / 1000.0 - 1.0);

    /* The batch: all five sparse features in one weighted KJT, dedup'd. */
    sl_batch_t *batch = sl_batch_new(NULL);
    sl_kjt_t all;
    uint64_t total = 0;
    for (int f = 0; f < 5; f++)
        for (int r = 0; r < B; r++)
            total += (uint64_t)refs[f].len[r];
    cr_assert_eq(sl_kjt_init(&all, batch->arena, 5, input_names, B, total, true), SL_OK);
    uint64_t at = 0;
    for (int f = 0; f < 5; f++)
        for (int r = 0; r < B; r++) {
            all.lengths[f * B + r] = refs[f].len[r];
            for (int i = 0; i < refs[f].len[r]; i++, at++) {
                all.values[at] = refs[f].ids[r][i];
                all.weights[at] = refs[f].w[r][i];
            }
        }
    sl_dedup_t *dd = sl_dedup_new(NULL, NULL);
    const char *gf[] = {"g0", "g1"};
    sl_dedup_group_spec_t group = {"user", 2, gf};
    cr_assert_eq(sl_dedup_batch(dd, &all, &group, grouped ? 1 : 0, batch, NULL, &err), SL_OK, "%s",
                 err.msg);
    if (grouped) cr_assert_lt(batch->groups[0].unique.stride, B);
    const char *dnames[] = {"d0", "d1", "d2", "d3"};
    cr_assert_eq(sl_dense_init(&batch->dense, batch->arena, B, 4, dnames), SL_OK);
    memcpy(batch->dense.data, dense, sizeof dense);

    reference(dense);
    cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_batch_validate(batch, &err), SL_OK, "%s", err.msg);

    /* Outputs: the projection plus created features, in a fixed order. */
    const char *want_plain[] = {"s0", "s1", "w0", "c_plain", "c_mixed", "s1_2gram", "d1_b"};
    const char *want_group[] = {"g0", "c_group", "g1_2gram"};
    const char *want_flat[] = {"s0",      "s1",      "w0",       "g0",       "c_plain",
                               "c_group", "c_mixed", "g1_2gram", "s1_2gram", "d1_b"};
    if (grouped) {
        cr_assert_eq(batch->sparse.num_keys, 7);
        for (int k = 0; k < 7; k++)
            cr_assert_str_eq(batch->sparse.keys[k], want_plain[k]);
        cr_assert_eq(batch->num_groups, 1);
        cr_assert_eq(batch->groups[0].unique.num_keys, 3);
        for (int k = 0; k < 3; k++)
            cr_assert_str_eq(batch->groups[0].unique.keys[k], want_group[k]);
    } else {
        cr_assert_eq(batch->sparse.num_keys, 10);
        for (int k = 0; k < 10; k++)
            cr_assert_str_eq(batch->sparse.keys[k], want_flat[k]);
    }
    sl_kjt_t out;
    cr_assert_eq(sl_batch_expand(batch, batch->arena, &out, &err), SL_OK, "%s", err.msg);
    cr_assert_not_null(out.weights); /* w0 is weighted */
    uint64_t off = 0;
    for (uint32_t k = 0; k < out.num_keys; k++) {
        ref_t *x = ref(out.keys[k]);
        for (int r = 0; r < B; r++) {
            cr_assert_eq(out.lengths[k * B + r], x->len[r], "seed %llu key %s row %d",
                         (unsigned long long)seed, x->name, r);
            for (int i = 0; i < x->len[r]; i++, off++) {
                cr_assert_eq(out.values[off], x->ids[r][i], "key %s row %d id %d", x->name, r, i);
                cr_assert(same_float(out.weights[off], x->w[r][i]), "key %s row %d weight %d",
                          x->name, r, i);
            }
        }
    }
    cr_assert_eq(off, out.num_values);
    /* Dense: d2 was read for normalize only, so it is dropped. */
    cr_assert_eq(batch->dense.cols, 3);
    int keep[] = {0, 1, 3};
    for (int c = 0; c < 3; c++) {
        cr_assert_str_eq(batch->dense.names[c], dnames[keep[c]]);
        for (int r = 0; r < B; r++)
            cr_assert(keep[c] == 1
                          ? within_ulp(batch->dense.data[r * 3 + c], dense[r * 4 + 1])
                          : same_float(batch->dense.data[r * 3 + c], dense[r * 4 + keep[c]]),
                      "dense %s row %d: %g vs %g", dnames[keep[c]], r, batch->dense.data[r * 3 + c],
                      dense[r * 4 + keep[c]]);
    }
    sl_dedup_destroy(dd);
    sl_batch_destroy(batch);
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
    unlink(vocab);
    free(refs);
}

Test(transform, plain_kjt)
{
    for (int i = 0; i < 5; i++)
        run_case(false);
}

Test(transform, ikjt_group)
{
    for (int i = 0; i < 5; i++)
        run_case(true);
}

Test(transform, in_place_keeps_buffers)
{
    /* Per-id transforms with every input an output: no copy of the KJT. */
    const char *spec = "{\"source\": {\"table\": \"t\"}, \"transforms\": ["
                       "{\"op\": \"sigrid_hash\", \"feature\": \"s0\", \"table_size\": 10}]}";
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK);
    sl_wh_schema_t *schema = make_schema();
    sl_pipeline_plan_t *plan = NULL;
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &plan, NULL, &err), SL_OK, "%s", err.msg);
    sl_batch_t *batch = sl_batch_new(NULL);
    batch->batch_size = 2;
    const char *keys[] = {"s0", "s1"};
    cr_assert_eq(sl_kjt_init(&batch->sparse, batch->arena, 2, keys, 2, 3, false), SL_OK);
    int32_t len[] = {2, 0, 1, 0};
    int64_t vals[] = {-1, 7, 7};
    memcpy(batch->sparse.lengths, len, sizeof len);
    memcpy(batch->sparse.values, vals, sizeof vals);
    int64_t *before = batch->sparse.values;
    cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(batch->sparse.values, before);
    cr_assert_eq(batch->sparse.values[0], (int64_t)(h8(-1, 0) % 10));
    cr_assert_eq(batch->sparse.values[1], (int64_t)(h8(7, 0) % 10));
    cr_assert_eq(batch->sparse.values[2], 7);
    sl_batch_destroy(batch);
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
}

/* No transform left to run: a batch whose every column is an output comes
 * out as it went in (its buffers and values untouched), while one with a
 * column that is not an output, or with weights no output carries, still
 * goes through the passes that drop them. */
Test(transform, nothing_to_run_keeps_the_batch)
{
    const char *spec = "{\"source\": {\"table\": \"t\"}}";
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK);
    sl_wh_schema_t *schema = make_schema();
    sl_pipeline_plan_t *plan = NULL;
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &plan, NULL, &err), SL_OK, "%s", err.msg);
    int32_t len[] = {2, 0, 1, 0};
    int64_t vals[] = {-1, 7, 9};
    for (int variant = 0; variant < 3; variant++) {
        /* 0: every key an output; 1: "zz" is none; 2: weights, no weighted output */
        sl_batch_t *batch = sl_batch_new(NULL);
        batch->batch_size = 2;
        const char *keys[] = {"s0", variant == 1 ? "zz" : "s1"};
        cr_assert_eq(sl_kjt_init(&batch->sparse, batch->arena, 2, keys, 2, 3, variant == 2), SL_OK);
        memcpy(batch->sparse.lengths, len, sizeof len);
        memcpy(batch->sparse.values, vals, sizeof vals);
        int64_t *before = batch->sparse.values;
        int32_t *lbefore = batch->sparse.lengths;
        cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(batch->sparse.num_keys, variant == 1 ? 1u : 2u, "variant %d", variant);
        cr_assert_eq(batch->sparse.num_values, variant == 1 ? 2u : 3u, "variant %d", variant);
        cr_assert_null(batch->sparse.weights, "variant %d", variant);
        if (variant != 1) {
            cr_assert_eq(batch->sparse.values, before);
            cr_assert_eq(batch->sparse.lengths, lbefore);
        }
        for (int i = 0; i < (variant == 1 ? 2 : 3); i++)
            cr_assert_eq(batch->sparse.values[i], vals[i], "variant %d value %d", variant, i);
        for (int i = 0; i < (variant == 1 ? 2 : 4); i++)
            cr_assert_eq(batch->sparse.lengths[i], len[i], "variant %d length %d", variant, i);
        sl_batch_destroy(batch);
    }
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
}

/* A plan of one transform spec over make_schema(); caller destroys both. */
static sl_pipeline_plan_t *plan_of(const char *spec, sl_pipeline_job_t **job,
                                   sl_wh_schema_t **schema)
{
    sl_error_t err = {0};
    *job = NULL;
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), job, NULL, &err), SL_OK, "%s", err.msg);
    *schema = make_schema();
    sl_pipeline_plan_t *plan = NULL;
    cr_assert_eq(sl_pipeline_plan_new(*job, *schema, &plan, NULL, &err), SL_OK, "%s", err.msg);
    return plan;
}

Test(transform, log1p_within_one_ulp)
{
    /* Random bit patterns (every sign, exponent and NaN payload) and the
     * edges of the implementation: 0, -0, subnormals, 1 + x crossing
     * sqrt(2) and powers of two, the largest floats, infinities. */
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x00000001, 0x007fffff, 0x00800000, 0x33800000, 0x33000000,
        0x2f800000, 0x3ed413cc, 0x3ed413cd, 0x3ed413ce, 0x3f800000, 0x3f7fffff, 0x40400000,
        0x4b800000, 0x5f000000, 0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
        0xbf800000, 0xff7fffff, 0x80000001, 0x3c000000, 0x3e800000, 0x3f3504f3, 0x3f3504f4};
    const uint32_t n = 1u << 16, ne = sizeof edges / sizeof *edges;
    uint64_t seed = tu_seed("transform_log1p"), st = seed;
    sl_pipeline_job_t *job;
    sl_wh_schema_t *schema;
    sl_pipeline_plan_t *plan =
        plan_of("{\"source\": {\"table\": \"t\", \"features\": [\"d1\"]},"
                " \"transforms\": [{\"op\": \"log1p\", \"feature\": \"d1\"}]}",
                &job, &schema);
    sl_batch_t *batch = sl_batch_new(NULL);
    batch->batch_size = n;
    const char *dnames[] = {"d0", "d1"};
    cr_assert_eq(sl_dense_init(&batch->dense, batch->arena, n, 2, dnames), SL_OK);
    float *in = malloc((size_t)n * sizeof *in);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = i < ne ? edges[i] : (uint32_t)tu_next(&st);
        /* half the rest in [0, 2^24), where most data lives */
        if (i >= ne && (i & 1)) b &= 0x4bffffffu;
        memcpy(&in[i], &b, 4);
        batch->dense.data[2 * i] = 0.0f;
        batch->dense.data[2 * i + 1] = in[i];
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
    int col = strcmp(batch->dense.names[0], "d1") == 0 ? 0 : 1;
    for (uint32_t i = 0; i < n; i++) {
        float x = in[i], got = batch->dense.data[(size_t)i * batch->dense.cols + (size_t)col];
        float want = isnan(x) ? x : (float)log1p(x < 0 ? 0.0 : (double)x);
        cr_assert(within_ulp(got, want), "seed %llu: log1p(%a) = %a, reference %a",
                  (unsigned long long)seed, (double)x, (double)got, (double)want);
    }
    free(in);
    sl_batch_destroy(batch);
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
}

/* fill_missing right before log1p on the same feature runs as one pass
 * (dpp_dense_fill_log1p); it must give the bits of the two run apart
 * (here kept apart by a normalize with mean 0 and std 1 between them, which
 * leaves every float as it is), for fill values below, at and above 0, on
 * NaN, +-0, negatives, infinities and random patterns; the other column
 * is untouched. */
Test(transform, fill_missing_then_log1p_fused_same_bits)
{
    static const uint32_t edges[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0x00000000, 0x80000000,
                                     0xbf800000, 0x7f800000, 0xff800000, 0x3f800000, 0x00000001};
    static const char *fills[] = {"-2.5", "0", "3.25"};
    const uint32_t n = 4099, ne = sizeof edges / sizeof *edges; /* not a multiple of 4 */
    uint64_t seed = tu_seed("transform_fill_log1p"), st = seed;
    float *in = malloc((size_t)n * sizeof *in);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = i < ne ? edges[i] : (uint32_t)tu_next(&st);
        if (i >= ne && i % 3 == 0) b = 0x7fc00000; /* a third missing */
        memcpy(&in[i], &b, 4);
    }
    for (int f = 0; f < 3; f++) {
        float *out[2];
        for (int apart = 0; apart < 2; apart++) {
            char spec[512];
            snprintf(spec, sizeof spec,
                     "{\"source\": {\"table\": \"t\", \"features\": [\"d1\"]},"
                     " \"transforms\": [{\"op\": \"fill_missing\", \"feature\": \"d1\", "
                     "\"value\": %s},%s {\"op\": \"log1p\", \"feature\": \"d1\"}]}",
                     fills[f],
                     apart ? " {\"op\": \"normalize\", \"feature\": \"d1\", \"mean\": 0, "
                             "\"std\": 1},"
                           : "");
            sl_pipeline_job_t *job;
            sl_wh_schema_t *schema;
            sl_pipeline_plan_t *plan = plan_of(spec, &job, &schema);
            sl_batch_t *batch = sl_batch_new(NULL);
            batch->batch_size = n;
            const char *dnames[] = {"d0", "d1"};
            cr_assert_eq(sl_dense_init(&batch->dense, batch->arena, n, 2, dnames), SL_OK);
            for (uint32_t i = 0; i < n; i++) {
                batch->dense.data[2 * i] = NAN;
                batch->dense.data[2 * i + 1] = in[i];
            }
            sl_error_t err = {0};
            cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
            cr_assert_eq(batch->dense.cols, 1);
            cr_assert_str_eq(batch->dense.names[0], "d1");
            out[apart] = malloc((size_t)n * sizeof(float));
            memcpy(out[apart], batch->dense.data, (size_t)n * sizeof(float));
            sl_batch_destroy(batch);
            sl_pipeline_plan_destroy(plan);
            sl_pipeline_job_destroy(job);
            sl_wh_schema_destroy(schema);
        }
        float fv = strtof(fills[f], NULL);
        for (uint32_t i = 0; i < n; i++) {
            cr_assert_eq(memcmp(&out[0][i], &out[1][i], 4), 0,
                         "seed %llu fill %s: row %u (%a): fused %a, apart %a",
                         (unsigned long long)seed, fills[f], i, (double)in[i], (double)out[0][i],
                         (double)out[1][i]);
            float x = isnan(in[i]) ? fv : in[i];
            cr_assert(within_ulp(out[0][i], (float)log1p(x < 0 ? 0.0 : (double)x)), "row %u", i);
        }
        free(out[0]);
        free(out[1]);
    }
    free(in);
}

Test(transform, sigrid_hash_matches_xxh3)
{
    /* Bit-identical to XXH3_64bits_withSeed(8 bytes) % table_size for any
     * id, salt and size: powers of two (a mask), 1, sizes above 2^32 and
     * near 2^63 (the division by multiplication at its widest). */
    static const unsigned long long sizes[] = {
        1, 2, 3, 1000, 1024, 10000000, 4294967311ull, 1ull << 40, 9223372036854775783ull};
    uint64_t seed = tu_seed("transform_sigrid"), st = seed;
    const uint32_t n = 4093; /* not a multiple of the vector width: the scalar tail too */
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t salt = k == 0 ? 0 : tu_next(&st) >> 1;
        char spec[512];
        snprintf(spec, sizeof spec,
                 "{\"source\": {\"table\": \"t\"}, \"transforms\": [{\"op\": \"sigrid_hash\", "
                 "\"feature\": \"s0\", \"table_size\": %llu, \"salt\": %llu}]}",
                 sizes[k], (unsigned long long)salt);
        sl_pipeline_job_t *job;
        sl_wh_schema_t *schema;
        sl_pipeline_plan_t *plan = plan_of(spec, &job, &schema);
        sl_batch_t *batch = sl_batch_new(NULL);
        batch->batch_size = n;
        const char *keys[] = {"s0"};
        cr_assert_eq(sl_kjt_init(&batch->sparse, batch->arena, 1, keys, n, n, false), SL_OK);
        int64_t *ids = malloc((size_t)n * sizeof *ids);
        for (uint32_t i = 0; i < n; i++) {
            uint64_t v = tu_next(&st);
            /* small, negative and extreme ids too */
            ids[i] = i % 4 == 0 ? (int64_t)(v % 100) - 50 : i == 1 ? INT64_MIN : (int64_t)v;
            batch->sparse.lengths[i] = 1;
            batch->sparse.values[i] = ids[i];
        }
        sl_error_t err = {0};
        cr_assert_eq(sl_pipeline_plan_transform(plan, batch, &err), SL_OK, "%s", err.msg);
        for (uint32_t i = 0; i < n; i++)
            cr_assert_eq(batch->sparse.values[i], (int64_t)(h8(ids[i], salt) % sizes[k]),
                         "seed %llu size %llu id %lld", (unsigned long long)seed, sizes[k],
                         (long long)ids[i]);
        free(ids);
        sl_batch_destroy(batch);
        sl_pipeline_plan_destroy(plan);
        sl_pipeline_job_destroy(job);
        sl_wh_schema_destroy(schema);
    }
}
