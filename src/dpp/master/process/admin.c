/* The master's admin routes (admin.h, docs/ADMIN.md) on the HTTP endpoint
 * of dpp/admin/endpoint.h: thin handlers that validate the request, turn
 * its JSON into the plain calls of master.h and their answers (the views)
 * into JSON, and map error values to HTTP statuses. Handlers run on
 * libmicrohttpd's thread; every sl_master_* call takes the master's lock
 * itself. The request bodies are decoded in admin_submit.c, the views
 * turned into JSON in admin_json.c.
 *
 *   GET    /  /ui/{file}        the status page (dpp/admin/ui.h)
 *   GET    /healthz  /readyz  /metrics  /status  /workers
 *   GET    /jobs  /jobs/{id}
 *   POST   /jobs               (token)  submit
 *   DELETE /jobs/{id}          (token)  remove; DELETE /jobs {"id": ...} too
 *   POST   /jobs/{id}/scale    (token)  {"workers": N}
 *   POST   /jobs/{id}/resubmit (token)  {"resume_token(s)": ...}: start it again */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/prom.h"
#include "dpp/admin/ui.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/process/admin_submit.h"
#include "dpp/master/state/admin_limits.h"

/* ---- routes ----------------------------------------------------------------------- */

/* The HTTP status for a master error value. */
static int status_of(sl_err_t rc)
{
    switch (rc) {
    case SL_ERR_INVALID:
    case SL_ERR_CORRUPT:
    case SL_ERR_TRUNCATED:
    case SL_ERR_VERSION:
        return 400;
    case SL_ERR_NOT_FOUND:
        return 404;
    case SL_ERR_AGAIN:
        return 409;
    case SL_ERR_TOO_LARGE:
        return 429;
    case SL_ERR_UNSUPPORTED:
        return 501;
    case SL_ERR_NOMEM:
        return 503;
    default:
        return 500;
    }
}

static void reply_err(sl_admin_response_t *resp, sl_err_t rc, const sl_error_t *err)
{
    sl_admin_reply_error(resp, status_of(rc), "%s", err->msg[0] ? err->msg : sl_err_str(rc));
}

/* A refusal of a job spec lists every problem, not only the first:
 * {"error": "...", "problems": ["$.spec.source.table: ...", ...]}. */
static void reply_add_problems(sl_admin_response_t *resp, const sl_pipeline_problems_t *problems)
{
    json_t *o = resp->body != NULL ? json_loads(resp->body, 0, NULL) : NULL;
    json_t *arr = json_array();
    for (uint32_t i = 0; o != NULL && arr != NULL && i < problems->count; i++)
        json_array_append_new(arr, json_string(problems->items[i]));
    if (o == NULL || arr == NULL) { /* the error alone then */
        json_decref(o);
        json_decref(arr);
        return;
    }
    json_object_set_new(o, "problems", arr);
    sl_admin_reply_json(resp, resp->status, o);
}

/* A JSON reply built by the master, or 503 when it ran out of memory. */
static void reply_built(sl_admin_response_t *resp, json_t *j)
{
    if (!j) {
        sl_admin_reply_error(resp, 503, "out of memory");
        return;
    }
    sl_admin_reply_json(resp, 200, j);
}

/* /readyz (the endpoint's built-in): the state is open. */
static bool master_ready(void *ctx, char *why, size_t cap)
{
    if (sl_master_ready(ctx)) return true;
    snprintf(why, cap, "not ready: the master's state failed (see its log)");
    return false;
}

static void h_metrics(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    char *text = sl_master_metrics_text(ctx);
    if (!text) {
        sl_admin_reply_error(resp, 503, "out of memory");
        return;
    }
    sl_admin_reply_text(resp, 200, SL_PROM_CONTENT_TYPE, text);
    sl_strfree(sl_master_allocator(ctx), text);
}

static void h_status(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_status_json(ctx));
}

static void h_workers(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_workers_json(ctx));
}

static void h_jobs_list(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_jobs_json(ctx));
}

static void h_job_get(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_master_admin_job_json(ctx, req->param, &j, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200, j);
}

/* 201 with the new job's JSON (as GET /jobs/{id}). */
static void h_job_submit(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    if (!json_is_object(json_object_get(body, "spec"))) {
        json_decref(body);
        sl_admin_reply_error(resp, 400, "$.spec: required, a job spec object (docs/JOBS.md)");
        return;
    }
    char *id = NULL;
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_err_t rc = sl_master_admin_job_submit_problems(ctx, body, &id, &problems, &err);
    json_decref(body);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        if (problems.count > 0) reply_add_problems(resp, &problems);
        sl_pipeline_problems_free(&problems);
        return;
    }
    json_t *j = NULL;
    /* The job may be gone again already (a concurrent DELETE): then the id
     * alone. */
    if (sl_master_admin_job_json(ctx, id, &j, &err) != SL_OK) j = json_pack("{s:s}", "id", id);
    sl_strfree(sl_master_allocator(ctx), id);
    sl_admin_reply_json(resp, 201, j);
}

static void remove_job(void *ctx, const char *id, sl_admin_response_t *resp)
{
    sl_error_t err = {0};
    sl_err_t rc = sl_master_job_remove(ctx, id, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200, json_pack("{s:s, s:b}", "id", id, "removed", 1));
}

static void h_job_delete(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    remove_job(ctx, req->param, resp);
}

/* DELETE /jobs {"id": "..."}: the collection form of DELETE /jobs/{id}. */
static void h_jobs_delete(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    const char *id = json_string_value(json_object_get(body, "id"));
    if (!id || !*id)
        sl_admin_reply_error(resp, 400, "$.id: required, the id of the job to remove");
    else
        remove_job(ctx, id, resp);
    json_decref(body);
}

static void h_job_scale(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    json_t *w = json_object_get(body, "workers");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "workers") != 0) {
            sl_admin_reply_error(resp, 400, "$.%s: unknown key (only \"workers\")", key);
            json_decref(body);
            return;
        }
    }
    if (!json_is_integer(w) || json_integer_value(w) < 0 ||
        json_integer_value(w) > (json_int_t)UINT32_MAX) {
        sl_admin_reply_error(resp, 400, "$.workers: required, an integer in [0, 2^32)");
        json_decref(body);
        return;
    }
    uint32_t want = (uint32_t)json_integer_value(w), set = 0;
    json_decref(body);
    sl_error_t err = {0};
    sl_err_t rc = sl_master_job_scale(ctx, req->param, want, &set, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200,
                        json_pack("{s:s, s:i, s:i}", "id", req->param, "requested",
                                  (json_int_t)want, "workers", (json_int_t)set));
}

/* POST /jobs/{id}/resubmit {"resume_token": B64} or {"resume_tokens":
 * [B64, ...]}: the job started again from the tokens, in one step (the
 * tokens checked before the job is replaced); 200 with the new job. */
static void h_job_resubmit(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "resume_token") != 0 && strcmp(key, "resume_tokens") != 0) {
            sl_admin_reply_error(resp, 400,
                                 "$.%s: unknown key (\"resume_token\" or \"resume_tokens\")", key);
            json_decref(body);
            return;
        }
    }
    const sl_allocator_t *a = sl_master_allocator(ctx);
    mp_admin_tokens_t tk;
    sl_error_t err = {0};
    sl_err_t rc = mp_admin_tokens_decode(a, body, true, &tk, &err);
    json_decref(body);
    if (rc == SL_OK)
        rc = mp_admin_token_refusal(
            sl_master_job_resubmit(ctx, req->param, tk.data, tk.len, tk.n, &err), &tk, &err);
    mp_admin_tokens_free(a, &tk);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    json_t *j = NULL;
    if (sl_master_admin_job_json(ctx, req->param, &j, &err) != SL_OK)
        j = json_pack("{s:s}", "id", req->param);
    sl_admin_reply_json(resp, 200, j);
}

static const sl_admin_route_t routes[] = {
    {"GET", "/", false, sl_admin_ui_page},
    {"GET", "/ui/{}", false, sl_admin_ui_handler},
    {"GET", "/metrics", false, h_metrics},
    {"GET", "/status", false, h_status},
    {"GET", "/workers", false, h_workers},
    {"GET", "/jobs", false, h_jobs_list},
    {"POST", "/jobs", true, h_job_submit},
    {"DELETE", "/jobs", true, h_jobs_delete},
    {"GET", "/jobs/{}", false, h_job_get},
    {"DELETE", "/jobs/{}", true, h_job_delete},
    {"POST", "/jobs/{}/scale", true, h_job_scale},
    {"POST", "/jobs/{}/resubmit", true, h_job_resubmit},
};

sl_err_t sl_master_admin_serve(sl_master_t *m, const sl_admin_opts_t *endpoint, sl_admin_t **out,
                               sl_error_t *err)
{
    sl_admin_opts_t o = *endpoint;
    o.max_body_bytes = SL_MASTER_ADMIN_MAX_BODY;
    o.routes = routes;
    o.num_routes = sizeof routes / sizeof routes[0];
    o.ctx = m;
    o.ready = master_ready;
    o.allocator = sl_master_allocator(m);
    return sl_admin_start(&o, out, err);
}

sl_err_t sl_master_admin_start(sl_master_t *m, const char *address, const char *token,
                               sl_admin_t **out, sl_error_t *err)
{
    sl_admin_opts_t o = {.address = address, .token = token};
    return sl_master_admin_serve(m, &o, out, err);
}
