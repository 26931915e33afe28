/* Private to the `sluice table` command (table.c, table_show.c): the read
 * side's subcommands and the small helpers both halves use. */
#ifndef SLUICE_CLI_TABLE_CLI_H
#define SLUICE_CLI_TABLE_CLI_H

#include <stdint.h>

#include "common/clock.h"
#include "common/mem.h"
#include "common/parse.h"

/* Each takes argv from the subcommand's name on; returns the exit code. */
int tcli_inspect(int argc, char **argv);
int tcli_verify(int argc, char **argv);
int tcli_cat(int argc, char **argv);

/* Print "sluice table CMD: <fmt with arg>" and a pointer to --help to
 * stderr. @return 2 (the usage-error exit code). */
int tcli_usage_error(const char *cmd, const char *fmt, const char *arg);

#endif
