/* Partition chunks: the consumer, its metadata queries, the chunk plan and
 * reading an offset range (chunk.h). */
#include "kafka/chunk.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kafka/retry.h"
#include "netlib/netlib_kafka.h"

/* librdkafka's functions: loaded by sl_kafka_consumer_new, where every handle here is made, before
 * any call here. */
static const sl_netlib_kafka_t *librdkafka(void)
{
    return sl_netlib_kafka(NULL);
}

/* Messages taken from librdkafka's queue at a time: one look at the clock
 * for all of them, instead of one each (what a message cost in the read
 * loop before); the memory budget is still looked at after each message
 * (a hold is cheap: it reads the clock only around a pause). */
#define READ_BATCH 256

struct sl_kafka_consumer {
    const sl_allocator_t *a;
    rd_kafka_t *rk;
    /* The partition the last read left assigned, at `next` (where it ended), and
     * the messages it took from the queue past its end: a read that goes
     * on where the last one ended (the next chunk of the same partition)
     * starts with them instead of assigning the partition again, which
     * threw librdkafka's prefetch away and cost a new fetch (a stall in a
     * stream at every chunk boundary). */
    bool assigned;
    /* The last read ended at the partition's end (yield): librdkafka
     * reports an end once, and a read that went on from there would never
     * learn whether records came since; it assigns anew instead, and the
     * new fetch reports the end again. */
    bool at_end;
    char topic[256];
    int32_t partition;
    int64_t next;
    rd_kafka_message_t *stash[READ_BATCH];
    uint32_t stash_at, stash_n;
    /* librdkafka's prefetch thresholds (queued.max.messages.kbytes in
     * bytes, queued.min.messages), and what the reads took since they last
     * found the queue empty (wake_fetcher). */
    uint64_t queue_bytes, run_bytes;
    uint64_t queue_msgs, run_msgs;
};

/* Forget the partition left assigned and the messages taken past it. */
static void drop_assignment(sl_kafka_consumer_t *c)
{
    for (uint32_t i = c->stash_at; i < c->stash_n; i++)
        librdkafka()->message_destroy(c->stash[i]);
    c->stash_at = c->stash_n = 0;
    c->run_bytes = c->run_msgs = 0;
    if (c->assigned) librdkafka()->assign(c->rk, NULL);
    c->assigned = false;
}

/* librdkafka logs to stderr by default; library code must not. Its errors
 * reach us as error events of consumer_poll and as return codes. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)level;
    (void)fac;
    (void)buf;
}

/* What exactly once rests on (chunk.h): set last, so nothing overrides it. */
static const char *const forced[][2] = {
    {"enable.auto.commit", "false"},  {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "error"},   {"isolation.level", "read_committed"},
    {"enable.partition.eof", "true"},
};

sl_err_t sl_kafka_consumer_new(const sl_kafka_consumer_opts_t *o, sl_kafka_consumer_t **out,
                               sl_error_t *err)
{
    *out = NULL;
    if (sl_netlib_kafka(err) == NULL) {
        sl_error_prefix(err, "kafka consumer: ");
        return SL_ERR_UNSUPPORTED;
    }
    char es[512];
    rd_kafka_conf_t *conf = librdkafka()->conf_new();
    if (!conf) return sl_error_set(err, SL_ERR_NOMEM, "kafka consumer: out of memory");
    librdkafka()->conf_set_log_cb(conf, quiet_log);
    /* A chunk that ends at the log's end is read when the partition's end
     * is reported, after a fetch that found nothing: librdkafka's 500 ms
     * default long poll made every such chunk cost half a second (12.7 s
     * instead of 1.6 s for kafka_worker_test's replay). The job's
     * properties may set it otherwise. */
    librdkafka()->conf_set(conf, "fetch.wait.max.ms", "100", es, sizeof es);
    /* Nagle held small requests back until the broker's delayed ACK (up
     * to 40 ms on Linux): the producer's is what made the online demo's
     * p99 60 ms (producer.c); a fetch request is as small. */
    librdkafka()->conf_set(conf, "socket.nagle.disable", "true", es, sizeof es);
    for (uint32_t i = 0; i < o->num_props; i++) {
        const char *name = o->props[2 * i], *value = o->props[2 * i + 1];
        for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++)
            if (strcmp(name, forced[f][0]) == 0 || strcmp(name, "group.id") == 0 ||
                strcmp(name, "bootstrap.servers") == 0) {
                librdkafka()->conf_destroy(conf);
                return sl_error_set(err, SL_ERR_INVALID,
                                    "kafka consumer: property %s is set by sluice", name);
            }
        if (librdkafka()->conf_set(conf, name, value, es, sizeof es) != RD_KAFKA_CONF_OK) {
            librdkafka()->conf_destroy(conf);
            return sl_error_set(err, SL_ERR_INVALID, "kafka consumer: property %s: %s", name, es);
        }
    }
    bool ok = librdkafka()->conf_set(conf, "bootstrap.servers", o->brokers, es, sizeof es) ==
                  RD_KAFKA_CONF_OK &&
              librdkafka()->conf_set(conf, "group.id", o->group_id ? o->group_id : "sluice", es,
                                     sizeof es) == RD_KAFKA_CONF_OK;
    for (size_t f = 0; ok && f < sizeof forced / sizeof forced[0]; f++)
        ok = librdkafka()->conf_set(conf, forced[f][0], forced[f][1], es, sizeof es) ==
             RD_KAFKA_CONF_OK;
    if (!ok) {
        librdkafka()->conf_destroy(conf);
        return sl_error_set(err, SL_ERR_INVALID, "kafka consumer: %s", es);
    }
    sl_kafka_consumer_t *c = sl_calloc(o->allocator, 1, sizeof *c);
    if (!c) {
        librdkafka()->conf_destroy(conf);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka consumer: out of memory");
    }
    c->a = o->allocator;
    c->rk = librdkafka()->new (RD_KAFKA_CONSUMER, conf, es, sizeof es); /* owns conf on success */
    if (!c->rk) {
        librdkafka()->conf_destroy(conf);
        sl_free(c->a, c, sizeof *c);
        return sl_error_set(err, SL_ERR_INVALID, "kafka consumer: %s", es);
    }
    librdkafka()->poll_set_consumer(c->rk);
    /* the thresholds as set (the job's properties or ours, or librdkafka's
     * defaults): 0 (unknown) leaves the fetcher alone */
    char v[32];
    size_t vn = sizeof v;
    if (librdkafka()->conf_get(librdkafka()->conf(c->rk), "queued.max.messages.kbytes", v, &vn) ==
        RD_KAFKA_CONF_OK)
        c->queue_bytes = strtoull(v, NULL, 10) * 1024;
    vn = sizeof v;
    if (librdkafka()->conf_get(librdkafka()->conf(c->rk), "queued.min.messages", v, &vn) ==
        RD_KAFKA_CONF_OK)
        c->queue_msgs = strtoull(v, NULL, 10);
    *out = c;
    return SL_OK;
}

void sl_kafka_consumer_destroy(sl_kafka_consumer_t *c)
{
    if (!c) return;
    drop_assignment(c);
    librdkafka()->consumer_close(c->rk); /* never subscribed: leaves no group, commits nothing */
    librdkafka()->destroy(c->rk);
    sl_free(c->a, c, sizeof *c);
}

/* ---- metadata ---- */

static sl_err_t kerr(sl_error_t *err, rd_kafka_resp_err_t e, const char *fmt_what,
                     const char *topic, int32_t partition)
{
    sl_err_t code = e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ERR_TIMEOUT
                    : e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                            e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
                            e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                        ? SL_ERR_NOT_FOUND
                        : SL_ERR_IO;
    if (partition < 0)
        return sl_error_set(err, code, "kafka topic '%s': %s: %s", topic, fmt_what,
                            librdkafka()->err2str(e));
    return sl_error_set(err, code, "kafka topic '%s' partition %d: %s: %s", topic, (int)partition,
                        fmt_what, librdkafka()->err2str(e));
}

sl_err_t sl_kafka_partitions(sl_kafka_consumer_t *c, const char *topic, int timeout_ms,
                             int32_t *count, sl_error_t *err)
{
    rd_kafka_topic_t *t = librdkafka()->topic_new(c->rk, topic, NULL);
    if (!t) return kerr(err, librdkafka()->last_error(), "metadata", topic, -1);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = librdkafka()->metadata(c->rk, 0, t, &md, timeout_ms);
    sl_err_t rc = SL_OK;
    if (e)
        rc = kerr(err, e, "metadata", topic, -1);
    else if (md->topic_cnt != 1 || md->topics[0].err)
        rc = kerr(err, md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC,
                  "metadata", topic, -1);
    else
        *count = md->topics[0].partition_cnt;
    if (md) librdkafka()->metadata_destroy(md);
    librdkafka()->topic_destroy(t);
    return rc;
}

sl_err_t sl_kafka_watermarks(sl_kafka_consumer_t *c, const char *topic, int32_t partition,
                             int timeout_ms, int64_t *low, int64_t *high, sl_error_t *err)
{
    uint64_t deadline = sl_clock_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    rd_kafka_resp_err_t e;
    do {
        e = librdkafka()->query_watermark_offsets(c->rk, topic, partition, low, high, timeout_ms);
    } while (sl_kafka_leader_moving(e) && sl_kafka_again_before(deadline));
    return e ? kerr(err, e, "watermarks", topic, partition) : SL_OK;
}

sl_err_t sl_kafka_offset_for_time(sl_kafka_consumer_t *c, const char *topic, int32_t partition,
                                  int64_t ms, int timeout_ms, int64_t *offset, sl_error_t *err)
{
    /* The end first: when no record is at or after ms, every record below
     * this end was there when the lookup below found none, so the answer
     * is this end. Read after the lookup, it could pass records that
     * arrived in between (a live stream lost its first records). */
    int64_t lo = 0, end = 0;
    sl_err_t rc = sl_kafka_watermarks(c, topic, partition, timeout_ms, &lo, &end, err);
    if (rc) return rc;
    uint64_t deadline = sl_clock_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    rd_kafka_resp_err_t e;
    int64_t off;
    do {
        rd_kafka_topic_partition_list_t *l = librdkafka()->topic_partition_list_new(1);
        if (!l) return sl_error_set(err, SL_ERR_NOMEM, "kafka: out of memory");
        librdkafka()->topic_partition_list_add(l, topic, partition)->offset = ms;
        e = librdkafka()->offsets_for_times(c->rk, l, timeout_ms);
        if (!e) e = l->elems[0].err;
        off = l->elems[0].offset;
        librdkafka()->topic_partition_list_destroy(l);
    } while (sl_kafka_leader_moving(e) && sl_kafka_again_before(deadline));
    if (e) return kerr(err, e, "offset for time", topic, partition);
    *offset = off < 0 ? end : off; /* no record at or after ms: the end */
    return SL_OK;
}

sl_err_t sl_kafka_commit_offsets(sl_kafka_consumer_t *c, const sl_kafka_offset_t *offsets,
                                 uint32_t count, int timeout_ms, sl_error_t *err)
{
    if (count == 0) return SL_OK;
    rd_kafka_topic_partition_list_t *l = librdkafka()->topic_partition_list_new((int)count);
    rd_kafka_queue_t *q = l ? librdkafka()->queue_new(c->rk) : NULL;
    if (!l || !q) {
        if (l) librdkafka()->topic_partition_list_destroy(l);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka: out of memory");
    }
    for (uint32_t i = 0; i < count; i++)
        librdkafka()->topic_partition_list_add(l, offsets[i].topic, offsets[i].partition)->offset =
            offsets[i].offset;
    /* On a queue of its own, so that the wait is bounded (rd_kafka_commit
     * waits for as long as the coordinator takes). */
    rd_kafka_resp_err_t e = librdkafka()->commit_queue(c->rk, l, q, NULL, NULL);
    librdkafka()->topic_partition_list_destroy(l);
    sl_err_t rc = SL_OK;
    if (e) {
        rc = kerr(err, e, "commit", offsets[0].topic, -1);
    } else {
        rd_kafka_event_t *ev = librdkafka()->queue_poll(q, timeout_ms);
        if (ev == NULL) {
            rc = sl_error_set(err, SL_ERR_TIMEOUT,
                              "kafka: commit of %u offsets: no answer in %d ms", count, timeout_ms);
        } else {
            e = librdkafka()->event_error(ev);
            const rd_kafka_topic_partition_list_t *got =
                librdkafka()->event_topic_partition_list(ev);
            for (int i = 0; !e && got != NULL && i < got->cnt; i++)
                e = got->elems[i].err;
            if (e) rc = kerr(err, e, "commit", offsets[0].topic, -1);
            librdkafka()->event_destroy(ev);
        }
    }
    librdkafka()->queue_destroy(q);
    return rc;
}

/* ---- the chunk plan ---- */

/* The offset at `at` of a partition. */
static sl_err_t offset_at(sl_kafka_consumer_t *c, const char *topic, int32_t p, uint8_t at,
                          int64_t ms, int timeout_ms, int64_t *out, sl_error_t *err)
{
    int64_t lo = 0, hi = 0;
    switch (at) {
    case SL_KAFKA_AT_NONE:
        *out = -1;
        return SL_OK;
    case SL_KAFKA_AT_TIMESTAMP:
        return sl_kafka_offset_for_time(c, topic, p, ms, timeout_ms, out, err);
    default: {
        sl_err_t rc = sl_kafka_watermarks(c, topic, p, timeout_ms, &lo, &hi, err);
        *out = at == SL_KAFKA_AT_EARLIEST ? lo : hi;
        return rc;
    }
    }
}

sl_err_t sl_kafka_plan_partitions(sl_kafka_consumer_t *c, const char *const *topics,
                                  uint32_t num_topics, uint8_t start_at, int64_t start_ms,
                                  uint8_t stop_at, int64_t stop_ms, int timeout_ms,
                                  const sl_allocator_t *a, sl_kafka_partition_plan_t **out,
                                  uint32_t *count, uint32_t *failed_topic, sl_error_t *err)
{
    *out = NULL;
    *count = 0;
    if (num_topics == 0) return sl_error_set(err, SL_ERR_INVALID, "kafka: no topics");
    int32_t *n = sl_calloc(a, num_topics, sizeof *n);
    if (!n) return sl_error_set(err, SL_ERR_NOMEM, "kafka plan: out of memory");
    uint64_t total = 0;
    sl_err_t rc = SL_OK;
    for (uint32_t t = 0; t < num_topics && rc == SL_OK; t++) {
        if (failed_topic) *failed_topic = t;
        rc = sl_kafka_partitions(c, topics[t], timeout_ms, &n[t], err);
        total += rc == SL_OK && n[t] > 0 ? (uint64_t)n[t] : 0;
    }
    if (rc == SL_OK && (total == 0 || total > 65536))
        rc = sl_error_set(err, SL_ERR_INVALID, "kafka: %" PRIu64 " partitions (1 to 65536)", total);
    sl_kafka_partition_plan_t *pl = NULL;
    if (rc == SL_OK && !(pl = sl_calloc(a, (size_t)total, sizeof *pl)))
        rc = sl_error_set(err, SL_ERR_NOMEM, "kafka plan: out of memory");
    uint32_t k = 0;
    for (uint32_t t = 0; t < num_topics && rc == SL_OK; t++) {
        if (failed_topic) *failed_topic = t;
        for (int32_t p = 0; rc == SL_OK && p < n[t]; p++) {
            sl_kafka_partition_plan_t *pp = &pl[k++];
            pp->topic = topics[t];
            pp->partition = p;
            rc = offset_at(c, topics[t], p, start_at, start_ms, timeout_ms, &pp->start, err);
            if (rc == SL_OK)
                rc = offset_at(c, topics[t], p, stop_at, stop_ms, timeout_ms, &pp->stop, err);
        }
    }
    sl_free(a, n, (size_t)num_topics * sizeof *n);
    if (rc) {
        if (pl) sl_free(a, pl, (size_t)total * sizeof *pl);
        return rc;
    }
    *out = pl;
    *count = (uint32_t)total;
    return SL_OK;
}

/* ---- reading a range ---- */

typedef struct range_read {
    sl_kafka_consumer_t *c;
    bool paused; /* the partition, by hold */
    const sl_kafka_read_opts_t *o;
    sl_kafka_read_stats_t *st;
    int64_t first;     /* the first offset not handed on yet */
    uint64_t first_ms; /* when the oldest row held was added */
    /* The broker reported the partition's end at the position, and no
     * record came since: only then may yield end the read there (never on
     * a guess that nothing more is there: the offsets below were consumed). */
    bool at_end;
    /* The topic handle of the range's topic, once a message showed it:
     * librdkafka keeps one handle per topic name in a client, and the
     * assignment holds a reference to it for the whole read, so a message
     * of that handle is of the range's topic without a strcmp of its
     * name (one per message was 1 % of the reader's CPU). */
    const rd_kafka_topic_t *rkt;
    const int64_t *pos; /* the read's position (sl_kafka_read_range's pos) */
} range_read_t;

/* Seek the read's partition to pos, asynchronously: fetching starts
 * there at once (wake_fetcher says why). @return whether the seek was
 * taken; if not (out of memory, an error) librdkafka's timer fetches. */
static bool seek_to(range_read_t *rr, int64_t pos)
{
    rd_kafka_topic_partition_list_t *l = librdkafka()->topic_partition_list_new(1);
    if (!l) return false;
    librdkafka()->topic_partition_list_add(l, rr->o->topic, rr->o->partition)->offset = pos;
    rd_kafka_error_t *e = librdkafka()->seek_partitions(rr->c->rk, l, 0); /* 0: asynchronous */
    if (e) librdkafka()->error_destroy(e);
    librdkafka()->topic_partition_list_destroy(l);
    return e == NULL;
}

/* Pause or resume the partition as o->hold (if any) wants it now
 * (resume: false, whatever hold says). */
static void hold_check(range_read_t *rr, bool resume)
{
    const sl_kafka_read_opts_t *o = rr->o;
    if (!o->hold) return;
    bool want = !resume && o->hold(o->ctx, rr->paused);
    if (want == rr->paused) return;
    rd_kafka_topic_partition_list_t *l = librdkafka()->topic_partition_list_new(1);
    if (!l) return; /* out of memory: stays as it is, asked again at the next poll */
    librdkafka()->topic_partition_list_add(l, o->topic, o->partition);
    rd_kafka_resp_err_t e = want ? librdkafka()->pause_partitions(rr->c->rk, l)
                                 : librdkafka()->resume_partitions(rr->c->rk, l);
    librdkafka()->topic_partition_list_destroy(l);
    /* A resume alone is seen by librdkafka's broker thread at its next
     * timer, up to a second later (wake_fetcher): a seek to the read's
     * position starts the fetch at once. */
    if (!e && !want && *rr->pos < o->to) seek_to(rr, *rr->pos);
    if (e) return;
    rr->paused = want;
    if (want) rr->st->pauses++;
}

/* Hand on the rows held, as the stripe [first, end). */
static sl_err_t flush(range_read_t *rr, int64_t end, sl_error_t *err)
{
    const sl_kafka_read_opts_t *o = rr->o;
    hold_check(rr, false); /* the callback may wait for memory: paused meanwhile */
    sl_kafka_stripe_t s;
    sl_err_t rc = sl_kafka_rows_take(o->rows, &s, err);
    if (rc) return rc;
    if (s.rows.batch.batch_size)
        rr->st->stripes++;
    else
        rr->st->empty++;
    rc = o->stripe(o->ctx, &s, rr->first, end, err);
    rr->first = end;
    return rc;
}

/* The sluice-format headers of m into rec. */
static void record_of(const rd_kafka_message_t *m, sl_kafka_record_t *rec)
{
    *rec = (sl_kafka_record_t){
        .value = m->payload, .value_len = m->len, .offset = m->offset, .create_ms = -1};
    rd_kafka_timestamp_type_t tt;
    int64_t ts = librdkafka()->message_timestamp(m, &tt);
    if (tt == RD_KAFKA_TIMESTAMP_CREATE_TIME) rec->create_ms = ts;
    rd_kafka_headers_t *h = NULL;
    if (librdkafka()->message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR || !h) return;
    /* One pass over the headers: librdkafka()->header_get(name, i) looks for
     * the i-th of a name from the first header on, a strlen and strcmp of
     * each, twice a record for its one header. */
    const char *name;
    const void *v;
    size_t n;
    for (size_t i = 0;
         librdkafka()->header_get_all(h, i, &name, &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
        if (strcmp(name, SL_KAFKA_FORMAT_HEADER) != 0) continue;
        if (rec->format_headers++ == 0) {
            rec->format = v ? v : "";
            rec->format_len = v ? n : 0;
        }
    }
}

/* Hand bad record m on as it came. */
static void bad_record(const sl_kafka_read_opts_t *o, const rd_kafka_message_t *m, const char *why)
{
    rd_kafka_headers_t *h = NULL;
    if (librdkafka()->message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR) h = NULL;
    sl_kafka_bad_record_t r = {.topic = o->topic,
                               .partition = o->partition,
                               .offset = m->offset,
                               .key = m->key,
                               .key_len = m->key_len,
                               .value = m->payload,
                               .value_len = m->len,
                               .headers = h,
                               .why = why};
    o->bad_record(o->ctx, &r);
}

/* Whether m is of the range's partition (its topic by handle, once one
 * message matched by name). */
static bool ours(range_read_t *rr, const rd_kafka_message_t *m)
{
    if (!m->rkt || m->partition != rr->o->partition) return false;
    if (m->rkt == rr->rkt) return true;
    if (strcmp(librdkafka()->topic_name(m->rkt), rr->o->topic) != 0) return false;
    rr->rkt = m->rkt;
    return true;
}

/* One message of the range's partition into the read (*pos: the
 * consumer's position, every offset below was read or a gap). */
static sl_err_t take_message(range_read_t *rr, rd_kafka_message_t *m, int64_t *pos, uint64_t now_ms,
                             sl_error_t *err)
{
    const sl_kafka_read_opts_t *o = rr->o;
    bool mine = ours(rr, m);
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        /* the log ends at m->offset: offsets from pos up to it that came
         * as no record were gaps (markers, aborted records) */
        if (mine && m->offset > *pos) *pos = m->offset < o->to ? m->offset : o->to;
        if (mine && m->offset == *pos) rr->at_end = true;
        return SL_OK;
    }
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
        m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE)
        return sl_error_set(err, SL_ERR_NOT_FOUND,
                            "kafka topic '%s' partition %d: offset %" PRId64
                            " is gone (deleted by retention?): %s",
                            o->topic, (int)o->partition, *pos, librdkafka()->message_errstr(m));
    if (m->err) {
        char es[256];
        if (librdkafka()->fatal_error(rr->c->rk, es, sizeof es))
            return sl_error_set(err, SL_ERR_IO, "kafka topic '%s' partition %d: %s", o->topic,
                                (int)o->partition, es);
        return SL_OK; /* transient (a broker down, a leader moving): librdkafka retries */
    }
    if (!mine || m->offset < *pos) return SL_OK;
    rr->at_end = false;
    if (m->offset >= o->to) {
        *pos = o->to; /* past the range: every offset of it is behind us */
        return SL_OK;
    }
    rr->st->records++;
    sl_kafka_record_t rec;
    record_of(m, &rec);
    uint32_t before = sl_kafka_rows_count(o->rows);
    sl_error_t why = {0};
    sl_err_t d = o->json ? sl_kafka_rows_add_json(o->rows, o->json, &rec, &why)
                         : sl_kafka_rows_add(o->rows, &rec, &why);
    sl_err_t rc = SL_OK;
    if (d == SL_ERR_CORRUPT) {
        rr->st->bad++;
        if (o->bad) o->bad(o->ctx, why.msg);
        if (o->bad_record) bad_record(o, m, why.msg);
    } else if (d) {
        rc = sl_error_set(err, d, "%s", why.msg);
    }
    if (d == SL_OK && before == 0) rr->first_ms = now_ms;
    *pos = m->offset + 1;
    if (rc == SL_OK && sl_kafka_rows_count(o->rows) >= o->batch_rows) rc = flush(rr, *pos, err);
    return rc;
}

/* librdkafka (2.0) stops fetching a partition while its queue holds
 * queued.max.messages.kbytes or queued.min.messages, and decides again
 * only when its broker thread wakes: at its next timer, up to a second
 * later, as nothing the application does by consuming wakes it (2.1 made
 * that wait fetch.queue.backoff.ms). A reader that fell behind, a stream
 * at 100k records/s on shared cores, drained the queue in tens of ms and
 * then waited the rest of that second for records already in the log: in
 * `sluice demo --online` the partition went unfetchable 10 times in 10 s,
 * for 190-1000 ms each, and the ages at the worker's read reached 2.5 s.
 * So when a read finds the queue empty after taking, since it last found
 * it so, at least half a threshold (the fetcher may have stopped), it
 * seeks the partition to pos, the next offset it needs: a seek to an
 * offset starts fetching there and wakes the broker thread (a pause and
 * resume does not: the main thread handles those). What was queued or in
 * flight is dropped and fetched again from pos (offsets below pos are
 * skipped by take_message), so a wake that was not needed costs a fetch.
 * Not while hold keeps the partition paused. */
static void wake_fetcher(range_read_t *rr, int64_t pos)
{
    sl_kafka_consumer_t *c = rr->c;
    bool full = (c->queue_bytes && c->run_bytes >= c->queue_bytes / 2) ||
                (c->queue_msgs && c->run_msgs >= c->queue_msgs / 2);
    c->run_bytes = c->run_msgs = 0;
    if (!full || rr->paused || pos >= rr->o->to) return;
    if (seek_to(rr, pos)) rr->st->wakes++;
}

sl_err_t sl_kafka_read_range(sl_kafka_consumer_t *c, const sl_kafka_read_opts_t *o,
                             sl_kafka_read_stats_t *stats, sl_error_t *err)
{
    sl_kafka_read_stats_t local = {0};
    if (!stats) stats = &local;
    if (o->from < 0 || o->to <= o->from || o->batch_rows == 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "kafka topic '%s' partition %d: range [%" PRId64 ", %" PRId64 ")",
                            o->topic, (int)o->partition, o->from, o->to);
    rd_kafka_queue_t *q = librdkafka()->queue_get_consumer(c->rk);
    if (!q) return sl_error_set(err, SL_ERR_INVALID, "kafka: the consumer has no queue");
    bool goes_on = c->assigned && !c->at_end && c->partition == o->partition &&
                   c->next == o->from && strcmp(c->topic, o->topic) == 0;
    if (!goes_on) {
        drop_assignment(c);
        rd_kafka_topic_partition_list_t *l = librdkafka()->topic_partition_list_new(1);
        if (!l) {
            librdkafka()->queue_destroy(q);
            return sl_error_set(err, SL_ERR_NOMEM, "kafka: out of memory");
        }
        librdkafka()->topic_partition_list_add(l, o->topic, o->partition)->offset = o->from;
        rd_kafka_resp_err_t e = librdkafka()->assign(c->rk, l);
        librdkafka()->topic_partition_list_destroy(l);
        if (e) {
            librdkafka()->queue_destroy(q);
            return kerr(err, e, "assign", o->topic, o->partition);
        }
    }
    c->assigned = false;   /* until this read ends well */
    int64_t pos = o->from; /* the consumer's position: every offset below was read or a gap */
    range_read_t rr = {.c = c, .o = o, .st = stats, .first = o->from, .pos = &pos};
    sl_err_t rc = SL_OK;
    rd_kafka_message_t *ms[READ_BATCH];
    while (rc == SL_OK && pos < o->to) {
        if (o->cancel && atomic_load(o->cancel)) {
            rc = sl_error_set(err, SL_ERR_CLOSED, "kafka read cancelled");
            break;
        }
        hold_check(&rr, false);
        uint32_t held = sl_kafka_rows_count(o->rows);
        if (rr.at_end && held == 0 && o->yield && o->yield(o->ctx)) break;
        uint64_t now = sl_clock_ms();
        if (held && now - rr.first_ms >= o->linger_ms) {
            rc = flush(&rr, pos, err);
            continue;
        }
        int wait = 100;
        if (held && rr.first_ms + o->linger_ms - now < (uint64_t)wait)
            wait = (int)(rr.first_ms + o->linger_ms - now);
        ssize_t got = 0;
        bool drained = false;
        if (c->stash_at < c->stash_n) { /* what the last read took past its end */
            while (c->stash_at < c->stash_n)
                ms[got++] = c->stash[c->stash_at++];
            c->stash_at = c->stash_n = 0;
        } else {
            /* The first message waits (and returns as soon as one is
             * there); what else is queued already comes with it, without
             * waiting: consume_batch waits for its whole array or its
             * timeout, which would hold a slow stream's records back. */
            ms[0] = librdkafka()->consumer_poll(c->rk, wait > 0 ? wait : 1);
            if (!ms[0]) {
                wake_fetcher(&rr, pos);
                continue;
            }
            got = librdkafka()->consume_batch_queue(q, 0, ms + 1, READ_BATCH - 1);
            got = got > 0 ? got + 1 : 1;
            for (ssize_t k = 0; k < got; k++)
                c->run_bytes += ms[k]->len + ms[k]->key_len;
            c->run_msgs += (uint64_t)got;
            drained = got < READ_BATCH; /* the queue is empty now */
        }
        now = sl_clock_ms();
        ssize_t i = 0;
        for (; i < got && rc == SL_OK && pos < o->to; i++) {
            const rd_kafka_message_t *m = ms[i];
            if ((!m->err || m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) && m->offset >= o->to &&
                ours(&rr, m)) {
                /* A record past the range, or the log's end past it: every
                 * offset of the range is behind us. The message is the
                 * next read's too (a read that goes on needs the record,
                 * and the end to see gaps before it): kept below. */
                pos = o->to;
                break;
            }
            rc = take_message(&rr, ms[i], &pos, now, err);
            librdkafka()->message_destroy(ms[i]);
            /* every 16 messages (and at each poll and stripe): a look
             * is four atomic loads through the callback, 3 % of the
             * reader's CPU a message each; the memory budget bounds
             * memory either way, a pause only stops fetching */
            if ((i & 15) == 15) hold_check(&rr, false);
        }
        for (; i < got; i++) /* past the range: the next read's; after a failure: none's */
            if (rc == SL_OK)
                c->stash[c->stash_n++] = ms[i];
            else
                librdkafka()->message_destroy(ms[i]);
        if (drained && rc == SL_OK) wake_fetcher(&rr, pos);
    }
    /* o->to, or where yield ended the read */
    int64_t end = pos < o->to ? pos : o->to;
    if (rc == SL_OK && rr.first < end) rc = flush(&rr, end, err);
    stats->end = rc == SL_OK ? end : rr.first;
    if (rc != SL_OK) { /* rows held are not handed on */
        sl_kafka_stripe_t s;
        sl_error_t ignore = {0};
        sl_kafka_rows_take(o->rows, &s, &ignore);
    }
    hold_check(&rr, true); /* a pause would outlive the read */
    if (rc == SL_OK) {     /* left assigned at end, for a read that goes on from there */
        c->assigned = true;
        snprintf(c->topic, sizeof c->topic, "%s", o->topic);
        c->assigned = strlen(o->topic) < sizeof c->topic;
        c->partition = o->partition;
        c->next = end;
        c->at_end = rr.at_end;
    } else {
        c->assigned = true; /* so that drop_assignment unassigns */
        drop_assignment(c);
    }
    librdkafka()->queue_destroy(q);
    return rc;
}
