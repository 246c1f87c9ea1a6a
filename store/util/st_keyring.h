/*
 * st_keyring — the client-side encryption keys (docs/ENCRYPTION.md, "Cipher
 * and keys"): the key file, the keyring it holds, and key ids.
 *
 * A key file is one or more lines "ckptfs-key v1 <base64 of 32 bytes>\n".
 * Every line is a key that opens objects; the last one also seals new ones.
 * The file must be a regular file (not a symlink) owned by the process's
 * user, mode 0600 or stricter. A key's id is the first 8 bytes of
 * HMAC-SHA256(key, "ckptfs key id v1"): what a sealed object carries to say
 * which key opens it, and nothing about the key.
 *
 * Key bytes never appear in a message, and live only in the keyring's own
 * page-aligned memory: locked with mlock where the limits allow, left out of
 * core dumps, wiped with OPENSSL_cleanse when freed. A loaded keyring is
 * read-only, so any number of threads may use it at once.
 */
#ifndef ST_KEYRING_H
#define ST_KEYRING_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define ST_KEY_LEN     32 /* AES-256 */
#define ST_KEY_ID_LEN  8
#define ST_KEYRING_MAX 64 /* lines of a key file */

/* A key line's fixed start, and its whole length with the newline. */
#define ST_KEY_LINE_PREFIX "ckptfs-key v1 "
#define ST_KEY_LINE_LEN    (sizeof ST_KEY_LINE_PREFIX - 1 + 44 + 1)

typedef struct st_key {
    uint8_t bytes[ST_KEY_LEN];
    uint8_t id[ST_KEY_ID_LEN];
} st_key;

typedef struct st_keyring st_keyring;

/*!
 * The key id of key: the first ST_KEY_ID_LEN bytes of
 * HMAC-SHA256(key, "ckptfs key id v1"). ST_OK, or ST_ERR_NOMEM when
 * libcrypto fails.
 */
st_err st_key_id(const uint8_t key[ST_KEY_LEN], uint8_t id[ST_KEY_ID_LEN]);

/*! Writes the 16 lowercase hex digits of id and a NUL into hex. */
void st_key_id_hex(const uint8_t id[ST_KEY_ID_LEN], char hex[2 * ST_KEY_ID_LEN + 1]);

/*! A new empty keyring in *out (caller frees with st_keyring_free).
 *  ST_OK or ST_ERR_NOMEM. */
st_err st_keyring_new(st_keyring **out);

/*!
 * Appends key as the keyring's newest line: the one that seals from now on.
 * ST_OK; ST_ERR_KEY when the keyring holds ST_KEYRING_MAX keys already or
 * holds this key already; ST_ERR_NOMEM.
 */
st_err st_keyring_add(st_keyring *kr, const uint8_t key[ST_KEY_LEN]);

/*!
 * Loads the key file at path into a new keyring (*out; caller frees). Every
 * refusal is ST_ERR_KEY with a message that names the file and what is
 * wrong (a symlink, not a regular file, another owner, a mode that lets
 * others read it, an empty file, line N malformed, a repeated key, too many
 * lines) and never quotes the file's content. ST_ERR_NOMEM.
 */
st_err st_keyring_load(const char *path, st_keyring **out);

/*! The number of keys, 0 for NULL. */
size_t st_keyring_count(const st_keyring *kr);

/*! The sealing key (the last line), or NULL for an empty keyring. Valid
 *  until st_keyring_free. */
const st_key *st_keyring_sealing(const st_keyring *kr);

/*! The key whose id is id, or NULL when the keyring holds none. Valid until
 *  st_keyring_free. */
const st_key *st_keyring_find(const st_keyring *kr, const uint8_t id[ST_KEY_ID_LEN]);

/*! 1 when the keyring's memory is locked (mlock), 0 when the limits refused. */
int st_keyring_locked(const st_keyring *kr);

/*! Wipes the keys and frees the keyring. NULL ok. */
void st_keyring_free(st_keyring *kr);

/*!
 * Writes a new key file at path holding one new random key (create), or
 * adds a new random key as the last line of the existing key file at path
 * (append: the new key seals, every older line still opens; the file is
 * loaded, and so checked, first). Either way the new content goes to a
 * temporary file (mode 0600) next to path, is fsynced and then linked to
 * path (create: never over an existing file) or renamed over it (append),
 * and the directory is fsynced. id: the new key's id; nkeys: the lines the
 * file now holds (either may be NULL).
 * ST_OK; ST_ERR_EXISTS (create: path exists); ST_ERR_KEY (append: the file
 * is refused, or full); ST_ERR_IO, ST_ERR_NOSPACE, ST_ERR_NOMEM.
 */
st_err st_key_file_write(const char *path, int append, uint8_t id[ST_KEY_ID_LEN], size_t *nkeys);

#endif
