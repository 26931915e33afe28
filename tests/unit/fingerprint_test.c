/* The canonical plan fingerprint (sl_pipeline_fingerprint): equal for specs
 * that differ only in key order, whitespace, defaults spelled out or left
 * out, the job id or "share"; different for every single change that
 * changes the samples or their batches. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "dpp/pipeline/plan.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/warehouse.h"

static char *dir;
static char table[512], table2[512], vocab[512];

static void gen(const char *at, uint64_t seed)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", 3000, seed, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 500;
    go.writer.no_sync = true;
    go.writer.overwrite = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(at, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

static void setup(void)
{
    dir = tu_mkdtemp("fingerprint");
    snprintf(table, sizeof table, "%s/table", dir);
    snprintf(table2, sizeof table2, "%s/table2", dir);
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    gen(table, 17);
    tu_write_file(vocab, "5\n7\n9\n", 6);
}

static void teardown(void)
{
    tu_rm_tree(dir);
    free(dir);
}

TestSuite(fingerprint, .init = setup, .fini = teardown);

/* The fingerprint of spec text (printf-style, the table path given by the
 * caller). */
static uint64_t fp_of(const char *text, bool prefix);

static uint64_t fp(const char *text)
{
    return fp_of(text, false);
}

/* The autocache's prefix fingerprint of spec text (0: not cacheable). */
static uint64_t prefix_fp(const char *text)
{
    return fp_of(text, true);
}

/* The job of spec text; caller destroys it. */
static sl_pipeline_job_t *job_of(const char *text)
{
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err), SL_OK, "%s: %s", text,
                 err.msg);
    sl_pipeline_problems_free(&pr);
    return job;
}

static uint64_t fp_of(const char *text, bool prefix)
{
    sl_pipeline_job_t *job = job_of(text);
    sl_error_t err = {0};
    sl_wh_table_t *t = NULL;
    cr_assert_eq(sl_wh_table_open(job->table, NULL, &t, &err), SL_OK, "%s", err.msg);
    sl_wh_filter_t *f = NULL;
    if (job->partitions != NULL)
        cr_assert_eq(sl_wh_filter_parse(job->partitions, NULL, &f, &err), SL_OK, "%s", err.msg);
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_table_splits(t, f, job->stripes_per_split, &sp, &err), SL_OK, "%s", err.msg);
    uint64_t out = 0;
    sl_err_t rc = prefix
                      ? sl_pipeline_prefix_fingerprint(job, sl_wh_table_schema(t), sp, &out, &err)
                      : sl_pipeline_fingerprint(job, sl_wh_table_schema(t), sp, &out, &err);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_wh_splits_destroy(sp);
    sl_wh_filter_destroy(f);
    sl_wh_table_close(t);
    sl_pipeline_job_destroy(job);
    return out;
}

static char buf[8192];

#define SPEC(...) (snprintf(buf, sizeof buf, __VA_ARGS__), fp(buf))

/* The base job, written tersely (defaults left out). */
static uint64_t base(void)
{
    return SPEC("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                "\"filters\":[{\"op\":\"sample\",\"rate\":0.5}],"
                "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100},"
                "{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                "\"batch\":{\"size\":256,\"epochs\":2}}",
                table);
}

Test(fingerprint, same_plan_whatever_the_text)
{
    uint64_t a = base();
    cr_assert_neq(a, 0);
    /* the same, twice */
    cr_assert_eq(base(), a);
    /* keys reordered at every level, whitespace, another id, share off */
    cr_assert_eq(SPEC("{ \"batch\" : { \"epochs\" : 2 , \"size\" : 256 },\n"
                      "  \"transforms\" : [ { \"table_size\" : 100, \"feature\" : \"C1\", "
                      "\"op\" : \"sigrid_hash\" },\n   {\"feature\":\"I1\",\"op\":\"log1p\"} ],\n"
                      "  \"filters\" : [ {\"rate\":0.5, \"op\":\"sample\"} ],\n"
                      "  \"share\": false, \"source\" : { \"table\" : \"%s\" }, \"id\" : \"b\" }",
                      table),
                 a);
    /* every default spelled out, the seed of no shuffle given, the table by
     * another path to the same directory */
    char features[1024] = "";
    for (int i = 1; i <= 13; i++)
        snprintf(features + strlen(features), sizeof features - strlen(features), "\"I%d\",", i);
    for (int i = 1; i <= 26; i++)
        snprintf(features + strlen(features), sizeof features - strlen(features), "\"C%d\"%s", i,
                 i < 26 ? "," : "");
    cr_assert_eq(
        SPEC("{\"id\":\"c\",\"source\":{\"table\":\"%s/../table/\",\"stripes_per_split\":1,"
             "\"features\":[%s]},\"on_bad_split\":\"fail\","
             "\"filters\":[{\"op\":\"sample\",\"rate\":0.5,\"seed\":0}],"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100,"
             "\"salt\":0},{\"op\":\"log1p\",\"feature\":\"I1\"}],"
             "\"batch\":{\"size\":256,\"epochs\":2,\"drop_last\":false,\"sample_ids\":true,"
             "\"shuffle\":{\"splits\":false,\"window\":0,\"seed\":99}},\"share\":true,"
             "\"order\":\"dynamic\"}",
             table, features),
        a);
}

Test(fingerprint, every_change_of_the_samples_changes_it)
{
    /* One change each to the base job (above): each must give a
     * fingerprint of its own, different from the base and from each other. */
    const char *head = "{\"id\":\"a\",\"source\":{\"table\":\"%s\"%s},";
    struct {
        const char *what, *source, *filters, *transforms, *batch, *extra;
    } v[] = {
        {"base", "", "{\"op\":\"sample\",\"rate\":0.5}",
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"}",
         "\"size\":256,\"epochs\":2", ""},
        {"sample rate", "", "{\"op\":\"sample\",\"rate\":0.25}", NULL, NULL, ""},
        {"sample seed", "", "{\"op\":\"sample\",\"rate\":0.5,\"seed\":1}", NULL, NULL, ""},
        {"another filter", "",
         "{\"op\":\"sample\",\"rate\":0.5},{\"op\":\"has_feature\",\"feature\":\"C2\"}", NULL, NULL,
         ""},
        {"no filter", "", "", NULL, NULL, ""},
        {"table_size", "", NULL,
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":101},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"}",
         NULL, ""},
        {"salt", "", NULL,
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100,\"salt\":3},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"}",
         NULL, ""},
        {"transform feature", "", NULL,
         "{\"op\":\"sigrid_hash\",\"feature\":\"C2\",\"table_size\":100},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"}",
         NULL, ""},
        {"transform order", "", NULL,
         "{\"op\":\"log1p\",\"feature\":\"I1\"},"
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100}",
         NULL, ""},
        {"vocabulary", "", NULL,
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"},"
         "{\"op\":\"map_vocab\",\"feature\":\"C3\",\"file\":\"VOCAB\"}",
         NULL, ""},
        {"vocabulary default", "", NULL,
         "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100},"
         "{\"op\":\"log1p\",\"feature\":\"I1\"},"
         "{\"op\":\"map_vocab\",\"feature\":\"C3\",\"file\":\"VOCAB\",\"default\":0}",
         NULL, ""},
        {"batch size", "", NULL, NULL, "\"size\":255,\"epochs\":2", ""},
        {"epochs", "", NULL, NULL, "\"size\":256,\"epochs\":3", ""},
        {"drop_last", "", NULL, NULL, "\"size\":256,\"epochs\":2,\"drop_last\":true", ""},
        {"sample ids", "", NULL, NULL, "\"size\":256,\"epochs\":2,\"sample_ids\":false", ""},
        {"split shuffle", "", NULL, NULL, "\"size\":256,\"epochs\":2,\"shuffle\":{\"splits\":true}",
         ""},
        {"split shuffle seed", "", NULL, NULL,
         "\"size\":256,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":5}", ""},
        {"row window", "", NULL, NULL, "\"size\":256,\"epochs\":2,\"shuffle\":{\"window\":1000}",
         ""},
        {"row window seed", "", NULL, NULL,
         "\"size\":256,\"epochs\":2,\"shuffle\":{\"window\":1000,\"seed\":5}", ""},
        {"dedup group", "", NULL, NULL,
         "\"size\":256,\"epochs\":2,\"dedup_groups\":{\"g\":[\"C5\",\"C6\"]}", ""},
        {"dedup group features", "", NULL, NULL,
         "\"size\":256,\"epochs\":2,\"dedup_groups\":{\"g\":[\"C5\"]}", ""},
        {"projection", ",\"features\":[\"I1\",\"C1\",\"C2\"]", NULL, NULL, NULL, ""},
        {"projection order", ",\"features\":[\"C1\",\"I1\",\"C2\"]", NULL, NULL, NULL, ""},
        {"stripes per split", ",\"stripes_per_split\":2", NULL, NULL, NULL, ""},
        {"on_bad_split", "", NULL, NULL, NULL, ",\"on_bad_split\":\"skip\""},
        {"deterministic order", "", NULL, NULL, NULL, ",\"order\":\"deterministic\""},
    };
    size_t n = sizeof v / sizeof v[0];
    uint64_t got[64];
    cr_assert(n <= 64);
    for (size_t i = 0; i < n; i++) {
        const char *filters = v[i].filters ? v[i].filters : v[0].filters;
        const char *transforms = v[i].transforms ? v[i].transforms : v[0].transforms;
        const char *batch = v[i].batch ? v[i].batch : v[0].batch;
        char t[2048];
        snprintf(t, sizeof t, "%s", transforms);
        char *at = strstr(t, "VOCAB");
        if (at != NULL) {
            char rest[2048];
            snprintf(rest, sizeof rest, "%s", at + 5);
            snprintf(at, sizeof t - (size_t)(at - t), "%s%s", vocab, rest);
        }
        char fmt[4096];
        snprintf(fmt, sizeof fmt, "%s\"filters\":[%s],\"transforms\":[%s],\"batch\":{%s}%s}", head,
                 filters, t, batch, v[i].extra);
        got[i] = SPEC(fmt, table, v[i].source);
        for (size_t k = 0; k < i; k++)
            cr_assert_neq(got[i], got[k], "'%s' and '%s' have the same fingerprint", v[i].what,
                          v[k].what);
    }
    cr_assert_eq(got[0], base());
}

Test(fingerprint, the_data_is_part_of_it)
{
    uint64_t a = base();
    /* another table with the same files' names, schema and sizes, other
     * rows: its footers differ */
    gen(table2, 18);
    char spec[2048];
    snprintf(spec, sizeof spec,
             "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
             "\"filters\":[{\"op\":\"sample\",\"rate\":0.5}],"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":100},"
             "{\"op\":\"log1p\",\"feature\":\"I1\"}],"
             "\"batch\":{\"size\":256,\"epochs\":2}}",
             table2);
    uint64_t b = fp(spec);
    cr_assert_neq(a, b);
    /* the table rewritten in place with other rows: the footers change */
    gen(table, 19);
    uint64_t c = base();
    cr_assert_neq(c, a);
    cr_assert_neq(c, b);
    /* and written again as it was: the same fingerprint as before */
    gen(table, 17);
    cr_assert_eq(base(), a);
}

Test(fingerprint, a_vocabulary_counts_by_its_content)
{
    char spec[2048];
    snprintf(spec, sizeof spec,
             "{\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"map_vocab\",\"feature\":\"C3\",\"file\":\"%s\"}]}",
             table, vocab);
    uint64_t a = fp(spec);
    tu_write_file(vocab, "5\n7\n8\n", 6);
    uint64_t b = fp(spec);
    cr_assert_neq(a, b);
    tu_write_file(vocab, "5\n7\n9\n", 6);
    cr_assert_eq(fp(spec), a);
}

Test(fingerprint, a_missing_vocabulary_is_an_error_naming_it)
{
    char spec[2048];
    snprintf(spec, sizeof spec,
             "{\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"map_vocab\",\"feature\":\"C3\",\"file\":\"%s/none\"}]}",
             table, dir);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_table_t *t = NULL;
    cr_assert_eq(sl_wh_table_open(job->table, NULL, &t, &err), SL_OK, "%s", err.msg);
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    uint64_t out = 1;
    cr_assert_eq(sl_pipeline_fingerprint(job, sl_wh_table_schema(t), sp, &out, &err),
                 SL_ERR_NOT_FOUND);
    cr_assert_eq(out, 0);
    cr_assert(strstr(err.msg, "$.transforms[0].file") != NULL, "%s", err.msg);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    sl_pipeline_job_destroy(job);
}

/* The autocache's key: what one split's batches hold. Epochs, the split
 * shuffle and its seed do not change them; the data and every transform
 * do, and so do dedup groups (cached since issue 14); a row shuffle or
 * "autocache": false make a job not cacheable (0). */
Test(fingerprint, the_prefix_fingerprint_of_the_autocache)
{
    static char b[4096];
#define PREFIX(...) (snprintf(b, sizeof b, __VA_ARGS__), prefix_fp(b))
    uint64_t base = PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                           "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                           "\"batch\":{\"size\":64,\"epochs\":1}}",
                           table);
    cr_assert_neq(base, 0);
    cr_assert_eq(PREFIX("{\"id\":\"b\",\"source\":{\"table\":\"%s\"},"
                        "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                        "\"batch\":{\"size\":64,\"epochs\":5,"
                        "\"shuffle\":{\"splits\":true,\"seed\":9}}}",
                        table),
                 base, "epochs and the split order are not part of it");
    cr_assert_neq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                         "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I2\"}],"
                         "\"batch\":{\"size\":64,\"epochs\":1}}",
                         table),
                  base);
    cr_assert_neq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                         "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                         "\"batch\":{\"size\":65,\"epochs\":1}}",
                         table),
                  base);
    /* and it is not the plan fingerprint */
    cr_assert_neq(SPEC("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                       "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                       "\"batch\":{\"size\":64,\"epochs\":1}}",
                       table),
                  base);
    cr_assert_eq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                        "\"batch\":{\"size\":64,\"shuffle\":{\"window\":128}}}",
                        table),
                 0, "a row shuffle ends the prefix before the transforms");
    cr_assert_eq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},\"autocache\":false}", table),
                 0);
    /* dedup groups are cached (the transformed, deduplicated batch): their
     * own prefix, not the one without them */
    uint64_t grouped = PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                              "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"}],"
                              "\"batch\":{\"size\":64,\"epochs\":1,"
                              "\"dedup_groups\":{\"g\":[\"C1\",\"C2\"]}}}",
                              table);
    cr_assert_neq(grouped, 0, "a job with dedup groups is cacheable");
    cr_assert_neq(grouped, base);
    cr_assert_eq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
                        "\"batch\":{\"shuffle\":{\"window\":128},"
                        "\"dedup_groups\":{\"g\":[\"C1\",\"C2\"]}}}",
                        table),
                 0, "dedup groups with a row shuffle: still not cacheable");
    /* a rewritten source file changes it */
    gen(table2, 17);
    uint64_t before = PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"}}", table2);
    gen(table2, 18);
    cr_assert_neq(PREFIX("{\"id\":\"a\",\"source\":{\"table\":\"%s\"}}", table2), before);
#undef PREFIX
}

/* sl_pipeline_uncacheable of spec text: NULL (cacheable) when want is
 * NULL, else a reason holding want. */
static void assert_why(const char *text, const char *want)
{
    sl_pipeline_job_t *j = job_of(text);
    const char *why = sl_pipeline_uncacheable(j);
    if (want == NULL)
        cr_assert_null(why, "%s: %s", text, why);
    else
        cr_assert(why != NULL && strstr(why, want) != NULL, "%s: %s", text,
                  why ? why : "(cacheable)");
    sl_pipeline_job_destroy(j);
}

/* Why a job is not cacheable (sl_pipeline_uncacheable): dedup groups are
 * no reason any more; a row shuffle, with or without them, still is, and
 * so is "autocache": false. */
Test(fingerprint, the_reasons_a_job_is_not_cacheable)
{
    static char b[2048];
#define WHY(want, ...) (snprintf(b, sizeof b, __VA_ARGS__), assert_why(b, want))
    WHY(NULL, "{\"id\":\"a\",\"source\":{\"table\":\"%s\"}}", table);
    WHY(NULL,
        "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
        "\"batch\":{\"dedup_groups\":{\"g\":[\"C1\",\"C2\"],\"h\":[\"C3\"]}}}",
        table);
    WHY("row shuffle",
        "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
        "\"batch\":{\"shuffle\":{\"window\":128}}}",
        table);
    WHY("row shuffle",
        "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
        "\"batch\":{\"shuffle\":{\"window\":128},\"dedup_groups\":{\"g\":[\"C1\"]}}}",
        table);
    WHY("autocache", "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},\"autocache\":false}", table);
#undef WHY
}

/* The fingerprint of a Parquet job (source.parquet) over splits (the
 * master's cut: the row groups' ranges and each file's footer checksum). */
static uint64_t pq_fp(const char *text, const sl_wh_splits_t *sp, bool prefix)
{
    sl_pipeline_job_t *job = job_of(text);
    sl_error_t err = {0};
    uint64_t out = 0;
    sl_err_t rc = prefix ? sl_pipeline_prefix_fingerprint(job, NULL, sp, &out, &err)
                         : sl_pipeline_fingerprint(job, NULL, sp, &out, &err);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_pipeline_job_destroy(job);
    return out;
}

Test(fingerprint, parquet_source)
{
    sl_wh_split_t items[2] = {{.path = "ds=1/a.parquet",
                               .partition = "ds=1",
                               .stripe_begin = 0,
                               .stripe_end = 2,
                               .num_rows = 1000,
                               .footer_checksum = 11},
                              {.path = "ds=1/a.parquet",
                               .partition = "ds=1",
                               .stripe_begin = 2,
                               .stripe_end = 3,
                               .first_row = 1000,
                               .num_rows = 400,
                               .footer_checksum = 11}};
    sl_wh_splits_t sp = {.count = 2, .items = items, .rows = 1400, .files = 1};
    /* the dataset's path is resolved: the table's directory stands in for it */
    char a[1024], b[1024];
    snprintf(a, sizeof a,
             "{\"source\":{\"parquet\":\"%s\",\"columns\":{\"dense\":[\"x\"],\"labels\":[\"y\"]}}}",
             table);
    snprintf(b, sizeof b,
             "{\"id\":\"other\",\"source\":{\"columns\":{\"labels\":[\"y\"],\"dense\":[\"x\"]},"
             "\"split_rows\":65536,\"parquet\":\"%s/.\"}}",
             table);
    uint64_t fa = pq_fp(a, &sp, false);
    cr_assert_neq(fa, 0);
    cr_assert_eq(pq_fp(b, &sp, false), fa, "key order, defaults, the path's spelling");
    /* another mapping, another split size, another file content */
    snprintf(b, sizeof b,
             "{\"source\":{\"parquet\":\"%s\",\"columns\":{\"dense\":[\"x\"],\"labels\":[\"z\"]}}}",
             table);
    cr_assert_neq(pq_fp(b, &sp, false), fa);
    snprintf(b, sizeof b,
             "{\"source\":{\"parquet\":\"%s\",\"split_rows\":7,"
             "\"columns\":{\"dense\":[\"x\"],\"labels\":[\"y\"]}}}",
             table);
    cr_assert_neq(pq_fp(b, &sp, false), fa);
    items[1].footer_checksum = 12;
    cr_assert_neq(pq_fp(a, &sp, false), fa);
    /* not cacheable: the autocache keeps table splits' batches */
    cr_assert_eq(pq_fp(a, &sp, true), 0);
    sl_pipeline_job_t *job = job_of(a);
    cr_assert_not_null(sl_pipeline_uncacheable(job));
    sl_pipeline_job_destroy(job);
}
