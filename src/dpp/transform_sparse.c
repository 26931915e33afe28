/* Sparse transforms: kernels over one feature's id lists (a dpp_col_t).
 * The per-id ones (sigrid_hash, modulo, map_vocab, clamp_weights) are tight
 * loops over a contiguous values array, in place; first_x and dedup_ids
 * compact a feature's lists in place; cross and ngram build a new feature
 * in the batch arena. No allocation per value or per row. */
#include "dpp/plan_internal.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Ids of one cross or ngram output are capped so that lengths stay int32
 * and one feature cannot swallow memory: a bound per feature and batch. */
#define CREATED_VALUES_MAX (1ull << 31)

/* h % d without a division (Lemire, Kaser, Kurz, "Faster remainder by
 * direct computation", 2019): with M = ceil(2^128 / d), the remainder is the
 * high 64 bits of (M * h mod 2^128) * d, exact for every 64-bit h and d > 0
 * (d = 1 gives M = 0 and remainder 0). A 64-bit div costs 25-90 cycles;
 * this is three multiplies, which matters at 26 hashes per sample. */
typedef unsigned __int128 u128;

static inline u128 fastmod_m(uint64_t d)
{
    return ~(u128)0 / d + 1;
}

static inline uint64_t fastmod(uint64_t h, u128 m, uint64_t d)
{
    u128 low = m * h;
    u128 bottom = ((low & UINT64_MAX) * d) >> 64;
    u128 top = (low >> 64) * d;
    return (uint64_t)((bottom + top) >> 64);
}

void dpp_sigrid_hash(int64_t *values, uint64_t n, uint64_t salt, uint64_t table_size)
{
    const u128 m = fastmod_m(table_size);
    for (uint64_t i = 0; i < n; i++) {
        int64_t id = values[i];
        values[i] = (int64_t)fastmod(XXH3_64bits_withSeed(&id, sizeof id, salt), m, table_size);
    }
}

void dpp_modulo(int64_t *values, uint64_t n, int64_t divisor)
{
    for (uint64_t i = 0; i < n; i++) {
        int64_t r = values[i] % divisor; /* divisor > 0: no overflow */
        values[i] = r < 0 ? r + divisor : r;
    }
}

void dpp_map_vocab(int64_t *values, uint64_t n, const dpp_vocab_t *v, int64_t def)
{
    for (uint64_t i = 0; i < n; i++) values[i] = dpp_vocab_lookup(v, values[i], def);
}

void dpp_clamp_weights(float *weights, uint64_t n, float min, float max)
{
    for (uint64_t i = 0; i < n; i++) {
        float w = weights[i];
        if (w < min) w = min;
        if (w > max) w = max;
        weights[i] = w;
    }
}

void dpp_first_x(dpp_col_t *col, uint32_t x)
{
    int32_t lim = (int32_t)x;
    uint64_t src = 0, dst = 0;
    bool changed = false;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        int32_t keep = len < lim ? len : lim;
        if (changed && keep > 0) {
            memmove(col->values + dst, col->values + src, (size_t)keep * sizeof(int64_t));
            if (col->weights != NULL)
                memmove(col->weights + dst, col->weights + src, (size_t)keep * sizeof(float));
        }
        if (keep != len) {
            changed = true;
            col->lengths[r] = keep;
        }
        src += (uint64_t)len;
        dst += (uint64_t)keep;
    }
    if (changed) {
        col->num_values = dst;
        col->moved = true;
    }
}

/* A list of up to this many ids is deduplicated by comparing each id with
 * the kept ones (cheaper than a table for short lists). */
#define DEDUP_SHORT 16

sl_err_t dpp_dedup_ids(dpp_col_t *col, sl_arena_t *arena, sl_error_t *err)
{
    int32_t longest = 0;
    for (uint32_t r = 0; r < col->stride; r++)
        if (col->lengths[r] > longest) longest = col->lengths[r];
    /* Open addressing over positions of kept ids, at most half full. */
    uint32_t slots = 1;
    while (slots < 2 * (uint32_t)longest) slots *= 2;
    int32_t *table = NULL;
    if (longest > DEDUP_SHORT) {
        table = sl_arena_alloc(arena, (size_t)slots * sizeof(int32_t));
        if (table == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "dedup_ids '%s': out of memory", col->name);
        memset(table, 0xff, (size_t)slots * sizeof(int32_t));
    }
    uint64_t src = 0, dst = 0;
    bool changed = false;
    int64_t *v = col->values;
    float *w = col->weights;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        uint64_t start = dst;
        if (len <= DEDUP_SHORT) {
            for (int32_t i = 0; i < len; i++) {
                int64_t id = v[src + (uint64_t)i];
                bool seen = false;
                for (uint64_t j = start; j < dst && !seen; j++) seen = v[j] == id;
                if (seen) continue;
                if (w != NULL) w[dst] = w[src + (uint64_t)i];
                v[dst++] = id;
            }
        } else {
            for (int32_t i = 0; i < len; i++) {
                int64_t id = v[src + (uint64_t)i];
                uint32_t s = (uint32_t)XXH3_64bits(&id, sizeof id) & (slots - 1);
                bool seen = false;
                while (table[s] >= 0) {
                    if (v[start + (uint64_t)table[s]] == id) {
                        seen = true;
                        break;
                    }
                    s = (s + 1) & (slots - 1);
                }
                if (seen) continue;
                table[s] = (int32_t)(dst - start);
                if (w != NULL) w[dst] = w[src + (uint64_t)i];
                v[dst++] = id;
            }
            /* Clear only what this row used (a row's cost stays its length). */
            for (uint64_t j = start; j < dst; j++) {
                int64_t id = v[j];
                uint32_t s = (uint32_t)XXH3_64bits(&id, sizeof id) & (slots - 1);
                while (table[s] >= 0) {
                    table[s] = -1;
                    s = (s + 1) & (slots - 1);
                }
            }
        }
        int32_t kept = (int32_t)(dst - start);
        if (kept != len) {
            changed = true;
            col->lengths[r] = kept;
        }
        src += (uint64_t)len;
    }
    if (changed) {
        col->num_values = dst;
        col->moved = true;
    }
    return SL_OK;
}

/* offsets[stride + 1] of col, from arena. */
static uint64_t *col_offsets(const dpp_col_t *col, sl_arena_t *arena)
{
    uint64_t *off = sl_arena_alloc(arena, ((size_t)col->stride + 1) * sizeof(uint64_t));
    if (off == NULL) return NULL;
    off[0] = 0;
    for (uint32_t r = 0; r < col->stride; r++) off[r + 1] = off[r] + (uint64_t)col->lengths[r];
    return off;
}

static sl_err_t created_init(dpp_col_t *out, uint32_t rows, sl_arena_t *arena, const char *what,
                             sl_error_t *err)
{
    out->stride = rows;
    out->weights = NULL;
    out->num_values = 0;
    out->moved = true;
    out->lengths = sl_arena_alloc(arena, (size_t)rows * sizeof(int32_t));
    if (out->lengths == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "%s '%s': out of memory", what, out->name);
    return SL_OK;
}

sl_err_t dpp_cross(const dpp_col_t *a, const int32_t *ia, const dpp_col_t *b, const int32_t *ib,
                   uint32_t rows, uint64_t salt, uint64_t table_size, sl_arena_t *arena,
                   dpp_col_t *out, sl_error_t *err)
{
    sl_err_t rc = created_init(out, rows, arena, "cross", err);
    if (rc != SL_OK) return rc;
    uint64_t *oa = col_offsets(a, arena), *ob = col_offsets(b, arena);
    if (oa == NULL || ob == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "cross '%s': out of memory", out->name);
    uint64_t total = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t ra = ia != NULL ? (uint32_t)ia[r] : r, rb = ib != NULL ? (uint32_t)ib[r] : r;
        uint64_t n = (uint64_t)a->lengths[ra] * (uint64_t)b->lengths[rb];
        if (n > INT32_MAX || (total += n) > CREATED_VALUES_MAX)
            return sl_error_set(err, SL_ERR_TOO_LARGE,
                                "cross '%s': row %u would hold more than %llu ids", out->name, r,
                                (unsigned long long)(n > INT32_MAX ? INT32_MAX
                                                                   : CREATED_VALUES_MAX));
        out->lengths[r] = (int32_t)n;
    }
    out->values = sl_arena_alloc(arena, (size_t)total * sizeof(int64_t));
    if (total > 0 && out->values == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "cross '%s': out of memory", out->name);
    uint64_t k = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t ra = ia != NULL ? (uint32_t)ia[r] : r, rb = ib != NULL ? (uint32_t)ib[r] : r;
        for (uint64_t i = oa[ra]; i < oa[ra + 1]; i++)
            for (uint64_t j = ob[rb]; j < ob[rb + 1]; j++) {
                int64_t pair[2] = {a->values[i], b->values[j]};
                out->values[k++] =
                    (int64_t)(XXH3_64bits_withSeed(pair, sizeof pair, salt) % table_size);
            }
    }
    out->num_values = total;
    return SL_OK;
}

sl_err_t dpp_ngram(const dpp_col_t *col, uint32_t n, uint64_t salt, uint64_t table_size,
                   sl_arena_t *arena, dpp_col_t *out, sl_error_t *err)
{
    sl_err_t rc = created_init(out, col->stride, arena, "ngram", err);
    if (rc != SL_OK) return rc;
    uint64_t total = 0;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        int32_t m = len >= (int32_t)n ? len - (int32_t)n + 1 : 0;
        out->lengths[r] = m;
        total += (uint64_t)m;
    }
    out->values = sl_arena_alloc(arena, (size_t)total * sizeof(int64_t));
    if (total > 0 && out->values == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "ngram '%s': out of memory", out->name);
    uint64_t src = 0, k = 0;
    for (uint32_t r = 0; r < col->stride; r++) {
        for (int32_t i = 0; i < out->lengths[r]; i++)
            out->values[k++] = (int64_t)(XXH3_64bits_withSeed(col->values + src + (uint64_t)i,
                                                              (size_t)n * sizeof(int64_t), salt) %
                                         table_size);
        src += (uint64_t)col->lengths[r];
    }
    out->num_values = total;
    return SL_OK;
}
