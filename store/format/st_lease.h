/*
 * st_lease — the node lease object (docs/NODES.md): its key and its text
 * encoding. Pure: no I/O.
 *
 *   nodes/<node>.lease
 *   "ckptfs-lease v1 <instance:32 hex> <heartbeat_ns> <ttl_ns> <pid> <origin:16 hex> <host>\n"
 *
 * The decoder accepts any byte string and either returns the lease or
 * ST_ERR_CORRUPT.
 */
#ifndef ST_LEASE_H
#define ST_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_part.h"
#include "util/st_hash.h"
#include "st_error.h"

#define ST_LEASE_INSTANCE_LEN ST_ID_HEX_LEN /* an st_id in hex */
#define ST_LEASE_ORIGIN_LEN   16            /* hex digits */
#define ST_LEASE_HOST_MAX     64
#define ST_LEASE_TEXT_MAX     256

typedef struct st_lease {
    char instance[ST_LEASE_INSTANCE_LEN + 1];
    int64_t heartbeat_ns; /* the holder's wall clock at its last write */
    int64_t ttl_ns;
    int64_t pid;
    /* Where pid means something: a hash of the boot id and the PID
     * namespace of the holder, so that a daemon on the same machine and in
     * the same namespace can tell that the holder's process is gone. */
    char origin[ST_LEASE_ORIGIN_LEN + 1];
    char host[ST_LEASE_HOST_MAX + 1]; /* [A-Za-z0-9._-]: other bytes become '-' */
} st_lease;

/*! "nodes/<node>.lease" into out (cap bytes); ST_ERR_INVALID for a bad node
 *  name or a too-small buffer. */
st_err st_key_lease(char *out, size_t cap, const char *node);

/*! l's text into out (ST_LEASE_TEXT_MAX bytes), its length in *len. */
st_err st_lease_encode(const st_lease *l, char *out, size_t *len);
/*! Decodes a lease; ST_ERR_CORRUPT if buf is not one. */
st_err st_lease_decode(const void *buf, size_t len, st_lease *l);

#endif
