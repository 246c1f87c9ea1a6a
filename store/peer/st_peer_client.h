/*
 * st_peer_client — one node's connection to one peer's cache
 * (st_peer_server.h; docs/PEERS.md, "Transport").
 *
 * Every call is one blocking request (two when the peer forgot the
 * client's nonce: a new hello, then the request once more), never retried
 * in a loop: the caller decides. Timeouts: 2 s to connect, 2 s from the
 * request (or the end of its body) to the answer's first byte (the stall
 * bound when the peer has a pack to verify and fsync), and no byte moved
 * either way for ST_PEER_STALL_MS.
 *
 * Errors: ST_ERR_TRANSIENT (refused, reset, timed out, 5xx), ST_ERR_AUTH
 * (the peer refused the cluster secret: "peer <node> at <addr> refused this
 * node's cluster secret"; or its TLS certificate is not signed by the CA
 * file or not for its address: "TLS certificate refused"), ST_ERR_NOT_FOUND, ST_ERR_NOSPACE (507:
 * the peer's cache is full), ST_ERR_CORRUPT, ST_ERR_INVALID; st_errmsg() names the peer, its
 * address and the request.
 *
 * Threads: a client may be shared; its calls run one at a time.
 */
#ifndef ST_PEER_CLIENT_H
#define ST_PEER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "peer/st_peer_auth.h"
#include "peer/st_peer_listing.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

#define ST_PEER_CONNECT_MS    2000
#define ST_PEER_FIRST_BYTE_MS 2000
#define ST_PEER_STALL_MS      20000 /* as the S3 backend's default stall bound */

typedef struct st_peer_client st_peer_client;

/*!
 * A client of the peer at addr ("HOST:PORT", HOST a name, an IPv4 address
 * or [IPv6]; "https://HOST:PORT" for a peer that serves TLS, whose
 * certificate must chain to secret->ca_file and name HOST: ST_ERR_AUTH
 * otherwise, at the first request). self_node: this node's name. secret is copied (wiped at
 * free). rate_bytes_per_s: 0 = unlimited, else the bodies this client sends
 * are paced to that rate. Does not connect yet. ST_ERR_INVALID (bad address
 * or name, no secret), ST_ERR_NOMEM.
 */
st_err st_peer_client_new(const char *addr, const char *self_node, const st_peer_secret *secret,
                          uint64_t rate_bytes_per_s, st_peer_client **out);

/*! Closes the connection, wipes the keys and frees. NULL ok. */
void st_peer_client_free(st_peer_client *c);

/*! The peer's node name into out (cap bytes; ST_ERR_INVALID if too small):
 *  the one its last hello gave, or from a GET /v1/hello now. */
st_err st_peer_client_node(st_peer_client *c, char *out, size_t cap);
/*! The peer's failure domain, as its hello said (its node name if it said
 *  none); the same rules as st_peer_client_node. */
st_err st_peer_client_domain(st_peer_client *c, char *out, size_t cap);
/*! The id of the peer's sealing key (16 hex) as its hello said, "" when it
 *  said none (a peer without --encryption-key-file); the same rules as
 *  st_peer_client_node (cap: at least 2 * ST_KEY_ID_LEN + 1). */
st_err st_peer_client_key(st_peer_client *c, char *out, size_t cap);

/*! *has: 1 if the peer holds the pack, else 0. */
st_err st_peer_has_pack(st_peer_client *c, const st_id *pack, int *has);

/*!
 * Sends a whole pack unless the peer has it (HEAD first). buf must hash to
 * pack (ST_ERR_INVALID otherwise: nothing is sent). ST_OK once the peer
 * verified, fsynced and renamed it into place; ST_ERR_NOSPACE when it
 * answered 507 (cache full); ST_ERR_CORRUPT when it refused the bytes.
 */
st_err st_peer_put_pack(st_peer_client *c, const st_id *pack, const uint8_t *buf, size_t len);

/*! The whole pack into out (replaced), verified here: ST_ERR_CORRUPT if its
 *  bytes do not hash to pack (out is then emptied, never returned). */
st_err st_peer_get_pack(st_peer_client *c, const st_id *pack, st_bytes *out);

/*!
 * A replica's manifest, with the ids of the packs this replica requires the
 * peer to hold (those of the manifest's packs not yet durable in the
 * store). The peer decodes the manifest and refuses with ST_ERR_NOT_FOUND,
 * the message naming the pack, if it lacks a listed one; ST_ERR_CORRUPT if
 * the manifest does not decode or is not this job's, step's and node's.
 */
st_err st_peer_put_part(st_peer_client *c, const char *job, uint64_t step, const char *node,
                        uint32_t rev, const st_id *packs, size_t npacks, const uint8_t *manifest,
                        size_t manifest_len);

/*! A replica's manifest into manifest_out (replaced). ST_ERR_NOT_FOUND. */
st_err st_peer_get_part(st_peer_client *c, const char *job, uint64_t step, const char *node,
                        uint32_t rev, st_bytes *manifest_out);

/*! The part is durable in the store: the peer may evict it first. */
st_err st_peer_mark_durable(st_peer_client *c, const char *job, uint64_t step, const char *node,
                            uint32_t rev);

/*! Sends the replica record (the bytes the store holds) of a replica the
 *  peer holds: ST_ERR_NOT_FOUND if it does not, ST_ERR_CORRUPT if the record
 *  does not decode or names another manifest (docs/PEERS.md, "Restoring
 *  from peers alone"). */
st_err st_peer_put_record(st_peer_client *c, const char *job, uint64_t step, const char *node,
                          uint32_t rev, const uint8_t *record, size_t len);

/*! A replica's record into record_out (replaced), not verified here: the
 *  caller decodes it. ST_ERR_NOT_FOUND. */
st_err st_peer_get_record(st_peer_client *c, const char *job, uint64_t step, const char *node,
                          uint32_t rev, st_bytes *record_out);

/*! The replicas the peer holds (of job only unless job is NULL), decoded
 *  (st_peer_listing.h): *out owns its items on success (st_peer_listing_free)
 *  and is empty on failure. ST_ERR_CORRUPT for a body that does not
 *  decode. */
st_err st_peer_list_replicas(st_peer_client *c, const char *job, st_peer_listing *out);

#endif
