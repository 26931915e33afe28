/* Bounded blocking queue of typed messages, and the memory budget that the
 * worker's stages share: the two things its threads talk through.
 *
 *  - queue   a FIFO of sl_worker_msg_t with a capacity in messages. push blocks
 *            while full, pop while empty (both with a timeout); close wakes
 *            everyone, makes push fail and lets pop drain what is left.
 *            push_front never blocks: it returns an item taken out earlier
 *            (a batch a client did not acknowledge) to the head of the line.
 *  - budget  bytes accounted by every stage (decoded stripes, batches being
 *            built, encoded batches waiting for an acknowledgement). A
 *            producer that would take the total over the limit waits
 *            (back-pressure) until others release, never grows; when
 *            nothing could ever release enough it is refused.
 *
 * Both are safe to use from any thread. */
#ifndef SLUICE_DPP_WORKER_QUEUE_H
#define SLUICE_DPP_WORKER_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

/* One message. type is the producer's and consumer's business; ptr is owned
 * by the queue while queued and by whoever popped it afterwards. */
typedef struct sl_worker_msg {
    uint32_t type;
    void *ptr;
    uint64_t bytes; /* accounted bytes that travel with the message */
} sl_worker_msg_t;

typedef struct sl_worker_queue sl_worker_queue_t;

/* A queue of at most capacity messages (0: unbounded, for queues bounded by a
 * budget instead). Caller owns, free with sl_worker_queue_destroy. @return NULL
 * when out of memory. */
sl_worker_queue_t *sl_worker_queue_new(const sl_allocator_t *a, uint32_t capacity);

/* Frees the queue; messages still queued are dropped (their ptr is not
 * freed: drain with pop after close first). q may be NULL. */
void sl_worker_queue_destroy(sl_worker_queue_t *q);

/* Append m, waiting up to timeout_ms (< 0: forever) for room. @return SL_OK,
 * SL_ERR_TIMEOUT, SL_ERR_CLOSED (queue closed; m was not queued) or
 * SL_ERR_NOMEM. */
sl_err_t sl_worker_queue_push(sl_worker_queue_t *q, const sl_worker_msg_t *m, int timeout_ms);

/* Put m at the head, ignoring the capacity (it was queued before). Works on a
 * closed queue too, so nothing taken out is ever lost. @return SL_OK or
 * SL_ERR_NOMEM. */
sl_err_t sl_worker_queue_push_front(sl_worker_queue_t *q, const sl_worker_msg_t *m);

/* Insert m before the queued messages that go after it (later(queued, m)
 * true), scanning from the tail: a queue kept in that order stays in it
 * (the worker's rank queues of the deterministic order, in g order, when
 * a re-leased split's lower g's come after higher ones). Never waits (for
 * unbounded queues). @return SL_OK, SL_ERR_CLOSED or SL_ERR_NOMEM. */
sl_err_t sl_worker_queue_push_sorted(sl_worker_queue_t *q, const sl_worker_msg_t *m,
                                     bool (*later)(const sl_worker_msg_t *queued,
                                                   const sl_worker_msg_t *m));

/* Take the head, waiting up to timeout_ms (< 0: forever; 0: don't wait).
 * @return SL_OK, SL_ERR_TIMEOUT, or SL_ERR_CLOSED when closed and empty. */
sl_err_t sl_worker_queue_pop(sl_worker_queue_t *q, sl_worker_msg_t *m, int timeout_ms);

/* Take the head into *m only if ok(head, ctx) says it may go, in one step
 * under the queue's lock, never waiting: a head refused stays where it
 * is, and a message pushed meanwhile (push_sorted: a lower g of the
 * deterministic order) keeps its place before or after it. (The worker's
 * sender once popped the head and pushed a refused one back to the
 * front: a lower g sorted in while it was out went behind it, and the
 * rank stalled for good on a head past its g-window.) @return SL_OK,
 * SL_ERR_AGAIN (a head refused), SL_ERR_TIMEOUT (empty) or SL_ERR_CLOSED
 * (closed and empty). */
sl_err_t sl_worker_queue_pop_if(sl_worker_queue_t *q, sl_worker_msg_t *m,
                                bool (*ok)(const sl_worker_msg_t *head, void *ctx), void *ctx);

/* A copy of the last message (the tail) into *m, left queued. @return
 * false when the queue is empty. */
bool sl_worker_queue_peek_tail(sl_worker_queue_t *q, sl_worker_msg_t *m);

/* No more pushes; waiters wake up. Idempotent. */
void sl_worker_queue_close(sl_worker_queue_t *q);

uint32_t sl_worker_queue_len(sl_worker_queue_t *q);
bool sl_worker_queue_closed(sl_worker_queue_t *q);

/* ---- memory budget ---- */

typedef struct sl_worker_budget sl_worker_budget_t;

/* A budget of limit bytes (0: unlimited). Caller owns, free with
 * sl_worker_budget_destroy (NULL is fine). */
sl_worker_budget_t *sl_worker_budget_new(const sl_allocator_t *a, uint64_t limit);
void sl_worker_budget_destroy(sl_worker_budget_t *b);

/* Account bytes more, waiting while the total would pass the limit: the
 * total accounted never exceeds the limit. When waiting could never end
 * the bytes are refused instead (SL_ERR_TOO_LARGE, nothing taken):
 *  - every accounted byte is the caller's own (used <= held: held is what
 *    the caller has accounted and not released), so nobody else can free
 *    any; one item larger than the whole limit is such a case;
 *  - no byte is pinned (no client ACK can free one), and every other stage
 *    (sl_worker_budget_stages) is itself waiting here or idle
 *    (sl_worker_budget_idle), and nothing changed for SL_WORKER_BUDGET_STUCK_MS.
 * @return SL_OK, SL_ERR_CLOSED (closed while waiting; nothing taken) or
 * SL_ERR_TOO_LARGE. */
#define SL_WORKER_BUDGET_STUCK_MS 200
sl_err_t sl_worker_budget_acquire(sl_worker_budget_t *b, uint64_t bytes, uint64_t held);

/* Account bytes more only if they fit under the limit now, never waiting
 * (optional work: an object's read-ahead). @return whether they were
 * taken (false once closed). */
bool sl_worker_budget_try_acquire(sl_worker_budget_t *b, uint64_t bytes);

/* The threads that acquire (the worker's reader and transform threads): a
 * wait is hopeless only when all the others wait or idle too. 0 (the
 * default): only the used <= held rule. */
void sl_worker_budget_stages(sl_worker_budget_t *b, uint32_t stages);

/* A stage starts (idle true) or stops waiting for work rather than memory:
 * the reader for a split or for room in the transform queue, a transform
 * thread for a batch; a stage that has ended stays idle. */
void sl_worker_budget_idle(sl_worker_budget_t *b, bool idle);

/* Pinned bytes are accounted bytes that will be released without any
 * producer's help (encoded batches waiting for a client's ACK). pin moves
 * bytes already accounted into that class; release_pinned releases them. */
void sl_worker_budget_pin(sl_worker_budget_t *b, uint64_t bytes);
void sl_worker_budget_release_pinned(sl_worker_budget_t *b, uint64_t bytes);

void sl_worker_budget_release(sl_worker_budget_t *b, uint64_t bytes);

/* Wake every waiter; acquire fails from now on. */
void sl_worker_budget_close(sl_worker_budget_t *b);

uint64_t sl_worker_budget_limit(sl_worker_budget_t *b);
uint64_t sl_worker_budget_used(sl_worker_budget_t *b);
uint64_t sl_worker_budget_pinned(sl_worker_budget_t *b);
/* Highest total ever accounted (the high-water mark; never above the
 * limit). */
uint64_t sl_worker_budget_peak(sl_worker_budget_t *b);
/* Nanoseconds producers spent waiting in acquire (back-pressure). */
uint64_t sl_worker_budget_wait_ns(sl_worker_budget_t *b);

#endif
