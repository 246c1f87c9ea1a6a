/*
 * st_part — object key names and the part record codec. Pure functions, but
 * for the random lineage (st_part_new_lineage).
 */
#include "format/st_part.h"

#include "format/st_manifest.h"

#include <inttypes.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void st_default_node_name(char *out)
{
    char host[256] = "node";
    gethostname(host, sizeof host - 1);
    size_t n = 0;
    for (const char *p = host; *p && n < ST_NODE_MAX; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || (c == '.' && n > 0);
        out[n++] = ok ? c : '-';
    }
    out[n] = '\0';
    if (!st_name_is_valid(out, ST_NODE_MAX))
        strcpy(out, "node");
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

int st_key_parse_pack(const char *key, char *job, st_id *pack)
{
    static const char dir[] = "/packs/";
    const char *j = key + 5, *d = strstr(j, dir);
    if (strncmp(key, "jobs/", 5) || !d || d == j || (size_t)(d - j) > ST_JOB_MAX)
        return 0;
    const char *hh = d + sizeof dir - 1, *hex = hh + 3;
    char id[ST_ID_HEX_LEN + 1];
    if (strlen(hh) != 3 + ST_ID_HEX_LEN + 5 || hh[2] != '/' || strncmp(hh, hex, 2) ||
        strcmp(hex + ST_ID_HEX_LEN, ".pack"))
        return 0;
    memcpy(id, hex, ST_ID_HEX_LEN);
    id[ST_ID_HEX_LEN] = '\0';
    if (st_id_parse(id, pack))
        return 0;
    memcpy(job, j, (size_t)(d - j));
    job[d - j] = '\0';
    return st_name_is_valid(job, ST_JOB_MAX);
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

st_err st_key_part(char *out, size_t cap, const char *job, uint64_t step, const char *node)
{
    st_err e = check_job(job);
    if (e)
        return e;
    if (!st_name_is_valid(node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", node);
    return fit(snprintf(out, cap, "jobs/%s/steps/%020" PRIu64 "/nodes/%s.commit", job, step, node),
               cap);
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

int st_key_parse_part(const char *rest, char *node)
{
    static const char prefix[] = "nodes/", suffix[] = ".commit";
    size_t len = strlen(rest), pl = sizeof prefix - 1, sl = sizeof suffix - 1;
    if (len <= pl + sl || strncmp(rest, prefix, pl) || strcmp(rest + len - sl, suffix))
        return 0;
    size_t n = len - pl - sl;
    if (n > ST_NODE_MAX)
        return 0;
    memcpy(node, rest + pl, n);
    node[n] = '\0';
    return st_name_is_valid(node, ST_NODE_MAX);
}

#define PART_MAGIC         "CKs2"
#define PART_VERSION       2 /* no lineage */
#define PART_VERSION_LINE  3 /* with a lineage */
#define PART_FLAG_COMPLETE 1
#define PART_FLAG_COVERAGE 2

st_err st_part_encode(const st_part *p, st_bytes *out)
{
    if (!st_name_is_valid(p->job, ST_JOB_MAX) || !st_name_is_valid(p->node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job or node name in a part record");
    size_t start = out->len;
    uint16_t flags =
        (p->complete ? PART_FLAG_COMPLETE : 0) | (p->rank_coverage ? PART_FLAG_COVERAGE : 0);
    int lined = !st_part_lineage_is_zero(p);
    st_err e = st_bytes_append(out, PART_MAGIC, 4);
    if (!e)
        e = st_bytes_put_le16(out, lined ? PART_VERSION_LINE : PART_VERSION);
    if (!e)
        e = st_bytes_put_le16(out, flags);
    if (!e)
        e = st_bytes_put_varint(out, p->step);
    if (!e)
        e = st_bytes_put_varint(out, (uint64_t)p->created_ns);
    if (!e)
        e = st_bytes_put_str(out, p->job, strlen(p->job));
    if (!e)
        e = st_bytes_put_str(out, p->node, strlen(p->node));
    if (!e)
        e = st_bytes_put_varint(out, p->revision);
    if (!e)
        e = st_bytes_put_varint(out, p->manifest_len);
    if (!e)
        e = st_bytes_append(out, p->manifest_digest.b, ST_ID_LEN);
    if (!e)
        e = st_bytes_put_varint(out, p->world_size);
    if (!e)
        e = st_bytes_put_varint(out, p->nexpected);
    for (size_t i = 0; !e && i < p->nexpected; i++) {
        size_t n = strlen(p->expected[i]);
        if (!st_path_is_clean(p->expected[i], n))
            return st_seterr(ST_ERR_INVALID, "unclean expected path in a part record");
        e = st_bytes_put_str(out, p->expected[i], n);
    }
    if (!e)
        e = st_bytes_put_varint(out, p->ncommits);
    for (size_t i = 0; !e && i < p->ncommits; i++) {
        e = st_bytes_put_varint(out, p->commits[i].rank);
        if (!e)
            e = st_bytes_put_varint(out, p->commits[i].world_size);
    }
    if (!e && lined)
        e = st_bytes_append(out, p->lineage, ST_PART_LINEAGE_LEN);
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

static int get_u32(st_reader *r, uint32_t *v)
{
    uint64_t x;
    if (st_get_varint(r, &x) || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

st_err st_part_decode(const uint8_t *buf, size_t len, st_part *p)
{
    memset(p, 0, sizeof *p);
    if (len < 4 + 2 + 2 + 8 || memcmp(buf, PART_MAGIC, 4) != 0)
        return st_seterr(ST_ERR_CORRUPT, "not a part record");
    if (st_le64_get(buf + len - 8) != st_hash64(buf, len - 8))
        return st_seterr(ST_ERR_CORRUPT, "part record checksum mismatch");
    st_reader r;
    st_reader_init(&r, buf + 4, len - 4 - 8);
    uint16_t version, flags;
    uint64_t created, nexp, ncom;
    const uint8_t *d;
    st_get_le16(&r, &version);
    st_get_le16(&r, &flags);
    if (!r.err && version != PART_VERSION && version != PART_VERSION_LINE)
        return st_seterr(ST_ERR_UNSUPPORTED, "part record version %u is not supported", version);
    if (r.err || (flags & ~(PART_FLAG_COMPLETE | PART_FLAG_COVERAGE)) ||
        st_get_varint(&r, &p->step) || st_get_varint(&r, &created) ||
        get_name(&r, p->job, ST_JOB_MAX) || get_name(&r, p->node, ST_NODE_MAX) ||
        get_u32(&r, &p->revision) || st_get_varint(&r, &p->manifest_len) ||
        st_get_bytes(&r, ST_ID_LEN, &d) || get_u32(&r, &p->world_size) ||
        st_get_varint(&r, &nexp) || nexp > ST_PART_MAX_EXPECTED || nexp > st_reader_left(&r))
        goto corrupt;
    memcpy(p->manifest_digest.b, d, ST_ID_LEN);
    p->created_ns = (int64_t)created;
    p->complete = !!(flags & PART_FLAG_COMPLETE);
    p->rank_coverage = !!(flags & PART_FLAG_COVERAGE);
    if (nexp && !(p->expected = calloc(nexp, sizeof *p->expected)))
        goto nomem;
    for (; p->nexpected < nexp; p->nexpected++) {
        const uint8_t *s;
        size_t n;
        if (st_get_str(&r, ST_MANIFEST_MAX_PATH, &s, &n) || !st_path_is_clean((const char *)s, n))
            goto corrupt;
        if (!(p->expected[p->nexpected] = strndup((const char *)s, n)))
            goto nomem;
    }
    if (st_get_varint(&r, &ncom) || ncom > ST_PART_MAX_COMMITS || ncom > st_reader_left(&r))
        goto corrupt;
    if (ncom && !(p->commits = calloc(ncom, sizeof *p->commits)))
        goto nomem;
    for (; p->ncommits < ncom; p->ncommits++) {
        st_rank_commit *c = &p->commits[p->ncommits];
        if (get_u32(&r, &c->rank) || get_u32(&r, &c->world_size) || c->rank >= c->world_size)
            goto corrupt;
    }
    if (version == PART_VERSION_LINE) {
        const uint8_t *line;
        /* Written only when not zero: a zero one is version 2's. */
        if (st_get_bytes(&r, ST_PART_LINEAGE_LEN, &line))
            goto corrupt;
        memcpy(p->lineage, line, ST_PART_LINEAGE_LEN);
        if (st_part_lineage_is_zero(p))
            goto corrupt;
    }
    if (r.err || st_reader_left(&r) != 0)
        goto corrupt;
    return ST_OK;
corrupt:
    st_part_free(p);
    return st_seterr(ST_ERR_CORRUPT, "malformed part record");
nomem:
    st_part_free(p);
    return st_seterr(ST_ERR_NOMEM, "out of memory");
}

void st_part_free(st_part *p)
{
    for (size_t i = 0; i < p->nexpected; i++)
        free(p->expected[i]);
    free(p->expected);
    free(p->commits);
    memset(p, 0, sizeof *p);
}

int st_part_lineage_is_zero(const st_part *p)
{
    static const uint8_t zero[ST_PART_LINEAGE_LEN];
    return memcmp(p->lineage, zero, ST_PART_LINEAGE_LEN) == 0;
}

st_err st_part_new_lineage(st_part *p)
{
    do {
        if (RAND_bytes(p->lineage, ST_PART_LINEAGE_LEN) != 1)
            return st_seterr(ST_ERR_IO, "no random bytes for a part record's lineage");
    } while (st_part_lineage_is_zero(p));
    return ST_OK;
}

int st_key_parse_node_rev(const char *rest, const char *dir, const char *suffix, char *node,
                          uint32_t *rev)
{
    size_t len = strlen(rest), pl = strlen(dir), sl = strlen(suffix);
    if (len <= pl + sl || strncmp(rest, dir, pl) || strcmp(rest + len - sl, suffix))
        return 0;
    const char *end = rest + len - sl, *p = end;
    while (p > rest + pl && p[-1] >= '0' && p[-1] <= '9')
        p--;
    if (p == end || p - 2 < rest + pl || p[-1] != 'r' || p[-2] != '.')
        return 0;
    uint64_t v = 0;
    for (const char *q = p; q < end; q++)
        if ((v = v * 10 + (uint64_t)(*q - '0')) > UINT32_MAX)
            return 0;
    size_t n = (size_t)(p - 2 - (rest + pl));
    if (n == 0 || n > ST_NODE_MAX)
        return 0;
    memcpy(node, rest + pl, n);
    node[n] = '\0';
    *rev = (uint32_t)v;
    return 1;
}

int st_key_parse_manifest(const char *rest, char *node, uint32_t *rev)
{
    return st_key_parse_node_rev(rest, "nodes/", ".manifest", node, rev);
}

int st_part_supersedes(const st_part *a, const st_part *b)
{
    if (a->revision != b->revision)
        return a->revision > b->revision;
    return strcmp(a->node, b->node) > 0;
}
