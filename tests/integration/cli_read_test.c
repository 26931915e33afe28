/* `sluice read --timeout` (src/cli/read.c): the command waits in short
 * slices (to see SIGINT and show progress) and, when no batch came within
 * the whole --timeout, says so with the trainer library's own timeout
 * error for that wait (sl_trainer_timeout_error), the job's state in it. */
#include <stdarg.h>

#include "fleet_util.h"

TestSuite(cli_read, .init = fu_setup, .fini = fu_teardown);

Test(cli_read, a_timeout_names_the_whole_wait)
{
    fu_master_t m = {0};
    /* a job no worker serves: nothing comes */
    char *job = fu_job_up(&m, "idle", 2000, 1, 1, "dynamic", 1);
    const char *args[] = {"read",      "--master", m.ctl,     "--job", job,
                          "--timeout", "550",      "--quiet", NULL};
    char *out = NULL;
    double t0 = fu_now();
    cr_assert_eq(fu_run(args, "SLUICE_ADMIN_TOKEN", NULL, &out), 1, "%s", out);
    double took = fu_now() - t0;
    cr_assert_str_eq(out, "sluice read: after 0 batches: job idle: no batch within 550 ms (0 "
                          "workers connected, 0 commits unanswered)\n");
    cr_assert_geq(took, 0.55);
    free(out);
    free(job);
    fu_master_stop(&m, SIGTERM);
}
