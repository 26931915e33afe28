/* The commands of the sluice program; each takes argv from its own name on
 * and returns the process exit code (0 ok, 1 failure, 2 usage). */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

int sl_cli_demo(int argc, char **argv);
int sl_cli_table(int argc, char **argv);
int sl_cli_worker(int argc, char **argv);
int sl_cli_read(int argc, char **argv);
int sl_cli_submit(int argc, char **argv);
int sl_cli_master(int argc, char **argv);

#endif
