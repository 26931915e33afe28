/* The master's store: the journal and snapshot of a state directory
 * (journal.h) and the state they hold (state.h), owned by the process,
 * not by the state. The state hands every change to a record sink; the
 * store is that sink: it opens the directory and replays the snapshot and
 * the journal into a new state through the state's own Apply
 * (sl_master_state_load_snapshot, sl_master_state_apply_record), appends
 * the state's records, syncs them, and compacts the journal from the
 * state's snapshot (in the sync, or in the background from a forked copy
 * of the process: state_store_fork.c). A state without a store lives in memory
 * (sl_master_state_new): every function here takes a NULL store as such a
 * state's, with nothing to sync, compact or count.
 *
 * Threads and locks: as the state's (the caller's lock around every call),
 * except sync_wait and counters, which may run without it (the journal
 * orders its own writes). */
#ifndef SLUICE_DPP_MASTER_STATE_STORE_H
#define SLUICE_DPP_MASTER_STATE_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "dpp/master/journal/journal.h"
#include "dpp/master/state/state.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_master_store_opts {
    const char *dir;        /* the state directory, created when absent; borrowed for the call */
    uint64_t compact_bytes; /* journal size that triggers compaction; 0: 64 MiB */
    /* Compaction by a thread of the journal's (sl_master_journal_compact_start)
     * from a forked copy: the sync that finds the journal too big only forks. */
    bool compact_in_background;
} sl_master_store_opts_t;

typedef struct sl_master_store sl_master_store_t;

/* Open a state directory: a new state (state_opts, may be NULL), the
 * snapshot and the journal replayed into it (a torn last record is cut
 * away and reported in info->warning; damage in the middle is an error
 * naming file and offset), then sl_master_state_replayed at now_ms (every
 * lease found expires at now_ms + lease timeout; an Opened record), synced.
 * info may be NULL. Caller owns *out and the state in it: free both with
 * sl_master_store_destroy. */
sl_err_t sl_master_store_open(const sl_master_store_opts_t *opts,
                              const sl_master_state_opts_t *state_opts, uint64_t now_ms,
                              sl_master_store_t **out, sl_master_journal_open_info_t *info,
                              sl_error_t *err);

/* The state (borrowed until sl_master_store_destroy). */
sl_master_state_t *sl_master_store_state(const sl_master_store_t *s);

/* Closes the journal and destroys the state; does not sync (call
 * sl_master_store_sync first). s may be NULL. */
void sl_master_store_destroy(sl_master_store_t *s);

/* Make every record so far durable (group commit), compacting the journal
 * first when it has outgrown compact_bytes (with no memory for the
 * snapshot the journal is synced as it is, and the next sync compacts). */
sl_err_t sl_master_store_sync(sl_master_store_t *s, sl_error_t *err);

/* The same in two steps, so that the disk is waited for outside the
 * caller's lock: sync_begin (under it: compacts or starts a compaction
 * when due, seals what was appended, *ticket names it), then sync_wait
 * (without it; touches the journal only, which is fixed at open): durable
 * when it returns. A failed write or fdatasync breaks the journal: every
 * later sync fails (reopen to recover). */
sl_err_t sl_master_store_sync_begin(sl_master_store_t *s, uint64_t *ticket, sl_error_t *err);
sl_err_t sl_master_store_sync_wait(sl_master_store_t *s, uint64_t ticket, sl_error_t *err);

/* Write a snapshot of the state and start an empty journal now. */
sl_err_t sl_master_store_compact(sl_master_store_t *s, sl_error_t *err);

/* Wait for a background compaction to end (nothing without one), under
 * the caller's lock: before the directory is opened again (the master's
 * recovery from a failed journal). */
void sl_master_store_compact_wait(sl_master_store_t *s);

typedef struct sl_master_store_counters {
    uint64_t journal_syncs;                     /* fdatasyncs */
    sl_master_journal_sync_hist_t journal_sync; /* their latency */
    uint64_t compactions;                       /* started (in the background) or done */
} sl_master_store_counters_t;

/* This store's counts since it was opened; zeroes for s NULL. */
void sl_master_store_counters(const sl_master_store_t *s, sl_master_store_counters_t *out);

/* Apply journal bytes (a whole journal file's contents) to an in-memory
 * state m, as open does but with no directory, no sink and no Opened
 * record: for tests and the fuzz target. *torn (may be NULL) says a torn
 * tail was ignored. */
sl_err_t sl_master_store_replay(sl_master_state_t *m, const void *journal, size_t len, bool *torn,
                                sl_error_t *err);

/* Start a background compaction of j from a copy of m taken now by fork()
 * (state_store_fork.c); a is the journal's allocator. */
sl_err_t sl_master_store_fork_compact(const sl_master_state_t *m, sl_master_journal_t *j,
                                      const sl_allocator_t *a, sl_error_t *err);

#endif
