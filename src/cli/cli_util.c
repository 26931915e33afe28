/* Helpers shared by the commands of the sluice program: the option table
 * printer, the usage-error message and the log handler. */
#include "cli.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

#include "common/log.h"

/* "sluice <cmd>: <message>" on stderr, as the libraries' records read to
 * a person; one write per record, so concurrent lines do not mix. */
static void log_stderr(void *ctx, const sl_log_record_t *rec)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "sluice %s: ", (const char *)ctx);
    if (n < 0 || (size_t)n >= sizeof line) n = 0;
    size_t len = (size_t)n + sl_log_format(rec, SL_LOG_TEXT, line + n, sizeof line - (size_t)n - 1);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}

void sl_cli_log_to_stderr(const char *cmd)
{
    static char name[32];
    snprintf(name, sizeof name, "%s", cmd);
    sl_log_set_handler(log_stderr, name);
}

void sl_cli_raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
}

void sl_cli_print_options(FILE *out, const sl_cli_opt_t *opts, size_t n, int width)
{
    /* help text wrapped at word boundaries to fit 80 columns */
    int room = 80 - 3 - width;
    if (room < 30) room = 30;
    for (size_t i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        const char *h = opts[i].help;
        fprintf(out, "  %-*s ", width, left);
        for (bool first = true; *h; first = false) {
            int len = (int)strlen(h);
            if (len > room) {
                len = room;
                while (len > 0 && h[len] != ' ') len--;
                if (len == 0) len = room;
            }
            if (!first) fprintf(out, "  %-*s ", width, "");
            fprintf(out, "%.*s\n", len, h);
            h += len;
            while (*h == ' ') h++;
        }
    }
}

int sl_cli_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `sluice %s --help`)\n", cmd);
    return 2;
}
