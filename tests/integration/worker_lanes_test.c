/* The worker's stripe lanes (docs/WORKER.md, "Threads"): with --threads
 * N > 1, N lanes read, filter and make the fused batches of several
 * stripes at once while the reader thread batches them in order. The
 * batches must be the ones one thread makes: the same rows, values,
 * origins and sequence numbers, whatever the number of lanes; only the
 * order in which they become ready may differ. Each job is run with 1, 2
 * and 5 threads and every batch's digest (its origin and a hash of its
 * sample ids, sparse lengths and values, dense and label values)
 * compared, with every sample arriving once per epoch. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

static char *tmpdir;

static void setup(void)
{
    tmpdir = tu_mkdtemp("worker-lanes");
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
    free(tmpdir);
}

TestSuite(worker_lanes, .init = setup, .fini = teardown);

/* One batch as delivered. */
typedef struct digest {
    uint32_t epoch, size;
    uint64_t split, first_row, sequence, hash;
} digest_t;

static int digest_cmp(const void *a, const void *b)
{
    const digest_t *x = a, *y = b;
    if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
    if (x->split != y->split) return x->split < y->split ? -1 : 1;
    if (x->first_row != y->first_row) return x->first_row < y->first_row ? -1 : 1;
    if (x->sequence != y->sequence) return x->sequence < y->sequence ? -1 : 1;
    return 0;
}

static uint64_t batch_hash(const sl_batch_t *b)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 27);
    uint32_t B = b->batch_size;
    if (b->sample_ids) XXH64_update(h, b->sample_ids, B * sizeof *b->sample_ids);
    XXH64_update(h, b->sparse.lengths, (size_t)b->sparse.num_keys * B * sizeof(int32_t));
    XXH64_update(h, b->sparse.values, b->sparse.num_values * sizeof(int64_t));
    XXH64_update(h, b->dense.data, (size_t)b->dense.rows * b->dense.cols * sizeof(float));
    XXH64_update(h, b->labels.data, (size_t)b->labels.rows * b->labels.cols * sizeof(float));
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

static uint64_t mem_limit = 64u << 20; /* the workers' --memory-limit */

/* Run job with threads threads to its end with one client: *n digests,
 * sorted by origin (caller frees); every sample id in [0, rows) at most
 * once per epoch, all of them when all is true (no filter). */
static digest_t *run(const char *spec, uint32_t threads, uint64_t rows, uint32_t epochs, bool all,
                     uint64_t *n, uint64_t *fused)
{
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    sl_pipeline_job_t *job = NULL;
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, &p, &err), SL_OK, "%s", err.msg);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = threads;
    o.memory_limit = mem_limit;
    sl_worker_t *w = NULL;
    cr_assert_eq(sl_worker_start(job, &o, &w, &p, &err), SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    to.prefetch = 4;
    sl_trainer_t *t = NULL;
    cr_assert_eq(sl_trainer_connect(&to, &t, &err), SL_OK, "%s", err.msg);
    size_t cap = 64;
    digest_t *d = malloc(cap * sizeof *d);
    uint8_t *seen = calloc(rows * epochs, 1);
    *n = 0;
    sl_batch_t *b;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, (int)(tu_timeout(20) * 1000), &b, &err)) == SL_OK) {
        if (*n == cap) d = realloc(d, (cap *= 2) * sizeof *d);
        cr_assert_lt(b->origin.epoch, epochs);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && (uint64_t)id < rows, "sample id %ld", (long)id);
            uint8_t *s = &seen[(uint64_t)b->origin.epoch * rows + (uint64_t)id];
            cr_assert_eq(*s, 0, "threads %u: epoch %u sample %ld twice", threads, b->origin.epoch,
                         (long)id);
            *s = 1;
        }
        d[(*n)++] = (digest_t){.epoch = b->origin.epoch,
                               .size = b->batch_size,
                               .split = b->origin.split_id,
                               .first_row = b->origin.first_row,
                               .sequence = b->origin.sequence,
                               .hash = batch_hash(b)};
        sl_trainer_release(t, b);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "threads %u: %s", threads, err.msg);
    sl_trainer_close(t);
    if (all)
        for (uint64_t i = 0; i < rows * epochs; i++)
            cr_assert_eq(seen[i], 1, "threads %u: epoch %lu sample %lu missing", threads,
                         (unsigned long)(i / rows), (unsigned long)(i % rows));
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.batches, *n);
    cr_assert_leq(st.memory_peak, mem_limit, "threads %u: peak %lu over the limit", threads,
                  (unsigned long)st.memory_peak);
    *fused = st.batches_fused;
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    free(seen);
    qsort(d, *n, sizeof *d, digest_cmp);
    return d;
}

/* The same batches with 1, 2 and 5 threads; @return the batches made by
 * the fused path (the same count every time). */
static uint64_t same_batches(const char *spec, uint64_t rows, uint32_t epochs, bool all)
{
    uint64_t n1, f1;
    digest_t *d1 = run(spec, 1, rows, epochs, all, &n1, &f1);
    static const uint32_t more[] = {2, 5};
    for (int k = 0; k < 2; k++) {
        uint64_t n, f;
        digest_t *d = run(spec, more[k], rows, epochs, all, &n, &f);
        cr_assert_eq(n, n1, "threads %u: %lu batches, one thread %lu", more[k], (unsigned long)n,
                     (unsigned long)n1);
        cr_assert_eq(f, f1, "threads %u: %lu fused batches, one thread %lu", more[k],
                     (unsigned long)f, (unsigned long)f1);
        for (uint64_t i = 0; i < n; i++) {
            cr_assert_eq(digest_cmp(&d[i], &d1[i]), 0,
                         "threads %u: batch %lu is epoch %u split %lu row %lu, one thread's "
                         "epoch %u split %lu row %lu",
                         more[k], (unsigned long)i, d[i].epoch, (unsigned long)d[i].split,
                         (unsigned long)d[i].first_row, d1[i].epoch, (unsigned long)d1[i].split,
                         (unsigned long)d1[i].first_row);
            cr_assert_eq(d[i].size, d1[i].size, "threads %u: batch %lu", more[k], (unsigned long)i);
            cr_assert_eq(d[i].hash, d1[i].hash, "threads %u: batch %lu's values differ", more[k],
                         (unsigned long)i);
        }
        free(d);
    }
    free(d1);
    return f1;
}

static char *gen(const char *name, uint64_t rows, uint32_t stripe_rows, uint32_t files)
{
    char *dir = tu_path(tmpdir, name);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", rows, 31, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = files;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = stripe_rows;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
    return dir;
}

/* Fused batches inside stripes, batches straddling stripes (1,700-row
 * stripes, batches of 500) built on the reader thread and transformed on
 * the transform threads, splits of two stripes in a shuffled order, and
 * an epoch's short last batch: two epochs. */
Test(worker_lanes, fused_and_straddling_batches_are_those_of_one_thread)
{
    const uint64_t rows = 20000;
    char *table = gen("t", rows, 1700, 3);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"lanes\",\"source\":{\"table\":\"%s\",\"stripes_per_split\":2},"
             "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":1000,\"salt\":7},"
             "{\"op\":\"first_x\",\"feature\":\"C2\",\"x\":1}],"
             "\"batch\":{\"size\":500,\"epochs\":2,\"shuffle\":{\"splits\":true}}}",
             table);
    uint64_t fused = same_batches(spec, rows, 2, true);
    cr_assert_gt(fused, 0);
    free(table);
}

/* A filter that weighs rows (negative_downsample adds the weight label):
 * no fused path, every batch built by the batcher from the lanes' kept
 * rows; drop_last drops each epoch's short batch. */
Test(worker_lanes, filtered_batches_are_those_of_one_thread)
{
    const uint64_t rows = 15000;
    char *table = gen("f", rows, 1100, 2);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"lanes-f\",\"source\":{\"table\":\"%s\"},"
             "\"filters\":[{\"op\":\"negative_downsample\",\"label\":\"label\",\"rate\":0.4,"
             "\"seed\":3}],"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C3\",\"table_size\":77}],"
             "\"batch\":{\"size\":333,\"epochs\":2,\"drop_last\":true}}",
             table);
    cr_assert_eq(same_batches(spec, rows, 2, false), 0);
    free(table);
}

/* A --memory-limit that holds one stripe (about 3.6 MB decoded) but not
 * two: the lanes read one stripe at a time, as one thread does, also
 * across each file's short last stripe (4,000 rows) and the full one
 * after it, instead of failing with "cannot hold" (a lane that read
 * ahead on the short stripe's size held the memory the next stripe
 * needed). The same batches, the peak within the limit. */
Test(worker_lanes, a_limit_of_one_stripe_reads_one_at_a_time)
{
    const uint64_t rows = 3 * 24000;
    char *table = gen("m", rows, 10000, 3);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"lanes-m\",\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C4\",\"table_size\":5}],"
             "\"batch\":{\"size\":1000}}",
             table);
    mem_limit = 6u << 20;
    cr_assert_gt(same_batches(spec, rows, 1, true), 0);
    free(table);
}

/* Many fused batches a stripe (4,000-row stripes, batches of 16: 250 a
 * stripe): a lane makes each one as the reader cuts it, while the reader
 * appends the next ones to the lane's list and moves it as it grows (32,
 * 64, 128, 256 entries), so the lane copies an entry out while the list
 * moves under it. The same batches, each once. */
Test(worker_lanes, batches_are_made_as_they_are_cut)
{
    const uint64_t rows = 12000;
    char *table = gen("c", rows, 4000, 1);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"lanes-c\",\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I2\"},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"C5\",\"table_size\":100,\"salt\":1}],"
             "\"batch\":{\"size\":16,\"epochs\":2}}",
             table);
    mem_limit = 64u << 20;
    cr_assert_eq(same_batches(spec, rows, 2, true), 2 * (rows / 16));
    free(table);
}
