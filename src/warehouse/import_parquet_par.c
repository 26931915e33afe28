/* A row group's column readers decoded, and their batches converted, on
 * several threads (pq_internal.h, imp_pqc_par_t; docs/PARQUET.md "Decoding
 * on several threads"): the worker's Parquet source reads a split on its
 * reader thread, and its decode (pages decompressed, levels and values
 * decoded, dictionaries mapped) and the conversion of the batches into the
 * stripe are nearly all of its CPU. With N threads the projected readers of
 * a row group are split into GROUPS_PER_THREAD x N groups of about the same
 * cost, the readers one slot reads (or whose slots write one output array)
 * always in the same group. A job is one batch: the calling thread and
 * N - 1 helpers take the groups one at a time (pick: each its own first),
 * each decoding a group's readers' next batch and then (when the caller
 * planned the batch's run, imp_pqc_conv_t) converting its slots into the
 * stripe, until none is left; the caller then waits only for groups a helper is
 * still on. So no thread waits for another to begin: a helper not running
 * when the job is posted (behind other threads on its CPU, or woken on the
 * caller's own) leaves its share to the caller instead of making it wait
 * for a wake-up, and a helper found on the caller's CPU moves off it
 * (keep_off).
 *
 * What each thread writes is its own: a reader (its pages, dictionary,
 * batch) is decoded by one thread per batch, the readers of a group use the
 * page scratch and ZSTD context (sl_pq_scratch_t) of the thread that took
 * the group (set as it takes it), and the slots of a group write arrays
 * (or, labels and dense values being row-major, all the numeric columns) no
 * other group writes. Shared and only read: the file's metadata, the byte
 * source (pread; an object's prefetched windows, or the store's ranged
 * reads) and the value maps (pure functions of their values). */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/lock.h"
#include "common/mem.h"
#include "pq_cols_internal.h"

/* Groups a thread: more groups than threads, so that a thread done with
 * one takes another, and a helper preempted inside a group leaves the
 * caller a smaller part to wait for (2 to 8 measured alike on the criteo
 * job, docs/BENCHMARKS.md "join22"). */
#define GROUPS_PER_THREAD 3u

/* How long the caller waits for a helper's group before it lets a helper
 * kept off its CPU (keep_off) come back to it: a helper that long on a
 * group of a few hundred microseconds is not running, behind other work
 * on its CPU, while the caller's is about to idle. */
#define FREE_AFTER_NS 200000u

typedef struct helper {
    struct imp_pqc_par *par;
    uint32_t t; /* its thread number (the caller is 0) */
    pthread_t th;
    bool started;
    /* keeping off the caller's CPU (keep_off): the CPUs the helper was
     * started with, and the one it last left out of them (-1: none;
     * guarded by the par's mu) */
    cpu_set_t allowed;
    bool can_steer;
    int left_out;
} helper_t;

/* The outcome of one group's part of a job. */
typedef struct outcome {
    sl_err_t rc;
    uint32_t failed; /* the reader that failed (UINT32_MAX: none) */
    bool ok;         /* its batches decoded, each of the planned rows */
    bool ready;      /* the job's conv->pre of this group's slots went through */
    bool converted;  /* the job's conversion of this group's slots went through */
    sl_error_t err;
} outcome_t;

struct imp_pqc_par {
    const sl_allocator_t *a;
    uint32_t threads;          /* the caller and its helpers */
    uint32_t groups;           /* GROUPS_PER_THREAD a thread, at most 255 */
    sl_pq_scratch_t **scratch; /* [threads]: [0] the caller's (set by assign) */
    helper_t *h;               /* [threads] ([0] unused) */
    outcome_t *out;            /* [groups]: group k's, written by the thread that took it */
    uint8_t *owner;            /* [cap]: the group of each reader */
    uint32_t *order;           /* [groups]: the groups by their cost, largest first */
    uint64_t *bytes, *load;    /* [cap] a unit's cost; [groups] a group's */
    uint32_t cap;
    /* mu guards the job: gen, stop, the taking (taken, by, did,
     * finished, pass) and the job itself (g, decode, conv, caller_cpu),
     * which the caller sets and the helpers read between a go and the
     * job's end; a group's outcome is read by the others only after its
     * done was counted (under mu) */
    sl_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen; /* jobs posted */
    bool stop;
    uint32_t taken;             /* groups taken in this pass */
    uint8_t *by;                /* [groups]: the thread that took it in this pass (none: 255) */
    uint8_t *did;               /* [groups]: the thread that took it in the last first pass */
    uint32_t finished;          /* groups done in this pass */
    uint32_t pass;              /* 0: decode (and convert); 1: convert, after every pre */
    uint32_t passes;            /* 1, or 2 when conv has a pre (a meeting) */
    group_read_t *g;            /* the row group being read (valid during the job) */
    bool decode;                /* the job decodes the next batch */
    const imp_pqc_conv_t *conv; /* and then converts it (NULL: not) */
    int caller_cpu;             /* the CPU the caller posted the job on (-1: unknown) */
};

/* Group k's first pass, on thread t: decode the next batch of its readers
 * of g, in reader order, stopping at the first that fails; then, without
 * a pre, convert its slots when every one of its batches holds the rows
 * the conversion was planned for (else leave it to the caller); with a
 * pre, run it (the conversion waits for the second pass). */
static void first_pass(imp_pqc_par_t *p, uint32_t k, uint32_t t)
{
    group_read_t *g = p->g;
    const imp_pqc_conv_t *conv = p->conv;
    outcome_t *o = &p->out[k];
    o->rc = SL_OK;
    o->failed = UINT32_MAX;
    o->ok = o->ready = o->converted = false;
    sl_pq_scratch_t *own = p->scratch[t];
    for (uint32_t i = 0; p->decode && i < g->n && o->failed == UINT32_MAX; i++) {
        if (p->owner[i] != k) continue;
        sl_pq_reader_set_scratch(g->rd[i], own);
        o->rc = sl_pq_reader_next(g->rd[i], PQ_BATCH_ROWS, &g->bat[i], &o->err);
        if (o->rc != SL_OK) o->failed = i;
    }
    if (conv == NULL) return;
    bool ok = o->failed == UINT32_MAX;
    for (uint32_t i = 0; ok && i < g->n; i++)
        if (p->owner[i] == k && g->bat[i]->rows != conv->rows) ok = false;
    o->ok = ok;
    if (conv->pre != NULL)
        o->ready = ok && conv->pre(conv->ctx, k);
    else if (ok)
        o->converted = conv->fn(conv->ctx, k);
}

/* Group k's second pass (a conv with a pre, every group's first pass
 * done): its conversion, when every group's pre went through. */
static void second_pass(imp_pqc_par_t *p, uint32_t k)
{
    bool ok = p->out[k].ok;
    for (uint32_t j = 0; ok && j < p->groups; j++)
        ok = p->out[j].ready;
    if (ok) p->out[k].converted = p->conv->fn(p->conv->ctx, k);
}

/* The group thread t takes next (one is left): the largest of its own
 * (those it decoded in the last job's first pass, or in this job's for
 * the second), so that a column stays with one thread from batch to
 * batch (its pages, dictionary and batch in that CPU's cache) and moves
 * only when a thread falls behind, else the largest another thread has
 * not begun. */
static uint32_t pick(const imp_pqc_par_t *p, uint32_t t) SL_REQUIRES(p->mu)
{
    const uint8_t *mine = p->did;
    uint32_t other = UINT32_MAX;
    for (uint32_t j = 0; j < p->groups; j++) {
        uint32_t k = p->order[j];
        if (p->by[k] != UINT8_MAX) continue;
        if (mine[k] == t) return k;
        if (other == UINT32_MAX) other = k;
    }
    return other;
}

/* Thread t takes the job's groups, one at a time, until none is left to
 * take; with two passes it waits for every first pass before it takes a
 * second (the meeting). Called and returns with mu held. */
static void take_groups(imp_pqc_par_t *p, uint32_t t, uint64_t job) SL_REQUIRES(p->mu)
{
    while (p->gen == job) {
        if (p->taken < p->groups) {
            uint32_t k = pick(p, t), pass = p->pass;
            p->by[k] = (uint8_t)t;
            if (pass == 0) p->did[k] = (uint8_t)t;
            p->taken++;
            sl_mutex_unlock(&p->mu);
            if (pass == 0)
                first_pass(p, k, t);
            else
                second_pass(p, k);
            sl_mutex_lock(&p->mu);
            if (++p->finished < p->groups) continue;
            if (p->pass + 1 < p->passes) { /* every pre done: the conversions */
                p->pass++;
                p->taken = p->finished = 0;
                memset(p->by, UINT8_MAX, p->groups);
            }
            pthread_cond_broadcast(&p->done);
        } else if (p->pass + 1 < p->passes) {
            sl_cond_wait(&p->done, &p->mu); /* the others' first passes */
        } else {
            return;
        }
    }
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
static bool on_caller_cpu(const helper_t *h, int caller_cpu)
{
    return h->can_steer && caller_cpu >= 0 && caller_cpu != h->left_out &&
           sched_getcpu() == caller_cpu;
}

static bool keep_off(helper_t *h, int caller_cpu)
{
    cpu_set_t set = h->allowed;
    if (caller_cpu >= CPU_SETSIZE || !CPU_ISSET(caller_cpu, &set)) return false;
    CPU_CLR(caller_cpu, &set);
    if (CPU_COUNT(&set) == 0) return false; /* one CPU: nowhere else to go */
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/* Every helper kept off the caller's CPU may come back to it (the
 * caller waits for a helper that is not running): the kernel may then
 * run it on the caller's idle CPU; a helper woken there again next job
 * leaves it again. */
static void free_helpers(imp_pqc_par_t *p) SL_REQUIRES(p->mu)
{
    for (uint32_t k = 1; k < p->threads; k++) {
        helper_t *h = &p->h[k];
        if (h->left_out < 0) continue;
        if (pthread_setaffinity_np(h->th, sizeof h->allowed, &h->allowed) == 0) h->left_out = -1;
    }
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
        /* also with nothing left to take: a helper woken on the caller's
         * CPU runs only once the caller sleeps, when the caller has taken
         * every group */
        int caller_cpu = p->caller_cpu;
        if (on_caller_cpu(h, caller_cpu)) { /* not under mu: it may wait for a CPU */
            sl_mutex_unlock(&p->mu);
            bool off = keep_off(h, caller_cpu);
            sl_mutex_lock(&p->mu);
            if (off) h->left_out = caller_cpu;
        }
        take_groups(p, h->t, seen);
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
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    sl_mutex_destroy(&p->mu);
    const sl_allocator_t *a = p->a;
    sl_free(a, p->scratch, p->threads * sizeof *p->scratch);
    sl_free(a, p->h, p->threads * sizeof *p->h);
    sl_free(a, p->out, p->groups * sizeof *p->out);
    sl_free(a, p->order, p->groups * sizeof *p->order);
    sl_free(a, p->by, p->groups);
    sl_free(a, p->did, p->groups);
    sl_free(a, p->owner, p->cap);
    sl_free(a, p->bytes, p->cap * sizeof *p->bytes);
    sl_free(a, p->load, p->groups * sizeof *p->load);
    sl_free(a, p, sizeof *p);
}

sl_err_t imp_pqc_par_new(const sl_allocator_t *a, uint32_t threads, uint32_t cap,
                         imp_pqc_par_t **out, sl_error_t *err)
{
    *out = NULL;
    if (threads < 2 || cap == 0) return SL_OK; /* one thread: the caller's alone */
    if (threads > 255) threads = 255;
    imp_pqc_par_t *p = sl_calloc(a, 1, sizeof *p);
    if (p == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for Parquet decode threads");
    p->a = a;
    p->threads = threads;
    /* owner and the slots' groups are bytes */
    p->groups = threads * GROUPS_PER_THREAD < 255 ? threads * GROUPS_PER_THREAD : 255;
    p->cap = cap;
    p->passes = 1;
    sl_mutex_init(&p->mu);
    pthread_cond_init(&p->go, NULL);
    sl_clock_cond_init(&p->done); /* timed on the monotonic clock */
    p->scratch = sl_calloc(a, threads, sizeof *p->scratch);
    p->h = sl_calloc(a, threads, sizeof *p->h);
    p->out = sl_calloc(a, p->groups, sizeof *p->out);
    p->order = sl_calloc(a, p->groups, sizeof *p->order);
    p->by = sl_calloc(a, p->groups, 1);
    p->did = sl_calloc(a, p->groups, 1);
    p->owner = sl_calloc(a, cap, 1);
    p->bytes = sl_calloc(a, cap, sizeof *p->bytes);
    p->load = sl_calloc(a, p->groups, sizeof *p->load);
    bool ok = p->scratch && p->h && p->out && p->order && p->by && p->did && p->owner && p->bytes &&
              p->load;
    for (uint32_t k = 1; ok && k < threads; k++)
        ok = (p->scratch[k] = sl_pq_scratch_new(a)) != NULL;
    if (!ok) {
        imp_pqc_par_destroy(p);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for Parquet decode threads");
    }
    for (uint32_t k = 1; k < threads; k++) {
        p->h[k] = (helper_t){.par = p, .t = k};
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
    p->scratch[0] = own; /* no job runs: the helpers read it only in one */
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
    memset(p->load, 0, p->groups * sizeof *p->load);
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
        for (uint32_t k = 1; k < p->groups; k++)
            if (p->load[k] < p->load[least]) least = k;
        p->owner[big] = (uint8_t)least;
        p->load[least] += p->bytes[big];
    }
    for (uint32_t i = 0; i < n; i++)
        if (unit[i] < n && unit[i] != i) p->owner[i] = p->owner[unit[i]];
    /* the groups taken largest first (the lowest on a tie): the last ones
     * taken are the smallest, so that the threads end a job together */
    for (uint32_t k = 0; k < p->groups; k++) {
        uint32_t j = k;
        while (j > 0 && p->load[p->order[j - 1]] < p->load[k]) {
            p->order[j] = p->order[j - 1];
            j--;
        }
        p->order[j] = k;
    }
    /* the threads' own groups (until they take others) dealt out in that
     * order: about the same cost each */
    for (uint32_t j = 0; j < p->groups; j++)
        p->did[p->order[j]] = (uint8_t)(j % p->threads);
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
 * begin, take groups until none is left, and wait for those the helpers
 * took. @return whether every group converted (conv NULL: true). */
static bool run_job(imp_pqc_par_t *p, group_read_t *g, bool decode, const imp_pqc_conv_t *conv,
                    imp_pqc_aside_t *aside)
{
    sl_mutex_lock(&p->mu);
    p->g = g;
    p->decode = decode;
    p->conv = conv;
    p->caller_cpu = sched_getcpu();
    p->taken = p->finished = p->pass = 0;
    memset(p->by, UINT8_MAX, p->groups);
    p->passes = conv != NULL && conv->pre != NULL ? 2 : 1;
    uint64_t job = ++p->gen;
    pthread_cond_broadcast(&p->go);
    sl_mutex_unlock(&p->mu);
    /* before the caller's groups: it touches none of the job's readers or
     * arrays (imp_pqc_aside_t), and the helpers are busy meanwhile */
    if (aside != NULL) aside->rc = aside->fn(aside->ctx, &aside->err);
    sl_mutex_lock(&p->mu);
    take_groups(p, 0, job);
    if (p->finished < p->groups) { /* the groups the helpers are still on */
        struct timespec free_at = sl_clock_deadline_ns(FREE_AFTER_NS);
        while (p->finished < p->groups)
            if (sl_cond_timedwait(&p->done, &p->mu, &free_at) == ETIMEDOUT) break;
        if (p->finished < p->groups) free_helpers(p);
        while (p->finished < p->groups)
            sl_cond_wait(&p->done, &p->mu);
    }
    p->g = NULL;
    p->conv = NULL;
    sl_mutex_unlock(&p->mu);
    bool all = true;
    for (uint32_t k = 0; k < p->groups; k++)
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
    for (uint32_t k = 0; k < p->groups; k++)
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
