/* The worker's bounded queue and memory budget (src/dpp/worker/queue/queue.h): FIFO
 * order, capacity and timeouts, push_front, push_sorted, close and drain, many producers
 * and consumers losing and duplicating nothing, and the budget's waiting
 * rules (limit, held bytes, pinned bytes, close). */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "dpp/worker/queue/queue.h"
#include "testutil.h"

static sl_worker_msg_t msg(uint64_t v)
{
    return (sl_worker_msg_t){.type = 7, .ptr = (void *)(uintptr_t)(v + 1), .bytes = v};
}

Test(queue, fifo_capacity_and_timeouts)
{
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 3);
    cr_assert_not_null(q);
    for (uint64_t i = 0; i < 3; i++) {
        cr_assert_eq(sl_worker_queue_len(q), i);
        cr_assert_eq(sl_worker_queue_push(q, &(sl_worker_msg_t){.bytes = i}, 0), SL_OK);
    }
    cr_assert_eq(sl_worker_queue_len(q), 3);
    sl_worker_msg_t m = msg(99);
    cr_assert_eq(sl_worker_queue_push(q, &m, 0), SL_ERR_TIMEOUT);
    cr_assert_eq(sl_worker_queue_push(q, &m, 20), SL_ERR_TIMEOUT);
    for (uint64_t i = 0; i < 3; i++) {
        cr_assert_eq(sl_worker_queue_pop(q, &m, 0), SL_OK);
        cr_assert_eq(m.bytes, i);
    }
    cr_assert_eq(sl_worker_queue_pop(q, &m, 0), SL_ERR_TIMEOUT);
    cr_assert_eq(sl_worker_queue_pop(q, &m, 20), SL_ERR_TIMEOUT);
    sl_worker_queue_destroy(q);
}

Test(queue, push_front_ignores_capacity_and_keeps_order)
{
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 2);
    sl_worker_msg_t a = msg(1), b = msg(2), c = msg(3), d = msg(4), m;
    cr_assert_eq(sl_worker_queue_push(q, &a, 0), SL_OK);
    cr_assert_eq(sl_worker_queue_push(q, &b, 0), SL_OK);
    /* returned items go to the head, past the capacity, growing the ring */
    cr_assert_eq(sl_worker_queue_push_front(q, &c), SL_OK);
    cr_assert_eq(sl_worker_queue_push_front(q, &d), SL_OK);
    cr_assert_eq(sl_worker_queue_len(q), 4);
    uint64_t want[] = {4, 3, 1, 2};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(sl_worker_queue_pop(q, &m, 0), SL_OK);
        cr_assert_eq(m.bytes, want[i]);
        cr_assert_eq(m.ptr, (void *)(uintptr_t)(want[i] + 1));
    }
    sl_worker_queue_destroy(q);
}

static bool bytes_later(const sl_worker_msg_t *queued, const sl_worker_msg_t *m)
{
    return queued->bytes > m->bytes;
}

/* push_sorted keeps a queue in its order across the ring's wrap and growth
 * (the rank queues of the deterministic order), equal keys in push order;
 * peek_tail shows the last without taking it; a closed queue refuses. */
Test(queue, push_sorted_keeps_the_order_and_peek_tail_shows_the_last)
{
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 0);
    sl_worker_msg_t m, first = msg(5);
    cr_assert_not(sl_worker_queue_peek_tail(q, &m));
    /* wrap the ring: pop a few first */
    for (uint64_t v = 0; v < 3; v++)
        cr_assert_eq(sl_worker_queue_push(q, &first, 0), SL_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sl_worker_queue_pop(q, &m, 0), SL_OK);
    const uint64_t in[] = {10, 11, 4, 12, 5, 0, 11, 30, 2, 1, 20, 3, 7, 6, 9, 8, 15, 14, 13};
    const size_t n = sizeof in / sizeof in[0];
    for (size_t i = 0; i < n; i++) {
        sl_worker_msg_t x = msg(in[i]);
        x.type = (uint32_t)i; /* which push: equal keys keep it */
        cr_assert_eq(sl_worker_queue_push_sorted(q, &x, bytes_later), SL_OK);
    }
    cr_assert(sl_worker_queue_peek_tail(q, &m));
    cr_assert_eq(m.bytes, 30);
    cr_assert_eq(sl_worker_queue_len(q), n);
    const uint64_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11, 12, 13, 14, 15, 20, 30};
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(sl_worker_queue_pop(q, &m, 0), SL_OK);
        cr_assert_eq(m.bytes, want[i], "at %zu: %llu", i, (unsigned long long)m.bytes);
        if (want[i] == 11) cr_assert_eq(m.type, i == 11 ? 1u : 6u, "equal keys in push order");
    }
    sl_worker_queue_close(q);
    sl_worker_msg_t late = msg(1);
    cr_assert_eq(sl_worker_queue_push_sorted(q, &late, bytes_later), SL_ERR_CLOSED);
    sl_worker_queue_destroy(q);
}

/* pop_if's test for the keys of a window: below limit. */
static bool below(const sl_worker_msg_t *head, void *ctx)
{
    return head->bytes < *(const uint64_t *)ctx;
}

/* pop_if takes the head only when the test lets it go, and a head refused
 * stays where it is: a lower key pushed sorted meanwhile goes before it. */
Test(queue, pop_if_takes_the_head_only_when_it_may_go)
{
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 0);
    sl_worker_msg_t m = msg(99);
    uint64_t limit = 10;
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_ERR_TIMEOUT);
    sl_worker_msg_t a = msg(20), b = msg(21), c = msg(5);
    cr_assert_eq(sl_worker_queue_push_sorted(q, &a, bytes_later), SL_OK);
    cr_assert_eq(sl_worker_queue_push_sorted(q, &b, bytes_later), SL_OK);
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_ERR_AGAIN);
    cr_assert_eq(m.bytes, 99, "a refused head is not handed out");
    cr_assert_eq(sl_worker_queue_len(q), 2);
    cr_assert_eq(sl_worker_queue_push_sorted(q, &c, bytes_later), SL_OK);
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_OK);
    cr_assert_eq(m.bytes, 5);
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_ERR_AGAIN);
    limit = 25;
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_OK);
    cr_assert_eq(m.bytes, 20);
    sl_worker_queue_close(q);
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_OK, "closed: drained first");
    cr_assert_eq(m.bytes, 21);
    cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_ERR_CLOSED);
    sl_worker_queue_destroy(q);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct sorted_feed {
    sl_worker_queue_t *q;
    uint64_t n;
    atomic_ullong taken; /* by the sender */
    atomic_bool stop;
} sorted_feed_t;

/* One lower g at a time, each once the sender took the one before: the
 * sender is refusing the head when each comes. */
static void *feed_sorted(void *arg)
{
    sorted_feed_t *f = arg;
    for (uint64_t k = 0; k < f->n && !atomic_load(&f->stop); k++) {
        sl_worker_msg_t m = msg(k);
        cr_assert_eq(sl_worker_queue_push_sorted(f->q, &m, bytes_later), SL_OK);
        while (atomic_load(&f->taken) <= k && !atomic_load(&f->stop))
            sched_yield();
    }
    return NULL;
}

/* The worker's sender and the deterministic order (server_conn.c): a rank's
 * queue in g order whose head is past the client's g-window, while the
 * hold queues lower g's, one at a time, in a second thread (a split leased
 * again after a kill, or bases told out of order). The sender takes only
 * the g the client waits for; every one of them must reach it, in order,
 * within a bound. The sender once popped the head and pushed it back to
 * the front when refused: a lower g sorted in while the head was out went
 * behind it, and the rank stalled for good (fleet_order_test, found by
 * CI). */
Test(queue, a_refused_head_never_goes_ahead_of_a_lower_g_pushed_meanwhile)
{
    enum { N = 2000, HIGH = 1000000 };
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 0);
    for (uint64_t k = HIGH; k < HIGH + 4; k++) {
        sl_worker_msg_t m = msg(k);
        cr_assert_eq(sl_worker_queue_push_sorted(q, &m, bytes_later), SL_OK);
    }
    /* rounds until N or the time budget; a stall is no g taken for a while
     * (the old sender's stall was for good; a loaded machine only slows
     * the rounds down) */
    double start = now_s(), budget = tu_timeout(5), stall = tu_timeout(4);
    sorted_feed_t f = {.q = q, .n = N};
    atomic_init(&f.taken, 0);
    atomic_init(&f.stop, false);
    pthread_t th;
    pthread_create(&th, NULL, feed_sorted, &f);
    uint64_t next = 0, refused = 0;
    double last = start;
    bool stalled = false;
    while (next < N && !stalled) {
        uint64_t limit = next + 1; /* the window: the next g only */
        sl_worker_msg_t m;
        sl_err_t rc = sl_worker_queue_pop_if(q, &m, below, &limit);
        double now = now_s();
        if (rc == SL_OK) {
            cr_assert_eq(m.bytes, next, "g %llu taken while g %llu was awaited",
                         (unsigned long long)m.bytes, (unsigned long long)next);
            atomic_store(&f.taken, ++next);
            last = now;
            if (now - start > budget) break; /* enough rounds on a slow machine */
        } else {
            cr_assert(rc == SL_ERR_AGAIN || rc == SL_ERR_TIMEOUT, "%s", sl_err_str(rc));
            refused += rc == SL_ERR_AGAIN;
            stalled = now - last > stall;
        }
    }
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    cr_assert_not(stalled, "stalled at g %llu (%llu refusals): the head is past the window",
                  (unsigned long long)next, (unsigned long long)refused);
    cr_log_info("%llu rounds, %llu refusals", (unsigned long long)next,
                (unsigned long long)refused);
    /* the g pushed as the sender stopped, if any, then the high ones in order */
    uint64_t limit = UINT64_MAX;
    sl_worker_msg_t m;
    if (sl_worker_queue_len(q) == 5) {
        cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_OK);
        cr_assert_eq(m.bytes, next);
    }
    cr_assert_eq(sl_worker_queue_len(q), 4);
    for (uint64_t k = HIGH; k < HIGH + 4; k++) {
        cr_assert_eq(sl_worker_queue_pop_if(q, &m, below, &limit), SL_OK);
        cr_assert_eq(m.bytes, k);
    }
    sl_worker_queue_destroy(q);
}

Test(queue, close_drains_then_reports_closed)
{
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, 0);
    for (uint64_t i = 0; i < 100; i++) {
        sl_worker_msg_t m = msg(i);
        cr_assert_eq(sl_worker_queue_push(q, &m, 0), SL_OK); /* unbounded: never full */
    }
    sl_worker_queue_close(q);
    cr_assert(sl_worker_queue_closed(q));
    sl_worker_msg_t m = msg(5);
    cr_assert_eq(sl_worker_queue_push(q, &m, -1), SL_ERR_CLOSED);
    for (uint64_t i = 0; i < 100; i++) {
        cr_assert_eq(sl_worker_queue_pop(q, &m, -1), SL_OK);
        cr_assert_eq(m.bytes, i);
    }
    cr_assert_eq(sl_worker_queue_pop(q, &m, -1), SL_ERR_CLOSED);
    /* returned items are never lost, even after close */
    sl_worker_msg_t r = msg(42);
    cr_assert_eq(sl_worker_queue_push_front(q, &r), SL_OK);
    cr_assert_eq(sl_worker_queue_pop(q, &m, -1), SL_OK);
    cr_assert_eq(m.bytes, 42);
    sl_worker_queue_destroy(q);
    sl_worker_queue_destroy(NULL);
}

typedef struct mt {
    sl_worker_queue_t *q;
    uint32_t id, per;
    atomic_uint *seen;
} mt_t;

static void *producer(void *arg)
{
    mt_t *t = arg;
    for (uint32_t i = 0; i < t->per; i++) {
        sl_worker_msg_t m = msg((uint64_t)t->id * t->per + i);
        cr_assert_eq(sl_worker_queue_push(t->q, &m, -1), SL_OK);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    mt_t *t = arg;
    sl_worker_msg_t m;
    uint64_t last[8];
    for (int i = 0; i < 8; i++)
        last[i] = UINT64_MAX;
    while (sl_worker_queue_pop(t->q, &m, -1) == SL_OK) {
        atomic_fetch_add(&t->seen[m.bytes], 1);
        /* items of one producer come out in the order it pushed them */
        uint32_t p = (uint32_t)(m.bytes / t->per);
        cr_assert(last[p] == UINT64_MAX || m.bytes > last[p]);
        last[p] = m.bytes;
    }
    return NULL;
}

Test(queue, many_producers_and_consumers)
{
    uint64_t seed = tu_seed("queue.many_producers_and_consumers");
    uint32_t cap = 1 + (uint32_t)tu_below(&seed, 8);
    enum { P = 4, C = 3, PER = 20000 };
    sl_worker_queue_t *q = sl_worker_queue_new(NULL, cap);
    atomic_uint *seen = calloc(P * PER, sizeof *seen);
    pthread_t pt[P], ct[C];
    mt_t pa[P], ca[C];
    for (uint32_t i = 0; i < C; i++) {
        ca[i] = (mt_t){q, i, PER, seen};
        pthread_create(&ct[i], NULL, consumer, &ca[i]);
    }
    for (uint32_t i = 0; i < P; i++) {
        pa[i] = (mt_t){q, i, PER, seen};
        pthread_create(&pt[i], NULL, producer, &pa[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(pt[i], NULL);
    sl_worker_queue_close(q);
    for (int i = 0; i < C; i++)
        pthread_join(ct[i], NULL);
    for (uint32_t i = 0; i < P * PER; i++)
        cr_assert_eq(seen[i], 1, "item %u seen %u times", i, seen[i]);
    free(seen);
    sl_worker_queue_destroy(q);
}

typedef struct bt {
    sl_worker_budget_t *b;
    uint64_t bytes, held;
    atomic_int state; /* 0 waiting, 1 acquired, 2 closed, 3 refused as too large */
} bt_t;

static void *acquirer(void *arg)
{
    bt_t *t = arg;
    sl_err_t rc = sl_worker_budget_acquire(t->b, t->bytes, t->held);
    atomic_store(&t->state, rc == SL_OK ? 1 : rc == SL_ERR_CLOSED ? 2 : 3);
    return NULL;
}

static void settle(void)
{
    usleep(50 * 1000);
}

Test(budget, waits_for_release_and_tracks_peak)
{
    sl_worker_budget_t *b = sl_worker_budget_new(NULL, 1000);
    cr_assert_eq(sl_worker_budget_acquire(b, 600, 0), SL_OK);
    cr_assert_eq(sl_worker_budget_used(b), 600);
    bt_t t = {.b = b, .bytes = 500, .held = 0};
    pthread_t th;
    pthread_create(&th, NULL, acquirer, &t);
    settle();
    cr_assert_eq(atomic_load(&t.state), 0, "600 + 500 > 1000 must wait");
    sl_worker_budget_release(b, 100);
    settle();
    cr_assert_eq(atomic_load(&t.state), 1, "500 + 500 fits once 100 are released");
    pthread_join(th, NULL);
    cr_assert_eq(sl_worker_budget_used(b), 1000);
    cr_assert_eq(sl_worker_budget_peak(b), 1000);
    cr_assert_gt(sl_worker_budget_wait_ns(b), 0);
    sl_worker_budget_release(b, 1000);
    cr_assert_eq(sl_worker_budget_used(b), 0);
    cr_assert_eq(sl_worker_budget_peak(b), 1000);
    sl_worker_budget_destroy(b);
}

/* The limit is never passed: what can never fit is refused (the caller
 * fails with a message) instead of taken. */
Test(budget, never_passes_the_limit)
{
    sl_worker_budget_t *b = sl_worker_budget_new(NULL, 1000);
    /* one item larger than the whole limit */
    cr_assert_eq(sl_worker_budget_acquire(b, 5000, 0), SL_ERR_TOO_LARGE);
    cr_assert_eq(sl_worker_budget_used(b), 0);
    /* everything accounted is the caller's: nobody else will free any */
    cr_assert_eq(sl_worker_budget_acquire(b, 800, 0), SL_OK);
    cr_assert_eq(sl_worker_budget_acquire(b, 800, 800), SL_ERR_TOO_LARGE);
    cr_assert_eq(sl_worker_budget_acquire(b, 200, 800), SL_OK);
    cr_assert_eq(sl_worker_budget_used(b), 1000);
    cr_assert_eq(sl_worker_budget_peak(b), 1000);
    sl_worker_budget_release(b, 1000);
    sl_worker_budget_destroy(b);
}

/* try_acquire takes only what fits now, never waiting (an object's
 * read-ahead): refused when it would pass the limit and once closed;
 * unlimited with limit 0. */
Test(budget, try_acquire_takes_only_what_fits_now)
{
    sl_worker_budget_t *b = sl_worker_budget_new(NULL, 1000);
    cr_assert(sl_worker_budget_try_acquire(b, 600));
    cr_assert(!sl_worker_budget_try_acquire(b, 401));
    cr_assert_eq(sl_worker_budget_used(b), 600);
    cr_assert(sl_worker_budget_try_acquire(b, 400));
    cr_assert_eq(sl_worker_budget_used(b), 1000);
    cr_assert_eq(sl_worker_budget_peak(b), 1000);
    cr_assert(!sl_worker_budget_try_acquire(b, 1));
    sl_worker_budget_release(b, 1000);
    sl_worker_budget_close(b);
    cr_assert(!sl_worker_budget_try_acquire(b, 1));
    cr_assert_eq(sl_worker_budget_used(b), 0);
    sl_worker_budget_destroy(b);
    b = sl_worker_budget_new(NULL, 0);
    cr_assert(sl_worker_budget_try_acquire(b, UINT64_MAX / 2));
    sl_worker_budget_release(b, UINT64_MAX / 2);
    sl_worker_budget_destroy(b);
}

/* With stages declared, a wait is hopeless when nothing is pinned and
 * every other stage waits or idles: refused after a standstill of
 * SL_WORKER_BUDGET_STUCK_MS, not a hang. Pinned bytes (a client's ACK will
 * free them) or a busy stage keep it waiting. */
Test(budget, stages_pinned_bytes_and_close)
{
    sl_worker_budget_t *b = sl_worker_budget_new(NULL, 1000);
    sl_worker_budget_stages(b, 3);
    cr_assert_eq(sl_worker_budget_acquire(b, 500, 0), SL_OK); /* another stage's */
    sl_worker_budget_pin(b, 400);                             /* 400 of them wait for an ACK */
    cr_assert_eq(sl_worker_budget_pinned(b), 400);
    bt_t t = {.b = b, .bytes = 600, .held = 0};
    pthread_t th;
    pthread_create(&th, NULL, acquirer, &t);
    sl_worker_budget_idle(b, true);
    sl_worker_budget_idle(b, true); /* the two other stages idle */
    usleep((SL_WORKER_BUDGET_STUCK_MS * 2) * 1000);
    cr_assert_eq(atomic_load(&t.state), 0, "pinned bytes will be freed: wait");
    sl_worker_budget_release_pinned(b, 400);
    settle();
    cr_assert_eq(atomic_load(&t.state), 1);
    pthread_join(th, NULL);
    cr_assert_eq(sl_worker_budget_used(b), 700);
    cr_assert_eq(sl_worker_budget_pinned(b), 0);
    /* nothing pinned, both others idle: hopeless, refused */
    bt_t t2 = {.b = b, .bytes = 400, .held = 0};
    uint64_t t0 = (uint64_t)time(NULL);
    pthread_create(&th, NULL, acquirer, &t2);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&t2.state), 3);
    cr_assert_leq((uint64_t)time(NULL) - t0, 2);
    cr_assert_eq(sl_worker_budget_used(b), 700);
    /* one stage busy again: it may free memory, so wait; close wakes and
     * refuses */
    sl_worker_budget_idle(b, false);
    bt_t t3 = {.b = b, .bytes = 400, .held = 0};
    pthread_create(&th, NULL, acquirer, &t3);
    usleep((SL_WORKER_BUDGET_STUCK_MS * 2) * 1000);
    cr_assert_eq(atomic_load(&t3.state), 0);
    sl_worker_budget_close(b);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&t3.state), 2);
    cr_assert_eq(sl_worker_budget_used(b), 700);
    cr_assert_eq(sl_worker_budget_peak(b), 700);
    sl_worker_budget_destroy(b);
    sl_worker_budget_destroy(NULL);
}
