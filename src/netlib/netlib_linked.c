/* The tables of libsluice_trainer.so (netlib.h): a trainer process links
 * libmicrohttpd and GnuTLS, so its tables are the linked functions and
 * nothing is loaded. A file of its own, not an #ifdef in netlib.c, so that
 * the two builds of the module never compile one file two ways (line
 * coverage merges each file's functions by line). */
#include "netlib/netlib.h"

#include "netlib/netlib_gnutls.h"

#define LINKED(fn, field) .field = &fn,
static const sl_netlib_mhd_t mhd_linked = {SL_NETLIB_MHD_FUNCS(LINKED)};
static const sl_netlib_gnutls_t gnutls_linked = {SL_NETLIB_GNUTLS_FUNCS(LINKED)};
#undef LINKED

const sl_netlib_mhd_t *sl_netlib_mhd(sl_error_t *err)
{
    (void)err;
    return &mhd_linked;
}

const sl_netlib_gnutls_t *sl_netlib_gnutls(sl_error_t *err)
{
    (void)err;
    return &gnutls_linked;
}
