/* A row group's column readers decoded, and their batches converted, on
 * several threads (pq_internal.h, imp_pqc_par_t; docs/PARQUET.md
 * "Decoding on several threads"): the worker's Parquet source reads a
 * split on its reader thread, and its decode (pages decompressed, levels
 * and values decoded, dictionaries mapped) and the conversion of the
 * batches into the stripe are nearly all of its CPU. With N threads the
 * projected readers of a row group are split into N groups of about the
 * same bytes, the readers one slot reads (or whose slots write one output
 * array) always in the same group; the calling thread works on group 0
 * and N - 1 helpers on the others. A job is one batch: each thread
 * decodes its readers' next batch, then (when the caller planned the
 * batch's run, imp_pqc_conv_t) converts its slots into the stripe, and
 * the caller joins them once.
 *
 * What each thread writes is its own: a reader (its pages, dictionary,
 * batch) is decoded by one thread per batch, each thread's readers share
 * that thread's page scratch and ZSTD context (sl_pq_scratch_t), and the
 * slots it converts write arrays (or, labels and dense values being
 * row-major, all the numeric columns) no other thread writes. Shared and
 * only read: the file's metadata, the byte source (pread; an object's
 * prefetched windows, or the store's ranged reads) and the value maps
 * (pure functions of their values). */
#include <sched.h>
#include <string.h>

#include "common/err.h"
#include "common/lock.h"
#include "common/mem.h"
#include "pq_cols_internal.h"

/* Who does a group's part of a job: its helper, or the caller when the
 * helper had not begun it by the time the caller's own part was done. */
enum { PART_FREE, PART_HELPER, PART_CALLER };

typedef struct helper {
    struct imp_pqc_par *par;
    uint32_t k; /* its group */
    pthread_t th;
    bool started;
    /* keeping off the caller's CPU (keep_off): the CPUs the helper was
     * started with, and the one it last left out of them (-1: none) */
    cpu_set_t allowed;
    bool can_steer;
    int left_out;
} helper_t;

/* The outcome of one group's part of a job. */
typedef struct outcome {
    sl_err_t rc;
    uint32_t failed; /* the reader that failed (UINT32_MAX: none) */
    bool ready;      /* the job's conv->pre of this group's slots went through */
    bool converted;  /* the job's conversion of this group's slots went through */
    sl_error_t err;
} outcome_t;

struct imp_pqc_par {
    const sl_allocator_t *a;
    uint32_t threads;          /* groups, the caller's included */
    sl_pq_scratch_t **scratch; /* [threads]: [0] unused (the caller's readers use c->scratch) */
    helper_t *h;               /* [threads] ([0] unused) */
    outcome_t *out;            /* [threads]: group k's, written by its thread during a job */
    uint8_t *owner;            /* [cap]: the group working on each reader */
    uint64_t *bytes, *load;    /* [cap] a unit's cost; [threads] a group's */
    uint32_t cap;
    /* mu guards the job's hand-over: gen, pending, stop, the meeting
     * (meeting, meets) and the job (g, decode, conv), which the caller
     * sets and the helpers read only between a go and their done; a
     * thread's outcome is read by the others only after the meeting or
     * the join (both under mu) */
    sl_mutex_t mu;
    pthread_cond_t go, done, met;
    uint64_t gen;     /* jobs posted */
    uint32_t meeting; /* threads at the job's meeting (conv->pre) */
    uint64_t meets;   /* meetings held */
    uint32_t pending; /* parts helpers took and have not done */
    uint8_t *part;    /* [threads]: who does group k's part of the job (part_t) */
    bool stop;
    group_read_t *g;            /* the row group being read (valid while pending) */
    int caller_cpu;             /* the CPU the caller posted the job on (-1: unknown) */
    bool decode;                /* the job decodes the next batch */
    const imp_pqc_conv_t *conv; /* and then converts it (NULL: not) */
};

/* Every thread of a job waits here for the others (each calls it once
 * in a job whose conv has a pre). */
static void meet(imp_pqc_par_t *p)
{
    sl_mutex_lock(&p->mu);
    uint64_t round = p->meets;
    if (++p->meeting == p->threads) {
        p->meeting = 0;
        p->meets++;
        pthread_cond_broadcast(&p->met);
    } else {
        while (p->meets == round)
            sl_cond_wait(&p->met, &p->mu);
    }
    sl_mutex_unlock(&p->mu);
}

/* Group k's part of a job: decode the next batch of its readers of g, in
 * reader order, stopping at the first that fails; then convert its slots
 * when every one of its batches holds the rows the conversion was
 * planned for (else leave it to the caller), after conv->pre of every
 * group went through. */
static void work(imp_pqc_par_t *p, group_read_t *g, bool decode, const imp_pqc_conv_t *conv,
                 uint32_t k)
{
    outcome_t *o = &p->out[k];
    o->rc = SL_OK;
    o->failed = UINT32_MAX;
    o->ready = o->converted = false;
    for (uint32_t i = 0; decode && i < g->n && o->failed == UINT32_MAX; i++) {
        if (p->owner[i] != k) continue;
        o->rc = sl_pq_reader_next(g->rd[i], PQ_BATCH_ROWS, &g->bat[i], &o->err);
        if (o->rc != SL_OK) o->failed = i;
    }
    if (conv == NULL) return;
    bool ok = o->failed == UINT32_MAX;
    for (uint32_t i = 0; ok && i < g->n; i++)
        if (p->owner[i] == k && g->bat[i]->rows != conv->rows) ok = false;
    if (conv->pre != NULL) { /* every thread meets, whatever its decode did */
        o->ready = ok && conv->pre(conv->ctx, k);
        meet(p);
        for (uint32_t j = 0; j < p->threads; j++)
            ok &= p->out[j].ready;
    }
    if (ok) o->converted = conv->fn(conv->ctx, k);
}

/* A helper woken on the caller's CPU leaves that CPU out of its own set
 * (the others it was started with), so that the two run side by side.
 * Left to itself the kernel keeps them together: each wakes the other
 * once a job, a wake-up is placed on the waker's CPU when no other CPU is
 * idle at that moment (on a loaded machine, or on 2 cores beside the
 * Python consumer), and a task that ran a moment ago is not moved by the
 * balancer; the job's two halves then run in turn, one thread's rate for
 * two threads' CPU (docs/BENCHMARKS.md "the two rates"). Only the CPU the
 * caller is on is left out, so on many cores the helper is all but free;
 * a syscall only when the caller is found on the helper's CPU. */
static void keep_off(helper_t *h, int caller_cpu)
{
    if (!h->can_steer || caller_cpu < 0 || caller_cpu == h->left_out) return;
    if (sched_getcpu() != caller_cpu) return;
    cpu_set_t set = h->allowed;
    if (caller_cpu >= CPU_SETSIZE || !CPU_ISSET(caller_cpu, &set)) return;
    CPU_CLR(caller_cpu, &set);
    if (CPU_COUNT(&set) == 0) return; /* one CPU: nowhere else to go */
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0) h->left_out = caller_cpu;
}

static void *helper_main(void *arg)
{
    helper_t *h = arg;
    imp_pqc_par_t *p = h->par;
    uint64_t seen = 0;
    h->can_steer = pthread_getaffinity_np(pthread_self(), sizeof h->allowed, &h->allowed) == 0;
    h->left_out = -1;
    sl_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            sl_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        if (p->part[h->k] != PART_FREE) continue; /* the caller took it */
        p->part[h->k] = PART_HELPER;
        p->pending++;
        group_read_t *g = p->g;
        bool decode = p->decode;
        const imp_pqc_conv_t *conv = p->conv;
        int caller_cpu = p->caller_cpu;
        sl_mutex_unlock(&p->mu);
        keep_off(h, caller_cpu);
        work(p, g, decode, conv, h->k);
        sl_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    sl_mutex_unlock(&p->mu);
    return NULL;
}

void imp_pqc_par_destroy(imp_pqc_par_t *p)
{
    if (p == NULL) return;
    sl_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->go);
    sl_mutex_unlock(&p->mu);
    for (uint32_t k = 1; p->h != NULL && k < p->threads; k++)
        if (p->h[k].started) pthread_join(p->h[k].th, NULL);
    /* after the readers that used them: the caller destroys its readers
     * first (imp_pqc_destroy), and none is decoding once joined */
    for (uint32_t k = 1; p->scratch != NULL && k < p->threads; k++)
        sl_pq_scratch_destroy(p->scratch[k]);
    pthread_cond_destroy(&p->met);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    sl_mutex_destroy(&p->mu);
    const sl_allocator_t *a = p->a;
    sl_free(a, p->scratch, p->threads * sizeof *p->scratch);
    sl_free(a, p->h, p->threads * sizeof *p->h);
    sl_free(a, p->out, p->threads * sizeof *p->out);
    sl_free(a, p->part, p->threads);
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
    sl_mutex_init(&p->mu);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_cond_init(&p->met, NULL);
    p->scratch = sl_calloc(a, threads, sizeof *p->scratch);
    p->h = sl_calloc(a, threads, sizeof *p->h);
    p->out = sl_calloc(a, threads, sizeof *p->out);
    p->part = sl_calloc(a, threads, 1);
    p->owner = sl_calloc(a, cap, 1);
    p->bytes = sl_calloc(a, cap, sizeof *p->bytes);
    p->load = sl_calloc(a, threads, sizeof *p->load);
    bool ok = p->scratch && p->h && p->out && p->part && p->owner && p->bytes && p->load;
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
                        sl_pq_scratch_t *own, const uint32_t *unit)
{
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    uint32_t n = g->n < p->cap ? g->n : p->cap;
    memset(p->bytes, 0, n * sizeof *p->bytes);
    for (uint32_t i = 0; i < n; i++) { /* a unit's bytes at its first reader */
        const sl_pq_chunk_t *ch = &m->row_groups[gi].chunks[g->col[i] - m->columns];
        uint32_t u = unit[i] < n ? unit[i] : i;
        /* its cost: the bytes it decodes, and per value the work of
         * levels, a gather and its conversion (about 8 bytes' worth: a
         * dictionary-coded column's few bytes a row would otherwise look
         * nearly free beside a plain one's) */
        p->bytes[u] += (ch->total_uncompressed > 0 ? (uint64_t)ch->total_uncompressed : 0) +
                       8 * (ch->num_values > 0 ? (uint64_t)ch->num_values : 0) + 1;
        p->owner[i] = UINT8_MAX; /* not yet */
    }
    memset(p->load, 0, p->threads * sizeof *p->load);
    /* units largest first, each to the group with the fewest bytes so far
     * (the lowest group on a tie: the same split for the same row group);
     * + 1 a reader: an empty chunk still costs one */
    for (;;) {
        uint32_t big = UINT32_MAX;
        for (uint32_t i = 0; i < n; i++)
            if ((unit[i] >= n || unit[i] == i) && p->owner[i] == UINT8_MAX &&
                (big == UINT32_MAX || p->bytes[i] > p->bytes[big]))
                big = i;
        if (big == UINT32_MAX) break;
        uint32_t least = 0;
        for (uint32_t k = 1; k < p->threads; k++)
            if (p->load[k] < p->load[least]) least = k;
        p->owner[big] = (uint8_t)least;
        p->load[least] += p->bytes[big];
    }
    for (uint32_t i = 0; i < n; i++) {
        if (unit[i] < n && unit[i] != i) p->owner[i] = p->owner[unit[i]];
        sl_pq_reader_set_scratch(g->rd[i], p->owner[i] == 0 ? own : p->scratch[p->owner[i]]);
    }
}

uint32_t imp_pqc_par_group(const imp_pqc_par_t *p, uint32_t reader)
{
    return reader < p->cap ? p->owner[reader] : 0;
}

bool imp_pqc_par_shared(const imp_pqc_par_t *p, const group_read_t *g)
{
    return g->n >= 2 && g->n <= p->cap;
}

/* Post a job, run aside (NULL: none) on this thread while the helpers
 * work, do group 0's part, and join the helpers (one wake and one signal
 * each). @return whether every group converted (conv NULL: true). */
static bool run_job(imp_pqc_par_t *p, group_read_t *g, bool decode, const imp_pqc_conv_t *conv,
                    imp_pqc_aside_t *aside)
{
    sl_mutex_lock(&p->mu);
    p->g = g;
    p->decode = decode;
    p->conv = conv;
    p->caller_cpu = sched_getcpu();
    p->gen++;
    memset(p->part, PART_FREE, p->threads);
    p->pending = 0;
    pthread_cond_broadcast(&p->go);
    sl_mutex_unlock(&p->mu);
    /* before group 0's part: it touches none of the job's readers or
     * arrays (imp_pqc_aside_t), and the helpers are busy meanwhile */
    if (aside != NULL) aside->rc = aside->fn(aside->ctx, &aside->err);
    work(p, g, decode, conv, 0);
    /* a part no helper has begun is done here rather than waited for (a
     * helper not yet running, behind other threads on its CPU, would
     * cost a wait and a wake-up); not with a meeting, where every
     * group's thread has to come */
    bool take = conv == NULL || conv->pre == NULL;
    sl_mutex_lock(&p->mu);
    for (uint32_t k = 1; take && k < p->threads; k++)
        if (p->part[k] == PART_FREE) p->part[k] = PART_CALLER;
    sl_mutex_unlock(&p->mu);
    for (uint32_t k = 1; take && k < p->threads; k++)
        if (p->part[k] == PART_CALLER) work(p, g, decode, conv, k);
    sl_mutex_lock(&p->mu);
    for (;;) { /* every part taken, and the helpers' done */
        bool all = p->pending == 0;
        for (uint32_t k = 1; all && k < p->threads; k++)
            all = p->part[k] != PART_FREE;
        if (all) break;
        sl_cond_wait(&p->done, &p->mu);
    }
    p->g = NULL;
    p->conv = NULL;
    sl_mutex_unlock(&p->mu);
    bool all = true;
    for (uint32_t k = 0; k < p->threads; k++)
        all &= p->out[k].converted;
    return conv == NULL || all;
}

sl_err_t imp_pqc_par_next(imp_pqc_par_t *p, group_read_t *g, const char *input, uint32_t gi,
                          imp_pqc_conv_t *conv, imp_pqc_aside_t *aside, uint32_t *rows,
                          sl_error_t *err)
{
    /* one reader has nothing to share; more than assigned cannot happen */
    if (!imp_pqc_par_shared(p, g)) {
        if (conv != NULL) conv->ok = false;
        if (aside != NULL) aside->rc = aside->fn(aside->ctx, &aside->err);
        return imp_pq_group_next(g, input, gi, rows, err);
    }
    *rows = 0;
    bool converted = run_job(p, g, true, conv, aside);
    /* the error a single thread meets first: the first failed reader's,
     * unless an earlier column's rows disagree (imp_pq_group_next) */
    uint32_t first = UINT32_MAX, fk = 0;
    for (uint32_t k = 0; k < p->threads; k++)
        if (p->out[k].failed < first) {
            first = p->out[k].failed;
            fk = k;
        }
    if (conv != NULL) conv->ok = converted && first == UINT32_MAX;
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

void imp_pqc_par_convert(imp_pqc_par_t *p, group_read_t *g, imp_pqc_conv_t *conv)
{
    conv->ok = imp_pqc_par_shared(p, g) && run_job(p, g, false, conv, NULL);
}
