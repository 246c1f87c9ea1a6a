/*
 * st_peer_auth — the cluster secret and the request authentication that the
 * peer server and client share (docs/PEERS.md, "Transport").
 *
 * A client asks GET /v1/hello for a fresh server nonce, picks its own client
 * nonce and derives a channel key from the secret; each later request
 * carries a counter and an HMAC over (counter, method, path, XXH3-128 of the
 * body) under that key, in the headers named below. The byte layouts of the
 * key input and of the MAC input are written down in docs/PEERS.md and
 * built only here, so the two sides cannot drift apart.
 *
 * The secret's bytes never appear in a message. Threads: values only.
 */
#ifndef ST_PEER_AUTH_H
#define ST_PEER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"

#define ST_PEER_SECRET_MIN 32
#define ST_PEER_SECRET_MAX 4096

#define ST_PEER_NONCE_LEN 32 /* bytes of a server or client nonce */
#define ST_PEER_KEY_LEN   32 /* HMAC-SHA256 output: channel key and MAC */
#define ST_PEER_PATH_MAX  1024

/* The protocol's name: the first bytes of the key input, and the first line
 * of a hello answer. */
#define ST_PEER_PROTOCOL "ckptfs-peer v1"

/* Request headers of an authenticated request. */
#define ST_PEER_HDR_SERVER_NONCE "X-Ckpt-Server-Nonce" /* 64 hex */
#define ST_PEER_HDR_CLIENT_NONCE "X-Ckpt-Client-Nonce" /* 64 hex */
#define ST_PEER_HDR_NODE         "X-Ckpt-Node"         /* the client's node name */
#define ST_PEER_HDR_COUNTER      "X-Ckpt-Counter"      /* decimal, 1 and up */
#define ST_PEER_HDR_BODY         "X-Ckpt-Body"         /* 32 hex: XXH3-128 of the body */
#define ST_PEER_HDR_MAC          "X-Ckpt-Mac"          /* 64 hex */

/* The body of a 401 for a wrong MAC: the client's cue for ST_ERR_AUTH. */
#define ST_PEER_WRONG_SECRET "wrong cluster secret"

#define ST_PEER_CA_PATH_MAX 4096 /* bytes of a CA file's path, its NUL included */

/* What a node proves itself with to its peers and checks them by: the
 * cluster secret, and the CA file an https:// peer's certificate must chain
 * to (docs/PEERS.md, "Transport security"). The CA travels with the secret
 * because every client given the one may meet a TLS peer, whose address a
 * replica record can name. */
typedef struct st_peer_secret {
    uint8_t bytes[ST_PEER_SECRET_MAX];
    size_t len;
    char ca_file[ST_PEER_CA_PATH_MAX]; /* "": the system's CA store */
} st_peer_secret;

/*!
 * Loads the cluster secret from path: a regular file (opened O_NOFOLLOW),
 * owned by the effective uid, mode 0600 or stricter (no group or other
 * bits), of ST_PEER_SECRET_MIN..ST_PEER_SECRET_MAX bytes once one trailing
 * newline is stripped. ST_ERR_INVALID with a message naming the file and the
 * rule it breaks otherwise; *out is wiped on every failure.
 */
st_err st_peer_secret_load(const char *path, st_peer_secret *out);

/*!
 * Sets the CA file (PEM) the certificate of an https:// peer must chain to;
 * NULL or "" leaves the system's CA store. The file must be a readable
 * regular file: ST_ERR_INVALID naming it otherwise. Its content is read by
 * the TLS library at each connection, not here.
 */
st_err st_peer_secret_set_ca(st_peer_secret *s, const char *ca_file);

/*! Overwrites the secret's bytes (OPENSSL_cleanse). NULL ok. */
void st_peer_secret_wipe(st_peer_secret *s);

/*!
 * The channel key: HMAC-SHA256(secret, ST_PEER_PROTOCOL ‖ 0x00 ‖ server
 * nonce ‖ client nonce ‖ LE16 length ‖ client node ‖ LE16 length ‖ server
 * node). Node names are at most ST_NODE_MAX bytes. ST_OK, or ST_ERR_INVALID
 * for a name too long, ST_ERR_NOMEM.
 */
st_err st_peer_key_derive(const st_peer_secret *secret, const uint8_t *server_nonce,
                          const uint8_t *client_nonce, const char *client_node,
                          const char *server_node, uint8_t key[ST_PEER_KEY_LEN]);

/*!
 * The MAC of one request: HMAC-SHA256(key, LE64 counter ‖ LE16 length ‖
 * method ‖ LE16 length ‖ path ‖ body id (16 bytes, st_id order)). path is
 * the request's path without a query, at most ST_PEER_PATH_MAX bytes.
 * ST_OK, ST_ERR_INVALID (path too long), ST_ERR_NOMEM.
 */
st_err st_peer_mac(const uint8_t key[ST_PEER_KEY_LEN], uint64_t counter, const char *method,
                   const char *path, const st_id *body_id, uint8_t mac[ST_PEER_KEY_LEN]);

/*! Writes 2n lowercase hex digits and a NUL into out[2n + 1]. */
void st_peer_hex(const uint8_t *in, size_t n, char *out);

/*! Parses exactly 2n hex digits of hex into out[n]. 0, or -1 on bad input. */
int st_peer_unhex(const char *hex, uint8_t *out, size_t n);

#endif
