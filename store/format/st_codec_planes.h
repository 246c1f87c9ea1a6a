/*
 * st_codec_planes — the payload of codecs 4 and 5 (st_codec.h): the byte
 * planes of a shuffled chunk, each coded on its own with zstd or stored raw.
 * Internal to the codec; layout and reasons in docs/CODEC.md.
 *
 * Payload for a chunk of raw_len bytes shuffled with element size es (2 or
 * 4), n = raw_len / es bytes per plane, t = raw_len % es tail bytes:
 *
 *   for each plane p = 0 .. es-1:
 *     4 bytes  word, LE: bit 31 set = stored raw, bits 0..30 = length L
 *     L bytes  raw: L == n, the plane as is;
 *              zstd: 0 < L < n, exactly one zstd frame (magic 0xFD2FB528,
 *              not skippable or legacy) whose content size field is
 *              present and equals n
 *   t bytes    the tail, unchanged
 *
 * and the payload is exactly es * 4 + sum(L) + t bytes.
 *
 * The zstd contexts are per thread (created on a thread's first use, freed
 * when it exits): no allocation per chunk. Otherwise pure.
 */
#ifndef ST_CODEC_PLANES_H
#define ST_CODEC_PLANES_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define ST_PLANES_WORD_LEN   4
#define ST_PLANES_RAW_FLAG   0x80000000u
#define ST_PLANES_ZSTD_LEVEL 1
/* zstd's match finder for planes (st_codec_planes.c, planes_cctx): a
 * 2^7-entry hash table and matches of 7 bytes or more. */
#define ST_PLANES_ZSTD_HASH_LOG  7
#define ST_PLANES_ZSTD_MIN_MATCH 7
/* A plane is coded only when its trial saves this many percent of it. */
#define ST_PLANES_MIN_GAIN_PCT 3
/* Bit p of a plane mask: plane p is worth a zstd pass. */
#define ST_PLANES_ALL 0xFu

/*!
 * Codes the planes of shuf[0..len) (st_shuffle() layout, element size es)
 * into dst, capacity cap. Planes whose bit is clear in mask are stored raw
 * untried; a plane zstd does not shrink is stored raw. Returns the payload
 * length, or 0 when it would not fit in cap (or, rarely, when this thread
 * has no zstd context: out of memory). Never writes past dst + cap.
 */
size_t st_planes_encode(const uint8_t *shuf, size_t len, size_t es, unsigned mask, uint8_t *dst,
                        size_t cap);

/*!
 * Trial for the sampled choice: the payload size st_planes_encode() would
 * produce for shuf[0..len) with every plane tried, and in *mask the planes
 * that saved ST_PLANES_MIN_GAIN_PCT. tmp (tmp_cap >= len / es bytes)
 * receives the throw-away zstd output. 0 without a zstd context.
 */
size_t st_planes_trial(const uint8_t *shuf, size_t len, size_t es, uint8_t *tmp, size_t tmp_cap,
                       unsigned *mask);

/*!
 * Decodes payload[0..payload_len) of a raw_len-byte chunk into shuf (raw_len
 * bytes, st_shuffle() layout). Checks every field against raw_len before it
 * is used: ST_ERR_CORRUPT (message says what) on any inconsistency,
 * ST_ERR_NOMEM without a zstd context. Never writes past shuf + raw_len.
 */
st_err st_planes_decode(const uint8_t *payload, size_t payload_len, size_t raw_len, size_t es,
                        uint8_t *shuf);

#endif
