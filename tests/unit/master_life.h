/* Every allocation failure of a master's life (tests/unit/master_state_test.c,
 * master_state_kafka_test.c): a test describes a life as steps on a master
 * state with a state directory; ml_walk runs it once without failures (the
 * reference), then for every step and every k the step with its k-th
 * allocation failing. A step that fails must fail with SL_ERR_NOMEM, say
 * what, change nothing (the dump before equals the dump after) and succeed
 * when asked again; in every case the rest of the life must end in the
 * reference's state, and so must the directory reopened. Everything is
 * static: include it once. */
#ifndef SLUICE_TESTS_MASTER_LIFE_H
#define SLUICE_TESTS_MASTER_LIFE_H

/* Every helper: a test file uses only some. */
#define ML_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

/* The start of a test's life struct. */
typedef struct ml_life {
    sl_master_state_opts_t o; /* o.allocator set by ml_walk */
    const char *dir;          /* the state directory (ml_walk's) */
    sl_master_state_t *m;     /* step 0 opens it: ms_open(dir, &o, ...) */
} ml_life_t;

typedef struct ml_ops {
    int steps;
    size_t size;                 /* of the test's life struct (starting with ml_life_t) */
    sl_master_state_opts_t opts; /* allocator filled in */
    sl_err_t (*step)(void *life, int step, sl_error_t *err);
} ml_ops_t;

/* The dump of m, allocated off the counted path. */
ML_FN char *ml_dump(const sl_master_state_t *m, const sl_allocator_t *a)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(a, d, len + 1);
    return copy;
}

ML_FN ml_life_t *ml_new(const ml_ops_t *ops, tu_alloc_t *ta, const char *dir)
{
    ml_life_t *x = calloc(1, ops->size);
    x->o = ops->opts;
    x->dir = dir;
    x->o.allocator = &ta->base;
    return x;
}

/* Steps [from, steps), each must succeed; then sync. */
ML_FN void ml_finish(const ml_ops_t *ops, ml_life_t *x, int from)
{
    sl_error_t err = {0};
    for (int s = from; s < ops->steps; s++)
        cr_assert_eq(ops->step(x, s, &err), SL_OK, "step %d: %s", s, err.msg);
    cr_assert_eq(ms_sync(x->m, &err), SL_OK, "%s", err.msg);
}

/* The state at the end of the life, and after reopening its directory. */
ML_FN void ml_end(ml_life_t *x, const char *what, char **end, char **reopened)
{
    sl_error_t err = {0};
    *end = ml_dump(x->m, x->o.allocator);
    ms_destroy(x->m);
    cr_assert_eq(ms_open(x->dir, &x->o, 400000, &x->m, NULL, &err), SL_OK, "%s: %s", what, err.msg);
    *reopened = ml_dump(x->m, x->o.allocator);
    ms_destroy(x->m);
    x->m = NULL;
}

/* Walk every allocation failure of the life. *want_end (may be NULL) gets
 * the reference's final dump (caller frees). @return the failures walked. */
ML_FN uint64_t ml_walk(const ml_ops_t *ops, tu_alloc_t *ta, char **want_end_out)
{
    char *dir = tu_mkdtemp("master-life");
    ml_life_t *ref = ml_new(ops, ta, dir);
    ml_finish(ops, ref, 0);
    char *want_end, *want_reopened;
    ml_end(ref, "the reference", &want_end, &want_reopened);
    free(ref);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(ta);
    uint64_t walked = 0;
    for (int step = 0; step < ops->steps; step++) {
        for (uint64_t k = 1;; k++) {
            dir = tu_mkdtemp("master-life");
            ml_life_t *x = ml_new(ops, ta, dir);
            sl_error_t err = {0};
            for (int s = 0; s < step; s++)
                cr_assert_eq(ops->step(x, s, &err), SL_OK, "step %d: %s", s, err.msg);
            char *before = x->m != NULL ? ml_dump(x->m, x->o.allocator) : strdup("");
            tu_alloc_fail_at(ta, k, false);
            sl_err_t rc = ops->step(x, step, &err);
            bool failed = tu_alloc_failures(ta) > 0;
            tu_alloc_fail_at(ta, 0, false);
            if (failed && rc != SL_OK) {
                /* refused as out of memory, saying what, changing nothing */
                cr_assert_eq(rc, SL_ERR_NOMEM, "step %d allocation %llu: %s: %s", step,
                             (unsigned long long)k, sl_err_str(rc), err.msg);
                cr_assert_neq(err.msg[0], '\0', "step %d allocation %llu: no message", step,
                              (unsigned long long)k);
                char *after = x->m != NULL ? ml_dump(x->m, x->o.allocator) : strdup("");
                cr_assert_str_eq(after, before, "step %d allocation %llu (%s) changed the state",
                                 step, (unsigned long long)k, err.msg);
                free(after);
                /* and the same step succeeds once memory is back */
                cr_assert_eq(ops->step(x, step, &err), SL_OK, "step %d again: %s", step, err.msg);
            } else {
                cr_assert_eq(rc, SL_OK, "step %d allocation %llu: %s", step, (unsigned long long)k,
                             err.msg);
            }
            free(before);
            ml_finish(ops, x, step + 1);
            char *end, *reopened, what[64];
            snprintf(what, sizeof what, "step %d allocation %llu", step, (unsigned long long)k);
            ml_end(x, what, &end, &reopened);
            cr_assert_str_eq(end, want_end, "step %d allocation %llu", step, (unsigned long long)k);
            cr_assert_str_eq(reopened, want_reopened, "step %d allocation %llu (reopened)", step,
                             (unsigned long long)k);
            free(end);
            free(reopened);
            free(x);
            tu_rm_tree(dir);
            free(dir);
            tu_alloc_assert_clean(ta);
            if (!failed) break; /* the step makes fewer than k allocations */
            walked++;
        }
    }
    cr_log_info("allocation failures walked: %llu", (unsigned long long)walked);
    free(want_reopened);
    if (want_end_out != NULL)
        *want_end_out = want_end;
    else
        free(want_end);
    return walked;
}

#endif
