/* The batcher's dedup-form side (batcher.h): rows whose dedup groups come
 * as IKJTs (storage dedup read in the reader's dedup form) keep each
 * stripe's unique rows, copied once per batch the first time a kept row
 * refers to one, with the inverse indices remapped; and the dedup of a
 * finished batch, which keeps stored groups that are the job's. */
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "dpp/worker/batcher/batcher_internal.h"

bool dpp_vec_reserve(const sl_allocator_t *a, vec_t *v, size_t more)
{
    if (v->len + more <= v->cap) return true;
    if (more > SIZE_MAX - v->len) return false;
    /* aligned (SL_ALIGN): the capacity from sl_grow_cap, the copy here */
    size_t cap = sl_grow_cap(v->cap, v->len + more, 4096, SIZE_MAX);
    uint8_t *p = sl_alloc_aligned(a, cap, SL_ALIGN);
    if (!p) return false;
    if (v->len) memcpy(p, v->p, v->len);
    sl_free(a, v->p, v->cap);
    v->p = p;
    v->cap = cap;
    return true;
}

static bool vec_append(const sl_allocator_t *a, vec_t *v, const void *p, size_t n)
{
    if (n == 0) return true;
    if (!dpp_vec_reserve(a, v, n)) return false;
    memcpy(v->p + v->len, p, n);
    v->len += n;
    return true;
}

/* Forget which stripe unique rows the current batch holds (a new stripe, or
 * a new batch). Cost: the entries set, not the map's size. */
void dpp_batcher_reset_maps(sl_worker_batcher_t *b)
{
    for (uint32_t g = 0; g < b->G; g++) {
        gshape_t *q = &b->gs[g];
        for (uint32_t t = 0; t < q->ntouched; t++)
            q->map[q->touched[t]] = -1;
        q->ntouched = 0;
    }
}

/* Per stripe: size the maps for its unique rows and find where each unique
 * row's ids start, per key. */
sl_err_t dpp_batcher_prepare_groups(sl_worker_batcher_t *b, const sl_batch_t *rows, sl_error_t *err)
{
    dpp_batcher_reset_maps(b);
    for (uint32_t g = 0; g < b->G; g++) {
        gshape_t *q = &b->gs[g];
        const sl_kjt_t *u = &rows->groups[g].unique;
        uint32_t U = u->stride;
        if (U > q->map_cap) {
            if (q->map) sl_free(b->a, q->map, (size_t)q->map_cap * sizeof *q->map);
            if (q->touched) sl_free(b->a, q->touched, (size_t)q->map_cap * sizeof *q->touched);
            q->map = sl_alloc(b->a, (size_t)U * sizeof *q->map);
            q->touched = sl_alloc(b->a, (size_t)U * sizeof *q->touched);
            q->map_cap = q->map && q->touched ? U : 0;
            if (!q->map_cap) return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
            memset(q->map, 0xff, (size_t)U * sizeof *q->map);
        }
        size_t need = sl_mul_size(q->F, (size_t)U + 1);
        if (need > q->uoff_cap) {
            if (q->uoff) sl_free(b->a, q->uoff, q->uoff_cap * sizeof *q->uoff);
            q->uoff = sl_alloc(b->a, sl_mul_size(need, sizeof *q->uoff));
            q->uoff_cap = q->uoff ? need : 0;
            if (!q->uoff) return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
        }
        uint64_t at = 0;
        for (uint32_t k = 0; k < q->F; k++) {
            uint64_t *o = q->uoff + (size_t)k * (U + 1);
            o[0] = at;
            for (uint32_t r = 0; r < U; r++)
                o[r + 1] = o[r] + (uint64_t)u->lengths[(size_t)k * U + r];
            at = o[U];
        }
        if (at != u->num_values)
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: group '%s' lengths sum to %llu, "
                                "not its %llu values",
                                q->name, (unsigned long long)at, (unsigned long long)u->num_values);
    }
    return SL_OK;
}

/* Gather the group part of the rows of runs: each unique row of the stripe
 * is copied once per batch, the first time a row refers to it. */
sl_err_t dpp_batcher_gather_groups(sl_worker_batcher_t *b, builder_t *bd, const sl_batch_t *src,
                                   const run_t *runs, uint32_t nr, sl_error_t *err)
{
    for (uint32_t g = 0; g < b->G; g++) {
        const sl_ikjt_t *ik = &src->groups[g];
        const sl_kjt_t *u = &ik->unique;
        gshape_t *q = &b->gs[g];
        gbuild_t *gb = &bd->groups[g];
        const uint32_t U = u->stride;
        uint32_t i = 0;
        for (uint32_t r = 0; r < nr; r++)
            for (uint32_t s = runs[r].row; s < runs[r].row + runs[r].count; s++, i++) {
                int32_t iv = ik->inverse[s];
                if (iv < 0 || (uint32_t)iv >= U)
                    return sl_error_set(err, SL_ERR_INVALID,
                                        "batcher: group '%s' row %u: inverse index %d of %u",
                                        q->name, s, iv, U);
                int32_t m = q->map[iv];
                if (m < 0) {
                    m = (int32_t)gb->U++;
                    q->map[iv] = m;
                    q->touched[q->ntouched++] = (uint32_t)iv;
                    for (uint32_t k = 0; k < q->F; k++) {
                        int32_t len = u->lengths[(size_t)k * U + (uint32_t)iv];
                        uint64_t off = q->uoff[(size_t)k * (U + 1) + (uint32_t)iv];
                        if (!vec_append(b->a, &gb->lens[k], &len, sizeof len) ||
                            !vec_append(b->a, &gb->vals[k], u->values + off,
                                        (size_t)len * sizeof(int64_t)) ||
                            (q->weighted && !vec_append(b->a, &gb->wts[k], u->weights + off,
                                                        (size_t)len * sizeof(float))))
                            return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
                    }
                }
                gb->inverse[bd->n + i] = m;
            }
    }
    return SL_OK;
}

bool dpp_batcher_finish_groups(sl_worker_batcher_t *b, builder_t *bd, sl_batch_t *batch)
{
    sl_arena_t *ar = batch->arena;
    uint32_t n = bd->n;
    sl_ikjt_t *gs = sl_arena_calloc(ar, b->G, sizeof *gs);
    if (!gs) return false;
    for (uint32_t g = 0; g < b->G; g++) {
        gshape_t *q = &b->gs[g];
        gbuild_t *gb = &bd->groups[g];
        uint32_t U = gb->U;
        uint64_t nv = 0;
        for (uint32_t k = 0; k < q->F; k++)
            nv += gb->vals[k].len / sizeof(int64_t);
        sl_kjt_t *u = &gs[g].unique;
        u->num_keys = q->F;
        u->stride = U;
        u->num_values = nv;
        u->keys = sl_arena_alloc(ar, (q->F ? q->F : 1) * sizeof(char *));
        u->lengths = sl_arena_alloc(ar, sl_mul_size(sl_mul_size(q->F, U), sizeof(int32_t)));
        u->values = sl_arena_alloc(ar, sl_mul_size(nv, sizeof(int64_t)));
        u->weights = q->weighted ? sl_arena_alloc(ar, sl_mul_size(nv, sizeof(float))) : NULL;
        gs[g].name = sl_arena_strdup(ar, q->name);
        if (!u->keys || !u->lengths || !u->values || (q->weighted && !u->weights) || !gs[g].name)
            return false;
        uint64_t vat = 0;
        for (uint32_t k = 0; k < q->F; k++) {
            if (!(u->keys[k] = sl_arena_strdup(ar, q->keys[k]))) return false;
            if (U) memcpy(u->lengths + (size_t)k * U, gb->lens[k].p, (size_t)U * sizeof(int32_t));
            uint64_t c = gb->vals[k].len / sizeof(int64_t);
            if (c) memcpy(u->values + vat, gb->vals[k].p, c * sizeof(int64_t));
            if (c && q->weighted) memcpy(u->weights + vat, gb->wts[k].p, c * sizeof(float));
            vat += c;
            gb->lens[k].len = gb->vals[k].len = gb->wts[k].len = 0;
        }
        gs[g].batch_size = n;
        gs[g].inverse = gb->inverse;
        gb->U = 0;
    }
    batch->num_groups = b->G;
    batch->groups = gs;
    dpp_batcher_reset_maps(b);
    return true;
}

/* @return the batch group holding exactly the features of spec, or -1. */
static int matching_group(const sl_batch_t *batch, const sl_dedup_group_spec_t *spec)
{
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        const sl_kjt_t *u = &batch->groups[g].unique;
        if (u->num_keys != spec->num_features) continue;
        uint32_t found = 0;
        for (uint32_t f = 0; f < spec->num_features; f++)
            found += sl_kjt_find_key(u, spec->features[f]) >= 0;
        if (found == spec->num_features) return (int)g;
    }
    return -1;
}

sl_err_t sl_worker_batcher_dedup(sl_dedup_t *d, sl_batch_t *batch,
                                 const sl_dedup_group_spec_t *groups, uint32_t num_groups,
                                 sl_dedup_stats_t *stats, sl_error_t *err)
{
    if (batch->num_groups) {
        /* Rows read in dedup form: when the stored groups are the job's,
         * they are already deduplicated (within each stripe): keep them,
         * named and ordered as the job says. Otherwise expand and start over. */
        bool same = batch->num_groups == num_groups;
        for (uint32_t g = 0; same && g < num_groups; g++)
            same = matching_group(batch, &groups[g]) >= 0;
        if (same) {
            sl_ikjt_t *ordered = sl_arena_alloc(batch->arena, num_groups * sizeof *ordered);
            if (!ordered) return sl_error_set(err, SL_ERR_NOMEM, "dedup: out of memory");
            for (uint32_t g = 0; g < num_groups; g++) {
                ordered[g] = batch->groups[matching_group(batch, &groups[g])];
                ordered[g].name = sl_arena_strdup(batch->arena, groups[g].name);
                if (!ordered[g].name)
                    return sl_error_set(err, SL_ERR_NOMEM, "dedup: out of memory");
                if (stats) {
                    const sl_ikjt_t *ik = &ordered[g];
                    stats[g] = (sl_dedup_stats_t){
                        .batch_size = ik->batch_size,
                        .unique_rows = ik->unique.stride,
                        .factor =
                            ik->unique.stride ? (double)ik->batch_size / ik->unique.stride : 1.0,
                        .bytes_after = sl_ikjt_bytes(ik)};
                }
            }
            batch->groups = ordered;
            return SL_OK;
        }
        sl_kjt_t all;
        SL_FORWARD_IF_ERROR(sl_batch_expand(batch, batch->arena, &all, err));
        batch->sparse = all;
        batch->num_groups = 0;
        batch->groups = NULL;
    }
    if (num_groups == 0) return SL_OK;
    sl_kjt_t all = batch->sparse;
    return sl_dedup_batch(d, &all, groups, num_groups, batch, stats, err);
}

uint64_t sl_worker_batcher_expanded_bytes(const sl_batch_t *batch, uint64_t encoded_bytes)
{
    uint64_t bytes = encoded_bytes;
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        const sl_ikjt_t *ik = &batch->groups[g];
        const sl_kjt_t *u = &ik->unique;
        uint64_t ikjt = sl_ikjt_bytes(ik);
        /* values per unique row across the group's keys, then summed over B */
        uint64_t values = 0;
        if (u->stride) {
            for (uint32_t b = 0; b < ik->batch_size; b++) {
                uint32_t r = (uint32_t)ik->inverse[b];
                for (uint32_t k = 0; k < u->num_keys; k++)
                    values += (uint64_t)u->lengths[(size_t)k * u->stride + r];
            }
        }
        uint64_t expanded = (uint64_t)u->num_keys * ik->batch_size * sizeof(int32_t) +
                            values * (sizeof(int64_t) + (u->weights ? sizeof(float) : 0));
        bytes = bytes - (ikjt < bytes ? ikjt : bytes) + expanded;
    }
    return bytes;
}
