/* `sluice master`: the DPP master process (src/dpp/master/master.h) with its admin
 * endpoint, and optionally the local executor that turns each job's desired
 * worker count into `sluice worker` processes on this machine. Runs until
 * SIGINT or SIGTERM. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "dpp/master/admin.h"
#include "dpp/master/executor.h"
#include "rpc/auth.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Options are defined once, here; the help text comes from this table. */
static const sl_cli_opt_t mopts[] = {
    {'l', "listen", "ADDR", "control address for workers and trainer clients (host:port; an "
                            "address other than loopback needs --cluster-secret-file)"},
    {'a', "admin", "ADDR", "admin HTTP endpoint (loopback unless told otherwise)"},
    {'s', "state", "DIR", "journal and snapshot (created if missing)"},
    {'t', "token-file", "F",
     "bearer token for mutating admin routes (else env SLUICE_ADMIN_TOKEN; none: they answer "
     "403)"},
    {'L', "lease-timeout-ms", "N", "a worker silent this long loses its splits (10000)"},
    {'e', "executor", "local|none",
     "local: start and stop `sluice worker` processes per job (default none)"},
    {'w', "worker-log-dir", "DIR",
     "with --executor local: each worker's output in DIR/<worker id>.log (DIR must exist); "
     "restarts of workers that keep exiting back off (0.5 s doubling to 30 s)"},
    {'S', "max-split-failures", "N",
     "a split a worker cannot read (corrupt stripe, I/O error) this many times in one epoch, "
     "whichever workers tried, fails its job (on_bad_split \"skip\": is skipped) (3)"},
    {'C', "client-idle-ms", "N",
     "a trainer client with no connection and no commit this long is forgotten with its "
     "commit nonces (600000: 10 min; keep it well above the clients' reconnect window, 30 s)"},
    {'F', "max-fleet-workers", "N",
     "workers of all jobs together; over it, jobs are scaled down in proportion to their "
     "desired counts, never below their min_workers (default 0: no limit)"},
    {'P', "compact-bytes", "N",
     "compact the journal (snapshot, empty journal) once it outgrows N bytes (67108864)"},
    {'X', "cluster-secret-file", "F",
     "the cluster secret (first line of F, 16 bytes at least; else the file named by "
     "$SLUICE_CLUSTER_SECRET_FILE): workers and trainer clients must prove they hold it "
     "(docs/PROTOCOL.md); the local executor passes it on to its workers"},
    {'N', "max-connections", "N",
     "control connections at once (default 1024); when full, the oldest one still in its "
     "handshake makes room"},
    {'H', "handshake-timeout-ms", "N",
     "a control connection must authenticate and REGISTER or ATTACH within this (10000)"},
    {'I', "client-conn-idle-ms", "N",
     "close a trainer client's control connection that sends nothing this long (60000)"},
    {'T', "tls-cert", "F", "serve the admin endpoint over HTTPS with this PEM certificate"},
    {'K', "tls-key", "F", "... and this PEM private key"},
    {'M', "admin-max-connections", "N", "admin connections at once (default 512)"},
    {'O', "admin-timeout-s", "N", "close an admin connection idle this long (default 10)"},
    {'h', "help", NULL, "this help"},
};
#define NUM_MOPTS (sizeof mopts / sizeof mopts[0])

static int usage(void)
{
    fprintf(stderr, "usage: sluice master --listen ADDR --admin ADDR --state DIR [options]\n\n"
                    "options:\n");
    sl_cli_print_options(stderr, mopts, NUM_MOPTS, 30);
    return 2;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v == 0 || v == ULLONG_MAX) return false;
    *out = v;
    return true;
}

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

/* Make the executor match the desired counts; jobs that finished or left
 * the master get no workers. */
static void drive_executor(sl_master_t *m, sl_master_executor_t *ex)
{
    sl_master_desired_t d[64];
    uint32_t n = sl_master_desired(m, d, 64);
    if (n > 64) n = 64;
    sl_error_t err = {0};
    for (uint32_t i = 0; i < n; i++) {
        /* fair share of --max-fleet-workers; none for a job that ended */
        uint32_t want = d[i].finished || d[i].failed ? 0 : d[i].granted;
        if (sl_master_executor_scale(ex, d[i].job_id, want, NULL, NULL, &err) != SL_OK)
            fprintf(stderr, "sluice master: executor: job %s: %s\n", d[i].job_id, err.msg);
    }
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    sl_master_report_executor(m, &st);
    sl_master_executor_worker_t w[64];
    uint32_t nw = sl_master_executor_list(ex, NULL, w, 64);
    for (uint32_t k = 0; k < nw && k < 64; k++) {
        bool known = false;
        for (uint32_t i = 0; i < n; i++)
            known = known || strcmp(d[i].job_id, w[k].job_id) == 0;
        if (!known) sl_master_executor_scale(ex, w[k].job_id, 0, NULL, NULL, &err);
    }
}

int sl_cli_master(int argc, char **argv)
{
    struct option lo[NUM_MOPTS + 1];
    for (size_t i = 0; i < NUM_MOPTS; i++)
        lo[i] = (struct option){mopts[i].name, mopts[i].arg ? required_argument : no_argument,
                                NULL, mopts[i].id};
    lo[NUM_MOPTS] = (struct option){0, 0, 0, 0};
    const char *listen = NULL, *admin = NULL, *state = NULL, *token_file = NULL, *log_dir = NULL;
    const char *executor = "none", *secret_file = NULL;
    uint64_t lease_ms = 10000, fleet = 0, client_idle_ms = 600000, split_failures = 3;
    uint64_t max_conns = 0, handshake_ms = 0, conn_idle_ms = 0, compact = 0;
    sl_admin_opts_t ao = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'a': admin = optarg; break;
        case 's': state = optarg; break;
        case 't': token_file = optarg; break;
        case 'e': executor = optarg; break;
        case 'w': log_dir = optarg; break;
        case 'X': secret_file = optarg; break;
        case 'T': ao.tls_cert_file = optarg; break;
        case 'K': ao.tls_key_file = optarg; break;
        case 'N':
        case 'H':
        case 'I':
        case 'M':
        case 'O': {
            uint64_t v;
            if (!parse_u64(optarg, &v) || v > UINT32_MAX) {
                fprintf(stderr, "sluice master: --%s '%s': a positive integer\n",
                        c == 'N'   ? "max-connections"
                        : c == 'H' ? "handshake-timeout-ms"
                        : c == 'I' ? "client-conn-idle-ms"
                        : c == 'M' ? "admin-max-connections"
                                   : "admin-timeout-s",
                        optarg);
                return 2;
            }
            if (c == 'N') max_conns = v;
            if (c == 'H') handshake_ms = v;
            if (c == 'I') conn_idle_ms = v;
            if (c == 'M') ao.max_connections = (uint32_t)v;
            if (c == 'O') ao.timeout_s = (uint32_t)v;
            break;
        }
        case 'L':
            if (!parse_u64(optarg, &lease_ms)) {
                fprintf(stderr, "sluice master: --lease-timeout-ms '%s': a positive integer\n",
                        optarg);
                return 2;
            }
            break;
        case 'C':
            if (!parse_u64(optarg, &client_idle_ms)) {
                fprintf(stderr, "sluice master: --client-idle-ms '%s': a positive integer\n",
                        optarg);
                return 2;
            }
            break;
        case 'P':
            if (!parse_u64(optarg, &compact)) {
                fprintf(stderr, "sluice master: --compact-bytes '%s': a positive integer\n",
                        optarg);
                return 2;
            }
            break;
        case 'S':
            if (!parse_u64(optarg, &split_failures) || split_failures > 65535) {
                fprintf(stderr, "sluice master: --max-split-failures '%s': 1..65535\n", optarg);
                return 2;
            }
            break;
        case 'F': {
            char *end;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || *optarg == '-' || v > UINT32_MAX) {
                fprintf(stderr, "sluice master: --max-fleet-workers '%s': 0 (no limit) or a count\n",
                        optarg);
                return 2;
            }
            fleet = v;
            break;
        }
        default: return usage();
        }
    }
    if (optind != argc || listen == NULL || admin == NULL || state == NULL) return usage();
    bool local = strcmp(executor, "local") == 0;
    if (!local && strcmp(executor, "none") != 0) {
        fprintf(stderr, "sluice master: --executor '%s': local or none\n", executor);
        return 2;
    }
    sl_error_t err = {0};
    /* Refused before anything starts: a worker log directory that is not
     * there would otherwise fail every spawn. */
    if (log_dir != NULL && !local) {
        fprintf(stderr, "sluice master: --worker-log-dir needs --executor local\n");
        return 2;
    }
    if (log_dir != NULL && sl_master_executor_local_check_log_dir(log_dir, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        return 2;
    }
    char *token = NULL, *secret = NULL;
    if (sl_admin_token_load(token_file, "SLUICE_ADMIN_TOKEN", &token, &err) != SL_OK) {
        fprintf(stderr, "sluice master: token: %s\n", err.msg);
        return 1;
    }
    if (sl_rpc_secret_load(secret_file, &secret, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        free(token);
        return 1;
    }
    sl_cli_raise_nofile();
    if (access(state, F_OK) != 0 && mkdir(state, 0755) != 0) {
        fprintf(stderr, "sluice master: --state %s: cannot create: %m\n", state);
        free(token);
        sl_rpc_secret_free(secret);
        return 1;
    }
    sl_master_opts_t o = {.listen = listen,
                          .state_dir = state,
                          .lease_timeout_ms = lease_ms,
                          .max_fleet_workers = (uint32_t)fleet,
                          .client_idle_ms = client_idle_ms,
                          .max_split_failures = (uint32_t)split_failures,
                          .max_connections = (uint32_t)max_conns,
                          .cluster_secret = secret,
                          .handshake_timeout_ms = handshake_ms,
                          .client_conn_idle_ms = conn_idle_ms,
                          .compact_bytes = compact};
    sl_master_t *m = NULL;
    if (sl_master_start(&o, &m, &err) != SL_OK) {
        fprintf(stderr, "sluice master: %s\n", err.msg);
        free(token);
        sl_rpc_secret_free(secret);
        return 1;
    }
    bool has_secret = secret != NULL;
    sl_rpc_secret_free(secret); /* the master keeps its own copy */
    sl_admin_t *ad = NULL;
    ao.address = admin;
    ao.token = token;
    if (sl_master_admin_serve(m, &ao, &ad, &err) != SL_OK) {
        fprintf(stderr, "sluice master: --admin %s: %s\n", admin, err.msg);
        sl_master_stop(m);
        free(token);
        return 1;
    }
    sl_master_executor_t *ex = NULL;
    if (local) {
        char bin[PATH_MAX];
        self_path(bin, sizeof bin);
        /* Workers prove the secret to this master (and to their trainers). */
        const char *extra[] = {"--cluster-secret-file", secret_file, NULL};
        sl_master_executor_local_opts_t eo = {.binary = bin,
                                     .master = sl_master_address(m),
                                     .log_dir = log_dir,
                                     .extra_args = secret_file ? extra : NULL};
        if (sl_master_executor_local_new(&eo, &ex, &err) != SL_OK) {
            fprintf(stderr, "sluice master: executor: %s\n", err.msg);
            sl_admin_stop(ad);
            sl_master_stop(m);
            free(token);
            return 1;
        }
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
    free(token);
    return 0;
}
