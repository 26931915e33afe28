/* The reader thread's loop over the stripe lanes (docs/WORKER.md
 * "Threads"; lanes.c): with --threads > 1 the reader takes the units from
 * the source and hands their stripes out to the lanes in order, as many
 * as there are lanes (and memory for); it batches each stripe, in the
 * same order, once its lane has read it, and the lane makes the
 * stripe's fused batches as they are cut, while the reader goes on. The batches are the
 * ones the reader alone would make (reader.c, read_split). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dpp/worker/runtime/reader_internal.h"

/* A unit in flight. */
typedef struct unit {
    sl_worker_work_t wk;
    sl_dpp_row_range_t *todo; /* wk.todo, copied: a source may reuse its own at its next */
    dpp_unit_pos_t pos;
    uint32_t st, dti; /* the next stripe to hand out; the todo range it reaches */
    uint64_t row;     /* split row of stripe st's row 0 */
    uint64_t batched; /* split row where the stripes batched so far end */
    bool begun, dead; /* dead: its lease stopped being live */
    sl_err_t rc;      /* its failure, reported at its end */
    sl_error_t err;
    int32_t stripe;
    bool from_read; /* rc came from the table reader (dpp_worker_split_error) */
} unit_t;

/* A stripe of a unit on a lane (rows [row, end), rows by the footer), or
 * the unit's end (lane NULL). */
typedef struct slot {
    unit_t *unit;
    dpp_lane_t *lane;
    uint32_t st, rows;
    uint64_t row, end;
} slot_t;

typedef struct lanes_run {
    dpp_reader_t *rd;
    slot_t *q; /* a ring: [head, head + len) */
    uint32_t cap, head, len, on_lanes;
    unit_t *disp; /* the unit whose stripes are being handed out */
    bool exhausted;
    bool has_serial; /* a unit for this thread alone waits for the ring to drain */
    sl_worker_work_t serial;
} lanes_run_t;

static void unit_free(sl_worker_t *w, unit_t *u)
{
    if (u->todo) sl_free(w->a, u->todo, (size_t)u->wk.num_todo * sizeof *u->todo);
    sl_free(w->a, u, sizeof *u);
}

static sl_err_t unit_new(lanes_run_t *lr, const sl_worker_work_t *wk, sl_error_t *err)
{
    dpp_reader_t *rd = lr->rd;
    sl_worker_t *w = rd->w;
    unit_t *u = sl_calloc(w->a, 1, sizeof *u);
    if (u && wk->num_todo && !(u->todo = sl_alloc(w->a, (size_t)wk->num_todo * sizeof *u->todo))) {
        sl_free(w->a, u, sizeof *u);
        u = NULL;
    }
    if (!u) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    u->wk = *wk;
    if (wk->num_todo) {
        memcpy(u->todo, wk->todo, (size_t)wk->num_todo * sizeof *u->todo);
        u->wk.todo = u->todo;
    }
    u->pos = dpp_reader_unit_pos(&u->wk);
    u->st = wk->split->stripe_begin;
    u->stripe = -1;
    u->rc = dpp_reader_check_todo(&u->wk, &u->err);
    rd->from_read = false;
    if (u->rc == SL_OK && wk->num_todo && (u->rc = dpp_reader_open_split(rd, wk->split, &u->err))) {
        u->from_read = rd->from_read;
        dpp_reader_reset(rd);
    }
    lr->disp = u;
    return SL_OK;
}

static void push(lanes_run_t *lr, slot_t s)
{
    lr->q[(lr->head + lr->len++) % lr->cap] = s;
    if (s.lane) lr->on_lanes++;
}

/* Hand the next stripe of lr->disp that holds todo rows to a free lane,
 * or queue the unit's end. A lane reads while another holds a stripe
 * only while the budget has room for two more stripes, so that stripes
 * waiting for their turn leave the batcher and the transform threads
 * memory to finish the one before them. @return false when nothing
 * could be handed out now (*no_lane: for want of a free lane). */
static bool hand_out(lanes_run_t *lr, bool *no_lane)
{
    dpp_reader_t *rd = lr->rd;
    sl_worker_t *w = rd->w;
    unit_t *u = lr->disp;
    const sl_wh_split_t *sp = u->wk.split;
    const sl_dpp_row_range_t *todo = u->wk.todo;
    while (!u->rc && u->st < sp->stripe_end && u->dti < u->wk.num_todo &&
           dpp_reader_work_live(w, &u->wk)) {
        sl_wh_stripe_info_t info;
        sl_err_t rc = sl_wh_reader_stripe_info(rd->r, u->st, &info);
        if (rc) {
            u->stripe = (int32_t)u->st;
            u->from_read = true;
            u->rc = sl_error_set(&u->err, rc, "%s: %s %" PRIu64 ": no stripe %u", sp->path,
                                 u->wk.lease ? "lease of split" : "split", u->wk.split_id, u->st);
            break;
        }
        uint64_t end = u->row + info.rows;
        if (todo[u->dti].from_row >= end) { /* no todo row here: not even read */
            u->row = end;
            u->st++;
            continue;
        }
        /* Another stripe while a lane still holds one (read, or making its
         * batches) only with room for it and one more: else one stripe at
         * a time, as one thread reads them. Before any lane has read one,
         * a stripe's size is the footer's estimate (every column, so more
         * than the lanes will hold), so that the lanes' first reads
         * overlap: else the first read, the slowest (its buffers touched
         * first), ran alone, a tenth of bench_threads' 2-lane epoch. */
        uint32_t busy = dpp_lanes_busy(rd->lanes);
        uint64_t est = dpp_lanes_est(rd->lanes);
        if (est == 0) est = info.decoded_bytes;
        if (lr->on_lanes || busy) {
            uint64_t lim = sl_worker_budget_limit(w->budget);
            if (est == 0 || (lim && sl_worker_budget_used(w->budget) + 2 * est > lim)) {
                if (lr->on_lanes) return false;        /* the ring's head is batched first */
                dpp_lanes_wait_fewer(rd->lanes, busy); /* a lane's batches are made */
                if (atomic_load(&w->stopping)) return false;
                continue;
            }
        }
        dpp_lane_t *l = dpp_lanes_get(rd->lanes, lr->on_lanes == 0);
        if (!l) {
            *no_lane = true;
            return false;
        }
        /* in turn (a table in a store), this lane reads u->st + n next
         * when the worker reads the stripes in between */
        uint32_t n = w->threads > 1 ? w->threads : 1;
        dpp_lane_read(l, sp, u->st, rd->r, dpp_reader_ahead_end(rd, &u->wk, u->st + n + 1));
        push(lr,
             (slot_t){
                 .unit = u, .lane = l, .st = u->st, .rows = info.rows, .row = u->row, .end = end});
        while (u->dti < u->wk.num_todo && todo[u->dti].to_row <= end)
            u->dti++;
        u->row = end;
        u->st++;
        return true;
    }
    push(lr, (slot_t){.unit = u, .row = u->row});
    lr->disp = NULL;
    return true;
}

static void unit_fail(unit_t *u, sl_err_t rc, const sl_error_t *e, uint32_t st, bool from_read)
{
    if (u->rc) return;
    u->rc = rc;
    u->from_read = from_read;
    u->err = *e;
    u->stripe = (int32_t)st;
}

/* Batch the stripe of slot s once its lane has read it; the lane makes
 * its fused batches as they are cut. A failure is the unit's, reported at its end
 * (after every lane let its stripes go: the split is borrowed until
 * done). */
static void lane_turn(lanes_run_t *lr, const slot_t *s)
{
    dpp_reader_t *rd = lr->rd;
    sl_worker_t *w = rd->w;
    unit_t *u = s->unit;
    dpp_lane_stripe_t ls = {0};
    sl_error_t e = {0};
    sl_worker_budget_idle(w->budget, true); /* waiting for the lane */
    sl_err_t rc = dpp_lane_wait(s->lane, &ls, &e);
    sl_worker_budget_idle(w->budget, false);
    if (!u->rc && !u->dead && !dpp_reader_work_live(w, &u->wk)) u->dead = true;
    if (rc == SL_OK && ls.rows->batch.batch_size != s->rows)
        rc = sl_error_set(&e, SL_ERR_CORRUPT, "%s stripe %u: %u rows, the footer says %u",
                          ls.rows->file, ls.rows->stripe, ls.rows->batch.batch_size, s->rows);
    if (rc != SL_OK) unit_fail(u, rc, &e, s->st, ls.from_read);
    if (u->rc || u->dead) {
        dpp_lane_finish(s->lane, true);
        return;
    }
    rd->lane = s->lane;
    rd->stripe_held = dpp_lane_held(s->lane);
    rd->stripe = (int32_t)s->st;
    uint64_t t1 = now_ns(CLOCK_MONOTONIC), h0 = rd->handoff_ns;
    dpp_lane_begin_fill(s->lane); /* the lane makes each batch as it is cut */
    rc = dpp_reader_batch_stripe(rd, &u->pos, ls.rows, ls.selected, ls.weights, ls.kept, s->row,
                                 s->end, &e);
    rd->lane = NULL;
    rd->stripe_held = 0;
    if (rc != SL_OK) unit_fail(u, rc, &e, s->st, false);
    u->batched = s->end;
    dpp_lane_finish(s->lane, rc != SL_OK);
    uint64_t handoff = rd->handoff_ns - h0, t2 = now_ns(CLOCK_MONOTONIC);
    sl_mutex_lock(&w->mu);
    w->st.stripes++;
    w->st.rows_read += s->rows;
    w->st.rows_kept += ls.kept;
    w->st.source_bytes += ls.bytes;
    w->st.read_ns += ls.read_ns;
    w->st.filter_ns += ls.filter_ns + (t2 - t1 - handoff);
    w->st.backpressure_ns += ls.waited_ns + handoff;
    sl_mutex_unlock(&w->mu);
}

/* The unit's end: its failure goes to its source (or fails the worker),
 * else done. */
static sl_err_t end_turn(lanes_run_t *lr, const slot_t *s, sl_error_t *err)
{
    dpp_reader_t *rd = lr->rd;
    unit_t *u = s->unit;
    sl_err_t rc = u->rc;
    if (rc) {
        *err = u->err;
    } else {
        /* revoked mid-way: the range the batcher holds ends where the
         * stripes it was given end, as on one thread */
        rc = dpp_reader_unit_end(rd, &u->pos, u->dead ? u->batched : s->row, err);
        u->stripe = rd->stripe;
    }
    if (rc == SL_OK) {
        dpp_reader_unit_done(rd, &u->wk);
    } else {
        rd->stripe = u->stripe;
        if (dpp_reader_lease_failed(rd, &u->wk, rc, u->from_read, err)) {
            dpp_reader_reset(rd);
            rc = SL_OK;
        }
    }
    unit_free(rd->w, u);
    return rc;
}

static sl_err_t next_turn(lanes_run_t *lr, sl_error_t *err)
{
    dpp_reader_t *rd = lr->rd;
    slot_t s = lr->q[lr->head];
    lr->head = (lr->head + 1) % lr->cap;
    lr->len--;
    if (s.lane) lr->on_lanes--;
    unit_t *u = s.unit;
    if (!u->begun) {
        u->begun = true;
        rd->num_empty = 0;
        sl_err_t rc = dpp_reader_begin_unit(rd, &u->wk, err);
        if (rc) {
            if (s.lane) dpp_lane_finish(s.lane, true);
            if (!s.lane) unit_free(rd->w, u);
            return rc;
        }
    }
    if (s.lane) {
        lane_turn(lr, &s);
        return SL_OK;
    }
    return end_turn(lr, &s, err);
}

/* The reader's loop with lanes. Units a source reads itself, and those
 * of the autocache, are read on this thread alone once the lanes' ring
 * is empty. The source is asked for the next unit before the last one's
 * done when it has no leases, or when it says another lease is there to
 * be had at once (other_work): a lease source's next may wait for the
 * master, and the units in the ring would wait with it. */
sl_err_t dpp_reader_run_lanes(dpp_reader_t *rd, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    lanes_run_t lr = {.rd = rd, .cap = 2 * w->threads + 4};
    lr.q = sl_alloc(w->a, (size_t)lr.cap * sizeof *lr.q);
    if (!lr.q) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    bool ahead = !w->source.lease_live;
    sl_err_t rc = SL_OK;
    while (rc == SL_OK && !atomic_load(&w->stopping)) {
        bool no_lane = false;
        while (lr.len < lr.cap && !atomic_load(&w->stopping)) {
            if (!lr.disp) {
                if (lr.exhausted || lr.has_serial) break;
                if (lr.len && !ahead &&
                    !(w->source.other_work && w->source.other_work(w->source.ctx)))
                    break;
                sl_worker_work_t wk;
                sl_worker_budget_idle(w->budget, true); /* waiting for a split (a lease) */
                rc = w->source.next(w->source.ctx, &wk, err);
                sl_worker_budget_idle(w->budget, false);
                if (rc == SL_ERR_CLOSED) {
                    rc = SL_OK;
                    lr.exhausted = true;
                    break;
                }
                if (rc) goto out;
                /* the deterministic order numbers a split's batches on
                 * this thread, in the order they are cut: never the lanes */
                if (w->source.read || wk.cache_file || wk.order_ranks) {
                    lr.serial = wk;
                    lr.has_serial = true;
                    break;
                }
                if ((rc = unit_new(&lr, &wk, err))) goto out;
            }
            if (!hand_out(&lr, &no_lane)) break;
        }
        if (lr.len) {
            /* a lane that frees up while the next stripe is still being
             * read gets the stripe after first: reads overlap */
            dpp_lane_t *head = lr.q[lr.head].lane;
            if (head && no_lane) {
                sl_worker_budget_idle(w->budget, true);
                bool ready = dpp_lanes_wait(rd->lanes, head, true);
                sl_worker_budget_idle(w->budget, false);
                if (!ready) continue;
            }
            rc = next_turn(&lr, err);
        } else if (lr.has_serial) {
            lr.has_serial = false;
            rc = dpp_reader_serial_unit(rd, &lr.serial, err);
        } else if (lr.exhausted && !lr.disp) {
            break;
        }
    }
out:
    /* what is left (stopping, a failure): the lanes let their stripes go
     * when they are destroyed; the units go here */
    for (uint32_t i = 0; i < lr.len; i++) {
        slot_t *s = &lr.q[(lr.head + i) % lr.cap];
        if (!s->lane) unit_free(w, s->unit);
    }
    if (lr.disp) unit_free(w, lr.disp);
    sl_free(w->a, lr.q, (size_t)lr.cap * sizeof *lr.q);
    return rc;
}
