/* Starting a worker under a master (lease_client.h: sl_worker_lease_prep_*,
 * sl_worker_start_leased): the listening socket first, so that the
 * serve address can be registered before the job is known, then the job
 * from the first lease. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dpp/worker/lease/lease_client.h"
#include "rpc/auth.h"
#include "rpc/frame.h"

sl_err_t sl_worker_lease_prep_new(const sl_worker_lease_client_opts_t *mo, const char *listen,
                                  sl_worker_lease_prep_t *prep, sl_error_t *err)
{
    *prep = (sl_worker_lease_prep_t){.fd = -1};
    if (!listen) listen = "127.0.0.1:0";
    /* refused before registering, not at the first lease */
    sl_err_t rc = sl_rpc_check_exposure("worker --listen", listen, mo->cluster_secret != NULL, err);
    if (rc) return rc;
    rc = sl_rpc_listen(listen, 64, &prep->fd, &prep->port, err);
    if (rc) return rc;
    char serve[300];
    if (mo->serve_address) {
        snprintf(serve, sizeof serve, "%s", mo->serve_address);
    } else {
        char host[256];
        snprintf(host, sizeof host, "%s", listen);
        char *colon = strrchr(host, ':');
        if (colon) *colon = '\0';
        if (!host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0) {
            if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "127.0.0.1");
            host[sizeof host - 1] = '\0';
        }
        snprintf(serve, sizeof serve, "%s:%u", host, (unsigned)prep->port);
    }
    sl_worker_lease_client_opts_t m = *mo;
    m.serve_address = serve;
    if ((rc = sl_worker_lease_client_new(&m, &prep->ms, err))) {
        close(prep->fd);
        *prep = (sl_worker_lease_prep_t){.fd = -1};
    }
    return rc;
}

void sl_worker_lease_prep_free(sl_worker_lease_prep_t *prep)
{
    sl_worker_lease_client_destroy(prep->ms);
    if (prep->fd >= 0) close(prep->fd);
    *prep = (sl_worker_lease_prep_t){.fd = -1};
}

sl_err_t sl_worker_lease_prep_start(sl_worker_lease_prep_t *prep, const sl_worker_opts_t *wo,
                                    sl_pipeline_job_t **job, sl_worker_t **out,
                                    sl_pipeline_problems_t *problems, sl_error_t *err)
{
    sl_worker_lease_client_t *ms = prep->ms;
    const char *job_id = NULL, *spec = NULL;
    sl_pipeline_job_t *j = NULL;
    sl_err_t rc;
    if ((rc = sl_worker_lease_client_wait_job(ms, 0, &job_id, &spec, err)) ||
        (rc = sl_pipeline_job_parse(spec, strlen(spec), &j, problems, err))) {
        sl_error_prefix(err, "job '%s' from the master: ", job_id ? job_id : "?");
        sl_worker_lease_prep_free(prep);
        return rc;
    }
    sl_worker_opts_t o = wo ? *wo : sl_worker_opts_default();
    o.source = sl_worker_lease_client_source(ms);
    o.has_listen_fd = true;
    o.listen_fd = prep->fd;
    o.listen_port = prep->port;
    o.job_id = job_id;
    *prep = (sl_worker_lease_prep_t){.fd = -1}; /* the worker owns them now, also on failure */
    sl_worker_t *w = NULL;
    if ((rc = sl_worker_start(j, &o, &w, problems, err))) {
        sl_pipeline_job_destroy(j);
        return rc;
    }
    sl_worker_lease_client_attach(ms, w);
    *job = j;
    *out = w;
    return SL_OK;
}

sl_err_t sl_worker_start_leased(const sl_worker_lease_client_opts_t *mo, const sl_worker_opts_t *wo,
                                int wait_ms, sl_pipeline_job_t **job, sl_worker_t **out,
                                sl_worker_lease_client_t **ms_out, sl_pipeline_problems_t *problems,
                                sl_error_t *err)
{
    sl_worker_lease_prep_t prep;
    sl_err_t rc = sl_worker_lease_prep_new(mo, wo ? wo->listen : NULL, &prep, err);
    if (rc) return rc;
    const char *job_id, *spec;
    if ((rc = sl_worker_lease_client_wait_job(prep.ms, wait_ms, &job_id, &spec, err))) {
        sl_worker_lease_prep_free(&prep);
        return rc;
    }
    sl_worker_lease_client_t *ms = prep.ms;
    if ((rc = sl_worker_lease_prep_start(&prep, wo, job, out, problems, err))) return rc;
    if (ms_out) *ms_out = ms;
    return SL_OK;
}
