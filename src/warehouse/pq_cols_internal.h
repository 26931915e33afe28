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
    /* in place (imp_pqc_t.direct): where this key's lengths and ids go in
     * the stripe, and the ids it has room for there */
    int32_t *at_len;
    int64_t *at_ids;
    uint64_t at_room;
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
    /* A stripe built in place (import_parquet_take.c, imp_pqc_direct):
     * the run that fills a whole stripe is converted straight into the
     * stripe's arrays in out (sid, ses, ts, st.dense, st.labels and the
     * keys' at_len and at_ids), which the take then hands out without a
     * copy. */
    bool direct;
    sl_batch_t st;
    int64_t *st_ses, *st_ts;
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
    /* the decode on several threads (imp_pqc_set_threads); NULL: this
     * thread decodes every reader */
    struct imp_pqc_par *par;
};

/* ---- decoding a row group's readers on several threads
 * (import_parquet_par.c) ---- */

typedef struct imp_pqc_par imp_pqc_par_t;
/* threads - 1 helper threads, each with its own page scratch and ZSTD
 * context, for groups of at most cap readers. threads < 2: *out NULL (no
 * helpers). Caller owns *out, free with imp_pqc_par_destroy after the
 * readers it decoded are destroyed or decode no more. */
sl_err_t imp_pqc_par_new(const sl_allocator_t *a, uint32_t threads, uint32_t cap,
                         imp_pqc_par_t **out, sl_error_t *err);
void imp_pqc_par_destroy(imp_pqc_par_t *p);
/* Split the readers of row group gi of f (g, just opened) into groups of
 * about the same uncompressed bytes, one per thread, and give each reader
 * its thread's scratch (own: the calling thread's). */
void imp_pqc_par_assign(imp_pqc_par_t *p, const sl_pq_file_t *f, uint32_t gi, group_read_t *g,
                        sl_pq_scratch_t *own);
/* imp_pq_group_next with each group's readers decoded on its thread (the
 * calling thread's too), joined before it returns: the same batches, rows
 * and errors as imp_pq_group_next. */
sl_err_t imp_pqc_par_next(imp_pqc_par_t *p, group_read_t *g, const char *input, uint32_t gi,
                          uint32_t *rows, sl_error_t *err);

/* import_parquet_take.c: begin building rows [r0, r1) of g's batches, a
 * whole stripe with the builder empty, in place (c->direct), when every
 * key is unweighted; false: not taken (no room, weighted keys), the rows
 * go through the vectors. */
bool imp_pqc_direct(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1);
/* Stop building in place: the rows built so far (c->n, none pending) are
 * copied into the vectors. @return false when out of memory. */
bool imp_pqc_spill(imp_pqc_t *c);
/* Room for `more` rows more in the vectors (import_parquet_cols.c). */
bool imp_pqc_reserve_rows(imp_pqc_t *c, uint32_t more);
/* Room for `more` ids more of key k in its vectors. */
bool imp_pqc_reserve_ids(imp_pqc_t *c, outkey_t *k, uint64_t more);

#endif
