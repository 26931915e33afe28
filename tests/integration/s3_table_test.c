/* Tables in an object store against the s3proxy of the ctest fixture s3
 * (s3_util.h): a table at s3://bucket/prefix reads as the same table on
 * local disk does, fetching only the projected streams; a worker runs a
 * job on it exactly once per epoch, its read-ahead within the memory
 * limit; an object replaced under a job is refused; a missing table and
 * wrong credentials are named; a spec with problems is bound to one
 * through the given store options; the master plans a job from one. Parquet
 * datasets and `sluice table import --table s3://`:
 * s3_parquet_import_test.c. */
#include "s3_table_util.h"

#include "dpp/pipeline/lenient.h"

Test(s3_table, reads_as_the_local_table_fetching_only_the_projected_streams)
{
    char b[64], local[400], url[200];
    criteo_both("tread", 6000, 1000, b, sizeof b, local, sizeof local);
    snprintf(url, sizeof url, "s3://%s/tbl", b);
    sl_wh_table_t *lt = open_table(local), *st = open_table(url);
    cr_assert_eq(sl_wh_table_num_partitions(st), sl_wh_table_num_partitions(lt));
    const sl_wh_partition_t *lp = sl_wh_table_partition(lt, 0), *sp = sl_wh_table_partition(st, 0);
    cr_assert_str_eq(sp->name, lp->name);
    cr_assert_eq(sp->num_files, lp->num_files);
    for (uint32_t i = 0; i < lp->num_files; i++)
        cr_assert_str_eq(sp->files[i], lp->files[i]);
    uint64_t lb, lr, sb, sr;
    uint64_t want = digest(lt, &lb, &lr);
    sl_store_stats_t before, after;
    sl_store_stats(sl_wh_table_store(st), &before);
    uint64_t got = digest(st, &sb, &sr);
    sl_store_stats(sl_wh_table_store(st), &after);
    cr_assert_eq(got, want);
    cr_assert_eq(sr, 6000);
    cr_assert_eq(sr, lr);
    cr_assert_eq(sb, lb, "the same streams are read");
    /* Bytes from the server: each file's open (planning the splits, then
     * each split's reader) fetches its 8-byte header and its last 256 KiB
     * (all of a smaller file), then each stripe only its projected
     * streams: I1 alone of 40 columns. */
    uint64_t sizes = 0, total = 0;
    for (uint32_t i = 0; i < sp->num_files; i++) {
        char key[300];
        snprintf(key, sizeof key, "tbl/%s", sp->files[i]);
        sl_store_info_t info;
        sl_error_t err = {0};
        cr_assert_eq(sl_store_stat(sl_wh_table_store(st), key, &info, &err), SL_OK, "%s", err.msg);
        uint64_t tail = info.size < 256 * 1024 ? info.size : 256 * 1024 + 8;
        /* one open to plan, one per stripe (splits of one stripe) */
        sl_wh_reader_t *r;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", local, sp->files[i]);
        cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
        uint32_t stripes = sl_wh_reader_num_stripes(r);
        sl_wh_reader_close(r);
        sizes += (1 + stripes) * tail;
        total += info.size;
    }
    cr_assert_eq(after.bytes_read - before.bytes_read, sizes + sb, "%llu bytes, want %llu",
                 (unsigned long long)(after.bytes_read - before.bytes_read),
                 (unsigned long long)(sizes + sb));
    cr_assert_lt(sb * 10, total, "projection: %llu of %llu bytes", (unsigned long long)sb,
                 (unsigned long long)total);
    cr_assert_eq(after.retries, 0);
    cr_assert_eq(after.failures, 0);
    /* One split per file: the reader goes through each file in order and
     * reads ahead (stripe s + 1 fetched while s is decoded): the same rows,
     * and still each stripe's streams fetched once, no more. */
    uint64_t ab, ar;
    cr_assert_eq(read_ahead, 0, "splits of one stripe: nothing to read ahead");
    sl_store_stats(sl_wh_table_store(st), &before);
    cr_assert_eq(digest_by(st, 1000, &ab, &ar), want);
    sl_store_stats(sl_wh_table_store(st), &after);
    cr_assert_eq(ar, 6000);
    cr_assert_eq(ab, sb);
    uint64_t opens = 0, ahead_want = 0, stripes_all = 0;
    for (uint32_t i = 0; i < sp->num_files; i++) {
        char key[300];
        snprintf(key, sizeof key, "tbl/%s", sp->files[i]);
        sl_store_info_t info;
        sl_error_t err = {0};
        cr_assert_eq(sl_store_stat(sl_wh_table_store(st), key, &info, &err), SL_OK, "%s", err.msg);
        opens += 2 * (info.size < 256 * 1024 ? info.size : 256 * 1024 + 8); /* plan, read */
        char path[600];
        snprintf(path, sizeof path, "%s/%s", local, sp->files[i]);
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
        /* stripe 0 is the first of the reader's range (the whole file),
         * which it reads on: the read-ahead starts there, stripes 1..
         * come from it */
        uint32_t n = sl_wh_reader_num_stripes(r);
        ahead_want += n > 1 ? n - 1 : 0;
        stripes_all += n;
        sl_wh_reader_close(r);
    }
    cr_assert_gt(ahead_want, 0);
    cr_assert_eq(read_ahead, ahead_want);
    cr_assert_eq(read_ahead_skipped, 0);
    /* the stat just above counts no bytes */
    cr_assert_eq(after.bytes_read - before.bytes_read, opens + sb, "%llu bytes, want %llu",
                 (unsigned long long)(after.bytes_read - before.bytes_read),
                 (unsigned long long)(opens + sb));
    /* With a memory hook (a worker's --memory-limit): each fetch ahead
     * takes its bytes first and gives them back once its stripe is read,
     * and the reader takes each stripe's bytes in its read buffer while it
     * decodes it (after the read-ahead gave back its count of the same
     * bytes), so at most one stripe's own and the next one's fetch are
     * held at once; the reader's takes are exactly the projected stripe
     * bytes it uses, the read-ahead's fewer. */
    count_mem_t cm = {.room = UINT64_MAX};
    sl_wh_mem_t hook = count_mem(&cm);
    digest_mem = &hook;
    read_ahead = read_ahead_skipped = 0;
    cr_assert_eq(digest_by(st, 1000, &ab, &ar), want);
    cr_assert_eq(read_ahead, ahead_want);
    cr_assert_eq(cm.takes, stripes_all + ahead_want, "%u takes", cm.takes);
    cr_assert_eq(cm.held, 0, "%llu bytes still held after the readers closed",
                 (unsigned long long)cm.held);
    cr_assert_gt(cm.largest, 0);
    cr_assert_gt(cm.peak, cm.largest, "a read buffer and a fetch ahead held together");
    cr_assert_leq(cm.peak, 2 * cm.largest);
    cr_assert_gt(cm.taken, sb);
    cr_assert_lt(cm.taken, 2 * sb);
    uint64_t largest = cm.largest;
    /* Room for one stripe's bytes: each stripe is read (its buffer fits),
     * nothing is read ahead (each fetch that would have been is counted
     * as skipped), the same rows and bytes, never more held than the room. */
    cm = (count_mem_t){.room = largest};
    read_ahead = read_ahead_skipped = 0;
    sl_store_stats(sl_wh_table_store(st), &before);
    cr_assert_eq(digest_by(st, 1000, &ab, &ar), want);
    sl_store_stats(sl_wh_table_store(st), &after);
    cr_assert_eq(ar, 6000);
    cr_assert_eq(ab, sb);
    cr_assert_eq(read_ahead, 0);
    cr_assert_eq(read_ahead_skipped, ahead_want);
    cr_assert_eq(cm.refused, read_ahead_skipped);
    cr_assert_eq(cm.takes, stripes_all);
    cr_assert_eq(cm.taken, sb);
    cr_assert_eq(cm.peak, largest);
    cr_assert_eq(cm.held, 0);
    cr_assert_eq(after.bytes_read - before.bytes_read, opens + sb);
    /* Less than the largest stripe's bytes: that stripe's read fails,
     * naming its read buffer, file and stripe; nothing stays held. */
    cm = (count_mem_t){.room = largest - 1};
    sl_wh_splits_t *splits = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_splits(st, NULL, 1000, &splits, &err), SL_OK, "%s", err.msg);
    const char *feats[] = {"I1"};
    sl_wh_read_opts_t ro = {.features = feats, .num_features = 1, .mem = &hook};
    uint32_t failed = 0;
    for (uint32_t i = 0; i < splits->count; i++) {
        sl_wh_reader_t *r = NULL;
        cr_assert_eq(sl_wh_reader_open_split(st, &splits->items[i], &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *rw;
        sl_err_t rc;
        while ((rc = sl_wh_reader_next(r, &rw, &err)) == SL_OK && rw != NULL)
            ;
        if (rc != SL_OK) {
            failed++;
            cr_assert_eq(rc, SL_ERR_NOMEM);
            cr_assert(strstr(err.msg, "no room for the read buffer of ") != NULL &&
                          strstr(err.msg, splits->items[i].path) != NULL &&
                          strstr(err.msg, " stripe ") != NULL,
                      "%s", err.msg);
        }
        sl_wh_reader_close(r);
        cr_assert_eq(cm.held, 0);
    }
    cr_assert_geq(failed, 1, "no read needed the largest stripe's room");
    cr_assert_leq(cm.peak, cm.room);
    sl_wh_splits_destroy(splits);
    digest_mem = NULL;
    sl_wh_table_close(lt);
    sl_wh_table_close(st);
}

Test(s3_table, a_worker_runs_a_job_on_an_s3_table_exactly_once_over_two_epochs)
{
    char b[64], local[400], spec[1024], addr[64];
    const uint64_t rows = 12000;
    criteo_both("tjob", rows, 1500, b, sizeof b, local, sizeof local);
    snprintf(spec, sizeof spec,
             "{\"id\":\"s3job\",\"source\":{\"table\":\"s3://%s/tbl\"},"
             "\"batch\":{\"size\":1000,\"epochs\":2}}",
             b);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 2;
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    sl_trainer_t *t = NULL;
    cr_assert_eq(sl_trainer_connect(&to, &t, &err), SL_OK, "%s", err.msg);
    uint8_t *seen = calloc(2 * rows, 1);
    cr_assert_not_null(seen);
    wu_read_all(t, rows, 2, 0, seen);
    for (uint64_t i = 0; i < 2 * rows; i++)
        cr_assert_eq(seen[i], 1, "epoch %llu sample %llu seen %u times",
                     (unsigned long long)(i / rows), (unsigned long long)(i % rows), seen[i]);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.rows_read, 2 * rows);
    /* The store's counters, as /metrics serves them: every request
     * answered, none retried. */
    sl_store_t *store = sl_worker_store(w);
    cr_assert_not_null(store);
    sl_store_stats_t ss;
    sl_store_stats(store, &ss);
    cr_assert_gt(ss.requests, 0);
    cr_assert_eq(ss.by_result[SL_STORE_OK], ss.requests);
    cr_assert_eq(ss.retries, 0);
    cr_assert_eq(ss.failures, 0);
    sl_prom_t p;
    sl_prom_init(&p, NULL);
    sl_store_prom(store, &p, "job=\"s3job\"");
    char want[200];
    snprintf(want, sizeof want, "sluice_store_requests_total{job=\"s3job\",result=\"ok\"} %llu\n",
             (unsigned long long)ss.requests);
    char *text = sl_prom_finish(&p);
    cr_assert_not_null(text);
    cr_assert(strstr(text, want), "%s", text);
    sl_strfree(NULL, text);
    free(seen);
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* A worker of the job on the S3 table with memory_limit bytes and a
 * trainer taking each batch after delay_us: every sample once; its stats. */
/* A worker of threads threads under memory_limit on the table in bucket
 * (splits of per_split stripes), read by a trainer that waits delay_us
 * after each batch: every sample once; its stats, *ss its store's. */
static sl_worker_stats_t run_slow(const char *bucket, uint64_t rows, uint32_t batch,
                                  uint64_t memory_limit, uint32_t threads, uint32_t per_split,
                                  uint32_t delay_us, sl_store_stats_t *ss)
{
    char spec[1024], addr[64];
    snprintf(spec, sizeof spec,
             "{\"id\":\"s3lim\",\"source\":{\"table\":\"s3://%s/tbl\",\"stripes_per_split\":%u},"
             "\"batch\":{\"size\":%u,\"epochs\":1}}",
             bucket, per_split, batch);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = threads;
    o.memory_limit = memory_limit;
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    sl_trainer_t *t = NULL;
    cr_assert_eq(sl_trainer_connect(&to, &t, &err), SL_OK, "%s", err.msg);
    uint8_t *seen = calloc(rows, 1);
    cr_assert_not_null(seen);
    wu_read_all(t, rows, 1, delay_us, seen);
    for (uint64_t i = 0; i < rows; i++)
        cr_assert_eq(seen[i], 1, "sample %llu seen %u times", (unsigned long long)i, seen[i]);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    if (ss) {
        cr_assert_not_null(sl_worker_store(w));
        sl_store_stats(sl_worker_store(w), ss);
    }
    free(seen);
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    return st;
}

static sl_worker_stats_t run_split(const char *bucket, uint64_t rows, uint32_t batch,
                                   uint64_t memory_limit, uint32_t threads, uint32_t per_split,
                                   sl_store_stats_t *ss)
{
    return run_slow(bucket, rows, batch, memory_limit, threads, per_split, 0, ss);
}

/* Splits of one stripe (the default). */
static sl_worker_stats_t run_threads(const char *bucket, uint64_t rows, uint32_t batch,
                                     uint64_t memory_limit, uint32_t threads, sl_store_stats_t *ss)
{
    return run_split(bucket, rows, batch, memory_limit, threads, 1, ss);
}

static sl_worker_stats_t run_limited(const char *bucket, uint64_t rows, uint32_t batch,
                                     uint64_t memory_limit)
{
    return run_threads(bucket, rows, batch, memory_limit, 1, NULL);
}

/* The read-ahead of an S3 table counts in --memory-limit. With room, each
 * file's stripes after its first are fetched ahead (the worker reads the
 * table's splits in order: the next split's stripe follows). With batches of 50
 * rows, a limit of 600,000 bytes holds a decoded stripe of this table
 * (1500 rows: about 534 KB, accounted while the reader is on it) and the
 * batches being made, but never that and a stripe's fetch ahead (about
 * 107 KB of stored bytes) too: every read-ahead is skipped, none waited
 * for, the budget never past the limit, every sample delivered once. */
Test(s3_table, the_memory_limit_bounds_the_read_ahead_of_an_s3_table)
{
    char b[64], local[400];
    const uint64_t rows = 12000;
    criteo_both("tlim", rows, 1500, b, sizeof b, local, sizeof local);
    sl_worker_stats_t roomy = run_limited(b, rows, 50, 256u << 20);
    cr_assert_eq(roomy.rows_read, rows);
    cr_assert_eq(roomy.stripes, 8, "%llu stripes", (unsigned long long)roomy.stripes);
    /* one file of 8 stripes: stripes 1 to 7 come from read-ahead */
    cr_assert_eq(roomy.read_ahead, 7);
    cr_assert_eq(roomy.read_ahead_skipped, 0);
    const uint64_t stripe = roomy.source_bytes / roomy.stripes;
    cr_assert(stripe > 500000 && stripe < 560000, "decoded stripe of %llu bytes",
              (unsigned long long)stripe);
    /* a decoded stripe in the batcher while the next one's bytes are in
     * the reader's read buffer (counted: about 107 kB) fit; a read-ahead
     * besides does not */
    sl_worker_stats_t tight = run_limited(b, rows, 50, 700000);
    fprintf(stderr,
            "memory peak with 256 MiB: %llu bytes, %llu stripes read ahead; with 700000 "
            "bytes: %llu bytes, %llu read ahead, %llu skipped\n",
            (unsigned long long)roomy.memory_peak, (unsigned long long)roomy.read_ahead,
            (unsigned long long)tight.memory_peak, (unsigned long long)tight.read_ahead,
            (unsigned long long)tight.read_ahead_skipped);
    cr_assert_eq(tight.rows_read, rows);
    /* the first stripe's fetch ahead fits (nothing decoded is held yet),
     * and the stripe it fetched is read from it; no other does */
    cr_assert_eq(tight.read_ahead, 1);
    cr_assert_eq(tight.read_ahead_skipped, 6);
    cr_assert_eq(tight.read_ahead_dropped, 0);
    cr_assert_leq(tight.memory_peak, 700000);
    cr_assert_gt(tight.memory_peak, stripe + 50000, "the read buffer is counted besides a stripe");
}

/* Stripe lanes read ahead and share the footer (docs/WORKER.md,
 * "Threads"). One file of 8 stripes, splits of one stripe (the worker
 * reads them in order, and knows the next ones: its source's peek), then
 * of 4 (the split's own stripes follow its first): on one thread the
 * reader fetches the footer once and stripes 1 to 7 ahead, from the
 * first stripe on. With two lanes, each takes every other stripe (0, 2,
 * 4, 6 and 1, 3, 5, 7) and reads ahead its own next one from its first:
 * stripes 2, 4, 6, 3, 5 and 7. The lanes' readers are twins of the
 * reader thread's: the footer is not fetched again, so the store sees
 * exactly the requests and bytes of one thread, and no stripe is fetched
 * twice or for nothing. Every sample once either way. */
Test(s3_table, stripe_lanes_read_ahead_and_fetch_the_footer_once)
{
    char b[64], local[400];
    const uint64_t rows = 12000;
    criteo_both("tlanes", rows, 1500, b, sizeof b, local, sizeof local);
    sl_store_stats_t s1, s2;
    sl_worker_stats_t one = run_threads(b, rows, 50, 256u << 20, 1, &s1);
    sl_worker_stats_t two = run_threads(b, rows, 50, 256u << 20, 2, &s2);
    fprintf(stderr,
            "threads 1: %llu requests, %llu bytes, %llu read ahead; threads 2: %llu requests, "
            "%llu bytes, %llu read ahead\n",
            (unsigned long long)s1.requests, (unsigned long long)s1.bytes_read,
            (unsigned long long)one.read_ahead, (unsigned long long)s2.requests,
            (unsigned long long)s2.bytes_read, (unsigned long long)two.read_ahead);
    cr_assert_eq(one.rows_read, rows);
    cr_assert_eq(two.rows_read, rows);
    cr_assert_eq(one.stripes, 8);
    cr_assert_eq(two.stripes, 8);
    cr_assert_eq(one.read_ahead, 7);
    cr_assert_eq(two.read_ahead, 6);
    cr_assert_eq(one.read_ahead_skipped, 0);
    cr_assert_eq(two.read_ahead_skipped, 0);
    cr_assert_eq(one.read_ahead_dropped + two.read_ahead_dropped, 0, "fetched for nothing");
    cr_assert_eq(s2.requests, s1.requests, "threads 2: %llu requests, threads 1: %llu",
                 (unsigned long long)s2.requests, (unsigned long long)s1.requests);
    cr_assert_eq(s2.bytes_read, s1.bytes_read);
    /* as measured: the listing and the footer, then the 8 stripes'
     * projected streams (the generator is seeded) */
    cr_assert_eq(s1.requests, 15);
    cr_assert_eq(s1.bytes_read, 1379027);
    cr_assert_eq(s1.retries + s2.retries, 0);
    cr_assert_eq(s1.failures + s2.failures, 0);
    /* splits of 4 stripes: the same, from the split's own stripes */
    for (uint32_t threads = 1; threads <= 2; threads++) {
        sl_store_stats_t s4;
        sl_worker_stats_t st = run_split(b, rows, 50, 256u << 20, threads, 4, &s4);
        cr_assert_eq(st.rows_read, rows);
        cr_assert_eq(st.read_ahead, threads == 1 ? 7 : 6, "threads %u: %llu read ahead", threads,
                     (unsigned long long)st.read_ahead);
        cr_assert_eq(s4.requests, 15, "threads %u: %llu requests", threads,
                     (unsigned long long)s4.requests);
        cr_assert_eq(s4.bytes_read, 1379027);
    }
    /* the lanes' read-ahead counts in --memory-limit: under the limit of
     * the_memory_limit_bounds_the_read_ahead_of_an_s3_table each of the
     * 6 fetches ahead is made or skipped, never past the limit */
    sl_worker_stats_t tight = run_threads(b, rows, 50, 700000, 2, NULL);
    fprintf(stderr,
            "threads 2 with 700000 bytes: %llu read ahead, %llu skipped, %llu dropped, peak %llu\n",
            (unsigned long long)tight.read_ahead, (unsigned long long)tight.read_ahead_skipped,
            (unsigned long long)tight.read_ahead_dropped, (unsigned long long)tight.memory_peak);
    cr_assert_eq(tight.rows_read, rows);
    cr_assert_eq(tight.read_ahead + tight.read_ahead_skipped + tight.read_ahead_dropped, 6);
    cr_assert_leq(tight.memory_peak, 700000);
    /* limits between one stripe and two lanes' worth: whatever the lanes
     * read ahead (a fetch ahead is made, skipped, or dropped when a lane
     * needs its room), never past the limit, every sample once
     * (run_threads), no worker failing for want of room */
    const uint64_t limits[] = {900000, 1200000, 1600000, 2400000};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        sl_worker_stats_t st = run_threads(b, rows, 50, limits[i], 2, NULL);
        fprintf(stderr,
                "threads 2 with %llu bytes: %llu read ahead, %llu skipped, %llu dropped, peak "
                "%llu\n",
                (unsigned long long)limits[i], (unsigned long long)st.read_ahead,
                (unsigned long long)st.read_ahead_skipped,
                (unsigned long long)st.read_ahead_dropped, (unsigned long long)st.memory_peak);
        cr_assert_eq(st.rows_read, rows);
        cr_assert_eq(st.read_ahead + st.read_ahead_skipped + st.read_ahead_dropped, 6);
        cr_assert_leq(st.memory_peak, limits[i]);
    }
}

/* A slow trainer (2 ms a batch of 50) against a worker on the S3 table
 * under 700,000 and 1,200,000 bytes, on one thread and on two lanes: the
 * worker waits for the trainer with its fetches ahead made, skipped or
 * dropped (each of them one of the three), its accounted peak never past
 * the limit, every sample once. */
Test(s3_table, the_memory_limit_holds_with_a_slow_trainer)
{
    char b[64], local[400];
    const uint64_t rows = 12000;
    criteo_both("tslow", rows, 1500, b, sizeof b, local, sizeof local);
    const uint64_t limits[] = {700000, 1200000};
    for (size_t i = 0; i < 2; i++)
        for (uint32_t threads = 1; threads <= 2; threads++) {
            sl_worker_stats_t st = run_slow(b, rows, 50, limits[i], threads, 1, 2000, NULL);
            fprintf(stderr,
                    "slow trainer, threads %u, %llu bytes: %llu read ahead, %llu skipped, %llu "
                    "dropped, peak %llu\n",
                    threads, (unsigned long long)limits[i], (unsigned long long)st.read_ahead,
                    (unsigned long long)st.read_ahead_skipped,
                    (unsigned long long)st.read_ahead_dropped, (unsigned long long)st.memory_peak);
            cr_assert_eq(st.rows_read, rows);
            cr_assert_eq(st.stripes, 8);
            cr_assert_leq(st.memory_peak, limits[i]);
            cr_assert_eq(st.read_ahead + st.read_ahead_skipped + st.read_ahead_dropped,
                         threads == 1 ? 7 : 6);
        }
}

Test(s3_table, an_object_replaced_after_planning_or_while_read_is_refused)
{
    char b[64], local[400], url[200];
    criteo_both("trepl", 4000, 1000, b, sizeof b, local, sizeof local);
    snprintf(url, sizeof url, "s3://%s/tbl", b);
    sl_wh_table_t *t = open_table(url);
    sl_wh_splits_t *sp = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    /* A reader open on split 0, then the file replaced by another table's
     * (another seed: other bytes, another footer). */
    sl_wh_reader_t *r = NULL;
    cr_assert_eq(sl_wh_reader_open_split(t, &sp->items[0], NULL, &r, &err), SL_OK, "%s", err.msg);
    char *dir = tu_mkdtemp("trepl2"), other[400], key[300];
    snprintf(other, sizeof other, "%s/criteo", dir);
    wu_gen_criteo(other, 4000, 500, 8);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", other, sp->items[0].path);
    snprintf(key, sizeof key, "tbl/%s", sp->items[0].path);
    cr_assert_eq(sl_store_put_file(sl_wh_table_store(t), key, path, &err), SL_OK, "%s", err.msg);
    const sl_wh_rows_t *rows;
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_ERR_VERSION, "%s", err.msg);
    char want[400];
    snprintf(want, sizeof want, "s3://%s/tbl/%s", b, sp->items[0].path);
    cr_assert(strstr(err.msg, want) != NULL && strstr(err.msg, "stripe 0") != NULL, "%s", err.msg);
    sl_wh_reader_close(r);
    /* A split planned before the replacement: refused at open (pinned at
     * the ETag the table's listing found: its footer's GET fails). */
    memset(&err, 0, sizeof err);
    cr_assert_eq(sl_wh_reader_open_split(t, &sp->items[1], NULL, &r, &err), SL_ERR_VERSION, "%s",
                 err.msg);
    snprintf(want, sizeof want, "s3://%s/tbl/%s: GET bytes=", b, sp->items[1].path);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0 &&
                  strstr(err.msg, ": replaced since it was planned (ETag no longer \"") &&
                  strstr(err.msg, "HTTP 412 PreconditionFailed"),
              "%s", err.msg);
    /* The same split through a table opened after the replacement (as a
     * worker that started later lists it): its footer is not the one
     * planned, refused by the footer checksum. */
    sl_wh_table_t *t2 = open_table(url);
    memset(&err, 0, sizeof err);
    cr_assert_eq(sl_wh_reader_open_split(t2, &sp->items[1], NULL, &r, &err), SL_ERR_VERSION, "%s",
                 err.msg);
    snprintf(want, sizeof want,
             "s3://%s/tbl/%s: the file was replaced after the job planned its splits", b,
             sp->items[1].path);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    sl_wh_table_close(t2);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    free(dir);
}

Test(s3_table, a_missing_table_a_missing_bucket_and_a_wrong_secret_are_named)
{
    su_env();
    char b[64], url[200];
    su_bucket("tmiss", b, sizeof b);
    snprintf(url, sizeof url, "s3://%s/nothing", b);
    sl_wh_table_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(url, NULL, &t, &err), SL_ERR_NOT_FOUND, "%s", err.msg);
    char want[400];
    snprintf(want, sizeof want, "table s3://%s/nothing: s3://%s/nothing/_schema", b, b);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0 && strstr(err.msg, "NoSuchKey"), "%s",
              err.msg);
    cr_assert_eq(sl_wh_table_open("s3://no-such-bucket-here/t", NULL, &t, &err), SL_ERR_NOT_FOUND,
                 "%s", err.msg);
    cr_assert(strstr(err.msg, "NoSuchBucket"), "%s", err.msg);
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-wrong-secret", 1);
    cr_assert_neq(sl_wh_table_open(url, NULL, &t, &err), SL_OK);
    cr_assert(strstr(err.msg, "403 SignatureDoesNotMatch"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "wrong-secret"), "%s", err.msg);
}

/* A spec that does not parse is bound anyway (lenient.h) to its table
 * opened with the store options the submit's first look uses: here the
 * endpoint comes only from them (the environment's leads nowhere), so the
 * binding problem is found only when they are used. */
Test(s3_table, a_spec_with_problems_is_bound_through_the_given_store_options)
{
    char b[64], local[400], spec[512];
    criteo_both("tbind", 200, 100, b, sizeof b, local, sizeof local);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1); /* nothing listens on port 1 */
    snprintf(spec, sizeof spec,
             "{\"id\":\"bind\",\"source\":{\"table\":\"s3://%s/tbl\"},\"bogus\":1,"
             "\"transforms\":[{\"op\":\"modulo\",\"feature\":\"nope\",\"divisor\":7}]}",
             b);
    for (int given = 1; given >= 0; given--) {
        sl_pipeline_problems_t pr = {0};
        sl_pipeline_job_t *job = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, &pr, &err), SL_ERR_INVALID);
        cr_assert_eq(pr.count, 1);
        cr_assert_str_eq(pr.items[0], "$.bogus: unknown key");
        /* given: the server's endpoint in the options; else the defaults */
        sl_store_opts_t so = {.endpoint = given ? su.endpoint : NULL, .max_attempts = 1};
        sl_pipeline_bind_anyway(spec, strlen(spec), NULL, &so, &pr);
        if (given) {
            cr_assert_eq(pr.count, 2, "%u problems", pr.count);
            cr_assert_str_eq(pr.items[1], "$.transforms[0].feature: unknown feature 'nope'");
        } else {
            cr_assert_eq(pr.count, 1, "the table does not open: nothing added");
        }
        sl_pipeline_problems_free(&pr);
    }
}

Test(s3_table, slowdowns_and_resets_are_retried_and_a_storm_that_lasts_is_named)
{
    char b[64], local[400], url[200], ep[64];
    criteo_both("tfault", 3000, 1000, b, sizeof b, local, sizeof local);
    sl_wh_table_t *lt = open_table(local);
    uint64_t lb, lr;
    uint64_t want = digest(lt, &lb, &lr);
    sl_wh_table_close(lt);
    su_proxy_t p;
    su_proxy_start(&p, su.port);
    snprintf(ep, sizeof ep, "http://localhost:%u", p.port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    pthread_mutex_lock(&p.mu);
    p.slowdowns = 2;
    p.resets = 2;
    pthread_mutex_unlock(&p.mu);
    snprintf(url, sizeof url, "s3://%s/tbl", b);
    sl_wh_table_t *t = open_table(url);
    uint64_t sb, sr;
    cr_assert_eq(digest(t, &sb, &sr), want);
    cr_assert_eq(sr, 3000);
    sl_store_stats_t st;
    sl_store_stats(sl_wh_table_store(t), &st);
    /* the schema's HEAD met 2 resets and 2 SlowDowns, and its fifth (and
     * last) attempt went through */
    cr_assert_eq(st.retries, 4);
    cr_assert_eq(st.by_result[SL_STORE_SERVER_ERROR], 2);
    cr_assert_eq(st.by_result[SL_STORE_NETWORK_ERROR], 2);
    cr_assert_eq(st.by_result[SL_STORE_OK], st.requests - 4);
    cr_assert_eq(st.failures, 0);
    sl_wh_table_close(t);
    /* SlowDown without end: the open fails after the attempts, naming
     * the key (a HEAD's answer has no body to give S3's code). */
    pthread_mutex_lock(&p.mu);
    p.slowdown_all = true;
    pthread_mutex_unlock(&p.mu);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(url, NULL, &t, &err), SL_ERR_IO, "%s", err.msg);
    char want_msg[400];
    snprintf(want_msg, sizeof want_msg, "table %s: after 5 attempts: s3://%s/tbl/_schema", url, b);
    cr_assert(strncmp(err.msg, want_msg, strlen(want_msg)) == 0 &&
                  strstr(err.msg, ": HEAD: HTTP 503"),
              "%s", err.msg);
    su_proxy_stop(&p);
}

Test(s3_table, the_master_plans_an_s3_job_and_serves_its_store_counters)
{
    char b[64], local[400], spec[512];
    criteo_both("tmaster", 4000, 1000, b, sizeof b, local, sizeof local);
    sl_master_opts_t mo = {0};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&mo, &m, &err), SL_OK, "%s", err.msg);
    char *text = sl_master_metrics_text(m);
    cr_assert_not_null(text);
    cr_assert_null(strstr(text, "sluice_store_"), "no store before a job reads one");
    sl_strfree(sl_master_allocator(m), text);
    snprintf(spec, sizeof spec,
             "{\"id\":\"s3plan\",\"source\":{\"table\":\"s3://%s/tbl\"},\"batch\":{\"size\":100}}",
             b);
    sl_master_submit_t req = {
        .spec_json = spec, .ranks = 1, .min_workers = 1, .max_workers = 1, .workers = 1};
    cr_assert_eq(sl_master_job_submit(m, &req, NULL, NULL, &err), SL_OK, "%s", err.msg);
    text = sl_master_metrics_text(m);
    cr_assert_not_null(text);
    /* the schema (HEAD, GET), the listing, and per file a HEAD and one
     * parallel GET of its header and tail: every request answered */
    cr_assert(strstr(text, "sluice_store_failures_total 0\n"), "%s", text);
    cr_assert(strstr(text, "sluice_store_retries_total 0\n"), "%s", text);
    cr_assert(strstr(text, "sluice_store_requests_total{result=\"client_error\"} 0\n"), "%s", text);
    const char *ok = strstr(text, "sluice_store_requests_total{result=\"ok\"} ");
    cr_assert_not_null(ok, "%s", text);
    unsigned long long after_table =
        strtoull(ok + strlen("sluice_store_requests_total{result=\"ok\"} "), NULL, 10);
    cr_assert_gt(after_table, 0);
    sl_strfree(sl_master_allocator(m), text);
    /* A Parquet dataset in the store: its listing and footer add to them. */
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root);
    char src[600], url[200];
    snprintf(src, sizeof src, "%s/tests/data/parquet/duckdb-zstd.parquet", root);
    snprintf(url, sizeof url, "s3://%s", b);
    sl_store_t *st;
    cr_assert_eq(sl_store_open_url(url, NULL, &st, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put_file(st, "pq/part-0.parquet", src, &err), SL_OK, "%s", err.msg);
    sl_store_destroy(st);
    snprintf(spec, sizeof spec,
             "{\"id\":\"s3pq\",\"source\":{\"parquet\":\"s3://%s/pq\"},\"batch\":{\"size\":10}}",
             b);
    req.spec_json = spec;
    cr_assert_eq(sl_master_job_submit(m, &req, NULL, NULL, &err), SL_OK, "%s", err.msg);
    text = sl_master_metrics_text(m);
    ok = strstr(text, "sluice_store_requests_total{result=\"ok\"} ");
    cr_assert_not_null(ok, "%s", text);
    cr_assert_gt(strtoull(ok + strlen("sluice_store_requests_total{result=\"ok\"} "), NULL, 10),
                 after_table, "%s", text);
    cr_assert(strstr(text, "sluice_store_failures_total 0\n"), "%s", text);
    sl_strfree(sl_master_allocator(m), text);
    sl_master_stop(m);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}
