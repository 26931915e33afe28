/* Benchmark helpers: clock, memcpy baseline, sink, the MovieLens rows. */
#include "bench_util.h"

#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice/trainer.h"
#include "warehouse/import.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *count_alloc(void *ctx, size_t size, size_t align)
{
    bench_counting_t *c = ctx;
    void *p = sl_allocator_default()->alloc(NULL, size, align);
    if (p != NULL) {
        c->now += size;
        if (c->now > c->peak) c->peak = c->now;
    }
    return p;
}

static void count_free(void *ctx, void *ptr, size_t size)
{
    bench_counting_t *c = ctx;
    if (ptr == NULL) return;
    c->now -= size;
    sl_allocator_default()->free(NULL, ptr, size);
}

sl_allocator_t bench_counting_allocator(bench_counting_t *c)
{
    return (sl_allocator_t){count_alloc, count_free, c};
}

int bench_counting_leaked(const bench_counting_t *c)
{
    if (c->now == 0) return 0;
    fprintf(stderr, "leak: %zu bytes\n", c->now);
    return 1;
}

int bench_sluice_binary(const char *argv0, const char *who, char *out, size_t cap)
{
    const char *b = getenv("SLUICE_BINARY");
    if (b) {
        snprintf(out, cap, "%s", b);
    } else {
        char self[1024];
        snprintf(self, sizeof self, "%s", argv0);
        snprintf(out, cap, "%s/sluice", dirname(self));
    }
    if (access(out, X_OK) == 0) return 0;
    fprintf(stderr, "%s: no sluice program at %s (set SLUICE_BINARY)\n", who, out);
    return -1;
}

json_t *bench_criteo_transforms(void)
{
    json_t *tr = json_array();
    char name[16];
    for (int i = 1; i <= 13; i++) {
        snprintf(name, sizeof name, "I%d", i);
        json_array_append_new(tr, json_pack("{s:s, s:s}", "op", "log1p", "feature", name));
    }
    for (int i = 1; i <= 26; i++) {
        snprintf(name, sizeof name, "C%d", i);
        json_array_append_new(tr, json_pack("{s:s, s:s, s:i, s:i}", "op", "sigrid_hash", "feature",
                                            name, "table_size", 10000000, "salt", i));
    }
    return tr;
}

int bench_gen_criteo(const char *dir, uint64_t rows, uint32_t files, uint32_t stripe_rows,
                     const char *who)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    sl_wh_gen_preset("criteo", rows, 1, &spec, &err);
    spec.files = files;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = stripe_rows;
    if (sl_wh_gen_table(dir, &spec, &go, NULL, &err) == SL_OK) return 0;
    fprintf(stderr, "%s: %s\n", who, err.msg);
    return -1;
}

void *bench_trainer_run(void *arg)
{
    bench_trainer_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = c->master;
    o.job_id = c->job;
    o.rank = c->rank;
    o.world_size = c->world_size ? c->world_size : 1;
    o.prefetch = c->prefetch ? c->prefetch : 8;
    o.refresh_ms = 200;
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        return NULL;
    }
    sl_batch_t *b;
    while (!atomic_load(&c->stop) && (c->end = sl_trainer_next(t, 120000, &b, &err)) == SL_OK) {
        c->last = bench_now();
        if (c->samples == 0) c->first = c->last;
        c->samples += b->batch_size;
        uint32_t e =
            b->origin.epoch < BENCH_TRAINER_EPOCHS ? b->origin.epoch : BENCH_TRAINER_EPOCHS - 1;
        if (c->epoch_samples[e] == 0) c->epoch_first[e] = c->last;
        c->epoch_last[e] = c->last;
        c->epoch_samples[e] += b->batch_size;
        sl_trainer_release(t, b);
        if (c->delay_us) usleep(c->delay_us);
    }
    if (c->end != SL_OK && c->end != SL_ERR_CLOSED) snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_close(t);
    return NULL;
}

static volatile unsigned char sink;

void bench_consume(const void *p, size_t n)
{
    if (n > 0) sink ^= ((const unsigned char *)p)[n / 2];
}

double bench_memcpy_seconds(size_t n, int reps)
{
    unsigned char *src = aligned_alloc(64, (n + 63) & ~(size_t)63);
    unsigned char *dst = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 0x5a, n);
    memset(dst, 0, n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        memcpy(dst, src, n);
        double t = bench_now() - t0;
        bench_consume(dst, n);
        if (t < best) best = t;
    }
    free(src);
    free(dst);
    return best;
}

/* ---- the replicated real-rows shape ---- */

/* Replicates the jsonl of examples/movielens_sessions.py: copy k shifts
 * sample and session ids past the copies before it, user ids by k times
 * (largest + 1) (new users who behave like the real ones) and timestamps
 * by k weeks; movie ids, histories and ratings are the real ones. */
static const char replicate_py[] =
    "import json, sys\n"
    "src, out, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
    "rows = [json.loads(l) for l in open(src)]\n"
    "n = len(rows)\n"
    "sess = max(r['session_id'] for r in rows) + 1\n"
    "users = max(r['sparse']['user_id'][0] for r in rows) + 1\n"
    "with open(out, 'w') as f:\n"
    "    for k in range(copies):\n"
    "        for r in rows:\n"
    "            c = dict(r)\n"
    "            c['sample_id'] = r['sample_id'] + k * n\n"
    "            c['session_id'] = r['session_id'] + k * sess\n"
    "            c['ts'] = r['ts'] + k * 604800\n"
    "            sp = dict(r['sparse'])\n"
    "            sp['user_id'] = [u + k * users for u in sp['user_id']]\n"
    "            c['sparse'] = sp\n"
    "            f.write(json.dumps(c, separators=(',', ':')) + '\\n')\n"
    "print(n * copies)\n";

const char *bench_movielens_default(void)
{
    static const char path[] =
        SLUICE_SOURCE_DIR "/../shared/data/movielens-latest-small/ratings.csv";
    FILE *f = fopen(path, "r");
    if (f == NULL) return NULL;
    fclose(f);
    return path;
}

uint64_t bench_movielens_jsonl(const char *ratings, uint32_t copies, const char *work, char *jsonl,
                               size_t cap)
{
    char one[600], py[600], cmd[3000];
    snprintf(one, sizeof one, "%s/ml-one.jsonl", work);
    snprintf(py, sizeof py, "%s/replicate.py", work);
    snprintf(jsonl, cap, "%s/ml.jsonl", work);
    FILE *f = fopen(py, "w");
    if (f == NULL) return 0;
    fputs(replicate_py, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "python3 '%s/examples/movielens_sessions.py' --ratings '%s' --output '%s' "
             ">/dev/null 2>&1",
             SLUICE_SOURCE_DIR, ratings, one);
    if (system(cmd) != 0) return 0;
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' %u", py, one, jsonl, copies);
    FILE *p = popen(cmd, "r");
    if (p == NULL) return 0;
    unsigned long long n = 0;
    if (fscanf(p, "%llu", &n) != 1) n = 0;
    pclose(p);
    unlink(one);
    unlink(py);
    return n;
}

int bench_movielens_import(const char *jsonl, const char *table, bool cluster_dedup,
                           const sl_wh_writer_opts_t *base)
{
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.format = SL_WH_IMPORT_JSONL;
    const char *in[1] = {jsonl};
    o.inputs = in;
    o.num_inputs = 1;
    o.table_dir = table;
    o.partition = "ds=2016-10-16";
    if (base != NULL) o.writer = *base;
    o.writer.no_sync = true;
    static const char *const hist[] = {"user_history"};
    static const sl_dedup_group_spec_t g = {"history", 1, hist};
    if (cluster_dedup) {
        o.writer.cluster_sessions = true;
        o.writer.num_dedup_groups = 1;
        o.writer.dedup_groups = &g;
    }
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_import(&o, &sum, &err);
    if (rc != SL_OK) fprintf(stderr, "import %s: %s\n", jsonl, err.msg);
    sl_wh_import_summary_free(&sum);
    return rc == SL_OK ? 0 : -1;
}

int bench_drain_reader(sl_wh_reader_t *rd, bench_read_t *r)
{
    const sl_wh_rows_t *rows;
    sl_error_t err = {0};
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
    return 0;
}

int bench_read_table(const sl_wh_table_t *t, const char *dir, const sl_wh_read_opts_t *opts,
                     bench_read_t *r)
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
            if (bench_drain_reader(rd, r) != 0) return -1;
        }
    }
    r->wall = bench_now() - w0;
    r->cpu = bench_cpu_seconds() - c0;
    return 0;
}

int bench_s3_env_load(const char *dir, const char *who)
{
    char path[600], line[512];
    snprintf(path, sizeof path, "%s/env", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "%s: %s: %s (start it: ops/s3proxy start --dir %s)\n", who, path,
                strerror(errno), dir);
        return 1;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL) continue;
        *eq = '\0';
        setenv(line, eq + 1, 1);
    }
    fclose(f);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    return 0;
}

/* nftw passes no context: the upload in progress (the benchmarks upload
 * from one thread) */
static struct {
    sl_store_t *store;
    const char *root, *prefix, *who;
} upload;

static int upload_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag != FTW_F) return 0;
    char key[1024];
    snprintf(key, sizeof key, "%s/%s", upload.prefix, path + strlen(upload.root) + 1);
    sl_error_t e = {0};
    if (sl_store_put_file(upload.store, key, path, &e) != SL_OK) {
        fprintf(stderr, "%s: %s\n", upload.who, e.msg);
        return 1;
    }
    return 0;
}

int bench_s3_upload_tree(sl_store_t *store, const char *root, const char *prefix, const char *who)
{
    upload.store = store;
    upload.root = root;
    upload.prefix = prefix;
    upload.who = who;
    return nftw(root, upload_one, 16, FTW_PHYS) != 0;
}
