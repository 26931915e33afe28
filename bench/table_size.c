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
 * Usage: bench_table_size [--criteo-rows N] [--sessions-rows N]
 *                         [--active-sessions K] [--stripe-rows R] [--seed S] */
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
    while (sl_wh_gen_iter_next(it, &row)) tsv_line(f, spec, &row, criteo);
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
    "        cols.append(pa.array([int(x, 16) if x else None for x in c.to_pylist()], pa.int64()))\n"
    "    else:\n"
    "        counts = pcc.if_else(empty, 0, pcc.add(pcc.count_substring(c, ','), 1))\n"
    "        off = pa.concat_arrays([pa.array([0], pa.int64()),\n"
    "            pcc.cumulative_sum(pcc.cast(counts, pa.int64()))])\n"
    "        flat = pcc.list_flatten(pcc.split_pattern(pcc.if_else(empty, None, c), ','))\n"
    "        vals = pcc.cast(flat, pa.int64())\n"
    "        cols.append(pa.LargeListArray.from_arrays(off, vals))\n"
    "tab = pa.table(cols, names=names)\n"
    "pq.write_table(tab, out, compression='zstd', compression_level=3)\n"
    "print(os.path.getsize(out))\n";

static uint64_t parquet(const cfg_t *c, const char *tsv, const char *kinds)
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
    if (fscanf(p, "%llu", &n) != 1) n = 0;
    pclose(p);
    unlink(out);
    return n;
}

static uint64_t table(const cfg_t *c, const sl_wh_gen_spec_t *spec, const char *name,
                      bool cluster, const sl_dedup_group_spec_t *group, int level,
                      uint32_t stripe_rows)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", c->dir, name);
    sl_wh_gen_opts_t o = sl_wh_gen_opts_default();
    o.writer.no_sync = true;
    o.writer.stripe_rows = stripe_rows ? stripe_rows : c->stripe_rows;
    if (level > 0) o.writer.zstd_level = level;
    o.writer.cluster_sessions = cluster;
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
    if (!criteo) strcat(kinds, "iiif"); /* sample_id, session_id, ts, label */
    else strcat(kinds, "f");
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
        print_row("Parquet + zstd(3)", parquet(c, tsv, kinds), rows, z);
        if (!criteo) print_row("Parquet sorted by session + zstd(3)", parquet(c, sorted, kinds),
                               rows, z);
    }
    unlink(tsv);
    unlink(sorted);
    char what[128];
    int lv = sl_wh_writer_opts_default().zstd_level;
    snprintf(what, sizeof what, "sluice table (zstd level %d, the default)", lv);
    print_row(what, table(c, &spec, "plain", false, NULL, 0, 0), rows, z);
    if (criteo) {
        print_row("sluice table --level 3", table(c, &spec, "l3", false, NULL, 3, 0), rows, z);
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
    print_row("  the same with --level 3", table(c, &spec, "cldd43", true, &g, 3, 262144), rows,
              z);
}

int main(int argc, char **argv)
{
    cfg_t c = {.criteo_rows = 1000000, .sessions_rows = 500000, .seed = 42,
               .stripe_rows = SL_WH_DEFAULT_STRIPE_ROWS};
    for (int i = 1; i + 1 < argc; i += 2) {
        uint64_t v = strtoull(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--criteo-rows") == 0) c.criteo_rows = v;
        else if (strcmp(argv[i], "--sessions-rows") == 0) c.sessions_rows = v;
        else if (strcmp(argv[i], "--active-sessions") == 0) c.active = (uint32_t)v;
        else if (strcmp(argv[i], "--stripe-rows") == 0) c.stripe_rows = (uint32_t)v;
        else if (strcmp(argv[i], "--seed") == 0) c.seed = v;
        else {
            fprintf(stderr, "usage: bench_table_size [--criteo-rows N] [--sessions-rows N] "
                            "[--active-sessions K] [--stripe-rows R] [--seed S]\n");
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
    if (!c.have_pyarrow)
        printf("note: python3 with pyarrow not found: Parquet rows skipped\n");
    if (c.criteo_rows) run_preset(&c, "criteo", c.criteo_rows);
    if (c.sessions_rows) run_preset(&c, "sessions", c.sessions_rows);
    tu_rm_tree(c.dir);
    return 0;
}
