/* The canonical fingerprint of a job's plan (plan.h,
 * sl_pipeline_fingerprint): XXH3-64 over the compiled job, never over its
 * JSON text, so key order, whitespace and defaults given or left out do not
 * matter, and every value that changes which samples a job delivers, or the
 * bytes of its batches, does.
 *
 * What goes in, each value tagged and length-prefixed (so that no two
 * different plans can be spelled the same byte stream):
 *   - the source: the table directory's real path, then per split its file,
 *     partition, stripe range, rows and the file's footer checksum (the
 *     footer holds every stream's checksum, so a rewritten file changes it);
 *     a Kafka source: brokers, topics, schema, start, stop, linger, chunk,
 *     properties;
 *   - the projection, in order; no projection is spelled as every feature of
 *     the schema in schema order (which is what the reader then returns);
 *   - each filter and transform in order: its op and every argument of the
 *     op table (given or defaulted: the compiled struct holds both the
 *     same); an argument whose default is found at binding (map_vocab's
 *     "default") counts only when given, and a vocabulary counts by its
 *     bytes, not its name;
 *   - the batching: size, drop_last, epochs, the dedup groups in order (the
 *     order of a batch's IKJTs), sample_ids, on_bad_split, the split
 *     shuffle and the row window; the seed only when one of the two
 *     shuffles is on (without them it changes nothing); the order when
 *     "deterministic", nothing for the default.
 * Left out: the job id, and "share" (whether to share is not what is
 * shared).
 *
 * The autocache's prefix fingerprint (sl_pipeline_prefix_fingerprint) is
 * the same stream under another tag without epochs, the split shuffle and
 * the seed: a cache file holds one split's batches, which neither the
 * number of epochs nor the order of splits changes. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/fileio.h"
#include "common/mem.h"
#include "dpp/pipeline/ops.h"
#include "dpp/pipeline/plan.h"
#include "store/store.h"

/* Field tags: one per kind of value, so that a string can never be read as
 * the number that would follow it. */
enum { T_U64 = 1, T_STR, T_NULL, T_F64, T_SECTION };

static void put_u64(XXH3_state_t *h, uint64_t v)
{
    uint8_t b[9];
    b[0] = T_U64;
    sl_le_put_u64(b + 1, v);
    XXH3_64bits_update(h, b, sizeof b);
}

static void put_f64(XXH3_state_t *h, double v)
{
    uint8_t b[9];
    uint64_t bits;
    if (v == 0) v = 0; /* -0 and 0 compare equal and filter and transform alike */
    memcpy(&bits, &v, sizeof bits);
    b[0] = T_F64;
    sl_le_put_u64(b + 1, bits);
    XXH3_64bits_update(h, b, sizeof b);
}

/* The 8-byte argument at at: a double (real), else an integer. */
static void put_word(XXH3_state_t *h, const char *at, bool real)
{
    uint64_t u;
    double d;
    memcpy(&u, at, sizeof u);
    memcpy(&d, at, sizeof d);
    if (real)
        put_f64(h, d);
    else
        put_u64(h, u);
}

static void put_str(XXH3_state_t *h, const char *s)
{
    uint8_t b[9];
    if (s == NULL) {
        b[0] = T_NULL;
        XXH3_64bits_update(h, b, 1);
        return;
    }
    size_t n = strlen(s);
    b[0] = T_STR;
    sl_le_put_u64(b + 1, n);
    XXH3_64bits_update(h, b, sizeof b);
    XXH3_64bits_update(h, s, n);
}

static void section(XXH3_state_t *h, const char *name)
{
    uint8_t t = T_SECTION;
    XXH3_64bits_update(h, &t, 1);
    put_str(h, name);
}

/* A vocabulary counts by its content: the same file name with other ids
 * maps ids elsewhere. Resolved as the plan resolves it. */
static sl_err_t put_vocab(XXH3_state_t *h, const sl_pipeline_job_t *job, const char *file,
                          size_t index, sl_error_t *err)
{
    char full[PATH_MAX];
    if (file[0] != '/' && job->base_dir != NULL) {
        if ((size_t)snprintf(full, sizeof full, "%s%s", job->base_dir, file) >= sizeof full)
            return sl_error_set(err, SL_ERR_INVALID, "$.transforms[%zu].file: path too long",
                                index);
        file = full;
    }
    sl_io_map_t map = {0};
    sl_err_t rc = sl_io_map_file(file, "vocabulary", &map, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "$.transforms[%zu].file: ", index);
        return rc;
    }
    put_u64(h, XXH3_64bits(map.data, map.len));
    put_u64(h, map.len);
    sl_io_unmap(&map);
    return SL_OK;
}

static sl_err_t put_op(XXH3_state_t *h, const sl_pipeline_job_t *job, const sl_pipeline_op_t *op,
                       size_t index, sl_error_t *err)
{
    const dpp_op_spec_t *spec = op->spec;
    put_str(h, spec->name);
    put_u64(h, spec->filter);
    for (uint32_t k = 0; k < DPP_MAX_ARGS && spec->args[k].name != NULL; k++) {
        const dpp_arg_t *arg = &spec->args[k];
        const char *at = (const char *)op + arg->offset;
        put_str(h, arg->name);
        if (arg->how == DEF_BOUND) {
            bool given = (op->given >> k) & 1u;
            put_u64(h, given);
            if (!given) continue; /* the binding finds it from what is hashed already */
        }
        switch (arg->type) {
        case ARG_STRING:
        case ARG_NAME: {
            const char *s;
            memcpy(&s, at, sizeof s);
            if (op->op == OP_MAP_VOCAB && strcmp(arg->name, "file") == 0) {
                sl_err_t rc = put_vocab(h, job, s, index, err);
                if (rc != SL_OK) return rc;
            } else {
                put_str(h, s);
            }
            break;
        }
        case ARG_STRING2: {
            const char *s[2];
            memcpy(s, at, sizeof s);
            put_str(h, s[0]);
            put_str(h, s[1]);
            break;
        }
        case ARG_NUMBER:
        case ARG_POS_NUMBER:
        case ARG_RATE:
            put_word(h, at, true);
            break;
        case ARG_UINT:
        case ARG_POS_INT:
        case ARG_POS_INT32:
        case ARG_NGRAM_N:
        case ARG_INT:
            put_word(h, at, false);
            break;
        case ARG_BORDERS: {
            dpp_borders_t b;
            memcpy(&b, at, sizeof b);
            put_u64(h, b.n);
            for (uint32_t i = 0; i < b.n; i++)
                put_f64(h, b.v[i]);
            break;
        }
        }
    }
    return SL_OK;
}

/* The name of a table or dataset in a fingerprint: a path's real path
 * (one directory, however it is spelled), or an s3:// URL as given without
 * trailing '/' (a store has no links; its objects' versions are in the
 * splits' footer checksums). NULL when a path cannot be resolved. */
static const char *source_name(const char *src, char *out)
{
    if (!sl_store_is_remote(src)) return realpath(src, out);
    size_t n = strlen(src);
    while (n > 5 && src[n - 1] == '/')
        n--;
    if (n >= PATH_MAX) return NULL;
    memcpy(out, src, n);
    out[n] = '\0';
    return out;
}

static sl_err_t put_source(XXH3_state_t *h, const sl_pipeline_job_t *job,
                           const sl_wh_splits_t *splits, sl_error_t *err)
{
    if (job->is_kafka) {
        const sl_pipeline_kafka_t *k = &job->kafka;
        section(h, "kafka");
        put_str(h, k->brokers);
        put_u64(h, k->num_topics);
        for (uint32_t i = 0; i < k->num_topics; i++)
            put_str(h, k->topics[i]);
        void *buf = NULL;
        size_t len = 0;
        sl_err_t rc = sl_wh_schema_encode(k->schema, NULL, &buf, &len, err);
        if (rc != SL_OK) return rc;
        put_u64(h, XXH3_64bits(buf, len));
        sl_free(NULL, buf, len);
        if (k->format == SL_PIPELINE_KAFKA_JSON && k->columns != NULL) {
            /* Only JSON jobs hash these: protobuf jobs' fingerprints (and
             * their resume tokens) stay what they were. */
            section(h, "json");
            json_t *m = sl_wh_colmap_resolved_to_json(k->columns);
            size_t n = m ? json_dumpb(m, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS) : 0;
            char *text = n ? sl_alloc(NULL, n) : NULL;
            if (text != NULL) json_dumpb(m, text, n, JSON_COMPACT | JSON_SORT_KEYS);
            json_decref(m);
            if (text == NULL) return sl_error_set(err, SL_ERR_NOMEM, "fingerprint: out of memory");
            put_u64(h, XXH3_64bits(text, n));
            sl_free(NULL, text, n);
        }
        put_u64(h, k->start);
        put_u64(h, k->stop);
        put_u64(h, (uint64_t)k->start_ms);
        put_u64(h, (uint64_t)k->stop_ms);
        put_u64(h, k->linger_ms);
        put_u64(h, k->chunk);
        put_u64(h, k->num_props);
        for (uint32_t i = 0; i < 2 * k->num_props; i++)
            put_str(h, k->props[i]);
        return SL_OK;
    }
    char real[PATH_MAX];
    if (job->parquet != NULL) {
        /* the dataset's real path, its mapping as given, then its splits
         * (each file's footer summed into footer_checksum) */
        section(h, "parquet");
        if (source_name(job->parquet, real) == NULL)
            return sl_error_set(err, SL_ERR_NOT_FOUND, "$.source.parquet: '%s': cannot resolve it",
                                job->parquet);
        put_str(h, real);
        put_str(h, job->parquet_columns_json ? job->parquet_columns_json : "{}");
        put_u64(h, job->split_rows);
    } else {
        section(h, "table");
        if (source_name(job->table, real) == NULL)
            return sl_error_set(err, SL_ERR_NOT_FOUND, "$.source.table: '%s': cannot resolve it",
                                job->table);
        put_str(h, real);
    }
    put_u64(h, splits->count);
    for (uint32_t i = 0; i < splits->count; i++) {
        const sl_wh_split_t *s = &splits->items[i];
        put_str(h, s->path);
        put_str(h, s->partition);
        put_u64(h, s->stripe_begin);
        put_u64(h, s->stripe_end);
        put_u64(h, s->first_row);
        put_u64(h, s->num_rows);
        put_u64(h, s->footer_checksum);
    }
    return SL_OK;
}

/* prefix: the autocache's key (plan.h, sl_pipeline_prefix_fingerprint):
 * what a split's batches hold, without what only orders or repeats them. */
static sl_err_t fingerprint(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                            const sl_wh_splits_t *splits, bool prefix, uint64_t *out,
                            sl_error_t *err)
{
    *out = 0;
    if (!job->is_kafka && (splits == NULL || (job->table == NULL && job->parquet == NULL)))
        return sl_error_set(err, SL_ERR_INVALID, "fingerprint: a table job needs its splits");
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    put_str(&h, prefix ? "sluice-cache-prefix-v1" : "sluice-plan-fingerprint-v1");
    sl_err_t rc = put_source(&h, job, splits, err);
    if (rc != SL_OK) return rc;
    section(&h, "projection");
    if (job->features != NULL) {
        put_u64(&h, job->num_features);
        for (uint32_t i = 0; i < job->num_features; i++)
            put_str(&h, job->features[i]);
    } else {
        const sl_wh_schema_t *s = job->is_kafka ? job->kafka.schema : schema;
        uint32_t n = s != NULL ? sl_wh_schema_num_features(s) : 0;
        put_u64(&h, n);
        for (uint32_t i = 0; i < n; i++)
            put_str(&h, sl_wh_schema_feature(s, i)->name);
    }
    section(&h, "filters");
    put_u64(&h, job->num_filters);
    for (uint32_t i = 0; i < job->num_filters; i++)
        if ((rc = put_op(&h, job, &job->filters[i], i, err)) != SL_OK) return rc;
    section(&h, "transforms");
    put_u64(&h, job->num_transforms);
    for (uint32_t i = 0; i < job->num_transforms; i++)
        if ((rc = put_op(&h, job, &job->transforms[i], i, err)) != SL_OK) return rc;
    section(&h, "batch");
    put_u64(&h, job->batch_size);
    put_u64(&h, job->drop_last);
    if (!prefix) put_u64(&h, job->epochs);
    put_u64(&h, job->num_dedup_groups);
    for (uint32_t g = 0; g < job->num_dedup_groups; g++) {
        const sl_pipeline_dedup_group_t *grp = &job->dedup_groups[g];
        put_str(&h, grp->name);
        put_u64(&h, grp->num_features);
        for (uint32_t f = 0; f < grp->num_features; f++)
            put_str(&h, grp->features[f]);
    }
    put_u64(&h, job->sample_ids);
    put_u64(&h, job->skip_bad_splits);
    put_u64(&h, job->stripes_per_split);
    if (!prefix) {
        put_u64(&h, job->shuffle_splits);
        put_u64(&h, job->shuffle_window);
        bool seeded = job->shuffle_splits || job->shuffle_window > 0;
        put_u64(&h, seeded ? job->seed : 0);
        /* only when deterministic, so that the fingerprints of every job
         * before the option stay what they were */
        if (job->order == SL_PIPELINE_ORDER_DETERMINISTIC) {
            section(&h, "order");
            put_u64(&h, job->order);
        }
    }
    *out = XXH3_64bits_digest(&h);
    return SL_OK;
}

sl_err_t sl_pipeline_fingerprint(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                 const sl_wh_splits_t *splits, uint64_t *out, sl_error_t *err)
{
    return fingerprint(job, schema, splits, false, out, err);
}

const char *sl_pipeline_uncacheable(const sl_pipeline_job_t *job)
{
    if (job->is_kafka) return "a Kafka job's records are not a fixed input";
    if (job->parquet)
        return "a Parquet source reads its own rows (the autocache keeps batches of table "
               "splits)";
    if (!job->autocache) return "the job spec turns the autocache off (\"autocache\": false)";
    if (job->shuffle_window > 0)
        return "the row shuffle (shuffle_window) is random per epoch and comes before the "
               "transforms: the deterministic prefix ends before anything worth caching";
    return NULL;
}

sl_err_t sl_pipeline_prefix_fingerprint(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                        const sl_wh_splits_t *splits, uint64_t *out,
                                        sl_error_t *err)
{
    *out = 0;
    if (sl_pipeline_uncacheable(job) != NULL) return SL_OK;
    return fingerprint(job, schema, splits, true, out, err);
}
