/*
 * st_vfs_takeover — a peer makes a replica durable without its writer
 * (docs/PEERS.md, "Takeover").
 *
 * On the refresher thread of a mount that keeps replicas (--peer-listen),
 * after each refresh, for every replica it holds that is not durable yet:
 *
 *   1. the writer's part record of that revision or newer is in the store:
 *      the replica is durable (evictable first); nothing else;
 *   2. the writer's node lease is live (by the store's clock, docs/NODES.md):
 *      the writer will publish; nothing;
 *   3. the replica record is not in the store (the writer died before it,
 *      or a newer revision superseded it): no reader counts on this copy;
 *      it becomes evictable (marked as if durable);
 *   4. this node is not the first holder the record names whose own lease
 *      is live: that holder takes over; nothing;
 *   5. otherwise this node takes the writer's lease, PUTs the packs the
 *      store lacks from its copies (each checked against its id as it is
 *      read), and publishes the record's manifest and part record through
 *      st_catalog_publish with the GC's last look and a look at the lease
 *      it holds; then it deletes the record. The lease is left to go stale,
 *      as at an unmount.
 *
 * Every step is idempotent: a takeover that dies half-way is done again by
 * the next holder (or this one) with the same keys and the same bytes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/st_catalog.h"
#include "engine/st_gc.h"
#include "engine/st_nodelease.h"
#include "mount/st_vfs_impl.h"
#include "peer/st_peer_cache.h"
#include "peer/st_peer_server.h"
#include "peer/st_replica.h"
#include "util/st_fsutil.h"

/* A held replica, copied out of the cache's listing. */
typedef struct held_part {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    uint32_t rev;
} held_part;

typedef struct held_list {
    held_part *v;
    size_t n, cap;
} held_list;

static int collect_held(void *arg, const st_peer_part_name *p, int durable)
{
    held_list *l = arg;
    if (durable)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        held_part *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return 1;
        l->v = nv;
        l->cap = cap;
    }
    held_part *h = &l->v[l->n++];
    snprintf(h->job, sizeof h->job, "%s", p->job);
    snprintf(h->node, sizeof h->node, "%s", p->node);
    h->step = p->step;
    h->rev = p->rev;
    return 0;
}

/* The lease this daemon writes under another node's name while it takes
 * over: its own instance, so its own heartbeat is never confused with it. */
static st_lease takeover_lease(st_vfs *v)
{
    st_lease l = v->lease.mine;
    l.heartbeat_ns = st_now_ns();
    return l;
}

/* Whether this daemon could hold node's lease: ST_OK (absent, stale, or
 * already the one it took), ST_ERR_BUSY (another live instance holds it,
 * the message names it), or a store error. Writes nothing. */
static st_err check_lease(st_vfs *v, const char *node)
{
    st_lease mine = takeover_lease(v);
    return st_nodelease_claim(v->backend, node, &mine, ST_CLAIM_CHECK, NULL, NULL);
}

/* 1 if node's lease is live and not ours (its daemon will act), 0 if it is
 * stale or absent; -1 on a store error. */
static int lease_live(st_vfs *v, const char *node)
{
    st_err e = check_lease(v, node);
    return e == ST_OK ? 0 : e == ST_ERR_BUSY ? 1 : -1;
}

typedef struct lease_look {
    st_vfs *v;
    const char *node;
} lease_look;

/* The publish's check: the writer's lease is still the one this daemon took. */
static st_err still_ours(void *arg)
{
    lease_look *l = arg;
    st_err e = check_lease(l->v, l->node);
    return e == ST_ERR_BUSY ? st_seterr(ST_ERR_TRANSIENT, "takeover: %s", st_errmsg()) : e;
}

typedef struct gc_look {
    st_vfs *v;
    const st_manifest *m;
} gc_look;

static st_err packs_usable(void *arg)
{
    gc_look *g = arg;
    int64_t deadline = INT64_MAX;
    size_t bad = 0;
    return st_gc_packs_usable(g->v->backend, g->m->job, g->m->packs, g->m->npacks, &deadline, &bad);
}

/* Every pack of m the store lacks, PUT from this node's copy. */
static st_err put_missing_packs(st_vfs *v, st_peer_cache *cache, const st_manifest *m,
                                uint64_t *put)
{
    st_bytes buf = {0};
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < m->npacks; i++) {
        char key[ST_KEY_MAX], hex[ST_ID_HEX_LEN + 1];
        uint64_t size = 0;
        if ((e = st_key_pack(key, sizeof key, m->job, &m->packs[i])))
            break;
        e = st_stat(v->backend, key, &size);
        if (e != ST_ERR_NOT_FOUND)
            continue; /* there (ST_OK), or a store error that ends the loop */
        int fd = -1;
        if ((e = st_peer_cache_open_pack(cache, &m->packs[i], &fd, &size))) {
            e = st_seterr(ST_ERR_NOT_FOUND, "pack %s is neither in the store nor held here",
                          st_id_hex(&m->packs[i], hex));
            break;
        }
        size_t got = 0;
        st_bytes_clear(&buf);
        e = st_bytes_reserve(&buf, (size_t)size);
        if (!e)
            e = st_read_full(fd, buf.data, (size_t)size, &got, "peer pack");
        close(fd);
        if (!e && got != size)
            e = st_seterr(ST_ERR_CORRUPT, "pack %s changed while read",
                          st_id_hex(&m->packs[i], hex));
        st_id id = st_id_of(buf.data, got);
        if (!e && st_id_cmp(&id, &m->packs[i]))
            e = st_seterr(ST_ERR_CORRUPT, "pack %s: its bytes fail its id", hex);
        if (!e)
            e = st_put(v->backend, key, buf.data, got);
        if (!e)
            (*put)++;
    }
    st_bytes_free(&buf);
    return e;
}

/* Publishes the replica record rec (of held part h) as its writer would have. */
static st_err publish_record(st_vfs *v, st_peer_cache *cache, const held_part *h,
                             const st_replica *rec, const st_part *part_in, uint64_t *packs_put)
{
    st_manifest m = {0};
    st_part part = *part_in;
    st_err e = st_manifest_decode(rec->manifest.data, rec->manifest.len, &m);
    if (e)
        return e;
    st_lease mine = takeover_lease(v);
    if ((e = st_nodelease_claim(v->backend, h->node, &mine, ST_CLAIM_ACQUIRE, NULL, NULL)))
        goto out;
    if ((e = put_missing_packs(v, cache, &m, packs_put)))
        goto out;
    lease_look ll = {v, h->node};
    gc_look gl = {v, &m};
    const st_publish_check checks[] = {{packs_usable, &gl}, {still_ours, &ll}};
    uint64_t puts = 0;
    e = st_catalog_publish(v->backend, &m, &part, checks, 2, &puts);
out:
    st_manifest_free(&m);
    return e;
}

/* One held replica: the five cases of the file comment. */
static void look_at(st_vfs *v, st_peer_cache *cache, const held_part *h)
{
    st_peer_part_name name = {h->job, h->step, h->node, h->rev};
    st_bytes buf = {0};
    st_part part;
    st_err e = st_catalog_load_part(v->backend, h->job, h->step, h->node, &buf, &part);
    if (e == ST_OK) {
        int durable = part.revision >= h->rev;
        st_part_free(&part);
        if (durable)
            st_peer_cache_mark_durable(cache, &name);
        goto out;
    }
    if (e != ST_ERR_NOT_FOUND || lease_live(v, h->node))
        goto out;
    char key[ST_KEY_MAX];
    st_replica rec;
    if (st_key_replica(key, sizeof key, h->job, h->step, h->node, h->rev))
        goto out;
    e = st_get(v->backend, key, 0, ST_GET_TO_END, &buf);
    if (e == ST_ERR_NOT_FOUND) { /* never recorded, and its writer is gone: nobody needs it */
        st_peer_cache_mark_durable(cache, &name);
        goto out;
    }
    if (e || st_replica_decode(buf.data, buf.len, &rec, &part))
        goto out;
    int mine = 0;
    for (size_t i = 0; i < rec.nholders; i++) {
        if (!strcmp(rec.holders[i].node, v->node)) {
            mine = 1;
            break;
        }
        if (lease_live(v, rec.holders[i].node))
            break; /* an earlier holder is alive: its turn */
    }
    uint64_t packs_put = 0;
    if (mine && !(e = publish_record(v, cache, h, &rec, &part, &packs_put))) {
        st_peer_cache_mark_durable(cache, &name);
        st_del(v->backend, key);
        vfs_log(v, 0,
                "took over step %" PRIu64 " of job %s from node %s (its lease is stale): "
                "durable, %" PRIu64 " pack(s) uploaded from this node's copy",
                h->step, h->job, h->node, packs_put);
        __atomic_add_fetch(&v->takeovers, 1, __ATOMIC_RELAXED);
    } else if (mine)
        vfs_log(v, 1, "taking over step %" PRIu64 " of job %s from node %s: %s", h->step, h->job,
                h->node, st_errmsg());
    st_part_free(&part);
    st_replica_free(&rec);
out:
    st_bytes_free(&buf);
}

void vfs_takeover_tick(st_vfs *v)
{
    st_peer_cache *cache = vfs_peers_cache(v);
    if (!cache)
        return;
    held_list l = {0};
    if (st_peer_cache_list_parts(cache, collect_held, &l) == ST_OK)
        for (size_t i = 0; i < l.n; i++)
            look_at(v, cache, &l.v[i]);
    free(l.v);
}
