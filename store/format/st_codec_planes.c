/*
 * st_codec_planes — codes the byte planes of a shuffled chunk one by one
 * with zstd, a plane that does not shrink stored raw (payload layout in
 * st_codec_planes.h, reasons in docs/CODEC.md).
 *
 * Why per plane: after a shuffle, the sign/exponent plane of float tensors
 * holds a few distinct values and zstd's entropy stage stores it at a third
 * of its size, while the mantissa planes are noise that no coder shrinks.
 * Coding them separately lets the noise go through as a memcpy on both
 * sides and keeps each zstd frame to one kind of byte.
 *
 * Decoding trusts no field: each length word is checked against what is
 * left of the payload and against the plane size before any copy, a zstd
 * frame must declare exactly the plane size and span exactly its length,
 * and the lengths must add up to the payload. The caller then verifies the
 * chunk id over the unshuffled bytes.
 *
 * Memory: one ZSTD_CCtx (~0.6 MB at level 1) and one ZSTD_DCtx (~0.1 MB)
 * per thread that codes such a chunk, created on its first use and freed
 * by a pthread key destructor when the thread exits (docs/MEMORY.md).
 * Each thread touches only its own contexts.
 */
#include "format/st_codec_planes.h"

#include <pthread.h>
#include <string.h>
#include <zstd.h>

#include "util/st_wire.h"

typedef struct planes_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    int registered; /* the key holds &this thread's planes_ctx */
} planes_ctx;

static _Thread_local planes_ctx planes_tls;
static pthread_key_t planes_key;
static pthread_once_t planes_once = PTHREAD_ONCE_INIT;
static int planes_key_ok;

static void planes_free(void *arg)
{
    planes_ctx *c = arg;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    c->cctx = NULL;
    c->dctx = NULL;
    c->registered = 0;
}

static void planes_make_key(void)
{
    planes_key_ok = pthread_key_create(&planes_key, planes_free) == 0;
}

/* Arranges for this thread's contexts to be freed when it exits; 0 if not
 * possible (then no context is created: it would leak). */
static int planes_register(void)
{
    pthread_once(&planes_once, planes_make_key);
    if (!planes_key_ok)
        return 0;
    if (!planes_tls.registered) {
        if (pthread_setspecific(planes_key, &planes_tls) != 0)
            return 0;
        planes_tls.registered = 1;
    }
    return 1;
}

/* Level 1 with a tiny hash table and long matches only. An exponent plane
 * is a few byte values with short, chance repeats: a 4-byte match costs a
 * sequence that Huffman-coded literals beat, and a level-1 table (2^14+
 * entries) found many of them. Measured per plane on trained weights and
 * AdamW state, 64-128 KiB planes (docs/CODEC.md, "The match finder"):
 * exponent planes 0.33 of raw instead of 0.37, 2.4x as fast to encode.
 * The frames are ordinary zstd frames: any decoder reads them. */
static ZSTD_CCtx *planes_cctx(void)
{
    if (!planes_tls.cctx && planes_register() && (planes_tls.cctx = ZSTD_createCCtx())) {
        ZSTD_CCtx *c = planes_tls.cctx;
        if (ZSTD_isError(
                ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, ST_PLANES_ZSTD_LEVEL)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, ST_PLANES_ZSTD_HASH_LOG)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_minMatch, ST_PLANES_ZSTD_MIN_MATCH))) {
            ZSTD_freeCCtx(c);
            planes_tls.cctx = NULL;
        }
    }
    return planes_tls.cctx;
}

static ZSTD_DCtx *planes_dctx(void)
{
    if (!planes_tls.dctx && planes_register())
        planes_tls.dctx = ZSTD_createDCtx();
    return planes_tls.dctx;
}

/* zstd of src[0..len) into dst (capacity cap); 0 unless it fits in cap and
 * is shorter than len. */
static size_t zstd_smaller(ZSTD_CCtx *cctx, const uint8_t *src, size_t len, uint8_t *dst,
                           size_t cap)
{
    if (cap >= len)
        cap = len - 1;
    if (len == 0 || cap == 0)
        return 0;
    size_t r = ZSTD_compress2(cctx, dst, cap, src, len); /* planes_cctx's parameters */
    return ZSTD_isError(r) ? 0 : r;
}

size_t st_planes_encode(const uint8_t *shuf, size_t len, size_t es, unsigned mask, uint8_t *dst,
                        size_t cap)
{
    size_t n = len / es, tail = len % es, pos = 0;
    ZSTD_CCtx *cctx = NULL;
    mask &= (1u << es) - 1;
    if (mask && !(cctx = planes_cctx()))
        return 0;
    for (size_t p = 0; p < es; p++) {
        const uint8_t *plane = shuf + p * n;
        if (cap - pos < ST_PLANES_WORD_LEN)
            return 0;
        uint8_t *word = dst + pos;
        pos += ST_PLANES_WORD_LEN;
        size_t z = (mask >> p & 1) ? zstd_smaller(cctx, plane, n, dst + pos, cap - pos) : 0;
        if (z) {
            st_le32_put(word, (uint32_t)z);
            pos += z;
            continue;
        }
        if (cap - pos < n)
            return 0;
        memcpy(dst + pos, plane, n);
        st_le32_put(word, (uint32_t)n | ST_PLANES_RAW_FLAG);
        pos += n;
    }
    if (cap - pos < tail)
        return 0;
    memcpy(dst + pos, shuf + es * n, tail);
    return pos + tail;
}

size_t st_planes_trial(const uint8_t *shuf, size_t len, size_t es, uint8_t *tmp, size_t tmp_cap,
                       unsigned *mask)
{
    size_t n = len / es, total = es * ST_PLANES_WORD_LEN + len % es;
    ZSTD_CCtx *cctx = planes_cctx();
    *mask = 0;
    if (!cctx)
        return 0;
    for (size_t p = 0; p < es; p++) {
        size_t z = zstd_smaller(cctx, shuf + p * n, n, tmp, tmp_cap);
        /* A plane that saves less is stored raw by st_planes_encode(). */
        if (z && z <= n * (100 - ST_PLANES_MIN_GAIN_PCT) / 100) {
            *mask |= 1u << p;
            total += z;
        } else {
            total += n;
        }
    }
    return total;
}

st_err st_planes_decode(const uint8_t *payload, size_t payload_len, size_t raw_len, size_t es,
                        uint8_t *shuf)
{
    size_t n = raw_len / es, tail = raw_len % es, pos = 0;
    ZSTD_DCtx *dctx = NULL;
    for (size_t p = 0; p < es; p++) {
        if (payload_len - pos < ST_PLANES_WORD_LEN)
            return st_seterr(ST_ERR_CORRUPT, "chunk planes: payload ends before plane %zu", p);
        uint32_t word = st_le32_get(payload + pos);
        size_t len = word & ~ST_PLANES_RAW_FLAG;
        const uint8_t *src = payload + pos + ST_PLANES_WORD_LEN;
        pos += ST_PLANES_WORD_LEN;
        if (len > payload_len - pos)
            return st_seterr(ST_ERR_CORRUPT,
                             "chunk planes: plane %zu claims %zu bytes, %zu are left", p, len,
                             payload_len - pos);
        if (word & ST_PLANES_RAW_FLAG) {
            if (len != n)
                return st_seterr(ST_ERR_CORRUPT,
                                 "chunk planes: raw plane %zu of %zu bytes, planes hold %zu", p,
                                 len, n);
            memcpy(shuf + p * n, src, n);
            pos += len;
            continue;
        }
        /* Our encoder stores zstd only when it shrinks the plane. */
        if (len == 0 || len >= n)
            return st_seterr(ST_ERR_CORRUPT,
                             "chunk planes: zstd plane %zu of %zu bytes for a %zu-byte plane", p,
                             len, n);
        /* A zstd frame proper: not a skippable frame, not a legacy format
         * our encoder never wrote. */
        if (len < 4 || st_le32_get(src) != ZSTD_MAGICNUMBER)
            return st_seterr(ST_ERR_CORRUPT, "chunk planes: plane %zu is not a zstd frame", p);
        if (ZSTD_getFrameContentSize(src, len) != (unsigned long long)n)
            return st_seterr(ST_ERR_CORRUPT,
                             "chunk planes: zstd frame of plane %zu does not declare %zu bytes", p,
                             n);
        size_t frame = ZSTD_findFrameCompressedSize(src, len);
        if (ZSTD_isError(frame) || frame != len)
            return st_seterr(ST_ERR_CORRUPT,
                             "chunk planes: plane %zu is not exactly one zstd frame", p);
        if (!dctx && !(dctx = planes_dctx()))
            return st_seterr(ST_ERR_NOMEM, "chunk planes: no memory for a zstd context");
        size_t got = ZSTD_decompressDCtx(dctx, shuf + p * n, n, src, len);
        if (ZSTD_isError(got) || got != n)
            return st_seterr(ST_ERR_CORRUPT, "chunk planes: zstd plane %zu is damaged (%s)", p,
                             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
        pos += len;
    }
    if (payload_len - pos != tail)
        return st_seterr(ST_ERR_CORRUPT,
                         "chunk planes: %zu bytes follow the planes, the tail is %zu",
                         payload_len - pos, tail);
    memcpy(shuf + es * n, payload + pos, tail);
    return ST_OK;
}
