/* Parquet rows in column form (pq_internal.h, docs/PARQUET.md "Columnar
 * conversion"): the batches of a row group's projected leaves converted a
 * run of rows and one mapping slot at a time into the vectors of a stripe
 * (dense values and labels as runs, id lists as offset slices of their
 * batch), for the worker's Parquet source and `sluice table import
 * --format parquet`. The values are exactly those of the row path
 * (import_parquet.c, imp_pq_read_slots), which stays as the reference:
 * the same rounding (through a double), the same missing values, the same
 * message for a row the mapping cannot take, from the first slot (in
 * mapping order) that refuses it. */
#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/err.h"
#include "common/mem.h"
#include "pq_cols_internal.h"
#include "pq_store.h"

/* ---- the builder ---- */

sl_err_t imp_pqc_new(const imp_pq_t *p, const uint8_t *slot_read, const char *const *features,
                     uint32_t nf, imp_pqc_t **out, sl_error_t *err)
{
    *out = NULL;
    const sl_allocator_t *a = p->a;
    const sl_wh_colmap_resolved_t *m = p->map;
    const sl_wh_schema_t *sch = m->schema;
    imp_pqc_t *c = sl_calloc(a, 1, sizeof *c);
    if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for a Parquet reader");
    c->a = a;
    c->p = p;
    c->schema = sch;
    c->num_slots = m->num_slots;
    c->T = sl_wh_schema_num_labels(sch);
    uint32_t SD = sl_wh_schema_num_dense(sch), SS = sl_wh_schema_num_sparse(sch);
    c->out_chunk = 64 * 1024;
    c->out = sl_arena_new(a, c->out_chunk);
    c->scratch = sl_pq_scratch_new(a);
    c->slot_read = sl_calloc(a, c->num_slots + 1, 1);
    c->slot_out = sl_calloc(a, c->num_slots + 1, sizeof *c->slot_out);
    c->label_names = sl_calloc(a, c->T + 1, sizeof *c->label_names);
    c->dense_names = sl_calloc(a, SD + 1, sizeof *c->dense_names);
    c->key_names = sl_calloc(a, SS + 1, sizeof *c->key_names);
    c->keys = sl_calloc(a, SS + 1, sizeof *c->keys);
    c->dmap = sl_calloc(a, SD + 1, sizeof *c->dmap);
    c->kmap = sl_calloc(a, SS + 1, sizeof *c->kmap);
    c->dfeat = sl_calloc(a, SD + 1, sizeof *c->dfeat);
    c->kfeat = sl_calloc(a, SS + 1, sizeof *c->kfeat);
    c->kmap_rd = sl_calloc(a, SS + 1, 1);
    c->dmap_rd = sl_calloc(a, SD + 1, 1);
    int32_t *dense_at = sl_calloc(a, SD + 1, sizeof *dense_at);
    int32_t *sparse_at = sl_calloc(a, SS + 1, sizeof *sparse_at);
    c->has_slot = sl_calloc(a, (size_t)c->T + SD + SS + 1, 1);
    sl_err_t rc = SL_OK;
    if (c->out == NULL || c->scratch == NULL || c->slot_read == NULL || c->slot_out == NULL ||
        c->label_names == NULL || c->dense_names == NULL || c->key_names == NULL ||
        c->keys == NULL || dense_at == NULL || sparse_at == NULL || c->has_slot == NULL ||
        c->dmap == NULL || c->kmap == NULL || c->dfeat == NULL || c->kfeat == NULL ||
        c->kmap_rd == NULL || c->dmap_rd == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for a Parquet reader");
        goto done;
    }
    for (uint32_t i = 0; i < c->T; i++)
        c->label_names[i] = sl_wh_schema_label(sch, i);
    for (uint32_t i = 0; i < SD; i++)
        dense_at[i] = -1;
    for (uint32_t i = 0; i < SS; i++)
        sparse_at[i] = -1;
    /* the projection, in output order (sl_kafka_rows_new's rules) */
    uint32_t n = features ? nf : sl_wh_schema_num_features(sch);
    for (uint32_t i = 0; i < n; i++) {
        const sl_wh_feature_t *f =
            features ? sl_wh_schema_find(sch, features[i]) : sl_wh_schema_feature(sch, i);
        if (f == NULL) {
            rc = sl_error_set(err, SL_ERR_NOT_FOUND, "Parquet source: feature '%s' is not mapped",
                              features[i] ? features[i] : "(null)");
            goto done;
        }
        int32_t *at = f->kind == SL_WH_DENSE ? &dense_at[f->slot] : &sparse_at[f->slot];
        if (*at >= 0) {
            rc = sl_error_set(err, SL_ERR_INVALID, "Parquet source: feature '%s' requested twice",
                              f->name);
            goto done;
        }
        if (f->kind == SL_WH_DENSE) {
            *at = (int32_t)c->D;
            c->dfeat[c->D] = i;
            c->dense_names[c->D++] = f->name;
        } else {
            *at = (int32_t)c->S;
            c->keys[c->S].weighted = f->kind == SL_WH_WEIGHTED;
            c->any_weighted |= f->kind == SL_WH_WEIGHTED;
            c->kfeat[c->S] = i;
            c->key_names[c->S++] = f->name;
        }
    }
    for (uint32_t s = 0; s < c->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        int32_t o = -1;
        if (sl->target == SL_WH_MAP_LABEL)
            o = (int32_t)sl->index;
        else if (sl->target == SL_WH_MAP_DENSE && sl->index < SD)
            o = dense_at[sl->index];
        else if ((sl->target == SL_WH_MAP_SPARSE || sl->target == SL_WH_MAP_WEIGHTED) &&
                 sl->index < SS)
            o = sparse_at[sl->index];
        bool id = sl->target <= SL_WH_MAP_TIMESTAMP;
        c->slot_out[s] = o;
        c->slot_read[s] = (slot_read == NULL || slot_read[s]) && (id || o >= 0);
        if (!c->slot_read[s] || id) continue;
        uint32_t at = sl->target == SL_WH_MAP_LABEL   ? (uint32_t)o
                      : sl->target == SL_WH_MAP_DENSE ? c->T + (uint32_t)o
                                                      : c->T + c->D + (uint32_t)o;
        c->has_slot[at] = 1;
    }
    c->covered = true;
    for (uint32_t i = 0; i < c->T + c->D + c->S; i++)
        c->covered &= c->has_slot[i] != 0;
done:
    sl_free(a, dense_at, (SD + 1) * sizeof *dense_at);
    sl_free(a, sparse_at, (SS + 1) * sizeof *sparse_at);
    if (rc != SL_OK) {
        /* destroy reads the counts: the arrays were sized by the schema */
        c->S = SS;
        c->D = SD;
        imp_pqc_destroy(c);
        return rc;
    }
    *out = c;
    return SL_OK;
}

void imp_pqc_destroy(imp_pqc_t *c)
{
    if (c == NULL) return;
    const sl_allocator_t *a = c->a;
    uint32_t SD = sl_wh_schema_num_dense(c->schema), SS = sl_wh_schema_num_sparse(c->schema);
    for (uint32_t k = 0; c->keys != NULL && k < SS; k++) {
        sl_free(a, c->keys[k].len, c->keys[k].len_cap * sizeof(int32_t));
        sl_free(a, c->keys[k].ids, c->keys[k].ids_cap * sizeof(int64_t));
        sl_free(a, c->keys[k].w, c->keys[k].w_cap * sizeof(float));
    }
    sl_free(a, c->sid, c->sid_cap * 8);
    sl_free(a, c->ses, c->ses_cap * 8);
    sl_free(a, c->ts, c->ts_cap * 8);
    sl_free(a, c->labels, c->labels_cap * c->T * sizeof(float));
    sl_free(a, c->dense, c->dense_cap * c->D * sizeof(float));
    sl_free(a, c->order, 2 * (size_t)c->order_cap * sizeof *c->order);
    sl_free(a, c->slot_read, c->num_slots + 1);
    sl_free(a, c->slot_out, (c->num_slots + 1) * sizeof *c->slot_out);
    sl_free(a, c->label_names, (c->T + 1) * sizeof *c->label_names);
    sl_free(a, c->dense_names, (SD + 1) * sizeof *c->dense_names);
    sl_free(a, c->key_names, (SS + 1) * sizeof *c->key_names);
    sl_free(a, c->keys, (SS + 1) * sizeof *c->keys);
    sl_free(a, c->dmap, (SD + 1) * sizeof *c->dmap);
    sl_free(a, c->kmap, (SS + 1) * sizeof *c->kmap);
    sl_free(a, c->dfeat, (SD + 1) * sizeof *c->dfeat);
    sl_free(a, c->kfeat, (SS + 1) * sizeof *c->kfeat);
    sl_free(a, c->kmap_rd, SS + 1);
    sl_free(a, c->dmap_rd, SD + 1);
    sl_free(a, c->has_slot, (size_t)c->T + SD + SS + 1);
    sl_arena_destroy(c->out);
    sl_arena_destroy(c->spare);
    imp_pq_free_readers(c->pool, c->pool_cap);
    sl_free(a, c->pool, (size_t)c->pool_cap * sizeof *c->pool);
    imp_pqc_par_destroy(c->par); /* its scratch after the readers that used it */
    sl_free(a, c->unit, (2 * (size_t)c->p->num_cols + 2) * sizeof *c->unit);
    sl_free(a, c->slot_grp, c->num_slots + 1);
    sl_pq_scratch_destroy(c->scratch); /* after the readers that used it */
    sl_free(a, c, sizeof *c);
}

sl_err_t imp_pqc_set_threads(imp_pqc_t *c, uint32_t threads, sl_error_t *err)
{
    for (uint32_t i = 0; i < c->pool_cap; i++) /* none keeps a scratch about to go */
        if (c->pool[i] != NULL) sl_pq_reader_set_scratch(c->pool[i], c->scratch);
    imp_pqc_par_destroy(c->par); /* no reader decodes between reads */
    c->par = NULL;
    uint32_t cap = 2 * c->p->num_cols + 2;
    if (c->unit == NULL) c->unit = sl_calloc(c->a, cap, sizeof *c->unit);
    if (c->slot_grp == NULL) c->slot_grp = sl_calloc(c->a, c->num_slots + 1, 1);
    if (c->unit == NULL || c->slot_grp == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for Parquet decode threads");
    return imp_pqc_par_new(c->a, threads, cap, &c->par, err);
}

void imp_pqc_set_maps(imp_pqc_t *c, const sl_wh_value_map_t *maps)
{
    for (uint32_t d = 0; d < c->D; d++)
        c->dmap[d] = maps != NULL && maps[c->dfeat[d]].dense != NULL ? &maps[c->dfeat[d]] : NULL;
    for (uint32_t k = 0; k < c->S; k++)
        c->kmap[k] = maps != NULL && maps[c->kfeat[k]].ids != NULL ? &maps[c->kfeat[k]] : NULL;
}

uint32_t imp_pqc_count(const imp_pqc_t *c)
{
    return c->n;
}

/* *p, room for *cap elements of size bytes, grown to hold need (doubling):
 * on failure nothing changes. */
static bool vec_reserve(const sl_allocator_t *a, void **p, uint64_t *cap, size_t size,
                        uint64_t need)
{
    if (need <= *cap) return true;
    if (size == 0) { /* no labels, no dense columns: nothing to hold */
        *cap = need;
        return true;
    }
    uint64_t c = *cap ? 2 * *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = sl_realloc(a, *p, (size_t)*cap * size, sl_mul_size((size_t)c, size));
    if (n == NULL) return false;
    *p = n;
    *cap = c;
    return true;
}

bool imp_pqc_reserve_rows(imp_pqc_t *c, uint32_t more)
{
    uint64_t need = (uint64_t)c->n + more;
    if (need <= c->cap) return true;
    if (need > UINT32_MAX) return false;
    const sl_allocator_t *a = c->a;
    bool ok = vec_reserve(a, (void **)&c->sid, &c->sid_cap, 8, need) &&
              vec_reserve(a, (void **)&c->ses, &c->ses_cap, 8, need) &&
              vec_reserve(a, (void **)&c->ts, &c->ts_cap, 8, need) &&
              vec_reserve(a, (void **)&c->labels, &c->labels_cap, sizeof(float) * c->T, need) &&
              vec_reserve(a, (void **)&c->dense, &c->dense_cap, sizeof(float) * c->D, need);
    for (uint32_t k = 0; ok && k < c->S; k++)
        ok = vec_reserve(a, (void **)&c->keys[k].len, &c->keys[k].len_cap, 4, need);
    if (!ok) return false;
    c->cap = (uint32_t)need; /* every array holds at least this many */
    return true;
}

bool imp_pqc_reserve_ids(imp_pqc_t *c, outkey_t *k, uint64_t more)
{
    uint64_t need = k->nids + more + 1; /* never NULL, even for a run without ids */
    return vec_reserve(c->a, (void **)&k->ids, &k->ids_cap, 8, need) &&
           (!k->weighted || vec_reserve(c->a, (void **)&k->w, &k->w_cap, 4, need));
}

/* ---- converting a run of rows ---- */

/* Row r refused by a slot: kept when it is the first row refused, or the
 * same row refused by an earlier slot (slots run in mapping order, so the
 * message is the one the row path gives). */
static void refuse(run_t *u, uint32_t r, const sl_error_t *e)
{
    if (r < u->bad) {
        u->bad = r;
        *u->why = *e;
    }
}

/* The valid slots among valid[0, n) (16 bytes at a time with SSE2): in a
 * dense batch, where the value of slot n is. At most a batch's rows. */
static uint32_t count_valid(const uint8_t *valid, uint32_t n)
{
    uint32_t i = 0, k = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    __m128i acc = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) /* bytes of 0 or 1: sums of 8 fit */
        acc = _mm_add_epi64(
            acc, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(valid + i)), _mm_setzero_si128()));
    k = (uint32_t)_mm_cvtsi128_si32(acc) + (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(acc, 8));
#endif
    for (; i < n; i++)
        k += valid[i];
    return k;
}

/* len[i] = valid[i] for i < n: a scalar column's lengths (16 at a time
 * with SSE2: the plain loop, inlined into conv_ids, is not vectorised). */
static void lengths_of_valid(int32_t *len, const uint8_t *valid, uint32_t n)
{
    uint32_t i = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    const __m128i z = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(valid + i));
        __m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
        _mm_storeu_si128((__m128i *)(len + i), _mm_unpacklo_epi16(lo, z));
        _mm_storeu_si128((__m128i *)(len + i + 4), _mm_unpackhi_epi16(lo, z));
        _mm_storeu_si128((__m128i *)(len + i + 8), _mm_unpacklo_epi16(hi, z));
        _mm_storeu_si128((__m128i *)(len + i + 12), _mm_unpackhi_epi16(hi, z));
    }
#endif
    for (; i < n; i++)
        len[i] = valid[i];
}

/* Where the values of rows r0.. of v are: slot r0, or in a dense batch
 * the number of valid slots before it. */
static uint32_t first_value(const sl_pq_batch_t *v, uint32_t r0)
{
    return v->dense ? count_valid(v->valid, r0) : r0;
}

static void conv_id(imp_pqc_t *c, const sl_wh_colmap_slot_t *sl, const sl_pq_batch_t *v,
                    const run_t *u)
{
    (void)c;
    int64_t *dst = (sl->target == SL_WH_MAP_SAMPLE_ID    ? u->sid
                    : sl->target == SL_WH_MAP_SESSION_ID ? u->ses
                                                         : u->ts) +
                   u->n0;
    const uint8_t *valid = v->valid;
    if (v->dense) { /* the j-th valid row's value is src[j] */
        const int64_t *src = v->i64 + first_value(v, u->r0);
        int64_t base = u->id_base + (int64_t)u->line0 - (int64_t)u->r0;
        bool numbered = sl->target == SL_WH_MAP_SAMPLE_ID;
        uint32_t j = 0;
        for (uint32_t r = u->r0; r < u->r1; r++) {
            dst[r - u->r0] = valid[r] ? src[j] : numbered ? base + (int64_t)r : 0;
            j += valid[r];
        }
        return;
    }
    const int64_t *src = v->i64;
    if (sl->target == SL_WH_MAP_SAMPLE_ID) {
        int64_t base = u->id_base + (int64_t)u->line0 - (int64_t)u->r0;
        for (uint32_t r = u->r0; r < u->r1; r++)
            dst[r - u->r0] = valid[r] ? src[r] : base + (int64_t)r;
    } else {
        for (uint32_t r = u->r0; r < u->r1; r++)
            dst[r - u->r0] = valid[r] ? src[r] : 0;
    }
}

/* A label or a dense value: stride floats apart, rounded through a double
 * as the row path does; a null is missing (0 for a label, NaN dense). */
static void conv_num(float *dst, uint32_t stride, const sl_pq_batch_t *v, const run_t *u,
                     float missing)
{
    const uint8_t *valid = v->valid;
    uint32_t r0 = u->r0, r1 = u->r1;
    if (v->dense) {
        /* the j-th valid row's value is the j-th from the run's first (the
         * arrays in locals: a float store could alias the batch's fields) */
        uint32_t j = first_value(v, r0);
        switch (v->kind) {
        case SL_PQ_KIND_I64: {
            const int64_t *x = v->i64;
            for (uint32_t r = r0; r < r1; r++, dst += stride) {
                *dst = valid[r] ? (float)(double)x[j] : missing;
                j += valid[r];
            }
            break;
        }
        case SL_PQ_KIND_F32: {
            const float *x = v->f32;
            for (uint32_t r = r0; r < r1; r++, dst += stride) {
                *dst = valid[r] ? x[j] : missing;
                j += valid[r];
            }
            break;
        }
        default: {
            const double *x = v->f64;
            for (uint32_t r = r0; r < r1; r++, dst += stride) {
                *dst = valid[r] ? (float)x[j] : missing;
                j += valid[r];
            }
            break;
        }
        }
        return;
    }
    switch (v->kind) {
    case SL_PQ_KIND_I64:
        for (uint32_t r = r0; r < r1; r++, dst += stride)
            *dst = valid[r] ? (float)(double)v->i64[r] : missing;
        break;
    case SL_PQ_KIND_F32:
        for (uint32_t r = r0; r < r1; r++, dst += stride)
            *dst = valid[r] ? v->f32[r] : missing;
        break;
    default:
        for (uint32_t r = r0; r < r1; r++, dst += stride)
            *dst = valid[r] ? (float)imp_pq_num_at(v, r) : missing;
        break;
    }
}

/* The elements [*from, *to) of row r of a list or scalar column v; false:
 * none (a null list or value). */
static inline bool elems(const sl_pq_batch_t *v, bool is_list, uint32_t r, uint32_t *from,
                         uint32_t *to)
{
    if (is_list) {
        if (!v->list_valid[r]) return false;
        *from = v->list_off[r];
        *to = v->list_off[r + 1];
    } else {
        if (!v->valid[r]) return false;
        *from = r;
        *to = r + 1;
    }
    return true;
}

/* Copy n ids from src to dst and check them in one pass: @return whether
 * one is negative (its copy is then overwritten by the row loop of
 * conv_ids, which names it). Two at a time with SSE2: the plain loop is
 * not vectorised at -O2. */
static bool copy_ids(int64_t *dst, const int64_t *src, uint32_t n)
{
    uint32_t i = 0;
    int64_t neg = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    __m128i acc = _mm_setzero_si128();
    for (; i + 2 <= n; i += 2) {
        __m128i x = _mm_loadu_si128((const __m128i *)(src + i));
        _mm_storeu_si128((__m128i *)(dst + i), x);
        acc = _mm_or_si128(acc, x);
    }
    neg = _mm_movemask_pd(_mm_castsi128_pd(acc)) != 0 ? -1 : 0;
#endif
    for (; i < n; i++) {
        int64_t x = src[i];
        dst[i] = x;
        neg |= x;
    }
    return neg < 0;
}

/* len[r] = off[r + 1] - off[r] for r < n: a row's elements from a list's
 * offsets (4 at a time with SSE2). */
static void lengths(int32_t *len, const uint32_t *off, uint32_t n)
{
    uint32_t r = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    for (; r + 4 <= n; r += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)(off + r));
        __m128i b = _mm_loadu_si128((const __m128i *)(off + r + 1));
        _mm_storeu_si128((__m128i *)(len + r), _mm_sub_epi32(b, a));
    }
#endif
    for (; r < n; r++)
        len[r] = (int32_t)(off[r + 1] - off[r]);
}

/* A sparse slot of a dense batch (a scalar column): the run's valid
 * values are its ids, in order, a length of 1 for a valid row and 0 for a
 * null one; no spreading over the slots and no compacting back. Room for
 * the run's rows is reserved at ids and len. */
static void ids_dense(const sl_wh_colmap_slot_t *sl, const char *col, const sl_pq_batch_t *v,
                      outkey_t *k, const sl_wh_value_map_t *map, run_t *u, int32_t *len,
                      int64_t *ids)
{
    const uint8_t *valid = v->valid + u->r0;
    uint32_t rows = u->r1 - u->r0, j0 = first_value(v, u->r0);
    if (u->bad == UINT32_MAX && v->kind == SL_PQ_KIND_I64) {
        uint32_t n = count_valid(valid, rows);
        if (!copy_ids(ids, v->i64 + j0, n)) {
            lengths_of_valid(len, valid, rows);
            k->pending = n;
            if (map != NULL) map->ids(map->ctx, ids, n);
            return;
        }
    }
    /* row by row: the first id refused is named, as imp_pq_id_at names it
     * for the row path; rows past a refused one are dropped */
    uint32_t stop = (u->bad < u->r1 ? u->bad + 1 : u->r1) - u->r0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < stop; i++) {
        if (!valid[i]) {
            len[i] = 0;
            continue;
        }
        sl_error_t e = {0};
        if (imp_pq_id_at(sl, col, v, j0 + (uint32_t)n, &ids[n], &e) != SL_OK) {
            refuse(u, u->r0 + i, &e);
            break;
        }
        len[i] = 1;
        n++;
    }
    k->pending = n;
    if (map != NULL) map->ids(map->ctx, ids, n); /* checked ids: none negative */
}

/* A sparse or weighted slot: per row its length and its ids (a null
 * element adds none), weights from the struct's or the parallel list. */
static sl_err_t conv_ids(imp_pqc_t *c, const group_read_t *g, const sl_wh_colmap_slot_t *sl,
                         outkey_t *k, const sl_wh_value_map_t *map, run_t *u, sl_error_t *err)
{
    const imp_pq_t *p = c->p;
    const pq_col_t *pc = &p->cols[sl->column];
    int32_t li = g->leaf_of[sl->column * 2];
    const sl_pq_batch_t *v = g->bat[li];
    bool is_list = g->col[li]->is_list;
    const sl_pq_batch_t *w = NULL;
    bool w_list = false;
    const char *wcol = NULL;
    if (sl->target == SL_WH_MAP_WEIGHTED) {
        int32_t wi = pc->type == SL_WH_COLTYPE_LIST_WEIGHTED ? g->leaf_of[sl->column * 2 + 1]
                                                             : g->leaf_of[sl->weights_column * 2];
        w = g->bat[wi];
        w_list = g->col[wi]->is_list;
        wcol =
            pc->type == SL_WH_COLTYPE_LIST_WEIGHTED ? pc->name : p->cols[sl->weights_column].name;
    }
    /* the ids of the whole run at most: the slots of its rows */
    uint32_t lo_s, hi_s;
    if (is_list) {
        lo_s = v->list_off[u->r0];
        hi_s = v->list_off[u->r1];
    } else {
        lo_s = u->r0;
        hi_s = u->r1;
    }
    /* in place, the key's room is the ids of the whole run (imp_pqc_direct) */
    if (hi_s < lo_s || (c->direct ? k->nids + (hi_s - lo_s) > k->at_room
                                  : !imp_pqc_reserve_ids(c, k, hi_s - lo_s)))
        return sl_error_set(err, SL_ERR_NOMEM, "column '%s': no memory for %u ids", pc->name,
                            hi_s - lo_s);
    int32_t *len = (c->direct ? k->at_len : k->len) + u->n0;
    int64_t *ids = (c->direct ? k->at_ids : k->ids) + k->nids;
    float *wts = k->weighted ? k->w + k->nids : NULL;
    if (v->dense && w == NULL) {
        ids_dense(sl, pc->name, v, k, map, u, len, ids);
        return SL_OK;
    }
    uint64_t n = 0;
    bool ints = v->kind == SL_PQ_KIND_I64;
    if (ints && w == NULL && !is_list && u->bad == UINT32_MAX) {
        /* a scalar column spread over its slots (a null one holds 0): the
         * valid values compacted, a length of 1 for each, 0 for a null */
        int64_t neg = 0;
        for (uint32_t r = u->r0; r < u->r1; r++) {
            int64_t x = v->i64[r];
            uint8_t ok = v->valid[r];
            ids[n] = x;
            neg |= x;
            n += ok;
            len[r - u->r0] = ok;
        }
        if (neg >= 0) {
            k->pending = n;
            if (map != NULL) map->ids(map->ctx, ids, n);
            return SL_OK;
        }
        n = 0; /* a negative id: the row by row loop below finds and names it */
    }
    if (ints && w == NULL && is_list && u->bad == UINT32_MAX &&
        memchr(v->valid + lo_s, 0, hi_s - lo_s) == NULL) {
        /* The common case, a list<int> without null elements: the run's
         * ids are one slice of the batch and its lengths the differences
         * of the offsets (a null or empty list holds no slot). */
        if (!copy_ids(ids, v->i64 + lo_s, hi_s - lo_s)) {
            lengths(len, v->list_off + u->r0, u->r1 - u->r0);
            k->pending = hi_s - lo_s;
            if (map != NULL) map->ids(map->ctx, ids, hi_s - lo_s);
            return SL_OK;
        }
        /* a negative id: the row by row loop below finds and names it */
    }
    uint32_t stop = u->bad < u->r1 ? u->bad + 1 : u->r1; /* rows past a refused one are dropped */
    for (uint32_t r = u->r0; r < stop; r++) {
        uint32_t from, to;
        if (!elems(v, is_list, r, &from, &to)) {
            len[r - u->r0] = 0;
            continue;
        }
        uint32_t wfrom = 0;
        if (w != NULL) {
            uint32_t wn = 0;
            if (w_list && w->list_valid[r]) {
                wfrom = w->list_off[r];
                wn = w->list_off[r + 1] - wfrom;
            }
            if (wn != to - from) {
                sl_error_t e = {0};
                imp_bad(&e, "column '%s': %u ids but %u weights in '%s'", pc->name, to - from, wn,
                        wcol);
                refuse(u, r, &e);
                break;
            }
        }
        uint64_t start = n;
        if (ints && w == NULL) {
            /* the common case: a list<int64> copied as a run, nulls left out */
            int64_t neg = 0;
            for (uint32_t s = from; s < to; s++) {
                int64_t x = v->i64[s];
                ids[n] = x;
                neg |= x;
                n += v->valid[s];
            }
            if (neg < 0) { /* some value was negative: was it a valid one? */
                n = start;
                bool refused = false;
                for (uint32_t s = from; s < to && !refused; s++)
                    if (v->valid[s] && v->i64[s] < 0) {
                        sl_error_t e = {0};
                        imp_pq_id_at(sl, pc->name, v, s, &ids[n], &e);
                        refuse(u, r, &e);
                        refused = true;
                    } else
                        n += v->valid[s];
                if (refused) break;
                n = start;
                for (uint32_t s = from; s < to; s++) {
                    ids[n] = v->i64[s];
                    n += v->valid[s];
                }
            }
        } else {
            bool refused = false;
            for (uint32_t s = from; s < to; s++) {
                if (!v->valid[s]) continue;
                sl_error_t e = {0};
                if (imp_pq_id_at(sl, pc->name, v, s, &ids[n], &e) != SL_OK) {
                    refuse(u, r, &e);
                    refused = true;
                    break;
                }
                if (w != NULL) {
                    uint32_t ws = wfrom + (s - from);
                    float x = w->valid[ws] ? (float)imp_pq_num_at(w, ws) : NAN;
                    if (wts != NULL) wts[n] = x;
                }
                n++;
            }
            if (refused) break;
        }
        len[r - u->r0] = (int32_t)(n - start);
    }
    k->pending = n;                              /* counted in when the run is kept (commit) */
    if (map != NULL) map->ids(map->ctx, ids, n); /* checked ids: none negative */
    return SL_OK;
}

void imp_pqc_run_begin(imp_pqc_t *c, run_t *u)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    uint32_t rows = u->r1 - u->r0;
    if (c->direct) {
        u->sid = c->st.sample_ids;
        u->ses = c->st_ses;
        u->ts = c->st_ts;
        u->labels = c->st.labels.data;
        u->dense = c->st.dense.data;
    } else {
        u->sid = c->sid;
        u->ses = c->ses;
        u->ts = c->ts;
        u->labels = c->labels;
        u->dense = c->dense;
    }
    if (m->id_column[SL_WH_MAP_SAMPLE_ID - 1] == SL_WH_COLMAP_NONE)
        for (uint32_t i = 0; i < rows; i++)
            u->sid[u->n0 + i] = u->id_base + (int64_t)(u->line0 + i);
    if (m->id_column[SL_WH_MAP_SESSION_ID - 1] == SL_WH_COLMAP_NONE)
        memset(u->ses + u->n0, 0, (size_t)rows * 8);
    if (m->id_column[SL_WH_MAP_TIMESTAMP - 1] == SL_WH_COLMAP_NONE)
        memset(u->ts + u->n0, 0, (size_t)rows * 8);
    if (!c->covered) { /* outputs no slot fills: missing */
        for (uint32_t i = 0; i < rows; i++) {
            for (uint32_t t = 0; t < c->T; t++)
                if (!c->has_slot[t]) u->labels[(size_t)(u->n0 + i) * c->T + t] = 0.0f;
            for (uint32_t d = 0; d < c->D; d++)
                if (!c->has_slot[c->T + d]) u->dense[(size_t)(u->n0 + i) * c->D + d] = NAN;
        }
        for (uint32_t k = 0; k < c->S; k++)
            if (!c->has_slot[c->T + c->D + k])
                memset((c->direct ? c->keys[k].at_len : c->keys[k].len) + u->n0, 0,
                       (size_t)rows * 4);
    }
}

sl_err_t imp_pqc_convert_slots(imp_pqc_t *c, const group_read_t *g, run_t *u, uint32_t grp,
                               sl_error_t *err)
{
    const imp_pq_t *p = c->p;
    const sl_wh_colmap_resolved_t *m = p->map;
    uint32_t rows = u->r1 - u->r0;
    imp_pqc_conv_nums(c, g, u, grp); /* FLOAT labels and dense values, a row at a time */
    for (uint32_t s = 0; s < m->num_slots; s++) {
        if (!c->slot_read[s] || (grp != UINT32_MAX && c->slot_grp[s] != grp)) continue;
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        const sl_pq_batch_t *v = g->bat[g->leaf_of[sl->column * 2]];
        int32_t o = c->slot_out[s];
        if (imp_pqc_num_rowwise(sl, v)) continue;
        switch (sl->target) {
        case SL_WH_MAP_SAMPLE_ID:
        case SL_WH_MAP_SESSION_ID:
        case SL_WH_MAP_TIMESTAMP:
            conv_id(c, sl, v, u);
            break;
        case SL_WH_MAP_LABEL:
            conv_num(u->labels + (size_t)u->n0 * c->T + (uint32_t)o, c->T, v, u, 0.0f);
            break;
        case SL_WH_MAP_DENSE:
            conv_num(u->dense + (size_t)u->n0 * c->D + (uint32_t)o, c->D, v, u,
                     imp_pqc_dense_miss(c, (uint32_t)o));
            /* a map the column reader did not apply: value by value, NaN
             * (missing) included, as the batch transform */
            if (c->dmap[o] != NULL && !c->dmap_rd[o])
                c->dmap[o]->dense(c->dmap[o]->ctx, u->dense + (size_t)u->n0 * c->D, rows, c->D,
                                  (uint32_t)o);
            break;
        case SL_WH_MAP_SPARSE:
        case SL_WH_MAP_WEIGHTED: {
            /* a map the column reader did not apply: value by value here */
            const sl_wh_value_map_t *km = c->kmap_rd[o] ? NULL : c->kmap[o];
            SL_FORWARD_IF_ERROR(conv_ids(c, g, sl, &c->keys[o], km, u, err));
            break;
        }
        }
    }
    return SL_OK;
}

/* Convert rows [u->r0, u->r1) of g's batches into c at row u->n0 (room
 * reserved), every slot on this thread. Rows up to u->bad (if one is
 * refused) hold partial values: the caller rolls the builder back.
 * @return SL_ERR_NOMEM only. */
static sl_err_t convert(imp_pqc_t *c, const group_read_t *g, run_t *u, sl_error_t *err)
{
    imp_pqc_run_begin(c, u);
    return imp_pqc_convert_slots(c, g, u, UINT32_MAX, err);
}

void imp_pqc_commit(imp_pqc_t *c, uint32_t kept)
{
    for (uint32_t k = 0; k < c->S; k++) {
        outkey_t *kk = &c->keys[k];
        if (kept) {
            kk->nids += kk->pending;
            uint64_t q8 = (kk->pending * 256 + kept - 1) / kept;
            kk->est_q8 = q8 ? q8 : 1;
        }
        kk->pending = 0;
    }
    c->n += kept;
}

sl_err_t imp_pqc_convert_run(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1,
                             uint64_t line0, imp_pqc_read_t *rd, sl_error_t *err)
{
    while (r0 < r1) {
        if (!c->direct && !imp_pqc_reserve_rows(c, r1 - r0))
            return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for %u rows", rd->input, r1 - r0);
        sl_error_t why = {0};
        run_t u = {.r0 = r0,
                   .r1 = r1,
                   .n0 = c->n,
                   .line0 = line0,
                   .id_base = rd->id_base,
                   .bad = UINT32_MAX,
                   .why = &why};
        sl_err_t rc = convert(c, g, &u, err);
        uint32_t bad = u.bad;
        if (c->direct && (rc != SL_OK || bad != UINT32_MAX)) {
            /* a refused row (or no memory) in place: nothing is kept yet,
             * so the run goes again through the vectors */
            for (uint32_t k = 0; k < c->S; k++)
                c->keys[k].pending = 0;
            if (!imp_pqc_spill(c))
                return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for %u rows", rd->input,
                                    r1 - r0);
            continue;
        }
        if (rc == SL_OK && bad != UINT32_MAX && bad > r0) { /* the rows before it again */
            u.r1 = bad;
            u.bad = UINT32_MAX;
            rc = convert(c, g, &u, err);
        }
        if (rc != SL_OK) {
            for (uint32_t k = 0; k < c->S; k++)
                c->keys[k].pending = 0;
            return rc;
        }
        imp_pqc_commit(c, (bad == UINT32_MAX ? r1 : bad) - r0);
        if (bad == UINT32_MAX) return SL_OK;
        rc = rd->on_bad(rd->ctx, line0 + (bad - r0), &why, err);
        if (rc != SL_OK) return rc;
        line0 += bad + 1 - r0;
        r0 = bad + 1;
    }
    return SL_OK;
}
