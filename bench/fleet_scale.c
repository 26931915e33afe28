/* The DPP master at fleet scale: one real master in this process (state
 * directory, journal on, cluster secret on) against many light simulated
 * workers and trainer clients that speak the real control protocol over
 * TCP (src/rpc framing and the cluster-secret handshake), driven by a few
 * simulator threads, each an event loop (poll) over its share of the
 * connections: no thread per peer.
 *
 * The job is a generated table of `splits` one-row stripes (one dense
 * feature, no compression), submitted like any job (sl_master_job_submit
 * reads its footers and cuts it into splits), so the master under test is
 * the one a deployment runs. A simulated worker: REGISTER, then LEASE_REQUEST
 * -> LEASE; it hands the split to its thread's queue (the batch a real
 * worker would serve); a trainer of that thread COMMITs the split's row
 * range; the worker then sends SPLIT_READ and asks for its next lease.
 * Every worker HEARTBEATs (listing its lease) every heartbeat_ms. Every
 * `kill_every` commits one worker is killed: its connection dropped with
 * its lease held; a replacement with a new id registers (the lease
 * expires after the lease timeout and the split is leased again).
 *
 * Figures: leases and commits per second, their p50/p99 latency (request
 * sent to reply received, in the simulator), master CPU per committed batch
 * (process CPU minus the simulator threads' own CPU), master RSS (process
 * RSS growth from before the master started), journal bytes per commit
 * (journal + snapshot bytes written / commits; compaction is pushed past
 * the run), and the time to restart at the run's state: from a copy of the
 * state directory taken while the master ran (what a kill -9 leaves: the
 * journal as synced) and after a clean stop.
 *
 * Usage: bench_fleet_scale [--workers N] [--trainers N] [--splits N] [--compact-mb MB]
 *        [--commits N] [--epochs N] [--threads N] [--kill-every N]
 *        [--lease-ms MS] [--seconds S] [--rate COMMITS_PER_S]
 * --rate offers that many commits a second (all trainers together) instead
 * of as many as the master takes: the latency at a load below saturation.
 * --sync-delay-ms makes every journal fdatasync wait that long first (a
 * slow disk, SLUICE_JOURNAL_SYNC_DELAY_US). Throughout the run a probe
 * thread renders /metrics (sl_master_metrics_text, which takes the
 * master's lock as the admin endpoint does) every 25 ms: its latency
 * shows what an admin request or a scrape waits for while the control
 * thread syncs or compacts. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "testutil.h"
#include "common/clock.h"
#include "common/mem.h"
#include "dpp/master/journal/journal.h"
#include "dpp/master/process/master.h"
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "warehouse/import.h"

#define SECRET "fleet-scale-bench-secret"
#define JOB "fleet"

typedef struct opts {
    uint32_t workers, trainers, splits, epochs, threads, kill_every;
    uint64_t commits, lease_ms, compact_mb;
    double seconds;
    double rate; /* commits a second offered, all trainers together; 0: as fast as it goes */
    double sync_delay_ms;
} opts;

static opts g_o = {256, 1024, 1000000, 3, 2, 2000, 300000, 3000, 1 << 20, 300, 0, 0};
static uint16_t g_port;
static _Atomic uint64_t g_commits, g_stop, g_finished;

typedef struct lat {
    float *v; /* microseconds */
    size_t n, cap;
} lat;

static void lat_add(lat *l, double us)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (l->v == NULL) abort();
    }
    l->v[l->n++] = (float)us;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The /metrics probe: renders the master's metrics every 25 ms until
 * g_stop, recording how long each took. */
typedef struct probe {
    sl_master_t *m;
    lat took;
} probe;

static void *probe_run(void *arg)
{
    probe *p = arg;
    while (atomic_load(&g_stop) == 0) {
        double t = bench_now();
        char *text = sl_master_metrics_text(p->m);
        lat_add(&p->took, (bench_now() - t) * 1e6);
        sl_strfree(sl_master_allocator(p->m), text);
        usleep(25000);
    }
    return NULL;
}

/* A split leased by a worker, waiting for a trainer's commit. */
typedef struct item {
    uint32_t worker; /* the sim index of the holder (peer index) */
    uint64_t incarnation;
    uint32_t epoch, split;
    uint64_t generation, rows;
} item;

enum { IDLE, WAIT_LEASE, HOLD, WAIT_COMMITTED, WAIT_READ, WAIT_HB, WAIT_COMMIT, NAP };

typedef struct peer {
    int fd;
    bool worker;
    uint32_t id;          /* worker or trainer number */
    uint64_t incarnation; /* workers: bumped by a kill (a new id) */
    int st, resume;       /* resume: the state a heartbeat reply returns to */
    double sent, next_hb, wake;
    item cur; /* a worker's lease; a trainer's batch */
    bool committed;
    uint64_t nonce;
} peer;

typedef struct sim {
    uint32_t t;
    peer *p;
    uint32_t np;
    item *q; /* ring of splits to commit */
    uint32_t qh, qn, qcap;
    lat lease, commit;
    uint64_t leases, commits, kills, no_work, stale, lost;
    uint64_t pushes, push_bytes; /* ATTACHED frames the master pushed to trainers */
    uint64_t rounds;
    uint64_t started; /* commits sent */
    double t0;        /* when its peers were connected */
    double cpu;
    char msg[SL_ERROR_MSG_MAX + 64];
} sim;

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void name_of(const peer *x, char *buf, size_t cap)
{
    if (x->worker)
        snprintf(buf, cap, "w%u-%llu", x->id, (unsigned long long)x->incarnation);
    else
        snprintf(buf, cap, "t%u", x->id);
}

/* Connect, prove the secret, REGISTER or ATTACH; wait for the answer. */
static int peer_open(sim *s, peer *x)
{
    sl_error_t err = {0};
    char name[32];
    name_of(x, name, sizeof name);
    x->fd = dial();
    if (x->fd < 0 || sl_rpc_auth_client(x->fd, SECRET, sl_clock_ms() + 30000, &err) != SL_OK) {
        snprintf(s->msg, sizeof s->msg, "%s: connect: %s", name, err.msg);
        return -1;
    }
    sl_err_t rc;
    if (x->worker) {
        Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
        r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
        r.worker_id = name;
        r.serve_address = "127.0.0.1:1";
        r.threads = 1;
        r.job_id = JOB;
        r.incarnation = x->incarnation + 1;
        rc = sl_rpc_send(x->fd, SL_RPC_REGISTER, &r.base, NULL, 0, &err);
    } else {
        Sluice__Control__Attach at = SLUICE__CONTROL__ATTACH__INIT;
        at.protocol_version = SL_MASTER_PROTOCOL_VERSION;
        at.job_id = JOB;
        at.client_id = name;
        at.rank = x->id;
        at.world_size = g_o.trainers;
        rc = sl_rpc_send(x->fd, SL_RPC_ATTACH, &at.base, NULL, 0, &err);
    }
    sl_rpc_frame_t f;
    if (rc == SL_OK) rc = sl_rpc_recv_until(x->fd, sl_clock_ms() + 30000, NULL, NULL, &f, &err);
    if (rc != SL_OK) {
        snprintf(s->msg, sizeof s->msg, "%s: hello: %s", name, err.msg);
        return -1;
    }
    bool ok = f.type == (x->worker ? SL_RPC_REGISTERED : SL_RPC_ATTACHED);
    if (!ok) snprintf(s->msg, sizeof s->msg, "%s: answered %s", name, sl_rpc_type_name(f.type));
    sl_rpc_frame_free(&f);
    x->st = IDLE;
    x->next_hb = bench_now() + 1.0 * (x->id % 100) / 100;
    return ok ? 0 : -1;
}

static void ref_of(Sluice__Control__SplitRef *r, const item *it)
{
    r->job_id = JOB;
    r->epoch = it->epoch;
    r->split = it->split;
    r->generation = it->generation;
}

static int send_or_note(sim *s, peer *x, sl_rpc_type_t type, const ProtobufCMessage *m)
{
    sl_error_t err = {0};
    x->sent = bench_now();
    if (sl_rpc_send(x->fd, type, m, NULL, 0, &err) == SL_OK) return 0;
    snprintf(s->msg, sizeof s->msg, "send %s: %s", sl_rpc_type_name(type), err.msg);
    return -1;
}

/* What x does next when it has no request outstanding. */
static int step(sim *s, peer *x, double now)
{
    char name[32];
    name_of(x, name, sizeof name);
    if (x->worker) {
        if (now >= x->next_hb && (x->st == IDLE || x->st == HOLD)) {
            Sluice__Control__Heartbeat hb = SLUICE__CONTROL__HEARTBEAT__INIT;
            Sluice__Control__SplitRef r = SLUICE__CONTROL__SPLIT_REF__INIT, *rp = &r;
            hb.worker_id = name;
            if (x->st == HOLD) {
                ref_of(&r, &x->cur);
                hb.leases = &rp;
                hb.n_leases = 1;
            }
            x->resume = x->st;
            x->st = WAIT_HB;
            x->next_hb = now + g_o.lease_ms / 4000.0;
            return send_or_note(s, x, SL_RPC_HEARTBEAT, &hb.base);
        }
        if (x->st == NAP && now >= x->wake) x->st = IDLE;
        if (x->st == IDLE) {
            Sluice__Control__LeaseRequest r = SLUICE__CONTROL__LEASE_REQUEST__INIT;
            r.worker_id = name;
            r.job_id = JOB;
            x->st = WAIT_LEASE;
            return send_or_note(s, x, SL_RPC_LEASE_REQUEST, &r.base);
        }
        if (x->st == HOLD && x->committed) {
            Sluice__Control__SplitRead r = SLUICE__CONTROL__SPLIT_READ__INIT;
            Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
            ref_of(&ref, &x->cur);
            r.ref = &ref;
            x->st = WAIT_READ;
            return send_or_note(s, x, SL_RPC_SPLIT_READ, &r.base);
        }
        return 0;
    }
    if (x->st != IDLE) return 0;
    if (now >= x->next_hb) {
        /* what a trainer client reports every refresh (no answer): the
         * master closes a client connection silent for 60 s */
        Sluice__Control__ClientStats cs = SLUICE__CONTROL__CLIENT_STATS__INIT;
        cs.client_id = name;
        cs.job_id = JOB;
        x->next_hb = now + 5.0;
        sl_error_t err = {0};
        if (sl_rpc_send(x->fd, SL_RPC_CLIENT_STATS, &cs.base, NULL, 0, &err) != SL_OK) {
            snprintf(s->msg, sizeof s->msg, "send client stats: %s", err.msg);
            return -1;
        }
    }
    /* an offered load: this thread's share of --rate since its start */
    if (g_o.rate > 0 && (double)s->started >= (now - s->t0) * g_o.rate / g_o.threads) return 0;
    for (;;) {
        if (s->qn == 0) return 0;
        x->cur = s->q[s->qh];
        s->qh = (s->qh + 1) % s->qcap;
        s->qn--;
        /* a killed worker's batches never reached a trainer */
        if (s->p[x->cur.worker].incarnation == x->cur.incarnation) break;
        s->lost++;
    }
    Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
    ref_of(&ref, &x->cur);
    rows.from_row = 0;
    rows.to_row = x->cur.rows;
    c.client_id = name;
    c.nonce = ++x->nonce;
    c.ref = &ref;
    c.rows = &rows;
    c.num_samples = (uint32_t)x->cur.rows;
    x->st = WAIT_COMMIT;
    s->started++;
    return send_or_note(s, x, SL_RPC_COMMIT, &c.base);
}

static void push(sim *s, const item *it)
{
    if (s->qn == s->qcap) return; /* cannot happen: one item per worker at most */
    s->q[(s->qh + s->qn) % s->qcap] = *it;
    s->qn++;
}

/* The reply to x's outstanding request. */
static int on_reply(sim *s, peer *x, const sl_rpc_frame_t *f, double now)
{
    double us = (now - x->sent) * 1e6;
    if (f->type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const void *)f->msg;
        snprintf(s->msg, sizeof s->msg, "ERROR %d: %s", e->code, e->message);
        return -1;
    }
    switch (f->type) {
    case SL_RPC_LEASE: {
        const Sluice__Control__Lease *l = (const void *)f->msg;
        lat_add(&s->lease, us);
        s->leases++;
        x->cur = (item){(uint32_t)(x - s->p), x->incarnation,     l->ref->epoch,
                        l->ref->split,        l->ref->generation, l->num_rows};
        x->committed = l->n_todo == 0;
        x->st = HOLD;
        if (!x->committed) push(s, &x->cur);
        return 0;
    }
    case SL_RPC_NO_WORK: {
        const Sluice__Control__NoWork *nw = (const void *)f->msg;
        s->no_work++;
        x->st = NAP;
        x->wake = now + (nw->retry_ms < 50 ? nw->retry_ms : 50) / 1000.0;
        return 0;
    }
    case SL_RPC_HEARTBEAT_REPLY: {
        const Sluice__Control__HeartbeatReply *r = (const void *)f->msg;
        x->st = r->n_revoked > 0 ? IDLE : x->resume;
        return 0;
    }
    case SL_RPC_SPLIT_READ_REPLY:
        x->st = IDLE;
        return 0;
    case SL_RPC_COMMIT_REPLY: {
        const Sluice__Control__CommitReply *r = (const void *)f->msg;
        lat_add(&s->commit, us);
        if (r->result == SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED) {
            s->commits++;
            atomic_fetch_add(&g_commits, 1);
        } else {
            s->stale++;
        }
        peer *w = &s->p[x->cur.worker];
        if (w->incarnation == x->cur.incarnation && w->cur.split == x->cur.split &&
            w->cur.generation == x->cur.generation)
            w->committed = true;
        x->st = IDLE;
        return 0;
    }
    case SL_RPC_ATTACHED: {
        /* pushed to every client of the job when its workers, epoch or
         * phase change (not an answer: x's state stays) */
        const Sluice__Control__Attached *a = (const void *)f->msg;
        s->pushes++;
        s->push_bytes += f->wire_bytes;
        if (a->finished) atomic_store(&g_finished, 1);
        return 0;
    }
    default:
        snprintf(s->msg, sizeof s->msg, "unexpected %s", sl_rpc_type_name(f->type));
        return -1;
    }
}

static void *sim_run(void *arg)
{
    sim *s = arg;
    struct pollfd *pf = calloc(s->np, sizeof *pf);
    uint64_t kill_at = g_o.kill_every;
    int rc = 0;
    for (uint32_t i = 0; i < s->np && rc == 0; i++)
        rc = peer_open(s, &s->p[i]);
    s->t0 = bench_now();
    while (rc == 0 && !atomic_load(&g_stop)) {
        double now = bench_now();
        /* from a rotating start: the trainers first in line would take
         * every batch and the others starve */
        uint32_t first = s->rounds++ % s->np;
        for (uint32_t k = 0; k < s->np && rc == 0; k++)
            rc = step(s, &s->p[(first + k) % s->np], now);
        for (uint32_t i = 0; i < s->np; i++)
            pf[i] = (struct pollfd){.fd = s->p[i].fd, .events = POLLIN};
        int n = poll(pf, s->np, 5);
        for (uint32_t i = 0; rc == 0 && n > 0 && i < s->np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            sl_rpc_frame_t f;
            sl_error_t err = {0};
            if (sl_rpc_recv(s->p[i].fd, NULL, NULL, &f, &err) != SL_OK) {
                snprintf(s->msg, sizeof s->msg, "recv: %s", err.msg);
                rc = -1;
                break;
            }
            rc = on_reply(s, &s->p[i], &f, bench_now());
            sl_rpc_frame_free(&f);
        }
        /* a kill: a worker holding a lease (its split not committed) drops
         * its connection; a replacement of a new id takes its place */
        if (rc == 0 && g_o.kill_every && s->commits >= kill_at) {
            kill_at += g_o.kill_every;
            for (uint32_t k = 0; k < s->np; k++) {
                peer *x = &s->p[(k + s->kills * 7919) % s->np];
                if (!x->worker || x->st != HOLD) continue;
                close(x->fd);
                x->incarnation++;
                s->kills++;
                rc = peer_open(s, x);
                break;
            }
        }
    }
    for (uint32_t i = 0; i < s->np; i++)
        close(s->p[i].fd);
    free(pf);
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    s->cpu = ts.tv_sec + ts.tv_nsec / 1e9;
    if (rc != 0) atomic_store(&g_stop, 2);
    return NULL;
}

static void on_status(void *ctx, const sl_master_status_view_t *v)
{
    *(sl_master_store_counters_t *)ctx = v->store;
}

/* The journal's counts (the master's state store). */
static sl_master_store_counters_t counters(sl_master_t *m)
{
    sl_master_store_counters_t c = {0};
    sl_master_visitor_t v = {.status = on_status, .ctx = &c};
    sl_error_t err = {0};
    sl_master_visit(m, NULL, &v, &err);
    return c;
}

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %lf", &kb) == 1) break;
    if (f != NULL) fclose(f);
    return kb / 1024;
}

static uint64_t file_bytes(const char *dir, const char *name)
{
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    FILE *in = fopen(a, "rb");
    if (in == NULL) return 0; /* no snapshot yet */
    FILE *out = fopen(b, "wb");
    char buf[1 << 16];
    size_t n;
    while (out != NULL && (n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    return out != NULL && fclose(out) == 0 ? 0 : -1;
}

static sl_master_t *start(const char *state, double *secs)
{
    sl_master_opts_t o = {.state_dir = state,
                          .lease_timeout_ms = g_o.lease_ms,
                          .max_connections = g_o.workers + g_o.trainers + 64,
                          .max_clients = g_o.trainers + 64,
                          .max_workers = 4 * g_o.workers + 1024,
                          .compact_bytes = g_o.compact_mb << 20,
                          .cluster_secret = SECRET};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    double t0 = bench_now();
    if (sl_master_start(&o, &m, &err) != SL_OK) {
        fprintf(stderr, "bench_fleet_scale: master: %s\n", err.msg);
        return NULL;
    }
    *secs = bench_now() - t0;
    return m;
}

static int gen_table(const char *dir)
{
    sl_wh_gen_spec_t spec = {.rows = g_o.splits,
                             .seed = 1,
                             .session_length = 1,
                             .active_sessions = 1,
                             .files = (g_o.splits + 999) / 1000,
                             .num_features = 1};
    spec.features[0] = (sl_wh_gen_feature_t){.name = "f0", .kind = SL_WH_DENSE, .vocab = 100};
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = 1;
    go.writer.codec = SL_WH_CODEC_NONE;
    sl_error_t err = {0};
    if (sl_wh_gen_table(dir, &spec, &go, NULL, &err) == SL_OK) return 0;
    fprintf(stderr, "bench_fleet_scale: table: %s\n", err.msg);
    return -1;
}

static void pct(const char *what, lat *l, double secs, uint64_t n)
{
    qsort(l->v, l->n, sizeof *l->v, cmp_float);
    double p50 = l->n ? l->v[l->n / 2] / 1000.0 : 0,
           p99 = l->n ? l->v[l->n * 99 / 100] / 1000.0 : 0;
    printf("  %-8s %9llu  %8.0f/s  p50 %6.2f ms  p99 %7.2f ms  max %7.2f ms\n", what,
           (unsigned long long)n, n / secs, p50, p99, l->n ? l->v[l->n - 1] / 1000.0 : 0);
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i];
        double v = strtod(argv[i + 1], NULL);
        if (!strcmp(k, "--workers"))
            g_o.workers = (uint32_t)v;
        else if (!strcmp(k, "--trainers"))
            g_o.trainers = (uint32_t)v;
        else if (!strcmp(k, "--splits"))
            g_o.splits = (uint32_t)v;
        else if (!strcmp(k, "--commits"))
            g_o.commits = (uint64_t)v;
        else if (!strcmp(k, "--epochs"))
            g_o.epochs = (uint32_t)v;
        else if (!strcmp(k, "--threads"))
            g_o.threads = (uint32_t)v;
        else if (!strcmp(k, "--kill-every"))
            g_o.kill_every = (uint32_t)v;
        else if (!strcmp(k, "--lease-ms"))
            g_o.lease_ms = (uint64_t)v;
        else if (!strcmp(k, "--seconds"))
            g_o.seconds = v;
        else if (!strcmp(k, "--compact-mb"))
            g_o.compact_mb = (uint64_t)v;
        else if (!strcmp(k, "--rate"))
            g_o.rate = v;
        else if (!strcmp(k, "--sync-delay-ms"))
            g_o.sync_delay_ms = v;
        else
            return -1;
    }
    if (argc % 2 == 0 || g_o.workers == 0 || g_o.trainers == 0 || g_o.splits == 0 ||
        g_o.threads == 0 || g_o.epochs == 0 || g_o.lease_ms < 100 || g_o.compact_mb == 0 ||
        g_o.rate < 0 || g_o.sync_delay_ms < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv) != 0) {
        fprintf(stderr,
                "usage: %s [--workers N] [--trainers N] [--splits N] [--commits N] "
                "[--epochs N] [--threads N] [--kill-every N] [--lease-ms MS] "
                "[--seconds S] [--compact-mb MB] [--rate COMMITS_PER_S] [--sync-delay-ms MS]\n",
                argv[0]);
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char *dir = tu_mkdtemp("fleetscale");
    char table[600], state[600], crash[600];
    snprintf(table, sizeof table, "%s/table", dir);
    snprintf(state, sizeof state, "%s/state", dir);
    snprintf(crash, sizeof crash, "%s/crash", dir);
    printf("fleet_scale: %u workers, %u trainers, %u splits (one-row stripes), %u epochs, "
           "%u simulator threads, a worker killed every %u commits, lease %llu ms, "
           "offered %s%.0f commits/s\n",
           g_o.workers, g_o.trainers, g_o.splits, g_o.epochs, g_o.threads, g_o.kill_every,
           (unsigned long long)g_o.lease_ms, g_o.rate > 0 ? "" : "unlimited ", g_o.rate);
    double t0 = bench_now();
    if (gen_table(table) != 0) return 1;
    printf("  table generated in %.1f s\n", bench_now() - t0);
    fflush(stdout);
    if (g_o.sync_delay_ms > 0) {
        char us[32];
        snprintf(us, sizeof us, "%.0f", g_o.sync_delay_ms * 1000);
        setenv("SLUICE_JOURNAL_SYNC_DELAY_US", us, 1);
        printf("  every journal fdatasync delayed %.1f ms\n", g_o.sync_delay_ms);
    }
    double rss0 = rss_mb(), t_start;
    sl_master_t *m = start(state, &t_start);
    if (m == NULL) return 1;
    g_port = sl_master_port(m);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"" JOB "\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":1,"
             "\"epochs\":%u}}",
             table, g_o.epochs);
    sl_master_submit_t req = {.spec_json = spec,
                              .ranks = g_o.trainers,
                              .min_workers = g_o.workers,
                              .max_workers = g_o.workers,
                              .workers = g_o.workers};
    sl_error_t err = {0};
    t0 = bench_now();
    if (sl_master_job_submit(m, &req, NULL, NULL, &err) != SL_OK) {
        fprintf(stderr, "bench_fleet_scale: submit: %s\n", err.msg);
        return 1;
    }
    printf("  job submitted in %.2f s; master RSS +%.0f MB\n", bench_now() - t0, rss_mb() - rss0);
    fflush(stdout);

    sim *sims = calloc(g_o.threads, sizeof *sims);
    uint32_t npeers = g_o.workers + g_o.trainers;
    for (uint32_t t = 0; t < g_o.threads; t++) {
        sims[t].t = t;
        sims[t].p = calloc(npeers / g_o.threads + 1, sizeof(peer));
        sims[t].qcap = g_o.workers + 1;
        sims[t].q = calloc(sims[t].qcap, sizeof(item));
    }
    for (uint32_t i = 0; i < npeers; i++) {
        sim *s = &sims[i % g_o.threads];
        bool w = i < g_o.workers;
        s->p[s->np++] = (peer){.worker = w, .id = w ? i : i - g_o.workers, .fd = -1};
    }
    uint64_t jbytes0 = file_bytes(state, "journal"); /* the job's split list, mostly */
    struct rusage ru0, ru1;
    sl_master_store_counters_t c0 = counters(m);
    getrusage(RUSAGE_SELF, &ru0);
    t0 = bench_now();
    pthread_t *th = calloc(g_o.threads, sizeof *th);
    for (uint32_t t = 0; t < g_o.threads; t++)
        pthread_create(&th[t], NULL, sim_run, &sims[t]);
    probe pr = {.m = m};
    pthread_t pth;
    pthread_create(&pth, NULL, probe_run, &pr);
    while (atomic_load(&g_commits) < g_o.commits && atomic_load(&g_stop) == 0 &&
           atomic_load(&g_finished) == 0 && bench_now() - t0 < g_o.seconds)
        usleep(20000);
    double secs = bench_now() - t0;
    if (atomic_load(&g_stop) == 0) atomic_store(&g_stop, 1);
    for (uint32_t t = 0; t < g_o.threads; t++)
        pthread_join(th[t], NULL);
    pthread_join(pth, NULL);
    getrusage(RUSAGE_SELF, &ru1);
    double cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                 (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
                 (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                 (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    lat lease = {0}, commit = {0};
    uint64_t leases = 0, commits = 0, kills = 0, no_work = 0, stale = 0, lost = 0, pushes = 0,
             push_bytes = 0;
    double sim_cpu = 0;
    int failed = 0;
    for (uint32_t t = 0; t < g_o.threads; t++) {
        sim *s = &sims[t];
        if (s->msg[0]) {
            fprintf(stderr, "bench_fleet_scale: simulator %u: %s\n", t, s->msg);
            failed = 1;
        }
        for (size_t k = 0; k < s->lease.n; k++)
            lat_add(&lease, s->lease.v[k]);
        for (size_t k = 0; k < s->commit.n; k++)
            lat_add(&commit, s->commit.v[k]);
        leases += s->leases;
        commits += s->commits;
        kills += s->kills;
        no_work += s->no_work;
        stale += s->stale;
        lost += s->lost;
        pushes += s->pushes;
        push_bytes += s->push_bytes;
        sim_cpu += s->cpu;
    }
    printf("  run: %.1f s, %llu commits accepted, %llu refused, %llu kills (%llu leased splits "
           "lost with them, leased again after expiry), %llu NO_WORK\n",
           secs, (unsigned long long)commits, (unsigned long long)stale, (unsigned long long)kills,
           (unsigned long long)lost, (unsigned long long)no_work);
    printf("  %llu ATTACHED pushes to trainers (%.1f MB; a fleet change is pushed to every "
           "client)%s\n",
           (unsigned long long)pushes, push_bytes / 1e6,
           atomic_load(&g_finished) ? "; the job finished" : "");
    pct("leases", &lease, secs, leases);
    pct("commits", &commit, secs, commits);
    pct("/metrics", &pr.took, secs, pr.took.n);
    double master_cpu = cpu - sim_cpu;
    printf("  master CPU %.2f s (process %.2f - simulators %.2f) = %.1f us per committed batch\n",
           master_cpu, cpu, sim_cpu, commits ? master_cpu / commits * 1e6 : 0);
    sl_master_store_counters_t c1 = counters(m);
    uint64_t syncs = c1.journal_syncs - c0.journal_syncs;
    double sync_s = c1.journal_sync.sum_s - c0.journal_sync.sum_s;
    printf("  journal: %llu syncs (%.1f commits each, %.2f ms each on average, %.0f%% of the "
           "run), %llu compactions\n",
           (unsigned long long)syncs, syncs ? (double)commits / syncs : 0,
           syncs ? sync_s / syncs * 1e3 : 0, sync_s / secs * 100,
           (unsigned long long)(c1.compactions - c0.compactions));
    /* the sync's tail: a commit's answer waits for one */
    uint64_t over10 = 0, over50 = 0;
    for (int b = 0; b <= SL_MASTER_JOURNAL_SYNC_BUCKETS; b++) {
        uint64_t n = c1.journal_sync.count[b] - c0.journal_sync.count[b];
        double lo = b > 0 ? SL_MASTER_JOURNAL_SYNC_BOUNDS[b - 1] : 0;
        if (lo >= 0.01) over10 += n;
        if (lo >= 0.05) over50 += n;
    }
    printf("  syncs over 10 ms: %llu (%.2f%%), over 50 ms: %llu\n", (unsigned long long)over10,
           syncs ? 100.0 * over10 / syncs : 0, (unsigned long long)over50);
    printf("  master RSS +%.0f MB over the process before start (%.0f MB in all)\n",
           rss_mb() - rss0, rss_mb());
    /* a kill -9's image: the state directory as synced now */
    mkdir(crash, 0755);
    uint64_t jbytes = file_bytes(state, "journal"), sbytes = file_bytes(state, "snapshot");
    if (copy_file(state, crash, "journal") != 0 || copy_file(state, crash, "snapshot") != 0)
        fprintf(stderr, "bench_fleet_scale: copy of the state failed\n");
    printf("  journal %.1f MB (%.1f MB after the submit: the split list) + snapshot %.1f MB; "
           "%.0f journal bytes per accepted commit during the run (its lease, split read and "
           "heartbeats included)\n",
           jbytes / 1e6, jbytes0 / 1e6, sbytes / 1e6,
           commits && c1.compactions == c0.compactions ? (double)(jbytes - jbytes0) / commits : 0);
    sl_master_stop(m);
    double t_crash = 0, t_clean = 0;
    m = start(crash, &t_crash);
    sl_master_stop(m);
    uint64_t jstop = file_bytes(state, "journal"), sstop = file_bytes(state, "snapshot");
    m = start(state, &t_clean);
    sl_master_stop(m);
    printf("  restart at %u splits: %.2f s from the running master's state (journal %.1f MB + "
           "snapshot %.1f MB: a kill -9), %.2f s after a clean stop (journal %.1f MB + snapshot "
           "%.1f MB) (target <= 5 s); first start %.2f s\n",
           g_o.splits, t_crash, jbytes / 1e6, sbytes / 1e6, t_clean, jstop / 1e6, sstop / 1e6,
           t_start);
    tu_rm_tree(dir);
    free(dir);
    return failed;
}
