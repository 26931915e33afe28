/* The log handler, levels and the line formats (log.h). */
#include "common/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* A message longer than this is cut: records are lines, not documents. */
#define MESSAGE_MAX 2048

static atomic_int max_level = SL_LOG_INFO;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards handler, handler_ctx */
static sl_log_handler_fn handler;
static void *handler_ctx;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *sl_log_level_name(sl_log_level_t level)
{
    return (unsigned)level <= SL_LOG_DEBUG ? level_names[level] : "?";
}

bool sl_log_level_parse(const char *name, sl_log_level_t *out)
{
    for (int l = SL_LOG_ERROR; name != NULL && l <= SL_LOG_DEBUG; l++)
        if (strcmp(name, level_names[l]) == 0) {
            *out = (sl_log_level_t)l;
            return true;
        }
    return false;
}

void sl_log_set_handler(sl_log_handler_fn fn, void *ctx)
{
    pthread_mutex_lock(&mu);
    handler = fn;
    handler_ctx = ctx;
    pthread_mutex_unlock(&mu);
}

void sl_log_set_level(sl_log_level_t level)
{
    atomic_store_explicit(&max_level, (int)level, memory_order_relaxed);
}

bool sl_log_enabled(sl_log_level_t level)
{
    return (int)level <= atomic_load_explicit(&max_level, memory_order_relaxed);
}

void sl_log_write(sl_log_level_t level, const char *event, const sl_log_kv_t *kv, size_t num_kv,
                  const char *fmt, ...)
{
    char msg[MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_log_record_t rec = {.level = level,
                           .event = event != NULL ? event : "log",
                           .message = msg,
                           .kv = kv,
                           .num_kv = kv != NULL ? num_kv : 0};
    pthread_mutex_lock(&mu);
    if (handler != NULL) handler(handler_ctx, &rec);
    pthread_mutex_unlock(&mu);
}

/* ---- line formats ---------------------------------------------------------------- */

/* An snprintf-like sink: counts what the whole line needs, writes what fits. */
typedef struct sink {
    char *out;
    size_t cap, len;
} sink;

static void put(sink *s, const char *p, size_t n)
{
    if (s->len < s->cap) {
        size_t room = s->cap - 1 - s->len;
        memcpy(s->out + s->len, p, n < room ? n : room);
    }
    s->len += n;
}

static void puts_(sink *s, const char *p)
{
    put(s, p, strlen(p));
}

static void putf(sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sink *s, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) put(s, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A quoted logfmt value: quotes, backslashes and control bytes escaped
 * (as JSON escapes them); other bytes as given. */
static void put_quoted(sink *s, const char *v)
{
    put(s, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(s, e, 2);
        } else if (*p == '\n') {
            puts_(s, "\\n");
        } else if (*p == '\t') {
            puts_(s, "\\t");
        } else if (*p < 0x20) {
            putf(s, "\\u%04x", *p);
        } else {
            put(s, (const char *)p, 1);
        }
    }
    put(s, "\"", 1);
}

/* A logfmt value: bare when it has no space, '=', quote, backslash or
 * control byte and is not empty; else quoted with those escaped. */
static void put_logfmt_str(sink *s, const char *v)
{
    bool bare = *v != '\0';
    for (const unsigned char *p = (const unsigned char *)v; bare && *p; p++)
        bare = *p > ' ' && *p != '=' && *p != '"' && *p != '\\';
    if (bare) {
        puts_(s, v);
        return;
    }
    put_quoted(s, v);
}

static void put_value(sink *s, const sl_log_kv_t *kv)
{
    switch (kv->type) {
    case SL_LOG_STR:
        put_logfmt_str(s, kv->v.s != NULL ? kv->v.s : "");
        break;
    case SL_LOG_U64:
        putf(s, "%" PRIu64, kv->v.u);
        break;
    case SL_LOG_I64:
        putf(s, "%" PRId64, kv->v.i);
        break;
    case SL_LOG_F64:
        if (kv->v.f != kv->v.f || kv->v.f > 1e308 || kv->v.f < -1e308)
            puts_(s, "NaN");
        else
            putf(s, "%.17g", kv->v.f);
        break;
    }
}

static void put_logfmt(sink *s, const sl_log_record_t *rec, bool with_level)
{
    if (with_level) {
        puts_(s, "level=");
        puts_(s, sl_log_level_name(rec->level));
        put(s, " ", 1);
    }
    puts_(s, "event=");
    put_logfmt_str(s, rec->event);
    if (with_level && rec->message[0] != '\0') {
        puts_(s, " msg=");
        put_logfmt_str(s, rec->message);
    }
    for (size_t i = 0; i < rec->num_kv; i++) {
        put(s, " ", 1);
        puts_(s, rec->kv[i].key);
        put(s, "=", 1);
        put_value(s, &rec->kv[i]);
    }
}

size_t sl_log_format(const sl_log_record_t *rec, sl_log_format_t format, char *out, size_t cap)
{
    sink s = {out, cap, 0};
    switch (format) {
    case SL_LOG_TEXT:
        if (rec->message[0] != '\0')
            puts_(&s, rec->message);
        else
            put_logfmt(&s, rec, false);
        break;
    case SL_LOG_LOGFMT:
        put_logfmt(&s, rec, true);
        break;
    }
    if (cap > 0) out[s.len < cap ? s.len : cap - 1] = '\0';
    return s.len;
}
