/* Bytes per sample on disk: the generated `criteo` and `sessions` presets
 * as sluice tables (plain, session-clustered, clustered + storage dedup)
 * against the very same rows as TSV, TSV + `zstd -3`, TSV sorted by
 * session + `zstd -3`, and Parquet + zstd (level 3, via pyarrow, when
 * `python3 -c 'import pyarrow'` works; skipped with a note otherwise).
 *
 * TSV layout: criteo is the Criteo click-log format itself (label, I1..I13,
 * C1..C26 as 8 hex digits; no id columns, which the tables do store);
 * sessions is one line per sample: sample_id, session_id, ts, click, then
 * the features in schema order, lists as comma-joined decimal ids, missing
 * dense values empty. Rows are in arrival order (as generated / logged).
 *
 * Target: sessions with clustering + storage dedup >= 3.7x smaller than
 * TSV + zstd -3, and smaller than Parquet + zstd.
 *
 * The replicated real-rows shape: the MovieLens ratings in ../shared/data as
 * samples (examples/movielens_sessions.py), copied --copies times as new
 * users, as TSV / Parquet and as sluice tables (defaults; with the example's
 * --cluster --dedup-group history=user_history). Tables and Parquet are
 * also read back on one core (CPU time): sluice's reader against pyarrow's
 * read_table, so that "smaller than Parquet while reading faster" is
 * measured in one run.
 *
 * Usage: bench_table_size [--criteo-rows N] [--sessions-rows N]
 *                         [--active-sessions K] [--stripe-rows R] [--seed S]
 *                         [--movielens RATINGS|none] [--copies C] */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "testutil.h"
#include "warehouse/import.h"

typedef struct cfg {
    uint64_t criteo_rows, sessions_rows, seed;
    uint32_t active, stripe_rows;
    bool have_pyarrow;
    bool read; /* measure the read of the next table (set around print_row) */
    const char *movielens;
    uint32_t copies;
    uint32_t version; /* format version of the tables (0: the current) */
    char dir[256];
} cfg_t;

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static uint64_t tree_bytes;
static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F) tree_bytes += (uint64_t)st->st_size;
    return 0;
}

static uint64_t dir_size(const char *dir)
{
    tree_bytes = 0;
    nftw(dir, add_size, 16, FTW_PHYS);
    return tree_bytes;
}

static void print_row(const char *what, uint64_t bytes, uint64_t rows, uint64_t ref)
{
    printf("  %-62s %12" PRIu64 " %10.2f", what, bytes, (double)bytes / (double)rows);
    if (ref > 0 && bytes > 0)
        printf(" %10.2fx\n", (double)ref / (double)bytes);
    else
        printf(" %11s\n", "-");
}

/* One row as a TSV line. */
static void tsv_line(FILE *f, const sl_wh_gen_spec_t *spec, const sl_wh_row_t *r, bool criteo)
{
    if (!criteo)
        fprintf(f, "%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t", r->sample_id, r->session_id,
                r->timestamp);
    fprintf(f, "%d", (int)r->labels[0]);
    uint32_t d = 0, s = 0;
    for (uint32_t i = 0; i < spec->num_features; i++) {
        fputc('\t', f);
        if (spec->features[i].kind == SL_WH_DENSE) {
            float v = r->dense[d++];
            if (!isnan(v)) fprintf(f, "%.0f", (double)v);
            continue;
        }
        const sl_wh_idlist_t *l = &r->sparse[s++];
        for (uint32_t k = 0; k < l->len; k++) {
            if (criteo)
                fprintf(f, "%08" PRIx64, (uint64_t)l->ids[k]);
            else
                fprintf(f, k ? ",%" PRId64 : "%" PRId64, l->ids[k]);
        }
    }
    fputc('\n', f);
}

static int write_tsv(const sl_wh_gen_spec_t *spec, const char *path, bool criteo)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    static char buf[1 << 20];
    setvbuf(f, buf, _IOFBF, sizeof buf);
    sl_wh_gen_iter_t *it;
    sl_error_t err = {0};
    if (sl_wh_gen_iter_new(spec, 0, 0, NULL, &it, &err) != SL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        fclose(f);
        return -1;
    }
    sl_wh_row_t row;
    while (sl_wh_gen_iter_next(it, &row))
        tsv_line(f, spec, &row, criteo);
    sl_wh_gen_iter_destroy(it);
    return fclose(f);
}

static uint64_t zstd3(const char *in)
{
    char out[512], cmd[1200];
    snprintf(out, sizeof out, "%s.zst", in);
    snprintf(cmd, sizeof cmd, "zstd -q -3 -f -T1 -o '%s' '%s'", out, in);
    if (system(cmd) != 0) return 0;
    uint64_t n = file_size(out);
    unlink(out);
    return n;
}

/* pyarrow: TSV -> Parquet (zstd level 3). Lists are parsed with pyarrow
 * compute (split on ','), criteo's hex ids in Python. */
static const char parquet_py[] =
    "import sys, os\n"
    "import pyarrow as pa, pyarrow.csv as pc, pyarrow.compute as pcc, pyarrow.parquet as pq\n"
    "tsv, out, kinds = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "names = ['c%d' % i for i in range(len(kinds))]\n"
    "t = pc.read_csv(tsv, read_options=pc.ReadOptions(column_names=names, block_size=1<<26),\n"
    "    parse_options=pc.ParseOptions(delimiter='\\t', quote_char=False),\n"
    "    convert_options=pc.ConvertOptions(column_types={n: pa.string() for n in names},\n"
    "        strings_can_be_null=False))\n"
    "cols = []\n"
    "for n, k in zip(names, kinds):\n"
    "    c = t[n].combine_chunks()\n"
    "    empty = pcc.equal(pcc.utf8_length(c), 0)\n"
    "    if k == 'i':\n"
    "        cols.append(pcc.cast(pcc.if_else(empty, None, c), pa.int64()))\n"
    "    elif k == 'f':\n"
    "        cols.append(pcc.cast(pcc.if_else(empty, None, c), pa.float32()))\n"
    "    elif k == 'h':\n"
    "        cols.append(pa.array([int(x, 16) if x else None for x in c.to_pylist()], "
    "pa.int64()))\n"
    "    else:\n"
    "        counts = pcc.if_else(empty, 0, pcc.add(pcc.count_substring(c, ','), 1))\n"
    "        off = pa.concat_arrays([pa.array([0], pa.int64()),\n"
    "            pcc.cumulative_sum(pcc.cast(counts, pa.int64()))])\n"
    "        flat = pcc.list_flatten(pcc.split_pattern(pcc.if_else(empty, None, c), ','))\n"
    "        vals = pcc.cast(flat, pa.int64())\n"
    "        cols.append(pa.LargeListArray.from_arrays(off, vals))\n"
    "tab = pa.table(cols, names=names)\n"
    "pq.write_table(tab, out, compression='zstd', compression_level=3)\n"
    "import time\n"
    "best = 1e30\n"
    "for i in range(4):\n"
    "    c0 = time.process_time()\n"
    "    r = pq.read_table(out, use_threads=False)\n"
    "    best = min(best, time.process_time() - c0) if i else best\n"
    "print(os.path.getsize(out), best)\n";

/* @return the Parquet file's size; *read_s: CPU seconds of the best of 3
 * reads back into Arrow with pyarrow on one thread (after a warm one). */
static uint64_t parquet(const cfg_t *c, const char *tsv, const char *kinds, double *read_s)
{
    char py[512], out[512], cmd[2048];
    snprintf(py, sizeof py, "%s/to_parquet.py", c->dir);
    snprintf(out, sizeof out, "%s.parquet", tsv);
    FILE *f = fopen(py, "w");
    if (f == NULL) return 0;
    fputs(parquet_py, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' '%s'", py, tsv, out, kinds);
    FILE *p = popen(cmd, "r");
    if (p == NULL) return 0;
    unsigned long long n = 0;
    *read_s = 0;
    if (fscanf(p, "%llu %lf", &n, read_s) != 2) n = 0;
    pclose(p);
    unlink(out);
    return n;
}

/* CPU seconds of the best of 3 reads (after a warm one) of the table in dir
 * on one thread: every feature, checksums verified; 0 on failure. */
static double read_seconds(const char *dir, bool dedup_form)
{
    sl_wh_table_t *t;
    sl_error_t err = {0};
    if (sl_wh_table_open(dir, NULL, &t, &err) != SL_OK) return 0;
    sl_wh_read_opts_t o = {0};
    o.dedup_form = dedup_form;
    bench_read_t r;
    double best = 0;
    for (int i = 0; i < 4; i++) {
        if (bench_read_table(t, dir, &o, &r) != 0) break;
        if (i == 1 || (i > 1 && r.cpu < best)) best = r.cpu;
    }
    sl_wh_table_close(t);
    return best;
}

static void print_read(const char *what, uint64_t rows, double s)
{
    if (s > 0)
        printf("    read back on one core: %.2f M rows/s (%.0f ns/row CPU) %s\n",
               (double)rows / s / 1e6, s * 1e9 / (double)rows, what);
}

static double last_read_s; /* of the last table() with cfg.read */

static uint64_t table(const cfg_t *c, const sl_wh_gen_spec_t *spec, const char *name, bool cluster,
                      const sl_dedup_group_spec_t *group, int level, uint32_t stripe_rows)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", c->dir, name);
    sl_wh_gen_opts_t o = sl_wh_gen_opts_default();
    o.writer.no_sync = true;
    o.writer.stripe_rows = stripe_rows ? stripe_rows : c->stripe_rows;
    if (level > 0) o.writer.zstd_level = level;
    o.writer.cluster_sessions = cluster;
    o.writer.format_version = c->version;
    if (group != NULL) {
        o.writer.num_dedup_groups = 1;
        o.writer.dedup_groups = group;
    }
    sl_error_t err = {0};
    sl_wh_write_stats_t st;
    if (sl_wh_gen_table(dir, spec, &o, &st, &err) != SL_OK) {
        fprintf(stderr, "gen %s: %s\n", name, err.msg);
        return 0;
    }
    uint64_t n = dir_size(dir);
    last_read_s = c->read ? read_seconds(dir, group != NULL) : 0;
    tu_rm_tree(dir);
    return n;
}

static void run_preset(const cfg_t *c, const char *preset, uint64_t rows)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    if (sl_wh_gen_preset(preset, rows, c->seed, &spec, &err) != SL_OK) return;
    bool criteo = strcmp(preset, "criteo") == 0;
    if (!criteo && c->active) spec.active_sessions = c->active;
    char tsv[512], sorted[512], kinds[64] = "";
    snprintf(tsv, sizeof tsv, "%s/%s.tsv", c->dir, preset);
    snprintf(sorted, sizeof sorted, "%s/%s.sorted.tsv", c->dir, preset);
    if (!criteo)
        strcat(kinds, "iiif"); /* sample_id, session_id, ts, label */
    else
        strcat(kinds, "f");
    for (uint32_t i = 0; i < spec.num_features; i++)
        strcat(kinds, spec.features[i].kind == SL_WH_DENSE ? "f" : criteo ? "h" : "l");

    if (criteo)
        printf("\npreset criteo: %" PRIu64 " rows, seed %" PRIu64 ", %u rows per stripe\n", rows,
               c->seed, c->stripe_rows);
    else
        printf("\npreset sessions: %" PRIu64 " rows, seed %" PRIu64 ", mean session %u, %u "
               "sessions interleaved, %u rows per stripe\n",
               rows, c->seed, spec.session_length, spec.active_sessions, c->stripe_rows);
    printf("  %-62s %12s %10s %11s\n", "format", "bytes", "B/sample", "TSV+zstd/x");
    if (write_tsv(&spec, tsv, criteo) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", tsv, strerror(errno));
        return;
    }
    uint64_t raw = file_size(tsv), z = zstd3(tsv);
    print_row("TSV", raw, rows, z);
    print_row("TSV + zstd -3", z, rows, z);
    if (!criteo) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "LC_ALL=C sort -s -t '\t' -k2,2n -k3,3n -S 1G -o '%s' '%s'",
                 sorted, tsv);
        if (system(cmd) == 0) print_row("TSV sorted by session + zstd -3", zstd3(sorted), rows, z);
    }
    if (c->have_pyarrow) {
        double rs = 0, rs2 = 0;
        print_row("Parquet + zstd(3)", parquet(c, tsv, kinds, &rs), rows, z);
        print_read("(pyarrow read_table into Arrow, use_threads=False)", rows, rs);
        if (!criteo)
            print_row("Parquet sorted by session + zstd(3)", parquet(c, sorted, kinds, &rs2), rows,
                      z);
    }
    unlink(tsv);
    unlink(sorted);
    char what[128];
    int lv = sl_wh_writer_opts_default().zstd_level;
    snprintf(what, sizeof what, "sluice table (zstd level %d, the default)", lv);
    cfg_t cr = *c;
    cr.read = true;
    print_row(what, table(&cr, &spec, "plain", false, NULL, 0, 0), rows, z);
    print_read("(sluice reader, every feature, checksums verified)", rows, last_read_s);
    if (criteo) {
        print_row("sluice table --level 3", table(c, &spec, "l3", false, NULL, 3, 0), rows, z);
        cr.version = 1;
        print_row("sluice table, format version 1 (before version 2's encodings)",
                  table(&cr, &spec, "v1", false, NULL, 0, 0), rows, z);
        print_read("(version 1)", rows, last_read_s);
        return;
    }
    print_row("sluice table --cluster", table(c, &spec, "cl", true, NULL, 0, 0), rows, z);
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t g = {"user", 3, user};
    print_row("sluice table --dedup-group user=user_id,user_hist,user_cat",
              table(c, &spec, "dd", false, &g, 0, 0), rows, z);
    print_row("sluice table --cluster --dedup-group user=...",
              table(c, &spec, "cldd", true, &g, 0, 0), rows, z);
    print_row("sluice table --cluster --dedup-group user=... --level 3",
              table(c, &spec, "cldd3", true, &g, 3, 0), rows, z);
    print_row("sluice table --cluster --dedup-group ... --stripe-rows 262144",
              table(c, &spec, "cldd4", true, &g, 0, 262144), rows, z);
    print_row("  the same with --level 3", table(c, &spec, "cldd43", true, &g, 3, 262144), rows, z);
}

/* The rows of the table in dir as TSV (ids, labels, dense, then lists as
 * comma-joined decimal ids, as for the sessions preset); kinds gets the
 * column kinds for the Parquet conversion. @return rows, 0 on failure. */
static uint64_t table_tsv(const char *dir, const char *path, char *kinds, size_t cap)
{
    sl_wh_table_t *t;
    sl_error_t err = {0};
    if (sl_wh_table_open(dir, NULL, &t, &err) != SL_OK) return 0;
    FILE *f = fopen(path, "w");
    uint64_t rows = 0;
    for (uint32_t p = 0; f != NULL && p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        for (uint32_t fi = 0; fi < part->num_files; fi++) {
            char fp[4096];
            snprintf(fp, sizeof fp, "%s/%s", dir, part->files[fi]);
            sl_wh_reader_t *rd;
            if (sl_wh_reader_open(fp, NULL, NULL, &rd, &err) != SL_OK) break;
            const sl_wh_rows_t *x;
            while (sl_wh_reader_next(rd, &x, &err) == SL_OK && x != NULL) {
                const sl_batch_t *b = &x->batch;
                uint32_t N = b->batch_size;
                uint64_t koff[1024];
                if (b->sparse.num_keys >= 1024) break;
                sl_kjt_key_offsets(&b->sparse, koff);
                if (rows == 0) {
                    snprintf(kinds, cap, "iii");
                    for (uint32_t k = 0;
                         k < b->labels.cols + b->dense.cols && strlen(kinds) + 2 < cap; k++)
                        strcat(kinds, "f");
                    for (uint32_t k = 0; k < b->sparse.num_keys && strlen(kinds) + 2 < cap; k++)
                        strcat(kinds, "l");
                }
                for (uint32_t r = 0; r < N; r++) {
                    fprintf(f, "%" PRId64 "\t%" PRId64 "\t%" PRId64, b->sample_ids[r],
                            x->session_ids[r], x->timestamps[r]);
                    for (uint32_t k = 0; k < b->labels.cols; k++)
                        fprintf(f, "\t%g", (double)b->labels.data[(size_t)r * b->labels.cols + k]);
                    for (uint32_t k = 0; k < b->dense.cols; k++) {
                        float v = b->dense.data[(size_t)r * b->dense.cols + k];
                        if (v == v)
                            fprintf(f, "\t%.9g", (double)v);
                        else
                            fputc('\t', f);
                    }
                    for (uint32_t k = 0; k < b->sparse.num_keys; k++) {
                        fputc('\t', f);
                        int32_t len = b->sparse.lengths[(size_t)k * N + r];
                        for (int32_t j = 0; j < len; j++)
                            fprintf(f, j ? ",%" PRId64 : "%" PRId64, b->sparse.values[koff[k]++]);
                    }
                    fputc('\n', f);
                }
                rows += N;
            }
            sl_wh_reader_close(rd);
        }
    }
    sl_wh_table_close(t);
    if (f == NULL || fclose(f) != 0) return 0;
    return rows;
}

/* The replicated real-rows shape: MovieLens samples x copies. */
static void run_movielens(const cfg_t *c)
{
    char jsonl[700], plain[600], ml[600], ml1[600], tsv[600], kinds[64] = "";
    uint64_t rows = bench_movielens_jsonl(c->movielens, c->copies, c->dir, jsonl, sizeof jsonl);
    printf("\nreal rows: MovieLens (%s) x %u = %" PRIu64
           " samples (examples/movielens_sessions.py; "
           "copies as new users), %u rows per stripe\n",
           c->movielens, c->copies, rows, c->stripe_rows);
    if (rows == 0) {
        printf("  (python3 or the script failed: skipped)\n");
        return;
    }
    snprintf(plain, sizeof plain, "%s/ml-plain", c->dir);
    snprintf(ml, sizeof ml, "%s/ml", c->dir);
    snprintf(ml1, sizeof ml1, "%s/ml-v1", c->dir);
    snprintf(tsv, sizeof tsv, "%s/ml.tsv", c->dir);
    sl_wh_writer_opts_t wo = sl_wh_writer_opts_default();
    wo.stripe_rows = c->stripe_rows;
    if (bench_movielens_import(jsonl, plain, false, &wo) != 0 ||
        bench_movielens_import(jsonl, ml, true, &wo) != 0)
        return;
    wo.format_version = 1;
    if (bench_movielens_import(jsonl, ml1, true, &wo) != 0) return;
    unlink(jsonl);
    printf("  %-62s %12s %10s %11s\n", "format", "bytes", "B/sample", "TSV+zstd/x");
    if (table_tsv(plain, tsv, kinds, sizeof kinds) != rows) {
        fprintf(stderr, "cannot write %s\n", tsv);
        return;
    }
    uint64_t raw = file_size(tsv), z = zstd3(tsv);
    print_row("TSV (rows in file order: by user, then time)", raw, rows, z);
    print_row("TSV + zstd -3", z, rows, z);
    if (c->have_pyarrow) {
        double rs = 0;
        print_row("Parquet + zstd(3)", parquet(c, tsv, kinds, &rs), rows, z);
        print_read("(pyarrow read_table into Arrow, use_threads=False)", rows, rs);
    }
    unlink(tsv);
    print_row("sluice table (defaults)", dir_size(plain), rows, z);
    print_read("(every feature, checksums verified)", rows, read_seconds(plain, false));
    print_row("sluice table --cluster --dedup-group history=user_history", dir_size(ml), rows, z);
    print_read("(dedup form: the worker's read)", rows, read_seconds(ml, true));
    print_read("(expanded)", rows, read_seconds(ml, false));
    print_row("  the same, format version 1", dir_size(ml1), rows, z);
    print_read("(dedup form, version 1)", rows, read_seconds(ml1, true));
    tu_rm_tree(plain);
    tu_rm_tree(ml);
    tu_rm_tree(ml1);
}

int main(int argc, char **argv)
{
    cfg_t c = {.criteo_rows = 1000000,
               .sessions_rows = 500000,
               .seed = 42,
               .stripe_rows = SL_WH_DEFAULT_STRIPE_ROWS,
               .copies = 10};
    c.movielens = bench_movielens_default();
    for (int i = 1; i + 1 < argc; i += 2) {
        uint64_t v = strtoull(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--movielens") == 0) {
            c.movielens = strcmp(argv[i + 1], "none") == 0 ? NULL : argv[i + 1];
            continue;
        }
        if (strcmp(argv[i], "--copies") == 0) {
            c.copies = (uint32_t)v;
            continue;
        }
        if (strcmp(argv[i], "--criteo-rows") == 0)
            c.criteo_rows = v;
        else if (strcmp(argv[i], "--sessions-rows") == 0)
            c.sessions_rows = v;
        else if (strcmp(argv[i], "--active-sessions") == 0)
            c.active = (uint32_t)v;
        else if (strcmp(argv[i], "--stripe-rows") == 0)
            c.stripe_rows = (uint32_t)v;
        else if (strcmp(argv[i], "--seed") == 0)
            c.seed = v;
        else {
            fprintf(stderr, "usage: bench_table_size [--criteo-rows N] [--sessions-rows N] "
                            "[--active-sessions K] [--stripe-rows R] [--seed S]\n"
                            "                        [--movielens RATINGS|none] [--copies C]\n");
            return 2;
        }
    }
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(c.dir, sizeof c.dir, "%s/sluice-bench-size-XXXXXX", tmp);
    if (mkdtemp(c.dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    c.have_pyarrow = system("python3 -c 'import pyarrow' >/dev/null 2>&1") == 0;
    if (system("zstd --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "bench_table_size: needs the zstd program\n");
        return 1;
    }
    printf("bench_table_size: bytes on disk per sample (tables: every file, _schema included)\n");
    if (!c.have_pyarrow) printf("note: python3 with pyarrow not found: Parquet rows skipped\n");
    if (c.criteo_rows) run_preset(&c, "criteo", c.criteo_rows);
    if (c.sessions_rows) run_preset(&c, "sessions", c.sessions_rows);
    if (c.movielens != NULL && c.copies > 0) run_movielens(&c);
    tu_rm_tree(c.dir);
    return 0;
}
