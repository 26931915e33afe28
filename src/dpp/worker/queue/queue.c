/* Bounded blocking queue and memory budget (queue.h): a mutex and condition
 * variables each; the ring grows only past its capacity for push_front. */
#include "dpp/worker/queue/queue.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/lock.h"

struct sl_worker_queue {
    const sl_allocator_t *a;
    sl_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    uint32_t capacity; /* 0: unbounded */
    sl_worker_msg_t *ring;
    uint32_t ring_cap, head, len;
    bool closed;
};

/* Wait on c (mu held); @return false when the deadline passed (timeout_ms >= 0). */
static bool wait_until(pthread_cond_t *c, sl_mutex_t *mu, int timeout_ms,
                       const struct timespec *deadline) SL_REQUIRES(*mu)
{
    if (timeout_ms < 0) {
        sl_cond_wait(c, mu);
        return true;
    }
    return sl_cond_timedwait(c, mu, deadline) == 0;
}

sl_worker_queue_t *sl_worker_queue_new(const sl_allocator_t *a, uint32_t capacity)
{
    sl_worker_queue_t *q = sl_calloc(a, 1, sizeof *q);
    if (!q) return NULL;
    q->a = a;
    q->capacity = capacity;
    q->ring_cap = capacity ? capacity : 16;
    q->ring = sl_calloc(a, q->ring_cap, sizeof *q->ring);
    if (!q->ring) {
        sl_free(a, q, sizeof *q);
        return NULL;
    }
    sl_mutex_init(&q->mu);
    sl_clock_cond_init(&q->not_empty);
    sl_clock_cond_init(&q->not_full);
    return q;
}

void sl_worker_queue_destroy(sl_worker_queue_t *q)
{
    if (!q) return;
    sl_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    sl_free(q->a, q->ring, (size_t)q->ring_cap * sizeof *q->ring);
    sl_free(q->a, q, sizeof *q);
}

/* Double the ring (under q->mu). */
static bool grow(sl_worker_queue_t *q) SL_REQUIRES(q->mu)
{
    uint32_t cap = q->ring_cap * 2;
    if (cap < q->ring_cap) return false;
    sl_worker_msg_t *r = sl_calloc(q->a, cap, sizeof *r);
    if (!r) return false;
    for (uint32_t i = 0; i < q->len; i++)
        r[i] = q->ring[(q->head + i) % q->ring_cap];
    sl_free(q->a, q->ring, (size_t)q->ring_cap * sizeof *q->ring);
    q->ring = r;
    q->ring_cap = cap;
    q->head = 0;
    return true;
}

/* Put m in the queue, at its tail or, given later, before the messages
 * queued at the tail that come later than it; then unlock. The one
 * place a message enters a queue that is not closed. */
static sl_err_t insert_unlock(sl_worker_queue_t *q, const sl_worker_msg_t *m,
                              bool (*later)(const sl_worker_msg_t *queued,
                                            const sl_worker_msg_t *m)) SL_RELEASE(q->mu)
{
    if (q->closed) {
        sl_mutex_unlock(&q->mu);
        return SL_ERR_CLOSED;
    }
    if (q->len == q->ring_cap && !grow(q)) {
        sl_mutex_unlock(&q->mu);
        return SL_ERR_NOMEM;
    }
    /* O(messages moved): in order, the usual case, moves none */
    uint32_t i = q->len;
    while (later && i > 0 && later(&q->ring[(q->head + i - 1) % q->ring_cap], m)) {
        q->ring[(q->head + i) % q->ring_cap] = q->ring[(q->head + i - 1) % q->ring_cap];
        i--;
    }
    q->ring[(q->head + i) % q->ring_cap] = *m;
    q->len++;
    pthread_cond_signal(&q->not_empty);
    sl_mutex_unlock(&q->mu);
    return SL_OK;
}

sl_err_t sl_worker_queue_push(sl_worker_queue_t *q, const sl_worker_msg_t *m, int timeout_ms)
{
    struct timespec dl = sl_clock_deadline_ms(timeout_ms < 0 ? 0 : timeout_ms);
    sl_mutex_lock(&q->mu);
    while (!q->closed && q->capacity && q->len >= q->capacity) {
        if (!wait_until(&q->not_full, &q->mu, timeout_ms, &dl) && q->len >= q->capacity &&
            !q->closed) {
            sl_mutex_unlock(&q->mu);
            return SL_ERR_TIMEOUT;
        }
    }
    return insert_unlock(q, m, NULL);
}

sl_err_t sl_worker_queue_push_sorted(sl_worker_queue_t *q, const sl_worker_msg_t *m,
                                     bool (*later)(const sl_worker_msg_t *queued,
                                                   const sl_worker_msg_t *m))
{
    sl_mutex_lock(&q->mu);
    return insert_unlock(q, m, later);
}

bool sl_worker_queue_peek_tail(sl_worker_queue_t *q, sl_worker_msg_t *m)
{
    sl_mutex_lock(&q->mu);
    bool any = q->len > 0;
    if (any) *m = q->ring[(q->head + q->len - 1) % q->ring_cap];
    sl_mutex_unlock(&q->mu);
    return any;
}

sl_err_t sl_worker_queue_push_front(sl_worker_queue_t *q, const sl_worker_msg_t *m)
{
    sl_mutex_lock(&q->mu);
    if (q->len == q->ring_cap && !grow(q)) {
        sl_mutex_unlock(&q->mu);
        return SL_ERR_NOMEM;
    }
    q->head = (q->head + q->ring_cap - 1) % q->ring_cap;
    q->ring[q->head] = *m;
    q->len++;
    pthread_cond_signal(&q->not_empty);
    sl_mutex_unlock(&q->mu);
    return SL_OK;
}

sl_err_t sl_worker_queue_pop(sl_worker_queue_t *q, sl_worker_msg_t *m, int timeout_ms)
{
    struct timespec dl = sl_clock_deadline_ms(timeout_ms < 0 ? 0 : timeout_ms);
    sl_mutex_lock(&q->mu);
    while (q->len == 0 && !q->closed) {
        if (timeout_ms == 0 ||
            (!wait_until(&q->not_empty, &q->mu, timeout_ms, &dl) && q->len == 0 && !q->closed)) {
            sl_mutex_unlock(&q->mu);
            return SL_ERR_TIMEOUT;
        }
    }
    if (q->len == 0) {
        sl_mutex_unlock(&q->mu);
        return SL_ERR_CLOSED;
    }
    *m = q->ring[q->head];
    q->head = (q->head + 1) % q->ring_cap;
    q->len--;
    pthread_cond_signal(&q->not_full);
    sl_mutex_unlock(&q->mu);
    return SL_OK;
}

sl_err_t sl_worker_queue_pop_if(sl_worker_queue_t *q, sl_worker_msg_t *m,
                                bool (*ok)(const sl_worker_msg_t *head, void *ctx), void *ctx)
{
    sl_mutex_lock(&q->mu);
    sl_err_t rc = q->len == 0                  ? (q->closed ? SL_ERR_CLOSED : SL_ERR_TIMEOUT)
                  : ok(&q->ring[q->head], ctx) ? SL_OK
                                               : SL_ERR_AGAIN;
    if (rc == SL_OK) {
        *m = q->ring[q->head];
        q->head = (q->head + 1) % q->ring_cap;
        q->len--;
        pthread_cond_signal(&q->not_full);
    }
    sl_mutex_unlock(&q->mu);
    return rc;
}

void sl_worker_queue_close(sl_worker_queue_t *q)
{
    sl_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    sl_mutex_unlock(&q->mu);
}

uint32_t sl_worker_queue_len(sl_worker_queue_t *q)
{
    sl_mutex_lock(&q->mu);
    uint32_t n = q->len;
    sl_mutex_unlock(&q->mu);
    return n;
}

bool sl_worker_queue_closed(sl_worker_queue_t *q)
{
    sl_mutex_lock(&q->mu);
    bool c = q->closed;
    sl_mutex_unlock(&q->mu);
    return c;
}

/* ---- budget ---- */

struct sl_worker_budget {
    const sl_allocator_t *a;
    sl_mutex_t mu;
    pthread_cond_t freed;
    uint64_t limit, used, pinned, peak, wait_ns;
    uint32_t stages, waiters, idle;
    uint64_t changes; /* bumped by every release, take, pin and idle change */
    bool closed;
};

sl_worker_budget_t *sl_worker_budget_new(const sl_allocator_t *a, uint64_t limit)
{
    sl_worker_budget_t *b = sl_calloc(a, 1, sizeof *b);
    if (!b) return NULL;
    b->a = a;
    b->limit = limit;
    sl_mutex_init(&b->mu);
    sl_clock_cond_init(&b->freed);
    return b;
}

void sl_worker_budget_destroy(sl_worker_budget_t *b)
{
    if (!b) return;
    sl_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->freed);
    sl_free(b->a, b, sizeof *b);
}

/* Account bytes more (under b->mu). */
static void take(sl_worker_budget_t *b, uint64_t bytes) SL_REQUIRES(b->mu)
{
    b->used += bytes;
    b->changes++;
    if (b->used > b->peak) b->peak = b->used;
}

/* Could anyone but the caller free memory (under b->mu)? Pinned bytes: a
 * client's ACK will; a stage that neither waits here nor idles is still
 * working. */
static bool others_may_free(const sl_worker_budget_t *b) SL_REQUIRES(b->mu)
{
    return b->stages == 0 || b->pinned > 0 || b->waiters + b->idle + 1 < b->stages;
}

sl_err_t sl_worker_budget_acquire(sl_worker_budget_t *b, uint64_t bytes, uint64_t held)
{
    sl_mutex_lock(&b->mu);
    uint64_t t0 = 0, stuck_since = 0, seen = 0;
    sl_err_t rc = SL_OK;
    while (!b->closed && b->limit && b->used + bytes > b->limit) {
        uint64_t now = sl_clock_ns();
        if (b->used <= held) {
            rc = SL_ERR_TOO_LARGE; /* only the caller's own bytes: none will be freed */
            break;
        }
        if (others_may_free(b) || stuck_since == 0 || b->changes != seen) {
            /* Waiting may end; re-check the hopeless case after a while
             * (a stage may be about to leave idle: only a standstill of
             * SL_WORKER_BUDGET_STUCK_MS counts). */
            stuck_since = others_may_free(b) ? 0 : now;
            seen = b->changes;
        } else if (now - stuck_since >= SL_WORKER_BUDGET_STUCK_MS * 1000000ull) {
            rc = SL_ERR_TOO_LARGE;
            break;
        }
        if (!t0) t0 = now;
        struct timespec ts = sl_clock_deadline_ms(SL_WORKER_BUDGET_STUCK_MS / 4);
        b->waiters++;
        sl_cond_timedwait(&b->freed, &b->mu, &ts);
        b->waiters--;
    }
    if (t0) b->wait_ns += sl_clock_ns() - t0;
    if (rc == SL_OK && b->closed) rc = SL_ERR_CLOSED;
    if (rc == SL_OK) take(b, bytes);
    sl_mutex_unlock(&b->mu);
    return rc;
}

bool sl_worker_budget_try_acquire(sl_worker_budget_t *b, uint64_t bytes)
{
    sl_mutex_lock(&b->mu);
    bool ok = !b->closed && (!b->limit || b->used + bytes <= b->limit);
    if (ok) take(b, bytes);
    sl_mutex_unlock(&b->mu);
    return ok;
}

void sl_worker_budget_stages(sl_worker_budget_t *b, uint32_t stages)
{
    sl_mutex_lock(&b->mu);
    b->stages = stages;
    sl_mutex_unlock(&b->mu);
}

void sl_worker_budget_idle(sl_worker_budget_t *b, bool idle)
{
    sl_mutex_lock(&b->mu);
    if (idle)
        b->idle++;
    else if (b->idle > 0)
        b->idle--;
    b->changes++;
    pthread_cond_broadcast(&b->freed);
    sl_mutex_unlock(&b->mu);
}

void sl_worker_budget_pin(sl_worker_budget_t *b, uint64_t bytes)
{
    sl_mutex_lock(&b->mu);
    b->pinned += bytes;
    b->changes++;
    pthread_cond_broadcast(&b->freed);
    sl_mutex_unlock(&b->mu);
}

void sl_worker_budget_release_pinned(sl_worker_budget_t *b, uint64_t bytes)
{
    if (bytes == 0) return;
    sl_mutex_lock(&b->mu);
    b->pinned = bytes > b->pinned ? 0 : b->pinned - bytes;
    b->used = bytes > b->used ? 0 : b->used - bytes;
    b->changes++;
    pthread_cond_broadcast(&b->freed);
    sl_mutex_unlock(&b->mu);
}

void sl_worker_budget_release(sl_worker_budget_t *b, uint64_t bytes)
{
    if (bytes == 0) return;
    sl_mutex_lock(&b->mu);
    b->used = bytes > b->used ? 0 : b->used - bytes;
    b->changes++;
    pthread_cond_broadcast(&b->freed);
    sl_mutex_unlock(&b->mu);
}

void sl_worker_budget_close(sl_worker_budget_t *b)
{
    sl_mutex_lock(&b->mu);
    b->closed = true;
    pthread_cond_broadcast(&b->freed);
    sl_mutex_unlock(&b->mu);
}

#define BUDGET_GETTER(name, field)                                                                 \
    uint64_t sl_worker_budget_##name(sl_worker_budget_t *b)                                        \
    {                                                                                              \
        sl_mutex_lock(&b->mu);                                                                     \
        uint64_t v = b->field;                                                                     \
        sl_mutex_unlock(&b->mu);                                                                   \
        return v;                                                                                  \
    }
BUDGET_GETTER(limit, limit)
BUDGET_GETTER(used, used)
BUDGET_GETTER(pinned, pinned)
BUDGET_GETTER(peak, peak)
BUDGET_GETTER(wait_ns, wait_ns)
