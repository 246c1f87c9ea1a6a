/*
 * st_backend_count — request-counting wrapper. See the header.
 */
#include "backend/st_backend_count.h"

#include <stdlib.h>

typedef struct count_ctx {
    /* Our table, masked to inner's (st_backend_ops_masked): a store without
     * batch requests is deleted through count_del and counted per key, and
     * a create or clock it lacks is refused without a count. */
    st_backend_ops ops;
    st_backend *inner;
    st_backend_counts *c;
    int owns_inner; /* close closes inner too */
} count_ctx;

static st_req_result result_of(st_err e)
{
    switch (e) {
    case ST_OK: return ST_REQ_OK;
    case ST_ERR_NOT_FOUND: return ST_REQ_NOT_FOUND;
    case ST_ERR_TRANSIENT: return ST_REQ_TRANSIENT;
    default: return ST_REQ_ERROR;
    }
}

/* Counts a request that returned e, and passes e on. */
static st_err counted(count_ctx *x, st_req_kind kind, st_err e)
{
    atomic_fetch_add(&x->c->n[kind][result_of(e)], 1);
    return e;
}

static st_err count_put(void *ctx, const char *key, const void *data, size_t len)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_PUT, x->inner->ops->put(x->inner->ctx, key, data, len));
}

/* A create is a PUT. "Exists" is an answer, counted ok; "unsupported"
 * sent nothing and is not counted. */
static st_err count_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    count_ctx *x = ctx;
    st_err e = x->inner->ops->put_new(x->inner->ctx, key, data, len);
    if (e != ST_ERR_UNSUPPORTED)
        counted(x, ST_REQ_PUT, e == ST_ERR_EXISTS ? ST_OK : e);
    return e;
}

static st_err count_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_GET, x->inner->ops->get(x->inner->ctx, key, off, len, out));
}

/* One streamed GET is one request, whether the inner backend streams or
 * falls back on its get. */
static st_err count_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_GET, st_get_stream(x->inner, key, off, len, sink));
}

static st_err count_stat(void *ctx, const char *key, uint64_t *size)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_STAT, x->inner->ops->stat(x->inner->ctx, key, size));
}

/* Counted as a HEAD: it is one (S3), or a stat and a probe (file). */
static st_err count_stat_time(void *ctx, const char *key, st_store_time *t)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_STAT, st_stat_time(x->inner, key, t));
}

static st_err count_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_LIST, x->inner->ops->list(x->inner->ctx, prefix, cb, arg));
}

static st_err count_del(void *ctx, const char *key)
{
    count_ctx *x = ctx;
    return counted(x, ST_REQ_DELETE, x->inner->ops->del(x->inner->ctx, key));
}

static st_err count_del_many(void *ctx, st_del_item *items, size_t n)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->keys_batch_deleted, n);
    return counted(x, ST_REQ_DELETE_BATCH, x->inner->ops->del_many(x->inner->ctx, items, n));
}

static void count_close(void *ctx)
{
    count_ctx *x = ctx;
    if (x->owns_inner)
        st_backend_close(x->inner);
    free(x);
}

static const st_backend_ops count_ops_template = {
    .scheme = "count",
    .put = count_put,
    .get = count_get,
    .get_stream = count_get_stream,
    .stat = count_stat,
    .stat_time = count_stat_time,
    .put_new = count_put_new,
    .list = count_list,
    .del = count_del,
    .del_many = count_del_many,
    .close = count_close,
};

static st_err wrap(st_backend *inner, st_backend_counts *counts, int owns, st_backend **out)
{
    count_ctx *x = calloc(1, sizeof *x);
    st_backend *w = calloc(1, sizeof *w);
    if (!x || !w) {
        free(x);
        free(w);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    x->inner = inner;
    x->c = counts;
    x->owns_inner = owns;
    x->ops = st_backend_ops_masked(&count_ops_template, inner);
    w->ops = &x->ops;
    w->ctx = x;
    *out = w;
    return ST_OK;
}

st_err st_backend_count_wrap(st_backend **b, st_backend_counts *counts)
{
    return wrap(*b, counts, 1, b);
}

st_err st_backend_count_borrow(st_backend *inner, st_backend_counts *counts, st_backend **out)
{
    return wrap(inner, counts, 0, out);
}

uint64_t st_backend_counts_of(const st_backend_counts *c, st_req_kind kind)
{
    uint64_t total = 0;
    for (int r = 0; r < ST_REQ_RESULTS; r++)
        total += atomic_load(&c->n[kind][r]);
    return total;
}

const char *st_req_kind_name(st_req_kind kind)
{
    static const char *const names[ST_REQ_KINDS] = {"put",  "get",    "stat",
                                                    "list", "delete", "delete_batch"};
    return (unsigned)kind < ST_REQ_KINDS ? names[kind] : "?";
}

const char *st_req_result_name(st_req_result result)
{
    static const char *const names[ST_REQ_RESULTS] = {"ok", "not_found", "transient", "error"};
    return (unsigned)result < ST_REQ_RESULTS ? names[result] : "?";
}
