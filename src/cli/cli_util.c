/* Helpers shared by the commands of the sluice program: the options of the
 * admin endpoint that master and worker both serve, the open-file limit and
 * the log handler. */
#include "cli.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

#include "common/log.h"

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

void sl_cli_raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
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

sl_admin_opts_t sl_cli_admin_opts(const sl_cli_admin_args_t *adm, const char *address)
{
    return (sl_admin_opts_t){.address = address,
                             .tls_cert_file = adm->tls_cert,
                             .tls_key_file = adm->tls_key,
                             .max_connections = (uint32_t)adm->max_connections,
                             .timeout_s = (uint32_t)adm->timeout_s};
}
