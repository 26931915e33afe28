/* Logging for library code: records go to a handler the process sets
 * (src/cli sets one that writes to stderr); library code never writes to
 * stdout or stderr itself (CONVENTIONS.md, rule 14).
 *
 * A record is an event, not a line of prose: a level, a stable snake_case
 * event name ("lease_expired", "split_failed"), a sentence for people, and
 * typed key/value fields ("job", "split", "worker") that a handler can
 * write as one JSON object or one logfmt line without parsing the
 * sentence. Nothing is formatted while the level is off: the sl_log macros
 * test sl_log_enabled (one relaxed atomic load) before evaluating their
 * arguments, so a debug record in a loop costs a load and a branch.
 *
 * The handler and the level are the one piece of process-wide state in
 * src/common: a process sets them once, at start, before its threads run
 * (setting them later is safe, just racy as to which record sees which).
 * Records may be written from any thread; the handler is called under a
 * mutex, one record at a time, so lines never interleave. A handler must
 * not log itself. The default handler drops every record: a library
 * embedded in another program stays silent until it is told where to
 * write. */
#ifndef SLUICE_COMMON_LOG_H
#define SLUICE_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl_log_level {
    SL_LOG_ERROR = 0, /* something failed that an operator must look at */
    SL_LOG_WARN = 1,  /* something went wrong and was handled (a retry, a cut journal tail) */
    SL_LOG_INFO = 2,  /* the life of jobs, leases and workers; never per batch */
    SL_LOG_DEBUG = 3  /* detail for whoever debugs sluice */
} sl_log_level_t;

/* @return "error", "warn", "info" or "debug". */
const char *sl_log_level_name(sl_log_level_t level);

/* The level named name ("error", "warn", "info", "debug"). @return false
 * when name is none of them. */
bool sl_log_level_parse(const char *name, sl_log_level_t *out);

typedef enum sl_log_kv_type { SL_LOG_STR, SL_LOG_U64, SL_LOG_I64, SL_LOG_F64 } sl_log_kv_type_t;

/* One field of a record; key is a snake_case name. */
typedef struct sl_log_kv {
    const char *key;
    sl_log_kv_type_t type;
    union {
        const char *s; /* NULL is written as an empty string */
        uint64_t u;
        int64_t i;
        double f;
    } v;
} sl_log_kv_t;

#define SL_KV_STR(k, x) ((sl_log_kv_t){.key = (k), .type = SL_LOG_STR, .v.s = (x)})
#define SL_KV_U64(k, x) ((sl_log_kv_t){.key = (k), .type = SL_LOG_U64, .v.u = (uint64_t)(x)})
#define SL_KV_I64(k, x) ((sl_log_kv_t){.key = (k), .type = SL_LOG_I64, .v.i = (int64_t)(x)})
#define SL_KV_F64(k, x) ((sl_log_kv_t){.key = (k), .type = SL_LOG_F64, .v.f = (double)(x)})

/* What a handler gets; everything is borrowed for the call. */
typedef struct sl_log_record {
    sl_log_level_t level;
    const char *event;   /* stable snake_case name, never NULL */
    const char *message; /* the sentence for people, never NULL (may be "") */
    const sl_log_kv_t *kv;
    size_t num_kv;
} sl_log_record_t;

typedef void (*sl_log_handler_fn)(void *ctx, const sl_log_record_t *rec);

/* Send records to fn(ctx, record) from now on; fn NULL: drop them (the
 * default). ctx must outlive its use. */
void sl_log_set_handler(sl_log_handler_fn fn, void *ctx);

/* Records above level are not made (default SL_LOG_INFO). */
void sl_log_set_level(sl_log_level_t level);

/* @return whether a record of level would reach the handler. */
bool sl_log_enabled(sl_log_level_t level);

/* Make a record and hand it over (no level test: the macros below do it).
 * fmt and its arguments make the message. */
void sl_log_write(sl_log_level_t level, const char *event, const sl_log_kv_t *kv, size_t num_kv,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* sl_log(SL_LOG_WARN, "journal_tail_cut", "journal %s: ...", path);
 *   a record with a message and no fields. */
#define sl_log(level, event, ...)                                                                  \
    do {                                                                                           \
        if (sl_log_enabled(level)) sl_log_write((level), (event), NULL, 0, __VA_ARGS__);           \
    } while (0)

/* sl_log_kv(SL_LOG_INFO, "lease_expired",
 *           (SL_KV_STR("job", id), SL_KV_U64("split", s)),
 *           "job %s split %u: lease expired", id, s);
 *   a record with fields (the parenthesised list) and a message. */
#define SL_LOG_KV_LIST_(...) __VA_ARGS__
#define sl_log_kv(level, event, fields, ...)                                                       \
    do {                                                                                           \
        if (sl_log_enabled(level)) {                                                               \
            const sl_log_kv_t sl_log_kv_[] = {SL_LOG_KV_LIST_ fields};                             \
            sl_log_write((level), (event), sl_log_kv_, sizeof sl_log_kv_ / sizeof sl_log_kv_[0],   \
                         __VA_ARGS__);                                                             \
        }                                                                                          \
    } while (0)

/* Ways to write a record as one line (no newline) into out (cap bytes,
 * always NUL-terminated, cut short when it does not fit):
 *   TEXT    the message; with no message, the event and its fields as logfmt
 *   LOGFMT  level=warn event=journal_tail_cut msg="..." key=value ...
 * (A JSON line is the handler's to make with a JSON library: src/cli's
 * --log-format json uses jansson.)
 * @return the length the whole line needs (as snprintf). */
typedef enum sl_log_format { SL_LOG_TEXT, SL_LOG_LOGFMT } sl_log_format_t;
size_t sl_log_format(const sl_log_record_t *rec, sl_log_format_t format, char *out, size_t cap);

#endif
