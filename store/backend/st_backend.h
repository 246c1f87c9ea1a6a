/*
 * st_backend — the object store interface, and the registry of backends.
 *
 * A backend is a const ops table plus an instance context: {ops, ctx}.
 * Features such as retry or fault injection are wrappers (a backend whose ctx
 * holds another backend), never ifs inside a backend. Every backend passes
 * the shared conformance suite (tests/unit/backend_conformance.h).
 *
 * Keys are '/'-separated relative names from [A-Za-z0-9._-] and '/', at most
 * ST_KEY_MAX bytes, with no leading or trailing '/', no empty component and
 * no component starting with '.' (which excludes "." and "..", and leaves
 * dot-names free for a backend's own temp files) (st_key_is_valid()). Every
 * operation refuses other keys with ST_ERR_INVALID, so no key can escape the
 * store's root. A list prefix follows the same rules but may be "" or end
 * in '/'. "a/b" and "a/b/c" may both exist, as in S3.
 *
 * Errors are classified: ST_ERR_NOT_FOUND (the object is not there),
 * ST_ERR_TRANSIENT (retrying may help: timeouts, 5xx, resets),
 * ST_ERR_PERMANENT (retrying will not help: auth, missing bucket, bad root),
 * ST_ERR_INVALID (bad key or argument). The detail is in st_errmsg(); it
 * never contains credentials.
 *
 * Threads: ops may be called concurrently from several threads on one
 * instance; a backend that cannot do that serialises internally.
 */
#ifndef ST_BACKEND_H
#define ST_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_wire.h"

#define ST_KEY_MAX    1024
#define ST_GET_TO_END UINT64_MAX
/* Most keys one del_many call carries: S3 DeleteObjects' limit. */
#define ST_DEL_BATCH_MAX 1000

/*! Called once per listed key, in ascending byte order of key, on the
 *  thread that called list; key is valid only during the call. Return 0 to
 *  continue, non-zero to stop the listing (list then returns ST_OK). */
typedef int (*st_list_cb)(void *arg, const char *key, uint64_t size);

/*!
 * Where a streamed GET (ops->get_stream, st_get_stream) hands the body: on
 * the calling thread, in order, each piece as soon as the transport has it.
 * `at` is the offset of data[0] within the requested range; pieces are
 * contiguous (the first has at == 0, each next one starts where the last
 * ended), of any size, and data is valid only during the call. A piece is
 * never handed twice, also across the retry wrapper's tries (it resumes the
 * range where the body broke off). Return ST_OK to go on; any other value
 * stops the transfer and becomes get_stream's result, with the sink's
 * st_errmsg(), and is never retried.
 */
typedef struct st_get_sink {
    st_err (*on_bytes)(void *arg, uint64_t at, const uint8_t *data, size_t len);
    void *arg;
} st_get_sink;

/*! One key of a batched delete (st_del_many) and its own result. */
typedef struct st_del_item {
    const char *key; /* in: owned by the caller */
    st_err err;      /* out: ST_OK (also when the key did not exist) or why it was not deleted */
} st_del_item;

/*!
 * Times read off the store's clock (ops->stat_time). slack_ns is how far
 * each may be from the true instant (their resolution: 1 s for the HTTP
 * dates of S3, a few ms for a file system's timestamps), so an age is only
 * known within [now - mtime - slack, now - mtime + slack].
 */
typedef struct st_store_time {
    int64_t now_ns;   /* the store's clock when it answered */
    int64_t mtime_ns; /* when the store recorded the object's last write (0 for key NULL) */
    int64_t slack_ns; /* resolution of either */
} st_store_time;

typedef struct st_backend_ops {
    const char *scheme; /* "file", "s3" */

    /*! Stores data[0..len) under key, atomically: readers see the old
     *  object, or none, or all of the new one. Replaces an existing object. */
    st_err (*put)(void *ctx, const char *key, const void *data, size_t len);

    /*! Reads len bytes from offset (len ST_GET_TO_END: to the end) into out,
     *  replacing its contents (its allocation is reused). A range reaching
     *  past the end is truncated to the object; offset == size, or len == 0,
     *  gives an empty result; an offset past the end gives ST_ERR_INVALID. */
    st_err (*get)(void *ctx, const char *key, uint64_t offset, uint64_t len, st_bytes *out);

    /*! Size of the object, or ST_ERR_NOT_FOUND. */
    st_err (*stat)(void *ctx, const char *key, uint64_t *size);

    /*! Every key that starts with prefix (a plain string prefix, not only a
     *  directory), ascending. Pages through large listings internally. */
    st_err (*list)(void *ctx, const char *prefix, st_list_cb cb, void *arg);

    /*! Removes key. ST_OK also when it did not exist (idempotent). */
    st_err (*del)(void *ctx, const char *key);

    /*! Optional (NULL: st_del_many loops over del). Removes items[0..n)
     *  (1 <= n <= ST_DEL_BATCH_MAX, keys valid and distinct) in as few
     *  requests as the store allows, in no particular order, and sets every
     *  item's err: each key as del would, and a failure of the whole request
     *  in every item it left undecided. Returns ST_OK when every item is
     *  ST_OK, else the err of the first failed item, whose st_errmsg() it
     *  leaves set. */
    st_err (*del_many)(void *ctx, st_del_item *items, size_t n);

    /*! Releases ctx. */
    void (*close)(void *ctx);

    /* Last, so that tables written in order without it stay valid. */
    /*! Optional (NULL: st_get_stream falls back on get and one call of the
     *  sink). The same range rules as get, but the body goes to sink as it
     *  arrives (st_get_sink above), not into a buffer: a caller can decode
     *  while the rest is still on the wire, and no copy of the whole range
     *  is made. A failure after some bytes were handed on returns the error;
     *  what was handed stays handed (the retry wrapper resumes from there). */
    st_err (*get_stream)(void *ctx, const char *key, uint64_t offset, uint64_t len,
                         const st_get_sink *sink);

    /*! The store's own clock (docs/GC.md, "Clocks"): ages that decide what
     *  GC deletes, whether a fence or a lease is live, are read off it and
     *  never off this machine's wall clock. Fills t (st_store_time below):
     *  now_ns, the store's time when it answered, and for a non-NULL key
     *  mtime_ns, the store's time when it recorded the object's last write;
     *  key NULL asks for now_ns alone. ST_ERR_NOT_FOUND when key is not
     *  there. Required of every backend a protocol with an age runs on;
     *  NULL only in a backend that stands for none (st_stat_time then
     *  refuses with ST_ERR_PERMANENT). */
    st_err (*stat_time)(void *ctx, const char *key, struct st_store_time *t);

    /*! Optional (NULL: st_put_new answers ST_ERR_UNSUPPORTED). A create:
     *  stores data[0..len) under key as put does, only if key does not
     *  exist. ST_ERR_EXISTS, nothing written, when it does — whoever wrote
     *  it: a retried create whose first answer was lost meets its own
     *  object. ST_ERR_UNSUPPORTED, nothing written, when this store
     *  cannot create conditionally (docs/S3.md, "Conditional PUT"). */
    st_err (*put_new)(void *ctx, const char *key, const void *data, size_t len);
} st_backend_ops;

typedef struct st_backend {
    const st_backend_ops *ops;
    void *ctx;
} st_backend;

/*!
 * What the user of a backend hears of every try of a request, and how it
 * stops waiting for one (st_backend_opts.observer; docs/BACKENDS.md,
 * "Observing and stopping requests"). The callbacks run on the thread that
 * made the call, with no backend lock held; they must be cheap and must not
 * call the backend. Any may be NULL.
 */
typedef struct st_backend_observer {
    /* After every try the retry wrapper makes (st_backend_retry.h): e is its
     * result, ST_OK or an error whose message is st_errmsg(); try_no counts
     * the tries of this call from 1. A failed try is heard at once, not only
     * when the retries run out. */
    void (*on_try)(void *arg, st_err e, unsigned try_no);
    /* Non-zero: the caller no longer waits. The retry wrapper returns the
     * last error instead of waiting for another try (a wait under way ends
     * within 50 ms), and an S3 request in flight is aborted within 100 ms
     * (ST_ERR_TRANSIENT, "aborted: the caller stopped waiting"). */
    int (*should_stop)(void *arg);
    /* What a backend has to say that is no result of a call: the S3 V4
     * backend's answer to its conditional-PUT probe (once per open), and
     * with CKPT_RETRY_TRACE set each retry the retry wrapper makes. A
     * library prints nothing itself: the daemon writes these to its log,
     * ckptctl to stderr; NULL: they are not said. */
    void (*log)(void *arg, const char *msg);
    void *arg;
} st_backend_observer;

/*! Formats fmt and hands it to o->log (o or its log may be NULL: nothing). */
void st_backend_observer_logf(const st_backend_observer *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*! 1 when o asks to stop now (o or its should_stop may be NULL: 0). */
int st_backend_observer_stops(const st_backend_observer *o);

/*! 1 if key is acceptable to every backend, else 0. */
int st_key_is_valid(const char *key);

/*!
 * Options for st_backend_open_opts() (st_backend_open.h), handed on to
 * the backend that the URL names. Zero-initialise ({0}) and set only
 * what you need: every 0 or NULL field means "the default", so fields can
 * be added later without touching callers. Backends ignore what does not
 * apply to them. The strings are copied; they need to live only during the
 * open call.
 */
typedef struct st_backend_opts {
    /* s3:// endpoint, a URL "http://host[:port]" or "https://host[:port]"
     * (the scheme picks the protocol; path-style addressing). NULL: the
     * CKPT_S3_ENDPOINT environment variable, else https://s3.amazonaws.com.
     * This is what ckptctl/ckptfs --s3-endpoint passes. */
    const char *s3_endpoint;
    /* s3:// request signing: "v4" (AWS signature V4 on libcurl, the
     * default) or "v2" (libs3). NULL: $CKPT_S3_SIGNATURE, else "v4". */
    const char *s3_signature;
    /* Region in the V4 signature, and for the AWS endpoint derived when no
     * endpoint is given. NULL: $AWS_REGION, $AWS_DEFAULT_REGION, the
     * profile's region in ~/.aws/config, else "us-east-1". */
    const char *s3_region;
    /* "path" (host/bucket/key) or "virtual" (bucket.host/key). NULL:
     * $CKPT_S3_ADDRESSING, else virtual for AWS endpoints, path otherwise. */
    const char *s3_addressing;
    /* PEM file of the CA(s) to trust for https endpoints instead of the
     * system store. NULL: $CKPT_S3_CA_FILE, else the system store. */
    const char *s3_ca_file;
    /* s3:// server-side encryption of every object written (docs/S3.md,
     * "Encryption at rest in the store"): "AES256" (SSE-S3), "aws:kms" or
     * "aws:kms:KEY-ID" (SSE-KMS), "c:FILE" (SSE-C: the 32-byte key in FILE,
     * mode 0600, sent with every request, reads too). NULL: $CKPT_S3_SSE,
     * else none (the bucket's default). V4 signing only. */
    const char *s3_sse;
    /* file://: a root that does not exist is ST_ERR_NOT_FOUND ("no store
     * at ...") instead of being made: a reader given a mistyped path must
     * not see an empty store. */
    int existing_only;
    /* Deadline of one request: timeout_ms plus 1 s per MiB it carries
     * (default 60000). */
    unsigned timeout_ms;
    /* Abort a request that moves no byte for this long (default 20000). */
    unsigned stall_timeout_ms;
    /* Retries of ST_ERR_TRANSIENT (st_backend_retry.h): tries in total
     * (default 12; 1 disables retrying), first wait and cap of one wait
     * before jitter (defaults 100 ms and 10000 ms). */
    unsigned retry_attempts;
    unsigned retry_base_ms;
    unsigned retry_max_ms;
    /* Hears every try and may stop requests (st_backend_observer above).
     * Borrowed: it must outlive the backend. NULL: none. */
    const st_backend_observer *observer;
} st_backend_opts;

/*! Closes b: calls ops->close(ctx), then frees b. NULL is a no-op. */
void st_backend_close(st_backend *b);

/* Convenience wrappers that also validate the key. */
st_err st_put(st_backend *b, const char *key, const void *data, size_t len);
/*! ops->put_new with the key checked; ST_ERR_UNSUPPORTED when b has none. */
st_err st_put_new(st_backend *b, const char *key, const void *data, size_t len);

/*! What a create of an immutable object that meets an existing one
 *  concludes (st_put_once; docs/PROTOCOL.md, "Immutable objects are
 *  created, not replaced"). */
typedef enum st_once_kind {
    /* The key is a hash of the bytes (a pack): the same bytes are there. */
    ST_ONCE_NAMED_BY_CONTENT = 0,
    /* Any other immutable object (a manifest): the stored bytes are read
     * and compared with data. */
    ST_ONCE_COMPARE = 1
} st_once_kind;

/*!
 * Stores an object that is never replaced: a create (st_put_new) where the
 * store offers one, else a plain st_put (today's behaviour). An existing
 * object is ST_OK when kind says it holds these bytes (named by content,
 * or read back equal); other bytes are ST_ERR_BUSY, nothing replaced, the
 * message naming the key. *created (may be NULL) is 1 when this call's
 * request stored the object, 0 when the object was already there.
 */
st_err st_put_once(st_backend *b, const char *key, const void *data, size_t len, st_once_kind kind,
                   int *created);
st_err st_get(st_backend *b, const char *key, uint64_t offset, uint64_t len, st_bytes *out);
st_err st_stat(st_backend *b, const char *key, uint64_t *size);
/*! A streamed GET (ops->get_stream), or for a backend without one a ranged
 *  get into a buffer handed to the sink in one piece (st_get_stream_by_get). */
st_err st_get_stream(st_backend *b, const char *key, uint64_t offset, uint64_t len,
                     const st_get_sink *sink);
/*! st_get_stream() into into[0..len): *received says how much came (less
 *  than len: the object is shorter); more than len is ST_ERR_CORRUPT. */
st_err st_get_into(st_backend *b, const char *key, uint64_t offset, uint64_t len, uint8_t *into,
                   uint64_t *received);
st_err st_list(st_backend *b, const char *prefix, st_list_cb cb, void *arg);
st_err st_del(st_backend *b, const char *key);
/*! ops->stat_time with the key checked (key may be NULL: now alone). */
st_err st_stat_time(st_backend *b, const char *key, st_store_time *t);

/*!
 * The age of the object key by the store's clock alone (docs/GC.md,
 * "Clocks"), as the two bounds a judgement needs (either pointer may be
 * NULL): *at_least_ns = now - mtime - slack, what "old enough to delete"
 * is judged by, and *at_most_ns = now - mtime + slack, what "young enough
 * to use" is judged by. A write time the store puts in its own future
 * (at_most < 0) is suspect, never young: *at_most_ns is then INT64_MAX.
 * ST_ERR_NOT_FOUND when the key is gone; store errors as they are.
 */
st_err st_store_age(st_backend *b, const char *key, int64_t *at_least_ns, int64_t *at_most_ns);

/*!
 * Deletes items[0..n) (any n), with one per-key result each in items[i].err,
 * through b's del_many in slices of ST_DEL_BATCH_MAX, or key by key when b
 * has none. Every key is checked first: one invalid key refuses the whole
 * call (ST_ERR_INVALID, nothing deleted, every err set to it). Keys in one
 * call are deleted in no particular order: a caller that needs "a before b"
 * makes two calls. Returns ST_OK or the first failed item's err (its
 * message in st_errmsg()); items after a failed one are still attempted.
 */
st_err st_del_many(st_backend *b, st_del_item *items, size_t n);

/*!
 * The generic batched delete for a backend or wrapper whose store has no
 * batch request: del(ctx, key) for each item, in order, with the same
 * result rules as ops->del_many. Wrappers call it with their own del so a
 * fallback is counted, retried or faulted per key.
 */
st_err st_del_many_each(st_err (*del)(void *ctx, const char *key), void *ctx, st_del_item *items,
                        size_t n);

/*!
 * The generic streamed GET for a backend or wrapper without a streaming
 * transport: get(ctx, ...) into a buffer, then the sink once with all of
 * it. Wrappers call it with their own get so the fallback is counted,
 * retried or faulted like a get.
 */
st_err st_get_stream_by_get(st_err (*get)(void *ctx, const char *key, uint64_t off, uint64_t len,
                                          st_bytes *out),
                            void *ctx, const char *key, uint64_t offset, uint64_t len,
                            const st_get_sink *sink);

/*!
 * The ops table of a wrapper over inner: a copy of *tmpl (the wrapper's
 * template, which fills every op) with each optional op that inner lacks
 * cleared (del_many, stat_time, put_new), so that the wrapper offers an
 * optional op exactly when the store behind it does. A caller then takes
 * the path this header gives a missing op (st_del_many loops over the
 * wrapper's del, st_put_new answers ST_ERR_UNSUPPORTED, st_stat_time
 * refuses) instead of a wrapper op that would forward to nothing.
 * get_stream is kept: a wrapper streams through st_get_stream(inner),
 * which falls back on get by itself. Every wrapper builds its table here,
 * so an optional op added to st_backend_ops is masked in one place for
 * all of them. Returns the table by value; inner is only read.
 */
st_backend_ops st_backend_ops_masked(const st_backend_ops *tmpl, const st_backend *inner);

/*!
 * The head of a wrapper's ctx: every wrapper (a backend whose ctx holds
 * another backend) makes it the FIRST member of its ctx struct, so that
 * the forwarders below reach the inner backend from ctx alone. A wrapper
 * changes only some ops (a retry, a fault, a seal); for each op it passes
 * through unchanged, its table names the shared forwarder instead of a
 * copy of its own, so a pass-through reads the same in every wrapper.
 */
typedef struct st_backend_wrap {
    st_backend *inner; /* the backend wrapped; the wrapper says who closes it */
} st_backend_wrap;

/*! Forwarders for a wrapper's ops table: each calls the same op of
 *  ((st_backend_wrap *)ctx)->inner with the same arguments and returns its
 *  result, as if the wrapper were not there. ctx must point at a struct
 *  whose first member is a st_backend_wrap. The keys were checked by the
 *  caller of the wrapper (st_put, st_stat...), so they are not checked
 *  again, except by st_wrap_stat_time, which goes through st_stat_time.
 *  st_wrap_del_many and st_wrap_stat_time are optional ops: in a table
 *  built by st_backend_ops_masked they are there only when inner has them. */
st_err st_wrap_put(void *ctx, const char *key, const void *data, size_t len);
st_err st_wrap_stat(void *ctx, const char *key, uint64_t *size);
st_err st_wrap_stat_time(void *ctx, const char *key, st_store_time *t);
st_err st_wrap_list(void *ctx, const char *prefix, st_list_cb cb, void *arg);
st_err st_wrap_del(void *ctx, const char *key);
st_err st_wrap_del_many(void *ctx, st_del_item *items, size_t n);

/*!
 * For a wrapper that reads an object whole (to open or judge it) and
 * answers a ranged GET of it: keeps [offset, offset + len) of the whole
 * object in *body (len ST_GET_TO_END: to its end), by get's range rules
 * (truncated at the end; ST_ERR_INVALID naming key for an offset past it).
 */
st_err st_get_keep_range(st_bytes *body, const char *key, uint64_t offset, uint64_t len);

/*! The first failed item's err among items[0..n), or ST_OK. */
st_err st_del_items_result(const st_del_item *items, size_t n);

/* The file:// backend (st_backend_file.c). root must be an absolute path;
 * it is created (mkdir -p) if missing. */
st_err st_backend_file_open(const char *root, st_backend **out);
/* As st_backend_file_open, for local scratch objects whose loss a reader
 * detects by their content (a pack checked against its id before it is
 * used): a put is still atomic (temp file, rename) but not durable, with
 * no fsync, and keeps its pages in the page cache for the read that
 * follows. A crash can leave an object empty or short. */
st_err st_backend_file_open_scratch(const char *root, st_backend **out);
/* As st_backend_file_open; existing_only: a missing root is ST_ERR_NOT_FOUND. */
st_err st_backend_file_open_existing(const char *root, int existing_only, st_backend **out);

/* The s3:// backends, without the retry wrapper: url is
 * "s3://bucket[/prefix]", opts may be NULL; configuration and credentials
 * as in docs/S3.md (st_s3_common.h). st_backend_s3_open signs with AWS
 * signature V2 on libs3 (st_backend_s3.c), st_backend_s3v4_open with V4 on
 * libcurl (st_backend_s3v4.c). */
st_err st_backend_s3_open(const char *url, const st_backend_opts *opts, st_backend **out);
st_err st_backend_s3v4_open(const char *url, const st_backend_opts *opts, st_backend **out);

#endif
