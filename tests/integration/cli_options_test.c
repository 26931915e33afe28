/* The option tables of the `sluice` commands (src/cli/options.h), through
 * the real binary (SLUICE_BINARY): every command's --help exits 0 and
 * lists its options with their defaults; a usage error names the option
 * and what it wants and exits 2 (types: integers and their ranges, sizes,
 * HOST:PORT, choices, readable files; required options; positional
 * arguments); long names take "=value" and unique prefixes; `sluice help
 * --markdown` prints every section between the markers the docs embed. */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static char *dir;

static void setup(void)
{
    dir = tu_mkdtemp("cli-options");
}

static void teardown(void)
{
    tu_rm_tree(dir);
    free(dir);
}

TestSuite(cli_options, .init = setup, .fini = teardown);

static char *out, *err;

/* Run `sluice ARGS...` (NULL-terminated) in dir; out and err get what it
 * printed (freed by the next call). @return the exit code. */
static int sluice(const char *arg, ...)
{
    const char *bin = tu_binary();
    char *argv[32] = {(char *)bin};
    int n = 1;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a != NULL && n < 31; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    free(out);
    free(err);
    return tu_run(dir, argv, 30, &out, &err);
}

/* The usage error of one command line: exit 2, and stderr exactly the
 * message then the pointer to --help. */
#define USAGE(cmd, msg, ...)                                                                       \
    do {                                                                                           \
        cr_assert_eq(sluice(__VA_ARGS__, NULL), 2, "stdout: %s stderr: %s", out, err);             \
        cr_assert_str_eq(err, "sluice " cmd ": " msg "\n(see `sluice " cmd " --help`)\n");         \
    } while (0)

Test(cli_options, every_command_has_help)
{
    const char *cmds[][2] = {
        {"demo", "--threads T"},
        {"worker", "--memory-limit BYTES"},
        {"read", "--reconnect-ms MS"},
        {"submit", "--resume-token FILE"},
        {"master", "--admin-timeout-s S"},
        {"table create", "--schema FILE"},
        {"table import", "--dedup-group NAME=F1,F2"},
        {"table gen", "--session-length L"},
        {"table inspect", "--partition-filter EXPR"},
        {"table verify", "-h, --help"},
        {"table cat", "--limit N"},
        {"produce", "--property NAME=VALUE"},
        {"jobs list", "--tls-ca FILE"},
        {"jobs show", "--request-timeout-s S"},
        {"jobs delete", "--token-file FILE"},
        {"jobs scale", "--workers N"},
        {"jobs resubmit", "--token FILE"},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[32], *sub = NULL;
        snprintf(cmd, sizeof cmd, "%s", cmds[i][0]);
        if ((sub = strchr(cmd, ' ')) != NULL) *sub++ = '\0';
        int rc = sub != NULL ? sluice(cmd, sub, "--help", NULL) : sluice(cmd, "--help", NULL);
        cr_assert_eq(rc, 0, "%s --help: %d %s", cmds[i][0], rc, err);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: sluice %s", cmds[i][0]);
        cr_assert(strncmp(out, usage, strlen(usage)) == 0, "%s", out);
        cr_assert(strstr(out, cmds[i][1]) != NULL, "%s --help lacks %s:\n%s", cmds[i][0],
                  cmds[i][1], out);
        cr_assert_str_eq(err, "");
    }
    /* -h too, defaults shown, and `sluice help CMD` is the same text */
    cr_assert_eq(sluice("master", "-h", NULL), 0);
    cr_assert(strstr(out, "(default 10000)") != NULL, "%s", out);
    cr_assert(strstr(out, "--state DIR") != NULL && strstr(out, "(required)") != NULL, "%s", out);
    char *master_help = strdup(out);
    cr_assert_eq(sluice("help", "master", NULL), 0);
    cr_assert_str_eq(out, master_help);
    free(master_help);
    cr_assert_eq(sluice("help", "table", "gen", NULL), 0);
    cr_assert(strncmp(out, "usage: sluice table gen", 23) == 0, "%s", out);
    cr_assert_eq(sluice("help", "nope", NULL), 2);
}

/* `sluice master --help` (and the worker's, and jobs resubmit's) names
 * every option its docs table has, shared groups included. */
Test(cli_options, help_lists_every_option)
{
    const char *cmds[][2] = {{"master", NULL}, {"worker", NULL}, {"jobs", "resubmit"}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s%s%s", cmds[i][0], cmds[i][1] ? " " : "",
                 cmds[i][1] ? cmds[i][1] : "");
        cr_assert_eq(sluice("help", "--markdown", name, NULL), 0, "%s", err);
        char *table = strdup(out);
        int rc = cmds[i][1] ? sluice(cmds[i][0], cmds[i][1], "--help", NULL)
                            : sluice(cmds[i][0], "--help", NULL);
        cr_assert_eq(rc, 0, "%s --help", name);
        int options = 0;
        for (const char *p = table; (p = strstr(p, "`--")) != NULL; p += 3) {
            char opt[64];
            size_t len = strcspn(p + 1, "`");
            cr_assert_lt(len, sizeof opt);
            memcpy(opt, p + 1, len);
            opt[len] = '\0';
            char line[80], alone[80]; /* "  --name ARG ..." or "  --name\n" */
            snprintf(line, sizeof line, "\n  %s ", opt);
            snprintf(alone, sizeof alone, "\n  %s\n", opt);
            cr_assert(strstr(out, line) != NULL || strstr(out, alone) != NULL,
                      "%s --help lacks %s:\n%s", name, opt, out);
            options++;
        }
        cr_assert_geq(options, 3, "%s: %s", name, table);
        free(table);
    }
}

Test(cli_options, usage_errors_name_the_option)
{
    char *job = tu_path(dir, "job.json"), *sub = tu_path(dir, "spec");
    tu_write_file(job, "{}", 2);
    cr_assert_eq(mkdir(sub, 0700), 0);
    free(job);
    free(sub);
    USAGE("master", "--listen '127.0.0.1:abc': the port 'abc' is not a number in [0, 65535]",
          "master", "--listen", "127.0.0.1:abc", "--admin", "127.0.0.1:0", "--state", "s");
    USAGE("master", "--admin '127.0.0.1:70000': the port '70000' is not a number in [0, 65535]",
          "master", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:70000", "--state", "s");
    USAGE("master", "--listen 'localhost': expected HOST:PORT (no ':PORT')", "master", "--listen",
          "localhost", "--admin", "127.0.0.1:0", "--state", "s");
    USAGE("master", "--listen ADDR is required", "master", "--admin", "127.0.0.1:0", "--state",
          "s");
    /* every missing option at once, named */
    USAGE("master", "--admin ADDR is required", "master", "--listen", "127.0.0.1:0", "--state",
          "s");
    USAGE("master", "--state DIR is required", "master", "--listen", "127.0.0.1:0", "--admin",
          "127.0.0.1:0");
    USAGE("master", "--admin ADDR and --state DIR are required", "master", "--listen",
          "127.0.0.1:0");
    USAGE("master", "--listen ADDR, --admin ADDR and --state DIR are required", "master");
    USAGE("worker", "--listen '127.0.0.1:abc': the port 'abc' is not a number in [0, 65535]",
          "worker", "--job", "job.json", "--listen", "127.0.0.1:abc");
    USAGE("worker", "--admin '[::1:80': expected [IPV6]:PORT (the host has no closing ']')",
          "worker", "--job", "job.json", "--admin", "[::1:80");
    USAGE("jobs scale", "--workers N is required", "jobs", "scale", "j", "--admin", "x:1");
    USAGE("jobs scale", "--admin HOST:PORT is required", "jobs", "scale", "j", "--workers", "2");
    USAGE("jobs show", "wants one job ID", "jobs", "show", "--admin", "x:1");
    USAGE("jobs resubmit", "--token FILE is required", "jobs", "resubmit", "j", "--admin", "x:1");
    USAGE("jobs list", "--tls-ca with a plain http:// --admin 'http://127.0.0.1:1'", "jobs", "list",
          "--admin", "http://127.0.0.1:1", "--tls-ca", "job.json");
    USAGE("jobs list", "--admin 'ftp://x:1': the scheme is http:// or https://", "jobs", "list",
          "--admin", "ftp://x:1");
    USAGE("master", "--executor 'k8s': expected local, kubernetes or none", "master", "--listen",
          ":0", "--admin", ":0", "--state", "s", "--executor", "k8s");
    USAGE("master", "--executor kubernetes needs --k8s-deployment", "master", "--listen", ":0",
          "--admin", ":0", "--state", "s", "--executor", "kubernetes");
    USAGE("master", "the --k8s-* options need --executor kubernetes", "master", "--listen", ":0",
          "--admin", ":0", "--state", "s", "--k8s-deployment", "w");
    USAGE("master", "--max-split-failures '65536': expected an integer in [1, 65535]", "master",
          "--max-split-failures", "65536");
    USAGE("worker", "--threads '0': expected an integer in [1, 256]", "worker", "--job", "job.json",
          "--threads", "0");
    USAGE("worker", "--memory-limit '2T': expected a size in bytes (K, M, G suffixes) >= 1",
          "worker", "--job", "job.json", "--memory-limit", "2T");
    USAGE("worker", "--job 'missing.json': No such file or directory", "worker", "--job",
          "missing.json");
    USAGE("worker", "--job 'spec': a directory, not a file", "worker", "--job=spec");
    USAGE("worker", "ambiguous option '--max' (--max-credits, --max-queued, --max-clients)",
          "worker", "--max", "3");
    USAGE("worker", "--job and --master exclude each other (a master sends the job)", "worker",
          "--job", "job.json", "--master", "127.0.0.1:1");
    USAGE("read", "unknown option '--bogus'", "read", "--worker", "x:1", "--bogus");
    USAGE("read", "unknown option '-x'", "read", "-x");
    USAGE("read", "--worker needs a value (HOST:PORT)", "read", "--worker");
    USAGE("read", "--json takes no value", "read", "--worker", "x:1", "--json=yes");
    USAGE("read", "unexpected argument 'extra'", "read", "--worker", "x:1", "extra");
    USAGE("submit", "--sharding 'diagonal': expected dynamic or static", "submit", "--admin", "x:1",
          "--job", "job.json", "--sharding", "diagonal");
    USAGE("submit", "--max-workers is below --min-workers", "submit", "--admin", "x:1", "--job",
          "job.json", "--min-workers", "3", "--max-workers", "2");
    USAGE("demo", "--rows '0': expected an integer in [1, 268435456]", "demo", "--rows", "0");
    USAGE("demo", "--seed '-1': expected an integer >= 0", "demo", "--seed", "-1");
    USAGE("demo", "--seed '18446744073709551616': expected an integer >= 0", "demo", "--seed",
          "18446744073709551616");
    USAGE("table cat", "wants one table directory or s3://BUCKET/PREFIX", "table", "cat", "--limit",
          "3");
    USAGE("table inspect", "unexpected argument 'b'", "table", "inspect", "a", "b");
    USAGE("table gen", "--preset criteo|sessions is required", "table", "gen", "--rows", "5",
          "--table", "t");
    USAGE("table import", "--format 'xml': expected criteo, jsonl, csv or parquet", "table",
          "import", "--format", "xml");
    USAGE("table import", "--delimiter ';;': one character (not a quote or a newline), or 'tab'",
          "table", "import", "--format", "csv", "--input", "a.csv", "--table", "t", "--delimiter",
          ";;");
    USAGE("table import", "--max-skipped-fraction '2': a number in [0, 1]", "table", "import",
          "--format", "csv", "--input", "a.csv", "--table", "t", "--max-skipped-fraction", "2");
    USAGE("table import", "--mapping and --print-mapping are for --format csv and parquet", "table",
          "import", "--format", "jsonl", "--input", "a.jsonl", "--table", "t", "--print-mapping");
}

/* "--name=value", unique prefixes, "--" and "-" as a name, and repeated
 * values, on commands that then run. */
Test(cli_options, spellings)
{
    cr_assert_eq(sluice("table", "gen", "--pres=criteo", "--rows=40", "--tab", "t", "--no-s",
                        "--quiet", "--stripe-rows=16", NULL),
                 0, "%s", err);
    cr_assert(strstr(out, "generated: 40 rows") != NULL, "%s", out);
    cr_assert_eq(sluice("table", "inspect", "--json", "--", "t", NULL), 0, "%s", err);
    cr_assert(strstr(out, "\"rows\": 40") != NULL, "%s", out);
    cr_assert_eq(sluice("table", "cat", "t", "--limit", "0", NULL), 0, "%s", err);
    cr_assert_str_eq(out, "");
    cr_assert_eq(sluice("table", "cat", "--features=I1", "t", "--limit=2", NULL), 0, "%s", err);
    cr_assert_eq(strchr(strchr(out, '\n') + 1, '\n')[1], '\0', "two lines: %s", out);
    /* one more partition of the same table, through repeated --dedup-group */
    cr_assert_eq(sluice("table", "gen", "--preset", "criteo", "--rows", "10", "--table", "u",
                        "--dedup-group", "a=C1,C2", "--dedup-group", "b=C3", "--quiet", NULL),
                 0, "%s", err);
    cr_assert(strstr(out, "storage dedup") != NULL, "%s", out);
}

/* `sluice help --markdown`: every section between the docs' markers, each
 * also printed alone; the job spec reference comes from the pipeline's
 * tables. */
Test(cli_options, markdown_sections)
{
    cr_assert_eq(sluice("help", "--markdown", NULL), 0, "%s", err);
    char *all = strdup(out);
    const char *names[] = {
        "demo",          "table create", "table import",   "table gen",     "table writer",
        "table inspect", "table verify", "table cat",      "worker",        "read",
        "submit",        "master",       "admin endpoint", "job",           "job source",
        "job batch",     "job filters",  "job transforms", "admin client",  "jobs list",
        "jobs show",     "jobs delete",  "jobs scale",     "jobs resubmit", "logging",
        "produce"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char begin[128];
        snprintf(begin, sizeof begin, "<!-- generated by sluice help --markdown: %s -->\n",
                 names[i]);
        const char *at = strstr(all, begin);
        cr_assert_not_null(at, "no section %s", names[i]);
        at += strlen(begin);
        const char *end = strstr(at, "<!-- end generated -->\n");
        cr_assert_not_null(end);
        cr_assert_eq(sluice("help", "--markdown", names[i], NULL), 0);
        cr_assert_eq(strlen(out), (size_t)(end - at), "%s", names[i]);
        cr_assert(strncmp(out, at, strlen(out)) == 0, "%s", names[i]);
    }
    cr_assert(strstr(all, "| `--listen` | `HOST:PORT` | `127.0.0.1:7077` | address for trainer "
                          "clients; port 0 picks a free one |\n") != NULL);
    cr_assert(strstr(all, "| `size` | integer in [1, 1048576] | 4096 | samples per batch |\n") !=
              NULL);
    cr_assert(strstr(all, "`output` (a non-empty string of at most 255 bytes, default "
                          "`{feature}_bucket`)") != NULL);
    free(all);
    cr_assert_eq(sluice("help", "--markdown", "nope", NULL), 2);
    cr_assert(strstr(err, "no section 'nope'") != NULL, "%s", err);
}

/* `sluice produce`'s own rules, refused before any broker is asked. */
Test(cli_options, produce_usage_errors)
{
    USAGE("produce", "--topic NAME is required", "produce", "--brokers", "b:1", "--sessions");
    USAGE("produce", "no input: give --table, --jsonl or --sessions", "produce", "--brokers", "b:1",
          "--topic", "t");
    USAGE("produce", "give one input of --table, --jsonl and --sessions", "produce", "--brokers",
          "b:1", "--topic", "t", "--sessions", "--table", "d");
    USAGE("produce", "--schema is for --jsonl", "produce", "--brokers", "b:1", "--topic", "t",
          "--sessions", "--schema", "/dev/null");
    USAGE("produce", "--rows and --seed are for --sessions", "produce", "--brokers", "b:1",
          "--topic", "t", "--table", "d", "--seed", "3");
    USAGE("produce", "--partitions '0': expected an integer in [1, 100000]", "produce", "--brokers",
          "b:1", "--topic", "t", "--sessions", "--partitions", "0");
    /* A property librdkafka does not know is named (exit 2, before any connection). */
    cr_assert_eq(sluice("produce", "--brokers", "127.0.0.1:1", "--topic", "t", "--sessions",
                        "--property", "no.such=1", NULL),
                 2, "%s", err);
    cr_assert(strstr(err, "sluice produce: property 1 no.such=1: ") != NULL, "%s", err);
    cr_assert_str_eq(out, "");
}
