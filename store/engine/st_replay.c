/*
 * st_replay — the replay rule and its backend wrapper. See st_replay.h and
 * docs/ENCRYPTION.md, "Replay".
 *
 * Which objects: part records only, by key (jobs/<job>/steps/<step20>/
 * nodes/<node>.commit, st_part.h's names). A GET of one reads it whole,
 * decodes it and judges it before handing over the range asked for; a PUT
 * judges the record before it is written (a node never writes what it
 * would refuse to read) and remembers it once the PUT succeeded. A record
 * that does not decode, or names another part than its key, is handed on
 * unjudged: the catalog refuses it with its own message.
 */
#include "engine/st_replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct replay_ctx {
    st_backend_wrap head; /* first: the ops it passes through are st_wrap_* */
    st_backend_ops ops;
    int owns_inner; /* close closes inner too */
    pthread_mutex_t lock;
    st_state *state; /* guarded by lock: one connection, one thread at a time */
} replay_ctx;
_Static_assert(offsetof(replay_ctx, head) == 0, "st_wrap_* read the head at ctx");

/* ---- the rule ---- */

static int same_lineage(const uint8_t *a, const uint8_t *b)
{
    return memcmp(a, b, ST_PART_LINEAGE_LEN) == 0;
}

st_err st_replay_judge(const st_part_seen *known, const st_part *p, const char *key,
                       st_part_seen *next, int *changed)
{
    *changed = 0;
    if (!known) {
        memset(next, 0, sizeof *next);
        memcpy(next->lineage, p->lineage, ST_PART_LINEAGE_LEN);
        next->revision = p->revision;
        *changed = 1;
        return ST_OK;
    }
    *next = *known;
    if (same_lineage(known->lineage, p->lineage)) {
        if (p->revision < known->revision)
            return st_seterr(ST_ERR_CORRUPT,
                             "part record %s is rolled back: it holds revision %u and this "
                             "node has seen revision %u of the same lineage (a replayed part "
                             "record)",
                             key, p->revision, known->revision);
        if (p->revision > known->revision) {
            next->revision = p->revision;
            *changed = 1;
        }
        return ST_OK;
    }
    for (size_t i = 0; i < known->nreplaced && i < ST_STATE_REPLACED_MAX; i++)
        if (same_lineage(known->replaced[i], p->lineage))
            return st_seterr(ST_ERR_CORRUPT,
                             "part record %s is rolled back: it holds revision %u of a lineage "
                             "that was replaced, and this node has seen revision %u of the "
                             "current one (a replayed part record)",
                             key, p->revision, known->revision);
    /* A new life of the part (the step was deleted and made again): the
     * current lineage joins the replaced ones, newest first. */
    memcpy(next->lineage, p->lineage, ST_PART_LINEAGE_LEN);
    next->revision = p->revision;
    next->nreplaced =
        known->nreplaced < ST_STATE_REPLACED_MAX ? known->nreplaced + 1 : ST_STATE_REPLACED_MAX;
    memmove(next->replaced[1], known->replaced[0],
            (next->nreplaced - 1) * sizeof next->replaced[0]);
    memcpy(next->replaced[0], known->lineage, ST_PART_LINEAGE_LEN);
    *changed = 1;
    return ST_OK;
}

/* Judges p against the part's row in s (*changed: the row must move). */
static st_err judge_row(st_state *s, const char *key, const st_part *p, st_part_seen *next,
                        int *changed)
{
    st_part_seen known;
    st_err e = st_state_part_seen(s, p->job, p->step, p->node, &known);
    if (e && e != ST_ERR_NOT_FOUND)
        return e;
    return st_replay_judge(e ? NULL : &known, p, key, next, changed);
}

st_err st_replay_check(st_state *s, const char *key, const st_part *p)
{
    st_part_seen next;
    int changed = 0;
    st_err e = judge_row(s, key, p, &next, &changed);
    if (e || !changed)
        return e;
    /* Read again inside the write transaction: another connection may
     * have moved the row forward since, and it must not go back. */
    if ((e = st_state_begin(s)))
        return e;
    e = judge_row(s, key, p, &next, &changed);
    if (!e && changed)
        e = st_state_part_remember(s, p->job, p->step, p->node, &next);
    if (!e)
        return st_state_commit(s);
    char msg[600];
    strncpy(msg, st_errmsg(), sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    st_state_rollback(s);
    return st_seterr(e, "%s", msg);
}

/* ---- the wrapper ---- */

/* 1 if key names a part record (jobs/<job>/steps/<step20>/nodes/<node>.commit). */
static int is_part_key(const char *key)
{
    char job[ST_JOB_MAX + 1], node[ST_NODE_MAX + 1];
    const char *slash, *rest;
    uint64_t step;
    if (strncmp(key, "jobs/", 5) != 0 || !(slash = strchr(key + 5, '/')) ||
        (size_t)(slash - key - 5) > ST_JOB_MAX)
        return 0;
    memcpy(job, key + 5, (size_t)(slash - key - 5));
    job[slash - key - 5] = '\0';
    return st_key_parse_step(key, job, &step, &rest) == ST_OK && st_key_parse_part(rest, node);
}

/* Decodes the part record data[0..len) at key into *p: 1, or 0 for one that
 * does not decode or names another part (it passes unjudged; *p empty). */
static int decode_own(const char *key, const uint8_t *data, size_t len, st_part *p)
{
    char named[ST_KEY_MAX];
    if (st_part_decode(data, len, p) != ST_OK) {
        st_clearerr();
        return 0;
    }
    if (st_key_part(named, sizeof named, p->job, p->step, p->node) || strcmp(named, key)) {
        st_part_free(p);
        st_clearerr();
        return 0;
    }
    return 1;
}

/* Judges p under the lock; remember: also moves its row forward. */
static st_err judge_locked(replay_ctx *x, const char *key, const st_part *p, int remember)
{
    st_part_seen next;
    int changed;
    pthread_mutex_lock(&x->lock);
    st_err e =
        remember ? st_replay_check(x->state, key, p) : judge_row(x->state, key, p, &next, &changed);
    pthread_mutex_unlock(&x->lock);
    return e;
}

/* A PUT (create: a put_new) of key; a part record is judged before it is
 * written (a node never writes what it would refuse to read) and
 * remembered only once it is stored: a failed PUT leaves the store's
 * record, which must stay readable. The record is stored then, so a row
 * that cannot be written only waits for the next read. */
static st_err store_judged(replay_ctx *x, int create, const char *key, const void *data, size_t len)
{
    st_err (*send)(void *, const char *, const void *, size_t) =
        create ? x->head.inner->ops->put_new : x->head.inner->ops->put;
    st_part p;
    if (!is_part_key(key) || !decode_own(key, data, len, &p))
        return send(x->head.inner->ctx, key, data, len);
    st_err e = judge_locked(x, key, &p, 0);
    if (!e)
        e = send(x->head.inner->ctx, key, data, len);
    if (!e && judge_locked(x, key, &p, 1))
        st_clearerr();
    st_part_free(&p);
    return e;
}

static st_err replay_put(void *ctx, const char *key, const void *data, size_t len)
{
    return store_judged(ctx, 0, key, data, len);
}

/* Only in the table when the inner has put_new (st_backend_ops_masked). */
static st_err replay_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    return store_judged(ctx, 1, key, data, len);
}

/* GETs the part record at key whole, judges it, then keeps [off, off + len)
 * as a ranged GET would. */
static st_err get_judged(replay_ctx *x, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    st_err e = x->head.inner->ops->get(x->head.inner->ctx, key, 0, ST_GET_TO_END, out);
    if (e)
        return e;
    st_part p;
    if (decode_own(key, out->data, out->len, &p)) {
        e = judge_locked(x, key, &p, 1);
        st_part_free(&p);
    }
    if (e) {
        out->len = 0;
        return e;
    }
    return st_get_keep_range(out, key, off, len);
}

static st_err replay_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    replay_ctx *x = ctx;
    if (!is_part_key(key))
        return x->head.inner->ops->get(x->head.inner->ctx, key, off, len, out);
    return get_judged(x, key, off, len, out);
}

static st_err replay_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                                const st_get_sink *sink)
{
    replay_ctx *x = ctx;
    if (!is_part_key(key))
        return st_get_stream(x->head.inner, key, off, len, sink);
    return st_get_stream_by_get(replay_get, x, key, off, len, sink);
}

static void replay_close(void *ctx)
{
    replay_ctx *x = ctx;
    if (x->owns_inner)
        st_backend_close(x->head.inner);
    st_state_close(x->state);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static const st_backend_ops replay_ops_template = {
    .scheme = "replay",
    .put = replay_put,
    .get = replay_get,
    .get_stream = replay_get_stream,
    .stat = st_wrap_stat,
    .stat_time = st_wrap_stat_time,
    .list = st_wrap_list,
    .del = st_wrap_del,
    .del_many = st_wrap_del_many,
    .close = replay_close,
    .put_new = replay_put_new,
};

static st_err wrap(st_backend *inner, const char *state_path, int owns, st_backend **out)
{
    replay_ctx *x = calloc(1, sizeof *x);
    st_backend *w = calloc(1, sizeof *w);
    if (!x || !w) {
        free(x);
        free(w);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    st_err e = st_state_open(state_path, &x->state);
    if (e) {
        free(x);
        free(w);
        return e;
    }
    x->head.inner = inner;
    x->owns_inner = owns;
    pthread_mutex_init(&x->lock, NULL);
    x->ops = st_backend_ops_masked(&replay_ops_template, inner);
    w->ops = &x->ops;
    w->ctx = x;
    *out = w;
    return ST_OK;
}

st_err st_replay_wrap(st_backend **b, const char *state_path)
{
    return wrap(*b, state_path, 1, b);
}

st_err st_replay_borrow(st_backend *inner, const char *state_path, st_backend **out)
{
    return wrap(inner, state_path, 0, out);
}
