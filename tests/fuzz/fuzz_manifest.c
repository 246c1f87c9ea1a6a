/*
 * fuzz_manifest — libFuzzer target for st_manifest_decode().
 *
 * Input: one mode byte, then the candidate manifest. If bit 0 of the mode is
 * set, the trailing XXH3-64 is recomputed over the body first, so the fuzzer
 * reaches the structural checks instead of dying on the checksum. If bit 1
 * is set, the candidate is a manifest as st_manifest_canonical_bytes()
 * gives it (header, body length, a version 3 body not yet compressed, no
 * checksum): the target compresses what follows the body length into one
 * zstd frame and adds the checksum, so the fuzzer edits the body's fields
 * rather than the bytes of a frame.
 *
 * Properties checked (abort on violation):
 *   - the decoder returns OK, CORRUPT or UNSUPPORTED, and leaves *m zeroed on
 *     failure;
 *   - an accepted manifest is canonical: re-encoding yields the same bytes
 *     (version 3: the same header and decompressed body; the zstd frame
 *     itself may differ, st_manifest_canonical_bytes()).
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 *
 * Seeds (seeds/fuzz_manifest/): tests/golden/manifest_v1.bin, manifest_v2.bin
 * (version 2: hole extents) and manifest_v3.bin (version 3: bundles, a zstd
 * body), each prefixed with a 0x01 byte; and in mode bit 1 (0x02), the
 * version 3 golden manifest's body and a small one's (manifest_v3_body,
 * manifest_v3_small_body).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "fuzz_input.h"
#include "util/st_hash.h"
#include "format/st_manifest.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 1 if a and b encode one manifest (equal bytes but for a zstd frame). */
static int same_encoding(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    st_bytes ca = {0}, cb = {0};
    int same = st_manifest_canonical_bytes(a, alen, &ca) == ST_OK &&
               st_manifest_canonical_bytes(b, blen, &cb) == ST_OK && ca.len == cb.len &&
               memcmp(ca.data, cb.data, ca.len) == 0;
    st_bytes_free(&ca);
    st_bytes_free(&cb);
    return same;
}

/* Mode bit 1: frames p[0..len) as a version 3 manifest (see above) into an
 * exact-size copy; NULL if it has no body length. */
static uint8_t *frame_body(const uint8_t *p, size_t len, size_t *out_len)
{
    st_reader r;
    uint64_t body_len;
    if (len < 8)
        return NULL;
    st_reader_init(&r, p + 8, len - 8);
    if (st_get_varint(&r, &body_len))
        return NULL;
    size_t head = len - st_reader_left(&r), bound = ZSTD_compressBound(st_reader_left(&r));
    uint8_t *framed = malloc(head + bound + 8), *exact = NULL;
    if (!framed)
        return NULL;
    memcpy(framed, p, head);
    size_t n = ZSTD_compress(framed + head, bound, r.p, st_reader_left(&r), 1);
    if (!ZSTD_isError(n)) {
        st_le64_put(framed + head + n, st_hash64(framed, head + n));
        *out_len = head + n + 8;
        exact = fuzz_exact_copy(framed, *out_len);
    }
    free(framed);
    return exact;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len;
    uint8_t *buf;
    if (size && (data[0] & 2)) {
        uint8_t *payload = fuzz_mode_copy(data, size, &len);
        buf = payload ? frame_body(payload, len, &len) : NULL;
        free(payload);
    } else {
        buf = fuzz_object_copy(data, size, &len);
    }
    if (!buf)
        return 0;

    st_manifest m;
    st_err e = st_manifest_decode(buf, len, &m);
    if (e == ST_OK) {
        st_bytes re = {0};
        if (st_manifest_encode(&m, &re) != ST_OK || !same_encoding(re.data, re.len, buf, len))
            abort(); /* accepted but not canonical / not re-encodable */
        st_bytes_free(&re);
        st_manifest_free(&m);
    } else if ((e != ST_ERR_CORRUPT && e != ST_ERR_UNSUPPORTED && e != ST_ERR_NOMEM) ||
               !fuzz_all_zero(&m, sizeof m)) {
        abort();
    }
    free(buf);
    return 0;
}
