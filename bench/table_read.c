/* Read throughput of a generated `criteo` table on one core: every feature,
 * and ~10 % of the features (projection: I1, I2, C1, C2 of 39), with
 * checksums verified (and, for comparison, skipped). Against the baseline
 * measured in the same run: copying the same raw uncompressed column bytes
 * from memory (the decoded table held in RAM, copied stripe by stripe into
 * a reused buffer - what an in-memory loader of uncompressed arrays does).
 *
 * Figures: rows/s per core (rows over the process CPU time of the read),
 * decoded MB/s (bytes of the output tensors) and file MB/s (bytes read from
 * the files, page cache warm: the table is read once before timing).
 * Target: >= 4 M rows/s per core for all features with checksums.
 *
 * Usage: bench_table_read [--rows N] [--level L (-1: stored)] [--reps R] [--table DIR]
 * (--table: generate into DIR and keep it, or read DIR if it holds a table:
 * for profiling the read alone). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "testutil.h"
#include "warehouse/import.h"

typedef struct result {
    double wall, cpu;
    uint64_t rows, decoded, file_bytes, stripes;
} result_t;

/* Read every file of the table once with opts; sums into r. */
static int read_table(const sl_wh_table_t *t, const char *dir, const sl_wh_read_opts_t *opts,
                      result_t *r)
{
    memset(r, 0, sizeof *r);
    double w0 = bench_now(), c0 = bench_cpu_seconds();
    for (uint32_t p = 0; p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        for (uint32_t f = 0; f < part->num_files; f++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, part->files[f]);
            sl_wh_reader_t *rd;
            sl_error_t err = {0};
            if (sl_wh_reader_open(path, part->files[f], opts, &rd, &err) != SL_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return -1;
            }
            const sl_wh_rows_t *rows;
            for (;;) {
                if (sl_wh_reader_next(rd, &rows, &err) != SL_OK) {
                    fprintf(stderr, "%s\n", err.msg);
                    sl_wh_reader_close(rd);
                    return -1;
                }
                if (rows == NULL) break;
                /* Touch the output so that nothing is optimised away. */
                bench_consume(rows->batch.sample_ids, 8);
            }
            sl_wh_read_stats_t st;
            sl_wh_reader_stats(rd, &st);
            r->rows += st.rows;
            r->decoded += st.decoded_bytes;
            r->file_bytes += st.bytes_read;
            r->stripes += st.stripes;
            sl_wh_reader_close(rd);
        }
    }
    r->wall = bench_now() - w0;
    r->cpu = bench_cpu_seconds() - c0;
    return 0;
}

static void print_result(const char *what, const result_t *r)
{
    double t = r->cpu > 0 ? r->cpu : r->wall;
    printf("  %-44s %9.2f %9.0f %9.0f %9.3f\n", what, (double)r->rows / t / 1e6,
           (double)r->decoded / t / 1e6, (double)r->file_bytes / t / 1e6, t);
}

/* Best of reps by CPU time. */
static int best_of(const sl_wh_table_t *t, const char *dir, const sl_wh_read_opts_t *o, int reps,
                   result_t *best)
{
    result_t r;
    for (int i = 0; i < reps; i++) {
        if (read_table(t, dir, o, &r) != 0) return -1;
        if (i == 0 || r.cpu < best->cpu) *best = r;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t rows = 2000000;
    int level = 0, reps = 3;
    const char *keep = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0) rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--level") == 0) level = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--table") == 0) keep = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_table_read [--rows N] [--level L] [--reps R] [--table DIR]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[512];
    if (keep != NULL) {
        snprintf(dir, sizeof dir, "%s", keep);
    } else {
        snprintf(dir, sizeof dir, "%s/sluice-bench-read-XXXXXX", tmp);
        if (mkdtemp(dir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
        strcat(dir, "/criteo");
    }
    char schema_path[600];
    snprintf(schema_path, sizeof schema_path, "%s/_schema", dir);
    sl_error_t err = {0};
    FILE *exists = keep ? fopen(schema_path, "rb") : NULL;
    if (exists != NULL) {
        fclose(exists);
        printf("bench_table_read: reading the table in %s\n", dir);
    } else {
        sl_wh_gen_spec_t spec;
        sl_wh_gen_preset("criteo", rows, 42, &spec, &err);
        spec.files = 2; /* generated in parallel; read on one core */
        sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
        go.writer.no_sync = true;
        if (level > 0) go.writer.zstd_level = level;
        if (level < 0) go.writer.codec = SL_WH_CODEC_NONE;
        sl_wh_write_stats_t ws;
        double g0 = bench_now();
        if (sl_wh_gen_table(dir, &spec, &go, &ws, &err) != SL_OK) {
            fprintf(stderr, "gen: %s\n", err.msg);
            return 1;
        }
        char lv[32];
        if (level < 0)
            snprintf(lv, sizeof lv, "none (stored)");
        else if (level == 0)
            snprintf(lv, sizeof lv, "%d (writer default)", sl_wh_writer_opts_default().zstd_level);
        else
            snprintf(lv, sizeof lv, "%d", level);
        printf("bench_table_read: criteo preset, %" PRIu64 " rows in %u stripes, %.1f MB in "
               "files (%.1f B/row), zstd level %s; generated in %.1f s\n",
               ws.rows, ws.stripes, (double)ws.file_bytes / 1e6,
               (double)ws.file_bytes / (double)ws.rows, lv, bench_now() - g0);
    }

    sl_wh_table_t *t;
    if (sl_wh_table_open(dir, NULL, &t, &err) != SL_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    sl_wh_read_opts_t all = {0}, nosum = {0}, proj = {0};
    nosum.skip_checksums = true;
    static const char *const few[] = {"I1", "I2", "C1", "C2"};
    proj.features = few;
    proj.num_features = 4;
    result_t warm, r_all, r_nosum, r_proj;
    if (read_table(t, dir, &all, &warm) != 0) return 1; /* page cache, allocator */
    if (best_of(t, dir, &all, reps, &r_all) != 0 || best_of(t, dir, &nosum, reps, &r_nosum) != 0 ||
        best_of(t, dir, &proj, reps, &r_proj) != 0)
        return 1;

    /* Baseline: the decoded bytes of the all-features read, resident in
     * memory, copied stripe by stripe into one reused stripe buffer. */
    size_t total = (size_t)r_all.decoded, stripe = (size_t)(total / (r_all.stripes ? r_all.stripes : 1));
    unsigned char *src = malloc(total + 64), *dst = malloc(stripe + 64);
    if (src == NULL || dst == NULL) return 1;
    memset(src, 0x5a, total);
    memset(dst, 0, stripe);
    double best = 1e30;
    for (int i = 0; i < reps + 2; i++) {
        double c0 = bench_now();
        for (size_t off = 0; off < total; off += stripe) {
            size_t n = total - off < stripe ? total - off : stripe;
            memcpy(dst, src + off, n);
            bench_consume(dst, n);
        }
        double tm = bench_now() - c0;
        if (tm < best) best = tm;
    }
    result_t base = {.wall = best, .cpu = best, .rows = r_all.rows, .decoded = total,
                     .file_bytes = total};
    free(src);
    free(dst);

    printf("  %-44s %9s %9s %9s %9s\n", "read (one core, best of reps)", "Mrows/s", "dec MB/s",
           "file MB/s", "cpu s");
    print_result("all 39 features, checksums verified", &r_all);
    print_result("all 39 features, checksums skipped", &r_nosum);
    print_result("4 of 39 features (I1 I2 C1 C2), checksums", &r_proj);
    print_result("baseline: memcpy of the decoded bytes", &base);
    double t_all = r_all.cpu > 0 ? r_all.cpu : r_all.wall;
    printf("  decoded bytes per row: %.1f (all), %.1f (projection); table read / memcpy time: "
           "%.1fx\n",
           (double)r_all.decoded / (double)r_all.rows, (double)r_proj.decoded / (double)r_proj.rows,
           t_all / best);
    printf("  target >= 4 M rows/s per core (all features, checksums): %s (%.2f M rows/s)\n",
           (double)r_all.rows / t_all >= 4e6 ? "met" : "MISSED", (double)r_all.rows / t_all / 1e6);
    sl_wh_table_close(t);
    if (keep == NULL) {
        char *slash = strrchr(dir, '/');
        *slash = '\0';
        tu_rm_tree(dir);
    }
    return 0;
}
