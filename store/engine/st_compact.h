/*
 * st_compact — a GC run that re-homes the live chunks of mostly-dead packs
 * itself, for a job whose writers are gone (docs/GC.md, "Compaction"):
 * behind a publish fence it copies those chunks into new packs and
 * rewrites the manifests and part records that referenced them; the old
 * packs then go through the ordinary sweep (marker, grace, re-scan).
 *
 * Entry point: st_compact_run(), called by st_gc_run() after retention and
 * before the sweep when policy->compact is set.
 *
 * Threads: one thread per run; nothing static but constants.
 */
#ifndef ST_COMPACT_H
#define ST_COMPACT_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"
#include "st_gc_policy.h"

/* Default dead fraction that makes a pack a candidate: every pack left is
 * then at most 1 / 0.91 < 1.10 times its live bytes. */
#define ST_COMPACT_DEFAULT_DEAD 0.09

/*!
 * Compacts job on b: packs whose dead fraction is at least
 * policy->compact_dead (default ST_COMPACT_DEFAULT_DEAD; >= 1: never) are copied and every part
 * record referencing them rewritten, under the fence and its timing rules for grace_ns
 * (docs/GC.md). With dry_run, only finds and counts the candidates (no fence, no wait, no write).
 * Adds what it did to the compact_* fields of r (and r->stopped when
 * policy->stop or the fence's deadline ended it). Another live compaction,
 * or a part record or manifest that cannot be read, is not an error: the
 * run is skipped, r->compact_skipped set and r->compact_why says why.
 * Store errors are returned; the fence is deleted on every path that wrote
 * it (a crash leaves it to go stale).
 */
st_err st_compact_run(st_backend *b, const char *job, const st_gc_policy *policy, int64_t grace_ns,
                      int dry_run, st_gc_report *r);

#endif
