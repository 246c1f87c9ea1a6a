/*
 * st_peer_seal — manifests and replica records sealed for the peer link.
 * See the header. The bytes are the store's envelope (st_crypt), so a
 * peer's disk holds what the bucket holds: no name, no manifest field.
 */
#include "peer/st_peer_seal.h"

#include <string.h>

int st_peer_is_sealed(const uint8_t *b, size_t len)
{
    return len >= 4 && !memcmp(b, ST_CRYPT_MAGIC, 4);
}

st_err st_peer_seal(const st_keyring *kr, st_crypt_kind kind, const char *name,
                    const uint8_t *plain, size_t len, st_bytes *out)
{
    out->len = 0;
    if (!kr)
        return st_bytes_append(out, plain, len);
    size_t cap = st_crypt_object_bound(len);
    st_err e = st_bytes_reserve(out, cap);
    if (!e)
        e = st_crypt_seal_object(kr, kind, name, plain, len, out->data, cap, &out->len);
    return e;
}

st_err st_peer_open(const st_keyring *kr, st_crypt_kind kind, const char *name, const uint8_t *in,
                    size_t len, st_bytes *out)
{
    out->len = 0;
    if (!st_peer_is_sealed(in, len))
        return st_bytes_append(out, in, len);
    if (!kr)
        return st_seterr(ST_ERR_KEY,
                         "%s is sealed and this peer holds no encryption key "
                         "(--encryption-key-file)",
                         name);
    st_err e = st_bytes_reserve(out, len);
    if (!e)
        e = st_crypt_open_object(kr, kind, name, in, len, out->data, len, &out->len);
    return e;
}
