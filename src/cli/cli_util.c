/* Helpers shared by the commands of the sluice program: the option table
 * printer and the usage-error message. */
#include "cli.h"

void sl_cli_print_options(FILE *out, const sl_cli_opt_t *opts, size_t n, int width)
{
    for (size_t i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        fprintf(out, "  %-*s %s\n", width, left, opts[i].help);
    }
}

int sl_cli_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `sluice %s --help`)\n", cmd);
    return 2;
}
