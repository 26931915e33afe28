/* A worker waiting for its first lease (sl_worker_lease_client_wait_job)
 * against the fake master of fake_master.h, which has nothing to lease
 * (NO_WORK, retry in 20 ms): a wait with a timeout shorter than that
 * retry lasts its whole timeout and asks once, rather than returning at
 * once -- the CLI waits in 200 ms slices (watching for signals) and would
 * otherwise ask the master again at once, a busy loop of LEASE_REQUEST
 * and NO_WORK on both sides for as long as the worker has no lease. */
#include <criterion/criterion.h>

#include "common/clock.h"
#include "dpp/worker/lease/lease_client.h"
#include "fake_master.h"
#include "testutil.h"

Test(lease_wait, a_short_wait_waits_out_its_timeout)
{
    fake_t f;
    fm_start(&f, NULL, "{}");
    f.hold = true;
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f.port);
    sl_worker_lease_client_opts_t mo = {
        .master = master, .worker_id = "w1", .serve_address = "127.0.0.1:9"};
    sl_worker_lease_client_t *ms = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_lease_client_new(&mo, &ms, &err), SL_OK, "%s", err.msg);
    for (int round = 0; round < 5; round++) {
        pthread_mutex_lock(&f.mu);
        uint32_t asked = f.lease_requests;
        pthread_mutex_unlock(&f.mu);
        const char *job = NULL, *spec = NULL;
        uint64_t t0 = sl_clock_ns();
        sl_err_t rc = sl_worker_lease_client_wait_job(ms, 10, &job, &spec, &err);
        uint64_t took_ms = (sl_clock_ns() - t0) / 1000000u;
        cr_assert_eq(rc, SL_ERR_TIMEOUT, "%s", err.msg);
        cr_assert_geq(took_ms, 10, "round %d: a 10 ms wait returned after %llu ms", round,
                      (unsigned long long)took_ms);
        pthread_mutex_lock(&f.mu);
        cr_assert_eq(f.lease_requests - asked, 1, "round %d: %u lease requests in one wait", round,
                     f.lease_requests - asked);
        pthread_mutex_unlock(&f.mu);
    }
    sl_worker_lease_client_destroy(ms);
    fm_stop(&f);
    no_thread_fails();
}
