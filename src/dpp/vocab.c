/* Vocabularies of map_vocab: a file of ids, one per line, loaded once at
 * plan time into an open-addressing table (id -> line number). Lookups run
 * per id on the transform hot path: linear probing over a power-of-two
 * table at most half full, so a miss ends within a few slots on average. */
#include "dpp/plan_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

typedef struct vocab_slot {
    int64_t id;
    int64_t index; /* -1: empty */
} vocab_slot_t;

struct dpp_vocab {
    const sl_allocator_t *a;
    vocab_slot_t *slots;
    uint64_t mask; /* slots - 1 */
    uint64_t size; /* ids held */
};

static uint64_t slot_of(int64_t id, uint64_t mask)
{
    return XXH3_64bits(&id, sizeof id) & mask;
}

void dpp_vocab_destroy(dpp_vocab_t *v)
{
    if (v == NULL) return;
    if (v->slots != NULL) sl_free(v->a, v->slots, (v->mask + 1) * sizeof(vocab_slot_t));
    sl_free(v->a, v, sizeof *v);
}

uint64_t dpp_vocab_size(const dpp_vocab_t *v)
{
    return v->size;
}

int64_t dpp_vocab_lookup(const dpp_vocab_t *v, int64_t id, int64_t def)
{
    for (uint64_t s = slot_of(id, v->mask);; s = (s + 1) & v->mask) {
        const vocab_slot_t *e = &v->slots[s];
        if (e->index < 0) return def;
        if (e->id == id) return e->index;
    }
}

/* Insert id with index; @return the index already held by id, or -1. */
static int64_t insert(dpp_vocab_t *v, int64_t id, int64_t index)
{
    for (uint64_t s = slot_of(id, v->mask);; s = (s + 1) & v->mask) {
        vocab_slot_t *e = &v->slots[s];
        if (e->index < 0) {
            e->id = id;
            e->index = index;
            v->size++;
            return -1;
        }
        if (e->id == id) return e->index;
    }
}

static bool grow(dpp_vocab_t *v)
{
    uint64_t old_n = v->mask + 1, n = old_n * 2;
    vocab_slot_t *old = v->slots;
    vocab_slot_t *slots = sl_alloc(v->a, sl_mul_size(n, sizeof *slots));
    if (slots == NULL) return false;
    for (uint64_t i = 0; i < n; i++) slots[i].index = -1;
    v->slots = slots;
    v->mask = n - 1;
    v->size = 0;
    for (uint64_t i = 0; i < old_n; i++)
        if (old[i].index >= 0) insert(v, old[i].id, old[i].index);
    sl_free(v->a, old, old_n * sizeof *old);
    return true;
}

dpp_vocab_t *dpp_vocab_load(const char *file, const sl_allocator_t *a, uint64_t max_entries,
                            const char *path, sl_dpp_problems_t *problems)
{
    FILE *f = fopen(file, "r");
    if (f == NULL) {
        sl_dpp_problems_add(problems, "%s.file: cannot open vocabulary '%s': %s", path, file,
                            strerror(errno));
        return NULL;
    }
    dpp_vocab_t *v = sl_calloc(a, 1, sizeof *v);
    if (v != NULL) {
        v->a = a;
        v->mask = 63;
        v->slots = sl_alloc(a, 64 * sizeof(vocab_slot_t));
        if (v->slots != NULL)
            for (int i = 0; i < 64; i++) v->slots[i].index = -1;
    }
    bool ok = v != NULL && v->slots != NULL;
    char line[64];
    uint64_t lineno = 0;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            sl_dpp_problems_add(problems, "%s.file: %s line %llu: line too long for an id", path,
                                file, (unsigned long long)lineno + 1);
            ok = false;
            break;
        }
        if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
        if (len > 0 && line[len - 1] == '\r') line[--len] = '\0';
        char *end = NULL;
        errno = 0;
        long long id = len > 0 && !isspace((unsigned char)line[0]) ? strtoll(line, &end, 10) : 0;
        if (end == NULL || *end != '\0' || errno != 0) {
            sl_dpp_problems_add(problems, "%s.file: %s line %llu: '%s' is not an int64 id", path,
                                file, (unsigned long long)lineno + 1, line);
            ok = false;
            break;
        }
        if (lineno >= max_entries) {
            sl_dpp_problems_add(problems, "%s.file: %s holds more than %llu ids", path, file,
                                (unsigned long long)max_entries);
            ok = false;
            break;
        }
        if ((v->size + 1) * 2 > v->mask + 1 && !grow(v)) {
            ok = false;
            break;
        }
        int64_t prev = insert(v, (int64_t)id, (int64_t)lineno);
        if (prev >= 0) {
            sl_dpp_problems_add(problems, "%s.file: %s line %llu: id %lld already on line %lld",
                                path, file, (unsigned long long)lineno + 1, id,
                                (long long)prev + 1);
            ok = false;
            break;
        }
        lineno++;
    }
    if (ok && ferror(f)) {
        sl_dpp_problems_add(problems, "%s.file: reading %s failed", path, file);
        ok = false;
    }
    fclose(f);
    if (!ok) {
        dpp_vocab_destroy(v);
        return NULL;
    }
    return v;
}
