/* `sluice submit`: hand a job to a DPP master through its admin endpoint
 * (POST /jobs, docs/ADMIN.md), optionally resuming from a trainer's token,
 * and with --wait follow it (GET /jobs/{id}) until every epoch is
 * committed. A tiny HTTP/1.1 client over a socket: one request per
 * connection ("Connection: close"), the reply read to the end.
 * Exit codes: 0 accepted (and finished, with --wait), 1 refused or failed
 * (the master's error is printed), 2 usage error. */
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "rpc/frame.h"

/* Replies bigger than this are refused: a job list of a busy master fits. */
#define MAX_REPLY (16u << 20)
/* Resume tokens are a few bytes per split; 64 MiB covers 16M splits. */
#define MAX_TOKEN (64u << 20)

/* One resume token per trainer rank at most this many. */
#define MAX_RESUME 1024

typedef struct submit_args {
    const char *admin, *job, *sharding, *token_file;
    uint64_t ranks, min_workers, max_workers, timeout;
    sl_cli_list_t resume;
    bool wait;
} submit_args_t;

#define S(field) offsetof(submit_args_t, field)

static const sl_cli_opt_t sopts[] = {
    {"admin", SL_CLI_ADDR, "HOST:PORT", NULL, NULL, 0, 0, SL_CLI_REQUIRED, S(admin),
     "the master's admin endpoint"},
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
     "start where this token (sluice read --token-out) left off; with one token per trainer "
     "rank (at most 1024), start with what every rank delivered"},
    {"token-file", SL_CLI_PATH, "FILE", NULL, "`$SLUICE_ADMIN_TOKEN`", 0, 0, 0, S(token_file),
     "bearer token for the admin endpoint"},
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
    .about = "Submits a job to a DPP master (POST /jobs) and prints the master's answer.",
    .groups = {{&submit_group, 0}},
};

static int usage_error(const char *fmt, const char *arg)
{
    return sl_cli_usage_error("submit", fmt, arg);
}

/* ---- HTTP ---- */

typedef struct reply {
    int status;
    char *body; /* an owned string of the default allocator (common/mem.h) */
} reply_t;

/* One request, one connection. @return 0, or -1 with msg set. */
static int http(const char *addr, const char *method, const char *path, const char *token,
                const char *body, reply_t *r, char *msg, size_t cap)
{
    r->status = 0;
    r->body = NULL;
    int fd;
    sl_error_t err = {0};
    if (sl_rpc_connect(addr, 5000, &fd, &err) != SL_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return -1;
    }
    size_t blen = body ? strlen(body) : 0;
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nUser-Agent: sluice\r\n"
                      "%s%s%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, addr, token ? "Authorization: Bearer " : "", token ? token : "",
                      token ? "\r\n" : "", blen);
    if (hn < 0 || (size_t)hn >= sizeof head) {
        close(fd);
        snprintf(msg, cap, "%s %s: request header too long", method, path);
        return -1;
    }
    const char *parts[2] = {head, body ? body : ""};
    size_t lens[2] = {(size_t)hn, blen};
    for (int p = 0; p < 2; p++) {
        for (size_t off = 0; off < lens[p];) {
            ssize_t n = send(fd, parts[p] + off, lens[p] - off, MSG_NOSIGNAL);
            if (n <= 0) {
                /* The master may answer (413) and close before reading all. */
                p = 2;
                break;
            }
            off += (size_t)n;
        }
    }
    size_t len = 0, bufcap = 8192;
    char *buf = sl_alloc(NULL, bufcap);
    ssize_t n = 0;
    while (buf) {
        if (len + 1 == bufcap) {
            if (bufcap >= MAX_REPLY) break;
            char *nb = sl_realloc(NULL, buf, bufcap, bufcap * 2);
            if (!nb) {
                sl_free(NULL, buf, bufcap);
                buf = NULL;
                break;
            }
            buf = nb;
            bufcap *= 2;
        }
        n = recv(fd, buf + len, bufcap - len - 1, 0);
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (!buf) {
        snprintf(msg, cap, "%s %s: out of memory", method, path);
        return -1;
    }
    buf[len] = '\0';
    if (n > 0) {
        sl_free(NULL, buf, bufcap);
        snprintf(msg, cap, "%s %s: reply over %u bytes", method, path, MAX_REPLY);
        return -1;
    }
    int status = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || !sep) {
        sl_free(NULL, buf, bufcap);
        snprintf(msg, cap, "%s %s: %s did not answer in HTTP (%zu bytes)", method, path, addr, len);
        return -1;
    }
    r->status = status;
    r->body = sl_strdup(NULL, sep + 4);
    sl_free(NULL, buf, bufcap);
    if (!r->body) {
        snprintf(msg, cap, "%s %s: out of memory", method, path);
        return -1;
    }
    return 0;
}

/* A string member, "" when absent. */
static const char *jstr(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL ? v : "";
}

/* The "error" of a JSON error body, or the body itself. */
static void print_refusal(const char *what, const reply_t *r)
{
    json_t *j = json_loads(r->body, 0, NULL);
    const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
    fprintf(stderr, "sluice submit: %s: HTTP %d: %s\n", what, r->status, e ? e : r->body);
    /* a refused spec: every problem, one per line */
    json_t *problems = json_object_get(j, "problems");
    for (size_t i = 0; i < json_array_size(problems); i++)
        if (json_is_string(json_array_get(problems, i)))
            fprintf(stderr, "  %s\n", json_string_value(json_array_get(problems, i)));
    json_decref(j);
}

/* A binary resume token as a JSON string of its base64 (RFC 4648, with
 * padding; GnuTLS encodes). @return NULL when out of memory. */
static json_t *base64_json(const unsigned char *in, size_t n)
{
    gnutls_datum_t raw = {.data = (unsigned char *)in, .size = (unsigned)n}, enc = {0};
    if (gnutls_base64_encode2(&raw, &enc) != 0) return NULL;
    json_t *s = json_stringn((const char *)enc.data, enc.size);
    gnutls_free(enc.data);
    return s;
}

/* GET /jobs/{id} every half second until "finished"; prints progress lines
 * on stderr. @return the exit code. */
static int wait_finished(const char *admin, const char *id, double timeout_s)
{
    double t0 = sl_clock_s();
    char path[600], msg[SL_ERROR_MSG_MAX], last[256] = "";
    snprintf(path, sizeof path, "/jobs/%s", id);
    for (;;) {
        reply_t r;
        if (http(admin, "GET", path, NULL, NULL, &r, msg, sizeof msg) != 0) {
            fprintf(stderr, "sluice submit: %s\n", msg);
            return 1;
        }
        if (r.status != 200) {
            print_refusal(path, &r);
            sl_strfree(NULL, r.body);
            return 1;
        }
        json_t *j = json_loads(r.body, 0, NULL);
        sl_strfree(NULL, r.body);
        if (!json_is_object(j)) {
            json_decref(j);
            fprintf(stderr, "sluice submit: GET %s: not a JSON object\n", path);
            return 1;
        }
        bool finished = json_is_true(json_object_get(j, "finished"));
        const char *state = json_string_value(json_object_get(j, "state"));
        if (state != NULL && strcmp(state, "failed") == 0) {
            json_t *f = json_object_get(j, "failure");
            fprintf(stderr, "sluice submit: job %s failed: split %" JSON_INTEGER_FORMAT
                            " (file %s stripe %" JSON_INTEGER_FORMAT "): %s\n",
                    id, json_integer_value(json_object_get(f, "split")),
                    jstr(f, "file"), json_integer_value(json_object_get(f, "stripe")),
                    jstr(f, "message"));
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
    const char *admin = args->admin, *job_path = args->job, *token_file = args->token_file;
    const char **resumes = args->resume.items;
    size_t nresume = args->resume.count;
    const char *sharding = args->sharding;
    uint32_t ranks = (uint32_t)args->ranks, min_w = (uint32_t)args->min_workers;
    uint32_t max_w = (uint32_t)args->max_workers, timeout = (uint32_t)args->timeout;
    bool wait = args->wait;
    if (nresume > MAX_RESUME)
        return usage_error("more than 1024 --resume-token (one per trainer rank): %s",
                           resumes[MAX_RESUME]);
    if (max_w == 0) max_w = min_w;
    if (max_w < min_w) return usage_error("%s", "--max-workers is below --min-workers");

    char msg[SL_ERROR_MSG_MAX];
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
    json_t *body =
        json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", spec, "ranks", (json_int_t)ranks, "sharding",
                  sharding, "min_workers", (json_int_t)min_w, "max_workers", (json_int_t)max_w);
    /* One token keeps the single-token form; several go as
     * "resume_tokens" (one per rank, docs/ADMIN.md). */
    json_t *toks = nresume > 1 ? json_array() : NULL;
    bool toks_ok = nresume <= 1 || (toks != NULL && json_object_set_new(body, "resume_tokens", toks) == 0);
    for (size_t k = 0; toks_ok && k < nresume; k++) {
        size_t tlen = 0;
        char *tok = NULL;
        sl_error_t terr = {0};
        bool read_ok =
            sl_io_read_file(resumes[k], "resume token", MAX_TOKEN, NULL, &tok, &tlen, &terr) ==
            SL_OK;
        /* tlen <= MAX_TOKEN */
        json_t *b64 = read_ok ? base64_json((const unsigned char *)tok, tlen) : NULL;
        if (read_ok) sl_free(NULL, tok, tlen + 1);
        if (!b64) {
            fprintf(stderr, "sluice submit: --resume-token %s\n",
                    read_ok ? "out of memory" : terr.msg);
            toks_ok = false;
            break;
        }
        if (nresume == 1)
            json_object_set_new(body, "resume_token", b64);
        else
            json_array_append_new(toks, b64);
    }
    if (!toks_ok) {
        if (toks == NULL && nresume > 1) fprintf(stderr, "sluice submit: out of memory\n");
        json_decref(body);
        return 1;
    }
    char *token = NULL;
    sl_error_t err = {0};
    if (sl_admin_token_load(token_file, "SLUICE_ADMIN_TOKEN", &token, &err) != SL_OK) {
        fprintf(stderr, "sluice submit: %s\n", err.msg);
        json_decref(body);
        return 1;
    }
    char *text = sl_admin_json_text(NULL, body, JSON_COMPACT);
    json_decref(body);
    reply_t r;
    int rc = text ? http(admin, "POST", "/jobs", token, text, &r, msg, sizeof msg) : -1;
    if (!text) snprintf(msg, sizeof msg, "out of memory");
    sl_strfree(NULL, text);
    sl_admin_token_free(token);
    if (rc != 0) {
        fprintf(stderr, "sluice submit: %s\n", msg);
        return 1;
    }
    if (r.status / 100 != 2) {
        print_refusal("POST /jobs", &r);
        sl_strfree(NULL, r.body);
        return 1;
    }
    printf("%s\n", r.body);
    fflush(stdout);
    json_t *ans = json_loads(r.body, 0, NULL);
    sl_strfree(NULL, r.body);
    int code = 0;
    if (wait) {
        const char *id = json_string_value(json_object_get(ans, "id"));
        if (!id) {
            fprintf(stderr, "sluice submit: the master's answer names no job id\n");
            code = 1;
        } else {
            code = wait_finished(admin, id, timeout);
        }
    }
    json_decref(ans);
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
