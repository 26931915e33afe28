/* The metrics' table (metrics.h): what docs/METRICS.md lists. */
#include "common/metrics.h"

const sl_metric_def_t sl_metric_defs[SL_M_COUNT] = {
    [SL_M_MASTER_EXECUTOR_REQUESTS_TOTAL] = {"sluice_master_executor_requests_total", "counter",
                                             "result",
                                             "Requests to the Kubernetes API server, by result."},
    [SL_M_MASTER_EXECUTOR_REPLICAS] =
        {"sluice_master_executor_replicas", "gauge", "state",
         "Replicas of the workers' Deployment: desired (the jobs' granted workers), applied (as "
         "last set or read; -1: not known yet)."},
    [SL_M_MASTER_EXECUTOR_FAILURES] =
        {"sluice_master_executor_failures", "gauge", "",
         "Requests to the API server failed in a row (0: the last succeeded)."},
    [SL_M_MASTER_EXECUTOR_SPAWNS_TOTAL] = {"sluice_master_executor_spawns_total", "counter", "",
                                           "Worker processes started by the local executor."},
    [SL_M_MASTER_EXECUTOR_SPAWN_ERRORS_TOTAL] =
        {"sluice_master_executor_spawn_errors_total", "counter", "",
         "Worker processes the local executor failed to start."},
    [SL_M_MASTER_EXECUTOR_EXITS_TOTAL] =
        {"sluice_master_executor_exits_total", "counter", "result",
         "Worker processes reaped, by result (stopped: asked to; failed: any other)."},
    [SL_M_MASTER_EXECUTOR_RESTARTS_DELAYED_TOTAL] =
        {"sluice_master_executor_restarts_delayed_total", "counter", "",
         "Worker restarts postponed because the job's workers keep exiting."},
    [SL_M_MASTER_EXECUTOR_BACKOFF_SECONDS] =
        {"sluice_master_executor_backoff_seconds", "gauge", "",
         "Longest restart delay of a job now (0: none backs off)."},
    [SL_M_MASTER_JOURNAL_SYNC_SECONDS] =
        {"sluice_master_journal_sync_seconds", "histogram", "le",
         "Time of the journal's group-commit syncs (write-out and fdatasync)."},
    [SL_M_MASTER_JOBS] = {"sluice_master_jobs", "gauge", "", "Jobs in the master."},
    [SL_M_MASTER_WORKERS] = {"sluice_master_workers", "gauge", "", "Workers connected."},
    [SL_M_MASTER_CLIENTS] = {"sluice_master_clients", "gauge", "", "Trainer clients connected."},
    [SL_M_MASTER_CLIENT_RECORDS] =
        {"sluice_master_client_records", "gauge", "",
         "Client records remembered (commit nonces), at most max_clients."},
    [SL_M_MASTER_CLIENTS_EVICTED_TOTAL] =
        {"sluice_master_clients_evicted_total", "counter", "",
         "Client records forgotten after the idle period (--client-idle-ms)."},
    [SL_M_MASTER_LEASES_GRANTED_TOTAL] = {"sluice_master_leases_granted_total", "counter", "",
                                          "Split leases granted."},
    [SL_M_MASTER_LEASE_EXPIRIES_TOTAL] = {"sluice_master_lease_expiries_total", "counter", "",
                                          "Leases expired."},
    [SL_M_MASTER_COMMITS_TOTAL] = {"sluice_master_commits_total", "counter", "result",
                                   "Commit answers by result."},
    [SL_M_MASTER_SPLIT_FAILURES_TOTAL] =
        {"sluice_master_split_failures_total", "counter", "",
         "SPLIT_FAILED reports counted (a worker could not read a split)."},
    [SL_M_MASTER_LEASE_REVOCATIONS_TOTAL] =
        {"sluice_master_lease_revocations_total", "counter", "",
         "Leases revoked because their worker id registered without them."},
    [SL_M_MASTER_WORKER_IDS_IN_USE_TOTAL] =
        {"sluice_master_worker_ids_in_use_total", "counter", "",
         "Registrations refused: the worker id has another live process."},
    [SL_M_MASTER_AUTH_FAILURES_TOTAL] =
        {"sluice_master_auth_failures_total", "counter", "reason",
         "Control connections challenged for the cluster secret that never proved it, by reason: "
         "refused (a wrong proof or another frame), timeout, evicted (to make room), closed (by "
         "the peer before it answered)."},
    [SL_M_MASTER_CONNECTIONS_CLOSED_TOTAL] =
        {"sluice_master_connections_closed_total", "counter", "reason",
         "Control connections the master closed to keep its limits, by reason."},
    [SL_M_MASTER_CONNECTIONS] = {"sluice_master_connections", "gauge", "",
                                 "Control connections open."},
    [SL_M_MASTER_JOURNAL_SYNCS_TOTAL] = {"sluice_master_journal_syncs_total", "counter", "",
                                         "Journal fdatasyncs."},
    [SL_M_MASTER_JOURNAL_COMPACTIONS_TOTAL] =
        {"sluice_master_journal_compactions_total", "counter", "",
         "Journal compactions (snapshot written, journal emptied) in this run."},
    [SL_M_MASTER_STATE_RECOVERIES_TOTAL] =
        {"sluice_master_state_recoveries_total", "counter", "result",
         "Tries to open the state directory again after a journal failure, by result (ok, "
         "failed)."},
    [SL_M_MASTER_MEMORY_BYTES] = {"sluice_master_memory_bytes", "gauge", "",
                                  "Resident memory of the master."},
    [SL_M_MASTER_JOB_PLAN_INFO] =
        {"sluice_master_job_plan_info", "gauge", "job, fingerprint, share",
         "1 per job, labelled with its plan fingerprint and whether it shares."},
    [SL_M_MASTER_SPLITS] = {"sluice_master_splits", "gauge", "job, state",
                            "Splits of the current epochs by state."},
    [SL_M_MASTER_COMMITTED_ROWS] = {"sluice_master_committed_rows", "gauge", "job",
                                    "Rows committed this epoch."},
    [SL_M_MASTER_SAMPLES_COMMITTED_TOTAL] = {"sluice_master_samples_committed_total", "counter",
                                             "job", "Samples reported delivered by clients."},
    [SL_M_MASTER_TRAINER_WAIT_RATIO] = {"sluice_master_trainer_wait_ratio", "gauge", "job",
                                        "Fraction of time trainers waited for data."},
    [SL_M_MASTER_WORKER_BUSY_RATIO] = {"sluice_master_worker_busy_ratio", "gauge", "job",
                                       "Mean worker busy fraction."},
    [SL_M_MASTER_WORKER_QUEUE_BATCHES] = {"sluice_master_worker_queue_batches", "gauge", "job",
                                          "Batches queued in workers."},
    [SL_M_MASTER_WORKER_MEMORY_BYTES] = {"sluice_master_worker_memory_bytes", "gauge", "job",
                                         "Memory in use reported by the job's workers."},
    [SL_M_MASTER_DESIRED_WORKERS] = {"sluice_master_desired_workers", "gauge", "job",
                                     "Autoscaler's worker count."},
    [SL_M_MASTER_GRANTED_WORKERS] = {"sluice_master_granted_workers", "gauge", "job",
                                     "Workers granted after the fleet's fair share."},
    [SL_M_MASTER_JOB_FAILED] =
        {"sluice_master_job_failed", "gauge", "job",
         "1 when the job failed (a split failed --max-split-failures times), else 0."},
    [SL_M_MASTER_JOB_FINISHED] = {"sluice_master_job_finished", "gauge", "job",
                                  "1 once every epoch of the job is committed, else 0."},
    [SL_M_MASTER_SKIPPED_SPLITS_TOTAL] =
        {"sluice_master_skipped_splits_total", "counter", "job",
         "Splits skipped without their rows (on_bad_split skip), every epoch."},
    [SL_M_MASTER_SKIPPED_ROWS_TOTAL] = {"sluice_master_skipped_rows_total", "counter", "job",
                                        "Rows of skipped splits not delivered."},
    [SL_M_MASTER_EQUAL_DROPPED_BATCHES_TOTAL] =
        {"sluice_master_equal_dropped_batches_total", "counter", "job",
         "batch.equal_batches_per_rank: batches committed above their epoch's quota, dropped "
         "by the trainers (not trained that epoch), every epoch ended."},
    [SL_M_MASTER_EQUAL_DROPPED_SAMPLES_TOTAL] = {"sluice_master_equal_dropped_samples_total",
                                                 "counter", "job", "The samples of those batches."},
    [SL_M_MASTER_PARQUET_ROW_GROUPS_SKIPPED] =
        {"sluice_master_parquet_row_groups_skipped", "gauge", "job",
         "Row groups of a Parquet job's dataset ruled out by their min/max statistics when the job "
         "was cut (never read; 0 for other jobs)."},
    [SL_M_MASTER_PARQUET_ROWS_SKIPPED] = {"sluice_master_parquet_rows_skipped", "gauge", "job",
                                          "The rows of those row groups."},
    [SL_M_MASTER_JOB_SHARES_WITH] =
        {"sluice_master_job_shares_with", "gauge", "job",
         "Other jobs of the same plan fingerprint this job shares passes with."},
    [SL_M_MASTER_SHARED_BATCHES] = {"sluice_master_shared_batches", "gauge", "job",
                                    "Batches the job's workers served to other jobs of a shared "
                                    "pass without computing them (their heartbeats)."},
    [SL_M_MASTER_SHARED_BYTES_SAVED] = {"sluice_master_shared_bytes_saved", "gauge", "job",
                                        "Encoded bytes of those batches."},
    [SL_M_MASTER_SHARED_CPU_SECONDS_SAVED] =
        {"sluice_master_shared_cpu_seconds_saved", "gauge", "job",
         "Pipeline CPU seconds those batches would have cost."},
    [SL_M_MASTER_AUTOCACHE_STATE] =
        {"sluice_master_autocache_state", "gauge", "job",
         "The autocache's decision for the job's prefix fingerprint: 0 off, 1 measuring, 2 chosen "
         "(later epochs read the cache), 3 declined."},
    [SL_M_MASTER_AUTOCACHE_SAMPLES] =
        {"sluice_master_autocache_samples", "gauge", "job",
         "Samples the job's workers served from cache files (their heartbeats)."},
    [SL_M_MASTER_AUTOCACHE_FALLBACKS] = {"sluice_master_autocache_fallbacks", "gauge", "job",
                                         "Cache reads of the job's workers that fell back to "
                                         "computing (a missing or corrupt cache file)."},
    [SL_M_MASTER_AUTOCACHE_FILES_WRITTEN] = {"sluice_master_autocache_files_written", "gauge",
                                             "job", "Cache files the job's workers wrote."},
    [SL_M_MASTER_KAFKA_LAG_RECORDS] = {"sluice_master_kafka_lag_records", "gauge",
                                       "job, topic, partition",
                                       "Per partition of a stream job: the high watermark minus "
                                       "the committed prefix (records not delivered yet)."},
    [SL_M_MASTER_KAFKA_WATCH_ROUNDS_TOTAL] =
        {"sluice_master_kafka_watch_rounds_total", "counter", "",
         "Rounds of the Kafka watcher (partitions, watermarks, group mirror)."},
    [SL_M_MASTER_KAFKA_WATCH_ERRORS_TOTAL] =
        {"sluice_master_kafka_watch_errors_total", "counter", "",
         "Broker requests of the Kafka watcher that failed (retried next round)."},
    [SL_M_MASTER_KAFKA_GROUP_COMMITS_TOTAL] =
        {"sluice_master_kafka_group_commits_total", "counter", "",
         "Committed prefixes mirrored into the jobs' consumer groups."},
    [SL_M_WORKER_KAFKA_RECORD_AGE_SECONDS] =
        {"sluice_worker_kafka_record_age_seconds", "histogram", "job, le",
         "Age of each Kafka record (now minus its CreateTime) when the worker read it."},
    [SL_M_WORKER_DEDUP_FACTOR] = {"sluice_worker_dedup_factor", "gauge", "job, group",
                                  "Rows per unique row of each dedup group."},
    [SL_M_WORKER_BUSY_SECONDS_TOTAL] = {"sluice_worker_busy_seconds_total", "counter", "job, stage",
                                        "Busy time per pipeline stage, summed over threads."},
    [SL_M_WORKER_CONNECTIONS_CLOSED_TOTAL] =
        {"sluice_worker_connections_closed_total", "counter", "job, reason",
         "Trainer connections the worker closed to keep its limits, by reason."},
    [SL_M_WORKER_ROWS_READ_TOTAL] = {"sluice_worker_rows_read_total", "counter", "job",
                                     "Rows read from the table."},
    [SL_M_WORKER_ROWS_KEPT_TOTAL] = {"sluice_worker_rows_kept_total", "counter", "job",
                                     "Rows the filters kept."},
    [SL_M_WORKER_KAFKA_RECORDS_TOTAL] = {"sluice_worker_kafka_records_total", "counter", "job",
                                         "Kafka records consumed (a Kafka job)."},
    [SL_M_WORKER_KAFKA_BAD_RECORDS_TOTAL] =
        {"sluice_worker_kafka_bad_records_total", "counter", "job",
         "Kafka records skipped as bad: no or another format header, an undecodable value, "
         "features that do not fit the schema."},
    [SL_M_WORKER_KAFKA_PAUSES_TOTAL] =
        {"sluice_worker_kafka_pauses_total", "counter", "job",
         "Times the Kafka partition being read was paused because the memory budget was full (7/8 "
         "of --memory-limit; resumed below 3/4)."},
    [SL_M_WORKER_KAFKA_FETCHER_WAKES_TOTAL] =
        {"sluice_worker_kafka_fetcher_wakes_total", "counter", "job",
         "Times the Kafka fetcher was woken after a read drained a queue that had reached "
         "librdkafka's thresholds, instead of waiting for its next timer."},
    [SL_M_WORKER_KAFKA_CHUNKS_HANDED_BACK_TOTAL] =
        {"sluice_worker_kafka_chunks_handed_back_total", "counter", "job",
         "Stream chunks whose read ended at their partition's end, the rest handed back to the "
         "master, because another lease waited for this worker."},
    [SL_M_WORKER_KAFKA_DEAD_LETTER_RECORDS_TOTAL] =
        {"sluice_worker_kafka_dead_letter_records_total", "counter", "job",
         "Bad Kafka records the dead-letter topic acknowledged."},
    [SL_M_WORKER_KAFKA_DEAD_LETTER_FAILURES_TOTAL] =
        {"sluice_worker_kafka_dead_letter_failures_total", "counter", "job",
         "Bad Kafka records the dead-letter topic did not take: not produced (a full local queue, "
         "a fatal producer error) or not delivered."},
    [SL_M_WORKER_PARQUET_ROW_GROUPS_SKIPPED] =
        {"sluice_worker_parquet_row_groups_skipped", "gauge", "job",
         "Row groups of a standalone worker's Parquet job ruled out by their min/max statistics "
         "(never read)."},
    [SL_M_WORKER_PARQUET_ROWS_SKIPPED] = {"sluice_worker_parquet_rows_skipped", "gauge", "job",
                                          "The rows of those row groups."},
    [SL_M_WORKER_SPLITS_TOTAL] = {"sluice_worker_splits_total", "counter", "job",
                                  "Splits (or leases) read."},
    [SL_M_WORKER_SPLITS_FAILED_TOTAL] =
        {"sluice_worker_splits_failed_total", "counter", "job",
         "Leases whose split could not be read (reported to the master)."},
    [SL_M_WORKER_BATCHES_TOTAL] = {"sluice_worker_batches_total", "counter", "job",
                                   "Batches encoded."},
    [SL_M_WORKER_SAMPLES_TOTAL] = {"sluice_worker_samples_total", "counter", "job",
                                   "Samples in encoded batches."},
    [SL_M_WORKER_BYTES_ENCODED_TOTAL] = {"sluice_worker_bytes_encoded_total", "counter", "job",
                                         "Bytes of encoded batches."},
    [SL_M_WORKER_BYTES_EXPANDED_TOTAL] = {"sluice_worker_bytes_expanded_total", "counter", "job",
                                          "Bytes the encoded batches would take without dedup."},
    [SL_M_WORKER_BACKPRESSURE_SECONDS_TOTAL] = {"sluice_worker_backpressure_seconds_total",
                                                "counter", "job",
                                                "Time stages waited for memory or a full queue."},
    [SL_M_WORKER_BATCHES_SENT_TOTAL] = {"sluice_worker_batches_sent_total", "counter", "job",
                                        "BATCH frames sent (redeliveries included)."},
    [SL_M_WORKER_BATCHES_ACKED_TOTAL] = {"sluice_worker_batches_acked_total", "counter", "job",
                                         "Batches acknowledged by clients."},
    [SL_M_WORKER_SAMPLES_ACKED_TOTAL] = {"sluice_worker_samples_acked_total", "counter", "job",
                                         "Samples acknowledged by clients."},
    [SL_M_WORKER_BYTES_SENT_TOTAL] =
        {"sluice_worker_bytes_sent_total", "counter", "job",
         "Frame bytes of BATCH frames sent (as payload, or as a shared-memory descriptor)."},
    [SL_M_WORKER_SHM_BATCHES_TOTAL] = {"sluice_worker_shm_batches_total", "counter", "job",
                                       "Of the BATCH frames sent, those handed over through shared "
                                       "memory (a descriptor into the frame heap, no payload)."},
    [SL_M_WORKER_SHM_BYTES_TOTAL] =
        {"sluice_worker_shm_bytes_total", "counter", "job",
         "Frame bytes of the batches handed over through shared memory."},
    [SL_M_WORKER_SHM_FALLBACKS_TOTAL] =
        {"sluice_worker_shm_fallbacks_total", "counter", "job",
         "Frames made on the ordinary heap because the shared-memory frame heap was full (they go "
         "over the socket)."},
    [SL_M_WORKER_SHM_ATTACHED_TOTAL] =
        {"sluice_worker_shm_attached_total", "counter", "job",
         "Trainer connections that mapped the shared-memory frame heap."},
    [SL_M_WORKER_SHM_REFUSED_TOTAL] = {"sluice_worker_shm_refused_total", "counter", "job",
                                       "Requests for the frame heap's descriptor refused: another "
                                       "uid, an unknown nonce, malformed or too slow."},
    [SL_M_WORKER_SHM_HELD_TOTAL] =
        {"sluice_worker_shm_held_total", "counter", "job",
         "Frame heap blocks kept past their ACK for trainers that read batches in place (zero "
         "copy)."},
    [SL_M_WORKER_SHM_RELEASED_TOTAL] = {"sluice_worker_shm_released_total", "counter", "job",
                                        "Held frame heap blocks the trainer released."},
    [SL_M_WORKER_SHM_HELD_FREED_TOTAL] =
        {"sluice_worker_shm_held_freed_total", "counter", "job",
         "Held frame heap blocks freed because the trainer's hold ended (it unmapped the heap, or "
         "died)."},
    [SL_M_WORKER_SHM_CAPACITY_BYTES] =
        {"sluice_worker_shm_capacity_bytes", "gauge", "job",
         "Size of the shared-memory frame heap (0: none, --no-shm)."},
    [SL_M_WORKER_SHM_USED_BYTES] =
        {"sluice_worker_shm_used_bytes", "gauge", "job",
         "Bytes of the shared-memory frame heap in frames now (whole pages)."},
    [SL_M_WORKER_REDELIVERIES_TOTAL] = {"sluice_worker_redeliveries_total", "counter", "job",
                                        "Batches put back after a client left."},
    [SL_M_WORKER_BATCHES_DROPPED_TOTAL] = {"sluice_worker_batches_dropped_total", "counter", "job",
                                           "Batches of revoked leases dropped unsent."},
    [SL_M_WORKER_BAD_FRAMES_TOTAL] = {"sluice_worker_bad_frames_total", "counter", "job",
                                      "Connections closed for a bad frame."},
    [SL_M_WORKER_AUTH_FAILURES_TOTAL] =
        {"sluice_worker_auth_failures_total", "counter", "job",
         "Trainer connections refused: no proof of the cluster secret."},
    [SL_M_WORKER_CLIENTS] = {"sluice_worker_clients", "gauge", "job",
                             "Trainer clients connected now."},
    [SL_M_WORKER_QUEUE_READY_BATCHES] = {"sluice_worker_queue_ready_batches", "gauge", "job",
                                         "Encoded batches waiting for a client."},
    [SL_M_WORKER_ORDER_HELD_BATCHES] =
        {"sluice_worker_order_held_batches", "gauge", "job",
         "Deterministic order: encoded batches held until their split's base is known (or "
         "behind a lower g still being made)."},
    [SL_M_WORKER_ORDER_RANK_QUEUED_BATCHES] =
        {"sluice_worker_order_rank_queued_batches", "gauge", "job, rank",
         "Deterministic order: a rank's batches waiting here for its trainer's g-window; one "
         "rank's high while the others' are low names a rank that stopped reading."},
    [SL_M_WORKER_ORDER_WINDOW_WAITS_TOTAL] =
        {"sluice_worker_order_window_waits_total", "counter", "job",
         "Deterministic order: times a sender found its rank's next batch past the trainer's "
         "g-window and waited."},
    [SL_M_WORKER_MEMORY_USED_BYTES] = {"sluice_worker_memory_used_bytes", "gauge", "job",
                                       "Bytes accounted by the memory budget now."},
    [SL_M_WORKER_MEMORY_PEAK_BYTES] =
        {"sluice_worker_memory_peak_bytes", "gauge", "job",
         "Highest bytes accounted (the budget's high-water mark, never above the limit)."},
    [SL_M_WORKER_MEMORY_LIMIT_BYTES] = {"sluice_worker_memory_limit_bytes", "gauge", "job",
                                        "The memory budget."},
    [SL_M_WORKER_FINISHED] = {"sluice_worker_finished", "gauge", "job",
                              "1 once every batch is produced and acknowledged."},
    [SL_M_WORKER_LEASES_TOTAL] = {"sluice_worker_leases_total", "counter", "job",
                                  "Leases granted by the master."},
    [SL_M_WORKER_LEASES_HELD] = {"sluice_worker_leases_held", "gauge", "job",
                                 "Leases being read or waiting for acknowledgements."},
    [SL_M_WORKER_SPLIT_READS_TOTAL] = {"sluice_worker_split_reads_total", "counter", "job",
                                       "SPLIT_READ reports answered."},
    [SL_M_WORKER_LEASES_REVOKED_TOTAL] = {"sluice_worker_leases_revoked_total", "counter", "job",
                                          "Leases the master revoked."},
    [SL_M_WORKER_HEARTBEATS_TOTAL] = {"sluice_worker_heartbeats_total", "counter", "job",
                                      "Heartbeats answered."},
    [SL_M_WORKER_MASTER_RECONNECTS_TOTAL] = {"sluice_worker_master_reconnects_total", "counter",
                                             "job", "Master connections re-established."},
    [SL_M_WORKER_START_TIME_SECONDS] =
        {"sluice_worker_start_time_seconds", "gauge", "job (once it has one)",
         "Start time of the worker process (its admin endpoint), seconds since the Unix epoch."},
    [SL_M_WORKER_WAITING] = {"sluice_worker_waiting", "gauge", "",
                             "1 while waiting for the master's first lease."},
    [SL_M_TRAINER_FRESHNESS_SECONDS] = {"sluice_trainer_freshness_seconds", "histogram",
                                        "job, client, rank, le",
                                        "Age of each sample of a Kafka job when handed to the "
                                        "trainer: now minus its record's CreateTime."},
    [SL_M_TRAINER_START_TIME_SECONDS] =
        {"sluice_trainer_start_time_seconds", "gauge", "job, client, rank",
         "When the client connected, in seconds since the Unix epoch."},
    [SL_M_TRAINER_BATCHES_TOTAL] = {"sluice_trainer_batches_total", "counter", "job, client, rank",
                                    "Batches handed to the trainer (sl_trainer_next)."},
    [SL_M_TRAINER_SAMPLES_TOTAL] = {"sluice_trainer_samples_total", "counter", "job, client, rank",
                                    "Samples in the batches handed to the trainer."},
    [SL_M_TRAINER_BYTES_TOTAL] = {"sluice_trainer_bytes_total", "counter", "job, client, rank",
                                  "Frame bytes received from workers (payloads and headers)."},
    [SL_M_TRAINER_WAIT_SECONDS_TOTAL] = {"sluice_trainer_wait_seconds_total", "counter",
                                         "job, client, rank",
                                         "Time sl_trainer_next spent waiting for a batch, the "
                                         "call in progress included (a data stall when it grows "
                                         "as fast as the clock)."},
    [SL_M_TRAINER_RECONNECTS_TOTAL] =
        {"sluice_trainer_reconnects_total", "counter", "job, client, rank",
         "Connections re-established to workers and (master mode) to the master."},
    [SL_M_TRAINER_QUEUED_BATCHES] = {"sluice_trainer_queued_batches", "gauge", "job, client, rank",
                                     "Decoded batches ready to hand out now."},
    [SL_M_TRAINER_WORKERS] = {"sluice_trainer_workers", "gauge", "job, client, rank",
                              "Worker connections open now (master mode; 0 in direct mode)."},
    [SL_M_TRAINER_COMMITTED_BATCHES_TOTAL] =
        {"sluice_trainer_committed_batches_total", "counter", "job, client, rank",
         "Batches the master committed for this client (master mode)."},
    [SL_M_TRAINER_DROPPED_BATCHES_TOTAL] =
        {"sluice_trainer_dropped_batches_total", "counter", "job, client, rank",
         "Batches received but not delivered: the master refused their commit, another rank's, or "
         "left behind by a lost connection (the worker sends them again)."},
    [SL_M_TRAINER_SHM_BATCHES_TOTAL] = {"sluice_trainer_shm_batches_total", "counter",
                                        "job, client, rank",
                                        "Batches received through shared memory: read in place in "
                                        "(or, with shm_copy, copied out of) the frame heap of a "
                                        "worker on this host."},
    [SL_M_TRAINER_SOCKET_BATCHES_TOTAL] =
        {"sluice_trainer_socket_batches_total", "counter", "job, client, rank",
         "Batches received over the socket (their bytes in the frame)."},
    [SL_M_STORE_REQUESTS_TOTAL] =
        {"sluice_store_requests_total", "counter", "result (and the caller's)",
         "HTTP requests to the object store (each attempt) by how they ended"},
    [SL_M_STORE_REQUEST_SECONDS] = {"sluice_store_request_seconds", "histogram",
                                    "op, le (and the caller's)",
                                    "latency of object store requests (each attempt) by "
                                    "operation: get, head, list, put"},
    [SL_M_STORE_INFLIGHT_BYTES] = {"sluice_store_inflight_bytes", "gauge", "(the caller's)",
                                   "bytes of ranges being fetched from the object store now"},
    [SL_M_STORE_RETRIES_TOTAL] = {"sluice_store_retries_total", "counter", "(the caller's)",
                                  "requests that were tries after a retryable failure"},
    [SL_M_STORE_FAILURES_TOTAL] = {"sluice_store_failures_total", "counter", "(the caller's)",
                                   "store operations that failed"},
    [SL_M_STORE_BYTES_READ_TOTAL] = {"sluice_store_bytes_read_total", "counter", "(the caller's)",
                                     "payload bytes read"},
    [SL_M_STORE_BYTES_WRITTEN_TOTAL] = {"sluice_store_bytes_written_total", "counter",
                                        "(the caller's)", "payload bytes written"},
};
