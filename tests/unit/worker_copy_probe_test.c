/* The worker's copy probe (dpp_cache_copy_probe, runtime/cache.c): the
 * cost of a plain copy that the autocache's compute figures leave out of
 * a fused batch's encode time. It costs 8 MiB of fresh pages and 16 MiB of
 * copies, so it runs once, and only for a worker whose figures the
 * autocache reads: a master's worker, on the fused path, of a job with
 * transforms. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "dpp/worker/runtime/worker_internal.h"

static void probe(bool master_mode, bool no_fused, uint32_t transforms, uint64_t *out)
{
    sl_pipeline_job_t job = {.num_transforms = transforms};
    sl_worker_t w = {.job = &job, .a = sl_allocator_default(), .master_mode = master_mode};
    w.o.no_fused = no_fused;
    dpp_cache_copy_probe(&w);
    cr_assert(w.copy_probed);
    *out = atomic_load(&w.copy_ps_per_byte);
    /* once: a second unit with a cache file measures nothing again */
    atomic_store(&w.copy_ps_per_byte, 12345);
    dpp_cache_copy_probe(&w);
    cr_assert_eq(atomic_load(&w.copy_ps_per_byte), 12345);
}

Test(worker_copy_probe, measures_only_what_the_autocache_reads)
{
    uint64_t ps = 0;
    probe(true, false, 2, &ps);
    /* 4 MiB copied in over 4.2 us (under 1 TB/s): at least 1 ps a byte */
    cr_assert_gt(ps, 0, "a master's fused worker with transforms measures the copy");
    probe(false, false, 2, &ps);
    cr_assert_eq(ps, 0, "a standalone worker: no autocache");
    probe(true, true, 2, &ps);
    cr_assert_eq(ps, 0, "--no-fused: no fused batches to correct");
    probe(true, false, 0, &ps);
    cr_assert_eq(ps, 0, "no transforms: a fused batch's time is all copy, counted as is");
}
