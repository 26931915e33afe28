/* SL_ASSERT: checks of internal invariants (CONVENTIONS rule 2: only a
 * broken internal invariant may abort, and only through this macro). Live
 * when the build defines SLUICE_ASSERTS (CMake option SLUICE_ASSERTS: on
 * by default in Debug and sanitizer builds, off in Release), compiled out
 * otherwise: the condition is then not evaluated (only type-checked), so
 * it may cost what it needs to. Never for bad input: that is an error
 * value naming what and where.
 *
 *   SL_ASSERT(s->nr <= s->cap, "job %s split %u: %u ranges in %u", id, i, s->nr, s->cap);
 *
 * A failure writes "file:line: assertion `cond` failed: message" to the log
 * (event assertion_failed) and to file descriptor 2, then aborts. */
#ifndef SLUICE_COMMON_ASSERT_H
#define SLUICE_COMMON_ASSERT_H

#include <stdbool.h>

_Noreturn void sl_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef SLUICE_ASSERTS
#define SL_ASSERTS_ON true
#define SL_ASSERT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) sl_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                       \
    } while (0)
#else
#define SL_ASSERTS_ON false
#define SL_ASSERT(cond, ...)                                                                       \
    do {                                                                                           \
        (void)sizeof(cond);                                                                        \
    } while (0)
#endif

#endif
