/*
 * st_gc_policy — what a GC run keeps and what it reports: the types shared
 * by the facade's st_store_gc() (ckptstore.h), the engine's st_gc_run()
 * and the mount's background GC (st_vfs.h). Implemented by engine/st_gc.c.
 */
#ifndef ST_GC_POLICY_H
#define ST_GC_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* Default grace period of the sweep (ckptctl gc --grace). */
#define ST_GC_DEFAULT_GRACE_NS (3600LL * 1000000000LL)

/*! What a GC run deleted (with dry_run: would delete). */
typedef struct st_gc_report {
    int dry_run;
    uint64_t steps_kept, steps_deleted;
    uint64_t steps_damaged;    /* consistent, but a pack they need is missing or short: kept
                                  only by a rule of their own, never counted by keep_last */
    uint64_t steps_unreadable; /* a part record or manifest unreadable: kept (and no sweep) */
    uint64_t *deleted_steps;   /* steps_deleted entries, ascending (malloc'd) */
    uint64_t packs;            /* packs listed */
    uint64_t packs_referenced; /* referenced by a remaining part record's manifest */
    uint64_t packs_marked;     /* unreferenced, marker written now (deletable after grace) */
    uint64_t packs_unmarked;   /* referenced again: marker dropped */
    uint64_t packs_pending;    /* unreferenced, marker younger than the grace period */
    uint64_t packs_deleted;
    /* Space that comes back later: the packs marked now or still pending
     * (packs_marked + packs_pending) add up to pending_bytes, which a run
     * can delete from pending_free_first_ns on (wall clock, ns since the
     * epoch; the soonest marker's grace end) and all of it from
     * pending_free_last_ns on. 0 when nothing is pending. */
    uint64_t pending_bytes;
    int64_t pending_free_first_ns, pending_free_last_ns;
    uint64_t parts_deleted, manifests_deleted, markers_deleted;
    uint64_t objects_deleted; /* == ndeleted */
    uint64_t bytes_freed;     /* sizes of the deleted objects */
    uint64_t packs_retired;   /* referenced but mostly dead: writers store their live chunks anew */
    uint64_t retired_live_bytes; /* live bytes of the packs retired by this run */
    int stopped;                 /* *policy->stop ended the run early */
    int sweep_skipped;           /* references could not all be read: nothing swept */
    char why[320];               /* when sweep_skipped: why */
    /* Compaction (policy.compact; docs/GC.md, "Compaction"). */
    uint64_t compact_candidates;         /* packs at or past the dead threshold */
    uint64_t compact_candidate_bytes;    /* their sizes */
    uint64_t compact_live_bytes;         /* bytes of chunks copied out of them */
    uint64_t compact_duplicate_bytes;    /* referenced bytes whose chunk another place keeps */
    uint64_t compact_packs_written;      /* new packs PUT */
    uint64_t compact_parts_rewritten;    /* part records (with their manifests) rewritten */
    uint64_t compact_steps_skipped;      /* steps whose parts share a path: left alone */
    uint64_t compact_parts_changed;      /* deleted or republished meanwhile: not rewritten */
    uint64_t compact_gets, compact_puts; /* requests the compaction made */
    int64_t compact_wait_ns;             /* time spent waiting behind the fence */
    int compact_skipped;                 /* compaction not done; compact_why says why */
    char compact_why[320];
    char **deleted; /* every key deleted, in the order it was (malloc'd) */
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
    /* Compaction: copy the live chunks of packs at or past the compact_dead
     * threshold (below) and rewrite the part records that reference them, behind a
     * publish fence (docs/GC.md, "Compaction"); waits grace/2 first. */
    int compact;
    /* Compaction's threshold: a pack at least this fraction dead is copied.
     * 0 (or negative): the default, 0.09, so that every pack left is at
     * most 1/0.91 < 1.10 times its live bytes. */
    double compact_dead;
    void (*progress)(void *arg, const st_gc_report *r);
    void *progress_arg;
    const volatile int *stop;
} st_gc_policy;

/*! Releases what a GC run allocated in r (r itself is the caller's). */
void st_gc_report_free(st_gc_report *r);

#endif
