/*
 * st_manifest_rules — the rules and fields every manifest version shares
 * (see st_manifest_rules.h). Encoders and decoders of every version call the
 * same check_* functions, so whatever one writes the other accepts and
 * whatever decodes re-encodes to the same bytes.
 *
 * Threads: pure functions over caller-owned values.
 */
#include "format/st_manifest_rules.h"

#include <stdlib.h>
#include <string.h>

#include "format/st_codec.h"
#include "format/st_pack.h"

/* ---- rules shared by encoder and decoder: NULL if fine, else why not ---- */

int st_path_is_clean(const char *path, size_t len)
{
    if (!path || len == 0 || len > ST_MANIFEST_MAX_PATH)
        return 0;
    if (path[0] == '/' || path[len - 1] == '/')
        return 0;
    size_t start = 0; /* first byte of the current component */
    for (size_t i = 0; i <= len; i++) {
        if (i < len && path[i] == '\0')
            return 0;
        if (i < len && path[i] != '/')
            continue;
        size_t clen = i - start;
        if (clen == 0) /* "//" */
            return 0;
        if (clen == 1 && path[start] == '.')
            return 0;
        if (clen == 2 && path[start] == '.' && path[start + 1] == '.')
            return 0;
        start = i + 1;
    }
    return 1;
}

const char *st_manifest_check_name(const char *s, size_t len)
{
    if (!s || len == 0)
        return "is empty";
    if (len > ST_MANIFEST_MAX_NAME)
        return "is longer than 255 bytes";
    if (memchr(s, '\0', len))
        return "contains a NUL byte";
    return NULL;
}

/* The rules of one hole extent. */
static const char *check_hole(const st_chunk_ref *c, unsigned version)
{
    static const st_id zero_id;
    if (version < 2)
        return "hole extent in a version 1 manifest";
    if (c->raw_len == 0 || c->raw_len > ST_MANIFEST_MAX_HOLE)
        return "hole length not in 1..2^30";
    if (c->offset || c->stored_len || c->skip || c->bundle_len ||
        memcmp(c->id.b, zero_id.b, ST_ID_LEN))
        return "hole with a chunk location";
    return NULL;
}

/* The rules of one stored chunk's reference (a whole chunk or a bundle). */
static const char *check_chunk(const st_chunk_ref *c, size_t npacks)
{
    if (c->pack >= npacks)
        return "chunk pack index out of range";
    if (c->stored_len < ST_CODEC_HEADER_LEN)
        return "chunk stored length shorter than a chunk header";
    if (c->raw_len > ST_CODEC_MAX_RAW)
        return "chunk raw length above limit";
    if (c->offset > ST_PACK_MAX_SIZE || c->stored_len > ST_PACK_MAX_SIZE - c->offset)
        return "chunk lies beyond the largest possible pack";
    if (!st_chunk_is_slice(c) && c->skip)
        return "whole chunk with a skip";
    return NULL;
}

/* The rules of a slice of a bundle, the only extent of a file of nchunks. */
static const char *check_slice(const st_chunk_ref *c, unsigned version, size_t nchunks)
{
    if (version < 3)
        return "slice of a bundle before version 3";
    if (nchunks != 1)
        return "slice of a bundle that is not its file's only extent";
    if (c->bundle_len > ST_MANIFEST_MAX_BUNDLE)
        return "bundle longer than 64 KiB";
    if (c->raw_len == 0)
        return "empty slice";
    if ((uint64_t)c->skip + c->raw_len > c->bundle_len)
        return "slice past the end of its bundle";
    return NULL;
}

const char *st_manifest_check_file(const st_file_entry *f, size_t path_len, size_t npacks,
                                   unsigned version, size_t *bad_chunk)
{
    if (!st_path_is_clean(f->path, path_len))
        return "path is not clean";
    if (f->rank < -1)
        return "rank below -1";
    if (f->nchunks && !f->chunks)
        return "chunk array missing";
    uint64_t total = 0;
    for (size_t i = 0; i < f->nchunks; i++) {
        const st_chunk_ref *c = &f->chunks[i];
        *bad_chunk = i;
        const char *why = st_chunk_is_hole(c) ? check_hole(c, version) : check_chunk(c, npacks);
        if (!why && st_chunk_is_slice(c))
            why = check_slice(c, version, f->nchunks);
        if (why)
            return why;
        if (c->raw_len > UINT64_MAX - total)
            return "chunk lengths overflow";
        total += c->raw_len;
    }
    if (total != f->size)
        return "chunk raw lengths do not add up to the file size";
    int kind = st_manifest_file_kind(f);
    /* Version 3 has no encoding for these: kind 1 is at least 1 byte, and
     * kind 0 may not be a single whole chunk (one encoding per manifest). */
    if (version >= 3 && kind == 1 && f->size == 0)
        return "empty file of one chunk in a version 3 manifest";
    if (f->digest_absent && (version < 3 || kind == 0))
        return "digest absent where the manifest stores one";
    return NULL;
}

/* '/' before every other byte, so that the paths beneath "d" ("d/...")
 * come right after "d" itself, before siblings such as "d-b" that strcmp
 * would put between them. */
int st_path_cmp(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (; *x && *x == *y; x++, y++)
        ;
    int cx = *x == '/' ? 1 : *x ? *x + 1 : 0, cy = *y == '/' ? 1 : *y ? *y + 1 : 0;
    return cx - cy;
}

static int cmp_path_ptr(const void *a, const void *b)
{
    return st_path_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 if path b lies beneath path a ("d" and "d/x"). */
static int is_beneath(const char *a, const char *b)
{
    size_t n = strlen(a);
    return !strncmp(a, b, n) && b[n] == '/';
}

const char *st_manifest_check_path_order(const char *prev, const char *path)
{
    if (st_path_cmp(prev, path) >= 0)
        return "paths not strictly ascending in tree order";
    if (is_beneath(prev, path))
        return "path beneath a file";
    return NULL;
}

st_err st_manifest_check_conflicts(const st_file_entry *files, size_t nfiles, st_err bad)
{
    if (nfiles < 2)
        return ST_OK;
    const char **sorted = malloc(nfiles * sizeof *sorted);
    if (!sorted)
        return st_seterr(ST_ERR_NOMEM, "manifest: out of memory");
    for (size_t i = 0; i < nfiles; i++)
        sorted[i] = files[i].path;
    qsort(sorted, nfiles, sizeof *sorted, cmp_path_ptr);
    st_err e = ST_OK;
    for (size_t i = 1; i < nfiles && !e; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            e = st_seterr(bad, "manifest: duplicate path %.200s", sorted[i]);
        else if (is_beneath(sorted[i - 1], sorted[i]))
            e = st_seterr(bad, "manifest: path beneath a file %.200s", sorted[i]);
    }
    free(sorted);
    return e;
}

/* 1 if an extent of a file of m satisfies is(). */
static int has_extent(const st_manifest *m, int (*is)(const st_chunk_ref *))
{
    for (size_t i = 0; m->files && i < m->nfiles; i++)
        for (size_t k = 0; m->files[i].chunks && k < m->files[i].nchunks; k++)
            if (is(&m->files[i].chunks[k]))
                return 1;
    return 0;
}

int st_manifest_has_hole(const st_manifest *m)
{
    return has_extent(m, st_chunk_is_hole);
}

int st_manifest_has_slice(const st_manifest *m)
{
    return has_extent(m, st_chunk_is_slice);
}

int st_manifest_file_kind(const st_file_entry *f)
{
    if (f->nchunks != 1 || !f->chunks) /* never &chunks[0] of a chunkless file */
        return 0;
    if (st_chunk_is_slice(&f->chunks[0]))
        return 2;
    return st_chunk_is_hole(&f->chunks[0]) ? 0 : 1;
}

/* ---- fields every version shares ---- */

st_err st_manifest_put_head(st_bytes *out, const st_manifest *m)
{
    st_err e = st_bytes_put_varint(out, m->step);
    if (!e)
        e = st_bytes_put_varint(out, st_zigzag_encode(m->created_ns));
    if (!e)
        e = st_bytes_put_str(out, m->node, strlen(m->node));
    if (!e)
        e = st_bytes_put_str(out, m->job, strlen(m->job));
    if (!e)
        e = st_bytes_put_varint(out, m->npacks);
    for (size_t i = 0; !e && i < m->npacks; i++) {
        e = st_bytes_append(out, m->packs[i].b, ST_ID_LEN);
        if (!e && m->pack_seals)
            e = st_bytes_append(out, &m->pack_seals[i], sizeof m->pack_seals[i]);
    }
    return e;
}

st_err st_manifest_get_cstr(st_reader *r, size_t max_len, char **out, size_t *len)
{
    const uint8_t *p;
    if (st_get_str(r, max_len, &p, len))
        return ST_ERR_CORRUPT;
    char *s = malloc(*len + 1);
    if (!s)
        return ST_ERR_NOMEM;
    memcpy(s, p, *len);
    s[*len] = '\0';
    *out = s;
    return ST_OK;
}

static st_err get_name(st_reader *r, const char *what, char **out)
{
    size_t len = 0;
    st_err e = st_manifest_get_cstr(r, ST_MANIFEST_MAX_NAME, out, &len);
    if (e == ST_ERR_NOMEM)
        return st_seterr(e, "manifest: out of memory");
    if (e)
        return st_seterr(e, "manifest: %s name truncated or too long", what);
    const char *why = st_manifest_check_name(*out, len);
    if (why)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %s name %s", what, why);
    return ST_OK;
}

st_err st_manifest_get_head(st_reader *r, int sealed, st_manifest *d)
{
    st_err e;
    st_get_varint(r, &d->step);
    st_manifest_get_zigzag(r, &d->created_ns);
    if (r->err)
        return st_seterr(ST_ERR_CORRUPT, "manifest: header malformed");
    if ((e = get_name(r, "node", &d->node)) || (e = get_name(r, "job", &d->job)))
        return e;
    const size_t entry = ST_MANIFEST_MIN_PACK + (sealed ? sizeof(st_pack_seal) : 0);
    if (st_manifest_get_count(r, entry, &d->npacks))
        return st_seterr(ST_ERR_CORRUPT, "manifest: pack count malformed or too large");
    if (d->npacks) {
        const uint8_t *ids;
        d->packs = malloc(d->npacks * sizeof *d->packs);
        d->pack_seals = sealed ? malloc(d->npacks * sizeof *d->pack_seals) : NULL;
        if (!d->packs || (sealed && !d->pack_seals))
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu packs", d->npacks);
        st_get_bytes(r, d->npacks * entry, &ids); /* fits: count was capped */
        for (size_t i = 0; i < d->npacks; i++) {
            memcpy(d->packs[i].b, ids + i * entry, ST_ID_LEN);
            if (sealed)
                memcpy(&d->pack_seals[i], ids + i * entry + ST_ID_LEN, sizeof *d->pack_seals);
        }
    }
    return ST_OK;
}

st_err st_manifest_put_location(st_bytes *out, const st_chunk_ref *c)
{
    st_err e = st_bytes_append(out, c->id.b, ST_ID_LEN);
    if (!e)
        e = st_bytes_put_varint(out, c->offset);
    if (!e)
        e = st_bytes_put_varint(out, c->stored_len);
    return e;
}

void st_manifest_get_location(st_reader *r, st_chunk_ref *c)
{
    const uint8_t *id;
    st_get_bytes(r, ST_ID_LEN, &id);
    st_get_varint(r, &c->offset);
    st_manifest_get_u32(r, &c->stored_len);
    if (!r->err)
        memcpy(c->id.b, id, ST_ID_LEN);
}

st_err st_manifest_put_extent(st_bytes *out, const st_chunk_ref *c, unsigned version)
{
    st_err e;
    if (version >= 2 && st_chunk_is_hole(c)) {
        e = st_bytes_put_varint(out, 0);
        return e ? e : st_bytes_put_varint(out, c->raw_len);
    }
    if (version >= 2) { /* tag pack + 1, then where */
        e = st_bytes_put_varint(out, (uint64_t)c->pack + 1);
        if (!e)
            e = st_manifest_put_location(out, c);
    } else { /* id, pack, offset, stored length */
        e = st_bytes_append(out, c->id.b, ST_ID_LEN);
        if (!e)
            e = st_bytes_put_varint(out, c->pack);
        if (!e)
            e = st_bytes_put_varint(out, c->offset);
        if (!e)
            e = st_bytes_put_varint(out, c->stored_len);
    }
    return e ? e : st_bytes_put_varint(out, c->raw_len);
}

void st_manifest_get_extent(st_reader *r, unsigned version, st_chunk_ref *c)
{
    if (version >= 2) {
        uint64_t tag;
        if (st_get_varint(r, &tag))
            return;
        if (tag == 0) { /* a hole: only its length */
            c->pack = ST_CHUNK_HOLE;
            st_manifest_get_u32(r, &c->raw_len);
            return;
        }
        if (tag - 1 >= ST_CHUNK_HOLE) {
            r->err = 1;
            return;
        }
        c->pack = (uint32_t)(tag - 1);
        st_manifest_get_location(r, c);
    } else {
        const uint8_t *id;
        st_get_bytes(r, ST_ID_LEN, &id);
        st_manifest_get_u32(r, &c->pack); /* ST_CHUNK_HOLE here fails check_hole */
        st_get_varint(r, &c->offset);
        st_manifest_get_u32(r, &c->stored_len);
        if (!r->err)
            memcpy(c->id.b, id, ST_ID_LEN);
    }
    st_manifest_get_u32(r, &c->raw_len);
}

int st_manifest_get_count(st_reader *r, size_t min_elem_len, size_t *count)
{
    uint64_t v;
    if (st_get_varint(r, &v))
        return -1;
    if (v > st_reader_left(r) / min_elem_len) {
        r->err = 1;
        return -1;
    }
    *count = (size_t)v;
    return 0;
}

int st_manifest_get_u32(st_reader *r, uint32_t *out)
{
    uint64_t v;
    if (st_get_varint(r, &v))
        return -1;
    if (v > UINT32_MAX) {
        r->err = 1;
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int st_manifest_get_zigzag(st_reader *r, int64_t *out)
{
    uint64_t v;
    if (st_get_varint(r, &v))
        return -1;
    *out = st_zigzag_decode(v);
    return 0;
}

int st_manifest_get_rank(st_reader *r, int32_t *out)
{
    int64_t rank;
    if (st_manifest_get_zigzag(r, &rank))
        return -1;
    if (rank < -1 || rank > INT32_MAX) {
        r->err = 1;
        return -1;
    }
    *out = (int32_t)rank;
    return 0;
}
