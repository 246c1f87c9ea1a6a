/*
 * st_hash — content identities.
 *
 * A chunk, a pack and a whole file are named by the XXH3-128 of their bytes.
 * st_id is that 16-byte value in a fixed byte order (big-endian high64 then
 * low64, as XXH128_canonical_t), so ids compare with memcmp and print the
 * same on every machine.
 */
#ifndef ST_HASH_H
#define ST_HASH_H

#include <stddef.h>
#include <stdint.h>

#define ST_ID_LEN     16
#define ST_ID_HEX_LEN 32 /* without the terminating NUL */

typedef struct st_id {
    uint8_t b[ST_ID_LEN];
} st_id;

/*! XXH3-128 of buf[0..len). */
st_id st_id_of(const void *buf, size_t len);

/*! Streaming XXH3-128, for whole-file digests. Caller-owned state. */
typedef struct st_hasher {
    void *state; /* XXH3_state_t*, allocated by st_hasher_init */
} st_hasher;

/*! Returns 0 on success, -1 if out of memory. */
int st_hasher_init(st_hasher *h);
void st_hasher_update(st_hasher *h, const void *buf, size_t len);
/*! Hashes len zero bytes (a hole of a sparse file) without a buffer of them. */
void st_hasher_update_zeros(st_hasher *h, uint64_t len);
st_id st_hasher_final(const st_hasher *h);
void st_hasher_free(st_hasher *h);

/*! Writes 32 lowercase hex digits and a NUL into out[33]. Returns out. */
char *st_id_hex(const st_id *id, char out[ST_ID_HEX_LEN + 1]);

/*! Value of one hex digit (either case), or -1 if c is not one. */
int st_hex_value(char c);

/*! Parses exactly 32 hex digits. Returns 0 on success, -1 on bad input. */
int st_id_parse(const char *hex, st_id *out);

/*! memcmp-style comparison. */
int st_id_cmp(const st_id *a, const st_id *b);

/*! 64-bit XXH3 of buf (checksums of manifests and trailers). */
uint64_t st_hash64(const void *buf, size_t len);

#endif
