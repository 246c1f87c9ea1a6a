/*
 * st_peer_server — a daemon's peer cache served over HTTP (docs/PEERS.md,
 * "Transport"): other nodes put their packs and replicas' manifests here,
 * read them back, and say when a replica became durable in the store.
 *
 * Every request but GET /v1/hello is authenticated with the cluster secret
 * (st_peer_auth.h); what is stored is kept by st_peer_cache.h.
 *
 * Threads: libmicrohttpd runs one thread per connection; the handlers
 * share the channel table (under the server's lock) and the cache (under
 * its own). start, port, get_stats and stop may be called from any thread;
 * stop once.
 */
#ifndef ST_PEER_SERVER_H
#define ST_PEER_SERVER_H

#include <stdint.h>

#include "peer/st_peer_auth.h"
#include "util/st_keyring.h"
#include "st_error.h"

typedef struct st_peer_server st_peer_server;

typedef struct st_peer_server_opts {
    const char *listen; /* "ADDR:PORT" (IPv4 dotted or [v6]); port 0 = ephemeral */
    int listen_any;     /* required to bind 0.0.0.0 or :: ; otherwise ST_ERR_INVALID */
    const char *dir; /* the peer directory (STAGING/peer): packs/, parts/, tmp/ made inside, 0700 */
    const char *node;             /* this node's name */
    const char *failure_domain;   /* told in the hello; NULL: the node name */
    const st_peer_secret *secret; /* copied: the caller may wipe its own after start */
    uint64_t cache_cap;           /* bytes of packs+manifests held; 0 = unlimited */
    /* TLS (docs/PEERS.md, "Transport security"): both PEM files, or
     * neither (plain HTTP). With them the server speaks HTTPS only. The key
     * file must be private (st_read_private_file); neither is quoted in a
     * message. */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* How long a pack no replica references is kept from eviction (its
     * manifest may be on its way); 0 = ten minutes (ST_PEER_ORPHAN_NS). */
    int64_t orphan_grace_ns;
    /* The keys that open sealed packs, manifests and replica records
     * (docs/PEERS.md, "Encrypted stores"); must outlive the server. Its
     * sealing key's id is told in the hello. NULL: sealed bytes are
     * refused (422). */
    const st_keyring *keyring;
} st_peer_server_opts;

typedef struct st_peer_server_stats {
    uint64_t cache_bytes, cache_cap, replicas_held, packs_held, packs_received, bytes_received,
        evictions, refusals_full, auth_refusals, corrupt_refused, packs_served, bytes_served;
} st_peer_server_stats;

/*!
 * Opens the peer directory (rebuilding its tables, emptying tmp/), binds
 * o->listen and starts serving. ST_ERR_INVALID: a malformed address, a
 * wildcard address without listen_any, an invalid node name, no secret, a
 * directory that is not private, a TLS key file others can read, a
 * certificate and key that are not a PEM pair; ST_ERR_UNSUPPORTED: TLS
 * asked of a libmicrohttpd built without it; ST_ERR_IO: cannot bind (the message has
 * the errno); ST_ERR_NOMEM. *out is NULL on failure.
 */
st_err st_peer_server_start(const st_peer_server_opts *o, st_peer_server **out);

/*! The bound port (the ephemeral one when o->listen asked for port 0). */
int st_peer_server_port(const st_peer_server *s);

/*! A snapshot of the counters. */
void st_peer_server_get_stats(st_peer_server *s, st_peer_server_stats *out);

/*! The replicas this server keeps (for the takeover: docs/PEERS.md). Owned
 *  by the server; thread-safe (st_peer_cache.h). */
struct st_peer_cache *st_peer_server_cache(st_peer_server *s);

/*! Stops serving (waits for the handlers), wipes the secret and frees. NULL ok. */
void st_peer_server_stop(st_peer_server *s);

#endif
