/*
 * test_envelope — the encryption wrapper over an in-memory store
 * (docs/ENCRYPTION.md): manifests, part records and replica records are
 * sealed on PUT (what the store holds is an envelope, not the plaintext)
 * and opened on GET (whole, ranged, streamed), sizes are the plaintext's;
 * other keys pass through; a changed byte, a truncated object and an object
 * copied to another name are ST_ERR_CORRUPT, another keyring ST_ERR_KEY; the
 * marker is written before the first sealed object and the mixing rule
 * refuses a key against a plain store with steps and no key against a
 * marked store. A create (put_new) is sealed as a put is and stays a
 * create; over a store without creates the envelope has none either.
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend.h"
#include "engine/st_envelope.h"
#include "st_backend_mem.h"
#include "util/st_crypt.h"
#include "util/st_keyring.h"
#include "ut.h"
#include "ut_crypt.h"

#define MANIFEST_KEY "jobs/j/steps/00000000000000000001/nodes/n.r1.manifest"
#define PART_KEY     "jobs/j/steps/00000000000000000001/nodes/n.commit"
#define PART_KEY2    "jobs/j/steps/00000000000000000002/nodes/n.commit"
#define REPLICA_KEY  "jobs/j/steps/00000000000000000001/replicas/n.r1"
#define PACK_KEY     "jobs/j/packs/ab/abababababababababababababababab.pack"

static const char plain[] = "the plaintext of a manifest: SECRET-FIELD";

static int holds(st_backend *b, const char *key, const char *needle)
{
    st_bytes got = {0};
    int found = st_get(b, key, 0, ST_GET_TO_END, &got) == ST_OK &&
                memmem(got.data, got.len, needle, strlen(needle)) != NULL;
    st_bytes_free(&got);
    return found;
}

static st_err collect(void *arg, uint64_t at, const uint8_t *data, size_t len)
{
    st_bytes *b = arg;
    CHECK(at == b->len);
    return st_bytes_append(b, data, len);
}

static void test_seal_and_open(void)
{
    st_keyring *kr = ut_keyring_of(1), *other = ut_keyring_of(2);
    st_backend *mem = NULL, *raw = NULL, *sealed = NULL, *wrong = NULL;
    CHECK_OK(st_backend_mem_open(&mem));
    CHECK_OK(st_backend_mem_share(mem, &raw));
    CHECK_OK(st_envelope_check(mem, kr, "mem://"));
    sealed = mem;
    CHECK_OK(st_envelope_wrap(&sealed, kr));
    CHECK_OK(st_envelope_borrow(raw, other, &wrong));

    const char *keys[] = {MANIFEST_KEY, PART_KEY, REPLICA_KEY};
    uint64_t size = 0;
    st_bytes got = {0};
    CHECK_ERR(st_stat(raw, ST_ENVELOPE_MARKER_KEY, &size), ST_ERR_NOT_FOUND);
    for (size_t i = 0; i < 3; i++) {
        CHECK_OK(st_put(sealed, keys[i], plain, sizeof plain));
        CHECK(!holds(raw, keys[i], "SECRET"));
        CHECK(holds(raw, keys[i], ST_CRYPT_MAGIC));
        CHECK_OK(st_get(sealed, keys[i], 0, ST_GET_TO_END, &got));
        CHECK(got.len == sizeof plain && !memcmp(got.data, plain, sizeof plain));
        CHECK_OK(st_get(sealed, keys[i], 4, 3, &got)); /* ranged: of the plaintext */
        CHECK(got.len == 3 && !memcmp(got.data, plain + 4, 3));
        CHECK_OK(st_stat(sealed, keys[i], &size));
        CHECK(size == sizeof plain);
        CHECK_OK(st_stat(raw, keys[i], &size));
        CHECK(size == sizeof plain + ST_CRYPT_OVERHEAD);
        CHECK_ERR(st_get(wrong, keys[i], 0, ST_GET_TO_END, &got), ST_ERR_KEY);
        CHECK(strstr(st_errmsg(), "which the key file does not hold") != NULL);
    }
    st_bytes streamed = {0};
    st_get_sink sink = {collect, &streamed};
    CHECK_OK(st_get_stream(sealed, MANIFEST_KEY, 0, ST_GET_TO_END, &sink));
    CHECK(streamed.len == sizeof plain && !memcmp(streamed.data, plain, sizeof plain));
    st_bytes_free(&streamed);
    /* The marker went first, in plain. */
    CHECK(holds(raw, ST_ENVELOPE_MARKER_KEY, "ckptfs-encryption v1 aes-256-gcm"));

    /* Packs pass through (their writer seals them). */
    CHECK_OK(st_put(sealed, PACK_KEY, plain, sizeof plain));
    CHECK(holds(raw, PACK_KEY, "SECRET"));

    /* Tampering: a changed byte, a truncation, another name. */
    st_bytes env = {0};
    CHECK_OK(st_get(raw, PART_KEY, 0, ST_GET_TO_END, &env));
    for (size_t at = 0; at < env.len; at += 7) {
        env.data[at] ^= 0x01;
        CHECK_OK(st_put(raw, PART_KEY, env.data, env.len));
        st_err e = st_get(sealed, PART_KEY, 0, ST_GET_TO_END, &got);
        /* A flipped key id names a key the ring does not hold. */
        CHECK(e == ST_ERR_CORRUPT || (e == ST_ERR_KEY && at >= 8 && at < 16));
        env.data[at] ^= 0x01;
    }
    CHECK_OK(st_put(raw, PART_KEY, env.data, env.len - 1));
    CHECK_ERR(st_get(sealed, PART_KEY, 0, ST_GET_TO_END, &got), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), PART_KEY) != NULL);
    CHECK_OK(st_put(raw, PART_KEY2, env.data, env.len)); /* replayed under step 2 */
    CHECK_ERR(st_get(sealed, PART_KEY2, 0, ST_GET_TO_END, &got), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), PART_KEY2) != NULL);
    CHECK_OK(st_put(raw, PART_KEY, env.data, env.len));
    CHECK_OK(st_get(sealed, PART_KEY, 0, ST_GET_TO_END, &got));

    /* The mixing rule on the now marked store. */
    CHECK_OK(st_envelope_check(raw, kr, "mem://"));
    CHECK_ERR(st_envelope_check(raw, NULL, "mem://"), ST_ERR_KEY);
    CHECK(strstr(st_errmsg(), "is encrypted: give --encryption-key-file") != NULL);

    st_bytes_free(&env);
    st_bytes_free(&got);
    st_backend_close(wrong);
    st_backend_close(sealed);
    st_backend_close(raw);
    st_keyring_free(kr);
    st_keyring_free(other);
}

static void test_create_is_sealed_and_conditional(void)
{
    st_keyring *kr = ut_keyring_of(1);
    st_backend *mem = NULL, *raw = NULL, *sealed = NULL, *no_create_sealed = NULL;
    CHECK_OK(st_backend_mem_open(&mem));
    CHECK_OK(st_backend_mem_share(mem, &raw));
    sealed = mem;
    CHECK_OK(st_envelope_wrap(&sealed, kr));

    CHECK_OK(st_put_new(sealed, MANIFEST_KEY, plain, sizeof plain));
    CHECK(holds(raw, ST_ENVELOPE_MARKER_KEY, "ckptfs-encryption v1 aes-256-gcm"));
    CHECK(!holds(raw, MANIFEST_KEY, "SECRET"));
    CHECK(holds(raw, MANIFEST_KEY, ST_CRYPT_MAGIC));
    st_bytes got = {0};
    CHECK_OK(st_get(sealed, MANIFEST_KEY, 0, ST_GET_TO_END, &got));
    CHECK(got.len == sizeof plain && !memcmp(got.data, plain, sizeof plain));
    CHECK_ERR(st_put_new(sealed, MANIFEST_KEY, "other", 5), ST_ERR_EXISTS);
    int created = 1;
    CHECK_OK(st_put_once(sealed, MANIFEST_KEY, plain, sizeof plain, ST_ONCE_COMPARE, &created));
    CHECK(created == 0);
    CHECK_OK(st_put_new(sealed, PACK_KEY, plain, sizeof plain)); /* packs pass through */
    CHECK(holds(raw, PACK_KEY, "SECRET"));

    /* A store without creates: the envelope offers none, and writes nothing. */
    st_backend_ops no_create_ops = *raw->ops;
    no_create_ops.put_new = NULL;
    st_backend no_create = {&no_create_ops, raw->ctx};
    CHECK_OK(st_envelope_borrow(&no_create, kr, &no_create_sealed));
    CHECK_ERR(st_put_new(no_create_sealed, PART_KEY, plain, sizeof plain), ST_ERR_UNSUPPORTED);
    CHECK_ERR(st_get(raw, PART_KEY, 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);

    st_bytes_free(&got);
    st_backend_close(no_create_sealed);
    st_backend_close(sealed);
    st_backend_close(raw);
    st_keyring_free(kr);
}

static void test_plain_store_refuses_a_key(void)
{
    st_keyring *kr = ut_keyring_of(1);
    st_backend *mem = NULL;
    CHECK_OK(st_backend_mem_open(&mem));
    CHECK_OK(st_put(mem, "joblist/j", "", 0));
    CHECK_OK(st_envelope_check(mem, kr, "mem://")); /* a job, no step yet */
    CHECK_OK(st_put(mem, PART_KEY, plain, sizeof plain));
    CHECK_ERR(st_envelope_check(mem, kr, "mem://"), ST_ERR_KEY);
    CHECK(strstr(st_errmsg(), "is not encrypted; ckptfs does not mix") != NULL);
    CHECK_OK(st_envelope_check(mem, NULL, "mem://"));
    st_backend_close(mem);
    st_keyring_free(kr);
}

int main(void)
{
    RUN(test_seal_and_open);
    RUN(test_create_is_sealed_and_conditional);
    RUN(test_plain_store_refuses_a_key);
    return ut_finish();
}
