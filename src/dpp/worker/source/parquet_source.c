/* The Parquet split source (source.h): a job whose source.parquet names a
 * Parquet dataset read in place (warehouse/pq_dataset.h, docs/PARQUET.md
 * "As a job source"). The units come from an inner source (the table
 * source over the dataset's splits, each a row group or a run of them);
 * this source reads each unit's todo rows itself (the read hook): only
 * the projected columns' chunks, page by page, converted a column at a
 * time through the column mapping into stripes in column form of at most
 * batch size rows (sl_wh_pqds_read_stripes), each handed to the stripe
 * loop.
 *
 * Memory: per projected leaf column one page (compressed and
 * decompressed), its dictionary and 4096 rows of decoded values, plus the
 * stripe being built and the one handed out (batch size rows in column
 * form each, the loop accounts it in the budget of --memory-limit). With
 * --threads N >= 2 the columns are decoded, and converted into the
 * stripe, on N threads (the reader thread and N - 1 helpers, each
 * converting the columns it decoded, sl_wh_pqds_reader_set_threads), each
 * helper with its own page scratch and ZSTD context. */
#include <inttypes.h>
#include <stdatomic.h>

#include "dpp/worker/source/parquet_source.h"

typedef struct pq_source {
    sl_worker_source_t inner; /* the units and their hooks */
    sl_wh_pqds_t *ds;         /* owned */
    sl_wh_splits_t *splits;   /* owned (the inner table source's); NULL under a master */
    sl_wh_pqds_reader_t *rd;  /* builds the stripes, in column form */
    uint32_t batch_rows;
    const sl_allocator_t *a;
    atomic_bool cancel;
} pq_source_t;

typedef struct pass {
    pq_source_t *s;
    const sl_worker_work_t *w;
    sl_worker_rows_fn fn;
    void *fn_ctx;
} pass_t;

/* A stripe of split rows [first, end), in column form. */
static sl_err_t on_stripe(void *ctx, const sl_wh_rows_t *rows, uint64_t first, uint64_t end,
                          sl_arena_t **owned, sl_error_t *err)
{
    pass_t *p = ctx;
    if (atomic_load(&p->s->cancel)) return SL_ERR_CLOSED;
    sl_wh_rows_t r = *rows;
    r.file = p->w->split->path;
    r.first_row = p->w->split->first_row + first;
    return p->fn(p->fn_ctx, &r, first, end, owned, err);
}

static sl_err_t pq_read(void *ctx, const sl_worker_work_t *w, sl_worker_rows_fn fn, void *fn_ctx,
                        sl_error_t *err)
{
    pq_source_t *s = ctx;
    const sl_wh_split_t *sp = w->split;
    for (uint32_t i = 0; i < w->num_todo; i++)
        if (w->todo[i].from_row >= w->todo[i].to_row || w->todo[i].to_row > sp->num_rows ||
            (i && w->todo[i].from_row < w->todo[i - 1].to_row))
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "split %" PRIu64 " (%s): todo range %u [%" PRIu64 ", %" PRIu64
                                ") is empty, out of order or past its %" PRIu64 " rows",
                                w->split_id, sp->path, i, w->todo[i].from_row, w->todo[i].to_row,
                                sp->num_rows);
    pass_t p = {.s = s, .w = w, .fn = fn, .fn_ctx = fn_ctx};
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < w->num_todo && rc == SL_OK; i++)
        rc = sl_wh_pqds_read_stripes(s->rd, sp, w->todo[i].from_row, w->todo[i].to_row,
                                     s->batch_rows, on_stripe, &p, err);
    return rc;
}

static sl_err_t pq_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    pq_source_t *s = ctx;
    if (atomic_load(&s->cancel)) return SL_ERR_CLOSED;
    return s->inner.next(s->inner.ctx, out, err);
}

static void pq_done(void *ctx, const sl_worker_work_t *w, const sl_dpp_row_range_t *empty,
                    uint32_t num_empty)
{
    pq_source_t *s = ctx;
    if (s->inner.done) s->inner.done(s->inner.ctx, w, empty, num_empty);
}

static void pq_cancel(void *ctx)
{
    pq_source_t *s = ctx;
    atomic_store(&s->cancel, true);
    if (s->inner.cancel) s->inner.cancel(s->inner.ctx);
}

static void pq_destroy(void *ctx)
{
    pq_source_t *s = ctx;
    if (s == NULL) return;
    if (s->inner.destroy) s->inner.destroy(s->inner.ctx);
    sl_wh_pqds_reader_destroy(s->rd);
    sl_wh_pqds_destroy(s->ds);
    sl_wh_splits_destroy(s->splits);
    sl_free(s->a, s, sizeof *s);
}

/* ---- the inner source's lease hooks ---- */

static void fw_made(void *ctx, void *lease)
{
    pq_source_t *s = ctx;
    s->inner.lease_made(s->inner.ctx, lease);
}
static bool fw_live(void *ctx, void *lease)
{
    pq_source_t *s = ctx;
    return s->inner.lease_live(s->inner.ctx, lease);
}
static void fw_retire(void *ctx, void *lease, bool acked)
{
    pq_source_t *s = ctx;
    s->inner.lease_retire(s->inner.ctx, lease, acked);
}
static void fw_failed(void *ctx, void *lease, sl_err_t code, int32_t stripe, const char *msg)
{
    pq_source_t *s = ctx;
    s->inner.lease_failed(s->inner.ctx, lease, code, stripe, msg);
}
static uint32_t fw_members(void *ctx, void *lease, uint64_t bytes, sl_worker_lease_member_t *out,
                           uint32_t cap)
{
    pq_source_t *s = ctx;
    return s->inner.lease_members(s->inner.ctx, lease, bytes, out, cap);
}
static void fw_dropped(void *ctx, void *lease)
{
    pq_source_t *s = ctx;
    s->inner.lease_dropped(s->inner.ctx, lease);
}
static bool fw_other(void *ctx)
{
    pq_source_t *s = ctx;
    return s->inner.other_work(s->inner.ctx);
}

sl_err_t sl_worker_source_parquet_new(sl_wh_pqds_t *ds, sl_wh_splits_t *splits, uint32_t batch_rows,
                                      uint32_t threads, const char *const *features, uint32_t nf,
                                      const sl_wh_value_map_t *maps, const sl_allocator_t *a,
                                      sl_worker_source_t *src, sl_error_t *err)
{
    pq_source_t *s = sl_calloc(a, 1, sizeof *s);
    sl_err_t rc = SL_OK;
    if (s == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "parquet source: out of memory");
    } else {
        s->inner = *src;
        s->ds = ds;
        s->splits = splits;
        s->a = a;
        s->batch_rows = batch_rows ? batch_rows : 1;
        atomic_init(&s->cancel, false);
        rc = sl_wh_pqds_reader_new(ds, features, nf, &s->rd, err);
        if (rc == SL_OK) sl_wh_pqds_reader_set_maps(s->rd, maps);
        /* the reader thread alone reads a split: its decode and
         * conversion on the worker's cores (the transform threads mostly
         * wait for it) */
        if (rc == SL_OK) rc = sl_wh_pqds_reader_set_threads(s->rd, threads, err);
    }
    if (rc != SL_OK) {
        if (s != NULL) {
            pq_destroy(s);
        } else {
            if (src->destroy) src->destroy(src->ctx);
            sl_wh_pqds_destroy(ds);
            sl_wh_splits_destroy(splits);
        }
        *src = (sl_worker_source_t){0};
        return rc;
    }
    /* the inner source's lease hooks, each forwarded to its context */
    *src = (sl_worker_source_t){.next = pq_next,
                                .done = pq_done,
                                .destroy = pq_destroy,
                                .cancel = pq_cancel,
                                .read = pq_read,
                                .lease_made = s->inner.lease_made ? fw_made : NULL,
                                .lease_live = s->inner.lease_live ? fw_live : NULL,
                                .lease_retire = s->inner.lease_retire ? fw_retire : NULL,
                                .lease_failed = s->inner.lease_failed ? fw_failed : NULL,
                                .lease_members = s->inner.lease_members ? fw_members : NULL,
                                .lease_dropped = s->inner.lease_dropped ? fw_dropped : NULL,
                                .other_work = s->inner.other_work ? fw_other : NULL,
                                .ctx = s};
    return SL_OK;
}
