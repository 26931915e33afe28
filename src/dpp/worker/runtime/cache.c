/* The worker's half of the autocache (docs/DESIGN.md "Autocache";
 * docs/FORMAT.md "Cache files"): writing a split's transformed batches to
 * the cache file a lease names (CACHE_WRITE), and serving a lease's todo
 * from it (CACHE_READ).
 *
 * A cache file is a table data file (warehouse.h): one stripe per batch,
 * the batch's output features (its sparse keys in order, all weighted when
 * the batch carries weights, then its dense columns), its labels (the
 * weight label of a weighing filter included), its sample ids when the job
 * sends them, and in every row the batch's row range of the split: the
 * timestamp column holds to_row, the session id column from_row plus, in
 * its high 32 bits, the offset of the batch's first row (origin.first_row,
 * the first kept row) from from_row; a split of 2^32 rows or more is not
 * cached. Batches
 * come from the transform threads in any order, so the stripes are in any
 * order too; the reader sorts them by from_row.
 *
 * A batch's dedup groups (a job with dedup groups: the transformed,
 * deduplicated batch) are the file's storage-dedup groups, each stored as
 * the batch holds it (sl_wh_writer_append_stripe: its unique rows once and
 * its inverse indices, not deduplicated again) and read back in dedup form,
 * so a served batch is the computed one, groups and all.
 *
 * Nothing here fails a lease or the worker: a cache file that cannot be
 * written is discarded (the split is read from its source next time), one
 * that cannot be read is a fallback (the rows it should have held are
 * computed), counted in the worker's statistics either way. */
#include <errno.h>
#include <fiu-local.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/worker/runtime/worker_internal.h"

/* Picoseconds a byte takes to copy here, for the fused batches' share of
 * the autocache's compute time (dpp_worker_send): the best of 4 copies of
 * 4 MiB, pages faulted in first; 0 when out of memory (nothing taken off). */
static uint64_t copy_ps_per_byte(const sl_allocator_t *a)
{
    const size_t n = 4u << 20;
    uint8_t *buf = sl_alloc(a, 2 * n);
    if (!buf) return 0;
    memset(buf, 1, 2 * n);
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t t0 = sl_clock_ns();
        memcpy(buf + n, buf, n);
        uint64_t t = sl_clock_ns() - t0;
        best = t < best ? t : best;
        buf[(size_t)i] = buf[n + (size_t)i + 1]; /* the copy is read: not elided */
    }
    sl_free(a, buf, 2 * n);
    return best * 1000 / n;
}

void dpp_cache_copy_probe(sl_worker_t *w)
{
    if (w->copy_probed) return;
    w->copy_probed = true;
    if (w->master_mode && !w->o.no_fused && w->job->num_transforms)
        atomic_store(&w->copy_ps_per_byte, copy_ps_per_byte(w->a));
}

struct dpp_cache_writer {
    sl_worker_t *w;
    sl_mutex_t mu;
    char *path;         /* the final name */
    char *part;         /* written here (the writer's own temporary beside it), renamed to path */
    sl_wh_writer_t *wr; /* opened with the first batch */
    sl_wh_schema_t *schema;
    uint32_t refs;
    uint64_t expected, added; /* batches handed to the writer, and written */
    bool failed;
    uint64_t ns; /* time spent writing */
    char why[SL_ERROR_MSG_MAX];
};

dpp_cache_writer_t *dpp_cache_writer_new(sl_worker_t *w, const char *path)
{
    static _Atomic uint64_t serial;
    dpp_cache_writer_t *cw = sl_calloc(w->a, 1, sizeof *cw);
    if (cw == NULL) return NULL;
    char part[4096];
    int n = snprintf(part, sizeof part, "%s.%ld-%" PRIu64 ".part", path, (long)getpid(),
                     (uint64_t)atomic_fetch_add(&serial, 1));
    cw->w = w;
    cw->path = sl_strdup(w->a, path);
    cw->part = n > 0 && (size_t)n < sizeof part ? sl_strdup(w->a, part) : NULL;
    cw->refs = 1;
    if (cw->path == NULL || cw->part == NULL) {
        sl_strfree(w->a, cw->path);
        sl_strfree(w->a, cw->part);
        sl_free(w->a, cw, sizeof *cw);
        return NULL;
    }
    sl_mutex_init(&cw->mu);
    return cw;
}

void dpp_cache_writer_ref(dpp_cache_writer_t *cw)
{
    sl_mutex_lock(&cw->mu);
    cw->refs++;
    cw->expected++; /* a batch's reference: the file is whole only with it */
    sl_mutex_unlock(&cw->mu);
}

static void fail_locked(dpp_cache_writer_t *cw, const char *why) SL_REQUIRES(cw->mu)
{
    if (!cw->failed) snprintf(cw->why, sizeof cw->why, "%s", why);
    cw->failed = true;
}

void dpp_cache_writer_fail(dpp_cache_writer_t *cw, const char *why)
{
    sl_mutex_lock(&cw->mu);
    fail_locked(cw, why);
    sl_mutex_unlock(&cw->mu);
}

/* The cache file's schema from the first batch (file comment): the plain
 * keys, then each group's keys in group order (a reader in dedup form hands
 * groups back in the order their first feature comes), then dense, labels. */
static sl_err_t schema_of(const sl_batch_t *b, const sl_allocator_t *a, sl_wh_schema_t **out,
                          sl_error_t *err)
{
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "cache schema");
    sl_err_t rc = SL_OK;
    sl_wh_kind_t kind = b->sparse.weights != NULL ? SL_WH_WEIGHTED : SL_WH_SPARSE;
    for (uint32_t k = 0; rc == SL_OK && k < b->sparse.num_keys; k++)
        rc = sl_wh_schema_add_feature(s, b->sparse.keys[k], kind, err);
    for (uint32_t g = 0; rc == SL_OK && g < b->num_groups; g++) {
        const sl_kjt_t *u = &b->groups[g].unique;
        kind = u->weights != NULL ? SL_WH_WEIGHTED : SL_WH_SPARSE;
        for (uint32_t k = 0; rc == SL_OK && k < u->num_keys; k++)
            rc = sl_wh_schema_add_feature(s, u->keys[k], kind, err);
    }
    if (rc == SL_OK && b->dense.cols > 0 && b->dense.names == NULL)
        rc = sl_error_set(err, SL_ERR_INVALID, "dense columns without names");
    for (uint32_t c = 0; rc == SL_OK && c < b->dense.cols; c++)
        rc = sl_wh_schema_add_feature(s, b->dense.names[c], SL_WH_DENSE, err);
    if (rc == SL_OK && b->labels.cols > 0 && b->labels.names == NULL)
        rc = sl_error_set(err, SL_ERR_INVALID, "labels without names");
    for (uint32_t c = 0; rc == SL_OK && c < b->labels.cols; c++)
        rc = sl_wh_schema_add_label(s, b->labels.names[c], err);
    if (rc != SL_OK) {
        sl_wh_schema_destroy(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void dpp_cache_writer_add(dpp_cache_writer_t *cw, const sl_batch_t *b, uint64_t from_row,
                          uint64_t to_row)
{
    const sl_allocator_t *a = cw->w->a;
    uint64_t t0 = sl_clock_ns();
    sl_mutex_lock(&cw->mu);
    sl_error_t err = {0};
    sl_err_t rc = SL_OK;
    if (cw->failed) goto out;
    uint64_t first = b->origin.first_row;
    if (to_row >= (1ull << 32) || first < from_row || first >= to_row) {
        fail_locked(cw, "a row range past 2^32 rows, or a first row outside it");
        goto out;
    }
    if (cw->wr == NULL) {
        sl_wh_writer_opts_t o = sl_wh_writer_opts_default();
        o.allocator = a;
        o.overwrite = true;
        /* a stripe is a batch: its builder holds one batch, not 64 Ki rows */
        o.stripe_rows =
            cw->w->job->batch_size > b->batch_size ? cw->w->job->batch_size : b->batch_size;
        /* the batch's groups are the file's (borrowed for the open call) */
        sl_dedup_group_spec_t gs[SL_WORKER_MAX_GROUPS];
        if (b->num_groups > SL_WORKER_MAX_GROUPS) {
            fail_locked(cw, "more dedup groups than a worker counts");
            goto out;
        }
        for (uint32_t g = 0; g < b->num_groups; g++)
            gs[g] = (sl_dedup_group_spec_t){.name = b->groups[g].name,
                                            .num_features = b->groups[g].unique.num_keys,
                                            .features = b->groups[g].unique.keys};
        o.num_dedup_groups = b->num_groups;
        o.dedup_groups = gs;
        if ((rc = schema_of(b, a, &cw->schema, &err)) == SL_OK)
            rc = sl_wh_writer_open(cw->part, cw->schema, &o, &cw->wr, &err);
        if (rc != SL_OK) {
            fail_locked(cw, err.msg);
            goto out;
        }
    }
    /* a storage fault injected on the cache file's writes (libfiu point
     * sluice/worker/cache_write, tests/integration/worker_cache_test.c) */
    if (fiu_fail("sluice/worker/cache_write")) {
        char why[512];
        snprintf(why, sizeof why, "write %s: %s (injected fault)", cw->part, strerror(EIO));
        fail_locked(cw, why);
        goto out;
    }
    size_t n = (size_t)b->batch_size * sizeof(int64_t);
    int64_t *from = sl_alloc(a, n), *to = sl_alloc(a, n);
    if (from == NULL || to == NULL) {
        rc = sl_error_set(&err, SL_ERR_NOMEM, "out of memory");
    } else {
        for (uint32_t i = 0; i < b->batch_size; i++) {
            from[i] = (int64_t)(from_row | (first - from_row) << 32);
            to[i] = (int64_t)to_row;
        }
        sl_wh_rows_t rows = {.batch = *b, .session_ids = from, .timestamps = to};
        rc = sl_wh_writer_append_stripe(cw->wr, &rows, &err);
    }
    if (from) sl_free(a, from, n);
    if (to) sl_free(a, to, n);
    if (rc != SL_OK)
        fail_locked(cw, err.msg);
    else
        cw->added++;
out:
    cw->ns += sl_clock_ns() - t0;
    sl_mutex_unlock(&cw->mu);
}

void dpp_cache_writer_unref(dpp_cache_writer_t *cw)
{
    if (cw == NULL) return;
    sl_mutex_lock(&cw->mu);
    bool last = --cw->refs == 0;
    sl_mutex_unlock(&cw->mu);
    if (!last) return;
    sl_worker_t *w = cw->w;
    uint64_t t0 = sl_clock_ns(), bytes = 0;
    bool written = false;
    if (cw->wr != NULL && !cw->failed && cw->added != cw->expected)
        snprintf(cw->why, sizeof cw->why, "%" PRIu64 " of %" PRIu64 " batches reached it",
                 cw->added, cw->expected);
    if (cw->wr != NULL && !cw->failed && cw->added == cw->expected) {
        sl_error_t err = {0};
        sl_wh_write_stats_t ws = {0};
        sl_err_t rc = sl_wh_writer_close(cw->wr, &ws, &err);
        if (rc == SL_OK && rename(cw->part, cw->path) != 0)
            rc = sl_error_set(&err, SL_ERR_IO, "rename to %s failed", cw->path);
        if (rc == SL_OK) {
            written = true;
            bytes = ws.file_bytes;
        } else {
            unlink(cw->part);
            snprintf(cw->why, sizeof cw->why, "%s", err.msg);
        }
    } else {
        sl_wh_writer_abort(cw->wr); /* NULL is fine */
    }
    /* a writer that never opened its file failed too (its directory, its
     * first batch): said, not only counted as a file not written */
    if (!written && (cw->wr != NULL || cw->failed))
        sl_log_kv(SL_LOG_WARN, SL_EV(CACHE_WRITE_FAILED),
                  (SL_KV_STR("file", cw->path), SL_KV_STR("error", cw->why)),
                  "cache file %s not written: %s", cw->path, cw->why);
    sl_mutex_lock(&w->mu);
    w->st.cache_write_ns += cw->ns + (sl_clock_ns() - t0);
    if (written) {
        w->st.cache_files_written++;
        w->st.cache_bytes_written += bytes;
    }
    sl_mutex_unlock(&w->mu);
    sl_wh_schema_destroy(cw->schema);
    sl_mutex_destroy(&cw->mu);
    sl_strfree(w->a, cw->path);
    sl_strfree(w->a, cw->part);
    sl_free(w->a, cw, sizeof *cw);
}

/* ---- reading ---- */

typedef struct cstripe {
    uint32_t stripe;
    uint64_t from, to, first;
} cstripe_t;

static int by_from(const void *x, const void *y)
{
    const cstripe_t *a = x, *b = y;
    return a->from < b->from ? -1 : a->from > b->from;
}

/* The stripes of r whose range lies inside one todo range of wk, sorted by
 * from_row, in *out (caller frees). A stripe whose rows disagree on their
 * range, or ranges that overlap, make the file corrupt. */
static sl_err_t index_stripes(sl_worker_t *w, sl_wh_reader_t *r, const sl_worker_work_t *wk,
                              cstripe_t **out, uint32_t *num, sl_error_t *err)
{
    uint32_t ns = sl_wh_reader_num_stripes(r), n = 0;
    cstripe_t *cs = sl_alloc(w->a, (size_t)(ns ? ns : 1) * sizeof *cs);
    if (cs == NULL) return sl_error_set(err, SL_ERR_NOMEM, "cache index");
    sl_err_t rc = SL_OK;
    for (uint32_t s = 0; rc == SL_OK && s < ns; s++) {
        const sl_wh_rows_t *rows = NULL;
        if ((rc = sl_wh_reader_read_stripe(r, s, &rows, err)) != SL_OK) break;
        uint32_t B = rows->batch.batch_size;
        if (B == 0 || rows->session_ids == NULL || rows->timestamps == NULL) {
            rc = sl_error_set(err, SL_ERR_CORRUPT, "stripe %u: no row range", s);
            break;
        }
        int64_t packed = rows->session_ids[0], t = rows->timestamps[0];
        for (uint32_t i = 1; i < B && rc == SL_OK; i++)
            if (rows->session_ids[i] != packed || rows->timestamps[i] != t)
                rc = sl_error_set(err, SL_ERR_CORRUPT, "stripe %u: rows of two ranges", s);
        uint64_t f = (uint64_t)packed & 0xffffffffu, first = f + ((uint64_t)packed >> 32);
        if (rc == SL_OK && (packed < 0 || t <= 0 || (uint64_t)t <= f || first >= (uint64_t)t ||
                            (uint64_t)t > wk->split->num_rows))
            rc = sl_error_set(err, SL_ERR_CORRUPT,
                              "stripe %u: range [%" PRIu64 ", %" PRId64 ") not in the split", s, f,
                              t);
        if (rc != SL_OK) break;
        for (uint32_t k = 0; k < wk->num_todo; k++)
            if (wk->todo[k].from_row <= f && (uint64_t)t <= wk->todo[k].to_row) {
                cs[n++] = (cstripe_t){s, f, (uint64_t)t, first};
                break;
            }
    }
    if (rc == SL_OK) {
        qsort(cs, n, sizeof *cs, by_from);
        for (uint32_t i = 1; i < n && rc == SL_OK; i++)
            if (cs[i].from < cs[i - 1].to)
                rc = sl_error_set(err, SL_ERR_CORRUPT, "stripes %u and %u overlap",
                                  cs[i - 1].stripe, cs[i].stripe);
    }
    if (rc != SL_OK) {
        sl_free(w->a, cs, (size_t)(ns ? ns : 1) * sizeof *cs);
        return rc;
    }
    *out = cs;
    *num = n;
    return SL_OK;
}

/* Copy k into *out (stride k->stride), buffers from arena. */
static sl_err_t kjt_copy(const sl_kjt_t *k, sl_arena_t *arena, sl_kjt_t *out)
{
    sl_err_t rc =
        sl_kjt_init(out, arena, k->num_keys, k->keys, k->stride, k->num_values, k->weights != NULL);
    if (rc != SL_OK) return rc;
    memcpy(out->lengths, k->lengths, (size_t)k->num_keys * k->stride * sizeof *k->lengths);
    if (k->num_values) {
        memcpy(out->values, k->values, k->num_values * sizeof *k->values);
        if (k->weights) memcpy(out->weights, k->weights, k->num_values * sizeof(float));
    }
    return SL_OK;
}

/* Copy the stripe's IKJTs into b (its arena). */
static sl_err_t groups_of(const sl_batch_t *in, sl_batch_t *b)
{
    if (in->num_groups == 0) return SL_OK;
    b->groups = sl_arena_calloc(b->arena, in->num_groups, sizeof *b->groups);
    if (b->groups == NULL) return SL_ERR_NOMEM;
    for (uint32_t g = 0; g < in->num_groups; g++) {
        const sl_ikjt_t *ik = &in->groups[g];
        sl_ikjt_t *o = &b->groups[g];
        o->batch_size = ik->batch_size;
        o->name = sl_arena_strdup(b->arena, ik->name);
        o->inverse = sl_arena_alloc(b->arena, (size_t)ik->batch_size * sizeof *o->inverse + 1);
        if (o->name == NULL || o->inverse == NULL) return SL_ERR_NOMEM;
        memcpy(o->inverse, ik->inverse, (size_t)ik->batch_size * sizeof *o->inverse);
        SL_FORWARD_IF_ERROR(kjt_copy(&ik->unique, b->arena, &o->unique));
    }
    b->num_groups = in->num_groups;
    return SL_OK;
}

/* A batch of the job's shape from a cache stripe: copies into its own
 * arena. */
static sl_err_t batch_of(sl_worker_t *w, const sl_wh_rows_t *rows, sl_batch_t **out,
                         sl_error_t *err)
{
    const sl_batch_t *in = &rows->batch;
    sl_batch_t *b = sl_batch_new(w->a);
    if (b == NULL) return sl_error_set(err, SL_ERR_NOMEM, "cached batch");
    uint32_t B = in->batch_size;
    b->batch_size = B;
    sl_err_t rc = kjt_copy(&in->sparse, b->arena, &b->sparse);
    if (rc == SL_OK) rc = groups_of(in, b);
    if (rc == SL_OK) {
        if (in->dense.cols > 0)
            rc = sl_dense_init(&b->dense, b->arena, B, in->dense.cols,
                               (const char *const *)in->dense.names);
    }
    if (rc == SL_OK && in->dense.cols > 0)
        memcpy(b->dense.data, in->dense.data, (size_t)B * in->dense.cols * sizeof(float));
    if (rc == SL_OK && in->labels.cols > 0) {
        rc = sl_dense_init(&b->labels, b->arena, B, in->labels.cols,
                           (const char *const *)in->labels.names);
        if (rc == SL_OK)
            memcpy(b->labels.data, in->labels.data, (size_t)B * in->labels.cols * sizeof(float));
    }
    if (rc == SL_OK && in->sample_ids != NULL && w->job->sample_ids) {
        b->sample_ids = sl_arena_alloc(b->arena, (size_t)B * sizeof(int64_t));
        if (b->sample_ids == NULL)
            rc = SL_ERR_NOMEM;
        else
            memcpy(b->sample_ids, in->sample_ids, (size_t)B * sizeof(int64_t));
    }
    if (rc != SL_OK) {
        sl_batch_destroy(b);
        return sl_error_set(err, rc, "cached batch of %u rows", B);
    }
    *out = b;
    return SL_OK;
}

/* Append [from, to) to rest (ascending, merged). */
static bool rest_add(sl_worker_t *w, dpp_cache_rest_t *rest, uint64_t from, uint64_t to)
{
    if (from >= to) return true;
    if (rest->n && rest->r[rest->n - 1].to_row == from) {
        rest->r[rest->n - 1].to_row = to;
        return true;
    }
    if (rest->n == rest->cap && !SL_GROW(w->a, rest->r, rest->cap, rest->n + 1, 8)) return false;
    rest->r[rest->n++] = (sl_dpp_row_range_t){from, to};
    return true;
}

void dpp_cache_rest_free(sl_worker_t *w, dpp_cache_rest_t *rest)
{
    if (rest->r) sl_free(w->a, rest->r, (size_t)rest->cap * sizeof *rest->r);
    *rest = (dpp_cache_rest_t){0};
}

/* The todo of wk less the served ranges served[0..n) (sorted, each inside
 * one todo range). */
static bool rest_of(sl_worker_t *w, const sl_worker_work_t *wk, const cstripe_t *served, uint32_t n,
                    dpp_cache_rest_t *rest)
{
    uint32_t j = 0;
    for (uint32_t k = 0; k < wk->num_todo; k++) {
        uint64_t at = wk->todo[k].from_row, end = wk->todo[k].to_row;
        for (; j < n && served[j].from < end; j++) {
            if (!rest_add(w, rest, at, served[j].from)) return false;
            at = served[j].to;
        }
        if (!rest_add(w, rest, at, end)) return false;
    }
    return true;
}

sl_err_t dpp_cache_serve(sl_worker_t *w, const sl_worker_work_t *wk, dpp_cache_emit_fn emit,
                         void *ctx, dpp_cache_rest_t *rest, sl_error_t *err)
{
    *rest = (dpp_cache_rest_t){0};
    sl_wh_read_opts_t ro = {.skip_columns = w->job->sample_ids ? 0 : SL_WH_COL_SAMPLE_ID,
                            .dedup_form = true,
                            .allocator = w->a};
    static const char *const none[1] = {NULL};
    sl_wh_read_opts_t io = {.features = none,
                            .num_features = 0,
                            .skip_columns = SL_WH_COL_SAMPLE_ID | SL_WH_COL_LABELS,
                            .allocator = w->a};
    sl_wh_reader_t *ix = NULL, *r = NULL;
    cstripe_t *cs = NULL;
    uint32_t ncs = 0, served = 0, ns = 0;
    sl_error_t cerr = {0};
    sl_err_t rc = sl_wh_reader_open(wk->cache_file, NULL, &io, &ix, &cerr);
    if (rc == SL_OK) ns = sl_wh_reader_num_stripes(ix);
    if (rc == SL_OK) rc = index_stripes(w, ix, wk, &cs, &ncs, &cerr);
    sl_wh_reader_close(ix);
    if (rc == SL_OK) rc = sl_wh_reader_open(wk->cache_file, NULL, &ro, &r, &cerr);
    sl_err_t out = SL_OK;
    for (uint32_t i = 0; rc == SL_OK && i < ncs; i++) {
        if (atomic_load(&w->stopping)) {
            out = SL_ERR_CLOSED;
            break;
        }
        if (wk->lease && w->source.lease_live && !w->source.lease_live(w->source.ctx, wk->lease))
            break; /* revoked: done follows, nothing more is sent */
        const sl_wh_rows_t *rows = NULL;
        if ((rc = sl_wh_reader_read_stripe(r, cs[i].stripe, &rows, &cerr)) != SL_OK) break;
        /* the decoded stripe is in the budget while its batch is made (the
         * batch itself is accounted when it is handed on) */
        uint64_t sb = dpp_batch_bytes(&rows->batch);
        if ((out = dpp_worker_budget_take(w, sb, 0, "a cache file's stripe", err)) != SL_OK) break;
        sl_batch_t *b = NULL;
        rc = batch_of(w, rows, &b, &cerr);
        sl_worker_budget_release(w->budget, sb);
        if (rc != SL_OK) {
            if (rc == SL_ERR_NOMEM) out = SL_ERR_NOMEM;
            break;
        }
        b->origin = (sl_batch_origin_t){.job_id = w->job_hash,
                                        .epoch = wk->epoch,
                                        .split_id = wk->split_id,
                                        .first_row = cs[i].first,
                                        .sequence = i};
        sl_worker_lease_origin_t lo = {.handle = wk->lease,
                                       .split = (uint32_t)wk->split_id,
                                       .generation = wk->generation,
                                       .from_row = cs[i].from,
                                       .to_row = cs[i].to,
                                       .rank_plus_one = wk->rank_plus_one};
        if ((out = emit(ctx, b, wk->lease ? &lo : NULL, err)) != SL_OK) break;
        served = i + 1;
    }
    sl_wh_reader_close(r);
    bool fallback = rc != SL_OK;
    /* a damaged file goes, so that the next lease of the split writes it anew */
    if (fallback && rc != SL_ERR_NOT_FOUND) unlink(wk->cache_file);
    if (fallback)
        sl_log_kv(SL_LOG_WARN, SL_EV(CACHE_FALLBACK),
                  (SL_KV_STR("file", wk->cache_file), SL_KV_U64("split", wk->split_id),
                   SL_KV_STR("error", cerr.msg)),
                  "cache file %s of split %" PRIu64 " cannot be read (%s): computing its rows",
                  wk->cache_file, wk->split_id, cerr.msg);
    if (out == SL_OK && !rest_of(w, wk, cs, served, rest))
        out = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    if (cs) sl_free(w->a, cs, (size_t)(ns ? ns : 1) * sizeof *cs);
    sl_mutex_lock(&w->mu);
    w->st.cache_fallbacks += fallback;
    sl_mutex_unlock(&w->mu);
    return out;
}

void dpp_cache_group_stats(const sl_worker_t *w, const sl_batch_t *batch, sl_dedup_stats_t *ds)
{
    for (uint32_t g = 0; g < w->num_groups; g++) {
        ds[g] = (sl_dedup_stats_t){.factor = 1.0};
        for (uint32_t i = 0; i < batch->num_groups; i++) {
            const sl_ikjt_t *ik = &batch->groups[i];
            if (ik->name == NULL || strcmp(ik->name, w->groups[g].name) != 0) continue;
            uint32_t U = ik->unique.stride;
            ds[g] = (sl_dedup_stats_t){.batch_size = ik->batch_size,
                                       .unique_rows = U,
                                       .factor = U ? (double)ik->batch_size / U : 1.0,
                                       .bytes_after = sl_ikjt_bytes(ik)};
        }
    }
}
