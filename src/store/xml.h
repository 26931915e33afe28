/* S3's XML answers, parsed with libxml2 (never by hand): ListObjectsV2
 * pages, errors, STS AssumeRoleWithWebIdentity and the multipart upload id.
 * Network access and entity substitution are off. */
#ifndef SLUICE_STORE_XML_H
#define SLUICE_STORE_XML_H

#include <stdbool.h>

#include "creds.h"
#include "store.h"

/* One ListObjectsV2 page: fn for each <Contents>, then *truncated and the
 * <NextContinuationToken> into *next (caller frees with sl_strfree(a, ..);
 * NULL when none). what names the listing in messages. */
sl_err_t sl_store_xml_list(const char *body, size_t len, const char *what, const sl_allocator_t *a,
                           sl_store_list_fn fn, void *ctx, bool *truncated, char **next,
                           size_t *keys, sl_error_t *err);

/* The <Credentials> of an AssumeRoleWithWebIdentityResponse into out. A
 * message says what is wrong with the answer; the caller names the
 * request. */
sl_err_t sl_store_xml_sts(const char *body, size_t len, sl_creds_value_t *out, sl_error_t *err);

/* The text of the first element named name below the root (S3 wraps what
 * is asked for: <InitiateMultipartUploadResult><UploadId>), into buf.
 * @return false when there is none or the body is not XML. */
bool sl_store_xml_text(const char *body, size_t len, const char *name, char *buf, size_t cap);

#endif
