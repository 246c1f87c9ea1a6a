/*
 * st_peer_alone — the store's stand-in built from the peers' listings
 * (st_peer_alone.h; docs/PEERS.md, "Restoring from peers alone").
 *
 * Invariant: an object is kept only after every check the header lists
 * passed; after open the table does not change, so reads need no lock.
 */
#include "peer/st_peer_alone.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_manifest.h"
#include "format/st_part.h"
#include "peer/st_peer_client.h"
#include "peer/st_peer_listing.h"
#include "peer/st_peer_seal.h"
#include "peer/st_replica.h"
#include "util/st_array.h"
#include "util/st_logf.h"

#define PEERS_MAX 64

typedef struct kept_object {
    char key[ST_KEY_MAX];
    st_bytes bytes;
} kept_object;

typedef struct alone_ctx {
    kept_object *objs; /* sorted by key after open */
    size_t n, cap;
    size_t parts;
} alone_ctx;

/* A peer asked at open. */
typedef struct asked_peer {
    char addr[ST_PEER_ADDR_MAX + 1];
    st_peer_client *client;
    st_peer_listing listing;
    int answered;
} asked_peer;

/* The newest revision of one (job, step, node) listed with a record, and
 * the peers that list that revision with that manifest. */
typedef struct candidate {
    st_peer_listed it;
    size_t from[PEERS_MAX];
    size_t nfrom;
} candidate;

typedef struct open_run {
    const st_peer_alone_opts *o;
    asked_peer peers[PEERS_MAX];
    size_t npeers;
    candidate *cands;
    size_t ncands, cands_cap;
    alone_ctx *x;
} open_run;

/* Reports through the opener's log: a peer left out, a record refused. */
#define say(r, ...) st_logf((r)->o->log, (r)->o->log_arg, __VA_ARGS__)

static st_err keep(alone_ctx *x, const char *key, const uint8_t *data, size_t len)
{
    for (size_t i = 0; i < x->n; i++)
        if (!strcmp(x->objs[i].key, key))
            return ST_OK;
    if (st_array_grow((void **)&x->objs, &x->cap, x->n + 1, sizeof *x->objs))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    kept_object *k = &x->objs[x->n];
    memset(k, 0, sizeof *k);
    snprintf(k->key, sizeof k->key, "%s", key);
    st_err e = len ? st_bytes_append(&k->bytes, data, len) : ST_OK;
    if (!e)
        x->n++;
    return e;
}

/* ---- asking the peers ---- */

/* Splits o->peers and asks each for its listing. ST_OK once one answered. */
static st_err ask_peers(open_run *r)
{
    char list[PEERS_MAX * (ST_PEER_ADDR_MAX + 1)], *save = NULL;
    if (!r->o->peers || strlen(r->o->peers) >= sizeof list)
        return st_seterr(ST_ERR_INVALID, "peers: wants HOST:PORT,... (at most %d)", PEERS_MAX);
    snprintf(list, sizeof list, "%s", r->o->peers);
    st_err refused = ST_OK, e = ST_OK;
    char auth_msg[512] = "", last_msg[512] = "no peer given";
    size_t answered = 0;
    for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        if (r->npeers == PEERS_MAX)
            return st_seterr(ST_ERR_INVALID, "peers: at most %d", PEERS_MAX);
        asked_peer *p = &r->peers[r->npeers++];
        snprintf(p->addr, sizeof p->addr, "%s", a);
        if ((e = st_peer_client_new(a, r->o->self_node, r->o->secret, 0, &p->client)))
            return e;
        e = st_peer_list_replicas(p->client, r->o->job, &p->listing);
        if (!e) {
            p->answered = 1;
            answered++;
            continue;
        }
        snprintf(last_msg, sizeof last_msg, "%s", st_errmsg());
        if (e == ST_ERR_AUTH) {
            refused = e;
            snprintf(auth_msg, sizeof auth_msg, "%s", st_errmsg());
        }
        say(r, "reading from peers alone: %s", last_msg);
    }
    if (answered)
        return ST_OK;
    if (refused)
        return st_seterr(ST_ERR_AUTH, "%s", auth_msg);
    return st_seterr(ST_ERR_TRANSIENT, "store unreachable%s%s%s and no peer answered (%s)",
                     r->o->store_error ? " (" : "", r->o->store_error ? r->o->store_error : "",
                     r->o->store_error ? ")" : "", last_msg);
}

static int same_part(const st_peer_listed *a, const st_peer_listed *b)
{
    return a->step == b->step && !strcmp(a->job, b->job) && !strcmp(a->node, b->node);
}

/* One candidate per (job, step, node): the newest revision with a record. */
static st_err gather_candidates(open_run *r)
{
    for (size_t p = 0; p < r->npeers; p++) {
        const st_peer_listing *l = &r->peers[p].listing;
        for (size_t i = 0; i < l->n; i++) {
            const st_peer_listed *it = &l->items[i];
            if (!it->record_len || !strcmp(it->node, r->o->self_node))
                continue;
            candidate *c = NULL;
            for (size_t k = 0; k < r->ncands && !c; k++)
                if (same_part(&r->cands[k].it, it))
                    c = &r->cands[k];
            if (!c) {
                if (st_array_grow((void **)&r->cands, &r->cands_cap, r->ncands + 1,
                                  sizeof *r->cands))
                    return st_seterr(ST_ERR_NOMEM, "out of memory");
                c = &r->cands[r->ncands++];
                c->it = *it;
                c->nfrom = 0;
            } else if (it->rev > c->it.rev) {
                c->it = *it;
                c->nfrom = 0;
            } else if (it->rev < c->it.rev || st_id_cmp(&it->manifest_id, &c->it.manifest_id)) {
                continue;
            }
            if (c->nfrom < PEERS_MAX && (!c->nfrom || c->from[c->nfrom - 1] != p))
                c->from[c->nfrom++] = p; /* a peer that lists it twice is asked once */
        }
    }
    return ST_OK;
}

/* The client of a holder's address: one asked already, or a new one. */
static st_peer_client *holder_client(open_run *r, const char *addr, st_peer_client **made)
{
    for (size_t i = 0; i < r->npeers; i++)
        if (!strcmp(r->peers[i].addr, addr))
            return r->peers[i].client;
    if (!*made && st_peer_client_new(addr, r->o->self_node, r->o->secret, 0, made))
        return NULL;
    return *made;
}

/* 1 if a holder of rec that answers holds pack. */
static int pack_on_a_holder(open_run *r, const st_replica *rec, const st_id *pack)
{
    for (size_t h = 0; h < rec->nholders; h++) {
        st_peer_client *made = NULL, *c = holder_client(r, rec->holders[h].addr, &made);
        int has = 0;
        st_err e = c ? st_peer_has_pack(c, pack, &has) : ST_ERR_INVALID;
        st_peer_client_free(made);
        if (!e && has)
            return 1;
    }
    return 0;
}

/* Why the record in buf cannot stand for the candidate c, or NULL. On NULL
 * *m holds its decoded manifest (st_manifest_free). sealed: buf was opened
 * from an envelope, whose tag authenticated it under its name; the listing
 * then names the sealed manifest, which the record's plaintext cannot match. */
static const char *check_record(const candidate *c, const st_bytes *buf, int sealed,
                                st_replica *rec, st_manifest *m)
{
    st_part part;
    if (st_replica_decode(buf->data, buf->len, rec, &part))
        return "its record does not decode";
    const char *why = NULL;
    st_id man_id = st_id_of(rec->manifest.data, rec->manifest.len);
    if (rec->revision != c->it.rev || part.step != c->it.step || strcmp(part.job, c->it.job) ||
        strcmp(part.node, c->it.node))
        why = "its record is of another part or revision";
    else if (!sealed &&
             (rec->manifest.len != c->it.manifest_len || st_id_cmp(&man_id, &c->it.manifest_id)))
        why = "its record's manifest is not the one listed";
    else if (st_manifest_decode(rec->manifest.data, rec->manifest.len, m))
        why = "its manifest does not decode";
    else if (m->step != c->it.step || strcmp(m->job, c->it.job) || strcmp(m->node, c->it.node)) {
        st_manifest_free(m);
        why = "its manifest is of another part";
    }
    st_part_free(&part);
    if (why)
        st_replica_free(rec);
    return why;
}

/* Keeps the candidate's record if one of its peers gives one that passes,
 * and the peers hold every pack it needs. */
static st_err take_candidate(open_run *r, const candidate *c)
{
    st_bytes got = {0}, buf = {0};
    char key[ST_KEY_MAX];
    st_err e = st_key_replica(key, sizeof key, c->it.job, c->it.step, c->it.node, c->it.rev);
    for (size_t k = 0; !e && k < c->nfrom; k++) {
        asked_peer *p = &r->peers[c->from[k]];
        st_replica rec;
        st_manifest m = {0};
        if (st_peer_get_record(p->client, c->it.job, c->it.step, c->it.node, c->it.rev, &got) ||
            st_peer_open(r->o->keyring, ST_CRYPT_REPLICA, key, got.data, got.len, &buf)) {
            say(r, "reading from peers alone: %s", st_errmsg());
            continue;
        }
        const char *why = check_record(c, &buf, st_peer_is_sealed(got.data, got.len), &rec, &m);
        if (why) {
            say(r, "peer at %s: step %" PRIu64 " of job %s, node %s r%" PRIu32 ": %s: not used",
                p->addr, c->it.step, c->it.job, c->it.node, c->it.rev, why);
            continue;
        }
        size_t missing = m.npacks;
        for (size_t i = 0; i < m.npacks && missing == m.npacks; i++)
            if (!pack_on_a_holder(r, &rec, &m.packs[i]))
                missing = i;
        if (missing < m.npacks) {
            char hex[ST_ID_HEX_LEN + 1];
            say(r,
                "step %" PRIu64 " of job %s: the part of node %s needs pack %s, which no peer "
                "that answers holds (the store has it): not restorable from peers alone",
                c->it.step, c->it.job, c->it.node, st_id_hex(&m.packs[missing], hex));
        } else {
            e = keep(r->x, key, buf.data, buf.len);
            snprintf(key, sizeof key, ST_KEY_JOBLIST "%s", c->it.job);
            if (!e)
                e = keep(r->x, key, NULL, 0);
            if (!e)
                r->x->parts++;
        }
        st_manifest_free(&m);
        st_replica_free(&rec);
        break; /* one record that passed its checks decides */
    }
    st_bytes_free(&got);
    st_bytes_free(&buf);
    return e;
}

/* ---- the backend ---- */

static const kept_object *find(const alone_ctx *x, const char *key)
{
    for (size_t i = 0; i < x->n; i++)
        if (!strcmp(x->objs[i].key, key))
            return &x->objs[i];
    return NULL;
}

/* What the store would have answered for a key not kept: a step's object
 * not kept does not exist for this reader; anything else needs the store. */
static st_err not_kept(const char *key)
{
    char job[ST_JOB_MAX + 1];
    st_id pack;
    if (!strncmp(key, "jobs/", 5) && !st_key_parse_pack(key, job, &pack))
        return st_seterr(ST_ERR_NOT_FOUND, "%s: not on the peers", key);
    return st_seterr(ST_ERR_TRANSIENT, "%s: the store cannot be reached (reading from peers alone)",
                     key);
}

static st_err alone_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    const kept_object *k = find(ctx, key);
    if (!k)
        return not_kept(key);
    if (off > k->bytes.len)
        return st_seterr(ST_ERR_INVALID, "%s: offset past its end", key);
    uint64_t n = k->bytes.len - off < len ? k->bytes.len - off : len;
    st_bytes_clear(out);
    return n ? st_bytes_append(out, k->bytes.data + off, (size_t)n) : ST_OK;
}

static st_err alone_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    return st_get_stream_by_get(alone_get, ctx, key, off, len, sink);
}

static st_err alone_stat(void *ctx, const char *key, uint64_t *size)
{
    const kept_object *k = find(ctx, key);
    if (!k)
        return not_kept(key);
    *size = k->bytes.len;
    return ST_OK;
}

static st_err alone_stat_time(void *ctx, const char *key, st_store_time *t)
{
    (void)ctx;
    (void)t;
    return st_seterr(ST_ERR_TRANSIENT, "%s: the store's clock cannot be read (store unreachable)",
                     key);
}

static st_err alone_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    const alone_ctx *x = ctx;
    size_t n = strlen(prefix);
    for (size_t i = 0; i < x->n; i++)
        if (!strncmp(x->objs[i].key, prefix, n) && cb(arg, x->objs[i].key, x->objs[i].bytes.len))
            break;
    return ST_OK;
}

static st_err alone_put(void *ctx, const char *key, const void *data, size_t len)
{
    (void)ctx;
    (void)data;
    (void)len;
    return st_seterr(ST_ERR_PERMANENT,
                     "%s: not written: the store cannot be reached and peers "
                     "are only read",
                     key);
}

static st_err alone_del(void *ctx, const char *key)
{
    return alone_put(ctx, key, NULL, 0);
}

static void alone_close(void *ctx)
{
    alone_ctx *x = ctx;
    for (size_t i = 0; i < x->n; i++)
        st_bytes_free(&x->objs[i].bytes);
    free(x->objs);
    free(x);
}

static const st_backend_ops alone_ops = {
    .scheme = "peers-alone",
    .put = alone_put,
    .get = alone_get,
    .get_stream = alone_get_stream,
    .stat = alone_stat,
    .stat_time = alone_stat_time,
    .list = alone_list,
    .del = alone_del,
    .close = alone_close,
};

static int cmp_kept(const void *a, const void *b)
{
    return strcmp(((const kept_object *)a)->key, ((const kept_object *)b)->key);
}

st_err st_peer_alone_open(const st_peer_alone_opts *o, st_backend **out)
{
    *out = NULL;
    open_run *r = calloc(1, sizeof *r);
    st_backend *b = calloc(1, sizeof *b);
    st_err e = r && b && (r->x = calloc(1, sizeof *r->x))
                   ? ST_OK
                   : st_seterr(ST_ERR_NOMEM, "out of memory");
    if (r)
        r->o = o;
    if (!e)
        e = ask_peers(r);
    if (!e)
        e = gather_candidates(r);
    for (size_t i = 0; !e && r && i < r->ncands; i++)
        e = take_candidate(r, &r->cands[i]);
    if (!e) {
        if (r->x->n) /* none kept: objs is NULL, which qsort may not be given */
            qsort(r->x->objs, r->x->n, sizeof *r->x->objs, cmp_kept);
        b->ops = &alone_ops;
        b->ctx = r->x;
        *out = b;
        b = NULL;
        r->x = NULL;
    }
    if (r) {
        for (size_t i = 0; i < r->npeers; i++) {
            st_peer_client_free(r->peers[i].client);
            st_peer_listing_free(&r->peers[i].listing);
        }
        free(r->cands);
        if (r->x)
            alone_close(r->x);
        free(r);
    }
    free(b);
    return e;
}

size_t st_peer_alone_parts(st_backend *b)
{
    return b && b->ops == &alone_ops ? ((alone_ctx *)b->ctx)->parts : 0;
}

static int stop_at_first(void *arg, const char *key, uint64_t size)
{
    (void)arg;
    (void)key;
    (void)size;
    return 1;
}

st_err st_peer_reader_open(st_backend *store, const st_peer_read_opts *ro,
                           const st_peer_alone_opts *ao, int *alone, st_backend **out)
{
    *out = NULL;
    *alone = 0;
    st_err e = ST_OK;
    if (ao && ao->peers)
        e = ao->store_down ? st_seterr(ST_ERR_TRANSIENT, "%s", ao->store_down)
                           : st_list(store, ST_KEY_JOBLIST, stop_at_first, NULL);
    if (e == ST_ERR_TRANSIENT) {
        char why[512];
        snprintf(why, sizeof why, "%s", st_errmsg());
        st_peer_alone_opts o = *ao;
        o.store_error = why;
        st_backend_close(store);
        store = NULL;
        if ((e = st_peer_alone_open(&o, &store)))
            return e;
        *alone = 1;
    } else if (e) {
        st_backend_close(store);
        return e;
    }
    if ((e = st_peer_read_wrap(&store, ro))) {
        st_backend_close(store);
        *alone = 0;
        return e;
    }
    *out = store;
    return ST_OK;
}
