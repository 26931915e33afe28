/* `sluice table ...`: create, import, generate, inspect, verify and read
 * feature tables (docs/TABLES.md is the user's guide). This file parses the
 * command lines and prints; the work is in src/warehouse (import.h,
 * warehouse.h). The read-side commands (inspect, verify, cat) live in
 * table_show.c. Exit codes: 0 done, 1 failed (or verify found problems),
 * 2 usage error. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "progress.h"
#include "table_cli.h"
#include "warehouse/import.h"

#define MAX_GROUPS 32

static void table_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice table <command> [options]\n\n"
            "commands:\n"
            "  create   DIR --schema FILE        create an empty table from a JSON schema\n"
            "  import   --format criteo|jsonl --input FILE... --table DIR [--partition ds=...]\n"
            "  gen      --preset criteo|sessions --rows N --table DIR [--seed S] ...\n"
            "  inspect  DIR [--json] [--detail]   schema, partitions, files, bytes per feature\n"
            "  verify   DIR                       check every checksum (exit 1 on a problem)\n"
            "  cat      DIR [--features a,b] [--limit N] [--partition-filter EXPR]\n\n"
            "`sluice table <command> --help` lists a command's options; docs/TABLES.md has "
            "examples.\n");
}

int tcli_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice table %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `sluice table %s --help`)\n", cmd);
    return 2;
}

/* ---- writer options shared by import and gen ---- */

typedef struct wopts {
    sl_wh_writer_opts_t w;
    sl_dedup_group_spec_t groups[MAX_GROUPS];
    char *group_text[MAX_GROUPS]; /* owned copies the specs point into (cut by strtok) */
    size_t group_size[MAX_GROUPS];  /* bytes of group_text[g] */
    const char **group_feats[MAX_GROUPS];
    uint32_t group_cap[MAX_GROUPS]; /* entries of group_feats[g] */
    uint32_t ngroups;
} wopts_t;

static void wopts_free(wopts_t *o)
{
    for (uint32_t g = 0; g < o->ngroups; g++) {
        sl_free(NULL, o->group_text[g], o->group_size[g]);
        sl_free(NULL, o->group_feats[g], o->group_cap[g] * sizeof *o->group_feats[g]);
    }
    o->ngroups = 0;
}

/* "name=f1,f2,..." */
static int add_group(wopts_t *o, const char *cmd, const char *text)
{
    if (o->ngroups == MAX_GROUPS)
        return tcli_usage_error(cmd, "more than 32 --dedup-group options (at '%s')", text);
    size_t size = strlen(text) + 1;
    char *copy = sl_strdup(NULL, text);
    if (copy == NULL) return 1;
    char *eq = strchr(copy, '=');
    if (eq == NULL || eq == copy || eq[1] == '\0') {
        sl_free(NULL, copy, size);
        return tcli_usage_error(cmd, "--dedup-group wants NAME=FEATURE,FEATURE..., got '%s'",
                                text);
    }
    *eq = '\0';
    uint32_t n = 1;
    for (const char *p = eq + 1; *p; p++) n += *p == ',';
    uint32_t cap = n;
    const char **feats = sl_calloc(NULL, cap, sizeof *feats);
    if (feats == NULL) {
        sl_free(NULL, copy, size);
        return 1;
    }
    n = 0;
    for (char *tok = strtok(eq + 1, ","); tok != NULL; tok = strtok(NULL, ",")) feats[n++] = tok;
    if (n == 0) {
        sl_free(NULL, feats, cap * sizeof *feats);
        sl_free(NULL, copy, size);
        return tcli_usage_error(cmd, "--dedup-group '%s' names no feature", text);
    }
    uint32_t g = o->ngroups++;
    o->group_text[g] = copy;
    o->group_size[g] = size;
    o->group_feats[g] = feats;
    o->group_cap[g] = cap;
    o->groups[g] = (sl_dedup_group_spec_t){copy, n, feats};
    o->w.num_dedup_groups = o->ngroups;
    o->w.dedup_groups = o->groups;
    return 0;
}

enum {
    OPT_CLUSTER = 1000,
    OPT_DEDUP,
    OPT_STRIPE_ROWS,
    OPT_LEVEL,
    OPT_NO_SYNC,
    OPT_THREADS,
    OPT_QUIET,
    OPT_STRICT,
    OPT_INFER,
    OPT_ACTIVE,
    OPT_OVERWRITE,
};

/* Handle an option common to import and gen. @return 0 handled, 2 usage
 * error, -1 not a writer option. */
static int writer_option(wopts_t *o, const char *cmd, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case OPT_CLUSTER: o->w.cluster_sessions = true; return 0;
    case OPT_NO_SYNC: o->w.no_sync = true; return 0;
    case OPT_DEDUP: return add_group(o, cmd, arg) == 0 ? 0 : 2;
    case OPT_STRIPE_ROWS:
        if (sl_parse_u64(arg, 0, 1u << 24, &v, NULL, NULL) != SL_OK || v == 0)
            return tcli_usage_error(cmd, "--stripe-rows wants 1..16777216, got '%s'", arg);
        o->w.stripe_rows = (uint32_t)v;
        return 0;
    case OPT_LEVEL:
        if (sl_parse_u64(arg, 0, 22, &v, NULL, NULL) != SL_OK)
            return tcli_usage_error(cmd, "--level wants 0..22 (0: store uncompressed), got '%s'",
                                    arg);
        if (v == 0)
            o->w.codec = SL_WH_CODEC_NONE;
        else
            o->w.zstd_level = (int)v;
        return 0;
    }
    return -1;
}

#define WRITER_LONGOPTS                                                                           \
    {"cluster", no_argument, 0, OPT_CLUSTER}, {"dedup-group", required_argument, 0, OPT_DEDUP},   \
        {"stripe-rows", required_argument, 0, OPT_STRIPE_ROWS},                                   \
        {"level", required_argument, 0, OPT_LEVEL}, {"no-sync", no_argument, 0, OPT_NO_SYNC},     \
        {"threads", required_argument, 0, OPT_THREADS}, {"quiet", no_argument, 0, OPT_QUIET},     \
        {"help", no_argument, 0, 'h'}

static const char writer_help[] =
    "  --cluster               order each stripe's rows by (session id, timestamp)\n"
    "  --dedup-group NAME=F1,F2  store these sparse features once per unique row of a\n"
    "                          stripe plus inverse indices (RecD); repeatable\n"
    "  --stripe-rows N         rows per stripe (default 65536)\n"
    "  --level L               zstd level 1..22 (default 1: fastest to read); 0 stores streams uncompressed\n"
    "  --threads N             worker threads (default: one per core)\n"
    "  --no-sync               skip fsync (scratch tables; files still appear atomically)\n"
    "  --quiet                 no progress display\n";

static void print_summary(const char *what, uint64_t read, uint64_t written, uint64_t skipped,
                          uint64_t bytes_in, uint64_t bytes_out, uint32_t files, double secs)
{
    char in[32], out[32], rate[32];
    printf("%s: %" PRIu64 " rows read, %" PRIu64 " written, %" PRIu64 " skipped; ", what, read,
           written, skipped);
    if (bytes_in > 0) printf("%s in, ", sl_cli_fmt_bytes((double)bytes_in, in, sizeof in));
    printf("%s out in %u file%s; %.2f s (%s rows/s)\n",
           sl_cli_fmt_bytes((double)bytes_out, out, sizeof out), files, files == 1 ? "" : "s",
           secs, sl_cli_fmt_count(secs > 0 ? (double)written / secs : 0, rate, sizeof rate));
}

/* ---- import ---- */

static void import_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice table import --format criteo|jsonl --input FILE [FILE...] --table DIR\n"
            "                           [--partition ds=2026-01-01] [options]\n"
            "Reads the input files in parallel (one thread per file) into one data file each,\n"
            "added to the table only if the whole import succeeds. '-' reads standard input.\n"
            "  --format F              criteo (Criteo click-log TSV) or jsonl\n"
            "  --input FILE...         input files (repeatable; further free arguments too)\n"
            "  --table DIR             the table (created when absent)\n"
            "  --partition P           Hive partition, e.g. ds=2026-01-01 (default: the root)\n"
            "  --schema FILE           jsonl: the schema as JSON (default: the table's, or\n"
            "                          inferred from the first lines)\n"
            "  --infer-lines N         jsonl: lines read to infer a schema (default 1000)\n"
            "  --strict                stop at the first bad row (and import nothing)\n"
            "%s",
            writer_help);
}

typedef struct bad_ctx {
    sl_cli_progress_t *progress;
    bool strict;
} bad_ctx_t;

/* Called on the import's worker threads, one at a time. */
static void on_bad_row_cli(void *ctx, const char *input, uint64_t line, const char *message)
{
    bad_ctx_t *b = ctx;
    /* In strict mode the failure message says it once; don't repeat it. */
    if (b->strict) return;
    if (line > 0)
        sl_cli_progress_message(b->progress, "sluice table import: %s:%" PRIu64 ": %s\n", input,
                                line, message);
    else
        sl_cli_progress_message(b->progress, "sluice table import: %s: %s\n", input, message);
}

static int cmd_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"format", required_argument, 0, 'f'}, {"input", required_argument, 0, 'i'},
        {"table", required_argument, 0, 't'},  {"partition", required_argument, 0, 'p'},
        {"schema", required_argument, 0, 's'}, {"strict", no_argument, 0, OPT_STRICT},
        {"infer-lines", required_argument, 0, OPT_INFER}, WRITER_LONGOPTS, {0, 0, 0, 0}};
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.format = 0;
    wopts_t wo = {.w = sl_wh_writer_opts_default()};
    size_t inputs_size = ((size_t)argc + 1) * sizeof(const char *);
    const char **inputs = sl_calloc(NULL, (size_t)argc + 1, sizeof *inputs);
    if (inputs == NULL) return 1;
    uint32_t ninputs = 0;
    bool quiet = false;
    int c, rc = 0;
    uint64_t v = 0;
    optind = 1;
    while (rc == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            import_usage(stdout);
            sl_free(NULL, inputs, inputs_size);
            wopts_free(&wo);
            return 0;
        case 'f':
            if ((o.format = sl_wh_import_format_parse(optarg)) == 0)
                rc = tcli_usage_error("import", "--format wants criteo or jsonl, got '%s'",
                                      optarg);
            break;
        case 'i': inputs[ninputs++] = optarg; break;
        case 't': o.table_dir = optarg; break;
        case 'p': o.partition = optarg; break;
        case 's': o.schema_path = optarg; break;
        case OPT_STRICT: o.strict = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_INFER:
            if (sl_parse_u64(optarg, 0, 1u << 30, &v, NULL, NULL) != SL_OK || v == 0)
                rc = tcli_usage_error("import", "--infer-lines wants a positive count, got '%s'",
                                      optarg);
            o.infer_lines = (uint32_t)v;
            break;
        case OPT_THREADS:
            if (sl_parse_u64(optarg, 0, 1024, &v, NULL, NULL) != SL_OK || v == 0)
                rc = tcli_usage_error("import", "--threads wants 1..1024, got '%s'", optarg);
            o.threads = (uint32_t)v;
            break;
        case '?': rc = 2; break;
        default: rc = writer_option(&wo, "import", c, optarg); break;
        }
    }
    for (int i = optind; rc == 0 && i < argc; i++) inputs[ninputs++] = argv[i];
    if (rc == 0 && o.format == 0)
        rc = tcli_usage_error("import", "%s", "--format criteo|jsonl is required");
    if (rc == 0 && ninputs == 0)
        rc = tcli_usage_error("import", "%s", "no --input file given");
    if (rc == 0 && o.table_dir == NULL)
        rc = tcli_usage_error("import", "%s", "--table DIR is required");
    if (rc == 0 && o.format == SL_WH_IMPORT_CRITEO && o.schema_path != NULL)
        rc = tcli_usage_error("import", "%s", "--schema is for --format jsonl (criteo's is fixed)");
    if (rc != 0) {
        if (rc < 0) rc = 2;
        sl_free(NULL, inputs, inputs_size);
        wopts_free(&wo);
        return rc;
    }
    sl_cli_progress_t *progress = sl_cli_progress_new(stderr, "importing", !quiet);
    bad_ctx_t bctx = {progress, o.strict};
    o.inputs = inputs;
    o.num_inputs = ninputs;
    o.writer = wo.w;
    o.on_bad_row = on_bad_row_cli;
    o.bad_row_ctx = &bctx;
    o.on_progress = sl_cli_progress_update;
    o.progress_ctx = progress;
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    sl_err_t st = sl_wh_import(&o, &sum, &err);
    sl_cli_progress_finish(progress);
    if (st != SL_OK) {
        fprintf(stderr, "sluice table import: %s\n", err.msg);
        if (sum.rows_skipped > 0 && !o.strict)
            fprintf(stderr, "sluice table import: %" PRIu64 " bad rows before the failure\n",
                    sum.rows_skipped);
        fprintf(stderr, "sluice table import: nothing was added to %s\n", o.table_dir);
        rc = 1;
    } else {
        print_summary("imported", sum.rows_read, sum.rows_written, sum.rows_skipped, sum.bytes_in,
                      sum.bytes_out, sum.files_written, sum.seconds);
        for (uint32_t i = 0; i < sum.num_files; i++)
            if (sum.files[i].rows_skipped > 0)
                printf("  %s: %" PRIu64 " bad row%s, first: %s\n", sum.files[i].input,
                       sum.files[i].rows_skipped, sum.files[i].rows_skipped == 1 ? "" : "s",
                       sum.files[i].first_error);
    }
    sl_wh_import_summary_free(&sum);
    sl_cli_progress_destroy(progress);
    sl_free(NULL, inputs, inputs_size);
    wopts_free(&wo);
    return rc;
}

/* ---- gen ---- */

static void gen_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice table gen --preset criteo|sessions --rows N --table DIR [options]\n"
            "Writes a seeded synthetic table: the same options give the same bytes.\n"
            "  --preset P              criteo (13 dense + 26 single-id sparse + label) or sessions\n"
            "                          (user_id, user_hist ~100 ids, user_cat 20 ids constant in\n"
            "                          a session; item_id, item_cat, item_tags per sample)\n"
            "  --rows N                rows in the whole table\n"
            "  --table DIR             the table (created when absent)\n"
            "  --seed S                PRNG seed (default 1)\n"
            "  --session-length L      mean rows per session (sessions preset: 16)\n"
            "  --active-sessions K     sessions interleaved in arrival order (sessions: 4096)\n"
            "  --partitions P          partitions ds=2026-01-01 ... (default 1)\n"
            "  --files F               data files per partition (default 1)\n"
            "  --overwrite             replace existing part files\n"
            "%s",
            writer_help);
}

static int cmd_gen(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"preset", required_argument, 0, 'P'},       {"rows", required_argument, 0, 'n'},
        {"table", required_argument, 0, 't'},        {"seed", required_argument, 0, 's'},
        {"session-length", required_argument, 0, 'L'},
        {"active-sessions", required_argument, 0, OPT_ACTIVE},
        {"partitions", required_argument, 0, 'p'},   {"files", required_argument, 0, 'F'},
        {"overwrite", no_argument, 0, OPT_OVERWRITE}, WRITER_LONGOPTS, {0, 0, 0, 0}};
    const char *preset = NULL, *table = NULL;
    uint64_t rows = 0, seed = 1, session_length = 0, active = 0, partitions = 1, files = 1;
    uint64_t threads = 0;
    bool have_rows = false, quiet = false;
    wopts_t wo = {.w = sl_wh_writer_opts_default()};
    int c, rc = 0;
    optind = 1;
    while (rc == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            gen_usage(stdout);
            wopts_free(&wo);
            return 0;
        case 'P': preset = optarg; break;
        case 't': table = optarg; break;
        case 'n':
            if (sl_parse_u64(optarg, 0, UINT64_MAX / 2, &rows, NULL, NULL) != SL_OK)
                rc = tcli_usage_error("gen", "--rows wants a count, got '%s'", optarg);
            have_rows = true;
            break;
        case 's':
            if (sl_parse_u64(optarg, 0, UINT64_MAX, &seed, NULL, NULL) != SL_OK)
                rc = tcli_usage_error("gen", "--seed wants an unsigned integer, got '%s'", optarg);
            break;
        case 'L':
            if (sl_parse_u64(optarg, 0, 1u << 20, &session_length, NULL, NULL) != SL_OK || session_length == 0)
                rc = tcli_usage_error("gen", "--session-length wants 1..1048576, got '%s'", optarg);
            break;
        case OPT_ACTIVE:
            if (sl_parse_u64(optarg, 0, 1u << 20, &active, NULL, NULL) != SL_OK || active == 0)
                rc = tcli_usage_error("gen", "--active-sessions wants 1..1048576, got '%s'",
                                      optarg);
            break;
        case 'p':
            if (sl_parse_u64(optarg, 0, 10000, &partitions, NULL, NULL) != SL_OK || partitions == 0)
                rc = tcli_usage_error("gen", "--partitions wants 1..10000, got '%s'", optarg);
            break;
        case 'F':
            if (sl_parse_u64(optarg, 0, 10000, &files, NULL, NULL) != SL_OK || files == 0)
                rc = tcli_usage_error("gen", "--files wants 1..10000, got '%s'", optarg);
            break;
        case OPT_THREADS:
            if (sl_parse_u64(optarg, 0, 256, &threads, NULL, NULL) != SL_OK || threads == 0)
                rc = tcli_usage_error("gen", "--threads wants 1..256, got '%s'", optarg);
            break;
        case OPT_QUIET: quiet = true; break;
        case OPT_OVERWRITE: wo.w.overwrite = true; break;
        case '?': rc = 2; break;
        default: rc = writer_option(&wo, "gen", c, optarg); break;
        }
    }
    if (rc == 0 && optind < argc)
        rc = tcli_usage_error("gen", "unexpected argument '%s'", argv[optind]);
    if (rc == 0 && preset == NULL) rc = tcli_usage_error("gen", "%s", "--preset is required");
    if (rc == 0 && !have_rows) rc = tcli_usage_error("gen", "%s", "--rows is required");
    if (rc == 0 && table == NULL) rc = tcli_usage_error("gen", "%s", "--table DIR is required");
    if (rc == 0 && partitions * files > 100000)
        rc = tcli_usage_error("gen", "%s", "--partitions x --files exceeds 100000 files");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    if (rc == 0 && sl_wh_gen_preset(preset, rows, seed, &spec, &err) != SL_OK)
        rc = tcli_usage_error("gen", "%s", err.msg);
    if (rc != 0) {
        if (rc < 0) rc = 2;
        wopts_free(&wo);
        return rc;
    }
    if (session_length > 0) spec.session_length = (uint32_t)session_length;
    if (active > 0) spec.active_sessions = (uint32_t)active;
    spec.partitions = (uint32_t)partitions;
    spec.files = (uint32_t)files;

    sl_cli_progress_t *progress = sl_cli_progress_new(stderr, "generating", !quiet);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer = wo.w;
    go.threads = (uint32_t)threads;
    go.on_progress = sl_cli_progress_update;
    go.progress_ctx = progress;
    sl_wh_write_stats_t st;
    double t0 = sl_clock_s();
    sl_err_t e = sl_wh_gen_table(table, &spec, &go, &st, &err);
    double secs = sl_clock_s() - t0;
    sl_cli_progress_finish(progress);
    sl_cli_progress_destroy(progress);
    if (e != SL_OK) {
        fprintf(stderr, "sluice table gen: %s\n", err.msg);
        wopts_free(&wo);
        return 1;
    }
    char out[32], rate[32];
    printf("generated: %" PRIu64 " rows, %s in %" PRIu64 " file%s; %.2f s (%s rows/s)\n", st.rows,
           sl_cli_fmt_bytes((double)st.file_bytes, out, sizeof out), partitions * files,
           partitions * files == 1 ? "" : "s", secs,
           sl_cli_fmt_count(secs > 0 ? (double)st.rows / secs : 0, rate, sizeof rate));
    if (st.dedup_unique > 0)
        printf("  storage dedup: %" PRIu64 " group rows stored as %" PRIu64 " unique (%.2fx)\n",
               st.dedup_rows, st.dedup_unique, (double)st.dedup_rows / (double)st.dedup_unique);
    wopts_free(&wo);
    return 0;
}

/* ---- create ---- */

static int cmd_create(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"schema", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *schema_path = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: sluice table create DIR --schema FILE\n"
                   "Creates the table directory DIR with the schema in FILE (JSON: {\"features\":\n"
                   "[{\"name\":\"f\",\"kind\":\"dense|sparse|weighted\"}...], \"labels\": [...]}).\n");
            return 0;
        }
        if (c == 's')
            schema_path = optarg;
        else
            return 2;
    }
    if (optind != argc - 1) return tcli_usage_error("create", "%s", "wants one table directory");
    if (schema_path == NULL) return tcli_usage_error("create", "%s", "--schema FILE is required");
    json_error_t jerr;
    json_t *j = json_load_file(schema_path, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        fprintf(stderr, "sluice table create: %s line %d: %s\n", schema_path, jerr.line,
                jerr.text);
        return 1;
    }
    sl_wh_schema_t *s = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_schema_from_json(j, NULL, &s, &err);
    json_decref(j);
    if (rc == SL_OK) rc = sl_wh_table_create(argv[optind], s, &err);
    sl_wh_schema_destroy(s);
    if (rc != SL_OK) {
        fprintf(stderr, "sluice table create: %s\n", err.msg);
        return 1;
    }
    printf("created %s\n", argv[optind]);
    return 0;
}

int sl_cli_table(int argc, char **argv)
{
    if (argc < 2) {
        table_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        table_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "import") == 0) return cmd_import(argc - 1, argv + 1);
    if (strcmp(cmd, "gen") == 0) return cmd_gen(argc - 1, argv + 1);
    if (strcmp(cmd, "create") == 0) return cmd_create(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0) return tcli_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "verify") == 0) return tcli_verify(argc - 1, argv + 1);
    if (strcmp(cmd, "cat") == 0) return tcli_cat(argc - 1, argv + 1);
    fprintf(stderr, "sluice table: unknown command '%s'\n", cmd);
    table_usage(stderr);
    return 2;
}
