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
    int32_t *dense_at = sl_calloc(a, SD + 1, sizeof *dense_at);
    int32_t *sparse_at = sl_calloc(a, SS + 1, sizeof *sparse_at);
    c->has_slot = sl_calloc(a, (size_t)c->T + SD + SS + 1, 1);
    sl_err_t rc = SL_OK;
    if (c->out == NULL || c->scratch == NULL || c->slot_read == NULL || c->slot_out == NULL ||
        c->label_names == NULL || c->dense_names == NULL || c->key_names == NULL ||
        c->keys == NULL || dense_at == NULL || sparse_at == NULL || c->has_slot == NULL ||
        c->dmap == NULL || c->kmap == NULL || c->dfeat == NULL || c->kfeat == NULL ||
        c->kmap_rd == NULL) {
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
    sl_free(a, c->has_slot, (size_t)c->T + SD + SS + 1);
    sl_arena_destroy(c->out);
    imp_pq_free_readers(c->pool, c->pool_cap);
    sl_free(a, c->pool, (size_t)c->pool_cap * sizeof *c->pool);
    imp_pqc_par_destroy(c->par);       /* its scratch after the readers that used it */
    sl_pq_scratch_destroy(c->scratch); /* after the readers that used it */
    sl_free(a, c, sizeof *c);
}

sl_err_t imp_pqc_set_threads(imp_pqc_t *c, uint32_t threads, sl_error_t *err)
{
    for (uint32_t i = 0; i < c->pool_cap; i++) /* none keeps a scratch about to go */
        if (c->pool[i] != NULL) sl_pq_reader_set_scratch(c->pool[i], c->scratch);
    imp_pqc_par_destroy(c->par); /* no reader decodes between reads */
    c->par = NULL;
    return imp_pqc_par_new(c->a, threads, 2 * c->p->num_cols + 2, &c->par, err);
}

void imp_pqc_set_maps(imp_pqc_t *c, const sl_wh_value_map_t *maps)
{
    for (uint32_t d = 0; d < c->D; d++)
        c->dmap[d] = maps != NULL && maps[c->dfeat[d]].dense != NULL ? &maps[c->dfeat[d]] : NULL;
    for (uint32_t k = 0; k < c->S; k++)
        c->kmap[k] = maps != NULL && maps[c->kfeat[k]].ids != NULL ? &maps[c->kfeat[k]] : NULL;
}

/* A key's map as the column reader's (sl_pq_i64_map_fn): the raw ids are
 * checked here, once per dictionary entry: a negative one is left as it
 * is, so that conv_ids refuses its rows naming the id as it would without
 * the map (sl_wh_value_map_t.ids_nonneg: a mapped id is never refused). */
static void map_ids_checked(const void *ctx, int64_t *v, uint64_t n)
{
    const sl_wh_value_map_t *m = ctx;
    uint64_t i = 0;
    while (i < n) {
        while (i < n && v[i] < 0)
            i++;
        uint64_t j = i;
        while (j < n && v[j] >= 0)
            j++;
        if (j > i) m->ids(m->ctx, v + i, j - i);
        i = j;
    }
}

/* Hand each mapped key whose ids come straight from an INT64 column that
 * no other slot reads to its column reader (renewed for the row group, so
 * with no map yet); the others are mapped by conv_ids. */
static void set_reader_maps(imp_pqc_t *c, const group_read_t *g)
{
    const imp_pq_t *p = c->p;
    const sl_wh_colmap_resolved_t *m = p->map;
    memset(c->kmap_rd, 0, c->S);
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        if (!c->slot_read[s] ||
            (sl->target != SL_WH_MAP_SPARSE && sl->target != SL_WH_MAP_WEIGHTED))
            continue;
        int32_t o = c->slot_out[s];
        if (o < 0 || c->kmap[o] == NULL || !c->kmap[o]->ids_nonneg || sl->hash ||
            m->column_uses[sl->column] != 1)
            continue;
        int32_t li = g->leaf_of[sl->column * 2];
        if (li < 0 || g->col[li]->kind != SL_PQ_KIND_I64) continue;
        sl_pq_reader_set_map(g->rd[li], map_ids_checked, c->kmap[o]);
        c->kmap_rd[o] = 1;
    }
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

/* Where a run of a batch goes: rows [r0, r1) of the batches become rows
 * n0.. of the builder; row r0 is file row line0 (from 1). */
typedef struct run {
    uint32_t r0, r1, n0;
    uint64_t line0;
    int64_t id_base;
    uint32_t bad; /* the first row (batch index) refused so far, UINT32_MAX: none */
    sl_error_t *why;
    /* where rows from n0 go: the vectors, or the stripe's arrays */
    int64_t *sid, *ses, *ts;
    float *labels, *dense;
} run_t;

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

static void conv_id(imp_pqc_t *c, const sl_wh_colmap_slot_t *sl, const sl_pq_batch_t *v,
                    const run_t *u)
{
    (void)c;
    int64_t *dst = (sl->target == SL_WH_MAP_SAMPLE_ID    ? u->sid
                    : sl->target == SL_WH_MAP_SESSION_ID ? u->ses
                                                         : u->ts) +
                   u->n0;
    const int64_t *src = v->i64;
    const uint8_t *valid = v->valid;
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
    uint64_t n = 0;
    bool ints = v->kind == SL_PQ_KIND_I64;
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

/* Convert rows [u->r0, u->r1) of g's batches into c at row u->n0 (room
 * reserved). Rows up to u->bad (if one is refused) hold partial values:
 * the caller rolls the builder back. @return SL_ERR_NOMEM only. */
static sl_err_t convert(imp_pqc_t *c, const group_read_t *g, run_t *u, sl_error_t *err)
{
    const imp_pq_t *p = c->p;
    const sl_wh_colmap_resolved_t *m = p->map;
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
    for (uint32_t s = 0; s < m->num_slots; s++) {
        if (!c->slot_read[s]) continue;
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        const sl_pq_batch_t *v = g->bat[g->leaf_of[sl->column * 2]];
        int32_t o = c->slot_out[s];
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
            conv_num(u->dense + (size_t)u->n0 * c->D + (uint32_t)o, c->D, v, u, NAN);
            /* value by value, NaN (missing) included, as the batch transform */
            if (c->dmap[o] != NULL)
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

/* Convert rows [r0, r1) of g's batches (row r0 is file row line0 from 1)
 * into c, handing each row the mapping refuses to rd->on_bad: a run with
 * one is converted again without it (rows before it, then after). */
static sl_err_t convert_run(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1,
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
        uint32_t kept = (bad == UINT32_MAX ? r1 : bad) - r0;
        for (uint32_t k = 0; k < c->S; k++) { /* commit */
            c->keys[k].nids += kept ? c->keys[k].pending : 0;
            c->keys[k].pending = 0;
        }
        c->n += kept;
        if (bad == UINT32_MAX) return SL_OK;
        rc = rd->on_bad(rd->ctx, line0 + (bad - r0), &why, err);
        if (rc != SL_OK) return rc;
        line0 += bad + 1 - r0;
        r0 = bad + 1;
    }
    return SL_OK;
}

sl_err_t imp_pqc_read(const imp_pq_t *p, imp_pqc_t *c, imp_pqc_read_t *rd, sl_error_t *err)
{
    const sl_allocator_t *a = p->a;
    const char *input = rd->input;
    sl_pq_source_t src;
    sl_pq_file_t *f = NULL;
    rd->reached = rd->first_row;
    sl_err_t rc = imp_pq_source_open(p, input, rd->if_etag, &src, err);
    if (rc == SL_OK) rc = sl_pq_file_open(&src, input, a, &f, err);
    if (rc != SL_OK) {
        wh_pq_source_close(&src);
        return rc;
    }
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    uint32_t begin = rd->begin, end = rd->end < m->num_row_groups ? rd->end : m->num_row_groups;
    uint32_t cap = 2 * p->num_cols + 2;
    group_read_t g = {.keep = true};
    if (c->pool == NULL && (c->pool = sl_calloc(a, cap, sizeof *c->pool)) != NULL)
        c->pool_cap = cap;
    g.leaf_of = sl_calloc(a, cap, sizeof *g.leaf_of);
    g.rd = c->pool;
    g.bat = sl_calloc(a, cap, sizeof *g.bat);
    g.col = sl_calloc(a, cap, sizeof *g.col);
    if (g.leaf_of == NULL || g.rd == NULL || g.bat == NULL || g.col == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory");
    uint64_t row = rd->first_row; /* the file row (0-based) of the next batch's first row */
    /* row groups that end at or before file row lo are not read */
    while (begin < end && row + (uint64_t)m->row_groups[begin].num_rows <= rd->lo)
        row += (uint64_t)m->row_groups[begin++].num_rows;
    uint32_t flush = rd->flush_rows ? rd->flush_rows : 1;
    bool past = false;
    for (uint32_t gi = begin; rc == SL_OK && !past && gi < end; gi++) {
        rc = imp_pq_open_group(p, c->slot_read, f, gi, &g, err);
        for (uint32_t i = 0; rc == SL_OK && i < g.n; i++) /* a new reader, or a renewed one */
            sl_pq_reader_set_scratch(g.rd[i], c->scratch);
        if (rc == SL_OK && c->par != NULL) imp_pqc_par_assign(c->par, f, gi, &g, c->scratch);
        if (rc == SL_OK) set_reader_maps(c, &g);
        if (rc == SL_OK) rc = imp_pq_prefetch_group(p, &src, f, gi, &g, err);
        while (rc == SL_OK && !past) {
            uint32_t rows = 0;
            rc = c->par != NULL ? imp_pqc_par_next(c->par, &g, input, gi, &rows, err)
                                : imp_pq_group_next(&g, input, gi, &rows, err);
            if (rc != SL_OK || rows == 0) break;
            /* the batch's rows in [lo, hi) */
            uint32_t r = rd->lo > row ? (uint32_t)(rd->lo - row < rows ? rd->lo - row : rows) : 0;
            uint32_t r_end =
                rd->hi < row + rows ? (rd->hi > row ? (uint32_t)(rd->hi - row) : 0) : rows;
            while (rc == SL_OK && r < r_end) {
                uint32_t room = c->n < flush ? flush - c->n : 1;
                uint32_t take = r_end - r < room ? r_end - r : room;
                /* a whole stripe in one run: converted straight into it */
                if (c->n == 0 && take == flush) imp_pqc_direct(c, &g, r, r + take);
                rc = convert_run(c, &g, r, r + take, row + r + 1, rd, err);
                r += take;
                if (rc == SL_OK && c->n >= flush) rc = rd->on_full(rd->ctx, row + r, err);
            }
            row += rows;
            rd->reached = row;
            past = row >= rd->hi;
        }
        imp_pq_close_group(&g);
    }
    sl_free(a, g.leaf_of, cap * sizeof *g.leaf_of);
    sl_free(a, g.bat, cap * sizeof *g.bat);
    sl_free(a, g.col, cap * sizeof *g.col);
    sl_pq_file_destroy(f); /* the pool's readers keep no use of it */
    wh_pq_source_close(&src);
    return rc;
}
