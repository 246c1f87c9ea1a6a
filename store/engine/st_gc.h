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
 * sweep, the marker keys and their encoding.
 *
 * Threads: stateless; a GC run uses one thread and its own buffers.
 */
#ifndef ST_GC_H
#define ST_GC_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"
#include "util/st_hash.h"

/* Default grace period of the sweep (ckptctl gc --grace). */
#define ST_GC_DEFAULT_GRACE_NS (3600LL * 1000000000LL)

/*! Key of the pending marker of a pack: jobs/<job>/gc/pending/<packid>. */
st_err st_key_gc_pending(char *out, size_t cap, const char *job, const st_id *pack);
/*! Prefix of every pending marker of job: "jobs/<job>/gc/pending/". */
st_err st_key_gc_pending_prefix(char *out, size_t cap, const char *job);
/*! Key of the retire marker of a pack: jobs/<job>/gc/retired/<packid>
 *  (docs/GC.md, Repack by retirement). */
st_err st_key_gc_retired(char *out, size_t cap, const char *job, const st_id *pack);
/*! Prefix of every retire marker of job: "jobs/<job>/gc/retired/". */
st_err st_key_gc_retired_prefix(char *out, size_t cap, const char *job);
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

/*! What a GC run deleted (with dry_run: would delete). */
typedef struct st_gc_report {
    int dry_run;
    uint64_t steps_kept, steps_deleted;
    uint64_t *deleted_steps;   /* steps_deleted entries, ascending (malloc'd) */
    uint64_t packs;            /* packs listed */
    uint64_t packs_referenced; /* referenced by a remaining part record's manifest */
    uint64_t packs_marked;     /* unreferenced, marker written now (deletable after grace) */
    uint64_t packs_unmarked;   /* referenced again: marker dropped */
    uint64_t packs_pending;    /* unreferenced, marker younger than the grace period */
    uint64_t packs_deleted;
    uint64_t parts_deleted, manifests_deleted, markers_deleted;
    uint64_t objects_deleted; /* == ndeleted */
    uint64_t bytes_freed;     /* sizes of the deleted objects */
    uint64_t packs_retired;   /* referenced but mostly dead: writers store their live chunks anew */
    uint64_t retired_live_bytes; /* live bytes of the packs retired by this run */
    int stopped;                 /* *policy->stop ended the run early */
    int sweep_skipped;           /* references could not all be read: nothing swept */
    char why[320];               /* when sweep_skipped: why */
    char **deleted;              /* every key deleted, in the order it was (malloc'd) */
    size_t ndeleted;
    size_t deleted_cap, deleted_steps_cap; /* internal */
} st_gc_report;

/*! Which steps a GC run keeps. Zero-initialise; with neither keep_last nor
 *  keep_every set, no step is deleted and the run only sweeps. Always kept:
 *  the newest consistent step and every step newer than it, pinned steps,
 *  and partial steps younger than the grace period. */
typedef struct st_gc_policy {
    uint64_t keep_last;  /* keep the N newest consistent steps (0: no such rule) */
    uint64_t keep_every; /* keep consistent steps whose number is a multiple of K (0: none) */
    int64_t grace_ns;    /* sweep grace period; <= 0: ST_GC_DEFAULT_GRACE_NS (1 h) */
    /* Repack: a referenced pack whose dead bytes are at least this fraction
     * of it is retired (docs/GC.md). 0 (or negative): the default, 0.5;
     * >= 1: never. Packs referenced by a pinned or keep_every step are never
     * retired (that step holds them whole anyway). */
    double repack_dead;
    /* Deletions are issued in batches of this many objects (0: 1000); after
     * each batch, at the end of the unit that filled it (a whole step, a
     * pack with its markers, one marker), progress (may be NULL) hears the
     * report so far on the run's thread, and the run looks at *stop (may be
     * NULL): non-zero ends it there (r->stopped; ST_OK). The run also looks
     * at *stop between its phases and while it reads references. */
    uint32_t batch;
    void (*progress)(void *arg, const st_gc_report *r);
    void *progress_arg;
    const volatile int *stop;
} st_gc_policy;

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
void st_gc_report_free(st_gc_report *r);

#endif
