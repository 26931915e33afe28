/* Numbers and sizes from text a person typed (command-line options,
 * environment variables, configuration): the whole string must be the
 * number, in decimal, with no sign, space or junk around it, and within the
 * range the caller gives. A value that is not is refused with a message
 * naming what it is for (what, e.g. "--memory-limit") and the text, never
 * silently wrapped or cut. */
#ifndef SLUICE_COMMON_PARSE_H
#define SLUICE_COMMON_PARSE_H

#include <stdint.h>

#include "sluice/err.h"

/* Parse s as an unsigned decimal in [min, max] into *out (untouched on
 * failure). err (may be NULL) gets "<what> '<s>': ...". @return
 * SL_ERR_INVALID when s is NULL, empty, not all digits or out of range. */
sl_err_t sl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                      sl_error_t *err);

/* sl_parse_u64 for a uint32_t; max is at most UINT32_MAX. */
sl_err_t sl_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out, const char *what,
                      sl_error_t *err);

/* A signed decimal ("-12", "7"; no '+') in [min, max]. */
sl_err_t sl_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what,
                      sl_error_t *err);

/* A size in bytes: a decimal with an optional binary unit K, M, G or T
 * (any case), optionally followed by "B" or "iB": "4096", "64K", "64MiB",
 * "2GB", "1t" (1 TiB). @return SL_ERR_INVALID for another form, a size
 * past UINT64_MAX or outside [min, max]. */
sl_err_t sl_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                       sl_error_t *err);

#endif
