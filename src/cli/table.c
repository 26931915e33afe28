/* `sluice table ...`: create, import, generate, inspect, verify and read
 * feature tables (docs/TABLES.md is the user's guide). This file holds the
 * option tables of create, import and gen (options.h: parsing, --help and
 * the docs' tables come from them) and prints; the work is in src/warehouse (import.h,
 * warehouse.h). The read-side commands (inspect, verify, cat) live in
 * table_show.c. Exit codes: 0 done, 1 failed (or verify found problems),
 * 2 usage error. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "common/suggest.h"
#include "progress.h"
#include "table_cli.h"
#include "warehouse/column_map.h"
#include "warehouse/import.h"
#include "common/mem.h"

#define MAX_GROUPS 32

static const sl_cli_cmd_t *const table_cmds[] = {
    &sl_cli_table_create_cmd,  &sl_cli_table_import_cmd, &sl_cli_table_gen_cmd,
    &sl_cli_table_inspect_cmd, &sl_cli_table_verify_cmd, &sl_cli_table_cat_cmd,
};
#define NUM_TABLE_CMDS (sizeof table_cmds / sizeof table_cmds[0])

static void table_usage(FILE *out)
{
    fprintf(out, "usage: sluice table <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < NUM_TABLE_CMDS; i++)
        fprintf(out, "  %-8s %s\n", table_cmds[i]->name + strlen("table "), table_cmds[i]->summary);
    fprintf(out, "\n`sluice table <command> --help` lists a command's options; docs/TABLES.md has "
                 "examples.\n");
}

/* ---- writer options shared by import and gen ---- */

typedef struct writer_args {
    bool cluster, no_sync, quiet;
    sl_cli_list_t dedup_groups; /* "NAME=F1,F2" */
    uint64_t stripe_rows, level;
} writer_args_t;

#define WA(field) offsetof(writer_args_t, field)

static const sl_cli_opt_t writer_opts[] = {
    {"cluster", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, WA(cluster),
     "order each stripe's rows by (session id, timestamp)"},
    {"dedup-group", SL_CLI_STRING, "NAME=F1,F2", NULL, NULL, 0, 0, SL_CLI_REPEAT, WA(dedup_groups),
     "store these sparse features once per unique row of a stripe plus inverse indices (RecD); "
     "each feature in one group"},
    {"stripe-rows", SL_CLI_UINT, "N", "65536", NULL, 1, 1u << 24, 0, WA(stripe_rows),
     "rows per stripe"},
    {"level", SL_CLI_UINT, "L", "1", NULL, 0, 22, 0, WA(level),
     "zstd level over the encoded streams (higher levels change little: zstd only sees what "
     "the encodings left, docs/FORMAT.md section 10); 0 stores streams in fixed-width form, "
     "without dictionaries or zstd (fastest decode, most bytes)"},
    {"no-sync", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, WA(no_sync),
     "skip fsync (scratch tables; files still appear atomically)"},
    {"quiet", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, WA(quiet), "no progress display"},
};

const sl_cli_group_t sl_cli_writer_group = {"table writer", "writer options of import and gen",
                                            writer_opts,
                                            sizeof writer_opts / sizeof writer_opts[0]};

typedef struct wopts {
    sl_wh_writer_opts_t w;
    sl_dedup_group_spec_t groups[MAX_GROUPS];
    char *group_text[MAX_GROUPS];  /* owned copies the specs point into (cut by strtok) */
    size_t group_size[MAX_GROUPS]; /* bytes of group_text[g] */
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
        return sl_cli_usage_error(cmd, "more than 32 --dedup-group options (at '%s')", text);
    size_t size = strlen(text) + 1;
    char *copy = sl_strdup(NULL, text);
    if (copy == NULL) return 1;
    char *eq = strchr(copy, '=');
    if (eq == NULL || eq == copy || eq[1] == '\0') {
        sl_free(NULL, copy, size);
        return sl_cli_usage_error(cmd, "--dedup-group wants NAME=FEATURE,FEATURE..., got '%s'",
                                  text);
    }
    *eq = '\0';
    uint32_t n = 1;
    for (const char *p = eq + 1; *p; p++)
        n += *p == ',';
    uint32_t cap = n;
    const char **feats = sl_calloc(NULL, cap, sizeof *feats);
    if (feats == NULL) {
        sl_free(NULL, copy, size);
        return 1;
    }
    n = 0;
    for (char *tok = strtok(eq + 1, ","); tok != NULL; tok = strtok(NULL, ","))
        feats[n++] = tok;
    if (n == 0) {
        sl_free(NULL, feats, cap * sizeof *feats);
        sl_free(NULL, copy, size);
        return sl_cli_usage_error(cmd, "--dedup-group '%s' names no feature", text);
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

/* The writer's options from the values of the writer group. @return 0, or
 * the exit code of a usage error (printed). */
static int writer_from_args(const writer_args_t *a, const char *cmd, wopts_t *o)
{
    o->w = sl_wh_writer_opts_default();
    o->w.cluster_sessions = a->cluster;
    o->w.no_sync = a->no_sync;
    o->w.stripe_rows = (uint32_t)a->stripe_rows;
    if (a->level == 0)
        o->w.codec = SL_WH_CODEC_NONE;
    else
        o->w.zstd_level = (int)a->level;
    for (uint32_t i = 0; i < a->dedup_groups.count; i++) {
        int rc = add_group(o, cmd, a->dedup_groups.items[i]);
        if (rc != 0) return rc;
    }
    return 0;
}

static void print_summary(const char *what, uint64_t read, uint64_t written, uint64_t skipped,
                          uint64_t bytes_in, uint64_t bytes_out, uint32_t files, double secs)
{
    char in[32], out[32], rate[32];
    printf("%s: %" PRIu64 " rows read, %" PRIu64 " written, %" PRIu64 " skipped; ", what, read,
           written, skipped);
    if (bytes_in > 0) printf("%s in, ", sl_cli_fmt_bytes((double)bytes_in, in, sizeof in));
    printf("%s out in %u file%s; %.2f s (%s rows/s)\n",
           sl_cli_fmt_bytes((double)bytes_out, out, sizeof out), files, files == 1 ? "" : "s", secs,
           sl_cli_fmt_count(secs > 0 ? (double)written / secs : 0, rate, sizeof rate));
}

/* ---- import ---- */

typedef struct import_args {
    const char *format, *table, *partition, *schema, *mapping, *delimiter, *max_skipped;
    sl_cli_list_t input, files; /* --input values, then the free arguments */
    uint64_t infer_lines, threads;
    bool strict, print_mapping;
    writer_args_t w;
} import_args_t;

#define IA(field) offsetof(import_args_t, field)

static const sl_cli_opt_t import_opts[] = {
    {"format", SL_CLI_ENUM, "criteo|jsonl|csv|parquet", NULL, NULL, 0, 0, SL_CLI_REQUIRED,
     IA(format),
     "criteo (Criteo click-log TSV), jsonl, csv (a header row, RFC 4180 quoting), or parquet "
     "(files read with sluice's own reader, docs/PARQUET.md)"},
    {"input", SL_CLI_PATH, "FILE", NULL, NULL, 0, 0, SL_CLI_REPEAT, IA(input),
     "an input file, plain or gzip/zstd-compressed text (told by its first bytes; further free "
     "arguments are inputs too); '-' is standard input"},
    {"table", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, SL_CLI_REQUIRED, IA(table),
     "the table, a directory or s3://BUCKET/PREFIX (written under TMPDIR, then uploaded, its "
     "_schema last: docs/STORAGE.md); created (with the schema) when absent"},
    {"partition", SL_CLI_STRING, "P", NULL, "the table root", 0, 0, 0, IA(partition),
     "the Hive partition to add to, e.g. ds=2026-01-01"},
    {"schema", SL_CLI_FILE, "FILE", NULL, "the existing table's, else inferred from the input", 0,
     0, 0, IA(schema), "jsonl only: the schema (its JSON form: `table create`)"},
    {"infer-lines", SL_CLI_UINT, "N", "1000", NULL, 1, 1u << 30, 0, IA(infer_lines),
     "jsonl: lines read to infer a schema; csv: records read to infer the column types"},
    {"mapping", SL_CLI_FILE, "FILE", NULL, "every column inferred by type", 0, 0, 0, IA(mapping),
     "csv and parquet: the column mapping (docs/TABLES.md, \"The column mapping\")"},
    {"delimiter", SL_CLI_STRING, "C", ",", NULL, 0, 0, 0, IA(delimiter),
     "csv only: the field delimiter, one character ('tab' or '\\t' for a tab)"},
    {"print-mapping", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, IA(print_mapping),
     "csv and parquet: print the mapping in use (inferred or given, every column named) as JSON on "
     "stdout, the column types and the ignored columns on stderr, and import nothing; edit it "
     "and give it back with --mapping"},
    {"max-skipped-fraction", SL_CLI_STRING, "F", "0.01", NULL, 0, 0, 0, IA(max_skipped),
     "refuse the import (it adds nothing and exits 1) when more than this fraction of the rows "
     "read are bad; an import that writes no row is always refused"},
    {"strict", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, IA(strict),
     "stop at the first bad row; the import then fails and adds nothing"},
    {"threads", SL_CLI_UINT, "N", NULL, "one per input, at most the online cores", 1, 1024, 0,
     IA(threads),
     "worker threads (one reads one input file at a time; csv: a plain file is cut into byte "
     "ranges read in parallel when threads outnumber inputs)"},
};

static const sl_cli_group_t import_group = SL_CLI_OWN_GROUP(import_opts);

const sl_cli_cmd_t sl_cli_table_import_cmd = {
    .name = "table import",
    .summary = "import Criteo TSV, jsonl, CSV or Parquet files into a partition",
    .synopsis =
        "sluice table import --format criteo|jsonl|csv|parquet --input FILE [FILE...] --table DIR "
        "[options]",
    .about = "Reads the input files in parallel (one thread per file, or per byte range of a "
             "plain CSV file, or per range of row groups of a Parquet file) into one data file "
             "each, added to the table only if the whole "
             "import succeeds. Gzip and zstd input is decompressed on the fly; input that is not "
             "text is refused; an import that writes no row, or skips more than "
             "--max-skipped-fraction of its rows, is refused.",
    .args = "FILE",
    .args_doc = "input files",
    .max_args = UINT32_MAX,
    .args_offset = IA(files),
    .groups = {{&import_group, 0}, {&sl_cli_writer_group, IA(w)}},
};

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

static int import_table(const import_args_t *a, const char **inputs, uint32_t ninputs, wopts_t *wo);

/* Parquet inputs: a directory stands for the .parquet files under it, at
 * any depth (Hive partition folders), in name order; names starting with
 * '.' or '_' (_SUCCESS, _metadata, staging files) are skipped. */
typedef struct pq_inputs {
    char **paths;
    uint32_t n, cap;
} pq_inputs_t;

static int pq_add(pq_inputs_t *l, const char *path)
{
    if (l->n == l->cap && !SL_GROW(NULL, l->paths, l->cap, l->n + 1, 16)) return -1;
    if ((l->paths[l->n] = sl_strdup(NULL, path)) == NULL) return -1;
    l->n++;
    return 0;
}

static int name_cmp(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* @return 0, or -1 with the reason printed. depth bounds symlink loops. */
static int pq_walk(pq_inputs_t *l, const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return pq_add(l, path);
    if (depth > 32) {
        fprintf(stderr, "sluice table import: %s: directories nested over 32 deep\n", path);
        return -1;
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "sluice table import: %s: %s\n", path, strerror(errno));
        return -1;
    }
    pq_inputs_t names = {0};
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || e->d_name[0] == '_') continue;
        char *full = sl_strfmt(NULL, "%s/%s", path, e->d_name);
        struct stat es;
        if (full == NULL)
            rc = -1;
        else if (stat(full, &es) == 0 &&
                 (S_ISDIR(es.st_mode) ||
                  (strlen(e->d_name) > 8 &&
                   strcmp(e->d_name + strlen(e->d_name) - 8, ".parquet") == 0)))
            rc = pq_add(&names, full);
        sl_strfree(NULL, full);
    }
    closedir(d);
    if (names.n > 1) qsort(names.paths, names.n, sizeof *names.paths, name_cmp);
    for (uint32_t i = 0; rc == 0 && i < names.n; i++)
        rc = pq_walk(l, names.paths[i], depth + 1);
    for (uint32_t i = 0; i < names.n; i++)
        sl_strfree(NULL, names.paths[i]);
    sl_free(NULL, names.paths, (size_t)names.cap * sizeof *names.paths);
    return rc;
}

static void pq_inputs_free(pq_inputs_t *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        sl_strfree(NULL, l->paths[i]);
    sl_free(NULL, l->paths, (size_t)l->cap * sizeof *l->paths);
}

static int cmd_import(int argc, char **argv)
{
    const sl_cli_cmd_t *cmd = &sl_cli_table_import_cmd;
    import_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc = 2;
    const char **inputs = NULL;
    wopts_t wo = {0};
    if (!sl_cli_parse(cmd, argc, argv, &a, &parsed)) {
        rc = parsed.code;
    } else if (a.input.count + a.files.count == 0) {
        rc = sl_cli_usage_error(cmd->name, "%s", "no --input file given");
    } else if (strcmp(a.format, "criteo") == 0 && a.schema != NULL) {
        rc = sl_cli_usage_error(cmd->name, "%s",
                                "--schema is for --format jsonl (criteo's is fixed)");
    } else if (strcmp(a.format, "csv") == 0 && a.schema != NULL) {
        rc = sl_cli_usage_error(cmd->name, "%s",
                                "--schema is for --format jsonl (csv takes --mapping)");
    } else if (strcmp(a.format, "parquet") == 0 && a.schema != NULL) {
        rc = sl_cli_usage_error(cmd->name, "%s",
                                "--schema is for --format jsonl (parquet takes --mapping)");
    } else if (strcmp(a.format, "csv") != 0 && strcmp(a.format, "parquet") != 0 &&
               (a.mapping != NULL || a.print_mapping)) {
        rc = sl_cli_usage_error(cmd->name, "%s",
                                "--mapping and --print-mapping are for --format csv and parquet");
    } else if ((rc = writer_from_args(&a.w, cmd->name, &wo)) == 0) {
        inputs = sl_calloc(NULL, (size_t)a.input.count + a.files.count, sizeof *inputs);
        if (inputs == NULL) {
            rc = 1;
        } else {
            for (uint32_t i = 0; i < a.input.count; i++)
                inputs[i] = a.input.items[i];
            for (uint32_t i = 0; i < a.files.count; i++)
                inputs[a.input.count + i] = a.files.items[i];
            uint32_t n = a.input.count + a.files.count;
            if (strcmp(a.format, "parquet") != 0) {
                rc = import_table(&a, inputs, n, &wo);
            } else {
                pq_inputs_t l = {0};
                rc = 0;
                for (uint32_t i = 0; rc == 0 && i < n; i++)
                    if (pq_walk(&l, inputs[i], 0) != 0) rc = 1;
                if (rc == 0 && l.n == 0) {
                    fprintf(stderr, "sluice table import: no .parquet file in the inputs\n");
                    rc = 1;
                }
                if (rc == 0) rc = import_table(&a, (const char **)l.paths, l.n, &wo);
                pq_inputs_free(&l);
            }
        }
    }
    if (inputs != NULL)
        sl_free(NULL, inputs, ((size_t)a.input.count + a.files.count) * sizeof *inputs);
    wopts_free(&wo);
    sl_cli_free(cmd, &a);
    return rc;
}

/* The import, once its options parsed. @return the exit code. */
/* --delimiter: one byte, or "tab" / "\t". @return 0 when it is none of these. */
static char parse_delimiter(const char *s)
{
    if (strcmp(s, "tab") == 0 || strcmp(s, "\\t") == 0 || strcmp(s, "\t") == 0) return '\t';
    if (strlen(s) != 1 || s[0] == '"' || s[0] == '\n' || s[0] == '\r') return 0;
    return s[0];
}

/* A column mapping's problems, each on its line; ctx counts them. */
static void print_problem(void *ctx, const char *problem)
{
    (*(uint32_t *)ctx)++;
    fprintf(stderr, "sluice table import: %s\n", problem);
}

/* After a failure: the problems printed one by one already say it all. */
static void print_failure(uint32_t problems, const char *msg)
{
    if (problems > 0)
        fprintf(stderr, "sluice table import: the column mapping has %u problem%s (above)\n",
                problems, problems == 1 ? "" : "s");
    else
        fprintf(stderr, "sluice table import: %s\n", msg);
}

/* --print-mapping: the mapping the import would use, and nothing imported. */
static int print_mapping(const char *input, bool parquet, char delim, uint32_t infer_lines,
                         const sl_wh_colmap_t *m)
{
    sl_wh_csv_t *csv = NULL;
    sl_wh_colmap_resolved_t *pr = NULL;
    sl_error_t err = {0};
    uint32_t problems = 0;
    if ((parquet ? sl_wh_parquet_mapping(input, m, NULL, print_problem, &problems, &pr, &err)
                 : sl_wh_csv_open(input, delim, infer_lines, m, NULL, print_problem, &problems,
                                  &csv, &err)) != SL_OK) {
        print_failure(problems, err.msg);
        return 1;
    }
    const sl_wh_colmap_resolved_t *r = parquet ? pr : sl_wh_csv_mapping(csv);
    for (uint32_t c = 0; c < r->num_columns; c++)
        fprintf(stderr, "column %u %s: %s%s\n", c + 1, r->columns[c].name,
                sl_wh_coltype_name(r->columns[c].type), r->column_uses[c] ? "" : " (ignored)");
    for (uint32_t i = 0; i < r->num_ignored; i++)
        fprintf(stderr, "ignored: %s\n", r->ignored[i]);
    json_t *j = sl_wh_colmap_resolved_to_json(r);
    int rc = j != NULL && json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    printf("\n");
    json_decref(j);
    sl_wh_csv_destroy(csv);
    sl_wh_colmap_resolved_destroy(pr);
    return rc;
}

static int import_table(const import_args_t *a, const char **inputs, uint32_t ninputs, wopts_t *wo)
{
    int rc = 0;
    bool quiet = a->w.quiet;
    char delim = parse_delimiter(a->delimiter);
    if (delim == 0)
        return sl_cli_usage_error(sl_cli_table_import_cmd.name,
                                  "--delimiter '%s': one character (not a quote or a newline), "
                                  "or 'tab'",
                                  a->delimiter);
    char *end;
    double frac = strtod(a->max_skipped, &end);
    if (*end != '\0' || end == a->max_skipped || !(frac >= 0 && frac <= 1))
        return sl_cli_usage_error(sl_cli_table_import_cmd.name,
                                  "--max-skipped-fraction '%s': a number in [0, 1]",
                                  a->max_skipped);
    sl_wh_colmap_t *mapping = NULL;
    if (a->mapping != NULL) {
        sl_error_t merr = {0};
        uint32_t problems = 0;
        if (sl_wh_colmap_load(a->mapping, NULL, print_problem, &problems, &mapping, &merr) !=
            SL_OK) {
            print_failure(problems, merr.msg);
            return 1;
        }
    }
    if (a->print_mapping) {
        rc = print_mapping(inputs[0], strcmp(a->format, "parquet") == 0, delim,
                           (uint32_t)a->infer_lines, mapping);
        sl_wh_colmap_destroy(mapping);
        return rc;
    }
    uint32_t problems = 0;
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.on_mapping_problem = print_problem;
    o.mapping_problem_ctx = &problems;
    o.delimiter = delim;
    o.mapping = mapping;
    o.max_skipped_fraction = frac;
    o.format = sl_wh_import_format_parse(a->format);
    o.table_dir = a->table;
    o.partition = a->partition;
    o.schema_path = a->schema;
    o.strict = a->strict;
    o.infer_lines = (uint32_t)a->infer_lines;
    o.threads = (uint32_t)a->threads;
    sl_cli_progress_t *progress = sl_cli_progress_new(stderr, "importing", !quiet);
    bad_ctx_t bctx = {progress, o.strict};
    o.inputs = inputs;
    o.num_inputs = ninputs;
    o.writer = wo->w;
    o.on_bad_row = on_bad_row_cli;
    o.bad_row_ctx = &bctx;
    o.on_progress = sl_cli_progress_update;
    o.progress_ctx = progress;
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    sl_err_t st = sl_wh_import(&o, &sum, &err);
    sl_cli_progress_finish(progress);
    if (st != SL_OK) {
        print_failure(problems, err.msg);
        if (sum.rows_skipped > 0 && !o.strict) {
            fprintf(stderr,
                    "sluice table import: %" PRIu64 " bad rows of %" PRIu64 " read; the first:\n",
                    sum.rows_skipped, sum.rows_read);
            for (uint32_t i = 0; i < sum.num_first_bad; i++)
                fprintf(stderr, "  %s\n", sum.first_bad[i]);
        }
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
    sl_wh_colmap_destroy(mapping);
    return rc;
}

/* ---- gen ---- */

typedef struct gen_args {
    const char *preset, *table;
    uint64_t rows, seed, session_length, active, partitions, files, threads;
    bool overwrite;
    writer_args_t w;
} gen_args_t;

#define GA(field) offsetof(gen_args_t, field)

static const sl_cli_opt_t gen_opts[] = {
    {"preset", SL_CLI_STRING, "criteo|sessions", NULL, NULL, 0, 0, SL_CLI_REQUIRED, GA(preset),
     "criteo (13 dense + 26 single-id sparse features + label) or sessions (user features "
     "constant within a session, item features per sample): docs/TABLES.md, gen"},
    {"rows", SL_CLI_UINT, "N", NULL, NULL, 0, UINT64_MAX / 2, SL_CLI_REQUIRED, GA(rows),
     "rows in the whole table, split evenly over the files"},
    {"table", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, SL_CLI_REQUIRED, GA(table),
     "the table (created when absent; an existing one must have the same schema)"},
    {"seed", SL_CLI_UINT, "S", "1", NULL, 0, UINT64_MAX, 0, GA(seed), "PRNG seed"},
    {"session-length", SL_CLI_UINT, "L", NULL, "the preset's (sessions: 16)", 1, 1u << 20, 0,
     GA(session_length), "mean rows per session (lengths uniform in [1, 2L-1])"},
    {"active-sessions", SL_CLI_UINT, "K", NULL, "the preset's (sessions: 4096)", 1, 1u << 20, 0,
     GA(active), "sessions interleaved in arrival order"},
    {"partitions", SL_CLI_UINT, "P", "1", NULL, 1, 10000, 0, GA(partitions),
     "partitions ds=2026-01-01, ds=2026-01-02, ..."},
    {"files", SL_CLI_UINT, "F", "1", NULL, 1, 10000, 0, GA(files),
     "data files per partition, part-00000.slc ... (partitions x files at most 100000)"},
    {"overwrite", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, GA(overwrite),
     "replace existing part files"},
    {"threads", SL_CLI_UINT, "N", NULL, "online cores", 1, 256, 0, GA(threads), "worker threads"},
};

static const sl_cli_group_t gen_group = SL_CLI_OWN_GROUP(gen_opts);

const sl_cli_cmd_t sl_cli_table_gen_cmd = {
    .name = "table gen",
    .summary = "write a seeded synthetic table (criteo, sessions presets)",
    .synopsis = "sluice table gen --preset criteo|sessions --rows N --table DIR [options]",
    .about = "Writes a seeded synthetic table: the same options give the same bytes.",
    .groups = {{&gen_group, 0}, {&sl_cli_writer_group, GA(w)}},
};

static int gen_table(const gen_args_t *a, wopts_t *wo);

static int cmd_gen(int argc, char **argv)
{
    const sl_cli_cmd_t *cmd = &sl_cli_table_gen_cmd;
    gen_args_t a = {0};
    sl_cli_parsed_t parsed;
    wopts_t wo = {0};
    int rc;
    if (!sl_cli_parse(cmd, argc, argv, &a, &parsed))
        rc = parsed.code;
    else if (a.partitions * a.files > 100000)
        rc = sl_cli_usage_error(cmd->name, "%s", "--partitions x --files exceeds 100000 files");
    else if ((rc = writer_from_args(&a.w, cmd->name, &wo)) == 0)
        rc = gen_table(&a, &wo);
    wopts_free(&wo);
    sl_cli_free(cmd, &a);
    return rc;
}

/* The generation, once its options parsed. @return the exit code. */
static int gen_table(const gen_args_t *a, wopts_t *wo)
{
    const char *table = a->table;
    uint64_t partitions = a->partitions, files = a->files;
    bool quiet = a->w.quiet;
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    if (sl_wh_gen_preset(a->preset, a->rows, a->seed, &spec, &err) != SL_OK)
        return sl_cli_usage_error("table gen", "%s", err.msg);
    uint64_t session_length = a->session_length, active = a->active;
    if (session_length > 0) spec.session_length = (uint32_t)session_length;
    if (active > 0) spec.active_sessions = (uint32_t)active;
    spec.partitions = (uint32_t)partitions;
    spec.files = (uint32_t)files;

    sl_cli_progress_t *progress = sl_cli_progress_new(stderr, "generating", !quiet);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer = wo->w;
    go.writer.overwrite = a->overwrite;
    go.threads = (uint32_t)a->threads;
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
    return 0;
}

/* ---- create ---- */

typedef struct create_args {
    sl_cli_list_t dir;
    const char *schema;
} create_args_t;

static const sl_cli_opt_t create_opts[] = {
    {"schema", SL_CLI_FILE, "FILE", NULL, NULL, 0, 0, SL_CLI_REQUIRED,
     offsetof(create_args_t, schema),
     "the schema as JSON: {\"features\": [{\"name\": \"f\", \"kind\": "
     "\"dense|sparse|weighted\"}...], "
     "\"labels\": [...]}"},
};

static const sl_cli_group_t create_group = SL_CLI_OWN_GROUP(create_opts);

const sl_cli_cmd_t sl_cli_table_create_cmd = {
    .name = "table create",
    .summary = "create an empty table from a JSON schema",
    .synopsis = "sluice table create DIR --schema FILE",
    .about = "Creates the table directory DIR with the schema in FILE.",
    .args = "DIR",
    .args_doc = "table directory",
    .min_args = 1,
    .max_args = 1,
    .args_offset = offsetof(create_args_t, dir),
    .groups = {{&create_group, 0}},
};

static int create_table(const char *dir, const char *schema_path);

static int cmd_create(int argc, char **argv)
{
    create_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc = sl_cli_parse(&sl_cli_table_create_cmd, argc, argv, &a, &parsed)
                 ? create_table(a.dir.items[0], a.schema)
                 : parsed.code;
    sl_cli_free(&sl_cli_table_create_cmd, &a);
    return rc;
}

static int create_table(const char *dir, const char *schema_path)
{
    json_error_t jerr;
    json_t *j = json_load_file(schema_path, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        fprintf(stderr, "sluice table create: %s line %d: %s\n", schema_path, jerr.line, jerr.text);
        return 1;
    }
    sl_wh_schema_t *s = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_schema_from_json(j, NULL, &s, &err);
    json_decref(j);
    if (rc == SL_OK) rc = sl_wh_table_create(dir, s, &err);
    sl_wh_schema_destroy(s);
    if (rc != SL_OK) {
        fprintf(stderr, "sluice table create: %s\n", err.msg);
        return 1;
    }
    printf("created %s\n", dir);
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
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } verbs[] = {{"import", cmd_import},    {"gen", cmd_gen},        {"create", cmd_create},
                 {"inspect", tcli_inspect}, {"verify", tcli_verify}, {"cat", tcli_cat}};
    sl_suggest_t sg;
    sl_suggest_init(&sg, cmd, strlen(cmd));
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(cmd, verbs[i].name) == 0) return verbs[i].run(argc - 1, argv + 1);
        sl_suggest_offer_str(&sg, verbs[i].name);
    }
    char hint[160];
    fprintf(stderr, "sluice table: unknown command '%s'%s\n", cmd,
            sl_suggest_hint(&sg, "", hint, sizeof hint));
    table_usage(stderr);
    return 2;
}
