/* Vocabularies of map_vocab: a file of ids, one per line, loaded once at
 * plan time into an open-addressing table (id -> line number). Lookups run
 * per id on the transform hot path: linear probing over a power-of-two
 * table at most half full, so a miss ends within a few slots on average. */
#include "dpp/pipeline/plan_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

typedef struct vocab_slot {
    int64_t id;
    int64_t index; /* -1: empty */
} vocab_slot_t;

struct dpp_vocab {
    const sl_allocator_t *a;
    vocab_slot_t *slots;
    uint64_t mask; /* slots - 1 */
    uint64_t size; /* ids held */
};

static uint64_t slot_of(int64_t id, uint64_t mask)
{
    return XXH3_64bits(&id, sizeof id) & mask;
}

void dpp_vocab_destroy(dpp_vocab_t *v)
{
    if (v == NULL) return;
    if (v->slots != NULL) sl_free(v->a, v->slots, (v->mask + 1) * sizeof(vocab_slot_t));
    sl_free(v->a, v, sizeof *v);
}

uint64_t dpp_vocab_size(const dpp_vocab_t *v)
{
    return v->size;
}

int64_t dpp_vocab_lookup(const dpp_vocab_t *v, int64_t id, int64_t def)
{
    for (uint64_t s = slot_of(id, v->mask);; s = (s + 1) & v->mask) {
        const vocab_slot_t *e = &v->slots[s];
        if (e->index < 0) return def;
        if (e->id == id) return e->index;
    }
}

/* Insert id with index; @return the index already held by id, or -1. */
static int64_t insert(dpp_vocab_t *v, int64_t id, int64_t index)
{
    for (uint64_t s = slot_of(id, v->mask);; s = (s + 1) & v->mask) {
        vocab_slot_t *e = &v->slots[s];
        if (e->index < 0) {
            e->id = id;
            e->index = index;
            v->size++;
            return -1;
        }
        if (e->id == id) return e->index;
    }
}

static bool grow(dpp_vocab_t *v)
{
    uint64_t old_n = v->mask + 1, n = old_n * 2;
    vocab_slot_t *old = v->slots;
    vocab_slot_t *slots = sl_alloc(v->a, sl_mul_size(n, sizeof *slots));
    if (slots == NULL) return false;
    for (uint64_t i = 0; i < n; i++)
        slots[i].index = -1;
    v->slots = slots;
    v->mask = n - 1;
    v->size = 0;
    for (uint64_t i = 0; i < old_n; i++)
        if (old[i].index >= 0) insert(v, old[i].id, old[i].index);
    sl_free(v->a, old, old_n * sizeof *old);
    return true;
}

/* Open a vocabulary for reading: it must be a regular file of at most
 * DPP_VOCAB_MAX_BYTES, checked on the open descriptor (fstat) before one
 * byte is read, so a huge file or a device costs nothing. O_NONBLOCK keeps
 * a FIFO from blocking the open; it is cleared for reading. Problems name
 * the file, never its content. @return the descriptor, or -1 (a problem
 * was added). */
static int vocab_open(const char *file, const char *path, sl_pipeline_problems_t *problems)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        sl_pipeline_problems_add(problems, "%s.file: cannot open vocabulary '%s': %s", path, file,
                                 strerror(errno));
        return -1;
    }
    struct stat st;
    const char *bad = NULL;
    char why[128];
    if (fstat(fd, &st) != 0) {
        snprintf(why, sizeof why, "fstat failed: %s", strerror(errno));
        bad = why;
    } else if (!S_ISREG(st.st_mode)) {
        bad = "not a regular file";
    } else if ((uint64_t)st.st_size > DPP_VOCAB_MAX_BYTES) {
        snprintf(why, sizeof why, "%llu bytes, more than the %llu a vocabulary may have",
                 (unsigned long long)st.st_size, (unsigned long long)DPP_VOCAB_MAX_BYTES);
        bad = why;
    } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        snprintf(why, sizeof why, "fcntl failed: %s", strerror(errno));
        bad = why;
    }
    if (bad != NULL) {
        sl_pipeline_problems_add(problems, "%s.file: vocabulary '%s': %s", path, file, bad);
        close(fd);
        return -1;
    }
    return fd;
}

bool dpp_vocab_check(const char *file, const char *path, sl_pipeline_problems_t *problems)
{
    int fd = vocab_open(file, path, problems);
    if (fd < 0) return false;
    close(fd);
    return true;
}

dpp_vocab_t *dpp_vocab_load(const char *file, const sl_allocator_t *a, uint64_t max_entries,
                            const char *path, sl_pipeline_problems_t *problems)
{
    int fd = vocab_open(file, path, problems);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        sl_pipeline_problems_add(problems, "%s.file: vocabulary '%s': %s", path, file,
                                 strerror(errno));
        close(fd);
        return NULL;
    }
    dpp_vocab_t *v = sl_calloc(a, 1, sizeof *v);
    if (v != NULL) {
        v->a = a;
        v->mask = 63;
        v->slots = sl_alloc(a, 64 * sizeof(vocab_slot_t));
        if (v->slots != NULL)
            for (int i = 0; i < 64; i++)
                v->slots[i].index = -1;
    }
    bool ok = v != NULL && v->slots != NULL;
    char line[64];
    uint64_t lineno = 0;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            sl_pipeline_problems_add(problems, "%s.file: %s line %llu: line too long for an id",
                                     path, file, (unsigned long long)lineno + 1);
            ok = false;
            break;
        }
        if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
        if (len > 0 && line[len - 1] == '\r') line[--len] = '\0';
        char *end = NULL;
        errno = 0;
        long long id = len > 0 && !isspace((unsigned char)line[0]) ? strtoll(line, &end, 10) : 0;
        if (end == NULL || *end != '\0' || errno != 0) {
            /* Not the line itself: the file may be anything readable
             * (a spec naming /etc/shadow must not print its first line). */
            sl_pipeline_problems_add(problems, "%s.file: %s line %llu: not a decimal int64 id",
                                     path, file, (unsigned long long)lineno + 1);
            ok = false;
            break;
        }
        if (lineno >= max_entries) {
            sl_pipeline_problems_add(problems, "%s.file: %s holds more than %llu ids", path, file,
                                     (unsigned long long)max_entries);
            ok = false;
            break;
        }
        if ((v->size + 1) * 2 > v->mask + 1 && !grow(v)) {
            ok = false;
            break;
        }
        int64_t prev = insert(v, (int64_t)id, (int64_t)lineno);
        if (prev >= 0) {
            sl_pipeline_problems_add(problems, "%s.file: %s line %llu: the id of line %lld again",
                                     path, file, (unsigned long long)lineno + 1,
                                     (long long)prev + 1);
            ok = false;
            break;
        }
        lineno++;
    }
    if (ok && ferror(f)) {
        sl_pipeline_problems_add(problems, "%s.file: reading %s failed", path, file);
        ok = false;
    }
    fclose(f);
    if (!ok) {
        dpp_vocab_destroy(v);
        return NULL;
    }
    return v;
}
