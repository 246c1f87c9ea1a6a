/*
 * st_backend — key rules, URL dispatch to a backend, and the validating
 * wrappers every caller goes through (st_put, st_get, st_stat, st_list,
 * st_del).
 *
 * Invariants: no key that fails st_key_is_valid() ever reaches a backend's
 * ops, so a backend may map keys to paths or URLs without re-checking them
 * for escapes ("..", leading '/', hidden names). A list prefix passes the same
 * rules except that it may be empty or end in '/'.
 *
 * Adding a backend is one row in st_backend_schemes[] below (plus passing
 * tests/unit/backend_conformance.h); see docs/BACKENDS.md.
 *
 * Threads: everything here is stateless apart from the const scheme table,
 * so any thread may call any function; concurrency on one backend instance
 * is the backend's business (see st_backend.h).
 */
#include "backend/st_backend.h"
#include "backend/st_backend_retry.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- key rules ---- */

static int key_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '/';
}

/*
 * Checks the key rules; with allow_prefix, "" and a trailing '/' are also
 * accepted (a list prefix only has to be the start of some valid key).
 * Returns NULL if acceptable, else a short reason for the error message.
 */
static const char *key_check(const char *key, int allow_prefix)
{
    if (!key)
        return "key is NULL";
    size_t n = strnlen(key, ST_KEY_MAX + 1);
    if (n > ST_KEY_MAX)
        return "key longer than ST_KEY_MAX";
    if (n == 0)
        return allow_prefix ? NULL : "key is empty";
    if (key[0] == '/')
        return "key starts with '/'";
    if (key[n - 1] == '/' && !allow_prefix)
        return "key ends with '/'";
    int at_component_start = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (!key_char_ok(c))
            return "key has a character outside [A-Za-z0-9._/-]";
        if (at_component_start && c == '/')
            return "key has an empty component (\"//\")";
        /* A leading '.' covers ".", ".." and the file backend's ".tmp." names. */
        if (at_component_start && c == '.')
            return "key has a component starting with '.'";
        at_component_start = (c == '/');
    }
    return NULL;
}

int st_key_is_valid(const char *key)
{
    return key_check(key, 0) == NULL;
}

/* Validates a key for an operation; the message names the op and the reason
 * but quotes at most a bounded part of the key, which may be garbage. */
static st_err key_require(const char *op, const char *key, int allow_prefix)
{
    const char *why = key_check(key, allow_prefix);
    if (!why)
        return ST_OK;
    return st_seterr(ST_ERR_INVALID, "%s: invalid %s \"%.64s%s\": %s", op,
                     allow_prefix ? "prefix" : "key", key ? key : "(null)",
                     key && strnlen(key, 65) > 64 ? "..." : "", why);
}

/* ---- URL dispatch ---- */

typedef st_err (*st_backend_open_fn)(const char *url, const st_backend_opts *opts,
                                     st_backend **out);

static st_err file_url_open(const char *url, const st_backend_opts *opts, st_backend **out);

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
    {"s3", st_backend_s3_open},
};

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * file:///abs/dir or file://localhost/abs/dir (RFC 8089). Percent-escapes
 * %XX are decoded, except %00 (it would cut the path) and %2F (an encoded
 * '/' cannot be a path separator and cannot be inside a name either).
 * Queries and fragments are refused rather than silently ignored.
 */
static st_err file_url_open(const char *url, const st_backend_opts *opts, st_backend **out)
{
    (void)opts; /* nothing to tune in a file store */
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
        int hi = i + 1 < n ? hex_digit(path[i + 1]) : -1;
        int lo = i + 2 < n ? hex_digit(path[i + 2]) : -1;
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
    return st_backend_file_open(root, out);
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
                                   .max_ms = opts->retry_max_ms};
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

void st_backend_close(st_backend *b)
{
    if (!b)
        return;
    if (b->ops && b->ops->close)
        b->ops->close(b->ctx);
    free(b);
}

/* ---- validating wrappers ---- */

st_err st_put(st_backend *b, const char *key, const void *data, size_t len)
{
    st_err e = key_require("put", key, 0);
    if (e)
        return e;
    if (!data && len)
        return st_seterr(ST_ERR_INVALID, "put %s: data is NULL with len %zu", key, len);
    return b->ops->put(b->ctx, key, data, len);
}

st_err st_get(st_backend *b, const char *key, uint64_t offset, uint64_t len, st_bytes *out)
{
    if (out)
        st_bytes_clear(out); /* on any error, out is empty */
    st_err e = key_require("get", key, 0);
    if (e)
        return e;
    if (!out)
        return st_seterr(ST_ERR_INVALID, "get %s: out is NULL", key);
    return b->ops->get(b->ctx, key, offset, len, out);
}

st_err st_stat(st_backend *b, const char *key, uint64_t *size)
{
    st_err e = key_require("stat", key, 0);
    if (e)
        return e;
    if (!size)
        return st_seterr(ST_ERR_INVALID, "stat %s: size is NULL", key);
    return b->ops->stat(b->ctx, key, size);
}

st_err st_list(st_backend *b, const char *prefix, st_list_cb cb, void *arg)
{
    st_err e = key_require("list", prefix, 1);
    if (e)
        return e;
    if (!cb)
        return st_seterr(ST_ERR_INVALID, "list %s: callback is NULL", prefix);
    return b->ops->list(b->ctx, prefix, cb, arg);
}

st_err st_del(st_backend *b, const char *key)
{
    st_err e = key_require("del", key, 0);
    if (e)
        return e;
    return b->ops->del(b->ctx, key);
}
