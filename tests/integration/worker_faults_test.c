/* The DPP worker under faults: a raw protocol client that takes batches
 * without acknowledging them and disconnects, and a `sluice read` process
 * killed with SIGKILL mid-epoch, must not lose or duplicate an acknowledged
 * batch (the next client gets the rest, exactly once in each of two
 * epochs); bad frames (garbage, wrong version, an ACK before HELLO, a huge
 * declared length, an ACK of an unknown delivery) get an ERROR naming the
 * problem and close only that connection; a slow client with a small
 * memory limit makes the pipeline wait (back-pressure) without the
 * accounted bytes ever passing the limit, also with 65,536-row stripes, and
 * a limit too small for one stripe fails the worker saying so. The end of
 * a job and the trainer port's limits: worker_port_test.c. */
#include "worker_faults_util.h"

Test(worker_faults, unacked_batches_of_a_vanished_client_go_to_the_next)
{
    char table[300], addr[64];
    const uint64_t rows = 10000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 500, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    int fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 4);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint32_t *epochs = calloc(rows, sizeof *epochs);
    uint64_t n = 0, kept_n = 0;
    uint64_t d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = raw_batch_epochs(fd, ids, epochs, &n);
        if (i == 1) kept_n = n; /* the first two batches will be acknowledged */
    }
    cr_assert_eq(n, 2000);
    raw_ack(fd, d[0]);
    raw_ack(fd, d[1]);
    /* A trainer joins while the raw client still holds two batches: it gets
     * everything else, and those two once the raw client is gone. */
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen};
    pthread_t th;
    pthread_create(&th, NULL, collect, &c);
    usleep(200 * 1000);
    close(fd); /* vanishes without GOODBYE */
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint64_t i = 0; i < kept_n; i++) {
        uint64_t k = (uint64_t)epochs[i] * rows + (uint64_t)ids[i];
        cr_assert_eq(seen[k], 0, "acked sample %ld of epoch %u delivered again", (long)ids[i],
                     epochs[i]);
        seen[k] = 1;
    }
    for (uint64_t i = 0; i < 2 * rows; i++)
        cr_assert_eq(seen[i], 1, "epoch %lu sample %lu: %u", (unsigned long)(i / rows),
                     (unsigned long)(i % rows), seen[i]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_geq(st.server.redeliveries, 2);
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.server.batches_acked, 40);
    free(ids);
    free(epochs);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* A client that reconnects acknowledges, on the new connection, a batch it
 * received on the old one (the trainer client does so in master mode): the
 * worker ignores that ACK instead of refusing the connection, and the batch,
 * back in the ready queue since the break, is delivered again. */
Test(worker_faults, an_ack_of_an_earlier_connection_is_ignored)
{
    char table[300], addr[64];
    const uint64_t rows = 2000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 500, 1);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    int fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 1);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint64_t n = 0;
    uint64_t first = raw_batch(fd, ids, &n);
    close(fd); /* the connection breaks before the ACK */
    fd = raw_connect(addr);
    raw_hello(fd);
    raw_ack(fd, first); /* sent on the new connection */
    raw_request(fd, 8);
    n = 0;
    uint64_t d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = raw_batch(fd, ids, &n);
        raw_ack(fd, d[i]);
    }
    cr_assert_eq(n, rows, "every batch, the first one again included");
    uint8_t *seen = calloc(rows, 1);
    for (uint64_t i = 0; i < n; i++)
        seen[ids[i]]++;
    for (uint64_t i = 0; i < rows; i++)
        cr_assert_eq(seen[i], 1, "sample %lu: %u", (unsigned long)i, seen[i]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.stale_acks, 1);
    cr_assert_eq(st.server.bad_frames, 0);
    cr_assert_eq(st.server.batches_acked, 4);
    close(fd);
    free(seen);
    free(ids);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_faults, sluice_read_killed_mid_epoch)
{
    char table[300], addr[64], errpath[300];
    const uint64_t rows = 20000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 250, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    snprintf(errpath, sizeof errpath, "%s/read.err", tmpdir);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        close(p[0]);
        close(p[1]);
        execl(tu_binary(), tu_binary(), "read", "--worker", addr, "--json", "--prefetch", "4",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    /* Nobody reads the pipe yet: `sluice read` stalls writing its JSON, with
     * batches received and not handed out. Wait until it has some. */
    sl_worker_stats_t st;
    for (int i = 0; i < 500; i++) {
        sl_worker_stats(w, &st);
        if (st.server.batches_sent >= 4) break;
        usleep(10 * 1000);
    }
    cr_assert_geq(st.server.batches_sent, 4);
    usleep(100 * 1000);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    /* what it printed: batches it handed out (and so acknowledged) */
    FILE *f = fdopen(p[0], "r");
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    uint8_t *printed = calloc(2 * rows, 1); /* [epoch * rows + id] */
    uint64_t printed_n = 0;
    while (fgets(line, (int)cap, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o) break; /* the last line may be cut short */
        json_t *sids = json_object_get(o, "sample_ids");
        json_int_t epoch =
            json_integer_value(json_object_get(json_object_get(o, "origin"), "epoch"));
        cr_assert(epoch >= 0 && epoch < 2);
        size_t i;
        json_t *v;
        json_array_foreach(sids, i, v)
        {
            json_int_t id = json_integer_value(v);
            cr_assert(id >= 0 && (uint64_t)id < rows);
            uint64_t k = (uint64_t)epoch * rows + (uint64_t)id;
            cr_assert_eq(printed[k], 0);
            printed[k] = 1;
            printed_n++;
        }
        json_decref(o);
    }
    fclose(f);
    free(line);
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen};
    collect(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    /* per epoch: nothing twice, nothing printed by the killed reader again */
    uint64_t got = 0;
    for (uint64_t i = 0; i < 2 * rows; i++) {
        cr_assert_leq(seen[i], 1, "epoch %lu sample %lu twice", (unsigned long)(i / rows),
                      (unsigned long)(i % rows));
        if (printed[i])
            cr_assert_eq(seen[i], 0, "epoch %lu sample %lu printed and redelivered",
                         (unsigned long)(i / rows), (unsigned long)(i % rows));
        got += seen[i];
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats(w, &st);
    /* every batch acknowledged exactly once: by the killed reader or the trainer */
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.server.batches_acked, 2 * rows / 250);
    cr_assert_geq(2 * rows - got, printed_n);
    cr_assert_gt(st.server.redeliveries, 0, "the killed reader held unacknowledged batches");
    free(printed);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

static void put_header(uint8_t *h, const char *magic, uint16_t version, uint16_t type,
                       uint32_t msg_len, uint64_t payload_len)
{
    memcpy(h, magic, 4);
    h[4] = (uint8_t)version, h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)type, h[7] = (uint8_t)(type >> 8);
    for (int i = 0; i < 4; i++)
        h[8 + i] = (uint8_t)(msg_len >> (8 * i));
    memset(h + 12, 0, 4);
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(payload_len >> (8 * i));
}

Test(worker_faults, bad_frames_get_an_error_and_others_keep_going)
{
    char table[300], addr[64];
    const uint64_t rows = 20000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 200, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    /* a slow trainer runs through the whole time */
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen, .delay_us = 2000};
    pthread_t th;
    pthread_create(&th, NULL, collect, &c);

    int fd = raw_connect(addr);
    const char garbage[] = "XYZW some bytes that are no frame\r\n";
    cr_assert_eq(write(fd, garbage, sizeof garbage - 1), (ssize_t)(sizeof garbage - 1));
    expect_error(fd, SL_ERR_PROTOCOL, "magic");
    close(fd);

    /* an HTTP client at the trainer port gets an HTTP answer naming the port */
    fd = raw_connect(addr);
    sl_error_t terr = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, 10000, &terr), SL_OK, "%s", terr.msg);
    const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(write(fd, get, sizeof get - 1), (ssize_t)(sizeof get - 1));
    char answer[1024] = {0};
    size_t got = 0;
    for (ssize_t r;
         got < sizeof answer - 1 && (r = read(fd, answer + got, sizeof answer - 1 - got)) > 0;)
        got += (size_t)r; /* until the worker closes (the read timeout bounds it) */
    cr_assert(strncmp(answer, "HTTP/1.0 400 Bad Request\r\n", 26) == 0, "%s", answer);
    cr_assert(strstr(answer, "this is a sluice worker's trainer port") != NULL, "%s", answer);
    close(fd);

    uint8_t h[SL_RPC_HEADER_BYTES];
    fd = raw_connect(addr);
    put_header(h, "SLDP", 9, SL_RPC_HELLO, 0, 0);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_VERSION, "version 9");
    close(fd);

    fd = raw_connect(addr);
    raw_ack(fd, 1);
    expect_error(fd, SL_ERR_PROTOCOL, "hello");
    close(fd);

    fd = raw_connect(addr);
    Sluice__Dpp__Hello hr = SLUICE__DPP__HELLO__INIT;
    hr.protocol_version = SL_RPC_VERSION;
    hr.rank = 3;
    hr.world_size = 2;
    raw_send(fd, SL_RPC_HELLO, &hr.base);
    expect_error(fd, SL_ERR_INVALID, "hello: rank 3 is not below world size 2");
    close(fd);

    fd = raw_connect(addr);
    put_header(h, "SLDP", SL_RPC_VERSION, SL_RPC_HELLO, 0xfffffff0u, 0);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_TOO_LARGE, "exceeds the limit");
    close(fd);

    fd = raw_connect(addr);
    raw_hello(fd);
    put_header(h, "SLDP", SL_RPC_VERSION, SL_RPC_REQUEST, 0, 1ull << 40);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_PROTOCOL, "payload");
    close(fd);

    fd = raw_connect(addr);
    raw_hello(fd);
    raw_ack(fd, 123456789);
    expect_error(fd, SL_ERR_PROTOCOL, "ACK of delivery id 123456789, which this worker never sent");
    close(fd);

    /* a connection that takes batches then breaks the protocol loses them
     * to the others, not to nobody */
    fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 2);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint64_t n = 0;
    raw_batch(fd, ids, &n);
    raw_batch(fd, ids, &n);
    Sluice__Dpp__Hello again = SLUICE__DPP__HELLO__INIT;
    again.protocol_version = SL_RPC_VERSION;
    raw_send(fd, SL_RPC_HELLO, &again.base);
    expect_error(fd, SL_ERR_PROTOCOL, "unexpected hello");
    close(fd);

    pthread_join(th, NULL);
    expect_every_sample_once(&c);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.bad_frames, 9); /* the HTTP request counts too */
    cr_assert_geq(st.server.redeliveries, 2);
    /* after the end, a new client gets WELCOME then END */
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    fd = raw_connect(addr);
    raw_hello(fd);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_END, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__End *e = (const Sluice__Dpp__End *)f.msg;
    cr_assert_eq(e->samples, 2 * rows);
    cr_assert_eq(e->batches, 2 * rows / 200);
    cr_assert_eq(e->epochs, 2);
    sl_rpc_frame_free(&f);
    close(fd);
    free(ids);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* 24,000 criteo rows (~9 MB decoded) to a slow client (3 ms per batch)
 * under a 4 MiB limit: every sample arrives once, more than twice the
 * limit is encoded, the peak stays under the limit, producers waited. */
static void slow_client_under_4m(bool no_fused, sl_worker_stats_t *st)
{
    char table[300], addr[64];
    const uint64_t rows = 24000;
    gen_criteo(rows, 2048, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 256);
    const uint64_t limit = 4u << 20;
    sl_worker_t *w =
        start_with(job, limit, &(sl_worker_opts_t){.no_fused = no_fused}, addr, sizeof addr);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .seen = seen, .delay_us = 3000};
    collect(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint64_t i = 0; i < rows; i++)
        cr_assert_eq(seen[i], 1);
    sl_worker_stats(w, st);
    cr_assert_gt(st->bytes_encoded, 2 * limit);
    cr_assert_leq(st->memory_peak, limit, "peak %lu > limit %lu", (unsigned long)st->memory_peak,
                  (unsigned long)limit);
    cr_assert_gt(st->backpressure_ns, 0, "producers waited");
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* The transform threads' path: batches built ahead fill the budget. */
Test(worker_faults, memory_limit_holds_with_a_slow_client)
{
    sl_worker_stats_t st;
    slow_client_under_4m(true, &st);
    cr_assert_eq(st.batches_fused, 0);
    cr_assert_gt(st.memory_peak, (4u << 20) / 2, "the limit was reached (peak %lu)",
                 (unsigned long)st.memory_peak);
}

/* The fused path (the reader makes frames straight from the stripe): the
 * read-ahead bound stops it before the budget does, and the limit holds. */
Test(worker_faults, memory_limit_holds_with_a_slow_client_fused)
{
    sl_worker_stats_t st;
    slow_client_under_4m(false, &st);
    /* stripes of 2048 rows, batches of 256: every full batch is inside one
     * stripe (the last stripe's 1,472 rows hold 5 and the epoch's short
     * last batch of 192, which the transform threads make) */
    cr_assert_eq(st.batches, 94);
    cr_assert_eq(st.batches_fused, 93);
}

/* Read every batch, sleeping delay_us after each (a slow trainer); count
 * each sample id per epoch (seen[epoch * rows + id]). */
static void read_slowly(const char *addr, uint64_t rows, uint32_t delay_us, uint32_t prefetch,
                        uint8_t *seen)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    o.prefetch = prefetch;
    sl_trainer_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    wu_read_all(t, rows, 2, delay_us, seen);
    sl_trainer_close(t);
}

/* The memory limit holds with large stripes and a slow trainer: 65,536-row
 * criteo stripes (~23 MB decoded each), a 64 MiB limit, and a trainer that
 * sleeps between batches so that encoded batches pile up waiting for
 * acknowledgements. The budget's high-water mark (memory_peak,
 * sluice_worker_memory_peak_bytes) never passes the limit, and every sample
 * arrives once in each of two epochs. */
Test(worker_faults, memory_limit_holds_with_large_stripes_and_a_slow_trainer)
{
    char table[300], addr[64];
    const uint64_t rows = 4 * 65536;
    const uint64_t limit = 64u << 20;
    gen_criteo(rows, 65536, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 4096, 2);
    sl_error_t err = {0};
    /* The transform threads' path: the reader and two transform threads
     * outpace the slow trainer even in the sanitizer build, so batches pile
     * up against the budget. (The fused path does all of a batch's work on
     * the reader thread; under ASan that alone is slower than this
     * trainer, and nothing would pile up.) */
    sl_worker_t *w =
        start_with(job, limit, &(sl_worker_opts_t){.no_fused = true}, addr, sizeof addr);
    uint8_t *seen = calloc(2 * rows, 1);
    cr_assert_not_null(seen);
    read_slowly(addr, rows, 2000, 16, seen);
    for (uint64_t e = 0; e < 2; e++)
        for (uint64_t i = 0; i < rows; i++)
            cr_assert_eq(seen[e * rows + i], 1, "epoch %llu sample %llu seen %u times",
                         (unsigned long long)e, (unsigned long long)i, seen[e * rows + i]);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    fprintf(stderr, "memory limit %llu, peak accounted %llu (%.1f%%), back-pressure %.2f s\n",
            (unsigned long long)limit, (unsigned long long)st.memory_peak,
            100.0 * (double)st.memory_peak / (double)limit, st.backpressure_ns / 1e9);
    cr_assert_leq(st.memory_peak, limit, "peak %llu > limit %llu",
                  (unsigned long long)st.memory_peak, (unsigned long long)limit);
    cr_assert_gt(st.memory_peak, limit / 2, "the limit was reached (peak %llu)",
                 (unsigned long long)st.memory_peak);
    cr_assert_gt(st.backpressure_ns, 0, "producers waited");
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* A limit that cannot hold one stripe fails the worker with a message
 * saying so, instead of passing the limit. */
Test(worker_faults, a_memory_limit_too_small_for_a_stripe_fails_loudly)
{
    char table[300];
    const uint64_t rows = 65536;
    const uint64_t limit = 8u << 20; /* a stripe decodes to ~23 MB */
    gen_criteo(rows, 65536, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 4096);
    sl_error_t err = {0};
    char addr[64];
    sl_worker_t *w = start(job, limit, addr, sizeof addr);
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    /* the worker's memory, not the data: SL_ERR_NOMEM (a split error would go to a master) */
    cr_assert_eq(rc, SL_ERR_NOMEM, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "worker: --memory-limit of 8388608 bytes cannot hold ") != NULL &&
                  strstr(err.msg, "stripe 0 decoded") != NULL &&
                  strstr(err.msg, "raise the limit") != NULL,
              "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_leq(st.memory_peak, limit);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}
