/* Fused transforms (plan.h, sl_pipeline_fused_t): a plan whose transforms
 * all work value by value in place - sigrid_hash, modulo and map_vocab on
 * ids, fill_missing, clamp, log1p, normalize and boxcox on dense values,
 * first_x (the lists cut while copied) - and keep every feature read, compiled into per-key and
 * per-dense-column op lists. The worker's fused path (docs/WORKER.md, "The fused path") copies a
 * batch's rows from the decoded stripe straight into the wire frame and runs these lists over each
 * piece right after copying it, while it is still in cache: every value is read from the stripe
 * once and written once, instead of stripe -> batch, transform in place, batch -> frame. The
 * kernels are the general path's (transform_sparse.c, transform_dense.c), applied to pieces of a
 * column instead of the whole column; every op works on each value alone, so the bits are the same.
 */
#include "dpp/pipeline/plan_internal.h"

#include <string.h>

typedef struct fop {
    const dpp_transform_t *t;
    uint32_t col;    /* dense column or sparse key of the rows */
    bool fill_log1p; /* fill_missing then log1p on the same column, one pass */
} fop_t;

struct sl_pipeline_fused {
    const sl_allocator_t *a;
    uint32_t F, D;
    fop_t *ops; /* [num_ops]: dense ops in plan order, then sparse ops in plan order */
    uint32_t num_dense, num_ops, cap;
    uint32_t *key_first, *key_count; /* [F]: each key's ops, as indices into key_ops */
    uint32_t *key_ops;               /* [num_ops - num_dense] sparse ops grouped by key */
    int32_t *key_cap;                /* [F] first_x: ids kept per list (INT32_MAX: all) */
};

static bool kept(const sl_pipeline_plan_t *plan, const char *name)
{
    for (uint32_t i = 0; i < plan->num_keep; i++)
        if (strcmp(plan->keep[i], name) == 0) return true;
    return false;
}

static int find_name(const char *const *names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; names != NULL && i < n; i++)
        if (names[i] != NULL && strcmp(names[i], name) == 0) return (int)i;
    return -1;
}

void sl_pipeline_fused_destroy(sl_pipeline_fused_t *f)
{
    if (f == NULL) return;
    const sl_allocator_t *a = f->a;
    size_t cap = f->cap ? f->cap : 1, F = f->F ? f->F : 1;
    if (f->ops) sl_free(a, f->ops, cap * sizeof *f->ops);
    if (f->key_ops) sl_free(a, f->key_ops, cap * sizeof *f->key_ops);
    if (f->key_first) sl_free(a, f->key_first, F * sizeof *f->key_first);
    if (f->key_count) sl_free(a, f->key_count, F * sizeof *f->key_count);
    if (f->key_cap) sl_free(a, f->key_cap, F * sizeof *f->key_cap);
    sl_free(a, f, sizeof *f);
}

/* An op on ids that works value by value in place (or first_x). */
static bool sparse_op(const dpp_transform_t *t)
{
    return t->op == OP_SIGRID_HASH || t->op == OP_MODULO || t->op == OP_MAP_VOCAB ||
           t->op == OP_FIRST_X;
}

/* An op on dense values that works value by value in place. */
static bool dense_op(const dpp_transform_t *t)
{
    return t->op == OP_FILL_MISSING || t->op == OP_CLAMP || t->op == OP_LOG1P ||
           t->op == OP_NORMALIZE || t->op == OP_BOXCOX;
}

bool sl_pipeline_plan_may_fuse(const sl_pipeline_plan_t *plan)
{
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        const dpp_transform_t *t = &plan->transforms[i];
        if ((!sparse_op(t) && !dense_op(t)) || t->out != NULL) return false;
    }
    return true;
}

sl_err_t sl_pipeline_fused_new(const sl_pipeline_plan_t *plan, const sl_batch_t *shape,
                               sl_pipeline_fused_t **out, sl_error_t *err)
{
    *out = NULL;
    const sl_kjt_t *kjt = &shape->sparse;
    /* What the general path would reshape: groups, weights (dropped or
     * clamped), features read but not kept. */
    if (shape->num_groups != 0 || kjt->weights != NULL) return SL_OK;
    if (shape->dense.cols > 0 && shape->dense.names == NULL) return SL_OK;
    for (uint32_t k = 0; k < kjt->num_keys; k++)
        if (!kept(plan, kjt->keys[k])) return SL_OK;
    for (uint32_t c = 0; c < shape->dense.cols; c++)
        if (!kept(plan, shape->dense.names[c])) return SL_OK;
    if (!sl_pipeline_plan_may_fuse(plan)) return SL_OK;
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        const dpp_transform_t *t = &plan->transforms[i];
        /* a feature the batch lacks: the general path names it */
        if (sparse_op(t) && find_name(kjt->keys, kjt->num_keys, t->in[0]) < 0) return SL_OK;
        if (dense_op(t) && find_name(shape->dense.names, shape->dense.cols, t->in[0]) < 0)
            return SL_OK;
    }
    const sl_allocator_t *a = plan->a;
    sl_pipeline_fused_t *f = sl_calloc(a, 1, sizeof *f);
    if (f == NULL) goto nomem;
    f->a = a;
    f->F = kjt->num_keys;
    f->D = shape->dense.cols;
    f->cap = plan->num_transforms;
    size_t cap = f->cap ? f->cap : 1, F = f->F ? f->F : 1;
    f->ops = sl_calloc(a, cap, sizeof *f->ops);
    f->key_ops = sl_calloc(a, cap, sizeof *f->key_ops);
    f->key_first = sl_calloc(a, F, sizeof *f->key_first);
    f->key_count = sl_calloc(a, F, sizeof *f->key_count);
    f->key_cap = sl_calloc(a, F, sizeof *f->key_cap);
    if (!f->ops || !f->key_ops || !f->key_first || !f->key_count || !f->key_cap) goto nomem;
    for (uint32_t k = 0; k < f->F; k++)
        f->key_cap[k] = INT32_MAX;
    /* dense first, in plan order (a fill_missing followed by log1p of the
     * same column is one op, as in the general path) */
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        const dpp_transform_t *t = &plan->transforms[i];
        if (t->op < OP_FILL_MISSING || t->op > OP_BOXCOX || t->at_decode) continue;
        const dpp_transform_t *next = i + 1 < plan->num_transforms ? t + 1 : NULL;
        fop_t *o = &f->ops[f->num_ops++];
        o->t = t;
        o->col = (uint32_t)find_name(shape->dense.names, shape->dense.cols, t->in[0]);
        o->fill_log1p = t->op == OP_FILL_MISSING && next != NULL && next->op == OP_LOG1P &&
                        strcmp(t->in[0], next->in[0]) == 0;
        i += o->fill_log1p;
    }
    f->num_dense = f->num_ops;
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        const dpp_transform_t *t = &plan->transforms[i];
        if ((t->op >= OP_FILL_MISSING && t->op <= OP_BOXCOX) || t->at_decode) continue;
        if (t->op == OP_FIRST_X) {
            /* Truncation picks positions and the other ops map values one
             * by one, so first_x commutes with them: the lists are cut
             * while copied, before any op runs, to the smallest x. */
            uint32_t k = (uint32_t)find_name(kjt->keys, kjt->num_keys, t->in[0]);
            if ((int32_t)t->x < f->key_cap[k]) f->key_cap[k] = (int32_t)t->x;
            continue;
        }
        fop_t *o = &f->ops[f->num_ops++];
        o->t = t;
        o->col = (uint32_t)find_name(kjt->keys, kjt->num_keys, t->in[0]);
        f->key_count[o->col]++;
    }
    /* group the sparse ops by key, each key's in plan order */
    uint32_t at = 0;
    for (uint32_t k = 0; k < f->F; k++) {
        f->key_first[k] = at;
        at += f->key_count[k];
        f->key_count[k] = 0;
    }
    for (uint32_t i = f->num_dense; i < f->num_ops; i++) {
        uint32_t k = f->ops[i].col;
        f->key_ops[f->key_first[k] + f->key_count[k]++] = i;
    }
    *out = f;
    return SL_OK;
nomem:
    sl_pipeline_fused_destroy(f);
    return sl_error_set(err, SL_ERR_NOMEM, "transform: out of memory for the fused plan");
}

int32_t sl_pipeline_fused_key_cap(const sl_pipeline_fused_t *f, uint32_t k)
{
    return k < f->F ? f->key_cap[k] : INT32_MAX;
}

/* One id transform over n values in place. */
static void apply_key_op(const dpp_transform_t *t, int64_t *values, uint64_t n)
{
    switch (t->op) {
    case OP_SIGRID_HASH:
        dpp_sigrid_hash(values, n, t->salt, t->table_size);
        break;
    case OP_MODULO:
        dpp_modulo(values, n, t->divisor);
        break;
    case OP_MAP_VOCAB:
        dpp_map_vocab(values, n, t->vocab, t->vocab_default);
        break;
    default:
        break;
    }
}

void sl_pipeline_fused_key(const sl_pipeline_fused_t *f, uint32_t k, int64_t *values, uint64_t n)
{
    if (k >= f->F || n == 0) return;
    for (uint32_t j = 0; j < f->key_count[k]; j++)
        apply_key_op(f->ops[f->key_ops[f->key_first[k] + j]].t, values, n);
}

void sl_pipeline_fused_key_from(const sl_pipeline_fused_t *f, uint32_t k, int64_t *dst,
                                const int64_t *src, uint64_t n)
{
    if (k >= f->F || n == 0) return;
    const dpp_transform_t *t = f->key_count[k] ? f->ops[f->key_ops[f->key_first[k]]].t : NULL;
    if (t == NULL || t->op != OP_SIGRID_HASH) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        sl_pipeline_fused_key(f, k, dst, n);
        return;
    }
    /* the first op reads the stripe and writes the frame: no copy first */
    dpp_sigrid_hash_to(dst, src, n, t->salt, t->table_size);
    for (uint32_t j = 1; j < f->key_count[k]; j++)
        apply_key_op(f->ops[f->key_ops[f->key_first[k] + j]].t, dst, n);
}

void sl_pipeline_fused_dense(const sl_pipeline_fused_t *f, float *data, uint32_t rows)
{
    if (rows == 0) return;
    for (uint32_t i = 0; i < f->num_dense; i++) {
        const fop_t *o = &f->ops[i];
        if (o->fill_log1p)
            dpp_dense_fill_log1p(data, rows, f->D, o->col, o->t->value);
        else
            dpp_dense_apply(o->t, data, rows, f->D, o->col);
    }
}
