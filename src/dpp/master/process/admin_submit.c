/* The master's admin request bodies (admin.h): POST /jobs as a submission
 * (ranks, sharding, workers, a spec and its resume tokens) and the resume
 * tokens of POST /jobs/{id}/resubmit (admin_submit.h), decoded from base64. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/process/admin_submit.h"
#include "dpp/master/state/admin_limits.h"
#include "netlib/netlib_gnutls.h"

/* ---- POST /jobs: the body as a submission ------------------------------------------ */

static sl_err_t get_u32(const json_t *body, const char *key, uint32_t def, uint32_t min,
                        uint32_t max, uint32_t *out, sl_error_t *err)
{
    const json_t *v = json_object_get(body, key);
    if (v == NULL) {
        *out = def;
        return SL_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return sl_error_set(err, SL_ERR_INVALID, "$.%s: an integer %u..%u", key, min, max);
    *out = (uint32_t)json_integer_value(v);
    return SL_OK;
}

/* A token: a base64 string (RFC 4648). @return false when it is not one;
 * on true, free out->data with gnutls->free_memory (GnuTLS allocated it). */
static bool decode_token(const sl_netlib_gnutls_t *gnutls, const json_t *t, gnutls_datum_t *out)
{
    const char *s = json_string_value(t);
    if (s == NULL) return false;
    size_t n = strlen(s);
    if (n > UINT32_MAX) return false;
    gnutls_datum_t in = {.data = (unsigned char *)s, .size = (unsigned)n};
    return gnutls->base64_decode2(&in, out) == 0;
}

void mp_admin_tokens_free(const sl_allocator_t *a, mp_admin_tokens_t *t)
{
    /* t->raw is there only after mp_admin_tokens_decode loaded GnuTLS */
    for (uint32_t k = 0; t->raw != NULL && k < t->n; k++)
        (*sl_netlib_gnutls(NULL)->free_memory)(t->raw[k].data);
    sl_free(a, t->raw, (size_t)t->n * sizeof *t->raw);
    sl_free(a, t->data, (size_t)t->n * sizeof *t->data);
    sl_free(a, t->len, (size_t)t->n * sizeof *t->len);
    *t = (mp_admin_tokens_t){0};
}

sl_err_t mp_admin_tokens_decode(const sl_allocator_t *a, const json_t *body, bool required,
                                mp_admin_tokens_t *t, sl_error_t *err)
{
    *t = (mp_admin_tokens_t){0};
    const json_t *one = json_object_get(body, "resume_token");
    const json_t *many = json_object_get(body, "resume_tokens");
    if (one != NULL && many != NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: give \"resume_token\" or \"resume_tokens\", not both");
    if (many != NULL && (!json_is_array(many) || json_array_size(many) == 0 ||
                         json_array_size(many) > SL_MASTER_MAX_RESUME_TOKENS))
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: \"resume_tokens\" is an array of 1..%d base64 strings",
                            SL_MASTER_MAX_RESUME_TOKENS);
    if (required && one == NULL && many == NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: give \"resume_token\" (base64) or \"resume_tokens\" (an "
                            "array of 1..%d base64 strings, one per rank)",
                            SL_MASTER_MAX_RESUME_TOKENS);
    uint32_t n = one != NULL ? 1 : many != NULL ? (uint32_t)json_array_size(many) : 0;
    if (n == 0) return SL_OK;
    const sl_netlib_gnutls_t *gnutls = sl_netlib_gnutls(err);
    if (gnutls == NULL) return SL_ERR_UNSUPPORTED;
    t->key = one != NULL ? "resume_token" : "resume_tokens";
    t->raw = sl_calloc(a, n, sizeof *t->raw);
    t->data = sl_calloc(a, n, sizeof *t->data);
    t->len = sl_calloc(a, n, sizeof *t->len);
    t->n = n;
    if (t->raw == NULL || t->data == NULL || t->len == NULL) {
        mp_admin_tokens_free(a, t);
        return sl_error_set(err, SL_ERR_NOMEM, "body: %u resume tokens", n);
    }
    for (uint32_t k = 0; k < n; k++) {
        if (!decode_token(gnutls, one != NULL ? one : json_array_get(many, k), &t->raw[k])) {
            mp_admin_tokens_free(a, t);
            if (one != NULL)
                return sl_error_set(err, SL_ERR_INVALID, "body: \"resume_token\" is not base64");
            return sl_error_set(err, SL_ERR_INVALID,
                                "body: \"resume_tokens\"[%u] is not a base64 string", k);
        }
        t->data[k] = t->raw[k].data;
        t->len[k] = t->raw[k].size;
    }
    return SL_OK;
}

sl_err_t mp_admin_token_refusal(sl_err_t rc, const mp_admin_tokens_t *t, sl_error_t *err)
{
    if (rc != SL_ERR_CORRUPT && rc != SL_ERR_TRUNCATED && rc != SL_ERR_VERSION) return rc;
    sl_error_prefix(err, "%s: ", t->key != NULL ? t->key : "resume_token");
    return err->code = SL_ERR_INVALID;
}

sl_err_t sl_master_admin_job_submit(sl_master_t *m, const json_t *body, char **job_id,
                                    sl_error_t *err)
{
    return sl_master_admin_job_submit_problems(m, body, job_id, NULL, err);
}

sl_err_t sl_master_admin_job_submit_problems(sl_master_t *m, const json_t *body, char **job_id,
                                             sl_pipeline_problems_t *problems, sl_error_t *err)
{
    if (job_id != NULL) *job_id = NULL;
    if (!json_is_object(body)) return sl_error_set(err, SL_ERR_INVALID, "body: not a JSON object");
    static const char *keys[] = {"spec",        "ranks",   "sharding",     "min_workers",
                                 "max_workers", "workers", "resume_token", "resume_tokens"};
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)body, key, val)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            known = known || strcmp(key, keys[i]) == 0;
        if (!known) return sl_error_set(err, SL_ERR_INVALID, "body: unknown key \"%s\"", key);
    }
    const json_t *specj = json_object_get(body, "spec");
    if (!json_is_object(specj))
        return sl_error_set(err, SL_ERR_INVALID, "body: \"spec\" (a job spec object) is required");
    uint32_t ranks, min_w, max_w, workers;
    /* ranks 0 is refused, not taken for 1: a client must attach with a
     * world size equal to it. */
    sl_err_t rc = get_u32(body, "ranks", 1, 1, 65536, &ranks, err);
    if (rc == SL_OK) rc = get_u32(body, "min_workers", 1, 0, 4096, &min_w, err);
    if (rc == SL_OK) rc = get_u32(body, "max_workers", min_w, 0, 4096, &max_w, err);
    if (rc == SL_OK) rc = get_u32(body, "workers", min_w, 0, 4096, &workers, err);
    if (rc != SL_OK) return rc;
    if (min_w == 0) min_w = 1;
    if (max_w < min_w)
        return sl_error_set(err, SL_ERR_INVALID, "body: max_workers %u < min_workers %u", max_w,
                            min_w);
    const json_t *sh = json_object_get(body, "sharding");
    bool is_static = false;
    if (sh != NULL) {
        const char *s = json_string_value(sh);
        if (s == NULL || (strcmp(s, "static") != 0 && strcmp(s, "dynamic") != 0))
            return sl_error_set(err, SL_ERR_INVALID,
                                "body: \"sharding\" is \"dynamic\" or \"static\"");
        is_static = strcmp(s, "static") == 0;
    }
    /* "resume_token": one token; "resume_tokens": one per trainer rank
     * (the job starts with what every rank delivered). */
    const sl_allocator_t *a = sl_master_allocator(m);
    mp_admin_tokens_t tk;
    SL_FORWARD_IF_ERROR(mp_admin_tokens_decode(a, body, false, &tk, err));
    char *text = NULL;
    sl_pipeline_problems_t pr = {0};
    /* The spec as workers get it in their leases: compact, keys sorted. */
    text = sl_admin_json_text(a, specj, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "job spec text");
        goto out;
    }
    sl_master_submit_t req = {.spec_json = text,
                              .ranks = ranks,
                              .static_sharding = is_static,
                              .min_workers = min_w,
                              .max_workers = max_w,
                              .workers = workers,
                              .tokens = tk.data,
                              .token_lens = tk.len,
                              .num_tokens = tk.n};
    rc = mp_admin_token_refusal(sl_master_job_submit(m, &req, job_id, &pr, err), &tk, err);
    /* The spec's problems by their path in the body: "$.transforms[1]..."
     * is "$.spec.transforms[1]..." there. */
    if (rc != SL_OK && pr.count > 0 && problems != NULL) {
        uint32_t first = problems->count;
        for (uint32_t i = 0; rc != SL_ERR_NOMEM && i < pr.count; i++) {
            const char *p = pr.items[i];
            if (!sl_pipeline_problems_add(problems, "$.spec%s", p[0] == '$' ? p + 1 : p))
                rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
        }
        if (rc != SL_ERR_NOMEM) rc = sl_pipeline_problems_error(problems, first, "spec", err);
    }
out:
    sl_pipeline_problems_free(&pr);
    sl_strfree(a, text);
    mp_admin_tokens_free(a, &tk);
    return rc;
}
