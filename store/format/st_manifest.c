/*
 * st_manifest — encodes and decodes per-node step manifests (layout in
 * st_manifest.h, byte tables and rules in docs/FORMATS.md): the envelope
 * every version shares (magic, version, flags, trailing checksum), the
 * choice of version, and the body of versions 1 and 2. Version 3's body is
 * st_manifest_v3.c's; the rules all versions share are st_manifest_rules.c's.
 *
 * Invariant: encoder and decoder enforce the *same* rules through the shared
 * st_manifest_check_* helpers, so everything the encoder writes decodes, and
 * everything the decoder returns could be re-encoded byte for byte. The
 * encoder reports a broken rule as ST_ERR_INVALID (caller bug), the decoder as
 * ST_ERR_CORRUPT (bad data).
 *
 * The decoder treats its input as hostile: it verifies the trailing checksum
 * before parsing, bounds every count by the bytes left (each element has a
 * minimum encoded size) before allocating, so memory stays within a small
 * multiple of the input length, and on any failure frees what it built and
 * leaves *m zeroed.
 *
 * Ownership rule (decoder output and hand-built manifests alike): node, job,
 * packs, files, and each file's path and chunks are separate malloc()
 * allocations owned by the st_manifest, or NULL when empty; st_manifest_free()
 * frees them all and zeroes the struct. Builders must not point these fields
 * at string literals or stack memory.
 *
 * Threads: pure functions over caller-owned values.
 */
#include "format/st_manifest.h"

#include <stdlib.h>
#include <string.h>

#include "format/st_manifest_rules.h"
#include "format/st_manifest_v3.h"

static const uint8_t manifest_magic[4] = {'C', 'K', 'm', '1'};

/* Minimum encoded sizes (versions 1 and 2), to cap claimed counts. */
#define MIN_CHUNK_LEN (ST_ID_LEN + 4)                     /* id + 4 one-byte varints */
#define MIN_FILE_LEN  (2 + 1 + 1 + 1 + 1 + ST_ID_LEN + 1) /* path "x", size..rank, digest, count */

/* ---- encoder ---- */

static st_err validate_for_encode(const st_manifest *m, unsigned version)
{
    const char *why;
    size_t node_len = m->node ? strnlen(m->node, ST_MANIFEST_MAX_NAME + 1) : 0;
    size_t job_len = m->job ? strnlen(m->job, ST_MANIFEST_MAX_NAME + 1) : 0;
    if ((why = st_manifest_check_name(m->node, node_len)))
        return st_seterr(ST_ERR_INVALID, "manifest encode: node name %s", why);
    if ((why = st_manifest_check_name(m->job, job_len)))
        return st_seterr(ST_ERR_INVALID, "manifest encode: job name %s", why);
    if ((m->npacks && !m->packs) || (m->nfiles && !m->files))
        return st_seterr(ST_ERR_INVALID, "manifest encode: count set but array missing");
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        size_t plen = f->path ? strnlen(f->path, ST_MANIFEST_MAX_PATH + 1) : 0;
        size_t bad_chunk = 0;
        why = st_manifest_check_file(f, plen, m->npacks, version, &bad_chunk);
        if (!why && version >= 3 && i > 0) /* version 3: files in tree order */
            why = st_manifest_check_path_order(m->files[i - 1].path, f->path);
        if (why)
            return st_seterr(ST_ERR_INVALID, "manifest encode: file %zu (%.200s), chunk %zu: %s", i,
                             f->path ? f->path : "(null)", bad_chunk, why);
    }
    if (version >= 3)
        return ST_OK; /* tree order, checked above, leaves no conflict */
    return st_manifest_check_conflicts(m->files, m->nfiles, ST_ERR_INVALID);
}

/* A file of a version 1 or 2 manifest. */
static st_err put_file(st_bytes *out, const st_file_entry *f, unsigned version)
{
    st_err e = st_bytes_put_str(out, f->path, strlen(f->path));
    if (!e)
        e = st_bytes_put_varint(out, f->size);
    if (!e)
        e = st_bytes_put_varint(out, f->mode);
    if (!e)
        e = st_bytes_put_varint(out, st_zigzag_encode(f->mtime_ns));
    if (!e)
        e = st_bytes_put_varint(out, st_zigzag_encode(f->rank));
    if (!e)
        e = st_bytes_append(out, f->digest.b, ST_ID_LEN);
    if (!e)
        e = st_bytes_put_varint(out, f->nchunks);
    for (size_t i = 0; !e && i < f->nchunks; i++)
        e = st_manifest_put_extent(out, &f->chunks[i], version);
    return e;
}

st_err st_manifest_encode(const st_manifest *m, st_bytes *out)
{
    size_t start = out->len;
    const unsigned version = m->pack_seals              ? 4
                             : st_manifest_has_slice(m) ? 3
                             : st_manifest_has_hole(m)  ? 2
                                                        : 1;
    st_err e = validate_for_encode(m, version);
    if (e)
        return e;

    e = st_bytes_append(out, manifest_magic, sizeof manifest_magic);
    if (!e)
        e = st_bytes_put_le16(out, (uint16_t)version);
    if (!e)
        e = st_bytes_put_le16(out, 0); /* flags */
    if (!e && version >= 3) {
        e = st_manifest_v3_put_body(out, m);
    } else {
        if (!e)
            e = st_manifest_put_head(out, m);
        if (!e)
            e = st_bytes_put_varint(out, m->nfiles);
        for (size_t i = 0; !e && i < m->nfiles; i++)
            e = put_file(out, &m->files[i], version);
    }
    if (!e)
        e = st_bytes_put_le64(out, st_hash64(out->data + start, out->len - start));
    if (e)
        out->len = start; /* leave no half-written manifest behind */
    return e;
}

/* ---- decoder ---- */

/* A file of a version 1 or 2 manifest. */
static st_err get_file(st_reader *r, size_t index, size_t npacks, unsigned version,
                       st_file_entry *f)
{
    size_t path_len = 0;
    st_err e = st_manifest_get_cstr(r, ST_MANIFEST_MAX_PATH, &f->path, &path_len);
    if (e == ST_ERR_NOMEM)
        return st_seterr(e, "manifest: out of memory");
    if (e)
        return st_seterr(e, "manifest: file %zu path truncated or too long", index);

    const uint8_t *digest;
    st_get_varint(r, &f->size);
    st_manifest_get_u32(r, &f->mode);
    st_manifest_get_zigzag(r, &f->mtime_ns);
    st_manifest_get_rank(r, &f->rank);
    st_get_bytes(r, ST_ID_LEN, &digest);
    st_manifest_get_count(r, version >= 2 ? ST_MANIFEST_MIN_EXTENT : MIN_CHUNK_LEN, &f->nchunks);
    if (r->err)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu header malformed", index);
    memcpy(f->digest.b, digest, ST_ID_LEN);

    if (f->nchunks) {
        f->chunks = calloc(f->nchunks, sizeof *f->chunks);
        if (!f->chunks)
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu chunks", f->nchunks);
    }
    for (size_t i = 0; i < f->nchunks; i++) {
        st_manifest_get_extent(r, version, &f->chunks[i]);
        if (r->err)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu chunk %zu malformed", index, i);
    }

    size_t bad_chunk = 0;
    const char *why = st_manifest_check_file(f, path_len, npacks, version, &bad_chunk);
    if (why)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu (chunk %zu): %s", index, bad_chunk,
                         why);
    return ST_OK;
}

/* The body of a version 1 or 2 manifest, buf[0..len), into d. */
static st_err get_body_v1(const uint8_t *buf, size_t len, unsigned version, st_manifest *d)
{
    st_reader r;
    st_err e;
    st_reader_init(&r, buf, len);
    if ((e = st_manifest_get_head(&r, 0, d)))
        return e;
    if (st_manifest_get_count(&r, MIN_FILE_LEN, &d->nfiles))
        return st_seterr(ST_ERR_CORRUPT, "manifest: file count malformed or too large");
    if (d->nfiles) {
        /* calloc: st_manifest_free() can release a partly filled array. */
        d->files = calloc(d->nfiles, sizeof *d->files);
        if (!d->files)
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu files", d->nfiles);
    }
    for (size_t i = 0; i < d->nfiles; i++) {
        if ((e = get_file(&r, i, d->npacks, version, &d->files[i])))
            return e;
    }
    if (st_reader_left(&r) != 0)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %zu unexpected bytes after the last file",
                         st_reader_left(&r));
    /* The encoder writes version 1 unless a hole needs 2: one encoding each. */
    if (version == 2 && !st_manifest_has_hole(d))
        return st_seterr(ST_ERR_CORRUPT, "manifest: version 2 without a hole extent");
    return st_manifest_check_conflicts(d->files, d->nfiles, ST_ERR_CORRUPT);
}

/* Magic, checksum, then version: every version keeps the magic and the
 * trailing XXH3-64, so a flipped version byte reads as corruption, and an
 * intact newer manifest as unsupported. */
static st_err check_envelope(const uint8_t *buf, size_t len, unsigned *version_out)
{
    if (len < ST_MANIFEST_HEADER_LEN + ST_MANIFEST_SUM_LEN)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %zu bytes is too short", len);
    if (memcmp(buf, manifest_magic, sizeof manifest_magic) != 0)
        return st_seterr(ST_ERR_CORRUPT, "manifest: bad magic");
    size_t body = len - ST_MANIFEST_SUM_LEN;
    if (st_hash64(buf, body) != st_le64_get(buf + body))
        return st_seterr(ST_ERR_CORRUPT, "manifest: checksum mismatch");
    uint16_t version = st_le16_get(buf + 4);
    uint16_t flags = st_le16_get(buf + 6);
    if (version == 0)
        return st_seterr(ST_ERR_CORRUPT, "manifest: version 0");
    if (version > ST_MANIFEST_VERSION)
        return st_seterr(ST_ERR_UNSUPPORTED, "manifest: version %u is newer than %u", version,
                         ST_MANIFEST_VERSION);
    if (flags != 0)
        return st_seterr(ST_ERR_UNSUPPORTED, "manifest: unknown flags 0x%04x", flags);
    *version_out = version;
    return ST_OK;
}

st_err st_manifest_decode(const uint8_t *buf, size_t len, st_manifest *m)
{
    st_manifest d = {0};
    unsigned version = 0;

    memset(m, 0, sizeof *m);
    if (!buf)
        return st_seterr(ST_ERR_CORRUPT, "manifest: no data");
    st_err e = check_envelope(buf, len, &version);
    if (e)
        return e;
    const uint8_t *body = buf + ST_MANIFEST_HEADER_LEN;
    size_t body_len = len - ST_MANIFEST_HEADER_LEN - ST_MANIFEST_SUM_LEN;
    e = version >= 3 ? st_manifest_v3_get_body(body, body_len, version, &d)
                     : get_body_v1(body, body_len, version, &d);
    if (e) {
        st_manifest_free(&d);
        return e;
    }
    *m = d;
    return ST_OK;
}

st_err st_manifest_canonical_bytes(const uint8_t *buf, size_t len, st_bytes *out)
{
    if (!buf || len < ST_MANIFEST_HEADER_LEN + ST_MANIFEST_SUM_LEN ||
        memcmp(buf, manifest_magic, sizeof manifest_magic) != 0)
        return st_seterr(ST_ERR_CORRUPT, "manifest: too short or bad magic");
    size_t start = out->len;
    size_t before_sum = len - ST_MANIFEST_SUM_LEN;
    if (st_le16_get(buf + 4) < 3)
        return st_bytes_append(out, buf, before_sum);
    st_err e = st_bytes_append(out, buf, ST_MANIFEST_HEADER_LEN);
    if (!e)
        e = st_manifest_v3_unframe(buf + ST_MANIFEST_HEADER_LEN,
                                   before_sum - ST_MANIFEST_HEADER_LEN, out);
    if (e)
        out->len = start;
    return e;
}

void st_manifest_free(st_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; m->files && i < m->nfiles; i++) {
        free(m->files[i].path);
        free(m->files[i].chunks);
    }
    free(m->files);
    free(m->packs);
    free(m->pack_seals);
    free(m->node);
    free(m->job);
    memset(m, 0, sizeof *m);
}
