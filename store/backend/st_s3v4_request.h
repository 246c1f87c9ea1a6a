/*
 * st_s3v4_request — one request of the V4 backend (st_backend_s3v4.c has
 * the ops, open and close, and the file comment that says how requests are
 * driven, signed and classified): the connection pool, libcurl's
 * callbacks, the request itself and its error classification. Internal to
 * the backend.
 */
#ifndef ST_S3V4_REQUEST_H
#define ST_S3V4_REQUEST_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "backend/st_s3_common.h"

#define POOL_MAX       64
#define LIST_PAGE_KEYS 1000
#define ERR_BODY_MAX   (64 * 1024)
#define POLL_MS        100
/* A ranged GET's receive buffer (CURL_MAX_READ_SIZE is at least this). */
#define GET_RECV_BUFFER (512L * 1024)
#define EMPTY_SHA256    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct v4_conn {
    CURLM *multi;
    CURL *easy;
} v4_conn;

typedef struct v4_ctx {
    st_s3_config cfg;               /* read-only after open */
    char sigv4[96];                 /* "aws:amz:REGION:s3" */
    char base[ST_S3_HOST_MAX + 96]; /* "http://host/bucket/" or "http://bucket.host/" */

    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

    pthread_mutex_t pool_lock;
    v4_conn *pool[POOL_MAX]; /* guarded by pool_lock */
    int pool_n;              /* guarded by pool_lock */

    /* Server-side encryption headers (--s3-sse), built at open: put_sse
     * on every PUT, read_sse (SSE-C only) on every GET and HEAD of an
     * object. NULL-terminated; the SSE-C key line is wiped on close. */
    char *put_sse[4];
    char *read_sse[4];

    /* Set once an answer proved the bucket exists; until then a HEAD 404
     * (no body) is checked with a GET that can say NoSuchBucket. */
    atomic_int bucket_seen;
    /* Set once the store answered DeleteObjects with "not implemented":
     * del_many then deletes key by key. */
    atomic_int no_batch_delete;
    /* Whether the store honours If-None-Match on a PUT (v4_cond below):
     * probed at the first put_new, under cond_lock, then read only. */
    atomic_int cond_put;
    pthread_mutex_t cond_lock;
} v4_ctx;

/* v4_ctx.cond_put. */
enum v4_cond { V4_COND_UNKNOWN = 0, V4_COND_YES = 1, V4_COND_NO = 2 };

/* One request: what it sends and what came back. On the caller's stack. */
typedef struct v4_req {
    v4_ctx *c;
    const char *op;          /* for messages: "put", "get", ... */
    const char *self_method; /* the HTTP method, for sign_self */
    const char *key;
    char *const *sse; /* SSE headers to send (ctx put_sse/read_sse), or NULL */
    int self_signed;  /* signed by st_s3_sigv4, not by curl (request()) */

    st_bytes *out;           /* 2xx body goes here (NULL: dropped, unless sink) */
    const st_get_sink *sink; /* or is handed here as it arrives (get_stream) */
    uint64_t sunk;           /* body bytes the sink has taken */
    int partial_only;        /* the Range starts past 0: a 200 (whole object) is refused */
    st_err sink_err;         /* the sink's refusal (or ours), which ends the request */
    char sink_msg[512];      /* its message, kept across the abort */
    uint64_t want_max;       /* most body bytes a 2xx may bring */
    st_bytes err_body;       /* non-2xx body, up to ERR_BODY_MAX */
    int overflow, nomem;
    long recv_buffer; /* CURLOPT_BUFFERSIZE for a large body, 0: libcurl's 16 KiB */

    uint64_t moved;           /* bytes moved either way: the stall clock */
    uint64_t uploaded;        /* body bytes sent so far */
    int64_t content_length;   /* of the answer, -1 if unknown */
    int64_t date_ns;          /* its Date header (the store's clock), 0 if none */
    int64_t last_modified_ns; /* its Last-Modified header, 0 if none */
    int sse_confirmed;        /* the answer names the SSE asked for (sse_confirms) */
    int timed_out;            /* 1: stall, 2: deadline, 3: the observer stopped it */
    CURLcode cc;
    long status;
    char errbuf[CURL_ERROR_SIZE];
    char code[64]; /* S3 error code from the body, "" if none */
    char msg[200]; /* server's message, scrubbed */

    char full_key[ST_S3_KEY_MAX + 1]; /* an op on one object: prefix + key (object_req_init) */
} v4_req;

/*! Sends one request (see the comment at its definition) on a pooled
 *  connection of c. */
st_err v4_request(v4_ctx *c, v4_req *r, const char *method, const char *name, const char *query,
                  const void *body, size_t body_len, const char *const *extra);
/*! A fresh request of op ("put", "list", ...) naming key in its messages. */
void v4_req_init(v4_req *r, v4_ctx *c, const char *op, const char *key);
/*! v4_req_init of op on one object, its full name into r->full_key. */
st_err v4_object_req_init(v4_req *r, v4_ctx *c, const char *op, const char *key);
/*! "Content-MD5: <base64 of the body's MD5>" into line. */
st_err v4_content_md5_line(const void *body, size_t len, char line[64]);
/*! Frees a pooled connection (at close). */
void v4_conn_free(v4_conn *k);

#endif
