/* The master's store (state_store.h): the journal of a state directory, owned
 * by the process. It is the state's record sink, replays the directory
 * into a new state, syncs, and compacts from the state's snapshot. */
#include <string.h>

#include "common/mem.h"
#include "dpp/master/journal/state_store.h"

struct sl_master_store {
    const sl_allocator_t *a;
    sl_master_state_t *st;
    sl_master_journal_t *j; /* set at open, never changed: sync_wait reads it without a lock */
    uint64_t compact_bytes;
    bool compact_in_background;
    uint64_t compactions;
};

/* The state's sink: every record of a transition, buffered by the journal. */
static sl_err_t store_append(void *ctx, const void *record, size_t len, sl_error_t *err)
{
    sl_master_store_t *s = ctx;
    return sl_master_journal_append(s->j, record, len, err);
}

static sl_err_t replay_snapshot(void *ctx, const uint8_t *payload, size_t len, sl_error_t *err)
{
    return sl_master_state_load_snapshot(ctx, payload, len, err);
}

static sl_err_t replay_record(void *ctx, const uint8_t *payload, size_t len, uint64_t offset,
                              sl_error_t *err)
{
    return sl_master_state_apply_record(ctx, payload, len, offset, err);
}

sl_err_t sl_master_store_open(const sl_master_store_opts_t *opts,
                              const sl_master_state_opts_t *state_opts, uint64_t now_ms,
                              sl_master_store_t **out, sl_master_journal_open_info_t *info,
                              sl_error_t *err)
{
    *out = NULL;
    if (info != NULL) memset(info, 0, sizeof *info);
    if (opts == NULL || opts->dir == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "master store: no state directory");
    const sl_allocator_t *a = state_opts != NULL && state_opts->allocator != NULL
                                  ? state_opts->allocator
                                  : sl_allocator_default();
    sl_master_store_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "master store");
    s->a = a;
    s->compact_bytes = opts->compact_bytes != 0 ? opts->compact_bytes : 64u << 20;
    s->compact_in_background = opts->compact_in_background;
    sl_err_t rc = sl_master_state_new(state_opts, &s->st, err);
    /* The sink first (its record buffer taken now): once the journal is
     * open (and a torn tail cut), writing the Opened record must not fail
     * for memory. Replay appends nothing: it applies records directly. */
    sl_master_record_sink_t sink = {store_append, s};
    if (rc == SL_OK) rc = sl_master_state_set_sink(s->st, &sink, err);
    if (rc == SL_OK)
        rc = sl_master_journal_open(opts->dir, a, 0, replay_snapshot, replay_record, s->st, &s->j,
                                    info, err);
    if (rc == SL_OK) rc = sl_master_state_replayed(s->st, now_ms, err);
    if (rc == SL_OK) rc = sl_master_store_sync(s, err);
    if (rc != SL_OK) {
        sl_master_store_destroy(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

sl_master_state_t *sl_master_store_state(const sl_master_store_t *s)
{
    return s->st;
}

void sl_master_store_destroy(sl_master_store_t *s)
{
    if (s == NULL) return;
    /* the journal first: a background compaction's thread ends there */
    sl_master_journal_close(s->j);
    sl_master_state_destroy(s->st);
    sl_free(s->a, s, sizeof *s);
}

sl_err_t sl_master_store_compact(sl_master_store_t *s, sl_error_t *err)
{
    if (s == NULL) return SL_OK;
    uint8_t *buf = NULL;
    size_t len = 0;
    sl_err_t rc = sl_master_state_snapshot_encode(s->st, &buf, &len, err);
    if (rc != SL_OK) return rc;
    rc = sl_master_journal_compact(s->j, buf, len, err);
    sl_free(s->a, buf, len);
    if (rc == SL_OK) s->compactions++;
    return rc;
}

sl_err_t sl_master_store_sync_begin(sl_master_store_t *s, uint64_t *ticket, sl_error_t *err)
{
    *ticket = 0;
    if (s == NULL) return SL_OK;
    if (sl_master_journal_size(s->j) > s->compact_bytes) {
        sl_err_t rc = SL_OK;
        if (!s->compact_in_background) {
            rc = sl_master_store_compact(s, err);
        } else if (!sl_master_journal_compacting(s->j)) {
            /* A copy of the state taken here, under the caller's lock
             * (a forked process's: state_store_fork.c); encoded and written,
             * and put in place, without it. */
            rc = sl_master_store_fork_compact(s->st, s->j, s->a, err);
            if (rc == SL_OK) s->compactions++;
        }
        /* No memory for the snapshot: the journal still holds everything,
         * so sync it as it is; the next sync compacts. */
        if (rc != SL_ERR_NOMEM && rc != SL_OK) return rc;
    }
    return sl_master_journal_sync_begin(s->j, ticket, err);
}

sl_err_t sl_master_store_sync_wait(sl_master_store_t *s, uint64_t ticket, sl_error_t *err)
{
    return s == NULL ? SL_OK : sl_master_journal_sync_wait(s->j, ticket, err);
}

sl_err_t sl_master_store_sync(sl_master_store_t *s, sl_error_t *err)
{
    uint64_t ticket;
    sl_err_t rc = sl_master_store_sync_begin(s, &ticket, err);
    return rc == SL_OK ? sl_master_store_sync_wait(s, ticket, err) : rc;
}

void sl_master_store_compact_wait(sl_master_store_t *s)
{
    if (s != NULL) sl_master_journal_compact_wait(s->j);
}

void sl_master_store_counters(const sl_master_store_t *s, sl_master_store_counters_t *out)
{
    memset(out, 0, sizeof *out);
    if (s == NULL) return;
    out->journal_syncs = sl_master_journal_syncs(s->j);
    sl_master_journal_sync_hist(s->j, &out->journal_sync);
    out->compactions = s->compactions;
}

sl_err_t sl_master_store_replay(sl_master_state_t *m, const void *journal, size_t len, bool *torn,
                                sl_error_t *err)
{
    sl_master_journal_scan_t scan;
    sl_err_t rc = sl_master_journal_scan(journal, len, "journal", 0, replay_record, m, &scan, err);
    if (torn != NULL) *torn = scan.torn;
    return rc == SL_OK ? sl_master_state_replayed(m, 0, err) : rc;
}
