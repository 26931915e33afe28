/* Record ages in fixed buckets (age.h). */
#include "common/age.h"

#include <time.h>

const uint64_t SL_AGE_BOUNDS_MS[SL_AGE_BUCKETS - 1] = SL_AGE_BOUNDS_MS_INIT;

int64_t sl_age_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint32_t sl_age_bucket(uint64_t ms)
{
    uint32_t b = 0;
    while (b < SL_AGE_BUCKETS - 1 && ms > SL_AGE_BOUNDS_MS[b])
        b++;
    return b;
}

void sl_age_hist_add(sl_age_hist_t *h, const int64_t *times_ms, uint32_t n, int64_t now_ms)
{
    /* counted locally first: one atomic add per bucket touched, not per record */
    uint64_t counts[SL_AGE_BUCKETS] = {0}, k = 0, sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (times_ms[i] < 0) continue; /* no CreateTime */
        uint64_t age = now_ms > times_ms[i] ? (uint64_t)(now_ms - times_ms[i]) : 0;
        counts[sl_age_bucket(age)]++;
        k++;
        sum += age;
    }
    if (!k) return;
    for (uint32_t b = 0; b < SL_AGE_BUCKETS; b++)
        if (counts[b]) atomic_fetch_add(&h->buckets[b], counts[b]);
    atomic_fetch_add(&h->count, k);
    atomic_fetch_add(&h->sum_ms, sum);
}

void sl_age_hist_read(const sl_age_hist_t *h, sl_age_counts_t *out)
{
    sl_age_hist_t *m = (sl_age_hist_t *)h; /* atomic loads only */
    for (uint32_t b = 0; b < SL_AGE_BUCKETS; b++)
        out->buckets[b] = atomic_load(&m->buckets[b]);
    out->count = atomic_load(&m->count);
    out->sum_ms = atomic_load(&m->sum_ms);
}
