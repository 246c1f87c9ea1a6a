/*
 * st_shuffle — byte-plane shuffle for 2- and 4-byte elements.
 *
 * Float tensors compress badly as they are: every element mixes a fairly
 * predictable exponent byte with noisy mantissa bytes. Regrouping byte k of
 * every element into plane k puts the exponents next to each other, where LZ4
 * finds matches. The codec (st_codec) uses this as a filter before LZ4.
 *
 * Layout for src[0..len) with element size es (2 or 4): n = len / es whole
 * elements, plane p (0 <= p < es) is dst[p*n .. (p+1)*n) and holds
 * src[i*es + p] for i in [0, n); the len % es tail bytes follow unchanged at
 * dst[es*n .. len). So any length is valid, including lengths that are not a
 * multiple of es (content-defined chunks cut anywhere) and 0.
 *
 * Pure functions over caller buffers; src and dst must not overlap.
 * Thread-safe.
 */
#ifndef ST_SHUFFLE_H
#define ST_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

/*! Shuffles src[0..len) into dst[0..len) by byte planes of es (2 or 4) bytes. */
void st_shuffle(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, size_t es);

/*! Inverse of st_shuffle() with the same len and es. */
void st_unshuffle(uint8_t *restrict dst, const uint8_t *restrict src, size_t len, size_t es);

#endif
