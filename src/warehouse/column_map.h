/* The column mapping: which columns of a user's input (CSV header names,
 * Parquet column paths, the keys of JSON records on Kafka) become which
 * parts of a sluice row. One JSON object, the same for `sluice table import
 * --format csv|parquet --mapping FILE`, a job's Parquet source and
 * `source.kafka.columns` (docs/TABLES.md, "The column mapping"):
 *
 *   {"sample_id": "id", "session_id": "sid", "timestamp": "ts",
 *    "labels": ["click", "like"],
 *    "dense": ["age", "price"],
 *    "sparse": ["item_ids", {"column": "country", "name": "country_id",
 *                            "hash": {"seed": 7}}],
 *    "weighted": [{"column": "tags"},
 *                 {"name": "cats", "ids": "cat_ids", "weights": "cat_w"}],
 *    "infer": true}
 *
 * Two steps. sl_wh_colmap_parse checks the object alone (keys, types, JSON
 * paths in every message). sl_wh_colmap_resolve matches it against an
 * input's columns (name + sl_wh_coltype_t) and yields the table schema
 * plus, per schema slot, the input column(s) and the conversion: what a
 * reader uses. Every problem of either step is reported, not only the
 * first.
 *
 * String columns become ids only through a declared hash (XXH3-64 of the
 * UTF-8 bytes with the seed, masked to [0, 2^63)): never silently. A mapped
 * string column without one is a problem naming it; an unmapped string
 * column is ignored and listed (sl_wh_colmap_resolved_t.ignored).
 *
 * This file is pure: no I/O, no threads; a resolved mapping is read-only
 * and may be shared by threads. */
#ifndef SLUICE_WH_COLUMN_MAP_H
#define SLUICE_WH_COLUMN_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/import.h"
#include "warehouse/warehouse.h"

/* The type of an input column, as a reader sees it. */
typedef enum sl_wh_coltype {
    SL_WH_COLTYPE_ANY = 0, /* not known before the values (JSON records): checked per value */
    SL_WH_COLTYPE_INT = 1,
    SL_WH_COLTYPE_FLOAT = 2,
    SL_WH_COLTYPE_BOOL = 3,
    SL_WH_COLTYPE_STRING = 4, /* string or binary */
    SL_WH_COLTYPE_LIST_INT = 5,
    SL_WH_COLTYPE_LIST_FLOAT = 6,
    SL_WH_COLTYPE_LIST_STRING = 7,
    SL_WH_COLTYPE_LIST_WEIGHTED = 8 /* list<struct{id, weight}> */
} sl_wh_coltype_t;

/* "int", "float", ..., "list<struct{id,weight}>", "any" (static). */
const char *sl_wh_coltype_name(sl_wh_coltype_t t);

/* One input column. */
typedef struct sl_wh_input_column {
    const char *name;
    sl_wh_coltype_t type;
} sl_wh_input_column_t;

/* A problem found in a mapping: "<json path>: <what is wrong>", e.g.
 * "$.sparse[1].hash.seed: must be a non-negative integer". Borrowed for the
 * call. */
typedef void (*sl_wh_colmap_problem_fn)(void *ctx, const char *problem);

/* A parsed, not yet resolved mapping. */
typedef struct sl_wh_colmap sl_wh_colmap_t;

/* Parse json (an object) as a mapping. path: the JSON path of json in
 * messages ("$" for a mapping file, "$.source.kafka.columns" in a job
 * spec; NULL: "$"). Every problem goes to problem (may be NULL); the
 * return is SL_ERR_INVALID with err "column mapping: <problem>; <problem>"
 * (as many as fit, then " (and N more problems)"), or SL_ERR_NOMEM. Caller
 * owns *out, free with sl_wh_colmap_destroy. */
sl_err_t sl_wh_colmap_parse(const json_t *json, const char *path, const sl_allocator_t *a,
                            sl_wh_colmap_problem_fn problem, void *ctx, sl_wh_colmap_t **out,
                            sl_error_t *err);

/* The same from a JSON file (messages name the file). */
sl_err_t sl_wh_colmap_load(const char *file, const sl_allocator_t *a,
                           sl_wh_colmap_problem_fn problem, void *ctx, sl_wh_colmap_t **out,
                           sl_error_t *err);

/* Whether the mapping declares a hash on column (a CSV reader then reads
 * the column as text, digits or not). */
bool sl_wh_colmap_hashes(const sl_wh_colmap_t *m, const char *column);

/* The empty mapping {} (infer everything). Caller owns; NULL when out of memory. */
sl_wh_colmap_t *sl_wh_colmap_new_default(const sl_allocator_t *a);

/* m may be NULL. */
void sl_wh_colmap_destroy(sl_wh_colmap_t *m);

/* Whether the mapping infers unnamed columns ("infer", default true). */
bool sl_wh_colmap_infers(const sl_wh_colmap_t *m);

/* The input columns the mapping names, each once, in mapping order
 * (borrowed from m): for inputs with no column list of their own (JSON
 * records), resolved with type ANY. */
uint32_t sl_wh_colmap_num_named(const sl_wh_colmap_t *m);
const char *sl_wh_colmap_named(const sl_wh_colmap_t *m, uint32_t i);

/* What a schema slot is filled from. */
typedef enum sl_wh_colmap_target {
    SL_WH_MAP_SAMPLE_ID = 1,
    SL_WH_MAP_SESSION_ID = 2,
    SL_WH_MAP_TIMESTAMP = 3,
    SL_WH_MAP_LABEL = 4,   /* index: the label index */
    SL_WH_MAP_DENSE = 5,   /* index: the dense slot */
    SL_WH_MAP_SPARSE = 6,  /* index: the sparse slot (sl_wh_feature_t.slot) */
    SL_WH_MAP_WEIGHTED = 7 /* index: the sparse slot */
} sl_wh_colmap_target_t;

#define SL_WH_COLMAP_NONE UINT32_MAX

/* One slot of the schema and where its values come from. Conversions:
 *  SAMPLE_ID, SESSION_ID, TIMESTAMP  an int column
 *  LABEL, DENSE   int, float or bool -> float32 (a missing value: 0 for a
 *                 label, NaN for a dense feature)
 *  SPARSE         int (a list of one id) or list<int>; with hash, string or
 *                 list<string>, each string hashed (sl_wh_colmap_hash)
 *  WEIGHTED       list<struct{id, weight}> (column), or two parallel lists
 *                 (column: the ids, list<int>; weights_column: list<float>
 *                 or list<int>), the same length per row
 * Ids must be in [0, 2^63). */
typedef struct sl_wh_colmap_slot {
    sl_wh_colmap_target_t target;
    uint32_t index;          /* see sl_wh_colmap_target_t; 0 for the id columns */
    const char *name;        /* the schema's name of the slot */
    uint32_t column;         /* input column index */
    uint32_t weights_column; /* WEIGHTED from two lists: the weights; else SL_WH_COLMAP_NONE */
    sl_wh_coltype_t type;    /* the input column's type (ANY: per value) */
    sl_wh_coltype_t weights_type;
    bool hash; /* strings hashed with seed */
    uint64_t seed;
    const char *path; /* JSON path of the mapping entry ("$.dense[1]"), or "(inferred)" */
} sl_wh_colmap_slot_t;

/* A mapping resolved against an input's columns. Read-only once made. */
typedef struct sl_wh_colmap_resolved {
    sl_wh_schema_t *schema; /* the table schema (owned) */
    uint32_t num_slots;
    /* [num_slots]: the id columns that are mapped, then labels in label
     * order, then features in schema order */
    const sl_wh_colmap_slot_t *slots;
    /* Per id column (SL_WH_MAP_SAMPLE_ID..TIMESTAMP, index target - 1): the
     * input column, or SL_WH_COLMAP_NONE when unmapped (the reader then
     * numbers samples itself and leaves session and timestamp 0). */
    uint32_t id_column[3];
    uint32_t num_columns;                /* input columns */
    const sl_wh_input_column_t *columns; /* [num_columns], copied */
    const uint32_t *column_uses;         /* [num_columns]: slots reading each (0: unread) */
    uint32_t num_ignored;                /* input columns no slot reads, with why */
    const char *const *ignored;          /* [num_ignored] "name (string: no hash declared)" */
    sl_arena_t *arena;                   /* owns everything but schema */
} sl_wh_colmap_resolved_t;

/* Resolve m against columns[num_columns] (names unique). Named columns
 * must exist with a type their role takes (ANY takes every role); with
 * "infer", each unnamed column is added by type: a numeric scalar (int,
 * float, bool) -> dense, list<int> -> sparse, list<struct{id,weight}> ->
 * weighted; when the mapping names no sample id, session id, timestamp or
 * labels, an int column named "sample_id", "session_id", "timestamp" or
 * "ts", and a numeric column named "label", take those roles. Problems go
 * to problem (may be NULL) as in sl_wh_colmap_parse. Caller owns *out,
 * free with sl_wh_colmap_resolved_destroy. */
sl_err_t sl_wh_colmap_resolve(const sl_wh_colmap_t *m, const sl_wh_input_column_t *columns,
                              uint32_t num_columns, const sl_allocator_t *a,
                              sl_wh_colmap_problem_fn problem, void *ctx,
                              sl_wh_colmap_resolved_t **out, sl_error_t *err);

/* Resolve m against the columns it names, each of type ANY: for inputs
 * whose columns are known only from their values (JSON records); nothing
 * is inferred. As sl_wh_colmap_resolve otherwise. */
sl_err_t sl_wh_colmap_resolve_named(const sl_wh_colmap_t *m, const sl_allocator_t *a,
                                    sl_wh_colmap_problem_fn problem, void *ctx,
                                    sl_wh_colmap_resolved_t **out, sl_error_t *err);

/* r may be NULL. */
void sl_wh_colmap_resolved_destroy(sl_wh_colmap_resolved_t *r);

/* The resolved mapping as an explicit mapping object ("infer": false, every
 * slot named; hashes kept): what `--print-mapping` prints, to edit and give
 * back. Caller owns (json_decref); NULL when out of memory. */
json_t *sl_wh_colmap_resolved_to_json(const sl_wh_colmap_resolved_t *r);

/* The id of a string: XXH3-64 of its bytes with seed, masked to [0, 2^63). */
int64_t sl_wh_colmap_hash(const void *bytes, size_t len, uint64_t seed);

/* Fill *row from one JSON object (a Kafka JSON record; a CSV cell's JSON
 * list) by the resolved slots: keys are the input column names, a missing
 * key or null is a missing value, keys no slot reads are ignored. b must be
 * sl_wh_row_buf_new(r->schema); row's arrays are borrowed from b until the
 * next call. *has[i] (i: SL_WH_MAP_SAMPLE_ID..TIMESTAMP minus 1) says
 * whether the object gave that id column. @return SL_ERR_CORRUPT naming
 * the key ("key 'price': expected a number, got a string"), SL_ERR_NOMEM. */
sl_err_t sl_wh_colmap_row_from_json(const sl_wh_colmap_resolved_t *r, sl_wh_row_buf_t *b,
                                    const json_t *obj, sl_wh_row_t *row, bool has[3],
                                    sl_error_t *err);

#endif
