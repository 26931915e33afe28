/* The autoscaler end to end: a master in this process (with a quick
 * autoscaler: short cooldown and streaks), the local executor applying its
 * desired worker counts (sl_master_desired -> sl_master_executor_apply, as
 * `sluice master` does), real `sluice worker` processes with one thread,
 * and a trainer client in master mode.
 *
 *  - a deliberately slow transform (long n-grams of a ~100-id history,
 *    32 times over, each cut to one id) and a fast trainer: the trainer waits, the workers
 *    are busy, so the worker count rises from 1 to the bound 3;
 *  - then the trainer slows down to a crawl: the workers idle behind full
 *    credit windows and the trainer never waits, so the count falls. */
#include "fleet_util.h"

#include "common/mem.h"
#include "dpp/master/process/admin.h"

TestSuite(fleet_autoscale, .init = fu_setup, .fini = fu_teardown);

/* Apply the master's desired counts to the executor. @return the desired
 * and registered counts of the (only) job. */
static void drive(sl_master_t *m, sl_master_executor_t *ex, uint32_t *desired, uint32_t *registered)
{
    sl_master_desired_t d[4];
    uint32_t n = sl_master_desired(m, d, 4);
    cr_assert_leq(n, 4);
    sl_master_executor_target_t t[4];
    for (uint32_t i = 0; i < n; i++)
        t[i] = (sl_master_executor_target_t){d[i].job_id, d[i].finished ? 0 : d[i].workers};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_apply(ex, t, n, NULL, NULL, &err), SL_OK, "%s", err.msg);
    *desired = n ? d[0].workers : 0;
    *registered = n ? d[0].registered : 0;
}

/* The job's autoscaler inputs and reason, for messages. */
static const char *job_reason(sl_master_t *m, char *buf, size_t cap)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    buf[0] = '\0';
    if (sl_master_admin_job_json(m, "scale", &j, &err) == SL_OK) {
        snprintf(buf, cap, "wait %.2f busy %.2f, %lld clients, %lld batches: %s",
                 json_real_value(json_object_get(j, "trainer_wait")),
                 json_real_value(json_object_get(j, "worker_busy")),
                 (long long)json_integer_value(json_object_get(j, "clients")),
                 (long long)json_integer_value(json_object_get(j, "batches")),
                 json_string_value(json_object_get(j, "autoscale_reason")));
        json_decref(j);
    }
    return buf;
}

Test(fleet_autoscale, rises_to_the_bound_then_falls)
{
    char table[300];
    fu_gen_preset("sessions", 20000, 1000, 1, table, sizeof table);
    /* 32 n-grams of 96 ids of a ~100-id history (~5 runs x 768 bytes hashed
     * per transform and row), each cut to its first id so that batches stay
     * small: the worker (one thread) is slow, the trainer's side is cheap. */
    char spec[8192];
    int n = snprintf(spec, sizeof spec,
                     "{\"id\":\"scale\",\"source\":{\"table\":\"%s\",\"features\":[\"item_id\"]},"
                     "\"transforms\":[",
                     table);
    for (int i = 0; i < 32; i++)
        n += snprintf(spec + n, sizeof spec - (size_t)n,
                      "{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":96,"
                      "\"table_size\":1000003,\"salt\":%d,\"output\":\"hist_ng%d\"},"
                      "{\"op\":\"first_x\",\"feature\":\"hist_ng%d\",\"x\":1}%s",
                      i, i, i, i < 31 ? "," : "");
    snprintf(spec + n, sizeof spec - (size_t)n, "],\"batch\":{\"size\":256,\"epochs\":1000}}");

    sl_master_autoscale_opts_t as = sl_master_autoscale_opts_default(1, 3);
    as.up_after = 2;
    as.down_after = 3;
    as.busy_low = 0.3;
    as.cooldown_ns = 1500ull * 1000 * 1000;
    sl_master_opts_t o = {.lease_timeout_ms = 2000, .autoscale_every_ms = 300, .autoscale = &as};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&o, &m, &err), SL_OK, "%s", err.msg);
    char body[8500];
    snprintf(body, sizeof body, "{\"spec\":%s,\"min_workers\":1,\"max_workers\":3,\"workers\":1}",
             spec);
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b);
    char *id = NULL;
    cr_assert_eq(sl_master_admin_job_submit(m, b, &id, &err), SL_OK, "%s", err.msg);
    json_decref(b);
    cr_assert_str_eq(id, "scale");

    fu_master_t fm = {0};
    snprintf(fm.ctl, sizeof fm.ctl, "%s", sl_master_address(m));
    sl_master_executor_t *ex = fu_executor(&fm, 1);
    uint32_t desired = 0, registered = 0;
    drive(m, ex, &desired, &registered);
    cr_assert_eq(desired, 1);
    cr_assert_eq(sl_master_executor_count(ex, "scale"), 1);

    atomic_uint *seen = calloc(20000, sizeof *seen);
    fu_client_t c = {.master = fm.ctl, .job = id, .rows = 20000, .seen = seen};
    pthread_t th;
    pthread_create(&th, NULL, fu_client_run, &c);

    char why[512];
    uint32_t peak = 0;
    double deadline = fu_now() + tu_timeout(40);
    while (peak < 3) {
        cr_assert(fu_now() < deadline, "the worker count did not rise to 3 (desired %u, %s)",
                  desired, job_reason(m, why, sizeof why));
        cr_assert(!atomic_load(&c.finished), "client ended: %s", c.msg);
        usleep(100 * 1000);
        drive(m, ex, &desired, &registered);
        if (desired > peak) peak = desired;
    }
    cr_assert_eq(sl_master_executor_count(ex, "scale"), 3, "the executor runs what is desired");
    cr_log_info("rose to 3: %s", job_reason(m, why, sizeof why));

    /* A slow trainer: 400 ms per batch of 256, far below what 3 workers make
     * (also in a sanitizer build), times the timeout multiplier: on a
     * machine loaded enough to need one, 3 workers make less (they share
     * its cores), and the trainer, seen waiting while it waits, must still
     * be the bottleneck for the count to fall. */
    atomic_store(&c.delay_us, (unsigned)(tu_timeout(0.4) * 1e6));
    deadline = fu_now() + tu_timeout(40);
    while (desired >= 3) {
        cr_assert(fu_now() < deadline, "the worker count did not fall (desired %u, %s)", desired,
                  job_reason(m, why, sizeof why));
        usleep(100 * 1000);
        drive(m, ex, &desired, &registered);
    }
    cr_log_info("fell to %u: %s", desired, job_reason(m, why, sizeof why));
    cr_assert_lt(desired, 3);
    deadline = fu_now() + tu_timeout(5);
    while (sl_master_executor_count(ex, "scale") != desired && fu_now() < deadline) {
        usleep(100 * 1000);
        drive(m, ex, &desired, &registered);
    }
    cr_assert_eq(sl_master_executor_count(ex, "scale"), desired);

    atomic_store(&c.stop, true);
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    fu_executor_destroy(ex);
    sl_master_stop(m);
    free(seen);
    sl_strfree(NULL, id); /* the master's allocator: the default */
}
