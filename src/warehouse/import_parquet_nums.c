/* Labels and dense values of FLOAT columns converted a row at a time
 * (pq_cols_internal.h, imp_pqc_conv_nums): the columnar conversion's
 * kernel for the row-major matrices of a run. Converted a column at a
 * time (conv_num, import_parquet_cols.c), each column's values go D
 * floats apart: every store of a pass lands on another cache line, and
 * a criteo stripe's 13 dense columns make 13 passes over all of its
 * lines (the store buffer fills with misses; it was the reader thread's
 * largest cost once the dense maps went to the dictionaries). Here every
 * row's values are written side by side, in one pass: each of the
 * matrix's lines is filled by consecutive stores. Only for the columns
 * read in dense batches of FLOATs (the usual case: a scalar column one
 * slot reads), whose values need no rounding; the others stay
 * conv_num's. */
#include <math.h>
#include <string.h>

#include "pq_cols_internal.h"

/* Columns converted in one pass (a matrix with more takes more passes). */
#define NUMS_PASS 32

typedef struct numcol {
    const float *x;       /* the batch's valid values, in order */
    const uint8_t *valid; /* [batch rows] */
    uint32_t j;           /* the next valid value's index in x */
    uint32_t col;         /* its column in the matrix */
    float miss;           /* a null's value */
} numcol_t;

bool imp_pqc_num_rowwise(const sl_wh_colmap_slot_t *sl, const sl_pq_batch_t *v)
{
    return (sl->target == SL_WH_MAP_LABEL || sl->target == SL_WH_MAP_DENSE) && v->dense &&
           v->kind == SL_PQ_KIND_F32;
}

float imp_pqc_dense_miss(const imp_pqc_t *c, uint32_t o)
{
    float miss = NAN;
    if (c->dmap_rd[o]) /* the reader mapped the values: a missing one too */
        c->dmap[o]->dense(c->dmap[o]->ctx, &miss, 1, 1, 0);
    return miss;
}

/* Valid rows before r0 (the index of row r0's value in a dense batch). */
static uint32_t valid_before(const uint8_t *valid, uint32_t r0)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < r0; i++)
        k += valid[i];
    return k;
}

/* Rows [r0, r1) of the nc columns q into dst (its row r0's first float;
 * stride floats a row), a block of rows at a time: each column's pass
 * over a block stays in lines the block's first column brought into the
 * cache. Branch-free: a null row takes the missing value's bits instead
 * of the value at j, which is read all the same (a scalar column's batch
 * has room for a value in every row, sl_pq_reserve_slots, and a null row
 * r has j <= r), as nulls come in no order a branch could predict. */
static void conv_rows(float *dst, uint32_t stride, numcol_t *q, uint32_t nc, uint32_t r0,
                      uint32_t r1)
{
    enum { BLOCK = 128 }; /* 128 rows of 13 dense floats: 6.5 KiB */
    for (uint32_t b0 = r0; b0 < r1; b0 += BLOCK) {
        uint32_t b1 = r1 - b0 < BLOCK ? r1 : b0 + BLOCK;
        float *row0 = dst + (size_t)(b0 - r0) * stride;
        for (uint32_t k = 0; k < nc; k++) {
            const uint8_t *valid = q[k].valid;
            const float *x = q[k].x;
            uint32_t j = q[k].j, miss;
            memcpy(&miss, &q[k].miss, sizeof miss);
            float *d = row0 + q[k].col;
            for (uint32_t r = b0; r < b1; r++, d += stride) {
                uint32_t ok = valid[r], m = 0u - ok, bits;
                memcpy(&bits, x + j, sizeof bits);
                bits = (bits & m) | (miss & ~m);
                memcpy(d, &bits, sizeof bits);
                j += ok;
            }
            q[k].j = j;
        }
    }
}

/* The slots of one matrix (labels: SL_WH_MAP_LABEL, or dense) that group
 * grp converts row-wise, NUMS_PASS columns a pass. */
static void conv_matrix(imp_pqc_t *c, const group_read_t *g, const run_t *u, uint32_t grp,
                        int target)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    bool dense = target == SL_WH_MAP_DENSE;
    uint32_t stride = dense ? c->D : c->T;
    float *mat = dense ? u->dense : u->labels; /* NULL when there are no such columns */
    numcol_t q[NUMS_PASS];
    uint32_t nc = 0;
    for (uint32_t s = 0; s <= m->num_slots; s++) {
        if (s < m->num_slots) {
            const sl_wh_colmap_slot_t *sl = &m->slots[s];
            if (!c->slot_read[s] || (grp != UINT32_MAX && c->slot_grp[s] != grp) ||
                (int)sl->target != target)
                continue;
            const sl_pq_batch_t *v = g->bat[g->leaf_of[sl->column * 2]];
            if (!imp_pqc_num_rowwise(sl, v)) continue;
            uint32_t o = (uint32_t)c->slot_out[s];
            float miss = dense ? imp_pqc_dense_miss(c, o) : 0.0f;
            q[nc++] = (numcol_t){.x = v->f32,
                                 .valid = v->valid,
                                 .j = valid_before(v->valid, u->r0),
                                 .col = o,
                                 .miss = miss};
        }
        if (nc == NUMS_PASS || (s == m->num_slots && nc > 0)) {
            conv_rows(mat + (size_t)u->n0 * stride, stride, q, nc, u->r0, u->r1);
            nc = 0;
        }
    }
    if (!dense) return;
    /* maps the reader did not apply: value by value, NaN (missing)
     * included, as the batch transform */
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        if (!c->slot_read[s] || (grp != UINT32_MAX && c->slot_grp[s] != grp) ||
            sl->target != SL_WH_MAP_DENSE)
            continue;
        uint32_t o = (uint32_t)c->slot_out[s];
        if (c->dmap[o] == NULL || c->dmap_rd[o] ||
            !imp_pqc_num_rowwise(sl, g->bat[g->leaf_of[sl->column * 2]]))
            continue;
        c->dmap[o]->dense(c->dmap[o]->ctx, mat + (size_t)u->n0 * c->D, u->r1 - u->r0, c->D, o);
    }
}

void imp_pqc_conv_nums(imp_pqc_t *c, const group_read_t *g, const run_t *u, uint32_t grp)
{
    if (u->r1 <= u->r0) return;
    conv_matrix(c, g, u, grp, SL_WH_MAP_LABEL);
    conv_matrix(c, g, u, grp, SL_WH_MAP_DENSE);
}
