/*
 * st_backend_mem — the in-memory backend (see st_backend_mem.h): a store is
 * one array of objects sorted by key in strcmp (byte) order, so a get or
 * stat is a binary search and a list is a walk from the prefix's lower bound.
 *
 * Invariants: objs[0..n) is strictly ascending by key; every object owns its
 * key and a private copy of its bytes (data is never NULL, even for an empty
 * object, so no memcpy ever sees NULL). Keys reaching the ops were validated
 * by st_backend.c's wrappers, so they are not checked again here.
 *
 * Atomicity: a put replaces the object's bytes in one step under the lock
 * (a put_new finds the key absent and inserts it in the same section),
 * and a get copies them out under it, so a reader sees the old object or the
 * whole new one. Bytes are copied in before and freed after the lock is
 * held, so the critical sections are short.
 *
 * Threads: mem_store.lock guards every field of mem_store; several handles
 * (st_backend_mem_share) point at one store and count in refs.
 */
#include "st_backend_mem.h"

#include "util/st_array.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mem_object {
    char *key;
    uint8_t *data; /* malloc'd, never NULL */
    size_t len;
    int64_t mtime_ns; /* the store's clock (mem_clock_ns) at its last put */
} mem_object;

typedef struct mem_store {
    pthread_mutex_t lock;
    mem_object *objs; /* sorted by key (lock) */
    size_t n, cap;    /* (lock) */
    unsigned refs;    /* open handles (lock) */
} mem_store;

/* st_array_lower_bound's order of s->objs: by key. */
static int cmp_obj_key(const void *key, const void *obj)
{
    return strcmp(key, ((const mem_object *)obj)->key);
}

/* Index of key in s, or of where it would be inserted; *found says which. */
static size_t lower_bound(const mem_store *s, const char *key, int *found)
{
    return st_array_lower_bound(s->objs, s->n, sizeof *s->objs, key, cmp_obj_key, found);
}

/* The store's clock: this process's wall clock (one process is one host). */
static int64_t mem_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static st_err no_such(const char *op, const char *key)
{
    return st_seterr(ST_ERR_NOT_FOUND, "mem store: %s %s: no such object", op, key);
}

/* put, and put_new (create_only: an existing key is ST_ERR_EXISTS, checked
 * under the lock, so exactly one of two racing creates lands). */
static st_err put_object(mem_store *s, const char *key, const void *data, size_t len,
                         int create_only)
{
    uint8_t *copy = malloc(len ? len : 1);
    char *kcopy = NULL;
    if (!copy)
        return st_seterr(ST_ERR_NOMEM, "mem store: put %s: out of memory", key);
    if (len)
        memcpy(copy, data, len);

    st_err e = ST_OK;
    uint8_t *old = NULL;
    pthread_mutex_lock(&s->lock);
    int found;
    size_t i = lower_bound(s, key, &found);
    if (found && create_only) {
        e = st_seterr(ST_ERR_EXISTS, "mem store: put %s: exists", key);
    } else if (found) {
        old = s->objs[i].data;
        s->objs[i].data = copy;
        s->objs[i].len = len;
        s->objs[i].mtime_ns = mem_clock_ns();
        copy = NULL;
    } else if ((e = st_array_grow((void **)&s->objs, &s->cap, s->n + 1, sizeof *s->objs))) {
        /* copy is freed below */
    } else if (!(kcopy = strdup(key))) {
        e = st_seterr(ST_ERR_NOMEM, "mem store: put %s: out of memory", key);
    } else {
        memmove(s->objs + i + 1, s->objs + i, (s->n - i) * sizeof *s->objs);
        s->objs[i] = (mem_object){kcopy, copy, len, mem_clock_ns()};
        s->n++;
        copy = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    free(old);
    free(copy);
    return e;
}

static st_err mem_put(void *ctx, const char *key, const void *data, size_t len)
{
    return put_object(ctx, key, data, len, 0);
}

static st_err mem_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    return put_object(ctx, key, data, len, 1);
}

static st_err mem_get(void *ctx, const char *key, uint64_t offset, uint64_t len, st_bytes *out)
{
    mem_store *s = ctx;
    st_err e = ST_OK;
    st_bytes_clear(out);
    pthread_mutex_lock(&s->lock);
    int found;
    size_t i = lower_bound(s, key, &found);
    if (!found) {
        e = no_such("get", key);
    } else if (offset > s->objs[i].len) {
        e = st_seterr(ST_ERR_INVALID,
                      "mem store: get %s: offset %" PRIu64 " past the end (size %zu)", key, offset,
                      s->objs[i].len);
    } else {
        uint64_t left = s->objs[i].len - offset;
        size_t n = (size_t)(left < len ? left : len);
        e = st_bytes_append(out, s->objs[i].data + offset, n);
    }
    pthread_mutex_unlock(&s->lock);
    return e;
}

/* Streamed pieces of an odd size, so that a sink meets chunks split across
 * pieces everywhere (as a network transport delivers them). */
#define MEM_STREAM_PIECE 65521

/* A streamed get: a copy taken under the lock, then handed on unlocked (the
 * sink may call the store) in MEM_STREAM_PIECE pieces. */
static st_err mem_get_stream(void *ctx, const char *key, uint64_t offset, uint64_t len,
                             const st_get_sink *sink)
{
    st_bytes body = {0};
    st_err e = mem_get(ctx, key, offset, len, &body);
    for (size_t at = 0; !e && at < body.len; at += MEM_STREAM_PIECE) {
        size_t n = body.len - at < MEM_STREAM_PIECE ? body.len - at : MEM_STREAM_PIECE;
        e = sink->on_bytes(sink->arg, at, body.data + at, n);
    }
    st_bytes_free(&body);
    return e;
}

static st_err mem_stat(void *ctx, const char *key, uint64_t *size)
{
    mem_store *s = ctx;
    st_err e = ST_OK;
    pthread_mutex_lock(&s->lock);
    int found;
    size_t i = lower_bound(s, key, &found);
    if (found)
        *size = s->objs[i].len;
    else
        e = no_such("stat", key);
    pthread_mutex_unlock(&s->lock);
    return e;
}

static st_err mem_stat_time(void *ctx, const char *key, st_store_time *t)
{
    mem_store *s = ctx;
    st_err e = ST_OK;
    pthread_mutex_lock(&s->lock);
    int found = 1;
    size_t i = key ? lower_bound(s, key, &found) : 0;
    if (key && found)
        t->mtime_ns = s->objs[i].mtime_ns;
    else if (key)
        e = no_such("stat", key);
    t->now_ns = mem_clock_ns();
    pthread_mutex_unlock(&s->lock);
    return e;
}

/* What a listing saw: keys and sizes copied out under the lock. */
typedef struct mem_listing {
    char **keys;
    uint64_t *sizes;
    size_t n, cap, sizes_cap;
} mem_listing;

static void listing_free(mem_listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i]);
    free(l->keys);
    free(l->sizes);
}

/* Copies the keys under prefix (lock held). */
static st_err listing_take(const mem_store *s, const char *prefix, mem_listing *l)
{
    size_t plen = strlen(prefix);
    int found;
    for (size_t i = lower_bound(s, prefix, &found); i < s->n; i++) {
        if (strncmp(s->objs[i].key, prefix, plen) != 0)
            break; /* sorted: every key with the prefix is in one run from its lower bound */
        st_err e = st_array_grow((void **)&l->keys, &l->cap, l->n + 1, sizeof *l->keys);
        if (!e)
            e = st_array_grow((void **)&l->sizes, &l->sizes_cap, l->n + 1, sizeof *l->sizes);
        if (e)
            return e;
        if (!(l->keys[l->n] = strdup(s->objs[i].key)))
            return st_seterr(ST_ERR_NOMEM, "mem store: list %s: out of memory", prefix);
        l->sizes[l->n++] = s->objs[i].len;
    }
    return ST_OK;
}

static st_err mem_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    mem_store *s = ctx;
    mem_listing l = {0};
    pthread_mutex_lock(&s->lock);
    st_err e = listing_take(s, prefix, &l);
    pthread_mutex_unlock(&s->lock);
    /* The callback runs unlocked: it may put, get or delete meanwhile. */
    for (size_t i = 0; !e && i < l.n; i++)
        if (cb(arg, l.keys[i], l.sizes[i]) != 0)
            break;
    listing_free(&l);
    return e;
}

static st_err mem_del(void *ctx, const char *key)
{
    mem_store *s = ctx;
    mem_object gone = {0};
    pthread_mutex_lock(&s->lock);
    int found;
    size_t i = lower_bound(s, key, &found);
    if (found) {
        gone = s->objs[i];
        memmove(s->objs + i, s->objs + i + 1, (s->n - i - 1) * sizeof *s->objs);
        s->n--;
    }
    pthread_mutex_unlock(&s->lock);
    free(gone.key);
    free(gone.data);
    return ST_OK;
}

static void mem_close(void *ctx)
{
    mem_store *s = ctx;
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    unsigned left = --s->refs;
    pthread_mutex_unlock(&s->lock);
    if (left)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->objs[i].key);
        free(s->objs[i].data);
    }
    free(s->objs);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const st_backend_ops mem_ops = {
    .scheme = "mem",
    .put = mem_put,
    .get = mem_get,
    .get_stream = mem_get_stream,
    .stat = mem_stat,
    .stat_time = mem_stat_time,
    .list = mem_list,
    .del = mem_del,
    .close = mem_close,
    .put_new = mem_put_new,
};

/* A new handle on s, counted in s->refs. */
static st_err handle_new(mem_store *s, st_backend **out)
{
    st_backend *b = malloc(sizeof *b);
    if (!b)
        return st_seterr(ST_ERR_NOMEM, "mem store: out of memory");
    pthread_mutex_lock(&s->lock);
    s->refs++;
    pthread_mutex_unlock(&s->lock);
    b->ops = &mem_ops;
    b->ctx = s;
    *out = b;
    return ST_OK;
}

st_err st_backend_mem_open(st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_mem_open: out is NULL");
    *out = NULL;
    mem_store *s = calloc(1, sizeof *s);
    if (!s)
        return st_seterr(ST_ERR_NOMEM, "mem store: out of memory");
    pthread_mutex_init(&s->lock, NULL);
    st_err e = handle_new(s, out);
    if (e) {
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
    return e;
}

st_err st_backend_mem_share(st_backend *b, st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_mem_share: out is NULL");
    *out = NULL;
    if (!b || b->ops != &mem_ops)
        return st_seterr(ST_ERR_INVALID, "st_backend_mem_share: not an in-memory store");
    return handle_new(b->ctx, out);
}

st_err st_backend_mem_set_mtime(st_backend *b, const char *key, int64_t mtime_ns)
{
    if (!b || b->ops != &mem_ops || !key)
        return st_seterr(ST_ERR_INVALID, "st_backend_mem_set_mtime: not an in-memory store");
    mem_store *s = b->ctx;
    pthread_mutex_lock(&s->lock);
    int found;
    size_t i = lower_bound(s, key, &found);
    if (found)
        s->objs[i].mtime_ns = mtime_ns;
    pthread_mutex_unlock(&s->lock);
    return found ? ST_OK : no_such("set_mtime", key);
}
