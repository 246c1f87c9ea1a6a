/*
 * st_peer_tls — the certificate and private key a peer server presents
 * when it speaks TLS (docs/PEERS.md, "Transport security").
 *
 * Both are PEM files read whole into memory, NUL-terminated, as
 * libmicrohttpd takes them (MHD_OPTION_HTTPS_MEM_CERT and _KEY). The key
 * file must be private to the daemon's user, the rule of the cluster
 * secret (st_read_private_file); its bytes are wiped at free and never
 * appear in a message. Threads: values only.
 */
#ifndef ST_PEER_TLS_H
#define ST_PEER_TLS_H

#include <stddef.h>

#include "st_error.h"

#define ST_PEER_TLS_PEM_MAX (1u << 20) /* bytes of a certificate chain or a key file */

typedef struct st_peer_tls {
    char *cert; /* PEM, NUL-terminated; the chain the server presents */
    char *key;  /* PEM, NUL-terminated; wiped at free */
    size_t key_len;
} st_peer_tls;

/*!
 * Reads cert_file (a regular file, any mode) and key_file (a regular file
 * owned by the effective uid, mode 0600 or stricter) into *out and checks
 * that the key is the certificate's. ST_ERR_INVALID with a message naming
 * the file and the rule it breaks (mode, owner, size, not PEM, not a
 * pair); ST_ERR_NOMEM. *out holds nothing on failure.
 */
st_err st_peer_tls_load(const char *cert_file, const char *key_file, st_peer_tls *out);

/*! Wipes the key and frees both. NULL ok; *t is left empty. */
void st_peer_tls_free(st_peer_tls *t);

#endif
