/*
 * st_vfs_peers — the mount's peer tier (docs/PEERS.md): the peer server
 * that keeps other nodes' replicas, the read view that shows replicated
 * parts, and the replication of this node's parts through the spool.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "mount/st_vfs_impl.h"
#include "peer/st_peer_alone.h"
#include "peer/st_peer_auth.h"
#include "peer/st_peer_read.h"
#include "peer/st_peer_server.h"
#include "peer/st_replicate.h"
#include "peer/st_spool.h"
#include "engine/st_catalog.h"

typedef struct vfs_peers {
    st_peer_secret secret;
    st_peer_server *server; /* NULL: no --peer-listen */
    st_peer_set *set;       /* NULL: no --peers */
    st_spool *spool;        /* with set: where packs go before the store */
    unsigned replicas;
    st_replication_result last; /* of the upload under way (one at a time) */
    pthread_mutex_t lock;       /* the counters below, and alone */
    uint64_t parts_replicated, parts_unreplicated, bytes_sent;
    st_backend *alone; /* the view over the peers alone, once built (vfs_peers_alone) */
    int alone_tried;   /* its build failed: not asked again */
} vfs_peers;

static void read_log(void *arg, const char *msg)
{
    vfs_log(arg, 1, "%s", msg);
}

/* STAGING/<name> in out. */
static st_err staging_path(st_vfs *v, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", v->staging, name);
    return n > 0 && (size_t)n < cap ? ST_OK : st_seterr(ST_ERR_INVALID, "staging path too long");
}

static uint64_t default_cache_cap(st_vfs *v)
{
    struct statvfs sv;
    if (statvfs(v->staging, &sv))
        return 0;
    return (uint64_t)sv.f_blocks * sv.f_frsize / 5;
}

static st_err start_server(st_vfs *v, vfs_peers *p)
{
    char dir[4096];
    st_err e = staging_path(v, "peer", dir, sizeof dir);
    if (e)
        return e;
    st_peer_server_opts so = {.listen = v->opts.peer_listen,
                              .dir = dir,
                              .node = v->node,
                              .failure_domain = v->opts.failure_domain,
                              .secret = &p->secret,
                              .tls_cert_file = v->opts.peer_tls_cert,
                              .tls_key_file = v->opts.peer_tls_key,
                              .keyring = v->keyring,
                              .cache_cap = v->opts.peer_cache_cap ? v->opts.peer_cache_cap
                                                                  : default_cache_cap(v)};
    if ((e = st_peer_server_start(&so, &p->server)))
        return st_seterr(e, "--peer-listen %s: %s", v->opts.peer_listen, st_errmsg());
    vfs_log(v, 0, "keeping replicas for peers on %s (port %d%s)", v->opts.peer_listen,
            st_peer_server_port(p->server), v->opts.peer_tls_cert ? ", TLS" : "");
    return ST_OK;
}

/* A read view's options, its cache in STAGING/<name> (dir: the path's buffer). */
static st_err read_opts(st_vfs *v, vfs_peers *p, const char *name, char *dir, size_t cap,
                        st_peer_read_opts *ro)
{
    st_err e = staging_path(v, name, dir, cap);
    *ro = (st_peer_read_opts){.self_node = v->node,
                              .secret = &p->secret,
                              .cache_dir = dir,
                              .log = read_log,
                              .log_arg = v};
    return e;
}

/* The read view, over a count wrapper of its own (closing the view closes
 * only that wrapper): with a secret, every mount sees replicated steps. */
static st_err start_read_view(st_vfs *v, vfs_peers *p)
{
    char dir[4096];
    st_backend *counted = NULL;
    st_peer_read_opts ro;
    st_err e = read_opts(v, p, "peer-read", dir, sizeof dir, &ro);
    if (!e)
        e = st_backend_count_borrow(v->store_backend, &v->requests, &counted);
    if (e)
        return e;
    if ((e = st_peer_read_wrap(&counted, &ro))) {
        st_backend_close(counted);
        return e;
    }
    v->read_backend = counted;
    return ST_OK;
}

st_backend *vfs_peers_alone(st_vfs *v)
{
    vfs_peers *p = v->peers;
    if (!p || !v->opts.peers)
        return NULL;
    char why[512];
    snprintf(why, sizeof why, "%s", st_errmsg());
    pthread_mutex_lock(&p->lock);
    if (!p->alone && !p->alone_tried) {
        p->alone_tried = 1;
        char dir[4096];
        st_peer_read_opts ro;
        st_peer_alone_opts ao = {.peers = v->opts.peers,
                                 .self_node = v->node,
                                 .secret = &p->secret,
                                 .keyring = v->keyring,
                                 .store_error = why,
                                 .log = read_log,
                                 .log_arg = v};
        st_backend *b = NULL;
        size_t parts = 0;
        st_err e = read_opts(v, p, "peer-read-alone", dir, sizeof dir, &ro);
        if (!e && !(e = st_peer_alone_open(&ao, &b)))
            parts = st_peer_alone_parts(b);
        if (!e && (e = st_peer_read_wrap(&b, &ro)))
            st_backend_close(b);
        if (e)
            vfs_log(v, 2, "the store cannot be reached (%s), and the peers cannot stand in: %s",
                    why, st_errmsg());
        else {
            p->alone = b;
            vfs_log(v, 1,
                    "the store cannot be reached (%s): listing steps replicated on peers, from "
                    "the peers alone (%zu parts; none known to be durable)",
                    why, parts);
        }
    }
    st_backend *b = p->alone;
    pthread_mutex_unlock(&p->lock);
    return b;
}

st_backend *vfs_read_source(st_vfs *v, const vremote *r)
{
    /* Once the store answers, its read view serves these files too: it
     * shows a replicated part from the store's replica record and reads
     * its packs from the holders, and a part taken over is durable there.
     * p->alone is read without p->lock: it is set (under that lock) before
     * the refresh merges any file from it under v->lock, and a fetch asks
     * here under v->lock, so no file carries from_peers before it is set. */
    if (r && r->from_peers && v->peers && v->peers->alone && vfs_health_down(v))
        return v->peers->alone;
    return v->read_backend;
}

/* The peers this node replicates to, and the spool their packs go through. */
static st_err start_replication(st_vfs *v, vfs_peers *p)
{
    char dir[4096];
    st_err e = st_peer_set_new(v->opts.peers, v->node, v->opts.failure_domain, &p->secret,
                               v->opts.peer_rate, &p->set);
    if (!e)
        st_peer_set_keyring(p->set, v->keyring);
    if (!e)
        e = staging_path(v, "spool", dir, sizeof dir);
    if (!e)
        e = st_spool_open(dir, v->backend, v->opts.upload_threads ? v->opts.upload_threads : 4,
                          &p->spool);
    return e;
}

st_err vfs_peers_open(st_vfs *v)
{
    v->read_backend = v->backend;
    const st_vfs_options *o = &v->opts;
    int tls = o->peer_tls_cert || o->peer_tls_key;
    if (!o->peer_listen && !o->peers && !o->peer_secret_file && !tls && !o->peer_ca_file)
        return ST_OK;
    if (!o->peer_secret_file)
        return st_seterr(ST_ERR_INVALID, "--peers, --peer-listen and the --peer-tls and "
                                         "--peer-ca-file options need --peer-secret-file");
    if (tls && !o->peer_listen)
        return st_seterr(ST_ERR_INVALID, "--peer-tls-cert and --peer-tls-key need --peer-listen");
    if (o->failure_domain && !st_name_is_valid(o->failure_domain, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "--failure-domain '%.64s': use A-Z a-z 0-9 . _ -",
                         o->failure_domain);
    if (o->replicas > ST_REPLICA_MAX_HOLDERS)
        return st_seterr(ST_ERR_INVALID, "--replicas %" PRIu64 ": at most %d", o->replicas,
                         ST_REPLICA_MAX_HOLDERS);
    vfs_peers *p = calloc(1, sizeof *p);
    if (!p)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    v->peers = p;
    pthread_mutex_init(&p->lock, NULL);
    p->replicas = o->peers ? (o->replicas ? (unsigned)o->replicas : 1) : 0;
    st_err e = st_peer_secret_load(o->peer_secret_file, &p->secret);
    if (!e)
        e = st_peer_secret_set_ca(&p->secret, o->peer_ca_file);
    if (!e && o->peer_listen)
        e = start_server(v, p);
    if (!e)
        e = start_read_view(v, p);
    if (!e && o->peers)
        e = start_replication(v, p);
    return e;
}

void vfs_peers_close(st_vfs *v)
{
    vfs_peers *p = v->peers;
    if (v->read_backend && v->read_backend != v->backend)
        st_backend_close(v->read_backend);
    v->read_backend = NULL;
    if (!p)
        return;
    st_backend_close(p->alone);
    st_spool_close(p->spool);
    st_peer_set_free(p->set);
    st_peer_server_stop(p->server);
    st_peer_secret_wipe(&p->secret);
    pthread_mutex_destroy(&p->lock);
    free(p);
    v->peers = NULL;
}

struct st_peer_cache *vfs_peers_cache(st_vfs *v)
{
    return v->peers && v->peers->server ? st_peer_server_cache(v->peers->server) : NULL;
}

st_backend *vfs_replication_begin(st_vfs *v, const char *job, struct st_replication **rep)
{
    vfs_peers *p = v->peers;
    *rep = NULL;
    if (!p || !p->set || !p->replicas)
        return v->backend;
    memset(&p->last, 0, sizeof p->last);
    if (st_replication_begin(p->set, job, p->replicas, rep)) {
        vfs_log(v, 1, "replication of job %s not started: %s", job, st_errmsg());
        st_spool_set_hook(p->spool, NULL, NULL);
    } else
        st_spool_set_hook(p->spool, st_replication_pack, *rep);
    return st_spool_backend(p->spool);
}

st_err vfs_replication_finish(st_vfs *v, struct st_replication *rep, const st_manifest *m,
                              const st_part *part)
{
    vfs_peers *p = v->peers;
    if (!p || !p->spool)
        return ST_OK;
    st_spool_set_hook(p->spool, NULL, NULL);
    if (rep) {
        st_part sealed = *part; /* its arrays borrowed: not freed here */
        st_bytes man = {0}, rec = {0};
        st_err e = st_catalog_seal_part(m, &sealed, &man);
        if (!e)
            e = st_part_encode(&sealed, &rec);
        if (!e)
            e = st_replication_finish(rep, v->backend, m->job, m->step, m->node, sealed.revision,
                                      &man, &rec, &p->last);
        st_bytes_free(&man);
        st_bytes_free(&rec);
        pthread_mutex_lock(&p->lock);
        p->bytes_sent += p->last.bytes_sent;
        p->parts_replicated += !e && p->last.replicated;
        p->parts_unreplicated += e || !p->last.replicated;
        pthread_mutex_unlock(&p->lock);
        if (e)
            vfs_log(v, 1, "step %" PRIu64 " of %s not replicated: %s", m->step, m->job,
                    st_errmsg());
        else if (p->last.replicated) {
            vfs_log(v, 0, "step %" PRIu64 " of %s replicated on %zu peer(s)", m->step, m->job,
                    p->last.holders);
        } else
            vfs_log(v, 1, "step %" PRIu64 " of %s not replicated: %zu of %u peers took it%s%s%s",
                    m->step, m->job, p->last.holders, p->replicas, p->last.why[0] ? " (" : "",
                    p->last.why, p->last.why[0] ? ")" : "");
    }
    return st_spool_flush(p->spool);
}

void vfs_replication_end(st_vfs *v, struct st_replication *rep, int published)
{
    vfs_peers *p = v->peers;
    if (p && p->spool)
        st_spool_set_hook(p->spool, NULL, NULL); /* also when the upload failed before finish */
    if (!rep)
        return;
    if (published)
        st_replication_durable(rep, v->backend, &p->last);
    st_replication_free(rep);
}

void vfs_peers_stats(st_vfs *v, st_vfs_peer_stats *out)
{
    vfs_peers *p = v->peers;
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    out->enabled = 1;
    out->replicas = p->replicas;
    pthread_mutex_lock(&p->lock);
    out->parts_replicated = p->parts_replicated;
    out->parts_unreplicated = p->parts_unreplicated;
    out->bytes_sent = p->bytes_sent;
    pthread_mutex_unlock(&p->lock);
    out->takeovers = __atomic_load_n(&v->takeovers, __ATOMIC_RELAXED);
    if (p->spool) {
        st_spool_stats ss;
        st_spool_get_stats(p->spool, &ss);
        out->spool_bytes = ss.queued_bytes;
    }
    if (p->server) {
        st_peer_server_stats ss;
        st_peer_server_get_stats(p->server, &ss);
        out->cache_bytes = ss.cache_bytes;
        out->cache_cap = ss.cache_cap;
        out->replicas_held = ss.replicas_held;
        out->evictions = ss.evictions;
        out->refusals_full = ss.refusals_full;
        out->auth_refusals = ss.auth_refusals;
        out->corrupt_refused = ss.corrupt_refused;
    }
    if (v->read_backend && v->read_backend != v->backend) {
        st_peer_read_stats rs;
        st_peer_read_get_stats(v->read_backend, &rs);
        out->packs_read = rs.peer_packs;
        out->bytes_read = rs.peer_bytes;
        out->store_fallbacks = rs.store_fallbacks;
        out->peer_corrupt = rs.peer_corrupt;
    }
}
