/*
 * st_replica — the replica record: the object in the store that says a
 * node's part of a step is held by peers before the store holds it
 * (docs/PEERS.md, "Objects").
 *
 * Key: jobs/<job>/steps/<step:020>/replicas/<node>.r<revision>
 *
 * It carries what a reader needs to treat the part as if it were published
 * (the part record the writer will write and the manifest it names, byte
 * for byte) and where the packs are (the peers that acknowledged them), so
 * that metadata stays in the store alone and only pack bytes come from
 * peers.
 *
 * Encoding (integers varints unless said otherwise):
 *   magic "CKR1", revision, part record bytes (str), manifest bytes (str),
 *   holder count, each holder's node name (str) and address (str);
 *   XXH3-64 of everything above (LE u64).
 * The decoder accepts any byte string and either returns a record whose
 * part record decodes, names this manifest (length and XXH3-128) and this
 * revision, or ST_ERR_CORRUPT.
 */
#ifndef ST_REPLICA_H
#define ST_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_part.h"
#include "st_error.h"
#include "util/st_wire.h"

#define ST_REPLICA_MAX_HOLDERS 16
#define ST_PEER_ADDR_MAX       255 /* "host:port", "[v6]:port", either after "https://" */

typedef struct st_replica_holder {
    char node[ST_NODE_MAX + 1];
    char addr[ST_PEER_ADDR_MAX + 1];
} st_replica_holder;

typedef struct st_replica {
    uint32_t revision;
    st_bytes part;     /* the part record, encoded (st_part_encode) */
    st_bytes manifest; /* the manifest it names, encoded */
    size_t nholders;
    st_replica_holder holders[ST_REPLICA_MAX_HOLDERS];
} st_replica;

st_err st_replica_encode(const st_replica *r, st_bytes *out);
/*! On success *r owns its buffers (st_replica_free); on failure it is empty.
 *  part_out, if not NULL, receives the decoded part record (st_part_free). */
st_err st_replica_decode(const uint8_t *buf, size_t len, st_replica *r, st_part *part_out);
void st_replica_free(st_replica *r);

st_err st_key_replica(char *out, size_t cap, const char *job, uint64_t step, const char *node,
                      uint32_t revision);
/*! For a rest (st_key_parse_step) of "replicas/<node>.r<revision>" copies
 *  the node name into node (ST_NODE_MAX + 1 bytes), sets *revision and
 *  returns 1, else 0. */
int st_key_parse_replica(const char *rest, char *node, uint32_t *revision);

#endif
