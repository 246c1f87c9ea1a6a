/*
 * fuzz_input — what the fuzz targets share: an exact-size private copy of
 * the input (any overread is an ASan report), often after a first byte that
 * picks a mode; for checksummed store objects, the checksum fixed up; and
 * the check that a failed decode left its output zeroed.
 */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_hash.h"
#include "util/st_wire.h"

/* A malloc'd copy of the size bytes at data, at exactly that size (one byte
 * when size is 0, so NULL means only out of memory). */
static inline uint8_t *fuzz_exact_copy(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (buf && size)
        memcpy(buf, data, size);
    return buf;
}

/* data = mode byte + payload. Returns the exact-size copy of the payload
 * (*len bytes), or NULL when there is no input (or no memory). */
static inline uint8_t *fuzz_mode_copy(const uint8_t *data, size_t size, size_t *len)
{
    if (size < 1)
        return NULL;
    *len = size - 1;
    return fuzz_exact_copy(data + 1, *len);
}

/* One of a target's checks, run on the payload (the input after its mode
 * byte). */
typedef void (*fuzz_mode_fn)(const uint8_t *payload, size_t len);

/* The entry point of a target with n checks: the lowest set bit i of the
 * mode byte (i < n - 1) picks modes[i], no such bit the last one; it runs
 * on fuzz_mode_copy()'s exact-size copy of the payload. Always 0. */
static inline int fuzz_run_mode(const uint8_t *data, size_t size, const fuzz_mode_fn *modes,
                                size_t n)
{
    size_t len, i = 0;
    uint8_t *payload = fuzz_mode_copy(data, size, &len);
    if (!payload)
        return 0;
    while (i + 1 < n && !(data[0] & (1u << i)))
        i++;
    modes[i](payload, len);
    free(payload);
    return 0;
}

/* fuzz_mode_copy() of a checksummed object: with bit 0 of the mode set, the
 * trailing XXH3-64 is recomputed over the body, so the fuzzer reaches the
 * structural checks instead of dying on the checksum. */
static inline uint8_t *fuzz_object_copy(const uint8_t *data, size_t size, size_t *len)
{
    uint8_t *buf = fuzz_mode_copy(data, size, len);
    if (buf && (data[0] & 1) && *len >= 8)
        st_le64_put(buf + *len - 8, st_hash64(buf, *len - 8));
    return buf;
}

static inline int fuzz_all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

#endif
