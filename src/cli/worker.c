/* `sluice worker`: run one DPP job's pipeline (src/dpp/worker/runtime/worker.h) and serve
 * its batches to trainer clients until stopped (SIGINT, SIGTERM) or, with
 * --exit-when-done, until every batch has been acknowledged. With --master
 * the job and its splits come from a DPP master (src/dpp/worker/lease/lease_client.h)
 * and the worker exits once the master has no more work for it. Options are
 * defined once, in the table below (options.h): it parses them and prints
 * --help and the docs' table.
 * Exit codes: 0 done, 1 failed, 2 usage error or a job spec with problems. */
#include <unistd.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common/clock.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/lease/lease_client.h"
#include "dpp/worker/runtime/worker.h"
#include "dpp/worker/admin/admin.h"
#include "rpc/auth.h"
#include "store/store.h"

typedef struct worker_args {
    const char *job, *master, *job_id, *admin, *listen, *worker_id, *secret_file, *cache_dir;
    uint64_t cache_size, threads, memory_limit, max_credits, max_clients, conn_idle_ms,
        share_window, max_queued, share_stall_ms, shm_bytes;
    bool exit_when_done, no_share, no_fused, no_decode_maps, no_shm;
    sl_cli_admin_args_t adm;
    sl_cli_store_read_args_t store;
    sl_cli_log_args_t log;
} worker_args_t;

#define W(field) offsetof(worker_args_t, field)

static const sl_cli_opt_t wopts[] = {
    {"job", SL_CLI_FILE, "SPEC.json", NULL, "required without `--master`", 0, 0, 0, W(job),
     "the job spec (docs/JOBS.md)"},
    {"master", SL_CLI_ADDR, "HOST:PORT", NULL, NULL, 0, 0, 0, W(master),
     "take the job and its splits from this DPP master; excludes --job; exits when the master "
     "has no more work"},
    {"job-id", SL_CLI_STRING, "ID", NULL, "the job of the first lease", 0, 0, 0, W(job_id),
     "with --master: serve only this job"},
    {"admin", SL_CLI_ADDR, "HOST:PORT", NULL, NULL, 0, 0, 0, W(admin),
     "serve GET / (status page) /healthz /readyz /metrics /status on this address (port 0 picks "
     "one; printed "
     "as `admin on HOST:PORT`)"},
    {"listen", SL_CLI_ADDR, "HOST:PORT", "127.0.0.1:7077", NULL, 0, 0, 0, W(listen),
     "address for trainer clients; port 0 picks a free one"},
    {"threads", SL_CLI_UINT, "N", NULL, "online cores", 1, 256, 0, W(threads),
     "cores to use: with N > 1, N stripe lanes read, transform and encode N stripes at once "
     "(docs/WORKER.md \"Threads\")"},
    {"memory-limit", SL_CLI_SIZE, "BYTES", "256M", NULL, 1, UINT64_MAX, 0, W(memory_limit),
     "bytes of stripes and batches in flight"},
    {"max-credits", SL_CLI_UINT, "N", "16", NULL, 1, UINT32_MAX, 0, W(max_credits),
     "most unacknowledged batches one client may hold"},
    {"max-queued", SL_CLI_UINT, "N", NULL, "2 per transform thread, at least 4", 1, UINT32_MAX, 0,
     W(max_queued),
     "encoded batches waiting to be sent before the transform threads wait: the read-ahead, "
     "in batches (--memory-limit stays the hard bound); a few keep trainers fed and let "
     "batches reuse memory already mapped"},
    {"exit-when-done", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, W(exit_when_done),
     "exit once every batch of every epoch is acknowledged"},
    {"worker-id", SL_CLI_STRING, "NAME", NULL, "`worker-<pid>`", 0, 0, 0, W(worker_id),
     "name sent to clients in WELCOME (and to the master: one live process per id, see "
     "\"Master mode\" in docs/WORKER.md)"},
    {"cluster-secret-file", SL_CLI_PATH, "FILE", NULL, "`$SLUICE_CLUSTER_SECRET_FILE`", 0, 0, 0,
     W(secret_file),
     "the cluster secret, its first line (docs/PROTOCOL.md \"Authentication\"): trainer clients "
     "must prove they hold it, and the worker proves it to its master; required for a --listen "
     "other than loopback"},
    {"max-clients", SL_CLI_UINT, "N", "256", NULL, 1, UINT32_MAX, 0, W(max_clients),
     "trainer connections at once (two threads each); when full, the oldest one still in its "
     "handshake, else the client idle longest, makes room"},
    {"client-conn-idle-ms", SL_CLI_UINT, "MS", "60000", NULL, 1, INT32_MAX, 0, W(conn_idle_ms),
     "close a trainer connection that sends nothing this long while it holds no batch (the "
     "client reconnects)"},
    {"share-window", SL_CLI_UINT, "N", "64", NULL, 1, UINT32_MAX, 0, W(share_window),
     "shared passes (`--master`): a job served along with this worker's that has N batches not "
     "yet acknowledged (or whose copies hold a quarter of `--memory-limit`) stops sharing and is "
     "read on its own from then on"},
    {"no-share", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, W(no_share),
     "take no shared passes: serve this worker's job only"},
    {"share-stall-ms", SL_CLI_UINT, "MS", "5000", NULL, 1, INT32_MAX, 0, W(share_stall_ms),
     "shared passes (`--master`): a pass of this worker's job that has not moved for MS (its "
     "trainers take no batches: the queue or memory is full) lets the other jobs' leases on it "
     "go, to be read on their own"},
    {"no-fused", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, W(no_fused),
     "make every batch on the transform threads: no fused path (batches inside one stripe "
     "made straight from it into their frames, transforms on the way, on the reader thread; "
     "docs/WORKER.md \"The fused path\")"},
    {"no-decode-maps", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, W(no_decode_maps),
     "run every transform on the batches: none inside the table reader or the Parquet "
     "source's column readers (per-value transforms of a feature nothing else reads, run on "
     "each stripe's or column chunk's dictionary of distinct values; docs/WORKER.md "
     "\"Transforms at decode\")"},
    {"shm-bytes", SL_CLI_SIZE, "BYTES", NULL, "half of `--memory-limit`, at most 1G", 1, 1ull << 40,
     0, W(shm_bytes),
     "size of the shared-memory frame heap: trainers on this host map it and get each batch "
     "as a descriptor instead of its bytes over the socket (docs/WORKER.md \"Shared memory\"); "
     "frames in it count in `--memory-limit`; when it is full a frame goes over the socket"},
    {"cache-dir", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, 0, W(cache_dir),
     "with `--master`: keep the autocache's files of jobs whose source is in an object store "
     "on this disk (a folder of this process's own is made in DIR and removed at exit; several "
     "workers may share DIR); without it such jobs are computed every epoch (docs/STORAGE.md, "
     "\"The autocache and object stores\")"},
    {"cache-size", SL_CLI_SIZE, "BYTES", "8G", NULL, 1, UINT64_MAX, 0, W(cache_size),
     "with `--cache-dir`: the bytes of cache files this worker keeps; past it the least recently "
     "used are removed (and the master told)"},
    {"no-shm", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, W(no_shm),
     "no shared-memory frame heap: every batch goes over the trainer's socket"},
};

static const sl_cli_group_t worker_group = SL_CLI_OWN_GROUP(wopts);

const sl_cli_cmd_t sl_cli_worker_cmd = {
    .name = "worker",
    .summary = "run a job's pipeline and serve its batches to trainers",
    .synopsis = "sluice worker --job SPEC.json [options]\n"
                "sluice worker --master HOST:PORT [--job-id ID] [options]",
    .about = "Runs the job's pipeline (read, filter, batch, dedup, transform, encode) and serves "
             "the batches to trainer clients. Prints `listening on HOST:PORT` once ready and a "
             "summary at the end. SIGINT/SIGTERM stop it cleanly.",
    .groups = {{&worker_group, 0},
               {&sl_cli_store_read_group, W(store)},
               {&sl_cli_admin_group, W(adm)},
               {&sl_cli_log_group, W(log)}},
};

static int usage_error(const char *fmt, const char *arg)
{
    return sl_cli_usage_error("worker", fmt, arg);
}

/* The host of a HOST:PORT address (the option table checked its form),
 * into buf: printed with the port the process got, port 0 having asked
 * for any. */
static const char *host_of(const char *addr, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", addr);
    char *colon = strrchr(buf, ':');
    if (colon) *colon = '\0';
    return buf;
}

static void print_problems(const char *what, const sl_pipeline_problems_t *p)
{
    fprintf(stderr, "sluice worker: %s: %u problem%s\n", what, p->count, p->count == 1 ? "" : "s");
    for (uint32_t i = 0; i < p->count; i++)
        fprintf(stderr, "  %s\n", p->items[i]);
}

/* The summary's lines about the master: the lease client's counters (m)
 * and the shared passes (served: batches and bytes the server sent to
 * other jobs' trainers). job: the job served, or the one asked for. */
static void print_master_summary(const char *master, const char *job,
                                 const sl_worker_lease_client_stats_t *m, uint64_t served,
                                 uint64_t served_bytes, const char *cache_dir)
{
    printf("  master %s, job %s: leases %" PRIu64 ", splits reported %" PRIu64 " (%" PRIu64
           " done), revoked %" PRIu64 ", reconnects %" PRIu64 "%s\n",
           master, m->job_id[0] ? m->job_id : job, m->leases, m->split_reads, m->splits_done,
           m->revoked, m->reconnects, m->stop ? ", retired by the master" : "");
    printf("  shared passes: %" PRIu64 " leases of other jobs, %" PRIu64
           " batches served to them (%" PRIu64 " bytes), %" PRIu64 " detached, %" PRIu64
           " released\n",
           m->shared_leases, served, served_bytes, m->shares_detached, m->shares_released);
    if (cache_dir)
        printf("  cache directory %s: %" PRIu64 " files held (%" PRIu64 " bytes), %" PRIu64
               " removed for room\n",
               cache_dir, m->cache_files, m->cache_bytes, m->cache_evicted);
}

/* The summary of a worker that registered but never started its job (the
 * master retired it, or a signal came first): all zeros, the same lines
 * as every other worker's, so whoever reads its log finds them. */
static void print_unstarted_summary(const sl_worker_opts_t *o, const char *master, const char *job,
                                    const sl_worker_lease_client_stats_t *m, const char *cache_dir)
{
    sl_worker_stats_t st = {.memory_limit = o->memory_limit};
    sl_worker_print_stats(&st, 0, stdout);
    print_master_summary(master, job ? job : "-", m, 0, 0, cache_dir);
    fflush(stdout);
}

int sl_cli_worker(int argc, char **argv)
{
    worker_args_t args = {0};
    sl_cli_parsed_t parsed;
    if (!sl_cli_parse(&sl_cli_worker_cmd, argc, argv, &args, &parsed)) return parsed.code;
    sl_cli_log_apply("worker", &args.log);
    const char *job_path = args.job, *master = args.master, *job_id = args.job_id;
    const char *admin_addr = args.admin, *secret_file = args.secret_file;
    sl_admin_opts_t ao = sl_cli_admin_opts(&args.adm, admin_addr);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.listen = args.listen;
    o.threads = (uint32_t)args.threads;
    o.memory_limit = args.memory_limit;
    o.max_credits = (uint32_t)args.max_credits;
    o.max_queued = (uint32_t)args.max_queued;
    o.no_fused = args.no_fused;
    o.no_decode_maps = args.no_decode_maps;
    o.shm_bytes = args.shm_bytes;
    o.no_shm = args.no_shm;
    o.store_timeout_ms = (uint32_t)args.store.timeout_ms;
    o.store_max_attempts = (uint32_t)args.store.max_attempts;
    o.worker_id = args.worker_id;
    o.max_clients = (uint32_t)args.max_clients;
    o.client_conn_idle_ms = (int)args.conn_idle_ms;
    bool exit_when_done = args.exit_when_done;
    if (master && job_path)
        return usage_error("%s", "--job and --master exclude each other (a master sends the job)");
    if (!master && job_id) return usage_error("%s", "--job-id needs --master");
    if (!master && args.cache_dir) return usage_error("%s", "--cache-dir needs --master");
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

    char *secret;
    if (sl_cli_server_start("worker", secret_file, &secret) != 0) return 1;
    /* copied by the server and the lease client; wiped at exit */
    o.cluster_secret = secret;
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    sl_worker_t *w = NULL;
    sl_worker_admin_t *admin = NULL;
    sl_worker_lease_prep_t prep = {.fd = -1};
    sl_worker_lease_client_t *msrc = NULL; /* owned by the worker once it starts */
    sl_worker_lease_client_stats_t before = {0};
    sl_err_t rc;
    const char *what = master ? master : job_path;
    if (admin_addr) {
        if ((rc = sl_worker_admin_serve(NULL, NULL, &ao, &admin, &err))) {
            fprintf(stderr, "sluice worker: --admin %s: %s\n", admin_addr, err.msg);
            sl_rpc_secret_free(secret);
            return 1;
        }
        char host[256];
        printf("admin on %s:%u\n", host_of(admin_addr, host, sizeof host),
               (unsigned)sl_worker_admin_port(admin));
        fflush(stdout);
    }
    if (master) {
        char admin_real[300] = "";
        if (admin) {
            char host[256];
            snprintf(admin_real, sizeof admin_real, "%s:%u", host_of(admin_addr, host, sizeof host),
                     (unsigned)sl_worker_admin_port(admin));
        }
        sl_worker_lease_client_opts_t mo = {.master = master,
                                            .worker_id = o.worker_id,
                                            .job_id = job_id,
                                            .admin_address = admin ? admin_real : NULL,
                                            .threads = o.threads,
                                            .cluster_secret = secret,
                                            .share_window = (uint32_t)args.share_window,
                                            .no_share = args.no_share,
                                            .share_stall_ms = (uint32_t)args.share_stall_ms,
                                            .cache_dir = args.cache_dir,
                                            .cache_max_bytes = args.cache_size};
        rc = sl_worker_lease_prep_new(&mo, o.listen, &prep, &err);
        if (rc == SL_OK) {
            char host[256];
            printf("listening on %s:%u\nregistered with master %s as %s; waiting for work\n",
                   host_of(o.listen, host, sizeof host), (unsigned)prep.port, master, o.worker_id);
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
                sl_worker_lease_client_stats(prep.ms, &before);
                print_unstarted_summary(&o, master, job_id, &before, args.cache_dir);
                sl_worker_lease_prep_free(&prep);
                sl_worker_admin_stop(admin);
                sl_rpc_secret_free(secret);
                return 0;
            }
            rc = SL_OK;
        }
        msrc = prep.ms;
        /* what the summary says of a worker the master retires before it
         * starts (its job ended without it) */
        if (prep.ms) sl_worker_lease_client_stats(prep.ms, &before);
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
            print_unstarted_summary(&o, master, job_id, &before, args.cache_dir);
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
        printf("listening on %s:%u\n", host_of(o.listen, host, sizeof host),
               (unsigned)sl_worker_port(w));
    }
    fflush(stdout);
    double t0 = sl_clock_s();
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
    double secs = sl_clock_s() - t0;
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    sl_worker_admin_stop(admin); /* before the worker goes */
    sl_worker_stop(w);           /* under a master: the last SPLIT_READs go out */
    sl_worker_stats(w, &st);
    printf("%s\n", why);
    sl_worker_print_stats(&st, secs, stdout);
    struct sl_store *store = sl_worker_store(w);
    if (store != NULL && sl_store_is_remote(sl_store_root(store))) {
        /* the job's table or dataset is in an object store */
        sl_store_stats_t ss;
        sl_store_stats(store, &ss);
        uint64_t gets = 0;
        for (int b = 0; b <= SL_STORE_LATENCY_BUCKETS; b++)
            gets += ss.latency[SL_STORE_OP_GET][b];
        printf("  store %s: %" PRIu64 " requests (%" PRIu64 " GETs), %" PRIu64 " retries, %" PRIu64
               " failures, %" PRIu64 " bytes read\n",
               sl_store_root(store), ss.requests, gets, ss.retries, ss.failures, ss.bytes_read);
    }
    if (msrc) {
        sl_worker_lease_client_stats_t m;
        sl_worker_lease_client_stats(msrc, &m);
        print_master_summary(master, sl_worker_job_id(w), &m, st.server.shared_batches,
                             st.server.shared_bytes, args.cache_dir);
    }
    fflush(stdout);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_rpc_secret_free(secret);
    return code;
}
