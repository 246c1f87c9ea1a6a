/*
 * st_spool — a writer's pack spool (docs/PEERS.md, "Write order", step 1).
 *
 * With replication on, a sealed pack must reach the peers long before the
 * store has it: the store link is what is slow. So the upload writes
 * through the spool's backend (st_spool_backend), and a PUT of a pack key
 * (jobs/<job>/packs/...) there:
 *
 *   1. stores the pack in the spool directory (a scratch file:// backend:
 *      temp file and rename, no fsync: the seal must not wait on the disk;
 *      a pack a crash cut short fails its id before the PUT and is dropped,
 *      and its chunks are stored again);
 *   2. hands it to the replication hook, if one is set (st_spool_set_hook),
 *      which sends it to the peers;
 *   3. queues it for the spool's own threads, which PUT it to the store and
 *      then remove the spooled copy;
 *
 * and returns: the ingest goes on at disk speed, and its dedup index may
 * name a spooled pack (docs/PROTOCOL.md, "The local dedup index": a pack
 * the index names is stored or in this node's spool). Every pack is in the
 * store once st_spool_flush() returned ST_OK, which the writer calls before
 * its publish: the publish's last look lists the packs, so a part record
 * never names a pack the store lacks.
 *
 * Every other key, and every pack PUT while no hook is set, passes through
 * to the store unchanged. A GET of a pack still spooled is answered from the
 * spool. Packs left in the spool by a crash are queued again when the spool
 * is opened.
 */
#ifndef ST_SPOOL_H
#define ST_SPOOL_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"

typedef struct st_spool st_spool;

/*! Called from the upload's threads for each pack put through the spool,
 *  after it is on disk. Its result is not the PUT's: replication is the
 *  hook's affair, and the pack goes to the store whatever it returns. */
typedef void (*st_spool_hook)(void *arg, const char *key, const uint8_t *data, size_t len);

typedef struct st_spool_stats {
    uint64_t spooled_packs; /* packs written to the spool */
    uint64_t spooled_bytes;
    uint64_t stored_packs; /* of those, PUT to the store and removed */
    uint64_t queued_bytes; /* in the spool now, not yet in the store */
    uint64_t failed_puts;  /* store PUTs that failed after the store's own retries */
} st_spool_stats;

/*! dir: the spool directory (made, mode 0700); store: borrowed, must
 *  outlive the spool; threads: store PUTs in flight (at least 1). Packs
 *  found in dir are queued. */
st_err st_spool_open(const char *dir, st_backend *store, unsigned threads, st_spool **out);
/*! The backend to write through. Owned by the spool. */
st_backend *st_spool_backend(st_spool *s);
/*! Sets (hook NULL: clears) the hook for the puts that follow. */
void st_spool_set_hook(st_spool *s, st_spool_hook hook, void *arg);
/*! Waits until every queued pack is in the store. ST_OK, or the first
 *  error a PUT met since the last flush; the packs that failed are queued
 *  again, so a later flush retries them. */
st_err st_spool_flush(st_spool *s);
void st_spool_get_stats(st_spool *s, st_spool_stats *out);
/*! Stops the threads (a PUT under way ends first); what is still spooled
 *  stays on disk for the next open. NULL is a no-op. */
void st_spool_close(st_spool *s);

#endif
