/* Parsing and checking a job spec (docs/JOBS.md): JSON in, sl_pipeline_job_t out,
 * and every problem listed with its JSON path. The spec's keys are defined
 * once, in the table below (type, range, default, meaning; spec.h), which
 * the parser walks; each filter and transform object is compiled through
 * the op table (ops.c). Names are not bound to a schema here (plan.c does
 * that). */
#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/ops.h"
#include "dpp/pipeline/spec.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "common/mem.h"
#include "common/suggest.h"
#include "common/parse.h"
#include "sluice/alloc.h"
#include "warehouse/warehouse.h"

#define SPEC_BYTES_MAX (16u << 20)

static void free_strs(char **v, uint32_t n)
{
    if (v == NULL) return;
    for (uint32_t i = 0; i < n; i++)
        sl_strfree(NULL, v[i]);
    sl_free(NULL, v, (size_t)n * sizeof(char *));
}

static void free_ops(sl_pipeline_op_t *ops, uint32_t n)
{
    if (ops == NULL) return;
    for (uint32_t i = 0; i < n; i++)
        sl_pipeline_op_clear(&ops[i]);
    sl_free(NULL, ops, (size_t)n * sizeof *ops);
}

void sl_pipeline_job_destroy(sl_pipeline_job_t *job)
{
    if (job == NULL) return;
    sl_strfree(NULL, job->id);
    sl_strfree(NULL, job->table);
    sl_strfree(NULL, job->kafka.brokers);
    free_strs(job->kafka.topics, job->kafka.num_topics);
    sl_wh_schema_destroy(job->kafka.schema);
    sl_wh_colmap_resolved_destroy(job->kafka.columns);
    free_strs(job->kafka.props, 2 * job->kafka.num_props);
    sl_strfree(NULL, job->kafka.dead_letter_topic);
    sl_strfree(NULL, job->parquet);
    sl_wh_colmap_destroy(job->parquet_columns);
    sl_strfree(NULL, job->parquet_columns_json);
    sl_strfree(NULL, job->partitions);
    free_strs(job->features, job->num_features);
    free_ops(job->filters, job->num_filters);
    free_ops(job->transforms, job->num_transforms);
    for (uint32_t g = 0; g < job->num_dedup_groups; g++) {
        sl_strfree(NULL, job->dedup_groups[g].name);
        free_strs(job->dedup_groups[g].features, job->dedup_groups[g].num_features);
    }
    if (job->dedup_groups != NULL)
        sl_free(NULL, job->dedup_groups, job->num_dedup_groups * sizeof(sl_pipeline_dedup_group_t));
    sl_strfree(NULL, job->base_dir);
    sl_free(NULL, job, sizeof *job);
}

bool sl_pipeline_job_id_ok(const char *id, size_t len, char *why, size_t cap)
{
    const char *bad = NULL;
    if (id == NULL || len == 0 || len > SL_PIPELINE_JOB_ID_MAX) {
        bad = "1 to 255 bytes";
    } else if (strnlen(id, len) != len) {
        bad = "a NUL byte";
    } else if (strstr(id, "..") != NULL) {
        bad = "\"..\"";
    } else {
        for (size_t i = 0; i < len && bad == NULL; i++) {
            unsigned char c = (unsigned char)id[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-'))
                bad = c == '/' ? "'/'" : "a character other than letters, digits, '.', '_', '-'";
        }
    }
    if (bad != NULL && why != NULL)
        snprintf(why, cap,
                 "a job id is 1 to %d letters, digits, '.', '_' or '-' without \"..\" (this one "
                 "has %s)",
                 SL_PIPELINE_JOB_ID_MAX,
                 strcmp(bad, "1 to 255 bytes") == 0 ? "the wrong length" : bad);
    return bad == NULL;
}

/* Parsing state: the problems, and whether memory ran out other than for
 * one of them (problems->nomem says that). */
struct dpp_parse {
    sl_pipeline_problems_t *problems;
    bool nomem;
};

static bool is_name(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0 &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/* A non-empty array of distinct non-empty strings, copied into *out. */
static void get_names(dpp_parse_t *p, const json_t *v, const char *path, char ***out, uint32_t *n)
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
    get_names(p, v, path, &job->features, &job->num_features);
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
        get_names(p, v, path, &g->features, &g->num_features);
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

/* ---- source.kafka ---- */

/* "host:port[,host:port...]": each host non-empty, each port 1..65535. */
static void check_brokers(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    (void)job;
    const char *s = json_string_value(v);
    uint32_t k = 0;
    for (const char *b = s;; k++) {
        const char *e = strchr(b, ',');
        size_t n = e ? (size_t)(e - b) : strlen(b);
        const char *colon = memrchr(b, ':', n);
        char port[8] = "";
        uint32_t num = 0;
        size_t plen = colon ? (size_t)(b + n - colon - 1) : 0;
        if (plen > 0 && plen < sizeof port) memcpy(port, colon + 1, plen);
        if (colon == NULL || colon == b || plen == 0 || plen >= sizeof port ||
            sl_parse_u32(port, 1, 65535, &num, "port", NULL) != SL_OK)
            sl_pipeline_problems_add(p->problems,
                                     "%s: broker %u '%.*s' is not host:port (port 1..65535)", path,
                                     k + 1, (int)(n > 80 ? 80 : n), b);
        if (!e) break;
        b = e + 1;
    }
}

/* Kafka's own rule for topic names: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
static bool topic_name_ok(const char *t)
{
    size_t n = strlen(t);
    bool ok = n <= 249 && strcmp(t, ".") != 0 && strcmp(t, "..") != 0;
    for (size_t c = 0; c < n && ok; c++)
        ok = (t[c] >= 'a' && t[c] <= 'z') || (t[c] >= 'A' && t[c] <= 'Z') ||
             (t[c] >= '0' && t[c] <= '9') || t[c] == '.' || t[c] == '_' || t[c] == '-';
    return ok;
}

#define TOPIC_RULE                                                                                 \
    "a topic name is 1 to 249 letters, digits, '.', '_' or '-' (and not \".\" or \"..\")"

static void parse_topics(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    get_names(p, v, path, &job->kafka.topics, &job->kafka.num_topics);
    for (uint32_t i = 0; i < job->kafka.num_topics; i++) {
        const char *t = job->kafka.topics[i];
        if (t != NULL && !topic_name_ok(t))
            sl_pipeline_problems_add(p->problems, "%s[%u]: " TOPIC_RULE, path, i);
    }
}

static void check_dead_letter(dpp_parse_t *p, const json_t *v, const char *path,
                              sl_pipeline_job_t *job)
{
    (void)job;
    if (!topic_name_ok(json_string_value(v)))
        sl_pipeline_problems_add(p->problems, "%s: " TOPIC_RULE, path);
}

static void parse_schema(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_schema_from_json(v, NULL, &job->kafka.schema, &e);
    if (rc == SL_ERR_NOMEM)
        p->nomem = true;
    else if (rc != SL_OK)
        sl_pipeline_problems_add(p->problems, "%s: %s", path, e.msg);
}

static void add_problem(void *ctx, const char *problem)
{
    sl_pipeline_problems_add(ctx, "%s", problem);
}

/* The column mapping of JSON records, resolved against the keys it names
 * (its problems carry their JSON paths under $.source.kafka.columns). */
static void parse_columns(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    sl_wh_colmap_t *m = NULL;
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_colmap_parse(v, path, NULL, add_problem, p->problems, &m, &e);
    if (rc == SL_OK)
        rc = sl_wh_colmap_resolve_named(m, NULL, add_problem, p->problems, &job->kafka.columns, &e);
    if (rc == SL_ERR_NOMEM) p->nomem = true;
    sl_wh_colmap_destroy(m);
}

/* A Parquet source's column mapping: checked alone here (problems under
 * $.source.columns); resolved against the files' columns by the worker
 * and the master, which read the footers. */
static void parse_pq_columns(dpp_parse_t *p, const json_t *v, const char *path,
                             sl_pipeline_job_t *job)
{
    sl_error_t e = {0};
    sl_err_t rc =
        sl_wh_colmap_parse(v, path, NULL, add_problem, p->problems, &job->parquet_columns, &e);
    size_t n = rc == SL_OK ? json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS) : 0;
    if (n > 0 && (job->parquet_columns_json = sl_alloc(NULL, n + 1)) == NULL) rc = SL_ERR_NOMEM;
    if (job->parquet_columns_json != NULL) {
        json_dumpb(v, job->parquet_columns_json, n, JSON_COMPACT | JSON_SORT_KEYS);
        job->parquet_columns_json[n] = '\0';
    }
    if (rc == SL_ERR_NOMEM) p->nomem = true;
}

/* start / stop: a word, or {"timestamp_ms": N}. */
static void parse_at(dpp_parse_t *p, const json_t *v, const char *path, bool start, uint8_t *at,
                     int64_t *ms)
{
    const char *words = start ? "\"earliest\", \"latest\" or {\"timestamp_ms\": N}"
                              : "\"end\" or {\"timestamp_ms\": N}";
    if (json_is_string(v)) {
        const char *w = json_string_value(v);
        if (start && strcmp(w, "earliest") == 0)
            *at = SL_PIPELINE_KAFKA_EARLIEST;
        else if (strcmp(w, start ? "latest" : "end") == 0)
            *at = SL_PIPELINE_KAFKA_LATEST;
        else
            sl_pipeline_problems_add(p->problems, "%s: %s, not \"%.64s\"", path, words, w);
        return;
    }
    const json_t *t = json_is_object(v) ? json_object_get(v, "timestamp_ms") : NULL;
    if (t == NULL || json_object_size(v) != 1) {
        sl_pipeline_problems_add(p->problems, "%s: must be %s", path, words);
        return;
    }
    if (!json_is_integer(t) || json_integer_value(t) < 0) {
        sl_pipeline_problems_add(p->problems,
                                 "%s.timestamp_ms: must be an integer >= 0 (milliseconds since "
                                 "the epoch)",
                                 path);
        return;
    }
    *at = SL_PIPELINE_KAFKA_TIMESTAMP;
    *ms = (int64_t)json_integer_value(t);
}

static void parse_start(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    parse_at(p, v, path, true, &job->kafka.start, &job->kafka.start_ms);
}

static void parse_stop(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    parse_at(p, v, path, false, &job->kafka.stop, &job->kafka.stop_ms);
}

/* Properties sluice sets itself: exactly once rests on them (docs/DESIGN.md,
 * "Kafka: offsets are rows"). */
static const char *const kafka_owned[] = {
    "bootstrap.servers",  "metadata.broker.list",     "group.id",
    "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "isolation.level",    "enable.partition.eof",     NULL};

/* librdkafka properties passed through: each checked by librdkafka itself
 * on a scratch configuration, so a misspelt name or a bad value is a
 * problem at submission, not a worker failing later. */
static void parse_props(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    if (!json_is_object(v)) {
        sl_pipeline_problems_add(p->problems, "%s: must be an object {\"name\": \"value\"}", path);
        return;
    }
    size_t n = json_object_size(v);
    if (n == 0) return;
    if (n > 1024) {
        sl_pipeline_problems_add(p->problems, "%s: %zu properties, more than 1024", path, n);
        return;
    }
    if ((job->kafka.props = sl_calloc(NULL, 2 * n, sizeof(char *))) == NULL) {
        p->nomem = true;
        return;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (conf == NULL) {
        p->nomem = true;
        return;
    }
    const char *name;
    const json_t *val;
    json_object_foreach((json_t *)v, name, val)
    {
        uint32_t k = job->kafka.num_props++;
        bool owned = false;
        for (uint32_t o = 0; kafka_owned[o] != NULL && !owned; o++)
            owned = strcmp(kafka_owned[o], name) == 0;
        char errstr[256];
        if (owned)
            sl_pipeline_problems_add(p->problems,
                                     "%s.%s: set by sluice (docs/KAFKA.md); it cannot be given",
                                     path, name);
        else if (!json_is_string(val))
            sl_pipeline_problems_add(p->problems, "%s.%s: must be a string", path, name);
        else if (rd_kafka_conf_set(conf, name, json_string_value(val), errstr, sizeof errstr) !=
                 RD_KAFKA_CONF_OK)
            sl_pipeline_problems_add(p->problems, "%s.%s: %s", path, name, errstr);
        job->kafka.props[2 * k] = sl_strdup(NULL, name);
        job->kafka.props[2 * k + 1] =
            sl_strdup(NULL, json_is_string(val) ? json_string_value(val) : "");
        if (!job->kafka.props[2 * k] || !job->kafka.props[2 * k + 1]) p->nomem = true;
    }
    rd_kafka_conf_destroy(conf);
}

/* ---- the table of keys ---- */

#define AT(member)                                                                                 \
    .offset = offsetof(sl_pipeline_job_t, member), .size = sizeof(((sl_pipeline_job_t *)0)->member)
#define UINT_KEY(name_, member, lo_, hi_, def_, doc_)                                              \
    {                                                                                              \
        .name = name_, .type = FIELD_UINT, .lo = lo_, .hi = hi_, .def.u = def_, AT(member),        \
        .doc = doc_                                                                                \
    }
#define BOOL_KEY(name_, member, def_, doc_)                                                        \
    {                                                                                              \
        .name = name_, .type = FIELD_BOOL, .def.u = def_, AT(member), .doc = doc_                  \
    }
#define CUSTOM_KEY(name_, parse_, type_doc_, def_doc_, doc_)                                       \
    {                                                                                              \
        .name = name_, .type = FIELD_CUSTOM, .parse = parse_, .type_doc = type_doc_,               \
        .def_doc = def_doc_, .doc = doc_                                                           \
    }
#define OBJECT_KEY(name_, object_, required_, def_doc_, doc_)                                      \
    {                                                                                              \
        .name = name_, .type = FIELD_OBJECT, .required = required_, .object = &object_,            \
        .def_doc = def_doc_, .doc = doc_                                                           \
    }
#define COUNT(fields) (uint32_t)(sizeof fields / sizeof fields[0])

static const char *const kafka_formats[] = {"protobuf", "json", NULL};

static const dpp_field_t kafka_fields[] = {
    {.name = "brokers",
     .type = FIELD_STRING,
     .required = true,
     AT(kafka.brokers),
     .parse = check_brokers,
     .type_doc = "`\"host:port[,host:port...]\"`",
     .doc = "bootstrap servers"},
    {.name = "topics",
     .type = FIELD_CUSTOM,
     .required = true,
     .parse = parse_topics,
     .type_doc = "non-empty array of distinct topic names",
     .doc = "topics read, every partition of each"},
    {.name = "format",
     .type = FIELD_ENUM,
     .choices = kafka_formats,
     .def.u = SL_PIPELINE_KAFKA_PROTOBUF,
     AT(kafka.format),
     .doc = "what a record's value is: a `sluice.Sample` with the `sluice-format` header "
            "(`sluice produce`), or a JSON object whose keys `columns` maps (no header needed, "
            "the key ignored)"},
    {.name = "schema",
     .type = FIELD_CUSTOM,
     .parse = parse_schema,
     .type_doc = "object, a table schema (`sluice table create --schema`)",
     .def_doc = "**required** for protobuf records; none for JSON",
     .doc = "the features and labels of the records; a record that does not fit is bad "
            "(counted, skipped). JSON records take theirs from `columns` (then `schema` is "
            "refused)"},
    {.name = "columns",
     .type = FIELD_CUSTOM,
     .parse = parse_columns,
     .type_doc = "object, a column mapping (docs/TABLES.md, \"The column mapping\")",
     .def_doc = "**required** for JSON records",
     .doc = "JSON records: which keys are the sample id, session id, timestamp, labels, "
            "dense, sparse and weighted features (strings only through a declared hash); the "
            "job's schema is the mapping's; keys it does not name are ignored"},
    CUSTOM_KEY("start", parse_start, "`\"earliest\"`, `\"latest\"` or `{\"timestamp_ms\": N}`",
               "`\"earliest\"`",
               "where each partition is read from: its first offset, its high-water mark at "
               "submission, or the first record whose CreateTime is at or after N ms"),
    CUSTOM_KEY("stop", parse_stop, "`\"end\"` or `{\"timestamp_ms\": N}`", "never (a stream)",
               "a bounded replay: up to the high-water marks at submission, or up to the "
               "first record whose CreateTime is at or after N ms; the job then finishes"),
    UINT_KEY("linger_ms", kafka.linger_ms, 0, 60000, 5,
             "a batch is cut after this long since its first record, full or not"),
    UINT_KEY("chunk", kafka.chunk, 1, 1u << 30, 65536,
             "offsets of one partition per split (the unit a worker leases)"),
    CUSTOM_KEY("properties", parse_props, "object of strings", "none",
               "librdkafka consumer properties passed through (checked by librdkafka); the "
               "ones exactly once rests on are refused"),
    {.name = "dead_letter_topic",
     .type = FIELD_STRING,
     AT(kafka.dead_letter_topic),
     .parse = check_dead_letter,
     .type_doc = "topic name (an existing topic, not one of `topics`)",
     .def_doc = "none",
     .doc = "every bad record is produced to it unchanged (key, value, headers) plus headers "
            "`sluice-error`, `sluice-source-topic`, `-partition`, `-offset` (docs/KAFKA.md); "
            "still counted and skipped"},
};
static const dpp_object_t kafka = {"$.source.kafka", kafka_fields, COUNT(kafka_fields)};

static const dpp_field_t source_fields[] = {
    {.name = "table",
     .type = FIELD_STRING,
     AT(table),
     .def_doc = "**required** unless `kafka` or `parquet`",
     .doc = "table directory, or `s3://BUCKET/PREFIX` for a table in an S3-compatible store "
            "(docs/STORAGE.md)"},
    OBJECT_KEY("kafka", kafka, false, "none",
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

sl_err_t sl_pipeline_job_parse(const char *text, size_t len, sl_pipeline_job_t **out,
                               sl_pipeline_problems_t *problems, sl_error_t *err)
{
    *out = NULL;
    json_error_t je;
    json_t *spec = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (spec == NULL) {
        if (problems != NULL &&
            !sl_pipeline_problems_add(problems, "$: not valid JSON: %s (line %d, column %d)",
                                      je.text, je.line, je.column))
            return sl_error_set(err, SL_ERR_NOMEM, "job spec: out of memory");
        return sl_error_set(err, SL_ERR_INVALID,
                            "job spec: $: not valid JSON: %s (line %d, column %d)", je.text,
                            je.line, je.column);
    }
    sl_err_t rc = sl_pipeline_job_from_json(spec, out, problems, err);
    json_decref(spec);
    return rc;
}

sl_err_t sl_pipeline_job_load(const char *path, sl_pipeline_job_t **out,
                              sl_pipeline_problems_t *problems, sl_error_t *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "job spec %s: %s",
                            path, strerror(errno));
    char *buf = sl_alloc(NULL, SPEC_BYTES_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return sl_error_set(err, SL_ERR_NOMEM, "job spec %s: out of memory", path);
    }
    size_t len = fread(buf, 1, SPEC_BYTES_MAX + 1, f);
    bool bad = ferror(f);
    fclose(f);
    sl_err_t rc;
    if (bad) {
        rc = sl_error_set(err, SL_ERR_IO, "job spec %s: read failed", path);
    } else if (len > SPEC_BYTES_MAX) {
        rc = sl_error_set(err, SL_ERR_TOO_LARGE, "job spec %s: larger than %u bytes", path,
                          SPEC_BYTES_MAX);
    } else {
        rc = sl_pipeline_job_parse(buf, len, out, problems, err);
        if (rc == SL_ERR_INVALID && problems != NULL && problems->count > 0) {
            /* the binding problems too, in the same report (lenient.h) */
            char dir[4096] = "";
            const char *slash = strrchr(path, '/');
            if (slash != NULL && (size_t)(slash - path) + 1 < sizeof dir)
                memcpy(dir, path, (size_t)(slash - path) + 1);
            sl_pipeline_bind_anyway(buf, len, dir[0] ? dir : NULL, problems);
            sl_pipeline_problems_error(problems, 0, "job spec", err);
        }
        if (rc != SL_OK) sl_error_prefix(err, "%s: ", path);
    }
    sl_free(NULL, buf, SPEC_BYTES_MAX + 1);
    if (rc == SL_OK) {
        /* Relative vocabulary files resolve against the spec's directory. */
        const char *slash = strrchr(path, '/');
        if (slash != NULL) {
            size_t n = (size_t)(slash - path) + 1;
            char *dir = sl_alloc(NULL, n + 1);
            if (dir == NULL) {
                sl_pipeline_job_destroy(*out);
                *out = NULL;
                return sl_error_set(err, SL_ERR_NOMEM, "job spec %s: out of memory", path);
            }
            memcpy(dir, path, n);
            dir[n] = '\0';
            (*out)->base_dir = dir;
        }
    }
    return rc;
}

uint32_t sl_pipeline_job_ranges(const sl_pipeline_job_t *job, sl_pipeline_range_t *out,
                                uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < job->num_filters; i++) {
        const sl_pipeline_op_t *f = &job->filters[i];
        sl_pipeline_range_t r;
        if (f->op == OP_TIMESTAMP_RANGE)
            r = (sl_pipeline_range_t){NULL, (double)f->ts_min, (double)f->ts_max};
        else if (f->op == OP_LABEL_RANGE)
            r = (sl_pipeline_range_t){f->label, f->min, f->max};
        else
            continue;
        if (n < cap) out[n] = r;
        n++;
    }
    return n;
}
