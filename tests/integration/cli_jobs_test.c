/* `sluice jobs` and `sluice submit` (src/cli/jobs.c, src/cli/http.c)
 * through the real binary against a real `sluice master`: list, show,
 * scale and delete with their exact output; a 404 and a 401 named by URL,
 * status and the master's message; a connection refused named by URL; the
 * admin endpoint over HTTPS (--tls-ca, and refused without it); a chunked
 * reply, directly and through $http_proxy (never for loopback); and the stop of `sluice read` on
 * SIGINT and SIGTERM: summary printed, resume token written, `sluice jobs resubmit` starting the
 * job again from it (each sample exactly once per epoch over both reads, two epochs), and a refused
 * token leaving the job as it was; resume tokens checked against what the master takes before
 * they are sent (the token that would pass the 8 MiB body limit named, and by how much; a body
 * exactly at the limit sent; more tokens than the master takes a usage error). */
#include <sys/resource.h>

#include "fleet_util.h"

TestSuite(cli_jobs, .init = fu_setup, .fini = fu_teardown);

#define ROWS 20000u
#define EPOCHS 2u

static char *out;

/* `sluice ARGS...` (NULL-terminated) with $SLUICE_ADMIN_TOKEN set to token
 * (NULL: unset); out gets stdout and stderr. @return the exit code. */
static int sluice_tok(const char *token, const char *arg, ...)
{
    const char *args[32];
    int n = 0;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a != NULL && n < 31; a = va_arg(ap, const char *))
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    free(out);
    return fu_run(args, "SLUICE_ADMIN_TOKEN", token, &out);
}

#define SLUICE(...) sluice_tok(FU_TOKEN, __VA_ARGS__, NULL)

Test(cli_jobs, list_show_scale_delete)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "j-1", ROWS, EPOCHS, 1, "dynamic", 1);
    char expect[1024];

    cr_assert_eq(SLUICE("jobs", "list", "--admin", m.admin), 0, "%s", out);
    snprintf(expect, sizeof expect,
             "ID                       STATE     EPOCH   SPLITS DONE   ROWS COMMITTED         "
             "   SAMPLES/S   ETA      WORKERS   CLIENTS RANKS\nj-1                      runnin"
             "g   1/2     0/20          0/20000                   0           -        0/1    "
             "   0       1 dynamic\n");
    cr_assert_str_eq(out, expect);

    /* --json: the master's answer as it came */
    cr_assert_eq(SLUICE("jobs", "list", "--json", "--admin", m.admin), 0, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(json_is_array(json_object_get(j, "jobs")), "%s", out);
    cr_assert_eq(json_array_size(json_object_get(j, "jobs")), 1);
    cr_assert_str_eq(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "jobs"), 0), "id")),
        "j-1");
    json_decref(j);

    /* a URL form of the address, with a trailing '/' */
    char url[128];
    snprintf(url, sizeof url, "http://%s/", m.admin);
    cr_assert_eq(SLUICE("jobs", "show", job, "--admin", url), 0, "%s", out);
    const char *head = "id                j-1\nepoch             0\nepochs            2\n";
    cr_assert(strncmp(out, head, strlen(head)) == 0, "%s", out);
    cr_assert(strstr(out, "\nnum_splits        20\n") != NULL, "%s", out);
    cr_assert(strstr(out, "\nfailure           null\n") != NULL, "%s", out);

    /* scale: clamped to the job's bounds (1..1) */
    cr_assert_eq(SLUICE("jobs", "scale", job, "--workers", "3", "--admin", m.admin), 0, "%s", out);
    cr_assert_str_eq(out, "job j-1: asked for 3 workers, set 1\n");
    cr_assert_eq(SLUICE("jobs", "scale", job, "--workers", "3", "--json", "--admin", m.admin), 0);
    cr_assert_str_eq(out, "{\"id\":\"j-1\",\"requested\":3,\"workers\":1}\n");

    /* 404 and 401, named by the URL, the status and the master's message */
    cr_assert_eq(SLUICE("jobs", "show", "nope", "--admin", m.admin), 1);
    snprintf(expect, sizeof expect,
             "sluice jobs show: GET http://%s/jobs/nope: HTTP 404: no job 'nope'\n", m.admin);
    cr_assert_str_eq(out, expect);
    cr_assert_eq(sluice_tok("wrong", "jobs", "delete", job, "--admin", m.admin, NULL), 1);
    snprintf(expect, sizeof expect,
             "sluice jobs delete: DELETE http://%s/jobs/j-1: HTTP 401: missing or wrong bearer "
             "token\n",
             m.admin);
    cr_assert_str_eq(out, expect);
    /* a token from a file, as `sluice submit` takes it; and none at all */
    cr_assert_eq(sluice_tok(NULL, "jobs", "scale", job, "--workers", "1", "--admin", m.admin, NULL),
                 1);
    snprintf(expect, sizeof expect,
             "sluice jobs scale: POST http://%s/jobs/j-1/scale: HTTP 401: missing or wrong bearer "
             "token\n",
             m.admin);
    cr_assert_str_eq(out, expect);
    cr_assert_eq(sluice_tok(NULL, "jobs", "scale", job, "--workers", "1", "--admin", m.admin,
                            "--token-file", m.token_file, NULL),
                 0, "%s", out);

    /* delete, then the list is empty and the job is gone */
    cr_assert_eq(SLUICE("jobs", "delete", job, "--admin", m.admin), 0, "%s", out);
    cr_assert_str_eq(out, "removed job j-1\n");
    cr_assert_eq(SLUICE("jobs", "list", "--admin", m.admin), 0, "%s", out);
    cr_assert_str_eq(
        out, "ID                       STATE     EPOCH   SPLITS DONE   ROWS COMMITTED         "
             "   SAMPLES/S   ETA      WORKERS   CLIENTS RANKS\n");
    cr_assert_eq(SLUICE("jobs", "delete", job, "--admin", m.admin), 1);
    snprintf(expect, sizeof expect,
             "sluice jobs delete: DELETE http://%s/jobs/j-1: HTTP 404: no job 'j-1'\n", m.admin);
    cr_assert_str_eq(out, expect);

    /* nothing listening: the URL and libcurl's reason */
    fu_master_stop(&m, SIGTERM);
    cr_assert_eq(SLUICE("jobs", "list", "--admin", m.admin), 1);
    snprintf(expect, sizeof expect, "sluice jobs list: GET http://%s/jobs: ", m.admin);
    cr_assert(strncmp(out, expect, strlen(expect)) == 0, "%s", out);
    cr_assert(strstr(out, "Couldn't connect to server") != NULL ||
                  strstr(out, "Connection refused") != NULL,
              "%s", out);
    free(job);
}

/* The master's admin endpoint over HTTPS: `sluice submit` and `sluice
 * jobs` verify it with --tls-ca; without the CA the certificate is
 * refused. */
Test(cli_jobs, https_with_tls_ca)
{
    char cert[300], key[300], table[300], spec_path[300], spec[1024];
    snprintf(cert, sizeof cert, "%s/admin.crt", fu_dir);
    snprintf(key, sizeof key, "%s/admin.key", fu_dir);
    tu_make_cert(cert, key, "127.0.0.1");
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    fu_master_t m = {0};
    snprintf(m.ctl, sizeof m.ctl, "127.0.0.1:%u", fu_free_port());
    snprintf(m.admin, sizeof m.admin, "127.0.0.1:%u", fu_free_port());
    snprintf(m.state, sizeof m.state, "%s/state", fu_dir);
    snprintf(m.log, sizeof m.log, "%s/master.log", fu_dir);
    snprintf(m.token_file, sizeof m.token_file, "%s/admin.token", fu_dir);
    fu_write(m.token_file, FU_TOKEN "\n");
    const char *bin = fu_binary();
    const char *argv[] = {
        bin,     "master",       "--listen",   m.ctl,        "--admin", m.admin,     "--state",
        m.state, "--token-file", m.token_file, "--tls-cert", cert,      "--tls-key", key,
        NULL};
    m.pid = fu_spawn(argv, -1, m.log);
    fu_master_pids[0] = m.pid;
    double deadline = fu_now() + tu_timeout(15);
    while (SLUICE("jobs", "list", "--admin", m.admin, "--tls-ca", cert, "--request-timeout-s",
                  "2") != 0) {
        cr_assert(fu_now() < deadline, "the HTTPS master did not answer: %s", out);
        usleep(50 * 1000);
    }
    snprintf(spec_path, sizeof spec_path, "%s/job.json", fu_dir);
    snprintf(spec, sizeof spec,
             "{\"id\":\"tls\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":250}}", table);
    fu_write(spec_path, spec);
    char url[128];
    snprintf(url, sizeof url, "https://%s", m.admin);
    cr_assert_eq(SLUICE("submit", "--job", spec_path, "--admin", url, "--tls-ca", cert), 0, "%s",
                 out);
    cr_assert(strncmp(out, "{\"id\":\"tls\",", 12) == 0, "%s", out);
    cr_assert_eq(SLUICE("jobs", "show", "tls", "--admin", m.admin, "--tls-ca", cert), 0, "%s", out);
    cr_assert(strncmp(out, "id                tls\n", 22) == 0, "%s", out);
    /* the system's CAs do not know a self-signed certificate */
    cr_assert_eq(SLUICE("jobs", "list", "--admin", url), 1);
    char expect[200];
    snprintf(expect, sizeof expect, "sluice jobs list: GET https://%s/jobs: ", m.admin);
    cr_assert(strncmp(out, expect, strlen(expect)) == 0, "%s", out);
    cr_assert(strstr(out, "certificate") != NULL, "%s", out);
    /* plain HTTP to it gets no HTTP answer */
    snprintf(url, sizeof url, "http://%s", m.admin);
    cr_assert_eq(SLUICE("jobs", "list", "--admin", url, "--request-timeout-s", "3"), 1);
    fu_master_stop(&m, SIGTERM);
}

/* ---- a reply in chunked transfer encoding, through a proxy ---- */

/* Answers every request (as the endpoint, or as a proxy: the same) with
 * GET /jobs's JSON in three chunks; keeps each request's first line. */
typedef struct chunked_server {
    int lfd;
    char addr[64];
    char first_line[2][256];
    pthread_t th;
} chunked_server_t;

static void *chunked_main(void *arg)
{
    chunked_server_t *s = arg;
    for (int k = 0; k < 2; k++) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) return NULL;
        char req[4096];
        size_t len = 0;
        req[0] = '\0';
        while (len < sizeof req - 1 && strstr(req, "\r\n\r\n") == NULL) {
            ssize_t n = recv(fd, req + len, sizeof req - 1 - len, 0);
            if (n <= 0) break;
            len += (size_t)n;
            req[len] = '\0';
        }
        snprintf(s->first_line[k], sizeof s->first_line[k], "%.*s", (int)strcspn(req, "\r"), req);
        const char *parts[] = {
            "{\"jobs\":[{",
            "\"id\":\"c\",\"state\":\"finished\",\"epoch\":2,\"epochs\":2,\"done\":5,\"num_",
            ("splits\":5,\"committed_rows\":10,\"total_rows\":10,\"workers\":0,"
             "\"granted_workers\":0,\"clients\":0,\"ranks\":2,\"sharding\":\"static\"}]}")};
        char reply[2048];
        int n = snprintf(reply, sizeof reply,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        for (int i = 0; i < 3; i++)
            n += snprintf(reply + n, sizeof reply - (size_t)n, "%zx\r\n%s\r\n", strlen(parts[i]),
                          parts[i]);
        n += snprintf(reply + n, sizeof reply - (size_t)n, "0\r\n\r\n");
        send(fd, reply, (size_t)n, MSG_NOSIGNAL);
        close(fd);
    }
    return NULL;
}

Test(cli_jobs, chunked_reply_and_a_proxy)
{
    chunked_server_t s = {0};
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(bind(s.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(s.lfd, 4), 0);
    socklen_t sl = sizeof sa;
    getsockname(s.lfd, (struct sockaddr *)&sa, &sl);
    snprintf(s.addr, sizeof s.addr, "127.0.0.1:%u", ntohs(sa.sin_port));
    pthread_create(&s.th, NULL, chunked_main, &s);
    const char *table =
        "ID                       STATE     EPOCH   SPLITS DONE   ROWS COMMITTED         "
        "   SAMPLES/S   ETA      WORKERS   CLIENTS RANKS\nc                        finish"
        "ed  2/2     5/5           10/10                     0           -        0/0    "
        "   0       2 static\n";
    /* as the endpoint itself, on loopback: no proxy even with one set */
    char proxy[100];
    snprintf(proxy, sizeof proxy, "http://%s", s.addr);
    setenv("http_proxy", "http://127.0.0.1:9", 1);
    cr_assert_eq(SLUICE("jobs", "list", "--admin", s.addr), 0, "%s", out);
    cr_assert_str_eq(out, table);
    /* a name elsewhere goes through $http_proxy: the request in absolute
     * form, the reply as it came back */
    setenv("http_proxy", proxy, 1);
    int rc = SLUICE("jobs", "list", "--admin", "master.example:7071");
    unsetenv("http_proxy");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_str_eq(out, table);
    pthread_join(s.th, NULL);
    close(s.lfd);
    cr_assert_str_eq(s.first_line[0], "GET /jobs HTTP/1.1");
    cr_assert_str_eq(s.first_line[1], "GET http://master.example:7071/jobs HTTP/1.1");
}

/* ---- sluice read stopped by a signal ---- */

/* GET /jobs/{id} "batches": committed so far. */
static long long job_int(const fu_master_t *m, const char *job, const char *key)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    long long v = (long long)json_integer_value(json_object_get(j, key));
    json_decref(j);
    return v;
}

/* A job of one worker on a fresh master, and a reader of it stopped by a
 * signal mid-epoch (after the master committed batches for it). */
typedef struct stopped_read {
    fu_master_t m;
    char *job;
    atomic_uint *seen; /* [EPOCHS * ROWS] */
    char token[300], log[300];
    fu_reader_t r;
    int code; /* the reader's exit code */
} stopped_read_t;

static void read_until_signal(stopped_read_t *t, const char *id, int sig)
{
    t->m = (fu_master_t){.lease_timeout_ms = 1000};
    t->job = fu_job_up(&t->m, id, ROWS, EPOCHS, 1, "dynamic", 1);
    sl_master_executor_t *ex = fu_executor(&t->m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, t->job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    t->seen = calloc(EPOCHS * ROWS, sizeof *t->seen);
    snprintf(t->token, sizeof t->token, "%s/read.token", fu_dir);
    snprintf(t->log, sizeof t->log, "%s/read.log", fu_dir);
    /* its stdout a 1 MiB pipe not read until the signal is sent: it
     * blocks on its first batches' lines, mid-epoch */
    const char *extra[] = {"--prefetch", "2", "--token-out", t->token, NULL};
    fu_reader_spawn(&t->r, &t->m, t->job, ROWS, EPOCHS, t->seen, t->log, extra, 1 << 20);
    double deadline = fu_now() + tu_timeout(20);
    while (job_int(&t->m, t->job, "batches") < 2) {
        cr_assert(fu_now() < deadline, "the reader committed nothing; see %s", t->log);
        usleep(20 * 1000);
    }
    usleep(200 * 1000); /* it is blocked on the pipe by now */
    cr_assert_eq(kill(t->r.pid, sig), 0);
    pthread_create(&t->r.th, NULL, fu_reader_main, &t->r);
    int ws = fu_reader_join(&t->r, 20);
    t->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

Test(cli_jobs, read_sigint_writes_the_token_and_resubmit_delivers_the_rest)
{
    stopped_read_t t;
    read_until_signal(&t, "sig", SIGINT);
    fu_master_t m = t.m;
    const char *job = t.job;
    cr_assert_eq(t.code, 130, "sluice read after SIGINT; see %s", t.log);
    uint64_t first = atomic_load(&t.r.batches);
    cr_assert_gt(first, 0);
    cr_assert_lt(first * 250, ROWS, "stopped mid-epoch");
    /* the summary (on stderr with --json) and the token */
    char *text = tu_read_file(t.log);
    char expect[200];
    snprintf(expect, sizeof expect,
             "sluice read: stopped by SIGINT after %llu batches; writing the resume token\n"
             "batches %llu  samples %llu  bytes ",
             (unsigned long long)first, (unsigned long long)first, (unsigned long long)first * 250);
    cr_assert(strstr(text, expect) != NULL, "expected\n%s\nin\n%s", expect, text);
    cr_assert(strstr(text, "\ncommitted ") != NULL && strstr(text, "dropped (not committed) 0\n"),
              "%s", text);
    free(text);
    char *tok = tu_read_file(t.token);
    cr_assert_eq(memcmp(tok, "SLRT", 4), 0, "a resume token starts with its magic");
    free(tok);

    /* started again from the token, in one command; the rest is read */
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", t.token, "--admin", m.admin), 0, "%s",
                 out);
    cr_assert(strncmp(out, "id                sig\n", 22) == 0, "%s", out);
    cr_assert_eq(job_int(&m, job, "committed_rows"), (long long)first * 250,
                 "the job starts with what the reader delivered");
    fu_reader_t b;
    char log[300];
    snprintf(log, sizeof log, "%s/read2.log", fu_dir);
    fu_reader_start(&b, &m, job, ROWS, EPOCHS, t.seen, log);
    int ws = fu_reader_join(&b, 60);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the second reader: %d; see %s", ws, log);
    fu_assert_once_per_epoch(t.seen, ROWS, EPOCHS);
    free(t.seen);
    free(t.job);
}

Test(cli_jobs, read_sigterm_and_a_refused_token_leaves_the_job)
{
    stopped_read_t t;
    read_until_signal(&t, "term", SIGTERM);
    fu_master_t m = t.m;
    const char *job = t.job, *token = t.token;
    cr_assert_eq(t.code, 143, "sluice read after SIGTERM; see %s", t.log);
    char *text = tu_read_file(t.log);
    cr_assert(strstr(text, "sluice read: stopped by SIGTERM after ") != NULL, "%s", text);
    cr_assert(strstr(text, "\ntrainer wait: total ") != NULL, "%s", text);
    free(text);

    /* a damaged token is refused, naming it, and the job stays as it was */
    long long committed = job_int(&m, job, "committed_rows");
    cr_assert_gt(committed, 0);
    char *tok = tu_read_file(token);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.token", fu_dir);
    tu_write_file(bad, tok, 20); /* cut short */
    free(tok);
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", bad, "--admin", m.admin), 1);
    char expect[300];
    snprintf(expect, sizeof expect,
             "sluice jobs resubmit: POST http://%s/jobs/term/resubmit: HTTP 400: resume_token: "
             "resume token: checksum mismatch\n",
             m.admin);
    cr_assert_str_eq(out, expect);
    cr_assert_eq(job_int(&m, job, "committed_rows"), committed);
    cr_assert_eq(SLUICE("jobs", "resubmit", "other", "--token", token, "--admin", m.admin), 1);
    snprintf(expect, sizeof expect,
             "sluice jobs resubmit: POST http://%s/jobs/other/resubmit: HTTP 404: no job 'other'\n",
             m.admin);
    cr_assert_str_eq(out, expect);
    /* the route itself: the token, and only the token keys */
    char *b;
    cr_assert_eq(fu_http(m.admin, "POST", "/jobs/term/resubmit", NULL, "{}", &b), 401, "%s", b);
    free(b);
    cr_assert_eq(fu_http(m.admin, "POST", "/jobs/term/resubmit", FU_TOKEN, "{\"spec\":{}}", &b),
                 400);
    cr_assert_str_eq(b, "{\"error\":\"$.spec: unknown key (\\\"resume_token\\\" or "
                        "\\\"resume_tokens\\\")\"}");
    free(b);
    cr_assert_eq(fu_http(m.admin, "POST", "/jobs/term/resubmit", FU_TOKEN, "{}", &b), 400);
    cr_assert(strstr(b, "give \\\"resume_token\\\" (base64) or") != NULL, "%s", b);
    free(b);
    cr_assert_eq(job_int(&m, job, "committed_rows"), committed);
    /* the token of one rank twice: not a checkpoint (one token per rank),
     * refused naming why; the job stays */
    cr_assert_eq(
        SLUICE("jobs", "resubmit", job, "--token", token, "--token", token, "--admin", m.admin), 1);
    snprintf(expect, sizeof expect,
             "sluice jobs resubmit: POST http://%s/jobs/term/resubmit: HTTP 400: token 2 of 2: "
             "rank 0 of 1 appears twice\n",
             m.admin);
    cr_assert_str_eq(out, expect);
    cr_assert_eq(job_int(&m, job, "committed_rows"), committed);
    /* the token alone: the job starts with what the reader handed out */
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", token, "--json", "--admin", m.admin), 0,
                 "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(j, "committed_rows")),
                 (json_int_t)atomic_load(&t.r.samples));
    json_decref(j);
    free(t.seen);
    free(t.job);
}

/* A reader waiting for a job without workers: a progress line a second
 * with --progress (stderr not a terminal), and SIGINT stops it in its wait
 * with the summary and a token that resubmits the job as it was. */
Test(cli_jobs, read_progress_and_sigint_while_waiting)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "idle", ROWS, EPOCHS, 1, "dynamic", 1);
    char token[300], log[300];
    snprintf(token, sizeof token, "%s/idle.token", fu_dir);
    snprintf(log, sizeof log, "%s/idle.log", fu_dir);
    const char *bin = fu_binary();
    const char *argv[] = {bin, "read",       "--master",    m.ctl, "--job",
                          job, "--progress", "--token-out", token, NULL};
    pid_t pid = fu_spawn(argv, -1, log);
    /* a line a second from the first second on: 2 or 3 by 2.5 s (3 or 4
     * when the machine is slow to start it, never one per slice) */
    usleep(2500 * 1000);
    cr_assert_eq(kill(pid, SIGINT), 0);
    int ws = fu_wait_exit(pid, 20);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 130, "status %d; see %s", ws, log);
    char *text = tu_read_file(log);
    const char *line = "read: 0 batches  0 samples  0 samples/s  0.0 MB/s  committed 0  dropped 0  "
                       "workers 0\n";
    int lines = 0;
    for (const char *p = text; (p = strstr(p, line)) != NULL; p += strlen(line))
        lines++;
    cr_assert(lines >= 1 && lines <= 4, "%d progress lines in\n%s", lines, text);
    cr_assert(strstr(text, "sluice read: stopped by SIGINT after 0 batches; writing the resume "
                           "token\nbatches 0  samples 0  bytes ") != NULL,
              "%s", text);
    cr_assert(strstr(text, "committed 0  dropped (not committed) 0\n") != NULL, "%s", text);
    free(text);
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", token, "--admin", m.admin), 0, "%s",
                 out);
    cr_assert_eq(job_int(&m, job, "committed_rows"), 0);
    cr_assert_eq(job_int(&m, job, "pending"), 20);
    free(job);
}

/* ---- resume tokens against what the master takes (src/dpp/master/state/admin_limits.h) ---- */

/* fu_dir/name: n bytes of 'x' (not a token: the master refuses it with
 * 400 once the body is in). */
static const char *token_file(const char *name, size_t n, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", fu_dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    for (size_t k = 0; k < n; k++)
        fputc('x', f);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* A spec whose compact JSON is a known 50 bytes, so the body sizes below
 * are exact: {"spec":SPEC,"ranks":1,"sharding":"dynamic","min_workers":1,
 * "max_workers":1} is 120 bytes. */
static const char *spec_file(char *path, size_t cap)
{
    snprintf(path, cap, "%s/big.json", fu_dir);
    fu_write(path, "{\"id\": \"big\", \"source\": {\"table\": \"/nonexistent/t\"}}");
    return path;
}

Test(cli_jobs, a_resume_token_past_the_masters_body_limit_is_named_before_sending)
{
    fu_master_t m = {0};
    fu_master_start(&m);
    char spec[300], tok[300], expect[1024];
    spec_file(spec, sizeof spec);

    /* 120 + 18 (,"resume_token":"") + 8388468 (6291351 bytes in base64) =
     * 8388606 bytes: sent, and the master judges the body (its table) */
    token_file("fits.token", 6291351, tok, sizeof tok);
    cr_assert_eq(SLUICE("submit", "--job", spec, "--resume-token", tok, "--admin", m.admin), 1,
                 "%s", out);
    snprintf(expect, sizeof expect, "sluice submit: POST http://%s/jobs: HTTP 400: ", m.admin);
    cr_assert(strncmp(out, expect, strlen(expect)) == 0, "%s", out);
    cr_assert(strstr(out, "/nonexistent/t") != NULL, "%s", out);

    /* one byte more is four more in base64: 2 over the limit */
    token_file("big.token", 6291352, tok, sizeof tok);
    cr_assert_eq(SLUICE("submit", "--job", spec, "--resume-token", tok, "--admin", m.admin), 1,
                 "%s", out);
    snprintf(expect, sizeof expect,
             "sluice submit: resume token %s (6291352 bytes, 8388472 as base64) makes the "
             "request body 8388610 bytes, 2 over the master's limit of 8388608\n",
             tok);
    cr_assert_str_eq(out, expect);

    /* far larger: refused from its size, not read */
    token_file("huge.token", 10u << 20, tok, sizeof tok);
    cr_assert_eq(SLUICE("submit", "--job", spec, "--resume-token", tok, "--admin", m.admin), 1,
                 "%s", out);
    snprintf(expect, sizeof expect,
             "sluice submit: resume token %s (10485760 bytes, 13981016 as base64) makes the "
             "request body 13981154 bytes, 5592546 over the master's limit of 8388608\n",
             tok);
    cr_assert_str_eq(out, expect);
    fu_master_stop(&m, SIGTERM);
}

Test(cli_jobs, resubmit_names_the_resume_token_that_passes_the_limit)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "j", 2000, 1, 3, "dynamic", 1);
    char a[300], b[300], c[300], expect[1024];
    token_file("r0.token", 3, a, sizeof a);
    token_file("r2.token", 3, c, sizeof c);

    /* {"resume_tokens":[ "xxxx" , "B" , "xxxx" ]}: 20 + 6 + 1 + 8388574 +
     * 1 + 6 = 8388608 bytes, exactly the limit: sent, and the master
     * judges the tokens */
    token_file("r1.token", 6291429, b, sizeof b);
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", a, "--token", b, "--token", c,
                        "--admin", m.admin),
                 1, "%s", out);
    snprintf(
        expect, sizeof expect,
        "sluice jobs resubmit: POST http://%s/jobs/j/resubmit: HTTP 400: resume_tokens: ", m.admin);
    cr_assert(strncmp(out, expect, strlen(expect)) == 0, "%s", out);

    /* one byte more in the middle one: it still fits, the last does not */
    token_file("r1.token", 6291430, b, sizeof b);
    cr_assert_eq(SLUICE("jobs", "resubmit", job, "--token", a, "--token", b, "--token", c,
                        "--admin", m.admin),
                 1, "%s", out);
    snprintf(expect, sizeof expect,
             "sluice jobs resubmit: resume token %s (3 bytes, 4 as base64) makes the request "
             "body 8388612 bytes, 4 over the master's limit of 8388608\n",
             c);
    cr_assert_str_eq(out, expect);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* 65,537 tokens: more than the master takes, a usage error before any is
 * read. The arguments (~1.7 MB) are short relative paths (run from
 * fu_dir), under a raised stack limit so the kernel's argument space
 * (a quarter of it) holds them. */
Test(cli_jobs, more_resume_tokens_than_the_master_takes_is_a_usage_error)
{
    enum { N = 65537 };
    char spec[300], path[300];
    spec_file(spec, sizeof spec);
    token_file("t", 3, path, sizeof path);
    token_file("u", 3, path, sizeof path);
    cr_assert_eq(chdir(fu_dir), 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (64u << 20)) {
        rl.rlim_cur =
            rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (64u << 20) ? (64u << 20) : rl.rlim_max;
        setrlimit(RLIMIT_STACK, &rl);
    }
    const char **args = calloc(N + 6, sizeof *args);
    cr_assert_not_null(args);
    int n = 0;
    args[n++] = "submit";
    args[n++] = "--job";
    args[n++] = spec;
    args[n++] = "--admin";
    args[n++] = "127.0.0.1:1";
    for (int k = 0; k < N; k++)
        args[n++] = k + 1 < N ? "--resume-token=t" : "--resume-token=u";
    args[n] = NULL;
    free(out);
    cr_assert_eq(fu_run(args, "SLUICE_ADMIN_TOKEN", FU_TOKEN, &out), 2, "%s", out);
    free(args);
    cr_assert_str_eq(out, "sluice submit: 65537 resume tokens, 1 more than the master takes "
                          "(65536, one per trainer rank); the first extra one: u\n"
                          "(see `sluice submit --help`)\n");
}

/* The master's two ports mixed up: an HTTP client at the control port gets
 * an HTTP answer saying which port it reached; a worker or a trainer at
 * the admin port stops with a message naming the admin endpoint instead of
 * timing out again and again. */
Test(cli_jobs, the_control_and_admin_ports_mixed_up_are_named)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "ports", ROWS, 1, 1, "dynamic", 1);
    char expect[512];

    cr_assert_eq(SLUICE("jobs", "list", "--admin", m.ctl), 1, "%s", out);
    snprintf(expect, sizeof expect,
             "sluice jobs list: GET http://%s/jobs: HTTP 400: this is a sluice master's control "
             "port (the binary protocol of workers and trainer clients), not its admin endpoint",
             m.ctl);
    cr_assert(strncmp(out, expect, strlen(expect)) == 0, "%s", out);

    cr_assert_neq(SLUICE("read", "--master", m.admin, "--job", job), 0, "%s", out);
    snprintf(expect, sizeof expect,
             "master %s: it answers HTTP: that is an admin endpoint, not the master's control "
             "port (use the address given to sluice master --listen)",
             m.admin);
    cr_assert(strstr(out, expect) != NULL, "%s", out);

    cr_assert_neq(SLUICE("worker", "--master", m.admin, "--listen", "127.0.0.1:0"), 0, "%s", out);
    cr_assert(strstr(out, expect) != NULL, "%s", out);

    /* A frame whose bytes hold a line end (here the length byte 10 of a
     * 10-character worker id or job id; by chance a varint byte of the
     * random incarnation) is dropped by the HTTP server at once, without an
     * answer rather than after a timeout: named all the same. */
    cr_assert_neq(SLUICE("worker", "--master", m.admin, "--listen", "127.0.0.1:0", "--worker-id",
                         "w-10-chars"),
                  0, "%s", out);
    cr_assert(strstr(out, expect) != NULL, "%s", out);
    cr_assert_neq(SLUICE("read", "--master", m.admin, "--job", "j-10-chars"), 0, "%s", out);
    cr_assert(strstr(out, expect) != NULL, "%s", out);
    free(job);
}
