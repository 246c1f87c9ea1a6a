/*
 * st_backend_count — request-counting wrapper. See the header.
 */
#include "backend/st_backend_count.h"

#include <stdlib.h>

typedef struct count_ctx {
    /* Our table: del_many only when inner has it, so that a store without
     * batch requests is deleted through count_del and counted per key. */
    st_backend_ops ops;
    st_backend *inner;
    st_backend_counts *c;
} count_ctx;

static st_err count_put(void *ctx, const char *key, const void *data, size_t len)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->put, 1);
    return x->inner->ops->put(x->inner->ctx, key, data, len);
}

static st_err count_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->get, 1);
    return x->inner->ops->get(x->inner->ctx, key, off, len, out);
}

static st_err count_stat(void *ctx, const char *key, uint64_t *size)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->stat, 1);
    return x->inner->ops->stat(x->inner->ctx, key, size);
}

static st_err count_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->list, 1);
    return x->inner->ops->list(x->inner->ctx, prefix, cb, arg);
}

static st_err count_del(void *ctx, const char *key)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->del, 1);
    return x->inner->ops->del(x->inner->ctx, key);
}

static st_err count_del_many(void *ctx, st_del_item *items, size_t n)
{
    count_ctx *x = ctx;
    atomic_fetch_add(&x->c->delete_batch, 1);
    atomic_fetch_add(&x->c->keys_batch_deleted, n);
    return x->inner->ops->del_many(x->inner->ctx, items, n);
}

static void count_close(void *ctx)
{
    count_ctx *x = ctx;
    st_backend_close(x->inner);
    free(x);
}

static const st_backend_ops count_ops_template = {
    .scheme = "count",
    .put = count_put,
    .get = count_get,
    .stat = count_stat,
    .list = count_list,
    .del = count_del,
    .del_many = count_del_many,
    .close = count_close,
};

st_err st_backend_count_wrap(st_backend **b, st_backend_counts *counts)
{
    count_ctx *x = calloc(1, sizeof *x);
    st_backend *w = calloc(1, sizeof *w);
    if (!x || !w) {
        free(x);
        free(w);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    x->inner = *b;
    x->c = counts;
    x->ops = count_ops_template;
    if (!x->inner->ops->del_many)
        x->ops.del_many = NULL;
    w->ops = &x->ops;
    w->ctx = x;
    *b = w;
    return ST_OK;
}
