/* A job (job.h): its lifetime, its id's rule, its spec read from text or
 * a file, and the ranges its filters keep. The spec's JSON is parsed by
 * walking the table of its keys (spec_parse.c; the table is in spec.c and
 * spec_kafka.c). */
#include "dpp/pipeline/job.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/ops.h"
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
            sl_pipeline_bind_anyway(buf, len, dir[0] ? dir : NULL, NULL, problems);
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
