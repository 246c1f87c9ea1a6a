/*
 * st_step — object key names and the commit record codec. Pure functions.
 */
#include "st_step.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMMIT_MAGIC "CKs1"
#define COMMIT_VERSION 1

int st_name_is_valid(const char *name, size_t max)
{
    size_t n = strlen(name);
    if (n == 0 || n > max || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static st_err check_job(const char *job)
{
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID,
                         "invalid job name '%.64s': use 1-%d characters of A-Z a-z 0-9 . _ -, "
                         "not starting with '.'",
                         job, ST_JOB_MAX);
    return ST_OK;
}

static st_err fit(int n, size_t cap)
{
    if (n < 0 || (size_t)n >= cap)
        return st_seterr(ST_ERR_INVALID, "object key too long");
    return ST_OK;
}

st_err st_key_pack(char *out, size_t cap, const char *job, const st_id *pack)
{
    char hex[ST_ID_HEX_LEN + 1];
    st_err e = check_job(job);
    if (e)
        return e;
    st_id_hex(pack, hex);
    return fit(snprintf(out, cap, "jobs/%s/packs/%.2s/%s.pack", job, hex, hex), cap);
}

st_err st_key_steps_prefix(char *out, size_t cap, const char *job)
{
    st_err e = check_job(job);
    return e ? e : fit(snprintf(out, cap, "jobs/%s/steps/", job), cap);
}

st_err st_key_step_prefix(char *out, size_t cap, const char *job, uint64_t step)
{
    st_err e = check_job(job);
    return e ? e : fit(snprintf(out, cap, "jobs/%s/steps/%020" PRIu64 "/", job, step), cap);
}

st_err st_key_manifest(char *out, size_t cap, const char *job, uint64_t step, const char *node,
                       uint32_t revision)
{
    st_err e = check_job(job);
    if (e)
        return e;
    if (!st_name_is_valid(node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", node);
    return fit(snprintf(out, cap, "jobs/%s/steps/%020" PRIu64 "/nodes/%s.r%" PRIu32 ".manifest",
                        job, step, node, revision),
               cap);
}

st_err st_key_commit(char *out, size_t cap, const char *job, uint64_t step)
{
    st_err e = check_job(job);
    return e ? e : fit(snprintf(out, cap, "jobs/%s/steps/%020" PRIu64 "/commit", job, step), cap);
}

st_err st_key_parse_step(const char *key, const char *job, uint64_t *step, const char **rest)
{
    char prefix[ST_JOB_MAX + 32];
    st_err e = st_key_steps_prefix(prefix, sizeof prefix, job);
    if (e)
        return e;
    size_t plen = strlen(prefix);
    if (strncmp(key, prefix, plen) != 0)
        return ST_ERR_INVALID;
    const char *p = key + plen;
    uint64_t v = 0;
    for (int i = 0; i < ST_STEP_DIGITS; i++) {
        if (p[i] < '0' || p[i] > '9')
            return ST_ERR_INVALID;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return ST_ERR_INVALID;
        v = v * 10 + d;
    }
    if (p[ST_STEP_DIGITS] != '/')
        return ST_ERR_INVALID;
    *step = v;
    *rest = p + ST_STEP_DIGITS + 1;
    return ST_OK;
}

st_err st_commit_encode(const st_commit *c, st_bytes *out)
{
    if (check_job(c->job))
        return ST_ERR_INVALID;
    size_t start = out->len;
    st_err e = st_bytes_append(out, COMMIT_MAGIC, 4);
    if (!e)
        e = st_bytes_put_le16(out, COMMIT_VERSION);
    if (!e)
        e = st_bytes_put_le16(out, 0);
    if (!e)
        e = st_bytes_put_varint(out, c->step);
    if (!e)
        e = st_bytes_put_varint(out, (uint64_t)c->created_ns);
    if (!e)
        e = st_bytes_put_str(out, c->job, strlen(c->job));
    if (!e)
        e = st_bytes_put_varint(out, c->nnodes);
    for (size_t i = 0; !e && i < c->nnodes; i++) {
        const st_commit_node *n = &c->nodes[i];
        if (!st_name_is_valid(n->name, ST_NODE_MAX))
            return st_seterr(ST_ERR_INVALID, "invalid node name in commit record");
        e = st_bytes_put_str(out, n->name, strlen(n->name));
        if (!e)
            e = st_bytes_put_varint(out, n->revision);
        if (!e)
            e = st_bytes_put_varint(out, n->manifest_len);
        if (!e)
            e = st_bytes_append(out, n->manifest_digest.b, ST_ID_LEN);
    }
    if (!e)
        e = st_bytes_put_le64(out, st_hash64(out->data + start, out->len - start));
    return e;
}

/* Copies a length-prefixed name into dst (max bytes) and validates it. */
static int get_name(st_reader *r, char *dst, size_t max)
{
    const uint8_t *p;
    size_t n;
    if (st_get_str(r, max, &p, &n))
        return -1;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return st_name_is_valid(dst, max) ? 0 : -1;
}

st_err st_commit_decode(const uint8_t *buf, size_t len, st_commit *c)
{
    memset(c, 0, sizeof *c);
    if (len < 4 + 2 + 2 + 8 || memcmp(buf, COMMIT_MAGIC, 4) != 0)
        return st_seterr(ST_ERR_CORRUPT, "not a commit record");
    if (st_le64_get(buf + len - 8) != st_hash64(buf, len - 8))
        return st_seterr(ST_ERR_CORRUPT, "commit record checksum mismatch");
    st_reader r;
    st_reader_init(&r, buf + 4, len - 4 - 8);
    uint16_t version, flags;
    uint64_t step, created, nnodes;
    st_get_le16(&r, &version);
    st_get_le16(&r, &flags);
    if (!r.err && version != COMMIT_VERSION)
        return st_seterr(ST_ERR_UNSUPPORTED, "commit record version %u is not supported", version);
    st_get_varint(&r, &step);
    st_get_varint(&r, &created);
    if (r.err || get_name(&r, c->job, ST_JOB_MAX) || st_get_varint(&r, &nnodes) ||
        nnodes > ST_STEP_MAX_NODES || nnodes > st_reader_left(&r) / (2 + 1 + 1 + ST_ID_LEN))
        goto corrupt;
    c->nodes = calloc(nnodes ? nnodes : 1, sizeof *c->nodes);
    if (!c->nodes)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nnodes; i++) {
        const uint8_t *d;
        uint64_t revision;
        st_commit_node *n = &c->nodes[i];
        if (get_name(&r, n->name, ST_NODE_MAX) || st_get_varint(&r, &revision) ||
            revision > UINT32_MAX || st_get_varint(&r, &n->manifest_len) ||
            st_get_bytes(&r, ST_ID_LEN, &d))
            goto corrupt;
        n->revision = (uint32_t)revision;
        memcpy(n->manifest_digest.b, d, ST_ID_LEN);
    }
    if (r.err || st_reader_left(&r) != 0)
        goto corrupt;
    c->step = step;
    c->created_ns = (int64_t)created;
    c->nnodes = nnodes;
    return ST_OK;
corrupt:
    st_commit_free(c);
    return st_seterr(ST_ERR_CORRUPT, "malformed commit record");
}

void st_commit_free(st_commit *c)
{
    free(c->nodes);
    memset(c, 0, sizeof *c);
}
