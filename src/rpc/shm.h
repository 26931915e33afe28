/* The shared-memory hand-over's side channel (docs/PROTOCOL.md
 * "Shared-memory hand-over"): a worker with a frame heap (common/shm_heap.h)
 * listens on an abstract Unix socket; a trainer client on the same host
 * (same network namespace, same uid) connects, presents the nonce its
 * WELCOME gave, and is sent the heap's memfd (SCM_RIGHTS), which it maps
 * read-only. Both sides are here.
 *
 * On the socket, little-endian, fixed size:
 *   request (client -> worker), 40 bytes:
 *     magic "SLSM" | u32 version (1) | 32 bytes nonce
 *   reply (worker -> client), 24 bytes, with the memfd attached (SCM_RIGHTS)
 *   when status is 0:
 *     magic "SLSM" | u32 version (1) | i32 status (0, or an sl_err_t) |
 *     u32 flags | u64 size (bytes of the heap; 0 when refused)
 * flags: bit 0 SL_RPC_SHM_HOLD (only to a connection whose HELLO said
 * shm_hold; an older worker sends 0): the worker keeps each block of this
 * connection's descriptors past its ACK, until the client releases it
 * (Ack.released_ids) or closes this socket; the other bits are 0. Without
 * it the worker closes the connection after the reply; with it the socket
 * stays open as the client's hold on the heap, and its end (the client
 * unmapped, or its process died) frees every block it still held. */
#ifndef SLUICE_RPC_SHM_H
#define SLUICE_RPC_SHM_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/err.h"

#define SL_RPC_SHM_MAGIC "SLSM"
#define SL_RPC_SHM_VERSION 1
#define SL_RPC_SHM_NONCE_BYTES 32
#define SL_RPC_SHM_NAME_MAX 64
#define SL_RPC_SHM_HOLD 1u /* reply flag: blocks held until released (above) */

/* ---- worker side ---- */

/* Listen on a new abstract Unix socket named "sluice-shm-<pid>-<16 hex
 * random>" (written to name, without the leading NUL). @return SL_ERR_IO
 * with the call and errno. */
sl_err_t sl_rpc_shm_listen(char name[SL_RPC_SHM_NAME_MAX], int *fd, sl_error_t *err);

/* 32 random bytes. @return SL_ERR_IO when there are none. */
sl_err_t sl_rpc_shm_nonce(uint8_t nonce[SL_RPC_SHM_NONCE_BYTES], sl_error_t *err);

/* Does this nonce belong to a connection waiting for the heap? (The
 * worker's: it marks that connection granted.) @return < 0: refuse;
 * otherwise the reply's flags (SL_RPC_SHM_HOLD or 0). */
typedef int (*sl_rpc_shm_check_fn)(void *ctx, const uint8_t nonce[SL_RPC_SHM_NONCE_BYTES]);

/* Serve one accepted connection cfd (not closed here) before deadline_ms
 * (sl_clock_ms): read the request, refuse a peer of another uid than this
 * process's (SO_PEERCRED) or a nonce check() does not know, else send
 * memfd and size. A refusal is answered with its status (no fd). @return
 * SL_OK when the memfd went out; otherwise why not (SL_ERR_INVALID for
 * the uid or nonce, SL_ERR_PROTOCOL for a malformed request,
 * SL_ERR_TIMEOUT, SL_ERR_IO). */
sl_err_t sl_rpc_shm_serve(int cfd, uint64_t deadline_ms, sl_rpc_shm_check_fn check, void *ctx,
                          int memfd, uint64_t size, sl_error_t *err);

/* ---- client side ---- */

/* Blocks a worker lends under a hold start on this boundary and own whole
 * units of it (the worker's heap granule, a page), so that a client can
 * drop its private copies of one block without touching another's. */
#define SL_RPC_SHM_BLOCK_ALIGN 4096u

/* A mapping of a worker's heap; base NULL: none. Without a hold it is
 * read-only (frames are copied out). hold: the worker granted
 * SL_RPC_SHM_HOLD, hold_fd is the side channel's socket, kept open until
 * detach (closing it frees what the client held), and the mapping is
 * private and writable: a user's writes into a batch read in place are
 * copied on write, kept in this process, never seen by the worker. */
typedef struct sl_rpc_shm_map {
    const uint8_t *base;
    uint64_t size;
    bool hold;
    bool read_only; /* a hold mapped shared and read-only (sl_rpc_shm_attach_read) */
    int hold_fd;
    int pagemap_fd;    /* with a hold: /proc/self/pagemap, or -1 */
    bool pagemap_scan; /* the kernel has PAGEMAP_SCAN (Linux 6.7) */
} sl_rpc_shm_map_t;

/* Connect to the abstract socket name, present nonce, receive the memfd and
 * map it (PROT_READ, MAP_SHARED; with a hold PROT_READ | PROT_WRITE,
 * MAP_PRIVATE) before deadline_ms. The memfd must be
 * sealed against shrinking and at least size bytes: the mapping can never
 * fault. @return SL_ERR_NOT_FOUND when there is no such socket (another
 * host or network namespace), SL_ERR_INVALID when refused, SL_ERR_TIMEOUT,
 * SL_ERR_PROTOCOL for a malformed reply or memfd, SL_ERR_IO. */
sl_err_t sl_rpc_shm_attach(const char *name, const uint8_t *nonce, size_t nonce_len,
                           uint64_t deadline_ms, sl_rpc_shm_map_t *out, sl_error_t *err);

/* sl_rpc_shm_attach with read_only: a hold is mapped PROT_READ, MAP_SHARED
 * as without one (out->read_only set), for a client whose user only reads
 * the batches (sluice read): a write faults, and a release has no copies
 * to look for (sl_rpc_shm_forget reads no page table). */
sl_err_t sl_rpc_shm_attach_read(const char *name, const uint8_t *nonce, size_t nonce_len,
                                uint64_t deadline_ms, bool read_only, sl_rpc_shm_map_t *out,
                                sl_error_t *err);

/* A block of a held mapping [off, off + len) goes back to the worker:
 * drop this process's copies of its pages (writes made into a batch read
 * there), so that the next frame the worker puts in the block is read from
 * the heap, not from a stale private page. Pages only read are left
 * mapped. off must be a block's start (SL_RPC_SHM_BLOCK_ALIGN). dropped
 * (may be NULL): whether there were copies to drop. @return
 * SL_ERR_INVALID, SL_ERR_IO. */
sl_err_t sl_rpc_shm_forget(const sl_rpc_shm_map_t *m, uint64_t off, uint64_t len, bool *dropped,
                           sl_error_t *err);

/* Unmap, and close the hold socket; m may be unmapped (base NULL). */
void sl_rpc_shm_detach(sl_rpc_shm_map_t *m);

#endif
