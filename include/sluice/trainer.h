/* The sluice trainer client: what a training process links
 * (libsluice_trainer.so) to receive batches from DPP workers.
 *
 * A client connects to a worker (to a master, in a later version), keeps a
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
    const char *address;        /* worker "host:port"; required */
    const char *client_name;    /* shown in the worker's logs; NULL: "trainer-<pid>" */
    uint32_t prefetch;          /* decoded batches kept ready (the credit window,
                                   docs/PROTOCOL.md); 0: 4; a worker's WELCOME
                                   max_credits may lower it */
    int connect_timeout_ms;     /* per attempt; 0: 5000 */
    int reconnect_ms;           /* keep retrying a lost worker this long; 0: 30000, <0: never.
                                   Batches the lost connection had queued are
                                   dropped (the worker re-sends them) */
    uint32_t rank, world_size;  /* trainer rank (for static sharding later); 0, 1 default */
    sl_wire_limits_t limits;    /* zero fields: defaults */
    const sl_allocator_t *allocator; /* NULL: default */
} sl_trainer_opts_t;

/* @return the defaults above (address NULL). */
sl_trainer_opts_t sl_trainer_opts_default(void);

typedef struct sl_trainer sl_trainer_t;

/* Connect and start the prefetch thread. Caller owns *out, free with
 * sl_trainer_close. @return SL_ERR_IO / SL_ERR_TIMEOUT when the worker cannot
 * be reached, SL_ERR_VERSION / SL_ERR_PROTOCOL when it does not speak our
 * protocol. */
sl_err_t sl_trainer_connect(const sl_trainer_opts_t *opts, sl_trainer_t **out, sl_error_t *err);

/* Wait up to timeout_ms (< 0: forever) for the next batch. On SL_OK the
 * caller owns *out (tensors point into the received frame, no copy): free
 * with sl_trainer_release (or sl_batch_destroy). @return SL_ERR_CLOSED when
 * the job has no more batches, SL_ERR_TIMEOUT when none arrived in time, and
 * any other error (with err->msg) when the connection failed for good. */
sl_err_t sl_trainer_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err);

/* Free a batch from sl_trainer_next; batch may be NULL. */
void sl_trainer_release(sl_trainer_t *t, sl_batch_t *batch);

typedef struct sl_trainer_stats {
    uint64_t batches;       /* handed out by sl_trainer_next */
    uint64_t samples;
    uint64_t bytes;         /* frame bytes received (payloads and headers) */
    uint64_t wait_ns;       /* time sl_trainer_next spent waiting for data */
    uint64_t reconnects;
    uint32_t queued;        /* decoded batches ready now */
} sl_trainer_stats_t;

void sl_trainer_stats(const sl_trainer_t *t, sl_trainer_stats_t *out);

/* Say goodbye, stop the thread, free everything (batches not yet handed
 * out are left unacknowledged for the worker to send elsewhere); t may be
 * NULL. Batches already handed out stay valid until released. */
void sl_trainer_close(sl_trainer_t *t);

#ifdef __cplusplus
}
#endif
#endif
