/*
 * st_crypt — client-side encryption of store objects (docs/ENCRYPTION.md):
 * AES-256-GCM under a per-object key, HKDF-SHA256(keyring key, the
 * object's random 16-byte salt, "ckptfs v1 " ‖ LE u16 kind).
 *
 * Two shapes. An object read whole (manifest, part record, replica record)
 * is sealed into an envelope:
 *
 *   "CKe1" | LE u16 version 1 | LE u16 kind | key id (8) | salt (16)
 *   | ciphertext | tag (16)
 *
 * with the nonce 12 zero bytes and the additional data the envelope's first
 * ST_CRYPT_HEADER_LEN bytes ‖ the object's name, so an envelope copied to
 * another name fails. A pack, read a chunk at a time, gets one per-object
 * key (st_crypt_derive, kind ST_CRYPT_PACK) and each record is sealed alone:
 * nonce = LE u64 offset of the record in the pack ‖ 4 zero bytes, additional
 * data = the pack header's bytes ‖ LE u64 offset.
 *
 * Pure: no I/O, caller-owned buffers (st_crypt_object_bound); a seal draws
 * the salt from libcrypto's RAND_bytes. Opening never leaves plaintext in
 * the output on failure: a failed open wipes what it wrote. Any number of
 * threads may seal and open at once under one keyring.
 */
#ifndef ST_CRYPT_H
#define ST_CRYPT_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_keyring.h"

#define ST_CRYPT_MAGIC      "CKe1"
#define ST_CRYPT_VERSION    1
#define ST_CRYPT_SALT_LEN   16
#define ST_CRYPT_TAG_LEN    16
#define ST_CRYPT_HEADER_LEN (4 + 2 + 2 + ST_KEY_ID_LEN + ST_CRYPT_SALT_LEN) /* 32 */
#define ST_CRYPT_OVERHEAD   (ST_CRYPT_HEADER_LEN + ST_CRYPT_TAG_LEN)        /* 48 */

/* What an object is: the envelope's kind field and the HKDF info's. */
typedef enum st_crypt_kind {
    ST_CRYPT_MANIFEST = 1,
    ST_CRYPT_PART = 2,
    ST_CRYPT_REPLICA = 3,
    ST_CRYPT_PACK = 4, /* per-record sealing only, never an envelope */
} st_crypt_kind;

/* One object's key: wipe it with st_crypt_objkey_wipe once done. */
typedef struct st_crypt_objkey {
    uint8_t bytes[ST_KEY_LEN];
} st_crypt_objkey;

/*!
 * HKDF-SHA256 (RFC 5869), extract and expand: out_len (1..8160) bytes of
 * output keying material from ikm, salt and info (salt and info may be
 * empty). ST_OK, or ST_ERR_INVALID (out_len out of range), ST_ERR_NOMEM.
 */
st_err st_hkdf_sha256(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
                      const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len);

/*!
 * The per-object key of an object of `kind` sealed with key under salt:
 * HKDF-SHA256(key, salt, "ckptfs v1 " ‖ LE u16 kind). ST_OK or ST_ERR_NOMEM.
 */
st_err st_crypt_derive(const st_key *key, const uint8_t salt[ST_CRYPT_SALT_LEN], st_crypt_kind kind,
                       st_crypt_objkey *out);

/*! Overwrites the key's bytes (OPENSSL_cleanse). NULL ok. */
void st_crypt_objkey_wipe(st_crypt_objkey *k);

/*! The envelope size of plain_len bytes: plain_len + ST_CRYPT_OVERHEAD. */
size_t st_crypt_object_bound(size_t plain_len);

/*!
 * Seals plain[0..len) as an object of `kind` named `name` under the
 * keyring's sealing key with a fresh random salt, into out[0..cap);
 * *out_len = st_crypt_object_bound(len). ST_OK; ST_ERR_KEY (empty
 * keyring), ST_ERR_INVALID (cap too small, kind not an envelope kind),
 * ST_ERR_NOMEM.
 */
st_err st_crypt_seal_object(const st_keyring *kr, st_crypt_kind kind, const char *name,
                            const uint8_t *plain, size_t len, uint8_t *out, size_t cap,
                            size_t *out_len);

/*!
 * Opens the envelope in[0..len) of an object of `kind` named `name` into
 * out[0..cap) (cap >= len - ST_CRYPT_OVERHEAD); *out_len is the plaintext's
 * length. ST_OK; ST_ERR_KEY when the envelope names a key id the keyring
 * does not hold ("NAME: sealed with key id 3f2a..., which the key file does
 * not hold"); ST_ERR_CORRUPT naming the object when it is shorter than an
 * envelope, its magic, version or kind is not the one expected, or its tag
 * fails (a changed byte anywhere, another name); ST_ERR_INVALID (cap too
 * small); ST_ERR_NOMEM. On failure out holds nothing of the plaintext.
 */
st_err st_crypt_open_object(const st_keyring *kr, st_crypt_kind kind, const char *name,
                            const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                            size_t *out_len);

/*!
 * Seals one pack record, plain[0..len), at `offset` in a pack whose key is
 * k and whose header is header[0..header_len), into out[0..len +
 * ST_CRYPT_TAG_LEN): the ciphertext, then the tag. ST_OK or ST_ERR_NOMEM.
 */
st_err st_crypt_seal_record(const st_crypt_objkey *k, const uint8_t *header, size_t header_len,
                            uint64_t offset, const uint8_t *plain, size_t len, uint8_t *out);

/*!
 * Opens the record in[0..len) (ciphertext, then tag) read at `offset` of
 * the pack `name` (for messages) into out[0..len - ST_CRYPT_TAG_LEN).
 * ST_OK; ST_ERR_CORRUPT naming the pack and the offset when the record is
 * shorter than a tag or its tag fails (out then wiped); ST_ERR_NOMEM.
 */
st_err st_crypt_open_record(const st_crypt_objkey *k, const char *name, const uint8_t *header,
                            size_t header_len, uint64_t offset, const uint8_t *in, size_t len,
                            uint8_t *out);

#endif
