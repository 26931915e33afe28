/* The HTTP engine (http.h): curl multi over a shared connection cache,
 * bounded parallelism and in-flight bytes, retries with capped
 * exponential backoff and full jitter. Connections live in a pool of
 * multi handles (one per concurrent run), the DNS cache in a share handle. */
#include "http.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/mem.h"
#include "netlib/netlib_curl.h"
#include "netlib/netlib_xml.h"

#define POOL_MAX 32

struct sl_store_http {
    const sl_allocator_t *a;
    sl_store_opts_t opts;
    char region[64];
    char sigv4[96]; /* "aws:amz:REGION:s3" */
    char *ca;       /* the CA bundle's path (a copy), or NULL */
    sl_creds_t *creds;
    CURLSH *share; /* the DNS cache, shared by every thread */
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
    /* Idle multi handles, each with its own connection cache: a run takes
     * one and gives it back, so connections are reused across calls and
     * threads but never by two threads at once (libcurl does not support
     * sharing a connection cache between concurrent threads). */
    pthread_mutex_t pool_mu;
    CURLM *pool[POOL_MAX];
    int npool;
    _Atomic uint64_t seed;
};

static void share_lock(CURL *e, curl_lock_data d, curl_lock_access acc, void *ctx)
{
    (void)e;
    (void)acc;
    pthread_mutex_lock(&((sl_store_http_t *)ctx)->locks[d]);
}

static void share_unlock(CURL *e, curl_lock_data d, void *ctx)
{
    (void)e;
    pthread_mutex_unlock(&((sl_store_http_t *)ctx)->locks[d]);
}

/* libcurl's functions: loaded by sl_store_http_new before any call here. */
static const sl_netlib_curl_t *libcurl(void)
{
    return sl_netlib_curl(NULL);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    libcurl()->global_init(CURL_GLOBAL_DEFAULT);
}

sl_err_t sl_store_http_new(const sl_store_opts_t *opts, const char *region, sl_creds_t *creds,
                           sl_store_http_t **out, sl_error_t *err)
{
    /* libxml2 too: the answers' XML is read with it (xml.h) */
    if (sl_netlib_curl(err) == NULL || sl_netlib_xml(err) == NULL) return SL_ERR_UNSUPPORTED;
    pthread_once(&curl_once, curl_init);
    const sl_allocator_t *a = opts->alloc ? opts->alloc : sl_allocator_default();
    sl_store_http_t *h = sl_calloc(a, 1, sizeof *h);
    if (h == NULL) return sl_error_set(err, SL_ERR_NOMEM, "HTTP client: out of memory");
    h->a = a;
    h->opts = *opts;
    h->creds = creds;
    if (opts->ca_bundle && (h->ca = sl_strdup(a, opts->ca_bundle)) == NULL) {
        sl_free(a, h, sizeof *h);
        return sl_error_set(err, SL_ERR_NOMEM, "HTTP client: out of memory");
    }
    snprintf(h->region, sizeof h->region, "%s", region);
    snprintf(h->sigv4, sizeof h->sigv4, "aws:amz:%s:s3", region);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&h->locks[i], NULL);
    h->seed = sl_clock_ns() ^ (uint64_t)getpid() << 32;
    h->share = libcurl()->share_init();
    if (h->share == NULL) {
        sl_store_http_destroy(h);
        return sl_error_set(err, SL_ERR_NOMEM, "HTTP client: curl_share_init failed");
    }
    libcurl()->share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock);
    libcurl()->share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    libcurl()->share_setopt(h->share, CURLSHOPT_USERDATA, h);
    libcurl()->share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    *out = h;
    return SL_OK;
}

void sl_store_http_destroy(sl_store_http_t *h)
{
    if (h == NULL) return;
    for (int i = 0; i < h->npool; i++)
        libcurl()->multi_cleanup(h->pool[i]);
    pthread_mutex_destroy(&h->pool_mu);
    if (h->share) libcurl()->share_cleanup(h->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&h->locks[i]);
    sl_strfree(h->a, h->ca);
    sl_free(h->a, h, sizeof *h);
}

bool sl_store_buf_add(const sl_allocator_t *a, sl_store_buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = sl_realloc(a, b->data, b->cap, cap);
        if (d == NULL) return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool sl_store_buf_enc(const sl_allocator_t *a, sl_store_buf_t *b, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        char e[3] = {'%', hex[c >> 4], hex[c & 15]};
        if (!(plain ? sl_store_buf_add(a, b, (const char *)&c, 1) : sl_store_buf_add(a, b, e, 3)))
            return false;
    }
    if (b->data == NULL) return sl_store_buf_add(a, b, "", 0);
    return true;
}

void sl_store_buf_free(const sl_allocator_t *a, sl_store_buf_t *b)
{
    sl_free(a, b->data, b->cap);
    memset(b, 0, sizeof *b);
}

/* ---- one transfer's callbacks ---- */

/* A ranged GET's 2xx body goes straight into the caller's buffer; more
 * than was asked fails the transfer (curl sees a short write). */
static size_t on_body(char *p, size_t n, sl_store_req_t *r)
{
    if (n > r->len - r->got) return 0;
    memcpy((char *)r->dst + r->got, p, n);
    r->got += n;
    return n;
}

/* curl writes into resp with this allocator; kept beside the request. */
typedef struct body_ctx {
    sl_store_req_t *r;
    const sl_allocator_t *a;
} body_ctx_t;

static size_t on_header(char *p, size_t size, size_t nmemb, void *ctx)
{
    sl_store_req_t *r = ctx;
    size_t n = size * nmemb, k;
    struct {
        const char *name;
        char *dst;
    } keep[] = {{"etag:", r->etag}, {"x-amz-version-id:", r->version}};
    for (size_t i = 0; i < 2; i++) {
        k = strlen(keep[i].name);
        if (n > k && strncasecmp(p, keep[i].name, k) == 0) {
            const char *v = p + k, *e = p + n;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
                e--;
            size_t len = (size_t)(e - v) < 127 ? (size_t)(e - v) : 127;
            memcpy(keep[i].dst, v, len);
            keep[i].dst[len] = '\0';
        }
    }
    unsigned long long first;
    if (n > 14 && strncasecmp(p, "content-range:", 14) == 0 &&
        sscanf(p + 14, " bytes %llu-", &first) == 1) {
        r->range_first = first;
        r->has_range = true;
    }
    if (n > 14 && strncasecmp(p, "last-modified:", 14) == 0) {
        char buf[64];
        size_t len = n - 14 < 63 ? n - 14 : 63;
        memcpy(buf, p + 14, len);
        buf[len] = '\0';
        time_t t = libcurl()->getdate(buf, NULL);
        if (t > 0) r->mtime_s = (int64_t)t;
    }
    return n;
}

static size_t on_send(char *p, size_t size, size_t nmemb, void *ctx)
{
    sl_store_req_t *r = ctx;
    size_t n = size * nmemb;
    if (n > r->body_len - r->sent) n = (size_t)(r->body_len - r->sent);
    if (n == 0) return 0;
    if (r->body) {
        memcpy(p, (const char *)r->body + r->sent, n);
    } else {
        ssize_t got = pread(r->body_fd, p, n, (off_t)(r->body_off + r->sent));
        if (got <= 0) return CURL_READFUNC_ABORT;
        n = (size_t)got;
    }
    r->sent += n;
    return n;
}

/* ---- the engine ---- */

typedef struct run {
    sl_store_http_t *h;
    sl_store_t *st;
    CURLM *multi;
} run_t;

static size_t on_resp(char *p, size_t size, size_t nmemb, void *ctx)
{
    body_ctx_t *bc = ctx;
    sl_store_req_t *r = bc->r;
    size_t n = size * nmemb;
    long status = 0;
    libcurl()->easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    /* A 200 to a ranged GET is the whole object from byte 0: right only
     * when the range starts there (more than asked then fails the write). */
    if (r->ranged && status == 200 && r->offset != 0) return 0;
    if (r->ranged && status / 100 == 2) return on_body(p, n, r);
    size_t max = r->max_resp ? r->max_resp : (1u << 20);
    if (r->resp.len + n > max) return 0;
    return sl_store_buf_add(bc->a, &r->resp, p, n) ? n : 0;
}

static sl_err_t start(run_t *run, sl_store_req_t *r)
{
    sl_store_http_t *h = run->h;
    CURL *e = libcurl()->easy_init();
    if (e == NULL) return sl_error_set(&r->err, SL_ERR_NOMEM, "%s: curl_easy_init failed", r->what);
    body_ctx_t *bc = sl_calloc(h->a, 1, sizeof *bc);
    if (bc == NULL) {
        libcurl()->easy_cleanup(e);
        return sl_error_set(&r->err, SL_ERR_NOMEM, "%s: out of memory", r->what);
    }
    bc->r = r;
    bc->a = h->a;
    r->easy = e;
    r->got = 0;
    r->sent = 0;
    r->status = 0;
    r->etag[0] = r->version[0] = '\0';
    r->has_range = false;
    r->resp.len = 0;
    struct curl_slist *hl = NULL;
    char line[256];
    for (int i = 0; i < 4 && r->headers[i]; i++)
        hl = libcurl()->slist_append(hl, r->headers[i]);
    if (r->ranged) {
        snprintf(line, sizeof line, "Range: bytes=%llu-%llu", (unsigned long long)r->offset,
                 (unsigned long long)(r->offset + r->len - 1));
        hl = libcurl()->slist_append(hl, line);
    }
    if (r->if_match) {
        snprintf(line, sizeof line, "If-Match: %s", r->if_match);
        hl = libcurl()->slist_append(hl, line);
    }
    sl_creds_value_t cv;
    if (r->sign) {
        sl_err_t rc = sl_creds_get(h->creds, &cv, &r->err);
        if (rc != SL_OK) {
            libcurl()->slist_free_all(hl);
            libcurl()->easy_cleanup(e);
            sl_free(h->a, bc, sizeof *bc);
            r->easy = NULL;
            return rc;
        }
        /* The payload's hash: what S3 checks (s3proxy answers 500 without it). */
        snprintf(line, sizeof line, "x-amz-content-sha256: %s",
                 r->body_sha256[0]
                     ? r->body_sha256
                     : "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        hl = libcurl()->slist_append(hl, line);
        if (cv.token[0]) {
            char *t = sl_strfmt(h->a, "x-amz-security-token: %s", cv.token);
            if (t) {
                hl = libcurl()->slist_append(hl, t);
                memset(t, 0, strlen(t));
                sl_strfree(h->a, t);
            }
        }
        libcurl()->easy_setopt(e, CURLOPT_AWS_SIGV4, h->sigv4);
        libcurl()->easy_setopt(e, CURLOPT_USERNAME, cv.key_id);
        libcurl()->easy_setopt(e, CURLOPT_PASSWORD, cv.secret);
        sl_creds_wipe(&cv);
    }
    r->slist = hl;
    libcurl()->easy_setopt(e, CURLOPT_URL, r->url);
    libcurl()->easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    libcurl()->easy_setopt(e, CURLOPT_SHARE, h->share);
    libcurl()->easy_setopt(e, CURLOPT_PRIVATE, bc);
    libcurl()->easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    libcurl()->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)h->opts.connect_timeout_ms);
    libcurl()->easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)h->opts.request_timeout_ms);
    libcurl()->easy_setopt(e, CURLOPT_WRITEFUNCTION, on_resp);
    libcurl()->easy_setopt(e, CURLOPT_WRITEDATA, bc);
    libcurl()->easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    libcurl()->easy_setopt(e, CURLOPT_HEADERDATA, r);
    if (h->ca) libcurl()->easy_setopt(e, CURLOPT_CAINFO, h->ca);
    /* Large ranges: fewer, larger reads and callbacks than the 16 KiB default. */
    if (r->ranged && r->len >= (1u << 20))
        libcurl()->easy_setopt(e, CURLOPT_BUFFERSIZE, 512L << 10);
    if (strcmp(r->method, "HEAD") == 0) {
        libcurl()->easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        libcurl()->easy_setopt(e, CURLOPT_UPLOAD, 1L);
        libcurl()->easy_setopt(e, CURLOPT_READFUNCTION, on_send);
        libcurl()->easy_setopt(e, CURLOPT_READDATA, r);
        libcurl()->easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "POST") == 0) {
        libcurl()->easy_setopt(e, CURLOPT_POST, 1L);
        libcurl()->easy_setopt(e, CURLOPT_READFUNCTION, on_send);
        libcurl()->easy_setopt(e, CURLOPT_READDATA, r);
        libcurl()->easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "GET") != 0) {
        libcurl()->easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    }
    r->attempts++;
    if (run->st) {
        atomic_fetch_add(&run->st->requests, 1);
        if (r->attempts > 1) atomic_fetch_add(&run->st->retries, 1);
    }
    r->t0_ns = sl_clock_ns();
    libcurl()->multi_add_handle(run->multi, e);
    r->active = true;
    return SL_OK;
}

static void finish_easy(run_t *run, sl_store_req_t *r)
{
    if (r->easy == NULL) return;
    body_ctx_t *bc = NULL;
    libcurl()->easy_getinfo(r->easy, CURLINFO_PRIVATE, (char **)&bc);
    libcurl()->multi_remove_handle(run->multi, r->easy);
    libcurl()->easy_cleanup(r->easy);
    libcurl()->slist_free_all(r->slist);
    sl_free(run->h->a, bc, sizeof *bc);
    r->easy = NULL;
    r->slist = NULL;
    r->active = false;
}

static const char *range_words(const sl_store_req_t *r, char *buf, size_t cap)
{
    if (!r->ranged) return "";
    snprintf(buf, cap, " bytes=%llu-%llu", (unsigned long long)r->offset,
             (unsigned long long)(r->offset + r->len - 1));
    return buf;
}

/* Classify how an attempt ended. @return true when it should be tried
 * again; otherwise r->result and r->err are final. */
static bool judge(sl_store_req_t *r, CURLcode cc)
{
    char rwb[64], code[64], msg[256];
    const char *rw = range_words(r, rwb, sizeof rwb);
    if (cc != CURLE_OK) {
        bool retry = cc == CURLE_COULDNT_CONNECT || cc == CURLE_OPERATION_TIMEDOUT ||
                     cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
                     cc == CURLE_PARTIAL_FILE || cc == CURLE_COULDNT_RESOLVE_HOST ||
                     cc == CURLE_HTTP2_STREAM;
        if (cc == CURLE_WRITE_ERROR && r->ranged && r->status == 200 && r->offset != 0) {
            r->result = sl_error_set(&r->err, SL_ERR_PROTOCOL,
                                     "%s: %s%s: the server ignored the Range (HTTP 200)", r->what,
                                     r->method, rw);
            return false;
        }
        if (cc == CURLE_WRITE_ERROR && r->ranged && r->status / 100 == 2) {
            r->result = sl_error_set(&r->err, SL_ERR_PROTOCOL,
                                     "%s: %s%s: the server sent more bytes than asked", r->what,
                                     r->method, rw);
            return false;
        }
        r->result =
            sl_error_set(&r->err, cc == CURLE_OPERATION_TIMEDOUT ? SL_ERR_TIMEOUT : SL_ERR_IO,
                         "%s: %s%s: %s", r->what, r->method, rw, libcurl()->easy_strerror(cc));
        return retry;
    }
    if (r->status / 100 == 2) {
        /* The right number of bytes from the wrong place would pass every
         * other check (a cache or proxy that mangles ranges). */
        if (r->ranged && r->status == 206 && r->has_range && r->range_first != r->offset) {
            r->result = sl_error_set(&r->err, SL_ERR_PROTOCOL,
                                     "%s: GET%s: the server answered from byte %llu", r->what, rw,
                                     (unsigned long long)r->range_first);
            return false;
        }
        if (r->ranged && r->got != r->len) {
            r->result = sl_error_set(&r->err, SL_ERR_TRUNCATED,
                                     "%s: GET%s: the object ends after %zu of the %zu bytes asked",
                                     r->what, rw, r->got, r->len);
            return false;
        }
        r->result = SL_OK;
        return false;
    }
    sl_store_xml_error(r->resp.data, r->resp.len, code, sizeof code, msg, sizeof msg);
    if (code[0] == '\0') {
        /* HEAD answers carry no body: name the status as S3 would. */
        snprintf(code, sizeof code, "%s",
                 r->status == 404   ? "NotFound"
                 : r->status == 403 ? "Forbidden"
                                    : "NoBody");
    }
    sl_err_t rc = r->status == 404   ? SL_ERR_NOT_FOUND
                  : r->status == 412 ? SL_ERR_VERSION
                  : r->status == 416 ? SL_ERR_TRUNCATED
                                     : SL_ERR_IO;
    bool retry = r->status >= 500 || r->status == 429 || strcmp(code, "SlowDown") == 0 ||
                 strcmp(code, "RequestTimeout") == 0 || strcmp(code, "InternalError") == 0;
    if (r->status == 412)
        r->result = sl_error_set(&r->err, rc,
                                 "%s: %s%s: replaced since it was planned (ETag no longer %s): "
                                 "HTTP 412 %s",
                                 r->what, r->method, rw, r->if_match ? r->if_match : "?", code);
    else
        r->result = sl_error_set(&r->err, rc, "%s: %s%s: HTTP %ld %s%s%s", r->what, r->method, rw,
                                 r->status, code, msg[0] ? ": " : "", msg);
    return retry;
}

static uint64_t backoff_ms(sl_store_http_t *h, uint32_t attempts)
{
    uint64_t cap = h->opts.backoff_base_ms;
    for (uint32_t i = 1; i < attempts && cap < h->opts.backoff_max_ms; i++)
        cap *= 2;
    if (cap > h->opts.backoff_max_ms) cap = h->opts.backoff_max_ms;
    /* Full jitter (a random wait in [0, cap]): clients that failed
     * together do not retry together. */
    uint64_t z = atomic_fetch_add(&h->seed, 0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z % (cap + 1);
}

static CURLM *multi_take(sl_store_http_t *h)
{
    pthread_mutex_lock(&h->pool_mu);
    CURLM *m = h->npool > 0 ? h->pool[--h->npool] : NULL;
    pthread_mutex_unlock(&h->pool_mu);
    if (m == NULL &&
        (m = libcurl()->multi_init()) != NULL) /* Idle connections kept for the next run. */
        libcurl()->multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)h->opts.max_connections);
    return m;
}

static void multi_give(sl_store_http_t *h, CURLM *m)
{
    pthread_mutex_lock(&h->pool_mu);
    if (h->npool < POOL_MAX) {
        h->pool[h->npool++] = m;
        m = NULL;
    }
    pthread_mutex_unlock(&h->pool_mu);
    if (m) libcurl()->multi_cleanup(m);
}

sl_err_t sl_store_http_run(sl_store_http_t *h, sl_store_t *st, sl_store_req_t **reqs, size_t n,
                           uint32_t max_conns, uint64_t max_bytes)
{
    run_t run = {h, st, multi_take(h)};
    if (run.multi == NULL) {
        for (size_t i = 0; i < n; i++)
            reqs[i]->result = sl_error_set(&reqs[i]->err, SL_ERR_NOMEM,
                                           "%s: curl_multi_init failed", reqs[i]->what);
        return SL_ERR_NOMEM;
    }
    if (max_conns == 0) max_conns = 1;
    libcurl()->multi_setopt(run.multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)max_conns);
    for (size_t i = 0; i < n; i++) {
        reqs[i]->attempts = 0;
        reqs[i]->not_before_ms = 0;
        reqs[i]->active = reqs[i]->done = false;
        reqs[i]->result = SL_ERR_AGAIN;
    }
    size_t done = 0,
           next = 0; /* requests before next that are neither active nor waiting are done */
    uint32_t active = 0;
    uint64_t bytes = 0;
    while (done < n) {
        uint64_t now = sl_clock_ms(), wake = now + 100;
        /* Start what the bounds allow, in order (retries first as they come). */
        for (size_t i = 0; i < n && active < max_conns; i++) {
            sl_store_req_t *r = reqs[i];
            if (r->done || r->active) continue;
            if (r->attempts == 0 && i != next) continue; /* new ones strictly in order */
            if (r->not_before_ms > now) {
                if (r->not_before_ms < wake) wake = r->not_before_ms;
                continue;
            }
            uint64_t need = r->ranged ? r->len : 0;
            if (active > 0 && bytes + need > max_bytes) break;
            if (start(&run, r) != SL_OK) {
                r->result = r->err.code;
                r->done = true;
                done++;
            } else {
                active++;
                bytes += need;
                if (st) atomic_fetch_add(&st->inflight_bytes, need);
            }
            if (r->attempts <= 1 && i == next) next++;
        }
        if (active == 0) {
            if (done < n && wake > now) usleep((useconds_t)((wake - now) * 1000));
            continue;
        }
        int running = 0;
        libcurl()->multi_perform(run.multi, &running);
        CURLMsg *m;
        int left;
        bool ended = false; /* a transfer ended: start the next before waiting */
        while ((m = libcurl()->multi_info_read(run.multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE) continue;
            ended = true;
            body_ctx_t *bc = NULL;
            libcurl()->easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&bc);
            sl_store_req_t *r = bc->r;
            CURLcode cc = m->data.result;
            libcurl()->easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
            curl_off_t cl = -1;
            libcurl()->easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
            r->content_length = cl >= 0 ? (uint64_t)cl : 0;
            finish_easy(&run, r);
            active--;
            bytes -= r->ranged ? r->len : 0;
            if (st) {
                if (r->ranged) atomic_fetch_sub(&st->inflight_bytes, r->len);
                int res = cc != CURLE_OK                         ? SL_STORE_NETWORK_ERROR
                          : r->status / 100 == 2                 ? SL_STORE_OK
                          : r->status >= 500 || r->status == 429 ? SL_STORE_SERVER_ERROR
                                                                 : SL_STORE_CLIENT_ERROR;
                int op = r->method[0] == 'H' ? SL_STORE_OP_HEAD
                         : strcmp(r->method, "GET") == 0
                             ? (r->list ? SL_STORE_OP_LIST : SL_STORE_OP_GET)
                             : SL_STORE_OP_PUT;
                sl_store_observe(st, op, res, (double)(sl_clock_ns() - r->t0_ns) / 1e9);
            }
            bool again = judge(r, cc);
            if (again && r->attempts < h->opts.max_attempts) {
                r->not_before_ms = sl_clock_ms() + backoff_ms(h, r->attempts);
                continue;
            }
            if (again) sl_error_prefix(&r->err, "after %u attempts: ", r->attempts);
            if (r->result == SL_OK && st && r->ranged) atomic_fetch_add(&st->bytes_read, r->got);
            r->done = true;
            done++;
        }
        if (done < n && active > 0 && !ended) {
            long ms = (long)(wake > now ? wake - now : 1);
            libcurl()->multi_poll(run.multi, NULL, 0, (int)(ms > 100 ? 100 : ms), NULL);
        }
    }
    multi_give(h, run.multi);
    for (size_t i = 0; i < n; i++)
        if (reqs[i]->result != SL_OK) return reqs[i]->result;
    return SL_OK;
}

void sl_store_req_free(sl_store_http_t *h, sl_store_req_t *r)
{
    sl_store_buf_free(h->a, &r->resp);
}
