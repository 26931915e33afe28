/* Fuzz target for job specs (docs/JOBS.md): any input is the bytes of a
 * spec, as `sluice worker --job`, `sluice submit` and POST /jobs receive
 * it. A spec is either rejected with every problem listed by its JSON path
 * (never a crash, an out-of-bounds read or a message-less error), or parsed
 * and then bound to the `sessions` and the `criteo` schemas, each of which
 * again either yields a plan or lists problems. Specs naming a vocabulary file (map_vocab) are
 * parsed but not bound: binding would open whatever file the input names. Seed inputs are in
 * tests/fuzz/corpus/job_spec/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/plan.h"
#include "warehouse/import.h"

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "job_spec_fuzz: %s: %s\n", what, msg);
    abort();
}

/* Every problem must name where it is: a JSON path ("$", "$.x", "$[0]"). */
static void check_problems(const sl_pipeline_problems_t *p, const sl_error_t *err,
                           const char *stage)
{
    if (p->count == 0) fail(stage, "rejected without a problem listed");
    if (err->msg[0] == '\0') fail(stage, "rejected without a message");
    for (uint32_t i = 0; i < p->count; i++)
        if (p->items[i] == NULL || p->items[i][0] != '$') fail(stage, p->items[i]);
}

static sl_wh_schema_t *preset_schema(const char *preset)
{
    sl_wh_gen_spec_t spec;
    sl_wh_schema_t *schema = NULL;
    sl_error_t err = {0};
    if (sl_wh_gen_preset(preset, 1000, 1, &spec, &err) != SL_OK ||
        sl_wh_gen_schema(&spec, NULL, &schema, &err) != SL_OK)
        fail(preset, err.msg);
    return schema;
}

static void bind(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema)
{
    sl_pipeline_problems_t problems = {0};
    sl_error_t err = {0};
    sl_pipeline_plan_t *plan = NULL;
    sl_err_t rc = sl_pipeline_plan_new(job, schema, &plan, &problems, &err);
    if (rc == SL_OK) {
        uint32_t n = 0;
        const char *const *features = sl_pipeline_plan_read_features(plan, &n);
        for (uint32_t i = 0; i < n; i++)
            if (sl_wh_schema_find(schema, features[i]) == NULL)
                fail("plan reads a feature the schema lacks", features[i]);
        sl_pipeline_plan_destroy(plan);
    } else if (rc == SL_ERR_INVALID) {
        check_problems(&problems, &err, "plan");
    }
    sl_pipeline_problems_free(&problems);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_pipeline_problems_t problems = {0};
    sl_error_t err = {0};
    sl_pipeline_job_t *job = NULL;
    sl_err_t rc = sl_pipeline_job_parse((const char *)data, size, &job, &problems, &err);
    static sl_wh_schema_t *sessions, *criteo;
    if (sessions == NULL) sessions = preset_schema("sessions");
    if (criteo == NULL) criteo = preset_schema("criteo");
    if (rc != SL_OK) {
        if (rc == SL_ERR_INVALID) {
            check_problems(&problems, &err, "parse");
            /* the spec less its problems, bound anyway (lenient.h): the
             * binding problems name paths too */
            sl_pipeline_lenient_t *l =
                memmem(data, size, "map_vocab", 9) == NULL
                    ? sl_pipeline_lenient_new((const char *)data, size, &problems)
                    : NULL;
            if (l != NULL) {
                uint32_t before = problems.count;
                sl_pipeline_lenient_bind(l, sessions, &problems);
                sl_pipeline_lenient_bind(l, criteo, &problems);
                for (uint32_t i = before; i < problems.count; i++)
                    if (problems.items[i][0] != '$') fail("lenient", problems.items[i]);
                sl_pipeline_lenient_destroy(l);
            }
        }
        sl_pipeline_problems_free(&problems);
        return 0;
    }
    if (job == NULL) fail("parse", "SL_OK without a job");
    if (job->batch_size == 0 || job->epochs == 0) fail("parse", "accepted a zero size or epochs");
    if (memmem(data, size, "map_vocab", 9) == NULL) {
        bind(job, sessions);
        bind(job, criteo);
    }
    sl_pipeline_problems_free(&problems);
    sl_pipeline_job_destroy(job);
    return 0;
}
