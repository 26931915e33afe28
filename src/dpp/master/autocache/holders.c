/* The holder table of the autocache on workers' disks (holders.h). */
#include "dpp/master/autocache/holders.h"

#include "common/mem.h"

static uint64_t slot_of(uint64_t fp, uint32_t split, uint32_t cap)
{
    uint64_t h = (fp ^ ((uint64_t)split * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
    return (h ^ (h >> 29)) & (cap - 1);
}

mp_holder *mp_holders_find(const mp_holders *t, uint64_t fp, uint32_t split)
{
    if (t->cap == 0) return NULL;
    /* never full (at most half: put), so a free slot ends every probe */
    for (uint64_t i = slot_of(fp, split, t->cap);; i = (i + 1) & (t->cap - 1)) {
        mp_holder *h = &t->e[i];
        if (!h->used) return NULL;
        if (h->fp == fp && h->split == split) return h;
    }
}

/* Rehash into a table twice as large, leaving out the entries keep
 * refuses: the table holds what live workers hold (at most twice that,
 * and half of it free), not every split of every job the master ran. */
static bool grow(mp_holders *t, const sl_allocator_t *a, mp_holders_keep_fn keep, void *ctx)
{
    uint32_t cap = t->cap ? t->cap * 2 : 1024;
    mp_holder *e = sl_calloc(a, cap, sizeof *e);
    if (e == NULL) return false;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->e[i].used || (keep != NULL && !keep(ctx, &t->e[i]))) continue;
        n++;
        uint64_t k = slot_of(t->e[i].fp, t->e[i].split, cap);
        while (e[k].used)
            k = (k + 1) & (cap - 1);
        e[k] = t->e[i];
    }
    sl_free(a, t->e, (size_t)t->cap * sizeof *t->e);
    t->e = e;
    t->cap = cap;
    t->n = n;
    return true;
}

bool mp_holders_put(mp_holders *t, const sl_allocator_t *a, uint64_t fp, uint32_t split,
                    uint32_t worker, uint64_t incarnation, mp_holders_keep_fn keep, void *ctx)
{
    mp_holder *h = mp_holders_find(t, fp, split);
    if (h == NULL) {
        if ((uint64_t)(t->n + 1) * 2 > t->cap && !grow(t, a, keep, ctx)) return false;
        uint64_t i = slot_of(fp, split, t->cap);
        while (t->e[i].used)
            i = (i + 1) & (t->cap - 1);
        h = &t->e[i];
        t->n++;
    }
    *h = (mp_holder){
        .used = true, .fp = fp, .split = split, .worker = worker, .incarnation = incarnation};
    return true;
}

void mp_holders_remove(mp_holders *t, mp_holder *h)
{
    uint32_t i = (uint32_t)(h - t->e), mask = t->cap - 1;
    t->e[i].used = false;
    t->n--;
    for (uint32_t j = (i + 1) & mask; t->e[j].used; j = (j + 1) & mask) {
        uint32_t k = (uint32_t)slot_of(t->e[j].fp, t->e[j].split, t->cap);
        /* e[j] moves into the hole at i unless its home k lies cyclically
         * in (i, j]: then i is before its home, where a probe never looks */
        bool stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            t->e[i] = t->e[j];
            t->e[j].used = false;
            i = j;
        }
    }
}

void mp_holders_free(const sl_allocator_t *a, mp_holders *t)
{
    sl_free(a, t->e, (size_t)t->cap * sizeof *t->e);
    *t = (mp_holders){0};
}
