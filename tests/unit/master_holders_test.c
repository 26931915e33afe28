/* The holder table of the autocache on workers' disks
 * (src/dpp/master/autocache/holders.h): random puts, overwrites and removes checked
 * against a plain array after every step (probe runs that wrap the
 * table's end and deletions that shift entries back included), and growth
 * that leaves out the entries of processes that are gone. Randomised by
 * the test seed (SLUICE_TEST_SEED replays a run). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/autocache/holders.h"
#include "testutil.h"

static tu_alloc_t g_ta;

static void init(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_holders, .init = init);

#define KEYS 3000

/* The reference: ref[k] is key k's worker + 1 (0: absent). Keys spread
 * over 3 fingerprints so that two keys of one split differ by fp only. */
static uint32_t ref[KEYS];

static uint64_t fp_of(uint32_t k)
{
    return 0x1000 + (k % 3) * 0x9E3779B97F4A7C15ull;
}

static void check_all(const mp_holders *t)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < KEYS; k++) {
        const mp_holder *h = mp_holders_find(t, fp_of(k), k / 3);
        if (ref[k] == 0) {
            cr_assert_null(h, "key %u found after its removal", k);
        } else {
            cr_assert_not_null(h, "key %u lost", k);
            cr_assert_eq(h->worker, ref[k] - 1, "key %u: worker %u, want %u", k, h->worker,
                         ref[k] - 1);
            cr_assert_eq(h->incarnation, 77ull * ref[k]);
            n++;
        }
    }
    cr_assert_eq(t->n, n);
    cr_assert_leq((uint64_t)t->n * 2, t->cap, "more than half full");
}

Test(master_holders, random_puts_and_removes_match_a_plain_array)
{
    uint64_t rng = tu_seed("master_holders.random");
    mp_holders t = {0};
    memset(ref, 0, sizeof ref);
    for (int step = 0; step < 20000; step++) {
        uint32_t k = (uint32_t)tu_below(&rng, KEYS);
        if (tu_below(&rng, 3) > 0) {
            uint32_t w = (uint32_t)tu_below(&rng, 50);
            cr_assert(
                mp_holders_put(&t, &g_ta.base, fp_of(k), k / 3, w, 77ull * (w + 1), NULL, NULL));
            ref[k] = w + 1;
        } else {
            mp_holder *h = mp_holders_find(&t, fp_of(k), k / 3);
            cr_assert_eq(h != NULL, ref[k] != 0);
            if (h) mp_holders_remove(&t, h);
            ref[k] = 0;
        }
        if (step % 997 == 0) check_all(&t);
    }
    check_all(&t);
    cr_assert_geq(t.cap, 2048, "the table never grew (cap %u)", t.cap);
    mp_holders_free(&g_ta.base, &t);
    tu_alloc_assert_clean(&g_ta);
}

/* The home slot of (fp, split) in a table of 1024: where it lands in an
 * empty one. */
static uint32_t home_of(uint64_t fp, uint32_t split)
{
    mp_holders t = {0};
    cr_assert(mp_holders_put(&t, &g_ta.base, fp, split, 0, 1, NULL, NULL));
    cr_assert_eq(t.cap, 1024);
    uint32_t at = (uint32_t)(mp_holders_find(&t, fp, split) - t.e);
    mp_holders_free(&g_ta.base, &t);
    return at;
}

/* A probe run that wraps the table's end: keys at home in the last two
 * slots and the first two, interleaved; removing any of them keeps every
 * other one findable (the shift back across the end included). */
Test(master_holders, removing_from_a_run_that_wraps_keeps_the_rest)
{
    uint32_t keys[12], n = 0, homes[12];
    for (uint32_t s = 0; n < 12 && s < 1000000; s++) {
        uint32_t h = home_of(9, s);
        if (h >= 1022 || h <= 1) {
            homes[n] = h;
            keys[n++] = s;
        }
    }
    cr_assert_eq(n, 12);
    for (uint32_t drop = 0; drop < n; drop++) {
        mp_holders t = {0};
        for (uint32_t k = 0; k < n; k++)
            cr_assert(mp_holders_put(&t, &g_ta.base, 9, keys[k], k, 1, NULL, NULL));
        cr_assert(t.e[1023].used && t.e[0].used && t.e[5].used, "the run does not wrap");
        mp_holders_remove(&t, mp_holders_find(&t, 9, keys[drop]));
        for (uint32_t k = 0; k < n; k++) {
            const mp_holder *h = mp_holders_find(&t, 9, keys[k]);
            if (k == drop) {
                cr_assert_null(h);
            } else {
                cr_assert_not_null(h, "key %u (home %u) lost after removing key %u (home %u)", k,
                                   homes[k], drop, homes[drop]);
                cr_assert_eq(h->worker, k);
            }
        }
        cr_assert_eq(t.n, n - 1);
        mp_holders_free(&g_ta.base, &t);
    }
    tu_alloc_assert_clean(&g_ta);
}

/* Workers 0..9, of which the odd ones are gone. */
static bool even_live(void *ctx, const mp_holder *h)
{
    (void)ctx;
    return h->worker % 2 == 0;
}

Test(master_holders, growth_leaves_out_the_processes_that_are_gone)
{
    mp_holders t = {0};
    /* 512 entries fill the first table to half; the next put grows it */
    for (uint32_t s = 0; s < 512; s++)
        cr_assert(mp_holders_put(&t, &g_ta.base, 7, s, s % 10, 1, even_live, NULL));
    cr_assert_eq(t.cap, 1024);
    cr_assert_eq(t.n, 512);
    cr_assert(mp_holders_put(&t, &g_ta.base, 7, 512, 2, 1, even_live, NULL));
    cr_assert_eq(t.cap, 2048);
    /* the odd workers' 256 entries went; the even ones' 256 and the new one stay */
    cr_assert_eq(t.n, 257);
    for (uint32_t s = 0; s < 512; s++)
        cr_assert_eq(mp_holders_find(&t, 7, s) != NULL, (s % 10) % 2 == 0, "split %u", s);
    cr_assert_not_null(mp_holders_find(&t, 7, 512));
    /* an overwrite is no new entry */
    cr_assert(mp_holders_put(&t, &g_ta.base, 7, 512, 4, 9, even_live, NULL));
    cr_assert_eq(t.n, 257);
    cr_assert_eq(mp_holders_find(&t, 7, 512)->worker, 4);
    cr_assert_eq(mp_holders_find(&t, 7, 512)->incarnation, 9);
    mp_holders_free(&g_ta.base, &t);
    tu_alloc_assert_clean(&g_ta);
}
