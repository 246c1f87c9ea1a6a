/*
 * st_replica — the replica record (st_replica.h; docs/PEERS.md).
 */
#include "peer/st_replica.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/st_backend.h"
#include "util/st_hash.h"

static const uint8_t replica_magic[4] = {'C', 'K', 'R', '1'};

st_err st_key_replica(char *out, size_t cap, const char *job, uint64_t step, const char *node,
                      uint32_t revision)
{
    char prefix[ST_KEY_MAX];
    st_err e = st_key_step_prefix(prefix, sizeof prefix, job, step);
    if (e)
        return e;
    if (!st_name_is_valid(node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", node);
    int n = snprintf(out, cap, "%sreplicas/%s.r%" PRIu32, prefix, node, revision);
    if (n < 0 || (size_t)n >= cap)
        return st_seterr(ST_ERR_INVALID, "key too long");
    return ST_OK;
}

int st_key_parse_replica(const char *rest, char *node, uint32_t *revision)
{
    return st_key_parse_node_rev(rest, "replicas/", "", node, revision);
}

st_err st_replica_encode(const st_replica *r, st_bytes *out)
{
    st_bytes_clear(out);
    st_err e = st_bytes_append(out, replica_magic, sizeof replica_magic);
    if (!e)
        e = st_bytes_put_varint(out, r->revision);
    if (!e)
        e = st_bytes_put_str(out, r->part.data, r->part.len);
    if (!e)
        e = st_bytes_put_str(out, r->manifest.data, r->manifest.len);
    if (!e)
        e = st_bytes_put_varint(out, r->nholders);
    for (size_t i = 0; !e && i < r->nholders; i++) {
        e = st_bytes_put_str(out, r->holders[i].node, strlen(r->holders[i].node));
        if (!e)
            e = st_bytes_put_str(out, r->holders[i].addr, strlen(r->holders[i].addr));
    }
    if (!e)
        e = st_bytes_put_le64(out, st_hash64(out->data, out->len));
    return e;
}

/* A string of 1..max bytes, copied NUL-terminated into out: with name, a
 * node name (st_name_is_valid); else an address, printable without spaces. */
static int get_text(st_reader *rd, char *out, size_t max, int name)
{
    const uint8_t *s;
    size_t n;
    if (st_get_str(rd, max, &s, &n) || n == 0)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    if (memchr(out, '\0', n))
        return -1;
    if (name)
        return st_name_is_valid(out, max) ? 0 : -1;
    for (size_t i = 0; i < n; i++) /* an address: printable, no spaces */
        if (out[i] <= ' ' || out[i] > '~')
            return -1;
    return 0;
}

static st_err corrupt(st_replica *r, const char *why)
{
    st_replica_free(r);
    return st_seterr(ST_ERR_CORRUPT, "replica record: %s", why);
}

st_err st_replica_decode(const uint8_t *buf, size_t len, st_replica *r, st_part *part_out)
{
    memset(r, 0, sizeof *r);
    if (len < sizeof replica_magic + 8 || memcmp(buf, replica_magic, sizeof replica_magic))
        return corrupt(r, "not a replica record");
    if (st_hash64(buf, len - 8) != st_le64_get(buf + len - 8))
        return corrupt(r, "checksum mismatch");
    st_reader rd;
    st_reader_init(&rd, buf + sizeof replica_magic, len - sizeof replica_magic - 8);
    uint64_t rev = 0, nholders = 0;
    const uint8_t *part, *man;
    size_t part_len, man_len;
    if (st_get_varint(&rd, &rev) || rev > UINT32_MAX ||
        st_get_str(&rd, SIZE_MAX, &part, &part_len) || st_get_str(&rd, SIZE_MAX, &man, &man_len) ||
        st_get_varint(&rd, &nholders) || nholders == 0 || nholders > ST_REPLICA_MAX_HOLDERS)
        return corrupt(r, "malformed header");
    r->revision = (uint32_t)rev;
    for (size_t i = 0; i < nholders; i++)
        if (get_text(&rd, r->holders[i].node, ST_NODE_MAX, 1) ||
            get_text(&rd, r->holders[i].addr, ST_PEER_ADDR_MAX, 0))
            return corrupt(r, "malformed holder");
    r->nholders = (size_t)nholders;
    if (rd.err || st_reader_left(&rd))
        return corrupt(r, "trailing bytes");
    st_part p;
    st_err e = st_part_decode(part, part_len, &p);
    if (e)
        return corrupt(r, "its part record does not decode");
    st_id digest = st_id_of(man, man_len);
    int agrees = p.revision == r->revision && p.manifest_len == man_len &&
                 !st_id_cmp(&p.manifest_digest, &digest);
    if (!agrees) {
        st_part_free(&p);
        return corrupt(r, "its part record does not name its manifest");
    }
    if ((e = st_bytes_append(&r->part, part, part_len)) ||
        (e = st_bytes_append(&r->manifest, man, man_len))) {
        st_part_free(&p);
        st_replica_free(r);
        return e;
    }
    if (part_out)
        *part_out = p;
    else
        st_part_free(&p);
    return ST_OK;
}

void st_replica_free(st_replica *r)
{
    st_bytes_free(&r->part);
    st_bytes_free(&r->manifest);
    memset(r, 0, sizeof *r);
}
