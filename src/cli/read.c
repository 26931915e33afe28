/* `sluice read`: a trainer without the training. Pulls batches from a DPP
 * worker, or from a job's workers through the DPP master (--master --job:
 * each batch committed there first, exactly once), through the trainer
 * client library (include/sluice/trainer.h) until the job ends, --limit,
 * or SIGINT / SIGTERM, then prints what it received and how long it waited
 * (and writes --token-out); --json prints every batch as one JSON line, for
 * inspection and for tests. Exit codes: 0 the job ended (or the limit was
 * reached), 1 the client failed (the message says why), 2 usage error,
 * 130 / 143 stopped by SIGINT / SIGTERM (summary and token written). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common/clock.h"
#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "sluice/trainer.h"

typedef struct read_args {
    const char *worker, *master, *job, *token_out, *secret_file, *metrics;
    uint64_t rank, world_size, prefetch, limit, timeout, reconnect_ms, token_step;
    bool ids, json, quiet, progress;
} read_args_t;

#define R(field) offsetof(read_args_t, field)

/* Options are defined once, here (options.h): parsing, --help and the
 * docs' table come from this table. */
static const sl_cli_opt_t ropts[] = {
    {"worker", SL_CLI_ADDR, "HOST:PORT", NULL, NULL, 0, 0, 0, R(worker),
     "the worker's trainer address"},
    {"master", SL_CLI_ADDR, "HOST:PORT", NULL, NULL, 0, 0, 0, R(master),
     "the DPP master's control address (instead of --worker)"},
    {"job", SL_CLI_STRING, "ID", NULL, NULL, 0, 0, 0, R(job), "the job to read (with --master)"},
    {"rank", SL_CLI_UINT, "N", "0", NULL, 0, UINT32_MAX - 1, 0, R(rank),
     "this trainer's rank, below --world-size"},
    {"world-size", SL_CLI_UINT, "N", "1", NULL, 1, UINT32_MAX, 0, R(world_size),
     "number of trainer ranks"},
    {"token-out", SL_CLI_PATH, "FILE", NULL, NULL, 0, 0, 0, R(token_out),
     "at the end (job end, --limit, SIGINT or SIGTERM), write a resume token for this batch "
     "boundary to FILE (with --master; `sluice jobs resubmit` starts the job again from it)"},
    {"token-step", SL_CLI_UINT, "N", NULL, "none", 0, 1ull << 62, 0, R(token_step),
     "label the --token-out token with the trainer's checkpoint step N; a resume refuses "
     "tokens whose steps differ"},
    {"ids", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, R(ids),
     "print each batch's sample ids as one line on stdout"},
    {"prefetch", SL_CLI_UINT, "N", "4", NULL, 1, 1u << 16, 0, R(prefetch),
     "batches kept ready by the client"},
    {"limit", SL_CLI_UINT, "N", NULL, "until the job ends", 1, UINT64_MAX, 0, R(limit),
     "stop after N batches"},
    {"timeout", SL_CLI_UINT, "MS", NULL, "wait", 1, 1u << 30, 0, R(timeout),
     "give up when no batch arrives for MS ms"},
    {"reconnect-ms", SL_CLI_UINT, "MS", "30000", NULL, 0, 1u << 30, 0, R(reconnect_ms),
     "retry a lost worker this long (0: never)"},
    {"cluster-secret-file", SL_CLI_PATH, "FILE", NULL, "`$SLUICE_CLUSTER_SECRET_FILE`, if set", 0,
     0, 0, R(secret_file),
     "the cluster secret the workers and master require (the first line of FILE)"},
    {"metrics", SL_CLI_ADDR, "HOST:PORT", NULL, "`$SLUICE_TRAINER_METRICS`, if set", 0, 0, 0,
     R(metrics),
     "serve the client's own Prometheus metrics (GET /metrics, docs/TRAINER.md) on HOST:PORT while "
     "reading (port 0: any free port, printed on stderr)"},
    {"json", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, R(json),
     "print each batch as one JSON line on stdout (the summary then goes to stderr)"},
    {"progress", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, R(progress),
     "a progress line on stderr (batches, samples, rate; committed with --master) every second "
     "even when stderr is not a terminal (on a terminal: always, redrawn 4 times a second)"},
    {"quiet", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, R(quiet), "no summary, no progress"},
};

static const sl_cli_group_t read_group = SL_CLI_OWN_GROUP(ropts);

const sl_cli_cmd_t sl_cli_read_cmd = {
    .name = "read",
    .summary = "receive batches from a DPP worker as a trainer would",
    .synopsis = "sluice read --worker HOST:PORT [options]\n"
                "sluice read --master HOST:PORT --job ID [options]",
    .about = "Receive batches from a DPP worker (or from every worker of a job, through the DPP "
             "master) as a trainer would, until the job ends (or --limit, SIGINT, SIGTERM), "
             "then print batches, samples, bytes, throughput and the time spent waiting. With "
             "--master also `committed N`: batches the master committed for this reader (each "
             "sample of a job is committed once, to one reader), and `dropped (not committed) "
             "N`: batches that arrived but were not handed out, because the master refused "
             "their commit (another copy of the rows was committed first, after a worker's "
             "lease moved, or the epoch had moved on) or they were for another rank; the "
             "worker re-sends what no reader committed, so dropped batches are not lost. "
             "SIGINT or SIGTERM stops it at a batch boundary: the summary is printed and "
             "--token-out written (a second signal kills it).",
    .groups = {{&read_group, 0}},
};

static int usage_error(const char *fmt, const char *arg)
{
    return sl_cli_usage_error("read", fmt, arg);
}

/* ---- JSON ---- */

static json_t *int32_array(const int32_t *v, uint64_t n)
{
    json_t *a = json_array();
    for (uint64_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *int64_array(const int64_t *v, uint64_t n)
{
    json_t *a = json_array();
    for (uint64_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *float_array(const float *v, uint64_t n)
{
    json_t *a = json_array();
    for (uint64_t i = 0; i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

/* keys, lengths (key-major), values, weights when weighted, stride. */
static void kjt_fields(json_t *o, const sl_kjt_t *k)
{
    json_t *keys = json_array();
    for (uint32_t i = 0; i < k->num_keys; i++)
        json_array_append_new(keys, json_string(k->keys[i]));
    json_object_set_new(o, "keys", keys);
    json_object_set_new(o, "stride", json_integer(k->stride));
    json_object_set_new(o, "lengths", int32_array(k->lengths, (uint64_t)k->num_keys * k->stride));
    json_object_set_new(o, "values", int64_array(k->values, k->num_values));
    if (k->weights) json_object_set_new(o, "weights", float_array(k->weights, k->num_values));
}

static json_t *dense_json(const sl_dense_t *d)
{
    json_t *o = json_object();
    json_t *names = json_array();
    for (uint32_t c = 0; c < d->cols; c++)
        json_array_append_new(names, d->names ? json_string(d->names[c]) : json_null());
    json_object_set_new(o, "names", names);
    json_object_set_new(o, "rows", json_integer(d->rows));
    json_object_set_new(o, "cols", json_integer(d->cols));
    json_object_set_new(o, "data", float_array(d->data, (uint64_t)d->rows * d->cols));
    return o;
}

static int print_json(const sl_batch_t *b, uint64_t index)
{
    json_t *o = json_object();
    json_object_set_new(o, "batch", json_integer((json_int_t)index));
    json_object_set_new(o, "batch_size", json_integer(b->batch_size));
    json_t *origin = json_object();
    json_object_set_new(origin, "job_id", json_integer((json_int_t)b->origin.job_id));
    json_object_set_new(origin, "epoch", json_integer(b->origin.epoch));
    json_object_set_new(origin, "split_id", json_integer((json_int_t)b->origin.split_id));
    json_object_set_new(origin, "first_row", json_integer((json_int_t)b->origin.first_row));
    json_object_set_new(origin, "sequence", json_integer((json_int_t)b->origin.sequence));
    json_object_set_new(o, "origin", origin);
    json_object_set_new(o, "sample_ids",
                        b->sample_ids ? int64_array(b->sample_ids, b->batch_size) : json_null());
    json_t *sparse = json_object();
    kjt_fields(sparse, &b->sparse);
    json_object_set_new(o, "sparse", sparse);
    json_t *groups = json_array();
    for (uint32_t g = 0; g < b->num_groups; g++) {
        const sl_ikjt_t *ik = &b->groups[g];
        json_t *go = json_object();
        json_object_set_new(go, "name", json_string(ik->name ? ik->name : ""));
        kjt_fields(go, &ik->unique);
        json_object_set_new(go, "inverse_indices", int32_array(ik->inverse, ik->batch_size));
        json_array_append_new(groups, go);
    }
    json_object_set_new(o, "groups", groups);
    json_object_set_new(o, "dense", dense_json(&b->dense));
    json_object_set_new(o, "labels", dense_json(&b->labels));
    /* Non-finite floats are not JSON: they come out as an error, not a lie. */
    char *s = sl_admin_json_text(NULL, o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) {
        fprintf(stderr, "sluice read: batch %" PRIu64 " cannot be printed as JSON\n", index);
        return 1;
    }
    puts(s);
    sl_strfree(NULL, s);
    return 0;
}

static void print_ids(const sl_batch_t *b)
{
    if (!b->sample_ids) {
        puts("-");
        return;
    }
    for (uint32_t r = 0; r < b->batch_size; r++)
        printf(r ? " %" PRId64 : "%" PRId64, b->sample_ids[r]);
    putchar('\n');
}

/* The resume token for this batch boundary, written whole or not at all
 * (a temporary file renamed into place). @return 0 or 1 (message printed). */
static int write_token(sl_trainer_t *t, const char *path, uint64_t step)
{
    uint8_t *tok = NULL;
    size_t len = 0;
    sl_error_t err = {0};
    sl_err_t rc0 = step == UINT64_MAX
                       ? sl_trainer_resume_token(t, 30000, &tok, &len, &err)
                       : sl_trainer_resume_token_at(t, (int64_t)step, 30000, &tok, &len, &err);
    if (rc0 != SL_OK) {
        fprintf(stderr, "sluice read: resume token: %s\n", err.msg);
        return 1;
    }
    char tmp[4096];
    int rc = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        fprintf(stderr, "sluice read: --token-out path too long\n");
        rc = 1;
    } else {
        FILE *f = fopen(tmp, "wb");
        bool ok = f && fwrite(tok, 1, len, f) == len;
        if (f && fclose(f) != 0) ok = false;
        if (!ok || rename(tmp, path) != 0) {
            fprintf(stderr, "sluice read: writing the resume token to %s failed: %s\n", path,
                    strerror(errno));
            remove(tmp);
            rc = 1;
        }
    }
    sl_trainer_token_free(t, tok, len);
    return rc;
}

/* ---- stopping and progress ---- */

/* The signal that asked us to stop (0: none). The handler only stores it:
 * the loop below waits in slices and looks at it between them, so the
 * client is closed, the token written and the summary printed on the main
 * thread as at the job's end. SA_RESETHAND: a second signal kills;
 * SA_RESTART: a write of a batch's line to a full pipe goes on. */
static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig)
{
    g_stop_signal = sig;
}

static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESETHAND | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* How long one sl_trainer_next waits before the loop looks at the signal
 * flag and the progress line again. */
#define SLICE_MS 100

typedef struct progress {
    bool on, tty, master;
    double start, next; /* when the next line is due */
    int width;          /* of the redrawn line (tty) */
} progress_t;

static void progress_show(progress_t *p, sl_trainer_t *t, double now)
{
    if (!p->on || now < p->next) return;
    p->next = now + (p->tty ? 0.25 : 1.0);
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    double secs = now - p->start > 1e-9 ? now - p->start : 1e-9;
    char line[256];
    int n = snprintf(line, sizeof line,
                     "read: %" PRIu64 " batches  %" PRIu64 " samples  %.0f samples/s  %.1f MB/s",
                     s.batches, s.samples, (double)s.samples / secs, (double)s.bytes / 1e6 / secs);
    if (p->master && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n,
                 "  committed %" PRIu64 "  dropped %" PRIu64 "  workers %u", s.committed, s.dropped,
                 s.workers);
    if (p->tty) {
        int len = (int)strlen(line);
        fprintf(stderr, "\r%s%*s", line, p->width > len ? p->width - len : 0, "");
        p->width = len;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

/* Clear the redrawn line so the summary starts on a clean one. */
static void progress_finish(progress_t *p)
{
    if (p->on && p->tty && p->width > 0) fprintf(stderr, "\r%*s\r", p->width, "");
    p->width = 0;
}

/* ---- the command ---- */

int sl_cli_read(int argc, char **argv)
{
    read_args_t args = {.token_step = UINT64_MAX}; /* UINT64_MAX: no --token-step */
    sl_cli_parsed_t parsed;
    if (!sl_cli_parse(&sl_cli_read_cmd, argc, argv, &args, &parsed)) return parsed.code;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = args.worker;
    o.master = args.master;
    o.job_id = args.job;
    o.rank = (uint32_t)args.rank;
    o.world_size = (uint32_t)args.world_size;
    o.prefetch = (uint32_t)args.prefetch;
    o.reconnect_ms = args.reconnect_ms == 0 ? -1 : (int)args.reconnect_ms;
    o.cluster_secret_file = args.secret_file;
    o.metrics_address = args.metrics;
    /* it only reads (counts, prints): no written pages to look for at each
     * release (sl_trainer_opts_t.shm_read_only) */
    o.shm_read_only = true;
    uint64_t limit = args.limit; /* 0: until the job ends */
    int timeout_ms = args.timeout == 0 ? -1 : (int)args.timeout;
    bool json = args.json, quiet = args.quiet, ids = args.ids;
    const char *token_out = args.token_out;
    if (o.address && o.master) return usage_error("%s", "give --worker or --master, not both");
    if (!o.address && !o.master)
        return usage_error("%s", "--worker HOST:PORT or --master HOST:PORT is required");
    if (o.master && !o.job_id) return usage_error("%s", "--master needs --job ID");
    if (!o.master && (o.job_id || token_out))
        return usage_error("%s", "--job and --token-out need --master");
    if (args.token_step != UINT64_MAX && !token_out)
        return usage_error("%s", "--token-step labels the --token-out token: give both");
    if (o.rank >= o.world_size) return usage_error("%s", "--rank must be below --world-size");

    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    double start = sl_clock_s();
    /* The client's threads start with SIGINT and SIGTERM blocked (they
     * inherit the mask), so the signals reach this thread only and never
     * interrupt a system call of theirs. */
    sigset_t stops, old;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stops, &old);
    catch_stop_signals();
    sl_err_t crc = sl_trainer_connect(&o, &t, &err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (crc != SL_OK) {
        fprintf(stderr, "sluice read: %s\n", err.msg);
        return 1;
    }
    if (sl_trainer_metrics_port(t) != 0 && !quiet)
        fprintf(stderr, "sluice read: metrics on port %u (GET /metrics)\n",
                (unsigned)sl_trainer_metrics_port(t));
    bool tty = isatty(STDERR_FILENO) == 1;
    progress_t prog = {.on = !quiet && (tty || args.progress),
                       .tty = tty,
                       .master = o.master != NULL,
                       .start = start,
                       .next = start + 1.0}; /* short reads show none */
    int rc = 0;
    uint64_t n = 0;
    int waited_ms = 0; /* since the last batch */
    while ((limit == 0 || n < limit) && g_stop_signal == 0) {
        sl_batch_t *b = NULL;
        int slice = timeout_ms >= 0 && timeout_ms - waited_ms < SLICE_MS ? timeout_ms - waited_ms
                                                                         : SLICE_MS;
        sl_err_t e = sl_trainer_next(t, slice, &b, &err);
        progress_show(&prog, t, sl_clock_s());
        if (e == SL_ERR_TIMEOUT && (timeout_ms < 0 || (waited_ms += slice) < timeout_ms)) continue;
        if (e == SL_ERR_CLOSED) break;
        if (e != SL_OK) {
            /* the last slice's message names the slice: name the whole wait */
            if (e == SL_ERR_TIMEOUT) sl_trainer_timeout_error(t, timeout_ms, &err);
            progress_finish(&prog);
            fprintf(stderr, "sluice read: after %" PRIu64 " batches: %s\n", n, err.msg);
            rc = 1;
            break;
        }
        waited_ms = 0;
        if (json && print_json(b, n) != 0) rc = 1;
        if (ids) print_ids(b);
        sl_trainer_release(t, b);
        n++;
        if (rc != 0) break;
    }
    progress_finish(&prog);
    int sig = g_stop_signal;
    if (sig != 0)
        fprintf(stderr, "sluice read: stopped by %s after %" PRIu64 " batches%s\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", n,
                token_out != NULL && rc == 0 ? "; writing the resume token" : "");
    if (token_out && rc == 0 && write_token(t, token_out, args.token_step) != 0) rc = 1;
    double secs = sl_clock_s() - start;
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    sl_trainer_close(t);
    if (!quiet) {
        FILE *out = json ? stderr : stdout;
        if (secs <= 0) secs = 1e-9;
        fprintf(out,
                "batches %" PRIu64 "  samples %" PRIu64 "  bytes %" PRIu64 "  reconnects %" PRIu64
                "\n%.0f samples/s  %.1f MB/s  over %.3f s\n"
                "trainer wait: total %.3f ms, mean %.3f ms per batch\n",
                s.batches, s.samples, s.bytes, s.reconnects, (double)s.samples / secs,
                (double)s.bytes / 1e6 / secs, secs, (double)s.wait_ns / 1e6,
                s.batches ? (double)s.wait_ns / 1e6 / (double)s.batches : 0.0);
        if (o.master)
            fprintf(out, "committed %" PRIu64 "  dropped (not committed) %" PRIu64 "\n",
                    s.committed, s.dropped);
    }
    fflush(stdout);
    if (rc == 0 && sig != 0) rc = 128 + sig;
    return rc;
}
