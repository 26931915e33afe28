/* The option tables of the sluice commands. Each command's options are
 * defined once, in a table that parses and validates them, holds their
 * defaults and prints both the command's --help and its Markdown reference
 * (`sluice help --markdown`, the generated sections of the docs), so the
 * docs cannot drift from the code (docs/DESIGN.md, CONVENTIONS rule 7).
 *
 * A command keeps its values in a struct of its own; each option names
 * the offset of its value there. Options shared by several commands (the
 * admin endpoint's, the table writer's) are a group that each command
 * uses at the offset of a struct of the group's values. */
#ifndef SLUICE_CLI_OPTIONS_H
#define SLUICE_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum sl_cli_type {
    SL_CLI_FLAG,   /* no value -> bool true */
    SL_CLI_STRING, /* a non-empty string -> const char * */
    SL_CLI_PATH,   /* a path the command opens itself (its loader names problems) -> const char * */
    SL_CLI_FILE,   /* a readable file, checked at parse -> const char * */
    SL_CLI_UINT,   /* a decimal integer in [min, max] -> uint64_t */
    SL_CLI_SIZE,   /* bytes: digits, an optional K, M or G and an optional B; in [min, max] ->
                      uint64_t */
    SL_CLI_ADDR,   /* HOST:PORT (HOST may be empty or [v6]), a port in [0, 65535] -> const char * */
    SL_CLI_ENUM    /* one of the '|'-separated choices in arg -> const char * */
} sl_cli_type_t;

#define SL_CLI_REQUIRED 1u /* must be given */
#define SL_CLI_REPEAT 2u   /* may be given again and again: values collect in an sl_cli_list_t */

/* Repeated values (SL_CLI_REPEAT) and positional arguments, in order;
 * items point into argv (or the table). */
typedef struct sl_cli_list {
    const char **items;
    uint32_t count;
    uint32_t cap; /* room in items (the parser's) */
} sl_cli_list_t;

typedef struct sl_cli_opt {
    const char *name; /* the long name, without "--" */
    sl_cli_type_t type;
    const char *arg; /* the value's name ("HOST:PORT"); SL_CLI_ENUM: the choices, "local|none" */
    const char *
        def; /* the default as written on a command line, applied before argv is read; NULL: none */
    const char *def_doc; /* the default in words, when the command works it out ("online cores") */
    uint64_t min, max;   /* SL_CLI_UINT, SL_CLI_SIZE */
    unsigned flags;      /* SL_CLI_REQUIRED, SL_CLI_REPEAT */
    size_t offset;       /* of the value in the group's struct */
    const char *help;
} sl_cli_opt_t;

typedef struct sl_cli_group {
    const char *name;  /* a shared group's own section ("admin endpoint"), else NULL */
    const char *title; /* its heading in --help ("admin endpoint options"), NULL: "options" */
    const sl_cli_opt_t *opts;
    size_t count;
} sl_cli_group_t;

/* The group of a command's own options: opts is an array. */
#define SL_CLI_OWN_GROUP(opts)                                                                     \
    {                                                                                              \
        NULL, NULL, opts, sizeof opts / sizeof opts[0]                                             \
    }

#define SL_CLI_MAX_GROUPS 4

typedef struct sl_cli_cmd {
    const char *name;     /* "worker", "table gen" */
    const char *summary;  /* one line for the list of commands */
    const char *synopsis; /* usage lines, each starting "sluice ..." */
    const char *about;    /* what it does, for --help */
    const char *args;     /* the positional arguments' name ("DIR", "FILE"), NULL: none */
    const char *args_doc; /* what they are ("table directory") */
    uint32_t min_args, max_args;
    size_t args_offset; /* of their sl_cli_list_t in the values struct */
    struct {
        const sl_cli_group_t *group;
        size_t base;             /* of the group's struct in the values struct */
    } groups[SL_CLI_MAX_GROUPS]; /* ends at group NULL */
} sl_cli_cmd_t;

/* What parsing found, besides the values. */
typedef struct sl_cli_parsed {
    int code;       /* when sl_cli_parse returns false: the exit code (0 after --help, 2 usage) */
    uint64_t given; /* bit k: the k-th option of the command (groups in order) was given */
} sl_cli_parsed_t;

/* Parse argv[1..argc) (argv[0] is the command's own name) into values
 * (zeroed by the caller): the table's defaults first, then every option
 * given, each checked by its type ("--listen '127.0.0.1:abc': expected
 * HOST:PORT with a port in [0, 65535]"), then required options and the
 * count of positional arguments. Long names may be shortened to a unique
 * prefix; "--name=value" and "--name value" both work; "--" ends the
 * options. -h and --help print the help on stdout. @return true to go on;
 * false when the command should exit with res->code, its message printed
 * (a usage error on stderr). Free with sl_cli_free either way. */
bool sl_cli_parse(const sl_cli_cmd_t *cmd, int argc, char **argv, void *values,
                  sl_cli_parsed_t *res);
/* Was the option named name given on the command line? */
bool sl_cli_given(const sl_cli_cmd_t *cmd, const sl_cli_parsed_t *res, const char *name);
/* Free the lists sl_cli_parse allocated in values. */
void sl_cli_free(const sl_cli_cmd_t *cmd, void *values);

/* The command's --help: synopsis, what it does, every option with its
 * default. */
void sl_cli_print_help(FILE *out, const sl_cli_cmd_t *cmd);
/* The command's options (or, with cmd NULL, group's) as a Markdown table:
 * option, value, default, meaning. */
void sl_cli_print_markdown(FILE *out, const sl_cli_cmd_t *cmd, const sl_cli_group_t *group);

/* Print "sluice <cmd>: <fmt with arg>" and where to find help on stderr.
 * @return 2, the usage-error exit code. */
int sl_cli_usage_error(const char *cmd, const char *fmt, const char *arg);

#endif
