/* A DPP job: the JSON job spec (docs/JOBS.md) parsed into plain data, and
 * compiled against a table's schema into a plan that filters and transforms
 * rows. The plan is read-only once built: every transform thread of a
 * worker shares one.
 *
 * Pipeline order in the worker (RecD): read -> filter -> batch -> dedup ->
 * transform -> encode. Transforms run after dedup so that a transform of a
 * feature inside a dedup group runs once per *unique* row of the group (on
 * the group IKJT's unique KJT), not once per sample. */
#ifndef SLUICE_DPP_PIPELINE_JOB_H
#define SLUICE_DPP_PIPELINE_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "sluice/err.h"
#include "sluice/tensor.h"
#include "warehouse/warehouse.h"

/* Every problem of a spec, each as "<json path>: <what is wrong>", e.g.
 * "$.transforms[3].table_size: must be a positive integer". */
typedef struct sl_dpp_problems {
    uint32_t count;
    char **items; /* [count], owned */
} sl_dpp_problems_t;

void sl_dpp_problems_free(sl_dpp_problems_t *p);
/* Append a problem (printf style). Returns false when out of memory. */
bool sl_dpp_problems_add(sl_dpp_problems_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef struct sl_dpp_dedup_group {
    char *name;
    char **features; /* [num_features] */
    uint32_t num_features;
} sl_dpp_dedup_group_t;

/* The job spec as parsed (syntax and types checked; names not yet bound to
 * a schema). Filters and transforms stay as their (owned) JSON; the plan
 * interprets them. */
typedef struct sl_dpp_job {
    char *id;                 /* "job" unless set */
    /* source */
    char *table;              /* table directory */
    char *partitions;         /* partition filter (sl_wh_filter_parse syntax) or NULL */
    char **features;          /* projection; NULL: every feature */
    uint32_t num_features;
    uint32_t stripes_per_split; /* default 1 */
    /* rows */
    json_t *filters;          /* array (possibly empty) */
    json_t *transforms;       /* array (possibly empty) */
    /* batching */
    uint32_t batch_size;      /* default 4096 */
    bool drop_last;           /* default false */
    uint32_t epochs;          /* default 1 */
    sl_dpp_dedup_group_t *dedup_groups;
    uint32_t num_dedup_groups;
    bool shuffle_splits;      /* default false */
    uint32_t shuffle_window;  /* rows; 0 = no row shuffle (default) */
    uint64_t seed;            /* default 0 */
    bool sample_ids;          /* batches carry sample ids; default true */
    bool skip_bad_splits;     /* "on_bad_split": "skip" (default "fail"; under a master) */
    /* Directory that relative map_vocab files resolve against: the spec
     * file's directory (sl_dpp_job_load), else NULL (the current one). */
    char *base_dir;
} sl_dpp_job_t;

/* A job id names log files (the local executor's <dir>/<id>-w<n>.<pid>.log),
 * metrics labels and URL path segments, so it is 1..SL_DPP_JOB_ID_MAX bytes
 * of ASCII letters, digits, '.', '_' and '-', and never contains "..".
 * @return true when id (len bytes, which catches an embedded NUL) is one;
 * else false and why (may be NULL, cap bytes) says what is wrong. */
#define SL_DPP_JOB_ID_MAX 255
bool sl_dpp_job_id_ok(const char *id, size_t len, char *why, size_t cap);

/* Parse and check a spec. Unknown keys, wrong types, out-of-range values,
 * unknown filter or transform names, missing arguments: every problem is
 * listed in *problems (caller frees) and the return is SL_ERR_INVALID with
 * err->msg holding the first one and the count. Caller owns *out, free with
 * sl_dpp_job_destroy. */
sl_err_t sl_dpp_job_parse(const char *text, size_t len, sl_dpp_job_t **out,
                          sl_dpp_problems_t *problems, sl_error_t *err);
sl_err_t sl_dpp_job_from_json(const json_t *spec, sl_dpp_job_t **out,
                              sl_dpp_problems_t *problems, sl_error_t *err);
sl_err_t sl_dpp_job_load(const char *path, sl_dpp_job_t **out, sl_dpp_problems_t *problems,
                         sl_error_t *err);
void sl_dpp_job_destroy(sl_dpp_job_t *job);

/* ==== plan: a job bound to a schema ==== */

typedef struct sl_dpp_plan sl_dpp_plan_t;

/* Bind job to schema: every feature named by the projection, filters,
 * transforms and dedup groups must exist with the right kind (a sparse
 * transform on a dense feature, a cross of features of different kinds, a
 * dedup group of dense features... are problems, listed by JSON path in
 * *problems). Vocabulary files of map_vocab are loaded here. Caller owns
 * *out, free with sl_dpp_plan_destroy. */
sl_err_t sl_dpp_plan_new(const sl_dpp_job_t *job, const sl_wh_schema_t *schema,
                         sl_dpp_plan_t **out, sl_dpp_problems_t *problems, sl_error_t *err);
void sl_dpp_plan_destroy(sl_dpp_plan_t *plan);

/* The same binding and problems as sl_dpp_plan_new, without building a
 * plan: every file the spec names (map_vocab vocabularies) is checked to
 * exist, be a regular file and be within its size cap, but not read. For
 * the master, which accepts a spec only when its workers could bind it. */
sl_err_t sl_dpp_plan_check(const sl_dpp_job_t *job, const sl_wh_schema_t *schema,
                           sl_dpp_problems_t *problems, sl_error_t *err);

/* The features the reader must read (inputs of the job: projection plus
 * everything filters and transforms use), in the order the reader should
 * return them. Borrowed from plan. */
const char *const *sl_dpp_plan_read_features(const sl_dpp_plan_t *plan, uint32_t *count);

/* The id columns (SL_WH_COL_SAMPLE_ID, SL_WH_COL_TIMESTAMP) the filters
 * read: sampling hashes sample ids, timestamp_range reads timestamps. The
 * reader may skip the others. */
uint32_t sl_dpp_plan_filter_columns(const sl_dpp_plan_t *plan);

/* The label column the filters add for sample weights (negative
 * downsampling: 1/rate for kept negatives, 1 otherwise), or NULL when no
 * filter needs one. */
const char *sl_dpp_plan_weight_label(const sl_dpp_plan_t *plan);

/* Run the filters over the rows of one stripe (as read with
 * sl_dpp_plan_read_features, expanded form). selected[0..*count) gets the
 * indices of the rows kept, ascending; weights (when the plan has a weight
 * label) gets each kept row's weight. Both arrays have room for
 * rows->batch.batch_size entries. Deterministic: sampling decisions hash
 * (seed, sample id), so a row gets the same decision whichever worker reads
 * it and however often. */
sl_err_t sl_dpp_plan_filter(const sl_dpp_plan_t *plan, const sl_wh_rows_t *rows, uint32_t *selected,
                            float *weights, uint32_t *count, sl_error_t *err);

/* Apply the transforms, in spec order, to a batch in place: the batch
 * holds the read features (plain KJT; the job's dedup groups as IKJTs),
 * dense and labels; afterwards it holds the job's output features (new
 * ones from cross/ngram/bucketize added, inputs that are not outputs
 * dropped). Transforms of features inside a group run on the group's unique
 * rows. New buffers come from batch->arena. */
sl_err_t sl_dpp_plan_transform(const sl_dpp_plan_t *plan, sl_batch_t *batch, sl_error_t *err);

#endif
