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
 *     entries must match what was written. Bit 2 set: the pack is sealed
 *     (CKp2, a fixed key) and read back with the sealed decoder and every
 *     record opened.
 *   mode bits 1 clear, 2 set — sealed decoder: data is the tail of a sealed
 *     pack under a fixed key and salt; it must be refused (the tag) or
 *     decode to entries inside the chunk area.
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
    } else if ((err != ST_ERR_CORRUPT && err != ST_ERR_UNSUPPORTED && err != ST_ERR_NOMEM &&
                err != ST_ERR_KEY) || /* a sealed pack's footer (CKp2) */
               e ||
               n) {
        abort();
    }
    free(tail);
}

/* The fixed keyring of the sealed modes (one key of 32 bytes 0x42). */
static st_keyring *fuzz_keyring(void)
{
    static st_keyring *kr;
    uint8_t key[ST_KEY_LEN];
    memset(key, 0x42, sizeof key);
    if (!kr && (st_keyring_new(&kr) || st_keyring_add(kr, key)))
        abort();
    return kr;
}

static void check_sealed_decoder(const uint8_t *data, size_t len, uint64_t chunk_area)
{
    st_pack_seal seal;
    memset(&seal, 0, sizeof seal);
    st_crypt_objkey k;
    memcpy(seal.key_id, st_keyring_sealing(fuzz_keyring())->id, ST_KEY_ID_LEN);
    if (st_pack_key(fuzz_keyring(), "f.pack", &seal, &k))
        abort();
    uint8_t *tail = malloc(len ? len : 1);
    if (!tail)
        abort();
    if (len)
        memcpy(tail, data, len);
    st_pack_entry *e = NULL;
    size_t n = 0;
    st_err err =
        st_pack_sealed_trailer_decode(&k, "f.pack", &seal, tail, len, chunk_area + len, &e, &n);
    if (err == ST_OK) {
        for (size_t i = 0; i < n; i++)
            if (e[i].offset < ST_PACK_HEADER_LEN || e[i].offset + e[i].stored_len > chunk_area)
                abort();
    } else if ((err != ST_ERR_CORRUPT && err != ST_ERR_UNSUPPORTED && err != ST_ERR_KEY &&
                err != ST_ERR_NOMEM) ||
               e || n) {
        abort();
    }
    free(e);
    free(tail);
    st_crypt_objkey_wipe(&k);
}

static void check_writer(const uint8_t *data, size_t len, int sealed)
{
    st_pack_writer w = {0};
    if (sealed)
        st_pack_writer_set_keyring(&w, fuzz_keyring());
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
        uint32_t stored = (uint32_t)(ST_CODEC_HEADER_LEN + n + (sealed ? ST_CRYPT_TAG_LEN : 0));
        want[nwant++] = (st_pack_entry){id, off, stored, (uint32_t)n, ST_CODEC_RAW};
        data += 1 + n;
        len -= 1 + n;
    }
    st_id pack_id;
    if (st_pack_finish(&w, &pack_id) != ST_OK)
        abort();
    st_id whole = st_id_of(w.data.data, w.data.len);
    uint32_t tlen, count;
    int is_sealed = -1;
    if (st_id_cmp(&whole, &pack_id) ||
        st_pack_any_footer_decode(w.data.data + w.data.len - ST_PACK_FOOTER_LEN, &tlen, &count,
                                  &is_sealed) ||
        count != nwant || is_sealed != sealed)
        abort();
    size_t tail = (size_t)tlen + ST_PACK_FOOTER_LEN;
    const uint8_t *tail_at = w.data.data + w.data.len - tail;
    st_pack_entry *e = NULL;
    size_t n = 0;
    st_pack_seal seal;
    st_crypt_objkey k;
    if (sealed) {
        if (!st_pack_writer_seal(&w, &seal) || st_pack_key(fuzz_keyring(), "f.pack", &seal, &k) ||
            st_pack_sealed_trailer_decode(&k, "f.pack", &seal, tail_at, tail, w.data.len, &e, &n))
            abort();
    } else if (st_pack_trailer_decode(tail_at, tail, w.data.len, &e, &n)) {
        abort();
    }
    if (n != nwant)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (st_id_cmp(&e[i].id, &want[i].id) || e[i].offset != want[i].offset ||
            e[i].stored_len != want[i].stored_len || e[i].raw_len != want[i].raw_len ||
            e[i].codec != want[i].codec)
            abort();
        uint8_t enc[ST_CODEC_HEADER_LEN + 256];
        if (sealed && (st_pack_open_record(&k, "f.pack", &seal, e[i].offset,
                                           w.data.data + e[i].offset, e[i].stored_len, enc) ||
                       memcmp(enc + 16, want[i].id.b, ST_ID_LEN)))
            abort();
    }
    if (sealed)
        st_crypt_objkey_wipe(&k);
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
        check_writer(data + 5, size - 5, (mode & 4) != 0);
    else if (mode & 4)
        check_sealed_decoder(data + 5, size - 5, chunk_area);
    else
        check_decoder(data + 5, size - 5, chunk_area, mode & 1);
    return 0;
}
