/* The DPP worker end to end, transforms: transformed values (log1p,
 * sigrid hash, filters, on the fused path with and without transforms at
 * decode) equal a reference computed here from sl_wh_reader output. */
#include "worker_e2e_util.h"

/* ---- transforms against a reference from the reader ---- */

typedef struct reference {
    uint64_t rows;
    float *i1, *i2, *i5; /* by sample id */
    int64_t *c1, *c2;    /* single-id lists (criteo), -1 when empty */
    float *label;
    atomic_uint checked;
    bool no_weight; /* no filter adds the weight label */
} reference_t;

static void collect_reference(void *ctx, const sl_wh_rows_t *rows)
{
    reference_t *ref = ctx;
    const sl_batch_t *b = &rows->batch;
    uint32_t n = b->batch_size;
    uint64_t ko[3];
    sl_kjt_key_offsets(&b->sparse, ko);
    uint64_t off[2] = {ko[0], ko[1]};
    for (uint32_t i = 0; i < n; i++) {
        int64_t id = b->sample_ids[i];
        cr_assert(id >= 0 && (uint64_t)id < ref->rows);
        ref->i1[id] = b->dense.data[i * 3];
        ref->i2[id] = b->dense.data[i * 3 + 1];
        ref->i5[id] = b->dense.data[i * 3 + 2];
        ref->label[id] = b->labels.data[i * b->labels.cols];
        int64_t *cs[2] = {ref->c1, ref->c2};
        for (int k = 0; k < 2; k++) {
            int32_t len = b->sparse.lengths[k * n + i];
            cr_assert_leq(len, 1);
            cs[k][id] = len ? b->sparse.values[off[k]] : -1;
            off[k] += (uint64_t)len;
        }
    }
}

/* ref->rows set: the columns by sample id, read from table. */
static void load_reference(const char *table, reference_t *ref)
{
    static const char *const feats[] = {"I1", "I2", "I5", "C1", "C2"};
    uint64_t rows = ref->rows;
    ref->i1 = calloc(rows, 4), ref->i2 = calloc(rows, 4), ref->i5 = calloc(rows, 4);
    ref->label = calloc(rows, 4);
    ref->c1 = calloc(rows, 8), ref->c2 = calloc(rows, 8);
    read_table(table, feats, 5, collect_reference, ref);
}

static void reference_free(reference_t *ref)
{
    free(ref->i1), free(ref->i2), free(ref->i5), free(ref->label), free(ref->c1), free(ref->c2);
}

static int col(const sl_dense_t *d, const char *name)
{
    for (uint32_t c = 0; c < d->cols; c++)
        if (d->names && strcmp(d->names[c], name) == 0) return (int)c;
    return -1;
}

/* log1p is specified to within 1 ulp of log1p computed in double
 * (docs/JOBS.md); same_float allows that ulp for it. */
static float ref_log1p(float x)
{
    return isnan(x) ? x : (float)log1p(x < 0.0f ? 0.0 : (double)x);
}

static int64_t ref_sigrid(int64_t id, uint64_t salt, uint64_t size)
{
    return (int64_t)(XXH3_64bits_withSeed(&id, sizeof id, salt) % size);
}

static void same_float(float got, float want, bool one_ulp, int64_t id, const char *what)
{
    if (isnan(want))
        cr_assert(isnan(got), "sample %ld %s: %g, want NaN", (long)id, what, got);
    else
        cr_assert(got == want || (one_ulp && (nextafterf(want, INFINITY) == got ||
                                              nextafterf(want, -INFINITY) == got)),
                  "sample %ld %s: %.9g, want %.9g (within 1 ulp)", (long)id, what, got, want);
}

static void check_transforms(void *ctx, const sl_batch_t *b)
{
    reference_t *ref = ctx;
    int i1 = col(&b->dense, "I1"), i2 = col(&b->dense, "I2"), i5 = col(&b->dense, "I5");
    cr_assert(i1 >= 0 && i2 >= 0 && i5 >= 0);
    int k1 = sl_kjt_find_key(&b->sparse, "C1"), k2 = sl_kjt_find_key(&b->sparse, "C2");
    cr_assert(k1 >= 0 && k2 >= 0);
    uint64_t *ko = malloc((b->sparse.num_keys + 1) * sizeof *ko);
    sl_kjt_key_offsets(&b->sparse, ko);
    uint64_t off1 = ko[k1], off2 = ko[k2];
    int wcol = col(&b->labels, "weight");
    cr_assert(ref->no_weight ? wcol < 0 : wcol >= 0, "negative_downsample adds the weight label");
    uint32_t n = b->batch_size, D = b->dense.cols;
    for (uint32_t i = 0; i < n; i++) {
        int64_t id = b->sample_ids[i];
        same_float(b->dense.data[i * D + i1], ref_log1p(ref->i1[id]), true, id, "log1p(I1)");
        same_float(b->dense.data[i * D + i2], ref_log1p(ref->i2[id]), true, id, "log1p(I2)");
        same_float(b->dense.data[i * D + i5], ref->i5[id], false, id, "I5 (untouched)");
        int32_t l1 = b->sparse.lengths[(size_t)k1 * n + i];
        int32_t l2 = b->sparse.lengths[(size_t)k2 * n + i];
        cr_assert_eq(l1, ref->c1[id] >= 0 ? 1 : 0);
        cr_assert_eq(l2, ref->c2[id] >= 0 ? 1 : 0);
        if (l1) cr_assert_eq(b->sparse.values[off1], ref_sigrid(ref->c1[id], 7, 1000));
        if (l2) cr_assert_eq(b->sparse.values[off2], ref_sigrid(ref->c2[id], 0, 50));
        off1 += (uint64_t)l1;
        off2 += (uint64_t)l2;
        float label = b->labels.data[i * b->labels.cols];
        cr_assert_eq(label, ref->label[id]);
        if (!ref->no_weight)
            cr_assert_eq(b->labels.data[i * b->labels.cols + (uint32_t)wcol],
                         label > 0 ? 1.0f : 2.0f, "weight of sample %ld", (long)id);
        atomic_fetch_add(&ref->checked, 1);
    }
    free(ko);
}

Test(worker_e2e, transforms_and_filters_match_reference)
{
    char table[300], addr[64], spec[2048];
    const uint64_t rows = 12000;
    gen("criteo", "criteo", rows, 23, 2500, 2, table, sizeof table);
    reference_t ref = {.rows = rows};
    load_reference(table, &ref);
    snprintf(spec, sizeof spec,
             "{\"id\":\"e2e-transforms\","
             "\"source\":{\"table\":\"%s\",\"features\":[\"I1\",\"I2\",\"I5\",\"C1\",\"C2\"]},"
             "\"filters\":[{\"op\":\"negative_downsample\",\"label\":\"label\",\"rate\":0.5,"
             "\"seed\":9}],"
             "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"},"
             "{\"op\":\"log1p\",\"feature\":\"I2\"},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":1000,\"salt\":7},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C2\",\"table_size\":50}],"
             "\"batch\":{\"size\":700}}",
             table);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 1, rows, 1, check_transforms, &ref, &batches);
    /* every positive kept once; negatives at most once, about half of them */
    uint64_t neg = 0, neg_kept = 0;
    for (uint64_t i = 0; i < rows; i++) {
        cr_assert_leq(seen[i], 1);
        if (ref.label[i] > 0)
            cr_assert_eq(seen[i], 1, "positive %lu dropped", (unsigned long)i);
        else {
            neg++;
            neg_kept += seen[i];
        }
    }
    cr_assert(neg_kept > neg * 4 / 10 && neg_kept < neg * 6 / 10, "%lu of %lu negatives kept",
              (unsigned long)neg_kept, (unsigned long)neg);
    cr_assert_eq(atomic_load(&ref.checked), rows - neg + neg_kept);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.rows_read, rows);
    cr_assert_eq(st.rows_kept, rows - neg + neg_kept);
    free(seen);
    reference_free(&ref);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* The fused path (docs/WORKER.md): batches inside a stripe are made
 * straight from it with the transforms on the way, batches straddling two
 * stripes by the transform threads; both against the reference, two
 * epochs, every sample once per epoch. With the transforms at decode
 * (docs/WORKER.md "Transforms at decode", the default: log1p and
 * sigrid_hash of these features run in the table reader) or without. */
static void fused_against_reference(bool no_decode_maps)
{
    char table[300], addr[64], spec[2048];
    const uint64_t rows = 12000;
    gen("criteo", "criteo", rows, 29, 2500, 2, table, sizeof table);
    reference_t ref = {.rows = rows, .no_weight = true};
    load_reference(table, &ref);
    snprintf(spec, sizeof spec,
             "{\"id\":\"e2e-fused\","
             "\"source\":{\"table\":\"%s\",\"features\":[\"I1\",\"I2\",\"I5\",\"C1\",\"C2\"]},"
             "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"},"
             "{\"op\":\"log1p\",\"feature\":\"I2\"},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":1000,\"salt\":7},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C2\",\"table_size\":50}],"
             "\"batch\":{\"size\":512,\"epochs\":2}}",
             table);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    o.memory_limit = 64u << 20;
    o.no_decode_maps = no_decode_maps;
    sl_worker_t *w = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, &o, &w, NULL, &err), SL_OK, "%s", err.msg);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 1, rows, 2, check_transforms, &ref, &batches);
    assert_once_per_epoch(seen, rows, 2);
    cr_assert_eq(atomic_load(&ref.checked), 2 * rows);
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    /* 2 files of 6000 rows in stripes of 2500, 2500, 1000; batches of 512
     * run across them: per epoch 24 batches. Inside a stripe, after the
     * batch the previous stripe left open: 4 + 4 + 1 + 4 + 4 + 1 = 18 fused;
     * the 5 that straddle two stripes and the short last one are not. */
    cr_assert_eq(st.batches, batches);
    cr_assert_eq(st.batches, 2 * 24);
    cr_assert_eq(st.batches_fused, 2 * 18);
    free(seen);
    reference_free(&ref);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_e2e, fused_path_matches_reference)
{
    fused_against_reference(false);
}

Test(worker_e2e, fused_path_without_decode_maps_matches_reference)
{
    fused_against_reference(true);
}
