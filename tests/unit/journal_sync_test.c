/* The master's journal (src/dpp/master/journal/journal.h) synced in two
 * phases from several threads: every record once, in append order, each
 * wait returning only once its own records are durable; and the histogram
 * of sync latencies. The journal through the master state: journal_test.c. */
#include "journal_util.h"

#include <pthread.h>

#include "dpp/master/journal/journal.h"

/* Two-phase syncs from several threads: records are appended and sealed
 * under an owner's lock and written outside it, by whichever thread gets
 * there first; the file holds every record once, in append order, and a
 * wait returns only once its own records are durable. */
typedef struct sync_ctx {
    sl_master_journal_t *j;
    pthread_mutex_t owner;
    uint64_t next;   /* sequence of the next record (under owner) */
    uint64_t synced; /* records durable as the waits returned (under owner) */
    int per_thread;
    bool failed;
} sync_ctx;

static void *sync_thread(void *arg)
{
    sync_ctx *c = arg;
    sl_error_t err = {0};
    for (int i = 0; i < c->per_thread; i++) {
        uint64_t ticket, seq;
        pthread_mutex_lock(&c->owner);
        seq = c->next++;
        bool ok = sl_master_journal_append(c->j, &seq, sizeof seq, &err) == SL_OK &&
                  sl_master_journal_sync_begin(c->j, &ticket, &err) == SL_OK;
        pthread_mutex_unlock(&c->owner);
        ok = ok && sl_master_journal_sync_wait(c->j, ticket, &err) == SL_OK;
        pthread_mutex_lock(&c->owner);
        c->failed |= !ok;
        if (seq + 1 > c->synced) c->synced = seq + 1;
        pthread_mutex_unlock(&c->owner);
    }
    return NULL;
}

typedef struct seq_check {
    uint64_t want;
    bool in_order;
} seq_check;

static sl_err_t check_seq(void *ctx, const uint8_t *payload, size_t len, uint64_t off,
                          sl_error_t *err)
{
    (void)off;
    (void)err;
    seq_check *c = ctx;
    uint64_t seq;
    if (len != sizeof seq) return SL_ERR_CORRUPT;
    memcpy(&seq, payload, sizeof seq);
    c->in_order &= seq == c->want;
    c->want++;
    return SL_OK;
}

Test(journal, two_phase_syncs_from_threads_keep_append_order)
{
    char *dir = tmp_dir();
    sl_error_t err = {0};
    sync_ctx c = {.per_thread = 500};
    pthread_mutex_init(&c.owner, NULL);
    cr_assert_eq(sl_master_journal_open(dir, sl_allocator_default(), 1024, NULL, NULL, NULL, &c.j,
                                        NULL, &err),
                 SL_OK, "%s", err.msg);
    pthread_t th[4];
    for (int t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, sync_thread, &c);
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    cr_assert(!c.failed);
    cr_assert_eq(c.synced, 2000);
    /* no sync is due: everything appended is durable */
    uint64_t syncs = sl_master_journal_syncs(c.j);
    cr_assert_eq(sl_master_journal_sync(c.j, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_journal_syncs(c.j), syncs);
    cr_assert_leq(syncs, 2000);
    sl_master_journal_close(c.j);
    char jp[256];
    path_of(jp, sizeof jp, dir, "journal");
    uint8_t *buf;
    size_t len;
    read_file(jp, &buf, &len);
    seq_check sc = {0, true};
    sl_master_journal_scan_t scan;
    cr_assert_eq(sl_master_journal_scan(buf, len, "journal", 0, check_seq, &sc, &scan, &err), SL_OK,
                 "%s", err.msg);
    cr_assert(!scan.torn);
    cr_assert_eq(scan.records, 2000);
    cr_assert(sc.in_order, "records out of append order");
    free(buf);
    pthread_mutex_destroy(&c.owner);
    rm_dir(dir);
}

/* Every sync that wrote something is timed into the latency histogram
 * (sluice_master_journal_sync_seconds); a sync with nothing to write is
 * not, and the state's counters carry the same figures. */
Test(journal, sync_latency_histogram)
{
    char *dir = tmp_dir();
    sl_error_t err = {0};
    sl_master_journal_t *j = NULL;
    cr_assert_eq(
        sl_master_journal_open(dir, sl_allocator_default(), 1024, NULL, NULL, NULL, &j, NULL, &err),
        SL_OK, "%s", err.msg);
    sl_master_journal_sync_hist_t h;
    sl_master_journal_sync_hist(j, &h);
    uint64_t total = 0;
    for (int b = 0; b <= SL_MASTER_JOURNAL_SYNC_BUCKETS; b++)
        total += h.count[b];
    cr_assert_eq(total, 0);
    uint64_t syncs0 = sl_master_journal_syncs(j);
    for (int i = 0; i < 5; i++) {
        char rec[32];
        int n = snprintf(rec, sizeof rec, "record %d", i);
        cr_assert_eq(sl_master_journal_append(j, rec, (size_t)n, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_master_journal_sync(j, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_master_journal_sync(j, &err), SL_OK, "%s", err.msg); /* nothing to write */
    cr_assert_eq(sl_master_journal_syncs(j), syncs0 + 5);
    sl_master_journal_sync_hist(j, &h);
    total = 0;
    for (int b = 0; b <= SL_MASTER_JOURNAL_SYNC_BUCKETS; b++)
        total += h.count[b];
    cr_assert_eq(total, 5);
    cr_assert_gt(h.sum_s, 0.0);
    /* the sum is no more than each sync's bucket bound allows */
    double bound = 0;
    for (int b = 0; b < SL_MASTER_JOURNAL_SYNC_BUCKETS; b++)
        bound += (double)h.count[b] * SL_MASTER_JOURNAL_SYNC_BOUNDS[b];
    if (h.count[SL_MASTER_JOURNAL_SYNC_BUCKETS] == 0) cr_assert_leq(h.sum_s, bound);
    for (int b = 1; b < SL_MASTER_JOURNAL_SYNC_BUCKETS; b++)
        cr_assert_gt(SL_MASTER_JOURNAL_SYNC_BOUNDS[b], SL_MASTER_JOURNAL_SYNC_BOUNDS[b - 1]);
    sl_master_journal_close(j);
    sl_master_journal_sync_hist(NULL, &h);
    cr_assert_eq(h.count[0] + h.count[SL_MASTER_JOURNAL_SYNC_BUCKETS], 0);
    cr_assert_eq(h.sum_s, 0.0);
    rm_dir(dir);
}
