/* The synthetic table generator (src/warehouse/gen.c): the same spec gives
 * the same table whatever the thread count, sessions keep their user
 * features constant, lengths and vocabularies are respected, partitions and
 * files are laid out as asked, and clustering + storage dedup keep every
 * row's values. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/table_tools.h"

static char *cat_table(const char *dir, size_t *len, uint64_t *rows)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_cat_table(dir, NULL, f, rows, &err), SL_OK, "%s", err.msg);
    fclose(f);
    return buf;
}

static void gen(const char *dir, const sl_wh_gen_spec_t *spec, uint32_t threads, bool cluster,
                bool dedup, sl_wh_write_stats_t *st)
{
    sl_wh_gen_opts_t o = sl_wh_gen_opts_default();
    o.threads = threads;
    o.writer.no_sync = true;
    o.writer.stripe_rows = 2048;
    o.writer.cluster_sessions = cluster;
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t g = {"user", 3, user};
    if (dedup) {
        o.writer.num_dedup_groups = 1;
        o.writer.dedup_groups = &g;
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_table(dir, spec, &o, st, &err), SL_OK, "%s", err.msg);
}

Test(gen, same_seed_same_table_any_threads)
{
    uint64_t seed = tu_seed("gen::same_seed_same_table_any_threads");
    char *dir = tu_mkdtemp("gen");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", 3001, seed, &spec, &err), SL_OK);
    spec.partitions = 2;
    spec.files = 2;
    char *out[3];
    size_t len[3];
    for (int run = 0; run < 3; run++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", run);
        char *t = tu_path(dir, name);
        sl_wh_gen_spec_t s = spec;
        if (run == 2) s.seed = seed + 1;
        sl_wh_write_stats_t st;
        gen(t, &s, run == 0 ? 1 : 2, false, false, &st);
        cr_assert_eq(st.rows, 3001);
        uint64_t rows;
        out[run] = cat_table(t, &len[run], &rows);
        cr_assert_eq(rows, 3001);
        free(t);
    }
    cr_assert(len[0] == len[1] && memcmp(out[0], out[1], len[0]) == 0,
              "one and two threads gave different tables");
    cr_assert(len[0] != len[2] || memcmp(out[0], out[2], len[0]) != 0,
              "another seed gave the same table");

    /* Layout: 2 partitions of 2 files; rows split 751/750/750/750. */
    char *t0 = tu_path(dir, "t0");
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(t0, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_num_partitions(t), 2);
    const char *pn[] = {"ds=2026-01-01", "ds=2026-01-02"};
    uint64_t want_rows[] = {751, 750, 750, 750};
    bool seen[3001] = {false};
    for (uint32_t p = 0; p < 2; p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        cr_assert_str_eq(part->name, pn[p]);
        cr_assert_eq(part->num_files, 2);
        for (uint32_t f = 0; f < 2; f++) {
            char want[64];
            snprintf(want, sizeof want, "%s/part-%05u.slc", pn[p], f);
            cr_assert_str_eq(part->files[f], want);
            char *path = tu_path(t0, part->files[f]);
            sl_wh_reader_t *r;
            cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
            cr_assert_eq(sl_wh_reader_num_rows(r), want_rows[p * 2 + f]);
            const sl_wh_rows_t *rows;
            while (sl_wh_reader_next(r, &rows, &err) == SL_OK && rows != NULL)
                for (uint32_t i = 0; i < rows->batch.batch_size; i++) {
                    int64_t sid = rows->batch.sample_ids[i];
                    cr_assert(sid >= 0 && sid < 3001 && !seen[sid], "sample id %lld",
                              (long long)sid);
                    seen[sid] = true;
                    /* Timestamps fall in the partition's day. */
                    int64_t day = 1767225600ll + (int64_t)p * 86400;
                    cr_assert(rows->timestamps[i] >= day && rows->timestamps[i] < day + 86400);
                }
            sl_wh_reader_close(r);
            free(path);
        }
    }
    sl_wh_table_close(t);
    free(t0);
    for (int i = 0; i < 3; i++)
        free(out[i]);
    tu_rm_tree(dir);
    free(dir);
}

/* A copy of a row's per-session values, to compare later rows against. */
typedef struct user {
    int64_t session;
    float dense[2];
    uint32_t len[3];
    int64_t ids[3][128];
} user_t;

Test(gen, sessions_keep_user_features)
{
    uint64_t seed = tu_seed("gen::sessions_keep_user_features");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", 20000, seed, &spec, &err), SL_OK);
    spec.active_sessions = 64; /* few sessions cut off by the end of the file */
    sl_wh_gen_iter_t *it;
    cr_assert_eq(sl_wh_gen_iter_new(&spec, 0, 0, NULL, &it, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_gen_iter_rows(it), 20000);
    /* Slots: dense user_age 0, user_clicks 1, item_clicks 2, position 3;
     * sparse user_id 0, user_hist 1, user_cat 2, item_id 3, item_cat 4, item_tags 5. */
    user_t *users = calloc(20000, sizeof *users); /* by session id (= first sample id) */
    uint32_t sessions = 0, item_changes = 0;
    int64_t last_item = -1, last_ts = 0;
    sl_wh_row_t row;
    uint64_t n = 0;
    while (sl_wh_gen_iter_next(it, &row)) {
        cr_assert_eq(row.sample_id, (int64_t)n);
        cr_assert_geq(row.timestamp, last_ts);
        last_ts = row.timestamp;
        cr_assert(row.session_id >= 0 && row.session_id <= row.sample_id);
        user_t *u = &users[row.session_id];
        cr_assert_eq(row.sparse[0].len, 1);
        cr_assert(row.sparse[1].len >= 90 && row.sparse[1].len <= 110);
        cr_assert_eq(row.sparse[2].len, 20);
        cr_assert_eq(row.sparse[3].len, 1);
        cr_assert_eq(row.sparse[4].len, 1);
        cr_assert(row.sparse[5].len >= 1 && row.sparse[5].len <= 5);
        const uint64_t vocab[6] = {10000000, 1000000, 1000, 1000000, 1000, 10000};
        for (int s = 0; s < 6; s++)
            for (uint32_t k = 0; k < row.sparse[s].len; k++)
                cr_assert(row.sparse[s].ids[k] >= 0 && (uint64_t)row.sparse[s].ids[k] < vocab[s]);
        if (row.session_id == row.sample_id) {
            /* The session's first row: remember its user features. */
            sessions++;
            u->session = row.session_id;
            memcpy(u->dense, row.dense, sizeof u->dense);
            for (int s = 0; s < 3; s++) {
                u->len[s] = row.sparse[s].len;
                memcpy(u->ids[s], row.sparse[s].ids, row.sparse[s].len * sizeof(int64_t));
            }
        } else {
            cr_assert_eq(u->session, row.session_id, "session %lld has no first row",
                         (long long)row.session_id);
            for (int d = 0; d < 2; d++)
                cr_assert(memcmp(&u->dense[d], &row.dense[d], sizeof(float)) == 0,
                          "row %llu: user dense %d changed within session", (unsigned long long)n,
                          d);
            for (int s = 0; s < 3; s++) {
                cr_assert_eq(u->len[s], row.sparse[s].len);
                cr_assert(memcmp(u->ids[s], row.sparse[s].ids, u->len[s] * sizeof(int64_t)) == 0,
                          "row %llu: user feature %d changed within session", (unsigned long long)n,
                          s);
            }
        }
        item_changes += row.sparse[3].ids[0] != last_item;
        last_item = row.sparse[3].ids[0];
        n++;
    }
    cr_assert_eq(n, 20000);
    /* Mean 16 per session, less the sessions cut off at the end of the file. */
    double mean = 20000.0 / sessions;
    cr_assert(mean > 12.0 && mean < 17.0, "mean session length %.2f", mean);
    cr_assert_gt(item_changes, 19000, "item ids should change per sample");
    free(users);
    sl_wh_gen_iter_destroy(it);
}

Test(gen, criteo_preset_shape)
{
    uint64_t seed = tu_seed("gen::criteo_preset_shape");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", 5000, seed, &spec, &err), SL_OK);
    sl_wh_schema_t *s;
    cr_assert_eq(sl_wh_gen_schema(&spec, NULL, &s, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_t *c = sl_wh_criteo_schema(NULL);
    cr_assert_eq(sl_wh_schema_num_features(s), 39);
    for (uint32_t i = 0; i < 39; i++) {
        cr_assert_str_eq(sl_wh_schema_feature(s, i)->name, sl_wh_schema_feature(c, i)->name);
        cr_assert_eq(sl_wh_schema_feature(s, i)->kind, sl_wh_schema_feature(c, i)->kind);
    }
    cr_assert_str_eq(sl_wh_schema_label(s, 0), "label");
    sl_wh_schema_destroy(c);
    sl_wh_schema_destroy(s);
    sl_wh_gen_iter_t *it;
    cr_assert_eq(sl_wh_gen_iter_new(&spec, 0, 0, NULL, &it, &err), SL_OK);
    sl_wh_row_t row;
    uint32_t missing = 0, empty = 0, positives = 0;
    while (sl_wh_gen_iter_next(it, &row)) {
        cr_assert_eq(row.session_id, row.sample_id, "criteo rows are sessions of one");
        cr_assert(row.labels[0] == 0.0f || row.labels[0] == 1.0f);
        positives += row.labels[0] == 1.0f;
        for (int d = 0; d < 13; d++) {
            if (isnan(row.dense[d])) {
                missing++;
                continue;
            }
            cr_assert(row.dense[d] >= 0 && row.dense[d] == floorf(row.dense[d]));
        }
        for (int k = 0; k < 26; k++) {
            cr_assert_leq(row.sparse[k].len, 1);
            empty += row.sparse[k].len == 0;
            if (row.sparse[k].len)
                cr_assert(row.sparse[k].ids[0] >= 0 && row.sparse[k].ids[0] <= 0xffffffffll);
        }
    }
    cr_assert(missing > 0 && empty > 0 && positives > 500 && positives < 2000,
              "missing %u empty %u positives %u", missing, empty, positives);
    sl_wh_gen_iter_destroy(it);
    cr_assert_eq(sl_wh_gen_preset("nope", 1, 1, &spec, &err), SL_ERR_NOT_FOUND);
}

/* The cat lines of a table, sorted by sample id (cat prints it first). */
static int cmp_lines(const void *a, const void *b)
{
    long long x = strtoll(*(char *const *)a + strlen("{\"sample_id\":"), NULL, 10);
    long long y = strtoll(*(char *const *)b + strlen("{\"sample_id\":"), NULL, 10);
    return (x > y) - (x < y);
}

static char **sorted_lines(char *buf, uint64_t n)
{
    char **lines = calloc(n, sizeof *lines);
    char *p = buf;
    for (uint64_t i = 0; i < n; i++) {
        lines[i] = p;
        p = strchr(p, '\n');
        *p++ = '\0';
    }
    qsort(lines, n, sizeof *lines, cmp_lines);
    return lines;
}

Test(gen, clustering_and_dedup_keep_every_value)
{
    uint64_t seed = tu_seed("gen::clustering_and_dedup_keep_every_value");
    char *dir = tu_mkdtemp("gen");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", 6000, seed, &spec, &err), SL_OK);
    spec.active_sessions = 32;
    char *plain = tu_path(dir, "plain"), *packed = tu_path(dir, "packed");
    sl_wh_write_stats_t sp, sd;
    gen(plain, &spec, 1, false, false, &sp);
    gen(packed, &spec, 1, true, true, &sd);
    cr_assert_eq(sd.rows, 6000);
    cr_assert_eq(sd.dedup_rows, 6000);
    cr_assert_lt(sd.dedup_unique * 8, sd.dedup_rows, "sessions of ~16 should dedup > 8x");
    /* zstd already finds most repeats of 32 interleaved sessions in a plain
     * stripe (bench_table_size measures the sizes); dedup must still win. */
    cr_assert_lt(sd.file_bytes, sp.file_bytes, "clustering + dedup should shrink the file");
    size_t l1, l2;
    uint64_t n1, n2;
    char *a = cat_table(plain, &l1, &n1), *b = cat_table(packed, &l2, &n2);
    cr_assert_eq(n1, 6000);
    cr_assert_eq(n2, 6000);
    cr_assert(memcmp(a, b, l1) != 0, "clustering should reorder rows");
    char **x = sorted_lines(a, n1), **y = sorted_lines(b, n2);
    /* Compared parsed: dedup groups may print their keys in another order. */
    for (uint64_t i = 0; i < n1; i++) {
        json_t *jx = json_loads(x[i], 0, NULL), *jy = json_loads(y[i], 0, NULL);
        cr_assert(jx != NULL && jy != NULL && json_equal(jx, jy), "row %llu:\n%s\n%s",
                  (unsigned long long)i, x[i], y[i]);
        json_decref(jx);
        json_decref(jy);
    }
    free(x);
    free(y);
    free(a);
    free(b);
    free(plain);
    free(packed);
    tu_rm_tree(dir);
    free(dir);
}
