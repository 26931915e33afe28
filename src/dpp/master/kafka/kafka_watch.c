/* The master's Kafka watcher (master_internal.h, mp_kafka_watch_start):
 * a thread of its own that every kafka_watch_ms asks the brokers, for each
 * stream job, for its topics' partitions (a partition the job does not
 * read yet joins it, from its earliest offset) and their high watermarks
 * (the lag metric: high watermark minus committed prefix), and mirrors
 * each partition's committed prefix into the consumer group
 * "sluice-<job>" so that standard lag tools see the job. Broker requests
 * are made without the master's lock (they take up to seconds); the lock
 * is taken to read the positions and to apply what was learnt. Nothing
 * the watcher does is needed for exactly once: the group's offsets are
 * never read back, and a partition it has not added yet is only late.
 * Also: the retention check of a stream's resume tokens. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "common/prom.h"
#include "dpp/master/process/master_internal.h"
#include "dpp/pipeline/job.h"
#include "kafka/chunk.h"

#define WATCH_TIMEOUT_MS 2000

/* A stream job as the watcher sees it in one round. */
typedef struct wjob {
    char id[MP_ID_MAX];
    char *spec_json; /* copy (m->a) */
    sl_master_kafka_position_t *pos;
    char **topics; /* copies of pos[i].topic (the state's strings live under the lock only) */
    uint32_t npos;
    int64_t *high;
} wjob;

/* A consumer kept per job across rounds, and what was mirrored last. */
typedef struct wcache {
    char id[MP_ID_MAX];
    sl_kafka_consumer_t *c;
    bool seen; /* in this round */
} wcache;

static void wjob_free(const sl_allocator_t *a, wjob *j)
{
    for (uint32_t i = 0; j->topics != NULL && i < j->npos; i++)
        sl_strfree(a, j->topics[i]);
    sl_free(a, j->topics, ((size_t)j->npos + 1) * sizeof *j->topics);
    sl_free(a, j->pos, ((size_t)j->npos + 1) * sizeof *j->pos);
    sl_free(a, j->high, ((size_t)j->npos + 1) * sizeof *j->high);
    sl_strfree(a, j->spec_json);
    memset(j, 0, sizeof *j);
}

/* The stream jobs and their positions, copied under the lock. */
static uint32_t collect(sl_master_t *m, wjob *out, uint32_t cap) SL_EXCLUDES(m->mu)
{
    const sl_allocator_t *a = m->a;
    uint32_t n = 0;
    sl_mutex_lock(&m->mu);
    for (uint32_t i = 0; i < m->opts.max_jobs && n < cap; i++) {
        const mp_job *mj = &m->jobs[i];
        if (!mj->used) continue;
        uint32_t np = sl_master_state_kafka_positions(m->st, mj->id, NULL, 0);
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        if (np == 0 || sl_master_state_job_status(m->st, mj->id, &st, &err) != SL_OK || st.finished)
            continue;
        wjob *j = &out[n];
        memset(j, 0, sizeof *j);
        snprintf(j->id, sizeof j->id, "%.255s", mj->id);
        j->spec_json = sl_strdup(a, st.spec_json);
        j->pos = sl_calloc(a, (size_t)np + 1, sizeof *j->pos);
        j->topics = sl_calloc(a, (size_t)np + 1, sizeof *j->topics);
        j->high = sl_calloc(a, (size_t)np + 1, sizeof *j->high);
        j->npos = np;
        bool ok = j->spec_json && j->pos && j->topics && j->high;
        if (ok) sl_master_state_kafka_positions(m->st, mj->id, j->pos, np);
        for (uint32_t k = 0; ok && k < np; k++) {
            ok = (j->topics[k] = sl_strdup(a, j->pos[k].topic)) != NULL;
            if (ok) j->pos[k].topic = j->topics[k];
            j->high[k] = -1;
        }
        if (!ok) {
            wjob_free(a, j);
            continue; /* out of memory: this job waits for the next round */
        }
        n++;
    }
    sl_mutex_unlock(&m->mu);
    return n;
}

static sl_kafka_consumer_t *consumer_of(sl_master_t *m, wcache *cache, uint32_t cap, const wjob *j,
                                        const sl_pipeline_job_t *spec)
{
    uint32_t free_slot = cap;
    for (uint32_t i = 0; i < cap; i++) {
        if (cache[i].c != NULL && strcmp(cache[i].id, j->id) == 0) {
            cache[i].seen = true;
            return cache[i].c;
        }
        if (cache[i].c == NULL && free_slot == cap) free_slot = i;
    }
    if (free_slot == cap) return NULL;
    char group[MP_ID_MAX + 16];
    snprintf(group, sizeof group, "sluice-%.255s", j->id);
    sl_kafka_consumer_opts_t co = {.brokers = spec->kafka.brokers,
                                   .group_id = group,
                                   .props = (const char *const *)spec->kafka.props,
                                   .num_props = spec->kafka.num_props,
                                   .allocator = m->a};
    sl_error_t err = {0};
    sl_kafka_consumer_t *c = NULL;
    if (sl_kafka_consumer_new(&co, &c, &err) != SL_OK) {
        sl_log_kv(SL_LOG_WARN, SL_EV(KAFKA_WATCH_FAILED), (SL_KV_STR("job", j->id)),
                  "job %s: Kafka watcher: %s", j->id, err.msg);
        return NULL;
    }
    snprintf(cache[free_slot].id, sizeof cache[free_slot].id, "%.255s", j->id);
    cache[free_slot].c = c;
    cache[free_slot].seen = true;
    return c;
}

/* Ask the brokers about job j: new partitions (into *add, [*nadd]) and
 * high watermarks; mirror the committed prefixes into the group. */
static void ask(sl_master_t *m, sl_kafka_consumer_t *c, const sl_pipeline_job_t *spec, wjob *j,
                sl_kafka_partition_plan_t **add, uint32_t *nadd, uint32_t *plan_len)
{
    sl_error_t err = {0};
    *add = NULL;
    *nadd = 0;
    *plan_len = 0;
    /* New partitions: the topics' partition counts, and a start (the low
     * watermark) asked only for a partition the job does not read yet;
     * the known ones' watermarks are asked once, below. */
    const sl_pipeline_kafka_t *kf = &spec->kafka;
    for (uint32_t t = 0; t < kf->num_topics; t++) {
        int32_t n = 0;
        if (sl_kafka_partitions(c, kf->topics[t], WATCH_TIMEOUT_MS, &n, &err) != SL_OK) {
            atomic_fetch_add(&m->kafka_watch_errors, 1);
            continue;
        }
        for (int32_t p = 0; p < n; p++) {
            bool known = false;
            for (uint32_t k = 0; k < j->npos && !known; k++)
                known = j->pos[k].partition == p && strcmp(j->pos[k].topic, kf->topics[t]) == 0;
            if (known) continue;
            int64_t low, high;
            if (sl_kafka_watermarks(c, kf->topics[t], p, WATCH_TIMEOUT_MS, &low, &high, &err) !=
                SL_OK) {
                atomic_fetch_add(&m->kafka_watch_errors, 1);
                continue;
            }
            /* partitions come a few at a time; out of memory: a later round adds it */
            if (*nadd == *plan_len && !SL_GROW(m->a, *add, *plan_len, *nadd + 1, 4)) continue;
            (*add)[(*nadd)++] = (sl_kafka_partition_plan_t){kf->topics[t], p, low, -1};
        }
    }
    sl_kafka_offset_t *offs = sl_calloc(m->a, (size_t)j->npos + 1, sizeof *offs);
    uint32_t no = 0;
    for (uint32_t k = 0; k < j->npos; k++) {
        int64_t low;
        if (sl_kafka_watermarks(c, j->pos[k].topic, j->pos[k].partition, WATCH_TIMEOUT_MS, &low,
                                &j->high[k], &err) != SL_OK) {
            j->high[k] = -1;
            atomic_fetch_add(&m->kafka_watch_errors, 1);
        }
        if (offs != NULL)
            offs[no++] =
                (sl_kafka_offset_t){j->pos[k].topic, j->pos[k].partition, j->pos[k].committed};
    }
    if (offs != NULL && sl_kafka_commit_offsets(c, offs, no, WATCH_TIMEOUT_MS, &err) != SL_OK) {
        atomic_fetch_add(&m->kafka_watch_errors, 1);
        sl_log_kv(SL_LOG_DEBUG, SL_EV(KAFKA_GROUP_COMMIT), (SL_KV_STR("job", j->id)),
                  "job %s: mirroring its committed offsets into group sluice-%s: %s", j->id, j->id,
                  err.msg);
    } else if (offs != NULL) {
        atomic_fetch_add(&m->kafka_group_commits, 1);
    }
    sl_free(m->a, offs, ((size_t)j->npos + 1) * sizeof *offs);
}

/* Apply a round under the lock: partitions added, high watermarks kept. */
static void apply(sl_master_t *m, wjob *jobs, uint32_t nj, sl_kafka_partition_plan_t **adds,
                  const uint32_t *nadds) SL_EXCLUDES(m->mu)
{
    sl_mutex_lock(&m->mu);
    bool added = false;
    for (uint32_t i = 0; i < nj; i++)
        for (uint32_t k = 0; !m->failed && adds[i] != NULL && k < nadds[i]; k++) {
            sl_kafka_partition_plan_t *p = &adds[i][k];
            sl_master_kafka_partition_t kp = {p->topic, p->partition, p->start, -1};
            sl_error_t err = {0};
            sl_err_t rc = sl_master_state_kafka_partition_add(m->st, jobs[i].id, &kp, &err);
            if (rc == SL_OK) {
                added = true;
                sl_log_kv(SL_LOG_INFO, SL_EV(KAFKA_PARTITION_ADDED),
                          (SL_KV_STR("job", jobs[i].id), SL_KV_STR("topic", p->topic),
                           SL_KV_U64("partition", (uint64_t)p->partition),
                           SL_KV_U64("start", (uint64_t)p->start)),
                          "job %s: partition %s/%d joined, read from offset %" PRId64, jobs[i].id,
                          p->topic, p->partition, p->start);
            } else if (rc == SL_ERR_NOMEM || rc == SL_ERR_IO) {
                mp_fail(m, &err);
            }
        }
    /* durable before any answer that builds on them (a lease of the new
     * partitions appends after them and waits for its own, later, ticket);
     * the disk's wait itself outside the lock */
    sl_error_t err = {0};
    uint64_t ticket = 0;
    bool began = added && mp_sync_begin(m, &ticket, &err) == SL_OK;
    /* the high watermarks, replacing the table's (jobs gone drop out) */
    uint32_t total = 0;
    for (uint32_t i = 0; i < nj; i++)
        total += jobs[i].npos;
    if (total > m->cap_khigh) {
        mp_khigh *h = sl_calloc(m->a, total, sizeof *h);
        if (h != NULL) {
            sl_free(m->a, m->khigh, (size_t)m->cap_khigh * sizeof *h);
            m->khigh = h;
            m->cap_khigh = total;
        }
    }
    m->nkhigh = 0;
    for (uint32_t i = 0; i < nj; i++)
        for (uint32_t k = 0; k < jobs[i].npos && m->nkhigh < m->cap_khigh; k++) {
            mp_khigh *h = &m->khigh[m->nkhigh++];
            snprintf(h->job, sizeof h->job, "%.255s", jobs[i].id);
            snprintf(h->topic, sizeof h->topic, "%.255s", jobs[i].pos[k].topic);
            h->partition = jobs[i].pos[k].partition;
            h->high = jobs[i].high[k];
            sl_master_state_kafka_high(m->st, jobs[i].id, h->topic, h->partition, h->high, k);
        }
    atomic_fetch_add(&m->kafka_watch_rounds, 1);
    sl_mutex_unlock(&m->mu);
    if (began) mp_sync_wait(m, ticket, &err);
}

static void round_once(sl_master_t *m, wjob *jobs, wcache *cache, uint32_t cap)
{
    uint32_t nj = collect(m, jobs, cap);
    sl_kafka_partition_plan_t *adds[MP_KAFKA_WATCH_JOBS] = {0};
    uint32_t nadds[MP_KAFKA_WATCH_JOBS] = {0}, plan_len[MP_KAFKA_WATCH_JOBS] = {0};
    for (uint32_t i = 0; i < cap; i++)
        cache[i].seen = false;
    /* the parsed specs live until the round is applied: the plans' topic
     * names are theirs */
    sl_pipeline_job_t *specs[MP_KAFKA_WATCH_JOBS] = {0};
    for (uint32_t i = 0; i < nj && !atomic_load(&m->kafka_stop); i++) {
        sl_error_t err = {0};
        if (sl_pipeline_job_parse(jobs[i].spec_json, strlen(jobs[i].spec_json), &specs[i], NULL,
                                  &err) != SL_OK) {
            specs[i] = NULL;
            continue; /* it was parsed at submission; only memory can fail here */
        }
        sl_kafka_consumer_t *c = consumer_of(m, cache, cap, &jobs[i], specs[i]);
        if (c != NULL) ask(m, c, specs[i], &jobs[i], &adds[i], &nadds[i], &plan_len[i]);
    }
    apply(m, jobs, nj, adds, nadds);
    for (uint32_t i = 0; i < nj; i++) {
        sl_free(m->a, adds[i], (size_t)plan_len[i] * sizeof *adds[i]);
        sl_pipeline_job_destroy(specs[i]);
        wjob_free(m->a, &jobs[i]);
    }
    /* consumers of jobs gone (removed, finished) */
    for (uint32_t i = 0; i < cap; i++)
        if (cache[i].c != NULL && !cache[i].seen) {
            sl_kafka_consumer_destroy(cache[i].c);
            cache[i].c = NULL;
        }
}

static void *watch(void *arg)
{
    sl_master_t *m = arg;
    wjob jobs[MP_KAFKA_WATCH_JOBS];
    wcache cache[MP_KAFKA_WATCH_JOBS];
    memset(cache, 0, sizeof cache);
    while (!atomic_load(&m->kafka_stop)) {
        round_once(m, jobs, cache, MP_KAFKA_WATCH_JOBS);
        /* sleep in slices, so that a stop is quick */
        for (uint64_t slept = 0; slept < m->opts.kafka_watch_ms && !atomic_load(&m->kafka_stop);
             slept += 50) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    for (uint32_t i = 0; i < MP_KAFKA_WATCH_JOBS; i++)
        sl_kafka_consumer_destroy(cache[i].c);
    return NULL;
}

sl_err_t mp_kafka_watch_start(sl_master_t *m, sl_error_t *err)
{
    atomic_store(&m->kafka_stop, false);
    if (pthread_create(&m->kafka_thread, NULL, watch, m) != 0)
        return sl_error_set(err, SL_ERR_IO, "master: cannot start the Kafka watcher thread");
    m->kafka_thread_started = true;
    return SL_OK;
}

void mp_kafka_watch_stop(sl_master_t *m)
{
    if (m->kafka_thread_started) {
        atomic_store(&m->kafka_stop, true);
        pthread_join(m->kafka_thread, NULL);
        m->kafka_thread_started = false;
    }
    sl_free(m->a, m->khigh, (size_t)m->cap_khigh * sizeof *m->khigh);
    m->khigh = NULL;
    m->nkhigh = m->cap_khigh = 0;
}

int64_t mp_kafka_high(const sl_master_t *m, const char *job, const char *topic, int32_t partition)
{
    for (uint32_t i = 0; i < m->nkhigh; i++)
        if (m->khigh[i].partition == partition && strcmp(m->khigh[i].topic, topic) == 0 &&
            strcmp(m->khigh[i].job, job) == 0)
            return m->khigh[i].high;
    return -1;
}

sl_err_t mp_kafka_tokens_retained(sl_master_t *m, const sl_master_state_job_spec_t *spec,
                                  const sl_master_submit_t *req, const int64_t *low,
                                  sl_error_t *err)
{
    uint32_t n = spec->num_kafka_partitions;
    int64_t *need = sl_calloc(m->a, (size_t)n + 1, sizeof *need);
    if (need == NULL) return sl_error_set(err, SL_ERR_NOMEM, "resume tokens: partitions");
    sl_err_t rc = sl_master_state_kafka_token_needs(m->st, spec, (const void *const *)req->tokens,
                                                    req->token_lens, req->num_tokens, need, err);
    for (uint32_t i = 0; rc == SL_OK && i < n; i++)
        if (need[i] < low[i])
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "resume tokens: %s/%d must be read from offset %" PRId64
                              " on, but retention deleted every offset below %" PRId64
                              " (its low watermark): those samples can no longer be delivered",
                              spec->kafka_partitions[i].topic, spec->kafka_partitions[i].partition,
                              need[i], low[i]);
    sl_free(m->a, need, ((size_t)n + 1) * sizeof *need);
    return rc;
}

uint32_t mp_kafka_positions(sl_master_t *m, const char *job, const sl_master_kafka_position_t **out)
{
    *out = NULL;
    uint32_t n = sl_master_state_kafka_positions(m->st, job, NULL, 0);
    if (n == 0) return 0;
    if (n > m->cap_kpos) {
        sl_master_kafka_position_t *p = sl_calloc(m->a, n, sizeof *p);
        if (p == NULL) return 0; /* the views go without them */
        sl_free(m->a, m->kpos, (size_t)m->cap_kpos * sizeof *p);
        m->kpos = p;
        m->cap_kpos = n;
    }
    sl_master_state_kafka_positions(m->st, job, m->kpos, n);
    *out = m->kpos;
    return n;
}

uint32_t mp_kafka_view(sl_master_t *m, const char *job, const sl_master_kafka_view_t **out)
{
    *out = NULL;
    const sl_master_kafka_position_t *pos;
    uint32_t n = mp_kafka_positions(m, job, &pos);
    if (n > m->cap_kview) {
        sl_master_kafka_view_t *v = sl_calloc(m->a, n, sizeof *v);
        if (v == NULL) return 0;
        sl_free(m->a, m->kview, (size_t)m->cap_kview * sizeof *v);
        m->kview = v;
        m->cap_kview = n;
    }
    for (uint32_t k = 0; k < n; k++)
        m->kview[k] =
            (sl_master_kafka_view_t){pos[k], mp_kafka_high(m, job, pos[k].topic, pos[k].partition)};
    *out = m->kview;
    return n;
}

void mp_kafka_metrics(sl_master_t *m, sl_prom_t *p)
{
    sl_prom_family_def(p, SL_M(MASTER_KAFKA_LAG_RECORDS));
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        const mp_job *j = &m->jobs[i];
        const sl_master_kafka_position_t *pos;
        uint32_t n = j->used ? mp_kafka_positions(m, j->id, &pos) : 0;
        for (uint32_t k = 0; k < n; k++) {
            int64_t high = mp_kafka_high(m, j->id, pos[k].topic, pos[k].partition);
            if (high < 0) continue; /* not seen yet */
            char l1[600], l2[600], l3[64], num[16], lab[1400];
            snprintf(num, sizeof num, "%d", (int)pos[k].partition);
            snprintf(lab, sizeof lab, "%s,%s,%s", sl_prom_label(l1, sizeof l1, "job", j->id),
                     sl_prom_label(l2, sizeof l2, "topic", pos[k].topic),
                     sl_prom_label(l3, sizeof l3, "partition", num));
            double lag = high > pos[k].committed ? (double)(high - pos[k].committed) : 0.0;
            sl_prom_sample_def(p, SL_M(MASTER_KAFKA_LAG_RECORDS), lab, lag);
        }
    }
    sl_prom_family_def(p, SL_M(MASTER_KAFKA_WATCH_ROUNDS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_KAFKA_WATCH_ROUNDS_TOTAL), NULL,
                       (double)atomic_load(&m->kafka_watch_rounds));
    sl_prom_family_def(p, SL_M(MASTER_KAFKA_WATCH_ERRORS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_KAFKA_WATCH_ERRORS_TOTAL), NULL,
                       (double)atomic_load(&m->kafka_watch_errors));
    sl_prom_family_def(p, SL_M(MASTER_KAFKA_GROUP_COMMITS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_KAFKA_GROUP_COMMITS_TOTAL), NULL,
                       (double)atomic_load(&m->kafka_group_commits));
}
