/*
 * test_pack — pack writer and trailer decoder.
 *
 * Chunks are encoded by hand (raw codec: 32-byte st_codec header + the raw
 * bytes), so these tests do not depend on the codec module. Covers: round
 * trip with offsets pointing at chunk headers, writer reuse, commit
 * validation, every truncation and byte flip of a trailer, hostile trailers
 * with a valid checksum, a deterministic mutation-fuzz loop, and the golden
 * file tests/golden/pack_v1.bin (UPDATE_GOLDEN=1 rewrites it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_hash.h"
#include "format/st_pack.h"
#include "util/st_wire.h"
#include "ut.h"
#include "ut_format.h"

/* ---- helpers ---- */

/* Appends one raw chunk of n pseudo-random bytes (seed) to w. */
static st_err add_chunk(st_pack_writer *w, size_t n, uint64_t seed, uint64_t *offset)
{
    uint8_t *raw = malloc(n ? n : 1);
    ut_rand_fill(raw, n, seed);
    uint8_t *dst = st_pack_append_begin(w, ST_CODEC_HEADER_LEN + n);
    st_err e = ST_ERR_NOMEM;
    if (dst) {
        size_t len = ut_encode_raw_chunk(raw, n, dst);
        e = st_pack_append_commit(w, len, offset);
    }
    free(raw);
    return e;
}

/* Chunk sizes for pack i of a test: varied, including 0 and a few large. */
static size_t chunk_size(size_t i, uint64_t seed)
{
    uint64_t s = seed * 977 + i + 1;
    uint64_t r = ut_rand_next(&s);
    if (i % 7 == 3)
        return 0;
    if (i % 11 == 5)
        return 100000 + r % 50000;
    return r % 3000;
}

/* Builds a finished pack of n chunks into w; per-chunk offsets into offs. */
static void build_pack(st_pack_writer *w, size_t n, uint64_t seed, uint64_t *offs, st_id *pack_id)
{
    for (size_t i = 0; i < n; i++)
        CHECK_OK(add_chunk(w, chunk_size(i, seed), seed + i, offs ? &offs[i] : NULL));
    CHECK_OK(st_pack_finish(w, pack_id));
}

/* Tail = trailer + footer of a finished pack. */
static size_t tail_len_of(const st_pack_writer *w)
{
    uint32_t tlen = 0, count = 0;
    const uint8_t *footer = w->data.data + w->data.len - ST_PACK_FOOTER_LEN;
    if (st_pack_footer_decode(footer, &tlen, &count))
        return 0;
    return tlen + ST_PACK_FOOTER_LEN;
}

/* Decodes tail from a private exact-size copy so ASan sees any overread. */
static st_err decode_copy(const uint8_t *tail, size_t len, uint64_t pack_size, st_pack_entry **e,
                          size_t *n)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, tail, len);
    st_err err = st_pack_trailer_decode(copy, len, pack_size, e, n);
    free(copy);
    return err;
}

/* Builds a tail (trailer bytes + a footer with a correct checksum). */
static void make_tail(st_bytes *tail, const st_bytes *trailer, uint32_t count)
{
    st_bytes_clear(tail);
    st_bytes_append(tail, trailer->data, trailer->len);
    st_bytes_put_le32(tail, (uint32_t)trailer->len);
    st_bytes_put_le32(tail, count);
    st_bytes_put_le64(tail, st_hash64(trailer->data, trailer->len));
    st_bytes_put_le32(tail, 0);
    st_bytes_append(tail, "CKp1", 4);
}

static void put_entry(st_bytes *t, uint8_t idbyte, uint64_t off, uint64_t stored, uint64_t raw,
                      uint8_t codec)
{
    uint8_t id[ST_ID_LEN];
    memset(id, idbyte, sizeof id);
    st_bytes_append(t, id, sizeof id);
    st_bytes_put_varint(t, off);
    st_bytes_put_varint(t, stored);
    st_bytes_put_varint(t, raw);
    st_bytes_put_u8(t, codec);
}

/* ---- cases ---- */

static void test_roundtrip(void)
{
    enum { N = 60 };
    st_pack_writer w = {0};
    uint64_t offs[N];
    st_id pack_id;
    build_pack(&w, N, 42, offs, &pack_id);

    st_id whole = st_id_of(w.data.data, w.data.len);
    CHECK(st_id_cmp(&whole, &pack_id) == 0);

    uint32_t tlen = 0, count = 0;
    CHECK_OK(st_pack_footer_decode(w.data.data + w.data.len - ST_PACK_FOOTER_LEN, &tlen, &count));
    CHECK(count == N);
    size_t tail = tlen + ST_PACK_FOOTER_LEN;
    CHECK(tail < w.data.len);

    st_pack_entry *e = NULL;
    size_t n = 0;
    CHECK_OK(decode_copy(w.data.data + w.data.len - tail, tail, w.data.len, &e, &n));
    CHECK(n == N);
    uint64_t expect_off = 0;
    for (size_t i = 0; e && i < n && i < N; i++) {
        size_t raw_len = chunk_size(i, 42);
        uint8_t *raw = malloc(raw_len + 1);
        ut_rand_fill(raw, raw_len, 42 + i);
        st_id id = st_id_of(raw, raw_len);
        CHECK(e[i].offset == offs[i]);
        CHECK(e[i].offset == expect_off);
        CHECK(e[i].stored_len == ST_CODEC_HEADER_LEN + raw_len);
        CHECK(e[i].raw_len == raw_len);
        CHECK(e[i].codec == ST_CODEC_RAW);
        CHECK(st_id_cmp(&e[i].id, &id) == 0);
        /* The offset points at this chunk's header, followed by its bytes. */
        const uint8_t *at = w.data.data + e[i].offset;
        CHECK(memcmp(at, "CKc1", 4) == 0);
        CHECK(memcmp(at + 16, id.b, ST_ID_LEN) == 0);
        CHECK(raw_len == 0 || memcmp(at + ST_CODEC_HEADER_LEN, raw, raw_len) == 0);
        expect_off += e[i].stored_len;
        free(raw);
    }
    CHECK(expect_off + tail == w.data.len);
    free(e);
    st_pack_writer_free(&w);
}

static void test_empty_pack(void)
{
    st_pack_writer w = {0};
    st_id id;
    CHECK_OK(st_pack_finish(&w, &id));
    CHECK(w.data.len == ST_PACK_FOOTER_LEN);
    st_pack_entry dummy, *e = &dummy; /* must be overwritten */
    size_t n = 99;
    CHECK_OK(decode_copy(w.data.data, w.data.len, w.data.len, &e, &n));
    CHECK(n == 0 && e == NULL);
    st_id whole = st_id_of(w.data.data, w.data.len);
    CHECK(st_id_cmp(&whole, &id) == 0);
    st_pack_writer_free(&w);
}

static void test_reset_reuse(void)
{
    st_pack_writer a = {0}, b = {0};
    st_id id1, id2, id3;
    build_pack(&a, 10, 7, NULL, &id1);
    st_pack_writer_reset(&a);
    CHECK(a.count == 0 && a.data.len == 0 && !a.finished);
    build_pack(&a, 12, 8, NULL, &id2);
    build_pack(&b, 12, 8, NULL, &id3);
    /* A reused writer yields exactly what a fresh one does. */
    CHECK(st_id_cmp(&id2, &id3) == 0);
    CHECK(a.data.len == b.data.len && memcmp(a.data.data, b.data.data, a.data.len) == 0);
    CHECK(st_id_cmp(&id1, &id2) != 0);
    st_pack_writer_free(&a);
    st_pack_writer_free(&b);
}

static void test_commit_rejects(void)
{
    st_pack_writer w = {0};
    uint8_t raw[100];
    ut_rand_fill(raw, sizeof raw, 3);
    CHECK_OK(add_chunk(&w, 50, 1, NULL));
    size_t size_before = st_pack_writer_size(&w);

    struct {
        const char *what;
        size_t at;
        uint8_t val;
        long len_delta;
    } cases[] = {
        {"bad magic", 0, 'X', 0},
        {"magic version", 3, '2', 0},
        {"codec 6", 4, 6, 0},
        {"reserved", 6, 1, 0},
        {"payload too long", 12, 101, 0},
        {"enc_len short", 0, 'C', -1},
        {"enc_len long", 0, 'C', +1},
        {"raw above max", 11, 0x10, 0}, /* raw_len = 0x10000064 > 64 MiB */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *dst = st_pack_append_begin(&w, ST_CODEC_HEADER_LEN + sizeof raw + 1);
        CHECK(dst != NULL);
        if (!dst)
            continue;
        size_t len = ut_encode_raw_chunk(raw, sizeof raw, dst);
        dst[cases[i].at] = cases[i].val;
        st_err e = st_pack_append_commit(&w, (size_t)((long)len + cases[i].len_delta), NULL);
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "case '%s' not rejected\n", cases[i].what);
        CHECK_ERR(e, ST_ERR_INVALID);
        CHECK(w.count == 1 && st_pack_writer_size(&w) == size_before && w.trailer.len > 0);
    }
    /* More bytes than were reserved. */
    uint8_t *dst = st_pack_append_begin(&w, 10);
    CHECK(dst != NULL);
    CHECK_ERR(st_pack_append_commit(&w, w.data.cap - w.data.len + 1, NULL), ST_ERR_INVALID);

    st_id id;
    CHECK_OK(st_pack_finish(&w, &id));
    CHECK_ERR(st_pack_finish(&w, &id), ST_ERR_INVALID);
    CHECK(st_pack_append_begin(&w, 64) == NULL);
    CHECK_ERR(st_pack_append_commit(&w, 32, NULL), ST_ERR_INVALID);
    st_pack_writer_reset(&w);
    CHECK_OK(add_chunk(&w, 5, 2, NULL));
    st_pack_writer_free(&w);
}

static void test_truncations_and_flips(void)
{
    st_pack_writer w = {0};
    build_pack(&w, 20, 9, NULL, NULL);
    size_t tail = tail_len_of(&w);
    CHECK(tail > ST_PACK_FOOTER_LEN);
    const uint8_t *t = w.data.data + w.data.len - tail;
    st_pack_entry *e = NULL;
    size_t n = 0;

    /* Every shorter tail (the last k bytes of the pack) is refused. */
    size_t refused = 0;
    for (size_t k = 0; k < tail; k++) {
        st_err err = decode_copy(w.data.data + w.data.len - k, k, w.data.len, &e, &n);
        refused += err == ST_ERR_CORRUPT && e == NULL && n == 0;
    }
    CHECK(refused == tail);

    /* Every single-bit and whole-byte flip is refused. */
    uint8_t *copy = malloc(tail);
    refused = 0;
    for (size_t i = 0; i < tail; i++) {
        for (int m = 0; m < 2; m++) {
            memcpy(copy, t, tail);
            copy[i] ^= m ? 0xff : 0x01;
            st_err err = decode_copy(copy, tail, w.data.len, &e, &n);
            refused += err == ST_ERR_CORRUPT && e == NULL;
            if (err == ST_OK)
                free(e);
        }
    }
    CHECK(refused == 2 * tail);
    free(copy);

    /* Pack sizes that contradict the tail. */
    CHECK_ERR(decode_copy(t, tail, tail - 1, &e, &n), ST_ERR_CORRUPT);
    CHECK_ERR(decode_copy(t, tail, w.data.len - 1, &e, &n), ST_ERR_CORRUPT); /* last chunk out */
    CHECK_ERR(decode_copy(t, tail, (uint64_t)ST_PACK_MAX_SIZE + 1, &e, &n), ST_ERR_CORRUPT);
    CHECK_OK(decode_copy(t, tail, w.data.len + 100, &e, &n)); /* gap before trailer is fine */
    free(e);
    st_pack_writer_free(&w);
}

/* Hostile trailers whose checksum is valid: only the structural checks stand. */
static void test_hostile_valid_checksum(void)
{
    st_bytes tr = {0}, tail = {0};
    st_pack_entry *e = NULL;
    size_t n = 0;
    const uint64_t area = 10000;

    /* Baseline: two adjacent valid entries decode. */
    put_entry(&tr, 1, 0, 100, 68, 0);
    put_entry(&tr, 2, 100, 200, 500, 1);
    make_tail(&tail, &tr, 2);
    CHECK_OK(decode_copy(tail.data, tail.len, area + tail.len, &e, &n));
    CHECK(n == 2 && e && e[1].offset == 100 && e[1].codec == 1 && e[1].raw_len == 500);
    free(e);

    struct {
        const char *what;
        uint64_t off1, stored1, raw1;
        uint8_t codec1;
        uint32_t count_delta;
        int extra_byte;
    } cases[] = {
        {"overlap", 99, 200, 1, 0, 0, 0},
        {"descending", 0, 200, 1, 0, 0, 0},
        {"beyond area", 9900, 101, 1, 0, 0, 0},
        {"offset huge", UINT64_MAX - 10, 100, 1, 0, 0, 0},
        {"stored < header", 100, 31, 1, 0, 0, 0},
        {"stored > u32", 100, (uint64_t)UINT32_MAX + 1, 1, 0, 0, 0},
        {"raw > max", 100, 200, (uint64_t)ST_CODEC_MAX_RAW + 1, 0, 0, 0},
        {"unknown codec", 100, 200, 1, 6, 0, 0},
        {"count too high", 100, 200, 1, 0, 1, 0},
        {"count too low", 100, 200, 1, 0, (uint32_t)-1, 0},
        {"trailing byte", 100, 200, 1, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_bytes_clear(&tr);
        put_entry(&tr, 1, 0, 100, 68, 0);
        put_entry(&tr, 2, cases[i].off1, cases[i].stored1, cases[i].raw1, cases[i].codec1);
        if (cases[i].extra_byte)
            st_bytes_put_u8(&tr, 0);
        make_tail(&tail, &tr, 2 + cases[i].count_delta);
        st_err err = decode_copy(tail.data, tail.len, area + tail.len, &e, &n);
        /* A codec past the known ones is a newer release's, not damage. */
        st_err want = cases[i].codec1 > ST_CODEC_ZSTD_SHUF4 ? ST_ERR_UNSUPPORTED : ST_ERR_CORRUPT;
        if (err != want)
            fprintf(stderr, "case '%s' not rejected as it should be\n", cases[i].what);
        CHECK_ERR(err, want);
        CHECK(e == NULL && n == 0);
    }

    /* Overlong varint offset (0 as 0x80 0x00). */
    st_bytes_clear(&tr);
    uint8_t id[ST_ID_LEN] = {0};
    st_bytes_append(&tr, id, sizeof id);
    st_bytes_append(&tr, "\x80\x00", 2);
    st_bytes_append(&tr, "\x40\x01\x00", 3);
    make_tail(&tail, &tr, 1);
    CHECK_ERR(decode_copy(tail.data, tail.len, area + tail.len, &e, &n), ST_ERR_CORRUPT);

    /* Footer fields: huge count, huge trailer length, reserved, magic, length mismatch. */
    st_bytes_clear(&tr);
    put_entry(&tr, 1, 0, 100, 68, 0);
    make_tail(&tail, &tr, 1);
    uint8_t *f = tail.data + tail.len - ST_PACK_FOOTER_LEN;
    uint8_t saved[ST_PACK_FOOTER_LEN];
    memcpy(saved, f, sizeof saved);
    uint32_t tl, cnt;
    st_le32_put(f + 4, UINT32_MAX);
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_CORRUPT);
    CHECK_ERR(decode_copy(tail.data, tail.len, area + tail.len, &e, &n), ST_ERR_CORRUPT);
    memcpy(f, saved, sizeof saved);
    st_le32_put(f, UINT32_MAX);
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_CORRUPT);
    memcpy(f, saved, sizeof saved);
    st_le32_put(f, (uint32_t)tr.len - 1);
    CHECK_ERR(decode_copy(tail.data, tail.len, area + tail.len, &e, &n), ST_ERR_CORRUPT);
    memcpy(f, saved, sizeof saved);
    st_le32_put(f + 16, 1);
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_CORRUPT);
    memcpy(f, saved, sizeof saved);
    f[23] = '2'; /* a sealed pack's footer: never read as a plain one
                  * (test_pack_sealed has the real ones: ST_ERR_KEY) */
    CHECK(st_pack_footer_decode(f, &tl, &cnt) != ST_OK);
    f[23] = '3'; /* a newer release's pack format */
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_UNSUPPORTED);
    f[23] = '0'; /* not a version that ever was: damage */
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_CORRUPT);
    f[22] = 'x';
    f[23] = '2';
    CHECK_ERR(st_pack_footer_decode(f, &tl, &cnt), ST_ERR_CORRUPT);
    memcpy(f, saved, sizeof saved);
    CHECK_OK(st_pack_footer_decode(f, &tl, &cnt));
    CHECK(tl == tr.len && cnt == 1);

    st_bytes_free(&tr);
    st_bytes_free(&tail);
}

/* Re-encodes decoded entries as a trailer (what the writer would emit). */
static void reencode_trailer(const st_pack_entry *e, size_t n, st_bytes *out)
{
    st_bytes_clear(out);
    for (size_t i = 0; i < n; i++) {
        st_bytes_append(out, e[i].id.b, ST_ID_LEN);
        st_bytes_put_varint(out, e[i].offset);
        st_bytes_put_varint(out, e[i].stored_len);
        st_bytes_put_varint(out, e[i].raw_len);
        st_bytes_put_u8(out, e[i].codec);
    }
}

/*
 * Mutation fuzzing without libFuzzer: random edits of a valid tail, with the
 * footer checksum recomputed most of the time so the structural checks are
 * reached. Whatever is accepted must satisfy the decoder's promises.
 */
/* The pack fuzzer's own edits: duplicate a byte (3), or move the footer's
 * chunk count (ctx, a uint32_t) by -1, 0 or +1 (4). */
static void duplicate_byte_or_recount(st_bytes *buf, size_t at, uint64_t r, void *ctx)
{
    if (r % 6 == 3)
        ut_duplicate_byte(buf, at);
    else
        *(uint32_t *)ctx += (uint32_t)((r >> 32) % 3) - 1;
}

static void test_mutation_fuzz(void)
{
    st_pack_writer w = {0};
    build_pack(&w, 12, 11, NULL, NULL);
    size_t tail = tail_len_of(&w);
    const uint8_t *orig = w.data.data + w.data.len - tail;
    size_t chunk_area = w.data.len - tail;
    uint64_t s = 0x5eed;
    st_bytes buf = {0}, re = {0};
    size_t accepted = 0, rejected = 0, bad = 0;

    for (int it = 0; it < 20000; it++) {
        st_bytes_clear(&buf);
        st_bytes_append(&buf, orig, tail - ST_PACK_FOOTER_LEN); /* trailer only */
        uint32_t count = w.count;
        ut_mutate(&buf, &s, duplicate_byte_or_recount, &count);
        st_bytes t2 = {0};
        make_tail(&t2, &buf, count);
        if (ut_rand_next(&s) % 8 == 0) /* sometimes leave the checksum stale */
            t2.data[t2.len - 16] ^= 1;
        uint64_t pack_size = chunk_area + t2.len;
        st_pack_entry *e = NULL;
        size_t n = 0;
        st_err err = decode_copy(t2.data, t2.len, pack_size, &e, &n);
        if (err == ST_OK) {
            accepted++;
            uint64_t end = 0;
            for (size_t i = 0; i < n; i++) {
                if (e[i].offset < end || e[i].stored_len < ST_CODEC_HEADER_LEN ||
                    e[i].offset + e[i].stored_len > chunk_area || e[i].codec > ST_CODEC_ZSTD_SHUF4)
                    bad++;
                end = e[i].offset + e[i].stored_len;
            }
            /* Accepted trailers are canonical: re-encoding gives the same bytes. */
            reencode_trailer(e, n, &re);
            if (re.len != buf.len || (re.len && memcmp(re.data, buf.data, re.len) != 0))
                bad++;
            free(e);
        } else {
            rejected++;
            /* Damage, or a codec of a newer release (ST_ERR_UNSUPPORTED). */
            if ((err != ST_ERR_CORRUPT && err != ST_ERR_UNSUPPORTED) || e != NULL || n != 0)
                bad++;
        }
        st_bytes_free(&t2);
    }
    fprintf(stderr, "  pack mutation fuzz: %zu accepted, %zu rejected\n", accepted, rejected);
    CHECK(bad == 0);
    CHECK(rejected > 0);
    CHECK(accepted > 0); /* e.g. a flipped id byte is still a valid pack */
    st_bytes_free(&buf);
    st_bytes_free(&re);
    st_pack_writer_free(&w);
}

/* A fixed, tiny pack: three chunks (one empty) with fixed contents. */
static void test_golden(void)
{
    static const char *contents[] = {"hello, checkpoint", "", "0123456789abcdef0123456789"};
    st_pack_writer w = {0};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(contents[i]);
        uint8_t *dst = st_pack_append_begin(&w, ST_CODEC_HEADER_LEN + n);
        CHECK(dst != NULL);
        if (dst)
            CHECK_OK(st_pack_append_commit(
                &w, ut_encode_raw_chunk((const uint8_t *)contents[i], n, dst), NULL));
    }
    st_id id;
    CHECK_OK(st_pack_finish(&w, &id));
    ut_golden_check("pack_v1.bin", w.data.data, w.data.len);

    /* The golden bytes must also decode, whatever the encoder does today. */
    uint8_t *buf = NULL;
    long got = ut_golden_read("pack_v1.bin", &buf);
    CHECK(got >= 0);
    if (got >= 0) {
        size_t len = (size_t)got;
        CHECK(len >= ST_PACK_FOOTER_LEN);
        uint32_t tl = 0, cnt = 0;
        if (len >= ST_PACK_FOOTER_LEN)
            CHECK_OK(st_pack_footer_decode(buf + len - ST_PACK_FOOTER_LEN, &tl, &cnt));
        st_pack_entry *e = NULL;
        size_t n = 0;
        size_t tail = (size_t)tl + ST_PACK_FOOTER_LEN;
        CHECK(tail <= len);
        if (tail <= len) {
            CHECK_OK(st_pack_trailer_decode(buf + len - tail, tail, len, &e, &n));
            CHECK(n == 3 && e && e[1].raw_len == 0 && e[2].raw_len == 26);
            free(e);
        }
    }
    free(buf);
    st_pack_writer_free(&w);
}

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_empty_pack);
    RUN(test_reset_reuse);
    RUN(test_commit_rejects);
    RUN(test_truncations_and_flips);
    RUN(test_hostile_valid_checksum);
    RUN(test_mutation_fuzz);
    RUN(test_golden);
    return ut_finish();
}
