/*
 * test_pack_sealed — sealed packs (CKp2, docs/ENCRYPTION.md): a round trip
 * through the writer, the sealed trailer and every record; no plaintext in
 * the pack's bytes; a changed byte, a record read at another offset, a pack
 * swapped for another sealed one and a truncated tail are ST_ERR_CORRUPT; a
 * key id the keyring does not hold and no keyring at all are ST_ERR_KEY;
 * plain decoders refuse a sealed pack and the sealed one a plain pack.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_pack.h"
#include "util/st_crypt.h"
#include "util/st_hash.h"
#include "util/st_keyring.h"
#include "util/st_wire.h"
#include "ut.h"
#include "ut_crypt.h"
#include "ut_format.h"

#define NCHUNKS 5

/* Chunk i's content: a marker string repeated to a few hundred bytes. */
static size_t chunk_content(size_t i, uint8_t *out)
{
    size_t n = 0;
    for (size_t r = 0; r < 10 * i + 1; r++)
        n += (size_t)sprintf((char *)out + n, "PLAINMARK-%zu ", i);
    return i == 2 ? 0 : n; /* one empty chunk */
}

/* Writes a finished sealed pack of NCHUNKS chunks with w (keyring set). */
static void build(st_pack_writer *w, st_id *id)
{
    uint8_t raw[4096];
    for (size_t i = 0; i < NCHUNKS; i++) {
        size_t n = chunk_content(i, raw);
        uint8_t *dst = st_pack_append_begin(w, ST_CODEC_HEADER_LEN + n);
        CHECK(dst != NULL);
        if (dst)
            CHECK_OK(st_pack_append_commit(w, ut_encode_raw_chunk(raw, n, dst), NULL));
    }
    CHECK_OK(st_pack_finish(w, id));
}

/* Decodes the sealed pack p[0..len) with kr: the error, entries in *e. */
static st_err decode(const st_keyring *kr, const uint8_t *p, size_t len, st_pack_entry **e,
                     size_t *n)
{
    st_pack_seal seal;
    st_crypt_objkey k;
    uint32_t tlen = 0, count = 0;
    int sealed = 0;
    *e = NULL;
    *n = 0;
    if (len < ST_PACK_HEADER_LEN + ST_PACK_FOOTER_LEN)
        return st_seterr(ST_ERR_CORRUPT, "short");
    st_err err = st_pack_header_decode("p.pack", p, &seal);
    if (!err)
        err = st_pack_any_footer_decode(p + len - ST_PACK_FOOTER_LEN, &tlen, &count, &sealed);
    if (!err && (size_t)tlen + ST_PACK_FOOTER_LEN > len)
        err = st_seterr(ST_ERR_CORRUPT, "trailer longer than the pack");
    if (!err)
        err = st_pack_key(kr, "p.pack", &seal, &k);
    if (err)
        return err;
    size_t tail = (size_t)tlen + ST_PACK_FOOTER_LEN;
    err = st_pack_sealed_trailer_decode(&k, "p.pack", &seal, p + len - tail, tail, len, e, n);
    st_crypt_objkey_wipe(&k);
    return err;
}

static void test_roundtrip(void)
{
    st_keyring *kr = ut_keyring_of(7);
    st_pack_writer w = {0};
    st_pack_writer_set_keyring(&w, kr);
    st_id id;
    build(&w, &id);
    st_pack_seal seal;
    CHECK(st_pack_writer_seal(&w, &seal) == 1);
    CHECK(memcmp(w.data.data, "CKp2", 4) == 0);
    CHECK(memcmp(w.data.data + w.data.len - 4, "CKp2", 4) == 0);
    CHECK(memmem(w.data.data, w.data.len, "PLAINMARK", 9) == NULL);
    st_id want = st_id_of(w.data.data, w.data.len);
    CHECK(st_id_cmp(&id, &want) == 0);

    st_pack_entry *e = NULL;
    size_t n = 0;
    CHECK_OK(decode(kr, w.data.data, w.data.len, &e, &n));
    CHECK(n == NCHUNKS);
    st_crypt_objkey k;
    CHECK_OK(st_pack_key(kr, "p.pack", &seal, &k));
    uint8_t raw[4096], enc[4096 + ST_CODEC_HEADER_LEN];
    for (size_t i = 0; i < n; i++) {
        size_t len = chunk_content(i, raw);
        CHECK(e[i].stored_len == ST_CODEC_HEADER_LEN + len + ST_CRYPT_TAG_LEN);
        CHECK(e[i].raw_len == len);
        CHECK_OK(st_pack_open_record(&k, "p.pack", &seal, e[i].offset, w.data.data + e[i].offset,
                                     e[i].stored_len, enc));
        CHECK(memcmp(enc + ST_CODEC_HEADER_LEN, raw, len) == 0);
        st_id cid = st_id_of(raw, len);
        CHECK(st_id_cmp(&e[i].id, &cid) == 0);
        /* The same record read as if it sat elsewhere fails. */
        if (i)
            CHECK_ERR(st_pack_open_record(&k, "p.pack", &seal, e[i - 1].offset,
                                          w.data.data + e[i].offset, e[i].stored_len, enc),
                      ST_ERR_CORRUPT);
    }
    free(e);

    /* Reuse: the next pack gets a new salt, so other bytes for the same chunks. */
    uint8_t *first = malloc(w.data.len);
    size_t first_len = w.data.len;
    memcpy(first, w.data.data, first_len);
    st_pack_writer_reset(&w);
    st_id id2;
    build(&w, &id2);
    st_pack_seal seal2;
    CHECK(st_pack_writer_seal(&w, &seal2) == 1);
    CHECK(memcmp(seal.salt, seal2.salt, sizeof seal.salt) != 0);
    CHECK(st_id_cmp(&id, &id2) != 0);
    /* A pack swapped for the other under the same name: its records fail
     * under the salt the manifest gave for that name. */
    CHECK_OK(decode(kr, w.data.data, w.data.len, &e, &n));
    CHECK(n == NCHUNKS);
    CHECK_ERR(st_pack_open_record(&k, "p.pack", &seal, e[0].offset, w.data.data + e[0].offset,
                                  e[0].stored_len, enc),
              ST_ERR_CORRUPT);
    free(e);
    st_crypt_objkey_wipe(&k);
    free(first);
    st_pack_writer_free(&w);
    st_keyring_free(kr);
}

static void test_tamper_and_keys(void)
{
    st_keyring *kr = ut_keyring_of(7), *other = ut_keyring_of(9);
    st_pack_writer w = {0};
    st_pack_writer_set_keyring(&w, kr);
    st_id id;
    build(&w, &id);
    size_t len = w.data.len;
    uint8_t *p = malloc(len);
    memcpy(p, w.data.data, len);
    st_pack_entry *e = NULL;
    size_t n = 0;

    /* Every byte of the sealed trailer changed: corrupt (checksum or tag). */
    uint32_t tlen = st_le32_get(p + len - ST_PACK_FOOTER_LEN);
    for (size_t i = len - ST_PACK_FOOTER_LEN - tlen; i < len - ST_PACK_FOOTER_LEN; i++) {
        p[i] ^= 0x20;
        /* recompute the plain checksum so the tag is what refuses it */
        st_le64_put(p + len - 16, st_hash64(p + len - ST_PACK_FOOTER_LEN - tlen, tlen));
        CHECK_ERR(decode(kr, p, len, &e, &n), ST_ERR_CORRUPT);
        CHECK(e == NULL && n == 0);
        p[i] ^= 0x20;
    }
    st_le64_put(p + len - 16, st_hash64(p + len - ST_PACK_FOOTER_LEN - tlen, tlen));
    /* The header's salt changed: the trailer fails under the derived key. */
    p[ST_PACK_HEADER_LEN - 1] ^= 1;
    CHECK_ERR(decode(kr, p, len, &e, &n), ST_ERR_CORRUPT);
    p[ST_PACK_HEADER_LEN - 1] ^= 1;
    /* Truncated: the tail no longer ends in a footer. */
    CHECK(decode(kr, p, len - 1, &e, &n) != ST_OK);
    CHECK_OK(decode(kr, p, len, &e, &n));
    free(e);

    /* Another key, no key. */
    CHECK_ERR(decode(other, p, len, &e, &n), ST_ERR_KEY);
    CHECK(strstr(st_errmsg(), "key id") != NULL);
    CHECK_ERR(decode(NULL, p, len, &e, &n), ST_ERR_KEY);
    CHECK(strstr(st_errmsg(), "encryption-key-file") != NULL);

    /* The plain decoders refuse a sealed pack, and the sealed decoder a plain one. */
    uint32_t count = 0;
    CHECK_ERR(st_pack_footer_decode(p + len - ST_PACK_FOOTER_LEN, &tlen, &count), ST_ERR_KEY);
    CHECK_ERR(st_pack_trailer_decode(p + len - ST_PACK_FOOTER_LEN - tlen, tlen + ST_PACK_FOOTER_LEN,
                                     len, &e, &n),
              ST_ERR_KEY);
    st_pack_writer plain = {0};
    build(&plain, &id);
    tlen = st_le32_get(plain.data.data + plain.data.len - ST_PACK_FOOTER_LEN);
    st_pack_seal seal;
    st_crypt_objkey k;
    CHECK(st_pack_writer_seal(&plain, &seal) == 0);
    CHECK(st_pack_writer_seal(&w, &seal) == 1);
    CHECK_OK(st_pack_key(kr, "p.pack", &seal, &k));
    size_t tail = (size_t)tlen + ST_PACK_FOOTER_LEN;
    CHECK_ERR(st_pack_sealed_trailer_decode(&k, "p.pack", &seal,
                                            plain.data.data + plain.data.len - tail, tail,
                                            plain.data.len, &e, &n),
              ST_ERR_CORRUPT);
    CHECK_ERR(st_pack_header_decode("p.pack", plain.data.data, &seal), ST_ERR_CORRUPT);
    st_crypt_objkey_wipe(&k);
    st_pack_writer_free(&plain);
    free(p);
    st_pack_writer_free(&w);
    st_keyring_free(kr);
    st_keyring_free(other);
}

/* A sealed pack with no chunks: header, sealed empty trailer, footer. */
static void test_empty(void)
{
    st_keyring *kr = ut_keyring_of(3);
    st_pack_writer w = {0};
    st_pack_writer_set_keyring(&w, kr);
    st_id id;
    CHECK_OK(st_pack_finish(&w, &id));
    CHECK(w.data.len == ST_PACK_HEADER_LEN + ST_CRYPT_TAG_LEN + ST_PACK_FOOTER_LEN);
    st_pack_entry *e = NULL;
    size_t n = 1;
    CHECK_OK(decode(kr, w.data.data, w.data.len, &e, &n));
    CHECK(n == 0 && e == NULL);
    st_pack_writer_free(&w);
    st_keyring_free(kr);
}

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_tamper_and_keys);
    RUN(test_empty);
    return ut_finish();
}
