/*
 * st_state — the writer's local state in SQLite (WAL): the dedup index of
 * chunks known to be in the store, the packs this writer stored, and the
 * part records already merged into the index. The schema and its rules are
 * in docs/STATE.md. (The mount's upload journal is another database:
 * mount/st_vfs_journal.c, docs/MOUNT_MODEL.md.)
 *
 * Rule that keeps the index honest: a chunk is added only after the PUT of
 * the pack that holds it succeeded (or it was read from a committed
 * manifest), so every location the index hands out names a stored pack.
 *
 * Threads: one st_state per thread (SQLite connections are not shared);
 * several connections may open the same file (WAL, busy timeout).
 */
#ifndef ST_STATE_H
#define ST_STATE_H

#include <stdint.h>

#include "st_error.h"
#include "format/st_part.h"
#include "util/st_hash.h"

typedef struct st_state st_state;

/* ---- the database ---- */

/*! Opens (creating, and migrating the schema) the database at path. */
st_err st_state_open(const char *path, st_state **out);
void st_state_close(st_state *s);

/*! Group many changes in one transaction (much faster, and atomic). */
st_err st_state_begin(st_state *s);
st_err st_state_commit(st_state *s);
st_err st_state_rollback(st_state *s);

/* ---- the dedup index: chunks, and the packs that hold them ---- */

/*! Where a stored chunk lives: stored_len bytes (its st_codec header and
 *  payload, as st_pack_entry has them) at offset in pack; raw_len decoded. */
typedef struct st_chunk_loc {
    st_id pack;
    uint64_t offset;
    uint32_t stored_len;
    uint32_t raw_len;
} st_chunk_loc;

/*! ST_OK and *loc if the job's index knows the chunk, else ST_ERR_NOT_FOUND. */
st_err st_state_chunk_lookup(st_state *s, const char *job, const st_id *id, st_chunk_loc *loc);
/*! Records a stored chunk (first location wins; re-adding is a no-op). */
st_err st_state_chunk_add(st_state *s, const char *job, const st_id *id, const st_chunk_loc *loc);
/*! Records a chunk's new place, replacing the one the index had: a chunk
 *  stored again (re-homed out of a retired pack, docs/GC.md), or the place
 *  named by a part record merged later (docs/PROTOCOL.md, "The local dedup
 *  index"). */
st_err st_state_chunk_move(st_state *s, const char *job, const st_id *id, const st_chunk_loc *loc);
/*! Records a stored pack. */
st_err st_state_pack_add(st_state *s, const char *job, const st_id *pack, uint64_t size,
                         uint32_t nchunks);
/*! Forgets a pack and every chunk location in it: the pack is pending
 *  deletion by GC or gone (docs/GC.md), so its chunks must be stored again. */
st_err st_state_pack_forget(st_state *s, const char *job, const st_id *pack);
/*! Number of chunks and packs the index holds for a job (stats, tests). */
st_err st_state_counts(st_state *s, const char *job, uint64_t *chunks, uint64_t *packs);

/* ---- part records already merged into the index ---- */

/*! 1 if this manifest key was already merged into the index, else 0. */
int st_state_manifest_seen(st_state *s, const char *key);
st_err st_state_manifest_mark(st_state *s, const char *key);

/* ---- part records seen: the replay check (docs/ENCRYPTION.md, "Replay") ---- */

/* Lineages of one part that were replaced by a newer one, remembered. */
#define ST_STATE_REPLACED_MAX 4

/*! What this node has seen of one part (job, step, node). */
typedef struct st_part_seen {
    uint8_t lineage[ST_PART_LINEAGE_LEN]; /* the current one */
    uint32_t revision;                    /* the highest seen of it */
    size_t nreplaced;                     /* newest first */
    uint8_t replaced[ST_STATE_REPLACED_MAX][ST_PART_LINEAGE_LEN];
} st_part_seen;

/*! ST_OK and *seen if the part was seen, ST_ERR_NOT_FOUND if not. */
st_err st_state_part_seen(st_state *s, const char *job, uint64_t step, const char *node,
                          st_part_seen *seen);
/*! Records what is now known of the part (replacing the row). */
st_err st_state_part_remember(st_state *s, const char *job, uint64_t step, const char *node,
                              const st_part_seen *seen);

#endif
