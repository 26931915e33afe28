/* The AWS credentials chain (creds.h): environment, shared files, web
 * identity through STS, instance metadata (IMDSv2); refreshed before
 * expiry under a lock. Secrets only ever go into sl_creds_value_t and
 * from there into curl's request; messages name sources and files. */
#include "creds.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "http.h"
#include "xml.h"

struct sl_creds {
    const sl_allocator_t *a;
    sl_store_opts_t opts; /* STS and IMDS transport; ca_bundle points at ca */
    char *ca;
    char region[64];
    pthread_mutex_t mu;
    sl_creds_value_t cur; /* guarded by mu */
    bool have;
    int64_t refresh_at; /* when cur is to be fetched again; 0: never */
    _Atomic uint64_t fetches;
};

void sl_creds_wipe(sl_creds_value_t *v)
{
    /* volatile: the wipe must not be optimised away as a dead store. */
    volatile char *p = (volatile char *)v;
    for (size_t i = 0; i < sizeof *v; i++)
        p[i] = 0;
}

int64_t sl_creds_parse_time(const char *s)
{
    struct tm tm = {0};
    int n = 0;
    if (s == NULL || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                            &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    const char *rest = s + n;
    if (*rest == '.')
        for (rest++; *rest >= '0' && *rest <= '9'; rest++) {
        }
    if (strcmp(rest, "Z") != 0 && strcmp(rest, "+00:00") != 0) return -1;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* ---- the shared files ---- */

static const char *home_file(char *buf, size_t cap, const char *env, const char *name)
{
    const char *p = getenv(env);
    if (p && *p) return p;
    const char *home = getenv("HOME");
    snprintf(buf, cap, "%s/.aws/%s", home ? home : "", name);
    return buf;
}

static const char *profile(void)
{
    const char *p = getenv("AWS_PROFILE");
    return p && *p ? p : "default";
}

/* key's value in section of the INI text into buf. In the config file a
 * profile's section is "[profile NAME]" ("[default]" for default). */
static bool ini_get(const char *text, const char *section, bool config, const char *key, char *buf,
                    size_t cap)
{
    char want[300];
    if (config && strcmp(section, "default") != 0)
        snprintf(want, sizeof want, "profile %s", section);
    else
        snprintf(want, sizeof want, "%s", section);
    bool in = false;
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        while (n > 0 && (l[0] == ' ' || l[0] == '\t'))
            l++, n--;
        while (n > 0 && (l[n - 1] == '\r' || l[n - 1] == ' ' || l[n - 1] == '\t'))
            n--;
        if (n >= 2 && l[0] == '[' && l[n - 1] == ']') {
            const char *s = l + 1;
            size_t sn = n - 2;
            while (sn > 0 && *s == ' ')
                s++, sn--;
            while (sn > 0 && s[sn - 1] == ' ')
                sn--;
            in = sn == strlen(want) && strncmp(s, want, sn) == 0;
        } else if (in && n > 0 && l[0] != '#' && l[0] != ';') {
            const char *eq = memchr(l, '=', n);
            if (eq) {
                size_t kn = (size_t)(eq - l);
                while (kn > 0 && (l[kn - 1] == ' ' || l[kn - 1] == '\t'))
                    kn--;
                if (kn == strlen(key) && strncasecmp(l, key, kn) == 0) {
                    const char *v = eq + 1;
                    while (v < l + n && (*v == ' ' || *v == '\t'))
                        v++;
                    size_t vn = (size_t)(l + n - v);
                    if (vn >= cap) return false;
                    memcpy(buf, v, vn);
                    buf[vn] = '\0';
                    return true;
                }
            }
        }
        l = e ? e + 1 : NULL;
    }
    return false;
}

/* A shared file's text (NULL when absent); free with sl_free(a, t, len + 1). */
static char *read_shared(const sl_allocator_t *a, const char *path, size_t *len)
{
    char *t = NULL;
    sl_error_t e = {0};
    if (sl_io_read_file(path, "AWS shared file", 1 << 20, a, &t, len, &e) != SL_OK) return NULL;
    return t;
}

void sl_creds_region(char *buf, size_t cap)
{
    const char *r = getenv("AWS_REGION");
    if (r == NULL || !*r) r = getenv("AWS_DEFAULT_REGION");
    if (r && *r) {
        snprintf(buf, cap, "%s", r);
        return;
    }
    char pb[512];
    size_t len;
    const sl_allocator_t *a = sl_allocator_default();
    char *t = read_shared(a, home_file(pb, sizeof pb, "AWS_CONFIG_FILE", "config"), &len);
    if (t == NULL || !ini_get(t, profile(), true, "region", buf, cap) || !*buf)
        snprintf(buf, cap, "us-east-1");
    if (t) sl_free(a, t, len + 1);
}

/* ---- sources ---- */

typedef enum { FOUND, NONE, FAILED } outcome_t;

static outcome_t from_env(sl_creds_value_t *v, char *why, size_t cap, sl_error_t *err)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    const char *tok = getenv("AWS_SESSION_TOKEN");
    if ((id == NULL || !*id) && (sk == NULL || !*sk)) {
        snprintf(why, cap, "environment: AWS_ACCESS_KEY_ID is not set");
        return NONE;
    }
    if (id == NULL || !*id || sk == NULL || !*sk) {
        sl_error_set(err, SL_ERR_INVALID,
                     "credentials from the environment: %s is set but %s is not",
                     id && *id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                     id && *id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        return FAILED;
    }
    if (strlen(id) >= sizeof v->key_id || strlen(sk) >= sizeof v->secret ||
        (tok && strlen(tok) >= sizeof v->token)) {
        sl_error_set(err, SL_ERR_TOO_LARGE, "credentials from the environment: a value too long");
        return FAILED;
    }
    snprintf(v->key_id, sizeof v->key_id, "%s", id);
    snprintf(v->secret, sizeof v->secret, "%s", sk);
    snprintf(v->token, sizeof v->token, "%s", tok ? tok : "");
    v->expires_s = 0;
    v->source = "environment";
    return FOUND;
}

static outcome_t from_files(sl_creds_t *c, sl_creds_value_t *v, char *why, size_t cap,
                            sl_error_t *err)
{
    char pb1[512], pb2[512];
    const char *cred_path =
        home_file(pb1, sizeof pb1, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
    const char *conf_path = home_file(pb2, sizeof pb2, "AWS_CONFIG_FILE", "config");
    const char *paths[2] = {cred_path, conf_path};
    outcome_t out = NONE;
    for (int i = 0; i < 2 && out == NONE; i++) {
        size_t len;
        char *t = read_shared(c->a, paths[i], &len);
        if (t == NULL) continue;
        bool id = ini_get(t, profile(), i == 1, "aws_access_key_id", v->key_id, sizeof v->key_id);
        bool sk =
            ini_get(t, profile(), i == 1, "aws_secret_access_key", v->secret, sizeof v->secret);
        if (!ini_get(t, profile(), i == 1, "aws_session_token", v->token, sizeof v->token))
            v->token[0] = '\0';
        if (id && sk && v->key_id[0] && v->secret[0]) {
            v->expires_s = 0;
            v->source = "shared files";
            out = FOUND;
        } else if (id || sk) {
            sl_error_set(err, SL_ERR_INVALID,
                         "credentials from %s, profile %s: aws_access_key_id and "
                         "aws_secret_access_key must both be set",
                         paths[i], profile());
            out = FAILED;
        }
        volatile char *p = t;
        for (size_t k = 0; k < len; k++)
            p[k] = 0;
        sl_free(c->a, t, len + 1);
    }
    if (out == NONE)
        snprintf(why, cap, "shared files: no keys for profile %s in %s or %s", profile(), cred_path,
                 conf_path);
    if (out != FOUND) sl_creds_wipe(v);
    return out;
}

static sl_err_t transport(sl_creds_t *c, uint32_t connect_ms, uint32_t attempts,
                          sl_store_http_t **h, sl_error_t *err)
{
    sl_store_opts_t o = c->opts;
    o.connect_timeout_ms = connect_ms;
    o.request_timeout_ms = connect_ms * 5;
    o.max_attempts = attempts;
    return sl_store_http_new(&o, c->region, NULL, h, err);
}

static outcome_t from_web_identity(sl_creds_t *c, sl_creds_value_t *v, char *why, size_t cap,
                                   sl_error_t *err)
{
    char tf_buf[512], arn_buf[512], conf_buf[512];
    const char *tf = getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), *arn = getenv("AWS_ROLE_ARN");
    if (tf == NULL || !*tf) {
        /* Or the profile's web_identity_token_file and role_arn. */
        size_t len;
        char *t = read_shared(
            c->a, home_file(conf_buf, sizeof conf_buf, "AWS_CONFIG_FILE", "config"), &len);
        if (t && ini_get(t, profile(), true, "web_identity_token_file", tf_buf, sizeof tf_buf) &&
            ini_get(t, profile(), true, "role_arn", arn_buf, sizeof arn_buf)) {
            tf = tf_buf;
            arn = arn_buf;
        }
        if (t) sl_free(c->a, t, len + 1);
    }
    if (tf == NULL || !*tf) {
        snprintf(why, cap, "web identity: AWS_WEB_IDENTITY_TOKEN_FILE is not set");
        return NONE;
    }
    if (arn == NULL || !*arn) {
        sl_error_set(
            err, SL_ERR_INVALID,
            "web identity: AWS_WEB_IDENTITY_TOKEN_FILE is set (%s) but AWS_ROLE_ARN is not", tf);
        return FAILED;
    }
    char *token = NULL;
    size_t tlen = 0;
    if (sl_io_read_file(tf, "web identity token", 64 << 10, c->a, &token, &tlen, err) != SL_OK) {
        sl_error_prefix(err, "web identity: ");
        return FAILED;
    }
    while (tlen > 0 &&
           (token[tlen - 1] == '\n' || token[tlen - 1] == '\r' || token[tlen - 1] == ' '))
        token[--tlen] = '\0';
    const char *session = getenv("AWS_ROLE_SESSION_NAME");
    char sess[64];
    if (session == NULL || !*session) {
        snprintf(sess, sizeof sess, "sluice-%lld", (long long)time(NULL));
        session = sess;
    }
    const char *ep = getenv("AWS_ENDPOINT_URL_STS");
    char *url = ep && *ep ? sl_strdup(c->a, ep)
                          : sl_strfmt(c->a, "https://sts.%s.amazonaws.com/", c->region);
    sl_store_buf_t body = {0};
    bool ok = url &&
              sl_store_buf_add(c->a, &body, "Action=AssumeRoleWithWebIdentity&RoleArn=", 41) &&
              sl_store_buf_enc(c->a, &body, arn, false) &&
              sl_store_buf_add(c->a, &body, "&RoleSessionName=", 17) &&
              sl_store_buf_enc(c->a, &body, session, false) &&
              sl_store_buf_add(c->a, &body, "&Version=2011-06-15&WebIdentityToken=", 37) &&
              sl_store_buf_enc(c->a, &body, token, false);
    memset(token, 0, tlen);
    sl_free(c->a, token, tlen + 1);
    outcome_t out = FAILED;
    sl_store_http_t *h = NULL;
    if (!ok) {
        sl_error_set(err, SL_ERR_NOMEM, "web identity: out of memory");
    } else if (transport(c, 5000, 3, &h, err) == SL_OK) {
        char what[600];
        snprintf(what, sizeof what, "STS AssumeRoleWithWebIdentity %s (role %s)", url, arn);
        sl_store_req_t r = {.method = "POST",
                            .url = url,
                            .what = what,
                            .body = body.data,
                            .body_len = body.len,
                            .headers = {"Content-Type: application/x-www-form-urlencoded"}};
        sl_store_req_t *rs[1] = {&r};
        if (sl_store_http_run(h, NULL, rs, 1, 1, UINT64_MAX) != SL_OK) {
            if (err) *err = r.err;
        } else if (sl_store_xml_sts(r.resp.data, r.resp.len, v, err) == SL_OK) {
            v->source = "web identity";
            out = FOUND;
        } else {
            sl_error_prefix(err, "%s: ", what);
        }
        if (r.resp.data) memset(r.resp.data, 0, r.resp.len);
        sl_store_req_free(h, &r);
    }
    sl_store_http_destroy(h);
    if (body.data) memset(body.data, 0, body.len);
    sl_store_buf_free(c->a, &body);
    sl_strfree(c->a, url);
    (void)why;
    return out;
}

static outcome_t from_imds(sl_creds_t *c, sl_creds_value_t *v, char *why, size_t cap,
                           sl_error_t *err)
{
    const char *off = getenv("AWS_EC2_METADATA_DISABLED");
    if (off && strcasecmp(off, "true") == 0) {
        snprintf(why, cap, "instance metadata: disabled (AWS_EC2_METADATA_DISABLED=true)");
        return NONE;
    }
    const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (ep == NULL || !*ep) ep = "http://169.254.169.254";
    size_t epn = strlen(ep);
    while (epn > 0 && ep[epn - 1] == '/')
        epn--;
    sl_store_http_t *h = NULL;
    /* Off EC2 nothing answers: a short connect timeout, two tries (as the
     * AWS SDKs do), so a machine without IMDS learns it in seconds. */
    if (transport(c, 1000, 2, &h, err) != SL_OK) return FAILED;
    outcome_t out = NONE;
    char url[600], hdr[200], role[256], what[700];
    snprintf(url, sizeof url, "%.*s/latest/api/token", (int)epn, ep);
    snprintf(what, sizeof what, "instance metadata %.*s", (int)epn, ep);
    sl_store_req_t t = {.method = "PUT",
                        .url = url,
                        .what = what,
                        .body = "",
                        .body_len = 0,
                        .max_resp = 4096,
                        .headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}};
    sl_store_req_t *rs[1] = {&t};
    sl_store_req_t r1 = {0}, r2 = {0};
    if (sl_store_http_run(h, NULL, rs, 1, 1, UINT64_MAX) != SL_OK) {
        snprintf(why, cap, "instance metadata: %s", t.err.msg);
        goto done;
    }
    snprintf(hdr, sizeof hdr, "X-aws-ec2-metadata-token: %.*s",
             (int)(t.resp.len < 150 ? t.resp.len : 150), t.resp.data ? t.resp.data : "");
    snprintf(url, sizeof url, "%.*s/latest/meta-data/iam/security-credentials/", (int)epn, ep);
    r1 = (sl_store_req_t){
        .method = "GET", .url = url, .what = what, .max_resp = 4096, .headers = {hdr}};
    rs[0] = &r1;
    out = FAILED;
    if (sl_store_http_run(h, NULL, rs, 1, 1, UINT64_MAX) != SL_OK) {
        if (err) *err = r1.err;
        if (r1.status == 404) {
            snprintf(why, cap, "instance metadata: no IAM role attached to this instance");
            out = NONE;
        }
        goto done;
    }
    size_t rn = strcspn(r1.resp.data ? r1.resp.data : "", "\r\n");
    if (rn == 0 || rn >= sizeof role) {
        sl_error_set(err, SL_ERR_PROTOCOL, "%s: an IAM role name of %zu bytes", what, rn);
        goto done;
    }
    memcpy(role, r1.resp.data, rn);
    role[rn] = '\0';
    snprintf(url, sizeof url, "%.*s/latest/meta-data/iam/security-credentials/%s", (int)epn, ep,
             role);
    r2 = (sl_store_req_t){
        .method = "GET", .url = url, .what = what, .max_resp = 16384, .headers = {hdr}};
    rs[0] = &r2;
    if (sl_store_http_run(h, NULL, rs, 1, 1, UINT64_MAX) != SL_OK) {
        if (err) *err = r2.err;
        goto done;
    }
    json_error_t je;
    json_t *j = json_loadb(r2.resp.data, r2.resp.len, 0, &je);
    const char *id = json_string_value(json_object_get(j, "AccessKeyId"));
    const char *sk = json_string_value(json_object_get(j, "SecretAccessKey"));
    const char *tok = json_string_value(json_object_get(j, "Token"));
    const char *exp = json_string_value(json_object_get(j, "Expiration"));
    if (!id || !sk || !tok || !exp || strlen(id) >= sizeof v->key_id ||
        strlen(sk) >= sizeof v->secret || strlen(tok) >= sizeof v->token ||
        (v->expires_s = sl_creds_parse_time(exp)) < 0) {
        sl_error_set(err, SL_ERR_PROTOCOL,
                     "%s: role %s: the answer lacks AccessKeyId, SecretAccessKey, Token or a "
                     "valid Expiration",
                     what, role);
    } else {
        snprintf(v->key_id, sizeof v->key_id, "%s", id);
        snprintf(v->secret, sizeof v->secret, "%s", sk);
        snprintf(v->token, sizeof v->token, "%s", tok);
        v->source = "instance metadata";
        out = FOUND;
    }
    json_decref(j);
done:
    memset(hdr, 0, sizeof hdr);
    if (r2.resp.data) memset(r2.resp.data, 0, r2.resp.len);
    if (t.resp.data) memset(t.resp.data, 0, t.resp.len);
    sl_store_req_free(h, &t);
    sl_store_req_free(h, &r1);
    sl_store_req_free(h, &r2);
    sl_store_http_destroy(h);
    return out;
}

/* Walk the chain. Called under c->mu. */
static sl_err_t resolve(sl_creds_t *c, sl_creds_value_t *v, sl_error_t *err)
{
    char why[4][1400] = {{0}};
    outcome_t o = from_env(v, why[0], sizeof why[0], err);
    if (o == NONE) o = from_files(c, v, why[1], sizeof why[1], err);
    if (o == NONE) {
        o = from_web_identity(c, v, why[2], sizeof why[2], err);
        if (o == FOUND) atomic_fetch_add(&c->fetches, 1);
    }
    if (o == NONE) {
        o = from_imds(c, v, why[3], sizeof why[3], err);
        if (o == FOUND) atomic_fetch_add(&c->fetches, 1);
    }
    if (o == FOUND) return SL_OK;
    sl_creds_wipe(v);
    if (o == FAILED) return err ? err->code : SL_ERR_INVALID;
    return sl_error_set(err, SL_ERR_NOT_FOUND, "no AWS credentials found: %s; %s; %s; %s", why[0],
                        why[1], why[2], why[3]);
}

sl_err_t sl_creds_new(const sl_store_opts_t *opts, const char *region, sl_creds_t **out,
                      sl_error_t *err)
{
    const sl_allocator_t *a = opts->alloc ? opts->alloc : sl_allocator_default();
    sl_creds_t *c = sl_calloc(a, 1, sizeof *c);
    if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "credentials: out of memory");
    c->a = a;
    c->opts = *opts;
    c->opts.alloc = a;
    c->opts.endpoint = c->opts.region = NULL; /* the caller's, not kept */
    c->opts.ca_bundle = NULL;
    if (opts->ca_bundle && (c->opts.ca_bundle = c->ca = sl_strdup(a, opts->ca_bundle)) == NULL) {
        sl_free(a, c, sizeof *c);
        return sl_error_set(err, SL_ERR_NOMEM, "credentials: out of memory");
    }
    snprintf(c->region, sizeof c->region, "%s", region);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return SL_OK;
}

void sl_creds_destroy(sl_creds_t *c)
{
    if (c == NULL) return;
    sl_creds_wipe(&c->cur);
    sl_strfree(c->a, c->ca);
    pthread_mutex_destroy(&c->mu);
    sl_free(c->a, c, sizeof *c);
}

uint64_t sl_creds_fetches(sl_creds_t *c)
{
    return atomic_load(&c->fetches);
}

sl_err_t sl_creds_get(sl_creds_t *c, sl_creds_value_t *out, sl_error_t *err)
{
    if (c == NULL) return sl_error_set(err, SL_ERR_INVALID, "a signed request without credentials");
    pthread_mutex_lock(&c->mu);
    int64_t now = (int64_t)time(NULL);
    sl_err_t rc = SL_OK;
    if (!c->have || (c->refresh_at && now >= c->refresh_at)) {
        sl_creds_value_t v = {0};
        sl_error_t e = {0};
        rc = resolve(c, &v, &e);
        if (rc == SL_OK) {
            c->cur = v;
            c->have = true;
            int64_t life = v.expires_s ? v.expires_s - now : 0;
            /* Five minutes early, or half the life of short credentials. */
            c->refresh_at =
                v.expires_s ? v.expires_s - (life / 2 < 300 ? (life > 0 ? life / 2 : 0) : 300) : 0;
            sl_log_kv(SL_LOG_DEBUG, SL_EV(STORE_CREDENTIALS),
                      (SL_KV_STR("source", v.source), SL_KV_I64("expires_s", v.expires_s)),
                      "AWS credentials from %s", v.source);
        } else if (c->have && now < c->cur.expires_s) {
            /* The old ones still work: use them, and try again next time. */
            sl_log_kv(SL_LOG_WARN, SL_EV(STORE_CREDENTIALS_REFRESH_FAILED),
                      (SL_KV_STR("source", c->cur.source), SL_KV_STR("error", e.msg)),
                      "refreshing AWS credentials failed (%s); the current ones are still valid",
                      e.msg);
            rc = SL_OK;
        } else {
            if (err) *err = e;
        }
        sl_creds_wipe(&v);
    }
    if (rc == SL_OK) *out = c->cur;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
