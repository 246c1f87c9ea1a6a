/*
 * st_codec — encodes one chunk as header + payload and decodes it back,
 * verifying every byte (format in st_codec.h, rationale in docs/CODEC.md).
 *
 * Choosing the filter cheaply. Most checkpoint bytes are float weights and
 * optimizer state that LZ4 alone cannot shrink, while LZ4 over a byte-plane
 * shuffle saves 9-17% on them and hurts int8 data, and zstd per plane
 * (st_codec_planes.c) saves 16-32% at a higher CPU cost. Compressing the whole
 * chunk three ways would triple the CPU spent on every chunk, so the encoder
 * first trial-compresses a sample — ST_CODEC_SAMPLE_PIECES pieces of
 * ST_CODEC_SAMPLE_PIECE bytes spread evenly over the chunk — with each
 * candidate (LZ4, shuffle2+LZ4, shuffle4+LZ4), then compresses the whole
 * chunk once with the winner, or not at all when no candidate saved
 * ST_CODEC_MIN_GAIN_PCT on the sample. When a shuffle wins, zstd per plane
 * is tried on the gathered sample and replaces it if it saves
 * ST_CODEC_ZSTD_GAIN_PCT more, so data that is not a float tensor never
 * pays for a zstd trial. Chunks no larger than the sample are
 * tried whole. The final compression runs with its output capacity capped at
 * the largest payload that still counts as a gain, so LZ4 gives up early
 * instead of producing output we would throw away, and the encoding never
 * exceeds header + raw_len (that is st_codec_bound()).
 *
 * A choice that sticks (st_codec_plan): within a file, runs of chunks of
 * one kind (a big fp32 tensor, incompressible noise) choose the same codec
 * chunk after chunk, and the trials then cost ~5-10% of encode time for
 * nothing; after ST_CODEC_PLAN_STREAK equal choices the plan uses the
 * choice untried, re-sampling every ST_CODEC_PLAN_RECHECK-th chunk.
 *
 * Invariants:
 *   - an encoded chunk is never larger than ST_CODEC_HEADER_LEN + raw_len;
 *   - st_codec_decode() returns ST_OK only with exactly raw_len bytes whose
 *     XXH3-128 equals the header's id (and expect_id when given); any other
 *     input — truncated, bit-flipped, hostile — yields ST_ERR_CORRUPT or
 *     ST_ERR_UNSUPPORTED and never reads or writes outside the buffers.
 *
 * Memory: the caller's out and scratch (raw_len bytes) buffers, no
 * allocation here; LZ4_compress_default keeps its 16 KiB hash table on the
 * stack; the zstd contexts are per thread (st_codec_planes.c).
 * Thread-safe given distinct buffers.
 */
#include "format/st_codec.h"

#include <lz4.h>
#include <string.h>

#include "format/st_codec_planes.h"
#include "format/st_shuffle.h"
#include "util/st_wire.h"

/* The sample: 4 x 16 KiB = 64 KiB, about 6% of a 1 MiB chunk per candidate. */
#define ST_CODEC_SAMPLE_PIECES 4
#define ST_CODEC_SAMPLE_PIECE  (16u << 10)
#define ST_CODEC_SAMPLE_TOTAL  (ST_CODEC_SAMPLE_PIECES * ST_CODEC_SAMPLE_PIECE)

static const uint8_t codec_magic[3] = {'C', 'K', 'c'};
#define ST_CODEC_VERSION_CHAR '1'

size_t st_codec_bound(size_t raw_len)
{
    /* A payload is either raw or LZ4 output capped below raw_len. */
    return ST_CODEC_HEADER_LEN + raw_len;
}

size_t st_codec_scratch_bound(size_t raw_len)
{
    /* Encode: the shuffled chunk (the sample needs less). Decode: the LZ4
     * output before unshuffling. */
    return raw_len;
}

/* Element size of a shuffle codec, 0 for the others. */
static size_t codec_elem_size(st_codec_id codec)
{
    switch (codec) {
    case ST_CODEC_LZ4_SHUF2:
    case ST_CODEC_ZSTD_SHUF2: return 2;
    case ST_CODEC_LZ4_SHUF4:
    case ST_CODEC_ZSTD_SHUF4: return 4;
    default: return 0;
    }
}

static int codec_is_zstd(st_codec_id codec)
{
    return codec == ST_CODEC_ZSTD_SHUF2 || codec == ST_CODEC_ZSTD_SHUF4;
}

/* Largest payload for raw_len bytes that still saves ST_CODEC_MIN_GAIN_PCT. */
static size_t gain_limit(size_t raw_len)
{
    return raw_len * (100 - ST_CODEC_MIN_GAIN_PCT) / 100;
}

/* LZ4 of src[0..len) into dst with capacity cap; 0 if it does not fit. */
static size_t lz4_into(const uint8_t *src, size_t len, uint8_t *dst, size_t cap)
{
    if (len == 0 || cap == 0)
        return 0;
    int n = LZ4_compress_default((const char *)src, (char *)dst, (int)len, (int)cap);
    return n > 0 ? (size_t)n : 0;
}

/*
 * Compressed size of one sample piece with `codec`, or len when LZ4 does not
 * shrink it (a piece that does not compress counts as stored as is).
 * shuf and comp each hold len bytes.
 */
static size_t trial_piece(st_codec_id codec, const uint8_t *piece, size_t len, uint8_t *shuf,
                          uint8_t *comp)
{
    size_t es = codec_elem_size(codec);
    const uint8_t *src = piece;
    if (es) {
        st_shuffle(shuf, piece, len, es);
        src = shuf;
    }
    size_t n = lz4_into(src, len, comp, len);
    return n ? n : len;
}

/* Start of sample piece i of `pieces` (each piece_len bytes) in a chunk of
 * raw_len bytes: centred at (2i+1)/(2*pieces) of the chunk, aligned to 4
 * bytes so every piece sees the same byte phase. */
static size_t sample_start(size_t raw_len, size_t pieces, size_t piece_len, size_t i)
{
    if (pieces == 1)
        return 0;
    size_t centre = raw_len / (2 * pieces) * (2 * i + 1);
    return (centre - piece_len / 2) & ~(size_t)3;
}

/* A sampled choice: the codec and, for the zstd codecs, which planes to code. */
typedef struct codec_choice {
    st_codec_id codec;
    unsigned planes;
} codec_choice;

/*
 * Size of the zstd-planes payload of the sample with element size es. The
 * pieces are gathered into shuf and shuffled together into comp, so each
 * plane is one frame of sample_len / es bytes as in the whole chunk; the
 * trial output then goes to shuf. Both hold raw_len >= sample_len bytes.
 */
static size_t trial_planes(const uint8_t *raw, size_t raw_len, size_t pieces, size_t piece_len,
                           size_t es, uint8_t *shuf, uint8_t *comp, unsigned *planes)
{
    size_t sample_len = pieces * piece_len;
    for (size_t i = 0; i < pieces; i++)
        memcpy(shuf + i * piece_len, raw + sample_start(raw_len, pieces, piece_len, i), piece_len);
    st_shuffle(comp, shuf, sample_len, es);
    size_t total = st_planes_trial(comp, sample_len, es, shuf, raw_len, planes);
    return total ? total : sample_len; /* no zstd context: not a candidate */
}

/*
 * Picks the codec for raw[0..raw_len) from trials on the sample. Returns
 * ST_CODEC_RAW when no candidate saves ST_CODEC_MIN_GAIN_PCT on it. When a
 * shuffle wins and zstd is allowed, zstd over the planes is tried with the
 * shuffle's element size and wins if it saves ST_CODEC_ZSTD_GAIN_PCT more
 * of the sample (docs/CODEC.md). shuf and comp hold raw_len bytes each.
 */
static codec_choice choose_codec(const uint8_t *raw, size_t raw_len, int lz4_only, uint8_t *shuf,
                                 uint8_t *comp)
{
    static const st_codec_id candidates[] = {ST_CODEC_LZ4, ST_CODEC_LZ4_SHUF2, ST_CODEC_LZ4_SHUF4};
    size_t sizes[ST_CODEC_LZ4_SHUF4 + 1] = {0};
    size_t pieces, piece_len;
    if (raw_len <= ST_CODEC_SAMPLE_TOTAL) {
        pieces = 1;
        piece_len = raw_len;
    } else {
        pieces = ST_CODEC_SAMPLE_PIECES;
        piece_len = ST_CODEC_SAMPLE_PIECE;
    }
    size_t sample_len = pieces * piece_len;
    codec_choice best = {ST_CODEC_RAW, 0};
    size_t best_size = gain_limit(sample_len) + 1; /* must beat the gain threshold */
    for (size_t c = 0; c < sizeof candidates / sizeof candidates[0]; c++) {
        /* Shuffling fewer than two elements cannot help. */
        if (codec_elem_size(candidates[c]) * 2 > raw_len)
            continue;
        size_t total = 0;
        for (size_t i = 0; i < pieces; i++)
            total += trial_piece(candidates[c], raw + sample_start(raw_len, pieces, piece_len, i),
                                 piece_len, shuf, comp);
        sizes[candidates[c]] = total;
        /* Strictly smaller wins, so a tie keeps the cheaper-to-decode codec. */
        if (total < best_size) {
            best.codec = candidates[c];
            best_size = total;
        }
    }
    if (lz4_only || codec_elem_size(best.codec) == 0)
        return best;
    /* bf16 gives 2- and 4-byte shuffles within a fraction of a percent under
     * LZ4, and 4 byte planes then cost zstd twice the frames: 4 only when
     * it clearly wins, as on fp32. */
    size_t es = sizes[ST_CODEC_LZ4_SHUF4] &&
                        sizes[ST_CODEC_LZ4_SHUF4] * 100 <
                            sizes[ST_CODEC_LZ4_SHUF2] * (100 - ST_CODEC_SHUF4_MARGIN_PCT)
                    ? 4
                    : 2;
    unsigned planes;
    size_t zsize = trial_planes(raw, raw_len, pieces, piece_len, es, shuf, comp, &planes);
    if (zsize + sample_len * ST_CODEC_ZSTD_GAIN_PCT / 100 <= best_size) {
        best.codec = es == 4 ? ST_CODEC_ZSTD_SHUF4 : ST_CODEC_ZSTD_SHUF2;
        best.planes = planes;
    }
    return best;
}

static void put_header(uint8_t *out, st_codec_id codec, size_t raw_len, size_t payload_len,
                       const st_id *id)
{
    memcpy(out, codec_magic, sizeof codec_magic);
    out[3] = ST_CODEC_VERSION_CHAR;
    out[4] = (uint8_t)codec;
    out[5] = out[6] = out[7] = 0;
    st_le32_put(out + 8, (uint32_t)raw_len);
    st_le32_put(out + 12, (uint32_t)payload_len);
    memcpy(out + 16, id->b, ST_ID_LEN);
}

/* A plane mask of zstd codec between the file's frame (bit q: the bytes at
 * file offsets = q mod es) and the frame of a chunk at file offset at (bit
 * p: its plane p, the bytes at file offsets = at + p mod es): to_chunk
 * moves bit (at + p) mod es to p, else the way back. */
static unsigned planes_reframe(unsigned mask, st_codec_id codec, uint64_t at, int to_chunk)
{
    if (!codec_is_zstd(codec))
        return mask;
    const unsigned es = codec == ST_CODEC_ZSTD_SHUF4 ? 4 : 2;
    const unsigned k = (unsigned)(at % es);
    const unsigned full = (1u << es) - 1;
    mask &= full;
    if (!k)
        return mask;
    if (to_chunk) /* rotate right by k */
        return ((mask >> k) | (mask << (es - k))) & full;
    return ((mask << k) | (mask >> (es - k))) & full;
}

void st_codec_plan_next(st_codec_plan *plan, uint64_t at, st_codec_hint *hint)
{
    hint->lz4_only = plan->lz4_only;
    hint->untried =
        plan->streak >= ST_CODEC_PLAN_STREAK && plan->since_trial + 1 < ST_CODEC_PLAN_RECHECK;
    hint->codec = plan->last;
    hint->planes = planes_reframe(plan->planes, plan->last, at, 1);
    if (hint->untried) {
        plan->since_trial++;
        return;
    }
    plan->trials++;
    plan->since_trial = 0;
}

void st_codec_plan_learn(st_codec_plan *plan, uint64_t at, const st_codec_outcome *out)
{
    if (out->trial) {
        plan->streak = out->codec == plan->last && plan->streak ? plan->streak + 1 : 1;
        plan->last = out->codec;
        plan->planes = planes_reframe(out->planes, out->codec, at, 0);
    } else if (out->failed) {
        plan->streak = 0; /* the data changed: sample the next chunk */
    }
}

st_err st_codec_encode(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                       size_t out_cap, size_t *out_len, uint8_t *scratch, st_codec_id *codec_used)
{
    return st_codec_encode_planned(raw, raw_len, id, out, out_cap, out_len, scratch, NULL,
                                   codec_used);
}

st_err st_codec_encode_planned(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                               size_t out_cap, size_t *out_len, uint8_t *scratch,
                               st_codec_plan *plan, st_codec_id *codec_used)
{
    st_codec_hint hint = {0};
    st_codec_outcome outcome;
    if (plan)
        st_codec_plan_next(plan, 0, &hint);
    st_err e =
        st_codec_encode_hinted(raw, raw_len, id, out, out_cap, out_len, scratch, &hint, &outcome);
    if (!e && plan)
        st_codec_plan_learn(plan, 0, &outcome);
    if (!e && codec_used)
        *codec_used = outcome.used;
    return e;
}

st_err st_codec_encode_hinted(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                              size_t out_cap, size_t *out_len, uint8_t *scratch,
                              const st_codec_hint *hint, st_codec_outcome *outcome)
{
    memset(outcome, 0, sizeof *outcome);
    if (!id || !out || !out_len || !hint || (raw_len && (!raw || !scratch)))
        return st_seterr(ST_ERR_INVALID, "codec encode: NULL argument");
    if (raw_len > ST_CODEC_MAX_RAW)
        return st_seterr(ST_ERR_INVALID, "codec encode: chunk of %zu bytes exceeds the %u limit",
                         raw_len, (unsigned)ST_CODEC_MAX_RAW);
    if (out_cap < st_codec_bound(raw_len))
        return st_seterr(ST_ERR_INVALID,
                         "codec encode: output holds %zu bytes, a %zu-byte chunk needs %zu",
                         out_cap, raw_len, st_codec_bound(raw_len));

    uint8_t *payload = out + ST_CODEC_HEADER_LEN;
    codec_choice choice = {ST_CODEC_RAW, 0};
    if (raw_len && hint->untried) {
        choice = (codec_choice){hint->codec, hint->planes};
    } else if (raw_len) {
        choice = choose_codec(raw, raw_len, hint->lz4_only, scratch, payload);
        outcome->trial = 1;
    }
    outcome->lz4_only = hint->lz4_only;
    outcome->codec = choice.codec;
    outcome->planes = choice.planes;
    st_codec_id codec = choice.codec;
    size_t payload_len = 0;
    if (codec != ST_CODEC_RAW) {
        size_t es = codec_elem_size(codec);
        const uint8_t *src = raw;
        if (es) {
            st_shuffle(scratch, raw, raw_len, es);
            src = scratch;
        }
        /* The sample can mislead; a capped coder returns 0 and we store raw. */
        if (codec_is_zstd(codec))
            payload_len =
                st_planes_encode(src, raw_len, es, choice.planes, payload, gain_limit(raw_len));
        else
            payload_len = lz4_into(src, raw_len, payload, gain_limit(raw_len));
        if (payload_len == 0) {
            outcome->failed = 1;
            codec = ST_CODEC_RAW;
        }
    }
    if (codec == ST_CODEC_RAW) {
        if (raw_len)
            memcpy(payload, raw, raw_len);
        payload_len = raw_len;
    }
    put_header(out, codec, raw_len, payload_len, id);
    *out_len = ST_CODEC_HEADER_LEN + payload_len;
    outcome->used = codec;
    return ST_OK;
}

int st_codec_outcome_serves(const st_codec_outcome *out, const st_codec_hint *hint,
                            st_codec_outcome *as)
{
    if (out->lz4_only != hint->lz4_only)
        return 0;
    if (!hint->untried) {
        if (!out->trial)
            return 0; /* a trial would have chosen by the sample: unknown */
    } else if (out->codec != hint->codec ||
               (codec_is_zstd(out->codec) && out->planes != hint->planes)) {
        return 0;
    }
    /* The same codec (and planes) on the same bytes: the same encoding. */
    *as = *out;
    as->trial = !hint->untried;
    return 1;
}

st_err st_codec_header(const uint8_t *enc, size_t enc_len, st_chunk_header *h)
{
    if (!enc || enc_len < ST_CODEC_HEADER_LEN)
        return st_seterr(ST_ERR_CORRUPT, "chunk: %zu bytes, shorter than its %d-byte header",
                         enc ? enc_len : 0, ST_CODEC_HEADER_LEN);
    if (memcmp(enc, codec_magic, sizeof codec_magic) != 0)
        return st_seterr(ST_ERR_CORRUPT, "chunk: bad magic %02x%02x%02x%02x", enc[0], enc[1],
                         enc[2], enc[3]);
    if (enc[3] != ST_CODEC_VERSION_CHAR) {
        /* A later digit is a format this build does not know; anything else
         * is damage. Both are errors; the code tells the user which. */
        if (enc[3] > ST_CODEC_VERSION_CHAR && enc[3] <= '9')
            return st_seterr(ST_ERR_UNSUPPORTED, "chunk: format version %c is newer than %c",
                             enc[3], ST_CODEC_VERSION_CHAR);
        return st_seterr(ST_ERR_CORRUPT, "chunk: bad format version byte 0x%02x", enc[3]);
    }
    uint8_t codec = enc[4];
    if (codec > ST_CODEC_ZSTD_SHUF4)
        return st_seterr(ST_ERR_UNSUPPORTED, "chunk: unknown codec %u", codec);
    if (enc[5] || enc[6] || enc[7])
        return st_seterr(ST_ERR_CORRUPT, "chunk: reserved header bytes are not zero");
    uint32_t raw_len = st_le32_get(enc + 8);
    uint32_t payload_len = st_le32_get(enc + 12);
    if (raw_len > ST_CODEC_MAX_RAW)
        return st_seterr(ST_ERR_CORRUPT, "chunk: raw length %u exceeds the %u limit", raw_len,
                         (unsigned)ST_CODEC_MAX_RAW);
    if (payload_len > ST_CODEC_MAX_RAW)
        return st_seterr(ST_ERR_CORRUPT, "chunk: payload length %u exceeds the %u limit",
                         payload_len, (unsigned)ST_CODEC_MAX_RAW);
    if (payload_len > enc_len - ST_CODEC_HEADER_LEN)
        return st_seterr(ST_ERR_CORRUPT,
                         "chunk: payload length %u but only %zu bytes follow the header",
                         payload_len, enc_len - ST_CODEC_HEADER_LEN);
    if (codec == ST_CODEC_RAW && payload_len != raw_len)
        return st_seterr(ST_ERR_CORRUPT, "chunk: raw codec with payload %u != raw length %u",
                         payload_len, raw_len);
    /* Our encoder never stores a compressed payload that did not shrink the
     * chunk, and neither coder encodes a non-empty input in 0 bytes. */
    if (codec != ST_CODEC_RAW && (payload_len == 0 || payload_len >= raw_len))
        return st_seterr(ST_ERR_CORRUPT, "chunk: compressed payload %u for raw length %u",
                         payload_len, raw_len);
    h->codec = (st_codec_id)codec;
    h->raw_len = raw_len;
    h->payload_len = payload_len;
    memcpy(h->id.b, enc + 16, ST_ID_LEN);
    return ST_OK;
}

st_err st_codec_decode_view(const uint8_t *enc, size_t enc_len, const st_id *expect_id,
                            uint8_t *out, size_t out_cap, size_t *raw_len, uint8_t *scratch,
                            const uint8_t **bytes)
{
    char want_hex[ST_ID_HEX_LEN + 1], got_hex[ST_ID_HEX_LEN + 1];
    st_chunk_header h;
    st_err e = st_codec_header(enc, enc_len, &h);
    if (e != ST_OK)
        return e;
    if (expect_id && st_id_cmp(expect_id, &h.id) != 0)
        return st_seterr(ST_ERR_CORRUPT, "chunk: header id %s, expected %s",
                         st_id_hex(&h.id, got_hex), st_id_hex(expect_id, want_hex));
    /* The caller sizes out from its index (pack trailer, manifest); a header
     * claiming more is damage on one side, never a reason to write past. */
    if (out_cap < h.raw_len || (h.raw_len && !out))
        return st_seterr(ST_ERR_CORRUPT,
                         "chunk %s: header says %u raw bytes, more than the %zu expected",
                         st_id_hex(&h.id, got_hex), h.raw_len, out ? out_cap : 0);
    size_t es = codec_elem_size(h.codec);
    if (es && !scratch)
        return st_seterr(ST_ERR_INVALID, "chunk %s: shuffled chunk needs a scratch buffer",
                         st_id_hex(&h.id, got_hex));

    const uint8_t *payload = enc + ST_CODEC_HEADER_LEN;
    /* A raw chunk is verified where it lies: no copy (the caller's enc is
     * not changed under us, so what is checked is what it reads). */
    const uint8_t *raw = h.codec == ST_CODEC_RAW ? payload : out;
    if (codec_is_zstd(h.codec)) {
        e = st_planes_decode(payload, h.payload_len, h.raw_len, es, scratch);
        if (e != ST_OK)
            return st_seterr(e, "chunk %s: %s", st_id_hex(&h.id, got_hex), st_errmsg());
        st_unshuffle(out, scratch, h.raw_len, es);
    } else if (h.codec != ST_CODEC_RAW) {
        /* Exact length: LZ4_decompress_safe never writes past raw_len, and a
         * short result means the payload or a length field is damaged. */
        uint8_t *dst = es ? scratch : out;
        int n = LZ4_decompress_safe((const char *)payload, (char *)dst, (int)h.payload_len,
                                    (int)h.raw_len);
        if (n != (int)h.raw_len)
            return st_seterr(ST_ERR_CORRUPT, "chunk %s: LZ4 payload is damaged (%s)",
                             st_id_hex(&h.id, got_hex),
                             n < 0 ? "malformed stream" : "wrong decoded length");
        if (es)
            st_unshuffle(out, scratch, h.raw_len, es);
    }
    st_id actual = st_id_of(raw, h.raw_len);
    if (st_id_cmp(&actual, &h.id) != 0)
        return st_seterr(ST_ERR_CORRUPT, "chunk %s: content hashes to %s (checksum mismatch)",
                         st_id_hex(&h.id, want_hex), st_id_hex(&actual, got_hex));
    *raw_len = h.raw_len;
    *bytes = raw;
    return ST_OK;
}

st_err st_codec_decode(const uint8_t *enc, size_t enc_len, const st_id *expect_id, uint8_t *out,
                       size_t out_cap, size_t *raw_len, uint8_t *scratch)
{
    const uint8_t *bytes;
    size_t len;
    st_err e = st_codec_decode_view(enc, enc_len, expect_id, out, out_cap, &len, scratch, &bytes);
    if (e)
        return e;
    if (bytes != out && len)
        memcpy(out, bytes, len);
    if (raw_len)
        *raw_len = len;
    return ST_OK;
}
