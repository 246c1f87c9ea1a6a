/*
 * st_codec — how one chunk is stored: a fixed 32-byte header, then the payload.
 *
 *   offset size field
 *        0    4 magic "CKc1"  (the '1' is the format version)
 *        4    1 codec: 0 raw, 1 LZ4, 2 LZ4 over a 2-byte-plane shuffle,
 *                      3 LZ4 over a 4-byte-plane shuffle, 4 / 5 zstd per
 *                      plane over a 2- / 4-byte-plane shuffle
 *        5    3 reserved, zero
 *        8    4 raw length (LE)
 *       12    4 payload length (LE)
 *       16   16 chunk id = XXH3-128 of the raw bytes (st_id byte order)
 *
 * The id doubles as the raw checksum: every decode recomputes it and reports
 * ST_ERR_CORRUPT on a mismatch, so no chunk is ever returned unverified.
 *
 * Payloads: raw bytes (0); one LZ4 block (1); one LZ4 block of the shuffled
 * chunk (2, 3); for 4 and 5, per plane of the shuffled chunk a u32 LE word
 * (bit 31: stored raw; bits 0..30: length) and that many bytes, raw or one
 * zstd frame whose content size is the plane size, then the len % size tail
 * bytes raw (st_codec_planes.h, docs/CODEC.md).
 *
 * Encoding tries LZ4 and LZ4 over a 2- or 4-byte-plane shuffle (float
 * tensors compress only once their exponent bytes sit together; layout in
 * st_shuffle.h: whole elements by plane, the len % size tail bytes last and
 * unchanged, so chunks cut anywhere can be shuffled), keeps the smallest, and
 * stores raw unless the result saves at least ST_CODEC_MIN_GAIN_PCT percent.
 * When a shuffle wins, zstd per plane is tried too and replaces it if it
 * saves ST_CODEC_ZSTD_GAIN_PCT more of the sample (float weights: 3-7% of raw
 * for fp32, ~15% for bf16); LZ4 stays the fast path for everything else.
 * Which filter is used is decided on a sample so the common incompressible
 * case costs a fraction of one LZ4 pass (docs/CODEC.md). An encoding is never
 * larger than ST_CODEC_HEADER_LEN + raw_len.
 *
 * Pure functions over caller-owned buffers; the scratch buffer is the only
 * working memory, plus one zstd compression and one decompression context
 * per thread that uses codecs 4/5 (~0.7 MB, freed at thread exit; see
 * docs/MEMORY.md). Thread-safe given distinct buffers.
 */
#ifndef ST_CODEC_H
#define ST_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"

#define ST_CODEC_HEADER_LEN   32
#define ST_CODEC_MIN_GAIN_PCT 3
/* zstd per plane replaces an LZ4 shuffle when it stores this many percent
 * of the sample fewer bytes (docs/CODEC.md, "zstd per plane")... */
#define ST_CODEC_ZSTD_GAIN_PCT 2
/* ...over 4-byte planes only when LZ4 found them this much better than 2. */
#define ST_CODEC_SHUF4_MARGIN_PCT 2
#define ST_CODEC_MAX_RAW          (64u << 20) /* largest chunk a header may describe */

typedef enum st_codec_id {
    ST_CODEC_RAW = 0,
    ST_CODEC_LZ4 = 1,
    ST_CODEC_LZ4_SHUF2 = 2,
    ST_CODEC_LZ4_SHUF4 = 3,
    ST_CODEC_ZSTD_SHUF2 = 4,
    ST_CODEC_ZSTD_SHUF4 = 5,
} st_codec_id;

/*! Worst-case size of st_codec_encode() output for raw_len bytes. */
size_t st_codec_bound(size_t raw_len);

/*! Size of the scratch buffer st_codec_encode/decode need for raw_len bytes. */
size_t st_codec_scratch_bound(size_t raw_len);

/*!
 * Encodes raw[0..raw_len) whose id is `id` (the caller has it already: it
 * looked it up for dedup) into out (capacity out_cap >= st_codec_bound()).
 * scratch must hold st_codec_scratch_bound(raw_len) bytes.
 * Sets *out_len to header + payload. *codec_used (may be NULL) says what won.
 */
st_err st_codec_encode(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                       size_t out_cap, size_t *out_len, uint8_t *scratch, st_codec_id *codec_used);

/* A choice sticks after this many sample trials in a row chose it... */
#define ST_CODEC_PLAN_STREAK 4
/* ...and is tried on a sample again at every this-many-th chunk. */
#define ST_CODEC_PLAN_RECHECK 8

/*!
 * What the encoder remembers between the chunks of one stream (a file):
 * the codec its sample trials last chose and how many times in a row, so
 * that a run of chunks that all choose the same codec stops paying for the
 * trials (docs/CODEC.md, "A choice that sticks"). Caller-owned; zero it
 * (= {0}) at the start of each file, then set lz4_only if wanted. Not
 * shared between threads.
 */
typedef struct st_codec_plan {
    int lz4_only;         /* set by the caller: codecs 0-3 only (benchmarks) */
    st_codec_id last;     /* what the last sample trial chose */
    unsigned planes;      /* zstd codecs: the planes that trial found worth coding, bit
                             q: the bytes at file offsets = q mod the element size */
    uint32_t streak;      /* sample trials in a row that chose `last` */
    uint32_t since_trial; /* chunks encoded since the last sample trial */
    uint64_t trials;      /* sample trials run (for tests and benchmarks) */
} st_codec_plan;

/*!
 * st_codec_encode, with the codec chosen through plan (NULL: sample every
 * chunk, as st_codec_encode). Once ST_CODEC_PLAN_STREAK trials in a row
 * chose the same codec, the next chunks use it untried (raw: no LZ4 at
 * all), except every ST_CODEC_PLAN_RECHECK-th, which is sampled again; a
 * codec used untried that fails to gain on the whole chunk stores it raw
 * and ends the streak. The encoding is valid and verified on decode
 * whatever the choice; only its size depends on it. Each chunk is taken to
 * start at a file offset that is a multiple of 4 (st_codec_plan_next's at:
 * 0), as fixed pieces of a multiple of 4 bytes do.
 */
st_err st_codec_encode_planned(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                               size_t out_cap, size_t *out_len, uint8_t *scratch,
                               st_codec_plan *plan, st_codec_id *codec_used);

/*
 * The plan split in three, so that the encode can run on another thread
 * (st_ingest.c, "Seal threads"): st_codec_plan_next decides, from the plan
 * alone, whether the next chunk is sampled or uses the stuck codec untried
 * (the hint); st_codec_encode_hinted encodes one chunk by a hint and touches
 * no plan (its output is a pure function of the bytes and the hint); and
 * st_codec_plan_learn feeds the outcome back. st_codec_encode_planned is
 * the three in a row.
 */
typedef struct st_codec_hint {
    int lz4_only;      /* codecs 0-3 only, from the plan */
    int untried;       /* 1: use codec/planes without a sample trial */
    st_codec_id codec; /* the stuck codec (untried) */
    unsigned planes;   /* its planes (zstd codecs) */
} st_codec_hint;

typedef struct st_codec_outcome {
    int lz4_only;      /* the hint's */
    int trial;         /* a sample trial ran and chose codec/planes */
    st_codec_id codec; /* the codec tried on the whole chunk (the trial's or the hint's) */
    unsigned planes;   /* its planes (zstd codecs) */
    int failed;        /* it did not gain: the chunk is stored raw */
    st_codec_id used;  /* the codec the chunk was stored with */
} st_codec_outcome;

/*!
 * The hint for the next chunk of plan's stream, which starts at offset at
 * of its file; counts it in the plan. The plan keeps its zstd planes by the
 * file offsets they hold (offset mod the element size), so a chunk that
 * starts at another residue gets them rotated to its own planes: a
 * content-defined cut falls anywhere, and an exponent plane stays the
 * exponent plane whatever chunk it is in.
 */
void st_codec_plan_next(st_codec_plan *plan, uint64_t at, st_codec_hint *hint);

/*!
 * st_codec_encode, the codec chosen by hint (a sample trial unless
 * hint->untried). Reads no plan; *outcome says what happened, for
 * st_codec_plan_learn. Safe on any thread with its own scratch and out.
 */
st_err st_codec_encode_hinted(const uint8_t *raw, size_t raw_len, const st_id *id, uint8_t *out,
                              size_t out_cap, size_t *out_len, uint8_t *scratch,
                              const st_codec_hint *hint, st_codec_outcome *outcome);

/*!
 * 1 if a chunk encoded with the outcome out is byte for byte what encoding
 * it by hint gives (a sample trial serves a sample; a trial or an untried
 * encode that tried the hint's codec and planes serves an untried hint);
 * *as is then the outcome to learn as if it had been encoded by hint. 0:
 * encode it again by hint.
 */
int st_codec_outcome_serves(const st_codec_outcome *out, const st_codec_hint *hint,
                            st_codec_outcome *as);

/*! Feeds the outcome of a chunk encoded by a hint of plan, the chunk at
 *  offset at of its file (st_codec_plan_next's), back into plan. */
void st_codec_plan_learn(st_codec_plan *plan, uint64_t at, const st_codec_outcome *out);

/*! Parsed header of a stored chunk. */
typedef struct st_chunk_header {
    st_codec_id codec;
    uint32_t raw_len;
    uint32_t payload_len;
    st_id id;
} st_chunk_header;

/*!
 * Parses and sanity-checks the header at the start of enc[0..enc_len): magic,
 * version, codec, lengths within ST_CODEC_MAX_RAW and within enc_len.
 * ST_ERR_CORRUPT or ST_ERR_UNSUPPORTED (newer version / unknown codec).
 */
st_err st_codec_header(const uint8_t *enc, size_t enc_len, st_chunk_header *h);

/*!
 * Decodes a stored chunk into out (capacity out_cap >= raw_len) and verifies
 * its id. If expect_id is not NULL it must also equal the header's id.
 * scratch must hold st_codec_scratch_bound(raw_len) bytes.
 * ST_ERR_CORRUPT on any mismatch or malformed payload; the message says what.
 * A header raw length above out_cap is also ST_ERR_CORRUPT (the chunk
 * disagrees with the index the caller sized out from); nothing is written
 * past out_cap. Bytes after the payload within enc_len are ignored.
 */
st_err st_codec_decode(const uint8_t *enc, size_t enc_len, const st_id *expect_id, uint8_t *out,
                       size_t out_cap, size_t *raw_len, uint8_t *scratch);

/*!
 * st_codec_decode() without the copy of a raw (uncompressed) chunk: on
 * ST_OK *bytes points at the verified raw_len bytes, either inside enc (a
 * raw chunk, verified in place) or at out (a decoded one). The checks and
 * errors are st_codec_decode()'s; raw_len and bytes must not be NULL.
 */
st_err st_codec_decode_view(const uint8_t *enc, size_t enc_len, const st_id *expect_id,
                            uint8_t *out, size_t out_cap, size_t *raw_len, uint8_t *scratch,
                            const uint8_t **bytes);

#endif
