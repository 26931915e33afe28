/* The sluice trainer client: what a training process links
 * (libsluice_trainer.so) to receive batches from DPP workers.
 *
 * Two modes. Direct (opts.address): one worker, described below. Master
 * (opts.master + opts.job_id): the client ATTACHes to the DPP master, which
 * names the job's workers; it connects to all of them (and asks again about
 * once a second to pick up new ones), and hands a batch to the trainer only
 * after the master has durably COMMITTED the batch's row range for this
 * client, so every sample of an epoch reaches exactly one trainer once
 * (docs/PROTOCOL.md "Control frames", docs/DESIGN.md "Exactly once").
 *
 * In direct mode a client connects to one worker, keeps a
 * prefetch window of up to `prefetch` decoded batches filled by a background
 * thread, and hands them out one at a time with sl_trainer_next. A batch is
 * acknowledged to the worker when sl_trainer_next hands it to the caller:
 * batches that were received but not yet handed out when the client goes
 * away are sent again to another client, so a crash loses nothing.
 *
 *   sl_trainer_opts_t o = sl_trainer_opts_default();
 *   o.address = "127.0.0.1:7077";
 *   sl_trainer_t *t;
 *   sl_error_t err = {0};
 *   if (sl_trainer_connect(&o, &t, &err) != SL_OK) { puts(err.msg); ... }
 *   sl_batch_t *b;
 *   while (sl_trainer_next(t, 10000, &b, &err) == SL_OK) {
 *       ... b->sparse, b->groups[g] (IKJTs), b->dense, b->labels, b->sample_ids
 *       sl_trainer_release(t, b);
 *   }
 *   // SL_ERR_CLOSED: the job has no more data; other codes: err.msg says why
 *   sl_trainer_close(t);
 *
 * Thread safety: one thread calls sl_trainer_next / release at a time; the
 * statistics may be read from any thread. */
#ifndef SLUICE_TRAINER_H
#define SLUICE_TRAINER_H

#include <stdint.h>

#include "sluice/err.h"
#include "sluice/tensor.h"
#include "sluice/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_trainer_opts {
    const char *address;             /* worker "host:port"; required unless master is set */
    const char *client_name;         /* shown in the worker's logs; NULL: "trainer-<pid>" */
    uint32_t prefetch;               /* decoded batches kept ready (the credit window,
                                        docs/PROTOCOL.md); 0: 4; a worker's WELCOME
                                        max_credits may lower it */
    int connect_timeout_ms;          /* per attempt; 0: 5000 */
    int reconnect_ms;                /* keep retrying a lost worker this long; 0: 30000, <0: never.
                                        Batches the lost connection had queued are
                                        dropped (the worker re-sends them) */
    uint32_t rank, world_size;       /* trainer rank (static sharding: only batches of leases
                                        for this rank are taken); 0, 1 default */
    sl_wire_limits_t limits;         /* zero fields: defaults */
    const sl_allocator_t *allocator; /* NULL: default */
    /* Master mode (address is then ignored): */
    const char *master;    /* DPP master "host:port"; NULL: direct mode */
    const char *job_id;    /* the job to read; required with master */
    const char *client_id; /* unique per client process, stable across its
                              reconnects; NULL: "<client_name>-<random>" */
    int refresh_ms;        /* re-ATTACH and report CLIENT_STATS this often; 0: 1000 */
    /* The cluster secret (docs/PROTOCOL.md "Authentication"), needed when the
     * workers and master have one: a file whose first line it is. NULL: the
     * file named by $SLUICE_CLUSTER_SECRET_FILE, or none when that is unset.
     * Every connection then proves it holds the secret, and checks that the
     * server does, before HELLO or ATTACH. */
    const char *cluster_secret_file;
    /* The client's own Prometheus metrics (docs/TRAINER.md "Metrics"):
     * serve GET /metrics on this "host:port" (port 0: any free port, see
     * sl_trainer_metrics_port) from once the client is connected until it
     * closes; every field of sl_trainer_stats, labelled with job, rank and
     * client. NULL: the address in $SLUICE_TRAINER_METRICS, none when that
     * is unset or empty; "": none. An address that cannot be bound fails
     * sl_trainer_connect. */
    const char *metrics_address;
    /* Take batches from workers on this host through shared memory
     * (docs/PROTOCOL.md "Shared-memory hand-over"): the client maps the
     * worker's frame heap and decodes each batch in place there (zero copy:
     * the batch may be written, its writes copied on write into this
     * process, and its block goes back to the worker when the batch is
     * freed, valid until then whatever happens to the connection, client or
     * worker; shm_copy copies it out instead) rather than reading it from
     * the socket; where that cannot work (another host or network
     * namespace, another uid) it stays on the socket. On unless no_shm, or
     * $SLUICE_TRAINER_SHM is "0". */
    bool no_shm;
    /* Copy each batch taken through shared memory out of the worker's heap
     * (its block goes back at once; the batch is writable, as over the
     * socket) instead of reading it in place. Also on with
     * $SLUICE_TRAINER_SHM_COPY=1. */
    bool shm_copy;
    /* The user only reads the batches (never writes one, as `sluice read`):
     * the worker's heap is mapped shared and read-only, so freeing a batch
     * read in place need not look for written pages to drop (one read of
     * the page table a batch, about 4 ns a sample). A write into such a
     * batch faults (SIGSEGV). No effect with shm_copy or without shared
     * memory. */
    bool shm_read_only;
} sl_trainer_opts_t;

/* @return the defaults above (address NULL). */
sl_trainer_opts_t sl_trainer_opts_default(void);

typedef struct sl_trainer sl_trainer_t;

/* Connect and start the prefetch thread. In master mode: ATTACH to the
 * master (an unknown job is its ERROR, returned here), then connect to each
 * of the job's workers in the background, each with its own window of
 * `prefetch` batches. Caller owns *out, free with
 * sl_trainer_close. @return SL_ERR_IO / SL_ERR_TIMEOUT when the worker cannot
 * be reached, SL_ERR_VERSION / SL_ERR_PROTOCOL when it does not speak our
 * protocol or the cluster-secret handshake fails ("authentication failed:
 * ..."), SL_ERR_IO / SL_ERR_INVALID for an unreadable or too short secret
 * file. */
sl_err_t sl_trainer_connect(const sl_trainer_opts_t *opts, sl_trainer_t **out, sl_error_t *err);

/* Wait up to timeout_ms (< 0: forever) for the next batch. On SL_OK the
 * caller owns *out (tensors point into the received frame, no copy): free
 * with sl_trainer_release (or sl_batch_destroy). @return SL_ERR_CLOSED when
 * the job has no more batches, SL_ERR_TIMEOUT when none arrived in time, and
 * any other error (with err->msg) when the connection failed for good. */
sl_err_t sl_trainer_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err);

/* The SL_ERR_TIMEOUT that sl_trainer_next gives when no batch came within
 * waited_ms, with the client's state now ("job j: no batch within 5000 ms
 * (2 workers connected, 0 commits unanswered)"): for a caller that waits
 * in short slices (to see signals, to show progress) and gives up after a
 * longer wait of its own, so that the message names that wait. @return
 * SL_ERR_TIMEOUT. */
sl_err_t sl_trainer_timeout_error(sl_trainer_t *t, int waited_ms, sl_error_t *err);

/* Free a batch from sl_trainer_next; batch may be NULL. A batch read in
 * place in a worker's shared memory gives its block back to the worker
 * here. Any batch may be freed after sl_trainer_close, and stays valid
 * until then whatever happens to its connection or worker. */
void sl_trainer_release(sl_trainer_t *t, sl_batch_t *batch);

/* Freshness histogram buckets (sl_trainer_stats_t.freshness_buckets):
 * bucket i counts samples at most sl_trainer_freshness_bounds_ms[i] ms old
 * (and older than the bound before), the last one any older sample. The
 * bounds: 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
 * 60000 ms (the worker's sluice_worker_kafka_record_age_seconds has the
 * same). */
#define SL_TRAINER_FRESHNESS_BUCKETS 14
extern const uint64_t sl_trainer_freshness_bounds_ms[SL_TRAINER_FRESHNESS_BUCKETS - 1];

typedef struct sl_trainer_stats {
    uint64_t batches; /* handed out by sl_trainer_next */
    uint64_t samples;
    uint64_t bytes;      /* frame bytes received (payloads and headers) */
    uint64_t wait_ns;    /* time sl_trainer_next spent waiting for data, the call in
                            progress included (as /metrics); never falls */
    uint64_t reconnects; /* to workers and (master mode) to the master */
    uint32_t queued;     /* decoded batches ready now */
    /* master mode (0 in direct mode): */
    uint32_t workers;   /* worker connections open now */
    uint64_t committed; /* batches the master committed for this client */
    uint64_t dropped;   /* batches not delivered: the master refused the commit
                           (another copy won, stale epoch) or they were not
                           for this client's rank */
    /* Freshness of the samples of Kafka batches (none for table batches):
     * the wall clock (CLOCK_REALTIME) when sl_trainer_next hands a batch
     * over minus each sample's record CreateTime (sl_batch_t.record_ms),
     * in ms. Buckets are not cumulative; count samples, sum_ms their ages
     * added up. */
    uint64_t freshness_buckets[SL_TRAINER_FRESHNESS_BUCKETS];
    uint64_t freshness_count;
    uint64_t freshness_sum_ms;
    /* Batches received, by way of shared memory (copied out of a worker's
     * mapped frame heap) and over the socket (redeliveries included). */
    uint64_t batches_shm;
    uint64_t batches_socket;
} sl_trainer_stats_t;

void sl_trainer_stats(const sl_trainer_t *t, sl_trainer_stats_t *out);

/* The port the metrics endpoint listens on (the one picked when port 0 was
 * asked), or 0 when the client serves no metrics. */
uint16_t sl_trainer_metrics_port(const sl_trainer_t *t);

/* Master mode: this rank's resume token for a checkpoint at this batch
 * boundary: what this client handed out (its commits minus those it has
 * not handed out yet) in the job's current and previous epoch, plus the
 * rows the master committed itself (version 4 for a table job). Opaque
 * bytes for `sluice submit --resume-token` / `sluice jobs resubmit
 * --token`: a checkpoint is one token of every rank 0..W-1 (W the world
 * size given at ATTACH), each taken when its rank hands out nothing more,
 * at any moment (no barrier); a job started with them, with any number of
 * ranks, delivers exactly the samples no rank handed out before
 * (docs/DESIGN.md "Resume tokens"). Call it from the thread that calls
 * sl_trainer_next. On SL_OK the caller owns *token (*len bytes): free with
 * sl_trainer_token_free. @return SL_ERR_UNSUPPORTED in direct mode,
 * SL_ERR_TIMEOUT when the master did not answer within timeout_ms (< 0:
 * wait), the master's ERROR otherwise. */
sl_err_t sl_trainer_resume_token(sl_trainer_t *t, int timeout_ms, uint8_t **token, size_t *len,
                                 sl_error_t *err);

/* As sl_trainer_resume_token, the token labelled with the trainer's
 * checkpoint step (>= 0): a resume refuses a set of tokens whose steps
 * differ (when every token carries one). */
sl_err_t sl_trainer_resume_token_at(sl_trainer_t *t, int64_t step, int timeout_ms, uint8_t **token,
                                    size_t *len, sl_error_t *err);

/* Free a token from sl_trainer_resume_token; token may be NULL. */
void sl_trainer_token_free(sl_trainer_t *t, uint8_t *token, size_t len);

/* Say goodbye, stop the thread, free everything (batches not yet handed
 * out are left unacknowledged for the worker to send elsewhere); t may be
 * NULL. Batches already handed out stay valid until released. */
void sl_trainer_close(sl_trainer_t *t);

#ifdef __cplusplus
}
#endif
#endif
