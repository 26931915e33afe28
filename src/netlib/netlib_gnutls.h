/* GnuTLS's functions, loaded on first use (netlib.h says why and how):
 * the cluster secret's HMAC (rpc/auth.c), S3's payload SHA-256, base64 of
 * resume tokens, the admin endpoint's certificate check. */
#ifndef SLUICE_NETLIB_NETLIB_GNUTLS_H
#define SLUICE_NETLIB_NETLIB_GNUTLS_H

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "netlib/netlib.h"

/* The functions of GnuTLS that sluice calls (field: the name less
 * gnutls_). gnutls_free is a variable holding the deallocator: its field
 * points at it. */
#define SL_NETLIB_GNUTLS_FUNCS(X)                                                                  \
    X(gnutls_hmac_fast, hmac_fast)                                                                 \
    X(gnutls_memcmp, memcmp_constant_time)                                                         \
    X(gnutls_hash_init, hash_init)                                                                 \
    X(gnutls_hash, hash)                                                                           \
    X(gnutls_hash_deinit, hash_deinit)                                                             \
    X(gnutls_base64_encode2, base64_encode2)                                                       \
    X(gnutls_base64_decode2, base64_decode2)                                                       \
    X(gnutls_free, free_memory)                                                                    \
    X(gnutls_certificate_allocate_credentials, certificate_allocate_credentials)                   \
    X(gnutls_certificate_set_x509_key_mem, certificate_set_x509_key_mem)                           \
    X(gnutls_certificate_free_credentials, certificate_free_credentials)                           \
    X(gnutls_strerror, strerror)

typedef struct sl_netlib_gnutls {
    SL_NETLIB_GNUTLS_FUNCS(SL_NETLIB_FIELD)
} sl_netlib_gnutls_t;

/* GnuTLS's functions, loaded on the first call (thread-safe); as
 * sl_netlib_mhd. */
const sl_netlib_gnutls_t *sl_netlib_gnutls(sl_error_t *err);

#endif
