/*
 * st_peer_read — a reader's view of the store with replicated parts in it
 * (st_peer_read.h; docs/PEERS.md, "What a reader does").
 */
#include "peer/st_peer_read.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_manifest.h"
#include "format/st_part.h"
#include "peer/st_peer_client.h"
#include "peer/st_replica.h"
#include "util/st_array.h"
#include "util/st_fsutil.h"

#define CACHED_PACKS_MAX 8 /* whole packs kept on disk while ranges of them are read */

/* A part shown from its replica record. */
typedef struct shown_part {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    st_replica rec;
    st_id *packs; /* the packs its manifest names: asked of its holders first */
    size_t npacks;
} shown_part;

/* A peer asked for packs, by address. */
typedef struct peer_conn {
    char addr[ST_PEER_ADDR_MAX + 1];
    st_peer_client *client; /* one request at a time: under its own lock */
    pthread_mutex_t lock;
    int corrupt; /* gave bytes that failed their id, or refused our secret: not asked again */
} peer_conn;

typedef struct read_ctx {
    st_backend *store;
    st_backend *cache; /* file:// at cache_dir */
    char self_node[ST_NODE_MAX + 1];
    const st_peer_secret *secret;
    void (*log)(void *arg, const char *msg);
    void *log_arg;
    pthread_mutex_t lock; /* shown, peers, cached, stats */
    shown_part *shown;
    size_t nshown, shown_cap;
    peer_conn **peers;
    size_t npeers, peers_cap;
    char cached[CACHED_PACKS_MAX][ST_KEY_MAX]; /* ring of keys in the cache, oldest first */
    size_t ncached, cached_next;
    st_peer_read_stats stats;
} read_ctx;

static void shown_free(shown_part *p)
{
    st_replica_free(&p->rec);
    free(p->packs);
}

/* The entry of (job, step, node), or NULL (lock held). */
static shown_part *shown_find(read_ctx *x, const char *job, uint64_t step, const char *node)
{
    for (size_t i = 0; i < x->nshown; i++)
        if (x->shown[i].step == step && !strcmp(x->shown[i].job, job) &&
            !strcmp(x->shown[i].node, node))
            return &x->shown[i];
    return NULL;
}

static void shown_drop(read_ctx *x, const char *job, uint64_t step, const char *node)
{
    shown_part *p = shown_find(x, job, step, node);
    if (!p)
        return;
    shown_free(p);
    *p = x->shown[--x->nshown];
}

/* ---- the listing ---- */

typedef struct listed {
    char *key;
    uint64_t size;
} listed;

typedef struct listing {
    listed *keys;
    size_t n, cap;
    int oom;
} listing;

static int add_listed(listing *l, const char *key, uint64_t size)
{
    if (st_array_grow((void **)&l->keys, &l->cap, l->n + 1, sizeof *l->keys) ||
        !(l->keys[l->n].key = strdup(key)))
        return l->oom = 1;
    l->keys[l->n++].size = size;
    return 0;
}

static int collect_cb(void *arg, const char *key, uint64_t size)
{
    return add_listed(arg, key, size);
}

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i].key);
    free(l->keys);
}

static int cmp_listed(const void *a, const void *b)
{
    return strcmp(((const listed *)a)->key, ((const listed *)b)->key);
}

/* The job of a key jobs/<job>/...; 0 if it is not one. */
static int key_job(const char *key, char *job)
{
    if (strncmp(key, "jobs/", 5))
        return 0;
    const char *s = key + 5, *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : 0;
    if (!n || n > ST_JOB_MAX)
        return 0;
    memcpy(job, s, n);
    job[n] = '\0';
    return 1;
}

/* The replica record of the listing's key i, read and kept (lock not held). */
static st_err load_shown(read_ctx *x, const char *key, const char *job, uint64_t step,
                         const char *node, uint32_t rev)
{
    pthread_mutex_lock(&x->lock);
    shown_part *have = shown_find(x, job, step, node);
    int known = have && have->rec.revision >= rev;
    pthread_mutex_unlock(&x->lock);
    if (known)
        return ST_OK;
    st_bytes buf = {0};
    shown_part p = {0};
    st_manifest m = {0};
    st_err e = st_get(x->store, key, 0, ST_GET_TO_END, &buf);
    if (e == ST_ERR_NOT_FOUND) { /* made durable and deleted since the listing */
        st_bytes_free(&buf);
        return ST_OK;
    }
    if (!e)
        e = st_replica_decode(buf.data, buf.len, &p.rec, NULL);
    if (!e && p.rec.revision != rev)
        e = st_seterr(ST_ERR_CORRUPT, "%s: holds revision %u", key, p.rec.revision);
    if (!e)
        e = st_manifest_decode(p.rec.manifest.data, p.rec.manifest.len, &m);
    st_bytes_free(&buf);
    if (e) {
        st_replica_free(&p.rec);
        return e;
    }
    p.packs = m.packs; /* taken over from the manifest */
    p.npacks = m.npacks;
    m.packs = NULL;
    m.npacks = 0;
    st_manifest_free(&m);
    snprintf(p.job, sizeof p.job, "%s", job);
    snprintf(p.node, sizeof p.node, "%s", node);
    p.step = step;
    pthread_mutex_lock(&x->lock);
    shown_drop(x, job, step, node);
    if (st_array_grow((void **)&x->shown, &x->shown_cap, x->nshown + 1, sizeof *x->shown)) {
        pthread_mutex_unlock(&x->lock);
        shown_free(&p);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    x->shown[x->nshown++] = p;
    x->stats.replicated_parts++;
    pthread_mutex_unlock(&x->lock);
    return ST_OK;
}

/* The newest revision among the listing's manifests of (step, node) that a
 * part record of the node also lists; 0 if the node has no part record. */
static uint32_t published_revision(const listing *l, const char *job, uint64_t step,
                                   const char *node)
{
    uint32_t best = 0;
    int has_part = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint64_t s;
        const char *rest;
        char n[ST_NODE_MAX + 1];
        uint32_t rev;
        if (st_key_parse_step(l->keys[i].key, job, &s, &rest) || s != step)
            continue;
        if (st_key_parse_part(rest, n) && !strcmp(n, node))
            has_part = 1;
        else if (st_key_parse_manifest(rest, n, &rev) && !strcmp(n, node) && rev > best)
            best = rev;
    }
    return has_part ? best : 0;
}

/* Adds (or replaces) the listed key with size. */
static int set_listed(listing *l, const char *key, uint64_t size)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->keys[i].key, key)) {
            l->keys[i].size = size;
            return 0;
        }
    return add_listed(l, key, size);
}

/* Shows the replicated parts of the listing: their record read, their two
 * keys added. */
static st_err add_replicated(read_ctx *x, listing *l)
{
    size_t n = l->n; /* keys added below are not replica records */
    for (size_t i = 0; i < n; i++) {
        char job[ST_JOB_MAX + 1], node[ST_NODE_MAX + 1], key[ST_KEY_MAX];
        uint64_t step;
        uint32_t rev;
        const char *rest;
        if (!key_job(l->keys[i].key, job) || st_key_parse_step(l->keys[i].key, job, &step, &rest) ||
            !st_key_parse_replica(rest, node, &rev) || !strcmp(node, x->self_node))
            continue; /* this node's own parts: its staging has them, or takeover will */
        if (published_revision(l, job, step, node) >= rev) { /* durable: the store's own */
            pthread_mutex_lock(&x->lock);
            shown_drop(x, job, step, node);
            pthread_mutex_unlock(&x->lock);
            continue;
        }
        st_err e = load_shown(x, l->keys[i].key, job, step, node, rev);
        if (e)
            return e;
        pthread_mutex_lock(&x->lock);
        shown_part *p = shown_find(x, job, step, node);
        uint64_t part_len = p ? p->rec.part.len : 0, man_len = p ? p->rec.manifest.len : 0;
        uint32_t shown_rev = p ? p->rec.revision : 0;
        pthread_mutex_unlock(&x->lock);
        if (!p)
            continue;
        if ((e = st_key_part(key, sizeof key, job, step, node)))
            return e;
        if (set_listed(l, key, part_len))
            break;
        if ((e = st_key_manifest(key, sizeof key, job, step, node, shown_rev)))
            return e;
        if (set_listed(l, key, man_len))
            break;
    }
    return l->oom ? st_seterr(ST_ERR_NOMEM, "out of memory") : ST_OK;
}

static st_err read_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    read_ctx *x = ctx;
    if (strncmp(prefix, "jobs/", 5) || strstr(prefix, "/packs/"))
        return st_list(x->store, prefix, cb, arg);
    listing l = {0};
    st_err e = st_list(x->store, prefix, collect_cb, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e)
        e = add_replicated(x, &l);
    if (!e) {
        if (l.n) /* an empty listing's keys are NULL, which qsort may not be given */
            qsort(l.keys, l.n, sizeof *l.keys, cmp_listed);
        for (size_t i = 0; i < l.n; i++)
            if (!strncmp(l.keys[i].key, prefix, strlen(prefix)) &&
                cb(arg, l.keys[i].key, l.keys[i].size))
                break;
    }
    listing_free(&l);
    return e;
}

/* ---- the objects a replica record stands for ---- */

/* The bytes a replica record holds for key, copied into out's range; 1 if
 * key is one of them, 0 if the store answers it. */
static int shown_object(read_ctx *x, const char *key, uint64_t off, uint64_t len, st_bytes *out,
                        uint64_t *size, st_err *e)
{
    char job[ST_JOB_MAX + 1], node[ST_NODE_MAX + 1];
    uint64_t step;
    uint32_t rev = 0;
    const char *rest;
    if (!key_job(key, job) || st_key_parse_step(key, job, &step, &rest))
        return 0;
    int is_part = st_key_parse_part(rest, node);
    if (!is_part && !st_key_parse_manifest(rest, node, &rev))
        return 0;
    pthread_mutex_lock(&x->lock);
    shown_part *p = shown_find(x, job, step, node);
    const st_bytes *src = !p                       ? NULL
                          : is_part                ? &p->rec.part
                          : rev == p->rec.revision ? &p->rec.manifest
                                                   : NULL;
    if (!src) {
        pthread_mutex_unlock(&x->lock);
        return 0;
    }
    *e = ST_OK;
    if (size)
        *size = src->len;
    if (out) {
        if (off > src->len)
            *e = st_seterr(ST_ERR_INVALID, "%s: offset past its end", key);
        else {
            uint64_t n = src->len - off < len ? src->len - off : len;
            st_bytes_clear(out);
            *e = st_bytes_append(out, src->data + off, (size_t)n);
        }
    }
    pthread_mutex_unlock(&x->lock);
    return 1;
}

/* ---- packs from peers ---- */

static peer_conn *peer_of(read_ctx *x, const char *addr)
{
    for (size_t i = 0; i < x->npeers; i++)
        if (!strcmp(x->peers[i]->addr, addr))
            return x->peers[i];
    peer_conn *c = calloc(1, sizeof *c);
    if (!c || st_array_grow((void **)&x->peers, &x->peers_cap, x->npeers + 1, sizeof *x->peers) ||
        st_peer_client_new(addr, x->self_node, x->secret, 0, &c->client)) {
        free(c);
        return NULL;
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    pthread_mutex_init(&c->lock, NULL);
    x->peers[x->npeers++] = c;
    return c;
}

/* Up to max peers that hold pack per the records shown (lock held). */
static size_t holders_of(read_ctx *x, const char *job, const st_id *pack, peer_conn **out,
                         size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < x->nshown; i++) {
        shown_part *p = &x->shown[i];
        if (strcmp(p->job, job))
            continue;
        int named = 0;
        for (size_t k = 0; k < p->npacks && !named; k++)
            named = !st_id_cmp(&p->packs[k], pack);
        for (size_t h = 0; named && h < p->rec.nholders && n < max; h++) {
            peer_conn *c = peer_of(x, p->rec.holders[h].addr);
            int dup = 0;
            for (size_t k = 0; k < n; k++)
                dup |= out[k] == c;
            if (c && !c->corrupt && !dup)
                out[n++] = c;
        }
    }
    return n;
}

static void report(read_ctx *x, const char *fmt, const char *a, const char *b)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    if (x->log)
        x->log(x->log_arg, msg);
}

/* Keeps key in the cache's ring, dropping the oldest past the bound. */
static void cache_note(read_ctx *x, const char *key)
{
    char old[ST_KEY_MAX] = "";
    pthread_mutex_lock(&x->lock);
    if (x->ncached == CACHED_PACKS_MAX)
        memcpy(old, x->cached[x->cached_next], sizeof old);
    else
        x->ncached++;
    snprintf(x->cached[x->cached_next], ST_KEY_MAX, "%s", key);
    x->cached_next = (x->cached_next + 1) % CACHED_PACKS_MAX;
    pthread_mutex_unlock(&x->lock);
    if (old[0])
        st_del(x->cache, old);
}

/* The pack at key from a peer that holds it, into the cache: ST_OK, or
 * ST_ERR_NOT_FOUND when no peer gave it (the store is asked then). */
static st_err pack_from_peers(read_ctx *x, const char *key)
{
    char job[ST_JOB_MAX + 1], hex[ST_ID_HEX_LEN + 1];
    st_id id;
    if (!st_key_parse_pack(key, job, &id))
        return ST_ERR_NOT_FOUND;
    st_id_hex(&id, hex);
    peer_conn *peers[ST_REPLICA_MAX_HOLDERS];
    pthread_mutex_lock(&x->lock);
    size_t n = holders_of(x, job, &id, peers, ST_REPLICA_MAX_HOLDERS);
    pthread_mutex_unlock(&x->lock);
    st_bytes buf = {0};
    st_err e = ST_ERR_NOT_FOUND;
    for (size_t i = 0; i < n && e; i++) {
        pthread_mutex_lock(&peers[i]->lock);
        e = st_peer_get_pack(peers[i]->client, &id, &buf);
        pthread_mutex_unlock(&peers[i]->lock);
        if (e == ST_ERR_AUTH) {
            report(x, "%s (%s)", st_errmsg(), "its packs are read from the store");
            pthread_mutex_lock(&x->lock);
            peers[i]->corrupt = 1; /* not asked again: the secret will not change */
            pthread_mutex_unlock(&x->lock);
        } else if (e == ST_ERR_CORRUPT) {
            report(x, "peer at %s gave pack %s with bytes that fail its id: not asked again",
                   peers[i]->addr, hex);
            pthread_mutex_lock(&x->lock);
            peers[i]->corrupt = 1;
            x->stats.peer_corrupt++;
            pthread_mutex_unlock(&x->lock);
        }
    }
    if (!e && !(e = st_put(x->cache, key, buf.data, buf.len))) {
        pthread_mutex_lock(&x->lock);
        x->stats.peer_packs++;
        x->stats.peer_bytes += buf.len;
        pthread_mutex_unlock(&x->lock);
        cache_note(x, key);
    } else if (n) {
        pthread_mutex_lock(&x->lock);
        x->stats.store_fallbacks++;
        pthread_mutex_unlock(&x->lock);
        e = ST_ERR_NOT_FOUND;
    }
    st_bytes_free(&buf);
    return e ? ST_ERR_NOT_FOUND : ST_OK;
}

/* 1 if key is a pack some shown part names: its reads go to the cache,
 * filled from a holder (a pack no holder gives is read from the store). */
static int pack_via_peers(read_ctx *x, const char *key)
{
    char job[ST_JOB_MAX + 1];
    st_id id;
    if (!st_key_parse_pack(key, job, &id))
        return 0;
    pthread_mutex_lock(&x->lock);
    size_t n = x->nshown;
    pthread_mutex_unlock(&x->lock);
    if (!n)
        return 0;
    uint64_t size;
    if (st_stat(x->cache, key, &size) == ST_OK)
        return 1;
    return pack_from_peers(x, key) == ST_OK;
}

/* ---- the backend ---- */

static st_err read_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    read_ctx *x = ctx;
    st_err e;
    if (shown_object(x, key, off, len, out, NULL, &e))
        return e;
    if (pack_via_peers(x, key) && !(e = st_get(x->cache, key, off, len, out)))
        return ST_OK;
    return st_get(x->store, key, off, len, out);
}

static st_err read_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                              const st_get_sink *sink)
{
    read_ctx *x = ctx;
    st_err e;
    uint64_t size;
    if (shown_object(x, key, 0, 0, NULL, &size, &e) || pack_via_peers(x, key))
        return st_get_stream_by_get(read_get, ctx, key, off, len, sink);
    return st_get_stream(x->store, key, off, len, sink);
}

static st_err read_stat(void *ctx, const char *key, uint64_t *size)
{
    read_ctx *x = ctx;
    st_err e;
    if (shown_object(x, key, 0, 0, NULL, size, &e))
        return e;
    return st_stat(x->store, key, size);
}

static st_err read_stat_time(void *ctx, const char *key, st_store_time *t)
{
    read_ctx *x = ctx;
    return st_stat_time(x->store, key, t);
}

static st_err read_put(void *ctx, const char *key, const void *data, size_t len)
{
    read_ctx *x = ctx;
    return st_put(x->store, key, data, len);
}

static st_err read_del(void *ctx, const char *key)
{
    read_ctx *x = ctx;
    return st_del(x->store, key);
}

static int drop_cached(void *arg, const char *key, uint64_t size)
{
    (void)size;
    st_del(arg, key);
    return 0;
}

static void read_close(void *ctx)
{
    read_ctx *x = ctx;
    if (x->cache) {
        st_list(x->cache, "", drop_cached, x->cache);
        st_backend_close(x->cache);
    }
    for (size_t i = 0; i < x->nshown; i++)
        shown_free(&x->shown[i]);
    free(x->shown);
    for (size_t i = 0; i < x->npeers; i++) {
        st_peer_client_free(x->peers[i]->client);
        pthread_mutex_destroy(&x->peers[i]->lock);
        free(x->peers[i]);
    }
    free(x->peers);
    pthread_mutex_destroy(&x->lock);
    st_backend_close(x->store);
    free(x);
}

static const st_backend_ops read_ops = {
    .scheme = "peer-read",
    .put = read_put,
    .get = read_get,
    .get_stream = read_get_stream,
    .stat = read_stat,
    .stat_time = read_stat_time,
    .list = read_list,
    .del = read_del,
    .close = read_close,
};

st_err st_peer_read_wrap(st_backend **b, const st_peer_read_opts *o)
{
    read_ctx *x = calloc(1, sizeof *x);
    st_backend *w = calloc(1, sizeof *w);
    st_err e = x && w ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e)
        e = st_mkdir_p_mode(o->cache_dir, 0700);
    if (!e)
        e = st_backend_file_open(o->cache_dir, &x->cache);
    if (e) {
        free(x);
        free(w);
        return e;
    }
    pthread_mutex_init(&x->lock, NULL);
    snprintf(x->self_node, sizeof x->self_node, "%s", o->self_node);
    x->secret = o->secret;
    x->log = o->log;
    x->log_arg = o->log_arg;
    x->store = *b;
    w->ops = &read_ops;
    w->ctx = x;
    *b = w;
    return ST_OK;
}

void st_peer_read_get_stats(st_backend *b, st_peer_read_stats *out)
{
    read_ctx *x = b->ctx;
    pthread_mutex_lock(&x->lock);
    *out = x->stats;
    pthread_mutex_unlock(&x->lock);
}

int st_peer_read_is_replicated(st_backend *b, const char *job, uint64_t step, const char *node)
{
    if (b->ops != &read_ops)
        return 0;
    read_ctx *x = b->ctx;
    int shown = 0;
    pthread_mutex_lock(&x->lock);
    for (size_t i = 0; i < x->nshown && !shown; i++)
        shown = x->shown[i].step == step && !strcmp(x->shown[i].job, job) &&
                (!node || !strcmp(x->shown[i].node, node));
    pthread_mutex_unlock(&x->lock);
    return shown;
}
