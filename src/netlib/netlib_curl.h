/* libcurl's functions, loaded on first use (netlib.h says why and how). */
#ifndef SLUICE_NETLIB_NETLIB_CURL_H
#define SLUICE_NETLIB_NETLIB_CURL_H

#include <curl/curl.h>

#include "netlib/netlib.h"

/* The functions of libcurl that sluice calls (field: the name less
 * curl_, curl_free's free_string). Calls through the table skip curl's
 * compile-time option checks (curl/typecheck-gcc.h): the value's type
 * must match the option. */
#define SL_NETLIB_CURL_FUNCS(X)                                                                    \
    X(curl_global_init, global_init)                                                               \
    X(curl_global_cleanup, global_cleanup)                                                         \
    X(curl_easy_init, easy_init)                                                                   \
    X(curl_easy_cleanup, easy_cleanup)                                                             \
    X(curl_easy_reset, easy_reset)                                                                 \
    X(curl_easy_setopt, easy_setopt)                                                               \
    X(curl_easy_getinfo, easy_getinfo)                                                             \
    X(curl_easy_perform, easy_perform)                                                             \
    X(curl_easy_strerror, easy_strerror)                                                           \
    X(curl_easy_escape, easy_escape)                                                               \
    X(curl_free, free_string)                                                                      \
    X(curl_getdate, getdate)                                                                       \
    X(curl_slist_append, slist_append)                                                             \
    X(curl_slist_free_all, slist_free_all)                                                         \
    X(curl_share_init, share_init)                                                                 \
    X(curl_share_setopt, share_setopt)                                                             \
    X(curl_share_cleanup, share_cleanup)                                                           \
    X(curl_multi_init, multi_init)                                                                 \
    X(curl_multi_setopt, multi_setopt)                                                             \
    X(curl_multi_add_handle, multi_add_handle)                                                     \
    X(curl_multi_remove_handle, multi_remove_handle)                                               \
    X(curl_multi_perform, multi_perform)                                                           \
    X(curl_multi_info_read, multi_info_read)                                                       \
    X(curl_multi_poll, multi_poll)                                                                 \
    X(curl_multi_cleanup, multi_cleanup)

typedef struct sl_netlib_curl {
    SL_NETLIB_CURL_FUNCS(SL_NETLIB_FIELD)
} sl_netlib_curl_t;

/* libcurl's functions, loaded on the first call (thread-safe); as
 * sl_netlib_mhd. Not in libsluice_trainer.so. */
const sl_netlib_curl_t *sl_netlib_curl(sl_error_t *err);

#endif
