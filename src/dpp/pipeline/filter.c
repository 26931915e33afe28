/* Row filters over one stripe (sl_pipeline_plan_filter): the selection starts as
 * every row and each filter compacts it in place, so a filter only looks at
 * rows that earlier filters kept. Sampling decisions hash the sample id, so
 * they do not depend on which worker reads a row, on stripe boundaries or on
 * how often the row is read. */
#include "dpp/pipeline/plan_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t dpp_hash_id(int64_t id, uint64_t salt)
{
    /* The 8 little-endian bytes of id (hosts are little-endian: checked by
     * the warehouse at compile time). */
    return XXH3_64bits_withSeed(&id, sizeof id, salt);
}

static int find_col(const char *const *names, uint32_t n, const char *name)
{
    if (names == NULL) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (names[i] != NULL && strcmp(names[i], name) == 0) return (int)i;
    return -1;
}

static const char *where(const sl_wh_rows_t *rows)
{
    return rows->file != NULL ? rows->file : "rows";
}

/* The presence of a feature in row r: one of the three places it can be. */
typedef struct presence {
    const float *dense; /* column start; stride cols */
    uint32_t cols;
    const int32_t *lengths; /* [rows] of the key (plain) or [U] (group) */
    const int32_t *inverse; /* group: row -> unique row, else NULL */
} presence_t;

static bool present(const presence_t *p, uint32_t r)
{
    if (p->dense != NULL) return !isnan(p->dense[(size_t)r * p->cols]);
    return p->lengths[p->inverse != NULL ? (uint32_t)p->inverse[r] : r] > 0;
}

static sl_err_t find_presence(const sl_wh_rows_t *rows, const char *name, presence_t *p,
                              sl_error_t *err)
{
    const sl_batch_t *b = &rows->batch;
    memset(p, 0, sizeof *p);
    int c = find_col(b->dense.names, b->dense.cols, name);
    if (c >= 0) {
        p->dense = b->dense.data + c;
        p->cols = b->dense.cols;
        return SL_OK;
    }
    c = sl_kjt_find_key(&b->sparse, name);
    if (c >= 0) {
        p->lengths = b->sparse.lengths + (size_t)c * b->sparse.stride;
        return SL_OK;
    }
    for (uint32_t g = 0; g < b->num_groups; g++) {
        c = sl_kjt_find_key(&b->groups[g].unique, name);
        if (c >= 0) {
            p->lengths = b->groups[g].unique.lengths + (size_t)c * b->groups[g].unique.stride;
            p->inverse = b->groups[g].inverse;
            return SL_OK;
        }
    }
    return sl_error_set(err, SL_ERR_INVALID, "%s stripe %u: filter feature '%s' was not read",
                        where(rows), rows->stripe, name);
}

sl_err_t sl_pipeline_plan_filter(const sl_pipeline_plan_t *plan, const sl_wh_rows_t *rows,
                                 uint32_t *selected, float *weights, uint32_t *count,
                                 sl_error_t *err)
{
    const sl_batch_t *b = &rows->batch;
    uint32_t n = b->batch_size;
    bool weigh = plan->weight_label != NULL && weights != NULL;
    for (uint32_t i = 0; i < n; i++)
        selected[i] = i;
    if (weigh)
        for (uint32_t i = 0; i < n; i++)
            weights[i] = 1.0f;
    *count = n;
    for (uint32_t fi = 0; fi < plan->num_filters; fi++) {
        const dpp_filter_t *f = &plan->filters[fi];
        const float *label = NULL;
        uint32_t T = b->labels.cols;
        if (f->op == OP_LABEL_EQUALS || f->op == OP_LABEL_RANGE ||
            f->op == OP_NEGATIVE_DOWNSAMPLE) {
            int c = find_col(b->labels.names, T, f->name);
            if (c < 0 || b->labels.rows != n)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "%s stripe %u: filter %u: label '%s' was not read", where(rows),
                                    rows->stripe, fi, f->name);
            label = b->labels.data + c;
        }
        if ((f->op == OP_SAMPLE || f->op == OP_NEGATIVE_DOWNSAMPLE) && b->sample_ids == NULL &&
            !f->keep_all)
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s stripe %u: filter %u: sampling needs the sample ids",
                                where(rows), rows->stripe, fi);
        if (f->op == OP_TIMESTAMP_RANGE && rows->timestamps == NULL && n > 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s stripe %u: filter %u: timestamp_range needs the timestamps",
                                where(rows), rows->stripe, fi);
        presence_t pres;
        if (f->op == OP_HAS_FEATURE) {
            sl_err_t rc = find_presence(rows, f->name, &pres, err);
            if (rc != SL_OK) return rc;
        }
        uint32_t kept = 0;
        for (uint32_t i = 0; i < *count; i++) {
            uint32_t r = selected[i];
            bool keep = true;
            float w = 1.0f;
            switch (f->op) {
            case OP_LABEL_EQUALS:
                keep = label[(size_t)r * T] == (float)f->value;
                break;
            case OP_LABEL_RANGE: {
                double v = label[(size_t)r * T];
                keep = v >= f->min && v <= f->max;
                break;
            }
            case OP_HAS_FEATURE:
                keep = present(&pres, r);
                break;
            case OP_TIMESTAMP_RANGE:
                keep = rows->timestamps[r] >= f->ts_min && rows->timestamps[r] <= f->ts_max;
                break;
            case OP_SAMPLE:
                keep = f->keep_all || dpp_hash_id(b->sample_ids[r], f->seed) < f->threshold;
                break;
            case OP_NEGATIVE_DOWNSAMPLE:
                if (!(label[(size_t)r * T] > 0)) {
                    keep = f->keep_all || dpp_hash_id(b->sample_ids[r], f->seed) < f->threshold;
                    w = f->weight;
                }
                break;
            default:
                break;
            }
            if (!keep) continue;
            if (weigh) weights[kept] = weights[i] * w;
            selected[kept++] = r;
        }
        *count = kept;
    }
    return SL_OK;
}
