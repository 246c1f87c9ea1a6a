/*
 * st_manifest — what one node wrote for one step: its files, each as an
 * ordered list of chunk references, and where those chunks live.
 *
 * Encoding (all integers varints unless said otherwise):
 *
 *   magic "CKm1" (4 bytes), format version (LE u16, = 1), flags (LE u16, 0)
 *   step, created_ns (zigzag), node name (str), job name (str)
 *   pack count, then each pack id (16 bytes)
 *   file count, then per file:
 *       path (str), size, mode, mtime_ns (zigzag), rank (zigzag, -1 unknown),
 *       digest (16 bytes, XXH3-128 of the whole file), chunk count,
 *       per chunk: id (16 bytes), pack index, offset, stored length, raw length
 *   XXH3-64 of everything above (LE u64)
 *
 * Version 2 (written only when a file has a hole) starts each chunk ref with
 * a tag: 0 = a hole extent (then its length: that many zero bytes, no chunk
 * stored), k >= 1 = a chunk in pack k - 1 (then id, offset, stored length,
 * raw length). docs/FORMATS.md has the rules.
 *
 * A chunk reference carries its location, so restore needs no separate index:
 * the manifest alone says which ranged GETs rebuild each file.
 *
 * Paths are relative to the job, '/'-separated, and must be "clean": no
 * leading '/', no empty, "." or ".." component, no NUL, at most
 * ST_MANIFEST_MAX_PATH bytes. The decoder rejects any other path, so a
 * hostile manifest cannot make restore write outside its target directory,
 * and any manifest whose paths no directory tree can hold together: the
 * same path twice, or a file beneath another file ("d" and "d/x").
 *
 * The decoder accepts any (buf, len) and returns either a manifest whose every
 * field passed these checks or ST_ERR_CORRUPT / ST_ERR_UNSUPPORTED (it is
 * fuzzed). Threads: values, no shared state.
 */
#ifndef ST_MANIFEST_H
#define ST_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

#define ST_MANIFEST_VERSION  2 /* the newest version read; 1 is written when it suffices */
#define ST_MANIFEST_MAX_PATH 4096
#define ST_MANIFEST_MAX_NAME 255 /* node and job names */

#define ST_CHUNK_HOLE        UINT32_MAX /* st_chunk_ref.pack of a hole extent */
#define ST_MANIFEST_MAX_HOLE (1u << 30) /* bytes of one hole extent */

/* One extent of a file: a chunk stored in a pack, or (pack == ST_CHUNK_HOLE)
 * a hole of raw_len zero bytes, whose id, offset and stored_len are zero. */
typedef struct st_chunk_ref {
    st_id id;
    uint32_t pack; /* index into st_manifest.packs, or ST_CHUNK_HOLE */
    uint64_t offset;
    uint32_t stored_len;
    uint32_t raw_len;
} st_chunk_ref;

/*! 1 if c is a hole extent (no chunk, no pack: skip it before any pack
 *  table lookup), else 0. */
static inline int st_chunk_is_hole(const st_chunk_ref *c)
{
    return c->pack == ST_CHUNK_HOLE;
}

typedef struct st_file_entry {
    char *path; /* NUL-terminated, clean (see above) */
    uint64_t size;
    uint32_t mode;
    int64_t mtime_ns;
    int32_t rank; /* -1 when unknown */
    st_id digest;
    size_t nchunks;
    st_chunk_ref *chunks;
} st_file_entry;

typedef struct st_manifest {
    uint64_t step;
    int64_t created_ns;
    char *node;
    char *job;
    size_t npacks;
    st_id *packs;
    size_t nfiles;
    st_file_entry *files;
} st_manifest;

/*! 1 if path is clean as defined above, else 0. */
int st_path_is_clean(const char *path, size_t len);

/*! Appends the encoding of m to out: version 1 if no file has a hole,
 *  else version 2. ST_ERR_INVALID if m breaks a rule (unclean path, pack
 *  index out of range, name too long, a hole of 0 or > 2^30 bytes). */
st_err st_manifest_encode(const st_manifest *m, st_bytes *out);

/*!
 * Decodes buf[0..len) into *m (caller-provided struct; on success it owns
 * heap memory released by st_manifest_free()). On failure *m is left empty.
 */
st_err st_manifest_decode(const uint8_t *buf, size_t len, st_manifest *m);

/*! Frees what decode (or a builder using the same allocation rules) owns. */
void st_manifest_free(st_manifest *m);

#endif
