/*
 * st_backend — key rules and the validating wrappers every caller goes
 * through (st_put, st_get, st_get_stream, st_stat, st_list, st_del, st_del_many), and the
 * generic batched delete and streamed GET for backends without their own, and the forwarders
 * a wrapper's table names for the ops it passes through (st_wrap_*). Opening a backend
 * from a URL is st_backend_open.c, a layer above the backends.
 *
 * Invariants: no key that fails st_key_is_valid() ever reaches a backend's
 * ops, so a backend may map keys to paths or URLs without re-checking them
 * for escapes ("..", leading '/', hidden names). A list prefix passes the same
 * rules except that it may be empty or end in '/'.
 *
 * Threads: everything here is stateless so any thread may call any function; concurrency on one
 * backend instance is the backend's business (see st_backend.h).
 */
#include "backend/st_backend.h"

#include "util/st_logf.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
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

void st_backend_close(st_backend *b)
{
    if (!b)
        return;
    if (b->ops && b->ops->close)
        b->ops->close(b->ctx);
    free(b);
}

/* ---- validating wrappers ---- */

/* The arguments of st_put and st_put_new. */
static st_err put_args_check(const char *key, const void *data, size_t len)
{
    st_err e = key_require("put", key, 0);
    if (!e && !data && len)
        e = st_seterr(ST_ERR_INVALID, "put %s: data is NULL with len %zu", key, len);
    return e;
}

st_err st_put(st_backend *b, const char *key, const void *data, size_t len)
{
    st_err e = put_args_check(key, data, len);
    return e ? e : b->ops->put(b->ctx, key, data, len);
}

st_err st_put_new(st_backend *b, const char *key, const void *data, size_t len)
{
    st_err e = put_args_check(key, data, len);
    if (e)
        return e;
    if (!b->ops->put_new)
        return st_seterr(ST_ERR_UNSUPPORTED, "put %s: the %s store has no conditional create", key,
                         b->ops->scheme);
    return b->ops->put_new(b->ctx, key, data, len);
}

/* An existing key met by a create of data: are these its bytes? A
 * retried create meets its own first try, so "exists" is no refusal by
 * itself (docs/PROTOCOL.md). */
static st_err same_bytes_stored(st_backend *b, const char *key, const void *data, size_t len)
{
    st_bytes got = {0};
    st_err e = st_get(b, key, 0, ST_GET_TO_END, &got);
    if (e == ST_ERR_NOT_FOUND) /* deleted since: the caller's retry creates it */
        e = st_seterr(ST_ERR_TRANSIENT, "put %s: it existed, then did not (deleted since)", key);
    else if (!e && (got.len != len || (len && memcmp(got.data, data, len) != 0)))
        e = st_seterr(ST_ERR_BUSY,
                      "put %s: the store already holds other bytes under this name (%zu "
                      "bytes, ours %zu); nothing replaced",
                      key, got.len, len);
    st_bytes_free(&got);
    return e;
}

st_err st_put_once(st_backend *b, const char *key, const void *data, size_t len, st_once_kind kind,
                   int *created)
{
    st_err e = st_put_new(b, key, data, len);
    if (e == ST_ERR_UNSUPPORTED)
        e = st_put(b, key, data, len);
    if (created)
        *created = e == ST_OK;
    if (e != ST_ERR_EXISTS)
        return e;
    st_clearerr();
    return kind == ST_ONCE_NAMED_BY_CONTENT ? ST_OK : same_bytes_stored(b, key, data, len);
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

st_err st_get_stream(st_backend *b, const char *key, uint64_t offset, uint64_t len,
                     const st_get_sink *sink)
{
    st_err e = key_require("get", key, 0);
    if (e)
        return e;
    if (!sink || !sink->on_bytes)
        return st_seterr(ST_ERR_INVALID, "get %s: no sink", key);
    if (b->ops->get_stream)
        return b->ops->get_stream(b->ctx, key, offset, len, sink);
    return st_get_stream_by_get(b->ops->get, b->ctx, key, offset, len, sink);
}

/* st_get_into's sink: the pieces in order, within the range. */
typedef struct into_buffer {
    uint8_t *data;
    uint64_t len, received;
} into_buffer;

static st_err into_on_bytes(void *arg, uint64_t at, const uint8_t *data, size_t len)
{
    into_buffer *w = arg;
    if (at != w->received || len > w->len - w->received)
        return st_seterr(ST_ERR_CORRUPT, "the store sent more bytes than the range asked for");
    memcpy(w->data + at, data, len);
    w->received += len;
    return ST_OK;
}

st_err st_get_into(st_backend *b, const char *key, uint64_t offset, uint64_t len, uint8_t *into,
                   uint64_t *received)
{
    into_buffer w = {.data = into, .len = len};
    const st_get_sink sink = {into_on_bytes, &w};
    st_err e = st_get_stream(b, key, offset, len, &sink);
    *received = w.received;
    return e;
}

st_err st_get_stream_by_get(st_err (*get)(void *ctx, const char *key, uint64_t off, uint64_t len,
                                          st_bytes *out),
                            void *ctx, const char *key, uint64_t offset, uint64_t len,
                            const st_get_sink *sink)
{
    st_bytes body = {0};
    st_err e = get(ctx, key, offset, len, &body);
    if (!e && body.len)
        e = sink->on_bytes(sink->arg, 0, body.data, body.len);
    st_bytes_free(&body);
    return e;
}

st_err st_get_keep_range(st_bytes *body, const char *key, uint64_t offset, uint64_t len)
{
    if (offset > body->len)
        return st_seterr(ST_ERR_INVALID, "get %s: offset %llu past its end", key,
                         (unsigned long long)offset);
    uint64_t n = len == ST_GET_TO_END || len > body->len - offset ? body->len - offset : len;
    if (offset)
        memmove(body->data, body->data + offset, n);
    body->len = n;
    return ST_OK;
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

st_err st_stat_time(st_backend *b, const char *key, st_store_time *t)
{
    st_err e = key ? key_require("stat_time", key, 0) : ST_OK;
    if (e)
        return e;
    if (!t)
        return st_seterr(ST_ERR_INVALID, "stat_time: t is NULL");
    if (!b->ops->stat_time)
        return st_seterr(ST_ERR_PERMANENT, "the %s store keeps no clock to judge ages by",
                         b->ops->scheme);
    memset(t, 0, sizeof *t);
    return b->ops->stat_time(b->ctx, key, t);
}

st_err st_store_age(st_backend *b, const char *key, int64_t *at_least_ns, int64_t *at_most_ns)
{
    st_store_time t;
    st_err e = key ? st_stat_time(b, key, &t) : st_seterr(ST_ERR_INVALID, "store_age: key is NULL");
    if (e)
        return e;
    int64_t age = t.now_ns - t.mtime_ns;
    if (at_least_ns)
        *at_least_ns = age - t.slack_ns;
    if (at_most_ns)
        *at_most_ns = age + t.slack_ns < 0 ? INT64_MAX : age + t.slack_ns;
    return ST_OK;
}

/* ---- batched delete ---- */

st_err st_del_items_result(const st_del_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].err)
            return items[i].err;
    return ST_OK;
}

/* The first failure of a batch and its message: the one the caller gets,
 * although later keys overwrite the thread's message. */
typedef struct first_failure {
    st_err e;
    char msg[512];
} first_failure;

static void first_failure_note(first_failure *f, st_err e)
{
    if (e && !f->e) {
        f->e = e;
        snprintf(f->msg, sizeof f->msg, "%s", st_errmsg());
    }
}

static st_err first_failure_result(const first_failure *f)
{
    return f->e ? st_seterr(f->e, "%s", f->msg) : ST_OK;
}

st_err st_del_many_each(st_err (*del)(void *ctx, const char *key), void *ctx, st_del_item *items,
                        size_t n)
{
    first_failure first = {0};
    for (size_t i = 0; i < n; i++) {
        items[i].err = del(ctx, items[i].key);
        first_failure_note(&first, items[i].err);
    }
    return first_failure_result(&first);
}

st_err st_del_many(st_backend *b, st_del_item *items, size_t n)
{
    if (n && !items)
        return st_seterr(ST_ERR_INVALID, "del_many: items is NULL with n %zu", n);
    for (size_t i = 0; i < n; i++) {
        st_err e = key_require("del_many", items[i].key, 0);
        if (e) {
            for (size_t j = 0; j < n; j++)
                items[j].err = e;
            return e;
        }
    }
    first_failure first = {0};
    for (size_t at = 0; at < n; at += ST_DEL_BATCH_MAX) {
        size_t m = n - at < ST_DEL_BATCH_MAX ? n - at : ST_DEL_BATCH_MAX;
        first_failure_note(&first, b->ops->del_many
                                       ? b->ops->del_many(b->ctx, items + at, m)
                                       : st_del_many_each(b->ops->del, b->ctx, items + at, m));
    }
    return first_failure_result(&first);
}

st_backend_ops st_backend_ops_masked(const st_backend_ops *tmpl, const st_backend *inner)
{
    st_backend_ops ops = *tmpl;
    if (!inner->ops->del_many)
        ops.del_many = NULL;
    if (!inner->ops->stat_time)
        ops.stat_time = NULL;
    if (!inner->ops->put_new)
        ops.put_new = NULL;
    return ops;
}

/* ---- pass-through forwarders of wrappers ---- */

/* The inner backend of a wrapper's ctx (st_backend_wrap first in it). */
static st_backend *wrapped(void *ctx)
{
    return ((st_backend_wrap *)ctx)->inner;
}

st_err st_wrap_put(void *ctx, const char *key, const void *data, size_t len)
{
    st_backend *inner = wrapped(ctx);
    return inner->ops->put(inner->ctx, key, data, len);
}

st_err st_wrap_stat(void *ctx, const char *key, uint64_t *size)
{
    st_backend *inner = wrapped(ctx);
    return inner->ops->stat(inner->ctx, key, size);
}

st_err st_wrap_stat_time(void *ctx, const char *key, st_store_time *t)
{
    return st_stat_time(wrapped(ctx), key, t);
}

st_err st_wrap_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    st_backend *inner = wrapped(ctx);
    return inner->ops->list(inner->ctx, prefix, cb, arg);
}

st_err st_wrap_del(void *ctx, const char *key)
{
    st_backend *inner = wrapped(ctx);
    return inner->ops->del(inner->ctx, key);
}

st_err st_wrap_del_many(void *ctx, st_del_item *items, size_t n)
{
    st_backend *inner = wrapped(ctx);
    return inner->ops->del_many(inner->ctx, items, n);
}

int st_backend_observer_stops(const st_backend_observer *o)
{
    return o && o->should_stop && o->should_stop(o->arg);
}

void st_backend_observer_logf(const st_backend_observer *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st_vlogf(o ? o->log : NULL, o ? o->arg : NULL, fmt, ap);
    va_end(ap);
}
