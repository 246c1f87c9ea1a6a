/*
 * st_peer_auth — the cluster secret file and the HMACs of the peer
 * transport. See the header; docs/PEERS.md ("Transport") has the byte
 * layouts. Threads: no shared state.
 */
#include "peer/st_peer_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "format/st_part.h"
#include "util/st_fsutil.h"
#include "util/st_wire.h"

void st_peer_secret_wipe(st_peer_secret *s)
{
    if (s)
        OPENSSL_cleanse(s, sizeof *s);
}

st_err st_peer_secret_load(const char *path, st_peer_secret *out)
{
    st_peer_secret_wipe(out);
    size_t got = 0;
    uint8_t buf[ST_PEER_SECRET_MAX + 2];
    st_err e = st_read_private_file(path, "peer secret file", buf, sizeof buf, &got);
    if (!e && got && buf[got - 1] == '\n')
        got--;
    if (!e && got && buf[got - 1] == '\r')
        got--;
    if (!e && (got < ST_PEER_SECRET_MIN || got > ST_PEER_SECRET_MAX))
        e = st_seterr(ST_ERR_INVALID,
                      "peer secret file %s: the secret must be %d to %d bytes, it has %zu", path,
                      ST_PEER_SECRET_MIN, ST_PEER_SECRET_MAX, got);
    if (!e) {
        memcpy(out->bytes, buf, got);
        out->len = got;
    }
    OPENSSL_cleanse(buf, sizeof buf);
    if (e)
        st_peer_secret_wipe(out);
    return e;
}

st_err st_peer_secret_set_ca(st_peer_secret *s, const char *ca_file)
{
    s->ca_file[0] = '\0';
    if (!ca_file || !*ca_file)
        return ST_OK;
    if (strlen(ca_file) >= sizeof s->ca_file)
        return st_seterr(ST_ERR_INVALID, "peer CA file %.64s...: path too long", ca_file);
    int fd = -1;
    st_err e = st_open_regular(ca_file, O_RDONLY, 0, &fd);
    if (e)
        return st_seterr(ST_ERR_INVALID, "peer CA file: %s", st_errmsg());
    close(fd);
    snprintf(s->ca_file, sizeof s->ca_file, "%s", ca_file);
    return ST_OK;
}

/* HMAC-SHA256 of in[0..n) under key[0..key_len). */
static st_err hmac_sha256(const uint8_t *key, size_t key_len, const st_bytes *in,
                          uint8_t out[ST_PEER_KEY_LEN])
{
    unsigned int out_len = 0;
    if (!HMAC(EVP_sha256(), key, (int)key_len, in->data, in->len, out, &out_len) ||
        out_len != ST_PEER_KEY_LEN)
        return st_seterr(ST_ERR_NOMEM, "peer: HMAC-SHA256 failed");
    return ST_OK;
}

/* LE16 length, then the bytes of s. */
static st_err put_field(st_bytes *b, const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max)
        return st_seterr(ST_ERR_INVALID, "peer: a field of %zu bytes passes the limit of %zu", n,
                         max);
    st_err e = st_bytes_put_le16(b, (uint16_t)n);
    return e ? e : st_bytes_append(b, s, n);
}

st_err st_peer_key_derive(const st_peer_secret *secret, const uint8_t *server_nonce,
                          const uint8_t *client_nonce, const char *client_node,
                          const char *server_node, uint8_t key[ST_PEER_KEY_LEN])
{
    st_bytes in = {0};
    st_err e = st_bytes_append(&in, ST_PEER_PROTOCOL, sizeof ST_PEER_PROTOCOL);
    if (!e)
        e = st_bytes_append(&in, server_nonce, ST_PEER_NONCE_LEN);
    if (!e)
        e = st_bytes_append(&in, client_nonce, ST_PEER_NONCE_LEN);
    if (!e)
        e = put_field(&in, client_node, ST_NODE_MAX);
    if (!e)
        e = put_field(&in, server_node, ST_NODE_MAX);
    if (!e)
        e = hmac_sha256(secret->bytes, secret->len, &in, key);
    st_bytes_free(&in);
    return e;
}

st_err st_peer_mac(const uint8_t key[ST_PEER_KEY_LEN], uint64_t counter, const char *method,
                   const char *path, const st_id *body_id, uint8_t mac[ST_PEER_KEY_LEN])
{
    st_bytes in = {0};
    st_err e = st_bytes_put_le64(&in, counter);
    if (!e)
        e = put_field(&in, method, 16);
    if (!e)
        e = put_field(&in, path, ST_PEER_PATH_MAX);
    if (!e)
        e = st_bytes_append(&in, body_id->b, ST_ID_LEN);
    if (!e)
        e = hmac_sha256(key, ST_PEER_KEY_LEN, &in, mac);
    st_bytes_free(&in);
    return e;
}

void st_peer_hex(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int st_peer_unhex(const char *hex, uint8_t *out, size_t n)
{
    if (!hex || strlen(hex) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = st_hex_value(hex[2 * i]), lo = st_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
