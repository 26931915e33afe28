/* The synthetic table generator: seeded rows with a known structure.
 *
 * Rows come in arrival order, as a logger would write them: a number of
 * sessions are active at once (spec.active_sessions), each row belongs to
 * one of them drawn at random, and a session that has produced its length
 * is replaced by a new one. Per-session (user) features keep their value for
 * every row of a session; per-sample (item) features are drawn per row. So
 * the rows of a session are spread out unless the writer clusters them,
 * which is what session clustering and storage dedup are measured against.
 *
 * Every file is a pure function of (spec, partition, file): its PRNG is
 * seeded from those, so files are generated in parallel and the table is
 * the same for any thread count. Ids follow a log-uniform (Zipf-like) law,
 * scrambled by a hash so that frequent ids are not the small numbers. */
#include "common/err.h"
#include "import_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DAY_SECONDS 86400
#define BASE_EPOCH 1767225600ll /* 2026-01-01T00:00:00Z */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* splitmix64 */
static uint64_t next_u64(uint64_t *s)
{
    return mix64(*s += 0x9e3779b97f4a7c15ull);
}

static double next_unit(uint64_t *s) /* [0, 1) */
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

static uint64_t next_below(uint64_t *s, uint64_t n)
{
    return n == 0 ? 0 : next_u64(s) % n;
}

/* Log-uniform rank in [0, n): rank r has probability ~ 1/(r+1). */
static uint64_t zipf_rank(uint64_t *s, uint64_t n)
{
    if (n <= 1) return 0;
    uint64_t r = (uint64_t)exp(next_unit(s) * log((double)n + 1.0)) - 1;
    return r < n ? r : n - 1;
}

/* ==== presets ==== */

static sl_wh_gen_feature_t feat(const char *name, sl_wh_kind_t kind, bool per_session,
                                uint32_t min_len, uint32_t max_len, uint64_t vocab, float missing)
{
    return (sl_wh_gen_feature_t){name, kind, per_session, min_len, max_len, vocab, missing, false};
}

/* Criteo Kaggle cardinalities and rates of empty values, rounded. */
static const uint64_t criteo_vocab[26] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};
static const float criteo_sparse_missing[26] = {
    0, 0, 0.03f, 0.03f, 0, 0.12f, 0,     0,     0,     0, 0,     0.03f, 0,
    0, 0, 0.03f, 0,     0, 0.44f, 0.44f, 0.03f, 0.44f, 0, 0.03f, 0.44f, 0.44f};
static const uint64_t criteo_scale[13] = {100,  5000, 65535, 100, 2000000, 50000, 1000,
                                          1000, 5000, 10,    100, 1000,    1000};
static const float criteo_dense_missing[13] = {0.45f, 0,     0.21f, 0.22f, 0.03f, 0.22f, 0.04f,
                                               0,     0.04f, 0.45f, 0.04f, 0.77f, 0.22f};

static const char *const criteo_names[39] = {
    "I1",  "I2",  "I3",  "I4",  "I5",  "I6",  "I7",  "I8",  "I9",  "I10", "I11", "I12", "I13",
    "C1",  "C2",  "C3",  "C4",  "C5",  "C6",  "C7",  "C8",  "C9",  "C10", "C11", "C12", "C13",
    "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26"};

sl_err_t sl_wh_gen_preset(const char *name, uint64_t rows, uint64_t seed, sl_wh_gen_spec_t *spec,
                          sl_error_t *err)
{
    memset(spec, 0, sizeof *spec);
    spec->rows = rows;
    spec->seed = seed;
    spec->partitions = 1;
    spec->files = 1;
    if (name != NULL && strcmp(name, "criteo") == 0) {
        spec->preset = "criteo";
        spec->session_length = 1;
        spec->active_sessions = 1;
        spec->positive_rate = 0.256f; /* Criteo's click rate */
        for (int i = 0; i < 13; i++)
            spec->features[spec->num_features++] = feat(criteo_names[i], SL_WH_DENSE, false, 0, 0,
                                                        criteo_scale[i], criteo_dense_missing[i]);
        for (int i = 0; i < 26; i++) {
            sl_wh_gen_feature_t *f = &spec->features[spec->num_features++];
            *f = feat(criteo_names[13 + i], SL_WH_SPARSE, false, 1, 1, criteo_vocab[i],
                      criteo_sparse_missing[i]);
            f->hashed = true;
        }
        return SL_OK;
    }
    if (name != NULL && strcmp(name, "sessions") == 0) {
        spec->preset = "sessions";
        spec->session_length = 16;
        spec->active_sessions = 4096;
        spec->positive_rate = 0.1f;
        sl_wh_gen_feature_t f[] = {
            feat("user_id", SL_WH_SPARSE, true, 1, 1, 10000000, 0),
            feat("user_hist", SL_WH_SPARSE, true, 90, 110, 1000000, 0),
            feat("user_cat", SL_WH_SPARSE, true, 20, 20, 1000, 0),
            feat("item_id", SL_WH_SPARSE, false, 1, 1, 1000000, 0),
            feat("item_cat", SL_WH_SPARSE, false, 1, 1, 1000, 0),
            feat("item_tags", SL_WH_SPARSE, false, 1, 5, 10000, 0),
            feat("user_age", SL_WH_DENSE, true, 0, 0, 80, 0.1f),
            feat("user_clicks", SL_WH_DENSE, true, 0, 0, 10000, 0),
            feat("item_clicks", SL_WH_DENSE, false, 0, 0, 100000, 0),
            feat("position", SL_WH_DENSE, false, 0, 0, 50, 0),
        };
        memcpy(spec->features, f, sizeof f);
        spec->num_features = sizeof f / sizeof f[0];
        return SL_OK;
    }
    return sl_error_set(err, SL_ERR_NOT_FOUND, "unknown preset '%s' (criteo, sessions)",
                        name ? name : "(null)");
}

static const char *label_name(const sl_wh_gen_spec_t *spec)
{
    return spec->preset != NULL && strcmp(spec->preset, "sessions") == 0 ? "click" : "label";
}

static sl_err_t check_spec(const sl_wh_gen_spec_t *spec, sl_error_t *err)
{
    if (spec->num_features > SL_WH_GEN_MAX_FEATURES)
        return sl_error_set(err, SL_ERR_INVALID, "gen: %u features (max %d)", spec->num_features,
                            SL_WH_GEN_MAX_FEATURES);
    for (uint32_t i = 0; i < spec->num_features; i++) {
        const sl_wh_gen_feature_t *f = &spec->features[i];
        if (f->kind != SL_WH_DENSE && (f->min_len > f->max_len || f->max_len > (1u << 20)))
            return sl_error_set(err, SL_ERR_INVALID, "gen: feature '%s': lengths [%u, %u]", f->name,
                                f->min_len, f->max_len);
    }
    if (spec->session_length > (1u << 20) || spec->active_sessions > (1u << 20))
        return sl_error_set(err, SL_ERR_INVALID,
                            "gen: session length %u / active sessions %u "
                            "too large (max 2^20)",
                            spec->session_length, spec->active_sessions);
    return SL_OK;
}

sl_err_t sl_wh_gen_schema(const sl_wh_gen_spec_t *spec, const sl_allocator_t *a,
                          sl_wh_schema_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_err_t rc = check_spec(spec, err);
    if (rc != SL_OK) return rc;
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "gen: schema");
    rc = sl_wh_schema_add_label(s, label_name(spec), err);
    for (uint32_t i = 0; rc == SL_OK && i < spec->num_features; i++)
        rc = sl_wh_schema_add_feature(s, spec->features[i].name, spec->features[i].kind, err);
    if (rc == SL_OK) rc = sl_wh_schema_add_partition_key(s, "ds", err);
    if (rc != SL_OK) {
        sl_wh_schema_destroy(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void sl_wh_gen_partition_name(uint32_t p, char *buf, size_t cap)
{
    time_t t = (time_t)(BASE_EPOCH + (int64_t)p * DAY_SECONDS);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(buf, cap, "ds=%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

/* ==== the row iterator ==== */

/* The values of one feature for one row or one session. */
typedef struct gvalue {
    float dense;
    uint32_t len;
    int64_t *ids; /* [max_len] */
    float *w;     /* [max_len] weighted only */
} gvalue_t;

typedef struct gsession {
    int64_t id;
    uint32_t left;  /* rows still to come; 0: the slot is free */
    gvalue_t *vals; /* [num_features] (only per-session ones are used) */
} gsession_t;

struct sl_wh_gen_iter {
    const sl_allocator_t *a;
    sl_wh_gen_spec_t spec;
    uint64_t rng;
    uint64_t n, i; /* rows of this file, rows produced */
    int64_t first_sample_id;
    int64_t day_base;
    uint32_t K;           /* session slots */
    gsession_t *sessions; /* [K] */
    gvalue_t *row_vals;   /* [num_features] per-sample values */
    float label;
    float *dense;          /* [D] */
    sl_wh_idlist_t *lists; /* [S] */
    uint32_t D, S;
};

static void draw(sl_wh_gen_iter_t *it, uint32_t fi, gvalue_t *v)
{
    const sl_wh_gen_feature_t *f = &it->spec.features[fi];
    uint64_t *rng = &it->rng;
    bool missing = f->missing > 0 && next_unit(rng) < f->missing;
    if (f->kind == SL_WH_DENSE) {
        /* Integer counts with a heavy tail, like Criteo's I1..I13. */
        v->dense = missing ? NAN : (float)zipf_rank(rng, f->vocab ? f->vocab : 1);
        return;
    }
    v->len = missing ? 0 : f->min_len + (uint32_t)next_below(rng, f->max_len - f->min_len + 1);
    /* The salt keeps features' id spaces apart even for equal vocabularies. */
    uint64_t salt = mix64(fi + 0x51u);
    for (uint32_t k = 0; k < v->len; k++) {
        uint64_t r = zipf_rank(rng, f->vocab ? f->vocab : 1);
        uint64_t h = mix64(r ^ salt);
        v->ids[k] = f->hashed ? (int64_t)(h & 0xffffffffu) : (int64_t)(f->vocab ? h % f->vocab : 0);
        if (v->w != NULL) v->w[k] = (float)(1 + next_below(rng, 8)) * 0.25f;
    }
}

static bool alloc_vals(sl_wh_gen_iter_t *it, gvalue_t *vals)
{
    for (uint32_t f = 0; f < it->spec.num_features; f++) {
        const sl_wh_gen_feature_t *ft = &it->spec.features[f];
        if (ft->kind == SL_WH_DENSE) continue;
        size_t n = ft->max_len ? ft->max_len : 1;
        vals[f].ids = sl_alloc(it->a, n * sizeof(int64_t));
        if (vals[f].ids == NULL) return false;
        if (ft->kind == SL_WH_WEIGHTED && (vals[f].w = sl_alloc(it->a, n * sizeof(float))) == NULL)
            return false;
    }
    return true;
}

static void free_vals(sl_wh_gen_iter_t *it, gvalue_t *vals)
{
    if (vals == NULL) return;
    for (uint32_t f = 0; f < it->spec.num_features; f++) {
        size_t n = it->spec.features[f].max_len ? it->spec.features[f].max_len : 1;
        sl_free(it->a, vals[f].ids, n * sizeof(int64_t));
        sl_free(it->a, vals[f].w, n * sizeof(float));
    }
    sl_free(it->a, vals, (size_t)it->spec.num_features * sizeof *vals);
}

void sl_wh_gen_iter_destroy(sl_wh_gen_iter_t *it)
{
    if (it == NULL) return;
    for (uint32_t k = 0; it->sessions != NULL && k < it->K; k++)
        free_vals(it, it->sessions[k].vals);
    sl_free(it->a, it->sessions, (size_t)it->K * sizeof *it->sessions);
    free_vals(it, it->row_vals);
    sl_free(it->a, it->dense, (size_t)(it->D + 1) * sizeof *it->dense);
    sl_free(it->a, it->lists, (size_t)(it->S + 1) * sizeof *it->lists);
    sl_free(it->a, it, sizeof *it);
}

sl_err_t sl_wh_gen_iter_new(const sl_wh_gen_spec_t *spec, uint32_t partition, uint32_t file,
                            const sl_allocator_t *a, sl_wh_gen_iter_t **out, sl_error_t *err)
{
    *out = NULL;
    SL_FORWARD_IF_ERROR(check_spec(spec, err));
    uint32_t P = spec->partitions ? spec->partitions : 1, F = spec->files ? spec->files : 1;
    if (partition >= P || file >= F)
        return sl_error_set(err, SL_ERR_INVALID, "gen: file %u of partition %u out of range", file,
                            partition);
    sl_wh_gen_iter_t *it = sl_calloc(a, 1, sizeof *it);
    if (it == NULL) return sl_error_set(err, SL_ERR_NOMEM, "gen: iterator");
    it->a = a;
    it->spec = *spec;
    uint64_t files = (uint64_t)P * F, g = (uint64_t)partition * F + file;
    uint64_t base = spec->rows / files, extra = spec->rows % files;
    it->n = base + (g < extra);
    it->first_sample_id = (int64_t)(g * base + (g < extra ? g : extra));
    it->day_base = BASE_EPOCH + (int64_t)partition * DAY_SECONDS;
    it->rng = mix64(spec->seed ^ mix64(g + 1));
    it->K = spec->session_length > 1 ? (spec->active_sessions ? spec->active_sessions : 1) : 1;
    for (uint32_t f = 0; f < spec->num_features; f++) {
        if (spec->features[f].kind == SL_WH_DENSE)
            it->D++;
        else
            it->S++;
    }
    it->sessions = sl_calloc(a, it->K, sizeof *it->sessions);
    it->row_vals = sl_calloc(a, spec->num_features + 1, sizeof *it->row_vals);
    it->dense = sl_calloc(a, it->D + 1, sizeof *it->dense);
    it->lists = sl_calloc(a, it->S + 1, sizeof *it->lists);
    bool ok =
        it->sessions && it->row_vals && it->dense && it->lists && alloc_vals(it, it->row_vals);
    for (uint32_t k = 0; ok && k < it->K; k++) {
        it->sessions[k].vals = sl_calloc(a, spec->num_features + 1, sizeof(gvalue_t));
        ok = it->sessions[k].vals != NULL && alloc_vals(it, it->sessions[k].vals);
    }
    if (!ok) {
        sl_wh_gen_iter_destroy(it);
        return sl_error_set(err, SL_ERR_NOMEM, "gen: iterator buffers");
    }
    *out = it;
    return SL_OK;
}

uint64_t sl_wh_gen_iter_rows(const sl_wh_gen_iter_t *it)
{
    return it->n;
}

/* The label depends on the row, so that a model trained on a generated
 * table has something to learn: every id of a low-cardinality sparse
 * feature (vocabulary <= LEARNABLE_VOCAB: categories, not user or item ids,
 * whose embeddings a short training run could not learn) carries a hidden
 * propensity in [-1, 1) (a hash of the id); the row's click probability is
 * positive_rate scaled up or down by the propensities of those features'
 * first ids. */
#define LEARNABLE_VOCAB 10000

static double click_probability(const sl_wh_gen_iter_t *it)
{
    double p = it->spec.positive_rate, shift = 0;
    if (p <= 0 || p >= 1) return p;
    uint32_t counted = 0, s = 0;
    for (uint32_t f = 0; f < it->spec.num_features; f++) {
        const sl_wh_gen_feature_t *ft = &it->spec.features[f];
        if (ft->kind == SL_WH_DENSE) continue;
        const sl_wh_idlist_t *l = &it->lists[s++];
        if (ft->vocab > LEARNABLE_VOCAB || l->len == 0) continue;
        uint64_t h = mix64((uint64_t)l->ids[0] ^ 0x6c6162656cull);
        shift += (double)(h >> 11) * 0x1.0p-52 - 1.0;
        counted++;
    }
    if (counted == 0) return p;
    /* Symmetric around 0 (std ~0.58 whatever the count), so the mean rate
     * stays positive_rate: p ranges over [0.05 p, 1.95 p] (capped at 1). */
    double z = shift / sqrt((double)counted);
    z = z < -1 ? -1 : z > 1 ? 1 : z;
    double q = p * (1.0 + 0.95 * z);
    return q > 1 ? 1 : q;
}

bool sl_wh_gen_iter_next(sl_wh_gen_iter_t *it, sl_wh_row_t *row)
{
    if (it->i >= it->n) return false;
    int64_t sample_id = it->first_sample_id + (int64_t)it->i;
    uint32_t L = it->spec.session_length;
    gsession_t *sess = &it->sessions[it->K > 1 ? next_below(&it->rng, it->K) : 0];
    if (sess->left == 0) {
        /* A new session starts with this row: its id is this row's sample id. */
        sess->id = sample_id;
        sess->left = L > 1 ? 1 + (uint32_t)next_below(&it->rng, 2 * (uint64_t)L - 1) : 1;
        for (uint32_t f = 0; f < it->spec.num_features; f++)
            if (it->spec.features[f].per_session) draw(it, f, &sess->vals[f]);
    }
    sess->left--;
    uint32_t d = 0, s = 0;
    for (uint32_t f = 0; f < it->spec.num_features; f++) {
        const sl_wh_gen_feature_t *ft = &it->spec.features[f];
        gvalue_t *v = ft->per_session ? &sess->vals[f] : &it->row_vals[f];
        if (!ft->per_session) draw(it, f, v);
        if (ft->kind == SL_WH_DENSE)
            it->dense[d++] = v->dense;
        else
            it->lists[s++] = (sl_wh_idlist_t){v->len, v->ids, v->w};
    }
    it->label = next_unit(&it->rng) < click_probability(it) ? 1.0f : 0.0f;
    row->sample_id = sample_id;
    row->session_id = sess->id;
    /* Arrival times spread over the partition's day, increasing. */
    row->timestamp = it->day_base + (int64_t)((it->i * DAY_SECONDS) / (it->n ? it->n : 1));
    row->labels = &it->label;
    row->dense = it->dense;
    row->sparse = it->lists;
    it->i++;
    return true;
}

/* ==== writing a table ==== */

sl_wh_gen_opts_t sl_wh_gen_opts_default(void)
{
    sl_wh_gen_opts_t o;
    memset(&o, 0, sizeof o);
    o.writer = sl_wh_writer_opts_default();
    return o;
}

typedef struct gshared {
    const char *dir;
    const sl_wh_gen_spec_t *spec;
    const sl_wh_gen_opts_t *o;
    const sl_wh_schema_t *schema;
    uint32_t files_per_part, njobs;
    atomic_uint next, running, files_done;
    atomic_bool stop;
    atomic_uint_fast64_t rows, bytes_out;
    pthread_mutex_t lock;
    sl_wh_write_stats_t total;
    sl_err_t rc;
    uint32_t err_job;
    sl_error_t err;
} gshared_t;

static sl_err_t gen_file(gshared_t *sh, uint32_t job, sl_wh_write_stats_t *st, sl_error_t *err)
{
    uint32_t p = job / sh->files_per_part, f = job % sh->files_per_part;
    char part[32], path[4200];
    sl_wh_gen_partition_name(p, part, sizeof part);
    sl_err_t rc = imp_make_dirs(sh->dir, part, err);
    if (rc != SL_OK) return rc;
    snprintf(path, sizeof path, "%s/%s/part-%05u%s", sh->dir, part, f, SL_WH_FILE_EXT);
    sl_wh_gen_iter_t *it = NULL;
    sl_wh_writer_t *w = NULL;
    if ((rc = sl_wh_gen_iter_new(sh->spec, p, f, sh->o->allocator, &it, err)) != SL_OK) return rc;
    if ((rc = sl_wh_writer_open(path, sh->schema, &sh->o->writer, &w, err)) != SL_OK) {
        sl_wh_gen_iter_destroy(it);
        return rc;
    }
    sl_wh_row_t row;
    uint64_t pending = 0;
    while (rc == SL_OK && sl_wh_gen_iter_next(it, &row)) {
        rc = sl_wh_writer_append_row(w, &row, err);
        if (++pending == 4096) {
            atomic_fetch_add(&sh->rows, pending);
            pending = 0;
            if (atomic_load(&sh->stop)) break;
        }
    }
    atomic_fetch_add(&sh->rows, pending);
    sl_wh_gen_iter_destroy(it);
    if (rc != SL_OK || atomic_load(&sh->stop)) {
        sl_wh_writer_abort(w);
        return rc;
    }
    rc = sl_wh_writer_close(w, st, err);
    if (rc == SL_OK) atomic_fetch_add(&sh->bytes_out, st->file_bytes);
    return rc;
}

static void *gen_worker(void *arg)
{
    gshared_t *sh = arg;
    for (;;) {
        uint32_t j = atomic_fetch_add(&sh->next, 1);
        if (j >= sh->njobs || atomic_load(&sh->stop)) break;
        sl_wh_write_stats_t st = {0};
        sl_error_t e = {0};
        sl_err_t rc = gen_file(sh, j, &st, &e);
        pthread_mutex_lock(&sh->lock);
        if (rc != SL_OK) {
            atomic_store(&sh->stop, true);
            if (sh->rc == SL_OK || j < sh->err_job) {
                sh->rc = rc;
                sh->err_job = j;
                sh->err = e;
            }
        }
        sh->total.rows += st.rows;
        sh->total.stripes += st.stripes;
        sh->total.file_bytes += st.file_bytes;
        sh->total.raw_bytes += st.raw_bytes;
        sh->total.stored_bytes += st.stored_bytes;
        sh->total.dedup_rows += st.dedup_rows;
        sh->total.dedup_unique += st.dedup_unique;
        pthread_mutex_unlock(&sh->lock);
        atomic_fetch_add(&sh->files_done, 1);
    }
    atomic_fetch_sub(&sh->running, 1);
    return NULL;
}

static void gen_report(gshared_t *sh, double t0)
{
    if (sh->o->on_progress == NULL) return;
    uint64_t rows = atomic_load(&sh->rows);
    sl_wh_import_progress_t p = {.rows_read = rows,
                                 .rows_written = rows,
                                 .bytes_out = atomic_load(&sh->bytes_out),
                                 .files_done = atomic_load(&sh->files_done),
                                 .files_total = sh->njobs,
                                 .seconds = sl_clock_s() - t0};
    sh->o->on_progress(sh->o->progress_ctx, &p);
}

sl_err_t sl_wh_gen_table(const char *dir, const sl_wh_gen_spec_t *spec,
                         const sl_wh_gen_opts_t *opts, sl_wh_write_stats_t *stats, sl_error_t *err)
{
    double t0 = sl_clock_s();
    sl_wh_gen_opts_t o = opts ? *opts : sl_wh_gen_opts_default();
    if (stats != NULL) memset(stats, 0, sizeof *stats);
    sl_wh_schema_t *schema = NULL;
    sl_err_t rc = sl_wh_gen_schema(spec, o.allocator, &schema, err);
    if (rc != SL_OK) return rc;
    if ((rc = sl_wh_table_create(dir, schema, err)) != SL_OK) {
        sl_wh_schema_destroy(schema);
        return sl_error_prefix(err, "table %s: ", dir);
    }
    gshared_t *sh = sl_calloc(o.allocator, 1, sizeof *sh);
    if (sh == NULL) {
        sl_wh_schema_destroy(schema);
        return sl_error_set(err, SL_ERR_NOMEM, "gen");
    }
    sh->dir = dir;
    sh->spec = spec;
    sh->o = &o;
    sh->schema = schema;
    sh->files_per_part = spec->files ? spec->files : 1;
    uint64_t njobs = (uint64_t)(spec->partitions ? spec->partitions : 1) * sh->files_per_part;
    if (njobs > 100000) {
        sl_free(o.allocator, sh, sizeof *sh);
        sl_wh_schema_destroy(schema);
        return sl_error_set(err, SL_ERR_INVALID, "gen: %llu files is too many (max 100000)",
                            (unsigned long long)njobs);
    }
    sh->njobs = (uint32_t)njobs;
    pthread_mutex_init(&sh->lock, NULL);
    uint32_t threads = o.threads ? o.threads : imp_cores();
    if (threads > sh->njobs) threads = sh->njobs;
    pthread_t tids[256];
    if (threads > 256) threads = 256;
    atomic_store(&sh->running, threads);
    uint32_t started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, gen_worker, sh) != 0) break;
    atomic_fetch_sub(&sh->running, threads - started);
    if (started == 0) gen_worker(sh); /* no thread could start: do it here */
    double interval = o.progress_interval > 0 ? o.progress_interval : 0.2;
    while (atomic_load(&sh->running) > 0) {
        /* Short naps so that a small table does not wait a whole interval. */
        for (double slept = 0; slept < interval && atomic_load(&sh->running) > 0; slept += 0.01)
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        if (atomic_load(&sh->running) > 0) gen_report(sh, t0);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    gen_report(sh, t0);
    rc = sh->rc;
    if (rc != SL_OK && err != NULL) *err = sh->err;
    if (stats != NULL) *stats = sh->total;
    pthread_mutex_destroy(&sh->lock);
    sl_free(o.allocator, sh, sizeof *sh);
    sl_wh_schema_destroy(schema);
    return rc;
}
