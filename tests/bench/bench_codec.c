/*
 * bench_codec — what each chunk-compression strategy costs and gains.
 *
 *   bench_codec [FILE...] [--piece BYTES] [--min-time SECONDS] [--summary]
 *
 * Splits each FILE (or, without one, 32 MiB of synthetic fp32 weights) into
 * pieces (1 MiB by default) and reports, per strategy, encode and decode
 * MB/s (of raw bytes, one thread: per core) and stored/original size:
 *
 *   lz4        LZ4 on the piece as is
 *   shuf2+lz4  LZ4 over a 2-byte-plane shuffle
 *   shuf4+lz4  LZ4 over a 4-byte-plane shuffle
 *   best-of-3  all three on every whole piece, keep the smallest, raw when
 *              none saves ST_CODEC_MIN_GAIN_PCT (the exhaustive encoder the
 *              sampled choice replaces); decode runs the winner
 *   auto       st_codec_encode / st_codec_decode: sampled choice, headers,
 *              and decode's XXH3-128 verification included
 *   today      st_codec_encode_planned with lz4_only (codecs 0-3, the codec
 *              before zstd per plane) / st_codec_decode, as the ingest does
 *   new        the same with every codec (zstd per plane when it wins)
 *
 * plus which codec auto, today and new picked how often, a summary line per
 * file comparing today with new, and the shuffle's own speed. Each
 * figure is the best of repeated passes after a warm-up pass (first passes
 * pay page faults). Single-threaded; the ratio between rows is what counts
 * on a noisy machine (docs/CODEC.md).
 *
 * --summary runs only today and new and prints, instead of the tables, one
 * line per file for scripts and docs tables:
 *
 *   file raw_bytes today_stored new_stored today_ratio new_ratio
 *
 * (stored includes the chunk headers, as the ratios above do).
 */
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_codec.h"
#include "format/st_shuffle.h"

#include "bench_util.h"

#define MIB (1u << 20)

typedef struct bench_input {
    uint8_t *data;
    size_t len;
    size_t piece;
    size_t count; /* pieces; the last may be short */
} bench_input;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_codec: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static size_t piece_len(const bench_input *in, size_t i)
{
    size_t off = i * in->piece;
    return in->len - off < in->piece ? in->len - off : in->piece;
}

/* ---- strategies: encode piece i into slot, return stored bytes ---- */

typedef struct slot {
    uint8_t *buf; /* capacity: st_codec_bound or LZ4_compressBound, whichever is larger */
    size_t len;
    int codec; /* what decode must undo (st_codec_id) */
} slot;

typedef struct bench_ctx {
    bench_input *in;
    slot *slots;
    uint8_t *scratch;  /* one piece */
    uint8_t *scratch2; /* one LZ4 bound */
    uint8_t *out;      /* one piece */
    size_t slot_cap;
    st_id *ids;
    st_codec_plan plan; /* today / new: one plan per pass, as per file */
} bench_ctx;

static size_t es_of(int codec)
{
    return codec == ST_CODEC_LZ4_SHUF2 ? 2 : codec == ST_CODEC_LZ4_SHUF4 ? 4 : 0;
}

/* One filter + LZ4 into dst; returns the compressed size (never 0 for len > 0). */
static size_t filter_lz4(bench_ctx *b, int codec, const uint8_t *src, size_t len, uint8_t *dst)
{
    size_t es = es_of(codec);
    if (es) {
        st_shuffle(b->scratch, src, len, es);
        src = b->scratch;
    }
    return (size_t)LZ4_compress_default((const char *)src, (char *)dst, (int)len, (int)b->slot_cap);
}

static void enc_fixed(bench_ctx *b, size_t i, int codec)
{
    size_t len = piece_len(b->in, i);
    const uint8_t *src = b->in->data + i * b->in->piece;
    b->slots[i].len = filter_lz4(b, codec, src, len, b->slots[i].buf);
    b->slots[i].codec = codec;
}

static void enc_best3(bench_ctx *b, size_t i)
{
    size_t len = piece_len(b->in, i);
    const uint8_t *src = b->in->data + i * b->in->piece;
    slot *s = &b->slots[i];
    size_t limit = len * (100 - ST_CODEC_MIN_GAIN_PCT) / 100;
    s->codec = ST_CODEC_RAW;
    s->len = len;
    for (int c = ST_CODEC_LZ4; c <= ST_CODEC_LZ4_SHUF4; c++) {
        size_t n = filter_lz4(b, c, src, len, b->scratch2);
        if (n <= limit && n < s->len) {
            memcpy(s->buf, b->scratch2, n);
            s->len = n;
            s->codec = c;
        }
    }
    if (s->codec == ST_CODEC_RAW)
        memcpy(s->buf, src, len);
    s->len += ST_CODEC_HEADER_LEN; /* same accounting as auto */
}

/* st_codec_encode, or st_codec_encode_planned when plan is not NULL. */
static int enc_auto(bench_ctx *b, size_t i, st_codec_plan *plan)
{
    size_t len = piece_len(b->in, i);
    const uint8_t *src = b->in->data + i * b->in->piece;
    st_codec_id used;
    st_err e = st_codec_encode_planned(src, len, &b->ids[i], b->slots[i].buf, b->slot_cap,
                                       &b->slots[i].len, b->scratch, plan, &used);
    if (e != ST_OK) {
        fprintf(stderr, "bench_codec: encode: %s\n", st_errmsg());
        return -1;
    }
    b->slots[i].codec = (int)used;
    return 0;
}

/* Decodes a non-auto slot: raw copy, or LZ4 then unshuffle. */
static int dec_plain(bench_ctx *b, size_t i, int has_header)
{
    size_t len = piece_len(b->in, i);
    slot *s = &b->slots[i];
    const uint8_t *p = s->buf;
    size_t n = s->len - (has_header ? ST_CODEC_HEADER_LEN : 0);
    if (s->codec == ST_CODEC_RAW) {
        memcpy(b->out, p, len);
        return 0;
    }
    size_t es = es_of(s->codec);
    uint8_t *dst = es ? b->scratch : b->out;
    if (LZ4_decompress_safe((const char *)p, (char *)dst, (int)n, (int)len) != (int)len)
        return -1;
    if (es)
        st_unshuffle(b->out, b->scratch, len, es);
    return 0;
}

static int dec_auto(bench_ctx *b, size_t i)
{
    size_t raw_len;
    st_err e = st_codec_decode(b->slots[i].buf, b->slots[i].len, &b->ids[i], b->out, b->in->piece,
                               &raw_len, b->scratch);
    if (e != ST_OK) {
        fprintf(stderr, "bench_codec: decode: %s\n", st_errmsg());
        return -1;
    }
    return 0;
}

enum { S_LZ4, S_SHUF2, S_SHUF4, S_BEST3, S_AUTO, S_TODAY, S_NEW, S_COUNT };
static const char *strategy_names[S_COUNT] = {"lz4",  "shuf2+lz4", "shuf4+lz4", "best-of-3",
                                              "auto", "today",     "new"};

static int encode_all(bench_ctx *b, int s)
{
    b->plan = (st_codec_plan){.lz4_only = s == S_TODAY};
    for (size_t i = 0; i < b->in->count; i++) {
        switch (s) {
        case S_LZ4: enc_fixed(b, i, ST_CODEC_LZ4); break;
        case S_SHUF2: enc_fixed(b, i, ST_CODEC_LZ4_SHUF2); break;
        case S_SHUF4: enc_fixed(b, i, ST_CODEC_LZ4_SHUF4); break;
        case S_BEST3: enc_best3(b, i); break;
        default:
            if (enc_auto(b, i, s == S_AUTO ? NULL : &b->plan) != 0)
                return -1;
        }
    }
    return 0;
}

static int decode_all(bench_ctx *b, int s)
{
    for (size_t i = 0; i < b->in->count; i++) {
        int rc;
        if (s >= S_AUTO)
            rc = dec_auto(b, i);
        else
            rc = dec_plain(b, i, s == S_BEST3);
        if (rc != 0)
            return -1;
        /* Cheap spot check that decode undid encode. */
        size_t len = piece_len(b->in, i);
        if (memcmp(b->out, b->in->data + i * b->in->piece, len < 4096 ? len : 4096) != 0) {
            fprintf(stderr, "bench_codec: %s piece %zu decodes to different bytes\n",
                    strategy_names[s], i);
            return -1;
        }
    }
    return 0;
}

/* Best time of passes until min_time has elapsed (at least 3), after a warm-up. */
static double time_best(bench_ctx *b, int s, int (*fn)(bench_ctx *, int), double min_time)
{
    if (fn(b, s) != 0)
        return -1;
    double best = 1e30, start = bench_now();
    for (int pass = 0; pass < 3 || bench_now() - start < min_time; pass++) {
        double t0 = bench_now();
        if (fn(b, s) != 0)
            return -1;
        double t = bench_now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

static double shuffle_speed(const bench_input *in, size_t es, int inverse, uint8_t *dst)
{
    size_t n = in->len < 64 * MIB ? in->len : 64 * MIB;
    double best = 1e30;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = bench_now();
        if (inverse)
            st_unshuffle(dst, in->data, n, es);
        else
            st_shuffle(dst, in->data, n, es);
        double t = bench_now() - t0;
        if (t < best && pass > 0)
            best = t;
    }
    return (double)n / best / 1e6;
}

/* ---- input ---- */

static int load_file(const char *path, bench_input *in)
{
    in->data = bench_read_file(path, 0, &in->len);
    if (!in->data) {
        perror(path);
        return -1;
    }
    if (!in->len) {
        fprintf(stderr, "bench_codec: %s is empty\n", path);
        return -1;
    }
    return 0;
}

/* Roughly normal fp32 weights (sum of uniforms), sigma 0.02. */
static void make_synthetic(bench_input *in)
{
    in->len = 32 * MIB;
    in->data = xmalloc(in->len);
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < in->len / 4; i++) {
        float acc = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
            acc += (float)((s * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1u << 24);
        }
        float f = (acc - 2.0f) * 0.034f;
        memcpy(in->data + 4 * i, &f, 4);
    }
}

typedef struct bench_result {
    double enc_mbs, dec_mbs, ratio;
    size_t raw, stored; /* exact bytes: a ratio of 3 digits hides a 0.1% target miss */
} bench_result;

/* Runs every strategy on one input (only today and new when summary is set,
 * printing nothing); fills res (per strategy). */
static int bench_one(bench_input *in, const char *name, double min_time, int summary,
                     bench_result *res)
{
    in->count = (in->len + in->piece - 1) / in->piece;
    bench_ctx b = {.in = in};
    size_t lz4_cap = (size_t)LZ4_compressBound((int)in->piece);
    b.slot_cap = lz4_cap > st_codec_bound(in->piece) ? lz4_cap : st_codec_bound(in->piece);
    b.slots = xmalloc(in->count * sizeof *b.slots);
    for (size_t i = 0; i < in->count; i++)
        b.slots[i].buf = xmalloc(b.slot_cap);
    b.scratch = xmalloc(st_codec_scratch_bound(in->piece));
    b.scratch2 = xmalloc(b.slot_cap);
    b.out = xmalloc(in->piece);
    b.ids = xmalloc(in->count * sizeof *b.ids);
    for (size_t i = 0; i < in->count; i++)
        b.ids[i] = st_id_of(in->data + i * in->piece, piece_len(in, i));

    if (!summary) {
        printf("input: %s, %.1f MB, %zu pieces of %zu bytes\n", name, (double)in->len / 1e6,
               in->count, in->piece);
        printf("%-10s %12s %12s %8s\n", "strategy", "encode MB/s", "decode MB/s", "ratio");
    }
    int rc = 0;
    for (int s = summary ? S_TODAY : 0; s < S_COUNT; s++) {
        double te = time_best(&b, s, encode_all, min_time);
        size_t stored = 0, picks[ST_CODEC_ZSTD_SHUF4 + 1] = {0};
        for (size_t i = 0; i < in->count; i++) {
            stored += b.slots[i].len;
            picks[b.slots[i].codec % (ST_CODEC_ZSTD_SHUF4 + 1)]++;
        }
        double td = te < 0 ? -1 : time_best(&b, s, decode_all, min_time);
        if (te < 0 || td < 0) {
            rc = 1;
            continue;
        }
        res[s] = (bench_result){(double)in->len / te / 1e6, (double)in->len / td / 1e6,
                                (double)stored / (double)in->len, in->len, stored};
        if (summary)
            continue;
        printf("%-10s %12.0f %12.0f %8.3f", strategy_names[s], res[s].enc_mbs, res[s].dec_mbs,
               res[s].ratio);
        if (s >= S_AUTO)
            printf("   picked raw %zu lz4 %zu shuf2 %zu shuf4 %zu zstd2 %zu zstd4 %zu", picks[0],
                   picks[1], picks[2], picks[3], picks[4], picks[5]);
        printf("\n");
    }
    if (!summary) {
        uint8_t *dst = xmalloc(in->len < 64 * MIB ? in->len : 64 * MIB);
        printf("shuffle MB/s: es2 %.0f / %.0f unshuffle, es4 %.0f / %.0f unshuffle\n",
               shuffle_speed(in, 2, 0, dst), shuffle_speed(in, 2, 1, dst),
               shuffle_speed(in, 4, 0, dst), shuffle_speed(in, 4, 1, dst));
        free(dst);
    }

    for (size_t i = 0; i < in->count; i++)
        free(b.slots[i].buf);
    free(b.slots);
    free(b.scratch);
    free(b.scratch2);
    free(b.out);
    free(b.ids);
    return rc;
}

/* The summary's name for file f: its basename, or the path as given when
 * another file has the same basename (the __0_0.distcp of two DCP steps). */
static const char *display_name(const char *const *paths, size_t npaths, size_t f)
{
    const char *slash = strrchr(paths[f], '/'), *base = slash ? slash + 1 : paths[f];
    for (size_t g = 0; g < npaths; g++) {
        const char *s = strrchr(paths[g], '/');
        if (g != f && !strcmp(s ? s + 1 : paths[g], base))
            return paths[f];
    }
    return base;
}

int main(int argc, char **argv)
{
    const char *paths[64];
    size_t npaths = 0;
    double min_time = 0.5;
    size_t piece = MIB;
    int summary = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--piece") && i + 1 < argc)
            piece = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--summary"))
            summary = 1;
        else if (argv[i][0] == '-' || npaths == sizeof paths / sizeof paths[0]) {
            fprintf(stderr,
                    "usage: %s [FILE...] [--piece BYTES] [--min-time SECONDS] [--summary]\n",
                    argv[0]);
            return 2;
        } else
            paths[npaths++] = argv[i];
    }
    if (piece == 0 || piece > ST_CODEC_MAX_RAW) {
        fprintf(stderr, "bench_codec: --piece must be 1..%u\n", (unsigned)ST_CODEC_MAX_RAW);
        return 2;
    }
    bench_result res[64][S_COUNT];
    size_t runs = npaths ? npaths : 1;
    int rc = 0;
    memset(res, 0, sizeof res);
    for (size_t f = 0; f < runs; f++) {
        bench_input in = {.piece = piece};
        const char *path = npaths ? paths[f] : NULL;
        if (path ? load_file(path, &in) != 0 : (make_synthetic(&in), 0))
            return 1;
        rc |= bench_one(&in, path ? path : "synthetic fp32", min_time, summary, res[f]);
        free(in.data);
        if (!summary)
            printf("\n");
    }
    if (summary) {
        printf("# file raw_bytes today_stored new_stored today_ratio new_ratio\n");
        for (size_t f = 0; f < runs; f++) {
            const bench_result *t = &res[f][S_TODAY], *n = &res[f][S_NEW];
            printf("%s %zu %zu %zu %.4f %.4f\n", npaths ? paths[f] : "synthetic-fp32", t->raw,
                   t->stored, n->stored, t->ratio, n->ratio);
        }
        return rc;
    }
    printf("%-28s %23s %23s\n", "summary (ratio enc/dec MB/s)", "today (codecs 0-3)",
           "new (zstd per plane)");
    for (size_t f = 0; f < runs; f++) {
        const bench_result *t = &res[f][S_TODAY], *n = &res[f][S_NEW];
        printf("%-28s %7.3f %7.0f %7.0f %7.3f %7.0f %7.0f\n",
               npaths ? display_name(paths, npaths, f) : "synthetic fp32", t->ratio, t->enc_mbs,
               t->dec_mbs, n->ratio, n->enc_mbs, n->dec_mbs);
    }
    return rc;
}
