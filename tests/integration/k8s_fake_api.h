/* A fake Kubernetes API server for the Kubernetes executor's tests
 * (k8s_executor_test.c): libmicrohttpd over TLS with a certificate the
 * test makes, serving the scale subresource of the one Deployment
 * NS/DEPLOY. It checks what a real API server checks and refuses the same
 * way (a Status object with its message): a wrong bearer token 401,
 * another path 404, another method 405, a PATCH that is not a JSON merge
 * patch 415, a body that is not {"spec":{"replicas":N}} 422; it can be
 * told to answer the next PATCHes 500. It keeps every request it
 * answered (method, path, headers, body, status, time), so a test sees
 * exactly what was sent and when.
 *
 * Everything is static: the test file includes this once, after
 * fleet_util.h. */
#ifndef SLUICE_TESTS_K8S_FAKE_API_H
#define SLUICE_TESTS_K8S_FAKE_API_H

#include <microhttpd.h>

#define NS "ml-prod"
#define DEPLOY "sluice-worker"
#define SCALE_PATH "/apis/apps/v1/namespaces/" NS "/deployments/" DEPLOY "/scale"

/* ---- the fake API server ---- */

#define MAX_REQS 256

typedef struct req_rec {
    char method[16];
    char path[256];
    char auth[128];
    char content_type[96];
    char body[256];
    int status;
    double at; /* fu_now() */
} req_rec_t;

typedef struct fake_api {
    struct MHD_Daemon *d;
    uint16_t port;
    char *cert, *key; /* PEM, for MHD while it runs */
    pthread_mutex_t mu;
    char token[64];   /* the bearer token it accepts */
    int64_t replicas; /* of the Deployment */
    int fail_patches; /* answer this many PATCHes with 500 first */
    req_rec_t reqs[MAX_REQS];
    int nreqs;
} fake_api_t;

typedef struct upload {
    char buf[4096];
    size_t len;
    bool overflow;
} upload_t;

static enum MHD_Result reply(struct MHD_Connection *c, int status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A real API server's refusal: a Status object. */
static json_t *status_obj(int code, const char *reason, const char *message)
{
    return json_pack("{s:s, s:s, s:{}, s:s, s:s, s:s, s:i}", "kind", "Status", "apiVersion", "v1",
                     "metadata", "status", "Failure", "message", message, "reason", reason, "code",
                     code);
}

/* The Scale, as the API server writes it: replicas 0 is left out. */
static json_t *scale_obj(int64_t replicas)
{
    json_t *spec = json_object();
    if (replicas > 0) json_object_set_new(spec, "replicas", json_integer(replicas));
    return json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:{s:I}}", "kind", "Scale", "apiVersion",
                     "autoscaling/v1", "metadata", "name", DEPLOY, "namespace", NS, "spec", spec,
                     "status", "replicas", (json_int_t)replicas);
}

/* Is body exactly a merge patch of spec.replicas (a non-negative integer)?
 * @return it, or -1. */
static int64_t patch_replicas(const char *body)
{
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, NULL);
    json_t *spec = json_object_get(j, "spec");
    json_t *r = json_object_get(spec, "replicas");
    int64_t v = json_is_object(j) && json_object_size(j) == 1 && json_is_object(spec) &&
                        json_object_size(spec) == 1 && json_is_integer(r) &&
                        json_integer_value(r) >= 0
                    ? json_integer_value(r)
                    : -1;
    json_decref(j);
    return v;
}

static enum MHD_Result fake_answer(fake_api_t *f, struct MHD_Connection *c, const char *method,
                                   const char *url, const upload_t *up)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    pthread_mutex_lock(&f->mu);
    req_rec_t *rec = f->nreqs < MAX_REQS ? &f->reqs[f->nreqs++] : NULL;
    req_rec_t tmp;
    if (rec == NULL) rec = &tmp;
    memset(rec, 0, sizeof *rec);
    snprintf(rec->method, sizeof rec->method, "%s", method);
    snprintf(rec->path, sizeof rec->path, "%s", url);
    snprintf(rec->auth, sizeof rec->auth, "%s", auth ? auth : "");
    snprintf(rec->content_type, sizeof rec->content_type, "%s", ct ? ct : "");
    snprintf(rec->body, sizeof rec->body, "%.*s", (int)up->len, up->buf);
    rec->at = fu_now();
    char want_auth[96];
    snprintf(want_auth, sizeof want_auth, "Bearer %s", f->token);
    int status;
    json_t *body;
    int64_t n;
    if (auth == NULL || strcmp(auth, want_auth) != 0) {
        status = 401;
        body = status_obj(401, "Unauthorized", "Unauthorized");
    } else if (strcmp(url, SCALE_PATH) != 0) {
        status = 404;
        body = status_obj(404, "NotFound", "the server could not find the requested resource");
    } else if (strcmp(method, "GET") == 0) {
        status = 200;
        body = scale_obj(f->replicas);
    } else if (strcmp(method, "PATCH") != 0) {
        status = 405;
        body = status_obj(405, "MethodNotAllowed", "the server does not allow this method");
    } else if (ct == NULL || strcmp(ct, "application/merge-patch+json") != 0) {
        status = 415;
        body = status_obj(415, "UnsupportedMediaType",
                          "the body of the request was in an unknown format - accepted media "
                          "types include: application/json-patch+json, "
                          "application/merge-patch+json, application/apply-patch+yaml");
    } else if (up->overflow || (n = patch_replicas(up->buf)) < 0) {
        status = 422;
        body =
            status_obj(422, "Invalid",
                       "Scale.autoscaling \"" DEPLOY "\" is invalid: spec.replicas: Invalid value");
    } else if (f->fail_patches > 0) {
        f->fail_patches--;
        status = 500;
        body = status_obj(500, "InternalError", "etcdserver: request timed out");
    } else {
        f->replicas = n;
        status = 200;
        body = scale_obj(n);
    }
    rec->status = status;
    pthread_mutex_unlock(&f->mu);
    return reply(c, status, body);
}

static enum MHD_Result fake_request(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version, const char *data,
                                    size_t *size, void **con_cls)
{
    (void)version;
    upload_t *up = *con_cls;
    if (up == NULL) {
        up = calloc(1, sizeof *up);
        *con_cls = up;
        return up ? MHD_YES : MHD_NO;
    }
    if (*size > 0) {
        size_t k = *size;
        if (k > sizeof up->buf - 1 - up->len) {
            up->overflow = true;
            k = sizeof up->buf - 1 - up->len;
        }
        memcpy(up->buf + up->len, data, k);
        up->len += k;
        up->buf[up->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    return fake_answer(cls, c, method, url, up);
}

static void fake_done(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

/* Start the fake on a free port of 127.0.0.1 with the certificate and key
 * (PEM files) cert and key. */
static void fake_start(fake_api_t *f, const char *cert, const char *key, const char *token,
                       int64_t replicas)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    snprintf(f->token, sizeof f->token, "%s", token);
    f->replicas = replicas;
    char *c = f->cert = tu_read_file(cert), *k = f->key = tu_read_file(key);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_TLS, 0, NULL,
                            NULL, fake_request, f, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_HTTPS_MEM_CERT, c, MHD_OPTION_HTTPS_MEM_KEY, k,
                            MHD_OPTION_NOTIFY_COMPLETED, fake_done, f,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    cr_assert_not_null(f->d, "the fake API server did not start");
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    f->port = info->port;
}

static void fake_stop(fake_api_t *f)
{
    if (f->d) MHD_stop_daemon(f->d);
    f->d = NULL;
    free(f->cert);
    free(f->key);
    pthread_mutex_destroy(&f->mu);
}

/* Someone else sets the scale (kubectl scale). */
static void fake_put_replicas(fake_api_t *f, int64_t n)
{
    pthread_mutex_lock(&f->mu);
    f->replicas = n;
    pthread_mutex_unlock(&f->mu);
}

static void fake_set(fake_api_t *f, const char *token, int fail_patches)
{
    pthread_mutex_lock(&f->mu);
    if (token) snprintf(f->token, sizeof f->token, "%s", token);
    f->fail_patches = fail_patches;
    pthread_mutex_unlock(&f->mu);
}

static int64_t fake_replicas(fake_api_t *f)
{
    pthread_mutex_lock(&f->mu);
    int64_t r = f->replicas;
    pthread_mutex_unlock(&f->mu);
    return r;
}

/* A copy of the requests answered so far. @return how many. */
static int fake_reqs(fake_api_t *f, req_rec_t *out)
{
    pthread_mutex_lock(&f->mu);
    int n = f->nreqs;
    memcpy(out, f->reqs, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&f->mu);
    return n;
}

static int count_method(const req_rec_t *r, int n, const char *method)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += strcmp(r[i].method, method) == 0;
    return k;
}

#endif
