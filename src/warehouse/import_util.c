/* Helpers shared by the importers and the generator: the row scratch the
 * line parsers fill, number parsing, message excerpts, clocks, directories. */
#include "import_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* An id list longer than this is refused rather than allocated: 2^28 ids
 * are 2 GiB, far past any real feature. */
#define MAX_LIST_IDS ((uint64_t)1 << 28)

sl_wh_row_buf_t *sl_wh_row_buf_new(const sl_wh_schema_t *schema, const sl_allocator_t *a)
{
    sl_wh_row_buf_t *b = sl_calloc(a, 1, sizeof *b);
    if (b == NULL) return NULL;
    b->a = a;
    b->schema = sl_wh_schema_clone(schema, a);
    if (b->schema == NULL) goto fail;
    b->T = sl_wh_schema_num_labels(schema);
    b->D = sl_wh_schema_num_dense(schema);
    b->S = sl_wh_schema_num_sparse(schema);
    /* +1: a zero-size allocation may return NULL, and NULL means failure here. */
    b->labels = sl_calloc(a, b->T + 1, sizeof *b->labels);
    b->dense = sl_calloc(a, b->D + 1, sizeof *b->dense);
    b->lists = sl_calloc(a, b->S + 1, sizeof *b->lists);
    b->ids = sl_calloc(a, b->S + 1, sizeof *b->ids);
    b->weights = sl_calloc(a, b->S + 1, sizeof *b->weights);
    b->cap = sl_calloc(a, b->S + 1, sizeof *b->cap);
    b->weighted = sl_calloc(a, b->S + 1, sizeof *b->weighted);
    if (b->labels == NULL || b->dense == NULL || b->lists == NULL || b->ids == NULL ||
        b->weights == NULL || b->cap == NULL || b->weighted == NULL)
        goto fail;
    for (uint32_t s = 0; s < b->S; s++) {
        b->weighted[s] = sl_wh_schema_sparse(schema, s)->kind == SL_WH_WEIGHTED;
        if (!imp_reserve(b, s, 16)) goto fail;
        b->lists[s].ids = b->ids[s];
    }
    return b;
fail:
    sl_wh_row_buf_destroy(b);
    return NULL;
}

void sl_wh_row_buf_destroy(sl_wh_row_buf_t *b)
{
    if (b == NULL) return;
    const sl_allocator_t *a = b->a;
    for (uint32_t s = 0; s < b->S && b->cap != NULL; s++) {
        if (b->ids != NULL) sl_free(a, b->ids[s], (size_t)b->cap[s] * sizeof(int64_t));
        if (b->weights != NULL) sl_free(a, b->weights[s], (size_t)b->cap[s] * sizeof(float));
    }
    sl_free(a, b->labels, (size_t)(b->T + 1) * sizeof *b->labels);
    sl_free(a, b->dense, (size_t)(b->D + 1) * sizeof *b->dense);
    sl_free(a, b->lists, (size_t)(b->S + 1) * sizeof *b->lists);
    sl_free(a, b->ids, (size_t)(b->S + 1) * sizeof *b->ids);
    sl_free(a, b->weights, (size_t)(b->S + 1) * sizeof *b->weights);
    sl_free(a, b->cap, (size_t)(b->S + 1) * sizeof *b->cap);
    sl_free(a, b->weighted, (size_t)(b->S + 1) * sizeof *b->weighted);
    sl_free(a, b->text, b->text_cap);
    sl_free(a, b->foff, (size_t)b->fcap * sizeof *b->foff);
    sl_free(a, b->flen, (size_t)b->fcap * sizeof *b->flen);
    sl_wh_schema_destroy(b->schema);
    sl_free(a, b, sizeof *b);
}

bool imp_reserve(sl_wh_row_buf_t *b, uint32_t s, uint64_t n)
{
    if (n <= b->cap[s] && b->ids[s] != NULL) return true;
    if (n > MAX_LIST_IDS) return false;
    uint32_t cap = b->cap[s] < 16 ? 16 : b->cap[s];
    while (cap < n)
        cap *= 2;
    int64_t *ids = sl_alloc(b->a, (size_t)cap * sizeof *ids);
    float *w = b->weighted[s] ? sl_alloc(b->a, (size_t)cap * sizeof *w) : NULL;
    if (ids == NULL || (b->weighted[s] && w == NULL)) {
        sl_free(b->a, ids, (size_t)cap * sizeof *ids);
        sl_free(b->a, w, (size_t)cap * sizeof *w);
        return false;
    }
    /* Contents need not survive: a list is refilled whole after a reserve. */
    sl_free(b->a, b->ids[s], (size_t)b->cap[s] * sizeof(int64_t));
    sl_free(b->a, b->weights[s], (size_t)b->cap[s] * sizeof(float));
    b->ids[s] = ids;
    b->weights[s] = w;
    b->cap[s] = cap;
    b->lists[s].ids = ids;
    return true;
}

const char *imp_excerpt(const char *text, size_t len, char *buf, size_t cap)
{
    if (cap == 0) return "";
    size_t room = cap - 1, n = len;
    bool cut = false;
    if (n > room) {
        n = room > 3 ? room - 3 : room;
        cut = true;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (cut && room > 3) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

bool imp_parse_i64(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len) return false;
    uint64_t v = 0;
    /* The limit is 2^63 for a negative number and 2^63-1 for a positive one. */
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        unsigned d = (unsigned)((unsigned char)s[i] - '0');
        if (d > 9) return false;
        if (v > (limit - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

uint32_t imp_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (uint32_t)n;
}

static sl_err_t make_dir(const char *path, sl_error_t *err)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return SL_OK;
        return sl_error_set(err, SL_ERR_IO, "%s exists and is not a directory", path);
    }
    return sl_error_set(err, SL_ERR_IO, "mkdir %s: %s", path, strerror(errno));
}

sl_err_t imp_make_dirs(const char *dir, const char *partition, sl_error_t *err)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof path)
        return sl_error_set(err, SL_ERR_INVALID, "path too long: %s", dir);
    sl_err_t rc = make_dir(path, err);
    if (rc != SL_OK || partition == NULL || *partition == '\0') return rc;
    const char *p = partition;
    while (*p != '\0') {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        size_t used = strlen(path);
        if (used + 1 + len >= sizeof path)
            return sl_error_set(err, SL_ERR_INVALID, "path too long: %s/%s", dir, partition);
        path[used] = '/';
        memcpy(path + used + 1, p, len);
        path[used + 1 + len] = '\0';
        if (len > 0 && (rc = make_dir(path, err)) != SL_OK) return rc;
        p += len;
        if (*p == '/') p++;
    }
    return SL_OK;
}

sl_err_t imp_bad(sl_error_t *err, const char *fmt, ...)
{
    char msg[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_error_set(err, SL_ERR_CORRUPT, "%s", msg);
}

const char *imp_json_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}
