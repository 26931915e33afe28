/* Helpers shared by the commands of the sluice program: the options of the
 * admin endpoint that master and worker both serve, their process start,
 * the log handler and the lookup of a group's commands. */
#include "cli.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

#include "common/log.h"
#include "common/suggest.h"
#include "rpc/auth.h"
#include "store/store.h"

/* "sluice <cmd>: <message>" on stderr, as the libraries' records read to
 * a person; one write per record, so concurrent lines do not mix. */
static void log_stderr(void *ctx, const sl_log_record_t *rec)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "sluice %s: ", (const char *)ctx);
    if (n < 0 || (size_t)n >= sizeof line) n = 0;
    size_t len = (size_t)n + sl_log_format(rec, SL_LOG_TEXT, line + n, sizeof line - (size_t)n - 1);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}

void sl_cli_log_to_stderr(const char *cmd)
{
    static char name[32];
    snprintf(name, sizeof name, "%s", cmd);
    sl_log_set_handler(log_stderr, name);
}

static void verbs_usage(FILE *out, const char *group, const char *synopsis,
                        const sl_cli_verb_t *verbs, size_t n)
{
    fprintf(out, "usage: sluice %s <command> %s\n\ncommands:\n", group, synopsis);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-10s %s\n", verbs[i].name, verbs[i].cmd->summary);
    fprintf(out, "\n`sluice %s <command> --help` describes a command's options.\n", group);
}

int sl_cli_verb_find(const char *group, const char *synopsis, const sl_cli_verb_t *verbs, size_t n,
                     int argc, char **argv, int *code)
{
    if (argc < 2) {
        verbs_usage(stderr, group, synopsis, verbs, n);
        *code = 2;
        return -1;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        verbs_usage(stdout, group, synopsis, verbs, n);
        *code = 0;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, verbs[i].name) == 0) return (int)i;
    sl_suggest_t sg;
    sl_suggest_init(&sg, name, strlen(name));
    for (size_t i = 0; i < n; i++)
        sl_suggest_offer_str(&sg, verbs[i].name);
    char hint[160];
    fprintf(stderr, "sluice %s: unknown command '%s'%s\n", group, name,
            sl_suggest_hint(&sg, "", hint, sizeof hint));
    verbs_usage(stderr, group, synopsis, verbs, n);
    *code = 2;
    return -1;
}

int sl_cli_server_start(const char *cmd, const char *secret_file, char **secret)
{
    sl_error_t err = {0};
    *secret = NULL;
    if (sl_rpc_secret_load(secret_file, secret, &err) != SL_OK) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err.msg);
        return 1;
    }
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
    return 0;
}

#define ADMIN(field) offsetof(sl_cli_admin_args_t, field)

static const sl_cli_opt_t admin_opts[] = {
    {"tls-cert", SL_CLI_FILE, "FILE", NULL, NULL, 0, 0, 0, ADMIN(tls_cert),
     "serve the admin endpoint over HTTPS with this PEM certificate (chain)"},
    {"tls-key", SL_CLI_FILE, "FILE", NULL, NULL, 0, 0, 0, ADMIN(tls_key),
     "... and its PEM private key (not encrypted)"},
    {"admin-max-connections", SL_CLI_UINT, "N", "512", NULL, 1, UINT32_MAX, 0,
     ADMIN(max_connections),
     "admin connections at once; a new one beyond it closes the connection idle longest (none "
     "idle: the new one is refused), so probes are never kept out"},
    {"admin-timeout-s", SL_CLI_UINT, "S", "10", NULL, 1, UINT32_MAX, 0, ADMIN(timeout_s),
     "an admin connection that sends nothing for S seconds is closed"},
};

const sl_cli_group_t sl_cli_admin_group = {"admin endpoint", "admin endpoint options", admin_opts,
                                           sizeof admin_opts / sizeof admin_opts[0]};

#define STORE_READ(field) offsetof(sl_cli_store_read_args_t, field)

/* One definition for every command that reads a table or dataset through
 * an object store, so that the worker, the master and the table commands
 * bound a hung object the same way (docs/STORAGE.md). */
static const sl_cli_opt_t store_read_opts[] = {
    {"store-timeout-ms", SL_CLI_UINT, "MS", "60000", NULL, 1, UINT32_MAX, 0, STORE_READ(timeout_ms),
     "one attempt of an object store request reading an s3:// table or Parquet dataset "
     "(transfer included); a request that takes longer fails and is retried as the store's "
     "other transient failures are (docs/STORAGE.md)"},
    {"store-max-attempts", SL_CLI_UINT, "N", "5", NULL, 1, 100, 0, STORE_READ(max_attempts),
     "tries of one object store request reading an s3:// table or Parquet dataset that fails in "
     "a retryable way (5xx, 429, SlowDown, a reset, a timeout), with capped exponential backoff "
     "between them"},
};

const sl_cli_group_t sl_cli_store_read_group = {"store reads", "object store read options",
                                                store_read_opts,
                                                sizeof store_read_opts / sizeof store_read_opts[0]};

sl_store_opts_t sl_cli_store_read_opts(const sl_cli_store_read_args_t *sr)
{
    return (sl_store_opts_t){.request_timeout_ms = (uint32_t)sr->timeout_ms,
                             .max_attempts = (uint32_t)sr->max_attempts};
}

sl_admin_opts_t sl_cli_admin_opts(const sl_cli_admin_args_t *adm, const char *address)
{
    return (sl_admin_opts_t){.address = address,
                             .tls_cert_file = adm->tls_cert,
                             .tls_key_file = adm->tls_key,
                             .max_connections = (uint32_t)adm->max_connections,
                             .timeout_s = (uint32_t)adm->timeout_s};
}
