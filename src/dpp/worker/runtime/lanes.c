/* The worker's stripe lanes (docs/WORKER.md, "Threads"): with --threads
 * N > 1 the reader thread hands each stripe to one of N lanes, which
 * reads (decodes) and filters it, and once the reader has batched it in
 * stripe order, makes its fused batches (decode, transforms and encode of
 * one stripe all on one lane). Batching stays on the reader thread, in
 * order, so the batches are those of one thread; only decoding, filtering
 * and making the frames run side by side.
 *
 * A lane holds one stripe at a time, in its own table reader's decode
 * buffers: they stay valid until the lane has made the stripe's batches,
 * so the fused batches read the stripe where it lies, as on one thread.
 * The lane makes each fused batch as soon as the reader has cut it
 * (dpp_lane_begin_fill), not once the reader is through with the whole
 * stripe: else the lane sat idle while its stripe was batched, and with
 * two lanes' stripes read together only the reader thread ran. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "dpp/worker/runtime/worker_internal.h"

enum { LANE_FREE, LANE_READ, LANE_READY, LANE_FILL };

/* A direct batch kept for the lane to make after its turn: the batcher's
 * description, deep-copied (it is borrowed for the call only; the rows
 * it points into are the lane's stripe). */
typedef struct lane_direct {
    sl_worker_direct_t d;
    const sl_pipeline_fused_t *fused; /* the reader's, decided on its first stripe */
    sl_worker_lease_origin_t lease;
    uint64_t *start, *span, *key_offsets; /* [F], [F], [F + 1] */
    sl_worker_row_run_t *runs;
} lane_direct_t;

struct dpp_lane {
    dpp_lanes_t *p;
    pthread_t th;
    bool started;
    int state; /* guarded by p->mu */
    /* the task: stripe of sp */
    const sl_wh_split_t *sp;
    uint32_t stripe;
    bool drop;   /* retire the batches not yet made */
    bool closed; /* the reader is through: no more batches (under mu) */
    /* the lane's own reader and scratch; its reader's memory hook counts
     * the read-ahead and read buffer in the budget as the lane's own (io),
     * so that the lane, not the reader thread, drops the read-ahead when
     * its wait for room cannot end otherwise */
    sl_wh_reader_t *r;
    sl_wh_read_opts_t ro;
    sl_wh_mem_t mem;
    _Atomic uint64_t io;
    char path[1024];
    uint32_t *selected;
    float *weights;
    uint32_t cap;
    uint64_t est, held; /* bytes expected of the next stripe; bytes held now */
    /* the result of the read */
    dpp_lane_stripe_t out;
    sl_err_t rc;
    sl_error_t err;
    lane_direct_t *direct;
    uint32_t num_direct, direct_cap;
};

struct dpp_lanes {
    sl_worker_t *w;
    sl_wh_read_opts_t ro;
    bool weigh;
    sl_mutex_t mu;
    /* Held (before mu) while the reader thread opens a free lane's reader
     * and while a thread drops the read-ahead of lanes it does not own
     * (drop_others): a lane not reading keeps its reader meanwhile. */
    sl_mutex_t rmu;
    pthread_cond_t cv; /* any lane's state changed, or quit */
    bool quit;
    uint64_t est_max; /* the largest stripe any lane has read (under mu) */
    uint32_t n;
    /* The lane whose turn it is (under mu): stripes go to the lanes in
     * turn, so with n lanes each reads every n-th stripe of a file and its
     * reader's read-ahead fetches the one it reads next (ahead_stride n),
     * which a first-free-lane choice made irregular (no read-ahead at all).
     * Only for a table in a store (in_turn): a local file is not read
     * ahead, and there the first free lane takes the next stripe. */
    uint32_t turn;
    bool in_turn;
    dpp_lane_t *lanes;
};

static void direct_free(const sl_allocator_t *a, lane_direct_t *e)
{
    uint32_t F = e->d.rows->sparse.num_keys;
    if (e->start) sl_free(a, e->start, (F ? F : 1) * sizeof *e->start);
    if (e->span) sl_free(a, e->span, (F ? F : 1) * sizeof *e->span);
    if (e->key_offsets) sl_free(a, e->key_offsets, (F + 1) * sizeof *e->key_offsets);
    if (e->runs) sl_free(a, e->runs, (e->d.num_runs ? e->d.num_runs : 1) * sizeof *e->runs);
}

/* The lane reader's memory hook (sl_wh_mem_t): the worker's budget, the
 * bytes the lane's own (io). */
static bool lane_mem_try_take(void *ctx, uint64_t bytes)
{
    dpp_lane_t *l = ctx;
    if (!sl_worker_budget_try_acquire(l->p->w->budget, bytes)) return false;
    atomic_fetch_add(&l->io, bytes);
    return true;
}

static sl_err_t lane_take(dpp_lane_t *l, uint64_t bytes, uint64_t held, const char *what,
                          sl_error_t *err);

static sl_err_t lane_mem_take(void *ctx, uint64_t bytes, const char *what, sl_error_t *err)
{
    dpp_lane_t *l = ctx;
    sl_err_t rc = lane_take(l, bytes, l->held, what, err);
    if (rc == SL_OK) atomic_fetch_add(&l->io, bytes);
    return rc;
}

static void lane_mem_give(void *ctx, uint64_t bytes)
{
    dpp_lane_t *l = ctx;
    atomic_fetch_sub(&l->io, bytes);
    sl_worker_budget_release(l->p->w->budget, bytes);
}

/* Take bytes from the budget for the lane, which holds held besides its
 * reader's (io): when only the lane's own bytes fill the budget, or nothing
 * moves, the read-ahead is dropped and the take tried again, so that
 * read-ahead never makes a worker fail (reader.c, reader_take). On the
 * lane's thread, while it reads. */
/* Drop the read-ahead of every lane but self that is not reading (a lane
 * waiting for its turn, making its batches, or free holds a fetch ahead
 * of its next stripe, which may wait for the room it holds). Under rmu
 * and mu: such a lane's reader is neither replaced nor read meanwhile.
 * @return whether any held bytes. */
static bool drop_others(dpp_lanes_t *p, const dpp_lane_t *self)
{
    bool any = false;
    sl_mutex_lock(&p->rmu);
    sl_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->n; i++) {
        dpp_lane_t *l = &p->lanes[i];
        if (l == self || l->state == LANE_READ || !l->r || atomic_load(&l->io) == 0) continue;
        sl_wh_reader_drop_ahead(l->r);
        any = true;
    }
    sl_mutex_unlock(&p->mu);
    sl_mutex_unlock(&p->rmu);
    return any;
}

static sl_err_t lane_take(dpp_lane_t *l, uint64_t bytes, uint64_t held, const char *what,
                          sl_error_t *err)
{
    sl_worker_t *w = l->p->w;
    sl_err_t rc = dpp_worker_budget_take(w, bytes, held + atomic_load(&l->io), what, err);
    if (rc == SL_ERR_NOMEM) {
        bool any = l->r != NULL && atomic_load(&l->io) > 0;
        if (any) sl_wh_reader_drop_ahead(l->r); /* a no-op inside its own fetch */
        if (drop_others(l->p, l)) any = true;
        if (any) rc = dpp_worker_budget_take(w, bytes, held + atomic_load(&l->io), what, err);
    }
    return rc;
}

/* Open the split's file on the lane's reader (kept from one split of the
 * file to the next, as the reader thread does): a twin of base, the
 * reader thread's reader already on the split, so that the file's footer
 * is fetched once per worker, not once more per lane. On the reader
 * thread, while the lane is free (base is the reader thread's). */
static sl_err_t lane_open(dpp_lane_t *l, const sl_wh_reader_t *base, sl_error_t *err)
{
    const sl_wh_split_t *sp = l->sp;
    if (l->r && strcmp(l->path, sp->path) == 0 &&
        (sp->footer_checksum == 0 || sp->footer_checksum == sl_wh_reader_footer_checksum(l->r)))
        return sl_wh_reader_set_range(l->r, sp->stripe_begin, sp->stripe_end, err);
    dpp_worker_close_table_reader(l->p->w, l->r);
    l->r = NULL;
    sl_err_t rc = sl_wh_reader_open_twin(base, &l->ro, &l->r, err);
    if (rc == SL_OK && strlen(sp->path) < sizeof l->path)
        snprintf(l->path, sizeof l->path, "%s", sp->path);
    else
        l->path[0] = '\0';
    return rc;
}

/* Read and filter the lane's stripe; the budget holds its decoded bytes
 * (l->held) until the lane is finished with it. */
static sl_err_t lane_read(dpp_lane_t *l, sl_error_t *err)
{
    sl_worker_t *w = l->p->w;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    l->out = (dpp_lane_stripe_t){0};
    sl_err_t rc;
    if ((rc = lane_take(l, l->est, 0, "the next stripe", err))) return rc;
    l->held = l->est;
    uint64_t tr = now_ns(CLOCK_MONOTONIC);
    l->out.waited_ns = tr - t0;
    const sl_wh_rows_t *rows = NULL;
    if ((rc = sl_wh_reader_read_stripe(l->r, l->stripe, &rows, err))) {
        l->out.from_read = true;
        return rc;
    }
    uint64_t sb = dpp_batch_bytes(&rows->batch);
    if (sb > l->held) {
        char what[320];
        snprintf(what, sizeof what, "%.250s stripe %u decoded", rows->file, rows->stripe);
        uint64_t a0 = now_ns(CLOCK_MONOTONIC);
        if ((rc = lane_take(l, sb - l->held, l->held, what, err))) return rc;
        l->out.waited_ns += now_ns(CLOCK_MONOTONIC) - a0;
    } else {
        sl_worker_budget_release(w->budget, l->held - sb);
    }
    l->held = l->est = sb;
    uint64_t t1 = now_ns(CLOCK_MONOTONIC);
    uint32_t n = rows->batch.batch_size;
    if (n > l->cap) {
        const sl_allocator_t *a = w->a;
        if (l->selected) sl_free(a, l->selected, (size_t)l->cap * sizeof *l->selected);
        if (l->weights) sl_free(a, l->weights, (size_t)l->cap * sizeof *l->weights);
        l->selected = sl_alloc(a, (size_t)n * sizeof *l->selected);
        l->weights = sl_alloc(a, (size_t)n * sizeof *l->weights);
        l->cap = l->selected && l->weights ? n : 0;
        if (!l->cap) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    }
    rc = sl_pipeline_plan_filter(w->plan, rows, l->selected, l->weights, &l->out.kept, err);
    l->out.rows = rows;
    l->out.selected = l->selected;
    l->out.weights = l->weights;
    l->out.bytes = sb;
    l->out.read_ns = t1 - tr - (l->out.waited_ns - (tr - t0));
    l->out.filter_ns = now_ns(CLOCK_MONOTONIC) - t1;
    return rc;
}

/* Make the stripe's direct batches as the reader cuts them (or retire
 * them, dropped), until the reader is through with the stripe; then let
 * the stripe go. A failure is the batch's: a split error goes to the
 * lease's source (as a transform thread's), anything else fails the
 * worker; the batches after it are retired. The reader appends to
 * l->direct under mu (it may move the array): an entry is copied out
 * under mu; what it points to stays put until the fill's end. */
static void lane_fill(dpp_lane_t *l)
{
    dpp_lanes_t *p = l->p;
    sl_worker_t *w = p->w;
    bool failed = false;
    for (uint32_t i = 0;; i++) {
        sl_mutex_lock(&p->mu);
        if (i >= l->num_direct && !l->closed) {
            sl_worker_budget_idle(w->budget, true); /* waiting for the reader's next batch */
            while (i >= l->num_direct && !l->closed) {
                struct timespec dl = sl_clock_deadline_ms(50);
                sl_cond_timedwait(&p->cv, &p->mu, &dl);
            }
            sl_worker_budget_idle(w->budget, false);
        }
        if (i >= l->num_direct) {
            sl_mutex_unlock(&p->mu);
            break;
        }
        lane_direct_t e = l->direct[i];
        if (l->drop) failed = true;
        sl_mutex_unlock(&p->mu);
        if (e.d.lease) e.d.lease = &e.lease;
        void *lease = e.d.lease ? e.lease.handle : NULL;
        if (!failed && atomic_load(&w->stopping)) failed = true;
        if (failed) {
            dpp_worker_retire(w, lease);
            continue;
        }
        sl_error_t err = {0};
        uint64_t waited = 0;
        sl_err_t rc = dpp_worker_fused_batch(w, e.fused, &e.d, l->held, true, &waited, &err);
        if (rc == SL_OK) continue; /* counted as encode time by dpp_worker_send */
        failed = true;
        bool split = lease && w->source.lease_failed && dpp_worker_split_error(rc, false) &&
                     !atomic_load(&w->stopping);
        if (split) w->source.lease_failed(w->source.ctx, lease, rc, (int32_t)l->stripe, err.msg);
        dpp_worker_retire(w, lease);
        if (!split && rc != SL_ERR_CLOSED && !atomic_load(&w->stopping))
            dpp_worker_fail(w, rc, err.msg);
    }
    sl_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < l->num_direct; i++)
        direct_free(w->a, &l->direct[i]);
    l->num_direct = 0;
    sl_mutex_unlock(&p->mu);
    sl_worker_budget_release(w->budget, l->held);
    l->held = 0;
}

static void *lane_main(void *arg)
{
    dpp_lane_t *l = arg;
    dpp_lanes_t *p = l->p;
    sl_worker_t *w = p->w;
    pthread_setname_np(pthread_self(), "sl-w-lane");
    sl_worker_budget_idle(w->budget, true); /* waiting for a stripe */
    sl_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && l->state != LANE_READ && l->state != LANE_FILL)
            sl_cond_wait(&p->cv, &p->mu);
        if (p->quit) break;
        int task = l->state;
        sl_mutex_unlock(&p->mu);
        sl_worker_budget_idle(w->budget, false);
        if (task == LANE_READ) {
            l->err = (sl_error_t){0};
            l->rc = lane_read(l, &l->err);
            if (l->rc != SL_OK) { /* the reader reports it in its turn; the reader may be bad */
                dpp_worker_close_table_reader(w, l->r);
                l->r = NULL;
                l->path[0] = '\0';
            }
        } else {
            lane_fill(l);
        }
        sl_worker_budget_idle(w->budget, true);
        sl_mutex_lock(&p->mu);
        if (task == LANE_READ && l->est > p->est_max) p->est_max = l->est;
        l->state = task == LANE_READ ? LANE_READY : LANE_FREE;
        pthread_cond_broadcast(&p->cv);
    }
    sl_mutex_unlock(&p->mu);
    sl_mutex_lock(&w->mu);
    w->st.cpu_ns += now_ns(CLOCK_THREAD_CPUTIME_ID);
    sl_mutex_unlock(&w->mu);
    return NULL;
}

sl_err_t dpp_lanes_new(sl_worker_t *w, uint32_t n, const sl_wh_read_opts_t *ro, dpp_lanes_t **out,
                       sl_error_t *err)
{
    *out = NULL;
    dpp_lanes_t *p = sl_calloc(w->a, 1, sizeof *p);
    if (p) p->lanes = sl_calloc(w->a, n, sizeof *p->lanes);
    if (!p || !p->lanes) {
        if (p) sl_free(w->a, p, sizeof *p);
        return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory for %u stripe lanes", n);
    }
    p->w = w;
    p->ro = *ro;
    p->in_turn = w->table != NULL && sl_wh_table_store(w->table) != NULL;
    p->ro.ahead_stride = p->in_turn ? n : 1;
    p->n = n;
    sl_mutex_init(&p->mu);
    sl_mutex_init(&p->rmu);
    sl_clock_cond_init(&p->cv);
    for (uint32_t i = 0; i < n; i++) {
        dpp_lane_t *l = &p->lanes[i];
        l->p = p;
        l->mem = (sl_wh_mem_t){
            .ctx = l, .try_take = lane_mem_try_take, .take = lane_mem_take, .give = lane_mem_give};
        l->ro = p->ro;
        if (ro->mem) l->ro.mem = &l->mem; /* else not counted, as ro says */
        if (pthread_create(&l->th, NULL, lane_main, l) != 0) {
            dpp_lanes_destroy(p);
            return sl_error_set(err, SL_ERR_IO, "worker: cannot start stripe lane %u of %u", i, n);
        }
        l->started = true;
    }
    *out = p;
    return SL_OK;
}

void dpp_lanes_destroy(dpp_lanes_t *p)
{
    if (!p) return;
    sl_worker_t *w = p->w;
    /* a lane still making batches finishes them (they are retired when
     * the worker stops); then every lane quits */
    sl_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->n; i++)
        while (p->lanes[i].started && p->lanes[i].state != LANE_FREE &&
               p->lanes[i].state != LANE_READY)
            sl_cond_wait(&p->cv, &p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv);
    sl_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->n; i++) {
        dpp_lane_t *l = &p->lanes[i];
        if (l->started) pthread_join(l->th, NULL);
        for (uint32_t j = 0; j < l->num_direct; j++) { /* a stripe the reader never finished */
            dpp_worker_retire(w, l->direct[j].d.lease ? l->direct[j].lease.handle : NULL);
            direct_free(w->a, &l->direct[j]);
        }
        if (l->direct) sl_free(w->a, l->direct, (size_t)l->direct_cap * sizeof *l->direct);
        sl_worker_budget_release(w->budget, l->held);
        dpp_worker_close_table_reader(w, l->r);
        if (l->selected) sl_free(w->a, l->selected, (size_t)l->cap * sizeof *l->selected);
        if (l->weights) sl_free(w->a, l->weights, (size_t)l->cap * sizeof *l->weights);
    }
    pthread_cond_destroy(&p->cv);
    sl_mutex_destroy(&p->mu);
    sl_mutex_destroy(&p->rmu);
    sl_free(w->a, p->lanes, (size_t)p->n * sizeof *p->lanes);
    sl_free(w->a, p, sizeof *p);
}

dpp_lane_t *dpp_lanes_get(dpp_lanes_t *p, bool wait)
{
    sl_worker_t *w = p->w;
    dpp_lane_t *got = NULL;
    sl_mutex_lock(&p->mu);
    for (;;) {
        if (p->in_turn) {
            dpp_lane_t *l = &p->lanes[p->turn % p->n];
            if (l->state == LANE_FREE) {
                got = l;
                p->turn++;
            }
        } else {
            for (uint32_t i = 0; i < p->n && !got; i++)
                if (p->lanes[i].state == LANE_FREE) got = &p->lanes[i];
        }
        if (got || !wait || atomic_load(&w->stopping)) break;
        struct timespec dl = sl_clock_deadline_ms(50); /* look at stopping now and then */
        sl_cond_timedwait(&p->cv, &p->mu, &dl);
    }
    sl_mutex_unlock(&p->mu);
    return got;
}

bool dpp_lanes_drop_ahead(dpp_lanes_t *p)
{
    return p != NULL && drop_others(p, NULL);
}

uint32_t dpp_lanes_busy(dpp_lanes_t *p)
{
    uint32_t n = 0;
    sl_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->n; i++)
        n += p->lanes[i].state != LANE_FREE;
    sl_mutex_unlock(&p->mu);
    return n;
}

void dpp_lanes_wait_fewer(dpp_lanes_t *p, uint32_t busy)
{
    sl_worker_t *w = p->w;
    sl_mutex_lock(&p->mu);
    for (;;) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < p->n; i++)
            n += p->lanes[i].state != LANE_FREE;
        if (n < busy || atomic_load(&w->stopping)) break;
        struct timespec dl = sl_clock_deadline_ms(50);
        sl_cond_timedwait(&p->cv, &p->mu, &dl);
    }
    sl_mutex_unlock(&p->mu);
}

uint64_t dpp_lanes_est(dpp_lanes_t *p)
{
    sl_mutex_lock(&p->mu);
    uint64_t m = p->est_max;
    sl_mutex_unlock(&p->mu);
    return m;
}

void dpp_lane_read(dpp_lane_t *l, const sl_wh_split_t *sp, uint32_t stripe,
                   const sl_wh_reader_t *base, uint32_t ahead_end)
{
    dpp_lanes_t *p = l->p;
    l->sp = sp;
    sl_error_t e = {0};
    sl_mutex_lock(&p->rmu);
    sl_err_t rc = lane_open(l, base, &e); /* the lane is free: its reader is this thread's */
    if (rc != SL_OK) {                    /* reported in the stripe's turn, as a failed read */
        dpp_worker_close_table_reader(p->w, l->r);
        l->r = NULL;
        l->path[0] = '\0';
    } else {
        sl_wh_reader_set_ahead_end(l->r, ahead_end);
    }
    sl_mutex_lock(&p->mu);
    sl_mutex_unlock(&p->rmu); /* after mu: the lane leaves FREE before others look again */
    /* a lane takes the largest stripe any lane has read before reading:
     * a stripe larger than the last one (a file's short last stripe, then
     * a full one) is not a surprise that others' read-ahead left no room
     * for */
    if (p->est_max > l->est) l->est = p->est_max;
    l->stripe = stripe;
    l->drop = false;
    if (rc != SL_OK) {
        l->rc = rc;
        l->err = e;
        l->out = (dpp_lane_stripe_t){.from_read = true}; /* the split's file would not open */
        l->state = LANE_READY;
    } else {
        l->state = LANE_READ;
    }
    pthread_cond_broadcast(&p->cv);
    sl_mutex_unlock(&p->mu);
}

bool dpp_lanes_wait(dpp_lanes_t *p, dpp_lane_t *l, bool or_free)
{
    sl_worker_t *w = p->w;
    bool done = false;
    sl_mutex_lock(&p->mu);
    for (;;) {
        done = l->state != LANE_READ || atomic_load(&w->stopping);
        bool any = or_free && p->in_turn && p->lanes[p->turn % p->n].state == LANE_FREE;
        for (uint32_t i = 0; or_free && !p->in_turn && i < p->n && !any; i++)
            any = p->lanes[i].state == LANE_FREE;
        if (done || any) break;
        struct timespec dl = sl_clock_deadline_ms(50);
        sl_cond_timedwait(&p->cv, &p->mu, &dl);
    }
    sl_mutex_unlock(&p->mu);
    return done;
}

sl_err_t dpp_lane_wait(dpp_lane_t *l, dpp_lane_stripe_t *out, sl_error_t *err)
{
    dpp_lanes_t *p = l->p;
    sl_worker_t *w = p->w;
    sl_mutex_lock(&p->mu);
    while (l->state == LANE_READ && !atomic_load(&w->stopping)) {
        struct timespec dl = sl_clock_deadline_ms(50);
        sl_cond_timedwait(&p->cv, &p->mu, &dl);
    }
    bool ready = l->state == LANE_READY;
    sl_mutex_unlock(&p->mu);
    if (!ready) return sl_error_set(err, SL_ERR_CLOSED, "worker stopping");
    if (l->rc != SL_OK) {
        *err = l->err;
        out->from_read = l->out.from_read;
        return l->rc;
    }
    *out = l->out;
    return SL_OK;
}

uint64_t dpp_lane_held(const dpp_lane_t *l)
{
    return l->held;
}

sl_err_t dpp_lane_add_direct(dpp_lane_t *l, const sl_pipeline_fused_t *f,
                             const sl_worker_direct_t *d, sl_error_t *err)
{
    dpp_lanes_t *p = l->p;
    const sl_allocator_t *a = p->w->a;
    uint32_t F = d->rows->sparse.num_keys;
    lane_direct_t e = {.d = *d, .fused = f};
    e.start = sl_alloc(a, (F ? F : 1) * sizeof *e.start);
    e.span = sl_alloc(a, (F ? F : 1) * sizeof *e.span);
    e.key_offsets = sl_alloc(a, (F + 1) * sizeof *e.key_offsets);
    e.runs = sl_alloc(a, (d->num_runs ? d->num_runs : 1) * sizeof *e.runs);
    if (!e.start || !e.span || !e.key_offsets || !e.runs) {
        direct_free(a, &e);
        return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    }
    if (F) {
        memcpy(e.start, d->start, F * sizeof *e.start);
        memcpy(e.span, d->span, F * sizeof *e.span);
    }
    memcpy(e.key_offsets, d->key_offsets, (F + 1) * sizeof *e.key_offsets);
    memcpy(e.runs, d->runs, d->num_runs * sizeof *e.runs);
    e.d.key_offsets = e.key_offsets;
    e.d.start = e.start;
    e.d.span = e.span;
    e.d.runs = e.runs;
    if (d->lease) e.lease = *d->lease; /* e.d.lease: pointed at the copy's lease when made */
    /* under mu: the lane copies entries out while this appends */
    sl_mutex_lock(&p->mu);
    if (l->num_direct == l->direct_cap) {
        uint32_t cap = l->direct_cap ? 2 * l->direct_cap : 32;
        lane_direct_t *n = sl_alloc(a, (size_t)cap * sizeof *n);
        if (!n) {
            sl_mutex_unlock(&p->mu);
            direct_free(a, &e);
            return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        }
        if (l->num_direct) memcpy(n, l->direct, (size_t)l->num_direct * sizeof *n);
        if (l->direct) sl_free(a, l->direct, (size_t)l->direct_cap * sizeof *l->direct);
        l->direct = n;
        l->direct_cap = cap;
    }
    l->direct[l->num_direct++] = e;
    pthread_cond_broadcast(&p->cv);
    sl_mutex_unlock(&p->mu);
    return SL_OK;
}

void dpp_lane_begin_fill(dpp_lane_t *l)
{
    dpp_lanes_t *p = l->p;
    sl_mutex_lock(&p->mu);
    l->drop = false;
    l->closed = false;
    l->state = LANE_FILL;
    pthread_cond_broadcast(&p->cv);
    sl_mutex_unlock(&p->mu);
}

void dpp_lane_finish(dpp_lane_t *l, bool drop)
{
    dpp_lanes_t *p = l->p;
    sl_mutex_lock(&p->mu);
    l->state = LANE_FILL; /* not begun (dropped before batching): nothing to make */
    l->drop = drop;
    l->closed = true;
    pthread_cond_broadcast(&p->cv);
    sl_mutex_unlock(&p->mu);
}
