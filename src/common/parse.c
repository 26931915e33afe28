/* Strict decimal and size parsers (parse.h). */
#include "common/parse.h"

#include <ctype.h>
#include <stdbool.h>

/* ASCII digits only: isdigit may take more in some locales. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

typedef enum { NO_DIGITS, DIGITS, OVERFLOW } digits_t;

/* The digits at *p as a number; *p moves past them (all of them, also
 * when the number overflows). */
static digits_t digits(const char **p, uint64_t *out)
{
    const char *s = *p;
    if (!is_digit(*s)) return NO_DIGITS;
    uint64_t v = 0;
    bool over = false;
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) over = true;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return over ? OVERFLOW : DIGITS;
}

static sl_err_t bad(sl_error_t *err, const char *what, const char *s, const char *why)
{
    return sl_error_set(err, SL_ERR_INVALID, "%s '%.100s': %s", what ? what : "value",
                        s ? s : "(none)", why);
}

static sl_err_t out_of_range(sl_error_t *err, const char *what, const char *s, uint64_t min,
                             uint64_t max)
{
    return sl_error_set(err, SL_ERR_INVALID, "%s '%.100s': out of range %llu..%llu",
                        what ? what : "value", s, (unsigned long long)min, (unsigned long long)max);
}

sl_err_t sl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                      sl_error_t *err)
{
    const char *p = s;
    uint64_t v = 0;
    digits_t d = s != NULL ? digits(&p, &v) : NO_DIGITS;
    if (d == NO_DIGITS || *p != '\0')
        return bad(err, what, s, "not a whole number (decimal digits only)");
    if (d == OVERFLOW || v < min || v > max) return out_of_range(err, what, s, min, max);
    *out = v;
    return SL_OK;
}

sl_err_t sl_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out, const char *what,
                      sl_error_t *err)
{
    uint64_t v;
    sl_err_t rc = sl_parse_u64(s, min, max, &v, what, err);
    if (rc == SL_OK) *out = (uint32_t)v;
    return rc;
}

sl_err_t sl_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what,
                      sl_error_t *err)
{
    bool neg = s != NULL && *s == '-';
    const char *p = s != NULL ? s + neg : NULL;
    uint64_t v = 0;
    digits_t d = p != NULL ? digits(&p, &v) : NO_DIGITS;
    if (d == NO_DIGITS || *p != '\0') return bad(err, what, s, "not a whole number");
    bool fits = d == DIGITS && v <= (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX);
    int64_t x = !fits ? 0 : neg ? (int64_t)(0 - v) : (int64_t)v;
    if (!fits || x < min || x > max)
        return sl_error_set(err, SL_ERR_INVALID, "%s '%.100s': out of range %lld..%lld",
                            what ? what : "value", s, (long long)min, (long long)max);
    *out = x;
    return SL_OK;
}

sl_err_t sl_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                       sl_error_t *err)
{
    static const char *form = "not a size (bytes, or a number with K, M, G or T: 64MiB)";
    const char *p = s;
    uint64_t v = 0;
    digits_t d = s != NULL ? digits(&p, &v) : NO_DIGITS;
    if (d == NO_DIGITS) return bad(err, what, s, form);
    unsigned shift = 0;
    switch (tolower((unsigned char)*p)) {
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    case 't':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift != 0) {
        p++;
        if (*p == 'i' || *p == 'I') {
            p++;
            if (*p != 'B' && *p != 'b') return bad(err, what, s, form);
        }
    }
    if (*p == 'B' || *p == 'b') p++;
    if (*p != '\0') return bad(err, what, s, form);
    if (d == OVERFLOW || v > (UINT64_MAX >> shift)) return bad(err, what, s, "past 2^64 bytes");
    v <<= shift;
    if (v < min || v > max) return out_of_range(err, what, s, min, max);
    *out = v;
    return SL_OK;
}
