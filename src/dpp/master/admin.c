/* The master's admin routes (docs/ADMIN.md) on the admin endpoint of
 * admin.h: thin handlers that validate the request, call master.h and map
 * its error values to HTTP statuses. Handlers run on libmicrohttpd's
 * thread; every sl_master_* call takes the master's lock itself.
 *
 *   GET    /healthz  /readyz  /metrics  /status  /workers
 *   GET    /jobs  /jobs/{id}
 *   POST   /jobs               (token)  submit
 *   DELETE /jobs/{id}          (token)  remove; DELETE /jobs {"id": ...} too
 *   POST   /jobs/{id}/scale    (token)  {"workers": N} */
#include <string.h>

#include "dpp/pipeline/job.h"
#include "dpp/master/master.h"
#include "dpp/admin/prom.h"

/* Bodies are job specs, scale requests and resume tokens (base64, a few
 * bytes per split): 8 MiB holds a token of a job with ~1M splits. */
#define MAX_BODY (8u << 20)

/* ---- fair share (master.h) ---------------------------------------------------------- */

/* Water-filling over one ratio r = rest / weight (exact, in integers):
 * rest is the fleet left after the jobs held at their minimum, weight the
 * desired counts of the others. A job whose proportional share
 * desired * r is below its minimum is held there, which lowers r for the
 * rest; repeat until no job changes (at most n rounds). */
void sl_master_autoscale_fair_share(sl_master_autoscale_share_t *jobs, uint32_t n,
                                    uint32_t max_fleet_workers)
{
    uint64_t want = 0, floor_sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        want += jobs[i].desired;
        jobs[i].granted = jobs[i].desired;
    }
    if (max_fleet_workers == 0 || want <= max_fleet_workers) return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = jobs[i].min_workers < jobs[i].desired ? jobs[i].min_workers : jobs[i].desired;
        floor_sum += lo;
        /* UINT32_MAX: shares the rest in proportion; else held at lo */
        jobs[i].granted = jobs[i].desired > lo ? UINT32_MAX : lo;
    }
    if (floor_sum >= max_fleet_workers) {
        for (uint32_t i = 0; i < n; i++)
            if (jobs[i].granted == UINT32_MAX) jobs[i].granted = jobs[i].min_workers;
        return;
    }
    uint64_t rest = 0, weight = 0;
    for (bool changed = true; changed;) {
        changed = false;
        rest = max_fleet_workers;
        weight = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (jobs[i].granted == UINT32_MAX)
                weight += jobs[i].desired;
            else
                rest -= jobs[i].granted;
        }
        for (uint32_t i = 0; i < n; i++)
            if (jobs[i].granted == UINT32_MAX &&
                (uint64_t)jobs[i].desired * rest < (uint64_t)jobs[i].min_workers * weight) {
                jobs[i].granted = jobs[i].min_workers;
                changed = true;
            }
    }
    if (weight == 0) return;
    uint64_t given = 0;
    for (uint32_t i = 0; i < n; i++)
        if (jobs[i].granted == UINT32_MAX) {
            jobs[i].granted = (uint32_t)((uint64_t)jobs[i].desired * rest / weight);
            given += jobs[i].granted;
        }
    /* rest - given < the number of sharing jobs; one more each to the
     * largest remainders (same denominator), ties to the lower job id. A
     * sharing job has granted >= its minimum, a held one not (see above),
     * which tells them apart again. */
    for (uint64_t left = rest - given; left > 0; left--) {
        int64_t best = -1;
        uint64_t best_rem = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t num = (uint64_t)jobs[i].desired * rest;
            bool sharing = jobs[i].desired > jobs[i].min_workers &&
                           num >= (uint64_t)jobs[i].min_workers * weight;
            if (!sharing || jobs[i].granted != num / weight || jobs[i].granted >= jobs[i].desired)
                continue;
            uint64_t rem = num % weight;
            if (best < 0 || rem > best_rem ||
                (rem == best_rem && strcmp(jobs[i].job_id, jobs[best].job_id) < 0)) {
                best = i;
                best_rem = rem;
            }
        }
        if (best < 0) break;
        jobs[best].granted++;
    }
}

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

static void h_healthz(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_admin_reply_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

static void h_readyz(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    if (sl_master_ready(ctx))
        sl_admin_reply_json(resp, 200, json_pack("{s:b}", "ready", 1));
    else
        sl_admin_reply_error(resp, 503, "not ready: the master's state failed (see its log)");
}

static void h_metrics(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    char *text = sl_master_metrics_text(ctx);
    if (!text) {
        sl_admin_reply_error(resp, 503, "out of memory");
        return;
    }
    resp->status = 200;
    resp->body = text;
    resp->content_type = SL_ADMIN_PROM_CONTENT_TYPE;
}

static void h_status(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_status_json(ctx));
}

static void h_workers(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_workers_json(ctx));
}

static void h_jobs_list(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_jobs_json(ctx));
}

static void h_job_get(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_master_job_json(ctx, req->param, &j, &err);
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
    sl_err_t rc = sl_master_job_submit_problems(ctx, body, &id, &problems, &err);
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
    if (sl_master_job_json(ctx, id, &j, &err) != SL_OK) j = json_pack("{s:s}", "id", id);
    free(id);
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

static const sl_admin_route_t routes[] = {
    {"GET", "/healthz", false, h_healthz},         {"GET", "/readyz", false, h_readyz},
    {"GET", "/metrics", false, h_metrics},         {"GET", "/status", false, h_status},
    {"GET", "/workers", false, h_workers},         {"GET", "/jobs", false, h_jobs_list},
    {"POST", "/jobs", true, h_job_submit},         {"DELETE", "/jobs", true, h_jobs_delete},
    {"GET", "/jobs/{}", false, h_job_get},         {"DELETE", "/jobs/{}", true, h_job_delete},
    {"POST", "/jobs/{}/scale", true, h_job_scale},
};

sl_err_t sl_master_admin_serve(sl_master_t *m, const sl_admin_opts_t *endpoint, sl_admin_t **out,
                               sl_error_t *err)
{
    sl_admin_opts_t o = *endpoint;
    o.max_body_bytes = MAX_BODY;
    o.routes = routes;
    o.num_routes = sizeof routes / sizeof routes[0];
    o.ctx = m;
    return sl_admin_start(&o, out, err);
}

sl_err_t sl_master_admin_start(sl_master_t *m, const char *address, const char *token,
                               sl_admin_t **out, sl_error_t *err)
{
    sl_admin_opts_t o = {.address = address, .token = token};
    return sl_master_admin_serve(m, &o, out, err);
}
