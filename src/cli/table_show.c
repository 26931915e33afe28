/* `sluice table inspect | verify | cat`: the read side of the table command.
 * inspect summarises a table from its footers (text or --json), verify
 * checks every checksum and names each problem, cat prints rows as JSON
 * lines (the jsonl import format). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "cli.h"
#include "table_cli.h"
#include "store/store.h"
#include "warehouse/table_tools.h"
#include "warehouse/warehouse.h"

/* ---- inspect ---- */

static void print_schema(const sl_wh_schema_t *s)
{
    uint32_t nd = 0, ns = 0, nw = 0;
    for (uint32_t i = 0; i < sl_wh_schema_num_features(s); i++) {
        sl_wh_kind_t k = sl_wh_schema_feature(s, i)->kind;
        nd += k == SL_WH_DENSE;
        ns += k == SL_WH_SPARSE;
        nw += k == SL_WH_WEIGHTED;
    }
    printf("schema: %u labels, %u dense, %u sparse, %u weighted features; columns %s, %s, %s\n",
           sl_wh_schema_num_labels(s), nd, ns, nw, sl_wh_schema_column(s, SL_WH_COL_SAMPLE_ID),
           sl_wh_schema_column(s, SL_WH_COL_SESSION_ID),
           sl_wh_schema_column(s, SL_WH_COL_TIMESTAMP));
    if (sl_wh_schema_num_labels(s) > 0) {
        printf("  labels:");
        for (uint32_t t = 0; t < sl_wh_schema_num_labels(s); t++)
            printf(" %s", sl_wh_schema_label(s, t));
        printf("\n");
    }
    if (sl_wh_schema_num_partition_keys(s) > 0) {
        printf("  partition keys:");
        for (uint32_t k = 0; k < sl_wh_schema_num_partition_keys(s); k++)
            printf(" %s", sl_wh_schema_partition_key(s, k));
        printf("\n");
    }
}

static void print_inspect(const char *dir, const sl_wh_inspect_t *ins, bool detail)
{
    char b1[32], b2[32], b3[32];
    printf("table %s\n", dir);
    print_schema(ins->schema);
    printf("partitions: %u, files: %u, stripes: %" PRIu64 ", rows: %" PRIu64 "\n",
           ins->num_partitions, ins->num_files, ins->stripes, ins->rows);
    for (uint32_t p = 0; p < ins->num_partitions; p++) {
        const sl_wh_partition_summary_t *ps = &ins->partitions[p];
        const char *name = ps->partition->name;
        printf("  %-24s %4u files %12" PRIu64 " rows %12s\n", name[0] ? name : "(root)", ps->files,
               ps->rows, sl_cli_fmt_bytes((double)ps->bytes, b1, sizeof b1));
    }
    printf("bytes: %s in files, %s of streams decoded, %s stored; compression %.2fx",
           sl_cli_fmt_bytes((double)ins->file_bytes, b1, sizeof b1),
           sl_cli_fmt_bytes((double)ins->raw_bytes, b2, sizeof b2),
           sl_cli_fmt_bytes((double)ins->stored_bytes, b3, sizeof b3), ins->compression_ratio);
    if (ins->num_groups > 0) printf(", dedup %.2fx", ins->dedup_ratio);
    if (ins->rows > 0) printf("; %.1f bytes/row", (double)ins->file_bytes / (double)ins->rows);
    printf("\n");
    printf("%-24s %-10s %14s %12s %12s %7s %9s\n", "column", "kind", "values", "raw", "stored",
           "ratio", "bytes/row");
    for (uint32_t c = 0; c < ins->num_columns; c++) {
        const sl_wh_column_bytes_t *col = &ins->columns[c];
        double ratio = col->stored_bytes ? (double)col->raw_bytes / (double)col->stored_bytes : 0;
        printf("%-24s %-10s %14" PRIu64 " %12s %12s %6.2fx %9.2f\n", col->name, col->kind,
               col->values, sl_cli_fmt_bytes((double)col->raw_bytes, b1, sizeof b1),
               sl_cli_fmt_bytes((double)col->stored_bytes, b2, sizeof b2), ratio,
               ins->rows ? (double)col->stored_bytes / (double)ins->rows : 0.0);
    }
    for (uint32_t g = 0; g < ins->num_groups; g++) {
        const sl_wh_group_summary_t *gr = &ins->groups[g];
        printf("dedup group %s: %" PRIu64 " rows stored as %" PRIu64 " unique (%.2fx), %s\n",
               gr->name, gr->rows, gr->unique_rows,
               gr->unique_rows ? (double)gr->rows / (double)gr->unique_rows : 1.0,
               sl_cli_fmt_bytes((double)gr->stored_bytes, b1, sizeof b1));
    }
    if (!detail) return;
    for (uint32_t f = 0; f < ins->num_files; f++) {
        const sl_wh_file_summary_t *fs = &ins->files[f];
        printf("file %s: %" PRIu64 " rows, %u stripes, %s (footer %s)%s\n", fs->path, fs->rows,
               fs->stripes, sl_cli_fmt_bytes((double)fs->file_bytes, b1, sizeof b1),
               sl_cli_fmt_bytes((double)fs->footer_bytes, b2, sizeof b2),
               fs->session_clustered ? ", session-clustered" : "");
        for (uint32_t s = 0; s < fs->stripes && fs->stripe_rows != NULL; s++)
            printf("  stripe %u: %u rows\n", s, fs->stripe_rows[s]);
    }
}

typedef struct show_args {
    sl_cli_list_t dir;
    bool json, detail;
    const char *filter, *features;
    uint64_t limit;
    sl_cli_store_read_args_t store;
} show_args_t;

#define SA(field) offsetof(show_args_t, field)
#define PARTITION_FILTER                                                                           \
    {                                                                                              \
        "partition-filter", SL_CLI_STRING, "EXPR", NULL, "every partition", 0, 0, 0, SA(filter),   \
            "only partitions passing the filter, e.g. 'ds>=2026-01-02,ds<2026-01-05'"              \
    }
#define TABLE_DIR                                                                                  \
    .args = "DIR", .args_doc = "table directory or s3://BUCKET/PREFIX", .min_args = 1,             \
    .max_args = 1, .args_offset = SA(dir)

static const sl_cli_opt_t inspect_opts[] = {
    {"json", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, SA(json), "print JSON"},
    {"detail", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, SA(detail), "list every file's stripes"},
    PARTITION_FILTER,
};
static const sl_cli_group_t inspect_group = SL_CLI_OWN_GROUP(inspect_opts);

const sl_cli_cmd_t sl_cli_table_inspect_cmd = {
    .name = "table inspect",
    .summary = "schema, partitions, files, bytes per feature, compression and dedup ratios",
    .synopsis = "sluice table inspect DIR [--json] [--detail] [--partition-filter EXPR] [options]",
    .about = "Schema, partitions, files, rows, bytes per feature, compression and dedup ratios, "
             "from the files' footers (no data is read).",
    TABLE_DIR,
    .groups = {{&inspect_group, 0}, {&sl_cli_store_read_group, SA(store)}},
};

static const sl_cli_group_t verify_group = {NULL, NULL, NULL, 0};

const sl_cli_cmd_t sl_cli_table_verify_cmd = {
    .name = "table verify",
    .summary = "check every checksum; exit 1 naming file, stripe and stream",
    .synopsis = "sluice table verify DIR [options]",
    .about = "Checks the schema and every data file: header, footer, trailer, the checksum of "
             "every stream, and decodes every stripe. Prints each problem (file, stripe and "
             "stream) and exits 1 when there is one, 0 when the table is clean.",
    TABLE_DIR,
    .groups = {{&verify_group, 0}, {&sl_cli_store_read_group, SA(store)}},
};

static const sl_cli_opt_t cat_opts[] = {
    {"features", SL_CLI_STRING, "a,b", NULL, "all", 0, 0, 0, SA(features),
     "only these features (labels and id columns are always printed)"},
    {"limit", SL_CLI_UINT, "N", NULL, "all rows", 0, UINT64_MAX, 0, SA(limit),
     "at most N rows (0: none)"},
    PARTITION_FILTER,
};
static const sl_cli_group_t cat_group = SL_CLI_OWN_GROUP(cat_opts);

const sl_cli_cmd_t sl_cli_table_cat_cmd = {
    .name = "table cat",
    .summary = "print rows as JSON lines (the jsonl import format)",
    .synopsis = "sluice table cat DIR [--features a,b] [--limit N] [--partition-filter EXPR] "
                "[options]",
    .about = "Prints rows as JSON lines (the jsonl import format): files in table order.",
    TABLE_DIR,
    .groups = {{&cat_group, 0}, {&sl_cli_store_read_group, SA(store)}},
};

static int inspect(const show_args_t *a);

int tcli_inspect(int argc, char **argv)
{
    show_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc = sl_cli_parse(&sl_cli_table_inspect_cmd, argc, argv, &a, &parsed) ? inspect(&a)
                                                                              : parsed.code;
    sl_cli_free(&sl_cli_table_inspect_cmd, &a);
    return rc;
}

static int inspect(const show_args_t *a)
{
    bool json = a->json, detail = a->detail;
    const char *filter_text = a->filter;
    const char *dir = a->dir.items[0];
    sl_error_t err = {0};
    sl_wh_filter_t *filter = NULL;
    if (filter_text != NULL && sl_wh_filter_parse(filter_text, NULL, &filter, &err) != SL_OK)
        return sl_cli_usage_error("table inspect", "%s", err.msg);
    sl_wh_inspect_t *ins = NULL;
    sl_store_opts_t so = sl_cli_store_read_opts(&a->store);
    sl_err_t rc = sl_wh_inspect_table_with(dir, &so, filter, NULL, &ins, &err);
    sl_wh_filter_destroy(filter);
    if (rc != SL_OK) {
        fprintf(stderr, "sluice table inspect: %s\n", err.msg);
        return 1;
    }
    if (json) {
        json_t *j = sl_wh_inspect_to_json(ins, detail);
        if (j == NULL || json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
            json_decref(j);
            sl_wh_inspect_destroy(ins);
            fprintf(stderr, "sluice table inspect: cannot print JSON\n");
            return 1;
        }
        printf("\n");
        json_decref(j);
    } else {
        print_inspect(dir, ins, detail);
    }
    sl_wh_inspect_destroy(ins);
    return 0;
}

/* ---- verify ---- */

static void on_problem(void *ctx, const sl_wh_problem_t *p)
{
    (void)ctx;
    printf("problem: %s\n", p->message);
    fflush(stdout);
}

static int verify(const show_args_t *a);

int tcli_verify(int argc, char **argv)
{
    show_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc =
        sl_cli_parse(&sl_cli_table_verify_cmd, argc, argv, &a, &parsed) ? verify(&a) : parsed.code;
    sl_cli_free(&sl_cli_table_verify_cmd, &a);
    return rc;
}

static int verify(const show_args_t *a)
{
    sl_wh_verify_stats_t st;
    sl_error_t err = {0};
    sl_store_opts_t so = sl_cli_store_read_opts(&a->store);
    sl_err_t rc = sl_wh_verify_table_with(a->dir.items[0], &so, NULL, on_problem, NULL, &st, &err);
    char b[32];
    if (rc != SL_OK && st.problems == 0) {
        fprintf(stderr, "sluice table verify: %s\n", err.msg);
        return 1;
    }
    printf("%s: %u files (%u bad), %" PRIu64 " stripes, %" PRIu64 " streams, %s checked, %" PRIu64
           " rows; %" PRIu64 " problem%s\n",
           st.problems ? "FAILED" : "ok", st.files, st.bad_files, st.stripes, st.streams,
           sl_cli_fmt_bytes((double)st.bytes, b, sizeof b), st.rows, st.problems,
           st.problems == 1 ? "" : "s");
    return st.problems || rc != SL_OK ? 1 : 0;
}

/* ---- cat ---- */

static int cat(const show_args_t *a, bool limit_given);

int tcli_cat(int argc, char **argv)
{
    show_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc = sl_cli_parse(&sl_cli_table_cat_cmd, argc, argv, &a, &parsed)
                 ? cat(&a, sl_cli_given(&sl_cli_table_cat_cmd, &parsed, "limit"))
                 : parsed.code;
    sl_cli_free(&sl_cli_table_cat_cmd, &a);
    return rc;
}

static int cat(const show_args_t *a, bool limit_given)
{
    const char *features = a->features, *filter_text = a->filter;
    uint64_t limit = a->limit;

    sl_error_t err = {0};
    sl_wh_filter_t *filter = NULL;
    if (filter_text != NULL && sl_wh_filter_parse(filter_text, NULL, &filter, &err) != SL_OK)
        return sl_cli_usage_error("table cat", "%s", err.msg);
    /* strtok cuts the copy: its size is kept for the free */
    size_t copy_size = features ? strlen(features) + 1 : 0;
    size_t names_cap = copy_size / 2 + 2;
    char *copy = sl_strdup(NULL, features);
    const char **names = NULL;
    uint32_t n = 0;
    if (copy != NULL) {
        names = sl_calloc(NULL, names_cap, sizeof *names);
        for (char *tok = strtok(copy, ","); names != NULL && tok; tok = strtok(NULL, ","))
            names[n++] = tok;
    }
    if (limit_given && limit == 0) {
        /* --limit 0 prints nothing (0 in the options means "all"). */
        sl_free(NULL, names, names_cap * sizeof *names);
        sl_free(NULL, copy, copy_size);
        sl_wh_filter_destroy(filter);
        return 0;
    }
    sl_store_opts_t so = sl_cli_store_read_opts(&a->store);
    sl_wh_cat_opts_t o = {
        .features = names, .num_features = n, .filter = filter, .limit = limit, .store = &so};
    uint64_t rows = 0;
    sl_err_t rc = sl_wh_cat_table(a->dir.items[0], &o, stdout, &rows, &err);
    if (fflush(stdout) != 0 && rc == SL_OK) rc = sl_error_set(&err, SL_ERR_IO, "write failed");
    sl_free(NULL, names, names_cap * sizeof *names);
    sl_free(NULL, copy, copy_size);
    sl_wh_filter_destroy(filter);
    if (rc != SL_OK) {
        fprintf(stderr, "sluice table cat: %s\n", err.msg);
        return 1;
    }
    return 0;
}
