/* `sluice jobs`: the jobs of a DPP master, through its admin endpoint
 * (docs/ADMIN.md) and the program's HTTP client (http.h):
 *
 *   sluice jobs list                      GET    /jobs
 *   sluice jobs show ID                   GET    /jobs/{id}
 *   sluice jobs delete ID                 DELETE /jobs/{id}          (token)
 *   sluice jobs scale ID --workers N      POST   /jobs/{id}/scale    (token)
 *   sluice jobs resubmit ID --token F...  POST   /jobs/{id}/resubmit (token)
 *
 * A table for people, or with --json the master's answer as it came.
 * Exit codes: 0 done, 1 the request failed or was refused (the URL, the
 * HTTP status and the master's message are printed), 2 usage error. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "http.h"

typedef struct jobs_args {
    sl_cli_list_t id; /* the positional ID */
    bool json;
    uint64_t workers;
    sl_cli_list_t tokens;
    sl_cli_admin_client_args_t client;
} jobs_args_t;

#define J(field) offsetof(jobs_args_t, field)

static const sl_cli_opt_t json_opt[] = {
    {"json", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, J(json),
     "print the master's JSON answer instead of a table"},
};
static const sl_cli_opt_t scale_opts[] = {
    {"workers", SL_CLI_UINT, "N", NULL, NULL, 0, 4096, SL_CLI_REQUIRED, J(workers),
     "the job's desired worker count (clamped to its min_workers..max_workers); the "
     "autoscaler takes over again after its cooldown"},
    {"json", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, J(json),
     "print the master's JSON answer instead of a line"},
};
static const sl_cli_opt_t resubmit_opts[] = {
    {"token", SL_CLI_FILE, "FILE", NULL, NULL, 0, 0, SL_CLI_REQUIRED | SL_CLI_REPEAT, J(tokens),
     "a resume token (sluice read --token-out, sl_trainer_resume_token); one of every rank of "
     "the checkpoint for a job of several ranks"},
    {"json", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, J(json),
     "print the master's JSON answer instead of a table"},
};

static const sl_cli_group_t json_group = SL_CLI_OWN_GROUP(json_opt);
static const sl_cli_group_t scale_group = SL_CLI_OWN_GROUP(scale_opts);
static const sl_cli_group_t resubmit_group = SL_CLI_OWN_GROUP(resubmit_opts);

#define CLIENT                                                                                     \
    {                                                                                              \
        &sl_cli_admin_client_group, J(client)                                                      \
    }
/* The one positional argument of every command but list. */
#define ID_ARG                                                                                     \
    .args = "ID", .args_doc = "job ID", .min_args = 1, .max_args = 1, .args_offset = J(id)

const sl_cli_cmd_t sl_cli_jobs_list_cmd = {
    .name = "jobs list",
    .summary = "list a master's jobs",
    .synopsis = "sluice jobs list --admin HOST:PORT [--json]",
    .about = "Lists the jobs of a DPP master (GET /jobs): id, state, epoch, splits done, rows "
             "committed this epoch, workers (live/granted), trainer clients, ranks.",
    .groups = {{&json_group, 0}, CLIENT},
};

const sl_cli_cmd_t sl_cli_jobs_show_cmd = {
    .name = "jobs show",
    .summary = "show one job",
    .synopsis = "sluice jobs show ID --admin HOST:PORT [--json]",
    .about = "Shows one job of a DPP master (GET /jobs/{id}, every field docs/ADMIN.md "
             "describes), one field a line.",
    ID_ARG,
    .groups = {{&json_group, 0}, CLIENT},
};

const sl_cli_cmd_t sl_cli_jobs_delete_cmd = {
    .name = "jobs delete",
    .summary = "remove a job",
    .synopsis = "sluice jobs delete ID --admin HOST:PORT [--json]",
    .about = "Removes a job (DELETE /jobs/{id}, journaled before the answer): its leases "
             "vanish, its workers stop, its trainers see the end of the job.",
    ID_ARG,
    .groups = {{&json_group, 0}, CLIENT},
};

const sl_cli_cmd_t sl_cli_jobs_scale_cmd = {
    .name = "jobs scale",
    .summary = "set a job's desired worker count",
    .synopsis = "sluice jobs scale ID --workers N --admin HOST:PORT",
    .about = "Sets a job's desired worker count by hand (POST /jobs/{id}/scale) and prints "
             "what was asked and what was set.",
    ID_ARG,
    .groups = {{&scale_group, 0}, CLIENT},
};

const sl_cli_cmd_t sl_cli_jobs_resubmit_cmd = {
    .name = "jobs resubmit",
    .summary = "start a job again from resume tokens",
    .synopsis = "sluice jobs resubmit ID --token FILE [--token FILE...] --admin HOST:PORT",
    .about = "Starts a job again where its trainers' resume tokens left off, with the spec, "
             "ranks, sharding and worker bounds the master holds for it (POST "
             "/jobs/{id}/resubmit): in one step, the tokens checked before the running (or "
             "finished, or failed) job is replaced, so a refused token leaves the job as it "
             "was.",
    ID_ARG,
    .groups = {{&resubmit_group, 0}, CLIENT},
};

/* ---- the table ---- */

static json_int_t jint(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL ? v : "";
}

#define ROW_FMT "%-24s %-9s %-7s %-13s %-25s %-11s %-8s %-9s %-7s %s\n"

static void list_header(void)
{
    printf(ROW_FMT, "ID", "STATE", "EPOCH", "SPLITS DONE", "ROWS COMMITTED", "SAMPLES/S", "ETA",
           "WORKERS", "CLIENTS", "RANKS");
}

/* Seconds left as a person reads them ("45s", "3m20s", "2h05m"); "-" when
 * the master cannot tell (null). */
static void eta_text(const json_t *v, char *out, size_t cap)
{
    if (!json_is_number(v) || json_number_value(v) < 0) {
        snprintf(out, cap, "-");
        return;
    }
    long long s = (long long)(json_number_value(v) + 0.5);
    if (s < 60)
        snprintf(out, cap, "%llds", s);
    else if (s < 3600)
        snprintf(out, cap, "%lldm%02llds", s / 60, s % 60);
    else
        snprintf(out, cap, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

/* One job as a row. The epoch is 1-based for people ("1/2"); a finished
 * job shows its epoch count. */
static void list_row(const json_t *j)
{
    char epoch[32], splits[48], rows[64], workers[32], clients[16], ranks[48], rate[32], eta[32];
    json_int_t e = jint(j, "epoch"), es = jint(j, "epochs");
    snprintf(epoch, sizeof epoch, "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
             e < es ? e + 1 : es, es);
    snprintf(splits, sizeof splits, "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
             jint(j, "done"), jint(j, "num_splits"));
    snprintf(rows, sizeof rows, "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
             jint(j, "committed_rows"), jint(j, "total_rows"));
    snprintf(workers, sizeof workers, "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
             jint(j, "workers"), jint(j, "granted_workers"));
    snprintf(clients, sizeof clients, "%" JSON_INTEGER_FORMAT, jint(j, "clients"));
    snprintf(ranks, sizeof ranks, "%" JSON_INTEGER_FORMAT " %s", jint(j, "ranks"),
             jstr(j, "sharding"));
    snprintf(rate, sizeof rate, "%.0f", json_number_value(json_object_get(j, "samples_per_s")));
    eta_text(json_object_get(j, "eta_s"), eta, sizeof eta);
    printf(ROW_FMT, jstr(j, "id"), jstr(j, "state"), epoch, splits, rows, rate, eta, workers,
           clients, ranks);
}

/* One job, a field a line, in the master's order; nested objects (a
 * failure) as compact JSON. */
static void show_job(const json_t *j)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v)
    {
        printf("%-17s ", key);
        if (strcmp(key, "history") == 0) { /* up to an hour of points: --json has them */
            printf("%zu points every %.0f s, %zu autoscaler decisions (--json for them)\n",
                   json_array_size(json_object_get(v, "points")),
                   json_number_value(json_object_get(v, "interval_s")),
                   json_array_size(json_object_get(v, "decisions")));
        } else if (json_is_string(v)) {
            printf("%s\n", json_string_value(v));
        } else {
            char *s = sl_admin_json_text(NULL, v,
                                         JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(4));
            printf("%s\n", s != NULL ? s : "?");
            sl_strfree(NULL, s);
        }
    }
}

/* ---- the requests ---- */

typedef enum { LIST, SHOW, DELETE, SCALE, RESUBMIT } verb_t;

/* What a verb prints from a 2xx answer j (or j as it came with --json). */
static int print_answer(verb_t verb, const json_t *j, bool as_json, const char *body)
{
    if (as_json) {
        printf("%s\n", body);
        return 0;
    }
    switch (verb) {
    case LIST: {
        const json_t *jobs = json_object_get(j, "jobs");
        if (!json_is_array(jobs)) return -1;
        list_header();
        for (size_t i = 0; i < json_array_size(jobs); i++)
            list_row(json_array_get(jobs, i));
        return 0;
    }
    case SHOW:
    case RESUBMIT:
        if (!json_is_object(j)) return -1;
        show_job(j);
        return 0;
    case DELETE:
        printf("removed job %s\n", jstr(j, "id"));
        return 0;
    case SCALE:
        printf("job %s: asked for %" JSON_INTEGER_FORMAT " workers, set %" JSON_INTEGER_FORMAT "\n",
               jstr(j, "id"), jint(j, "requested"), jint(j, "workers"));
        return 0;
    }
    return -1;
}

static int run(verb_t verb, const sl_cli_cmd_t *cmd, const jobs_args_t *a)
{
    const char *id = a->id.count > 0 ? a->id.items[0] : NULL;
    json_t *body = NULL;
    if (verb == SCALE) body = json_pack("{s:I}", "workers", (json_int_t)a->workers);
    if (verb == RESUBMIT) {
        body = json_object();
        int code = body != NULL ? sl_cli_resume_tokens_json(cmd->name, &a->tokens, body) : 1;
        if (code != 0) {
            json_decref(body);
            return code;
        }
    }
    char *text = body != NULL ? sl_admin_json_text(NULL, body, JSON_COMPACT) : NULL;
    json_decref(body);
    if ((verb == SCALE || verb == RESUBMIT) && text == NULL) {
        fprintf(stderr, "sluice %s: out of memory\n", cmd->name);
        return 1;
    }
    sl_cli_http_t *c = NULL;
    int code = sl_cli_http_new(cmd->name, &a->client, &c);
    char path[1024] = "/jobs";
    static const char *const suffix[] = {"", "", "", "/scale", "/resubmit"};
    static const char *const method[] = {"GET", "GET", "DELETE", "POST", "POST"};
    if (code == 0 && id != NULL &&
        !sl_cli_http_path(c, "/jobs/", id, suffix[verb], path, sizeof path)) {
        fprintf(stderr, "sluice %s: job id '%.64s...' too long\n", cmd->name, id);
        code = 1;
    }
    sl_cli_http_reply_t r = {0};
    if (code == 0 && sl_cli_http_request(c, method[verb], path, text, &r) != 0) code = 1;
    sl_strfree(NULL, text);
    if (code == 0 && r.status / 100 != 2) {
        sl_cli_http_print_refusal(c, &r);
        code = 1;
    }
    if (code == 0) {
        json_t *j = json_loads(r.body, 0, NULL);
        if (print_answer(verb, j, a->json, r.body) != 0) {
            fprintf(stderr, "sluice %s: %s: HTTP %ld but not the JSON expected: %.200s\n",
                    cmd->name, r.url, r.status, r.body);
            code = 1;
        }
        json_decref(j);
    }
    sl_cli_http_reply_free(&r);
    sl_cli_http_destroy(c);
    fflush(stdout);
    return code;
}

/* In verb_t's order: a verb's index is its verb_t. */
static const sl_cli_verb_t verbs[] = {
    {"list", &sl_cli_jobs_list_cmd},         {"show", &sl_cli_jobs_show_cmd},
    {"delete", &sl_cli_jobs_delete_cmd},     {"scale", &sl_cli_jobs_scale_cmd},
    {"resubmit", &sl_cli_jobs_resubmit_cmd},
};
_Static_assert(sizeof verbs / sizeof verbs[0] == RESUBMIT + 1, "a verb for each verb_t");

int sl_cli_jobs(int argc, char **argv)
{
    int code;
    int i = sl_cli_verb_find("jobs", "--admin HOST:PORT [options]", verbs,
                             sizeof verbs / sizeof verbs[0], argc, argv, &code);
    if (i < 0) return code;
    jobs_args_t a = {0};
    sl_cli_parsed_t parsed;
    code = sl_cli_parse(verbs[i].cmd, argc - 1, argv + 1, &a, &parsed)
               ? run((verb_t)i, verbs[i].cmd, &a)
               : parsed.code;
    sl_cli_free(verbs[i].cmd, &a);
    return code;
}
