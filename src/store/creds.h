/* AWS credentials, found as AWS tools find them (docs/STORAGE.md
 * "Credentials"), first match wins:
 *   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY [+ AWS_SESSION_TOKEN]
 *   2. the shared files: AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials)
 *      then AWS_CONFIG_FILE (~/.aws/config), section AWS_PROFILE (default)
 *   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *      [+ AWS_ROLE_SESSION_NAME] (or the profile's web_identity_token_file
 *      and role_arn) through STS AssumeRoleWithWebIdentity
 *      (AWS_ENDPOINT_URL_STS, else https://sts.REGION.amazonaws.com)
 *   4. instance metadata, IMDSv2 (AWS_EC2_METADATA_SERVICE_ENDPOINT, else
 *      http://169.254.169.254), unless AWS_EC2_METADATA_DISABLED=true
 * Credentials that expire (3 and 4) are fetched again once less than
 * five minutes (or half their life, if shorter) remain, under a lock, so
 * any thread may ask at any time. No secret is ever written to a log, an
 * error message or a metric: messages name the source and the file. */
#ifndef SLUICE_STORE_CREDS_H
#define SLUICE_STORE_CREDS_H

#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"
#include "store.h"

typedef struct sl_creds sl_creds_t;

/* One set of credentials; wipe it (sl_creds_wipe) when done. */
typedef struct sl_creds_value {
    char key_id[128];
    char secret[128];
    char token[4096];   /* "" when none */
    int64_t expires_s;  /* seconds since the epoch; 0: never */
    const char *source; /* "environment", "shared files", "web identity", "instance metadata" */
} sl_creds_value_t;

/* The chain, resolved at the first sl_creds_get. opts gives the transport
 * settings of STS and IMDS (timeouts, CA bundle, retries); region the STS
 * region. Caller owns *out, free with sl_creds_destroy. */
sl_err_t sl_creds_new(const sl_store_opts_t *opts, const char *region, sl_creds_t **out,
                      sl_error_t *err);
void sl_creds_destroy(sl_creds_t *c);

/* Current credentials into *out (thread-safe; refreshes when due).
 * @return SL_ERR_NOT_FOUND when no source of the chain has any, naming
 * each source and why it had none. */
sl_err_t sl_creds_get(sl_creds_t *c, sl_creds_value_t *out, sl_error_t *err);

/* Times fetched from STS or IMDS so far (tests see refreshes). */
uint64_t sl_creds_fetches(sl_creds_t *c);

void sl_creds_wipe(sl_creds_value_t *v);

/* The region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region in the
 * config file, else "us-east-1"; into buf. */
void sl_creds_region(char *buf, size_t cap);

/* An ISO 8601 UTC time ("2026-11-29T04:00:00Z") as seconds since the epoch.
 * @return -1 when it is not one. */
int64_t sl_creds_parse_time(const char *s);

#endif
