/* The option tables of the sluice commands (options.h): the parser, the
 * validators of each type, --help and the Markdown reference, all read
 * from the one table of each command. */
#include "options.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sluice/alloc.h"
#include "common/parse.h"
#include "common/suggest.h"

/* ---- walking a command's options over its groups ---- */

typedef struct slot {
    const sl_cli_opt_t *opt;
    size_t base; /* of the group's struct in the values */
} slot_t;

static size_t num_opts(const sl_cli_cmd_t *cmd)
{
    size_t n = 0;
    for (int g = 0; g < SL_CLI_MAX_GROUPS && cmd->groups[g].group != NULL; g++)
        n += cmd->groups[g].group->count;
    return n;
}

static slot_t slot_at(const sl_cli_cmd_t *cmd, size_t k)
{
    for (int g = 0; g < SL_CLI_MAX_GROUPS && cmd->groups[g].group != NULL; g++) {
        const sl_cli_group_t *grp = cmd->groups[g].group;
        if (k < grp->count) return (slot_t){&grp->opts[k], cmd->groups[g].base};
        k -= grp->count;
    }
    return (slot_t){NULL, 0};
}

static void *value_at(void *values, slot_t s)
{
    return (char *)values + s.base + s.opt->offset;
}

/* ---- validators ---- */

/* A decimal integer without sign or blanks. @return false when s is not
 * one or overflows 64 bits. */
static bool parse_decimal(const char *s, const char **end, uint64_t *out)
{
    if (*s < '0' || *s > '9') return false;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno == ERANGE) return false;
    *end = e;
    *out = v;
    return true;
}

/* "123", "64K", "256M", "2G", "2GB" (powers of 1024). */
static bool parse_size(const char *s, uint64_t *out)
{
    const char *end;
    uint64_t v, mul = 1;
    if (!parse_decimal(s, &end, &v)) return false;
    switch (*end) {
    case 'K':
    case 'k':
        mul = 1ull << 10;
        end++;
        break;
    case 'M':
    case 'm':
        mul = 1ull << 20;
        end++;
        break;
    case 'G':
    case 'g':
        mul = 1ull << 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > UINT64_MAX / mul) return false;
    *out = v * mul;
    return true;
}

/* HOST:PORT: the last ':' splits; HOST may be empty (every address) or a
 * bracketed IPv6 address; PORT is decimal in [0, 65535]. @return false
 * with what is wrong in why ("the port 'abc' is not a number in [0,
 * 65535]"). */
static bool parse_address(const char *s, char *why, size_t cap)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL) {
        snprintf(why, cap, "expected HOST:PORT (no ':PORT')");
        return false;
    }
    const char *end;
    uint64_t port;
    if (!parse_decimal(colon + 1, &end, &port) || *end != '\0' || port > 65535) {
        snprintf(why, cap, "the port '%s' is not a number in [0, 65535]", colon + 1);
        return false;
    }
    if (s[0] == '[' && (colon == s + 1 || colon[-1] != ']')) {
        snprintf(why, cap, "expected [IPV6]:PORT (the host has no closing ']')");
        return false;
    }
    return true;
}

/* "local|none" -> is v one of them? */
static bool is_choice(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p != '\0';) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        p += len + (bar != NULL);
    }
    return false;
}

/* "a|b|c" -> "a, b or c", each wrapped in quote (e.g. "`"). */
static void choices_text(const char *choices, const char *quote, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = choices; *p != '\0' && n < cap;) {
        const char *bar = strchr(p, '|');
        int len = bar != NULL ? (int)(bar - p) : (int)strlen(p);
        const char *sep = p == choices ? "" : bar == NULL ? " or " : ", ";
        n += (size_t)snprintf(out + n, cap - n, "%s%s%.*s%s", sep, quote, len, p, quote);
        p += len + (bar != NULL);
    }
}

/* What a value of o must be, after "expected ". */
static void expected(const sl_cli_opt_t *o, char *out, size_t cap)
{
    switch (o->type) {
    case SL_CLI_UINT:
    case SL_CLI_SIZE: {
        const char *what =
            o->type == SL_CLI_UINT ? "an integer" : "a size in bytes (K, M, G suffixes)";
        if (o->max == UINT64_MAX)
            snprintf(out, cap, "%s >= %" PRIu64, what, o->min);
        else
            snprintf(out, cap, "%s in [%" PRIu64 ", %" PRIu64 "]", what, o->min, o->max);
        return;
    }
    case SL_CLI_ADDR:
        snprintf(out, cap, "HOST:PORT with a port in [0, 65535]");
        return;
    case SL_CLI_ENUM:
        choices_text(o->arg, "", out, cap);
        return;
    default:
        snprintf(out, cap, "a non-empty %s", o->arg != NULL ? o->arg : "value");
        return;
    }
}

/* Check v for o and store it. @return false with why set when it does not
 * fit. */
static bool store(const sl_cli_opt_t *o, void *at, const char *v, char *why, size_t cap)
{
    uint64_t n = 0;
    bool ok = true;
    switch (o->type) {
    case SL_CLI_FLAG:
        *(bool *)at = true;
        return true;
    case SL_CLI_UINT:
        ok = sl_parse_u64(v, 0, UINT64_MAX, &n, NULL, NULL) == SL_OK;
        break;
    case SL_CLI_SIZE:
        ok = parse_size(v, &n);
        break;
    case SL_CLI_ADDR:
        if (!parse_address(v, why, cap)) return false;
        break;
    case SL_CLI_ENUM:
        ok = is_choice(o->arg, v);
        break;
    case SL_CLI_FILE: {
        struct stat st;
        if (stat(v, &st) != 0 || access(v, R_OK) != 0) {
            snprintf(why, cap, "%s", strerror(errno));
            return false;
        }
        if (S_ISDIR(st.st_mode)) {
            snprintf(why, cap, "a directory, not a file");
            return false;
        }
        break;
    }
    case SL_CLI_STRING:
    case SL_CLI_PATH:
        ok = v[0] != '\0';
        break;
    }
    if (ok && (o->type == SL_CLI_UINT || o->type == SL_CLI_SIZE)) ok = n >= o->min && n <= o->max;
    if (!ok) {
        char what[160];
        expected(o, what, sizeof what);
        snprintf(why, cap, "expected %s", what);
        return false;
    }
    if (o->type == SL_CLI_UINT || o->type == SL_CLI_SIZE)
        *(uint64_t *)at = n;
    else
        *(const char **)at = v;
    return true;
}

/* Append v; the room is argc, which no list can outgrow. */
static bool list_add(sl_cli_list_t *l, int argc, const char *v)
{
    if (l->items == NULL) {
        if ((l->items = sl_calloc(NULL, (size_t)argc, sizeof *l->items)) == NULL) return false;
        l->cap = (uint32_t)argc;
    }
    l->items[l->count++] = v;
    return true;
}

/* ---- parsing ---- */

int sl_cli_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `sluice %s --help`)\n", cmd);
    return 2;
}

/* A usage error: the message on stderr, exit code 2. */
__attribute__((format(printf, 3, 4))) static bool fail(const sl_cli_cmd_t *cmd,
                                                       sl_cli_parsed_t *res, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    res->code = sl_cli_usage_error(cmd->name, "%s", msg);
    return false;
}

/* The option a long name (or a unique prefix of one) stands for; -1 when
 * none, or (with the candidates in also, cap bytes) several. */
static long find_option(const sl_cli_cmd_t *cmd, const char *name, size_t len, char *also,
                        size_t cap)
{
    long found = -1;
    int matches = 0;
    also[0] = '\0';
    for (size_t k = 0; k < num_opts(cmd); k++) {
        const char *o = slot_at(cmd, k).opt->name;
        if (strncmp(o, name, len) != 0) continue;
        if (o[len] == '\0') return (long)k; /* exact beats prefix */
        size_t at = strlen(also);
        snprintf(also + at, cap - at, "%s--%s", matches > 0 ? ", " : "", o);
        found = (long)k;
        matches++;
    }
    if (matches == 1) return found;
    if (matches == 0) also[0] = '\0';
    return -1;
}

bool sl_cli_parse(const sl_cli_cmd_t *cmd, int argc, char **argv, void *values,
                  sl_cli_parsed_t *res)
{
    res->code = 0;
    res->given = 0;
    size_t n = num_opts(cmd);
    char why[512];
    if (n > 64) {
        res->code = 1;
        fprintf(stderr, "sluice %s: more than 64 options in its table\n", cmd->name);
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        slot_t s = slot_at(cmd, k);
        if (s.opt->def != NULL && !store(s.opt, value_at(values, s), s.opt->def, why, sizeof why)) {
            res->code = 1;
            fprintf(stderr, "sluice %s: the default of --%s: %s\n", cmd->name, s.opt->name, why);
            return false;
        }
    }
    sl_cli_list_t *args =
        cmd->args != NULL ? (sl_cli_list_t *)((char *)values + cmd->args_offset) : NULL;
    bool options_end = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_end && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            sl_cli_print_help(stdout, cmd);
            return false;
        }
        if (!options_end && strcmp(a, "--") == 0) {
            options_end = true;
            continue;
        }
        if (options_end || a[0] != '-' || a[1] == '\0') { /* "-" is a name: standard input */
            if (args == NULL || args->count == cmd->max_args)
                return fail(cmd, res, "unexpected argument '%s'", a);
            if (!list_add(args, argc, a)) return fail(cmd, res, "out of memory");
            continue;
        }
        if (a[1] != '-') return fail(cmd, res, "unknown option '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        char also[256];
        long k = find_option(cmd, name, len, also, sizeof also);
        if (k < 0 && also[0] != '\0')
            return fail(cmd, res, "ambiguous option '--%.*s' (%s)", (int)len, name, also);
        if (k < 0) {
            sl_suggest_t sg;
            sl_suggest_init(&sg, name, len);
            for (size_t j = 0; j < num_opts(cmd); j++)
                sl_suggest_offer_str(&sg, slot_at(cmd, j).opt->name);
            char hint[160];
            return fail(cmd, res, "unknown option '--%.*s'%s", (int)len, name,
                        sl_suggest_hint(&sg, "--", hint, sizeof hint));
        }
        slot_t s = slot_at(cmd, (size_t)k);
        const sl_cli_opt_t *o = s.opt;
        res->given |= 1ull << k;
        if (o->type == SL_CLI_FLAG) {
            if (eq != NULL) return fail(cmd, res, "--%s takes no value", o->name);
            *(bool *)value_at(values, s) = true;
            continue;
        }
        const char *v = eq != NULL ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (v == NULL) return fail(cmd, res, "--%s needs a value (%s)", o->name, o->arg);
        if (o->flags & SL_CLI_REPEAT) {
            const char *one = NULL;
            if (!store(o, &one, v, why, sizeof why))
                return fail(cmd, res, "--%s '%s': %s", o->name, v, why);
            if (!list_add(value_at(values, s), argc, one)) return fail(cmd, res, "out of memory");
        } else if (!store(o, value_at(values, s), v, why, sizeof why)) {
            return fail(cmd, res, "--%s '%s': %s", o->name, v, why);
        }
    }
    /* Every missing option at once: "--admin ADDR and --state DIR are
     * required". */
    char missing[512] = "";
    size_t nmissing = 0, len = 0, total = 0;
    for (size_t k = 0; k < n; k++) {
        const sl_cli_opt_t *o = slot_at(cmd, k).opt;
        total += (o->flags & SL_CLI_REQUIRED) && !(res->given & (1ull << k));
    }
    for (size_t k = 0; k < n && len < sizeof missing; k++) {
        const sl_cli_opt_t *o = slot_at(cmd, k).opt;
        if (!(o->flags & SL_CLI_REQUIRED) || (res->given & (1ull << k))) continue;
        nmissing++;
        const char *sep = nmissing == 1 ? "" : nmissing == total ? " and " : ", ";
        len += (size_t)snprintf(missing + len, sizeof missing - len, "%s--%s %s", sep, o->name,
                                o->arg != NULL ? o->arg : "");
    }
    if (nmissing > 0)
        return fail(cmd, res, "%s %s required", missing, nmissing == 1 ? "is" : "are");
    if (args != NULL && args->count < cmd->min_args) {
        if (cmd->min_args == 1) return fail(cmd, res, "wants one %s", cmd->args_doc);
        return fail(cmd, res, "wants at least %u %s", cmd->min_args, cmd->args_doc);
    }
    return true;
}

bool sl_cli_given(const sl_cli_cmd_t *cmd, const sl_cli_parsed_t *res, const char *name)
{
    for (size_t k = 0; k < num_opts(cmd); k++)
        if (strcmp(slot_at(cmd, k).opt->name, name) == 0) return (res->given & (1ull << k)) != 0;
    return false;
}

static void list_free(sl_cli_list_t *l)
{
    if (l->items != NULL) sl_free(NULL, l->items, (size_t)l->cap * sizeof *l->items);
    *l = (sl_cli_list_t){0};
}

void sl_cli_free(const sl_cli_cmd_t *cmd, void *values)
{
    for (size_t k = 0; k < num_opts(cmd); k++) {
        slot_t s = slot_at(cmd, k);
        if (s.opt->flags & SL_CLI_REPEAT) list_free(value_at(values, s));
    }
    if (cmd->args != NULL) list_free((sl_cli_list_t *)((char *)values + cmd->args_offset));
}

/* ---- help and Markdown ---- */

/* The default as --help and the docs give it; NULL: none. */
static const char *default_text(const sl_cli_opt_t *o)
{
    return o->def_doc != NULL ? o->def_doc : o->def;
}

/* Print text wrapped at word boundaries into room columns, each line after
 * the first indented by indent columns. */
static void wrapped(FILE *out, const char *h, int indent, int room)
{
    for (bool first = true; *h != '\0'; first = false) {
        int len = (int)strlen(h);
        if (len > room) {
            len = room;
            while (len > 0 && h[len] != ' ')
                len--;
            if (len == 0) len = room;
        }
        if (!first) fprintf(out, "%*s", indent, "");
        fprintf(out, "%.*s\n", len, h);
        h += len;
        while (*h == ' ')
            h++;
    }
}

void sl_cli_print_help(FILE *out, const sl_cli_cmd_t *cmd)
{
    enum { WIDTH = 28 };
    const char *syn = cmd->synopsis;
    for (bool first = true; *syn != '\0'; first = false) {
        size_t len = strcspn(syn, "\n");
        fprintf(out, "%s%.*s\n", first ? "usage: " : "       ", (int)len, syn);
        syn += len + (syn[len] == '\n');
    }
    fprintf(out, "\n");
    wrapped(out, cmd->about, 0, 79);
    for (int g = 0; g < SL_CLI_MAX_GROUPS && cmd->groups[g].group != NULL; g++) {
        const sl_cli_group_t *grp = cmd->groups[g].group;
        fprintf(out, "\n%s:\n", grp->title != NULL ? grp->title : "options");
        for (size_t k = 0; k < grp->count; k++) {
            const sl_cli_opt_t *o = &grp->opts[k];
            char left[64], text[1024];
            snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg != NULL ? " " : "",
                     o->arg != NULL ? o->arg : "");
            const char *def = default_text(o);
            /* a condition rather than a value ("required without --master") stands alone */
            bool bare = def != NULL && strncmp(def, "required", 8) == 0;
            snprintf(text, sizeof text, "%s%s%s%s%s%s", o->help,
                     (o->flags & SL_CLI_REPEAT) ? " (repeatable)" : "",
                     (o->flags & SL_CLI_REQUIRED) ? " (required)" : "",
                     def == NULL ? ""
                     : bare      ? " ("
                                 : " (default ",
                     def != NULL ? def : "", def != NULL ? ")" : "");
            if ((int)strlen(left) > WIDTH) {
                fprintf(out, "  %s\n%*s", left, WIDTH + 3, "");
            } else {
                fprintf(out, "  %-*s ", WIDTH, left);
            }
            wrapped(out, text, WIDTH + 3, 79 - WIDTH - 3);
        }
    }
    fprintf(out, "  %-*s this help\n", WIDTH, "-h, --help");
}

/* Text inside a Markdown table cell: '|' would end the cell. */
static void cell(FILE *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

static void value_column(FILE *out, const sl_cli_opt_t *o)
{
    char text[160];
    switch (o->type) {
    case SL_CLI_FLAG:
        fputs("—", out);
        return;
    case SL_CLI_UINT:
    case SL_CLI_SIZE:
        expected(o, text, sizeof text);
        fputs(text + (text[1] == 'n' ? 3 : 2), out); /* without the article: "integer in [1, 8]" */
        return;
    case SL_CLI_ENUM:
        choices_text(o->arg, "`", text, sizeof text);
        fputs(text, out);
        return;
    case SL_CLI_FILE:
        fputc('`', out);
        cell(out, o->arg);
        fputs("` (readable)", out);
        return;
    default:
        fputc('`', out);
        cell(out, o->arg);
        fputc('`', out);
        return;
    }
}

static void markdown_row(FILE *out, const sl_cli_opt_t *o)
{
    fprintf(out, "| `--%s` | ", o->name);
    value_column(out, o);
    fputs(" | ", out);
    const char *def = default_text(o);
    if (o->flags & SL_CLI_REQUIRED)
        fputs("**required**", out);
    else if (def != NULL && o->def_doc == NULL)
        fprintf(out, "`%s`", def);
    else if (def != NULL)
        cell(out, def);
    else
        fputs(o->type == SL_CLI_FLAG ? "off" : "none", out);
    fputs(" | ", out);
    cell(out, o->help);
    if (o->flags & SL_CLI_REPEAT) fputs(" (repeatable)", out);
    fputs(" |\n", out);
}

void sl_cli_print_markdown(FILE *out, const sl_cli_cmd_t *cmd, const sl_cli_group_t *group)
{
    fputs("| option | value | default | meaning |\n| --- | --- | --- | --- |\n", out);
    if (cmd == NULL) {
        for (size_t k = 0; k < group->count; k++)
            markdown_row(out, &group->opts[k]);
        return;
    }
    if (cmd->args != NULL) {
        fprintf(out, "| `%s%s` | argument%s | %s | ", cmd->args, cmd->max_args > 1 ? "..." : "",
                cmd->max_args > 1 ? "s" : "", cmd->min_args > 0 ? "**required**" : "none");
        cell(out, cmd->args_doc);
        fputs(" |\n", out);
    }
    /* A shared group has a table of its own: named here, not repeated. */
    for (int g = 0; g < SL_CLI_MAX_GROUPS && cmd->groups[g].group != NULL; g++)
        if (cmd->groups[g].group->name == NULL)
            for (size_t k = 0; k < cmd->groups[g].group->count; k++)
                markdown_row(out, &cmd->groups[g].group->opts[k]);
    for (int g = 0; g < SL_CLI_MAX_GROUPS && cmd->groups[g].group != NULL; g++) {
        const sl_cli_group_t *grp = cmd->groups[g].group;
        if (grp->name == NULL) continue;
        fprintf(out, "\nAnd the %s:", grp->title);
        for (size_t k = 0; k < grp->count; k++)
            fprintf(out, "%s`--%s`",
                    k == 0                ? " "
                    : k + 1 == grp->count ? " and "
                                          : ", ",
                    grp->opts[k].name);
        fputs(".\n", out);
    }
}
