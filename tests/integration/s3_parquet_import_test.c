/* Against the s3proxy of the ctest fixture s3 (s3_util.h): a Parquet
 * dataset at s3://bucket/prefix reads as on disk, a replaced object is
 * refused, a worker runs a Parquet job from it counting its requests; and
 * `sluice table import --table s3://` writes a table that reads back as
 * the local import. */
#include "s3_table_util.h"

/* ---- Parquet datasets ---- */

typedef struct pq_digest {
    uint64_t h, rows;
    uint32_t nd, ns;
} pq_digest_t;

static sl_err_t pq_row(void *ctx, uint64_t row, const sl_wh_row_t *r, sl_error_t *err)
{
    (void)row;
    (void)err;
    pq_digest_t *d = ctx;
    d->h = (d->h ^ (uint64_t)r->sample_id) * 1099511628211ull;
    for (uint32_t i = 0; i < d->nd; i++) {
        uint32_t v;
        memcpy(&v, &r->dense[i], 4);
        d->h = (d->h ^ v) * 1099511628211ull;
    }
    for (uint32_t i = 0; i < d->ns; i++)
        for (uint32_t k = 0; k < r->sparse[i].len; k++)
            d->h = (d->h ^ (uint64_t)r->sparse[i].ids[k]) * 1099511628211ull;
    d->rows++;
    return SL_OK;
}

static const sl_wh_mem_t *pq_mem; /* the memory hook of pq_read_all's dataset */

/* Every row of every split of the dataset at path: a digest. */
static pq_digest_t pq_read_all(const char *path, sl_wh_pqds_t **keep, sl_wh_splits_t **keep_sp)
{
    sl_wh_pqds_t *ds = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_open(path, NULL, "ds>=2026-11-02", NULL, NULL, NULL, &ds, &err), SL_OK,
                 "%s", err.msg);
    sl_wh_pqds_set_mem(ds, pq_mem);
    cr_assert_eq(sl_wh_pqds_num_files(ds), 2);
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_pqds_plan(ds, 1, NULL, 0, &sp, NULL, &err), SL_OK, "%s", err.msg);
    const sl_wh_schema_t *sc = sl_wh_pqds_mapping(ds)->schema;
    pq_digest_t d = {.h = 1469598103934665603ull,
                     .nd = sl_wh_schema_num_dense(sc),
                     .ns = sl_wh_schema_num_sparse(sc)};
    sl_wh_pqds_reader_t *r = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 0; i < sp->count; i++)
        cr_assert_eq(sl_wh_pqds_read(r, &sp->items[i], 0, sp->items[i].num_rows, pq_row, &d, &err),
                     SL_OK, "%s", err.msg);
    sl_wh_pqds_reader_destroy(r);
    if (keep != NULL) {
        *keep = ds;
        *keep_sp = sp;
    } else {
        sl_wh_splits_destroy(sp);
        sl_wh_pqds_destroy(ds);
    }
    return d;
}

Test(s3_table, a_parquet_dataset_in_s3_reads_as_on_disk_and_a_replaced_object_is_refused)
{
    su_env();
    char b[64], url[200], key[200];
    su_bucket("tpq", b, sizeof b);
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    char src[600];
    snprintf(src, sizeof src, "%s/tests/data/parquet/duckdb-zstd.parquet", root);
    char *dir = tu_mkdtemp("tpq"), local[400];
    snprintf(local, sizeof local, "%s/pq", dir);
    sl_store_t *st;
    sl_error_t err = {0};
    snprintf(url, sizeof url, "s3://%s", b);
    cr_assert_eq(sl_store_open_url(url, NULL, &st, NULL, &err), SL_OK, "%s", err.msg);
    /* three Hive partitions, one filtered out; a _SUCCESS marker and a
     * file that is not Parquet, both ignored */
    const char *parts[] = {"ds=2026-11-01", "ds=2026-11-02", "ds=2026-11-03"};
    struct stat sb;
    cr_assert_eq(stat(src, &sb), 0);
    char *data = malloc((size_t)sb.st_size);
    FILE *in = fopen(src, "rb");
    cr_assert(in != NULL && data != NULL);
    cr_assert_eq(fread(data, 1, (size_t)sb.st_size, in), (size_t)sb.st_size);
    fclose(in);
    cr_assert_eq(mkdir(local, 0755), 0);
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", local, parts[i]);
        cr_assert_eq(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/%s/part-0.parquet", local, parts[i]);
        tu_write_file(path, data, (size_t)sb.st_size);
        snprintf(key, sizeof key, "pq/%s/part-0.parquet", parts[i]);
        cr_assert_eq(sl_store_put(st, key, data, (size_t)sb.st_size, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_store_put(st, "pq/_SUCCESS", "", 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put(st, "pq/ds=2026-11-02/notes.txt", "x", 1, &err), SL_OK, "%s",
                 err.msg);
    pq_digest_t want = pq_read_all(local, NULL, NULL);
    snprintf(url, sizeof url, "s3://%s/pq", b);
    sl_wh_pqds_t *ds;
    sl_wh_splits_t *sp;
    pq_digest_t got = pq_read_all(url, &ds, &sp);
    cr_assert_eq(want.rows, 100, "two partitions of 50 rows");
    cr_assert_eq(got.rows, want.rows);
    cr_assert_eq(got.h, want.h);
    /* With a memory hook (a worker's --memory-limit): each row group's
     * column chunks are taken before they are fetched and given back
     * before the next group's, so at most one group's are held; the same
     * rows. A hook without room for them fails the read, naming them. */
    count_mem_t cm = {.room = UINT64_MAX};
    sl_wh_mem_t hook = count_mem(&cm);
    pq_mem = &hook;
    pq_digest_t counted = pq_read_all(url, NULL, NULL);
    cr_assert_eq(counted.rows, want.rows);
    cr_assert_eq(counted.h, want.h);
    cr_assert_gt(cm.takes, 0);
    cr_assert_eq(cm.held, 0);
    cr_assert_eq(cm.peak, cm.largest);
    cr_assert_lt(cm.largest, (uint64_t)sb.st_size);
    cm = (count_mem_t){.room = cm.largest - 1};
    {
        sl_wh_pqds_t *mds = NULL;
        sl_wh_splits_t *msp = NULL;
        cr_assert_eq(sl_wh_pqds_open(url, NULL, NULL, NULL, NULL, NULL, &mds, &err), SL_OK, "%s",
                     err.msg);
        sl_wh_pqds_set_mem(mds, &hook);
        cr_assert_eq(sl_wh_pqds_plan(mds, 1000000, NULL, 0, &msp, NULL, &err), SL_OK, "%s",
                     err.msg);
        sl_wh_pqds_reader_t *mr = NULL;
        cr_assert_eq(sl_wh_pqds_reader_new(mds, NULL, 0, &mr, &err), SL_OK, "%s", err.msg);
        pq_digest_t none = {0};
        sl_err_t mrc = SL_OK;
        for (uint32_t i = 0; i < msp->count && mrc == SL_OK; i++)
            mrc =
                sl_wh_pqds_read(mr, &msp->items[i], 0, msp->items[i].num_rows, pq_row, &none, &err);
        cr_assert_eq(mrc, SL_ERR_NOMEM, "%s", err.msg);
        cr_assert(strstr(err.msg, "test limit: no room for the column chunks of ") &&
                      strstr(err.msg, "part-0.parquet row group "),
                  "%s", err.msg);
        cr_assert_eq(cm.held, 0);
        sl_wh_pqds_reader_destroy(mr);
        sl_wh_splits_destroy(msp);
        sl_wh_pqds_destroy(mds);
    }
    pq_mem = NULL;
    /* The object of the first split replaced by other bytes: its reads
     * are refused, naming it, never mixed with the planned version. */
    cr_assert_eq(
        sl_store_put(st, "pq/ds=2026-11-02/part-0.parquet", data, (size_t)sb.st_size - 1, &err),
        SL_OK, "%s", err.msg);
    sl_wh_pqds_reader_t *r = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    pq_digest_t d = {0};
    cr_assert_eq(sl_wh_pqds_read(r, &sp->items[0], 0, sp->items[0].num_rows, pq_row, &d, &err),
                 SL_ERR_VERSION, "%s", err.msg);
    char msg[400];
    snprintf(msg, sizeof msg,
             "s3://%s/pq/ds=2026-11-02/part-0.parquet: the object was replaced after the dataset "
             "was listed",
             b);
    cr_assert(strncmp(err.msg, msg, strlen(msg)) == 0, "%s", err.msg);
    cr_assert_eq(d.rows, 0);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    /* A prefix with nothing: named. */
    snprintf(url, sizeof url, "s3://%s/nothing", b);
    cr_assert_eq(sl_wh_pqds_open(url, NULL, NULL, NULL, NULL, NULL, &ds, &err), SL_ERR_NOT_FOUND);
    snprintf(msg, sizeof msg, "Parquet dataset s3://%s/nothing: no .parquet file", b);
    cr_assert_str_eq(err.msg, msg);
    free(data);
    sl_store_destroy(st);
    free(dir);
}

Test(s3_table, a_worker_runs_a_parquet_job_from_s3_and_counts_its_requests)
{
    su_env();
    char b[64], url[200], spec[512], addr[64];
    su_bucket("tpqw", b, sizeof b);
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root);
    char src[600];
    snprintf(src, sizeof src, "%s/tests/data/parquet/duckdb-zstd.parquet", root);
    snprintf(url, sizeof url, "s3://%s", b);
    sl_store_t *st;
    sl_error_t err = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &st, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put_file(st, "pq/ds=1/part-0.parquet", src, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put_file(st, "pq/ds=2/part-0.parquet", src, &err), SL_OK, "%s", err.msg);
    sl_store_destroy(st);
    snprintf(spec, sizeof spec,
             "{\"id\":\"s3pqw\",\"source\":{\"parquet\":\"s3://%s/pq\"},"
             "\"batch\":{\"size\":16,\"epochs\":2}}",
             b);
    sl_pipeline_job_t *job = NULL;
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    sl_trainer_t *t = NULL;
    cr_assert_eq(sl_trainer_connect(&to, &t, &err), SL_OK, "%s", err.msg);
    uint64_t samples = 0;
    sl_batch_t *bt;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, (int)(tu_timeout(30) * 1000), &bt, &err)) == SL_OK) {
        samples += bt->batch_size;
        sl_trainer_release(t, bt);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s", err.msg);
    cr_assert_eq(samples, 2 * 2 * 50, "2 files of 50 rows, 2 epochs");
    sl_store_t *ws = sl_worker_store(w);
    cr_assert_not_null(ws, "the dataset's store");
    sl_store_stats_t ss;
    sl_store_stats(ws, &ss);
    /* the listing, each footer (planning), each row group's chunks */
    cr_assert_gt(ss.requests, 3);
    cr_assert_eq(ss.by_result[SL_STORE_OK], ss.requests);
    cr_assert_eq(ss.failures, 0);
    sl_trainer_close(t);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

static int sluice(char **out, char **err, char *const args[])
{
    const char *bin = tu_binary();
    char *argv[16] = {(char *)bin};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    return tu_run(".", argv, tu_timeout(60), out, err);
}

Test(s3_table, import_to_s3_then_read_it_back_as_the_local_import)
{
    su_env();
    char b[64], url[200], prefix[200];
    su_bucket("timp", b, sizeof b);
    char *dir = tu_mkdtemp("timp"), *tsv = tu_path(dir, "in.tsv"), *loc = tu_path(dir, "local");
    /* 300 criteo rows: label, 13 counts, 26 hashed categories */
    FILE *f = fopen(tsv, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 300; i++) {
        fprintf(f, "%d", i % 3 == 0);
        for (int c = 0; c < 13; c++)
            fprintf(f, "\t%d", (i * 7 + c) % 50);
        for (int c = 0; c < 26; c++)
            fprintf(f, "\t%08x", (unsigned)(i * 2654435761u + (unsigned)c));
        fprintf(f, "\n");
    }
    fclose(f);
    snprintf(url, sizeof url, "s3://%s/imp", b);
    snprintf(prefix, sizeof prefix, "s3://%s/imp/", b);
    char *out, *err;
    for (int k = 0; k < 2; k++) {
        char *imp[] = {"table",   "import", "--format",    "criteo",        "--input", tsv,
                       "--table", url,      "--partition", "ds=2026-11-29", NULL};
        cr_assert_eq(sluice(&out, &err, imp), 0, "%s", err);
        free(out);
        free(err);
        char *impl[] = {"table",   "import", "--format",    "criteo",        "--input", tsv,
                        "--table", loc,      "--partition", "ds=2026-11-29", NULL};
        cr_assert_eq(sluice(&out, &err, impl), 0, "%s", err);
        free(out);
        free(err);
    }
    /* The second import numbers its file past the first one's. */
    char *ls[] = {"store", "ls", prefix, NULL};
    cr_assert_eq(sluice(&out, &err, ls), 0, "%s", err);
    cr_assert(strstr(out, "imp/_schema\n") && strstr(out, "imp/ds=2026-11-29/part-00000.slc\n") &&
                  strstr(out, "imp/ds=2026-11-29/part-00001.slc\n"),
              "%s", out);
    int lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, 3, "%s", out);
    free(out);
    free(err);
    char *cat_s3[] = {"table", "cat", url, NULL}, *cat_loc[] = {"table", "cat", loc, NULL};
    char *o2, *e2;
    cr_assert_eq(sluice(&out, &err, cat_s3), 0, "%s", err);
    cr_assert_eq(sluice(&o2, &e2, cat_loc), 0, "%s", e2);
    cr_assert_str_eq(out, o2);
    int rows = 0;
    for (char *p = out; *p; p++)
        rows += *p == '\n';
    cr_assert_eq(rows, 600);
    free(out);
    free(err);
    free(o2);
    free(e2);
    char *verify[] = {"table", "verify", url, NULL};
    cr_assert_eq(sluice(&out, &err, verify), 0, "%s%s", out, err);
    free(out);
    free(err);
    /* A wrong secret: refused before anything is written, named, no
     * secret in the message; the staging directory (under TMPDIR) gone. */
    char *tmp = tu_path(dir, "tmp");
    cr_assert_eq(mkdir(tmp, 0755), 0);
    setenv("TMPDIR", tmp, 1);
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-wrong-secret", 1);
    char bad[200];
    snprintf(bad, sizeof bad, "s3://%s/imp2", b);
    char *impb[] = {"table",   "import", "--format",    "criteo",        "--input", tsv,
                    "--table", bad,      "--partition", "ds=2026-11-29", NULL};
    cr_assert_eq(sluice(&out, &err, impb), 1, "%s", err);
    cr_assert(strstr(err, "403 SignatureDoesNotMatch") && strstr(err, "nothing was added"), "%s",
              err);
    cr_assert_null(strstr(err, "wrong-secret"), "%s", err);
    free(out);
    free(err);
    DIR *d = opendir(tmp);
    cr_assert_not_null(d);
    struct dirent *e;
    int left = 0;
    while ((e = readdir(d)) != NULL)
        left += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(left, 0, "the staging directory is left in %s", tmp);
    free(tmp);
    free(tsv);
    free(loc);
    free(dir);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}
