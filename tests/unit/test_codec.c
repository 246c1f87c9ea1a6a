/*
 * test_codec — st_shuffle and st_codec: round trips over the data kinds a
 * checkpoint holds (random, zeros, text, fp32, bf16, int8) and awkward sizes,
 * the filter the encoder picks for each, and that every damaged encoding
 * (header bit flips, payload bit flips, truncation, wrong id, random
 * mutations) is refused with an error instead of a crash or wrong bytes.
 * Most run twice: with codecs 0-3 only (a plan with lz4_only) and with all.
 * For zstd per plane (codecs 4, 5): float round trips at odd and tiny
 * lengths, hand-built payloads that lie about each plane (lengths, the
 * stored-raw flag, frame content sizes, the tail), every bit of the length
 * words flipped, every truncation; and the golden chunks
 * tests/golden/chunk_v1_codec0..5.bin (UPDATE_GOLDEN=1 rewrites them).
 *
 * Buffers are malloc'd at exactly the size the contract promises
 * (st_codec_bound, st_codec_scratch_bound, raw_len), so an ASan build catches
 * any write or read past them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "format/st_codec.h"
#include "format/st_codec_planes.h"
#include "format/st_shuffle.h"
#include "ut.h"
#include "ut_format.h"

#define MIB (1u << 20)

/* ---- synthetic data kinds ---- */

/* Approximately normal floats (sum of uniforms), like trained weights. */
static float rand_normal(uint64_t *s, float sigma)
{
    float acc = 0;
    for (int k = 0; k < 4; k++)
        acc += (float)(ut_rand_next(s) >> 40) / (float)(1u << 24);
    return (acc - 2.0f) * sigma * 1.7f;
}

static void fill_fp32(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed;
    size_t n = len / 4;
    for (size_t i = 0; i < n; i++) {
        float f = rand_normal(&s, 0.02f);
        memcpy(buf + 4 * i, &f, 4);
    }
    ut_rand_fill(buf + 4 * n, len - 4 * n, seed + 1);
}

/* bf16: the top half of an fp32 (little-endian: bytes 2 and 3). */
static void fill_bf16(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed;
    size_t n = len / 2;
    for (size_t i = 0; i < n; i++) {
        float f = rand_normal(&s, 0.02f);
        uint32_t u;
        memcpy(&u, &f, 4);
        buf[2 * i] = (uint8_t)(u >> 16);
        buf[2 * i + 1] = (uint8_t)(u >> 24);
    }
    ut_rand_fill(buf + 2 * n, len - 2 * n, seed + 1);
}

/* int8 with neighbour correlation (a bounded random walk), as quantized rows
 * are: LZ4 finds repeats in order, shuffling splits neighbours apart. */
static void fill_int8(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        uint64_t r = ut_rand_next(&s) % 3;
        v += (int)r - 1;
        if (v > 40)
            v = 40;
        if (v < -40)
            v = -40;
        buf[i] = (uint8_t)(int8_t)v;
    }
}

static void fill_text(uint8_t *buf, size_t len, uint64_t seed)
{
    static const char *words[] = {"model.", "layers.",   "weight", "bias", "attn",
                                  "mlp",    "norm",      "0",      "1",    "2",
                                  "step",   "optimizer", "state",  " "};
    uint64_t s = seed;
    size_t i = 0;
    while (i < len) {
        const char *w = words[ut_rand_next(&s) % (sizeof words / sizeof words[0])];
        for (size_t k = 0; w[k] && i < len; k++)
            buf[i++] = (uint8_t)w[k];
    }
}

static void fill_random(uint8_t *buf, size_t len, uint64_t seed)
{
    ut_rand_fill(buf, len, seed);
}

static void fill_zeros(uint8_t *buf, size_t len, uint64_t seed)
{
    (void)seed;
    memset(buf, 0, len);
}

typedef void (*fill_fn)(uint8_t *, size_t, uint64_t);

/* ---- an encoded chunk with exactly-sized buffers ---- */

typedef struct enc_case {
    uint8_t *raw;
    size_t raw_len;
    st_id id;
    uint8_t *enc;
    size_t enc_len;
    st_codec_id codec;
} enc_case;

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* Set by a test: make_case() encodes as a plan with lz4_only (codecs 0-3). */
static int lz4_only;

static int make_case(enc_case *c, fill_fn fill, size_t len, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->raw = xmalloc(len);
    c->raw_len = len;
    fill(c->raw, len, seed);
    c->id = st_id_of(c->raw, len);
    size_t cap = st_codec_bound(len);
    c->enc = xmalloc(cap);
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(len));
    st_codec_plan plan = {.lz4_only = lz4_only};
    st_err e = st_codec_encode_planned(c->raw, len, &c->id, c->enc, cap, &c->enc_len, scratch,
                                       &plan, &c->codec);
    free(scratch);
    CHECK_OK(e);
    if (e != ST_OK)
        return -1;
    CHECK(c->enc_len <= cap);
    return 0;
}

static void free_case(enc_case *c)
{
    free(c->raw);
    free(c->enc);
}

/* Decodes enc[0..enc_len) into exactly-sized buffers; on ST_OK checks bytes. */
static st_err decode_check(const enc_case *c, const uint8_t *enc, size_t enc_len, int *wrong)
{
    uint8_t *out = xmalloc(c->raw_len);
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(c->raw_len));
    size_t got = (size_t)-1;
    st_err e = st_codec_decode(enc, enc_len, NULL, out, c->raw_len, &got, scratch);
    *wrong = e == ST_OK && (got != c->raw_len || memcmp(out, c->raw, c->raw_len) != 0);
    free(out);
    free(scratch);
    return e;
}

#define ANY_CODEC   (-1)
#define ANY_SHUFFLE (-2) /* bf16 gains about as much from 2 planes as from 4 */

static int is_shuffle(st_codec_id c)
{
    return c != ST_CODEC_RAW && c != ST_CODEC_LZ4;
}

/* Encodes, checks the gain rule and the codec, decodes, compares. */
static void roundtrip(fill_fn fill, size_t len, uint64_t seed, int want_codec)
{
    enc_case c;
    if (make_case(&c, fill, len, seed) != 0)
        return;
    if (want_codec != ANY_CODEC) {
        int ok =
            want_codec == ANY_SHUFFLE ? is_shuffle(c.codec) : c.codec == (st_codec_id)want_codec;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  len %zu: codec %d, wanted %d (stored %zu)\n", len, (int)c.codec,
                    want_codec, c.enc_len);
    }
    size_t payload = c.enc_len - ST_CODEC_HEADER_LEN;
    if (c.codec == ST_CODEC_RAW)
        CHECK(payload == len);
    else
        CHECK(payload * 100 <= len * (100 - ST_CODEC_MIN_GAIN_PCT));

    st_chunk_header h;
    CHECK_OK(st_codec_header(c.enc, c.enc_len, &h));
    CHECK(h.codec == c.codec && h.raw_len == len && h.payload_len == payload);
    CHECK(st_id_cmp(&h.id, &c.id) == 0);

    int wrong = 0;
    CHECK_OK(decode_check(&c, c.enc, c.enc_len, &wrong));
    CHECK(!wrong);
    CHECK(!lz4_only || c.codec <= ST_CODEC_LZ4_SHUF4);
    free_case(&c);
}

/* ---- shuffle ---- */

static void test_shuffle_layout(void)
{
    uint8_t src[67], dst[67], back[67];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 37 + 11);
    for (size_t es = 2; es <= 4; es += 2) {
        for (size_t len = 0; len <= sizeof src; len++) {
            st_shuffle(dst, src, len, es);
            size_t n = len / es;
            int ok = 1;
            for (size_t i = 0; i < n; i++)
                for (size_t p = 0; p < es; p++)
                    ok &= dst[p * n + i] == src[i * es + p];
            for (size_t t = n * es; t < len; t++)
                ok &= dst[t] == src[t];
            CHECK(ok);
            memset(back, 0xAA, sizeof back);
            st_unshuffle(back, dst, len, es);
            CHECK(memcmp(back, src, len) == 0);
        }
    }
}

static void test_shuffle_large(void)
{
    size_t len = 4 * MIB + 3;
    uint8_t *a = xmalloc(len), *b = xmalloc(len), *c = xmalloc(len);
    ut_rand_fill(a, len, 7);
    for (size_t es = 2; es <= 4; es += 2) {
        st_shuffle(b, a, len, es);
        CHECK(memcmp(a, b, len) != 0);
        st_unshuffle(c, b, len, es);
        CHECK(memcmp(a, c, len) == 0);
    }
    free(a);
    free(b);
    free(c);
}

/* ---- round trips and codec choice ---- */

/* Codecs 0-3 as before (lz4_only); floats pick zstd per plane otherwise. */
static void test_kinds(void)
{
    for (lz4_only = 1; lz4_only >= 0; lz4_only--) {
        roundtrip(fill_random, MIB, 1, ST_CODEC_RAW);
        roundtrip(fill_zeros, MIB, 0, ST_CODEC_LZ4);
        roundtrip(fill_text, MIB, 2, ST_CODEC_LZ4);
        roundtrip(fill_fp32, MIB, 3, lz4_only ? ST_CODEC_LZ4_SHUF4 : ST_CODEC_ZSTD_SHUF4);
        roundtrip(fill_bf16, MIB, 4, lz4_only ? ST_CODEC_LZ4_SHUF2 : ST_CODEC_ZSTD_SHUF2);
        roundtrip(fill_int8, MIB, 5, ST_CODEC_LZ4);
    }
    lz4_only = 0;
}

static void test_sizes(void)
{
    static const fill_fn fills[] = {fill_random, fill_zeros, fill_text,
                                    fill_fp32,   fill_bf16,  fill_int8};
    static const size_t sizes[] = {
        0, 1, 2, 3, 4, 5, 7, 64, 4097, 64 << 10, (64 << 10) + 1, (64 << 10) + 4, 100003, 4 * MIB};
    for (lz4_only = 1; lz4_only >= 0; lz4_only--)
        for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                roundtrip(fills[f], sizes[s], 100 + s, ANY_CODEC);
    lz4_only = 0;
    /* Tiny chunks cannot gain: stored raw. */
    roundtrip(fill_zeros, 0, 0, ST_CODEC_RAW);
    roundtrip(fill_zeros, 1, 0, ST_CODEC_RAW);
    roundtrip(fill_zeros, 3, 0, ST_CODEC_RAW);
    /* A float chunk cut at an odd offset still wins with the shuffle. */
    roundtrip(fill_fp32, MIB + 3, 8, ST_CODEC_ZSTD_SHUF4);
    roundtrip(fill_bf16, MIB + 1, 9, ANY_SHUFFLE);
    roundtrip(fill_fp32, 4 * MIB, 10, ST_CODEC_ZSTD_SHUF4);
    roundtrip(fill_bf16, 64 << 10, 11, ANY_SHUFFLE);
    lz4_only = 1;
    roundtrip(fill_fp32, MIB + 3, 8, ST_CODEC_LZ4_SHUF4);
    roundtrip(fill_fp32, 4 * MIB, 10, ST_CODEC_LZ4_SHUF4);
    lz4_only = 0;
}

/* Zeros at the sampled spots, random elsewhere: the sample says LZ4 but the
 * whole chunk does not gain, so the encoder must fall back to raw. */
static void fill_sample_trap(uint8_t *buf, size_t len, uint64_t seed)
{
    ut_rand_fill(buf, len, seed);
    for (size_t i = 0; i < 4; i++) {
        size_t centre = len / 8 * (2 * i + 1);
        memset(buf + centre - (16 << 10), 0, 32 << 10);
    }
}

static void test_sample_fallback(void)
{
    /* 128 KiB of zeros in 8 MiB: 1.6% < ST_CODEC_MIN_GAIN_PCT. */
    roundtrip(fill_sample_trap, 8 * MIB, 12, ST_CODEC_RAW);
}

/* ---- contract errors ---- */

static void test_encode_errors(void)
{
    uint8_t raw[100], out[ST_CODEC_HEADER_LEN + 100], scratch[100];
    size_t out_len = 0;
    fill_zeros(raw, sizeof raw, 0);
    st_id id = st_id_of(raw, sizeof raw);
    CHECK_ERR(st_codec_encode(raw, sizeof raw, &id, out, sizeof out - 1, &out_len, scratch, NULL),
              ST_ERR_INVALID);
    CHECK_ERR(st_codec_encode(raw, sizeof raw, NULL, out, sizeof out, &out_len, scratch, NULL),
              ST_ERR_INVALID);
    /* Rejected on the length alone, before touching the (small) buffers. */
    CHECK_ERR(st_codec_encode(raw, (size_t)ST_CODEC_MAX_RAW + 1, &id, out, sizeof out, &out_len,
                              scratch, NULL),
              ST_ERR_INVALID);
    CHECK_OK(st_codec_encode(raw, sizeof raw, &id, out, sizeof out, &out_len, scratch, NULL));
}

/* decode_view: a raw chunk is verified where it lies (a pointer into enc, no
 * copy, out untouched) and a flipped byte is still refused; a compressed one
 * is decoded into out. */
static void test_decode_view(void)
{
    enc_case raw, lz;
    if (make_case(&raw, fill_random, 64 << 10, 41) != 0)
        return;
    if (make_case(&lz, fill_fp32, 64 << 10, 42) != 0) {
        free_case(&raw);
        return;
    }
    CHECK(raw.codec == ST_CODEC_RAW && lz.codec != ST_CODEC_RAW);
    uint8_t *out = xmalloc(raw.raw_len);
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(raw.raw_len));
    const uint8_t *bytes = NULL;
    size_t got = 0;
    memset(out, 0x5A, raw.raw_len);
    CHECK_OK(st_codec_decode_view(raw.enc, raw.enc_len, &raw.id, out, raw.raw_len, &got, scratch,
                                  &bytes));
    CHECK(bytes == raw.enc + ST_CODEC_HEADER_LEN && got == raw.raw_len);
    CHECK(memcmp(bytes, raw.raw, got) == 0 && out[0] == 0x5A && out[got - 1] == 0x5A);
    raw.enc[raw.enc_len / 2] ^= 0x10;
    CHECK_ERR(st_codec_decode_view(raw.enc, raw.enc_len, &raw.id, out, raw.raw_len, &got, scratch,
                                   &bytes),
              ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "checksum mismatch") != NULL);
    CHECK_OK(
        st_codec_decode_view(lz.enc, lz.enc_len, &lz.id, out, lz.raw_len, &got, scratch, &bytes));
    CHECK(bytes == out && got == lz.raw_len && memcmp(out, lz.raw, got) == 0);
    free(out);
    free(scratch);
    free_case(&raw);
    free_case(&lz);
}

static void decode_errors(void)
{
    enc_case c;
    if (make_case(&c, fill_fp32, 256 << 10, 21) != 0)
        return;
    CHECK(c.codec == (lz4_only ? ST_CODEC_LZ4_SHUF4 : ST_CODEC_ZSTD_SHUF4));
    uint8_t *out = xmalloc(c.raw_len + 64);
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(c.raw_len));
    size_t got = 0;

    /* expect_id: right one passes, wrong one is corruption. */
    CHECK_OK(st_codec_decode(c.enc, c.enc_len, &c.id, out, c.raw_len, &got, scratch));
    CHECK(got == c.raw_len && memcmp(out, c.raw, c.raw_len) == 0);
    st_id other = c.id;
    other.b[7] ^= 1;
    CHECK_ERR(st_codec_decode(c.enc, c.enc_len, &other, out, c.raw_len, &got, scratch),
              ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "expected") != NULL);

    /* out_cap one short: an error, and nothing written past out_cap. */
    memset(out, 0x5A, c.raw_len + 64);
    CHECK_ERR(st_codec_decode(c.enc, c.enc_len, NULL, out, c.raw_len - 1, &got, scratch),
              ST_ERR_CORRUPT);
    int untouched = 1;
    for (size_t i = c.raw_len - 1; i < c.raw_len + 64; i++)
        untouched &= out[i] == 0x5A;
    CHECK(untouched);

    /* Trailing bytes after the payload are tolerated (payload_len rules). */
    uint8_t *longer = xmalloc(c.enc_len + 5);
    memcpy(longer, c.enc, c.enc_len);
    memset(longer + c.enc_len, 0xEE, 5);
    CHECK_OK(st_codec_decode(longer, c.enc_len + 5, &c.id, out, c.raw_len, &got, scratch));
    free(longer);

    /* A header that claims the maximum with nothing behind it. */
    uint8_t hdr[ST_CODEC_HEADER_LEN];
    memcpy(hdr, c.enc, sizeof hdr);
    hdr[8] = 0, hdr[9] = 0, hdr[10] = 0, hdr[11] = 4; /* 64 MiB */
    CHECK_ERR(st_codec_decode(hdr, sizeof hdr, NULL, out, c.raw_len, &got, scratch),
              ST_ERR_CORRUPT);
    CHECK_ERR(st_codec_decode(NULL, 0, NULL, out, c.raw_len, &got, scratch), ST_ERR_CORRUPT);

    free(out);
    free(scratch);
    free_case(&c);
}

/* Runs a test with codecs 0-3 only, then with all codecs. */
static void both_modes(void (*test)(void))
{
    for (lz4_only = 1; lz4_only >= 0; lz4_only--)
        test();
    lz4_only = 0;
}

static void test_decode_errors(void)
{
    both_modes(decode_errors);
}

/* Truncation at every length must be detected (checked exhaustively on a
 * chunk of each codec, then sampled on a large one). */
static void truncation_once(void)
{
    static const fill_fn fills[] = {fill_random, fill_text, fill_fp32, fill_bf16};
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        enc_case c;
        if (make_case(&c, fills[f], 3000, 30 + f) != 0)
            continue;
        int bad = 0;
        for (size_t n = 0; n < c.enc_len; n++) {
            uint8_t *cut = xmalloc(n); /* exact size: ASan sees over-reads */
            memcpy(cut, c.enc, n);
            int wrong;
            st_err e = decode_check(&c, cut, n, &wrong);
            bad += e != ST_ERR_CORRUPT;
            free(cut);
        }
        CHECK(bad == 0);
        free_case(&c);
    }
}

/* What decoding a header with bit `bit` flipped must return. */
static st_err expected_for_header_flip(const uint8_t *enc, size_t bit)
{
    size_t byte = bit / 8;
    uint8_t v = (uint8_t)(enc[byte] ^ (1u << (bit % 8)));
    if (byte == 3 && v > '1' && v <= '9')
        return ST_ERR_UNSUPPORTED; /* looks like a newer format version */
    if (byte == 4 && v > ST_CODEC_ZSTD_SHUF4)
        return ST_ERR_UNSUPPORTED; /* looks like a codec from the future */
    return ST_ERR_CORRUPT;
}

/*
 * Every header bit flip must fail, with one benign exception: switching the
 * codec between LZ4 and a shuffle on data the shuffle leaves unchanged (all
 * zeros) decodes to the same, verified bytes. The all-zero case therefore
 * only requires "no wrong bytes"; the others require the exact error.
 */
static void header_bitflips_once(void)
{
    static const fill_fn fills[] = {fill_random, fill_text, fill_fp32, fill_bf16, fill_zeros};
    static const size_t n_strict = 4;
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        enc_case c;
        if (make_case(&c, fills[f], 200 << 10, 40 + f) != 0)
            continue;
        uint8_t *copy = xmalloc(c.enc_len);
        int mismatches = 0, wrongs = 0;
        for (size_t bit = 0; bit < ST_CODEC_HEADER_LEN * 8; bit++) {
            memcpy(copy, c.enc, c.enc_len);
            copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            int wrong;
            st_err e = decode_check(&c, copy, c.enc_len, &wrong);
            st_err want = expected_for_header_flip(c.enc, bit);
            if (f >= n_strict && e == ST_OK)
                want = ST_OK;
            if (e != want) {
                mismatches++;
                fprintf(stderr, "  codec %d header bit %zu: got %d want %d (%s)\n", (int)c.codec,
                        bit, (int)e, (int)want, st_errmsg());
            }
            wrongs += wrong;
        }
        CHECK(mismatches == 0);
        CHECK(wrongs == 0);
        free(copy);
        free_case(&c);
    }
}

static void payload_bitflips_once(void)
{
    static const fill_fn fills[] = {fill_random, fill_text, fill_fp32, fill_bf16, fill_int8};
    uint64_t s = 99;
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        enc_case c;
        if (make_case(&c, fills[f], 256 << 10, 50 + f) != 0)
            continue;
        uint8_t *copy = xmalloc(c.enc_len);
        memcpy(copy, c.enc, c.enc_len);
        size_t payload_bits = (c.enc_len - ST_CODEC_HEADER_LEN) * 8;
        int not_corrupt = 0;
        for (int k = 0; k < 300; k++) {
            size_t bit = ST_CODEC_HEADER_LEN * 8 + ut_rand_next(&s) % payload_bits;
            copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            int wrong;
            not_corrupt += decode_check(&c, copy, c.enc_len, &wrong) != ST_ERR_CORRUPT;
            copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        CHECK(not_corrupt == 0);
        free(copy);
        free_case(&c);
    }
}

/* Random mutations with a fixed seed: any outcome but a crash, an unexpected
 * code or wrong bytes reported as OK is fine. */
static void decode_fuzz_once(void)
{
    static const fill_fn fills[] = {fill_random, fill_zeros, fill_text,
                                    fill_fp32,   fill_bf16,  fill_int8};
    uint64_t s = 0xC0DEC;
    int bad = 0, oks = 0, runs = 0;
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        enc_case c;
        if (make_case(&c, fills[f], 20000 + 7 * f, 60 + f) != 0)
            continue;
        size_t max_len = c.enc_len + 64;
        uint8_t *m = xmalloc(max_len);
        for (int it = 0; it < 3000; it++) {
            memcpy(m, c.enc, c.enc_len);
            size_t len = c.enc_len;
            int muts = 1 + (int)(ut_rand_next(&s) % 6);
            for (int k = 0; k < muts; k++) {
                uint64_t r = ut_rand_next(&s);
                size_t pos = (size_t)(r >> 16) % len;
                switch (r % 5) {
                case 0: /* bit flip */ m[pos] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
                case 1: /* random byte */ m[pos] = (uint8_t)(r >> 8); break;
                case 2: /* header byte, where damage matters most */
                    m[pos % ST_CODEC_HEADER_LEN] = (uint8_t)(r >> 8);
                    break;
                case 3: /* truncate */ len = pos; break;
                default: /* extend with garbage */
                    while (len < max_len && (r & 1)) {
                        m[len++] = (uint8_t)(r >> 24);
                        r = ut_rand_next(&s);
                    }
                    break;
                }
                if (len == 0)
                    len = 1;
            }
            int wrong;
            st_err e = decode_check(&c, m, len, &wrong);
            runs++;
            oks += e == ST_OK;
            bad += wrong || (e != ST_OK && e != ST_ERR_CORRUPT && e != ST_ERR_UNSUPPORTED);
        }
        free(m);
        free_case(&c);
    }
    CHECK(bad == 0);
    CHECK(runs == 6 * 3000);
    fprintf(stderr, "  fuzz: %d decodes, %d accepted (mutations only past the payload)\n", runs,
            oks);
}

/* ---- zstd per plane (codecs 4 and 5) ---- */

/* Trained-weight-like floats at several scales, as a tensor holds them:
 * fp32 normal with sigma 0.02 to 2, then their bf16 halves. */
static void fill_fp32_scaled(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed;
    size_t n = len / 4;
    for (size_t i = 0; i < n; i++) {
        float sigma = i < n / 2 ? 0.02f : 2.0f;
        float f = rand_normal(&s, sigma);
        memcpy(buf + 4 * i, &f, 4);
    }
    ut_rand_fill(buf + 4 * n, len - 4 * n, seed + 1);
}

/* Round trips of float data of many lengths (tails of 1-3 bytes, tiny
 * chunks), the sizes zstd reaches, and that lz4_only never uses it. */
static void test_zstd_roundtrips(void)
{
    static const size_t sizes[] = {8,     9,      15,      16,      17,     100,
                                   1001,  3000,   3001,    4099,    20000,  65535,
                                   65537, 100003, MIB + 1, MIB + 2, MIB + 3};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        roundtrip(fill_fp32, sizes[s], 200 + s, ANY_CODEC);
        roundtrip(fill_fp32_scaled, sizes[s], 300 + s, ANY_CODEC);
        roundtrip(fill_bf16, sizes[s], 400 + s, ANY_CODEC);
    }
    roundtrip(fill_fp32_scaled, MIB + 3, 7, ST_CODEC_ZSTD_SHUF4);
    roundtrip(fill_fp32, 8001, 7, ST_CODEC_ZSTD_SHUF4);
    roundtrip(fill_bf16, 3001, 7, ST_CODEC_ZSTD_SHUF2);
    roundtrip(fill_bf16, 20001, 7, ST_CODEC_ZSTD_SHUF2);

    /* What zstd gains on these: bf16 exponents shrink to about a third. */
    enc_case c;
    if (make_case(&c, fill_bf16, MIB, 5) == 0) {
        CHECK(c.codec == ST_CODEC_ZSTD_SHUF2);
        CHECK(c.enc_len * 100 < MIB * 75);
        free_case(&c);
    }
    if (make_case(&c, fill_fp32, MIB, 6) == 0) {
        CHECK(c.codec == ST_CODEC_ZSTD_SHUF4);
        CHECK(c.enc_len * 100 < MIB * 90);
        free_case(&c);
    }
}

/* A planes chunk built by hand: header for raw[0..raw_len) with codec,
 * then payload[0..payload_len). Returns the malloc'd encoding. */
static uint8_t *hand_chunk(const uint8_t *raw, size_t raw_len, st_codec_id codec,
                           const uint8_t *payload, size_t payload_len, size_t *enc_len)
{
    uint8_t *enc = xmalloc(ST_CODEC_HEADER_LEN + payload_len);
    st_id id = st_id_of(raw, raw_len);
    memcpy(enc, "CKc1", 4);
    enc[4] = (uint8_t)codec;
    enc[5] = enc[6] = enc[7] = 0;
    st_le32_put(enc + 8, (uint32_t)raw_len);
    st_le32_put(enc + 12, (uint32_t)payload_len);
    memcpy(enc + 16, id.b, ST_ID_LEN);
    memcpy(enc + ST_CODEC_HEADER_LEN, payload, payload_len);
    *enc_len = ST_CODEC_HEADER_LEN + payload_len;
    return enc;
}

/* What a payload variant does to plane `plane` of es planes. */
enum plane_lie {
    LIE_NONE,          /* a faithful payload: must decode */
    LIE_SIZE_SHORT,    /* a zstd frame of one byte less than the plane */
    LIE_SIZE_LONG,     /* ... of one byte more */
    LIE_NO_SIZE,       /* a zstd frame without its content size field */
    LIE_TWO_FRAMES,    /* the plane as two frames */
    LIE_GARBAGE_AFTER, /* the frame, then a byte inside the stated length */
    LIE_RAW_SHORT,     /* stored-raw flag with length n - 1 (and n - 1 bytes) */
    LIE_RAW_LONG,      /* stored-raw flag with length n + 1 (and n + 1 bytes) */
    LIE_RAW_FLAG_ZSTD, /* stored-raw flag on a zstd frame's length */
    LIE_ZSTD_FLAG_RAW, /* no flag on a raw plane: a zstd "frame" of n bytes */
    LIE_HIGH_BITS,     /* length word with bits 26..30 set */
    LIE_SKIPPABLE,     /* a skippable frame instead of the plane's frame */
    LIE_TAIL_SHORT,    /* one tail byte missing */
    LIE_TAIL_LONG,     /* one byte after the tail */
    LIE_COUNT
};

/* zstd frame of src[0..len) into dst (ZSTD_compressBound(len)), with or
 * without the content size field. */
static size_t zframe(uint8_t *dst, const uint8_t *src, size_t len, int content_size)
{
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    CHECK(cctx != NULL);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, content_size);
    size_t n;
    if (content_size) {
        n = ZSTD_compress2(cctx, dst, ZSTD_compressBound(len), src, len);
    } else {
        ZSTD_outBuffer out = {dst, ZSTD_compressBound(len), 0};
        ZSTD_inBuffer in = {src, len, 0};
        n = ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_end);
        n = n == 0 ? out.pos : 0;
    }
    ZSTD_freeCCtx(cctx);
    CHECK(!ZSTD_isError(n) && n > 0);
    return ZSTD_isError(n) ? 0 : n;
}

/* Builds the planes payload of raw[0..raw_len) by hand: plane 0 raw, the
 * others zstd, with `lie` applied to plane `plane` (or to the tail). */
static size_t lie_payload(const uint8_t *raw, size_t raw_len, size_t es, size_t plane,
                          enum plane_lie lie, uint8_t *dst)
{
    size_t n = raw_len / es, tail = raw_len % es, pos = 0;
    uint8_t *shuf = xmalloc(raw_len + 1);
    st_shuffle(shuf, raw, raw_len, es);
    shuf[raw_len] = 0x77;
    for (size_t p = 0; p < es; p++) {
        const uint8_t *src = shuf + p * n;
        uint8_t *word = dst + pos;
        size_t len = 0;
        uint32_t flag = 0;
        pos += 4;
        enum plane_lie l = p == plane ? lie : LIE_NONE;
        if (p == 0 && l != LIE_ZSTD_FLAG_RAW && l != LIE_RAW_SHORT && l != LIE_RAW_LONG &&
            l != LIE_HIGH_BITS) {
            memcpy(dst + pos, src, n);
            len = n;
            flag = ST_PLANES_RAW_FLAG;
        } else if (l == LIE_ZSTD_FLAG_RAW) {
            memcpy(dst + pos, src, n);
            len = n;
        } else if (l == LIE_RAW_SHORT || l == LIE_RAW_LONG) {
            len = l == LIE_RAW_SHORT ? n - 1 : n + 1;
            memcpy(dst + pos, src, len); /* shuf has a spare byte */
            flag = ST_PLANES_RAW_FLAG;
        } else if (l == LIE_SIZE_SHORT || l == LIE_SIZE_LONG) {
            len = zframe(dst + pos, src, l == LIE_SIZE_SHORT ? n - 1 : n + 1, 1);
        } else if (l == LIE_NO_SIZE) {
            len = zframe(dst + pos, src, n, 0);
        } else if (l == LIE_SKIPPABLE) {
            st_le32_put(dst + pos, 0x184D2A50u);
            st_le32_put(dst + pos + 4, (uint32_t)(n / 2));
            memcpy(dst + pos + 8, src, n / 2);
            len = 8 + n / 2;
        } else if (l == LIE_TWO_FRAMES) {
            len = zframe(dst + pos, src, n / 2, 1);
            len += zframe(dst + pos + len, src + n / 2, n - n / 2, 1);
        } else {
            len = zframe(dst + pos, src, n, 1);
            if (l == LIE_GARBAGE_AFTER)
                dst[pos + len++] = 0;
            if (l == LIE_RAW_FLAG_ZSTD)
                flag = ST_PLANES_RAW_FLAG;
        }
        uint32_t w = (uint32_t)len | flag;
        if (l == LIE_HIGH_BITS)
            w |= 0x7C000000u;
        st_le32_put(word, w);
        pos += len;
    }
    size_t t = lie == LIE_TAIL_SHORT ? tail - 1 : lie == LIE_TAIL_LONG ? tail + 1 : tail;
    memcpy(dst + pos, shuf + es * n, t);
    free(shuf);
    return pos + t;
}

/* Every lie about the planes payload is ST_ERR_CORRUPT, for both codecs,
 * on every plane; the faithful hand-built payload decodes. */
static void test_planes_lies(void)
{
    static const size_t raw_len = 4003; /* a tail for both element sizes */
    uint8_t *raw = xmalloc(raw_len);
    fill_text(raw, raw_len, 77); /* zstd shrinks every plane of it */
    enc_case c = {.raw = raw, .raw_len = raw_len};
    uint8_t *payload = xmalloc(2 * raw_len + 4096);
    for (size_t es = 2; es <= 4; es += 2) {
        st_codec_id codec = es == 2 ? ST_CODEC_ZSTD_SHUF2 : ST_CODEC_ZSTD_SHUF4;
        for (size_t plane = 0; plane < es; plane++) {
            for (int lie = LIE_NONE; lie < LIE_COUNT; lie++) {
                /* The plane-0-only lies act on the raw plane, the rest on a
                 * zstd one; skip the combinations that say nothing new. */
                int raw_lie =
                    lie == LIE_RAW_SHORT || lie == LIE_RAW_LONG || lie == LIE_ZSTD_FLAG_RAW;
                if ((raw_lie && plane != 0) || (!raw_lie && lie != LIE_HIGH_BITS && plane == 0 &&
                                                lie != LIE_NONE && lie < LIE_TAIL_SHORT))
                    continue;
                size_t plen = lie_payload(raw, raw_len, es, plane, (enum plane_lie)lie, payload);
                size_t enc_len;
                uint8_t *enc = hand_chunk(raw, raw_len, codec, payload, plen, &enc_len);
                int wrong;
                st_err e = decode_check(&c, enc, enc_len, &wrong);
                st_err want = lie == LIE_NONE ? ST_OK : ST_ERR_CORRUPT;
                if (e != want || wrong)
                    fprintf(stderr, "  es %zu plane %zu lie %d: got %d (%s)\n", es, plane, lie,
                            (int)e, e ? st_errmsg() : "ok");
                CHECK(e == want && !wrong);
                free(enc);
            }
        }
    }
    free(payload);
    free(raw);
}

/* Whether enc[i] is a plane length word or the tail (not a zstd frame or
 * a raw plane) of a planes chunk. */
static int in_plane_word(const uint8_t *enc, size_t enc_len, size_t i)
{
    size_t es = enc[4] == ST_CODEC_ZSTD_SHUF2 ? 2 : 4, pos = ST_CODEC_HEADER_LEN;
    for (size_t p = 0; p < es && pos + 4 <= enc_len; p++) {
        if (i >= pos && i < pos + 4)
            return 1;
        pos += 4 + (st_le32_get(enc + pos) & ~ST_PLANES_RAW_FLAG);
    }
    return i >= pos;
}

/* Every byte of a small planes chunk's payload flipped, every truncation
 * of it (with the header's payload length following), and payload lengths
 * one off: all ST_ERR_CORRUPT. */
static void test_planes_damage(void)
{
    static const fill_fn fills[] = {fill_fp32, fill_bf16};
    static const size_t lens[] = {8003, 3001};
    for (size_t f = 0; f < 2; f++) {
        enc_case c;
        if (make_case(&c, fills[f], lens[f], 90 + f) != 0)
            continue;
        CHECK(c.codec == (f ? ST_CODEC_ZSTD_SHUF2 : ST_CODEC_ZSTD_SHUF4));
        uint8_t *copy = xmalloc(c.enc_len + 1);
        int not_corrupt = 0, benign = 0, flips = 0;
        /* Every bit of the length words and frame headers near the start,
         * then one bit of every byte. */
        memcpy(copy, c.enc, c.enc_len);
        for (size_t i = ST_CODEC_HEADER_LEN; i < c.enc_len; i++) {
            for (int bit = 0; bit < 8; bit++) {
                if (i >= ST_CODEC_HEADER_LEN + 64 && bit != (int)(i % 8))
                    continue;
                copy[i] ^= (uint8_t)(1u << bit);
                int wrong;
                st_err e = decode_check(&c, copy, c.enc_len, &wrong);
                /* A flip zstd ignores (an entropy table entry with no
                 * effect) decodes to the same, verified bytes: benign. */
                int in_frame = !in_plane_word(c.enc, c.enc_len, i);
                benign += e == ST_OK && !wrong && in_frame;
                not_corrupt += e != ST_ERR_CORRUPT && !(e == ST_OK && !wrong && in_frame);
                flips++;
                copy[i] ^= (uint8_t)(1u << bit);
            }
        }
        size_t payload_len = c.enc_len - ST_CODEC_HEADER_LEN;
        for (size_t k = 0; k <= payload_len + 1; k++) {
            if (k == payload_len)
                continue;
            memcpy(copy, c.enc, c.enc_len);
            copy[c.enc_len] = 0;
            st_le32_put(copy + 12, (uint32_t)k);
            uint8_t *cut = xmalloc(ST_CODEC_HEADER_LEN + k); /* exact: ASan sees over-reads */
            memcpy(cut, copy, ST_CODEC_HEADER_LEN + k);
            int wrong;
            not_corrupt += decode_check(&c, cut, ST_CODEC_HEADER_LEN + k, &wrong) != ST_ERR_CORRUPT;
            free(cut);
        }
        CHECK(not_corrupt == 0);
        CHECK(benign * 100 < flips);
        fprintf(stderr, "  codec %d: %d flips, %d benign (same bytes)\n", (int)c.codec, flips,
                benign);
        free(copy);
        free_case(&c);
    }
}

/* ---- golden chunks: one per codec ---- */

/* 16-bit counters with a slowly moving high byte: LZ4 over 2-byte planes
 * wins, with 4 planes no better (the golden codec 2 chunk). */
static void fill_u16_walk(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i + 1 < len; i += 2) {
        buf[i] = (uint8_t)ut_rand_next(&s);
        buf[i + 1] = (uint8_t)(i / 512);
    }
    if (len % 2)
        buf[len - 1] = 0x42;
}

typedef struct golden_chunk {
    const char *name;
    st_codec_id codec;
    fill_fn fill;
    int lz4_only;
} golden_chunk;

static const golden_chunk golden_chunks[] = {
    {"chunk_v1_codec0.bin", ST_CODEC_RAW, fill_random, 1},
    {"chunk_v1_codec1.bin", ST_CODEC_LZ4, fill_text, 1},
    {"chunk_v1_codec2.bin", ST_CODEC_LZ4_SHUF2, fill_u16_walk, 1},
    {"chunk_v1_codec3.bin", ST_CODEC_LZ4_SHUF4, fill_fp32, 1},
    {"chunk_v1_codec4.bin", ST_CODEC_ZSTD_SHUF2, fill_bf16, 0},
    {"chunk_v1_codec5.bin", ST_CODEC_ZSTD_SHUF4, fill_fp32, 0},
};
#define GOLDEN_RAW_LEN 8001 /* odd: every shuffle has a tail */

/*
 * The stored golden chunks decode to the bytes their generator makes, and
 * this encoder still makes them: byte for byte for codecs 0-3; for 4 and 5
 * the same codec and plane layout (another zstd may frame a plane
 * differently, which old packs must survive: decode is what counts).
 */
static void test_golden(void)
{
    uint8_t raw[GOLDEN_RAW_LEN], out[GOLDEN_RAW_LEN], scratch[GOLDEN_RAW_LEN];
    const char *update = getenv("UPDATE_GOLDEN");
    for (size_t g = 0; g < sizeof golden_chunks / sizeof golden_chunks[0]; g++) {
        const golden_chunk *gc = &golden_chunks[g];
        enc_case c;
        lz4_only = gc->lz4_only;
        int made = make_case(&c, gc->fill, GOLDEN_RAW_LEN, 1000 + g);
        lz4_only = 0;
        if (made != 0)
            continue;
        CHECK(c.codec == gc->codec);
        if (update && strcmp(update, "1") == 0)
            ut_golden_check(gc->name, c.enc, c.enc_len);
        uint8_t *gold = NULL;
        long len = ut_golden_read(gc->name, &gold);
        CHECK(len > ST_CODEC_HEADER_LEN);
        if (len > ST_CODEC_HEADER_LEN) {
            size_t got = 0;
            CHECK_OK(st_codec_decode(gold, (size_t)len, &c.id, out, sizeof out, &got, scratch));
            CHECK(got == GOLDEN_RAW_LEN && memcmp(out, c.raw, got) == 0);
            CHECK(gold[4] == gc->codec);
            int same = (size_t)len == c.enc_len && memcmp(gold, c.enc, c.enc_len) == 0;
            if (gc->codec <= ST_CODEC_LZ4_SHUF4) {
                CHECK(same);
            } else if (!same) {
                fprintf(stderr, "  note: this zstd frames %s differently\n", gc->name);
                size_t es = gc->codec == ST_CODEC_ZSTD_SHUF2 ? 2 : 4, pg = 32, pc = 32;
                for (size_t p = 0; p < es; p++) {
                    uint32_t wg = st_le32_get(gold + pg), wc = st_le32_get(c.enc + pc);
                    CHECK((wg & ST_PLANES_RAW_FLAG) == (wc & ST_PLANES_RAW_FLAG));
                    pg += 4 + (wg & ~ST_PLANES_RAW_FLAG);
                    pc += 4 + (wc & ~ST_PLANES_RAW_FLAG);
                }
            }
        }
        (void)raw;
        free(gold);
        free_case(&c);
    }
}

/* ---- a choice that sticks (st_codec_plan) ---- */

#define PLAN_CHUNK (128u << 10)

/* Encodes kinds[i] (one fill per chunk) through one plan; checks that every
 * chunk decodes to its bytes and records what each was stored as and
 * whether a sample trial ran for it. */
static void plan_run(const fill_fn *kinds, size_t n, st_codec_plan *plan, st_codec_id *used,
                     int *tried)
{
    uint8_t *raw = xmalloc(PLAN_CHUNK), *scratch = xmalloc(st_codec_scratch_bound(PLAN_CHUNK));
    uint8_t *enc = xmalloc(st_codec_bound(PLAN_CHUNK)), *back = xmalloc(PLAN_CHUNK);
    for (size_t i = 0; i < n; i++) {
        kinds[i](raw, PLAN_CHUNK, 500 + i);
        st_id id = st_id_of(raw, PLAN_CHUNK);
        size_t enc_len = 0, raw_len = 0;
        uint64_t trials = plan->trials;
        CHECK_OK(st_codec_encode_planned(raw, PLAN_CHUNK, &id, enc, st_codec_bound(PLAN_CHUNK),
                                         &enc_len, scratch, plan, &used[i]));
        tried[i] = plan->trials > trials;
        CHECK_OK(st_codec_decode(enc, enc_len, &id, back, PLAN_CHUNK, &raw_len, scratch));
        CHECK(raw_len == PLAN_CHUNK && memcmp(back, raw, PLAN_CHUNK) == 0);
    }
    free(raw);
    free(scratch);
    free(enc);
    free(back);
}

/* Incompressible chunks: 4 trials, then one every 8th chunk; all raw. */
static void test_plan_sticks(void)
{
    fill_fn kinds[32];
    st_codec_id used[32];
    int tried[32];
    for (int i = 0; i < 32; i++)
        kinds[i] = fill_random;
    st_codec_plan plan = {0};
    plan_run(kinds, 32, &plan, used, tried);
    CHECK(plan.trials == 7); /* chunks 0-3, 11, 19, 27 */
    for (int i = 0; i < 32; i++) {
        CHECK(used[i] == ST_CODEC_RAW);
        CHECK(tried[i] == (i < 4 || i % 8 == 3));
    }
    /* fp32 weights stick to zstd over 4 planes (LZ4 over them with
     * lz4_only) the same way, and stay compressed. */
    for (int i = 0; i < 32; i++)
        kinds[i] = fill_fp32;
    for (int only = 0; only <= 1; only++) {
        plan = (st_codec_plan){.lz4_only = only};
        plan_run(kinds, 32, &plan, used, tried);
        CHECK(plan.trials == 7);
        for (int i = 0; i < 32; i++)
            CHECK(used[i] == (only ? ST_CODEC_LZ4_SHUF4 : ST_CODEC_ZSTD_SHUF4));
    }
}

/* Data that changes kind: noise then text is found by the next re-check
 * (at most ST_CODEC_PLAN_RECHECK - 1 chunks stored raw meanwhile); text then
 * noise makes the untried LZ4 fail, which stores raw and samples the next. */
static void test_plan_changes(void)
{
    fill_fn kinds[32];
    st_codec_id used[32];
    int tried[32];
    for (int i = 0; i < 32; i++)
        kinds[i] = i < 8 ? fill_random : fill_text;
    st_codec_plan plan = {0};
    plan_run(kinds, 32, &plan, used, tried);
    for (int i = 8; i < 11; i++)
        CHECK(used[i] == ST_CODEC_RAW && !tried[i]); /* the cost of sticking */
    for (int i = 11; i < 32; i++)
        CHECK(used[i] != ST_CODEC_RAW);

    for (int i = 0; i < 32; i++)
        kinds[i] = i < 8 ? fill_text : fill_random;
    plan = (st_codec_plan){0};
    plan_run(kinds, 32, &plan, used, tried);
    for (int i = 0; i < 8; i++)
        CHECK(used[i] != ST_CODEC_RAW);
    CHECK(used[8] == ST_CODEC_RAW && !tried[8]); /* untried LZ4 gave up */
    CHECK(tried[9] && tried[10] && tried[11] && tried[12] && !tried[13]);
    for (int i = 8; i < 32; i++)
        CHECK(used[i] == ST_CODEC_RAW);
}

/* Encodes the PLAN_CHUNK bytes of file at offset at through plan (a hint
 * drawn for that offset, the outcome learned back); returns the encoded size
 * and sets *hint to the hint used. */
static size_t plan_chunk_at(st_codec_plan *plan, const uint8_t *file, uint64_t at,
                            st_codec_hint *hint)
{
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(PLAN_CHUNK));
    uint8_t *enc = xmalloc(st_codec_bound(PLAN_CHUNK)), *back = xmalloc(PLAN_CHUNK);
    const uint8_t *raw = file + at;
    st_id id = st_id_of(raw, PLAN_CHUNK);
    st_codec_outcome outcome;
    size_t enc_len = 0, raw_len = 0;
    st_codec_plan_next(plan, at, hint);
    CHECK_OK(st_codec_encode_hinted(raw, PLAN_CHUNK, &id, enc, st_codec_bound(PLAN_CHUNK), &enc_len,
                                    scratch, hint, &outcome));
    st_codec_plan_learn(plan, at, &outcome);
    CHECK_OK(st_codec_decode(enc, enc_len, &id, back, PLAN_CHUNK, &raw_len, scratch));
    CHECK(raw_len == PLAN_CHUNK && memcmp(back, raw, PLAN_CHUNK) == 0);
    free(scratch);
    free(enc);
    free(back);
    return enc_len;
}

/* A content-defined cut falls at any byte: fp32 chunks that start at file
 * offsets of every residue mod 4 keep their exponent plane coded once the
 * plan sticks, because its planes are rotated to each chunk's own (a plane
 * mask taken as is would code a mantissa plane and store the exponents
 * raw). */
static void test_plan_planes_follow_offsets(void)
{
    const size_t n = 2 * ST_CODEC_PLAN_RECHECK;
    uint8_t *file = xmalloc((n + 1) * PLAN_CHUNK);
    fill_fp32(file, (n + 1) * PLAN_CHUNK, 77);
    st_codec_plan plan = {0};
    st_codec_hint hint;
    size_t aligned = 0;
    for (size_t i = 0; i < ST_CODEC_PLAN_STREAK; i++) /* the trials, at aligned cuts */
        aligned = plan_chunk_at(&plan, file, i * PLAN_CHUNK, &hint);
    CHECK(plan.last == ST_CODEC_ZSTD_SHUF4 && plan.planes == 0x8); /* the exponent plane */
    for (size_t i = ST_CODEC_PLAN_STREAK; i < n; i++) {
        const uint64_t at = i * PLAN_CHUNK + i % 4; /* cuts at every residue */
        size_t size = plan_chunk_at(&plan, file, at, &hint);
        if (!hint.untried)
            continue;
        CHECK(hint.codec == ST_CODEC_ZSTD_SHUF4);
        CHECK(hint.planes == 1u << (3 - at % 4)); /* the plane of the top bytes */
        CHECK(size < aligned + aligned / 50);
    }
    CHECK(plan.planes == 0x8);

    /* The same unaligned chunk coded by the mask as is stores more: the test
     * data tells the two apart. */
    uint8_t *scratch = xmalloc(st_codec_scratch_bound(PLAN_CHUNK));
    uint8_t *enc = xmalloc(st_codec_bound(PLAN_CHUNK));
    const uint8_t *raw = file + PLAN_CHUNK + 1;
    st_id id = st_id_of(raw, PLAN_CHUNK);
    st_codec_hint as_is = {.untried = 1, .codec = ST_CODEC_ZSTD_SHUF4, .planes = 0x8};
    st_codec_outcome outcome;
    size_t wrong = 0;
    CHECK_OK(st_codec_encode_hinted(raw, PLAN_CHUNK, &id, enc, st_codec_bound(PLAN_CHUNK), &wrong,
                                    scratch, &as_is, &outcome));
    CHECK(wrong > aligned + aligned / 20);
    free(scratch);
    free(enc);
    free(file);
}

static void test_truncation(void)
{
    both_modes(truncation_once);
}

static void test_header_bitflips(void)
{
    both_modes(header_bitflips_once);
}

static void test_payload_bitflips(void)
{
    both_modes(payload_bitflips_once);
}

static void test_decode_fuzz(void)
{
    both_modes(decode_fuzz_once);
}

int main(void)
{
    RUN(test_shuffle_layout);
    RUN(test_shuffle_large);
    RUN(test_kinds);
    RUN(test_sizes);
    RUN(test_sample_fallback);
    RUN(test_plan_sticks);
    RUN(test_plan_changes);
    RUN(test_plan_planes_follow_offsets);
    RUN(test_encode_errors);
    RUN(test_decode_errors);
    RUN(test_decode_view);
    RUN(test_truncation);
    RUN(test_header_bitflips);
    RUN(test_payload_bitflips);
    RUN(test_decode_fuzz);
    RUN(test_zstd_roundtrips);
    RUN(test_planes_lies);
    RUN(test_planes_damage);
    RUN(test_golden);
    return ut_finish();
}
