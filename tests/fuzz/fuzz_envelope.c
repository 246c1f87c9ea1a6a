/*
 * fuzz_envelope — libFuzzer target for the openers of client-side
 * encryption (util/st_crypt.h): st_crypt_open_object(), which every
 * encrypted manifest, part record and replica record read from the store
 * goes through, and st_crypt_open_record() for a pack's chunk records.
 *
 * Input: one mode byte, then the payload (fuzz_run_mode). The keyring holds
 * the reference key 00 01 .. 1f of tests/unit/test_crypt.c and one more,
 * so the seeds (made with the reference key) reach the tag check.
 *   bit 0: open the payload as a manifest envelope named FUZZ_NAME;
 *   bit 1: seal the payload, open it again (the same bytes back), then
 *          flip one bit of the envelope, picked by the payload, and open
 *          it (must fail);
 *   else:  open the payload as the pack record at offset 4096 of a pack
 *          whose key is the reference key's under salt 40 41 .. 4f.
 *
 * Properties checked (abort on violation): an opener returns OK, CORRUPT or
 * KEY (records: OK or CORRUPT) and nothing else; an accepted envelope gives
 * exactly len - ST_CRYPT_OVERHEAD bytes; a failed open leaves the output
 * all zero, so nothing unauthenticated ever reaches a caller.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "util/st_crypt.h"
#include "util/st_keyring.h"

#define FUZZ_NAME   "jobs/j/steps/00000000000000000007/nodes/n.r1.manifest"
#define PACK_HEADER "CKp2 header"
#define PACK_OFFSET 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static st_keyring *keyring;
static st_crypt_objkey pack_key;

/* The keyring and the pack key, made once (libFuzzer runs one input at a time). */
static void setup(void)
{
    uint8_t key[ST_KEY_LEN], salt[ST_CRYPT_SALT_LEN];
    if (keyring)
        return;
    for (int i = 0; i < ST_KEY_LEN; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < ST_CRYPT_SALT_LEN; i++)
        salt[i] = (uint8_t)(0x40 + i);
    if (st_keyring_new(&keyring) || st_keyring_add(keyring, key) ||
        st_crypt_derive(st_keyring_sealing(keyring), salt, ST_CRYPT_PACK, &pack_key))
        abort();
    memset(key, 0x5a, sizeof key);
    if (st_keyring_add(keyring, key))
        abort();
}

static void open_envelope(const uint8_t *in, size_t len)
{
    uint8_t *out = calloc(1, len + 1);
    size_t n = 0;
    if (!out)
        return;
    st_err e = st_crypt_open_object(keyring, ST_CRYPT_MANIFEST, FUZZ_NAME, in, len, out, len, &n);
    if (e == ST_OK && n != len - ST_CRYPT_OVERHEAD)
        abort();
    if (e != ST_OK && (e != ST_ERR_CORRUPT && e != ST_ERR_KEY))
        abort();
    if (e != ST_OK && (n != 0 || !fuzz_all_zero(out, len)))
        abort();
    free(out);
}

static void seal_flip_open(const uint8_t *in, size_t len)
{
    size_t cap = st_crypt_object_bound(len), n = 0, m = 0;
    uint8_t *env = malloc(cap), *out = malloc(len + 1);
    if (!env || !out)
        goto out;
    st_crypt_kind kind = len ? (st_crypt_kind)(1 + in[0] % 3) : ST_CRYPT_PART;
    if (st_crypt_seal_object(keyring, kind, FUZZ_NAME, in, len, env, cap, &n) != ST_OK || n != cap)
        abort();
    if (st_crypt_open_object(keyring, kind, FUZZ_NAME, env, n, out, len, &m) != ST_OK || m != len ||
        (len && memcmp(out, in, len)))
        abort();
    size_t bit = (len ? in[len - 1] * 131u + len : 0) % (8 * n);
    env[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    st_err e = st_crypt_open_object(keyring, kind, FUZZ_NAME, env, n, out, len, &m);
    if (e != ST_ERR_CORRUPT && e != ST_ERR_KEY)
        abort();
out:
    free(env);
    free(out);
}

static void open_record(const uint8_t *in, size_t len)
{
    uint8_t *out = calloc(1, len + 1);
    if (!out)
        return;
    st_err e = st_crypt_open_record(&pack_key, "p.pack", (const uint8_t *)PACK_HEADER,
                                    sizeof PACK_HEADER - 1, PACK_OFFSET, in, len, out);
    if (e != ST_OK && (e != ST_ERR_CORRUPT || !fuzz_all_zero(out, len)))
        abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fuzz_mode_fn modes[] = {open_envelope, seal_flip_open, open_record};
    setup();
    return fuzz_run_mode(data, size, modes, 3);
}
