/* Parsing a job spec's JSON (docs/JOBS.md) into an sl_pipeline_job_t by
 * walking the table of its keys (spec.h; spec.c, spec_kafka.c): every
 * default first, then each key checked for its type and range and stored,
 * or handed to its own parser; then the rules between keys (the kind of
 * source, the deterministic order). Every problem is listed with its JSON
 * path. */
#include "dpp/pipeline/spec_parse.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "common/suggest.h"
#include "sluice/alloc.h"
#include "warehouse/warehouse.h"

static bool is_name(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0 &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/* A non-empty array of distinct non-empty strings, copied into *out. */
void dpp_spec_get_names(dpp_parse_t *p, const json_t *v, const char *path, char ***out, uint32_t *n)
{
    if (!json_is_array(v) || json_array_size(v) == 0) {
        sl_pipeline_problems_add(p->problems, "%s: must be a non-empty array of names", path);
        return;
    }
    size_t count = json_array_size(v);
    if (count > UINT32_MAX / 2) {
        sl_pipeline_problems_add(p->problems, "%s: too many names", path);
        return;
    }
    char **names = sl_calloc(NULL, count, sizeof(char *));
    if (names == NULL) {
        p->nomem = true;
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const json_t *e = json_array_get(v, i);
        if (!is_name(e)) {
            sl_pipeline_problems_add(p->problems, "%s[%zu]: must be a non-empty string", path, i);
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (json_is_string(json_array_get(v, j)) &&
                strcmp(json_string_value(json_array_get(v, j)), json_string_value(e)) == 0) {
                sl_pipeline_problems_add(p->problems, "%s[%zu]: '%s' is listed twice", path, i,
                                         json_string_value(e));
                break;
            }
        if ((names[i] = sl_strdup(NULL, json_string_value(e))) == NULL) p->nomem = true;
    }
    *out = names;
    *n = (uint32_t)count;
}

void dpp_spec_add_problem(void *ctx, const char *problem)
{
    sl_pipeline_problems_add(ctx, "%s", problem);
}

/* ---- walking the table ---- */

static void put_uint(void *at, size_t size, uint64_t v)
{
    switch (size) {
    case 1:
        *(uint8_t *)at = (uint8_t)v;
        break;
    case 4:
        *(uint32_t *)at = (uint32_t)v;
        break;
    default:
        *(uint64_t *)at = v;
        break;
    }
}

/* Every default of object (and the objects inside it), before the spec is
 * read: a key that is absent, or an object that is, keeps them. */
static void apply_defaults(dpp_parse_t *p, const dpp_object_t *object, sl_pipeline_job_t *job)
{
    for (uint32_t i = 0; i < object->count; i++) {
        const dpp_field_t *f = &object->fields[i];
        void *at = (char *)job + f->offset;
        if (f->type == FIELD_OBJECT)
            apply_defaults(p, f->object, job);
        else if (f->type == FIELD_STRING && f->def.s != NULL)
            p->nomem |= (*(char **)at = sl_strdup(NULL, f->def.s)) == NULL;
        else if (f->type == FIELD_UINT || f->type == FIELD_BOOL || f->type == FIELD_ENUM)
            put_uint(at, f->size, f->def.u);
    }
}

static void parse_object(dpp_parse_t *p, const json_t *obj, const dpp_object_t *object,
                         sl_pipeline_job_t *job);

static void parse_field(dpp_parse_t *p, const json_t *v, const dpp_field_t *f, const char *path,
                        sl_pipeline_job_t *job)
{
    void *at = (char *)job + f->offset;
    switch (f->type) {
    case FIELD_STRING:
        if (!is_name(v)) {
            sl_pipeline_problems_add(p->problems, "%s: must be a non-empty string", path);
            return;
        }
        if (f->parse != NULL) f->parse(p, v, path, job);
        sl_strfree(NULL, *(char **)at);
        p->nomem |= (*(char **)at = sl_strdup(NULL, json_string_value(v))) == NULL;
        return;
    case FIELD_UINT:
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (uint64_t)json_integer_value(v) < f->lo || (uint64_t)json_integer_value(v) > f->hi) {
            sl_pipeline_problems_add(p->problems,
                                     "%s: must be an integer in [%" PRIu64 ", %" PRIu64 "]", path,
                                     f->lo, f->hi);
            return;
        }
        put_uint(at, f->size, (uint64_t)json_integer_value(v));
        return;
    case FIELD_BOOL:
        if (!json_is_boolean(v)) {
            sl_pipeline_problems_add(p->problems, "%s: must be true or false", path);
            return;
        }
        put_uint(at, f->size, json_is_true(v));
        return;
    case FIELD_ENUM: {
        if (!is_name(v)) {
            sl_pipeline_problems_add(p->problems, "%s: must be a non-empty string", path);
            return;
        }
        for (uint64_t k = 0; f->choices[k] != NULL; k++)
            if (strcmp(f->choices[k], json_string_value(v)) == 0) {
                put_uint(at, f->size, k);
                return;
            }
        char choices[256] = "";
        for (size_t k = 0, n = 0; f->choices[k] != NULL; k++)
            n += (size_t)snprintf(choices + n, n < sizeof choices ? sizeof choices - n : 0,
                                  "%s\"%s\"",
                                  k == 0                      ? ""
                                  : f->choices[k + 1] == NULL ? " or "
                                                              : ", ",
                                  f->choices[k]);
        sl_pipeline_problems_add(p->problems, "%s: %s, not \"%.64s\"", path, choices,
                                 json_string_value(v));
        return;
    }
    case FIELD_OBJECT:
        if (!json_is_object(v)) {
            sl_pipeline_problems_add(p->problems, "%s: must be an object", path);
            return;
        }
        parse_object(p, v, f->object, job);
        return;
    case FIELD_CUSTOM:
        f->parse(p, v, path, job);
        return;
    }
}

/* Unknown keys first (so they lead the list), then every key of the table. */
static void parse_object(dpp_parse_t *p, const json_t *obj, const dpp_object_t *object,
                         sl_pipeline_job_t *job)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool known = false;
        sl_suggest_t sg;
        sl_suggest_init(&sg, key, strlen(key));
        for (uint32_t i = 0; i < object->count && !known; i++) {
            known = strcmp(object->fields[i].name, key) == 0;
            sl_suggest_offer_str(&sg, object->fields[i].name);
        }
        char hint[160];
        if (!known)
            sl_pipeline_problems_add(p->problems, "%s.%s: unknown key%s", object->path, key,
                                     sl_suggest_hint(&sg, "", hint, sizeof hint));
    }
    for (uint32_t i = 0; i < object->count; i++) {
        const dpp_field_t *f = &object->fields[i];
        char path[128];
        snprintf(path, sizeof path, "%s.%s", object->path, f->name);
        v = json_object_get(obj, f->name);
        if (v != NULL)
            parse_field(p, v, f, path, job);
        else if (f->required)
            sl_pipeline_problems_add(p->problems, "%s: missing (required)", path);
    }
}

/* ---- the rules between keys ---- */

/* A table or Kafka topics, never both; a Kafka job has none of the
 * table's keys. */
static void check_source(dpp_parse_t *p, const json_t *src, sl_pipeline_job_t *job)
{
    if (!json_is_object(src)) return; /* reported by the walk */
    bool table = json_object_get(src, "table") != NULL;
    bool kafka = json_object_get(src, "kafka") != NULL;
    bool parquet = json_object_get(src, "parquet") != NULL;
    job->is_kafka = kafka;
    if ((int)table + (int)kafka + (int)parquet != 1) {
        sl_pipeline_problems_add(p->problems, table || kafka || parquet
                                                  ? "$.source: give one of \"table\", \"kafka\" "
                                                    "and \"parquet\", not more"
                                                  : "$.source.table: missing (required)");
        return;
    }
    if (!parquet) {
        static const char *const pq_only[] = {"columns", "split_rows"};
        for (size_t i = 0; i < sizeof pq_only / sizeof pq_only[0]; i++)
            if (json_object_get(src, pq_only[i]) != NULL)
                sl_pipeline_problems_add(
                    p->problems, "$.source.%s: a Parquet source's key (\"parquet\")", pq_only[i]);
    } else if (json_object_get(src, "stripes_per_split") != NULL) {
        sl_pipeline_problems_add(p->problems, "$.source.stripes_per_split: a table's key; a "
                                              "Parquet source cuts splits by "
                                              "$.source.split_rows");
    }
    if (!kafka) return;
    static const char *const table_only[] = {"partitions", "stripes_per_split"};
    for (size_t i = 0; i < sizeof table_only / sizeof table_only[0]; i++)
        if (json_object_get(src, table_only[i]) != NULL)
            sl_pipeline_problems_add(p->problems,
                                     "$.source.%s: a table's key; a Kafka job (\"kafka\") has "
                                     "none",
                                     table_only[i]);
    sl_pipeline_kafka_t *k = &job->kafka;
    const json_t *kj = json_object_get(src, "kafka");
    bool has_schema = json_is_object(kj) && json_object_get(kj, "schema") != NULL;
    bool has_columns = json_is_object(kj) && json_object_get(kj, "columns") != NULL;
    if (k->format == SL_PIPELINE_KAFKA_JSON) {
        if (has_schema)
            sl_pipeline_problems_add(p->problems,
                                     "$.source.kafka.schema: JSON records take their schema "
                                     "from $.source.kafka.columns; give no schema");
        if (!has_columns)
            sl_pipeline_problems_add(p->problems, "$.source.kafka.columns: missing (required "
                                                  "with \"format\": \"json\")");
        if (k->columns != NULL && k->schema == NULL &&
            (k->schema = sl_wh_schema_clone(k->columns->schema, NULL)) == NULL)
            p->nomem = true;
    } else {
        if (!has_schema)
            sl_pipeline_problems_add(p->problems, "$.source.kafka.schema: missing (required)");
        if (has_columns)
            sl_pipeline_problems_add(p->problems, "$.source.kafka.columns: only for JSON "
                                                  "records (\"format\": \"json\")");
    }
    if (k->start == SL_PIPELINE_KAFKA_NONE) k->start = SL_PIPELINE_KAFKA_EARLIEST;
    if (job->drop_last)
        sl_pipeline_problems_add(p->problems,
                                 "$.batch.drop_last: a Kafka job's batches are cut after "
                                 "source.kafka.linger_ms, short or not: none is dropped");
    if (k->stop == SL_PIPELINE_KAFKA_NONE && job->epochs != 1)
        sl_pipeline_problems_add(p->problems,
                                 "$.batch.epochs: a Kafka stream (no source.kafka.stop) has one "
                                 "epoch");
    for (uint32_t i = 0; k->dead_letter_topic && i < k->num_topics; i++)
        if (k->topics[i] && strcmp(k->topics[i], k->dead_letter_topic) == 0)
            sl_pipeline_problems_add(p->problems,
                                     "$.source.kafka.dead_letter_topic: '%s' is also read "
                                     "($.source.kafka.topics[%u]): its bad records would come "
                                     "back for ever",
                                     k->dead_letter_topic, i);
    if (k->start == SL_PIPELINE_KAFKA_LATEST && k->stop == SL_PIPELINE_KAFKA_LATEST)
        sl_pipeline_problems_add(p->problems, "$.source.kafka.stop: \"end\" with start "
                                              "\"latest\" reads nothing");
    if (k->start == SL_PIPELINE_KAFKA_TIMESTAMP && k->stop == SL_PIPELINE_KAFKA_TIMESTAMP &&
        k->stop_ms <= k->start_ms)
        sl_pipeline_problems_add(p->problems,
                                 "$.source.kafka.stop.timestamp_ms: %" PRId64
                                 " is not after start.timestamp_ms %" PRId64 ": reads nothing",
                                 k->stop_ms, k->start_ms);
}

/* What the deterministic order needs of the rest of the spec (docs/DESIGN.md,
 * "A deterministic order"): numbered splits (no Kafka), batches cut the same
 * way however a split is leased (a row shuffle only within a batch, seeded
 * by its first row), and a job read on its own (a shared pass is cut for
 * the fastest of its jobs). */
static void check_order(dpp_parse_t *p, const json_t *spec, sl_pipeline_job_t *job)
{
    if (job->order != SL_PIPELINE_ORDER_DETERMINISTIC) return;
    if (job->is_kafka)
        sl_pipeline_problems_add(p->problems,
                                 "$.order: \"deterministic\" numbers a fixed list of splits; a "
                                 "Kafka source has none");
    if (job->shuffle_window != 0 && job->shuffle_window != job->batch_size)
        sl_pipeline_problems_add(p->problems,
                                 "$.batch.shuffle.window: %u rows with \"order\": "
                                 "\"deterministic\"; only 0 or batch.size (%u) cut a split's "
                                 "batches the same way however it is leased",
                                 job->shuffle_window, job->batch_size);
    if (job->skip_bad_splits)
        sl_pipeline_problems_add(p->problems,
                                 "$.on_bad_split: \"skip\" with \"order\": \"deterministic\"; "
                                 "a skipped split's batches would leave holes in the numbered "
                                 "sequence");
    if (json_is_true(json_object_get(spec, "share")))
        sl_pipeline_problems_add(p->problems,
                                 "$.share: true with \"order\": \"deterministic\"; a shared "
                                 "pass follows the fastest of its jobs, not one job's order");
    /* the equal-batches hold lets a rank's batches out in the order the
     * master counted their commits, the reorder buffer in g order: the two
     * are not built to compose */
    if (job->equal_batches_per_rank)
        sl_pipeline_problems_add(p->problems,
                                 "$.batch.equal_batches_per_rank: true with \"order\": "
                                 "\"deterministic\"; ranks of that order differ by at most one "
                                 "batch an epoch, and the two holds are not built to compose");
    job->share = false;
}

sl_err_t sl_pipeline_job_from_json(const json_t *spec, sl_pipeline_job_t **out,
                                   sl_pipeline_problems_t *problems, sl_error_t *err)
{
    *out = NULL;
    sl_pipeline_problems_t local = {0};
    dpp_parse_t p = {problems != NULL ? problems : &local, false};
    uint32_t before = p.problems->count;
    sl_pipeline_job_t *job = sl_calloc(NULL, 1, sizeof *job);
    if (job == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job spec: out of memory");
    apply_defaults(&p, &dpp_spec_root, job);
    if (!json_is_object(spec))
        sl_pipeline_problems_add(p.problems, "$: a job spec must be a JSON object");
    else
        parse_object(&p, spec, &dpp_spec_root, job);
    check_source(&p, json_object_get(spec, "source"), job);
    if (json_is_object(spec)) check_order(&p, spec, job);
    sl_err_t rc = SL_OK;
    if (p.nomem || p.problems->nomem) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "job spec: out of memory");
    } else if (p.problems->count > before) {
        rc = sl_pipeline_problems_error(p.problems, before, "job spec", err);
    }
    sl_pipeline_problems_free(&local);
    if (rc != SL_OK) {
        sl_pipeline_job_destroy(job);
        return rc;
    }
    *out = job;
    return SL_OK;
}
