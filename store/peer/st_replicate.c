/*
 * st_replicate — a writer's replication of its part of a step to peers
 * (st_replicate.h; docs/PEERS.md, "Write order").
 */
#include "peer/st_replicate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/st_peer_client.h"
#include "peer/st_peer_seal.h"
#include "util/st_array.h"
#include "util/st_hash.h"

/* Connections to one peer: a client serves one request at a time, so the
 * upload threads' packs go out on several, and the peer verifies and
 * fsyncs them side by side. */
#define PEER_CONNS 4

typedef struct peer {
    char addr[ST_PEER_ADDR_MAX + 1];
    char node[ST_NODE_MAX + 1];        /* from its hello; "" until it answered */
    char domain[ST_NODE_MAX + 1];      /* its failure domain, from the same hello */
    char key[2 * ST_KEY_ID_LEN + 1];   /* its sealing key's id, hex, from the same hello */
    st_peer_client *conns[PEER_CONNS]; /* each serialises its own requests */
    atomic_uint next;                  /* round robin over conns */
    pthread_mutex_t lock;              /* node, domain */
} peer;

struct st_peer_set {
    char self[ST_NODE_MAX + 1];
    char domain[ST_NODE_MAX + 1];    /* this node's failure domain: never chosen */
    const st_keyring *keyring;       /* NULL: no encryption */
    char key[2 * ST_KEY_ID_LEN + 1]; /* the keyring's sealing key id, hex: peers must hold it */
    size_t n;
    peer peers[ST_PEERS_MAX];
};

/* A peer chosen for one part. */
typedef struct target {
    peer *p;
    int failed; /* a send failed: not asked for the rest of this part */
    uint64_t rank;
} target;

struct st_replication {
    st_peer_set *ps;
    unsigned replicas;
    pthread_mutex_t lock; /* targets' failed flags, packs, counters */
    size_t ntargets;
    target targets[ST_PEERS_MAX];
    char job[ST_JOB_MAX + 1]; /* the part finished: set by st_replication_finish */
    char node[ST_NODE_MAX + 1];
    uint64_t step;
    uint32_t rev;
    int finished;
    st_id *packs; /* the new packs sent, in order */
    size_t npacks, packs_cap;
    uint64_t packs_sent, bytes_sent;
    char why[ST_REPLICATION_WHY_MAX]; /* lock: the failures' messages, for the log */
};

/* Adds msg to r->why; the caller holds r's lock or is r's only user. */
static void note_failure(st_replication *r, const char *msg)
{
    size_t n = strlen(r->why);
    if (n + 3 < sizeof r->why)
        snprintf(r->why + n, sizeof r->why - n, "%s%s", n ? "; " : "", msg);
}

st_err st_peer_set_new(const char *peers, const char *self_node, const char *self_domain,
                       const st_peer_secret *secret, uint64_t rate, st_peer_set **out)
{
    st_peer_set *ps = calloc(1, sizeof *ps);
    if (!ps)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    snprintf(ps->self, sizeof ps->self, "%s", self_node);
    snprintf(ps->domain, sizeof ps->domain, "%s", self_domain ? self_domain : self_node);
    st_err e = ST_OK;
    for (const char *s = peers; !e && *s;) {
        size_t len = strcspn(s, ",");
        if (!len || len > ST_PEER_ADDR_MAX)
            e = st_seterr(ST_ERR_INVALID, "--peers: an empty or overlong address in '%.64s'",
                          peers);
        else if (ps->n == ST_PEERS_MAX)
            e = st_seterr(ST_ERR_INVALID, "--peers: more than %d peers", ST_PEERS_MAX);
        else {
            peer *p = &ps->peers[ps->n];
            memcpy(p->addr, s, len);
            p->addr[len] = '\0';
            /* The rate is per peer: each connection gets its share. */
            uint64_t share = rate ? (rate + PEER_CONNS - 1) / PEER_CONNS : 0;
            for (int k = 0; !e && k < PEER_CONNS; k++)
                e = st_peer_client_new(p->addr, self_node, secret, share, &p->conns[k]);
            pthread_mutex_init(&p->lock, NULL);
            ps->n++; /* freed whole, failed or not */
        }
        s += len + (s[len] == ',');
    }
    if (!e && !ps->n)
        e = st_seterr(ST_ERR_INVALID, "--peers: no address given");
    if (e) {
        st_peer_set_free(ps);
        return e;
    }
    *out = ps;
    return ST_OK;
}

void st_peer_set_free(st_peer_set *ps)
{
    if (!ps)
        return;
    for (size_t i = 0; i < ps->n; i++) {
        for (int k = 0; k < PEER_CONNS; k++)
            st_peer_client_free(ps->peers[i].conns[k]);
        pthread_mutex_destroy(&ps->peers[i].lock);
    }
    free(ps);
}

void st_peer_set_keyring(st_peer_set *ps, const st_keyring *kr)
{
    const st_key *k = kr ? st_keyring_sealing(kr) : NULL;
    ps->keyring = k ? kr : NULL;
    ps->key[0] = '\0';
    if (k)
        st_key_id_hex(k->id, ps->key);
}

/* The next of p's connections, round robin. */
static st_peer_client *conn_of(peer *p)
{
    return p->conns[atomic_fetch_add(&p->next, 1) % PEER_CONNS];
}

/* The peer's node name and failure domain, asked once, and its sealing
 * key's id as its latest hello said (a restarted peer says hello again,
 * with its key file's newest line); its lock held. */
static st_err peer_node(peer *p)
{
    st_err e = st_peer_client_key(p->conns[0], p->key, sizeof p->key);
    if (e || p->node[0])
        return e;
    e = st_peer_client_domain(p->conns[0], p->domain, sizeof p->domain);
    return e ? e : st_peer_client_node(p->conns[0], p->node, sizeof p->node);
}

/* 1 if a peer of domain is among chosen[0..n). */
static int domain_taken(const target *chosen, size_t n, const char *domain)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(chosen[i].p->domain, domain))
            return 1;
    return 0;
}

/* Rendezvous rank of peer node for (job, writer): higher first. */
static uint64_t rank_of(const char *job, const char *writer, const char *node)
{
    char buf[ST_JOB_MAX + 2 * ST_NODE_MAX + 3];
    int n = snprintf(buf, sizeof buf, "%s%c%s%c%s", job, 0, writer, 0, node);
    return st_hash64(buf, (size_t)n);
}

static int by_rank(const void *a, const void *b)
{
    uint64_t x = ((const target *)a)->rank, y = ((const target *)b)->rank;
    return x < y ? 1 : x > y ? -1 : 0;
}

st_err st_replication_begin(st_peer_set *ps, const char *job, unsigned replicas,
                            st_replication **out)
{
    st_replication *r = calloc(1, sizeof *r);
    if (!r)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->lock, NULL);
    r->ps = ps;
    r->replicas = replicas;
    target all[ST_PEERS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < ps->n; i++) {
        peer *p = &ps->peers[i];
        pthread_mutex_lock(&p->lock);
        st_err e = peer_node(p);
        pthread_mutex_unlock(&p->lock);
        /* Not chosen: a peer that does not answer, this node, its domain,
         * one that could not check what this node seals. */
        if (e)
            note_failure(r, st_errmsg());
        else if (!strcmp(p->node, ps->self) || !strcmp(p->domain, ps->domain))
            continue;
        else if (ps->key[0] && strcmp(p->key, ps->key)) {
            char msg[ST_PEER_ADDR_MAX + ST_NODE_MAX + 160];
            snprintf(msg, sizeof msg,
                     "peer %s at %s does not hold this node's encryption key (key id %s%s%s): "
                     "not chosen",
                     p->node, p->addr, ps->key, p->key[0] ? "; it seals with " : "", p->key);
            note_failure(r, msg);
        } else
            all[n++] = (target){.p = p, .rank = rank_of(job, ps->self, p->node)};
    }
    qsort(all, n, sizeof *all, by_rank);
    /* Down the ranking, a domain not chosen yet first; then any. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n && r->ntargets < replicas; i++) {
            if (!all[i].p)
                continue;
            if (pass == 0 && domain_taken(r->targets, r->ntargets, all[i].p->domain))
                continue;
            r->targets[r->ntargets++] = all[i];
            all[i].p = NULL;
        }
    *out = r;
    return ST_OK;
}

void st_replication_pack(void *arg, const char *key, const uint8_t *data, size_t len)
{
    st_replication *r = arg;
    char job[ST_JOB_MAX + 1];
    st_id id;
    if (!st_key_parse_pack(key, job, &id))
        return;
    pthread_mutex_lock(&r->lock);
    if (st_array_grow((void **)&r->packs, &r->packs_cap, r->npacks + 1, sizeof *r->packs)) {
        for (size_t i = 0; i < r->ntargets; i++) /* cannot say which packs: no replica */
            r->targets[i].failed = 1;
        pthread_mutex_unlock(&r->lock);
        return;
    }
    r->packs[r->npacks++] = id;
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < r->ntargets; i++) {
        target *t = &r->targets[i];
        pthread_mutex_lock(&r->lock);
        int failed = t->failed;
        pthread_mutex_unlock(&r->lock);
        if (failed)
            continue;
        st_err e = st_peer_put_pack(conn_of(t->p), &id, data, len);
        pthread_mutex_lock(&r->lock);
        if (e) {
            t->failed = 1;
            note_failure(r, st_errmsg());
        } else {
            r->packs_sent++;
            r->bytes_sent += len;
        }
        pthread_mutex_unlock(&r->lock);
    }
}

/* Gives every holder the replica record the store just took, so a reader
 * whose store cannot be reached can list the part from the peers alone
 * (docs/PEERS.md, "Restoring from peers alone"). Best effort: the part is
 * replicated whether or not a holder keeps its record. */
static void send_record(st_replication *r, const st_bytes *record)
{
    for (size_t i = 0; i < r->ntargets; i++) {
        target *t = &r->targets[i];
        if (!t->failed)
            st_peer_put_record(conn_of(t->p), r->job, r->step, r->node, r->rev, record->data,
                               record->len);
    }
}

st_err st_replication_finish(st_replication *r, st_backend *store, const char *job, uint64_t step,
                             const char *node, uint32_t rev, const st_bytes *manifest,
                             const st_bytes *part, st_replication_result *res)
{
    memset(res, 0, sizeof *res);
    snprintf(r->job, sizeof r->job, "%s", job);
    snprintf(r->node, sizeof r->node, "%s", node);
    r->step = step;
    r->rev = rev;
    r->finished = 1;
    st_replica rec = {.revision = rev};
    char key[ST_KEY_MAX];
    st_bytes sent = {0}; /* the manifest as the peers get it: sealed with a keyring */
    st_err e = st_key_manifest(key, sizeof key, job, step, node, rev);
    if (!e)
        e = st_peer_seal(r->ps->keyring, ST_CRYPT_MANIFEST, key, manifest->data, manifest->len,
                         &sent);
    if (e) {
        st_bytes_free(&sent);
        return e;
    }
    for (size_t i = 0; i < r->ntargets; i++) {
        target *t = &r->targets[i];
        if (t->failed)
            continue;
        e = st_peer_put_part(conn_of(t->p), job, step, node, rev, r->packs, r->npacks, sent.data,
                             sent.len);
        if (e) {
            t->failed = 1;
            note_failure(r, st_errmsg());
            continue;
        }
        st_replica_holder *h = &rec.holders[rec.nholders++];
        snprintf(h->node, sizeof h->node, "%s", t->p->node);
        snprintf(h->addr, sizeof h->addr, "%s", t->p->addr);
    }
    st_bytes_free(&sent);
    res->holders = rec.nholders;
    res->packs_sent = r->packs_sent;
    res->bytes_sent = r->bytes_sent;
    snprintf(res->why, sizeof res->why, "%s", r->why);
    if (!r->replicas || rec.nholders < r->replicas)
        return ST_OK;
    /* The record carries copies, not the caller's buffers: encode from views. */
    rec.part = *part;
    rec.manifest = *manifest;
    st_bytes buf = {0};
    snprintf(key, sizeof key, ST_KEY_JOBLIST "%s", job);
    e = st_replica_encode(&rec, &buf);
    if (!e) /* the job must be listed before any of its steps can be found */
        e = st_put(store, key, "", 0);
    if (!e)
        e = st_key_replica(key, sizeof key, job, step, node, rev);
    if (!e)
        e = st_put(store, key, buf.data, buf.len);
    if (!e) {
        res->replicated = 1;
        snprintf(res->key, sizeof res->key, "%s", key);
        /* Best effort as the sending: a record that cannot be sealed is not sent. */
        if (!st_peer_seal(r->ps->keyring, ST_CRYPT_REPLICA, key, buf.data, buf.len, &sent))
            send_record(r, &sent);
    }
    st_bytes_free(&sent);
    st_bytes_free(&buf);
    return e;
}

void st_replication_durable(st_replication *r, st_backend *store, const st_replication_result *res)
{
    if (!r->finished)
        return;
    for (size_t i = 0; i < r->ntargets; i++) {
        target *t = &r->targets[i];
        if (t->failed)
            continue;
        /* Best effort: a peer that misses it finds out at its next look. */
        st_peer_mark_durable(conn_of(t->p), r->job, r->step, r->node, r->rev);
    }
    if (res->replicated)
        st_del(store, res->key);
}

void st_replication_free(st_replication *r)
{
    if (!r)
        return;
    free(r->packs);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
