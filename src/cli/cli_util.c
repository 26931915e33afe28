/* Helpers shared by the commands of the sluice program: the options of the
 * admin endpoint that master and worker both serve, and the open-file
 * limit. */
#include "cli.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

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
     "admin connections at once; beyond it, new connections wait in the listen backlog until "
     "one closes"},
    {"admin-timeout-s", SL_CLI_UINT, "S", "10", NULL, 1, UINT32_MAX, 0, ADMIN(timeout_s),
     "an admin connection that sends nothing for S seconds is closed"},
};

const sl_cli_group_t sl_cli_admin_group = {"admin endpoint", "admin endpoint options", admin_opts,
                                           sizeof admin_opts / sizeof admin_opts[0]};
