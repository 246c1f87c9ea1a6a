/*
 * st_s3_sigv4 — AWS signature V4 (AWS "Signature Version 4 signing
 * process", header form), for st_backend_s3v4's requests that carry
 * headers curl < 8.10 would sign in the wrong order (st_s3_sigv4.h).
 *
 * Canonical request: method, path, query, the signed headers as
 * "name:value" lines sorted by name (lower case, values trimmed), the list
 * of their names, the payload hash. The signing key is derived from the
 * secret by HMAC-SHA256 over date, region, "s3", "aws4_request" and wiped
 * after use.
 *
 * Threads: no shared state.
 */
#include "backend/st_s3_sigv4.h"

#include <ctype.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/st_wire.h"

#define MAX_SIGNED 16

typedef struct signed_header {
    char name[64];     /* lower case */
    const char *value; /* trimmed start; value_len without trailing blanks */
    size_t value_len;
} signed_header;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const signed_header *)a)->name, ((const signed_header *)b)->name);
}

static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hmac(const void *key, size_t key_len, const char *msg, size_t msg_len,
                unsigned char out[SHA256_DIGEST_LENGTH])
{
    unsigned out_len = 0;
    return HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, msg_len, out,
                &out_len) != NULL;
}

/* The signed headers of r, sorted; *n their count; the payload hash. */
static st_err pick_headers(const st_s3_sigv4_req *r, signed_header *out, size_t *n,
                           const char **payload, size_t *payload_len)
{
    *n = 0;
    *payload = NULL;
    for (size_t i = 0; r->headers[i]; i++) {
        const char *line = r->headers[i], *colon = strchr(line, ':');
        if (!colon)
            return st_seterr(ST_ERR_INVALID, "sigv4: a header line without ':'");
        size_t name_len = (size_t)(colon - line);
        if (!(name_len == 4 && strncasecmp(line, "host", 4) == 0) &&
            !(name_len > 6 && strncasecmp(line, "x-amz-", 6) == 0))
            continue;
        if (*n == MAX_SIGNED || name_len >= sizeof out->name)
            return st_seterr(ST_ERR_INVALID, "sigv4: too many or too long headers");
        signed_header *h = &out[(*n)++];
        for (size_t k = 0; k < name_len; k++)
            h->name[k] = (char)tolower((unsigned char)line[k]);
        h->name[name_len] = '\0';
        h->value = colon + 1;
        while (*h->value == ' ' || *h->value == '\t')
            h->value++;
        h->value_len = strlen(h->value);
        while (h->value_len &&
               (h->value[h->value_len - 1] == ' ' || h->value[h->value_len - 1] == '\t'))
            h->value_len--;
        if (strcmp(h->name, "x-amz-content-sha256") == 0) {
            *payload = h->value;
            *payload_len = h->value_len;
        }
    }
    if (!*payload)
        return st_seterr(ST_ERR_INVALID, "sigv4: no x-amz-content-sha256 header");
    qsort(out, *n, sizeof *out, by_name);
    return ST_OK;
}

st_err st_s3_sigv4_sign(const st_s3_sigv4_req *r, char date_line[ST_S3_SIGV4_AMZDATE_LINE_MAX],
                        char *auth_line, size_t cap)
{
    signed_header hs[MAX_SIGNED + 1];
    size_t n = 0, payload_len = 0;
    const char *payload = NULL;
    char amz_date[17], day[9], names[MAX_SIGNED * 65] = "";
    struct tm tm;
    gmtime_r(&r->now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    memcpy(day, amz_date, 8);
    day[8] = '\0';
    snprintf(date_line, ST_S3_SIGV4_AMZDATE_LINE_MAX, "x-amz-date: %s", amz_date);

    /* The date header is signed like the caller's. */
    const char *const *given = r->headers;
    size_t n_given = 0;
    while (given[n_given])
        n_given++;
    const char **all = malloc((n_given + 2) * sizeof *all);
    if (!all)
        return st_seterr(ST_ERR_NOMEM, "sigv4: out of memory");
    memcpy(all, given, n_given * sizeof *all);
    all[n_given] = date_line;
    all[n_given + 1] = NULL;
    st_s3_sigv4_req with_date = *r;
    with_date.headers = all;
    st_err e = pick_headers(&with_date, hs, &n, &payload, &payload_len);
    st_bytes canon = {0};
    unsigned char k1[SHA256_DIGEST_LENGTH], k2[SHA256_DIGEST_LENGTH], md[SHA256_DIGEST_LENGTH];
    char *secret_key = NULL;
    if (e)
        goto out;

    /* The canonical request. */
    e = ST_ERR_NOMEM;
    if (st_bytes_append(&canon, r->method, strlen(r->method)) || st_bytes_append(&canon, "\n", 1) ||
        st_bytes_append(&canon, r->path, strlen(r->path)) || st_bytes_append(&canon, "\n", 1) ||
        (r->query && st_bytes_append(&canon, r->query, strlen(r->query))) ||
        st_bytes_append(&canon, "\n", 1))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        if (st_bytes_append(&canon, hs[i].name, strlen(hs[i].name)) ||
            st_bytes_append(&canon, ":", 1) ||
            st_bytes_append(&canon, hs[i].value, hs[i].value_len) ||
            st_bytes_append(&canon, "\n", 1))
            goto nomem;
        if (i)
            strcat(names, ";");
        strcat(names, hs[i].name);
    }
    if (st_bytes_append(&canon, "\n", 1) || st_bytes_append(&canon, names, strlen(names)) ||
        st_bytes_append(&canon, "\n", 1) || st_bytes_append(&canon, payload, payload_len))
        goto nomem;
    SHA256(canon.data, canon.len, md);
    char canon_hex[2 * SHA256_DIGEST_LENGTH + 1];
    hex(md, sizeof md, canon_hex);

    /* The string to sign and the signing key. */
    char scope[128], to_sign[256];
    snprintf(scope, sizeof scope, "%s/%s/s3/aws4_request", day, r->region);
    int to_sign_len = snprintf(to_sign, sizeof to_sign, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date,
                               scope, canon_hex);
    size_t sk_len = strlen(r->secret) + 5;
    if (!(secret_key = malloc(sk_len)))
        goto nomem;
    snprintf(secret_key, sk_len, "AWS4%s", r->secret);
    if (!hmac(secret_key, sk_len - 1, day, 8, k1) ||
        !hmac(k1, sizeof k1, r->region, strlen(r->region), k2) ||
        !hmac(k2, sizeof k2, "s3", 2, k1) || !hmac(k1, sizeof k1, "aws4_request", 12, k2) ||
        !hmac(k2, sizeof k2, to_sign, (size_t)to_sign_len, md))
        goto nomem;
    char sig_hex[2 * SHA256_DIGEST_LENGTH + 1];
    hex(md, sizeof md, sig_hex);
    int len = snprintf(auth_line, cap,
                       "Authorization: AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
                       "Signature=%s",
                       r->access_key_id, scope, names, sig_hex);
    e = len > 0 && (size_t)len < cap
            ? ST_OK
            : st_seterr(ST_ERR_INVALID, "sigv4: the Authorization line does not fit");
    goto out;
nomem:
    e = st_seterr(ST_ERR_NOMEM, "sigv4: out of memory");
out:
    if (secret_key) {
        OPENSSL_cleanse(secret_key, strlen(secret_key));
        free(secret_key);
    }
    OPENSSL_cleanse(k1, sizeof k1);
    OPENSSL_cleanse(k2, sizeof k2);
    st_bytes_free(&canon);
    free(all);
    return e;
}
