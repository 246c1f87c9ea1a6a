/*
 * fuzz_manifest — libFuzzer target for st_manifest_decode().
 *
 * Input: one mode byte, then the candidate manifest. If bit 0 of the mode is
 * set, the trailing XXH3-64 is recomputed over the body first, so the fuzzer
 * reaches the structural checks instead of dying on the checksum.
 *
 * Properties checked (abort on violation):
 *   - the decoder returns OK, CORRUPT or UNSUPPORTED, and leaves *m zeroed on
 *     failure;
 *   - an accepted manifest is canonical: re-encoding yields the same bytes.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 *
 * Seeds: tests/golden/manifest_v1.bin and manifest_v2.bin (version 2: hole
 * extents), each prefixed with a 0x01 byte (seeds/fuzz_manifest/).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "util/st_hash.h"
#include "format/st_manifest.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len;
    uint8_t *buf = fuzz_object_copy(data, size, &len);
    if (!buf)
        return 0;

    st_manifest m;
    st_err e = st_manifest_decode(buf, len, &m);
    if (e == ST_OK) {
        st_bytes re = {0};
        if (st_manifest_encode(&m, &re) != ST_OK || re.len != len || memcmp(re.data, buf, len))
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
