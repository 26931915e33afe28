/* Parsing and checking a job spec (docs/JOBS.md): JSON in, sl_pipeline_job_t out,
 * and every problem listed with its JSON path. Names are not bound to a
 * schema here (plan.c does that); the filter and transform objects are
 * checked against the op table (job_ops.c) and kept as JSON. */
#include "dpp/pipeline/plan_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define BATCH_SIZE_MAX (1u << 20)
#define EPOCHS_MAX 1000000u
#define STRIPES_PER_SPLIT_MAX (1u << 20)
#define SHUFFLE_WINDOW_MAX (1u << 26) /* rows held for shuffling: bounds memory */
#define SPEC_BYTES_MAX (16u << 20)

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = sl_alloc(NULL, n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

static void free_str(char *s)
{
    if (s != NULL) sl_free(NULL, s, strlen(s) + 1);
}

static void free_strs(char **v, uint32_t n)
{
    if (v == NULL) return;
    for (uint32_t i = 0; i < n; i++) free_str(v[i]);
    sl_free(NULL, v, (size_t)n * sizeof(char *));
}

void sl_pipeline_job_destroy(sl_pipeline_job_t *job)
{
    if (job == NULL) return;
    free_str(job->id);
    free_str(job->table);
    free_str(job->partitions);
    free_strs(job->features, job->num_features);
    json_decref(job->filters);
    json_decref(job->transforms);
    for (uint32_t g = 0; g < job->num_dedup_groups; g++) {
        free_str(job->dedup_groups[g].name);
        free_strs(job->dedup_groups[g].features, job->dedup_groups[g].num_features);
    }
    if (job->dedup_groups != NULL)
        sl_free(NULL, job->dedup_groups, job->num_dedup_groups * sizeof(sl_pipeline_dedup_group_t));
    free_str(job->base_dir);
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

/* Parsing state: the problems and whether memory ran out. */
typedef struct parse {
    sl_pipeline_problems_t *problems;
    bool nomem;
} parse_t;

__attribute__((format(printf, 2, 3))) static void problem(parse_t *p, const char *fmt, ...)
{
    char buf[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!sl_pipeline_problems_add(p->problems, "%s", buf)) p->nomem = true;
}

/* Report keys of obj that are not in allowed (NULL-terminated). */
static void check_keys(parse_t *p, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool known = false;
        for (const char *const *a = allowed; *a != NULL; a++) known |= strcmp(*a, key) == 0;
        if (!known) problem(p, "%s.%s: unknown key", path, key);
    }
}

/* An optional string member; NULL when absent or bad (a problem then). */
static const char *get_string(parse_t *p, const json_t *obj, const char *key, const char *path)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL) return NULL;
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        problem(p, "%s.%s: must be a non-empty string", path, key);
        return NULL;
    }
    return json_string_value(v);
}

static void get_uint(parse_t *p, const json_t *obj, const char *key, const char *path,
                     uint64_t lo, uint64_t hi, uint64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL) return;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < lo || (uint64_t)json_integer_value(v) > hi) {
        problem(p, "%s.%s: must be an integer in [%" PRIu64 ", %" PRIu64 "]", path, key, lo, hi);
        return;
    }
    *out = (uint64_t)json_integer_value(v);
}

static void get_bool(parse_t *p, const json_t *obj, const char *key, const char *path, bool *out)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL) return;
    if (!json_is_boolean(v)) {
        problem(p, "%s.%s: must be true or false", path, key);
        return;
    }
    *out = json_is_true(v);
}

/* A non-empty array of distinct non-empty strings, copied into *out. */
static void get_names(parse_t *p, const json_t *v, const char *path, char ***out, uint32_t *n)
{
    if (!json_is_array(v) || json_array_size(v) == 0) {
        problem(p, "%s: must be a non-empty array of names", path);
        return;
    }
    size_t count = json_array_size(v);
    if (count > UINT32_MAX / 2) {
        problem(p, "%s: too many names", path);
        return;
    }
    char **names = sl_calloc(NULL, count, sizeof(char *));
    if (names == NULL) {
        p->nomem = true;
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_string(e) || json_string_length(e) == 0 ||
            strlen(json_string_value(e)) != json_string_length(e)) {
            problem(p, "%s[%zu]: must be a non-empty string", path, i);
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (json_is_string(json_array_get(v, j)) &&
                strcmp(json_string_value(json_array_get(v, j)), json_string_value(e)) == 0) {
                problem(p, "%s[%zu]: '%s' is listed twice", path, i, json_string_value(e));
                break;
            }
        if ((names[i] = dup_str(json_string_value(e))) == NULL) p->nomem = true;
    }
    *out = names;
    *n = (uint32_t)count;
}

static void parse_source(parse_t *p, const json_t *src, sl_pipeline_job_t *job)
{
    static const char *const keys[] = {"table", "partitions", "features", "stripes_per_split",
                                       NULL};
    if (src == NULL) {
        problem(p, "$.source: missing (required)");
        return;
    }
    if (!json_is_object(src)) {
        problem(p, "$.source: must be an object");
        return;
    }
    check_keys(p, src, "$.source", keys);
    const char *table = get_string(p, src, "table", "$.source");
    if (table == NULL && json_object_get(src, "table") == NULL)
        problem(p, "$.source.table: missing (required)");
    if (table != NULL && (job->table = dup_str(table)) == NULL) p->nomem = true;
    const char *parts = get_string(p, src, "partitions", "$.source");
    if (parts != NULL) {
        sl_wh_filter_t *f = NULL;
        sl_error_t e = {0};
        if (sl_wh_filter_parse(parts, NULL, &f, &e) != SL_OK)
            problem(p, "$.source.partitions: %s", e.msg);
        sl_wh_filter_destroy(f);
        if ((job->partitions = dup_str(parts)) == NULL) p->nomem = true;
    }
    const json_t *features = json_object_get(src, "features");
    if (features != NULL)
        get_names(p, features, "$.source.features", &job->features, &job->num_features);
    uint64_t sps = 1;
    get_uint(p, src, "stripes_per_split", "$.source", 1, STRIPES_PER_SPLIT_MAX, &sps);
    job->stripes_per_split = (uint32_t)sps;
}

static void parse_groups(parse_t *p, const json_t *groups, sl_pipeline_job_t *job)
{
    if (!json_is_object(groups)) {
        problem(p, "$.batch.dedup_groups: must be an object {\"group\": [features...]}");
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
        snprintf(path, sizeof path, "$.batch.dedup_groups.%s", name);
        if (name[0] == '\0') problem(p, "%s: a group needs a non-empty name", path);
        if ((g->name = dup_str(name)) == NULL) p->nomem = true;
        get_names(p, v, path, &g->features, &g->num_features);
        /* A feature in two groups: the later mention is the problem. */
        for (uint32_t f = 0; f < g->num_features; f++) {
            if (g->features[f] == NULL) continue;
            for (uint32_t h = 0; h + 1 < job->num_dedup_groups; h++)
                for (uint32_t k = 0; k < job->dedup_groups[h].num_features; k++)
                    if (job->dedup_groups[h].features[k] != NULL &&
                        strcmp(job->dedup_groups[h].features[k], g->features[f]) == 0) {
                        problem(p, "%s[%u]: feature '%s' is already in group '%s'", path, f,
                                g->features[f], job->dedup_groups[h].name);
                        break;
                    }
        }
    }
}

static void parse_batch(parse_t *p, const json_t *batch, sl_pipeline_job_t *job)
{
    static const char *const keys[] = {"size",        "drop_last", "epochs", "dedup_groups",
                                       "shuffle", "sample_ids", NULL};
    static const char *const shuffle_keys[] = {"splits", "window", "seed", NULL};
    if (batch == NULL) return;
    if (!json_is_object(batch)) {
        problem(p, "$.batch: must be an object");
        return;
    }
    check_keys(p, batch, "$.batch", keys);
    uint64_t size = job->batch_size, epochs = job->epochs;
    get_uint(p, batch, "size", "$.batch", 1, BATCH_SIZE_MAX, &size);
    get_uint(p, batch, "epochs", "$.batch", 1, EPOCHS_MAX, &epochs);
    job->batch_size = (uint32_t)size;
    job->epochs = (uint32_t)epochs;
    get_bool(p, batch, "drop_last", "$.batch", &job->drop_last);
    get_bool(p, batch, "sample_ids", "$.batch", &job->sample_ids);
    const json_t *groups = json_object_get(batch, "dedup_groups");
    if (groups != NULL) parse_groups(p, groups, job);
    const json_t *shuffle = json_object_get(batch, "shuffle");
    if (shuffle == NULL) return;
    if (!json_is_object(shuffle)) {
        problem(p, "$.batch.shuffle: must be an object");
        return;
    }
    check_keys(p, shuffle, "$.batch.shuffle", shuffle_keys);
    get_bool(p, shuffle, "splits", "$.batch.shuffle", &job->shuffle_splits);
    uint64_t window = 0;
    get_uint(p, shuffle, "window", "$.batch.shuffle", 0, SHUFFLE_WINDOW_MAX, &window);
    job->shuffle_window = (uint32_t)window;
    get_uint(p, shuffle, "seed", "$.batch.shuffle", 0, INT64_MAX, &job->seed);
}

/* Filters or transforms: an array of op objects, each checked by the table. */
static json_t *parse_ops(parse_t *p, const json_t *spec, const char *key, bool filter)
{
    const json_t *list = json_object_get(spec, key);
    if (list == NULL) return json_array();
    if (!json_is_array(list)) {
        problem(p, "$.%s: must be an array", key);
        return json_array();
    }
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v)
    {
        char path[64];
        snprintf(path, sizeof path, "$.%s[%zu]", key, i);
        if (!dpp_check_op(v, filter, path, p->problems)) p->nomem = true;
    }
    return json_deep_copy(list);
}

sl_err_t sl_pipeline_job_from_json(const json_t *spec, sl_pipeline_job_t **out,
                                   sl_pipeline_problems_t *problems, sl_error_t *err)
{
    static const char *const keys[] = {"id",    "source",       "filters", "transforms",
                                       "batch", "on_bad_split", NULL};
    *out = NULL;
    sl_pipeline_problems_t local = {0};
    parse_t p = {problems != NULL ? problems : &local, false};
    uint32_t before = p.problems->count;
    sl_pipeline_job_t *job = sl_calloc(NULL, 1, sizeof *job);
    if (job == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job spec: out of memory");
    job->stripes_per_split = 1;
    job->batch_size = 4096;
    job->epochs = 1;
    job->sample_ids = true;
    if (!json_is_object(spec)) {
        problem(&p, "$: a job spec must be a JSON object");
    } else {
        check_keys(&p, spec, "$", keys);
        const char *id = get_string(&p, spec, "id", "$");
        char why[160];
        if (id != NULL && !sl_pipeline_job_id_ok(id, strlen(id), why, sizeof why))
            problem(&p, "$.id: %s", why);
        if ((job->id = dup_str(id != NULL ? id : "job")) == NULL) p.nomem = true;
        parse_source(&p, json_object_get(spec, "source"), job);
        job->filters = parse_ops(&p, spec, "filters", true);
        job->transforms = parse_ops(&p, spec, "transforms", false);
        if (job->filters == NULL || job->transforms == NULL) p.nomem = true;
        parse_batch(&p, json_object_get(spec, "batch"), job);
        const char *obs = get_string(&p, spec, "on_bad_split", "$");
        if (obs != NULL && strcmp(obs, "fail") != 0 && strcmp(obs, "skip") != 0)
            problem(&p, "$.on_bad_split: \"fail\" or \"skip\", not \"%.64s\"", obs);
        job->skip_bad_splits = obs != NULL && strcmp(obs, "skip") == 0;
    }
    sl_err_t rc = SL_OK;
    if (p.nomem) {
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
                            "job spec: $: not valid JSON: %s (line %d, column %d)",
                            je.text, je.line, je.column);
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
