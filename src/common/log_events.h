/* Every log event sluice writes, in one table, as options are: its name
 * (the stable snake_case `event` of a record, common/log.h), level, the
 * processes that write it, its fields and when. Call sites name an event
 * by its entry, SL_EV(LEASE_EXPIRED), never by a string, and `sluice help
 * --markdown "log events"` prints the table into docs/ADMIN.md, so the
 * docs list every event and cannot drift (ctest docs_generated;
 * ops/check-calls refuses an event name written as a literal outside this
 * file and log_events.c).
 *
 * A new event: one X line here (the enum) and one entry in log_events.c,
 * then `ops/gen-docs`. */
#ifndef SLUICE_COMMON_LOG_EVENTS_H
#define SLUICE_COMMON_LOG_EVENTS_H

/* X(ID): the events, in the order the docs list them. */
#define SL_LOG_EVENTS(X)                                                                           \
    X(JOB_SUBMITTED)                                                                               \
    X(JOB_REMOVED)                                                                                 \
    X(PARQUET_PLANNED)                                                                             \
    X(AUTOSCALE)                                                                                   \
    X(WORKER_JOINED)                                                                               \
    X(WORKER_LEFT)                                                                                 \
    X(LEASE_GRANTED)                                                                               \
    X(LEASE_EXPIRED)                                                                               \
    X(LEASE_SHARED)                                                                                \
    X(SHARE_DETACHED)                                                                              \
    X(SHARE_RELEASED)                                                                              \
    X(SPLIT_FAILED)                                                                                \
    X(EPOCH_DONE)                                                                                  \
    X(JOB_FINISHED)                                                                                \
    X(JOB_FAILED)                                                                                  \
    X(JOURNAL_TAIL_CUT)                                                                            \
    X(STATE_FAILED)                                                                                \
    X(STATE_RECOVERED)                                                                             \
    X(STATE_RECOVERY_FAILED)                                                                       \
    X(FINAL_SYNC_FAILED)                                                                           \
    X(OUT_OF_MEMORY)                                                                               \
    X(ASSERTION_FAILED)                                                                            \
    X(KAFKA_PARTITION_ADDED)                                                                       \
    X(KAFKA_GROUP_COMMIT)                                                                          \
    X(KAFKA_WATCH_FAILED)                                                                          \
    X(EXECUTOR_SCALED)                                                                             \
    X(EXECUTOR_REQUEST_FAILED)                                                                     \
    X(EXECUTOR_RECOVERED)                                                                          \
    X(AUTOCACHE_DIR)                                                                               \
    X(AUTOCACHE_DECIDED)                                                                           \
    X(AUTOCACHE_STORE_FAILED)                                                                      \
    X(CACHE_DROPPED)                                                                               \
    X(CACHE_EVICTED)                                                                               \
    X(REGISTERED)                                                                                  \
    X(MASTER_RETRY)                                                                                \
    X(HEARTBEAT_FAILED)                                                                            \
    X(LEASE_RECEIVED)                                                                              \
    X(LEASE_REVOKED)                                                                               \
    X(RETIRED)                                                                                     \
    X(WEIGHT_LABEL)                                                                                \
    X(SPLIT_READ_REPORT_FAILED)                                                                    \
    X(SPLIT_FAILED_REPORT_FAILED)                                                                  \
    X(CACHE_WRITE_FAILED)                                                                          \
    X(CACHE_FALLBACK)                                                                              \
    X(WORKER_SHM_OFF)                                                                              \
    X(WORKER_SHM_REFUSED)                                                                          \
    X(KAFKA_DEAD_LETTER_FAILED)                                                                    \
    X(KAFKA_DELIVERY_FAILED)                                                                       \
    X(KAFKA_LOG)                                                                                   \
    X(STORE_CREDENTIALS)                                                                           \
    X(STORE_CREDENTIALS_REFRESH_FAILED)                                                            \
    X(TRAINER_SHM_OFF)                                                                             \
    X(TRAINER_ORDER_STALLED)

typedef enum sl_log_event {
#define SL_LOG_EVENT_ENUM_(id) SL_EV_##id,
    SL_LOG_EVENTS(SL_LOG_EVENT_ENUM_)
#undef SL_LOG_EVENT_ENUM_
        SL_EV_COUNT
} sl_log_event_t;

/* One event's entry: strings for people (the level as written at the call
 * site, which may depend on the case: "warn (debug for the last try)"). */
typedef struct sl_log_event_def {
    const char *name;   /* the record's event */
    const char *level;  /* error, warn, info, debug */
    const char *from;   /* the processes (or library) that write it */
    const char *fields; /* its fields, in order */
    const char *when;
} sl_log_event_def_t;

extern const sl_log_event_def_t sl_log_event_defs[SL_EV_COUNT];

/* The event name of entry ID (SL_EV(LEASE_EXPIRED): "lease_expired"). */
#define SL_EV(id) (sl_log_event_defs[SL_EV_##id].name)

#endif
