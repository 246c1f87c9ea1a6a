/*
 * st_bundlecache — decoded bundles (manifest version 3: small files stored
 * as slices of one chunk, docs/FORMATS.md), shared by the readers of one
 * restore or one mount so that the files of a bundle, read one after the
 * other, cost one GET of the bundle rather than one per file.
 *
 * A fixed number of slots, each holding one whole decoded and verified
 * bundle (at most ST_MANIFEST_MAX_BUNDLE bytes), keyed by the bundle's
 * chunk id (its content: the same id in another pack is the same bytes);
 * the least recently used slot is reused. A bundle being fetched is marked
 * so: a second reader of it waits for the first one's GET instead of
 * issuing its own. Readers get a copy of their slice (copy-out), so no
 * pointer into the cache outlives a call and no entry needs a refcount.
 *
 * Owns: its slots and their buffers (slots x the largest bundle seen).
 * Threads: every function but new/free may be called from any thread at
 * once; one mutex guards the slots, held for lookups and copies (a slice is
 * at most 64 KiB), never across a GET or a decode.
 */
#ifndef ST_BUNDLECACHE_H
#define ST_BUNDLECACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "format/st_manifest.h"
#include "st_error.h"

/* Slots a reader keeps: a restore worker reads the files of one bundle one
 * after another, so 2 each (the bundle it is in and the next one); the
 * mount serves many readers and warm-up at once. */
#define ST_BUNDLECACHE_PER_WORKER 2u
#define ST_BUNDLECACHE_MOUNT      16u

typedef struct st_bundlecache st_bundlecache;

typedef struct st_bundlecache_stats {
    uint64_t hits;    /* slices served from a slot (or after waiting for one) */
    uint64_t fetches; /* bundles fetched and decoded (a GET each) */
} st_bundlecache_stats;

/*! A cache of `slots` bundles (at least 1). ST_ERR_NOMEM. */
st_err st_bundlecache_new(size_t slots, st_bundlecache **out);

/*! Frees c and its buffers; no call on c may be running. NULL is a no-op. */
void st_bundlecache_free(st_bundlecache *c);

/* Where a slice's bundle lives and whom to tell about a fetch. */
typedef struct st_bundle_source {
    st_backend *backend; /* borrowed */
    const char *job;
    const st_id *pack; /* the pack ref->pack names */
    /* A sealed pack's key id and salt (the manifest's, version 4) and the
     * keyring that opens it; seal NULL for a plain pack. */
    const struct st_pack_seal *seal;
    const struct st_keyring *kr;
    const char *path;  /* the file, for messages */
    uint64_t *gets;    /* incremented by a GET this call made (the caller's own counter) */
    uint64_t *fetched; /* bytes that GET received */
} st_bundle_source;

/*!
 * Copies the bytes slice ref (st_chunk_is_slice) gives its file, raw_len
 * bytes from byte skip of the decoded bundle, into dst (room for
 * ref->raw_len bytes). The bundle comes from a slot, or is fetched whole
 * (ref's offset and stored_len in src->pack), decoded and checked against
 * ref->id by the codec, then kept. ST_ERR_CORRUPT (the message names
 * src->path) if the pack is missing or short, the chunk does not decode to
 * its id, the decoded bundle's length is not ref->bundle_len, or the slice
 * lies outside it; other errors are the backend's. Nothing is kept on error.
 */
st_err st_bundlecache_read(st_bundlecache *c, const st_bundle_source *src, const st_chunk_ref *ref,
                           uint8_t *dst);

/*! What c served so far. */
st_bundlecache_stats st_bundlecache_stats_of(st_bundlecache *c);

#endif
