/* The commands of the sluice program; each takes argv from its own name on
 * and returns the process exit code (0 ok, 1 failure, 2 usage). */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stddef.h>
#include <stdio.h>

int sl_cli_demo(int argc, char **argv);
int sl_cli_table(int argc, char **argv);
int sl_cli_worker(int argc, char **argv);
int sl_cli_read(int argc, char **argv);
int sl_cli_submit(int argc, char **argv);
int sl_cli_master(int argc, char **argv);

/* One option of a command's table: its getopt_long id, name, argument name
 * (NULL: a flag) and help line. */
typedef struct sl_cli_opt {
    int id;
    const char *name;
    const char *arg;
    const char *help;
} sl_cli_opt_t;

/* Print "  --name ARG   help" lines, the left column width wide. */
void sl_cli_print_options(FILE *out, const sl_cli_opt_t *opts, size_t n, int width);

/* Raise this process's open-file limit to its hard limit: a server's
 * connection caps (control, trainer and admin connections) should be what
 * bounds its sockets, not a low default soft limit. Best effort. */
void sl_cli_raise_nofile(void);

/* Write the libraries' log records (common/log.h) to stderr as
 * "sluice <cmd>: <message>" lines. */
void sl_cli_log_to_stderr(const char *cmd);

/* Print "sluice <cmd>: <fmt with arg>" and where to find help on stderr.
 * @return 2, the usage-error exit code. */
int sl_cli_usage_error(const char *cmd, const char *fmt, const char *arg);

#endif
