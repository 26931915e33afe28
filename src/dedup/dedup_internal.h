/* Private to src/dedup: the deduplicator's state and the steps that
 * sl_dedup_group (dedup.c) and sl_dedup_batch (batch.c) share. */
#ifndef SLUICE_DEDUP_INTERNAL_H
#define SLUICE_DEDUP_INTERNAL_H

#include "dedup/dedup.h"

/* A buffer kept across batches; grows, never shrinks. */
typedef struct scratch {
    void *p;
    size_t bytes;
} scratch_t;

/* One slot of the open-addressing table. It is live only when gen equals the
 * table's current generation, so emptying the table between groups is O(1). */
typedef struct slot {
    uint64_t hash;
    uint32_t unique; /* index of the unique row */
    uint32_t gen;
} slot_t;

/* One key of the group, as the hot loop reads it. */
typedef struct keyw {
    const int32_t *len; /* [B] lengths of the key */
    uint64_t start;     /* where its values start in the input */
} keyw_t;

/* A head row matched to a unique row by hash alone, to be verified. */
typedef struct pair {
    uint32_t row, rep;
} pair_t;

/* Not thread-safe: one deduplicator per thread. Everything here is
 * long-lived scratch sized to the largest batch seen (never in an arena). */
struct sl_dedup {
    const sl_allocator_t *alloc;
    sl_dedup_hash_fn hash; /* NULL: XXH3, called inline */
    slot_t *table;         /* [table_cap], a power of two */
    size_t table_cap;
    size_t mask;  /* slots used for this group - 1: a power of two >= 2B */
    uint32_t gen; /* current generation, never 0 (0 marks fresh slots) */
    /* per group: see gctx_t in dedup.c */
    scratch_t same;       /* uint8_t [B] */
    scratch_t heads;      /* uint32_t [B] */
    scratch_t hash_of;    /* uint64_t [B] */
    scratch_t off;        /* uint32_t [n * B] */
    scratch_t rep;        /* uint32_t [U] */
    scratch_t pairs;      /* pair_t [H] */
    scratch_t runs;       /* uint32_t [U + 1] */
    scratch_t keyw;       /* keyw_t [n] */
    scratch_t names;      /* const char * [n] */
    scratch_t key_values; /* uint64_t [n]: values of each key (write in place) */
    /* per batch */
    scratch_t key_start; /* uint64_t [num_keys + 1] of the input */
    /* batch.c only */
    scratch_t name_slots; /* uint32_t [power of two >= 2 num_keys]: key index + 1, 0 empty */
    scratch_t owner;      /* uint32_t [num_keys]: group holding the key, or NO_GROUP */
    scratch_t group_keys; /* uint32_t [sum of num_features]: key indices, group by group */
};

/* Typed views of the deduplicator's scratch while one group is processed. */
typedef struct gctx {
    const sl_kjt_t *all;
    uint32_t n, B;
    uint64_t values;  /* values of the group's keys */
    const keyw_t *kw; /* [n] */
    uint8_t *same;    /* [B] row r equals row r - 1 */
    uint32_t *heads;  /* [H] rows with same[r] == 0, increasing */
    uint64_t *hash;   /* [H] hash of row heads[i] */
    uint32_t *off;    /* [n * B] start of (key j, row r) from the key's first value */
    uint32_t *rep;    /* [U] first row of each unique row, increasing */
    pair_t *pairs;    /* [H] */
    slot_t *table;    /* mask + 1 slots, live when their gen is gen */
    size_t mask;
    uint32_t gen;
    bool hashed; /* hash[0, H) already holds the heads' hashes */
    /* Called for every block of heads [i0, i1) once its matches are
     * confirmed, with the unique rows [u0, u1) it found, while the block's
     * lists are still in cache (NULL: none). Not called for rows found by
     * the exact redo (*redone set). */
    void (*on_block)(const struct gctx *g, uint32_t i0, uint32_t i1, uint32_t u0, uint32_t u1,
                     void *ctx);
    void *block_ctx;
    bool *redone;
} gctx_t;

/* Pass 1 (unique.c): fill g->off, g->same and g->heads. @return H, the
 * number of heads: rows that differ from the previous row. */
uint32_t dedup_adjacent(const gctx_t *g);

/* Passes 1 and 2 in one (unique.c), for short lists without weights and
 * the built-in hash: also fills g->hash with the heads' hashes and sets
 * g->hashed. @return H. */
uint32_t dedup_adjacent_hashed(gctx_t *g);

/* Passes 2 and 3 (unique.c): hash the heads (with fn, or XXH3 when NULL),
 * find the unique rows among them. Fills inverse[B], g->rep and
 * *unique_values (values of the unique rows over all keys). @return U. */
uint32_t dedup_unique(const gctx_t *g, sl_dedup_hash_fn fn, uint32_t H, int32_t *inverse,
                      uint64_t *unique_values);

/* XXH3_64bits(data, len), as fast as the machine allows for long inputs
 * (hash.c). */
uint64_t dedup_xxh3_long(const void *data, size_t len);

/* Make s hold at least count * elem bytes; its old contents are lost.
 * @return false when out of memory (s unchanged). */
bool dedup_reserve(const sl_allocator_t *a, scratch_t *s, size_t count, size_t elem);

/* Check the structure of all and its lengths (>= 0, summing to num_values),
 * and fill d->key_start with where each key's values start. One pass over
 * all lengths. The message comes from sl_kjt_validate. */
sl_err_t dedup_key_starts(sl_dedup_t *d, const sl_kjt_t *all, sl_error_t *err);

/* Check a group's key indices: in range, no key twice (by index or name),
 * and B small enough for int32 inverse indices. */
sl_err_t dedup_check_group_keys(const sl_kjt_t *all, const uint32_t *key_indices, uint32_t n,
                                const char *name, sl_error_t *err);

/* sl_dedup_group once dedup_key_starts and dedup_check_group_keys passed. */
sl_err_t dedup_group_checked(sl_dedup_t *d, const sl_kjt_t *all, const uint32_t *key_indices,
                             uint32_t n, const char *name, sl_arena_t *arena, sl_ikjt_t *out,
                             sl_dedup_stats_t *stats, sl_error_t *err);

#endif
