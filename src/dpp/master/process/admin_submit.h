/* The resume tokens of an admin request body (admin_submit.c), shared by
 * POST /jobs and POST /jobs/{id}/resubmit (admin.c). */
#ifndef SLUICE_DPP_MASTER_PROCESS_ADMIN_SUBMIT_H
#define SLUICE_DPP_MASTER_PROCESS_ADMIN_SUBMIT_H

#include <gnutls/gnutls.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

/* The resume tokens of a body, decoded: "resume_token" (one) or
 * "resume_tokens" (one per trainer rank), never both. */
typedef struct mp_admin_tokens {
    uint32_t n;
    gnutls_datum_t *raw;  /* [n], each freed with GnuTLS's gnutls_free */
    const uint8_t **data; /* [n] */
    size_t *len;          /* [n] */
    const char *key;      /* the key they came in, for messages */
} mp_admin_tokens_t;

/* Decode body's "resume_token" (one) or "resume_tokens" (one per rank) into
 * *t; required: at least one. On error nothing is left to free; on success
 * free with mp_admin_tokens_free. */
sl_err_t mp_admin_tokens_decode(const sl_allocator_t *a, const json_t *body, bool required,
                                mp_admin_tokens_t *t, sl_error_t *err);
void mp_admin_tokens_free(const sl_allocator_t *a, mp_admin_tokens_t *t);
/* A damaged token (rc SL_ERR_CORRUPT, _TRUNCATED, _VERSION) is the
 * request's fault: SL_ERR_INVALID, err prefixed by its key. Other codes
 * are returned as they are. */
sl_err_t mp_admin_token_refusal(sl_err_t rc, const mp_admin_tokens_t *t, sl_error_t *err);

#endif
