/* Private to the `sluice table` command (table.c, table_show.c): the read
 * side's subcommands and the small helpers both halves use. */
#ifndef SLUICE_CLI_TABLE_CLI_H
#define SLUICE_CLI_TABLE_CLI_H

#include <stdint.h>

/* Each takes argv from the subcommand's name on; returns the exit code. */
int tcli_inspect(int argc, char **argv);
int tcli_verify(int argc, char **argv);
int tcli_cat(int argc, char **argv);

/* Print "sluice table CMD: <fmt with arg>" and a pointer to --help to
 * stderr. @return 2 (the usage-error exit code). */
int tcli_usage_error(const char *cmd, const char *fmt, const char *arg);

/* A decimal unsigned integer <= max. @return 0, or -1 when s is not one. */
int tcli_parse_u64(const char *s, uint64_t max, uint64_t *out);

#endif
