/* Benchmark of the DPP master's state machine (src/dpp/master/state/state.h):
 * 200 simulated workers run lease -> commit -> split read cycles over a job
 * of 1M splits, with renewals (every worker heartbeats every 8th step) and
 * an expiry sweep every 1000 operations, in one thread, with the journal
 * off (in memory) and on (temp directory, group commit: one sync every N
 * operations, N printed). Each cycle: a lease, a trainer client's commit
 * of the first half of the split's rows, and the holder's split read
 * reporting the second half as empty (filtered), which ends the split.
 * Figures: lease operations per second (lease, commit, split read, renew
 * calls), full split cycles per second, and the
 * bytes of state per 1M splits, counted by an allocator that tallies every
 * byte the master asks for.
 *
 * Targets: >= 50k lease operations/s (journal on); memory per 1M splits is
 * reported (no target: issue 5 asks for the figure).
 * Usage: bench_master_leases [splits] [sync_every]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/master/journal/state_store.h"

#define WORKERS 200

typedef struct sim {
    bool has;
    sl_master_lease_t l;
    bool reported;
    uint64_t nonce;
    char name[16];
} sim;

static void rm_state(const char *dir)
{
    const char *names[] = {"journal", "snapshot", "tmp"};
    char p[512];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int run(uint32_t n, const sl_wh_split_t *splits, const char *dir, uint32_t sync_every)
{
    bench_counting_t cnt = {0};
    sl_allocator_t a = bench_counting_allocator(&cnt);
    sl_master_state_opts_t o = {.allocator = &a, .lease_timeout_ms = 10000};
    sl_master_store_opts_t so = {.dir = dir};
    sl_master_store_t *store = NULL; /* NULL: journal off, the state in memory */
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    sl_err_t orc = dir != NULL ? sl_master_store_open(&so, &o, 0, &store, NULL, &err)
                               : sl_master_state_new(&o, &m, &err);
    if (orc == SL_OK && store != NULL) m = sl_master_store_state(store);
    if (orc != SL_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    size_t base = cnt.now;
    sl_master_state_job_spec_t spec = {
        .job_id = "bench", .splits = splits, .num_splits = n, .epochs = 1, .shuffle = true};
    double t0 = bench_now();
    if (sl_master_state_job_add(m, &spec, &err) != SL_OK ||
        sl_master_store_sync(store, &err) != SL_OK) {
        fprintf(stderr, "add: %s\n", err.msg);
        return 1;
    }
    double t_add = bench_now() - t0;
    size_t state = cnt.now - base, peak_add = cnt.peak - base;

    sim w[WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++)
        snprintf(w[i].name, sizeof w[i].name, "worker-%d", i);
    uint64_t ops = 0, cycles = 0, step = 0, now = 0, synced_at = 0, swept_at = 0;
    sl_master_state_job_status_t st;
    t0 = bench_now();
    for (;;) {
        sim *x = &w[step % WORKERS];
        if (step % WORKERS == 0) now++;
        sl_err_t rc = SL_OK;
        if (!x->has) {
            rc = sl_master_state_lease_next(m, "bench", x->name, now, &x->l, &err);
            if (rc == SL_ERR_AGAIN) {
                sl_master_state_job_status(m, "bench", &st, &err);
                if (st.finished) break;
            } else if (rc != SL_OK) {
                fprintf(stderr, "lease: %s\n", err.msg);
                return 1;
            } else {
                x->has = true;
                x->reported = false;
            }
        } else if (!x->reported) {
            sl_master_commit_result_t res =
                sl_master_state_commit(m, "bench", x->l.epoch, x->l.split, x->l.generation, 0,
                                       x->l.num_rows / 2, x->name, ++x->nonce, &err);
            if (res != SL_MASTER_COMMITTED) {
                fprintf(stderr, "commit refused: %s\n", err.msg);
                return 1;
            }
            x->reported = true;
        } else {
            sl_dpp_row_range_t empty = {x->l.num_rows / 2, x->l.num_rows};
            sl_master_read_result_t res = sl_master_state_split_read(
                m, "bench", x->l.epoch, x->l.split, x->l.generation, &empty, 1, &err);
            if (res != SL_MASTER_READ_DONE) {
                fprintf(stderr, "split read: not done (%d): %s\n", (int)res, err.msg);
                return 1;
            }
            x->has = false;
            cycles++;
        }
        if (rc != SL_OK && rc != SL_ERR_AGAIN) {
            fprintf(stderr, "step %llu: %s\n", (unsigned long long)step, err.msg);
            return 1;
        }
        ops++;
        if ((step / WORKERS) % 8 == 0) {
            sl_master_lease_ref_t held = {"bench", x->l.epoch, x->l.split, x->l.generation};
            sl_master_state_renew(m, x->name, &held, x->has ? 1 : 0, now, NULL, &err);
            ops++;
        }
        if (ops - swept_at >= 1000) {
            sl_master_state_expire(m, now, NULL, &err);
            swept_at = ops;
        }
        if (dir != NULL && ops - synced_at >= sync_every) {
            if (sl_master_store_sync(store, &err) != SL_OK) {
                fprintf(stderr, "sync: %s\n", err.msg);
                return 1;
            }
            synced_at = ops;
        }
        step++;
    }
    if (sl_master_store_sync(store, &err) != SL_OK) {
        fprintf(stderr, "sync: %s\n", err.msg);
        return 1;
    }
    double t = bench_now() - t0;
    sl_master_state_counters_t c;
    sl_master_state_counters(m, &c);
    sl_master_store_counters_t sc;
    sl_master_store_counters(store, &sc);
    double ops_s = (double)ops / t;
    printf("journal %-3s  %8u splits  add %.2f s  %10.0f lease ops/s (target >= 50000: %s)  "
           "%9.0f cycles/s  %.2f s\n",
           dir ? "on" : "off", n, t_add, ops_s, ops_s >= 50000 ? "met" : "MISSED",
           (double)cycles / t, t);
    printf("             state %.1f MB = %.1f bytes/split (%.1f MB per 1M splits; peak during "
           "add %.1f MB)\n",
           state / 1e6, (double)state / n, (double)state / n, peak_add / 1e6);
    /* the epoch's committed ranges and who committed them (resume
     * tokens, state_attr.c), at their largest */
    printf("             peak during the epoch %.1f MB = %.1f bytes/split; at its end %.1f "
           "bytes/split\n",
           (cnt.peak - base) / 1e6, (double)(cnt.peak - base) / n, (double)(cnt.now - base) / n);
    if (dir != NULL)
        printf("             journal: sync every %u ops (N), %llu syncs, %llu records, "
               "%llu compactions\n",
               sync_every, (unsigned long long)sc.journal_syncs,
               (unsigned long long)c.journal_records, (unsigned long long)sc.compactions);
    if (cycles != n) {
        fprintf(stderr, "%llu cycles for %u splits\n", (unsigned long long)cycles, n);
        return 1;
    }
    if (store != NULL)
        sl_master_store_destroy(store); /* and m */
    else
        sl_master_state_destroy(m);
    fflush(stdout);
    return bench_counting_leaked(&cnt);
}

int main(int argc, char **argv)
{
    uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 1000000;
    uint32_t sync_every = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1000;
    if (n == 0 || sync_every == 0) {
        fprintf(stderr, "usage: %s [splits] [sync_every]\n", argv[0]);
        return 2;
    }
    /* 100 stripes per file, like a table of 65536-row stripes. */
    uint32_t files = (n + 99) / 100;
    char **paths = malloc(files * sizeof *paths);
    sl_wh_split_t *splits = calloc(n, sizeof *splits);
    for (uint32_t f = 0; f < files; f++) {
        paths[f] = malloc(48);
        snprintf(paths[f], 48, "ds=2026-01-%02u/part-%05u.slc", 1 + f % 28, f);
    }
    for (uint32_t i = 0; i < n; i++)
        splits[i] = (sl_wh_split_t){.path = paths[i / 100],
                                    .stripe_begin = i % 100,
                                    .stripe_end = i % 100 + 1,
                                    .first_row = (uint64_t)(i % 100) * 65536,
                                    .num_rows = 65536};
    printf("master_leases: %d simulated workers, %u splits, one thread\n", WORKERS, n);
    int rc = run(n, splits, NULL, sync_every);
    char dir[] = "/tmp/sluice-bench-master-XXXXXX";
    if (rc == 0 && mkdtemp(dir) != NULL) {
        rc = run(n, splits, dir, sync_every);
        rm_state(dir);
    }
    for (uint32_t f = 0; f < files; f++)
        free(paths[f]);
    free(paths);
    free(splits);
    return rc;
}
