/*
 * st_peer_listing — encoder and decoder of GET /v1/replicas's body
 * (st_peer_listing.h). The decoder takes only the canonical form the
 * encoder writes, so a listing that decodes re-encodes to its own bytes
 * (the fuzz target checks it); it reads no byte past len.
 */
#include "peer/st_peer_listing.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_array.h"

#define HEADER "ckptfs-peer-replicas v1\n"

size_t st_peer_listing_bound(size_t n)
{
    return sizeof HEADER + n * ST_PEER_LISTING_LINE_MAX + 64;
}

static int item_is_valid(const st_peer_listed *it)
{
    return st_name_is_valid(it->job, ST_JOB_MAX) && st_name_is_valid(it->node, ST_NODE_MAX) &&
           it->manifest_len > 0 && it->manifest_len <= ST_PEER_LISTING_OBJECT_MAX &&
           it->record_len <= ST_PEER_LISTING_OBJECT_MAX;
}

st_err st_peer_listing_encode(const st_peer_listed *items, size_t n, int truncated, st_bytes *out)
{
    if (n > ST_PEER_LISTING_MAX)
        return st_seterr(ST_ERR_INVALID, "a listing holds at most %d replicas",
                         ST_PEER_LISTING_MAX);
    st_err e = st_bytes_append(out, HEADER, sizeof HEADER - 1);
    for (size_t i = 0; i < n && !e; i++) {
        const st_peer_listed *it = &items[i];
        if (!item_is_valid(it))
            return st_seterr(ST_ERR_INVALID, "replica %zu of the listing is malformed", i);
        char hex[ST_ID_HEX_LEN + 1], line[ST_PEER_LISTING_LINE_MAX + 1];
        int k = snprintf(line, sizeof line,
                         "replica %s %" PRIu64 " %s %" PRIu32 " %s %s %" PRIu64 " %" PRIu64 "\n",
                         it->job, it->step, it->node, it->rev, it->durable ? "durable" : "held",
                         st_id_hex(&it->manifest_id, hex), it->manifest_len, it->record_len);
        e = st_bytes_append(out, line, (size_t)k);
    }
    if (!e) {
        char end[64];
        int k = snprintf(end, sizeof end, "end %zu %s\n", n, truncated ? "truncated" : "complete");
        e = st_bytes_append(out, end, (size_t)k);
    }
    return e;
}

/* ---- decoding: a cursor over the body ---- */

typedef struct cursor {
    const char *p, *end;
} cursor;

/* The next field: up to a space or '\n' (not consumed). */
static size_t field_len(const cursor *c)
{
    const char *q = c->p;
    while (q < c->end && *q != ' ' && *q != '\n')
        q++;
    return (size_t)(q - c->p);
}

/* Consumes the separator sep (' ' or '\n'); 0 or -1. */
static int take_sep(cursor *c, char sep)
{
    if (c->p >= c->end || *c->p != sep)
        return -1;
    c->p++;
    return 0;
}

static int take_word(cursor *c, const char *word)
{
    size_t n = field_len(c);
    if (n != strlen(word) || memcmp(c->p, word, n))
        return -1;
    c->p += n;
    return 0;
}

/* A canonical decimal of at most max. */
static int take_decimal(cursor *c, uint64_t max, uint64_t *v)
{
    size_t n = field_len(c);
    if (n == 0 || n > 20 || (n > 1 && c->p[0] == '0'))
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(c->p[i] - '0');
        if (d > 9 || x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    if (x > max)
        return -1;
    c->p += n;
    *v = x;
    return 0;
}

static int take_name(cursor *c, size_t max, char *out)
{
    size_t n = field_len(c);
    if (n == 0 || n > max)
        return -1;
    memcpy(out, c->p, n);
    out[n] = '\0';
    if (strlen(out) != n || !st_name_is_valid(out, max)) /* a NUL would cut the name short */
        return -1;
    c->p += n;
    return 0;
}

static int take_id(cursor *c, st_id *id)
{
    char hex[ST_ID_HEX_LEN + 1], again[ST_ID_HEX_LEN + 1];
    if (field_len(c) != ST_ID_HEX_LEN)
        return -1;
    memcpy(hex, c->p, ST_ID_HEX_LEN);
    hex[ST_ID_HEX_LEN] = '\0';
    /* lower-case hex only: the form st_id_hex writes */
    if (st_id_parse(hex, id) || strcmp(st_id_hex(id, again), hex))
        return -1;
    c->p += ST_ID_HEX_LEN;
    return 0;
}

static int take_item(cursor *c, st_peer_listed *it)
{
    uint64_t rev;
    if (take_sep(c, ' ') || take_name(c, ST_JOB_MAX, it->job) || take_sep(c, ' ') ||
        take_decimal(c, UINT64_MAX, &it->step) || take_sep(c, ' ') ||
        take_name(c, ST_NODE_MAX, it->node) || take_sep(c, ' ') ||
        take_decimal(c, UINT32_MAX, &rev) || take_sep(c, ' '))
        return -1;
    it->rev = (uint32_t)rev;
    if (!take_word(c, "durable"))
        it->durable = 1;
    else if (take_word(c, "held"))
        return -1;
    if (take_sep(c, ' ') || take_id(c, &it->manifest_id) || take_sep(c, ' ') ||
        take_decimal(c, ST_PEER_LISTING_OBJECT_MAX, &it->manifest_len) || take_sep(c, ' ') ||
        take_decimal(c, ST_PEER_LISTING_OBJECT_MAX, &it->record_len) || take_sep(c, '\n'))
        return -1;
    return it->manifest_len ? 0 : -1;
}

st_err st_peer_listing_decode(const uint8_t *buf, size_t len, st_peer_listing *l)
{
    memset(l, 0, sizeof *l);
    if (len < sizeof HEADER - 1 || len > st_peer_listing_bound(ST_PEER_LISTING_MAX) ||
        memcmp(buf, HEADER, sizeof HEADER - 1))
        return st_seterr(ST_ERR_CORRUPT, "peer listing: not a ckptfs-peer-replicas v1 body");
    cursor c = {(const char *)buf + sizeof HEADER - 1, (const char *)buf + len};
    size_t cap = 0;
    st_err e = ST_OK;
    while (!e && !take_word(&c, "replica")) {
        if (l->n == ST_PEER_LISTING_MAX) {
            e = st_seterr(ST_ERR_CORRUPT, "peer listing: more than %d replicas",
                          ST_PEER_LISTING_MAX);
            break;
        }
        if (st_array_grow((void **)&l->items, &cap, l->n + 1, sizeof *l->items)) {
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
            break;
        }
        memset(&l->items[l->n], 0, sizeof l->items[l->n]);
        if (take_item(&c, &l->items[l->n]))
            e = st_seterr(ST_ERR_CORRUPT, "peer listing: replica line %zu is malformed", l->n + 1);
        else
            l->n++;
    }
    uint64_t count;
    if (!e && (take_word(&c, "end") || take_sep(&c, ' ') ||
               take_decimal(&c, ST_PEER_LISTING_MAX, &count) || count != l->n || take_sep(&c, ' ')))
        e = st_seterr(ST_ERR_CORRUPT, "peer listing: no end line that counts its replicas");
    if (!e) {
        if (!take_word(&c, "truncated"))
            l->truncated = 1;
        else if (take_word(&c, "complete"))
            e = st_seterr(ST_ERR_CORRUPT, "peer listing: end line is malformed");
    }
    if (!e && (take_sep(&c, '\n') || c.p != c.end))
        e = st_seterr(ST_ERR_CORRUPT, "peer listing: bytes after its end line");
    if (e)
        st_peer_listing_free(l);
    return e;
}

void st_peer_listing_free(st_peer_listing *l)
{
    free(l->items);
    memset(l, 0, sizeof *l);
}
