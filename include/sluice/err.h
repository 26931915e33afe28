/* sluice error values: one enum for every module, plus an error object that
 * carries a message saying what failed and where ("file x stripe 7 stream ids:
 * checksum mismatch"). Errors are values; library code never exits. */
#ifndef SLUICE_ERR_H
#define SLUICE_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_err {
    SL_OK = 0,
    SL_ERR_NOMEM = -1,       /* an allocation failed */
    SL_ERR_INVALID = -2,     /* an argument or a value breaks an invariant */
    SL_ERR_CORRUPT = -3,     /* bytes from outside are malformed */
    SL_ERR_TRUNCATED = -4,   /* bytes from outside end too early */
    SL_ERR_VERSION = -5,     /* an unknown format or protocol version */
    SL_ERR_TOO_LARGE = -6,   /* a size from outside exceeds a configured limit */
    SL_ERR_IO = -7,          /* an operating-system call failed */
    SL_ERR_NOT_FOUND = -8,   /* a named thing does not exist */
    SL_ERR_TIMEOUT = -9,     /* a wait ran out */
    SL_ERR_AGAIN = -10,      /* nothing available yet: control flow, not failure */
    SL_ERR_CLOSED = -11,     /* the peer or the stream has ended */
    SL_ERR_PROTOCOL = -12,   /* a peer broke the wire protocol */
    SL_ERR_UNSUPPORTED = -13 /* a valid request this build cannot serve */
} sl_err_t;

/* @return a static, human-readable name for err; never NULL. */
const char *sl_err_str(sl_err_t err);

#define SL_ERROR_MSG_MAX 512

/* What failed and where. Zero-initialise (or sl_error_clear) before use. */
typedef struct sl_error {
    sl_err_t code;
    char msg[SL_ERROR_MSG_MAX];
} sl_error_t;

/* Record code and a printf-style message in err (which may be NULL: the
 * message is then dropped). @return code, so a caller can write
 * `return sl_error_set(err, SL_ERR_CORRUPT, "...")`. */
sl_err_t sl_error_set(sl_error_t *err, sl_err_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the message already in err with more context ("file x: " + msg);
 * leaves code untouched. @return err->code (SL_OK when err is NULL). */
sl_err_t sl_error_prefix(sl_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void sl_error_clear(sl_error_t *err);

#ifdef __cplusplus
}
#endif
#endif
