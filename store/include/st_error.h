/*
 * st_error — the store engine's error codes and per-thread error detail.
 *
 * Every st_ function that can fail returns an st_err: 0 is success, and the
 * numbers are never reused for a different meaning. A failing function also
 * leaves a human-readable sentence in a thread-local buffer (st_errmsg()), so
 * that callers several layers up can report *what* failed (file, key, step)
 * without threading a message buffer through every call. Thread-local because
 * the upload pipeline and the FUSE daemon run many threads at once.
 */
#ifndef ST_ERROR_H
#define ST_ERROR_H

typedef enum st_err {
    ST_OK = 0,
    ST_ERR_NOMEM = 1,        /* allocation failed */
    ST_ERR_IO = 2,           /* local I/O failed (errno in the message) */
    ST_ERR_NOT_FOUND = 3,    /* object, file or step does not exist */
    ST_ERR_TRANSIENT = 4,    /* backend: may succeed if retried (timeouts, 5xx, resets) */
    ST_ERR_PERMANENT = 5,    /* backend: will not succeed if retried (auth, no bucket) */
    ST_ERR_CORRUPT = 6,      /* data failed verification or does not parse */
    ST_ERR_INVALID = 7,      /* bad argument: malformed key, URL, option */
    ST_ERR_NOSPACE = 8,      /* local disk or a configured cap is full */
    ST_ERR_EXISTS = 9,       /* target already exists */
    ST_ERR_UNSUPPORTED = 10, /* feature or format version not supported */
    /* Namespace errors of the mount (st_vfs). */
    ST_ERR_NOT_DIR = 11,   /* a path component is not a directory */
    ST_ERR_IS_DIR = 12,    /* a file operation on a directory */
    ST_ERR_NOT_EMPTY = 13, /* rmdir of a non-empty directory */
    ST_ERR_READ_ONLY = 14, /* the entry cannot be changed (status files) */
    ST_ERR_NAME = 15,      /* a name that is too long or not allowed here */
    ST_ERR_BUSY = 16,      /* in use */
    ST_ERR_CROSS = 17,     /* rename of an entry that lives only in the store */
    ST_ERR_TOO_LONG = 18,  /* a path would exceed the manifest's path limit */
    ST_ERR_TOO_BIG = 19,   /* a file size past what the staging file system holds */
    /* Peers (store/peer). */
    ST_ERR_AUTH = 20, /* a peer refused this node's cluster secret */
    /* Client-side encryption (docs/ENCRYPTION.md). */
    ST_ERR_KEY = 21, /* key file refused, or an object sealed with a key it does not hold */
} st_err;

/*! Short fixed description of a code ("object not found"). Never NULL. */
const char *st_strerror(st_err code);

/*!
 * Records the detail for the error about to be returned and returns `code`,
 * so a failing path reads `return st_seterr(ST_ERR_IO, "open %s: %s", p, strerror(e));`.
 * The message is formatted into this thread's buffer (truncated at 512 bytes).
 */
st_err st_seterr(st_err code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*!
 * The detail of the last error set on this thread, or "" if none. The pointer
 * stays valid until this thread's next st_seterr() call.
 */
const char *st_errmsg(void);

/*! Clears this thread's error detail. */
void st_clearerr(void);

#endif
