/* What lease_client_test.c and lease_client_conn_test.c share: the table
 * read directly (each split's sample ids and labels), the job specs, a
 * worker started under the fake master of fake_master.h, the check that a
 * lease's batches and empty ranges tile its todo. */
#ifndef SLUICE_TESTS_LEASE_CLIENT_UTIL_H
#define SLUICE_TESTS_LEASE_CLIENT_UTIL_H

/* Every helper here: a test file uses only some. */
#define LC_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dpp/worker/lease/lease_client.h"
#include "fake_master.h"
#include "rpc/frame.h"
#include "sluice/wire.h"
#include "testutil.h"
#include "warehouse/import.h"

#define STRIPE_ROWS 200
#define ROWS 2400 /* 12 stripes, 2 files, 2 stripes per split: 6 splits of 400 rows */

LC_FN char tmpdir[256], table[300];

/* ---- the table, read directly: per split, each row's sample id and label ---- */

typedef struct ref_split {
    uint64_t rows;
    int64_t *ids;
    float *label;
} ref_split_t;

LC_FN sl_wh_splits_t *splits;
LC_FN sl_wh_table_t *tab;
LC_FN ref_split_t ref[16];

LC_FN void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-msrc-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(table, sizeof table, "%s/t", tmpdir);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", ROWS, 7, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = STRIPE_ROWS;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(table, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_open(table, NULL, &tab, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_splits(tab, NULL, 2, &splits, &err), SL_OK, "%s", err.msg);
    cr_assert_leq(splits->count, 16);
    cr_assert_geq(splits->count, 4);
    const char *feats[] = {"I1"};
    sl_wh_read_opts_t ro = {.features = feats, .num_features = 1};
    for (uint32_t s = 0; s < splits->count; s++) {
        ref_split_t *rs = &ref[s];
        rs->rows = splits->items[s].num_rows;
        rs->ids = calloc(rs->rows, sizeof *rs->ids);
        rs->label = calloc(rs->rows, sizeof *rs->label);
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open_split(tab, &splits->items[s], &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *rows;
        uint64_t at = 0;
        while (sl_wh_reader_next(r, &rows, &err) == SL_OK && rows) {
            for (uint32_t i = 0; i < rows->batch.batch_size; i++, at++) {
                rs->ids[at] = rows->batch.sample_ids[i];
                rs->label[at] = rows->batch.labels.data[(size_t)i * rows->batch.labels.cols];
            }
        }
        cr_assert_eq(at, rs->rows);
        sl_wh_reader_close(r);
    }
}

LC_FN void teardown(void)
{
    for (uint32_t s = 0; splits && s < splits->count; s++) {
        free(ref[s].ids);
        free(ref[s].label);
    }
    sl_wh_splits_destroy(splits);
    sl_wh_table_close(tab);
    splits = NULL;
    tab = NULL;
    tu_rm_tree(tmpdir);
}

TestSuite(lease_client, .init = setup, .fini = teardown);

/* ---- the worker under the fake master ---- */

LC_FN char spec_buf[1024];

LC_FN const char *spec_shuffled(bool drop_last, bool filter, bool shuffle)
{
    snprintf(spec_buf, sizeof spec_buf,
             "{\"id\": \"spec-id\", \"source\": {\"table\": \"%s\", \"stripes_per_split\": 2,"
             " \"features\": [\"I1\", \"C1\"]},"
             " %s \"batch\": {\"size\": 128, \"drop_last\": %s%s}}",
             table,
             filter ? "\"filters\": [{\"op\": \"label_equals\", \"label\": \"label\", "
                      "\"value\": 0}],"
                    : "",
             drop_last ? "true" : "false",
             shuffle ? ", \"shuffle\": {\"window\": 1000, \"seed\": 5}" : "");
    return spec_buf;
}

LC_FN const char *spec_of(bool drop_last, bool filter)
{
    return spec_shuffled(drop_last, filter, false);
}

LC_FN bool in_order = true; /* check_leases: samples in row order (no shuffle window) */

LC_FN int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

LC_FN uint32_t share_stall_ms; /* the lease client's (0: its default) */
/* the lease client's --cache-dir and --cache-size (NULL: none) */
LC_FN const char *cache_dir;
LC_FN uint64_t cache_max_bytes;

LC_FN sl_worker_t *start_worker(fake_t *f, sl_pipeline_job_t **job, sl_worker_lease_client_t **ms)
{
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f->port);
    sl_worker_lease_client_opts_t mo = {.master = master,
                                        .worker_id = "w1",
                                        .threads = 2,
                                        .share_stall_ms = share_stall_ms,
                                        .cache_dir = cache_dir,
                                        .cache_max_bytes = cache_max_bytes};
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.threads = 2;
    wo.memory_limit = 64u << 20;
    sl_worker_t *w = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start_leased(&mo, &wo, 5000, job, &w, ms, &p, &err), SL_OK, "%s",
                 err.msg);
    sl_pipeline_problems_free(&p);
    return w;
}

LC_FN bool kept(bool filter, uint32_t split, uint64_t row)
{
    return !filter || ref[split].label[row] == 0.0f;
}

/* Every lease that was read: its batches and empty ranges tile its todo;
 * each batch holds exactly the kept rows of its range. */
LC_FN void check_leases(fake_t *f, bool filter, bool drop_last, uint64_t skip_gen)
{
    for (uint32_t li = 0; li < f->nq; li++) {
        const fm_lease_t *l = &f->q[li];
        if (l->generation == skip_gen) continue;
        const fm_read_t *rd = NULL;
        for (uint32_t i = 0; i < f->nreads; i++)
            if (f->reads[i].generation == l->generation) {
                cr_assert_null(rd, "two split reads of generation %lu",
                               (unsigned long)l->generation);
                rd = &f->reads[i];
            }
        cr_assert_not_null(rd, "no split read for generation %lu", (unsigned long)l->generation);
        cr_assert(rd->all_acked, "split read of generation %lu before all its batches were acked",
                  (unsigned long)l->generation);
        uint64_t rows = splits->items[l->split].num_rows;
        uint8_t *cover = calloc(rows, 1); /* 1 batch, 2 empty */
        for (uint32_t i = 0; i < f->ngot; i++) {
            const got_batch_t *g = &f->got[i];
            if (g->generation != l->generation) continue;
            cr_assert_eq(g->split, l->split);
            cr_assert_str_eq(g->job, "jobx");
            cr_assert_eq(g->rank_plus_one, l->rank_plus_one);
            cr_assert(g->from < g->to && g->to <= rows);
            int64_t sorted[128];
            memcpy(sorted, g->ids, g->n * sizeof *sorted);
            if (!in_order) qsort(sorted, g->n, sizeof *sorted, cmp_i64);
            uint32_t k = 0;
            for (uint64_t r = g->from; r < g->to; r++) {
                cr_assert_eq(cover[r], 0, "row %lu of split %u in two places", (unsigned long)r,
                             l->split);
                cover[r] = 1;
                if (!kept(filter, l->split, r)) continue;
                cr_assert_lt(k, g->n, "batch [%lu, %lu) misses kept rows", (unsigned long)g->from,
                             (unsigned long)g->to);
                cr_assert_eq(sorted[k], ref[l->split].ids[r], "batch [%lu, %lu) sample %u",
                             (unsigned long)g->from, (unsigned long)g->to, k);
                k++;
            }
            cr_assert_eq(k, g->n, "batch [%lu, %lu) has %u samples, %u kept rows",
                         (unsigned long)g->from, (unsigned long)g->to, g->n, k);
            if (g->n == 128) /* a full batch ends at its last kept row */
                cr_assert(kept(filter, l->split, g->to - 1), "full batch [%lu, %lu)",
                          (unsigned long)g->from, (unsigned long)g->to);
            if (drop_last) cr_assert_eq(g->n, 128, "drop_last: only full batches");
        }
        for (uint32_t i = 0; i < rd->nempty; i++)
            for (uint64_t r = rd->empty[i].from_row; r < rd->empty[i].to_row; r++) {
                cr_assert_eq(cover[r], 0, "empty row %lu also in a batch", (unsigned long)r);
                cover[r] = 2;
                if (!drop_last)
                    cr_assert(!kept(filter, l->split, r), "empty range with a kept row");
            }
        for (uint64_t r = 0; r < rows; r++) {
            bool in_todo = false;
            for (uint32_t t = 0; t < l->ntodo; t++)
                in_todo |= r >= l->todo[t].from_row && r < l->todo[t].to_row;
            cr_assert_eq(cover[r] != 0, in_todo, "row %lu of split %u: covered %d, todo %d",
                         (unsigned long)r, l->split, cover[r], in_todo);
        }
        free(cover);
    }
}

LC_FN void wait_until(fake_t *f, bool (*cond)(fake_t *), double seconds)
{
    for (int i = 0; i < (int)(tu_timeout(seconds) * 100); i++) {
        pthread_mutex_lock(&f->mu);
        bool ok = cond(f);
        pthread_mutex_unlock(&f->mu);
        if (ok) return;
        usleep(10000);
    }
    cr_assert_fail("timed out waiting");
}

LC_FN bool heartbeat_seen(fake_t *f)
{
    return f->heartbeats >= 1;
}

LC_FN void run_tiling(bool filter, bool drop_last)
{
    uint64_t seed = tu_seed(filter ? "tiling_filtered" : "tiling");
    fake_t f;
    fm_start(&f, splits, spec_of(drop_last, filter));
    f.finish = true;
    /* every split whole, and one as a re-lease with random todo ranges */
    uint64_t gen = 100;
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(&f, s, gen++, 0, NULL, 0);
    uint64_t rows = splits->items[1].num_rows;
    uint64_t cut[6];
    for (int i = 0; i < 6; i++)
        cut[i] = 1 + tu_below(&seed, rows - 1);
    for (int i = 0; i < 6; i++) /* sort */
        for (int j = i + 1; j < 6; j++)
            if (cut[j] < cut[i]) {
                uint64_t t = cut[i];
                cut[i] = cut[j];
                cut[j] = t;
            }
    sl_dpp_row_range_t todo[3];
    uint32_t nt = 0;
    for (int i = 0; i < 6; i += 2)
        if (cut[i] < cut[i + 1] && (nt == 0 || cut[i] >= todo[nt - 1].to_row))
            todo[nt++] = (sl_dpp_row_range_t){cut[i], cut[i + 1]};
    if (nt == 0) todo[nt++] = (sl_dpp_row_range_t){rows / 3, rows / 2};
    fm_add(&f, 1, gen++, 0, todo, nt);

    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c[2];
    client_start(&c[0], &f, sl_worker_port(w), 0);
    client_start(&c[1], &f, sl_worker_port(w), 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c[0].th, NULL);
    pthread_join(c[1].th, NULL);
    cr_assert(c[0].ended && c[1].ended, "clients get END once the job is finished");
    sl_worker_lease_client_stats_t ms_st;
    sl_worker_lease_client_stats(ms, &ms_st);
    wait_until(&f, heartbeat_seen, 5); /* a job this small may end before the first one */
    sl_worker_stop(w);                 /* the last SPLIT_READs go out */
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.nreads, f.nq, "a split read per lease: %u of %u", f.nreads, f.nq);
    check_leases(&f, filter, drop_last, 0);
    cr_assert_eq(f.registers, 1);
    cr_assert_geq(f.heartbeats, 1);
    pthread_mutex_unlock(&f.mu);
    cr_assert(ms_st.finished);
    cr_assert_str_eq(ms_st.job_id, "jobx");
    cr_assert_eq(ms_st.leases, f.nq);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

LC_FN bool revoke_sent(fake_t *f)
{
    return f->revoked_sent && f->heartbeats >= 2;
}

LC_FN bool all_read(fake_t *f)
{
    return f->nreads >= f->nq;
}

/* A lease revoked while its batches wait for a client: none is sent, it is
 * not reported; later leases are served normally. */

#endif
