/* The commands of the sluice program; each takes argv from its own name on
 * and returns the process exit code (0 ok, 1 failure, 2 usage). */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dpp/admin/endpoint.h"
#include "options.h"

int sl_cli_demo(int argc, char **argv);
int sl_cli_table(int argc, char **argv);
int sl_cli_worker(int argc, char **argv);
int sl_cli_read(int argc, char **argv);
int sl_cli_submit(int argc, char **argv);
int sl_cli_master(int argc, char **argv);
int sl_cli_produce(int argc, char **argv);
int sl_cli_jobs(int argc, char **argv);
int sl_cli_parquet(int argc, char **argv);
int sl_cli_store(int argc, char **argv);
/* `sluice demo --online` (demo_online.c): its options, as `sluice demo`
 * parsed them. */
typedef struct sl_cli_demo_online {
    const char *brokers, *topic;
    uint64_t partitions, rate, seconds, linger_ms, chunk, batch_size, threads, seed;
    const char *const *properties; /* [num_properties] NAME=VALUE, the producer's */
    uint32_t num_properties;
} sl_cli_demo_online_t;
int sl_cli_demo_online(const sl_cli_demo_online_t *o);
/* `sluice help [COMMAND... | --markdown [SECTION]]` */
int sl_cli_help(int argc, char **argv);

/* The option tables of the commands (options.h), for `sluice help`. */
extern const sl_cli_cmd_t sl_cli_demo_cmd, sl_cli_worker_cmd, sl_cli_read_cmd, sl_cli_submit_cmd,
    sl_cli_master_cmd, sl_cli_produce_cmd;
extern const sl_cli_cmd_t sl_cli_table_create_cmd, sl_cli_table_import_cmd, sl_cli_table_gen_cmd,
    sl_cli_table_inspect_cmd, sl_cli_table_verify_cmd, sl_cli_table_cat_cmd;
extern const sl_cli_cmd_t sl_cli_store_ls_cmd, sl_cli_store_stat_cmd, sl_cli_store_cat_cmd,
    sl_cli_store_put_cmd;
extern const sl_cli_cmd_t sl_cli_jobs_list_cmd, sl_cli_jobs_show_cmd, sl_cli_jobs_delete_cmd,
    sl_cli_jobs_scale_cmd, sl_cli_jobs_resubmit_cmd;
extern const sl_cli_cmd_t sl_cli_parquet_inspect_cmd, sl_cli_parquet_cat_cmd;
/* Groups of options more than one command takes. */
extern const sl_cli_group_t sl_cli_store_group;
extern const sl_cli_group_t sl_cli_admin_group, sl_cli_writer_group, sl_cli_admin_client_group;

/* The values of sl_cli_admin_group: the admin endpoint's limits and TLS
 * (master and worker). */
typedef struct sl_cli_admin_args {
    const char *tls_cert, *tls_key;
    uint64_t max_connections, timeout_s;
} sl_cli_admin_args_t;

/* The endpoint options those values give, with address (borrowed; NULL:
 * the endpoint's default). The routes, token and context are the
 * process's to add. */
sl_admin_opts_t sl_cli_admin_opts(const sl_cli_admin_args_t *adm, const char *address);

/* The values of sl_cli_store_read_group: how a process that reads an
 * s3:// table or Parquet dataset (worker, master, table inspect, verify
 * and cat) bounds its object store requests. */
typedef struct sl_cli_store_read_args {
    uint64_t timeout_ms, max_attempts;
} sl_cli_store_read_args_t;
extern const sl_cli_group_t sl_cli_store_read_group;
/* The store options those values give (the rest the defaults). */
struct sl_store_opts sl_cli_store_read_opts(const sl_cli_store_read_args_t *sr);

/* The resume token files paths (sluice read --token-out) into body, the
 * JSON of POST /jobs or /jobs/{id}/resubmit: one as "resume_token" (base64),
 * several as "resume_tokens". cmd names the command in messages. @return
 * 0, 1 with the reason printed (a file unreadable, empty or over 64 MiB),
 * 2 for more than 1024. */
int sl_cli_resume_tokens_json(const char *cmd, const sl_cli_list_t *paths, json_t *body);

/* The start of a server process (master, worker), once its options are
 * checked and before its threads: the cluster secret read from
 * secret_file (NULL: $SLUICE_CLUSTER_SECRET_FILE, else none; rpc/auth.h)
 * into *secret (caller's, free with sl_rpc_secret_free; NULL when none),
 * and the open-file limit raised to its hard limit, so that the server's
 * connection caps (control, trainer and admin connections), not a low
 * default soft limit, bound its sockets (best effort). @return 0, or 1
 * with why printed as "sluice <cmd>: <why>". */
int sl_cli_server_start(const char *cmd, const char *secret_file, char **secret);

/* A command of a group of commands (`sluice jobs list`, `sluice store
 * ls`): its name and option table, whose summary the group's usage shows. */
typedef struct sl_cli_verb {
    const char *name;
    const sl_cli_cmd_t *cmd;
} sl_cli_verb_t;

/* `sluice GROUP <command> ...`: which of the n verbs argv[1] names.
 * synopsis follows "usage: sluice GROUP <command> " in the usage.
 * @return the verb's index; or -1 with *code the exit code and the usage
 * printed: on stdout after --help, -h or help (0), on stderr when argv[1]
 * is missing or names no verb (2; the nearest name suggested). */
int sl_cli_verb_find(const char *group, const char *synopsis, const sl_cli_verb_t *verbs, size_t n,
                     int argc, char **argv, int *code);

/* Write the libraries' log records (common/log.h) to stderr as
 * "sluice <cmd>: <message>" lines. */
void sl_cli_log_to_stderr(const char *cmd);

/* The logging options (log_cli.c) of the long-running commands. */
typedef struct sl_cli_log_args {
    const char *level;  /* error|warn|info|debug */
    const char *format; /* text|logfmt|json */
} sl_cli_log_args_t;

extern const sl_cli_group_t sl_cli_log_group;

/* Set the process's log level and handler from the options (the values
 * the table checked). */
void sl_cli_log_apply(const char *cmd, const sl_cli_log_args_t *args);

#endif
