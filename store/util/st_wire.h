/*
 * st_wire — byte-level encoding shared by every on-store format (chunk
 * headers, pack trailers, manifests): little-endian fixed-width integers,
 * LEB128 varints, a growable output buffer and a bounds-checked reader.
 *
 * The reader never reads past its end: every get returns -1 once the input is
 * exhausted or malformed and stays failed ("sticky"), so a decoder can run a
 * sequence of gets and check r->err once. That is what lets the format
 * decoders accept any byte string without a crash (they are fuzzed).
 */
#ifndef ST_WIRE_H
#define ST_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

/* ---- fixed-width little-endian, on raw memory ---- */

static inline void st_le16_put(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void st_le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void st_le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t st_le16_get(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t st_le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t st_le64_get(const uint8_t *p)
{
    return (uint64_t)st_le32_get(p) | (uint64_t)st_le32_get(p + 4) << 32;
}

/* ---- growable byte buffer ---- */

/*!
 * A heap buffer that grows on demand. Zero-initialise ({0}) before first use;
 * st_bytes_free() releases it. `len` is the bytes in use, `cap` the allocation.
 * Reusing one st_bytes across many requests avoids an allocation per request.
 */
typedef struct st_bytes {
    uint8_t *data;
    size_t len;
    size_t cap;
} st_bytes;

/*! Ensures cap >= len + extra. ST_OK or ST_ERR_NOMEM. */
st_err st_bytes_reserve(st_bytes *b, size_t extra);
/*! Appends n bytes. ST_OK or ST_ERR_NOMEM. */
st_err st_bytes_append(st_bytes *b, const void *p, size_t n);
st_err st_bytes_put_u8(st_bytes *b, uint8_t v);
st_err st_bytes_put_le16(st_bytes *b, uint16_t v);
st_err st_bytes_put_le32(st_bytes *b, uint32_t v);
st_err st_bytes_put_le64(st_bytes *b, uint64_t v);
/*! Unsigned LEB128 (1..10 bytes). */
st_err st_bytes_put_varint(st_bytes *b, uint64_t v);
/*! Varint length, then the bytes. */
st_err st_bytes_put_str(st_bytes *b, const void *p, size_t n);
/*! Sets len to 0, keeps the allocation. */
static inline void st_bytes_clear(st_bytes *b)
{
    b->len = 0;
}
void st_bytes_free(st_bytes *b);

/* ---- bounds-checked reader ---- */

typedef struct st_reader {
    const uint8_t *p;
    const uint8_t *end;
    int err; /* sticky: set once any get fails */
} st_reader;

static inline void st_reader_init(st_reader *r, const void *buf, size_t len)
{
    r->p = (const uint8_t *)buf;
    r->end = r->p + len;
    r->err = 0;
}
static inline size_t st_reader_left(const st_reader *r)
{
    return (size_t)(r->end - r->p);
}
/*! Each returns 0 on success, -1 (and sets r->err) on short or bad input. */
int st_get_u8(st_reader *r, uint8_t *v);
int st_get_le16(st_reader *r, uint16_t *v);
/*! Rejects overlong encodings and values above 2^64-1. */
int st_get_varint(st_reader *r, uint64_t *v);
/*! Points *p at the next n bytes (no copy). */
int st_get_bytes(st_reader *r, size_t n, const uint8_t **p);
/*! Varint length (must be <= max_len), then points *p at the bytes. */
int st_get_str(st_reader *r, size_t max_len, const uint8_t **p, size_t *n);

#endif
