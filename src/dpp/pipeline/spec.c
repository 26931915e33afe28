/* The table of a job spec's keys (spec.h: each key's type, range, default
 * and meaning), which spec_parse.c walks and spec_doc.c prints, and the
 * parsers of the keys that need more than a type: the id, the partition
 * filter, the projection, the dedup groups, the filters and transforms
 * (each op compiled through the op table, ops.c) and a Parquet source's
 * column mapping. $.source.kafka's keys are in spec_kafka.c. Names are not
 * bound to a schema here (plan.c does that). */
#include "dpp/pipeline/spec_parse.h"

#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "dpp/pipeline/ops.h"
#include "sluice/alloc.h"
#include "warehouse/warehouse.h"

/* ---- the keys that need more than a type ---- */

static void check_id(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    (void)job;
    char why[160];
    if (!sl_pipeline_job_id_ok(json_string_value(v), json_string_length(v), why, sizeof why))
        sl_pipeline_problems_add(p->problems, "%s: %s", path, why);
}

static void check_partitions(dpp_parse_t *p, const json_t *v, const char *path,
                             sl_pipeline_job_t *job)
{
    (void)job;
    sl_wh_filter_t *f = NULL;
    sl_error_t e = {0};
    if (sl_wh_filter_parse(json_string_value(v), NULL, &f, &e) != SL_OK)
        sl_pipeline_problems_add(p->problems, "%s: %s", path, e.msg);
    sl_wh_filter_destroy(f);
}

static void parse_features(dpp_parse_t *p, const json_t *v, const char *path,
                           sl_pipeline_job_t *job)
{
    dpp_spec_get_names(p, v, path, &job->features, &job->num_features);
}

static void parse_groups(dpp_parse_t *p, const json_t *groups, const char *where,
                         sl_pipeline_job_t *job)
{
    if (!json_is_object(groups)) {
        sl_pipeline_problems_add(p->problems, "%s: must be an object {\"group\": [features...]}",
                                 where);
        return;
    }
    size_t n = json_object_size(groups);
    if (n == 0) return;
    job->dedup_groups = sl_calloc(NULL, n, sizeof(sl_pipeline_dedup_group_t));
    if (job->dedup_groups == NULL) {
        p->nomem = true;
        return;
    }
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)groups, name, v)
    {
        sl_pipeline_dedup_group_t *g = &job->dedup_groups[job->num_dedup_groups++];
        char path[SL_ERROR_MSG_MAX];
        snprintf(path, sizeof path, "%s.%s", where, name);
        if (name[0] == '\0')
            sl_pipeline_problems_add(p->problems, "%s: a group needs a non-empty name", path);
        if ((g->name = sl_strdup(NULL, name)) == NULL) p->nomem = true;
        dpp_spec_get_names(p, v, path, &g->features, &g->num_features);
        /* A feature in two groups: the later mention is the problem. */
        for (uint32_t f = 0; f < g->num_features; f++) {
            if (g->features[f] == NULL) continue;
            for (uint32_t h = 0; h + 1 < job->num_dedup_groups; h++)
                for (uint32_t k = 0; k < job->dedup_groups[h].num_features; k++)
                    if (job->dedup_groups[h].features[k] != NULL &&
                        strcmp(job->dedup_groups[h].features[k], g->features[f]) == 0) {
                        sl_pipeline_problems_add(
                            p->problems, "%s[%u]: feature '%s' is already in group '%s'", path, f,
                            g->features[f], job->dedup_groups[h].name);
                        break;
                    }
        }
    }
}

/* Filters or transforms: an array of op objects, each compiled by the op
 * table. */
static void parse_ops(dpp_parse_t *p, const json_t *list, const char *path, bool filter,
                      sl_pipeline_op_t **out, uint32_t *count)
{
    if (!json_is_array(list)) {
        sl_pipeline_problems_add(p->problems, "%s: must be an array", path);
        return;
    }
    size_t n = json_array_size(list);
    if (n > DPP_OPS_MAX) {
        sl_pipeline_problems_add(p->problems, "%s: %zu %s, more than the %u a job may have", path,
                                 n, filter ? "filters" : "transforms", DPP_OPS_MAX);
        return;
    }
    if (n == 0) return;
    if ((*out = sl_calloc(NULL, n, sizeof **out)) == NULL) {
        p->nomem = true;
        return;
    }
    *count = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        char at[64];
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        if (!sl_pipeline_op_compile(json_array_get(list, i), filter, at, &(*out)[i], p->problems))
            p->nomem = true;
    }
}

static void parse_filters(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    parse_ops(p, v, path, true, &job->filters, &job->num_filters);
}

static void parse_transforms(dpp_parse_t *p, const json_t *v, const char *path,
                             sl_pipeline_job_t *job)
{
    parse_ops(p, v, path, false, &job->transforms, &job->num_transforms);
}

/* A Parquet source's column mapping: checked alone here (problems under
 * $.source.columns); resolved against the files' columns by the worker
 * and the master, which read the footers. */
static void parse_pq_columns(dpp_parse_t *p, const json_t *v, const char *path,
                             sl_pipeline_job_t *job)
{
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_colmap_parse(v, path, NULL, dpp_spec_add_problem, p->problems,
                                     &job->parquet_columns, &e);
    size_t n = rc == SL_OK ? json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS) : 0;
    if (n > 0 && (job->parquet_columns_json = sl_alloc(NULL, n + 1)) == NULL) rc = SL_ERR_NOMEM;
    if (job->parquet_columns_json != NULL) {
        json_dumpb(v, job->parquet_columns_json, n, JSON_COMPACT | JSON_SORT_KEYS);
        job->parquet_columns_json[n] = '\0';
    }
    if (rc == SL_ERR_NOMEM) p->nomem = true;
}

/* ---- the table of keys ---- */

static const dpp_field_t source_fields[] = {
    {.name = "table",
     .type = FIELD_STRING,
     AT(table),
     .def_doc = "**required** unless `kafka` or `parquet`",
     .doc = "table directory, or `s3://BUCKET/PREFIX` for a table in an S3-compatible store "
            "(docs/STORAGE.md)"},
    OBJECT_KEY("kafka", dpp_spec_kafka, false, "none",
               "read Kafka topics instead of a table (docs/KAFKA.md): give one of `table`, "
               "`kafka`, `parquet`"),
    {.name = "parquet",
     .type = FIELD_STRING,
     AT(parquet),
     .type_doc = "path",
     .def_doc = "none",
     .doc = "read a Parquet dataset in place instead of a table (docs/PARQUET.md, \"As a job "
            "source\"): one `.parquet` file, or a directory of them, Hive partition folders "
            "`key=value/` included, or the same at `s3://BUCKET/PREFIX` (docs/STORAGE.md); a "
            "split is a row group"},
    {.name = "columns",
     .type = FIELD_CUSTOM,
     .parse = parse_pq_columns,
     .type_doc = "object, a column mapping (docs/TABLES.md, \"The column mapping\")",
     .def_doc = "every column inferred",
     .doc = "Parquet: which columns are the sample id, session id, timestamp, labels, dense, "
            "sparse and weighted features; the job's schema is the mapping resolved against "
            "the files"},
    UINT_KEY("split_rows", split_rows, 1, 1u << 30, 65536,
             "Parquet: consecutive row groups of a file merge into one split while it holds at "
             "most this many rows (a larger row group is a split alone)"),
    {.name = "partitions",
     .type = FIELD_STRING,
     AT(partitions),
     .parse = check_partitions,
     .type_doc = "string",
     .def_doc = "all",
     .doc = "partition filter, e.g. `\"ds>=2026-01-01,region=eu\"` (checked at parse); of a "
            "Parquet dataset, on its Hive keys"},
    CUSTOM_KEY("features", parse_features, "non-empty array of distinct names", "every feature",
               "the projection: the input features the batches carry"),
    UINT_KEY("stripes_per_split", stripes_per_split, 1, 1u << 20, 1,
             "stripes per split (the unit a worker leases)"),
};
static const dpp_object_t source = {"$.source", source_fields, COUNT(source_fields)};

static const dpp_field_t shuffle_fields[] = {
    BOOL_KEY("splits", shuffle_splits, false, "shuffle the split order of each epoch with `seed`"),
    /* rows held for shuffling: bounds memory */
    UINT_KEY("window", shuffle_window, 0, 1u << 26, 0, "rows held for a shuffle window (0: none)"),
    UINT_KEY("seed", seed, 0, INT64_MAX, 0, "seed of both shuffles"),
};
static const dpp_object_t shuffle = {"$.batch.shuffle", shuffle_fields, COUNT(shuffle_fields)};

static const dpp_field_t batch_fields[] = {
    UINT_KEY("size", batch_size, 1, 1u << 20, 4096, "samples per batch"),
    BOOL_KEY("drop_last", drop_last, false, "drop the last, short batch of an epoch"),
    UINT_KEY("epochs", epochs, 1, 1000000, 1, "passes over the data"),
    BOOL_KEY("equal_batches_per_rank", equal_batches_per_rank, false,
             "under a master, every trainer rank hands out the same number of batches in each "
             "epoch, the lowest number any rank committed (what DDP needs so that no rank waits "
             "in an all-reduce at an epoch's end; torch `DistributedSampler(drop_last=True)`); "
             "a rank's batches above it are dropped, not trained that epoch, and counted "
             "(`dropped_batches`, `dropped_samples` in `GET /jobs/{id}`; docs/DESIGN.md, "
             "\"Equal batches per rank\"). Static or dynamic sharding; one rank has nothing "
             "to even out; refused for a Kafka source (its epoch does not end)"),
    CUSTOM_KEY(
        "dedup_groups", parse_groups, "object `{\"group\": [features]}`", "none",
        "features stored once per unique row (IKJT); sparse or weighted features, each in one "
        "group at most"),
    OBJECT_KEY("shuffle", shuffle, false, NULL, "shuffling"),
    BOOL_KEY("sample_ids", sample_ids, true, "batches carry sample ids"),
};
static const dpp_object_t batch = {"$.batch", batch_fields, COUNT(batch_fields)};

static const char *const on_bad_split[] = {"fail", "skip", NULL};
static const char *const orders[] = {"dynamic", "deterministic", NULL};

static const dpp_field_t root_fields[] = {
    {.name = "id",
     .type = FIELD_STRING,
     .def.s = "job",
     AT(id),
     .parse = check_id,
     .type_doc = "1 to 255 letters, digits, `.`, `_`, `-`; never `..`",
     .doc = "name of the job (messages, metrics, log file names, URLs)"},
    OBJECT_KEY("source", source, true, NULL, "what to read (below)"),
    {.name = "on_bad_split",
     .type = FIELD_ENUM,
     .choices = on_bad_split,
     .def.u = 0,
     AT(skip_bad_splits),
     .doc = "under a master, a split that workers cannot read (`--max-split-failures` times in "
            "an epoch: a corrupt stripe, an I/O error, a transform failing on its rows): "
            "`\"fail\"` fails the job with the reason; `\"skip\"` skips the split's rows not "
            "delivered yet, counts them (`skipped_splits`, `skipped_rows` in `GET /jobs/{id}`) "
            "and goes on, every other row still delivered exactly once (docs/ADMIN.md, "
            "\"Failed jobs\")"},
    CUSTOM_KEY("filters", parse_filters, "array of filter objects (at most 4096)", "`[]`",
               "row filters, ANDed, in order"),
    CUSTOM_KEY("transforms", parse_transforms, "array of transform objects (at most 4096)", "`[]`",
               "feature transforms, in order"),
    OBJECT_KEY("batch", batch, false, "see below", "batching"),
    BOOL_KEY("share", share, true,
             "under a master, read and transform each split once for every job of the same plan "
             "fingerprint that shares (docs/JOBS.md, \"Shared passes\"); `false`: this job is "
             "always read on its own"),
    BOOL_KEY("autocache", autocache, true,
             "under a master with `--cache-dir`, let the autocache measure this job's first "
             "epoch and, when reading a cached output wins, serve later epochs (and later jobs "
             "of the same prefix fingerprint) from the cache (docs/JOBS.md, \"Autocache\"); "
             "`false`: always computed"),
    {.name = "order",
     .type = FIELD_ENUM,
     .choices = orders,
     .def.u = SL_PIPELINE_ORDER_DYNAMIC,
     AT(order),
     .doc = "under a master, the global order of the batches: `\"dynamic\"`, whichever worker "
            "and rank meet first (fastest); `\"deterministic\"`, a function of `seed` and the "
            "epoch only, rank r of R taking every R-th batch of it, the same after a resume "
            "with another world size (docs/JOBS.md, \"Deterministic order\"). Deterministic "
            "needs a table or Parquet source, `batch.shuffle.window` 0 or `batch.size`, and "
            "is never shared (`share` true is refused, absent means false); `on_bad_split` must be "
            "`\"fail\"` and `batch.equal_batches_per_rank` false"},
};
const dpp_object_t dpp_spec_root = {"$", root_fields, COUNT(root_fields)};
