/* The trainer client's own metrics endpoint (sl_trainer_opts_t
 * metrics_address): GET /metrics answers sl_trainer_stats as Prometheus
 * text, every series labelled with the client's job, rank and client id.
 * It runs on the HTTP server of httpd/server.h (libmicrohttpd, one thread
 * of its own), started once the client is connected and stopped first
 * when it closes; it reads only the client's atomics (sl_trainer_stats),
 * never its locks, so a scrape cannot stall the trainer. docs/TRAINER.md
 * "Metrics" lists the families. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/mem.h"
#include "common/prom.h"
#include "httpd/server.h"
#include "trainer/fleet_internal.h"

/* A scraper or two, with room for a curl by hand: more are refused.
 * Idle or trickling connections are closed after the timeout, as on the
 * admin endpoints. */
#define METRICS_MAX_CONNECTIONS 16
#define METRICS_TIMEOUT_S 10
#define METRICS_ENV "SLUICE_TRAINER_METRICS"

typedef enum field_kind { U64, U32, NS_AS_SECONDS } field_kind_t;

/* One series per field of sl_trainer_stats_t: the table is the renderer,
 * so a new field is one more line here. */
typedef struct metric {
    const sl_metric_def_t *def; /* name, type, help: common/metrics.h */
    size_t offset;
    field_kind_t kind;
} metric_t;

#define FIELD(f) offsetof(sl_trainer_stats_t, f)

static const metric_t metrics[] = {
    {SL_M(TRAINER_BATCHES_TOTAL), FIELD(batches), U64},
    {SL_M(TRAINER_SAMPLES_TOTAL), FIELD(samples), U64},
    {SL_M(TRAINER_BYTES_TOTAL), FIELD(bytes), U64},
    {SL_M(TRAINER_WAIT_SECONDS_TOTAL), FIELD(wait_ns), NS_AS_SECONDS},
    {SL_M(TRAINER_RECONNECTS_TOTAL), FIELD(reconnects), U64},
    {SL_M(TRAINER_QUEUED_BATCHES), FIELD(queued), U32},
    {SL_M(TRAINER_WORKERS), FIELD(workers), U32},
    {SL_M(TRAINER_COMMITTED_BATCHES_TOTAL), FIELD(committed), U64},
    {SL_M(TRAINER_DROPPED_BATCHES_TOTAL), FIELD(dropped), U64},
    {SL_M(TRAINER_SHM_BATCHES_TOTAL), FIELD(batches_shm), U64},
    {SL_M(TRAINER_SOCKET_BATCHES_TOTAL), FIELD(batches_socket), U64},
};

static double field_value(const sl_trainer_stats_t *s, const metric_t *m)
{
    const char *at = (const char *)s + m->offset;
    switch (m->kind) {
    case U32:
        return (double)*(const uint32_t *)(const void *)at;
    case NS_AS_SECONDS:
        return (double)*(const uint64_t *)(const void *)at / 1e9;
    case U64:
        break;
    }
    return (double)*(const uint64_t *)(const void *)at;
}

/* The text of GET /metrics, an owned string of t->a, or NULL when out of
 * memory. */
static char *render(const sl_trainer_t *t)
{
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    /* s.wait_ns counts the sl_trainer_next call in progress, floored so that
     * the counter never falls (sl_trainer_stats) */
    sl_prom_t p;
    sl_prom_init(&p, t->a);
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++) {
        sl_prom_family_def(&p, metrics[i].def);
        sl_prom_sample_def(&p, metrics[i].def, t->metrics_labels, field_value(&s, &metrics[i]));
    }
    /* Freshness (Kafka jobs): each sample's age at hand-over, record
     * CreateTime to sl_trainer_next. */
    double bounds_s[SL_TRAINER_FRESHNESS_BUCKETS - 1];
    for (size_t i = 0; i < SL_TRAINER_FRESHNESS_BUCKETS - 1; i++)
        bounds_s[i] = (double)sl_trainer_freshness_bounds_ms[i] / 1e3;
    sl_prom_family_def(&p, SL_M(TRAINER_FRESHNESS_SECONDS));
    sl_prom_histogram_def(&p, SL_M(TRAINER_FRESHNESS_SECONDS), t->metrics_labels, bounds_s,
                          s.freshness_buckets, SL_TRAINER_FRESHNESS_BUCKETS - 1,
                          (double)s.freshness_sum_ms / 1e3, s.freshness_count);
    sl_prom_family_def(&p, SL_M(TRAINER_START_TIME_SECONDS));
    sl_prom_sample_def(&p, SL_M(TRAINER_START_TIME_SECONDS), t->metrics_labels, t->start_time_s);
    return sl_prom_finish(&p);
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned int status, const char *msg,
                                  const char *const *extra)
{
    return sl_httpd_reply(conn, status, "text/plain; charset=utf-8", msg, strlen(msg), extra);
}

/* Marks a request judged from its headers (no state of its own). */
static int admitted;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    sl_trainer_t *t = cls;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (*con_cls == NULL) {
        /* The headers are in: a refusal goes now, and libmicrohttpd closes
         * the connection without reading a body. */
        *con_cls = &admitted;
        if (strcmp(url, "/metrics") != 0)
            return reply_text(conn, 404, "not found: this trainer client serves GET /metrics\n",
                              NULL);
        if (!get) {
            static const char *const allow[] = {"Allow", "GET, HEAD", NULL};
            return reply_text(conn, 405, "method not allowed: /metrics answers GET and HEAD\n",
                              allow);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0; /* a body on a GET: read and dropped, never kept */
        return MHD_YES;
    }
    char *text = render(t);
    if (!text) return reply_text(conn, 503, "out of memory rendering the metrics\n", NULL);
    enum MHD_Result ret = sl_httpd_reply(conn, 200, SL_PROM_CONTENT_TYPE, text, strlen(text), NULL);
    sl_strfree(t->a, text);
    return ret;
}

/* job="…",rank="…",client="…" for every series: the job and client ids of
 * master mode. In direct mode the job is not known here: no job label, so
 * Prometheus gives the series the scrape job's (honor_labels keeps ours
 * where there is one), and the client is the client name. */
static sl_err_t make_labels(sl_trainer_t *t, sl_error_t *err)
{
    char rank[16], lj[2 * TR_ID_MAX + 16], lr[32], lc[2 * TR_ID_MAX + 16];
    snprintf(rank, sizeof rank, "%u", t->rank);
    sl_prom_label(lr, sizeof lr, "rank", rank);
    sl_prom_label(lc, sizeof lc, "client", t->fleet ? t->fleet->client_id : t->client_name);
    if (t->fleet)
        t->metrics_labels = sl_strfmt(
            t->a, "%s,%s,%s", sl_prom_label(lj, sizeof lj, "job", t->fleet->job_id), lr, lc);
    else
        t->metrics_labels = sl_strfmt(t->a, "%s,%s", lr, lc);
    return t->metrics_labels ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
}

sl_err_t tr_metrics_start(sl_trainer_t *t, const char *address, sl_error_t *err)
{
    if (!address) address = getenv(METRICS_ENV);
    if (!address || !address[0]) return SL_OK; /* off */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    t->start_time_s = (double)now.tv_sec + (double)(now.tv_nsec / 1000000) / 1e3;
    SL_FORWARD_IF_ERROR(make_labels(t, err));
    sl_httpd_opts_t o = {.address = address,
                         .what = "trainer metrics endpoint",
                         .max_connections = METRICS_MAX_CONNECTIONS,
                         .timeout_s = METRICS_TIMEOUT_S,
                         .on_request = on_request,
                         .request_ctx = t};
    return sl_httpd_start(&o, &t->metrics, err);
}

void tr_metrics_stop(sl_trainer_t *t)
{
    sl_httpd_stop(t->metrics);
    t->metrics = NULL;
    sl_strfree(t->a, t->metrics_labels);
    t->metrics_labels = NULL;
}

uint16_t sl_trainer_metrics_port(const sl_trainer_t *t)
{
    return t && t->metrics ? sl_httpd_port(t->metrics) : 0;
}
