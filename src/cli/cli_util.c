/* Helpers shared by the commands of the sluice program: the option table
 * printer and the usage-error message. */
#include "cli.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>

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
