/* The autocache's decision (src/dpp/master/autocache/autocache.h): Cachew's rule as
 * a pure function of measured figures. */
#include <criterion/criterion.h>

#include "dpp/master/autocache/autocache.h"

/* 1000 samples costing 10 ms to compute (10 us each), 1000 bytes each. */
static sl_master_autocache_figures_t figs(double read_bps)
{
    return (sl_master_autocache_figures_t){.compute_ns = 10000000,
                                           .computed_samples = 1000,
                                           .computed_bytes = 1000000,
                                           .read_bytes_per_s = read_bps,
                                           .min_samples = 500};
}

Test(autocache, chosen_when_reading_wins_by_the_margin)
{
    /* 1 GB/s: 1 us a sample against 10 us */
    sl_master_autocache_figures_t f = figs(1e9);
    sl_master_autocache_decision_t d = sl_master_autocache_decide(&f);
    cr_assert_eq(d.state, SL_MASTER_AUTOCACHE_CHOSEN);
    cr_assert_float_eq(d.compute_us_per_sample, 10.0, 1e-9);
    cr_assert_float_eq(d.cache_us_per_sample, 1.0, 1e-9);
    cr_assert_eq(d.samples, 1000);
    cr_assert_float_eq(d.read_mb_per_s, 1000.0, 1e-9);
}

Test(autocache, declined_when_computing_is_as_cheap)
{
    /* 150 MB/s: 6.67 us a sample; 6.67 * 1.5 = 10 is still chosen, 7 us is not */
    cr_assert_float_eq(SL_MASTER_AUTOCACHE_MARGIN, 1.5, 0);
    sl_master_autocache_figures_t f = figs(150e6);
    cr_assert_eq(sl_master_autocache_decide(&f).state, SL_MASTER_AUTOCACHE_CHOSEN);
    f.read_bytes_per_s = 1e9 / 7.0;
    sl_master_autocache_decision_t d = sl_master_autocache_decide(&f);
    cr_assert_eq(d.state, SL_MASTER_AUTOCACHE_DECLINED);
    cr_assert_float_eq(d.cache_us_per_sample, 7.0, 1e-9);
    f.read_bytes_per_s = 1e8; /* 10 us: no gain */
    cr_assert_eq(sl_master_autocache_decide(&f).state, SL_MASTER_AUTOCACHE_DECLINED);
}

Test(autocache, measuring_until_enough_samples_and_a_throughput)
{
    sl_master_autocache_figures_t f = figs(1e9);
    f.min_samples = 1001;
    sl_master_autocache_decision_t d = sl_master_autocache_decide(&f);
    cr_assert_eq(d.state, SL_MASTER_AUTOCACHE_MEASURING);
    cr_assert_float_eq(d.compute_us_per_sample, 10.0, 1e-9); /* the figures so far */
    f = figs(0);
    cr_assert_eq(sl_master_autocache_decide(&f).state, SL_MASTER_AUTOCACHE_MEASURING);
    f = figs(1e9);
    f.computed_samples = 0;
    cr_assert_eq(sl_master_autocache_decide(&f).state, SL_MASTER_AUTOCACHE_MEASURING);
    f.min_samples = 0; /* taken as 1 */
    cr_assert_eq(sl_master_autocache_decide(&f).state, SL_MASTER_AUTOCACHE_MEASURING);
}

Test(autocache, the_slower_of_the_directory_and_the_source_rate)
{
    /* the source reads at 200 MB/s (5 ns a byte): 5 us a sample, slower
     * than the directory's 1 GB/s, so 5 * 1.5 = 7.5 <= 10: chosen */
    sl_master_autocache_figures_t f = figs(1e9);
    f.source_ns = 5000000;
    f.source_bytes = 1000000;
    sl_master_autocache_decision_t d = sl_master_autocache_decide(&f);
    cr_assert_eq(d.state, SL_MASTER_AUTOCACHE_CHOSEN);
    cr_assert_float_eq(d.cache_us_per_sample, 5.0, 1e-9);
    cr_assert_float_eq(d.source_mb_per_s, 200.0, 1e-9);
    /* at 143 MB/s (7 ns a byte) it is not worth it */
    f.source_ns = 7000000;
    d = sl_master_autocache_decide(&f);
    cr_assert_eq(d.state, SL_MASTER_AUTOCACHE_DECLINED);
    cr_assert_float_eq(d.cache_us_per_sample, 7.0, 1e-9);
    /* a source faster than the directory: the directory's rate counts */
    f.source_ns = 100000;
    cr_assert_float_eq(sl_master_autocache_decide(&f).cache_us_per_sample, 1.0, 1e-9);
}

Test(autocache, state_names)
{
    cr_assert_str_eq(sl_master_autocache_state_name(SL_MASTER_AUTOCACHE_OFF), "off");
    cr_assert_str_eq(sl_master_autocache_state_name(SL_MASTER_AUTOCACHE_MEASURING), "measuring");
    cr_assert_str_eq(sl_master_autocache_state_name(SL_MASTER_AUTOCACHE_CHOSEN), "chosen");
    cr_assert_str_eq(sl_master_autocache_state_name(SL_MASTER_AUTOCACHE_DECLINED), "declined");
}
