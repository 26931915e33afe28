/* The autocache (docs/DESIGN.md "Autocache"; issue 14): samples/s per
 * epoch of one job with one `sluice worker --master` process (one
 * transform thread) and one trainer client (a thread here, taking batches
 * as fast as they come), on a master in this process.
 *
 *   expensive   the sessions preset, long n-grams of the 100-id history
 *               (and a cross): run with --cache-dir (the autocache measures
 *               epoch 1, chooses the cache, later epochs read it) and
 *               without (every epoch recomputed). Figure: epoch 2 (and 3)
 *               samples/s cached / recomputed (target >= 3).
 *   cheap       the criteo table read as stored (no transform: a cache
 *               file would hold the source's bytes) with --cache-dir: the
 *               autocache declines; figure: epoch 2 samples/s / epoch 1
 *               (target >= 1: no slower).
 *   criteo      the criteo job (examples/jobs/criteo.json's log1p and
 *               sigrid_hash) with --cache-dir: whatever the rule decides
 *               from what it measures, with the cache's measured cost.
 *   dedup       the expensive job with the user features as a dedup group
 *               over the same sessions clustered and stored deduplicated,
 *               with --cache-dir: what the rule decides. Then every split's
 *               cache file is written by a worker in this process (leases
 *               of CACHE_WRITE, whatever a master would decide): the files
 *               store the group's unique rows once (the n-grams of
 *               user_hist included); figure: their bytes against the same
 *               batches written expanded (each file rewritten, one stripe a
 *               batch, without dedup groups).
 *
 * An epoch's rate is its samples over the time from its first batch to the
 * next epoch's first batch (the last epoch: to its last batch). The
 * decision and its figures are printed from GET /jobs/{id}. The sluice
 * program is found through $SLUICE_BINARY, else next to this benchmark.
 * Usage: bench_autocache [--rows N] [--epochs E] [--only dedup] */
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/master/process/admin.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

#define MAX_EPOCHS BENCH_TRAINER_EPOCHS

static char dir[128], binary[1024];

static double rate(const bench_trainer_t *c, uint32_t e, uint32_t epochs)
{
    double end = e + 1 < epochs ? c->epoch_first[e + 1] : c->epoch_last[e];
    return end > c->epoch_first[e] ? (double)c->epoch_samples[e] / (end - c->epoch_first[e]) : 0;
}

/* Run job spec (its id: id) for epochs epochs; rates into out[epochs].
 * cache: the master's --cache-dir (NULL: none). */
static int run(const char *id, const char *spec, const char *cache, uint32_t epochs, double *out)
{
    char state[300];
    snprintf(state, sizeof state, "%s/state-%s", dir, id);
    sl_master_opts_t mo = {.state_dir = state, .lease_timeout_ms = 5000, .cache_dir = cache};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    if (sl_master_start(&mo, &m, &err) != SL_OK) {
        fprintf(stderr, "bench_autocache: master: %s\n", err.msg);
        return 1;
    }
    char body[8192];
    snprintf(body, sizeof body, "{\"spec\":%s,\"min_workers\":1,\"max_workers\":1}", spec);
    json_t *b = json_loads(body, 0, NULL);
    sl_err_t rc = sl_master_admin_job_submit(m, b, NULL, &err);
    json_decref(b);
    if (rc != SL_OK) {
        fprintf(stderr, "bench_autocache: submit %s: %s\n", id, err.msg);
        sl_master_stop(m);
        return 1;
    }
    char log[300];
    snprintf(log, sizeof log, "%.127s/%.31s.log", dir, id);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(binary, binary, "worker", "--master", sl_master_address(m), "--job-id", id,
              "--worker-id", id, "--listen", "127.0.0.1:0", "--threads", "1", (char *)NULL);
        _exit(127);
    }
    bench_trainer_t c = {.master = sl_master_address(m), .job = id};
    pthread_t th;
    pthread_create(&th, NULL, bench_trainer_run, &c);
    pthread_join(th, NULL);
    int status = 0;
    if (c.end != SL_ERR_CLOSED) {
        fprintf(stderr, "bench_autocache: %s: client: %s: %s\n", id, sl_err_str(c.end), c.msg);
        status = 1;
    }
    usleep(1500 * 1000); /* the worker's last heartbeats: its figures in the job view */
    json_t *j = NULL;
    if (sl_master_admin_job_json(m, id, &j, &err) == SL_OK) {
        json_t *ac = json_object_get(j, "autocache");
        printf("  %-10s autocache %s (%s): compute %.2f us/sample, cache read estimated %.2f "
               "us/sample (directory %.0f MB/s, source %.0f MB/s), measured on %lld samples; "
               "served from the cache %lld samples at %.2f us/sample, %lld fallbacks, %lld files "
               "written (%.1f MB)\n",
               id, json_string_value(json_object_get(ac, "state")),
               json_string_value(json_object_get(ac, "reason")),
               json_real_value(json_object_get(ac, "compute_us_per_sample")),
               json_real_value(json_object_get(ac, "cache_us_per_sample_estimated")),
               json_real_value(json_object_get(ac, "read_mb_per_s")),
               json_real_value(json_object_get(ac, "source_mb_per_s")),
               (long long)json_integer_value(json_object_get(ac, "measured_samples")),
               (long long)json_integer_value(json_object_get(ac, "cache_samples")),
               json_real_value(json_object_get(ac, "cache_us_per_sample")),
               (long long)json_integer_value(json_object_get(ac, "cache_fallbacks")),
               (long long)json_integer_value(json_object_get(ac, "cache_files_written")),
               (double)json_integer_value(json_object_get(ac, "cache_bytes_written")) / 1e6);
        json_decref(j);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    sl_master_stop(m);
    printf("  %-10s samples/s by epoch:", id);
    for (uint32_t e = 0; e < epochs; e++) {
        out[e] = rate(&c, e, epochs);
        printf(" %u: %.0f (%llu samples)", e + 1, out[e], (unsigned long long)c.epoch_samples[e]);
    }
    /* an epoch's first to last batch, and the wait before the next one's
     * first (in the epoch's rate above): what a fast epoch's rate is made of */
    printf("\n  %-10s first to last batch, then to the next epoch's first:", id);
    for (uint32_t e = 0; e < epochs; e++)
        printf(" %u: %.3f s + %.3f s", e + 1, c.epoch_last[e] - c.epoch_first[e],
               e + 1 < epochs ? c.epoch_first[e + 1] - c.epoch_last[e] : 0.0);
    printf("\n");
    return status;
}

/* The bytes of cache file path, and of the same batches written expanded
 * (every group's rows in full, one stripe a batch, beside it, removed);
 * rows and unique rows of its groups added to *rows, *unique. */
static int expanded_size(const char *path, uint64_t *stored, uint64_t *expanded, uint64_t *rows,
                         uint64_t *unique)
{
    char out[800];
    snprintf(out, sizeof out, "%s.expanded", path);
    sl_error_t err = {0};
    sl_wh_read_opts_t ro = {.dedup_form = true};
    sl_wh_reader_t *r = NULL;
    sl_wh_writer_t *w = NULL;
    sl_wh_writer_opts_t o = sl_wh_writer_opts_default();
    o.no_sync = true;
    o.overwrite = true;
    sl_err_t rc = sl_wh_reader_open(path, NULL, &ro, &r, &err);
    if (rc == SL_OK) rc = sl_wh_writer_open(out, sl_wh_reader_schema(r), &o, &w, &err);
    for (uint32_t s = 0; rc == SL_OK && s < sl_wh_reader_num_stripes(r); s++) {
        const sl_wh_rows_t *rw = NULL;
        if ((rc = sl_wh_reader_read_stripe(r, s, &rw, &err)) != SL_OK) break;
        for (uint32_t g = 0; g < rw->batch.num_groups; g++) {
            *rows += rw->batch.groups[g].batch_size;
            *unique += rw->batch.groups[g].unique.stride;
        }
        if ((rc = sl_wh_writer_append(w, rw, &err)) == SL_OK) rc = sl_wh_writer_end_stripe(w, &err);
    }
    sl_wh_write_stats_t ws = {0};
    if (rc == SL_OK)
        rc = sl_wh_writer_close(w, &ws, &err);
    else
        sl_wh_writer_abort(w);
    sl_wh_reader_close(r);
    struct stat st;
    if (rc == SL_OK && stat(path, &st) != 0) rc = sl_error_set(&err, SL_ERR_IO, "stat %s", path);
    unlink(out);
    if (rc != SL_OK) {
        fprintf(stderr, "bench_autocache: %s: %s\n", path, err.msg);
        return 1;
    }
    *stored += (uint64_t)st.st_size;
    *expanded += ws.file_bytes;
    return 0;
}

/* A source of every split of a table once, each leased (a stand-in
 * handle) with CACHE_WRITE to DIR/split-<N>.slc. */
typedef struct wsrc {
    const sl_wh_splits_t *sp;
    uint32_t next;
    char (*paths)[400];
    sl_dpp_row_range_t *todo;
    int lease;
} wsrc_t;

static sl_err_t wsrc_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    (void)err;
    wsrc_t *s = ctx;
    if (s->next >= s->sp->count) return SL_ERR_CLOSED;
    uint32_t k = s->next++;
    s->todo[k] = (sl_dpp_row_range_t){0, s->sp->items[k].num_rows};
    *out = (sl_worker_work_t){.split = &s->sp->items[k],
                              .split_id = k,
                              .todo = &s->todo[k],
                              .num_todo = 1,
                              .lease = &s->lease,
                              .generation = 1,
                              .cache_file = s->paths[k],
                              .cache_mode = SL_WORKER_CACHE_WRITE};
    return SL_OK;
}

static bool wsrc_live(void *ctx, void *lease)
{
    (void)ctx;
    (void)lease;
    return true;
}

static void wsrc_destroy(void *ctx)
{
    (void)ctx;
}

/* Write the cache file of every split of job spec into out (a directory)
 * with a worker in this process, its batches drained by a trainer. */
static int write_cache_files(const char *spec, const char *out)
{
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    sl_wh_table_t *t = NULL;
    sl_wh_splits_t *sp = NULL;
    sl_worker_t *w = NULL;
    sl_trainer_t *tr = NULL;
    wsrc_t src = {0};
    int status = 1;
    mkdir(out, 0755);
    if (sl_pipeline_job_parse(spec, strlen(spec), &job, &p, &err) != SL_OK ||
        sl_wh_table_open(job->table, NULL, &t, &err) != SL_OK ||
        sl_wh_table_splits(t, NULL, job->stripes_per_split, &sp, &err) != SL_OK)
        goto done;
    src.sp = sp;
    src.paths = calloc(sp->count + 1, sizeof *src.paths);
    src.todo = calloc(sp->count + 1, sizeof *src.todo);
    if (src.paths == NULL || src.todo == NULL) goto done;
    for (uint32_t k = 0; k < sp->count; k++)
        snprintf(src.paths[k], sizeof src.paths[k], "%.300s/split-%u.slc", out, k);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    o.source = (sl_worker_source_t){
        .next = wsrc_next, .destroy = wsrc_destroy, .lease_live = wsrc_live, .ctx = &src};
    if (sl_worker_start(job, &o, &w, &p, &err) != SL_OK) goto done;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    if (sl_trainer_connect(&to, &tr, &err) != SL_OK) goto done;
    sl_batch_t *b;
    sl_err_t rc;
    while ((rc = sl_trainer_next(tr, 600 * 1000, &b, &err)) == SL_OK)
        sl_trainer_release(tr, b);
    if (rc != SL_ERR_CLOSED) goto done;
    sl_worker_stats_t st;
    sl_trainer_close(tr);
    tr = NULL;
    sl_worker_stats(w, &st);
    if (st.cache_files_written != sp->count) {
        snprintf(err.msg, sizeof err.msg, "%llu of %u cache files written",
                 (unsigned long long)st.cache_files_written, sp->count);
        goto done;
    }
    status = 0;
done:
    if (status) fprintf(stderr, "bench_autocache: writing cache files: %s\n", err.msg);
    sl_trainer_close(tr);
    sl_worker_destroy(w);
    free(src.paths);
    free(src.todo);
    sl_pipeline_problems_free(&p);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    sl_pipeline_job_destroy(job);
    return status;
}

/* The cache files of job spec (written here, under DIR/dedup-files)
 * against the same batches expanded. */
static int dedup_sizes(const char *spec)
{
    char sub[400];
    snprintf(sub, sizeof sub, "%s/dedup-files", dir);
    if (write_cache_files(spec, sub) != 0) return 1;
    DIR *d = opendir(sub);
    if (d == NULL) return 1;
    uint64_t stored = 0, expanded = 0, rows = 0, unique = 0;
    uint32_t files = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "split-", 6) != 0 || n < 4 || strcmp(e->d_name + n - 4, ".slc"))
            continue;
        char path[700];
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        rc = expanded_size(path, &stored, &expanded, &rows, &unique);
        files++;
    }
    closedir(d);
    printf("  cache files of the dedup job: %u files, %.1f MB stored deduplicated, %.1f MB the "
           "same batches expanded: %.2fx smaller (group rows %llu, unique rows %llu: dedup "
           "factor %.2f)\n",
           files, stored / 1e6, expanded / 1e6, stored ? (double)expanded / stored : 0,
           (unsigned long long)rows, (unsigned long long)unique,
           unique ? (double)rows / unique : 0);
    return rc;
}

/* The expensive job (its id, table, epochs). */
static const char *const heavy =
    "{\"id\":\"%s\",\"source\":{\"table\":\"%s\",\"features\":[\"item_id\",\"item_cat\"]},"
    "\"transforms\":["
    "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":32,\"table_size\":1000003},"
    "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":48,\"table_size\":1000003},"
    "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":64,\"table_size\":1000003},"
    "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":80,\"table_size\":1000003},"
    "{\"op\":\"cross\",\"features\":[\"item_id\",\"user_cat\"],\"table_size\":1000003},"
    "{\"op\":\"sigrid_hash\",\"feature\":\"item_id\",\"table_size\":1000003}],"
    "\"batch\":{\"size\":1024,\"epochs\":%u}}";

/* The dedup run (file comment): the sessions of gs clustered and stored
 * deduplicated, the expensive job with the user group, then its files'
 * sizes. */
static int run_dedup(const sl_wh_gen_spec_t *gs, sl_wh_gen_opts_t go, const char *cache,
                     uint32_t epochs)
{
    char clustered[300], spec[8192];
    sl_error_t err = {0};
    snprintf(clustered, sizeof clustered, "%s/sessions-dedup", dir);
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t ug = {"user", 3, user};
    go.writer.cluster_sessions = true;
    go.writer.num_dedup_groups = 1;
    go.writer.dedup_groups = &ug;
    if (sl_wh_gen_table(clustered, gs, &go, NULL, &err) != SL_OK) {
        fprintf(stderr, "bench_autocache: clustered sessions table: %s\n", err.msg);
        return 1;
    }
    printf(" dedup: the expensive job with dedup group user (user_id, user_hist, user_cat) over "
           "the same rows clustered by session, stored deduplicated, batches of 1024\n");
    size_t n = (size_t)snprintf(spec, sizeof spec, heavy, "dedup", clustered, epochs);
    /* the group in the batch section (the heavy spec's last two braces) */
    snprintf(spec + n - 2, sizeof spec - n + 2,
             ",\"dedup_groups\":{\"user\":[\"user_id\",\"user_hist\",\"user_cat\"]}}}");
    double dd[MAX_EPOCHS];
    int rc = run("dedup", spec, cache, epochs, dd);
    printf("  epoch 2 samples/s / epoch 1: %.2f\n", dd[0] > 0 ? dd[1] / dd[0] : 0);
    return rc | dedup_sizes(spec);
}

/* The expensive (cached, recomputed), cheap and criteo runs (file
 * comment) over the sessions table and a criteo table made here. */
static int bench_sections(const char *sessions, const char *cache, uint64_t rows, uint32_t epochs)
{
    char criteo[300], spec[8192];
    snprintf(criteo, sizeof criteo, "%s/criteo", dir);
    if (bench_gen_criteo(criteo, rows * 5, 4, 16384, "bench_autocache") != 0) return 1;
    double cached[MAX_EPOCHS], plain[MAX_EPOCHS], cheap[MAX_EPOCHS];
    int rc = 0;
    printf(" expensive: sessions preset, %llu rows, n-grams of 32, 48, 64, 80 ids of user_hist "
           "(90..110 ids), a cross, batches of 1024\n",
           (unsigned long long)rows);
    snprintf(spec, sizeof spec, heavy, "cached", sessions, epochs);
    rc |= run("cached", spec, cache, epochs, cached);
    snprintf(spec, sizeof spec, heavy, "recomputed", sessions, epochs);
    rc |= run("recomputed", spec, NULL, epochs, plain);
    printf("  epoch 2 samples/s, cached / recomputed: %.2f (target >= 3)",
           plain[1] > 0 ? cached[1] / plain[1] : 0);
    if (epochs > 2) printf("; epoch 3: %.2f", plain[2] > 0 ? cached[2] / plain[2] : 0);
    printf("\n");
    /* the criteo table as stored: nothing to skip, the cache would hold
     * the same bytes as the source */
    printf(" cheap: criteo preset, %llu rows, read as stored (no filter, no transform), batches "
           "of 4096\n",
           (unsigned long long)rows * 5);
    snprintf(spec, sizeof spec,
             "{\"id\":\"criteo-plain\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":4096,\"epochs\":%u}}",
             criteo, epochs);
    rc |= run("criteo-plain", spec, cache, epochs, cheap);
    printf("  epoch 2 samples/s / epoch 1: %.2f (target >= 1: no slower)\n",
           cheap[0] > 0 ? cheap[1] / cheap[0] : 0);
    /* the criteo job: its transforms (log1p, sigrid_hash) are what the
     * cache would skip; the rule decides by what it measures */
    printf(" the criteo job: criteo preset, %llu rows, log1p of 13 dense, sigrid_hash of 26 "
           "sparse (examples/jobs/criteo.json), batches of 4096\n",
           (unsigned long long)rows * 5);
    size_t n = (size_t)snprintf(spec, sizeof spec,
                                "{\"id\":\"criteo\",\"source\":{\"table\":\"%s\"},\"transforms\":[",
                                criteo);
    for (int i = 1; i <= 13; i++)
        n += (size_t)snprintf(spec + n, sizeof spec - n, "{\"op\":\"log1p\",\"feature\":\"I%d\"},",
                              i);
    for (int i = 1; i <= 26; i++)
        n += (size_t)snprintf(
            spec + n, sizeof spec - n,
            "{\"op\":\"sigrid_hash\",\"feature\":\"C%d\",\"table_size\":1000000}%s", i,
            i < 26 ? "," : "");
    snprintf(spec + n, sizeof spec - n, "],\"batch\":{\"size\":4096,\"epochs\":%u}}", epochs);
    rc |= run("criteo", spec, cache, epochs, cheap);
    printf("  epoch 2 samples/s / epoch 1: %.2f\n", cheap[0] > 0 ? cheap[1] / cheap[0] : 0);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t rows = 200000;
    uint32_t epochs = 3;
    bool dedup_only = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--epochs") == 0)
            epochs = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--only") == 0 && strcmp(argv[i + 1], "dedup") == 0)
            dedup_only = true;
    }
    if (epochs < 2 || epochs > MAX_EPOCHS) {
        fprintf(stderr, "bench_autocache: --epochs 2 to %d\n", MAX_EPOCHS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (bench_sluice_binary(argv[0], "bench_autocache", binary, sizeof binary) != 0) return 1;
    snprintf(dir, sizeof dir, "/tmp/sluice-bench-autocache-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char sessions[300], cache[300];
    snprintf(sessions, sizeof sessions, "%s/sessions", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    sl_wh_gen_spec_t gs;
    sl_error_t err = {0};
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 16384;
    go.writer.no_sync = true;
    if (sl_wh_gen_preset("sessions", rows, 1, &gs, &err) != SL_OK ||
        (gs.files = 4, sl_wh_gen_table(sessions, &gs, &go, NULL, &err)) != SL_OK) {
        fprintf(stderr, "bench_autocache: sessions table: %s\n", err.msg);
        return 1;
    }
    printf("bench_autocache: %u epochs, 1 worker (1 transform thread), 1 trainer, %ld cores\n",
           epochs, sysconf(_SC_NPROCESSORS_ONLN));
    int rc = dedup_only ? 0 : bench_sections(sessions, cache, rows, epochs);
    rc |= run_dedup(&gs, go, cache, epochs);
    if (getenv("BENCH_AUTOCACHE_KEEP"))
        printf("  kept %s\n", dir);
    else
        tu_rm_tree(dir);
    return rc;
}
