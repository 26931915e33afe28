/* `--log-format json` (src/cli/log_cli.c, the one JSON encoder of log
 * records; docs/ADMIN.md "Logs"): a real `sluice master` writes each record
 * as one JSON object a line, ts first, then level, cmd, event, msg and the
 * event's fields in order, with their JSON types (numbers as numbers, a
 * float as a real). The exact lines of a job's submission are checked,
 * with only the timestamp's digits left out. tests/system/logs_test.py
 * checks every event of a job's life in this format. */
#include "fleet_util.h"

TestSuite(cli_logs, .init = fu_setup, .fini = fu_teardown);

/* The line of text that holds needle, with its "ts" value checked as RFC
 * 3339 UTC with milliseconds and replaced by "T". Caller frees. */
static char *line_with(const char *text, const char *needle)
{
    const char *hit = strstr(text, needle);
    cr_assert_not_null(hit, "no line with %s in:\n%s", needle, text);
    const char *start = hit;
    while (start > text && start[-1] != '\n')
        start--;
    const char *end = strchr(hit, '\n');
    cr_assert_not_null(end, "%s", start);
    const char *head = "{\"ts\":\"";
    cr_assert(strncmp(start, head, strlen(head)) == 0, "%.*s", (int)(end - start), start);
    const char *ts = start + strlen(head);
    /* 2026-11-24T14:17:15.484Z */
    const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ\"";
    for (size_t k = 0; k < strlen(shape); k++)
        cr_assert(shape[k] == 'd' ? (ts[k] >= '0' && ts[k] <= '9') : ts[k] == shape[k],
                  "ts of %.*s", (int)(end - start), start);
    char *out = NULL;
    cr_assert_gt(asprintf(&out, "{\"ts\":\"T%.*s", (int)(end - ts - 24), ts + 24), 0);
    return out;
}

Test(cli_logs, json_lines_of_a_submission)
{
    fu_master_t m = {.extra = {"--log-format", "json"}};
    char *job = fu_job_up(&m, "j", 4000, 2, 1, "dynamic", 1);
    fu_master_stop(&m, SIGTERM);
    char *text = tu_read_file(m.log);
    cr_assert_not_null(text);
    char *line = line_with(text, "\"event\":\"job_submitted\"");
    cr_assert_str_eq(line, "{\"ts\":\"T\",\"level\":\"info\",\"cmd\":\"master\","
                           "\"event\":\"job_submitted\",\"msg\":\"job j submitted: 4 splits, 2 "
                           "epochs, 1 rank, workers 1..1\",\"job\":\"j\",\"splits\":4,"
                           "\"epochs\":2,\"ranks\":1,\"sharding\":\"dynamic\",\"min_workers\":1,"
                           "\"max_workers\":1,\"resume_tokens\":0}");
    free(line);
    line = line_with(text, "\"event\":\"autoscale\"");
    cr_assert_str_eq(line,
                     "{\"ts\":\"T\",\"level\":\"info\",\"cmd\":\"master\","
                     "\"event\":\"autoscale\",\"msg\":\"job j: desired workers 0 -> 1 "
                     "(initial count)\",\"job\":\"j\",\"from\":0,\"to\":1,\"by\":\"submit\","
                     "\"trainer_wait\":0.0,\"worker_busy\":0.0,\"reason\":\"initial count\"}");
    free(line);
    free(text);
    free(job);
}
