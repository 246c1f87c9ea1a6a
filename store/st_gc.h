/*
 * st_gc — retention and the time-fenced sweep of a job's objects
 * (docs/GC.md). Retention deletes whole steps (part records first, then
 * manifests); the sweep deletes packs that no remaining part record's
 * manifest references, but only after they carried a "pending" marker for
 * at least the grace period and a fresh scan still finds them unreferenced.
 * Writers (st_ingest) refuse to reference a pack that carries a marker.
 *
 * The facade entry is st_store_gc() (ckptstore.h); this header holds what
 * st_ingest and the facade share: the marker keys and their encoding.
 *
 * Threads: stateless; a GC run uses one thread and its own buffers.
 */
#ifndef ST_GC_H
#define ST_GC_H

#include <stddef.h>
#include <stdint.h>

#include "st_backend.h"
#include "st_error.h"
#include "st_hash.h"

/* Default grace period of the sweep (ckptctl gc --grace). */
#define ST_GC_DEFAULT_GRACE_NS (3600LL * 1000000000LL)

/*! Key of the pending marker of a pack: jobs/<job>/gc/pending/<packid>. */
st_err st_key_gc_pending(char *out, size_t cap, const char *job, const st_id *pack);
/*! Prefix of every pending marker of job: "jobs/<job>/gc/pending/". */
st_err st_key_gc_pending_prefix(char *out, size_t cap, const char *job);
/*! Key of a pin: jobs/<job>/pins/<step20>. */
st_err st_key_pin(char *out, size_t cap, const char *job, uint64_t step);

/*!
 * A marker's content is text: "ckptfs-gc-pending v1 <marked_ns> <grace_ns>\n"
 * (the GC's clock when it marked the pack, and the grace period it used).
 * Decodes it; ST_ERR_CORRUPT if it is not of that shape.
 */
st_err st_gc_marker_decode(const void *buf, size_t len, int64_t *marked_ns, int64_t *grace_ns);

/*!
 * What a writer asks before it references (or publishes a reference to) a
 * pack: ST_OK if pack may be referenced, ST_ERR_BUSY if it carries a pending
 * marker or is gone (the message says which), other codes for store errors.
 * Order matters (docs/GC.md): the marker is looked at before the pack,
 * because the GC deletes the pack before its marker.
 * With young_ok_until_ns non-NULL, a marker is accepted (ST_OK) when the
 * writer's clock is before marked + grace/2; *young_ok_until_ns is then set
 * to that deadline (else left unchanged).
 */
st_err st_gc_pack_usable(st_backend *b, const char *job, const st_id *pack,
                         int64_t *young_ok_until_ns);

#endif
