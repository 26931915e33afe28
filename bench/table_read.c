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
#include <unistd.h>

#include "bench_util.h"
#include "testutil.h"
#include "warehouse/import.h"

typedef bench_read_t result_t;

static int read_table(const sl_wh_table_t *t, const char *dir, const sl_wh_read_opts_t *opts,
                      result_t *r)
{
    return bench_read_table(t, dir, opts, r);
}

/* The worker's pattern: one reader per split of one stripe, opened and
 * closed in turn (sl_wh_reader_open_split), every feature, checksums. */
static int read_splits(const sl_wh_table_t *t, result_t *r)
{
    sl_wh_splits_t *sp;
    sl_error_t err = {0};
    memset(r, 0, sizeof *r);
    if (sl_wh_table_splits(t, NULL, 1, &sp, &err) != SL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    double w0 = bench_now(), c0 = bench_cpu_seconds();
    for (uint32_t i = 0; i < sp->count; i++) {
        sl_wh_reader_t *rd;
        if (sl_wh_reader_open_split(t, &sp->items[i], NULL, &rd, &err) != SL_OK) {
            fprintf(stderr, "%s\n", err.msg);
            sl_wh_splits_destroy(sp);
            return -1;
        }
        if (bench_drain_reader(rd, r) != 0) {
            sl_wh_splits_destroy(sp);
            return -1;
        }
    }
    r->wall = bench_now() - w0;
    r->cpu = bench_cpu_seconds() - c0;
    sl_wh_splits_destroy(sp);
    return 0;
}

static int best_splits(const sl_wh_table_t *t, int reps, result_t *best)
{
    result_t r;
    for (int i = 0; i < reps; i++) {
        if (read_splits(t, &r) != 0) return -1;
        if (i == 0 || r.cpu < best->cpu) *best = r;
    }
    return 0;
}

/* One line: rows/s and CPU ns per row, bytes read from the file and
 * decoded per row, and how far from the limit: a memcpy of the same decoded
 * bytes at the speed measured in this run (memcpy_bpns bytes per ns). */
static void print_result(const char *what, const result_t *r, double memcpy_bpns)
{
    double t = r->cpu > 0 ? r->cpu : r->wall, rows = (double)r->rows;
    double ns = t * 1e9 / rows, dec = (double)r->decoded / rows;
    double limit = dec / memcpy_bpns;
    printf("  %-44s %8.2f %8.1f %9.1f %9.1f %8.1f %7.1fx\n", what, rows / t / 1e6, ns,
           (double)r->file_bytes / rows, dec, limit, ns / limit);
}

static void print_header(void)
{
    printf("  %-44s %8s %8s %9s %9s %8s %8s\n", "read (one core, best of reps)", "Mrows/s",
           "ns/row", "read B/row", "dec B/row", "limit ns", "x limit");
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

/* The limit: bytes per ns of a memcpy of `total` resident bytes, stripe by
 * stripe into one reused stripe buffer (what an in-memory loader of
 * decoded arrays does). */
static double memcpy_speed(size_t total, size_t stripe, int reps)
{
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
    free(src);
    free(dst);
    return (double)total / (best * 1e9);
}

static void target_line(const char *what, const result_t *r)
{
    double t = r->cpu > 0 ? r->cpu : r->wall, mr = (double)r->rows / t / 1e6;
    printf("  target >= 8 M rows/s per core (%s): %s (%.2f M rows/s)\n", what,
           mr >= 8.0 ? "met" : "MISSED", mr);
}

int main(int argc, char **argv)
{
    uint64_t rows = 2000000;
    int level = 0, reps = 3;
    uint32_t version = 0, copies = 10;
    const char *keep = NULL, *ml = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--level") == 0)
            level = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--table") == 0)
            keep = argv[i + 1];
        else if (strcmp(argv[i], "--format-version") == 0)
            version = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--movielens") == 0)
            ml = argv[i + 1];
        else if (strcmp(argv[i], "--copies") == 0)
            copies = (uint32_t)atoi(argv[i + 1]);
        else {
            fprintf(stderr,
                    "usage: bench_table_read [--rows N] [--level L] [--reps R] [--table DIR]\n"
                    "                        [--format-version V] [--movielens RATINGS|default "
                    "[--copies C]]\n");
            return 2;
        }
    }
    if (ml != NULL && strcmp(ml, "default") == 0 && (ml = bench_movielens_default()) == NULL) {
        fprintf(stderr, "bench_table_read: no ../shared/data/movielens-latest-small/ratings.csv\n");
        return 1;
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
        strcat(dir, ml ? "/movielens" : "/criteo");
    }
    char schema_path[600];
    snprintf(schema_path, sizeof schema_path, "%s/_schema", dir);
    sl_error_t err = {0};
    FILE *exists = keep ? fopen(schema_path, "rb") : NULL;
    if (exists != NULL) {
        fclose(exists);
        printf("bench_table_read: reading the table in %s\n", dir);
    } else if (ml != NULL) {
        char work[600], jsonl[700];
        snprintf(work, sizeof work, "%s", dir);
        *strrchr(work, '/') = '\0';
        uint64_t n = bench_movielens_jsonl(ml, copies, work, jsonl, sizeof jsonl);
        sl_wh_writer_opts_t wo = sl_wh_writer_opts_default();
        if (level > 0) wo.zstd_level = level;
        if (level < 0) wo.codec = SL_WH_CODEC_NONE;
        wo.format_version = version;
        double g0 = bench_now();
        if (n == 0 || bench_movielens_import(jsonl, dir, true, &wo) != 0) {
            fprintf(stderr, "bench_table_read: the MovieLens rows could not be made\n");
            return 1;
        }
        unlink(jsonl);
        printf("bench_table_read: MovieLens rows x %u (%" PRIu64 " rows), --cluster "
               "--dedup-group history=user_history, format version %u; imported in %.1f s\n",
               copies, n, version ? version : SL_WH_FORMAT_VERSION, bench_now() - g0);
    } else {
        sl_wh_gen_spec_t spec;
        sl_wh_gen_preset("criteo", rows, 42, &spec, &err);
        spec.files = 2; /* generated in parallel; read on one core */
        sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
        go.writer.no_sync = true;
        if (level > 0) go.writer.zstd_level = level;
        if (level < 0) go.writer.codec = SL_WH_CODEC_NONE;
        go.writer.format_version = version;
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
               "files (%.1f B/row), zstd level %s, format version %u; generated in %.1f s\n",
               ws.rows, ws.stripes, (double)ws.file_bytes / 1e6,
               (double)ws.file_bytes / (double)ws.rows, lv,
               version ? version : SL_WH_FORMAT_VERSION, bench_now() - g0);
    }

    sl_wh_table_t *t;
    if (sl_wh_table_open(dir, NULL, &t, &err) != SL_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    /* Every feature with checksums (and skipped, for comparison); ~10 % of
     * them; for a table with storage dedup groups, also the dedup form
     * (each group's unique rows and inverse, what the worker reads). */
    bool groups = false;
    {
        const sl_wh_partition_t *p0 =
            sl_wh_table_num_partitions(t) ? sl_wh_table_partition(t, 0) : NULL;
        if (p0 != NULL && p0->num_files > 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, p0->files[0]);
            sl_wh_reader_t *rd;
            if (sl_wh_reader_open(path, NULL, NULL, &rd, &err) == SL_OK) {
                groups = sl_wh_reader_num_groups(rd) > 0;
                sl_wh_reader_close(rd);
            }
        }
    }
    sl_wh_read_opts_t all = {0}, nosum = {0}, proj = {0}, dd = {0};
    nosum.skip_checksums = true;
    dd.dedup_form = true;
    static const char *const few[] = {"I1", "I2", "C1", "C2"};
    bool criteo = sl_wh_schema_index(sl_wh_table_schema(t), "C2") >= 0;
    proj.features = few;
    proj.num_features = 4;
    result_t warm, r_all, r_nosum, r_proj, r_dd, r_split;
    if (read_table(t, dir, &all, &warm) != 0) return 1; /* page cache, allocator */
    if (best_of(t, dir, &all, reps, &r_all) != 0 || best_of(t, dir, &nosum, reps, &r_nosum) != 0 ||
        (criteo && best_of(t, dir, &proj, reps, &r_proj) != 0) ||
        (groups && best_of(t, dir, &dd, reps, &r_dd) != 0) || best_splits(t, reps, &r_split) != 0)
        return 1;
    size_t total = (size_t)r_all.decoded;
    size_t stripe = (size_t)(total / (r_all.stripes ? r_all.stripes : 1));
    double bpns = memcpy_speed(total, stripe, reps);
    result_t base = {.cpu = (double)total / bpns * 1e-9,
                     .rows = r_all.rows,
                     .decoded = total,
                     .file_bytes = total};

    print_header();
    print_result("all features, checksums verified", &r_all, bpns);
    print_result("all features, checksums skipped", &r_nosum, bpns);
    if (criteo) print_result("4 of 39 features (I1 I2 C1 C2), checksums", &r_proj, bpns);
    if (groups) print_result("all features, dedup form, checksums", &r_dd, bpns);
    print_result("all features, a reader per 1-stripe split", &r_split, bpns);
    print_result("limit: memcpy of the decoded bytes", &base, bpns);
    printf("  memcpy in this run: %.1f GB/s; file bytes read per row from the page cache "
           "(mapped)\n",
           bpns);
    target_line("all features, checksums", &r_all);
    if (groups) target_line("all features, dedup form, checksums", &r_dd);
    sl_wh_table_close(t);
    if (keep == NULL) {
        char *slash = strrchr(dir, '/');
        *slash = '\0';
        tu_rm_tree(dir);
    }
    return 0;
}
