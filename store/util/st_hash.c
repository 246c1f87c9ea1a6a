/*
 * st_hash — XXH3 wrappers and id formatting. Pure functions; thread-safe.
 */
#include "util/st_hash.h"

#include <string.h>
#include <xxhash.h>

st_id st_id_of(const void *buf, size_t len)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, len));
    st_id id;
    memcpy(id.b, c.digest, ST_ID_LEN);
    return id;
}

int st_hasher_init(st_hasher *h)
{
    h->state = XXH3_createState();
    if (!h->state)
        return -1;
    XXH3_128bits_reset(h->state);
    return 0;
}

void st_hasher_update(st_hasher *h, const void *buf, size_t len)
{
    XXH3_128bits_update(h->state, buf, len);
}

void st_hasher_update_zeros(st_hasher *h, uint64_t len)
{
    static const uint8_t zeros[64 << 10]; /* .bss: costs no memory until read */
    while (len) {
        size_t n = len < sizeof zeros ? (size_t)len : sizeof zeros;
        XXH3_128bits_update(h->state, zeros, n);
        len -= n;
    }
}

st_id st_hasher_final(const st_hasher *h)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h->state));
    st_id id;
    memcpy(id.b, c.digest, ST_ID_LEN);
    return id;
}

void st_hasher_free(st_hasher *h)
{
    if (h->state)
        XXH3_freeState(h->state);
    h->state = NULL;
}

char *st_id_hex(const st_id *id, char out[ST_ID_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < ST_ID_LEN; i++) {
        out[2 * i] = digits[id->b[i] >> 4];
        out[2 * i + 1] = digits[id->b[i] & 15];
    }
    out[ST_ID_HEX_LEN] = '\0';
    return out;
}

int st_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int st_id_parse(const char *hex, st_id *out)
{
    for (int i = 0; i < ST_ID_LEN; i++) {
        int hi = st_hex_value(hex[2 * i]);
        int lo = hi < 0 ? -1 : st_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[ST_ID_HEX_LEN] == '\0' ? 0 : -1;
}

int st_id_cmp(const st_id *a, const st_id *b)
{
    return memcmp(a->b, b->b, ST_ID_LEN);
}

uint64_t st_hash64(const void *buf, size_t len)
{
    return XXH3_64bits(buf, len);
}
