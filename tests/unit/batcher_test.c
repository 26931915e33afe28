/* The batcher (src/dpp/worker/batcher/batcher.h) over ranges, the rows of a
 * lease: ranges tile rows and carry the lease, drop_last, a unit of rows,
 * shuffles within a batch, record times, the gaps a killed lease leaves
 * cut again, owned stripes taken rather than copied. Rows in order,
 * shuffle windows and dedup: batcher_rows_test.c. */
#include "batcher_util.h"

/* ---- ranges (rows of a lease) ---- */

typedef struct rsink {
    uint32_t batches;
    sl_worker_lease_origin_t lease[16];
    sl_batch_origin_t origin[16];
    int64_t ids[16][8]; /* sample ids (= split rows here) in batch order */
    uint32_t n[16];
} rsink_t;

static sl_err_t collect_ranged(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                               sl_error_t *err)
{
    (void)err;
    rsink_t *s = ctx;
    cr_assert_not_null(lease, "a batch of a range carries its lease part");
    cr_assert_lt(s->batches, 16);
    cr_assert_leq(b->batch_size, 8);
    s->lease[s->batches] = *lease;
    s->origin[s->batches] = b->origin;
    s->n[s->batches] = b->batch_size;
    memcpy(s->ids[s->batches], b->sample_ids, b->batch_size * sizeof(int64_t));
    s->batches++;
    sl_batch_destroy(b);
    return SL_OK;
}

/* Add the rows of [from, to) that are not multiples of 5 (the "filter")
 * from a split of 30 rows in two stripes of 15, as the reader does. */
static void add_kept(sl_worker_batcher_t *bt, sl_batch_t *const st[2], uint32_t split,
                     uint64_t from, uint64_t to)
{
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t sel[15], n = 0;
        for (uint32_t r = 0; r < 15; r++) {
            uint64_t row = k * 15 + r;
            if (row >= from && row < to && row % 5 != 0) sel[n++] = r;
        }
        if (n == 0) continue;
        sl_worker_rows_origin_t o = {.epoch = 1, .split_id = split, .row = k * 15};
        sl_error_t err = {0};
        cr_assert_eq(sl_worker_batcher_add(bt, st[k], sel, NULL, n, &o, &err), SL_OK, "%s",
                     err.msg);
    }
}

static void run_ranges(bool drop_last)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    rsink_t sk = {0};
    sl_worker_batcher_opts_t o = {.batch_size = 8, .drop_last = drop_last, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk, &bt, &err), SL_OK);
    int lease_handle;
    sl_worker_lease_origin_t lo = {
        .handle = &lease_handle, .split = 4, .generation = 9, .rank_plus_one = 2, .from_row = 2};
    sl_dpp_row_range_t e;
    /* range [2, 24): kept 2 3 4 6 7 8 9 11 | 12 13 14 16 17 18 19 21 | 22 23 */
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 2, 24);
    cr_assert_eq(sk.batches, 2);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 24, &e, &err), SL_OK, "%s", err.msg);
    /* range [25, 26): row 25 filtered, no batch */
    lo.from_row = 25;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 25, 26);
    sl_dpp_row_range_t e2;
    cr_assert_eq(sl_worker_batcher_end_range(bt, 26, &e2, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e2.from_row, 25);
    cr_assert_eq(e2.to_row, 26);

    static const int64_t want[3][8] = {
        {2, 3, 4, 6, 7, 8, 9, 11}, {12, 13, 14, 16, 17, 18, 19, 21}, {22, 23}};
    static const uint64_t from[3] = {2, 12, 22}, to[3] = {12, 22, 24};
    uint32_t nb = drop_last ? 2 : 3;
    cr_assert_eq(sk.batches, nb);
    for (uint32_t b = 0; b < nb; b++) {
        cr_assert_eq(sk.n[b], b < 2 ? 8u : 2u);
        cr_assert_eq(memcmp(sk.ids[b], want[b], sk.n[b] * sizeof(int64_t)), 0, "batch %u", b);
        cr_assert_eq(sk.lease[b].handle, &lease_handle);
        cr_assert_eq(sk.lease[b].split, 4);
        cr_assert_eq(sk.lease[b].generation, 9);
        cr_assert_eq(sk.lease[b].rank_plus_one, 2);
        cr_assert_eq(sk.lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(sk.lease[b].to_row, to[b], "batch %u", b);
        cr_assert_eq(sk.origin[b].split_id, 4);
        cr_assert_eq(sk.origin[b].epoch, 1);
        cr_assert_eq(sk.origin[b].first_row, (uint64_t)want[b][0]);
        cr_assert_eq(sk.origin[b].sequence, b);
    }
    /* the short batch's rows are empty when dropped */
    cr_assert_eq(e.from_row, drop_last ? 22 : 24);
    cr_assert_eq(e.to_row, 24);
    sl_worker_batcher_stats_t bs;
    sl_worker_batcher_stats(bt, &bs);
    cr_assert_eq(bs.rows_in, 18);
    cr_assert_eq(bs.rows_out, drop_last ? 16 : 18);
    cr_assert_eq(bs.rows_dropped, drop_last ? 2 : 0);

    /* out of turn: an end of no range, rows of another split, an end of
     * the epoch inside a range, a range begun with rows held */
    cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_ERR_INVALID);
    lo.from_row = 26;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    uint32_t one = 1;
    sl_worker_rows_origin_t other = {.epoch = 1, .split_id = 5, .row = 15};
    cr_assert_eq(sl_worker_batcher_add(bt, st[1], &one, NULL, 1, &other, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 5") != NULL, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_ERR_INVALID);
    add_kept(bt, st, 4, 26, 28);
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_ERR_INVALID);
    /* discard leaves the range: nothing held, a new range may begin */
    sl_worker_batcher_discard(bt);
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

Test(batcher, ranges_tile_rows_and_carry_the_lease)
{
    run_ranges(false);
}

Test(batcher, ranges_with_drop_last_report_the_dropped_rows_empty)
{
    run_ranges(true);
}

/* A Kafka stripe under a lease: its records, sorted by session, are
 * not numbered by their place, and its offsets have gaps (markers,
 * aborted and bad records). Added as one unit [row, end_row), the batch
 * it fills covers exactly its offsets and the gaps up to end_row: a batch
 * that claimed [row, row + n) (the rows' count) would leave records past
 * it "committed as empty" in SPLIT_READ, lost if the batch is lost. */
Test(batcher, a_unit_of_rows_fills_a_batch_up_to_its_end_row)
{
    sl_batch_t *st = sl_batch_new(NULL);
    make_stripe(st, 100, 8, false);
    rsink_t sk = {0};
    sl_worker_batcher_opts_t o = {.batch_size = 8, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk, &bt, &err), SL_OK);
    int lease_handle;
    sl_worker_lease_origin_t lo = {.handle = &lease_handle, .split = 3, .generation = 5};
    sl_dpp_row_range_t e;
    /* 8 records at offsets [2, 20) of the chunk: a full batch, to 20 */
    lo.from_row = 2;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    sl_worker_rows_origin_t ro = {.epoch = 0, .split_id = 3, .row = 2, .end_row = 20};
    cr_assert_eq(sl_worker_batcher_add(bt, st, NULL, NULL, 8, &ro, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk.batches, 1);
    cr_assert_eq(sk.lease[0].from_row, 2);
    cr_assert_eq(sk.lease[0].to_row, 20);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 20, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e.from_row, e.to_row, "nothing of [2, 20) is empty");
    /* 3 of them kept, in [20, 31): a short batch [20, 31) */
    uint32_t sel[3] = {1, 4, 6};
    lo.from_row = 20;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 20, .end_row = 31};
    cr_assert_eq(sl_worker_batcher_add(bt, st, sel, NULL, 3, &ro, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 31, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk.batches, 2);
    cr_assert_eq(sk.n[1], 3);
    static const int64_t want[3] = {101, 104, 106};
    cr_assert_eq(memcmp(sk.ids[1], want, sizeof want), 0);
    cr_assert_eq(sk.lease[1].from_row, 20);
    cr_assert_eq(sk.lease[1].to_row, 31);
    cr_assert_eq(e.from_row, e.to_row);
    /* none kept of [31, 40): all of it empty */
    lo.from_row = 31;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 40, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e.from_row, 31);
    cr_assert_eq(e.to_row, 40);
    /* a unit that does not fit the batch being built is refused, not split */
    lo.from_row = 40;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 40, .end_row = 45};
    cr_assert_eq(sl_worker_batcher_add(bt, st, sel, NULL, 3, &ro, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 45, .end_row = 60};
    cr_assert_eq(sl_worker_batcher_add(bt, st, NULL, NULL, 8, &ro, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "does not fit the 5 rows left") != NULL, "%s", err.msg);
    cr_assert_eq(sk.batches, 2);
    sl_worker_batcher_destroy(bt);
    sl_batch_destroy(st);
}

/* With a shuffle window (of the batch size, the only one a range takes) a
 * batch of a range shuffles its own rows, in an order drawn from its split
 * and first row: the same whatever ranges came before it. */
Test(batcher, ranges_shuffle_within_a_batch_whatever_came_before)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    sl_worker_batcher_opts_t o = {
        .batch_size = 8, .sample_ids = true, .shuffle_window = 8, .seed = 11};
    sl_error_t err = {0};
    sl_dpp_row_range_t e;
    rsink_t sk[2] = {{0}};
    for (int run = 0; run < 2; run++) {
        sl_worker_batcher_t *bt;
        cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk[run], &bt, &err), SL_OK);
        sl_worker_lease_origin_t lo = {.handle = &sk[run], .split = 3, .from_row = 0};
        if (run == 1) { /* another lease first */
            cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
            add_kept(bt, st, 3, 0, 30);
            cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_OK, "%s", err.msg);
        }
        lo.split = 4;
        lo.from_row = 2;
        cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
        add_kept(bt, st, 4, 2, 24);
        cr_assert_eq(sl_worker_batcher_end_range(bt, 24, &e, &err), SL_OK, "%s", err.msg);
        sl_worker_batcher_destroy(bt);
    }
    /* run 1: 3 batches of split 3 (24 kept rows), then split 4's */
    cr_assert_eq(sk[0].batches, 3);
    cr_assert_eq(sk[1].batches, 6);
    bool moved = false;
    static const int64_t want[3][8] = {
        {2, 3, 4, 6, 7, 8, 9, 11}, {12, 13, 14, 16, 17, 18, 19, 21}, {22, 23}};
    for (uint32_t b = 0; b < 3; b++) {
        const rsink_t *a = &sk[0], *c = &sk[1];
        cr_assert_eq(c->lease[b + 3].split, 4);
        cr_assert_eq(a->lease[b].from_row, c->lease[b + 3].from_row);
        cr_assert_eq(a->lease[b].to_row, c->lease[b + 3].to_row);
        cr_assert_eq(a->n[b], c->n[b + 3]);
        cr_assert_eq(memcmp(a->ids[b], c->ids[b + 3], a->n[b] * sizeof(int64_t)), 0,
                     "batch %u's order depends on what came before", b);
        /* a permutation of the batch's rows */
        for (uint32_t i = 0; i < a->n[b]; i++) {
            uint32_t found = 0;
            for (uint32_t j = 0; j < a->n[b]; j++)
                found += a->ids[b][j] == want[b][i];
            cr_assert_eq(found, 1, "batch %u row %ld", b, (long)want[b][i]);
        }
        moved |= memcmp(a->ids[b], want[b], a->n[b] * sizeof(int64_t)) != 0;
    }
    cr_assert(moved, "rows were shuffled");
    /* a window other than the batch size is refused for a range */
    o.shuffle_window = 16;
    sl_worker_batcher_t *bt;
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk[0], &bt, &err), SL_OK);
    sl_worker_lease_origin_t lo = {.split = 4};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_ERR_INVALID);
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

/* Record CreateTimes (Kafka rows, sl_batch_t.record_ms) go with their rows:
 * through a selection and a shuffle window each output row has its own
 * row's time (time = 1700000000000 + 7 * sample id, some unknown: -1); rows
 * of a later stripe without times are a change of shape. */
static int64_t time_of(int64_t id)
{
    return id % 11 == 10 ? -1 : 1700000000000 + 7 * id;
}

typedef struct times_sink {
    uint64_t rows, batches;
    uint8_t seen[4096];
} times_sink_t;

static sl_err_t check_times(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                            sl_error_t *err)
{
    (void)lease;
    (void)err;
    times_sink_t *s = ctx;
    cr_assert_not_null(b->record_ms, "a batch of rows with times has times");
    for (uint32_t i = 0; i < b->batch_size; i++) {
        int64_t id = b->sample_ids[i];
        cr_assert_eq(b->record_ms[i], time_of(id), "row %u (sample %ld)", i, (long)id);
        cr_assert_eq(s->seen[id]++, 0);
    }
    s->rows += b->batch_size;
    s->batches++;
    sl_batch_destroy(b);
    return SL_OK;
}

Test(batcher, record_times_travel_with_their_rows)
{
    times_sink_t *sk = calloc(1, sizeof *sk);
    sl_worker_batcher_opts_t o = {
        .batch_size = 37, .shuffle_window = 100, .seed = 9, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, check_times, sk, &bt, &err), SL_OK);
    uint32_t sel[300], k = 0;
    int64_t first = 0;
    uint64_t want = 0;
    for (int st = 0; st < 4; st++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, first, 300, false);
        s->record_ms = sl_arena_alloc(s->arena, 300 * sizeof(int64_t));
        for (uint32_t r = 0; r < 300; r++)
            s->record_ms[r] = time_of(first + r);
        k = 0;
        for (uint32_t r = 0; r < 300; r++)
            if (r % 3 != 1) sel[k++] = r;
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = (uint64_t)st};
        cr_assert_eq(sl_worker_batcher_add(bt, s, sel, NULL, k, &og, &err), SL_OK, "%s", err.msg);
        want += k;
        first += 300;
        sl_batch_destroy(s);
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk->rows, want);
    cr_assert_eq(sk->rows, 800);
    cr_assert_eq(sk->batches, 22); /* 800 rows in batches of 37: 21 full, one of 23 */
    for (int64_t id = 0; id < 1200; id++)
        cr_assert_eq(sk->seen[id], id % 3 != 1 ? 1 : 0, "sample %ld", (long)id);
    /* the same rows without times: refused, not batched with a hole */
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, first, 10, false);
    sl_worker_rows_origin_t og = {.epoch = 1, .split_id = 9};
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 10, &og, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "batcher: rows changed shape (3 keys, 2 dense, 1 labels, record "
                              "times no; expected 3, 2, 1, yes)");
    sl_batch_destroy(s);
    sl_worker_batcher_destroy(bt);
    free(sk);
}

/* The deterministic order's premise (docs/DESIGN.md, "A deterministic
 * order", Failures): a lease killed after committing some batches of a
 * split leaves gaps that start at the split's first row or at a committed
 * batch's end; batching each gap from its start cuts the original batches
 * again, rows and in-batch shuffle alike, and sl_master_order_gap_base
 * gives them their original global indices. Split 4 at base 10, batches
 * of 5 of the rows not multiples of 5: [0, 7) [7, 13) [13, 19) [19, 25)
 * [25, 30); the lease died with g 11 and 13 committed. */
Test(batcher, a_gap_after_a_killed_lease_cuts_the_original_batches_again)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    sl_worker_batcher_opts_t o = {
        .batch_size = 5, .sample_ids = true, .shuffle_window = 5, .seed = 28};
    sl_error_t err = {0};
    sl_dpp_row_range_t e;
    rsink_t whole = {0}, again = {0};
    sl_worker_batcher_t *bt;
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &whole, &bt, &err), SL_OK);
    sl_worker_lease_origin_t lo = {.handle = &whole, .split = 4, .from_row = 0};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 0, 30);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_OK, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    static const uint64_t from[5] = {0, 7, 13, 19, 25}, to[5] = {7, 13, 19, 25, 30};
    cr_assert_eq(whole.batches, 5);
    for (uint32_t b = 0; b < 5; b++) {
        cr_assert_eq(whole.lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(whole.lease[b].to_row, to[b], "batch %u", b);
    }

    const sl_master_order_batch_t committed[] = {{7, 13, 11}, {19, 25, 13}};
    static const uint64_t gap_from[3] = {0, 13, 25}, gap_to[3] = {7, 19, 30};
    static const uint32_t original[3] = {0, 2, 4};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &again, &bt, &err), SL_OK);
    for (uint32_t k = 0; k < 3; k++) {
        uint64_t g = 0, limit = 0;
        cr_assert_eq(
            sl_master_order_gap_base(10, 0, committed, 2, NULL, 0, gap_from[k], &g, &limit, &err),
            SL_OK, "%s", err.msg);
        cr_assert_eq(g, 10 + original[k], "gap %u", k);
        lo.from_row = gap_from[k];
        cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
        add_kept(bt, st, 4, gap_from[k], gap_to[k]);
        cr_assert_eq(sl_worker_batcher_end_range(bt, gap_to[k], &e, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(again.batches, k + 1, "gap %u is one original batch", k);
        cr_assert_eq(limit, k < 2 ? g + 1 : UINT64_MAX, "gap %u: the next committed g", k);
        uint32_t b = original[k];
        cr_assert_eq(again.lease[k].from_row, whole.lease[b].from_row, "gap %u", k);
        cr_assert_eq(again.lease[k].to_row, whole.lease[b].to_row, "gap %u", k);
        cr_assert_eq(again.n[k], whole.n[b], "gap %u", k);
        cr_assert_eq(memcmp(again.ids[k], whole.ids[b], whole.n[b] * sizeof(int64_t)), 0,
                     "gap %u: the rows or their shuffled order differ from batch %u", k, b);
    }
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

/* An owned stripe (sl_worker_batcher_add_owned) that is a whole batch on
 * its own becomes that batch: its arena taken, its buffers the batch's,
 * numbered as a built batch; any other (a different size, rows held
 * before it, a selection) is copied and the arena stays the caller's.
 * Either way every row comes out once, in order, with its values. */
static const int64_t *taken_ids[8]; /* the stripes' sample ids, by batch */
static uint32_t taken_n;
static sl_err_t collect_taken(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                              sl_error_t *err)
{
    cr_assert_lt(taken_n, 8);
    taken_ids[taken_n++] = b->sample_ids;
    return collect(ctx, b, lease, err);
}

Test(batcher, an_owned_stripe_of_a_whole_batch_is_taken_not_copied)
{
    const uint32_t B = 100;
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 1000;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sk->weighted = true;
    sl_worker_batcher_opts_t o = {.batch_size = B, .sample_ids = true, .job_id = 5};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_taken, sk, &bt, &err), SL_OK);
    /* stripes of 100 (taken), 250 (copied: 2 batches, 50 held), 100 (copied:
     * rows held), 100 with every row selected (taken), 100 with a selection
     * (copied) */
    const uint32_t sizes[] = {100, 250, 100, 100, 100};
    const bool taken[] = {true, false, false, true, false};
    const int64_t *ids[5];
    int64_t first = 0;
    uint32_t sel[100];
    for (uint32_t i = 0; i < 90; i++)
        sel[i] = i + (i >= 45 ? 10 : 0); /* rows 45..54 left out */
    for (uint32_t st = 0; st < 5; st++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, first, sizes[st], true);
        ids[st] = s->sample_ids;
        sl_arena_t *owned = s->arena;
        uint32_t n = st == 4 ? 90 : sizes[st];
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = 2, .row = (uint64_t)first};
        if (st == 3) /* the 50 rows held go out first, as the short batch of their epoch */
            cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(
            sl_worker_batcher_add_owned(bt, s, st == 4 ? sel : NULL, NULL, n, &og, &owned, &err),
            SL_OK, "stripe %u: %s", st, err.msg);
        cr_assert_eq(owned == NULL, taken[st], "stripe %u", st);
        if (owned) sl_arena_destroy(owned); /* s lies in it */
        first += sizes[st];
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
    /* batches: [0,100) taken, [100,200) [200,300) copied, [300,400) copied,
     * [400,450) short, [450,550) taken, then 90 of [550,650) */
    const uint32_t want_sizes[] = {100, 100, 100, 100, 50, 100, 90};
    const uint64_t want_first[] = {0, 100, 200, 300, 400, 450, 550};
    cr_assert_eq(sk->batches, 7);
    cr_assert_eq(taken_n, 7);
    for (uint32_t b = 0; b < 7; b++) {
        cr_assert_eq(sk->sizes[b], want_sizes[b], "batch %u", b);
        cr_assert_eq(sk->origins[b].first_row, want_first[b], "batch %u", b);
        cr_assert_eq(sk->origins[b].sequence, b, "batch %u", b);
        cr_assert_eq(sk->origins[b].job_id, 5);
        cr_assert_eq(sk->origins[b].split_id, 2);
    }
    /* the taken batches' ids are the stripes' own buffers, no other's */
    cr_assert_eq(taken_ids[0], ids[0]);
    cr_assert_eq(taken_ids[5], ids[3]);
    for (uint32_t b = 1; b < 5; b++)
        for (uint32_t st = 0; st < 5; st++)
            cr_assert_neq(taken_ids[b], ids[st], "batch %u", b);
    cr_assert_eq(sk->rows, 640);
    for (uint64_t i = 0; i < 640; i++) {
        int64_t want = i < 595 ? (int64_t)i : (int64_t)i + 10;
        cr_assert_eq(sk->order[i], want, "row %llu", (unsigned long long)i);
    }
    sl_worker_batcher_destroy(bt);
    free(sk->order);
    free(sk);
}

/* In a range, a taken stripe is a batch of the range as a built one is:
 * the lease part covers its rows, up to a unit's end row. */
Test(batcher, an_owned_stripe_in_a_range_carries_its_rows)
{
    rsink_t *sk = calloc(1, sizeof *sk);
    sl_worker_batcher_opts_t o = {.batch_size = 8, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, sk, &bt, &err), SL_OK);
    sl_worker_lease_origin_t lease = {.handle = sk, .split = 3, .generation = 2, .from_row = 16};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lease, 1, &err), SL_OK, "%s", err.msg);
    for (int u = 0; u < 2; u++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, 16 + 8 * u, 8, false);
        sl_arena_t *owned = s->arena;
        /* the second: a unit of records with gaps, rows [24, 40) */
        sl_worker_rows_origin_t og = {
            .epoch = 1, .split_id = 3, .row = 16 + 8 * (uint64_t)u, .end_row = u ? 40 : 0};
        cr_assert_eq(sl_worker_batcher_add_owned(bt, s, NULL, NULL, 8, &og, &owned, &err), SL_OK,
                     "%s", err.msg);
        cr_assert_null(owned);
    }
    sl_dpp_row_range_t empty;
    cr_assert_eq(sl_worker_batcher_end_range(bt, 40, &empty, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(empty.from_row, 40);
    cr_assert_eq(empty.to_row, 40);
    cr_assert_eq(sk->batches, 2);
    const uint64_t from[] = {16, 24}, to[] = {24, 40};
    for (uint32_t b = 0; b < 2; b++) {
        cr_assert_eq(sk->lease[b].split, 3);
        cr_assert_eq(sk->lease[b].generation, 2);
        cr_assert_eq(sk->lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(sk->lease[b].to_row, to[b], "batch %u", b);
        cr_assert_eq(sk->origin[b].first_row, from[b]);
        cr_assert_eq(sk->origin[b].sequence, b);
        cr_assert_eq(sk->n[b], 8);
        for (uint32_t i = 0; i < 8; i++)
            cr_assert_eq(sk->ids[b][i], 16 + 8 * (int64_t)b + i);
    }
    sl_worker_batcher_destroy(bt);
    free(sk);
}

/* A batcher asked for no sample ids hands a taken stripe out without. */
static sl_err_t no_ids(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                       sl_error_t *err)
{
    (void)lease;
    (void)err;
    cr_assert_null(b->sample_ids);
    cr_assert_eq(b->batch_size, 8);
    cr_assert_eq(b->dense.data[2], 1.0f); /* row 1's first dense value */
    (*(int *)ctx)++;
    sl_batch_destroy(b);
    return SL_OK;
}

Test(batcher, an_owned_stripe_taken_without_sample_ids)
{
    int got = 0;
    sl_worker_batcher_opts_t o = {.batch_size = 8};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, no_ids, &got, &bt, &err), SL_OK);
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 0, 8, false);
    sl_arena_t *owned = s->arena;
    sl_worker_rows_origin_t og = {0};
    cr_assert_eq(sl_worker_batcher_add_owned(bt, s, NULL, NULL, 8, &og, &owned, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_null(owned);
    cr_assert_eq(got, 1);
    sl_worker_batcher_destroy(bt);
}
