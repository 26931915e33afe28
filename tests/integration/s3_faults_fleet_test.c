/* A fleet job on a table only in the S3 store (s3proxy, the ctest fixture
 * s3) read through the fault-injecting proxy of s3_util.h: a `sluice
 * master` that plans from the server directly, two `sluice worker`
 * processes whose endpoint is the proxy, and two trainer clients in master
 * mode, over two epochs.
 *
 * The proxy's plan is seeded (SLUICE_TEST_SEED replays a run): storms of
 * 503 SlowDown and of connection resets, each of a random length, with no
 * request (its request line and Range) faulted more than max_attempts - 1
 * times, so every request succeeds within its retry budget. Then every id
 * is delivered exactly once per epoch, and the workers' store counters
 * match the proxy's: requests = what it saw, retries = its faults,
 * server_error = its SlowDowns, network_error = its resets, no failure.
 * A second test answers one file's stripe GETs SlowDown without end: each
 * fails after its 5 attempts, those splits follow on_bad_split "skip",
 * and every other row is delivered exactly once per epoch. Two more answer
 * them as a server that ignores the Range (200 OK with more bytes): a
 * failure of the split's store read, not of the worker, so the workers
 * stay up and report the splits naming the object, under "skip" (every
 * other row exactly once) and "fail" (the job fails naming it). */
#define _XOPEN_SOURCE 700
#include <ftw.h>

#include "fleet_util.h"
#include "s3_util.h"
#include "store/store.h"

#define ROWS 40000u
#define EPOCHS 2u
#define WORKERS 2
#define MAX_ATTEMPTS 5           /* the store's default max_attempts (docs/STORAGE.md) */
#define FOOTER_ZONE (300 * 1024) /* a file's tail that its plan reads, and more */

static const char *up_root;
static sl_store_t *up_store;
static const char *up_dead; /* a file whose size to keep in up_dead_size */
static long long up_dead_size;

static int up_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F) return 0;
    if (up_dead && strstr(path, up_dead)) up_dead_size = (long long)sb->st_size;
    char key[1024];
    snprintf(key, sizeof key, "tbl/%s", path + strlen(up_root) + 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_store_put_file(up_store, key, path, &err), SL_OK, "%s", err.msg);
    return 0;
}

/* Upload the table at dir to s3://bucket/tbl and delete it from disk. */
static void upload_table(const char *bucket, const char *dir)
{
    char url[200];
    snprintf(url, sizeof url, "s3://%s", bucket);
    sl_error_t err = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &up_store, NULL, &err), SL_OK, "%s", err.msg);
    up_root = dir;
    cr_assert_eq(nftw(dir, up_one, 16, FTW_PHYS), 0);
    sl_store_destroy(up_store);
    cr_assert_eq(nftw(dir, fu_rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* ---- the proxy's plan ---- */

#define KEYS 8192 /* open addressing; a job here sends well under 2,000 distinct requests */

typedef struct plan {
    uint64_t rng;
    int storm_left, storm_kind; /* requests left in the current storm, 1 reset / 2 SlowDown */
    int storms;
    const char *dead;    /* GETs of stripes of this object: dead_fault, always */
    int dead_fault;      /* su_proxy_t's plan: 2 SlowDown, 4 the Range ignored, 5 a hang */
    long long dead_size; /* its size */
    long long dead_end;  /* only GETs ending before this byte (0: before the footer's zone) */
    bool calm;           /* no storms */
    uint64_t key[KEYS];
    uint8_t faults[KEYS]; /* per request (line and Range): faults injected */
} plan_t;

/* FNV-1a of the request line and its Range header: what one read retries. */
static uint64_t request_key(const char *head, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    const char *end = memmem(head, len, "\r\n", 2);
    for (const char *c = head; c < end; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    for (const char *l = end; l && l < head + len;
         l = memmem(l + 2, len - (size_t)(l + 2 - head), "\r\n", 2)) {
        if (strncasecmp(l + 2, "Range:", 6) != 0) continue;
        for (const char *c = l + 2; c < head + len && *c != '\r'; c++)
            h = (h ^ (uint8_t)*c) * 1099511628211ull;
        break;
    }
    return h | 1; /* 0 marks a free slot */
}

static int storm_plan(su_proxy_t *p, const char *head, size_t len)
{
    plan_t *pl = p->plan_arg;
    const char *eol = memmem(head, len, "\r\n", 2);
    if (pl->dead && eol && memmem(head, (size_t)(eol - head), pl->dead, strlen(pl->dead))) {
        /* a worker plans the table itself at its start (each file's header
         * and its footer, in the last 256 KiB): those pass, so that what
         * fails is the stripes before them */
        const char *r = memmem(head, len, "\r\nRange: bytes=", 15);
        long long a = -1, b = -1;
        if (r && sscanf(r + 15, "%lld-%lld", &a, &b) == 2 && a > 0 &&
            b < pl->dead_size - FOOTER_ZONE && (pl->dead_end == 0 || b < pl->dead_end))
            return pl->dead_fault;
        return 0;
    }
    if (pl->calm) return 0;
    if (pl->storm_left == 0 && tu_below(&pl->rng, 12) == 0) {
        pl->storm_left = 2 + (int)tu_below(&pl->rng, 14);
        /* the first two storms are one of each kind, so that even a short
         * job sees both (random kinds alone left a run of 6 storms with no
         * reset in about 1 of 11 seeds); the rest are drawn, 1 in 3 resets */
        if (pl->storms < 2)
            pl->storm_kind = pl->storms == 0 ? 1 : 2;
        else
            pl->storm_kind = tu_below(&pl->rng, 3) == 0 ? 1 : 2;
        pl->storms++;
    }
    if (pl->storm_left == 0) return 0;
    pl->storm_left--;
    uint64_t k = request_key(head, len);
    size_t i = (size_t)(k % KEYS);
    while (pl->key[i] != 0 && pl->key[i] != k)
        i = (i + 1) % KEYS;
    pl->key[i] = k;
    /* the bound: a request's last try within max_attempts always passes */
    if (pl->faults[i] >= MAX_ATTEMPTS - 1) return 0;
    pl->faults[i]++;
    return pl->storm_kind;
}

/* ---- the fleet ---- */

typedef struct wk {
    pid_t pid;
    char admin[64], id[32], log[400];
    bool waited; /* reaped, with status ws */
    int ws;
} wk_t;

/* The worker's exit status, waited for once (bounded); -1: it did not exit. */
static int wk_wait(wk_t *w)
{
    if (!w->waited) {
        w->ws = fu_wait_exit(w->pid, 30);
        w->waited = w->ws != -1;
    }
    return w->ws;
}

/* A worker's store counters: /metrics while it runs, its exit summary
 * after. */
typedef struct counts {
    long long requests, retries, failures, by_result[4]; /* ok, client, server, network */
} counts_t;

/* From a worker's /metrics (false: no answer). */
static bool metrics_counts(const wk_t *w, counts_t *c)
{
    char *b;
    if (fu_http(w->admin, "GET", "/metrics", NULL, NULL, &b) != 200) {
        free(b);
        return false;
    }
    static const char *const res[4] = {"\"ok\"", "\"client_error\"", "\"server_error\"",
                                       "\"network_error\""};
    for (char *line = strtok(b, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        const char *sp = strrchr(line, ' ');
        if (sp == NULL || line[0] == '#') continue;
        if (strncmp(line, "sluice_store_requests_total{", 28) == 0) {
            for (int r = 0; r < 4; r++)
                if (strstr(line, res[r])) c->by_result[r] += atoll(sp + 1);
        } else if (strncmp(line, "sluice_store_retries_total", 26) == 0) {
            c->retries += atoll(sp + 1);
        } else if (strncmp(line, "sluice_store_failures_total", 27) == 0) {
            c->failures += atoll(sp + 1);
        }
    }
    free(b);
    return true;
}

/* From a worker's exit summary ("  store s3://...: N requests (G GETs), R
 * retries, F failures, ..."): the worker must have exited. */
static void summary_counts(wk_t *w, counts_t *c)
{
    cr_assert_neq(wk_wait(w), -1, "worker %s did not exit after the job", w->id);
    FILE *fp = fopen(w->log, "r");
    cr_assert_not_null(fp, "%s", w->log);
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, fp)) {
        long long n, g, r, f;
        const char *colon = strstr(line, ": ");
        if (strncmp(line, "  store s3://", 13) != 0 || colon == NULL) continue;
        cr_assert_eq(sscanf(colon, ": %lld requests (%lld GETs), %lld retries, %lld failures", &n,
                            &g, &r, &f),
                     4, "%s: %s", w->log, line);
        c->requests += n;
        c->retries += r;
        c->failures += f;
        found = true;
    }
    fclose(fp);
    cr_assert(found, "no store line in the summary of %s", w->log);
}

/* the workers' --threads: 1 reads on the reader thread alone, more
 * through the stripe lanes (runtime/lanes.c) */
static const char *fleet_threads = "1";
/* the workers' --store-timeout-ms and --store-max-attempts: the store's
 * defaults but where a test hangs requests */
static const char *fleet_timeout_ms = "60000";
static const char *fleet_attempts = "5";
/* the plan's dead_end as a fraction of the dead file (0: the plan's default) */
static double fleet_dead_fraction = 0;

typedef struct fleet {
    fu_master_t m;
    char *job;
    su_proxy_t proxy;
    plan_t *plan;
    wk_t w[WORKERS];
    atomic_uint *seen;
    fu_client_t c[2];
    pthread_t th[2];
} fleet_t;

/* The table in a fresh bucket, the master (direct to the server), the job
 * (extra: more top-level keys of its spec, ending in a comma), the proxy
 * with the plan seeded from rng (or, given dead, only that object's
 * stripe requests answered with dead_fault, always), the workers (through
 * the proxy) and the clients. */
static void fleet_up(fleet_t *f, const char *id, const char *extra, uint64_t *rng, const char *dead,
                     int dead_fault)
{
    su_env();
    char b[64], table[300], spec[1024], url[300];
    su_bucket(id, b, sizeof b);
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    up_dead = dead;
    upload_table(b, table);
    cr_assert(dead == NULL || up_dead_size > 0, "no file %s in the table", dead);
    f->m = (fu_master_t){.lease_timeout_ms = 2000};
    f->m.extra[0] = "--max-split-failures";
    f->m.extra[1] = "1";
    fu_master_start(&f->m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"s3://%s/tbl\"},%s"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":11}}}",
             id, b, extra, EPOCHS);
    f->job = fu_submit(&f->m, spec, 2, "dynamic", WORKERS, WORKERS, NULL);

    f->plan = calloc(1, sizeof *f->plan);
    f->plan->rng = *rng;
    f->plan->dead = dead;
    f->plan->dead_fault = dead_fault;
    f->plan->dead_size = up_dead_size;
    f->plan->dead_end = (long long)(fleet_dead_fraction * (double)up_dead_size);
    f->plan->calm = dead != NULL;
    su_proxy_start(&f->proxy, su.port);
    pthread_mutex_lock(&f->proxy.mu);
    f->proxy.plan_arg = f->plan;
    f->proxy.plan = storm_plan;
    pthread_mutex_unlock(&f->proxy.mu);

    /* the workers' endpoint is the proxy (fu_spawn's children inherit this
     * environment); the master already runs with the server's */
    snprintf(url, sizeof url, "http://localhost:%u", f->proxy.port);
    setenv("AWS_ENDPOINT_URL", url, 1);
    for (int i = 0; i < WORKERS; i++) {
        wk_t *w = &f->w[i];
        snprintf(w->admin, sizeof w->admin, "127.0.0.1:%u", fu_free_port());
        snprintf(w->id, sizeof w->id, "w%d", i);
        snprintf(w->log, sizeof w->log, "%s/%s-%s.log", fu_dir, id, w->id);
        const char *argv[] = {fu_binary(),
                              "worker",
                              "--master",
                              f->m.ctl,
                              "--job-id",
                              f->job,
                              "--worker-id",
                              w->id,
                              "--listen",
                              "127.0.0.1:0",
                              "--threads",
                              fleet_threads,
                              "--admin",
                              w->admin,
                              "--store-timeout-ms",
                              fleet_timeout_ms,
                              "--store-max-attempts",
                              fleet_attempts,
                              NULL};
        w->pid = fu_spawn(argv, -1, w->log);
        w->waited = false;
    }
    setenv("AWS_ENDPOINT_URL", su.endpoint, 1);

    f->seen = calloc(EPOCHS * ROWS, sizeof *f->seen);
    fu_client_t proto = {.master = f->m.ctl,
                         .job = f->job,
                         .world_size = 2,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = f->seen};
    fu_clients_start(f->c, f->th, 2, &proto);
}

/* While the job runs: each worker's /metrics is bounded by what the proxy
 * counted around it (a request is counted by the proxy once read, by the
 * store once answered: at most max_connections, 16, in between per
 * worker). Returns when both clients have ended. */
static void watch_metrics(fleet_t *f)
{
    double deadline = fu_now() + tu_timeout(100);
    int scrapes = 0;
    while (!atomic_load(&f->c[0].finished) || !atomic_load(&f->c[1].finished)) {
        cr_assert(fu_now() < deadline, "the job did not end in time; see %s", fu_dir);
        usleep(200 * 1000);
        int faults0;
        int seen0 = su_proxy_count(&f->proxy, &faults0);
        counts_t m = {0};
        bool all = true;
        for (int i = 0; i < WORKERS; i++)
            all = metrics_counts(&f->w[i], &m) && all;
        if (!all) continue; /* not up yet, or retired by the master */
        for (int r = 0; r < 4; r++)
            m.requests += m.by_result[r];
        pthread_mutex_lock(&f->proxy.mu);
        int seen1 = f->proxy.requests, faults1 = f->proxy.faults;
        int resets1 = f->proxy.n_resets, slow1 = f->proxy.n_slowdowns;
        pthread_mutex_unlock(&f->proxy.mu);
        cr_assert_leq(m.requests, seen1, "/metrics: %lld requests, the proxy saw %d", m.requests,
                      seen1);
        cr_assert_geq(m.requests, seen0 - WORKERS * 16,
                      "/metrics: %lld requests, the proxy had seen %d before", m.requests, seen0);
        cr_assert_leq(m.retries, faults1, "/metrics: %lld retries of %d faults", m.retries,
                      faults1);
        cr_assert_geq(m.retries, faults0 - WORKERS * 16 - m.failures);
        cr_assert_leq(m.by_result[2], slow1, "/metrics: %lld server errors of %d SlowDowns",
                      m.by_result[2], slow1);
        cr_assert_leq(m.by_result[3], resets1, "/metrics: %lld network errors of %d resets",
                      m.by_result[3], resets1);
        cr_assert_eq(m.by_result[1], 0, "/metrics: %lld client errors", m.by_result[1]);
        scrapes++;
    }
    cr_assert_gt(scrapes, 0, "the workers' /metrics never answered");
}

static void fleet_down(fleet_t *f)
{
    fu_master_stop(&f->m, SIGTERM);
    su_proxy_stop(&f->proxy);
    free(f->plan);
    free(f->seen);
    free(f->job);
}

TestSuite(s3_faults_fleet, .init = fu_setup, .fini = fu_teardown);

Test(s3_faults_fleet, slowdown_storms_and_resets_under_a_job_exactly_once_bounded_and_counted,
     .timeout = 240)
{
    uint64_t rng = tu_seed("s3_faults_fleet.storms");
    fleet_t f;
    fleet_up(&f, "s3storm", "", &rng, NULL, 0);
    watch_metrics(&f);
    fu_clients_join(f.c, f.th, 2);
    cr_assert_eq(f.c[0].samples + f.c[1].samples, EPOCHS * ROWS, "delivered %llu + %llu samples",
                 (unsigned long long)f.c[0].samples, (unsigned long long)f.c[1].samples);
    fu_assert_once_per_epoch(f.seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(&f.m, f.job));

    counts_t s = {0};
    for (int i = 0; i < WORKERS; i++)
        summary_counts(&f.w[i], &s);
    pthread_mutex_lock(&f.proxy.mu);
    int seen = f.proxy.requests, faults = f.proxy.faults;
    int resets = f.proxy.n_resets, slow = f.proxy.n_slowdowns, storms = f.plan->storms;
    int maxf = 0;
    for (size_t i = 0; i < KEYS; i++)
        maxf = f.plan->faults[i] > maxf ? f.plan->faults[i] : maxf;
    pthread_mutex_unlock(&f.proxy.mu);
    fprintf(stderr,
            "s3_faults_fleet.storms: %d storms, %d requests through the proxy, %d SlowDowns, %d "
            "resets, at most %d faults on one request; the workers: %lld requests, %lld retries\n",
            storms, seen, slow, resets, maxf, s.requests, s.retries);
    cr_assert_gt(slow, 0, "no SlowDown was injected: the job was too short for the plan");
    cr_assert_gt(resets, 0, "no reset was injected: the job was too short for the plan");
    /* exact: every request the proxy saw was sent by a worker and counted,
     * every fault retried once, none failed */
    cr_assert_eq(s.requests, seen, "workers sent %lld requests, the proxy saw %d", s.requests,
                 seen);
    cr_assert_eq(s.retries, faults, "workers retried %lld times after %d faults", s.retries,
                 faults);
    cr_assert_eq(s.failures, 0, "%lld store operations failed", s.failures);
    fleet_down(&f);
}

/* A storm longer than the retry budget: every GET of one file's stripes
 * (but those in its last 300 KiB, which its footer shares) is answered
 * SlowDown. Each fails after its 5 attempts (4 retries), those splits fail
 * (--max-split-failures 1) and are skipped (on_bad_split "skip"), and
 * every other row is delivered exactly once in each epoch, the same ids
 * in both. */
Test(s3_faults_fleet, a_storm_past_the_retry_budget_fails_the_splits_and_they_are_skipped,
     .timeout = 240)
{
    uint64_t rng = tu_seed("s3_faults_fleet.past_the_budget");
    fleet_t f;
    fleet_up(&f, "s3dead", "\"on_bad_split\":\"skip\",", &rng, "part-00001", 2);
    watch_metrics(&f);
    fu_clients_join(f.c, f.th, 2);
    cr_assert(fu_job_finished(&f.m, f.job));
    uint64_t per_epoch[EPOCHS] = {0}, twice = 0, differ = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t id = 0; id < ROWS; id++) {
            unsigned n = atomic_load(&f.seen[e * ROWS + id]);
            per_epoch[e] += n;
            twice += n > 1;
            differ += n != atomic_load(&f.seen[id]);
        }
    cr_assert_eq(twice, 0, "%llu ids delivered more than once in an epoch",
                 (unsigned long long)twice);
    cr_assert_eq(differ, 0, "%llu ids delivered in one epoch and not the other",
                 (unsigned long long)differ);
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", f.job);
    json_t *j = fu_get_json(f.m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    long long splits = json_integer_value(json_object_get(j, "skipped_splits"));
    long long rows = json_integer_value(json_object_get(j, "skipped_rows"));
    /* the same splits fail in both epochs: their stripes are the same
     * ranges; those in the file's last 300 KiB are read */
    cr_assert(splits > 0 && splits % EPOCHS == 0 && splits < EPOCHS * 20,
              "%lld splits skipped: not some of the file's 20 in each epoch", splits);
    cr_assert_eq(rows, splits * 1000, "%lld rows skipped in %lld splits of 1000", rows, splits);
    for (uint32_t e = 0; e < EPOCHS; e++)
        cr_assert_eq(per_epoch[e] + (uint64_t)rows / EPOCHS, ROWS,
                     "epoch %u: %llu samples delivered and %lld skipped", e,
                     (unsigned long long)per_epoch[e], rows / EPOCHS);
    json_decref(j);

    counts_t s = {0};
    for (int i = 0; i < WORKERS; i++)
        summary_counts(&f.w[i], &s);
    pthread_mutex_lock(&f.proxy.mu);
    int seen = f.proxy.requests, slow = f.proxy.n_slowdowns, resets = f.proxy.n_resets;
    pthread_mutex_unlock(&f.proxy.mu);
    fprintf(stderr,
            "s3_faults_fleet.past_the_budget: %d requests through the proxy, %d SlowDowns; the "
            "workers: %lld requests, %lld retries, %lld failures; %lld splits skipped\n",
            seen, slow, s.requests, s.retries, s.failures, splits);
    cr_assert_eq(resets, 0);
    cr_assert_eq(s.requests, seen, "workers sent %lld requests, the proxy saw %d", s.requests,
                 seen);
    /* each request for the file tried exactly max_attempts times */
    cr_assert_gt(slow, 0);
    cr_assert_eq(slow % MAX_ATTEMPTS, 0, "%d SlowDowns: not whole requests of %d attempts", slow,
                 MAX_ATTEMPTS);
    cr_assert_eq(s.retries, (long long)slow / MAX_ATTEMPTS * (MAX_ATTEMPTS - 1),
                 "%lld retries for %d SlowDowns", s.retries, slow);
    /* each skipped split is one failed read at least (a read-ahead of a
     * failing stripe may fail once more) */
    cr_assert(s.failures >= splits && s.failures <= slow / MAX_ATTEMPTS,
              "%lld failed operations for %lld skipped splits and %d failed requests", s.failures,
              splits, slow / MAX_ATTEMPTS);
    fleet_down(&f);
}

/* ---- a server that ignores the Range ---- */

#define IGNORED "the server ignored the Range (HTTP 200)"

/* Wait (bounded) for both clients to end. */
static void clients_end(fleet_t *f)
{
    double deadline = fu_now() + tu_timeout(100);
    while (!atomic_load(&f->c[0].finished) || !atomic_load(&f->c[1].finished)) {
        cr_assert(fu_now() < deadline, "the job did not end in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(f->th[i], NULL);
}

/* The workers did not fail: each exits 0 once the master has no more
 * work; at least one of them reported a split of part-00001 failed by
 * why (the store's message). */
static void workers_went_on(fleet_t *f, const char *why)
{
    int reported = 0;
    for (int i = 0; i < WORKERS; i++) {
        wk_t *w = &f->w[i];
        int ws = wk_wait(w);
        cr_assert_neq(ws, -1, "worker %s did not exit; see %s", w->id, w->log);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker %s: status %d; see %s", w->id, ws,
                  w->log);
        FILE *fp = fopen(w->log, "r");
        cr_assert_not_null(fp, "%s", w->log);
        char line[2048];
        while (fgets(line, sizeof line, fp))
            reported += strstr(line, "part-00001") && strstr(line, "reported to the master") &&
                        strstr(line, why);
        fclose(fp);
    }
    cr_assert_gt(reported, 0, "no worker reported a split of part-00001 (%s): see %s", why, fu_dir);
}

/* Every GET of one file's stripes (but those its footer shares) answered
 * as a server that ignores the Range: each such read fails at once (a
 * protocol error is not retried); those splits fail (--max-split-failures
 * 1) and are skipped, the workers go on, and every other row is delivered
 * exactly once in each epoch, the same ids in both. The workers read with
 * two stripe lanes here (the failure reaches the reader from a lane), one
 * thread under "fail" below. */
Test(s3_faults_fleet, an_ignored_range_fails_the_splits_not_the_workers_and_they_are_skipped,
     .timeout = 240)
{
    uint64_t rng = tu_seed("s3_faults_fleet.range_skip");
    fleet_threads = "2";
    fleet_t f;
    fleet_up(&f, "s3range", "\"on_bad_split\":\"skip\",", &rng, "part-00001", 4);
    clients_end(&f);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(f.c[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(f.c[i].end), f.c[i].msg);
    cr_assert(fu_job_finished(&f.m, f.job));
    uint64_t per_epoch[EPOCHS] = {0}, twice = 0, differ = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t id = 0; id < ROWS; id++) {
            unsigned n = atomic_load(&f.seen[e * ROWS + id]);
            per_epoch[e] += n;
            twice += n > 1;
            differ += n != atomic_load(&f.seen[id]);
        }
    cr_assert_eq(twice, 0, "%llu ids delivered more than once in an epoch",
                 (unsigned long long)twice);
    cr_assert_eq(differ, 0, "%llu ids delivered in one epoch and not the other",
                 (unsigned long long)differ);
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", f.job);
    json_t *j = fu_get_json(f.m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    long long splits = json_integer_value(json_object_get(j, "skipped_splits"));
    long long rows = json_integer_value(json_object_get(j, "skipped_rows"));
    cr_assert(splits > 0 && splits % EPOCHS == 0 && splits < EPOCHS * 20,
              "%lld splits skipped: not some of the file's 20 in each epoch", splits);
    cr_assert_eq(rows, splits * 1000, "%lld rows skipped in %lld splits of 1000", rows, splits);
    for (uint32_t e = 0; e < EPOCHS; e++)
        cr_assert_eq(per_epoch[e] + (uint64_t)rows / EPOCHS, ROWS,
                     "epoch %u: %llu samples delivered and %lld skipped", e,
                     (unsigned long long)per_epoch[e], rows / EPOCHS);
    json_decref(j);
    workers_went_on(&f, IGNORED);
    pthread_mutex_lock(&f.proxy.mu);
    int faults = f.proxy.faults, slow = f.proxy.n_slowdowns, resets = f.proxy.n_resets;
    pthread_mutex_unlock(&f.proxy.mu);
    cr_assert_eq(slow + resets, 0);
    cr_assert_geq(faults, splits, "%d ignored Ranges for %lld skipped splits", faults, splits);
    fleet_down(&f);
}

/* The same under on_bad_split "fail": the job fails naming the object and
 * the protocol error; the workers do not fail, they exit 0. */
Test(s3_faults_fleet, an_ignored_range_fails_the_job_naming_the_object_not_the_workers,
     .timeout = 240)
{
    uint64_t rng = tu_seed("s3_faults_fleet.range_fail");
    fleet_t f;
    fleet_up(&f, "s3rangefail", "\"on_bad_split\":\"fail\",", &rng, "part-00001", 4);
    clients_end(&f);
    int failed_clients = 0;
    for (int i = 0; i < 2; i++) {
        if (f.c[i].end == SL_ERR_CLOSED) continue; /* ended before the failure reached it */
        failed_clients++;
        cr_assert(strstr(f.c[i].msg, "failed: split") && strstr(f.c[i].msg, "part-00001") &&
                      strstr(f.c[i].msg, IGNORED),
                  "client %d ended with %s: %s", i, sl_err_str(f.c[i].end), f.c[i].msg);
    }
    cr_assert_gt(failed_clients, 0, "no client was told of the job's failure");
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", f.job);
    json_t *j = fu_get_json(f.m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    json_t *fl = json_object_get(j, "failure");
    cr_assert(json_is_object(fl), "no failure object");
    const char *file = json_string_value(json_object_get(fl, "file"));
    cr_assert(file && strstr(file, "part-00001"), "failure file: %s", file ? file : "(none)");
    cr_assert_str_eq(json_string_value(json_object_get(fl, "error")), sl_err_str(SL_ERR_PROTOCOL));
    const char *msg = json_string_value(json_object_get(fl, "message"));
    cr_assert(msg && strstr(msg, "part-00001") && strstr(msg, IGNORED), "message: %s",
              msg ? msg : "(none)");
    json_decref(j);
    workers_went_on(&f, IGNORED);
    fleet_down(&f);
}

/* ---- a server that hangs ---- */

#define TIMED_OUT "Timeout was reached" /* curl's message for CURLE_OPERATION_TIMEDOUT */
#define HANG_ATTEMPTS 2

/* Every GET of the stripes in the first tenth of one file read by the
 * proxy and never answered: with --store-timeout-ms 500 and
 * --store-max-attempts 2 each such read times out twice and fails
 * (SL_ERR_TIMEOUT naming the object); those splits fail and are skipped
 * (on_bad_split "skip"), the workers go on and exit 0, every other row is
 * delivered exactly once in each epoch, the same ids in both, and the
 * workers' summaries count exactly the proxy's hangs: one retry and one
 * failed request per two. */
Test(s3_faults_fleet, a_hung_object_times_out_fails_the_splits_not_the_workers_and_they_are_skipped,
     .timeout = 240)
{
    uint64_t rng = tu_seed("s3_faults_fleet.hang_skip");
    fleet_timeout_ms = "500";
    fleet_attempts = "2";
    fleet_dead_fraction = 0.1; /* a few splits: each failure costs two timeouts */
    fleet_t f;
    fleet_up(&f, "s3hang", "\"on_bad_split\":\"skip\",", &rng, "part-00001", 5);
    clients_end(&f);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(f.c[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(f.c[i].end), f.c[i].msg);
    cr_assert(fu_job_finished(&f.m, f.job));
    uint64_t per_epoch[EPOCHS] = {0}, twice = 0, differ = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t id = 0; id < ROWS; id++) {
            unsigned n = atomic_load(&f.seen[e * ROWS + id]);
            per_epoch[e] += n;
            twice += n > 1;
            differ += n != atomic_load(&f.seen[id]);
        }
    cr_assert_eq(twice, 0, "%llu ids delivered more than once in an epoch",
                 (unsigned long long)twice);
    cr_assert_eq(differ, 0, "%llu ids delivered in one epoch and not the other",
                 (unsigned long long)differ);
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", f.job);
    json_t *j = fu_get_json(f.m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    long long splits = json_integer_value(json_object_get(j, "skipped_splits"));
    long long rows = json_integer_value(json_object_get(j, "skipped_rows"));
    cr_assert(splits > 0 && splits % EPOCHS == 0 && splits <= EPOCHS * 4,
              "%lld splits skipped: not some of the first tenth's in each epoch", splits);
    cr_assert_eq(rows, splits * 1000, "%lld rows skipped in %lld splits of 1000", rows, splits);
    for (uint32_t e = 0; e < EPOCHS; e++)
        cr_assert_eq(per_epoch[e] + (uint64_t)rows / EPOCHS, ROWS,
                     "epoch %u: %llu samples delivered and %lld skipped", e,
                     (unsigned long long)per_epoch[e], rows / EPOCHS);
    json_decref(j);
    workers_went_on(&f, TIMED_OUT);

    counts_t s = {0};
    for (int i = 0; i < WORKERS; i++)
        summary_counts(&f.w[i], &s);
    pthread_mutex_lock(&f.proxy.mu);
    int seen = f.proxy.requests, hangs = f.proxy.n_hangs, faults = f.proxy.faults;
    int other = f.proxy.n_slowdowns + f.proxy.n_resets;
    pthread_mutex_unlock(&f.proxy.mu);
    fprintf(stderr,
            "s3_faults_fleet.hang_skip: %d requests through the proxy, %d hung; the workers: %lld "
            "requests, %lld retries, %lld failures; %lld splits skipped\n",
            seen, hangs, s.requests, s.retries, s.failures, splits);
    cr_assert_eq(other, 0);
    cr_assert_eq(faults, hangs);
    cr_assert_eq(s.requests, seen, "workers sent %lld requests, the proxy saw %d", s.requests,
                 seen);
    /* each hung request tried exactly --store-max-attempts times */
    cr_assert_gt(hangs, 0);
    cr_assert_eq(hangs % HANG_ATTEMPTS, 0, "%d hangs: not whole requests of %d attempts", hangs,
                 HANG_ATTEMPTS);
    cr_assert_eq(s.retries, (long long)hangs / HANG_ATTEMPTS * (HANG_ATTEMPTS - 1),
                 "%lld retries for %d hangs", s.retries, hangs);
    cr_assert(s.failures >= splits && s.failures <= hangs / HANG_ATTEMPTS,
              "%lld failed operations for %lld skipped splits and %d failed requests", s.failures,
              splits, hangs / HANG_ATTEMPTS);
    fleet_down(&f);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}
