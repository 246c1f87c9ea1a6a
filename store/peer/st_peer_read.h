/*
 * st_peer_read — a reader's view of the store with replicated parts in it
 * (docs/PEERS.md, "What a reader does").
 *
 * A backend that wraps the store for a node that reads (a new node's mount,
 * ckptctl restore/ls/latest, libckpt) and was given peers. It adds to the
 * store's listing, for every replica record whose node has no part record
 * of that revision or newer, the two keys the part would have once
 * published — nodes/<node>.commit and nodes/<node>.r<rev>.manifest — and
 * answers their GETs with the record's copies, so every reader above
 * (catalog, step rules, restore, the mount) takes a replicated part for a
 * published one without knowing. What makes the step restorable is the
 * packs: a GET of a pack asks the record's holders first (the whole pack,
 * its id recomputed), and the store on any error, refusal, timeout or
 * checksum failure. A holder whose bytes fail the check is reported
 * (st_peer_read_stats.peer_corrupt, a log line) and not asked again.
 *
 * Replica records of this node itself are not shown: its staging has the
 * part, or its staging was lost and the part is a takeover's to publish.
 *
 * Read-only for what it adds: a PUT or DELETE goes to the store as it is.
 * A writer or GC never uses this view (a replicated part is not durable:
 * GC must not take it for one).
 */
#ifndef ST_PEER_READ_H
#define ST_PEER_READ_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "peer/st_peer_auth.h"
#include "st_error.h"

typedef struct st_peer_read_stats {
    uint64_t replicated_parts; /* parts shown from replica records */
    uint64_t peer_packs;       /* packs read from a peer */
    uint64_t peer_bytes;
    uint64_t store_fallbacks; /* packs a peer could not give, read from the store */
    uint64_t peer_corrupt;    /* packs a peer gave whose bytes failed their id */
} st_peer_read_stats;

typedef struct st_peer_read_opts {
    const char *self_node;        /* this node's name (for the peers' MAC) */
    const st_peer_secret *secret; /* borrowed, must outlive the backend */
    const char *cache_dir;        /* where fetched packs are kept while read (made, 0700) */
    void (*log)(void *arg, const char *msg); /* reports (a corrupt peer); may be NULL */
    void *log_arg;
} st_peer_read_opts;

/*! Wraps *b (owned from now on: closing the view closes it). On failure *b
 *  is left as it was. */
st_err st_peer_read_wrap(st_backend **b, const st_peer_read_opts *o);
/*! The view's counters; b must be a view made by st_peer_read_wrap. */
void st_peer_read_get_stats(st_backend *b, st_peer_read_stats *out);
/*! 1 if node's part of step (node NULL: any part of it) is shown from a
 *  replica record, not from the store, as of the last listing (so `ls`
 *  can say "replicated"); 0 for a backend that is not such a view. */
int st_peer_read_is_replicated(st_backend *b, const char *job, uint64_t step, const char *node);

#endif
