/*
 * test_peer_transport — the peer transport (store/peer/, docs/PEERS.md
 * "Transport"): a server on 127.0.0.1, an ephemeral port, in a temp
 * directory, and clients that put and get real packs and a real manifest.
 * Authentication (wrong secret, replay, wrong MAC) and hostile paths are
 * checked with raw libcurl requests signed here with st_peer_auth.h, so the
 * server is tested without the client's own checks in front of it.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "format/st_codec.h"
#include "format/st_manifest.h"
#include "format/st_pack.h"
#include "format/st_part.h"
#include "peer/st_peer_auth.h"
#include "peer/st_peer_client.h"
#include "peer/st_peer_seal.h"
#include "peer/st_peer_server.h"
#include "peer/st_replica.h"
#include "util/st_fsutil.h"
#include "ut.h"

#define JOB       "job1"
#define WRITER    "node-a"
#define PEER_NODE "peer-b"

static char tmp_root[] = "/tmp/test_peer_XXXXXX";
static st_peer_secret secret;

/* ---- fixtures ---- */

/* A pack of three chunks of `raw` random bytes each (seed), encoded as the
 * writer encodes them. Its first chunk is described in *first. */
typedef struct test_pack {
    st_bytes bytes;
    st_id id;
    st_chunk_ref first;
    uint32_t raw_len;
} test_pack;

static void make_pack_sealed(test_pack *p, size_t raw, uint64_t seed, const st_keyring *kr)
{
    memset(p, 0, sizeof *p);
    st_pack_writer w = {0};
    st_pack_writer_set_keyring(&w, kr);
    uint8_t *data = malloc(raw), *scratch = malloc(st_codec_scratch_bound(raw));
    for (int i = 0; i < 3; i++) {
        ut_rand_fill(data, raw, seed * 10 + (uint64_t)i);
        st_id id = st_id_of(data, raw);
        uint8_t *dst = st_pack_append_begin(&w, st_codec_bound(raw));
        size_t enc_len = 0;
        uint64_t offset = 0;
        CHECK_OK(
            st_codec_encode(data, raw, &id, dst, st_codec_bound(raw), &enc_len, scratch, NULL));
        CHECK_OK(st_pack_append_commit(&w, enc_len, &offset));
        if (i == 0)
            p->first = (st_chunk_ref){.id = id,
                                      .offset = offset,
                                      .stored_len = (uint32_t)enc_len,
                                      .raw_len = (uint32_t)raw};
    }
    CHECK_OK(st_pack_finish(&w, &p->id));
    CHECK_OK(st_bytes_append(&p->bytes, w.data.data, w.data.len));
    p->raw_len = (uint32_t)raw;
    st_pack_writer_free(&w);
    free(data);
    free(scratch);
}

static void make_pack(test_pack *p, size_t raw, uint64_t seed)
{
    make_pack_sealed(p, raw, seed, NULL);
}

/* The encoded manifest of WRITER's part of JOB at step: one file, whose
 * first extent is each pack's first chunk. */
static void make_manifest_of(st_bytes *out, const char *node, uint64_t step, const test_pack *packs,
                             size_t n)
{
    st_manifest m = {.step = step, .created_ns = 1764460800000000000LL};
    m.node = (char *)node;
    m.job = JOB;
    st_id ids[8];
    st_chunk_ref chunks[8];
    for (size_t i = 0; i < n; i++) {
        ids[i] = packs[i].id;
        chunks[i] = packs[i].first;
        chunks[i].pack = (uint32_t)i;
    }
    st_file_entry f = {
        .path = "model.pt", .mode = 0100644, .rank = 0, .nchunks = n, .chunks = chunks};
    for (size_t i = 0; i < n; i++)
        f.size += packs[i].raw_len;
    f.digest = st_id_of("not checked here", 16);
    m.npacks = n;
    m.packs = ids;
    m.nfiles = 1;
    m.files = &f;
    st_bytes_clear(out);
    CHECK_OK(st_manifest_encode(&m, out));
}

static void make_manifest(st_bytes *out, uint64_t step, const test_pack *packs, size_t n)
{
    make_manifest_of(out, WRITER, step, packs, n);
}

/* The options of a server on 127.0.0.1 in tmp_root/sub (its path in dir). */
static st_peer_server_opts server_opts(const char *sub, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", tmp_root, sub);
    return (st_peer_server_opts){
        .listen = "127.0.0.1:0", .dir = dir, .node = PEER_NODE, .secret = &secret};
}

/* A server in tmp_root/sub; grace_ns: its orphan grace (0: the default);
 * kr: the keys it opens sealed bytes with (NULL: none). */
static st_peer_server *start_server_keyed(const char *sub, uint64_t cap, int64_t grace_ns,
                                          const st_keyring *kr)
{
    char dir[256];
    st_peer_server_opts o = server_opts(sub, dir, sizeof dir);
    o.cache_cap = cap;
    o.orphan_grace_ns = grace_ns;
    o.keyring = kr;
    st_peer_server *s = NULL;
    CHECK_OK(st_peer_server_start(&o, &s));
    return s;
}

static st_peer_server *start_server_graced(const char *sub, uint64_t cap, int64_t grace_ns)
{
    return start_server_keyed(sub, cap, grace_ns, NULL);
}

static st_peer_server *start_server(const char *sub, uint64_t cap)
{
    return start_server_graced(sub, cap, 0);
}

static st_peer_client *connect_to(const st_peer_server *s, const st_peer_secret *sec)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_peer_server_port(s));
    st_peer_client *c = NULL;
    CHECK_OK(st_peer_client_new(addr, WRITER, sec, 0, &c));
    return c;
}

static st_peer_server_stats stats_of(st_peer_server *s)
{
    st_peer_server_stats st;
    st_peer_server_get_stats(s, &st);
    return st;
}

static int exists(const char *sub, const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%s", tmp_root, sub, rel);
    return lstat(path, &st) == 0;
}

static void pack_rel(const st_id *id, char *out, size_t cap)
{
    char hex[ST_ID_HEX_LEN + 1];
    st_id_hex(id, hex);
    snprintf(out, cap, "packs/%.2s/%s.pack", hex, hex);
}

/* st_bytes_free() of n buffers. */
static void free_all(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        st_bytes_free(va_arg(ap, st_bytes *));
    va_end(ap);
}

/* ---- raw requests, signed here ---- */

typedef struct raw_channel {
    int port;
    uint8_t key[ST_PEER_KEY_LEN], server_nonce[ST_PEER_NONCE_LEN], client_nonce[ST_PEER_NONCE_LEN];
} raw_channel;

typedef struct raw_answer {
    long status;
    char text[1024];
    size_t len;
} raw_answer;

static size_t raw_take(char *buf, size_t size, size_t n, void *arg)
{
    raw_answer *a = arg;
    size_t len = size * n, room = sizeof a->text - 1 - a->len;
    memcpy(a->text + a->len, buf, len < room ? len : room);
    a->len += len < room ? len : room;
    a->text[a->len] = '\0';
    return len;
}

/* One request; headers NULL for none. */
static void raw_send(int port, const char *method, const char *path, struct curl_slist *headers,
                     const void *body, size_t len, raw_answer *a)
{
    memset(a, 0, sizeof *a);
    char url[2048];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *x = curl_easy_init();
    curl_easy_setopt(x, CURLOPT_URL, url);
    curl_easy_setopt(x, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(x, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(x, CURLOPT_WRITEFUNCTION, raw_take);
    curl_easy_setopt(x, CURLOPT_WRITEDATA, a);
    if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(x, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "GET")) {
        curl_easy_setopt(x, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(x, CURLOPT_POSTFIELDS, len ? body : "");
        curl_easy_setopt(x, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CHECK(curl_easy_perform(x) == CURLE_OK);
    curl_easy_getinfo(x, CURLINFO_RESPONSE_CODE, &a->status);
    curl_easy_cleanup(x);
}

static void raw_hello(int port, const st_peer_secret *sec, raw_channel *ch)
{
    raw_answer a;
    raw_send(port, "GET", "/v1/hello", NULL, NULL, 0, &a);
    CHECK(a.status == 200);
    const char *nonce = strstr(a.text, "\nnonce ");
    CHECK(nonce != NULL);
    char hex[65] = "";
    if (nonce)
        snprintf(hex, sizeof hex, "%.64s", nonce + 7);
    CHECK(st_peer_unhex(hex, ch->server_nonce, ST_PEER_NONCE_LEN) == 0);
    memset(ch->client_nonce, 0x5a, sizeof ch->client_nonce);
    ch->port = port;
    CHECK_OK(
        st_peer_key_derive(sec, ch->server_nonce, ch->client_nonce, WRITER, PEER_NODE, ch->key));
}

static struct curl_slist *add_header(struct curl_slist *h, const char *name, const char *value)
{
    char line[256];
    snprintf(line, sizeof line, "%s: %s", name, value);
    return curl_slist_append(h, line);
}

/* A request signed on ch with counter; mac_flip: spoil the MAC. */
static void raw_signed(raw_channel *ch, const char *method, const char *path, const void *body,
                       size_t len, uint64_t counter, int mac_flip, raw_answer *a)
{
    st_id body_id = st_id_of(body, len);
    uint8_t mac[ST_PEER_KEY_LEN];
    if (st_peer_mac(ch->key, counter, method, path, &body_id, mac))
        memset(mac, 0, sizeof mac); /* a path past what may be signed: the server's 400 */
    mac[0] ^= (uint8_t)mac_flip;
    char hex[65], num[32];
    struct curl_slist *h = NULL;
    st_peer_hex(ch->server_nonce, ST_PEER_NONCE_LEN, hex);
    h = add_header(h, ST_PEER_HDR_SERVER_NONCE, hex);
    st_peer_hex(ch->client_nonce, ST_PEER_NONCE_LEN, hex);
    h = add_header(h, ST_PEER_HDR_CLIENT_NONCE, hex);
    h = add_header(h, ST_PEER_HDR_NODE, WRITER);
    snprintf(num, sizeof num, "%" PRIu64, counter);
    h = add_header(h, ST_PEER_HDR_COUNTER, num);
    h = add_header(h, ST_PEER_HDR_BODY, st_id_hex(&body_id, hex));
    st_peer_hex(mac, sizeof mac, hex);
    h = add_header(h, ST_PEER_HDR_MAC, hex);
    h = curl_slist_append(h, "Expect:");
    raw_send(ch->port, method, path, h, body, len, a);
    curl_slist_free_all(h);
}

/* ---- cases ---- */

static void test_secret_file_rules(void)
{
    char path[256], link[256];
    snprintf(path, sizeof path, "%s/secret-case", tmp_root);
    snprintf(link, sizeof link, "%s/secret-link", tmp_root);
    const char *good = "0123456789abcdef0123456789abcdef-correct-horse\n";
    st_peer_secret s;

    ut_write_file_mode(path, good, 0600);
    CHECK_OK(st_peer_secret_load(path, &s));
    CHECK(s.len == strlen(good) - 1 && !memcmp(s.bytes, good, s.len));

    ut_write_file_mode(path, good, 0644);
    CHECK_ERR(st_peer_secret_load(path, &s), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), path) && strstr(st_errmsg(), "mode 0644"));
    CHECK(!strstr(st_errmsg(), "correct-horse"));
    CHECK(s.len == 0);

    ut_write_file_mode(path, "too-short-secret\n", 0600);
    CHECK_ERR(st_peer_secret_load(path, &s), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), path) && strstr(st_errmsg(), "32"));
    CHECK(!strstr(st_errmsg(), "too-short-secret"));

    ut_write_file_mode(path, good, 0600);
    unlink(link);
    CHECK(symlink(path, link) == 0);
    CHECK_ERR(st_peer_secret_load(link, &s), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "secret-link") != NULL);

    CHECK_ERR(st_peer_secret_load("/nonexistent/peer-secret", &s), ST_ERR_INVALID);
    unlink(link);
    unlink(path);
    st_peer_secret_wipe(&s);
}

static void test_listen_rules(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/listen", tmp_root);
    st_peer_server_opts o = {
        .listen = "0.0.0.0:0", .dir = dir, .node = PEER_NODE, .secret = &secret};
    st_peer_server *s = NULL;
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    CHECK(s == NULL && strstr(st_errmsg(), "every interface"));
    o.listen = "[::]:0";
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    o.listen = "127.0.0.1";
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    o.listen = "localhost:0";
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    o.listen = "0.0.0.0:0";
    o.listen_any = 1;
    CHECK_OK(st_peer_server_start(&o, &s));
    CHECK(s && st_peer_server_port(s) > 0);
    st_peer_server_stop(s);
}

/* TLS's local rules (docs/PEERS.md, "Transport security"): the key file
 * is private as the secret is, a certificate needs its key, a peer's
 * address may say https://, and an https client meets a plain server with
 * a named handshake failure. The handshakes themselves run between real
 * daemons: tests/integration/test_peers.py. */
static void test_tls_rules(void)
{
    char dir[256], cert[256], key[256];
    snprintf(cert, sizeof cert, "%s/tls-cert.pem", tmp_root);
    snprintf(key, sizeof key, "%s/tls-key.pem", tmp_root);
    ut_write_file_mode(cert, "-----BEGIN CERTIFICATE-----\nnot one\n", 0644);
    ut_write_file_mode(key, "-----BEGIN PRIVATE KEY-----\nhunter2\n", 0644);
    st_peer_server_opts o = server_opts("tls", dir, sizeof dir);
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    st_peer_server *s = NULL;
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "peer TLS key file") && strstr(st_errmsg(), key) &&
          strstr(st_errmsg(), "mode 0644") && !strstr(st_errmsg(), "hunter2"));
    CHECK(chmod(key, 0600) == 0);
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "not a PEM certificate and its private key") &&
          !strstr(st_errmsg(), "hunter2"));
    o.tls_key_file = NULL;
    CHECK_ERR(st_peer_server_start(&o, &s), ST_ERR_INVALID);
    CHECK(s == NULL && strstr(st_errmsg(), "--peer-tls-key"));

    st_peer_client *c = NULL;
    CHECK_ERR(st_peer_client_new("ftp://127.0.0.1:1", WRITER, &secret, 0, &c), ST_ERR_INVALID);
    CHECK_ERR(st_peer_client_new("https://", WRITER, &secret, 0, &c), ST_ERR_INVALID);
    st_peer_secret with_ca = secret;
    CHECK_ERR(st_peer_secret_set_ca(&with_ca, "/nonexistent/ca.pem"), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "/nonexistent/ca.pem") != NULL);
    CHECK_OK(st_peer_secret_set_ca(&with_ca, cert)); /* a file: whether it is PEM shows later */
    s = start_server("tls", 0);                      /* plain HTTP */
    char addr[64], node[ST_NODE_MAX + 1];
    snprintf(addr, sizeof addr, "https://127.0.0.1:%d", st_peer_server_port(s));
    CHECK_OK(st_peer_client_new(addr, WRITER, &with_ca, 0, &c));
    CHECK_ERR(st_peer_client_node(c, node, sizeof node), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), cert) && strstr(st_errmsg(), "cannot be used"));
    st_peer_client_free(c);
    CHECK_OK(st_peer_client_new(addr, WRITER, &secret, 0, &c));
    CHECK_ERR(st_peer_client_node(c, node, sizeof node), ST_ERR_TRANSIENT);
    CHECK(strstr(st_errmsg(), addr) && strstr(st_errmsg(), "TLS handshake failed"));
    st_peer_client_free(c);
    st_peer_server_stop(s);
    st_peer_secret_wipe(&with_ca);
    unlink(cert);
    unlink(key);
}

static void test_round_trip(void)
{
    st_peer_server *s = start_server("rt", 0);
    st_peer_client *c = connect_to(s, &secret);
    test_pack a, b;
    make_pack(&a, 20000, 1);
    make_pack(&b, 30000, 2);
    char node[ST_NODE_MAX + 1], rel[128];
    CHECK_OK(st_peer_client_node(c, node, sizeof node));
    CHECK(!strcmp(node, PEER_NODE));

    int has = -1;
    CHECK_OK(st_peer_has_pack(c, &a.id, &has));
    CHECK(has == 0);
    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    CHECK_OK(st_peer_put_pack(c, &b.id, b.bytes.data, b.bytes.len));
    CHECK_OK(st_peer_has_pack(c, &a.id, &has));
    CHECK(has == 1);
    pack_rel(&a.id, rel, sizeof rel);
    CHECK(exists("rt", rel));
    /* Sent again: HEAD says held, no body crosses. */
    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    st_peer_server_stats st = stats_of(s);
    CHECK(st.packs_received == 2 && st.packs_held == 2);
    CHECK(st.bytes_received == a.bytes.len + b.bytes.len);

    st_bytes got = {0};
    CHECK_OK(st_peer_get_pack(c, &b.id, &got));
    CHECK(got.len == b.bytes.len && !memcmp(got.data, b.bytes.data, got.len));
    st = stats_of(s);
    CHECK(st.packs_served == 1 && st.bytes_served == b.bytes.len);

    /* A pack whose bytes are not its id's: refused here, nothing sent. */
    CHECK_ERR(st_peer_put_pack(c, &a.id, b.bytes.data, b.bytes.len), ST_ERR_INVALID);

    st_bytes manifest = {0};
    test_pack both[2] = {a, b};
    make_manifest(&manifest, 7, both, 2);
    st_id ids[2] = {a.id, b.id};
    CHECK_OK(st_peer_put_part(c, JOB, 7, WRITER, 1, ids, 2, manifest.data, manifest.len));
    CHECK(exists("rt", "parts/" JOB "/00000000000000000007/" WRITER ".r1.manifest"));
    CHECK(exists("rt", "parts/" JOB "/00000000000000000007/" WRITER ".r1.state"));
    CHECK_OK(st_peer_get_part(c, JOB, 7, WRITER, 1, &got));
    CHECK(got.len == manifest.len && !memcmp(got.data, manifest.data, got.len));
    CHECK_ERR(st_peer_get_part(c, JOB, 8, WRITER, 1, &got), ST_ERR_NOT_FOUND);
    st = stats_of(s);
    CHECK(st.replicas_held == 1 && st.cache_bytes == a.bytes.len + b.bytes.len + manifest.len);

    CHECK_OK(st_peer_mark_durable(c, JOB, 7, WRITER, 1));
    CHECK_ERR(st_peer_mark_durable(c, JOB, 7, WRITER, 2), ST_ERR_NOT_FOUND);

    /* A manifest of another step than the path's is refused. */
    CHECK_ERR(st_peer_put_part(c, JOB, 9, WRITER, 1, ids, 2, manifest.data, manifest.len),
              ST_ERR_CORRUPT);
    CHECK_ERR(st_peer_put_part(c, JOB, 7, WRITER, 2, ids, 2, manifest.data, 10), ST_ERR_CORRUPT);

    /* A node name with ".r" in it. */
    st_bytes dotted = {0};
    make_manifest_of(&dotted, "gpu.rack1", 7, &b, 1);
    CHECK_OK(st_peer_put_part(c, JOB, 7, "gpu.rack1", 3, &b.id, 1, dotted.data, dotted.len));

    /* Restart on the same directory: the tables come back from the files,
     * and tmp/ is emptied. */
    st_peer_client_free(c);
    st_peer_server_stop(s);
    char leftover[512];
    snprintf(leftover, sizeof leftover, "%s/rt/tmp/7.pack", tmp_root);
    ut_write_text(leftover, "half a body");
    s = start_server("rt", 0);
    c = connect_to(s, &secret);
    CHECK(!exists("rt", "tmp/7.pack"));
    st = stats_of(s);
    CHECK(st.packs_held == 2 && st.replicas_held == 2);
    CHECK(st.cache_bytes == a.bytes.len + b.bytes.len + manifest.len + dotted.len);
    CHECK_OK(st_peer_get_part(c, JOB, 7, WRITER, 1, &got));
    CHECK(got.len == manifest.len);
    CHECK_OK(st_peer_get_part(c, JOB, 7, "gpu.rack1", 3, &got));
    CHECK(got.len == dotted.len);
    st_bytes_free(&dotted);

    free_all(4, &got, &manifest, &a.bytes, &b.bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

/* The record of WRITER's part of JOB at step, revision rev, naming manifest
 * man and held by PEER_NODE: encoded into out. */
static void make_record(st_bytes *out, uint64_t step, uint32_t rev, const st_bytes *man)
{
    st_part p = {.step = step, .revision = rev, .complete = 1, .world_size = 1};
    snprintf(p.job, sizeof p.job, JOB);
    snprintf(p.node, sizeof p.node, WRITER);
    p.manifest_len = man->len;
    p.manifest_digest = st_id_of(man->data, man->len);
    st_replica r = {.revision = rev, .nholders = 1, .manifest = *man};
    CHECK_OK(st_part_encode(&p, &r.part));
    snprintf(r.holders[0].node, sizeof r.holders[0].node, PEER_NODE);
    snprintf(r.holders[0].addr, sizeof r.holders[0].addr, "127.0.0.1:1");
    st_bytes_clear(out);
    CHECK_OK(st_replica_encode(&r, out));
    st_bytes_free(&r.part);
}

static st_keyring *random_keyring(uint64_t seed)
{
    st_keyring *kr = NULL;
    uint8_t key[ST_KEY_LEN];
    ut_rand_fill(key, sizeof key, seed);
    CHECK_OK(st_keyring_new(&kr));
    CHECK_OK(st_keyring_add(kr, key));
    return kr;
}

/* 1 if the file tmp_root/sub/rel begins with the envelope's magic. */
static int sealed_on_disk(const char *sub, const char *rel)
{
    char path[512], head[4] = {0};
    snprintf(path, sizeof path, "%s/%s/%s", tmp_root, sub, rel);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    return n == 4 && !memcmp(head, ST_CRYPT_MAGIC, 4);
}

#define SEALED_PART "parts/" JOB "/00000000000000000007/" WRITER ".r1."

/* An encrypted store's replica (docs/PEERS.md, "Encrypted stores"): a peer
 * with the key says its key id in the hello, checks a sealed pack's
 * trailer, opens the sealed manifest and record and keeps them sealed; a
 * peer without the key, or with another, refuses them. */
static void test_sealed_replica(void)
{
    st_keyring *kr = random_keyring(61), *other = random_keyring(62);
    st_peer_server *s = start_server_keyed("sealed", 0, 0, kr);
    st_peer_client *c = connect_to(s, &secret);
    test_pack a;
    make_pack_sealed(&a, 20000, 60, kr);
    char said[2 * ST_KEY_ID_LEN + 1], hex[2 * ST_KEY_ID_LEN + 1];
    CHECK_OK(st_peer_client_key(c, said, sizeof said));
    st_key_id_hex(st_keyring_sealing(kr)->id, hex);
    CHECK(!strcmp(said, hex));

    char man_key[ST_KEY_MAX], rec_key[ST_KEY_MAX];
    CHECK_OK(st_key_manifest(man_key, sizeof man_key, JOB, 7, WRITER, 1));
    CHECK_OK(st_key_replica(rec_key, sizeof rec_key, JOB, 7, WRITER, 1));
    st_bytes plain = {0}, man = {0}, rec = {0}, rec_plain = {0}, moved = {0};
    make_manifest(&plain, 7, &a, 1);
    CHECK_OK(st_peer_seal(kr, ST_CRYPT_MANIFEST, man_key, plain.data, plain.len, &man));
    make_record(&rec_plain, 7, 1, &plain);
    CHECK_OK(st_peer_seal(kr, ST_CRYPT_REPLICA, rec_key, rec_plain.data, rec_plain.len, &rec));
    /* The same record sealed under another part's name fails its tag. */
    CHECK_OK(st_peer_seal(kr, ST_CRYPT_REPLICA, man_key, rec_plain.data, rec_plain.len, &moved));

    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    CHECK_OK(st_peer_put_part(c, JOB, 7, WRITER, 1, &a.id, 1, man.data, man.len));
    CHECK_ERR(st_peer_put_record(c, JOB, 7, WRITER, 1, moved.data, moved.len), ST_ERR_CORRUPT);
    CHECK_OK(st_peer_put_record(c, JOB, 7, WRITER, 1, rec.data, rec.len));
    CHECK(sealed_on_disk("sealed", SEALED_PART "manifest"));
    CHECK(sealed_on_disk("sealed", SEALED_PART "record"));
    CHECK(stats_of(s).replicas_held == 1 && stats_of(s).corrupt_refused == 0);
    st_peer_client_free(c);
    st_peer_server_stop(s);

    /* Without the key, and with another: nothing sealed is taken, and
     * nothing counts as corrupt; the hello says which key, or none. */
    for (int keyed = 0; keyed < 2; keyed++) {
        s = start_server_keyed(keyed ? "other" : "keyless", 0, 0, keyed ? other : NULL);
        c = connect_to(s, &secret);
        CHECK_OK(st_peer_client_key(c, said, sizeof said));
        CHECK(keyed ? strlen(said) == 2 * ST_KEY_ID_LEN && strcmp(said, hex) : !said[0]);
        CHECK_ERR(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len), ST_ERR_CORRUPT);
        CHECK_ERR(st_peer_put_part(c, JOB, 7, WRITER, 1, NULL, 0, man.data, man.len),
                  ST_ERR_CORRUPT);
        CHECK(stats_of(s).packs_held == 0 && stats_of(s).corrupt_refused == 0);
        st_peer_client_free(c);
        st_peer_server_stop(s);
    }
    free_all(6, &plain, &man, &rec, &rec_plain, &moved, &a.bytes);
    st_keyring_free(kr);
    st_keyring_free(other);
}

/* GET /v1/replicas and PUT/GET /v1/record (docs/PEERS.md, "Restoring from
 * peers alone"): what a peer lists, the records it keeps and refuses, and
 * both after a restart. */
static void test_replica_listing(void)
{
    st_peer_server *s = start_server("list", 0);
    st_peer_client *c = connect_to(s, &secret);
    st_peer_listing l;
    CHECK_OK(st_peer_list_replicas(c, NULL, &l));
    CHECK(l.n == 0 && !l.truncated);

    test_pack a;
    make_pack(&a, 20000, 11);
    st_bytes manifest = {0}, other = {0}, rec = {0}, wrong = {0}, got = {0};
    make_manifest(&manifest, 7, &a, 1);
    make_manifest(&other, 8, &a, 1);
    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    CHECK_OK(st_peer_put_part(c, JOB, 7, WRITER, 2, &a.id, 1, manifest.data, manifest.len));
    CHECK_OK(st_peer_put_part(c, JOB, 8, WRITER, 1, &a.id, 1, other.data, other.len));
    CHECK_OK(st_peer_mark_durable(c, JOB, 8, WRITER, 1));

    /* Listed newest first, without a record yet. */
    st_id man_id = st_id_of(manifest.data, manifest.len);
    CHECK_OK(st_peer_list_replicas(c, NULL, &l));
    CHECK(l.n == 2 && !l.truncated);
    CHECK(l.items[0].step == 8 && l.items[0].durable && l.items[0].record_len == 0);
    CHECK(l.items[1].step == 7 && l.items[1].rev == 2 && !l.items[1].durable);
    CHECK(!strcmp(l.items[1].job, JOB) && !strcmp(l.items[1].node, WRITER));
    CHECK(!st_id_cmp(&l.items[1].manifest_id, &man_id) && l.items[1].manifest_len == manifest.len);
    st_peer_listing_free(&l);
    CHECK_ERR(st_peer_get_record(c, JOB, 7, WRITER, 2, &got), ST_ERR_NOT_FOUND);

    /* A record is kept only for a replica held, of its revision, naming
     * the manifest held byte for byte. */
    make_record(&rec, 7, 2, &manifest);
    CHECK_ERR(st_peer_put_record(c, JOB, 7, WRITER, 3, rec.data, rec.len), ST_ERR_CORRUPT);
    CHECK_ERR(st_peer_put_record(c, JOB, 9, WRITER, 2, rec.data, rec.len), ST_ERR_CORRUPT);
    make_record(&wrong, 7, 1, &manifest);
    CHECK_ERR(st_peer_put_record(c, JOB, 7, WRITER, 1, wrong.data, wrong.len), ST_ERR_NOT_FOUND);
    make_record(&wrong, 7, 2, &other);
    CHECK_ERR(st_peer_put_record(c, JOB, 7, WRITER, 2, wrong.data, wrong.len), ST_ERR_CORRUPT);
    CHECK_ERR(st_peer_put_record(c, JOB, 7, WRITER, 2, rec.data, rec.len - 1), ST_ERR_CORRUPT);
    CHECK_OK(st_peer_put_record(c, JOB, 7, WRITER, 2, rec.data, rec.len));
    CHECK(exists("list", "parts/" JOB "/00000000000000000007/" WRITER ".r2.record"));
    CHECK_OK(st_peer_get_record(c, JOB, 7, WRITER, 2, &got));
    CHECK(got.len == rec.len && !memcmp(got.data, rec.data, got.len));
    st_peer_server_stats st = stats_of(s);
    CHECK(st.cache_bytes == a.bytes.len + manifest.len + other.len + rec.len);

    /* Of one job only; a malformed job is refused before anything is sent. */
    CHECK_OK(st_peer_list_replicas(c, "another-job", &l));
    CHECK(l.n == 0);
    CHECK_ERR(st_peer_list_replicas(c, ".hidden", &l), ST_ERR_INVALID);

    /* Restart: the record and the listing come back from the files. */
    st_peer_client_free(c);
    st_peer_server_stop(s);
    s = start_server("list", 0);
    c = connect_to(s, &secret);
    CHECK_OK(st_peer_list_replicas(c, JOB, &l));
    CHECK(l.n == 2 && l.items[1].step == 7 && l.items[1].record_len == rec.len &&
          !st_id_cmp(&l.items[1].manifest_id, &man_id));
    st_peer_listing_free(&l);
    st = stats_of(s);
    CHECK(st.cache_bytes == a.bytes.len + manifest.len + other.len + rec.len);

    /* A replica sent again drops the record that named its old manifest. */
    CHECK_OK(st_peer_put_part(c, JOB, 7, WRITER, 2, &a.id, 1, manifest.data, manifest.len));
    CHECK_ERR(st_peer_get_record(c, JOB, 7, WRITER, 2, &got), ST_ERR_NOT_FOUND);
    CHECK(!exists("list", "parts/" JOB "/00000000000000000007/" WRITER ".r2.record"));

    /* A wrong secret is refused by name. */
    st_peer_secret bad = secret;
    bad.bytes[0] ^= 1;
    st_peer_client *intruder = connect_to(s, &bad);
    CHECK_ERR(st_peer_list_replicas(intruder, NULL, &l), ST_ERR_AUTH);
    CHECK(strstr(st_errmsg(), "refused this node's cluster secret") != NULL);
    st_peer_client_free(intruder);

    free_all(6, &manifest, &other, &rec, &wrong, &got, &a.bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

static void test_wrong_secret(void)
{
    st_peer_server *s = start_server("auth", 0);
    st_peer_secret other = secret;
    other.bytes[3] ^= 1;
    st_peer_client *c = connect_to(s, &other);
    test_pack a;
    make_pack(&a, 5000, 3);
    int has = -1;
    CHECK_ERR(st_peer_has_pack(c, &a.id, &has), ST_ERR_AUTH);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_peer_server_port(s));
    CHECK(strstr(st_errmsg(), "peer " PEER_NODE " at ") != NULL);
    CHECK(strstr(st_errmsg(), addr) && strstr(st_errmsg(), "refused this node's cluster secret"));
    CHECK_ERR(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len), ST_ERR_AUTH);
    st_peer_server_stats st = stats_of(s);
    CHECK(st.auth_refusals >= 2 && st.packs_held == 0);
    st_peer_client_free(c);

    /* A connection refused is transient, and names the address. */
    int port = st_peer_server_port(s);
    st_peer_server_stop(s);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    CHECK_OK(st_peer_client_new(addr, WRITER, &secret, 0, &c));
    CHECK_ERR(st_peer_has_pack(c, &a.id, &has), ST_ERR_TRANSIENT);
    CHECK(strstr(st_errmsg(), addr) != NULL);
    st_peer_client_free(c);
    st_bytes_free(&a.bytes);
}

static void test_replay_and_mac(void)
{
    st_peer_server *s = start_server("replay", 0);
    raw_channel ch;
    raw_answer ans;
    raw_hello(st_peer_server_port(s), &secret, &ch);
    char path[80], hex[ST_ID_HEX_LEN + 1];
    st_id id = st_id_of("no such pack", 12);
    snprintf(path, sizeof path, "/v1/pack/%s", st_id_hex(&id, hex));

    raw_signed(&ch, "HEAD", path, NULL, 0, 1, 0, &ans);
    CHECK(ans.status == 404);
    /* The same signed request again: its counter was seen. */
    raw_signed(&ch, "HEAD", path, NULL, 0, 1, 0, &ans);
    CHECK(ans.status == 401);
    raw_signed(&ch, "GET", path, NULL, 0, 1, 0, &ans);
    CHECK(ans.status == 401 && strstr(ans.text, "replayed"));
    raw_signed(&ch, "GET", path, NULL, 0, 2, 1, &ans);
    CHECK(ans.status == 401 && !strcmp(ans.text, ST_PEER_WRONG_SECRET));
    raw_signed(&ch, "HEAD", path, NULL, 0, 2, 0, &ans);
    CHECK(ans.status == 404);
    /* No headers at all; an unknown server nonce. */
    raw_send(ch.port, "HEAD", path, NULL, NULL, 0, &ans);
    CHECK(ans.status == 401);
    ch.server_nonce[0] ^= 1;
    raw_signed(&ch, "GET", path, NULL, 0, 3, 0, &ans);
    CHECK(ans.status == 401 && strstr(ans.text, "nonce"));
    st_peer_server_stats st = stats_of(s);
    CHECK(st.auth_refusals == 5);
    st_peer_server_stop(s);
}

static void test_corrupt_packs(void)
{
    st_peer_server *s = start_server("corrupt", 0);
    test_pack a, b;
    make_pack(&a, 20000, 4);
    make_pack(&b, 20000, 5);
    char path[80], hex[ST_ID_HEX_LEN + 1], rel[128];

    /* B's bytes under A's id: refused, counted, nothing kept. */
    raw_channel ch;
    raw_answer ans;
    raw_hello(st_peer_server_port(s), &secret, &ch);
    snprintf(path, sizeof path, "/v1/pack/%s", st_id_hex(&a.id, hex));
    raw_signed(&ch, "PUT", path, b.bytes.data, b.bytes.len, 1, 0, &ans);
    CHECK(ans.status == 422);
    st_peer_server_stats st = stats_of(s);
    CHECK(st.corrupt_refused == 1 && st.packs_held == 0);
    /* Bytes that hash to their id but are not a pack: the trailer. */
    st_id junk_id = st_id_of("junk junk junk junk junk junk", 30);
    snprintf(path, sizeof path, "/v1/pack/%s", st_id_hex(&junk_id, hex));
    raw_signed(&ch, "PUT", path, "junk junk junk junk junk junk", 30, 2, 0, &ans);
    CHECK(ans.status == 422);
    CHECK(stats_of(s).corrupt_refused == 2);

    /* Accepted, then a bit flips on the peer's disk: never served. */
    st_peer_client *c = connect_to(s, &secret);
    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    pack_rel(&a.id, rel, sizeof rel);
    char file[512];
    snprintf(file, sizeof file, "%s/corrupt/%s", tmp_root, rel);
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 100, SEEK_SET);
        int ch100 = fgetc(f);
        fseek(f, 100, SEEK_SET);
        fputc(ch100 ^ 0x40, f);
        fclose(f);
    }
    st_bytes got = {0};
    CHECK_ERR(st_peer_get_pack(c, &a.id, &got), ST_ERR_NOT_FOUND);
    CHECK(got.len == 0);
    CHECK(!exists("corrupt", rel));
    int has = -1;
    CHECK_OK(st_peer_has_pack(c, &a.id, &has));
    CHECK(has == 0);
    st = stats_of(s);
    CHECK(st.corrupt_refused == 3 && st.packs_served == 0 && st.packs_held == 0);

    /* A replica listing a pack the peer lacks is refused, naming it. */
    st_bytes manifest = {0};
    make_manifest(&manifest, 3, &a, 1);
    CHECK_ERR(st_peer_put_part(c, JOB, 3, WRITER, 1, &a.id, 1, manifest.data, manifest.len),
              ST_ERR_NOT_FOUND);
    CHECK(strstr(st_errmsg(), st_id_hex(&a.id, hex)) != NULL);
    CHECK(stats_of(s).replicas_held == 0);

    free_all(4, &got, &manifest, &a.bytes, &b.bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

static void test_cache_cap(void)
{
    test_pack p[4];
    st_bytes m[2] = {{0}, {0}};
    for (int i = 0; i < 4; i++)
        make_pack(&p[i], 20000, 10 + (uint64_t)i);
    make_manifest(&m[0], 1, &p[0], 1);
    make_manifest(&m[1], 2, &p[1], 1);
    /* Room for two packs and their replicas, and half of a third. */
    uint64_t cap = p[0].bytes.len + p[1].bytes.len + m[0].len + m[1].len + p[2].bytes.len / 2;
    st_peer_server *s = start_server("cap", cap);
    st_peer_client *c = connect_to(s, &secret);

    CHECK_OK(st_peer_put_pack(c, &p[0].id, p[0].bytes.data, p[0].bytes.len));
    CHECK_OK(st_peer_put_part(c, JOB, 1, WRITER, 1, &p[0].id, 1, m[0].data, m[0].len));
    CHECK_OK(st_peer_put_pack(c, &p[1].id, p[1].bytes.data, p[1].bytes.len));
    CHECK_OK(st_peer_put_part(c, JOB, 2, WRITER, 1, &p[1].id, 1, m[1].data, m[1].len));

    /* Full, and nothing durable: refused, never a held replica evicted. */
    CHECK_ERR(st_peer_put_pack(c, &p[2].id, p[2].bytes.data, p[2].bytes.len), ST_ERR_NOSPACE);
    st_peer_server_stats st = stats_of(s);
    CHECK(st.refusals_full == 1 && st.evictions == 0 && st.replicas_held == 2);

    /* Step 1 durable in the store: its replica and pack make room. */
    CHECK_OK(st_peer_mark_durable(c, JOB, 1, WRITER, 1));
    CHECK_OK(st_peer_put_pack(c, &p[2].id, p[2].bytes.data, p[2].bytes.len));
    st = stats_of(s);
    CHECK(st.evictions == 1 && st.replicas_held == 1 && st.packs_held == 2);
    CHECK(st.cache_bytes <= cap);
    int has = -1;
    CHECK_OK(st_peer_has_pack(c, &p[0].id, &has));
    CHECK(has == 0);
    st_bytes got = {0};
    CHECK_ERR(st_peer_get_part(c, JOB, 1, WRITER, 1, &got), ST_ERR_NOT_FOUND);
    CHECK_OK(st_peer_get_part(c, JOB, 2, WRITER, 1, &got));

    /* Full again with nothing evictable (p[2] is referenced by no replica
     * but arrived just now): 507, counted. */
    CHECK_ERR(st_peer_put_pack(c, &p[3].id, p[3].bytes.data, p[3].bytes.len), ST_ERR_NOSPACE);
    CHECK(strstr(st_errmsg(), "peer cache full") != NULL);
    st = stats_of(s);
    CHECK(st.refusals_full == 2 && st.cache_cap == cap);

    st_bytes_free(&got);
    for (int i = 0; i < 4; i++)
        st_bytes_free(&p[i].bytes);
    st_bytes_free(&m[0]);
    st_bytes_free(&m[1]);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

/* Packs no replica references are evicted once older than the grace (1 ns
 * here), oldest first; never one a held replica references. */
static void test_orphan_eviction(void)
{
    test_pack p[4];
    st_bytes m = {0};
    for (int i = 0; i < 4; i++)
        make_pack(&p[i], 20000, 40 + (uint64_t)i);
    make_manifest(&m, 5, &p[0], 1);
    uint64_t cap = p[0].bytes.len + m.len + p[1].bytes.len + p[2].bytes.len / 2;
    st_peer_server *s = start_server_graced("orphans", cap, 1);
    st_peer_client *c = connect_to(s, &secret);
    CHECK_OK(st_peer_put_pack(c, &p[0].id, p[0].bytes.data, p[0].bytes.len));
    CHECK_OK(st_peer_put_part(c, JOB, 5, WRITER, 1, &p[0].id, 1, m.data, m.len));
    CHECK_OK(st_peer_put_pack(c, &p[1].id, p[1].bytes.data, p[1].bytes.len));
    CHECK_OK(st_peer_put_pack(c, &p[2].id, p[2].bytes.data, p[2].bytes.len));
    int has = -1;
    CHECK_OK(st_peer_has_pack(c, &p[1].id, &has));
    CHECK(has == 0);
    CHECK_OK(st_peer_has_pack(c, &p[0].id, &has));
    CHECK(has == 1);
    st_peer_server_stats st = stats_of(s);
    CHECK(st.evictions == 1 && st.replicas_held == 1 && st.packs_held == 2);
    st_bytes_free(&m);
    for (int i = 0; i < 4; i++)
        st_bytes_free(&p[i].bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

/* The server forgot the client's nonce (256 newer hellos pushed it out of
 * its table): the client says hello again, once, and goes on. */
static void test_forgotten_nonce(void)
{
    st_peer_server *s = start_server("rehello", 0);
    st_peer_client *c = connect_to(s, &secret);
    test_pack a;
    make_pack(&a, 5000, 20);
    int has = -1;
    CHECK_OK(st_peer_has_pack(c, &a.id, &has));
    raw_answer ans;
    for (int i = 0; i < 300; i++) {
        raw_send(st_peer_server_port(s), "GET", "/v1/hello", NULL, NULL, 0, &ans);
        CHECK(ans.status == 200);
    }
    CHECK_OK(st_peer_put_pack(c, &a.id, a.bytes.data, a.bytes.len));
    CHECK_OK(st_peer_has_pack(c, &a.id, &has));
    CHECK(has == 1);
    st_peer_server_stats st = stats_of(s);
    CHECK(st.auth_refusals == 1 && st.packs_held == 1);
    st_bytes_free(&a.bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

typedef struct sender {
    st_peer_server *s;
    int index;
    test_pack packs[3]; /* made before the thread starts (CHECK is not thread-safe) */
    int failures;
} sender;

/* One of several nodes sending packs to one peer at once. */
static void *send_packs(void *arg)
{
    sender *w = arg;
    char addr[64], node[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_peer_server_port(w->s));
    snprintf(node, sizeof node, "node-%d", w->index);
    st_peer_client *c = NULL;
    if (st_peer_client_new(addr, node, &secret, 0, &c)) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        const test_pack *p = &w->packs[i];
        st_bytes back = {0};
        if (st_peer_put_pack(c, &p->id, p->bytes.data, p->bytes.len) ||
            st_peer_get_pack(c, &p->id, &back) || back.len != p->bytes.len)
            w->failures++;
        st_bytes_free(&back);
    }
    st_peer_client_free(c);
    return NULL;
}

static void test_concurrent_senders(void)
{
    st_peer_server *s = start_server("many", 0);
    pthread_t t[4];
    sender w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (sender){.s = s, .index = i};
        for (int j = 0; j < 3; j++)
            make_pack(&w[i].packs[j], 8000, 100 + (uint64_t)i * 10 + (uint64_t)j);
        CHECK(pthread_create(&t[i], NULL, send_packs, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].failures == 0);
        for (int j = 0; j < 3; j++)
            st_bytes_free(&w[i].packs[j].bytes);
    }
    st_peer_server_stats st = stats_of(s);
    CHECK(st.packs_held == 12 && st.packs_received == 12 && st.packs_served == 12);
    CHECK(st.auth_refusals == 0);
    st_peer_server_stop(s);
}

/* A paced client takes at least its body's bytes over its rate: a lower
 * bound, which a loaded machine can only make longer. */
static void test_send_rate(void)
{
    st_peer_server *s = start_server("rate", 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_peer_server_port(s));
    st_peer_client *c = NULL;
    CHECK_OK(st_peer_client_new(addr, WRITER, &secret, 1000000, &c));
    test_pack p;
    make_pack(&p, 200000, 30); /* 600 KB of random bytes: stored raw */
    int64_t t0 = st_mono_ns();
    CHECK_OK(st_peer_put_pack(c, &p.id, p.bytes.data, p.bytes.len));
    int64_t took_ms = (st_mono_ns() - t0) / 1000000;
    CHECK(took_ms >= 300);
    if (took_ms < 300 || getenv("VERBOSE"))
        fprintf(stderr, "%zu bytes at 1 MB/s took %" PRId64 " ms\n", p.bytes.len, took_ms);
    st_bytes_free(&p.bytes);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

/* Names every entry of dir (recursively) into a count; 1 if any is
 * outside the allowed top-level names. */
static int stray_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int stray = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && strcmp(de->d_name, "listen") && strcmp(de->d_name, "rt") &&
            strcmp(de->d_name, "auth") && strcmp(de->d_name, "replay") &&
            strcmp(de->d_name, "corrupt") && strcmp(de->d_name, "cap") &&
            strcmp(de->d_name, "hostile") && strcmp(de->d_name, "secret") &&
            strcmp(de->d_name, "rehello") && strcmp(de->d_name, "many") &&
            strcmp(de->d_name, "rate") && strcmp(de->d_name, "orphans") &&
            strcmp(de->d_name, "list") && strcmp(de->d_name, "tls") &&
            strcmp(de->d_name, "sealed") && strcmp(de->d_name, "keyless") &&
            strcmp(de->d_name, "other")) {
            fprintf(stderr, "stray entry %s/%s\n", dir, de->d_name);
            stray = 1;
        }
    if (d)
        closedir(d);
    return stray;
}

static void test_hostile_paths(void)
{
    st_peer_server *s = start_server("hostile", 0);
    raw_channel ch;
    raw_answer ans;
    raw_hello(st_peer_server_port(s), &secret, &ch);
    char long_name[300];
    memset(long_name, 'j', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    char overlong[400], huge[2100];
    snprintf(overlong, sizeof overlong, "/v1/part/%s/1/n/1", long_name);
    memset(huge, 'a', sizeof huge - 1);
    memcpy(huge, "/v1/part/", 9);
    huge[sizeof huge - 1] = '\0';
    const char *bad[] = {
        "/v1/part/../1/" WRITER "/1",
        "/v1/part/" JOB "/1/../1",
        "/v1/part/" JOB "/1/..",
        "/v1/part/.hidden/1/" WRITER "/1",
        "/v1/part/" JOB "/-1/" WRITER "/1",
        "/v1/part/" JOB "/1x/" WRITER "/1",
        "/v1/part/" JOB "/99999999999999999999999/" WRITER "/1",
        "/v1/part/" JOB "/1/" WRITER "/4294967296",
        "/v1/part/" JOB "/1/" WRITER "/1/extra",
        "/v1/part/" JOB "//" WRITER "/1",
        "/v1/part/a%2f..%2f..%2fx/1/" WRITER "/1",
        "/v1/pack/zz000000000000000000000000000000",
        "/v1/pack/0123",
        "/v1/pack/0123456789abcdef0123456789abcdef0",
        "/v1/pack/../../../etc/passwd",
        overlong,
        huge,
    };
    const char *body = "\0\0\0\0 not a manifest";
    uint64_t counter = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_signed(&ch, "PUT", bad[i], body, 20, counter++, 0, &ans);
        if (ans.status != 400)
            fprintf(stderr, "PUT %.80s: HTTP %ld %s\n", bad[i], ans.status, ans.text);
        CHECK(ans.status == 400);
    }
    raw_signed(&ch, "POST", "/v1/durable/" JOB "/1/" WRITER "/..", NULL, 0, counter++, 0, &ans);
    CHECK(ans.status == 400);
    raw_signed(&ch, "DELETE", "/v1/part/" JOB "/1/" WRITER "/1", NULL, 0, counter++, 0, &ans);
    CHECK(ans.status == 405);
    raw_signed(&ch, "GET", "/v1/nothing", NULL, 0, counter++, 0, &ans);
    CHECK(ans.status == 404);
    static const char *bad_lists[] = {"/v1/replicas/", "/v1/replicas/.x", "/v1/replicas/a/b",
                                      "/v1/replicasx", "/v1/record/" JOB "/1/" WRITER "/x"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        raw_signed(&ch, "GET", bad_lists[i], NULL, 0, counter++, 0, &ans);
        CHECK(ans.status == 400);
    }
    raw_signed(&ch, "PUT", "/v1/replicas", "x", 1, counter++, 0, &ans);
    CHECK(ans.status == 405);
    /* A part body too short to hold its pack count. */
    raw_signed(&ch, "PUT", "/v1/part/" JOB "/1/" WRITER "/1", "\x05\0\0\0", 4, counter++, 0, &ans);
    CHECK(ans.status == 400);

    st_peer_client *c = connect_to(s, &secret);
    CHECK_ERR(st_peer_put_part(c, "../x", 1, WRITER, 1, NULL, 0, (const uint8_t *)"m", 1),
              ST_ERR_INVALID);
    CHECK_ERR(st_peer_mark_durable(c, JOB, 1, "a/b", 1), ST_ERR_INVALID);
    CHECK(stats_of(s).replicas_held == 0 && stats_of(s).packs_held == 0);
    CHECK(!stray_entries(tmp_root));
    char peer_dir[300];
    snprintf(peer_dir, sizeof peer_dir, "%s/hostile/parts", tmp_root);
    DIR *d = opendir(peer_dir);
    int entries = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        entries += de->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK(entries == 0);
    st_peer_client_free(c);
    st_peer_server_stop(s);
}

int main(void)
{
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/secret", tmp_root);
    ut_write_file_mode(path, "a cluster secret of more than thirty-two bytes\n", 0600);
    CHECK_OK(st_peer_secret_load(path, &secret));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RUN(test_secret_file_rules);
    RUN(test_listen_rules);
    RUN(test_tls_rules);
    RUN(test_round_trip);
    RUN(test_replica_listing);
    RUN(test_sealed_replica);
    RUN(test_wrong_secret);
    RUN(test_replay_and_mac);
    RUN(test_corrupt_packs);
    RUN(test_cache_cap);
    RUN(test_orphan_eviction);
    RUN(test_forgotten_nonce);
    RUN(test_concurrent_senders);
    RUN(test_send_rate);
    RUN(test_hostile_paths);
    st_peer_secret_wipe(&secret);
    curl_global_cleanup();
    ut_rmtree(tmp_root);
    return ut_finish();
}
