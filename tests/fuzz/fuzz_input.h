/*
 * fuzz_input — what the fuzz targets of checksummed store objects share:
 * an exact-size private copy of the input (any overread is an ASan report)
 * whose first byte is a mode, and the check that a failed decode left its
 * output zeroed.
 */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_hash.h"
#include "util/st_wire.h"

/* data = mode byte + object. Returns the malloc'd copy of the object (*len
 * bytes), or NULL when there is no input. With bit 0 of the mode set, the
 * trailing XXH3-64 is recomputed over the body, so the fuzzer reaches the
 * structural checks instead of dying on the checksum. */
static inline uint8_t *fuzz_object_copy(const uint8_t *data, size_t size, size_t *len)
{
    if (size < 1)
        return NULL;
    *len = size - 1;
    uint8_t *buf = malloc(*len ? *len : 1);
    if (!buf)
        return NULL;
    if (*len)
        memcpy(buf, data + 1, *len);
    if ((data[0] & 1) && *len >= 8)
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
