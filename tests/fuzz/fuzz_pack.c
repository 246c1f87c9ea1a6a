/*
 * fuzz_pack — libFuzzer target for the pack trailer decoder and the writer.
 *
 * Input: mode byte, 4-byte LE chunk-area size, then data.
 *   mode bit 1 clear — decoder: data is a pack tail (trailer + footer) of a
 *     pack whose chunk area has the given size; bit 0 set recomputes the
 *     footer's trailer checksum so structural checks are reached. Accepted
 *     entries must lie in the chunk area in ascending, non-overlapping order,
 *     and re-encode to exactly the trailer bytes.
 *   mode bit 1 set — writer: data is cut into raw chunks (1 length byte, then
 *     that many bytes), written into a pack, finished, and decoded back; the
 *     entries must match what was written.
 * Any violation aborts; ASan/UBSan/LSan catch memory errors and leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_hash.h"
#include "format/st_pack.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_decoder(const uint8_t *data, size_t len, uint64_t chunk_area, int fix_sum)
{
    uint8_t *tail = malloc(len ? len : 1);
    if (!tail)
        return;
    if (len)
        memcpy(tail, data, len);
    if (fix_sum && len >= ST_PACK_FOOTER_LEN) {
        uint32_t tlen = st_le32_get(tail + len - ST_PACK_FOOTER_LEN);
        if (tlen <= len - ST_PACK_FOOTER_LEN)
            st_le64_put(tail + len - 16, st_hash64(tail + len - ST_PACK_FOOTER_LEN - tlen, tlen));
    }
    st_pack_entry *e = NULL;
    size_t n = 0;
    st_err err = st_pack_trailer_decode(tail, len, chunk_area + len, &e, &n);
    if (err == ST_OK) {
        st_bytes re = {0};
        uint64_t end = 0;
        for (size_t i = 0; i < n; i++) {
            if (e[i].offset < end || e[i].stored_len < ST_CODEC_HEADER_LEN ||
                e[i].offset + e[i].stored_len > chunk_area || e[i].codec > ST_CODEC_ZSTD_SHUF4)
                abort();
            end = e[i].offset + e[i].stored_len;
            st_bytes_append(&re, e[i].id.b, ST_ID_LEN);
            st_bytes_put_varint(&re, e[i].offset);
            st_bytes_put_varint(&re, e[i].stored_len);
            st_bytes_put_varint(&re, e[i].raw_len);
            st_bytes_put_u8(&re, e[i].codec);
        }
        if (re.len + ST_PACK_FOOTER_LEN != len || (re.len && memcmp(re.data, tail, re.len)))
            abort();
        st_bytes_free(&re);
        free(e);
    } else if ((err != ST_ERR_CORRUPT && err != ST_ERR_UNSUPPORTED && err != ST_ERR_NOMEM) || e ||
               n) {
        abort();
    }
    free(tail);
}

static void check_writer(const uint8_t *data, size_t len)
{
    st_pack_writer w = {0};
    st_pack_entry want[256];
    size_t nwant = 0;
    while (len && nwant < 256) {
        size_t n = data[0] < len - 1 ? data[0] : len - 1;
        const uint8_t *raw = data + 1;
        uint8_t *dst = st_pack_append_begin(&w, ST_CODEC_HEADER_LEN + n);
        if (!dst)
            abort();
        st_id id = st_id_of(raw, n);
        memcpy(dst, "CKc1", 4);
        memset(dst + 4, 0, 4); /* raw codec, reserved */
        st_le32_put(dst + 8, (uint32_t)n);
        st_le32_put(dst + 12, (uint32_t)n);
        memcpy(dst + 16, id.b, ST_ID_LEN);
        memcpy(dst + ST_CODEC_HEADER_LEN, raw, n);
        uint64_t off;
        if (st_pack_append_commit(&w, ST_CODEC_HEADER_LEN + n, &off) != ST_OK)
            abort();
        want[nwant++] = (st_pack_entry){id, off, (uint32_t)(ST_CODEC_HEADER_LEN + n), (uint32_t)n,
                                        ST_CODEC_RAW};
        data += 1 + n;
        len -= 1 + n;
    }
    st_id pack_id;
    if (st_pack_finish(&w, &pack_id) != ST_OK)
        abort();
    st_id whole = st_id_of(w.data.data, w.data.len);
    uint32_t tlen, count;
    if (st_id_cmp(&whole, &pack_id) ||
        st_pack_footer_decode(w.data.data + w.data.len - ST_PACK_FOOTER_LEN, &tlen, &count) ||
        count != nwant)
        abort();
    size_t tail = (size_t)tlen + ST_PACK_FOOTER_LEN;
    st_pack_entry *e = NULL;
    size_t n = 0;
    if (st_pack_trailer_decode(w.data.data + w.data.len - tail, tail, w.data.len, &e, &n) ||
        n != nwant)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (st_id_cmp(&e[i].id, &want[i].id) || e[i].offset != want[i].offset ||
            e[i].stored_len != want[i].stored_len || e[i].raw_len != want[i].raw_len ||
            e[i].codec != want[i].codec)
            abort();
    }
    free(e);
    st_pack_writer_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint8_t mode = data[0];
    uint64_t chunk_area = st_le32_get(data + 1) % (ST_PACK_MAX_SIZE / 2);
    if (mode & 2)
        check_writer(data + 5, size - 5);
    else
        check_decoder(data + 5, size - 5, chunk_area, mode & 1);
    return 0;
}
