/*
 * st_peer_listing — the body of GET /v1/replicas[/<job>]: the replicas a peer holds
 * (docs/PEERS.md, "Transport" and "Restoring from peers alone").
 *
 * Text, one line each, '\n' ends every line, single spaces between fields:
 *
 *   ckptfs-peer-replicas v1
 *   replica <job> <step> <node> <rev> <held|durable> <manifest id> <manifest bytes> <record bytes>
 *   ...
 *   end <count> <complete|truncated>
 *
 * job and node follow the name rules (st_name_is_valid); step, rev and the
 * byte counts are canonical decimals (no sign, no leading zero); the
 * manifest id is the XXH3-128 of the manifest's bytes, 32 hex (st_id byte
 * order); record bytes is the size of the replica record the peer holds
 * for that replica, 0 when it holds none. `end` repeats the number of
 * replica lines, so a body cut short does not decode; `truncated` says the
 * peer held more than ST_PEER_LISTING_MAX matching replicas and listed the
 * newest by arrival.
 *
 * Pure: no I/O. The decoder accepts any byte string and either returns a
 * listing whose every field passed these checks and that re-encodes to the
 * same bytes, or ST_ERR_CORRUPT (or ST_ERR_NOMEM). Threads: values only.
 */
#ifndef ST_PEER_LISTING_H
#define ST_PEER_LISTING_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_part.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

#define ST_PEER_LISTING_MAX        4096         /* replica lines in one answer */
#define ST_PEER_LISTING_LINE_MAX   400          /* bytes of one replica line, '\n' included */
#define ST_PEER_LISTING_OBJECT_MAX (1ull << 30) /* a manifest's or record's bytes */

/*! One replica a peer holds. */
typedef struct st_peer_listed {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    uint32_t rev;
    int durable;       /* the writer said the part is durable in the store */
    st_id manifest_id; /* XXH3-128 of the manifest's bytes */
    uint64_t manifest_len;
    uint64_t record_len; /* the replica record's bytes the peer holds; 0: none */
} st_peer_listed;

typedef struct st_peer_listing {
    st_peer_listed *items; /* malloc'd, n of them */
    size_t n;
    int truncated; /* the peer held more than it listed */
} st_peer_listing;

/*! The largest body a listing of n replicas encodes to. */
size_t st_peer_listing_bound(size_t n);

/*! Encodes n items (n <= ST_PEER_LISTING_MAX) into out (appended).
 *  ST_ERR_INVALID for an item that breaks the rules above, ST_ERR_NOMEM. */
st_err st_peer_listing_encode(const st_peer_listed *items, size_t n, int truncated, st_bytes *out);

/*! Decodes a body. On success *l owns its items (st_peer_listing_free); on
 *  failure *l is empty. ST_ERR_CORRUPT, ST_ERR_NOMEM. */
st_err st_peer_listing_decode(const uint8_t *buf, size_t len, st_peer_listing *l);

void st_peer_listing_free(st_peer_listing *l);

#endif
