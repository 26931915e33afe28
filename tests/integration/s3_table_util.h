/* What s3_table_test.c and s3_parquet_import_test.c share: uploading a tree
 * to a bucket, a criteo table on disk and in the store, digests of a
 * table's reads and a memory hook that counts what they take. */
#ifndef SLUICE_TESTS_S3_TABLE_UTIL_H
#define SLUICE_TESTS_S3_TABLE_UTIL_H

/* Every helper here: a test file uses only some. */
#define ST_FN static __attribute__((unused))

#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/prom.h"
#include "dpp/master/process/master.h"
#include "s3_util.h"
#include "store/store.h"
#include "warehouse/pq_dataset.h"
#include "worker_util.h"

/* A criteo table of rows rows (stripes of stripe_rows) generated locally
 * and uploaded to s3://bucket/tbl; the local directory into local. */
ST_FN void criteo_both(const char *tag, uint64_t rows, uint32_t stripe_rows, char *bucket,
                       size_t bcap, char *local, size_t lcap)
{
    su_env();
    su_bucket(tag, bucket, bcap);
    char *dir = tu_mkdtemp(tag);
    snprintf(local, lcap, "%s/criteo", dir);
    wu_gen_criteo(local, rows, stripe_rows, 7);
    su_upload_tree(local, bucket, "tbl");
    free(dir);
}

ST_FN sl_wh_table_t *open_table(const char *dir)
{
    sl_wh_table_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

ST_FN uint64_t read_ahead;           /* stripes the readers of digest_by read ahead */
ST_FN uint64_t read_ahead_skipped;   /* ... and did not, for want of room */
ST_FN const sl_wh_mem_t *digest_mem; /* the memory hook of digest_by's readers */

/* A memory hook that counts: what is held now, its peak, the largest
 * single take, and the sum of every take; try_take and take succeed
 * while held stays within room. */
typedef struct count_mem {
    uint64_t room, held, peak, largest, taken;
    uint32_t takes, refused;
} count_mem_t;

ST_FN bool cm_try_take(void *ctx, uint64_t bytes)
{
    count_mem_t *c = ctx;
    if (c->held + bytes > c->room) {
        c->refused++;
        return false;
    }
    c->held += bytes;
    c->taken += bytes;
    c->takes++;
    if (c->held > c->peak) c->peak = c->held;
    if (bytes > c->largest) c->largest = bytes;
    return true;
}

ST_FN sl_err_t cm_take(void *ctx, uint64_t bytes, const char *what, sl_error_t *err)
{
    if (!cm_try_take(ctx, bytes))
        return sl_error_set(err, SL_ERR_NOMEM, "test limit: no room for %s (%llu bytes)", what,
                            (unsigned long long)bytes);
    return SL_OK;
}

ST_FN void cm_give(void *ctx, uint64_t bytes)
{
    count_mem_t *c = ctx;
    cr_assert_leq(bytes, c->held, "gave back %llu bytes of %llu held", (unsigned long long)bytes,
                  (unsigned long long)c->held);
    c->held -= bytes;
}

ST_FN sl_wh_mem_t count_mem(count_mem_t *c)
{
    return (sl_wh_mem_t){.ctx = c, .try_take = cm_try_take, .take = cm_take, .give = cm_give};
}

/* Read every split of t (stripes_per_split stripes each) with the
 * projection I1; a digest of sample ids and the values of I1, and the
 * readers' stripe bytes. */
ST_FN uint64_t digest_by(const sl_wh_table_t *t, uint32_t stripes_per_split, uint64_t *data_bytes,
                         uint64_t *rows)
{
    sl_wh_splits_t *sp = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_splits(t, NULL, stripes_per_split, &sp, &err), SL_OK, "%s", err.msg);
    const char *feats[] = {"I1"};
    sl_wh_read_opts_t ro = {.features = feats, .num_features = 1, .mem = digest_mem};
    uint64_t h = 1469598103934665603ull;
    *data_bytes = *rows = 0;
    for (uint32_t i = 0; i < sp->count; i++) {
        sl_wh_reader_t *r = NULL;
        cr_assert_eq(sl_wh_reader_open_split(t, &sp->items[i], &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *rw;
        while (sl_wh_reader_next(r, &rw, &err) == SL_OK && rw != NULL) {
            for (uint32_t j = 0; j < rw->batch.batch_size; j++) {
                h = (h ^ (uint64_t)rw->batch.sample_ids[j]) * 1099511628211ull;
                uint32_t v;
                memcpy(&v, &rw->batch.dense.data[j], 4);
                h = (h ^ v) * 1099511628211ull;
            }
            *rows += rw->batch.batch_size;
        }
        cr_assert_eq(err.code, SL_OK, "%s", err.msg);
        sl_wh_read_stats_t st;
        sl_wh_reader_stats(r, &st);
        *data_bytes += st.data_bytes_read;
        read_ahead += st.read_ahead;
        read_ahead_skipped += st.read_ahead_skipped;
        sl_wh_reader_close(r);
    }
    sl_wh_splits_destroy(sp);
    return h;
}

ST_FN uint64_t digest(const sl_wh_table_t *t, uint64_t *data_bytes, uint64_t *rows)
{
    return digest_by(t, 1, data_bytes, rows);
}

#endif
