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
 * A sealed pack (magic "CKp2", docs/ENCRYPTION.md) starts with a header,
 * "CKp2" | key id (8) | salt (16), and seals each chunk record and the
 * trailer alone under the pack's key (st_crypt_derive, ST_CRYPT_PACK): a
 * record is the ciphertext of the chunk encoding, then a 16-byte tag, at
 * the same place a plain pack would hold the encoding. Its trailer entries
 * give the record's offset and length (tag included), so a reader fetches
 * exactly the bytes it did before and opens them (st_pack_open_record)
 * before decoding. The footer stays plain and names the sealed trailer.
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
#include "util/st_crypt.h"
#include "util/st_keyring.h"
#include "util/st_wire.h"

#define ST_PACK_FOOTER_LEN  24
#define ST_PACK_HEADER_LEN  (4 + ST_KEY_ID_LEN + ST_CRYPT_SALT_LEN) /* a sealed pack's: 28 */
#define ST_PACK_TARGET_SIZE (24u << 20) /* close a pack once it reaches this */
#define ST_PACK_MAX_SIZE    (1u << 30)  /* decoders refuse larger claims */

/* What opens a sealed pack: its key id and salt, the header's fields.
 * A manifest (version 4) carries one per sealed pack it names. */
typedef struct st_pack_seal {
    uint8_t key_id[ST_KEY_ID_LEN];
    uint8_t salt[ST_CRYPT_SALT_LEN];
} st_pack_seal;

typedef struct st_pack_entry {
    st_id id;
    uint64_t offset;     /* of the chunk's st_codec header (sealed: its record) */
    uint32_t stored_len; /* header + payload (sealed: + ST_CRYPT_TAG_LEN) */
    uint32_t raw_len;
    uint8_t codec;
} st_pack_entry;

typedef struct st_pack_writer {
    st_bytes data;    /* chunks so far, then trailer and footer after finish */
    st_bytes trailer; /* trailer entries so far */
    uint32_t count;
    int finished;
    /* Sealing (st_pack_writer_set_keyring): NULL writes plain CKp1 packs.
     * Each pack gets a fresh salt when its first chunk is appended. */
    const st_keyring *keyring;
    int started;         /* the current pack's header and key are set */
    st_pack_seal seal;   /* the current pack's */
    st_crypt_objkey key; /* the current pack's, wiped at reset and free */
} st_pack_writer;

/* A writer starts zero-initialised ({0}); st_pack_writer_free() releases it. */

/*!
 * Makes the writer seal every pack it writes from its next one on (CKp2,
 * under kr's sealing key; kr must outlive the writer), or write plain ones
 * (kr NULL). Call on an empty writer (new or reset).
 */
void st_pack_writer_set_keyring(st_pack_writer *w, const st_keyring *kr);

/*! 1 when the finished or open pack is sealed; its key id and salt in
 *  *seal (may be NULL). 0 for a plain pack. */
int st_pack_writer_seal(const st_pack_writer *w, st_pack_seal *seal);

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

/*! The stored length of a chunk encoding of enc_len bytes in w's packs:
 *  what its trailer entry and every reference to it give (a sealed
 *  record adds its tag). */
static inline size_t st_pack_record_len(const st_pack_writer *w, size_t enc_len)
{
    return enc_len + (w->keyring ? ST_CRYPT_TAG_LEN : 0);
}

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
 * a pack footer. A sealed pack's footer (CKp2) is ST_ERR_KEY here: its
 * trailer needs st_pack_sealed_footer_decode and a key.
 */
st_err st_pack_footer_decode(const uint8_t *footer, uint32_t *trailer_len, uint32_t *count);

/*! As st_pack_footer_decode for either kind of pack: *sealed is 1 for a
 *  CKp2 footer, 0 for CKp1. */
st_err st_pack_any_footer_decode(const uint8_t *footer, uint32_t *trailer_len, uint32_t *count,
                                 int *sealed);

/*! Writes the header of a pack sealed with seal (what its records'
 *  additional data starts with) into header. */
void st_pack_header_of(const st_pack_seal *seal, uint8_t header[ST_PACK_HEADER_LEN]);

/*!
 * Parses a sealed pack's header (its first ST_PACK_HEADER_LEN bytes) into
 * *seal. ST_OK, or ST_ERR_CORRUPT naming the pack (name) when the magic is
 * not CKp2.
 */
st_err st_pack_header_decode(const char *name, const uint8_t header[ST_PACK_HEADER_LEN],
                             st_pack_seal *seal);

/*!
 * The key of the pack `name` sealed with seal, from the keyring kr.
 * ST_OK; ST_ERR_KEY when kr is NULL ("NAME is encrypted: ...") or holds no
 * key of that id (naming it); ST_ERR_NOMEM. Wipe *k once done.
 */
st_err st_pack_key(const st_keyring *kr, const char *name, const st_pack_seal *seal,
                   st_crypt_objkey *k);

/*!
 * Opens the record in[0..len) read at `offset` of the sealed pack `name`
 * (key k, seal) into out[0..len - ST_CRYPT_TAG_LEN): the chunk encoding a
 * plain pack would hold there. ST_OK; ST_ERR_CORRUPT naming the pack and
 * offset when the tag fails (another pack under this name, a changed or
 * truncated record); ST_ERR_NOMEM.
 */
st_err st_pack_open_record(const st_crypt_objkey *k, const char *name, const st_pack_seal *seal,
                           uint64_t offset, const uint8_t *in, size_t len, uint8_t *out);

/*!
 * As st_pack_trailer_decode for a sealed pack: tail is its sealed trailer
 * and footer, k and seal its key. The chunk area starts after the header.
 * ST_ERR_CORRUPT (a failed tag names the pack), ST_ERR_NOMEM.
 */
st_err st_pack_sealed_trailer_decode(const st_crypt_objkey *k, const char *name,
                                     const st_pack_seal *seal, const uint8_t *tail, size_t tail_len,
                                     uint64_t pack_size, st_pack_entry **entries, size_t *n);

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
