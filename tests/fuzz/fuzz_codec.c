/*
 * fuzz_codec — libFuzzer target for st_codec.
 *
 * The first input byte picks a mode:
 *   even: the rest is an encoded chunk from a hostile store. Decoding it must
 *         return ST_OK, ST_ERR_CORRUPT or ST_ERR_UNSUPPORTED and never touch
 *         memory outside the buffers; an accepted chunk must hash to its id
 *         and re-encode to something that decodes to the same bytes.
 *   odd:  the rest is raw chunk data. encode → decode must give it back, the
 *         encoding must fit st_codec_bound().
 * Seeds (seeds/fuzz_codec): a chunk of every codec, zstd per plane (4, 5)
 * included, and fp32 / bf16 data that the encoder stores with them, so
 * the plane decoder and encoder are reached from the first run.
 * Buffers are allocated at exactly the sizes the contract promises so ASan
 * sees any overrun. Output is capped at 1 MiB so a header claiming 64 MiB is
 * refused rather than making every run allocate 64 MiB.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_codec.h"
#include "fuzz_input.h"

#define FUZZ_MAX_OUT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_roundtrip(const uint8_t *raw, size_t len)
{
    st_id id = st_id_of(raw, len);
    size_t cap = st_codec_bound(len);
    uint8_t *enc = malloc(cap + 1);
    uint8_t *scratch = malloc(st_codec_scratch_bound(len) + 1);
    uint8_t *back = malloc(len + 1);
    size_t enc_len = 0, back_len = 0;
    st_codec_id used;
    if (!enc || !scratch || !back)
        abort();
    if (st_codec_encode(raw, len, &id, enc, cap, &enc_len, scratch, &used) != ST_OK)
        abort();
    if (enc_len > cap)
        abort();
    if (st_codec_decode(enc, enc_len, &id, back, len, &back_len, scratch) != ST_OK)
        abort();
    if (back_len != len || (len && memcmp(back, raw, len) != 0))
        abort();
    free(enc);
    free(scratch);
    free(back);
}

static void fuzz_decode(const uint8_t *enc, size_t enc_len)
{
    st_chunk_header h;
    size_t out_cap = FUZZ_MAX_OUT;
    if (st_codec_header(enc, enc_len, &h) == ST_OK && h.raw_len < out_cap)
        out_cap = h.raw_len;
    uint8_t *out = malloc(out_cap + 1);
    uint8_t *scratch = malloc(st_codec_scratch_bound(out_cap) + 1);
    size_t raw_len = 0;
    if (!out || !scratch)
        abort();
    st_err e = st_codec_decode(enc, enc_len, NULL, out, out_cap, &raw_len, scratch);
    if (e != ST_OK && e != ST_ERR_CORRUPT && e != ST_ERR_UNSUPPORTED)
        abort();
    if (e == ST_OK) {
        st_id id = st_id_of(out, raw_len);
        if (raw_len != h.raw_len || st_id_cmp(&id, &h.id) != 0)
            abort();
        fuzz_roundtrip(out, raw_len);
    }
    free(out);
    free(scratch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fuzz_mode_fn modes[] = {fuzz_roundtrip, fuzz_decode}; /* mode bit 0 set, clear */
    return fuzz_run_mode(data, size, modes, 2);
}
