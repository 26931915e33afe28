/* Progress display for long CLI commands (table import, table gen).
 *
 * On a terminal: one line redrawn in place (rows, rows/s, bytes, ETA when
 * the total input size is known). Otherwise (a log file, a pipe, CI): a
 * plain line every few seconds, so logs stay readable. Everything goes to
 * the FILE given (stderr in the CLI). Thread-safe: the import reports
 * progress on its calling thread and bad rows on its workers. */
#ifndef SLUICE_CLI_PROGRESS_H
#define SLUICE_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

#include "warehouse/import.h"

typedef struct sl_cli_progress sl_cli_progress_t;

/* verb names the work ("importing", "generating"). enabled false gives a
 * display that prints nothing (--quiet). Caller owns, free with
 * sl_cli_progress_destroy. @return NULL when out of memory. */
sl_cli_progress_t *sl_cli_progress_new(FILE *out, const char *verb, bool enabled);

/* Show p if it is time to (terminal: every 0.2 s; otherwise every 5 s). An
 * sl_wh_import_progress_fn: pass the display as ctx. */
void sl_cli_progress_update(void *display, const sl_wh_import_progress_t *p);

/* Print a message (printf-style) on its own line: the redrawn line is
 * cleared first, and redrawn by the next update. display may be NULL (the
 * message then goes to stderr). */
void sl_cli_progress_message(sl_cli_progress_t *display, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clear the redrawn line (terminal) so the summary starts on a clean line. */
void sl_cli_progress_finish(sl_cli_progress_t *display);

/* display may be NULL. */
void sl_cli_progress_destroy(sl_cli_progress_t *display);

/* "1.23M" style count and "12.3 MiB" style size into buf. */
const char *sl_cli_fmt_count(double n, char *buf, size_t cap);
const char *sl_cli_fmt_bytes(double n, char *buf, size_t cap);

#endif
