/* sl_dedup_batch: split a batch's sparse features into the plain KJT and one
 * IKJT per dedup group, after checking the group specs against the batch
 * (every feature a key of the batch, no feature in two groups). */
#include "dedup/dedup_internal.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/err.h"

#define NO_GROUP UINT32_MAX

static size_t name_slot(const char *name, size_t mask)
{
    return (size_t)XXH3_64bits(name, strlen(name)) & mask;
}

/* Index the input's key names (open addressing, load <= 1/2), so that
 * resolving F features of groups is O(F), not O(F * keys). */
static sl_err_t index_names(sl_dedup_t *d, const sl_kjt_t *all, size_t *mask, sl_error_t *err)
{
    size_t slots = 16;
    while (slots < 2 * (size_t)all->num_keys)
        slots *= 2;
    if (!dedup_reserve(d->alloc, &d->name_slots, slots, sizeof(uint32_t)))
        return sl_error_set(err, SL_ERR_NOMEM, "dedup batch: name index of %u keys", all->num_keys);
    uint32_t *tab = d->name_slots.p;
    memset(tab, 0, slots * sizeof *tab);
    *mask = slots - 1;
    for (uint32_t k = 0; k < all->num_keys; k++) {
        size_t i = name_slot(all->keys[k], *mask);
        for (; tab[i] != 0; i = (i + 1) & *mask)
            if (strcmp(all->keys[tab[i] - 1], all->keys[k]) == 0)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup batch: key '%s' appears twice in the input (keys %u "
                                    "and %u)",
                                    all->keys[k], tab[i] - 1, k);
        tab[i] = k + 1;
    }
    return SL_OK;
}

/* @return the index of name among the input keys, or -1. */
static int64_t find_name(const sl_dedup_t *d, const sl_kjt_t *all, size_t mask, const char *name)
{
    const uint32_t *tab = d->name_slots.p;
    for (size_t i = name_slot(name, mask); tab[i] != 0; i = (i + 1) & mask)
        if (strcmp(all->keys[tab[i] - 1], name) == 0) return (int64_t)tab[i] - 1;
    return -1;
}

/* Resolve every group's features to key indices (into d->group_keys, group
 * after group) and mark which group owns each key (d->owner). */
static sl_err_t resolve_groups(sl_dedup_t *d, const sl_kjt_t *all,
                               const sl_dedup_group_spec_t *groups, uint32_t num_groups,
                               sl_error_t *err)
{
    size_t mask = 0;
    SL_FORWARD_IF_ERROR(index_names(d, all, &mask, err));
    size_t total = 0;
    for (uint32_t g = 0; g < num_groups; g++) {
        const sl_dedup_group_spec_t *gs = &groups[g];
        if (gs->name == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "dedup batch: group %u has no name", g);
        if (gs->num_features == 0 || gs->features == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "dedup batch: group '%s' has no features",
                                gs->name);
        total += gs->num_features;
    }
    if (!dedup_reserve(d->alloc, &d->owner, (size_t)all->num_keys + 1, sizeof(uint32_t)) ||
        !dedup_reserve(d->alloc, &d->group_keys, total + 1, sizeof(uint32_t)))
        return sl_error_set(err, SL_ERR_NOMEM, "dedup batch: %zu group features", total);
    uint32_t *owner = d->owner.p, *keys = d->group_keys.p;
    for (uint32_t k = 0; k < all->num_keys; k++)
        owner[k] = NO_GROUP;
    size_t at = 0;
    for (uint32_t g = 0; g < num_groups; g++) {
        const sl_dedup_group_spec_t *gs = &groups[g];
        for (uint32_t f = 0; f < gs->num_features; f++) {
            const char *name = gs->features[f];
            if (name == NULL)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup batch: group '%s' feature %u has no name", gs->name, f);
            int64_t k = find_name(d, all, mask, name);
            if (k < 0)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup batch: group '%s' feature '%s' is not a key of the "
                                    "batch",
                                    gs->name, name);
            if (owner[k] == g)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup batch: feature '%s' appears twice in group '%s'", name,
                                    gs->name);
            if (owner[k] != NO_GROUP)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup batch: feature '%s' is in groups '%s' and '%s'", name,
                                    groups[owner[k]].name, gs->name);
            owner[k] = g;
            keys[at++] = (uint32_t)k;
        }
        SL_FORWARD_IF_ERROR(dedup_check_group_keys(all, keys + at - gs->num_features,
                                                   gs->num_features, gs->name, err));
    }
    return SL_OK;
}

/* Copy the keys in no group into out->sparse, in input order. */
static sl_err_t copy_plain(sl_dedup_t *d, const sl_kjt_t *all, sl_arena_t *arena, sl_kjt_t *out,
                           sl_error_t *err)
{
    const uint32_t B = all->stride;
    const uint32_t *owner = d->owner.p;
    const uint64_t *key_start = d->key_start.p;
    if (!dedup_reserve(d->alloc, &d->names, (size_t)all->num_keys + 1, sizeof(const char *)))
        return sl_error_set(err, SL_ERR_NOMEM, "dedup batch: names of %u keys", all->num_keys);
    const char **names = d->names.p;
    uint32_t P = 0;
    uint64_t values = 0;
    for (uint32_t k = 0; k < all->num_keys; k++) {
        if (owner[k] != NO_GROUP) continue;
        names[P++] = all->keys[k];
        values += key_start[k + 1] - key_start[k];
    }
    sl_err_t rc = sl_kjt_init(out, arena, P, names, B, values, all->weights != NULL);
    if (rc != SL_OK)
        return sl_error_set(err, rc, "dedup batch: plain KJT of %u keys x %u rows: %s", P, B,
                            sl_err_str(rc));
    uint32_t p = 0;
    uint64_t at = 0;
    for (uint32_t k = 0; k < all->num_keys; k++) {
        if (owner[k] != NO_GROUP) continue;
        if (B > 0)
            memcpy(out->lengths + (size_t)p * B, all->lengths + (size_t)k * B,
                   (size_t)B * sizeof(int32_t));
        size_t cnt = (size_t)(key_start[k + 1] - key_start[k]);
        if (cnt > 0) {
            memcpy(out->values + at, all->values + key_start[k], cnt * sizeof(int64_t));
            if (all->weights != NULL)
                memcpy(out->weights + at, all->weights + key_start[k], cnt * sizeof(float));
        }
        at += cnt;
        p++;
    }
    return SL_OK;
}

sl_err_t sl_dedup_batch(sl_dedup_t *d, const sl_kjt_t *all, const sl_dedup_group_spec_t *groups,
                        uint32_t num_groups, sl_batch_t *out, sl_dedup_stats_t *stats,
                        sl_error_t *err)
{
    if (d == NULL || all == NULL || out == NULL || out->arena == NULL ||
        (num_groups > 0 && groups == NULL))
        return sl_error_set(err, SL_ERR_INVALID, "dedup batch: NULL argument");
    sl_err_t rc = dedup_key_starts(d, all, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "dedup batch: ");
        return rc;
    }
    SL_FORWARD_IF_ERROR(resolve_groups(d, all, groups, num_groups, err));

    sl_arena_t *arena = out->arena;
    sl_ikjt_t *ikjts = NULL;
    if (num_groups > 0) {
        ikjts = sl_arena_calloc(arena, num_groups, sizeof *ikjts);
        if (ikjts == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "dedup batch: %u groups", num_groups);
    }
    sl_kjt_t sparse;
    SL_FORWARD_IF_ERROR(copy_plain(d, all, arena, &sparse, err));
    size_t at = 0;
    for (uint32_t g = 0; g < num_groups; g++) {
        /* group_keys survives: dedup_group_checked does not touch it. */
        const uint32_t *keys = (const uint32_t *)d->group_keys.p + at;
        SL_FORWARD_IF_ERROR(dedup_group_checked(d, all, keys, groups[g].num_features,
                                                groups[g].name, arena, &ikjts[g],
                                                stats != NULL ? &stats[g] : NULL, err));
        at += groups[g].num_features;
    }
    out->batch_size = all->stride;
    out->sparse = sparse;
    out->num_groups = num_groups;
    out->groups = ikjts;
    return SL_OK;
}
