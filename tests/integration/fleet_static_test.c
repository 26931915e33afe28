/* Static sharding, end to end: a job with 2 trainer ranks and `static`
 * sharding is run twice with the same seed (two jobs, same spec but the
 * id); each rank receives the same batches in both runs (the same sample
 * ids in the same batches), the ranks receive equal batch counts (the
 * splits have equal rows), and together they receive each of the two
 * epochs exactly once. With two workers the interleaving of batches from
 * different splits may differ between runs; the batches themselves may
 * not. And under worker kills (kill -9, the executor replacing them) each
 * rank still receives exactly its own splits' samples, once per epoch. */
#include "fleet_util.h"

TestSuite(fleet_static, .init = fu_setup, .fini = fu_teardown);

/* 16 splits of 1000 rows, batches of 250: 64 batches an epoch, 32 per rank. */
#define ROWS 16000u
#define EPOCHS 2u

typedef struct run {
    uint64_t batches[2];
    uint64_t *sizes[2];
    int64_t *order[2];
} run_t;

static void one_run(fu_master_t *m, sl_master_executor_t *ex, const char *table, const char *id,
                    run_t *r)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":99}}}",
             id, table, EPOCHS);
    char *job = fu_submit(m, spec, 2, "static", 2, 2, NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc(EPOCHS * ROWS, sizeof *seen);
    fu_client_t c[2];
    pthread_t th[2];
    for (uint32_t i = 0; i < 2; i++) {
        r->sizes[i] = calloc(EPOCHS * ROWS, sizeof *r->sizes[i]);
        r->order[i] = calloc(EPOCHS * ROWS, sizeof *r->order[i]);
        c[i] = (fu_client_t){.master = m->ctl,
                             .job = job,
                             .rank = i,
                             .world_size = 2,
                             .rows = ROWS,
                             .epochs = EPOCHS,
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
    fu_assert_once_per_epoch(seen, ROWS, EPOCHS);
    cr_assert_eq(sl_master_executor_scale(ex, job, 0, NULL, NULL, &err), SL_OK, "%s", err.msg);
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
    sl_master_executor_t *ex = fu_executor(&m, 1);
    run_t r1 = {0}, r2 = {0};
    one_run(&m, ex, table, "static-a", &r1);
    one_run(&m, ex, table, "static-b", &r2);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(r1.batches[rank], 32 * EPOCHS, "rank %d got %llu batches, want %u", rank,
                     (unsigned long long)r1.batches[rank], 32 * EPOCHS);
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

/* Two ranks, static sharding, three workers of which three are killed
 * with SIGKILL mid-job (the executor starts replacements): each sample of
 * each epoch reaches exactly one rank exactly once, each rank gets half of
 * every epoch (8 of the 16 equal splits), and a sample goes to the same
 * rank in both epochs (the assignment is the job's, not the epoch's). */
Test(fleet_static, worker_kills_keep_each_rank_to_its_splits)
{
    uint64_t rng = tu_seed("fleet_static.worker_kills_keep_each_rank_to_its_splits");
    fu_master_t m = {.lease_timeout_ms = 1000};
    char *job = fu_job_up(&m, "static-kills", ROWS, EPOCHS, 2, "static", 3);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen[2];
    fu_client_t c[2];
    pthread_t th[2];
    for (uint32_t i = 0; i < 2; i++) {
        seen[i] = calloc(EPOCHS * ROWS, sizeof *seen[i]);
        c[i] = (fu_client_t){.master = m.ctl,
                             .job = job,
                             .rank = i,
                             .world_size = 2,
                             .rows = ROWS,
                             .epochs = EPOCHS,
                             .seen = seen[i],
                             .delay_us = 40000};
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
    uint32_t kills = 0;
    double deadline = fu_now() + tu_timeout(60);
    while (kills < 3 && !atomic_load(&c[0].finished) && !atomic_load(&c[1].finished)) {
        cr_assert(fu_now() < deadline, "the kills did not happen in time");
        usleep((useconds_t)(400000 + tu_below(&rng, 400000)));
        sl_master_executor_worker_t w[8];
        uint32_t n = sl_master_executor_list(ex, job, w, 8);
        if (n > 0) {
            cr_assert_eq(kill(w[tu_below(&rng, n < 8 ? n : 8)].pid, SIGKILL), 0);
            kills++;
            usleep(50 * 1000);
        }
        cr_assert_eq(sl_master_executor_scale(ex, job, 3, NULL, NULL, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_geq(kills, 2, "only %u kills before the job ended", kills);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].end, SL_ERR_CLOSED, "rank %d: %s: %s", i, sl_err_str(c[i].end), c[i].msg);
    }
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint64_t per_rank[2] = {0, 0};
        for (uint64_t id = 0; id < ROWS; id++) {
            uint64_t k = (uint64_t)e * ROWS + id;
            unsigned a = atomic_load(&seen[0][k]), b = atomic_load(&seen[1][k]);
            cr_assert_eq(a + b, 1, "epoch %u sample %llu: rank 0 got it %u times, rank 1 %u", e,
                         (unsigned long long)id, a, b);
            unsigned a0 = atomic_load(&seen[0][id]);
            cr_assert_eq(a, a0, "sample %llu went to rank %u in epoch 0, rank %u in epoch %u",
                         (unsigned long long)id, a0 ? 0u : 1u, a ? 0u : 1u, e);
            per_rank[0] += a;
            per_rank[1] += b;
        }
        cr_assert_eq(per_rank[0], ROWS / 2, "epoch %u: rank 0 got %llu samples", e,
                     (unsigned long long)per_rank[0]);
        cr_assert_eq(per_rank[1], ROWS / 2, "epoch %u: rank 1 got %llu samples", e,
                     (unsigned long long)per_rank[1]);
    }
    cr_assert(fu_job_finished(&m, job));
    cr_log_info("%u workers killed", kills);
    free(seen[0]);
    free(seen[1]);
    free(job);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
}
