/* The Kubernetes executor (executor.h): the jobs' targets summed into the
 * replicas of one Deployment, set through its scale subresource by the
 * executor's own thread with libcurl. Its entry points are the ops of an
 * sl_master_executor_t; executor.c forwards to them. */
#include "dpp/master/executor/executor.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fileio.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "netlib/netlib_curl.h"

/* The largest answer read from the API server: a Scale or a Status is a
 * few hundred bytes; more is not an answer we understand. */
#define K8S_MAX_BODY (64u * 1024u)
/* A service account token is a JWT of a kilobyte or two. */
#define K8S_MAX_TOKEN (16u * 1024u)

/* libcurl's functions: loaded by the executor's creation before any call here. */
static const sl_netlib_curl_t *libcurl(void)
{
    return sl_netlib_curl(NULL);
}

typedef struct job_target {
    char job_id[256];
    uint32_t workers;
} job_target_t;

typedef struct k8s {
    sl_master_executor_t base; /* first: an sl_master_executor_t * points here */
    const sl_allocator_t *alloc;
    /* set at start, read-only after */
    char scale_url[1536];
    char token_path[PATH_MAX], ca_path[PATH_MAX];
    uint32_t max_replicas, backoff_ms, max_backoff_ms, timeout_ms, resync_ms;
    bool curl_global; /* curl_global_init succeeded: cleanup owed */
    CURL *curl;       /* the thread's only */
    char *body;       /* [K8S_MAX_BODY + 1], the thread's only */
    size_t body_len;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop; /* also read by curl's progress callback */

    /* base.mu guards the rest; base.stats: desired, applied and the request figures */
    pthread_cond_t wake; /* CLOCK_MONOTONIC; a new target or stop */
    job_target_t *jobs;
    uint32_t njobs, cap_jobs;
    bool have_target;    /* scale or apply was called at least once */
    uint64_t not_before; /* no request before (ms, CLOCK_MONOTONIC) after a failure */
    uint64_t resync_at;  /* read the scale again at (ms) */
} k8s_t;

static const sl_master_executor_ops_t k8s_ops;
static void k8s_destroy(sl_master_executor_t *base);

/* A DNS-1123 label (a namespace): [a-z0-9-], at most 63, alphanumeric at
 * both ends; a subdomain (a Deployment's name) may also have dots between
 * labels and be up to 253 long. */
static bool dns_name_ok(const char *s, bool subdomain)
{
    size_t n = strlen(s);
    if (n == 0 || n > (subdomain ? 253u : 63u)) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        bool edge = i == 0 || i == n - 1 || (subdomain && (s[i - 1] == '.' || s[i + 1] == '.'));
        if (alnum) continue;
        if ((c == '-' || (subdomain && c == '.')) && !edge) continue;
        return false;
    }
    return true;
}

/* A bearer token is printable ASCII without spaces (a JWT): anything else
 * would end up as more header lines of the request. */
static bool token_ok(const char *path, const char *token, sl_error_t *err)
{
    for (const char *p = token; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f) {
            sl_error_set(err, SL_ERR_INVALID, "token file %s: byte %zu is not a token character",
                         path, (size_t)(p - token));
            return false;
        }
    return true;
}

/* ---- one request (the thread's) ---------------------------------------------------- */

static size_t body_write(char *p, size_t size, size_t n, void *ctx)
{
    k8s_t *ex = ctx;
    size_t k = size * n;
    if (k > K8S_MAX_BODY - ex->body_len) return 0; /* too large: curl fails the transfer */
    memcpy(ex->body + ex->body_len, p, k);
    ex->body_len += k;
    return k;
}

static int progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    k8s_t *ex = ctx;
    return atomic_load(&ex->stop) ? 1 : 0; /* non-zero: abort the transfer */
}

/* What a request came to. */
typedef struct outcome {
    bool ok;
    int64_t replicas; /* the Scale's spec.replicas (when ok) */
    long http;        /* 0: no answer */
    char msg[360];
} outcome_t;

/* The API server's explanation of a refusal: a Status object's message,
 * else the start of the body (printable bytes only). */
static void answer_message(const char *body, size_t len, char *out, size_t cap)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *m = j ? json_string_value(json_object_get(j, "message")) : NULL;
    if (m != NULL) {
        snprintf(out, cap, "%s", m);
    } else {
        size_t k = 0;
        for (size_t i = 0; i < len && k + 1 < cap && k < 200; i++)
            out[k++] = (body[i] >= 0x20 && body[i] < 0x7f) ? body[i] : ' ';
        out[k] = '\0';
        if (k == 0) snprintf(out, cap, "(no message)");
    }
    json_decref(j);
}

/* spec.replicas of a Scale; the API server leaves out a replicas of 0
 * (omitempty), so a spec without it is 0. @return -1 when not a Scale. */
static int64_t scale_replicas(const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *spec = j ? json_object_get(j, "spec") : NULL;
    json_t *r = json_is_object(spec) ? json_object_get(spec, "replicas") : NULL;
    int64_t v = -1;
    if (json_is_object(spec) && r == NULL)
        v = 0;
    else if (json_is_integer(r) && json_integer_value(r) >= 0 && json_integer_value(r) <= INT32_MAX)
        v = json_integer_value(r);
    json_decref(j);
    return v;
}

/* GET the scale (patch < 0) or PATCH its replicas to patch. The token is
 * read for every request: the kubelet replaces it before it expires. */
static void request(k8s_t *ex, int64_t patch, outcome_t *o)
{
    memset(o, 0, sizeof *o);
    o->replicas = -1;
    const char *verb = patch < 0 ? "GET" : "PATCH";
    char token[K8S_MAX_TOKEN];
    sl_error_t e = {0};
    if (sl_io_read_token(ex->token_path, "token", token, sizeof token, &e) != SL_OK ||
        !token_ok(ex->token_path, token, &e)) {
        snprintf(o->msg, sizeof o->msg, "%s scale: %.300s", verb, e.msg);
        return;
    }
    char auth[K8S_MAX_TOKEN + 32];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *h = libcurl()->slist_append(NULL, auth);
    struct curl_slist *h2 = h ? libcurl()->slist_append(h, "Accept: application/json") : NULL;
    struct curl_slist *hs =
        h2 && patch >= 0 ? libcurl()->slist_append(h2, "Content-Type: application/merge-patch+json")
                         : h2;
    explicit_bzero(auth, sizeof auth);
    explicit_bzero(token, sizeof token);
    if (hs == NULL) {
        libcurl()->slist_free_all(h);
        snprintf(o->msg, sizeof o->msg, "%s scale: out of memory", verb);
        return;
    }
    char patch_body[64];
    snprintf(patch_body, sizeof patch_body, "{\"spec\":{\"replicas\":%lld}}", (long long)patch);
    char cerr[CURL_ERROR_SIZE] = "";
    CURL *c = ex->curl;
    libcurl()->easy_reset(c);
    libcurl()->easy_setopt(c, CURLOPT_URL, ex->scale_url);
    libcurl()->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
    libcurl()->easy_setopt(c, CURLOPT_CAINFO, ex->ca_path);
    libcurl()->easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    libcurl()->easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    libcurl()->easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    libcurl()->easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)ex->timeout_ms);
    libcurl()->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)ex->timeout_ms);
    libcurl()->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    libcurl()->easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    libcurl()->easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
    libcurl()->easy_setopt(c, CURLOPT_WRITEDATA, ex);
    libcurl()->easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    libcurl()->easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    libcurl()->easy_setopt(c, CURLOPT_XFERINFODATA, ex);
    if (patch >= 0) {
        libcurl()->easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PATCH");
        libcurl()->easy_setopt(c, CURLOPT_POSTFIELDS, patch_body);
        libcurl()->easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(patch_body));
    }
    ex->body_len = 0;
    CURLcode rc = libcurl()->easy_perform(c);
    libcurl()->slist_free_all(hs);
    if (rc != CURLE_OK) {
        snprintf(o->msg, sizeof o->msg, "%s scale: %s", verb,
                 cerr[0] ? cerr : libcurl()->easy_strerror(rc));
        return;
    }
    libcurl()->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &o->http);
    if (o->http < 200 || o->http > 299) {
        char m[300];
        answer_message(ex->body, ex->body_len, m, sizeof m);
        snprintf(o->msg, sizeof o->msg, "%s scale: HTTP %ld: %.300s", verb, o->http, m);
        return;
    }
    o->replicas = scale_replicas(ex->body, ex->body_len);
    if (o->replicas < 0) {
        snprintf(o->msg, sizeof o->msg, "%s scale: HTTP %ld without a Scale's spec.replicas", verb,
                 o->http);
        return;
    }
    o->ok = true;
}

/* ---- the thread --------------------------------------------------------------------- */

/* What the jobs were granted, summed and capped. Needs ex->base.mu. */
static uint32_t desired_locked(const k8s_t *ex) SL_REQUIRES(ex->base.mu)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < ex->njobs; i++)
        sum += ex->jobs[i].workers;
    return sum > ex->max_replicas ? ex->max_replicas : (uint32_t)sum;
}

/* Account for one request's outcome. Needs ex->base.mu. */
static void record(k8s_t *ex, const outcome_t *o) SL_REQUIRES(ex->base.mu)
{
    sl_master_executor_stats_t *s = &ex->base.stats;
    uint64_t now = sl_clock_ms();
    if (o->ok) {
        if (s->failures > 0)
            sl_log_kv(SL_LOG_INFO, SL_EV(EXECUTOR_RECOVERED),
                      (SL_KV_STR("deployment", s->target), SL_KV_U64("failures", s->failures)),
                      "deployment %s: the API server answers again after %u failures", s->target,
                      s->failures);
        if (s->applied < 0)
            sl_log_kv(SL_LOG_INFO, SL_EV(EXECUTOR_SCALED),
                      (SL_KV_STR("deployment", s->target), SL_KV_I64("to", o->replicas),
                       SL_KV_U64("desired", s->desired)),
                      "deployment %s: %lld replicas at the first read (the jobs are granted %u)",
                      s->target, (long long)o->replicas, s->desired);
        else if (o->replicas != s->applied)
            sl_log_kv(SL_LOG_INFO, SL_EV(EXECUTOR_SCALED),
                      (SL_KV_STR("deployment", s->target), SL_KV_I64("from", s->applied),
                       SL_KV_I64("to", o->replicas), SL_KV_U64("desired", s->desired)),
                      "deployment %s: %lld replicas (was %lld; the jobs are granted %u)", s->target,
                      (long long)o->replicas, (long long)s->applied, s->desired);
        s->requests_ok++;
        s->applied = o->replicas;
        s->failures = 0;
        ex->not_before = 0;
        ex->resync_at = now + ex->resync_ms;
        return;
    }
    if (o->http == 0)
        s->requests_transport_error++;
    else if (o->http >= 400 && o->http <= 499)
        s->requests_client_error++;
    else
        s->requests_server_error++;
    s->last_http_status = (int)o->http;
    snprintf(s->last_error, sizeof s->last_error, "%s", o->msg);
    s->failures++;
    uint32_t shift = s->failures - 1 < 20 ? s->failures - 1 : 20;
    uint64_t delay = (uint64_t)ex->backoff_ms << shift;
    if (delay > ex->max_backoff_ms) delay = ex->max_backoff_ms;
    ex->not_before = now + delay;
    sl_log_kv(SL_LOG_WARN, SL_EV(EXECUTOR_REQUEST_FAILED),
              (SL_KV_STR("deployment", s->target), SL_KV_I64("http_status", o->http),
               SL_KV_STR("error", o->msg), SL_KV_U64("failures", s->failures),
               SL_KV_U64("retry_ms", delay)),
              "deployment %s: %s (failure %u in a row; again in %llu ms)", s->target, o->msg,
              s->failures, (unsigned long long)delay);
}

static void wait_until(k8s_t *ex, uint64_t at) SL_REQUIRES(ex->base.mu)
{
    uint64_t now = sl_clock_ms();
    sl_clock_cond_wait_ms(&ex->wake, &ex->base.mu, at > now ? at - now : 0);
}

static void *k8s_run(void *arg)
{
    k8s_t *ex = arg;
    sl_mutex_lock(&ex->base.mu);
    while (!atomic_load(&ex->stop)) {
        uint64_t now = sl_clock_ms();
        if (now < ex->not_before) { /* backing off after a failure */
            wait_until(ex, ex->not_before);
            continue;
        }
        int64_t patch;
        if (ex->base.stats.applied < 0 || now >= ex->resync_at) {
            patch = -1; /* what is there now: at the start, after a while */
        } else if (ex->have_target && ex->base.stats.desired != ex->base.stats.applied) {
            patch = ex->base.stats.desired;
        } else {
            wait_until(ex, ex->resync_at);
            continue;
        }
        sl_mutex_unlock(&ex->base.mu);
        outcome_t o;
        request(ex, patch, &o);
        sl_mutex_lock(&ex->base.mu);
        if (atomic_load(&ex->stop)) break; /* abandoned: not a failure to show */
        record(ex, &o);
    }
    sl_mutex_unlock(&ex->base.mu);
    return NULL;
}

/* ---- the ops ------------------------------------------------------------------------ */

sl_err_t sl_master_executor_k8s_new(const sl_master_executor_k8s_opts_t *opts,
                                    sl_master_executor_t **out, sl_error_t *err)
{
    const char *dep = opts ? opts->deployment : NULL;
    if (dep == NULL || !dns_name_ok(dep, true))
        return sl_error_set(err, SL_ERR_INVALID, "--k8s-deployment '%.253s': %s", dep ? dep : "",
                            dep ? "not a Deployment name (lower-case letters, digits, '-' and "
                                  "'.', at most 253)"
                                : "required with --executor kubernetes");
    const char *sa =
        opts->serviceaccount_dir ? opts->serviceaccount_dir : SL_K8S_SERVICEACCOUNT_DIR;
    char ns[256];
    if (opts->ns != NULL) {
        snprintf(ns, sizeof ns, "%s", opts->ns);
    } else {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/namespace", sa);
        if (sl_io_read_token(path, "namespace", ns, sizeof ns, err) != SL_OK)
            return sl_error_prefix(err, "no --k8s-namespace, and the service account's: ");
    }
    if (!dns_name_ok(ns, false))
        return sl_error_set(err, SL_ERR_INVALID,
                            "namespace '%.63s': not a namespace name (lower-case letters, digits "
                            "and '-', at most 63)",
                            ns);
    char api[512];
    if (opts->api_url != NULL) {
        snprintf(api, sizeof api, "%s", opts->api_url);
    } else {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (host == NULL || *host == '\0' || port == NULL || *port == '\0')
            return sl_error_set(err, SL_ERR_INVALID,
                                "no --k8s-api and KUBERNETES_SERVICE_HOST/_PORT are not set (not "
                                "in a pod?)");
        bool v6 = strchr(host, ':') != NULL;
        snprintf(api, sizeof api, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    }
    size_t alen = strlen(api);
    while (alen > 0 && api[alen - 1] == '/')
        api[--alen] = '\0';
    if (strncmp(api, "https://", 8) != 0 || alen == 8 || strpbrk(api + 8, "/?#@ ") != NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "--k8s-api '%.200s': expected https://HOST[:PORT] (the token is "
                            "never sent in clear)",
                            api);
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    k8s_t *ex = sl_calloc(a, 1, sizeof *ex);
    if (ex == NULL) return sl_error_set(err, SL_ERR_NOMEM, "executor: out of memory");
    ex->base.ops = &k8s_ops;
    ex->alloc = a;
    sl_mutex_init(&ex->base.mu);
    sl_clock_cond_init(&ex->wake);
    ex->max_replicas = opts->max_replicas ? opts->max_replicas : INT32_MAX;
    if (ex->max_replicas > INT32_MAX) ex->max_replicas = INT32_MAX;
    ex->backoff_ms = opts->backoff_ms ? opts->backoff_ms : 500;
    ex->max_backoff_ms = opts->max_backoff_ms ? opts->max_backoff_ms : 30000;
    ex->timeout_ms = opts->timeout_ms ? opts->timeout_ms : 10000;
    ex->resync_ms = opts->resync_ms ? opts->resync_ms : 60000;
    ex->base.stats.applied = -1;
    snprintf(ex->base.stats.target, sizeof ex->base.stats.target, "%s/%s", ns, dep);
    snprintf(ex->scale_url, sizeof ex->scale_url,
             "%s/apis/apps/v1/namespaces/%s/deployments/%s/scale", api, ns, dep);
    snprintf(ex->token_path, sizeof ex->token_path, "%s/token", sa);
    snprintf(ex->ca_path, sizeof ex->ca_path, "%s/ca.crt", sa);
    /* Both must be there at the start: a pod without them was deployed
     * without its service account, which no retry mends. */
    char probe[K8S_MAX_TOKEN];
    sl_err_t rc = sl_io_read_token(ex->token_path, "token", probe, sizeof probe, err);
    if (rc == SL_OK && !token_ok(ex->token_path, probe, err)) rc = SL_ERR_INVALID;
    explicit_bzero(probe, sizeof probe);
    if (rc == SL_OK && access(ex->ca_path, R_OK) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "ca.crt file %s: %s", ex->ca_path, strerror(errno));
    if (rc != SL_OK) {
        k8s_destroy(&ex->base);
        return sl_error_prefix(err, "service account: ");
    }
    if (sl_netlib_curl(err) == NULL) {
        k8s_destroy(&ex->base);
        return SL_ERR_UNSUPPORTED;
    }
    ex->curl_global = libcurl()->global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    if (!ex->curl_global || (ex->curl = libcurl()->easy_init()) == NULL ||
        (ex->body = sl_alloc(a, K8S_MAX_BODY + 1)) == NULL) {
        k8s_destroy(&ex->base);
        return sl_error_set(err, SL_ERR_NOMEM, "executor: out of memory");
    }
    int e = pthread_create(&ex->thread, NULL, k8s_run, ex);
    if (e != 0) {
        k8s_destroy(&ex->base);
        return sl_error_set(err, SL_ERR_IO, "executor: thread: %s", strerror(e));
    }
    ex->thread_started = true;
    *out = &ex->base;
    return SL_OK;
}

static void k8s_destroy(sl_master_executor_t *base)
{
    k8s_t *ex = (k8s_t *)base;
    if (ex == NULL) return;
    if (ex->thread_started) {
        sl_mutex_lock(&ex->base.mu);
        atomic_store(&ex->stop, true);
        pthread_cond_broadcast(&ex->wake);
        sl_mutex_unlock(&ex->base.mu);
        pthread_join(ex->thread, NULL);
    }
    if (ex->curl != NULL) libcurl()->easy_cleanup(ex->curl);
    if (ex->curl_global) libcurl()->global_cleanup(); /* reference-counted by libcurl */
    if (ex->body) sl_free(ex->alloc, ex->body, K8S_MAX_BODY + 1);
    if (ex->jobs) sl_free(ex->alloc, ex->jobs, ex->cap_jobs * sizeof *ex->jobs);
    pthread_cond_destroy(&ex->wake);
    sl_mutex_destroy(&ex->base.mu);
    sl_free(ex->alloc, ex, sizeof *ex);
}

/* Room for want job targets. Needs ex->base.mu. @return false: out of memory. */
static bool reserve_jobs(k8s_t *ex, uint32_t want) SL_REQUIRES(ex->base.mu)
{
    return want <= ex->cap_jobs || SL_GROW(ex->alloc, ex->jobs, ex->cap_jobs, want, 16);
}

/* Set job_id's target (0: drop it). Needs ex->base.mu. */
static sl_err_t set_job(k8s_t *ex, const char *job_id, uint32_t workers, sl_error_t *err)
    SL_REQUIRES(ex->base.mu)
{
    uint32_t i = 0;
    while (i < ex->njobs && strcmp(ex->jobs[i].job_id, job_id) != 0)
        i++;
    if (workers == 0) {
        if (i < ex->njobs) ex->jobs[i] = ex->jobs[--ex->njobs];
        return SL_OK;
    }
    if (i == ex->njobs) {
        if (!reserve_jobs(ex, ex->njobs + 1))
            return sl_error_set(err, SL_ERR_NOMEM, "executor: job %s: out of memory", job_id);
        snprintf(ex->jobs[ex->njobs++].job_id, sizeof ex->jobs[0].job_id, "%s", job_id);
    }
    ex->jobs[i].workers = workers;
    return SL_OK;
}

/* The targets changed: a new desired count wakes the thread. Needs ex->base.mu. */
static void retarget(k8s_t *ex) SL_REQUIRES(ex->base.mu)
{
    uint32_t d = desired_locked(ex);
    if (!ex->have_target || d != ex->base.stats.desired) pthread_cond_signal(&ex->wake);
    ex->have_target = true;
    ex->base.stats.desired = d;
}

static bool job_id_ok(const char *job_id, sl_error_t *err)
{
    if (job_id != NULL && job_id[0] != '\0' && strlen(job_id) < sizeof((job_target_t *)0)->job_id)
        return true;
    sl_error_set(err, SL_ERR_INVALID, "executor: job id '%.100s': %s", job_id ? job_id : "",
                 job_id && job_id[0] ? "longer than 255 bytes" : "empty");
    return false;
}

static sl_err_t k8s_scale(sl_master_executor_t *base, const char *job_id, uint32_t workers,
                          uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    k8s_t *ex = (k8s_t *)base;
    /* Pods come and go by the Deployment's controller, not here. */
    if (started) *started = 0;
    if (stopped) *stopped = 0;
    if (!job_id_ok(job_id, err)) return SL_ERR_INVALID;
    sl_mutex_lock(&ex->base.mu);
    sl_err_t rc = set_job(ex, job_id, workers, err);
    retarget(ex);
    sl_mutex_unlock(&ex->base.mu);
    return rc;
}

static sl_err_t k8s_apply(sl_master_executor_t *base, const sl_master_executor_target_t *targets,
                          uint32_t n, uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    k8s_t *ex = (k8s_t *)base;
    if (started) *started = 0;
    if (stopped) *stopped = 0;
    /* All or nothing: a target dropped half-way would shrink the sum and
     * scale away pods that serve other jobs. */
    for (uint32_t t = 0; t < n; t++)
        if (!job_id_ok(targets[t].job_id, err)) return SL_ERR_INVALID;
    sl_mutex_lock(&ex->base.mu);
    /* the message names the first job that does not fit */
    sl_err_t rc = reserve_jobs(ex, n)
                      ? SL_OK
                      : sl_error_set(err, SL_ERR_NOMEM, "executor: job %s: out of memory",
                                     targets[ex->cap_jobs].job_id);
    if (rc == SL_OK) {
        ex->njobs = 0; /* a job not listed has no workers */
        for (uint32_t t = 0; t < n; t++)
            if (targets[t].workers > 0) {
                job_target_t *j = &ex->jobs[ex->njobs++];
                snprintf(j->job_id, sizeof j->job_id, "%s", targets[t].job_id);
                j->workers = targets[t].workers;
            }
        retarget(ex);
    }
    sl_mutex_unlock(&ex->base.mu);
    return rc;
}

static uint32_t k8s_reap(sl_master_executor_t *base)
{
    (void)base; /* the kubelet reaps */
    return 0;
}

/* A job's share of the replicas asked for (its target), or all of them. */
static uint32_t k8s_count(sl_master_executor_t *base, const char *job_id)
{
    k8s_t *ex = (k8s_t *)base;
    sl_mutex_lock(&ex->base.mu);
    uint32_t n = 0;
    if (job_id == NULL) {
        n = ex->base.stats.desired;
    } else {
        for (uint32_t i = 0; i < ex->njobs; i++)
            if (strcmp(ex->jobs[i].job_id, job_id) == 0) n = ex->jobs[i].workers;
    }
    sl_mutex_unlock(&ex->base.mu);
    return n;
}

static uint32_t k8s_list(sl_master_executor_t *base, const char *job_id,
                         sl_master_executor_worker_t *out, uint32_t cap)
{
    /* Pods are the Deployment's, not processes of this one: none to list
     * (the master's /workers lists them once they register). */
    (void)base, (void)job_id, (void)out, (void)cap;
    return 0;
}

/* The wait before the next attempt, from now (0 while failing: the
 * retry is under way). */
static void k8s_refresh(sl_master_executor_t *base, uint64_t now) SL_REQUIRES(base->mu)
{
    k8s_t *ex = (k8s_t *)base;
    ex->base.stats.next_retry_ms = ex->not_before > now ? (uint32_t)(ex->not_before - now) : 0;
}

static const sl_master_executor_ops_t k8s_ops = {
    .kind = "kubernetes",
    .scale = k8s_scale,
    .apply = k8s_apply,
    .reap = k8s_reap,
    .count = k8s_count,
    .list = k8s_list,
    .refresh = k8s_refresh,
    .destroy = k8s_destroy,
};
