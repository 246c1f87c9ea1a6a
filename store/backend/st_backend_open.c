/*
 * st_backend_open — URL dispatch to a backend (st_backend_open.h).
 *
 * Adding a backend is one row in st_backend_schemes[] below (plus passing
 * tests/unit/backend_conformance.h); see docs/BACKENDS.md.
 *
 * Threads: stateless apart from the const scheme table.
 */
#include "backend/st_backend_open.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

#include "backend/st_backend_retry.h"
#include "util/st_hash.h"
#include "backend/st_s3_common.h"

typedef st_err (*st_backend_open_fn)(const char *url, const st_backend_opts *opts,
                                     st_backend **out);

static st_err file_url_open(const char *url, const st_backend_opts *opts, st_backend **out);
static st_err s3_url_open(const char *url, const st_backend_opts *opts, st_backend **out);

/*
 * One row per URL scheme. A NULL open function names a scheme we know but
 * have not built, so the user gets "not built" rather than "unknown scheme".
 * Adding a backend: replace NULL by its open function (it receives the whole
 * URL and parses the rest itself).
 */
static const struct {
    const char *scheme;
    st_backend_open_fn open;
} st_backend_schemes[] = {
    {"file", file_url_open},
    {"s3", s3_url_open},
};

/*
 * file:///abs/dir or file://localhost/abs/dir (RFC 8089). Percent-escapes
 * %XX are decoded, except %00 (it would cut the path) and %2F (an encoded
 * '/' cannot be a path separator and cannot be inside a name either).
 * Queries and fragments are refused rather than silently ignored.
 */
static st_err file_url_open(const char *url, const st_backend_opts *opts, st_backend **out)
{
    const char *rest = url + strlen("file:");
    if (strncmp(rest, "//", 2) != 0)
        return st_seterr(ST_ERR_INVALID, "store URL \"%.200s\": expected file:///absolute/dir",
                         url);
    rest += 2;
    const char *path = strchr(rest, '/');
    size_t host_len = path ? (size_t)(path - rest) : strlen(rest);
    if (host_len != 0 && !(host_len == 9 && strncasecmp(rest, "localhost", 9) == 0))
        return st_seterr(ST_ERR_INVALID,
                         "store URL \"%.200s\": host \"%.*s\" is not supported (file:// URLs are "
                         "local: use file:///absolute/dir)",
                         url, (int)(host_len > 64 ? 64 : host_len), rest);
    if (!path || path[1] == '\0')
        return st_seterr(ST_ERR_INVALID,
                         "store URL \"%.200s\": needs an absolute directory below '/', as in "
                         "file:///var/lib/ckpt",
                         url);
    if (strpbrk(path, "?#"))
        return st_seterr(ST_ERR_INVALID,
                         "store URL \"%.200s\": queries and fragments ('?', '#') are not supported",
                         url);

    size_t n = strlen(path);
    if (n >= PATH_MAX)
        return st_seterr(ST_ERR_INVALID, "store URL: path longer than PATH_MAX");
    char root[PATH_MAX];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (path[i] != '%') {
            root[o++] = path[i];
            continue;
        }
        int hi = i + 1 < n ? st_hex_value(path[i + 1]) : -1;
        int lo = i + 2 < n ? st_hex_value(path[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            return st_seterr(ST_ERR_INVALID,
                             "store URL \"%.200s\": malformed percent-escape at offset %zu", url,
                             (size_t)(path - url) + i);
        int c = hi << 4 | lo;
        if (c == 0 || c == '/')
            return st_seterr(
                ST_ERR_INVALID,
                "store URL \"%.200s\": percent-escape %%%c%c is not supported in a path", url,
                path[i + 1], path[i + 2]);
        root[o++] = (char)c;
        i += 2;
    }
    root[o] = '\0';
    return st_backend_file_open_existing(root, opts && opts->existing_only, out);
}

/* s3://: signature V4 on libcurl unless V2 (libs3) is asked for
 * (--s3-signature, $CKPT_S3_SIGNATURE; docs/S3.md). */
static st_err s3_url_open(const char *url, const st_backend_opts *opts, st_backend **out)
{
    st_s3_signature sig;
    st_err e = st_s3_signature_choice(opts, &sig);
    if (e)
        return e;
    return sig == ST_S3_SIG_V2 ? st_backend_s3_open(url, opts, out)
                               : st_backend_s3v4_open(url, opts, out);
}

st_err st_backend_open(const char *url, st_backend **out)
{
    return st_backend_open_opts(url, NULL, out);
}

/*
 * Every backend comes wrapped in the retry wrapper: S3 needs it (timeouts,
 * 5xx, resets), and file:// gets it too because its ST_ERR_TRANSIENT cases
 * (ESTALE/ETIMEDOUT on NFS, a directory that kept vanishing under
 * concurrent deletes) are exactly what a later try fixes; for every other
 * result the wrapper adds nothing but a function call.
 */
static st_err open_wrapped(st_backend_open_fn open, const char *url, const st_backend_opts *opts,
                           st_backend **out)
{
    st_backend *inner = NULL;
    st_err e = open(url, opts, &inner);
    if (e)
        return e;
    st_retry_policy policy = {0};
    if (opts)
        policy = (st_retry_policy){.attempts = opts->retry_attempts,
                                   .base_ms = opts->retry_base_ms,
                                   .max_ms = opts->retry_max_ms,
                                   .observer = opts->observer};
    e = st_backend_retry_wrap(inner, &policy, out);
    if (e)
        st_backend_close(inner);
    return e;
}

st_err st_backend_open_opts(const char *url, const st_backend_opts *opts, st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_open: out is NULL");
    *out = NULL;
    if (!url || !*url)
        return st_seterr(ST_ERR_INVALID, "store URL is empty");
    const char *colon = strchr(url, ':');
    if (!colon || strncmp(colon, "://", 3) != 0)
        return st_seterr(
            ST_ERR_INVALID,
            "store URL \"%.200s\": expected scheme://..., e.g. file:///var/lib/ckpt or "
            "s3://bucket/prefix",
            url);
    size_t scheme_len = (size_t)(colon - url);
    for (size_t i = 0; i < sizeof st_backend_schemes / sizeof st_backend_schemes[0]; i++) {
        const char *s = st_backend_schemes[i].scheme;
        /* Schemes are case-insensitive (RFC 3986 section 3.1). */
        if (strlen(s) != scheme_len || strncasecmp(url, s, scheme_len) != 0)
            continue;
        if (!st_backend_schemes[i].open)
            return st_seterr(ST_ERR_UNSUPPORTED,
                             "store URL \"%.200s\": %s:// backend not built yet", url, s);
        return open_wrapped(st_backend_schemes[i].open, url, opts, out);
    }
    return st_seterr(ST_ERR_INVALID, "store URL \"%.200s\": unknown scheme \"%.*s\"", url,
                     (int)(scheme_len > 32 ? 32 : scheme_len), url);
}
