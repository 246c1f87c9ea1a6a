/*
 * st_gc — retention and the time-fenced sweep of a job's objects
 * (docs/GC.md). Retention deletes whole steps (part records first, then
 * manifests); the sweep deletes packs that no remaining part record's
 * manifest references, but only after they carried a "pending" marker for
 * at least the grace period and a fresh scan still finds them unreferenced.
 * Writers (st_ingest) refuse to reference a pack that carries a marker.
 * Repack: a referenced pack that is mostly dead gets a "retired" marker;
 * writers then store its live chunks again, in packs of their own, and the
 * pack dies once the older steps that reference it are deleted.
 *
 * Entry points: st_gc_run() over a backend (the daemon's background GC),
 * st_gc_delete_step() (a step deleted through the mount), and the facade's
 * st_store_gc() (ckptstore.h). Also here: what st_ingest shares with the
 * sweep (st_gc_pack_usable). The marker keys and encodings are
 * format/st_gcmark.h.
 *
 * Threads: stateless; a GC run uses one thread and its own buffers.
 */
#ifndef ST_GC_H
#define ST_GC_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"
#include "st_gc_policy.h"
#include "util/st_hash.h"
#include "util/st_idmap.h"

/*!
 * What a writer asks before it references (or publishes a reference to) a
 * pack: ST_OK if pack may be referenced, ST_ERR_BUSY if it carries a pending
 * marker or is gone (the message says which), other codes for store errors.
 * Order matters (docs/GC.md): the marker is looked at before the pack,
 * because the GC deletes the pack before its marker.
 * With young_ok_until_ns non-NULL, a marker is accepted (ST_OK) while its
 * age by the store's clock is under grace/2; *young_ok_until_ns (monotonic,
 * st_mono_ns) is then lowered to when that ends (st_packuse.h).
 */
st_err st_gc_pack_usable(st_backend *b, const char *job, const st_id *pack,
                         int64_t *young_ok_until_ns);

/*!
 * What two listings said about a job's packs (docs/GC.md, "The last look by
 * listing"): the pending markers, then the packs, listed in that order.
 * Zero-initialise; st_gc_listing_free() releases (and re-zeroes) it.
 */
typedef struct st_gc_listing {
    st_idmap marked;  /* pack id -> 1: its pending marker was listed */
    st_idmap present; /* pack id -> 1: the pack was listed */
    int markers_cut;  /* the marker listing was cut short: it proves nothing */
    int packs_cut;    /* the pack listing was cut short: present is partial */
    int64_t taken_ns; /* st_mono_ns() when the marker listing began; 0 = none */
} st_gc_listing;

/*! Lists the job's pending markers, then its packs, each up to max_keys
 *  keys (a listing with more is cut short). Replaces what l held. */
st_err st_gc_listing_take(st_backend *b, const char *job, uint64_t max_keys, st_gc_listing *l);

/*! 1 if the listing saw pack, and no pending marker for it before: the
 *  answer st_gc_pack_usable's two HEADs would have given then. 0 means
 *  "ask st_gc_pack_usable", never "unusable". */
int st_gc_listing_clear(const st_gc_listing *l, const st_id *pack);

void st_gc_listing_free(st_gc_listing *l);

/*!
 * st_gc_pack_usable for each of packs[0..n), with fewer requests
 * (docs/GC.md, "Writers", the last look by listing): one listing of the
 * job's pending markers, then one of its packs, instead of two HEADs per
 * pack; a pack that the marker listing names, or that the pack listing
 * misses, gets st_gc_pack_usable itself. A listing that would cost more
 * requests than the HEADs it saves is cut short (the rest get HEADs), so
 * the count never exceeds about twice the per-pack one.
 * On ST_ERR_BUSY, *bad is the index of the first pack found unusable;
 * young_ok_until_ns as for st_gc_pack_usable.
 */
st_err st_gc_packs_usable(st_backend *b, const char *job, const st_id *packs, size_t n,
                          int64_t *young_ok_until_ns, size_t *bad);

typedef void (*st_gc_warn_fn)(void *arg, const char *msg);

/*!
 * One GC run over job in backend b (see st_store_gc() in ckptstore.h for
 * what it does); warn (may be NULL) hears about steps kept because they
 * could not be read.
 */
st_err st_gc_run(st_backend *b, const char *job, const st_gc_policy *policy, int dry_run,
                 st_gc_report *r, st_gc_warn_fn warn, void *warn_arg);

/*!
 * Deletes one step of job now, whatever retention says: its part records
 * first (the step is invisible from then on), then every other object under
 * its prefix, with an intent object around it so that a later GC run
 * finishes the deletion if this one is interrupted (docs/GC.md). The packs
 * it referenced are left to the sweep. A step with no object is not an
 * error (r->steps_deleted stays 0). Release r with st_gc_report_free().
 */
st_err st_gc_delete_step(st_backend *b, const char *job, uint64_t step, st_gc_report *r);

#endif
