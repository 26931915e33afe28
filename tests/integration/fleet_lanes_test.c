/* The worker's stripe lanes under a master (docs/WORKER.md, "Threads"):
 * a job whose leases hold several stripes (stripes_per_split 3) with
 * batches that end inside stripes and straddle them (350 rows over
 * stripes of 1,000), fused transforms and static sharding over two ranks,
 * run once by a worker of one thread and once by a worker of three (three
 * stripe lanes, leases taken ahead while the master has them). Each rank
 * gets the same batches (the same sample ids in the same batches) from
 * both, each sample once per epoch, and each lease's batches tile its
 * rows (8 of 350 and one of 200 per 3,000-row split). */
#include "fleet_util.h"

TestSuite(fleet_lanes, .init = fu_setup, .fini = fu_teardown);

/* 2 files of 6,000 rows, stripes of 1,000, 3 stripes a split: 4 splits,
 * 2 a rank; 9 batches a split. */
#define ROWS 12000u
#define EPOCHS 2u

typedef struct run {
    uint64_t batches[2];
    uint64_t *sizes[2];
    int64_t *order[2];
} run_t;

static void one_run(fu_master_t *m, const char *table, const char *id, uint32_t threads, run_t *r)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\",\"stripes_per_split\":3},"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":999},"
             "{\"op\":\"log1p\",\"feature\":\"I2\"}],"
             "\"batch\":{\"size\":350,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":5}}}",
             id, table, EPOCHS);
    char *job = fu_submit(m, spec, 2, "static", 1, 1, NULL);
    sl_master_executor_t *ex = fu_executor(m, threads);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
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
    fu_executor_destroy(ex);
    free(seen);
    free(job);
}

/* The batches of one rank as strings "id id id ...", sorted. */
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

Test(fleet_lanes, three_lanes_serve_the_batches_of_one_thread)
{
    char table[300];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    run_t r1 = {0}, r3 = {0};
    one_run(&m, table, "lanes-1", 1, &r1);
    one_run(&m, table, "lanes-3", 3, &r3);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(r1.batches[rank], 18 * EPOCHS, "rank %d got %llu batches, want %u", rank,
                     (unsigned long long)r1.batches[rank], 18 * EPOCHS);
        cr_assert_eq(r3.batches[rank], r1.batches[rank]);
        uint64_t short_ones = 0;
        for (uint64_t b = 0; b < r3.batches[rank]; b++) {
            cr_assert(r3.sizes[rank][b] == 350 || r3.sizes[rank][b] == 200,
                      "rank %d batch %llu of %llu rows", rank, (unsigned long long)b,
                      (unsigned long long)r3.sizes[rank][b]);
            short_ones += r3.sizes[rank][b] == 200;
        }
        cr_assert_eq(short_ones, 2 * EPOCHS, "rank %d: %llu short batches", rank,
                     (unsigned long long)short_ones);
        char **k1 = batch_keys(&r1, rank), **k3 = batch_keys(&r3, rank);
        qsort(k1, r1.batches[rank], sizeof *k1, cmp_str);
        qsort(k3, r3.batches[rank], sizeof *k3, cmp_str);
        for (uint64_t b = 0; b < r1.batches[rank]; b++) {
            cr_assert_str_eq(k1[b], k3[b], "rank %d: batch %llu differs between 1 and 3 threads",
                             rank, (unsigned long long)b);
            free(k1[b]);
            free(k3[b]);
        }
        free(k1);
        free(k3);
        free(r1.sizes[rank]), free(r3.sizes[rank]), free(r1.order[rank]), free(r3.order[rank]);
    }
    fu_master_stop(&m, SIGTERM);
}
