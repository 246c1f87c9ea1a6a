/*
 * st_crypt — AES-256-GCM envelopes and pack records under HKDF-SHA256
 * per-object keys. See the header; docs/ENCRYPTION.md is the protocol.
 *
 * Invariants: a per-object key is used with one nonce per message: the zero
 * nonce once (an envelope's key is derived from its own fresh salt), or a
 * record's offset, unique within a pack. Plaintext reaches the caller only
 * after its tag verified; a failure wipes the output. Threads: no shared
 * state (each call has its own cipher context).
 */
#include "util/st_crypt.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <string.h>

#include "util/st_wire.h"

#define INFO_PREFIX "ckptfs v1 "
#define NONCE_LEN   12
#define GCM_STEP    (1 << 30) /* bytes per EVP update: its lengths are ints */

st_err st_hkdf_sha256(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
                      const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
    if (out_len == 0 || out_len > 255 * 32)
        return st_seterr(ST_ERR_INVALID, "HKDF-SHA256: %zu bytes asked, 1 to 8160 possible",
                         out_len);
    EVP_PKEY_CTX *pctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t got = out_len;
    int ok = pctx && EVP_PKEY_derive_init(pctx) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(pctx, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(pctx, ikm, (int)ikm_len) > 0 &&
             (salt_len == 0 || EVP_PKEY_CTX_set1_hkdf_salt(pctx, salt, (int)salt_len) > 0) &&
             (info_len == 0 || EVP_PKEY_CTX_add1_hkdf_info(pctx, info, (int)info_len) > 0) &&
             EVP_PKEY_derive(pctx, out, &got) > 0 && got == out_len;
    EVP_PKEY_CTX_free(pctx);
    if (!ok) {
        OPENSSL_cleanse(out, out_len);
        return st_seterr(ST_ERR_NOMEM, "HKDF-SHA256 failed");
    }
    return ST_OK;
}

st_err st_crypt_derive(const st_key *key, const uint8_t salt[ST_CRYPT_SALT_LEN], st_crypt_kind kind,
                       st_crypt_objkey *out)
{
    uint8_t info[sizeof INFO_PREFIX - 1 + 2];
    memcpy(info, INFO_PREFIX, sizeof INFO_PREFIX - 1);
    st_le16_put(info + sizeof INFO_PREFIX - 1, (uint16_t)kind);
    return st_hkdf_sha256(key->bytes, ST_KEY_LEN, salt, ST_CRYPT_SALT_LEN, info, sizeof info,
                          out->bytes, ST_KEY_LEN);
}

void st_crypt_objkey_wipe(st_crypt_objkey *k)
{
    if (k)
        OPENSSL_cleanse(k, sizeof *k);
}

size_t st_crypt_object_bound(size_t plain_len)
{
    return plain_len + ST_CRYPT_OVERHEAD;
}

/* The additional data of a message: two byte strings, authenticated in order. */
typedef struct aad {
    const uint8_t *a;
    size_t a_len;
    const uint8_t *b;
    size_t b_len;
} aad;

/*
 * One AES-256-GCM message under k: encrypt (seal 1: in -> out, tag written)
 * or decrypt (seal 0: in -> out, tag checked). Returns 1 when done (and, to
 * decrypt, the tag verified), 0 otherwise; out is then the caller's to wipe.
 */
static int gcm(int seal, const st_crypt_objkey *k, const uint8_t nonce[NONCE_LEN], const aad *ad,
               const uint8_t *in, size_t len, uint8_t *out, uint8_t tag[ST_CRYPT_TAG_LEN])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n = 0;
    int ok = ctx && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, seal) == 1 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
             EVP_CipherInit_ex(ctx, NULL, NULL, k->bytes, nonce, seal) == 1;
    const uint8_t *parts[2] = {ad->a, ad->b};
    size_t part_lens[2] = {ad->a_len, ad->b_len};
    for (int i = 0; ok && i < 2; i++)
        for (size_t off = 0; ok && off < part_lens[i]; off += GCM_STEP) {
            size_t step = part_lens[i] - off < GCM_STEP ? part_lens[i] - off : GCM_STEP;
            ok = EVP_CipherUpdate(ctx, NULL, &n, parts[i] + off, (int)step) == 1;
        }
    for (size_t off = 0; ok && off < len; off += GCM_STEP) {
        size_t step = len - off < GCM_STEP ? len - off : GCM_STEP;
        ok = EVP_CipherUpdate(ctx, out + off, &n, in + off, (int)step) == 1 && (size_t)n == step;
    }
    if (ok && !seal)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, ST_CRYPT_TAG_LEN, tag) == 1;
    ok = ok && EVP_CipherFinal_ex(ctx, out + len, &n) == 1 && n == 0;
    if (ok && seal)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, ST_CRYPT_TAG_LEN, tag) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

static int is_envelope_kind(st_crypt_kind kind)
{
    return kind == ST_CRYPT_MANIFEST || kind == ST_CRYPT_PART || kind == ST_CRYPT_REPLICA;
}

st_err st_crypt_seal_object(const st_keyring *kr, st_crypt_kind kind, const char *name,
                            const uint8_t *plain, size_t len, uint8_t *out, size_t cap,
                            size_t *out_len)
{
    const st_key *key = st_keyring_sealing(kr);
    const uint8_t zero_nonce[NONCE_LEN] = {0};
    st_crypt_objkey k;
    *out_len = 0;
    if (!key)
        return st_seterr(ST_ERR_KEY, "%s: no key to seal it with", name);
    if (!is_envelope_kind(kind))
        return st_seterr(ST_ERR_INVALID, "%s: kind %d is not sealed as an envelope", name,
                         (int)kind);
    if (len > SIZE_MAX - ST_CRYPT_OVERHEAD || cap < st_crypt_object_bound(len))
        return st_seterr(ST_ERR_INVALID, "%s: %zu bytes do not fit a %zu-byte envelope buffer",
                         name, len, cap);
    uint8_t *salt = out + 16;
    memcpy(out, ST_CRYPT_MAGIC, 4);
    st_le16_put(out + 4, ST_CRYPT_VERSION);
    st_le16_put(out + 6, (uint16_t)kind);
    memcpy(out + 8, key->id, ST_KEY_ID_LEN);
    if (RAND_bytes(salt, ST_CRYPT_SALT_LEN) != 1)
        return st_seterr(ST_ERR_NOMEM, "%s: the random generator failed", name);
    st_err e = st_crypt_derive(key, salt, kind, &k);
    aad ad = {out, ST_CRYPT_HEADER_LEN, (const uint8_t *)name, strlen(name)};
    uint8_t *body = out + ST_CRYPT_HEADER_LEN;
    if (!e && !gcm(1, &k, zero_nonce, &ad, plain, len, body, body + len))
        e = st_seterr(ST_ERR_NOMEM, "%s: AES-256-GCM seal failed", name);
    st_crypt_objkey_wipe(&k);
    if (e) {
        OPENSSL_cleanse(out, st_crypt_object_bound(len));
        return e;
    }
    *out_len = st_crypt_object_bound(len);
    return ST_OK;
}

/* Checks the envelope's fixed fields: ST_OK, or ST_ERR_CORRUPT naming it. */
static st_err check_envelope(st_crypt_kind kind, const char *name, const uint8_t *in, size_t len)
{
    if (len < ST_CRYPT_OVERHEAD)
        return st_seterr(ST_ERR_CORRUPT,
                         "%s: %zu bytes, shorter than an encryption envelope (%d): truncated", name,
                         len, ST_CRYPT_OVERHEAD);
    if (memcmp(in, ST_CRYPT_MAGIC, 4) != 0)
        return st_seterr(ST_ERR_CORRUPT, "%s: not an encrypted object (no %s magic)", name,
                         ST_CRYPT_MAGIC);
    if (st_le16_get(in + 4) != ST_CRYPT_VERSION)
        return st_seterr(ST_ERR_CORRUPT, "%s: envelope version %u, this ckptfs reads %d", name,
                         (unsigned)st_le16_get(in + 4), ST_CRYPT_VERSION);
    if (st_le16_get(in + 6) != (uint16_t)kind)
        return st_seterr(ST_ERR_CORRUPT, "%s: sealed as object kind %u, expected kind %d", name,
                         (unsigned)st_le16_get(in + 6), (int)kind);
    return ST_OK;
}

st_err st_crypt_open_object(const st_keyring *kr, st_crypt_kind kind, const char *name,
                            const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                            size_t *out_len)
{
    const uint8_t zero_nonce[NONCE_LEN] = {0};
    uint8_t tag[ST_CRYPT_TAG_LEN];
    st_crypt_objkey k;
    *out_len = 0;
    st_err e = check_envelope(kind, name, in, len);
    if (e)
        return e;
    size_t plain_len = len - ST_CRYPT_OVERHEAD;
    if (cap < plain_len)
        return st_seterr(ST_ERR_INVALID, "%s: %zu plaintext bytes do not fit a %zu-byte buffer",
                         name, plain_len, cap);
    const st_key *key = st_keyring_find(kr, in + 8);
    if (!key) {
        char hex[2 * ST_KEY_ID_LEN + 1];
        st_key_id_hex(in + 8, hex);
        return st_seterr(ST_ERR_KEY, "%s: sealed with key id %s, which the key file does not hold",
                         name, hex);
    }
    e = st_crypt_derive(key, in + 16, kind, &k);
    memcpy(tag, in + len - ST_CRYPT_TAG_LEN, ST_CRYPT_TAG_LEN);
    aad ad = {in, ST_CRYPT_HEADER_LEN, (const uint8_t *)name, strlen(name)};
    if (!e && !gcm(0, &k, zero_nonce, &ad, in + ST_CRYPT_HEADER_LEN, plain_len, out, tag))
        e = st_seterr(ST_ERR_CORRUPT,
                      "%s: failed authentication: changed, truncated or stored under another "
                      "name",
                      name);
    st_crypt_objkey_wipe(&k);
    if (e) {
        OPENSSL_cleanse(out, plain_len);
        return e;
    }
    *out_len = plain_len;
    return ST_OK;
}

/* A record's nonce (LE u64 offset ‖ 4 zero bytes) and its offset as additional data. */
static void record_nonce(uint64_t offset, uint8_t nonce[NONCE_LEN], uint8_t off_le[8])
{
    memset(nonce, 0, NONCE_LEN);
    st_le64_put(nonce, offset);
    st_le64_put(off_le, offset);
}

st_err st_crypt_seal_record(const st_crypt_objkey *k, const uint8_t *header, size_t header_len,
                            uint64_t offset, const uint8_t *plain, size_t len, uint8_t *out)
{
    uint8_t nonce[NONCE_LEN], off_le[8];
    record_nonce(offset, nonce, off_le);
    aad ad = {header, header_len, off_le, sizeof off_le};
    if (!gcm(1, k, nonce, &ad, plain, len, out, out + len)) {
        OPENSSL_cleanse(out, len + ST_CRYPT_TAG_LEN);
        return st_seterr(ST_ERR_NOMEM, "AES-256-GCM seal of a record at offset %llu failed",
                         (unsigned long long)offset);
    }
    return ST_OK;
}

st_err st_crypt_open_record(const st_crypt_objkey *k, const char *name, const uint8_t *header,
                            size_t header_len, uint64_t offset, const uint8_t *in, size_t len,
                            uint8_t *out)
{
    uint8_t nonce[NONCE_LEN], off_le[8], tag[ST_CRYPT_TAG_LEN];
    if (len < ST_CRYPT_TAG_LEN)
        return st_seterr(ST_ERR_CORRUPT,
                         "%s: the record at offset %llu has %zu bytes, fewer "
                         "than its tag: truncated",
                         name, (unsigned long long)offset, len);
    size_t plain_len = len - ST_CRYPT_TAG_LEN;
    record_nonce(offset, nonce, off_le);
    memcpy(tag, in + plain_len, ST_CRYPT_TAG_LEN);
    aad ad = {header, header_len, off_le, sizeof off_le};
    if (!gcm(0, k, nonce, &ad, in, plain_len, out, tag)) {
        OPENSSL_cleanse(out, plain_len);
        return st_seterr(ST_ERR_CORRUPT,
                         "%s: the record at offset %llu failed authentication: changed, moved "
                         "or from another pack",
                         name, (unsigned long long)offset);
    }
    return ST_OK;
}
