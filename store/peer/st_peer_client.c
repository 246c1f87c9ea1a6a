/*
 * st_peer_client — the asking side of the peer transport, on libcurl. See
 * the header, and docs/PEERS.md ("Transport") for the wire.
 *
 * One easy handle per client keeps its connection alive between requests;
 * `lock` makes the calls on one client run one at a time, which also keeps
 * the channel's counter in the order the peer sees the requests. Guarded
 * by lock: the easy handle, the channel (key, nonces, counter) and the
 * peer's name.
 */
#include "peer/st_peer_client.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_pack.h"
#include "format/st_part.h"
#include "util/st_fsutil.h"

#define ADDR_MAX    256
#define TEXT_MAX    512                 /* bytes of a refusal's body kept for the message */
#define PART_MAX    (256u << 20)        /* bytes of a manifest fetched */
#define REHELLO_NS  (50LL * 1000000000) /* idle time after which the nonce may be gone */
#define EXPECT_FROM (1u << 20)          /* bodies from this size wait for 100 Continue */
#define MS          1000000LL

/* The scheme that makes a peer's address a TLS one (docs/PEERS.md,
 * "Transport security"); an address without it is plain HTTP. */
#define TLS_SCHEME "https://"

struct st_peer_client {
    char addr[ADDR_MAX];   /* as given: "HOST:PORT" or "https://HOST:PORT" */
    const char *host_port; /* into addr, past the scheme */
    int tls;
    char self[ST_NODE_MAX + 1];
    st_peer_secret secret;
    uint64_t rate;
    pthread_mutex_t lock;
    CURL *easy;                   /* lock */
    int keyed;                    /* lock: key and nonces are a live channel */
    uint8_t key[ST_PEER_KEY_LEN]; /* lock */
    uint8_t server_nonce[ST_PEER_NONCE_LEN], client_nonce[ST_PEER_NONCE_LEN]; /* lock */
    uint64_t counter;                     /* lock: of the last signed request */
    int64_t last_use_ns;                  /* lock: monotonic */
    char peer_node[ST_NODE_MAX + 1];      /* lock: "" before the first hello */
    char peer_domain[ST_NODE_MAX + 1];    /* lock: its failure domain (its node name if unsaid) */
    char peer_key[2 * ST_KEY_ID_LEN + 1]; /* lock: its sealing key's id, hex; "": none said */
};

/* One request and what came back. */
typedef struct peer_call {
    st_peer_client *c;
    const char *what; /* for messages: "put pack 0123…" */
    const char *method;
    char path[ST_PEER_PATH_MAX + 1];
    const uint8_t *body;
    size_t body_len;
    const st_id *body_id; /* NULL: computed */
    int sign;
    st_bytes *out; /* 2xx body (NULL: dropped) */
    uint64_t out_max;
    char text[TEXT_MAX + 1]; /* other bodies, printable bytes only */
    size_t text_len;
    long status; /* of the last status line seen */
    int overflow, nomem, timed_out;
    int64_t start_ns, last_move_ns, sent_ns;
    uint64_t moved, seen; /* bytes received; and with those sent, at the last look */
    CURLcode cc;
    char errbuf[CURL_ERROR_SIZE];
} peer_call;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status;

static void curl_init_once(void)
{
    curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The peer's name for messages: its node name once known, else its address. */
static const char *peer_name(const st_peer_client *c)
{
    return c->peer_node[0] ? c->peer_node : c->addr;
}

/* ---- callbacks ---- */

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    peer_call *k = arg;
    size_t len = size * n;
    int st;
    k->moved += len;
    if (len > 9 && !strncmp(buf, "HTTP/", 5) && sscanf(buf, "HTTP/%*s %d", &st) == 1) {
        k->status = st; /* also after a 100 Continue */
        k->text_len = 0;
    }
    return len;
}

static size_t on_data(char *buf, size_t size, size_t n, void *arg)
{
    peer_call *k = arg;
    size_t len = size * n;
    k->moved += len;
    if (k->status / 100 == 2 && k->out) {
        if ((uint64_t)k->out->len + len > k->out_max) {
            k->overflow = 1;
            return 0;
        }
        if (st_bytes_append(k->out, buf, len)) {
            k->nomem = 1;
            return 0;
        }
        return len;
    }
    for (size_t i = 0; i < len && k->text_len < TEXT_MAX; i++)
        k->text[k->text_len++] = buf[i] >= ' ' && buf[i] < 127 ? buf[i] : ' ';
    k->text[k->text_len] = '\0';
    return len;
}

/* The clocks: the answer's first byte, and no byte moved either way. */
static int on_progress(void *arg, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total,
                       curl_off_t ul_now)
{
    (void)dl_total;
    (void)dl_now;
    (void)ul_total;
    peer_call *k = arg;
    int64_t now = st_mono_ns();
    uint64_t moved = k->moved + (uint64_t)ul_now;
    if (moved != k->seen || !k->last_move_ns) {
        k->seen = moved;
        k->last_move_ns = now;
    }
    if (!k->sent_ns && (uint64_t)ul_now >= k->body_len)
        k->sent_ns = now;
    /* A large body (a pack) waits for the peer's verification and fsync:
     * the stall bound after it, not the first-byte bound. */
    int64_t first_byte = k->body_len >= EXPECT_FROM ? ST_PEER_STALL_MS : ST_PEER_FIRST_BYTE_MS;
    if ((!k->status && k->sent_ns && now - k->sent_ns > first_byte * MS) ||
        now - k->last_move_ns > ST_PEER_STALL_MS * MS) {
        k->timed_out = 1;
        return 1;
    }
    return 0;
}

/* ---- one request ---- */

/* The channel's headers of a signed request into *hdr. */
static st_err sign(peer_call *k, struct curl_slist **hdr)
{
    st_peer_client *c = k->c;
    st_id body_id = k->body_id ? *k->body_id : st_id_of(k->body, k->body_len);
    uint8_t mac[ST_PEER_KEY_LEN];
    uint64_t counter = ++c->counter;
    st_err e = st_peer_mac(c->key, counter, k->method, k->path, &body_id, mac);
    if (e)
        return e;
    char line[ST_NODE_MAX + 80], hex[2 * ST_PEER_KEY_LEN + 1];
    const struct {
        const char *name;
        const uint8_t *bytes;
        size_t n;
    } bin[] = {{ST_PEER_HDR_SERVER_NONCE, c->server_nonce, ST_PEER_NONCE_LEN},
               {ST_PEER_HDR_CLIENT_NONCE, c->client_nonce, ST_PEER_NONCE_LEN},
               {ST_PEER_HDR_BODY, body_id.b, ST_ID_LEN},
               {ST_PEER_HDR_MAC, mac, ST_PEER_KEY_LEN}};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        st_peer_hex(bin[i].bytes, bin[i].n, hex);
        snprintf(line, sizeof line, "%s: %s", bin[i].name, hex);
        struct curl_slist *h = curl_slist_append(*hdr, line);
        if (!h)
            return st_seterr(ST_ERR_NOMEM, "peer client: out of memory");
        *hdr = h;
    }
    snprintf(line, sizeof line, "%s: %s", ST_PEER_HDR_NODE, c->self);
    struct curl_slist *h = curl_slist_append(*hdr, line);
    snprintf(line, sizeof line, "%s: %" PRIu64, ST_PEER_HDR_COUNTER, counter);
    if (h)
        *hdr = h, h = curl_slist_append(*hdr, line);
    if (!h)
        return st_seterr(ST_ERR_NOMEM, "peer client: out of memory");
    *hdr = h;
    return ST_OK;
}

/* TLS to the peer: its certificate must chain to the CA file given (else
 * the system's store) and name the host of its address. */
static void set_tls(const st_peer_client *c, CURL *x)
{
    curl_easy_setopt(x, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(x, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->secret.ca_file[0]) {
        curl_easy_setopt(x, CURLOPT_CAINFO, c->secret.ca_file);
        curl_easy_setopt(x, CURLOPT_CAPATH, NULL); /* that CA alone */
    }
}

/* The error of a transfer libcurl ended: a certificate the CA does not
 * vouch for is ST_ERR_AUTH (the peer did not prove who it is), a CA file
 * that cannot be used ST_ERR_INVALID, anything else ST_ERR_TRANSIENT, with
 * a hint when the two ends disagree on TLS. */
static st_err transfer_error(const peer_call *k)
{
    const st_peer_client *c = k->c;
    const char *why = k->errbuf[0] ? k->errbuf : curl_easy_strerror(k->cc);
    const char *ca = c->secret.ca_file[0] ? c->secret.ca_file : "the system's CA store";
    switch (k->cc) {
    case CURLE_PEER_FAILED_VERIFICATION:
        return st_seterr(ST_ERR_AUTH,
                         "peer at %s: %s: TLS certificate refused: not signed by a CA of %s, or "
                         "not for this address (%s)",
                         c->addr, k->what, ca, why);
    case CURLE_SSL_CACERT_BADFILE:
        return st_seterr(ST_ERR_INVALID, "peer at %s: %s: the CA file %s cannot be used (%s)",
                         c->addr, k->what, ca, why);
    case CURLE_SSL_CONNECT_ERROR:
        return st_seterr(ST_ERR_TRANSIENT,
                         "peer at %s: %s: TLS handshake failed (%s); a peer that serves plain "
                         "HTTP is named HOST:PORT, without https://",
                         c->addr, k->what, why);
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
        if (!c->tls)
            return st_seterr(ST_ERR_TRANSIENT,
                             "peer at %s: %s: %s; a peer that serves TLS only (--peer-tls-cert) "
                             "drops plain HTTP: name it https://%s",
                             c->addr, k->what, why, c->host_port);
        break;
    default: break;
    }
    return st_seterr(ST_ERR_TRANSIENT, "peer %s at %s: %s: %s", peer_name(c), c->addr, k->what,
                     why);
}

/* Sends k once; k->cc and k->status say how it ended. */
static st_err perform(peer_call *k)
{
    st_peer_client *c = k->c;
    struct curl_slist *hdr = NULL;
    st_err e = k->sign ? sign(k, &hdr) : ST_OK;
    const char *fixed[] = {k->body_len >= EXPECT_FROM ? "Expect: 100-continue" : "Expect:",
                           "Content-Type: application/octet-stream"};
    for (size_t i = 0; !e && i < sizeof fixed / sizeof fixed[0]; i++) {
        struct curl_slist *h = curl_slist_append(hdr, fixed[i]);
        if (!h)
            e = st_seterr(ST_ERR_NOMEM, "peer client: out of memory");
        else
            hdr = h;
    }
    char url[ADDR_MAX + ST_PEER_PATH_MAX + 16];
    snprintf(url, sizeof url, "%s://%s%s", c->tls ? "https" : "http", c->host_port, k->path);
    CURL *x = c->easy;
    if (!e) {
        curl_easy_reset(x); /* keeps the live connection */
        curl_easy_setopt(x, CURLOPT_URL, url);
        curl_easy_setopt(x, CURLOPT_PATH_AS_IS, 1L);
        curl_easy_setopt(x, CURLOPT_PROTOCOLS_STR, c->tls ? "https" : "http");
        if (c->tls)
            set_tls(c, x);
        curl_easy_setopt(x, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(x, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(x, CURLOPT_CONNECTTIMEOUT_MS, (long)ST_PEER_CONNECT_MS);
        curl_easy_setopt(x, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(x, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(x, CURLOPT_HEADERDATA, k);
        curl_easy_setopt(x, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(x, CURLOPT_WRITEDATA, k);
        curl_easy_setopt(x, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(x, CURLOPT_XFERINFODATA, k);
        curl_easy_setopt(x, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(x, CURLOPT_ERRORBUFFER, k->errbuf);
        if (!strcmp(k->method, "HEAD")) {
            curl_easy_setopt(x, CURLOPT_NOBODY, 1L);
        } else if (!strcmp(k->method, "GET")) {
            curl_easy_setopt(x, CURLOPT_HTTPGET, 1L);
        } else {
            curl_easy_setopt(x, CURLOPT_CUSTOMREQUEST, k->method);
            curl_easy_setopt(x, CURLOPT_POSTFIELDS, k->body_len ? (const char *)k->body : "");
            curl_easy_setopt(x, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)k->body_len);
        }
        if (c->rate)
            curl_easy_setopt(x, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)c->rate);
        k->start_ns = st_mono_ns();
        k->cc = curl_easy_perform(x);
        if (k->cc == CURLE_OK)
            curl_easy_getinfo(x, CURLINFO_RESPONSE_CODE, &k->status);
        c->last_use_ns = st_mono_ns();
    }
    curl_slist_free_all(hdr);
    if (e)
        return e;
    if (k->nomem || k->cc == CURLE_OUT_OF_MEMORY)
        return st_seterr(ST_ERR_NOMEM, "peer %s at %s: %s: out of memory", peer_name(c), c->addr,
                         k->what);
    if (k->overflow)
        return st_seterr(ST_ERR_CORRUPT, "peer %s at %s: %s: answer longer than %" PRIu64 " bytes",
                         peer_name(c), c->addr, k->what, k->out_max);
    if (k->timed_out)
        return st_seterr(ST_ERR_TRANSIENT,
                         "peer %s at %s: %s: timed out (no answer or no byte "
                         "moved within its bound)",
                         peer_name(c), c->addr, k->what);
    if (k->cc != CURLE_OK)
        return transfer_error(k);
    return ST_OK;
}

/* The value of the "key value" line of a hello answer into out (cap
 * bytes); 0, or -1 if there is none or it does not fit. */
static int hello_field(const char *text, const char *key, char *out, size_t cap)
{
    size_t n = strlen(key);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > n && !strncmp(line, key, n) && line[n] == ' ') {
            if (len - n - 1 >= cap)
                return -1;
            memcpy(out, line + n + 1, len - n - 1);
            out[len - n - 1] = '\0';
            return 0;
        }
        if (!end)
            break;
        line = end + 1;
    }
    return -1;
}

/* GET /v1/hello: the peer's name and a fresh server nonce, then a new
 * client nonce and the channel key. Under lock. */
static st_err hello(st_peer_client *c)
{
    c->keyed = 0;
    st_bytes body = {0};
    peer_call k = {.c = c, .what = "hello", .method = "GET", .out = &body, .out_max = 4096};
    snprintf(k.path, sizeof k.path, "/v1/hello");
    st_err e = perform(&k);
    if (!e && k.status != 200)
        e = st_seterr(k.status / 100 == 5 ? ST_ERR_TRANSIENT : ST_ERR_PERMANENT,
                      "peer %s at %s: hello: HTTP %ld: %s", peer_name(c), c->addr, k.status,
                      k.text);
    char text[4097], node[ST_NODE_MAX + 1], nonce[2 * ST_PEER_NONCE_LEN + 1];
    snprintf(text, sizeof text, "%.*s", (int)body.len, body.data ? (char *)body.data : "");
    st_bytes_free(&body);
    if (e)
        return e;
    if (strncmp(text, ST_PEER_PROTOCOL "\n", sizeof ST_PEER_PROTOCOL) ||
        hello_field(text, "node", node, sizeof node) || !st_name_is_valid(node, ST_NODE_MAX) ||
        hello_field(text, "nonce", nonce, sizeof nonce) ||
        st_peer_unhex(nonce, c->server_nonce, ST_PEER_NONCE_LEN))
        return st_seterr(ST_ERR_PERMANENT, "peer at %s: hello: not the answer of a %s peer",
                         c->addr, ST_PEER_PROTOCOL);
    snprintf(c->peer_node, sizeof c->peer_node, "%s", node);
    char domain[ST_NODE_MAX + 1];
    if (hello_field(text, "domain", domain, sizeof domain) ||
        !st_name_is_valid(domain, ST_NODE_MAX))
        snprintf(domain, sizeof domain, "%s", node); /* a peer that does not say */
    snprintf(c->peer_domain, sizeof c->peer_domain, "%s", domain);
    char key[2 * ST_KEY_ID_LEN + 2];
    if (hello_field(text, "key", key, sizeof key) || strlen(key) != 2 * ST_KEY_ID_LEN)
        key[0] = '\0'; /* a peer without a key file, or one that does not say */
    /* key is empty or exactly the id's length here: the precision only
     * tells the compiler so (key's buffer is a byte longer, to see an
     * overlong one). */
    snprintf(c->peer_key, sizeof c->peer_key, "%.*s", (int)sizeof c->peer_key - 1, key);
    if (RAND_bytes(c->client_nonce, ST_PEER_NONCE_LEN) != 1)
        return st_seterr(ST_ERR_IO, "peer client: no random bytes for a nonce");
    e = st_peer_key_derive(&c->secret, c->server_nonce, c->client_nonce, c->self, c->peer_node,
                           c->key);
    if (!e) {
        c->counter = 0;
        c->keyed = 1;
    }
    return e;
}

static st_err auth_refused(const st_peer_client *c, const char *text)
{
    return st_seterr(ST_ERR_AUTH, "peer %s at %s refused this node's cluster secret (%s)",
                     peer_name(c), c->addr, text);
}

/*
 * A signed request: a hello first when the channel is new or may have been
 * forgotten, and once more (hello, request) when the peer says it forgot the
 * nonce. Then k->status is the answer's. Under lock.
 */
static st_err request(peer_call *k)
{
    st_peer_client *c = k->c;
    k->sign = 1;
    for (int attempt = 0;; attempt++) {
        st_err e = ST_OK;
        if (!c->keyed || st_mono_ns() - c->last_use_ns > REHELLO_NS)
            e = hello(c);
        if (!e) {
            k->status = 0;
            k->text_len = 0;
            k->text[0] = '\0';
            k->sent_ns = k->last_move_ns = 0;
            k->moved = k->seen = 0;
            if (k->out)
                st_bytes_clear(k->out);
            e = perform(k);
        }
        if (e || k->status != 401)
            return e;
        if (!strcmp(k->text, ST_PEER_WRONG_SECRET) || attempt == 1) {
            c->keyed = 0;
            return auth_refused(c, k->text);
        }
        c->keyed = 0; /* the peer forgot the nonce (or restarted): a new hello */
    }
}

/* The error of an answer other than 2xx, by its status. */
static st_err status_error(const peer_call *k)
{
    long st = k->status;
    st_err e = st == 404 || st == 409 ? ST_ERR_NOT_FOUND
               : st == 507            ? ST_ERR_NOSPACE
               : st == 422            ? ST_ERR_CORRUPT
               : st / 100 == 4        ? ST_ERR_INVALID
               : st / 100 == 5        ? ST_ERR_TRANSIENT
                                      : ST_ERR_PERMANENT;
    return st_seterr(e, "peer %s at %s: %s: HTTP %ld: %s", peer_name(k->c), k->c->addr, k->what, st,
                     k->text);
}

/* ---- the API ---- */

/* HOST:PORT of characters a URL can carry as they are (past the scheme). */
static int addr_is_valid(const char *addr)
{
    if (!strncmp(addr, TLS_SCHEME, strlen(TLS_SCHEME)))
        addr += strlen(TLS_SCHEME);
    size_t n = strlen(addr);
    const char *colon = strrchr(addr, ':');
    return n > 2 && n < ADDR_MAX && colon && colon != addr && colon[1] &&
           strspn(colon + 1, "0123456789") == strlen(colon + 1) &&
           strspn(addr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n;
}

st_err st_peer_client_new(const char *addr, const char *self_node, const st_peer_secret *secret,
                          uint64_t rate_bytes_per_s, st_peer_client **out)
{
    *out = NULL;
    if (!addr || !addr_is_valid(addr))
        return st_seterr(ST_ERR_INVALID,
                         "peer address '%.64s': wants HOST:PORT or https://HOST:PORT",
                         addr ? addr : "");
    if (!self_node || !st_name_is_valid(self_node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "peer client: invalid node name '%.64s'",
                         self_node ? self_node : "");
    if (!secret || secret->len < ST_PEER_SECRET_MIN || secret->len > ST_PEER_SECRET_MAX)
        return st_seterr(ST_ERR_INVALID, "peer client: no cluster secret");
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_status != CURLE_OK)
        return st_seterr(ST_ERR_IO, "peer client: libcurl: %s",
                         curl_easy_strerror(curl_init_status));
    st_peer_client *c = calloc(1, sizeof *c);
    if (!c || !(c->easy = curl_easy_init())) {
        free(c);
        return st_seterr(ST_ERR_NOMEM, "peer client: out of memory");
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->tls = !strncmp(c->addr, TLS_SCHEME, strlen(TLS_SCHEME));
    c->host_port = c->addr + (c->tls ? strlen(TLS_SCHEME) : 0);
    snprintf(c->self, sizeof c->self, "%s", self_node);
    c->secret = *secret;
    c->rate = rate_bytes_per_s;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return ST_OK;
}

void st_peer_client_free(st_peer_client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->easy);
    pthread_mutex_destroy(&c->lock);
    OPENSSL_cleanse(c, sizeof *c);
    free(c);
}

/* What the peer's hello said (field: one of c's peer_* strings) into out,
 * saying hello first when it has not yet. */
static st_err hello_said(st_peer_client *c, const char *field, char *out, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    st_err e = c->peer_node[0] ? ST_OK : hello(c);
    if (!e && strlen(field) >= cap)
        e = st_seterr(ST_ERR_INVALID, "peer client: a buffer of %zu bytes is too small", cap);
    if (!e)
        snprintf(out, cap, "%s", field);
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_client_node(st_peer_client *c, char *out, size_t cap)
{
    return hello_said(c, c->peer_node, out, cap);
}

st_err st_peer_client_domain(st_peer_client *c, char *out, size_t cap)
{
    return hello_said(c, c->peer_domain, out, cap);
}

st_err st_peer_client_key(st_peer_client *c, char *out, size_t cap)
{
    return hello_said(c, c->peer_key, out, cap);
}

/* HEAD of the pack. Under lock. */
static st_err has_pack_locked(st_peer_client *c, const st_id *pack, int *has)
{
    char hex[ST_ID_HEX_LEN + 1], what[64];
    st_id_hex(pack, hex);
    snprintf(what, sizeof what, "head pack %s", hex);
    peer_call k = {.c = c, .what = what, .method = "HEAD"};
    snprintf(k.path, sizeof k.path, "/v1/pack/%s", hex);
    st_err e = request(&k);
    *has = !e && k.status == 200;
    if (!e && k.status != 200 && k.status != 404)
        e = status_error(&k);
    return e;
}

st_err st_peer_has_pack(st_peer_client *c, const st_id *pack, int *has)
{
    pthread_mutex_lock(&c->lock);
    st_err e = has_pack_locked(c, pack, has);
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_put_pack(st_peer_client *c, const st_id *pack, const uint8_t *buf, size_t len)
{
    char hex[ST_ID_HEX_LEN + 1], what[64];
    st_id_hex(pack, hex);
    st_id id = st_id_of(buf, len);
    if (len > ST_PACK_MAX_SIZE || st_id_cmp(&id, pack))
        return st_seterr(ST_ERR_INVALID, "put pack %s: %s", hex,
                         len > ST_PACK_MAX_SIZE ? "larger than a pack may be"
                                                : "the bytes do not hash to that id");
    snprintf(what, sizeof what, "put pack %s", hex);
    pthread_mutex_lock(&c->lock);
    int has = 0;
    st_err e = has_pack_locked(c, pack, &has);
    if (!e && !has) {
        peer_call k = {
            .c = c, .what = what, .method = "PUT", .body = buf, .body_len = len, .body_id = &id};
        snprintf(k.path, sizeof k.path, "/v1/pack/%s", hex);
        e = request(&k);
        if (!e && k.status / 100 != 2)
            e = status_error(&k);
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_get_pack(st_peer_client *c, const st_id *pack, st_bytes *out)
{
    char hex[ST_ID_HEX_LEN + 1], what[64];
    st_id_hex(pack, hex);
    snprintf(what, sizeof what, "get pack %s", hex);
    peer_call k = {.c = c, .what = what, .method = "GET", .out = out, .out_max = ST_PACK_MAX_SIZE};
    snprintf(k.path, sizeof k.path, "/v1/pack/%s", hex);
    pthread_mutex_lock(&c->lock);
    st_err e = request(&k);
    if (!e && k.status != 200)
        e = status_error(&k);
    if (!e) {
        st_id got = st_id_of(out->data, out->len);
        if (st_id_cmp(&got, pack))
            e = st_seterr(ST_ERR_CORRUPT, "peer %s at %s: %s: the bytes do not hash to the id",
                          peer_name(c), c->addr, what);
    }
    pthread_mutex_unlock(&c->lock);
    if (e)
        st_bytes_clear(out);
    return e;
}

/* The path /v1/<verb>/<job>/<step>/<node>/<rev> into k, names checked. */
static st_err part_call(peer_call *k, const char *verb, const char *job, uint64_t step,
                        const char *node, uint32_t rev)
{
    if (!job || !st_name_is_valid(job, ST_JOB_MAX) || !node || !st_name_is_valid(node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID,
                         "peer %s: invalid job or node name: use 1-%d characters of A-Z a-z 0-9 "
                         ". _ -, not starting with '.'",
                         verb, ST_JOB_MAX);
    snprintf(k->path, sizeof k->path, "/v1/%s/%s/%" PRIu64 "/%s/%" PRIu32, verb, job, step, node,
             rev);
    return ST_OK;
}

/* Sends k (a part's request) and wants a 2xx. */
static st_err part_request(st_peer_client *c, peer_call *k)
{
    char what[ST_PEER_PATH_MAX + 16];
    snprintf(what, sizeof what, "%s %s", k->method, k->path);
    k->what = what;
    pthread_mutex_lock(&c->lock);
    st_err e = request(k);
    if (!e && k->status / 100 != 2)
        e = status_error(k);
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_put_part(st_peer_client *c, const char *job, uint64_t step, const char *node,
                        uint32_t rev, const st_id *packs, size_t npacks, const uint8_t *manifest,
                        size_t manifest_len)
{
    peer_call k = {.c = c, .method = "PUT"};
    st_err e = part_call(&k, "part", job, step, node, rev);
    if (e)
        return e;
    if (npacks > UINT32_MAX)
        return st_seterr(ST_ERR_INVALID, "peer put part: %zu packs", npacks);
    st_bytes body = {0};
    e = st_bytes_put_le32(&body, (uint32_t)npacks);
    if (!e && npacks)
        e = st_bytes_append(&body, packs, npacks * sizeof *packs);
    if (!e)
        e = st_bytes_append(&body, manifest, manifest_len);
    if (!e) {
        k.body = body.data;
        k.body_len = body.len;
        e = part_request(c, &k);
    }
    st_bytes_free(&body);
    return e;
}

/* GET /v1/<verb>/<job>/<step>/<node>/<rev> into out (replaced; emptied on
 * failure). */
static st_err get_part_object(st_peer_client *c, const char *verb, const char *job, uint64_t step,
                              const char *node, uint32_t rev, st_bytes *out)
{
    peer_call k = {.c = c, .method = "GET", .out = out, .out_max = PART_MAX};
    st_err e = part_call(&k, verb, job, step, node, rev);
    if (!e)
        e = part_request(c, &k);
    if (e)
        st_bytes_clear(out);
    return e;
}

st_err st_peer_get_part(st_peer_client *c, const char *job, uint64_t step, const char *node,
                        uint32_t rev, st_bytes *manifest_out)
{
    return get_part_object(c, "part", job, step, node, rev, manifest_out);
}

st_err st_peer_mark_durable(st_peer_client *c, const char *job, uint64_t step, const char *node,
                            uint32_t rev)
{
    peer_call k = {.c = c, .method = "POST"};
    st_err e = part_call(&k, "durable", job, step, node, rev);
    return e ? e : part_request(c, &k);
}

st_err st_peer_put_record(st_peer_client *c, const char *job, uint64_t step, const char *node,
                          uint32_t rev, const uint8_t *record, size_t len)
{
    peer_call k = {.c = c, .method = "PUT", .body = record, .body_len = len};
    st_err e = part_call(&k, "record", job, step, node, rev);
    return e ? e : part_request(c, &k);
}

st_err st_peer_get_record(st_peer_client *c, const char *job, uint64_t step, const char *node,
                          uint32_t rev, st_bytes *record_out)
{
    return get_part_object(c, "record", job, step, node, rev, record_out);
}

st_err st_peer_list_replicas(st_peer_client *c, const char *job, st_peer_listing *out)
{
    memset(out, 0, sizeof *out);
    st_bytes body = {0};
    peer_call k = {.c = c,
                   .method = "GET",
                   .out = &body,
                   .out_max = st_peer_listing_bound(ST_PEER_LISTING_MAX)};
    if (job && !st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "peer list: invalid job name");
    snprintf(k.path, sizeof k.path, "/v1/replicas%s%s", job ? "/" : "", job ? job : "");
    st_err e = part_request(c, &k);
    if (!e && (e = st_peer_listing_decode(body.data, body.len, out)))
        e = st_seterr(e, "peer %s: %s", peer_name(c), st_errmsg());
    st_bytes_free(&body);
    return e;
}
