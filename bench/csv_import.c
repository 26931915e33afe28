/* CSV -> table import rate (sluice table import --format csv, in process):
 * Criteo-shaped rows (label, I1..I13 integers with 10 % empty, C1..C26
 * 8-digit hex strings hashed by the mapping with 5 % empty), seeded, at 1
 * and 2 threads (2: the file cut into two record-aligned byte ranges),
 * against baselines measured in the same run: the jsonl importer on the
 * same rows (ids as integers, nothing to hash) and, through
 * bench/csv_baseline.py, Python's csv module parsing the same file into
 * typed values (and pyarrow.csv, one thread, when the python given has
 * pyarrow).
 *
 * Figures: rows/s (wall) and rows/s per core (rows over the process CPU
 * time), the file cached (written just before). Benchmarks print figures;
 * they never pass or fail.
 *
 * Usage: bench_csv_import [--rows N] [--seed S] [--python PY|none] [--dir DIR] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "testutil.h"
#include "warehouse/column_map.h"
#include "warehouse/import.h"

static void write_inputs(const char *csv, const char *jsonl, uint64_t rows, uint64_t seed)
{
    FILE *c = fopen(csv, "w"), *j = fopen(jsonl, "w");
    if (c == NULL || j == NULL) {
        fprintf(stderr, "bench_csv_import: cannot write %s / %s\n", csv, jsonl);
        exit(1);
    }
    fprintf(c, "label");
    for (int i = 1; i <= 13; i++)
        fprintf(c, ",I%d", i);
    for (int i = 1; i <= 26; i++)
        fprintf(c, ",C%d", i);
    fputc('\n', c);
    uint64_t rng = seed;
    for (uint64_t r = 0; r < rows; r++) {
        int label = tu_below(&rng, 4) == 0;
        fprintf(c, "%d", label);
        fprintf(j, "{\"labels\":{\"label\":%d},\"dense\":{", label);
        bool first = true;
        for (int i = 1; i <= 13; i++) {
            if (tu_below(&rng, 10) == 0) {
                fputc(',', c);
                continue;
            }
            unsigned v = (unsigned)tu_below(&rng, 2000);
            fprintf(c, ",%u", v);
            fprintf(j, "%s\"I%d\":%u", first ? "" : ",", i, v);
            first = false;
        }
        fprintf(j, "},\"sparse\":{");
        for (int i = 1; i <= 26; i++) {
            uint32_t id = (uint32_t)(tu_next(&rng) >> 32);
            bool empty = tu_below(&rng, 20) == 0;
            fprintf(c, empty ? "," : ",%08x", id);
            fprintf(j, "%s\"C%d\":[", i == 1 ? "" : ",", i);
            if (!empty) fprintf(j, "%u", id);
            fputc(']', j);
        }
        fputc('\n', c);
        fprintf(j, "}}\n");
    }
    fclose(c);
    fclose(j);
}

typedef struct result {
    double wall, cpu;
    uint64_t rows;
} result_t;

static int run_import(sl_wh_import_format_t fmt, const char *input, const char *table,
                      uint32_t threads, const sl_wh_colmap_t *m, result_t *r)
{
    tu_rm_tree(table);
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.format = fmt;
    o.inputs = &input;
    o.num_inputs = 1;
    o.table_dir = table;
    o.threads = threads;
    o.mapping = m;
    o.writer.no_sync = true;
    sl_wh_import_summary_t s;
    sl_error_t err = {0};
    double w0 = bench_now(), c0 = bench_cpu_seconds();
    sl_err_t rc = sl_wh_import(&o, &s, &err);
    r->wall = bench_now() - w0;
    r->cpu = bench_cpu_seconds() - c0;
    r->rows = s.rows_written;
    sl_wh_import_summary_free(&s);
    if (rc != SL_OK) {
        fprintf(stderr, "bench_csv_import: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void print(const char *what, const result_t *r)
{
    printf("%-34s %9" PRIu64 " rows %7.2f s wall %7.2f s cpu  %7.0fk rows/s  %7.0fk rows/s/core\n",
           what, r->rows, r->wall, r->cpu, (double)r->rows / r->wall / 1e3,
           (double)r->rows / r->cpu / 1e3);
}

int main(int argc, char **argv)
{
    uint64_t rows = 500000, seed = 7;
    const char *python = "python3", *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--python") == 0)
            python = argv[i + 1];
        else if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_csv_import [--rows N] [--seed S] [--python PY|none] "
                            "[--dir DIR]\n");
            return 2;
        }
    }
    char *work = dir ? strdup(dir) : tu_mkdtemp("bench_csv");
    char *csv = tu_path(work, "rows.csv"), *jsonl = tu_path(work, "rows.jsonl");
    char *table = tu_path(work, "t");
    write_inputs(csv, jsonl, rows, seed);
    char mtext[4096] = "{\"labels\": [\"label\"], \"sparse\": [";
    for (int i = 1; i <= 26; i++)
        snprintf(mtext + strlen(mtext), sizeof mtext - strlen(mtext),
                 "%s{\"column\": \"C%d\", \"hash\": {\"seed\": 0}}", i > 1 ? ", " : "", i);
    strcat(mtext, "]}");
    json_t *mj = json_loads(mtext, 0, NULL);
    sl_wh_colmap_t *m = NULL;
    sl_error_t err = {0};
    if (mj == NULL || sl_wh_colmap_parse(mj, NULL, NULL, NULL, NULL, &m, &err) != SL_OK) {
        fprintf(stderr, "bench_csv_import: mapping: %s\n", err.msg);
        return 1;
    }
    json_decref(mj);
    printf("bench_csv_import: %" PRIu64 " Criteo-shaped rows (seed %" PRIu64 "), 1 label, 13 "
           "dense, 26 hashed hex-string ids\n",
           rows, seed);
    result_t r;
    if (run_import(SL_WH_IMPORT_CSV, csv, table, 1, m, &r) != 0) return 1;
    print("sluice csv, 1 thread", &r);
    if (run_import(SL_WH_IMPORT_CSV, csv, table, 2, m, &r) != 0) return 1;
    print("sluice csv, 2 threads (2 ranges)", &r);
    if (run_import(SL_WH_IMPORT_JSONL, jsonl, table, 1, NULL, &r) != 0) return 1;
    print("baseline: sluice jsonl, 1 thread", &r);
    fflush(stdout);
    if (strcmp(python, "none") != 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "'%s' '%s/bench/csv_baseline.py' '%s'", python, SLUICE_SOURCE_DIR,
                 csv);
        FILE *p = popen(cmd, "r");
        char line[512];
        while (p != NULL && fgets(line, sizeof line, p) != NULL) {
            char name[64];
            result_t b;
            if (sscanf(line, "baseline %63s rows %" SCNu64 " seconds %lf cpu %lf", name, &b.rows,
                       &b.wall, &b.cpu) == 4) {
                char what[96];
                snprintf(what, sizeof what, "baseline: %s, 1 thread", name);
                print(what, &b);
            } else
                printf("%s", line);
        }
        if (p != NULL) pclose(p);
    }
    sl_wh_colmap_destroy(m);
    if (dir == NULL) tu_rm_tree(work);
    return 0;
}
