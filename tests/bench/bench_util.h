/*
 * bench_util.h — what the benchmarks share: a monotonic clock in seconds,
 * reading a whole input file into memory (so the disk is not measured),
 * incompressible test data, sorting a row's times, and
 * the loop that streams a buffer through st_chunker_next in feed-sized
 * pieces, as the store feeds it. Header-only; single-threaded use.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_chunker.h"
#include "util/st_fsutil.h"

/* Monotonic seconds, for timing a pass. */
static inline double bench_now(void)
{
    return (double)st_mono_ns() * 1e-9;
}

/*
 * Reads the whole file at path into a malloc'd buffer (caller frees) that
 * has `lead` spare bytes before the file's: the file is at buf + lead, its
 * size in *len (an empty file gives a buffer and *len == 0). Returns NULL
 * with errno set when it cannot be opened, sized or read in full.
 */
static inline uint8_t *bench_read_file(const char *path, size_t lead, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long sz;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto out;
    buf = malloc(lead + (size_t)sz + 1); /* +1: malloc(0) may give NULL */
    if (!buf)
        goto out;
    if (fread(buf + lead, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
        errno = EIO;
        goto out;
    }
    *len = (size_t)sz;
out:
    fclose(f);
    return buf;
}

/* Fills buf[0..len) (a multiple of 8 bytes is filled; the rest is left)
 * with xorshift64* output from a fixed seed: fast, incompressible, the
 * same every run. */
static inline void bench_fill_random(uint8_t *buf, size_t len)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t v = s * 0x2545F4914F6CDD1DULL;
        memcpy(buf + i, &v, 8);
    }
}

/* qsort comparator of doubles, ascending: the times of a row's repetitions. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Called with each chunk [start, end) of the buffer; non-zero stops the walk. */
typedef int bench_chunk_fn(void *ctx, size_t start, size_t end);

/*
 * Feeds buf[0..len) to c in `feed`-byte pieces and calls on_chunk for every
 * chunk, the final partial one included. c must be fresh or reset. Returns
 * 0, or -1 when on_chunk stopped the walk.
 */
static inline int bench_chunk_stream(st_chunker *c, const uint8_t *buf, size_t len, size_t feed,
                                     bench_chunk_fn *on_chunk, void *ctx)
{
    size_t start = 0;
    for (size_t pos = 0; pos < len;) {
        size_t n = len - pos < feed ? len - pos : feed;
        size_t off = 0;
        while (off < n) {
            int cut;
            off += st_chunker_next(c, buf + pos + off, n - off, &cut);
            if (cut) {
                if (on_chunk(ctx, start, pos + off))
                    return -1;
                start = pos + off;
            }
        }
        pos += n;
    }
    if (start < len && on_chunk(ctx, start, len))
        return -1;
    return 0;
}

#endif
