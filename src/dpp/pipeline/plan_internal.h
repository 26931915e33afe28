/* Private to src/dpp/pipeline: the plan (a job's compiled ops bound to a
 * schema: plan.c), vocabularies, and the kernels that filter.c and
 * transform*.c share. The op table is in ops.h. */
#ifndef SLUICE_DPP_PIPELINE_PLAN_INTERNAL_H
#define SLUICE_DPP_PIPELINE_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dpp/pipeline/ops.h"
#include "dpp/pipeline/plan.h"

/* ==== the plan: ops bound to a schema, in the form the hot paths read ==== */

typedef struct dpp_filter {
    dpp_op_t op;
    const char *name; /* label or feature */
    double value, min, max;
    int64_t ts_min, ts_max; /* timestamp_range, inclusive */
    uint64_t seed;
    uint64_t threshold; /* keep when hash < threshold (sampling) */
    bool keep_all;      /* rate == 1 */
    float weight;       /* 1 / rate (negative_downsample) */
} dpp_filter_t;

typedef struct dpp_vocab dpp_vocab_t;

typedef struct dpp_transform {
    dpp_op_t op;
    const char *in[2]; /* input names (in[1] for cross) */
    const char *out;   /* created feature (cross, ngram, bucketize) or NULL */
    uint64_t salt;
    uint64_t table_size;
    int64_t divisor;
    uint32_t x, n;
    float min, max; /* +-inf: no bound */
    float value, mean, std, lambda;
    double *borders;
    uint32_t num_borders;
    dpp_vocab_t *vocab;
    int64_t vocab_default;
    /* done by the table reader as it decodes (transform_decode.c): the
     * general and fused paths skip it */
    bool at_decode;
} dpp_transform_t;

/* One read feature's transforms done at decode, in plan order
 * (transform_decode.c). */
typedef struct dpp_decode_chain {
    const dpp_transform_t **ops;
    uint32_t num_ops;
} dpp_decode_chain_t;

struct sl_pipeline_plan {
    const sl_allocator_t *a;
    char **read; /* features the reader reads */
    uint32_t num_read;
    char **weighted; /* read features of kind weighted */
    uint32_t num_weighted;
    char **keep; /* input features that are outputs */
    uint32_t num_keep;
    uint32_t cap_read; /* room in read and keep: every name the spec mentions */
    char *weight_label;
    dpp_filter_t *filters;
    uint32_t num_filters;
    dpp_transform_t *transforms;
    uint32_t num_transforms;
    char **strings; /* every string the plan owns */
    uint32_t num_strings, cap_strings;
    /* [num_read] each when sl_pipeline_plan_map_at_decode found work for
     * the reader, else NULL */
    sl_wh_value_map_t *maps;
    dpp_decode_chain_t *chains;
    const dpp_transform_t **chain_ops; /* [num_transforms] */
};

/* Free what sl_pipeline_plan_map_at_decode made (plan_destroy). */
void dpp_decode_maps_free(sl_pipeline_plan_t *plan);

/* ==== vocabularies (vocab.c) ==== */

/* Load path: one int64 id per line (decimal; blank lines and surrounding
 * blanks are not allowed), the id on line k (from 0) maps to k. At most
 * max_entries lines and DPP_VOCAB_MAX_BYTES (checked first, with fstat). Problems (path is the JSON
 * path of the transform) go to problems. @return NULL on failure (a problem was added or memory ran
 * out). */
dpp_vocab_t *dpp_vocab_load(const char *file, const sl_allocator_t *a, uint64_t max_entries,
                            const char *path, sl_pipeline_problems_t *problems);
void dpp_vocab_destroy(dpp_vocab_t *v);
uint64_t dpp_vocab_size(const dpp_vocab_t *v);
/* The index of id, or def when the id is not in the vocabulary. */
int64_t dpp_vocab_lookup(const dpp_vocab_t *v, int64_t id, int64_t def);

#define DPP_VOCAB_MAX_ENTRIES (1ull << 26)
#define DPP_VOCAB_MAX_BYTES (512ull << 20) /* checked before reading */

/* Can file be loaded: it opens, is a regular file, is at most
 * DPP_VOCAB_MAX_BYTES? Reads nothing (the master checks a spec this way
 * before accepting it). Problems go to problems. */
bool dpp_vocab_check(const char *file, const char *path, sl_pipeline_problems_t *problems);

/* ==== kernels (transform_sparse.c, transform_dense.c) ==== */

/* One sparse feature of the batch while transforms run: a view of its rows
 * in the plain KJT (loc -1) or in group loc's unique KJT. */
typedef struct dpp_col {
    const char *name;
    int loc;          /* -1: plain KJT; g: groups[g].unique */
    uint32_t stride;  /* B or U */
    int32_t *lengths; /* [stride] */
    int64_t *values;  /* [num_values] */
    float *weights;   /* [num_values] or NULL */
    uint64_t num_values;
    bool weighted; /* a weighted feature (its weights are output) */
    bool output;   /* kept in the output */
    bool moved;    /* lengths or values no longer where the input KJT had them */
} dpp_col_t;

uint64_t dpp_hash_id(int64_t id, uint64_t salt);
void dpp_sigrid_hash(int64_t *values, uint64_t n, uint64_t salt, uint64_t table_size);
/* The same from src into dst (the same array, or two that do not overlap). */
void dpp_sigrid_hash_to(int64_t *dst, const int64_t *src, uint64_t n, uint64_t salt,
                        uint64_t table_size);
void dpp_modulo(int64_t *values, uint64_t n, int64_t divisor);
void dpp_map_vocab(int64_t *values, uint64_t n, const dpp_vocab_t *v, int64_t def);
void dpp_clamp_weights(float *weights, uint64_t n, float min, float max);
/* Keep the first x ids of every row (in place; col->moved set). */
void dpp_first_x(dpp_col_t *col, uint32_t x);
/* Drop repeated ids within every row, keeping first occurrences (in place).
 * scratch: room for 2 * max row length + 64 slots (see the caller). */
sl_err_t dpp_dedup_ids(dpp_col_t *col, sl_arena_t *arena, sl_error_t *err);

/* The new feature of cross: row r pairs row ia[r] of a with row ib[r] of b
 * (ia, ib NULL: row r itself), over rows rows. Buffers from arena. */
sl_err_t dpp_cross(const dpp_col_t *a, const int32_t *ia, const dpp_col_t *b, const int32_t *ib,
                   uint32_t rows, uint64_t salt, uint64_t table_size, sl_arena_t *arena,
                   dpp_col_t *out, sl_error_t *err);
/* The new feature of ngram over col's rows. Buffers from arena. */
sl_err_t dpp_ngram(const dpp_col_t *col, uint32_t n, uint64_t salt, uint64_t table_size,
                   sl_arena_t *arena, dpp_col_t *out, sl_error_t *err);

/* Dense kernels over column c of a row-major [rows, cols] matrix: the
 * in-place ones (fill_missing, clamp, log1p, normalize, boxcox), and
 * bucketize, which fills out (lengths [rows], values from arena). */
void dpp_dense_apply(const dpp_transform_t *t, float *data, uint32_t rows, uint32_t cols,
                     uint32_t c);
/* fill_missing(fill) then log1p on column c in one pass (the same bits). */
void dpp_dense_fill_log1p(float *data, uint32_t rows, uint32_t cols, uint32_t c, float fill);
sl_err_t dpp_bucketize(const dpp_transform_t *t, const float *data, uint32_t rows, uint32_t cols,
                       uint32_t c, sl_arena_t *arena, dpp_col_t *out, sl_error_t *err);

/* Apply the transforms of plan to batch (transform.c). */
sl_err_t dpp_transform_batch(const sl_pipeline_plan_t *plan, sl_batch_t *batch, sl_error_t *err);

#endif
