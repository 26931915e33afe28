/* `sluice master`: the DPP master process (src/dpp/master/process/master.h) with its admin
 * endpoint, and optionally an executor that turns each job's granted
 * worker count into workers: `sluice worker` processes on this machine
 * (local), or the replicas of a Kubernetes Deployment (kubernetes). Runs
 * until SIGINT or SIGTERM. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/executor/executor.h"
#include "rpc/auth.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

typedef struct master_args {
    const char *listen, *admin, *state, *token_file, *executor, *log_dir, *secret_file;
    const char *k8s_ns, *k8s_deployment, *k8s_api, *k8s_sa, *cache_dir;
    uint64_t lease_ms, split_failures, client_idle_ms, fleet, compact, max_conns, handshake_ms,
        conn_idle_ms, kafka_ahead, kafka_watch_ms, cache_size, history_ms, cache_wait_ms;
    sl_cli_admin_args_t adm;
    sl_cli_store_read_args_t store;
    sl_cli_log_args_t log;
} master_args_t;

#define M(field) offsetof(master_args_t, field)

/* Options are defined once, here (options.h): parsing, --help and the
 * docs' table (docs/ADMIN.md) come from this table. */
static const sl_cli_opt_t mopts[] = {
    {"listen", SL_CLI_ADDR, "ADDR", NULL, NULL, 0, 0, SL_CLI_REQUIRED, M(listen),
     "control address for workers and trainer clients (an address other than loopback needs "
     "--cluster-secret-file)"},
    {"admin", SL_CLI_ADDR, "ADDR", NULL, NULL, 0, 0, SL_CLI_REQUIRED, M(admin),
     "the admin HTTP endpoint (docs/ADMIN.md)"},
    {"state", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, SL_CLI_REQUIRED, M(state),
     "journal and snapshot (created if missing)"},
    {"token-file", SL_CLI_PATH, "F", NULL, "`$SLUICE_ADMIN_TOKEN`", 0, 0, 0, M(token_file),
     "bearer token of the mutating admin routes (none: they answer 403)"},
    {"lease-timeout-ms", SL_CLI_UINT, "N", "10000", NULL, 1, UINT32_MAX, 0, M(lease_ms),
     "a worker silent this long loses its leases"},
    {"executor", SL_CLI_ENUM, "local|kubernetes|none", "none", NULL, 0, 0, 0, M(executor),
     "local: start and stop `sluice worker` processes per job (\"Who starts the workers\"); "
     "kubernetes: set the replicas of the workers' Deployment (--k8s-deployment) to the jobs' "
     "granted workers (\"The Kubernetes executor\")"},
    {"k8s-deployment", SL_CLI_STRING, "NAME", NULL, NULL, 0, 0, 0, M(k8s_deployment),
     "with --executor kubernetes (required there): the Deployment of workers whose scale the "
     "master sets"},
    {"k8s-namespace", SL_CLI_STRING, "NS", NULL, "the service account's namespace", 0, 0, 0,
     M(k8s_ns), "with --executor kubernetes: the Deployment's namespace"},
    {"k8s-api", SL_CLI_STRING, "URL", NULL, "the pod's API server", 0, 0, 0, M(k8s_api),
     "with --executor kubernetes: the API server, https only (the pod's: https://"
     "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)"},
    {"k8s-serviceaccount", SL_CLI_PATH, "DIR", NULL,
     "`/var/run/secrets/kubernetes.io/serviceaccount`", 0, 0, 0, M(k8s_sa),
     "with --executor kubernetes: the directory of the service account's token (read again for "
     "every request), ca.crt (the API server's authority) and namespace"},
    {"worker-log-dir", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, 0, M(log_dir),
     "with --executor local: each worker's output in DIR/<worker id>.log; a directory that does "
     "not exist or cannot be written is refused at start (exit 2)"},
    {"max-split-failures", SL_CLI_UINT, "N", "3", NULL, 1, 65535, 0, M(split_failures),
     "a split a worker cannot read (corrupt stripe, I/O error) this many times in one epoch, "
     "whichever workers tried, fails its job (on_bad_split \"skip\": is skipped)"},
    {"client-idle-ms", SL_CLI_UINT, "N", "600000", NULL, 1, UINT32_MAX, 0, M(client_idle_ms),
     "a trainer client with no connection and no commit this long is forgotten with its "
     "remembered commit nonces (docs/DESIGN.md, \"Client records\"); keep it well above the "
     "clients' reconnect window (30 s)"},
    {"max-fleet-workers", SL_CLI_UINT, "N", "0", NULL, 0, UINT32_MAX, 0, M(fleet),
     "workers of all jobs together (0: no limit); over it, jobs are scaled down in proportion to "
     "their desired counts, never below their min_workers"},
    {"compact-bytes", SL_CLI_SIZE, "N", "64M", NULL, 1, UINT64_MAX, 0, M(compact),
     "compact the journal (snapshot, empty journal) once it outgrows N bytes"},
    {"cluster-secret-file", SL_CLI_PATH, "F", NULL, "`$SLUICE_CLUSTER_SECRET_FILE`", 0, 0, 0,
     M(secret_file),
     "the cluster secret (the first line of F, 16 bytes at least) workers and trainer clients "
     "must prove they hold (docs/PROTOCOL.md, \"Authentication\"); required for a --listen "
     "other than loopback; the local executor passes it on to its workers"},
    {"max-connections", SL_CLI_UINT, "N", "1024", NULL, 1, UINT32_MAX, 0, M(max_conns),
     "control connections at once; when full, the oldest one still in its handshake makes room"},
    {"handshake-timeout-ms", SL_CLI_UINT, "N", "10000", NULL, 1, UINT32_MAX, 0, M(handshake_ms),
     "a control connection must authenticate and REGISTER or ATTACH within this"},
    {"client-conn-idle-ms", SL_CLI_UINT, "N", "60000", NULL, 1, UINT32_MAX, 0, M(conn_idle_ms),
     "a trainer client's control connection that sends nothing this long is closed (the client "
     "reconnects; it reports every second)"},
    {"kafka-chunks-ahead", SL_CLI_UINT, "N", "4", NULL, 1, 1024, 0, M(kafka_ahead),
     "a Kafka stream's partition has at most N chunks not done at once: up to N workers read its "
     "backlog together (docs/KAFKA.md, \"Chunks in the master\")"},
    {"kafka-watch-ms", SL_CLI_UINT, "N", "2000", NULL, 100, 3600000, 0, M(kafka_watch_ms),
     "how often the master asks the brokers about its Kafka streams: partitions added, high "
     "watermarks (lag), the consumer-group mirror (docs/KAFKA.md, \"Streams under a master\")"},
    {"history-every-ms", SL_CLI_UINT, "N", "10000", NULL, 100, 3600000, 0, M(history_ms),
     "a point of each job's history (samples/s, trainer wait, worker busy, dedup factor, workers) "
     "this often; the last 360 points are kept (an hour at the default) and served in GET "
     "/jobs/{id} and on the status page (docs/ADMIN.md, \"History\")"},
    {"cache-dir", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, 0, M(cache_dir),
     "the autocache's directory (created; the workers must see it at the same path: one machine "
     "or a shared file system): jobs whose first epoch shows that reading a cached output is "
     "faster than computing it read later epochs from it (docs/JOBS.md, \"Autocache\"); none: "
     "no autocache"},
    {"cache-size", SL_CLI_SIZE, "N", "8G", NULL, 1, UINT64_MAX, 0, M(cache_size),
     "with --cache-dir: the cache files' bytes; past it the least recently used are removed"},
    {"cache-wait-ms", SL_CLI_UINT, "MS", "2000", NULL, 1, 86400000, 0, M(cache_wait_ms),
     "with --cache-dir, a job whose source is in an object store (its cache files on the "
     "workers' disks): from an epoch's start, a split cached on another worker waits this long "
     "for it before an idle worker reads it from the store again (docs/STORAGE.md, \"The "
     "autocache and object stores\")"},
};

static const sl_cli_group_t master_group = SL_CLI_OWN_GROUP(mopts);

const sl_cli_cmd_t sl_cli_master_cmd = {
    .name = "master",
    .summary = "run the DPP master: leases splits to workers, commits batches",
    .synopsis = "sluice master --listen ADDR --admin ADDR --state DIR [options]",
    .about = "Runs the DPP master with its admin endpoint (and, with --executor local, the "
             "jobs' workers as processes of this machine; with --executor kubernetes, the "
             "replicas of the workers' Deployment) until SIGINT or SIGTERM.",
    .groups = {{&master_group, 0},
               {&sl_cli_store_read_group, M(store)},
               {&sl_cli_admin_group, M(adm)},
               {&sl_cli_log_group, M(log)}},
};

/* Path of this program, for the executor's worker processes. */
static void self_path(char *out, size_t cap)
{
    const char *env = getenv("SLUICE_BINARY");
    if (env != NULL && *env != '\0') {
        snprintf(out, cap, "%s", env);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    out[n > 0 ? (size_t)n : 0] = '\0';
}

/* Make the executor match the granted counts (the autoscaler's decisions
 * within --max-fleet-workers); jobs that finished or left the master get
 * no workers. */
static void drive_executor(sl_master_t *m, sl_master_executor_t *ex)
{
    sl_master_desired_t d[64];
    uint32_t n = sl_master_desired(m, d, 64);
    if (n > 64) n = 64;
    sl_master_executor_target_t t[64];
    for (uint32_t i = 0; i < n; i++)
        t[i] = (sl_master_executor_target_t){
            .job_id = d[i].job_id, .workers = d[i].finished || d[i].failed ? 0 : d[i].granted};
    sl_error_t err = {0};
    if (sl_master_executor_apply(ex, t, n, NULL, NULL, &err) != SL_OK)
        fprintf(stderr, "sluice master: executor: %s\n", err.msg);
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    sl_master_report_executor(m, &st);
}

/* The executor --executor names (*ex NULL for none), its workers
 * reaching the master m. */
static sl_err_t executor_new(const master_args_t *args, sl_master_t *m, sl_master_executor_t **ex,
                             sl_error_t *err)
{
    *ex = NULL;
    if (strcmp(args->executor, "local") == 0) {
        char bin[PATH_MAX];
        self_path(bin, sizeof bin);
        /* Workers log as this master does, and prove the secret to it (and
         * to their trainers). */
        const char *extra[] = {"--log-level",
                               args->log.level,
                               "--log-format",
                               args->log.format,
                               "--cluster-secret-file",
                               args->secret_file,
                               NULL};
        if (args->secret_file == NULL) extra[4] = NULL;
        sl_master_executor_local_opts_t eo = {.binary = bin,
                                              .master = sl_master_address(m),
                                              .log_dir = args->log_dir,
                                              .extra_args = extra};
        if (sl_master_executor_local_new(&eo, ex, err) != SL_OK)
            return sl_error_prefix(err, "executor: ");
    } else if (strcmp(args->executor, "kubernetes") == 0) {
        /* Within --max-fleet-workers, as the jobs' granted counts are. */
        sl_master_executor_k8s_opts_t ko = {.deployment = args->k8s_deployment,
                                            .ns = args->k8s_ns,
                                            .api_url = args->k8s_api,
                                            .serviceaccount_dir = args->k8s_sa,
                                            .max_replicas = (uint32_t)args->fleet};
        if (sl_master_executor_k8s_new(&ko, ex, err) != SL_OK)
            return sl_error_prefix(err, "--executor kubernetes: ");
    }
    return SL_OK;
}

int sl_cli_master(int argc, char **argv)
{
    master_args_t args = {0};
    sl_cli_parsed_t parsed;
    if (!sl_cli_parse(&sl_cli_master_cmd, argc, argv, &args, &parsed)) return parsed.code;
    sl_cli_log_apply("master", &args.log);
    const char *listen = args.listen, *admin = args.admin, *state = args.state;
    const char *token_file = args.token_file, *log_dir = args.log_dir;
    const char *executor = args.executor, *secret_file = args.secret_file;
    sl_admin_opts_t ao = sl_cli_admin_opts(&args.adm, admin);
    bool local = strcmp(executor, "local") == 0, k8s = strcmp(executor, "kubernetes") == 0;
    sl_error_t err = {0};
    if (!k8s && (args.k8s_ns || args.k8s_deployment || args.k8s_api || args.k8s_sa))
        return sl_cli_usage_error("master", "%s", "the --k8s-* options need --executor kubernetes");
    if (k8s && args.k8s_deployment == NULL)
        return sl_cli_usage_error("master", "%s", "--executor kubernetes needs --k8s-deployment");
    /* Refused before anything starts: a worker log directory that is not
     * there would otherwise fail every spawn. */
    if (log_dir != NULL && !local)
        return sl_cli_usage_error("master", "%s", "--worker-log-dir needs --executor local");
    if (log_dir != NULL && sl_master_executor_local_check_log_dir(log_dir, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        return 2;
    }
    char *token = NULL, *secret = NULL;
    if (sl_admin_token_load(token_file, "SLUICE_ADMIN_TOKEN", &token, &err) != SL_OK) {
        fprintf(stderr, "sluice master: token: %s\n", err.msg);
        return 1;
    }
    if (sl_cli_server_start("master", secret_file, &secret) != 0) {
        sl_admin_token_free(token);
        return 1;
    }
    if (access(state, F_OK) != 0 && mkdir(state, 0755) != 0) {
        fprintf(stderr, "sluice master: --state %s: cannot create: %m\n", state);
        sl_admin_token_free(token);
        sl_rpc_secret_free(secret);
        return 1;
    }
    sl_master_opts_t o = {.listen = listen,
                          .state_dir = state,
                          .lease_timeout_ms = args.lease_ms,
                          .max_fleet_workers = (uint32_t)args.fleet,
                          .client_idle_ms = args.client_idle_ms,
                          .max_split_failures = (uint32_t)args.split_failures,
                          .max_connections = (uint32_t)args.max_conns,
                          .cluster_secret = secret,
                          .handshake_timeout_ms = args.handshake_ms,
                          .client_conn_idle_ms = args.conn_idle_ms,
                          .compact_bytes = args.compact,
                          .kafka_chunks_ahead = (uint32_t)args.kafka_ahead,
                          .kafka_watch_ms = args.kafka_watch_ms,
                          .history_every_ms = args.history_ms,
                          .cache_dir = args.cache_dir,
                          .cache_max_bytes = args.cache_size,
                          .cache_wait_ms = args.cache_wait_ms,
                          .store_timeout_ms = (uint32_t)args.store.timeout_ms,
                          .store_max_attempts = (uint32_t)args.store.max_attempts};
    sl_master_t *m = NULL;
    if (sl_master_start(&o, &m, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        sl_admin_token_free(token);
        sl_rpc_secret_free(secret);
        return 1;
    }
    bool has_secret = secret != NULL;
    sl_rpc_secret_free(secret); /* the master keeps its own copy */
    sl_admin_t *ad = NULL;
    ao.token = token;
    if (sl_master_admin_serve(m, &ao, &ad, &err) != SL_OK) {
        fprintf(stderr, "sluice master: --admin %s: %s\n", admin, err.msg);
        sl_master_stop(m);
        sl_admin_token_free(token);
        return 1;
    }
    sl_master_executor_t *ex = NULL;
    if (executor_new(&args, m, &ex, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        sl_admin_stop(ad);
        sl_master_stop(m);
        sl_admin_token_free(token);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    printf("sluice master: control %s%s, admin %s%s (port %u), state %s, executor %s%s\n",
           sl_master_address(m), has_secret ? " (cluster secret required)" : "",
           ao.tls_cert_file ? "https://" : "", admin, sl_admin_port(ad), state, executor,
           token ? "" : " (no admin token: mutating routes refused)");
    fflush(stdout);
    while (!g_stop) {
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        if (ex != NULL) drive_executor(m, ex);
    }
    sl_master_executor_destroy(ex);
    sl_admin_stop(ad);
    sl_master_stop(m);
    sl_admin_token_free(token);
    return 0;
}
