/*
 * ut_crypt — helpers for the unit tests of client-side encryption.
 */
#ifndef UT_CRYPT_H
#define UT_CRYPT_H

#include <string.h>

#include "util/st_keyring.h"
#include "ut.h"

/* A keyring of one key whose 32 bytes are all `fill` (caller frees). */
static inline st_keyring *ut_keyring_of(uint8_t fill)
{
    st_keyring *kr = NULL;
    uint8_t key[ST_KEY_LEN];
    memset(key, fill, sizeof key);
    CHECK_OK(st_keyring_new(&kr));
    if (kr)
        CHECK_OK(st_keyring_add(kr, key));
    return kr;
}

#endif
