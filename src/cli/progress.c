/* Progress display: a redrawn line on a terminal, periodic plain lines
 * elsewhere (see progress.h). */
#include "progress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/alloc.h"

#define TTY_INTERVAL 0.2
#define PLAIN_INTERVAL 5.0

struct sl_cli_progress {
    pthread_mutex_t lock; /* the import's bad-row messages come from its workers */
    FILE *out;
    const char *verb;
    bool enabled, tty, drawn;
    double last; /* seconds of the last line shown */
};

sl_cli_progress_t *sl_cli_progress_new(FILE *out, const char *verb, bool enabled)
{
    sl_cli_progress_t *p = sl_calloc(NULL, 1, sizeof *p);
    if (p == NULL) return NULL;
    p->out = out;
    p->verb = verb;
    p->enabled = enabled;
    p->tty = isatty(fileno(out)) == 1;
    p->last = 0;
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

const char *sl_cli_fmt_count(double n, char *buf, size_t cap)
{
    if (n >= 1e9)
        snprintf(buf, cap, "%.2fG", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, cap, "%.2fM", n / 1e6);
    else if (n >= 1e4)
        snprintf(buf, cap, "%.1fk", n / 1e3);
    else
        snprintf(buf, cap, "%.0f", n);
    return buf;
}

const char *sl_cli_fmt_bytes(double n, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024 && u < 4) {
        n /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", n);
    else
        snprintf(buf, cap, "%.1f %s", n, unit[u]);
    return buf;
}

static void eta(double seconds, char *buf, size_t cap)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

void sl_cli_progress_update(void *display, const sl_wh_import_progress_t *p)
{
    sl_cli_progress_t *d = display;
    if (d == NULL || !d->enabled) return;
    double interval = d->tty ? TTY_INTERVAL : PLAIN_INTERVAL;
    if (p->seconds - d->last < interval) return;
    pthread_mutex_lock(&d->lock);
    d->last = p->seconds;

    char rows[32], rate[32], in[32], total[32], out[32], left[32], line[256];
    double secs = p->seconds > 1e-9 ? p->seconds : 1e-9;
    sl_cli_fmt_count((double)p->rows_written, rows, sizeof rows);
    sl_cli_fmt_count((double)p->rows_written / secs, rate, sizeof rate);
    int n = snprintf(line, sizeof line, "%s: %s rows, %s rows/s", d->verb, rows, rate);
    if (p->bytes_in > 0 || p->bytes_in_total > 0) {
        sl_cli_fmt_bytes((double)p->bytes_in, in, sizeof in);
        if (p->bytes_in_total > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, ", %s of %s read", in,
                          sl_cli_fmt_bytes((double)p->bytes_in_total, total, sizeof total));
        else
            n += snprintf(line + n, sizeof line - (size_t)n, ", %s read", in);
    }
    if (p->bytes_out > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ", %s written",
                      sl_cli_fmt_bytes((double)p->bytes_out, out, sizeof out));
    if (p->rows_skipped > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ", %llu bad",
                      (unsigned long long)p->rows_skipped);
    if (p->files_total > 1)
        n += snprintf(line + n, sizeof line - (size_t)n, ", %u/%u files", p->files_done,
                      p->files_total);
    if (p->bytes_in_total > 0 && p->bytes_in > 0 && p->bytes_in < p->bytes_in_total) {
        eta((double)(p->bytes_in_total - p->bytes_in) * secs / (double)p->bytes_in, left,
            sizeof left);
        snprintf(line + n, sizeof line - (size_t)n, ", ETA %s", left);
    }
    if (d->tty) {
        /* \r and erase-to-end redraw the one line in place. */
        fprintf(d->out, "\r\033[K%s", line);
        d->drawn = true;
    } else {
        fprintf(d->out, "%s\n", line);
    }
    fflush(d->out);
    pthread_mutex_unlock(&d->lock);
}

void sl_cli_progress_message(sl_cli_progress_t *d, const char *fmt, ...)
{
    if (d != NULL) pthread_mutex_lock(&d->lock);
    FILE *out = d != NULL ? d->out : stderr;
    if (d != NULL && d->drawn) {
        fprintf(out, "\r\033[K");
        d->drawn = false;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fflush(out);
    if (d != NULL) pthread_mutex_unlock(&d->lock);
}

void sl_cli_progress_finish(sl_cli_progress_t *d)
{
    if (d == NULL) return;
    pthread_mutex_lock(&d->lock);
    if (d->drawn) {
        fprintf(d->out, "\r\033[K");
        fflush(d->out);
        d->drawn = false;
    }
    pthread_mutex_unlock(&d->lock);
}

void sl_cli_progress_destroy(sl_cli_progress_t *d)
{
    if (d == NULL) return;
    pthread_mutex_destroy(&d->lock);
    sl_free(NULL, d, sizeof *d);
}
