/*
 * test_manifest — manifest encode/decode and path rules.
 *
 * Covers: round trips (empty, many files, empty file, large counts), byte-for-
 * byte re-encode, encoder validation, st_path_is_clean, every truncation and
 * byte flip, hostile manifests with a VALID checksum (written by an
 * independent, non-validating encoder in this file that follows the layout in
 * st_manifest.h), a deterministic mutation-fuzz loop, and the golden
 * files tests/golden/manifest_v1.bin and manifest_v2.bin (UPDATE_GOLDEN=1
 * rewrites them). Version 3 is test_manifest_v3.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_hash.h"
#include "format/st_manifest.h"
#include "util/st_wire.h"
#include "ut.h"
#include "ut_format.h"
#include "ut_manifest.h"

/* ---- builders (heap-allocated, as st_manifest_free expects) ---- */

/* A file of nchunks chunks spread over npacks packs; size = sum of raw_len. */
static void build_file(st_file_entry *f, const char *path, size_t nchunks, size_t npacks,
                       uint64_t seed)
{
    uint64_t s = seed ? seed : 1;
    memset(f, 0, sizeof *f);
    f->path = ut_dup_str(path);
    f->mode = 0644 + (uint32_t)(seed % 3);
    f->mtime_ns = (int64_t)(ut_rand_next(&s) >> 2) * ((seed & 1) ? -1 : 1);
    f->rank = (int32_t)(seed % 9) - 1;
    ut_rand_fill(f->digest.b, ST_ID_LEN, seed + 1);
    f->nchunks = nchunks;
    f->chunks = nchunks ? calloc(nchunks, sizeof *f->chunks) : NULL;
    for (size_t i = 0; i < nchunks; i++) {
        st_chunk_ref *c = &f->chunks[i];
        ut_rand_fill(c->id.b, ST_ID_LEN, seed * 31 + i);
        c->pack = (uint32_t)(ut_rand_next(&s) % npacks);
        c->offset = ut_rand_next(&s) % (16u << 20);
        c->raw_len = (uint32_t)(ut_rand_next(&s) % (2u << 20));
        c->stored_len = 32 + c->raw_len / 2;
        f->size += c->raw_len;
    }
}

static void build_manifest(st_manifest *m, size_t nfiles, size_t npacks, size_t max_chunks,
                           uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->step = 1000 + seed;
    m->created_ns = 1700000000123456789LL + (int64_t)seed;
    m->node = ut_dup_str("node-a7");
    m->job = ut_dup_str("llama-ft/run3");
    m->npacks = npacks;
    m->packs = npacks ? malloc(npacks * sizeof *m->packs) : NULL;
    for (size_t i = 0; i < npacks; i++)
        ut_rand_fill(m->packs[i].b, ST_ID_LEN, seed * 7 + i);
    m->nfiles = nfiles;
    m->files = nfiles ? calloc(nfiles, sizeof *m->files) : NULL;
    for (size_t i = 0; i < nfiles; i++) {
        char path[64];
        snprintf(path, sizeof path, "global_step%llu/rank_%zu/shard-%03zu.pt",
                 (unsigned long long)m->step, i % 8, i);
        size_t nch = npacks && max_chunks ? (size_t)((seed + i * 13) % (max_chunks + 1)) : 0;
        build_file(&m->files[i], path, nch, npacks ? npacks : 1, seed * 1000 + i);
    }
}

/* ---- an independent, non-validating encoder for hostile inputs ---- */

typedef struct raw_opts {
    uint16_t version, flags;
    int overlong_step;     /* encode step 0 as 0x80 0x00 */
    int trailing_bytes;    /* extra bytes before the checksum */
    int64_t npacks_delta;  /* added to the written pack count */
    int64_t nfiles_delta;  /* added to the written file count */
    int64_t nchunks_delta; /* added to file 0's written chunk count */
    uint64_t force_count;  /* if set, written as the file count */
    int raw_rank;          /* if set, write rank_value verbatim (zigzag) */
    int64_t rank_value;
    int raw_mode; /* if set, write mode_value as the mode varint */
    uint64_t mode_value;
    int bad_checksum;
} raw_opts;

static const raw_opts default_opts = {.version = 1};

static uint64_t zz(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* path_lens (may be NULL) overrides strlen, so paths may contain NUL. */
static void raw_encode(const st_manifest *m, const size_t *path_lens, const raw_opts *o,
                       st_bytes *out)
{
    st_bytes_clear(out);
    st_bytes_append(out, "CKm1", 4);
    st_bytes_put_le16(out, o->version);
    st_bytes_put_le16(out, o->flags);
    if (o->overlong_step)
        st_bytes_append(out, "\x80\x00", 2);
    else
        st_bytes_put_varint(out, m->step);
    st_bytes_put_varint(out, zz(m->created_ns));
    st_bytes_put_str(out, m->node, strlen(m->node));
    st_bytes_put_str(out, m->job, strlen(m->job));
    st_bytes_put_varint(out, (uint64_t)((int64_t)m->npacks + o->npacks_delta));
    for (size_t i = 0; i < m->npacks; i++)
        st_bytes_append(out, m->packs[i].b, ST_ID_LEN);
    st_bytes_put_varint(out, o->force_count ? o->force_count
                                            : (uint64_t)((int64_t)m->nfiles + o->nfiles_delta));
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        st_bytes_put_str(out, f->path, path_lens ? path_lens[i] : strlen(f->path));
        st_bytes_put_varint(out, f->size);
        st_bytes_put_varint(out, o->raw_mode && i == 0 ? o->mode_value : f->mode);
        st_bytes_put_varint(out, zz(f->mtime_ns));
        st_bytes_put_varint(out, zz(o->raw_rank && i == 0 ? o->rank_value : f->rank));
        st_bytes_append(out, f->digest.b, ST_ID_LEN);
        st_bytes_put_varint(out, (uint64_t)((int64_t)f->nchunks + (i == 0 ? o->nchunks_delta : 0)));
        for (size_t j = 0; j < f->nchunks; j++) {
            const st_chunk_ref *c = &f->chunks[j];
            if (o->version >= 2 && c->pack == ST_CHUNK_HOLE) { /* tag 0, length */
                st_bytes_put_varint(out, 0);
                st_bytes_put_varint(out, c->raw_len);
                continue;
            }
            if (o->version >= 2) /* tag: pack + 1 */
                st_bytes_put_varint(out, (uint64_t)c->pack + 1);
            st_bytes_append(out, c->id.b, ST_ID_LEN);
            if (o->version < 2)
                st_bytes_put_varint(out, c->pack);
            st_bytes_put_varint(out, c->offset);
            st_bytes_put_varint(out, c->stored_len);
            st_bytes_put_varint(out, c->raw_len);
        }
    }
    for (int i = 0; i < o->trailing_bytes; i++)
        st_bytes_put_u8(out, 0);
    st_bytes_put_le64(out, st_hash64(out->data, out->len) ^ (o->bad_checksum ? 1 : 0));
}

/* ---- cases ---- */

static void test_path_is_clean(void)
{
    static const char *good[] = {
        "a",      "a/b", "step-000100/model.pt", ".hidden",      "..x", "x..",
        "a/.b/c", "...", "sp ace/ü/\x01\xff",    "a/b/c/d/e/f/g"};
    static const char *bad[] = {"",     "/",      "/abs", "a/",    "a//b", ".",  "..",  "../x",
                                "a/..", "a/../b", "./a",  "a/./b", "a/.",  "//", "a/b/"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int ok = st_path_is_clean(good[i], strlen(good[i]));
        if (!ok)
            fprintf(stderr, "  good path refused: '%s'\n", good[i]);
        CHECK(ok);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int ok = st_path_is_clean(bad[i], strlen(bad[i]));
        if (ok)
            fprintf(stderr, "  bad path accepted: '%s'\n", bad[i]);
        CHECK(!ok);
    }
    CHECK(!st_path_is_clean("a\0b", 3));
    CHECK(!st_path_is_clean(NULL, 0));
    char *longp = malloc(ST_MANIFEST_MAX_PATH + 2);
    memset(longp, 'x', ST_MANIFEST_MAX_PATH + 1);
    longp[ST_MANIFEST_MAX_PATH + 1] = '\0';
    CHECK(st_path_is_clean(longp, ST_MANIFEST_MAX_PATH));
    CHECK(!st_path_is_clean(longp, ST_MANIFEST_MAX_PATH + 1));
    free(longp);
}

static void test_roundtrip_empty(void)
{
    st_manifest m;
    build_manifest(&m, 0, 0, 0, 1);
    ut_check_roundtrip(&m);
    st_manifest_free(&m);
}

static void test_roundtrip_many(void)
{
    st_manifest m;
    build_manifest(&m, 300, 17, 40, 2);
    /* An empty file: no chunks, size 0. */
    free(m.files[5].chunks);
    m.files[5].chunks = NULL;
    m.files[5].nchunks = 0;
    m.files[5].size = 0;
    /* Extremes of every signed and unsigned field. */
    m.step = UINT64_MAX;
    m.created_ns = INT64_MIN;
    m.files[0].mtime_ns = INT64_MAX;
    m.files[1].mtime_ns = INT64_MIN;
    m.files[2].rank = INT32_MAX;
    m.files[3].rank = -1;
    m.files[4].mode = UINT32_MAX;
    ut_check_roundtrip(&m);
    st_manifest_free(&m);
}

static void test_roundtrip_large_counts(void)
{
    st_manifest m;
    build_manifest(&m, 5000, 1000, 4, 3);
    /* One file with many chunks. */
    st_file_entry *f = &m.files[0];
    free(f->chunks);
    free(f->path);
    build_file(f, "big/optimizer.bin", 200000, m.npacks, 99);
    ut_check_roundtrip(&m);
    st_manifest_free(&m);
}

static void test_encode_rejects(void)
{
    struct {
        const char *what;
        int field;
        const char *value;
    } cases[] = {
        {"dotdot", 0, "../x"},
        {"abs", 0, "/abs"},
        {"double slash", 0, "a//b"},
        {"dot", 0, "a/./b"},
        {"trailing /", 0, "a/"},
        {"empty path", 0, ""},
        {"empty node", 1, ""},
        {"empty job", 2, ""},
        {"dup path", 3, NULL},
        {"size", 4, NULL},
        {"pack index", 5, NULL},
        {"long node", 6, NULL},
        {"rank -2", 7, NULL},
        {"null node", 8, NULL},
        {"stored < header", 9, NULL},
        {"null path", 10, NULL},
        {"file beneath a file", 11, NULL},
    };
    char longname[ST_MANIFEST_MAX_NAME + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_manifest m;
        build_manifest(&m, 4, 3, 5, 4);
        switch (cases[i].field) {
        case 0: ut_set_str(&m.files[1].path, cases[i].value); break;
        case 1: ut_set_str(&m.node, cases[i].value); break;
        case 2: ut_set_str(&m.job, cases[i].value); break;
        case 3: ut_set_str(&m.files[2].path, m.files[0].path); break;
        case 4: m.files[1].size++; break;
        case 5:
            m.files[1].nchunks ? (void)(m.files[1].chunks[0].pack = 3)
                               : (void)(m.files[1].size = 1);
            break;
        case 6: ut_set_str(&m.node, longname); break;
        case 7: m.files[3].rank = -2; break;
        case 8: ut_set_str(&m.node, NULL); break;
        case 9:
            m.files[1].nchunks ? (void)(m.files[1].chunks[0].stored_len = 31)
                               : (void)(m.files[1].size = 1);
            break;
        case 10: ut_set_str(&m.files[0].path, NULL); break;
        case 11:
            ut_set_str(&m.files[1].path, "d/e/f");
            ut_set_str(&m.files[2].path, "d/e");
            break;
        }
        st_bytes out = {0};
        st_bytes_put_u8(&out, 0xAA); /* the encoder appends; a failure must not disturb this */
        st_err e = st_manifest_encode(&m, &out);
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "  encode case '%s' not rejected\n", cases[i].what);
        CHECK_ERR(e, ST_ERR_INVALID);
        CHECK(out.len == 1 && out.data[0] == 0xAA);
        st_bytes_free(&out);
        st_manifest_free(&m);
    }
    /* A name of exactly 255 bytes is fine. */
    st_manifest m;
    build_manifest(&m, 1, 1, 1, 5);
    longname[ST_MANIFEST_MAX_NAME] = '\0';
    ut_set_str(&m.job, longname);
    ut_check_roundtrip(&m);
    st_manifest_free(&m);
}

/* Appending to a buffer that already holds data: checksum covers only the manifest. */
static void test_encode_appends(void)
{
    st_manifest m, d;
    build_manifest(&m, 3, 2, 3, 6);
    st_bytes out = {0};
    st_bytes_append(&out, "prefix", 6);
    CHECK_OK(st_manifest_encode(&m, &out));
    CHECK_OK(ut_decode_copy(out.data + 6, out.len - 6, &d));
    CHECK(ut_manifests_equal(&m, &d));
    st_manifest_free(&d);
    st_bytes_free(&out);
    st_manifest_free(&m);
}

static void test_truncations_and_flips(void)
{
    st_manifest m, d;
    build_manifest(&m, 6, 3, 4, 7);
    st_bytes enc = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    ut_check_truncations_and_flips(&enc);
    CHECK_ERR(st_manifest_decode(NULL, 0, &d), ST_ERR_CORRUPT);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

/* Hostile manifests with a valid checksum: each must be refused on its own merits. */
static void test_hostile_valid_checksum(void)
{
    st_bytes enc = {0}, ref = {0};
    st_manifest m, d;

    /* The independent encoder agrees with the real one on a valid manifest. */
    build_manifest(&m, 5, 3, 4, 8);
    raw_encode(&m, NULL, &default_opts, &enc);
    CHECK_OK(st_manifest_encode(&m, &ref));
    CHECK(enc.len == ref.len && memcmp(enc.data, ref.data, enc.len) == 0);
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    st_manifest_free(&d);
    st_manifest_free(&m);

    struct {
        const char *what;
        raw_opts o;
        int edit;
        const char *value;
        st_err want;
    } cases[] = {
        {"huge file count", {.version = 1, .force_count = 1ull << 60}, 0, NULL, ST_ERR_CORRUPT},
        {"max file count", {.version = 1, .force_count = UINT64_MAX}, 0, NULL, ST_ERR_CORRUPT},
        /* Counts far beyond the input but small enough that an uncapped decoder
         * would try to allocate them (and fail with NOMEM, or succeed slowly). */
        {"file count 2^36", {.version = 1, .force_count = 1ull << 36}, 0, NULL, ST_ERR_CORRUPT},
        {"pack count 2^37", {.version = 1, .npacks_delta = 1ll << 37}, 0, NULL, ST_ERR_CORRUPT},
        {"chunk count 2^36", {.version = 1, .nchunks_delta = 1ll << 36}, 0, NULL, ST_ERR_CORRUPT},
        {"file count +1", {.version = 1, .nfiles_delta = 1}, 0, NULL, ST_ERR_CORRUPT},
        {"file count -1", {.version = 1, .nfiles_delta = -1}, 0, NULL, ST_ERR_CORRUPT},
        {"huge pack count", {.version = 1, .npacks_delta = 1ll << 58}, 0, NULL, ST_ERR_CORRUPT},
        {"pack count -1", {.version = 1, .npacks_delta = -1}, 0, NULL, ST_ERR_CORRUPT},
        {"huge chunk count", {.version = 1, .nchunks_delta = 1ll << 50}, 0, NULL, ST_ERR_CORRUPT},
        {"chunk count +1", {.version = 1, .nchunks_delta = 1}, 0, NULL, ST_ERR_CORRUPT},
        {"overlong varint", {.version = 1, .overlong_step = 1}, 0, NULL, ST_ERR_CORRUPT},
        {"trailing bytes", {.version = 1, .trailing_bytes = 3}, 0, NULL, ST_ERR_CORRUPT},
        {"version 5", {.version = 5}, 0, NULL, ST_ERR_UNSUPPORTED},
        /* Version 2 only where a hole needs it: one encoding per manifest. */
        {"version 2 without a hole", {.version = 2}, 0, NULL, ST_ERR_CORRUPT},
        {"version 1 with a hole", {.version = 1}, 14, NULL, ST_ERR_CORRUPT},
        {"hole of 0 bytes", {.version = 2}, 15, NULL, ST_ERR_CORRUPT},
        {"hole of 2^30 + 1 bytes", {.version = 2}, 16, NULL, ST_ERR_CORRUPT},
        {"hole, size mismatch", {.version = 2}, 17, NULL, ST_ERR_CORRUPT},
        {"v2 pack index", {.version = 2}, 18, NULL, ST_ERR_CORRUPT},
        {"version 0", {.version = 0}, 0, NULL, ST_ERR_CORRUPT},
        {"flags", {.version = 1, .flags = 1}, 0, NULL, ST_ERR_UNSUPPORTED},
        {"bad checksum", {.version = 1, .bad_checksum = 1}, 0, NULL, ST_ERR_CORRUPT},
        {"rank -2", {.version = 1, .raw_rank = 1, .rank_value = -2}, 0, NULL, ST_ERR_CORRUPT},
        {"rank 2^31",
         {.version = 1, .raw_rank = 1, .rank_value = 1ll << 31},
         0,
         NULL,
         ST_ERR_CORRUPT},
        {"mode > u32",
         {.version = 1, .raw_mode = 1, .mode_value = 1ull << 32},
         0,
         NULL,
         ST_ERR_CORRUPT},
        {"path ../x", {.version = 1}, 1, "../x", ST_ERR_CORRUPT},
        {"path /abs", {.version = 1}, 1, "/abs", ST_ERR_CORRUPT},
        {"path a//b", {.version = 1}, 1, "a//b", ST_ERR_CORRUPT},
        {"path a/./b", {.version = 1}, 1, "a/./b", ST_ERR_CORRUPT},
        {"path a/..", {.version = 1}, 1, "a/..", ST_ERR_CORRUPT},
        {"path empty", {.version = 1}, 1, "", ST_ERR_CORRUPT},
        {"path with NUL", {.version = 1}, 2, "a\0b", ST_ERR_CORRUPT},
        {"duplicate path", {.version = 1}, 3, NULL, ST_ERR_CORRUPT},
        {"size mismatch", {.version = 1}, 4, NULL, ST_ERR_CORRUPT},
        {"pack index", {.version = 1}, 5, NULL, ST_ERR_CORRUPT},
        {"empty node", {.version = 1}, 6, "", ST_ERR_CORRUPT},
        {"long job", {.version = 1}, 7, NULL, ST_ERR_CORRUPT},
        {"stored < header", {.version = 1}, 8, NULL, ST_ERR_CORRUPT},
        {"beyond max pack", {.version = 1}, 9, NULL, ST_ERR_CORRUPT},
        {"raw above max", {.version = 1}, 10, NULL, ST_ERR_CORRUPT},
        {"path too long", {.version = 1}, 11, NULL, ST_ERR_CORRUPT},
        /* A file and a file beneath it: no restore can make both. */
        {"file d and d/x (d-b between)", {.version = 1}, 12, NULL, ST_ERR_CORRUPT},
        {"file d/x and then d", {.version = 1}, 13, NULL, ST_ERR_CORRUPT},
    };
    char longname[ST_MANIFEST_MAX_NAME + 2];
    memset(longname, 'j', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t lens[5];
        const size_t *plens = NULL;
        build_manifest(&m, 5, 3, 4, 9);
        /* Make sure file 1 has chunks for the chunk edits. */
        if (!m.files[1].nchunks) {
            free(m.files[1].path);
            build_file(&m.files[1], "rank1.pt", 3, m.npacks, 77);
        }
        switch (cases[i].edit) {
        case 1: ut_set_str(&m.files[1].path, cases[i].value); break;
        case 2:
            for (size_t j = 0; j < 5; j++)
                lens[j] = strlen(m.files[j].path);
            free(m.files[1].path);
            m.files[1].path = malloc(4);
            memcpy(m.files[1].path, "a\0b", 4);
            lens[1] = 3;
            plens = lens;
            break;
        case 3: ut_set_str(&m.files[4].path, m.files[1].path); break;
        case 4: m.files[1].size--; break;
        case 5: m.files[1].chunks[0].pack = (uint32_t)m.npacks; break;
        case 6: ut_set_str(&m.node, cases[i].value); break;
        case 7: ut_set_str(&m.job, longname); break;
        case 8: m.files[1].chunks[0].stored_len = 31; break;
        case 9: m.files[1].chunks[0].offset = (1ull << 30) - 10; break;
        case 10: /* one chunk larger than any chunk header may describe */
            m.files[1].chunks[0].raw_len = UINT32_MAX;
            m.files[1].size = UINT64_MAX;
            break;
        case 11: {
            char *p = malloc(ST_MANIFEST_MAX_PATH + 2);
            memset(p, 'p', ST_MANIFEST_MAX_PATH + 1);
            p[ST_MANIFEST_MAX_PATH + 1] = '\0';
            free(m.files[1].path);
            m.files[1].path = p;
            break;
        }
        case 12: /* "d-b" sorts between "d" and "d/x" byte-wise */
        case 13:
            free(m.files[1].path);
            free(m.files[3].path);
            free(m.files[4].path);
            m.files[1].path = ut_dup_str(cases[i].edit == 12 ? "d" : "d/x");
            m.files[3].path = ut_dup_str("d-b");
            m.files[4].path = ut_dup_str(cases[i].edit == 12 ? "d/x" : "d");
            break;
        case 14: /* file 1's first chunk becomes a hole of the same length */
        case 15:
        case 16:
        case 17:
        case 18: {
            st_chunk_ref *c = &m.files[1].chunks[0];
            uint32_t len = cases[i].edit == 15 ? 0 : cases[i].edit == 16 ? (1u << 30) + 1 : 4096;
            m.files[1].size += (uint64_t)len - c->raw_len - (cases[i].edit == 17);
            *c = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = len};
            if (cases[i].edit == 18)
                m.files[1].chunks[1].pack = (uint32_t)m.npacks;
            break;
        }
        }
        raw_encode(&m, plens, &cases[i].o, &enc);
        st_err e = ut_decode_copy(enc.data, enc.len, &d);
        if (e != cases[i].want)
            fprintf(stderr, "  hostile case '%s': got %d (%s)\n", cases[i].what, (int)e,
                    st_errmsg());
        CHECK_ERR(e, cases[i].want);
        CHECK(ut_manifest_is_zeroed(&d));
        if (e == ST_OK)
            st_manifest_free(&d);
        st_manifest_free(&m);
    }
    st_bytes_free(&enc);
    st_bytes_free(&ref);
}

/* Mutation fuzzing without libFuzzer; accepted inputs must be canonical. */
static void test_mutation_fuzz(void)
{
    st_manifest m, d;
    build_manifest(&m, 4, 3, 3, 10);
    st_bytes enc = {0}, buf = {0}, re = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    uint64_t s = 0xfeed;
    size_t accepted = 0, rejected = 0, bad = 0;
    for (int it = 0; it < 20000; it++) {
        st_bytes_clear(&buf);
        st_bytes_append(&buf, enc.data, enc.len - 8); /* body without checksum */
        ut_mutate(&buf, &s, ut_insert_or_delete_byte, NULL);
        uint64_t sum = st_hash64(buf.data, buf.len);
        if (ut_rand_next(&s) % 8 == 0)
            sum ^= 1; /* sometimes leave the checksum stale */
        st_bytes_put_le64(&buf, sum);
        st_err e = ut_decode_copy(buf.data, buf.len, &d);
        if (e == ST_OK) {
            accepted++;
            st_bytes_clear(&re);
            if (st_manifest_encode(&d, &re) != ST_OK || re.len != buf.len ||
                memcmp(re.data, buf.data, buf.len) != 0)
                bad++;
            st_manifest_free(&d);
        } else {
            rejected++;
            if ((e != ST_ERR_CORRUPT && e != ST_ERR_UNSUPPORTED) || !ut_manifest_is_zeroed(&d))
                bad++;
        }
    }
    fprintf(stderr, "  manifest mutation fuzz: %zu accepted, %zu rejected\n", accepted, rejected);
    CHECK(bad == 0);
    CHECK(accepted > 0 && rejected > 0);
    st_bytes_free(&enc);
    st_bytes_free(&buf);
    st_bytes_free(&re);
    st_manifest_free(&m);
}

/* Turns every third chunk of m into a hole of the same length (the file
 * sizes stay), and appends a file that is one 2^30-byte hole and a bit. */
static void add_holes(st_manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++)
        for (size_t k = 0; k < m->files[i].nchunks; k += 3) {
            st_chunk_ref *c = &m->files[i].chunks[k];
            uint32_t len = c->raw_len ? c->raw_len : 1;
            m->files[i].size += len - c->raw_len;
            *c = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = len};
        }
    m->files = realloc(m->files, (m->nfiles + 1) * sizeof *m->files);
    st_file_entry *f = &m->files[m->nfiles++];
    memset(f, 0, sizeof *f);
    f->path = ut_dup_str("sparse/preallocated.bin");
    f->mode = 0644;
    f->nchunks = 2;
    f->chunks = calloc(2, sizeof *f->chunks);
    f->chunks[0] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = ST_MANIFEST_MAX_HOLE};
    f->chunks[1] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 7};
    f->size = (uint64_t)ST_MANIFEST_MAX_HOLE + 7;
}

/* Holes: version 2 round trip (canonical), version 1 without them. */
static void test_roundtrip_holes(void)
{
    st_manifest m, d;
    st_bytes enc = {0}, re = {0};
    build_manifest(&m, 6, 3, 7, 21);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 1); /* no hole: version 1 */
    st_bytes_clear(&enc);
    add_holes(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 2);
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    CHECK(ut_manifests_equal(&m, &d));
    CHECK(d.nfiles && st_chunk_is_hole(&d.files[d.nfiles - 1].chunks[0]));
    CHECK_OK(st_manifest_encode(&d, &re));
    CHECK(re.len == enc.len && memcmp(re.data, enc.data, enc.len) == 0);
    st_manifest_free(&d);

    /* The encoder refuses a hole the decoder would refuse. */
    st_file_entry *f = &m.files[m.nfiles - 1];
    size_t before = enc.len;
    f->chunks[1].raw_len = 0;
    f->size -= 7;
    CHECK_ERR(st_manifest_encode(&m, &enc), ST_ERR_INVALID);
    f->chunks[1].raw_len = ST_MANIFEST_MAX_HOLE + 1;
    f->size += ST_MANIFEST_MAX_HOLE + 1;
    CHECK_ERR(st_manifest_encode(&m, &enc), ST_ERR_INVALID);
    f->chunks[1].raw_len = 7;
    f->size -= ST_MANIFEST_MAX_HOLE + 1 - 7;
    f->chunks[1].offset = 64; /* a hole with a location */
    CHECK_ERR(st_manifest_encode(&m, &enc), ST_ERR_INVALID);
    f->chunks[1].offset = 0;
    CHECK_OK(st_manifest_encode(&m, &re));
    CHECK(enc.len == before);
    st_bytes_free(&enc);
    st_bytes_free(&re);
    st_manifest_free(&m);
}

/* The fields of a golden file entry; its chunks are set apart. */
static void golden_file(st_file_entry *f, const char *path, uint64_t size, uint32_t mode,
                        int64_t mtime_ns, int32_t rank, st_id digest)
{
    f->path = ut_dup_str(path);
    f->size = size;
    f->mode = mode;
    f->mtime_ns = mtime_ns;
    f->rank = rank;
    f->digest = digest;
}

/* A small fixed manifest: two packs, three files (one empty), fixed values. */
static void build_golden(st_manifest *m)
{
    ut_golden_head(m, 500, "gpu-node-01", "bert-ft");
    m->nfiles = 3;
    m->files = calloc(3, sizeof *m->files);
    st_file_entry *f = &m->files[0];
    golden_file(f, "checkpoint-500/model.safetensors", 3000, 0644, 1764460799123456789LL, 0,
                st_id_of("model", 5));
    f->nchunks = 2;
    f->chunks = calloc(2, sizeof *f->chunks);
    f->chunks[0] = (st_chunk_ref){st_id_of("c0", 2), 0, 0, 1032, 1000, 0, 0};
    f->chunks[1] = (st_chunk_ref){st_id_of("c1", 2), 1, 4096, 900, 2000, 0, 0};
    /* mtime before the epoch: zigzag must round-trip */
    golden_file(&m->files[1], "checkpoint-500/trainer_state.json", 0, 0600, -5, -1,
                st_id_of("", 0));
    f = &m->files[2];
    golden_file(f, "checkpoint-500/optimizer.pt", 1000, 0644, 1764460799000000000LL, 3,
                st_id_of("c0", 2));
    f->nchunks = 1;
    f->chunks = calloc(1, sizeof *f->chunks);
    f->chunks[0] = (st_chunk_ref){st_id_of("c0", 2), 0, 0, 1032, 1000, 0, 0}; /* dedup */
}

/* The version 1 golden manifest with holes: the model starts with one, the
 * optimizer state ends with one, and a preallocated file is one hole. */
static void build_golden_v2(st_manifest *m)
{
    build_golden(m);
    st_file_entry *f = &m->files[0];
    f->chunks = realloc(f->chunks, 3 * sizeof *f->chunks);
    memmove(&f->chunks[1], &f->chunks[0], 2 * sizeof *f->chunks);
    f->chunks[0] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 1 << 20};
    f->nchunks = 3;
    f->size += 1 << 20;
    f = &m->files[2];
    f->chunks = realloc(f->chunks, 2 * sizeof *f->chunks);
    f->chunks[1] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 4096};
    f->nchunks = 2;
    f->size += 4096;
    m->files = realloc(m->files, 4 * sizeof *m->files);
    f = &m->files[m->nfiles++];
    memset(f, 0, sizeof *f);
    golden_file(f, "checkpoint-500/prealloc.bin", 3ull << 30, 0644, 1764460799000000000LL, 0,
                st_id_of("prealloc", 8));
    f->nchunks = 3;
    f->chunks = calloc(3, sizeof *f->chunks);
    for (size_t i = 0; i < 3; i++)
        f->chunks[i] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = ST_MANIFEST_MAX_HOLE};
}

/* Checks that builder's manifest encodes to the golden file `name` and that
 * the stored bytes decode to it. */
static void check_golden(void (*builder)(st_manifest *), const char *name)
{
    st_manifest m;
    builder(&m);
    st_bytes enc = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    ut_golden_check(name, enc.data, enc.len);
    ut_golden_decodes_to(name, &m);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

static void test_golden(void)
{
    check_golden(build_golden, "manifest_v1.bin");
    check_golden(build_golden_v2, "manifest_v2.bin");
}

int main(void)
{
    RUN(test_path_is_clean);
    RUN(test_roundtrip_empty);
    RUN(test_roundtrip_many);
    RUN(test_roundtrip_large_counts);
    RUN(test_roundtrip_holes);
    RUN(test_encode_rejects);
    RUN(test_encode_appends);
    RUN(test_truncations_and_flips);
    RUN(test_hostile_valid_checksum);
    RUN(test_mutation_fuzz);
    RUN(test_golden);
    return ut_finish();
}
