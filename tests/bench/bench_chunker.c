/*
 * bench_chunker — throughput of the chunker and of chunk hashing.
 *
 *   bench_chunker [--size MIB] [--reps N] [FILE ...]
 *
 * Times, on random data of --size MiB (default 256) and on each FILE (read
 * into memory first, so the disk is not measured):
 *   chunk        st_chunker_next over the buffer in 1 MiB feeds (default params)
 *   hash         st_id_of (XXH3-128) over the same bytes in 256 KiB pieces
 *   chunk+hash   what sealing a file costs: chunk, then name every chunk
 * Each row is warmed up once (page faults, CPU clocks), then timed --reps
 * times (default 5); the table shows the best and the median in MB/s
 * (10^6 bytes/s). The machine is noisy: compare rows of one run.
 *
 * Single-threaded. Default run: well under 20 s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_chunker.h"
#include "util/st_hash.h"

#include "bench_util.h"

#define FEED       (1u << 20)
#define HASH_PIECE (256u << 10)

static volatile uint64_t sink; /* keeps the work from being optimised away */

/* What run_chunk counts and, with `hash`, names. */
typedef struct chunk_count {
    const uint8_t *buf;
    int hash;
    size_t chunks;
} chunk_count;

static int count_chunk(void *ctx, size_t start, size_t end)
{
    chunk_count *k = ctx;
    if (k->hash)
        sink += st_id_of(k->buf + start, end - start).b[0];
    k->chunks++;
    return 0;
}

/* Chunks buf; hashes each chunk if `hash`. Returns the chunk count. */
static size_t run_chunk(st_chunker *c, const uint8_t *buf, size_t len, int hash)
{
    chunk_count k = {buf, hash, 0};
    st_chunker_reset(c);
    bench_chunk_stream(c, buf, len, FEED, count_chunk, &k);
    return k.chunks;
}

static void run_hash(const uint8_t *buf, size_t len)
{
    for (size_t pos = 0; pos < len; pos += HASH_PIECE) {
        size_t n = len - pos < HASH_PIECE ? len - pos : HASH_PIECE;
        sink += st_id_of(buf + pos, n).b[0];
    }
}

enum work { W_CHUNK, W_HASH, W_BOTH };

static void bench_row(const char *label, st_chunker *c, const uint8_t *buf, size_t len, enum work w,
                      int reps)
{
    static const char *names[] = {"chunk", "hash", "chunk+hash"};
    double t[64];
    size_t chunks = 0;
    if (reps > 64)
        reps = 64;
    for (int r = -1; r < reps; r++) { /* r == -1: warm-up */
        double t0 = bench_now();
        if (w == W_HASH)
            run_hash(buf, len);
        else
            chunks = run_chunk(c, buf, len, w == W_BOTH);
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    double mb = (double)len / 1e6;
    printf("%-28.28s %-11s %10.1f %10.1f", label, names[w], mb / t[0], mb / t[reps / 2]);
    if (w != W_HASH)
        printf(" %9zu %9.0f", chunks, (double)len / (double)chunks);
    printf("\n");
}

int main(int argc, char **argv)
{
    size_t mib = 256;
    int reps = 5;
    int nfiles = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            mib = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            files[nfiles++] = argv[i];
    }
    if (!files || mib == 0 || reps < 1) {
        fprintf(stderr, "usage: %s [--size MIB] [--reps N] [FILE ...]\n", argv[0]);
        return 2;
    }
    st_chunker *c = NULL;
    if (st_chunker_new(NULL, &c) != ST_OK) {
        fprintf(stderr, "st_chunker_new: %s\n", st_errmsg());
        return 1;
    }
    const st_chunker_params *p = &st_chunker_default_params;
    printf("params min/avg/max %u/%u/%u, feed %u, %d reps (+1 warm-up)\n", p->min_size, p->avg_size,
           p->max_size, FEED, reps);
    printf("%-28s %-11s %10s %10s %9s %9s\n", "data", "work", "best MB/s", "med MB/s", "chunks",
           "mean B");

    size_t len = mib << 20;
    uint8_t *buf = malloc(len);
    if (!buf) {
        fprintf(stderr, "out of memory for %zu MiB\n", mib);
        return 1;
    }
    bench_fill_random(buf, len);
    char label[64];
    snprintf(label, sizeof label, "random %zu MiB", mib);
    bench_row(label, c, buf, len, W_CHUNK, reps);
    bench_row(label, c, buf, len, W_HASH, reps);
    bench_row(label, c, buf, len, W_BOTH, reps);
    free(buf);

    for (int i = 0; i < nfiles; i++) {
        size_t flen = 0;
        uint8_t *f = bench_read_file(files[i], 0, &flen);
        if (!f || !flen) {
            fprintf(stderr, "cannot read %s\n", files[i]);
            free(f);
            continue;
        }
        const char *base = strrchr(files[i], '/');
        base = base ? base + 1 : files[i];
        bench_row(base, c, f, flen, W_CHUNK, reps);
        bench_row(base, c, f, flen, W_HASH, reps);
        bench_row(base, c, f, flen, W_BOTH, reps);
        free(f);
    }
    st_chunker_free(c);
    free(files);
    return (int)(sink & 0); /* sink read: the hashing is not dead code */
}
