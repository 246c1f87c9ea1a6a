/*
 * ut_format.h — what the byte-format tests (test_manifest, test_pack) share:
 * the golden files of tests/golden/ and the edits of their mutation fuzzers.
 *
 * Golden files keep a format change a deliberate act: ut_golden_check()
 * compares the encoder's bytes with the stored file, and UPDATE_GOLDEN=1
 * rewrites the file instead (docs/FORMATS.md). Include after ut.h.
 */
#ifndef UT_FORMAT_H
#define UT_FORMAT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_codec.h"
#include "util/st_hash.h"
#include "util/st_wire.h"
#include "ut.h"

/* Writes a raw-codec chunk encoding of raw[0..n) into out (the chunk
 * format by hand, so pack tests need no codec); returns its length. */
static inline size_t ut_encode_raw_chunk(const uint8_t *raw, size_t n, uint8_t *out)
{
    st_id id = st_id_of(raw, n);
    memcpy(out, "CKc1", 4);
    out[4] = ST_CODEC_RAW;
    out[5] = out[6] = out[7] = 0;
    st_le32_put(out + 8, (uint32_t)n);
    st_le32_put(out + 12, (uint32_t)n);
    memcpy(out + 16, id.b, ST_ID_LEN);
    if (n)
        memcpy(out + ST_CODEC_HEADER_LEN, raw, n);
    return ST_CODEC_HEADER_LEN + n;
}

/* tests/golden/NAME, found from this header's own path (tests/unit/). */
static inline void ut_golden_path(const char *name, char *out, size_t cap)
{
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(out, cap, "%.*s/../golden/%s", (int)(slash - file), file, name);
    else
        snprintf(out, cap, "../golden/%s", name);
}

/* Reads a golden file (up to 64 KiB) into *buf (malloc'd, caller frees).
 * Returns its length, or -1 (and says so) when the file is missing. */
static inline long ut_golden_read(const char *name, uint8_t **buf)
{
    char path[4096];
    ut_golden_path(name, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "missing golden file %s (run with UPDATE_GOLDEN=1 to create)\n", path);
        return -1;
    }
    size_t cap = 1 << 16, len = fread(*buf = malloc(cap), 1, cap, f);
    fclose(f);
    return (long)len;
}

/* Compares data with the golden file; UPDATE_GOLDEN=1 rewrites it instead. */
static inline void ut_golden_check(const char *name, const uint8_t *data, size_t len)
{
    const char *update = getenv("UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        char path[4096];
        ut_golden_path(name, path, sizeof path);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            CHECK(fwrite(data, 1, len, f) == len);
            CHECK(fclose(f) == 0);
            fprintf(stderr, "rewrote %s (%zu bytes)\n", path, len);
        }
        return;
    }
    uint8_t *want = NULL;
    long got = ut_golden_read(name, &want);
    CHECK(got == (long)len);
    int same = got == (long)len && memcmp(want, data, len) == 0;
    CHECK(same);
    if (!same)
        fprintf(stderr,
                "%s differs from the current encoder: a format change must be "
                "deliberate (UPDATE_GOLDEN=1, docs/FORMATS.md)\n",
                name);
    free(want);
}

/* The edits a format fuzzer makes itself (r % 6 == 3 or 4), at byte `at` of
 * buf; ctx is the caller's. */
typedef void ut_own_edit(st_bytes *buf, size_t at, uint64_t r, void *ctx);

/*
 * Makes 1-4 random edits to buf, drawn from *s: flip a bit, set a byte,
 * truncate, set a byte to 0x80 or 0xff, or (r % 6 == 3 or 4) the caller's
 * own edit. The draws are the same whatever `own` does, so a fixed seed
 * gives a fixed run.
 */
static inline void ut_mutate(st_bytes *buf, uint64_t *s, ut_own_edit *own, void *ctx)
{
    int edits = 1 + (int)(ut_rand_next(s) % 4);
    for (int k = 0; k < edits && buf->len; k++) {
        uint64_t r = ut_rand_next(s);
        size_t at = (size_t)(r >> 8) % buf->len;
        switch (r % 6) {
        case 0: buf->data[at] ^= (uint8_t)(1u << ((r >> 40) % 8)); break;
        case 1: buf->data[at] = (uint8_t)(r >> 32); break;
        case 2: buf->len = at; break;
        case 5: buf->data[at] = (r >> 33) & 1 ? 0x80 : 0xff; break;
        default: own(buf, at, r, ctx); break;
        }
    }
}

/* Inserts a copy of byte `at` before it (buf->len grows by one). */
static inline void ut_duplicate_byte(st_bytes *buf, size_t at)
{
    st_bytes_put_u8(buf, 0);
    memmove(buf->data + at + 1, buf->data + at, buf->len - at - 1);
}

#endif
