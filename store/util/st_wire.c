/*
 * st_wire — growable buffer and bounds-checked reader. No shared state.
 */
#include "util/st_wire.h"

#include <stdlib.h>
#include <string.h>

st_err st_bytes_reserve(st_bytes *b, size_t extra)
{
    if (extra <= b->cap - b->len)
        return ST_OK;
    if (extra > SIZE_MAX / 2 - b->len)
        return st_seterr(ST_ERR_NOMEM, "buffer size overflow");
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return st_seterr(ST_ERR_NOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return ST_OK;
}

st_err st_bytes_append(st_bytes *b, const void *p, size_t n)
{
    st_err e = st_bytes_reserve(b, n);
    if (e)
        return e;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return ST_OK;
}

st_err st_bytes_put_u8(st_bytes *b, uint8_t v)
{
    return st_bytes_append(b, &v, 1);
}

/* The low width bytes of v, least significant first: the one body of the
 * fixed-width appends below (st_le64_put's byte order, any width). */
static st_err put_le(st_bytes *b, uint64_t v, size_t width)
{
    uint8_t t[8];
    for (size_t i = 0; i < width; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    return st_bytes_append(b, t, width);
}

st_err st_bytes_put_le16(st_bytes *b, uint16_t v)
{
    return put_le(b, v, 2);
}

st_err st_bytes_put_le32(st_bytes *b, uint32_t v)
{
    return put_le(b, v, 4);
}

st_err st_bytes_put_le64(st_bytes *b, uint64_t v)
{
    return put_le(b, v, 8);
}

st_err st_bytes_put_varint(st_bytes *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        t[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    return st_bytes_append(b, t, n);
}

st_err st_bytes_put_str(st_bytes *b, const void *p, size_t n)
{
    st_err e = st_bytes_put_varint(b, n);
    return e ? e : st_bytes_append(b, p, n);
}

void st_bytes_free(st_bytes *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int reader_fail(st_reader *r)
{
    r->err = 1;
    r->p = r->end;
    return -1;
}

int st_get_bytes(st_reader *r, size_t n, const uint8_t **p)
{
    if (r->err || n > st_reader_left(r))
        return reader_fail(r);
    *p = r->p;
    r->p += n;
    return 0;
}

int st_get_u8(st_reader *r, uint8_t *v)
{
    const uint8_t *p;
    if (st_get_bytes(r, 1, &p))
        return -1;
    *v = p[0];
    return 0;
}

int st_get_le16(st_reader *r, uint16_t *v)
{
    const uint8_t *p;
    if (st_get_bytes(r, 2, &p))
        return -1;
    *v = st_le16_get(p);
    return 0;
}

int st_get_varint(st_reader *r, uint64_t *v)
{
    uint64_t out = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t byte;
        if (st_get_u8(r, &byte))
            return -1;
        if (shift == 63 && byte > 1)
            return reader_fail(r); /* value does not fit in 64 bits */
        out |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            if (byte == 0 && shift > 0)
                return reader_fail(r); /* overlong: redundant trailing zero group */
            *v = out;
            return 0;
        }
    }
    return reader_fail(r);
}

int st_get_str(st_reader *r, size_t max_len, const uint8_t **p, size_t *n)
{
    uint64_t len;
    if (st_get_varint(r, &len))
        return -1;
    if (len > max_len)
        return reader_fail(r);
    *n = (size_t)len;
    return st_get_bytes(r, (size_t)len, p);
}
