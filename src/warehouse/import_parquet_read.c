/* Reading a Parquet file's row groups into the columnar builder
 * (pq_internal.h, imp_pqc_read; docs/PARQUET.md "Columnar conversion" and
 * "Decoding on several threads"): batch by batch, each batch's rows in
 * runs of at most a stripe, converted by import_parquet_cols.c. Moved
 * from import_parquet_cols.c when the runs began to be converted on the
 * decode threads too.
 *
 * With threads (imp_pqc_set_threads) the first run of each batch is
 * planned before the batch is decoded, from the rows the row group has
 * left: the stripe laid out (in place, a list key's room estimated from
 * the last run), and each thread converts its own slots as soon as it has
 * decoded their columns, in the same job (one join a batch). Anything
 * but a clean conversion (rows not as planned, a refused row, more ids
 * than the estimate) drops the plan: the run is converted again on the
 * reader thread exactly as with one thread, so the rows, and the errors
 * and their messages, are a single thread's. */
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "pq_cols_internal.h"
#include "pq_store.h"

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

/* A dense feature's map (sl_wh_value_map_t.dense) over n values of a
 * FLOAT column (a dictionary's entries, a plain page's values): a column
 * of one row each. */
static void map_dense_f32(const void *ctx, float *v, uint64_t n)
{
    const sl_wh_value_map_t *m = ctx;
    for (uint64_t i = 0; i < n;) {
        uint32_t k = n - i < UINT32_MAX ? (uint32_t)(n - i) : UINT32_MAX;
        m->dense(m->ctx, v + i, k, 1, 0);
        i += k;
    }
}

/* Ask for dense batches (sl_pq_reader_set_dense: no spreading of the
 * values over the null slots, which the kernels below would only compact
 * again) from each scalar column of numbers that one slot reads, that
 * slot not a weighted one: conv_id, conv_num and conv_ids read a dense
 * batch. The reader refuses it for other columns. */
static void set_reader_dense(imp_pqc_t *c, const group_read_t *g)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        if (!c->slot_read[s] || sl->target == SL_WH_MAP_WEIGHTED || m->column_uses[sl->column] != 1)
            continue;
        int32_t li = g->leaf_of[sl->column * 2];
        if (li >= 0) sl_pq_reader_set_dense(g->rd[li], true);
    }
}

/* Hand each mapped key whose ids come straight from an INT64 column that
 * no other slot reads to its column reader (renewed for the row group, so
 * with no map yet); the others are mapped by conv_ids. Likewise each
 * mapped dense feature read from a FLOAT column no other slot reads: its
 * dictionary is mapped once (a count column holds a few hundred distinct
 * values in a row group of a million rows) instead of every row's value
 * after conv_num, whose missing rows then get the map of NaN; the others
 * are mapped after conv_num (imp_pqc_convert_slots). */
static void set_reader_maps(imp_pqc_t *c, const group_read_t *g)
{
    const imp_pq_t *p = c->p;
    const sl_wh_colmap_resolved_t *m = p->map;
    memset(c->kmap_rd, 0, c->S);
    memset(c->dmap_rd, 0, c->D);
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        int32_t o = c->slot_out[s];
        if (c->slot_read[s] && sl->target == SL_WH_MAP_DENSE && o >= 0 && c->dmap[o] != NULL &&
            m->column_uses[sl->column] == 1) {
            int32_t li = g->leaf_of[sl->column * 2];
            if (li < 0 || g->col[li]->kind != SL_PQ_KIND_F32) continue;
            sl_pq_reader_set_map_f32(g->rd[li], map_dense_f32, c->dmap[o]);
            c->dmap_rd[o] = 1;
            continue;
        }
        if (!c->slot_read[s] ||
            (sl->target != SL_WH_MAP_SPARSE && sl->target != SL_WH_MAP_WEIGHTED))
            continue;
        if (o < 0 || c->kmap[o] == NULL || !c->kmap[o]->ids_nonneg || sl->hash ||
            m->column_uses[sl->column] != 1)
            continue;
        int32_t li = g->leaf_of[sl->column * 2];
        if (li < 0 || g->col[li]->kind != SL_PQ_KIND_I64) continue;
        sl_pq_reader_set_map(g->rd[li], map_ids_checked, c->kmap[o]);
        c->kmap_rd[o] = 1;
    }
    set_reader_dense(c, g);
}

/* ---- runs converted on the decode threads ---- */

/* Each reader's unit (c->unit, for imp_pqc_par_assign): the readers one
 * slot reads, and those of slots that write one output array, together;
 * every label and dense slot in one unit, as they are row-major and
 * neighbouring floats of a row would otherwise be written by two threads
 * (false sharing on every cache line of the stripe). */
static void set_units(imp_pqc_t *c, const group_read_t *g)
{
    const imp_pq_t *p = c->p;
    const sl_wh_colmap_resolved_t *m = p->map;
    uint32_t *u = c->unit;
    for (uint32_t i = 0; i < g->n; i++)
        u[i] = i;
    int32_t num_anchor = -1; /* a reader of the labels and dense values */
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        if (!c->slot_read[s]) continue;
        int32_t leaf[3] = {g->leaf_of[sl->column * 2], -1, -1};
        if (sl->target == SL_WH_MAP_WEIGHTED)
            leaf[1] = p->cols[sl->column].type == SL_WH_COLTYPE_LIST_WEIGHTED
                          ? g->leaf_of[sl->column * 2 + 1]
                          : g->leaf_of[sl->weights_column * 2];
        if (sl->target == SL_WH_MAP_LABEL || sl->target == SL_WH_MAP_DENSE) {
            if (num_anchor < 0) num_anchor = leaf[0];
            leaf[2] = num_anchor;
        }
        /* another slot that writes the same array (one key, one id) */
        for (uint32_t t = 0; t < s && leaf[2] < 0; t++)
            if (c->slot_read[t] && m->slots[t].target == sl->target &&
                (sl->target <= SL_WH_MAP_TIMESTAMP || c->slot_out[t] == c->slot_out[s]))
                leaf[2] = g->leaf_of[m->slots[t].column * 2];
        /* union: every root of the slot's readers under the least */
        uint32_t root = UINT32_MAX;
        for (int j = 0; j < 3; j++)
            if (leaf[j] >= 0 && (uint32_t)leaf[j] < g->n) {
                uint32_t r = (uint32_t)leaf[j];
                while (u[r] != r)
                    r = u[r];
                if (r < root) root = r;
            }
        for (int j = 0; j < 3 && root != UINT32_MAX; j++)
            if (leaf[j] >= 0 && (uint32_t)leaf[j] < g->n) {
                uint32_t r = (uint32_t)leaf[j];
                while (u[r] != r) {
                    uint32_t up = u[r];
                    u[r] = root;
                    r = up;
                }
                u[r] = root;
            }
    }
    for (uint32_t i = 0; i < g->n; i++) { /* each to its unit's first reader */
        uint32_t r = i;
        while (u[r] != r)
            r = u[r];
        u[i] = r;
    }
}

/* After imp_pqc_par_assign: the group converting each slot, its
 * column's. */
static void set_slot_groups(imp_pqc_t *c, const group_read_t *g)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    for (uint32_t s = 0; s < m->num_slots; s++) {
        int32_t li = c->slot_read[s] ? g->leaf_of[m->slots[s].column * 2] : -1;
        c->slot_grp[s] = li >= 0 ? (uint8_t)imp_pqc_par_group(c->par, (uint32_t)li) : 0;
    }
}

/* A run planned for the threads: where it goes (u, its values no slot
 * fills already written) and the job's conversion. */
typedef struct plan {
    imp_pqc_t *c;
    const group_read_t *g;
    run_t u;
    imp_pqc_conv_t conv;
} plan_t;

/* In place before the decode (imp_pqc_direct_est), conv->pre: the exact
 * room of group k's keys in the run, from their batches. */
static bool rooms_group(void *ctx, uint32_t k)
{
    plan_t *pl = ctx;
    imp_pqc_t *c = pl->c;
    const group_read_t *g = pl->g;
    const sl_wh_colmap_resolved_t *m = c->p->map;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t s = 0; s < m->num_slots; s++) {
            const sl_wh_colmap_slot_t *sl = &m->slots[s];
            if (!c->slot_read[s] || c->slot_grp[s] != k || sl->target != SL_WH_MAP_SPARSE ||
                c->slot_out[s] < 0)
                continue;
            outkey_t *kk = &c->keys[c->slot_out[s]];
            int32_t li = g->leaf_of[sl->column * 2];
            const sl_pq_batch_t *v = g->bat[li];
            if (pass == 0)
                kk->at_room = 0;
            else if (g->col[li]->is_list)
                kk->at_room += (uint64_t)v->list_off[pl->u.r1] - v->list_off[pl->u.r0];
            else
                kk->at_room += pl->u.r1 - pl->u.r0;
        }
    return true;
}

/* After every group's rooms_group: where group k's keys' ids go, each
 * key's right after the one before (none moved when the stripe is taken).
 * @return false when they are more than the stripe holds. */
static bool place_group(imp_pqc_t *c, uint32_t k)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    uint64_t total = 0;
    for (uint32_t o = 0; o < c->S; o++)
        total += c->keys[o].at_room;
    if (total > c->at_cap) return false;
    for (uint32_t s = 0; s < m->num_slots; s++) {
        if (!c->slot_read[s] || c->slot_grp[s] != k || m->slots[s].target != SL_WH_MAP_SPARSE ||
            c->slot_out[s] < 0)
            continue;
        uint32_t o = (uint32_t)c->slot_out[s];
        uint64_t at = 0;
        for (uint32_t j = 0; j < o; j++)
            at += c->keys[j].at_room;
        c->keys[o].at_ids = c->st.sparse.values + at;
    }
    return true;
}

/* Group k's slots of the planned run, with its own refused row: any
 * refusal, or no room, and the caller converts the run again. */
static bool conv_group(void *ctx, uint32_t k)
{
    plan_t *pl = ctx;
    if (pl->conv.pre != NULL && !place_group(pl->c, k)) return false;
    sl_error_t why = {0}, err = {0};
    run_t u = pl->u;
    u.bad = UINT32_MAX;
    u.why = &why;
    return imp_pqc_convert_slots(pl->c, pl->g, &u, k, &err) == SL_OK && u.bad == UINT32_MAX;
}

/* Plan rows [r0, r1) of batches of `rows` rows (in place when the caller
 * set it up, c->direct; else room for the rows in the vectors). @return
 * false: not planned (no memory), the run goes the single thread's way. */
static bool plan(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1, uint32_t rows,
                 uint64_t line0, int64_t id_base, plan_t *pl)
{
    if (!c->direct && !imp_pqc_reserve_rows(c, r1 - r0)) return false;
    *pl = (plan_t){
        .c = c,
        .g = g,
        .u =
            {.r0 = r0, .r1 = r1, .n0 = c->n, .line0 = line0, .id_base = id_base, .bad = UINT32_MAX},
        .conv = {.rows = rows, .fn = conv_group}};
    pl->conv.ctx = pl;
    imp_pqc_run_begin(c, &pl->u);
    return true;
}

/* A plan not carried out: nothing of it kept (a stripe in place is laid
 * out again by the next imp_pqc_direct). */
static void unplan(imp_pqc_t *c)
{
    for (uint32_t k = 0; k < c->S; k++)
        c->keys[k].pending = 0;
    if (c->n == 0) c->direct = false;
}

/* imp_pqc_convert_run for a run of a batch already decoded (not its
 * first): converted on the threads, or again on this one. */
static sl_err_t par_run(imp_pqc_t *c, group_read_t *g, uint32_t r0, uint32_t r1, uint32_t rows,
                        uint64_t line0, imp_pqc_read_t *rd, sl_error_t *err)
{
    plan_t pl;
    if (imp_pqc_par_shared(c->par, g) && plan(c, g, r0, r1, rows, line0, rd->id_base, &pl)) {
        imp_pqc_par_convert(c->par, g, &pl.conv);
        if (pl.conv.ok) {
            imp_pqc_commit(c, r1 - r0);
            return SL_OK;
        }
        bool direct = c->direct;
        unplan(c);
        c->direct = direct; /* laid out for these very rows: still right */
    }
    return imp_pqc_convert_run(c, g, r0, r1, line0, rd, err);
}

/* The first and the end of the rows [lo, hi) of rd among a batch of
 * `rows` rows from file row `row`. */
static uint32_t batch_from(const imp_pqc_read_t *rd, uint64_t row, uint32_t rows)
{
    return rd->lo > row ? (uint32_t)(rd->lo - row < rows ? rd->lo - row : rows) : 0;
}

static uint32_t batch_to(const imp_pqc_read_t *rd, uint64_t row, uint32_t rows)
{
    return rd->hi < row + rows ? (rd->hi > row ? (uint32_t)(rd->hi - row) : 0) : rows;
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
        if (rc == SL_OK && c->par != NULL) {
            set_units(c, &g);
            imp_pqc_par_assign(c->par, f, gi, &g, c->scratch, c->unit);
            set_slot_groups(c, &g);
        }
        if (rc == SL_OK) set_reader_maps(c, &g);
        if (rc == SL_OK) rc = imp_pq_prefetch_group(p, &src, f, gi, &g, err);
        uint64_t group_end = row + (uint64_t)m->row_groups[gi].num_rows;
        bool held = false; /* a stripe taken (on_take), handed on beside the next job */
        while (rc == SL_OK && !past) {
            uint32_t rows = 0;
            bool planned = false;
            plan_t pl;
            imp_pqc_aside_t aside = {.fn = rd->on_hand, .ctx = rd->ctx};
            if (c->par != NULL) {
                /* the batch's first run planned from the rows it should hold */
                uint32_t want = group_end > row && group_end - row < PQ_BATCH_ROWS
                                    ? (uint32_t)(group_end - row)
                                    : (group_end > row ? PQ_BATCH_ROWS : 0);
                uint32_t r = batch_from(rd, row, want), r_end = batch_to(rd, row, want);
                uint32_t room = c->n < flush ? flush - c->n : 1;
                uint32_t take = r_end - r < room ? r_end - r : room;
                if (r < r_end && imp_pqc_par_shared(c->par, &g)) {
                    bool est = c->n == 0 && take == flush && imp_pqc_direct_est(c, &g, take);
                    planned = plan(c, &g, r, r + take, want, row + r + 1, rd->id_base, &pl);
                    if (!planned) unplan(c);
                    /* a list key's room estimated: exact rooms, then places */
                    if (planned && est && c->at_est) pl.conv.pre = rooms_group;
                }
                rc = imp_pqc_par_next(c->par, &g, input, gi, planned ? &pl.conv : NULL,
                                      held ? &aside : NULL, &rows, err);
                if (held && aside.rc != SL_OK) { /* the hand-on's error comes first, as before */
                    rc = aside.rc;
                    *err = aside.err;
                }
                held = false;
                if (planned && !(rc == SL_OK && rows == want && pl.conv.ok)) {
                    unplan(c);
                    planned = false;
                }
            } else {
                rc = imp_pq_group_next(&g, input, gi, &rows, err);
            }
            if (rc != SL_OK || rows == 0) break;
            uint32_t r = batch_from(rd, row, rows), r_end = batch_to(rd, row, rows);
            while (rc == SL_OK && r < r_end) {
                uint32_t room = c->n < flush ? flush - c->n : 1;
                uint32_t take = r_end - r < room ? r_end - r : room;
                if (planned) { /* the first run, converted with the decode */
                    imp_pqc_commit(c, take);
                    planned = false;
                } else {
                    /* a whole stripe in one run: converted straight into it */
                    if (c->n == 0 && take == flush) imp_pqc_direct(c, &g, r, r + take);
                    rc = c->par != NULL
                             ? par_run(c, &g, r, r + take, rows, row + r + 1, rd, err)
                             : imp_pqc_convert_run(c, &g, r, r + take, row + r + 1, rd, err);
                }
                r += take;
                if (rc == SL_OK && c->n >= flush) {
                    /* the batch's last stripe, the row group's next batch
                     * to come on the threads: taken now, handed on while
                     * they decode it (the job's aside) */
                    if (r >= r_end && rd->on_take != NULL && c->par != NULL &&
                        row + rows < group_end && row + rows < rd->hi) {
                        rc = rd->on_take(rd->ctx, row + r, err);
                        held = rc == SL_OK;
                    } else {
                        rc = rd->on_full(rd->ctx, row + r, err);
                    }
                }
            }
            row += rows;
            rd->reached = row;
            past = row >= rd->hi;
        }
        if (held) { /* not reached (row + rows < hi: a next batch comes), but never lost */
            sl_error_t e2 = {0};
            sl_err_t hr = rd->on_hand(rd->ctx, &e2);
            if (rc == SL_OK && hr != SL_OK) {
                rc = hr;
                *err = e2;
            }
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
