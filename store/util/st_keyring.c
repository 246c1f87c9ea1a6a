/*
 * st_keyring — key file, keyring and key ids. See the header; the file
 * format and the rules are docs/ENCRYPTION.md's, "Cipher and keys".
 *
 * The keyring is one mmap'd page of its own, so that mlock and
 * MADV_DONTDUMP cover the keys and nothing else. While a key file is parsed
 * its text sits in a stack buffer that is wiped before returning, on every
 * path. Threads: a keyring is written only before it is shared.
 */
#include "util/st_keyring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_fsutil.h"

#define KEY_ID_LABEL "ckptfs key id v1"
#define KEY_B64_LEN  44 /* base64 of ST_KEY_LEN bytes: 43 digits and one '=' */
#define KEY_FILE_CAP (ST_KEYRING_MAX * ST_KEY_LINE_LEN)

struct st_keyring {
    size_t n;
    int locked;
    st_key keys[ST_KEYRING_MAX]; /* oldest first; keys[n - 1] seals */
};

_Static_assert(sizeof(struct st_keyring) <= 4096, "the keyring fits one page");

st_err st_key_id(const uint8_t key[ST_KEY_LEN], uint8_t id[ST_KEY_ID_LEN])
{
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), key, ST_KEY_LEN, (const uint8_t *)KEY_ID_LABEL, sizeof KEY_ID_LABEL - 1,
              mac, &mac_len) ||
        mac_len < ST_KEY_ID_LEN)
        return st_seterr(ST_ERR_NOMEM, "key id: HMAC-SHA256 failed");
    memcpy(id, mac, ST_KEY_ID_LEN);
    OPENSSL_cleanse(mac, sizeof mac);
    return ST_OK;
}

void st_key_id_hex(const uint8_t id[ST_KEY_ID_LEN], char hex[2 * ST_KEY_ID_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < ST_KEY_ID_LEN; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 15];
    }
    hex[2 * ST_KEY_ID_LEN] = '\0';
}

st_err st_keyring_new(st_keyring **out)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t len = page > 0 ? (size_t)page : 4096;
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *out = NULL;
    if (mem == MAP_FAILED)
        return st_seterr(ST_ERR_NOMEM, "keyring: mmap: %s", strerror(errno));
    st_keyring *kr = mem;
    /* Best effort, as ENCRYPTION.md says: RLIMIT_MEMLOCK may refuse. */
    kr->locked = mlock(mem, len) == 0;
    (void)madvise(mem, len, MADV_DONTDUMP);
    *out = kr;
    return ST_OK;
}

void st_keyring_free(st_keyring *kr)
{
    if (!kr)
        return;
    long page = sysconf(_SC_PAGESIZE);
    size_t len = page > 0 ? (size_t)page : 4096;
    int locked = kr->locked;
    OPENSSL_cleanse(kr, sizeof *kr);
    if (locked)
        munlock(kr, len);
    munmap(kr, len);
}

st_err st_keyring_add(st_keyring *kr, const uint8_t key[ST_KEY_LEN])
{
    if (kr->n == ST_KEYRING_MAX)
        return st_seterr(ST_ERR_KEY, "keyring: more than %d keys", ST_KEYRING_MAX);
    for (size_t i = 0; i < kr->n; i++)
        if (CRYPTO_memcmp(kr->keys[i].bytes, key, ST_KEY_LEN) == 0)
            return st_seterr(ST_ERR_KEY, "keyring: key %zu repeats key %zu", kr->n + 1, i + 1);
    st_key *k = &kr->keys[kr->n];
    st_err e = st_key_id(key, k->id);
    if (e)
        return e;
    memcpy(k->bytes, key, ST_KEY_LEN);
    kr->n++;
    return ST_OK;
}

size_t st_keyring_count(const st_keyring *kr)
{
    return kr ? kr->n : 0;
}

const st_key *st_keyring_sealing(const st_keyring *kr)
{
    return kr && kr->n ? &kr->keys[kr->n - 1] : NULL;
}

const st_key *st_keyring_find(const st_keyring *kr, const uint8_t id[ST_KEY_ID_LEN])
{
    /* Newest first: the sealing key is the one most objects name. */
    for (size_t i = kr ? kr->n : 0; i-- > 0;)
        if (memcmp(kr->keys[i].id, id, ST_KEY_ID_LEN) == 0)
            return &kr->keys[i];
    return NULL;
}

int st_keyring_locked(const st_keyring *kr)
{
    return kr && kr->locked;
}

static int is_base64_digit(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

/*
 * Decodes the KEY_B64_LEN characters at b64 into key, accepting only the
 * canonical encoding: 43 base64 digits, one '=', and unused low bits zero
 * (checked by encoding the key again). 0, or -1 (key wiped).
 */
static int decode_key(const char *b64, uint8_t key[ST_KEY_LEN])
{
    uint8_t raw[ST_KEY_LEN + 1];
    char again[KEY_B64_LEN + 1];
    int ok = b64[KEY_B64_LEN - 1] == '=';
    for (size_t i = 0; ok && i < KEY_B64_LEN - 1; i++)
        ok = is_base64_digit(b64[i]);
    ok = ok && EVP_DecodeBlock(raw, (const unsigned char *)b64, KEY_B64_LEN) == ST_KEY_LEN + 1;
    ok = ok && EVP_EncodeBlock((unsigned char *)again, raw, ST_KEY_LEN) == KEY_B64_LEN &&
         CRYPTO_memcmp(again, b64, KEY_B64_LEN) == 0;
    if (ok)
        memcpy(key, raw, ST_KEY_LEN);
    else
        OPENSSL_cleanse(key, ST_KEY_LEN);
    OPENSSL_cleanse(raw, sizeof raw);
    OPENSSL_cleanse(again, sizeof again);
    return ok ? 0 : -1;
}

/* Parses the key file text[0..len) into kr, line by line. */
static st_err parse_key_file(const char *path, const char *text, size_t len, st_keyring *kr)
{
    const size_t prefix = sizeof ST_KEY_LINE_PREFIX - 1;
    uint8_t key[ST_KEY_LEN];
    st_err e = ST_OK;
    if (len == 0)
        return st_seterr(ST_ERR_KEY,
                         "key file %s: empty; it needs at least one line '%s<base64 "
                         "of 32 bytes>' (ckptctl keygen writes one)",
                         path, ST_KEY_LINE_PREFIX);
    for (size_t off = 0, line = 1; !e && off < len; line++) {
        const char *start = text + off;
        const char *nl = memchr(start, '\n', len - off);
        size_t n = nl ? (size_t)(nl - start) : len - off; /* the last newline may be missing */
        off += n + (nl != NULL);
        if (n != prefix + KEY_B64_LEN || memcmp(start, ST_KEY_LINE_PREFIX, prefix) != 0 ||
            decode_key(start + prefix, key) != 0) {
            e = st_seterr(ST_ERR_KEY,
                          "key file %s, line %zu: not a key line; each line must be exactly "
                          "'%s' and the base64 of 32 bytes (no blank lines, spaces or comments)",
                          path, line, ST_KEY_LINE_PREFIX);
        } else if (kr->n == ST_KEYRING_MAX) {
            e = st_seterr(ST_ERR_KEY, "key file %s: more than %d lines", path, ST_KEYRING_MAX);
        } else if ((e = st_keyring_add(kr, key)) == ST_ERR_KEY) {
            e = st_seterr(ST_ERR_KEY, "key file %s, line %zu: repeats an earlier line's key", path,
                          line);
        }
    }
    OPENSSL_cleanse(key, sizeof key);
    return e;
}

st_err st_keyring_load(const char *path, st_keyring **out)
{
    char text[KEY_FILE_CAP];
    size_t got = 0;
    st_keyring *kr = NULL;
    *out = NULL;
    st_err e = st_read_private_file(path, "key file", text, sizeof text, &got);
    if (e == ST_ERR_INVALID)
        e = st_seterr(ST_ERR_KEY, "%s", st_errmsg());
    if (!e)
        e = st_keyring_new(&kr);
    if (!e)
        e = parse_key_file(path, text, got, kr);
    OPENSSL_cleanse(text, sizeof text);
    if (e) {
        st_keyring_free(kr);
        return e;
    }
    *out = kr;
    return ST_OK;
}

/* "ckptfs-key v1 <base64>\n" of key into line (ST_KEY_LINE_LEN bytes, no NUL). */
static void format_key_line(const uint8_t key[ST_KEY_LEN], char line[ST_KEY_LINE_LEN])
{
    char b64[KEY_B64_LEN + 1];
    const size_t prefix = sizeof ST_KEY_LINE_PREFIX - 1;
    EVP_EncodeBlock((unsigned char *)b64, key, ST_KEY_LEN);
    memcpy(line, ST_KEY_LINE_PREFIX, prefix);
    memcpy(line + prefix, b64, KEY_B64_LEN);
    line[ST_KEY_LINE_LEN - 1] = '\n';
    OPENSSL_cleanse(b64, sizeof b64);
}

/* fsync of the directory that holds path, so a link or rename there lasts. */
static st_err fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir)
        return st_seterr(ST_ERR_INVALID, "key file %s: path too long", path);
    if (n)
        memcpy(dir, path, n);
    else
        dir[n++] = '.';
    dir[n] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    st_err e = ST_OK;
    if (fd < 0 || fsync(fd) < 0)
        e = st_seterr(ST_ERR_IO, "key file %s: fsync of %s: %s", path, dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    return e;
}

/* Writes every key of kr, one line each, to tmp (a new file, 0600); on
 * failure tmp is gone again. */
static st_err write_keys(const char *tmp, const st_keyring *kr)
{
    char text[KEY_FILE_CAP];
    int fd = -1;
    for (size_t i = 0; i < kr->n; i++)
        format_key_line(kr->keys[i].bytes, text + i * ST_KEY_LINE_LEN);
    st_err e = st_create_new(tmp, O_WRONLY, 0600, &fd);
    /* The umask only takes bits away; 0600 exactly, so the owner can read. */
    if (!e && fchmod(fd, 0600) < 0)
        e = st_seterr(ST_ERR_IO, "chmod %s: %s", tmp, strerror(errno));
    if (!e)
        e = st_write_all(fd, text, kr->n * ST_KEY_LINE_LEN, tmp);
    if (!e && fsync(fd) < 0)
        e = st_seterr(st_err_of_write_errno(errno), "fsync %s: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && !e)
        e = st_seterr(st_err_of_write_errno(errno), "close %s: %s", tmp, strerror(errno));
    if (e && fd >= 0)
        unlink(tmp);
    OPENSSL_cleanse(text, sizeof text);
    return e;
}

st_err st_key_file_write(const char *path, int append, uint8_t id[ST_KEY_ID_LEN], size_t *nkeys)
{
    char tmp[PATH_MAX];
    uint8_t key[ST_KEY_LEN];
    st_keyring *kr = NULL;
    st_err e = ST_OK;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return st_seterr(ST_ERR_INVALID, "key file %s: path too long", path);
    if (!append && access(path, F_OK) == 0)
        return st_seterr(ST_ERR_EXISTS,
                         "key file %s exists: refused, its keys may be all that opens a store "
                         "(ckptctl keygen --append adds a new sealing key to it)",
                         path);
    e = append ? st_keyring_load(path, &kr) : st_keyring_new(&kr);
    if (!e && RAND_bytes(key, sizeof key) != 1)
        e = st_seterr(ST_ERR_NOMEM, "key file %s: the random generator failed", path);
    if (!e && (e = st_keyring_add(kr, key)) == ST_ERR_KEY)
        e = st_seterr(ST_ERR_KEY, "key file %s: %s", path, st_errmsg());
    if (!e)
        e = write_keys(tmp, kr);
    int wrote = !e; /* tmp exists */
    /* create: link() never replaces, so a file made meanwhile is not lost. */
    if (wrote && (append ? rename(tmp, path) : link(tmp, path)) < 0)
        e = errno == EEXIST ? st_seterr(ST_ERR_EXISTS, "key file %s exists: refused", path)
                            : st_seterr(ST_ERR_IO, "key file %s: %s: %s", path,
                                        append ? "rename" : "link", strerror(errno));
    if (wrote && (!append || e))
        unlink(tmp);
    if (!e)
        e = fsync_parent(path);
    if (!e && id)
        memcpy(id, st_keyring_sealing(kr)->id, ST_KEY_ID_LEN);
    if (!e && nkeys)
        *nkeys = kr->n;
    OPENSSL_cleanse(key, sizeof key);
    st_keyring_free(kr);
    return e;
}
