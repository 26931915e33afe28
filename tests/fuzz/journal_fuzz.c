/* Fuzz target for the master's journal replay: any input is a journal
 * file's bytes. It either fails to replay with an error (never a crash, an
 * out-of-bounds read or an unbounded allocation: limits are small), or
 * replays to a state that (1) a second replay of the same bytes reproduces
 * exactly (determinism), and (2) in which every job has consistent split
 * counts and encodes a resume token.
 * Seed inputs are in tests/fuzz/corpus/journal/ (written by journal_test's
 * corpus.write). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dpp/master/journal/state_store.h"

static int replay_checked(const uint8_t *data, size_t size);

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "journal_fuzz: %s: %s\n", what, msg);
    abort();
}

static sl_master_state_t *fresh(void)
{
    sl_master_state_opts_t o = {
        .lease_timeout_ms = 100, .max_jobs = 4, .max_workers = 64, .max_splits = 4096};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    if (sl_master_state_new(&o, &m, &err) != SL_OK) fail("open", err.msg);
    return m;
}

/* Inputs starting with '#' are record payloads, each prefixed by one length
 * byte, framed here into a journal with valid checksums: that lets the
 * fuzzer reach the record checks, which a checksum would otherwise hide. */
static uint8_t *frame_records(const uint8_t *data, size_t size, size_t *out_len)
{
    uint8_t *j = malloc(32 + 17 * size);
    memcpy(j, SL_MASTER_JOURNAL_MAGIC, 4);
    uint32_t v = SL_MASTER_JOURNAL_VERSION;
    memcpy(j + 4, &v, 4);
    memset(j + 8, 0, 8);
    size_t o = 16;
    for (size_t i = 1; i < size;) {
        uint32_t n = data[i++];
        if (n > size - i) n = (uint32_t)(size - i);
        uint32_t inv = ~n;
        uint64_t sum = XXH3_64bits_withSeed(data + i, n, n);
        memcpy(j + o, &n, 4);
        memcpy(j + o + 4, &inv, 4);
        memcpy(j + o + 8, &sum, 8);
        memcpy(j + o + 16, data + i, n);
        o += 16 + n;
        i += n;
    }
    *out_len = o;
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == '#') {
        size_t len;
        uint8_t *j = frame_records(data, size, &len);
        int r = replay_checked(j, len);
        free(j);
        return r;
    }
    return replay_checked(data, size);
}

static int replay_checked(const uint8_t *data, size_t size)
{
    sl_error_t err = {0};
    sl_master_state_t *a = fresh();
    bool torn;
    sl_err_t rc = sl_master_store_replay(a, data, size, &torn, &err);
    if (rc != SL_OK) {
        if (err.msg[0] == '\0') fail("error without a message", sl_err_str(rc));
        sl_master_state_destroy(a);
        return 0;
    }
    sl_master_state_t *b = fresh();
    if (sl_master_store_replay(b, data, size, &torn, &err) != SL_OK) fail("second replay", err.msg);
    char *da, *db;
    size_t la, lb;
    if (sl_master_state_dump(a, &da, &la, &err) != SL_OK) fail("dump", err.msg);
    if (sl_master_state_dump(b, &db, &lb, &err) != SL_OK) fail("dump", err.msg);
    if (la != lb || memcmp(da, db, la) != 0) fail("replay is not deterministic", "");
    sl_free(NULL, db, lb + 1);
    sl_master_state_destroy(b);
    /* Every job the dump lists must answer status with consistent counts
     * and encode a resume token (decoding a token needs the job's spec,
     * which the unit tests cover). */
    for (char *p = da; (p = strstr(p, "job ")) != NULL; p++) {
        if (p != da && p[-1] != '\n') continue;
        char id[256];
        if (sscanf(p, "job %255s ", id) != 1) fail("dump line", p);
        sl_master_state_job_status_t st;
        if (sl_master_state_job_status(a, id, &st, &err) != SL_OK) fail("status", err.msg);
        if (st.committed_rows > st.total_rows || st.pending + st.leased + st.done != st.num_splits)
            fail("status invariant", id);
        void *tok;
        size_t len;
        if (sl_master_state_token_encode(a, id, NULL, 0, &tok, &len, &err) != SL_OK)
            fail("token", err.msg);
        sl_free(NULL, tok, len);
    }
    sl_free(NULL, da, la + 1);
    sl_master_state_destroy(a);
    return 0;
}
