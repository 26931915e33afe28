/* The libraries sluice loads on first use instead of at start: libcurl
 * (the S3 store's HTTP engine, the command line's HTTP client, the
 * Kubernetes executor), libxml2 (S3's XML answers), libmicrohttpd (the
 * admin endpoints' and the trainer metrics' HTTP server), GnuTLS (the
 * cluster secret's HMAC, S3's payload hashes, base64 of resume tokens, the
 * admin endpoint's certificate check) and librdkafka (Kafka sources and
 * `sluice produce`). With their own dependencies they were 34 of the
 * program's 49 shared libraries, many built BIND_NOW, and linking them
 * cost every `sluice` process most of its start (docs/BENCHMARKS.md
 * "Process start"), paid by each worker of a job that reads a local table
 * or Parquet file and serves no admin endpoint.
 *
 * Each library is reached through a small shared library of ours that
 * names it in DT_NEEDED (libsluice_curl.so, libsluice_xml2.so,
 * libsluice_microhttpd.so, libsluice_gnutls.so, libsluice_rdkafka.so: no
 * code, so that the install and auditwheel see and vendor the real one),
 * opened with dlopen from beside the program (its directory, the
 * install's library directory, the wheel's package directory), then from
 * the library path; its dependencies' functions come from dlsym on its
 * handle into a table of function pointers. A caller loads its table
 * before its first call (sl_netlib_curl(err) and the others load on the
 * first call and return the same table after); when a library cannot be
 * loaded the error names it and what dlopen said.
 *
 * In libsluice_trainer.so (netlib_linked.c instead of netlib.c) the
 * libmicrohttpd and GnuTLS tables are the linked libraries' functions
 * instead: a trainer process links them as before, and its start is not
 * a worker's. */
#ifndef SLUICE_NETLIB_NETLIB_H
#define SLUICE_NETLIB_NETLIB_H

#include <microhttpd.h>

#include "sluice/err.h"

/* The functions of libmicrohttpd that sluice calls (field: MHD_<field>). */
#define SL_NETLIB_MHD_FUNCS(X)                                                                     \
    X(MHD_start_daemon, start_daemon)                                                              \
    X(MHD_stop_daemon, stop_daemon)                                                                \
    X(MHD_get_daemon_info, get_daemon_info)                                                        \
    X(MHD_get_connection_info, get_connection_info)                                                \
    X(MHD_is_feature_supported, is_feature_supported)                                              \
    X(MHD_create_response_from_buffer, create_response_from_buffer)                                \
    X(MHD_add_response_header, add_response_header)                                                \
    X(MHD_queue_response, queue_response)                                                          \
    X(MHD_destroy_response, destroy_response)                                                      \
    X(MHD_http_unescape, http_unescape)                                                            \
    X(MHD_lookup_connection_value, lookup_connection_value)

#define SL_NETLIB_FIELD(fn, field) __typeof__(fn) *field;

typedef struct sl_netlib_mhd {
    SL_NETLIB_MHD_FUNCS(SL_NETLIB_FIELD)
} sl_netlib_mhd_t;

/* libmicrohttpd's functions, loaded on the first call (thread-safe).
 * @return the table, valid for the process's life, or NULL with err
 * (SL_ERR_UNSUPPORTED) naming the library and why it could not be loaded;
 * after one call has returned the table, every call does (err may then be
 * NULL). */
const sl_netlib_mhd_t *sl_netlib_mhd(sl_error_t *err);

#endif
