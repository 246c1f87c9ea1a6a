/*
 * st_peer_server — the peer cache's HTTP side. See the header, and
 * docs/PEERS.md ("Transport") for the routes, headers and answers.
 *
 * A request's life in answer(): the first call has its headers only; the
 * route, the authentication and every refusal that needs no body are
 * decided there and answered at once (a client that sent Expect:
 * 100-continue then never sends the body). The PUTs then take their body
 * in pieces (a pack into a file of tmp/, hashed as it arrives; a part into
 * memory), and the last call, with no data, decides and answers.
 *
 * Channels: a hello makes a server nonce; the first request that proves the
 * secret with it binds it to that client nonce and node, and from then on
 * its counter must grow. The table is bounded (the least recently used
 * entry makes room) and an entry unused for ST_PEER_NONCE_TTL_NS of the
 * monotonic clock is forgotten. Guarded by `lock`, with the counters.
 */
#include "peer/st_peer_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "format/st_manifest.h"
#include "format/st_pack.h"
#include "format/st_part.h"
#include "peer/st_peer_cache.h"
#include "peer/st_peer_listing.h"
#include "peer/st_peer_seal.h"
#include "peer/st_peer_tls.h"
#include "peer/st_replica.h"
#include "util/st_fsutil.h"

#define CHANNELS_MAX         256
#define ST_PEER_NONCE_TTL_NS (60LL * 1000000000LL)
#define PART_BODY_MAX        (256u << 20) /* bytes of a PUT part: pack ids and manifest */
#define CONNECTION_LIMIT     64
#define CONNECTION_TIMEOUT_S 30

typedef struct channel {
    int used, bound;
    uint8_t server_nonce[ST_PEER_NONCE_LEN];
    uint8_t client_nonce[ST_PEER_NONCE_LEN]; /* bound: the only one accepted */
    char client_node[ST_NODE_MAX + 1];
    uint8_t key[ST_PEER_KEY_LEN];
    uint64_t last_counter;
    int64_t last_use_ns;
} channel;

struct st_peer_server {
    struct MHD_Daemon *daemon;
    int fd, port, ipv6;
    char node[ST_NODE_MAX + 1];
    char instance[33];
    char domain[ST_NODE_MAX + 1]; /* its failure domain, for writers choosing peers */
    st_peer_secret secret;
    st_peer_tls tls;           /* empty: plain HTTP; else HTTPS only, kept until stop */
    const st_keyring *keyring; /* NULL: none; sealed packs, manifests, records refused */
    st_peer_cache *cache;
    pthread_mutex_t lock;
    channel channels[CHANNELS_MAX];                     /* lock */
    uint64_t auth_refusals, packs_served, bytes_served; /* lock */
};

/* ---- addresses ---- */

/* "A.B.C.D:PORT" or "[V6]:PORT" into ss; 0, or -1 with the reason set. */
static st_err parse_listen(const char *spec, int listen_any, struct sockaddr_storage *ss,
                           socklen_t *len)
{
    const char *colon = spec ? strrchr(spec, ':') : NULL;
    char host[64];
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host)
        return st_seterr(ST_ERR_INVALID, "peer listen address '%s': wants ADDR:PORT",
                         spec ? spec : "");
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port > 65535)
        return st_seterr(ST_ERR_INVALID, "peer listen address '%s': wants a port 0..65535", spec);
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    size_t hl = strlen(host);
    int wildcard;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        wildcard = v4->sin_addr.s_addr == htonl(INADDR_ANY);
    } else if (hl > 2 && host[0] == '[' && host[hl - 1] == ']' &&
               (host[hl - 1] = '\0', inet_pton(AF_INET6, host + 1, &v6->sin6_addr) == 1)) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        const uint8_t *b = v6->sin6_addr.s6_addr;
        wildcard = IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr) ||
                   (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && !(b[12] | b[13] | b[14] | b[15]));
    } else {
        return st_seterr(ST_ERR_INVALID,
                         "peer listen address '%s': wants an IPv4 address or [IPv6] before the "
                         "port",
                         spec);
    }
    if (wildcard && !listen_any)
        return st_seterr(ST_ERR_INVALID,
                         "peer listen address '%s' is every interface: name this host's address "
                         "on the peers' network, or allow it with --peer-listen-any",
                         spec);
    return ST_OK;
}

static st_err bind_listen(st_peer_server *s, const st_peer_server_opts *o)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    st_err e = parse_listen(o->listen, o->listen_any, &ss, &len);
    if (e)
        return e;
    s->ipv6 = ss.ss_family == AF_INET6;
    s->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->fd, (struct sockaddr *)&ss, len) || listen(s->fd, CONNECTION_LIMIT))
        return st_seterr(ST_ERR_IO, "peer server: cannot listen on %s: %s", o->listen,
                         strerror(errno));
    len = sizeof ss;
    if (getsockname(s->fd, (struct sockaddr *)&ss, &len))
        return st_seterr(ST_ERR_IO, "peer server: getsockname: %s", strerror(errno));
    s->port = ntohs(s->ipv6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                            : ((struct sockaddr_in *)&ss)->sin_port);
    return ST_OK;
}

/* ---- routes ---- */

typedef enum route_kind {
    ROUTE_HELLO,
    ROUTE_PACK,
    ROUTE_PART,
    ROUTE_DURABLE,
    ROUTE_RECORD,
    ROUTE_REPLICAS
} route_kind;

typedef struct route {
    route_kind kind;
    st_id pack;
    char job[ST_JOB_MAX + 1], node[ST_NODE_MAX + 1];
    uint64_t step;
    uint32_t rev;
    int all_jobs; /* GET /v1/replicas without a job */
} route;

/* n decimal digits of p (1..20, no sign) at most max into *v; 0 or -1. */
static int parse_decimal(const char *p, size_t n, uint64_t max, uint64_t *v)
{
    if (n == 0 || n > 20)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || x > (UINT64_MAX - (uint64_t)(p[i] - '0')) / 10)
            return -1;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    if (x > max)
        return -1;
    *v = x;
    return 0;
}

/* Copies the component of n bytes at p into out if it is a valid name. */
static int take_name(const char *p, size_t n, size_t max, char *out)
{
    if (n == 0 || n > max)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return st_name_is_valid(out, max) ? 0 : -1;
}

/* <job>/<step>/<node>/<rev>, every component checked. 0 or -1. */
static int parse_part_path(const char *p, route *r)
{
    const char *comp[4];
    size_t len[4];
    for (int i = 0; i < 4; i++) {
        const char *slash = strchr(p, '/');
        comp[i] = p;
        len[i] = slash ? (size_t)(slash - p) : strlen(p);
        if ((i < 3) != (slash != NULL))
            return -1;
        p = slash ? slash + 1 : p;
    }
    uint64_t rev;
    if (take_name(comp[0], len[0], ST_JOB_MAX, r->job) ||
        parse_decimal(comp[1], len[1], UINT64_MAX, &r->step) ||
        take_name(comp[2], len[2], ST_NODE_MAX, r->node) ||
        parse_decimal(comp[3], len[3], UINT32_MAX, &rev))
        return -1;
    r->rev = (uint32_t)rev;
    return 0;
}

/* The route of url and whether method may use it: 0, or the HTTP status of
 * the refusal with *why. */
static unsigned parse_route(const char *url, const char *method, route *r, const char **why)
{
    static const struct {
        const char *prefix;
        route_kind kind;
        const char *methods;
    } table[] = {
        {"/v1/hello", ROUTE_HELLO, " GET "},        {"/v1/pack/", ROUTE_PACK, " HEAD GET PUT "},
        {"/v1/part/", ROUTE_PART, " GET PUT "},     {"/v1/durable/", ROUTE_DURABLE, " POST "},
        {"/v1/record/", ROUTE_RECORD, " GET PUT "}, {"/v1/replicas", ROUTE_REPLICAS, " GET "},
    };
    if (strlen(url) > ST_PEER_PATH_MAX) {
        *why = "path too long";
        return MHD_HTTP_BAD_REQUEST;
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        size_t n = strlen(table[i].prefix);
        int exact = table[i].kind == ROUTE_HELLO;
        if (exact ? strcmp(url, table[i].prefix) : strncmp(url, table[i].prefix, n))
            continue;
        char spaced[16];
        snprintf(spaced, sizeof spaced, " %s ", method);
        if (strlen(method) > 8 || !strstr(table[i].methods, spaced)) {
            *why = "method not allowed on this path";
            return MHD_HTTP_METHOD_NOT_ALLOWED;
        }
        r->kind = table[i].kind;
        int bad = 0;
        if (r->kind == ROUTE_PACK)
            bad = st_id_parse(url + n, &r->pack) || strlen(url + n) != ST_ID_HEX_LEN;
        else if (r->kind == ROUTE_REPLICAS)
            bad =
                !(r->all_jobs = !url[n]) &&
                (url[n] != '/' || take_name(url + n + 1, strlen(url + n + 1), ST_JOB_MAX, r->job));
        else if (r->kind != ROUTE_HELLO)
            bad = parse_part_path(url + n, r);
        if (bad) {
            *why = "malformed path: wants /v1/pack/<32 hex>, /v1/part|durable|record/<job>/<step>/"
                   "<node>/<rev> or /v1/replicas[/<job>], names of [A-Za-z0-9._-] not starting "
                   "with '.'";
            return MHD_HTTP_BAD_REQUEST;
        }
        return 0;
    }
    *why = "no such path";
    return MHD_HTTP_NOT_FOUND;
}

/* ---- channels ---- */

/* Forgets the entries unused for the nonce lifetime. Under lock. */
static void expire_channels(st_peer_server *s, int64_t now)
{
    for (int i = 0; i < CHANNELS_MAX; i++)
        if (s->channels[i].used && now - s->channels[i].last_use_ns >= ST_PEER_NONCE_TTL_NS)
            OPENSSL_cleanse(&s->channels[i], sizeof s->channels[i]);
}

/* A new server nonce in the table: its hex into out[65]. */
static st_err new_channel(st_peer_server *s, char *out)
{
    uint8_t nonce[ST_PEER_NONCE_LEN];
    if (RAND_bytes(nonce, sizeof nonce) != 1)
        return st_seterr(ST_ERR_IO, "peer server: no random bytes for a nonce");
    int64_t now = st_mono_ns();
    pthread_mutex_lock(&s->lock);
    expire_channels(s, now);
    channel *slot = &s->channels[0];
    for (int i = 0; i < CHANNELS_MAX && slot->used; i++)
        if (!s->channels[i].used || s->channels[i].last_use_ns < slot->last_use_ns)
            slot = &s->channels[i];
    OPENSSL_cleanse(slot, sizeof *slot);
    slot->used = 1;
    memcpy(slot->server_nonce, nonce, sizeof nonce);
    slot->last_use_ns = now;
    pthread_mutex_unlock(&s->lock);
    st_peer_hex(nonce, sizeof nonce, out);
    return ST_OK;
}

typedef struct auth_headers {
    uint8_t server_nonce[ST_PEER_NONCE_LEN], client_nonce[ST_PEER_NONCE_LEN];
    uint8_t mac[ST_PEER_KEY_LEN];
    const char *node;
    uint64_t counter;
    st_id body;
} auth_headers;

static int read_auth_headers(struct MHD_Connection *c, auth_headers *h)
{
    const char *sn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_SERVER_NONCE);
    const char *cn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_CLIENT_NONCE);
    const char *ctr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_COUNTER);
    const char *body = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_BODY);
    const char *mac = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_MAC);
    h->node = MHD_lookup_connection_value(c, MHD_HEADER_KIND, ST_PEER_HDR_NODE);
    return st_peer_unhex(sn, h->server_nonce, ST_PEER_NONCE_LEN) ||
           st_peer_unhex(cn, h->client_nonce, ST_PEER_NONCE_LEN) ||
           st_peer_unhex(mac, h->mac, ST_PEER_KEY_LEN) || !body || st_id_parse(body, &h->body) ||
           !ctr || parse_decimal(ctr, strlen(ctr), UINT64_MAX, &h->counter) || h->counter == 0 ||
           !h->node || !st_name_is_valid(h->node, ST_NODE_MAX);
}

/* Checks the request's MAC and counter: 0 (and *body the declared body id),
 * or -1 with *why the 401's body. */
static int authenticate(st_peer_server *s, struct MHD_Connection *c, const char *method,
                        const char *url, st_id *body, const char **why)
{
    auth_headers h;
    int bad_headers = read_auth_headers(c, &h);
    int64_t now = st_mono_ns();
    uint8_t key[ST_PEER_KEY_LEN], mac[ST_PEER_KEY_LEN];
    int rc = -1;
    pthread_mutex_lock(&s->lock);
    if (bad_headers) {
        *why = "missing or malformed authentication headers";
        goto out;
    }
    expire_channels(s, now);
    channel *ch = NULL;
    for (int i = 0; i < CHANNELS_MAX && !ch; i++)
        if (s->channels[i].used &&
            !CRYPTO_memcmp(s->channels[i].server_nonce, h.server_nonce, ST_PEER_NONCE_LEN))
            ch = &s->channels[i];
    if (!ch || (ch->bound && (CRYPTO_memcmp(ch->client_nonce, h.client_nonce, ST_PEER_NONCE_LEN) ||
                              strcmp(ch->client_node, h.node)))) {
        *why = "unknown or expired server nonce: say hello again";
        goto out;
    }
    if (ch->bound)
        memcpy(key, ch->key, sizeof key);
    else if (st_peer_key_derive(&s->secret, h.server_nonce, h.client_nonce, h.node, s->node, key))
        goto out;
    if (st_peer_mac(key, h.counter, method, url, &h.body, mac) ||
        CRYPTO_memcmp(mac, h.mac, sizeof mac)) {
        *why = ST_PEER_WRONG_SECRET;
        goto out;
    }
    if (h.counter <= ch->last_counter) {
        *why = "replayed request: its counter is not above the last one seen";
        goto out;
    }
    if (!ch->bound) {
        ch->bound = 1;
        memcpy(ch->client_nonce, h.client_nonce, ST_PEER_NONCE_LEN);
        snprintf(ch->client_node, sizeof ch->client_node, "%s", h.node);
        memcpy(ch->key, key, sizeof key);
    }
    ch->last_counter = h.counter;
    ch->last_use_ns = now;
    *body = h.body;
    rc = 0;
out:
    if (rc)
        s->auth_refusals++;
    pthread_mutex_unlock(&s->lock);
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* ---- answers ---- */

typedef struct peer_req {
    route rt;
    int answered;      /* a response is queued: later calls only drain */
    st_id body_id;     /* the body's XXH3-128, as the MAC covers it */
    int fd;            /* PUT pack: the body in tmp/ */
    char tmp_name[64]; /* its name there */
    st_hasher hasher;  /* PUT pack: the body's id as it arrives */
    int hashing;       /* hasher initialised */
    uint64_t got;      /* body bytes taken */
    st_bytes body;     /* PUT part: the body */
    unsigned failed;   /* an HTTP status decided while taking the body, else 0 */
    const char *why;   /* its message */
} peer_req;

static enum MHD_Result reply(struct MHD_Connection *c, peer_req *q, unsigned status,
                             const char *text)
{
    q->answered = 1;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* A reply whose text is the store's error detail, by class. */
static enum MHD_Result reply_err(struct MHD_Connection *c, peer_req *q, st_err e)
{
    unsigned status = e == ST_ERR_NOT_FOUND                    ? MHD_HTTP_NOT_FOUND
                      : e == ST_ERR_NOSPACE                    ? MHD_HTTP_INSUFFICIENT_STORAGE
                      : e == ST_ERR_CORRUPT || e == ST_ERR_KEY ? MHD_HTTP_UNPROCESSABLE_CONTENT
                                                               : MHD_HTTP_INTERNAL_SERVER_ERROR;
    char text[600];
    snprintf(text, sizeof text, "%s%s", e == ST_ERR_NOSPACE ? "peer cache full: " : "",
             st_errmsg());
    return reply(c, q, status, text);
}

static enum MHD_Result reply_hello(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    char nonce[2 * ST_PEER_NONCE_LEN + 1], text[600], key[2 * ST_KEY_ID_LEN + 1];
    if (new_channel(s, nonce))
        return reply_err(c, q, ST_ERR_IO);
    const st_key *k = s->keyring ? st_keyring_sealing(s->keyring) : NULL;
    if (k)
        st_key_id_hex(k->id, key);
    /* The key id says which key this peer checks sealed bytes with, and
     * nothing of the key (docs/ENCRYPTION.md, "Cipher and keys"). */
    snprintf(text, sizeof text, "%s\nnode %s\ninstance %s\nnonce %s\ndomain %s\n%s%s%s",
             ST_PEER_PROTOCOL, s->node, s->instance, nonce, s->domain, k ? "key " : "",
             k ? key : "", k ? "\n" : "");
    return reply(c, q, MHD_HTTP_OK, text);
}

static enum MHD_Result reply_pack(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    int fd;
    uint64_t size;
    st_err e = st_peer_cache_open_pack(s->cache, &q->rt.pack, &fd, &size);
    if (e)
        return reply_err(c, q, e);
    struct MHD_Response *r = MHD_create_response_from_fd(size, fd); /* closes fd */
    if (!r) {
        close(fd);
        return MHD_NO;
    }
    q->answered = 1;
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&s->lock);
    s->packs_served++;
    s->bytes_served += size;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static st_peer_part_name part_of(const route *rt)
{
    return (st_peer_part_name){rt->job, rt->step, rt->node, rt->rev};
}

/* Answers 200 with m's bytes (taken), or the error e. */
static enum MHD_Result reply_bytes(struct MHD_Connection *c, peer_req *q, st_err e, st_bytes m)
{
    if (e) {
        st_bytes_free(&m);
        return reply_err(c, q, e);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(m.len, m.data, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        st_bytes_free(&m);
        return MHD_NO;
    }
    q->answered = 1;
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* GET part or record: the replica's manifest or its record. */
static enum MHD_Result reply_part_object(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    st_peer_part_name p = part_of(&q->rt);
    st_bytes m = {0};
    st_err e = q->rt.kind == ROUTE_RECORD ? st_peer_cache_get_record(s->cache, &p, &m)
                                          : st_peer_cache_get_part(s->cache, &p, &m);
    return reply_bytes(c, q, e, m);
}

/* GET /v1/replicas[/<job>]: the listing of st_peer_listing.h. */
static enum MHD_Result reply_replicas(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    st_peer_listed *items = malloc(ST_PEER_LISTING_MAX * sizeof *items);
    st_bytes m = {0};
    size_t n = 0;
    int truncated = 0;
    st_err e = items ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e)
        e = st_peer_cache_list_replicas(s->cache, q->rt.all_jobs ? NULL : q->rt.job, items,
                                        ST_PEER_LISTING_MAX, &n, &truncated);
    if (!e)
        e = st_peer_listing_encode(items, n, truncated, &m);
    free(items);
    return reply_bytes(c, q, e, m);
}

/* The Content-Length of a PUT, which must have one of at most max bytes:
 * 0, or the refusal's status with *why. */
static unsigned body_length(struct MHD_Connection *c, uint64_t max, uint64_t *len, const char **why)
{
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl || parse_decimal(cl, strlen(cl), UINT64_MAX, len)) {
        *why = "a body needs a Content-Length";
        return MHD_HTTP_LENGTH_REQUIRED;
    }
    if (*len > max) {
        *why = "body too large";
        return MHD_HTTP_CONTENT_TOO_LARGE;
    }
    return 0;
}

/* The first call of a request: its headers. Answers now, or prepares to
 * take the body. */
static enum MHD_Result begin(st_peer_server *s, struct MHD_Connection *c, const char *url,
                             const char *method, peer_req *q)
{
    const char *why = NULL;
    unsigned status = parse_route(url, method, &q->rt, &why);
    if (status)
        return reply(c, q, status, why);
    if (q->rt.kind == ROUTE_HELLO)
        return reply_hello(s, c, q);
    if (authenticate(s, c, method, url, &q->body_id, &why))
        return reply(c, q, MHD_HTTP_UNAUTHORIZED, why);
    int put = !strcmp(method, MHD_HTTP_METHOD_PUT);
    uint64_t len = 0;
    st_peer_part_name p = part_of(&q->rt);
    switch (q->rt.kind) {
    case ROUTE_HELLO: break;
    case ROUTE_PACK:
        if (!put) {
            if (!strcmp(method, MHD_HTTP_METHOD_GET))
                return reply_pack(s, c, q);
            int has = st_peer_cache_has_pack(s->cache, &q->rt.pack);
            return reply(c, q, has ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, "");
        }
        if ((status = body_length(c, ST_PACK_MAX_SIZE, &len, &why)))
            return reply(c, q, status, why);
        if (st_peer_cache_has_pack(s->cache, &q->rt.pack))
            return reply(c, q, MHD_HTTP_OK, "already held");
        if (st_peer_cache_could_fit(s->cache, len))
            return reply(c, q, MHD_HTTP_INSUFFICIENT_STORAGE, "peer cache full");
        if (st_hasher_init(&q->hasher))
            return reply_err(c, q, st_seterr(ST_ERR_NOMEM, "out of memory"));
        q->hashing = 1;
        if (st_peer_cache_tmp_create(s->cache, &q->fd, q->tmp_name))
            return reply_err(c, q, ST_ERR_IO);
        return MHD_YES;
    case ROUTE_PART:
        if (!put)
            return reply_part_object(s, c, q);
        if ((status = body_length(c, PART_BODY_MAX, &len, &why)))
            return reply(c, q, status, why);
        return MHD_YES;
    case ROUTE_REPLICAS: return reply_replicas(s, c, q);
    case ROUTE_RECORD:
        if (!put)
            return reply_part_object(s, c, q);
        if ((status = body_length(c, PART_BODY_MAX, &len, &why)))
            return reply(c, q, status, why);
        return MHD_YES;
    case ROUTE_DURABLE: {
        st_err e = st_peer_cache_mark_durable(s->cache, &p);
        return e ? reply_err(c, q, e) : reply(c, q, MHD_HTTP_OK, "durable");
    }
    }
    return reply(c, q, MHD_HTTP_INTERNAL_SERVER_ERROR, "unknown route");
}

/* One piece of a PUT's body. */
static void take_body(peer_req *q, const char *data, size_t len)
{
    q->got += len;
    if (q->failed)
        return;
    if (q->rt.kind == ROUTE_PACK) {
        st_hasher_update(&q->hasher, data, len);
        st_err e = st_write_all(q->fd, data, len, q->tmp_name);
        if (e) {
            q->failed = e == ST_ERR_NOSPACE ? MHD_HTTP_INSUFFICIENT_STORAGE
                                            : MHD_HTTP_INTERNAL_SERVER_ERROR;
            q->why = e == ST_ERR_NOSPACE ? "peer cache full: its disk is" : "cannot write";
        }
    } else if (st_bytes_append(&q->body, data, len)) {
        q->failed = MHD_HTTP_INTERNAL_SERVER_ERROR;
        q->why = "out of memory";
    }
}

static enum MHD_Result finish_pack(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    st_id got = st_hasher_final(&q->hasher);
    if (st_id_cmp(&got, &q->body_id))
        return reply(c, q, MHD_HTTP_BAD_REQUEST, "body does not match " ST_PEER_HDR_BODY);
    if (st_id_cmp(&got, &q->rt.pack)) {
        st_peer_cache_count_corrupt(s->cache);
        return reply(c, q, MHD_HTTP_UNPROCESSABLE_CONTENT,
                     "pack refused: its bytes do not hash to its id");
    }
    int was_held = 0;
    st_err e =
        st_peer_cache_admit_pack(s->cache, &q->rt.pack, q->tmp_name, q->fd, q->got, &was_held);
    q->tmp_name[0] = '\0'; /* admitted or removed */
    if (e)
        return reply_err(c, q, e);
    return reply(c, q, was_held ? MHD_HTTP_OK : MHD_HTTP_CREATED,
                 was_held ? "already held" : "stored");
}

/* The body of PUT part: LE32 count, count pack ids, the manifest. Checks
 * it against the route; 0, or the refusal's status with *why. */
static unsigned check_part_body(const st_peer_server *s, const peer_req *q, const st_id **ids,
                                uint32_t *n, const uint8_t **manifest, size_t *manifest_len,
                                const char **why)
{
    const st_bytes *b = &q->body;
    if (b->len < 4 || st_le32_get(b->data) > (b->len - 4) / ST_ID_LEN) {
        *why = "malformed body: wants a LE32 count, that many 16-byte pack ids, the manifest";
        return MHD_HTTP_BAD_REQUEST;
    }
    *n = st_le32_get(b->data);
    *ids = (const st_id *)(b->data + 4);
    *manifest = b->data + 4 + (size_t)*n * ST_ID_LEN;
    *manifest_len = b->len - 4 - (size_t)*n * ST_ID_LEN;
    st_manifest m = {0};
    st_bytes plain = {0};
    char name[ST_KEY_MAX];
    st_err e = st_key_manifest(name, sizeof name, q->rt.job, q->rt.step, q->rt.node, q->rt.rev);
    if (!e && (e = st_peer_open(s->keyring, ST_CRYPT_MANIFEST, name, *manifest, *manifest_len,
                                &plain)) == ST_ERR_KEY) {
        st_bytes_free(&plain);
        *why = "manifest refused: it is sealed and this peer holds no key of its key id "
               "(--encryption-key-file)";
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    }
    if (e || st_manifest_decode(plain.data, plain.len, &m)) {
        st_bytes_free(&plain);
        *why = "manifest refused: it does not decode";
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    }
    st_bytes_free(&plain);
    unsigned status = 0;
    if (m.step != q->rt.step || strcmp(m.job, q->rt.job) || strcmp(m.node, q->rt.node)) {
        *why = "manifest refused: its job, step or node is not the path's";
        status = MHD_HTTP_UNPROCESSABLE_CONTENT;
    }
    for (uint32_t i = 0; !status && i < *n; i++) {
        int listed = 0;
        for (size_t j = 0; !listed && j < m.npacks; j++)
            listed = !memcmp(m.packs[j].b, (*ids)[i].b, ST_ID_LEN);
        if (!listed) {
            *why = "a pack id sent is not one the manifest references";
            status = MHD_HTTP_UNPROCESSABLE_CONTENT;
        }
    }
    st_manifest_free(&m);
    return status;
}

static enum MHD_Result finish_part(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    st_id got = st_id_of(q->body.data, q->body.len);
    if (st_id_cmp(&got, &q->body_id))
        return reply(c, q, MHD_HTTP_BAD_REQUEST, "body does not match " ST_PEER_HDR_BODY);
    const st_id *ids;
    uint32_t n = 0;
    const uint8_t *manifest;
    size_t manifest_len;
    const char *why = NULL;
    unsigned status = check_part_body(s, q, &ids, &n, &manifest, &manifest_len, &why);
    if (status)
        return reply(c, q, status, why);
    /* The ids may sit at any alignment in the body: copied. */
    st_id *packs = n ? malloc((size_t)n * sizeof *packs) : NULL;
    if (n && !packs)
        return reply(c, q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    if (n)
        memcpy(packs, ids, (size_t)n * sizeof *packs);
    st_peer_part_name p = part_of(&q->rt);
    st_err e = st_peer_cache_put_part(s->cache, &p, packs, n, manifest, manifest_len);
    free(packs);
    if (e == ST_ERR_NOT_FOUND)
        return reply(c, q, MHD_HTTP_CONFLICT, st_errmsg());
    return e ? reply_err(c, q, e) : reply(c, q, MHD_HTTP_CREATED, "stored");
}

/* The plaintext of the replica's held manifest into *out: opened when
 * sealed. ST_OK, ST_ERR_NOT_FOUND, ST_ERR_KEY, ST_ERR_CORRUPT. */
static st_err held_manifest(const st_peer_server *s, const peer_req *q, st_bytes *out)
{
    st_peer_part_name p = part_of(&q->rt);
    char name[ST_KEY_MAX];
    st_bytes held = {0};
    st_err e = st_peer_cache_get_part(s->cache, &p, &held);
    if (!e)
        e = st_key_manifest(name, sizeof name, q->rt.job, q->rt.step, q->rt.node, q->rt.rev);
    if (!e)
        e = st_peer_open(s->keyring, ST_CRYPT_MANIFEST, name, held.data, held.len, out);
    st_bytes_free(&held);
    return e;
}

/* Why the PUT record's body cannot be kept, or NULL: it does not open
 * (when sealed: under the replica record's own name) or decode, or is of
 * another part. On NULL *rec, *part hold it decoded (free them either way). */
static const char *check_record(const st_peer_server *s, const peer_req *q, st_replica *rec,
                                st_part *part)
{
    char name[ST_KEY_MAX];
    st_bytes plain = {0};
    const char *why = NULL;
    if (st_key_replica(name, sizeof name, q->rt.job, q->rt.step, q->rt.node, q->rt.rev) ||
        st_peer_open(s->keyring, ST_CRYPT_REPLICA, name, q->body.data, q->body.len, &plain))
        why = "record refused: it does not open under this peer's keys";
    else if (st_replica_decode(plain.data, plain.len, rec, part))
        why = "record refused: it does not decode";
    else if (rec->revision != q->rt.rev || part->step != q->rt.step ||
             strcmp(part->job, q->rt.job) || strcmp(part->node, q->rt.node))
        why = "record refused: its job, step, node or revision is not the path's";
    st_bytes_free(&plain);
    return why;
}

/* PUT record: the replica record of a replica held here, whose manifest is
 * byte for byte the one held (docs/PEERS.md, "Restoring from peers alone");
 * both opened first when sealed, and the record kept as it came. */
static enum MHD_Result finish_record(st_peer_server *s, struct MHD_Connection *c, peer_req *q)
{
    st_id got = st_id_of(q->body.data, q->body.len);
    if (st_id_cmp(&got, &q->body_id))
        return reply(c, q, MHD_HTTP_BAD_REQUEST, "body does not match " ST_PEER_HDR_BODY);
    st_peer_part_name p = part_of(&q->rt);
    st_replica rec = {0};
    st_part part = {0};
    st_bytes held = {0};
    st_err e = ST_OK;
    const char *why = check_record(s, q, &rec, &part);
    if (!why && !(e = held_manifest(s, q, &held)) &&
        (held.len != rec.manifest.len || memcmp(held.data, rec.manifest.data, held.len)))
        why = "record refused: its manifest is not the replica's held here";
    if (!why && !e)
        e = st_peer_cache_put_record(s->cache, &p, q->body.data, q->body.len);
    st_bytes_free(&held);
    st_part_free(&part);
    st_replica_free(&rec);
    if (why)
        return reply(c, q, MHD_HTTP_UNPROCESSABLE_CONTENT, why);
    return e ? reply_err(c, q, e) : reply(c, q, MHD_HTTP_CREATED, "stored");
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    (void)version;
    st_peer_server *s = cls;
    peer_req *q = *req_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q)))
            return MHD_NO;
        q->fd = -1;
        *req_cls = q;
        return begin(s, c, url, method, q);
    }
    if (*upload_data_size) {
        if (!q->answered)
            take_body(q, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (q->answered)
        return MHD_YES;
    if (q->failed)
        return reply(c, q, q->failed, q->why);
    switch (q->rt.kind) {
    case ROUTE_PACK: return finish_pack(s, c, q);
    case ROUTE_RECORD: return finish_record(s, c, q);
    default: return finish_part(s, c, q);
    }
}

static void request_done(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    st_peer_server *s = cls;
    peer_req *q = *req_cls;
    if (!q)
        return;
    if (q->fd >= 0)
        close(q->fd);
    if (q->tmp_name[0])
        st_peer_cache_tmp_remove(s->cache, q->tmp_name);
    if (q->hashing)
        st_hasher_free(&q->hasher);
    st_bytes_free(&q->body);
    free(q);
    *req_cls = NULL;
}

/* ---- life ---- */

/* The certificate and key of --peer-tls-cert/--peer-tls-key, once this
 * libmicrohttpd is known to speak TLS (Debian's is built with GnuTLS). */
static st_err load_tls(st_peer_server *s, const st_peer_server_opts *o)
{
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return st_seterr(ST_ERR_UNSUPPORTED,
                         "peer server: this libmicrohttpd is built without TLS (--peer-tls-cert)");
    return st_peer_tls_load(o->tls_cert_file, o->tls_key_file, &s->tls);
}

st_err st_peer_server_start(const st_peer_server_opts *o, st_peer_server **out)
{
    *out = NULL;
    if (!o->node || !st_name_is_valid(o->node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "peer server: invalid node name '%.64s'",
                         o->node ? o->node : "");
    if (o->failure_domain && !st_name_is_valid(o->failure_domain, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID,
                         "invalid failure domain '%.64s': use A-Z a-z 0-9 . _ -, at most %d",
                         o->failure_domain, ST_NODE_MAX);
    if (!o->secret || o->secret->len < ST_PEER_SECRET_MIN || o->secret->len > ST_PEER_SECRET_MAX)
        return st_seterr(ST_ERR_INVALID, "peer server: no cluster secret");
    if (!o->dir)
        return st_seterr(ST_ERR_INVALID, "peer server: no peer directory");
    st_peer_server *s = calloc(1, sizeof *s);
    if (!s)
        return st_seterr(ST_ERR_NOMEM, "peer server: out of memory");
    s->fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    snprintf(s->node, sizeof s->node, "%s", o->node);
    snprintf(s->domain, sizeof s->domain, "%s", o->failure_domain ? o->failure_domain : o->node);
    s->secret = *o->secret;
    uint8_t instance[16];
    st_err e = ST_OK;
    if (RAND_bytes(instance, sizeof instance) != 1)
        e = st_seterr(ST_ERR_IO, "peer server: no random bytes");
    if (!e) {
        st_peer_hex(instance, sizeof instance, s->instance);
        e = bind_listen(s, o);
    }
    if (!e && (o->tls_cert_file || o->tls_key_file))
        e = load_tls(s, o);
    if (!e)
        e = st_peer_cache_open(o->dir, o->cache_cap, o->orphan_grace_ns, &s->cache);
    if (!e) {
        s->keyring = o->keyring;
        st_peer_cache_set_keyring(s->cache, o->keyring);
    }
    if (!e) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | (s->ipv6 ? MHD_USE_IPv6 : 0) |
                         (s->tls.cert ? MHD_USE_TLS : 0);
        /* Without TLS the certificate and key options are left out: the
         * first MHD_OPTION_END ends the list there. */
        s->daemon =
            MHD_start_daemon(flags, 0, NULL, NULL, answer, s, MHD_OPTION_LISTEN_SOCKET, s->fd,
                             MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                             s->tls.cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, s->tls.cert,
                             MHD_OPTION_HTTPS_MEM_KEY, s->tls.key, MHD_OPTION_END);
        if (!s->daemon)
            e = st_seterr(ST_ERR_IO, "peer server: cannot start serving%s on %s (libmicrohttpd)",
                          s->tls.cert ? " TLS" : "", o->listen);
        else
            s->fd = -1; /* the server's now: MHD_stop_daemon closes it */
    }
    if (e) {
        st_peer_server_stop(s);
        return e;
    }
    *out = s;
    return ST_OK;
}

int st_peer_server_port(const st_peer_server *s)
{
    return s->port;
}

void st_peer_server_get_stats(st_peer_server *s, st_peer_server_stats *out)
{
    st_peer_cache_stats c;
    st_peer_cache_get_stats(s->cache, &c);
    pthread_mutex_lock(&s->lock);
    *out = (st_peer_server_stats){.cache_bytes = c.bytes,
                                  .cache_cap = c.cap,
                                  .replicas_held = c.replicas,
                                  .packs_held = c.packs,
                                  .packs_received = c.packs_received,
                                  .bytes_received = c.bytes_received,
                                  .evictions = c.evictions,
                                  .refusals_full = c.refusals_full,
                                  .auth_refusals = s->auth_refusals,
                                  .corrupt_refused = c.corrupt_refused,
                                  .packs_served = s->packs_served,
                                  .bytes_served = s->bytes_served};
    pthread_mutex_unlock(&s->lock);
}

void st_peer_server_stop(st_peer_server *s)
{
    if (!s)
        return;
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    if (s->fd >= 0)
        close(s->fd);
    st_peer_cache_close(s->cache);
    st_peer_tls_free(&s->tls);
    pthread_mutex_destroy(&s->lock);
    OPENSSL_cleanse(s, sizeof *s);
    free(s);
}

st_peer_cache *st_peer_server_cache(st_peer_server *s)
{
    return s->cache;
}
