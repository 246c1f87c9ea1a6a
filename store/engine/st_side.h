/*
 * st_side — a file's side chunks: small chunks that lie in another pack
 * than the data around them, fetched once per file and served from memory.
 *
 * An incremental step's file is mostly runs of an earlier save's pack with
 * small new chunks between them: torch.save names each record after the
 * file, so every record's ZIP header is new while its data is not, and a
 * tensor repeated in the file points back to its first copy's pack. Each
 * run of such a file touched two or three packs, so it was fetched whole
 * (a window per pack, one GET after the other) and decoded only then;
 * measured on a 544 MiB fine-tune step through a fresh mount: 125 GETs
 * where the full step of twice the size took 53 (docs/WARMUP.md, "Side
 * chunks"). Served from memory instead, the side chunks no longer break the
 * run: it is one streamed GET of its own pack, decoded as it arrives, and
 * the side chunks cost one GET per group of them for the whole file.
 *
 * A chunk is a side chunk when it is small (stored in at most
 * ST_SIDE_CHUNK_MAX bytes) and the nearest large chunks around it, looked
 * for at most ST_SIDE_SCAN chunks either way, are all in other packs (at
 * least one must be found; the file's start or end counts as no
 * constraint). The side chunks of one pack are grouped into windows, one
 * GET each, that merge chunks at most ST_SIDE_GAP_MAX apart. A file whose
 * windows would hold more than ST_SIDE_BYTES_MAX has no side chunks (its
 * runs are planned as before): the windows stay in memory for as long as
 * the file is being restored.
 *
 * Threads: one st_side_chunks is shared by every restorer of its file;
 * st_side_load() is thread-safe, and a window is loaded once.
 */
#ifndef ST_SIDE_H
#define ST_SIDE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "format/st_manifest.h"
#include "st_error.h"

#define ST_SIDE_CHUNK_MAX (64u << 10)
#define ST_SIDE_SCAN      64u
#define ST_SIDE_GAP_MAX   (256u << 10)
#define ST_SIDE_BYTES_MAX (2u << 20)

typedef struct st_side_chunks st_side_chunks;

/*! 1 if chunk ref i of f is a side chunk by the rule above (holes never). */
int st_chunk_is_side(const st_file_entry *f, size_t i);

/*!
 * The side chunks of f, grouped into windows, none loaded yet. *out is
 * NULL (ST_OK) when f has none, or more than ST_SIDE_BYTES_MAX of windows.
 * f must outlive the result.
 */
st_err st_side_chunks_new(const st_manifest *m, const st_file_entry *f, st_side_chunks **out);

/*! 1 if chunk ref i of the file is served by s (s may be NULL: 0). */
int st_side_has(const st_side_chunks *s, size_t i);

/*!
 * Makes sure the window holding side chunk i is in memory: fetched with one
 * ranged GET of its pack by the first caller, waited for by any other. On
 * success *gets and *fetched grow by what this call fetched. A failed load
 * is tried again by the next caller.
 */
st_err st_side_load(st_side_chunks *s, st_backend *backend, const char *job, size_t i,
                    uint64_t *gets, uint64_t *fetched);

/*! The stored bytes of side chunk i (ref->stored_len of them); only after
 *  st_side_load() of i returned ST_OK on this thread. */
const uint8_t *st_side_bytes(const st_side_chunks *s, size_t i);

void st_side_chunks_free(st_side_chunks *s);

#endif
