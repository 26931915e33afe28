/* The worker's hold of a deterministic order's batches (order_hold.h):
 * committed batches dropped by the todo, g = base + k from the split's
 * first row, held until the base is known and every lower g has left,
 * rank g mod R; refusals by name; a seeded random run of many leases
 * whose puts arrive in any order and whose bases come in prefix order;
 * a resumed job's skip rows neither numbered nor counted. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dpp/worker/server/order_hold.h"
#include "testutil.h"

/* An item of lease l, rows [from, to), len bytes; frame NULL (the hold
 * never touches it). tag in num_samples identifies it. */
static sl_worker_server_item_t item(void *l, uint64_t from, uint64_t to, uint32_t tag)
{
    return (sl_worker_server_item_t){
        .len = 100, .num_samples = tag, .lease = {.handle = l, .from_row = from, .to_row = to}};
}

Test(worker_order_hold, committed_batches_dropped_and_the_rest_numbered_from_the_first_row)
{
    sl_error_t err = {0};
    sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, 2);
    int lease;
    /* rows [10, 30) still to do: batches [0,10) and [30,40) were committed */
    sl_dpp_row_range_t todo[] = {{10, 30}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &lease, 7, todo, 1, 0, &err), SL_OK, "%s", err.msg);
    bool keep[4];
    uint64_t cuts[][2] = {{0, 10}, {10, 20}, {20, 30}, {30, 40}};
    for (int k = 0; k < 4; k++)
        cr_assert_eq(sl_worker_order_hold_cut(h, &lease, cuts[k][0], cuts[k][1], &keep[k], &err),
                     SL_OK, "%s", err.msg);
    cr_assert(!keep[0] && keep[1] && keep[2] && !keep[3]);
    /* encoded out of order; nothing leaves before the base is known */
    sl_worker_server_item_t a = item(&lease, 20, 30, 2), b = item(&lease, 10, 20, 1), out;
    cr_assert_eq(sl_worker_order_hold_put(h, &a, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_put(h, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_count(h), 2);
    cr_assert_eq(sl_worker_order_hold_bytes(h), 200);
    cr_assert_not(sl_worker_order_hold_pop(h, &out));
    uint64_t n = 0;
    cr_assert_eq(sl_worker_order_hold_end(h, &lease, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 4, "every batch cut is counted, the dropped ones too");
    cr_assert_eq(sl_worker_order_hold_set_base(h, &lease, 41, &err), SL_OK, "%s", err.msg);
    /* batch k = 1: g 42, rank 0; k = 2: g 43, rank 1 */
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.num_samples, 1);
    cr_assert_eq(out.lease.order_g_plus_one, 43);
    cr_assert_eq(out.lease.rank_plus_one, 1);
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.num_samples, 2);
    cr_assert_eq(out.lease.order_g_plus_one, 44);
    cr_assert_eq(out.lease.rank_plus_one, 2);
    cr_assert_not(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(sl_worker_order_hold_bytes(h), 0);
    /* ended and sent: forgotten */
    cr_assert_eq(sl_worker_order_hold_set_base(h, &lease, 41, &err), SL_ERR_NOT_FOUND);
    sl_worker_order_hold_destroy(h);
}

Test(worker_order_hold, a_batch_still_encoding_holds_back_every_higher_g)
{
    sl_error_t err = {0};
    sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, 3);
    int l0, l1;
    sl_dpp_row_range_t all[] = {{0, 100}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &l0, 0, all, 1, 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_begin(h, &l1, 1, all, 1, 0, &err), SL_OK, "%s", err.msg);
    bool keep;
    for (uint64_t r = 0; r < 100; r += 50) {
        cr_assert_eq(sl_worker_order_hold_cut(h, &l0, r, r + 50, &keep, &err), SL_OK);
        cr_assert_eq(sl_worker_order_hold_cut(h, &l1, r, r + 50, &keep, &err), SL_OK);
    }
    sl_worker_server_item_t x = item(&l1, 0, 50, 10), y = item(&l0, 50, 100, 1),
                            z = item(&l0, 0, 50, 0), out;
    cr_assert_eq(sl_worker_order_hold_put(h, &x, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_put(h, &y, &err), SL_OK, "%s", err.msg);
    cr_assert_not(sl_worker_order_hold_pop(h, &out), "g 0 is still being encoded");
    cr_assert_eq(sl_worker_order_hold_put(h, &z, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.lease.order_g_plus_one, 1);
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.lease.order_g_plus_one, 2);
    cr_assert_not(sl_worker_order_hold_pop(h, &out), "split 0 may cut more; split 1 has no base");
    uint64_t n;
    cr_assert_eq(sl_worker_order_hold_end(h, &l0, &n, &err), SL_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(sl_worker_order_hold_set_base(h, &l1, 2, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.num_samples, 10);
    cr_assert_eq(out.lease.order_g_plus_one, 3);
    cr_assert_eq(out.lease.rank_plus_one, 3);
    /* l1 revoked: its held batches handed back, then forgotten */
    sl_worker_server_item_t w = item(&l1, 50, 100, 11);
    cr_assert_eq(sl_worker_order_hold_put(h, &w, &err), SL_OK, "%s", err.msg);
    sl_worker_order_hold_set_base(h, &l1, 2, &err);
    cr_assert(sl_worker_order_hold_take(h, &l1, &out));
    cr_assert_eq(out.num_samples, 11);
    cr_assert_not(sl_worker_order_hold_take(h, &l1, &out));
    cr_assert_eq(sl_worker_order_hold_count(h), 0);
    cr_assert_eq(sl_worker_order_hold_set_base(h, &l1, 2, &err), SL_ERR_NOT_FOUND);
    sl_worker_order_hold_destroy(h);
}

Test(worker_order_hold, a_dropped_batch_holds_nothing_back_before_the_split_is_read)
{
    sl_error_t err = {0};
    sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, 1);
    int l;
    sl_dpp_row_range_t todo[] = {{10, 20}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &l, 2, todo, 1, 6, &err), SL_OK, "%s", err.msg);
    bool keep;
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 0, 10, &keep, &err), SL_OK);
    cr_assert_not(keep);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 10, 20, &keep, &err), SL_OK);
    cr_assert(keep);
    sl_worker_server_item_t it = item(&l, 10, 20, 1), out;
    cr_assert_eq(sl_worker_order_hold_put(h, &it, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_worker_order_hold_pop(h, &out), "batch 1 goes while the split is still read");
    cr_assert_eq(out.lease.order_g_plus_one, 5 + 1 + 1);
    sl_worker_order_hold_destroy(h);
}

Test(worker_order_hold, refusals_name_the_split_and_rows)
{
    sl_error_t err = {0};
    cr_assert_null(sl_worker_order_hold_new(NULL, 0));
    sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, 2);
    int l;
    sl_dpp_row_range_t bad[] = {{10, 20}, {15, 30}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &l, 4, bad, 2, 0, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "todo range 1 [15, 30)"), "%s", err.msg);
    sl_dpp_row_range_t todo[] = {{10, 20}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &l, 4, todo, 1, 5, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_begin(h, &l, 4, todo, 1, 5, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 4 is held already"), "%s", err.msg);
    bool keep;
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 5, 15, &keep, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 4 batch 0 rows [5, 15) cross a todo range's boundary"), "%s",
              err.msg);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 0, 10, &keep, &err), SL_OK);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 5, 10, &keep, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "start before the previous batch's end"), "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 10, 20, &keep, &err), SL_OK);
    sl_worker_server_item_t dropped = item(&l, 0, 10, 0), other = item(&l, 10, 19, 0),
                            ok = item(&l, 10, 20, 0);
    cr_assert_eq(sl_worker_order_hold_put(h, &dropped, &err), SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "split 4 has no kept batch of rows [0, 10)"), "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_put(h, &other, &err), SL_ERR_NOT_FOUND);
    cr_assert_eq(sl_worker_order_hold_put(h, &ok, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_put(h, &ok, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 4 batch 1 put twice"), "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_set_base(h, &l, 6, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 4 given base 6 after base 4"), "%s", err.msg);
    uint64_t n;
    cr_assert_eq(sl_worker_order_hold_end(h, &l, &n, &err), SL_OK);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l, 20, 30, &keep, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "after the split was read"), "%s", err.msg);
    int none;
    cr_assert_eq(sl_worker_order_hold_cut(h, &none, 0, 1, &keep, &err), SL_ERR_NOT_FOUND);
    sl_worker_server_item_t out;
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.lease.order_g_plus_one, 4 + 1 + 1);
    sl_worker_order_hold_destroy(h);
}

enum { SPLITS = 12, MAX_BATCHES = 8 };

typedef struct split {
    int handle;
    uint32_t n;                          /* batches */
    uint64_t end[MAX_BATCHES];           /* batch k: rows [end[k-1], end[k]) */
    bool committed[MAX_BATCHES];         /* earlier: dropped by the todo */
    uint32_t cut;                        /* batches cut so far */
    bool put[MAX_BATCHES], begun, ended; /* what the run did */
    uint64_t base;
    uint32_t left; /* kept batches not yet sent */
} split_t;

/* Is every split up to p counted: read (ended) and, as a worker sends
 * SPLIT_READ only once the lease's batches are acknowledged, sent? */
static bool counted(const split_t *sp, int p)
{
    for (int q = 0; q <= p; q++)
        if (!sp[q].ended || sp[q].left) return false;
    return true;
}

/* A random run: R ranks, SPLITS splits of 1..8 batches of 1..20 rows,
 * some committed earlier; leases begun within a window of 3 past the
 * counted prefix, cuts in order, puts in any order, each base told once
 * every split before is counted (read, and its batches sent: SPLIT_READ
 * follows their acknowledgements), pops at any time. What leaves: strictly ascending g,
 * exactly the uncommitted batches, each with g = base + k, rank g mod R. */
Test(worker_order_hold, random_runs_send_every_uncommitted_batch_once_in_g_order)
{
    uint64_t seed = tu_seed("worker_order_hold random");
    uint64_t x = seed;
    for (int trial = 0; trial < 200; trial++) {
        uint32_t ranks = 1 + (uint32_t)tu_below(&x, 4);
        split_t sp[SPLITS] = {0};
        uint64_t base = 0, expect = 0;
        for (int p = 0; p < SPLITS; p++) {
            sp[p].n = 1 + (uint32_t)tu_below(&x, MAX_BATCHES);
            sp[p].base = base;
            base += sp[p].n;
            uint64_t row = 0;
            for (uint32_t k = 0; k < sp[p].n; k++) {
                row += 1 + tu_below(&x, 20);
                sp[p].end[k] = row;
                sp[p].committed[k] = tu_below(&x, 4) == 0;
                expect += !sp[p].committed[k];
                sp[p].left += !sp[p].committed[k];
            }
        }
        sl_error_t err = {0};
        sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, ranks);
        uint64_t sent = 0, last_g_plus_one = 0;
        for (int step = 0; sent < expect; step++) {
            cr_assert_lt(step, 100000, "seed %" PRIu64 " trial %d: stuck", seed, trial);
            int p = (int)tu_below(&x, SPLITS);
            split_t *s = &sp[p];
            bool prev_counted = p == 0 || counted(sp, p - 1);
            switch (tu_below(&x, 5)) {
            case 0: /* begin, within a window of 3 past the counted prefix */
                if (s->begun || (p >= 3 && !counted(sp, p - 3))) break;
                {
                    sl_dpp_row_range_t todo[MAX_BATCHES];
                    uint32_t nt = 0;
                    for (uint32_t k = 0; k < s->n; k++) {
                        if (s->committed[k]) continue;
                        uint64_t from = k ? s->end[k - 1] : 0;
                        if (nt && todo[nt - 1].to_row == from)
                            todo[nt - 1].to_row = s->end[k];
                        else
                            todo[nt++] = (sl_dpp_row_range_t){from, s->end[k]};
                    }
                    /* a base known at the grant when the split before is counted */
                    cr_assert_eq(sl_worker_order_hold_begin(h, &s->handle, (uint32_t)p, todo, nt,
                                                            prev_counted ? s->base + 1 : 0, &err),
                                 SL_OK, "%s", err.msg);
                    s->begun = true;
                }
                break;
            case 1: /* cut the next batch, or end */
                if (!s->begun || s->ended) break;
                if (s->cut < s->n) {
                    bool keep;
                    uint32_t k = s->cut;
                    cr_assert_eq(sl_worker_order_hold_cut(h, &s->handle, k ? s->end[k - 1] : 0,
                                                          s->end[k], &keep, &err),
                                 SL_OK, "%s", err.msg);
                    cr_assert_eq(keep, !s->committed[k]);
                    s->cut++;
                } else { /* read; counted once its batches are sent (counted()) */
                    uint64_t n;
                    cr_assert_eq(sl_worker_order_hold_end(h, &s->handle, &n, &err), SL_OK);
                    cr_assert_eq(n, s->n);
                    s->ended = true;
                }
                break;
            case 2: { /* put a cut, kept batch */
                if (!s->begun || !s->cut) break;
                uint32_t k = (uint32_t)tu_below(&x, s->cut);
                if (s->committed[k] || s->put[k]) break;
                sl_worker_server_item_t it =
                    item(&s->handle, k ? s->end[k - 1] : 0, s->end[k], (uint32_t)(p * 100 + k));
                cr_assert_eq(sl_worker_order_hold_put(h, &it, &err), SL_OK, "%s", err.msg);
                s->put[k] = true;
                break;
            }
            case 3: /* the base, once the split before is counted */
                if (s->begun && prev_counted) {
                    /* a lease ended and sent is forgotten: NOT_FOUND, harmless */
                    sl_err_t rc = sl_worker_order_hold_set_base(h, &s->handle, s->base, &err);
                    cr_assert(rc == SL_OK || (rc == SL_ERR_NOT_FOUND && s->ended), "%s", err.msg);
                }
                break;
            default: {
                sl_worker_server_item_t out;
                while (sl_worker_order_hold_pop(h, &out)) {
                    uint32_t q = out.num_samples / 100, k = out.num_samples % 100;
                    uint64_t g = out.lease.order_g_plus_one - 1;
                    cr_assert_eq(g, sp[q].base + k, "seed %" PRIu64 " trial %d", seed, trial);
                    cr_assert_gt(out.lease.order_g_plus_one, last_g_plus_one, "seed %" PRIu64,
                                 seed);
                    cr_assert_not(sp[q].committed[k]);
                    cr_assert_eq(out.lease.rank_plus_one, g % ranks + 1);
                    last_g_plus_one = out.lease.order_g_plus_one;
                    sp[q].left--;
                    sent++;
                }
            }
            }
        }
        cr_assert_eq(sl_worker_order_hold_count(h), 0);
        sl_worker_order_hold_destroy(h);
    }
}

/* A resumed job's lease (sl_worker_order_hold_skip): batches handed out
 * before the resume are neither numbered nor counted; a batch committed
 * in this run under an earlier lease is dropped but counted; a batch
 * across a skip boundary is refused by name, as are skip rows after the
 * first cut. */
Test(worker_order_hold, skip_rows_are_neither_numbered_nor_counted)
{
    sl_error_t err = {0};
    sl_worker_order_hold_t *h = sl_worker_order_hold_new(NULL, 2);
    int lease;
    /* 6 batches of 10 rows: [0,10) and [30,50) handed out before the
     * resume (skip), [10,20) committed in this run (todo's complement) */
    sl_dpp_row_range_t todo[] = {{20, 30}, {50, 60}}, skip[] = {{0, 10}, {30, 50}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &lease, 4, todo, 2, 11, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_skip(h, &lease, skip, 2, &err), SL_OK, "%s", err.msg);
    bool keep[6];
    for (int k = 0; k < 6; k++)
        cr_assert_eq(sl_worker_order_hold_cut(h, &lease, (uint64_t)k * 10, (uint64_t)k * 10 + 10,
                                              &keep[k], &err),
                     SL_OK, "%s", err.msg);
    cr_assert(!keep[0] && !keep[1] && keep[2] && !keep[3] && !keep[4] && keep[5]);
    cr_assert_eq(sl_worker_order_hold_skipped(h, &lease), 3);
    sl_worker_server_item_t a = item(&lease, 50, 60, 5), b = item(&lease, 20, 30, 2), out;
    cr_assert_eq(sl_worker_order_hold_put(h, &a, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_put(h, &b, &err), SL_OK, "%s", err.msg);
    uint64_t n = 0;
    cr_assert_eq(sl_worker_order_hold_end(h, &lease, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 3, "[10,20) (committed in this run), [20,30) and [50,60)");
    /* base 10: k = 1 ([20,30)) is g 11, k = 2 ([50,60)) g 12 */
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.num_samples, 2);
    cr_assert_eq(out.lease.order_g_plus_one, 12);
    cr_assert_eq(out.lease.rank_plus_one, 2);
    cr_assert(sl_worker_order_hold_pop(h, &out));
    cr_assert_eq(out.num_samples, 5);
    cr_assert_eq(out.lease.order_g_plus_one, 13);
    cr_assert_eq(out.lease.rank_plus_one, 1);
    cr_assert_not(sl_worker_order_hold_pop(h, &out));

    /* a batch across a skip boundary: the cuts disagree */
    int l2;
    sl_dpp_row_range_t all[] = {{10, 40}}, sk2[] = {{0, 10}};
    cr_assert_eq(sl_worker_order_hold_begin(h, &l2, 9, all, 1, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_skip(h, &l2, sk2, 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_skip(h, &l2, sk2, 1, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "order hold: skip rows of split 9 after skip rows");
    bool k2;
    cr_assert_eq(sl_worker_order_hold_cut(h, &l2, 0, 15, &k2, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "order hold: split 9 rows [0, 15) cross a skip range's boundary "
                              "(rows handed out before the resume): cut otherwise than the "
                              "original run's batches");
    int l3;
    cr_assert_eq(sl_worker_order_hold_begin(h, &l3, 10, all, 1, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_cut(h, &l3, 10, 20, &k2, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_skip(h, &l3, sk2, 1, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "order hold: skip rows of split 10 after its first batch");
    sl_dpp_row_range_t bad[] = {{5, 9}, {8, 12}};
    int l4;
    cr_assert_eq(sl_worker_order_hold_begin(h, &l4, 11, all, 1, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_order_hold_skip(h, &l4, bad, 2, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "order hold: lease of split 11: skip range 1 [8, 12) is empty or "
                              "out of order");
    cr_assert_eq(sl_worker_order_hold_skip(h, &err, bad, 1, &err), SL_ERR_NOT_FOUND);
    cr_assert_eq(sl_worker_order_hold_leases(h), 3);
    while (sl_worker_order_hold_take_any(h, &out))
        ;
    sl_worker_order_hold_destroy(h);
}
