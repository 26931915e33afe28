/* Every metric sluice serves, in one table, as options are: its name,
 * type, labels and help, and the process whose /metrics has it (the
 * prefix: sluice_master_, sluice_worker_, sluice_trainer_, sluice_store_).
 * A family is written from its entry (common/prom.h: sl_prom_family_def,
 * sl_prom_sample_def), never from a name written as a string (ops/check-calls),
 * and `sluice help --markdown "metrics master"` (worker, trainer, store)
 * prints the tables of docs/METRICS.md (ctest docs_generated).
 *
 * A new metric: one X line here and one entry in metrics.c, then
 * `ops/gen-docs`. */
#ifndef SLUICE_COMMON_METRICS_H
#define SLUICE_COMMON_METRICS_H

/* X(ID): the metrics, by process, in the order each process writes them. */
#define SL_METRICS(X)                                                                              \
    X(MASTER_EXECUTOR_REQUESTS_TOTAL)                                                              \
    X(MASTER_EXECUTOR_REPLICAS)                                                                    \
    X(MASTER_EXECUTOR_FAILURES)                                                                    \
    X(MASTER_EXECUTOR_SPAWNS_TOTAL)                                                                \
    X(MASTER_EXECUTOR_SPAWN_ERRORS_TOTAL)                                                          \
    X(MASTER_EXECUTOR_EXITS_TOTAL)                                                                 \
    X(MASTER_EXECUTOR_RESTARTS_DELAYED_TOTAL)                                                      \
    X(MASTER_EXECUTOR_BACKOFF_SECONDS)                                                             \
    X(MASTER_JOURNAL_SYNC_SECONDS)                                                                 \
    X(MASTER_JOBS)                                                                                 \
    X(MASTER_WORKERS)                                                                              \
    X(MASTER_CLIENTS)                                                                              \
    X(MASTER_CLIENT_RECORDS)                                                                       \
    X(MASTER_CLIENTS_EVICTED_TOTAL)                                                                \
    X(MASTER_LEASES_GRANTED_TOTAL)                                                                 \
    X(MASTER_LEASE_EXPIRIES_TOTAL)                                                                 \
    X(MASTER_COMMITS_TOTAL)                                                                        \
    X(MASTER_SPLIT_FAILURES_TOTAL)                                                                 \
    X(MASTER_LEASE_REVOCATIONS_TOTAL)                                                              \
    X(MASTER_WORKER_IDS_IN_USE_TOTAL)                                                              \
    X(MASTER_AUTH_FAILURES_TOTAL)                                                                  \
    X(MASTER_CONNECTIONS_CLOSED_TOTAL)                                                             \
    X(MASTER_CONNECTIONS)                                                                          \
    X(MASTER_JOURNAL_SYNCS_TOTAL)                                                                  \
    X(MASTER_JOURNAL_COMPACTIONS_TOTAL)                                                            \
    X(MASTER_STATE_RECOVERIES_TOTAL)                                                               \
    X(MASTER_MEMORY_BYTES)                                                                         \
    X(MASTER_JOB_PLAN_INFO)                                                                        \
    X(MASTER_SPLITS)                                                                               \
    X(MASTER_COMMITTED_ROWS)                                                                       \
    X(MASTER_SAMPLES_COMMITTED_TOTAL)                                                              \
    X(MASTER_TRAINER_WAIT_RATIO)                                                                   \
    X(MASTER_WORKER_BUSY_RATIO)                                                                    \
    X(MASTER_WORKER_QUEUE_BATCHES)                                                                 \
    X(MASTER_WORKER_MEMORY_BYTES)                                                                  \
    X(MASTER_DESIRED_WORKERS)                                                                      \
    X(MASTER_GRANTED_WORKERS)                                                                      \
    X(MASTER_JOB_FAILED)                                                                           \
    X(MASTER_JOB_FINISHED)                                                                         \
    X(MASTER_SKIPPED_SPLITS_TOTAL)                                                                 \
    X(MASTER_SKIPPED_ROWS_TOTAL)                                                                   \
    X(MASTER_EQUAL_DROPPED_BATCHES_TOTAL)                                                          \
    X(MASTER_EQUAL_DROPPED_SAMPLES_TOTAL)                                                          \
    X(MASTER_PARQUET_ROW_GROUPS_SKIPPED)                                                           \
    X(MASTER_PARQUET_ROWS_SKIPPED)                                                                 \
    X(MASTER_JOB_SHARES_WITH)                                                                      \
    X(MASTER_SHARED_BATCHES)                                                                       \
    X(MASTER_SHARED_BYTES_SAVED)                                                                   \
    X(MASTER_SHARED_CPU_SECONDS_SAVED)                                                             \
    X(MASTER_AUTOCACHE_STATE)                                                                      \
    X(MASTER_AUTOCACHE_SAMPLES)                                                                    \
    X(MASTER_AUTOCACHE_FALLBACKS)                                                                  \
    X(MASTER_AUTOCACHE_FILES_WRITTEN)                                                              \
    X(MASTER_KAFKA_LAG_RECORDS)                                                                    \
    X(MASTER_KAFKA_WATCH_ROUNDS_TOTAL)                                                             \
    X(MASTER_KAFKA_WATCH_ERRORS_TOTAL)                                                             \
    X(MASTER_KAFKA_GROUP_COMMITS_TOTAL)                                                            \
    X(WORKER_KAFKA_RECORD_AGE_SECONDS)                                                             \
    X(WORKER_DEDUP_FACTOR)                                                                         \
    X(WORKER_BUSY_SECONDS_TOTAL)                                                                   \
    X(WORKER_CONNECTIONS_CLOSED_TOTAL)                                                             \
    X(WORKER_ROWS_READ_TOTAL)                                                                      \
    X(WORKER_ROWS_KEPT_TOTAL)                                                                      \
    X(WORKER_KAFKA_RECORDS_TOTAL)                                                                  \
    X(WORKER_KAFKA_BAD_RECORDS_TOTAL)                                                              \
    X(WORKER_KAFKA_PAUSES_TOTAL)                                                                   \
    X(WORKER_KAFKA_FETCHER_WAKES_TOTAL)                                                            \
    X(WORKER_KAFKA_CHUNKS_HANDED_BACK_TOTAL)                                                       \
    X(WORKER_KAFKA_DEAD_LETTER_RECORDS_TOTAL)                                                      \
    X(WORKER_KAFKA_DEAD_LETTER_FAILURES_TOTAL)                                                     \
    X(WORKER_PARQUET_ROW_GROUPS_SKIPPED)                                                           \
    X(WORKER_PARQUET_ROWS_SKIPPED)                                                                 \
    X(WORKER_SPLITS_TOTAL)                                                                         \
    X(WORKER_SPLITS_FAILED_TOTAL)                                                                  \
    X(WORKER_BATCHES_TOTAL)                                                                        \
    X(WORKER_SAMPLES_TOTAL)                                                                        \
    X(WORKER_BYTES_ENCODED_TOTAL)                                                                  \
    X(WORKER_BYTES_EXPANDED_TOTAL)                                                                 \
    X(WORKER_BACKPRESSURE_SECONDS_TOTAL)                                                           \
    X(WORKER_BATCHES_SENT_TOTAL)                                                                   \
    X(WORKER_BATCHES_ACKED_TOTAL)                                                                  \
    X(WORKER_SAMPLES_ACKED_TOTAL)                                                                  \
    X(WORKER_BYTES_SENT_TOTAL)                                                                     \
    X(WORKER_SHM_BATCHES_TOTAL)                                                                    \
    X(WORKER_SHM_BYTES_TOTAL)                                                                      \
    X(WORKER_SHM_FALLBACKS_TOTAL)                                                                  \
    X(WORKER_SHM_ATTACHED_TOTAL)                                                                   \
    X(WORKER_SHM_REFUSED_TOTAL)                                                                    \
    X(WORKER_SHM_HELD_TOTAL)                                                                       \
    X(WORKER_SHM_RELEASED_TOTAL)                                                                   \
    X(WORKER_SHM_HELD_FREED_TOTAL)                                                                 \
    X(WORKER_SHM_CAPACITY_BYTES)                                                                   \
    X(WORKER_SHM_USED_BYTES)                                                                       \
    X(WORKER_REDELIVERIES_TOTAL)                                                                   \
    X(WORKER_BATCHES_DROPPED_TOTAL)                                                                \
    X(WORKER_BAD_FRAMES_TOTAL)                                                                     \
    X(WORKER_AUTH_FAILURES_TOTAL)                                                                  \
    X(WORKER_CLIENTS)                                                                              \
    X(WORKER_QUEUE_READY_BATCHES)                                                                  \
    X(WORKER_ORDER_HELD_BATCHES)                                                                   \
    X(WORKER_ORDER_RANK_QUEUED_BATCHES)                                                            \
    X(WORKER_ORDER_WINDOW_WAITS_TOTAL)                                                             \
    X(WORKER_MEMORY_USED_BYTES)                                                                    \
    X(WORKER_MEMORY_PEAK_BYTES)                                                                    \
    X(WORKER_MEMORY_LIMIT_BYTES)                                                                   \
    X(WORKER_FINISHED)                                                                             \
    X(WORKER_LEASES_TOTAL)                                                                         \
    X(WORKER_LEASES_HELD)                                                                          \
    X(WORKER_SPLIT_READS_TOTAL)                                                                    \
    X(WORKER_LEASES_REVOKED_TOTAL)                                                                 \
    X(WORKER_HEARTBEATS_TOTAL)                                                                     \
    X(WORKER_MASTER_RECONNECTS_TOTAL)                                                              \
    X(WORKER_START_TIME_SECONDS)                                                                   \
    X(WORKER_WAITING)                                                                              \
    X(TRAINER_FRESHNESS_SECONDS)                                                                   \
    X(TRAINER_START_TIME_SECONDS)                                                                  \
    X(TRAINER_BATCHES_TOTAL)                                                                       \
    X(TRAINER_SAMPLES_TOTAL)                                                                       \
    X(TRAINER_BYTES_TOTAL)                                                                         \
    X(TRAINER_WAIT_SECONDS_TOTAL)                                                                  \
    X(TRAINER_RECONNECTS_TOTAL)                                                                    \
    X(TRAINER_QUEUED_BATCHES)                                                                      \
    X(TRAINER_WORKERS)                                                                             \
    X(TRAINER_COMMITTED_BATCHES_TOTAL)                                                             \
    X(TRAINER_DROPPED_BATCHES_TOTAL)                                                               \
    X(TRAINER_SHM_BATCHES_TOTAL)                                                                   \
    X(TRAINER_SOCKET_BATCHES_TOTAL)                                                                \
    X(STORE_REQUESTS_TOTAL)                                                                        \
    X(STORE_REQUEST_SECONDS)                                                                       \
    X(STORE_INFLIGHT_BYTES)                                                                        \
    X(STORE_RETRIES_TOTAL)                                                                         \
    X(STORE_FAILURES_TOTAL)                                                                        \
    X(STORE_BYTES_READ_TOTAL)                                                                      \
    X(STORE_BYTES_WRITTEN_TOTAL)

typedef enum sl_metric {
#define SL_METRIC_ENUM_(id) SL_M_##id,
    SL_METRICS(SL_METRIC_ENUM_)
#undef SL_METRIC_ENUM_
        SL_M_COUNT
} sl_metric_t;

/* One metric's entry. A histogram's samples are name_bucket (with le),
 * name_sum and name_count. */
typedef struct sl_metric_def {
    const char *name;
    const char *type;   /* counter, gauge, histogram */
    const char *labels; /* for the docs: the labels its samples carry */
    const char *help;   /* its # HELP line */
} sl_metric_def_t;

extern const sl_metric_def_t sl_metric_defs[SL_M_COUNT];

/* The entry of ID: SL_M(MASTER_JOBS) is sluice_master_jobs's. */
#define SL_M(id) (&sl_metric_defs[SL_M_##id])

#endif
