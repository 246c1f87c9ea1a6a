/*
 * st_peer_seal — the envelope (docs/ENCRYPTION.md, "What is sealed") on
 * the peer link: a writer with a keyring hands its peers the manifest and
 * the replica record sealed as the store gets them (same kind, the same
 * object name in the additional data), and a peer with the keyring opens
 * them to check what it holds (docs/PEERS.md, "Encrypted stores"). Without
 * a keyring on both ends, the bytes pass in plain as before.
 *
 * Threads: none of its own; any thread, the keyring read only.
 */
#ifndef ST_PEER_SEAL_H
#define ST_PEER_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_crypt.h"
#include "util/st_keyring.h"
#include "util/st_wire.h"

/*! 1 if b[0..len) starts as an envelope (the magic CKe1), else 0. */
int st_peer_is_sealed(const uint8_t *b, size_t len);

/*!
 * Seals plain[0..len) as the object `name` of `kind` under kr's sealing
 * key into *out (replacing its content; the caller frees it); with kr NULL
 * copies it. ST_OK; ST_ERR_KEY, ST_ERR_NOMEM as st_crypt_seal_object.
 */
st_err st_peer_seal(const st_keyring *kr, st_crypt_kind kind, const char *name,
                    const uint8_t *plain, size_t len, st_bytes *out);

/*!
 * The plaintext of in[0..len), the object `name` of `kind`, into *out
 * (replacing its content; the caller frees it): an envelope is opened with
 * kr, plain bytes are copied. ST_OK; ST_ERR_KEY for an envelope and kr
 * NULL ("this peer holds no encryption key") or a key id kr lacks;
 * ST_ERR_CORRUPT for a failed tag; ST_ERR_NOMEM.
 */
st_err st_peer_open(const st_keyring *kr, st_crypt_kind kind, const char *name, const uint8_t *in,
                    size_t len, st_bytes *out);

#endif
