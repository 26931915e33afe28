/* The log options of the long-running commands (`sluice master`, `sluice
 * worker`): --log-level and --log-format, and the handlers that write the
 * libraries' records (common/log.h) on stderr, one line each:
 *   text    "sluice <cmd>: <message>", for people (the default; main.c sets it)
 *   logfmt  ts=... cmd=master level=info event=job_submitted msg="..." job=...
 *   json    {"ts":"...","level":"info","cmd":"master","event":"job_submitted",
 *            "msg":"...","job":"...",...}: one object a line, made by jansson
 * The events and their fields: docs/ADMIN.md "Logs". */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common/log.h"

#define LOGA(field) offsetof(sl_cli_log_args_t, field)

static const sl_cli_opt_t log_opts[] = {
    {"log-level", SL_CLI_ENUM, "error|warn|info|debug", "info", NULL, 0, 0, 0, LOGA(level),
     "write log records of this level and above (info: the life of jobs, leases and workers, "
     "never one per batch)"},
    {"log-format", SL_CLI_ENUM, "text|logfmt|json", "text", NULL, 0, 0, 0, LOGA(format),
     "text: a sentence a line for people; logfmt: key=value pairs; json: one JSON object a line "
     "(docs/ADMIN.md, \"Logs\")"},
};

const sl_cli_group_t sl_cli_log_group = {"logging", "logging options", log_opts,
                                         sizeof log_opts / sizeof log_opts[0]};

/* The wall-clock time as RFC 3339 in UTC with milliseconds. */
static void timestamp(char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* One write per line, so that lines of concurrent processes sharing the
 * stream (a master's local workers) do not mix. */
static void write_line(char *line, size_t len, size_t cap)
{
    if (len > cap - 2) len = cap - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}

static void log_logfmt(void *ctx, const sl_log_record_t *rec)
{
    char line[4096], ts[40];
    timestamp(ts, sizeof ts);
    int n = snprintf(line, sizeof line, "ts=%s cmd=%s ", ts, (const char *)ctx);
    if (n < 0 || (size_t)n >= sizeof line) n = 0;
    size_t len =
        (size_t)n + sl_log_format(rec, SL_LOG_LOGFMT, line + n, sizeof line - (size_t)n - 1);
    write_line(line, len, sizeof line);
}

static json_t *kv_json(const sl_log_kv_t *kv)
{
    switch (kv->type) {
    case SL_LOG_STR:
        return json_string(kv->v.s != NULL ? kv->v.s : "");
    case SL_LOG_U64:
        return json_integer((json_int_t)kv->v.u);
    case SL_LOG_I64:
        return json_integer((json_int_t)kv->v.i);
    case SL_LOG_F64:
        return json_real(kv->v.f);
    }
    return NULL;
}

/* A string for a JSON value: jansson refuses text that is not UTF-8 (a
 * path or a peer's message may hold any byte), so such a value is written
 * with every byte above 0x7e as '?' rather than lost with its line. */
static json_t *text_json(const char *s, char *scratch, size_t cap)
{
    json_t *j = json_string(s);
    if (j != NULL) return j;
    snprintf(scratch, cap, "%s", s);
    for (char *p = scratch; *p != '\0'; p++)
        if ((unsigned char)*p > 0x7e) *p = '?';
    return json_string(scratch);
}

static void log_json(void *ctx, const sl_log_record_t *rec)
{
    char ts[40], scratch[2048], line[8192];
    timestamp(ts, sizeof ts);
    json_t *o = json_object();
    if (o == NULL) return;
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "level", json_string(sl_log_level_name(rec->level)));
    json_object_set_new(o, "cmd", json_string((const char *)ctx));
    json_object_set_new(o, "event", json_string(rec->event));
    json_object_set_new(o, "msg", text_json(rec->message, scratch, sizeof scratch));
    for (size_t i = 0; i < rec->num_kv; i++) {
        const sl_log_kv_t *kv = &rec->kv[i];
        /* the five keys above stay what they are; no library field uses them */
        if (json_object_get(o, kv->key) != NULL) continue;
        json_object_set_new(o, kv->key,
                            kv->type == SL_LOG_STR && kv->v.s != NULL
                                ? text_json(kv->v.s, scratch, sizeof scratch)
                                : kv_json(kv));
    }
    size_t n = json_dumpb(o, line, sizeof line - 1, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (n > sizeof line - 1) {
        /* too long for one line: the message goes, the event and fields stay */
        json_object_set_new(o, "msg", json_string("(message too long)"));
        n = json_dumpb(o, line, sizeof line - 1, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    json_decref(o);
    if (n > 0 && n <= sizeof line - 1) write_line(line, n, sizeof line);
}

void sl_cli_log_apply(const char *cmd, const sl_cli_log_args_t *args)
{
    static char name[32];
    snprintf(name, sizeof name, "%s", cmd);
    sl_log_level_t level = SL_LOG_INFO;
    if (args->level != NULL) sl_log_level_parse(args->level, &level);
    sl_log_set_level(level);
    if (args->format != NULL && strcmp(args->format, "json") == 0)
        sl_log_set_handler(log_json, name);
    else if (args->format != NULL && strcmp(args->format, "logfmt") == 0)
        sl_log_set_handler(log_logfmt, name);
    else
        sl_cli_log_to_stderr(cmd);
}
