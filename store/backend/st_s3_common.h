/*
 * st_s3_common — what the two s3:// backends share, in one place: the
 * SigV2 one on libs3 (st_backend_s3.c) and the SigV4 one on libcurl
 * (st_backend_s3v4.c). docs/S3.md is the user's view of every rule here.
 *
 *   - configuration: the store URL (bucket, prefix), the endpoint (given,
 *     $CKPT_S3_ENDPOINT, or derived from the region), addressing, region,
 *     credentials (environment, AWS_PROFILE in ~/.aws/credentials and
 *     ~/.aws/config), the session token, the CA file, the timeouts, the
 *     server-side encryption asked for (--s3-sse; an SSE-C key file);
 *   - error classification: an HTTP status and S3 error code, or a
 *     transport failure, to an st_err and a sentence naming the cause and
 *     what to check;
 *   - scrubbing: a server's text with the secret taken out;
 *   - the get contract (empty and huge ranges, a refused range), over
 *     each backend's own HEAD and ranged GET (st_s3_get).
 *
 * Secrets: the secret key, the session token and the SSE-C key live only
 * in st_s3_config (zeroed by st_s3_config_free); no message built here
 * contains them.
 *
 * Threads: st_s3_config_load runs on the opening thread and reads the
 * environment; a loaded config is read-only and may be shared. st_s3_get
 * does its I/O through the backend's callbacks, on the calling thread; the
 * other functions are pure.
 */
#ifndef ST_S3_COMMON_H
#define ST_S3_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "backend/st_backend.h"

#define ST_S3_BUCKET_MAX 63
#define ST_S3_HOST_MAX   255
#define ST_S3_KEY_MAX    1024 /* S3's limit on an object name, in bytes */

typedef enum st_s3_signature {
    ST_S3_SIG_V4 = 0, /* the default */
    ST_S3_SIG_V2 = 1,
} st_s3_signature;

/* Server-side encryption asked of the store (--s3-sse; docs/S3.md, "Encryption
 * at rest in the store"). */
typedef enum st_s3_sse {
    ST_S3_SSE_NONE = 0, /* no header: the bucket's default */
    ST_S3_SSE_AES256,   /* SSE-S3: keys the store manages */
    ST_S3_SSE_KMS,      /* SSE-KMS: a key of the store's KMS */
    ST_S3_SSE_C,        /* SSE-C: the caller's key, sent with every request */
} st_s3_sse;

#define ST_S3_SSE_C_KEY_LEN 32 /* AES-256 */

typedef struct st_s3_config {
    char bucket[ST_S3_BUCKET_MAX + 1];
    char prefix[ST_KEY_MAX + 2]; /* "" or "a/b/" */
    size_t prefix_len;
    int https;                          /* the endpoint's scheme */
    char host[ST_S3_HOST_MAX + 8];      /* "host[:port]" of the endpoint, without the bucket */
    char endpoint[ST_S3_HOST_MAX + 16]; /* "https://host[:port]", for messages */
    int virtual_host;                   /* 1: bucket.host/key; 0: host/bucket/key */
    st_s3_signature signature;
    char region[64];
    char *access_key_id;
    char *secret;        /* never printed; zeroed on free */
    char *session_token; /* NULL or AWS_SESSION_TOKEN; never printed; zeroed on free */
    char *ca_file;       /* NULL: the system CA store */
    unsigned timeout_ms, stall_ms;
    st_s3_sse sse;
    char sse_kms_key_id[256];   /* ST_S3_SSE_KMS: the key's id or ARN, "" for the default key */
    char *sse_c_key_b64;        /* ST_S3_SSE_C: base64 of the key; never printed; zeroed on free */
    char sse_c_key_md5_b64[32]; /* ST_S3_SSE_C: base64 of the key's MD5 */
    /* opts->observer (borrowed): its should_stop aborts a request in flight;
     * its log hears the conditional-PUT probe's answer. */
    const st_backend_observer *observer;
} st_s3_config;

/*!
 * Fills cfg (zero it first) from the store URL "s3://bucket[/prefix]" and
 * opts (may be NULL) and the environment, as docs/S3.md describes.
 * ST_ERR_INVALID for a malformed URL or option, ST_ERR_PERMANENT when no
 * credentials can be found; the message says which source was wrong, never
 * a secret. On error cfg may hold allocations: st_s3_config_free it anyway.
 */
st_err st_s3_config_load(st_s3_config *cfg, const char *url, const st_backend_opts *opts);

/*! The name of cfg's SSE mode for messages: "AES256", "aws:kms", "c" (SSE-C),
 *  or "none". Never the key. */
const char *st_s3_sse_name(const st_s3_config *cfg);

/*! Frees and zeroes what cfg holds. NULL is a no-op. */
void st_s3_config_free(st_s3_config *cfg);

/*! The signature that opts and $CKPT_S3_SIGNATURE ask for (default v4), or
 *  ST_ERR_INVALID for an unknown value. */
st_err st_s3_signature_choice(const st_backend_opts *opts, st_s3_signature *out);

/* What an aborted request's message says (st_backend_observer.should_stop). */
#define ST_S3_STOPPED "the caller stopped waiting"

/*! Deadline of one request carrying `bytes`: timeout_ms + 1 s per MiB. */
uint64_t st_s3_deadline_ms(const st_s3_config *cfg, uint64_t bytes);

/*! The object name of key under the URL's prefix into buf (ST_S3_KEY_MAX+1
 *  bytes); ST_ERR_INVALID when it is longer than S3 allows. */
st_err st_s3_full_key(const st_s3_config *cfg, const char *op, const char *key, char *buf);

/* The store's clock in its answers (docs/GC.md, "Clocks"): HTTP dates
 * ("Date:", "Last-Modified:") have a resolution of one second. */
#define ST_S3_CLOCK_SLACK_NS 1000000000ll
/* A key no store key can be (a component starting with '.'): a HEAD of it
 * answers 404 with the store's Date, which is the store's "now". */
#define ST_S3_CLOCK_KEY ".ckptfs-clock"
/* The object put_new's probe writes and deletes (docs/S3.md, "Conditional
 * PUT"), with "-<pid>-<n>" appended: a name no store key can be. */
#define ST_S3_COND_PROBE_KEY ".ckptfs-probe-cond"

/*! Parses an HTTP date value (RFC 9110 IMF-fixdate, "Sun, 06 Nov 1994
 *  08:49:37 GMT", leading blanks and a trailing CR LF allowed) into ns
 *  since the epoch; 0 if it is not one. */
int64_t st_s3_http_date_ns(const char *value);

/* Above this, Range end arithmetic on the server side (s3rver parses with
 * JavaScript numbers) is unsafe; such lengths are sent as "to the end". */
#define ST_S3_RANGE_LEN_MAX (UINT64_C(1) << 52)

/* A backend's ranged GET, for st_s3_get: [off, off+len) (len ST_GET_TO_END:
 * to the end) of the object named fk (key's full name) into out, or to
 * sink as it arrives (out NULL; only a backend with a get_stream op is
 * given a sink). When the server refused the range as starting at or past
 * the end (HTTP 416), *refused is 1 and the result ST_ERR_INVALID. */
typedef st_err (*st_s3_range_fn)(void *ctx, const char *key, const char *fk, uint64_t off,
                                 uint64_t len, st_bytes *out, const st_get_sink *sink,
                                 int *refused);

/*!
 * st_backend_ops.get (out) and get_stream (sink, out NULL) by the contract
 * (st_backend.h), for both S3 backends:
 * their ranged GET (range) and HEAD (stat, the backend's stat op) on ctx.
 * S3 cannot express an empty range and servers read huge offsets in
 * doubtful ways, so for those the size is asked first; a refused range is
 * an empty result at the end and ST_ERR_INVALID past it.
 */
st_err st_s3_get(const st_s3_config *cfg, void *ctx, st_s3_range_fn range,
                 st_err (*stat)(void *ctx, const char *key, uint64_t *size), const char *key,
                 uint64_t off, uint64_t len, st_bytes *out, const st_get_sink *sink);

/* What went wrong with one request, as far as the backend knows it. */
typedef enum st_s3_transport {
    ST_S3_NET_OK = 0,        /* an HTTP answer arrived: see http_status and code */
    ST_S3_NET_FAILED,        /* connection refused, reset, DNS, cut body: may pass later */
    ST_S3_NET_TIMEOUT,       /* stalled or past its deadline */
    ST_S3_NET_TLS_UNTRUSTED, /* the server's certificate is not trusted */
    ST_S3_NET_TLS_FAILED,    /* another TLS failure (handshake, CA file unreadable) */
} st_s3_transport;

/*!
 * The class of a failed request, and in *cause a fixed sentence that names
 * the cause and what to check (e.g. "S3 refused the signature
 * (SignatureDoesNotMatch): check AWS_SECRET_ACCESS_KEY"). code is the S3
 * error code from the answer's body ("" or NULL if none). Classes:
 * not-found (404, NoSuchKey), transient (transport failures, 5xx, 408,
 * 429, SlowDown, RequestTimeout, InternalError), permanent (403, auth
 * codes, NoSuchBucket, redirects to another region, untrusted
 * certificates), invalid (other 4xx request errors).
 */
st_err st_s3_classify(st_s3_transport net, int http_status, const char *code, const char **cause);

/*! Copies src into dst (cap bytes), every occurrence of secret (may be
 *  NULL) replaced by "[redacted]", newlines by spaces. */
void st_s3_scrub_copy(char *dst, size_t cap, const char *src, const char *secret);

#endif
