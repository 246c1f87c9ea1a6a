/*
 * st_manifest_rules — what every manifest version shares, private to the
 * manifest codec (st_manifest.c for versions 1 and 2, st_manifest_v3.c for
 * version 3's body): the rules a manifest must keep, checked by encoders and
 * decoders alike, and the fields every version encodes the same way.
 *
 * The check functions return NULL if fine, else a sentence saying why not;
 * an encoder reports it as ST_ERR_INVALID, a decoder as ST_ERR_CORRUPT. One
 * set of rules for both is what keeps the encoding canonical.
 *
 * The get_* readers set r->err on short or out-of-range input and return
 * -1; a caller may chain several and test r->err once.
 */
#ifndef ST_MANIFEST_RULES_H
#define ST_MANIFEST_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_manifest.h"
#include "util/st_wire.h"

#define ST_MANIFEST_HEADER_LEN 8 /* magic + version + flags */
#define ST_MANIFEST_SUM_LEN    8 /* the trailing XXH3-64 */

/* Minimum encoded sizes, used to cap claimed counts by the bytes left. */
#define ST_MANIFEST_MIN_PACK   ST_ID_LEN
#define ST_MANIFEST_MIN_EXTENT 2 /* version 2 and 3: tag 0 + a one-byte length */

static inline uint64_t st_zigzag_encode(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t st_zigzag_decode(uint64_t u)
{
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* ---- rules ---- */

/* A node or job name of len bytes. */
const char *st_manifest_check_name(const char *s, size_t len);

/* One file of a `version` manifest with npacks packs; path_len is the
 * path's byte length. On a bad extent, *bad_chunk is its index. */
const char *st_manifest_check_file(const st_file_entry *f, size_t path_len, size_t npacks,
                                   unsigned version, size_t *bad_chunk);

/* Version 3: path follows prev (both clean) in a manifest's file list:
 * strictly after it in tree order and not beneath it. Tree order puts a
 * file's paths beneath it right after it, so checking neighbours is enough. */
const char *st_manifest_check_path_order(const char *prev, const char *path);

/* Looks for two paths of files[] (any order) that no directory tree can
 * hold together: the same path twice, or a file and a path beneath it.
 * ST_OK if none, else `bad` (ST_ERR_INVALID from an encoder, ST_ERR_CORRUPT
 * from a decoder) with the path in st_errmsg(), or ST_ERR_NOMEM. */
st_err st_manifest_check_conflicts(const st_file_entry *files, size_t nfiles, st_err bad);

/* 1 if a file of m has a hole extent / a slice, else 0. */
int st_manifest_has_hole(const st_manifest *m);
int st_manifest_has_slice(const st_manifest *m);

/* A file's kind in version 3: 2 its only extent is a slice, 1 it is one whole
 * chunk, 0 anything else (no extent, a hole, several extents). */
int st_manifest_file_kind(const st_file_entry *f);

/* ---- fields every version shares ---- */

/* step, created_ns, node, job, pack count and pack ids (each followed by
 * its st_pack_seal when m->pack_seals: version 4). */
st_err st_manifest_put_head(st_bytes *out, const st_manifest *m);
/* Reads them into d, the seals too when `sealed` (version 4; on failure
 * the caller frees d). */
st_err st_manifest_get_head(st_reader *r, int sealed, st_manifest *d);

/* One extent as `version` writes it (version 1: id, pack, offset, stored and
 * raw length; 2 and 3: a tag first, 0 for a hole, pack + 1 for a chunk). */
st_err st_manifest_put_extent(st_bytes *out, const st_chunk_ref *c, unsigned version);
/* Reads one; the rules are checked after (st_manifest_check_file). */
void st_manifest_get_extent(st_reader *r, unsigned version, st_chunk_ref *c);

/* Where a chunk is, after its pack (versions 2 and 3): id, offset, stored
 * length. */
st_err st_manifest_put_location(st_bytes *out, const st_chunk_ref *c);
void st_manifest_get_location(st_reader *r, st_chunk_ref *c);

/* A count, refused when the bytes left could not hold that many elements of
 * min_elem_len bytes: what a decoder then allocates is bounded by its input. */
int st_manifest_get_count(st_reader *r, size_t min_elem_len, size_t *count);
int st_manifest_get_u32(st_reader *r, uint32_t *out);
int st_manifest_get_zigzag(st_reader *r, int64_t *out);
/* A length-prefixed string of at most max_len bytes, copied into a fresh
 * NUL-terminated allocation: ST_ERR_CORRUPT if short, ST_ERR_NOMEM. */
st_err st_manifest_get_cstr(st_reader *r, size_t max_len, char **out, size_t *len);
/* A zigzag rank in -1 .. 2^31-1. */
int st_manifest_get_rank(st_reader *r, int32_t *out);

#endif
