/* Tests of the master's journal (src/dpp/master/journal/journal.h) through the master
 * state: replay equals the in-memory state after random operations, a torn
 * tail is cut with a warning, damage in the middle is refused naming file
 * and offset, snapshots and compaction (including a crash between the
 * snapshot and the new journal). Every state is on the counting allocator of
 * testutil.h (no leak, every free with its size), and opening a state
 * directory is walked through every allocation failure. Syncs in two
 * phases from threads: journal_sync_test.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "journal_util.h"
#include "testutil.h"

#define N_SPLITS 16

/* Every master of these tests allocates here. */
static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(journal, .init = init_alloc);
TestSuite(corpus, .init = init_alloc);

static sl_wh_split_t g_splits[N_SPLITS];

static void make_splits(void)
{
    static const char *paths[2] = {"a/part-0.slc", "b/part-1.slc"};
    for (uint32_t i = 0; i < N_SPLITS; i++)
        g_splits[i] = (sl_wh_split_t){.path = paths[i % 2],
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = 1000 * i,
                                      .num_rows = 5 + i % 7};
}

static sl_master_state_t *open_dir(const char *dir, uint64_t compact, uint64_t now,
                                   sl_master_journal_open_info_t *info)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 40, .allocator = ALLOC};
    sl_master_store_opts_t so = {.compact_bytes = compact};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open_with(dir, &so, &o, now, &m, info, &err), SL_OK, "%s", err.msg);
    return m;
}

static char *dump(const sl_master_state_t *m, size_t *len)
{
    char *d;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, len, &err), SL_OK, "%s", err.msg);
    return d;
}

static void assert_same(const sl_master_state_t *a, const sl_master_state_t *b)
{
    size_t la, lb;
    char *da = dump(a, &la), *db = dump(b, &lb);
    cr_assert_str_eq(da, db);
    sl_free(ALLOC, da, la + 1);
    sl_free(ALLOC, db, lb + 1);
}

/* Random operations over three job ids and four workers; every call's
 * result is checked against what the state allows. */
static void random_ops(sl_master_state_t *m, uint64_t *s, int steps, uint64_t *now)
{
    static const char *jobs[3] = {"alpha", "beta", "gamma"};
    static const char *workers[4] = {"w0", "w1", "w2", "w3"};
    sl_error_t err = {0};
    for (int i = 0; i < steps; i++) {
        /* the invariants hold between any two calls (state_check.c) */
        cr_assert_eq(sl_master_state_check(m, &err), SL_OK, "step %d: %s", i, err.msg);
        *now += tu_below(s, 8);
        const char *j = jobs[tu_below(s, 3)];
        const char *w = workers[tu_below(s, 4)];
        uint64_t op = tu_below(s, 100);
        sl_master_state_job_status_t st;
        bool exists = sl_master_state_job_status(m, j, &st, &err) == SL_OK;
        if (!exists || op < 2) {
            if (exists && op < 1) {
                cr_assert_eq(sl_master_state_job_remove(m, j, &err), SL_OK);
                continue;
            }
            if (exists) continue;
            sl_master_state_job_spec_t spec = {.job_id = j,
                                               .splits = g_splits,
                                               .num_splits = 1 + (uint32_t)tu_below(s, N_SPLITS),
                                               .epochs = 1 + (uint32_t)tu_below(s, 3),
                                               .seed = tu_next(s),
                                               .shuffle = tu_below(s, 2)};
            cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
            continue;
        }
        if (op < 3) {
            /* idle client records go (ClientEvicted), one client kept */
            sl_master_state_client_touch(m, "c0", *now);
            cr_assert_eq(sl_master_state_evict_clients(m, *now, tu_below(s, 40), NULL, &err),
                         SL_OK);
            continue;
        }
        if (op < 10) {
            cr_assert_eq(sl_master_state_expire(m, *now, NULL, &err), SL_OK);
            continue;
        }
        if (op >= 20 && op < 50) {
            sl_master_lease_t l;
            sl_err_t rc = sl_master_state_lease_next(m, j, w, *now, &l, &err);
            cr_assert(rc == SL_OK || rc == SL_ERR_AGAIN, "%s", err.msg);
            continue;
        }
        /* A random split of j with its state, generation and holder: lease
         * state is only visible in the dump. */
        uint32_t split = (uint32_t)tu_below(s, st.num_splits);
        char *d;
        size_t len;
        cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK);
        char key[64];
        snprintf(key, sizeof key, "job %s ", j);
        const char *p = strstr(d, key);
        cr_assert(p != NULL);
        char line[32];
        snprintf(line, sizeof line, "\n %u ", split);
        p = strstr(p, line);
        cr_assert(p != NULL);
        char state, holder[16];
        unsigned long long gen, rows;
        cr_assert_eq(sscanf(p + strlen(line), "%c gen %llu committed %llu %15s", &state, &gen,
                            &rows, holder),
                     4);
        sl_free(ALLOC, d, len + 1);
        sl_master_lease_ref_t ref = {j, st.epoch, split, gen};
        if (tu_below(s, 4) == 0) ref.generation += 1 + tu_below(s, 3); /* a stale name */
        bool live = state == 'L' && ref.generation == gen;
        if (op < 15) {
            /* a heartbeat naming that split's lease (or none) */
            uint32_t n = (uint32_t)tu_below(s, 2), renewed;
            cr_assert_eq(sl_master_state_renew(m, w, &ref, n, *now, &renewed, &err), SL_OK);
            cr_assert_eq(renewed, n == 1 && live && strcmp(holder, w) == 0 ? 1u : 0u);
            continue;
        }
        if (op < 20) {
            /* the holder's process restarts (names nothing) or reconnects
             * (names its lease): every other lease of its id is revoked */
            uint32_t n = (uint32_t)tu_below(s, 2), renewed, revoked;
            const char *who = state == 'L' ? holder : w;
            cr_assert_eq(sl_master_state_register(m, who, &ref, n, *now, &renewed, &revoked, &err),
                         SL_OK, "%s", err.msg);
            cr_assert_eq(renewed, n == 1 && live ? 1u : 0u);
            continue;
        }
        uint64_t total = g_splits[split].num_rows;
        if (rows < total && tu_below(s, 3) != 0) {
            /* a client commits some rows: accepted, overlapping, or refused
             * because the split is not leased under that generation */
            uint64_t from = tu_below(s, total);
            uint64_t to = from + 1 + tu_below(s, total - from);
            char cid[16];
            snprintf(cid, sizeof cid, "c%u", (unsigned)tu_below(s, 3));
            sl_master_commit_result_t res;
            /* samples: the batch's rows the filters kept (any number up to
             * its rows); journaled, so the dumps compared after replay and
             * compaction include the counters */
            sl_master_commit_t co = {j,
                                     st.epoch,
                                     split,
                                     ref.generation,
                                     from,
                                     to,
                                     cid,
                                     tu_next(s),
                                     (uint32_t)tu_below(s, to - from + 1)};
            res = sl_master_state_commit_batch(m, &co, &err);
            cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
            if (st.finished || !live)
                cr_assert(res == SL_MASTER_STALE_EPOCH || res == SL_MASTER_OVERLAP, "%d", res);
            else
                cr_assert(res == SL_MASTER_COMMITTED || res == SL_MASTER_OVERLAP, "%d", res);
            continue;
        }
        /* the holder's split read, with some empty rows */
        uint64_t from = total ? tu_below(s, total) : 0;
        sl_dpp_row_range_t empty = {from, from + (total - from) / 2};
        sl_master_read_result_t rr =
            sl_master_state_split_read(m, j, st.epoch, split, gen, &empty, 1, &err);
        cr_assert(state == 'L' ? rr == SL_MASTER_READ_DONE || rr == SL_MASTER_READ_PENDING
                               : rr == SL_MASTER_READ_STALE,
                  "%c %d %s", state, rr, err.msg);
    }
}

static off_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_size;
}

Test(journal, replay_equals_memory_state)
{
    make_splits();
    uint64_t s = tu_seed("journal::replay_equals_memory_state");
    for (int round = 0; round < 8; round++) {
        char *dir = tmp_dir();
        uint64_t now = 0;
        sl_master_state_t *m = open_dir(dir, 1ull << 40, now, NULL);
        random_ops(m, &s, 300 + (int)tu_below(&s, 300), &now);
        sl_error_t err = {0};
        cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
        /* reopened from the directory */
        sl_master_state_t *r = open_dir(dir, 1ull << 40, now, NULL);
        assert_same(m, r);
        cr_assert_eq(sl_master_state_check(r, &err), SL_OK, "%s", err.msg);
        ms_destroy(r);
        /* replayed from the journal's bytes into memory */
        char jp[256];
        path_of(jp, sizeof jp, dir, "journal");
        uint8_t *buf;
        size_t len;
        read_file(jp, &buf, &len);
        sl_master_state_opts_t o = {.lease_timeout_ms = 40, .allocator = ALLOC};
        sl_master_state_t *q = NULL;
        cr_assert_eq(sl_master_state_new(&o, &q, &err), SL_OK);
        bool torn = true;
        cr_assert_eq(sl_master_store_replay(q, buf, len, &torn, &err), SL_OK, "%s", err.msg);
        cr_assert(!torn);
        assert_same(m, q);
        free(buf);
        ms_destroy(q);
        ms_destroy(m);
        rm_dir(dir);
    }
    tu_alloc_assert_clean(&g_ta);
}

Test(journal, torn_tail_is_cut_with_a_warning)
{
    make_splits();
    uint64_t s = tu_seed("journal::torn_tail");
    char *dir = tmp_dir();
    char jp[256];
    path_of(jp, sizeof jp, dir, "journal");
    uint64_t now = 0;
    sl_error_t err = {0};
    sl_master_state_t *m = open_dir(dir, 1ull << 40, now, NULL);
    sl_master_state_job_spec_t spec = {
        .job_id = "t", .splits = g_splits, .num_splits = N_SPLITS, .epochs = 1};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK);
    random_ops(m, &s, 200, &now);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    size_t before_len;
    char *before = dump(m, &before_len);
    off_t s1 = file_size(jp);
    /* one more change, made durable, then cut in its middle */
    sl_master_lease_t l;
    sl_err_t rc = SL_OK;
    while (rc == SL_OK)
        rc = sl_master_state_lease_next(m, "t", "late", now, &l, &err);
    sl_master_state_job_remove(m, "t", &err);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    off_t s2 = file_size(jp);
    cr_assert_gt(s2, s1);
    ms_destroy(m);
    /* cut inside the last record (the job removal) */
    off_t cut = s2 - 3;
    cr_assert_eq(truncate(jp, cut), 0);
    sl_master_journal_open_info_t info;
    m = open_dir(dir, 1ull << 40, now, &info);
    cr_assert(info.truncated);
    cr_assert_lt(info.truncated_at, (uint64_t)cut);
    cr_assert_geq(info.truncated_at, (uint64_t)s1);
    cr_assert(strstr(info.warning, "torn") != NULL, "%s", info.warning);
    char at[64];
    snprintf(at, sizeof at, "offset %llu", (unsigned long long)info.truncated_at);
    cr_assert(strstr(info.warning, at) != NULL, "%s", info.warning);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "t", &st, &err), SL_OK, "removal must be cut");
    ms_destroy(m);

    /* a zero-filled tail (file extended, never written) is torn too */
    int fd = open(jp, O_WRONLY | O_APPEND);
    static const uint8_t zeros[4096];
    cr_assert_eq(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);
    off_t s3 = file_size(jp);
    m = open_dir(dir, 1ull << 40, now, &info);
    cr_assert(info.truncated);
    cr_assert_eq(info.truncated_bytes, sizeof zeros);
    /* cut back to before the zeros, plus this open's own (small) record */
    cr_assert_gt(file_size(jp), s3 - (off_t)sizeof zeros);
    cr_assert_lt(file_size(jp), s3 - (off_t)sizeof zeros + 64);
    ms_destroy(m);

    /* replaying to exactly the synced prefix gives the state at that point */
    cr_assert_eq(truncate(jp, s1), 0);
    m = open_dir(dir, 1ull << 40, now, &info);
    cr_assert(!info.truncated);
    size_t after_len;
    char *after = dump(m, &after_len);
    cr_assert_str_eq(after, before);
    sl_free(ALLOC, after, after_len + 1);
    sl_free(ALLOC, before, before_len + 1);
    ms_destroy(m);
    rm_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

typedef struct offsets {
    uint64_t at[4096];
    uint32_t n;
} offsets;

static sl_err_t collect(void *ctx, const uint8_t *p, size_t len, uint64_t off, sl_error_t *err)
{
    (void)p;
    (void)len;
    (void)err;
    offsets *o = ctx;
    if (o->n < 4096) o->at[o->n++] = off;
    return SL_OK;
}

Test(journal, corruption_in_the_middle_is_refused_with_offset)
{
    make_splits();
    uint64_t s = tu_seed("journal::corruption_in_the_middle");
    char *dir = tmp_dir();
    char jp[256];
    path_of(jp, sizeof jp, dir, "journal");
    uint64_t now = 0;
    sl_error_t err = {0};
    sl_master_state_t *m = open_dir(dir, 1ull << 40, now, NULL);
    random_ops(m, &s, 400, &now);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    ms_destroy(m);
    uint8_t *buf;
    size_t len;
    read_file(jp, &buf, &len);
    static offsets o;
    o.n = 0;
    sl_master_journal_scan_t scan;
    cr_assert_eq(sl_master_journal_scan(buf, len, "j", 0, collect, &o, &scan, &err), SL_OK);
    cr_assert_gt(o.n, 10);
    cr_assert_eq(scan.records, o.n);
    for (int trial = 0; trial < 3; trial++) {
        /* a record with records after it: flip a payload byte, or the length */
        uint32_t k = 1 + (uint32_t)tu_below(&s, o.n - 3);
        uint64_t off = o.at[k];
        size_t where = trial == 0 ? (size_t)off : (size_t)off + 16 + (trial - 1);
        uint8_t *bad = malloc(len);
        memcpy(bad, buf, len);
        bad[where] ^= 0x10;
        FILE *f = fopen(jp, "wb");
        cr_assert_eq(fwrite(bad, 1, len, f), len);
        fclose(f);
        sl_master_state_opts_t opts = {.allocator = ALLOC};
        sl_master_state_t *x = NULL;
        cr_assert_eq(ms_open(dir, &opts, now, &x, NULL, &err), SL_ERR_CORRUPT);
        char want[320];
        snprintf(want, sizeof want, "%s: record at offset %llu", jp, (unsigned long long)off);
        cr_assert(strstr(err.msg, want) != NULL, "want '%s' in '%s'", want, err.msg);
        cr_assert_eq(file_size(jp), (off_t)len, "a refused journal must not be cut");
        free(bad);
    }
    /* header damage: magic, version */
    uint8_t *bad = malloc(len);
    memcpy(bad, buf, len);
    bad[0] = 'X';
    cr_assert_eq(sl_master_journal_scan(bad, len, "j", 0, NULL, NULL, &scan, &err), SL_ERR_CORRUPT);
    memcpy(bad, buf, len);
    bad[4] = 2;
    cr_assert_eq(sl_master_journal_scan(bad, len, "j", 0, NULL, NULL, &scan, &err), SL_ERR_VERSION);
    cr_assert_eq(sl_master_journal_scan(buf, 10, "j", 0, NULL, NULL, &scan, &err),
                 SL_ERR_TRUNCATED);
    free(bad);
    free(buf);
    rm_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(journal, snapshot_and_compaction)
{
    make_splits();
    uint64_t s = tu_seed("journal::snapshot_and_compaction");
    char *dir = tmp_dir();
    char jp[256], sp[256], old[256];
    path_of(jp, sizeof jp, dir, "journal");
    path_of(sp, sizeof sp, dir, "snapshot");
    path_of(old, sizeof old, dir, "journal.old");
    uint64_t now = 0;
    sl_error_t err = {0};
    /* compaction when the journal outgrows 4 KiB, at sync */
    sl_master_state_t *m = open_dir(dir, 4096, now, NULL);
    for (int i = 0; i < 20; i++) {
        random_ops(m, &s, 50, &now);
        cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    }
    sl_master_store_counters_t c;
    sl_master_store_counters(ms_store(m), &c);
    cr_assert_gt(c.compactions, 0);
    cr_assert_leq(file_size(jp), 4096 + 64 * 1024);
    cr_assert_gt(file_size(sp), 32);
    sl_master_state_t *r = open_dir(dir, 4096, now, NULL);
    assert_same(m, r);
    ms_destroy(r);

    /* crash between the snapshot's rename and the new journal's: an older
     * journal beside a newer snapshot is discarded, not replayed twice */
    random_ops(m, &s, 100, &now);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    cr_assert_eq(link(jp, old), 0);
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(rename(old, jp), 0);
    sl_master_journal_open_info_t info;
    r = open_dir(dir, 4096, now, &info);
    cr_assert(info.had_snapshot);
    cr_assert(info.discarded_old);
    assert_same(m, r);
    ms_destroy(r);
    ms_destroy(m);

    /* a damaged snapshot refuses to start */
    uint8_t *buf;
    size_t len;
    read_file(sp, &buf, &len);
    buf[len / 2] ^= 1;
    FILE *f = fopen(sp, "wb");
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
    sl_master_state_opts_t o = {.allocator = ALLOC};
    cr_assert_eq(ms_open(dir, &o, now, &m, NULL, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "snapshot: checksum mismatch") != NULL, "%s", err.msg);
    /* a journal that continues a missing snapshot refuses to start */
    unlink(sp);
    cr_assert_eq(ms_open(dir, &o, now, &m, NULL, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "snapshot it continues is missing") != NULL, "%s", err.msg);
    rm_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* Opening a state directory (a snapshot, then a journal with a torn last
 * record) with its k-th allocation failing, for every k: refused as out of
 * memory saying what, nothing leaked, neither file touched (the torn tail
 * is cut only by an open that succeeds); then it opens to the state it
 * holds. */
Test(journal, open_under_every_allocation_failure)
{
    make_splits();
    uint64_t s = tu_seed("journal::open_under_every_allocation_failure");
    char *dir = tmp_dir();
    char jp[256], sp[256];
    path_of(jp, sizeof jp, dir, "journal");
    path_of(sp, sizeof sp, dir, "snapshot");
    uint64_t now = 0;
    sl_error_t err = {0};
    sl_master_state_t *m = open_dir(dir, 4096, now, NULL);
    for (int i = 0; i < 8; i++) {
        random_ops(m, &s, 50, &now);
        cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    }
    sl_master_store_counters_t c;
    sl_master_store_counters(ms_store(m), &c);
    cr_assert_gt(c.compactions, 0);
    random_ops(m, &s, 40, &now);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    size_t want_len;
    char *d = dump(m, &want_len), *want = strdup(d); /* off the counted path */
    sl_free(ALLOC, d, want_len + 1);
    ms_destroy(m);
    /* a record cut short: its header says 100 bytes, 5 follow */
    uint8_t torn[16 + 5] = {100, 0, 0, 0, 0x9b, 0xff, 0xff, 0xff};
    FILE *f = fopen(jp, "ab");
    cr_assert_eq(fwrite(torn, 1, sizeof torn, f), sizeof torn);
    fclose(f);
    uint8_t *jbuf, *sbuf;
    size_t jlen, slen;
    read_file(jp, &jbuf, &jlen);
    read_file(sp, &sbuf, &slen);
    sl_master_state_opts_t o = {.lease_timeout_ms = 40, .allocator = ALLOC};
    uint64_t k = 1;
    for (;; k++) {
        tu_alloc_fail_at(&g_ta, k, false);
        sl_master_state_t *r = NULL;
        sl_master_journal_open_info_t info;
        sl_err_t rc = ms_open(dir, &o, now, &r, &info, &err);
        bool failed = tu_alloc_failures(&g_ta) > 0;
        tu_alloc_fail_at(&g_ta, 0, false);
        if (!failed) {
            cr_assert_eq(rc, SL_OK, "%s", err.msg);
            cr_assert(info.truncated, "the torn tail was not cut");
            size_t got_len;
            char *got = dump(r, &got_len);
            cr_assert_str_eq(got, want);
            sl_free(ALLOC, got, got_len + 1);
            ms_destroy(r);
            break;
        }
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %llu: %s: %s", (unsigned long long)k,
                     sl_err_str(rc), err.msg);
        cr_assert_neq(err.msg[0], '\0', "allocation %llu: no message", (unsigned long long)k);
        cr_assert_null(r);
        uint8_t *now_j, *now_s;
        size_t now_jlen, now_slen;
        read_file(jp, &now_j, &now_jlen);
        read_file(sp, &now_s, &now_slen);
        cr_assert(now_jlen == jlen && memcmp(now_j, jbuf, jlen) == 0,
                  "allocation %llu: the journal changed (%zu bytes, was %zu)",
                  (unsigned long long)k, now_jlen, jlen);
        cr_assert(now_slen == slen && memcmp(now_s, sbuf, slen) == 0,
                  "allocation %llu: the snapshot changed", (unsigned long long)k);
        free(now_j);
        free(now_s);
        char why[256];
        cr_assert(tu_alloc_clean(&g_ta, why, sizeof why), "allocation %llu: %s",
                  (unsigned long long)k, why);
    }
    cr_log_info("open walked through %llu allocation failures", (unsigned long long)k - 1);
    cr_assert_gt(k, 10);
    free(want);
    free(jbuf);
    free(sbuf);
    rm_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}
Test(journal, restart_treats_leases_as_renewed_and_never_reuses_generations)
{
    make_splits();
    char *dir = tmp_dir();
    sl_error_t err = {0};
    sl_master_state_t *m = open_dir(dir, 1ull << 40, 0, NULL);
    sl_master_state_job_spec_t spec = {
        .job_id = "g", .splits = g_splits, .num_splits = 3, .epochs = 1};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK);
    sl_master_lease_t synced, lost;
    cr_assert_eq(sl_master_state_lease_next(m, "g", "w0", 0, &synced, &err), SL_OK);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    /* a grant that never reaches the disk (crash before the next sync) */
    cr_assert_eq(sl_master_state_lease_next(m, "g", "w1", 0, &lost, &err), SL_OK);
    /* destroy without sync drops the buffered record, like kill -9 */
    ms_destroy(m);
    m = open_dir(dir, 1ull << 40, 1000, NULL);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "g", &st, &err), SL_OK);
    cr_assert_eq(st.leased, 1);
    cr_assert_eq(st.pending, 2);
    /* the synced lease lives until restart + timeout (40 ms) */
    uint32_t n;
    cr_assert_eq(sl_master_state_expire(m, 1039, &n, &err), SL_OK);
    cr_assert_eq(n, 0);
    cr_assert(sl_master_state_lease_live(m, "g", 0, synced.split, synced.generation, "w0"));
    /* the lost lease's holder is stale, and its split is served again under
     * a generation that differs from the lost one */
    cr_assert(!sl_master_state_lease_live(m, "g", 0, lost.split, lost.generation, NULL));
    cr_assert_eq(sl_master_state_split_read(m, "g", 0, lost.split, lost.generation, NULL, 0, &err),
                 SL_MASTER_READ_STALE);
    sl_master_lease_t again;
    cr_assert_eq(sl_master_state_lease_next(m, "g", "w2", 1000, &again, &err), SL_OK);
    cr_assert_eq(again.split, lost.split);
    cr_assert_neq(again.generation, lost.generation);
    cr_assert_eq(sl_master_state_split_read(m, "g", 0, lost.split, lost.generation, NULL, 0, &err),
                 SL_MASTER_READ_STALE);
    /* both live leases (w0's from before the restart, w2's) end at 1040 */
    cr_assert_eq(sl_master_state_expire(m, 1040, &n, &err), SL_OK);
    cr_assert_eq(n, 2);
    ms_destroy(m);
    rm_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* ---- seed corpus of the journal fuzz target ------------------------------------------ */

static void write_seed(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* With SLUICE_WRITE_CORPUS=<dir>: small journals of random operations,
 * and damaged copies (torn tail, flipped byte, bad version). */
Test(corpus, write)
{
    const char *out = getenv("SLUICE_WRITE_CORPUS");
    if (out == NULL || *out == '\0') return;
    make_splits();
    uint64_t s = 20261121;
    for (int i = 0; i < 4; i++) {
        char *dir = tmp_dir();
        uint64_t now = 0;
        sl_error_t err = {0};
        sl_master_state_t *m = open_dir(dir, 1ull << 40, now, NULL);
        random_ops(m, &s, 20 + 30 * i, &now);
        cr_assert_eq(ms_sync(m, &err), SL_OK);
        ms_destroy(m);
        char jp[256], name[32];
        path_of(jp, sizeof jp, dir, "journal");
        uint8_t *buf;
        size_t len;
        read_file(jp, &buf, &len);
        snprintf(name, sizeof name, "valid-%d", i);
        write_seed(out, name, buf, len);
        if (i == 1) {
            write_seed(out, "torn", buf, len - 5);
            buf[len / 2] ^= 4;
            write_seed(out, "bad-flip", buf, len);
            buf[len / 2] ^= 4;
            buf[4] = 7;
            write_seed(out, "bad-version", buf, len);
        }
        free(buf);
        rm_dir(dir);
    }
}
