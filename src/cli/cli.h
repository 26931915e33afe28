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

/* The resume token files paths (sluice read --token-out) into body, the
 * JSON of POST /jobs or /jobs/{id}/resubmit: one as "resume_token" (base64),
 * several as "resume_tokens". cmd names the command in messages. @return
 * 0, 1 with the reason printed (a file unreadable, empty or over 64 MiB),
 * 2 for more than 1024. */
int sl_cli_resume_tokens_json(const char *cmd, const sl_cli_list_t *paths, json_t *body);

/* Raise this process's open-file limit to its hard limit: a server's
 * connection caps (control, trainer and admin connections) should be what
 * bounds its sockets, not a low default soft limit. Best effort. */
void sl_cli_raise_nofile(void);

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
