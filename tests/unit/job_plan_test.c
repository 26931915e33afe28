/* DPP job specs bound to a table schema (src/dpp/pipeline/plan.c): unknown
 * names, kinds, order of created features, read features, every problem in
 * one pass, vocabulary files checked before reading. */
#include "job_spec_util.h"

/* ---- binding ---- */

static sl_wh_schema_t *schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    const char *dense[] = {"I1", "I2", "I3", "I4"};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, dense[i], SL_WH_DENSE, &err), SL_OK);
    const char *sparse[] = {"C1", "C2", "C3", "hist", "user_id", "user_hist"};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, sparse[i], SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "wfeat", SL_WH_WEIGHTED, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, "click", &err), SL_OK);
    return s;
}

static void bind_bad(const char *text, uint32_t n, const char *const *expected)
{
    sl_pipeline_job_t *job = parse_ok(text);
    sl_wh_schema_t *s = schema();
    sl_pipeline_plan_t *plan = (sl_pipeline_plan_t *)1;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_plan_new(job, s, &plan, &pr, &err), SL_ERR_INVALID);
    cr_assert_null(plan);
    for (uint32_t i = 0; i < pr.count; i++)
        fprintf(stderr, "  %s\n", pr.items[i]);
    cr_assert_eq(pr.count, n, "expected %u problems, got %u", n, pr.count);
    for (uint32_t i = 0; i < n; i++) {
        bool found = false;
        for (uint32_t j = 0; j < pr.count; j++)
            found |= strcmp(pr.items[j], expected[i]) == 0;
        cr_assert(found, "missing problem: %s", expected[i]);
    }
    sl_pipeline_problems_free(&pr);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(s);
}

Test(job_plan, bind_problems)
{
    bind_bad(
        "{'source': {'table': 't', 'features': ['I1', 'C99']},"
        " 'filters': [{'op': 'label_equals', 'label': 'like', 'value': 1},"
        "  {'op': 'has_feature', 'feature': 'nope'},"
        "  {'op': 'negative_downsample', 'label': 'click', 'rate': 0.5,"
        "   'weight_label': 'click'}],"
        " 'transforms': ["
        "  {'op': 'sigrid_hash', 'feature': 'C99', 'table_size': 10},"
        "  {'op': 'sigrid_hash', 'feature': 'I1', 'table_size': 10},"
        "  {'op': 'log1p', 'feature': 'C1'},"
        "  {'op': 'clamp_weights', 'feature': 'C1', 'max': 1},"
        "  {'op': 'cross', 'features': ['C1', 'wfeat'], 'table_size': 10},"
        "  {'op': 'cross', 'features': ['C1', 'I2'], 'table_size': 10},"
        "  {'op': 'sigrid_hash', 'feature': 'later', 'table_size': 10},"
        "  {'op': 'ngram', 'feature': 'hist', 'n': 2, 'table_size': 10,"
        "   'output': 'later'},"
        "  {'op': 'bucketize', 'feature': 'I4', 'borders': [1], 'output': 'C2'},"
        "  {'op': 'bucketize', 'feature': 'I4', 'borders': [1], 'output': 'later'},"
        "  {'op': 'log1p', 'feature': 'later'},"
        "  {'op': 'map_vocab', 'feature': 'C3', 'file': '/nonexistent/v.txt'}],"
        " 'batch': {'dedup_groups': {'user': ['user_id', 'I3', 'zz']}}}",
        17,
        (const char *[]){
            "$.batch.dedup_groups.user[1]: 'I3' is a dense feature; dedup groups hold "
            "sparse or weighted features",
            "$.batch.dedup_groups.user[2]: unknown feature 'zz'",
            "$.source.features[1]: unknown feature 'C99'",
            "$.filters[0].label: unknown label 'like'",
            "$.filters[1].feature: unknown feature 'nope'",
            "$.filters[2].weight_label: 'click' is already a column of the table",
            "$.transforms[0].feature: unknown feature 'C99'",
            "$.transforms[1].feature: 'I1' is a dense feature; sigrid_hash needs a sparse or "
            "weighted feature",
            "$.transforms[2].feature: 'C1' is a sparse feature; log1p needs a dense feature",
            "$.transforms[3].feature: 'C1' is a sparse feature; clamp_weights needs a weighted "
            "feature",
            "$.transforms[4].features: cannot cross 'C1' (sparse) with 'wfeat' (weighted): "
            "kinds differ",
            "$.transforms[5].features[1]: 'I2' is a dense feature; cross needs a sparse or "
            "weighted feature",
            "$.transforms[6].feature: feature 'later' is created by a later transform "
            "($.transforms[7])",
            "$.transforms[8].output: 'C2' is already a feature of the table",
            "$.transforms[9].output: 'later' is already created by an earlier transform",
            "$.transforms[10].feature: 'later' is a sparse feature; log1p needs a dense "
            "feature",
            "$.transforms[11].file: cannot open vocabulary '/nonexistent/v.txt': No such "
            "file or directory",
        });
    bind_bad("{'source': {'table': 't'},"
             " 'batch': {'dedup_groups': {'user': ['user_id', 'I3', 'zz']}}}",
             2,
             (const char *[]){
                 "$.batch.dedup_groups.user[1]: 'I3' is a dense feature; dedup groups hold "
                 "sparse or weighted features",
                 "$.batch.dedup_groups.user[2]: unknown feature 'zz'",
             });
}

Test(job_plan, read_features_and_weight_label)
{
    sl_pipeline_job_t *job =
        parse_ok("{'source': {'table': 't', 'features': ['C2', 'I1']},"
                 " 'filters': [{'op': 'has_feature', 'feature': 'C3'},"
                 "  {'op': 'negative_downsample', 'label': 'click', 'rate': 0.25}],"
                 " 'transforms': [{'op': 'cross', 'features': ['C1', 'C2'], 'table_size': 9},"
                 "  {'op': 'sigrid_hash', 'feature': 'C1_x_C2', 'table_size': 3},"
                 "  {'op': 'log1p', 'feature': 'I1'}],"
                 " 'batch': {'dedup_groups': {'user': ['user_hist']}}}");
    sl_wh_schema_t *s = schema();
    sl_pipeline_plan_t *plan = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_plan_new(job, s, &plan, NULL, &err), SL_OK, "%s", err.msg);
    uint32_t n = 0;
    const char *const *read = sl_pipeline_plan_read_features(plan, &n);
    const char *want[] = {"C2", "I1", "C3", "C1", "user_hist"};
    cr_assert_eq(n, 5);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_str_eq(read[i], want[i]);
    cr_assert_str_eq(sl_pipeline_plan_weight_label(plan), "weight");
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_plan_destroy(NULL);
    sl_pipeline_job_destroy(job);

    job = parse_ok("{'source': {'table': 't'}}");
    cr_assert_eq(sl_pipeline_plan_new(job, s, &plan, NULL, &err), SL_OK, "%s", err.msg);
    read = sl_pipeline_plan_read_features(plan, &n);
    cr_assert_eq(n, sl_wh_schema_num_features(s));
    for (uint32_t i = 0; i < n; i++)
        cr_assert_str_eq(read[i], sl_wh_schema_feature(s, i)->name);
    cr_assert_null(sl_pipeline_plan_weight_label(plan));
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(s);
}

Test(job_plan, example_specs_parse)
{
    /* The specs under examples/jobs stay valid. */
    const char *src = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(src);
    const char *names[] = {"criteo.json", "sessions.json"};
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/examples/jobs/%s", src, names[i]);
        sl_pipeline_job_t *job = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_pipeline_job_load(path, &job, NULL, &err), SL_OK, "%s", err.msg);
        sl_pipeline_job_destroy(job);
    }
}

/* Vocabulary files are checked before they are read: a file past the size
 * cap or not a regular file is refused at once (without reading it: a
 * sparse file of 4 GiB costs nothing), by sl_pipeline_plan_new and by the
 * master's sl_pipeline_plan_check alike, and no problem ever quotes a line of
 * the file. */
/* Every problem in one pass (dpp/pipeline/lenient.h): a spec that does not
 * parse is bound anyway without its bad parts; the binding problems come
 * with the parse problems, under the original paths, and none that a
 * left-out transform would explain. */
static void one_pass(const char *text, uint32_t n, const char *const *expected)
{
    text = dq(text);
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err), SL_ERR_INVALID);
    sl_pipeline_lenient_t *l = sl_pipeline_lenient_new(text, strlen(text), &pr);
    cr_assert_not_null(l);
    sl_wh_schema_t *s = schema();
    sl_pipeline_lenient_bind(l, s, &pr);
    for (uint32_t i = 0; i < pr.count; i++)
        fprintf(stderr, "  %s\n", pr.items[i]);
    cr_assert_eq(pr.count, n, "expected %u problems, got %u", n, pr.count);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_str_eq(pr.items[i], expected[i]);
    sl_pipeline_lenient_destroy(l);
    sl_pipeline_problems_free(&pr);
    sl_wh_schema_destroy(s);
}

Test(job_plan, every_problem_in_one_pass)
{
    one_pass("{'source': {'table': 't', 'features': ['I1', 'I9', 'C1', 'C1'], 'tabel': 1},"
             " 'filters': [{'op': 'label_range', 'label': 'clik', 'min': 0},"
             "  {'op': 'sample', 'rate': 7}, {'op': 'has_feature', 'feature': 'nope'}],"
             " 'transforms': [{'op': 'sigrid_hsh', 'feature': 'C1', 'table_size': 10},"
             "  {'op': 'cross', 'features': ['C1', 'C2'], 'table_size': 0, 'output': 'cx'},"
             "  {'op': 'sigrid_hash', 'feature': 'C99', 'table_size': 10},"
             "  {'op': 'first_x', 'feature': 'cx', 'x': 3}],"
             " 'batch': {'size': 0, 'dedup_groups': {'user': ['user_id', 'usr_hist']}}}",
             11,
             (const char *[]){
                 /* the parse's, as before */
                 "$.source.tabel: unknown key (did you mean 'table'?)",
                 "$.source.features[3]: 'C1' is listed twice",
                 "$.filters[1].rate: must be a number in (0, 1]",
                 "$.transforms[0].op: unknown transform 'sigrid_hsh' (did you mean "
                 "'sigrid_hash'?)",
                 "$.transforms[1].table_size: must be a positive integer",
                 "$.batch.size: must be an integer in [1, 1048576]",
                 /* then the binding's, at the spec's own indices; none for 'cx',
                  * which the left-out transforms[1] would have made */
                 "$.source.features[1]: unknown feature 'I9' (did you mean 'I1'?)",
                 "$.filters[0].label: unknown label 'clik' (did you mean 'click'?)",
                 "$.filters[2].feature: unknown feature 'nope'",
                 "$.transforms[2].feature: unknown feature 'C99'",
                 "$.batch.dedup_groups.user[1]: unknown feature 'usr_hist' (did you mean "
                 "'user_hist'?)",
             });
    /* a spec without its source cannot be bound: its parse problems alone */
    const char *text = dq("{'source': {'tabel': 't'}, 'filters': [{'op': 'x'}]}");
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err), SL_ERR_INVALID);
    cr_assert_null(sl_pipeline_lenient_new(text, strlen(text), &pr));
    sl_pipeline_problems_free(&pr);
    cr_assert_null(sl_pipeline_lenient_new("[1]", 3, &pr));
}

static void vocab_problem(const char *file, bool check_only, const char *want)
{
    char text[512];
    snprintf(text, sizeof text,
             "{'source': {'table': 't'}, 'transforms': ["
             " {'op': 'map_vocab', 'feature': 'C3', 'file': '%s'}]}",
             file);
    sl_pipeline_job_t *job = parse_ok(text);
    sl_wh_schema_t *s = schema();
    sl_pipeline_plan_t *plan = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    sl_err_t rc = check_only ? sl_pipeline_plan_check(job, s, &pr, &err)
                             : sl_pipeline_plan_new(job, s, &plan, &pr, &err);
    if (want == NULL) {
        cr_assert_eq(rc, SL_OK, "%s", err.msg);
        cr_assert_eq(pr.count, 0);
    } else {
        cr_assert_eq(rc, SL_ERR_INVALID);
        cr_assert_eq(pr.count, 1);
        cr_assert_str_eq(pr.items[0], want);
    }
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_problems_free(&pr);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(s);
}

Test(job_plan, vocabulary_files_checked_before_reading)
{
    char dir[] = "/tmp/sluice_vocab_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char ok[300], big[300], secret[300], dup[300], want[600];
    snprintf(ok, sizeof ok, "%s/ok.txt", dir);
    snprintf(big, sizeof big, "%s/big.txt", dir);
    snprintf(secret, sizeof secret, "%s/secret.txt", dir);
    snprintf(dup, sizeof dup, "%s/dup.txt", dir);
    FILE *f = fopen(ok, "w");
    fputs("3\n5\n0\n", f);
    fclose(f);
    f = fopen(secret, "w");
    fputs("root:$6$hash-of-a-password:19000:0:99999:7:::\n", f);
    fclose(f);
    f = fopen(dup, "w");
    fputs("7\n8\n7\n", f);
    fclose(f);
    /* 4 GiB, sparse: reading it would take seconds and gigabytes */
    FILE *g = fopen(big, "w");
    cr_assert_eq(ftruncate(fileno(g), 4ll << 30), 0);
    fclose(g);
    for (int check = 0; check < 2; check++) {
        vocab_problem(ok, check, NULL);
        snprintf(want, sizeof want,
                 "$.transforms[0].file: vocabulary '%s': 4294967296 bytes, more than the "
                 "536870912 a vocabulary may have",
                 big);
        vocab_problem(big, check, want);
        snprintf(want, sizeof want, "$.transforms[0].file: vocabulary '%s': not a regular file",
                 dir);
        vocab_problem(dir, check, want);
        vocab_problem("/dev/zero", check,
                      "$.transforms[0].file: vocabulary '/dev/zero': not a regular file");
    }
    /* Content problems are found by loading (the worker), and name the
     * line, never its text. */
    snprintf(want, sizeof want, "$.transforms[0].file: %s line 1: not a decimal int64 id", secret);
    vocab_problem(secret, false, want);
    vocab_problem(secret, true, NULL);
    snprintf(want, sizeof want, "$.transforms[0].file: %s line 3: the id of line 1 again", dup);
    vocab_problem(dup, false, want);
    unlink(ok);
    unlink(big);
    unlink(secret);
    unlink(dup);
    rmdir(dir);
}
