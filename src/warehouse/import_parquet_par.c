/* A row group's column readers decoded on several threads (pq_internal.h,
 * imp_pqc_par_t; docs/PARQUET.md "Decoding on several threads"): the
 * worker's Parquet source reads a split on its reader thread, and its
 * decode (pages decompressed, levels and values decoded, dictionaries
 * mapped) is nearly all of its CPU. With N threads the projected readers
 * of a row group are split into N groups of about the same bytes; the
 * calling thread decodes group 0 and N - 1 helpers the others, joined
 * before the batches are converted, so the conversion (one thread, as
 * before) sees exactly the batches a single thread decodes.
 *
 * What each thread writes is its own: a reader (its pages, dictionary,
 * batch) is decoded by one thread per batch, and each thread's readers
 * share that thread's page scratch and ZSTD context (sl_pq_scratch_t).
 * Shared and only read: the file's metadata, the byte source (pread; an
 * object's prefetched windows, or the store's ranged reads) and the value
 * maps of the decode (pure functions of their values). */
#include <pthread.h>
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "pq_cols_internal.h"

typedef struct helper {
    struct imp_pqc_par *par;
    uint32_t k; /* its group */
    pthread_t th;
    bool started;
} helper_t;

/* The outcome of one group's decode of a batch. */
typedef struct outcome {
    sl_err_t rc;
    uint32_t failed; /* the reader that failed (UINT32_MAX: none) */
    sl_error_t err;
} outcome_t;

struct imp_pqc_par {
    const sl_allocator_t *a;
    uint32_t threads;          /* groups, the caller's included */
    sl_pq_scratch_t **scratch; /* [threads]: [0] unused (the caller's readers use c->scratch) */
    helper_t *h;               /* [threads] ([0] unused) */
    outcome_t *out;            /* [threads] */
    uint8_t *owner;            /* [cap]: the group decoding each reader */
    uint64_t *bytes, *load;    /* [cap] a reader's bytes; [threads] a group's */
    uint32_t cap;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;     /* batches asked for */
    uint32_t pending; /* helpers still decoding this batch */
    bool stop;
    group_read_t *g; /* the row group being decoded (valid while pending) */
};

/* Decode the next batch of the readers of g in group k, in reader order,
 * stopping at the first that fails. */
static void decode_group(imp_pqc_par_t *p, group_read_t *g, uint32_t k)
{
    outcome_t *o = &p->out[k];
    o->rc = SL_OK;
    o->failed = UINT32_MAX;
    for (uint32_t i = 0; i < g->n; i++) {
        if (p->owner[i] != k) continue;
        o->rc = sl_pq_reader_next(g->rd[i], PQ_BATCH_ROWS, &g->bat[i], &o->err);
        if (o->rc != SL_OK) {
            o->failed = i;
            return;
        }
    }
}

static void *helper_main(void *arg)
{
    helper_t *h = arg;
    imp_pqc_par_t *p = h->par;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        group_read_t *g = p->g;
        pthread_mutex_unlock(&p->mu);
        decode_group(p, g, h->k);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void imp_pqc_par_destroy(imp_pqc_par_t *p)
{
    if (p == NULL) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t k = 1; p->h != NULL && k < p->threads; k++)
        if (p->h[k].started) pthread_join(p->h[k].th, NULL);
    /* after the readers that used them: the caller destroys its readers
     * first (imp_pqc_destroy), and none is decoding once joined */
    for (uint32_t k = 1; p->scratch != NULL && k < p->threads; k++)
        sl_pq_scratch_destroy(p->scratch[k]);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    const sl_allocator_t *a = p->a;
    sl_free(a, p->scratch, p->threads * sizeof *p->scratch);
    sl_free(a, p->h, p->threads * sizeof *p->h);
    sl_free(a, p->out, p->threads * sizeof *p->out);
    sl_free(a, p->owner, p->cap);
    sl_free(a, p->bytes, p->cap * sizeof *p->bytes);
    sl_free(a, p->load, p->threads * sizeof *p->load);
    sl_free(a, p, sizeof *p);
}

sl_err_t imp_pqc_par_new(const sl_allocator_t *a, uint32_t threads, uint32_t cap,
                         imp_pqc_par_t **out, sl_error_t *err)
{
    *out = NULL;
    if (threads < 2 || cap == 0) return SL_OK; /* one thread: the caller's alone */
    if (threads > 255) threads = 255;          /* owner is a byte */
    imp_pqc_par_t *p = sl_calloc(a, 1, sizeof *p);
    if (p == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for Parquet decode threads");
    p->a = a;
    p->threads = threads;
    p->cap = cap;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->scratch = sl_calloc(a, threads, sizeof *p->scratch);
    p->h = sl_calloc(a, threads, sizeof *p->h);
    p->out = sl_calloc(a, threads, sizeof *p->out);
    p->owner = sl_calloc(a, cap, 1);
    p->bytes = sl_calloc(a, cap, sizeof *p->bytes);
    p->load = sl_calloc(a, threads, sizeof *p->load);
    bool ok = p->scratch && p->h && p->out && p->owner && p->bytes && p->load;
    for (uint32_t k = 1; ok && k < threads; k++)
        ok = (p->scratch[k] = sl_pq_scratch_new(a)) != NULL;
    if (!ok) {
        imp_pqc_par_destroy(p);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for Parquet decode threads");
    }
    for (uint32_t k = 1; k < threads; k++) {
        p->h[k] = (helper_t){.par = p, .k = k};
        int e = pthread_create(&p->h[k].th, NULL, helper_main, &p->h[k]);
        if (e != 0) {
            imp_pqc_par_destroy(p);
            return sl_error_set(err, SL_ERR_IO, "Parquet decode thread %u of %u: %s", k, threads,
                                strerror(e));
        }
        p->h[k].started = true;
    }
    *out = p;
    return SL_OK;
}

void imp_pqc_par_assign(imp_pqc_par_t *p, const sl_pq_file_t *f, uint32_t gi, group_read_t *g,
                        sl_pq_scratch_t *own)
{
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    uint32_t n = g->n < p->cap ? g->n : p->cap;
    for (uint32_t i = 0; i < n; i++) {
        const sl_pq_chunk_t *ch = &m->row_groups[gi].chunks[g->col[i] - m->columns];
        p->bytes[i] = ch->total_uncompressed > 0 ? (uint64_t)ch->total_uncompressed : 0;
        p->owner[i] = UINT8_MAX; /* not yet */
    }
    memset(p->load, 0, p->threads * sizeof *p->load);
    /* largest first, each to the group with the fewest bytes so far (the
     * lowest group on a tie: the same split for the same row group) */
    for (uint32_t done = 0; done < n; done++) {
        uint32_t big = UINT32_MAX;
        for (uint32_t i = 0; i < n; i++)
            if (p->owner[i] == UINT8_MAX && (big == UINT32_MAX || p->bytes[i] > p->bytes[big]))
                big = i;
        uint32_t least = 0;
        for (uint32_t k = 1; k < p->threads; k++)
            if (p->load[k] < p->load[least]) least = k;
        p->owner[big] = (uint8_t)least;
        p->load[least] += p->bytes[big] + 1; /* + 1: an empty chunk still costs a reader */
    }
    for (uint32_t i = 0; i < n; i++)
        sl_pq_reader_set_scratch(g->rd[i], p->owner[i] == 0 ? own : p->scratch[p->owner[i]]);
}

sl_err_t imp_pqc_par_next(imp_pqc_par_t *p, group_read_t *g, const char *input, uint32_t gi,
                          uint32_t *rows, sl_error_t *err)
{
    /* one reader has nothing to share; more than assigned cannot happen */
    if (g->n < 2 || g->n > p->cap) return imp_pq_group_next(g, input, gi, rows, err);
    *rows = 0;
    pthread_mutex_lock(&p->mu);
    p->g = g;
    p->gen++;
    p->pending = p->threads - 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    decode_group(p, g, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) /* each helper decodes one batch of a few readers, then signals */
        pthread_cond_wait(&p->done, &p->mu);
    p->g = NULL;
    pthread_mutex_unlock(&p->mu);
    /* the error a single thread meets first: the first failed reader's,
     * unless an earlier column's rows disagree (imp_pq_group_next) */
    uint32_t first = UINT32_MAX, fk = 0;
    for (uint32_t k = 0; k < p->threads; k++)
        if (p->out[k].failed < first) {
            first = p->out[k].failed;
            fk = k;
        }
    for (uint32_t i = 0; i < g->n && i < first; i++) {
        if (i > 0 && g->bat[i]->rows != *rows)
            return sl_error_set(err, SL_ERR_CORRUPT, "%s row group %u: columns of %u and %u rows",
                                input, gi, *rows, g->bat[i]->rows);
        *rows = g->bat[i]->rows;
    }
    if (first != UINT32_MAX) {
        *err = p->out[fk].err;
        return p->out[fk].rc;
    }
    return SL_OK;
}
