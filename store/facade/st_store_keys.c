/*
 * st_store_keys — the facade's key file operation (ckptstore.h): thin over
 * util/st_keyring, so that ckptctl keygen needs no store internals.
 * Threads: the caller's.
 */
#include "ckptstore.h"
#include "util/st_keyring.h"

_Static_assert(ST_KEY_ID_HEX_LEN == 2 * ST_KEY_ID_LEN + 1, "a key id's hex and its NUL");

st_err st_store_keygen(const char *path, int append, char key_id[ST_KEY_ID_HEX_LEN], size_t *nkeys)
{
    uint8_t id[ST_KEY_ID_LEN];
    st_err e = st_key_file_write(path, append, id, nkeys);
    if (!e)
        st_key_id_hex(id, key_id);
    return e;
}
