/* The AWS credentials chain (src/store/creds.c): each source, their order,
 * refreshing before expiry from several threads, and no secret in any
 * message. STS and the instance metadata service are fakes served by
 * libmicrohttpd in the test, checking what the real ones check. */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/creds.h"
#include "store/store_internal.h"
#include "common/clock.h"
#include "testutil.h"

#define ROLE_ARN "arn:aws:iam::123456789012:role/sluice-reader"
#define ROLE_ARN_ENC "arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fsluice-reader"
#define WEB_TOKEN "eyJhbGciOiJSUzI1NiJ9.web-identity-token.sig"
#define IMDS_TOKEN "AQAEAFakeImdsSessionToken=="

/* ---- the fake STS and IMDS ---- */

/* What the fake IMDS answers wrongly. */
typedef enum { IMDS_OK, IMDS_NO_ROLE, IMDS_EMPTY_ROLE, IMDS_CREDS_500, IMDS_NO_TOKEN } imds_mode_t;

typedef struct fake {
    struct MHD_Daemon *d;
    uint16_t port;
    pthread_mutex_t mu;
    int life_s;           /* of the credentials it hands out */
    bool deny;            /* STS: 403 AccessDenied */
    bool any_session;     /* STS: any RoleSessionName sluice-*, not only sluice-test */
    const char *sts_body; /* STS: this answer (200) in place of credentials */
    int imds_mode;        /* IMDS: one of imds_mode_t */
    int issued;           /* credentials handed out */
    int bad_requests;     /* requests that broke what the real service checks */
    char last_body[4096];
} fake_t;

typedef struct upload {
    char buf[4096];
    size_t len;
} upload_t;

static enum MHD_Result answer(struct MHD_Connection *c, int status, const char *type,
                              const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static void iso_time(time_t t, char *buf, size_t cap)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **state)
{
    (void)version;
    fake_t *f = cls;
    if (*state == NULL) {
        *state = calloc(1, sizeof(upload_t));
        return MHD_YES;
    }
    upload_t *u = *state;
    if (*data_size > 0) {
        size_t n =
            *data_size < sizeof u->buf - 1 - u->len ? *data_size : sizeof u->buf - 1 - u->len;
        memcpy(u->buf + u->len, data, n);
        u->len += n;
        *data_size = 0;
        return MHD_YES;
    }
    char body[8192], exp[32];
    pthread_mutex_lock(&f->mu);
    iso_time(time(NULL) + f->life_s, exp, sizeof exp);
    enum MHD_Result rc;
    if (strcmp(method, "POST") == 0 && strcmp(url, "/") == 0) { /* STS */
        snprintf(f->last_body, sizeof f->last_body, "%s", u->buf);
        bool ok = strstr(u->buf, "Action=AssumeRoleWithWebIdentity") &&
                  strstr(u->buf, "RoleArn=" ROLE_ARN_ENC "&") &&
                  strstr(u->buf, f->any_session ? "RoleSessionName=sluice-"
                                                : "RoleSessionName=sluice-test&") &&
                  strstr(u->buf, "Version=2011-06-15") &&
                  strstr(u->buf, "WebIdentityToken=eyJhbGciOiJSUzI1NiJ9.web-identity-token.sig");
        if (!ok) {
            f->bad_requests++;
            rc = answer(c, 400, "text/xml",
                        "<ErrorResponse><Error><Code>InvalidParameterValue</Code><Message>bad "
                        "request</Message></Error></ErrorResponse>");
        } else if (f->sts_body) {
            rc = answer(c, 200, "text/xml", f->sts_body);
        } else if (f->deny) {
            rc = answer(c, 403, "text/xml",
                        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                        "<Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not "
                        "authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>"
                        "</ErrorResponse>");
        } else {
            f->issued++;
            snprintf(body, sizeof body,
                     "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/"
                     "2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials>"
                     "<SessionToken>sts-session-%d</SessionToken><SecretAccessKey>sts-secret-%d"
                     "</SecretAccessKey><Expiration>%s</Expiration><AccessKeyId>ASIASTS%d"
                     "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
                     "</AssumeRoleWithWebIdentityResponse>",
                     f->issued, f->issued, exp, f->issued);
            rc = answer(c, 200, "text/xml", body);
        }
    } else if (strcmp(method, "PUT") == 0 && strcmp(url, "/latest/api/token") == 0) {
        const char *ttl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token-ttl-seconds");
        if (ttl == NULL) f->bad_requests++;
        rc = ttl ? answer(c, 200, "text/plain", IMDS_TOKEN)
                 : answer(c, 400, "text/plain", "missing ttl");
    } else if (strcmp(method, "GET") == 0 &&
               strncmp(url, "/latest/meta-data/iam/security-credentials/", 43) == 0) {
        const char *tok =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token");
        if (tok == NULL || strcmp(tok, IMDS_TOKEN) != 0) {
            f->bad_requests++;
            rc = answer(c, 401, "text/plain", "");
        } else if (strcmp(url + 43, "") == 0) {
            rc = f->imds_mode == IMDS_NO_ROLE ? answer(c, 404, "text/plain", "")
                 : f->imds_mode == IMDS_EMPTY_ROLE
                     ? answer(c, 200, "text/plain", "\n")
                     : answer(c, 200, "text/plain", "sluice-node-role\n");
        } else if (strcmp(url + 43, "sluice-node-role") == 0 && f->imds_mode == IMDS_CREDS_500) {
            rc = answer(c, 500, "text/plain", "");
        } else if (strcmp(url + 43, "sluice-node-role") == 0 && f->imds_mode == IMDS_NO_TOKEN) {
            rc = answer(c, 200, "application/json",
                        "{\"Code\":\"Success\",\"AccessKeyId\":\"ASIAIMDS\",\"SecretAccessKey\":"
                        "\"imds-secret\",\"Expiration\":\"2026-11-29T04:00:00Z\"}");
        } else if (strcmp(url + 43, "sluice-node-role") == 0) {
            f->issued++;
            snprintf(body, sizeof body,
                     "{\"Code\":\"Success\",\"LastUpdated\":\"2026-11-29T00:00:00Z\",\"Type\":"
                     "\"AWS-HMAC\",\"AccessKeyId\":\"ASIAIMDS%d\",\"SecretAccessKey\":"
                     "\"imds-secret-%d\",\"Token\":\"imds-session-%d\",\"Expiration\":\"%s\"}",
                     f->issued, f->issued, f->issued, exp);
            rc = answer(c, 200, "application/json", body);
        } else {
            rc = answer(c, 404, "text/plain", "");
        }
    } else {
        f->bad_requests++;
        rc = answer(c, 404, "text/plain", "");
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void done(void *cls, struct MHD_Connection *c, void **state,
                 enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    free(*state);
    *state = NULL;
}

static void fake_start(fake_t *f, int life_s)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->life_s = life_s;
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            handle, f, MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_END);
    cr_assert_not_null(f->d);
    f->port = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

/* The same fake over TLS with a self-signed certificate for 127.0.0.1;
 * cert_path gets the certificate (the CA bundle that trusts it). */
static void fake_start_tls(fake_t *f, int life_s, const char *cert_path, const char *key_path)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->life_s = life_s;
    tu_make_cert(cert_path, key_path, "sluice-test-sts");
    char *cert = tu_read_file(cert_path), *key = tu_read_file(key_path);
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_TLS, 0, NULL, NULL, handle, f,
                            MHD_OPTION_HTTPS_MEM_CERT, cert, MHD_OPTION_HTTPS_MEM_KEY, key,
                            MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_END);
    cr_assert_not_null(f->d);
    f->port = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT)->port;
    free(cert);
    free(key);
}

static void fake_stop(fake_t *f)
{
    MHD_stop_daemon(f->d);
}

/* ---- helpers ---- */

static char *tmp_dir;

/* Nothing of the chain set: each test adds the source it tests. */
static void clean_env(void)
{
    const char *vars[] = {"AWS_ACCESS_KEY_ID",
                          "AWS_SECRET_ACCESS_KEY",
                          "AWS_SESSION_TOKEN",
                          "AWS_PROFILE",
                          "AWS_WEB_IDENTITY_TOKEN_FILE",
                          "AWS_ROLE_ARN",
                          "AWS_ROLE_SESSION_NAME",
                          "AWS_ENDPOINT_URL_STS",
                          "AWS_REGION",
                          "AWS_DEFAULT_REGION",
                          "AWS_EC2_METADATA_SERVICE_ENDPOINT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    tmp_dir = tu_mkdtemp("creds");
}

static sl_creds_t *chain(void)
{
    sl_store_opts_t o;
    sl_store_opts_fill(NULL, &o);
    o.backoff_base_ms = 10;
    sl_creds_t *c = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_new(&o, "us-east-1", &c, &e), SL_OK, "%s", e.msg);
    return c;
}

static void web_identity_env(const fake_t *f)
{
    char *tf = tu_path(tmp_dir, "token");
    tu_write_file(tf, WEB_TOKEN "\n", strlen(WEB_TOKEN) + 1);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tf, 1);
    setenv("AWS_ROLE_ARN", ROLE_ARN, 1);
    setenv("AWS_ROLE_SESSION_NAME", "sluice-test", 1);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u/", f->port);
    setenv("AWS_ENDPOINT_URL_STS", ep, 1);
    free(tf);
}

/* ---- the sources ---- */

Test(creds, environment)
{
    clean_env();
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    setenv("AWS_SESSION_TOKEN", "env-session", 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDENV");
    cr_assert_str_eq(v.secret, "env-secret");
    cr_assert_str_eq(v.token, "env-session");
    cr_assert_eq(v.expires_s, 0);
    cr_assert_str_eq(v.source, "environment");
    sl_creds_wipe(&v);
    cr_assert_eq(v.key_id[0], 0);
    sl_creds_destroy(c);
}

Test(creds, half_set_environment_is_an_error_without_the_value)
{
    clean_env();
    setenv("AWS_ACCESS_KEY_ID", "AKIDHALF", 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "credentials from the environment: AWS_ACCESS_KEY_ID is set but "
                            "AWS_SECRET_ACCESS_KEY is not");
    sl_creds_destroy(c);
}

Test(creds, shared_files_by_profile_and_environment_first)
{
    clean_env();
    char *cred = tu_path(tmp_dir, "credentials"), *conf = tu_path(tmp_dir, "config");
    const char *ct = "# comment\n[default]\naws_access_key_id=AKIDDEFAULT\n"
                     "aws_secret_access_key=default-secret\n\n[ team ]\n"
                     "  aws_access_key_id = AKIDTEAM  \r\naws_secret_access_key = team-secret\r\n"
                     "aws_session_token = team-session\n";
    tu_write_file(cred, ct, strlen(ct));
    const char *cf = "[default]\nregion = eu-central-1\n[profile cfg]\nregion = ap-south-1\n"
                     "aws_access_key_id = AKIDCFG\naws_secret_access_key = cfg-secret\n";
    tu_write_file(conf, cf, strlen(cf));
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    sl_creds_value_t v;
    sl_error_t e = {0};

    sl_creds_t *c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDDEFAULT");
    cr_assert_str_eq(v.secret, "default-secret");
    cr_assert_str_eq(v.token, "");
    cr_assert_str_eq(v.source, "shared files");
    sl_creds_destroy(c);
    char region[64];
    sl_creds_region(region, sizeof region);
    cr_assert_str_eq(region, "eu-central-1");

    setenv("AWS_PROFILE", "team", 1);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDTEAM");
    cr_assert_str_eq(v.secret, "team-secret");
    cr_assert_str_eq(v.token, "team-session");
    sl_creds_destroy(c);

    setenv("AWS_PROFILE", "cfg", 1); /* only in the config file, as [profile cfg] */
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDCFG");
    sl_creds_destroy(c);
    sl_creds_region(region, sizeof region);
    cr_assert_str_eq(region, "ap-south-1");
    setenv("AWS_REGION", "us-west-2", 1);
    sl_creds_region(region, sizeof region);
    cr_assert_str_eq(region, "us-west-2");

    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1); /* the environment comes first */
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDENV");
    sl_creds_destroy(c);

    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    setenv("AWS_PROFILE", "nobody", 1);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_NOT_FOUND);
    char want[1200];
    snprintf(want, sizeof want,
             "no AWS credentials found: environment: AWS_ACCESS_KEY_ID is not set; shared files: "
             "no keys for profile nobody in %s or %s; web identity: AWS_WEB_IDENTITY_TOKEN_FILE "
             "is not set; instance metadata: disabled (AWS_EC2_METADATA_DISABLED=true)",
             cred, conf);
    cr_assert_str_eq(e.msg, want);
    sl_creds_destroy(c);
    free(cred);
    free(conf);
}

Test(creds, web_identity_through_sts)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    web_identity_env(&f);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    time_t t0 = time(NULL);
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    cr_assert_str_eq(v.secret, "sts-secret-1");
    cr_assert_str_eq(v.token, "sts-session-1");
    cr_assert_str_eq(v.source, "web identity");
    cr_assert(v.expires_s >= t0 + 3599 && v.expires_s <= time(NULL) + 3600, "%lld",
              (long long)v.expires_s);
    cr_assert_eq(f.bad_requests, 0, "STS got: %s", f.last_body);
    /* An hour left: no new fetch. */
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    cr_assert_eq(sl_creds_fetches(c), 1);
    sl_creds_destroy(c);
    fake_stop(&f);
}

Test(creds, sts_refusal_is_named_without_the_token)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    f.deny = true;
    web_identity_env(&f);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_IO);
    char want[400];
    snprintf(want, sizeof want,
             "STS AssumeRoleWithWebIdentity http://127.0.0.1:%u/ (role " ROLE_ARN
             "): POST: HTTP 403 AccessDenied: Not authorized to perform "
             "sts:AssumeRoleWithWebIdentity",
             f.port);
    cr_assert_str_eq(e.msg, want);
    cr_assert_null(strstr(e.msg, "web-identity-token"));
    /* No role: a clear error. */
    unsetenv("AWS_ROLE_ARN");
    sl_creds_destroy(c);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_INVALID);
    cr_assert(strstr(e.msg, "AWS_ROLE_ARN is not"), "%s", e.msg);
    sl_creds_destroy(c);
    fake_stop(&f);
}

Test(creds, sts_over_tls_with_a_ca_bundle)
{
    clean_env();
    char *cert = tu_path(tmp_dir, "ca.pem"), *key = tu_path(tmp_dir, "key.pem");
    fake_t f;
    fake_start_tls(&f, 3600, cert, key);
    web_identity_env(&f);
    char ep[64];
    snprintf(ep, sizeof ep, "https://127.0.0.1:%u/", f.port);
    setenv("AWS_ENDPOINT_URL_STS", ep, 1);
    /* Not trusted by the system's CAs: refused, and not retried. */
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_IO);
    cr_assert(strstr(e.msg, "STS AssumeRoleWithWebIdentity https://127.0.0.1:") &&
                  strstr(e.msg, "POST: "),
              "%s", e.msg);
    cr_assert(strstr(e.msg, "certificate"), "%s", e.msg);
    cr_assert_null(strstr(e.msg, "after"), "a certificate failure is not retried: %s", e.msg);
    sl_creds_destroy(c);
    /* With the CA bundle that holds its certificate: trusted. */
    sl_store_opts_t o;
    sl_store_opts_fill(NULL, &o);
    o.ca_bundle = cert;
    cr_assert_eq(sl_creds_new(&o, "us-east-1", &c, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    sl_creds_destroy(c);
    fake_stop(&f);
    free(cert);
    free(key);
}

typedef struct hammer {
    sl_creds_t *c;
    atomic_int failures;
    double until;
} hammer_t;

static void *hammer_main(void *arg)
{
    hammer_t *h = arg;
    while (sl_clock_s() < h->until) {
        sl_creds_value_t v;
        sl_error_t e = {0};
        if (sl_creds_get(h->c, &v, &e) != SL_OK || strncmp(v.key_id, "ASIASTS", 7) != 0 ||
            strncmp(v.secret, "sts-secret-", 11) != 0 ||
            strcmp(v.key_id + 7, v.secret + 11) != 0) /* a key and secret of one issue */
            atomic_fetch_add(&h->failures, 1);
        sl_creds_wipe(&v);
    }
    return NULL;
}

Test(creds, refreshed_before_expiry_from_many_threads)
{
    clean_env();
    fake_t f;
    fake_start(&f, 4); /* 4 s of life: fetched again after 2 s (half of it) */
    web_identity_env(&f);
    hammer_t h = {.c = chain(), .until = sl_clock_s() + 5.0};
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, hammer_main, &h);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&h.failures), 0);
    /* 5 s at one fetch per 2 s: the first, then 2 refreshes (3 with a slow
     * start); never one per call. */
    uint64_t n = sl_creds_fetches(h.c);
    cr_assert(n >= 3 && n <= 4, "%llu fetches", (unsigned long long)n);
    cr_assert_eq(f.issued, (int)n);
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(h.c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_gt(v.expires_s, (int64_t)time(NULL));
    sl_creds_destroy(h.c);
    fake_stop(&f);
}

Test(creds, instance_metadata_v2)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u", f.port);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    unsetenv("AWS_EC2_METADATA_DISABLED");
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIAIMDS1");
    cr_assert_str_eq(v.secret, "imds-secret-1");
    cr_assert_str_eq(v.token, "imds-session-1");
    cr_assert_str_eq(v.source, "instance metadata");
    cr_assert_gt(v.expires_s, (int64_t)time(NULL) + 3000);
    cr_assert_eq(f.bad_requests, 0);
    cr_assert_eq(sl_creds_fetches(c), 1);
    sl_creds_destroy(c);
    /* "false" is not "true": still asked. Disabled: never asked. */
    setenv("AWS_EC2_METADATA_DISABLED", "TRUE", 1);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "instance metadata: disabled"), "%s", e.msg);
    cr_assert_eq(f.issued, 1);
    sl_creds_destroy(c);
    fake_stop(&f);
}

Test(creds, instance_metadata_unreachable_is_none)
{
    clean_env();
    unsetenv("AWS_EC2_METADATA_DISABLED");
    /* A port nothing listens on: refused at once. */
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "instance metadata: after 2 attempts: instance metadata "
                            "http://127.0.0.1:1: PUT: "),
              "%s", e.msg);
    sl_creds_destroy(c);
}

Test(creds, iso_times)
{
    cr_assert_eq(sl_creds_parse_time("1970-01-01T00:00:00Z"), 0);
    cr_assert_eq(sl_creds_parse_time("2026-11-29T04:00:00Z"), 1795924800);
    cr_assert_eq(sl_creds_parse_time("2026-11-29T04:00:00.123Z"), 1795924800);
    cr_assert_eq(sl_creds_parse_time("2026-11-29T04:00:00+00:00"), 1795924800);
    cr_assert_eq(sl_creds_parse_time("2026-11-29 04:00:00"), -1);
    cr_assert_eq(sl_creds_parse_time("2026-13-29T04:00:00Z"), -1);
    cr_assert_eq(sl_creds_parse_time("2026-11-29T04:00:00+02:00"), -1);
}

/* ---- edge cases of each source ---- */

Test(creds, values_too_long_or_half_set_are_refused_without_the_value)
{
    clean_env();
    char id[200];
    memset(id, 'K', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    setenv("AWS_ACCESS_KEY_ID", id, 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_TOO_LARGE);
    cr_assert_str_eq(e.msg, "credentials from the environment: a value too long");
    sl_creds_destroy(c);

    /* A shared file with a key id and no secret. */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    char *cred = tu_path(tmp_dir, "credentials");
    const char *ct = "[default]\naws_access_key_id = AKIDHALF\n";
    tu_write_file(cred, ct, strlen(ct));
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    c = chain();
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_INVALID);
    char want[600];
    snprintf(want, sizeof want,
             "credentials from %s, profile default: aws_access_key_id and aws_secret_access_key "
             "must both be set",
             cred);
    cr_assert_str_eq(e.msg, want);
    sl_creds_destroy(c);
    /* No credentials at all: the caller is told, not handed empty ones. */
    cr_assert_eq(sl_creds_get(NULL, &v, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "a signed request without credentials");
    free(cred);
}

Test(creds, shared_files_under_home)
{
    clean_env();
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    setenv("HOME", tmp_dir, 1);
    char *aws = tu_path(tmp_dir, ".aws");
    cr_assert_eq(mkdir(aws, 0700), 0);
    char *cred = tu_path(aws, "credentials"), *conf = tu_path(aws, "config");
    const char *ct = "[default]\naws_access_key_id = AKIDHOME\naws_secret_access_key = home\n";
    tu_write_file(cred, ct, strlen(ct));
    const char *cf = "[default]\nregion = sa-east-1\n";
    tu_write_file(conf, cf, strlen(cf));
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "AKIDHOME");
    cr_assert_str_eq(v.source, "shared files");
    sl_creds_destroy(c);
    char region[64];
    sl_creds_region(region, sizeof region);
    cr_assert_str_eq(region, "sa-east-1");
    free(cred);
    free(conf);
    free(aws);
}

Test(creds, web_identity_from_the_profile_with_a_default_session_name)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    f.any_session = true;
    char *tf = tu_path(tmp_dir, "token"), *conf = tu_path(tmp_dir, "config");
    tu_write_file(tf, WEB_TOKEN, strlen(WEB_TOKEN));
    char text[1024];
    snprintf(text, sizeof text,
             "[profile wi]\nweb_identity_token_file = %s\nrole_arn = " ROLE_ARN "\n", tf);
    tu_write_file(conf, text, strlen(text));
    setenv("AWS_CONFIG_FILE", conf, 1);
    setenv("AWS_PROFILE", "wi", 1);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u/", f.port);
    setenv("AWS_ENDPOINT_URL_STS", ep, 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    cr_assert_str_eq(v.source, "web identity");
    cr_assert_eq(f.bad_requests, 0, "STS got: %s", f.last_body);
    /* No AWS_ROLE_SESSION_NAME: sluice-<seconds since the epoch>. */
    const char *s = strstr(f.last_body, "RoleSessionName=sluice-");
    cr_assert_not_null(s, "%s", f.last_body);
    long long t = 0;
    char amp = 0;
    cr_assert_eq(sscanf(s, "RoleSessionName=sluice-%lld%c", &t, &amp), 2, "%s", f.last_body);
    cr_assert_eq(amp, '&');
    cr_assert(t > 1700000000 && t <= (long long)time(NULL), "%lld", t);
    sl_creds_destroy(c);
    fake_stop(&f);
    free(tf);
    free(conf);
}

Test(creds, web_identity_failures_are_named)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    web_identity_env(&f);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token", 1);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_NOT_FOUND);
    cr_assert_str_eq(e.msg, "web identity: web identity token /nonexistent/token: No such file or "
                            "directory");
    sl_creds_destroy(c);

    web_identity_env(&f);
    char prefix[200];
    snprintf(prefix, sizeof prefix,
             "STS AssumeRoleWithWebIdentity http://127.0.0.1:%u/ (role " ROLE_ARN "): ", f.port);
    struct {
        const char *body, *msg;
    } bad[] = {
        {"<AssumeRoleWithWebIdentityResponse/>", "no <Credentials> in the answer"},
        {"<r><Credentials><AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>s</SecretAccessKey>"
         "<Expiration>2026-11-29T04:00:00Z</Expiration></Credentials></r>",
         "<Credentials> lacks AccessKeyId, SecretAccessKey, SessionToken or Expiration (or one "
         "is too long)"},
        {"<r><Credentials><AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>s</SecretAccessKey>"
         "<SessionToken>t</SessionToken><Expiration>tomorrow</Expiration></Credentials></r>",
         "an Expiration of 'tomorrow'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pthread_mutex_lock(&f.mu);
        f.sts_body = bad[i].body;
        pthread_mutex_unlock(&f.mu);
        c = chain();
        cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_PROTOCOL, "answer %zu", i);
        char want[600];
        snprintf(want, sizeof want, "%s%s", prefix, bad[i].msg);
        cr_assert_str_eq(e.msg, want);
        cr_assert_eq(sl_creds_fetches(c), 0);
        sl_creds_destroy(c);
    }
    fake_stop(&f);
}

Test(creds, instance_metadata_answers_that_give_no_credentials)
{
    clean_env();
    fake_t f;
    fake_start(&f, 3600);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u/", f.port); /* the '/' is dropped */
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    unsetenv("AWS_EC2_METADATA_DISABLED");
    char what[64];
    snprintf(what, sizeof what, "instance metadata http://127.0.0.1:%u", f.port);
    sl_creds_value_t v;
    sl_error_t e = {0};
    struct {
        imds_mode_t mode;
        sl_err_t rc;
        const char *msg; /* after what, or the whole NOT_FOUND tail */
    } cases[] = {
        {IMDS_NO_ROLE, SL_ERR_NOT_FOUND,
         "; instance metadata: no IAM role attached to this instance"},
        {IMDS_EMPTY_ROLE, SL_ERR_PROTOCOL, ": an IAM role name of 0 bytes"},
        {IMDS_CREDS_500, SL_ERR_IO, ": GET: HTTP 500 NoBody"},
        {IMDS_NO_TOKEN, SL_ERR_PROTOCOL,
         ": role sluice-node-role: the answer lacks AccessKeyId, SecretAccessKey, Token or a "
         "valid Expiration"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pthread_mutex_lock(&f.mu);
        f.imds_mode = cases[i].mode;
        pthread_mutex_unlock(&f.mu);
        sl_creds_t *c = chain();
        cr_assert_eq(sl_creds_get(c, &v, &e), cases[i].rc, "case %zu: %s", i, e.msg);
        char want[600];
        if (cases[i].rc == SL_ERR_NOT_FOUND) {
            size_t n = strlen(e.msg), m = strlen(cases[i].msg);
            cr_assert(n >= m && strcmp(e.msg + n - m, cases[i].msg) == 0, "%s", e.msg);
        } else if (cases[i].rc == SL_ERR_IO) {
            snprintf(want, sizeof want, "after 2 attempts: %s%s", what, cases[i].msg);
            cr_assert_str_eq(e.msg, want);
        } else {
            snprintf(want, sizeof want, "%s%s", what, cases[i].msg);
            cr_assert_str_eq(e.msg, want);
        }
        cr_assert_eq(sl_creds_fetches(c), 0);
        sl_creds_destroy(c);
    }
    cr_assert_eq(f.bad_requests, 0);
    fake_stop(&f);
}

/* Waits (bounded) until the clock reads at least t. */
static void wait_until(time_t t)
{
    for (int i = 0; i < 200 && time(NULL) < t; i++)
        usleep(50000);
    cr_assert_geq(time(NULL), t, "the clock did not reach %lld in 10 s", (long long)t);
}

Test(creds, a_failed_refresh_keeps_credentials_that_are_still_valid)
{
    clean_env();
    fake_t f;
    fake_start(&f, 4); /* fetched again 2 s before they expire */
    web_identity_env(&f);
    sl_creds_t *c = chain();
    sl_creds_value_t v;
    sl_error_t e = {0};
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    int64_t expires = v.expires_s;
    pthread_mutex_lock(&f.mu);
    f.deny = true;
    pthread_mutex_unlock(&f.mu);
    wait_until((time_t)expires - 2);
    /* Due for a refresh that STS refuses: the current ones are still good. */
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(v.key_id, "ASIASTS1");
    cr_assert_eq(v.expires_s, expires);
    cr_assert_eq(sl_creds_fetches(c), 1);
    /* Expired, and STS still refuses: now it is an error. */
    wait_until((time_t)expires);
    cr_assert_eq(sl_creds_get(c, &v, &e), SL_ERR_IO);
    cr_assert(strstr(e.msg, "HTTP 403 AccessDenied"), "%s", e.msg);
    sl_creds_destroy(c);
    fake_stop(&f);
}
