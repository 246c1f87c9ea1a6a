/*
 * st_backend_open — the URL factory: which backend a store URL names, opened
 * and wrapped in the retry wrapper. It sits above every backend and wrapper
 * so that none of them depends on another (docs/BACKENDS.md).
 */
#ifndef ST_BACKEND_OPEN_H
#define ST_BACKEND_OPEN_H

#include "backend/st_backend.h"

/*!
 * Opens the store at url: "file:///absolute/dir" (created if missing) or
 * "s3://bucket[/prefix]" (docs/S3.md). ST_ERR_INVALID for a malformed or
 * unknown URL, ST_ERR_UNSUPPORTED for a known scheme not built in; the
 * message says why. *out is a malloc'd st_backend; free it with
 * st_backend_close(), which calls ops->close(ctx) and then frees it.
 * The backend comes wrapped in the retry wrapper (st_backend_retry.h), so a
 * ST_ERR_TRANSIENT from it means the retries are used up.
 * st_backend_open(url, out) is st_backend_open_opts(url, NULL, out).
 */
st_err st_backend_open(const char *url, st_backend **out);
st_err st_backend_open_opts(const char *url, const st_backend_opts *opts, st_backend **out);
st_err st_backend_open(const char *url, st_backend **out);
st_err st_backend_open_opts(const char *url, const st_backend_opts *opts, st_backend **out);

#endif
