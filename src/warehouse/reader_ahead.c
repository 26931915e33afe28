/* Read-ahead of a reader whose file is an object of a store (wh_internal.h,
 * wh_ahead_t): while the reader decodes stripe s, a thread of its own
 * fetches the projected ranges of stripe s + 1 (s + n for a reader of
 * every n-th stripe: opts.ahead_stride; from the first stripe of the
 * reader's range when the caller says it reads on, set_ahead_end, else
 * from its second stripe in order), so that a stripe's round
 * trip to the store overlaps the previous stripe's decoding instead of
 * adding to it. One fetch at a time: the helper thread and the reader
 * share one slot under a lock (a queue of one), and the reader takes the
 * buffer by swapping it with its own read buffer. Also what the reader
 * plans with it: the streams a stripe needs, and the next stripe's ranges.
 *
 * Memory: a fetch's bytes are taken from the reader's memory hook (a
 * worker's --memory-limit) when it is queued, without waiting: a fetch
 * that does not fit now is not made (the stripe is fetched when it is
 * read), so read-ahead never makes a worker pass its limit nor wait for
 * room. They are given back when the reader takes the stripe (its decoded
 * rows are then the worker's to count) or drops it. */
#include <pthread.h>

#include "reader_internal.h"

enum { IDLE, QUEUED, RUNNING, DONE };

struct wh_ahead {
    const sl_allocator_t *a;
    const sl_wh_mem_t *mem;
    uint64_t held; /* bytes taken from mem for the fetch queued, running or done */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
    bool quit;
    /* the fetch: the reader's thread writes these while the slot is IDLE,
     * the helper reads them while RUNNING */
    sl_store_object_t *obj;
    uint32_t stripe;
    sl_store_range_t *rng;
    size_t n, cap;
    uint64_t bytes;
    wh_buf_t buf;
    sl_err_t rc;
    sl_error_t err;
    uint64_t made; /* fetches queued so far */
};

/* Give back (settled) what the last fetch took. */
static void give_back(wh_ahead_t *h)
{
    if (h->held > 0 && h->mem != NULL) h->mem->give(h->mem->ctx, h->held);
    h->held = 0;
}

static void *ahead_main(void *arg)
{
    wh_ahead_t *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (h->state != QUEUED && !h->quit)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->quit) break;
        h->state = RUNNING;
        pthread_mutex_unlock(&h->mu);
        sl_error_t e = {0};
        sl_err_t rc = sl_store_object_read_many(h->obj, h->rng, h->n, &e);
        pthread_mutex_lock(&h->mu);
        h->rc = rc;
        h->err = e;
        h->state = DONE;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

wh_ahead_t *wh_ahead_new(const sl_allocator_t *a, const sl_wh_mem_t *mem)
{
    wh_ahead_t *h = sl_calloc(a, 1, sizeof *h);
    if (h == NULL) return NULL;
    h->a = a;
    h->mem = mem;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->th, NULL, ahead_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        sl_free(a, h, sizeof *h);
        return NULL;
    }
    return h;
}

void wh_ahead_destroy(wh_ahead_t *h)
{
    if (h == NULL) return;
    pthread_mutex_lock(&h->mu);
    h->quit = true; /* a fetch running ends first: the helper checks quit after it */
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    give_back(h);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    wh_buf_free(&h->buf, h->a);
    sl_free(h->a, h->rng, h->cap * sizeof *h->rng);
    sl_free(h->a, h, sizeof *h);
}

/* Wait (lock held) until no fetch is queued or running. */
static void settle(wh_ahead_t *h)
{
    while (h->state == QUEUED || h->state == RUNNING)
        pthread_cond_wait(&h->cv, &h->mu);
}

void wh_ahead_drop(wh_ahead_t *h)
{
    if (h == NULL) return;
    pthread_mutex_lock(&h->mu);
    settle(h);
    h->state = IDLE;
    give_back(h);
    pthread_mutex_unlock(&h->mu);
}

void sl_wh_reader_drop_ahead(sl_wh_reader_t *r)
{
    wh_ahead_drop(r->ahead);
}

int wh_ahead_take(wh_ahead_t *h, uint32_t stripe, wh_buf_t *rbuf, uint64_t *bytes, size_t *reads)
{
    if (h == NULL) return 0;
    pthread_mutex_lock(&h->mu);
    settle(h);
    int got = h->state == DONE && h->stripe == stripe && h->rc == SL_OK;
    if (got) {
        wh_buf_t t = *rbuf;
        *rbuf = h->buf;
        h->buf = t;
        *bytes = h->bytes;
        *reads = h->n;
    }
    /* a failed fetch is dropped: the reader's own read reports it */
    h->state = IDLE;
    give_back(h);
    pthread_mutex_unlock(&h->mu);
    return got;
}

bool wh_ahead_start(wh_ahead_t *h, sl_store_object_t *obj, uint32_t stripe,
                    const sl_store_range_t *rng, size_t n, uint64_t bytes)
{
    if (h == NULL || n == 0) return false;
    pthread_mutex_lock(&h->mu);
    settle(h);
    h->state = IDLE;
    give_back(h); /* a fetch never taken: dropped */
    bool ok = true;
    if (h->mem != NULL) {
        if (!h->mem->try_take(h->mem->ctx, bytes)) {
            pthread_mutex_unlock(&h->mu);
            return false;
        }
        h->held = bytes;
    }
    if (n > h->cap) {
        sl_store_range_t *r = sl_alloc(h->a, n * sizeof *r);
        if (r == NULL) {
            ok = false;
        } else {
            sl_free(h->a, h->rng, h->cap * sizeof *h->rng);
            h->rng = r;
            h->cap = n;
        }
    }
    if (ok) ok = wh_buf_reserve(&h->buf, h->a, (size_t)bytes + 8);
    if (ok) {
        /* rng's buf fields are offsets into the buffer (the plan's layout) */
        for (size_t i = 0; i < n; i++) {
            h->rng[i] = rng[i];
            h->rng[i].buf = h->buf.data + (uintptr_t)rng[i].buf;
        }
        h->obj = obj;
        h->stripe = stripe;
        h->n = n;
        h->bytes = bytes;
        h->state = QUEUED;
        h->made++;
        pthread_cond_broadcast(&h->cv);
    } else {
        give_back(h);
    }
    pthread_mutex_unlock(&h->mu);
    return ok;
}

uint64_t wh_ahead_made(wh_ahead_t *h)
{
    if (h == NULL) return 0;
    pthread_mutex_lock(&h->mu);
    uint64_t n = h->made;
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* ---- the reader's side ---- */

static void want(const sl_wh_reader_t *r, uint32_t s, uint32_t slot, uint8_t *need)
{
    int32_t i = r->f->slots[(size_t)s * r->f->num_slots + slot];
    if (i >= 0) need[(uint32_t)i - r->f->stripes[s].first_stream] = 1;
}

void wh_reader_stripe_need(const sl_wh_reader_t *r, uint32_t s, uint8_t *need)
{
    const wh_file_t *f = r->f;
    memset(need, 0, f->stripes[s].num_streams);
    if (!(r->skip & SL_WH_COL_SAMPLE_ID)) want(r, s, 0, need);
    if (!(r->skip & SL_WH_COL_SESSION_ID)) want(r, s, 1, need);
    if (!(r->skip & SL_WH_COL_TIMESTAMP)) want(r, s, 2, need);
    for (uint32_t t = 0; t < r->T; t++)
        want(r, s, wh_slot_label(f, t), need);
    for (uint32_t c = 0; c < r->nd; c++)
        for (uint32_t role = 0; role < 2; role++)
            want(r, s, wh_slot_feature(f, r->dense_feat[c], role), need);
    for (uint32_t k = 0; k < r->nk; k++)
        if (r->key_og[k] < 0)
            for (uint32_t role = 0; role < 3; role++)
                want(r, s, wh_slot_feature(f, r->key_feat[k], role), need);
    for (uint32_t o = 0; o < r->ng; o++) {
        want(r, s, wh_slot_inverse(f, r->og[o].g), need);
        for (uint32_t kk = 0; kk < r->og[o].nk; kk++)
            for (uint32_t role = 0; role < 3; role++)
                want(r, s, wh_slot_feature(f, r->og[o].feat[kk], role), need);
    }
}

void wh_reader_read_ahead(sl_wh_reader_t *r, uint32_t s)
{
    /* in order: s comes a stride after the stripe fetched before it; or
     * s is the reader's first of its range (a lane's: among the range's
     * first stride) and the caller reads s + stride too (ahead_end), so
     * the read-ahead starts at a file's first stripe, not its second */
    bool seq = r->last_stripe != UINT32_MAX && r->last_stripe + r->stride == s;
    bool first = !seq && s >= r->begin && s - r->begin < r->stride && s + r->stride < r->ahead_end;
    r->last_stripe = s;
    const wh_file_t *f = r->f;
    if (!(seq || first) || s + r->stride >= f->num_stripes) return;
    if (r->ahead == NULL && (r->ahead = wh_ahead_new(r->a, r->mem)) == NULL)
        return; /* no read-ahead */
    sl_store_range_t *rng;
    uint32_t t = s + r->stride, ns = f->stripes[t].num_streams;
    /* the ranges, then the need flags, in the scratch of fetch's ranges */
    if (!wh_buf_reserve(&r->ranges, r->a, (size_t)ns * (sizeof *rng + 1))) return;
    rng = (sl_store_range_t *)r->ranges.data;
    uint8_t *need = r->ranges.data + (size_t)ns * sizeof *rng;
    wh_reader_stripe_need(r, t, need);
    const wh_stream_t *st = f->streams + f->stripes[t].first_stream;
    size_t k = 0;
    uint64_t at = 0;
    for (uint32_t j = 0; j < ns;) {
        if (!need[j]) {
            j++;
            continue;
        }
        uint64_t rstart = st[j].offset, rend = rstart + st[j].stored_size;
        for (j++; j < ns; j++) {
            if (!need[j]) continue;
            if (st[j].offset - rend > r->gap) break;
            rend = st[j].offset + st[j].stored_size;
        }
        rng[k++] = (sl_store_range_t){
            .offset = rstart, .len = (size_t)(rend - rstart), .buf = (void *)(uintptr_t)at};
        at += rend - rstart;
    }
    if (!wh_ahead_start(r->ahead, f->src.obj, t, rng, k, at)) r->stats.read_ahead_skipped++;
}
