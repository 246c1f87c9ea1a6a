/*
 * st_pack — writes pack objects and decodes their trailers (layout in st_pack.h,
 * byte tables in docs/FORMATS.md).
 *
 * Writer invariants:
 *   - w->data holds only complete, header-checked chunk encodings laid end to
 *     end from offset 0 until st_pack_finish(); then trailer and footer follow.
 *   - w->trailer holds exactly w->count entries, in the order of w->data.
 *   - A pack never exceeds ST_PACK_MAX_SIZE, the limit every decoder enforces,
 *     so a writer can never produce a pack its own readers refuse.
 *   - After finish, only reset or free is legal (append/finish say INVALID).
 *
 * Decoder invariants: st_pack_trailer_decode() accepts any bytes; it checks the
 * footer and checksum before parsing, bounds the entry count by the trailer
 * length before allocating, and returns entries that lie inside the chunk
 * area in ascending, non-overlapping order — or ST_ERR_CORRUPT.
 *
 * This module deliberately does not call the codec: it reads the 32-byte chunk
 * header itself (layout in st_codec.h) so packs can be written and tested
 * without the codec implementation.
 *
 * Sealed packs (CKp2): the writer seals each chunk encoding in place once
 * its header is checked, so w->data holds records (ciphertext ‖ tag) after
 * the pack header; the trailer is sealed at finish. The key lives in the
 * writer from the first append of a pack to its reset, then is wiped. A
 * sealed trailer is opened before any of its bytes are parsed.
 *
 * Threads: a writer belongs to one thread at a time; the decoders are pure.
 */
#include "format/st_pack.h"

#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t pack_magic[4] = {'C', 'K', 'p', '1'};
static const uint8_t sealed_magic[4] = {'C', 'K', 'p', '2'};
static const uint8_t chunk_magic[4] = {'C', 'K', 'c', '1'};

/* Smallest possible trailer entry: id + three 1-byte varints + codec. Used to
 * bound a claimed count by the bytes that could actually hold it. */
#define PACK_MIN_ENTRY_LEN (ST_ID_LEN + 1 + 1 + 1 + 1)
/* Largest trailer entry: id + offset (10-byte varint) + two u32 varints (5) + codec. */
#define PACK_MAX_ENTRY_LEN (ST_ID_LEN + 10 + 5 + 5 + 1)

void st_pack_writer_set_keyring(st_pack_writer *w, const st_keyring *kr)
{
    w->keyring = kr;
}

int st_pack_writer_seal(const st_pack_writer *w, st_pack_seal *seal)
{
    if (!w->started)
        return 0;
    if (seal)
        *seal = w->seal;
    return 1;
}

void st_pack_header_of(const st_pack_seal *seal, uint8_t header[ST_PACK_HEADER_LEN])
{
    memcpy(header, sealed_magic, sizeof sealed_magic);
    memcpy(header + 4, seal->key_id, ST_KEY_ID_LEN);
    memcpy(header + 4 + ST_KEY_ID_LEN, seal->salt, ST_CRYPT_SALT_LEN);
}

st_err st_pack_header_decode(const char *name, const uint8_t header[ST_PACK_HEADER_LEN],
                             st_pack_seal *seal)
{
    if (memcmp(header, sealed_magic, sizeof sealed_magic) != 0)
        return st_seterr(ST_ERR_CORRUPT, "%s: not a sealed pack (no CKp2 header)", name);
    memcpy(seal->key_id, header + 4, ST_KEY_ID_LEN);
    memcpy(seal->salt, header + 4 + ST_KEY_ID_LEN, ST_CRYPT_SALT_LEN);
    return ST_OK;
}

st_err st_pack_key(const st_keyring *kr, const char *name, const st_pack_seal *seal,
                   st_crypt_objkey *k)
{
    char hex[2 * ST_KEY_ID_LEN + 1];
    st_key_id_hex(seal->key_id, hex);
    if (!kr)
        return st_seterr(ST_ERR_KEY, "%s is encrypted (key id %s): give --encryption-key-file",
                         name, hex);
    const st_key *key = st_keyring_find(kr, seal->key_id);
    if (!key)
        return st_seterr(ST_ERR_KEY, "%s: sealed with key id %s, which the key file does not hold",
                         name, hex);
    return st_crypt_derive(key, seal->salt, ST_CRYPT_PACK, k);
}

st_err st_pack_open_record(const st_crypt_objkey *k, const char *name, const st_pack_seal *seal,
                           uint64_t offset, const uint8_t *in, size_t len, uint8_t *out)
{
    uint8_t header[ST_PACK_HEADER_LEN];
    st_pack_header_of(seal, header);
    return st_crypt_open_record(k, name, header, sizeof header, offset, in, len, out);
}

/* Starts a sealed pack: a fresh salt, its key, and its header at offset 0. */
static st_err start_sealed(st_pack_writer *w)
{
    const st_key *key = st_keyring_sealing(w->keyring);
    if (!key)
        return st_seterr(ST_ERR_KEY, "pack writer: the keyring holds no key");
    memcpy(w->seal.key_id, key->id, ST_KEY_ID_LEN);
    if (RAND_bytes(w->seal.salt, ST_CRYPT_SALT_LEN) != 1)
        return st_seterr(ST_ERR_NOMEM, "pack writer: no random bytes for a salt");
    st_err e = st_crypt_derive(key, w->seal.salt, ST_CRYPT_PACK, &w->key);
    if (!e)
        e = st_bytes_reserve(&w->data, ST_PACK_HEADER_LEN);
    if (e)
        return e;
    st_pack_header_of(&w->seal, w->data.data);
    w->data.len = ST_PACK_HEADER_LEN;
    w->started = 1;
    return ST_OK;
}

/* The bytes a sealed record adds to its chunk encoding (0 for a plain pack). */
static size_t record_extra(const st_pack_writer *w)
{
    return st_pack_record_len(w, 0);
}

uint8_t *st_pack_append_begin(st_pack_writer *w, size_t max_len)
{
    if (w->finished) {
        st_seterr(ST_ERR_INVALID, "pack writer: append after finish (reset it first)");
        return NULL;
    }
    if (w->keyring && !w->started && w->data.len == 0 && start_sealed(w))
        return NULL;
    if (st_bytes_reserve(&w->data, max_len + record_extra(w)))
        return NULL;
    return w->data.data + w->data.len;
}

/*
 * Reads the st_codec header at the start of enc[0..enc_len) into *e (id,
 * raw_len, codec, stored_len) and checks it describes exactly enc_len bytes.
 */
static st_err parse_chunk_header(const uint8_t *enc, size_t enc_len, st_pack_entry *e)
{
    if (enc_len < ST_CODEC_HEADER_LEN)
        return st_seterr(ST_ERR_INVALID, "pack append: %zu bytes is shorter than a chunk header",
                         enc_len);
    if (memcmp(enc, chunk_magic, sizeof chunk_magic) != 0)
        return st_seterr(ST_ERR_INVALID, "pack append: not a chunk encoding (bad magic)");
    uint8_t codec = enc[4];
    if (codec > ST_CODEC_ZSTD_SHUF4)
        return st_seterr(ST_ERR_INVALID, "pack append: unknown codec %u", codec);
    if (enc[5] || enc[6] || enc[7])
        return st_seterr(ST_ERR_INVALID, "pack append: chunk header reserved bytes not zero");
    uint32_t raw_len = st_le32_get(enc + 8);
    uint32_t payload_len = st_le32_get(enc + 12);
    if (raw_len > ST_CODEC_MAX_RAW)
        return st_seterr(ST_ERR_INVALID, "pack append: raw length %u above limit", raw_len);
    if ((uint64_t)enc_len != (uint64_t)ST_CODEC_HEADER_LEN + payload_len)
        return st_seterr(ST_ERR_INVALID,
                         "pack append: %zu bytes given, header says %u + payload %u", enc_len,
                         (unsigned)ST_CODEC_HEADER_LEN, payload_len);
    memcpy(e->id.b, enc + 16, ST_ID_LEN);
    e->stored_len = (uint32_t)enc_len;
    e->raw_len = raw_len;
    e->codec = codec;
    return ST_OK;
}

static st_err trailer_put_entry(st_bytes *t, const st_pack_entry *e)
{
    st_err err = st_bytes_append(t, e->id.b, ST_ID_LEN);
    if (!err)
        err = st_bytes_put_varint(t, e->offset);
    if (!err)
        err = st_bytes_put_varint(t, e->stored_len);
    if (!err)
        err = st_bytes_put_varint(t, e->raw_len);
    if (!err)
        err = st_bytes_put_u8(t, e->codec);
    return err;
}

st_err st_pack_append_commit(st_pack_writer *w, size_t enc_len, uint64_t *offset)
{
    if (w->finished)
        return st_seterr(ST_ERR_INVALID, "pack writer: append after finish (reset it first)");
    /* The bytes (and a sealed record's tag) must fit the space
     * st_pack_append_begin reserved. */
    size_t extra = record_extra(w);
    if (!w->data.data || enc_len + extra > w->data.cap - w->data.len || (w->keyring && !w->started))
        return st_seterr(ST_ERR_INVALID, "pack append: %zu bytes exceed the space reserved",
                         enc_len);
    if (w->count == UINT32_MAX)
        return st_seterr(ST_ERR_NOSPACE, "pack append: chunk count limit reached");
    /* The finished pack (with this entry's trailer line and the footer) must stay
     * within the limit decoders enforce. */
    if ((uint64_t)w->data.len + enc_len + extra + w->trailer.len + PACK_MAX_ENTRY_LEN +
            ST_PACK_FOOTER_LEN + extra >
        ST_PACK_MAX_SIZE)
        return st_seterr(ST_ERR_NOSPACE, "pack append: pack would exceed %u bytes",
                         (unsigned)ST_PACK_MAX_SIZE);

    st_pack_entry e;
    uint8_t *rec = w->data.data + w->data.len;
    st_err err = parse_chunk_header(rec, enc_len, &e);
    if (err)
        return err;
    e.offset = w->data.len;
    e.stored_len = (uint32_t)(enc_len + extra);
    size_t trailer_len = w->trailer.len;
    err = trailer_put_entry(&w->trailer, &e);
    if (!err && w->keyring) /* in place: the encoding becomes its record */
        err = st_crypt_seal_record(&w->key, w->data.data, ST_PACK_HEADER_LEN, e.offset, rec,
                                   enc_len, rec);
    if (err) {
        w->trailer.len = trailer_len; /* keep trailer and data in step */
        return err;
    }
    w->data.len += enc_len + extra;
    w->count++;
    if (offset)
        *offset = e.offset;
    return ST_OK;
}

st_err st_pack_finish(st_pack_writer *w, st_id *pack_id)
{
    if (w->finished)
        return st_seterr(ST_ERR_INVALID, "pack writer: finished twice");
    size_t extra = record_extra(w);
    if ((uint64_t)w->data.len + w->trailer.len + extra + ST_PACK_FOOTER_LEN > ST_PACK_MAX_SIZE)
        return st_seterr(ST_ERR_NOSPACE, "pack finish: pack would exceed %u bytes",
                         (unsigned)ST_PACK_MAX_SIZE);
    st_err err = w->keyring && !w->started ? start_sealed(w) : ST_OK; /* no chunks */
    if (!err)
        err = st_bytes_reserve(&w->data, w->trailer.len + extra + ST_PACK_FOOTER_LEN);
    if (err)
        return err;
    uint8_t *trailer = w->data.data + w->data.len;
    if (w->keyring) {
        err = st_crypt_seal_record(&w->key, w->data.data, ST_PACK_HEADER_LEN, w->data.len,
                                   w->trailer.data, w->trailer.len, trailer);
        if (err)
            return err;
    } else if (w->trailer.len) {
        memcpy(trailer, w->trailer.data, w->trailer.len);
    }
    size_t trailer_len = w->trailer.len + extra;
    w->data.len += trailer_len;

    uint8_t footer[ST_PACK_FOOTER_LEN];
    st_le32_put(footer, (uint32_t)trailer_len);
    st_le32_put(footer + 4, w->count);
    st_le64_put(footer + 8, st_hash64(trailer, trailer_len));
    st_le32_put(footer + 16, 0);
    memcpy(footer + 20, w->keyring ? sealed_magic : pack_magic, sizeof pack_magic);
    /* Cannot fail now that the space is reserved. */
    st_bytes_append(&w->data, footer, sizeof footer);
    w->finished = 1;
    if (pack_id)
        *pack_id = st_id_of(w->data.data, w->data.len);
    return ST_OK;
}

void st_pack_writer_reset(st_pack_writer *w)
{
    st_bytes_clear(&w->data);
    st_bytes_clear(&w->trailer);
    w->count = 0;
    w->finished = 0;
    w->started = 0;
    st_crypt_objkey_wipe(&w->key);
}

void st_pack_writer_free(st_pack_writer *w)
{
    st_pack_writer_reset(w);
    st_bytes_free(&w->data);
    st_bytes_free(&w->trailer);
}

st_err st_pack_footer_decode(const uint8_t *footer, uint32_t *trailer_len, uint32_t *count)
{
    int sealed = 0;
    st_err e = st_pack_any_footer_decode(footer, trailer_len, count, &sealed);
    if (!e && sealed)
        return st_seterr(ST_ERR_KEY, "pack footer: an encrypted pack (CKp2) needs the key");
    return e;
}

st_err st_pack_any_footer_decode(const uint8_t *footer, uint32_t *trailer_len, uint32_t *count,
                                 int *sealed)
{
    *sealed = !memcmp(footer + 20, sealed_magic, sizeof sealed_magic);
    if (!*sealed && memcmp(footer + 20, pack_magic, sizeof pack_magic) != 0) {
        /* A later digit is a format a newer release wrote: said as such,
         * so that a reader too old for a pack does not call it damaged. */
        if (!memcmp(footer + 20, pack_magic, 3) && footer[23] > sealed_magic[3] &&
            footer[23] <= '9')
            return st_seterr(ST_ERR_UNSUPPORTED,
                             "pack footer: format version %c is newer than %c: a newer release "
                             "wrote this pack",
                             footer[23], sealed_magic[3]);
        return st_seterr(ST_ERR_CORRUPT, "pack footer: bad magic");
    }
    if (st_le32_get(footer + 16) != 0)
        return st_seterr(ST_ERR_CORRUPT, "pack footer: reserved field not zero");
    uint32_t tlen = st_le32_get(footer);
    uint32_t n = st_le32_get(footer + 4);
    if ((uint64_t)tlen + ST_PACK_FOOTER_LEN > ST_PACK_MAX_SIZE)
        return st_seterr(ST_ERR_CORRUPT, "pack footer: trailer length %u too large", tlen);
    size_t tag = *sealed ? ST_CRYPT_TAG_LEN : 0;
    if (tlen < tag)
        return st_seterr(ST_ERR_CORRUPT, "pack footer: sealed trailer of %u bytes has no tag",
                         tlen);
    if ((uint64_t)n * PACK_MIN_ENTRY_LEN > tlen - tag)
        return st_seterr(ST_ERR_CORRUPT, "pack footer: %u chunks cannot fit in %u trailer bytes", n,
                         tlen);
    *trailer_len = tlen;
    *count = n;
    return ST_OK;
}

/* Parses one trailer entry and checks it against the chunk area and the end of
 * the previous entry (*next_free), which it advances. */
static st_err trailer_get_entry(st_reader *r, uint64_t chunk_area, uint64_t *next_free,
                                size_t index, st_pack_entry *e)
{
    const uint8_t *id;
    uint64_t offset, stored_len, raw_len;
    uint8_t codec;
    st_get_bytes(r, ST_ID_LEN, &id);
    st_get_varint(r, &offset);
    st_get_varint(r, &stored_len);
    st_get_varint(r, &raw_len);
    st_get_u8(r, &codec);
    if (r->err)
        return st_seterr(ST_ERR_CORRUPT, "pack trailer: entry %zu truncated or malformed", index);
    if (codec > ST_CODEC_ZSTD_SHUF4) /* a codec of a newer release, as in st_codec_decode */
        return st_seterr(ST_ERR_UNSUPPORTED,
                         "pack trailer: entry %zu has codec %u, newer than this release knows",
                         index, codec);
    if (stored_len < ST_CODEC_HEADER_LEN || stored_len > UINT32_MAX)
        return st_seterr(ST_ERR_CORRUPT, "pack trailer: entry %zu stored length %llu invalid",
                         index, (unsigned long long)stored_len);
    if (raw_len > ST_CODEC_MAX_RAW)
        return st_seterr(ST_ERR_CORRUPT, "pack trailer: entry %zu raw length %llu too large", index,
                         (unsigned long long)raw_len);
    if (offset < *next_free)
        return st_seterr(ST_ERR_CORRUPT,
                         "pack trailer: entry %zu at %llu overlaps or precedes the previous one",
                         index, (unsigned long long)offset);
    /* offset <= chunk_area <= 2^30 here would not overflow, but check first anyway. */
    if (offset > chunk_area || stored_len > chunk_area - offset)
        return st_seterr(ST_ERR_CORRUPT, "pack trailer: entry %zu [%llu,+%llu) outside chunk area",
                         index, (unsigned long long)offset, (unsigned long long)stored_len);
    memcpy(e->id.b, id, ST_ID_LEN);
    e->offset = offset;
    e->stored_len = (uint32_t)stored_len;
    e->raw_len = (uint32_t)raw_len;
    e->codec = codec;
    *next_free = offset + stored_len;
    return ST_OK;
}

/* Checks the size of a pack and its tail and the footer (of the kind
 * `sealed` asks for) and the trailer's checksum: *trailer_len, *count. */
static st_err check_tail(const uint8_t *tail, size_t tail_len, uint64_t pack_size, int sealed,
                         uint32_t *trailer_len, uint32_t *count)
{
    int is_sealed = 0;
    if (pack_size > ST_PACK_MAX_SIZE)
        return st_seterr(ST_ERR_CORRUPT, "pack: size %llu above limit",
                         (unsigned long long)pack_size);
    if (tail_len < ST_PACK_FOOTER_LEN || tail_len > pack_size)
        return st_seterr(ST_ERR_CORRUPT, "pack: tail of %zu bytes impossible for a %llu-byte pack",
                         tail_len, (unsigned long long)pack_size);
    st_err err = st_pack_any_footer_decode(tail + tail_len - ST_PACK_FOOTER_LEN, trailer_len, count,
                                           &is_sealed);
    if (err)
        return err;
    if (is_sealed != sealed)
        return sealed
                   ? st_seterr(ST_ERR_CORRUPT, "pack footer: a plain pack where a sealed one "
                                               "(CKp2) was expected")
                   : st_seterr(ST_ERR_KEY, "pack footer: an encrypted pack (CKp2) needs the key");
    if ((uint64_t)*trailer_len + ST_PACK_FOOTER_LEN != tail_len)
        return st_seterr(ST_ERR_CORRUPT, "pack: footer says trailer is %u bytes, tail holds %zu",
                         *trailer_len, tail_len - ST_PACK_FOOTER_LEN);
    uint64_t want_sum = st_le64_get(tail + tail_len - ST_PACK_FOOTER_LEN + 8);
    if (st_hash64(tail, *trailer_len) != want_sum)
        return st_seterr(ST_ERR_CORRUPT, "pack trailer: checksum mismatch");
    return ST_OK;
}

/* Parses the plain trailer[0..trailer_len) of count entries whose chunks
 * lie in [chunk_start, chunk_end) into a malloc'd array. */
static st_err parse_trailer(const uint8_t *trailer, size_t trailer_len, uint32_t count,
                            uint64_t chunk_start, uint64_t chunk_end, st_pack_entry **entries,
                            size_t *n)
{
    if (count == 0) {
        if (trailer_len != 0)
            return st_seterr(ST_ERR_CORRUPT, "pack trailer: %zu bytes for zero chunks",
                             trailer_len);
        return ST_OK;
    }
    /* count * PACK_MIN_ENTRY_LEN <= trailer_len (footer check): bounded by input. */
    st_pack_entry *out = calloc(count, sizeof *out);
    if (!out)
        return st_seterr(ST_ERR_NOMEM, "pack trailer: out of memory for %u entries", count);
    st_err err = ST_OK;
    uint64_t next_free = chunk_start;
    st_reader r;
    st_reader_init(&r, trailer, trailer_len);
    for (size_t i = 0; i < count && !err; i++)
        err = trailer_get_entry(&r, chunk_end, &next_free, i, &out[i]);
    if (!err && st_reader_left(&r) != 0)
        err = st_seterr(ST_ERR_CORRUPT, "pack trailer: %zu bytes after the last entry",
                        st_reader_left(&r));
    if (err) {
        free(out);
        return err;
    }
    *entries = out;
    *n = count;
    return ST_OK;
}

st_err st_pack_trailer_decode(const uint8_t *tail, size_t tail_len, uint64_t pack_size,
                              st_pack_entry **entries, size_t *n)
{
    uint32_t trailer_len, count;
    *entries = NULL;
    *n = 0;
    st_err err = check_tail(tail, tail_len, pack_size, 0, &trailer_len, &count);
    if (err)
        return err;
    return parse_trailer(tail, trailer_len, count, 0, pack_size - tail_len, entries, n);
}

st_err st_pack_sealed_trailer_decode(const st_crypt_objkey *k, const char *name,
                                     const st_pack_seal *seal, const uint8_t *tail, size_t tail_len,
                                     uint64_t pack_size, st_pack_entry **entries, size_t *n)
{
    uint32_t trailer_len, count;
    *entries = NULL;
    *n = 0;
    st_err err = check_tail(tail, tail_len, pack_size, 1, &trailer_len, &count);
    if (err)
        return err;
    uint64_t chunk_end = pack_size - tail_len;
    if (chunk_end < ST_PACK_HEADER_LEN)
        return st_seterr(ST_ERR_CORRUPT, "%s: %llu bytes cannot hold a sealed pack's header", name,
                         (unsigned long long)pack_size);
    size_t plain_len = trailer_len - ST_CRYPT_TAG_LEN;
    uint8_t *plain = malloc(plain_len ? plain_len : 1);
    if (!plain)
        return st_seterr(ST_ERR_NOMEM, "pack trailer: out of memory");
    err = st_pack_open_record(k, name, seal, chunk_end, tail, trailer_len, plain);
    if (!err)
        err = parse_trailer(plain, plain_len, count, ST_PACK_HEADER_LEN, chunk_end, entries, n);
    free(plain);
    return err;
}
