/* The store interface's dispatch: URLs to stores, argument checks, and the
 * calls every implementation answers through its operations table. */
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/prom.h"
#include "store_internal.h"

const double sl_store_latency_bounds_s[SL_STORE_LATENCY_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

const char *sl_store_op_name(int op)
{
    static const char *const names[SL_STORE_OPS] = {"get", "head", "list", "put"};
    return op >= 0 && op < SL_STORE_OPS ? names[op] : "?";
}

void sl_store_observe(sl_store_t *st, int op, int result, double seconds)
{
    atomic_fetch_add(&st->by_result[result], 1);
    int b = 0;
    while (b < SL_STORE_LATENCY_BUCKETS && seconds > sl_store_latency_bounds_s[b])
        b++;
    atomic_fetch_add(&st->latency[op][b], 1);
    atomic_fetch_add(&st->latency_sum_us[op], (uint64_t)(seconds * 1e6));
}

void sl_store_opts_fill(const sl_store_opts_t *in, sl_store_opts_t *out)
{
    static const sl_store_opts_t zero = {.path_style = -1};
    *out = in ? *in : zero;
    if (!out->max_attempts) out->max_attempts = 5;
    if (!out->backoff_base_ms) out->backoff_base_ms = 100;
    if (!out->backoff_max_ms) out->backoff_max_ms = 5000;
    if (!out->connect_timeout_ms) out->connect_timeout_ms = 5000;
    if (!out->request_timeout_ms) out->request_timeout_ms = 60000;
    if (!out->max_connections) out->max_connections = 16;
    if (!out->max_inflight_bytes) out->max_inflight_bytes = 64ull << 20;
    if (!out->list_page_keys || out->list_page_keys > 1000) out->list_page_keys = 1000;
    if (!out->part_size) out->part_size = 64ull << 20;
    /* S3 refuses parts under 5 MiB (but the last). */
    if (out->part_size < (5ull << 20)) out->part_size = 5ull << 20;
}

sl_err_t sl_store_check_key(const char *root, const char *key, bool allow_empty, sl_error_t *err)
{
    if (key == NULL || (!allow_empty && key[0] == '\0'))
        return sl_error_set(err, SL_ERR_INVALID, "%s: an empty key", root);
    if (key[0] == '/')
        return sl_error_set(err, SL_ERR_INVALID, "%s: key '%s' starts with '/'", root, key);
    if (strlen(key) > 1024)
        return sl_error_set(err, SL_ERR_INVALID, "%s: key of %zu bytes (at most 1024)", root,
                            strlen(key));
    for (const char *s = key; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return sl_error_set(err, SL_ERR_INVALID, "%s: key '%s' has a '.' or '..' segment", root,
                                key);
        s += n + (e != NULL);
    }
    return SL_OK;
}

bool sl_store_is_remote(const char *url)
{
    return url != NULL && strncmp(url, "s3://", 5) == 0;
}

sl_err_t sl_store_open_url(const char *url, const sl_store_opts_t *opts, sl_store_t **out,
                           char **key, sl_error_t *err)
{
    const sl_allocator_t *a = opts ? opts->alloc : NULL;
    *out = NULL;
    if (key) *key = NULL;
    if (url == NULL || url[0] == '\0') return sl_error_set(err, SL_ERR_INVALID, "an empty URL");
    char *root = NULL;
    const char *k = "";
    sl_err_t rc;
    if (sl_store_is_remote(url)) {
        const char *b = url + 5, *slash = strchr(b, '/');
        size_t blen = slash ? (size_t)(slash - b) : strlen(b);
        /* Bucket names: 3-63 of [a-z0-9.-] (S3's rules; '_' and capitals
         * for older buckets and other servers). */
        if (blen < 3 || blen > 63)
            return sl_error_set(err, SL_ERR_INVALID, "%s: a bucket name of %zu characters (3-63)",
                                url, blen);
        for (size_t i = 0; i < blen; i++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_", b[i]))
                return sl_error_set(err, SL_ERR_INVALID, "%s: '%c' in the bucket name", url, b[i]);
        root = sl_strndup(a, b, blen);
        if (root == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", url);
        k = slash ? slash + 1 : "";
        rc = sl_store_s3_open(root, opts, out, err);
    } else {
        const char *path = url;
        if (strncmp(url, "file://", 7) == 0) path = url + 7;
        if (strstr(path, "://"))
            return sl_error_set(err, SL_ERR_UNSUPPORTED,
                                "%s: an unknown URL scheme (s3://, file:// or a path)", url);
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            root = sl_strdup(a, path);
        } else {
            const char *slash = strrchr(path, '/');
            if (slash == NULL) {
                root = sl_strdup(a, ".");
                k = path;
            } else {
                root =
                    slash == path ? sl_strdup(a, "/") : sl_strndup(a, path, (size_t)(slash - path));
                k = slash + 1;
            }
        }
        if (root == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", url);
        rc = sl_store_local_open(root, opts, out, err);
    }
    sl_strfree(a, root);
    if (rc != SL_OK) return rc;
    if (key) {
        *key = sl_strdup(a, k);
        if (*key == NULL) {
            sl_store_destroy(*out);
            *out = NULL;
            return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", url);
        }
    }
    return SL_OK;
}

void sl_store_destroy(sl_store_t *st)
{
    if (st) st->ops->destroy(st);
}

const char *sl_store_root(const sl_store_t *st)
{
    return st->root;
}

static sl_err_t failed(sl_store_t *st, sl_err_t rc)
{
    if (rc != SL_OK) atomic_fetch_add(&st->failures, 1);
    return rc;
}

sl_err_t sl_store_list(sl_store_t *st, const char *prefix, sl_store_list_fn fn, void *ctx,
                       sl_error_t *err)
{
    if (prefix == NULL) prefix = "";
    if (prefix[0] == '/')
        return sl_error_set(err, SL_ERR_INVALID, "%s: prefix '%s' starts with '/'", st->root,
                            prefix);
    return failed(st, st->ops->list(st, prefix, fn, ctx, err));
}

sl_err_t sl_store_stat(sl_store_t *st, const char *key, sl_store_info_t *info, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_store_check_key(st->root, key, false, err));
    memset(info, 0, sizeof *info);
    return failed(st, st->ops->stat(st, key, info, err));
}

sl_err_t sl_store_read(sl_store_t *st, const char *key, uint64_t offset, size_t len, void *buf,
                       sl_error_t *err)
{
    sl_store_range_t r = {.key = key, .offset = offset, .len = len, .buf = buf};
    return sl_store_read_many(st, &r, 1, err);
}

sl_err_t sl_store_read_many(sl_store_t *st, sl_store_range_t *ranges, size_t n, sl_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        SL_FORWARD_IF_ERROR(sl_store_check_key(st->root, ranges[i].key, false, err));
        if (ranges[i].offset > UINT64_MAX - ranges[i].len)
            return sl_error_set(err, SL_ERR_INVALID, "%s/%s: range at %llu overflows", st->root,
                                ranges[i].key, (unsigned long long)ranges[i].offset);
        ranges[i].result = SL_ERR_AGAIN;
    }
    if (n == 0) return SL_OK;
    return failed(st, st->ops->read_many(st, ranges, n, err));
}

sl_err_t sl_store_put(sl_store_t *st, const char *key, const void *data, size_t len,
                      sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_store_check_key(st->root, key, false, err));
    return failed(st, st->ops->put(st, key, data, len, NULL, err));
}

sl_err_t sl_store_put_file(sl_store_t *st, const char *key, const char *path, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_store_check_key(st->root, key, false, err));
    return failed(st, st->ops->put(st, key, NULL, 0, path, err));
}

void sl_store_stats(sl_store_t *st, sl_store_stats_t *out)
{
    out->requests = atomic_load(&st->requests);
    out->retries = atomic_load(&st->retries);
    out->failures = atomic_load(&st->failures);
    out->bytes_read = atomic_load(&st->bytes_read);
    out->bytes_written = atomic_load(&st->bytes_written);
    out->list_pages = atomic_load(&st->list_pages);
    for (int i = 0; i < SL_STORE_RESULTS; i++)
        out->by_result[i] = atomic_load(&st->by_result[i]);
    for (int o = 0; o < SL_STORE_OPS; o++) {
        for (int i = 0; i <= SL_STORE_LATENCY_BUCKETS; i++)
            out->latency[o][i] = atomic_load(&st->latency[o][i]);
        out->latency_sum_s[o] = (double)atomic_load(&st->latency_sum_us[o]) / 1e6;
    }
    out->inflight_bytes = atomic_load(&st->inflight_bytes);
}

void sl_store_stats_add(sl_store_stats_t *sum, const sl_store_stats_t *s)
{
    sum->requests += s->requests;
    sum->retries += s->retries;
    sum->failures += s->failures;
    sum->bytes_read += s->bytes_read;
    sum->bytes_written += s->bytes_written;
    sum->list_pages += s->list_pages;
    for (int i = 0; i < SL_STORE_RESULTS; i++)
        sum->by_result[i] += s->by_result[i];
    for (int o = 0; o < SL_STORE_OPS; o++) {
        for (int i = 0; i <= SL_STORE_LATENCY_BUCKETS; i++)
            sum->latency[o][i] += s->latency[o][i];
        sum->latency_sum_s[o] += s->latency_sum_s[o];
    }
    sum->inflight_bytes += s->inflight_bytes;
}

void sl_store_prom(sl_store_t *st, struct sl_prom *p, const char *labels)
{
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    sl_store_prom_stats(&s, p, labels);
}

void sl_store_prom_stats(const sl_store_stats_t *sp, struct sl_prom *p, const char *labels)
{
    sl_store_stats_t s = *sp;
    const char *l = labels ? labels : "";
    char lab[512];
    static const char *const names[SL_STORE_RESULTS] = {"ok", "client_error", "server_error",
                                                        "network_error"};
    sl_prom_family_def(p, SL_M(STORE_REQUESTS_TOTAL));
    for (int i = 0; i < SL_STORE_RESULTS; i++) {
        char r[64];
        snprintf(lab, sizeof lab, "%s%s%s", l, *l ? "," : "",
                 sl_prom_label(r, sizeof r, "result", names[i]));
        sl_prom_sample_def(p, SL_M(STORE_REQUESTS_TOTAL), lab, (double)s.by_result[i]);
    }
    struct {
        const sl_metric_def_t *def;
        uint64_t v;
    } c[] = {
        {SL_M(STORE_RETRIES_TOTAL), s.retries},
        {SL_M(STORE_FAILURES_TOTAL), s.failures},
        {SL_M(STORE_BYTES_READ_TOTAL), s.bytes_read},
        {SL_M(STORE_BYTES_WRITTEN_TOTAL), s.bytes_written},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sl_prom_family_def(p, c[i].def);
        sl_prom_sample_def(p, c[i].def, l, (double)c[i].v);
    }
    sl_prom_family_def(p, SL_M(STORE_REQUEST_SECONDS));
    for (int o = 0; o < SL_STORE_OPS; o++) {
        uint64_t count = 0;
        for (int i = 0; i <= SL_STORE_LATENCY_BUCKETS; i++)
            count += s.latency[o][i];
        char r[64];
        snprintf(lab, sizeof lab, "%s%s%s", l, *l ? "," : "",
                 sl_prom_label(r, sizeof r, "op", sl_store_op_name(o)));
        sl_prom_histogram_def(p, SL_M(STORE_REQUEST_SECONDS), lab, sl_store_latency_bounds_s,
                              s.latency[o], SL_STORE_LATENCY_BUCKETS, s.latency_sum_s[o], count);
    }
    sl_prom_family_def(p, SL_M(STORE_INFLIGHT_BYTES));
    sl_prom_sample_def(p, SL_M(STORE_INFLIGHT_BYTES), l, (double)s.inflight_bytes);
}
