/* Reading a memory-mapped file without dying of SIGBUS.
 *
 * The reader decodes stripes straight from a read-only mapping of the data
 * file (no pread copy out of the page cache). An access to a mapped page
 * that the file no longer has (truncated by someone under the reader) or
 * that storage cannot deliver (an I/O error, which pread would report as
 * EIO) raises SIGBUS. While a thread runs a guarded call, a SIGBUS on an
 * address inside the range it registered jumps back to wh_mapguard_run,
 * which reports it; any other SIGBUS goes to the handler that was there
 * before, or kills the process as it would have without us.
 *
 * The jump leaves the guarded call mid-way, which is safe because a fault
 * can only come from reading the mapping: checksums, zstd decompression and
 * the decoders, which hold no lock and allocate nothing (allocations of a
 * stripe happen between them, never while the mapping is read). */
#include "wh_internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

static _Thread_local sigjmp_buf *guard_jump;
static _Thread_local uintptr_t guard_lo, guard_hi;

static struct sigaction previous;
static bool installed;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    uintptr_t at = (uintptr_t)info->si_addr;
    if (guard_jump != NULL && at >= guard_lo && at < guard_hi) siglongjmp(*guard_jump, 1);
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* Not ours, and nobody else's: restore the default action; returning
     * re-runs the faulting access, which now ends the process as usual. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
}

static void install(void)
{
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

bool wh_mapguard_init(void)
{
    pthread_once(&install_once, install);
    return installed;
}

sl_err_t wh_mapguard_run(const void *lo, size_t len, wh_guarded_fn fn, void *arg, bool *faulted,
                         sl_error_t *err)
{
    *faulted = false;
    if (!wh_mapguard_init()) return fn(arg, err);
    sigjmp_buf *const outer = guard_jump;
    const uintptr_t outer_lo = guard_lo, outer_hi = guard_hi;
    sigjmp_buf jump;
    /* savemask 1: the handler runs with SIGBUS blocked; the jump unblocks it. */
    if (sigsetjmp(jump, 1) != 0) {
        guard_jump = outer;
        guard_lo = outer_lo;
        guard_hi = outer_hi;
        *faulted = true;
        return SL_ERR_IO;
    }
    guard_lo = (uintptr_t)lo;
    guard_hi = guard_lo + len;
    atomic_signal_fence(memory_order_seq_cst); /* the range is set before the jump is armed */
    guard_jump = &jump;
    sl_err_t rc = fn(arg, err);
    guard_jump = outer;
    guard_lo = outer_lo;
    guard_hi = outer_hi;
    return rc;
}
