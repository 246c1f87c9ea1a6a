/*
 * st_gcmark — the objects garbage collection writes into a job's namespace
 * (docs/GC.md): their keys and their byte encodings. Pure: no I/O.
 *
 * Keys:
 *   jobs/<job>/gc/pending/<packid>   "ckptfs-gc-pending v1 <marked_ns> <grace_ns>\n"
 *   jobs/<job>/gc/retired/<packid>   "ckptfs-gc-retired v1 <t0_ns> <live> <size>\n"
 *   jobs/<job>/gc/deleting/<t0>.<pid> "ckptfs-gc-deleting v1 <t0_ns>\n<step>\n..."
 *   jobs/<job>/pins/<step:020>       empty
 *   jobs/<job>/gc/compacting/<t0:020>-<until:020>-<nonce:016x>  empty
 *                                    (the publish fence of a compaction)
 * The decoders accept any byte string and either return the values or
 * ST_ERR_CORRUPT.
 */
#ifndef ST_GCMARK_H
#define ST_GCMARK_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

/*! "jobs/<job>/<what>/" into out (cap bytes); ST_ERR_INVALID for a bad job
 *  name or when it does not fit. what is one of "gc/pending", "gc/retired",
 *  "gc/deleting", "pins". */
st_err st_key_job_dir(char *out, size_t cap, const char *job, const char *what);
/*! Key of the pending marker of a pack: jobs/<job>/gc/pending/<packid>. */
st_err st_key_gc_pending(char *out, size_t cap, const char *job, const st_id *pack);
/*! Key of the retire marker of a pack: jobs/<job>/gc/retired/<packid>
 *  (docs/GC.md, Repack by retirement). */
st_err st_key_gc_retired(char *out, size_t cap, const char *job, const st_id *pack);
/*! Prefix of every retire marker of job: "jobs/<job>/gc/retired/". */
st_err st_key_gc_retired_prefix(char *out, size_t cap, const char *job);
/*! Key of a pin: jobs/<job>/pins/<step20>. */
st_err st_key_pin(char *out, size_t cap, const char *job, uint64_t step);

/*! Key of a compaction's publish fence (docs/GC.md, "Compaction"): its
 *  stamp t0_ns and the end of its life until_ns (the compactor's clock)
 *  are in the name, so a writer needs only the listing. */
st_err st_key_gc_fence(char *out, size_t cap, const char *job, int64_t t0_ns, int64_t until_ns,
                       uint64_t nonce);
/*! Parses the name of a fence (the key after "jobs/<job>/gc/compacting/");
 *  ST_ERR_CORRUPT if it is not of that shape. */
st_err st_gcmark_fence_parse(const char *name, int64_t *t0_ns, int64_t *until_ns);

/*! A pending marker's text (the GC's clock when it marked the pack, and the
 *  grace period it used) into out (cap bytes), its length in *len. */
st_err st_gcmark_pending_encode(char *out, size_t cap, int64_t marked_ns, int64_t grace_ns,
                                size_t *len);
/*! Decodes a pending marker; ST_ERR_CORRUPT if it is not of that shape. */
st_err st_gcmark_pending_decode(const void *buf, size_t len, int64_t *marked_ns, int64_t *grace_ns);

/*! A retire marker's text: when it was retired, the pack's live and total
 *  bytes (informational: writers only look at whether it exists). */
st_err st_gcmark_retired_encode(char *out, size_t cap, int64_t t0_ns, uint64_t live, uint64_t size,
                                size_t *len);

/*! An intent: the steps a run is about to delete, stamped with its clock.
 *  Appends the text to out (release with st_bytes_free()). */
st_err st_gcmark_intent_encode(int64_t t0_ns, const uint64_t *steps, size_t n, st_bytes *out);
/*! Decodes an intent: its stamp and its steps (*steps set to a malloc'd
 *  array of *n entries, NULL when empty; free() it, also after an error). */
st_err st_gcmark_intent_decode(const void *buf, size_t len, int64_t *t0_ns, uint64_t **steps,
                               size_t *n);

#endif
