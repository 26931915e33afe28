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
    uint64_t est_q8;  /* ids a row x 256 in the last run kept (0: none yet) */
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
    uint8_t *dmap_rd;  /* [SD + 1]: the column reader maps the dense values (a FLOAT column) */
    uint8_t *has_slot; /* [T + D + S] */
    /* A stripe built in place (import_parquet_take.c, imp_pqc_direct):
     * the run that fills a whole stripe is converted straight into the
     * stripe's arrays in out (sid, ses, ts, st.dense, st.labels and the
     * keys' at_len and at_ids), which the take then hands out without a
     * copy. */
    bool direct;
    sl_batch_t st;
    int64_t *st_ses, *st_ts;
    uint64_t at_cap; /* the ids st.sparse has room for */
    bool at_est;     /* some key's room is an estimate (imp_pqc_direct_est) */
    /* the taken stripe */
    sl_arena_t *out;
    size_t out_chunk, out_want;
    /* an arena given back (imp_pqc_give_back), made with a chunk of
     * spare_chunk: the next stripe's after a disown */
    sl_arena_t *spare;
    size_t spare_chunk;
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
    uint32_t *unit;    /* [pool_cap]: the first reader of each reader's unit (its slots') */
    uint8_t *slot_grp; /* [num_slots]: the group converting each slot */
};

/* Where a run of a batch goes: rows [r0, r1) of the batches become rows
 * n0.. of the builder; row r0 is file row line0 (from 1). */
typedef struct run {
    uint32_t r0, r1, n0;
    uint64_t line0;
    int64_t id_base;
    uint32_t bad; /* the first row (batch index) refused so far, UINT32_MAX: none */
    sl_error_t *why;
    /* where rows from n0 go: the vectors, or the stripe's arrays */
    int64_t *sid, *ses, *ts;
    float *labels, *dense;
} run_t;

/* ---- converting a run (import_parquet_cols.c) ---- */

/* Where u's rows go (the vectors, or the stripe in place), and the values
 * no slot fills (ids not in the file, outputs without a slot). */
void imp_pqc_run_begin(imp_pqc_t *c, run_t *u);
/* Convert u's rows for the slots of group grp (UINT32_MAX: every slot),
 * in mapping order: a refused row is u->bad and *u->why; the slots of
 * different groups write different arrays, so groups may convert at the
 * same time (imp_pqc_par_assign's units). @return SL_ERR_NOMEM only (in
 * place: more ids than the key's room). */
sl_err_t imp_pqc_convert_slots(imp_pqc_t *c, const group_read_t *g, run_t *u, uint32_t grp,
                               sl_error_t *err);
/* Does imp_pqc_conv_nums convert slot sl, reading batch v (a label or
 * dense value from a dense batch of FLOATs)? */
bool imp_pqc_num_rowwise(const sl_wh_colmap_slot_t *sl, const sl_pq_batch_t *v);
/* Convert u's rows for the label and dense slots of group grp
 * (UINT32_MAX: every slot) that imp_pqc_num_rowwise takes, a row of each
 * matrix at a time, and map the dense ones the column reader did not
 * (import_parquet_nums.c). */
void imp_pqc_conv_nums(imp_pqc_t *c, const group_read_t *g, const run_t *u, uint32_t grp);
/* Dense column o's value for a missing row: NaN, or the map of NaN when
 * its column reader maps the values (dmap_rd). */
float imp_pqc_dense_miss(const imp_pqc_t *c, uint32_t o);
/* Keep the first `kept` rows of the run converted (its keys' pending ids
 * counted in, their estimates renewed). */
void imp_pqc_commit(imp_pqc_t *c, uint32_t kept);
/* Convert rows [r0, r1) of g's batches (row r0 is file row line0 from 1)
 * into c on this thread, handing each row the mapping refuses to
 * rd->on_bad: a run with one is converted again without it (rows before
 * it, then after). */
sl_err_t imp_pqc_convert_run(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1,
                             uint64_t line0, imp_pqc_read_t *rd, sl_error_t *err);

/* ---- decoding and converting a row group's batches on several threads
 * (import_parquet_par.c) ---- */

typedef struct imp_pqc_par imp_pqc_par_t;
/* The conversion of a planned run of the next batch, on the threads that
 * decoded it: the thread that took group k calls fn(ctx, k) for its slots
 * once each of its readers' batches holds `rows` rows (else leaves them
 * to the caller). fn returns false for anything but a clean conversion (a
 * refused row, no room, no memory): the caller then converts the run
 * again on its own thread, so that errors are exactly a single thread's. */
typedef struct imp_pqc_conv {
    uint32_t rows;
    /* NULL, or first for every group, every fn waiting for every pre
     * (one meeting): false from any and none converts */
    bool (*pre)(void *ctx, uint32_t k);
    bool (*fn)(void *ctx, uint32_t k);
    void *ctx;
    bool ok; /* out: every group converted its slots */
} imp_pqc_conv_t;

/* threads - 1 helper threads, each with its own page scratch and ZSTD
 * context, for row groups of at most cap readers. threads < 2: *out NULL (no
 * helpers). Caller owns *out, free with imp_pqc_par_destroy after the
 * readers it decoded are destroyed or decode no more. */
sl_err_t imp_pqc_par_new(const sl_allocator_t *a, uint32_t threads, uint32_t cap,
                         imp_pqc_par_t **out, sl_error_t *err);
void imp_pqc_par_destroy(imp_pqc_par_t *p);
/* Split the readers of row group gi of f (g, just opened) into groups of
 * about the same cost, a few per thread, keeping together the readers of
 * one unit (unit[i]: the first reader of reader i's unit, <= i); own is
 * the calling thread's scratch (a reader gets the scratch of the thread
 * that decodes it). */
void imp_pqc_par_assign(imp_pqc_par_t *p, const sl_pq_file_t *f, uint32_t gi, group_read_t *g,
                        sl_pq_scratch_t *own, const uint32_t *unit);
/* The group of reader i since the last assign. */
uint32_t imp_pqc_par_group(const imp_pqc_par_t *p, uint32_t reader);
/* Whether g's readers are shared among the threads (else the calling
 * thread decodes them all and converts nothing on the others). */
bool imp_pqc_par_shared(const imp_pqc_par_t *p, const group_read_t *g);
/* Work for the calling thread while the helpers decode (the hand-on of a
 * stripe already taken, import_parquet_read.c): it must touch nothing the
 * job reads or writes (the readers, their batches, the builder). */
typedef struct imp_pqc_aside {
    sl_err_t (*fn)(void *ctx, sl_error_t *err);
    void *ctx;
    sl_err_t rc; /* out: fn's */
    sl_error_t err;
} imp_pqc_aside_t;

/* imp_pq_group_next with each group's readers decoded, and then its part
 * of conv (NULL: none) run, by whichever thread takes the group (the
 * calling thread's too), all done before it returns: the same batches,
 * rows and errors as imp_pq_group_next; conv->ok says whether the run was
 * converted. aside (NULL: none) runs on the calling thread once the job
 * is posted, before it takes any group (or, with nothing shared, before
 * the decode): its outcome is in aside. */
sl_err_t imp_pqc_par_next(imp_pqc_par_t *p, group_read_t *g, const char *input, uint32_t gi,
                          imp_pqc_conv_t *conv, imp_pqc_aside_t *aside, uint32_t *rows,
                          sl_error_t *err);
/* conv run group by group on the threads over the batches already
 * decoded. */
void imp_pqc_par_convert(imp_pqc_par_t *p, group_read_t *g, imp_pqc_conv_t *conv);

/* import_parquet_take.c: begin building rows [r0, r1) of g's batches, a
 * whole stripe with the builder empty, in place (c->direct), when every
 * key is unweighted; false: not taken (no room, weighted keys), the rows
 * go through the vectors. */
bool imp_pqc_direct(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1);
/* imp_pqc_direct before the batches are decoded: the stripe's ids have
 * room for each list key's estimate (outkey_t.est_q8, its ids a row in
 * the last run kept, with an eighth more; at_est), and those keys'
 * at_room and the at_ids after them are left to the caller to set once
 * the batches are decoded; false also when a list key has no estimate
 * yet. */
bool imp_pqc_direct_est(imp_pqc_t *c, const group_read_t *g, uint32_t rows);
/* Stop building in place: the rows built so far (c->n, none pending) are
 * copied into the vectors. @return false when out of memory. */
bool imp_pqc_spill(imp_pqc_t *c);
/* Room for `more` rows more in the vectors (import_parquet_cols.c). */
bool imp_pqc_reserve_rows(imp_pqc_t *c, uint32_t more);
/* Room for `more` ids more of key k in its vectors. */
bool imp_pqc_reserve_ids(imp_pqc_t *c, outkey_t *k, uint64_t more);

#endif
