/* A worker running the same job on the same criteo table from an S3
 * server and from local disk, in the same run, alternating: samples/s of a
 * trainer that only counts, time from the worker's start (the job planned:
 * the listing, every footer) to the first batch, and the store's requests
 * per split and bytes fetched per byte of the table. The server is the
 * s3proxy of `ops/s3proxy start --dir DIR`; the table is generated here
 * (seeded) and uploaded into bucket bench-s3job. Figures only.
 *
 * With --curl N, the baseline of the raw transfer: one more S3 run goes
 * through a recording pass-through proxy here (not timed), which notes
 * every GET the job sent (its path and Range); then, each rep, the job's
 * bytes/s from the server directly (the store's bytes read over the job's
 * time) and the same GETs made by `curl --parallel --parallel-max N`
 * (signed with --aws-sigv4) against the same server, and their ratio.
 *
 * usage: bench_s3_job --dir DIR [--rows N (1000000)] [--files F (4)]
 *                     [--stripe-rows R (16384)] [--threads T (2)] [--reps K (3)]
 *                     [--features LIST (all; e.g. I1,C1: a projection)]
 *                     [--curl N (0: none)] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr */
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "relay.h"
#include "sluice/trainer.h"
#include "store/store.h"

static sl_store_t *up;

/* CPU seconds (user + system) of the process in DIR/s3proxy.pid so far;
 * -1 when it cannot be read. */
static double proxy_cpu(const char *dir)
{
    char path[700], buf[1024];
    snprintf(path, sizeof path, "%s/s3proxy.pid", dir);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f == NULL) return -1;
    if (fscanf(f, "%d", &pid) != 1) pid = 0;
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (pid <= 0 || (f = fopen(path, "r")) == NULL) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

typedef struct run {
    double first, total; /* seconds from the worker's start */
    uint64_t samples, splits;
    uint64_t read_ahead, read_ahead_skipped, read_ahead_dropped, memory_peak;
    sl_store_stats_t store;
    bool has_store;
} run_t;

static int run_job(const char *table, const char *features, uint32_t threads, run_t *r)
{
    char spec[2048];
    char feat[1200] = "";
    if (features != NULL && *features) {
        char list[1100] = "";
        size_t n = 0;
        for (const char *c = features; *c && n + 8 < sizeof list;) {
            const char *e = strchr(c, ',');
            size_t len = e ? (size_t)(e - c) : strlen(c);
            n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%.*s\"", n ? "," : "", (int)len,
                                  c);
            c = e ? e + 1 : c + len;
        }
        snprintf(feat, sizeof feat, ",\"features\":[%s]", list);
    }
    snprintf(spec, sizeof spec,
             "{\"id\":\"bench-s3\",\"source\":{\"table\":\"%s\"%s},\"batch\":{\"size\":4096}}",
             table, feat);
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    sl_worker_t *w = NULL;
    sl_trainer_t *t = NULL;
    int status = 1;
    memset(r, 0, sizeof *r);
    double t0 = bench_now();
    if (sl_pipeline_job_parse(spec, strlen(spec), &job, &p, &err) != SL_OK) goto done;
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = threads;
    if (sl_worker_start(job, &o, &w, &p, &err) != SL_OK) goto done;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    if (sl_trainer_connect(&to, &t, &err) != SL_OK) goto done;
    sl_batch_t *b;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, 600 * 1000, &b, &err)) == SL_OK) {
        if (r->samples == 0) r->first = bench_now() - t0;
        r->samples += b->batch_size;
        sl_trainer_release(t, b);
    }
    if (rc != SL_ERR_CLOSED) goto done;
    r->total = bench_now() - t0;
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    r->splits = st.splits;
    r->read_ahead = st.read_ahead;
    r->read_ahead_skipped = st.read_ahead_skipped;
    r->read_ahead_dropped = st.read_ahead_dropped;
    r->memory_peak = st.memory_peak;
    if (sl_worker_store(w) != NULL) {
        sl_store_stats(sl_worker_store(w), &r->store);
        r->has_store = true;
    }
    status = 0;
done:
    if (status) fprintf(stderr, "bench_s3_job: %s: %s\n", table, err.msg);
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_problems_free(&p);
    sl_pipeline_job_destroy(job);
    return status;
}

/* ---- the recording proxy: the loopback relay of tests/relay.h (one
 * request per connection, "Connection: close" added, not a signed header)
 * with a hook that notes each GET's path and Range ---- */
typedef struct rec {
    tu_relay_t relay;
    uint16_t port, upstream;
    pthread_mutex_t mu;
    char **gets; /* "PATH\tRANGE" */
    size_t n, cap;
} rec_t;

static tu_relay_verdict_t rec_hook(void *ctx, int fd, const char *req, size_t head, size_t len)
{
    (void)fd;
    (void)head;
    (void)len;
    rec_t *p = ctx;
    if (strncmp(req, "GET ", 4) == 0 && strstr(req, "list-type=") == NULL) {
        const char *sp = strchr(req + 4, ' ');
        const char *rg = strcasestr(req, "\r\nRange: ");
        const char *host = strcasestr(req, "\r\nHost: ");
        if (sp && rg && host) {
            /* "HOST PATH\tRANGE": the host without its port (virtual-hosted
             * requests name the bucket there) */
            char *line = malloc((size_t)(sp - req) + 400);
            int n = sscanf(host + 8, "%150[^:\r]", line) == 1 ? (int)strlen(line) : 0;
            n += snprintf(line + n, (size_t)(sp - req) + 400 - (size_t)n, " %.*s\t",
                          (int)(sp - req - 4), req + 4);
            sscanf(rg + 9, "%150[^\r]", line + n);
            pthread_mutex_lock(&p->mu);
            if (p->n == p->cap)
                p->gets = realloc(p->gets, (p->cap = p->cap * 2 + 64) * sizeof *p->gets);
            p->gets[p->n++] = line;
            pthread_mutex_unlock(&p->mu);
        }
    }
    return TU_RELAY_PASS;
}

static int rec_start(rec_t *p, uint16_t upstream)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->upstream = upstream;
    if (tu_relay_start(&p->relay, upstream, rec_hook, p) != 0) return 1;
    p->port = p->relay.port;
    return 0;
}

static void rec_stop(rec_t *p)
{
    tu_relay_stop(&p->relay);
}

/* A curl config file at path making every recorded GET against the
 * server at port, signed, its body to /dev/null. */
static int curl_config(const char *path, const rec_t *p, unsigned port)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) return 1;
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    for (size_t i = 0; i < p->n; i++) {
        const char *sp = strchr(p->gets[i], ' '), *tab = strchr(p->gets[i], '\t');
        fprintf(f,
                "%surl = \"http://%.*s:%u%.*s\"\noutput = \"/dev/null\"\nuser = \"%s:%s\"\n"
                "aws-sigv4 = \"aws:amz:us-east-1:s3\"\nheader = \"Range: %s\"\n"
                "header = \"x-amz-content-sha256: "
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"\n"
                "fail\n",
                i ? "next\n" : "", (int)(sp - p->gets[i]), p->gets[i], port, (int)(tab - sp - 1),
                sp + 1, id, secret, tab + 1);
    }
    return fclose(f) != 0;
}

/* The bytes the recorded GETs ask for. */
static uint64_t rec_bytes(const rec_t *p)
{
    uint64_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        unsigned long long a, b;
        const char *eq = strstr(p->gets[i], "bytes=");
        if (eq && sscanf(eq + 6, "%llu-%llu", &a, &b) == 2) n += b - a + 1;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *features = NULL, *only = NULL;
    uint64_t rows = 1000000;
    uint32_t files = 4, stripe_rows = 16384, threads = 2, reps = 3, curl = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--dir") == 0 && v)
            dir = argv[++i];
        else if (strcmp(argv[i], "--rows") == 0 && v)
            rows = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--files") == 0 && v)
            files = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--stripe-rows") == 0 && v)
            stripe_rows = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && v)
            threads = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && v)
            reps = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--curl") == 0 && v)
            curl = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--features") == 0 && v)
            features = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && v &&
                 (strcmp(v, "local") == 0 || strcmp(v, "s3") == 0))
            only = argv[++i]; /* one kind of run (to profile it alone) */
        else {
            fprintf(stderr,
                    "usage: bench_s3_job --dir DIR [--rows N] [--files F] [--stripe-rows R] "
                    "[--threads T] [--reps K] [--features LIST] [--only local|s3] [--curl N]\n");
            return 2;
        }
    }
    if (dir == NULL || rows == 0 || files == 0 || stripe_rows == 0 || threads == 0 || reps == 0) {
        fprintf(stderr, "bench_s3_job: --dir DIR is required (ops/s3proxy start --dir DIR)\n");
        return 2;
    }
    if (bench_s3_env_load(dir, "bench_s3_job") != 0) return 1;
    char local[700], bucket[700];
    snprintf(local, sizeof local, "%s/bench-s3job-local", dir);
    snprintf(bucket, sizeof bucket, "%s/data/bench-s3job", dir);
    mkdir(bucket, 0755);
    struct stat sb;
    char schema[800];
    snprintf(schema, sizeof schema, "%s/_schema", local);
    if (stat(schema, &sb) != 0 && bench_gen_criteo(local, rows, files, stripe_rows, "bench_s3_job"))
        return 1;
    sl_error_t e = {0};
    if (sl_store_open_url("s3://bench-s3job", NULL, &up, NULL, &e) != SL_OK) {
        fprintf(stderr, "bench_s3_job: %s\n", e.msg);
        return 1;
    }
    double u0 = bench_now();
    if (bench_s3_upload_tree(up, local, "criteo", "bench_s3_job") != 0) return 1;
    double upload_s = bench_now() - u0;
    sl_store_stats_t ust;
    sl_store_stats(up, &ust);
    sl_store_destroy(up);
    printf("bench_s3_job: criteo, %llu rows in %u files, stripes of %u rows, %.1f MiB; worker "
           "threads %u; features %s; uploaded in %.2f s\n",
           (unsigned long long)rows, files, stripe_rows, (double)ust.bytes_written / 1048576.0,
           threads, features ? features : "all", upload_s);
    /* --curl: the job's GETs, recorded through the proxy, for curl */
    rec_t rec = {0};
    char cfg[800];
    const char *endpoint = getenv("AWS_ENDPOINT_URL");
    if (curl > 0) {
        const char *colon = endpoint ? strrchr(endpoint, ':') : NULL;
        char via[64];
        run_t r;
        if (colon == NULL || rec_start(&rec, (uint16_t)atoi(colon + 1))) {
            fprintf(stderr, "bench_s3_job: no recording proxy for %s\n", endpoint);
            return 1;
        }
        snprintf(via, sizeof via, "http://localhost:%u", rec.port);
        char *saved = strdup(endpoint);
        setenv("AWS_ENDPOINT_URL", via, 1);
        int bad = run_job("s3://bench-s3job/criteo", features, threads, &r);
        setenv("AWS_ENDPOINT_URL", saved, 1);
        free(saved);
        endpoint = getenv("AWS_ENDPOINT_URL");
        rec_stop(&rec);
        snprintf(cfg, sizeof cfg, "%s/bench-s3job-curl.conf", dir);
        if (bad || curl_config(cfg, &rec, rec.upstream)) return 1;
        printf("recorded: %zu GETs of %.1f MiB (the store read %.1f MiB)\n", rec.n,
               (double)rec_bytes(&rec) / 1048576.0, (double)r.store.bytes_read / 1048576.0);
    }
    double curl_best = 0, job_best = 0;
    double best[2] = {0, 0}, first[2] = {1e9, 1e9};
    /* sluice's own CPU (this process: worker and counting trainer) per
     * sample, the least and the sum over the reps, local and s3 */
    double cpu_min[2] = {1e9, 1e9}, cpu_sum[2] = {0, 0};
    run_t last_s3 = {0};
    for (uint32_t k = 0; k < reps; k++)
        for (int s3 = 0; s3 < 2; s3++) {
            if (only != NULL && strcmp(only, s3 ? "s3" : "local") != 0) continue;
            run_t r;
            double c0 = bench_cpu_seconds(), p0 = proxy_cpu(dir);
            if (run_job(s3 ? "s3://bench-s3job/criteo" : local, features, threads, &r)) return 1;
            double cpu = bench_cpu_seconds() - c0, pcpu = proxy_cpu(dir) - p0;
            double rate = (double)r.samples / r.total;
            printf("  rep %u %-5s %10.0f samples/s  first batch %6.1f ms  %llu samples  CPU: "
                   "sluice %.2f s, s3proxy %.2f s in %.2f s\n",
                   k + 1, s3 ? "s3" : "local", rate, r.first * 1e3, (unsigned long long)r.samples,
                   cpu, p0 < 0 ? 0.0 : pcpu, r.total);
            double us = r.samples ? cpu / (double)r.samples * 1e6 : 0;
            if (us < cpu_min[s3]) cpu_min[s3] = us;
            cpu_sum[s3] += us;
            if (rate > best[s3]) best[s3] = rate;
            if (r.first < first[s3]) first[s3] = r.first;
            if (s3) last_s3 = r;
            if (s3 && curl > 0) {
                char cmd[1200];
                snprintf(cmd, sizeof cmd,
                         "curl --no-progress-meter --parallel --parallel-max %u --config %s", curl,
                         cfg);
                double c0 = bench_now();
                if (system(cmd) != 0) {
                    fprintf(stderr, "bench_s3_job: %s failed\n", cmd);
                    return 1;
                }
                double cs = bench_now() - c0;
                double job_bps = (double)r.store.bytes_read / r.total;
                double curl_bps = (double)rec_bytes(&rec) / cs;
                printf("  rep %u curl  %7.1f MiB/s for the same %zu GETs in %.2f s; the job %.1f "
                       "MiB/s, job / curl %.2f\n",
                       k + 1, curl_bps / 1048576.0, rec.n, cs, job_bps / 1048576.0,
                       job_bps / curl_bps);
                if (curl_bps > curl_best) curl_best = curl_bps;
                if (job_bps > job_best) job_best = job_bps;
            }
        }
    if (curl > 0)
        printf("best of %u: the job %.1f MiB/s, curl --parallel-max %u %.1f MiB/s, job / curl "
               "%.2f\n",
               reps, job_best / 1048576.0, curl, curl_best / 1048576.0, job_best / curl_best);
    if (only == NULL) {
        printf("best of %u: local %.0f samples/s, s3 %.0f samples/s, s3 / local %.2f\n", reps,
               best[0], best[1], best[1] / best[0]);
        printf("time to first batch (best): local %.1f ms, s3 %.1f ms\n", first[0] * 1e3,
               first[1] * 1e3);
        printf("sluice CPU per sample: local %.3f us (least; mean %.3f), s3 %.3f us (least; "
               "mean %.3f), s3 / local %.2f (least), %.2f (mean)\n",
               cpu_min[0], cpu_sum[0] / reps, cpu_min[1], cpu_sum[1] / reps,
               cpu_min[1] / cpu_min[0], cpu_sum[1] / cpu_sum[0]);
    } else {
        int k = strcmp(only, "s3") == 0;
        printf("best of %u: %s %.0f samples/s, first batch %.1f ms, sluice CPU per sample %.3f "
               "us (least; mean %.3f)\n",
               reps, only, best[k], first[k] * 1e3, cpu_min[k], cpu_sum[k] / reps);
    }
    if (last_s3.has_store)
        printf("s3 store: %llu requests for %llu splits (%.2f per split, the listing and the "
               "footers included), %.1f MiB fetched for %.1f MiB of table (%.3f bytes per byte), "
               "%llu retries\n",
               (unsigned long long)last_s3.store.requests, (unsigned long long)last_s3.splits,
               (double)last_s3.store.requests / (double)(last_s3.splits ? last_s3.splits : 1),
               (double)last_s3.store.bytes_read / 1048576.0, (double)ust.bytes_written / 1048576.0,
               (double)last_s3.store.bytes_read / (double)ust.bytes_written,
               (unsigned long long)last_s3.store.retries);
    printf("s3 worker: %llu stripes read ahead, %llu not (no room in --memory-limit), %llu "
           "dropped, memory peak %.1f MiB\n",
           (unsigned long long)last_s3.read_ahead, (unsigned long long)last_s3.read_ahead_skipped,
           (unsigned long long)last_s3.read_ahead_dropped, (double)last_s3.memory_peak / 1048576.0);
    return 0;
}
