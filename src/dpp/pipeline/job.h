/* A DPP job: the JSON job spec (docs/JOBS.md) parsed into plain data. The
 * plan (plan.h) binds it to a table's schema. The keys of a spec and the
 * arguments of its ops are defined once, in tables (spec.c, ops.c) that
 * parse them, hold their defaults and print their reference
 * (sl_pipeline_spec_markdown). */
#ifndef SLUICE_DPP_PIPELINE_JOB_H
#define SLUICE_DPP_PIPELINE_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dpp/pipeline/problems.h"
#include "sluice/err.h"
#include "sluice/tensor.h"
#include "warehouse/column_map.h"
#include "warehouse/pq_dataset.h"
#include "warehouse/warehouse.h"

typedef struct sl_pipeline_dedup_group {
    char *name;
    char **features; /* [num_features] */
    uint32_t num_features;
} sl_pipeline_dedup_group_t;

/* One filter or transform, compiled from its JSON object by the op table
 * (every argument given or defaulted): private to src/dpp/pipeline (ops.h). */
typedef struct sl_pipeline_op sl_pipeline_op_t;

/* Where a Kafka job starts or stops reading each partition. */
typedef enum sl_pipeline_kafka_at {
    SL_PIPELINE_KAFKA_NONE = 0,     /* stop: never (a stream) */
    SL_PIPELINE_KAFKA_EARLIEST = 1, /* start: each partition's first offset */
    SL_PIPELINE_KAFKA_LATEST = 2,   /* start: records produced after submission; stop: the
                                       high-water marks at submission ("end") */
    SL_PIPELINE_KAFKA_TIMESTAMP = 3 /* the first offset whose CreateTime is >= at_ms */
} sl_pipeline_kafka_at_t;

/* What a Kafka record's value is (source.kafka.format). */
typedef enum sl_pipeline_kafka_format {
    SL_PIPELINE_KAFKA_PROTOBUF = 0, /* a sluice.Sample with the sluice-format header */
    SL_PIPELINE_KAFKA_JSON = 1      /* a JSON object, mapped by source.kafka.columns */
} sl_pipeline_kafka_format_t;

/* The order of a job's batches ("order"; docs/JOBS.md, docs/DESIGN.md "A
 * deterministic order"). */
typedef enum sl_pipeline_order {
    SL_PIPELINE_ORDER_DYNAMIC = 0,      /* whatever worker and client meet first (default) */
    SL_PIPELINE_ORDER_DETERMINISTIC = 1 /* a function of (seed, epoch) only */
} sl_pipeline_order_t;

/* source.kafka (docs/KAFKA.md): the topics read instead of a table. */
typedef struct sl_pipeline_kafka {
    char *brokers; /* bootstrap servers, "host:port[,host:port...]" */
    char **topics; /* [num_topics] distinct names */
    uint32_t num_topics;
    sl_wh_schema_t *schema;    /* what the records' features are (a table schema's JSON form) */
    uint8_t start, stop;       /* sl_pipeline_kafka_at_t */
    int64_t start_ms, stop_ms; /* TIMESTAMP: milliseconds since the epoch */
    uint32_t linger_ms;        /* a batch waits at most this long for more records; default 5 */
    uint32_t chunk;            /* offsets per split (partition chunk); default 65536 */
    char **props;              /* [2 * num_props] librdkafka property name, value, ... */
    uint32_t num_props;
    char *dead_letter_topic; /* bad records are produced to it as they came; NULL: none */
    uint8_t format;          /* sl_pipeline_kafka_format_t */
    /* JSON records: the column mapping resolved against the keys it names;
     * schema is then its schema (a copy). NULL for protobuf records. */
    sl_wh_colmap_resolved_t *columns;
} sl_pipeline_kafka_t;

/* The job spec as parsed (syntax, types and ranges checked, defaults
 * filled in; names not yet bound to a schema). */
typedef struct sl_pipeline_job {
    char *id; /* "job" unless set */
    /* source */
    char *table;   /* table directory; NULL for a Kafka or Parquet job */
    bool is_kafka; /* source.kafka given (then kafka is filled, table NULL) */
    sl_pipeline_kafka_t kafka;
    /* source.parquet (docs/PARQUET.md, "As a job source"): a Parquet file or
     * a directory of them (Hive partition folders); NULL otherwise. Its
     * column mapping (source.columns), parsed but resolved only against
     * the files (NULL: every column inferred), and the rows up to which
     * consecutive row groups of a file merge into one split. */
    char *parquet;
    sl_wh_colmap_t *parquet_columns;
    char *parquet_columns_json; /* its JSON, compact with sorted keys (the fingerprint's) */
    uint32_t split_rows;
    char *partitions; /* partition filter (sl_wh_filter_parse syntax) or NULL: a table's
                         partitions, or a Parquet dataset's Hive keys */
    char **features;  /* projection; NULL: every feature */
    uint32_t num_features;
    uint32_t stripes_per_split; /* default 1 */
    /* rows */
    sl_pipeline_op_t *filters; /* [num_filters], compiled */
    uint32_t num_filters;
    sl_pipeline_op_t *transforms; /* [num_transforms], compiled */
    uint32_t num_transforms;
    /* batching */
    uint32_t batch_size; /* default 4096 */
    bool drop_last;      /* default false */
    uint32_t epochs;     /* default 1 */
    /* "equal_batches_per_rank": under a master with static sharding, every
     * rank hands out the same number of batches per epoch (default false) */
    bool equal_batches_per_rank;
    sl_pipeline_dedup_group_t *dedup_groups;
    uint32_t num_dedup_groups;
    bool shuffle_splits;     /* default false */
    uint32_t shuffle_window; /* rows; 0 = no row shuffle (default) */
    uint64_t seed;           /* default 0 */
    bool sample_ids;         /* batches carry sample ids; default true */
    bool skip_bad_splits;    /* "on_bad_split": "skip" (default "fail"; under a master) */
    bool share;              /* "share": may share passes with jobs of the same plan
                                fingerprint (default true; under a master) */
    bool autocache;          /* "autocache": may read and write a master's cache
                                directory (default true; docs/JOBS.md "Autocache") */
    uint8_t order;           /* sl_pipeline_order_t; default dynamic */
    /* Directory that relative map_vocab files resolve against: the spec
     * file's directory (sl_pipeline_job_load), else NULL (the current one). */
    char *base_dir;
} sl_pipeline_job_t;

/* A job id names log files (the local executor's <dir>/<id>-w<n>.<pid>.log),
 * metrics labels and URL path segments, so it is 1..SL_PIPELINE_JOB_ID_MAX bytes
 * of ASCII letters, digits, '.', '_' and '-', and never contains "..".
 * @return true when id (len bytes, which catches an embedded NUL) is one;
 * else false and why (may be NULL, cap bytes) says what is wrong. */
#define SL_PIPELINE_JOB_ID_MAX 255
bool sl_pipeline_job_id_ok(const char *id, size_t len, char *why, size_t cap);

/* Parse and check a spec. Unknown keys, wrong types, out-of-range values,
 * unknown filter or transform names, missing arguments: every problem is
 * listed in *problems (caller frees) and the return is SL_ERR_INVALID with
 * err->msg holding the first one and the count. Caller owns *out, free with
 * sl_pipeline_job_destroy. */
sl_err_t sl_pipeline_job_parse(const char *text, size_t len, sl_pipeline_job_t **out,
                               sl_pipeline_problems_t *problems, sl_error_t *err);
sl_err_t sl_pipeline_job_from_json(const json_t *spec, sl_pipeline_job_t **out,
                                   sl_pipeline_problems_t *problems, sl_error_t *err);
sl_err_t sl_pipeline_job_load(const char *path, sl_pipeline_job_t **out,
                              sl_pipeline_problems_t *problems, sl_error_t *err);
void sl_pipeline_job_destroy(sl_pipeline_job_t *job);

/* The reference of job specs as Markdown tables, printed from the tables
 * that parse them, for docs/JOBS.md (`sluice help --markdown`). Sections:
 * "job" (top-level keys), "job source", "job batch", "job filters", "job
 * transforms"; sl_pipeline_spec_sections lists them (NULL-terminated).
 * @return false (nothing printed) for an unknown section. */
bool sl_pipeline_spec_markdown(FILE *out, const char *section);

/* A range filter of the job that row statistics can rule out: the rows
 * kept have lo <= value <= hi, value the timestamp (label NULL) or the
 * label named label (borrowed from job). The Parquet planner's own range,
 * so the master and the worker hand the job's ranges to it as they are. */
typedef sl_wh_pqds_range_t sl_pipeline_range_t;

/* The job's timestamp_range and label_range filters (every one must pass:
 * they are ANDed), at most cap into out. @return how many there are. */
uint32_t sl_pipeline_job_ranges(const sl_pipeline_job_t *job, sl_pipeline_range_t *out,
                                uint32_t cap);
const char *const *sl_pipeline_spec_sections(void);

#endif
