/* Static sharding, end to end: a job with 2 trainer ranks and `static`
 * sharding is run twice with the same seed (two jobs, same spec but the
 * id); each rank receives the same batches in both runs (the same sample
 * ids in the same batches), the ranks receive equal batch counts (the
 * splits have equal rows), and together they receive the epoch exactly
 * once. With two workers the interleaving of batches from different splits
 * may differ between runs; the batches themselves may not. */
#include "fleet_util.h"

TestSuite(fleet_static, .init = fu_setup, .fini = fu_teardown);

/* 16 splits of 1000 rows, batches of 250: 64 batches, 32 per rank. */
#define ROWS 16000u

typedef struct run {
    uint64_t batches[2];
    uint64_t *sizes[2];
    int64_t *order[2];
} run_t;

static void one_run(fu_master_t *m, sl_dpp_executor_t *ex, const char *table, const char *id,
                    run_t *r)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"shuffle\":{\"splits\":true,\"seed\":99}}}",
             id, table);
    char *job = fu_submit(m, spec, 2, "static", 2, 2, NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    for (uint32_t i = 0; i < 2; i++) {
        r->sizes[i] = calloc(ROWS, sizeof *r->sizes[i]);
        r->order[i] = calloc(ROWS, sizeof *r->order[i]);
        c[i] = (fu_client_t){.master = m->ctl,
                             .job = job,
                             .rank = i,
                             .world_size = 2,
                             .rows = ROWS,
                             .seen = seen,
                             .order = r->order[i],
                             .batch_sizes = r->sizes[i]};
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].end, SL_ERR_CLOSED, "%s rank %d: %s: %s", id, i, sl_err_str(c[i].end),
                     c[i].msg);
        r->batches[i] = c[i].batches;
    }
    fu_assert_each_seen(seen, ROWS, 1);
    cr_assert_eq(sl_dpp_executor_scale(ex, job, 0, NULL, NULL, &err), SL_OK, "%s", err.msg);
    free(seen);
    free(job);
}

/* The batches of one rank as strings "id id id ...", sorted: the same
 * batches compare equal whatever order they came in. */
static char **batch_keys(const run_t *r, int rank)
{
    char **keys = calloc(r->batches[rank], sizeof *keys);
    uint64_t off = 0;
    for (uint64_t b = 0; b < r->batches[rank]; b++) {
        size_t cap = r->sizes[rank][b] * 12 + 1, len = 0;
        keys[b] = malloc(cap);
        keys[b][0] = '\0';
        for (uint64_t i = 0; i < r->sizes[rank][b]; i++)
            len += (size_t)snprintf(keys[b] + len, cap - len, "%lld ",
                                    (long long)r->order[rank][off + i]);
        off += r->sizes[rank][b];
    }
    return keys;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(fleet_static, same_seed_same_batches_per_rank)
{
    char table[300];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    sl_dpp_executor_t *ex = fu_executor(&m, 1);
    run_t r1 = {0}, r2 = {0};
    one_run(&m, ex, table, "static-a", &r1);
    one_run(&m, ex, table, "static-b", &r2);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(r1.batches[rank], 32, "rank %d got %llu batches, want 32", rank,
                     (unsigned long long)r1.batches[rank]);
        cr_assert_eq(r2.batches[rank], r1.batches[rank]);
        char **k1 = batch_keys(&r1, rank), **k2 = batch_keys(&r2, rank);
        qsort(k1, r1.batches[rank], sizeof *k1, cmp_str);
        qsort(k2, r2.batches[rank], sizeof *k2, cmp_str);
        for (uint64_t b = 0; b < r1.batches[rank]; b++) {
            cr_assert_str_eq(k1[b], k2[b], "rank %d: batch %llu differs between the runs", rank,
                             (unsigned long long)b);
            free(k1[b]);
            free(k2[b]);
        }
        free(k1);
        free(k2);
        free(r1.sizes[rank]), free(r2.sizes[rank]), free(r1.order[rank]), free(r2.order[rank]);
    }
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
}
