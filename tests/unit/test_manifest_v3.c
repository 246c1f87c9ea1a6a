/*
 * test_manifest_v3 — the version 3 manifest: small files as slices of
 * bundles, digests only for files of extents, a zstd-compressed body.
 *
 * Covers: a round trip of every kind (extents with holes, one chunk, slices
 * of several bundles, empty files) re-encoding to the same body; the choice
 * of version; the size of a step of 77,000 small files; each decoder rule,
 * on bodies written by an independent, non-validating writer in this file
 * and wrapped in a valid envelope (zstd frame, checksum); the encoder's
 * refusals; every truncation and bit flip; a mutation loop over the body;
 * and the golden file tests/golden/manifest_v3.bin (UPDATE_GOLDEN=1
 * rewrites it; compared as its decompressed body, docs/FORMATS.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "format/st_manifest.h"
#include "format/st_manifest_rules.h"
#include "util/st_hash.h"
#include "util/st_wire.h"
#include "ut.h"
#include "ut_format.h"
#include "ut_manifest.h"

/* ---- builders ---- */

static void add_file(st_manifest *m, const char *path, uint64_t size, int64_t mtime_ns,
                     size_t nchunks)
{
    m->files = realloc(m->files, (m->nfiles + 1) * sizeof *m->files);
    st_file_entry *f = &m->files[m->nfiles++];
    memset(f, 0, sizeof *f);
    f->path = ut_dup_str(path);
    f->size = size;
    f->mode = 0644;
    f->mtime_ns = mtime_ns;
    f->digest = st_id_of(path, strlen(path));
    f->nchunks = nchunks;
    f->chunks = nchunks ? calloc(nchunks, sizeof *f->chunks) : NULL;
}

static st_chunk_ref whole_chunk(const char *name, uint32_t pack, uint64_t offset, uint32_t raw)
{
    return (st_chunk_ref){.id = st_id_of(name, strlen(name)),
                          .pack = pack,
                          .offset = offset,
                          .stored_len = 32 + raw / 2,
                          .raw_len = raw};
}

static st_chunk_ref slice_of(const st_chunk_ref *bundle, uint32_t skip, uint32_t len)
{
    st_chunk_ref c = *bundle;
    c.bundle_len = bundle->raw_len;
    c.skip = skip;
    c.raw_len = len;
    return c;
}

/* Adds a file that is the slice [skip, skip + len) of bundle. */
static void add_slice(st_manifest *m, const char *path, const st_chunk_ref *bundle, uint32_t skip,
                      uint32_t len, int64_t mtime_ns)
{
    add_file(m, path, len, mtime_ns, 1);
    m->files[m->nfiles - 1].chunks[0] = slice_of(bundle, skip, len);
    m->files[m->nfiles - 1].digest_absent = 1;
    memset(&m->files[m->nfiles - 1].digest, 0, sizeof(st_id));
}

/* Every kind, fixed values (the golden file): an empty file, a file of
 * extents with a hole, a file of one chunk, a file that is one hole, and
 * slices of two bundles, one used again after the other. */
static void build_v3(st_manifest *m)
{
    ut_golden_head(m, 700, "gpu-node-02", "tiny-files");
    const int64_t t = 1764460799000000000LL;
    st_chunk_ref bundle_a = whole_chunk("bundle a", 1, 8192, 20000);
    st_chunk_ref bundle_b = whole_chunk("bundle b", 0, 0, 300);

    add_file(m, "data/empty", 0, -5, 0);
    add_file(m, "data/model.bin", 4096 + 3000 + 1000, t, 3);
    st_file_entry *f = &m->files[m->nfiles - 1];
    f->chunks[0] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 4096};
    f->chunks[1] = whole_chunk("model 1", 0, 4096, 3000);
    f->chunks[2] = whole_chunk("model 2", 1, 0, 1000);
    f->rank = -1;
    add_file(m, "data/one.bin", 5000, t + 7, 1);
    m->files[m->nfiles - 1].chunks[0] = whole_chunk("one", 0, 1 << 20, 5000);
    m->files[m->nfiles - 1].digest_absent = 1;
    memset(&m->files[m->nfiles - 1].digest, 0, sizeof(st_id));
    add_file(m, "data/prealloc", 1 << 20, t, 1);
    m->files[m->nfiles - 1].chunks[0] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 1 << 20};
    add_slice(m, "small/a0", &bundle_a, 0, 100, t + 1000);
    add_slice(m, "small/a1", &bundle_a, 100, 64, t + 2000);
    add_slice(m, "small/a2", &bundle_a, 300, 1, t + 3000); /* a gap before it */
    add_slice(m, "small/b0", &bundle_b, 0, 300, t + 4000); /* all of bundle b */
    add_slice(m, "small/c", &bundle_a, 20000 - 50, 50, t); /* bundle a again, at its end */
    m->files[m->nfiles - 1].rank = 3;
    m->files[m->nfiles - 1].mode = 0600;
    add_file(m, "z", 0, INT64_MIN, 0);
}

/* The kind the format gives f (st_manifest_file_kind, written again here so
 * the raw writer below stays independent). */
static int kind_of(const st_file_entry *f)
{
    if (f->nchunks != 1)
        return 0;
    if (f->chunks[0].bundle_len)
        return 2;
    return f->chunks[0].pack == ST_CHUNK_HOLE ? 0 : 1;
}

/* ---- an independent, non-validating writer of version 3 bodies ---- */

typedef struct raw_v3 {
    size_t short_shared_file; /* if set, this file's shared count is one less */
    size_t long_shared_file;  /* if set, this file's shared count is its length + 1 */
    int swap_bundles;         /* swap table entries 0 and 1 (files still find theirs) */
    int extra_bundle;         /* an unused bundle at the end of the table */
    int dup_bundle;           /* the last user of bundle 0 uses a copy of it at the end */
    int64_t skip_delta;       /* added to the last slice's skip difference */
    int64_t index_delta;      /* added to the last slice's bundle index difference */
    size_t kind_file;         /* if set, this file's kind is written as kind_value */
    uint8_t kind_value;
    uint64_t force_nfiles, force_nbundles;
    size_t trailing; /* zero bytes after the last field */
    /* the envelope */
    int64_t body_len_delta;
    uint64_t force_body_len;
    int no_content_size;
    size_t after_frame; /* bytes after the frame */
    int bad_checksum;
} raw_v3;

static void put_zz(st_bytes *b, int64_t v)
{
    st_bytes_put_varint(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static int bundle_is(const st_chunk_ref *slice, const st_chunk_ref *entry)
{
    return slice->pack == entry->pack && slice->offset == entry->offset &&
           slice->stored_len == entry->stored_len && slice->bundle_len == entry->bundle_len &&
           ut_ids_equal(&slice->id, &entry->id);
}

/* The bundle table in first-use order (linear search), and each file's index. */
static size_t raw_bundles(const st_manifest *m, const raw_v3 *o, st_chunk_ref *table, size_t *index)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        if (kind_of(&m->files[i]) != 2)
            continue;
        const st_chunk_ref *c = &m->files[i].chunks[0];
        size_t k = 0;
        while (k < n && !bundle_is(c, &table[k]))
            k++;
        if (k == n)
            table[n++] = *c;
        index[i] = k;
    }
    if (o->swap_bundles && n >= 2) {
        st_chunk_ref tmp = table[0];
        table[0] = table[1];
        table[1] = tmp;
        for (size_t i = 0; i < m->nfiles; i++)
            index[i] = index[i] == 0 ? 1 : index[i] == 1 ? 0 : index[i];
    }
    if (o->dup_bundle && n >= 1) {
        table[n] = table[0];
        for (size_t i = m->nfiles; i-- > 0;)
            if (kind_of(&m->files[i]) == 2 && index[i] == 0) {
                index[i] = n;
                break;
            }
        n++;
    }
    if (o->extra_bundle) {
        table[n] = table[0];
        table[n].id = st_id_of("unused", 6);
        table[n].bundle_len = 100;
        n++;
    }
    return n;
}

static void raw_v3_body(const st_manifest *m, const raw_v3 *o, st_bytes *b)
{
    size_t nf = m->nfiles;
    st_chunk_ref *table = calloc(nf + 2, sizeof *table);
    size_t *index = calloc(nf + 1, sizeof *index);
    uint8_t *kinds = malloc(nf + 1);
    for (size_t i = 0; i < nf; i++)
        kinds[i] = o->kind_file == i + 1 ? o->kind_value : (uint8_t)kind_of(&m->files[i]);
    size_t nb = raw_bundles(m, o, table, index);

    st_bytes_put_varint(b, m->step);
    put_zz(b, m->created_ns);
    st_bytes_put_str(b, m->node, strlen(m->node));
    st_bytes_put_str(b, m->job, strlen(m->job));
    st_bytes_put_varint(b, m->npacks);
    for (size_t i = 0; i < m->npacks; i++)
        st_bytes_append(b, m->packs[i].b, ST_ID_LEN);
    st_bytes_put_varint(b, o->force_nbundles ? o->force_nbundles : nb);
    for (size_t k = 0; k < nb; k++) {
        st_bytes_put_varint(b, table[k].pack);
        st_bytes_append(b, table[k].id.b, ST_ID_LEN);
        st_bytes_put_varint(b, table[k].offset);
        st_bytes_put_varint(b, table[k].stored_len);
        st_bytes_put_varint(b, table[k].bundle_len);
    }
    st_bytes_put_varint(b, o->force_nfiles ? o->force_nfiles : nf);
    const char *prev = "";
    for (size_t i = 0; i < nf; i++) {
        const char *p = m->files[i].path;
        size_t shared = 0;
        while (prev[shared] && prev[shared] == p[shared])
            shared++;
        if (o->short_shared_file == i + 1)
            shared--;
        if (o->long_shared_file == i + 1) {
            st_bytes_put_varint(b, strlen(prev) + 1);
            st_bytes_put_str(b, "x", 1);
        } else {
            st_bytes_put_varint(b, shared);
            st_bytes_put_str(b, p + shared, strlen(p) - shared);
        }
        prev = p;
    }
    for (size_t i = 0; i < nf; i++)
        st_bytes_put_varint(b, m->files[i].size);
    for (size_t i = 0; i < nf; i++)
        st_bytes_put_varint(b, m->files[i].mode);
    for (size_t i = 0; i < nf; i++)
        put_zz(b, (int64_t)((uint64_t)m->files[i].mtime_ns -
                            (i ? (uint64_t)m->files[i - 1].mtime_ns : 0)));
    for (size_t i = 0; i < nf; i++)
        put_zz(b, m->files[i].rank);
    for (size_t i = 0; i < nf; i++)
        st_bytes_put_u8(b, kinds[i]);
    int64_t prev_index = 0, prev_end = 0, last = -1;
    for (size_t i = 0; i < nf; i++)
        if (kinds[i] == 2)
            last = (int64_t)i;
    for (size_t i = 0; i < nf; i++) {
        if (kinds[i] != 2)
            continue;
        const st_chunk_ref *c = &m->files[i].chunks[0];
        int64_t idx = (int64_t)index[i], base = idx == prev_index ? prev_end : 0;
        if (i == (size_t)last) {
            put_zz(b, idx - prev_index + o->index_delta);
            put_zz(b, (int64_t)c->skip - base + o->skip_delta);
        } else {
            put_zz(b, idx - prev_index);
            put_zz(b, (int64_t)c->skip - base);
        }
        prev_index = idx;
        prev_end = (int64_t)c->skip + c->raw_len;
    }
    for (size_t i = 0; i < nf; i++)
        if (kinds[i] == 0)
            st_bytes_append(b, m->files[i].digest.b, ST_ID_LEN);
    for (size_t i = 0; i < nf; i++) {
        const st_file_entry *f = &m->files[i];
        if (kinds[i] != 0)
            continue;
        st_bytes_put_varint(b, f->nchunks);
        for (size_t k = 0; k < f->nchunks; k++) {
            const st_chunk_ref *c = &f->chunks[k];
            if (c->pack == ST_CHUNK_HOLE) {
                st_bytes_put_varint(b, 0);
                st_bytes_put_varint(b, c->raw_len);
                continue;
            }
            st_bytes_put_varint(b, (uint64_t)c->pack + 1);
            st_bytes_append(b, c->id.b, ST_ID_LEN);
            st_bytes_put_varint(b, c->offset);
            st_bytes_put_varint(b, c->stored_len);
            st_bytes_put_varint(b, c->raw_len);
        }
    }
    for (size_t i = 0; i < nf; i++) {
        if (kinds[i] != 1)
            continue;
        const st_chunk_ref *c = m->files[i].nchunks ? &m->files[i].chunks[0] : &table[0];
        st_bytes_put_varint(b, c->pack);
        st_bytes_append(b, c->id.b, ST_ID_LEN);
        st_bytes_put_varint(b, c->offset);
        st_bytes_put_varint(b, c->stored_len);
    }
    for (size_t i = 0; i < o->trailing; i++)
        st_bytes_put_u8(b, 0);
    free(table);
    free(index);
    free(kinds);
}

/* A version 3 envelope around body: header, body length, one zstd frame,
 * checksum (test helper: any body, valid or not). */
static void wrap_v3(const st_bytes *body, const raw_v3 *o, st_bytes *out)
{
    st_bytes_clear(out);
    st_bytes_append(out, "CKm1", 4);
    st_bytes_put_le16(out, 3);
    st_bytes_put_le16(out, 0);
    st_bytes_put_varint(out, o->force_body_len
                                 ? o->force_body_len
                                 : (uint64_t)((int64_t)body->len + o->body_len_delta));
    size_t bound = ZSTD_compressBound(body->len);
    st_bytes_reserve(out, bound);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, !o->no_content_size);
    size_t n = ZSTD_compress2(cctx, out->data + out->len, bound, body->data, body->len);
    CHECK(!ZSTD_isError(n));
    ZSTD_freeCCtx(cctx);
    out->len += ZSTD_isError(n) ? 0 : n;
    for (size_t i = 0; i < o->after_frame; i++)
        st_bytes_put_u8(out, 0);
    st_bytes_put_le64(out, st_hash64(out->data, out->len) ^ (o->bad_checksum ? 1 : 0));
}

static const raw_v3 no_edit;

/* ---- cases ---- */

static void test_roundtrip_kinds(void)
{
    st_manifest m, d;
    st_bytes enc = {0};
    build_v3(&m);
    ut_check_roundtrip(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 3);
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    CHECK(d.nfiles == m.nfiles);
    for (size_t i = 0; i < d.nfiles; i++)
        CHECK(d.files[i].digest_absent == (kind_of(&d.files[i]) != 0));
    CHECK(st_chunk_is_slice(&d.files[4].chunks[0]) && !st_chunk_is_slice(&d.files[2].chunks[0]));
    st_manifest_free(&d);

    /* A digest given for a file of one chunk is not stored: it is that
     * chunk's id. It decodes as absent. */
    st_file_entry *one = &m.files[2];
    one->digest_absent = 0;
    one->digest = one->chunks[0].id;
    st_bytes re = {0};
    CHECK_OK(st_manifest_encode(&m, &re));
    CHECK(ut_same_encoding(&enc, &re));
    st_bytes_free(&re);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

/* Version 3 only when a file is a slice; then every one-chunk file is kind 1. */
static void test_version_choice(void)
{
    st_manifest m;
    st_bytes enc = {0};
    build_v3(&m);
    for (size_t i = 0; i < m.nfiles; i++) { /* slices become whole chunks */
        st_file_entry *f = &m.files[i];
        if (f->nchunks == 1 && st_chunk_is_slice(&f->chunks[0])) {
            f->chunks[0].skip = f->chunks[0].bundle_len = 0;
            f->chunks[0].id = st_id_of(f->path, strlen(f->path));
        }
        f->digest_absent = 0;
    }
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 2); /* a hole, no slice */
    ut_check_roundtrip(&m);
    free(m.files[1].chunks); /* no hole either */
    m.files[1].nchunks = 0;
    m.files[1].chunks = NULL;
    m.files[1].size = 0;
    free(m.files[3].chunks);
    m.files[3].nchunks = 0;
    m.files[3].chunks = NULL;
    m.files[3].size = 0;
    st_bytes_clear(&enc);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 1);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

/* 77,000 files of 64 bytes in bundles of 256, written 1 µs apart (with
 * jitter: 0 .. 1 µs more, drawn from a fixed seed). */
static void check_many_small_files(int jitter)
{
    enum { NFILES = 77000, PER_BUNDLE = 256, SIZE = 64 };
    st_manifest m, d;
    memset(&m, 0, sizeof m);
    m.step = 1;
    m.created_ns = 1764460800000000000LL;
    m.node = ut_dup_str("node-0");
    m.job = ut_dup_str("small-files");
    m.npacks = 1;
    m.packs = malloc(sizeof *m.packs);
    m.packs[0] = st_id_of("pack", 4);
    m.files = calloc(NFILES, sizeof *m.files);
    m.nfiles = NFILES;
    size_t nbundles = (NFILES + PER_BUNDLE - 1) / PER_BUNDLE;
    uint64_t offset = 0, jitter_seed = 77;
    for (size_t i = 0; i < NFILES; i++) {
        st_file_entry *f = &m.files[i];
        size_t b = i / PER_BUNDLE,
               in_bundle = b + 1 < nbundles ? PER_BUNDLE : NFILES - b * PER_BUNDLE;
        char path[64];
        snprintf(path, sizeof path, "rank0/shard_%05zu.bin", i);
        f->path = ut_dup_str(path);
        f->size = SIZE;
        f->mode = 0644;
        f->mtime_ns = 1764460799000000000LL + (int64_t)i * 1000 +
                      (jitter ? (int64_t)(ut_rand_next(&jitter_seed) % 1000) : 0);
        f->digest_absent = 1;
        f->nchunks = 1;
        f->chunks = calloc(1, sizeof *f->chunks);
        uint64_t seed = b;
        st_chunk_ref *c = f->chunks;
        ut_rand_fill(c->id.b, ST_ID_LEN, seed + 1);
        c->offset = offset;
        c->bundle_len = (uint32_t)(in_bundle * SIZE);
        c->stored_len = 32 + c->bundle_len;
        c->skip = (uint32_t)(i % PER_BUNDLE * SIZE);
        c->raw_len = SIZE;
        if (i % PER_BUNDLE == PER_BUNDLE - 1)
            offset += c->stored_len;
    }
    st_bytes enc = {0}, re = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    double per_file = (double)enc.len / NFILES;
    fprintf(stderr,
            "  %d files of %d bytes in %zu bundles, mtimes %s: manifest %zu bytes, %.2f per file\n",
            NFILES, SIZE, nbundles, jitter ? "jittered" : "1 us apart", enc.len, per_file);
    CHECK(per_file <= 8.0);
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    CHECK(ut_manifests_equal(&m, &d));
    CHECK_OK(st_manifest_encode(&d, &re));
    CHECK(ut_same_encoding(&enc, &re));
    st_manifest_free(&d);
    st_bytes_free(&enc);
    st_bytes_free(&re);
    st_manifest_free(&m);
}

static void test_many_small_files(void)
{
    check_many_small_files(0);
    check_many_small_files(1);
}

/* Each decoder rule, on a body that breaks it and nothing else. */
static void test_decoder_rules(void)
{
    st_bytes body = {0}, enc = {0}, ref = {0};
    st_manifest m, d;

    /* The independent writer agrees with the encoder on a valid manifest. */
    build_v3(&m);
    raw_v3_body(&m, &no_edit, &body);
    wrap_v3(&body, &no_edit, &enc);
    CHECK_OK(st_manifest_encode(&m, &ref));
    CHECK(ut_same_encoding(&enc, &ref));
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    st_manifest_free(&d);
    st_manifest_free(&m);

    struct {
        const char *what;
        raw_v3 o;
        int edit;
        const char *why; /* a word of the decoder's message */
    } cases[] = {
        {"shared shorter than the common prefix", {.short_shared_file = 2}, 0, "in common"},
        {"shared longer than the previous path", {.long_shared_file = 3}, 0, "shares more"},
        {"paths out of tree order", {0}, 1, "ascending"},
        {"the same path twice", {0}, 2, "ascending"},
        {"a path beneath a file", {0}, 3, "beneath"},
        {"an unclean path", {0}, 4, "clean"},
        {"body length above 256 MiB", {.force_body_len = (256u << 20) + 1}, 0, "256 MiB"},
        {"body length above 1024 x the frame", {.trailing = 4u << 20}, 0, "1024"},
        {"content size is not the body length", {.body_len_delta = 1}, 0, "content size"},
        {"content size is not the body length (-1)", {.body_len_delta = -1}, 0, "content size"},
        {"frame without a content size", {.no_content_size = 1}, 0, "content size"},
        {"bytes after the frame", {.after_frame = 3}, 0, "after it"},
        {"bytes after the last field", {.trailing = 1}, 0, "unexpected"},
        {"a bundle unused", {.extra_bundle = 1}, 0, "first-use"},
        {"bundles out of first-use order", {.swap_bundles = 1}, 0, "first-use"},
        {"a bundle listed twice", {.dup_bundle = 1}, 0, "first-use"},
        {"a slice past its bundle", {.skip_delta = 1}, 0, "past"},
        {"a slice before its bundle", {.skip_delta = -20000}, 0, "past"},
        {"a bundle index out of range", {.index_delta = 2}, 0, "out of range"},
        {"version 3 without a slice", {0}, 5, "without a slice"},
        {"a single whole chunk as kind 0", {.kind_file = 3, .kind_value = 0}, 0, "whole chunk"},
        {"an empty file as kind 1", {.kind_file = 1, .kind_value = 1}, 0, "one chunk"},
        {"kind 3", {.kind_file = 2, .kind_value = 3}, 0, "kind 3"},
        {"an empty slice", {0}, 6, "empty slice"},
        {"a bundle above 64 KiB", {0}, 7, "64 KiB"},
        {"file count 2^40", {.force_nfiles = 1ull << 40}, 0, "file count"},
        {"bundle count 2^40", {.force_nbundles = 1ull << 40}, 0, "bundle count"},
        {"bad checksum", {.bad_checksum = 1}, 0, "checksum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        build_v3(&m);
        switch (cases[i].edit) {
        case 1: ut_set_str(&m.files[5].path, "small/a3"); break;
        case 2: ut_set_str(&m.files[5].path, "small/a0"); break;
        case 3: ut_set_str(&m.files[5].path, "small/a0/x"); break;
        case 4: ut_set_str(&m.files[5].path, "small/a0/.."); break;
        case 5: /* every slice a whole chunk: written as version 3 anyway */
            for (size_t k = 0; k < m.nfiles; k++)
                if (kind_of(&m.files[k]) == 2)
                    m.files[k].chunks[0].bundle_len = m.files[k].chunks[0].skip = 0;
            break;
        case 6:
            m.files[6].size = 0;
            m.files[6].chunks[0].raw_len = 0;
            break;
        case 7: /* bundle b, used only by file 7 */
            m.files[7].chunks[0].bundle_len = (64u << 10) + 1;
            break;
        }
        st_bytes_clear(&body);
        raw_v3_body(&m, &cases[i].o, &body);
        wrap_v3(&body, &cases[i].o, &enc);
        st_err e = ut_decode_copy(enc.data, enc.len, &d);
        int said = e != ST_OK && strstr(st_errmsg(), cases[i].why) != NULL;
        if (e != ST_ERR_CORRUPT || !said)
            fprintf(stderr, "  v3 decoder case '%s': got %d (%s)\n", cases[i].what, (int)e,
                    e ? st_errmsg() : "accepted");
        CHECK_ERR(e, ST_ERR_CORRUPT);
        CHECK(said);
        CHECK(ut_manifest_is_zeroed(&d));
        if (e == ST_OK)
            st_manifest_free(&d);
        st_manifest_free(&m);
    }
    st_bytes_free(&body);
    st_bytes_free(&enc);
    st_bytes_free(&ref);
}

/* The encoder refuses what the decoder would refuse, and leaves out as it was. */
static void test_encoder_refuses(void)
{
    const char *cases[] = {
        "a slice with another extent",  "a slice past its bundle",   "a bundle above 64 KiB",
        "paths out of tree order",      "a path beneath a file",     "an empty one-chunk file",
        "a file of extents, no digest", "a whole chunk with a skip", "an empty slice",
        "no digest in version 1",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_manifest m;
        build_v3(&m);
        st_file_entry *f = &m.files[5]; /* small/a1, a slice */
        switch (i) {
        case 0:
            f->chunks = realloc(f->chunks, 2 * sizeof *f->chunks);
            f->chunks[1] = (st_chunk_ref){.pack = ST_CHUNK_HOLE, .raw_len = 10};
            f->nchunks = 2;
            f->size += 10;
            break;
        case 1: f->chunks[0].skip = 20000 - 63; break;
        case 2: f->chunks[0].bundle_len = (64u << 10) + 1; break;
        case 3: ut_set_str(&f->path, "small/a9"); break;
        case 4: ut_set_str(&f->path, "small/a0/x"); break;
        case 5: /* data/one.bin: one chunk of 0 bytes */
            m.files[2].size = 0;
            m.files[2].chunks[0].raw_len = 0;
            break;
        case 6: m.files[1].digest_absent = 1; break;
        case 7: m.files[2].chunks[0].skip = 1; break;
        case 8:
            f->size = 0;
            f->chunks[0].raw_len = 0;
            break;
        case 9: /* no slice: version 2, which stores every digest */
            for (size_t k = 0; k < m.nfiles; k++)
                if (kind_of(&m.files[k]) == 2)
                    m.files[k].chunks[0].bundle_len = m.files[k].chunks[0].skip = 0;
            break;
        }
        st_bytes out = {0};
        st_bytes_put_u8(&out, 0xAA);
        st_err e = st_manifest_encode(&m, &out);
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "  v3 encode case '%s' not refused\n", cases[i]);
        CHECK_ERR(e, ST_ERR_INVALID);
        CHECK(out.len == 1 && out.data[0] == 0xAA);
        st_bytes_free(&out);
        st_manifest_free(&m);
    }
}

static void test_truncations_and_flips(void)
{
    st_manifest m;
    st_bytes enc = {0};
    build_v3(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    ut_check_truncations_and_flips(&enc);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

/* Mutations of the decompressed body, wrapped validly: refused, or accepted
 * and canonical (re-encodes to the same body). */
static void test_body_mutations(void)
{
    st_manifest m, d;
    st_bytes body = {0}, buf = {0}, enc = {0}, re = {0};
    build_v3(&m);
    raw_v3_body(&m, &no_edit, &body);
    uint64_t s = 0xbeef;
    size_t accepted = 0, rejected = 0, bad = 0;
    for (int it = 0; it < 5000; it++) {
        st_bytes_clear(&buf);
        st_bytes_append(&buf, body.data, body.len);
        ut_mutate(&buf, &s, ut_insert_or_delete_byte, NULL);
        wrap_v3(&buf, &no_edit, &enc);
        st_err e = ut_decode_copy(enc.data, enc.len, &d);
        if (e == ST_OK) {
            accepted++;
            st_bytes_clear(&re);
            if (st_manifest_encode(&d, &re) != ST_OK || !ut_same_encoding(&re, &enc))
                bad++;
            st_manifest_free(&d);
        } else {
            rejected++;
            if (e != ST_ERR_CORRUPT || !ut_manifest_is_zeroed(&d))
                bad++;
        }
    }
    fprintf(stderr, "  v3 body mutations: %zu accepted, %zu rejected\n", accepted, rejected);
    CHECK(bad == 0);
    CHECK(accepted > 0 && rejected > 0);
    st_bytes_free(&body);
    st_bytes_free(&buf);
    st_bytes_free(&enc);
    st_bytes_free(&re);
    st_manifest_free(&m);
}

/* The golden file: compared as header and decompressed body, since another
 * zstd may frame the same body differently (docs/FORMATS.md). */
static void test_golden(void)
{
    st_manifest m, d;
    st_bytes enc = {0}, gold_bytes = {0};
    build_v3(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    const char *update = getenv("UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0)
        ut_golden_check("manifest_v3.bin", enc.data, enc.len);
    uint8_t *gold = NULL;
    long len = ut_golden_read("manifest_v3.bin", &gold);
    CHECK(len > 0);
    if (len > 0) {
        st_bytes_append(&gold_bytes, gold, (size_t)len);
        CHECK(ut_same_encoding(&enc, &gold_bytes));
        if (enc.len != (size_t)len || memcmp(enc.data, gold, enc.len))
            fprintf(stderr, "  note: this zstd frames manifest_v3.bin's body differently\n");
        CHECK_OK(st_manifest_decode(gold, (size_t)len, &d));
        CHECK(ut_manifests_equal(&m, &d));
        st_manifest_free(&d);
    }
    free(gold);
    st_bytes_free(&gold_bytes);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

/* Version 4: build_v3's manifest whose packs are sealed, and the same
 * files without a slice (version 4 is written whenever packs are sealed). */
static void add_seals(st_manifest *m)
{
    m->pack_seals = calloc(m->npacks, sizeof *m->pack_seals);
    for (size_t i = 0; m->pack_seals && i < m->npacks; i++) {
        memset(m->pack_seals[i].key_id, 0x3f + (int)i, ST_KEY_ID_LEN);
        memset(m->pack_seals[i].salt, 0xa0 + (int)i, ST_CRYPT_SALT_LEN);
    }
}

static void test_v4_sealed_packs(void)
{
    st_manifest m, d;
    st_bytes enc = {0};
    build_v3(&m);
    add_seals(&m);
    ut_check_roundtrip(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 4);
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    CHECK(d.pack_seals && d.npacks == m.npacks &&
          !memcmp(d.pack_seals, m.pack_seals, m.npacks * sizeof *m.pack_seals));
    st_manifest_free(&d);
    ut_check_truncations_and_flips(&enc);

    const char *update = getenv("UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0)
        ut_golden_check("manifest_v4.bin", enc.data, enc.len);
    ut_golden_decodes_to("manifest_v4.bin", &m);
    st_bytes_free(&enc);

    /* Without slices: still version 4, and read back whole. */
    for (size_t i = 0; i < m.nfiles; i++)
        if (st_manifest_file_kind(&m.files[i]) == 2) {
            free(m.files[i].path);
            free(m.files[i].chunks);
            memmove(&m.files[i], &m.files[i + 1], (m.nfiles - i - 1) * sizeof *m.files);
            m.nfiles--;
            i--;
        }
    CHECK(!st_manifest_has_slice(&m));
    ut_check_roundtrip(&m);
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(st_le16_get(enc.data + 4) == 4);
    /* A version 3 reader's rule (a slice) does not apply to version 4, and
     * the same bytes labelled version 3 read the seals as files: refused. */
    enc.data[4] = 3;
    st_le64_put(enc.data + enc.len - 8, st_hash64(enc.data, enc.len - 8));
    CHECK_ERR(ut_decode_copy(enc.data, enc.len, &d), ST_ERR_CORRUPT);
    st_bytes_free(&enc);
    st_manifest_free(&m);
}

int main(void)
{
    RUN(test_v4_sealed_packs);
    RUN(test_roundtrip_kinds);
    RUN(test_version_choice);
    RUN(test_many_small_files);
    RUN(test_decoder_rules);
    RUN(test_encoder_refuses);
    RUN(test_truncations_and_flips);
    RUN(test_body_mutations);
    RUN(test_golden);
    return ut_finish();
}
