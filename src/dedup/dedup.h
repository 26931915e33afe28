/* Batch deduplication (RecD): for each dedup group (feature names that
 * repeat together, e.g. one session's user features) find the unique rows of
 * a batch and the inverse indices mapping every row to its unique row.
 *
 * Exact: rows are hashed (XXH3 by default) and every hash match is confirmed
 * by comparing the bytes of all the group's id lists and weights, so a hash
 * collision never merges different rows. Unique rows keep first-occurrence
 * order, so the output is deterministic. Runs of identical adjacent rows
 * (session-clustered data) are recognised without hashing. */
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
    uint32_t batch_size;   /* B */
    uint32_t unique_rows;  /* U */
    double factor;         /* B / U (1.0 for an empty batch) */
    uint64_t bytes_before; /* the group's KJT bytes at stride B */
    uint64_t bytes_after;  /* unique KJT + inverse indices */
    uint32_t adjacent_hits; /* rows matched by the adjacent-run fast path */
} sl_dedup_stats_t;

/* Row hash: injected by tests to force collisions. */
typedef uint64_t (*sl_dedup_hash_fn)(const void *data, size_t len, uint64_t seed);

typedef struct sl_dedup sl_dedup_t;

/* A reusable deduplicator; its hash table grows to the largest batch seen and
 * is kept between batches (long-lived state, not in an arena). hash NULL
 * means XXH3. Caller owns, free with sl_dedup_destroy. */
sl_dedup_t *sl_dedup_new(const sl_allocator_t *a, sl_dedup_hash_fn hash);

void sl_dedup_destroy(sl_dedup_t *d);

/* Deduplicate the keys key_indices[0..n) of all (stride B) into out: a KJT
 * of stride U holding those keys, and inverse[B]. Buffers from arena; out->name
 * is set to name (copied). stats may be NULL. */
sl_err_t sl_dedup_group(sl_dedup_t *d, const sl_kjt_t *all, const uint32_t *key_indices,
                        uint32_t n, const char *name, sl_arena_t *arena, sl_ikjt_t *out,
                        sl_dedup_stats_t *stats, sl_error_t *err);

/* Split all (stride B, every sparse feature) into out->sparse (features in
 * no group, in input order) and out->groups (one IKJT per group, in group
 * order), allocated in out->arena; sets out->batch_size. A feature named by
 * no key of all, or by two groups, is SL_ERR_INVALID. stats, when not NULL,
 * has num_groups entries. Dense, labels and sample ids of out are untouched. */
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
 * the plain features; buffers from arena. *group, when not NULL, receives a
 * group spec named "user" over the group features (names borrowed from out). */
sl_err_t sl_dedup_synth(const sl_dedup_synth_spec_t *spec, sl_arena_t *arena, sl_kjt_t *out,
                        sl_dedup_group_spec_t *group);

#endif
