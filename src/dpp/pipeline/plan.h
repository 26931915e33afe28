/* The plan: a job (job.h) compiled against a table's schema into the
 * filters and transforms it runs over rows. The plan is read-only once
 * built: every transform thread of a worker shares one.
 *
 * Pipeline order in the worker (RecD): read -> filter -> batch -> dedup ->
 * transform -> encode. Transforms run after dedup so that a transform of a
 * feature inside a dedup group runs once per *unique* row of the group (on
 * the group IKJT's unique KJT), not once per sample. */
#ifndef SLUICE_DPP_PIPELINE_PLAN_H
#define SLUICE_DPP_PIPELINE_PLAN_H

#include <stdint.h>

#include "dpp/pipeline/job.h"
#include "sluice/err.h"
#include "sluice/tensor.h"
#include "warehouse/warehouse.h"

typedef struct sl_pipeline_plan sl_pipeline_plan_t;

/* Bind job to schema: every feature named by the projection, filters,
 * transforms and dedup groups must exist with the right kind (a sparse
 * transform on a dense feature, a cross of features of different kinds, a
 * dedup group of dense features... are problems, listed by JSON path in
 * *problems). Vocabulary files of map_vocab are loaded here. Caller owns
 * *out, free with sl_pipeline_plan_destroy. */
sl_err_t sl_pipeline_plan_new(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                              sl_pipeline_plan_t **out, sl_pipeline_problems_t *problems,
                              sl_error_t *err);
void sl_pipeline_plan_destroy(sl_pipeline_plan_t *plan);

/* The same binding and problems as sl_pipeline_plan_new, without building a
 * plan: every file the spec names (map_vocab vocabularies) is checked to
 * exist, be a regular file and be within its size cap, but not read. For
 * the master, which accepts a spec only when its workers could bind it. */
sl_err_t sl_pipeline_plan_check(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                sl_pipeline_problems_t *problems, sl_error_t *err);

/* The features the reader must read (inputs of the job: projection plus
 * everything filters and transforms use), in the order the reader should
 * return them. Borrowed from plan. */
const char *const *sl_pipeline_plan_read_features(const sl_pipeline_plan_t *plan, uint32_t *count);

/* The id columns (SL_WH_COL_SAMPLE_ID, SL_WH_COL_TIMESTAMP) the filters
 * read: sampling hashes sample ids, timestamp_range reads timestamps. The
 * reader may skip the others. */
uint32_t sl_pipeline_plan_filter_columns(const sl_pipeline_plan_t *plan);

/* The label column the filters add for sample weights (negative
 * downsampling: 1/rate for kept negatives, 1 otherwise), or NULL when no
 * filter needs one. */
const char *sl_pipeline_plan_weight_label(const sl_pipeline_plan_t *plan);

/* Run the filters over the rows of one stripe (as read with
 * sl_pipeline_plan_read_features, expanded form). selected[0..*count) gets the
 * indices of the rows kept, ascending; weights (when the plan has a weight
 * label) gets each kept row's weight. Both arrays have room for
 * rows->batch.batch_size entries. Deterministic: sampling decisions hash
 * (seed, sample id), so a row gets the same decision whichever worker reads
 * it and however often. */
sl_err_t sl_pipeline_plan_filter(const sl_pipeline_plan_t *plan, const sl_wh_rows_t *rows,
                                 uint32_t *selected, float *weights, uint32_t *count,
                                 sl_error_t *err);

/* Apply the transforms, in spec order, to a batch in place: the batch
 * holds the read features (plain KJT; the job's dedup groups as IKJTs),
 * dense and labels; afterwards it holds the job's output features (new
 * ones from cross/ngram/bucketize added, inputs that are not outputs
 * dropped). Transforms of features inside a group run on the group's unique
 * rows. New buffers come from batch->arena. */
sl_err_t sl_pipeline_plan_transform(const sl_pipeline_plan_t *plan, sl_batch_t *batch,
                                    sl_error_t *err);

/* Hand the per-value transforms of some features to the table reader
 * (transform_decode.c; docs/WORKER.md, "Transforms at decode"): a read
 * feature that no filter names and that only per-value transforms of its
 * own touch (sigrid_hash, modulo, map_vocab, first_x on ids; fill_missing,
 * clamp, log1p, normalize, boxcox on a dense column: no cross, ngram,
 * bucketize, dedup_ids or weight clamp of it) gets a map (sl_wh_value_map_t)
 * running those transforms, first_x aside, in spec order, so that a
 * dictionary-encoded column is transformed once per distinct value of a
 * stripe. From then on sl_pipeline_plan_transform and the fused path skip
 * them: every row the plan sees must come from a table reader opened with
 * *maps (sl_wh_read_opts_t.maps, for sl_pipeline_plan_read_features'
 * features). Not for a job whose batches are deduplicated by groups (the
 * caller's test): hashed ids may collide where the ids did not. Call
 * before the plan is shared. *maps: borrowed from plan, NULL when no
 * feature qualifies (the plan is unchanged). @return SL_ERR_NOMEM. */
sl_err_t sl_pipeline_plan_map_at_decode(sl_pipeline_plan_t *plan, const sl_wh_value_map_t **maps,
                                        sl_error_t *err);

/* The plan's transforms fused into the copy of a batch's rows into its
 * wire frame (transform_fused.c; docs/WORKER.md, "The fused path"): when
 * every transform works on each value alone and in place (sigrid_hash,
 * modulo, map_vocab; fill_missing, clamp, log1p, normalize, boxcox) or
 * keeps the first x ids of each list (first_x: sl_pipeline_fused_key_cap), none
 * creates a feature, and every feature of shape (a batch of the rows the
 * reader hands out: its names and weightedness) is an output, and shape
 * has no dedup groups and no weights, *out gets the op lists; otherwise
 * *out is NULL (SL_OK: the general path, sl_pipeline_plan_transform, does
 * the job). Applying sl_pipeline_fused_key to every key's values and
 * sl_pipeline_fused_dense to the dense rows, in pieces of any size, gives
 * the bits sl_pipeline_plan_transform gives the whole batch. Borrows plan
 * (it must outlive *out). Caller owns *out, free with
 * sl_pipeline_fused_destroy. @return SL_ERR_NOMEM. */
typedef struct sl_pipeline_fused sl_pipeline_fused_t;
sl_err_t sl_pipeline_fused_new(const sl_pipeline_plan_t *plan, const sl_batch_t *shape,
                               sl_pipeline_fused_t **out, sl_error_t *err);
void sl_pipeline_fused_destroy(sl_pipeline_fused_t *f);
/* Can the plan's transforms fuse at all, whatever the rows' shape: every
 * one is an op sl_pipeline_fused_new takes and none creates a feature?
 * false: sl_pipeline_fused_new gives NULL for any shape (a worker asks
 * its reader for no block offsets then). */
bool sl_pipeline_plan_may_fuse(const sl_pipeline_plan_t *plan);
/* Ids kept per list of key k (its first_x transforms' smallest x; the
 * lists are cut to it while copied, before sl_pipeline_fused_key), or
 * INT32_MAX. */
int32_t sl_pipeline_fused_key_cap(const sl_pipeline_fused_t *f, uint32_t k);
/* Key k's value transforms, in spec order, over n of its values in place. */
void sl_pipeline_fused_key(const sl_pipeline_fused_t *f, uint32_t k, int64_t *values, uint64_t n);
/* The same over n values copied from src (the stripe) to dst (the frame;
 * not overlapping): the first transform reads src and writes dst when it
 * can (sigrid_hash), else src is copied first. */
void sl_pipeline_fused_key_from(const sl_pipeline_fused_t *f, uint32_t k, int64_t *dst,
                                const int64_t *src, uint64_t n);
/* The dense transforms over rows rows of the [rows, D] row-major matrix
 * data (D: shape's dense columns), in place. */
void sl_pipeline_fused_dense(const sl_pipeline_fused_t *f, float *data, uint32_t rows);

/* The canonical fingerprint of job's plan over its source (fingerprint.c
 * says exactly what goes in): two jobs get the same value iff (up to a
 * 64-bit hash collision) they would deliver the same samples in the same
 * batches, epoch after epoch, whatever their JSON text looked like: key
 * order, whitespace, defaults given or left out do not matter. schema: the
 * table's (the default projection is its features); splits: the table's
 * cut (sl_wh_table_splits, with each file's footer checksum); both unused
 * for a Kafka job. A map_vocab file is read (hashed, not parsed).
 * @return SL_ERR_NOT_FOUND / SL_ERR_IO for a table or vocabulary that
 * cannot be reached. */
sl_err_t sl_pipeline_fingerprint(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                 const sl_wh_splits_t *splits, uint64_t *out, sl_error_t *err);

/* The autocache (docs/DESIGN.md "Autocache"): why job's batches cannot be
 * cached (a static string), or NULL when its whole pipeline up to the
 * encoder is a deterministic prefix: a table source, no row shuffle (random
 * per epoch, before the transforms), and the spec's "autocache" not false.
 * Filters are deterministic (sampling hashes the seed and the sample id:
 * the same rows every epoch), and so is dedup (a job with dedup groups
 * caches its transformed, deduplicated batches, groups stored as IKJTs). */
const char *sl_pipeline_uncacheable(const sl_pipeline_job_t *job);

/* The key of a cacheable job's cache entries: the fingerprint above over
 * what one split's batches hold (source with footer checksums, projection,
 * filters, transforms, batching), without epochs, split shuffle and seed.
 * *out 0 when the job is not cacheable (sl_pipeline_uncacheable). */
sl_err_t sl_pipeline_prefix_fingerprint(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                        const sl_wh_splits_t *splits, uint64_t *out,
                                        sl_error_t *err);

#endif
