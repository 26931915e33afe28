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
 *
 * An epoch's rate is its samples over the time from its first batch to the
 * next epoch's first batch (the last epoch: to its last batch). The
 * decision and its figures are printed from GET /jobs/{id}. The sluice
 * program is found through $SLUICE_BINARY, else next to this benchmark.
 * Usage: bench_autocache [--rows N] [--epochs E] */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/master/admin.h"
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

int main(int argc, char **argv)
{
    uint64_t rows = 200000;
    uint32_t epochs = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--epochs") == 0)
            epochs = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    }
    if (epochs < 2 || epochs > MAX_EPOCHS) {
        fprintf(stderr, "bench_autocache: --epochs 2 to %d\n", MAX_EPOCHS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (bench_sluice_binary(argv[0], "bench_autocache", binary, sizeof binary) != 0) return 1;
    snprintf(dir, sizeof dir, "/tmp/sluice-bench-autocache-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char sessions[300], criteo[300], cache[300], spec[8192];
    snprintf(sessions, sizeof sessions, "%s/sessions", dir);
    snprintf(criteo, sizeof criteo, "%s/criteo", dir);
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
    if (bench_gen_criteo(criteo, rows * 5, 4, 16384, "bench_autocache") != 0) return 1;
    printf("bench_autocache: %u epochs, 1 worker (1 transform thread), 1 trainer, %ld cores\n",
           epochs, sysconf(_SC_NPROCESSORS_ONLN));
    double cached[MAX_EPOCHS], plain[MAX_EPOCHS], cheap[MAX_EPOCHS];
    int rc = 0;
    const char *heavy =
        "{\"id\":\"%s\",\"source\":{\"table\":\"%s\",\"features\":[\"item_id\",\"item_cat\"]},"
        "\"transforms\":["
        "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":32,\"table_size\":1000003},"
        "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":48,\"table_size\":1000003},"
        "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":64,\"table_size\":1000003},"
        "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":80,\"table_size\":1000003},"
        "{\"op\":\"cross\",\"features\":[\"item_id\",\"user_cat\"],\"table_size\":1000003},"
        "{\"op\":\"sigrid_hash\",\"feature\":\"item_id\",\"table_size\":1000003}],"
        "\"batch\":{\"size\":1024,\"epochs\":%u}}";
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
    if (getenv("BENCH_AUTOCACHE_KEEP"))
        printf("  kept %s\n", dir);
    else
        tu_rm_tree(dir);
    return rc;
}
