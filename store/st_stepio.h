/*
 * st_stepio — reading and publishing whole steps in the store, following the
 * protocol of docs/PROTOCOL.md: a step is visible only through its commit
 * record, which is written after the manifest it names, which is written
 * after every pack it references.
 *
 * Shared by the one-shot put/get of ckptctl (st_store.c) and the daemon's
 * uploader and remote view (st_vfs). Threads: stateless; callers bring the
 * backend (thread-safe) and their own buffers.
 */
#ifndef ST_STEPIO_H
#define ST_STEPIO_H

#include <stddef.h>
#include <stdint.h>

#include "st_backend.h"
#include "st_manifest.h"
#include "st_state.h"
#include "st_step.h"

/*! Committed step numbers of job, ascending (*steps malloc'd; free()). */
st_err st_stepio_list_committed(st_backend *b, const char *job, uint64_t **steps, size_t *n);

/*!
 * Fetches and decodes the commit record of a step into c (st_commit_free()).
 * buf is scratch, reused across calls. ST_ERR_NOT_FOUND when the step is not
 * committed; ST_ERR_CORRUPT (message names the key) when it does not decode
 * or names another step.
 */
st_err st_stepio_load_commit(st_backend *b, const char *job, uint64_t step, st_bytes *buf,
                             st_commit *c);

/*!
 * Fetches one node's manifest named by a commit record, checks its length and
 * digest against the record, decodes it into m (st_manifest_free()).
 */
st_err st_stepio_load_manifest(st_backend *b, const char *job, uint64_t step,
                               const st_commit_node *node, st_bytes *buf, st_manifest *m);

/*!
 * Publishes a step whose packs are all stored: PUTs m (its step, job, node and
 * created_ns filled in) as revision `revision` of this node's manifest, then
 * the commit record naming it. `existing` (may be NULL) is the step's current
 * commit record: its other nodes' entries are carried over. Adds the PUTs
 * made to *puts.
 */
st_err st_stepio_publish(st_backend *b, const st_manifest *m, uint32_t revision,
                         const st_commit *existing, uint64_t *puts);

/*!
 * Merges the chunk locations of every committed step of job that the local
 * index has not seen (in this exact commit version) into the dedup index, so
 * a writer dedups against what every node stored. Unreadable steps are
 * reported through warn (may be NULL) and skipped; store errors are returned.
 */
st_err st_stepio_sync_index(st_backend *b, st_state *state, const char *job,
                            void (*warn)(void *arg, const char *msg), void *warn_arg);

#endif
