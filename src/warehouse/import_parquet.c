/* `sluice table import --format parquet`: Parquet files read with sluice's
 * own reader (src/parquet) into table rows through the column mapping
 * (column_map.h). The first input's footer gives the input columns (name
 * and type: a scalar, a list, or a list of struct{id, weight} whose two
 * leaves are one column); the mapping resolves against them into the
 * table's schema. The import driver (import_run.c) reads a job's row
 * groups [begin, end) with the columnar conversion (import_parquet_cols.c);
 * this file keeps the row-by-row conversion (imp_pq_read_slots: every
 * column the mapping uses streamed page by page in batches, each row
 * filled slot by slot), which sl_wh_pqds_read serves and the columnar
 * path is tested against. Sample ids the file does not give count rows
 * from 1 per file, whatever row groups a job reads. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "column_map.h"
#include "common/err.h"
#include "common/mem.h"
#include "import_internal.h"
#include "parquet/parquet.h"
#include "pq_internal.h"
#include "pq_store.h"

static sl_wh_coltype_t scalar_type(const sl_pq_column_t *c)
{
    if (c->type == SL_PQ_BOOLEAN) return SL_WH_COLTYPE_BOOL;
    if (c->kind == SL_PQ_KIND_I64) return SL_WH_COLTYPE_INT;
    if (c->kind == SL_PQ_KIND_BYTES) return SL_WH_COLTYPE_STRING;
    return SL_WH_COLTYPE_FLOAT;
}

static sl_wh_coltype_t list_type(sl_wh_coltype_t t)
{
    return t == SL_WH_COLTYPE_STRING  ? SL_WH_COLTYPE_LIST_STRING
           : t == SL_WH_COLTYPE_FLOAT ? SL_WH_COLTYPE_LIST_FLOAT
                                      : SL_WH_COLTYPE_LIST_INT;
}

/* The input columns of m: supported leaves, a list of struct{id, weight}
 * folded into one column named by the list. */
static sl_err_t input_columns(imp_pq_t *p, const sl_pq_meta_t *m, sl_arena_t *ar, sl_error_t *err)
{
    p->cols = sl_arena_calloc(ar, m->num_columns + 1, sizeof *p->cols);
    if (p->cols == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for the columns");
    for (uint32_t i = 0; i < m->num_columns; i++) {
        const sl_pq_column_t *c = &m->columns[i];
        if (c->unsupported) continue;
        pq_col_t *pc = &p->cols[p->num_cols];
        size_t nl = strlen(c->name);
        if (c->in_struct_list && nl > 3 && strcmp(c->name + nl - 3, ".id") == 0 &&
            scalar_type(c) == SL_WH_COLTYPE_INT) {
            /* "L.id" with a sibling "L.weight": the column L */
            char *list = sl_arena_alloc(ar, nl - 2);
            char *wname = sl_arena_alloc(ar, nl + 5);
            if (list == NULL || wname == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory");
            memcpy(list, c->name, nl - 3);
            list[nl - 3] = '\0';
            snprintf(wname, nl + 5, "%s.weight", list);
            int64_t w = sl_pq_find_column(m, wname);
            if (w >= 0 && m->columns[w].in_struct_list && m->columns[w].kind != SL_PQ_KIND_BYTES) {
                pc->name = list;
                pc->type = SL_WH_COLTYPE_LIST_WEIGHTED;
                pc->physical = (int32_t)i;
                pc->weight_physical = (int32_t)w;
                p->num_cols++;
                continue;
            }
        }
        if (c->in_struct_list && nl > 7 && strcmp(c->name + nl - 7, ".weight") == 0) {
            char idname[1024];
            snprintf(idname, sizeof idname, "%.*s.id", (int)(nl - 7), c->name);
            int64_t id = sl_pq_find_column(m, idname);
            if (id >= 0 && scalar_type(&m->columns[id]) == SL_WH_COLTYPE_INT)
                continue; /* folded into the list's column */
        }
        pc->name = c->name;
        pc->type = c->is_list ? list_type(scalar_type(c)) : scalar_type(c);
        pc->physical = (int32_t)i;
        pc->weight_physical = -1;
        p->num_cols++;
    }
    p->input = sl_arena_calloc(ar, p->num_cols + 1, sizeof *p->input);
    if (p->input == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for the columns");
    for (uint32_t i = 0; i < p->num_cols; i++) {
        p->input[i].name = p->cols[i].name;
        p->input[i].type = p->cols[i].type;
    }
    return SL_OK;
}

sl_err_t imp_pq_open(const char *input, const sl_wh_colmap_t *mapping, const sl_allocator_t *a,
                     imp_pq_t **out, sl_error_t *err)
{
    return imp_pq_open_mapped(input, mapping, a, NULL, NULL, out, err);
}

sl_err_t sl_wh_parquet_mapping(const char *input, const sl_wh_colmap_t *mapping,
                               const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                               sl_wh_colmap_resolved_t **out, sl_error_t *err)
{
    imp_pq_t *p;
    *out = NULL;
    sl_err_t rc = imp_pq_open_mapped(input, mapping, a, problem, ctx, &p, err);
    if (rc != SL_OK) return rc;
    *out = p->map; /* it copied the columns: it outlives p */
    p->map = NULL;
    imp_pq_destroy(p);
    return SL_OK;
}

sl_err_t imp_pq_open_mapped(const char *input, const sl_wh_colmap_t *mapping,
                            const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                            imp_pq_t **out, sl_error_t *err)
{
    return imp_pq_open_store(NULL, input, mapping, a, problem, ctx, out, err);
}

sl_err_t imp_pq_open_store(sl_store_t *st, const char *input, const sl_wh_colmap_t *mapping,
                           const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                           imp_pq_t **out, sl_error_t *err)
{
    *out = NULL;
    if (strcmp(input, "-") == 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "parquet is read from files (a footer at the end), not standard input");
    imp_pq_t *p = sl_calloc(a, 1, sizeof *p);
    sl_arena_t *ar = sl_arena_new(a, 0);
    if (p == NULL || ar == NULL) {
        sl_free(a, p, sizeof *p);
        sl_arena_destroy(ar);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory");
    }
    p->a = a;
    p->arena = ar;
    sl_err_t rc = SL_OK;
    p->store = st;
    if (st == NULL && sl_store_is_remote(input)) {
        sl_store_opts_t so = {.alloc = a};
        rc = sl_store_open_url(input, &so, &p->store, NULL, err);
        p->own_store = rc == SL_OK;
    }
    if (rc == SL_OK) rc = wh_pq_source_open(p->store, input, a, &p->src, err);
    if (rc == SL_OK) rc = sl_pq_file_open(&p->src, input, a, &p->first, err);
    if (rc == SL_OK) rc = input_columns(p, sl_pq_file_meta(p->first), ar, err);
    sl_wh_colmap_t *own = NULL;
    if (rc == SL_OK && mapping == NULL && (own = sl_wh_colmap_new_default(a)) == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for the mapping");
    if (rc == SL_OK)
        rc = sl_wh_colmap_resolve(mapping ? mapping : own, p->input, p->num_cols, a, problem, ctx,
                                  &p->map, err);
    sl_wh_colmap_destroy(own);
    if (rc != SL_OK) {
        if (rc == SL_ERR_INVALID) sl_error_prefix(err, "%s: ", input);
        imp_pq_destroy(p);
        return rc;
    }
    *out = p;
    return SL_OK;
}

void imp_pq_destroy(imp_pq_t *p)
{
    if (p == NULL) return;
    sl_wh_colmap_resolved_destroy(p->map);
    sl_pq_file_destroy(p->first);
    wh_pq_source_close(&p->src);
    if (p->own_store) sl_store_destroy(p->store);
    sl_arena_destroy(p->arena);
    sl_free(p->a, p, sizeof *p);
}

const sl_wh_colmap_resolved_t *imp_pq_mapping(const imp_pq_t *p)
{
    return p->map;
}

const char *imp_pq_leaf_path(const imp_pq_t *p, uint32_t column)
{
    if (column >= p->num_cols || p->cols[column].weight_physical >= 0) return NULL;
    return sl_pq_file_meta(p->first)->columns[p->cols[column].physical].path;
}

sl_err_t imp_pq_row_groups(const char *input, const sl_allocator_t *a, uint32_t *groups,
                           uint64_t **rows_before, sl_error_t *err)
{
    sl_pq_source_t src;
    sl_pq_file_t *f = NULL;
    sl_store_t *st = NULL;
    sl_err_t rc = SL_OK;
    if (sl_store_is_remote(input)) {
        sl_store_opts_t so = {.alloc = a};
        rc = sl_store_open_url(input, &so, &st, NULL, err);
    }
    if (rc == SL_OK) rc = wh_pq_source_open(st, input, a, &src, err);
    if (rc == SL_OK) rc = sl_pq_file_open(&src, input, a, &f, err);
    if (rc == SL_OK) {
        const sl_pq_meta_t *m = sl_pq_file_meta(f);
        *groups = m->num_row_groups;
        *rows_before = sl_calloc(a, (size_t)m->num_row_groups + 1, sizeof **rows_before);
        if (*rows_before == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "no memory");
        for (uint32_t g = 0; rc == SL_OK && g < m->num_row_groups; g++)
            (*rows_before)[g + 1] = (*rows_before)[g] + (uint64_t)m->row_groups[g].num_rows;
    }
    sl_pq_file_destroy(f);
    wh_pq_source_close(&src);
    sl_store_destroy(st);
    return rc;
}

/* ---- reading rows ---- */

sl_err_t imp_pq_id_at(const sl_wh_colmap_slot_t *sl, const char *col, const sl_pq_batch_t *b,
                      uint32_t s, int64_t *id, sl_error_t *err)
{
    if (b->kind == SL_PQ_KIND_BYTES) {
        *id = sl_wh_colmap_hash(b->bytes + b->bytes_off[s],
                                (size_t)(b->bytes_off[s + 1] - b->bytes_off[s]), sl->seed);
        return SL_OK;
    }
    if (b->kind != SL_PQ_KIND_I64 || b->i64[s] < 0)
        return imp_bad(err, "column '%s': an id must be an integer >= 0, got %.17g", col,
                       imp_pq_num_at(b, s));
    *id = b->i64[s];
    return SL_OK;
}

/* Fill the schema slot sl of the row from row r of the batches. */
static sl_err_t fill(const imp_pq_t *p, const group_read_t *g, sl_wh_row_buf_t *b,
                     const sl_wh_colmap_slot_t *sl, uint32_t r, sl_wh_row_t *row, bool has[3],
                     sl_error_t *err)
{
    const pq_col_t *pc = &p->cols[sl->column];
    int32_t li = g->leaf_of[sl->column * 2];
    const sl_pq_batch_t *v = g->bat[li];
    const char *col = pc->name;
    switch (sl->target) {
    case SL_WH_MAP_SAMPLE_ID:
    case SL_WH_MAP_SESSION_ID:
    case SL_WH_MAP_TIMESTAMP:
        if (!v->valid[r]) return SL_OK;
        if (sl->target == SL_WH_MAP_SAMPLE_ID)
            row->sample_id = v->i64[r];
        else if (sl->target == SL_WH_MAP_SESSION_ID)
            row->session_id = v->i64[r];
        else
            row->timestamp = v->i64[r];
        has[sl->target - SL_WH_MAP_SAMPLE_ID] = true;
        return SL_OK;
    case SL_WH_MAP_LABEL:
    case SL_WH_MAP_DENSE:
        if (!v->valid[r]) return SL_OK; /* reset left 0 (label) or NaN (dense) */
        if (sl->target == SL_WH_MAP_LABEL)
            b->labels[sl->index] = (float)imp_pq_num_at(v, r);
        else
            b->dense[sl->index] = (float)imp_pq_num_at(v, r);
        return SL_OK;
    case SL_WH_MAP_SPARSE:
    case SL_WH_MAP_WEIGHTED:
        break;
    }
    uint32_t k = sl->index, from, to;
    bool is_list = g->col[li]->is_list;
    if (is_list) {
        if (!v->list_valid[r]) return SL_OK;
        from = v->list_off[r];
        to = v->list_off[r + 1];
    } else {
        if (!v->valid[r]) return SL_OK;
        from = r;
        to = r + 1;
    }
    const sl_pq_batch_t *w = NULL;
    uint32_t wfrom = 0;
    if (sl->target == SL_WH_MAP_WEIGHTED) {
        int32_t wi = pc->type == SL_WH_COLTYPE_LIST_WEIGHTED ? g->leaf_of[sl->column * 2 + 1]
                                                             : g->leaf_of[sl->weights_column * 2];
        w = g->bat[wi];
        const char *wcol =
            pc->type == SL_WH_COLTYPE_LIST_WEIGHTED ? col : p->cols[sl->weights_column].name;
        uint32_t wn = 0;
        if (g->col[wi]->is_list && w->list_valid[r]) {
            wfrom = w->list_off[r];
            wn = w->list_off[r + 1] - wfrom;
        }
        if (wn != to - from)
            return imp_bad(err, "column '%s': %u ids but %u weights in '%s'", col, to - from, wn,
                           wcol);
    }
    if (!imp_reserve(b, k, to - from))
        return sl_error_set(err, SL_ERR_NOMEM, "column '%s': no memory for %u ids", col, to - from);
    uint32_t n = 0;
    for (uint32_t s = from; s < to; s++) {
        if (!v->valid[s]) continue; /* a null element adds no id */
        sl_err_t rc = imp_pq_id_at(sl, col, v, s, &b->ids[k][n], err);
        if (rc != SL_OK) return rc;
        if (w != NULL) {
            uint32_t ws = wfrom + (s - from);
            b->weights[k][n] = w->valid[ws] ? (float)imp_pq_num_at(w, ws) : NAN;
        }
        n++;
    }
    b->lists[k].len = n;
    b->lists[k].ids = b->ids[k];
    b->lists[k].weights = w != NULL ? b->weights[k] : NULL;
    return SL_OK;
}

sl_err_t imp_pq_open_group(const imp_pq_t *p, const uint8_t *slot_read, sl_pq_file_t *f,
                           uint32_t gi, group_read_t *g, sl_error_t *err)
{
    const sl_pq_meta_t *m = sl_pq_file_meta(f), *m0 = sl_pq_file_meta(p->first);
    for (uint32_t c = 0; c < p->num_cols; c++) {
        g->leaf_of[2 * c] = g->leaf_of[2 * c + 1] = -1;
        if (p->map->column_uses[c] == 0) continue;
        bool wanted = slot_read == NULL;
        for (uint32_t sl = 0; !wanted && sl < p->map->num_slots; sl++)
            wanted = slot_read[sl] &&
                     (p->map->slots[sl].column == c || p->map->slots[sl].weights_column == c);
        if (!wanted) continue; /* projected out: its chunks are never read */
        for (int h = 0; h < 2; h++) {
            int32_t phys = h == 0 ? p->cols[c].physical : p->cols[c].weight_physical;
            if (phys < 0) continue;
            const sl_pq_column_t *want = &m0->columns[phys];
            int64_t have = sl_pq_find_column(m, want->path);
            if (have < 0 || m->columns[have].type != want->type ||
                m->columns[have].is_list != want->is_list)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "%s has no column %s of type %s%s like the first input",
                                    sl_pq_file_name(f), want->path, sl_pq_type_name(want->type),
                                    want->is_list ? " in a list" : "");
            sl_err_t rc = g->keep ? sl_pq_reader_renew(f, gi, (uint32_t)have, &g->rd[g->n], err)
                                  : sl_pq_reader_new(f, gi, (uint32_t)have, &g->rd[g->n], err);
            if (rc != SL_OK) return rc;
            g->col[g->n] = &m->columns[have];
            g->leaf_of[2 * c + h] = (int32_t)g->n++;
        }
    }
    return SL_OK;
}

void imp_pq_close_group(group_read_t *g)
{
    for (uint32_t i = 0; i < g->n && !g->keep; i++) {
        sl_pq_reader_destroy(g->rd[i]);
        g->rd[i] = NULL;
    }
    g->n = 0;
}

/* Fetch the column chunks group g's readers will read (an object's
 * source; nothing for a file). */
sl_err_t imp_pq_prefetch_group(const imp_pq_t *p, sl_pq_source_t *src, const sl_pq_file_t *f,
                               uint32_t gi, const group_read_t *g, sl_error_t *err)
{
    const sl_allocator_t *a = p->a;
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    if (g->n == 0) return SL_OK;
    uint64_t *off = sl_calloc(a, 2 * (size_t)g->n, sizeof *off);
    if (off == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory");
    uint64_t *len = off + g->n;
    for (uint32_t i = 0; i < g->n; i++) {
        const sl_pq_chunk_t *ch = &m->row_groups[gi].chunks[g->col[i] - m->columns];
        int64_t start = ch->data_page_offset;
        if (ch->dictionary_page_offset >= 0 && ch->dictionary_page_offset < start)
            start = ch->dictionary_page_offset;
        off[i] = start > 0 ? (uint64_t)start : 0;
        len[i] = ch->total_compressed > 0 ? (uint64_t)ch->total_compressed : 0;
    }
    char what[300];
    snprintf(what, sizeof what, "the column chunks of %.200s row group %u", sl_pq_file_name(f), gi);
    sl_err_t rc = wh_pq_source_prefetch(src, off, len, g->n, p->mem, what, err);
    sl_free(a, off, 2 * (size_t)g->n * sizeof *off);
    return rc;
}

sl_err_t imp_pq_group_next(group_read_t *g, const char *input, uint32_t gi, uint32_t *rows,
                           sl_error_t *err)
{
    *rows = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        SL_FORWARD_IF_ERROR(sl_pq_reader_next(g->rd[i], PQ_BATCH_ROWS, &g->bat[i], err));
        if (i > 0 && g->bat[i]->rows != *rows)
            return sl_error_set(err, SL_ERR_CORRUPT, "%s row group %u: columns of %u and %u rows",
                                input, gi, *rows, g->bat[i]->rows);
        *rows = g->bat[i]->rows;
    }
    return SL_OK;
}

sl_err_t imp_pq_source_open(const imp_pq_t *p, const char *input, const char *if_etag,
                            sl_pq_source_t *src, sl_error_t *err)
{
    sl_err_t rc = wh_pq_source_open(p->store, input, p->a, src, err);
    if (rc == SL_OK && if_etag != NULL && *if_etag && strcmp(wh_pq_source_etag(src), if_etag) != 0)
        rc = sl_error_set(err, SL_ERR_VERSION,
                          "%s: the object was replaced after the dataset was listed (ETag %s, "
                          "listed %s): refused, not mixed",
                          input, wh_pq_source_etag(src), if_etag);
    return rc;
}

void imp_pq_free_readers(sl_pq_reader_t **rd, uint32_t n)
{
    for (uint32_t i = 0; rd != NULL && i < n; i++) {
        sl_pq_reader_destroy(rd[i]);
        rd[i] = NULL;
    }
}

sl_err_t imp_pq_read_slots(const imp_pq_t *p, const uint8_t *slot_read, const char *input,
                           const char *if_etag, uint32_t begin, uint32_t end, uint64_t first_row,
                           uint64_t skip_to, sl_wh_row_buf_t *b, imp_pq_row_fn on_row, void *ctx,
                           sl_error_t *err)
{
    const sl_allocator_t *a = p->a;
    sl_pq_source_t src;
    sl_pq_file_t *f = NULL;
    sl_err_t rc = imp_pq_source_open(p, input, if_etag, &src, err);
    if (rc == SL_OK) rc = sl_pq_file_open(&src, input, a, &f, err);
    if (rc != SL_OK) {
        wh_pq_source_close(&src);
        return rc;
    }
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    if (end > m->num_row_groups) end = m->num_row_groups;
    uint32_t cap = 2 * p->num_cols + 2;
    group_read_t g = {0};
    g.leaf_of = sl_calloc(a, cap, sizeof *g.leaf_of);
    g.rd = sl_calloc(a, cap, sizeof *g.rd);
    g.bat = sl_calloc(a, cap, sizeof *g.bat);
    g.col = sl_calloc(a, cap, sizeof *g.col);
    if (g.leaf_of == NULL || g.rd == NULL || g.bat == NULL || g.col == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory");
    uint64_t line = first_row;
    /* row groups that end at or before file row skip_to are not read */
    while (begin < end && line + (uint64_t)m->row_groups[begin].num_rows <= skip_to)
        line += (uint64_t)m->row_groups[begin++].num_rows;
    for (uint32_t gi = begin; rc == SL_OK && gi < end; gi++) {
        rc = imp_pq_open_group(p, slot_read, f, gi, &g, err);
        if (rc == SL_OK) rc = imp_pq_prefetch_group(p, &src, f, gi, &g, err);
        while (rc == SL_OK) {
            uint32_t rows = 0;
            rc = imp_pq_group_next(&g, input, gi, &rows, err);
            if (rc != SL_OK || rows == 0) break;
            for (uint32_t r = 0; r < rows && rc == SL_OK; r++) {
                sl_wh_row_t row = {0};
                bool has[3] = {false, false, false};
                sl_error_t rerr = {0};
                imp_row_reset(b);
                sl_err_t fr = SL_OK;
                for (uint32_t s = 0; fr == SL_OK && s < p->map->num_slots; s++)
                    if (slot_read == NULL || slot_read[s])
                        fr = fill(p, &g, b, &p->map->slots[s], r, &row, has, &rerr);
                row.labels = b->labels;
                row.dense = b->dense;
                row.sparse = b->lists;
                rc = on_row(ctx, ++line, fr, &rerr, &row, has[0]);
            }
        }
        imp_pq_close_group(&g);
    }
    sl_free(a, g.leaf_of, cap * sizeof *g.leaf_of);
    sl_free(a, g.rd, cap * sizeof *g.rd);
    sl_free(a, g.bat, cap * sizeof *g.bat);
    sl_free(a, g.col, cap * sizeof *g.col);
    sl_pq_file_destroy(f);
    wh_pq_source_close(&src);
    return rc;
}
