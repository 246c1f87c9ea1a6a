/*
 * st_backend_retry — a backend wrapper that retries ST_ERR_TRANSIENT
 * failures of the backend it wraps, a bounded number of times, with
 * exponential backoff and jitter.
 *
 * It is a backend like any other ({ops, ctx}, passes the conformance suite),
 * so it stacks: st_backend_open() puts it around every backend it opens.
 * Only ST_ERR_TRANSIENT is retried; every other result, success or error,
 * passes through unchanged on the first try.
 *
 * Threads: every op may run concurrently from several threads; the wrapper
 * has no shared mutable state besides an atomic retry counter, and it sleeps
 * on the calling thread.
 */
#ifndef ST_BACKEND_RETRY_H
#define ST_BACKEND_RETRY_H

#include <stdint.h>

#include "backend/st_backend.h"

/* Defaults: 12 tries, backoff 100 ms doubling to at most 10 s. With "equal
 * jitter" (each wait is d/2 + random(0, d/2)) the waits add up to between
 * 26 s and 53 s, so the default rides out an endpoint that is down for ~25 s
 * and still gives up within a minute or so on one that stays down. */
#define ST_RETRY_DEFAULT_ATTEMPTS 12
#define ST_RETRY_DEFAULT_BASE_MS  100
#define ST_RETRY_DEFAULT_MAX_MS   10000

typedef struct st_retry_policy {
    unsigned attempts; /* tries in total, the first included; 0: default; 1: never retry */
    unsigned base_ms;  /* the first wait before jitter; 0: default */
    unsigned max_ms;   /* cap on one wait before jitter; 0: default */
    /* Told every try's result, asked before and during every wait whether to
     * stop (st_backend.h); borrowed, outlives the wrapper; NULL: none. */
    const st_backend_observer *observer;
} st_retry_policy;

/*!
 * Wraps inner in a retrying backend. policy may be NULL (all defaults).
 * On ST_OK, *out owns inner: st_backend_close(*out) closes both. On error
 * (only ST_ERR_NOMEM or ST_ERR_INVALID), inner stays the caller's.
 * (*out)->ops->scheme is inner's scheme, so callers see "file" or "s3".
 */
st_err st_backend_retry_wrap(st_backend *inner, const st_retry_policy *policy, st_backend **out);

/*! How many times b (a retry wrapper) has retried since it was opened: a
 *  figure for status output and tests. 0 for any other backend. */
uint64_t st_backend_retry_count(const st_backend *b);

#endif
