/*
 * st_gcmark — keys and encodings of the objects GC writes (st_gcmark.h,
 * docs/GC.md). Pure functions; no I/O, no state.
 */
#include "format/st_gcmark.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_part.h"
#include "util/st_array.h"

#define MARKER_MAGIC  "ckptfs-gc-pending v1"
#define RETIRED_MAGIC "ckptfs-gc-retired v1"
#define INTENT_MAGIC  "ckptfs-gc-deleting v1"

st_err st_key_job_dir(char *out, size_t cap, const char *job, const char *what)
{
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    int n = snprintf(out, cap, "jobs/%s/%s/", job, what);
    return n < 0 || (size_t)n >= cap ? ST_ERR_INVALID : ST_OK;
}

/* "jobs/<job>/<what>/<packid>" */
static st_err key_pack_marker(char *out, size_t cap, const char *job, const char *what,
                              const st_id *pack)
{
    char hex[ST_ID_HEX_LEN + 1];
    st_err e = st_key_job_dir(out, cap, job, what);
    if (e)
        return e;
    size_t len = strlen(out);
    int n = snprintf(out + len, cap - len, "%s", st_id_hex(pack, hex));
    return n < 0 || (size_t)n >= cap - len ? ST_ERR_INVALID : ST_OK;
}

st_err st_key_gc_pending(char *out, size_t cap, const char *job, const st_id *pack)
{
    return key_pack_marker(out, cap, job, "gc/pending", pack);
}

st_err st_key_gc_retired_prefix(char *out, size_t cap, const char *job)
{
    return st_key_job_dir(out, cap, job, "gc/retired");
}

st_err st_key_gc_retired(char *out, size_t cap, const char *job, const st_id *pack)
{
    return key_pack_marker(out, cap, job, "gc/retired", pack);
}

st_err st_key_gc_fence(char *out, size_t cap, const char *job, int64_t t0_ns, int64_t until_ns,
                       uint64_t nonce)
{
    st_err e = st_key_job_dir(out, cap, job, "gc/compacting");
    if (e)
        return e;
    if (t0_ns < 0 || until_ns < t0_ns)
        return st_seterr(ST_ERR_INVALID, "fence times out of range");
    size_t len = strlen(out);
    int n = snprintf(out + len, cap - len, "%020" PRId64 "-%020" PRId64 "-%016" PRIx64, t0_ns,
                     until_ns, nonce);
    return n < 0 || (size_t)n >= cap - len ? ST_ERR_INVALID : ST_OK;
}

/* Parses exactly 20 decimal digits at s into *v. */
static int parse_stamp20(const char *s, int64_t *v)
{
    if (strspn(s, "0123456789") < 20)
        return -1;
    char digits[21];
    memcpy(digits, s, 20);
    digits[20] = '\0';
    unsigned long long u = strtoull(digits, NULL, 10);
    if (u > INT64_MAX)
        return -1;
    *v = (int64_t)u;
    return 0;
}

st_err st_gcmark_fence_parse(const char *name, int64_t *t0_ns, int64_t *until_ns)
{
    /* <20 digits>-<20 digits>-<16 hex digits>, nothing after */
    if (strlen(name) != 20 + 1 + 20 + 1 + 16 || name[20] != '-' || name[41] != '-' ||
        strspn(name + 42, "0123456789abcdef") != 16 || parse_stamp20(name, t0_ns) ||
        parse_stamp20(name + 21, until_ns) || *until_ns < *t0_ns)
        return ST_ERR_CORRUPT;
    return ST_OK;
}

st_err st_key_pin(char *out, size_t cap, const char *job, uint64_t step)
{
    st_err e = st_key_job_dir(out, cap, job, "pins");
    if (e)
        return e;
    size_t len = strlen(out);
    int n = snprintf(out + len, cap - len, "%020" PRIu64, step);
    return n < 0 || (size_t)n >= cap - len ? ST_ERR_INVALID : ST_OK;
}

st_err st_gcmark_pending_decode(const void *buf, size_t len, int64_t *marked_ns, int64_t *grace_ns)
{
    char text[128];
    if (len >= sizeof text)
        return st_seterr(ST_ERR_CORRUPT, "GC marker too long");
    memcpy(text, buf, len);
    text[len] = '\0';
    long long m, g;
    char magic[32], tail;
    if (sscanf(text, "%31s v1 %lld %lld%c", magic, &m, &g, &tail) != 4 || tail != '\n' ||
        strncmp(text, MARKER_MAGIC " ", sizeof MARKER_MAGIC) || m < 0 || g < 0)
        return st_seterr(ST_ERR_CORRUPT, "not a GC marker");
    *marked_ns = m;
    *grace_ns = g;
    return ST_OK;
}

st_err st_gcmark_pending_encode(char *out, size_t cap, int64_t marked_ns, int64_t grace_ns,
                                size_t *len)
{
    int n =
        snprintf(out, cap, MARKER_MAGIC " %lld %lld\n", (long long)marked_ns, (long long)grace_ns);
    if (n < 0 || (size_t)n >= cap)
        return st_seterr(ST_ERR_INVALID, "GC marker does not fit");
    *len = (size_t)n;
    return ST_OK;
}

st_err st_gcmark_retired_encode(char *out, size_t cap, int64_t t0_ns, uint64_t live, uint64_t size,
                                size_t *len)
{
    int n = snprintf(out, cap, RETIRED_MAGIC " %lld %" PRIu64 " %" PRIu64 "\n", (long long)t0_ns,
                     live, size);
    if (n < 0 || (size_t)n >= cap)
        return st_seterr(ST_ERR_INVALID, "retire marker does not fit");
    *len = (size_t)n;
    return ST_OK;
}

st_err st_gcmark_intent_encode(int64_t t0_ns, const uint64_t *steps, size_t n, st_bytes *out)
{
    char line[48];
    int len = snprintf(line, sizeof line, INTENT_MAGIC " %lld\n", (long long)t0_ns);
    st_err e = st_bytes_append(out, line, (size_t)len);
    for (size_t i = 0; i < n && !e; i++) {
        len = snprintf(line, sizeof line, "%" PRIu64 "\n", steps[i]);
        e = st_bytes_append(out, line, (size_t)len);
    }
    return e;
}

st_err st_gcmark_intent_decode(const void *buf, size_t len, int64_t *t0_ns, uint64_t **steps,
                               size_t *n)
{
    char *text = malloc(len + 1), *p, *end;
    size_t cap = 0;
    *steps = NULL;
    *n = 0;
    if (!text)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    memcpy(text, buf, len);
    text[len] = '\0';
    end = text;
    st_err e = ST_OK;
    if (strncmp(text, INTENT_MAGIC " ", sizeof INTENT_MAGIC) ||
        (*t0_ns = strtoll(text + sizeof INTENT_MAGIC, &end, 10)) < 0 || *end != '\n')
        e = st_seterr(ST_ERR_CORRUPT, "not a GC intent");
    for (p = end + 1; !e && *p; p = end + 1) {
        uint64_t step = strtoull(p, &end, 10);
        if (end == p || *end != '\n')
            e = st_seterr(ST_ERR_CORRUPT, "not a GC intent");
        else if (st_array_grow((void **)steps, &cap, *n + 1, sizeof **steps))
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
        else
            (*steps)[(*n)++] = step;
    }
    free(text);
    return e;
}
