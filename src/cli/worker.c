/* `sluice worker`: run one DPP job's pipeline (src/dpp/worker/worker.h) and serve
 * its batches to trainer clients until stopped (SIGINT, SIGTERM) or, with
 * --exit-when-done, until every batch has been acknowledged. With --master
 * the job and its splits come from a DPP master (src/dpp/worker/lease_client.h)
 * and the worker exits once the master has no more work for it. Options are
 * defined once in the table below, which also produces the help text.
 * Exit codes: 0 done, 1 failed, 2 usage error or a job spec with problems. */
#include <getopt.h>
#include <unistd.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/lease_client.h"
#include "dpp/worker/worker.h"
#include "dpp/worker/admin.h"
#include "rpc/auth.h"

enum {
    OPT_JOB = 1,
    OPT_LISTEN,
    OPT_THREADS,
    OPT_MEMORY,
    OPT_CREDITS,
    OPT_EXIT,
    OPT_ID,
    OPT_MASTER,
    OPT_JOB_ID,
    OPT_ADMIN,
    OPT_SECRET,
    OPT_MAX_CLIENTS,
    OPT_CONN_IDLE,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_ADMIN_MAX,
    OPT_ADMIN_TIMEOUT,
    OPT_HELP
};

static const sl_cli_opt_t wopts[] = {
    {OPT_JOB, "job", "SPEC.json", "the job spec (docs/JOBS.md); required without --master"},
    {OPT_MASTER, "master", "HOST:PORT",
     "take the job and its splits from this DPP master (exits when it has no more work)"},
    {OPT_JOB_ID, "job-id", "ID", "with --master: serve only this job (default: the first leased)"},
    {OPT_ADMIN, "admin", "HOST:PORT",
     "serve GET /healthz /readyz /metrics /status here (port 0 picks one)"},
    {OPT_LISTEN, "listen", "HOST:PORT",
     "address for trainer clients (default 127.0.0.1:7077; "
     "port 0 picks a free one)"},
    {OPT_THREADS, "threads", "N", "transform threads (default: the online cores)"},
    {OPT_MEMORY, "memory-limit", "BYTES",
     "memory for stripes and batches in flight; K, M, G "
     "suffixes (default 256M)"},
    {OPT_CREDITS, "max-credits", "N", "most unacknowledged batches per client (default 16)"},
    {OPT_EXIT, "exit-when-done", NULL, "exit once every batch of every epoch is acknowledged"},
    {OPT_ID, "worker-id", "NAME", "name sent to clients (default worker-<pid>)"},
    {OPT_SECRET, "cluster-secret-file", "FILE",
     "the cluster secret (first line of FILE; else the file named by "
     "$SLUICE_CLUSTER_SECRET_FILE): trainer clients must prove they hold it, and so does this "
     "worker to its master (docs/PROTOCOL.md); required for a --listen other than loopback"},
    {OPT_MAX_CLIENTS, "max-clients", "N",
     "trainer connections at once, two threads each (default 256); when full, the oldest one "
     "still in its handshake, else the longest idle one, makes room"},
    {OPT_CONN_IDLE, "client-conn-idle-ms", "MS",
     "close a trainer connection that sends nothing this long while it holds no batch "
     "(default 60000; the client reconnects)"},
    {OPT_TLS_CERT, "tls-cert", "FILE", "serve --admin over HTTPS with this PEM certificate"},
    {OPT_TLS_KEY, "tls-key", "FILE", "... and this PEM private key"},
    {OPT_ADMIN_MAX, "admin-max-connections", "N", "admin connections at once (default 512)"},
    {OPT_ADMIN_TIMEOUT, "admin-timeout-s", "S", "close an admin connection idle this long (10)"},
    {OPT_HELP, "help", NULL, "this help"},
};
#define NUM_WOPTS (sizeof wopts / sizeof wopts[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: sluice worker --job SPEC.json [options]\n"
                 "       sluice worker --master HOST:PORT [--job-id ID] [options]\n\n"
                 "Runs the job's pipeline (read, filter, batch, dedup, transform, encode) and\n"
                 "serves the batches to trainer clients. Prints `listening on HOST:PORT` once\n"
                 "ready and a summary at the end. SIGINT/SIGTERM stop it cleanly.\n\noptions:\n");
    sl_cli_print_options(out, wopts, NUM_WOPTS, 28);
}

static int usage_error(const char *fmt, const char *arg)
{
    return sl_cli_usage_error("worker", fmt, arg);
}

/* "123", "64K", "256M", "2G" */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30;
    if (mul != 1) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
    char *end;
    if (*s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || v < min || v > UINT32_MAX) return -1;
    *out = (uint32_t)v;
    return 0;
}

static void print_problems(const char *what, const sl_pipeline_problems_t *p)
{
    fprintf(stderr, "sluice worker: %s: %u problem%s\n", what, p->count, p->count == 1 ? "" : "s");
    for (uint32_t i = 0; i < p->count; i++)
        fprintf(stderr, "  %s\n", p->items[i]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int sl_cli_worker(int argc, char **argv)
{
    struct option lo[NUM_WOPTS + 1];
    for (size_t i = 0; i < NUM_WOPTS; i++)
        lo[i] = (struct option){wopts[i].name, wopts[i].arg ? required_argument : no_argument, NULL,
                                wopts[i].id};
    lo[NUM_WOPTS] = (struct option){0, 0, 0, 0};
    const char *job_path = NULL, *master = NULL, *job_id = NULL, *admin_addr = NULL;
    const char *secret_file = NULL;
    sl_admin_opts_t ao = {0};
    uint32_t v32;
    sl_worker_opts_t o = sl_worker_opts_default();
    o.listen = "127.0.0.1:7077";
    bool exit_when_done = false;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case OPT_JOB:
            job_path = optarg;
            break;
        case OPT_LISTEN:
            o.listen = optarg;
            break;
        case OPT_THREADS:
            if (parse_u32(optarg, 1, &o.threads)) return usage_error("bad --threads '%s'", optarg);
            break;
        case OPT_MEMORY:
            if (parse_bytes(optarg, &o.memory_limit) || o.memory_limit == 0)
                return usage_error("bad --memory-limit '%s'", optarg);
            break;
        case OPT_CREDITS:
            if (parse_u32(optarg, 1, &o.max_credits))
                return usage_error("bad --max-credits '%s'", optarg);
            break;
        case OPT_EXIT:
            exit_when_done = true;
            break;
        case OPT_ID:
            o.worker_id = optarg;
            break;
        case OPT_MASTER:
            master = optarg;
            break;
        case OPT_JOB_ID:
            job_id = optarg;
            break;
        case OPT_ADMIN:
            admin_addr = optarg;
            break;
        case OPT_SECRET:
            secret_file = optarg;
            break;
        case OPT_MAX_CLIENTS:
            if (parse_u32(optarg, 1, &o.max_clients))
                return usage_error("bad --max-clients '%s'", optarg);
            break;
        case OPT_CONN_IDLE:
            if (parse_u32(optarg, 1, &v32) || v32 > INT32_MAX)
                return usage_error("bad --client-conn-idle-ms '%s'", optarg);
            o.client_conn_idle_ms = (int)v32;
            break;
        case OPT_TLS_CERT:
            ao.tls_cert_file = optarg;
            break;
        case OPT_TLS_KEY:
            ao.tls_key_file = optarg;
            break;
        case OPT_ADMIN_MAX:
            if (parse_u32(optarg, 1, &ao.max_connections))
                return usage_error("bad --admin-max-connections '%s'", optarg);
            break;
        case OPT_ADMIN_TIMEOUT:
            if (parse_u32(optarg, 1, &ao.timeout_s))
                return usage_error("bad --admin-timeout-s '%s'", optarg);
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        default:
            return usage_error("unknown or incomplete option '%s'",
                               optind > 0 && optind <= argc ? argv[optind - 1] : "?");
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (master && job_path)
        return usage_error("%s", "--job and --master exclude each other (a master sends the job)");
    if (!master && job_id) return usage_error("%s", "--job-id needs --master");
    if (!job_path && !master) return usage_error("%s", "--job (or --master) is required");
    if ((ao.tls_cert_file || ao.tls_key_file) && !admin_addr)
        return usage_error("%s", "--tls-cert and --tls-key need --admin");
    if (!o.threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n > 0 ? (uint32_t)n : 1;
    }
    char id_buf[64];
    if (!o.worker_id) {
        snprintf(id_buf, sizeof id_buf, "worker-%d", (int)getpid());
        o.worker_id = id_buf;
    }

    /* Signals are taken by sigtimedwait below, never by a worker thread:
     * block them before any thread starts (threads inherit the mask). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    sl_error_t err = {0};
    char *secret = NULL;
    if (sl_rpc_secret_load(secret_file, &secret, &err) != SL_OK) {
        fprintf(stderr, "sluice worker: %s\n", err.msg);
        return 1;
    }
    /* copied by the server and the lease client; wiped at exit */
    o.cluster_secret = secret;
    sl_cli_raise_nofile();
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    sl_worker_t *w = NULL;
    sl_worker_admin_t *admin = NULL;
    sl_worker_lease_prep_t prep = {.fd = -1};
    sl_worker_lease_client_t *msrc = NULL; /* owned by the worker once it starts */
    sl_err_t rc;
    const char *what = master ? master : job_path;
    if (admin_addr) {
        ao.address = admin_addr;
        if ((rc = sl_worker_admin_serve(NULL, NULL, &ao, &admin, &err))) {
            fprintf(stderr, "sluice worker: --admin %s: %s\n", admin_addr, err.msg);
            sl_rpc_secret_free(secret);
            return 1;
        }
        char host[256];
        snprintf(host, sizeof host, "%s", admin_addr);
        char *colon = strrchr(host, ':');
        if (colon) *colon = '\0';
        printf("admin on %s:%u\n", host, (unsigned)sl_worker_admin_port(admin));
        fflush(stdout);
    }
    if (master) {
        char admin_real[300] = "";
        if (admin) {
            snprintf(admin_real, sizeof admin_real, "%s", admin_addr);
            char *colon = strrchr(admin_real, ':');
            if (colon)
                snprintf(colon, sizeof admin_real - (size_t)(colon - admin_real), ":%u",
                         (unsigned)sl_worker_admin_port(admin));
        }
        sl_worker_lease_client_opts_t mo = {.master = master,
                                          .worker_id = o.worker_id,
                                          .job_id = job_id,
                                          .admin_address = admin ? admin_real : NULL,
                                          .threads = o.threads,
                                          .cluster_secret = secret};
        rc = sl_worker_lease_prep_new(&mo, o.listen, &prep, &err);
        if (rc == SL_OK) {
            char host[256];
            snprintf(host, sizeof host, "%s", o.listen);
            char *colon = strrchr(host, ':');
            if (colon) *colon = '\0';
            printf("listening on %s:%u\nregistered with master %s as %s; waiting for work\n", host,
                   (unsigned)prep.port, master, o.worker_id);
            fflush(stdout);
        }
        /* wait for the first lease, watching for signals */
        while (rc == SL_OK) {
            const char *jid, *spec;
            rc = sl_worker_lease_client_wait_job(prep.ms, 200, &jid, &spec, &err);
            if (rc == SL_OK) break;
            if (rc != SL_ERR_TIMEOUT) break;
            struct timespec ts = {0, 0};
            int sig = sigtimedwait(&sigs, NULL, &ts);
            if (sig == SIGINT || sig == SIGTERM) {
                printf("stopped by %s before any work\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
                sl_worker_lease_prep_free(&prep);
                sl_worker_admin_stop(admin);
                sl_rpc_secret_free(secret);
                return 0;
            }
            rc = SL_OK;
        }
        msrc = prep.ms;
        if (rc == SL_OK)
            rc = sl_worker_lease_prep_start(&prep, &o, &job, &w, &problems, &err);
        else
            sl_worker_lease_prep_free(&prep);
        exit_when_done = true; /* the master says when there is no more work */
    } else {
        rc = sl_pipeline_job_load(job_path, &job, &problems, &err);
        if (rc == SL_OK) {
            rc = sl_worker_start(job, &o, &w, &problems, &err);
            if (rc != SL_OK) {
                sl_pipeline_job_destroy(job);
                job = NULL;
            }
        }
    }
    if (rc != SL_OK) {
        int code = 1;
        if (problems.count) {
            print_problems(what, &problems);
            code = 2;
        } else if (rc == SL_ERR_CLOSED && master) {
            printf("the master has no work for this worker: %s\n", err.msg);
            code = 0;
        } else {
            fprintf(stderr, "sluice worker: %s\n", err.msg);
        }
        sl_pipeline_problems_free(&problems);
        sl_worker_admin_stop(admin);
        sl_rpc_secret_free(secret);
        return code;
    }
    sl_pipeline_problems_free(&problems);
    if (admin) sl_worker_admin_set(admin, w, msrc);
    if (master) {
        printf("serving job %s\n", sl_worker_job_id(w));
    } else {
        char host[256];
        snprintf(host, sizeof host, "%s", o.listen);
        char *colon = strrchr(host, ':');
        if (colon) *colon = '\0';
        printf("listening on %s:%u\n", host, (unsigned)sl_worker_port(w));
    }
    fflush(stdout);
    double t0 = now_s();
    int code = 0;
    const char *why = "stopped";
    for (;;) {
        struct timespec ts = {0, 200 * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            why = sig == SIGINT ? "stopped by SIGINT" : "stopped by SIGTERM";
            break;
        }
        rc = sl_worker_wait(w, 0, &err);
        if (rc == SL_OK && exit_when_done) {
            why = master ? "no more work from the master" : "job finished";
            break;
        }
        if (rc != SL_OK && rc != SL_ERR_TIMEOUT) {
            fprintf(stderr, "sluice worker: %s\n", err.msg);
            why = "failed";
            code = 1;
            break;
        }
    }
    double secs = now_s() - t0;
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    sl_worker_admin_stop(admin); /* before the worker goes */
    sl_worker_stop(w);           /* under a master: the last SPLIT_READs go out */
    sl_worker_stats(w, &st);
    printf("%s\n", why);
    sl_worker_print_stats(&st, secs, stdout);
    if (msrc) {
        sl_worker_lease_client_stats_t m;
        sl_worker_lease_client_stats(msrc, &m);
        printf("  master %s, job %s: leases %" PRIu64 ", splits reported %" PRIu64 " (%" PRIu64
               " done), revoked %" PRIu64 ", reconnects %" PRIu64 "%s\n",
               master, m.job_id, m.leases, m.split_reads, m.splits_done, m.revoked,
               m.reconnects, m.stop ? ", retired by the master" : "");
    }
    fflush(stdout);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_rpc_secret_free(secret);
    return code;
}
