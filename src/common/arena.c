/* Arena (pool) allocator for per-batch buffers: bump allocation of 64-byte
 * aligned blocks from chunks, everything released in one call. */
#include "sluice/alloc.h"

#include <string.h>

typedef struct chunk {
    struct chunk *next;
    size_t size; /* bytes of data[] */
    size_t used;
    _Alignas(SL_ALIGN) unsigned char data[];
} chunk_t;

struct sl_arena {
    const sl_allocator_t *allocator;
    size_t chunk_size;
    size_t footprint;
    chunk_t *head; /* current chunk; older ones follow */
};

sl_arena_t *sl_arena_new(const sl_allocator_t *a, size_t chunk_size)
{
    if (a == NULL) a = sl_allocator_default();
    sl_arena_t *arena = sl_alloc(a, sizeof *arena);
    if (arena == NULL) return NULL;
    arena->allocator = a;
    arena->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    arena->footprint = 0;
    arena->head = NULL;
    return arena;
}

static chunk_t *chunk_new(sl_arena_t *arena, size_t min_size)
{
    size_t size = min_size > arena->chunk_size ? min_size : arena->chunk_size;
    if (size > SIZE_MAX - sizeof(chunk_t)) return NULL;
    chunk_t *c = sl_alloc_aligned(arena->allocator, sizeof(chunk_t) + size, SL_ALIGN);
    if (c == NULL) return NULL;
    c->size = size;
    c->used = 0;
    arena->footprint += sizeof(chunk_t) + size;
    return c;
}

void *sl_arena_alloc(sl_arena_t *arena, size_t size)
{
    size_t need = sl_align_up(size == 0 ? 1 : size);
    if (need == SIZE_MAX) return NULL;
    chunk_t *c = arena->head;
    if (c != NULL && c->size - c->used >= need) {
        void *p = c->data + c->used;
        c->used += need;
        return p;
    }
    chunk_t *fresh = chunk_new(arena, need);
    if (fresh == NULL) return NULL;
    fresh->used = need;
    if (c != NULL && need > arena->chunk_size / 2) {
        /* A large block gets its own chunk behind the current one, so the
         * current chunk's free tail stays usable for small blocks. */
        fresh->next = c->next;
        c->next = fresh;
    } else {
        fresh->next = c;
        arena->head = fresh;
    }
    return fresh->data;
}

void *sl_arena_calloc(sl_arena_t *arena, size_t count, size_t size)
{
    size_t total = sl_mul_size(count, size);
    void *p = sl_arena_alloc(arena, total);
    if (p != NULL) memset(p, 0, total);
    return p;
}

char *sl_arena_strdup(sl_arena_t *arena, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = sl_arena_alloc(arena, n);
    if (p != NULL) memcpy(p, s, n);
    return p;
}

size_t sl_arena_footprint(const sl_arena_t *arena)
{
    return arena == NULL ? 0 : arena->footprint;
}

static void free_chunks(sl_arena_t *arena, chunk_t *c)
{
    while (c != NULL) {
        chunk_t *next = c->next;
        arena->footprint -= sizeof(chunk_t) + c->size;
        sl_free(arena->allocator, c, sizeof(chunk_t) + c->size);
        c = next;
    }
}

void sl_arena_reset(sl_arena_t *arena)
{
    if (arena == NULL || arena->head == NULL) return;
    /* Keep one chunk of the standard size, if any, for the next batch. */
    chunk_t *keep = NULL, **link = &arena->head;
    while (*link != NULL) {
        if (keep == NULL && (*link)->size == arena->chunk_size) {
            keep = *link;
            *link = keep->next;
            break;
        }
        link = &(*link)->next;
    }
    free_chunks(arena, arena->head);
    arena->head = keep;
    if (keep != NULL) {
        keep->next = NULL;
        keep->used = 0;
    }
}

void sl_arena_destroy(sl_arena_t *arena)
{
    if (arena == NULL) return;
    free_chunks(arena, arena->head);
    sl_free(arena->allocator, arena, sizeof *arena);
}
