/* Every problem of a spec in one pass. A spec that does not parse is never
 * bound to a schema, so its binding problems (an unknown feature, a dense
 * feature where a sparse one is needed) used to show only once the parse
 * problems were fixed. This parses the spec again without the parts its
 * problems name (a bad filter or transform goes whole; a bad key or list
 * element alone), so that what is left can be bound and its problems
 * reported with the others, under the original spec's paths. A binding
 * problem that a left-out part could explain (a feature a removed
 * transform would have made) is not reported. */
#ifndef SLUICE_DPP_PIPELINE_LENIENT_H
#define SLUICE_DPP_PIPELINE_LENIENT_H

#include <stddef.h>

#include "dpp/pipeline/job.h"
#include "dpp/pipeline/problems.h"
#include "warehouse/warehouse.h"

typedef struct sl_pipeline_lenient sl_pipeline_lenient_t;

/* The spec text less what problems (those of a failed parse of text)
 * name, parsed. @return NULL when nothing can be bound: not a JSON object,
 * its source among the problems, or problems left after pruning (or out of
 * memory). Caller owns; free with sl_pipeline_lenient_destroy. */
sl_pipeline_lenient_t *sl_pipeline_lenient_new(const char *text, size_t len,
                                               const sl_pipeline_problems_t *problems);

/* The pruned spec's job (borrowed until destroy): its source names the
 * table (or the Kafka schema) to bind to. */
const sl_pipeline_job_t *sl_pipeline_lenient_job(const sl_pipeline_lenient_t *l);

/* Bind the pruned job to schema and add its binding problems to out, with
 * the original spec's paths. */
void sl_pipeline_lenient_bind(const sl_pipeline_lenient_t *l, const sl_wh_schema_t *schema,
                              sl_pipeline_problems_t *out);

void sl_pipeline_lenient_destroy(sl_pipeline_lenient_t *l);

/* All of the above for a spec whose parse found problems: prune, open the
 * source's table (or the Parquet dataset's mapping, or the Kafka block's
 * schema) and add the binding problems to problems. A table or dataset at
 * an s3:// URL is opened with the options of its store, store (as
 * sl_wh_table_open_with; NULL: the defaults), as the first look opens it.
 * Relative vocabulary paths resolve against base_dir (NULL: the working
 * directory). Nothing is added when nothing can be bound (lenient_new's
 * NULL, a table that does not open: its problem is the source's, reported
 * when the spec is fixed). */
struct sl_store_opts;
void sl_pipeline_bind_anyway(const char *text, size_t len, const char *base_dir,
                             const struct sl_store_opts *store, sl_pipeline_problems_t *problems);

#endif
