/* Tests of the master's state that need a state directory: a state opened
 * through its store (dpp/master/journal/state_store.h), found again from the
 * state. The store owns the journal and the state; these tests pass the
 * state around (as the master process passes m->st) and sync, compact and
 * destroy through the store it belongs to. A state made by
 * sl_master_state_new has no store: ms_sync and ms_compact do nothing for
 * it, ms_destroy destroys it. One test process holds at most
 * MS_MAX_STORES stores at once. */
#ifndef SLUICE_TESTS_MASTER_STORE_TU_H
#define SLUICE_TESTS_MASTER_STORE_TU_H

#include <criterion/criterion.h>

#include "dpp/master/journal/state_store.h"

#define MS_MAX_STORES 16

static sl_master_store_t *ms_stores[MS_MAX_STORES];

/* The store of m; NULL for a state in memory. */
static inline sl_master_store_t *ms_store(const sl_master_state_t *m)
{
    for (int i = 0; m != NULL && i < MS_MAX_STORES; i++)
        if (ms_stores[i] != NULL && sl_master_store_state(ms_stores[i]) == m) return ms_stores[i];
    return NULL;
}

/* sl_master_store_open with so (may be NULL: defaults) on dir; dir NULL:
 * sl_master_state_new, in memory (info untouched). */
static inline sl_err_t ms_open_with(const char *dir, const sl_master_store_opts_t *so,
                                    const sl_master_state_opts_t *o, uint64_t now_ms,
                                    sl_master_state_t **out, sl_master_journal_open_info_t *info,
                                    sl_error_t *err)
{
    if (dir == NULL) return sl_master_state_new(o, out, err);
    sl_master_store_opts_t sto = so != NULL ? *so : (sl_master_store_opts_t){0};
    sto.dir = dir;
    sl_master_store_t *s = NULL;
    *out = NULL;
    sl_err_t rc = sl_master_store_open(&sto, o, now_ms, &s, info, err);
    if (rc != SL_OK) return rc;
    for (int i = 0; i < MS_MAX_STORES; i++)
        if (ms_stores[i] == NULL) {
            ms_stores[i] = s;
            *out = sl_master_store_state(s);
            return SL_OK;
        }
    cr_assert_fail("more than %d master stores open at once", MS_MAX_STORES);
    return SL_ERR_INVALID;
}

static inline sl_err_t ms_open(const char *dir, const sl_master_state_opts_t *o, uint64_t now_ms,
                               sl_master_state_t **out, sl_master_journal_open_info_t *info,
                               sl_error_t *err)
{
    return ms_open_with(dir, NULL, o, now_ms, out, info, err);
}

static inline sl_err_t ms_sync(sl_master_state_t *m, sl_error_t *err)
{
    return sl_master_store_sync(ms_store(m), err);
}

static inline sl_err_t ms_compact(sl_master_state_t *m, sl_error_t *err)
{
    return sl_master_store_compact(ms_store(m), err);
}

/* Its store (journal and state), or the state in memory. m may be NULL. */
static inline void ms_destroy(sl_master_state_t *m)
{
    for (int i = 0; m != NULL && i < MS_MAX_STORES; i++)
        if (ms_stores[i] != NULL && sl_master_store_state(ms_stores[i]) == m) {
            sl_master_store_destroy(ms_stores[i]);
            ms_stores[i] = NULL;
            return;
        }
    sl_master_state_destroy(m);
}

#endif
