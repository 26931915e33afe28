/* The shared-memory frame heap (common/shm_heap.h): first fit and
 * coalescing, full -> NULL, the high-water mark and peak, pages mapped in
 * when a block first reaches them and none beyond, blocks that never overlap under random
 * alloc/free (checked against a shadow map), the frame allocator's
 * fallback, and the memfd's seals as a reader sees them. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/shm_heap.h"
#include "testutil.h"

#define G SL_SHM_HEAP_GRANULE

static sl_shm_heap_t *heap(uint64_t bytes)
{
    sl_shm_heap_t *h = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("shm-heap-test", bytes, NULL, &h, &err), SL_OK, "%s", err.msg);
    return h;
}

static uint64_t off(const sl_shm_heap_t *h, const void *p)
{
    uint64_t o = UINT64_MAX;
    cr_assert(sl_shm_heap_offset(h, p, &o));
    return o;
}

Test(shm_heap, first_fit_full_and_coalescing)
{
    sl_shm_heap_t *h = heap(8 * G);
    cr_assert_eq(sl_shm_heap_size(h), 8 * G);
    void *a = sl_shm_heap_alloc(h, 2 * G);     /* [0, 2) */
    void *b = sl_shm_heap_alloc(h, G + 1);     /* [2, 4): rounded up to whole granules */
    void *c = sl_shm_heap_alloc(h, 3 * G - 5); /* [4, 7) */
    cr_assert_eq(off(h, a), 0);
    cr_assert_eq(off(h, b), 2 * G);
    cr_assert_eq(off(h, c), 4 * G);
    cr_assert_null(sl_shm_heap_alloc(h, 2 * G), "one granule is left: 2 do not fit");
    void *d = sl_shm_heap_alloc(h, 1);
    cr_assert_eq(off(h, d), 7 * G);
    cr_assert_null(sl_shm_heap_alloc(h, 1), "full");
    sl_shm_heap_stats_t st;
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.used, 8 * G);
    cr_assert_eq(st.blocks, 4);
    cr_assert_eq(st.allocs, 4);
    /* free a and c: two holes of 2 and 3; 3 granules fit only in c's */
    sl_shm_heap_free(h, a);
    sl_shm_heap_free(h, c);
    void *e = sl_shm_heap_alloc(h, 3 * G);
    cr_assert_eq(off(h, e), 4 * G);
    sl_shm_heap_free(h, e);
    /* b freed between the two holes: they coalesce into [0, 7) */
    sl_shm_heap_free(h, b);
    void *f = sl_shm_heap_alloc(h, 7 * G);
    cr_assert_eq(off(h, f), 0);
    sl_shm_heap_free(h, f);
    sl_shm_heap_free(h, d);
    void *all = sl_shm_heap_alloc(h, 8 * G);
    cr_assert_eq(off(h, all), 0, "everything coalesced back into one extent");
    /* a pointer that is no live block's start is ignored */
    sl_shm_heap_free(h, (uint8_t *)all + G);
    sl_shm_heap_free(h, NULL);
    int x;
    sl_shm_heap_free(h, &x);
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.blocks, 1);
    sl_shm_heap_free(h, all);
    sl_shm_heap_free(h, all); /* twice: ignored */
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.blocks, 0);
    cr_assert_eq(st.used, 0);
    cr_assert_null(sl_shm_heap_alloc(h, 0));
    cr_assert_null(sl_shm_heap_alloc(h, 8 * G + 1));
    sl_shm_heap_destroy(h);
    sl_shm_heap_destroy(NULL);
}

/* Resident pages of [p, p + n granules) of the mapping, from mincore. */
static uint64_t resident(const void *p, uint64_t n)
{
    unsigned char v[64];
    cr_assert_leq(n, sizeof v);
    cr_assert_eq(mincore((void *)p, n * G, v), 0);
    uint64_t r = 0;
    for (uint64_t i = 0; i < n; i++)
        r += v[i] & 1;
    return r;
}

Test(shm_heap, high_water_peak_and_populate)
{
    /* does this kernel populate on request (Linux 5.14 on)? */
    void *probe = mmap(NULL, G, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(probe, MAP_FAILED);
#ifdef MADV_POPULATE_WRITE
    bool populates = madvise(probe, G, MADV_POPULATE_WRITE) == 0;
#else
    bool populates = madvise(probe, G, 23) == 0;
#endif
    munmap(probe, G);
    sl_shm_heap_t *h = heap(16 * G);
    uint8_t *base = sl_shm_heap_alloc(h, 1); /* [0, 1): the mapping's start */
    cr_assert_eq(off(h, base), 0);
    sl_shm_heap_stats_t st;
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.high_water, G);
    cr_assert_eq(st.peak, G);
    if (populates) cr_assert_eq(resident(base, 16), 1);
    void *a = sl_shm_heap_alloc(h, 3 * G); /* [1, 4) */
    cr_assert_eq(off(h, a), G);
    if (populates) cr_assert_eq(resident(base, 16), 4, "the two blocks' pages mapped in, no more");
    sl_shm_heap_free(h, a);
    void *b = sl_shm_heap_alloc(h, 2 * G); /* [1, 3): below the high-water mark */
    cr_assert_eq(off(h, b), G);
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.high_water, 4 * G, "a freed block's room reused: no higher");
    cr_assert_eq(st.peak, 4 * G);
    cr_assert_eq(st.used, 3 * G);
    void *c = sl_shm_heap_alloc(h, 4 * G); /* [3, 7): one granule below the mark, 3 above */
    cr_assert_eq(off(h, c), 3 * G);
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.high_water, 7 * G);
    cr_assert_eq(st.peak, 7 * G);
    if (populates) cr_assert_eq(resident(base, 16), 7);
    sl_shm_heap_free(h, b);
    sl_shm_heap_free(h, c);
    sl_shm_heap_free(h, base);
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.used, 0);
    cr_assert_eq(st.high_water, 7 * G, "a mark, not a level");
    cr_assert_eq(st.peak, 7 * G);
    sl_shm_heap_destroy(h);
}

Test(shm_heap, bad_sizes)
{
    sl_shm_heap_t *h = (sl_shm_heap_t *)1;
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("x", 0, NULL, &h, &err), SL_ERR_INVALID);
    cr_assert_null(h);
    cr_assert(strstr(err.msg, "shared-memory heap: 0 bytes"), "%s", err.msg);
    cr_assert_eq(sl_shm_heap_new("x", (1ull << 40) + 1, NULL, &h, &err), SL_ERR_INVALID);
}

/* Random allocs and frees against a shadow map of granules: no block
 * overlaps another, each keeps its bytes, and the books agree. */
Test(shm_heap, random_blocks_never_overlap)
{
    uint64_t rng = tu_seed("shm_heap.random_blocks_never_overlap");
    const uint64_t N = 256;
    sl_shm_heap_t *h = heap(N * G);
    int32_t shadow[256];
    for (uint64_t i = 0; i < N; i++)
        shadow[i] = -1;
    enum { MAXB = 64 };
    void *blk[MAXB] = {0};
    size_t len[MAXB] = {0};
    uint64_t live = 0;
    for (int step = 0; step < 20000; step++) {
        int k = (int)tu_below(&rng, MAXB);
        if (blk[k]) {
            /* its bytes are still its own */
            uint8_t *p = blk[k];
            for (size_t i = 0; i < len[k]; i += 997)
                cr_assert_eq(p[i], (uint8_t)k, "block %d byte %zu overwritten", k, i);
            uint64_t o = off(h, p) / G;
            for (uint64_t g = o; g < o + (len[k] + G - 1) / G; g++)
                shadow[g] = -1;
            sl_shm_heap_free(h, p);
            live -= (len[k] + G - 1) / G;
            blk[k] = NULL;
            continue;
        }
        size_t n = 1 + tu_below(&rng, 12 * G);
        uint8_t *p = sl_shm_heap_alloc(h, n);
        if (!p) {
            /* full only when no run of free granules is long enough */
            uint64_t need = (n + G - 1) / G, run = 0, best = 0;
            for (uint64_t g = 0; g < N; g++) {
                run = shadow[g] < 0 ? run + 1 : 0;
                if (run > best) best = run;
            }
            cr_assert_lt(best, need, "alloc of %zu failed with a free run of %" PRIu64, n, best);
            continue;
        }
        uint64_t o = off(h, p);
        cr_assert_eq(o % G, 0);
        for (uint64_t g = o / G; g < o / G + (n + G - 1) / G; g++) {
            cr_assert_eq(shadow[g], -1, "granule %" PRIu64 " given twice", g);
            shadow[g] = k;
        }
        memset(p, k, n);
        blk[k] = p;
        len[k] = n;
        live += (n + G - 1) / G;
        sl_shm_heap_stats_t st;
        sl_shm_heap_stats(h, &st);
        cr_assert_eq(st.used, live * G);
    }
    for (int k = 0; k < MAXB; k++)
        sl_shm_heap_free(h, blk[k]);
    void *all = sl_shm_heap_alloc(h, N * G);
    cr_assert_not_null(all, "everything free again coalesces into one extent");
    sl_shm_heap_free(h, all);
    sl_shm_heap_destroy(h);
}

/* A reader's mapping of the memfd (what a trainer gets) sees the writes;
 * the seals forbid shrinking, growing and new seals. */
Test(shm_heap, sealed_memfd_shared_with_a_reader)
{
    sl_shm_heap_t *h = heap(4 * G);
    int fd = sl_shm_heap_fd(h);
    int seals = fcntl(fd, F_GET_SEALS);
    cr_assert(seals & F_SEAL_SHRINK);
    cr_assert(seals & F_SEAL_GROW);
    cr_assert(seals & F_SEAL_SEAL);
    cr_assert_neq(ftruncate(fd, G), 0, "shrinking a sealed memfd must fail");
    cr_assert_neq(ftruncate(fd, 8 * G), 0, "growing it too");
    cr_assert_neq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0, "no seal after F_SEAL_SEAL");
    cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    const uint8_t *r = mmap(NULL, 4 * G, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(r, MAP_FAILED);
    uint8_t *p = sl_shm_heap_alloc(h, 100);
    uint8_t *q = sl_shm_heap_alloc(h, 100);
    memcpy(p, "frame one", 10);
    memcpy(q, "frame two", 10);
    cr_assert_str_eq((const char *)r + off(h, p), "frame one");
    cr_assert_str_eq((const char *)r + off(h, q), "frame two");
    munmap((void *)r, 4 * G);
    sl_shm_heap_free(h, p);
    sl_shm_heap_free(h, q);
    sl_shm_heap_destroy(h);
}

/* The frame allocator: the heap while it has room, then the fallback
 * (counted); each block freed where it came from. */
Test(shm_heap, frame_allocator_falls_back_when_full)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    sl_shm_heap_t *h = heap(2 * G);
    const sl_allocator_t *fa = sl_shm_heap_allocator(h, &ta.base);
    void *a = sl_alloc_aligned(fa, G, SL_ALIGN);
    void *b = sl_alloc_aligned(fa, G, SL_ALIGN);
    void *c = sl_alloc_aligned(fa, G, SL_ALIGN); /* full: the fallback's */
    uint64_t o;
    cr_assert(sl_shm_heap_offset(h, a, &o));
    cr_assert(sl_shm_heap_offset(h, b, &o));
    cr_assert_not(sl_shm_heap_offset(h, c, &o));
    sl_shm_heap_stats_t st;
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.fallbacks, 1);
    cr_assert_eq(st.blocks, 2);
    sl_free(fa, a, G);
    sl_free(fa, c, G);
    sl_free(fa, b, G);
    sl_shm_heap_stats(h, &st);
    cr_assert_eq(st.blocks, 0);
    tu_alloc_assert_clean(&ta);
    sl_shm_heap_destroy(h);
}
