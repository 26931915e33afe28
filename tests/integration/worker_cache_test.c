/* The worker's half of the autocache (src/dpp/worker/runtime/cache.c): a split
 * read with CACHE_WRITE leaves a cache file; read with CACHE_READ, the
 * same batches come out of it (the same keys, lengths, ids, weights, dense
 * values, labels with a filter's weight label, sample ids, origins and row
 * ranges) without the transforms; a corrupt or missing file falls back to
 * computing, counted, with the same batches again; a cache file whose
 * writes fail (libfiu point sluice/worker/cache_write, EIO) is not
 * written and costs no batch.
 *
 * A test source hands out every split of a table under a stand-in lease,
 * epoch after epoch, each epoch with its cache mode; a trainer reads every
 * batch and keeps a digest of each, keyed by (epoch, split, first row). */
#define FIU_ENABLE 1 /* libfiu's real calls, not fiu.h's no-op stand-ins */
#include <criterion/criterion.h>
#include <fiu-control.h>
#include <fiu.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/warehouse.h"

#define ROWS 6000u
#define STRIPE 1000u /* 6 splits */
#define BATCH 256u

static char dir[256], table[300], cache[300];
static const char *src_table = table; /* the table run() reads */

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/sluice-worker-cache-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(table, sizeof table, "%s/table", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    cr_assert_eq(mkdir(cache, 0755), 0);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", ROWS, 3, &spec, &err), SL_OK, "%s", err.msg);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = STRIPE;
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(table, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(worker_cache, .init = setup, .fini = teardown);

/* ---- the test source ---- */

#define MAX_SPLITS 16
#define MAX_EPOCHS 4

typedef struct tsrc {
    const sl_wh_splits_t *sp;
    uint32_t epochs, next;
    uint32_t modes[MAX_EPOCHS];
    char paths[MAX_SPLITS][400];
    sl_dpp_row_range_t todo[MAX_SPLITS];
    int lease; /* the stand-in lease handle */
} tsrc_t;

static sl_err_t src_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    (void)err;
    tsrc_t *s = ctx;
    uint32_t n = s->sp->count;
    if (s->next >= s->epochs * n) return SL_ERR_CLOSED;
    uint32_t e = s->next / n, k = s->next % n;
    s->next++;
    *out = (sl_worker_work_t){.split = &s->sp->items[k],
                              .epoch = e,
                              .split_id = k,
                              .todo = &s->todo[k],
                              .num_todo = 1,
                              .lease = &s->lease,
                              .generation = 1,
                              .cache_file = s->paths[k],
                              .cache_mode = s->modes[e]};
    return SL_OK;
}

static bool src_live(void *ctx, void *lease)
{
    (void)ctx;
    (void)lease;
    return true;
}

static void src_destroy(void *ctx)
{
    (void)ctx;
}

/* ---- batch digests ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t kjt_digest(uint64_t h, const sl_kjt_t *k)
{
    h = fnv(h, &k->num_keys, sizeof k->num_keys);
    h = fnv(h, &k->stride, sizeof k->stride);
    for (uint32_t i = 0; i < k->num_keys; i++)
        h = fnv(h, k->keys[i], strlen(k->keys[i]) + 1);
    h = fnv(h, k->lengths, (size_t)k->num_keys * k->stride * sizeof *k->lengths);
    h = fnv(h, k->values, k->num_values * sizeof *k->values);
    bool weighted = k->weights != NULL;
    h = fnv(h, &weighted, sizeof weighted);
    if (k->weights) h = fnv(h, k->weights, k->num_values * sizeof *k->weights);
    return h;
}

/* Everything a batch holds, its dedup groups (name, unique rows, inverse
 * indices) included. */
static uint64_t digest(const sl_batch_t *b)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &b->batch_size, sizeof b->batch_size);
    h = kjt_digest(h, &b->sparse);
    h = fnv(h, &b->num_groups, sizeof b->num_groups);
    for (uint32_t g = 0; g < b->num_groups; g++) {
        const sl_ikjt_t *ik = &b->groups[g];
        h = fnv(h, ik->name, strlen(ik->name) + 1);
        h = kjt_digest(h, &ik->unique);
        h = fnv(h, &ik->batch_size, sizeof ik->batch_size);
        h = fnv(h, ik->inverse, (size_t)ik->batch_size * sizeof *ik->inverse);
    }
    const sl_dense_t *d[2] = {&b->dense, &b->labels};
    for (int j = 0; j < 2; j++) {
        h = fnv(h, &d[j]->cols, sizeof d[j]->cols);
        for (uint32_t c = 0; c < d[j]->cols; c++)
            h = fnv(h, d[j]->names[c], strlen(d[j]->names[c]) + 1);
        h = fnv(h, d[j]->data, (size_t)d[j]->rows * d[j]->cols * sizeof(float));
    }
    cr_assert_not_null(b->sample_ids);
    h = fnv(h, b->sample_ids, (size_t)b->batch_size * sizeof *b->sample_ids);
    return h;
}

#define MAX_BATCHES 512
typedef struct seen {
    uint32_t epoch[MAX_BATCHES];
    uint64_t split[MAX_BATCHES], row[MAX_BATCHES], hash[MAX_BATCHES], seq[MAX_BATCHES];
    uint32_t n;
    uint64_t samples[MAX_EPOCHS];
} seen_t;

/* Run a worker for job over the table's splits, epochs epochs of the given
 * modes; every batch digested into out. */
static void run(const char *spec, uint32_t epochs, const uint32_t *modes, seen_t *out,
                sl_worker_stats_t *st)
{
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t p = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, &p, &err), SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&p);
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(src_table, NULL, &t, &err), SL_OK, "%s", err.msg);
    sl_wh_splits_t *sp;
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    cr_assert_leq(sp->count, MAX_SPLITS);
    tsrc_t *s = calloc(1, sizeof *s);
    s->sp = sp;
    s->epochs = epochs;
    for (uint32_t e = 0; e < epochs; e++)
        s->modes[e] = modes[e];
    for (uint32_t k = 0; k < sp->count; k++) {
        snprintf(s->paths[k], sizeof s->paths[k], "%s/split-%u.slc", cache, k);
        s->todo[k] = (sl_dpp_row_range_t){0, sp->items[k].num_rows};
    }
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 2;
    o.memory_limit = 64u << 20;
    o.source = (sl_worker_source_t){
        .next = src_next, .destroy = src_destroy, .lease_live = src_live, .ctx = s};
    sl_worker_t *w = NULL;
    cr_assert_eq(sl_worker_start(job, &o, &w, &p, &err), SL_OK, "%s", err.msg);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    sl_trainer_t *tr;
    cr_assert_eq(sl_trainer_connect(&to, &tr, &err), SL_OK, "%s", err.msg);
    sl_batch_t *b;
    sl_err_t rc;
    memset(out, 0, sizeof *out);
    while ((rc = sl_trainer_next(tr, (int)(tu_timeout(30) * 1000), &b, &err)) == SL_OK) {
        cr_assert_lt(out->n, MAX_BATCHES);
        cr_assert_lt(b->origin.epoch, epochs);
        out->epoch[out->n] = b->origin.epoch;
        out->split[out->n] = b->origin.split_id;
        out->row[out->n] = b->origin.first_row;
        out->hash[out->n] = digest(b);
        out->seq[out->n] = b->origin.sequence;
        out->samples[b->origin.epoch] += b->batch_size;
        out->n++;
        sl_trainer_release(tr, b);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s: %s", sl_err_str(rc), err.msg);
    sl_trainer_close(tr);
    sl_worker_stats(w, st);
    sl_worker_destroy(w);
    free(s);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    sl_pipeline_job_destroy(job);
}

/* The index of epoch e's batch of (split, row); cr_assert when none. */
static uint32_t find_at(const seen_t *s, uint32_t e, uint64_t split, uint64_t row)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->epoch[i] == e && s->split[i] == split && s->row[i] == row) return i;
    cr_assert_fail("no batch of epoch %u split %llu row %llu", e, (unsigned long long)split,
                   (unsigned long long)row);
    return 0;
}

static uint64_t find(const seen_t *s, uint32_t e, uint64_t split, uint64_t row)
{
    return s->hash[find_at(s, e, split, row)];
}

/* Every batch of epoch a has its twin in epoch b, and as many of them;
 * with seq, the same sequence number too (a file that fails mid-way
 * leaves the rest to a batcher that numbers them anew). */
static void same_epochs(const seen_t *s, uint32_t a, uint32_t b, bool seq)
{
    uint32_t na = 0, nb = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        na += s->epoch[i] == a;
        nb += s->epoch[i] == b;
        if (s->epoch[i] == a)
            cr_assert_eq(find(s, b, s->split[i], s->row[i]), s->hash[i],
                         "epoch %u split %llu row %llu differs in epoch %u", a,
                         (unsigned long long)s->split[i], (unsigned long long)s->row[i], b);
        if (s->epoch[i] == a && seq)
            cr_assert_eq(s->seq[find_at(s, b, s->split[i], s->row[i])], s->seq[i]);
    }
    cr_assert_eq(na, nb);
    cr_assert_eq(s->samples[a], s->samples[b]);
}

/* Epoch 0 of spec computed under CACHE_WRITE: every split's file written,
 * nothing read. */
static void write_files(const char *spec, seen_t *s, sl_worker_stats_t *st)
{
    uint32_t w[] = {SL_WORKER_CACHE_WRITE};
    run(spec, 1, w, s, st);
    cr_assert_eq(st->cache_files_written, ROWS / STRIPE);
    cr_assert_gt(st->cache_bytes_written, 0);
    cr_assert_eq(st->cache_batches, 0);
}

/* Epoch 0 computed, epoch 1 from the files: the same batches, and the same
 * as first (the epoch that wrote them); all of epoch 1 served, no
 * fallback, nothing written. */
static void read_files(const char *spec, const seen_t *first, seen_t *s, sl_worker_stats_t *st)
{
    uint32_t r[] = {SL_WORKER_CACHE_NONE, SL_WORKER_CACHE_READ};
    run(spec, 2, r, s, st);
    same_epochs(s, 0, 1, true);
    for (uint32_t i = 0; i < first->n; i++)
        cr_assert_eq(find(s, 0, first->split[i], first->row[i]), first->hash[i]);
    cr_assert_eq(st->cache_samples, s->samples[1]);
    cr_assert_eq(st->cache_batches, first->n);
    cr_assert_eq(st->cache_fallbacks, 0);
    cr_assert_eq(st->cache_files_written, 0);
}

/* XOR mask into the byte of path at 1/den of its size. */
static void flip(const char *path, uint32_t den, uint8_t mask)
{
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s", path);
    struct stat sb;
    cr_assert_eq(fstat(fd, &sb), 0);
    uint8_t byte;
    cr_assert_eq(pread(fd, &byte, 1, sb.st_size / den), 1);
    byte ^= mask;
    cr_assert_eq(pwrite(fd, &byte, 1, sb.st_size / den), 1);
    close(fd);
}

static const char *SPEC =
    "{\"id\":\"c\",\"source\":{\"table\":\"%s\",\"features\":[\"I1\",\"I2\",\"C1\",\"C2\"]},"
    "\"filters\":[{\"op\":\"negative_downsample\",\"label\":\"label\",\"rate\":0.5,\"seed\":7}],"
    "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"},"
    "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":1000},"
    "{\"op\":\"cross\",\"features\":[\"C1\",\"C3\"],\"table_size\":5000},"
    "{\"op\":\"bucketize\",\"feature\":\"I2\",\"borders\":[0,1,10,100]}],"
    "\"batch\":{\"size\":%u,\"epochs\":1}}";

Test(worker_cache, cached_batches_equal_computed_ones_and_a_corrupt_file_falls_back)
{
    char spec[2048];
    snprintf(spec, sizeof spec, SPEC, table, BATCH);
    seen_t s;
    sl_worker_stats_t st;
    /* write: epoch 0 computes and writes every split's file */
    write_files(spec, &s, &st);
    seen_t first = s;

    /* read: epoch 0 computed, epoch 1 from the files: the same batches */
    read_files(spec, &first, &s, &st);
    uint32_t r[] = {SL_WORKER_CACHE_NONE, SL_WORKER_CACHE_READ};

    /* a corrupt file and a missing one: computed; the corrupt one is
     * removed (or written anew when nothing of it was served), the missing
     * one written anew */
    char path[400], bad[400];
    snprintf(bad, sizeof bad, "%s/split-1.slc", cache);
    flip(bad, 3, 0xff);
    snprintf(path, sizeof path, "%s/split-2.slc", cache);
    cr_assert_eq(unlink(path), 0);
    run(spec, 2, r, &s, &st);
    same_epochs(&s, 0, 1, false);
    cr_assert_eq(st.cache_fallbacks, 2);
    cr_assert_eq(st.cache_files_written, 1 + (access(bad, F_OK) == 0));
    cr_assert_lt(st.cache_samples, s.samples[1]);
    cr_assert_eq(access(path, F_OK), 0, "the missing file was not written anew");
    /* and once more: every file read whole, or written */
    run(spec, 2, r, &s, &st);
    same_epochs(&s, 0, 1, false);
}

/* Every write of the cache files fails (EIO): no file is written (nor a
 * part left behind), every batch of both epochs is delivered as computing
 * makes it (the same batches in each); with the disk well again the files
 * are written and serve the same batches. */
Test(worker_cache, a_cache_file_whose_writes_fail_costs_no_batch)
{
    cr_assert_eq(fiu_init(0), 0);
    char spec[2048];
    snprintf(spec, sizeof spec, SPEC, table, BATCH);
    seen_t s;
    sl_worker_stats_t st;
    cr_assert_eq(fiu_enable("sluice/worker/cache_write", 1, NULL, 0), 0);
    uint32_t w[] = {SL_WORKER_CACHE_WRITE, SL_WORKER_CACHE_WRITE};
    run(spec, 2, w, &s, &st);
    cr_assert_eq(fiu_disable("sluice/worker/cache_write"), 0);
    same_epochs(&s, 0, 1, true);
    cr_assert_gt(s.samples[0], 0);
    cr_assert_eq(st.cache_files_written, 0);
    cr_assert_eq(st.cache_batches, 0);
    DIR *d = opendir(cache);
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        cr_assert(de->d_name[0] == '.', "%s left in the cache directory", de->d_name);
    closedir(d);
    seen_t first = s;
    write_files(spec, &s, &st);
    for (uint32_t i = 0; i < first.n; i++)
        if (first.epoch[i] == 0)
            cr_assert_eq(find(&s, 0, first.split[i], first.row[i]), first.hash[i]);
    seen_t written = s;
    read_files(spec, &written, &s, &st);
}

/* Transforms the fused path makes on the reader thread (no filter: a
 * weight label keeps batches off it). */
static const char *FUSED_SPEC =
    "{\"id\":\"f\",\"source\":{\"table\":\"%s\",\"features\":[\"I1\",\"I2\",\"C1\",\"C2\"]},"
    "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"I1\"},"
    "{\"op\":\"sigrid_hash\",\"feature\":\"C1\",\"table_size\":1000},"
    "{\"op\":\"clamp\",\"feature\":\"I2\",\"min\":0,\"max\":100}],"
    "\"batch\":{\"size\":%u,\"epochs\":1}}";

/* A fused batch skips the transform threads, where batches are written to
 * the cache file: a split being written is read the general way, and the
 * file it leaves serves the same batches the fused path makes. */
Test(worker_cache, a_job_on_the_fused_path_is_cached_whole)
{
    char spec[2048];
    snprintf(spec, sizeof spec, FUSED_SPEC, table, BATCH);
    seen_t fused, s;
    sl_worker_stats_t st;
    uint32_t none[] = {SL_WORKER_CACHE_NONE};
    run(spec, 1, none, &fused, &st);
    cr_assert_gt(st.batches_fused, 0, "the job does not take the fused path");
    uint32_t w[] = {SL_WORKER_CACHE_WRITE};
    run(spec, 1, w, &s, &st);
    cr_assert_eq(st.batches_fused, 0);
    cr_assert_eq(st.cache_files_written, ROWS / STRIPE);
    for (uint32_t i = 0; i < fused.n; i++) /* the general path's frames are the fused ones */
        cr_assert_eq(find(&s, 0, fused.split[i], fused.row[i]), fused.hash[i]);
    uint32_t r[] = {SL_WORKER_CACHE_NONE, SL_WORKER_CACHE_READ};
    run(spec, 2, r, &s, &st);
    cr_assert_gt(st.batches_fused, 0);
    same_epochs(&s, 0, 1, true);
    cr_assert_eq(st.cache_samples, s.samples[1]);
    cr_assert_eq(st.cache_fallbacks, 0);
}

/* ---- dedup groups (issue 14: storage-deduplicated cache files) ---- */

/* A sessions table beside the criteo one: written expanded, or with
 * storage dedup of the job's groups (then the worker reads them in dedup
 * form). */
static void gen_sessions(const char *at, bool stored_dedup)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", ROWS, 5, &spec, &err), SL_OK, "%s", err.msg);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = STRIPE;
    go.writer.no_sync = true;
    go.threads = 1;
    static const char *const u[] = {"user_id", "user_cat"}, *const h[] = {"user_hist"};
    sl_dedup_group_spec_t gs[] = {{"u", 2, u}, {"h", 1, h}};
    if (stored_dedup) {
        go.writer.num_dedup_groups = 2;
        go.writer.dedup_groups = gs;
    }
    cr_assert_eq(sl_wh_gen_table(at, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

/* Two groups; the transforms fold group u's unique rows onto at most 4
 * values (user_id mod 2, the first user_cat id mod 2), so its IKJTs hold
 * repeated unique rows: a file that deduplicated them again would not give
 * the computed batches back. */
static const char *DEDUP_SPEC =
    "{\"id\":\"d\",\"source\":{\"table\":\"%s\",\"features\":[\"user_id\",\"user_cat\","
    "\"user_hist\",\"item_id\",\"item_cat\",\"user_age\",\"item_clicks\"]},"
    "\"filters\":[{\"op\":\"negative_downsample\",\"label\":\"click\",\"rate\":0.5,\"seed\":3}],"
    "\"transforms\":[{\"op\":\"modulo\",\"feature\":\"user_id\",\"divisor\":2},"
    "{\"op\":\"first_x\",\"feature\":\"user_cat\",\"x\":1},"
    "{\"op\":\"modulo\",\"feature\":\"user_cat\",\"divisor\":2},"
    "{\"op\":\"first_x\",\"feature\":\"user_hist\",\"x\":8},"
    "{\"op\":\"sigrid_hash\",\"feature\":\"item_id\",\"table_size\":1000},"
    "{\"op\":\"log1p\",\"feature\":\"item_clicks\"}],"
    "\"batch\":{\"size\":%u,\"epochs\":1,"
    "\"dedup_groups\":{\"u\":[\"user_id\",\"user_cat\"],\"h\":[\"user_hist\"]}}}";

/* The cache file of split 0 stores the groups deduplicated: its footer
 * names them, and a stripe of group u keeps repeated unique rows as the
 * batch had them (more than the 4 distinct rows the transforms leave). */
static void assert_stored_dedup(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/split-0.slc", cache);
    sl_wh_read_opts_t ro = {.dedup_form = true};
    sl_wh_reader_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, &ro, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_num_groups(r), 2);
    cr_assert_str_eq(sl_wh_reader_group(r, 0)->name, "u");
    cr_assert_str_eq(sl_wh_reader_group(r, 1)->name, "h");
    uint64_t rows = 0, unique = 0;
    uint32_t most = 0;
    for (uint32_t s = 0; s < sl_wh_reader_num_stripes(r); s++) {
        const sl_wh_rows_t *rw = NULL;
        cr_assert_eq(sl_wh_reader_read_stripe(r, s, &rw, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(rw->batch.num_groups, 2);
        const sl_ikjt_t *u = &rw->batch.groups[0];
        cr_assert_str_eq(u->name, "u");
        cr_assert_eq(u->batch_size, rw->batch.batch_size);
        rows += u->batch_size;
        unique += u->unique.stride;
        if (u->unique.stride > most) most = u->unique.stride;
    }
    sl_wh_reader_close(r);
    cr_assert_gt(most, 4, "no stripe keeps repeated unique rows");
    cr_assert_lt(unique, rows, "group u is not stored deduplicated");
}

static void dedup_job_is_cached(bool stored_dedup)
{
    static char sessions[300];
    snprintf(sessions, sizeof sessions, "%s/sessions", dir);
    gen_sessions(sessions, stored_dedup);
    src_table = sessions;
    char spec[2048];
    snprintf(spec, sizeof spec, DEDUP_SPEC, sessions, BATCH);
    seen_t s;
    sl_worker_stats_t st;
    write_files(spec, &s, &st);
    cr_assert_eq(st.num_groups, 2);
    sl_worker_group_stats_t computed[2] = {st.groups[0], st.groups[1]};
    cr_assert_eq(computed[0].rows, s.samples[0]);
    cr_assert_lt(computed[0].unique_rows, computed[0].rows);
    seen_t first = s;

    /* epoch 1 from the files: every batch, groups included, as computed */
    read_files(spec, &first, &s, &st);
    assert_stored_dedup();
    /* served batches count in the dedup figures as computed ones do */
    for (uint32_t g = 0; g < 2; g++) {
        cr_assert_eq(st.groups[g].rows, 2 * computed[g].rows, "group %u", g);
        cr_assert_eq(st.groups[g].unique_rows, 2 * computed[g].unique_rows, "group %u", g);
    }

    /* a corrupt file falls back: computed, the same batches */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/split-3.slc", cache);
    flip(bad, 2, 0x5a);
    uint32_t r[] = {SL_WORKER_CACHE_NONE, SL_WORKER_CACHE_READ};
    run(spec, 2, r, &s, &st);
    same_epochs(&s, 0, 1, false);
    for (uint32_t i = 0; i < first.n; i++)
        cr_assert_eq(find(&s, 1, first.split[i], first.row[i]), first.hash[i]);
    cr_assert_eq(st.cache_fallbacks, 1);
    cr_assert_lt(st.cache_samples, s.samples[1]);
    cr_assert_eq(s.samples[1], first.samples[0]);
    src_table = table;
}

/* The worker deduplicates (the table stores the groups expanded). */
Test(worker_cache, a_job_with_dedup_groups_is_cached_deduplicated)
{
    dedup_job_is_cached(false);
}

/* The table stores the job's groups (the reader's dedup form): the
 * batches' IKJTs come from the table's stripes. */
Test(worker_cache, a_job_reading_stored_groups_is_cached_deduplicated)
{
    dedup_job_is_cached(true);
}
