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
 * raw length).
 *
 * Version 3 (written only when a file is a slice of a bundle) keeps the
 * 8-byte header and the checksum; between them, the body length and one
 * zstd frame holding the body column by column: the fields above, a table
 * of bundles, front-coded paths in tree order, and per file a kind (0
 * extents as in version 2, 1 one whole chunk, 2 a slice of a bundle). Only
 * kind-0 files store a digest. st_manifest_v3.c owns that body.
 *
 * Version 4 (written only when the packs are sealed, docs/ENCRYPTION.md) is
 * version 3's layout whose pack table gives, after each pack id, the key id
 * (8 bytes) and salt (16 bytes) of that sealed pack (st_pack_seal): what a
 * reader needs to open the pack's records without reading its header.
 * docs/FORMATS.md has the rules of every version.
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

#include "format/st_pack.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

#define ST_MANIFEST_VERSION  4 /* the newest version read; the oldest that suffices is written */
#define ST_MANIFEST_MAX_PATH 4096
#define ST_MANIFEST_MAX_NAME 255 /* node and job names */

#define ST_CHUNK_HOLE          UINT32_MAX  /* st_chunk_ref.pack of a hole extent */
#define ST_MANIFEST_MAX_HOLE   (1u << 30)  /* bytes of one hole extent */
#define ST_MANIFEST_MAX_BUNDLE (64u << 10) /* raw bytes of one bundle (version 3) */

/* One extent of a file: a chunk stored in a pack, or (pack == ST_CHUNK_HOLE)
 * a hole of raw_len zero bytes, whose id, offset and stored_len are zero.
 *
 * A slice (version 3: a small file inside a bundle) is the only extent of
 * its file: id, pack, offset and stored_len locate the bundle's chunk,
 * bundle_len is the bundle's raw length, and the file's raw_len bytes start
 * at byte `skip` of it. A reader decodes the whole bundle, checks its id and
 * takes raw_len bytes from skip. For a whole chunk or a hole, skip and
 * bundle_len are 0 (so a zeroed struct is a whole chunk, as before). */
typedef struct st_chunk_ref {
    st_id id;
    uint32_t pack; /* index into st_manifest.packs, or ST_CHUNK_HOLE */
    uint64_t offset;
    uint32_t stored_len;
    uint32_t raw_len;    /* the bytes this extent gives the file */
    uint32_t skip;       /* a slice: its first byte in the bundle's raw bytes */
    uint32_t bundle_len; /* a slice: the bundle's raw length; else 0 */
} st_chunk_ref;

/*! 1 if c is a hole extent (no chunk, no pack: skip it before any pack
 *  table lookup), else 0. */
static inline int st_chunk_is_hole(const st_chunk_ref *c)
{
    return c->pack == ST_CHUNK_HOLE;
}

/*! 1 if c is a slice of a bundle (decode the whole chunk, then take raw_len
 *  bytes from skip), else 0 (a whole chunk or a hole). */
static inline int st_chunk_is_slice(const st_chunk_ref *c)
{
    return c->bundle_len != 0 && c->pack != ST_CHUNK_HOLE;
}

/*! The raw length of the chunk c points at: its bundle's (bundle_len) for
 *  a slice, else raw_len. What decoding the stored chunk gives, what a
 *  chunk index records for c's id. */
static inline uint32_t st_chunk_stored_raw_len(const st_chunk_ref *c)
{
    return st_chunk_is_slice(c) ? c->bundle_len : c->raw_len;
}

typedef struct st_file_entry {
    char *path; /* NUL-terminated, clean (see above) */
    uint64_t size;
    uint32_t mode;
    int64_t mtime_ns;
    int32_t rank; /* -1 when unknown */
    st_id digest; /* XXH3-128 of the whole file, unless digest_absent */
    /* 1: no digest stored (version 3 stores one only for a file of several
     * extents; a single chunk's or bundle's id authenticates the bytes), and
     * digest is zero. 0 (a zeroed entry): digest holds the file's digest. */
    uint8_t digest_absent;
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
    /* Version 4: the key id and salt of each pack, parallel to packs (every
     * pack sealed); NULL when the packs are plain (versions 1 to 3). */
    st_pack_seal *pack_seals;
    size_t nfiles;
    st_file_entry *files;
} st_manifest;

/*! 1 if path is clean as defined above, else 0. */
int st_path_is_clean(const char *path, size_t len);

/*! Tree order of two paths, as a walk of their directory tree meets them
 *  (each directory's names sorted by byte): '/' before every other byte,
 *  else by byte. < 0, 0 or > 0 as strcmp. Version 3 keeps its files in
 *  this order (st_manifest_encode). */
int st_path_cmp(const char *a, const char *b);

/*!
 * Appends the encoding of m to out: version 3 if a file is a slice, else
 * version 2 if a file has a hole, else version 1. ST_ERR_INVALID (out left
 * as it was) if m breaks a rule the decoder would refuse: an unclean path,
 * a pack index out of range, a name too long, a hole of 0 or > 2^30 bytes,
 * a slice that is not its file's only extent or lies outside its bundle, a
 * digest_absent file whose digest the chosen version stores. In version 3
 * the files must be in tree order ('/' before every other byte), a file of
 * one whole chunk must not be empty, and the digest of a file of one chunk
 * or one slice is not written (it decodes as digest_absent).
 */
st_err st_manifest_encode(const st_manifest *m, st_bytes *out);

/*!
 * Decodes buf[0..len) into *m (caller-provided struct; on success it owns
 * heap memory released by st_manifest_free()). On failure *m is left empty.
 */
st_err st_manifest_decode(const uint8_t *buf, size_t len, st_manifest *m);

/*!
 * Appends to out the bytes of the encoded manifest buf[0..len) as they
 * compare: everything before the checksum, with a version 3 zstd frame
 * replaced by the body it holds (zstd may write one body as different
 * frames). Two encodings of one manifest give the same bytes here. Checks
 * only what it needs to get there (magic, and for version 3 the frame):
 * ST_ERR_CORRUPT otherwise, out left as it was.
 */
st_err st_manifest_canonical_bytes(const uint8_t *buf, size_t len, st_bytes *out);

/*! Frees what decode (or a builder using the same allocation rules) owns. */
void st_manifest_free(st_manifest *m);

#endif
