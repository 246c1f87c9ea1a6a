/*
 * st_shuffle — byte-plane shuffle/unshuffle (layout in st_shuffle.h).
 *
 * The loops are written per element size with restrict pointers and fixed
 * strides so that the compiler vectorises them (checked with the bench:
 * tests/bench/bench_codec reports shuffle/unshuffle GB/s). Any element size
 * other than 2 or 4 is a caller bug; the functions then copy unchanged so the
 * result is still the identity pair rather than garbage.
 *
 * Invariant: st_unshuffle(st_shuffle(x)) == x for every len and es.
 * No state, no allocation; thread-safe.
 */
#include "format/st_shuffle.h"

#include <string.h>

/* memcpy with a NULL pointer is undefined even for 0 bytes; empty input may be NULL. */
static void copy_bytes(uint8_t *restrict dst, const uint8_t *restrict src, size_t len)
{
    if (len)
        memcpy(dst, src, len);
}

static void shuffle2(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    uint8_t *restrict p0 = dst;
    uint8_t *restrict p1 = dst + n;
    for (size_t i = 0; i < n; i++) {
        p0[i] = src[2 * i];
        p1[i] = src[2 * i + 1];
    }
}

static void unshuffle2(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    const uint8_t *restrict p0 = src;
    const uint8_t *restrict p1 = src + n;
    for (size_t i = 0; i < n; i++) {
        dst[2 * i] = p0[i];
        dst[2 * i + 1] = p1[i];
    }
}

static void shuffle4(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    uint8_t *restrict p0 = dst;
    uint8_t *restrict p1 = dst + n;
    uint8_t *restrict p2 = dst + 2 * n;
    uint8_t *restrict p3 = dst + 3 * n;
    for (size_t i = 0; i < n; i++) {
        p0[i] = src[4 * i];
        p1[i] = src[4 * i + 1];
        p2[i] = src[4 * i + 2];
        p3[i] = src[4 * i + 3];
    }
}

static void unshuffle4(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    const uint8_t *restrict p0 = src;
    const uint8_t *restrict p1 = src + n;
    const uint8_t *restrict p2 = src + 2 * n;
    const uint8_t *restrict p3 = src + 3 * n;
    for (size_t i = 0; i < n; i++) {
        dst[4 * i] = p0[i];
        dst[4 * i + 1] = p1[i];
        dst[4 * i + 2] = p2[i];
        dst[4 * i + 3] = p3[i];
    }
}

/* One element-size-specific kernel over the n whole elements. */
typedef void plane_kernel(uint8_t *restrict dst, const uint8_t *restrict src, size_t n);

/*
 * What st_shuffle and st_unshuffle share: pick the kernel for es, run it
 * over the whole elements, and let the tail ride along unchanged so any
 * chunk length is shuffleable. Static and called with constant kernels, so
 * the compiler inlines it and the loops stay vectorised.
 */
static void run_planes(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, size_t es,
                       plane_kernel *two, plane_kernel *four)
{
    if (es != 2 && es != 4) {
        copy_bytes(dst, src, len);
        return;
    }
    size_t n = len / es;
    if (es == 2)
        two(dst, src, n);
    else
        four(dst, src, n);
    copy_bytes(dst + n * es, src + n * es, len - n * es);
}

void st_shuffle(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, size_t es)
{
    run_planes(dst, src, len, es, shuffle2, shuffle4);
}

void st_unshuffle(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, size_t es)
{
    run_planes(dst, src, len, es, unshuffle2, unshuffle4);
}
