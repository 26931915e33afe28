/* The sluice command-line program: dispatches `sluice <command> ...` to the
 * command implementations in this folder. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/suggest.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const sl_cli_cmd_t *cmd; /* its option table, whose summary the list shows */
    const char *summary;     /* for a command without one table */
} commands[] = {
    {"demo", sl_cli_demo, &sl_cli_demo_cmd, NULL},
    {"table", sl_cli_table, NULL, "create, import, inspect, verify and read feature tables"},
    {"worker", sl_cli_worker, &sl_cli_worker_cmd, NULL},
    {"read", sl_cli_read, &sl_cli_read_cmd, NULL},
    {"submit", sl_cli_submit, &sl_cli_submit_cmd, NULL},
    {"master", sl_cli_master, &sl_cli_master_cmd, NULL},
    {"produce", sl_cli_produce, &sl_cli_produce_cmd, NULL},
    {"jobs", sl_cli_jobs, NULL, "list, show, delete, scale and resubmit a master's jobs"},
    {"parquet", sl_cli_parquet, NULL, "inspect and read Parquet files with sluice's own reader"},
    {"store", sl_cli_store, NULL, "list, stat, read and write objects of S3 or a directory"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: sluice <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name,
                commands[i].cmd != NULL ? commands[i].cmd->summary : commands[i].summary);
    fprintf(out, "  %-10s %s\n", "help",
            "a command's help; --markdown: every option table and the job spec reference");
    fprintf(out, "\n`sluice <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0) return sl_cli_help(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            sl_cli_log_to_stderr(commands[i].name);
            return commands[i].run(argc - 1, argv + 1);
        }
    sl_suggest_t sg;
    sl_suggest_init(&sg, argv[1], strlen(argv[1]));
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        sl_suggest_offer_str(&sg, commands[i].name);
    sl_suggest_offer_str(&sg, "help");
    char hint[160];
    fprintf(stderr, "sluice: unknown command '%s'%s\n", argv[1],
            sl_suggest_hint(&sg, "", hint, sizeof hint));
    usage(stderr);
    return 2;
}
