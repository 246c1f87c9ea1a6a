/*
 * st_replicate — a writer's replication of its part of a step to peers
 * (docs/PEERS.md, "Write order", steps 2 to 4).
 *
 * One st_replication per upload of a part: begun with the job (which ranks
 * the peers), fed each new pack as the spool writes it (st_replication_pack
 * is an st_spool_hook), and finished with the part's manifest and part
 * record, which it sends to the peers that took every pack and, once
 * `replicas` of them acknowledged, writes to the store as the replica
 * record. The part is then `replicated`. A peer that fails a send is
 * dropped from this part (its later packs are not sent to it); fewer than
 * `replicas` acknowledgements leave the part complete but not replicated,
 * and the store path goes on unchanged.
 *
 * Peers are named by hand (`--peers`); they are ranked per job by
 * XXH3-64(job, writer, peer) (rendezvous hashing: a writer's replicas of a
 * job land on the same peers step after step). A peer in the writer's own
 * failure domain (each peer says its own in its hello) is never chosen;
 * down the ranking, peers of domains not chosen yet come first.
 */
#ifndef ST_REPLICATE_H
#define ST_REPLICATE_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "format/st_part.h"
#include "peer/st_peer_auth.h"
#include "peer/st_replica.h"
#include "st_error.h"
#include "util/st_keyring.h"
#include "util/st_wire.h"

#define ST_PEERS_MAX           64
#define ST_REPLICATION_WHY_MAX 1024

typedef struct st_peer_set st_peer_set;

/*! peers: "host:port,host:port,..." (at most ST_PEERS_MAX). self_node:
 *  this node's name; self_domain: its failure domain (NULL: the node name),
 *  whose peers are never chosen; secret borrowed (must outlive the set);
 *  rate: bytes per second sent to one peer, 0 unlimited. */
st_err st_peer_set_new(const char *peers, const char *self_node, const char *self_domain,
                       const st_peer_secret *secret, uint64_t rate, st_peer_set **out);
void st_peer_set_free(st_peer_set *ps);
/*! Encryption (docs/PEERS.md, "Encrypted stores"): the manifests and
 *  replica records sent are sealed under kr (borrowed: must outlive the
 *  set), and a peer whose hello does not name kr's sealing key is not
 *  chosen (the result's why says so by name). Before the first part. */
void st_peer_set_keyring(st_peer_set *ps, const st_keyring *kr);

typedef struct st_replication st_replication;

typedef struct st_replication_result {
    int replicated;                   /* the replica record is in the store */
    size_t holders;                   /* peers that acknowledged the whole replica */
    uint64_t packs_sent;              /* packs sent (a peer that had one counts) */
    uint64_t bytes_sent;              /* their bytes, once per peer */
    char key[ST_KEY_MAX];             /* the replica record's key, when replicated */
    char why[ST_REPLICATION_WHY_MAX]; /* why peers failed ("; " between): "" if none did */
} st_replication_result;

st_err st_replication_begin(st_peer_set *ps, const char *job, unsigned replicas,
                            st_replication **out);
/*! The st_spool_hook: sends one new pack to the chosen peers. */
void st_replication_pack(void *arg, const char *key, const uint8_t *data, size_t len);
/*! Sends the manifest and, once enough peers acknowledged, PUTs the replica
 *  record (and the job's registry entry) to store. manifest: the encoded
 *  manifest; part: the encoded part record naming it (revision rev). With
 *  a keyring (st_peer_set_keyring) the peers get both sealed, as the
 *  store does, one sealing sent to every peer. A
 *  failure to reach peers is not an error (res->replicated stays 0); a
 *  store error is returned. */
st_err st_replication_finish(st_replication *r, st_backend *store, const char *job, uint64_t step,
                             const char *node, uint32_t rev, const st_bytes *manifest,
                             const st_bytes *part, st_replication_result *res);
/*! After the part was published: tells every peer that took its manifest
 *  (replicated or not: a peer keeps a replica it was not told about until
 *  its own look at the store) that it is durable, best effort, and deletes
 *  the replica record. Nothing before st_replication_finish. */
void st_replication_durable(st_replication *r, st_backend *store, const st_replication_result *res);
void st_replication_free(st_replication *r);

#endif
