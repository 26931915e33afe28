/* The trainer client's public calls (include/sluice/trainer.h): connect
 * (direct mode: one worker connection made here, then its thread; master
 * mode: fleet.c), hand out ready batches with their acknowledgement and
 * credit, statistics and close. The same calls serve both modes
 * (trainer_internal.h); the worker connection lives in worker_conn.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "common/parse.h"
#include "trainer/fleet_internal.h"
#include "trainer/reorder.h"

sl_trainer_opts_t sl_trainer_opts_default(void)
{
    return (sl_trainer_opts_t){
        .address = NULL,
        .client_name = NULL,
        .prefetch = 4,
        .connect_timeout_ms = 5000,
        .reconnect_ms = 30000,
        .rank = 0,
        .world_size = 1,
        .limits = sl_wire_limits_default(),
        .allocator = NULL,
        .master = NULL,
        .job_id = NULL,
        .client_id = NULL,
        .refresh_ms = 1000,
        .cluster_secret_file = NULL,
        .metrics_address = NULL,
    };
}

/* Stop every thread, free everything; t may be half built. */
static void destroy(sl_trainer_t *t)
{
    const sl_allocator_t *a = t->a;
    /* First: a scrape reads the fleet's state, which goes below. */
    tr_metrics_stop(t);
    sl_mutex_lock(&t->mu);
    t->closing = true;
    for (tr_conn_t *c = t->conns; c; c = c->next)
        tr_conn_stop_locked(t, c, "client closed");
    pthread_cond_broadcast(&t->cv);
    sl_mutex_unlock(&t->mu);
    tr_fleet_stop(t); /* master mode: no connection is started after this */
    /* Every thread that touches the lists ends here; then nothing
     * references a connection any more. */
    for (tr_conn_t *c = t->conns; c; c = c->next) {
        if (c->thread_started) pthread_join(c->thread, NULL);
        c->thread_started = false;
    }
    tr_list_free(t, &t->ready);
    if (t->order) { /* the deterministic order's held batches */
        tr_item_t *it;
        while ((it = tr_reorder_pop_any(t->order)) != NULL) {
            sl_batch_destroy(it->batch);
            sl_free(a, it, sizeof *it);
        }
        tr_reorder_destroy(t->order);
        t->order = NULL;
    }
    tr_fleet_free(t);
    while (t->conns) {
        tr_conn_t *c = t->conns;
        t->conns = c->next;
        tr_conn_free(c);
    }
    sl_strfree(a, t->address);
    sl_strfree(a, t->client_name);
    sl_rpc_secret_free(t->secret);
    pthread_cond_destroy(&t->cv);
    sl_mutex_destroy(&t->mu);
    sl_free(a, t, sizeof *t);
}

static void fill_limits(sl_wire_limits_t *l)
{
    sl_wire_limits_t d = sl_wire_limits_default();
    if (l->max_frame_bytes == 0) l->max_frame_bytes = d.max_frame_bytes;
    if (l->max_batch_size == 0) l->max_batch_size = d.max_batch_size;
    if (l->max_keys == 0) l->max_keys = d.max_keys;
    if (l->max_groups == 0) l->max_groups = d.max_groups;
}

/* Direct mode: master mode's worker connection, to the one worker of
 * opts.address, made here (so that its failure is connect's), then its
 * thread. */
static sl_err_t connect_direct(sl_trainer_t *t, sl_error_t *err)
{
    if (strlen(t->address) >= TR_ADDR_MAX)
        return sl_error_set(err, SL_ERR_INVALID,
                            "trainer: worker address too long (limit %d bytes)", TR_ADDR_MAX - 1);
    sl_mutex_lock(&t->mu);
    tr_conn_t *c = tr_conn_new(t, NULL, t->address);
    sl_mutex_unlock(&t->mu);
    if (!c) return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    bool refused;
    sl_err_t rc = tr_conn_open(c, t->connect_timeout_ms, &refused, err);
    if (rc == SL_OK) rc = tr_conn_start(c, err);
    return rc;
}

sl_err_t sl_trainer_connect(const sl_trainer_opts_t *opts, sl_trainer_t **out, sl_error_t *err)
{
    if (out) *out = NULL;
    bool master = opts && opts->master && opts->master[0];
    if (!opts || !out || (!master && (!opts->address || !opts->address[0])))
        return sl_error_set(err, SL_ERR_INVALID, "trainer: no worker or master address given");
    uint32_t world = opts->world_size ? opts->world_size : 1;
    if (opts->rank >= world)
        return sl_error_set(err, SL_ERR_INVALID, "trainer: rank %u is not below world size %u",
                            opts->rank, world);
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    sl_trainer_t *t = sl_calloc(a, 1, sizeof *t);
    if (!t) return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    t->a = a;
    sl_mutex_init(&t->mu);
    sl_clock_cond_init(&t->cv);

    t->prefetch = opts->prefetch ? opts->prefetch : 4;
    const char *shm_env = getenv("SLUICE_TRAINER_SHM");
    t->shm = !opts->no_shm && !(shm_env && strcmp(shm_env, "0") == 0);
    const char *copy_env = getenv("SLUICE_TRAINER_SHM_COPY");
    /* a release drops the client's own pages of a block, which needs the
     * blocks to own whole pages: not on a machine with pages larger */
    t->shm_hold = !opts->shm_copy && !(copy_env && strcmp(copy_env, "1") == 0) &&
                  sysconf(_SC_PAGESIZE) == (long)SL_RPC_SHM_BLOCK_ALIGN;
    t->shm_read_only = opts->shm_read_only;
    t->ack_ms = TR_ACK_MS_DEFAULT;
    const char *every_env = getenv("SLUICE_TRAINER_ACK_EVERY");
    const char *ms_env = getenv("SLUICE_TRAINER_ACK_MS");
    if ((every_env && every_env[0] &&
         sl_parse_u32(every_env, 1, UINT32_MAX, &t->ack_every, "$SLUICE_TRAINER_ACK_EVERY", err) !=
             SL_OK) ||
        (ms_env && ms_env[0] &&
         sl_parse_u32(ms_env, 0, 3600000, &t->ack_ms, "$SLUICE_TRAINER_ACK_MS", err) != SL_OK)) {
        destroy(t);
        return sl_error_prefix(err, "trainer: ");
    }
    t->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 5000;
    t->reconnect_ms = opts->reconnect_ms == 0 ? 30000 : opts->reconnect_ms;
    t->rank = opts->rank;
    t->world_size = world;
    t->wire_limits = opts->limits;
    fill_limits(&t->wire_limits);
    t->rpc_limits = sl_rpc_limits_default();
    t->rpc_limits.max_payload_bytes = t->wire_limits.max_frame_bytes;
    char name[64];
    if (opts->client_name)
        snprintf(name, sizeof name, "%s", opts->client_name);
    else
        snprintf(name, sizeof name, "trainer-%ld", (long)getpid());
    t->address = sl_strdup(a, master ? opts->master : opts->address);
    t->client_name = sl_strdup(a, name);
    if (!t->address || !t->client_name) {
        destroy(t);
        return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    }
    sl_err_t src = sl_rpc_secret_load(opts->cluster_secret_file, &t->secret, err);
    if (src != SL_OK) {
        destroy(t);
        return sl_error_prefix(err, "trainer: ");
    }

    sl_err_t rc = master ? tr_fleet_connect(t, opts, err) : connect_direct(t, err);
    if (rc == SL_OK) rc = tr_metrics_start(t, opts->metrics_address, err);
    if (rc != SL_OK) {
        destroy(t);
        return rc;
    }
    *out = t;
    return SL_OK;
}

/* Has the job ended for this client? Then err says so. Caller holds mu. */
static bool ended_locked(const sl_trainer_t *t, sl_error_t *err) SL_REQUIRES(t->mu)
{
    if (t->fleet) return tr_fleet_ended_locked(t, err);
    if (t->state != TR_ENDED) return false;
    sl_error_set(err, SL_ERR_CLOSED,
                 "worker %s: the job has no more batches (%" PRIu64 " delivered by the worker)",
                 t->address, t->end_batches);
    return true;
}

/* No batch within waited_ms: the error says where the client stands
 * (caller holds mu). */
static sl_err_t timeout_locked(const sl_trainer_t *t, int waited_ms, sl_error_t *err)
    SL_REQUIRES(t->mu)
{
    return t->fleet ? tr_fleet_timeout_locked(t, waited_ms, err)
                    : sl_error_set(err, SL_ERR_TIMEOUT, "worker %s: no batch within %d ms",
                                   t->address, waited_ms);
}

sl_err_t sl_trainer_timeout_error(sl_trainer_t *t, int waited_ms, sl_error_t *err)
{
    sl_mutex_lock(&t->mu);
    sl_err_t rc = timeout_locked(t, waited_ms, err);
    sl_mutex_unlock(&t->mu);
    return rc;
}

const uint64_t sl_trainer_freshness_bounds_ms[SL_TRAINER_FRESHNESS_BUCKETS - 1] =
    SL_AGE_BOUNDS_MS_INIT;
_Static_assert(SL_TRAINER_FRESHNESS_BUCKETS == SL_AGE_BUCKETS, "freshness buckets");

sl_err_t sl_trainer_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err)
{
    if (out) *out = NULL;
    if (!t || !out) return sl_error_set(err, SL_ERR_INVALID, "trainer next: no client or output");
    uint64_t start = sl_clock_ns();
    atomic_store(&t->wait_since, start);
    uint64_t until = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    sl_err_t rc = SL_OK;
    sl_mutex_lock(&t->mu);
    while (!t->ready.head) {
        if (t->state == TR_FAILED) {
            rc = t->failure.code;
            if (err) *err = t->failure;
            break;
        }
        if (ended_locked(t, err)) {
            rc = SL_ERR_CLOSED;
            break;
        }
        if (t->closing) {
            rc = sl_error_set(err, SL_ERR_CLOSED, "trainer client is closing");
            break;
        }
        if (timeout_ms == 0 || (timeout_ms > 0 && sl_clock_ns() >= until)) {
            rc = timeout_locked(t, timeout_ms, err);
            break;
        }
        if (timeout_ms < 0)
            sl_cond_wait(&t->cv, &t->mu);
        else
            sl_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    if (rc == SL_OK) {
        tr_item_t *it = t->ready.head;
        tr_list_remove(&t->ready, it);
        atomic_store(&t->queued, t->ready.count);
        atomic_fetch_add(&t->batches, 1);
        atomic_fetch_add(&t->samples, it->batch->batch_size);
        /* Direct mode acknowledges a batch when it is handed out (master
         * mode did when the master answered its commit); the credit goes
         * with it, at once: both frames are tiny and the worker's next
         * batch waits for the credit. */
        *out = it->batch;
        tr_item_hand_out_locked(t, it);
    }
    sl_mutex_unlock(&t->mu);
    /* freshness: at the hand-over, outside the lock */
    if (rc == SL_OK && (*out)->record_ms)
        sl_age_hist_add(&t->freshness, (*out)->record_ms, (*out)->batch_size, sl_age_now_ms());
    /* since cleared before the sum grows: tr_wait_ns may miss this call
     * for a moment, never count it twice */
    uint64_t end = sl_clock_ns();
    atomic_store(&t->wait_since, 0);
    atomic_fetch_add(&t->wait_ns, end - start);
    return rc;
}

uint64_t tr_wait_ns(const sl_trainer_t *t, uint64_t now)
{
    sl_trainer_t *m = (sl_trainer_t *)t; /* atomics only */
    uint64_t done = atomic_load(&m->wait_ns);
    uint64_t since = atomic_load(&m->wait_since);
    return done + (since && now > since ? now - since : 0);
}

void sl_trainer_release(sl_trainer_t *t, sl_batch_t *batch)
{
    (void)t;
    sl_batch_destroy(batch);
}

void sl_trainer_stats(const sl_trainer_t *t, sl_trainer_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!t) return;
    sl_trainer_t *m = (sl_trainer_t *)t; /* atomics only: nothing changes */
    out->batches = atomic_load(&m->batches);
    out->samples = atomic_load(&m->samples);
    out->bytes = atomic_load(&m->bytes);
    /* The wait counts the sl_trainer_next call in progress (tr_wait_ns), as
     * GET /metrics and CLIENT_STATS do: a trainer blocked in one long call
     * shows its stall while it lasts. The sum may dip for a moment at a
     * call's end (the call leaves wait_since before its time is added), so
     * the most reported is its floor: the figure never falls. */
    uint64_t wait = tr_wait_ns(t, sl_clock_ns());
    uint64_t shown = atomic_load(&m->stats_wait_ns);
    while (wait > shown && !atomic_compare_exchange_weak(&m->stats_wait_ns, &shown, wait)) {
    }
    out->wait_ns = wait > shown ? wait : shown;
    out->reconnects = atomic_load(&m->reconnects);
    out->queued = atomic_load(&m->queued);
    sl_age_counts_t fc;
    sl_age_hist_read(&m->freshness, &fc);
    _Static_assert(sizeof out->freshness_buckets == sizeof fc.buckets, "freshness buckets");
    memcpy(out->freshness_buckets, fc.buckets, sizeof fc.buckets);
    out->freshness_count = fc.count;
    out->freshness_sum_ms = fc.sum_ms;
    out->batches_shm = atomic_load(&m->batches_shm);
    out->batches_socket = atomic_load(&m->batches_socket);
    if (m->fleet) {
        out->workers = atomic_load(&m->workers);
        out->committed = atomic_load(&m->fleet->committed);
        out->dropped = atomic_load(&m->dropped);
    }
}

void sl_trainer_close(sl_trainer_t *t)
{
    if (!t) return;
    destroy(t); /* GOODBYE on every connection, then the threads end */
}
