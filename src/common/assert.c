/* The failure side of SL_ASSERT (assert.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/log.h"
#include "common/log_events.h"

_Noreturn void sl_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char text[1024];
    int n =
        snprintf(text, sizeof text, "%s:%d: assertion `%s` failed: %s\n", file, line, cond, msg);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof text) n = sizeof text - 1;
    sl_log_write(SL_LOG_ERROR, SL_EV(ASSERTION_FAILED), NULL, 0, "%.*s", n > 0 ? n - 1 : 0, text);
    /* Straight to fd 2 as well: the process is about to abort, and a test
     * (or a process whose log handler is what broke) has no other witness. */
    ssize_t w = write(2, text, (size_t)n);
    (void)w;
    abort();
}
