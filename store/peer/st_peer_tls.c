/*
 * st_peer_tls — a TLS peer server's certificate and key. See the header.
 */
#include "peer/st_peer_tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_fsutil.h"

/* A certificate file: public, any mode, read whole. */
static st_err read_cert(const char *path, char **out)
{
    int fd = -1;
    struct stat st;
    *out = NULL;
    st_err e = st_open_regular(path, O_RDONLY, 0, &fd);
    if (e)
        return st_seterr(ST_ERR_INVALID, "peer TLS certificate file: %s", st_errmsg());
    char *buf = NULL;
    size_t got = 0;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > ST_PEER_TLS_PEM_MAX)
        e = st_seterr(ST_ERR_INVALID, "peer TLS certificate file %s: more than %u bytes", path,
                      ST_PEER_TLS_PEM_MAX);
    else if (!(buf = malloc(ST_PEER_TLS_PEM_MAX + 1)))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    else if (st_read_full(fd, buf, ST_PEER_TLS_PEM_MAX, &got, path))
        e = st_seterr(ST_ERR_INVALID, "peer TLS certificate file %s: %s", path, st_errmsg());
    close(fd);
    if (!e) {
        buf[got] = '\0';
        *out = buf;
        buf = NULL;
    }
    free(buf);
    return e;
}

/* 1 if key is the private key of the first certificate of cert. */
static int is_pair(const char *cert, const char *key, size_t key_len)
{
    BIO *cb = BIO_new_mem_buf(cert, -1), *kb = BIO_new_mem_buf(key, (int)key_len);
    X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
    EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    int ok = x && k && X509_check_private_key(x, k) == 1;
    EVP_PKEY_free(k);
    X509_free(x);
    BIO_free(kb);
    BIO_free(cb);
    ERR_clear_error(); /* a refusal is said by the caller, not left queued */
    return ok;
}

st_err st_peer_tls_load(const char *cert_file, const char *key_file, st_peer_tls *out)
{
    memset(out, 0, sizeof *out);
    if (!cert_file || !key_file)
        return st_seterr(ST_ERR_INVALID, "peer TLS: a certificate needs its key and a key its "
                                         "certificate (--peer-tls-cert and --peer-tls-key)");
    st_err e = read_cert(cert_file, &out->cert);
    if (!e && !(out->key = malloc(ST_PEER_TLS_PEM_MAX + 1)))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e)
        e = st_read_private_file(key_file, "peer TLS key file", out->key, ST_PEER_TLS_PEM_MAX,
                                 &out->key_len);
    if (!e) {
        out->key[out->key_len] = '\0';
        if (!is_pair(out->cert, out->key, out->key_len))
            e = st_seterr(ST_ERR_INVALID,
                          "peer TLS certificate file %s and key file %s: not a PEM certificate "
                          "and its private key",
                          cert_file, key_file);
    }
    if (e)
        st_peer_tls_free(out);
    return e;
}

void st_peer_tls_free(st_peer_tls *t)
{
    if (!t)
        return;
    if (t->key)
        OPENSSL_cleanse(t->key, ST_PEER_TLS_PEM_MAX + 1);
    free(t->key);
    free(t->cert);
    memset(t, 0, sizeof *t);
}
