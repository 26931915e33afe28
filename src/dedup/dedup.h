/* Batch deduplication (RecD): for each dedup group (feature names that
 * repeat together, e.g. one session's user features) find the unique rows of
 * a batch and the inverse indices mapping every row to its unique row.
 *
 * A row of a group is, for each of the group's keys in order, its length,
 * its ids and (when the batch is weighted) its weights. Two rows are equal
 * when all of these are equal bit for bit: [1,2],[3] and [1],[2,3] differ,
 * and so do weights 0.0 and -0.0.
 *
 * Exact: rows are hashed (XXH3 by default) and every hash match is confirmed
 * by comparing the bytes of all the group's id lists and weights, so a hash
 * collision never merges different rows. Unique rows keep first-occurrence
 * order (unique row u is the u-th distinct row met from row 0 on), so the
 * output is deterministic and does not depend on the hash. Runs of identical
 * adjacent rows (session-clustered data) are recognised without hashing.
 *
 * The identity the tests check: sl_batch_expand of sl_dedup_batch's output
 * equals the input with its keys reordered as plain keys, then each group's
 * keys in group order. */
#ifndef SLUICE_DEDUP_H
#define SLUICE_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/tensor.h"

typedef struct sl_dedup_group_spec {
    const char *name;
    uint32_t num_features;
    const char *const *features; /* [num_features], keys of the input KJT */
} sl_dedup_group_spec_t;

typedef struct sl_dedup_stats {
    uint32_t batch_size;    /* B */
    uint32_t unique_rows;   /* U */
    double factor;          /* B / U (1.0 for an empty batch) */
    uint64_t bytes_before;  /* the group's KJT bytes at stride B */
    uint64_t bytes_after;   /* unique KJT + inverse indices */
    uint32_t adjacent_hits; /* rows matched by the adjacent-run fast path */
} sl_dedup_stats_t;

/* Hash of one id list (len bytes at data; seed is the key's position in the
 * group). Injected by tests to force collisions: any function, even a
 * constant one, gives the same output as XXH3, only slower. */
typedef uint64_t (*sl_dedup_hash_fn)(const void *data, size_t len, uint64_t seed);

typedef struct sl_dedup sl_dedup_t;

/* A reusable deduplicator; its hash table and scratch grow to the largest
 * batch seen and are kept between batches (long-lived state, allocated from a
 * (NULL: the default allocator), never from an arena). hash NULL means XXH3.
 * Not thread-safe: one deduplicator per thread. Caller owns, free with
 * sl_dedup_destroy. @return NULL when out of memory. */
sl_dedup_t *sl_dedup_new(const sl_allocator_t *a, sl_dedup_hash_fn hash);

/* d may be NULL. */
void sl_dedup_destroy(sl_dedup_t *d);

/* Deduplicate the keys key_indices[0..n) of all (stride B) into out: a KJT
 * of stride U holding those keys in the given order, weighted when all is,
 * and inverse[B]. Buffers from arena (borrowed until it is reset or
 * destroyed); out->name is set to name (copied; NULL leaves it NULL). stats
 * may be NULL. all is checked first (lengths >= 0 summing to num_values).
 * @return SL_OK; SL_ERR_INVALID for a bad all, a key index out of range or a
 * key named twice; SL_ERR_TOO_LARGE when B > 2^31 (inverse indices are
 * int32) or one key holds 2^32 values or more; SL_ERR_NOMEM. On error out is
 * unspecified, err says what and where. */
sl_err_t sl_dedup_group(sl_dedup_t *d, const sl_kjt_t *all, const uint32_t *key_indices, uint32_t n,
                        const char *name, sl_arena_t *arena, sl_ikjt_t *out,
                        sl_dedup_stats_t *stats, sl_error_t *err);

/* Split all (stride B, every sparse feature) into out->sparse (features in
 * no group, in input order, copied) and out->groups (one IKJT per group, in
 * group order), allocated in out->arena; sets out->batch_size, num_groups and
 * groups. SL_ERR_INVALID, with a message naming it, for: a feature named by
 * no key of all, a feature in two groups (or twice in one), a group without
 * a name or without features, two keys of all with one name, a bad all; and
 * the errors of sl_dedup_group. stats, when not NULL, has num_groups
 * entries. Dense, labels and sample ids of out are untouched; on error so
 * are its sparse, groups, num_groups and batch_size (out->arena may hold
 * partial buffers, freed with the batch). */
sl_err_t sl_dedup_batch(sl_dedup_t *d, const sl_kjt_t *all, const sl_dedup_group_spec_t *groups,
                        uint32_t num_groups, sl_batch_t *out, sl_dedup_stats_t *stats,
                        sl_error_t *err);

/* ---- seeded generator of session-like batches (tests, benchmarks, demo) ---- */

typedef struct sl_dedup_synth_spec {
    uint32_t batch_size;
    uint32_t group_features; /* features of the dedup group, named user_0 ... */
    uint32_t plain_features; /* per-sample features, named item_0 ... */
    uint32_t ids_per_list;   /* id list length (the mean when vary_lengths) */
    bool vary_lengths;       /* lengths uniform in [0, 2 * ids_per_list], empty lists included */
    uint32_t dup_factor;     /* mean times each group row repeats (1: all distinct) */
    bool adjacent;           /* duplicates adjacent (session-clustered) or shuffled */
    bool weighted;           /* float weights on every list */
    uint64_t seed;
} sl_dedup_synth_spec_t;

/* Generate a KJT of stride batch_size holding the group features followed by
 * the plain features; buffers from arena. Group rows come in sessions: a
 * distinct row repeated a number of times uniform in [1, 2 dup_factor - 1]
 * (mean dup_factor), sessions one after another when adjacent, else rows
 * shuffled by a seeded Fisher-Yates. Ids are uniform in [0, 2^63), weights
 * in [0, 1). The same spec (seed included) gives the same KJT. *group, when
 * not NULL, receives a group spec named "user" over the group features
 * (names borrowed from out). @return SL_OK; SL_ERR_INVALID for dup_factor 0,
 * ids_per_list >= 2^30 or 2^32 (key, row) cells or more; SL_ERR_NOMEM. */
sl_err_t sl_dedup_synth(const sl_dedup_synth_spec_t *spec, sl_arena_t *arena, sl_kjt_t *out,
                        sl_dedup_group_spec_t *group);

#endif
