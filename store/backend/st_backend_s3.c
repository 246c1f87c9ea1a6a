/*
 * st_backend_s3 — the s3:// backend: objects in an S3 bucket through libs3
 * (Debian's libs3 2.0: AWS signature V2, path-style or virtual-hosted
 * addressing, http or https; no session tokens). docs/S3.md has the user's view; docs/BACKENDS.md
 * the contract.
 *
 * URL: s3://bucket[/prefix]. A key k is the S3 object "prefix/k" (or "k"
 * without a prefix); list strips the prefix again and skips any object
 * whose remaining name is not a valid key (foreign objects in a shared
 * bucket). S3 keys are at most 1024 bytes, so prefix + '/' + key must fit.
 *
 * Requests. Every op is one blocking call on the caller's thread, driven
 * through a libs3 request context (a curl multi handle) so that this file,
 * not curl, decides when a request has taken too long: libs3 2.0 has no
 * timeout parameter. Two limits apply to every request:
 *   - stall: no byte moved (sent or received) for stall_ms;
 *   - deadline: timeout_ms plus 1 s per MiB the request carries.
 * Either aborts the request (destroying its context) and reports
 * ST_ERR_TRANSIENT. Retrying is not done here but by the retry wrapper
 * that st_backend_open() puts around this backend (st_backend_retry.c);
 * the one exception is list_expand_cut()'s probes, parts of one list call.
 *
 * Responses cut short: libs3 2.0 reports a connection that closes early as
 * success (CURLE_PARTIAL_FILE -> S3StatusOK), so every answer is checked:
 * body length against Content-Length, an ETag in every GET/HEAD answer,
 * sizes of 0 confirmed, and the end of a listing confirmed by one more page
 * request (docs/S3.md, "Responses cut short").
 *
 * Connections. Request contexts are pooled per instance. A context keeps
 * its curl connection cache across requests, so each thread that uses the
 * backend in turn reuses a warm TCP connection; N threads at once use N
 * contexts (N connections). The pool is bounded (POOL_MAX); extra contexts
 * are destroyed when returned.
 *
 * Configuration (URL, endpoint, addressing, credentials, timeouts) and
 * error classes are shared with the V4 backend (st_s3_common.h): classify()
 * only turns a libs3 status into what st_s3_classify() takes.
 *
 * Secrets: the secret key lives only in this instance (zeroed on close) and
 * in libs3's signing; no message built here contains it, and a server's
 * error text is scrubbed of it before it is quoted.
 *
 * Threads: any op from any thread, concurrently. Shared state: the
 * read-only configuration (set in open, never changed), the context pool
 * (guarded by pool_lock) and bucket_seen (atomic). libs3 is initialised
 * once per process (pthread_once) and never deinitialised, because other
 * instances may still use it.
 */
#include "backend/st_backend.h"
#include "backend/st_s3_common.h"

#include <errno.h>
#include <inttypes.h>
#include <libs3.h>
#include <libxml/parser.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX       64
#define LIST_PAGE_KEYS 1000

typedef struct s3_ctx {
    /* Read-only after open. */
    st_s3_config cfg;           /* URL, endpoint, credentials, timeouts (st_s3_common.h) */
    S3BucketContext bucket_ctx; /* points into cfg */

    pthread_mutex_t pool_lock;
    S3RequestContext *pool[POOL_MAX]; /* guarded by pool_lock */
    int pool_n;                       /* guarded by pool_lock */

    /* Set once a request proved the bucket exists; until then a bodyless
     * 404 (HEAD) is checked once more, because it may mean "no bucket". */
    atomic_int bucket_seen;
} s3_ctx;

/* ---- libs3 process state ---- */

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static S3Status s3_init_status;

static void s3_init_once(void)
{
    /* Default host is irrelevant: every bucket context names its host. */
    s3_init_status = S3_initialize("ckptfs", S3_INIT_ALL, NULL);
    /* libs3 parses every XML answer with libxml2 but never initialises it,
     * and libxml2 2.9 initialises itself on first use without a lock: two
     * threads parsing their first answers at once (a publish sends its
     * checks at once, util/st_parallel.h) both build its global tables, and
     * one set leaks (LeakSanitizer saw it) or worse. Once initialised here,
     * before any request, libxml2 is thread-safe. */
    xmlInitParser();
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- one request ---- */

/* What a request's callbacks record; lives on the caller's stack. */
typedef struct s3_call {
    s3_ctx *c;
    int done;
    S3Status status;
    char server_msg[200]; /* the server's error text, scrubbed; "" if none */
    uint64_t moved;       /* bytes moved either way: the stall clock */
    int timed_out;        /* 1: stall, 2: deadline, 3: the observer stopped it */

    /* put */
    const uint8_t *put_data;
    size_t put_len, put_off;

    /* get / stat */
    st_bytes *out;
    uint64_t want_max; /* get: most bytes the range may return */
    int have_props, have_etag;
    uint64_t content_length;
    int64_t last_modified; /* s, the store's clock; -1 if the answer had none */
    int nomem, overflow;

    /* list page */
    st_bytes *page; /* keys as "key\0" + 8-byte size, one after the other */
    size_t page_keys;
    int truncated;

    /* an op on one object (object_call_begin) */
    S3RequestContext *rc;
    char full_key[S3_MAX_KEY_SIZE + 1]; /* prefix + key, the name S3 knows */
} s3_call;

static S3Status on_props(const S3ResponseProperties *p, void *arg)
{
    s3_call *call = arg;
    call->have_props = 1;
    call->have_etag = p->eTag != NULL;
    call->content_length = p->contentLength;
    call->last_modified = p->lastModified;
    call->moved++;
    if (call->out) {
        /* The whole body at once, when it is plausible: one allocation. */
        if (p->contentLength > call->want_max) {
            call->overflow = 1;
            return S3StatusAbortedByCallback;
        }
        if (p->contentLength <= SIZE_MAX / 2 &&
            st_bytes_reserve(call->out, (size_t)p->contentLength) != ST_OK) {
            call->nomem = 1;
            return S3StatusAbortedByCallback;
        }
    }
    return S3StatusOK;
}

static void on_complete(S3Status status, const S3ErrorDetails *err, void *arg)
{
    s3_call *call = arg;
    call->status = status;
    call->done = 1;
    call->server_msg[0] = '\0';
    if (err && err->message)
        st_s3_scrub_copy(call->server_msg, sizeof call->server_msg, err->message,
                         call->c->cfg.secret);
}

static int on_put_data(int cap, char *buf, void *arg)
{
    s3_call *call = arg;
    size_t n = call->put_len - call->put_off;
    if (n > (size_t)cap)
        n = (size_t)cap;
    memcpy(buf, call->put_data + call->put_off, n);
    call->put_off += n;
    call->moved += n;
    return (int)n;
}

static S3Status on_get_data(int n, const char *buf, void *arg)
{
    s3_call *call = arg;
    call->moved += (uint64_t)n;
    if ((uint64_t)call->out->len + (uint64_t)n > call->want_max) {
        call->overflow = 1;
        return S3StatusAbortedByCallback;
    }
    if (st_bytes_append(call->out, buf, (size_t)n) != ST_OK) {
        call->nomem = 1;
        return S3StatusAbortedByCallback;
    }
    return S3StatusOK;
}

static S3Status on_list_page(int truncated, const char *next_marker, int count,
                             const S3ListBucketContent *contents, int ncommon, const char **common,
                             void *arg)
{
    (void)next_marker; /* only sent with a delimiter; the last key is the marker */
    (void)ncommon;
    (void)common;
    s3_call *call = arg;
    call->truncated = truncated;
    call->moved++;
    for (int i = 0; i < count; i++) {
        const char *k = contents[i].key;
        size_t n = strlen(k);
        if (n > S3_MAX_KEY_SIZE)
            continue; /* cannot be one of ours, nor a valid marker */
        uint8_t sz[8];
        st_le64_put(sz, contents[i].size);
        if (st_bytes_append(call->page, k, n + 1) != ST_OK ||
            st_bytes_append(call->page, sz, 8) != ST_OK) {
            call->nomem = 1;
            return S3StatusAbortedByCallback;
        }
        call->page_keys++;
        call->moved += n;
    }
    return S3StatusOK;
}

/* ---- the request context pool ---- */

static S3RequestContext *pool_get(s3_ctx *c)
{
    S3RequestContext *rc = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->pool_n)
        rc = c->pool[--c->pool_n];
    pthread_mutex_unlock(&c->pool_lock);
    if (!rc && S3_create_request_context(&rc) != S3StatusOK)
        rc = NULL;
    return rc;
}

static void pool_put(s3_ctx *c, S3RequestContext *rc)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->pool_n < POOL_MAX) {
        c->pool[c->pool_n++] = rc;
        rc = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (rc)
        S3_destroy_request_context(rc);
}

/*
 * Drives the request just queued on rc until it completes, stalls or
 * passes its deadline; then rc goes back to the pool, or is destroyed when
 * the request had to be aborted (destroying aborts it, and its complete
 * callback runs with S3StatusInterrupted). `bytes` sizes the deadline.
 */
static void run_request(s3_ctx *c, S3RequestContext *rc, s3_call *call, uint64_t bytes)
{
    uint64_t start = now_ms(), last_move = start, seen = call->moved;
    uint64_t deadline = st_s3_deadline_ms(&c->cfg, bytes);
    for (;;) {
        int remaining = 0;
        S3Status rs = S3_runonce_request_context(rc, &remaining);
        if (call->done)
            break;
        uint64_t now = now_ms();
        if (call->moved != seen) {
            seen = call->moved;
            last_move = now;
        }
        int stop = st_backend_observer_stops(c->cfg.observer);
        if (rs != S3StatusOK || remaining == 0 || now - start >= deadline ||
            now - last_move >= c->cfg.stall_ms || stop) {
            if (rs == S3StatusOK && remaining != 0)
                call->timed_out = now - start >= deadline              ? 2
                                  : now - last_move >= c->cfg.stall_ms ? 1
                                                                       : 3;
            S3_destroy_request_context(rc); /* runs on_complete if still pending */
            if (!call->done || call->status == S3StatusInterrupted)
                call->status = rs != S3StatusOK ? rs : S3StatusInternalError;
            call->done = 1;
            return;
        }

        fd_set rd, wr, ex;
        FD_ZERO(&rd);
        FD_ZERO(&wr);
        FD_ZERO(&ex);
        int maxfd = -1;
        if (S3_get_request_context_fdsets(rc, &rd, &wr, &ex, &maxfd) != S3StatusOK)
            maxfd = -1;
        int64_t wait = S3_get_request_context_timeout(rc);
        if (wait < 0 || wait > 100)
            wait = 100; /* wake up regularly to check our own clocks */
        if (maxfd < 0) {
            /* Nothing to select on: curl waits on a timer, or its socket
             * number is beyond FD_SETSIZE (curl then leaves it out). Poll. */
            if (wait > 5)
                wait = 5;
            struct timespec ts = {0, (long)wait * 1000000L};
            nanosleep(&ts, NULL);
        } else {
            struct timeval tv = {0, (long)wait * 1000};
            select(maxfd + 1, &rd, &wr, &ex, &tv);
        }
    }
    pool_put(c, rc);
}

/* ---- errors ---- */

/*
 * The class of a libs3 status, and a few words for the message: the
 * status is turned into what st_s3_classify() (shared with the V4
 * backend) knows, an S3 error code, an HTTP status or a transport failure.
 */
static st_err classify(S3Status s, const char **what)
{
    static const struct {
        S3Status status;
        st_s3_transport net;
        int http;
    } statuses[] = {
        /* libs3's codes for curl failures: resets, send/recv errors */
        {S3StatusInternalError, ST_S3_NET_FAILED, 0},
        {S3StatusInterrupted, ST_S3_NET_FAILED, 0},
        {S3StatusNameLookupError, ST_S3_NET_FAILED, 0},
        {S3StatusFailedToConnect, ST_S3_NET_FAILED, 0},
        {S3StatusConnectionFailed, ST_S3_NET_FAILED, 0},
        {S3StatusXmlParseFailure, ST_S3_NET_FAILED, 0}, /* a garbled or cut response */
        {S3StatusServerFailedVerification, ST_S3_NET_TLS_UNTRUSTED, 0},
        {S3StatusErrorUnknown, ST_S3_NET_OK, 0},     /* an error body without a known code */
        {S3StatusHttpErrorUnknown, ST_S3_NET_OK, 0}, /* 429, 502, 504 and others without one */
        {S3StatusHttpErrorMovedTemporarily, ST_S3_NET_OK, 301},
        {S3StatusHttpErrorBadRequest, ST_S3_NET_OK, 400},
        {S3StatusHttpErrorForbidden, ST_S3_NET_OK, 403},
        {S3StatusHttpErrorNotFound, ST_S3_NET_OK, 404},
        {S3StatusHttpErrorConflict, ST_S3_NET_OK, 409},
        {S3StatusKeyTooLong, ST_S3_NET_OK, 400},
        {S3StatusUriTooLong, ST_S3_NET_OK, 400},
    };
    if (s == S3StatusOK) {
        *what = "ok";
        return ST_OK;
    }
    if (s == S3StatusOutOfMemory) {
        *what = "out of memory";
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        if (statuses[i].status == s)
            return st_s3_classify(statuses[i].net, statuses[i].http, NULL, what);
    /* "ErrorNoSuchKey" is S3's code NoSuchKey; other names are libs3's own
     * refusals, which a retry does not change. */
    const char *name = S3_get_status_name(s);
    return st_s3_classify(ST_S3_NET_OK, 0, strncmp(name, "Error", 5) == 0 ? name + 5 : name, what);
}

/* Sets the message for a failed call and returns its class. */
static st_err call_error(s3_ctx *c, const char *op, const char *key, const s3_call *call)
{
    if (call->nomem)
        return st_seterr(ST_ERR_NOMEM, "s3 %s s3://%s/%s%s: out of memory", op, c->cfg.bucket,
                         c->cfg.prefix, key);
    if (call->timed_out == 3)
        return st_seterr(ST_ERR_TRANSIENT, "s3 %s s3://%s/%s%s at %s: aborted: %s", op,
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, ST_S3_STOPPED);
    if (call->timed_out)
        return st_seterr(ST_ERR_TRANSIENT, "s3 %s s3://%s/%s%s at %s: timed out: %s %u ms", op,
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint,
                         call->timed_out == 1 ? "no byte moved for" : "not done within",
                         call->timed_out == 1 ? c->cfg.stall_ms : c->cfg.timeout_ms);
    const char *what;
    st_err e = classify(call->status, &what);
    if (e == ST_OK) /* callers only get here for a failure */
        e = ST_ERR_TRANSIENT;
    return st_seterr(e, "s3 %s s3://%s/%s%s at %s: %s: %s%s%s", op, c->cfg.bucket, c->cfg.prefix,
                     key, c->cfg.endpoint, what, S3_get_status_name(call->status),
                     call->server_msg[0] ? ": " : "", call->server_msg);
}

/* Starts one request of op on key: a request context from the pool and a
 * zeroed call record. */
static st_err call_begin(s3_ctx *c, const char *op, const char *key, S3RequestContext **rc,
                         s3_call *call)
{
    *rc = pool_get(c);
    if (!*rc)
        return st_seterr(ST_ERR_NOMEM, "s3 %s %s: cannot create a request context", op, key);
    memset(call, 0, sizeof *call);
    call->c = c;
    return ST_OK;
}

/* call_begin() of op on one object: the call then owns what the op
 * needs, its request context (call->rc) and the object's full name
 * (call->full_key), so that an op opens with this one call. */
static st_err object_call_begin(s3_ctx *c, const char *op, const char *key, s3_call *call)
{
    char fk[S3_MAX_KEY_SIZE + 1];
    S3RequestContext *rc;
    st_err e = st_s3_full_key(&c->cfg, op, key, fk);
    if (e || (e = call_begin(c, op, key, &rc, call)))
        return e;
    call->rc = rc; /* after call_begin, which zeroes *call */
    memcpy(call->full_key, fk, sizeof fk);
    return ST_OK;
}

/* ---- ops ---- */

static st_err s3_put(void *ctx, const char *key, const void *data, size_t len)
{
    s3_ctx *c = ctx;
    s3_call call;
    st_err e = object_call_begin(c, "put", key, &call);
    if (e)
        return e;
    call.put_data = data;
    call.put_len = len;
    S3PutObjectHandler h = {{on_props, on_complete}, on_put_data};
    S3_put_object(&c->bucket_ctx, call.full_key, len, NULL, call.rc, &h, &call);
    run_request(c, call.rc, &call, len);
    if (call.status != S3StatusOK || call.timed_out)
        return call_error(c, "put", key, &call);
    if (call.put_off != len) /* the server answered before taking every byte */
        return st_seterr(ST_ERR_TRANSIENT, "s3 put s3://%s/%s%s at %s: sent %zu of %zu bytes",
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, call.put_off, len);
    atomic_store(&c->bucket_seen, 1);
    return ST_OK;
}

/* HEAD; *size (and *mtime_ns, when not NULL: Last-Modified, the store's
 * clock) on success. Does not resolve an ambiguous 404 (see s3_stat). */
static st_err head_once(s3_ctx *c, const char *key, const char *fk, uint64_t *size, S3Status *st,
                        int64_t *mtime_ns)
{
    S3RequestContext *rc;
    s3_call call;
    st_err e = call_begin(c, "stat", key, &rc, &call);
    if (e)
        return e;
    S3ResponseHandler h = {on_props, on_complete};
    S3_head_object(&c->bucket_ctx, fk, rc, &h, &call);
    run_request(c, rc, &call, 0);
    *st = call.timed_out ? S3StatusInterrupted : call.status;
    if (call.status == S3StatusOK && !call.timed_out) {
        /* Every S3 HEAD answer carries an ETag; without one the headers
         * were cut short (libs3 reports that as success). */
        if (!call.have_props || !call.have_etag)
            return st_seterr(ST_ERR_TRANSIENT,
                             "s3 stat s3://%s/%s%s at %s: incomplete response headers (connection "
                             "cut?)",
                             c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
        *size = call.content_length;
        if (mtime_ns && call.last_modified <= 0)
            return st_seterr(ST_ERR_TRANSIENT,
                             "s3 stat s3://%s/%s%s at %s: the answer has no Last-Modified header",
                             c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
        if (mtime_ns)
            *mtime_ns = call.last_modified * 1000000000;
        atomic_store(&c->bucket_seen, 1);
        return ST_OK;
    }
    return call_error(c, "stat", key, &call);
}

/*
 * HEAD with a second opinion on size 0: libs3 reports headers cut short as
 * success, and a cut after ETag but before Content-Length reads as size 0.
 * A size above 0 cannot come from a cut (the header was there); 0 is
 * believed when a second HEAD says it too.
 */
static st_err head_checked(s3_ctx *c, const char *key, const char *fk, uint64_t *size, S3Status *st)
{
    st_err e = head_once(c, key, fk, size, st, NULL);
    if (e == ST_OK && *size == 0)
        e = head_once(c, key, fk, size, st, NULL);
    return e;
}

static st_err get_range(s3_ctx *c, const char *key, const char *fk, uint64_t off, uint64_t len,
                        st_bytes *out, S3Status *st);

static st_err s3_stat(void *ctx, const char *key, uint64_t *size)
{
    s3_ctx *c = ctx;
    char fk[S3_MAX_KEY_SIZE + 1];
    st_err e = st_s3_full_key(&c->cfg, "stat", key, fk);
    if (e)
        return e;
    S3Status st;
    e = head_checked(c, key, fk, size, &st);
    if (e != ST_ERR_NOT_FOUND || atomic_load(&c->bucket_seen))
        return e;
    /* A HEAD 404 has no body, so it cannot say whether the key or the
     * whole bucket is missing. A 1-byte GET can (NoSuchKey vs NoSuchBucket);
     * after the first answer the bucket is known to exist. */
    st_bytes probe = {0};
    e = get_range(c, key, fk, 0, 1, &probe, &st);
    st_bytes_free(&probe);
    if (e == ST_OK) /* it appeared meanwhile */
        return head_checked(c, key, fk, size, &st);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_NOT_FOUND, "s3 stat s3://%s/%s%s at %s: not found", c->cfg.bucket,
                         c->cfg.prefix, key, c->cfg.endpoint);
    return e;
}

/* The Last-Modified of key, the store's clock. */
static st_err head_time(s3_ctx *c, const char *key, int64_t *mtime_ns)
{
    char fk[S3_MAX_KEY_SIZE + 1];
    uint64_t size;
    S3Status st;
    st_err e = st_s3_full_key(&c->cfg, "stat", key, fk);
    return e ? e : head_once(c, key, fk, &size, &st, mtime_ns);
}

static st_err s3_del(void *ctx, const char *key);

/* libs3 hands no Date header on, so the store's "now" is the Last-Modified
 * of a probe object written for it (a name no store key can be) and
 * deleted again: three requests, where signature V4 needs one HEAD. */
static st_err s3_stat_time(void *ctx, const char *key, st_store_time *t)
{
    s3_ctx *c = ctx;
    static atomic_uint_fast64_t probes;
    char probe[96];
    snprintf(probe, sizeof probe, "%s-%ld-%" PRIu64, ST_S3_CLOCK_KEY, (long)getpid(),
             (uint64_t)atomic_fetch_add(&probes, 1));
    st_err e = key ? head_time(c, key, &t->mtime_ns) : ST_OK;
    if (!e && !(e = s3_put(c, probe, "", 0))) {
        e = head_time(c, probe, &t->now_ns);
        s3_del(c, probe); /* best effort: a leftover probe is never listed as a key */
    }
    t->slack_ns = ST_S3_CLOCK_SLACK_NS;
    return e;
}

/*
 * GET of [off, off+len) (len ST_GET_TO_END: to the end) into out, with the
 * byte count checked. A 416 comes back as ST_ERR_INVALID with *st set to
 * S3StatusErrorInvalidRange, for s3_get to sort out.
 */
static st_err get_range(s3_ctx *c, const char *key, const char *fk, uint64_t off, uint64_t len,
                        st_bytes *out, S3Status *st)
{
    S3RequestContext *rc;
    s3_call call;
    st_err e = call_begin(c, "get", key, &rc, &call);
    if (e)
        return e;
    call.out = out;
    uint64_t count = (len == ST_GET_TO_END || len > ST_S3_RANGE_LEN_MAX) ? 0 : len;
    call.want_max = count ? count : UINT64_MAX;
    if (call.want_max > SIZE_MAX)
        call.want_max = SIZE_MAX;
    /* libs3 sends a Range header only when get conditions are given. */
    S3GetConditions cond = {.ifModifiedSince = -1, .ifNotModifiedSince = -1};
    S3GetObjectHandler h = {{on_props, on_complete}, on_get_data};
    S3_get_object(&c->bucket_ctx, fk, &cond, off, count, rc, &h, &call);
    run_request(c, rc, &call, count ? count : 0);
    *st = call.timed_out ? S3StatusInterrupted : call.status;
    if (call.status == S3StatusErrorNoSuchKey)
        atomic_store(&c->bucket_seen, 1); /* the bucket answered for its keys */
    if (call.overflow) {
        e = st_seterr(ST_ERR_PERMANENT,
                      "s3 get s3://%s/%s%s at %s: the server sent more than the %" PRIu64
                      " bytes asked for (does it honour Range?)",
                      c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, count);
    } else if (call.status != S3StatusOK || call.timed_out) {
        e = call_error(c, "get", key, &call);
    } else if (!call.have_props || !call.have_etag) {
        /* libs3 reports a connection cut in the headers as success; every
         * S3 GET answer has an ETag. */
        e = st_seterr(ST_ERR_TRANSIENT,
                      "s3 get s3://%s/%s%s at %s: incomplete response headers (connection cut?)",
                      c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
    } else if (call.content_length != out->len) {
        /* libs3 reports a connection cut mid-body as success. */
        e = st_seterr(ST_ERR_TRANSIENT,
                      "s3 get s3://%s/%s%s at %s: connection cut: got %zu of %" PRIu64 " bytes",
                      c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, out->len,
                      call.content_length);
    } else if (out->len == 0) {
        /* Empty is right only at the end of the object (or for an empty
         * object); a cut between ETag and Content-Length also looks empty. */
        uint64_t size = 0;
        S3Status hs;
        e = head_checked(c, key, fk, &size, &hs);
        if (e == ST_OK && size > off)
            e = st_seterr(ST_ERR_TRANSIENT,
                          "s3 get s3://%s/%s%s at %s: empty reply for bytes from %" PRIu64
                          " of %" PRIu64 " (connection cut?)",
                          c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, off, size);
        else if (e == ST_OK && size < off)
            e = st_seterr(ST_ERR_INVALID,
                          "s3 get s3://%s/%s%s: offset %" PRIu64 " is past the end (%" PRIu64
                          " bytes)",
                          c->cfg.bucket, c->cfg.prefix, key, off, size);
    }
    if (e) {
        st_bytes_clear(out);
        return e;
    }
    atomic_store(&c->bucket_seen, 1);
    return ST_OK;
}

/* get_range as st_s3_get calls it: a 416 (InvalidRange) is a refused range.
 * No sink ever comes here: this backend has no get_stream op (st_get_stream
 * falls back to get). */
static st_err range_for_get(void *ctx, const char *key, const char *fk, uint64_t off, uint64_t len,
                            st_bytes *out, const st_get_sink *sink, int *refused)
{
    (void)sink;
    S3Status st = S3StatusOK;
    st_err e = get_range(ctx, key, fk, off, len, out, &st);
    *refused = e == ST_ERR_INVALID && st == S3StatusErrorInvalidRange;
    return e;
}

static st_err s3_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    s3_ctx *c = ctx;
    return st_s3_get(&c->cfg, c, range_for_get, s3_stat, key, off, len, out, NULL);
}

/*
 * libs3 2.0 keeps at most 1023 bytes of a listed name (its XML string
 * buffer), so a 1024-byte name - S3's maximum, and a valid key when the URL
 * has no prefix - arrives cut to 1023. Such a listed name `cut` stands for
 * itself and for every name cut + one character. Each candidate is checked
 * with a HEAD, in byte order, and the ones that exist are delivered; 64
 * HEADs, only for names of exactly 1023 bytes, which real key layouts never
 * reach. *marker grows to the largest name found, so the next page starts
 * after all of them. *stop is set when cb asks to stop.
 */
static st_err list_expand_cut(s3_ctx *c, const char *cut, const char *fp, char *marker,
                              st_list_cb cb, void *arg, int *stop)
{
    /* The key alphabet in byte order; '/' cannot end a key. */
    static const char tail[] = "-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";
    char name[S3_MAX_KEY_SIZE + 1];
    size_t n = strlen(cut);
    memcpy(name, cut, n + 1);
    for (size_t i = 0; i <= sizeof tail - 1; i++) {
        if (i > 0) {
            name[n] = tail[i - 1];
            name[n + 1] = '\0';
        }
        const char *rel = name + c->cfg.prefix_len;
        if (strncmp(name, fp, strlen(fp)) != 0 || !st_key_is_valid(rel))
            continue;
        uint64_t size = 0;
        S3Status st;
        st_err e;
        /* The one place this backend retries by itself: these probes are
         * parts of one list call, and restarting the whole listing for
         * each failed probe (the retry wrapper's granularity) would make 65
         * requests in a row have to succeed. */
        for (unsigned attempt = 0;; attempt++) {
            e = head_checked(c, rel, name, &size, &st);
            if (e != ST_ERR_TRANSIENT || attempt >= 4)
                break;
            struct timespec ts = {0, (long)(50L << attempt) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (e == ST_ERR_NOT_FOUND)
            continue;
        if (e)
            return e;
        if (strcmp(name, marker) > 0)
            memcpy(marker, name, strlen(name) + 1);
        if (cb(arg, rel, size)) {
            *stop = 1;
            return ST_OK;
        }
    }
    return ST_OK;
}

static int cmp_str_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static st_err s3_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    s3_ctx *c = ctx;
    char fp[S3_MAX_KEY_SIZE + 1];
    size_t pn = strlen(prefix);
    if (c->cfg.prefix_len + pn > S3_MAX_KEY_SIZE)
        return ST_OK; /* no key can be that long: nothing to list */
    memcpy(fp, c->cfg.prefix, c->cfg.prefix_len);
    memcpy(fp + c->cfg.prefix_len, prefix, pn + 1);

    st_bytes page = {0};
    const char **index = NULL; /* the page's keys, sorted */
    size_t index_cap = 0;
    char marker[S3_MAX_KEY_SIZE + 1] = "";
    st_err e = ST_OK;
    for (;;) {
        S3RequestContext *rc;
        s3_call call;
        if ((e = call_begin(c, "list", prefix, &rc, &call)))
            goto out;
        call.page = &page;
        st_bytes_clear(&page);
        S3ListBucketHandler h = {{on_props, on_complete}, on_list_page};
        S3_list_bucket(&c->bucket_ctx, fp[0] ? fp : NULL, marker[0] ? marker : NULL, NULL,
                       LIST_PAGE_KEYS, rc, &h, &call);
        run_request(c, rc, &call, 0);
        if (call.nomem || call.status != S3StatusOK || call.timed_out) {
            e = call_error(c, "list", prefix, &call);
            goto out;
        }
        atomic_store(&c->bucket_seen, 1);

        /* S3 sends a page in byte order; s3rver sends it in its directory
         * walk order ("a/b/c" before "a/b"). Sorting the page costs little
         * and makes every single-page listing right on both. (Across pages
         * s3rver can still skip keys: docs/S3.md.) */
        if (call.page_keys > index_cap) {
            free(index);
            index_cap = call.page_keys;
            if (!(index = malloc(index_cap * sizeof *index))) {
                index_cap = 0;
                e = st_seterr(ST_ERR_NOMEM, "s3 list %s: out of memory", prefix);
                goto out;
            }
        }
        for (size_t i = 0, at = 0; i < call.page_keys; i++) {
            index[i] = (const char *)page.data + at;
            at += strlen(index[i]) + 1 + 8;
        }
        if (call.page_keys) /* index is NULL before the first non-empty page */
            qsort(index, call.page_keys, sizeof *index, cmp_str_p);

        /* Deliver the page only now, outside libs3's callbacks: the caller's
         * callback may take its time or call this backend again. */
        char next_marker[S3_MAX_KEY_SIZE + 1] = "";
        const char *prev_group = NULL;
        for (size_t i = 0; i < call.page_keys; i++) {
            const char *k = index[i];
            size_t n = strlen(k);
            uint64_t size = st_le64_get((const uint8_t *)k + n + 1);
            if (strcmp(k, next_marker) > 0)
                memcpy(next_marker, k, n + 1);
            if (strncmp(k, c->cfg.prefix, c->cfg.prefix_len) != 0 ||
                strncmp(k, fp, strlen(fp)) != 0)
                continue; /* not ours: the server ignored the prefix */
            if (n == S3_MAX_KEY_SIZE - 1) {
                /* Maybe a 1024-byte name cut short by libs3: expand once. */
                if (prev_group && strcmp(prev_group, k) == 0)
                    continue;
                prev_group = k;
                int stop = 0;
                if ((e = list_expand_cut(c, k, fp, next_marker, cb, arg, &stop)) != ST_OK || stop)
                    goto out;
                continue;
            }
            const char *rel = k + c->cfg.prefix_len;
            if (!st_key_is_valid(rel))
                continue; /* a foreign object; no key of ours can name it */
            if (cb(arg, rel, size))
                goto out;
        }
        if (!call.truncated) {
            /* A listing cut short by the connection looks complete: libs3
             * reports success and the page just ends early (and says "not
             * truncated"). So an end is believed only when a request that
             * starts after the last name seen finds nothing more. Pages
             * before the end need no check: the next page starts after
             * their last name anyway. */
            if (call.page_keys == 0)
                goto out;
            call.truncated = 1; /* ask again after this page */
        }
        /* Continue after the largest name seen. Guard against a server that
         * says "truncated" without making progress: that would loop forever. */
        if (!call.page_keys || strcmp(next_marker, marker) <= 0) {
            e = st_seterr(ST_ERR_TRANSIENT,
                          "s3 list s3://%s/%s%s at %s: the server's listing does not advance",
                          c->cfg.bucket, c->cfg.prefix, prefix, c->cfg.endpoint);
            goto out;
        }
        memcpy(marker, next_marker, strlen(next_marker) + 1);
    }
out:
    free(index);
    st_bytes_free(&page);
    return e;
}

static st_err s3_del(void *ctx, const char *key)
{
    s3_ctx *c = ctx;
    s3_call call;
    st_err e = object_call_begin(c, "del", key, &call);
    if (e)
        return e;
    S3ResponseHandler h = {on_props, on_complete};
    S3_delete_object(&c->bucket_ctx, call.full_key, call.rc, &h, &call);
    run_request(c, call.rc, &call, 0);
    if (!call.timed_out &&
        (call.status == S3StatusErrorNoSuchKey || call.status == S3StatusHttpErrorNotFound))
        return ST_OK; /* idempotent: already gone */
    if (call.status != S3StatusOK || call.timed_out)
        return call_error(c, "del", key, &call);
    atomic_store(&c->bucket_seen, 1);
    return ST_OK;
}

static void s3_close(void *ctx)
{
    s3_ctx *c = ctx;
    if (!c)
        return;
    for (int i = 0; i < c->pool_n; i++)
        S3_destroy_request_context(c->pool[i]);
    pthread_mutex_destroy(&c->pool_lock);
    st_s3_config_free(&c->cfg);
    free(c);
}

static const st_backend_ops s3_ops = {
    .scheme = "s3",
    .put = s3_put,
    .get = s3_get,
    .stat = s3_stat,
    .stat_time = s3_stat_time,
    .list = s3_list,
    .del = s3_del,
    .close = s3_close,
};

st_err st_backend_s3_open(const char *url, const st_backend_opts *opts, st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_s3_open: out is NULL");
    *out = NULL;
    st_err e = ST_OK;
    st_backend *b = NULL;
    s3_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
    pthread_mutex_init(&c->pool_lock, NULL);
    if ((e = st_s3_config_load(&c->cfg, url, opts)) != ST_OK)
        goto out;
    /* libs3 2.0 turns certificate checks off on every request
     * (CURLOPT_SSL_VERIFYPEER = 0 in its request.c, with no way to turn
     * them on): over https it would send data to, and accept answers from,
     * any server. Refused rather than silently unauthenticated. */
    if (c->cfg.https) {
        e = st_seterr(ST_ERR_INVALID,
                      "S3 endpoint %s: https is refused with --s3-signature v2: libs3 2.0 cannot "
                      "check a server's TLS certificate and would trust any server; use "
                      "--s3-signature v4, or give an http:// endpoint on a trusted network with "
                      "--s3-endpoint or CKPT_S3_ENDPOINT",
                      c->cfg.endpoint);
        goto out;
    }
    /* libs3 2.0 has no SSE-C and no SSE-KMS, and its SSE-S3 flag alone
     * would leave reads and writes of one store asking different things:
     * refused, whichever mode. */
    if (c->cfg.sse != ST_S3_SSE_NONE) {
        e = st_seterr(ST_ERR_INVALID,
                      "--s3-sse %s is refused with --s3-signature v2: libs3 cannot send the "
                      "server-side encryption headers; use --s3-signature v4",
                      st_s3_sse_name(&c->cfg));
        goto out;
    }
    /* libs3 2.0 cannot send x-amz-security-token: temporary credentials
     * would fail on every request, so say so now. */
    if (c->cfg.session_token) {
        e = st_seterr(ST_ERR_UNSUPPORTED, "--s3-signature v2 (libs3) cannot send a session token "
                                          "(AWS_SESSION_TOKEN): use --s3-signature v4");
        goto out;
    }
    S3Status vs = S3_validate_bucket_name(c->cfg.bucket, c->cfg.virtual_host ? S3UriStyleVirtualHost
                                                                             : S3UriStylePath);
    if (vs != S3StatusOK) {
        e = st_seterr(ST_ERR_INVALID, "s3 store URL \"%.200s\": bad bucket name (%s)", url,
                      S3_get_status_name(vs));
        goto out;
    }

    pthread_once(&s3_once, s3_init_once);
    if (s3_init_status != S3StatusOK) {
        e = st_seterr(ST_ERR_PERMANENT, "s3: libs3 initialisation failed: %s",
                      S3_get_status_name(s3_init_status));
        goto out;
    }

    c->bucket_ctx.hostName = c->cfg.host;
    c->bucket_ctx.bucketName = c->cfg.bucket;
    c->bucket_ctx.protocol = c->cfg.https ? S3ProtocolHTTPS : S3ProtocolHTTP;
    c->bucket_ctx.uriStyle = c->cfg.virtual_host ? S3UriStyleVirtualHost : S3UriStylePath;
    c->bucket_ctx.accessKeyId = c->cfg.access_key_id;
    c->bucket_ctx.secretAccessKey = c->cfg.secret;
    atomic_init(&c->bucket_seen, 0);

    if (!(b = malloc(sizeof *b))) {
        e = st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
        goto out;
    }
    b->ops = &s3_ops;
    b->ctx = c;
    *out = b;
    c = NULL;
out:
    if (c)
        s3_close(c);
    return e;
}
