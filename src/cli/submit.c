/* `sluice submit`: hand a job to a DPP master through its admin endpoint
 * (POST /jobs, docs/ADMIN.md), optionally resuming from a trainer's token,
 * and with --wait follow it (GET /jobs/{id}) until every epoch is
 * committed. HTTP through the program's one client (http.h: libcurl, so
 * HTTPS, proxies and chunked replies work).
 * Exit codes: 0 accepted (and finished, with --wait), 1 refused or failed
 * (the master's error is printed), 2 usage error. */
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "dpp/master/state/admin_limits.h"
#include "http.h"
#include "netlib/netlib_gnutls.h"

typedef struct submit_args {
    const char *job, *sharding;
    uint64_t ranks, min_workers, max_workers, timeout;
    sl_cli_list_t resume;
    bool wait;
    sl_cli_admin_client_args_t client;
} submit_args_t;

#define S(field) offsetof(submit_args_t, field)

static const sl_cli_opt_t sopts[] = {
    {"job", SL_CLI_FILE, "SPEC.json", NULL, NULL, 0, 0, SL_CLI_REQUIRED, S(job),
     "the job spec (docs/JOBS.md)"},
    {"ranks", SL_CLI_UINT, "N", "1", NULL, 1, UINT32_MAX, 0, S(ranks), "trainer ranks"},
    {"sharding", SL_CLI_ENUM, "dynamic|static", "dynamic", NULL, 0, 0, 0, S(sharding),
     "dynamic: any rank takes the next batch; static: splits assigned to ranks from the seed"},
    {"min-workers", SL_CLI_UINT, "N", "1", NULL, 1, UINT32_MAX, 0, S(min_workers),
     "autoscaler lower bound"},
    {"max-workers", SL_CLI_UINT, "N", NULL, "--min-workers", 1, UINT32_MAX, 0, S(max_workers),
     "autoscaler upper bound"},
    {"resume-token", SL_CLI_FILE, "FILE", NULL, NULL, 0, 0, SL_CLI_REPEAT, S(resume),
     "start where this token (sluice read --token-out) left off; give one token of every rank "
     "of the checkpoint (at most 65536): the job, of any number of --ranks, starts with what no "
     "rank handed out"},
    {"wait", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, S(wait),
     "follow the job until every epoch is committed"},
    {"timeout", SL_CLI_UINT, "S", NULL, "never", 1, UINT32_MAX, 0, S(timeout),
     "with --wait: give up after S seconds"},
};

static const sl_cli_group_t submit_group = SL_CLI_OWN_GROUP(sopts);

const sl_cli_cmd_t sl_cli_submit_cmd = {
    .name = "submit",
    .summary = "submit a job to a DPP master through its admin endpoint",
    .synopsis = "sluice submit --admin HOST:PORT --job SPEC.json [options]",
    .about = "Submits a job to a DPP master (POST /jobs) and prints the master's answer. "
             "`sluice jobs resubmit` starts a job again from resume tokens.",
    .groups = {{&submit_group, 0}, {&sl_cli_admin_client_group, S(client)}},
};

static int usage_error(const char *fmt, const char *arg)
{
    return sl_cli_usage_error("submit", fmt, arg);
}

/* A string member, "" when absent. */
static const char *jstr(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL ? v : "";
}

/* A binary resume token as a JSON string of its base64 (RFC 4648, with
 * padding; GnuTLS encodes, loaded by the caller). @return NULL when out
 * of memory. */
static json_t *base64_json(const sl_netlib_gnutls_t *gnutls, const unsigned char *in, size_t n)
{
    gnutls_datum_t raw = {.data = (unsigned char *)in, .size = (unsigned)n}, enc = {0};
    if (gnutls->base64_encode2(&raw, &enc) != 0) return NULL;
    json_t *s = json_stringn((const char *)enc.data, enc.size);
    (*gnutls->free_memory)(enc.data);
    return s;
}

/* The request body as the master will measure it: the compact JSON text
 * the callers send, counted as it grows so that a token that cannot fit
 * is named before the next one is read (memory stays bounded by the
 * master's limit). */
typedef struct body_size {
    const char *cmd;
    uint64_t len; /* bytes so far */
} body_size_t;

/* Add a token of n bytes, as a JSON string of its base64 after sep bytes
 * of separators and key; @return false, with the file and the excess
 * printed, when the body would pass SL_MASTER_ADMIN_MAX_BODY. */
static bool body_add_token(body_size_t *b, const char *path, uint64_t n, uint64_t sep)
{
    uint64_t b64 = (n + 2) / 3 * 4, len = b->len + sep + 2 + b64; /* 2: the quotes */
    if (len <= SL_MASTER_ADMIN_MAX_BODY) {
        b->len = len;
        return true;
    }
    fprintf(stderr,
            "sluice %s: resume token %s (%" PRIu64 " bytes, %" PRIu64
            " as base64) makes the request body %" PRIu64 " bytes, %" PRIu64
            " over the master's limit of %u\n",
            b->cmd, path, n, b64, len, len - SL_MASTER_ADMIN_MAX_BODY, SL_MASTER_ADMIN_MAX_BODY);
    return false;
}

/* One token file as a JSON base64 string, sep bytes after the body so
 * far. @return NULL with the reason printed. */
static json_t *token_json(body_size_t *b, const char *path, uint64_t sep)
{
    /* Its size first, so a token too large for the master is refused
     * without reading it; then read at most what can still fit (a file
     * that grew in between is refused by the read). */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
        !body_add_token(&(body_size_t){b->cmd, b->len}, path, (uint64_t)st.st_size, sep))
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    sl_error_t err = {0};
    if (sl_io_read_file(path, "resume token", SL_MASTER_ADMIN_MAX_BODY / 4 * 3, NULL, &buf, &n,
                        &err) != SL_OK) {
        fprintf(stderr, "sluice %s: %s\n", b->cmd, err.msg);
        return NULL;
    }
    const sl_netlib_gnutls_t *gnutls = sl_netlib_gnutls(&err);
    if (gnutls == NULL) {
        fprintf(stderr, "sluice %s: resume token %s: %s\n", b->cmd, path, err.msg);
        sl_free(NULL, buf, n + 1);
        return NULL;
    }
    json_t *s = NULL;
    if (body_add_token(b, path, n, sep)) {
        s = n > 0 ? base64_json(gnutls, (const unsigned char *)buf, n) : NULL;
        if (s == NULL)
            fprintf(stderr, "sluice %s: resume token %s: %s\n", b->cmd, path,
                    n > 0 ? "out of memory" : "empty");
    }
    sl_free(NULL, buf, n + 1);
    return s;
}

int sl_cli_resume_tokens_json(const char *cmd, const sl_cli_list_t *paths, json_t *body)
{
    if (paths->count > SL_MASTER_MAX_RESUME_TOKENS) {
        char msg[PATH_MAX + 160];
        snprintf(msg, sizeof msg,
                 "%u resume tokens, %u more than the master takes (%u, one per trainer rank); "
                 "the first extra one: %s",
                 paths->count, paths->count - (unsigned)SL_MASTER_MAX_RESUME_TOKENS,
                 (unsigned)SL_MASTER_MAX_RESUME_TOKENS, paths->items[SL_MASTER_MAX_RESUME_TOKENS]);
        return sl_cli_usage_error(cmd, "%s", msg);
    }
    if (paths->count == 0) return 0;
    /* The body's compact text grows by `,"key":` (no comma in an empty
     * object), then each token's string, with commas and brackets for
     * several. */
    body_size_t b = {cmd, json_dumpb(body, NULL, 0, JSON_COMPACT)};
    uint64_t key = (json_object_size(body) > 0 ? 1 : 0) + 3; /* the comma, quotes and ':' */
    if (paths->count == 1) {
        json_t *one = token_json(&b, paths->items[0], key + strlen("resume_token"));
        return one != NULL && json_object_set_new(body, "resume_token", one) == 0 ? 0 : 1;
    }
    json_t *toks = json_array();
    if (toks == NULL || json_object_set_new(body, "resume_tokens", toks) != 0) {
        fprintf(stderr, "sluice %s: out of memory\n", cmd);
        return 1;
    }
    b.len += key + strlen("resume_tokens") + 2; /* the brackets */
    for (uint32_t k = 0; k < paths->count; k++) {
        json_t *one = token_json(&b, paths->items[k], k > 0 ? 1 : 0);
        if (one == NULL || json_array_append_new(toks, one) != 0) return 1;
    }
    return 0;
}

/* GET /jobs/{id} every half second until "finished"; prints progress lines
 * on stderr. @return the exit code. */
static int wait_finished(sl_cli_http_t *c, const char *id, double timeout_s)
{
    double t0 = sl_clock_s();
    char path[1024], last[256] = "";
    if (!sl_cli_http_path(c, "/jobs/", id, "", path, sizeof path)) {
        fprintf(stderr, "sluice submit: job id '%s' too long\n", id);
        return 1;
    }
    for (;;) {
        sl_cli_http_reply_t r;
        if (sl_cli_http_request(c, "GET", path, NULL, &r) != 0) return 1;
        if (r.status != 200) {
            sl_cli_http_print_refusal(c, &r);
            sl_cli_http_reply_free(&r);
            return 1;
        }
        json_t *j = json_loads(r.body, 0, NULL);
        if (!json_is_object(j)) {
            json_decref(j);
            fprintf(stderr, "sluice submit: %s: not a JSON object\n", r.url);
            sl_cli_http_reply_free(&r);
            return 1;
        }
        sl_cli_http_reply_free(&r);
        bool finished = json_is_true(json_object_get(j, "finished"));
        const char *state = json_string_value(json_object_get(j, "state"));
        if (state != NULL && strcmp(state, "failed") == 0) {
            json_t *f = json_object_get(j, "failure");
            fprintf(stderr,
                    "sluice submit: job %s failed: split %" JSON_INTEGER_FORMAT
                    " (file %s stripe %" JSON_INTEGER_FORMAT "): %s\n",
                    id, json_integer_value(json_object_get(f, "split")), jstr(f, "file"),
                    json_integer_value(json_object_get(f, "stripe")), jstr(f, "message"));
            json_decref(j);
            return 1;
        }
        char line[256];
        snprintf(line, sizeof line,
                 "job %s: epoch %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT
                 ", splits done %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT "%s",
                 id, json_integer_value(json_object_get(j, "epoch")),
                 json_integer_value(json_object_get(j, "epochs")),
                 json_integer_value(json_object_get(j, "done")),
                 json_integer_value(json_object_get(j, "num_splits")),
                 finished ? ", finished" : "");
        json_decref(j);
        if (strcmp(line, last) != 0) {
            fprintf(stderr, "%s\n", line);
            snprintf(last, sizeof last, "%s", line);
        }
        if (finished) return 0;
        if (timeout_s > 0 && sl_clock_s() - t0 > timeout_s) {
            fprintf(stderr, "sluice submit: job %s not finished after %.0f s\n", id, timeout_s);
            return 1;
        }
        usleep(500 * 1000);
    }
}

/* The command, once its options parsed. @return the exit code. */
static int submit(const submit_args_t *args)
{
    const char *job_path = args->job;
    uint32_t min_w = (uint32_t)args->min_workers, max_w = (uint32_t)args->max_workers;
    if (max_w == 0) max_w = min_w;
    if (max_w < min_w) return usage_error("%s", "--max-workers is below --min-workers");

    json_error_t je;
    json_t *spec = json_load_file(job_path, 0, &je);
    if (!spec) {
        fprintf(stderr, "sluice submit: %s:%d:%d: %s\n", job_path, je.line, je.column, je.text);
        return 1;
    }
    if (!json_is_object(spec)) {
        fprintf(stderr, "sluice submit: %s: the job spec is not a JSON object\n", job_path);
        json_decref(spec);
        return 1;
    }
    json_t *body = json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", spec, "ranks",
                             (json_int_t)args->ranks, "sharding", args->sharding, "min_workers",
                             (json_int_t)min_w, "max_workers", (json_int_t)max_w);
    if (body == NULL) {
        fprintf(stderr, "sluice submit: out of memory\n");
        return 1;
    }
    /* One token keeps the single-token form; several go as
     * "resume_tokens" (one per rank, docs/ADMIN.md). */
    int code = sl_cli_resume_tokens_json("submit", &args->resume, body);
    char *text = code == 0 ? sl_admin_json_text(NULL, body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (code != 0) return code;
    sl_cli_http_t *c = NULL;
    if (text == NULL) {
        fprintf(stderr, "sluice submit: out of memory\n");
        return 1;
    }
    if ((code = sl_cli_http_new("submit", &args->client, &c)) != 0) {
        sl_strfree(NULL, text);
        return code;
    }
    sl_cli_http_reply_t r;
    int rc = sl_cli_http_request(c, "POST", "/jobs", text, &r);
    sl_strfree(NULL, text);
    if (rc != 0) {
        sl_cli_http_destroy(c);
        return 1;
    }
    if (r.status / 100 != 2) {
        sl_cli_http_print_refusal(c, &r);
        sl_cli_http_reply_free(&r);
        sl_cli_http_destroy(c);
        return 1;
    }
    printf("%s\n", r.body);
    fflush(stdout);
    json_t *ans = json_loads(r.body, 0, NULL);
    sl_cli_http_reply_free(&r);
    if (args->wait) {
        const char *id = json_string_value(json_object_get(ans, "id"));
        if (!id) {
            fprintf(stderr, "sluice submit: the master's answer names no job id\n");
            code = 1;
        } else {
            code = wait_finished(c, id, (double)args->timeout);
        }
    }
    json_decref(ans);
    sl_cli_http_destroy(c);
    return code;
}

int sl_cli_submit(int argc, char **argv)
{
    submit_args_t args = {0};
    sl_cli_parsed_t parsed;
    if (!sl_cli_parse(&sl_cli_submit_cmd, argc, argv, &args, &parsed)) {
        sl_cli_free(&sl_cli_submit_cmd, &args);
        return parsed.code;
    }
    int code = submit(&args);
    sl_cli_free(&sl_cli_submit_cmd, &args);
    return code;
}
