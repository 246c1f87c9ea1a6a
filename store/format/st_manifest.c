/*
 * st_manifest — encodes and decodes per-node step manifests (layout in
 * st_manifest.h, byte tables and rules in docs/FORMATS.md).
 *
 * Invariant: encoder and decoder enforce the *same* rules through the shared
 * check_* helpers below, so everything the encoder writes decodes, and
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

#include "format/st_codec.h"
#include "format/st_pack.h"

static const uint8_t manifest_magic[4] = {'C', 'K', 'm', '1'};

#define MANIFEST_HEADER_LEN 8 /* magic + version + flags */
#define MANIFEST_SUM_LEN    8

/* Minimum encoded sizes, used to cap claimed counts by the bytes left. */
#define MIN_PACK_LEN  ST_ID_LEN
#define MIN_CHUNK_LEN (ST_ID_LEN + 4)                     /* id + 4 one-byte varints */
#define MIN_EXTENT_V2 2                                   /* tag 0 + a one-byte length */
#define MIN_FILE_LEN  (2 + 1 + 1 + 1 + 1 + ST_ID_LEN + 1) /* path "x", size..rank, digest, count */

/* ---- zigzag: signed values as varints (small magnitudes stay short) ---- */

static uint64_t zigzag_encode(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t zigzag_decode(uint64_t u)
{
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

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

static const char *check_name(const char *s, size_t len)
{
    if (!s || len == 0)
        return "is empty";
    if (len > ST_MANIFEST_MAX_NAME)
        return "is longer than 255 bytes";
    if (memchr(s, '\0', len))
        return "contains a NUL byte";
    return NULL;
}

/* The rules of one hole extent: NULL if fine, else why not. */
static const char *check_hole(const st_chunk_ref *c, unsigned version)
{
    static const st_id zero_id;
    if (version < 2)
        return "hole extent in a version 1 manifest";
    if (c->raw_len == 0 || c->raw_len > ST_MANIFEST_MAX_HOLE)
        return "hole length not in 1..2^30";
    if (c->offset || c->stored_len || memcmp(c->id.b, zero_id.b, ST_ID_LEN))
        return "hole with a chunk location";
    return NULL;
}

/* The rules of one stored chunk's reference: NULL if fine, else why not. */
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
    return NULL;
}

/* Checks one file's fields against npacks, for a manifest of `version`.
 * path_len is the path's byte length. */
static const char *check_file(const st_file_entry *f, size_t path_len, size_t npacks,
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
        if (why)
            return why;
        if (c->raw_len > UINT64_MAX - total)
            return "chunk lengths overflow";
        total += c->raw_len;
    }
    if (total != f->size)
        return "chunk raw lengths do not add up to the file size";
    return NULL;
}

/* Orders paths as a tree walk would: '/' before every other byte, so that
 * the paths beneath "d" ("d/...") come right after "d" itself, before
 * siblings such as "d-b" that strcmp would put between them. */
static int cmp_path_ptr(const void *a, const void *b)
{
    const unsigned char *x = *(const unsigned char *const *)a,
                        *y = *(const unsigned char *const *)b;
    for (; *x && *x == *y; x++, y++)
        ;
    int cx = *x == '/' ? 1 : *x ? *x + 1 : 0, cy = *y == '/' ? 1 : *y ? *y + 1 : 0;
    return cx - cy;
}

/* 1 if path b lies beneath path a ("d" and "d/x"). */
static int is_beneath(const char *a, const char *b)
{
    size_t n = strlen(a);
    return !strncmp(a, b, n) && b[n] == '/';
}

/*
 * Finds two paths that no directory tree can hold together: the same path
 * twice, or a file and a path beneath it ("d" and "d/x": d cannot be a file
 * and a directory). Returns 0 if none, 1 with *dup (the later one) and
 * *what set, -1 on OOM. Paths contain no NUL (checked before). Sorted in
 * tree order, a conflicting pair is always adjacent.
 */
static int find_path_conflict(const st_file_entry *files, size_t nfiles, const char **dup,
                              const char **what)
{
    if (nfiles < 2)
        return 0;
    const char **sorted = malloc(nfiles * sizeof *sorted);
    if (!sorted)
        return -1;
    for (size_t i = 0; i < nfiles; i++)
        sorted[i] = files[i].path;
    qsort(sorted, nfiles, sizeof *sorted, cmp_path_ptr);
    int found = 0;
    for (size_t i = 1; i < nfiles && !found; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            *what = "duplicate path";
        else if (is_beneath(sorted[i - 1], sorted[i]))
            *what = "path beneath a file";
        else
            continue;
        *dup = sorted[i];
        found = 1;
    }
    free(sorted);
    return found;
}

/* 1 if a file of m has a hole extent: such a manifest needs version 2. */
static int has_hole(const st_manifest *m)
{
    for (size_t i = 0; m->files && i < m->nfiles; i++)
        for (size_t k = 0; m->files[i].chunks && k < m->files[i].nchunks; k++)
            if (st_chunk_is_hole(&m->files[i].chunks[k]))
                return 1;
    return 0;
}

/* ---- encoder ---- */

static st_err validate_for_encode(const st_manifest *m, unsigned version)
{
    const char *why;
    if ((why = check_name(m->node, m->node ? strnlen(m->node, ST_MANIFEST_MAX_NAME + 1) : 0)))
        return st_seterr(ST_ERR_INVALID, "manifest encode: node name %s", why);
    if ((why = check_name(m->job, m->job ? strnlen(m->job, ST_MANIFEST_MAX_NAME + 1) : 0)))
        return st_seterr(ST_ERR_INVALID, "manifest encode: job name %s", why);
    if ((m->npacks && !m->packs) || (m->nfiles && !m->files))
        return st_seterr(ST_ERR_INVALID, "manifest encode: count set but array missing");
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        size_t plen = f->path ? strnlen(f->path, ST_MANIFEST_MAX_PATH + 1) : 0;
        size_t bad_chunk = 0;
        if ((why = check_file(f, plen, m->npacks, version, &bad_chunk)))
            return st_seterr(ST_ERR_INVALID, "manifest encode: file %zu (%.200s), chunk %zu: %s", i,
                             f->path ? f->path : "(null)", bad_chunk, why);
    }
    const char *dup = NULL, *what = NULL;
    int d = find_path_conflict(m->files, m->nfiles, &dup, &what);
    if (d < 0)
        return st_seterr(ST_ERR_NOMEM, "manifest encode: out of memory");
    if (d > 0)
        return st_seterr(ST_ERR_INVALID, "manifest encode: %s %.200s", what, dup);
    return ST_OK;
}

static st_err put_chunk(st_bytes *out, const st_chunk_ref *c, unsigned version)
{
    if (version >= 2 && st_chunk_is_hole(c)) {
        st_err e = st_bytes_put_varint(out, 0);
        return e ? e : st_bytes_put_varint(out, c->raw_len);
    }
    st_err e = version >= 2 ? st_bytes_put_varint(out, (uint64_t)c->pack + 1) : ST_OK;
    if (!e)
        e = st_bytes_append(out, c->id.b, ST_ID_LEN);
    if (!e && version < 2)
        e = st_bytes_put_varint(out, c->pack);
    if (!e)
        e = st_bytes_put_varint(out, c->offset);
    if (!e)
        e = st_bytes_put_varint(out, c->stored_len);
    if (!e)
        e = st_bytes_put_varint(out, c->raw_len);
    return e;
}

static st_err put_file(st_bytes *out, const st_file_entry *f, unsigned version)
{
    st_err e = st_bytes_put_str(out, f->path, strlen(f->path));
    if (!e)
        e = st_bytes_put_varint(out, f->size);
    if (!e)
        e = st_bytes_put_varint(out, f->mode);
    if (!e)
        e = st_bytes_put_varint(out, zigzag_encode(f->mtime_ns));
    if (!e)
        e = st_bytes_put_varint(out, zigzag_encode(f->rank));
    if (!e)
        e = st_bytes_append(out, f->digest.b, ST_ID_LEN);
    if (!e)
        e = st_bytes_put_varint(out, f->nchunks);
    for (size_t i = 0; !e && i < f->nchunks; i++)
        e = put_chunk(out, &f->chunks[i], version);
    return e;
}

st_err st_manifest_encode(const st_manifest *m, st_bytes *out)
{
    size_t start = out->len;
    const unsigned version = has_hole(m) ? 2 : 1;
    st_err e = validate_for_encode(m, version);
    if (e)
        return e;

    e = st_bytes_append(out, manifest_magic, sizeof manifest_magic);
    if (!e)
        e = st_bytes_put_le16(out, (uint16_t)version);
    if (!e)
        e = st_bytes_put_le16(out, 0); /* flags */
    if (!e)
        e = st_bytes_put_varint(out, m->step);
    if (!e)
        e = st_bytes_put_varint(out, zigzag_encode(m->created_ns));
    if (!e)
        e = st_bytes_put_str(out, m->node, strlen(m->node));
    if (!e)
        e = st_bytes_put_str(out, m->job, strlen(m->job));
    if (!e)
        e = st_bytes_put_varint(out, m->npacks);
    for (size_t i = 0; !e && i < m->npacks; i++)
        e = st_bytes_append(out, m->packs[i].b, ST_ID_LEN);
    if (!e)
        e = st_bytes_put_varint(out, m->nfiles);
    for (size_t i = 0; !e && i < m->nfiles; i++)
        e = put_file(out, &m->files[i], version);
    if (!e)
        e = st_bytes_put_le64(out, st_hash64(out->data + start, out->len - start));
    if (e)
        out->len = start; /* leave no half-written manifest behind */
    return e;
}

/* ---- decoder ---- */

/* Reads a count and refuses one that the bytes left could not hold. */
static int get_count(st_reader *r, size_t min_elem_len, size_t *count)
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

static int get_u32(st_reader *r, uint32_t *out)
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

static int get_zigzag(st_reader *r, int64_t *out)
{
    uint64_t v;
    if (st_get_varint(r, &v))
        return -1;
    *out = zigzag_decode(v);
    return 0;
}

/* Copies a length-prefixed string into a fresh NUL-terminated allocation. */
static st_err get_cstr(st_reader *r, size_t max_len, char **out, size_t *len)
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
    st_err e = get_cstr(r, ST_MANIFEST_MAX_NAME, out, &len);
    if (e == ST_ERR_NOMEM)
        return st_seterr(e, "manifest: out of memory");
    if (e)
        return st_seterr(e, "manifest: %s name truncated or too long", what);
    const char *why = check_name(*out, len);
    if (why)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %s name %s", what, why);
    return ST_OK;
}

/* Reads one chunk ref of a `version` manifest (the checks come after). */
static void get_chunk(st_reader *r, unsigned version, st_chunk_ref *c)
{
    const uint8_t *id;
    if (version >= 2) {
        uint64_t tag;
        if (st_get_varint(r, &tag))
            return;
        if (tag == 0) { /* a hole: only its length */
            c->pack = ST_CHUNK_HOLE;
            get_u32(r, &c->raw_len);
            return;
        }
        if (tag - 1 >= ST_CHUNK_HOLE) {
            r->err = 1;
            return;
        }
        c->pack = (uint32_t)(tag - 1);
    }
    st_get_bytes(r, ST_ID_LEN, &id);
    if (version < 2)
        get_u32(r, &c->pack); /* ST_CHUNK_HOLE here fails check_hole */
    st_get_varint(r, &c->offset);
    get_u32(r, &c->stored_len);
    get_u32(r, &c->raw_len);
    if (!r->err)
        memcpy(c->id.b, id, ST_ID_LEN);
}

static st_err get_file(st_reader *r, size_t index, size_t npacks, unsigned version,
                       st_file_entry *f)
{
    size_t path_len = 0;
    st_err e = get_cstr(r, ST_MANIFEST_MAX_PATH, &f->path, &path_len);
    if (e == ST_ERR_NOMEM)
        return st_seterr(e, "manifest: out of memory");
    if (e)
        return st_seterr(e, "manifest: file %zu path truncated or too long", index);

    uint64_t rank = 0;
    const uint8_t *digest;
    st_get_varint(r, &f->size);
    get_u32(r, &f->mode);
    get_zigzag(r, &f->mtime_ns);
    st_get_varint(r, &rank);
    st_get_bytes(r, ST_ID_LEN, &digest);
    get_count(r, version >= 2 ? MIN_EXTENT_V2 : MIN_CHUNK_LEN, &f->nchunks);
    if (r->err)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu header malformed", index);
    int64_t srank = zigzag_decode(rank);
    if (srank < -1 || srank > INT32_MAX)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu rank %lld out of range", index,
                         (long long)srank);
    f->rank = (int32_t)srank;
    memcpy(f->digest.b, digest, ST_ID_LEN);

    if (f->nchunks) {
        f->chunks = calloc(f->nchunks, sizeof *f->chunks);
        if (!f->chunks)
            return st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu chunks", f->nchunks);
    }
    for (size_t i = 0; i < f->nchunks; i++) {
        get_chunk(r, version, &f->chunks[i]);
        if (r->err)
            return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu chunk %zu malformed", index, i);
    }

    size_t bad_chunk = 0;
    const char *why = check_file(f, path_len, npacks, version, &bad_chunk);
    if (why)
        return st_seterr(ST_ERR_CORRUPT, "manifest: file %zu (chunk %zu): %s", index, bad_chunk,
                         why);
    return ST_OK;
}

/* Magic, checksum, then version: every version keeps the magic and the
 * trailing XXH3-64, so a flipped version byte reads as corruption, and an
 * intact newer manifest as unsupported. */
static st_err check_envelope(const uint8_t *buf, size_t len, unsigned *version_out)
{
    if (len < MANIFEST_HEADER_LEN + MANIFEST_SUM_LEN)
        return st_seterr(ST_ERR_CORRUPT, "manifest: %zu bytes is too short", len);
    if (memcmp(buf, manifest_magic, sizeof manifest_magic) != 0)
        return st_seterr(ST_ERR_CORRUPT, "manifest: bad magic");
    size_t body = len - MANIFEST_SUM_LEN;
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
    st_reader r;
    st_err e;
    unsigned version = 0;

    memset(m, 0, sizeof *m);
    if (!buf)
        return st_seterr(ST_ERR_CORRUPT, "manifest: no data");
    e = check_envelope(buf, len, &version);
    if (e)
        return e;
    st_reader_init(&r, buf + MANIFEST_HEADER_LEN, len - MANIFEST_HEADER_LEN - MANIFEST_SUM_LEN);

    st_get_varint(&r, &d.step);
    get_zigzag(&r, &d.created_ns);
    if (r.err) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: header malformed");
        goto out;
    }
    if ((e = get_name(&r, "node", &d.node)) || (e = get_name(&r, "job", &d.job)))
        goto out;

    if (get_count(&r, MIN_PACK_LEN, &d.npacks)) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: pack count malformed or too large");
        goto out;
    }
    if (d.npacks) {
        const uint8_t *ids;
        d.packs = malloc(d.npacks * sizeof *d.packs);
        if (!d.packs) {
            e = st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu packs", d.npacks);
            goto out;
        }
        st_get_bytes(&r, d.npacks * ST_ID_LEN, &ids); /* fits: count was capped */
        for (size_t i = 0; i < d.npacks; i++)
            memcpy(d.packs[i].b, ids + i * ST_ID_LEN, ST_ID_LEN);
    }

    if (get_count(&r, MIN_FILE_LEN, &d.nfiles)) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: file count malformed or too large");
        goto out;
    }
    if (d.nfiles) {
        /* calloc: st_manifest_free() can release a partly filled array. */
        d.files = calloc(d.nfiles, sizeof *d.files);
        if (!d.files) {
            e = st_seterr(ST_ERR_NOMEM, "manifest: out of memory for %zu files", d.nfiles);
            goto out;
        }
    }
    for (size_t i = 0; i < d.nfiles; i++) {
        if ((e = get_file(&r, i, d.npacks, version, &d.files[i])))
            goto out;
    }
    if (st_reader_left(&r) != 0) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: %zu unexpected bytes after the last file",
                      st_reader_left(&r));
        goto out;
    }
    /* The encoder writes version 1 unless a hole needs 2: one encoding each. */
    if (version >= 2 && !has_hole(&d)) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: version %u without a hole extent", version);
        goto out;
    }

    const char *dup = NULL, *what = NULL;
    int found = find_path_conflict(d.files, d.nfiles, &dup, &what);
    if (found < 0) {
        e = st_seterr(ST_ERR_NOMEM, "manifest: out of memory");
        goto out;
    }
    if (found > 0) {
        e = st_seterr(ST_ERR_CORRUPT, "manifest: %s %.200s", what, dup);
        goto out;
    }
    *m = d;
    return ST_OK;
out:
    st_manifest_free(&d);
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
    free(m->node);
    free(m->job);
    memset(m, 0, sizeof *m);
}
