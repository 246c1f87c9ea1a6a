/*
 * test_chunker — st_chunker: streaming determinism, size bounds, CDC
 * locality, format-aware cuts (synthetic ZIP and safetensors built here),
 * hostile input, reset.
 *
 * Cut positions are collected as stream offsets where a chunk ends; the last
 * entry is always the stream length (the final chunk).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_chunker.h"
#include "util/st_hash.h"
#include "util/st_wire.h"
#include "ut.h"

#define MAX_CUTS 200000

static const st_chunker_params small_params = {.min_size = 256, .avg_size = 1024, .max_size = 4096};

/* Feed modes for run_chunker: a fixed size, or FEED_RANDOM (1..8192). */
#define FEED_RANDOM 0

static int protocol_ok; /* cleared if next() breaks its contract */

/* Chunks d[0..len) fed in pieces; returns the number of chunks, cuts[] their ends. */
static size_t run_chunker(st_chunker *c, const uint8_t *d, size_t len, size_t feed, uint64_t seed,
                          size_t *cuts)
{
    size_t n = 0, pos = 0;
    uint64_t s = seed | 1;
    while (pos < len) {
        size_t f = feed ? feed : 1 + ut_rand_next(&s) % 8192;
        if (f > len - pos)
            f = len - pos;
        size_t off = 0;
        while (off < f) {
            int cut = -1;
            size_t k = st_chunker_next(c, d + pos + off, f - off, &cut);
            if (k > f - off || (cut != 0 && cut != 1) || (!cut && k != f - off) ||
                (cut && k == 0)) {
                protocol_ok = 0;
                return n;
            }
            off += k;
            if (cut) {
                size_t at = pos + off;
                if ((n && cuts[n - 1] >= at) || n >= MAX_CUTS - 1) {
                    protocol_ok = 0;
                    return n;
                }
                cuts[n++] = at;
            }
        }
        pos += f;
    }
    if (n == 0 || cuts[n - 1] != len)
        cuts[n++] = len;
    return n;
}

static size_t chunk_fresh(const st_chunker_params *p, const uint8_t *d, size_t len, size_t feed,
                          size_t *cuts, st_format *fmt)
{
    st_chunker *c = NULL;
    size_t n = 0;
    if (fmt)
        *fmt = (st_format)-1;
    if (st_chunker_new(p, &c) != ST_OK)
        return 0;
    n = run_chunker(c, d, len, feed, 42, cuts);
    if (fmt)
        *fmt = st_chunker_format(c);
    st_chunker_free(c);
    return n;
}

static int has_cut(const size_t *cuts, size_t n, size_t at)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cuts[mid] < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && cuts[lo] == at;
}

/* Same cuts for every feed pattern; every chunk <= max. */
static void check_streaming(const st_chunker_params *p, const uint8_t *d, size_t len)
{
    static const size_t feeds[] = {1, 7, 4096, FEED_RANDOM, SIZE_MAX};
    size_t *ref = malloc(MAX_CUTS * sizeof *ref);
    size_t *got = malloc(MAX_CUTS * sizeof *got);
    CHECK(ref && got);
    if (!ref || !got)
        goto out;
    protocol_ok = 1;
    size_t nref = chunk_fresh(p, d, len, len ? len : 1, ref, NULL);
    for (size_t i = 0; i < sizeof feeds / sizeof feeds[0]; i++) {
        size_t ngot = chunk_fresh(p, d, len, feeds[i] == SIZE_MAX ? len + 1 : feeds[i], got, NULL);
        int same = ngot == nref && memcmp(got, ref, nref * sizeof *ref) == 0;
        if (!same)
            fprintf(stderr, "  feed %zu: %zu chunks vs %zu whole-buffer\n", feeds[i], ngot, nref);
        CHECK(same);
    }
    CHECK(protocol_ok);
    size_t prev = 0, over = 0;
    for (size_t i = 0; i < nref; i++) {
        if (ref[i] - prev > p->max_size)
            over++;
        prev = ref[i];
    }
    CHECK(over == 0);
    CHECK(nref > 0 && ref[nref - 1] == len);
out:
    free(ref);
    free(got);
}

/* % of b's bytes whose chunk ids occur among a's chunks. */
static double dedup_pct(const uint8_t *a, size_t la, const uint8_t *b, size_t lb,
                        size_t *b_new_chunks)
{
    size_t *ca = malloc(MAX_CUTS * sizeof *ca), *cb = malloc(MAX_CUTS * sizeof *cb);
    st_id *ids = malloc(MAX_CUTS * sizeof *ids);
    double pct = -1;
    if (!ca || !cb || !ids)
        goto out;
    size_t na = chunk_fresh(NULL, a, la, 1 << 20, ca, NULL);
    size_t nb = chunk_fresh(NULL, b, lb, 1 << 20, cb, NULL);
    for (size_t i = 0, prev = 0; i < na; prev = ca[i], i++)
        ids[i] = st_id_of(a + prev, ca[i] - prev);
    uint64_t found = 0;
    *b_new_chunks = 0;
    for (size_t i = 0, prev = 0; i < nb; prev = cb[i], i++) {
        st_id id = st_id_of(b + prev, cb[i] - prev);
        size_t j;
        for (j = 0; j < na && st_id_cmp(&ids[j], &id) != 0; j++)
            ;
        if (j < na)
            found += cb[i] - prev;
        else
            (*b_new_chunks)++;
    }
    pct = 100.0 * (double)found / (double)lb;
out:
    free(ca);
    free(cb);
    free(ids);
    return pct;
}

/* ---- synthetic ZIP (stored, torch-like records) ---- */

enum rec_mode {
    REC_SIZES,     /* sizes in the local header */
    REC_DESC,      /* flag bit 3, 16-byte descriptor after the data */
    REC_DESC64,    /* flag bit 3, zip64 extra, 24-byte descriptor */
    REC_ZIP64_HDR, /* 0xFFFFFFFF sizes, real sizes in the zip64 extra */
};

typedef struct zip_builder {
    st_bytes z;
    size_t *expect; /* forced cuts the chunker must make */
    size_t nexpect;
    size_t arch_start;
    size_t rec_off[16];
    const char *rec_name[16];
    size_t nrec;
} zip_builder;

static void expect_cut(zip_builder *zb, size_t at)
{
    if (at > 0)
        zb->expect[zb->nexpect++] = at;
}

static void zip_add(zip_builder *zb, const char *name, const uint8_t *data, size_t len,
                    enum rec_mode mode)
{
    st_bytes *z = &zb->z;
    size_t hdr = z->len;
    uint16_t nlen = (uint16_t)strlen(name);
    int bit3 = mode == REC_DESC || mode == REC_DESC64;
    int z64 = mode == REC_DESC64 || mode == REC_ZIP64_HDR;
    size_t x64 = z64 ? 20 : 0; /* id, size, usize, csize */
    /* torch pads the data start to 64 bytes with an "FB" extra field */
    size_t pad = (64 - (hdr + 30 + nlen + x64 + 4) % 64) % 64;
    uint32_t hsize = mode == REC_SIZES ? (uint32_t)len : mode == REC_ZIP64_HDR ? 0xFFFFFFFFu : 0;

    expect_cut(zb, hdr);
    zb->rec_off[zb->nrec] = hdr - zb->arch_start;
    zb->rec_name[zb->nrec++] = name;
    st_bytes_put_le32(z, 0x04034b50u);
    st_bytes_put_le16(z, z64 ? 45 : 20);
    st_bytes_put_le16(z, bit3 ? 0x0808 : 0x0800);
    st_bytes_put_le16(z, 0); /* stored */
    st_bytes_put_le32(z, 0); /* time, date */
    st_bytes_put_le32(z, 0x12345678u);
    st_bytes_put_le32(z, hsize);
    st_bytes_put_le32(z, hsize);
    st_bytes_put_le16(z, nlen);
    st_bytes_put_le16(z, (uint16_t)(x64 + 4 + pad));
    st_bytes_append(z, name, nlen);
    if (z64) {
        st_bytes_put_le16(z, 0x0001);
        st_bytes_put_le16(z, 16);
        st_bytes_put_le64(z, mode == REC_ZIP64_HDR ? len : 0);
        st_bytes_put_le64(z, mode == REC_ZIP64_HDR ? len : 0);
    }
    st_bytes_put_le16(z, 0x4246);
    st_bytes_put_le16(z, (uint16_t)pad);
    for (size_t i = 0; i < pad; i++)
        st_bytes_put_u8(z, 'Z');
    expect_cut(zb, z->len); /* data start */
    st_bytes_append(z, data, len);
    if (bit3) {
        st_bytes_put_le32(z, 0x08074b50u);
        st_bytes_put_le32(z, 0x12345678u);
        if (mode == REC_DESC64) {
            st_bytes_put_le64(z, len);
            st_bytes_put_le64(z, len);
        } else {
            st_bytes_put_le32(z, (uint32_t)len);
            st_bytes_put_le32(z, (uint32_t)len);
        }
    }
}

/* Central directory, zip64 end record and locator, end record with comment. */
static void zip_finish(zip_builder *zb, const char *comment)
{
    st_bytes *z = &zb->z;
    size_t cd = z->len;
    expect_cut(zb, cd);
    for (size_t i = 0; i < zb->nrec; i++) {
        uint16_t nlen = (uint16_t)strlen(zb->rec_name[i]);
        st_bytes_put_le32(z, 0x02014b50u);
        for (int k = 0; k < 24; k++) /* versions .. sizes: content irrelevant here */
            st_bytes_put_u8(z, 0);
        st_bytes_put_le16(z, nlen);
        st_bytes_put_le16(z, 0);
        st_bytes_put_le16(z, 0);
        for (int k = 0; k < 8; k++) /* disk, attributes */
            st_bytes_put_u8(z, 0);
        st_bytes_put_le32(z, (uint32_t)zb->rec_off[i]);
        st_bytes_append(z, zb->rec_name[i], nlen);
    }
    size_t z64 = z->len;
    st_bytes_put_le32(z, 0x06064b50u);
    st_bytes_put_le64(z, 44);
    for (int k = 0; k < 44; k++)
        st_bytes_put_u8(z, 0);
    st_bytes_put_le32(z, 0x07064b50u);
    st_bytes_put_le32(z, 0);
    st_bytes_put_le64(z, z64 - zb->arch_start);
    st_bytes_put_le32(z, 1);
    st_bytes_put_le32(z, 0x06054b50u);
    for (int k = 0; k < 16; k++)
        st_bytes_put_u8(z, 0);
    st_bytes_put_le16(z, (uint16_t)strlen(comment));
    st_bytes_append(z, comment, strlen(comment));
    expect_cut(zb, z->len); /* archive end */
    zb->nrec = 0;
    zb->arch_start = z->len;
}

/* Two archives back to back (a DCP shard), then 20 KB of unknown data. */
static void build_zip(zip_builder *zb)
{
    static uint8_t big[300000], mid[100000], tricky[5000];
    ut_rand_fill(big, sizeof big, 11);
    ut_rand_fill(mid, sizeof mid, 12);
    ut_rand_fill(tricky, sizeof tricky, 13);
    /* a false descriptor signature in the data, with wrong sizes, twice:
     * far from the end, and just before the real descriptor (rescan path) */
    memcpy(tricky + 1000, "PK\x07\x08\x00\x00\x00\x00\x10\x00\x00\x00\x10\x00\x00\x00", 16);
    memcpy(tricky + sizeof tricky - 8, "PK\x07\x08", 4);

    memset(zb, 0, sizeof *zb);
    zb->expect = malloc(256 * sizeof *zb->expect);
    zip_add(zb, "archive/data.pkl", mid, 331, REC_DESC);
    zip_add(zb, "archive/data/0", big, sizeof big, REC_DESC);
    zip_add(zb, "archive/data/1", mid, 40, REC_SIZES);
    zip_add(zb, "archive/data/2", mid, 0, REC_DESC); /* empty record */
    zip_add(zb, "archive/data/3", tricky, sizeof tricky, REC_DESC);
    zip_add(zb, "archive/data/4", mid, sizeof mid, REC_DESC64);
    zip_add(zb, "archive/data/5", big + 7, 70000, REC_ZIP64_HDR);
    zip_add(zb, "archive/version", (const uint8_t *)"3\n", 2, REC_DESC);
    zip_finish(zb, "");
    zip_add(zb, "archive/data.pkl", mid + 5, 200, REC_DESC);
    zip_add(zb, "archive/data/0", big + 100, 123457, REC_SIZES);
    zip_add(zb, "archive/data/1", mid, 0, REC_SIZES);
    zip_add(zb, "archive/version", (const uint8_t *)"3\n", 2, REC_DESC);
    zip_finish(zb, "comment!");
    uint8_t tail[20000];
    ut_rand_fill(tail, sizeof tail, 14);
    st_bytes_append(&zb->z, tail, sizeof tail);
}

/* ---- synthetic safetensors ---- */

typedef struct st_file {
    uint8_t *data;
    size_t len;
    size_t expect[16];
    size_t nexpect;
} st_file;

static void build_safetensors(st_file *f)
{
    /* tensor sizes in file order; listed in the JSON in a different order */
    static const size_t sizes[] = {40000, 0, 3, 70000, 1000, 12345};
    const size_t nt = sizeof sizes / sizeof sizes[0];
    size_t begin[6], off = 0;
    for (size_t i = 0; i < nt; i++) {
        begin[i] = off;
        off += sizes[i];
    }
    char json[2048];
    int n = snprintf(json, sizeof json,
                     "{\"__metadata__\":{\"format\":\"pt\",\"data_offsets\":\"[7,9]\"},"
                     "\"w\\\"5\":{\"dtype\":\"U8\",\"shape\":[12345],\"data_offsets\":[%zu,%zu]},"
                     "\"b3\":{\"dtype\":\"U8\",\"shape\":[70000],\"data_offsets\":[%zu,%zu]},"
                     "\"a0\":{\"dtype\":\"U8\",\"shape\":[40000],\"data_offsets\":[%zu,%zu]},"
                     "\"e1\": {\"dtype\":\"U8\", \"shape\":[0], \"data_offsets\" : [ %zu , %zu ]},"
                     "\"c2\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[%zu,%zu]},"
                     "\"d4\":{\"dtype\":\"U8\",\"shape\":[1000],\"data_offsets\":[%zu,%zu]}}",
                     begin[5], begin[5] + sizes[5], begin[3], begin[3] + sizes[3], begin[0],
                     begin[0] + sizes[0], begin[1], begin[1], begin[2], begin[2] + sizes[2],
                     begin[4], begin[4] + sizes[4]);
    while (n % 8)
        json[n++] = ' ';
    f->len = 8 + (size_t)n + off;
    f->data = malloc(f->len);
    st_le64_put(f->data, (uint64_t)n);
    memcpy(f->data + 8, json, (size_t)n);
    ut_rand_fill(f->data + 8 + n, off, 21);
    f->nexpect = 0;
    for (size_t i = 0; i < nt; i++)
        if (i == 0 || begin[i] != begin[i - 1])
            f->expect[f->nexpect++] = 8 + (size_t)n + begin[i];
}

/* ---- cases ---- */

static void test_params(void)
{
    st_chunker *c = NULL;
    st_chunker_params p;
    CHECK_OK(st_chunker_new(NULL, &c));
    CHECK(c != NULL);
    st_chunker_free(c);
    const st_chunker_params *d = &st_chunker_default_params;
    CHECK(d->min_size >= 64 && d->min_size <= d->avg_size && d->avg_size <= d->max_size);
    CHECK(d->max_size <= 8u * 1024 * 1024);
    CHECK(st_chunker_max_chunk(d) == d->max_size);
    p = (st_chunker_params){.min_size = 32, .avg_size = 1024, .max_size = 4096};
    CHECK_ERR(st_chunker_new(&p, &c), ST_ERR_INVALID);
    p = (st_chunker_params){.min_size = 256, .avg_size = 1000, .max_size = 4096};
    CHECK_ERR(st_chunker_new(&p, &c), ST_ERR_INVALID);
    p = (st_chunker_params){.min_size = 2048, .avg_size = 1024, .max_size = 4096};
    CHECK_ERR(st_chunker_new(&p, &c), ST_ERR_INVALID);
    p = (st_chunker_params){.min_size = 256, .avg_size = 8192, .max_size = 4096};
    CHECK_ERR(st_chunker_new(&p, &c), ST_ERR_INVALID);
    p = (st_chunker_params){.min_size = 256, .avg_size = 1024, .max_size = 65u << 20};
    CHECK_ERR(st_chunker_new(&p, &c), ST_ERR_INVALID);
    p = (st_chunker_params){.min_size = 64, .avg_size = 64, .max_size = 64};
    CHECK_OK(st_chunker_new(&p, &c));
    st_chunker_free(c);
    st_chunker_free(NULL);
}

static void test_streaming_random(void)
{
    size_t len = 3u << 20;
    uint8_t *d = malloc(len);
    ut_rand_fill(d, len, 1);
    check_streaming(&small_params, d, len);
    check_streaming(&st_chunker_default_params, d, len);
    check_streaming(&small_params, d, 100); /* shorter than min */
    check_streaming(&small_params, d, 0);
    free(d);
}

static void test_bounds_random(void)
{
    const st_chunker_params *ps[] = {&small_params, &st_chunker_default_params};
    size_t len = 16u << 20;
    uint8_t *d = malloc(len);
    size_t *cuts = malloc(MAX_CUTS * sizeof *cuts);
    ut_rand_fill(d, len, 2);
    for (size_t k = 0; k < 2; k++) {
        const st_chunker_params *p = ps[k];
        st_format fmt = (st_format)-1;
        size_t n = chunk_fresh(p, d, len, 65536, cuts, &fmt);
        CHECK(fmt == ST_FORMAT_UNKNOWN);
        size_t small = 0, big = 0, prev = 0;
        for (size_t i = 0; i < n; i++) {
            size_t sz = cuts[i] - prev;
            if (sz < p->min_size && i + 1 < n)
                small++;
            if (sz > p->max_size)
                big++;
            prev = cuts[i];
        }
        CHECK(small == 0);
        CHECK(big == 0);
        /* normalized chunking: the mean lands between avg/2 and 2 avg */
        double mean = (double)len / (double)n;
        CHECK(mean > p->avg_size / 2.0 && mean < p->avg_size * 2.0);
        fprintf(stderr, "  params %u/%u/%u: %zu chunks, mean %.0f\n", p->min_size, p->avg_size,
                p->max_size, n, mean);
    }
    /* all-zero data has no content cut points: chunks are exactly max */
    memset(d, 0, 1u << 20);
    size_t n = chunk_fresh(&small_params, d, 1u << 20, 4096, cuts, NULL);
    size_t prev = 0, bad = 0;
    for (size_t i = 0; i + 1 < n; prev = cuts[i], i++)
        if (cuts[i] - prev > small_params.max_size || cuts[i] - prev < small_params.min_size)
            bad++;
    CHECK(bad == 0);
    free(cuts);
    free(d);
}

/* dst[0..len] = src[0..len) with `byte` inserted at offset at. */
static void insert_byte(uint8_t *dst, const uint8_t *src, size_t len, size_t at, uint8_t byte)
{
    memcpy(dst, src, at);
    dst[at] = byte;
    memcpy(dst + at + 1, src + at, len - at);
}

/* One byte inserted near the start changes only the first chunk or two. */
static void test_insertion_local(void)
{
    size_t len = 8u << 20;
    uint8_t *a = malloc(len), *b = malloc(len + 1);
    ut_rand_fill(a, len, 3);
    size_t at = 1000;
    insert_byte(b, a, len, at, 0x5A);
    size_t new_chunks = 0;
    double pct = dedup_pct(a, len, b, len + 1, &new_chunks);
    fprintf(stderr, "  insert at %zu: %zu new chunks, %.2f%% of bytes found\n", at, new_chunks,
            pct);
    CHECK(new_chunks >= 1 && new_chunks <= 2);
    /* the same at the very end of a chunk-aligned middle: still local */
    insert_byte(b, a, len, len / 2, 0xA5);
    pct = dedup_pct(a, len, b, len + 1, &new_chunks);
    CHECK(new_chunks >= 1 && new_chunks <= 2);
    free(a);
    free(b);
}

static void test_insertion_dedup(void)
{
    size_t len = 12u << 20;
    uint8_t *a = malloc(len), *b = malloc(len + 1);
    ut_rand_fill(a, len, 4);
    insert_byte(b, a, len, 100, 1);
    size_t new_chunks = 0;
    double pct = dedup_pct(a, len, b, len + 1, &new_chunks);
    fprintf(stderr, "  insert at 100: %.2f%% of %zu bytes found\n", pct, len + 1);
    CHECK(pct >= 95.0);
    free(a);
    free(b);
}

static void test_zip_cuts(void)
{
    zip_builder zb;
    build_zip(&zb);
    size_t *cuts = malloc(MAX_CUTS * sizeof *cuts);
    st_format fmt = ST_FORMAT_UNKNOWN;
    size_t n = chunk_fresh(&small_params, zb.z.data, zb.z.len, 1, cuts, &fmt);
    CHECK(fmt == ST_FORMAT_ZIP);
    size_t missing = 0;
    for (size_t i = 0; i < zb.nexpect; i++) {
        if (!has_cut(cuts, n, zb.expect[i])) {
            fprintf(stderr, "  missing ZIP cut at %zu (#%zu)\n", zb.expect[i], i);
            missing++;
        }
    }
    CHECK(missing == 0);
    /* every header and data start (but offset 0), each directory, each archive end */
    CHECK(zb.nexpect == 2 * 12 - 1 + 2 * 2);
    /* the unknown tail still chunks within bounds; streaming holds */
    check_streaming(&small_params, zb.z.data, zb.z.len);
    /* with the defaults (min 64K) the forced cuts still land */
    n = chunk_fresh(NULL, zb.z.data, zb.z.len, 4096, cuts, NULL);
    missing = 0;
    for (size_t i = 0; i < zb.nexpect; i++)
        missing += !has_cut(cuts, n, zb.expect[i]);
    CHECK(missing == 0);

    /* the same record content behind a different name chunks the same */
    free(cuts);
    free(zb.expect);
    st_bytes_free(&zb.z);
}

static void test_zip_rename_dedup(void)
{
    /* two archives with identical tensors but different archive names (and
     * so shifted offsets): all data bytes dedup */
    static uint8_t t0[200000], t1[90000];
    ut_rand_fill(t0, sizeof t0, 31);
    ut_rand_fill(t1, sizeof t1, 32);
    zip_builder a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.expect = malloc(64 * sizeof *a.expect);
    b.expect = malloc(64 * sizeof *b.expect);
    zip_add(&a, "ckpt_000020/data/0", t0, sizeof t0, REC_DESC);
    zip_add(&a, "ckpt_000020/data/1", t1, sizeof t1, REC_DESC);
    zip_finish(&a, "");
    zip_add(&b, "checkpoint_rank_0001/data/0", t0, sizeof t0, REC_DESC);
    zip_add(&b, "checkpoint_rank_0001/data/1", t1, sizeof t1, REC_DESC);
    zip_finish(&b, "");
    size_t new_chunks = 0;
    double pct = dedup_pct(a.z.data, a.z.len, b.z.data, b.z.len, &new_chunks);
    double data_pct = 100.0 * (sizeof t0 + sizeof t1 + 2 * 16) / (double)b.z.len;
    fprintf(stderr, "  renamed archive: %.2f%% found, data+descriptors are %.2f%%\n", pct,
            data_pct);
    CHECK(pct >= data_pct - 0.01);
    free(a.expect);
    free(b.expect);
    st_bytes_free(&a.z);
    st_bytes_free(&b.z);
}

static void test_safetensors_cuts(void)
{
    st_file f;
    build_safetensors(&f);
    size_t *cuts = malloc(MAX_CUTS * sizeof *cuts);
    st_format fmt = ST_FORMAT_UNKNOWN;
    size_t n = chunk_fresh(&small_params, f.data, f.len, 7, cuts, &fmt);
    CHECK(fmt == ST_FORMAT_SAFETENSORS);
    size_t missing = 0;
    for (size_t i = 0; i < f.nexpect; i++) {
        if (!has_cut(cuts, n, f.expect[i])) {
            fprintf(stderr, "  missing safetensors cut at %zu\n", f.expect[i]);
            missing++;
        }
    }
    CHECK(missing == 0);
    CHECK(f.nexpect == 5);
    n = chunk_fresh(NULL, f.data, f.len, 1 << 20, cuts, NULL);
    missing = 0;
    for (size_t i = 0; i < f.nexpect; i++)
        missing += !has_cut(cuts, n, f.expect[i]);
    CHECK(missing == 0);
    check_streaming(&small_params, f.data, f.len);

    /* a broken JSON header: cut after the header, plain CDC after it */
    uint8_t *hdr_end = memchr(f.data + 8, '}', 200);
    CHECK(hdr_end != NULL);
    if (hdr_end)
        *hdr_end = ']';
    n = chunk_fresh(&small_params, f.data, f.len, 4096, cuts, &fmt);
    CHECK(fmt == ST_FORMAT_SAFETENSORS);
    CHECK(has_cut(cuts, n, f.expect[0]));
    check_streaming(&small_params, f.data, f.len);
    free(cuts);
    free(f.data);
}

/* Hostile and truncated headers: never crash, chunks stay bounded. */
static void test_garbage(void)
{
    size_t cap = 200000;
    uint8_t *d = malloc(cap);
    size_t *cuts = malloc(MAX_CUTS * sizeof *cuts);
    uint64_t s = 77;
    for (int iter = 0; iter < 300; iter++) {
        size_t len = 1 + ut_rand_next(&s) % cap;
        ut_rand_fill(d, len, ut_rand_next(&s));
        switch (iter % 6) {
        case 0: /* PK34 then random */ memcpy(d, "PK\x03\x04", len < 4 ? len : 4); break;
        case 1: /* local header with huge sizes, bit 3 off */
            if (len >= 30) {
                memcpy(d, "PK\x03\x04", 4);
                st_le16_put(d + 6, 0);
                st_le32_put(d + 18, 0xFFFFFFF0u);
                st_le16_put(d + 26, (uint16_t)(ut_rand_next(&s) % 64));
                st_le16_put(d + 28, (uint16_t)(ut_rand_next(&s) % 64));
            }
            break;
        case 2: /* bit 3 and no descriptor ever; zip64 extra that lies */
            if (len >= 50) {
                memcpy(d, "PK\x03\x04", 4);
                st_le16_put(d + 6, 8);
                st_le16_put(d + 26, 0);
                st_le16_put(d + 28, 20);
                st_le16_put(d + 30, 1);
                st_le16_put(d + 32, 0xFFFF);
            }
            break;
        case 3: /* safetensors length absurd / plausible with garbage JSON */
            if (len >= 9) {
                st_le64_put(d, iter % 4 ? UINT64_MAX - (uint64_t)iter : 1000 + (uint64_t)iter);
                d[8] = '{';
            }
            break;
        case 4: /* a valid ZIP cut off anywhere, then garbage */
        {
            zip_builder zb;
            build_zip(&zb);
            size_t k = ut_rand_next(&s) % zb.z.len;
            if (k > len)
                k = len;
            memcpy(d, zb.z.data, k);
            free(zb.expect);
            st_bytes_free(&zb.z);
            break;
        }
        case 5: /* a valid safetensors file cut off anywhere */
        {
            st_file f;
            build_safetensors(&f);
            size_t k = ut_rand_next(&s) % f.len;
            if (k > len)
                k = len;
            memcpy(d, f.data, k);
            free(f.data);
            break;
        }
        }
        size_t feed = iter % 3 == 0 ? 1 : iter % 3 == 1 ? 7 : FEED_RANDOM;
        protocol_ok = 1;
        size_t n = chunk_fresh(&small_params, d, len, feed, cuts, NULL);
        CHECK(protocol_ok);
        size_t prev = 0, over = 0;
        for (size_t i = 0; i < n; prev = cuts[i], i++)
            over += cuts[i] - prev > small_params.max_size;
        CHECK(over == 0 && n > 0 && cuts[n - 1] == len);
        if (iter < 12)
            check_streaming(&small_params, d, len);
    }
    free(cuts);
    free(d);
}

static void test_reset(void)
{
    zip_builder zb;
    build_zip(&zb);
    size_t rlen = 500000;
    uint8_t *r = malloc(rlen);
    ut_rand_fill(r, rlen, 9);
    size_t *ref = malloc(MAX_CUTS * sizeof *ref), *got = malloc(MAX_CUTS * sizeof *got);
    size_t nref = chunk_fresh(&small_params, zb.z.data, zb.z.len, 4096, ref, NULL);
    st_chunker *c = NULL;
    CHECK_OK(st_chunker_new(&small_params, &c));
    /* leave the chunker mid-record, mid-header, then reuse it */
    (void)run_chunker(c, zb.z.data, 70000, 333, 1, got);
    st_chunker_reset(c);
    CHECK(st_chunker_format(c) == ST_FORMAT_UNKNOWN);
    size_t ngot = run_chunker(c, zb.z.data, zb.z.len, 4096, 1, got);
    CHECK(ngot == nref && memcmp(got, ref, nref * sizeof *ref) == 0);
    CHECK(st_chunker_format(c) == ST_FORMAT_ZIP);
    st_chunker_reset(c);
    size_t nr1 = run_chunker(c, r, rlen, 1000, 1, got);
    size_t nr2 = chunk_fresh(&small_params, r, rlen, 1000, ref, NULL);
    CHECK(nr1 == nr2 && memcmp(got, ref, nr1 * sizeof *ref) == 0);
    st_chunker_free(c);
    free(ref);
    free(got);
    free(r);
    free(zb.expect);
    st_bytes_free(&zb.z);
}

int main(void)
{
    RUN(test_params);
    RUN(test_streaming_random);
    RUN(test_bounds_random);
    RUN(test_insertion_local);
    RUN(test_insertion_dedup);
    RUN(test_zip_cuts);
    RUN(test_zip_rename_dedup);
    RUN(test_safetensors_cuts);
    RUN(test_garbage);
    RUN(test_reset);
    return ut_finish();
}
