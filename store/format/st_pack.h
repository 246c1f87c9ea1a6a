/*
 * st_pack — pack objects: many encoded chunks in one immutable store object.
 *
 * Layout of a pack:
 *
 *   [chunk 0: st_codec header + payload][chunk 1]...[chunk n-1][trailer][footer]
 *
 *   trailer: for each chunk, in order:
 *       id (16 bytes), offset (varint), stored length (varint),
 *       raw length (varint), codec (u8)
 *   footer (24 bytes, fixed, the last bytes of the object):
 *       trailer length (LE u32), chunk count (LE u32),
 *       XXH3-64 of the trailer (LE u64), reserved zero (u32), magic "CKp1"
 *
 * The trailer makes a pack self-describing: the store's index can be rebuilt
 * from packs alone, and a reader can fetch just the footer and trailer with
 * two ranged GETs. A pack's name is the XXH3-128 of all its bytes.
 *
 * A writer accumulates one pack in memory (bounded by the target size plus
 * one chunk) and is reused for the next pack after st_pack_writer_reset().
 * Threads: a writer belongs to one thread at a time.
 */
#ifndef ST_PACK_H
#define ST_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_codec.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

#define ST_PACK_FOOTER_LEN  24
#define ST_PACK_TARGET_SIZE (24u << 20) /* close a pack once it reaches this */
#define ST_PACK_MAX_SIZE    (1u << 30)  /* decoders refuse larger claims */

typedef struct st_pack_entry {
    st_id id;
    uint64_t offset;     /* of the chunk's st_codec header within the pack */
    uint32_t stored_len; /* header + payload */
    uint32_t raw_len;
    uint8_t codec;
} st_pack_entry;

typedef struct st_pack_writer {
    st_bytes data;    /* chunks so far, then trailer and footer after finish */
    st_bytes trailer; /* trailer entries so far */
    uint32_t count;
    int finished;
} st_pack_writer;

/* A writer starts zero-initialised ({0}); st_pack_writer_free() releases it. */

/*!
 * Returns a pointer where up to max_len bytes of one encoded chunk may be
 * written (valid until the next call on w), or NULL if out of memory.
 */
uint8_t *st_pack_append_begin(st_pack_writer *w, size_t max_len);

/*!
 * Commits the chunk written at the pointer from st_pack_append_begin():
 * enc_len bytes, already a complete st_codec encoding. Records it in the
 * trailer and returns its offset in *offset (may be NULL).
 */
st_err st_pack_append_commit(st_pack_writer *w, size_t enc_len, uint64_t *offset);

/*! Bytes of chunk data so far (what to compare with ST_PACK_TARGET_SIZE). */
static inline size_t st_pack_writer_size(const st_pack_writer *w)
{
    return w->data.len;
}

/*!
 * Appends trailer and footer. Afterwards w->data.data[0..w->data.len) is the
 * complete pack and *pack_id its name.
 */
st_err st_pack_finish(st_pack_writer *w, st_id *pack_id);

/*! Empties the writer for the next pack, keeping its allocations. */
void st_pack_writer_reset(st_pack_writer *w);
void st_pack_writer_free(st_pack_writer *w);

/*!
 * Parses a footer (exactly the last ST_PACK_FOOTER_LEN bytes of a pack).
 * On success sets the trailer length and chunk count. ST_ERR_CORRUPT if not
 * a pack footer.
 */
st_err st_pack_footer_decode(const uint8_t *footer, uint32_t *trailer_len, uint32_t *count);

/*!
 * Decodes the trailer plus footer — tail[0..tail_len), the last
 * trailer_len + ST_PACK_FOOTER_LEN bytes of a pack of pack_size bytes — into
 * a malloc'd array of entries (*entries, *n; free() it). Checks the
 * checksum and that every entry lies inside the chunk area. Any byte string
 * yields either ST_OK or ST_ERR_CORRUPT, never a crash.
 */
st_err st_pack_trailer_decode(const uint8_t *tail, size_t tail_len, uint64_t pack_size,
                              st_pack_entry **entries, size_t *n);

#endif
