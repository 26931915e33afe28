/* The sluice command-line program: dispatches `sluice <command> ...` to the
 * command implementations in this folder. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"demo", sl_cli_demo, "deduplicate generated session batches and print the figures"},
    {"table", sl_cli_table, "create, import, inspect, verify and read feature tables"},
    {"worker", sl_cli_worker, "run a job's pipeline and serve its batches to trainers"},
    {"read", sl_cli_read, "receive batches from a DPP worker as a trainer would"},
    {"submit", sl_cli_submit, "submit a job to a DPP master through its admin endpoint"},
    {"master", sl_cli_master, "run the DPP master: leases splits to workers, commits batches"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: sluice <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`sluice <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            sl_cli_log_to_stderr(commands[i].name);
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "sluice: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
