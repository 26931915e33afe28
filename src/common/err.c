/* sl_err_t names and the sl_error_t message helpers. */
#include "sluice/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *sl_err_str(sl_err_t err)
{
    switch (err) {
    case SL_OK:
        return "ok";
    case SL_ERR_NOMEM:
        return "out of memory";
    case SL_ERR_INVALID:
        return "invalid argument";
    case SL_ERR_CORRUPT:
        return "corrupt data";
    case SL_ERR_TRUNCATED:
        return "truncated data";
    case SL_ERR_VERSION:
        return "unsupported version";
    case SL_ERR_TOO_LARGE:
        return "too large";
    case SL_ERR_IO:
        return "i/o error";
    case SL_ERR_NOT_FOUND:
        return "not found";
    case SL_ERR_TIMEOUT:
        return "timed out";
    case SL_ERR_AGAIN:
        return "try again";
    case SL_ERR_CLOSED:
        return "closed";
    case SL_ERR_PROTOCOL:
        return "protocol error";
    case SL_ERR_UNSUPPORTED:
        return "unsupported";
    }
    return "unknown error";
}

sl_err_t sl_error_set(sl_error_t *err, sl_err_t code, const char *fmt, ...)
{
    if (err == NULL) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

sl_err_t sl_error_prefix(sl_error_t *err, const char *fmt, ...)
{
    if (err == NULL) return SL_OK;
    /* Joined by hand: snprintf("%s%s") of two full buffers trips gcc's
     * -Wformat-truncation, and the tail of the message is what gets cut. */
    char joined[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, sizeof joined, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof joined ? (size_t)n : sizeof joined - 1;
    size_t rest = strnlen(err->msg, sizeof err->msg);
    if (rest > sizeof joined - 1 - used) rest = sizeof joined - 1 - used;
    memcpy(joined + used, err->msg, rest);
    joined[used + rest] = '\0';
    memcpy(err->msg, joined, sizeof err->msg);
    return err->code;
}

void sl_error_clear(sl_error_t *err)
{
    if (err == NULL) return;
    err->code = SL_OK;
    err->msg[0] = '\0';
}
