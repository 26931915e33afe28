/* Private to the `sluice table` command (table.c, table_show.c): the read
 * side's subcommands, which table.c dispatches to. */
#ifndef SLUICE_CLI_TABLE_CLI_H
#define SLUICE_CLI_TABLE_CLI_H

#include <stdint.h>

#include "common/clock.h"
#include "common/mem.h"

/* Each takes argv from the subcommand's name on; returns the exit code. */
int tcli_inspect(int argc, char **argv);
int tcli_verify(int argc, char **argv);
int tcli_cat(int argc, char **argv);

#endif
