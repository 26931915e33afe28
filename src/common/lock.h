/* Lock rules the compiler checks: a mutex type clang's thread safety
 * analysis knows (sl_mutex_t, a pthread mutex), its lock and unlock, and
 * annotations that state a function's rule in its declaration:
 *
 *   SL_REQUIRES(m)   called with m held ("under s->mu")
 *   SL_EXCLUDES(m)   called without m (it takes m itself, or something
 *                    that must never be taken while holding m)
 *   SL_ACQUIRE(m)    returns with m held that it did not hold on entry
 *   SL_RELEASE(m)    returns with m released that it held on entry
 *   SL_NO_THREAD_SAFETY_ANALYSIS  a deliberate exception: say why beside it
 *
 * clang checks them with -Wthread-safety (on in every clang build, an
 * error with -Werror: CMakeLists.txt); for gcc they are nothing. Every
 * lock and unlock of an sl_mutex_t goes through sl_mutex_lock and
 * sl_mutex_unlock, so a function that returns with a lock it took, or
 * unlocks one it does not hold, fails the clang build.
 *
 * What the analysis cannot check in C: which fields a mutex guards. clang
 * resolves a guarded_by(mu) on a struct member only in C++ (and in C with
 * late-parsed attributes, clang 19 on), so the fields' rules stay in
 * prose beside the mutex, and the functions that touch them state
 * SL_REQUIRES. */
#ifndef SLUICE_COMMON_LOCK_H
#define SLUICE_COMMON_LOCK_H

#include <pthread.h>
#include <time.h>

#if defined(__clang__)
#define SL_TSA(x) __attribute__((x))
#else
#define SL_TSA(x)
#endif

#define SL_CAPABILITY(name) SL_TSA(capability(name))
#define SL_REQUIRES(...) SL_TSA(requires_capability(__VA_ARGS__))
#define SL_EXCLUDES(...) SL_TSA(locks_excluded(__VA_ARGS__))
#define SL_ACQUIRE(...) SL_TSA(acquire_capability(__VA_ARGS__))
#define SL_RELEASE(...) SL_TSA(release_capability(__VA_ARGS__))
#define SL_NO_THREAD_SAFETY_ANALYSIS SL_TSA(no_thread_safety_analysis)

/* A pthread mutex the analysis tracks. Any pthread call that takes a
 * pthread_mutex_t * takes it too (pthread_cond_wait among them). */
typedef pthread_mutex_t SL_CAPABILITY("mutex") sl_mutex_t;

static inline void sl_mutex_init(sl_mutex_t *m)
{
    pthread_mutex_init(m, NULL);
}

static inline void sl_mutex_destroy(sl_mutex_t *m)
{
    pthread_mutex_destroy(m);
}

/* The two calls the analysis trusts: they are where a lock is taken and
 * let go, so there is nothing in them to check. */
static inline void sl_mutex_lock(sl_mutex_t *m) SL_ACQUIRE(*m) SL_NO_THREAD_SAFETY_ANALYSIS
{
    pthread_mutex_lock(m);
}

static inline void sl_mutex_unlock(sl_mutex_t *m) SL_RELEASE(*m) SL_NO_THREAD_SAFETY_ANALYSIS
{
    pthread_mutex_unlock(m);
}

/* Wait on c, which m guards: m is held before and after. @return as
 * pthread_cond_wait / pthread_cond_timedwait (ETIMEDOUT). */
static inline int sl_cond_wait(pthread_cond_t *c, sl_mutex_t *m) SL_REQUIRES(*m)
{
    return pthread_cond_wait(c, m);
}

static inline int sl_cond_timedwait(pthread_cond_t *c, sl_mutex_t *m,
                                    const struct timespec *deadline) SL_REQUIRES(*m)
{
    return pthread_cond_timedwait(c, m, deadline);
}

#endif
