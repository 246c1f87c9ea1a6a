/*
 * st_catalog — reading and publishing steps in the store, following
 * docs/PROTOCOL.md and docs/CONSISTENCY.md: a node's part of a step is
 * visible only through its part record, written after the manifest it names,
 * written after every pack it references; a step is consistent when its
 * parts together satisfy the consistency rule.
 *
 * Shared by the one-shot put/restore of ckptctl (st_store.c) and the daemon's
 * uploader and remote view (st_vfs). Threads: stateless; callers bring the
 * backend (thread-safe) and their own buffers.
 */
#ifndef ST_CATALOG_H
#define ST_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "format/st_manifest.h"
#include "engine/st_state.h"
#include "format/st_part.h"

/*! Names of the jobs in the store, from the job registry (*jobs: malloc'd
 *  array of malloc'd names; st_catalog_free_names()). */
st_err st_catalog_list_jobs(st_backend *b, char ***jobs, size_t *n);
void st_catalog_free_names(char **names, size_t n);

/*! A step that has part records, and the nodes that wrote them. */
typedef struct st_step_keys {
    uint64_t step;
    size_t nnodes;
    char (*nodes)[ST_NODE_MAX + 1]; /* malloc'd */
    /* The largest revision among the step's manifest keys, published or
     * not: it changes whenever a node publishes its part of the step again,
     * so a reader can tell a step changed from the listing alone. */
    uint32_t max_revision;
} st_step_keys;

/*! Steps of job that have at least one part record, ascending, from one
 *  listing (*steps malloc'd; st_step_keys_free()). */
st_err st_catalog_list_steps(st_backend *b, const char *job, st_step_keys **steps, size_t *n);
void st_step_keys_free(st_step_keys *steps, size_t n);

/*! Fetches and decodes one node's part record (ST_ERR_NOT_FOUND if absent). */
st_err st_catalog_load_part(st_backend *b, const char *job, uint64_t step, const char *node,
                            st_bytes *buf, st_part *p);

/*! Fetches the manifest a part record names and checks it against it. */
st_err st_catalog_load_manifest(st_backend *b, const st_part *p, st_bytes *buf, st_manifest *m);

/*! One path of a step and the version of it that every reader takes. */
typedef struct st_stepfile {
    const st_file_entry *f;
    const st_manifest *m; /* the manifest holding f (its packs) */
    size_t part;          /* index of that manifest's part in the view */
} st_stepfile;

/*! One step with all its parts and manifests, and the verdict of the
 *  consistency rule (docs/CONSISTENCY.md). */
typedef struct st_stepview {
    uint64_t step;
    size_t nparts;
    st_part *parts;         /* malloc'd */
    st_manifest *manifests; /* parallel to parts */
    int consistent;
    int complete;
    uint32_t world_size;
    uint32_t ranks; /* distinct writer ranks among the files */
    uint64_t files, bytes;
    int64_t created_ns;
    char why[160]; /* "" when consistent */
    /* One entry per path, sorted by path, each the winning version
     * (st_part_supersedes; docs/CONSISTENCY.md, "One version per path").
     * Restore, verify and the mount read these, never the manifests'
     * files directly. Points into manifests; malloc'd. */
    size_t nentries;
    st_stepfile *entries;
    char conflict[400]; /* "" unless some path is both a file and a directory */
} st_stepview;

/*! Loads every part of k and evaluates it. A part that cannot be read makes
 *  the whole load fail (a step is judged on all its parts or not at all). */
st_err st_catalog_load_view(st_backend *b, const char *job, const st_step_keys *k, st_bytes *buf,
                            st_stepview *v);
void st_stepview_free(st_stepview *v);

/*! Picks one version per path (sets entries, conflict) and applies the
 *  consistency rule to it (sets consistent, complete, world_size, ranks,
 *  files, bytes, why). Pure but for the entries array, which it replaces. */
void st_stepview_evaluate(st_stepview *v);

/*!
 * ST_OK if the step's paths can be laid out as a tree; ST_ERR_CORRUPT (the
 * step is damaged: docs/CONSISTENCY.md) if one path is both a file and the
 * directory of another. The one check restore, verify, GC and the mount
 * share, so they all judge such a step alike. job names it in the message.
 */
st_err st_stepview_check_paths(const st_stepview *v, const char *job);

/*!
 * The newest consistent step of job among steps lowest <= step < below:
 * lists the steps and loads them from the newest down until one is
 * consistent (its view into *v, ST_OK; ST_ERR_NOT_FOUND if none). A step
 * that cannot be read: with skip NULL, the search fails with its error (the
 * answer is never guessed past it); otherwise skip(arg, step, message) hears
 * of it and the search goes on below it.
 */
st_err st_catalog_newest_consistent(st_backend *b, const char *job, uint64_t lowest, uint64_t below,
                                    void (*skip)(void *arg, uint64_t step, const char *msg),
                                    void *arg, st_stepview *v);

/*!
 * A check a publish must pass before its manifest is PUT, run in the
 * publish's first round at once with the publish's own requests
 * (docs/PROTOCOL.md, "Write order"): the writer's last look at its packs
 * (st_ingest_last_look), the mount's node lease. fn must be safe to run
 * on another thread than the caller's, at once with the round's requests.
 */
typedef struct st_publish_check {
    st_err (*fn)(void *arg);
    void *arg;
} st_publish_check;

/* Checks a caller may add to one publish (the round's own calls are 4). */
#define ST_PUBLISH_MAX_CHECKS 4

/*!
 * Publishes this node's part of a step whose packs are all stored. First
 * round, all at once: the job registry entry PUT, the look at the
 * compaction fence, the step's listing (part->revision, the smallest
 * revision the caller accepts, is raised past every revision it holds, so
 * the part's versions win over every part already published:
 * docs/CONSISTENCY.md, "One version per path") and the caller's checks[0..n).
 * If all of them passed: the manifest m (step, job, node, created_ns filled
 * in), then the part record (its manifest fields are filled here from what
 * was written). A part without a lineage takes the one of the node's part
 * record it replaces (a GET in the first round), else a new one
 * (docs/ENCRYPTION.md, "Replay"). On return part->revision and
 * part->lineage say what was written. Adds the PUTs made to *puts.
 */
st_err st_catalog_publish(st_backend *b, const st_manifest *m, st_part *part,
                          const st_publish_check *checks, size_t nchecks, uint64_t *puts);

/*!
 * Encodes m into *manifest and fills in part's fields that describe it
 * (step, created_ns, job, node, manifest length and digest), as the publish
 * does before its PUTs: a replica record (docs/PEERS.md) carries the same
 * pair before the store has it. part->revision is left as it is.
 */
st_err st_catalog_seal_part(const st_manifest *m, st_part *part, st_bytes *manifest);

/*!
 * st_catalog_publish without the look at the compaction fence, for the
 * compactor that holds the fence (engine/st_compact.c) and only for it:
 * every other writer goes through st_catalog_publish, which refuses
 * (ST_ERR_BUSY, transient) while a live fence exists (docs/GC.md,
 * "Compaction").
 */
st_err st_catalog_publish_unfenced(st_backend *b, const st_manifest *m, st_part *part,
                                   const st_publish_check *checks, size_t nchecks, uint64_t *puts);

/*!
 * Whether job has a live compaction fence other than skip (a full key, may
 * be NULL): one LIST of jobs/<job>/gc/compacting/. *live is the count of
 * live fences; when non-zero, st_errmsg() names the first. Store errors
 * are returned as they are.
 */
st_err st_catalog_fence_live(st_backend *b, const char *job, const char *skip, int *live);

/*!
 * Merges the chunk locations of every part record of job that the local
 * index has not seen (in this exact version) into the dedup index, so a
 * writer dedups against what every node stored. Unreadable parts are reported
 * through warn (may be NULL) and skipped; store errors are returned.
 */
st_err st_catalog_sync_index(st_backend *b, st_state *state, const char *job,
                             void (*warn)(void *arg, const char *msg), void *warn_arg);

#endif
