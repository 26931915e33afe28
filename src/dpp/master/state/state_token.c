/* Version-4 resume tokens of table jobs (docs/DESIGN.md "Resume tokens",
 * docs/PROTOCOL.md): a token says what ONE trainer rank handed out, taken
 * from who committed what (state_attr.c), so the tokens of a checkpoint
 * combine by union whenever each was taken; and a job resumed from one
 * token per rank of a checkpoint, with any number of ranks. Callers hold
 * the master's lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state_internal.h"

/* ---- range sets -------------------------------------------------------------------- */

/* out = x minus y (both sorted by (split, from), disjoint): at most
 * x.n + y.n pieces. */
static bool rset_minus(const sl_allocator_t *a, const m_rset *x, const m_rset *y, m_rset *out)
{
    if (!m_rset_init(a, out, x->n + y->n)) return false;
    size_t j = 0;
    for (size_t i = 0; i < x->n; i++) {
        uint32_t sp = x->split[i];
        uint64_t at = x->from[i], end = x->to[i];
        while (j < y->n && (y->split[j] < sp || (y->split[j] == sp && y->to[j] <= at)))
            j++;
        size_t q = j;
        while (at < end) {
            if (q < y->n && y->split[q] == sp && y->from[q] < end) {
                if (y->from[q] > at) {
                    out->split[out->n] = sp;
                    out->from[out->n] = at;
                    out->to[out->n] = y->from[q];
                    out->n++;
                }
                if (y->to[q] > at) at = y->to[q];
                q++;
            } else {
                out->split[out->n] = sp;
                out->from[out->n] = at;
                out->to[out->n] = end;
                out->n++;
                at = end;
            }
        }
    }
    return true;
}

static uint64_t rset_rows(const m_rset *r)
{
    uint64_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->to[i] - r->from[i];
    return n;
}

/* A growing list of ranges (any order) to make an rset of. */
typedef struct rlist {
    uint32_t *split;
    uint64_t *from, *to;
    size_t n, cap;
} rlist;

static bool rl_push(const sl_allocator_t *a, rlist *l, uint32_t split, uint64_t from, uint64_t to)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint32_t *s = sl_alloc(a, cap * sizeof *s);
        uint64_t *f = sl_alloc(a, cap * sizeof *f), *t = sl_alloc(a, cap * sizeof *t);
        if (s == NULL || f == NULL || t == NULL) {
            sl_free(a, s, cap * sizeof *s);
            sl_free(a, f, cap * sizeof *f);
            sl_free(a, t, cap * sizeof *t);
            return false;
        }
        if (l->n > 0) {
            memcpy(s, l->split, l->n * sizeof *s);
            memcpy(f, l->from, l->n * sizeof *f);
            memcpy(t, l->to, l->n * sizeof *t);
        }
        sl_free(a, l->split, l->cap * sizeof *s);
        sl_free(a, l->from, l->cap * sizeof *f);
        sl_free(a, l->to, l->cap * sizeof *t);
        l->split = s;
        l->from = f;
        l->to = t;
        l->cap = cap;
    }
    l->split[l->n] = split;
    l->from[l->n] = from;
    l->to[l->n] = to;
    l->n++;
    return true;
}

static void rl_free(const sl_allocator_t *a, rlist *l)
{
    sl_free(a, l->split, l->cap * sizeof *l->split);
    sl_free(a, l->from, l->cap * sizeof *l->from);
    sl_free(a, l->to, l->cap * sizeof *l->to);
    *l = (rlist){0};
}

static bool rl_rset(const sl_allocator_t *a, const rlist *l, m_rset *out)
{
    return m_rset_of(a, l->split, l->from, l->to, l->n, out);
}

/* ---- taking a token ---------------------------------------------------------------- */

/* The ranges of one attribution list that are the master's or owner's
 * (owner 0: the master's only), minus ex. */
static bool handed_of(const sl_allocator_t *a, const job *jb, const m_attr_list *l, uint32_t owner,
                      bool with_master, uint32_t rank, const m_rset *ex, m_rset *out)
{
    rlist v = {0};
    bool ok = true;
    /* Per-rank epochs (state_rank.c): a split's entries are of its rank's
     * epoch, so a rank's token takes the master's rows of its own splits
     * only (rank UINT32_MAX: of every split). */
    for (uint32_t q = 0; ok && q < l->n; q++)
        if ((with_master && l->v[q].owner == M_OWNER_MASTER &&
             (rank == UINT32_MAX || jb->rank_of_split[l->v[q].split] == rank)) ||
            (owner != M_OWNER_MASTER && l->v[q].owner == owner))
            ok = rl_push(a, &v, l->v[q].split, l->v[q].from, l->v[q].to);
    m_rset all = {0};
    ok = ok && rl_rset(a, &v, &all);
    rl_free(a, &v);
    if (!ok) return false;
    ok = rset_minus(a, &all, ex, out);
    m_rset_free(a, &all);
    return ok;
}

static void cols_of(Sluice__Master__EpochRanges *e, const m_rset *r, uint32_t epoch, uint32_t *ep)
{
    sluice__master__epoch_ranges__init(e);
    for (size_t i = 0; i < r->n; i++)
        ep[i] = epoch;
    e->n_epoch = e->n_split = e->n_from = e->n_to = r->n;
    e->epoch = ep;
    e->split = r->split;
    e->from = r->from;
    e->to = r->to;
}

sl_err_t sl_master_state_token_take(const sl_master_state_t *m, const sl_master_token_req_t *req,
                                    void **buf, size_t *len, sl_error_t *err)
{
    *buf = NULL;
    *len = 0;
    const char *job_id = req->job_id != NULL ? req->job_id : "";
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", job_id);
    if (jb->chunk != 0)
        return m_kafka_token_encode(m, jb, req, req->undelivered, req->num_undelivered, buf, len,
                                    err);
    uint32_t world = req->world_size ? req->world_size : 1;
    if (req->rank >= world || world > 65536)
        return sl_error_set(err, SL_ERR_INVALID, "resume token: rank %u of world size %u",
                            req->rank, world);
    /* Static sharding: the rank's own epoch (state_rank.c), which its
     * client's commits are of. */
    bool per_rank = jb->rank_epoch != NULL && world == jb->ranks;
    if (jb->rank_epoch != NULL && !per_rank && !m_rank_level(jb))
        return sl_error_set(err, SL_ERR_INVALID,
                            "resume token of job '%s': a world of %u ranks reading a job "
                            "statically sharded over %u, whose ranks are in different epochs",
                            job_id, world, jb->ranks);
    uint32_t e = per_rank ? jb->rank_epoch[req->rank] : jb->epoch;
    uint32_t rank = per_rank ? req->rank : UINT32_MAX;
    const sl_allocator_t *a = m->a;
    /* The client's undelivered ranges of this epoch and the previous one;
     * an older one means the token could not say what the rank handed out
     * of that epoch (it holds two epochs only). */
    rlist ucur = {0}, uprev = {0};
    sl_err_t rc = SL_OK;
    bool ok = true;
    for (uint32_t k = 0; ok && rc == SL_OK && k < req->num_undelivered; k++) {
        const sl_master_token_exclude_t *u = &req->undelivered[k];
        if (u->split >= jb->n || u->from_row >= u->to_row ||
            u->to_row > jb->defs[u->split].num_rows)
            continue; /* not of this job's rows: nothing it could have committed */
        if (u->epoch == e)
            ok = rl_push(a, &ucur, u->split, u->from_row, u->to_row);
        else if (e > 0 && u->epoch == e - 1)
            ok = rl_push(a, &uprev, u->split, u->from_row, u->to_row);
        else if (u->epoch < e)
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "resume token of job '%s': this client holds a batch of epoch %u "
                              "not handed out while the job is in epoch %u; a token covers the "
                              "current and the previous epoch: take it once that batch is "
                              "handed out",
                              job_id, u->epoch, e);
    }
    uint32_t owner = M_OWNER_MASTER;
    for (uint32_t k = 0; req->client_id != NULL && k < jb->nowners; k++)
        if (strcmp(jb->owners[k], req->client_id) == 0) owner = k + 1;
    m_rset ec = {0}, ep = {0}, hc = {0}, hp = {0}, own = {0}, up = {0};
    static const m_rset none;
    ok = ok && rl_rset(a, &ucur, &ec) && rl_rset(a, &uprev, &ep) &&
         handed_of(a, jb, &jb->attr[1], owner, true, rank, &ec, &hc) &&
         handed_of(a, jb, &jb->attr[0], owner, true, rank, &ep, &hp) &&
         handed_of(a, jb, &jb->attr[0], owner, false, rank, &none, &own) &&
         m_rset_intersect(a, &own, &ep, &up);
    rl_free(a, &ucur);
    rl_free(a, &uprev);
    uint32_t *eps = NULL;
    size_t neps = hc.n + hp.n + up.n + 1;
    if (ok && rc == SL_OK) eps = sl_alloc(a, neps * sizeof *eps);
    if (rc == SL_OK && (!ok || eps == NULL))
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", job_id);
    if (rc == SL_OK) {
        Sluice__Master__ResumeTokenV4 t = SLUICE__MASTER__RESUME_TOKEN_V4__INIT;
        Sluice__Master__EpochRanges c_h, c_ph, c_pu;
        t.version = SL_MASTER_RANK_TOKEN_VERSION;
        t.job_id = jb->id;
        t.fingerprint = jb->fingerprint;
        t.run_id = jb->run_id;
        t.rank = req->rank;
        t.world_size = world;
        t.has_step = req->has_step;
        t.step = req->has_step ? req->step : 0;
        t.epoch = e;
        t.order = jb->ord != NULL ? 1 : 0;
        t.plan_fingerprint = jb->ord != NULL ? jb->plan_fp : 0;
        cols_of(&c_h, &hc, e, eps);
        t.handed = &c_h;
        if (e > 0) {
            cols_of(&c_ph, &hp, e - 1, eps + hc.n);
            cols_of(&c_pu, &up, e - 1, eps + hc.n + hp.n);
            t.prev_handed = &c_ph;
            t.prev_undelivered = &c_pu;
        }
        size_t pn = sluice__master__resume_token_v4__get_packed_size(&t);
        uint8_t *out = sl_alloc(a, M_TOKEN_HEADER_BYTES + pn);
        if (out == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", job_id);
        } else {
            sluice__master__resume_token_v4__pack(&t, out + M_TOKEN_HEADER_BYTES);
            m_token_seal(out, SL_MASTER_RANK_TOKEN_VERSION, pn);
            *buf = out;
            *len = M_TOKEN_HEADER_BYTES + pn;
        }
    }
    sl_free(a, eps, neps * sizeof *eps);
    m_rset_free(a, &ec);
    m_rset_free(a, &ep);
    m_rset_free(a, &hc);
    m_rset_free(a, &hp);
    m_rset_free(a, &own);
    m_rset_free(a, &up);
    return rc;
}

/* ---- resuming from a checkpoint ------------------------------------------------------ */

/* Check one list of a token against the splits (and its epoch column). */
static sl_err_t check_cols(const Sluice__Master__EpochRanges *c, const m_spec_pb *sp,
                           uint32_t epoch, const char *what, sl_error_t *err)
{
    if (c == NULL) return SL_OK;
    size_t n = c->n_split;
    if (c->n_epoch != n || c->n_from != n || c->n_to != n)
        return sl_error_set(err, SL_ERR_CORRUPT, "resume token: %s: columns differ", what);
    for (size_t i = 0; i < n; i++)
        if (c->epoch[i] != epoch || c->split[i] >= sp->n || c->from[i] >= c->to[i] ||
            c->to[i] > sp->list.num_rows[c->split[i]])
            return sl_error_set(err, SL_ERR_INVALID,
                                "resume token: %s range %zu (epoch %u split %u rows [%llu, %llu)) "
                                "outside the splits or of another epoch",
                                what, i, c->epoch[i], c->split[i], (unsigned long long)c->from[i],
                                (unsigned long long)c->to[i]);
    return SL_OK;
}

static sl_err_t open_v4(const sl_master_state_job_spec_t *spec, const m_spec_pb *sp,
                        const void *token, size_t len, ProtobufCAllocator *pa,
                        Sluice__Master__ResumeTokenV4 **out, sl_error_t *err)
{
    *out = NULL;
    uint32_t version;
    sl_err_t rc = m_token_check(token, len, &version, err);
    if (rc != SL_OK) return rc;
    const uint8_t *p = token;
    Sluice__Master__ResumeTokenV4 *t = sluice__master__resume_token_v4__unpack(
        pa, len - M_TOKEN_HEADER_BYTES, p + M_TOKEN_HEADER_BYTES);
    if (t == NULL)
        return ((sl_unsized_t *)pa->allocator_data)->failed
                   ? sl_error_set(err, SL_ERR_NOMEM, "resume token: out of memory")
                   : sl_error_set(err, SL_ERR_CORRUPT, "resume token: malformed protobuf");
    uint32_t world = t->world_size;
    if (t->version != SL_MASTER_RANK_TOKEN_VERSION)
        rc = sl_error_set(err, SL_ERR_VERSION, "resume token version %u", t->version);
    else if (t->job_id == NULL || strcmp(t->job_id, spec->job_id) != 0)
        rc = sl_error_set(err, SL_ERR_INVALID, "resume token of job '%s', not of job '%s'",
                          t->job_id ? t->job_id : "", spec->job_id);
    else if (m_fingerprint(&sp->list) != t->fingerprint)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume token of job '%s' was taken over other splits", spec->job_id);
    else if (t->epoch > spec->epochs)
        rc = sl_error_set(err, SL_ERR_INVALID, "resume token at epoch %u of a %u-epoch job",
                          t->epoch, spec->epochs);
    else if (world == 0 || world > 65536 || t->rank >= world)
        rc = sl_error_set(err, SL_ERR_CORRUPT, "resume token: rank %u of world size %u", t->rank,
                          world);
    else if (spec->deterministic && t->order != 1)
        /* its rows are whole batches of the dynamic order's cuts, which
         * need not be the deterministic order's (a dynamic lease batches
         * its todo from where it starts); the other way is sound: any rows
         * resume a dynamic job exactly (docs/DESIGN.md) */
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume token of job '%s' taken in \"order\": \"dynamic\" (or by a "
                          "master before deterministic resumes); the job is in \"order\": "
                          "\"deterministic\", whose sequence cannot continue from it: resume it "
                          "in the dynamic order, or start it again",
                          spec->job_id);
    else if (spec->deterministic && t->plan_fingerprint != spec->plan_fingerprint)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume token of job '%s' taken with another plan (fingerprint "
                          "%016llx, the job's %016llx: its batch size, filters, transforms, "
                          "seed or source differ): the deterministic sequence cannot continue "
                          "from it",
                          spec->job_id, (unsigned long long)t->plan_fingerprint,
                          (unsigned long long)spec->plan_fingerprint);
    else if (t->epoch == 0 && (t->prev_handed != NULL || t->prev_undelivered != NULL))
        rc = sl_error_set(err, SL_ERR_CORRUPT, "resume token: a previous epoch of epoch 0");
    if (rc == SL_OK) rc = check_cols(t->handed, sp, t->epoch, "handed", err);
    if (rc == SL_OK && t->epoch > 0)
        rc = check_cols(t->prev_handed, sp, t->epoch - 1, "previous epoch's handed", err);
    if (rc == SL_OK && t->epoch > 0)
        rc = check_cols(t->prev_undelivered, sp, t->epoch - 1, "previous epoch's undelivered", err);
    if (rc != SL_OK) {
        sluice__master__resume_token_v4__free_unpacked(t, pa);
        return rc;
    }
    *out = t;
    return SL_OK;
}

static bool push_cols(const sl_allocator_t *a, rlist *l, const Sluice__Master__EpochRanges *c)
{
    for (size_t i = 0; c != NULL && i < c->n_split; i++)
        if (!rl_push(a, l, c->split[i], c->from[i], c->to[i])) return false;
    return true;
}

sl_err_t m_token_who_check(const sl_allocator_t *a, const m_token_who *t, uint32_t count,
                           const char *job_id, sl_error_t *err)
{
    uint32_t world = t[0].world_size;
    bool all_steps = true;
    for (uint32_t k = 0; k < count; k++)
        all_steps = all_steps && t[k].has_step;
    for (uint32_t k = 1; k < count; k++) {
        if (t[k].run_id != t[0].run_id)
            return sl_error_set(err, SL_ERR_INVALID,
                                "token %u of %u: taken in another run of job '%s' (run %016llx, "
                                "token 1's %016llx): a checkpoint's tokens come from one run",
                                k + 1, count, job_id, (unsigned long long)t[k].run_id,
                                (unsigned long long)t[0].run_id);
        if (t[k].world_size != world)
            return sl_error_set(err, SL_ERR_INVALID,
                                "token %u of %u: world size %u, token 1's %u: a checkpoint's "
                                "tokens come from one world",
                                k + 1, count, t[k].world_size, world);
        if (all_steps && t[k].step != t[0].step)
            return sl_error_set(err, SL_ERR_INVALID,
                                "token %u of %u: step %llu, token 1's step %llu: tokens of "
                                "different checkpoints",
                                k + 1, count, (unsigned long long)t[k].step,
                                (unsigned long long)t[0].step);
    }
    uint32_t *seen = sl_calloc(a, world, sizeof *seen); /* token index + 1 */
    if (seen == NULL) return sl_error_set(err, SL_ERR_NOMEM, "resume: %u ranks", world);
    uint32_t dup_k = 0, dup_rank = 0;
    for (uint32_t k = 0; k < count; k++) {
        if (seen[t[k].rank] != 0 && dup_k == 0) {
            dup_k = k + 1;
            dup_rank = t[k].rank;
        }
        if (seen[t[k].rank] == 0) seen[t[k].rank] = k + 1;
    }
    char missing[160] = "";
    size_t mlen = 0;
    uint32_t nmissing = 0;
    for (uint32_t r = 0; r < world; r++) {
        if (seen[r] != 0) continue;
        if (nmissing++ < 8 && mlen < sizeof missing - 16)
            mlen += (size_t)snprintf(missing + mlen, sizeof missing - mlen, "%s%u",
                                     mlen ? ", " : "", r);
    }
    sl_free(a, seen, (size_t)world * sizeof *seen);
    const char *more = nmissing > 8 ? ", ..." : "";
    if (dup_k != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "token %u of %u: rank %u of %u appears twice%s%s%s%s", dup_k, count,
                            dup_rank, world, nmissing ? "; rank" : "",
                            nmissing > 1 ? "s " : (nmissing ? " " : ""), nmissing ? missing : "",
                            nmissing ? (more[0] ? ", ... missing" : " missing") : "");
    if (nmissing != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%u token%s for a world of %u ranks: rank%s %s%s missing (one token "
                            "per rank of the checkpoint)",
                            count, count == 1 ? "" : "s", world, nmissing > 1 ? "s" : "", missing,
                            more);
    return SL_OK;
}

/* The set's consistency: one run, one world size, one step where all
 * carry one, every rank exactly once, epochs at most one apart. */
static sl_err_t check_set(const sl_allocator_t *a, Sluice__Master__ResumeTokenV4 *const *t,
                          uint32_t count, sl_error_t *err)
{
    m_token_who *w = sl_calloc(a, count, sizeof *w);
    if (w == NULL) return sl_error_set(err, SL_ERR_NOMEM, "resume: %u tokens", count);
    uint32_t emin = t[0]->epoch, emax = t[0]->epoch;
    for (uint32_t k = 0; k < count; k++) {
        w[k] =
            (m_token_who){t[k]->run_id, t[k]->world_size, t[k]->rank, t[k]->has_step, t[k]->step};
        if (t[k]->epoch < emin) emin = t[k]->epoch;
        if (t[k]->epoch > emax) emax = t[k]->epoch;
    }
    sl_err_t rc = m_token_who_check(a, w, count, t[0]->job_id, err);
    sl_free(a, w, (size_t)count * sizeof *w);
    if (rc != SL_OK) return rc;
    if (emax > emin + 1)
        return sl_error_set(err, SL_ERR_INVALID,
                            "tokens taken in epochs %u and %u: a token covers its epoch and the "
                            "previous one, so a checkpoint's tokens must be taken within one "
                            "epoch advance of each other",
                            emin, emax);
    return SL_OK;
}

sl_err_t m_token_resume_v4(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                           const void *const *tokens, const size_t *lens, uint32_t count,
                           bool replace, sl_error_t *err)
{
    const sl_allocator_t *a = m->a;
    sl_unsized_t u = {.a = a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    m_spec_pb sp;
    sl_err_t rc = m_spec_pb_build(m, spec, &sp, err);
    if (rc == SL_OK) rc = m_check_spec(m, &sp.spec, err);
    Sluice__Master__ResumeTokenV4 **t = sl_calloc(a, count, sizeof *t);
    if (rc == SL_OK && t == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "resume: %u tokens", count);
    for (uint32_t k = 0; rc == SL_OK && k < count; k++) {
        rc = open_v4(spec, &sp, tokens[k], lens[k], &pa, &t[k], err);
        if (rc != SL_OK && count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
    }
    if (rc == SL_OK) rc = check_set(a, t, count, err);
    /* done(e): the rows of epoch e that count as delivered. */
    m_rset done[3] = {{0}};
    uint32_t emin = UINT32_MAX, emax = 0;
    for (uint32_t k = 0; rc == SL_OK && k < count; k++) {
        if (t[k]->epoch < emin) emin = t[k]->epoch;
        if (t[k]->epoch > emax) emax = t[k]->epoch;
    }
    uint64_t total = 0;
    for (size_t i = 0; rc == SL_OK && i < sp.n; i++) /* sp not built when out of memory */
        total += sp.list.num_rows[i];
    bool ok = true;
    if (rc == SL_OK) {
        /* emin - 1: complete when any token was taken (the job was past
         * it), and every rank's commits of it final: all of it but what
         * the ranks of emin still held. A rank of emin + 1 held nothing of
         * it (its token would have been refused). */
        rlist held = {0}, d1 = {0}, d2 = {0}, whole = {0};
        for (uint32_t k = 0; ok && k < count; k++) {
            if (t[k]->epoch == emin) {
                ok = push_cols(a, &held, t[k]->prev_undelivered) && push_cols(a, &d1, t[k]->handed);
            } else {
                ok = push_cols(a, &d1, t[k]->prev_handed) && push_cols(a, &d2, t[k]->handed);
            }
        }
        for (size_t i = 0; ok && i < sp.n; i++)
            if (sp.list.num_rows[i] > 0)
                ok = rl_push(a, &whole, (uint32_t)i, 0, sp.list.num_rows[i]);
        m_rset hs = {0}, ws = {0};
        ok = ok && rl_rset(a, &held, &hs) && rl_rset(a, &whole, &ws) &&
             rset_minus(a, &ws, &hs, &done[0]) && rl_rset(a, &d1, &done[1]) &&
             rl_rset(a, &d2, &done[2]);
        m_rset_free(a, &hs);
        m_rset_free(a, &ws);
        rl_free(a, &held);
        rl_free(a, &d1);
        rl_free(a, &d2);
        rl_free(a, &whole);
        if (!ok) rc = sl_error_set(err, SL_ERR_NOMEM, "resume of job '%s'", spec->job_id);
    }
    if (rc == SL_OK) {
        /* The earliest epoch not done is where the job starts; the done
         * rows of the epochs after it are committed when they begin. */
        uint32_t start = emax + 1 < spec->epochs ? emax + 1 : spec->epochs;
        for (int d = 0; d < 3; d++) {
            if (d == 0 && emin == 0) continue;
            uint64_t e = (uint64_t)emin - 1 + (uint64_t)d;
            if (e > emax || e >= spec->epochs) break;
            if (rset_rows(&done[d]) < total) {
                start = (uint32_t)e;
                break;
            }
        }
        /* done[d] is epoch emin - 1 + d; first: the start epoch's */
        int first = (int)((int64_t)start - ((int64_t)emin - 1));
        Sluice__Master__JobAdded ja = SLUICE__MASTER__JOB_ADDED__INIT;
        Sluice__Master__EpochRanges later = SLUICE__MASTER__EPOCH_RANGES__INIT;
        ja.spec = &sp.spec;
        ja.start_epoch = start;
        ja.run_id = m_new_run_id(m, spec->job_id);
        size_t nl = 0;
        int last = first;
        if (first >= 0 && first < 3) {
            ja.n_start_split = ja.n_start_from = ja.n_start_to = done[first].n;
            ja.start_split = done[first].split;
            ja.start_from = done[first].from;
            ja.start_to = done[first].to;
            for (int d = first + 1; d < 3 && (uint64_t)emin - 1 + (uint64_t)d <= emax &&
                                    (uint64_t)emin - 1 + (uint64_t)d < spec->epochs;
                 d++) {
                nl += done[d].n;
                last = d;
            }
        }
        later.epoch = sl_alloc(a, (nl + 1) * sizeof *later.epoch);
        later.split = sl_alloc(a, (nl + 1) * sizeof *later.split);
        later.from = sl_alloc(a, (nl + 1) * sizeof *later.from);
        later.to = sl_alloc(a, (nl + 1) * sizeof *later.to);
        if (!later.epoch || !later.split || !later.from || !later.to) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "resume of job '%s'", spec->job_id);
        } else {
            size_t i = 0;
            for (int d = first + 1; d <= last; d++)
                for (size_t q = 0; q < done[d].n; q++, i++) {
                    later.epoch[i] = (uint32_t)((uint64_t)emin - 1 + (uint64_t)d);
                    later.split[i] = done[d].split[q];
                    later.from[i] = done[d].from[q];
                    later.to[i] = done[d].to[q];
                }
            later.n_epoch = later.n_split = later.n_from = later.n_to = nl;
            if (nl > 0) ja.later = &later;
            rc = m_journal_and_add(m, &ja, replace, err);
        }
        sl_free(a, later.epoch, (nl + 1) * sizeof *later.epoch);
        sl_free(a, later.split, (nl + 1) * sizeof *later.split);
        sl_free(a, later.from, (nl + 1) * sizeof *later.from);
        sl_free(a, later.to, (nl + 1) * sizeof *later.to);
    }
    for (int d = 0; d < 3; d++)
        m_rset_free(a, &done[d]);
    for (uint32_t k = 0; t != NULL && k < count; k++)
        if (t[k] != NULL) sluice__master__resume_token_v4__free_unpacked(t[k], &pa);
    sl_free(a, t, (size_t)count * sizeof *t);
    m_spec_pb_free(&sp);
    return rc;
}
