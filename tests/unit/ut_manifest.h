/*
 * ut_manifest.h — what the manifest tests (test_manifest, test_manifest_v3)
 * share: heap builders as st_manifest_free() expects, a field-by-field
 * comparison, and the round trip every test makes (encode, decode, compare,
 * re-encode to the same bytes), every truncation and bit flip refused, and
 * the mutation fuzzers' own edits. Include after ut.h.
 *
 * Bytes are compared as st_manifest_canonical_bytes() gives them: a version
 * 3 manifest's zstd frame may differ between library versions, its body not.
 */
#ifndef UT_MANIFEST_H
#define UT_MANIFEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_manifest.h"
#include "util/st_wire.h"
#include "ut.h"
#include "ut_format.h"

static inline char *ut_dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    memcpy(p, s, n);
    return p;
}

/* Replaces the malloc'd string *slot with a copy of value (NULL: none). */
static inline void ut_set_str(char **slot, const char *value)
{
    free(*slot);
    *slot = value ? ut_dup_str(value) : NULL;
}

/* The head of the golden manifests: step, a fixed creation time, node and
 * job, and two packs. */
static inline void ut_golden_head(st_manifest *m, uint64_t step, const char *node, const char *job)
{
    memset(m, 0, sizeof *m);
    m->step = step;
    m->created_ns = 1764460800000000000LL;
    m->node = ut_dup_str(node);
    m->job = ut_dup_str(job);
    m->npacks = 2;
    m->packs = malloc(2 * sizeof *m->packs);
    m->packs[0] = st_id_of("pack zero", 9);
    m->packs[1] = st_id_of("pack one", 8);
}

static inline int ut_ids_equal(const st_id *a, const st_id *b)
{
    return memcmp(a->b, b->b, ST_ID_LEN) == 0;
}

static inline int ut_chunks_equal(const st_chunk_ref *c, const st_chunk_ref *d)
{
    return ut_ids_equal(&c->id, &d->id) && c->pack == d->pack && c->offset == d->offset &&
           c->stored_len == d->stored_len && c->raw_len == d->raw_len && c->skip == d->skip &&
           c->bundle_len == d->bundle_len;
}

/* Every field; a digest only where one is stored. */
static inline int ut_manifests_equal(const st_manifest *a, const st_manifest *b)
{
    if (a->step != b->step || a->created_ns != b->created_ns || strcmp(a->node, b->node) ||
        strcmp(a->job, b->job) || a->npacks != b->npacks || a->nfiles != b->nfiles)
        return 0;
    for (size_t i = 0; i < a->npacks; i++)
        if (!ut_ids_equal(&a->packs[i], &b->packs[i]))
            return 0;
    if (!a->pack_seals != !b->pack_seals ||
        (a->pack_seals && memcmp(a->pack_seals, b->pack_seals, a->npacks * sizeof *a->pack_seals)))
        return 0;
    for (size_t i = 0; i < a->nfiles; i++) {
        const st_file_entry *x = &a->files[i], *y = &b->files[i];
        if (strcmp(x->path, y->path) || x->size != y->size || x->mode != y->mode ||
            x->mtime_ns != y->mtime_ns || x->rank != y->rank ||
            x->digest_absent != y->digest_absent ||
            (!x->digest_absent && !ut_ids_equal(&x->digest, &y->digest)) ||
            x->nchunks != y->nchunks)
            return 0;
        for (size_t j = 0; j < x->nchunks; j++)
            if (!ut_chunks_equal(&x->chunks[j], &y->chunks[j]))
                return 0;
    }
    return 1;
}

static inline int ut_manifest_is_zeroed(const st_manifest *m)
{
    st_manifest z;
    memset(&z, 0, sizeof z);
    return memcmp(m, &z, sizeof z) == 0;
}

/* Decodes from a private exact-size copy so ASan sees any overread. */
static inline st_err ut_decode_copy(const uint8_t *buf, size_t len, st_manifest *m)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, buf, len);
    st_err e = st_manifest_decode(copy, len, m);
    free(copy);
    return e;
}

/* 1 if two encodings are of one manifest (canonical bytes equal). */
static inline int ut_same_encoding(const st_bytes *a, const st_bytes *b)
{
    st_bytes ca = {0}, cb = {0};
    int same = st_manifest_canonical_bytes(a->data, a->len, &ca) == ST_OK &&
               st_manifest_canonical_bytes(b->data, b->len, &cb) == ST_OK && ca.len == cb.len &&
               memcmp(ca.data, cb.data, ca.len) == 0;
    st_bytes_free(&ca);
    st_bytes_free(&cb);
    return same;
}

/* Encode -> decode -> compare -> re-encode identical. */
static inline void ut_check_roundtrip(const st_manifest *m)
{
    st_bytes enc = {0}, re = {0};
    st_manifest d;
    CHECK_OK(st_manifest_encode(m, &enc));
    CHECK_OK(ut_decode_copy(enc.data, enc.len, &d));
    CHECK(ut_manifests_equal(m, &d));
    CHECK_OK(st_manifest_encode(&d, &re));
    CHECK(ut_same_encoding(&enc, &re));
    st_manifest_free(&d);
    CHECK(ut_manifest_is_zeroed(&d));
    st_bytes_free(&enc);
    st_bytes_free(&re);
}

/* The golden file `name` decodes to exactly m. */
static inline void ut_golden_decodes_to(const char *name, const st_manifest *m)
{
    st_manifest d;
    uint8_t *gold = NULL;
    long len = ut_golden_read(name, &gold);
    CHECK(len > 0);
    if (len > 0) {
        CHECK_OK(st_manifest_decode(gold, (size_t)len, &d));
        CHECK(ut_manifests_equal(m, &d));
        st_manifest_free(&d);
    }
    free(gold);
}

/* 1 if data is refused as corrupt with the output left zeroed. */
static inline int ut_refused_cleanly(const uint8_t *data, size_t len)
{
    st_manifest d;
    st_err e = ut_decode_copy(data, len, &d);
    if (e == ST_OK)
        st_manifest_free(&d);
    return e == ST_ERR_CORRUPT && ut_manifest_is_zeroed(&d);
}

/* Every truncation and every single bit flip of enc is refused cleanly. */
static inline void ut_check_truncations_and_flips(const st_bytes *enc)
{
    size_t refused = 0;
    for (size_t k = 0; k < enc->len; k++)
        refused += ut_refused_cleanly(enc->data, k);
    CHECK(refused == enc->len);
    uint8_t *copy = malloc(enc->len);
    refused = 0;
    for (size_t i = 0; i < enc->len; i++)
        for (int b = 0; b < 8; b++) {
            memcpy(copy, enc->data, enc->len);
            copy[i] ^= (uint8_t)(1u << b);
            refused += ut_refused_cleanly(copy, enc->len);
        }
    CHECK(refused == 8 * enc->len);
    free(copy);
}

/* The manifest fuzzers' own edits: insert a random byte (3), delete one (4). */
static inline void ut_insert_or_delete_byte(st_bytes *buf, size_t at, uint64_t r, void *ctx)
{
    (void)ctx;
    if (r % 6 == 3) {
        ut_duplicate_byte(buf, at);
        buf->data[at] = (uint8_t)(r >> 24);
    } else {
        memmove(buf->data + at, buf->data + at + 1, buf->len - at - 1);
        buf->len--;
    }
}

#endif
