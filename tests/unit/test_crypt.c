/*
 * test_crypt — client-side encryption's building blocks (util/st_keyring,
 * util/st_crypt; docs/ENCRYPTION.md): HKDF against RFC 5869, key ids,
 * envelopes and pack records against answers computed independently (with
 * Python's cryptography package, from the protocol page), seal/open round
 * trips, every bit flipped, every truncation, another name, kind, key or
 * offset, a keyring of two keys, and the key file's rules.
 */
#include <errno.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ut.h"
#include "util/st_crypt.h"
#include "util/st_keyring.h"

static char tmp_root[] = "/tmp/test_crypt.XXXXXX";

#define MANIFEST_NAME "jobs/j/steps/00000000000000000007/nodes/n.r1.manifest"

/* Parses the hex string into out (strlen(hex) / 2 bytes). */
static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

/* A keyring of the keys whose bytes are all `fill` values, in order. */
static st_keyring *keyring_of(const uint8_t *fills, size_t n)
{
    st_keyring *kr = NULL;
    uint8_t key[ST_KEY_LEN];
    CHECK_OK(st_keyring_new(&kr));
    for (size_t i = 0; kr && i < n; i++) {
        memset(key, fills[i], sizeof key);
        CHECK_OK(st_keyring_add(kr, key));
    }
    return kr;
}

/* ---- known answers ---- */

static void test_hkdf_rfc5869(void)
{
    uint8_t ikm[22], salt[13], info[10], okm[42], want[42];
    memset(ikm, 0x0b, sizeof ikm);
    for (int i = 0; i < 13; i++)
        salt[i] = (uint8_t)i;
    for (int i = 0; i < 10; i++)
        info[i] = (uint8_t)(0xf0 + i);
    /* RFC 5869 A.1 */
    unhex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
          want);
    CHECK_OK(st_hkdf_sha256(ikm, sizeof ikm, salt, sizeof salt, info, sizeof info, okm, 42));
    CHECK(memcmp(okm, want, 42) == 0);
    /* RFC 5869 A.3: no salt, no info */
    unhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
          want);
    CHECK_OK(st_hkdf_sha256(ikm, sizeof ikm, NULL, 0, NULL, 0, okm, 42));
    CHECK(memcmp(okm, want, 42) == 0);
    CHECK_ERR(st_hkdf_sha256(ikm, sizeof ikm, NULL, 0, NULL, 0, okm, 0), ST_ERR_INVALID);
}

/* The key 00 01 .. 1f, salt 40 41 .. 4f: what the Python reference used. */
static st_keyring *reference_keyring(void)
{
    uint8_t key[ST_KEY_LEN];
    st_keyring *kr = NULL;
    for (int i = 0; i < ST_KEY_LEN; i++)
        key[i] = (uint8_t)i;
    CHECK_OK(st_keyring_new(&kr));
    CHECK_OK(st_keyring_add(kr, key));
    return kr;
}

static void test_known_answers(void)
{
    st_keyring *kr = reference_keyring();
    const st_key *key = st_keyring_sealing(kr);
    uint8_t want[64], salt[ST_CRYPT_SALT_LEN], env[128], out[128];
    char hex[2 * ST_KEY_ID_LEN + 1];
    size_t n;

    st_key_id_hex(key->id, hex);
    CHECK(strcmp(hex, "1b3609887d43b878") == 0);

    /* An envelope made by the reference opens, and says "manifest bytes". */
    size_t env_len = unhex("434b6531010001001b3609887d43b878404142434445464748494a4b4c4d4e4f"
                           "e7dc8df606e9eccfcefa631994be9923363c52458fb40ae5e48d1aceaeaf",
                           env);
    CHECK_OK(st_crypt_open_object(kr, ST_CRYPT_MANIFEST, MANIFEST_NAME, env, env_len, out,
                                  sizeof out, &n));
    CHECK(n == 14 && memcmp(out, "manifest bytes", 14) == 0);

    /* The pack key of that salt, and a record at offset 4096 under the
     * header "CKp2 header": sealed byte for byte as the reference did. */
    for (int i = 0; i < ST_CRYPT_SALT_LEN; i++)
        salt[i] = (uint8_t)(0x40 + i);
    st_crypt_objkey pk;
    CHECK_OK(st_crypt_derive(key, salt, ST_CRYPT_PACK, &pk));
    unhex("a60d511e18401ac083f871aba2359647964695757d09fa4fa8ea968e5cf112c1", want);
    CHECK(memcmp(pk.bytes, want, ST_KEY_LEN) == 0);
    const uint8_t header[] = "CKp2 header";
    size_t rec_len = unhex("00cc3fa959e752a20756b5052ca96068d63daaa3e2b4223d36cd76c2", want);
    CHECK_OK(st_crypt_seal_record(&pk, header, sizeof header - 1, 4096,
                                  (const uint8_t *)"chunk record", 12, out));
    CHECK(rec_len == 12 + ST_CRYPT_TAG_LEN && memcmp(out, want, rec_len) == 0);
    CHECK_OK(
        st_crypt_open_record(&pk, "p.pack", header, sizeof header - 1, 4096, want, rec_len, out));
    CHECK(memcmp(out, "chunk record", 12) == 0);
    st_crypt_objkey_wipe(&pk);
    st_keyring_free(kr);
}

/* ---- envelopes ---- */

static void test_round_trip_every_kind(void)
{
    const uint8_t fills[] = {7};
    st_keyring *kr = keyring_of(fills, 1);
    const size_t sizes[] = {0, 1, 31, 4096, (1 << 20) + 3};
    const st_crypt_kind kinds[] = {ST_CRYPT_MANIFEST, ST_CRYPT_PART, ST_CRYPT_REPLICA};
    size_t max = (1 << 20) + 3;
    uint8_t *plain = malloc(max), *sealed = malloc(st_crypt_object_bound(max)),
            *again = malloc(max);
    ut_rand_fill(plain, max, 1);
    for (size_t k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = 0, m = 0;
            CHECK_OK(st_crypt_seal_object(kr, kinds[k], MANIFEST_NAME, plain, sizes[s], sealed,
                                          st_crypt_object_bound(sizes[s]), &n));
            CHECK(n == sizes[s] + ST_CRYPT_OVERHEAD);
            CHECK(memcmp(sealed, "CKe1\x01\x00", 6) == 0 && sealed[6] == kinds[k]);
            CHECK(memcmp(sealed + 8, st_keyring_sealing(kr)->id, ST_KEY_ID_LEN) == 0);
            /* Ciphertext, not the plaintext. */
            CHECK(sizes[s] < 16 || memcmp(sealed + ST_CRYPT_HEADER_LEN, plain, 16) != 0);
            CHECK_OK(st_crypt_open_object(kr, kinds[k], MANIFEST_NAME, sealed, n, again, max, &m));
            CHECK(m == sizes[s] && memcmp(again, plain, m) == 0);
        }
    /* Two seals of the same bytes differ: each has its own salt, so its own key. */
    size_t n1, n2;
    uint8_t a[64 + ST_CRYPT_OVERHEAD], b[64 + ST_CRYPT_OVERHEAD];
    CHECK_OK(st_crypt_seal_object(kr, ST_CRYPT_PART, "x", plain, 64, a, sizeof a, &n1));
    CHECK_OK(st_crypt_seal_object(kr, ST_CRYPT_PART, "x", plain, 64, b, sizeof b, &n2));
    CHECK(memcmp(a + 16, b + 16, 16) != 0 && memcmp(a + 32, b + 32, 64) != 0);
    /* A pack is never an envelope; a short buffer is refused. */
    CHECK_ERR(st_crypt_seal_object(kr, ST_CRYPT_PACK, "x", plain, 64, a, sizeof a, &n1),
              ST_ERR_INVALID);
    CHECK_ERR(st_crypt_seal_object(kr, ST_CRYPT_PART, "x", plain, 64, a, sizeof a - 1, &n1),
              ST_ERR_INVALID);
    free(plain);
    free(sealed);
    free(again);
    st_keyring_free(kr);
}

/* Opens env[0..len) as a manifest named MANIFEST_NAME; when that fails the
 * (zeroed) output must still be all zero: nothing of the plaintext. */
static st_err open_manifest(const st_keyring *kr, const uint8_t *env, size_t len)
{
    uint8_t out[256], zero[256] = {0};
    size_t n = 99;
    memset(out, 0, sizeof out);
    st_err e =
        st_crypt_open_object(kr, ST_CRYPT_MANIFEST, MANIFEST_NAME, env, len, out, sizeof out, &n);
    if (e)
        CHECK(n == 0 && memcmp(out, zero, sizeof out) == 0);
    return e;
}

/* Every bit flipped, every truncation, one byte more: none opens. */
static void test_damaged_envelope(void)
{
    const uint8_t fills[] = {7};
    st_keyring *kr = keyring_of(fills, 1);
    uint8_t plain[100], env[100 + ST_CRYPT_OVERHEAD + 1];
    size_t len;
    ut_rand_fill(plain, sizeof plain, 2);
    CHECK_OK(st_crypt_seal_object(kr, ST_CRYPT_MANIFEST, MANIFEST_NAME, plain, sizeof plain, env,
                                  sizeof env, &len));
    int wrong = 0;
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            env[i] ^= (uint8_t)(1 << bit);
            st_err e = open_manifest(kr, env, len);
            /* A changed key id names a key the keyring does not hold. */
            st_err want = i >= 8 && i < 16 ? ST_ERR_KEY : ST_ERR_CORRUPT;
            if (e != want) {
                wrong++;
                fprintf(stderr, "byte %zu bit %d: %d (%s)\n", i, bit, (int)e, st_errmsg());
            }
            env[i] ^= (uint8_t)(1 << bit);
        }
    CHECK(wrong == 0);
    CHECK_OK(open_manifest(kr, env, len));
    /* The messages: the object's name, and what is wrong. */
    env[0] = 'X';
    CHECK_ERR(open_manifest(kr, env, len), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), MANIFEST_NAME) && strstr(st_errmsg(), "magic"));
    env[0] = 'C';
    env[4] = 2;
    CHECK_ERR(open_manifest(kr, env, len), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "version 2") != NULL);
    env[4] = 1;
    env[len - 1] ^= 1;
    CHECK_ERR(open_manifest(kr, env, len), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), MANIFEST_NAME) && strstr(st_errmsg(), "authentication"));
    env[len - 1] ^= 1;

    wrong = 0;
    for (size_t n = 0; n < len; n++)
        wrong += open_manifest(kr, env, n) != ST_ERR_CORRUPT;
    CHECK(wrong == 0);
    CHECK_ERR(open_manifest(kr, env, 10), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "truncated") && strstr(st_errmsg(), MANIFEST_NAME));
    env[len] = 0;
    CHECK_ERR(open_manifest(kr, env, len + 1), ST_ERR_CORRUPT);
    st_keyring_free(kr);
}

static void test_other_name_or_kind(void)
{
    const uint8_t fills[] = {7};
    st_keyring *kr = keyring_of(fills, 1);
    uint8_t plain[50], env[50 + ST_CRYPT_OVERHEAD], out[64];
    size_t len, n;
    ut_rand_fill(plain, sizeof plain, 4);
    CHECK_OK(st_crypt_seal_object(kr, ST_CRYPT_MANIFEST, MANIFEST_NAME, plain, sizeof plain, env,
                                  sizeof env, &len));
    /* Copied to another step, node, revision. */
    const char *others[] = {"jobs/j/steps/00000000000000000008/nodes/n.r1.manifest",
                            "jobs/j/steps/00000000000000000007/nodes/m.r1.manifest",
                            "jobs/j/steps/00000000000000000007/nodes/n.r2.manifest", ""};
    for (size_t i = 0; i < 4; i++) {
        CHECK_ERR(
            st_crypt_open_object(kr, ST_CRYPT_MANIFEST, others[i], env, len, out, sizeof out, &n),
            ST_ERR_CORRUPT);
        CHECK(strstr(st_errmsg(), others[i]) != NULL);
    }
    /* Read as a part record. */
    CHECK_ERR(st_crypt_open_object(kr, ST_CRYPT_PART, MANIFEST_NAME, env, len, out, sizeof out, &n),
              ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "kind") != NULL);
    /* An output buffer too small is the caller's mistake, not corruption. */
    CHECK_ERR(st_crypt_open_object(kr, ST_CRYPT_MANIFEST, MANIFEST_NAME, env, len, out, 49, &n),
              ST_ERR_INVALID);
    st_keyring_free(kr);
}

static void test_unknown_key_and_two_keys(void)
{
    const uint8_t old_fill[] = {1}, both[] = {1, 2}, other[] = {3};
    st_keyring *old_kr = keyring_of(old_fill, 1), *new_kr = keyring_of(both, 2),
               *other_kr = keyring_of(other, 1);
    uint8_t plain[40], old_env[40 + ST_CRYPT_OVERHEAD], new_env[40 + ST_CRYPT_OVERHEAD], out[64];
    size_t len, n;
    char hex[2 * ST_KEY_ID_LEN + 1];
    ut_rand_fill(plain, sizeof plain, 5);

    CHECK(st_keyring_count(new_kr) == 2);
    CHECK(st_keyring_sealing(new_kr) == st_keyring_find(new_kr, st_keyring_sealing(new_kr)->id));
    CHECK_OK(st_crypt_seal_object(old_kr, ST_CRYPT_PART, "p", plain, sizeof plain, old_env,
                                  sizeof old_env, &len));
    /* The old object opens under the new keyring, with its old line. */
    CHECK_OK(st_crypt_open_object(new_kr, ST_CRYPT_PART, "p", old_env, len, out, sizeof out, &n));
    CHECK(n == sizeof plain && memcmp(out, plain, n) == 0);
    /* A new object is sealed with the last line, which the old keyring lacks. */
    CHECK_OK(st_crypt_seal_object(new_kr, ST_CRYPT_PART, "p", plain, sizeof plain, new_env,
                                  sizeof new_env, &len));
    CHECK(memcmp(new_env + 8, st_keyring_sealing(new_kr)->id, ST_KEY_ID_LEN) == 0);
    CHECK(memcmp(new_env + 8, st_keyring_sealing(old_kr)->id, ST_KEY_ID_LEN) != 0);
    CHECK_ERR(st_crypt_open_object(old_kr, ST_CRYPT_PART, "p", new_env, len, out, sizeof out, &n),
              ST_ERR_KEY);
    st_key_id_hex(st_keyring_sealing(new_kr)->id, hex);
    CHECK(strstr(st_errmsg(), hex) && strstr(st_errmsg(), "which the key file does not hold"));
    CHECK_ERR(st_crypt_open_object(other_kr, ST_CRYPT_PART, "p", old_env, len, out, sizeof out, &n),
              ST_ERR_KEY);
    /* Nothing to seal with, and no key twice. */
    st_keyring *empty = keyring_of(NULL, 0);
    uint8_t key[ST_KEY_LEN];
    memset(key, 1, sizeof key);
    CHECK_ERR(st_crypt_seal_object(empty, ST_CRYPT_PART, "p", plain, sizeof plain, new_env,
                                   sizeof new_env, &len),
              ST_ERR_KEY);
    CHECK_ERR(st_keyring_add(new_kr, key), ST_ERR_KEY);
    st_keyring_free(empty);
    st_keyring_free(old_kr);
    st_keyring_free(new_kr);
    st_keyring_free(other_kr);
}

/* ---- pack records ---- */

static void test_records(void)
{
    const uint8_t fills[] = {9};
    st_keyring *kr = keyring_of(fills, 1);
    uint8_t salt[ST_CRYPT_SALT_LEN], salt2[ST_CRYPT_SALT_LEN];
    memset(salt, 0x11, sizeof salt);
    memset(salt2, 0x12, sizeof salt2);
    st_crypt_objkey k, k2;
    CHECK_OK(st_crypt_derive(st_keyring_sealing(kr), salt, ST_CRYPT_PACK, &k));
    CHECK_OK(st_crypt_derive(st_keyring_sealing(kr), salt2, ST_CRYPT_PACK, &k2));
    const uint8_t header[40] = "CKp2 and the rest of a pack header";
    uint8_t plain[300], rec[300 + ST_CRYPT_TAG_LEN], out[300];
    ut_rand_fill(plain, sizeof plain, 6);
    const uint64_t off = 123456789012ull;
    CHECK_OK(st_crypt_seal_record(&k, header, sizeof header, off, plain, sizeof plain, rec));
    CHECK_OK(st_crypt_open_record(&k, "p.pack", header, sizeof header, off, rec, sizeof rec, out));
    CHECK(memcmp(out, plain, sizeof plain) == 0);
    /* Moved, under another header, another pack's key, changed, truncated. */
    CHECK_ERR(
        st_crypt_open_record(&k, "p.pack", header, sizeof header, off + 1, rec, sizeof rec, out),
        ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "p.pack") && strstr(st_errmsg(), "123456789013"));
    CHECK(memcmp(out, plain, 16) != 0);
    CHECK_ERR(
        st_crypt_open_record(&k, "p.pack", header, sizeof header - 1, off, rec, sizeof rec, out),
        ST_ERR_CORRUPT);
    CHECK_ERR(st_crypt_open_record(&k2, "p.pack", header, sizeof header, off, rec, sizeof rec, out),
              ST_ERR_CORRUPT);
    int wrong = 0;
    for (size_t i = 0; i < sizeof rec; i += 7) {
        rec[i] ^= 0x20;
        wrong += st_crypt_open_record(&k, "p.pack", header, sizeof header, off, rec, sizeof rec,
                                      out) != ST_ERR_CORRUPT;
        rec[i] ^= 0x20;
    }
    CHECK(wrong == 0);
    for (size_t n = 0; n < sizeof rec; n += 13)
        wrong += st_crypt_open_record(&k, "p.pack", header, sizeof header, off, rec, n, out) !=
                 ST_ERR_CORRUPT;
    CHECK(wrong == 0);
    /* An empty record still carries its tag. */
    CHECK_OK(st_crypt_seal_record(&k, header, sizeof header, 64, plain, 0, rec));
    CHECK_OK(st_crypt_open_record(&k, "p.pack", header, sizeof header, 64, rec, 16, out));
    st_crypt_objkey_wipe(&k);
    st_crypt_objkey_wipe(&k2);
    st_keyring_free(kr);
}

/* ---- the key file ---- */

#define KEY_A "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
#define KEY_B "ckptfs-key v1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n"

/* Loading path must fail with ST_ERR_KEY, naming path and `why`, quoting no key. */
static void check_refused(const char *path, const char *why)
{
    st_keyring *kr = (st_keyring *)1;
    st_err e = st_keyring_load(path, &kr);
    CHECK(e == ST_ERR_KEY && kr == NULL);
    if (e != ST_ERR_KEY || !strstr(st_errmsg(), path) || !strstr(st_errmsg(), why) ||
        strstr(st_errmsg(), "AAECAwQF") || strstr(st_errmsg(), "ICEiIyQl")) {
        ut_failed++;
        fprintf(stderr, "refusal of %s: wanted '%s': %d %s\n", path, why, (int)e, st_errmsg());
    }
}

static void test_key_file_rules(void)
{
    char path[256], link[256];
    snprintf(path, sizeof path, "%s/keys", tmp_root);
    snprintf(link, sizeof link, "%s/keys-link", tmp_root);
    st_keyring *kr = NULL;

    /* Two lines: both open, the last seals; the last newline may be missing. */
    ut_write_file_mode(path, KEY_A KEY_B, 0600);
    CHECK_OK(st_keyring_load(path, &kr));
    CHECK(st_keyring_count(kr) == 2 && st_keyring_sealing(kr)->bytes[0] == 0x20);
    st_keyring *ref = reference_keyring(); /* KEY_A is the reference key 00..1f */
    CHECK(st_keyring_find(kr, st_keyring_sealing(ref)->id) != NULL);
    st_keyring_free(ref);
    st_keyring_free(kr);
    ut_write_file_mode(path, "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", 0400);
    CHECK_OK(st_keyring_load(path, &kr));
    CHECK(st_keyring_count(kr) == 1);
    st_keyring_free(kr);

    ut_write_file_mode(path, KEY_A, 0644);
    check_refused(path, "mode 0644");
    ut_write_file_mode(path, KEY_A, 0640);
    check_refused(path, "mode 0640");
    ut_write_file_mode(path, "", 0600);
    check_refused(path, "empty");

    const char *malformed[] = {
        KEY_A "\n",                                                         /* blank line */
        "# keys\n" KEY_A,                                                   /* comment */
        " " KEY_A,                                                          /* space */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= \n",    /* trailing space */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\r\n",   /* CRLF */
        "ckptfs-key v2 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",     /* version */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==\n",     /* 31 bytes */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=\n",     /* not canonical */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd*h8=\n",     /* not base64 */
        "ckptfs-key v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8AAAA=\n", /* 35 bytes */
        KEY_A "ckptfs-key v1\n",                                            /* no key */
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        ut_write_file_mode(path, malformed[i], 0600);
        check_refused(path, "not a key line");
    }
    ut_write_file_mode(path, KEY_A KEY_B "\n", 0600);
    check_refused(path, "line 3");
    ut_write_file_mode(path, KEY_A KEY_B KEY_A, 0600);
    check_refused(path, "line 3: repeats");

    ut_write_file_mode(path, KEY_A, 0600);
    unlink(link);
    CHECK(symlink(path, link) == 0);
    check_refused(link, "symlink");
    unlink(link);
    CHECK(mkdir(link, 0700) == 0);
    check_refused(link, "not a regular file");
    rmdir(link);

    /* Another owner: only root can make one. */
    if (geteuid() == 0) {
        struct passwd *nobody = getpwnam("nobody");
        uid_t uid = nobody ? nobody->pw_uid : 65534;
        CHECK(chown(path, uid, (gid_t)-1) == 0);
        check_refused(path, "owned by uid");
    } else {
        UT_SKIP("a key file of another owner needs root to chown");
    }
    unlink(path);
}

static void test_key_file_write(void)
{
    char path[256], text[512];
    snprintf(path, sizeof path, "%s/written-keys", tmp_root);
    uint8_t id1[ST_KEY_ID_LEN], id2[ST_KEY_ID_LEN];
    size_t nkeys = 0;
    st_keyring *kr = NULL;
    struct stat st;

    unlink(path);
    CHECK_OK(st_key_file_write(path, 0, id1, &nkeys));
    CHECK(nkeys == 1);
    CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600);
    CHECK(st.st_size == (off_t)ST_KEY_LINE_LEN);
    CHECK_OK(st_keyring_load(path, &kr));
    CHECK(st_keyring_count(kr) == 1 && !memcmp(st_keyring_sealing(kr)->id, id1, ST_KEY_ID_LEN));
    st_keyring_free(kr);

    /* Never over an existing file. */
    CHECK_ERR(st_key_file_write(path, 0, NULL, NULL), ST_ERR_EXISTS);
    CHECK(strstr(st_errmsg(), path) && strstr(st_errmsg(), "--append"));

    /* Rotation: the new key seals, the first still opens. */
    CHECK_OK(st_key_file_write(path, 1, id2, &nkeys));
    CHECK(nkeys == 2 && memcmp(id1, id2, ST_KEY_ID_LEN) != 0);
    CHECK_OK(st_keyring_load(path, &kr));
    CHECK(st_keyring_count(kr) == 2 && !memcmp(st_keyring_sealing(kr)->id, id2, ST_KEY_ID_LEN));
    CHECK(st_keyring_find(kr, id1) != NULL);
    st_keyring_free(kr);
    CHECK(lstat(path, &st) == 0 && (st.st_mode & 07777) == 0600);

    /* No temporary file left beside it. */
    snprintf(text, sizeof text, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(text, F_OK) != 0);

    /* Appending to a refused file changes nothing. */
    CHECK(chmod(path, 0644) == 0);
    CHECK_ERR(st_key_file_write(path, 1, NULL, NULL), ST_ERR_KEY);
    CHECK(lstat(path, &st) == 0 && st.st_size == (off_t)(2 * ST_KEY_LINE_LEN));
    snprintf(text, sizeof text, "%s/no-such-keys", tmp_root);
    CHECK_ERR(st_key_file_write(text, 1, NULL, NULL), ST_ERR_KEY);
    CHECK(access(text, F_OK) != 0);
    unlink(path);
}

int main(void)
{
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_hkdf_rfc5869);
    RUN(test_known_answers);
    RUN(test_round_trip_every_kind);
    RUN(test_damaged_envelope);
    RUN(test_other_name_or_kind);
    RUN(test_unknown_key_and_two_keys);
    RUN(test_records);
    RUN(test_key_file_rules);
    RUN(test_key_file_write);
    ut_rmtree(tmp_root);
    return ut_finish();
}
