/* Transforms at decode (plan.h, sl_pipeline_plan_map_at_decode;
 * docs/WORKER.md, "Transforms at decode"): the per-value transforms of a
 * feature that nothing else reads run inside the table reader, as maps of
 * its values (sl_wh_value_map_t). A dictionary-encoded stream then maps
 * its dictionary, once per stripe, and gathers the results by index: a
 * criteo id column of a 65,536-row stripe holds a few thousand distinct
 * ids, so sigrid_hash runs on those instead of on every row, and log1p
 * of a count column on its few hundred distinct counts. The kernels are
 * the general path's, and every one maps each value alone, so the bits
 * are the same whichever values a call gets. */
#include "dpp/pipeline/plan_internal.h"

#include <string.h>

static bool sparse_op(dpp_op_t op)
{
    return op == OP_SIGRID_HASH || op == OP_MODULO || op == OP_MAP_VOCAB || op == OP_FIRST_X;
}

static bool dense_op(dpp_op_t op)
{
    return op >= OP_FILL_MISSING && op <= OP_BOXCOX;
}

static bool same(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static void map_ids(const void *ctx, int64_t *ids, uint64_t n)
{
    const dpp_decode_chain_t *c = ctx;
    for (uint32_t j = 0; j < c->num_ops; j++) {
        const dpp_transform_t *t = c->ops[j];
        if (t->op == OP_SIGRID_HASH)
            dpp_sigrid_hash(ids, n, t->salt, t->table_size);
        else if (t->op == OP_MODULO)
            dpp_modulo(ids, n, t->divisor);
        else if (t->op == OP_MAP_VOCAB)
            dpp_map_vocab(ids, n, t->vocab, t->vocab_default);
    }
}

static void map_dense(const void *ctx, float *data, uint32_t rows, uint32_t cols, uint32_t col)
{
    const dpp_decode_chain_t *c = ctx;
    for (uint32_t j = 0; j < c->num_ops; j++) {
        const dpp_transform_t *t = c->ops[j];
        /* fill_missing then log1p in one pass, as the other paths do it */
        if (t->op == OP_FILL_MISSING && j + 1 < c->num_ops && c->ops[j + 1]->op == OP_LOG1P) {
            dpp_dense_fill_log1p(data, rows, cols, col, t->value);
            j++;
        } else {
            dpp_dense_apply(t, data, rows, cols, col);
        }
    }
}

/* Does any filter read feature f? */
static bool filtered(const sl_pipeline_plan_t *plan, const char *f)
{
    for (uint32_t i = 0; i < plan->num_filters; i++)
        if (same(plan->filters[i].name, f)) return true;
    return false;
}

/* Can the transforms of feature f run at decode: none but per-value ops
 * of f alone, in place, all of one kind? */
static bool mappable(const sl_pipeline_plan_t *plan, const char *f)
{
    if (filtered(plan, f)) return false;
    bool sparse = false, dense = false;
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        const dpp_transform_t *t = &plan->transforms[i];
        if (!same(t->in[0], f) && !same(t->in[1], f) && !same(t->out, f)) continue;
        if (t->out != NULL || t->in[1] != NULL || !same(t->in[0], f)) return false;
        if (sparse_op(t->op))
            sparse = true;
        else if (dense_op(t->op))
            dense = true;
        else
            return false;
    }
    return !(sparse && dense);
}

void dpp_decode_maps_free(sl_pipeline_plan_t *plan)
{
    const sl_allocator_t *a = plan->a;
    size_t R = (size_t)plan->num_read + 1, T = (size_t)plan->num_transforms + 1;
    if (plan->maps) sl_free(a, plan->maps, R * sizeof *plan->maps);
    if (plan->chains) sl_free(a, plan->chains, R * sizeof *plan->chains);
    if (plan->chain_ops) sl_free(a, plan->chain_ops, T * sizeof *plan->chain_ops);
    plan->maps = NULL;
    plan->chains = NULL;
    plan->chain_ops = NULL;
}

sl_err_t sl_pipeline_plan_map_at_decode(sl_pipeline_plan_t *plan, const sl_wh_value_map_t **maps,
                                        sl_error_t *err)
{
    *maps = plan->maps;
    if (plan->maps != NULL) return SL_OK; /* asked before */
    const sl_allocator_t *a = plan->a;
    size_t R = (size_t)plan->num_read + 1, T = (size_t)plan->num_transforms + 1;
    plan->maps = sl_calloc(a, R, sizeof *plan->maps);
    plan->chains = sl_calloc(a, R, sizeof *plan->chains);
    plan->chain_ops = sl_calloc(a, T, sizeof *plan->chain_ops);
    if (!plan->maps || !plan->chains || !plan->chain_ops) {
        dpp_decode_maps_free(plan);
        return sl_error_set(err, SL_ERR_NOMEM, "job plan: out of memory for the decode maps");
    }
    uint32_t used = 0, mapped = 0;
    for (uint32_t r = 0; r < plan->num_read; r++) {
        const char *f = plan->read[r];
        if (!mappable(plan, f)) continue;
        dpp_decode_chain_t *c = &plan->chains[r];
        c->ops = plan->chain_ops + used;
        bool dense = false, nonneg = true;
        for (uint32_t i = 0; i < plan->num_transforms; i++) {
            dpp_transform_t *t = &plan->transforms[i];
            /* first_x cuts lists: not a map of values (the fused path cuts
             * while copying, the general path after) */
            if (!same(t->in[0], f) || t->op == OP_FIRST_X) continue;
            c->ops[c->num_ops++] = t;
            t->at_decode = true;
            dense = dense_op(t->op);
            /* sigrid_hash lands in [0, table_size), table_size < 2^63;
             * modulo in [0, divisor); map_vocab in [0, 2^26) or its default */
            if (t->op == OP_MAP_VOCAB && t->vocab_default < 0) nonneg = false;
        }
        if (c->num_ops == 0) continue;
        used += c->num_ops;
        mapped++;
        plan->maps[r] = (sl_wh_value_map_t){.ids = dense ? NULL : map_ids,
                                            .dense = dense ? map_dense : NULL,
                                            .ctx = c,
                                            .ids_nonneg = nonneg};
    }
    if (mapped == 0) {
        dpp_decode_maps_free(plan);
        return SL_OK;
    }
    *maps = plan->maps;
    return SL_OK;
}
