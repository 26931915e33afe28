/* The frame heap in shared memory (shm_heap.h): a sealed memfd mapping and
 * a first-fit allocator over it, its books in private memory. */
#include "common/shm_heap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/lock.h"

#define MAX_BYTES (1ull << 40)

#ifdef MADV_POPULATE_WRITE
#define POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define POPULATE_WRITE 23 /* Linux 5.14's value, for older headers */
#endif

/* A run of free granules [at, at + n). */
typedef struct extent {
    uint64_t at, n;
} extent_t;

struct sl_shm_heap {
    const sl_allocator_t *a;
    int fd;
    uint8_t *base;
    uint64_t granules;
    sl_mutex_t mu;
    /* the free extents, sorted by at, never adjacent (coalesced) */
    extent_t *ext;
    uint64_t next, cap;
    /* size in granules of the live block starting at each granule; 0: none */
    uint32_t *live;
    uint64_t blocks, used, allocs;
    /* one past the highest granule ever handed out: every page below it
     * has been touched (a fault each, the first time), none above */
    uint64_t top;
    uint64_t peak; /* the most bytes in live blocks at once */
    _Atomic uint64_t fallbacks;
    /* sl_shm_heap_allocator's */
    sl_allocator_t frame_a;
    const sl_allocator_t *fallback;
};

sl_err_t sl_shm_heap_new(const char *name, uint64_t bytes, const sl_allocator_t *a,
                         sl_shm_heap_t **out, sl_error_t *err)
{
    *out = NULL;
    if (bytes == 0 || bytes > MAX_BYTES)
        return sl_error_set(err, SL_ERR_INVALID, "shared-memory heap: %llu bytes (1 byte to 1 TiB)",
                            (unsigned long long)bytes);
    uint64_t granules = (bytes + SL_SHM_HEAP_GRANULE - 1) / SL_SHM_HEAP_GRANULE;
    uint64_t size = granules * SL_SHM_HEAP_GRANULE;
    sl_shm_heap_t *h = sl_calloc(a, 1, sizeof *h);
    uint32_t *live = h ? sl_calloc(a, granules, sizeof *live) : NULL;
    extent_t *ext = live ? sl_calloc(a, 16, sizeof *ext) : NULL;
    if (!ext) {
        if (live) sl_free(a, live, granules * sizeof *live);
        if (h) sl_free(a, h, sizeof *h);
        return sl_error_set(err, SL_ERR_NOMEM, "shared-memory heap: out of memory");
    }
    h->a = a;
    h->granules = granules;
    h->live = live;
    h->ext = ext;
    h->cap = 16;
    h->ext[0] = (extent_t){0, granules};
    h->next = 1;
    h->base = MAP_FAILED;
    const char *what = "memfd_create";
    h->fd = memfd_create(name ? name : "sluice-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (h->fd >= 0) {
        what = "ftruncate";
        if (ftruncate(h->fd, (off_t)size) == 0) {
            what = "F_ADD_SEALS";
            if (fcntl(h->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
                what = "mmap";
                h->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
            }
        }
    }
    if (h->base == MAP_FAILED) {
        int e = errno;
        if (h->fd >= 0) close(h->fd);
        sl_free(a, ext, 16 * sizeof *ext);
        sl_free(a, live, granules * sizeof *live);
        sl_free(a, h, sizeof *h);
        return sl_error_set(err, SL_ERR_IO, "shared-memory heap of %llu bytes: %s: %s",
                            (unsigned long long)size, what, strerror(e));
    }
    sl_mutex_init(&h->mu);
    *out = h;
    return SL_OK;
}

void sl_shm_heap_destroy(sl_shm_heap_t *h)
{
    if (!h) return;
    munmap(h->base, h->granules * SL_SHM_HEAP_GRANULE);
    close(h->fd);
    sl_mutex_destroy(&h->mu);
    sl_free(h->a, h->ext, h->cap * sizeof *h->ext);
    sl_free(h->a, h->live, h->granules * sizeof *h->live);
    sl_free(h->a, h, sizeof *h);
}

void *sl_shm_heap_alloc(sl_shm_heap_t *h, size_t size)
{
    if (size == 0 || size > h->granules * SL_SHM_HEAP_GRANULE) return NULL;
    uint64_t n = (size + SL_SHM_HEAP_GRANULE - 1) / SL_SHM_HEAP_GRANULE;
    if (n > UINT32_MAX) return NULL;
    sl_mutex_lock(&h->mu);
    void *p = NULL;
    uint64_t fresh = 0, fresh_end = 0; /* granules never handed out before */
    /* A free may split nothing but add one extent: keep room for one per
     * live block and one more, so that free never has to allocate. */
    if (h->blocks + 2 > h->cap) {
        uint64_t cap = h->cap * 2;
        extent_t *e = sl_alloc(h->a, cap * sizeof *e);
        if (!e) goto out;
        memcpy(e, h->ext, h->next * sizeof *e);
        sl_free(h->a, h->ext, h->cap * sizeof *h->ext);
        h->ext = e;
        h->cap = cap;
    }
    for (uint64_t i = 0; i < h->next; i++) {
        extent_t *e = &h->ext[i];
        if (e->n < n) continue;
        uint64_t at = e->at;
        e->at += n;
        e->n -= n;
        if (e->n == 0) {
            memmove(e, e + 1, (h->next - i - 1) * sizeof *e);
            h->next--;
        }
        h->live[at] = (uint32_t)n;
        if (at + n > h->top) {
            fresh = at > h->top ? at : h->top;
            fresh_end = at + n;
            h->top = at + n;
        }
        h->blocks++;
        h->used += n * SL_SHM_HEAP_GRANULE;
        if (h->used > h->peak) h->peak = h->used;
        h->allocs++;
        p = h->base + at * SL_SHM_HEAP_GRANULE;
        break;
    }
out:
    sl_mutex_unlock(&h->mu);
    /* Pages never touched yet: map them in one call rather than a page
     * fault each as the frame is written (a shared-memory page costs its
     * zeroing either way; the faults' entries and exits are saved). Only
     * what this block uses, so the heap costs what the frames in flight
     * need, never its whole size. A kernel without MADV_POPULATE_WRITE
     * (before 5.14) says EINVAL: the pages fault in as they are written. */
    if (fresh_end > fresh)
        (void)madvise(h->base + fresh * SL_SHM_HEAP_GRANULE,
                      (fresh_end - fresh) * SL_SHM_HEAP_GRANULE, POPULATE_WRITE);
    return p;
}

void sl_shm_heap_free(sl_shm_heap_t *h, void *p)
{
    uint64_t off;
    if (!sl_shm_heap_offset(h, p, &off) || off % SL_SHM_HEAP_GRANULE) return;
    uint64_t at = off / SL_SHM_HEAP_GRANULE;
    sl_mutex_lock(&h->mu);
    uint64_t n = h->live[at];
    if (n == 0) { /* not a live block: nothing to give back */
        sl_mutex_unlock(&h->mu);
        return;
    }
    h->live[at] = 0;
    h->blocks--;
    h->used -= n * SL_SHM_HEAP_GRANULE;
    /* the first extent after the block */
    uint64_t lo = 0, hi = h->next;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (h->ext[mid].at < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool left = lo > 0 && h->ext[lo - 1].at + h->ext[lo - 1].n == at;
    bool right = lo < h->next && h->ext[lo].at == at + n;
    if (left && right) {
        h->ext[lo - 1].n += n + h->ext[lo].n;
        memmove(h->ext + lo, h->ext + lo + 1, (h->next - lo - 1) * sizeof *h->ext);
        h->next--;
    } else if (left) {
        h->ext[lo - 1].n += n;
    } else if (right) {
        h->ext[lo].at = at;
        h->ext[lo].n += n;
    } else { /* room is kept by alloc (cap >= blocks + 2) */
        memmove(h->ext + lo + 1, h->ext + lo, (h->next - lo) * sizeof *h->ext);
        h->ext[lo] = (extent_t){at, n};
        h->next++;
    }
    sl_mutex_unlock(&h->mu);
}

bool sl_shm_heap_offset(const sl_shm_heap_t *h, const void *p, uint64_t *offset)
{
    if (!h || !p) return false;
    uintptr_t b = (uintptr_t)h->base, q = (uintptr_t)p;
    if (q < b || q - b >= h->granules * SL_SHM_HEAP_GRANULE) return false;
    *offset = q - b;
    return true;
}

int sl_shm_heap_fd(const sl_shm_heap_t *h)
{
    return h->fd;
}

uint64_t sl_shm_heap_size(const sl_shm_heap_t *h)
{
    return h->granules * SL_SHM_HEAP_GRANULE;
}

void sl_shm_heap_stats(sl_shm_heap_t *h, sl_shm_heap_stats_t *out)
{
    sl_mutex_lock(&h->mu);
    *out = (sl_shm_heap_stats_t){.capacity = h->granules * SL_SHM_HEAP_GRANULE,
                                 .used = h->used,
                                 .blocks = h->blocks,
                                 .allocs = h->allocs,
                                 .high_water = h->top * SL_SHM_HEAP_GRANULE,
                                 .peak = h->peak,
                                 .fallbacks = atomic_load(&h->fallbacks)};
    sl_mutex_unlock(&h->mu);
}

static void *frame_alloc(void *ctx, size_t size, size_t align)
{
    sl_shm_heap_t *h = ctx;
    void *p = align <= SL_SHM_HEAP_GRANULE && size > 0 ? sl_shm_heap_alloc(h, size) : NULL;
    if (p) return p;
    atomic_fetch_add(&h->fallbacks, 1);
    return h->fallback->alloc(h->fallback->ctx, size, align);
}

static void frame_free(void *ctx, void *p, size_t size)
{
    sl_shm_heap_t *h = ctx;
    uint64_t off;
    if (sl_shm_heap_offset(h, p, &off))
        sl_shm_heap_free(h, p);
    else
        h->fallback->free(h->fallback->ctx, p, size);
}

const sl_allocator_t *sl_shm_heap_allocator(sl_shm_heap_t *h, const sl_allocator_t *fallback)
{
    h->fallback = fallback ? fallback : sl_allocator_default();
    h->frame_a = (sl_allocator_t){.alloc = frame_alloc, .free = frame_free, .ctx = h};
    return &h->frame_a;
}
