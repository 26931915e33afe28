/* Error forwarding in one line, as zstd's FORWARD_IF_ERROR: the callee has
 * already said what and where (its sl_error_t), so the caller only passes
 * the code up. Errors themselves are sluice/err.h's sl_err_t and
 * sl_error_set. */
#ifndef SLUICE_COMMON_ERR_H
#define SLUICE_COMMON_ERR_H

#include "sluice/err.h"

/* Evaluate expr (an sl_err_t) once; anything but SL_OK is returned from
 * the calling function as it is. Only where nothing needs undoing on the
 * way out: a function with cleanup keeps its goto. */
#define SL_FORWARD_IF_ERROR(expr)                                                                  \
    do {                                                                                           \
        sl_err_t sl_forward_rc_ = (expr);                                                          \
        if (sl_forward_rc_ != SL_OK) return sl_forward_rc_;                                        \
    } while (0)

#endif
