/*
 * st_peer_cache — a peer's directory of replicas (docs/PEERS.md, "Objects"
 * and "The peer's cache"): packs by content address, replicas' manifests
 * and states, the byte count against the cap, and eviction.
 *
 *   DIR/packs/<hh>/<packid>.pack                  a verified pack
 *   DIR/parts/<job>/<step20>/<node>.r<rev>.manifest
 *   DIR/parts/<job>/<step20>/<node>.r<rev>.state  "held" or "durable", the
 *                                                 arrival number, the pack ids
 *   DIR/parts/<job>/<step20>/<node>.r<rev>.record the replica record, once
 *                                                 the writer sent it
 *   DIR/tmp/                                      bodies being received
 *
 * Every file is published as temp file in tmp/ → fsync → rename → fsync of
 * its directory, so a crash leaves a whole file or none; tmp/ is emptied
 * at open, and the tables are rebuilt from the files.
 *
 * Replica states:
 *
 *   (none) --PUT part--> held --POST durable--> durable --evicted--> (none)
 *
 * A held replica's packs are never evicted: the cap bounds what the peer
 * accepts, not what it promised. Eviction order: durable replicas, oldest
 * arrival first, with the packs no other replica references; then packs no
 * replica references that arrived more than the orphan grace ago
 * (ST_PEER_ORPHAN_NS unless the opener says otherwise).
 *
 * Threads: every function may be called from any thread; the tables are
 * under the cache's mutex. File I/O on a body being received (tmp/) is the
 * caller's, outside the lock.
 */
#ifndef ST_PEER_CACHE_H
#define ST_PEER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "peer/st_peer_listing.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_keyring.h"
#include "util/st_wire.h"

/* A pack no replica references is kept this long (monotonic) before it may
 * be evicted: its replica's manifest may still be on its way. */
#define ST_PEER_ORPHAN_NS (600LL * 1000000000LL)

typedef struct st_peer_cache st_peer_cache;

/*! Names one replica: a node's part of one step, at one revision. */
typedef struct st_peer_part_name {
    const char *job;
    uint64_t step;
    const char *node;
    uint32_t rev;
} st_peer_part_name;

typedef struct st_peer_cache_stats {
    uint64_t bytes, cap, replicas, packs, packs_received, bytes_received, evictions, refusals_full,
        corrupt_refused;
} st_peer_cache_stats;

/*!
 * Opens (making it, mode 0700) the directory dir with its packs/, parts/ and
 * tmp/, empties tmp/, and rebuilds the tables from the files. cap: bytes of
 * packs and manifests held, 0 = unlimited. orphan_grace_ns: how long a pack
 * no replica references is kept from eviction, 0 = ST_PEER_ORPHAN_NS.
 * ST_ERR_INVALID if dir is not a private directory of this user,
 * ST_ERR_IO, ST_ERR_NOMEM.
 */
st_err st_peer_cache_open(const char *dir, uint64_t cap, int64_t orphan_grace_ns,
                          st_peer_cache **out);

/*!
 * Gives the cache the keyring that checks sealed packs (CKp2) as the
 * store's reader does (docs/ENCRYPTION.md, "Peers"); kr must outlive c.
 * Called before the cache is shared. Without one, a sealed pack is
 * refused with ST_ERR_KEY.
 */
void st_peer_cache_set_keyring(st_peer_cache *c, const st_keyring *kr);

/*! Closes and frees. NULL ok. The files stay. */
void st_peer_cache_close(st_peer_cache *c);

/*! 1 if the pack is held, else 0. */
int st_peer_cache_has_pack(st_peer_cache *c, const st_id *pack);

/*!
 * ST_OK if `bytes` more would fit under the cap once everything evictable
 * went (nothing is evicted here: an early refusal before a body is read),
 * else ST_ERR_NOSPACE.
 */
st_err st_peer_cache_could_fit(st_peer_cache *c, uint64_t bytes);

/*! A new empty file in tmp/ for a body: *fd open for writing, name[64] its
 *  name in tmp/. ST_ERR_IO, ST_ERR_NOSPACE. */
st_err st_peer_cache_tmp_create(st_peer_cache *c, int *fd, char name[64]);

/*! Removes tmp/name (a body that was not admitted). */
void st_peer_cache_tmp_remove(st_peer_cache *c, const char *name);

/*!
 * Admits the pack received into tmp/name (fd open on it, size bytes) whose
 * id the caller recomputed: decodes its trailer (ST_ERR_CORRUPT, counted;
 * ST_ERR_KEY for a sealed pack without the key of its key id),
 * makes room (ST_ERR_NOSPACE, counted, when evicting cannot), fsyncs it
 * and renames it into packs/. *was_held: 1 if the pack was already there
 * (tmp/name is then removed and nothing counted). The caller still closes
 * fd.
 */
st_err st_peer_cache_admit_pack(st_peer_cache *c, const st_id *pack, const char *name, int fd,
                                uint64_t size, int *was_held);

/*! Counts a pack refused because its bytes do not hash to its name. */
void st_peer_cache_count_corrupt(st_peer_cache *c);

/*!
 * Opens a held pack for serving, after checking that its bytes hash to its
 * id: *fd (caller closes) and *size. A pack that does not is deleted and
 * counted, and the answer is ST_ERR_NOT_FOUND, as for a pack not held.
 */
st_err st_peer_cache_open_pack(st_peer_cache *c, const st_id *pack, int *fd, uint64_t *size);

/*!
 * Stores a replica: its manifest (already decoded by the caller) and the
 * packs it requires, each of which must be held (ST_ERR_NOT_FOUND naming the
 * first missing one). Replaces a replica of the same name. State: held.
 * ST_ERR_NOSPACE (counted) when the manifest does not fit.
 */
st_err st_peer_cache_put_part(st_peer_cache *c, const st_peer_part_name *p, const st_id *packs,
                              size_t npacks, const uint8_t *manifest, size_t manifest_len);

/*! The replica's manifest into out. ST_ERR_NOT_FOUND if none. */
st_err st_peer_cache_get_part(st_peer_cache *c, const st_peer_part_name *p, st_bytes *out);

/*!
 * Keeps the replica record (checked by the caller: it decodes and names
 * this replica's manifest) beside the replica, replacing one held. Counted
 * against the cap with the replica and evicted with it. ST_ERR_NOT_FOUND
 * when the replica is not held, ST_ERR_NOSPACE (counted), ST_ERR_IO.
 */
st_err st_peer_cache_put_record(st_peer_cache *c, const st_peer_part_name *p, const uint8_t *record,
                                size_t len);

/*! The replica record into out. ST_ERR_NOT_FOUND if the replica or its
 *  record is not held. */
st_err st_peer_cache_get_record(st_peer_cache *c, const st_peer_part_name *p, st_bytes *out);

/*!
 * The replicas held (of job only, unless job is NULL) into out[0..max):
 * *n of them, the newest by arrival first; *truncated set when more
 * matched. For GET /v1/replicas (st_peer_listing.h). ST_ERR_NOMEM.
 */
st_err st_peer_cache_list_replicas(st_peer_cache *c, const char *job, st_peer_listed *out,
                                   size_t max, size_t *n, int *truncated);

/*! The replica is durable in the store: evictable first. ST_ERR_NOT_FOUND. */
st_err st_peer_cache_mark_durable(st_peer_cache *c, const st_peer_part_name *p);

void st_peer_cache_get_stats(st_peer_cache *c, st_peer_cache_stats *out);

/*! Called for each replica held, with durable set for those the store has;
 *  return non-zero to stop. It runs under the cache's lock: it must copy
 *  what it keeps and must not call the cache. */
typedef int (*st_peer_part_cb)(void *arg, const st_peer_part_name *p, int durable);
st_err st_peer_cache_list_parts(st_peer_cache *c, st_peer_part_cb cb, void *arg);

#endif
