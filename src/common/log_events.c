/* The log events' table (log_events.h): what docs/ADMIN.md "Logs" lists. */
#include "common/log_events.h"

const sl_log_event_def_t sl_log_event_defs[SL_EV_COUNT] = {
    [SL_EV_JOB_SUBMITTED] =
        {"job_submitted", "info", "master",
         "job, splits, epochs, ranks, sharding, min_workers, max_workers, resume_tokens",
         "`POST /jobs` accepted (journaled)"},
    [SL_EV_JOB_REMOVED] = {"job_removed", "info", "master", "job", "`DELETE /jobs/{id}`"},
    [SL_EV_PARQUET_PLANNED] = {"parquet_planned", "info", "master",
                               "job, splits, row_groups, row_groups_skipped",
                               "a Parquet job's splits were planned from the files' footers (row "
                               "groups skipped by their statistics)"},
    [SL_EV_AUTOSCALE] = {"autoscale", "info", "master",
                         "job, from, to (desired workers), by (submit, autoscaler, operator), "
                         "trainer_wait, worker_busy, reason",
                         "the job's desired worker count changed, and why"},
    [SL_EV_WORKER_JOINED] = {"worker_joined", "info", "master",
                             "worker, job, address, admin, incarnation (hex), leases_held",
                             "a worker process registered (again)"},
    [SL_EV_WORKER_LEFT] =
        {"worker_left", "info", "master", "worker, job, leases",
         "its control connection closed; its leases stay its own until they expire"},
    [SL_EV_LEASE_GRANTED] = {"lease_granted", "info", "master",
                             "job, split, epoch, generation, worker, rows",
                             "a split leased (once a split and epoch, again after an expiry)"},
    [SL_EV_LEASE_EXPIRED] =
        {"lease_expired", "warn", "master", "job, split, epoch, generation, worker",
         "no heartbeat named the lease for the lease timeout; the split is pending again"},
    [SL_EV_LEASE_SHARED] =
        {"lease_shared", "info (master), debug (worker)", "master, worker",
         "job, split, epoch, generation, worker, with",
         "a lease rides on another job's read of the same split (a shared pass)"},
    [SL_EV_SHARE_DETACHED] =
        {"share_detached", "info", "master, worker",
         "job, split, worker, epoch, batches, bytes, window",
         "a job of a shared pass fell behind its window and reads the split on its own"},
    [SL_EV_SHARE_RELEASED] = {"share_released", "info", "worker",
                              "job, split, epoch, with, stalled_ms",
                              "a job let go of a shared read it waited on too long"},
    [SL_EV_SPLIT_FAILED] =
        {"split_failed", "warn", "master, worker",
         "job, split, file, stripe, error; the master's also epoch, worker, outcome",
         "a worker could not read a split (\"Failed jobs\" above)"},
    [SL_EV_EPOCH_DONE] = {"epoch_done", "info", "master", "job, epoch (from 0), epochs, rows",
                          "every row of the epoch committed"},
    [SL_EV_JOB_FINISHED] = {"job_finished", "info", "master", "job, epochs, batches, samples",
                            "every epoch committed"},
    [SL_EV_JOB_FAILED] = {"job_failed", "error", "master",
                          "job, split, epoch, file, stripe, error, reason",
                          "a split failed `--max-split-failures` times"},
    [SL_EV_JOURNAL_TAIL_CUT] =
        {"journal_tail_cut", "warn", "master", "offset, bytes",
         "replay found a torn or corrupt record at the journal's end and cut it off"},
    [SL_EV_STATE_FAILED] =
        {"state_failed", "error", "master", "reason",
         "a change could not be made durable: the master refuses changes (`/readyz` 503)"},
    [SL_EV_STATE_RECOVERED] = {"state_recovered", "info", "master", "reason, records",
                               "the disk came back: the state directory was replayed again and "
                               "the master accepts changes (`/readyz` 200)"},
    [SL_EV_STATE_RECOVERY_FAILED] =
        {"state_recovery_failed", "warn", "master", "error, retry_ms",
         "a try to open the state directory again after a failure failed; tried again with "
         "backoff"},
    [SL_EV_FINAL_SYNC_FAILED] = {"final_sync_failed", "error", "master", "reason",
                                 "the last journal sync at shutdown failed"},
    [SL_EV_OUT_OF_MEMORY] = {"out_of_memory", "warn", "master", "error",
                             "a request was refused for want of memory"},
    [SL_EV_ASSERTION_FAILED] = {"assertion_failed", "error", "any (test and sanitizer builds)",
                                "the message: file, line, the condition and what it means",
                                "an SL_ASSERT invariant did not hold; the process aborts"},
    [SL_EV_KAFKA_PARTITION_ADDED] = {"kafka_partition_added", "info", "master",
                                     "job, topic, partition, start",
                                     "a stream job's topic grew a partition; it is read too"},
    [SL_EV_KAFKA_GROUP_COMMIT] =
        {"kafka_group_commit", "debug", "master", "job",
         "the committed offsets were mirrored to the job's Kafka consumer group"},
    [SL_EV_KAFKA_WATCH_FAILED] =
        {"kafka_watch_failed", "warn", "master", "job",
         "the Kafka watcher could not read a stream job's topics (retried next round)"},
    [SL_EV_EXECUTOR_SCALED] = {"executor_scaled", "info", "master", "deployment, to, desired, from",
                               "the Kubernetes executor set the workers' Deployment's replicas"},
    [SL_EV_EXECUTOR_REQUEST_FAILED] =
        {"executor_request_failed", "warn", "master",
         "deployment, http_status, error, failures, retry_ms",
         "a request to the Kubernetes API server failed (retried with back-off)"},
    [SL_EV_EXECUTOR_RECOVERED] = {"executor_recovered", "info", "master", "deployment, failures",
                                  "the API server answers again after failures"},
    [SL_EV_AUTOCACHE_DIR] =
        {"autocache_dir", "info", "master", "dir, read_mb_per_s, max_bytes",
         "the autocache's directory, its measured read speed and its size limit"},
    [SL_EV_AUTOCACHE_DECIDED] =
        {"autocache_decided", "info", "master", "job, decision, samples",
         "the autocache decided whether a job's epochs read from the cache"},
    [SL_EV_AUTOCACHE_STORE_FAILED] = {"autocache_store_failed", "warn", "master", "error",
                                      "an autocache decision could not be journaled"},
    [SL_EV_CACHE_DROPPED] = {"cache_dropped", "info", "master", "dir, files",
                             "a job's cache files were removed (the job is gone)"},
    [SL_EV_CACHE_EVICTED] = {"cache_evicted", "info", "master", "file, bytes",
                             "a cache file was removed to stay under the cache's size limit"},
    [SL_EV_REGISTERED] = {"registered", "info", "worker",
                          "worker, master, job, reconnect, lease_timeout_ms",
                          "the worker (re)registered with its master"},
    [SL_EV_MASTER_RETRY] = {"master_retry", "warn", "worker", "master, retry_ms, error",
                            "the master cannot be reached; the worker tries again after retry_ms"},
    [SL_EV_HEARTBEAT_FAILED] = {"heartbeat_failed", "warn (debug for the last one)", "worker",
                                "error",
                                "a heartbeat to the master failed (the connection is made again)"},
    [SL_EV_LEASE_RECEIVED] = {"lease_received", "debug", "worker",
                              "job, split, epoch, generation, rows", "a lease arrived"},
    [SL_EV_LEASE_REVOKED] = {"lease_revoked", "info", "worker", "job, split, epoch, generation",
                             "the master took a lease back"},
    [SL_EV_RETIRED] = {"retired", "info", "worker", "job",
                       "the autoscaler retired this worker: it finishes what it holds and exits"},
    [SL_EV_WEIGHT_LABEL] =
        {"weight_label", "info", "worker", "job, label",
         "the job's negative_downsample filter adds a label column (the sample weights) after the "
         "table's labels, said when the worker starts the job, before its first batch"},
    [SL_EV_SPLIT_READ_REPORT_FAILED] =
        {"split_read_report_failed", "warn", "worker", "split, error",
         "the worker could not tell the master a split was read (the lease expires instead)"},
    [SL_EV_SPLIT_FAILED_REPORT_FAILED] = {"split_failed_report_failed", "warn", "worker",
                                          "split, error",
                                          "the worker could not tell the master a split failed"},
    [SL_EV_CACHE_WRITE_FAILED] =
        {"cache_write_failed", "warn", "worker", "file, error",
         "a split's cache file could not be written (the split is read from the table next time)"},
    [SL_EV_CACHE_FALLBACK] = {"cache_fallback", "warn", "worker", "file, split, error",
                              "a cache file could not be read: the split is read from the table"},
    [SL_EV_WORKER_SHM_OFF] = {"worker_shm_off", "warn", "worker", "",
                              "no shared-memory frame heap: every batch goes over the socket"},
    [SL_EV_WORKER_SHM_REFUSED] =
        {"worker_shm_refused", "warn", "worker", "",
         "a trainer's shared-memory attach was refused: its batches go over the socket"},
    [SL_EV_KAFKA_DEAD_LETTER_FAILED] =
        {"kafka_dead_letter_failed", "warn", "worker",
         "topic, partition, offset, failed, outstanding",
         "a bad record could not be produced to (or was not delivered by) the dead-letter topic"},
    [SL_EV_KAFKA_DELIVERY_FAILED] = {"kafka_delivery_failed", "warn", "kafka (producer)",
                                     "topic, partition, failed",
                                     "the broker did not take a produced record"},
    [SL_EV_KAFKA_LOG] = {"kafka_log", "librdkafka's level", "kafka (producer)", "facility, topic",
                         "a line of librdkafka's own log"},
    [SL_EV_STORE_CREDENTIALS] = {"store_credentials", "debug", "store", "source, expires_s",
                                 "object-store credentials were loaded or refreshed"},
    [SL_EV_STORE_CREDENTIALS_REFRESH_FAILED] =
        {"store_credentials_refresh_failed", "warn", "store", "source, error",
         "refreshing the credentials failed (the old ones are used until they expire)"},
    [SL_EV_TRAINER_SHM_OFF] =
        {"trainer_shm_off", "debug", "trainer", "",
         "the trainer client reads a worker's batches over the socket, not shared memory"},
    [SL_EV_TRAINER_ORDER_STALLED] =
        {"trainer_order_stalled", "warn", "trainer", "rank, epoch, g, held, waited_s",
         "a rank of a job in the deterministic order has waited long for its next batch "
         "(logged once a wait; the workers' sluice_worker_order_rank_queued_batches names "
         "the rank that stopped reading, docs/METRICS.md)"},
};
