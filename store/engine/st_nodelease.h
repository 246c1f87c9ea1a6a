/*
 * st_nodelease — one live daemon per node name (docs/NODES.md): claiming,
 * renewing and checking the node lease over a backend.
 *
 * Threads: stateless; the backend is thread-safe.
 */
#ifndef ST_NODELEASE_H
#define ST_NODELEASE_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "format/st_lease.h"

/* A lease stays live this long past its ttl, by the store's clock: a
 * heartbeat PUT under way, and the store's clock resolution (docs/NODES.md).
 * Also how far a holder's stamp may stray from the store before the
 * refusal says that the clocks disagree. */
#define ST_NODELEASE_SKEW_NS (5ll * 1000000000)

/* What st_nodelease_claim writes when the name is free for mine. */
typedef enum st_claim_mode {
    ST_CLAIM_CHECK = 0,   /* nothing: only say whether mine may hold it */
    ST_CLAIM_ACQUIRE = 1, /* mine's lease, unless the store already holds it */
    ST_CLAIM_RENEW = 2    /* mine's lease, always (a heartbeat) */
} st_claim_mode;

/*!
 * Claims node for the instance in mine (mine->heartbeat_ns: the caller's wall
 * clock now, only written and reported). Reads the lease: absent, stale (by
 * the store's clock: its last write older than ttl + margin), unreadable as
 * a lease, or
 * held by mine->instance -> ST_OK, and the lease is written as mode says. Held by another instance
 * and live at mine->heartbeat_ns -> ST_ERR_BUSY, *holder filled (may be
 * NULL), the message names the holder — unless gone (may be NULL) says the
 * holder's process has certainly ended (same machine and PID namespace,
 * no such process), when the lease is taken over at once. Store errors are returned as they
 * are (nothing is claimed). Where no lease was read, it is written with a
 * create (st_put_new; docs/NODES.md, "The first lease is a create"): a
 * create that meets a lease reads it again and judges it as above, so the
 * loser of two claims started together gets ST_ERR_BUSY, and a create
 * whose lost answer was retried finds its own lease and holds the name.
 */
typedef int (*st_nodelease_gone_fn)(const st_lease *holder);
st_err st_nodelease_claim(st_backend *b, const char *node, const st_lease *mine, st_claim_mode mode,
                          st_nodelease_gone_fn gone, st_lease *holder);

#endif
