/* The shared-memory hand-over's side channel (shm.h): an abstract Unix
 * socket, a nonce in, a memfd out. */
#include "rpc/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fileio.h" /* sl_le_*: the request and reply are little-endian */

#define REQUEST_BYTES (8 + SL_RPC_SHM_NONCE_BYTES)
#define REPLY_BYTES 24

/* An abstract socket address for name; *len its length. */
static void address(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strnlen(name, sizeof sa->sun_path - 1);
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] == 0: the abstract namespace */
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Wait for events on fd until deadline_ms. @return SL_OK, SL_ERR_TIMEOUT. */
static sl_err_t wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = sl_clock_ms();
        if (now >= deadline_ms) return SL_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(deadline_ms - now > 60000 ? 60000 : deadline_ms - now));
        if (r > 0) return SL_OK;
        if (r < 0 && errno != EINTR) return SL_ERR_IO;
    }
}

/* Read exactly len bytes (and, when fd_out, a descriptor sent with them)
 * before deadline_ms. */
static sl_err_t read_all(int fd, uint8_t *buf, size_t len, int *fd_out, uint64_t deadline_ms,
                         sl_error_t *err)
{
    size_t got = 0;
    while (got < len) {
        sl_err_t rc = wait_fd(fd, POLLIN, deadline_ms);
        if (rc == SL_ERR_TIMEOUT) return sl_error_set(err, rc, "no answer in time");
        if (rc != SL_OK) return sl_error_set(err, rc, "poll: %s", strerror(errno));
        struct iovec iov = {buf + got, len - got};
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } cm;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        if (fd_out) {
            m.msg_control = cm.b;
            m.msg_controllen = sizeof cm.b;
        }
        ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n < 0) return sl_error_set(err, SL_ERR_IO, "recvmsg: %s", strerror(errno));
        if (n == 0)
            return sl_error_set(err, SL_ERR_CLOSED, "closed after %zu of %zu bytes", got, len);
        if (fd_out) {
            for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
                if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
                    h->cmsg_len == CMSG_LEN(sizeof(int))) {
                    int got_fd;
                    memcpy(&got_fd, CMSG_DATA(h), sizeof got_fd);
                    if (*fd_out >= 0)
                        close(got_fd); /* only one is expected */
                    else
                        *fd_out = got_fd;
                }
            }
        }
        got += (size_t)n;
    }
    return SL_OK;
}

/* Write len bytes (with passfd attached when >= 0) before deadline_ms. */
static sl_err_t write_all(int fd, const uint8_t *buf, size_t len, int passfd, uint64_t deadline_ms,
                          sl_error_t *err)
{
    size_t put = 0;
    while (put < len) {
        sl_err_t rc = wait_fd(fd, POLLOUT, deadline_ms);
        if (rc == SL_ERR_TIMEOUT) return sl_error_set(err, rc, "peer not reading in time");
        if (rc != SL_OK) return sl_error_set(err, rc, "poll: %s", strerror(errno));
        struct iovec iov = {(void *)(buf + put), len - put};
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } cm;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        if (passfd >= 0 && put == 0) {
            memset(&cm, 0, sizeof cm);
            m.msg_control = cm.b;
            m.msg_controllen = sizeof cm.b;
            struct cmsghdr *h = CMSG_FIRSTHDR(&m);
            h->cmsg_level = SOL_SOCKET;
            h->cmsg_type = SCM_RIGHTS;
            h->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(h), &passfd, sizeof passfd);
        }
        ssize_t n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n < 0) return sl_error_set(err, SL_ERR_IO, "sendmsg: %s", strerror(errno));
        put += (size_t)n;
    }
    return SL_OK;
}

sl_err_t sl_rpc_shm_nonce(uint8_t nonce[SL_RPC_SHM_NONCE_BYTES], sl_error_t *err)
{
    /* the kernel's CSPRNG: up to 256 bytes come whole, uninterrupted */
    if (getrandom(nonce, SL_RPC_SHM_NONCE_BYTES, 0) != SL_RPC_SHM_NONCE_BYTES)
        return sl_error_set(err, SL_ERR_IO, "shared memory: no random bytes for a nonce");
    return SL_OK;
}

sl_err_t sl_rpc_shm_listen(char name[SL_RPC_SHM_NAME_MAX], int *fd, sl_error_t *err)
{
    uint8_t r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return sl_error_set(err, SL_ERR_IO, "shared memory: no random bytes for a socket name");
    snprintf(name, SL_RPC_SHM_NAME_MAX, "sluice-shm-%d-%016llx", (int)getpid(),
             (unsigned long long)sl_le_get_u64(r));
    struct sockaddr_un sa;
    socklen_t len;
    address(name, &sa, &len);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return sl_error_set(err, SL_ERR_IO, "shared memory: socket: %s", strerror(errno));
    if (bind(s, (struct sockaddr *)&sa, len) != 0 || listen(s, 64) != 0) {
        int e = errno;
        close(s);
        return sl_error_set(err, SL_ERR_IO, "shared memory: listen on @%s: %s", name, strerror(e));
    }
    *fd = s;
    return SL_OK;
}

static sl_err_t reply(int cfd, sl_err_t status, uint32_t flags, int memfd, uint64_t size,
                      uint64_t deadline_ms, sl_error_t *err)
{
    uint8_t out[REPLY_BYTES] = {0};
    memcpy(out, SL_RPC_SHM_MAGIC, 4);
    sl_le_put_u32(out + 4, SL_RPC_SHM_VERSION);
    sl_le_put_u32(out + 8, (uint32_t)(int32_t)status);
    sl_le_put_u32(out + 12, flags);
    sl_le_put_u64(out + 16, size);
    return write_all(cfd, out, sizeof out, status == SL_OK ? memfd : -1, deadline_ms, err);
}

sl_err_t sl_rpc_shm_serve(int cfd, uint64_t deadline_ms, sl_rpc_shm_check_fn check, void *ctx,
                          int memfd, uint64_t size, sl_error_t *err)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return sl_error_set(err, SL_ERR_IO, "SO_PEERCRED: %s", strerror(errno));
    if (cred.uid != geteuid()) {
        reply(cfd, SL_ERR_INVALID, 0, -1, 0, deadline_ms, NULL);
        return sl_error_set(err, SL_ERR_INVALID, "refused pid %d: uid %u is not this worker's %u",
                            (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
    }
    uint8_t in[REQUEST_BYTES];
    sl_err_t rc = read_all(cfd, in, sizeof in, NULL, deadline_ms, err);
    if (rc != SL_OK) return sl_error_prefix(err, "pid %d: request: ", (int)cred.pid);
    if (memcmp(in, SL_RPC_SHM_MAGIC, 4) != 0 || sl_le_get_u32(in + 4) != SL_RPC_SHM_VERSION) {
        reply(cfd, SL_ERR_PROTOCOL, 0, -1, 0, deadline_ms, NULL);
        return sl_error_set(err, SL_ERR_PROTOCOL, "pid %d: not a version %d shared-memory request",
                            (int)cred.pid, SL_RPC_SHM_VERSION);
    }
    int flags = check(ctx, in + 8);
    if (flags < 0) {
        reply(cfd, SL_ERR_INVALID, 0, -1, 0, deadline_ms, NULL);
        return sl_error_set(err, SL_ERR_INVALID,
                            "refused pid %d: its nonce is no waiting connection's", (int)cred.pid);
    }
    rc = reply(cfd, SL_OK, (uint32_t)flags, memfd, size, deadline_ms, err);
    if (rc != SL_OK) return sl_error_prefix(err, "pid %d: reply: ", (int)cred.pid);
    return SL_OK;
}

/* The PAGEMAP_SCAN ioctl of /proc/PID/pagemap (Linux 6.7,
 * Documentation/admin-guide/mm/pagemap.rst), declared here as the kernel's
 * uapi <linux/fs.h> has it: the headers of the distributions we build on
 * may predate it, and <linux/fs.h> clashes with <sys/mount.h>. The layout
 * is the kernel's ABI. */
struct pm_page_region {
    uint64_t start, end, categories;
};
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define PM_PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_PAGE_IS_FILE (1u << 2)
#define PM_PAGE_IS_PRESENT (1u << 3)
#define PM_PAGE_IS_SWAPPED (1u << 4)

/* Is there a page of this process's own in [p, p + len): present and not
 * a file page (the heap's), or swapped (only own pages swap)? The kernel
 * walks the range and stops at the first: no u64 a page copied out, about
 * 2/3 of the pread below (11.8 against 17.4 us for 1.4 MB, 2026-11-29).
 * @return 1, 0, or -1 when the ioctl is not there (or fails). */
static int own_pages_scan(int fd, uintptr_t p, uint64_t len)
{
    struct pm_page_region r;
    struct pm_scan_arg a = {.size = sizeof a,
                            .start = p,
                            .end = p + len,
                            .vec = (uintptr_t)&r,
                            .vec_len = 1,
                            .max_pages = 1,
                            .category_inverted = PM_PAGE_IS_FILE,
                            .category_mask = PM_PAGE_IS_FILE,
                            .category_anyof_mask = PM_PAGE_IS_PRESENT | PM_PAGE_IS_SWAPPED,
                            .return_mask =
                                PM_PAGE_IS_FILE | PM_PAGE_IS_PRESENT | PM_PAGE_IS_SWAPPED};
    int n = ioctl(fd, PM_PAGEMAP_SCAN, &a);
    return n < 0 ? -1 : n > 0;
}

sl_err_t sl_rpc_shm_attach(const char *name, const uint8_t *nonce, size_t nonce_len,
                           uint64_t deadline_ms, sl_rpc_shm_map_t *out, sl_error_t *err)
{
    return sl_rpc_shm_attach_read(name, nonce, nonce_len, deadline_ms, false, out, err);
}

sl_err_t sl_rpc_shm_attach_read(const char *name, const uint8_t *nonce, size_t nonce_len,
                                uint64_t deadline_ms, bool read_only, sl_rpc_shm_map_t *out,
                                sl_error_t *err)
{
    *out = (sl_rpc_shm_map_t){0};
    if (nonce_len != SL_RPC_SHM_NONCE_BYTES || !name || !name[0] ||
        strlen(name) >= SL_RPC_SHM_NAME_MAX)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "shared memory: welcome gave a %zu-byte nonce or a bad socket name",
                            nonce_len);
    struct sockaddr_un sa;
    socklen_t len;
    address(name, &sa, &len);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return sl_error_set(err, SL_ERR_IO, "shared memory: socket: %s", strerror(errno));
    if (connect(s, (struct sockaddr *)&sa, len) != 0) {
        int e = errno;
        close(s);
        /* another host or network namespace: the name is not there */
        return sl_error_set(err, e == ECONNREFUSED || e == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO,
                            "shared memory: connect to @%s: %s", name, strerror(e));
    }
    uint8_t req[REQUEST_BYTES];
    memcpy(req, SL_RPC_SHM_MAGIC, 4);
    sl_le_put_u32(req + 4, SL_RPC_SHM_VERSION);
    memcpy(req + 8, nonce, SL_RPC_SHM_NONCE_BYTES);
    uint8_t in[REPLY_BYTES];
    int memfd = -1;
    sl_err_t rc = write_all(s, req, sizeof req, -1, deadline_ms, err);
    if (rc == SL_OK) rc = read_all(s, in, sizeof in, &memfd, deadline_ms, err);
    bool hold = rc == SL_OK && (sl_le_get_u32(in + 12) & SL_RPC_SHM_HOLD);
    if (!hold) close(s);
    if (rc != SL_OK) {
        if (memfd >= 0) close(memfd);
        return sl_error_prefix(err, "shared memory @%s: ", name);
    }
    int32_t status = (int32_t)sl_le_get_u32(in + 8);
    uint64_t size = sl_le_get_u64(in + 16);
    if (memcmp(in, SL_RPC_SHM_MAGIC, 4) != 0 || sl_le_get_u32(in + 4) != SL_RPC_SHM_VERSION)
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "shared memory @%s: a malformed reply", name);
    else if (status != 0)
        rc = sl_error_set(err, SL_ERR_INVALID, "shared memory @%s: refused (%s)", name,
                          sl_err_str((sl_err_t)status));
    else if (memfd < 0)
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "shared memory @%s: no descriptor came", name);
    if (rc != SL_OK) {
        if (memfd >= 0) close(memfd);
        if (hold) close(s);
        return rc;
    }
    /* Only a memfd sealed against shrinking, at least size bytes, can be
     * read without a SIGBUS whatever its owner does later. */
    struct stat st;
    int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(memfd, &st) != 0 || size == 0 ||
        (uint64_t)st.st_size < size || size > SIZE_MAX) {
        close(memfd);
        if (hold) close(s);
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "shared memory @%s: the descriptor is not a sealed memfd of %llu bytes",
                            name, (unsigned long long)size);
    }
    /* With a hold the batches are read in place and handed to the user,
     * who may write them (an in-place op on a tensor): a private mapping
     * keeps such writes in this process (copy on write) where a read-only
     * one would fault; sl_rpc_shm_forget drops the copies before a block
     * goes back. Without a hold frames are only copied out. */
    /* NORESERVE: the copies are of the few pages a user writes, not the
     * whole heap, which need not be charged against overcommit up front */
    /* A user who only reads (read_only) needs neither. */
    bool priv = hold && !read_only;
    void *p = priv ? mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE,
                          memfd, 0)
                   : mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, memfd, 0);
    int e = errno;
    close(memfd);
    if (p == MAP_FAILED && hold) close(s);
    if (p == MAP_FAILED)
        return sl_error_set(err, SL_ERR_IO, "shared memory @%s: mmap of %llu bytes: %s", name,
                            (unsigned long long)size, strerror(e));
    *out = (sl_rpc_shm_map_t){.base = p,
                              .size = size,
                              .hold = hold,
                              .read_only = hold && read_only,
                              .hold_fd = hold ? s : -1,
                              /* without it every release drops its pages */
                              .pagemap_fd =
                                  priv ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1};
    /* asked once: a kernel before 6.7 answers ENOTTY, and every release
     * then reads the pagemap */
    out->pagemap_scan =
        out->pagemap_fd >= 0 &&
        own_pages_scan(out->pagemap_fd, (uintptr_t)out->base, SL_RPC_SHM_BLOCK_ALIGN) >= 0;
    return SL_OK;
}

/* Has this process a page of its own in [off, end) of a held mapping (a
 * write there was copied)? By PAGEMAP_SCAN where the kernel has it, else
 * from /proc/self/pagemap, one u64 per page: bit 63 present, 62 swapped
 * (only own pages swap), 61 a file page (the heap's own). @return 1, 0, or
 * -1 when it cannot tell. */
static int own_pages(const sl_rpc_shm_map_t *m, uint64_t off, uint64_t end)
{
    if (m->pagemap_fd < 0) return -1;
    if (m->pagemap_scan) {
        int own = own_pages_scan(m->pagemap_fd, (uintptr_t)m->base + off, end - off);
        if (own >= 0) return own;
    }
    uint64_t first = ((uintptr_t)m->base + off) / SL_RPC_SHM_BLOCK_ALIGN;
    uint64_t n = (end - off) / SL_RPC_SHM_BLOCK_ALIGN;
    uint64_t entry[512];
    for (uint64_t i = 0; i < n; i += 512) {
        uint64_t k = n - i < 512 ? n - i : 512;
        ssize_t got = pread(m->pagemap_fd, entry, (size_t)k * sizeof *entry,
                            (off_t)((first + i) * sizeof *entry));
        if (got != (ssize_t)(k * sizeof *entry)) return -1;
        for (uint64_t j = 0; j < k; j++) {
            uint64_t e = entry[j];
            if ((e >> 62 & 1) || ((e >> 63 & 1) && !(e >> 61 & 1))) return 1;
        }
    }
    return 0;
}

sl_err_t sl_rpc_shm_forget(const sl_rpc_shm_map_t *m, uint64_t off, uint64_t len, bool *dropped,
                           sl_error_t *err)
{
    if (dropped) *dropped = false;
    if (!m->hold || off % SL_RPC_SHM_BLOCK_ALIGN != 0 || off > m->size || len > m->size - off)
        return sl_error_set(
            err, SL_ERR_INVALID,
            "shared memory: [%llu, +%llu) is not a block of the %llu-byte held heap",
            (unsigned long long)off, (unsigned long long)len, (unsigned long long)m->size);
    /* a shared read-only mapping has no pages of this process's own */
    if (m->read_only) return SL_OK;
    uint64_t end = off + len;
    end = end + SL_RPC_SHM_BLOCK_ALIGN - 1 -
          (end + SL_RPC_SHM_BLOCK_ALIGN - 1) % SL_RPC_SHM_BLOCK_ALIGN;
    if (end > m->size) end = m->size;
    /* Most batches are only read: their pages are the heap's, nothing to
     * drop, and dropping them would cost a fault per page of the next
     * frame there. */
    if (own_pages(m, off, end) == 0) return SL_OK;
    /* a private file mapping: the pages read the memfd again on next touch */
    if (madvise((void *)(m->base + off), (size_t)(end - off), MADV_DONTNEED) != 0)
        return sl_error_set(err, SL_ERR_IO, "shared memory: madvise of [%llu, +%llu): %s",
                            (unsigned long long)off, (unsigned long long)(end - off),
                            strerror(errno));
    if (dropped) *dropped = true;
    return SL_OK;
}

void sl_rpc_shm_detach(sl_rpc_shm_map_t *m)
{
    if (m->base) munmap((void *)m->base, (size_t)m->size);
    /* after the unmap: the worker may reuse the blocks once this closes */
    if (m->base && m->hold) close(m->hold_fd);
    if (m->base && m->hold && m->pagemap_fd >= 0) close(m->pagemap_fd);
    *m = (sl_rpc_shm_map_t){0};
}
