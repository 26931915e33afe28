/* The columnar builder's state (pq_internal.h, imp_pqc_t), shared by
 * import_parquet_cols.c (building: the conversion of runs of rows) and
 * import_parquet_take.c (taking the built rows as a stripe). */
#ifndef SLUICE_WH_PQ_COLS_INTERNAL_H
#define SLUICE_WH_PQ_COLS_INTERNAL_H

#include "pq_internal.h"

typedef struct key {
    int32_t *len; /* [len_cap], a length per row */
    int64_t *ids; /* [ids_cap] */
    float *w;     /* [w_cap] weighted keys only */
    uint64_t nids, len_cap, ids_cap, w_cap;
    uint64_t pending; /* ids of the run being converted */
    bool weighted;
} outkey_t;

struct imp_pqc {
    const sl_allocator_t *a;
    const imp_pq_t *p;
    const sl_wh_schema_t *schema;
    uint32_t num_slots;
    uint8_t *slot_read; /* [num_slots] */
    int32_t *slot_out;  /* [num_slots]: output label, dense column or key; -1: none */
    uint32_t T, D, S;
    const char **label_names, **dense_names, **key_names;
    bool any_weighted;
    bool covered;            /* every label, dense column and key has a slot: nothing to preset */
    uint32_t n, cap;         /* rows built; rows every array below has room for */
    int64_t *sid, *ses, *ts; /* [*_cap] */
    float *labels;           /* [labels_cap * T] row-major */
    float *dense;            /* [dense_cap * D] row-major */
    uint64_t sid_cap, ses_cap, ts_cap, labels_cap, dense_cap;
    outkey_t *keys; /* [S] */
    /* Transforms at decode (imp_pqc_set_maps): per dense column and key,
     * the map of its values (NULL: none), and the feature's index in the
     * projection; per key, whether this row group's column reader maps
     * its ids (a dictionary once per column chunk) or conv_ids maps them
     * after the conversion */
    const sl_wh_value_map_t **dmap, **kmap; /* [SD + 1], [SS + 1] */
    uint32_t *dfeat, *kfeat;                /* [SD + 1], [SS + 1] */
    uint8_t *kmap_rd;                       /* [SS + 1] */
    uint8_t *has_slot;                      /* [T + D + S] */
    /* the taken stripe */
    sl_arena_t *out;
    size_t out_chunk, out_want;
    uint32_t *order; /* [2 * order_cap] */
    uint32_t order_cap;
    /* the column readers, kept from row group to row group and from read
     * to read (their page and batch buffers reused, never touched fresh) */
    sl_pq_reader_t **pool; /* [pool_cap] */
    uint32_t pool_cap;
    sl_pq_scratch_t *scratch; /* the pool's readers' shared page and ZSTD context */
};

#endif
