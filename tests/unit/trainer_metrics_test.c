/* The trainer client's own metrics endpoint (src/trainer/metrics.c,
 * opts.metrics_address): the Prometheus text of GET /metrics, parsed,
 * holds exactly what sl_trainer_stats says after a run, in direct mode
 * (against trainer_fake_worker.h) and in master mode (job and client labels,
 * commits, against trainer_master_fakes.h); wrong paths and methods get
 * 404 / 405, garbage gets no answer that stops the server; a connection
 * that trickles its request is closed by the timeout while scrapes go on;
 * connections beyond the cap are refused; the wait of a call in progress
 * rises while it waits; off by default, on from
 * $SLUICE_TRAINER_METRICS, a bad address fails connect. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>

#include "sluice/trainer.h"
#include "trainer_fake_worker.h"
#include "trainer_master_fakes.h"

#define JOB "job-7"

static int wait_ms(void)
{
    return (int)(tu_timeout(10) * 1000);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- HTTP through libcurl ---- */

typedef struct reply {
    long status;
    char *body; /* malloc'd, NUL-terminated */
    size_t len;
    char content_type[128];
    char allow[64];
} reply_t;

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    reply_t *r = ctx;
    r->body = realloc(r->body, r->len + size * n + 1);
    memcpy(r->body + r->len, p, size * n);
    r->len += size * n;
    r->body[r->len] = '\0';
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    reply_t *r = ctx;
    size_t len = size * n;
    if (len > 7 && strncasecmp(p, "Allow: ", 7) == 0)
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)(len - 9), p + 7);
    return len;
}

/* method on http://127.0.0.1:port/path (NULL method: GET). */
static reply_t request(uint16_t port, const char *method, const char *path)
{
    reply_t r = {0};
    r.body = calloc(1, 1);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)wait_ms());
    if (method && strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method && strcmp(method, "POST") == 0)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "x=1");
    else if (method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode rc = curl_easy_perform(c);
    cr_assert_eq(rc, CURLE_OK, "%s %s: %s", method ? method : "GET", url, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r.content_type, sizeof r.content_type, "%s", ct ? ct : "");
    curl_easy_cleanup(c);
    return r;
}

/* ---- the exposition text, parsed ---- */

#define MAX_SAMPLES 64

typedef struct sample {
    char name[96];
    char labels[512];
    double value;
} sample_t;

typedef struct exposition {
    sample_t s[MAX_SAMPLES];
    int n;
    char typed[MAX_SAMPLES][96]; /* families with a TYPE line */
    int ntyped;
} exposition_t;

/* Parse the text strictly: every line is "# HELP name text", "# TYPE name
 * type" or "name{labels} value"; each sample's family was typed before it. */
static void parse(const char *text, exposition_t *e)
{
    memset(e, 0, sizeof *e);
    const char *at = text;
    while (*at) {
        const char *nl = strchr(at, '\n');
        cr_assert_not_null(nl, "the text does not end with a newline: ...%s", at);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(nl - at), at);
        at = nl + 1;
        char name[96], rest[600];
        if (strncmp(line, "# HELP ", 7) == 0) {
            cr_assert_eq(sscanf(line + 7, "%95s %599[^\n]", name, rest), 2, "%s", line);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            cr_assert_eq(sscanf(line + 7, "%95s %599s", name, rest), 2, "%s", line);
            cr_assert(strcmp(rest, "counter") == 0 || strcmp(rest, "gauge") == 0 ||
                          strcmp(rest, "histogram") == 0,
                      "%s", line);
            cr_assert_lt(e->ntyped, MAX_SAMPLES);
            snprintf(e->typed[e->ntyped++], sizeof e->typed[0], "%s", name);
            continue;
        }
        cr_assert_lt(e->n, MAX_SAMPLES);
        sample_t *s = &e->s[e->n++];
        char value[64];
        cr_assert_eq(sscanf(line, "%95[^{]{%511[^}]} %63s", s->name, s->labels, value), 3,
                     "not a sample line: %s", line);
        char *end;
        s->value = strtod(value, &end);
        cr_assert_eq(*end, '\0', "value %s", value);
        bool typed = false;
        for (int i = 0; i < e->ntyped; i++) {
            /* a histogram's series are its family's name plus a suffix */
            size_t len = strlen(e->typed[i]);
            const char *tail = s->name + len;
            typed |= strncmp(e->typed[i], s->name, len) == 0 &&
                     (*tail == '\0' || strcmp(tail, "_bucket") == 0 || strcmp(tail, "_sum") == 0 ||
                      strcmp(tail, "_count") == 0);
        }
        cr_assert(typed, "%s has no TYPE line before it", s->name);
    }
}

static const sample_t *find(const exposition_t *e, const char *name)
{
    const sample_t *found = NULL;
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->s[i].name, name) == 0) {
            cr_assert_null(found, "%s twice", name);
            found = &e->s[i];
        }
    cr_assert_not_null(found, "no sample %s", name);
    return found;
}

/* Every field of st, exactly, with labels on every series; 13 families
 * (the freshness histogram: 14 buckets, its sum and count). */
static void expect_stats(const exposition_t *e, const sl_trainer_stats_t *st, const char *labels)
{
    struct {
        const char *name;
        double want;
    } f[] = {
        {"sluice_trainer_batches_total", (double)st->batches},
        {"sluice_trainer_samples_total", (double)st->samples},
        {"sluice_trainer_bytes_total", (double)st->bytes},
        {"sluice_trainer_wait_seconds_total", (double)st->wait_ns / 1e9},
        {"sluice_trainer_reconnects_total", (double)st->reconnects},
        {"sluice_trainer_queued_batches", (double)st->queued},
        {"sluice_trainer_workers", (double)st->workers},
        {"sluice_trainer_committed_batches_total", (double)st->committed},
        {"sluice_trainer_dropped_batches_total", (double)st->dropped},
        {"sluice_trainer_shm_batches_total", (double)st->batches_shm},
        {"sluice_trainer_socket_batches_total", (double)st->batches_socket},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const sample_t *s = find(e, f[i].name);
        cr_assert_eq(s->value, f[i].want, "%s: %.17g, sl_trainer_stats %.17g", f[i].name, s->value,
                     f[i].want);
        cr_assert_str_eq(s->labels, labels, "%s", f[i].name);
    }
    cr_assert_str_eq(find(e, "sluice_trainer_start_time_seconds")->labels, labels);
    const sample_t *count = find(e, "sluice_trainer_freshness_seconds_count");
    cr_assert_eq(count->value, (double)st->freshness_count);
    cr_assert_str_eq(count->labels, labels);
    cr_assert_eq(find(e, "sluice_trainer_freshness_seconds_sum")->value,
                 (double)st->freshness_sum_ms / 1e3);
    int buckets = 0;
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->s[i].name, "sluice_trainer_freshness_seconds_bucket") == 0) {
            buckets++;
            if (strstr(e->s[i].labels, "le=\"+Inf\""))
                cr_assert_eq(e->s[i].value, (double)st->freshness_count);
        }
    cr_assert_eq(buckets, SL_TRAINER_FRESHNESS_BUCKETS);
    cr_assert_eq(e->n, 12 + SL_TRAINER_FRESHNESS_BUCKETS + 2, "%d samples", e->n);
    cr_assert_eq(e->ntyped, 13);
}

/* ---- direct mode ---- */

static sl_trainer_t *connect_direct(fake_worker_t *w, const char *metrics, sl_error_t *err,
                                    sl_err_t want)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = w->addr;
    o.client_name = "test-trainer";
    o.prefetch = 3;
    o.rank = 2;
    o.world_size = 4;
    o.metrics_address = metrics;
    sl_trainer_t *t = NULL;
    cr_assert_eq(sl_trainer_connect(&o, &t, err), want, "%s", err->msg);
    return t;
}

Test(trainer_metrics, direct_mode_text_matches_the_stats)
{
    uint64_t rng = tu_seed("trainer_metrics.direct");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    fw_fill(&w, &rng, 40, NULL);
    w.window = 3;
    fw_start(&w);
    double before = wall_s();
    sl_error_t err = {0};
    sl_trainer_t *t = connect_direct(&w, "127.0.0.1:0", &err, SL_OK);
    double after = wall_s();
    uint16_t port = sl_trainer_metrics_port(t);
    cr_assert_gt(port, 0);

    /* Before any batch: zeros (bytes: the WELCOME), the labels, the type. */
    reply_t r = request(port, NULL, "/metrics");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    exposition_t e;
    parse(r.body, &e);
    cr_assert_eq(find(&e, "sluice_trainer_batches_total")->value, 0);
    free(r.body);

    uint32_t samples = 0;
    for (uint32_t i = 0; i < w.n; i++) {
        sl_batch_t *b = NULL;
        cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_OK, "batch %u: %s", i, err.msg);
        samples += b->batch_size;
        sl_trainer_release(t, b);
    }
    sl_batch_t *b = NULL;
    cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_ERR_CLOSED, "%s", err.msg);

    /* The job is over: nothing moves any more, so the text and the stats
     * must agree to the last digit. */
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches, 40);
    cr_assert_eq(st.samples, samples);
    cr_assert_gt(st.wait_ns, 0);
    r = request(port, NULL, "/metrics");
    cr_assert_eq(r.status, 200);
    parse(r.body, &e);
    /* direct mode: no job label (the scrape job's name stands in) */
    expect_stats(&e, &st, "rank=\"2\",client=\"test-trainer\"");
    double start = find(&e, "sluice_trainer_start_time_seconds")->value;
    cr_assert(start >= floor(before) && start <= after + 1, "start %.3f, connect %.3f-%.3f", start,
              before, after);
    cr_assert(strstr(r.body, "# HELP sluice_trainer_wait_seconds_total Time sl_trainer_next "
                             "spent waiting"),
              "%s", r.body);
    free(r.body);

    /* HEAD: the same headers, no body; a query string is not the path. */
    r = request(port, "HEAD", "/metrics");
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 0);
    free(r.body);
    r = request(port, NULL, "/metrics?x=1");
    cr_assert_eq(r.status, 200);
    free(r.body);

    sl_trainer_close(t);
    fw_join(&w);
    cr_assert_eq(st.bytes, w.bytes_sent);
    fw_free(&w);
}

/* ---- master mode ---- */

Test(trainer_metrics, master_mode_labels_commits_and_drops)
{
    fk_master_t m = {.job = JOB, .splits = 2, .rows_per_split = 30};
    fk_worker_t w = {.id = "w1", .job = JOB};
    for (uint64_t r = 0; r < 30; r += 6) {
        fk_add(&w, 0, r, r + 6, 1, 2); /* rank 1 */
        fk_add(&w, 1, r, r + 6, 1, 1); /* rank 0: dropped */
    }
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m.addr;
    o.job_id = JOB;
    o.client_id = "host-3.\"rank\"-1"; /* escaped in the label */
    o.rank = 1;
    o.world_size = 2;
    o.refresh_ms = 50;
    o.metrics_address = "127.0.0.1:0";
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 0; i < 5; i++) {
        sl_batch_t *b = NULL;
        cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_OK, "%s", err.msg);
        sl_trainer_release(t, b);
    }
    /* Everything the worker had is in: 5 committed, the other rank's 5
     * dropped; then the counters hold still. */
    sl_trainer_stats_t st;
    for (int i = 0; i < wait_ms() / 10; i++) {
        sl_trainer_stats(t, &st);
        if (st.dropped == 5 && st.workers == 1 && fk_worker_idle(&w)) break;
        usleep(10000);
    }
    cr_assert_eq(st.dropped, 5);
    cr_assert_eq(st.committed, 5);
    cr_assert_eq(st.workers, 1);
    reply_t r = request(sl_trainer_metrics_port(t), NULL, "/metrics");
    cr_assert_eq(r.status, 200);
    exposition_t e;
    parse(r.body, &e);
    expect_stats(&e, &st, "job=\"job-7\",rank=\"1\",client=\"host-3.\\\"rank\\\"-1\"");
    free(r.body);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    fk_master_stop(&m);
}

/* ---- refusals and limits ---- */

static sl_trainer_t *silent_client(fake_worker_t *w, const char *metrics)
{
    memset(w, 0, sizeof *w);
    w->mode = FW_SILENT;
    fw_start(w);
    sl_error_t err = {0};
    return connect_direct(w, metrics, &err, SL_OK);
}

static void close_silent(fake_worker_t *w, sl_trainer_t *t)
{
    sl_trainer_close(t);
    fw_join(w);
    cr_assert(w->got_goodbye);
}

Test(trainer_metrics, wrong_paths_and_methods_are_refused)
{
    static fake_worker_t w;
    sl_trainer_t *t = silent_client(&w, "127.0.0.1:0");
    uint16_t port = sl_trainer_metrics_port(t);
    const char *paths[] = {"/", "/metricsx", "/metrics/", "/status"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        reply_t r = request(port, NULL, paths[i]);
        cr_assert_eq(r.status, 404, "GET %s: %ld", paths[i], r.status);
        cr_assert_str_eq(r.body, "not found: this trainer client serves GET /metrics\n");
        free(r.body);
    }
    const char *methods[] = {"POST", "PUT", "DELETE", "OPTIONS"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        reply_t r = request(port, methods[i], "/metrics");
        cr_assert_eq(r.status, 405, "%s /metrics: %ld", methods[i], r.status);
        cr_assert_str_eq(r.allow, "GET, HEAD");
        cr_assert_str_eq(r.body, "method not allowed: /metrics answers GET and HEAD\n");
        free(r.body);
    }
    /* Not HTTP at all: answered 400 or closed, and the server serves on. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char junk[] = "\x01\x02 garbage\r\n\r\n";
    cr_assert_eq(send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL), (ssize_t)(sizeof junk - 1));
    char buf[512];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, wait_ms()), 1, "no answer and no close for garbage");
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
        buf[n] = '\0';
        cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
    }
    close(fd);
    reply_t r = request(port, NULL, "/metrics");
    cr_assert_eq(r.status, 200);
    free(r.body);
    close_silent(&w, t);
}

/* ---- a call in progress ---- */

typedef struct blocked {
    sl_trainer_t *t;
    int timeout_ms;
    _Atomic double began, ended; /* now_s() before and after the call */
    sl_err_t rc;
} blocked_t;

static void *call_next(void *arg)
{
    blocked_t *c = arg;
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    atomic_store(&c->began, now_s());
    c->rc = sl_trainer_next(c->t, c->timeout_ms, &b, &err);
    atomic_store(&c->ended, now_s());
    return NULL;
}

/* The wait of one scrape, with when it was asked [*at, *done]. */
static double scrape_wait(uint16_t port, double *at, double *done)
{
    *at = now_s();
    reply_t r = request(port, NULL, "/metrics");
    *done = now_s();
    cr_assert_eq(r.status, 200, "%s", r.body);
    exposition_t e;
    parse(r.body, &e);
    free(r.body);
    return find(&e, "sluice_trainer_wait_seconds_total")->value;
}

/* A trainer blocked in sl_trainer_next (a worker that sends nothing)
 * shows the wait while it lasts: two scrapes during the call differ by at
 * least the time between them and neither exceeds the call's age; once
 * the call ended, the text is sl_trainer_stats' wait to the digit, and no
 * less than what the scrapes showed. */
Test(trainer_metrics, a_blocked_call_waits_on_the_metrics_while_it_waits)
{
    static fake_worker_t w;
    sl_trainer_t *t = silent_client(&w, "127.0.0.1:0");
    uint16_t port = sl_trainer_metrics_port(t);
    double a0, a1, b0, b1, c0, c1;
    cr_assert_eq(scrape_wait(port, &a0, &a1), 0);
    blocked_t c = {.t = t, .timeout_ms = (int)(tu_timeout(3) * 1000)};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, call_next, &c), 0);
    double deadline = now_s() + tu_timeout(10);
    while (atomic_load(&c.began) == 0) {
        cr_assert_lt(now_s(), deadline, "the call did not begin");
        usleep(1000);
    }
    double began = atomic_load(&c.began);
    usleep(200 * 1000);
    double v1 = scrape_wait(port, &a0, &a1);
    usleep(300 * 1000);
    double v2 = scrape_wait(port, &b0, &b1);
    cr_assert_eq(atomic_load(&c.ended), 0, "the call ended before the second scrape was answered");
    cr_assert_gt(v1, 0, "no wait while blocked: %.9f", v1);
    cr_assert_leq(v1, a1 - began, "%.9f s after a call of at most %.9f s", v1, a1 - began);
    cr_assert_leq(v2, b1 - began, "%.9f s after a call of at most %.9f s", v2, b1 - began);
    /* one call, one start: the wait rose as the clock did between them
     * (1 us of rounding in the text's seconds) */
    cr_assert_geq(v2 - v1 + 1e-6, b0 - a1, "rose %.9f s in %.9f s", v2 - v1, b0 - a1);
    pthread_join(th, NULL);
    cr_assert_eq(c.rc, SL_ERR_TIMEOUT);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    double v3 = scrape_wait(port, &c0, &c1);
    cr_assert_eq(v3, (double)st.wait_ns / 1e9, "%.9f, sl_trainer_stats %.9f", v3,
                 (double)st.wait_ns / 1e9);
    cr_assert_geq(v3, v2);
    cr_assert_geq((double)st.wait_ns / 1e9, c.timeout_ms / 1e3);
    cr_assert_leq((double)st.wait_ns / 1e9, atomic_load(&c.ended) - began);
    close_silent(&w, t);
}

/* sl_trainer_stats counts the call in progress as GET /metrics does: read
 * from another thread while sl_trainer_next blocks (a worker that sends
 * nothing), its wait is above 0, never more than the call's age, and rises
 * as the clock does between two reads; a scrape then shows no less (one
 * floor for both); once the call ended, the two agree to the nanosecond. */
Test(trainer_metrics, a_blocked_calls_wait_shows_in_sl_trainer_stats_while_it_waits)
{
    static fake_worker_t w;
    sl_trainer_t *t = silent_client(&w, "127.0.0.1:0");
    uint16_t port = sl_trainer_metrics_port(t);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.wait_ns, 0);
    blocked_t c = {.t = t, .timeout_ms = (int)(tu_timeout(3) * 1000)};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, call_next, &c), 0);
    double deadline = now_s() + tu_timeout(10);
    while (atomic_load(&c.began) == 0) {
        cr_assert_lt(now_s(), deadline, "the call did not begin");
        usleep(1000);
    }
    double began = atomic_load(&c.began);
    usleep(200 * 1000);
    sl_trainer_stats(t, &st);
    double a1 = now_s();
    uint64_t s1 = st.wait_ns;
    usleep(300 * 1000);
    double b0 = now_s();
    sl_trainer_stats(t, &st);
    double b1 = now_s();
    uint64_t s2 = st.wait_ns;
    double x0, x1;
    double v = scrape_wait(port, &x0, &x1);
    cr_assert_eq(atomic_load(&c.ended), 0, "the call ended before the scrape was answered");
    cr_assert_gt(s1, 0, "no wait in sl_trainer_stats while blocked");
    cr_assert_leq(s1 / 1e9, a1 - began, "%.9f s after a call of at most %.9f s", s1 / 1e9,
                  a1 - began);
    cr_assert_leq(s2 / 1e9, b1 - began, "%.9f s after a call of at most %.9f s", s2 / 1e9,
                  b1 - began);
    cr_assert_geq((s2 - s1) / 1e9, b0 - a1, "rose %.9f s in %.9f s", (s2 - s1) / 1e9, b0 - a1);
    /* the text rounds to the ns: 1 ns of slack for the double it is read into */
    cr_assert_geq(v + 1e-9, s2 / 1e9, "/metrics %.9f after sl_trainer_stats %.9f", v, s2 / 1e9);
    pthread_join(th, NULL);
    cr_assert_eq(c.rc, SL_ERR_TIMEOUT);
    sl_trainer_stats(t, &st);
    double v3 = scrape_wait(port, &x0, &x1);
    cr_assert_eq(v3, (double)st.wait_ns / 1e9, "%.9f, sl_trainer_stats %.9f", v3,
                 (double)st.wait_ns / 1e9);
    cr_assert_geq(st.wait_ns, s2);
    cr_assert_geq(v3, v);
    cr_assert_geq((double)st.wait_ns / 1e9, c.timeout_ms / 1e3);
    cr_assert_leq((double)st.wait_ns / 1e9, atomic_load(&c.ended) - began);
    close_silent(&w, t);
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Seconds until the server closes fd (reading and dropping whatever it
 * sends), at most limit. */
static double until_closed(int fd, double limit)
{
    double t0 = now_s();
    char buf[512];
    while (now_s() - t0 < limit) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) == 1 && recv(fd, buf, sizeof buf, 0) <= 0) return now_s() - t0;
    }
    return limit;
}

Test(trainer_metrics, slow_and_surplus_connections)
{
    static fake_worker_t w;
    sl_trainer_t *t = silent_client(&w, "127.0.0.1:0");
    uint16_t port = sl_trainer_metrics_port(t);
    /* A slowloris: half a request line, then nothing. */
    int slow = dial(port);
    cr_assert_eq(send(slow, "GET /metr", 9, MSG_NOSIGNAL), 9);
    double t0 = now_s();
    /* Scrapes are answered beside it at once. */
    for (int i = 0; i < 3; i++) {
        double q0 = now_s();
        reply_t r = request(port, NULL, "/metrics");
        cr_assert_eq(r.status, 200);
        cr_assert_lt(now_s() - q0, tu_timeout(2));
        free(r.body);
    }
    /* The timeout (10 s) closes it; never much before. */
    until_closed(slow, tu_timeout(30));
    double took = now_s() - t0;
    cr_assert_lt(took, tu_timeout(30), "the slow connection was never closed");
    cr_assert_geq(took, 8.0, "closed after %.1f s, before the timeout", took);
    close(slow);

    /* The cap: 16 connections at once. The 17th is served at once: the
     * one idle longest (held[0], the first accepted) is closed to make
     * room (httpd/server.h), the other 15 stay open. */
    int held[16];
    for (int i = 0; i < 16; i++)
        held[i] = dial(port);
    int extra = dial(port);
    const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    cr_assert_eq(send(extra, get, sizeof get - 1, MSG_NOSIGNAL), (ssize_t)(sizeof get - 1));
    struct pollfd p = {.fd = extra, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, wait_ms()), 1, "the connection over the cap was never served");
    char buf[64];
    ssize_t n = recv(extra, buf, sizeof buf - 1, 0);
    cr_assert_gt(n, 12);
    cr_assert_eq(strncmp(buf, "HTTP/1.1 200", 12), 0, "%.*s", (int)n, buf);
    struct pollfd h0 = {.fd = held[0], .events = POLLIN};
    cr_assert_eq(poll(&h0, 1, wait_ms()), 1, "the oldest idle connection was not closed");
    cr_assert_eq(recv(held[0], buf, sizeof buf, 0), 0);
    for (int i = 1; i < 16; i++) {
        struct pollfd h = {.fd = held[i], .events = POLLIN};
        cr_assert_eq(poll(&h, 1, 0), 0, "idle connection %d was closed too", i);
    }
    for (int i = 0; i < 16; i++)
        close(held[i]);
    close(extra);
    close_silent(&w, t);
}

/* ---- options ---- */

Test(trainer_metrics, off_by_default_env_and_bad_addresses)
{
    static fake_worker_t w;
    unsetenv("SLUICE_TRAINER_METRICS");
    sl_trainer_t *t = silent_client(&w, NULL);
    cr_assert_eq(sl_trainer_metrics_port(t), 0, "metrics served without being asked");
    close_silent(&w, t);
    cr_assert_eq(sl_trainer_metrics_port(NULL), 0);

    setenv("SLUICE_TRAINER_METRICS", "127.0.0.1:0", 1);
    t = silent_client(&w, NULL);
    uint16_t port = sl_trainer_metrics_port(t);
    cr_assert_gt(port, 0);
    reply_t r = request(port, NULL, "/metrics");
    cr_assert_eq(r.status, 200);
    free(r.body);
    close_silent(&w, t);
    t = silent_client(&w, ""); /* "" wins over the environment: off */
    cr_assert_eq(sl_trainer_metrics_port(t), 0);
    close_silent(&w, t);

    /* A bad address in the environment fails connect as the option would. */
    setenv("SLUICE_TRAINER_METRICS", "nowhere", 1);
    memset(&w, 0, sizeof w);
    w.mode = FW_SILENT;
    fw_start(&w);
    sl_error_t err = {0};
    cr_assert_null(connect_direct(&w, NULL, &err, SL_ERR_INVALID));
    cr_assert_str_eq(err.msg, "trainer metrics endpoint address 'nowhere': expected host:port");
    fw_join(&w);
    unsetenv("SLUICE_TRAINER_METRICS");

    /* The port is taken (by another client's endpoint). */
    static fake_worker_t w2;
    t = silent_client(&w2, "127.0.0.1:0");
    char taken[64];
    snprintf(taken, sizeof taken, "127.0.0.1:%u", sl_trainer_metrics_port(t));
    memset(&w, 0, sizeof w);
    w.mode = FW_SILENT;
    fw_start(&w);
    cr_assert_null(connect_direct(&w, taken, &err, SL_ERR_IO));
    char want[128];
    snprintf(want, sizeof want, "trainer metrics endpoint: cannot listen on %s", taken);
    cr_assert_str_eq(err.msg, want);
    fw_join(&w);
    cr_assert(w.got_goodbye, "the worker connection of the failed connect was not closed");
    close_silent(&w2, t);
}
