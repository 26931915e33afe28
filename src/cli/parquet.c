/* `sluice parquet inspect | cat`: a Parquet file as sluice's own reader
 * (src/parquet) sees it. inspect prints the footer: schema, leaf columns
 * with their levels, row groups and column chunks (codec, encodings,
 * sizes, statistics); cat prints rows as JSON objects, one a line, keyed
 * by column name (docs/PARQUET.md). The tests compare cat's output with
 * what pyarrow reads from the same files. Exit codes: 0 done, 1 failed, 2
 * usage error. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "parquet/parquet.h"

typedef struct pq_args {
    sl_cli_list_t file;
    const char *columns;
    uint64_t row_group, limit, batch_rows;
} pq_args_t;

#define PA(field) offsetof(pq_args_t, field)
#define PQ_FILE                                                                                    \
    .args = "FILE", .args_doc = "a Parquet file", .min_args = 1, .max_args = 1,                    \
    .args_offset = PA(file)

static const sl_cli_group_t inspect_group = {NULL, NULL, NULL, 0};

const sl_cli_cmd_t sl_cli_parquet_inspect_cmd = {
    .name = "parquet inspect",
    .summary = "schema, row groups, column chunks (codec, encodings, sizes, statistics)",
    .synopsis = "sluice parquet inspect FILE",
    .about = "Prints a Parquet file's footer as sluice's reader decodes it: the schema tree, the "
             "leaf columns with their definition and repetition levels and list layout, the "
             "key-value metadata, and every row group's column chunks with codec, encodings, "
             "offsets, sizes and statistics. No page is read.",
    PQ_FILE,
    .groups = {{&inspect_group, 0}},
};

static const sl_cli_opt_t cat_opts[] = {
    {"columns", SL_CLI_STRING, "a,b", NULL, "all", 0, 0, 0, PA(columns),
     "only these columns (names as inspect prints them, or dotted paths)"},
    {"row-group", SL_CLI_UINT, "N", NULL, "all", 0, UINT32_MAX, 0, PA(row_group),
     "only row group N (from 0)"},
    {"limit", SL_CLI_UINT, "N", NULL, "all rows", 0, UINT64_MAX, 0, PA(limit),
     "at most N rows (0: none)"},
    {"batch-rows", SL_CLI_UINT, "N", "4096", NULL, 1, 1u << 24, 0, PA(batch_rows),
     "rows decoded per batch of each column"},
};
static const sl_cli_group_t cat_group = SL_CLI_OWN_GROUP(cat_opts);

const sl_cli_cmd_t sl_cli_parquet_cat_cmd = {
    .name = "parquet cat",
    .summary = "print rows as JSON objects, one a line",
    .synopsis = "sluice parquet cat FILE [--columns a,b] [--row-group N] [--limit N]",
    .about = "Prints rows as JSON objects, one a line, keyed by column name: numbers as numbers "
             "(INT96 timestamps as nanoseconds since the epoch, other timestamps as stored), "
             "strings as strings, other byte arrays as hex strings, lists as arrays, nulls as "
             "null, NaN and infinities as the strings \"NaN\", \"Infinity\", \"-Infinity\".",
    PQ_FILE,
    .groups = {{&cat_group, 0}},
};

static const sl_cli_cmd_t *const parquet_cmds[] = {&sl_cli_parquet_inspect_cmd,
                                                   &sl_cli_parquet_cat_cmd};
#define NUM_PQ_CMDS (sizeof parquet_cmds / sizeof parquet_cmds[0])

static void parquet_usage(FILE *out)
{
    fprintf(out, "usage: sluice parquet <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < NUM_PQ_CMDS; i++)
        fprintf(out, "  %-8s %s\n", parquet_cmds[i]->name + strlen("parquet "),
                parquet_cmds[i]->summary);
    fprintf(out, "\n`sluice parquet <command> --help` lists a command's options; docs/PARQUET.md "
                 "has the details.\n");
}

static void json_str(FILE *out, const uint8_t *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = s[i];
        if (ch == '"' || ch == '\\') {
            fputc('\\', out);
            fputc(ch, out);
        } else if (ch == '\n') {
            fputs("\\n", out);
        } else if (ch == '\t') {
            fputs("\\t", out);
        } else if (ch == '\r') {
            fputs("\\r", out);
        } else if (ch < 0x20 || ch == 0x7f) {
            fprintf(out, "\\u%04x", ch);
        } else {
            fputc(ch, out);
        }
    }
    fputc('"', out);
}

static void hex(FILE *out, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", s[i]);
}

static void print_float(FILE *out, double v, bool single)
{
    if (isnan(v))
        fputs("\"NaN\"", out);
    else if (isinf(v))
        fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", out);
    else
        fprintf(out, single ? "%.9g" : "%.17g", v);
}

/* ---- inspect ---- */

/* A statistics value, decoded by the column's physical type. */
static void print_stat(const sl_pq_column_t *c, const uint8_t *v, uint32_t n)
{
    if (c->type == SL_PQ_BOOLEAN && n >= 1) {
        printf("%s", v[0] ? "true" : "false");
    } else if (c->type == SL_PQ_INT32 && n == 4) {
        uint32_t u = sl_le_get_u32(v);
        printf(c->is_unsigned ? "%" PRIu32 : "%" PRId32, c->is_unsigned ? u : (uint32_t)(int32_t)u);
    } else if (c->type == SL_PQ_INT64 && n == 8) {
        uint64_t u = sl_le_get_u64(v);
        if (c->is_unsigned)
            printf("%" PRIu64, u);
        else
            printf("%" PRId64, (int64_t)u);
    } else if (c->type == SL_PQ_FLOAT && n == 4) {
        float f;
        memcpy(&f, v, 4);
        print_float(stdout, f, true);
    } else if (c->type == SL_PQ_DOUBLE && n == 8) {
        double d;
        memcpy(&d, v, 8);
        print_float(stdout, d, false);
    } else if (c->is_string) {
        json_str(stdout, v, n);
    } else {
        printf("0x");
        hex(stdout, v, n);
    }
}

static void print_schema(const sl_pq_meta_t *m)
{
    printf("schema:\n");
    for (uint32_t i = 1; i < m->num_elems; i++) {
        const sl_pq_schema_elem_t *e = &m->elems[i];
        int depth = 0;
        for (uint32_t p = e->parent; p != 0; p = m->elems[p].parent)
            depth++;
        static const char *const reps[] = {"required", "optional", "repeated"};
        printf("  %*s%s %s %s", depth * 2, "", reps[e->repetition], sl_pq_type_name(e->type),
               e->name);
        if (e->type == SL_PQ_FIXED_LEN_BYTE_ARRAY) printf(" (length %d)", e->type_length);
        if (e->converted_type >= 0) printf(" converted_type=%d", e->converted_type);
        if (e->logical == SL_PQ_LT_TIMESTAMP || e->logical == SL_PQ_LT_TIME) {
            static const char *const units[] = {"?", "ms", "us", "ns"};
            printf(" logical=%s(%s%s)", e->logical == SL_PQ_LT_TIME ? "TIME" : "TIMESTAMP",
                   units[e->time_unit], e->utc ? ", UTC" : "");
        } else if (e->logical == SL_PQ_LT_INTEGER) {
            printf(" logical=INTEGER(%d, %s)", e->int_bits, e->int_signed ? "signed" : "unsigned");
        } else if (e->logical != SL_PQ_LT_NONE) {
            static const char *const lts[] = {
                "",          "STRING", "MAP",     "LIST",    "ENUM", "DECIMAL", "DATE", "TIME",
                "TIMESTAMP", "",       "INTEGER", "UNKNOWN", "JSON", "BSON",    "UUID", "FLOAT16"};
            printf(" logical=%s", e->logical < 16 ? lts[e->logical] : "?");
        }
        if (e->num_children > 0) printf(" (%d children)", e->num_children);
        printf("\n");
    }
}

/* The file at path opened, its reader in src (close with
 * sl_pq_source_file_close after sl_pq_file_destroy). @return NULL with
 * why printed as "sluice parquet <verb>: ...". */
static sl_pq_file_t *open_file(const char *verb, const char *path, sl_pq_source_t *src)
{
    sl_error_t err = {0};
    sl_pq_file_t *f = NULL;
    if (sl_pq_source_file(path, src, &err) != SL_OK ||
        sl_pq_file_open(src, path, NULL, &f, &err) != SL_OK) {
        fprintf(stderr, "sluice parquet %s: %s\n", verb, err.msg);
        sl_pq_source_file_close(src);
        return NULL;
    }
    return f;
}

static int inspect(const pq_args_t *a)
{
    const char *path = a->file.items[0];
    sl_pq_source_t src;
    sl_pq_file_t *f = open_file("inspect", path, &src);
    if (f == NULL) return 1;
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    printf("file %s: %" PRId64 " rows, %u row groups, %u columns, format version %d, footer %u "
           "bytes\n",
           path, m->num_rows, m->num_row_groups, m->num_columns, m->version, m->footer_len);
    if (m->created_by) printf("created by: %s\n", m->created_by);
    print_schema(m);
    printf("columns:\n");
    for (uint32_t i = 0; i < m->num_columns; i++) {
        const sl_pq_column_t *c = &m->columns[i];
        printf("  %u %s: %s%s, path %s, max definition %d, max repetition %d", i, c->name,
               sl_pq_type_name(c->type), c->is_string ? " (string)" : "", c->path, c->max_def,
               c->max_rep);
        if (c->is_list)
            printf(", %s (element at definition %d)",
                   c->in_struct_list ? "field of a list of structs" : "list", c->elem_def);
        if (c->unsupported) printf(", NOT SUPPORTED: %s", c->unsupported);
        printf("\n");
    }
    for (uint32_t i = 0; i < m->num_kv; i++) {
        const char *v = m->kv[i].value ? m->kv[i].value : "";
        printf("metadata %s: %.*s%s\n", m->kv[i].key, 80, v, strlen(v) > 80 ? "..." : "");
    }
    for (uint32_t g = 0; g < m->num_row_groups; g++) {
        const sl_pq_row_group_t *rg = &m->row_groups[g];
        printf("row group %u: %" PRId64 " rows, %" PRId64 " bytes\n", g, rg->num_rows,
               rg->total_byte_size);
        for (uint32_t i = 0; i < rg->num_chunks; i++) {
            const sl_pq_chunk_t *ch = &rg->chunks[i];
            const sl_pq_column_t *c = &m->columns[i];
            printf("  %s: %s, %" PRId64 " values, %" PRId64 " bytes (%" PRId64
                   " uncompressed), data at %" PRId64,
                   ch->path, sl_pq_codec_name(ch->codec), ch->num_values, ch->total_compressed,
                   ch->total_uncompressed, ch->data_page_offset);
            if (ch->dictionary_page_offset >= 0)
                printf(", dictionary at %" PRId64, ch->dictionary_page_offset);
            printf(", encodings");
            for (int e = 0; e < 32; e++)
                if (ch->encodings & (1u << e)) printf(" %s", sl_pq_encoding_name(e));
            if (!ch->has_stats) {
                printf(", no statistics\n");
                continue;
            }
            if (ch->stats.has_min) {
                printf(", min ");
                print_stat(c, ch->stats.min, ch->stats.min_len);
            }
            if (ch->stats.has_max) {
                printf(", max ");
                print_stat(c, ch->stats.max, ch->stats.max_len);
            }
            if (ch->stats.has_null_count) printf(", nulls %" PRId64, ch->stats.null_count);
            printf("\n");
        }
    }
    sl_pq_file_destroy(f);
    sl_pq_source_file_close(&src);
    return 0;
}

/* ---- cat ---- */

static void print_value(FILE *out, const sl_pq_column_t *c, const sl_pq_batch_t *b, uint32_t s)
{
    if (!b->valid[s]) {
        fputs("null", out);
        return;
    }
    switch (b->kind) {
    case SL_PQ_KIND_I64:
        if (c->type == SL_PQ_BOOLEAN)
            fputs(b->i64[s] ? "true" : "false", out);
        else if (c->is_unsigned && c->type == SL_PQ_INT64)
            fprintf(out, "%" PRIu64, (uint64_t)b->i64[s]);
        else
            fprintf(out, "%" PRId64, b->i64[s]);
        break;
    case SL_PQ_KIND_F32:
        print_float(out, b->f32[s], true);
        break;
    case SL_PQ_KIND_F64:
        print_float(out, b->f64[s], false);
        break;
    case SL_PQ_KIND_BYTES: {
        const uint8_t *p = b->bytes + b->bytes_off[s];
        size_t n = (size_t)(b->bytes_off[s + 1] - b->bytes_off[s]);
        if (c->is_string) {
            json_str(out, p, n);
        } else {
            fputc('"', out);
            hex(out, p, n);
            fputc('"', out);
        }
        break;
    }
    }
}

/* The selected columns' indices: all, or those --columns names. */
static int select_columns(const sl_pq_meta_t *m, const char *list, uint32_t *cols, uint32_t *n)
{
    *n = 0;
    if (list == NULL) {
        for (uint32_t i = 0; i < m->num_columns; i++)
            cols[(*n)++] = i;
        return 0;
    }
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char name[1024];
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "sluice parquet cat: --columns '%s': empty or too long name\n", list);
            return 2;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        int64_t c = sl_pq_find_column(m, name);
        if (c < 0) {
            fprintf(stderr,
                    "sluice parquet cat: no column '%s' (sluice parquet inspect lists "
                    "them)\n",
                    name);
            return 2;
        }
        if (*n >= m->num_columns) {
            fprintf(stderr, "sluice parquet cat: --columns names a column twice\n");
            return 2;
        }
        cols[(*n)++] = (uint32_t)c;
        p += len + (comma ? 1 : 0);
    }
    return 0;
}

/* Print rows of row group g, at most *left (UINT64_MAX: all). */
static sl_err_t cat_group_rows(sl_pq_file_t *f, uint32_t g, const uint32_t *cols, uint32_t n,
                               uint32_t batch, uint64_t *left, sl_error_t *err)
{
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    sl_pq_reader_t **rd = sl_calloc(NULL, n ? n : 1, sizeof *rd);
    const sl_pq_batch_t **bs = sl_calloc(NULL, n ? n : 1, sizeof *bs);
    sl_err_t rc = rd && bs ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; rc == SL_OK && i < n; i++)
        rc = sl_pq_reader_new(f, g, cols[i], &rd[i], err);
    while (rc == SL_OK && *left > 0) {
        uint32_t want = *left < batch ? (uint32_t)*left : batch, rows = 0;
        for (uint32_t i = 0; rc == SL_OK && i < n; i++) {
            rc = sl_pq_reader_next(rd[i], want, &bs[i], err);
            if (rc == SL_OK && i > 0 && bs[i]->rows != rows)
                rc = sl_error_set(
                    err, SL_ERR_CORRUPT, "row group %u: column %s has %u rows where %s has %u", g,
                    m->columns[cols[i]].path, bs[i]->rows, m->columns[cols[0]].path, rows);
            if (rc == SL_OK) rows = bs[i]->rows;
        }
        if (rc != SL_OK || rows == 0 || n == 0) break;
        for (uint32_t r = 0; r < rows; r++) {
            fputc('{', stdout);
            for (uint32_t i = 0; i < n; i++) {
                const sl_pq_column_t *c = &m->columns[cols[i]];
                const sl_pq_batch_t *b = bs[i];
                if (i > 0) fputs(", ", stdout);
                json_str(stdout, (const uint8_t *)c->name, strlen(c->name));
                fputs(": ", stdout);
                if (!c->is_list) {
                    print_value(stdout, c, b, r);
                    continue;
                }
                if (!b->list_valid[r]) {
                    fputs("null", stdout);
                    continue;
                }
                fputc('[', stdout);
                for (uint32_t s = b->list_off[r]; s < b->list_off[r + 1]; s++) {
                    if (s > b->list_off[r]) fputs(", ", stdout);
                    print_value(stdout, c, b, s);
                }
                fputc(']', stdout);
            }
            fputs("}\n", stdout);
        }
        *left -= rows;
    }
    for (uint32_t i = 0; rd != NULL && i < n; i++)
        sl_pq_reader_destroy(rd[i]);
    sl_free(NULL, rd, (n ? n : 1) * sizeof *rd);
    sl_free(NULL, bs, (n ? n : 1) * sizeof *bs);
    return rc;
}

static int cat(const pq_args_t *a, bool limit_given, bool group_given)
{
    const char *path = a->file.items[0];
    sl_error_t err = {0};
    sl_pq_source_t src;
    sl_pq_file_t *f = open_file("cat", path, &src);
    if (f == NULL) return 1;
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    int rc = 0;
    uint32_t *cols = sl_calloc(NULL, m->num_columns ? m->num_columns : 1, sizeof *cols), n = 0;
    if (cols == NULL) {
        fprintf(stderr, "sluice parquet cat: out of memory\n");
        rc = 1;
    } else {
        rc = select_columns(m, a->columns, cols, &n);
    }
    if (rc == 0 && group_given && a->row_group >= m->num_row_groups) {
        fprintf(stderr, "sluice parquet cat: --row-group %" PRIu64 ": the file has %u\n",
                a->row_group, m->num_row_groups);
        rc = 2;
    }
    uint64_t left = limit_given ? a->limit : UINT64_MAX;
    for (uint32_t g = 0; rc == 0 && g < m->num_row_groups && left > 0; g++) {
        if (group_given && g != a->row_group) continue;
        if (cat_group_rows(f, g, cols, n, (uint32_t)a->batch_rows, &left, &err) != SL_OK) {
            fflush(stdout);
            fprintf(stderr, "sluice parquet cat: %s\n", err.msg);
            rc = 1;
        }
    }
    if (rc == 0 && fflush(stdout) != 0) {
        fprintf(stderr, "sluice parquet cat: write failed\n");
        rc = 1;
    }
    sl_free(NULL, cols, (m->num_columns ? m->num_columns : 1) * sizeof *cols);
    sl_pq_file_destroy(f);
    sl_pq_source_file_close(&src);
    return rc;
}

int sl_cli_parquet(int argc, char **argv)
{
    if (argc < 2) {
        parquet_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        parquet_usage(stdout);
        return 0;
    }
    pq_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc;
    if (strcmp(cmd, "inspect") == 0) {
        rc = sl_cli_parse(&sl_cli_parquet_inspect_cmd, argc - 1, argv + 1, &a, &parsed)
                 ? inspect(&a)
                 : parsed.code;
        sl_cli_free(&sl_cli_parquet_inspect_cmd, &a);
        return rc;
    }
    if (strcmp(cmd, "cat") == 0) {
        const sl_cli_cmd_t *c = &sl_cli_parquet_cat_cmd;
        rc = sl_cli_parse(c, argc - 1, argv + 1, &a, &parsed)
                 ? cat(&a, sl_cli_given(c, &parsed, "limit"), sl_cli_given(c, &parsed, "row-group"))
                 : parsed.code;
        sl_cli_free(c, &a);
        return rc;
    }
    fprintf(stderr, "sluice parquet: unknown command '%s'\n", cmd);
    parquet_usage(stderr);
    return 2;
}
