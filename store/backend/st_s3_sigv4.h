/*
 * st_s3_sigv4 — AWS signature V4 of one S3 request with its headers, for
 * the requests that libcurl's own signer (CURLOPT_AWS_SIGV4) gets wrong.
 * curl before 8.10 sorts the canonical headers as whole "name:value"
 * lines, so a header whose name is a prefix of another's
 * (x-amz-server-side-encryption-customer-key and its -MD5, or
 * x-amz-server-side-encryption and its -aws-kms-key-id) lands in the
 * wrong place and the server refuses the signature (fixed in curl 8.10).
 *
 * No I/O, no state; the caller gives the time.
 */
#ifndef ST_S3_SIGV4_H
#define ST_S3_SIGV4_H

#include <stddef.h>
#include <time.h>

#include "st_error.h"

/* What to sign. headers: "Name: value" lines, NULL-terminated; every one
 * whose name is "host" or starts with "x-amz-" (any case) is signed, the
 * others are sent unsigned. It must hold Host and x-amz-content-sha256
 * (the payload hash, also used in the canonical request). */
typedef struct st_s3_sigv4_req {
    const char *method;         /* "GET", "PUT", ... */
    const char *path;           /* the URL's path, as sent ("/bucket/key") */
    const char *query;          /* canonical already (sorted, encoded), or NULL */
    const char *const *headers; /* see above */
    const char *access_key_id;  /* the credential */
    const char *secret;         /* the secret key; never copied out */
    const char *region;         /* "us-east-1" */
    time_t now;                 /* the request time (UTC seconds) */
} st_s3_sigv4_req;

#define ST_S3_SIGV4_AMZDATE_LINE_MAX 32 /* "x-amz-date: 20130524T000000Z" + NUL */

/*!
 * Signs r: writes the "x-amz-date: ..." header line to send (and signed)
 * into date_line, and the "Authorization: AWS4-HMAC-SHA256 ..." line into
 * auth_line (cap bytes). ST_OK; ST_ERR_INVALID when a header has no ':',
 * there is no x-amz-content-sha256 header, or auth_line is too small;
 * ST_ERR_NOMEM.
 */
st_err st_s3_sigv4_sign(const st_s3_sigv4_req *r, char date_line[ST_S3_SIGV4_AMZDATE_LINE_MAX],
                        char *auth_line, size_t cap);

#endif
