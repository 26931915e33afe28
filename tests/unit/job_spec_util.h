/* What job_spec_test.c and job_plan_test.c share: a spec with every field,
 * parse_ok / parse_bad (the exact problems by JSON path). */
#ifndef SLUICE_TESTS_JOB_SPEC_UTIL_H
#define SLUICE_TESTS_JOB_SPEC_UTIL_H

/* Every helper here: a test file uses only some. */
#define JS_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/ops.h"
#include "dpp/pipeline/plan.h"

JS_FN const char *full_spec =
    "{\"id\": \"criteo-train\","
    " \"source\": {\"table\": \"/data/criteo\", \"partitions\": \"ds>=2026-01-01\","
    "             \"features\": [\"I1\", \"C1\"], \"stripes_per_split\": 2},"
    " \"filters\": ["
    "  {\"op\": \"label_equals\", \"label\": \"click\", \"value\": 1},"
    "  {\"op\": \"label_range\", \"label\": \"click\", \"min\": 0, \"max\": 1},"
    "  {\"op\": \"has_feature\", \"feature\": \"C3\"},"
    "  {\"op\": \"timestamp_range\", \"min\": 0, \"max\": 1900000000},"
    "  {\"op\": \"sample\", \"rate\": 0.5, \"seed\": 7},"
    "  {\"op\": \"negative_downsample\", \"label\": \"click\", \"rate\": 0.1, \"seed\": 7,"
    "   \"weight_label\": \"weight\"}],"
    " \"transforms\": ["
    "  {\"op\": \"sigrid_hash\", \"feature\": \"C1\", \"salt\": 0, \"table_size\": 100000},"
    "  {\"op\": \"modulo\", \"feature\": \"C2\", \"divisor\": 1000},"
    "  {\"op\": \"first_x\", \"feature\": \"hist\", \"x\": 20},"
    "  {\"op\": \"dedup_ids\", \"feature\": \"hist\"},"
    "  {\"op\": \"cross\", \"features\": [\"C1\",\"C2\"], \"output\": \"C1xC2\", \"table_size\": "
    "1000000},"
    "  {\"op\": \"ngram\", \"feature\": \"hist\", \"n\": 2, \"output\": \"hist_bigrams\", "
    "\"table_size\": 1000000},"
    "  {\"op\": \"map_vocab\", \"feature\": \"C3\", \"file\": \"vocab.txt\", \"default\": 0},"
    "  {\"op\": \"fill_missing\", \"feature\": \"I1\", \"value\": 0},"
    "  {\"op\": \"clamp\", \"feature\": \"I1\", \"min\": 0, \"max\": 1e6},"
    "  {\"op\": \"log1p\", \"feature\": \"I1\"},"
    "  {\"op\": \"normalize\", \"feature\": \"I2\", \"mean\": 3.1, \"std\": 1.7},"
    "  {\"op\": \"boxcox\", \"feature\": \"I3\", \"lambda\": 0.5},"
    "  {\"op\": \"bucketize\", \"feature\": \"I4\", \"borders\": [0, 1, 10, 100], \"output\": "
    "\"I4_bucket\"},"
    "  {\"op\": \"clamp_weights\", \"feature\": \"wfeat\", \"min\": 0, \"max\": 5}],"
    " \"batch\": {\"size\": 4096, \"drop_last\": false, \"epochs\": 3,"
    "           \"dedup_groups\": {\"user\": [\"user_id\", \"user_hist\"]},"
    "           \"shuffle\": {\"splits\": true, \"window\": 100, \"seed\": 9},"
    "           \"sample_ids\": false}}";

/* Specs in tests are written with single quotes; this turns them into
 * JSON (no spec here holds a real single quote). Static buffer: one spec at
 * a time. */
JS_FN const char *dq(const char *text)
{
    static char buf[32768];
    size_t n = strlen(text);
    cr_assert_lt(n, sizeof buf);
    for (size_t i = 0; i <= n; i++)
        buf[i] = text[i] == '\'' ? '"' : text[i];
    return buf;
}

JS_FN sl_pipeline_job_t *parse_ok(const char *text)
{
    text = dq(text);
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    sl_err_t rc = sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err);
    for (uint32_t i = 0; i < pr.count; i++)
        fprintf(stderr, "problem: %s\n", pr.items[i]);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    cr_assert_eq(pr.count, 0);
    sl_pipeline_problems_free(&pr);
    return job;
}

/* Parse text expecting failure; every expected line must be a problem and
 * the count must be exact. */
JS_FN void parse_bad(const char *text, uint32_t n, const char *const *expected)
{
    text = dq(text);
    sl_pipeline_job_t *job = (sl_pipeline_job_t *)1;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err), SL_ERR_INVALID);
    cr_assert_null(job);
    for (uint32_t i = 0; i < pr.count; i++)
        fprintf(stderr, "  %s\n", pr.items[i]);
    cr_assert_eq(pr.count, n, "expected %u problems, got %u", n, pr.count);
    for (uint32_t i = 0; i < n; i++) {
        bool found = false;
        /* A trailing '*' matches any rest. */
        size_t len = strlen(expected[i]);
        bool prefix = len > 0 && expected[i][len - 1] == '*';
        for (uint32_t j = 0; j < pr.count; j++)
            found |= prefix ? strncmp(pr.items[j], expected[i], len - 1) == 0
                            : strcmp(pr.items[j], expected[i]) == 0;
        cr_assert(found, "missing problem: %s", expected[i]);
    }
    cr_assert(strstr(err.msg, pr.items[0]) != NULL, "err.msg %s", err.msg);
    sl_pipeline_problems_free(&pr);
}

#endif
