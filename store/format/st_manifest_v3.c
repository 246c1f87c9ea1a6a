/*
 * st_manifest_v3 — owns the body of a version 3 manifest (docs/FORMATS.md,
 * "Version 3"): the bundle table, the per-file kinds (0 extents, 1 one
 * whole chunk, 2 a slice of a bundle), the column order, and the zstd frame
 * around it all with its caps.
 *
 * Invariants, kept for encoder and decoder by the same code:
 *   - the bundle table is what bundle_table_build() makes of the files:
 *     distinct bundles in the order files first use them; the decoder
 *     rebuilds it from what it decoded and refuses any other table;
 *   - a path's front coding shares exactly the bytes it has in common with
 *     the previous path (the decoder refuses a shorter count: one encoding);
 *   - a file's kind is st_manifest_file_kind() of its extents;
 *   - the body length is at most 256 MiB and 1024 × the frame + 1 MiB, and
 *     equal to the frame's content size, checked before allocating.
 * The rules every version shares are st_manifest_rules.c's. The frame is
 * not canonical (zstd versions may differ); the body is.
 *
 * Threads: pure functions over caller-owned values.
 */
#include "format/st_manifest_v3.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "format/st_manifest_rules.h"
#include "util/st_hash.h"

#define V3_MAX_BODY   (256u << 20) /* decompressed body bytes */
#define V3_MAX_RATIO  1024         /* body bytes per frame byte ... */
#define V3_RATIO_ROOM (1u << 20)   /* ... plus this much */
#define V3_ZSTD_LEVEL 3

#define MIN_BUNDLE_LEN (1 + ST_ID_LEN + 3) /* pack, id, offset, stored, raw length */
#define MIN_FILE_LEN   8                   /* path (shared, suffix), size..rank, kind */

enum { KIND_EXTENTS = 0, KIND_CHUNK = 1, KIND_SLICE = 2 };

/* NULL if a body of body_len bytes may come from a frame of frame_len. */
static const char *check_body_len(uint64_t body_len, size_t frame_len)
{
    if (body_len > V3_MAX_BODY)
        return "body length above 256 MiB";
    if (body_len > (uint64_t)frame_len * V3_MAX_RATIO + V3_RATIO_ROOM)
        return "body length above 1024 x the frame + 1 MiB";
    return NULL;
}

/* ---- the bundle table: distinct bundles in first-use order ---- */

typedef struct bundle_table {
    const st_chunk_ref **refs; /* n bundles, each the first slice that uses it */
    size_t n;
    uint32_t *of_file; /* per file: its bundle's index (kind-2 files only) */
} bundle_table;

/* 1 if slices (or table entries) a and b lie in the same bundle. */
static int same_bundle(const st_chunk_ref *a, const st_chunk_ref *b)
{
    return a->pack == b->pack && a->offset == b->offset && a->stored_len == b->stored_len &&
           a->bundle_len == b->bundle_len && memcmp(a->id.b, b->id.b, ST_ID_LEN) == 0;
}

static uint64_t bundle_hash(const st_chunk_ref *c)
{
    uint8_t key[ST_ID_LEN + 20];
    memcpy(key, c->id.b, ST_ID_LEN);
    st_le32_put(key + ST_ID_LEN, c->pack);
    st_le64_put(key + ST_ID_LEN + 4, c->offset);
    st_le32_put(key + ST_ID_LEN + 12, c->stored_len);
    st_le32_put(key + ST_ID_LEN + 16, c->bundle_len);
    return st_hash64(key, sizeof key);
}

static void bundle_table_free(bundle_table *t)
{
    free(t->refs);
    free(t->of_file);
    memset(t, 0, sizeof *t);
}

/* Builds t from the kind-2 files of files[] (an open-addressing hash over the
 * bundles seen so far finds a repeat in O(1)). */
static st_err bundle_table_build(const st_file_entry *files, size_t nfiles, bundle_table *t)
{
    size_t nslices = 0, cap = 2;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < nfiles; i++)
        nslices += st_manifest_file_kind(&files[i]) == KIND_SLICE;
    if (nslices == 0)
        return ST_OK;
    while (cap < 2 * nslices)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* 0 empty, else table index + 1 */
    t->refs = malloc(nslices * sizeof *t->refs);
    t->of_file = calloc(nfiles, sizeof *t->of_file);
    if (!slots || !t->refs || !t->of_file) {
        free(slots);
        bundle_table_free(t);
        return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for the bundle table");
    }
    for (size_t i = 0; i < nfiles; i++) {
        if (st_manifest_file_kind(&files[i]) != KIND_SLICE)
            continue;
        const st_chunk_ref *c = &files[i].chunks[0];
        size_t h = (size_t)bundle_hash(c) & (cap - 1);
        while (slots[h] && !same_bundle(t->refs[slots[h] - 1], c))
            h = (h + 1) & (cap - 1);
        if (!slots[h]) {
            t->refs[t->n++] = c;
            slots[h] = t->n;
        }
        t->of_file[i] = (uint32_t)(slots[h] - 1);
    }
    free(slots);
    return ST_OK;
}

/* ---- encoder ---- */

static st_err put_bundles(st_bytes *b, const bundle_table *t)
{
    st_err e = st_bytes_put_varint(b, t->n);
    for (size_t k = 0; !e && k < t->n; k++) {
        e = st_bytes_put_varint(b, t->refs[k]->pack);
        if (!e)
            e = st_manifest_put_location(b, t->refs[k]);
        if (!e)
            e = st_bytes_put_varint(b, t->refs[k]->bundle_len);
    }
    return e;
}

/* Each path as (bytes shared with the previous path, the rest). */
static st_err put_paths(st_bytes *b, const st_manifest *m)
{
    const char *prev = "";
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < m->nfiles; i++) {
        const char *path = m->files[i].path;
        size_t shared = 0, len = strlen(path);
        while (prev[shared] && prev[shared] == path[shared])
            shared++;
        e = st_bytes_put_varint(b, shared);
        if (!e)
            e = st_bytes_put_str(b, path + shared, len - shared);
        prev = path;
    }
    return e;
}

/* Sizes, modes, mtimes (differences), ranks and kinds, each a column. */
static st_err put_columns(st_bytes *b, const st_manifest *m)
{
    const st_file_entry *files = m->files;
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < m->nfiles; i++)
        e = st_bytes_put_varint(b, files[i].size);
    for (size_t i = 0; !e && i < m->nfiles; i++)
        e = st_bytes_put_varint(b, files[i].mode);
    uint64_t prev = 0; /* differences wrap: every pair of int64 has one */
    for (size_t i = 0; !e && i < m->nfiles; i++) {
        e = st_bytes_put_varint(b, st_zigzag_encode((int64_t)((uint64_t)files[i].mtime_ns - prev)));
        prev = (uint64_t)files[i].mtime_ns;
    }
    for (size_t i = 0; !e && i < m->nfiles; i++)
        e = st_bytes_put_varint(b, st_zigzag_encode(files[i].rank));
    for (size_t i = 0; !e && i < m->nfiles; i++)
        e = st_bytes_put_u8(b, (uint8_t)st_manifest_file_kind(&files[i]));
    return e;
}

/* Per kind-2 file, its bundle index and first byte, as differences from
 * the previous slice (so slices in sequence cost two zeros). */
static st_err put_slices(st_bytes *b, const st_manifest *m, const bundle_table *t)
{
    int64_t prev_index = 0, prev_end = 0;
    int have_prev = 0;
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < m->nfiles; i++) {
        if (st_manifest_file_kind(&m->files[i]) != KIND_SLICE)
            continue;
        const st_chunk_ref *c = &m->files[i].chunks[0];
        int64_t index = t->of_file[i];
        int64_t base = have_prev && index == prev_index ? prev_end : 0;
        e = st_bytes_put_varint(b, st_zigzag_encode(index - prev_index));
        if (!e)
            e = st_bytes_put_varint(b, st_zigzag_encode((int64_t)c->skip - base));
        prev_index = index;
        prev_end = (int64_t)c->skip + c->raw_len;
        have_prev = 1;
    }
    return e;
}

/* Digests and extents of kind-0 files, then the chunks of kind-1 files. */
static st_err put_extents(st_bytes *b, const st_manifest *m)
{
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < m->nfiles; i++)
        if (st_manifest_file_kind(&m->files[i]) == KIND_EXTENTS)
            e = st_bytes_append(b, m->files[i].digest.b, ST_ID_LEN);
    for (size_t i = 0; !e && i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        if (st_manifest_file_kind(f) != KIND_EXTENTS)
            continue;
        e = st_bytes_put_varint(b, f->nchunks);
        for (size_t k = 0; !e && k < f->nchunks; k++)
            e = st_manifest_put_extent(b, &f->chunks[k], 3);
    }
    for (size_t i = 0; !e && i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        if (st_manifest_file_kind(f) != KIND_CHUNK)
            continue;
        e = st_bytes_put_varint(b, f->chunks[0].pack);
        if (!e)
            e = st_manifest_put_location(b, &f->chunks[0]);
    }
    return e;
}

/* Appends the body length and body[0..len) as one zstd frame. */
static st_err put_frame(st_bytes *out, const uint8_t *body, size_t len)
{
    if (len > V3_MAX_BODY)
        return st_seterr(ST_ERR_INVALID, "manifest encode: body of %zu bytes above 256 MiB", len);
    size_t bound = ZSTD_compressBound(len);
    st_err e = st_bytes_put_varint(out, len);
    if (!e)
        e = st_bytes_reserve(out, bound);
    if (e)
        return e;
    size_t n = ZSTD_compress(out->data + out->len, bound, body, len, V3_ZSTD_LEVEL);
    if (ZSTD_isError(n))
        return st_seterr(ST_ERR_NOMEM, "manifest encode: zstd: %s", ZSTD_getErrorName(n));
    const char *why = check_body_len(len, n);
    if (why)
        return st_seterr(ST_ERR_INVALID, "manifest encode: %s", why);
    out->len += n;
    return ST_OK;
}

st_err st_manifest_v3_put_body(st_bytes *out, const st_manifest *m)
{
    st_bytes body = {0};
    bundle_table t;
    st_err e = bundle_table_build(m->files, m->nfiles, &t);
    if (!e)
        e = st_manifest_put_head(&body, m);
    if (!e)
        e = put_bundles(&body, &t);
    if (!e)
        e = st_bytes_put_varint(&body, m->nfiles);
    if (!e)
        e = put_paths(&body, m);
    if (!e)
        e = put_columns(&body, m);
    if (!e)
        e = put_slices(&body, m, &t);
    if (!e)
        e = put_extents(&body, m);
    if (!e)
        e = put_frame(out, body.data, body.len);
    bundle_table_free(&t);
    st_bytes_free(&body);
    return e;
}

/* ---- decoder ---- */

/* p[0..len) is the body length and a frame: checks the caps, then the
 * frame, then decompresses into *body (malloc'd, the caller frees). */
static st_err get_frame(const uint8_t *p, size_t len, uint8_t **body, size_t *body_len)
{
    st_reader r;
    uint64_t want;
    st_reader_init(&r, p, len);
    if (st_get_varint(&r, &want))
        return st_seterr(ST_ERR_CORRUPT, "manifest: body length malformed");
    const uint8_t *frame = r.p;
    size_t frame_len = st_reader_left(&r);
    const char *why = check_body_len(want, frame_len);
    if (why)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %s", why);
    if (ZSTD_getFrameContentSize(frame, frame_len) != want)
        return st_seterr(ST_ERR_CORRUPT, "manifest: zstd content size is not the body length");
    size_t got = ZSTD_findFrameCompressedSize(frame, frame_len);
    if (ZSTD_isError(got) || got != frame_len)
        return st_seterr(ST_ERR_CORRUPT, "manifest: zstd frame malformed or bytes after it");
    uint8_t *b = malloc(want ? (size_t)want : 1);
    if (!b)
        return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for a %llu-byte body",
                         (unsigned long long)want);
    got = ZSTD_decompress(b, (size_t)want, frame, frame_len);
    if (ZSTD_isError(got) || got != want) {
        free(b);
        return st_seterr(ST_ERR_CORRUPT, "manifest: zstd frame does not decompress to the body");
    }
    *body = b;
    *body_len = (size_t)want;
    return ST_OK;
}

/* The bundle table as written; each entry's raw length in bundle_len. */
static st_err get_bundles(st_reader *r, st_chunk_ref **out, size_t *n)
{
    if (st_manifest_get_count(r, MIN_BUNDLE_LEN, n))
        return st_seterr(ST_ERR_CORRUPT, "manifest: bundle count malformed or too large");
    if (*n == 0)
        return ST_OK;
    st_chunk_ref *b = calloc(*n, sizeof *b);
    if (!b)
        return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu bundles", *n);
    *out = b;
    for (size_t k = 0; k < *n; k++) {
        st_manifest_get_u32(r, &b[k].pack);
        st_manifest_get_location(r, &b[k]);
        st_manifest_get_u32(r, &b[k].bundle_len);
        if (r->err)
            return st_seterr(ST_ERR_CORRUPT, "manifest: bundle %zu malformed", k);
        if (b[k].bundle_len == 0 || b[k].bundle_len > ST_MANIFEST_MAX_BUNDLE)
            return st_seterr(ST_ERR_CORRUPT, "manifest: bundle %zu raw length not in 1..64 KiB", k);
    }
    return ST_OK;
}

/* Rebuilds each path from its front coding; each must be clean and follow
 * the previous one in tree order. */
static st_err get_paths(st_reader *r, st_manifest *d)
{
    const char *prev = "";
    size_t prev_len = 0;
    for (size_t i = 0; i < d->nfiles; i++) {
        uint64_t shared;
        const uint8_t *suffix;
        size_t suffix_len;
        if (st_get_varint(r, &shared) || st_get_str(r, ST_MANIFEST_MAX_PATH, &suffix, &suffix_len))
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu path malformed", i);
        if (shared > prev_len)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu path shares more than there is",
                             i);
        /* One encoding: shared counts every byte in common with prev. */
        if (shared < prev_len && suffix_len && suffix[0] == (uint8_t)prev[shared])
            return st_seterr(ST_ERR_CORRUPT,
                             "manifest: file %zu path shares fewer bytes than it has in common", i);
        size_t len = (size_t)shared + suffix_len;
        if (len > ST_MANIFEST_MAX_PATH)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu path too long", i);
        char *path = malloc(len + 1);
        if (!path)
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory");
        memcpy(path, prev, (size_t)shared);
        memcpy(path + shared, suffix, suffix_len);
        path[len] = '\0';
        d->files[i].path = path;
        const char *why = st_path_is_clean(path, len) ? NULL : "path is not clean";
        if (!why && i > 0)
            why = st_manifest_check_path_order(prev, path);
        if (why)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu (%.200s): %s", i, path, why);
        prev = path;
        prev_len = len;
    }
    return ST_OK;
}

/* Sizes, modes, mtimes, ranks and kinds. */
static st_err get_columns(st_reader *r, st_manifest *d, uint8_t *kinds)
{
    st_file_entry *files = d->files;
    for (size_t i = 0; i < d->nfiles; i++)
        st_get_varint(r, &files[i].size);
    for (size_t i = 0; i < d->nfiles; i++)
        st_manifest_get_u32(r, &files[i].mode);
    uint64_t prev = 0;
    for (size_t i = 0; i < d->nfiles && !r->err; i++) {
        int64_t diff = 0;
        st_manifest_get_zigzag(r, &diff);
        prev += (uint64_t)diff;
        files[i].mtime_ns = (int64_t)prev;
    }
    for (size_t i = 0; i < d->nfiles; i++)
        st_manifest_get_rank(r, &files[i].rank);
    for (size_t i = 0; i < d->nfiles && !r->err; i++)
        if (st_get_u8(r, &kinds[i]) == 0 && kinds[i] > KIND_SLICE)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu of unknown kind %u", i, kinds[i]);
    if (r->err)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file columns malformed");
    return ST_OK;
}

/* Gives file f one extent: a copy of c (the caller sets the rest). */
static st_err give_one_extent(st_file_entry *f, const st_chunk_ref *c)
{
    f->chunks = malloc(sizeof *f->chunks);
    if (!f->chunks)
        return st_seterr(ST_ERR_NOMEM, "manifest: out of memory");
    f->chunks[0] = *c;
    f->nchunks = 1;
    return ST_OK;
}

/* The slices of kind-2 files, as written by put_slices(). */
static st_err get_slices(st_reader *r, st_manifest *d, const uint8_t *kinds,
                         const st_chunk_ref *bundles, size_t nbundles)
{
    uint64_t prev_index = 0, prev_end = 0;
    int have_prev = 0;
    for (size_t i = 0; i < d->nfiles; i++) {
        if (kinds[i] != KIND_SLICE)
            continue;
        st_file_entry *f = &d->files[i];
        int64_t dindex = 0, dskip = 0;
        st_manifest_get_zigzag(r, &dindex);
        st_manifest_get_zigzag(r, &dskip);
        if (r->err)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu slice malformed", i);
        /* Unsigned sums wrap; a value the encoder wrote lands in range. */
        uint64_t index = prev_index + (uint64_t)dindex;
        if (index >= nbundles)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu bundle index out of range", i);
        uint64_t skip = (have_prev && index == prev_index ? prev_end : 0) + (uint64_t)dskip;
        if (skip > UINT32_MAX || f->size > UINT32_MAX)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu slice past its bundle", i);
        st_err e = give_one_extent(f, &bundles[index]);
        if (e)
            return e;
        f->chunks[0].skip = (uint32_t)skip;
        f->chunks[0].raw_len = (uint32_t)f->size;
        prev_index = index;
        prev_end = skip + f->size;
        have_prev = 1;
    }
    return ST_OK;
}

/* Digests and extents of kind-0 files, then the chunks of kind-1 files. */
static st_err get_extents(st_reader *r, st_manifest *d, const uint8_t *kinds)
{
    for (size_t i = 0; i < d->nfiles; i++) {
        const uint8_t *digest;
        d->files[i].digest_absent = kinds[i] != KIND_EXTENTS;
        if (kinds[i] != KIND_EXTENTS)
            continue;
        if (st_get_bytes(r, ST_ID_LEN, &digest))
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu digest truncated", i);
        memcpy(d->files[i].digest.b, digest, ST_ID_LEN);
    }
    for (size_t i = 0; i < d->nfiles; i++) {
        st_file_entry *f = &d->files[i];
        if (kinds[i] != KIND_EXTENTS)
            continue;
        if (st_manifest_get_count(r, ST_MANIFEST_MIN_EXTENT, &f->nchunks))
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu extent count malformed", i);
        if (f->nchunks && !(f->chunks = calloc(f->nchunks, sizeof *f->chunks)))
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu extents", f->nchunks);
        for (size_t k = 0; k < f->nchunks && !r->err; k++)
            st_manifest_get_extent(r, 3, &f->chunks[k]);
        if (r->err)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu extents malformed", i);
    }
    for (size_t i = 0; i < d->nfiles; i++) {
        st_file_entry *f = &d->files[i];
        st_chunk_ref c = {.raw_len = (uint32_t)f->size};
        if (kinds[i] != KIND_CHUNK)
            continue;
        st_manifest_get_u32(r, &c.pack);
        st_manifest_get_location(r, &c);
        if (r->err || f->size > UINT32_MAX)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu chunk malformed", i);
        st_err e = give_one_extent(f, &c);
        if (e)
            return e;
    }
    return ST_OK;
}

/* The rules on the whole: each file's, its kind, the bundle table. */
static st_err check_decoded(const st_manifest *d, unsigned version, const uint8_t *kinds,
                            const st_chunk_ref *bundles, size_t nbundles)
{
    for (size_t i = 0; i < d->nfiles; i++) {
        const st_file_entry *f = &d->files[i];
        size_t bad_chunk = 0;
        const char *why = st_manifest_check_file(f, strlen(f->path), d->npacks, 3, &bad_chunk);
        if (!why && st_manifest_file_kind(f) != kinds[i])
            why = kinds[i] == KIND_EXTENTS ? "a single whole chunk written as extents"
                                           : "kind does not match the file";
        if (why)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu (chunk %zu): %s", i, bad_chunk,
                             why);
    }
    if (version == 3 && !st_manifest_has_slice(d))
        return st_seterr(ST_ERR_CORRUPT, "manifest: version 3 without a slice of a bundle");
    bundle_table t;
    st_err e = bundle_table_build(d->files, d->nfiles, &t);
    if (e)
        return e;
    int same = t.n == nbundles;
    for (size_t k = 0; same && k < nbundles; k++)
        same = same_bundle(t.refs[k], &bundles[k]);
    bundle_table_free(&t);
    if (!same)
        return st_seterr(ST_ERR_CORRUPT,
                         "manifest: bundle table not the files' bundles in first-use order");
    return ST_OK;
}

/* Parses the body[0..len) of a version 3 or 4 manifest into d. */
static st_err get_body(const uint8_t *body, size_t len, unsigned version, st_manifest *d)
{
    st_reader r;
    st_chunk_ref *bundles = NULL;
    uint8_t *kinds = NULL;
    size_t nbundles = 0;
    st_err e;

    st_reader_init(&r, body, len);
    if ((e = st_manifest_get_head(&r, version >= 4, d)) ||
        (e = get_bundles(&r, &bundles, &nbundles)))
        goto out;
    if (st_manifest_get_count(&r, MIN_FILE_LEN, &d->nfiles)) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: file count malformed or too large");
        goto out;
    }
    if (d->nfiles) {
        /* calloc: st_manifest_free() can release a partly filled array. */
        d->files = calloc(d->nfiles, sizeof *d->files);
        kinds = malloc(d->nfiles);
        if (!d->files || !kinds) {
            e = st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu files", d->nfiles);
            goto out;
        }
    }
    if ((e = get_paths(&r, d)) || (e = get_columns(&r, d, kinds)) ||
        (e = get_slices(&r, d, kinds, bundles, nbundles)) || (e = get_extents(&r, d, kinds)))
        goto out;
    if (st_reader_left(&r) != 0) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: %zu unexpected bytes after the last field",
                      st_reader_left(&r));
        goto out;
    }
    e = check_decoded(d, version, kinds, bundles, nbundles);
out:
    free(bundles);
    free(kinds);
    return e;
}

/* Unframes p[0..len); then decodes the body into d, or (d NULL) appends
 * its length and bytes to out. */
static st_err open_body(const uint8_t *p, size_t len, unsigned version, st_manifest *d,
                        st_bytes *out)
{
    uint8_t *body = NULL;
    size_t body_len = 0;
    st_err e = get_frame(p, len, &body, &body_len);
    if (!e && d)
        e = get_body(body, body_len, version, d);
    if (!e && !d && !(e = st_bytes_put_varint(out, body_len)))
        e = st_bytes_append(out, body, body_len);
    free(body);
    return e;
}

st_err st_manifest_v3_get_body(const uint8_t *p, size_t len, unsigned version, st_manifest *d)
{
    return open_body(p, len, version, d, NULL);
}

st_err st_manifest_v3_unframe(const uint8_t *p, size_t len, st_bytes *out)
{
    return open_body(p, len, 3, NULL, out);
}
